"""Maximum-inner-product search (MIPS) over class weight rows (MEMOIR, Belyy & Sholokhov, Multi-class Extreme Classification with Inexact Margin).

One interface for the three oracles:

* ``query(idx, val, exclude=-1) -> class`` — the (approximately) best class for the sparse
  input x = (idx, val), never ``exclude``; the returned class is always re-scored exactly on
  the true rows, so its score is a true inner product;
* ``row_changed(c, idx, val, coef)`` — row c moved by ``coef * x`` (keeps sketches linear);
  ``update(class_ids)`` — rows changed arbitrarily (recomputed);
* ``query_candidates(idx, val, exclude) -> (cands, scores, n)`` — the classes looked at
  (everything for the exact oracle; top-k of the index and the dirty set otherwise) with their
  exact scores, for learners that re-rank candidates by a rescaled violation;
* ``n_rows`` grows as classes arrive. ``rows`` is a row store (:class:`~.rows.DenseRows`,
  :class:`~.rows.SparseRows`).

``ExactMIPS`` scores every row (the reference, a float64 scan). ``BlasExactMIPS`` gives the same
answers on dense rows with one float32 BLAS product against a mirror of the rows, re-scoring
in float64 the few classes the float32 rounding bound cannot separate. ``HNSWMIPS`` keeps an hnswlib inner-product
index of the rows — or, for high-dimensional sparse inputs, of a fixed random-projection
sketch of each row, maintained linearly as rows change — plus a *dirty set* of the classes
changed since they were last indexed: a query returns the best of the index's top-k and the
dirty classes, re-scored exactly, so an update is visible to the very next query; dirty rows
are re-indexed in one batch when the set grows past ``max_dirty`` -- only those that drifted
by more than ``drift_tol`` of their norm since their last insertion (under a fresh label, the
old one marked deleted; or, with ``reinsert="replace"``, into the slot the old vector frees). On sparse rows (:class:`~.rows.SparseRows`) the index always holds sketches
P^T w_c under a fixed *hashed* random sign projection (entries +-1/sqrt(m) computed from a hash
of (feature, column)), so no d x m matrix exists and the feature space can grow.
``LSHMIPS`` is SimpleLSH (Neyshabur & Srebro): rows scaled by a bound M on their norms and
augmented with sqrt(1 - |w|^2 / M^2), 64-bit sign codes, candidates ranked by Hamming distance
and re-scored exactly, with the same dirty set.
"""
from __future__ import annotations

import numpy as np

from .._kernels import mips as K
from .._optional import require
from ..blas_threads import single_thread
from .._kernels import sparse_rows as SK
from .rows import DenseRows, SparseRows

DEFAULT_SKETCH = 128


def as_store(rows):
    if isinstance(rows, (DenseRows, SparseRows)):
        return rows
    raise TypeError(f"rows must be a row store (DenseRows / SparseRows), got {type(rows).__name__}")


class MIPS:
    """Base class: bookkeeping of queries and candidates."""

    def __init__(self, rows):
        self.store = as_store(rows)
        self.rows = rows
        self.n_queries = 0
        self.n_candidates = 0
        self._sc = np.zeros(16)

    def update(self, class_ids):
        pass

    def row_changed(self, c, idx, val, coef):
        self.update([c])

    def query(self, idx, val, exclude=-1):  # pragma: no cover - interface
        raise NotImplementedError

    def query_candidates(self, idx, val, exclude=-1):  # pragma: no cover - interface
        raise NotImplementedError

    def _score_buf(self, n):
        if self._sc.shape[0] < n:
            self._sc = np.zeros(max(n, 2 * self._sc.shape[0]))
        return self._sc

    def staleness(self):
        return {}

    def stats(self):
        return {"queries": self.n_queries,
                "candidates_per_query": self.n_candidates / max(self.n_queries, 1)}


class ExactMIPS(MIPS):
    """Scores every row: O(rows x nnz(x)) per query on dense rows, O(sum of the postings of the
    features of x) on sparse rows (inverted index)."""

    def __init__(self, rows):
        super().__init__(rows)
        self._all = np.zeros(0, dtype=np.int64)

    def query(self, idx, val, exclude=-1):
        self.n_queries += 1
        c = self.store.argmax(idx, val, exclude)
        # sparse rows: the rows reached through the posting lists; dense: every row
        self.n_candidates += getattr(self.store, "last_touched", self.store.n_rows)
        return c

    def query_candidates(self, idx, val, exclude=-1):
        """Every class with its exact score (``exclude`` is included; callers skip it)."""
        n = self.store.n_rows
        buf = self._score_buf(n)
        self.store.scores_into(idx, val, buf)
        if self._all.shape[0] < n:
            self._all = np.arange(max(n, 2 * self._all.shape[0]), dtype=np.int64)
        self.n_queries += 1
        self.n_candidates += n
        return self._all, buf, n


# unit roundoffs of float32 / float64 and the float32 subnormal spacing (error bounds below)
_U32 = 2.0 ** -24
_U64 = 2.0 ** -53
_TINY32 = 2.0 ** -149


