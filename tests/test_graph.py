"""GraphSegmenter: the min-cut oracle against brute force (and PyMaxflow when installed), BCFW
with positivity constraints (Osokin et al. 2016, App. H) against a bound-constrained QP, and the
estimator's persistence and dead-letter rules."""
import itertools

import numpy as np
import pytest
from scipy.optimize import minimize

import streamssvm as ss
from streamssvm._kernels import maxflow as MF
from streamssvm.learners import BCFW
from streamssvm.structures.graph import BinaryGraph


def _random_graph(rng, n, d=2, q=2, p_edge=0.5):
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < p_edge]
    return {"nodes": rng.normal(size=(n, d)), "edges": np.array(pairs, dtype=np.int64).reshape(-1, 2),
            "edge_features": rng.exponential(1.0, size=(len(pairs), q))}


def test_min_cut_matches_brute_force_on_random_energies():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < 0.5]
        ea = np.array([p[0] for p in pairs], dtype=np.int64)
        eb = np.array([p[1] for p in pairs], dtype=np.int64)
        pen = rng.exponential(1.0, len(pairs)) * (rng.random(len(pairs)) < 0.8)   # zeros too
        theta = rng.normal(size=(n, 2))
        out = np.zeros(n, dtype=np.int32)
        s = MF.binary_map(theta, ea, eb, pen, out)
        best = max(MF.labeling_score(theta, ea, eb, pen, np.array(y, dtype=np.int32))
                   for y in itertools.product((0, 1), repeat=n))
        assert s == pytest.approx(best, abs=1e-9)
        assert MF.labeling_score(theta, ea, eb, pen, out) == pytest.approx(s)


@pytest.mark.parametrize("augmented", [False, True])
def test_graph_oracle_matches_brute_force(augmented):
    rng = np.random.default_rng(1 + augmented)
    for _ in range(60):
        n = int(rng.integers(1, 8))
        g = BinaryGraph(2, 2)
        rec = g.record(_random_graph(rng, n))
        w = rng.normal(size=g.dim)
        w[g.pairwise_coords()] = np.abs(w[g.pairwise_coords()])
        t = rng.integers(0, 2, n).astype(np.int32)
        y = g.oracle(rec, w, t) if augmented else g.predict(rec, w)
        _, best = g.brute_force(rec, w, t if augmented else None)
        got = float(w @ g.joint_feature(rec, y)) + (g.loss(t, y) if augmented else 0.0)
        assert got == pytest.approx(best, abs=1e-9)


def test_min_cut_matches_pymaxflow_on_a_grid():
    maxflow = pytest.importorskip("maxflow")
    rng = np.random.default_rng(2)
    H, W = 30, 40
    idx = np.arange(H * W).reshape(H, W)
    ea = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()]).astype(np.int64)
    eb = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()]).astype(np.int64)
    pen = rng.exponential(1.0, len(ea))
    theta = rng.normal(size=(H * W, 2)) * 2
    out = np.zeros(H * W, dtype=np.int32)
    ours = MF.binary_map(theta, ea, eb, pen, out)
    g = maxflow.Graph[float]()
    nodes = g.add_nodes(H * W)
    for a, b, p in zip(ea, eb, pen):
        g.add_edge(int(a), int(b), p, p)
    d = theta[:, 1] - theta[:, 0]
    for i in range(H * W):
        g.add_tedge(int(nodes[i]), max(d[i], 0.0), max(-d[i], 0.0))
    g.maxflow()
    y = np.array([1 - g.get_segment(int(i)) for i in nodes], dtype=np.int32)   # source side: y = 1
    assert MF.labeling_score(theta, ea, eb, pen, y) == pytest.approx(ours, rel=1e-12, abs=1e-9)


# ----------------------------------------------------------------------------- App. H against a QP
def _checker_data():
    """Three 3-node paths labelled 0 1 0 / 1 0 1: neighbours disagree, so the unconstrained
    optimum rewards cuts (a negative pairwise weight) and the constraint w_p >= 0 is active."""
    rng = np.random.default_rng(3)
    out = []
    for k in range(3):
        y = np.array([0, 1, 0]) if k % 2 == 0 else np.array([1, 0, 1])
        X = np.c_[0.3 * (2 * y - 1) + rng.normal(0, 0.5, 3), np.ones(3)]
        out.append(({"nodes": X, "edges": [[0, 1], [1, 2]]}, y))
    return out


