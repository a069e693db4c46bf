"""Hierarchical multi-label (Choi, Meshi & Srebro, AISTATS 2016, section 5.2): oracles against brute-force enumeration
over all leaf subsets, statistic algebra, certificates, SGD searches, the estimator."""
import os
import tempfile

import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels import structops as so
from streamssvm._kernels.bundles import model
from streamssvm.oracles.slack import angular_search, point_oracles
from streamssvm.structures import Hierarchy, MultiLabel
from streamssvm._kernels.common import py_entry
from test_structures import random_tokens  # tests/ is on sys.path under pytest


def random_hierarchy(rng, n_leaves, n_internal, dag=False, forest=False):
    """A random tree (or DAG: extra parents) whose leaves are l0..l{n_leaves-1}; internal nodes
    without children would become leaves too, so every internal node gets a child."""
    internal = [f"n{i}" for i in range(n_internal)]
    h = {}
    for i in range(1, n_internal):
        if forest and rng.random() < 0.3:
            h[internal[i]] = None
        else:
            h[internal[i]] = internal[int(rng.integers(i))]
    if n_internal:
        h[internal[0]] = None
    leaves = [f"l{k}" for k in range(n_leaves)]
    # every internal node needs a child: hand out leaves first to childless internal nodes
    has_child = {p for p in h.values() if p is not None}
    free = [n for n in internal if n not in has_child]
    for k, lf in enumerate(leaves):
        if k < len(free):
            h[lf] = free[k]
        elif n_internal:
            h[lf] = internal[int(rng.integers(n_internal))]
        else:
            h[lf] = None
    if dag:
        for lf in leaves + internal[1:]:
            if rng.random() < 0.4 and n_internal > 1:
                ps = h[lf] if isinstance(h[lf], list) else ([h[lf]] if h[lf] is not None else [])
                extra = internal[int(rng.integers(n_internal))]
                # keep it acyclic: only parents created before (smaller index) for internal nodes
                if lf in internal and internal.index(extra) >= internal.index(lf):
                    continue
                if extra not in ps:
                    h[lf] = ps + [extra]
        if n_internal > 1 and not isinstance(h[leaves[0]], list):  # at least one node with two parents
            h[leaves[0]] = [h[leaves[0]], next(n for n in internal if n != h[leaves[0]])]
    return h


def scratch(Kc):
    """Work arrays as the kernels take them (``bundles.Scratch``)."""
    return (np.zeros((1, Kc)), np.zeros((1, Kc)), np.zeros((1, Kc), np.int32), np.zeros(Kc, np.int32),
            np.zeros(Kc, np.int32), np.zeros(Kc + 1), np.zeros((1, 1, 1)))


def setup(rng, n_leaves, n_internal, dag=False, forest=False, d=4, scale=None):
    hier = Hierarchy(random_hierarchy(rng, n_leaves, n_internal, dag, forest))
    N = len(hier.nodes)
    Kc = N + 1
    C = hier.cost_matrix(Kc, hier.nodes)
    E = rng.normal(size=(d, Kc))
    tp, fi, fv = random_tokens(rng, 1, d)
    S = np.zeros((1, Kc))
    so.emission_scores(E, 1.0 if scale is None else scale, tp, fi, fv, 1, N, S)
    true_leaves = sorted(rng.choice(hier.n_leaves, size=int(rng.integers(0, hier.n_leaves + 1)), replace=False))
    ytrue = hier.closure(true_leaves)
    return hier, N, Kc, C, E, tp, fi, fv, S, ytrue


CASES = ([("tree", nl, ni) for nl in (1, 2, 4, 6) for ni in (0, 1, 3)]
         + [("forest", 5, 4), ("forest", 7, 5), ("dag", 5, 4), ("dag", 7, 5), ("dag", 8, 6)])


