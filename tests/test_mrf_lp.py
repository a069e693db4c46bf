"""LP relaxation of the pairwise multi-label MRF (streamssvm.oracles.lp) against brute force, the
searches over LP oracles, and SGD on the pairwise MRF with more than 16 labels."""
import itertools
import math

import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels import structops as so
from streamssvm.oracles.lp import PairwiseMRFLP
from streamssvm.oracles.slack import angular_search, binary_search, bisecting_search
from streamssvm.structures import MultiLabel
from streamssvm._kernels.common import py_entry


def _instance(rng, K, attractive=False, coupling=1.0):
    s = rng.normal(size=K)
    if attractive:
        P = np.triu(rng.exponential(size=(K, K)), 1) * coupling
    else:
        P = np.triu(rng.normal(size=(K, K)), 1) * coupling
    y = (rng.random(K) < 0.4).astype(np.int32)
    return s, P, y


def _brute(s, P, y, Ki):
    """All labelings with their (h, g), computed independently of the LP module."""
    K = len(s)
    Y = np.array(list(itertools.product((0, 1), repeat=K)), dtype=np.int32)
    f = Y @ s + np.einsum("nk,kl,nl->n", Y, np.triu(P, 1), Y)
    ft = y @ s + y @ np.triu(P, 1) @ y
    return Y, 1.0 + f - ft, np.sum(Y != y, axis=1) / Ki


def _in_angle(h, g, hi, lo, hi_c, lo_c):
    if h <= 0:
        return False
    d = g / h
    if d > hi or (d == hi and not hi_c) or d < lo or (d == lo and not lo_c):
        return False
    return True


def test_lambda_oracle_upper_bounds_enumeration_and_is_exact_when_integral():
    rng = np.random.default_rng(0)
    n_int = n_frac = 0
    for _ in range(60):
        K = int(rng.integers(2, 11))
        s, P, y = _instance(rng, K, coupling=rng.uniform(0.2, 2.0))
        Ki = K + int(rng.integers(0, 3))
        lp = PairwiseMRFLP(s, P, y, Ki)
        Y, H, G = _brute(s, P, y, Ki)
        for lam in (0.0, float(rng.uniform(0.1, 4.0))):
            r = lp.oracle(lam)
            exact = float(np.max(H + lam * G))
            # the same maximum from the numba enumeration used by the exact path
            ybuf = y.copy()
            out = np.zeros(K, dtype=np.int32)
            ts = float(y @ s + y @ np.triu(P, 1) @ y)
            v = py_entry(so._mrf_enum)(s[None, :].copy(), np.triu(P, 1), 1.0, K, ybuf, 0, lam, float(Ki), 0.0,
                             np.zeros(K + 1), out)
            assert v + 1.0 - ts == pytest.approx(exact, abs=1e-9)
            assert r.value >= exact - 1e-7
            # the returned labeling is a real labeling with its true (h, g)
            j = int(np.dot(r.labeling, 1 << np.arange(K)[::-1]))
            assert (r.h, r.g) == (pytest.approx(H[j], abs=1e-9), pytest.approx(G[j], abs=1e-12))
            assert r.h + lam * r.g <= r.value + 1e-7
            if r.integral:
                n_int += 1
                assert r.value == pytest.approx(exact, abs=1e-7)
                assert r.h + lam * r.g == pytest.approx(exact, abs=1e-7)
                assert np.array_equal(r.labeling, out)
            else:
                n_frac += 1
    assert n_int > 30 and n_frac > 0  # both branches exercised


def test_attractive_weights_make_the_lp_tight():
    # P >= 0: score + lam * Hamming is supermodular, the local polytope is tight for every lam >= 0
    rng = np.random.default_rng(1)
    for _ in range(40):
        K = int(rng.integers(2, 10))
        s, P, y = _instance(rng, K, attractive=True, coupling=rng.uniform(0.2, 3.0))
        lp = PairwiseMRFLP(s, P, y, K)
        Y, H, G = _brute(s, P, y, K)
        for lam in (0.0, 0.5, float(rng.uniform(0.5, 5.0))):
            r = lp.oracle(lam)
            exact = float(np.max(H + lam * G))
            assert r.value == pytest.approx(exact, abs=1e-7)
            assert r.integral
            assert r.h + lam * r.g == pytest.approx(exact, abs=1e-7)


