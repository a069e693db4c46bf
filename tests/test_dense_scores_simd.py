"""``common._dense_scores`` through the vector intrinsic (``_kernels/simd.py``) gives the scalar
accumulators' scores to the bit: every class count across the vector width, rows of other
strides (the scalar path), zeros, empty rows and rows of S other than the first."""
import numpy as np
from numba import njit

from streamssvm._kernels.common import _csr_scores, _dense_scores, _dense_scores_scalar
from streamssvm._kernels.simd import LANES


@njit
def _vector(E, coef, fval, a, b, K, S, t):
    _dense_scores(E, coef, fval, a, b, K, S, t)


@njit
def _scalar(E, coef, fval, a, b, K, S, t):
    _dense_scores_scalar(E, coef, fval, a, b, K, S, t)


def test_vector_scores_equal_the_scalar_accumulators_bit_for_bit():
    rng = np.random.default_rng(3)
    for trial in range(300):
        K = 1 + trial % (2 * LANES + 7)
        Kc = K + int(rng.integers(0, 4))
        d = int(rng.integers(0, 400))
        E = rng.normal(size=(d + 3, Kc)) * 10.0 ** rng.uniform(-3, 3)
        if trial % 4 == 0:
            E = np.asfortranarray(E)          # classes not contiguous: the scalar path
        fval = rng.normal(size=d + 5)
        fval[::3] = 0.0
        if trial % 7 == 0:
            fval[1::5] = -0.0
        a = int(rng.integers(0, 5))
        S1 = rng.normal(size=(3, Kc))
        S2 = S1.copy()
        coef = float(rng.uniform(1e-3, 1e3))
        t = trial % 3
        _scalar(E, coef, fval, a, a + d, K, S1, t)
        _vector(E, coef, fval, a, a + d, K, S2, t)
        assert S1.tobytes() == S2.tobytes(), (trial, K, Kc, d)


@njit
def _csr(E, coef, fidx, fval, a, b, K, S, t):
    _csr_scores(E, coef, fidx, fval, a, b, K, S, t)


def test_csr_vector_scores_equal_the_in_memory_loop_bit_for_bit():
    """``common._csr_scores`` (the CSR rows of ``emission_add`` with ``zero``): the vector of class
    sums (int32 indices, contiguous classes) and the plain loop for other arrays (int64 indices,
    Fortran-ordered E) give the scores of the loop that adds each product into S[t] in order
    from 0.0, to the bit, for every class count across the vector width and empty rows."""
    rng = np.random.default_rng(5)
    for trial in range(200):
        K = 1 + trial % (2 * LANES + 5)
        Kc = K + int(rng.integers(0, 4))
        n = int(rng.integers(1, 300))
        E = rng.normal(size=(n, Kc)) * 10.0 ** rng.uniform(-3, 3)
        nnz = int(rng.integers(0, n + 1))
        fidx = np.sort(rng.choice(n, size=nnz, replace=False)).astype(np.int32)
        if trial % 3 == 0:
            fidx = rng.permutation(fidx)   # any order: the sums follow it
        fval = rng.normal(size=nnz)
        if trial % 5 == 0:
            E = np.asfortranarray(E)
        if trial % 7 == 0:
            fidx = fidx.astype(np.int64)
        coef = float(rng.uniform(1e-3, 1e3))
        t = trial % 3
        S = np.zeros((3, Kc))
        _csr(E, coef, fidx, fval, 0, nnz, K, S, t)
        ref = np.zeros(Kc)
        for k in range(K):
            acc = 0.0
            for p in range(nnz):
                acc += (float(fval[p]) * coef) * float(E[fidx[p], k])
            ref[k] = acc
        assert S[t].tobytes() == ref.tobytes(), (trial, K, Kc, nnz)
        assert not S[np.arange(3) != t].any()