def _brute(hier, S, ytrue):
    """All leaf subsets: (score, number of wrong leaves, closure indicator)."""
    nl = hier.n_leaves
    yt = np.zeros(len(hier.nodes), np.int32)
    yt[ytrue] = 1
    out = []
    for y in hier.all_labelings():
        out.append((float(S[0, :len(y)] @ y), int(np.sum(y[:nl] != yt[:nl])), y))
    return out, float(S[0, :len(yt)] @ yt)


@pytest.mark.parametrize("shape,nl,ni", CASES)
@pytest.mark.parametrize("seed", range(4))
def test_oracles_match_brute_force(shape, nl, ni, seed):
    rng = np.random.default_rng(100 * seed + 10 * nl + ni + (7 if shape == "dag" else 0))
    hier, N, Kc, C, E, tp, fi, fv, S, ytrue = setup(rng, nl, ni, dag=shape == "dag", forest=shape == "forest",
                                                    scale=float(rng.uniform(0.5, 3.0)))
    if shape == "dag":
        assert not hier.is_tree or ni <= 1
    Ki = hier.n_leaves
    ly = len(ytrue)
    labs, ts = _brute(hier, S, ytrue)
    T, B = np.zeros((Kc, Kc)), np.zeros((2, Kc))
    ybuf = np.zeros(Kc, np.int32)
    mod, W, scr = model(hier, N, Kc, C), (E, T, B), scratch(Kc)
    # MAP and loss-augmented decoding (the lambda-oracle for any loss weight)
    for ls in (0.0, 1.0, float(rng.uniform(0.1, 6.0))):
        out = np.zeros(Kc, np.int32)
        val = so.decode(mod, W, S, 1.0, 1, ytrue, ly, ls, Ki, scr, out)
        best = max(sc + ls * m / Ki for sc, m, _ in labs)
        assert val == pytest.approx(best, abs=1e-9)
        # the labeling is a closure and attains the value
        assert any(np.array_equal(out[:N], y) for _, _, y in labs)
        assert out[N:].sum() == 0
        got = (so.labeling_score(so.HIER, S, T, B, 1.0, out, 1, N, False)
               + ls * so.labeling_loss(so.HIER, out, ytrue, ly, C, 1, N, Ki, ybuf))
        assert got == pytest.approx(best, abs=1e-9)
    # slack oracle
    out = np.zeros(Kc, np.int32)
    h = so.slack_oracle(mod, W, S, 1.0, 1, ytrue, ly, Ki, scr, out)
    best = max(max((m / Ki) * (1.0 + sc - ts) for sc, m, _ in labs), 0.0)
    assert h == pytest.approx(best, abs=1e-9)
    loss = so.labeling_loss(so.HIER, out, ytrue, ly, C, 1, N, Ki, ybuf)
    assert loss * (1.0 + so.labeling_score(so.HIER, S, T, B, 1.0, out, 1, N, False) - ts) == pytest.approx(best, abs=1e-9)
    # level points: the best score for every number of wrong leaves, and the level labelings
    hs, gs = np.zeros(Kc + 1), np.zeros(Kc + 1)
    n = so.slack_levels(mod, W, S, 1.0, 1, ytrue, ly, Ki, scr, hs, gs)
    levels = {}
    for sc, m, _ in labs:
        levels[m] = max(levels.get(m, -np.inf), sc)
    expect = sorted((1.0 + v - ts, m / Ki) for m, v in levels.items() if m > 0)
    np.testing.assert_allclose(sorted(zip(hs[:n], gs[:n])), expect, atol=1e-9)
    for m in range(0, Ki + 1):
        lab = np.zeros(Kc, np.int32)
        ok = so.hier_level_labeling(S, hier.graph(N), N, ytrue, ly, Ki, m, lab)
        assert ok == (m in levels)
        if ok:
            assert so.labeling_loss(so.HIER, lab, ytrue, ly, C, 1, N, Ki, ybuf) == pytest.approx(m / Ki)
            assert so.labeling_score(so.HIER, S, T, B, 1.0, lab, 1, N, False) == pytest.approx(levels[m], abs=1e-9)
            assert any(np.array_equal(lab[:N], y) for _, _, y in labs)
    # the searches on the level points reach the exact slack oracle
    o, oc = point_oracles(list(zip(hs[:n], gs[:n])))
    r = angular_search(oc, lam0=1.0, tol=1.0)
    assert r.phi == pytest.approx(h, abs=1e-9)
    assert r.queries <= 2 * n + 1


