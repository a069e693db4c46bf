"""The per-record arithmetic of online feature scaling (:mod:`streamssvm.scaling`) in one pass:
a record's values divided by their columns' running RMS, and the statistics taking a learned
row, without the two dozen numpy calls (and temporaries) the vectorized form costs per record.
Same IEEE operations in the same order as the vectorized form: the results are identical."""
import math

import numpy as np
from numba import njit

from .common import _JIT

#: the bias column (``streamssvm.features.BIAS``), never scaled
BIAS = 0


@njit(**_JIT)
def scale_values(sumsq, count, fidx, fval, out):
    """``out[i] = fval[i] / rms(fidx[i])``, rms = sqrt(sumsq / count) of the column, 1 for the
    bias, for a column outside the statistics or not seen yet, and where it is 0 or not finite.

    >>> import numpy as np
    >>> out = np.empty(3)
    >>> scale_values(np.array([0.0, 4.0, 0.0]), np.array([0.0, 1.0, 0.0]), np.array([0, 1, 7]),
    ...              np.array([3.0, 6.0, 5.0]), out)
    >>> out.tolist()
    [3.0, 3.0, 5.0]
    """
    m = sumsq.shape[0]
    for i in range(fval.shape[0]):
        c = fidx[i]
        r = 1.0
        if c != BIAS and 0 <= c < m and count[c] > 0:
            q = math.sqrt(sumsq[c] / count[c])
            if q > 0 and np.isfinite(q):
                r = q
        out[i] = fval[i] / r


@njit(**_JIT)
def learn_values(sumsq, count, fidx, fval, out):
    """The statistics take one row (distinct columns, all inside the statistics): each non-zero,
    non-bias value adds its square and a count; then ``out`` = the row scaled by them."""
    for i in range(fval.shape[0]):
        c = fidx[i]
        v = fval[i]
        if c != BIAS and v != 0.0:
            sumsq[c] += v * v
            count[c] += 1.0
    scale_values(sumsq, count, fidx, fval, out)


@njit(**_JIT)
def learn_rows(sumsq, count, tok_ptr, fidx, fval, out):
    """:func:`learn_values` of the rows ``tok_ptr`` of a CSR batch, in order (each row scaled by
    the statistics that include it, as learned one by one)."""
    for r in range(tok_ptr.shape[0] - 1):
        a, b = tok_ptr[r], tok_ptr[r + 1]
        learn_values(sumsq, count, fidx[a:b], fval[a:b], out[a:b])
