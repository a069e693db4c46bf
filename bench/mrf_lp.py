"""LP relaxation of the pairwise multi-label MRF vs exact enumeration (streamssvm.oracles.lp).

    python bench/mrf_lp.py            # ~3-5 minutes
    python bench/mrf_lp.py --quick

* Yeast (river's bundled copy, 14 labels, first 1500 examples in file order, standardized): SGD
  with margin rescaling (exact enumeration) for one pass, then at its averaged weights, on the
  first ``n_eval`` training examples: the LP lambda-oracle at lam = 0 (MAP) and lam = 1 (margin
  oracle) -- how often the LP optimum is integral, how often the returned labeling agrees with
  enumeration, ms per LP call vs ms per enumeration (Gray code, numba) -- and angular search over
  the LP constrained oracle vs the exact slack maximizer (success = Phi >= 0.999 Phi*).
* Synthetic K = 24 and K = 32: SGD (margin, LP lambda-oracle) on 150 examples, then the same
  LP statistics; at K = 24 also enumeration of the 2^24 labelings on a few examples.
* Learning at K = 24: SGD margin / slack (angular, budget 5) on 300 examples, stepping on the
  rounded LP labeling or on the relaxed one (``relaxed=True``, the paper's handling); test Hamming
  loss on 200 examples against the all-zero predictor.

Writes bench/results/mrf_lp.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import streamssvm as ss  # noqa: E402
from _common import cpu_model, write_results, yeast as load_yeast  # noqa: E402
from streamssvm._kernels import structops as so  # noqa: E402
from streamssvm._kernels.common import py_entry  # noqa: E402
from streamssvm.oracles.lp import PairwiseMRFLP  # noqa: E402
from streamssvm.oracles.slack import angular_search  # noqa: E402


def yeast():
    X, Y, _, _, labels = load_yeast()
    return X, Y, labels


def synthetic(K, n, seed=0, d=10):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(d, K))
    X = rng.normal(size=(n, d))
    Y = X @ W + 0.5 * rng.normal(size=(n, K)) > 1.0
    # correlated labels: every 4th label is the AND of its two predecessors
    for k in range(3, K, 4):
        Y[:, k] = Y[:, k - 1] & Y[:, k - 2]
    return X, Y, [f"l{k}" for k in range(K)]


def train(X, Y, labels, n_train):
    m = ss.MultiLabelSSVM(learner=ss.learners.SGD(lam=1e-3, rescaling="margin", window=0), pairwise=True,
                          labels=list(labels))
    t0 = time.perf_counter()
    for i in range(n_train):
        m.learn_one(X[i], {lab: bool(Y[i, k]) for k, lab in enumerate(labels)})
    return m, time.perf_counter() - t0


def problems(m, X, Y, idx):
    """(S row, scale * T, dense truth, Ki) at the model's prediction weights, per example."""
    lr = m._learner
    W, scale = lr._pred_weights()
    K = lr._K
    out = []
    for i in idx:
        tp, fi, fv = m._features.encode_one(X[i], grow=False)
        S = np.zeros((1, lr.W.Kc))
        so.emission_scores(W.E, scale, tp, fi, fv, 1, K, S)
        out.append((S, W.T, scale, Y[i].astype(np.int32), K))
    return out


def enum_oracle(S, T, scale, y, K, lam):
    out = np.zeros(K, dtype=np.int32)
    v = py_entry(so._mrf_enum)(S, T, scale, K, y.copy(), 0, lam, float(K), 0.0, np.zeros(K + 1), out)
    return out, v


def enum_slack(S, T, scale, y, K):
    out = np.zeros(K, dtype=np.int32)
    ts = so.labeling_score(so.MLPAIR, S, T, np.zeros((2, T.shape[0])), scale, y, 1, K, True)
    v = py_entry(so._mrf_enum)(S, T, scale, K, y.copy(), 1, 1.0, float(K), ts, np.zeros(K + 1), out)
    return out, v


