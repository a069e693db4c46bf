"""Sparse chain blocks keep their emission statistic M over their own tags (a *tag room*, issue 22
item 9: ``_kernels/chainsparse.py``) instead of L x Kc. The room's tags stay ascending, so every
sum visits M's non-zeros in the order the L x Kc layout did: the weights are the same to the bit
as before the rooms, also when blocks meet tags late (labels that appear late in the stream, and
the oracle's labelings during refinement), whether a room has space for them, reclaims its zero
columns or moves its block to a larger one (``chainsparse.sp_move_grown``)."""
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
