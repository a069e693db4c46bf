"""GDMM on multi-label with pairwise label factors (Yen et al., "Dual Decomposed Learning with
Factorwise Oracles for Structural SVMs of Large Output Domain", NIPS 2016, Algorithm 3) against
BCFW (exact enumeration of the 2^K labelings) and SGD (Pegasos; LP-relaxation oracle above 16
labels).

    python bench/gdmm_multilabel.py yeast --budget 240     # CPU seconds per learner
    python bench/gdmm_multilabel.py rcv1 --n 2000 --budget 120

``yeast``: river's bundled Yeast (2417 x 103, 14 labels), file order, first 1500 train / last
917 test, features standardized with training statistics plus a constant 1. Each learner sees
the training set once (``learn_one``), then refines pass by pass until its CPU budget is spent;
after every pass (or every few passes): the certificate (exact primal by enumeration, the
learner's dual), test Hamming loss and micro-F1. CPU time (``time.process_time``) excludes the
certificates and the test evaluation.

``rcv1``: a synthetic problem of RCV1-regions' shape (see :func:`rcv1_like`).

Writes bench/results/gdmm_multilabel_<name>.{json,md}.
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
from _common import cpu_model  # noqa: E402


def load_yeast():
    """bench/yeast_slack.py's split and standardization, plus a constant feature."""
    from yeast_slack import load
    Xtr, Ytr, Xte, Yte, labels = load()
    one = lambda A: np.hstack([A, np.ones((len(A), 1))])  # noqa: E731
    return one(Xtr), Ytr, one(Xte), Yte, labels


