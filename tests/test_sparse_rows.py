"""Sparse class rows (MEMOIR): same numbers as dense rows, exact MIPS by inverted index against
brute force, memory O(nnz), growth, compaction, save/load, hashed sketches."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm.learners.memoir import MEMOIR
from streamssvm.oracles.mips import ExactMIPS, HNSWMIPS, LSHMIPS
from streamssvm.oracles.rows import DenseRows, SparseRows, rows_from_state
from streamssvm.structures import MultiClass


def _ext(mips=None, loss=None, labels=None, n_features=None, rescaling=None, predict_with=None, **learner):
    """ExtremeClassifier(learner=MEMOIR(**learner), ...)."""
    return ss.ExtremeClassifier(learner=ss.learners.MEMOIR(**learner), mips=mips, loss=loss, labels=labels,
                                n_features=n_features, rescaling=rescaling, predict_with=predict_with)

def _x(rng, d, nnz):
    idx = np.sort(rng.choice(d, size=nnz, replace=False)).astype(np.int64)
    return idx, rng.normal(size=nnz)


def test_store_operations_match_dense():
    rng = np.random.default_rng(0)
    D, S = DenseRows(30), SparseRows(dim=8, slots=4)  # tiny capacities: growth is exercised
    for step in range(600):
        C = 5 + step // 20                              # classes and features keep growing
        d = min(30, 8 + step // 10)
        for R in (D, S):
            R.ensure(C, d)
        idx, val = _x(rng, d, int(rng.integers(1, 6)))
        c = int(rng.integers(C))
        a = float(rng.normal())
        xx = float(val @ val)
        assert D.axpy(c, idx, val, a, xx) == S.axpy(c, idx, val, a, xx)
        np.testing.assert_allclose(D.sq, S.sq, rtol=1e-12)  # equal until a truncation reorders the sum
        q, qv = _x(rng, d, 4)
        ex = int(rng.integers(-1, C))
        assert D.argmax(q, qv, ex) == S.argmax(q, qv, ex)
        assert D.dot(c, q, qv) == S.dot(c, q, qv)
        if step % 50 == 49:
            ids = np.unique(rng.integers(0, C, size=4))
            D.truncate(ids, 0.3)
            S.truncate(ids, 0.3)
            np.testing.assert_allclose(D.sq, S.sq, rtol=1e-12)
    np.testing.assert_array_equal(D.to_dense()[:, :S.dim], S.to_dense())
    for R in (D, S):   # kernels do not check bounds: the wrappers do
        with pytest.raises(IndexError, match="ensure"):
            R.axpy(R.n_rows, np.array([0]), np.ones(1), 1.0, 1.0)
        with pytest.raises(IndexError, match="ensure"):
            R.axpy(0, np.array([10**6]), np.ones(1), 1.0, 1.0)
    # all scores and candidate re-scoring
    q, qv = _x(rng, 30, 5)
    a, b = np.zeros(D.n_rows), np.zeros(S.n_rows)
    D.scores_into(q, qv, a)
    S.scores_into(q, qv, b)
    np.testing.assert_array_equal(a, b)
    cands = np.array([3, 0, 7, 7, 1], dtype=np.int64)
    oa, ob = np.zeros(5), np.zeros(5)
    assert D.rescore(cands, 5, q, qv, 0, oa) == S.rescore(cands, 5, q, qv, 0, ob)
    np.testing.assert_array_equal(oa, ob)
    # compaction drops the zeros and keeps every value; save / load through arrays
    before = S.to_dense()
    S.truncate(np.arange(S.n_rows), 1e9)  # everything to zero ...
    assert S.nnz == 0 and S.n_slots > 0
    S.compact()
    assert S.n_slots == 0 and S.argmax(q, qv, -1) == 0
    S2 = rows_from_state(D.state())
    np.testing.assert_array_equal(S2.to_dense(), D.to_dense())
    R = SparseRows(dim=30)
    R.ensure(D.n_rows, 30)
    Dd = before
    for c in range(Dd.shape[0]):
        nz = np.flatnonzero(Dd[c]).astype(np.int64)
        if nz.size:
            R.axpy(c, nz, Dd[c, nz], 1.0, float(Dd[c, nz] @ Dd[c, nz]))
    R3 = rows_from_state(R.state())
    np.testing.assert_array_equal(R3.to_dense(), before)
    assert R3.sq == R.sq


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_mips_on_sparse_rows_is_brute_force(seed):
    rng = np.random.default_rng(seed)
    C, d = 300, 2000
    R = SparseRows(dim=d)
    R.ensure(C, d)
    W = np.zeros((C, d))
    for c in range(C):
        if c % 7 == 0:
            continue  # empty rows score 0
        idx, val = _x(rng, d, 15)
        val = val - (0.5 if seed == 1 else 0.0)  # seed 1: mostly negative weights
        R.axpy(c, idx, val, 1.0, float(val @ val))
        W[c, idx] += val
    ex = ExactMIPS(R)
    for _ in range(200):
        idx, val = _x(rng, d, int(rng.integers(1, 30)))
        val = np.abs(val)
        s = W[:, idx] @ val
        e = int(rng.integers(-1, C))
        s2 = s.copy()
        if e >= 0:
            s2[e] = -np.inf
        assert ex.query(idx, val, e) == int(np.argmax(s2))   # ties: smallest class, as np.argmax
        cands, sc, m = ex.query_candidates(idx, val, e)
        np.testing.assert_allclose(sc[:m], s, atol=1e-12)
    assert ex.query(np.array([d + 5], dtype=np.int64), np.ones(1), 0) == 1  # unseen feature: all 0


@pytest.mark.parametrize("variant,lam,batch", [("l2", 1e-3, 1), ("l2", 1e-2, 7), ("l2", 3.0, 1), ("l1", 1e-4, 1),
                                               ("l1", 1e-4, 5)])
def test_sparse_learner_equals_dense_learner(variant, lam, batch):
    rng = np.random.default_rng(4)
    C, d = 40, 60
    centers = rng.normal(size=(C, d)) * (rng.random((C, d)) < 0.2)
    out = []
    for kind in ("dense", "sparse"):
        # small lam: smaller steps than the default (eta0=0.1) leave enough hinge-active updates to
        # compare the stores; lam > 1: the default steps drive the lazy scale below 1e-20 (renormalization)
        kw = {} if lam > 1 else {"eta0": 0.1}
        lr = MEMOIR(lam=lam, variant=variant, mips="exact", batch_size=batch, check_every=0, rows=kind, **kw)
        lr.bind(MultiClass(), [])
        r = np.random.default_rng(5)
        for t in range(1500):
            c = int(r.integers(C))
            lr.ensure(d, list(range(max(lr.store.n_rows if lr.store else 0, c + 1))))
            x = centers[c] + 0.3 * r.normal(size=d) * (r.random(d) < 0.1)
            idx = np.flatnonzero(x).astype(np.int64)
            lr.learn(np.array([0, len(idx)]), idx, x[idx], np.array([c]))
        out.append(lr)
    a, b = out
    assert a.kind == "dense" and b.kind == "sparse"
    assert a.acc == b.acc and a.n_updates == b.n_updates and a.n_updates > 100
    np.testing.assert_array_equal(a.store.to_dense()[:, :d], b.store.to_dense()[:, :d])
    np.testing.assert_allclose(a.store.sq, b.store.sq, rtol=1e-12)
    if variant == "l1":
        assert b.store.nnz < C * d
    if lam > 1:   # the lazy scale went below 1e-20 and was folded into the rows, on both
        assert a.n_renorm == b.n_renorm > 0


def _regime_a(n, C, vocab, seed):
    """Bags of +-3 context words from a zipfian vocabulary; the class decides the centre word."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, vocab + 1)
    p = 1.0 / ranks
    p /= p.sum()
    topic = rng.integers(0, vocab, size=(C, 3))
    ys = rng.integers(0, C, size=n)
    ctx = rng.choice(vocab, size=(n, 4), p=p)
    for i, y in enumerate(ys):
        yield {f"w{w}": 1.0 for w in (*ctx[i], *topic[y, :2])}, int(y)


