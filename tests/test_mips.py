"""MIPS oracles against exact search: recall, exclusion, updates visible at once, growth."""
import numpy as np
import pytest

from streamssvm.oracles.mips import ExactMIPS, HNSWMIPS, LSHMIPS
from streamssvm.oracles.rows import DenseRows


def Rows(W):
    """A dense row store over W itself (in-place changes of W are changes of the rows)."""
    R = DenseRows(W.shape[1], capacity=W.shape[0])
    R.V = W
    R.n_rows = W.shape[0]
    return R


def _queries(rng, d, m, nnz=None):
    out = []
    for _ in range(m):
        if nnz is None:
            idx = np.arange(d, dtype=np.int64)
        else:
            idx = np.sort(rng.choice(d, size=nnz, replace=False)).astype(np.int64)
        out.append((idx, rng.normal(size=len(idx))))
    return out


def _recall(oracle, exact, qs, exclude=None):
    hits = 0
    for i, (idx, val) in enumerate(qs):
        ex = -1 if exclude is None else exclude[i]
        hits += oracle.query(idx, val, ex) == exact.query(idx, val, ex)
    return hits / len(qs)


def test_exact_is_exact_and_excludes():
    rng = np.random.default_rng(0)
    W = rng.normal(size=(50, 8))
    ex = ExactMIPS(Rows(W))
    for idx, val in _queries(rng, 8, 20, nnz=3):
        s = W[:, idx] @ val
        assert ex.query(idx, val) == int(np.argmax(s))
        top = int(np.argmax(s))
        s[top] = -np.inf
        assert ex.query(idx, val, top) == int(np.argmax(s))


@pytest.mark.parametrize("cls,kw,min_recall", [(HNSWMIPS, {}, 0.95), (LSHMIPS, {"k": 64}, 0.5)])
def test_recall_on_random_rows(cls, kw, min_recall):
    rng = np.random.default_rng(1)
    C, d = 2000, 32
    W = rng.normal(size=(C, d)) * rng.uniform(0.5, 2.0, size=(C, 1))
    rows = Rows(W)
    o = cls(rows, d, max_dirty=10**9, **kw)
    o.update(range(C))
    o.reindex()
    qs = _queries(rng, d, 200)
    r = _recall(o, ExactMIPS(rows), qs, exclude=rng.integers(0, C, size=200))
    assert r >= min_recall
    assert o.stats()["candidates_per_query"] < C / 10  # sublinear work


@pytest.mark.parametrize("cls", [HNSWMIPS, LSHMIPS])
def test_updates_are_visible_immediately(cls):
    rng = np.random.default_rng(2)
    C, d = 300, 16
    W = rng.normal(size=(C, d))
    rows = Rows(W)
    o = cls(rows, d, max_dirty=10**9)
    o.update(range(C))
    o.reindex()
    idx = np.arange(d, dtype=np.int64)
    val = rng.normal(size=d)
    # make class 7 the clear winner, with a linear update, without re-indexing
    W[7] += 50 * val
    o.row_changed(7, idx, 50 * val, 1.0)
    assert 7 in o.dirty
    assert o.query(idx, val) == 7
    assert o.query(idx, val, exclude=7) == ExactMIPS(rows).query(idx, val, 7) or cls is LSHMIPS
    o.reindex()
    assert not o.dirty and o.query(idx, val) == 7


