"""``layout.square_view``: the d x d view of a float arena segment that ``block_views`` and
``block_gram`` give the kernels as a block's Gram matrix, built in place instead of through
numba's ``reshape`` (a C call on every call). The same array as the reshape: shape, strides,
values, the same memory (writes go through), and it keeps the arena alive."""
import gc

import numpy as np
import pytest
from numba import njit

from streamssvm._kernels.layout import square_view


@njit
def _view(a, lo, d):
    return square_view(a[lo:lo + d * d], d)


@njit
def _reshaped(a, lo, d):
    return a[lo:lo + d * d].reshape((d, d))


@njit
def _write(a, lo, d, i, k, v):
    G = square_view(a[lo:lo + d * d], d)
    G[i, k] = v


@pytest.mark.parametrize("d", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("lo", [0, 7])
def test_square_view_is_the_reshape(d, lo):
    a = np.arange(60.0)
    got, want = _view(a, lo, d), _reshaped(a, lo, d)
    assert got.shape == want.shape == (d, d) and got.flags.c_contiguous
    if d:   # (an empty view's strides are C's, (0, 8); the reshape's (8, 8): nothing reads them)
        assert got.strides == want.strides
    np.testing.assert_array_equal(got, want)
    if d:
        assert np.shares_memory(got, a) and got.__array_interface__["data"][0] == a[lo:].ctypes.data


def test_square_view_writes_through_to_the_arena():
    a = np.zeros(20)
    _write(a, 4, 3, 1, 2, 7.5)
    assert a[4 + 1 * 3 + 2] == 7.5 and np.count_nonzero(a) == 1


def test_square_view_keeps_the_arena_alive():
    G = _view(np.arange(30.0), 5, 4)   # the arena's only reference is the view's
    gc.collect()
    np.testing.assert_array_equal(G, np.arange(5.0, 21.0).reshape(4, 4))


def test_square_view_takes_only_a_contiguous_1d_array():
    from numba.core.errors import TypingError

    @njit
    def strided(a):
        return square_view(a[::2], 2)

    with pytest.raises(TypingError):
        strided(np.arange(10.0))
