"""Sparse chain blocks keep their emission statistic M over their own tags (a *tag room*, issue 22
item 9: ``_kernels/chainsparse.py``) instead of L x Kc. The room's tags stay ascending, so every
sum visits M's non-zeros in the order the L x Kc layout did: the weights are the same to the bit
as before the rooms, also when blocks meet tags late (labels that appear late in the stream, and
the oracle's labelings during refinement), whether a room has space for them, reclaims its zero
columns or moves its block to a larger one (``chainsparse.sp_move_grown``): against hashes written before
the rooms, and against rooms large enough for every tag (``blocks.ROOM_SLACK``)."""
import hashlib

import numpy as np
import pytest

import streamssvm as ss
import streamssvm.blocks as blk
from streamssvm._kernels import layout as KL

#: Written by 13113b8 (M as L x Kc): ``SequenceTagger(BCFW(lam=0.05, replay=2, seed=4, **kw))`` on
#: :func:`late_tags_stream` (``learn_one`` each, then ``refine(3)``): sha256 of E | T | B (first 16
#: hex digits) and the duality gap.
BEFORE = {
    "fw": ({}, "207ea93e4f9a7e7e", 1.7858603741861807),
    "pairwise": ({"step": "pairwise", "cache": True, "cache_size": 5}, "30178920b9714603", 2.4084396834119435),
    "keep": ({"evicted_average": "keep", "window": 25}, "757e7fef5146b18e", 2.2990904206042684),
}


def late_tags_stream(seed=7, n=40, K=9, d=4):
    """Chains of 1-7 tokens whose tags k >= 3 + 3 i / n only appear as the stream goes on (so blocks
    held from the start meet them late, through the oracle)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(K, d)) * 1.3
    X, Y = [], []
    for i in range(n):
        k_now = min(K, 3 + (3 * i) // max(n // 6, 1))
        L = int(rng.integers(1, 8))
        y = [int(v) for v in rng.integers(k_now, size=L)]
        X.append(centers[y] + rng.normal(size=(L, d)))
        Y.append(y)
    return X, Y


def _fit(kw):
    X, Y = late_tags_stream()
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, replay=2, seed=4, **kw))
    for x, y in zip(X, Y):
        m.learn_one(x, y)
    m.refine(3)
    lr = m._learner
    h = hashlib.sha256()
    for a in (lr.W.E, lr.W.T, lr.W.B):
        h.update(np.ascontiguousarray(a).tobytes())
    return m, h.hexdigest()[:16], m.certificate().gap


@pytest.mark.parametrize("name", sorted(BEFORE))
@pytest.mark.parametrize("rooms", ["tight", "default"])
def test_tag_rooms_keep_the_weights_of_the_full_layout(name, rooms, monkeypatch):
    kw, want, gap = BEFORE[name]
    if rooms == "tight":   # rooms of L tags: they fill, reclaim their zero columns and move
        monkeypatch.setattr(blk.BlockStore, "room0", lambda self, L, Kc=None: np.minimum(
            np.asarray(L, dtype=np.int64), self.Kc if Kc is None else Kc))
    m, digest, g = _fit(kw)
    st = m._learner.store
    assert st.sparse and m._learner.W.Kc > 4   # the label capacity grew while blocks were held
    R = [st._room(s)[2] for s in st.slots()]
    assert min(R) < st.Kc   # (rooms narrower than the label capacity)
    if rooms == "tight":   # some block outgrew its first room inside the kernels
        assert any(r > int(st.meta[s, KL.M_L]) for s, r in zip(st.slots(), R))
    assert digest == want
    assert g == gap

def noisy_late_tag_stream(seed=5, n=60, K=8, d=5, late=3):
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


def _fit_with_room_slack(monkeypatch, slack, **kw):
    monkeypatch.setattr(blk, "ROOM_SLACK", slack)
    X, Y = noisy_late_tag_stream()
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
    small, c_small, rooms_small, p_small = _fit_with_room_slack(monkeypatch, 0, **kw)
    full, c_full, rooms_full, p_full = _fit_with_room_slack(monkeypatch, 1000, **kw)
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