def test_flat_hierarchy_equals_independent_multilabel():
    """Every leaf its own root: the hierarchy is the independent multi-label structure."""
    rng = np.random.default_rng(3)
    for trial in range(20):
        K = int(rng.integers(1, 7))
        hier = Hierarchy({f"l{k}": None for k in range(K)})
        assert hier.n_leaves == K and hier.is_tree
        Kc = K + 2
        S = rng.normal(size=(1, Kc))
        ytrue = np.array(sorted(rng.choice(K, size=int(rng.integers(0, K + 1)), replace=False)), np.int32)
        C_h = hier.cost_matrix(Kc, hier.nodes)
        C_m = 1.0 - np.eye(Kc)
        T, B = np.zeros((Kc, Kc)), np.zeros((2, Kc))
        W = (np.zeros((1, Kc)), T, B)
        m_h, m_m = model(hier, K, Kc, C_h), model(MultiLabel(), K, Kc, C_m)
        for ls in (0.0, 1.3):
            a, b = np.zeros(Kc, np.int32), np.zeros(Kc, np.int32)
            va = so.decode(m_h, W, S, 1.0, 1, ytrue, len(ytrue), ls, K, scratch(Kc), a)
            vb = so.decode(m_m, W, S, 1.0, 1, ytrue, len(ytrue), ls, K, scratch(Kc), b)
            assert va == pytest.approx(vb, abs=1e-12)
        ha = so.slack_oracle(m_h, W, S, 1.0, 1, ytrue, len(ytrue), K, scratch(Kc), np.zeros(Kc, np.int32))
        hb = so.slack_oracle(m_m, W, S, 1.0, 1, ytrue, len(ytrue), K, scratch(Kc), np.zeros(Kc, np.int32))
        assert ha == pytest.approx(hb, abs=1e-12)


@pytest.mark.parametrize("shape", ["tree", "dag"])
def test_statistic_algebra_matches_dense_feature_map(shape):
    rng = np.random.default_rng(11)
    for trial in range(5):
        hier, N, Kc, C, E, tp, fi, fv, S, ytrue = setup(rng, 5, 4, dag=shape == "dag")
        d = E.shape[0]
        Ki, ly = hier.n_leaves, len(ytrue)
        labs = hier.all_labelings()
        pick = [np.concatenate([labs[i], np.zeros(Kc - N, np.int32)])
                for i in rng.choice(len(labs), size=4, replace=False)]
        coefs = rng.dirichlet(np.ones(4))
        m = np.zeros(so.stat_size(so.HIER, 1, Kc))
        dense = np.zeros((d, N))
        loss = 0.0
        for c, y in zip(coefs, pick):
            so.labeling_stat(so.HIER, y, 1, Kc, m, c)
            dense += c * hier.joint_feature(d, N, tp, fi, fv, y)[0]
            loss += c * hier.brute_loss(ytrue, y)
        scale = 0.7
        S2 = np.zeros((1, Kc))
        so.emission_scores(E, scale, tp, fi, fv, 1, N, S2)
        T, B = np.zeros((Kc, Kc)), np.zeros((2, Kc))
        assert so.stat_score(so.HIER, S2, T, B, scale, m, 1, N, Kc, False) == pytest.approx(
            scale * float(np.sum(E[:d, :N] * dense)), abs=1e-9)
        ybuf = np.zeros(Kc, np.int32)
        assert (so.loss_const(so.HIER, ly, Ki, ytrue) + so.stat_loss_lin(so.HIER, m, ytrue, ly, C, 1, N, Kc, Ki, ybuf)
                == pytest.approx(loss, abs=1e-12))
        # the truth statistic is the closure indicator
        t = np.zeros(Kc)
        so.truth_stat(so.HIER, ytrue, ly, 1, Kc, t, 1.0)
        yt = np.zeros(Kc)
        yt[ytrue] = 1
        np.testing.assert_array_equal(t, yt)
        G = np.zeros((1, 1))
        py_entry(so.gram)(tp, fi, fv, 1, G, np.zeros(d))
        assert so.stat_sqnorm(so.HIER, G, m, 1, N, Kc, False) == pytest.approx(float(np.sum(dense ** 2)), rel=1e-10)
        E2, T2, B2 = np.zeros((d, Kc)), np.zeros((Kc, Kc)), np.zeros((2, Kc))
        so.stat_apply(so.HIER, (E2, T2, B2), (tp, fi, fv), m, 1, N, Kc, 2.0, False)
        np.testing.assert_allclose(E2[:, :N], 2 * dense, atol=1e-12)
        # Hamming over the leaves: internal nodes carry no loss
        for y in pick:
            assert so.labeling_loss(so.HIER, y, ytrue, ly, C, 1, N, Ki, ybuf) == pytest.approx(hier.brute_loss(ytrue, y))


