"""Dense batches learned from their rows (issue 22, 784-d image batches): ``predict_learn_many`` /
``learn_many`` of a 2-D numpy array validate it without writing its CSR
(``FeatureIndex.check_dense``), and BCFW writes its blocks from the rows themselves, scaling them
on the way (``BlockStore.write_dense``, ``bcfw.insert_dense_rows``). The same model as the CSR
path (a list of rows, ``FeatureIndex.dense_csr`` then ``ColumnScaler.learn_scaled`` and
``BlockStore.write_new``), to the bit: predictions, weights, statistics, store arenas."""
import pickle

import numpy as np
import pytest

import streamssvm as ss
from streamssvm import checkpoint
from streamssvm._kernels import bcfw as K
from streamssvm._kernels import common as C
from streamssvm.blocks import BlockStore
from streamssvm.features import FeatureIndex
from streamssvm.scaling import ColumnScaler
from streamssvm.structures import MultiClass


def _rows(seed, n=420, d=30, K=6, zeros=0.35):
    """Rows of every kind the store tells apart: mostly dense, dense over a short span (the last
    columns zero), sparse (half the columns zero), all zero; negative zeros, values on very
    different scales, a tiny one; labels arriving one by one (the batches' cuts)."""
    rng = np.random.default_rng(seed)
    Cm = rng.normal(size=(K, d))
    y = rng.integers(0, K, size=n)
    y[:K] = np.arange(K)[::-1]
    X = (Cm[y] + rng.normal(size=(n, d))) * rng.choice([1e-3, 1.0, 40.0], size=d)
    X[rng.random(size=X.shape) < zeros] = 0.0
    X[::7, d // 2:] = 0.0          # dense over a shorter span
    X[3::11, ::2] = 0.0            # stays sparse
    X[5::13] = 0.0                 # no feature at all
    X[2::9, 1] = -0.0              # a negative zero: no entry of the CSR
    X[4::17, 3] = 1e-300           # tiny: scaled to a subnormal or zero
    return X, y


def _model(scale=True, dense_rows=True, **kw):
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-3, seed=0, **kw), scale=scale)
    m._bound().store.dense_rows = dense_rows
    return m


def _saved(m):
    """The saved state without the temperature fit's (a dense batch's rows are scored for it
    by a BLAS product, a list's by the record kernel: the same scores to rounding, compared in
    _assert_same)."""
    st = dict(m.state())
    st.pop("calibration", None)
    tree, arrays = checkpoint._split(st)
    return repr(tree), {k: np.ascontiguousarray(v).tobytes() for k, v in arrays.items()}


def _assert_same(a, b):
    la, lb = a._learner, b._learner
    np.testing.assert_array_equal(la.W.E, lb.W.E)
    np.testing.assert_array_equal(la._Z.E, lb._Z.E)
    sa, sb = la.store, lb.store
    for name in ("i_used", "f_used", "n_slots", "max_L", "any_gram_free"):
        assert getattr(sa, name) == getattr(sb, name), name
    np.testing.assert_array_equal(sa.meta[:sa.n_slots], sb.meta[:sb.n_slots])
    assert sa.Iar[:sa.i_used].tobytes() == sb.Iar[:sb.i_used].tobytes()
    assert sa.Far[:sa.f_used].tobytes() == sb.Far[:sb.f_used].tobytes()
    if a._scaler is not None:
        assert a._scaler.sumsq.tobytes() == b._scaler.sumsq.tobytes()   # the same length too
        assert a._scaler.count.tobytes() == b._scaler.count.tobytes()
    assert _saved(a) == _saved(b)
    assert pickle.dumps(a._scaler) == pickle.dumps(b._scaler)
    ta, tb = a._temperature, b._temperature
    assert (ta is None) == (tb is None)
    if ta is not None:
        assert (ta.n_offered, ta.n_observed, ta.n_fits) == (tb.n_offered, tb.n_observed, tb.n_fits)
        assert ta.beta == pytest.approx(tb.beta, rel=1e-9)


