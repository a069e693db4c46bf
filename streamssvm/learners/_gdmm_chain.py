"""GDMM's engine for chains (:class:`~streamssvm.SequenceTagger`): the held examples, their
factorwise dual (unigram and bigram factors), the weights and the passes of Yen, Huang, Zhong,
Zhang, Ravikumar, Dhillon, "Dual Decomposed Learning with Factorwise Oracles for Structural SVMs of
Large Output Domain" (NIPS 2016). The public learner is :class:`~streamssvm.learners.GDMM`; the
kernels and the mathematics are in :mod:`streamssvm._kernels.gdmm_chain`.
"""
from __future__ import annotations

import time

import numpy as np

from .. import certificate as cert_mod
from .._kernels import gdmm as G
from .._kernels import gdmm_chain as GC
from .._kernels import structops as so
from .._kernels.chain import chain_viterbi
from ..oracles.factorwise import BigramTable, UnigramMIPS, new_scratch
from ._gdmm_state import grow_rows
from .base import label_capacity

#: block solvers by name -> kernel code (``"bcfw"`` / ``"afw"``: chains only)
SOLVERS = ("active_qp", "bcfw", "afw")
_SOLVER_CODE = {"active_qp": G.SOLVER_QP, "bcfw": G.SOLVER_FW, "afw": G.SOLVER_AFW}



class _ChainAdapter:
    """Everything GDMM needs from the project's structure / kernel API, in one place (so an
    API change touches only this class): the cost matrix, MAP / loss-augmented Viterbi, the
    labeling score."""

    def __init__(self, structure):
        self.structure = structure
        self.use_trans = bool(structure.use_trans)

    def cost_matrix(self, Kc, labels):
        return self.structure.cost_matrix(Kc, labels)

    def decode(self, S, T, B, s, L, K, ytrue, C, loss_scale, work, out):
        """Viterbi with the normalized-Hamming loss weight loss_scale / L (T is zero without
        transitions); ``work`` = (V, bp) its tables."""
        return chain_viterbi(S, (T, B), s, L, K, self.use_trans, ytrue, C, loss_scale / L, work, out,
                             self.structure.graph(K))

    @staticmethod
    def score(S, T, B, s, lab, L, K, use_trans):
        return so.labeling_score(so.CHAIN, S, T, B, s, lab, L, K, use_trans)


