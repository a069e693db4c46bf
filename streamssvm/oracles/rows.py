"""Class-weight rows for extreme multiclass (MEMOIR, Belyy & Sholokhov, Multi-class Extreme Classification with Inexact Margin): dense or sparse.

Both stores hold the *unscaled* rows V (the learner keeps W = acc * V with a lazy global scale)
and offer the same operations, with the same floating-point summation order, so a learner gives
bit-identical results on either:

* ``dot(c, idx, val)`` — <V[c], x>, O(nnz(x));
* ``axpy(c, idx, val, a, xx)`` — V[c] += a x (``xx`` = |x|^2), O(nnz(x)); ``sq`` = ||V||^2 is
  kept incrementally;
* ``argmax(idx, val, exclude)`` — exact MIPS over every row; sparse: through a feature-major
  inverted index in O(sum over the features j of x of postings(j));
* ``scores_into(idx, val, out)`` — all scores (for losses that need every class);
* ``rescore(cands, n, idx, val, exclude, out)`` — exact scores of candidates;
* ``truncate(ids, thr)`` (l1), ``scale(f)`` (renormalization), ``ensure(n_rows, dim)`` (new
  classes / features), ``state()`` / ``from_state()`` (arrays only, no pickle), ``nbytes``.

:class:`SparseRows` keeps memory O(nnz(W)): slots with an open-addressing hash
(feature, class) -> slot, per-feature posting lists and per-class lists, in preallocated
arrays grown geometrically; zeros left by l1 truncation are compacted away once they are half
of the slots. ``rows="auto"`` in :class:`~streamssvm.learners.MEMOIR` picks dense rows for
array input of at most ``DENSE_MAX_DIM`` columns and sparse rows otherwise (dict input with a
growing vocabulary, the hashing trick, wide arrays).

>>> import numpy as np
>>> R = SparseRows(dim=100_000)
>>> R.ensure(3, 100_000)
>>> idx, val = np.array([5, 70_000]), np.array([1.0, 2.0])
>>> _ = R.axpy(2, idx, val, 0.5, float(val @ val))
>>> R.dot(2, idx, val), R.argmax(idx, val, -1), R.nnz, R.sq
(2.5, 2, 2, 1.25)
"""
from __future__ import annotations

import numpy as np

from .._kernels import mips as M
from .._kernels import sparse_rows as K

DENSE_MAX_DIM = 4096

_I32 = np.int32


class DenseRows:
    """Rows as a dense (capacity x dim) matrix; the reference and the fast path for small d."""

    kind = "dense"

    def __init__(self, dim, capacity=16):
        self.dim = int(dim)
        self.V = np.zeros((max(int(capacity), 1), max(self.dim, 1)))
        self.n_rows = 0
        self.fm = np.zeros(1)
        self._buf = np.zeros(16)

    @property
    def sq(self):
        return float(self.fm[0])

    @sq.setter
    def sq(self, v):
        self.fm[0] = v

    def ensure(self, n_rows, dim):
        V = self.V
        if dim > V.shape[1]:
            W = np.zeros((V.shape[0], max(int(dim), int(V.shape[1] * 1.5))))
            W[:, :V.shape[1]] = V
            V = W
            self.dim = int(dim)
        if n_rows > V.shape[0]:
            W = np.zeros((max(int(n_rows), 2 * V.shape[0]), V.shape[1]))
            W[:V.shape[0]] = V
            V = W
        self.V = V
        self.n_rows = max(self.n_rows, int(n_rows))

    def dot(self, c, idx, val):
        return K.dense_dot(self.V, c, idx, val)

    def _check(self, c, idx):
        if not 0 <= c < self.n_rows or (idx.shape[0] and (idx.max() >= self.V.shape[1] or idx.min() < 0)):
            raise IndexError(f"row {c} / feature out of range: call ensure(n_rows, dim) first")

    def axpy(self, c, idx, val, a, xx):
        """V[c] += a x; returns <V[c], x> before the update."""
        self._check(c, idx)
        return K.dense_axpy(self.V, self.fm, c, idx, val, a, xx)

    def _scores(self, idx, val):
        if self._buf.shape[0] < self.n_rows:
            self._buf = np.zeros(max(self.n_rows, 2 * self._buf.shape[0]))
        K.dense_scores_into(self.V, self.n_rows, idx, val, self._buf)
        return self._buf

    def argmax(self, idx, val, exclude=-1):
        return int(M.best_excluding(self._scores(idx, val), self.n_rows, exclude))

    def scores_into(self, idx, val, out):
        K.dense_scores_into(self.V, self.n_rows, idx, val, out)

    def rescore(self, cands, n, idx, val, exclude, out):
        c, s = M.rescore_into(self.V, cands, n, idx, val, exclude, out)
        return int(c), float(s)

    def truncate(self, ids, thr):
        K.dense_truncate(self.V, self.fm, np.asarray(ids, dtype=np.int64), thr)

    def scale(self, f):
        self.V[:self.n_rows] *= f
        self.fm[0] *= f * f

    def l1(self):
        return float(np.abs(self.V[:self.n_rows]).sum())

    def recompute_sq(self):
        self.fm[0] = float(np.sum(self.V[:self.n_rows] ** 2))

    def to_dense(self):
        return self.V[:self.n_rows, :self.dim].copy()

    @property
    def nnz(self):
        return int(np.count_nonzero(self.V[:self.n_rows]))

    @property
    def nbytes(self):
        return int(self.V.nbytes)

    def state(self):
        return {"kind": "dense", "dim": self.dim, "V": self.V[:self.n_rows].copy(), "sq": self.sq}

    @classmethod
    def from_state(cls, st):
        V = np.asarray(st["V"], dtype=np.float64)
        n = V.shape[0]
        r = cls(int(st["dim"]), capacity=max(16, n))
        r.ensure(n, max(int(st["dim"]), V.shape[1] if V.ndim == 2 else 0))
        if n:
            r.V[:n, :V.shape[1]] = V
        r.sq = float(st["sq"])
        return r


