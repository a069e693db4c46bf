"""GDMM against BCFW on OCR-small chains, pass for pass, up to the certified optimum (issue 27,
item 5: "GDMM on chains stalls").

Protocol: OCR-small (Osokin et al., "Minding the Gaps", Table 1: the 626 words of fold 0),
lam = 1e-2, the loss normalized per word (GDMM's loss; BCFW runs with ``loss="normalized"``).
Every peer streams the words once (``replay=0``), then ``refine(1)`` per pass. After the passes
in ``--marks`` (untimed) the certificate is read: the exact primal P(w) at the weights that
predict, the certified dual lower bound, and GDMM's consistency residual. min P is bracketed by
the best certified dual over all runs and the lowest primal over all runs. CPU =
``time.process_time`` of learning only; BLAS pinned to one thread.

    flock /tmp/bench.lock nice -n 0 python3 bench/gdmm_chain_ocr.py            # ~5 min
    flock /tmp/bench.lock nice -n 0 python3 bench/gdmm_chain_ocr.py --quick    # ~30 s

Writes bench/results/gdmm_chain_ocr.{json,md}.
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


def make(kind, kw, lam):
    if kind == "gdmm":
        return ss.SequenceTagger(learner=ss.learners.GDMM(lam=lam, replay=0, seed=0, **kw))
    return ss.SequenceTagger(learner=ss.learners.BCFW(lam=lam, replay=0, seed=0, **kw), loss="normalized")


def run(kind, kw, X, Y, lam, marks):
    est = make(kind, kw, lam)
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
    ap.add_argument("--lam", type=float, default=1e-2)
    ap.add_argument("--words", type=int, default=None, help="first words of OCR-small (default: all 626)")
    ap.add_argument("--marks", default="1,10,25,50,100,200,400")
    ap.add_argument("--long", type=int, default=1600, help="passes of the long BCFW run bracketing min P")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "gdmm_chain_ocr"))
    a = ap.parse_args(argv)
    if a.quick:
        a.words, a.marks, a.long = 100, "1,10,50,100", 400
    marks = sorted({int(m) for m in a.marks.split(",")})
    X_tr, y_tr, _, _ = ss.datasets.load_ocr("small")
    n = len(X_tr) if a.words is None else a.words
    X, Y = X_tr[:n], [list(y) for y in y_tr[:n]]
    make("gdmm", {}, a.lam).learn_one(X[0], Y[0])   # compile outside the timings
    make("bcfw", {}, a.lam).learn_one(X[0], Y[0])
    res = {}
    for name, (kind, kw) in PEERS.items():
        res[name] = run(kind, kw, X, Y, a.lam, marks)
        print(name, res[name][-1], file=sys.stderr, flush=True)
    long_rows = run("bcfw", {"step": "pairwise", "averaging": False}, X, Y, a.lam, {a.long})
    lb = max(max(r["dual"] for r in rows) for rows in [*res.values(), long_rows])
    ub = min(min(r["primal"] for r in rows) for rows in [*res.values(), long_rows])
    lines = [f"# GDMM vs BCFW on OCR-small chains, pass for pass (lam = {a.lam:g}, {n} words, normalized loss)", "",
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
    write_results(a.out, {"lam": a.lam, "words": n, "marks": marks, "runs": res, "long_bcfw": long_rows,
                          "bracket": [lb, ub], "cpu_model": cpu_model()}, lines)


if __name__ == "__main__":
    main()
