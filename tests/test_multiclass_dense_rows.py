"""Dense-row blocks (``FLAG_DENSE_ROW``): a multiclass row whose non-zeros cover most of features
0..max index is held as its values only (no feature indices). The kernels visit the same terms in
the same order in both layouts, so a learner holding dense rows must give the weights and the
certificate of one holding the same rows sparse, to the bit; saved states must restore and be
validated like sparse ones."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels import bcfw as K
from streamssvm._kernels import common as C
from streamssvm.blocks import BlockStore
from streamssvm.saved_state import validate_store_state
from streamssvm.checkpoint import CheckpointError
from streamssvm.structures import MultiClass
from streamssvm._kernels.common import py_entry


def _rows(seed, n=300, d=24, K_=6, zeros=0.2):
    rng = np.random.default_rng(seed)
    Cm = rng.normal(size=(K_, d))
    y = rng.integers(0, K_, size=n)
    X = (Cm[y] + rng.normal(size=(n, d))) / np.sqrt(d)
    X[rng.random(size=X.shape) < zeros] = 0.0
    X[::7, d // 2:] = 0.0      # every 7th row: the last half zero (dense over a shorter span)
    X[3::11, ::2] = 0.0        # every 11th row: half its values zero (stays sparse)
    return X, y


def _model(dense, scale=True, **kw):
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-3, seed=0, **kw), scale=scale)
    m._bound().store.dense_rows = dense
    return m


def _flags(m):
    st = m._learner.store
    return st.meta[st.slots(), K.M_FLAGS] & C.FLAG_DENSE_ROW


@pytest.mark.parametrize("kw", [{}, {"averaging": False}, {"step": "pairwise", "cache": True},
                                {"rescaling": "slack"}], ids=["fw-avg", "fw", "pairwise-cache", "slack"])
@pytest.mark.parametrize("path", ["batch", "one"])
def test_dense_rows_give_the_sparse_layout_model_to_the_bit(kw, path):
    X, y = _rows(0)
    a, b = _model(True, **kw), _model(False, **kw)
    for m in (a, b):
        if path == "batch":
            for i in range(0, len(y), 64):
                m.predict_learn_many(X[i:i + 64], y[i:i + 64])
        else:
            for x, c in zip(X, y):
                m.learn_one(x, int(c))
        m._learner.refine(passes=2)
    fa, fb = _flags(a), _flags(b)
    assert fa.any() and not fa.all() and not fb.any()   # both layouts in a, none in b
    np.testing.assert_array_equal(a._learner.W.E, b._learner.W.E)
    np.testing.assert_array_equal(a._learner._Z.E, b._learner._Z.E)
    ca, cb = a.certificate(), b.certificate()
    assert (ca.primal, ca.dual, ca.raw_gap) == (cb.primal, cb.dual, cb.raw_gap)
    assert a._learner.store.nbytes() < b._learner.store.nbytes()
    assert a._learner.store.i_live < b._learner.store.i_live


def test_dense_rows_on_the_batch_and_row_paths_are_the_same():
    """learn_many holds the rows as learn_one does (dense where the rule says so, same values)."""
    X, y = _rows(1)
    a, b = _model(True), _model(True)
    a.learn_many(X, y)
    for x, c in zip(X, y):
        b.learn_one(x, int(c))
    np.testing.assert_array_equal(_flags(a), _flags(b))
    sa, sb = a._learner.store, b._learner.store
    for s in sa.slots()[:40]:
        for k in ("fidx", "fval", "gram", "ytrue", "tok_ptr"):
            np.testing.assert_array_equal(sa.block(s)[k], sb.block(s)[k])


def test_dense_block_view_and_compaction_to_more_labels():
    """block() of a dense row gives its features 0..nnz-1 and values; growing the label capacity
    (a compaction) keeps the dense rows and the model equal to the sparse layout's."""
    X, y = _rows(2, K_=12)
    a, b = _model(True, scale=False), _model(False, scale=False)   # blocks hold the raw rows
    for m in (a, b):
        for i in range(0, len(y), 50):   # labels keep arriving: the stores grow their capacity
            m.learn_many(X[i:i + 50], y[i:i + 50])
    np.testing.assert_array_equal(a._learner.W.E, b._learner.W.E)
    st = a._learner.store
    s = int(st.slots()[0])
    blk = st.block(s)
    assert blk["dense_row"]
    x = np.concatenate([[1.0], X[0]])     # the bias is feature 0
    np.testing.assert_array_equal(blk["fidx"], np.arange(len(blk["fval"])))
    np.testing.assert_array_equal(blk["fval"], x[:len(blk["fval"])])
    assert blk["gram"][0, 0] == float(np.sum(x[:len(blk["fval"])] ** 2))


