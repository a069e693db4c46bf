"""Sparse chain blocks hold their emission statistic M over their own tags (a tag room,
``BlockStore.room0``), growing it when a labeling brings a tag the block had not used: the
weights, certificate and predictions are bit-identical to blocks whose room holds every tag."""
import numpy as np
import pytest

import streamssvm as ss
import streamssvm.blocks as blk


def late_tag_stream(seed=5, n=60, K=8, d=5, late=3):
    """Chains of 1-6 tokens whose last ``late`` tags only appear after the first third of the
    stream, with noisy features so the oracle's labelings bring tags a block's truth lacks."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(K, d))
    X, Y = [], []
    for i in range(n):
        k_now = K - late if i < n // 3 else K
        L = int(rng.integers(1, 7))
        y = [int(v) for v in rng.integers(k_now, size=L)]
        X.append(centers[y] + rng.normal(size=(L, d)) * 1.5)
        Y.append(y)
    return X, Y


def run(monkeypatch, slack, **kw):
    monkeypatch.setattr(blk, "ROOM_SLACK", slack)
    X, Y = late_tag_stream()
    est = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, seed=1, replay=2, **kw))
    for x, y in zip(X, Y):
        est.learn_one(x, y)
    est.learn_many(X[:20], Y[:20])
    est.refine(passes=2)
    lr = est._learner
    st = lr.store
    rooms = [(len(st._room(j)[1]), st._room(j)[2]) for j in st.slots()]
    return est, lr.certificate(), rooms, est.predict_many(X)


@pytest.mark.parametrize("kw", [{}, {"step": "pairwise", "cache": True, "cache_size": 4}])
def test_growing_tag_rooms_give_the_weights_of_rooms_with_every_tag(monkeypatch, kw):
    small, c_small, rooms_small, p_small = run(monkeypatch, 0, **kw)
    full, c_full, rooms_full, p_full = run(monkeypatch, 1000, **kw)
    Kc = full._learner.store.Kc
    # the small rooms grew past a block's length (tags its truth lacks), and most stayed below Kc
    L = [int(small._learner.store.meta[j, 2]) for j in small._learner.store.slots()]
    assert any(n > l for (n, _), l in zip(rooms_small, L))
    assert min(c for _, c in rooms_small) < Kc
    assert sum(c for _, c in rooms_small) < sum(c for _, c in rooms_full)
    a, b = small._learner.W, full._learner.W
    for u, v in ((a.E, b.E), (a.T, b.T), (a.B, b.B)):
        assert np.array_equal(u, v)
    assert (c_small.gap, c_small.primal, c_small.dual) == (c_full.gap, c_full.primal, c_full.dual)
    assert p_small == p_full