def test_memory_grows_with_nnz_not_classes_times_features():
    C, vocab = 10_000, 50_000
    m = _ext(mips="exact", lam=1e-4, window=0, check_every=0)
    for x, y in _regime_a(20_000, C, vocab, seed=0):
        m.learn_one(x, y)
    lr = m._learner
    assert lr.kind == "sparse"
    st = lr.store
    n_cls, n_feat = st.n_rows, m._features.dim
    assert n_cls > 8000 and n_feat > 20_000
    dense_bytes = n_cls * n_feat * 8
    assert st.nbytes < dense_bytes / 10
    # structurally O(nnz): a bounded number of bytes per stored entry plus per class / feature
    assert st.n_slots <= 2 * 7 * 20_000
    assert st.nbytes <= 4 * 48 * max(st.n_slots, 1024) + 32 * (n_cls + n_feat)
    assert st.nnz > 0.9 * st.n_slots


def test_hashed_sketches_are_linear_and_index_finds_the_best_row():
    rng = np.random.default_rng(7)
    d, C = 200_000, 500
    R = SparseRows(dim=16)
    o = HNSWMIPS(R, 16, k=20, max_dirty=64, capacity=16)
    lsh = LSHMIPS(R, 16, k=64, max_dirty=64)
    assert o.mode == "hash" and o.sketch_dim == 128
    feats = {}
    for c in range(C):                  # classes and features (up to 200k) appear over time
        idx, _ = _x(rng, d, 30)
        feats[c] = idx
        R.ensure(c + 1, int(idx.max()) + 1)
        val = np.abs(rng.normal(size=30)) + 0.5
        R.axpy(c, idx, val, 1.0, float(val @ val))
        o.row_changed(c, idx, val, 1.0)
        lsh.row_changed(c, idx, val, 1.0)
    full = np.zeros((C, 128))
    R.sketch(np.arange(C), 128, o.seed, full)
    np.testing.assert_allclose(o.S[:C], full, atol=1e-9)   # linear maintenance == recomputation
    ex = ExactMIPS(R)
    hits = lhits = 0
    for _ in range(200):
        c = int(rng.integers(C))
        idx = np.sort(rng.choice(feats[c], size=15, replace=False))
        e = ex.query(idx, np.ones(15))
        hits += o.query(idx, np.ones(15)) == e
        lhits += lsh.query(idx, np.ones(15)) == e
    assert hits / 200 >= 0.9 and lhits / 200 >= 0.5
    assert o.stats()["candidates_per_query"] < C / 3
    assert o.staleness()["reindexes"] > 0