def test_large_tree_dp_is_consistent():
    """200 leaves (far beyond enumeration): the loss-augmented decoder (tree MAP DP) equals the
    best level of the level DP for several loss weights, and each level labeling is a closure
    with exactly m wrong leaves attaining the level's score."""
    rng = np.random.default_rng(5)
    raw = random_hierarchy(rng, 200, 60)
    hier = Hierarchy(raw)
    N = len(hier.nodes)
    Kc = N
    C = hier.cost_matrix(Kc, hier.nodes)
    S = rng.normal(size=(1, Kc))
    ytrue = hier.closure(sorted(rng.choice(hier.n_leaves, size=20, replace=False)))
    best_m = np.zeros(hier.n_leaves + 1)
    so.hier_levels(S, hier.graph(N), N, ytrue, len(ytrue), hier.n_leaves, best_m, -1, np.zeros(Kc, np.int32))
    T, B = np.zeros((Kc, Kc)), np.zeros((2, Kc))
    ybuf = np.zeros(Kc, np.int32)
    for ls in (0.0, 2.0, 50.0):
        out = np.zeros(Kc, np.int32)
        val = so.decode(model(hier, N, Kc, C), (np.zeros((1, Kc)), T, B), S, 1.0, 1, ytrue, len(ytrue), ls,
                        hier.n_leaves, scratch(Kc), out)
        m = np.arange(hier.n_leaves + 1)
        assert val == pytest.approx(np.max(best_m + ls * m / hier.n_leaves), abs=1e-9)
    for m in (1, 7, 50, hier.n_leaves):
        lab = np.zeros(Kc, np.int32)
        assert so.hier_level_labeling(S, hier.graph(N), N, ytrue, len(ytrue), hier.n_leaves, m, lab)
        assert so.labeling_score(so.HIER, S, T, B, 1.0, lab, 1, N, False) == pytest.approx(best_m[m], abs=1e-9)
        assert so.labeling_loss(so.HIER, lab, ytrue, len(ytrue), C, 1, N, hier.n_leaves, ybuf) * hier.n_leaves \
            == pytest.approx(m)
        # a closure: every on node has its parents on
        for a in np.flatnonzero(lab[:N]):
            assert all(lab[p] for p in hier.parent_ids[a])


# ---------------------------------------------------------------------------- learners