class BlasExactMIPS(ExactMIPS):
    """Exact MIPS over dense rows by one float32 BLAS matrix-vector product, re-scored in
    float64: the same answer as :class:`ExactMIPS` (the float64 scan), ties included.

    A float32 mirror of the rows (``n_rows x columns``) and the float64 norm of every row are
    kept in sync by :meth:`row_changed` / :meth:`update` (the caller reports every change of
    the rows; rows added by ``ensure`` are picked up at the next query). A query computes
    ``g = M q`` in float32 and bounds each score's error: casting and any summation order cost
    at most ``gamma_{d+2} sum_j |v_j x_j| <= gamma_{d+2} |v_c| |x|`` in float32 (Higham,
    "Accuracy and Stability of Numerical Algorithms", ch. 3) plus the float64 scan's own
    ``gamma_d |v_c| |x|`` and a subnormal term, so with ``e_c`` that bound every class whose
    float64 score can be the maximum satisfies ``g_c + e_c >= max_b (g_b - e_b)``. Those
    candidates (a handful, unless scores are within ~1e-5 relative of each other) are re-scored
    in float64 in the scan's summation order and the smallest id among the best is returned, as
    the scan does. A non-finite float32 score falls back to the float64 scan.

    Sparse inputs with fewer than ``min_fill * columns`` features use the float64 scan (a
    gather of a few columns is cheaper than the dense product).

    With ``average`` (MEMOIR's lazy-average rows Z, reported through
    :meth:`average_row_changed` / :meth:`resync`), the mirror has a second block of the same
    size: the rows of U = A0 V - Z (the averaged scores' rows at the weight sum A0 it was built
    at; each entry rounded in float64, then cast). :meth:`query_averaged` answers
    argmax_c A <V_c, x> - <Z_c, x>: at A == A0 (nothing learned since the rebuild, e.g. serving)
    from one product over the U block alone, the same bytes as the last iterate's scan;
    otherwise from both blocks, h_c = (A - A0) <V_c, x> + <U_c, x>, and after
    :attr:`rebuild_after` queries at one new A the U block is rebuilt there (reading V and Z in
    float64 costs about that many queries' savings, so the rule never spends more than twice
    the better choice). A changed row of V or Z marks its U row, rebuilt before the next
    averaged query. The bound (:func:`~streamssvm._kernels.mips.averaged_best`) adds U's float64
    rounding, 2.0001 u (A0 |V_c| + |Z_c|) |x|_1, to the float32 terms of both products; the
    re-scoring is the float64 scan's, so the class is the scan's, ties included. Memory: the
    mirror is 2 x rows x columns float32 (3,700 x 257: 7.6 MB; 100,000 x 257: 206 MB), as
    before (V and Z were mirrored side by side).

    >>> import numpy as np
    >>> from streamssvm.oracles.rows import DenseRows
    >>> R = DenseRows(8); R.ensure(50, 8)
    >>> rng = np.random.default_rng(0)
    >>> for c in range(50):
    ...     _ = R.axpy(c, np.arange(8), rng.normal(size=8), 1.0, 8.0)
    >>> o = BlasExactMIPS(R); x = rng.normal(size=8)
    >>> o.query(np.arange(8), x, 3) == ExactMIPS(R).query(np.arange(8), x, 3)
    True
    """

    #: averaged queries at one new weight sum A, reading both mirror blocks, before the U rows
    #: are rebuilt there (a rebuild reads V and Z in float64: ~REBUILD_AFTER queries' savings)
    rebuild_after = 8

    def __init__(self, rows, min_fill=0.1, average=None):
        super().__init__(rows)
        if self.store.kind != "dense":
            raise TypeError("BlasExactMIPS needs dense rows (DenseRows)")
        if average is not None and average.kind != "dense":
            raise TypeError("the averaged rows must be dense rows (DenseRows)")
        self.min_fill = float(min_fill)
        self.average = average   # Z of MEMOIR's lazy average
        w = 1 if average is None else 2
        # mirror: the rows of V in _M[0], those of U = A0 V - Z in _M[1] (each block contiguous)
        self._M = np.zeros((w, 0, 1), dtype=np.float32)
        self._nrm = np.zeros((0, 3))   # |V_c|, |Z_c|, |U_c|
        self._synced = 0       # rows [0, _synced) mirror the store
        self._z_stale = False  # some mirrored rows lack their U (Z could not be mirrored then)
        self._A0 = 0.0         # the weight sum the U rows were built at
        self._A_seen = None    # the last A an averaged query saw while A0 differed from it,
        self._n_seen = 0       # and how many queries in a row saw it
        self._ids = np.zeros(0, dtype=np.int64)
        self._udirty = np.zeros(0, dtype=np.bool_)
        self._ud = []          # rows whose U (and |Z|) must be rebuilt before an averaged query
        self._out = np.zeros(16)
        self._qd = np.zeros(0)
        self._q32 = np.zeros(0, dtype=np.float32)
        self._gv = np.zeros(0, dtype=np.float32)
        self._gu = np.zeros(0, dtype=np.float32)
        self._up = np.zeros(0)
        self._par = np.zeros(7)
        self.n_blas = 0
        self.n_rescored = 0
        self.n_fallback = 0
        self.n_avg_blas = 0
        self.n_avg_rescored = 0
        self.n_avg_half = 0     # averaged queries that read only the U rows (A == A0)
        self.n_avg_rebuilds = 0
        # the V block's product of the last averaged query (A != A0), reused by the next
        # last-iterate query of the same x while no V row changed (progressive validation:
        # predict_one(x) then learn_one(x) scan the V rows once)
        self._gv_n = -1
        self._gv_idx = self._gv_val = None
        self.n_reused = 0

    # -------------------------------------------------------------- mirror
    def _mirrorable(self):
        """Whether the averaged rows can be mirrored beside V (same width, enough rows)."""
        Z = self.average.V
        return Z.shape[1] == self.store.V.shape[1] and Z.shape[0] >= self.store.n_rows

    def _copy_rows(self, ids):
        self._gv_n = -1
        V = self.store.V
        self._M[0, ids] = V[ids]
        self._nrm[ids, 0] = np.sqrt(np.einsum("ij,ij->i", V[ids], V[ids]))
        if self.average is None:
            return
        if not self._mirrorable():
            self._z_stale = True
            return
        ids = np.arange(ids.start, ids.stop, dtype=np.int64) if isinstance(ids, slice) else ids
        K.mirror_average_rows(self._M, self._nrm, V, self.average.V, self._A0, ids, ids.shape[0], True)
        if self._ud:
            self._udirty[ids] = False

    def _sync(self):
        """Mirror the rows added since the last query (and everything if the store's width or
        capacity changed)."""
        V, n = self.store.V, self.store.n_rows
        if self._M.shape[2] != V.shape[1] or self._M.shape[1] < n:
            cap = max(n, 2 * self._M.shape[1], 16)
            self._M = np.zeros((self._M.shape[0], cap, V.shape[1]), dtype=np.float32)
            self._nrm = np.zeros((cap, 3))
            self._udirty = np.zeros(cap, dtype=np.bool_)
            self._ud = []
            self._synced = 0
        if self._synced == 0:
            self._z_stale = False
            if self._ud:
                self._udirty[:] = False
                self._ud = []
        if self._synced < n:
            self._copy_rows(slice(self._synced, n))
            self._synced = n

    def resync(self):
        """Every row changed (e.g. the average folded): the next query mirrors them all."""
        self._synced = 0
        self._gv_n = -1

    def update(self, class_ids):
        ids = np.asarray(list(class_ids) if not isinstance(class_ids, np.ndarray) else class_ids, dtype=np.int64)
        ids = ids[ids < self._synced]
        if ids.size:
            if self.store.V.shape[1] != self._M.shape[2]:
                self._synced = 0       # width changed: the next query copies every row
                return
            self._copy_rows(ids)

    def _u_changed(self, c):
        """Row c of V or Z changed: its U row is rebuilt before the next averaged query."""
        if not self._udirty[c]:
            self._udirty[c] = True
            self._ud.append(c)

    def row_changed(self, c, idx, val, coef):
        self._gv_n = -1
        if c < self._synced:
            V = self.store.V
            if V.shape[1] != self._M.shape[2] or V.shape[0] <= c:
                self._synced = 0
                return
            K.mirror_row(self._M, self._nrm, V, 0, c, idx)
            if self.average is not None:
                self._u_changed(c)

    def average_row_changed(self, c, idx):
        """Row c of the averaged rows Z changed at the columns ``idx``."""
        if c < self._synced:
            self._u_changed(c)

    def _all_ids(self, n):
        if self._ids.shape[0] < n:
            self._ids = np.arange(max(n, 2 * self._ids.shape[0]), dtype=np.int64)

    # -------------------------------------------------------------- query
    def query(self, idx, val, exclude=-1):
        st = self.store
        n = st.n_rows
        if n == 0 or idx.shape[0] < self.min_fill * st.V.shape[1]:
            return super().query(idx, val, exclude)
        self._sync()
        M = self._M[0]     # the rows of V (contiguous)
        d = M.shape[1]
        qd = np.bincount(idx, weights=val, minlength=d)
        if (self._gv_n == n and idx.shape == self._gv_idx.shape and np.array_equal(idx, self._gv_idx)
                and np.array_equal(val, self._gv_val)):
            # the same x against the same V rows as the last averaged query: its product
            # (the float32 scores of the same mirror rows and x's float32 cast; the bound below holds)
            g = self._gv[:n].astype(np.float64)
            self.n_reused += 1
        else:
            with single_thread(n * d):   # a per-query product: BLAS threads would spin, not help
                g = (M[:n] @ qd.astype(np.float32)).astype(np.float64)
        m = idx.shape[0]
        # |v_c . x| error: float32 (casts and sum over d terms) on the dense x, float64 scan
        # (sum over the m entries of idx; |x_p| summed, which also covers repeated indices)
        x1 = float(np.abs(val).sum())
        bound = ((d + 2) * _U32 / (1.0 - (d + 2) * _U32) * float(np.sqrt(qd @ qd))
                 + (m + 1) * _U64 / (1.0 - (m + 1) * _U64) * x1) * (1.0 + 1e-6)
        e = self._nrm[:n, 0] * bound
        e += 2.0 * (d + 2) * _TINY32 * (1.0 + x1)
        if 0 <= exclude < n:
            g[exclude] = -np.inf
        lo = g - e
        L = lo.max()
        if not np.isfinite(L) and not (n == 1 and 0 <= exclude < n):
            self.n_fallback += 1
            return super().query(idx, val, exclude)
        g += e
        cands = np.flatnonzero(g >= L)
        k = cands.shape[0]
        if self._out.shape[0] < k:
            self._out = np.zeros(max(k, 2 * self._out.shape[0]))
        c, _ = K.rescore_into(st.V, cands, k, idx, val, exclude, self._out)
        self.n_queries += 1
        self.n_blas += 1
        self.n_rescored += k
        self.n_candidates += n
        return int(c)

    def query_averaged(self, idx, val, A):
        """argmax_c A <V_c, x> - <Z_c, x> (Z the averaged rows given at construction, A >= 0):
        the class the float64 scan of both stores picks (:func:`~streamssvm._kernels.mips.averaged_best`),
        from float32 products over the mirror. The mirror holds U = A0 V - Z for the weight sum
        A0 it was last built at: while A == A0 (no step since; e.g. serving) one product over the
        U rows answers; otherwise the V rows too (h = (A - A0) <V, x> + <U, x>), and once more
        than :attr:`rebuild_after` queries in a row saw the same A, U is rebuilt at A0 = A. None when no product applies (sparse input, Z
        not mirrorable, an infinite bound): the caller scans."""
        st = self.store
        n = st.n_rows
        d = st.V.shape[1]
        if (self.average is None or n == 0 or idx.shape[0] < self.min_fill * d or not A >= 0.0
                or not self._mirrorable() or (idx.shape[0] and int(idx.max()) >= d)):
            return None
        if self._z_stale:
            self._synced = 0     # Z can be mirrored again: copy every row
        A = float(A)
        self._sync()
        if self._ud:
            ud = np.asarray(self._ud, dtype=np.int64)
            K.mirror_average_rows(self._M, self._nrm, st.V, self.average.V, self._A0, ud, ud.shape[0], True)
            self._udirty[ud] = False
            self._ud = []
        if A != self._A0:
            if A != self._A_seen:
                self._A_seen, self._n_seen = A, 0
            self._n_seen += 1
            if self._n_seen > self.rebuild_after:
                # rebuilding costs ~rebuild_after queries' savings (a rent-or-buy rule: never
                # more than twice the better of the two, however many queries share one A)
                self._A0 = A
                self._all_ids(n)
                K.mirror_average_rows(self._M, self._nrm, st.V, self.average.V, A, self._ids, n, False)
                self.n_avg_rebuilds += 1
        if self._qd.shape[0] != d:
            self._qd, self._q32 = np.zeros(d), np.zeros(d, dtype=np.float32)
        if self._gu.shape[0] < n:
            cap = max(n, 2 * self._gu.shape[0])
            self._gv, self._gu = np.zeros(cap, dtype=np.float32), np.zeros(cap, dtype=np.float32)
            self._up = np.zeros(cap)
        qn, x1 = K.dense_query32(idx, val, self._qd, self._q32)
        gu = self._gu[:n]
        half = A == self._A0
        with single_thread(n * d):   # a per-query product: BLAS threads would spin, not help
            np.dot(self._M[1, :n], self._q32, out=gu)
            if not half:
                np.dot(self._M[0, :n], self._q32, out=self._gv[:n])
        if not half:
            self._gv_n, self._gv_idx, self._gv_val = n, idx.copy(), val.copy()
        m = idx.shape[0]
        g64 = (m + 1) * _U64 / (1.0 - (m + 1) * _U64)
        par = self._par
        par[0] = A
        par[1] = self._A0
        # as query(): float32 (casts, any order of d terms) + x's dense form / float64 sums
        par[2] = ((d + 2) * _U32 / (1.0 - (d + 2) * _U32) * qn + g64 * x1) * (1.0 + 1e-6)
        par[3] = (g64 + 4.0 * _U64) * x1
        par[4] = 2.0 * (d + 2) * _TINY32 * (1.0 + x1)
        par[5] = 2.0001 * _U64 * x1
        par[6] = 2.0 * _U64 * x1
        c, k = K.averaged_best(self._gv, gu, n, self._nrm, par, st.V, self.average.V, idx, val, self._up)
        if c == -2:
            self.n_fallback += 1
            return None
        self.n_avg_blas += 1
        self.n_avg_half += int(half)
        self.n_avg_rescored += k
        return int(c)

    def stats(self):
        d = super().stats()
        if self.n_avg_blas:
            d.update(averaged_blas_queries=self.n_avg_blas,
                     averaged_rescored_per_query=self.n_avg_rescored / self.n_avg_blas,
                     averaged_u_only_queries=self.n_avg_half, averaged_rebuilds=self.n_avg_rebuilds)
        d.update(blas_queries=self.n_blas, reused_products=self.n_reused, rescored_per_query=self.n_rescored / max(self.n_blas, 1),
                 fallbacks=self.n_fallback)
        return d


