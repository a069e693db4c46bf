"""GDMM: greedy direction method of multipliers over factorwise duals (Yen, Huang, Zhong,
Zhang, Ravikumar, Dhillon, "Dual Decomposed Learning with Factorwise Oracles for Structural
SVMs of Large Output Domain", NIPS 2016), for chains and for multi-label with pairwise label
factors.

The structural SVM's LP-relaxed dual (exact on chains, which are trees) decomposes into one
multiclass dual per factor -- a unigram factor per token (inner-product scores over the K
labels) and a bigram factor per adjacent pair (a K x K indicator table) -- coupled by the
consistency of their marginals. GDMM minimizes the augmented Lagrangian of that coupling with
greedy factorwise block steps (each factor's oracle only searches its own domain; the bigram
oracle is sublinear in K^2 through heaps, see :mod:`streamssvm.oracles.factorwise`) and takes
one multiplier step per pass (and per arriving example when streaming). The kernels and the
exact mathematics are in :mod:`streamssvm._kernels.gdmm`.

``lam`` is the regularization lambda of P(w) = lam/2 ||w||^2 + (1/n) sum_i H_i(w) (the paper's
C is 1 / (lam n)); ``rho`` the augmented-Lagrangian penalty, ``eta`` the multiplier step.

Certificate: the stored factor marginals are generally not consistent (the multipliers only
enforce consistency in the limit). :meth:`GDMM.certificate` repairs them into a locally
consistent point -- on a chain, a Markov chain built from the bigram marginals' row
conditionals, i.e. a distribution over labelings, hence a feasible BCFW dual point -- and
reports gap = P(w) - D(repaired) with the exact primal (loss-augmented Viterbi on every held
example): a valid bound on P(w) - min P by weak duality. The repair moves the dual point, so
this gap does not go to zero as fast as the algorithm's own residuals; ``extra`` reports the
consistency residual and the (non-bounding) dual value at the stored point.
"""
from __future__ import annotations

import time

import numpy as np

from .. import certificate as cert_mod
from .._kernels import gdmm as G
from .._kernels import structops as so
from .._kernels.chain import chain_viterbi
from ..oracles.factorwise import BigramTable, UnigramMIPS, new_scratch
from .base import Learner, check_choice, check_number

_FMO = ("heap", "brute", "mips")
#: block solvers by name -> kernel code (``"bcfw"`` / ``"afw"``: chains only)
_SOLVERS = ("active_qp", "bcfw", "afw")
_SOLVER_CODE = {"active_qp": G.SOLVER_QP, "bcfw": G.SOLVER_FW, "afw": G.SOLVER_AFW}


# ------------------------------------------------------------------ adapter to the structure API
class _ChainAdapter:
    """Everything GDMM needs from the project's structure / kernel API, in one place (so an
    API change touches only this class): the cost matrix, MAP / loss-augmented Viterbi, the
    labeling score."""

    def __init__(self, structure):
        self.structure = structure
        self.use_trans = bool(structure.use_trans)

    def cost_matrix(self, Kc, labels):
        return self.structure.cost_matrix(Kc, labels)

    @staticmethod
    def decode(S, T, B, s, L, K, use_trans, ytrue, C, loss_scale, V, bp, ybuf, out):
        # Viterbi with the normalized-Hamming loss weight loss_scale / L (T is zero without transitions)
        return chain_viterbi(S, (T, B), s, L, K, use_trans, ytrue, C, loss_scale / L, (V, bp), out)

    @staticmethod
    def score(S, T, B, s, lab, L, K, use_trans):
        return so.labeling_score(so.CHAIN, S, T, B, s, lab, L, K, use_trans)


