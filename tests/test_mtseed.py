"""streamssvm._kernels.mtseed draws what numba's np.random draws after np.random.seed, to the bit."""
import numpy as np
import pytest
from numba import njit

from streamssvm._kernels.bcfw import SAMPLE_GAP, SAMPLE_UNIFORM, sample_block
from streamssvm._kernels.mtseed import STATE, mt_next_u32, mt_randint, mt_random, mt_sample_block, mt_seed


@njit(cache=False)
def _pattern(seed, kinds, ns, out, ours):
    """Seed, then draw per ``kinds[i]``: 0 a double, 1 randint(ns[i]), 2 a raw word (numba's
    np.random.randint(2**32 - 1) is not a raw word: raw words come from randint(1 << 32) of the
    low 32 bits); through mtseed when ``ours``, else numba's own np.random."""
    st = np.empty(STATE, dtype=np.int64)
    if ours:
        mt_seed(st, seed)
    else:
        np.random.seed(seed)
    for i in range(kinds.shape[0]):
        if kinds[i] == 0:
            out[i] = mt_random(st) if ours else np.random.random()
        elif kinds[i] == 1:
            out[i] = mt_randint(st, ns[i]) if ours else np.random.randint(ns[i])
        else:
            out[i] = mt_next_u32(st) if ours else np.random.randint(np.int64(1) << 32)


def _same(seed, kinds, ns):
    a, b = np.empty(len(kinds)), np.empty(len(kinds))
    _pattern(seed, kinds, ns, a, True)
    _pattern(seed, kinds, ns, b, False)
    assert a.tobytes() == b.tobytes(), (seed, np.flatnonzero(a != b)[:5])


@pytest.mark.parametrize("seed", [0, 1, 5489, 2**31 - 2, 2**32 - 1, 123456789])
def test_the_first_draws_after_a_seed_are_numbas(seed):
    kinds = np.array([0, 1, 1, 0, 2, 1, 1, 0], dtype=np.int64)
    ns = np.array([0, 1, 2, 0, 0, 3, 1000, 0], dtype=np.int64)
    _same(seed, kinds, ns)


def test_long_draw_sequences_cross_the_lazy_part_and_two_twists():
    """Word 227 on needs the whole state; words 624 on a second twist: both exact."""
    rng = np.random.default_rng(0)
    for seed in (7, 2654435761 % 2147483647, 99):
        kinds = rng.integers(0, 3, 1500).astype(np.int64)
        ns = rng.integers(1, 5000, 1500).astype(np.int64)
        ns[::7] = (np.int64(1) << 40) + 3   # more than 32 bits: two words per try
        ns[::11] = 1                         # no word drawn
        _same(seed, kinds, ns)


def test_many_seeds_one_replay_draw_each():
    """The record path's pattern: a fresh seed per record, a gap draw (a double), sometimes a
    uniform fallback."""
    seeds = (np.arange(3000, dtype=np.int64) * 2654435761 + 12345) % 2147483647
    kinds = np.array([0, 1], dtype=np.int64)
    for s in seeds:
        _same(int(s), kinds, np.array([0, int(s) % 20000 + 1], dtype=np.int64))


@njit(cache=False)
def _blocks(seeds, sampling, tree, tree_size, alive, n, ours):
    st = np.empty(STATE, dtype=np.int64)
    out = np.empty(seeds.shape[0], dtype=np.int64)
    for i in range(seeds.shape[0]):
        if ours:
            mt_seed(st, seeds[i])
            out[i] = mt_sample_block(sampling, tree, tree_size, alive, n, st)
        else:
            np.random.seed(seeds[i])
            out[i] = sample_block(sampling, tree, tree_size, alive, n)
    return out


@pytest.mark.parametrize("sampling", [SAMPLE_GAP, SAMPLE_UNIFORM])
def test_sampled_blocks_are_sample_blocks(sampling):
    """mt_sample_block draws the block bcfw.sample_block draws after the same seed (a sum-tree
    with empty leaves, so that gap draws also fall back to uniform ones)."""
    rng = np.random.default_rng(1)
    size = 64
    leaves = rng.random(size) * (rng.random(size) < 0.7)
    tree = np.zeros(2 * size)
    tree[size:] = leaves
    for i in range(size - 1, 0, -1):
        tree[i] = tree[2 * i] + tree[2 * i + 1]
    alive = rng.permutation(size).astype(np.int64)
    seeds = (np.arange(2000, dtype=np.int64) * 40503 + 17) % 2147483647
    ours = _blocks(seeds, sampling, tree, size, alive, 50, True)
    theirs = _blocks(seeds, sampling, tree, size, alive, 50, False)
    assert np.array_equal(ours, theirs)
    assert len(set(ours.tolist())) > 10


@pytest.mark.parametrize("sampling", ["gap", "uniform"])
def test_learn_one_replays_draw_the_blocks_learn_many_draws_after_np_random_seed(sampling):
    """``learn_one`` (``learn_one_example``: its replays drawn through mtseed) learns what
    ``learn_many`` of the same rows one at a time learns (``learn_new_blocks``: drawn by numba's
    np.random after ``np.random.seed`` of the same seed): the same blocks replayed, so the
    same weights, averages, gap estimates and steps, to the bit."""
    import streamssvm as ss
    rng = np.random.default_rng(3)
    X = np.round(rng.normal(size=(300, 6)), 2)
    y = [int(v) for v in (X[:, 0] > 0) + 2 * (X[:, 1] > 0.5)]
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(sampling=sampling, replay=2, seed=5))
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(sampling=sampling, replay=2, seed=5))
    for row, c in zip(X, y):
        a.learn_one(row, c)
        b.learn_many(row[None, :], [c])
    la, lb = a._learner, b._learner
    assert la._tick == lb._tick >= 3 * len(y)   # every record: its step and two replays
    for u, v in ((la.W.E, lb.W.E), (la._Z.E, lb._Z.E), (la.store.gest, lb.store.gest), (la.counters, lb.counters)):
        assert np.array_equal(u, v)