class _Dirty(MIPS):
    """Shared machinery of the approximate oracles: sketches, dirty set, candidates.

    The index holds, per class, either the row itself (dense rows, no ``sketch_dim``), a
    Gaussian projection ``P^T w`` (dense rows with ``sketch_dim``), or a hashed sign projection
    (sparse rows; ``sketch_dim`` defaults to 128). Sketches are kept current linearly in ``S``;
    the index copy is refreshed at re-index time.
    """

    def __init__(self, rows, dim, sketch_dim=None, k=10, max_dirty=256, seed=0):
        super().__init__(rows)
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if max_dirty < 1:
            raise ValueError(f"max_dirty must be >= 1, got {max_dirty}")
        self.k = int(k)
        self.max_dirty = int(max_dirty)
        self.seed = int(seed)
        self.rng = np.random.default_rng(seed)
        self.dim = int(dim)
        self.hashed = self.store.kind == "sparse"
        if self.hashed:
            self.sketch_dim = int(sketch_dim or DEFAULT_SKETCH)
            self.mode = "hash"
        else:
            self.sketch_dim = None if sketch_dim is None else int(sketch_dim)
            self.mode = "rows" if sketch_dim is None else "gauss"
        self.P = self._gauss(self.dim, self.sketch_dim) if self.mode == "gauss" else None
        self.vdim = self.dim if self.mode == "rows" else self.sketch_dim
        self.S = np.zeros((0, self.vdim))  # current sketches (sketch modes only)
        self.indexed = 0      # rows present in the index
        self.known = 0        # rows registered (update / row_changed / add_zero_rows)
        self._iz = np.zeros(16, dtype=np.bool_)   # rows still exactly zero, kept out of the index
        self._zptr = 0                            # no zero row below this id
        self._dl = np.zeros(64, dtype=np.int64)   # dirty classes
        self._dn = 0
        self._dm = np.zeros(16, dtype=np.bool_)   # dirty membership
        self._drift = np.zeros(16)                # sum |coef| |x| since last indexed (drift bound)
        self._force = np.zeros(16, dtype=np.bool_)  # changed arbitrarily (update): re-index regardless
        self.reindexed = 0
        self.n_reindex = 0
        self.changes_since = 0

    # -------------------------------------------------------------- dirty set
    @property
    def dirty(self):
        """The dirty classes (a set copy; the live state is an array + mask)."""
        return set(int(c) for c in self._dl[:self._dn])

    def _mark(self, c):
        self._iz[c] = False
        if c >= self.known:
            self.known = c + 1
        if not self._dm[c]:
            self._dm[c] = True
            if self._dn >= self._dl.shape[0]:
                d = np.zeros(2 * self._dl.shape[0], dtype=np.int64)
                d[:self._dn] = self._dl[:self._dn]
                self._dl = d
            self._dl[self._dn] = c
            self._dn += 1

    def _clear_dirty(self, reset=None):
        """Empty the dirty set; the drift bounds of ``reset`` (default: every dirty row) start
        again from 0 (rows left stale keep theirs, measured from their last insertion)."""
        ids = self._dl[:self._dn].copy()
        self._dm[ids] = False
        r = ids if reset is None else reset
        self._drift[r] = 0.0
        self._force[r] = False
        self._dn = 0
        return ids

    def _gauss(self, d, m):
        return self.rng.normal(size=(d, m)) / np.sqrt(m)

    def _grow(self, n, d):
        if self.mode == "gauss" and d > self.P.shape[0]:
            self.P = np.vstack([self.P, self._gauss(d - self.P.shape[0], self.sketch_dim)])
        if self.mode == "rows" and d > self.dim:
            raise ValueError(f"rows have {d} columns but the index was built for {self.dim}; use sketch_dim")
        if self.mode != "rows" and n > self.S.shape[0]:
            S = np.zeros((max(n, 2 * self.S.shape[0], 16), self.S.shape[1]))
            S[:self.S.shape[0]] = self.S
            self.S = S
        if n > self._dm.shape[0]:
            m = max(n, 2 * self._dm.shape[0])
            dm = np.zeros(m, dtype=np.bool_)
            dm[:self._dm.shape[0]] = self._dm
            self._dm = dm
            dr = np.zeros(m)
            dr[:self._drift.shape[0]] = self._drift
            self._drift = dr
            fo = np.zeros(m, dtype=np.bool_)
            fo[:self._force.shape[0]] = self._force
            self._force = fo
            iz = np.zeros(m, dtype=np.bool_)
            iz[:self._iz.shape[0]] = self._iz
            self._iz = iz

    def _store_dims(self):
        st = self.store
        if st.kind == "sparse":
            return st.n_rows, st.dim
        V = st.V
        return st.n_rows, V.shape[1]

    def _compute(self, ids):
        """Index vectors of the rows ``ids`` computed from the rows."""
        st = self.store
        if self.mode == "rows":
            return st.V[ids, :self.dim]
        if self.mode == "gauss":
            V = st.V
            return V[ids] @ self.P[:V.shape[1]]
        out = np.zeros((len(ids), self.sketch_dim))
        st.sketch(ids, self.sketch_dim, self.seed, out)
        return out

    def _vecs(self, ids):
        """Index vectors of the rows ``ids`` as they are now."""
        if self.mode == "rows":
            return self.store.V[ids, :self.dim]
        return self.S[ids]

    def add_zero_rows(self, start, stop):
        """Rows [start, stop) are new and exactly zero: they stay out of the index and the
        dirty set (they all score 0, so the smallest one not excluded stands for them in every
        query) until they first change."""
        n, d = self._store_dims()
        self._grow(max(n, stop), d)
        self._iz[start:stop] = True
        self._zptr = min(self._zptr, start)
        self.known = max(self.known, stop)

    def _zero_candidate(self, exclude):
        z = self._zptr
        iz = self._iz
        while z < self.known and not iz[z]:
            z += 1
        self._zptr = z
        if z < self.known and z == exclude:
            z += 1
            while z < self.known and not iz[z]:
                z += 1
        return z if z < self.known else -1

    def update(self, class_ids):
        n, d = self._store_dims()
        self._grow(n, d)
        ids = np.asarray(list(class_ids), dtype=np.int64)
        if ids.size:
            if self.mode != "rows":
                self.S[ids] = self._compute(ids)
            self._force[ids] = True
            for c in ids:
                self._mark(int(c))
            self.changes_since += len(ids)
        self._maybe_reindex()

    def row_changed(self, c, idx, val, coef):
        """Row c moved by coef * x: the sketch moves linearly (O(nnz(x) * sketch_dim))."""
        if c >= self._dm.shape[0] or (self.mode != "rows" and c >= self.S.shape[0]):
            n, d = self._store_dims()
            self._grow(max(n, c + 1), d)
        if self.mode == "gauss":
            self.S[c] += coef * (val @ self.P[idx])
        elif self.mode == "hash":
            SK.hash_project_add(idx, val, coef, self.sketch_dim, self.seed, self.S[c])
        self._drift[c] += abs(coef) * np.sqrt(float(val @ val))
        self._mark(int(c))
        self.changes_since += 1
        self._maybe_reindex()

    def _query_vec(self, idx, val):
        if self.mode == "rows":
            q = np.zeros(self.dim)
            q[idx] = val
            return q
        if self.mode == "gauss":
            return val @ self.P[idx]
        q = np.zeros(self.sketch_dim)
        SK.hash_project_add(idx, val, 1.0, self.sketch_dim, self.seed, q)
        return q

    def _maybe_reindex(self):
        if self._dn >= self.max_dirty:
            self.reindex()

    def reindex(self):  # pragma: no cover - subclasses
        raise NotImplementedError

    def _candidates(self, q, n):  # pragma: no cover - subclasses
        raise NotImplementedError

    def query_candidates(self, idx, val, exclude=-1):
        """Top-k of the index and the dirty classes, with their exact scores."""
        n, d = self._store_dims()
        if n > self.known:
            # rows appeared without update(): treat them as dirty
            self._grow(n, d)
            new = np.array([c for c in range(self.known, n) if not self._dm[c]], dtype=np.int64)
            if new.size:
                if self.mode != "rows":
                    self.S[new] = self._compute(new)
                for c in new:
                    self._mark(int(c))
        cands = self._candidates(self._query_vec(idx, val), n)
        z = self._zero_candidate(exclude)
        if self._dn or z >= 0:
            parts = [cands, self._dl[:self._dn]]
            if z >= 0:
                parts.append(np.array([z], dtype=np.int64))
            cands = np.concatenate(parts)
        m = len(cands)
        buf = self._score_buf(m)
        self.n_queries += 1
        self.n_candidates += m
        best, _ = self.store.rescore(cands, m, idx, val, exclude, buf)
        self._last_best = best
        return cands, buf, m

    def query(self, idx, val, exclude=-1):
        self.query_candidates(idx, val, exclude)
        return self._last_best

    def staleness(self):
        """Dirty-set size, changes and re-indexes so far, drift bound of the dirty rows
        (sum of |coef| |x| since each was last indexed, in unscaled row units)."""
        dr = self._drift[self._dl[:self._dn]] if self._dn else np.zeros(1)
        return {"dirty": int(self._dn), "changes_since_reindex": int(self.changes_since),
                "reindexes": int(self.n_reindex), "rows_reindexed": int(self.reindexed),
                "drift_max": float(dr.max()), "drift_mean": float(dr.mean())}