def _data(seed, n, hier_dict, d=6, noise=0.3):
    """Synthetic hierarchical data: each leaf has a prototype, an example holds 1-2 leaves (often
    siblings) and x is the sum of their prototypes plus noise."""
    rng = np.random.default_rng(seed)
    hier = Hierarchy(hier_dict)
    nl = hier.n_leaves
    P = rng.normal(size=(nl, d)) * 1.5
    data = []
    for _ in range(n):
        k = int(rng.integers(nl))
        pos = {k}
        if rng.random() < 0.4:
            sib = [j for j in range(nl) if j != k and set(hier.parent_ids[j]) & set(hier.parent_ids[k])]
            if sib:
                pos.add(int(rng.choice(sib)))
        x = P[sorted(pos)].sum(axis=0) + noise * rng.normal(size=d)
        data.append((x, {hier.nodes[j]: j in pos for j in range(nl)}))
    return data


TREE = {"cat": "animal", "dog": "animal", "cow": "animal", "car": "vehicle", "bus": "vehicle",
        "animal": "thing", "vehicle": "thing", "rock": "thing"}
DAG = {"cat": ["pet", "animal"], "dog": ["pet", "animal"], "cow": "animal", "car": "vehicle", "bus": "vehicle",
       "pet": "thing", "animal": "thing", "vehicle": "thing"}


def _brute_primal(est, slack):
    lr = est._learner
    st = lr.store
    hier = lr.structure
    K = lr._K
    d = est._features.dim
    E, T, B, scale = lr.predict_weights()
    w = scale * E[:d, :K]
    reg = 0.5 * lr.effective_lam() * float(np.sum(w * w)) + 0.5 * lr.effective_lam() * scale ** 2 * float(np.sum(T * T) + np.sum(B * B))
    hinge = 0.0
    labs = hier.all_labelings()
    for slot in st.slots():
        b = st.block(slot)
        yt = np.zeros(K, np.int32)
        yt[b["ytrue"]] = 1
        f = lambda y: float(np.sum(w * hier.joint_feature(d, K, b["tok_ptr"], b["fidx"], b["fval"], y)[0]))
        s_true = f(yt)
        best = 0.0
        for y in labs:
            loss = hier.brute_loss(b["ytrue"], y)
            assert b["Ki"] == hier.n_leaves
            v = loss * (1.0 + f(y) - s_true) if slack else loss + f(y) - s_true
            best = max(best, v)
        hinge += best
    return reg + hinge / st.n


@pytest.mark.parametrize("graph", ["tree", "dag"])
@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_bcfw_certificate_matches_brute_force_primal(graph, rescaling):
    h = TREE if graph == "tree" else DAG
    m = ss.MultiLabelSSVM(hierarchy=h, rescaling=rescaling, learner=ss.learners.BCFW(lam=0.05, replay=1, seed=0))
    for x, y in _data(1, 30, h):
        m.learn_one(x, y)
    c0 = m.certificate()
    assert c0.exact and c0.rescaling == rescaling
    assert c0.raw_gap > -1e-9
    assert c0.primal == pytest.approx(_brute_primal(m, rescaling == "slack"), rel=1e-9, abs=1e-12)
    m.refine(passes=40)
    c1 = m.certificate()
    assert 0 <= c1.gap < c0.gap
    assert c1.primal == pytest.approx(_brute_primal(m, rescaling == "slack"), rel=1e-9, abs=1e-12)
    assert m._learner.counters[5] == 0  # no oracle sanity failures
    # internal nodes get weights (they carry the shared potentials)
    assert np.any(m._learner.W.E[:, len(m._hier.leaves):len(m._hier.nodes)] != 0)


