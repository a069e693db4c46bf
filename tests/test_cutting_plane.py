"""n-slack cutting plane (learners.CuttingPlane): brute-force primal, certificates, agreement with
BCFW's optimum, the slack searches as separation oracles, persistence."""
import numpy as np
import pytest

import streamssvm as ss
from test_bcfw import assert_valid_gap
from streamssvm._kernels import structops as so
from test_slack import _stream


def _pairwise_stream(seed, n=30):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(4, 5))
    data = []
    for _ in range(n):
        x = rng.normal(size=5)
        s = W @ x + rng.normal(size=4)
        y = {f"l{k}": bool(s[k] > 0) for k in range(4)}
        y["l3"] = y["l0"] and y["l1"]
        data.append((x, y))
    return (lambda **kw: ss.MultiLabelSSVM(pairwise=True, **kw)), data


def _data(kind, seed, n):
    if kind == "pairwise":
        return _pairwise_stream(seed, n)
    return _stream(kind, seed, n=n)


def brute_primal_cp(est):
    """P(w) by enumerating every labeling of every held example (dense joint features)."""
    lr = est._learner
    structure = lr.structure
    K = lr._K
    d = est._features.dim
    scale = lr._scale()
    w = [scale * lr.W.E[:d, :K], scale * lr.W.T[:K, :K], scale * lr.W.B[:, :K]]
    reg = 0.5 * lr.lam * sum(float(np.sum(a * a)) for a in w)
    ml = structure.kind in (so.MULTILABEL, so.MLPAIR)
    hinge = 0.0
    for b in lr.blocks:
        truth = np.zeros(lr.W.Kc, np.int32) if ml else b.ytrue
        if ml:
            truth[b.ytrue] = 1
        f = lambda y: sum(float(np.sum(a * p)) for a, p in  # noqa: E731
                          zip(w, structure.joint_feature(d, K, b.tok_ptr, b.fidx, b.fval, y)))
        s_true = f(truth)
        best = 0.0
        for y in structure.all_labelings(b.L, K):
            yy = np.concatenate([y, np.zeros(lr.W.Kc - K, np.int32)]) if ml else y
            loss = structure.brute_loss(b.ytrue, yy[:K] if ml else y, lr._C, b.Ki)
            margin = 1.0 if lr.rescaling == "slack" else loss
            c = loss if lr.rescaling == "slack" else 1.0
            best = max(best, margin + c * (f(yy) - s_true) if lr.rescaling == "margin" else loss * (1.0 + f(yy) - s_true))
        hinge += best
    return reg + hinge / len(lr.blocks)


@pytest.mark.parametrize("kind", ["chain", "multiclass", "multilabel", "pairwise"])
@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_cutting_plane_matches_bcfw_optimum(kind, rescaling):
    cls, data = _data(kind, 5, 25)
    # chains: the papers' per-sentence normalized loss (P(0) = 1), the scale these tolerances assume
    kw = {"loss": "normalized"} if kind == "chain" else {}
    cp = cls(learner=ss.learners.CuttingPlane(lam=0.05, rescaling=rescaling, eps=1e-6, max_iter=200), **kw)
    for x, y in data:
        cp.learn_one(x, y)
    c0 = cp.certificate()
    assert c0.exact
    assert_valid_gap(cp, c0, passes=200)
    assert c0.primal == pytest.approx(brute_primal_cp(cp), rel=1e-9, abs=1e-12)
    c1 = cp.refine(passes=200, certify=True)
    assert c1.primal == pytest.approx(brute_primal_cp(cp), rel=1e-9, abs=1e-12)
    assert c1.gap < 1e-4 and c1.gap < 0.01 * c0.gap
    assert cp._learner.constraints_added > 0
    assert c1.block_gap_sum == pytest.approx(c1.gap, abs=1e-9)
    bc = cls(learner=ss.learners.BCFW(lam=0.05, replay=1, rescaling=rescaling, averaging=False, seed=0), **kw)
    for x, y in data:
        bc.learn_one(x, y)
    cb = bc.refine(passes=3000, certify=True)
    assert cb.gap < 1e-3
    # same optimum: each certified gap bounds the distance of its primal to the other's
    assert c1.primal - cb.primal <= c1.gap + 1e-9
    assert cb.primal - c1.primal <= cb.gap + 1e-9
    assert abs(c1.primal - cb.primal) < 1e-3


