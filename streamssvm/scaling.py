"""Online feature scaling: each column divided by the running root mean square of its non-zero
values.

Why this statistic (and not the mean / variance standardization of, e.g., scikit-learn's
``StandardScaler``):

* **sparse rows stay sparse.** Centering subtracts the mean from every zero of a column, so a
  sparse dict row would become dense; a pure rescaling keeps the zeros zero, whatever the input.
* **indicator features are unchanged, to the bit.** The statistic is taken over a column's
  non-zero occurrences only, so a 0/1 column (OCR pixels, a word's presence, a one-hot category)
  has RMS exactly 1 and keeps its values; over all rows it would be ``sqrt(frequency)`` and would
  boost rare words. What changes are columns of real values on their own scale (a column near
  10^3 next to columns near 1), which is what hurts a single regularized weight vector.
* **no pass ahead.** It is updated example by example, on learning only (a prediction, a
  refinement or a certificate never changes it), so a stream needs nothing up front.

The learner's stored examples hold their features as scaled when they were learned: the
certificate of :meth:`streamssvm.estimators.base.Estimator.certificate` is a bound for those, as
held. A column's scale moves less and less as it is seen (the RMS of n values moves by O(1/n)),
so the weights and the scale of a prediction agree after a short warm-up.

>>> import numpy as np
>>> s = ColumnScaler()
>>> s.learn_scaled(np.array([0, 1, 2], np.int32), np.array([1.0, 1.0, 1000.0])).tolist()
[1.0, 1.0, 1.0]
>>> s.learn_scaled(np.array([0, 1, 2], np.int32), np.array([1.0, 1.0, 3000.0])).round(3).tolist()
[1.0, 1.0, 1.342]
>>> s.scaled(np.array([0, 2, 7], np.int32), np.array([1.0, 1000.0, 5.0])).round(3).tolist()
[1.0, 0.447, 5.0]
"""
from __future__ import annotations

import numpy as np

from ._kernels.scaling import learn_rows, learn_rows_dense, learn_values, scale_values
from .features import BIAS


