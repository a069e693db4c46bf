"""Exact slack-rescaled oracles (Choi, Meshi & Srebro, AISTATS 2016) against brute-force enumeration."""
import numpy as np
import pytest

from streamssvm._kernels import structops as so
from streamssvm._kernels.bundles import model
from streamssvm.structures import Chain, MultiClass, MultiLabel
from test_structures import dense_score, make  # tests/ is on sys.path under pytest


@pytest.mark.parametrize("cls,L,K", [(Chain, L, K) for L in (1, 2, 3, 5) for K in (1, 2, 3, 4)]
                         + [(MultiClass, 1, K) for K in (1, 3, 6)] + [(MultiLabel, 1, K) for K in (1, 3, 5)]
                         + [("pairwise", 1, K) for K in (1, 3, 5)])
@pytest.mark.parametrize("seed", range(5))
def test_slack_oracle_matches_brute_force(cls, L, K, seed):
    rng = np.random.default_rng(1000 + seed * 31 + L * 7 + K)
    Kc = K + 1
    d = 5
    cost = cls is MultiClass and seed % 2 == 1
    st, E, T, B, C, tp, fi, fv = make(cls, rng, K, Kc, L, d, cost=cost)
    scale = float(rng.uniform(0.5, 3.0))  # larger scores make the slack maximizer non-trivial
    kind = st.kind
    if kind in (so.MULTILABEL, so.MLPAIR):
        ytrue = np.array(sorted(rng.choice(K, size=rng.integers(0, K + 1), replace=False)), np.int32)
        ly, Ki, lablen = len(ytrue), K, Kc
        dense_true = np.zeros(Kc, np.int32)
        dense_true[ytrue] = 1
    else:
        ytrue = rng.integers(0, K, size=L).astype(np.int32)
        ly, Ki, lablen = L, 1, L
        dense_true = ytrue
    S = np.zeros((L, Kc))
    so.emission_scores(E, scale, tp, fi, fv, L, K, S)
    phi_t = st.joint_feature(d, K, tp, fi, fv, dense_true)
    s_true = dense_score(E, T, B, scale, phi_t)
    best = 0.0
    for y in st.all_labelings(L, K):
        yy = y if kind not in (so.MULTILABEL, so.MLPAIR) else np.concatenate([y, np.zeros(Kc - K, np.int32)])
        loss = st.brute_loss(ytrue, y if kind not in (so.MULTILABEL, so.MLPAIR) else yy[:K], C, Ki)
        v = loss * (1.0 + dense_score(E, T, B, scale, st.joint_feature(d, K, tp, fi, fv, yy)) - s_true)
        best = max(best, v)
    V = np.zeros((L + 1, Kc, L + 1))
    out = np.zeros(lablen, np.int32)
    scratch = (S, np.zeros((L, Kc)), np.zeros((L, Kc), np.int32), np.zeros(Kc, np.int32), out, np.zeros(Kc + 1), V)
    val = so.slack_oracle(model(st, K, Kc, C), (E, T, B), S, scale, L, ytrue, ly, Ki, scratch, out)
    assert val == pytest.approx(best, abs=1e-9)
    # the returned labeling attains it
    ybuf = np.zeros(Kc, np.int32)
    loss = so.labeling_loss(kind, out, ytrue, ly, C, L, K, Ki, ybuf)
    sc = so.labeling_score(kind, S, T, B, scale, out, L, K, st.use_trans)
    assert loss * (1.0 + sc - s_true) == pytest.approx(best, abs=1e-9)


def _brute_slack_primal(est):
    lr = est._learner
    st = lr.store
    structure = lr.structure
    K = lr._K
    d = est._features.dim
    E, T, B, scale = lr.predict_weights()
    w = [scale * E[:d, :K], scale * T[:K, :K], scale * B[:, :K]]
    reg = 0.5 * lr.effective_lam() * sum(float(np.sum(a * a)) for a in w)
    hinge = 0.0
    for slot in st.slots():
        b = st.block(slot)
        ml = structure.kind in (so.MULTILABEL, so.MLPAIR)
        truth = np.zeros(lr.W.Kc, np.int32) if ml else b["ytrue"]
        if ml:
            truth[b["ytrue"]] = 1
        s_true = sum(float(np.sum(a * p)) for a, p in zip(w, structure.joint_feature(d, K, b["tok_ptr"], b["fidx"], b["fval"], truth)))
        best = 0.0
        for y in structure.all_labelings(b["L"], K):
            yy = np.concatenate([y, np.zeros(lr.W.Kc - K, np.int32)]) if ml else y
            sc = sum(float(np.sum(a * p)) for a, p in zip(w, structure.joint_feature(d, K, b["tok_ptr"], b["fidx"], b["fval"], yy)))
            loss = structure.brute_loss(b["ytrue"], yy[:K] if ml else y, lr._C, b["Ki"])
            best = max(best, loss * (1.0 + sc - s_true))
        hinge += best
    return reg + hinge / st.n