class SparseRows:
    """Rows as hashed sparse entries with feature-major posting lists: memory O(nnz(W))."""

    kind = "sparse"

    def __init__(self, dim=1, capacity=16, slots=1024):
        self.dim = int(dim)
        self.last_touched = 0   # rows the last argmax touched through the posting lists
        self.n_rows = 0
        self.meta = np.zeros(2, dtype=np.int64)   # n_slots, n_zero
        self.fm = np.zeros(1)                     # ||V||^2
        self._alloc_slots(int(slots))
        self.fhead = np.full(max(self.dim, 16), -1, dtype=_I32)
        self.chead = np.full(max(int(capacity), 16), -1, dtype=_I32)
        self.cnnz = np.zeros(self.chead.shape[0], dtype=_I32)
        self._alloc_hash(2 * self.sval.shape[0])
        self._scores = np.zeros(self.chead.shape[0])
        self._mark = np.zeros(self.chead.shape[0], dtype=np.bool_)
        self._touched = np.zeros(self.chead.shape[0], dtype=np.int64)

    # -------------------------------------------------------------- storage
    def _alloc_slots(self, n):
        self.sval = np.zeros(n)
        self.sfeat = np.zeros(n, dtype=_I32)
        self.scls = np.zeros(n, dtype=_I32)
        self.fnext = np.full(n, -1, dtype=_I32)
        self.cnext = np.full(n, -1, dtype=_I32)

    def _alloc_hash(self, n):
        h = 16
        while h < n:
            h *= 2
        self.hkey = np.full(h, -1, dtype=np.int64)
        self.hslot = np.zeros(h, dtype=_I32)

    @property
    def n_slots(self):
        return int(self.meta[0])

    @property
    def sq(self):
        return float(self.fm[0])

    @sq.setter
    def sq(self, v):
        self.fm[0] = v

    def _grow_slots(self, need):
        n = self.n_slots
        if 2 * self.meta[1] > n and n > 1024:
            self.compact()
            n = self.n_slots
            if n + need <= self.sval.shape[0]:
                return
        cap = max(n + need, 2 * self.sval.shape[0])
        old = (self.sval, self.sfeat, self.scls, self.fnext, self.cnext)
        self._alloc_slots(cap)
        for new, o in zip((self.sval, self.sfeat, self.scls, self.fnext, self.cnext), old):
            new[:n] = o[:n]
        self._alloc_hash(2 * cap)
        K.rehash(self.hkey, self.hslot, self.sfeat, self.scls, n)

    def compact(self):
        """Drop stored zeros (left by l1 truncation or cancellation); rebuild the index."""
        n = self.n_slots
        feat, cls, val = self.sfeat[:n].copy(), self.scls[:n].copy(), self.sval[:n].copy()
        keep = int(np.count_nonzero(val))
        self._alloc_slots(max(2 * keep, 1024))
        self._alloc_hash(2 * self.sval.shape[0])
        self.fhead[:] = -1
        self.chead[:] = -1
        self.cnnz[:] = 0
        K.rebuild(feat, cls, val, n, self.kernel_rows())

    def ensure(self, n_rows, dim):
        if dim > self.fhead.shape[0]:
            f = np.full(max(int(dim), 2 * self.fhead.shape[0]), -1, dtype=_I32)
            f[:self.fhead.shape[0]] = self.fhead
            self.fhead = f
        self.dim = max(self.dim, int(dim))
        if n_rows > self.chead.shape[0]:
            m = max(int(n_rows), 2 * self.chead.shape[0])
            c = np.full(m, -1, dtype=_I32)
            c[:self.chead.shape[0]] = self.chead
            self.chead = c
            z = np.zeros(m, dtype=_I32)
            z[:self.cnnz.shape[0]] = self.cnnz
            self.cnnz = z
            self._scores = np.zeros(m)
            self._mark = np.zeros(m, dtype=np.bool_)
            self._touched = np.zeros(m, dtype=np.int64)
        self.n_rows = max(self.n_rows, int(n_rows))

    # -------------------------------------------------------------- operations
    def kernel_rows(self):
        """The arrays as ``streamssvm._kernels.sparse_rows`` takes them (one plain tuple)."""
        return (self.hkey, self.hslot, self.sval, self.sfeat, self.scls, self.fnext, self.cnext, self.fhead,
                self.chead, self.cnnz, self.meta, self.fm)

    def dot(self, c, idx, val):
        return K.dot(self.hkey, self.hslot, self.sval, c, idx, val)

    def axpy(self, c, idx, val, a, xx):
        """V[c] += a x (missing entries inserted); returns <V[c], x> before the update."""
        if not 0 <= c < self.n_rows or (idx.shape[0] and (idx.max() >= self.fhead.shape[0] or idx.min() < 0)):
            raise IndexError(f"row {c} / feature out of range: call ensure(n_rows, dim) first")
        if self.meta[0] + idx.shape[0] > self.sval.shape[0]:
            self._grow_slots(idx.shape[0])
        return K.axpy(self.kernel_rows(), c, idx, val, a, xx)

    def argmax(self, idx, val, exclude=-1):
        c, self.last_touched = K.exact_argmax(self.fhead, self.fnext, self.scls, self.sval, idx, val, self.n_rows,
                                              exclude, self._scores, self._mark, self._touched)
        return int(c)

    def scores_into(self, idx, val, out):
        K.scores_into(self.fhead, self.fnext, self.scls, self.sval, idx, val, self.n_rows, out)

    def rescore(self, cands, n, idx, val, exclude, out):
        c, s = K.rescore(self.hkey, self.hslot, self.sval, cands, n, idx, val, exclude, out)
        return int(c), float(s)

    def truncate(self, ids, thr):
        K.truncate(self.sval, self.cnext, self.chead, self.meta, self.fm, np.asarray(ids, dtype=np.int64), thr)
        n = self.n_slots
        if n > 4096 and 2 * self.meta[1] > n:
            self.compact()

    def scale(self, f):
        self.sval[:self.n_slots] *= f
        self.fm[0] *= f * f

    def l1(self):
        return float(K.abs_sum(self.sval, self.n_slots))

    def recompute_sq(self):
        self.fm[0] = float(K.sq_sum(self.sval, self.n_slots))

    def row(self, c):
        """(features, values) of row c, stored zeros included."""
        m = int(self.cnnz[c]) if c < self.cnnz.shape[0] else 0
        f, v = np.zeros(m, dtype=np.int64), np.zeros(m)
        K.row_entries(self.chead, self.cnext, self.sfeat, self.sval, c, f, v)
        return f, v

    def sketch(self, ids, m, seed, out):
        K.sketch_rows(self.chead, self.cnext, self.sfeat, self.sval, np.asarray(ids, dtype=np.int64), m, seed, out)

    def to_dense(self):
        """Dense copy (tests and small models only)."""
        n = self.n_slots
        D = np.zeros((self.n_rows, max(self.dim, 1)))
        D[self.scls[:n], self.sfeat[:n]] = self.sval[:n]
        return D

    @property
    def nnz(self):
        return int(np.count_nonzero(self.sval[:self.n_slots]))

    @property
    def nbytes(self):
        """Bytes of every array the store holds (slots, hash, heads, query buffers)."""
        return int(sum(a.nbytes for a in (self.sval, self.sfeat, self.scls, self.fnext, self.cnext, self.hkey,
                                          self.hslot, self.fhead, self.chead, self.cnnz, self._scores,
                                          self._mark, self._touched, self.meta, self.fm)))

    def state(self):
        n = self.n_slots
        keep = self.sval[:n] != 0.0
        return {"kind": "sparse", "dim": self.dim, "n_rows": self.n_rows, "feat": self.sfeat[:n][keep].astype(np.int64),
                "cls": self.scls[:n][keep].astype(np.int64), "val": self.sval[:n][keep].copy(), "sq": self.sq}

    @classmethod
    def from_state(cls, st):
        val = np.asarray(st["val"], dtype=np.float64)
        r = cls(dim=int(st["dim"]), capacity=max(16, int(st["n_rows"])), slots=max(1024, 2 * val.shape[0]))
        r.ensure(int(st["n_rows"]), int(st["dim"]))
        K.rebuild(np.asarray(st["feat"], dtype=np.int64), np.asarray(st["cls"], dtype=np.int64), val, val.shape[0],
                  r.kernel_rows())
        r.sq = float(st["sq"])
        return r


def rows_from_state(st):
    return SparseRows.from_state(st) if st.get("kind") == "sparse" else DenseRows.from_state(st)