def test_frustrated_instance_is_fractional_and_rounded():
    # three labels pairwise repulsive with attractive unaries: the LP optimum is mu = 1/2 everywhere
    s = np.array([1.0, 1.0, 1.0])
    P = np.triu(-2.0 * np.ones((3, 3)), 1)
    lp = PairwiseMRFLP(s, P, np.zeros(3, dtype=np.int32), Ki=3)
    r = lp.oracle(0.0)
    assert not r.integral
    assert np.allclose(r.mu, 0.5)
    assert r.value == pytest.approx(1.0 + 1.5)          # 1 + LP MAP 1.5 > integer MAP 1
    assert r.h == pytest.approx(2.0)                    # one label on: the best integral labeling
    assert r.labeling.sum() == 1


def test_constrained_oracle_against_brute_force():
    rng = np.random.default_rng(2)
    n_int = n_none = 0
    for _ in range(200):
        K = int(rng.integers(2, 8))
        s, P, y = _instance(rng, K, attractive=bool(rng.integers(2)), coupling=rng.uniform(0.2, 1.5))
        lp = PairwiseMRFLP(s, P, y, K)
        Y, H, G = _brute(s, P, y, K)
        lam = float(rng.uniform(0.2, 3.0))
        if rng.random() < 0.2:
            hi, lo = math.inf, 0.0
        else:
            a, b = np.sort(np.exp(rng.normal(size=2)))
            hi, lo = float(b), float(a)
        hi_c, lo_c = bool(rng.integers(2)), bool(rng.integers(2))
        # skip angles with a labeling within 1e-4 of a boundary ray (the LP's margin decides those)
        pos = H > 0
        d = np.where(pos, G / np.where(pos, H, 1.0), 0.0)
        if np.any(pos & ((np.abs(d - lo) < 1e-4) | ((hi < math.inf) & (np.abs(d - hi) < 1e-4)))):
            continue
        inside = [i for i in range(len(Y)) if _in_angle(H[i], G[i], hi, lo, hi_c, lo_c)]
        r = lp.oracle_c(lam, hi, lo, hi_c, lo_c)
        if not inside:
            if r is None:
                n_none += 1
            else:
                assert not r.integral  # only fractional points can lie in an angle without labelings
            continue
        best = max(inside, key=lambda i: H[i] + lam * G[i])
        assert r is not None
        assert r.value >= H[best] + lam * G[best] - 1e-7
        assert r.h_lp > 0 and r.g_lp <= hi * r.h_lp + 1e-5 and r.g_lp >= lo * r.h_lp - 1e-5
        if r.integral:
            n_int += 1
            assert r.in_angle
            assert np.array_equal(r.labeling, Y[best])
            assert r.value == pytest.approx(H[best] + lam * G[best], abs=1e-7)
    assert n_int > 15 and n_none > 0


def test_open_and_closed_boundaries():
    # the labeling on an open boundary ray is never returned; on a closed one it is
    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(40):
        K = int(rng.integers(2, 7))
        s, P, y = _instance(rng, K, attractive=True)
        lp = PairwiseMRFLP(s, P, y, K)
        Y, H, G = _brute(s, P, y, K)
        ok = (H > 0.05) & (G > 0)
        if not ok.any():
            continue
        lam = float(rng.uniform(0.3, 3.0))
        i = int(np.argmax(np.where(ok, H + lam * G, -np.inf)))   # best labeling with h, g > 0
        d0 = G[i] / H[i]
        d = np.where(H > 0, G / np.where(H > 0, H, 1.0), -1.0)
        if np.sum(np.abs(d - d0) < 1e-4) > 1:
            continue  # another labeling on (or next to) the same ray
        # the ray alone, closed: its labeling is the only feasible one
        r = lp.oracle_c(lam, d0, d0, True, True)
        assert r is not None and r.value >= H[i] + lam * G[i] - 1e-7
        if r.integral:
            assert np.array_equal(r.labeling, Y[i])
        # open at that ray (upper or lower side): never that labeling when the LP is integral
        for hi, lo, hc, lc in ((d0, d0 / 4, False, True), (4 * d0, d0, True, False)):
            r = lp.oracle_c(lam, hi, lo, hc, lc)
            if r is not None and r.integral:
                assert not np.array_equal(r.labeling, Y[i])
                assert r.in_angle
        # closed on that side instead: the labeling is the argmax (it maximizes over all h, g > 0)
        for hi, lo, hc, lc in ((d0, d0 / 4, True, True), (4 * d0, d0, True, True)):
            r = lp.oracle_c(lam, hi, lo, hc, lc)
            assert r is not None
            if r.integral:
                assert r.h + lam * r.g == pytest.approx(H[i] + lam * G[i], abs=1e-7)
                checked += 1
    assert checked > 10


