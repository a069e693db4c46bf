"""BMRM (learners.BMRM): the risk adapter against brute force, the optimum against SciPy's
dual solution and the n-slack cutting plane's certified optimum for every structure, the eps_t
certificate (valid, non-increasing), bounded bundles, the streaming window, persistence, and the
printed Hadamard "lower bound" instance of Saha, Zhang, Vishwanathan (what really happens)."""
import numpy as np
import pytest
from scipy.optimize import minimize

import streamssvm as ss
from streamssvm._kernels import projection as KP
from streamssvm.checkpoint import load_state, save_state
from streamssvm.learners import BMRM
from streamssvm.oracles.risk import RiskOracle, weights_dot
from streamssvm.structures.base import Weights
from streamssvm.structures.multiclass import MultiClass
from test_hierarchy import TREE
from test_hierarchy import _data as _hier_data
from test_slack import _stream


def binary_problem(seed=0, n=60, d=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + 0.7 * rng.normal(size=n) > 0).astype(int)
    return X, y


def feed(learner, X, y, labels=(0, 1)):
    learner.bind(MultiClass(), list(labels))
    learner.ensure(X.shape[1], list(labels))
    for i in range(len(y)):
        learner.learn(np.array([0, X.shape[1]]), np.arange(X.shape[1]), X[i], np.array([y[i]]))
    return learner


def binary_reference(X, y, lam_b):
    """min_v lam_b/2 ||v||^2 + mean [1 - s <v, x>]_+ through its dual (L-BFGS-B on the box)."""
    n = len(y)
    s = 2.0 * y - 1.0
    Z = X * s[:, None]

    def f(a):
        v = Z.T @ a / lam_b
        return -(a.sum() - 0.5 * lam_b * v @ v), -(1.0 - Z @ v)
    r = minimize(f, np.zeros(n), jac=True, method="L-BFGS-B", bounds=[(0, 1.0 / n)] * n,
                 options={"ftol": 1e-15, "gtol": 1e-13, "maxiter": 20000})
    v = Z.T @ r.x / lam_b
    J = lambda w: 0.5 * lam_b * w @ w + np.mean(np.maximum(0.0, 1.0 - s * (X @ w)))   # noqa: E731
    return J(v), -r.fun, J


@pytest.mark.parametrize("variant", ["qp", "ls"])
def test_binary_optimum_against_scipy_and_valid_eps(variant):
    X, y = binary_problem()
    lam_b = 0.02
    Jref, Dref, J = binary_reference(X, y, lam_b)
    assert Jref - Dref < 1e-8
    tol = 1e-4 if variant == "ls" else 1e-7       # ls-bmrm's O(1/eps) is slow
    b = feed(BMRM(lam=2 * lam_b, variant=variant, tol=tol), X, y)
    b.refine(passes=5000)
    c = b.certificate()
    assert c.exact and c.gap <= tol
    v = b.Wbest.E[:5, 1] - b.Wbest.E[:5, 0]
    assert J(v) == pytest.approx(c.primal, abs=1e-12)          # two classes = binary SVM, lambda / 2
    assert c.primal <= Jref + tol
    H = np.array(b.history)
    # every lower bound is below J* (<= J(v_ref)); eps_t is non-increasing and bounds min J - J*
    assert np.all(H[:, 2] <= Jref + 1e-10)
    eps = H[:, 3]
    assert np.all(np.diff(eps) <= 1e-12)
    assert np.all(eps >= H[:, 1] - Jref - 1e-10)
    # the raw bundle dual values D_t never decrease (warm start / line search include the previous alpha)
    assert np.all(np.diff(H[:, 2]) >= -1e-10)


def test_qp_needs_fewer_cuts_than_ls():
    X, y = binary_problem(1)
    its = {}
    for variant in ("qp", "ls"):
        b = feed(BMRM(lam=0.01, variant=variant, tol=1e-3), X, y)
        b.refine(passes=5000)
        assert b.certificate().gap <= 1e-3
        its[variant] = b.iterations
    assert its["qp"] < its["ls"]


