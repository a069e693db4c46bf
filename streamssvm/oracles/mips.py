"""Maximum-inner-product search (MIPS) over class weight rows (paper 004, MEMOIR).

One interface for the three oracles:

* ``query(idx, val, exclude=-1) -> class`` — the (approximately) best class for the sparse
  input x = (idx, val), never ``exclude``; the returned class is always re-scored exactly on
  the true rows, so its score is a true inner product;
* ``row_changed(c, idx, val, coef)`` — row c moved by ``coef * x`` (keeps sketches linear);
  ``update(class_ids)`` — rows changed arbitrarily (recomputed);
* ``n_rows`` grows as classes arrive (rows are read through the ``rows`` callable, which
  returns the current weight matrix and the number of rows in use).

``ExactMIPS`` scores every row (the reference). ``HNSWMIPS`` keeps an hnswlib inner-product
index of the rows — or, for high-dimensional sparse inputs, of a fixed random-projection
sketch of each row, maintained linearly as rows change — plus a *dirty set* of the classes
changed since they were last indexed: a query returns the best of the index's top-k and the
dirty classes, re-scored exactly, so an update is visible to the very next query; dirty rows
are re-indexed in one batch (hnswlib updates a label in place) when the set grows past
``max_dirty``. ``LSHMIPS`` is SimpleLSH (Neyshabur & Srebro): rows scaled by a bound M on their
norms and augmented with sqrt(1 - |w|^2 / M^2), 64-bit sign codes, candidates ranked by Hamming
distance and re-scored exactly, with the same dirty set.
"""
from __future__ import annotations

import numpy as np

from .._kernels import mips as K


class MIPS:
    """Base class: bookkeeping of queries and candidates."""

    def __init__(self, rows):
        if not callable(rows):
            raise TypeError("rows must be a callable returning (W, n_rows)")
        self.rows = rows
        self.n_queries = 0
        self.n_candidates = 0

    def update(self, class_ids):
        pass

    def row_changed(self, c, idx, val, coef):
        self.update([c])

    def query(self, idx, val, exclude=-1):  # pragma: no cover - interface
        raise NotImplementedError

    def stats(self):
        return {"queries": self.n_queries,
                "candidates_per_query": self.n_candidates / max(self.n_queries, 1)}


class ExactMIPS(MIPS):
    """Scores every row: O(rows x nnz(x)) per query."""

    def __init__(self, rows):
        super().__init__(rows)
        self._buf = np.zeros(16)

    def query(self, idx, val, exclude=-1):
        W, n = self.rows()
        if self._buf.shape[0] < n:
            self._buf = np.zeros(max(n, 2 * self._buf.shape[0]))
        K.sparse_scores(W, n, idx, val, self._buf)
        self.n_queries += 1
        self.n_candidates += n
        return int(K.best_excluding(self._buf, n, exclude))


class _Dirty(MIPS):
    """Shared machinery of the approximate oracles: sketches, dirty set, candidates."""

    def __init__(self, rows, dim, sketch_dim=None, k=10, max_dirty=256, seed=0):
        super().__init__(rows)
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = int(k)
        self.max_dirty = int(max_dirty)
        self.rng = np.random.default_rng(seed)
        self.dim = int(dim)
        self.sketch_dim = None if sketch_dim is None else int(sketch_dim)
        self.P = None if self.sketch_dim is None else self._gauss(self.dim, self.sketch_dim)
        self.S = np.zeros((0, self.sketch_dim or self.dim))   # indexed vectors (sketch or row)
        self.indexed = 0      # rows present in the index
        self.dirty: set = set()
        self.reindexed = 0

    def _gauss(self, d, m):
        return self.rng.normal(size=(d, m)) / np.sqrt(m)

    def _grow(self, n, d):
        if self.P is not None and d > self.P.shape[0]:
            self.P = np.vstack([self.P, self._gauss(d - self.P.shape[0], self.sketch_dim)])
        if self.P is None and d > self.dim:
            raise ValueError(f"rows have {d} columns but the index was built for {self.dim}; use sketch_dim")
        if n > self.S.shape[0]:
            S = np.zeros((max(n, 2 * self.S.shape[0], 16), self.S.shape[1]))
            S[:self.S.shape[0]] = self.S
            self.S = S

    def _vec_of_rows(self, ids):
        W, n = self.rows()
        if self.P is None:
            return W[ids, :self.dim]
        return W[ids] @ self.P[:W.shape[1]]

    def update(self, class_ids):
        W, n = self.rows()
        self._grow(n, W.shape[1])
        ids = np.asarray(list(class_ids), dtype=np.int64)
        if ids.size:
            self.S[ids] = self._vec_of_rows(ids)
            self.dirty.update(int(c) for c in ids)
        self._maybe_reindex()

    def row_changed(self, c, idx, val, coef):
        """Row c moved by coef * x: the sketch moves linearly (O(nnz(x) * sketch_dim))."""
        W, n = self.rows()
        self._grow(n, W.shape[1])
        if self.P is None:
            self.S[c] = W[c, :self.dim]
        else:
            self.S[c] += coef * (val @ self.P[idx])
        self.dirty.add(int(c))
        self._maybe_reindex()

    def _query_vec(self, idx, val):
        if self.P is None:
            q = np.zeros(self.dim)
            q[idx] = val
            return q
        return val @ self.P[idx]

    def _maybe_reindex(self):
        if len(self.dirty) >= self.max_dirty:
            self.reindex()

    def reindex(self):  # pragma: no cover - subclasses
        raise NotImplementedError

    def _candidates(self, q, n):  # pragma: no cover - subclasses
        raise NotImplementedError

    def query(self, idx, val, exclude=-1):
        W, n = self.rows()
        if n > self.indexed + len(self.dirty):
            # rows appeared without update(): treat them as dirty
            self._grow(n, W.shape[1])
            new = [c for c in range(self.indexed, n) if c not in self.dirty]
            if new:
                self.S[new] = self._vec_of_rows(np.array(new))
                self.dirty.update(new)
        cands = self._candidates(self._query_vec(idx, val), n)
        if self.dirty:
            cands = np.concatenate([cands, np.fromiter(self.dirty, dtype=np.int64, count=len(self.dirty))])
        self.n_queries += 1
        self.n_candidates += len(cands)
        c, _ = K.rescore(W, cands.astype(np.int64), len(cands), idx, val, exclude)
        return int(c)