def test_sketched_index_on_sparse_high_dim_rows_and_growth():
    rng = np.random.default_rng(3)
    d, C = 5000, 400
    W = np.zeros((1000, d))
    for c in range(C):
        feats = rng.choice(d, size=40, replace=False)
        W[c, feats] = rng.normal(size=40) + 1.0
    rows = Rows(W)
    rows.n_rows = C
    o = HNSWMIPS(rows, d, sketch_dim=128, k=20, max_dirty=64, capacity=16)
    o.update(range(C))
    o.reindex()
    exact = ExactMIPS(rows)
    qs = []
    for _ in range(150):
        c = int(rng.integers(C))
        nz = np.flatnonzero(W[c])
        idx = np.sort(rng.choice(nz, size=25, replace=False)).astype(np.int64)
        qs.append((idx, np.ones(25)))
    assert _recall(o, exact, qs) >= 0.85
    # new classes arrive: rows appear, the index grows (resize) and finds them
    for c in range(C, C + 300):
        feats = rng.choice(d, size=40, replace=False)
        W[c, feats] = 3.0
        rows.n_rows = c + 1
        o.update([c])
    assert o.index.get_max_elements() >= C + 300
    idx = np.sort(np.flatnonzero(W[C + 299])).astype(np.int64)
    assert o.query(idx, np.ones(len(idx))) == C + 299
    # the linear sketch update equals recomputing the sketch
    c = 5
    idx, val = qs[0]
    W[c, idx] += 0.3 * val
    o.row_changed(c, idx, val, 0.3)
    np.testing.assert_allclose(o.S[c], W[c] @ o.P, atol=1e-9)


def test_argument_errors():
    with pytest.raises(TypeError, match="row store"):
        ExactMIPS(np.zeros((2, 2)))
    with pytest.raises(TypeError, match="row store"):   # the callable (W, n_rows) adapter is gone
        ExactMIPS(lambda: (np.zeros((2, 2)), 2))
    with pytest.raises(ValueError):
        HNSWMIPS(Rows(np.zeros((2, 2))), 2, k=0)


@pytest.mark.parametrize("cls,reinsert", [(HNSWMIPS, "fresh"), (HNSWMIPS, "replace"), (LSHMIPS, None)])
def test_zero_rows_stay_out_of_the_index_and_rows_move_often(cls, reinsert):
    rng = np.random.default_rng(5)
    C, d = 3000, 12
    W = np.zeros((C, d))
    rows = Rows(W)
    o = cls(rows, d, max_dirty=16, **({"reinsert": reinsert} if reinsert else {}))
    o.add_zero_rows(0, C)             # 3000 classes, all zero: nothing indexed, nothing dirty
    assert not o.dirty and o.known == C
    ex = ExactMIPS(rows)
    idx = np.arange(d, dtype=np.int64)
    for t in range(3000):             # 60 rows move again and again (versioned labels, rebuilds)
        c = int(rng.integers(60)) * 50
        v = rng.normal(size=d)
        W[c] += v
        o.row_changed(c, idx, v, 1.0)
        q = rng.normal(size=d)
        e = int(rng.integers(-1, 3))
        if t % 10 == 0:
            # the zero rows are represented by the smallest one not excluded: negative scores
            # of the moved rows lose to it, exactly as in the full scan
            assert o.query(idx, q, e) == ex.query(idx, q, e) or cls is LSHMIPS
    if reinsert == "fresh":      # versioned labels, tombstones, rebuilds
        st = o.staleness()
        assert st["rebuilds"] > 0 and st["index_live"] <= 60
    elif reinsert == "replace":  # one element per class, re-inserted in place: no tombstone, no rebuild
        st = o.staleness()
        assert st["rebuilds"] == 0 and st["index_deleted"] == 0 and st["index_live"] <= 60
        assert o.index.get_current_count() == st["index_live"] and st["rows_reindexed"] > 1000
    qs = _queries(rng, d, 200)
    assert _recall(o, ex, qs) >= (0.95 if cls is HNSWMIPS else 0.6)