def _qp(data, lam, nonneg):
    g = BinaryGraph(2, 1)
    rows = []
    for x, t in data:
        rec = g.record(x)
        pt = g.joint_feature(rec, t)
        rows.append([(g.loss(t, y), pt - g.joint_feature(rec, np.array(y))) for y in itertools.product((0, 1), repeat=3)])
    n, D = len(rows), g.dim

    def P(w):
        return 0.5 * lam * w @ w + np.mean([max(L - w @ psi for L, psi in r) for r in rows])

    cons = [{"type": "ineq", "fun": (lambda z, i=i, L=L, psi=psi: z[D + i] - L + z[:D] @ psi)}
            for i, r in enumerate(rows) for L, psi in r]
    bounds = [(None, None)] * D + [(0, None)] * n
    if nonneg:
        bounds[D - 1] = (0, None)
    res = minimize(lambda z: 0.5 * lam * z[:D] @ z[:D] + z[D:].mean(), np.zeros(D + n), method="SLSQP",
                   constraints=cons, bounds=bounds, options={"ftol": 1e-14, "maxiter": 1000})
    return res.x[:D], P


@pytest.mark.parametrize("averaging, step, cache", [(False, "fw", False), (True, "fw", False), (False, "pairwise", False),
                                                    (False, "away", False), (True, "pairwise", False),
                                                    (False, "fw", True), (False, "pairwise", True)])
def test_nonneg_bcfw_certificate_bounds_the_true_suboptimality_and_reaches_the_qp(averaging, step, cache):
    data = _checker_data()
    lam = 0.1
    w_free, _ = _qp(data, lam, nonneg=False)
    assert w_free[-1] < -1e-3                   # the constraint matters on this data
    w_star, P = _qp(data, lam, nonneg=True)
    p_star = P(w_star)
    m = ss.GraphSegmenter(learner=BCFW(lam=lam, nonneg="pairwise", replay=0, averaging=averaging, step=step,
                                       cache=cache, sampling="uniform", seed=0, gap_every=2.0))
    for x, y in data:
        m.learn_one(x, y)
    for _ in range(40):
        m.refine(passes=10)
        c = m.certificate()
        w = m.bound_learner.predict_weights()
        assert w[-1] >= 0.0
        assert c.primal == pytest.approx(P(w), abs=1e-12)        # the certified primal is P(w)
        assert c.raw_gap >= c.primal - p_star - 1e-8             # a valid bound on the suboptimality
    # the exact (piecewise) line search reaches the optimum (the clipped step of the unconstrained
    # problem stalled at a gap of 8e-5 here); the average converges as O(1/k)
    assert c.gap < (1e-3 if averaging else 1e-9)
    if not averaging:
        np.testing.assert_allclose(w, w_star, atol=1e-4)
    assert c.primal - p_star < 1e-3
    # lam-strong convexity: lam/2 ||w - w*||^2 <= P(w) - P* <= gap
    assert 0.5 * lam * np.sum((w - w_star) ** 2) <= c.raw_gap + 1e-8
    assert w[-1] == pytest.approx(0.0, abs=1e-6)
    eng = m.bound_learner
    assert (eng.cache_hits > 0) == cache and eng.oracle_calls > 0


def test_window_evictions_keep_the_certificate_valid_for_the_held_graphs():
    """A window of 2 over 3 graphs: the certificate bounds the suboptimality on the 2 held ones
    (the averaged dual restarts at the eviction)."""
    data = _checker_data()
    lam = 0.1
    w_star, P = _qp(data[1:], lam, nonneg=True)
    m = ss.GraphSegmenter(learner=BCFW(lam=lam, nonneg="pairwise", window=2, replay=3, seed=0))
    for x, y in data:
        m.learn_one(x, y)
        c = m.certificate()
        assert c.raw_gap > -1e-12
    assert m.n_blocks == 2 and m.bound_learner.evicted == 1
    for _ in range(5):
        m.refine(passes=20)
        c = m.certificate()
        w = m.bound_learner.predict_weights()
        assert c.primal == pytest.approx(P(w), abs=1e-12)
        assert c.raw_gap >= c.primal - P(w_star) - 1e-8


def test_constrained_line_search_is_exact():
    """The step maximizes the piecewise-quadratic dual along the direction (checked on a fine
    grid) and is the closed form without constraints."""
    from streamssvm.learners._graph_bcfw import GraphBCFW
    rng = np.random.default_rng(8)
    g = BinaryGraph(2, 3)
    for nonneg in (g.pairwise_coords(), np.arange(g.dim), np.zeros(0, dtype=np.int64)):
        eng = GraphBCFW(BCFW(lam=0.1, nonneg="pairwise"), g, nonneg)
        for _ in range(200):
            v, delta = rng.normal(size=g.dim), rng.normal(size=g.dim)
            a, lam = rng.normal(), rng.uniform(0.01, 1.0)

            def D(gam):
                return a * gam - 0.5 * lam * np.sum(eng.project(v + gam * delta) ** 2)
            gam = eng.line_search(v, delta, a, lam)
            grid = np.linspace(0.0, 1.0, 2001)
            assert 0.0 <= gam <= 1.0
            assert D(gam) >= max(D(t) for t in grid) - 1e-12
            if nonneg.size == 0:
                assert gam == pytest.approx(min(max((a - lam * v @ delta) / (lam * delta @ delta), 0.0), 1.0))