def test_dense_row_state_round_trip_continues_identically():
    X, y = _rows(3)
    a = _model(True)
    a.learn_many(X[:200], y[:200])
    lr = a._learner
    st = lr.state()
    b = ss.learners.BCFW(lam=1e-3, seed=0)
    b.restore(MultiClass(), a._labels.labels, st)
    assert (b.store.meta[b.store.slots(), K.M_FLAGS] & C.FLAG_DENSE_ROW).any()
    assert b.store.dense_rows
    for lrn in (lr, b):
        lrn.refine(passes=3)
    np.testing.assert_array_equal(lr.W.E, b.W.E)
    assert lr.certificate().raw_gap == b.certificate().raw_gap


def _dense_state():
    X, y = _rows(4, n=40)
    m = _model(True)
    m.learn_many(X, y)
    st = m._learner.store
    s = st.state()
    j = int(np.flatnonzero(s["meta"][:, K.M_FLAGS] & C.FLAG_DENSE_ROW)[0])
    return s, j, st.structure, m._learner.W.E.shape[0]


def test_crafted_dense_row_states_are_refused():
    s, j, structure, d = _dense_state()
    validate_store_state(s, structure, n_rows=d)
    # a dense row longer than the weights' rows would make the kernels read past E
    with pytest.raises(CheckpointError, match="dense row of"):
        validate_store_state(s, structure, n_rows=int(s["meta"][j, K.M_NNZ]) - 1)
    # sizes counted as if the block stored indices
    bad = dict(s, meta=s["meta"].copy())
    bad["meta"][j, K.M_ISIZE] += int(bad["meta"][j, K.M_NNZ])
    with pytest.raises(CheckpointError, match="segment sizes"):
        validate_store_state(bad, structure, n_rows=d)
    # the flag on a sparse block of the same sizes: its segment sizes no longer match
    bad = dict(s, meta=s["meta"].copy())
    k = int(np.flatnonzero((s["meta"][:, K.M_FLAGS] & C.FLAG_DENSE_ROW) == 0)[0])
    bad["meta"][k, K.M_FLAGS] |= C.FLAG_DENSE_ROW
    with pytest.raises(CheckpointError, match="segment sizes"):
        validate_store_state(bad, structure, n_rows=d)
    # dense rows are for multiclass blocks only
    ml = ss.structures.MultiLabel()
    alive = s["alive"].copy()
    q = int(np.flatnonzero(alive == j)[0])
    alive[[0, q]] = alive[[q, 0]]   # the dense block checked first
    bad = dict(s, kind=int(ml.kind), alive=alive)
    with pytest.raises(CheckpointError, match="dense row is for one-token multiclass"):
        validate_store_state(bad, ml, n_rows=d)
    # token pointers must cover the values
    bad = dict(s, Iar=s["Iar"].copy())
    bad["Iar"][int(s["meta"][j, K.M_IOFF]) + 1] += 1
    with pytest.raises(CheckpointError, match="token pointers"):
        validate_store_state(bad, structure, n_rows=d)