def test_bounded_bundle_aggregation_stays_valid():
    X, y = binary_problem(2)
    Jref, _, _ = binary_reference(X, y, 0.01)
    for max_cuts, tol in ((8, 1e-5), (2, 1e-3)):
        b = feed(BMRM(lam=0.02, variant="qp", tol=tol, max_cuts=max_cuts), X, y)
        b.refine(passes=3000)
        assert len(b.cuts) <= max_cuts
        assert b.certificate().gap <= tol
        H = np.array(b.history)
        assert np.all(H[:, 2] <= Jref + 1e-10)
        assert np.all(np.diff(H[:, 3]) <= 1e-12)
    assert b.aggregations > 0                # max_cuts = 2: every cut is merged into the aggregate


def test_risk_adapter_matches_brute_force_and_cuts_are_minorants():
    """Vectorized multiclass and the generic per-example path agree; R(w) is the brute-force
    hinge; each cut is tight at w and below R elsewhere; slack and margin rescaling."""
    rng = np.random.default_rng(3)
    n, d, K = 25, 4, 3
    X = rng.normal(size=(n, d))
    y = rng.integers(K, size=n)
    C = rng.uniform(0.5, 2.0, size=(K, K))
    np.fill_diagonal(C, 0.0)
    for resc in ("margin", "slack"):
        b = feed(BMRM(lam=0.1, rescaling=resc), X, y, labels=range(K))
        r = RiskOracle(MultiClass(), K, K, C, resc)
        W = Weights(d, K)
        W.E[...] = rng.normal(size=(d, K))
        R, a, bb, labs = r.evaluate(W, b.held)
        S = X @ W.E
        brute = 0.0
        for i in range(n):
            vals = [C[y[i], k] * (1 + S[i, k] - S[i, y[i]]) if resc == "slack" else C[y[i], k] + S[i, k] - S[i, y[i]]
                    for k in range(K)]
            brute += max(max(vals), 0.0)
        assert R == pytest.approx(brute / n, abs=1e-12)
        assert weights_dot(a, W) + bb == pytest.approx(R, abs=1e-12)
        # the generic path (per-example oracles) on the same window
        r.vectorized = lambda window: False
        R2, a2, bb2, _ = r.evaluate(W, b.held)
        assert R2 == pytest.approx(R, abs=1e-12) and bb2 == pytest.approx(bb, abs=1e-12)
        np.testing.assert_allclose(a2.E, a.E, atol=1e-12)
        for _ in range(5):
            W2 = Weights(d, K)
            W2.E[...] = rng.normal(size=(d, K))
            assert weights_dot(a, W2) + bb <= r.evaluate(W2, b.held)[0] + 1e-12


def _fit(cls, data, learner, **kw):
    m = cls(learner=learner, **kw)
    for x, yy in data:
        m.learn_one(x, yy)
    return m


@pytest.mark.parametrize("kind", ["chain", "multiclass", "multilabel", "pairwise", "hierarchy"])
@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_every_structure_matches_cutting_plane_optimum(kind, rescaling):
    if kind == "hierarchy":
        cls, data, kw = ss.MultiLabelSSVM, _hier_data(1, 20, TREE), {"hierarchy": TREE}
    elif kind == "pairwise":
        from test_cutting_plane import _pairwise_stream
        (make, data), cls, kw = _pairwise_stream(5, 20), ss.MultiLabelSSVM, {"pairwise": True}
    else:
        (cls, data), kw = _stream(kind, 5, n=20), {}
    bm = _fit(cls, data, BMRM(lam=0.05, rescaling=rescaling, tol=1e-7), **kw)
    assert bm.certificate().gap == float("inf")          # nothing certified before refine
    cb = bm.refine(passes=400, certify=True)
    assert cb.exact and cb.gap <= 1e-7, cb
    cp = _fit(cls, data, ss.learners.CuttingPlane(lam=0.05, rescaling=rescaling, eps=1e-7, max_iter=300), **kw)
    cc = cp.refine(passes=300, certify=True)
    # [primal - gap, primal] of both solvers contain J*: the intervals must overlap
    assert cb.primal - cb.gap <= cc.primal + 1e-9 and cc.primal - cc.gap <= cb.primal + 1e-9
    assert abs(cb.primal - cc.primal) <= cb.gap + cc.gap + 1e-9
    # BMRM's primal is the exact objective of the predicting weights: the cutting plane's own
    # exact oracle pass at BMRM's weights gives the same value
    lr = bm._learner
    R = lr._orc().risk(lr.Wbest, lr.held)
    assert cb.primal == pytest.approx(0.5 * lr.lam * lr.Wbest.sqnorm() + R, abs=1e-12)
    assert bm.predict_one(data[0][0]) is not None


