"""BCFW's refreshing gap pass at large tag sets: the pass that only refreshes the block-gap
estimates (start of ``refine``, the ``gap_every`` schedule) runs one oracle pass (the iterate's),
not a second one for the averaged weights whose result nobody reads; the learner's trajectory
is the same either way."""
import numpy as np

import streamssvm as ss


def _stream(seed=0, n=40, K=5, d=4):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(K, d)) * 1.5
    X, Y = [], []
    for _ in range(n):
        L = int(rng.integers(1, 7))
        y = [int(v) for v in rng.integers(0, K, L)]
        X.append(centers[y] + rng.normal(size=(L, d)))
        Y.append(y)
    return X, Y


def test_refresh_pass_runs_one_oracle_pass():
    X, Y = _stream()
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0))
    m.learn_many(X, Y)
    lr = m._learner
    assert lr.averaging and lr.averaged_u() is not None
    before = lr.full_pass_oracle_calls
    m.refine(1)   # the stream just arrived: refine refreshes the gaps first
    assert lr._had_full
    assert lr.full_pass_oracle_calls - before == lr.store.n


def test_refresh_pass_does_not_change_the_trajectory():
    """The same learner refined with the refreshing pass as before (iterate + averaged pass,
    simulated by a certificate call right after it, which observes only) ends in the same state."""
    X, Y = _stream(1)
    a = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0))
    b = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0))
    for m in (a, b):
        m.learn_many(X, Y)
    a.refine(3)
    b._learner._full_pass(certify=True)   # the full certifying pass, then the same schedule
    b._learner._full_pass(certify=False)
    b.refine(3)
    for u, v in ((a._learner.W.E, b._learner.W.E), (a._learner.W.T, b._learner.W.T)):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-12)
    assert a.certificate().gap == b.certificate().gap