class GDMM(Learner):
    """GDMM for chains (:class:`~streamssvm.SequenceTagger`) and pairwise multi-label
    (:class:`~streamssvm.MultiLabelSSVM` with ``pairwise=True``): factorwise block steps with
    factorwise oracles and multiplier steps.

    Multi-label: GDMM minimizes the dual of the LP relaxation on the local polytope (the
    paper's (5); on a fully connected graph an upper bound on the structured hinge), so its
    optimum equals the exact one when the relaxation is tight at the optimum (small random
    instances and a 5-label yeast subset: ``tests/test_gdmm_multilabel.py``); on all 14 yeast
    labels it is not tight and GDMM's optimum sits 8e-4 to 3e-3 above BCFW's
    (``bench/results/gdmm_multilabel_yeast_equality.md``). A pair factor the greedy step has
    not activated has no variables: it follows its two unigrams (their independent coupling), so
    it constrains nothing until it is activated. The certificate's primal is exact (enumeration, up to
    16 labels) and its dual is a feasible point of the *exact* problem (a distribution repair,
    :func:`streamssvm._kernels.gdmm.ml_certificate_sums`), so the gap is a valid bound; above
    16 labels there is no exact primal (gap = inf, exact=False, see the note). Above 16 labels
    prediction first fixes off the labels that are off in some optimum (unary score plus the
    positive interactions with the undecided labels <= 0), then enumerates the rest exactly when
    at most 16 remain, else solves the LP relaxation on them (:mod:`streamssvm.oracles.lp`).

    Parameters
    ----------
    lam
        Regularization lambda (> 0).
    rho
        Augmented-Lagrangian penalty (> 0). Chains: absolute. Pairwise multi-label: relative,
        the penalty is rho * s with s = 1 / (lam n) (the scale of the data term; measured on
        yeast with lam = 1: an absolute rho = 1 moved the unigrams ~40x slower than BCFW's dual).
        Many sparse labels (228, ``bench/results/gdmm_multilabel_implicit.md``): rho = 0.1 gave
        +0.03 micro-F1 over the default on two generator seeds, but converges much slower on
        yeast's 14 labels, so the default stays 1.
    eta
        Multiplier step size in (0, 1]: lam' += eta (M mu_f - mu_t), once per pass over the
        held examples (``refine``) and once per example visit when streaming. The multipliers
        are scaled by rho (the messages are M mu_f - mu_t + lam'), so eta = 1 is the method of
        multipliers' step; larger steps diverge (measured: rho = eta = 3 on a toy chain).
    fmo
        Factorwise oracles: ``"heap"`` (exact bigram oracle over heaps; unigram oracle an
        exact scan of a random 1/``nu`` slice of the labels), ``"brute"`` (full K^2 scan for the
        bigrams; same unigram oracle), ``"mips"`` (heap bigrams; unigram candidates from the
        project's HNSW maximum-inner-product index, approximate).
    nu
        Partitions of the sampled unigram oracle (1 = exact).
    solver
        Block solver. ``"active_qp"`` (default): chains -- greedy active set + exact minimizer
        over it (a simplex projection for the unigrams, ``qp_iters`` projected steps with exact
        line search for the bigrams); pairwise multi-label -- exact block minimization (a clipped
        Newton step per binary unigram, an exact weighted projection onto the tetrahedron per
        pairwise factor). Chains only: ``"bcfw"`` -- one Frank-Wolfe step per factor towards the
        oracle's vertex, exact line search (the paper's Algorithm 4, the solver its experiments
        ran); ``"afw"`` -- away-step Frank-Wolfe per factor, the block repeated after a drop step
        until a non-drop step (at most ``qp_iters`` times; the paper's Algorithm 2).
    qp_iters
        Inner projected steps per bigram block visit (``"active_qp"``); steps per block after
        drop steps (``"afw"``).
    inner
        Sweeps over an example's factors per multiplier step (1: the paper's one pass of
        block steps between two multiplier steps).
    rounds
        Chains: local method-of-multipliers iterations per example visit (``inner`` sweeps then
        the example's multiplier step, ``rounds`` times).
    averaging
        Chains: predict with the weighted average of the iterates (weights proportional to the
        example visit's index, as BCFW's ``averaging``; Lacoste-Julien et al., "Block-Coordinate
        Frank-Wolfe Optimization for Structural SVMs", ICML 2013), kept lazily at no extra cost per
        step. The certificate's primal is then the averaged weights'. The window restarts when an
        example is evicted.
    replay
        Held examples revisited (one sweep each) after each new example.
    capacity
        Held examples (FIFO window; the oldest is evicted, its contribution removed). None:
        unbounded.
    active_cap
        Initial capacity of each factor's active set (grown when a pass fills one).
    mips_k, sketch_dim
        Neighbours per query and sketch dimension of the HNSW index (``fmo="mips"``).
    grow, add_tol
        Pairwise multi-label: at most ``grow`` inactive pairwise factors are activated per
        example visit (the block-greedy choice of the paper's Algorithm 3, by Frank-Wolfe gap at
        the factor's ground-truth vertex), those with a gap > ``add_tol``. The search is exact and
        prunes pairs whose labels sit at their ground truth (see
        :func:`streamssvm._kernels.gdmm.ml_greedy_add`). Default 16 (yeast, 300 examples,
        lam = 1, rho = 3, 40 passes: grow = 4 left the primal 5e-4 higher than grow = 16 or 91).
    seed
        Random seed (sampling order, slices, index).

    Examples
    --------
    >>> import streamssvm as ss
    >>> tagger = ss.SequenceTagger(learner=ss.learners.GDMM(lam=0.01, replay=3, seed=0))
    >>> for i in range(60):
    ...     words = ["the", "dog", "runs"] if i % 2 else ["a", "cat", "sleeps"]
    ...     tagger.learn_one([{"w=" + w: 1} for w in words], ["DET", "NOUN", "VERB"])
    >>> tagger.predict_one([{"w=the": 1}, {"w=cat": 1}, {"w=runs": 1}])
    ['DET', 'NOUN', 'VERB']
    >>> c = tagger.certificate()
    >>> c.raw_gap == c.primal - c.dual and c.primal >= c.dual - 1e-9
    True

    The paper's Frank-Wolfe block solver (chains; ``"afw"`` for away steps):

    >>> fw = ss.SequenceTagger(learner=ss.learners.GDMM(lam=0.01, replay=3, seed=0, solver="bcfw"))
    >>> for i in range(60):
    ...     words = ["the", "dog", "runs"] if i % 2 else ["a", "cat", "sleeps"]
    ...     fw.learn_one([{"w=" + w: 1} for w in words], ["DET", "NOUN", "VERB"])
    >>> fw.predict_one([{"w=a": 1}, {"w=dog": 1}, {"w=sleeps": 1}])
    ['DET', 'NOUN', 'VERB']

    Multi-label with a co-occurrence factor for every pair of labels:

    >>> m = ss.MultiLabelSSVM(learner=ss.learners.GDMM(lam=0.05, replay=2, seed=0), pairwise=True)
    >>> for i in range(80):
    ...     a = i % 2
    ...     m.learn_one({"a": a, "b": 1 - a}, {"red": bool(a), "round": bool(a), "blue": not a})
    >>> m.predict_one({"a": 1, "b": 0})
    {'red': True, 'round': True, 'blue': False}
    >>> c = m.certificate()
    >>> c.exact and c.dual <= c.primal
    True
    """

    structures = ("chain", "multilabel")

    def __init__(self, lam: float = 1e-3, rho: float = 1.0, eta: float = 1.0, fmo: str = "heap",
                 nu: int = 1, solver: str = "active_qp", qp_iters: int = 5, inner: int = 1, rounds: int = 1,
                 replay: int = 1, averaging: bool = True,
                 capacity: int | None = None, active_cap: int = 8, mips_k: int = 10,
                 sketch_dim: int | None = 64, grow: int = 16, add_tol: float = 1e-9, seed: int | None = None,
                 rescaling: str = "margin"):
        self.lam = check_number("lam", lam, low=0.0, low_open=True)
        self.rho = check_number("rho", rho, low=0.0, low_open=True)
        self.eta = check_number("eta", eta, low=0.0, high=1.0, low_open=True)
        self.fmo = check_choice("fmo", fmo, _FMO)
        self.nu = check_number("nu", nu, low=1, integer=True)
        self.solver = check_choice("solver", solver, _SOLVERS)
        self.qp_iters = check_number("qp_iters", qp_iters, low=1, integer=True)
        self.inner = check_number("inner", inner, low=1, integer=True)
        self.rounds = check_number("rounds", rounds, low=1, integer=True)
        if not isinstance(averaging, (bool, np.bool_)):
            raise TypeError(f"averaging must be True or False, got {averaging!r}")
        self.averaging = bool(averaging)
        self.replay = check_number("replay", replay, low=0, integer=True)
        self.capacity = check_number("capacity", capacity, low=1, integer=True, allow_none=True)
        self.active_cap = check_number("active_cap", active_cap, low=2, integer=True)
        self.mips_k = check_number("mips_k", mips_k, low=1, integer=True)
        self.sketch_dim = check_number("sketch_dim", sketch_dim, low=1, integer=True, allow_none=True)
        self.grow = check_number("grow", grow, low=1, integer=True)
        self.add_tol = check_number("add_tol", add_tol, low=0.0)
        self.seed = seed
        self.rescaling = check_choice("rescaling", rescaling, ("margin",))
        self._bound = False

    # ------------------------------------------------------------------ binding / storage
    @property
    def W(self):
        """Multi-label: the (unscaled) weights as the estimator reads them; chains: None."""
        ml = getattr(self, "_ml", None)
        return None if ml is None else _MLWeights(ml)

    def bind(self, structure, labels):
        self.check_structure(structure)
        self.structure = structure
        self._ml = None
        if structure.name == "multilabel":
            if not getattr(structure, "pairwise", False):
                raise ValueError("GDMM learns multi-label models with pairwise=True (binary variables coupled by "
                                 "pairwise factors); independent labels have nothing to decompose: use "
                                 "learners.BCFW or learners.SGD")
            if self.solver != "active_qp":
                raise ValueError(f"solver={self.solver!r} is a chain block solver; pairwise multi-label GDMM "
                                 "solves its blocks exactly (solver='active_qp')")
            self._ml = _MLPairGDMM(self, structure, labels)
            self._K = 0
            self._rng = np.random.default_rng(self.seed)
            self.n_learned = 0
            self.passes_done = 0
            self._bound = True
            return
        self._ad = _ChainAdapter(structure)
        self._use_trans = self._ad.use_trans
        self._K = 0
        Kc = 4
        self._d = 0
        self.Wu = np.zeros((2 + 1, Kc))   # feature-major: rows 0 / 1 start / end biases
        self.table = BigramTable(0, Kc, heaps=self.fmo != "brute")
        self._C = self._ad.cost_matrix(Kc, labels)
        self._rng = np.random.default_rng(self.seed)
        self._seed_base = int(self._rng.integers(2**31 - 1))
        self._tick = 0
        self.counters = np.zeros(G.N_COUNTERS, dtype=np.int64)
        self.n_learned = 0
        self.passes_done = 0
        self.seconds_oracle = 0.0
        self._acap = self.active_cap
        self._ZW = np.zeros_like(self.Wu)
        self._ZT = np.zeros_like(self.table.T)
        self._avg_k = 0
        self._pred_cache = None
        self._alloc_store(16, 64, 512)
        self._mips = UnigramMIPS(k=self.mips_k, sketch_dim=self.sketch_dim, seed=self.seed or 0) \
            if self.fmo == "mips" else None
        self._bound = True

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
        self._U = G.GUni(np.zeros((n_tok, a), dtype=np.int32), np.zeros((n_tok, a)), np.zeros((n_tok, a)),
                         np.zeros((n_tok, a)), np.zeros(n_tok, dtype=np.int32))
        self._B = G.GBi(np.zeros((n_tok, a), dtype=np.int32), np.zeros((n_tok, a), dtype=np.int32),
                        np.zeros((n_tok, a)), np.zeros(n_tok, dtype=np.int32))
        self._order = []   # FIFO of held example slots

    @staticmethod
    def _grow1(x, n):
        if x.shape[0] >= n:
            return x
        shape = (max(n, 2 * x.shape[0]),) + x.shape[1:]
        y = np.zeros(shape, dtype=x.dtype)
        y[:x.shape[0]] = x
        return y

    def _reserve(self, n_ex, n_tok, nnz):
        g = self._grow1
        self._ex_ptr = g(self._ex_ptr, n_ex + 1)
        self._ex_alive = g(self._ex_alive, n_ex)
        self._tok_ptr = g(self._tok_ptr, n_tok + 1)
        self._fidx = g(self._fidx, nnz)
        self._fval = g(self._fval, nnz)
        for k in ("_ytrue", "_xsq", "_first", "_last", "_linv"):
            setattr(self, k, g(getattr(self, k), n_tok))
        self._U = G.GUni(*(g(x, n_tok) for x in self._U))
        self._B = G.GBi(*(g(x, n_tok) for x in self._B))

    def _grow_active(self, cap):
        """Widen every active set to ``cap`` slots."""
        def w(x):
            y = np.zeros((x.shape[0], cap), dtype=x.dtype)
            y[:, :x.shape[1]] = x
            return y
        U, B = self._U, self._B
        self._U = G.GUni(w(U.lab), w(U.mu), w(U.lamL), w(U.lamR), U.cnt)
        self._B = G.GBi(w(B.a), w(B.b), w(B.mu), B.cnt)
        self._acap = cap
        self._scratch = None

    def ensure(self, n_features, labels):
        if self._ml is not None:
            self._ml.ensure(n_features, labels)
            self._K = self._ml.K
            return
        n_labels = len(labels)
        Dc, Kc = self.Wu.shape
        if n_labels > Kc:
            Kc = max(n_labels, int(Kc * 1.25) + 1)
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
    def n_blocks(self):
        if self._ml is not None:
            return self._ml.n_blocks
        return int(np.count_nonzero(self._ex_alive[:self._n_ex]))

    def _s(self):
        return 1.0 / (self.lam * max(self.n_blocks, 1))

    # ------------------------------------------------------------------ bundles
    def _data(self):
        return G.GData(self._ex_ptr, self._ex_alive, self._tok_ptr, self._fidx, self._fval, self._ytrue,
                       self._xsq, self._first, self._last, self._linv)

    def _sc(self):
        if getattr(self, "_scratch", None) is None or self._scratch.augL.shape[0] < self.table.Kc:
            self._scratch = new_scratch(self.table.Kc, self._acap)
        return self._scratch

    # ------------------------------------------------------------------ learning
    def _add_example(self, tok_ptr, fidx, fval, y):
        L = len(tok_ptr) - 1
        if L == 0:
            raise ValueError("an example needs at least one token")
        if self.capacity is not None and self.n_blocks >= self.capacity:
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
        self._ex_ptr[e] = t0
        self._ex_ptr[e + 1] = t0 + L
        self._ex_alive[e] = True
        self._n_ex, self._n_tok, self._nnz = e + 1, t0 + L, z0 + nnz
        G.init_blocks(e, self._data(), self._U, self._B)
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
        if not self.averaging or self._avg_k < 2:
            return self.Wu, self.table.T
        if self._pred_cache is None:
            self._avg_fit()
            Wk = 0.5 * self._avg_k * (self._avg_k + 1.0)
            self._pred_cache = (self.Wu - self._ZW / Wk, self.table.T - self._ZT / Wk)
        return self._pred_cache

    def _evict(self, e):
        self.table.ready()
        if self.averaging:
            self._avg_restart()
        G.remove_example(e, self._data(), self._U, self._B, self.Wu, self.table.T, self._K, self.table.Kc,
                         self._use_trans, self.table.heaps, self.table.H)
        if self._n_tok > 1024 and self._dead_tokens() > self._n_tok // 2:
            self._compact()

    def _dead_tokens(self):
        lens = np.diff(self._ex_ptr[:self._n_ex + 1])
        return int(lens[~self._ex_alive[:self._n_ex]].sum())

    def _compact(self):
        """Drop evicted examples from the arrays (slots are renumbered)."""
        alive = np.flatnonzero(self._ex_alive[:self._n_ex])
        old = (self._ex_ptr.copy(), self._tok_ptr.copy(), self._fidx, self._fval, self._ytrue, self._xsq,
               self._first, self._last, self._linv, self._U, self._B)
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
        for name, src in zip(("_ytrue", "_xsq", "_first", "_last", "_linv"), old[4:9]):
            getattr(self, name)[:nt] = src[toks]
        self._U = G.GUni(*(np.ascontiguousarray(x[toks]) for x in old[9]))
        self._B = G.GBi(*(np.ascontiguousarray(x[toks]) for x in old[10]))
        self._reserve(2 * m + 16, 2 * nt + 64, 2 * nz + 512)
        self._n_ex, self._n_tok, self._nnz = m, nt, nz
        self._order = [remap[e] for e in order]

    def _seed(self):
        self._tick += 1
        return int((self._seed_base + self._tick * 2654435761) % 2147483647)

    def _sweep(self, order, mult):
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
        A = G.GAvg(self._ZW, self._ZT, np.array([0.0 if self.averaging else -1.0]))
        res = G.run_pass(order, self._data(), self._U, self._B, self.Wu, self.table.T, self._C, self._K,
                         self.table.Kc, self.Wu.shape[0], self._s(), float(self.rho), float(self.eta),
                         self._use_trans, G.ORACLE_BRUTE if self.fmo == "brute" else G.ORACLE_HEAP,
                         uni_mode, int(self.nu), self._seed(), int(self.qp_iters), self.table.heaps, cptr, cands,
                         self.table.H, SC, self.counters, bool(mult), int(self.inner), int(self.rounds), A,
                         int(self._avg_k), _SOLVER_CODE[self.solver])
        if self.averaging:
            self._avg_k += int(np.count_nonzero(self._ex_alive[order]))
        if self._mips is not None:
            ch = np.flatnonzero(SC.changed[:self._K])
            SC.changed[:] = 0
            self._mips.changed(ch)
        if self.counters[G.C_FULL] > full0 and self._acap < 512:
            self._grow_active(2 * self._acap)
        return res

    def learn(self, tok_ptr, fidx, fval, y, Ki=1):
        """Hold a new example (its factors start at the ground truth), sweep its factors and
        take its multiplier step, then ``replay`` sweeps on random held examples."""
        if self._ml is not None:
            e = self._ml.add(tok_ptr, fidx, fval, y, Ki)
            self._ml.sweep([e], True)
            self.n_learned += 1
            if self.replay:
                alive = self._ml.alive_slots()
                self._ml.sweep(self._rng.choice(alive, size=min(self.replay, len(alive)), replace=False), True)
            return e
        e = self._add_example(tok_ptr, fidx, fval, np.asarray(y, dtype=np.int32))
        self._sweep([e], True)
        self.n_learned += 1
        if self.replay:
            alive = np.flatnonzero(self._ex_alive[:self._n_ex])
            pick = self._rng.choice(alive, size=min(self.replay, len(alive)), replace=False)
            self._sweep(pick, True)
        if self._settle is not None:
            self._settle_new(e)
        return e

    #: sweeps over the examples held while a single tag existed and the second tag's first one
    SETTLE_SWEEPS = 3
    _settle = None   # set by ensure when the second tag arrives, used by the next learn

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
            self._sweep(order, True)

    def learn_batch(self, ex_tok, tok_ptr, fidx, fval, y_ptr, ys, Ki=None):
        for e in range(len(ex_tok) - 1):
            a, b = int(ex_tok[e]), int(ex_tok[e + 1])
            tp = np.asarray(tok_ptr[a:b + 1], dtype=np.int64)
            Ke = 1 if Ki is None else (Ki if np.isscalar(Ki) else int(Ki[e]))
            self.learn(tp - tp[0], fidx[tp[0]:tp[-1]], fval[tp[0]:tp[-1]], ys[y_ptr[e]:y_ptr[e + 1]], Ki=Ke)

    def refine(self, passes=1.0, tol=None, progress=None):
        """``passes`` passes over the held examples in random order, each followed by the
        multiplier step on all of them (the paper's Algorithm 1). With ``tol``, stop once the
        certificate's gap is <= tol (checked after every pass)."""
        check_number("passes", passes, low=0.0)
        total = int(round(passes))
        for p in range(total):
            if self._ml is not None:
                self._ml.sweep(self._rng.permutation(self._ml.alive_slots()), True)
            else:
                alive = np.flatnonzero(self._ex_alive[:self._n_ex])
                self._sweep(self._rng.permutation(alive), True)
            self.passes_done += 1
            if progress is not None:
                progress((p + 1) / total, self)
            if tol is not None and self.certificate().gap <= tol:
                return

    # ------------------------------------------------------------------ prediction
    def predict(self, ex_tok, tok_ptr, fidx, fval, y_ptr, n_out):
        if self._ml is not None:
            return self._ml.predict(ex_tok, tok_ptr, fidx, fval, y_ptr, n_out)
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
        ybuf = np.zeros(Kc, dtype=np.int32)
        for e in range(len(ex_tok) - 1):
            a, b = int(ex_tok[e]), int(ex_tok[e + 1])
            L = b - a
            if L == 0:
                continue
            tp = np.asarray(tok_ptr[a:b + 1], dtype=np.int64)
            G.emission_scores(Wp, K, s, tp - tp[0], fidx[tp[0]:tp[-1]], fval[tp[0]:tp[-1]], L, False, S)
            o = out[y_ptr[e]:y_ptr[e] + L]
            self._ad.decode(S, Tp, Bm, s, L, K, self._use_trans, o, self._C, 0.0, V, bp, ybuf, o)
        return out

    # ------------------------------------------------------------------ certificate
    def certificate(self):
        """Exact primal (loss-augmented Viterbi on every held example), the dual at the
        repaired (consistent) point, gap = P(w) - D(repaired) >= P(w) - min P. Observes only.
        Multi-label: see :meth:`_MLPairGDMM.certificate`."""
        if self._ml is not None:
            self._ml.passes_done = self.passes_done
            return self._ml.certificate()
        t0 = time.perf_counter()
        n = self.n_blocks
        lam = float(self.lam)
        if n == 0 or self._K == 0:
            return cert_mod.Certificate(0.0, 0.0, 0.0, n, 0, time.perf_counter() - t0, True, lam,
                                        note="no examples held")
        s = self._s()
        Wp, Tp = self._pred_weights()
        hinge, dloss, rep, Wr, Tr = self._repaired_sums(Wp, Tp)
        sq = float(np.vdot(Wp, Wp) + np.vdot(Tp, Tp))
        sqr = float(np.vdot(Wr, Wr) + np.vdot(Tr, Tr))
        reg = 0.5 * lam * s * s * sq
        primal = reg + hinge / n
        dual = dloss / n - 0.5 * lam * s * s * sqr
        raw = primal - dual
        resid = 0.0
        if self._use_trans:
            Dt = self._data()
            for e in np.flatnonzero(self._ex_alive[:self._n_ex]):   # eta = 0: measures the consistency residual, changes nothing
                resid += G.multiplier_step(int(e), Dt, self._U, self._B, 0.0)
        c = cert_mod.Certificate(
            gap=max(raw, 0.0), primal=primal, dual=dual, n_blocks=n, oracle_calls=n,
            seconds=time.perf_counter() - t0, exact=True, lam=lam, regularizer=reg, hinge=hinge / n,
            dual_loss=dloss / n, block_gap_sum=raw, raw_gap=raw,
            note=("dual at the factor marginals repaired into a consistent point (a Markov chain from "
                  "the bigram row conditionals): a feasible BCFW dual point, so gap = P(w) - D bounds "
                  "P(w) - min P; primal by exact loss-augmented Viterbi at the weights that predict"
                  + (" (the averaged iterate)" if Wp is not self.Wu else "")),
            extra={"raw_gap": raw, "consistency_residual": resid, "repair_distance": rep,
                   "passes": self.passes_done, "averaged": Wp is not self.Wu})
        return c

    def _repaired_sums(self, Wh=None, Th=None):
        """(hinge sum at the weights Wh, Th (default: the current iterate), dual loss sum and repair distance of the repaired
        point, its unnormalized weights Wr, Tr): one pass of loss-augmented Viterbi and repair
        over the held examples. Observes only."""
        s = self._s()
        K, Kc = self._K, self.table.Kc
        Dt = self._data()
        T = self.table.T
        Wh = self.Wu if Wh is None else Wh
        Th = T if Th is None else Th
        Bm = np.ascontiguousarray(Wh[:2])
        alive = np.flatnonzero(self._ex_alive[:self._n_ex])
        Lmax = int(np.max(self._ex_ptr[alive + 1] - self._ex_ptr[alive]))
        S = np.zeros((Lmax, Kc))
        V = np.zeros((Lmax, Kc))
        bp = np.zeros((Lmax, Kc), dtype=np.int32)
        ybuf = np.zeros(Kc, dtype=np.int32)
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
            G.emission_scores(Wh, K, s, tpl, fi, fv, L, False, S)
            yt = self._ytrue[a:b]
            best = self._ad.decode(S, Th, Bm, s, L, K, self._use_trans, yt, self._C, 1.0, V, bp, ybuf, lab)
            hinge += best - self._ad.score(S, Th, Bm, s, yt, L, K, self._use_trans)
            rep += G.repaired_unigrams(e, Dt, self._U, self._B, K, self._use_trans, M, prev, nxt, row)
            dloss += G.repaired_emissions(e, Dt, K, self._C, M, Wr)
            if self._use_trans:
                G.repaired_pairs(e, Dt, self._U, self._B, K, M, Tr, row)
        return hinge, dloss, rep, Wr, Tr

    # ------------------------------------------------------------------ state
    def state(self):
        if self._ml is not None:
            st = self._ml.state()
            st.update({"ml": 1, "n_learned": self.n_learned, "passes_done": self.passes_done,
                       "rng": self._rng_state()})
            return st
        ne, nt, nz = self._n_ex, self._n_tok, self._nnz
        return {
            "K": self._K, "d": self._d, "tick": self._tick, "seed_base": self._seed_base,
            "n_learned": self.n_learned, "passes_done": self.passes_done, "acap": self._acap,
            "counters": self.counters.copy(), "Wu": self.Wu.copy(), "T": self.table.T.copy(), "C": self._C.copy(),
            "ex_ptr": self._ex_ptr[:ne + 1].copy(), "ex_alive": self._ex_alive[:ne].copy(),
            "tok_ptr": self._tok_ptr[:nt + 1].copy(), "fidx": self._fidx[:nz].copy(), "fval": self._fval[:nz].copy(),
            "ytrue": self._ytrue[:nt].copy(), "xsq": self._xsq[:nt].copy(), "first": self._first[:nt].copy(),
            "last": self._last[:nt].copy(), "linv": self._linv[:nt].copy(),
            "U": {k: v[:nt].copy() for k, v in self._U._asdict().items()},
            "B": {k: v[:nt].copy() for k, v in self._B._asdict().items()},
            "order": np.asarray(self._order, dtype=np.int64),
            "rng": self._rng_state(),
            "avg_k": self._avg_k, "ZW": self._ZW.copy(), "ZT": self._ZT.copy(),
        }

    def _rng_state(self):
        bs = self._rng.bit_generator.state
        return {"state": str(bs["state"]["state"]), "inc": str(bs["state"]["inc"]),
                "has_uint32": int(bs["has_uint32"]), "uinteger": int(bs["uinteger"])}

    def _set_rng_state(self, r):
        bg = self._rng.bit_generator
        s0 = bg.state
        s0["state"] = {"state": int(r["state"]), "inc": int(r["inc"])}
        s0["has_uint32"] = int(r["has_uint32"])
        s0["uinteger"] = int(r["uinteger"])
        bg.state = s0

    def restore(self, structure, labels, st):
        from ._gdmm_state import validate_gdmm_state
        validate_gdmm_state(st, structure, labels)   # refuses a crafted state before anything changes
        self.bind(structure, labels)
        if self._ml is not None:
            if "ml" not in st:
                raise ValueError("invalid GDMM state: a chain model's state for a multi-label structure")
            self._ml.restore(st)
            self._K = self._ml.K
            self.n_learned = int(st["n_learned"])
            self.passes_done = int(st["passes_done"])
            self._set_rng_state(st["rng"])
            return
        self._K = int(st["K"])
        self._d = int(st["d"])
        self._tick = int(st["tick"])
        self._seed_base = int(st["seed_base"])
        self.n_learned = int(st["n_learned"])
        self.passes_done = int(st["passes_done"])
        self._acap = int(st["acap"])
        self.counters = np.array(st["counters"], dtype=np.int64)
        self.Wu = np.array(st["Wu"], dtype=np.float64)
        T = np.array(st["T"], dtype=np.float64)
        self.table = BigramTable(self._K, T.shape[0], heaps=self.fmo != "brute")
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
        U, B = st["U"], st["B"]
        self._U = G.GUni(np.array(U["lab"], np.int32), np.array(U["mu"], float), np.array(U["lamL"], float),
                         np.array(U["lamR"], float), np.array(U["cnt"], np.int32))
        self._B = G.GBi(np.array(B["a"], np.int32), np.array(B["b"], np.int32), np.array(B["mu"], float),
                        np.array(B["cnt"], np.int32))
        self._n_ex = len(self._ex_alive)
        self._n_tok = len(self._ytrue)
        self._nnz = len(self._fidx)
        order = [int(e) for e in st["order"]]
        # files written before _compact kept its FIFO order list only the examples that arrived
        # after the last compaction: the held examples missing from it are older, evict them first
        listed = set(order)
        self._order = [int(e) for e in np.flatnonzero(self._ex_alive) if int(e) not in listed] + order
        self._set_rng_state(st["rng"])
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


