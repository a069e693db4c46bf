"""Independent-label MultiLabelSSVM with BCFW against an independent solution of its objective.

With independent labels and the normalized Hamming loss, margin rescaling decomposes over the
labels: H_i(w) = sum_k max(0, 1/K + (1 - 2 y_ik) <w_k, x_i>), so the primal is
P(w) = lam/2 ||w||^2 + (1/n) sum_i H_i(w). These tests compute that primal from the rows the
learner holds (with ``scale=True``: each row scaled by the statistics of the moment it was
learned) and its minimum with a generic QP solver (scipy's SLSQP on the slack formulation), and
check the learner's certificate against both.
"""
import numpy as np
import pytest

scipy_optimize = pytest.importorskip("scipy.optimize")

import streamssvm as ss
from streamssvm.row_norm import RowNorm
from streamssvm.scaling import ColumnScaler


def _data(n, d, K, seed, spread=1.0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, K))
    rows = []
    for _ in range(n):
        x = rng.normal(size=d) * spread
        z = x @ A + 0.7 * rng.normal(size=K)
        rows.append(({f"f{j}": float(x[j]) for j in range(d)}, {f"l{k}": bool(z[k] > 0) for k in range(K)}))
    return rows


def _held_rows(model, rows):
    """The rows as the learner holds them (dense, BIAS column included) and the truth matrix."""
    labs = model._labels.labels   # every row carries every label (K fixed from the first row)
    Y = np.array([[bool(y[lab]) for lab in labs] for _, y in rows])
    scaler, norm = ColumnScaler(), RowNorm()
    X = np.zeros((len(rows), model._features.dim))
    for i, (x, _) in enumerate(rows):
        _, fidx, fval = model._features.encode_one(x, grow=False)
        v = scaler.learn_scaled(fidx, fval) if model.scale else fval
        X[i, fidx] = norm.learn_scaled(fidx, v, Y.shape[1]) if model.normalize else v
    return X, Y


def _primal(W, X, Y, lam):
    K = Y.shape[1]
    return lam / 2 * float((W ** 2).sum()) + float(np.maximum(0.0, 1.0 / K + (1 - 2 * Y) * (X @ W)).sum(1).mean())


def _qp_optimum(X, Y, lam):
    """min lam/2 ||W||^2 + (1/n) sum xi  s.t.  xi_ik >= 0, xi_ik >= 1/K + s_ik <W_k, x_i>."""
    n, d = X.shape
    K = Y.shape[1]
    S = 1 - 2 * Y

    def split(z):
        return z[:d * K].reshape(d, K), z[d * K:].reshape(n, K)

    def f(z):
        W, xi = split(z)
        return lam / 2 * (W ** 2).sum() + xi.sum() / n

    def grad(z):
        W, _ = split(z)
        return np.concatenate([(lam * W).ravel(), np.full(n * K, 1.0 / n)])

    def cons(z):
        W, xi = split(z)
        return (xi - 1.0 / K - S * (X @ W)).ravel()

    z0 = np.concatenate([np.zeros(d * K), np.full(n * K, 1.0 / K)])
    res = scipy_optimize.minimize(f, z0, jac=grad, method="SLSQP",
                                  bounds=[(None, None)] * (d * K) + [(0.0, None)] * (n * K),
                                  constraints=[{"type": "ineq", "fun": cons}],
                                  options={"maxiter": 2000, "ftol": 1e-12})
    assert res.success, res.message
    return float(res.fun)


@pytest.mark.parametrize("scale", [False, True])
def test_bcfw_multilabel_reaches_the_qp_optimum(scale):
    rows = _data(n=24, d=3, K=3, seed=1, spread=4.0)
    lam = 0.05
    m = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=lam, seed=0, averaging=False), scale=scale,
                          pairwise=False)   # the independent-label QP (the auto default picks the MRF here)
    for x, y in rows:
        m.learn_one(x, y)
    m.refine(300)
    c = m.certificate()
    X, Y = _held_rows(m, rows)
    W = m._learner.emission_weights()[:X.shape[1]]
    opt = _qp_optimum(X, Y, lam)
    # the certificate's primal is the objective of the held rows at the predicting weights
    assert c.primal == pytest.approx(_primal(W, X, Y, lam), rel=1e-9, abs=1e-12)
    # weak duality around the independent optimum, and BCFW closes the gap
    assert c.dual <= opt + 1e-6 <= c.primal + 2e-6
    assert c.gap < 1e-2 * opt   # Frank-Wolfe steps: O(1/k), 0.7% after 300 passes


def test_certificate_primal_is_the_held_objective_with_averaging():
    """The averaged (predicting) weights: the certificate's primal is theirs, on the held rows."""
    rows = _data(n=40, d=4, K=4, seed=2, spread=3.0)
    m = ss.MultiLabelSSVM(pairwise=False)   # the defaults but independent labels: lambda follows n, scale,
    # normalize, averaging (the QP below is the independent-label one)
    for x, y in rows:
        m.learn_one(x, y)
    m.refine(5)
    c = m.certificate()
    X, Y = _held_rows(m, rows)
    W = m._learner.emission_weights()[:X.shape[1]]
    lam = m._learner.effective_lam()
    assert c.primal == pytest.approx(_primal(W, X, Y, lam), rel=1e-9, abs=1e-12)
    assert c.dual <= _qp_optimum(X, Y, lam) + 1e-6
