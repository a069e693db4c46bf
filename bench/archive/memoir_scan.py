"""Exact-scan cost per query: float64 numba scan vs float32 BLAS scan (+ float64 re-scoring) vs
one hnswlib query, on the same rows in the same process (issue 11 part 1).

    nice -n 10 python bench/memoir_scan.py            # ~2 minutes on a shared core

Rows: ``n`` random Gaussian rows of 257 columns (256 features + the bias column the estimator
adds), each scaled by a uniform factor in [0.5, 2]; queries: dense 257-d Gaussian vectors, a
random excluded class each (as in training). One BLAS thread. Reports the median over
``--reps`` timing rounds of the mean wall and CPU (``time.process_time``) microseconds per
query, and the ratios to the BLAS scan measured in the same round. Writes
bench/results/memoir_scan.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from _common import table_head, write_results  # noqa: E402
from streamssvm.oracles.mips import BlasExactMIPS, ExactMIPS, HNSWMIPS  # noqa: E402
from streamssvm.oracles.rows import DenseRows  # noqa: E402


def rows(n, d, seed=0):
    rng = np.random.default_rng(seed)
    R = DenseRows(d, capacity=n)
    R.ensure(n, d)
    R.V[:n] = rng.normal(size=(n, d)) * rng.uniform(0.5, 2.0, size=(n, 1))
    R.recompute_sq()
    return R


def timed(fn, qs, ex):
    w0, c0 = time.perf_counter(), time.process_time()
    out = [fn(idx, v, e) for (idx, v), e in zip(qs, ex)]
    w1, c1 = time.perf_counter(), time.process_time()
    return (w1 - w0) / len(qs) * 1e6, (c1 - c0) / len(qs) * 1e6, out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2800,10000,30000,100000")
    ap.add_argument("--d", type=int, default=257)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ef", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "memoir_scan"))
    a = ap.parse_args(argv)
    d = a.d
    rng = np.random.default_rng(1)
    res = []
    for n in [int(s) for s in a.sizes.split(",")]:
        R = rows(n, d)
        idx = np.arange(d, dtype=np.int64)
        qs = [(idx, rng.normal(size=d)) for _ in range(a.queries)]
        ex = rng.integers(0, n, size=a.queries)
        exact, blas = ExactMIPS(R), BlasExactMIPS(R)
        t0 = time.process_time()
        h = HNSWMIPS(R, d, k=10, ef=a.ef, M=16, ef_construction=100, max_dirty=10**9)
        h.update(range(n))
        h.reindex()
        build = time.process_time() - t0
        # warm-up (numba dispatch, the mirror copy)
        for o in (exact, blas, h):
            o.query(*qs[0], int(ex[0]))
        rounds = {"numba_f64": [], "blas_f32": [], "hnsw": []}
        agree_blas = agree_hnsw = 0
        for _ in range(a.reps):
            ref = None
            for name, o in (("numba_f64", exact), ("blas_f32", blas), ("hnsw", h)):
                w, c, out = timed(o.query, qs, ex)
                rounds[name].append((w, c))
                if name == "numba_f64":
                    ref = out
                elif name == "blas_f32":
                    agree_blas = sum(int(x == y) for x, y in zip(out, ref))
                else:
                    agree_hnsw = sum(int(x == y) for x, y in zip(out, ref))
        r = {"n_rows": n, "d": d, "queries": a.queries, "hnsw_build_cpu_s": build,
             "blas_agrees_with_f64": agree_blas / a.queries, "hnsw_recall_at_1": agree_hnsw / a.queries,
             "blas_rescored_per_query": blas.stats()["rescored_per_query"]}
        for name, v in rounds.items():
            r[name + "_wall_us"] = float(np.median([x[0] for x in v]))
            r[name + "_cpu_us"] = float(np.median([x[1] for x in v]))
        for name in ("numba_f64", "hnsw"):
            r[name + "_over_blas_cpu"] = float(np.median([x[1] / y[1] for x, y in zip(rounds[name], rounds["blas_f32"])]))
        print(json.dumps(r), flush=True)
        res.append(r)
    info = {"python": sys.version.split()[0], "numpy": np.__version__, "threads": 1, "ef": a.ef,
            "note": "synthetic Gaussian rows; median of reps rounds; ratios per round, same process"}
    lines = ["# Exact scan per query: numba float64 vs float32 BLAS (+ float64 re-scoring) vs hnswlib",
             "", f"`python bench/memoir_scan.py` ({info['note']}; 257 columns, ef={a.ef}, M=16, k=10, "
             "one BLAS thread). Microseconds per query (wall / CPU); ratios are CPU time over the BLAS "
             "scan's in the same round.", "",
             *table_head("rows", "numba f64", "BLAS f32", "hnswlib", "numba/BLAS", "hnsw/BLAS", "BLAS = f64 argmax",
                         "re-scored/query", "hnsw recall@1")]
    for r in res:
        lines.append(f"| {r['n_rows']:,} | {r['numba_f64_wall_us']:.0f} / {r['numba_f64_cpu_us']:.0f} | "
                     f"{r['blas_f32_wall_us']:.0f} / {r['blas_f32_cpu_us']:.0f} | {r['hnsw_wall_us']:.0f} / "
                     f"{r['hnsw_cpu_us']:.0f} | {r['numba_f64_over_blas_cpu']:.2f} | {r['hnsw_over_blas_cpu']:.2f} | "
                     f"{r['blas_agrees_with_f64']:.3f} | {r['blas_rescored_per_query']:.2f} | {r['hnsw_recall_at_1']:.3f} |")
    write_results(a.out, {"info": info, "results": res}, lines)


if __name__ == "__main__":
    main()
