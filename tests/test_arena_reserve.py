"""The block store's arenas from ``ARENA_RESERVE_FROM`` bytes on: one reservation of address
space, never copied while it has room (``blocks.reserve_zeros``), and a pickled / copied store
that keeps the used prefix only and learns on exactly as the original."""
import copy
import pickle

import numpy as np
import pytest

import streamssvm as ss
from streamssvm import blocks


def _rows(n, d=784, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    X[X < 0.5] = 0.0
    return X, rng.integers(0, 10, size=n)


def _learn(m, X, y, size=256):
    for a in range(0, len(y), size):
        m.learn_many(X[a:a + size], y[a:a + size])


def test_a_reserved_arena_is_not_replaced_as_the_store_grows():
    if blocks.reserve_zeros(blocks.ARENA_RESERVE // 8, np.float64) is None:
        pytest.skip("this system grants no reservation of address space")
    X, y = _rows(4000)
    m = ss.MulticlassSSVM()
    a = 0
    while a < 2000 and (m._learner is None or m._learner.store.Far.nbytes < blocks.ARENA_RESERVE):
        m.learn_many(X[a:a + 256], y[a:a + 256])
        a += 256
    st = m._learner.store
    assert st.Far.nbytes == blocks.ARENA_RESERVE   # ~1000 rows of ~400 values passed 4 MiB
    far, iar, used = st.Far, st.Iar, st.f_used
    _learn(m, X[a:], y[a:])
    assert st.Far is far and st.Iar is iar        # the store more than doubled: the same arenas
    assert st.f_used > 2 * used


def test_a_copied_store_keeps_its_used_prefix_and_learns_on_identically():
    X, y = _rows(1800, seed=1)
    m = ss.MulticlassSSVM()
    _learn(m, X[:1400], y[:1400])
    st = m._learner.store
    assert st.Far.nbytes >= blocks.ARENA_RESERVE_FROM
    blob = pickle.dumps(m)
    assert len(blob) < 2 * (st.f_used * 8 + st.i_used * 4) + (8 << 20)   # not the arena's room
    for c in (pickle.loads(blob), copy.deepcopy(m)):
        cst = c._learner.store
        assert cst.Far.shape[0] == cst.f_used and cst.Iar.shape[0] == max(cst.i_used, 1024) or \
            cst.Iar.nbytes < blocks.ARENA_RESERVE_FROM
        np.testing.assert_array_equal(cst.Far[:st.f_used], st.Far[:st.f_used])
        c.learn_many(X[1400:], y[1400:])
    m.learn_many(X[1400:], y[1400:])
    for c in (pickle.loads(blob),):
        c.learn_many(X[1400:], y[1400:])
        assert c.predict_many(X[:300]).tolist() == m.predict_many(X[:300]).tolist()
        np.testing.assert_array_equal(c._learner.W.E, m._learner.W.E)
        np.testing.assert_array_equal(c._learner.store.Far[:c._learner.store.f_used], m._learner.store.Far[:m._learner.store.f_used])