class HNSWMIPS(_Dirty):
    """hnswlib inner-product index over the rows (or their random-projection sketches), with a
    dirty set re-scored exactly at each query.

    Parameters
    ----------
    rows
        Callable returning ``(W, n_rows)``.
    dim
        Columns of the rows (features); with ``sketch_dim`` the index holds sketches instead.
    sketch_dim
        Random-projection dimension for high-dimensional sparse rows (None: index the rows).
    k
        Index neighbours retrieved per query (the exclude class takes one of them).
    max_dirty
        Re-index the dirty rows in one batch once this many are pending.
    M, ef_construction, ef
        hnswlib graph parameters.
    """

    def __init__(self, rows, dim, sketch_dim=None, k=10, max_dirty=256, M=16, ef_construction=100,
                 ef=64, seed=0, capacity=1024):
        super().__init__(rows, dim, sketch_dim, k, max_dirty, seed)
        import hnswlib
        self.index = hnswlib.Index(space="ip", dim=self.S.shape[1])
        self.index.init_index(max_elements=int(capacity), ef_construction=ef_construction, M=M,
                              random_seed=int(seed))
        self.index.set_ef(max(ef, self.k + 1))
        self.index.set_num_threads(1)

    def reindex(self):
        if not self.dirty:
            return
        ids = np.fromiter(self.dirty, dtype=np.int64, count=len(self.dirty))
        need = max(int(ids.max()) + 1, self.indexed)
        if need > self.index.get_max_elements():
            self.index.resize_index(max(need, 2 * self.index.get_max_elements()))
        self.index.add_items(self.S[ids], ids)
        self.indexed = max(self.indexed, need)
        self.dirty.clear()
        self.reindexed += len(ids)

    def _candidates(self, q, n):
        cnt = self.index.get_current_count()
        if cnt == 0:
            return np.zeros(0, dtype=np.int64)
        labels, _ = self.index.knn_query(q.reshape(1, -1), k=min(self.k + 1, cnt))
        return labels[0].astype(np.int64)


class LSHMIPS(_Dirty):
    """SimpleLSH: 64-bit sign codes of norm-bounded augmented rows, ranked by Hamming
    distance; the top ``k`` and the dirty classes are re-scored exactly."""

    def __init__(self, rows, dim, sketch_dim=None, k=32, max_dirty=256, seed=0):
        super().__init__(rows, dim, sketch_dim, k, max_dirty, seed)
        self.H = self.rng.normal(size=(64, self.S.shape[1] + 1))
        self.codes = np.zeros(0, dtype=np.uint64)
        self.M = 0.0
        self._out = np.zeros(self.k + 1, dtype=np.int64)

    def _encode(self, ids):
        V = self.S[ids]
        norms = np.sqrt(np.sum(V * V, axis=1))
        aug = np.sqrt(np.maximum(1.0 - (norms / self.M) ** 2, 0.0)) if self.M > 0 else np.ones(len(ids))
        A = np.hstack([V / self.M if self.M > 0 else V, aug[:, None]])
        out = np.zeros(len(ids), dtype=np.uint64)
        K.sign_codes(A, self.H, out)
        return out

    def reindex(self):
        if not self.dirty:
            return
        ids = np.fromiter(self.dirty, dtype=np.int64, count=len(self.dirty))
        n = max(int(ids.max()) + 1, self.indexed)
        if self.codes.shape[0] < n:
            c = np.zeros(max(n, 2 * self.codes.shape[0]), dtype=np.uint64)
            c[:self.codes.shape[0]] = self.codes
            self.codes = c
        norms = np.sqrt(np.sum(self.S[ids] ** 2, axis=1))
        if norms.size and norms.max() > self.M:
            # the norm bound grew: every code changes
            self.M = 1.5 * float(norms.max())
            ids = np.arange(n, dtype=np.int64)
        self.codes[ids] = self._encode(ids)
        self.indexed = n
        self.dirty.clear()
        self.reindexed += len(ids)

    def _candidates(self, q, n):
        if self.indexed == 0:
            return np.zeros(0, dtype=np.int64)
        qn = np.sqrt(q @ q)
        A = np.concatenate([q / qn if qn > 0 else q, [0.0]])[None, :]
        qc = np.zeros(1, dtype=np.uint64)
        K.sign_codes(A, self.H, qc)
        m = K.hamming_topk(self.codes, self.indexed, qc[0], self.k + 1, self._out)
        return self._out[:m].copy()
