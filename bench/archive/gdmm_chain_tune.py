"""Convergence per pass of GDMM on chains (issue 13, item 1): which knob makes GDMM need more
passes than BCFW? Tuning run on Brown **base** tags with a *validation* split carved from the
training documents (sentences ``--skip`` .. ``--skip + --val`` of the training documents, never
held for training by any run of ``gdmm_brown.py`` with ``--train <= --skip``); the test documents
are not looked at. Every peer optimizes the same objective (normalized Hamming loss).

Per pass (first pass = the stream, ``replay=0``, then ``refine(1)``): CPU seconds of learning,
the exact primal P(w) at the learner's weights, the validation token accuracy, and for GDMM the
same two numbers at the weights of the *repaired* (consistent) dual point.

    nice -n 10 python bench/gdmm_chain_tune.py --train 400 --passes 8 \\
        --configs "default;rho=0.3;rho=3;inner=3;local=3"
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import streamssvm as ss  # noqa: E402
from gdmm_brown import accuracy  # noqa: E402
from gdmm_brown import load as load_brown  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def load(n_train, skip, n_val, tags="base"):
    """The first n_train training sentences and the validation sentences skip..skip+n_val, both
    from the training documents (``gdmm_brown.load``'s split and features)."""
    tr, _, alltags = load_brown(tags, skip + n_val, 0)
    return tr[:n_train], tr[skip:skip + n_val], alltags


def parse_config(txt):
    kw = {}
    if txt in ("default", "bcfw"):
        return kw
    for part in txt.split(","):
        k, v = part.split("=")
        kw[k] = bool(int(v)) if k == "averaging" else type_of(k)(v)
    return kw


def type_of(k):
    return str if k in ("predict_with", "fmo", "solver") else (int if k in ("inner", "qp_iters", "nu", "rounds", "averaging") else float)


def repaired_eval(m, Xv, Yv):
    """Primal and validation accuracy at the repaired point's weights (swapped in, then back)."""
    lr = m._learner
    _, _, _, Wr, Tr = lr._repaired_sums()
    Wu, T = lr.Wu, lr.table.T.copy()
    lr.Wu = Wr
    lr.table.T[...] = Tr
    avg, lr.averaging, cache, lr._pred_cache = lr.averaging, False, lr._pred_cache, None   # predict with Wr, Tr
    try:
        hinge = lr._repaired_sums()[0]
        s = lr._s()
        P = 0.5 * lr.lam * s * s * float(np.vdot(Wr, Wr) + np.vdot(Tr, Tr)) + hinge / lr.n_blocks
        acc = accuracy(m.predict_many(Xv), Yv)
    finally:
        lr.Wu = Wu
        lr.table.T[...] = T
        lr.averaging, lr._pred_cache = avg, cache
    return P, acc


def grow_rho(lr, factor, cap):
    """Increasing penalty schedule (bench only): rho <- min(rho * factor, cap) before a pass, the
    scaled multipliers lam' = lam / rho rescaled so that the unscaled multipliers are kept."""
    new = min(lr.rho * factor, cap)
    if new != lr.rho:
        lr._U.lamL[...] *= lr.rho / new
        lr._U.lamR[...] *= lr.rho / new
        lr.rho = new


def run(name, learner, Xtr, Ytr, Xv, Yv, labels, passes, log, rho_growth=None, rho_cap=100.0):
    w = ss.SequenceTagger(learner=learner.clone(), labels=labels, loss="normalized")
    w.learn_many(Xtr[:3], Ytr[:3])
    w._learner.refine(1)
    w._learner.certificate()
    m = ss.SequenceTagger(learner=learner, labels=labels, loss="normalized")
    rows = []
    c0 = time.process_time()
    m.learn_many(Xtr, Ytr)
    cpu = time.process_time() - c0
    lr = m._learner
    for p in range(1, passes + 1):
        c = lr.certificate()
        acc = accuracy(m.predict_many(Xv), Yv)
        row = {"method": name, "pass": p, "cpu": cpu, "primal": c.primal, "dual": c.dual, "val_acc": acc}
        if isinstance(lr, ss.learners.GDMM):
            row["primal_rep"], row["val_acc_rep"] = repaired_eval(m, Xv, Yv)
            row["resid"] = c.extra.get("consistency_residual")
        rows.append(row)
        log(f"{name:>28} pass {p:2d} cpu {cpu:7.2f}s P={c.primal:.5f} D={c.dual:.5f} acc={acc:.4f}"
            + (f"  rep: P={row['primal_rep']:.5f} acc={row['val_acc_rep']:.4f} resid={row['resid']:.3g}"
               if "primal_rep" in row else ""))
        if p == passes:
            break
        c0 = time.process_time()
        if rho_growth:
            grow_rho(lr, rho_growth, rho_cap)
        lr.refine(1)
        cpu += time.process_time() - c0
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", type=int, default=400)
    ap.add_argument("--skip", type=int, default=6000)
    ap.add_argument("--val", type=int, default=300)
    ap.add_argument("--passes", type=int, default=8)
    ap.add_argument("--lam", type=float, default=1e-3)
    ap.add_argument("--tags", default="base")
    ap.add_argument("--configs", default="bcfw;default")
    ap.add_argument("--out", default="gdmm_chain_tune")
    args = ap.parse_args()
    tr, va, labels = load(args.train, args.skip, args.val, args.tags)
    Xtr, Ytr = zip(*tr)
    Xv, Yv = zip(*va)
    lines = []

    def log(s):
        print(s, flush=True)
        lines.append(s)
    log(f"Brown {args.tags}: {len(labels)} labels, {len(Xtr)} train sentences, {len(Xv)} validation sentences "
        f"(training documents, sentences {args.skip}..{args.skip + len(Xv)}), lam={args.lam}")
    rows = []
    for cfg in args.configs.split(";"):
        if cfg == "bcfw":
            lr = ss.learners.BCFW(lam=args.lam, replay=0, seed=0)
        else:
            kw = parse_config(cfg)
            growth = kw.pop("rho_growth", None)
            cap = kw.pop("rho_cap", 100.0)
            lr = ss.learners.GDMM(lam=args.lam, replay=0, seed=0, **kw)
        rows += run(cfg, lr, Xtr, Ytr, Xv, Yv, labels, args.passes, log,
                    rho_growth=None if cfg == "bcfw" else growth, rho_cap=None if cfg == "bcfw" else cap)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, args.out + ".json"), "w") as fh:
        json.dump({"args": vars(args), "rows": rows, "load": os.getloadavg()}, fh, indent=1)
    with open(os.path.join(RESULTS, args.out + ".md"), "w") as fh:
        fh.write(f"# GDMM chain convergence per pass (tuning split)\n\n`nice -n 10 python bench/gdmm_chain_tune.py "
                 + " ".join(f"--{k} '{v}'" for k, v in vars(args).items()) + "`\n\n```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