def test_nonneg_is_refused_where_it_is_not_supported():
    with pytest.raises(ValueError, match="GraphSegmenter only"):
        ss.MulticlassSSVM(learner=BCFW(nonneg=[0])).learn_one({"a": 1.0}, "x")
    with pytest.raises(ValueError, match="nonneg must be"):
        BCFW(nonneg=[-1])
    with pytest.raises(ValueError, match="nonneg='pairwise'"):
        ss.GraphSegmenter(learner=BCFW())
    for kw in ({"rescaling": "slack"},):
        with pytest.raises(ValueError, match="support"):
            ss.GraphSegmenter(learner=BCFW(nonneg="pairwise", **kw))
    m = ss.GraphSegmenter(learner=BCFW(nonneg=[0]))   # does not cover the pairwise weight
    with pytest.raises(ValueError, match="does not cover"):
        m.learn_one({"nodes": [[1.0]], "edges": []}, [1])
    assert m.bound_learner is None


# ----------------------------------------------------------------------------- the estimator
def _stream(seed, count):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.integers(3, 9))
        y = (np.arange(n) >= rng.integers(1, n)).astype(int)
        X = np.c_[y + rng.normal(0, 0.8, n), np.ones(n)]
        edges = [[i, i + 1] for i in range(n - 1)]
        F = np.c_[np.ones(n - 1), np.exp(-np.abs(np.diff(X[:, 0])))]
        out.append(({"nodes": X, "edges": edges, "edge_features": F}, y.tolist()))
    return out


@pytest.mark.parametrize("step, cache", [("fw", False), ("pairwise", False), ("away", False), ("fw", True),
                                         ("pairwise", True)])
def test_save_load_round_trip_and_continuation(tmp_path, step, cache):
    data = _stream(4, 40)
    m = ss.GraphSegmenter(learner=BCFW(lam=0.05, nonneg="pairwise", seed=1, window=30, step=step, cache=cache,
                                       cache_size=4))
    for x, y in data[:30]:
        m.learn_one(x, y)
    m.refine(passes=2)
    p = tmp_path / "g.ssvm"
    m.save(p)
    m2 = ss.load(p)
    assert type(m2).__name__ == "GraphSegmenter"
    assert [m2.predict_one(x) for x, _ in data] == [m.predict_one(x) for x, _ in data]
    assert m2.certificate().primal == pytest.approx(m.certificate().primal, rel=1e-12)
    for mm in (m, m2):
        for x, y in data[30:]:
            mm.learn_one(x, y)
        mm.refine(passes=1)
    np.testing.assert_array_equal(m.bound_learner.U, m2.bound_learner.U)
    assert m.n_blocks == m2.n_blocks == 30 and m.bound_learner.evicted == 10
    assert m.pairwise_weights.min() >= 0


@pytest.mark.parametrize("x, y", [
    ({"nodes": [[1.0, 1.0], [0.0, 1.0]], "edges": [[0, 2]]}, [0, 1]),            # node id out of range
    ({"nodes": [[1.0, 1.0], [0.0, 1.0]], "edges": [[0, 0]]}, [0, 1]),            # self-loop
    ({"nodes": [[1.0, 1.0], [0.0, 1.0]], "edges": [[0, 1]], "edge_features": [[-1.0, 1.0]]}, [0, 1]),
    ({"nodes": [[1.0, 1.0], [0.0, 1.0]], "edges": [[0, 1]], "edge_features": [[1.0]]}, [0, 1]),   # q
    ({"nodes": [[1.0], [0.0]], "edges": [[0, 1]]}, [0, 1]),                                       # d
    ({"nodes": [[1.0, 1.0], [0.0, 1.0]], "edges": [[0, 1]]}, [0, 2]),            # label not 0/1
    ({"nodes": [[1.0, 1.0], [0.0, 1.0]], "edges": [[0, 1]]}, [0]),               # one label short
    ({"nodes": [[1.0, float("nan")], [0.0, 1.0]], "edges": [[0, 1]]}, [0, 1]),
    ({"nodes": [[1.0, 1.0]], "edges": [[0.5, 1]]}, [0]),
    ({"edges": [[0, 1]]}, [0, 1]),
    ([[1.0, 1.0]], [0]),
])
def test_a_malformed_graph_is_refused_before_any_state_changes(x, y):
    data = _stream(5, 5)
    m = ss.GraphSegmenter(learner=BCFW(lam=0.05, nonneg="pairwise", seed=0))
    for xx, yy in data:
        m.learn_one(xx, yy)
    before = m.state()
    with pytest.raises((ValueError, TypeError)):
        m.learn_one(x, y)
    with pytest.raises((ValueError, TypeError)):
        m.learn_many([data[0][0], x], [data[0][1], y])
    after = m.state()
    for k, v in before["learner"].items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(after["learner"][k]), err_msg=k)