@pytest.mark.parametrize("scale", [True, False], ids=["scaled", "raw"])
@pytest.mark.parametrize("dense_rows", [True, False], ids=["dense-rows", "sparse-rows"])
@pytest.mark.parametrize("kw", [{}, {"averaging": False}, {"capacity": 150}, {"rescaling": "slack"},
                                {"replay": 0}], ids=["fw-avg", "fw", "fifo-evicting", "slack", "no-replay"])
def test_rows_learned_from_the_array_equal_their_csr(scale, dense_rows, kw):
    X, y = _rows(0)
    a, b = _model(scale, dense_rows, **kw), _model(scale, dense_rows, **kw)
    for i in range(0, len(y), 64):
        pa = a.predict_learn_many(X[i:i + 64], y[i:i + 64])          # the rows themselves
        pb = b.predict_learn_many(list(X[i:i + 64]), y[i:i + 64])    # a list: through the CSR
        assert list(pa) == list(pb)
    _assert_same(a, b)
    st = a._learner.store
    flags = st.meta[st.slots(), K.M_FLAGS] & C.FLAG_DENSE_ROW
    assert (flags.any() and not flags.all()) if dense_rows else not flags.any()
    a._learner.refine(passes=1)
    b._learner.refine(passes=1)
    _assert_same(a, b)


def test_learn_many_and_other_dtypes_and_layouts():
    """learn_many takes the same path; integer and Fortran-ordered arrays are converted first."""
    X, y = _rows(1)
    Xi = np.round(np.abs(X) * 3).astype(np.uint8)
    for Xa in (X, np.asfortranarray(X), Xi, X[:, ::-1].copy()[:, ::-1]):
        a, b = _model(), _model()
        for i in range(0, len(y), 100):
            a.learn_many(Xa[i:i + 100], y[i:i + 100])
            b.learn_many([r.astype(np.float64) for r in Xa[i:i + 100]], y[i:i + 100])
        _assert_same(a, b)


def test_store_write_dense_equals_write_new_of_the_csr():
    """BlockStore.write_dense writes write_new's segments, meta rows and bookkeeping, and the
    scaler's statistics take the rows as learn_scaled takes their CSR."""
    X, y = _rows(2, n=90)
    fi = FeatureIndex()
    nnz, last, none = fi.check_dense(X, True)
    assert none is None
    tok_ptr, fidx, fval = fi.dense_csr(X, False)
    np.testing.assert_array_equal(np.diff(tok_ptr), nnz)
    np.testing.assert_array_equal([f[-1] - 1 for f in np.split(fidx, tok_ptr[1:-1])], last)
    span = np.empty(len(y), np.int64)
    C.dense_row_spans(np.arange(len(y) + 1, dtype=np.int64), tok_ptr.astype(np.int64), fidx, span)
    np.testing.assert_array_equal(C.dense_spans(nnz, last), span)
    assert (span > 0).any() and (span < 0).any()
    ys = (y % 4).astype(np.int32)
    for scaled in (True, False):
        sa, sb = ColumnScaler(), ColumnScaler()
        warm = np.abs(X[:5]) + 0.5   # statistics from earlier rows
        for s in (sa, sb):
            t, fi2, fv2 = FeatureIndex().dense_csr(warm, True)
            s.learn_scaled(fi2, fv2, t)
        va = sb.learn_scaled(fidx, fval, tok_ptr) if scaled else fval
        A, B = BlockStore(MultiClass(), Kc=5, avg=True), BlockStore(MultiClass(), Kc=5, avg=True)
        for st in (A, B):   # a slot to reuse, as after an eviction
            st.free.append(0)
            st.n_slots = 1
        mark = np.zeros(X.shape[1] + 1)
        scaling = sa.statistics(int(last.max()) + 2) if scaled else None
        s1 = A.write_dense(X, nnz, last, ys, mark, scaling)
        s2 = B.write_new(np.arange(len(y) + 1), tok_ptr, fidx, va, np.arange(len(y) + 1), ys,
                         np.ones(len(y), np.int64), mark)
        np.testing.assert_array_equal(s1, s2)
        assert (A.i_used, A.f_used, A.n_slots, A._seen) == (B.i_used, B.f_used, B.n_slots, B._seen)
        np.testing.assert_array_equal(A.meta[:A.n_slots], B.meta[:B.n_slots])
        np.testing.assert_array_equal(A.birth[:A.n_slots], B.birth[:B.n_slots])
        assert A.Iar[:A.i_used].tobytes() == B.Iar[:B.i_used].tobytes()
        assert A.Far[:A.f_used].tobytes() == B.Far[:B.f_used].tobytes()
        assert sa.sumsq.tobytes() == sb.sumsq.tobytes() and sa.count.tobytes() == sb.count.tobytes()


