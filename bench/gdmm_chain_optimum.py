"""GDMM against BCFW on chains, pass for pass, up to the certified optimum (issue 27, item 5:
"GDMM on chains stalls").

Protocol: OCR-small (Osokin et al., "Minding the Gaps", Table 1: the 626 words of fold 0),
lam = 1e-2, the loss normalized per word (GDMM's loss; BCFW runs with ``loss="normalized"``).
Every peer streams the words once (``replay=0``), then ``refine(1)`` per pass. After the passes
in ``--marks`` (untimed) the certificate is read: the exact primal P(w) at the weights that
predict, the certified dual lower bound, and GDMM's consistency residual. min P is bracketed by
the best certified dual over all runs and the lowest primal over all runs. CPU =
``time.process_time`` of learning only; BLAS pinned to one thread.

``--data brown``: the first ``--sentences`` sentences of Brown's training documents, base tags
(``bench/gdmm_brown.py``'s split and features), lam = 1e-3 (the setting of issue 13's tuning, where
the consistency residual was read at 0.065 after 12 passes).

    flock /tmp/bench.lock nice -n 0 python3 bench/gdmm_chain_optimum.py            # ~8 min
    flock /tmp/bench.lock nice -n 0 python3 bench/gdmm_chain_optimum.py --data brown --sentences 400
    flock /tmp/bench.lock nice -n 0 python3 bench/gdmm_chain_optimum.py --quick    # ~30 s

Writes bench/results/gdmm_chain_ocr.{json,md} (``--data brown``: gdmm_chain_brown.{json,md}).
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import streamssvm as ss  # noqa: E402
from _common import cpu_model, table_head, write_results  # noqa: E402

PEERS = {
    "GDMM (defaults: averaging)": ("gdmm", {}),
    "GDMM averaging=False": ("gdmm", {"averaging": False}),
    "GDMM rounds=3, averaging=False": ("gdmm", {"rounds": 3, "averaging": False}),
    "GDMM rho=10": ("gdmm", {"rho": 10.0}),
    "BCFW pairwise (averaging)": ("bcfw", {"step": "pairwise"}),
    "BCFW pairwise, averaging=False": ("bcfw", {"step": "pairwise", "averaging": False}),
}


def make(kind, kw, lam, labels=None):
    if kind == "gdmm":
        return ss.SequenceTagger(learner=ss.learners.GDMM(lam=lam, replay=0, seed=0, **kw), labels=labels)
    return ss.SequenceTagger(learner=ss.learners.BCFW(lam=lam, replay=0, seed=0, **kw), loss="normalized",
                             labels=labels)


def load(data, n):
    """(X, Y, labels, title) of the first ``n`` training sequences."""
    if data == "brown":
        from gdmm_brown import load as brown
        tr, _, tags = brown("base", n, 0)
        return [x for x, _ in tr], [y for _, y in tr], tags, f"Brown base tags, {len(tr)} sentences"
    X_tr, y_tr, _, _ = ss.datasets.load_ocr("small")
    n = len(X_tr) if n is None else n
    return X_tr[:n], [list(y) for y in y_tr[:n]], None, f"OCR-small, {n} words"


def run(kind, kw, X, Y, lam, marks, labels=None):
    est = make(kind, kw, lam, labels)
    cpu = wall = 0.0
    rows = []
    c0, w0 = time.process_time(), time.perf_counter()
    for x, y in zip(X, Y):
        est.learn_one(x, y)
    cpu += time.process_time() - c0
    wall += time.perf_counter() - w0
    for p in range(1, max(marks) + 1):
        c0, w0 = time.process_time(), time.perf_counter()
        est._learner.refine(1)
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        if p in marks:
            c = est._learner.certificate()
            rows.append({"passes": p, "primal": c.primal, "dual": c.dual, "gap": c.gap, "cpu": cpu, "wall": wall,
                         "residual": c.extra.get("consistency_residual") if c.extra else None})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", choices=("ocr", "brown"), default="ocr")
    ap.add_argument("--lam", type=float, default=None, help="default: 1e-2 (ocr), 1e-3 (brown)")
    ap.add_argument("--words", type=int, default=None, help="first words of OCR-small (default: all 626)")
    ap.add_argument("--sentences", type=int, default=400, help="--data brown: training sentences")
    ap.add_argument("--marks", default="1,10,25,50,100,200,400")
    ap.add_argument("--long", type=int, default=1600, help="passes of the long BCFW run bracketing min P")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    a.lam = a.lam if a.lam is not None else (1e-2 if a.data == "ocr" else 1e-3)
    a.out = a.out or os.path.join(HERE, "results", f"gdmm_chain_{a.data}")
    if a.quick:
        a.words, a.marks, a.long = 100, "1,10,50,100", 400
    marks = sorted({int(m) for m in a.marks.split(",")})
    X, Y, labels, title = load(a.data, a.words if a.data == "ocr" else a.sentences)
    n = len(X)
    make("gdmm", {}, a.lam, labels).learn_one(X[0], Y[0])   # compile outside the timings
    make("bcfw", {}, a.lam, labels).learn_one(X[0], Y[0])
    res = {}
    for name, (kind, kw) in PEERS.items():
        res[name] = run(kind, kw, X, Y, a.lam, marks, labels)
        print(name, res[name][-1], file=sys.stderr, flush=True)
    long_rows = run("bcfw", {"step": "pairwise", "averaging": False}, X, Y, a.lam, {a.long}, labels)
    lb = max(max(r["dual"] for r in rows) for rows in [*res.values(), long_rows])
    ub = min(min(r["primal"] for r in rows) for rows in [*res.values(), long_rows])
    lines = [f"# GDMM vs BCFW on chains, pass for pass ({title}, lam = {a.lam:g}, normalized loss)", "",
             f"min P in [{lb:.5f}, {ub:.5f}] (best certified dual of every run; lowest primal, the long run: "
             f"BCFW pairwise without averaging, {a.long} passes: primal {long_rows[-1]['primal']:.5f}, "
             f"gap {long_rows[-1]['gap']:.2e}, {long_rows[-1]['cpu']:.1f} s CPU).",
             f"rel. = (P - LB) / LB with LB = {lb:.5f}. CPU / wall seconds of learning only. {cpu_model()}.", "",
             "## Primal P(w) (rel. to the optimum) after p passes", "",
             *table_head("peer", *[f"p = {m}" for m in marks], "CPU s", "wall s")]
    for name, rows in res.items():
        cells = [f"{r['primal']:.5f} ({(r['primal'] - lb) / lb:+.1%})" for r in rows]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {rows[-1]['cpu']:.1f} | {rows[-1]['wall']:.1f} |")
    lines += ["", "## Certified dual lower bound (GDMM: at the repaired point) / GDMM's consistency residual", "",
              *table_head("peer", *[f"p = {m}" for m in marks])]
    for name, rows in res.items():
        cells = [f"{r['dual']:.5f}" + (f" / {r['residual']:.1e}" if r["residual"] is not None else "") for r in rows]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    write_results(a.out, {"data": a.data, "lam": a.lam, "examples": n, "marks": marks, "runs": res, "long_bcfw": long_rows,
                          "bracket": [lb, ub], "cpu_model": cpu_model()}, lines)


if __name__ == "__main__":
    main()
