"""SGD (Pegasos) with margin / slack rescaling and the slack searches, inside the estimators."""
import numpy as np
import pytest

import streamssvm as ss
from test_slack import _stream


@pytest.mark.parametrize("kind", ["chain", "multiclass", "multilabel"])
def test_angular_search_with_budget_equals_exact_oracle(kind):
    """With enough queries angular search returns the exact slack maximizer, so SGD takes
    exactly the same steps as with the exact oracle."""
    cls, data = _stream(kind, 11, n=80)
    a = cls(learner=ss.learners.SGD(lam=0.05, rescaling="slack", search="exact"))
    b = cls(learner=ss.learners.SGD(lam=0.05, rescaling="slack", search="angular", max_queries=1000, tol=1.0))
    for x, y in data:
        a.learn_one(x, y)
        b.learn_one(x, y)
    np.testing.assert_allclose(a._learner.W.E, b._learner.W.E, atol=1e-10)
    assert b._learner.searches > 0 and b._learner.certified == b._learner.searches
    ca, cb = a.certificate(), b.certificate()
    assert ca.primal == pytest.approx(cb.primal, rel=1e-9)
    # one streaming pass: the Pegasos iterate is a dual point, so the gap is finite and valid
    assert ca.gap == pytest.approx(cb.gap, rel=1e-9) and 0.0 <= ca.gap < float("inf") and ca.exact


@pytest.mark.parametrize("search", ["angular", "bisecting", "binary"])
def test_budgeted_searches_learn(search):
    cls, data = _stream("chain", 3, n=150)
    m = cls(learner=ss.learners.SGD(lam=0.02, rescaling="slack", search=search, max_queries=4))
    for x, y in data:
        m.learn_one(x, y)
    c = m.certificate()
    assert np.isfinite(c.primal) and c.extra["queries_per_search"] <= 4
    X = [x for x, _ in data[-50:]]
    Y = [y for _, y in data[-50:]]
    acc = np.mean([np.mean(np.array(p) == np.array(y)) for p, y in zip(m.predict_many(X), Y)])
    assert acc > 0.6


def test_margin_sgd_objective_decreases_and_save_load(tmp_path):
    cls, data = _stream("multiclass", 8, n=300)
    m = cls(learner=ss.learners.SGD(lam=0.01))
    for x, y in data:
        m.learn_one(x, y)
    p0 = m.certificate().primal
    m.refine(passes=5)
    assert m.certificate().primal < p0
    m.save(tmp_path / "s.ssvm")
    m2 = cls.load(tmp_path / "s.ssvm")
    for x, _ in data[:20]:
        assert m2.predict_one(x) == m.predict_one(x)
    with pytest.raises(ValueError, match="applies to slack rescaling"):
        cls(learner=ss.learners.SGD(search="angular")).learn_one(*data[0])
    # the estimator's rescaling= reaches the learner before the check (the public contract form)
    ok = cls(learner=ss.learners.SGD(search="angular"), rescaling="slack")
    ok.learn_one(*data[0])
    assert ok._learner.rescaling == "slack" and ok._learner.search == "angular"


def test_cli_sgd_slack_angular(tmp_path, capsys):
    import json

    from streamssvm.cli import main
    conll = tmp_path / "w.conll"
    sents = [("the DT", "dog NN", "runs VBZ"), ("a DT", "cat NN", "sleeps VBZ")] * 20
    conll.write_text("".join("\n".join(s) + "\n\n" for s in sents))
    assert main(["run", "--source", str(conll), "--task", "sequence", "--learner", "sgd", "--rescaling", "slack",
                 "--search", "angular", "--max-queries", "5", "--lam", "0.05", "--no-progress", "--json"]) == 0
    out = capsys.readouterr().out
    s = json.loads(out[out.index("{"):])
    assert s["examples_seen"] == 40 and s["metrics"]["token_accuracy"] > 0.8
    # budgeted searches pick the steps, the certificate's oracle pass is exact and the one-pass
    # Pegasos iterate is a dual point: a finite, valid gap
    cert = s["last_certificate"]
    assert cert["rescaling"] == "slack" and cert["exact"] is True and 0.0 <= cert["gap"] < 1e300


