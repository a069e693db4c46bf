"""BlockStore: sum-tree sampling, compaction, relayout, state round trip, memory."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels import bcfw as K
from streamssvm.blocks import BlockStore
from streamssvm._kernels.common import py_entry


def test_sum_tree_samples_proportionally():
    size = 8
    tree = np.zeros(2 * size)
    w = np.array([0.0, 1.0, 2.0, 0.0, 4.0, 1.0, 0.0, 0.0])
    for i, v in enumerate(w):
        py_entry(K.tree_update)(tree, size, i, v)
    assert tree[1] == pytest.approx(w.sum())
    rng = np.random.default_rng(0)
    counts = np.bincount([py_entry(K.tree_sample)(tree, size, rng.random()) for _ in range(200000)], minlength=size)
    np.testing.assert_allclose(counts / counts.sum(), w / w.sum(), atol=0.006)
    assert counts[0] == counts[3] == counts[6] == 0


def _tagger(**kw):
    X_tr, y_tr, _, _ = ss.datasets.load_ocr("small")
    t = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, seed=0, **kw))
    for x, y in zip(X_tr[:60], y_tr[:60]):
        t.learn_one(x, list(y))
    return t


def test_compaction_keeps_blocks_and_gap():
    t = _tagger(step="pairwise", replay=1)
    st = t._learner.store
    before = {int(s): {k: np.array(v) for k, v in st.block(s).items() if isinstance(v, np.ndarray)}
              for s in st.slots()}
    c0 = t.certificate()
    st.compact()
    for s in st.slots():
        b = st.block(s)
        for k, v in before[int(s)].items():
            np.testing.assert_array_equal(b[k], v)
    assert t.certificate().gap == pytest.approx(c0.gap, rel=1e-12)


def test_state_round_trip_preserves_sampling_and_dual():
    t = _tagger(step="away", replay=1, cache=True, cache_size=10)
    lr = t._learner
    st2 = BlockStore.from_state(lr.store.state(), lr.structure)
    assert st2.n == lr.store.n
    a = sorted(lr.store.slots(), key=lambda s: lr.store.birth[s])
    for s1, s2 in zip(a, range(st2.n)):
        b1, b2 = lr.store.block(s1), st2.block(s2)
        np.testing.assert_array_equal(b1["stat"], b2["stat"])
        np.testing.assert_array_equal(b1["pool"], b2["pool"])
        np.testing.assert_array_equal(b1["alpha"], b2["alpha"])
    assert st2.tree[1] == pytest.approx(lr.store.tree[1])


def test_ocr_large_store_memory_is_compact():
    """Blocks hold the example and its mean statistic, not a dense 4082-vector each."""
    X_tr, y_tr, _, _ = ss.datasets.load_ocr("large")
    t = ss.SequenceTagger(learner=ss.learners.BCFW(lam=1e-3, replay=0, seed=0), labels=list(range(26)))
    t.learn_many(X_tr, [list(y) for y in y_tr])
    st = t._learner.store
    assert st.n == 6251
    dense_bytes = 6251 * 4082 * 8  # what a dense w_i per block would cost (204 MB)
    assert st.nbytes() < 100e6
    assert st.nbytes() < dense_bytes / 3


def _row_store(**kw):
    from streamssvm.structures import MultiClass
    st = BlockStore(MultiClass(), Kc=3, **kw)
    gram = lambda tp, fi, fv, L: np.eye(L)   # noqa: E731
    add = lambda y: st.add(np.array([0, 1], dtype=np.int32), np.array([0], dtype=np.int32),   # noqa: E731
                           np.array([1.0]), np.array([y], dtype=np.int32), 1, gram)
    return st, add


def test_counters_and_queues_change_only_through_methods():
    """n, seen, evicted, the FIFO order and the unvisited set are read-only; the store's methods
    keep them consistent (add counts its example as seen; fifo_victim takes the oldest off the
    queue only when full; mark_visited / mark_all_visited empty the unvisited set)."""
    st, add = _row_store(capacity=2)
    for name in ("n", "seen", "evicted", "order", "unvisited"):
        with pytest.raises(AttributeError):
            setattr(st, name, 0)
    assert st.fifo_victim() == -1 and st.order == ()
    a, b = add(0), add(1)
    assert (st.n, st.seen, st.order, st.unvisited) == (2, 2, (a, b), frozenset({a, b}))
    assert st.birth[a] == 0 and st.birth[b] == 1
    np.testing.assert_array_equal(st.unvisited_slots(), sorted((a, b)))
    st.mark_visited(np.array([a]))
    assert st.unvisited == {b}
    st.mark_all_visited()
    assert st.unvisited == frozenset() and st.unvisited_slots().size == 0
    st.note_seen()
    assert st.seen == 3 and st.n == 2
    assert st.fifo_victim() == a and st.order == (b,)   # full: the oldest leaves the queue
    st.remove(b)
    assert (st.n, st.evicted, st.order) == (1, 1, ())


def test_blend_stats_moves_between_start_and_current():
    st, add = _row_store()
    s = [add(y) for y in (0, 1, 2)]
    idx, sizes = st.stat_regions(np.array(s))
    assert sizes.tolist() == [st.structure.stat_size(1, 3)] * 3 and idx.size == sizes.sum()
    start = np.concatenate([st.start_stat(j, int(z)) for j, z in zip(s, sizes)])
    np.testing.assert_array_equal(start, st.Far[idx])   # a new block is at its start
    st.Far[idx] += 1.0
    st.blend_stats(np.array(s), idx, start, np.zeros(3), 0.25)
    np.testing.assert_allclose(st.Far[idx], start + 0.25)


def test_state_views_are_the_state_without_copies_and_checkpoint_alike(tmp_path):
    """``state_views()``: the store's state with its own arrays (sharing the live arenas) instead
    of copies, the same values; a checkpoint written from it (``run_state``, the engine's path) is
    the one written from the copies, byte for byte; outside the context the state copies again."""
    from streamssvm.blocks import state_views
    from streamssvm.checkpoint import CheckpointManager
    from streamssvm.metrics import ProgressiveMetrics
    from streamssvm.run_state import run_state
    rng = np.random.default_rng(3)
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0))
    X = rng.normal(size=(300, 6))
    m.predict_learn_each(list(X), [int(v) for v in rng.integers(0, 4, 300)])
    store = m._learner.store
    copied = store.state()
    with state_views():
        own = store.state()
    again = store.state()
    for k, v in copied.items():
        if isinstance(v, np.ndarray):
            assert v.dtype == own[k].dtype and v.tobytes() == own[k].tobytes() == again[k].tobytes(), k
            assert not np.shares_memory(v, store.Far) and not np.shares_memory(v, store.meta), k
    assert np.shares_memory(own["Far"], store.Far) and np.shares_memory(own["meta"], store.meta)
    assert not np.shares_memory(again["Far"], store.Far)
    files = []
    for name, make in (("views", lambda: run_state(m, "engine", examples_seen=300, bad_records=0,
                                                   metrics=ProgressiveMetrics("multiclass"), position=None)),
                       ("copies", lambda: {"model": m.state(), "engine": run_state(
                           m, "engine", examples_seen=300, bad_records=0, metrics=ProgressiveMetrics("multiclass"),
                           position=None)["engine"]})):
        path = CheckpointManager(tmp_path / name).save(make(), kind="t")
        files.append({p.name: p.read_bytes() for p in sorted((path / "arrays").iterdir())})
    assert files[0] == files[1] and len(files[0]) > 10


def test_compact_as_is_shortcuts_give_the_general_answer():
    """``_compact_as_is``'s shortcuts (slots already in birth order not sorted, consecutive ones
    read as a slice, one block length sized once) answer as the general check on stores that
    are compact (never evicted, compacted) and not (holes and reused slots after evictions,
    a block moved), multiclass and chains of several lengths, at each step of a stream."""
    rng = np.random.default_rng(7)
    seen = set()

    def check(store):
        got = store._compact_as_is()
        assert got == store._compact_as_is(shortcuts=False)
        seen.add(got)

    for window in (None, 40):   # evictions reuse slots out of birth order
        m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0, window=window))
        for a in range(0, 300, 50):
            m.predict_learn_each(list(rng.normal(size=(50, 5))), [int(v) for v in rng.integers(0, 4, 50)])
            check(m._learner.store)
        store = m._learner.store
        store.compact()
        check(store)
        if store.n > 2:   # a live block's meta row says it sits elsewhere: not compact
            j = int(store.slots()[1])
            store.meta[j, K.M_IOFF] += 1
            check(store)
            store.meta[j, K.M_IOFF] -= 1
    X_tr, y_tr, _, _ = ss.datasets.load_ocr("small")
    t = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, seed=0, chain_stats="dense"))
    for i, (x, y) in enumerate(zip(X_tr[:40], y_tr[:40])):
        t.learn_one(x, list(y))
        if i % 10 == 9:
            check(t._learner.store)
    t._learner.store.compact()
    check(t._learner.store)
    assert seen == {True, False}
