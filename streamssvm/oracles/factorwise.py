"""Factorwise maximization oracles (FMOs) of GDMM (Yen et al., "Dual Decomposed Learning with
Factorwise Oracles for Structural SVMs of Large Output Domain", NIPS 2016, section 3.2).

* :class:`BigramTable` -- an indicator factor's K x K score table kept in a global max-heap and
  one heap per row and per column; :meth:`BigramTable.argmax` maximizes the message-augmented
  score s T[a, b] + augL[a] + augR[b] exactly, touching few entries when few labels carry a
  positive augment (the four message cases of the paper).
* :class:`UnigramMIPS` -- an inner-product factor's oracle answered by the project's
  maximum-inner-product index (:class:`~streamssvm.oracles.mips.HNSWMIPS`) over the label rows
  of the unigram weights: per token, the index's top-k and its dirty rows are the candidates,
  re-scored exactly (with the loss and the messages) by the block solver. Neither the paper nor
  its code has this oracle; it is approximate (the label found may not be the best).
* The nu-partition sampled unigram oracle (a random 1/nu slice of the labels, exact inside it)
  runs inside the kernel (``streamssvm._kernels.gdmm_chain.uni_step``).

>>> import numpy as np
>>> tab = BigramTable(4)
>>> tab.set(2, 3, 5.0); tab.set(1, 1, 2.0)
>>> aug = np.zeros(4)
>>> tab.argmax(1.0, aug, aug)[:2]
(2, 3)
>>> augL = np.array([0.0, 4.0, 0.0, 0.0])      # label 1 on the left carries a message
>>> tab.argmax(1.0, augL, aug)[:2], tab.brute(1.0, augL, aug)[:2]
((1, 1), (1, 1))
"""
from __future__ import annotations

import numpy as np

from .._kernels import gdmm as G
from .._kernels import gdmm_chain as GC
from .mips import HNSWMIPS
from .rows import DenseRows


def new_heaps(Kc):
    """The :data:`~streamssvm._kernels.gdmm.Heaps` over a Kc x Kc table, as the kernels take it."""
    return G.pack(G.Heaps(np.zeros(Kc * Kc, dtype=np.int32), np.zeros(Kc * Kc, dtype=np.int32),
                   np.zeros((Kc, Kc), dtype=np.int32), np.zeros((Kc, Kc), dtype=np.int32),
                   np.zeros((Kc, Kc), dtype=np.int32), np.zeros((Kc, Kc), dtype=np.int32)))


def new_scratch(Kc, cap):
    """A zeroed :data:`~streamssvm._kernels.gdmm.ChainScratch` for Kc labels and active sets of
    ``cap`` (pass it to the kernels through :func:`~streamssvm._kernels.gdmm.pack`)."""
    cap = max(int(cap), 4)
    return G.ChainScratch(np.zeros(Kc), np.zeros(Kc), np.zeros(Kc, dtype=np.int8), np.zeros(Kc, dtype=np.int8),
                      np.zeros(Kc), np.zeros(Kc), np.zeros(max(1024, 4 * cap), dtype=np.int32),
                      np.zeros(max(1024, 4 * cap)), np.zeros(cap + 1), np.zeros(Kc + 1, dtype=np.int32),
                      np.zeros(Kc + 1, dtype=np.int32), np.zeros(Kc, dtype=np.int8), np.zeros(Kc))


