"""The multiclass record prediction in one short kernel call (``BCFW.predict_class``) and the
temperature fit's reuse of its scores (issue 22): the same label as ``predict``, the same
scores as ``calibration.emission_scores`` to the bit, and a ``learn_one`` observes them only
while the learner's ``state_version`` says its weights are those that scored them."""
import copy

import numpy as np
import pytest

import streamssvm as ss
from streamssvm import calibration
from streamssvm.estimators.base import ONE_EX
from streamssvm.learners.base import state_version
from streamssvm.learners.checks import multiclass_data


def _trained(learner, n=80):
    m = ss.MulticlassSSVM(learner=learner)
    data = multiclass_data(n, seed=5)
    for x, y in data:
        m.learn_one(x, y)
    return m, data


@pytest.mark.parametrize("averaging", [True, False])
def test_predict_class_is_predict_and_its_scores_are_the_calibration_scores(averaging):
    m, data = _trained(ss.learners.BCFW(lam=1e-2, replay=2, seed=1, averaging=averaging))
    lr = m.bound_learner
    assert (calibration.predict_tables(lr)[2] != 0.0) == averaging   # both scoring branches
    K = int(lr.n_labels)
    for x, _ in data[:40]:
        tok_ptr, fidx, fval = m._encode_scaled(x)
        pid, S = lr.predict_class(tok_ptr, fidx, fval, True)
        assert pid == lr.predict(ONE_EX, tok_ptr, fidx, fval, ONE_EX, 1)[0]
        assert lr.predict_class(tok_ptr, fidx, fval) == (pid, None)
        ref = calibration.emission_scores(calibration.predict_tables(lr), tok_ptr, fidx, fval, K)
        assert S.shape == ref.shape and S.tobytes() == ref.tobytes()


def test_state_version_moves_on_writes_not_on_reads():
    m, data = _trained(ss.learners.BCFW(lam=1e-2, seed=0))
    lr = m.bound_learner
    v = state_version(lr)
    x, y = data[0]
    tok_ptr, fidx, fval = m._encode_scaled(x)
    lr.predict(ONE_EX, tok_ptr, fidx, fval, ONE_EX, 1)
    lr.predict_class(tok_ptr, fidx, fval, True)
    m.predict_one(x)
    assert state_version(lr) == v
    m.learn_one(x, y)
    assert state_version(lr) != v
    v = state_version(lr)
    lr.set_union(1e-2, 2 * lr.n_blocks)   # the lambda, so the scale of every score
    assert state_version(lr) != v


def _window(m):
    return [(it[1].tobytes(), it[2]) for it in m._temperature._items]


def test_learn_one_observes_the_scores_of_predict_one_only_while_they_hold():
    """predict_one(x), then another record learned, then learn_one(x): the encoding of x is
    reused but its scores are stale (the weights moved); the temperature fit must observe x
    scored by the weights before its own step, as a model that reuses nothing does."""
    data = multiclass_data(30, seed=7)
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    ref = copy.deepcopy(m)
    for x, y in data[:20]:
        m.predict_one(x)
        m.learn_one(x, y)
        ref.predict_one(dict(x))
        ref.learn_one(dict(x), y)
    (x1, y1), (x2, y2) = data[20], data[21]
    m.predict_one(x1)
    ref.predict_one(dict(x1))
    assert m._predicted_scores is not None   # the prediction scored x1 for the fit
    for mod in (m, ref):
        mod.learn_one(dict(x2), y2)
    m.learn_one(x1, y1)
    ref.learn_one(dict(x1), y1)
    assert _window(m) == _window(ref)
    # with nothing in between, the scores of the prediction are the ones observed
    for x, y in data[22:]:
        m.predict_one(x)
        S = m._predicted_scores[1]
        m.learn_one(x, y)
        ref.predict_one(dict(x))
        ref.learn_one(dict(x), y)
        assert m._temperature._items[-1][1].tobytes() == S[0].tobytes()
    assert _window(m) == _window(ref)
    assert m.temperature == ref.temperature