@pytest.mark.parametrize("bad, msg", [(np.nan, "NaN or infinite"), (np.inf, "NaN or infinite"),
                                      (1e300, "MAX_ABS_VALUE")])
def test_a_bad_dense_batch_raises_the_csr_error_and_changes_nothing(bad, msg):
    X, y = _rows(3, n=64)
    a = _model()
    a.predict_learn_many(X[:32], y[:32])
    before = _saved(a)
    Xb = X[32:].copy()
    Xb[20, 4] = bad
    for call in (a.predict_learn_many, a.learn_many):
        with pytest.raises(ValueError, match=msg):
            call(Xb, y[32:])
        assert _saved(a) == before
    # NaN wins over a too-large value met first, as in dense_csr
    Xc = X[32:].copy()
    Xc[1, 1], Xc[30, 2] = 1e300, np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        a.predict_learn_many(Xc, y[32:])
    with pytest.raises(ValueError, match="expected 30 features"):
        a.predict_learn_many(X[32:, :20], y[32:])
    assert _saved(a) == before


def test_learners_without_dense_rows_learn_the_csr():
    """SGD (no learn_dense_rows) and a BCFW store bounded by bytes (no one-call batch) get the
    CSR of the rows: the models of the list path."""
    X, y = _rows(4)
    for make in (lambda: ss.learners.SGD(lam=1e-3), lambda: ss.learners.BCFW(lam=1e-3, seed=0, max_bytes=200_000)):
        a, b = ss.MulticlassSSVM(learner=make()), ss.MulticlassSSVM(learner=make())
        for i in range(0, len(y), 64):
            assert list(a.predict_learn_many(X[i:i + 64], y[i:i + 64])) == \
                list(b.predict_learn_many(list(X[i:i + 64]), y[i:i + 64]))
        np.testing.assert_array_equal(a._learner.W.E, b._learner.W.E)
        assert _saved(a) == _saved(b)


def test_the_validating_pass_divides_as_numpy_and_predicts_as_before():
    """check_dense's divided rows are numpy's X / q to the bit (subnormal, huge and tiny
    quotients included), and predict_learn_many's scores from them are those of dividing X."""
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(50, 40)) * np.exp(rng.uniform(-700, 27, size=(50, 40)))   # |v| < 1e12
    X[rng.random(X.shape) < 0.3] = 0.0
    X[0, :3] = [-0.0, 5e-324, -1e-310]
    q = np.exp(rng.uniform(-30, 30, size=40))
    nnz, last, divided = FeatureIndex().check_dense(X, True, divide_by=q)
    assert divided.tobytes() == (X / q).tobytes()
    Xs, y = _rows(6, n=256)
    m = _model()
    m.predict_learn_many(Xs[:128], y[:128])
    Q = m._scaler.divisors(Xs.shape[1] + 1)[1:]
    assert not (Q == 1.0).all()
    div = m._dense_batch(Xs[128:], y[128:], m._scaler)[3]
    assert div.tobytes() == (Xs[128:] / Q).tobytes()
    np.testing.assert_array_equal(m._dense_ids(Xs[128:], m._scaler, div), m._dense_ids(Xs[128:], m._scaler))
    assert m._dense_batch(np.asfortranarray(Xs[128:]), y[128:], m._scaler)[3] is None   # a copy: divided later