class BigramTable:
    """A K x K indicator-factor table (unnormalized) with its heaps.

    ``T`` is (Kc x Kc) with Kc >= K the capacity; only the first K labels are in use. Heaps
    are rebuilt when labels are added (:meth:`grow`) and kept by :meth:`set` / :meth:`add`
    otherwise (O(log K) per changed entry)."""

    def __init__(self, K, Kc=None, heaps=True):
        self.K = int(K)
        Kc = max(int(Kc or K), self.K, 1)
        self.T = np.zeros((Kc, Kc))
        self.heaps = bool(heaps)
        self.H = new_heaps(Kc if heaps else 1)
        self.SC = new_scratch(Kc, 16)
        self.counters = np.zeros(G.N_COUNTERS, dtype=np.int64)
        self._stale = True

    @property
    def Kc(self):
        return self.T.shape[0]

    def grow(self, K, Kc=None):
        """Use K labels (capacity at least Kc); new entries are zero; heaps rebuilt lazily."""
        Kc = max(int(Kc or 0), int(K), self.Kc)
        if Kc > self.Kc:
            T = np.zeros((Kc, Kc))
            T[:self.Kc, :self.Kc] = self.T
            self.T = T
            if self.heaps:
                self.H = new_heaps(Kc)
            self.SC = new_scratch(Kc, self.SC.fbuf.shape[0] - 1)
        if K != self.K or Kc != self.Kc:
            self._stale = True
        self.K = int(K)
        self._stale = True

    def rebuild(self):
        if self.heaps and self.K > 0:
            GC.build_heaps(self.T, self.K, self.Kc, self.H)
        self._stale = False

    def ready(self):
        if self._stale:
            self.rebuild()

    def set(self, a, b, v):
        self.ready()
        self.T[a, b] = v
        if self.heaps:
            GC.heap_t_changed(self.T, self.K, self.Kc, self.H, a, b)

    def add(self, a, b, dv):
        self.set(a, b, self.T[a, b] + dv)

    def check(self):
        """True when all heaps are consistent with the table (tests)."""
        self.ready()
        return bool(GC.check_heaps(self.T, self.K, self.Kc, self.H))

    def argmax(self, s, augL, augR, mode="heap"):
        """argmax_(a, b) s T[a, b] + augL[a] + augR[b] -> (a, b, value, entries touched)."""
        self.ready()
        K = self.K
        aL = np.zeros(self.Kc)
        aR = np.zeros(self.Kc)
        aL[:K] = augL[:K]
        aR[:K] = augR[:K]
        posL = np.flatnonzero(aL[:K] > 0).astype(np.int32)
        posR = np.flatnonzero(aR[:K] > 0).astype(np.int32)
        mkL = np.zeros(self.Kc, dtype=np.int8)
        mkR = np.zeros(self.Kc, dtype=np.int8)
        mkL[posL] = 1
        mkR[posR] = 1
        before = int(self.counters[G.C_BI_TOUCHED])
        m = G.ORACLE_HEAP if (mode == "heap" and self.heaps) else G.ORACLE_BRUTE
        a, b, v = GC.bigram_oracle(m, self.T, K, self.Kc, float(s), G.pack(G.OracleSide(aL, posL, len(posL), mkL)),
                                   G.pack(G.OracleSide(aR, posR, len(posR), mkR)), self.H, G.pack(self.SC),
                                   self.counters)
        return int(a), int(b), float(v), int(self.counters[G.C_BI_TOUCHED]) - before

    def brute(self, s, augL, augR):
        """Reference: the full K x K scan in numpy."""
        K = self.K
        V = s * self.T[:K, :K] + augL[:K, None] + augR[None, :K]
        i = int(np.argmax(V))
        return i // K, i % K, float(V.flat[i])


class UnigramMIPS:
    """Candidates for the unigram (inner-product) factors from an HNSW index over the label
    rows of ``Wu`` (start / end biases, then the features, per label).

    ``Wu`` is feature-major ((2 + d) x labels); the index sees its transpose (a view).
    ``k`` neighbours per token plus the index's dirty rows; rows changed by a pass are
    reported with :meth:`changed` (they join the dirty set and are re-indexed in batches).
    ``sketch_dim``: the index holds Gaussian random projections of the rows (needed when the
    feature space grows; None indexes the rows themselves)."""

    def __init__(self, k=10, sketch_dim=64, ef=64, M=16, max_dirty=256, seed=0):
        self.k, self.sketch_dim, self.ef, self.M = int(k), sketch_dim, int(ef), int(M)
        self.max_dirty, self.seed = int(max_dirty), int(seed)
        self.rows = None
        self.index = None
        self.queries = 0
        self.n_candidates = 0

    def attach(self, Wu, K):
        """(Re)attach the row matrix (after a reallocation) and the number of labels in use."""
        D = Wu.shape[0]
        if self.rows is None:
            self.rows = DenseRows(D, capacity=1)
            self.index = HNSWMIPS(self.rows, D, sketch_dim=self.sketch_dim, k=self.k,
                                  max_dirty=self.max_dirty, M=self.M, ef=self.ef, seed=self.seed)
        self.rows.V = Wu.T
        self.rows.dim = D
        self.rows.n_rows = int(K)

    def changed(self, ids):
        if len(ids):
            self.index.update(ids)

    def candidates(self, tok_ptr, fidx, fval, first, last, tokens, n_tok):
        """(cptr, cands): per token t in ``tokens`` (others get none), the candidate labels."""
        cptr = np.zeros(n_tok + 1, dtype=np.int64)
        parts = [[] for _ in range(n_tok)]
        for t in tokens:
            a, b = tok_ptr[t], tok_ptr[t + 1]
            idx = [0] if first[t] else []
            if last[t]:
                idx.append(1)
            idx = np.concatenate([np.array(idx, dtype=np.int64), 2 + fidx[a:b].astype(np.int64)])
            val = np.concatenate([np.ones(int(first[t]) + int(last[t])), fval[a:b]])
            c, _, m = self.index.query_candidates(idx, val)
            parts[t] = c[:m]
            self.queries += 1
            self.n_candidates += m
        cnt = np.array([len(p) for p in parts], dtype=np.int64)
        np.cumsum(cnt, out=cptr[1:])
        cands = np.concatenate([np.asarray(p, dtype=np.int32) for p in parts]) if n_tok else np.zeros(0, np.int32)
        return cptr, cands.astype(np.int32)