def lp_stats(probs, do_enum, do_search, max_queries=20):
    r = {"examples": len(probs)}
    S, T, scale, y, K = probs[0]
    if do_enum and K <= 16:  # warm up the numba kernels (compilation / cache load) outside the timings
        enum_oracle(S, T, scale, y, K, 1.0)
        enum_slack(S, T, scale, y, K)
    for lam in (0.0, 1.0):
        integral = agree = 0
        t_lp = t_en = 0.0
        for S, T, scale, y, K in probs:
            t0 = time.perf_counter()
            lp = PairwiseMRFLP(S[0, :K], scale * np.triu(T[:K, :K], 1), y, K)
            sol = lp.oracle(lam)
            t_lp += time.perf_counter() - t0
            integral += sol.integral
            if do_enum:
                t0 = time.perf_counter()
                lab, v = enum_oracle(S, T, scale, y, K, lam)
                t_en += time.perf_counter() - t0
                exact = v + 1.0 - lp.f_truth
                agree += abs(sol.h + lam * sol.g - exact) <= 1e-7 * max(1.0, abs(exact))
                assert sol.value >= exact - 1e-6, (sol.value, exact)
        n = len(probs)
        key = "map" if lam == 0.0 else "margin"
        r[key] = {"integral": integral / n, "lp_ms": 1e3 * t_lp / n}
        if do_enum:
            r[key].update({"agree": agree / n, "enum_ms": 1e3 * t_en / n})
    if do_search:
        succ = valid = 0
        queries = calls = icalls = 0
        t_s = 0.0
        for S, T, scale, y, K in probs:
            lp = PairwiseMRFLP(S[0, :K], scale * np.triu(T[:K, :K], 1), y, K)
            _, phistar = enum_slack(S, T, scale, y, K)
            o, oc = lp.search_oracles()
            hmax = max(1.0, lp.hg(lp._ascend(lp.y, 0.0))[0])
            t0 = time.perf_counter()
            res = angular_search(oc, lam0=hmax, max_queries=max_queries, tol=0.999)
            t_s += time.perf_counter() - t0
            queries += res.queries
            calls += lp.calls
            icalls += lp.integral_calls
            succ += res.phi >= 0.999 * phistar
            valid += res.upper_bound >= phistar - 1e-9
        n = len(probs)
        r["angular_lp"] = {"success": succ / n, "bound_valid": valid / n, "queries": queries / n,
                           "oc_integral": icalls / max(calls, 1), "ms_per_search": 1e3 * t_s / n}
    return r


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    n_eval = 40 if args.quick else 200
    results = {"cpu": cpu_model(), "quick": args.quick}

    X, Y, labels = yeast()
    m, secs = train(X, Y, labels, 1500)
    idx = np.arange(n_eval)
    results["yeast"] = {"K": 14, "train_seconds": secs, **lp_stats(problems(m, X, Y, idx), True, True)}
    print(json.dumps(results["yeast"], indent=1))

    for K in (24, 32):
        n_tr = 60 if args.quick else 150
        X, Y, labels = synthetic(K, n_tr + n_eval, seed=K)
        m, secs = train(X, Y, labels, n_tr)
        probs = problems(m, X, Y, np.arange(n_tr, n_tr + (20 if args.quick else 60)))
        res = {"K": K, "train_examples": n_tr, "train_seconds": secs, **lp_stats(probs, False, False)}
        if K == 24:  # 2^24 labelings per enumeration: a few examples only
            res["enum_check"] = lp_stats(probs[: (2 if args.quick else 5)], True, False)
        results[f"synthetic{K}"] = res
        print(json.dumps(res, indent=1))

    K = 24
    n_tr, n_te = (80, 60) if args.quick else (300, 200)
    X, Y, labels = synthetic(K, n_tr + n_te, seed=7)
    learn = []
    for resc, relaxed in (("margin", False), ("margin", True), ("slack", False), ("slack", True)):
        lr = ss.learners.SGD(lam=1e-3, rescaling=resc, search="angular" if resc == "slack" else "exact",
                             max_queries=5, window=0, relaxed=relaxed)
        m = ss.MultiLabelSSVM(learner=lr, pairwise=True, labels=list(labels))
        t0 = time.perf_counter()
        for i in range(n_tr):
            m.learn_one(X[i], {lab: bool(Y[i, k]) for k, lab in enumerate(labels)})
        secs = time.perf_counter() - t0
        P = np.array([[m.predict_one(X[i])[lab] for lab in labels] for i in range(n_tr, n_tr + n_te)])
        b = m._learner
        learn.append({"rescaling": resc, "relaxed": relaxed, "hamming": float(np.mean(P != Y[n_tr:])),
                      "trivial": float(np.mean(Y[n_tr:])), "train_seconds": secs,
                      "lp_calls_per_example": b.lp_calls / n_tr, "lp_integral": b.lp_integral / max(b.lp_calls, 1)})
        print(learn[-1])
    results["learning24"] = {"K": K, "train": n_tr, "test": n_te, "runs": learn}

    y = results["yeast"]
    lines = ["# LP relaxation of the pairwise MRF vs enumeration", "",
             f"CPU: {results['cpu']} (shared machine; compare ratios, not absolute times)", "",
             "| problem | oracle | examples | LP integral | agrees with enumeration | ms / LP call | ms / enumeration |",
             "|---|---|---|---|---|---|---|"]
    for key, name in (("map", "MAP (lam=0)"), ("margin", "margin (lam=1)")):
        lines.append(f"| yeast K=14 | {name} | {y['examples']} | {y[key]['integral']:.1%} | {y[key]['agree']:.1%} | "
                     f"{y[key]['lp_ms']:.2f} | {y[key]['enum_ms']:.2f} |")
    for K in (24, 32):
        s = results[f"synthetic{K}"]
        for key, name in (("map", "MAP (lam=0)"), ("margin", "margin (lam=1)")):
            e = s.get("enum_check", {}).get(key)
            ag = f"{e['agree']:.0%} (of {s['enum_check']['examples']})" if e else "-"
            em = f"{e['enum_ms']:.0f}" if e else "-"
            lines.append(f"| synthetic K={K} | {name} | {s['examples']} | {s[key]['integral']:.1%} | {ag} | "
                         f"{s[key]['lp_ms']:.2f} | {em} |")
    a = y["angular_lp"]
    lines += ["", "Angular search over the LP constrained oracle on yeast (budget 20, tol 0.999), vs the exact "
              "slack maximizer by enumeration:", "",
              "| success (Phi >= 0.999 Phi*) | upper bound valid | queries / search | O_c LP integral | ms / search |",
              "|---|---|---|---|---|",
              f"| {a['success']:.1%} | {a['bound_valid']:.0%} | {a['queries']:.1f} | {a['oc_integral']:.1%} | "
              f"{a['ms_per_search']:.1f} |"]
    lines += ["", f"SGD on synthetic K=24 ({n_tr} train / {n_te} test examples, lam=1e-3): test Hamming loss "
              "(all-zero predictor: {:.3f})".format(learn[0]["trivial"]), "",
              "| rescaling | step on | Hamming | LP calls / example | LP integral | train s |", "|---|---|---|---|---|---|"]
    for r in learn:
        lines.append(f"| {r['rescaling']} | {'relaxed LP point' if r['relaxed'] else 'rounded labeling'} | "
                     f"{r['hamming']:.3f} | {r['lp_calls_per_example']:.1f} | {r['lp_integral']:.1%} | "
                     f"{r['train_seconds']:.1f} |")
    write_results(os.path.join(args.out, "mrf_lp"), results, lines)


if __name__ == "__main__":
    main()