def _bcfw_optimum(cls, data, lam, rescaling):
    m = cls(learner=ss.learners.BCFW(lam=lam, replay=2, seed=0, averaging=False), rescaling=rescaling)
    for x, y in data:
        m.learn_one(x, y)
    c = m.refine(passes=300, certify=True)
    assert c.gap < 1e-3
    return c.dual, c.primal  # D_bcfw <= min P <= P_bcfw, 1e-3 apart


@pytest.mark.parametrize("kind", ["chain", "multiclass", "multilabel"])
@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_sgd_dual_point_is_valid_and_tightens(kind, rescaling):
    """The Pegasos iterates give a dual point: D <= min P <= P(w) (checked against BCFW's
    certified optimum on the same examples), and whole refine epochs keep it feasible while
    the gap shrinks."""
    cls, data = _stream(kind, 21, n=60)
    lam = 0.1
    d_lo, p_hi = _bcfw_optimum(cls, data, lam, rescaling)
    m = cls(learner=ss.learners.SGD(lam=lam, rescaling=rescaling, averaging=False))
    for x, y in data:
        m.learn_one(x, y)
    c1 = m.certificate()
    assert c1.exact and np.isfinite(c1.gap)
    assert c1.raw_gap >= c1.primal - p_hi - 1e-12   # gap >= P(w) - min P, min P <= BCFW's certified p_hi
    assert c1.dual <= p_hi + 1e-12          # weak duality against BCFW's certified optimum
    assert c1.primal >= d_lo - 1e-12
    m.refine(passes=40)
    c2 = m.certificate()
    assert np.isfinite(c2.gap) and c2.dual <= p_hi + 1e-12 and c2.primal >= d_lo - 1e-12
    assert c2.gap < 0.5 * c1.gap
    # the averaged weights (the default) are certified against the same dual point
    a = cls(learner=ss.learners.SGD(lam=lam, rescaling=rescaling))
    for x, y in data:
        a.learn_one(x, y)
    ca = a.certificate()
    assert ca.dual == pytest.approx(c1.dual, rel=1e-9) and ca.gap == pytest.approx(ca.primal - ca.dual)


def test_sgd_dual_point_absent_when_not_feasible(tmp_path):
    cls, data = _stream("multiclass", 5, n=50)
    # examples evicted from the window: the iterate is not a dual point of the held ones
    m = cls(learner=ss.learners.SGD(lam=0.1, window=20))
    for x, y in data:
        m.learn_one(x, y)
    c = m.certificate()
    assert c.gap == float("inf") and not c.exact and "no longer held" in c.note and np.isfinite(c.primal)
    # a fractional refine epoch visits some examples more often than T/n allows
    m = cls(learner=ss.learners.SGD(lam=0.1))
    for x, y in data:
        m.learn_one(x, y)
    m.refine(passes=1.5)
    lr = m._learner
    c = m.certificate()
    # alpha_i = lam n a mass_i (the weight of example i's steps in w) must stay <= 1
    if lr.lam * len(lr._recent) * lr.a * max(lr._mass) > 1.0 + 1e-9:
        assert c.gap == float("inf") and "uneven" in c.note
    else:
        assert np.isfinite(c.gap)
    # many uneven revisits of one example: its steps outweigh 1 / (lam n), no dual point
    for _ in range(60):
        lr._visits[0] += int(lr._step(*lr._recent[0]))
        lr._mass[0] += lr._q
    c = m.certificate()
    assert lr.lam * len(lr._recent) * lr.a * lr._mass[0] > 1.0
    assert c.gap == float("inf") and "uneven" in c.note
    # the dual point survives save / load
    m = cls(learner=ss.learners.SGD(lam=0.1))
    for x, y in data:
        m.learn_one(x, y)
    m.refine(passes=2)
    assert np.isfinite(m.certificate().gap)
    m.save(tmp_path / "d.ssvm")
    m2 = cls.load(tmp_path / "d.ssvm")
    assert m2.certificate().dual == pytest.approx(m.certificate().dual, rel=1e-12)


def _chain_stream(seed, n, L=(4, 12), K=6, d=12):
    """Noisy chains whose tags follow a Markov chain: transitions matter."""
    rng = np.random.default_rng(seed)
    cen = rng.normal(size=(K, d))
    P = rng.dirichlet(np.full(K, 0.3), size=K)
    data = []
    for _ in range(n):
        Li = int(rng.integers(*L))
        y = [int(rng.integers(K))]
        for _ in range(Li - 1):
            y.append(int(rng.choice(K, p=P[y[-1]])))
        data.append((cen[y] + 2.0 * rng.normal(size=(Li, d)), y))
    return data


