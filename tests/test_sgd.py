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
    for x, y in data[:30]:
        m.learn_one(x, y)
    p0 = m.certificate().primal
    for x, y in data[30:]:
        m.learn_one(x, y)
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
    c = m.refine(passes=300)
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
    if max(lr._visits) * len(lr._recent) > lr.t:
        assert c.gap == float("inf") and "uneven" in c.note
    else:
        assert np.isfinite(c.gap)
    # the dual point survives save / load
    m = cls(learner=ss.learners.SGD(lam=0.1))
    for x, y in data:
        m.learn_one(x, y)
    m.refine(passes=2)
    assert np.isfinite(m.certificate().gap)
    m.save(tmp_path / "d.ssvm")
    m2 = cls.load(tmp_path / "d.ssvm")
    assert m2.certificate().dual == pytest.approx(m.certificate().dual, rel=1e-12)