def _reachable(H, G, i):
    """Is labeling i the argmax of h + lam g for some lam >= 0 (a vertex of the upper hull)?"""
    lo, hi = 0.0, math.inf
    for j in range(len(H)):
        if j == i:
            continue
        dg, dh = G[i] - G[j], H[j] - H[i]
        if dg > 1e-12:
            lo = max(lo, dh / dg)
        elif dg < -1e-12:
            hi = min(hi, dh / dg)
        elif dh >= -1e-12:
            return False
    return lo < hi - 1e-9


def test_searches_over_lp_oracles():
    # certified upper bounds always hold; on attractive weights (tight lambda-oracle LP) angular
    # search over LP O_c finds the exact slack maximizer whenever a lambda-oracle can reach it
    rng = np.random.default_rng(4)
    reached = 0
    for it in range(40):
        K = int(rng.integers(3, 8))
        attractive = it % 4 != 0
        s, P, y = _instance(rng, K, attractive=attractive, coupling=rng.uniform(0.1, 1.0))
        lp = PairwiseMRFLP(s, P, y, K)
        Y, H, G = _brute(s, P, y, K)
        phi = np.where(H > 0, H * G, 0.0)
        i = int(np.argmax(phi))
        o, oc = lp.search_oracles()
        r = angular_search(oc, lam0=1.0, max_queries=30, tol=1.0)
        assert r.upper_bound >= phi[i] - 1e-9
        assert r.phi <= phi[i] + 1e-9
        if r.label is not None:
            assert r.phi == pytest.approx(max(lp.hg(r.label)[0], 0.0) * lp.hg(r.label)[1])
        for res in (binary_search(o, 1e-3, 1e3, max_queries=30), bisecting_search(o, max_queries=30),
                    angular_search(oc, lam0=1.0, max_queries=3)):
            assert res.upper_bound >= phi[i] - 1e-9
            assert res.phi <= phi[i] + 1e-9
        if attractive and phi[i] > 0 and _reachable(H, G, i):
            reached += 1
            assert r.phi == pytest.approx(phi[i], abs=1e-9)
    assert reached > 15


# ----------------------------------------------------------------------------------- learning
def _synthetic(rng, n, K=20, d=6):
    W = np.random.default_rng(123).normal(size=(d, K))
    X = rng.normal(size=(n, d))
    Y = X @ W > 0.8
    return X, Y


def _fit_predict(model, X, Y, Xt):
    K = Y.shape[1]
    for x, yy in zip(X, Y):
        model.learn_one({f"f{j}": v for j, v in enumerate(x)}, {f"l{k}": bool(b) for k, b in enumerate(yy)})
    P = [model.predict_one({f"f{j}": v for j, v in enumerate(x)}) for x in Xt]
    return np.array([[p[f"l{k}"] for k in range(K)] for p in P])


