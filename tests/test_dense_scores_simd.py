"""``common._dense_scores`` through the vector intrinsic (``_kernels/simd.py``) gives the scalar
accumulators' scores to the bit: every class count across the vector width, rows of other
strides (the scalar path), zeros, empty rows and rows of S other than the first."""
import numpy as np
from numba import njit

from streamssvm._kernels.common import _dense_scores, _dense_scores_scalar
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
