"""The multiclass batch fast path: ``predict_learn_many`` on dense arrays scores the batch with one
BLAS product, and the multiclass block steps touch only the classes they move. Both must give the
results of the row-by-row kernels."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels import structops as so


def _batches(seed, n=600, d=40, K=7, bs=64):
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(K, d))
    y = rng.integers(0, K, size=n)
    X = (C[y] + rng.normal(size=(n, d))) / np.sqrt(d)
    X[rng.random(size=X.shape) < 0.3] = 0.0   # some zeros: the CSR skips them, the product does not
    return [(X[i:i + bs], y[i:i + bs]) for i in range(0, n, bs)]


@pytest.mark.parametrize("make", [
    lambda: ss.learners.BCFW(lam=1e-3, seed=0),
    lambda: ss.learners.BCFW(lam=1e-3, seed=0, averaging=False),
    lambda: ss.learners.SGD(lam=1e-3),
    lambda: ss.learners.SGD(lam=1e-3, averaging="none"),
], ids=["bcfw-avg", "bcfw", "sgd-avg", "sgd"])
def test_predict_learn_many_matches_the_kernel_path(make):
    """Predictions of predict_learn_many (BLAS scores) equal the kernel's predict_many made before
    learning the batch, and learning is unchanged (bit-identical weights)."""
    a = ss.MulticlassSSVM(learner=make())
    b = ss.MulticlassSSVM(learner=make())
    for X, y in _batches(0):
        pa = a.predict_learn_many(X, y)
        pb = list(b.predict_many(X))
        assert pa == pb
        b.learn_many(X, y)
    np.testing.assert_array_equal(a._learner.W.E, b._learner.W.E)
    assert a._dense_ids(_batches(1)[0][0]) is not None


def test_multiclass_stat_apply_skips_only_zero_classes():
    """mc_stat_apply (the classes a step moves) equals the dense loop over all K classes (the
    multi-label layout is the same one-token statistic): bit-identical."""
    rng = np.random.default_rng(3)
    K, Kc, d = 9, 12, 30
    for trial in range(20):
        st = np.zeros(Kc)
        st[rng.choice(K, size=int(rng.integers(1, 4)), replace=False)] = rng.normal(size=1)[0]
        fidx = np.sort(rng.choice(d, size=10, replace=False)).astype(np.int32)
        fval = rng.normal(size=10)
        tok = np.array([0, 10], dtype=np.int32)
        E0 = rng.normal(size=(d, Kc))
        E1, E2 = E0.copy(), E0.copy()
        T, B = np.zeros((Kc, Kc)), np.zeros((2, Kc))
        so.stat_apply(so.MULTICLASS, (E1, T, B), (tok, fidx, fval), st, 1, K, Kc, -0.37, False)
        so.stat_apply(so.MULTILABEL, (E2, T, B), (tok, fidx, fval), st, 1, K, Kc, -0.37, False)
        np.testing.assert_array_equal(E1, E2)


def test_dense_csr_equals_encode_tokens():
    """The numba CSR of a dense batch is FeatureIndex.encode_tokens's, array for array, and a
    bad batch gets its errors."""
    rng = np.random.default_rng(5)
    A = rng.normal(size=(17, 9))
    A[rng.random(size=A.shape) < 0.4] = 0.0
    A[3] = 0.0   # an all-zero row: the bias only
    A[4, 2] = -0.0
    m = ss.MulticlassSSVM()
    got = m._dense_csr(A, True)
    ref = m._features.encode_tokens(A, grow=True)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(g, r)
    np.testing.assert_array_equal(m._dense_csr(A.astype(np.int64), True)[2],
                                  m._features.encode_tokens(A.astype(np.int64), grow=True)[2])
    bad = A.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        m._dense_csr(bad, True)
    with pytest.raises(ValueError, match="expected 9 features"):
        m._dense_csr(A[:, :5], True)


def test_scaled_dense_batches_are_scored_by_blas():
    """With online feature scaling (the default) on real-valued rows, predict_learn_many scores
    a dense batch by the BLAS product of the rows divided by ColumnScaler.divisors (the values
    the kernel scores, to the bit): the predictions of the kernel's predict_many made before
    learning the batch, and the weights of learn_many."""
    from unittest import mock
    a, b = ss.MulticlassSSVM(), ss.MulticlassSSVM()
    calls = []
    real = ss.MulticlassSSVM._dense_scores

    def spy(self, A, scaler=None, divided=None):
        calls.append(scaler is not None)
        return real(self, A, scaler, divided)
    with mock.patch.object(ss.MulticlassSSVM, "_dense_scores", spy):
        for X, y in _batches(2):
            X = X * 40.0   # real values on their own scale: the scaler is not the identity
            pa = a.predict_learn_many(X, y)
            pb = list(b.predict_many(X))
            assert pa == pb
            b.learn_many(X, y)
    assert calls and all(calls)
    np.testing.assert_array_equal(a._learner.W.E, b._learner.W.E)
    s = a._scaler
    A = _batches(3)[0][0] * 40.0
    fidx = np.tile(np.arange(1, A.shape[1] + 1, dtype=np.int32), A.shape[0])
    assert (A / s.divisors(A.shape[1] + 1)[1:]).ravel().tobytes() == s.scaled(fidx, A.ravel()).tobytes()
