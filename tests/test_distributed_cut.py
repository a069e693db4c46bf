"""The cost of a consistent cut: a worker's part saves its block store, and a store that is
already compact is saved without rewriting its arenas (``BlockStore._compact_as_is``) -- the
same bytes as after a compaction. No Ray here."""
import numpy as np
import pytest

import streamssvm as ss


def _states_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        elif k != "rng":
            assert a[k] == b[k], k


def _learn(model, n, seed, seq=False):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        if seq:
            L = int(rng.integers(2, 6))
            model.learn_one(rng.normal(size=(L, 5)), [str(v) for v in rng.integers(0, 3, L)])
        else:
            x = rng.normal(size=6)
            model.learn_one(x, int(np.argmax(x[:4])))


@pytest.mark.parametrize("make, seq", [
    (lambda **kw: ss.MulticlassSSVM(labels=[0, 1, 2, 3], scale=False, learner=ss.learners.BCFW(
        lam=0.01, averaging=False, gap_every=None, seed=0, **kw)), False),
    (lambda **kw: ss.SequenceTagger(labels=["0", "1", "2"], learner=ss.learners.BCFW(
        lam=0.05, averaging=False, gap_every=None, seed=0, chain_stats="dense", **kw)), True),
    (lambda **kw: ss.SequenceTagger(labels=["0", "1", "2"], learner=ss.learners.BCFW(
        lam=0.05, averaging=False, gap_every=None, seed=0, chain_stats="sparse", **kw)), True),
])
@pytest.mark.parametrize("capacity", [None, 50])   # 50: eviction leaves holes
def test_saving_a_compact_store_skips_the_rewrite_with_the_same_bytes(make, seq, capacity):
    m = make() if capacity is None else make(capacity=capacity)
    _learn(m, 120, 0, seq)
    st = m.bound_learner.store
    a = st.state()      # compacts when it has to
    if not st.sparse:
        assert st._compact_as_is()    # the next save takes the fast path
    _learn(m, 40, 1, seq)
    m.bound_learner.refine(1)
    before = st._compact_as_is()
    b = st.state()
    st.compact()
    c = st.state()
    _states_equal(b, c)               # skipping the rewrite saved what a rewrite would have
    if capacity is None and not st.sparse:
        assert before                  # appends and steps keep a dense store compact
    assert a["n"] <= b["n"]


def test_a_store_with_holes_is_compacted_before_saving():
    m = ss.MulticlassSSVM(labels=[0, 1, 2, 3], scale=False, learner=ss.learners.BCFW(
        lam=0.01, averaging=False, gap_every=None, seed=0, capacity=30))
    _learn(m, 100, 2)
    st = m.bound_learner.store
    assert st.evicted > 0 and not st._compact_as_is()
    st.state()
    assert st._compact_as_is()


@pytest.mark.parametrize("seq", [False, True])
def test_stat_regions_vectorized_matches_the_per_block_offsets(seq):
    """The mixing's per-round index of every block's dual statistic (BlockStore.stat_regions,
    vectorized) is the per-block layout.stat_pos / stat_size concatenation."""
    from streamssvm._kernels import layout as KL
    from streamssvm._kernels.bcfw import M_L
    m = (ss.SequenceTagger(labels=["0", "1", "2"], learner=ss.learners.BCFW(lam=0.05, averaging=False, seed=0))
         if seq else ss.MulticlassSSVM(labels=[0, 1, 2, 3], scale=False, learner=ss.learners.BCFW(lam=0.01, seed=0)))
    _learn(m, 80, 3, seq)
    st = m.bound_learner.store
    slots = st.slots().copy()[::-1]
    idx, sizes = st.stat_regions(slots)
    want = [np.arange(int(KL.stat_pos(st.meta, j)), int(KL.stat_pos(st.meta, j))
                      + st.structure.stat_size(int(st.meta[j, M_L]), st.Kc)) for j in slots]
    np.testing.assert_array_equal(sizes, [len(w) for w in want])
    np.testing.assert_array_equal(idx, np.concatenate(want))
    assert st.stat_regions(slots[:0])[0].size == 0