def rcv1_like(n_train, n_test, d=47236, K=228, nnz=60, seed=0):
    """Synthetic multi-label data of RCV1-regions' shape (23,149 x 47,236 sparse, 228 labels).

    Generating model: label k owns 40 random vocabulary features. An example draws 1 "topic"
    label (2 with probability 0.3) from a skewed prior (Dirichlet(0.3)); a fixed random set of
    3K correlated label pairs turns each partner of a topic on with probability 0.08 (the
    pairwise interactions to learn); any other label turns on with probability 1e-3. Features:
    ~nnz/2 drawn from the feature sets of the example's *positive* labels (weights N(1, 0.3) x
    U(0.5, 1.5)), the rest uniform over the vocabulary (U(0.1, 1)), L2-normalized. So ~1-3
    labels per example, partners weakly visible in x (they share the example's features)."""
    rng = np.random.default_rng(seed)
    n = n_train + n_test
    lab_feats = rng.integers(0, d, size=(K, 40))
    pairs = set()
    while len(pairs) < 3 * K:
        a, b = sorted(rng.choice(K, 2, replace=False))
        pairs.add((int(a), int(b)))
    nbr = [[] for _ in range(K)]
    for a, b in pairs:
        nbr[a].append(b)
        nbr[b].append(a)
    prior = rng.dirichlet(np.ones(K) * 0.3)
    X, Y = [], np.zeros((n, K), dtype=bool)
    for i in range(n):
        topics = rng.choice(K, size=1 + (rng.random() < 0.3), replace=False, p=prior)
        y = Y[i]
        y[topics] = True
        for t in topics:
            for b in nbr[t]:
                if rng.random() < 0.08:
                    y[b] = True
        y |= rng.random(K) < 1e-3
        pos = np.flatnonzero(y)
        per = max(1, (nnz // 2) // len(pos))
        js = np.concatenate([lab_feats[k, rng.choice(40, size=min(per, 40), replace=False)] for k in pos]
                            + [rng.integers(0, d, size=nnz // 2)])
        vs = np.concatenate([rng.normal(1.0, 0.3, size=len(js) - nnz // 2) * rng.uniform(0.5, 1.5, len(js) - nnz // 2),
                             rng.uniform(0.1, 1.0, size=nnz // 2)])
        f = {}
        for j, v in zip(js.tolist(), vs.tolist()):
            f[j] = f.get(j, 0.0) + v
        nrm = np.sqrt(sum(v * v for v in f.values()))
        X.append({j: v / nrm for j, v in f.items()})
    return X[:n_train], Y[:n_train], X[n_train:], Y[n_train:], [f"r{k}" for k in range(K)]


def lp_primal(m, xs, Y, lam):
    """P_LP(w) = lam/2 ||w||^2 + (1/n) sum_i max over the local polytope of the loss-augmented
    score minus the truth's (HiGHS, :mod:`streamssvm.oracles.lp`): an upper bound on P(w).
    With ``xs`` a sample of the training set the hinge is averaged over the sample only: an
    estimate of P_LP(w) on the whole training set (not a bound)."""
    from streamssvm.oracles.lp import PairwiseMRFLP
    lr = m._learner
    K = lr._K
    if hasattr(lr, "_engine"):   # GDMM: its pairwise multi-label engine
        ml = lr._engine
        sc_, E, T = ml.s(), ml.E, ml.T
        reg = 0.5 * lam * sc_ ** 2 * (float(np.vdot(E[:, :K], E[:, :K])) + float(np.sum(np.triu(T[:K, :K], 1) ** 2)))
    else:
        W, sc_ = lr._pred_weights()
        E, T = W.E, W.T
        reg = 0.5 * lam * sc_ ** 2 * (float(np.vdot(E[:, :K], E[:, :K])) + float(np.sum(np.triu(T[:K, :K], 1) ** 2))
                                     + float(np.vdot(W.B[:, :K], W.B[:, :K])))
    P = sc_ * np.triu(T[:K, :K], 1)
    hinge = 0.0
    for x, y in zip(xs, Y):
        idx, val = m._features.encode_dict(x, False)   # bias column first, as when learning
        idx, val = np.asarray(idx, dtype=np.int64), np.asarray(val, dtype=np.float64)
        un = sc_ * (val @ E[idx, :K]) if len(idx) else np.zeros(K)
        r = PairwiseMRFLP(un, P, y[:K].astype(np.int32), K).oracle(1.0)
        hinge += max(r.value - 1.0, 0.0)
    return reg + hinge / len(xs)


def scores(P, Y):
    tp, fp, fn = (P & Y).sum(), (P & ~Y).sum(), (~P & Y).sum()
    return {"hamming_loss": float(np.mean(P != Y)), "micro_f1": float(2 * tp / max(2 * tp + fp + fn, 1))}


def as_dict(x):
    return x if isinstance(x, dict) else {f"f{j}": float(v) for j, v in enumerate(x) if v != 0.0}


def run(name, make, Xtr, Ytr, Xte, Yte, labels, budget, every, certify, log, max_passes=10**6, n_eval=None,
        pairwise=True, lam=None, n_obj=0):
    m = ss.MultiLabelSSVM(learner=make(), pairwise=pairwise, labels=labels)
    xs = [as_dict(x) for x in Xtr]
    xt = [as_dict(x) for x in (Xte if n_eval is None else Xte[:n_eval])]
    Yt = Yte if n_eval is None else Yte[:n_eval]
    c0, w0 = time.process_time(), time.perf_counter()
    for x, y in zip(xs, Ytr):
        m.learn_one(x, {k: bool(v) for k, v in zip(labels, y)})
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    curve = []

    def point(p):
        rec = {"passes": p, "cpu_s": cpu, "wall_s": wall}
        if certify:
            c = m.certificate()
            rec.update({"primal": c.primal, "dual": c.dual, "gap": c.gap, "exact": c.exact})
            for k in ("dual_local_polytope", "consistency_residual", "active_factors"):
                if k in c.extra:
                    rec[k] = c.extra[k]
        elif name in ("gdmm", "br"):   # no exact primal above 16 labels; the dual is still a valid lower bound
            c = m.certificate()
            rec["dual"] = c.dual
            if name == "br":
                rec["primal"] = c.primal   # independent labels: exact
            for k in ("dual_local_polytope", "active_factors"):
                if k in c.extra:
                    rec[k] = c.extra[k]
        if n_obj and pairwise:
            c1 = time.process_time()
            rec["primal_lp_sample"] = lp_primal(m, Xtr[:n_obj], Ytr[:n_obj], lam)
            rec["primal_lp_cpu_s"] = time.process_time() - c1
        c1 = time.process_time()
        P = np.array([[bool(p.get(k, False)) for k in labels] for p in map(m.predict_one, xt)])
        rec["predict_cpu_ms_per_example"] = 1e3 * (time.process_time() - c1) / max(len(xt), 1)
        rec.update(scores(P, Yt))
        curve.append(rec)
        log(f"{name} {json.dumps({k: (round(v, 5) if isinstance(v, float) else v) for k, v in rec.items()})}")

    point(0)
    p = 0
    while cpu < budget and p < max_passes:
        c0, w0 = time.process_time(), time.perf_counter()
        m.refine(1)
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        p += 1
        if p % every == 0 or cpu >= budget:
            point(p)
    return curve, m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data", choices=["yeast", "rcv1"])
    ap.add_argument("--learners", nargs="+", default=None)
    ap.add_argument("--lam", type=float, default=None)
    ap.add_argument("--budget", type=float, default=240.0, help="CPU seconds per learner (first pass of learn_one + refinement; evaluation excluded)")
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--n", type=int, default=23149)
    ap.add_argument("--n-test", type=int, default=2000)
    ap.add_argument("--rho", type=float, default=None, help="GDMM rho (default: the learner's)")
    ap.add_argument("--tag", default="")
    ap.add_argument("--n-eval", type=int, default=None, help="test examples evaluated (default all)")
    ap.add_argument("--max-passes", type=int, default=10**6)
    ap.add_argument("--grow", type=int, default=None, help="GDMM grow (default: the learner's)")
    ap.add_argument("--data-seed", type=int, default=0, help="rcv1: generator seed (tune on one, report another)")
    ap.add_argument("--n-sgd", type=int, default=None, help="rcv1: SGD + LP learns only the first n (it is slow)")
    ap.add_argument("--n-obj", type=int, default=0, help="rcv1: training examples in the sampled P_LP estimate")
    args = ap.parse_args()
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.data == "yeast":
        Xtr, Ytr, Xte, Yte, labels = load_yeast()
        lam = args.lam or 0.1
        certify = True
        learners = args.learners or ["gdmm", "bcfw"]
    else:
        Xtr, Ytr, Xte, Yte, labels = rcv1_like(args.n, args.n_test, seed=args.data_seed)
        lam = args.lam or 1e-3
        certify = False
        learners = args.learners or ["gdmm", "sgd"]
        log(f"rcv1-like: {len(Xtr)} train, {len(Xte)} test, {len(labels)} labels, "
            f"{np.mean([len(x) for x in Xtr]):.1f} nnz/example, {Ytr.sum(1).mean():.2f} labels/example")
    gkw = {} if args.grow is None else {"grow": args.grow}
    if args.rho is not None:
        gkw["rho"] = args.rho
    makers = {"gdmm": lambda: ss.learners.GDMM(lam=lam, replay=0, seed=0, **gkw),
              "bcfw": lambda: ss.learners.BCFW(lam=lam, replay=0, seed=0),
              "sgd": lambda: ss.learners.SGD(lam=lam, seed=0),
              "br": lambda: ss.learners.BCFW(lam=lam, seed=0)}   # binary relevance: pairwise=False
    out = {"data": args.data, "lam": lam, "budget_cpu_s": args.budget, "cpu": cpu_model(),
           "n_train": len(Xtr), "n_test": len(Xte), "labels": len(labels), "curves": {}}
    out.update({"rho": args.rho, "grow": args.grow, "data_seed": args.data_seed, "n_sgd": args.n_sgd,
                "n_eval": args.n_eval, "n_obj": args.n_obj})
    for name in learners:
        ntr = args.n_sgd if (name == "sgd" and args.n_sgd) else len(Xtr)
        out["curves"][name], m = run(name, makers[name], Xtr[:ntr], Ytr[:ntr], Xte, Yte, labels, args.budget,
                                     args.every, certify, log, n_eval=args.n_eval,
                                     max_passes=args.max_passes if name != "sgd" else 0,
                                     pairwise=name != "br", lam=lam, n_obj=args.n_obj)
        for r in out["curves"][name]:
            r["n_train_used"] = ntr
        if args.data == "rcv1" and not args.n_obj and name != "br":
            c0 = time.process_time()
            out["curves"][name][-1]["primal_lp"] = lp_primal(m, Xtr, Ytr, lam)
            log(f"{name} final P_LP(w) = {out['curves'][name][-1]['primal_lp']:.5f} "
                f"({time.process_time() - c0:.1f} s CPU for {len(Xtr)} LPs)")
    stem = os.path.join(HERE, "results", f"gdmm_multilabel_{args.data}{args.tag}")
    with open(stem + ".json", "w") as f:
        json.dump(out, f, indent=1)
    lines = [f"# GDMM vs {', '.join(l for l in learners if l != 'gdmm')}: {args.data}, pairwise multi-label", "",
             f"lam = {lam:g}; {len(Xtr)} train / {len(Xte)} test; {len(labels)} labels; CPU budget (learning + refinement) "
             f"{args.budget:g} s per learner; CPU {out['cpu']}.", "",
             f"Command: `python bench/gdmm_multilabel.py {' '.join(sys.argv[1:])}`; load average at the end "
             f"{os.getloadavg()[0]:.1f}.", "",
             "| learner | train used | passes | CPU s | wall s | primal | dual | gap | P_LP(w) sample est. "
             "| test Hamming | test micro-F1 | predict ms/ex (CPU) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, cur in out["curves"].items():
        for r in cur:
            f = lambda k: (f"{r[k]:.5f}" if isinstance(r.get(k), float) else "-")  # noqa: E731
            lines.append(f"| {name} | {r.get('n_train_used', '-')} | {r['passes']} | {r['cpu_s']:.1f} | "
                         f"{r['wall_s']:.1f} | {f('primal')} | {f('dual')} | {f('gap')} | "
                         f"{f('primal_lp_sample') if 'primal_lp_sample' in r else f('primal_lp')} | "
                         f"{r['hamming_loss']:.4f} | {r['micro_f1']:.4f} | {r.get('predict_cpu_ms_per_example', 0):.1f} |")
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
