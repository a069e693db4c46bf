"""MEMOIR's averaged prediction by float32 BLAS products over the mirror [V; U = A0 V - Z],
re-scored exactly (issue 22, item 7): the class is the one the float64 scan of both stores
picks (A <V_c, x> - <Z_c, x>, ties to the smallest class), on random rows, near ties below
float32's resolution, exact ties and heavy cancellation between A V and Z; at A == A0 from the
U rows alone; the last-iterate query reusing the averaged query's V product."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels import mips as MK
from streamssvm._kernels import sparse_rows as SK
from streamssvm.oracles.mips import BlasExactMIPS, ExactMIPS
from streamssvm.oracles.rows import DenseRows


def _store(W):
    R = DenseRows(W.shape[1], capacity=W.shape[0])
    R.V = W
    R.n_rows = W.shape[0]
    return R


def _scan(V, Z, n, idx, val, A):
    """MEMOIR's float64 scan before the mirror: both stores' scores, then (s_v A) - s_z."""
    sv, sz = np.zeros(n), np.zeros(n)
    SK.dense_scores_into(V, n, idx, val, sv)
    SK.dense_scores_into(Z, n, idx, val, sz)
    sv *= A
    sv -= sz
    return MK.best_excluding(sv, n, -1)


def _rows(rng, n, d, A, kind):
    base = rng.normal(size=(5, d))
    V = base[rng.integers(0, 5, size=n)] * (1.0 + 1e-7 * rng.integers(-3, 4, size=(n, 1)))
    V[::7] += 1e-12 * rng.normal(size=(len(V[::7]), d))
    V[100:110] = V[99]                                   # exact ties
    if kind == "cancel":
        # Z = A V - (a small average): A V - Z is ~1e-6 of either term
        Z = A * V - 1e-6 * A * rng.normal(size=(n, d))
    else:
        Z = 0.3 * A * V + 1e-9 * rng.normal(size=(n, d))
    Z[100:110] = Z[99]
    return V, Z


@pytest.mark.parametrize("kind", ["plain", "cancel"])
@pytest.mark.parametrize("d,nnz", [(64, None), (256, None), (256, 100)])
def test_averaged_blas_prediction_matches_the_float64_scan(kind, d, nnz):
    rng = np.random.default_rng(11)
    n, A = 500, 37.25
    V, Z = _rows(rng, n, d, A, kind)
    o = BlasExactMIPS(_store(V), average=_store(Z))
    for i in range(200):
        idx = (np.arange(d) if nnz is None else np.sort(rng.choice(d, nnz, replace=False))).astype(np.int64)
        val = rng.normal(size=idx.shape[0])
        if i % 3 == 0:
            val = np.sign(V[0, idx]) * np.abs(val)      # many near-ties at the top
        if i % 17 == 0:
            val = np.ones(idx.shape[0])
        assert o.query_averaged(idx, val, A) == _scan(V, Z, n, idx, val, A)
    st = o.stats()
    assert st["averaged_blas_queries"] == 200 and st["averaged_rescored_per_query"] > 1.0
    # exact ties: the smallest class
    idx = np.arange(d)
    assert o.query_averaged(idx, V[99].copy(), A) == _scan(V, Z, n, idx, V[99].copy(), A)
    # V-only queries still work on the strided mirror
    ex = ExactMIPS(_store(V))
    for _ in range(20):
        q = rng.normal(size=d)
        e = int(rng.integers(-1, n))
        assert o.query(idx, q, e) == ex.query(idx, q, e)


def test_averaged_mirror_follows_changes_and_declines_what_it_cannot_mirror():
    rng = np.random.default_rng(5)
    V, Z = DenseRows(8), DenseRows(8)
    V.ensure(6, 8)
    Z.ensure(6, 8)
    o = BlasExactMIPS(V, average=Z)
    idx = np.arange(8)
    for t in range(600):
        if t == 200:
            V.ensure(30, 8)
            Z.ensure(30, 8)
        if t == 400:
            V.ensure(40, 20)                   # wider: the mirror is rebuilt
            Z.ensure(40, 20)
            idx = np.arange(20)
        n = V.n_rows
        c = int(rng.integers(n))
        x = rng.normal(size=idx.shape[0])
        V.axpy(c, idx, x, 0.1, float(x @ x))
        o.row_changed(c, idx, x, 0.1)
        Z.axpy(c, idx, x, 0.7, float(x @ x))
        o.average_row_changed(c, idx)
        if t % 150 == 149:
            Z.V[:n] *= 0.5                     # every row of Z changed (a fold of the average)
            o.resync()
        q = rng.normal(size=idx.shape[0])
        A = float(t + 1)
        assert o.query_averaged(idx, q, A) == _scan(V.V, Z.V, n, idx, q, A)
    # sparse input and a too-narrow Z: None, the caller scans
    assert o.query_averaged(idx[:1], np.ones(1), 1.0) is None
    Z2 = DenseRows(4)
    Z2.ensure(40, 4)
    assert BlasExactMIPS(V, average=Z2).query_averaged(idx, np.ones(20), 1.0) is None
    # non-finite float32 scores (an overflow float64 does not have, an infinite input): those
    # classes are re-scored, the answer is still the scan's
    n = V.n_rows
    V.V[3, 0], Z.V[5, 1] = 1e30, -1e30
    o.update([3, 5])
    for q in (np.r_[1e10, np.ones(19)], np.r_[1.0, 1e10, np.ones(18)], np.full(20, np.inf), np.r_[-1e10, np.ones(19)]):
        with np.errstate(invalid="ignore", over="ignore"):
            assert o.query_averaged(idx, q, 2.0) == _scan(V.V, Z.V, n, idx, q, 2.0)


def _stream(n=2500, K=120, d=24, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(K, d))
    ys = rng.integers(0, K, size=n)
    return centers[ys] + 0.8 * rng.normal(size=(n, d)), ys


@pytest.mark.parametrize("lam", [1e-6, 2.0])
def test_learner_predictions_and_trajectory_match_the_float64_scan(lam):
    """Same stream, one learner with the mirror, one whose averaged prediction is forced onto
    the float64 scan: identical predictions at every step (progressive validation) and
    bit-identical rows, through new classes, folds of the average and renormalizations
    (lam=2 makes acc fall fast)."""
    X, ys = _stream()
    models, preds = [], []
    for force in (False, True):
        m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact", lam=lam, eta0=1.0))
        p = []
        for i, (x, y) in enumerate(zip(X, ys)):
            p.append(m.predict_one(x))
            m.learn_one(x, int(y))
            if i == 0 and force:
                m._learner._exact.query_averaged = lambda *a: None
        models.append(m)
        preds.append(p)
    a, b = (m._learner for m in models)
    assert preds[0] == preds[1]
    assert a._exact.stats()["averaged_blas_queries"] > 1000
    assert a._exact.stats()["reused_products"] > 1000    # predict_one(x), learn_one(x): one V scan
    np.testing.assert_array_equal(a.store.to_dense(), b.store.to_dense())
    np.testing.assert_array_equal(a.avg.to_dense(), b.avg.to_dense())
    assert a.acc == b.acc and a.avg_A == b.avg_A
    if lam == 2.0:
        assert a.n_renorm > 0


def test_restored_learner_predicts_through_the_mirror(tmp_path):
    X, ys = _stream(n=600, K=30)
    m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact"))
    for x, y in zip(X, ys):
        m.learn_one(x, int(y))
    m.save(tmp_path / "m")
    r = ss.load(tmp_path / "m")
    assert [r.predict_one(x) for x in X[:100]] == [m.predict_one(x) for x in X[:100]]
    assert r._learner._exact.stats()["averaged_blas_queries"] == 100


def _near_tie_average(rng, n, d, A0):
    """V, Z with U = A0 V - Z near-tied below float32's resolution (and exact ties)."""
    V = rng.normal(size=(n, d))
    base = rng.normal(size=(4, d))
    U = base[rng.integers(0, 4, size=n)] * (1.0 + 1e-9 * rng.integers(-3, 4, size=(n, 1)))
    U[50:60] = U[49]
    return V, A0 * V - U


