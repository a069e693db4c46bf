"""BlockStore: sum-tree sampling, compaction, relayout, state round trip, memory."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels import bcfw as K
from streamssvm.blocks import BlockStore


def test_sum_tree_samples_proportionally():
    size = 8
    tree = np.zeros(2 * size)
    w = np.array([0.0, 1.0, 2.0, 0.0, 4.0, 1.0, 0.0, 0.0])
    for i, v in enumerate(w):
        K.tree_update(tree, size, i, v)
    assert tree[1] == pytest.approx(w.sum())
    rng = np.random.default_rng(0)
    counts = np.bincount([K.tree_sample(tree, size, rng.random()) for _ in range(200000)], minlength=size)
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
