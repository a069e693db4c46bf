"""BCFW's refreshing gap pass at large tag sets: the pass that only refreshes the block-gap
estimates (start of ``refine`` with an oracle cache, the ``gap_every`` schedule) runs one oracle
pass (the iterate's), not a second one for the averaged weights whose result nobody reads; the
learner's trajectory is the same either way. Without a cache, ``refine`` on stale estimates
sweeps (one step per block) instead of refreshing them with a pass that makes no progress."""
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
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0, cache=True))
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
    a = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0, cache=True))
    b = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0, cache=True))
    for m in (a, b):
        m.learn_many(X, Y)
    a.refine(3)
    b._learner._full_pass(certify=True)   # the full certifying pass, then the same schedule
    b._learner._full_pass(certify=False)
    b.refine(3)
    for u, v in ((a._learner.W.E, b._learner.W.E), (a._learner.W.T, b._learner.W.T)):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-12)
    assert a.certificate().gap == b.certificate().gap


def test_refine_after_a_stream_sweeps_instead_of_a_refresh_pass():
    """refine(1) right after a stream (stale gap estimates, no cache) takes one step on every
    held block: n oracle calls that all make progress, no full gap pass (before: a full pass of
    n oracle calls that only refreshed the estimates, then n gap-sampled steps, 2n calls)."""
    from streamssvm._kernels import bcfw as K
    X, Y = _stream(2, n=60)
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0))
    m.learn_many(X, Y)
    lr = m._learner
    n, calls0, full0, tick0 = lr.store.n, int(lr.counters[K.C_ORACLE]), lr.full_pass_oracle_calls, lr._tick
    lr.refine(1)
    assert lr.full_pass_oracle_calls == full0
    assert int(lr.counters[K.C_ORACLE]) - calls0 == n
    assert lr._tick - tick0 == n
    s = lr.store.slots()
    assert np.all(lr.store.last_oracle[s] >= tick0)   # every block stepped once
    # the estimates count as fresh: the next refine samples by gap, no second sweep
    assert lr._had_full and lr._n_at_full == n
    c0 = m.certificate().gap
    lr.refine(2)
    assert lr.full_pass_oracle_calls == full0
    assert m.certificate().gap < c0