class HNSWMIPS(_Dirty):
    """hnswlib inner-product index over the rows (or their random-projection sketches), with a
    dirty set re-scored exactly at each query.

    Parameters
    ----------
    rows
        Row store (:class:`~.rows.DenseRows` or :class:`~.rows.SparseRows`).
    dim
        Columns of the rows (features); with ``sketch_dim`` the index holds sketches instead.
    sketch_dim
        Random-projection dimension (dense rows: None indexes the rows; sparse rows: always a
        hashed sketch, default 128).
    k
        Index neighbours retrieved per query (the exclude class takes one of them).
    max_dirty
        Re-index the dirty rows in one batch once this many are pending.
    M, ef_construction, ef
        hnswlib graph parameters (hnswlib fixes ``ef_construction`` for the life of a graph: it
        is the cost of every insertion and re-insertion).
    drift_tol
        Re-index a dirty row only when it drifted: when the bound ``sum |coef| |x|`` of its
        change since its last insertion exceeds ``drift_tol`` times its norm then (rows changed
        arbitrarily through :meth:`update`, and rows never inserted, always are). The others
        leave the dirty set with their older vector in the graph (and keep their drift bound,
        so they are re-inserted once the accumulated change crosses the threshold). 0: every
        dirty row is re-inserted.
    reinsert
        ``"fresh"`` (default): the new vector gets a fresh label and the old one is marked
        deleted; the graph is rebuilt from the live rows once deleted labels outnumber them.
        ``"replace"``: a drifted row's label is marked deleted and its new vector takes the
        freed slot (``add_items(..., replace_deleted=True)``): the graph keeps one element per
        class, no tombstones accumulate and it is never rebuilt -- but hnswlib then updates the
        element in place, repairing its neighbours' lists, which cost 2.8x the re-indexing CPU
        of ``"fresh"`` in MEMOIR training at 30k classes (``bench/results/memoir_hnsw_maint.md``).

    >>> import numpy as np
    >>> from streamssvm.oracles.rows import SparseRows
    >>> R = SparseRows(dim=50_000); R.ensure(100, 50_000)
    >>> rng = np.random.default_rng(0)
    >>> for c in range(100):
    ...     f = np.sort(rng.choice(50_000, 20, replace=False)); _ = R.axpy(c, f, np.ones(20), 1.0, 20.0)
    >>> o = HNSWMIPS(R, 50_000, k=10); o.update(range(100)); o.reindex()
    >>> f, _ = R.row(42)
    >>> o.query(np.sort(f), np.ones(len(f))) == ExactMIPS(R).query(np.sort(f), np.ones(len(f))) == 42
    True
    """

    def __init__(self, rows, dim, sketch_dim=None, k=10, max_dirty=256, M=16, ef_construction=100,
                 ef=64, seed=0, capacity=1024, drift_tol=0.0, reinsert="fresh"):
        super().__init__(rows, dim, sketch_dim, k, max_dirty, seed)
        self.M, self.ef_construction, self.ef = int(M), int(ef_construction), int(ef)
        if not (drift_tol >= 0 and np.isfinite(drift_tol)):
            raise ValueError(f"drift_tol must be finite and >= 0, got {drift_tol!r}")
        if reinsert not in ("replace", "fresh"):
            raise ValueError(f"reinsert must be 'replace' or 'fresh', got {reinsert!r}")
        self.drift_tol = float(drift_tol)
        self.reinsert = reinsert
        self._inorm = np.zeros(16)     # norm of each row's index vector when it was inserted
        self.skipped = 0               # dirty rows left stale (drift below drift_tol)
        self._capacity = int(capacity)
        self._new_index(self._capacity)
        self._label = np.full(16, -1, dtype=np.int64)   # class -> current hnswlib label
        self._cls = np.full(16, -1, dtype=np.int64)     # hnswlib label -> class
        self._next = 0
        self.live = 0
        self.deleted = 0
        self.rebuilds = 0

    def _new_index(self, capacity):
        hnswlib = require("hnswlib", extra="extreme", feature="mips='hnsw'")
        self.index = hnswlib.Index(space="ip", dim=self.vdim)
        self.index.init_index(max_elements=max(int(capacity), 16), ef_construction=self.ef_construction, M=self.M,
                              random_seed=int(self.seed), allow_replace_deleted=self.reinsert == "replace")
        self.index.set_ef(max(self.ef, self.k + 1))
        self.index.set_num_threads(1)

    @staticmethod
    def _fit(a, n, fill=-1):
        if n <= a.shape[0]:
            return a
        b = np.full(max(n, 2 * a.shape[0]), fill, dtype=a.dtype)
        b[:a.shape[0]] = a
        return b

    def _insert(self, ids, vecs=None):
        m = len(ids)
        labels = np.arange(self._next, self._next + m, dtype=np.int64)
        need = self._next + m
        if need > self.index.get_max_elements():
            self.index.resize_index(max(need, 2 * self.index.get_max_elements()))
        self.index.add_items(self._vecs(ids) if vecs is None else vecs, labels)
        self._cls = self._fit(self._cls, need)
        self._cls[labels] = ids
        self._label[ids] = labels
        self._next = need

    def reindex(self):
        if not self._dn:
            return
        ids = self._dl[:self._dn].copy()
        self._label = self._fit(self._label, int(ids.max()) + 1)
        self._inorm = self._fit(self._inorm, self._label.shape[0], 0.0)
        old = self._label[ids]
        if self.drift_tol > 0:
            # drifted (bound above drift_tol x the norm at insertion), changed arbitrarily, or new
            stale = (old >= 0) & ~self._force[ids] & (self._drift[ids] <= self.drift_tol * self._inorm[ids])
            self.skipped += int(np.count_nonzero(stale))
            ids, old = ids[~stale], old[~stale]
        if ids.size:
            vecs = np.ascontiguousarray(self._vecs(ids), dtype=np.float32)
            self._inorm[ids] = np.sqrt(np.einsum("ij,ij->i", vecs, vecs, dtype=np.float64))
            if self.reinsert == "replace":
                self._replace(ids, old, vecs)
            else:
                self._fresh(ids, old, vecs)
            self.indexed = max(self.indexed, int(ids.max()) + 1)
        self._clear_dirty(reset=ids)
        self.reindexed += len(ids)
        self.n_reindex += 1
        self.changes_since = 0

    def _replace(self, ids, old, vecs):
        """Re-inserted rows take back the slot their label frees (one at a time, so the only
        vacant slot is their own); new rows are added under fresh labels."""
        re = old >= 0
        for j in np.flatnonzero(re):
            lab = int(old[j])
            self.index.mark_deleted(lab)
            self.index.add_items(vecs[j:j + 1], np.array([lab]), replace_deleted=True)
        new = ~re
        if new.any():
            self._insert(ids[new], vecs[new])
            self.live += int(np.count_nonzero(new))

    def _fresh(self, ids, old, vecs):
        for lab in old[old >= 0]:
            self.index.mark_deleted(int(lab))
            self._cls[lab] = -1
        n_old = int(np.count_nonzero(old >= 0))
        self.deleted += n_old
        self.live += len(ids) - n_old
        if self.deleted > max(self.live, 1024):
            self._rebuild()
        else:
            self._insert(ids, vecs)

    def _rebuild(self):
        """A fresh graph over the live rows (their current vectors)."""
        live = np.flatnonzero(self._label >= 0)
        live = np.union1d(live, self._dl[:self._dn])
        self._new_index(max(2 * len(live), self._capacity))
        self._label[:] = -1
        self._cls[:] = -1
        self._next = 0
        vecs = np.ascontiguousarray(self._vecs(live), dtype=np.float32)
        self._insert(live, vecs)
        self._inorm = self._fit(self._inorm, self._label.shape[0], 0.0)
        self._inorm[live] = np.sqrt(np.einsum("ij,ij->i", vecs, vecs, dtype=np.float64))
        self._drift[live] = 0.0          # every live row is in the graph as it is now
        self._force[live] = False
        self.live = len(live)
        self.deleted = 0
        self.rebuilds += 1

    def _candidates(self, q, n):
        if self.live == 0:
            return np.zeros(0, dtype=np.int64)
        k = min(self.k + 1, self.live)
        try:
            labels, _ = self.index.knn_query(q.reshape(1, -1), k=k)
        except RuntimeError:  # too few live neighbours reachable among deleted ones
            self._rebuild()
            labels, _ = self.index.knn_query(q.reshape(1, -1), k=min(k, self.live))
        return self._cls[labels[0]]

    def staleness(self):
        d = super().staleness()
        d.update(index_live=int(self.live), index_deleted=int(self.deleted), rebuilds=int(self.rebuilds),
                 rows_left_stale=int(self.skipped))
        return d