def test_sgd_slack_searches_match_the_exact_oracle():
    """SGD with the exact slack oracle and with angular search (exact on the level points
    given enough queries) take the same steps; bisecting / binary searches run and learn."""
    data = _data(2, 60, TREE)
    models = {s: ss.MultiLabelSSVM(hierarchy=TREE, learner=ss.learners.SGD(
        lam=0.01, rescaling="slack", search=s, max_queries=200, tol=1.0)) for s in ("exact", "angular")}
    for x, y in data:
        for mdl in models.values():
            mdl.learn_one(x, y)
    a, b = models["exact"]._learner, models["angular"]._learner
    np.testing.assert_allclose(a.W.E, b.W.E, atol=1e-9)
    assert b.searches > 0 and b.queries / b.searches <= 2 * 6 + 1
    assert np.any(a.W.E != 0)
    for s in ("bisecting", "binary"):
        mdl = ss.MultiLabelSSVM(hierarchy=DAG, learner=ss.learners.SGD(lam=0.01, rescaling="slack", search=s))
        for x, y in _data(5, 30, DAG):
            mdl.learn_one(x, y)
        assert mdl._learner.searches == 30 and np.any(mdl._learner.W.E != 0)


@pytest.mark.parametrize("learner", ["bcfw", "bcfw-slack", "sgd", "sgd-angular"])
def test_estimator_learns_synthetic_hierarchy(learner):
    big = {f"leaf{k}": f"mid{k // 3}" for k in range(12)}
    big.update({f"mid{j}": f"top{j // 2}" for j in range(4)})
    lr = {"bcfw": ss.learners.BCFW(lam=1e-3, replay=2, seed=0),
          "bcfw-slack": ss.learners.BCFW(lam=1e-3, replay=2, seed=0, rescaling="slack"),
          "sgd": ss.learners.SGD(lam=1e-3),
          "sgd-angular": ss.learners.SGD(lam=1e-3, rescaling="slack", search="angular", averaging=False)}[learner]
    m = ss.MultiLabelSSVM(hierarchy=big, learner=lr)
    data = _data(3, 700, big, d=10, noise=0.3)
    train, test = data[:500], data[500:]
    for x, y in train:
        m.learn_one(x, y)
    exact = ham = ham0 = 0
    for x, y in test:
        p = m.predict_one(x)
        assert set(p) == set(y)
        exact += p == y
        ham += sum(p[k] != v for k, v in y.items())
        ham0 += sum(v for v in y.values())  # the all-negative baseline
    assert ham < 0.4 * ham0
    assert exact / len(test) > 0.5


def test_save_load_round_trip_and_learn_many(tmp_path):
    h = [("a1", "A"), ("a2", "A"), ("b1", "B"), ("b2", "B"), ("A", None), ("B", None), ((1, "t"), "B")]
    for lr in (ss.learners.BCFW(lam=0.01, replay=1, seed=0), ss.learners.SGD(lam=0.01, rescaling="slack")):
        m = ss.MultiLabelSSVM(hierarchy=h, learner=lr)
        data = _data(4, 40, h)
        X = np.array([x for x, _ in data])
        m.learn_many(X[:20], [y for _, y in data[:20]])
        for x, y in data[20:]:
            m.learn_one(x, y)
        p = str(tmp_path / f"m{type(lr).__name__}.ssvm")
        m.save(p)
        m2 = ss.MultiLabelSSVM.load(p)
        assert m2._hier.nodes == m._hier.nodes and (1, "t") in m2._hier.leaves
        for x, _ in data[:10]:
            assert m2.predict_one(x) == m.predict_one(x)
        np.testing.assert_array_equal(m2._learner.W.E, m._learner.W.E)
        if isinstance(lr, ss.learners.BCFW):
            assert m2.certificate().gap == pytest.approx(m.certificate().gap, rel=1e-9)
        try:
            import pandas  # noqa: F401  (predict_many returns a DataFrame)
        except ImportError:
            continue
        df = m2.predict_many(X[:5])
        assert list(df.columns) == m._hier.leaves


