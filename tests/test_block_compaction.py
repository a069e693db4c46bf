"""Checkpoint compaction of the block store (``BlockStore.compact``): the vectorized rewrite of
stores that keep their layout (``_compact_in_place``) gives the same arenas, meta rows and
counters as the block-by-block rewrite, and learning goes on identically after it."""
import copy
import pickle

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.blocks import BlockStore


def _multiclass(n=600, d=8, capacity=None, dense=True, seed=0, eviction="fifo", evicted_average="restart"):
    rng = np.random.default_rng(seed)
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0, capacity=capacity, eviction=eviction,
                                                   evicted_average=evicted_average), scale=False)
    for i in range(n):
        if dense:
            x = rng.normal(size=d)
        else:
            x = {f"f{j}": float(rng.normal()) for j in rng.choice(40, size=1 + i % 5, replace=False)}
        m.learn_one(x, int(rng.integers(0, 5)))
    return m


def _multilabel(n=300, seed=1):
    rng = np.random.default_rng(seed)
    m = ss.MultiLabelSSVM(learner=ss.learners.BCFW(seed=0))
    for _ in range(n):
        on = [k for k in range(4) if rng.random() < 0.4] or [0]
        m.learn_one(rng.normal(size=6), {f"l{k}": k in on for k in range(4)})
    return m


def _chain(n=120, seed=2):
    rng = np.random.default_rng(seed)
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0))
    for _ in range(n):
        L = int(rng.integers(1, 7))
        m.learn_one([{f"w{int(rng.integers(0, 30))}": 1.0} for _ in range(L)],
                    [f"t{int(rng.integers(0, 4))}" for _ in range(L)])
    return m


def _arrays(st):
    return (st.Iar.copy(), st.Far.copy(), st.meta.copy(), st.i_used, st.i_live, st.f_used, st.f_live)


def _same(a, b):
    for u, v in zip(a, b):
        if isinstance(u, np.ndarray):
            assert u.dtype == v.dtype and u.shape == v.shape
            np.testing.assert_array_equal(u, v)
        else:
            assert u == v


MODELS = {
    "multiclass dense rows": lambda: _multiclass(),
    "multiclass sparse rows": lambda: _multiclass(dense=False),
    "multiclass evicting (garbage, reused slots)": lambda: _multiclass(capacity=150),
    "multiclass evicting sparse rows": lambda: _multiclass(capacity=90, dense=False),
    "multiclass reservoir (live blocks scattered)": lambda: _multiclass(n=900, capacity=500, eviction="reservoir"),
    # blocks with averaging accumulators (layout.FLAG_AVG): the in-place rewrite must move them too
    "multiclass evicting, averages kept": lambda: _multiclass(capacity=150, evicted_average="keep"),
    "multiclass reservoir, averages kept": lambda: _multiclass(n=900, capacity=500, eviction="reservoir",
                                                              evicted_average="keep"),
    "multilabel": _multilabel,
    "chain": _chain,
}


@pytest.mark.parametrize("name", list(MODELS))
def test_in_place_compaction_equals_block_by_block(name, monkeypatch):
    m = MODELS[name]()
    st = m._learner.store
    ref = copy.deepcopy(st)
    monkeypatch.setattr(BlockStore, "_compact_in_place", lambda self, slots, Kc: False)
    ref.compact()
    monkeypatch.undo()
    took = []
    f = BlockStore._compact_in_place
    monkeypatch.setattr(BlockStore, "_compact_in_place", lambda self, slots, Kc: took.append(f(self, slots, Kc)) or took[-1])
    st.compact()
    assert took[-1] == (not st.sparse and not st.avg)
    _same(_arrays(st), _arrays(ref))
    assert pickle.dumps(st.state()) == pickle.dumps(ref.state())


@pytest.mark.parametrize("name", list(MODELS))
def test_label_capacity_growth_equals_block_by_block(name, monkeypatch):
    """grow_labels (a new label past the capacity): multiclass stores grow in place (the new
    label slots of each statistic 0), others block by block; the same arrays either way."""
    st = MODELS[name]()._learner.store
    ref = copy.deepcopy(st)
    new = st.Kc + 7
    monkeypatch.setattr(BlockStore, "_compact_in_place", lambda self, slots, Kc: False)
    ref.grow_labels(new)
    monkeypatch.undo()
    st.grow_labels(new)
    assert st.Kc == ref.Kc == new
    _same(_arrays(st), _arrays(ref))
    assert pickle.dumps(st.state()) == pickle.dumps(ref.state())


def test_move_in_chunks():
    from streamssvm.blocks import _move
    rng = np.random.default_rng(0)
    size = rng.integers(0, 5, 300)
    gaps = rng.integers(0, 3, 300)
    s_off = np.cumsum(size + gaps) - size - gaps + gaps
    d_off = np.cumsum(size) - size
    src = rng.normal(size=int(s_off[-1] + size[-1]) + 3)
    a, b = np.zeros(int(size.sum())), np.zeros(int(size.sum()))
    _move(src, a, s_off, d_off, size, chunk=7)
    for i in range(300):
        b[d_off[i]:d_off[i] + size[i]] = src[s_off[i]:s_off[i] + size[i]]
    np.testing.assert_array_equal(a, b)


def test_learning_after_checkpoints_is_unchanged(monkeypatch):
    """Checkpoints (state(), which compacts) between records: the same model as with the
    block-by-block rewrite."""
    def run():
        rng = np.random.default_rng(5)
        m = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0, capacity=200))
        saved = []
        for i in range(700):
            m.learn_one(rng.normal(size=5) * 10, int(rng.integers(0, 4)))
            if i % 97 == 0:
                saved.append(pickle.dumps(m.state()))
        return saved, pickle.dumps(m.state())
    fast = run()
    monkeypatch.setattr(BlockStore, "_compact_in_place", lambda self, slots, Kc: False)
    assert run() == fast


@pytest.mark.parametrize("name", ["multiclass dense rows", "multiclass sparse rows",
                                  "multiclass evicting (garbage, reused slots)",
                                  # FLAG_AVG on every block, as reserve sets it (was missing)
                                  "multiclass evicting, averages kept"])
def test_reserve_rows_equals_reserve_one_by_one(name):
    """The micro-batch kernel's slots reserved at once (``reserve_rows``): the same slots,
    segments, meta rows and bookkeeping as one ``reserve`` per record."""
    st = MODELS[name]()._learner.store
    rng = np.random.default_rng(1)
    rows = [np.arange(9, dtype=np.int32), np.array([0, 3, 40], np.int32), np.array([0, 1, 2, 3], np.int32),
            np.zeros(0, np.int32), np.array([2, 5], np.int32)]
    rows += [np.sort(rng.choice(12, size=int(rng.integers(1, 12)), replace=False)).astype(np.int32)
             for _ in range(20)]
    tok_ptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int32)
    fidx = np.concatenate(rows).astype(np.int32)
    if st.free:
        del st.free[3:]          # (a store with a few free slots, as after evictions)
    ref = copy.deepcopy(st)
    want = [ref.reserve(1, len(r), 1, 1, r) for r in rows]
    got = st.reserve_rows(tok_ptr, fidx)
    assert got.tolist() == want
    _same(_arrays(st), _arrays(ref))
    for k in ("gest", "lval", "last_oracle", "birth", "pos"):
        np.testing.assert_array_equal(getattr(st, k), getattr(ref, k))
    assert (st.n_slots, st._seen, st.max_L, list(st._order), st.free) == \
        (ref.n_slots, ref._seen, ref.max_L, list(ref._order), ref.free)
