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
    assert ca.gap == float("inf") and not ca.exact and "primal only" in ca.note


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
    with pytest.raises(ValueError, match="search applies"):
        ss.learners.SGD(search="angular")


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
    assert s["last_certificate"]["rescaling"] == "slack" and s["last_certificate"]["exact"] is False