class ChainGDMM:
    """GDMM's running state for chains. ``cfg`` is the :class:`~streamssvm.learners.GDMM` whose
    parameters it reads; ``rng`` the learner's generator (the kernels' seeds derive from one draw)."""

    def __init__(self, cfg, structure, labels, rng):
        self.cfg = cfg
        self._ad = _ChainAdapter(structure)
        self._use_trans = self._ad.use_trans
        self._K = 0
        Kc = 4
        self._d = 0
        self.Wu = np.zeros((2 + 1, Kc))   # feature-major: rows 0 / 1 start / end biases
        self.table = BigramTable(0, Kc, heaps=self.cfg.fmo != "brute")
        self._C = self._ad.cost_matrix(Kc, labels)
        self._seed_base = int(rng.integers(2**31 - 1))
        self._tick = 0
        self.counters = np.zeros(G.N_COUNTERS, dtype=np.int64)
        self.seconds_oracle = 0.0
        self._acap = self.cfg.active_cap
        self._ZW = np.zeros_like(self.Wu)
        self._ZT = np.zeros_like(self.table.T)
        self._avg_k = 0
        self._pred_cache = None
        self._alloc_store(16, 64, 512)
        self._mips = UnigramMIPS(k=self.cfg.mips_k, sketch_dim=self.cfg.sketch_dim, seed=self.cfg.seed or 0) \
            if self.cfg.fmo == "mips" else None

    def _alloc_store(self, n_ex, n_tok, nnz):
        a = self._acap
        self._ex_ptr = np.zeros(n_ex + 1, dtype=np.int64)
        self._ex_alive = np.zeros(n_ex, dtype=np.bool_)
        self._n_ex = 0
        self._n_tok = 0
        self._nnz = 0
        self._tok_ptr = np.zeros(n_tok + 1, dtype=np.int64)
        self._fidx = np.zeros(nnz, dtype=np.int64)
        self._fval = np.zeros(nnz)
        self._ytrue = np.zeros(n_tok, dtype=np.int32)
        self._xsq = np.zeros(n_tok)
        self._first = np.zeros(n_tok, dtype=np.bool_)
        self._last = np.zeros(n_tok, dtype=np.bool_)
        self._linv = np.zeros(n_tok)
        self._cw = np.ones(n_tok)   # per token: its example's weight c_i
        self._U = G.Unigrams(np.zeros((n_tok, a), dtype=np.int32), np.zeros((n_tok, a)), np.zeros((n_tok, a)),
                         np.zeros((n_tok, a)), np.zeros(n_tok, dtype=np.int32))
        self._B = G.Bigrams(np.zeros((n_tok, a), dtype=np.int32), np.zeros((n_tok, a), dtype=np.int32),
                        np.zeros((n_tok, a)), np.zeros(n_tok, dtype=np.int32))
        self._order = []   # FIFO of held example slots

    def _reserve(self, n_ex, n_tok, nnz):
        g = grow_rows
        self._ex_ptr = g(self._ex_ptr, n_ex + 1)
        self._ex_alive = g(self._ex_alive, n_ex)
        self._tok_ptr = g(self._tok_ptr, n_tok + 1)
        self._fidx = g(self._fidx, nnz)
        self._fval = g(self._fval, nnz)
        for k in ("_ytrue", "_xsq", "_first", "_last", "_linv", "_cw"):
            setattr(self, k, g(getattr(self, k), n_tok))
        self._U = G.Unigrams(*(g(x, n_tok) for x in self._U))
        self._B = G.Bigrams(*(g(x, n_tok) for x in self._B))

    def _grow_active(self, cap):
        """Widen every active set to ``cap`` slots."""
        def w(x):
            y = np.zeros((x.shape[0], cap), dtype=x.dtype)
            y[:, :x.shape[1]] = x
            return y
        U, B = self._U, self._B
        self._U = G.Unigrams(w(U.lab), w(U.mu), w(U.lamL), w(U.lamR), U.cnt)
        self._B = G.Bigrams(w(B.a), w(B.b), w(B.mu), B.cnt)
        self._acap = cap
        self._scratch = None

    def ensure(self, n_features, labels):
        n_labels = len(labels)
        Dc, Kc = self.Wu.shape
        if n_labels > Kc:
            Kc = label_capacity(n_labels, Kc)
        D = 2 + max(int(n_features), 1)
        if Kc > self.Wu.shape[1] or D > Dc:
            W = np.zeros((Dc if D <= Dc else max(D, int(Dc * 1.5) + 1), Kc))
            W[:Dc, :self.Wu.shape[1]] = self.Wu
            self.Wu = W
        self._d = max(self._d, int(n_features))
        if n_labels > self._K == 1 and self._n_ex:
            # every held example was learned with a single tag: it had nothing to step to
            self._settle = np.flatnonzero(self._ex_alive[:self._n_ex])
        if n_labels != self._K or Kc != self._C.shape[0]:
            self.table.grow(n_labels, Kc)
            self._K = n_labels
            self._C = self._ad.cost_matrix(Kc, labels)
            self._scratch = None

    @property
    def K(self):
        return self._K

    @property
    def n_blocks(self):
        return int(np.count_nonzero(self._ex_alive[:self._n_ex]))

    def alive_slots(self):
        return np.flatnonzero(self._ex_alive[:self._n_ex])

    def weights(self):
        """The estimator-facing view of the weights: none (the chain estimator predicts through
        the learner)."""
        return None

    def weight_sum(self):
        """N = sum of the held examples' weights c_i (their count when unweighted)."""
        alive = self.alive_slots()
        if not self._weighted:
            return len(alive)
        return float(self._cw[self._ex_ptr[alive]].sum())

    def example_weights(self):
        """The weight c_i of every stored example slot (evicted ones included)."""
        return self._cw[self._ex_ptr[:self._n_ex]].copy()

    def _s(self):
        N = self.weight_sum()
        return 1.0 / (self.cfg.lam * (N if N > 0 else 1))

    # ------------------------------------------------------------------ bundles
    def _data(self):
        return G.pack(G.ChainData(self._ex_ptr, self._ex_alive, self._tok_ptr, self._fidx, self._fval, self._ytrue,
                                  self._xsq, self._first, self._last, self._linv, self._cw))

    def _dual(self):
        return G.pack(G.ChainDual(G.pack(self._U), G.pack(self._B)))

    def _model(self):
        return G.pack(G.ChainModel(int(self._K), int(self.table.Kc), bool(self._use_trans), self._C))

    def _weights(self, coef=-1.0):
        """The weights bundle; ``coef`` < 0: not averaging (see ``gdmm.LazyAverage``)."""
        return G.pack(G.ChainWeights(self.Wu, self.table.T, self.table.H,
                                     G.pack(G.LazyAverage(self._ZW, self._ZT, np.array([float(coef)])))))

    def _sc(self):
        if getattr(self, "_scratch", None) is None or self._scratch.augL.shape[0] < self.table.Kc:
            self._scratch = new_scratch(self.table.Kc, self._acap)
        return self._scratch

    # ------------------------------------------------------------------ learning
    _weighted = False   # some example held with a weight other than 1 (since the last reset)

    def add(self, tok_ptr, fidx, fval, y, Ki=1, weight=1.0):
        """Hold a new example with weight ``weight`` (c_i > 0), its factors at the ground truth
        (``Ki`` is unused: chains weigh their tokens by 1 / L). Returns its slot."""
        y = np.asarray(y, dtype=np.int32)
        L = len(tok_ptr) - 1
        if L == 0:
            raise ValueError("an example needs at least one token")
        if self.cfg.window is not None and self.n_blocks >= self.cfg.window:
            self._evict(self._order.pop(0))
        nnz = int(tok_ptr[-1] - tok_ptr[0])
        e, t0, z0 = self._n_ex, self._n_tok, self._nnz
        self._reserve(e + 1, t0 + L, z0 + nnz)
        self._fidx[z0:z0 + nnz] = fidx[tok_ptr[0]:tok_ptr[-1]]
        self._fval[z0:z0 + nnz] = fval[tok_ptr[0]:tok_ptr[-1]]
        self._tok_ptr[t0:t0 + L + 1] = np.asarray(tok_ptr, dtype=np.int64) - tok_ptr[0] + z0
        self._ytrue[t0:t0 + L] = y
        fv = np.asarray(fval[tok_ptr[0]:tok_ptr[-1]], dtype=np.float64)
        tid = np.repeat(np.arange(L), np.diff(np.asarray(tok_ptr, dtype=np.int64)))
        sq = np.bincount(tid, weights=fv * fv, minlength=L)
        self._first[t0:t0 + L] = False
        self._last[t0:t0 + L] = False
        if self._use_trans:
            self._first[t0] = True
            self._last[t0 + L - 1] = True
        self._xsq[t0:t0 + L] = sq + self._first[t0:t0 + L] + self._last[t0:t0 + L]
        self._linv[t0:t0 + L] = 1.0 / L
        self._cw[t0:t0 + L] = weight
        if weight != 1.0:
            self._weighted = True
        self._ex_ptr[e] = t0
        self._ex_ptr[e + 1] = t0 + L
        self._ex_alive[e] = True
        self._n_ex, self._n_tok, self._nnz = e + 1, t0 + L, z0 + nnz
        GC.init_blocks(e, self._data(), self._dual())
        self._order.append(e)
        return e

    def _avg_restart(self):
        """Start a new averaging window (an evicted example's steps leave the average)."""
        self._avg_k = 0
        self._ZW[...] = 0.0
        self._ZT[...] = 0.0
        self._pred_cache = None

    def _avg_fit(self):
        """Grow the averaging accumulators with the weights (labels / features added)."""
        for name, ref in (("_ZW", self.Wu), ("_ZT", self.table.T)):
            Z = getattr(self, name)
            if Z.shape != ref.shape:
                Zn = np.zeros_like(ref)
                Zn[:Z.shape[0], :Z.shape[1]] = Z
                setattr(self, name, Zn)

    def _pred_weights(self):
        """(Wu, T) that predict: the averaged iterate when averaging (after a first step), else
        the current one."""
        if not self.cfg.averaging or self._avg_k < 2:
            return self.Wu, self.table.T
        if self._pred_cache is None:
            self._avg_fit()
            Wk = 0.5 * self._avg_k * (self._avg_k + 1.0)
            self._pred_cache = (self.Wu - self._ZW / Wk, self.table.T - self._ZT / Wk)
        return self._pred_cache

    def _evict(self, e):
        self.table.ready()
        if self.cfg.averaging:
            self._avg_restart()
        GC.remove_example(e, self._data(), self._dual(), self._weights(), self._model(), self.table.heaps)
        if self._n_tok > 1024 and self._dead_tokens() > self._n_tok // 2:
            self._compact()

    def _dead_tokens(self):
        lens = np.diff(self._ex_ptr[:self._n_ex + 1])
        return int(lens[~self._ex_alive[:self._n_ex]].sum())

    def _compact(self):
        """Drop evicted examples from the arrays (slots are renumbered)."""
        alive = np.flatnonzero(self._ex_alive[:self._n_ex])
        old = (self._ex_ptr.copy(), self._tok_ptr.copy(), self._fidx, self._fval, self._ytrue, self._xsq,
               self._first, self._last, self._linv, self._cw, self._U, self._B)
        ex_ptr, tok_ptr = old[0], old[1]
        toks = np.concatenate([np.arange(ex_ptr[e], ex_ptr[e + 1]) for e in alive]) if len(alive) else np.zeros(0, np.int64)
        lens = ex_ptr[alive + 1] - ex_ptr[alive]
        nn = tok_ptr[toks + 1] - tok_ptr[toks]
        zs = np.concatenate([np.arange(tok_ptr[t], tok_ptr[t + 1]) for t in toks]) if len(toks) else np.zeros(0, np.int64)
        remap = {int(e): i for i, e in enumerate(alive)}
        order = self._order   # _alloc_store resets self._order
        self._alloc_store(max(16, 2 * len(alive)), max(64, 2 * len(toks)), max(512, 2 * len(zs)))
        m, nt, nz = len(alive), len(toks), len(zs)
        self._ex_ptr[1:m + 1] = np.cumsum(lens)
        self._ex_alive[:m] = True
        self._tok_ptr[1:nt + 1] = np.cumsum(nn)
        self._fidx[:nz] = old[2][zs]
        self._fval[:nz] = old[3][zs]
        for name, src in zip(("_ytrue", "_xsq", "_first", "_last", "_linv", "_cw"), old[4:10]):
            getattr(self, name)[:nt] = src[toks]
        self._U = G.Unigrams(*(np.ascontiguousarray(x[toks]) for x in old[10]))
        self._B = G.Bigrams(*(np.ascontiguousarray(x[toks]) for x in old[11]))
        self._reserve(2 * m + 16, 2 * nt + 64, 2 * nz + 512)
        self._n_ex, self._n_tok, self._nnz = m, nt, nz
        self._order = [remap[e] for e in order]

    def _seed(self):
        self._tick += 1
        return int((self._seed_base + self._tick * 2654435761) % 2147483647)

    def sweep(self, order, mult):
        """One sweep over the examples ``order`` (then their multiplier steps when ``mult``)."""
        if len(order) == 0 or self._K == 0:
            return 0.0
        self.table.ready()
        order = np.asarray(order, dtype=np.int64)
        uni_mode, cptr, cands = G.UNI_SLICE, np.zeros(1, np.int64), np.zeros(1, np.int32)
        t0 = time.perf_counter()
        if self._mips is not None:
            self._mips.attach(self.Wu, self._K)
            toks = np.concatenate([np.arange(self._ex_ptr[e], self._ex_ptr[e + 1]) for e in order])
            cptr, cands = self._mips.candidates(self._tok_ptr, self._fidx, self._fval, self._first, self._last,
                                                toks, self._n_tok)
            uni_mode = G.UNI_CAND
        self.seconds_oracle += time.perf_counter() - t0
        full0 = self.counters[G.C_FULL]
        SC = self._sc()
        self._avg_fit()
        self._pred_cache = None
        cfg = G.chain_step(s=self._s(), rho=self.cfg.rho, eta=self.cfg.eta,
                           bi_mode=G.ORACLE_BRUTE if self.cfg.fmo == "brute" else G.ORACLE_HEAP, uni_mode=uni_mode,
                           nu=self.cfg.nu, qp_iters=self.cfg.qp_iters, heaps=self.table.heaps,
                           solver=_SOLVER_CODE[self.cfg.solver], inner=self.cfg.inner, rounds=self.cfg.rounds, mult=mult)
        res = GC.run_pass(order, self._data(), self._dual(), self._weights(0.0 if self.cfg.averaging else -1.0),
                          self._model(), cfg, G.pack(G.ChainWork(G.pack(SC), self.counters)),
                          G.pack(G.Candidates(cptr, cands)), self._seed(),
                          int(self._avg_k))
        if self.cfg.averaging:
            self._avg_k += int(np.count_nonzero(self._ex_alive[order]))
        if self._mips is not None:
            ch = np.flatnonzero(SC.changed[:self._K])
            SC.changed[:] = 0
            self._mips.changed(ch)
        if self.counters[G.C_FULL] > full0 and self._acap < 512:
            self._grow_active(2 * self._acap)
        return res

    #: sweeps over the examples held while a single tag existed and the second tag's first one
    SETTLE_SWEEPS = 3
    _settle = None   # set by ensure when the second tag arrives, used by the next learn

    def learned(self, e):
        """After the learner's sweeps for the new example e (its own and the replays)."""
        if self._settle is not None:
            self._settle_new(e)

    def _settle_new(self, e):
        """The second tag's first example is learned: ``SETTLE_SWEEPS`` sweeps over it and the
        examples held before it, which were learned while a single tag existed (their factors had
        nothing to move to). A random replay draw may miss them, and they share the transition and
        start/end weights with the new example ([a] -> x, then [b] -> y predicted x or y for both).
        Once per stream, when the label set first grows past one."""
        held, self._settle = self._settle, None
        held = held[self._ex_alive[held]]
        order = np.append(held, e).astype(np.int64)
        for _ in range(self.SETTLE_SWEEPS):
            self.sweep(order, True)

    # ------------------------------------------------------------------ prediction
    def predict(self, ex_tok, tok_ptr, fidx, fval, y_ptr, n_out):
        out = np.zeros(n_out, dtype=np.int32)
        if self._K == 0:
            return out
        s = self._s()
        K, Kc = self._K, self.table.Kc
        Wp, Tp = self._pred_weights()
        Bm = np.ascontiguousarray(Wp[:2])
        Lmax = int(np.max(np.diff(ex_tok))) if len(ex_tok) > 1 else 1
        S = np.zeros((max(Lmax, 1), Kc))
        V = np.zeros((max(Lmax, 1), Kc))
        bp = np.zeros((max(Lmax, 1), Kc), dtype=np.int32)
        for e in range(len(ex_tok) - 1):
            a, b = int(ex_tok[e]), int(ex_tok[e + 1])
            L = b - a
            if L == 0:
                continue
            tp = np.asarray(tok_ptr[a:b + 1], dtype=np.int64)
            GC.emission_scores(Wp, K, s, tp - tp[0], fidx[tp[0]:tp[-1]], fval[tp[0]:tp[-1]], L, False, S)
            o = out[y_ptr[e]:y_ptr[e] + L]
            self._ad.decode(S, Tp, Bm, s, L, K, o, self._C, 0.0, (V, bp), o)
        return out

    # ------------------------------------------------------------------ certificate
    def certificate(self, passes_done):
        """Exact primal (loss-augmented Viterbi on every held example), the dual at the
        repaired (consistent) point, gap = P(w) - D(repaired) >= P(w) - min P. Weighted examples:
        P(w) = lam/2 ||w||^2 + (1/N) sum_i c_i H_i(w), D = (1/N) sum_i c_i delta_i^T mu'_i -
        lam/2 ||w(mu')||^2 with N = sum_i c_i (the repair is per example, so the repaired point
        stays feasible). Observes only."""
        t0 = time.perf_counter()
        n = self.n_blocks
        lam = float(self.cfg.lam)
        if n == 0 or self._K == 0:
            return cert_mod.Certificate.empty(lam, n, seconds=time.perf_counter() - t0)
        s = self._s()
        N = self.weight_sum()
        Wp, Tp = self._pred_weights()
        hinge, dloss, rep, Wr, Tr = self._repaired_sums(Wp, Tp)
        sq = float(np.vdot(Wp, Wp) + np.vdot(Tp, Tp))
        sqr = float(np.vdot(Wr, Wr) + np.vdot(Tr, Tr))
        reg = 0.5 * lam * s * s * sq
        primal = reg + hinge / N
        dual = dloss / N - 0.5 * lam * s * s * sqr
        raw = primal - dual
        resid = 0.0
        if self._use_trans:
            Dt, duals = self._data(), self._dual()
            for e in np.flatnonzero(self._ex_alive[:self._n_ex]):   # eta = 0: measures the consistency residual, changes nothing
                resid += GC.multiplier_step(int(e), Dt, duals, 0.0)
        c = cert_mod.Certificate(
            gap=max(raw, 0.0), primal=primal, dual=dual, n_blocks=n, oracle_calls=n,
            seconds=time.perf_counter() - t0, exact=True, lam=lam, regularizer=reg, hinge=hinge / N,
            dual_loss=dloss / N, block_gap_sum=raw, raw_gap=raw,
            note=("dual at the factor marginals repaired into a consistent point (a Markov chain from "
                  "the bigram row conditionals): a feasible BCFW dual point, so gap = P(w) - D bounds "
                  "P(w) - min P; primal by exact loss-augmented Viterbi at the weights that predict"
                  + (" (the averaged iterate)" if Wp is not self.Wu else "")),
            extra={"raw_gap": raw, "consistency_residual": resid, "repair_distance": rep,
                   "passes": passes_done, "averaged": Wp is not self.Wu})
        return c

    def _repaired_sums(self, Wh=None, Th=None):
        """(hinge sum at the weights Wh, Th (default: the current iterate), dual loss sum and repair distance of the repaired
        point, its unnormalized weights Wr, Tr): one pass of loss-augmented Viterbi and repair
        over the held examples. Observes only."""
        s = self._s()
        K, Kc = self._K, self.table.Kc
        Dt, dual = self._data(), self._dual()
        T = self.table.T
        Wh = self.Wu if Wh is None else Wh
        Th = T if Th is None else Th
        Bm = np.ascontiguousarray(Wh[:2])
        alive = np.flatnonzero(self._ex_alive[:self._n_ex])
        Lmax = int(np.max(self._ex_ptr[alive + 1] - self._ex_ptr[alive]))
        S = np.zeros((Lmax, Kc))
        V = np.zeros((Lmax, Kc))
        bp = np.zeros((Lmax, Kc), dtype=np.int32)
        lab = np.zeros(Lmax, dtype=np.int32)
        M = np.zeros((Lmax, Kc))
        prev, nxt, row = np.zeros(Kc), np.zeros(Kc), np.zeros(Kc)
        Wr = np.zeros_like(self.Wu)
        Tr = np.zeros_like(T)
        hinge = 0.0
        dloss = 0.0
        rep = 0.0
        for e in alive:
            a, b = int(self._ex_ptr[e]), int(self._ex_ptr[e + 1])
            L = b - a
            tp = self._tok_ptr[a:b + 1]
            tpl = tp - tp[0]
            fi, fv = self._fidx[tp[0]:tp[-1]], self._fval[tp[0]:tp[-1]]
            GC.emission_scores(Wh, K, s, tpl, fi, fv, L, False, S)
            yt = self._ytrue[a:b]
            best = self._ad.decode(S, Th, Bm, s, L, K, yt, self._C, 1.0, (V, bp), lab)
            h = best - self._ad.score(S, Th, Bm, s, yt, L, K, self._use_trans)
            hinge += h if not self._weighted else self._cw[a] * h
            rep += GC.repaired_unigrams(e, Dt, dual, K, self._use_trans, M, prev, nxt, row)
            dloss += GC.repaired_emissions(e, Dt, K, self._C, M, Wr)
            if self._use_trans:
                GC.repaired_pairs(e, Dt, dual, K, M, Tr, row)
        return hinge, dloss, rep, Wr, Tr

    # ------------------------------------------------------------------ state

    def state(self, learner_state):
        """The saved state; ``learner_state`` holds the learner's own entries (``n_learned``,
        ``passes_done``, ``rng``), kept at their places in the dict."""
        ne, nt, nz = self._n_ex, self._n_tok, self._nnz
        return {
            "K": self._K, "d": self._d, "tick": self._tick, "seed_base": self._seed_base,
            "n_learned": learner_state["n_learned"], "passes_done": learner_state["passes_done"], "acap": self._acap,
            "counters": self.counters.copy(), "Wu": self.Wu.copy(), "T": self.table.T.copy(), "C": self._C.copy(),
            "ex_ptr": self._ex_ptr[:ne + 1].copy(), "ex_alive": self._ex_alive[:ne].copy(),
            "tok_ptr": self._tok_ptr[:nt + 1].copy(), "fidx": self._fidx[:nz].copy(), "fval": self._fval[:nz].copy(),
            "ytrue": self._ytrue[:nt].copy(), "xsq": self._xsq[:nt].copy(), "first": self._first[:nt].copy(),
            "last": self._last[:nt].copy(), "linv": self._linv[:nt].copy(),
            "U": {k: v[:nt].copy() for k, v in self._U._asdict().items()},
            "B": {k: v[:nt].copy() for k, v in self._B._asdict().items()},
            "order": np.asarray(self._order, dtype=np.int64),
            "rng": learner_state["rng"],
            "avg_k": self._avg_k, "ZW": self._ZW.copy(), "ZT": self._ZT.copy(),
        } | self._weights_state()

    def _weights_state(self):
        """``{"ex_weight": c}`` (one weight per stored example slot) when some weight is not 1,
        else nothing: files of unweighted models are unchanged."""
        if not self._weighted:
            return {}
        c = self.example_weights()
        return {"ex_weight": c} if (c != 1.0).any() else {}

    def restore(self, st):
        """Load a saved state (validated by ``_gdmm_state.validate_gdmm_state``)."""
        self._K = int(st["K"])
        self._d = int(st["d"])
        self._tick = int(st["tick"])
        self._seed_base = int(st["seed_base"])
        self._acap = int(st["acap"])
        self.counters = np.array(st["counters"], dtype=np.int64)
        self.Wu = np.array(st["Wu"], dtype=np.float64)
        T = np.array(st["T"], dtype=np.float64)
        self.table = BigramTable(self._K, T.shape[0], heaps=self.cfg.fmo != "brute")
        self.table.T[...] = T
        self._C = np.array(st["C"], dtype=np.float64)
        self._ex_ptr = np.array(st["ex_ptr"], dtype=np.int64)
        self._ex_alive = np.array(st["ex_alive"], dtype=np.bool_)
        self._tok_ptr = np.array(st["tok_ptr"], dtype=np.int64)
        self._fidx = np.array(st["fidx"], dtype=np.int64)
        self._fval = np.array(st["fval"], dtype=np.float64)
        self._ytrue = np.array(st["ytrue"], dtype=np.int32)
        self._xsq = np.array(st["xsq"], dtype=np.float64)
        self._first = np.array(st["first"], dtype=np.bool_)
        self._last = np.array(st["last"], dtype=np.bool_)
        self._linv = np.array(st["linv"], dtype=np.float64)
        c = np.asarray(st.get("ex_weight", np.ones(len(self._ex_alive))), dtype=np.float64)
        self._cw = np.repeat(c, np.diff(self._ex_ptr))
        self._weighted = bool((c != 1.0).any())
        U, B = st["U"], st["B"]
        self._U = G.Unigrams(np.array(U["lab"], np.int32), np.array(U["mu"], float), np.array(U["lamL"], float),
                         np.array(U["lamR"], float), np.array(U["cnt"], np.int32))
        self._B = G.Bigrams(np.array(B["a"], np.int32), np.array(B["b"], np.int32), np.array(B["mu"], float),
                        np.array(B["cnt"], np.int32))
        self._n_ex = len(self._ex_alive)
        self._n_tok = len(self._ytrue)
        self._nnz = len(self._fidx)
        order = [int(e) for e in st["order"]]
        # files written before _compact kept its FIFO order list only the examples that arrived
        # after the last compaction: the held examples missing from it are older, evict them first
        listed = set(order)
        self._order = [int(e) for e in np.flatnonzero(self._ex_alive) if int(e) not in listed] + order
        self._scratch = None
        self._pred_cache = None
        if "ZW" in st:   # states written before averaging existed restart the window
            ZW, ZT = np.array(st["ZW"], dtype=np.float64), np.array(st["ZT"], dtype=np.float64)
            if ZW.shape != self.Wu.shape or ZT.shape != T.shape:
                raise ValueError("invalid GDMM state: the averaging accumulators do not match the weights' shapes")
            avg_k = int(st["avg_k"])
            if avg_k < 0 or not (np.isfinite(ZW).all() and np.isfinite(ZT).all()):
                raise ValueError("invalid GDMM state: the averaging accumulators must be finite with avg_k >= 0")
            self._ZW, self._ZT, self._avg_k = ZW, ZT, avg_k
        else:
            self._ZW, self._ZT, self._avg_k = np.zeros_like(self.Wu), np.zeros_like(T), 0
        self._reserve(self._n_ex + 1, self._n_tok + 1, self._nnz + 1)
