"""Whether weights are finite, in one pass: the check the stream engine runs after every record
(``Estimator.weights_finite(full=False)``) without the dozen numpy calls (and their temporaries)
of ``np.isfinite(E[rows]).all()`` and friends."""
import numpy as np
from numba import njit

from .common import _JIT


@njit(**_JIT)
def rows_finite(E, rows, T, B):
    """Every value of ``T`` and ``B`` and of the rows ``rows`` of ``E`` (indices outside
    ``0..E.shape[0]-1`` skipped) is finite.

    >>> import numpy as np
    >>> E = np.zeros((3, 2)); E[2, 1] = np.inf
    >>> rows_finite(E, np.array([0, 1], np.int32), np.zeros((2, 2)), np.zeros((2, 2)))
    True
    >>> rows_finite(E, np.array([0, 2, 7], np.int32), np.zeros((2, 2)), np.zeros((2, 2)))
    False
    """
    for a in (T, B):
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                if not np.isfinite(a[i, j]):
                    return False
    n = E.shape[0]
    for r in rows:
        if 0 <= r < n:
            for j in range(E.shape[1]):
                if not np.isfinite(E[r, j]):
                    return False
    return True