@pytest.mark.parametrize("rescaling,search,n", [("margin", "exact", 150), ("slack", "angular", 150)])
def test_sgd_learns_pairwise_mrf_with_20_labels(rescaling, search, n):
    rng = np.random.default_rng(5)
    X, Y = _synthetic(rng, n)
    Xt, Yt = _synthetic(rng, 60)
    m = ss.MultiLabelSSVM(learner=ss.learners.SGD(lam=1e-2, rescaling=rescaling, search=search, max_queries=4,
                                                  window=30), pairwise=True)
    P = _fit_predict(m, X, Y, Xt)
    trivial = float(np.mean(Yt))            # Hamming loss of the all-zero predictor
    assert np.mean(P != Yt) < 0.7 * trivial
    c = m.certificate()
    assert "LP relaxation" in c.note and np.isfinite(c.primal) and c.primal > 0
    assert 0.0 <= c.extra["lp_integral_fraction"] <= 1.0 and c.extra["lp_calls"] > 0


@pytest.mark.parametrize("rescaling,search", [("margin", "exact"), ("slack", "angular"), ("slack", "binary")])
def test_lp_certificate_bounds_the_exact_primal(rescaling, search):
    # with inference="lp" on 8 labels, the LP certificate's primal >= the exact (enumerated) one
    rng = np.random.default_rng(6)
    X, Y = _synthetic(rng, 60, K=8)
    st = MultiLabel(pairwise=True, inference="lp")
    lr = ss.learners.SGD(lam=1e-2, rescaling=rescaling, search=search, max_queries=6, window=40)
    labels = list(range(8))
    lr.bind(st, labels)
    lr.ensure(7, labels)
    for x, yy in zip(X, Y):
        fidx = np.arange(7, dtype=np.int32)
        fval = np.append(x, 1.0)
        lr.learn(np.array([0, 7], dtype=np.int32), fidx, fval, np.flatnonzero(yy).astype(np.int32), Ki=8)
    c_lp = lr.certificate()
    st.inference = "enum"
    c_ex = lr.certificate()
    assert "LP relaxation" in c_lp.note and "LP relaxation" not in c_ex.note
    assert c_lp.hinge >= c_ex.hinge - 1e-9
    assert c_lp.regularizer == pytest.approx(c_ex.regularizer)


def test_clear_errors():
    labels = {f"l{k}": k % 2 == 0 for k in range(17)}
    m = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=1e-2), pairwise=True)
    with pytest.raises(ValueError, match="up to 16 labels.*learners.SGD"):
        m.learn_one({"a": 1.0}, labels)
    m = ss.MultiLabelSSVM(learner=ss.learners.SGD(lam=1e-2, rescaling="slack", search="exact"), pairwise=True)
    with pytest.raises(ValueError, match="search='exact'.*16 labels.*angular"):
        m.learn_one({"a": 1.0}, labels)
    with pytest.raises(ValueError, match="inference"):
        MultiLabel(pairwise=True, inference="gurobi")
    with pytest.raises(ValueError, match="truth"):
        PairwiseMRFLP(np.zeros(3), np.zeros((3, 3)), [0, 2, 0], 3)
    with pytest.raises(ValueError, match="pairwise"):
        PairwiseMRFLP(np.zeros(3), np.zeros((2, 2)), [0, 1, 0], 3)
    lp = PairwiseMRFLP(np.zeros(3), np.zeros((3, 3)), [0, 1, 0], 3)
    with pytest.raises(ValueError, match="lo <= hi"):
        lp.oracle_c(1.0, 0.5, 2.0)
    # up to 16 labels the same SGD model still enumerates (no LP calls)
    m = ss.MultiLabelSSVM(learner=ss.learners.SGD(lam=1e-2), pairwise=True)
    m.learn_one({"a": 1.0}, {f"l{k}": k % 2 == 0 for k in range(16)})
    assert m._learner.lp_calls == 0
    m.learn_one({"a": 1.0}, labels)
    assert m._learner.lp_calls == 1