@pytest.mark.parametrize("lam", [1e-3, 1e-5])
def test_averaged_iterate_beats_zero_after_one_pass(lam):
    """Regression (issue: SGD unusable on sequences): the uniform average of the unprojected
    Pegasos iterates, started at step 1 where the step is 1 / lam, had a primal objective far
    above P(0) after a pass. The projected iterates with the weighted average stay below P(0)
    (= 1 for the normalized Hamming loss) and predict well."""
    data = _chain_stream(0, 300)
    m = ss.SequenceTagger(learner=ss.learners.SGD(lam=lam), loss="normalized")   # P(0) = 1
    for x, y in data:
        m.learn_one(x, y)
    c = m.certificate()
    assert c.primal < 1.0 and np.isfinite(c.gap)
    assert m._learner.calibrated["examples"] == 300
    old = ss.SequenceTagger(learner=ss.learners.SGD(lam=lam, averaging="uniform", project=False, t0=0),
                            loss="normalized")
    for x, y in data:
        old.learn_one(x, y)
    assert old.certificate().primal > 1.0   # the configuration of the issue, kept reachable
    acc = np.mean([np.mean(np.array(p) == np.array(y)) for p, (_, y) in zip(m.predict_many([x for x, _ in data]), data)])
    assert acc > 0.6   # BCFW after one pass: 0.68 on this stream


@pytest.mark.parametrize("averaging,avg_start", [("weighted", 0), ("uniform", 0), ("uniform", 40)])
def test_lazy_average_equals_explicit_average(averaging, avg_start):
    """The lazily kept average (beta U - V) / csum equals sum_t c_t w_t / sum_t c_t recomputed
    from the iterates w_t = a U seen after every step (projections and refine included), and
    prediction through the kernel (no materialized average) agrees with it."""
    data = _chain_stream(1, 80)
    # t0=0: the plain 1 / (lam t) steps, which hit the projection; replay=0: one step per learn_one
    m = ss.SequenceTagger(learner=ss.learners.SGD(lam=1e-3, averaging=averaging, avg_start=avg_start, t0=0,
                                                  replay=0))
    acc, csum = None, 0.0
    for x, y in data:
        m.learn_one(x, y)
        lr = m._learner
        c = lr._avg_weight(lr.t)
        w = [lr.a * u for u in (lr.W.E, lr.W.T, lr.W.B)]
        acc = [c * v for v in w] if acc is None else [
            np.pad(p, [(0, v.shape[0] - p.shape[0]), (0, v.shape[1] - p.shape[1])]) + c * v for p, v in zip(acc, w)]
        csum += c
    assert lr.projections > 0
    A, scale = lr._pred_weights()
    for got, ref in zip((A.E, A.T, A.B), acc):
        np.testing.assert_allclose(scale * got, ref / csum, rtol=1e-9, atol=1e-9)
    # the kernel path (scale * (U - V / beta)) predicts what the materialized average predicts
    X = [x for x, _ in data[:30]]
    fast = m.predict_many(X)
    lr.W, lr.a, lr._avg_kind = A, scale, "none"   # the materialized average as the iterate
    assert m.predict_many(X) == fast


def test_sgd_seeded_refine_is_deterministic():
    """seed=0 by default: two runs of the same stream and refine end with identical weights;
    another seed permutes differently."""
    data = _chain_stream(2, 60)

    def run(**kw):
        m = ss.SequenceTagger(learner=ss.learners.SGD(lam=1e-3, **kw))
        for x, y in data:
            m.learn_one(x, y)
        m.refine(passes=3)
        return m._learner.W.E.copy()
    a, b, c = run(), run(), run(seed=7)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_default_window_holds_every_example():
    """The default window holds what the learner learned: after a stream longer than the old
    default (1000) the certificate still has a dual point (finite gap)."""
    rng = np.random.default_rng(3)
    m = ss.MulticlassSSVM(learner=ss.learners.SGD(lam=1e-2))
    for _ in range(1100):
        y = int(rng.integers(3))
        m.learn_one({"f": y + 0.3 * rng.normal(), "g": 1.0}, y)
    c = m.certificate()
    assert c.n_blocks == 1100 and np.isfinite(c.gap) and c.exact


