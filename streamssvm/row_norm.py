"""Row normalization of multi-label examples: every row divided by one running factor so that
the rows learned so far have a mean squared norm of ``RowNorm.C / K`` (K labels).

Why: the multi-label objective lam/2 ||w||^2 + (1/n) sum_i H_i(w), H_i the Hamming loss
normalized by K, is not scale invariant. With independent labels it is K problems, one per
label, each a linear SVM of C = K ||x||^2 / (lam n) on rows of unit norm: rows c times longer
act as a lambda c^2 times smaller, and K more labels as a lambda K times smaller. The default
lambda (``learners.BCFW``: 1e-3, then 6 / n) was chosen for multiclass rows of a few units of
squared norm. Column scaling (:mod:`streamssvm.scaling`) gives each real-valued column an RMS
of 1, so a row of d such columns has a squared norm near d (Yeast: 104, digits: 33) and the
problem becomes both under-regularized and badly conditioned for dual block steps (a step moves
a block by about lam n / (K' ||x||^2), K' the labels it flips). Rows of mean squared norm C / K
give every label the same C = C / (lam n) whatever the scale of the data and the number of
labels; for the feature weights this is lam_eff = lam * K * mean ||x||^2 / C (the bias column,
the constant 1, is left as it is).

The factor is common to all rows (a row's own norm is kept relative to the others, unlike a
per-row unit normalization) and its statistics change only when a row is learned; a
prediction, refinement or certificate does not change them. Rows are scaled by the statistics
that include them, as the columns are; K is the number of labels known at the time.

>>> import numpy as np
>>> r = RowNorm()
>>> r.learn_scaled(np.array([0, 1, 2], np.int32), np.array([1.0, 6.0, 8.0]), 5).round(6).tolist()
[1.0, 1.03923, 1.385641]
>>> r.factor(5) ** 2 * 100   # |x|^2 = 100 -> C / K = 15 / 5
3.0
>>> r.scaled(np.array([0, 1], np.int32), np.array([1.0, 10.0]), 15).round(6).tolist()   # C / K = 1
[1.0, 1.0]
"""
from __future__ import annotations

import math

import numpy as np

from .features import BIAS


class RowNorm:
    """Running sum of the squared norms (bias column excluded) and count of the rows learned."""

    #: the rows' mean squared norm times the number of labels: 15 gave the best mean test
    #: Jaccard of 7, 15 and 30 (and of the fixed norms 0.3, 1, 3, 10) on the tuning sets of
    #: ``bench/multilabel_defaults.py`` (constructed labellings of scikit-learn's digits and of
    #: OCR letters, 3 to 14 labels); Yeast is held out there
    C = 15.0

    def __init__(self):
        self.sumsq = 0.0
        self.count = 0

    def factor(self, K):
        """The factor every row's (non-bias) values are multiplied by with ``K`` labels:
        sqrt(C / (K mean)), 1 before any non-zero row."""
        if self.count == 0 or self.sumsq <= 0.0:
            return 1.0
        return math.sqrt(self.C * self.count / (max(int(K), 1) * self.sumsq))

    def scaled(self, fidx, fval, K):
        """``fval`` times the factor (the bias column kept), a new array; changes nothing."""
        g = self.factor(K)
        out = np.asarray(fval, dtype=np.float64) * g
        if g != 1.0:
            bias = np.asarray(fidx) == BIAS
            out[bias] = np.asarray(fval, dtype=np.float64)[bias]
        return out

    def learn_scaled(self, fidx, fval, K):
        """Take one row's squared norm into the statistics, then :meth:`scaled`."""
        fval = np.asarray(fval, dtype=np.float64)
        keep = np.asarray(fidx) != BIAS
        self.sumsq += float(np.dot(fval[keep], fval[keep]))
        self.count += 1
        return self.scaled(fidx, fval, K)

    # ------------------------------------------------------------------ persistence
    def state(self):
        return {"sumsq": np.array([self.sumsq], dtype=np.float64), "count": np.array([self.count], dtype=np.int64)}

    @classmethod
    def from_state(cls, st):
        """A row normalization of a saved state, checked (one finite sum >= 0, one count >= 0)."""
        if not isinstance(st, dict) or set(st) != {"sumsq", "count"}:
            raise ValueError("the row norm state must hold 'sumsq' and 'count'")
        s, n = st["sumsq"], st["count"]
        if not (isinstance(s, np.ndarray) and s.shape == (1,) and s.dtype == np.float64
                and isinstance(n, np.ndarray) and n.shape == (1,) and n.dtype.kind == "i"):
            raise ValueError("row norm sumsq / count must be one float64 / one integer")
        if not math.isfinite(float(s[0])) or s[0] < 0 or n[0] < 0 or (s[0] > 0 and n[0] == 0):
            raise ValueError("row norm sumsq must be finite and >= 0, count >= 0 (> 0 with a sum)")
        out = cls()
        out.sumsq, out.count = float(s[0]), int(n[0])
        return out
