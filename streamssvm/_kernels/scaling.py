"""The per-record arithmetic of online feature scaling (:mod:`streamssvm.scaling`) in one pass:
a record's values divided by their columns' running RMS, and the statistics taking a learned
row, without the two dozen numpy calls (and temporaries) the vectorized form costs per record.
Same IEEE operations in the same order as the vectorized form: the results are identical."""
import math

import numpy as np
from numba import njit

from .common import _INNER, _JIT

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


@njit(**dict(_JIT, error_model="numpy"))   # 0 / 0 is NaN here, no exception
def learn_rows_dense(sumsq, count, tok_ptr, fidx, fval, out, row, rs):
    """:func:`learn_rows` through a dense scratch row, for batches whose rows fill most of the
    columns ``0..D - 1`` (``D = row.shape[0]``, every index below it; ``row`` zero, left zero;
    ``rs`` scratch of D): each row is scattered into ``row``, the statistics of every column take
    it in one branch-free pass (a zero adds an exact +0 to the sum of squares and to the count,
    changing neither), its RMS divisors are computed for all columns at once (the same IEEE
    square root and divisions, so the compiler can vectorize them), and its values are divided
    by them. The same values and statistics as :func:`learn_rows`, to the bit.

    >>> import numpy as np
    >>> tp, fi, fv = np.array([0, 3, 5]), np.array([0, 1, 3, 0, 3], np.int32), np.array([1.0, 2.0, 4.0, 1.0, 2.0])
    >>> s1, n1, o1 = np.zeros(4), np.zeros(4), np.empty(5)
    >>> s2, n2, o2 = np.zeros(4), np.zeros(4), np.empty(5)
    >>> learn_rows(s1, n1, tp, fi, fv, o1); learn_rows_dense(s2, n2, tp, fi, fv, o2, np.zeros(4), np.empty(4))
    >>> o2.tolist(), o1.tolist() == o2.tolist(), s1.tolist() == s2.tolist(), n1.tolist() == n2.tolist()
    ([1.0, 1.0, 1.0, 1.0, 0.6324555320336759], True, True, True)
    """
    D = row.shape[0]
    rs[BIAS] = 1.0
    for r in range(tok_ptr.shape[0] - 1):
        a, b = tok_ptr[r], tok_ptr[r + 1]
        for p in range(a, b):
            row[fidx[p]] = fval[p]
        for c in range(BIAS + 1, D):
            v = row[c]
            s = sumsq[c] + v * v
            k = count[c] + (1.0 if v != 0.0 else 0.0)
            sumsq[c] = s
            count[c] = k
            q = math.sqrt(s / k)   # 0 / 0 (a column not seen yet) is NaN: scale 1
            rs[c] = q if 0.0 < q < np.inf else 1.0
        for p in range(a, b):
            out[p] = fval[p] / rs[fidx[p]]
            row[fidx[p]] = 0.0


@njit(**dict(_INNER, error_model="numpy"))   # 0 / 0 (a column not seen yet) is NaN here
def learn_dense_row(sumsq, count, a, out, scale):
    """The values ``a`` of a dense row's columns (``sumsq`` / ``count``: those columns'
    statistics, aligned with ``a``; never the bias) learned into the statistics, and ``out`` =
    the row scaled by them, zeros as +0.0: the values of :func:`learn_rows_dense` (and
    :func:`learn_rows`) of the row's CSR, written at their columns (a CSR holds no zero), to the
    bit; one branch-free pass over contiguous arrays. ``scale`` False: ``out`` = ``a``, zeros as
    +0.0, the statistics untouched."""
    n = a.shape[0]
    if not scale:
        for c in range(n):
            v = a[c]
            out[c] = v if v != 0.0 else 0.0
        return
    for c in range(n):
        v = a[c]
        s = sumsq[c] + v * v   # a zero adds an exact +0 to both sums, changing neither
        k = count[c] + (1.0 if v != 0.0 else 0.0)
        sumsq[c] = s
        count[c] = k
        q = math.sqrt(s / k)
        r = q if 0.0 < q < np.inf else 1.0
        out[c] = v / r if v != 0.0 else 0.0


from .common import guard_inner as _guard_inner  # noqa: E402 (last: it sees every kernel above)

_guard_inner(globals())   # a Python call of an _INNER kernel raises (common.InnerKernel)