def test_sparse_model_new_classes_save_load_and_index_prediction(tmp_path):
    data = list(_regime_a(4000, 300, 5000, seed=3))
    m = _ext(mips="exact", lam=1e-4, seed=0, check_every=20)
    for x, y in data[:3000]:
        m.learn_one(x, y)
    m.save(tmp_path / "s.ssvm")
    m2 = ss.ExtremeClassifier.load(tmp_path / "s.ssvm")
    assert m2._learner.kind == "sparse"
    for x, y in data[3000:]:        # new classes and words keep arriving
        m.learn_one(x, y)
        m2.learn_one(x, y)
    np.testing.assert_array_equal(m._learner.store.to_dense(), m2._learner.store.to_dense())
    h = _ext(mips="hnsw", lam=1e-4, seed=0, check_every=20)
    for x, y in data:
        h.learn_one(x, y)
    assert h._learner.kind == "sparse" and h._learner.oracle.mode == "hash"
    ex = [h.predict_one(x) for x, _ in data[:500]]
    h.predict_with = "index"
    ix = [h.predict_one(x) for x, _ in data[:500]]
    assert np.mean(np.array(ex) == np.array(ix)) > 0.8
    assert np.mean(np.array(ex) == np.array([y for _, y in data[:500]])) > 0.5
    d = h.certificate().extra
    assert d["rows"] == "sparse" and d["recall_at_1"] > 0.5 and d["rows_nbytes"] > 0
