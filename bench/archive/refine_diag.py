"""Why BCFW's refine pass gains little on Brown with 472 tags (issue 11 part 4): per-pass CPU,
validation accuracy (averaged and current iterate), certificate, and how gap sampling spends its
steps, for a few learner configurations.

Split (no test document is read): the training documents of ``bench/gdmm_brown.py`` (document i
with i % 5 != 4) are split again: documents with i % 5 == 3 are the **validation** documents,
i % 5 in {0, 1, 2} the training ones; the first ``--train`` sentences of the training documents
are learned, the first ``--valid`` sentences of the validation documents are scored. Features:
``gdmm_brown.token_features``; 472 fine tags declared up front.

Each configuration runs in its own process. Pass 1 = the stream (``learn_many``), pass p =
``learner.refine(1)``; times are CPU seconds (``time.process_time``) of learning only (the
certificate and the accuracy are measured untimed, after each pass).

    nice -n 10 python bench/refine_diag.py --train 10000 --valid 1500 --passes 4 --configs default lam=1e-4
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
RESULTS = os.path.join(HERE, "results")


def load_valid(n_train, n_valid):
    import gdmm_brown as gb
    from _common import brown_documents
    docs = brown_documents()
    alltags = sorted({t for _, sents in docs for s in sents for _, t in s})

    def example(s):
        words = [w for w, _ in s]
        return [gb.token_features(words, t) for t in range(len(words))], [t for _, t in s]
    tr, va = [], []
    for i, (_, sents) in enumerate(docs):
        if i % 5 == 4:
            continue   # test documents: never read here
        dest, cap = (va, n_valid) if i % 5 == 3 else (tr, n_train)
        for s in sents:
            if len(dest) >= cap:
                break
            dest.append(example(s))
    return tr, va, alltags


def parse_config(spec):
    """``default`` or ``key=value,key=value`` (BCFW keyword arguments; ``refine=sweep`` etc. are
    handled by the driver)."""
    kw, drv = {}, {}
    if spec == "default":
        return kw, drv
    for part in spec.split(","):
        k, v = part.split("=")
        if k in ("refine_mode", "cert"):
            drv[k] = v
            continue
        try:
            v = int(v) if v.isdigit() else float(v)
        except ValueError:
            v = {"None": None, "True": True, "False": False}.get(v, v)
        kw[k] = v
    return kw, drv


def child(spec, n_train, n_valid, passes):
    import numpy as np
    import gdmm_brown as gb
    import streamssvm as ss
    tr, va, alltags = load_valid(n_train, n_valid)
    Xtr, Ytr = [x for x, _ in tr], [y for _, y in tr]
    Xva, Yva = [x for x, _ in va], [y for _, y in va]
    kw, drv = parse_config(spec)
    learner = ss.learners.BCFW(seed=0, **kw)
    w = ss.SequenceTagger(learner=learner.clone(), labels=alltags)
    w.learn_many(Xtr[:3], Ytr[:3])
    w._learner.refine(1)
    w.predict_many(Xva[:2])
    del w
    m = ss.SequenceTagger(learner=learner, labels=alltags)
    lr = None
    base = {"config": spec, "n_train": len(Xtr), "n_valid": len(Xva)}
    cpu = 0.0
    calls0 = 0
    for p in range(1, passes + 1):
        c0 = time.process_time()
        if p == 1:
            m.learn_many(Xtr, Ytr)
            lr = m._learner
            if drv.get("refine_mode") == "full":   # the refine of main: a refreshing full gap pass first
                lr.sweep_stale = False
        else:
            gest_before = lr.store.gest[lr.store.slots()].copy()
            tick0 = lr._tick
            lr.refine(1)
        cpu += time.process_time() - c0
        row = base | {"pass": p, "cpu_s": cpu, "lam": float(lr.lam), "n": int(lr.store.n),
                      "oracle_calls": int(lr.counters[0]) + int(lr.full_pass_oracle_calls),
                      "full_pass_calls": int(lr.full_pass_oracle_calls)}
        row["valid_acc"] = gb.accuracy(m.predict_many(Xva), Yva)
        if lr.averaging:
            lr.averaging = False
            lr._pred_cache = None
            row["valid_acc_iterate"] = gb.accuracy(m.predict_many(Xva), Yva)
            lr.averaging = True
            lr._pred_cache = None
        slots = lr.store.slots()
        if p > 1:
            lo = lr.store.last_oracle[slots]
            row["blocks_visited_frac"] = float(np.mean(lo >= tick0))
        if drv.get("cert", "1") != "0":
            c = lr.certificate()
            row |= {"primal_avg": c.primal, "gap_avg": c.gap, "dual": c.dual,
                    "primal_iterate": c.extra.get("iterate_primal"), "iterate_gap": c.extra.get("iterate_gap")}
            g = lr.store.gest[slots]
        else:
            g = lr.store.gest[slots]
        gs = np.sort(g)[::-1]
        tot = float(gs.sum())
        if tot > 0:
            row["gest_top10pct_share"] = float(gs[:max(1, len(gs) // 10)].sum() / tot)
            row["gest_zero_frac"] = float(np.mean(g <= 1e-12))
        print(json.dumps(row | {"counters": [int(x) for x in lr.counters]}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--train", type=int, default=10000)
    ap.add_argument("--valid", type=int, default=1500)
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--configs", nargs="+", default=["default"])
    ap.add_argument("--name", default="refine_diag")
    ap.add_argument("--parallel", type=int, default=1)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.train, a.valid, a.passes)
        return
    cmd = "python bench/refine_diag.py " + " ".join(sys.argv[1:])
    procs, rows = [], []
    pending = list(a.configs)
    running = []
    while pending or running:
        while pending and len(running) < a.parallel:
            spec = pending.pop(0)
            p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", spec, "--train", str(a.train),
                                  "--valid", str(a.valid), "--passes", str(a.passes)], stdout=subprocess.PIPE, text=True)
            running.append(p)
        p = running.pop(0)
        for line in p.stdout:
            if line.startswith("{"):
                r = json.loads(line)
                rows.append(r)
                print(line.strip(), flush=True)
        p.wait()
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, a.name + ".json"), "w") as f:
        json.dump({"command": cmd, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