def test_streaming_window_recomputes_cuts():
    cls, data = _stream("multiclass", 7, n=50)
    # scale=False: the reference learns the window alone, so its scaling statistics (and its
    # stored rows) would differ from the streamed model's, and so would the two objectives
    m = cls(learner=BMRM(lam=0.05, tol=1e-8, window=30), scale=False)
    for x, yy in data[:30]:
        m.learn_one(x, yy)
    c0 = m.refine(passes=200, certify=True)
    assert c0.gap <= 1e-8
    for x, yy in data[30:40]:           # 10 new examples, 10 evicted: a different risk
        m.learn_one(x, yy)
    lr = m._learner
    stale = m.certificate()
    assert stale.gap == float("inf") and "window changed" in stale.note
    assert lr.n_blocks == 30 and lr.held.first_seq == 10
    # the recomputed cuts are minorants of the *new* risk
    lr._rebuild()
    assert lr.rebuilds == 1 and all(c.labs is not None for c in lr.cuts)
    rng = np.random.default_rng(0)
    o = lr._orc()
    for _ in range(5):
        W = lr.W.copy()
        W.E[...] = rng.normal(size=W.E.shape)
        R = o.risk(W, lr.held)
        assert max(weights_dot(lr.dense_cut(k), W) + c.b for k, c in enumerate(lr.cuts)) <= R + 1e-12
    c1 = m.refine(passes=200, certify=True)
    assert c1.gap <= 1e-8 and c1.n_blocks == 30
    ref = cls(learner=ss.learners.CuttingPlane(lam=0.05, eps=1e-8, max_iter=300), scale=False)
    for x, yy in data[10:40]:
        ref.learn_one(x, yy)
    cr = ref.refine(passes=300, certify=True)
    assert abs(c1.primal - cr.primal) <= c1.gap + cr.gap + 1e-9


def test_state_roundtrip_continues_identically(tmp_path):
    X, y = binary_problem(4, n=40, d=4)
    a = feed(BMRM(lam=0.02, tol=0.0, max_cuts=4), X, y)
    a.refine(passes=6)
    save_state(tmp_path / "b.ssvm", a.state(), kind="test")
    st, _ = load_state(tmp_path / "b.ssvm")
    b = BMRM(lam=0.02, tol=0.0, max_cuts=4)
    b.restore(MultiClass(), [0, 1], st)
    assert b.certificate().gap == a.certificate().gap
    a.refine(passes=10)
    b.refine(passes=10)
    np.testing.assert_array_equal(a.W.E, b.W.E)
    assert a.history == b.history


def test_certificate_observes():
    X, y = binary_problem(5)
    a = feed(BMRM(lam=0.02, tol=0.0), X, y)
    b = feed(BMRM(lam=0.02, tol=0.0), X, y)
    for _ in range(15):
        a.refine(passes=1)
        a.certificate()
        b.refine(passes=1)
    np.testing.assert_array_equal(a.Wbest.E, b.Wbest.E)


def test_predicts_before_refine_and_rejects_unknown_structure():
    X, y = binary_problem(6, n=5)
    b = feed(BMRM(lam=0.1), X, y)
    out = b.predict(np.array([0, 1]), np.array([0, 5]), np.arange(5), X[0], np.array([0, 1]), 1)
    assert out.shape == (1,)

    class Odd:
        name = "odd"
    with pytest.raises(ValueError, match="BMRM learns"):
        BMRM().bind(Odd(), [])