def test_learning_uses_the_edges():
    """On noisy step signals the pairwise weights are positive and beat per-node decisions."""
    train, test = _stream(6, 150), _stream(7, 100)
    m = ss.GraphSegmenter(learner=BCFW(lam=1e-2, nonneg="pairwise", seed=0))
    m.learn_many([x for x, _ in train], [y for _, y in train])
    m.refine(passes=10)
    assert m.pairwise_weights.max() > 0.05
    err = np.mean([np.mean(np.array(m.predict_one(x)) != y) for x, y in test])
    W = m.unary_weights
    node = np.mean([np.mean((np.asarray(x["nodes"]) @ (W[:, 1] - W[:, 0]) > 0).astype(int) != y) for x, y in test])
    assert err < node
    assert m.certificate().raw_gap > -1e-9


def test_a_crafted_state_is_refused_with_a_checkpoint_error():
    from streamssvm.checkpoint import CheckpointError
    from streamssvm.estimators.graph import GraphSegmenter
    m = ss.GraphSegmenter(learner=BCFW(lam=0.05, nonneg="pairwise", seed=0))
    for x, y in _stream(9, 4):
        m.learn_one(x, y)
    good = m.state()
    assert GraphSegmenter.from_state(good).predict_one(_stream(9, 1)[0][0]) == m.predict_one(_stream(9, 1)[0][0])
    bad_states = []
    for key, value in (("u", np.zeros((3, 7))), ("node_ptr", np.array([0, 5, 3, 9, 40])), ("ea", good["learner"]["ea"] + 1000),
                       ("U", np.full(7, np.nan)), ("nonneg", np.array([0]))):
        st = {"config": good["config"], "shape": good["shape"], "learner": dict(good["learner"], **{key: value})}
        bad_states.append(st)
    bad_states.append({"config": good["config"], "shape": [0, 2], "learner": good["learner"]})
    for st in bad_states:
        with pytest.raises(CheckpointError):
            GraphSegmenter.from_state(st)


def test_the_stream_step_sends_a_malformed_graph_to_the_dead_letters():
    from streamssvm.connectors.base import Record
    from streamssvm.step import step
    m = ss.GraphSegmenter(learner=BCFW(lam=0.1, nonneg="pairwise", seed=0))
    ok = step(m, Record({"nodes": [[1.0, 1.0], [0.0, 1.0]], "edges": [[0, 1]]}, [1, 0]))
    assert ok.status == "learned" and ok.prediction == [0, 0]
    before = m.state()["learner"]
    for x, y in (({"nodes": [[1.0, 1.0], [0.0, 1.0]], "edges": [[0, 5]]}, [1, 0]),
                 ({"nodes": [[1.0, 1.0], [0.0, 1.0]], "edges": [[0, 1]]}, [1, 0, 1]),
                 ("not a graph", [1])):
        out = step(m, Record(x, y))
        assert out.bad and out.reason
    after = m.state()["learner"]
    assert all(np.array_equal(np.asarray(before[k]), np.asarray(after[k])) for k in before)
    assert m.n_blocks == 1


@pytest.mark.parametrize("step", ["pairwise", "away"])
def test_active_sets_stay_a_convex_combination_of_the_blocks_corners(step):
    """Every block's weights sum to 1, are >= 0, and reproduce its u_i and L_i, also when a full
    active set (cache_size 3) made room by a drop step."""
    m = ss.GraphSegmenter(learner=BCFW(lam=0.01, nonneg="pairwise", seed=0, step=step, cache_size=3))
    for x, y in _stream(10, 30):
        m.learn_one(x, y)
    m.refine(passes=20)
    eng = m.bound_learner
    sizes = [len(a) for a in eng.active]
    assert max(sizes) <= 3 and max(sizes) >= 2
    for i, act in enumerate(eng.active):
        alpha = np.array([c[0] for c in act.values()])
        assert alpha.min() > 0 and alpha.sum() == pytest.approx(1.0, abs=1e-9)
        np.testing.assert_allclose(sum(c[0] * c[1] for c in act.values()), eng.u[i], atol=1e-9)
        assert sum(c[0] * c[2] for c in act.values()) == pytest.approx(eng.L[i], abs=1e-9)
    assert m.certificate().raw_gap > -1e-9


def test_classes_are_the_node_labels():
    """Regression: ``GraphSegmenter().classes`` (the estimators' common property) raised
    AttributeError; ``predict`` reads it to check the labels of its records."""
    assert ss.GraphSegmenter().classes == [0, 1]