@pytest.mark.parametrize("cls,kw,min_recall", [(HNSWMIPS, {}, 0.95), (LSHMIPS, {"k": 64}, 0.5)])
def test_recall_on_real_data(cls, kw, min_recall):
    """Real vectors: 3000 OCR letter images (centered, with per-row norms varying as class
    weights do) as the rows, 300 other letters as queries. A hit is a returned row whose true
    score equals the exact maximum (ties between identical images count as hits)."""
    from streamssvm.datasets import load_ocr
    X = np.concatenate(load_ocr("large")[0][:800])
    X -= X.mean(0)
    rng = np.random.default_rng(3)
    C = 3000
    W = X[:C] * rng.uniform(0.5, 2.0, size=(C, 1))
    rows = Rows(W)
    o = cls(rows, W.shape[1], max_dirty=10**9, **kw)
    o.update(range(C))
    o.reindex()
    exact = ExactMIPS(rows)
    idx = np.arange(W.shape[1], dtype=np.int64)
    hits = 0
    for q in X[C:C + 300]:
        s = W @ q
        hits += s[o.query(idx, q)] >= s[exact.query(idx, q)] - 1e-9
    assert hits / 300 >= min_recall
    assert o.stats()["candidates_per_query"] < C / 5  # sublinear work


# ------------------------------------------------------------------ float32 BLAS exact scan
def _brute(V, n, idx, val, exclude):
    """float64 argmax over c != exclude, ties to the smallest class (plain numpy)."""
    s = V[:n][:, idx] @ val
    if 0 <= exclude < n:
        s[exclude] = -np.inf
    return int(np.argmax(s)) if np.isfinite(s).any() else -1


@pytest.mark.parametrize("d,nnz", [(64, None), (256, None), (256, 128)])
def test_blas_scan_matches_the_float64_argmax_with_near_ties(d, nnz):
    """Rows built as near-copies of a few bases (differences of 1e-12 .. 1e-7 relative, below
    what float32 resolves) and exact copies (exact ties): the float32 scan alone would pick
    among them at random; re-scoring the candidates in float64 gives the float64 argmax,
    the smallest class among exact ties."""
    from streamssvm.oracles.mips import BlasExactMIPS
    rng = np.random.default_rng(7)
    n = 600
    base = rng.normal(size=(5, d))
    V = base[rng.integers(0, 5, size=n)] * (1.0 + 1e-7 * rng.integers(-3, 4, size=(n, 1)))
    V[::7] += 1e-12 * rng.normal(size=(len(V[::7]), d))
    V[100:110] = V[99]           # exact ties
    V[300:] = rng.normal(size=(n - 300, d)) * 1e-3 + V[99]
    R = Rows(V)
    o = BlasExactMIPS(R)
    ex = ExactMIPS(R)
    cands = []
    for i, (idx, val) in enumerate(_queries(rng, d, 300, nnz)):
        if i % 3 == 0:
            val = np.sign(base[0, idx]) * np.abs(val)     # aim at a base: many near-ties at the top
        exclude = int(rng.integers(-1, n))
        c = o.query(idx, val, exclude)
        assert c == ex.query(idx, val, exclude) == _brute(V, n, idx, val, exclude)
    st = o.stats()
    assert st["blas_queries"] == 300 and st["rescored_per_query"] > 1.0   # the near-ties were re-scored
    # exact ties: the smallest class wins, with or without the excluded one
    idx = np.arange(d)
    val = V[99].copy()
    assert o.query(idx, val, -1) == ex.query(idx, val, -1)
    assert o.query(idx, val, 99) == ex.query(idx, val, 99)


def test_blas_scan_follows_row_changes_growth_and_rescaling():
    """Kept in sync through row_changed (axpy), update (arbitrary change, rescaling), new
    rows and a wider store: every answer equals the float64 scan."""
    from streamssvm.oracles.mips import BlasExactMIPS
    rng = np.random.default_rng(3)
    R = DenseRows(16)
    R.ensure(4, 16)
    o = BlasExactMIPS(R)
    ex = ExactMIPS(R)
    for t in range(3000):
        if t == 500:
            R.ensure(40, 16)
        if t == 1500:
            R.ensure(60, 48)             # wider rows: the mirror is rebuilt
        n, d = R.n_rows, R.V.shape[1]
        dd = 16 if t < 1500 else 48
        idx = np.arange(dd)
        val = rng.normal(size=dd)
        c = int(rng.integers(n))
        a = float(rng.normal()) * 0.1
        R.axpy(c, idx, val, a, float(val @ val))
        o.row_changed(c, idx, val, a)
        if t % 400 == 399:
            R.scale(1e-3)
            o.update(range(n))
        q = rng.normal(size=dd)
        excl = int(rng.integers(-1, n))
        assert o.query(idx, q, excl) == ex.query(idx, q, excl) == _brute(R.V, n, idx, q, excl)