def _bundle_on_planes(A, lam, iters):
    """BMRM on J(w) = max_i <a_i, w> + lam/2 ||w||^2 (columns a_i), the same bundle QP kernel."""
    d, m = A.shape
    w = np.zeros(d)
    cuts = []
    out = []
    best = np.inf
    alpha = np.zeros(0)
    for _ in range(iters):
        vals = A.T @ w
        i = int(np.argmax(vals))
        best = min(best, vals[i] + 0.5 * lam * w @ w)
        cuts.append(A[:, i])
        At = np.array(cuts).T
        alpha = np.append(alpha, 0.0) if len(alpha) else np.ones(1)
        KP.simplex_qp(At.T @ At, np.zeros(len(cuts)), lam, alpha, 1e-14, 100000)
        w = -At @ alpha / lam
        Dt = -0.5 * lam * w @ w
        out.append((best, best - Dt))
    return out


def test_hadamard_instance_as_printed_finishes_in_two_iterations():
    """Saha, Zhang, Vishwanathan's Theorem 6/7 instance: A = (1/sqrt d)[[H, -H], [-H, H]] with
    H = H_{d/2}. The printed A has rank d/2 (column j + d/2 = -column j), so after the first cut
    a_j the next subgradient is -a_j and the bundle {a_j, -a_j} gives w_2 = 0 = w*: eps_2 = 0,
    where Theorem 6 claims eps_t >= 1/(2 lam t) for t < d/2."""
    from scipy.linalg import hadamard
    d, lam = 16, 1.0
    H = hadamard(d // 2).astype(float)
    A = np.block([[H, -H], [-H, H]]) / np.sqrt(d)
    assert np.linalg.matrix_rank(A) == d // 2
    assert np.max(np.abs(A.T @ A - np.eye(d))) == pytest.approx(1.0)
    hist = _bundle_on_planes(A, lam, 6)
    (J1, e1), (J2, e2) = hist[0], hist[1]
    assert J1 == pytest.approx(0.0) and e1 == pytest.approx(0.5)     # J(w_0 = 0) = 0 = J*; model at w_1
    assert e2 == pytest.approx(0.0, abs=1e-12)                        # certified optimal after 2 cuts
    assert e2 < 1.0 / (2 * lam * 2)                                   # the claimed bound 1/(2 lam t) fails


@pytest.mark.parametrize("make", [lambda: BMRM(lam=0.05, tol=1e-6), lambda: ss.learners.Pragam(lam=0.05, tol=1e-6)])
def test_estimator_save_load(tmp_path, make):
    cls, data = _stream("multiclass", 8, n=30)
    m = cls(learner=make())
    for x, yy in data:
        m.learn_one(x, yy)
    c = m.refine(passes=50, certify=True)
    m.save(tmp_path / "m.ssvm")
    r = ss.load(tmp_path / "m.ssvm")
    assert type(r._learner) is type(m._learner)
    assert r.certificate().gap == pytest.approx(c.gap, abs=1e-12)
    assert [r.predict_one(x) for x, _ in data] == [m.predict_one(x) for x, _ in data]
    m.refine(passes=5)
    r.refine(passes=5)
    np.testing.assert_allclose(r._learner.W.E, m._learner.W.E, atol=1e-12)


def _ocr_small_letters(n):
    Xs, ys, _, _ = ss.datasets.load_ocr("small")
    return np.vstack(Xs)[:n], np.concatenate(ys)[:n]


def test_ocas_line_search_reaches_the_target_gap_in_100_iterations():
    """500 OCR letters as a 26-class stream, lam = 1e-2: with the OCAS line search (Franc &
    Sonnenburg) BMRM certifies eps_t <= 1e-2 within 100 iterations; the cut at w_t (plain BMRM)
    is still at ~2e-2 after 100 (issue 27's finding, reproduced on a smaller window)."""
    X, y = _ocr_small_letters(500)
    b = feed(BMRM(lam=1e-2, tol=1e-2), X, y, range(26))
    b.refine(passes=100)
    c = b.certificate()
    assert c.exact and c.gap <= 1e-2 and b.iterations < 100 and b.line_steps > 0
    plain = feed(BMRM(lam=1e-2, tol=1e-2, line_search="none"), X, y, range(26))
    plain.refine(passes=100)
    assert plain.certificate().gap > 1e-2
    # the certificate stays valid: the plain run's primal is above the OCAS run's lower bound
    assert plain.certificate().primal >= c.dual - 1e-12 and c.primal >= plain.certificate().dual - 1e-12


@pytest.mark.parametrize("rescaling,variant", [("margin", "qp"), ("slack", "qp"), ("margin", "ls")])
def test_cuts_as_labelings_equal_dense_cuts(rescaling, variant):
    """One-token windows keep a cut as its labelings (no d x K vector): the Gram matrix from the
    scores and the combined weights equal those of the dense cuts to 1e-10, also after a window
    change (rebuild) and a save / load."""
    X, y = _ocr_small_letters(300)
    b = feed(BMRM(lam=1e-2, tol=0.0, variant=variant, rescaling=rescaling, max_cuts=12, window=250), X, y,
             range(26))
    b.refine(passes=20)
    for step in range(3):
        o = b._orc()
        dense = [o.cut_from_labelings(b.W, b.held, c.seq0, c.labs) if c.labs is not None else (c.a, c.b)
                 for c in b.cuts]
        assert any(c.a is None for c in b.cuts)
        for k, (a, bb) in enumerate(dense):
            assert np.abs(b.dense_cut(k).E - a.E).max() <= 1e-10 and abs(b.cuts[k].b - bb) <= 1e-10
        G = np.array([[weights_dot(p[0], q[0]) for q in dense] for p in dense])
        assert np.abs(b.G - G).max() <= 1e-10 * max(1.0, np.abs(G).max())
        W = -sum(al * a.E for al, (a, _) in zip(b.alpha, dense)) / b.lam
        assert np.abs(W - b.W.E).max() <= 1e-10 * max(1.0, np.abs(W).max())
        if step == 0:    # window change: the labeled cuts are realigned and recomputed
            for i in range(250, 300):
                b.learn(np.array([0, X.shape[1]]), np.arange(X.shape[1]), X[i], np.array([y[i]]))
            b.refine(passes=3)
        elif step == 1:
            c = BMRM(lam=1e-2, tol=0.0, variant=variant, rescaling=rescaling, max_cuts=12, window=250)
            c.restore(MultiClass(), list(range(26)), b.state())
            assert np.array_equal(c.G, b.G) and c.certificate().gap == b.certificate().gap
            b = c
            b.refine(passes=2)


def test_state_with_dense_cuts_loads():
    """A state saved before cuts were kept as labelings (every cut with its dense E / T / B)
    loads: the dense vectors are dropped, the Gram matrix, weights and certificate are kept."""
    X, y = _ocr_small_letters(200)
    b = feed(BMRM(lam=1e-2, tol=0.0, max_cuts=8), X, y, range(26))
    b.refine(passes=12)
    st = b.state()
    for k, c in enumerate(st["cuts"]):
        a = b.dense_cut(k)
        c["E"], c["T"], c["B"] = a.E.copy(), a.T.copy(), a.B.copy()
    del st["scalars"]["line_steps"]
    r = BMRM(lam=1e-2, tol=0.0, max_cuts=8)
    r.restore(MultiClass(), list(range(26)), st)
    assert all((c.a is None) == (c.labs is not None) for c in r.cuts) and np.array_equal(r.G, b.G)
    assert r.certificate().gap == b.certificate().gap
    r.refine(passes=3)
    b.refine(passes=3)
    assert abs(r.certificate().gap - b.certificate().gap) <= 1e-12