def test_dense_row_rule():
    span = lambda f: C.dense_row_span(np.asarray(f, dtype=np.int32), 0, len(f))   # noqa: E731
    assert span([0, 1, 2, 3]) == 4
    assert span([0, 1, 3, 5]) == 6          # 4 of 6 non-zero: 48 bytes dense = 48 sparse
    assert span([0, 1, 3, 6]) == -1         # 4 of 7: the sparse pairs are smaller
    assert span([1, 2, 3]) == -1            # not from feature 0
    assert span([0, 2, 1]) == -1            # not increasing (dict rows may come in any order)
    assert span([]) == -1
    assert span([0, 1, 1, 2]) == -1         # a repeated index
    # rows at an offset of a longer array (the kernels' CSR), against the rule in numpy
    rng = np.random.default_rng(11)
    for trial in range(400):
        n = int(rng.integers(0, 12))
        f = np.sort(rng.choice(16, n, replace=False)).astype(np.int32)
        if trial % 3 == 0 and n > 1:
            f[rng.integers(1, n)] = f[rng.integers(0, n)]   # a repeat or a descent
        if trial % 4 == 0 and n:
            f[0] = 0
        pad = rng.integers(0, 16, size=int(rng.integers(0, 4))).astype(np.int32)
        arr = np.concatenate([pad, f, pad]).astype(np.int32)
        a = len(pad)
        ok = n > 0 and f[0] == 0 and 2 * (int(f[-1]) + 1) <= 3 * n and bool(np.all(np.diff(f) > 0))
        assert C.dense_row_span(arr, a, a + n) == (int(f[-1]) + 1 if ok else -1), (trial, f)
    st = BlockStore(MultiClass(), Kc=3)
    assert st.dense_rows and not BlockStore(ss.structures.MultiLabel(), Kc=3).dense_rows


@pytest.mark.parametrize("K_", [1, 3, 8, 13, 21])
def test_dense_kernels_equal_sparse_kernels(K_):
    """emission_add, gram, mc_stat_apply and stat_emission_apply on a dense row (zeros stored)
    equal the sparse CSR of the same row, to the bit."""
    rng = np.random.default_rng(K_)
    n, Kc = 37, K_ + 2
    x = rng.normal(size=n)
    x[rng.random(n) < 0.3] = 0.0
    x[0] = 1.0
    nzi = np.flatnonzero(x).astype(np.int32)
    E = rng.normal(size=(n + 5, Kc))
    tp_s, tp_d = np.array([0, len(nzi)], np.int32), np.array([0, n], np.int32)
    none = np.zeros(0, np.int32)
    S1, S2 = np.zeros((1, Kc)), np.zeros((1, Kc))
    py_entry(C.emission_add)(E, 0.37, tp_s, nzi, x[nzi], 1, K_, S1, True)
    py_entry(C.emission_add)(E, 0.37, tp_d, none, x, 1, K_, S2, True)
    np.testing.assert_array_equal(S1, S2)
    py_entry(C.emission_add)(E, -0.2, tp_s, nzi, x[nzi], 1, K_, S1, False)
    py_entry(C.emission_add)(E, -0.2, tp_d, none, x, 1, K_, S2, False)
    np.testing.assert_array_equal(S1, S2)
    G1, G2 = np.zeros((1, 1)), np.zeros((1, 1))
    py_entry(C.gram)(tp_s, nzi, x[nzi], 1, G1, np.zeros(n + 5))
    py_entry(C.gram)(tp_d, none, x, 1, G2, np.zeros(0))
    assert G1[0, 0] == G2[0, 0]
    from streamssvm._kernels import multiclass as M
    mc_stat_apply, mc_stat_apply2 = py_entry(M.mc_stat_apply), py_entry(M.mc_stat_apply2)
    # each pass of mc_stat_apply2 (1 to 4 classes in registers) and its sequences of passes (4 + 1, 4 + 2,
    # 4 + 3, 4 + 4, 4 + 4 + 1, ...)
    for moved in sorted({min(q, K_) for q in (1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 21)}):
        st = np.zeros(Kc)
        st[rng.choice(K_, size=min(moved, K_), replace=False)] = rng.normal(size=min(moved, K_))
        E1, E2, E3, E4 = E.copy(), E.copy(), E.copy(), E.copy()
        mc_stat_apply(E1, tp_s, nzi, x[nzi], st, K_, -0.7)
        mc_stat_apply(E2, tp_d, none, x, st, K_, -0.7)
        np.testing.assert_array_equal(E1, E2)
        sup = py_entry(C.row_support)(st, 1, K_, Kc)
        py_entry(C.stat_emission_apply)(E3, tp_s, nzi, x[nzi], st, 1, sup, -0.7)
        py_entry(C.stat_emission_apply)(E4, tp_d, none, x, st, 1, sup, -0.7)
        np.testing.assert_array_equal(E3, E4)
        # the fused step update of the weights and the averaging accumulator (both layouts)
        for tp, fi, fv in ((tp_s, nzi, x[nzi]), (tp_d, none, x)):
            E5, Z5 = E.copy(), -E
            mc_stat_apply2(E5, Z5, tp, fi, fv, st, K_, -0.7, 3.1)
            Z1 = -E
            mc_stat_apply(Z1, tp_s, nzi, x[nzi], st, K_, 3.1)
            np.testing.assert_array_equal(E5, E1)
            np.testing.assert_array_equal(Z5, Z1)