def test_errors():
    with pytest.raises(ValueError, match="cycle"):
        ss.MultiLabelSSVM(hierarchy={"a": "b", "b": "c", "c": "a", "x": "a"})
    with pytest.raises(ValueError, match="its own parent"):
        Hierarchy({"a": "a"})
    with pytest.raises(TypeError, match="dict"):
        ss.MultiLabelSSVM(hierarchy="a>b")
    with pytest.raises(ValueError, match="empty"):
        Hierarchy({})
    with pytest.raises(ValueError, match="pairs"):
        Hierarchy([("a", "b", "c")])
    with pytest.raises(ValueError, match="choose one"):
        ss.MultiLabelSSVM(hierarchy=TREE, pairwise=True)
    with pytest.raises(ValueError, match="leaves"):
        ss.MultiLabelSSVM(hierarchy=TREE, labels=["cat"])
    big_dag = {f"l{k}": ["p", "q"] for k in range(17)}
    with pytest.raises(ValueError, match="up to 16 leaves"):
        ss.MultiLabelSSVM(hierarchy=big_dag)
    m = ss.MultiLabelSSVM(hierarchy=TREE, learner=ss.learners.BCFW(lam=0.1, seed=0))
    assert m.predict_one({"a": 1.0}) == {k: False for k in m._hier.leaves}
    with pytest.raises(ValueError, match="not in the hierarchy"):
        m.learn_one({"a": 1.0}, {"cat": True, "zebra": True})
    with pytest.raises(ValueError, match="internal node"):
        m.learn_one({"a": 1.0}, {"animal": True})
    m.learn_one({"a": 1.0}, {"cat": True})
    assert set(m.predict_one({"a": 1.0})) == set(m._hier.leaves)
    with pytest.raises(ValueError, match="label index"):
        Hierarchy(TREE).cost_matrix(12, ["x", "y"])


def test_cli_run_with_hierarchy(tmp_path, capsys):
    import json

    from streamssvm.connectors.files import write_jsonl
    from streamssvm.cli import main
    hf = tmp_path / "h.json"
    hf.write_text(json.dumps(TREE))
    data = _data(6, 50, TREE)
    write_jsonl(tmp_path / "s.jsonl", [{"x": x.tolist(), "y": [k for k, v in y.items() if v]} for x, y in data])
    assert main(["run", "--source", str(tmp_path / "s.jsonl"), "--task", "multilabel", "--hierarchy", str(hf),
                 "--rescaling", "slack", "--no-progress", "--json", "--save", str(tmp_path / "m.ssvm")]) == 0
    out = capsys.readouterr().out
    s = json.loads(out[out.index("{"):])
    assert s["examples_seen"] == 50
    m = ss.MultiLabelSSVM.load(str(tmp_path / "m.ssvm"))
    assert m._hier.leaves == Hierarchy(TREE).leaves and m._learner.rescaling == "slack"
    assert main(["run", "--source", str(tmp_path / "s.jsonl"), "--task", "multiclass", "--hierarchy", str(hf),
                 "--no-progress"]) == 2
    assert "--hierarchy goes with --task multilabel" in capsys.readouterr().err


@pytest.mark.parametrize("step", ["pairwise", "away"])
def test_bcfw_pools_with_hierarchy(step):
    """Pairwise / away steps and the oracle cache keep labelings (closure indicators) in the
    pools: the certificate stays exact and the gap closes."""
    m = ss.MultiLabelSSVM(hierarchy=DAG, learner=ss.learners.BCFW(lam=0.05, replay=2, step=step, cache=True, seed=0))
    for x, y in _data(7, 25, DAG):
        m.learn_one(x, y)
    c0 = m.certificate()
    m.refine(passes=60)
    c1 = m.certificate()
    assert 0 <= c1.gap < 0.5 * c0.gap
    assert c1.primal == pytest.approx(_brute_primal(m, False), rel=1e-9, abs=1e-12)
    for slot in m._learner.store.slots():
        b = m._learner.store.block(slot)
        hier = m._hier
        for lab in b["pool"]:
            on = set(np.flatnonzero(lab[:len(hier.nodes)]))
            leaves = [k for k in on if k < hier.n_leaves]
            assert on == set(hier.closure(leaves).tolist())


# ------------------------------------------------------------------ the graph as explicit arrays