def test_u_rows_answer_alone_at_a_fixed_weight_sum_and_follow_changes():
    """The U-only product (A == A0, e.g. serving): near ties below float32's resolution,
    exact ties, rows changed without A moving, new rows, A moving away and back."""
    rng = np.random.default_rng(3)
    n, d, A0 = 300, 64, 1234.5
    Vw, Zw = _near_tie_average(rng, n, d, A0)
    V, Z = DenseRows(d), DenseRows(d)
    V.ensure(n, d)
    Z.ensure(n, d)
    V.V[:n], Z.V[:n] = Vw, Zw
    o = BlasExactMIPS(V, average=Z)
    idx = np.arange(d)
    f32_wrong = 0
    hold = o.rebuild_after + 3
    for i in range(100 + 4 * hold):
        # then A moves, held for `hold` queries each: A0 + 1, A0 + 2, A0, A0 + 1
        A = A0 if i < 100 else float(A0 + (1 + (i - 100) // hold) % 3)
        q = rng.normal(size=d)
        if i % 4 == 0:
            q = np.sign(Zw[0]) * np.abs(q)
        if i % 10 == 5:                         # a step that does not move A
            c = int(rng.integers(n))
            x = rng.normal(size=d)
            V.axpy(c, idx, x, 0.01, float(x @ x))
            o.row_changed(c, idx, x, 0.01)
            Z.axpy(c, idx, x, 0.01 * A, float(x @ x))
            o.average_row_changed(c, idx)
        if i == 60:                             # a new class
            V.ensure(n + 1, d)
            Z.ensure(n + 1, d)
        m = V.n_rows
        got = o.query_averaged(idx, q, A)
        assert got == _scan(V.V, Z.V, m, idx, q, A)
        if o._A0 == A:
            g = o._M[1, :m] @ q.astype(np.float32)
            f32_wrong += int(np.argmax(g) != got)
    assert o.query_averaged(idx, Vw[0] * 0 + 1.0, A0) == _scan(V.V, Z.V, V.n_rows, idx, np.ones(d), A0)
    st = o.stats()
    assert st["averaged_u_only_queries"] > 90 and st["averaged_rebuilds"] == 5
    assert st["averaged_rescored_per_query"] > 1.0
    assert f32_wrong > 0     # the float32 argmax alone would have been wrong: the re-scoring decides
    # exact ties: the smallest class
    q = rng.normal(size=d)
    Z.V[50:60] = Z.V[49]
    V.V[50:60] = V.V[49]
    o.update(range(49, 60))
    assert o.query_averaged(idx, V.V[49].copy(), A0) == _scan(V.V, Z.V, V.n_rows, idx, V.V[49].copy(), A0)


def test_serving_after_learning_reads_the_u_rows_and_predicts_as_the_scan():
    X, ys = _stream(n=1500, K=60)
    models = []
    for force in (False, True):
        m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact"))
        for x, y in zip(X, ys):
            m.learn_one(x, int(y))
        if force:
            m._learner._exact.query_averaged = lambda *a: None
        models.append(m)
    a, b = models
    assert [a.predict_one(x) for x in X[:300]] == [b.predict_one(x) for x in X[:300]]
    # two predictions per step (A moves every step): both stay the scan's
    for x, y in zip(X[:200], ys[:200]):
        assert a.predict_one(x) == b.predict_one(x) and a.predict_one(x[::-1]) == b.predict_one(x[::-1])
        a.learn_one(x, int(y))
        b.learn_one(x, int(y))
    st = a._learner._exact.stats()
    assert st["averaged_u_only_queries"] >= 290


def test_last_iterate_query_reuses_the_averaged_product_only_for_the_same_x_and_rows():
    rng = np.random.default_rng(8)
    n, d = 200, 32
    V, Z = DenseRows(d), DenseRows(d)
    V.ensure(n, d)
    Z.ensure(n, d)
    V.V[:n], Z.V[:n] = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    o = BlasExactMIPS(V, average=Z)
    ex = ExactMIPS(V)
    idx = np.arange(d)
    reused = 0
    for t in range(300):
        q = rng.normal(size=d)
        o.query_averaged(idx, q, float(t + 1))        # A moves: both blocks are read
        k = t % 4
        if k == 1:                                    # a changed row: no reuse
            c = int(rng.integers(n))
            V.axpy(c, idx, q, 5.0, float(q @ q))
            o.row_changed(c, idx, q, 5.0)
        elif k == 2:
            q = q.copy()
            q[3] += 1e-3                              # another x: no reuse
        elif k == 3:
            V.ensure(V.n_rows + 1, d)                 # a new row: no reuse
            V.V[V.n_rows - 1] = q
            Z.ensure(V.n_rows, d)
        e = int(rng.integers(-1, V.n_rows))
        assert o.query(idx, q, e) == ex.query(idx, q, e)
        reused += k == 0
        assert o.stats()["reused_products"] == reused