@pytest.mark.parametrize("m", [0, 1, 3, 4, 7, 9])
def test_row_sqnorms_are_grams_dense_sums_to_the_bit(m):
    """The batch insert's squared norms, four rows at a time (``common.row_sqnorms``), are the
    in-order sums ``gram`` takes on a dense one-token row, to the bit, for rows of unequal
    lengths (each group's common length, then each row's tail) and batches not a multiple of 4."""
    rng = np.random.default_rng(m)
    lens = rng.integers(0, 40, size=m)
    offs = (np.cumsum(lens) - lens).astype(np.int64)
    F = rng.normal(size=int(lens.sum()) + 1) * 10.0 ** rng.integers(-8, 8, size=int(lens.sum()) + 1)
    out = np.full(m, np.nan)
    py_entry(C.row_sqnorms)(F, offs, lens.astype(np.int64), out)
    for e in range(m):
        G = np.zeros((1, 1))
        py_entry(C.gram)(np.array([0, lens[e]]), np.zeros(0, np.int32), F[offs[e]:offs[e] + lens[e]], 1, G,
                         np.zeros(0))
        assert out[e] == G[0, 0]
        assert out[e] == sum(float(v) * float(v) for v in F[offs[e]:offs[e] + lens[e]])   # in order from 0.0


def test_batch_insert_grams_equal_the_row_path_for_every_block():
    """Every block of a batch (dense rows of several spans, sparse rows) holds the Gram entry the
    record path writes (``write_block``), to the bit."""
    X, y = _rows(2, n=203)
    a, b = _model(True), _model(True)
    a.learn_many(X, y)
    for x, c in zip(X, y):
        b.learn_one(x, int(c))
    fa = _flags(a)
    assert fa.any() and not fa.all()
    sa, sb = a._learner.store, b._learner.store
    for s in sa.slots():
        np.testing.assert_array_equal(sa.block(s)["gram"], sb.block(s)["gram"])


def test_step_update_leaves_the_rows_of_a_dense_rows_zeros_alone():
    """``mc_stat_apply2`` (and ``mc_stat_apply``) on a dense row skip its zeros: the rows of E
    and Z at a zero are not written, exactly as the CSR row (which has no entry there) leaves them -- to the bit, the sign
    of a zero included (a written -0.0 + +0.0 would turn into +0.0)."""
    from streamssvm._kernels import multiclass as M
    apply2 = py_entry(M.mc_stat_apply2)
    x = np.array([1.0, 0.0, 2.5, 0.0, 0.0, -1.5, 0.0, 3.0])
    nzi = np.flatnonzero(x).astype(np.int32)
    for moved in (1, 2, 3, 4, 5, 7):
        st = np.zeros(8)
        st[:moved] = np.linspace(0.5, 2.0, moved)
        results = []
        for tp, fi, fv in ((np.array([0, nzi.size]), nzi, x[nzi]), (np.array([0, x.size]), np.zeros(0, np.int32), x)):
            E, Z = np.full((8, 8), -0.0), np.full((8, 8), -0.0)
            apply2(E, Z, tp, fi, fv, st, 7, 0.5, 2.0)
            E1 = np.full((8, 8), -0.0)   # the update without averaging
            py_entry(M.mc_stat_apply)(E1, tp, fi, fv, st, 7, 0.5)
            np.testing.assert_array_equal(np.signbit(E1), np.signbit(E))
            results.append((E, Z))
        (E1, Z1), (E2, Z2) = results
        for a, b in ((E1, E2), (Z1, Z2)):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(np.signbit(a), np.signbit(b))
        assert np.signbit(E2[x == 0.0]).all() and np.signbit(Z2[x == 0.0]).all()