@pytest.mark.parametrize("search", ["angular", "bisecting", "binary", "sarawagi"])
@pytest.mark.parametrize("kind", ["chain", "pairwise"])
def test_cutting_plane_slack_searches_certificate_valid(search, kind):
    cls, data = _data(kind, 7, 25)
    ref = cls(learner=ss.learners.CuttingPlane(lam=0.05, rescaling="slack", eps=1e-7, max_iter=300))
    for x, y in data:
        ref.learn_one(x, y)
    cr = ref.refine(passes=300, certify=True)
    assert cr.gap < 1e-5
    m = cls(learner=ss.learners.CuttingPlane(lam=0.05, rescaling="slack", search=search, eps=1e-4, max_iter=100,
                                             seed=0))
    for x, y in data:
        m.learn_one(x, y)
    c = m.refine(passes=100, certify=True)
    assert c.exact
    assert c.raw_gap >= c.primal - cr.primal - 1e-9   # gap >= P(w) - min P, min P <= P(w_ref)
    assert c.primal == pytest.approx(brute_primal_cp(m), rel=1e-9, abs=1e-12)
    # the exact-oracle certificate bounds the suboptimality whatever the separation search
    assert c.primal - cr.primal <= c.gap + 1e-9
    assert c.dual <= cr.primal + 1e-9
    assert m._learner.queries > 0
    if search == "angular":  # exact within its budget: converges like the exact oracle
        assert c.gap < 1e-3


def test_cutting_plane_sequence_tagger_save_load_and_errors(tmp_path):
    cls, data = _stream("chain", 2, n=40)
    m = cls(learner=ss.learners.CuttingPlane(lam=0.02, rescaling="slack", search="angular", eps=1e-3))
    for x, y in data:
        m.learn_one(x, y)
    c = m.refine(passes=30, certify=True)
    acc = np.mean([np.mean(np.array(m.predict_one(x)) == np.array(y)) for x, y in data])
    assert acc > 0.7
    m.save(tmp_path / "cp.ssvm")
    m2 = cls.load(tmp_path / "cp.ssvm")
    assert m2.certificate().gap == pytest.approx(m.certificate().gap, rel=1e-9, abs=1e-12)
    for x, _ in data[:10]:
        assert m2.predict_one(x) == m.predict_one(x)
    with pytest.raises(ValueError, match="applies to slack rescaling"):
        cls(learner=ss.learners.CuttingPlane(search="sarawagi")).learn_one(*data[0])
    with pytest.raises(ValueError, match="rescaling"):
        ss.learners.CuttingPlane(rescaling="other")
    assert c.extra["rounds"] >= 1


def test_cutting_plane_grows_labels_mid_stream():
    m = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane(lam=0.05, eps=1e-6))
    rng = np.random.default_rng(0)
    for i in range(60):
        y = int(rng.integers(2 if i < 30 else 5))
        m.learn_one({"f": y + 0.1 * rng.normal(), "g": 1.0, f"h{y}": 1.0}, y)
    c = m.refine(passes=100, certify=True)
    assert c.gap < 1e-4
    assert c.primal == pytest.approx(brute_primal_cp(m), rel=1e-9)


def test_cli_cutting_plane(tmp_path, capsys):
    import json

    from streamssvm.cli import main
    conll = tmp_path / "w.conll"
    sents = [("the DT", "dog NN", "runs VBZ"), ("a DT", "cat NN", "sleeps VBZ")] * 20
    conll.write_text("".join("\n".join(s) + "\n\n" for s in sents))
    assert main(["run", "--source", str(conll), "--task", "sequence", "--learner", "cp", "--rescaling", "slack",
                 "--search", "sarawagi", "--lam", "0.05", "--no-progress", "--json"]) == 0
    out = capsys.readouterr().out
    s = json.loads(out[out.index("{"):])
    assert s["examples_seen"] == 40 and s["metrics"]["token_accuracy"] > 0.8
    assert s["last_certificate"]["rescaling"] == "slack" and s["last_certificate"]["exact"] is True


