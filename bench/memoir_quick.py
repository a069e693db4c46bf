"""Quick self-measurement of the MEMOIR engine (not the final benchmark): training examples/s of
the exact, HNSW and LSH oracles on synthetic extreme multiclass streams, test accuracy (exact
prediction) relative to exact training, and the memory of the class rows.

    PYTHONPATH=. python3 bench/memoir_quick.py --classes 50000 --n 4000 --kind dense
    PYTHONPATH=. python3 bench/memoir_quick.py --classes 50000 --n 20000 --kind sparse

Dense: x = centre(y) + noise in R^256 (plus the bias). Sparse: regime (a), a bag of 6 words (+-3
context) from a zipfian vocabulary of 50k with 2 class-specific topic words. Every class row
exists from the start (the learner is told all classes up front), so each query faces all of
them. Writes JSON + a markdown table to bench/results/.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from streamssvm.learners.memoir import MEMOIR
from streamssvm.structures import MultiClass


def dense_data(C, n, d, seed, noise, n_test):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(C, d))
    ys = rng.integers(0, C, size=n)
    ys = np.concatenate([ys, rng.choice(ys, size=n_test)])   # test classes: seen in training
    n += n_test
    X = centers[ys] + noise * rng.normal(size=(n, d))
    idx = np.arange(d + 1, dtype=np.int64)
    return [(idx, np.concatenate([[1.0], x]), int(y)) for x, y in zip(X, ys)], d + 1


def sparse_data(C, n, vocab, seed, n_test):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    topic = rng.integers(0, vocab, size=(C, 2))
    ys = rng.integers(0, C, size=n)
    ys = np.concatenate([ys, rng.choice(ys, size=n_test)])
    n += n_test
    ctx = rng.choice(vocab, size=(n, 4), p=p)
    out = []
    for i, y in enumerate(ys):
        f = np.unique(np.concatenate([ctx[i], topic[y]])) + 1
        idx = np.concatenate([[0], f]).astype(np.int64)
        out.append((idx, np.ones(len(idx)), int(y)))
    return out, vocab + 1


def run(mips, data, test, C, dim, kind, params, batch):
    lr = MEMOIR(mips=mips, lam=1e-4, check_every=50, rows=kind, batch_size=batch, window=0, **params)
    lr.bind(MultiClass(), [])
    lr.ensure(dim, range(C))
    t0 = time.perf_counter()
    one = np.array([0, 1], dtype=np.int64)
    for idx, val, y in data:
        lr.learn(np.array([0, len(idx)]), idx, val, np.array([y]))
    el = time.perf_counter() - t0
    acc = float(np.mean([lr.predict(one, np.array([0, len(i)]), i, v, one, 1)[0] == y for i, v, y in test]))
    d = lr.diagnostics()
    st = d["staleness"]
    return {"mips": mips, "examples_per_s": len(data) / el, "seconds": el, "test_accuracy": acc,
            "recall_at_1": d["recall_at_1"], "margin_error_mean": d["margin_error_mean"],
            "candidates_per_query": d["mips"]["candidates_per_query"], "updates": d["updates"],
            "rows_nnz": d["rows_nnz"], "rows_nbytes": d["rows_nbytes"], "reindexes": st.get("reindexes"),
            "rebuilds": st.get("rebuilds")}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--classes", type=int, default=50_000)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--test", type=int, default=1000)
    ap.add_argument("--kind", choices=["dense", "sparse"], default="dense")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--noise", type=float, default=1.0)
    ap.add_argument("--mips", default="exact,hnsw,lsh")
    ap.add_argument("--max-dirty", type=int, default=None)
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--ef", type=int, default=None)
    ap.add_argument("--batch", type=int, default=0, help="mini-batch (0: the paper's 100 sqrt(C))")
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args(argv)
    if a.kind == "dense":
        data, dim = dense_data(a.classes, a.n, a.dim, 0, a.noise, a.test)
    else:
        data, dim = sparse_data(a.classes, a.n, a.vocab, 0, a.test)
    train, test = data[:a.n], data[a.n:]
    seen = {y for _, _, y in train}
    test = [t for t in test if t[2] in seen]
    params = {k: v for k, v in (("max_dirty", a.max_dirty), ("k", a.k), ("ef", a.ef)) if v is not None}
    batch = a.batch or int(100 * np.sqrt(a.classes))   # paper: |b| = 100 sqrt(C)
    # warm the numba caches outside the timings
    run("exact", train[:50], test[:5], a.classes, dim, a.kind, {}, batch)
    res = []
    for mips in a.mips.split(","):
        r = run(mips, train, test, a.classes, dim, a.kind, params if mips != "exact" else {}, batch)
        r.update(classes=a.classes, kind=a.kind, dim=dim, n=a.n, test=len(test), batch=batch, **params)
        res.append(r)
        print(json.dumps(r), flush=True)
    ex = next((r for r in res if r["mips"] == "exact"), None)
    lines = ["| rows | classes | oracle | ex/s | speed-up | test acc | acc / exact | recall@1 | cand/query |"
             " rows MB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res:
        sp = r["examples_per_s"] / ex["examples_per_s"] if ex else float("nan")
        ra = r["test_accuracy"] / ex["test_accuracy"] if ex and ex["test_accuracy"] else float("nan")
        lines.append(f"| {r['kind']} | {r['classes']} | {r['mips']} | {r['examples_per_s']:.0f} | {sp:.1f}x | "
                     f"{r['test_accuracy']:.3f} | {ra:.2f} | {r['recall_at_1']:.2f} | "
                     f"{r['candidates_per_query']:.0f} | {r['rows_nbytes'] / 1e6:.1f} |")
    print("\n".join(lines))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"memoir_quick_{a.kind}_{a.classes}"
    (out / f"{stem}.json").write_text(json.dumps(res, indent=1))
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