def test_flat_examples_are_stepped_when_a_second_label_arrives():
    """Regression (issue 12, item 9, for SGD): an example learned while its label was the only
    one had no competitor, so its step could not move; it is stepped when the next label arrives
    (before the fix the second class won everywhere)."""
    m = ss.MulticlassSSVM(learner=ss.learners.SGD())
    m.learn_one({"a": 1}, "x")
    m.learn_one({"b": 1}, "y")
    assert m.predict_one({"a": 1}) == "x" and m.predict_one({"b": 1}) == "y"
    assert m._learner.flat_revisits == 1 and m._learner._flat == []
    t = ss.SequenceTagger(learner=ss.learners.SGD())
    t.learn_one([{"a": 1}], ["x"])
    t.learn_one([{"b": 1}], ["y"])
    assert t.predict_one([{"a": 1}]) == ["x"]   # before: ["y"], the only tag ever stepped on
    assert t._learner.flat_revisits == 1
    # each flat example once, then never again; the projection radius counts its loss range
    lr = m._learner
    m.learn_one({"c": 1}, "z")
    assert lr.flat_revisits == 1 and lr._lmax_sum == pytest.approx(3.0)
    # still a valid dual point (the revisit is a counted visit)
    assert np.isfinite(m.certificate().gap)


def test_flat_revisit_survives_save_load(tmp_path):
    m = ss.MulticlassSSVM(learner=ss.learners.SGD())
    for _ in range(3):
        m.learn_one({"a": 1}, "x")
    m.save(tmp_path / "f.ssvm")
    m2 = ss.MulticlassSSVM.load(tmp_path / "f.ssvm")
    for mm in (m, m2):
        mm.learn_one({"b": 1}, "y")
        assert mm.predict_one({"a": 1}) == "x" and mm._learner.flat_revisits == 3
    np.testing.assert_array_equal(m._learner.W.E, m2._learner.W.E)


def test_replay_keeps_a_dual_point_and_resumes_identically(tmp_path):
    """replay=1 (the default, as BCFW's): one step on a held example per new one. The draws are
    capped at 1 + replay violating visits per example, so after one pass the weight of each
    example's steps stays within 1 / (lam n) and the certificate is a valid gap; the draws are a
    hash of (seed, t), so a model saved and loaded mid-stream continues exactly as the
    uninterrupted one."""
    data = _chain_stream(4, 160)
    m = ss.SequenceTagger(learner=ss.learners.SGD(lam=1e-3, calibrate=50), loss="normalized")
    for x, y in data[:100]:
        m.learn_one(x, y)
    m.save(tmp_path / "r.ssvm")
    m2 = ss.SequenceTagger.load(tmp_path / "r.ssvm")
    for x, y in data[100:]:
        m.learn_one(x, y)
        m2.learn_one(x, y)
    lr = m._learner
    np.testing.assert_array_equal(lr.W.E, m2._learner.W.E)
    assert lr.t > 1.5 * len(data) and lr.n_learned == len(data)   # ~ two steps per example
    assert max(lr._visits) <= 1 + lr.replay
    assert lr.lam * len(lr._recent) * lr.a * max(lr._mass) <= 1.0
    c = m.certificate()
    assert np.isfinite(c.gap) and c.primal < 1.0
    one = ss.SequenceTagger(learner=ss.learners.SGD(lam=1e-3, calibrate=50, replay=0), loss="normalized")
    for x, y in data:
        one.learn_one(x, y)
    assert c.primal < one.certificate().primal   # the replayed steps optimize further


@pytest.mark.parametrize("truncate", [False, True])
def test_replay_and_truncated_steps_certificate_is_valid(truncate):
    """The dual point of replayed (and truncated: Asi & Duchi's step min(eta, H / ||psi||^2))
    steps is feasible: its value is below BCFW's certified optimum, the primal above it."""
    cls, data = _stream("chain", 21, n=60)
    lam = 0.1
    d_lo, p_hi = _bcfw_optimum(cls, data, lam, "margin")
    m = cls(learner=ss.learners.SGD(lam=lam, replay=2, truncate=truncate))
    for x, y in data:
        m.learn_one(x, y)
    c = m.certificate()
    assert np.isfinite(c.gap) and c.dual <= p_hi + 1e-12 and c.primal >= d_lo - 1e-12