class LSHMIPS(_Dirty):
    """SimpleLSH: 64-bit sign codes of norm-bounded augmented rows, ranked by Hamming
    distance; the top ``k`` and the dirty classes are re-scored exactly."""

    def __init__(self, rows, dim, sketch_dim=None, k=32, max_dirty=256, seed=0):
        super().__init__(rows, dim, sketch_dim, k, max_dirty, seed)
        self.H = self.rng.normal(size=(64, self.vdim + 1))
        self.codes = np.zeros(0, dtype=np.uint64)
        self.M = 0.0
        self._out = np.zeros(self.k + 1, dtype=np.int64)

    def _encode(self, ids):
        V = self._vecs(ids)
        norms = np.sqrt(np.sum(V * V, axis=1))
        aug = np.sqrt(np.maximum(1.0 - (norms / self.M) ** 2, 0.0)) if self.M > 0 else np.ones(len(ids))
        A = np.hstack([V / self.M if self.M > 0 else V, aug[:, None]])
        out = np.zeros(len(ids), dtype=np.uint64)
        K.sign_codes(A, self.H, out)
        return out

    def reindex(self):
        if not self._dn:
            return
        ids = self._dl[:self._dn].copy()
        n = max(int(ids.max()) + 1, self.indexed)
        if self.codes.shape[0] < n:
            c = np.zeros(max(n, 2 * self.codes.shape[0]), dtype=np.uint64)
            c[:self.codes.shape[0]] = self.codes
            self.codes = c
        V = self._vecs(ids)
        norms = np.sqrt(np.sum(V * V, axis=1))
        if norms.size and norms.max() > self.M:
            # the norm bound grew: every code changes
            self.M = 1.5 * float(norms.max())
            ids = np.arange(n, dtype=np.int64)
        self.codes[ids] = self._encode(ids)
        self.indexed = n
        self._clear_dirty()
        self.reindexed += len(ids)
        self.n_reindex += 1
        self.changes_since = 0

    def _candidates(self, q, n):
        if self.indexed == 0:
            return np.zeros(0, dtype=np.int64)
        qn = np.sqrt(q @ q)
        A = np.concatenate([q / qn if qn > 0 else q, [0.0]])[None, :]
        qc = np.zeros(1, dtype=np.uint64)
        K.sign_codes(A, self.H, qc)
        m = K.hamming_topk(self.codes, self.indexed, qc[0], self.k + 1, self._out)
        return self._out[:m].copy()