class ColumnScaler:
    """Per-column running sum of squares and count of the non-zero values a model learned.

    Column :data:`~streamssvm.features.BIAS` (the constant 1 every example carries) is never
    scaled; a column not seen in learning yet keeps its values (scale 1).
    """

    def __init__(self):
        self.sumsq = np.zeros(0, dtype=np.float64)
        self.count = np.zeros(0, dtype=np.float64)

    def _grow(self, dim):
        if dim > self.sumsq.shape[0]:
            n = max(dim, 2 * self.sumsq.shape[0], 16)
            self.sumsq = np.concatenate([self.sumsq, np.zeros(n - self.sumsq.shape[0])])
            self.count = np.concatenate([self.count, np.zeros(n - self.count.shape[0])])

    def statistics(self, dim):
        """The ``(sumsq, count)`` arrays themselves, grown to hold columns ``0..dim - 1``: for a
        kernel that scales and learns records in place (``BCFW.predict_learn_run``) with
        :func:`~streamssvm._kernels.scaling.scale_values` and
        :func:`~streamssvm._kernels.scaling.learn_values`, as :meth:`scaled` and
        :meth:`learn_scaled` would record by record."""
        if dim > self.sumsq.shape[0]:   # (the record path: one call, no growth, most of the time)
            self._grow(dim)
        return self.sumsq, self.count

    def scaled(self, fidx, fval):
        """``fval`` of the columns ``fidx`` divided by their RMS (a new array); changes nothing."""
        out = np.empty(fval.shape[0], dtype=np.float64)
        if fval.shape[0]:
            scale_values(self.sumsq, self.count, fidx, fval, out)
        return out

    def divisors(self, dim):
        """The divisor of each column ``0..dim - 1`` as :meth:`scaled` takes it (its RMS; 1 for the
        bias, for a column not seen yet or outside the statistics, and where the RMS is 0 or not
        finite): ``fval / divisors(dim)[fidx]`` is :meth:`scaled` to the bit (the same IEEE
        square root and divisions), so a dense batch is scaled by one broadcast division.

        >>> s = ColumnScaler(); _ = s.learn_scaled(np.array([0, 2], np.int32), np.array([1.0, 3.0]))
        >>> s.divisors(4).tolist()
        [1.0, 1.0, 3.0, 1.0]
        """
        r = np.ones(dim, dtype=np.float64)
        m = min(dim, self.sumsq.shape[0])
        c = self.count[:m]
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.sqrt(self.sumsq[:m] / c)
        ok = (c > 0) & (q > 0) & np.isfinite(q)
        if m > BIAS:
            ok[BIAS] = False
        r[:m][ok] = q[ok]
        return r

    def is_identity(self, fidx, fval):
        """Whether scaling leaves these values (of any rows) as they are, before and after
        learning them: every non-zero value is +-1 and every column they touch has RMS exactly 1
        so far (0/1 indicators: OCR pixels, one-hot words), which learning them keeps. The first
        values are checked alone first: a batch of other numbers is refused after a few hundred
        of them, not five passes over all (0.8 us per 784-d row).

        >>> s = ColumnScaler()
        >>> s.is_identity(np.array([1, 2], np.int32), np.array([1.0, 0.5])), s.is_identity(np.array([1], np.int32), np.ones(1))
        (False, True)
        """
        head = fval[:256]
        if not np.all((head * head == 1.0) | (head == 0.0)):
            return False
        if not np.all((fval * fval == 1.0) | (fval == 0.0)):
            return False
        cols = fidx[fidx < self.sumsq.shape[0]]
        return bool(np.array_equal(self.sumsq[cols], self.count[cols]))

    def learn_scaled(self, fidx, fval, tok_ptr=None):
        """Record the values of the rows ``tok_ptr`` (one row when None; a row's columns are
        distinct, as the encoding writes them) in order, each row scaled by the statistics
        that include it: a batch gives the arrays (and statistics) of its rows learned one by one."""
        fidx = np.asarray(fidx)
        fval = np.asarray(fval, dtype=np.float64)
        if fval.shape[0]:
            self._grow(int(fidx.max()) + 1)
        if tok_ptr is None:
            return self._learn_row(fidx, fval)
        if self.is_identity(fidx, fval):   # +-1 values: each adds exactly 1 to both sums, in any order
            keep = (fidx != BIAS) & (fval != 0.0)
            np.add.at(self.sumsq, fidx[keep], 1.0)
            np.add.at(self.count, fidx[keep], 1.0)
            return fval.copy()
        out = np.empty(fval.shape[0], dtype=np.float64)
        tok_ptr = np.asarray(tok_ptr, dtype=np.int64)
        D = int(fidx.max()) + 1 if fval.shape[0] else 0
        if 2 * fval.shape[0] >= D * (tok_ptr.shape[0] - 1):   # rows at least half full: same values, faster
            learn_rows_dense(self.sumsq, self.count, tok_ptr, fidx, fval, out, np.zeros(D), np.empty(D))
        else:
            learn_rows(self.sumsq, self.count, tok_ptr, fidx, fval, out)
        return out

    def learn_row(self, fidx, fval, dim):
        """:meth:`learn_scaled` of one row (an int32 ``fidx`` and a float64 ``fval``) whose
        columns are below ``dim``: the same statistics and values, without looking for the
        row's largest column."""
        self._grow(dim)
        return self._learn_row(fidx, fval)

    def _learn_row(self, cols, vals):
        out = np.empty(vals.shape[0], dtype=np.float64)
        learn_values(self.sumsq, self.count, cols, vals, out)
        return out

    # ------------------------------------------------------------------ persistence
    def state(self):
        n = int(np.flatnonzero(self.count)[-1]) + 1 if np.any(self.count) else 0
        return {"sumsq": self.sumsq[:n].copy(), "count": self.count[:n].copy()}

    @classmethod
    def from_state(cls, st, dim=None):
        """A scaler of a saved state, checked: two 1-D float arrays of one length (at most
        ``dim``), finite, >= 0, whole counts, no sum of squares without a count."""
        if not isinstance(st, dict) or set(st) != {"sumsq", "count"}:
            raise ValueError("the feature scaling state must hold 'sumsq' and 'count'")
        s, n = st["sumsq"], st["count"]
        for name, a in (("sumsq", s), ("count", n)):
            if not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype != np.float64:
                raise ValueError(f"feature scaling {name} must be a 1-D float64 array")
            if not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ValueError(f"feature scaling {name} must be finite and >= 0")
        if s.shape != n.shape:
            raise ValueError("feature scaling sumsq and count differ in length")
        if dim is not None and s.shape[0] > dim:
            raise ValueError(f"feature scaling holds {s.shape[0]} columns, the index {dim}")
        if np.any(n != np.floor(n)) or np.any((s > 0) & (n == 0)) or (n.shape[0] and n[BIAS] != 0):
            raise ValueError("feature scaling counts must be whole, a sum of squares only where a count "
                             "is, the bias column unscaled")
        out = cls()
        out.sumsq, out.count = s.copy(), n.copy()
        return out