def _stream(kind, seed, n=25):
    import streamssvm as ss
    rng = np.random.default_rng(seed)
    if kind == "chain":
        cen = rng.normal(size=(3, 5)) * 1.5
        data = []
        for _ in range(n):
            L = int(rng.integers(1, 5))
            y = list(rng.integers(0, 3, size=L))
            data.append((cen[y] + rng.normal(size=(L, 5)), [int(v) for v in y]))
        return ss.SequenceTagger, data
    if kind == "multiclass":
        W = rng.normal(size=(4, 5))
        data = []
        for _ in range(n):
            x = rng.normal(size=5)
            data.append((x, int(np.argmax(W @ x + rng.normal(size=4)))))
        return ss.MulticlassSSVM, data
    W = rng.normal(size=(3, 5))
    data = []
    for _ in range(n):
        x = rng.normal(size=5)
        s = W @ x + rng.normal(size=3)
        data.append((x, {f"l{k}": bool(s[k] > 0) for k in range(3)}))
    return ss.MultiLabelSSVM, data


@pytest.mark.parametrize("kind", ["chain", "multiclass", "multilabel"])
@pytest.mark.parametrize("sampling", ["uniform", "gap"])
def test_bcfw_with_slack_rescaling_certificate(kind, sampling):
    import streamssvm as ss
    cls, data = _stream(kind, 4)

    def make(avg=True, seed=0):
        return cls(learner=ss.learners.BCFW(lam=0.05, replay=1, sampling=sampling, rescaling="slack",
                                            averaging=avg, seed=seed))
    est = make()
    for x, y in data:
        est.learn_one(x, y)
    c0 = est.certificate()
    assert c0.rescaling == "slack" and c0.exact
    assert c0.primal == pytest.approx(_brute_slack_primal(est), rel=1e-9, abs=1e-12)
    from test_bcfw import assert_valid_gap
    assert_valid_gap(est, c0)
    assert c0.extra.get("iterate_gap", c0.gap) == pytest.approx(c0.block_gap_sum, rel=1e-6, abs=1e-9)
    est.refine(passes=80)
    c1 = est.certificate()
    assert c1.gap < c0.gap
    assert c1.primal == pytest.approx(_brute_slack_primal(est), rel=1e-9, abs=1e-12)
    assert est._learner.counters[5] == 0  # no oracle sanity failures
    # weak duality against a near-optimal point from a long run
    ref = make(avg=False, seed=1)
    for x, y in data:
        ref.learn_one(x, y)
    ref.refine(passes=1500)
    cr = ref.certificate()
    assert cr.gap < 0.05 * c0.gap
    assert c1.primal - cr.primal <= c1.gap + 1e-9
    assert cr.primal - c1.primal <= cr.gap + 1e-9
    # save / load keeps the slack state
    import tempfile, os
    p = os.path.join(tempfile.mkdtemp(), "m.ssvm")
    est.save(p)
    est2 = cls.load(p)
    assert est2.certificate().gap == pytest.approx(est.certificate().gap, rel=1e-9)


def test_slack_argument_errors():
    import streamssvm as ss
    with pytest.raises(ValueError, match="rescaling"):
        ss.learners.BCFW(rescaling="both")
    with pytest.raises(ValueError, match="step='fw'"):
        ss.learners.BCFW(rescaling="slack", step="pairwise")
    t = ss.SequenceTagger(learner=ss.learners.BCFW(rescaling="slack"), loss=np.array([[0, 2], [1, 0]]), labels=["a", "b"])
    with pytest.raises(ValueError, match="Hamming"):
        t.learn_one([{"a": 1}], ["a"])