# ------------------------------------------------------------------ multi-label with pairwise factors
class _MLWeights:
    """The estimator-facing view of the multi-label weights (``W.E``, ``W.T``, ``W.B``,
    ``W.Kc``: what :class:`~streamssvm.MultiLabelSSVM` reads), unscaled (w = s U)."""

    def __init__(self, eng):
        self._eng = eng

    E = property(lambda self: self._eng.E)
    T = property(lambda self: self._eng.T)
    B = property(lambda self: np.zeros((2, self._eng.Kc)))
    Kc = property(lambda self: self._eng.Kc)


_ML_FACTOR_BYTES = 1 << 30


class _MLPairGDMM:
    """GDMM's running state for :class:`~streamssvm.MultiLabelSSVM` with ``pairwise=True``
    (Yen et al. 2016, section 3.2 (b), Algorithm 3: block-greedy coordinate descent over
    binary unigram and pairwise interaction factors). Kernels and mathematics:
    :mod:`streamssvm._kernels.gdmm` (section "multi-label, pairwise")."""

    def __init__(self, cfg, structure, labels):
        self.cfg = cfg
        self.structure = structure
        self.K = 0
        self.Kc = 4
        self.d = 0
        self.E = np.zeros((1, self.Kc))
        self.T = np.zeros((self.Kc, self.Kc))
        self.counters = np.zeros(G.ML_N_COUNTERS, dtype=np.int64)
        self.fcap = 8
        self.n = 0          # slots used
        self.nnz = 0
        self._alloc(16, 256)
        self.order = []
        self.tub = np.full(self.Kc, -np.inf)   # per-label bound on U_T (G.ml_t_bound), derived from T
        self._visits = 0

    #: inactive pair-factor search: "pruned" (exact, see G.ml_greedy_add) or "full" (all K^2 pairs)
    pair_search = "pruned"
    #: the bound ``tub`` is recomputed exactly every this many example visits (it only loosens between)
    TUB_REFRESH = 64

    def refresh_bound(self):
        if self.tub.shape[0] != self.Kc:
            self.tub = np.full(self.Kc, -np.inf)
        G.ml_t_bound(self.T, self.K, self.tub)
        self._visits = 0

    # -------------------------------------------------------------- storage
    def _alloc(self, n_ex, nnz):
        Kc, fc = self.Kc, self.fcap
        self.x_ptr = np.zeros(n_ex + 1, dtype=np.int64)
        self.fidx = np.zeros(nnz, dtype=np.int64)
        self.fval = np.zeros(nnz)
        self.xsq = np.zeros(n_ex)
        self.Ki = np.ones(n_ex)
        self.Y = np.zeros((n_ex, Kc))
        self.alive = np.zeros(n_ex, dtype=np.bool_)
        self.u = np.zeros((n_ex, Kc))
        self.Dv = np.zeros((n_ex, Kc))
        self.fk = np.zeros((n_ex, fc), dtype=np.int32)
        self.fl = np.zeros((n_ex, fc), dtype=np.int32)
        self.fz = np.zeros((n_ex, fc, 3))
        self.flam = np.zeros((n_ex, fc, 2))
        self.fcnt = np.zeros(n_ex, dtype=np.int32)
        self.nact = np.zeros((n_ex, Kc))

    _ROWS = ("xsq", "Ki", "Y", "alive", "u", "Dv", "fk", "fl", "fz", "flam", "fcnt", "nact")
    #: rows derived from the others (not saved): nact[i, k] = active factors of example i containing k
    _DERIVED = ("nact",)
    #: how inactive pair factors are defined in a saved state: "product" = implicitly (u_k, u_l, u_k u_l)
    #: (current); states without the key put them at the ground truth (converted on restore)
    INACTIVE = "product"

    def _reserve(self, n_ex, nnz):
        g = GDMM._grow1
        self.x_ptr = g(self.x_ptr, n_ex + 1)
        self.fidx = g(self.fidx, nnz)
        self.fval = g(self.fval, nnz)
        for k in self._ROWS:
            setattr(self, k, g(getattr(self, k), n_ex))

    def _widen(self, Kc=None, fcap=None):
        """Grow the label capacity (columns of the per-example arrays) or the factor capacity."""
        def w(x, axis_len):
            shape = (x.shape[0], axis_len) + x.shape[2:]
            y = np.zeros(shape, dtype=x.dtype)
            y[:, :x.shape[1]] = x
            return y
        if Kc is not None and Kc > self.u.shape[1]:
            self.Y, self.u, self.Dv, self.nact = w(self.Y, Kc), w(self.u, Kc), w(self.Dv, Kc), w(self.nact, Kc)
        if fcap is not None and fcap > self.fk.shape[1]:
            self.fk, self.fl, self.fz, self.flam = (w(self.fk, fcap), w(self.fl, fcap), w(self.fz, fcap),
                                                    w(self.flam, fcap))
            self.fcap = fcap

    def ensure(self, n_features, labels):
        K = len(labels)
        Kc = self.Kc if K <= self.Kc else max(K, int(self.Kc * 1.25) + 1)
        D = max(int(n_features), 1)
        if Kc > self.Kc or D > self.E.shape[0]:
            E = np.zeros((D if D <= self.E.shape[0] else max(D, int(self.E.shape[0] * 1.5) + 1), Kc))
            E[:self.E.shape[0], :self.Kc] = self.E
            self.E = E
        if Kc > self.Kc:
            T = np.zeros((Kc, Kc))
            T[:self.Kc, :self.Kc] = self.T
            self.T = T
            self._widen(Kc=Kc)
            self.Kc = Kc
        if K != self.K:
            self.structure.cost_matrix(Kc, labels)   # refuses label counts the structure cannot decode
            self.K = K
            self.refresh_bound()
        self.d = max(self.d, int(n_features))

    @property
    def n_blocks(self):
        return int(np.count_nonzero(self.alive[:self.n]))

    def s(self):
        return 1.0 / (self.cfg.lam * max(self.n_blocks, 1))

    def data(self):
        return G.MLData(self.x_ptr, self.fidx, self.fval, self.xsq, self.Ki, self.Y, self.alive)

    def dual(self):
        return G.MLDual(self.u, self.Dv, self.fk, self.fl, self.fz, self.flam, self.fcnt, self.nact)

    # -------------------------------------------------------------- learning
    def add(self, tok_ptr, fidx, fval, y, Ki):
        if len(tok_ptr) != 2:
            raise ValueError("a multi-label example is one feature vector (one token)")
        cfg = self.cfg
        if cfg.capacity is not None and self.n_blocks >= cfg.capacity:
            i = self.order.pop(0)
            G.ml_remove_example(i, self.data(), self.dual(), self.E, self.T, self.K, self.tub)
            if self.n > 1024 and self.n_blocks < self.n // 2:
                self._compact()
        a, b = int(tok_ptr[0]), int(tok_ptr[1])
        nz = b - a
        i, z0 = self.n, self.nnz
        self._reserve(i + 1, z0 + nz)
        self.fidx[z0:z0 + nz] = fidx[a:b]
        self.fval[z0:z0 + nz] = fval[a:b]
        self.x_ptr[i] = z0
        self.x_ptr[i + 1] = z0 + nz
        fv = np.asarray(fval[a:b], dtype=np.float64)
        self.xsq[i] = float(fv @ fv)
        self.Ki[i] = float(max(Ki, 1))
        self.Y[i] = 0.0
        self.Y[i, np.asarray(y, dtype=np.int64)] = 1.0
        self.u[i] = self.Y[i]      # ground truth: feasible, adds nothing to the weights
        self.Dv[i] = 0.0
        self.nact[i] = 0.0
        self.fcnt[i] = 0
        self.alive[i] = True
        self.n, self.nnz = i + 1, z0 + nz
        self.order.append(i)
        return i

    def _compact(self):
        alive = np.flatnonzero(self.alive[:self.n])
        remap = {int(e): j for j, e in enumerate(alive)}
        old = {k: getattr(self, k) for k in self._ROWS}
        xp, fi, fv = self.x_ptr, self.fidx, self.fval
        zs = np.concatenate([np.arange(xp[e], xp[e + 1]) for e in alive]) if len(alive) else np.zeros(0, np.int64)
        lens = xp[alive + 1] - xp[alive]
        m = len(alive)
        self._alloc(max(16, 2 * m), max(256, 2 * len(zs)))
        self.x_ptr[1:m + 1] = np.cumsum(lens)
        self.fidx[:len(zs)] = fi[zs]
        self.fval[:len(zs)] = fv[zs]
        for k in self._ROWS:
            getattr(self, k)[:m] = old[k][alive]
        self.n, self.nnz = m, len(zs)
        self.order = [remap[e] for e in self.order]

    def sweep(self, order, mult):
        if len(order) == 0 or self.K == 0:
            return 0.0
        cfg = self.cfg
        full0 = self.counters[G.ML_C_FULL]
        if self._visits >= self.TUB_REFRESH:
            self.refresh_bound()
        self._visits += len(order)
        res = G.ml_run_pass(np.asarray(order, dtype=np.int64), self.data(), self.dual(), self.E, self.T, self.K,
                            self.s(), float(cfg.rho) * self.s(), float(cfg.eta), int(cfg.grow), float(cfg.add_tol),
                            int(cfg.inner), bool(mult), self.counters, self.tub, self.pair_search == "full")
        maxf = self.K * (self.K - 1) // 2
        new = min(maxf, 2 * self.fcap)
        # factor slots cost 48 bytes per held row; past _ML_FACTOR_BYTES the greedy step keeps
        # refusing additions (counted in counters[ML_C_FULL]) instead of growing
        if self.counters[G.ML_C_FULL] > full0 and self.fcap < maxf and self.fk.shape[0] * new * 48 <= _ML_FACTOR_BYTES:
            self._widen(fcap=new)
        return res

    def alive_slots(self):
        return np.flatnonzero(self.alive[:self.n])

    # -------------------------------------------------------------- prediction
    def predict(self, ex_tok, tok_ptr, fidx, fval, y_ptr, n_out):
        out = np.zeros(n_out, dtype=np.int32)
        K = self.K
        if K == 0:
            return out
        s = self.s()
        lp = self.structure.uses_lp(K)
        S = np.zeros((1, self.Kc))
        ybuf = np.zeros(K, dtype=np.int32)
        lab = np.zeros(K, dtype=np.int32)
        best_m = np.zeros(K + 1)
        for e in range(len(ex_tok) - 1):
            if ex_tok[e + 1] == ex_tok[e]:
                continue
            t = int(ex_tok[e])
            a, b = int(tok_ptr[t]), int(tok_ptr[t + 1])
            sc = s * (np.asarray(fval[a:b], dtype=np.float64) @ self.E[np.asarray(fidx[a:b], dtype=np.int64), :K]) \
                if b > a else np.zeros(K)
            if lp:
                lab[:] = self._predict_reduced(sc, s)
            else:
                S[0, :K] = sc
                so._mrf_enum(S, self.T, s, K, ybuf, 0, 0.0, 1, 0.0, best_m, lab)
            out[y_ptr[e]:y_ptr[e] + K] = lab
        return out

    def _predict_reduced(self, sc, s):
        """MAP labeling above 16 labels. Labels that are off in some optimum are removed first:
        if theta_k + sum_{l in R} max(0, P_kl) <= 0 over the labels R still undecided, then for
        the LP relaxation (and the integer problem) theta_k mu_k + sum_l P_kl mu_kl <=
        mu_k (theta_k + sum max(0, P_kl)) <= 0 since mu_kl <= mu_k, so setting mu_k = 0 (and its
        pair marginals to 0, still in the local polytope) loses nothing; repeated until no label
        is removed. The rest is solved exactly by enumeration when at most 16 labels remain,
        else by the LP relaxation (:mod:`streamssvm.oracles.lp`) on the remaining labels."""
        K = self.K
        P = s * np.triu(self.T[:K, :K], 1)
        Pp = np.maximum(P + P.T, 0.0)
        live = np.ones(K, dtype=bool)
        while True:
            ub = sc + Pp[:, live].sum(axis=1)
            drop = live & (ub <= 0.0)
            if not drop.any():
                break
            live &= ~drop
        R = np.flatnonzero(live)
        out = np.zeros(K, dtype=np.int32)
        m = len(R)
        if m == 0:
            return out
        if m <= so.MLPAIR_MAX_LABELS:
            S = np.zeros((1, m))
            S[0] = sc[R]
            lab = np.zeros(m, dtype=np.int32)
            so._mrf_enum(S, np.ascontiguousarray(self.T[np.ix_(R, R)]), s, m, np.zeros(m, dtype=np.int32), 0, 0.0,
                         1, 0.0, np.zeros(m + 1), lab)
        else:
            from ..oracles.lp import PairwiseMRFLP
            lab = PairwiseMRFLP(sc[R], P[np.ix_(R, R)], np.zeros(m, np.int32), 1).oracle(0.0).labeling
        out[R] = lab
        return out

    # -------------------------------------------------------------- certificate
    def certificate(self):
        t0 = time.perf_counter()
        cfg = self.cfg
        n = self.n_blocks
        lam = float(cfg.lam)
        if n == 0 or self.K == 0:
            return cert_mod.Certificate(0.0, 0.0, 0.0, n, 0, time.perf_counter() - t0, True, lam,
                                        note="no examples held")
        K, s = self.K, self.s()
        exact = K <= so.MLPAIR_MAX_LABELS
        hinge, dloss, sqp, sql, resid = G.ml_certificate_sums(self.data(), self.dual(), self.E, self.T, K, s, exact)
        sqE = float(np.vdot(self.E[:, :K], self.E[:, :K]))
        sqT = float(np.sum(np.triu(self.T[:K, :K], 1) ** 2))
        reg = 0.5 * lam * s * s * (sqE + sqT)
        d_prod = dloss / n - 0.5 * lam * s * s * (sqE + sqp)
        d_local = dloss / n - 0.5 * lam * s * s * (sqE + sql)
        extra = {"consistency_residual": float(resid), "dual_local_polytope": d_local,
                 "dual_distribution": d_prod, "passes": self.passes_done,
                 "active_factors": int(self.fcnt[self.alive_slots()].sum())}
        if not exact:
            return cert_mod.Certificate(
                gap=float("inf"), primal=float("nan"), dual=d_prod, n_blocks=n, oracle_calls=0,
                seconds=time.perf_counter() - t0, exact=False, lam=lam, regularizer=reg, dual_loss=dloss / n,
                note=(f"{K} labels: the exact primal needs MAP by enumeration (up to {so.MLPAIR_MAX_LABELS} labels) "
                      "and is not computed; dual = D at a distribution repair (a feasible dual point, a lower bound "
                      "on min P); extra['dual_local_polytope'] bounds only the LP-relaxed objective"),
                extra=extra)
        primal = reg + hinge / n
        raw = primal - d_prod
        return cert_mod.Certificate(
            gap=max(raw, 0.0), primal=primal, dual=d_prod, n_blocks=n, oracle_calls=n,
            seconds=time.perf_counter() - t0, exact=True, lam=lam, regularizer=reg, hinge=hinge / n,
            dual_loss=dloss / n, block_gap_sum=raw, raw_gap=raw,
            note=("primal P(w) by exact enumeration of the 2^K labelings; dual at a distribution repair "
                  "(per example a distribution over labelings with the unigram marginals u: a feasible "
                  "dual point of the exact problem), so gap = P(w) - D bounds P(w) - min P. The dual "
                  "GDMM optimizes is the LP relaxation's (local polytope), extra['dual_local_polytope'], "
                  "which bounds only the relaxed objective"),
            extra=extra)

    passes_done = 0

    # -------------------------------------------------------------- state
    def state(self):
        n, z = self.n, self.nnz
        st = {"K": self.K, "Kc": self.Kc, "d": self.d, "fcap": self.fcap, "E": self.E.copy(), "T": self.T.copy(),
              "counters": self.counters.copy(), "x_ptr": self.x_ptr[:n + 1].copy(), "fidx": self.fidx[:z].copy(),
              "fval": self.fval[:z].copy(), "order": np.asarray(self.order, dtype=np.int64),
              "inactive_factors": self.INACTIVE}
        for k in self._ROWS:
            if k not in self._DERIVED:
                st[k] = getattr(self, k)[:n].copy()
        return st

    def restore(self, st):
        self.K, self.Kc, self.d, self.fcap = int(st["K"]), int(st["Kc"]), int(st["d"]), int(st["fcap"])
        self.E = np.array(st["E"], dtype=np.float64)
        self.T = np.array(st["T"], dtype=np.float64)
        if self.T.shape != (self.Kc, self.Kc) or self.E.shape[1] != self.Kc or self.K > self.Kc:
            raise ValueError("invalid GDMM multi-label state: weight shapes do not match the label capacity")
        self.counters = np.array(st["counters"], dtype=np.int64)
        self.x_ptr = np.array(st["x_ptr"], dtype=np.int64)
        self.fidx = np.array(st["fidx"], dtype=np.int64)
        self.fval = np.array(st["fval"], dtype=np.float64)
        types = {"xsq": np.float64, "Ki": np.float64, "Y": np.float64, "alive": np.bool_, "u": np.float64,
                 "Dv": np.float64, "fk": np.int32, "fl": np.int32, "fz": np.float64, "flam": np.float64,
                 "fcnt": np.int32}
        for k in self._ROWS:
            if k not in self._DERIVED:
                setattr(self, k, np.array(st[k], dtype=types[k]))
        self.n = len(self.alive)
        self.nnz = len(self.fidx)
        if (self.fidx.size and (self.fidx.min() < 0 or self.fidx.max() >= self.E.shape[0])) \
                or self.fk.shape[1] != self.fcap or self.u.shape[1] != self.Kc:
            raise ValueError("invalid GDMM multi-label state: feature ids or capacities out of range")
        for i, c in enumerate(self.fcnt.tolist()):
            fk, fl = self.fk[i, :max(c, 0)], self.fl[i, :max(c, 0)]
            if c < 0 or c > self.fcap or np.any(fk < 0) or np.any(fk >= fl) or np.any(fl >= self.K):
                raise ValueError(f"invalid GDMM multi-label state: pair factors of example slot {i} out of range")
        self.order = [int(e) for e in st["order"]]
        self.nact = np.zeros((self.n, self.Kc))
        for i in range(self.n):
            c = int(self.fcnt[i])
            np.add.at(self.nact[i], self.fk[i, :c], 1.0)
            np.add.at(self.nact[i], self.fl[i, :c], 1.0)
        self._reserve(self.n + 1, self.nnz + 1)
        self.refresh_bound()
        form = st.get("inactive_factors", "truth")
        if form == "truth":
            # saved before inactive factors followed their unigrams: they sat at the ground truth
            # (pair statistic ybar_k ybar_l, contributing nothing to U_T); add their implicit
            # statistic ybar_k ybar_l - u_k u_l now
            Dt, Q = self.data(), self.dual()
            for i in self.alive_slots():
                G.ml_implicit_t_add(int(i), Dt, Q, self.T, self.K, 1.0, self.tub)
        elif form != self.INACTIVE:
            raise ValueError(f"invalid GDMM multi-label state: unknown inactive-factor form {form!r}")