def test_cost_matrix_of_a_hierarchy_model_no_longer_encodes_the_graph():
    """The learners' cost matrix is a plain 0/1 matrix; the graph comes from the Model bundle's
    ``graph`` field, so the kernels give the tree's answers whatever the cost matrix holds."""
    m = ss.MultiLabelSSVM(hierarchy=TREE, learner=ss.learners.BCFW(lam=0.1, seed=0))
    for x, y in _data(8, 10, TREE):
        m.learn_one(x, y)
    lr, hier = m._learner, m._hier
    N = len(hier.nodes)
    C = lr._C
    np.testing.assert_array_equal(C[:N, :N], 1.0 - np.eye(N))
    assert C.min() >= 0.0
    mod = model(hier, N, lr.W.Kc, C)
    pptr, pidx, cptr, cidx, info = mod[5]
    for a in range(N):
        assert pidx[pptr[a]:pptr[a + 1]].tolist() == hier.parent_ids[a]
    assert info.tolist() == [1, hier.n_leaves]
    # decoding reads the graph from the bundle, not from C: an all-zero C gives the same answer,
    # and the answer is a closure (a leaf on turns its parents on)
    Kc = lr.W.Kc
    S = np.zeros((1, Kc))
    S[0, 0] = 1.0                      # "cat" alone pays
    S[0, hier.index["animal"]] = -0.2  # its parent costs a little
    outs = []
    for Cx in (C, np.zeros_like(C)):
        out = np.zeros(Kc, np.int32)
        so.decode(model(hier, N, Kc, Cx), lr.W.bundle(), S, 1.0, 1, np.zeros(0, np.int32), 0, 0.0, hier.n_leaves,
                  scratch(Kc), out)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    on = {hier.nodes[i] for i in np.flatnonzero(outs[0][:N])}
    assert on == {"cat", "animal", "thing"}


def test_large_tree_graph_is_linear_in_the_nodes_and_built_once():
    """A 2,000-node tree: the Model bundle carries O(nodes) graph arrays, built once by the
    structure (the same arrays on every call), and the oracles run without any (K, K) matrix."""
    rng = np.random.default_rng(21)
    hier = Hierarchy(random_hierarchy(rng, 1500, 500))
    N = len(hier.nodes)
    assert N == 2000 and hier.is_tree
    tiny_C = np.zeros((1, 1))
    m1, m2 = model(hier, N, N, tiny_C), model(hier, N, N, tiny_C)
    assert all(a is b for a, b in zip(m1[5], m2[5]))
    assert sum(a.size for a in m1[5]) <= 4 * N + 10
    S = rng.normal(size=(1, N))
    ytrue = hier.closure(sorted(rng.choice(hier.n_leaves, size=30, replace=False)))
    W = (np.zeros((1, N)), np.zeros((1, 1)), np.zeros((2, 1)))
    scr = (np.zeros((1, N)), np.zeros((1, 1)), np.zeros((1, 1), np.int32), np.zeros(N, np.int32),
           np.zeros(N, np.int32), np.zeros(N + 1), np.zeros((1, 1, 1)))
    out = np.zeros(N, np.int32)
    v_map = so.decode(m1, W, S, 1.0, 1, ytrue, len(ytrue), 1.0, hier.n_leaves, scr, out)
    assert np.isfinite(v_map) and out[:N].sum() > 0
    h = so.slack_oracle(m1, W, S, 1.0, 1, ytrue, len(ytrue), hier.n_leaves, scr, out)
    ybuf = np.zeros(N, np.int32)
    T1 = np.zeros((1, 1))
    loss = so.labeling_loss(so.HIER, out, ytrue, len(ytrue), tiny_C, 1, N, hier.n_leaves, ybuf)
    ts = float(S[0, ytrue].sum())
    sc = so.labeling_score(so.HIER, S, T1, np.zeros((2, 1)), 1.0, out, 1, N, False)
    assert h == pytest.approx(max(loss * (1.0 + sc - ts), 0.0), abs=1e-9)