def test_estimator_rescaling_parameter_and_cli(tmp_path, capsys):
    import json

    import streamssvm as ss
    from streamssvm.connectors.files import write_jsonl
    from streamssvm.cli import main
    C = np.array([[0, 1, 4], [1, 0, 1], [4, 1, 0]], dtype=float)
    m = ss.MulticlassSSVM(loss=C, labels=[0, 1, 2], rescaling="slack",
                          learner=ss.learners.BCFW(lam=0.05, replay=2, seed=0))
    cls, data = _stream("multiclass", 5, n=60)
    for x, y in data:
        m.learn_one(x, y % 3)
    assert m._learner.rescaling == "slack" and m.certificate().rescaling == "slack"
    with pytest.raises(ValueError, match="conflicts"):
        ss.SequenceTagger(rescaling="margin", learner=ss.learners.BCFW(rescaling="slack"))
    t = ss.SequenceTagger(rescaling="slack")
    t.learn_one([{"a": 1.0}, {"b": 1.0}], ["x", "y"])
    assert t._learner.rescaling == "slack"
    f = tmp_path / "s.jsonl"
    write_jsonl(f, [{"x": x.tolist(), "y": y % 3} for x, y in data])
    assert main(["run", "--source", str(f), "--task", "multiclass", "--rescaling", "slack", "--no-progress",
                 "--json", "--checkpoint-dir", str(tmp_path / "ck")]) == 0
    out = capsys.readouterr().out
    s = json.loads(out[out.index("{"):])
    assert s["last_certificate"]["rescaling"] == "slack" and s["examples_seen"] == 60


@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_pairwise_multilabel_bcfw_certificate(rescaling):
    import streamssvm as ss
    from test_bcfw import brute_primal
    rng = np.random.default_rng(9)
    W = rng.normal(size=(4, 5))
    m = ss.MultiLabelSSVM(pairwise=True, rescaling=rescaling,
                          learner=ss.learners.BCFW(lam=0.05, replay=2, seed=0))
    for _ in range(40):
        x = rng.normal(size=5)
        s = W @ x + rng.normal(size=4)
        y = {f"l{k}": bool(s[k] > 0) for k in range(4)}
        y["l3"] = y["l0"] and y["l1"]  # a label that co-occurs: the pairwise potentials matter
        m.learn_one(x, y)
    c0 = m.certificate()
    assert c0.rescaling == rescaling
    from test_bcfw import assert_valid_gap
    assert_valid_gap(m, c0, passes=100)
    brute = brute_primal(m) if rescaling == "margin" else _brute_slack_primal(m)
    assert c0.primal == pytest.approx(brute, rel=1e-9)
    m.refine(passes=60)
    c1 = m.certificate()
    assert c1.gap < c0.gap
    brute = brute_primal(m) if rescaling == "margin" else _brute_slack_primal(m)
    assert c1.primal == pytest.approx(brute, rel=1e-9)
    assert np.any(m._learner.W.T[:4, :4] != 0)


def test_pairwise_multilabel_yeast_sgd_angular_matches_exact():
    import itertools

    from river import datasets

    import streamssvm as ss
    rows = list(itertools.islice(datasets.Yeast(), 60))
    a = ss.MultiLabelSSVM(pairwise=True, learner=ss.learners.SGD(lam=0.01, rescaling="slack", search="exact"))
    b = ss.MultiLabelSSVM(pairwise=True, learner=ss.learners.SGD(lam=0.01, rescaling="slack", search="angular",
                                                                 max_queries=200, tol=1.0))
    for x, y in rows:
        a.learn_one(x, y)
        b.learn_one(x, y)
    assert len(a._labels) == 14
    np.testing.assert_allclose(a._learner.W.E, b._learner.W.E, atol=1e-9)
    np.testing.assert_allclose(a._learner.W.T, b._learner.W.T, atol=1e-9)
    assert 1 <= b._learner.queries / b._learner.searches <= 29
    with pytest.raises(ValueError, match="up to 16 labels"):
        m = ss.MultiLabelSSVM(pairwise=True)
        m.learn_one({"a": 1.0}, {f"l{k}": True for k in range(17)})