def test_save_load_keeps_the_lp_path(tmp_path):
    rng = np.random.default_rng(7)
    X, Y = _synthetic(rng, 30, K=18)
    m = ss.MultiLabelSSVM(learner=ss.learners.SGD(lam=1e-2, window=5), pairwise=True)
    _fit_predict(m, X, Y, X[:1])
    m.save(tmp_path / "m")
    m2 = ss.MultiLabelSSVM.load(tmp_path / "m")
    for x in X[:5]:
        xd = {f"f{j}": v for j, v in enumerate(x)}
        assert m2.predict_one(xd) == m.predict_one(xd)
    assert m2._learner._lp_on()
    c, c2 = m.certificate(), m2.certificate()
    assert "LP relaxation" in c2.note and c2.primal == pytest.approx(c.primal, rel=1e-12)


@pytest.mark.parametrize("relaxed", [False, True])
def test_relaxed_step_uses_the_fractional_marginals(relaxed):
    # the frustrated 3-label instance: the margin oracle LP optimum is mu_k = 1/2, mu_kl = 0
    st = MultiLabel(pairwise=True, inference="lp")
    lr = ss.learners.SGD(lam=1e-2, relaxed=relaxed, window=0, t0=0, project=False)  # textbook steps
    lr.bind(st, [0, 1, 2])
    lr.ensure(1, [0, 1, 2])
    lr.t = 10                                  # next step: eta = 1 / (lam * 11), a = 10 / 11
    a = 10.0 / 11.0
    lr.W.E[0, :3] = 1.0 / a                    # unary scores 1
    lr.W.T[:3, :3] = np.triu(-2.0 / a * np.ones((3, 3)), 1)
    E0, T0 = lr.W.E.copy(), lr.W.T.copy()
    lr.learn(np.array([0, 1], dtype=np.int32), np.array([0], dtype=np.int32), np.array([1.0]),
             np.array([], dtype=np.int32), Ki=3)
    assert lr.lp_calls == 1 and lr.lp_integral == 0
    eta = 1.0 / (lr.lam * 11)
    dE = (lr.W.E - E0)[0, :3]
    if relaxed:   # the relaxed labeling (1/2, 1/2, 1/2) with no co-occurrence
        np.testing.assert_allclose(dE, -eta / a * 0.5 * np.ones(3))
    else:         # its rounding: one label on
        assert np.sum(dE != 0) == 1 and dE.min() == pytest.approx(-eta / a)
    np.testing.assert_array_equal(lr.W.T, T0)


def test_sgd_relaxed_learns_with_20_labels():
    rng = np.random.default_rng(5)
    X, Y = _synthetic(rng, 150)
    Xt, Yt = _synthetic(rng, 60)
    m = ss.MultiLabelSSVM(learner=ss.learners.SGD(lam=1e-2, rescaling="slack", search="angular", max_queries=4,
                                                  window=10, relaxed=True), pairwise=True)
    P = _fit_predict(m, X, Y, Xt)
    assert np.mean(P != Yt) < 0.7 * float(np.mean(Yt))


def test_lp_certificate_gap_with_the_sgd_dual_point():
    # every example held: the Pegasos iterate is a dual point (rounded LP steps are labelings),
    # so the LP certificate has a finite gap, an upper bound on the exact one (same dual, larger
    # primal); relaxed steps leave no dual point
    rng = np.random.default_rng(7)
    X, Y = _synthetic(rng, 50, K=8)
    labels = list(range(8))
    for relaxed in (False, True):
        st = MultiLabel(pairwise=True, inference="lp")
        lr = ss.learners.SGD(lam=1e-1, rescaling="margin", relaxed=relaxed)
        lr.bind(st, labels)
        lr.ensure(7, labels)
        for x, yy in zip(X, Y):
            lr.learn(np.array([0, 7], dtype=np.int32), np.arange(7, dtype=np.int32), np.append(x, 1.0),
                     np.flatnonzero(yy).astype(np.int32), Ki=8)
        c_lp = lr.certificate()
        st.inference = "enum"
        c_ex = lr.certificate()
        if relaxed and lr._relaxed_steps:
            assert c_lp.gap == float("inf") and "fractional LP marginals" in c_lp.note
            continue
        assert np.isfinite(c_lp.gap) and not c_lp.exact and c_ex.exact
        assert c_lp.dual == pytest.approx(c_ex.dual) and c_lp.gap >= c_ex.gap - 1e-9
