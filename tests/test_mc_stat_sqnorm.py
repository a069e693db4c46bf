"""``multiclass.mc_stat_sqnorm`` (a multiclass block step's ||Phi(d)||^2 without the support
arrays) equals ``common.stat_emission_sqnorm`` of ``common.row_support``, to the bit."""
import numpy as np
from numba import njit

from streamssvm._kernels.common import row_support, stat_emission_sqnorm
from streamssvm._kernels.multiclass import mc_stat_sqnorm


@njit
def _both(G, st, K, Kc):
    return mc_stat_sqnorm(G, st, K), stat_emission_sqnorm(G, st, 1, row_support(st, 1, K, Kc))


def test_mc_stat_sqnorm_is_the_support_sum_to_the_bit():
    rng = np.random.default_rng(3)
    specials = np.array([0.0, -0.0, 1e-170, -1e-170, 5e-324, 1e154, -3.5, 1.0 / 3.0])
    for trial in range(400):
        Kc = int(rng.integers(1, 14))
        K = int(rng.integers(1, Kc + 1))
        st = rng.normal(size=Kc) * 10.0 ** rng.integers(-8, 8, size=Kc)
        st[rng.random(Kc) < 0.5] = 0.0
        if trial % 3 == 0:
            st[rng.integers(0, Kc)] = rng.choice(specials)
        if trial % 7 == 0:
            st[:] = 0.0
        g = rng.choice([0.0, 1.0, 784.25, 1e-300, float(rng.random() * 100)])
        a, b = _both(np.array([[g]]), st, K, Kc)
        assert np.float64(a).tobytes() == np.float64(b).tobytes(), (st, K, g, a, b)
