"""``common._dense_scores`` through the vector intrinsic (``_kernels/simd.py``) gives the scalar
accumulators' scores to the bit: every class count across the vector width, rows of other
strides (the scalar path), zeros, empty rows and rows of S other than the first. The same for
CSR rows: ``common.emission_add`` with ``zero`` (``_csr_scores``: ``simd.vec_scores_at``) gives
the loop over the classes with S in memory to the bit."""
import numpy as np
from numba import njit

from streamssvm._kernels.common import _csr_scores_loop, _dense_scores, _dense_scores_scalar, emission_add
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
def _csr_kernel(E, coef, tok_ptr, fidx, fval, L, K, S):
    emission_add(E, coef, tok_ptr, fidx, fval, L, K, S, True)


_class_loop = njit(_csr_scores_loop)   # (the overload's plain-loop choice, compiled alone)


@njit
def _csr_loop(E, coef, tok_ptr, fidx, fval, L, K, S):
    for t in range(L):
        for k in range(K):
            S[t, k] = 0.0
        _class_loop(E, coef, fidx, fval, tok_ptr[t], tok_ptr[t + 1], K, S, t)


def test_csr_vector_scores_equal_the_class_loop_bit_for_bit():
    rng = np.random.default_rng(5)
    for trial in range(300):
        K = 1 + trial % (2 * LANES + 7)
        Kc = K + int(rng.integers(0, 4))
        D = int(rng.integers(1, 300))
        E = rng.normal(size=(D, Kc)) * 10.0 ** rng.uniform(-3, 3)
        L = 1 + trial % 3
        lens = rng.integers(0, D + 1, size=L)   # tokens with no entry included
        tok_ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        fidx = np.concatenate([np.sort(rng.choice(D, n, replace=False)) for n in lens]).astype(np.int32)
        fval = rng.normal(size=fidx.shape[0])
        if trial % 5 == 0:
            fval[::4] = -0.0
        coef = float(rng.uniform(1e-3, 1e3))
        S1 = rng.normal(size=(L, Kc))
        S2 = S1.copy()
        _csr_loop(E, coef, tok_ptr, fidx, fval, L, K, S1)
        if trial % 4 == 0:   # indices of another type: the loop (same values)
            _csr_kernel(E, coef, tok_ptr, fidx.astype(np.int64), fval, L, K, S2)
        else:
            _csr_kernel(E, coef, tok_ptr, fidx, fval, L, K, S2)
        assert S1.tobytes() == S2.tobytes(), (trial, K, Kc, D)
