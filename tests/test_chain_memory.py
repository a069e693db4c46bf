"""Memory of held chain blocks: a long sentence does not store an L x L token Gram matrix
(issue 26, item 6); the steps then compute the entries they need from the tokens, with the
same values bit for bit, so trajectories do not change."""
import numpy as np
import pytest

import streamssvm as ss
import streamssvm.blocks as blk
from streamssvm._kernels import layout as KL
from test_sparse_chain import CONFIGS, chain_stream


def dict_stream(seed, n=40, K=5, vocab=12):
    """Chains of dict tokens whose keys arrive in no particular order (a growing vocabulary:
    feature indices unsorted within a token)."""
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n):
        L = int(rng.integers(1, 7))
        y = [int(v) for v in rng.integers(K, size=L)]
        X.append([{f"w{(k * 3 + j) % vocab}_{int(rng.integers(3))}": float(rng.normal() + (j == 0))
                   for j in range(int(rng.integers(1, 5)))} | {f"t{k}": 1.0} for k in y])
        Y.append(y)
    return X, Y


def _fit(stats, X, Y, batch, cfg):
    est = ss.SequenceTagger(learner=ss.learners.BCFW(chain_stats=stats, lam=0.05, replay=1, seed=3, **cfg))
    h = len(X) // 2 if batch else len(X)
    for x, y in zip(X[:h], Y[:h]):
        est.learn_one(x, y)
    if batch:
        est.learn_many(X[h:], Y[h:])
    est.refine(passes=3)
    return est


def _assert_identical(a, b):
    la, lb = a._learner, b._learner
    for u, v in ((la.W.E, lb.W.E), (la.W.T, lb.W.T), (la.W.B, lb.W.B)):
        assert np.array_equal(u, v)
    ca, cb = a.certificate(), b.certificate()
    for k in ("gap", "primal", "dual", "block_gap_sum"):
        assert getattr(ca, k) == getattr(cb, k), k


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("stats", ["dense", "sparse"])
@pytest.mark.parametrize("data", ["arrays", "dicts"])
def test_blocks_without_gram_follow_the_same_trajectory(monkeypatch, cfg, stats, data):
    X, Y = chain_stream(1) if data == "arrays" else dict_stream(0)
    for batch in (False, True):
        monkeypatch.setattr(blk.BlockStore, "gram_max_L", 10**9)   # every block keeps its Gram matrix
        ref = _fit(stats, X, Y, batch, cfg)
        monkeypatch.setattr(blk.BlockStore, "gram_max_L", 0)   # no block keeps its Gram matrix
        lean = _fit(stats, X, Y, batch, cfg)
        monkeypatch.undo()
        st = lean._learner.store
        assert all(st.meta[s, KL.M_FLAGS] & KL.FLAG_NO_GRAM for s in st.slots())
        assert not any(ref._learner.store.meta[s, KL.M_FLAGS] & KL.FLAG_NO_GRAM for s in ref._learner.store.slots())
        assert st.nbytes() < ref._learner.store.nbytes()
        _assert_identical(ref, lean)
        for s in st.slots():   # the inspection view still shows the (computed) Gram matrix
            assert np.array_equal(st.block(s)["gram"], ref._learner.store.block(s)["gram"])


def test_a_long_sentence_costs_memory_linear_in_its_length(tmp_path):
    """A 3,000-token sentence (5 tags): its block holds no 3,000 x 3,000 matrix (72 MB), the
    step on it still runs, and the model saves, loads and continues identically."""
    rng = np.random.default_rng(0)
    L = 3000
    y = [int(v) for v in rng.integers(5, size=L)]
    x = [{f"w{k}": 1.0, f"b{int(rng.integers(50))}": 0.5} for k in y]
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, seed=0))
    m.learn_one(x, y)
    m.learn_one(x[:2], y[:2])   # 2 x 2 <= its 4 values: keeps its Gram matrix
    st = m._learner.store
    assert st.nbytes() < 8 * L * 100   # O(L Kc) floats, not L^2
    flags = [int(st.meta[s, KL.M_FLAGS]) & KL.FLAG_NO_GRAM for s in st.slots()]
    assert sorted(flags) == [0, KL.FLAG_NO_GRAM]   # the short one keeps its Gram matrix
    m.save(tmp_path / "m")
    r = ss.SequenceTagger.load(tmp_path / "m")
    m.refine(2)
    r.refine(2)
    assert np.array_equal(m._learner.W.E, r._learner.W.E)
    assert m.predict_one(x[:20]) == r.predict_one(x[:20])


def test_old_weight_tables_are_freed_as_the_weights_grow():
    """When new features grow the weights, the learner's cached call plan no longer keeps the old
    tables alive: the old E is gone before its average Z grows (they were alive together with
    the new ones, the peak RSS of a chain stream: +98 MB on Brown 10k)."""
    import gc
    import weakref
    est = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, seed=0))
    est.learn_one([{"a": 1.0}, {"b": 1.0}], ["x", "y"])
    lr = est._learner
    old_E = weakref.ref(lr.W.E)
    seen = []
    z_grow = lr._Z.grow

    def grow(d, Kc):
        gc.collect()
        if old_E() is not lr.W.E:   # (E grew)
            seen.append(old_E() is None)
        z_grow(d, Kc)

    lr._Z.grow = grow
    est.learn_one([{f"f{i}": 1.0 for i in range(50)}, {"b": 1.0}], ["x", "y"])
    assert seen and all(seen)


def test_gram_free_code_compiles_for_chains_from_the_first_example(tmp_path):
    """The step kernels' Gram-free code (``bcfw.gram_rule``) is compiled by a chain from its first
    example (``Structure.many_tokens``) and never by a multiclass model, so that no long sentence
    recompiles the learn path mid-stream (a specialization on the store's blocks alone switched
    at the first long sentence: +3.7 CPU s on a cold Brown run); a loaded store holding a
    Gram-free block says so."""
    from streamssvm._kernels import bcfw as K
    mc = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0))
    mc.learn_one({"a": 1.0}, "x")
    assert mc._learner._call_plan[4][10] is K.GRAMS_KEPT
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, seed=0))
    m.learn_one([{"w=a": 1.0, "s=a": 1.0}, {"w=b": 1.0, "s=b": 1.0}], ["D", "N"])   # L * L <= nnz
    lr = m._learner
    assert not lr.store.any_gram_free and type(lr._call_plan[4][10]) is type(K.GRAM_FREE)
    L = 3
    m.learn_one([{f"w={t}": 1.0} for t in range(L)], ["N"] * L)   # L * L > nnz: no Gram matrix
    assert lr.store.any_gram_free and type(lr._call_plan[4][10]) is type(K.GRAM_FREE)   # the same types
    m.save(tmp_path / "m")
    r = ss.SequenceTagger.load(tmp_path / "m")
    assert r._learner.store.any_gram_free
    m.refine(2)
    r.refine(2)
    assert np.array_equal(m._learner.W.E, r._learner.W.E)
