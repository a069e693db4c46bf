"""HNSW maintenance in MEMOIR training: share of training CPU spent re-indexing, before
(every dirty row re-inserted under a fresh label, tombstones, rebuilds) and after (re-insert
only drifted rows, into the slot the old vector frees), and accuracy against exact search, on
a synthetic stream with many classes declared up front (issue 11 part 1).

    nice -n 10 python bench/memoir_hnsw_maint.py     # a few CPU minutes

Stream (synthetic, declared): K Gaussian class centers in d dimensions (unit variance), an
example is its center plus Gaussian noise of standard deviation 0.5 per coordinate; the K
labels are declared up front (``ExtremeClassifier(labels=range(K))``), n training examples
whose classes are drawn with Zipf-like frequencies p(c) proportional to 1 / (c + 1)^s
(``--zipf`` s, 0.8: a few classes are updated often, most rarely, as in extreme
classification), one pass; test: m fresh examples drawn the same way. MEMOIR defaults otherwise
(averaged, exact prediction), one BLAS thread. Re-indexing CPU is measured by wrapping the
index's ``reindex`` with ``time.process_time``. Writes bench/results/memoir_hnsw_maint.{json,md}.
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

import streamssvm as ss  # noqa: E402
from _common import table_head, write_results  # noqa: E402


def run(name, kw, X, y, Xt, yt, K):
    M = ss.learners.MEMOIR(**kw)
    m = ss.ExtremeClassifier(learner=M, labels=list(range(K)))
    m.learn_one(X[0], int(y[0]))
    lr = m._learner
    spent = [0.0]
    if lr.mips_active == "hnsw":
        orig = lr.oracle.reindex

        def timed():
            t = time.process_time()
            orig()
            spent[0] += time.process_time() - t
        lr.oracle.reindex = timed
    t0 = time.process_time()
    for x, c in zip(X[1:], y[1:]):
        m.learn_one(x, int(c))
    train = time.process_time() - t0
    acc = float(np.mean([m.predict_one(x) == c for x, c in zip(Xt, yt)]))
    d = m.certificate().extra
    st = d["staleness"]
    r = {"config": name, "params": kw, "train_cpu_s": train, "reindex_cpu_s": spent[0],
         "reindex_share": spent[0] / train if train else 0.0, "accuracy": acc,
         "recall_at_1": d["recall_at_1"], "updates": d["updates"],
         "rows_reindexed": st.get("rows_reindexed"), "rows_left_stale": st.get("rows_left_stale"),
         "rebuilds": st.get("rebuilds"), "index_deleted": st.get("index_deleted")}
    print(json.dumps(r), file=sys.stderr, flush=True)
    return r


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--K", type=int, default=30_000)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--m", type=int, default=2_000)
    ap.add_argument("--zipf", type=float, default=0.8)
    ap.add_argument("--configs", default="exact,before,replace_only,after,after_tol0.3")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "memoir_hnsw_maint"))
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    C = rng.normal(size=(a.K, a.d))
    p = 1.0 / np.arange(1, a.K + 1) ** a.zipf
    p /= p.sum()
    y = rng.choice(a.K, size=a.n, p=p)
    X = C[y] + 0.5 * rng.normal(size=(a.n, a.d))
    yt = rng.choice(a.K, size=a.m, p=p)
    Xt = C[yt] + 0.5 * rng.normal(size=(a.m, a.d))
    configs = {
        "exact": {"mips": "exact"},
        "before": {"mips": "hnsw", "drift_tol": 0.0, "reinsert": "fresh"},
        "replace_only": {"mips": "hnsw", "drift_tol": 0.0, "reinsert": "replace"},
        "after": {"mips": "hnsw", "drift_tol": 0.1, "reinsert": "replace"},
        "after_tol0.3": {"mips": "hnsw", "drift_tol": 0.3, "reinsert": "replace"},
        "after_ef40": {"mips": "hnsw", "drift_tol": 0.1, "reinsert": "replace", "ef_construction": 40},
        "fresh_tol0.1": {"mips": "hnsw", "drift_tol": 0.1, "reinsert": "fresh"},
        "fresh_tol0.3": {"mips": "hnsw", "drift_tol": 0.3, "reinsert": "fresh"},
        "fresh_ef40": {"mips": "hnsw", "drift_tol": 0.0, "reinsert": "fresh", "ef_construction": 40},
        "fresh_tol0.3_ef40": {"mips": "hnsw", "drift_tol": 0.3, "reinsert": "fresh", "ef_construction": 40},
    }
    res = [run(c, configs[c], X, y, Xt, yt, a.K) for c in a.configs.split(",")]
    info = {"K": a.K, "d": a.d, "n_train": a.n, "n_test": a.m, "zipf": a.zipf, "stream": "synthetic Gaussian "
            "centers, noise 0.5, Zipf-like class frequencies, labels declared", "threads": 1}
    L = ["# HNSW maintenance in MEMOIR training (synthetic, labels declared)", "",
         f"K={a.K:,} classes declared, d={a.d}, class frequencies ~ 1/(c+1)^{a.zipf:g}, {a.n:,} training "
         f"examples (one pass), {a.m:,} test; "
         "`python bench/memoir_hnsw_maint.py`. CPU seconds (process time) in one process; re-index share = "
         "CPU in the index's reindex / training CPU. recall@1: sampled steps where the index's answer "
         "attains the exact maximum.", "",
         *table_head("config", "train CPU s", "re-index CPU s", "share", "accuracy", "recall@1", "rows re-inserted",
                     "left stale", "rebuilds")]
    for r in res:
        L.append(f"| {r['config']} `{r['params']}` | {r['train_cpu_s']:.1f} | {r['reindex_cpu_s']:.1f} | "
                 f"{r['reindex_share']:.0%} | {r['accuracy']:.3f} | "
                 f"{'' if r['recall_at_1'] is None else format(r['recall_at_1'], '.3f')} | {r['rows_reindexed']} | "
                 f"{r['rows_left_stale']} | {r['rebuilds']} |")
    write_results(a.out, {"info": info, "results": res}, L)


if __name__ == "__main__":
    main()