def test_blas_scan_edge_cases():
    from streamssvm.oracles.mips import BlasExactMIPS
    R = DenseRows(4)
    o = BlasExactMIPS(R)
    idx = np.arange(4)
    assert o.query(idx, np.ones(4)) == -1                    # no rows
    R.ensure(1, 4)
    assert o.query(idx, np.ones(4), 0) == -1                 # the only row excluded
    assert o.query(idx, np.ones(4), -1) == 0
    R.ensure(5, 4)
    assert o.query(idx, np.ones(4), 0) == 1                  # zero rows tie: the smallest other one
    # repeated feature indices are summed, as the float64 scan does
    _ = R.axpy(3, np.array([0]), np.array([1.0]), 1.0, 1.0)
    _ = R.axpy(2, np.array([1]), np.array([1.0]), 1.5, 1.0)
    rep = np.array([0, 0, 0, 1, 2, 3])
    v = np.array([1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    assert o.query(rep, v) == ExactMIPS(R).query(rep, v) == 3
    with pytest.raises(TypeError):
        from streamssvm.oracles.rows import SparseRows
        BlasExactMIPS(SparseRows(dim=4))


def test_hnsw_drift_threshold_leaves_small_changes_stale():
    """With drift_tol, a dirty row whose change since its insertion is below drift_tol x its
    norm leaves the dirty set without a re-insertion (its older vector stays in the graph) and
    keeps its drift bound, so it is re-inserted once the changes add up; rows changed through
    update() are always re-inserted. Answers stay exact re-scores of candidates."""
    rng = np.random.default_rng(11)
    C, d = 400, 16
    W = rng.normal(size=(C, d))
    rows = Rows(W)
    o = HNSWMIPS(rows, d, max_dirty=8, drift_tol=0.2)
    o.update(range(C))
    o.reindex()
    base = o.staleness()["rows_reindexed"]
    idx = np.arange(d, dtype=np.int64)
    c = 5
    u = W[c].copy()
    for t in range(8):          # steps of 0.024 x the norm at insertion: 0.192 in all
        v = 0.024 * u
        W[c] += v
        o.row_changed(c, idx, v, 1.0)
        o.reindex()
    st = o.staleness()
    # drift bounds 0.024, 0.048, ..., 0.192: each below 0.2 x the norm at insertion
    assert st["rows_reindexed"] == base and st["rows_left_stale"] == 8
    assert 0.19 * o._inorm[c] < o._drift[c] < 0.2 * o._inorm[c]
    v = W[c] * 0.05
    W[c] += v
    o.row_changed(c, idx, v, 1.0)
    o.reindex()
    st = o.staleness()
    assert st["rows_reindexed"] == base + 1 and o._drift[c] == 0.0
    np.testing.assert_allclose(o.index.get_items([int(o._label[c])])[0], W[c], rtol=1e-6)
    # update(): an arbitrary change is re-inserted whatever its size
    W[7] *= 1.0 + 1e-9
    o.update([7])
    o.reindex()
    assert o.staleness()["rows_reindexed"] == base + 2
    ex = ExactMIPS(rows)
    for idx_, q in _queries(rng, d, 50):
        r = o.query(idx_, q)
        assert r == ex.query(idx_, q) or W[r] @ q <= W[ex.query(idx_, q)] @ q