def test_cutting_plane_search_comparison_records():
    """The benchmark's comparison (bench/yeast_slack.py wraps the separation step the same way):
    at each separation call every search runs on the same weights and xi through the one
    dispatcher; no search's label beats the exact oracle, angular (budget large) attains it, and
    the label added is angular's."""
    class Compared(ss.learners.CuttingPlane):
        def _separate(self, b, xi):
            lab, H = super()._separate(b, xi)   # prepares the oracles at the current weights
            o = self._orc()
            rec = {"xi": xi, "used": H}
            for name in ("angular", "bisecting", "sarawagi"):
                q0 = o.lam_queries + o.c_queries
                rec[name] = {"phi": self._run_search(o, name, xi)[1], "queries": o.lam_queries + o.c_queries - q0}
            rec["exact"] = {"phi": o.exact()[1]}
            self.search_log = getattr(self, "search_log", []) + [rec]
            return lab, H

    cls, data = _pairwise_stream(3, 20)
    m = cls(learner=Compared(lam=0.05, rescaling="slack", search="angular", eps=1e-4))
    lr = m._bound()
    for x, y in data:
        m.learn_one(x, y)
    m.refine(passes=5)
    assert len(lr.search_log) == lr.oracle_calls > 20
    for rec in lr.search_log:
        ex = rec["exact"]["phi"]
        assert rec["angular"]["phi"] == pytest.approx(ex, abs=1e-9) == rec["used"]
        for s in ("bisecting", "sarawagi"):
            assert rec[s]["phi"] <= ex + 1e-9 and rec[s]["queries"] >= 1
        assert rec["sarawagi"]["queries"] > rec["angular"]["queries"]
        assert rec["xi"] >= 0


def test_cutting_plane_learn_many_equals_learn_one():
    cls, data = _stream("multiclass", 4, n=40)
    a = cls(learner=ss.learners.CuttingPlane(lam=0.05, rescaling="slack"))
    b = cls(learner=ss.learners.CuttingPlane(lam=0.05, rescaling="slack"))
    for x, y in data:
        a.learn_one(x, y)
    b.learn_many(np.array([x for x, _ in data]), [y for _, y in data])
    np.testing.assert_allclose(a._learner.W.E, b._learner.W.E, atol=1e-12)
    assert a.certificate().gap == pytest.approx(b.certificate().gap, rel=1e-12, abs=1e-15)


# ----------------------------------------------------------------------------- a new class's first example
@pytest.mark.parametrize("task", ["multiclass", "sequence"])
def test_a_new_classs_first_example_is_learned_at_once(task):
    """{'a': 1} -> x, then {'b': 1} -> y: {'a': 1} was predicted y. Block 1's contribution is
    halved when n goes from 1 to 2 (w = A alpha / (lam n)) and block 2's solve moved the bias
    past it; with sequences (bias and start/end transitions shared) a replayed visit alone only
    handed the last word to the other block. Now one held example is replayed and the QP over the
    two is solved."""
    import streamssvm as ss
    if task == "multiclass":
        m = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane())
        wrap, unwrap = (lambda x: x), (lambda y: y)
    else:
        m = ss.SequenceTagger(learner=ss.learners.CuttingPlane())
        wrap, unwrap = (lambda x: [x]), (lambda y: y[0])
    names, labels = "abcde", "vwxyz"
    m.learn_one(wrap({"a": 1}), wrap("v"))
    m.learn_one(wrap({"b": 1}), wrap("w"))
    assert [unwrap(m.predict_one(wrap({f: 1}))) for f in "ab"] == ["v", "w"]
    for f, c in zip(names[2:], labels[2:]):
        m.learn_one(wrap({f: 1}), wrap(c))
    assert [unwrap(m.predict_one(wrap({f: 1}))) for f in names] == list(labels)


def test_replay_zero_is_the_new_example_only_and_the_cursor_is_saved(tmp_path):
    import streamssvm as ss
    m = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane(replay=0))
    m.learn_one({"a": 1}, "x")
    m.learn_one({"b": 1}, "y")
    assert m.predict_one({"a": 1}) == "y"   # the failure the replay fixes
    rng = np.random.default_rng(0)
    recs = [({"f": float(rng.normal()), "g": float(i % 3)}, i % 3) for i in range(30)]
    a = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane(replay=2, window=7))
    for x, y in recs[:20]:
        a.learn_one(x, y)
    a.save(tmp_path / "m.ssvm")
    b = ss.load(tmp_path / "m.ssvm")
    assert b._learner._cursor == a._learner._cursor
    for x, y in recs[20:]:
        a.learn_one(x, y)
        b.learn_one(x, y)
    np.testing.assert_array_equal(a._learner.W.E, b._learner.W.E)
