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
one multiplier step per pass (and per arriving example when streaming). Each structure has its
engine -- :class:`~streamssvm.learners._gdmm_chain.ChainGDMM` (chains) and
:class:`~streamssvm.learners._gdmm_multilabel.MLPairGDMM` (pairwise multi-label) -- which
:class:`GDMM` drives; the kernels and the exact mathematics are in
:mod:`streamssvm._kernels.gdmm_chain` and :mod:`streamssvm._kernels.gdmm_multilabel`.

``lam`` is the regularization lambda of P(w) = lam/2 ||w||^2 + (1/n) sum_i H_i(w) (the paper's
C is 1 / (lam n)); ``rho`` the augmented-Lagrangian penalty, ``eta`` the multiplier step.

Example weights (``learn(..., weight=c)``, the estimators' ``learn_one(x, y, w)`` and
``learn_many(X, Y, w=...)``): P(w) = lam/2 ||w||^2 + (1/N) sum_i c_i H_i(w) with N = sum_i c_i over the held
examples, the objective BCFW minimizes. Its dual is the unweighted one with example i's block
scaled by c_i -- w = (1/(lam N)) sum_i c_i sum_f Phi_f^T (e_ytrue - mu_f), loss term
(1/N) sum_i c_i delta_i^T mu_i, every factor marginal still a distribution -- and the factorwise
decomposition and its consistency constraints are per example, so GDMM runs on it unchanged but
for c_i in each block's gradient (c_i) and curvature (c_i^2) and in how far a step moves the
weights (c_i); see :mod:`streamssvm._kernels.gdmm_chain` and
:mod:`streamssvm._kernels.gdmm_multilabel`. The certificate follows the weighted objective (both
its primal and the repaired dual point). Weight 2 is the objective of the example held twice (not
the same trajectory); weights are saved only when one is not 1.

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

import math

import numpy as np

from ._gdmm_chain import SOLVERS as _SOLVERS
from ._gdmm_chain import ChainGDMM
from ._gdmm_multilabel import MLPairGDMM
from ..params import Param
from .base import DenseWeights, Learner, check_number

_FMO = ("heap", "brute", "mips")


class GDMM(DenseWeights, Learner):
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
    :func:`streamssvm._kernels.gdmm_multilabel.ml_certificate_sums`), so the gap is a valid bound; above
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
    window
        Held examples (FIFO window; the oldest is evicted, its contribution removed). Default
        100,000, as SGD's and CuttingPlane's, so that memory is bounded on an endless stream;
        None: unbounded.
    active_cap
        Initial capacity of each factor's active set (grown when a pass fills one).
    mips_k, sketch_dim
        Neighbours per query and sketch dimension of the HNSW index (``fmo="mips"``).
    grow, add_tol
        Pairwise multi-label: at most ``grow`` inactive pairwise factors are activated per
        example visit (the block-greedy choice of the paper's Algorithm 3, by Frank-Wolfe gap at
        the factor's ground-truth vertex), those with a gap > ``add_tol``. The search is exact and
        prunes pairs whose labels sit at their ground truth (see
        :func:`streamssvm._kernels.gdmm_multilabel.ml_greedy_add`). Default 16 (yeast, 300 examples,
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

    multilabel_inference = "auto"
    #: the factorwise steps are written for the loss normalized per sentence
    default_chain_loss = "normalized"
    chain_losses = ("normalized",)

    renamed = {"capacity": "window"}
    params = (
        Param("lam", 1e-3, "float", "regularization lambda", low=0.0, low_open=True, high=1e15),
        Param("rho", 1.0, "float", "augmented-Lagrangian penalty (multi-label: relative to 1 / (lam n))",
              low=0.0, low_open=True),
        Param("eta", 1.0, "float", "multiplier step size", low=0.0, high=1.0, low_open=True),
        Param("fmo", "heap", "choice", "factorwise oracles: heap, brute or mips", choices=_FMO),
        Param("nu", 1, "int", "partitions of the sampled unigram oracle (1: exact)", low=1, high=1 << 16),
        Param("solver", "active_qp", "choice", "block solver", choices=_SOLVERS),
        Param("qp_iters", 5, "int", "inner steps per bigram block visit (active_qp) or after drop "
              "steps (afw)", low=1, high=10_000),
        Param("inner", 1, "int", "sweeps over an example's factors per multiplier step", low=1, high=1000),
        Param("rounds", 1, "int", "chains: method-of-multipliers iterations per example visit", low=1, high=1000),
        Param("replay", 1, "int", "held examples revisited after each new example", low=0, high=1000),
        Param("averaging", True, "bool", "chains: predict with the weighted average of the iterates"),
        Param("window", 100_000, "int", "held examples, a FIFO window (None: unbounded)", low=1, none=True),
        Param("active_cap", 8, "int", "initial capacity of each factor's active set", low=2, high=1 << 16),
        Param("mips_k", 10, "int", "fmo='mips': neighbours per query", low=1, high=1 << 16),
        Param("sketch_dim", 64, "int", "fmo='mips': sketch dimension (None: none)", low=1, high=1 << 16, none=True),
        Param("grow", 16, "int", "pairwise multi-label: most factors activated per example visit", low=1, high=4096),
        Param("add_tol", 1e-9, "float", "pairwise multi-label: gap a factor needs to be activated",
              low=0.0),
        Param("seed", 0, "seed", "random seed (sampling order, slices, index; None: fresh entropy)"),
        Param("rescaling", "margin", "choice", "margin rescaling only", choices=("margin",)),
    )

    @classmethod
    def _unit_test_params(cls):
        """Small, fast settings for the conformance checks (river's convention)."""
        yield {"lam": 0.05, "replay": 1, "seed": 0}

    def __init__(self, *, lam=1e-3, rho=1.0, eta=1.0, fmo="heap", nu=1, solver="active_qp", qp_iters=5,
                 inner=1, rounds=1, replay=1, averaging=True, window=100_000, active_cap=8, mips_k=10,
                 sketch_dim=64, grow=16, add_tol=1e-9, seed=0, rescaling="margin", **kwargs):
        self._set_params(locals())
        self._bound = False

    # ------------------------------------------------------------------ binding / storage

    # ------------------------------------------------------------------ binding
    @property
    def W(self):
        """Multi-label: the (unscaled) weights as the estimator reads them; chains: None."""
        eng = getattr(self, "_engine", None)
        return None if eng is None else eng.weights()

    def bind(self, structure, labels):
        self.check_structure(structure)
        self.structure = structure
        self._rng = np.random.default_rng(self.seed)
        if structure.name == "multilabel":
            if not getattr(structure, "pairwise", False):
                raise ValueError("GDMM learns multi-label models with pairwise=True (binary variables coupled by "
                                 "pairwise factors); independent labels have nothing to decompose: use "
                                 "learners.BCFW or learners.SGD")
            if self.solver != "active_qp":
                raise ValueError(f"solver={self.solver!r} is a chain block solver; pairwise multi-label GDMM "
                                 "solves its blocks exactly (solver='active_qp')")
            self._engine = MLPairGDMM(self, structure, labels, self._rng)
        else:
            self._engine = ChainGDMM(self, structure, labels, self._rng)
        self._K = 0
        self.n_learned = 0
        self.passes_done = 0
        self._bound = True

    def ensure(self, n_features, labels):
        self._engine.ensure(n_features, labels)
        self._K = self._engine.K

    @property
    def n_blocks(self):
        return self._engine.n_blocks

    # ------------------------------------------------------------------ learning
    #: ``learn(..., weight=c)``: the exact weighted dual, chains and pairwise multi-label (module doc)
    example_weights = True

    def learn(self, tok_ptr, fidx, fval, y, Ki=1, weight=1.0):
        """Hold a new example with weight ``weight`` c > 0 (its factors start at the ground
        truth), sweep its factors and take its multiplier step, then ``replay`` sweeps on random
        held examples."""
        if weight != 1.0:
            weight = float(weight)
            if not 0.0 < weight < math.inf:
                raise ValueError(f"GDMM example weights must be finite and > 0, got {weight!r}")
        eng = self._engine
        e = eng.add(tok_ptr, fidx, fval, y, Ki) if weight == 1.0 else eng.add(tok_ptr, fidx, fval, y, Ki, weight)
        eng.sweep([e], True)
        self.n_learned += 1
        if self.replay:
            alive = eng.alive_slots()
            eng.sweep(self._rng.choice(alive, size=min(self.replay, len(alive)), replace=False), True)
        eng.learned(e)
        return e

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
            self._engine.sweep(self._rng.permutation(self._engine.alive_slots()), True)
            self.passes_done += 1
            if progress is not None:
                progress((p + 1) / total, self)
            if tol is not None and self.certificate().gap <= tol:
                return

    # ------------------------------------------------------------------ prediction, certificate
    def predict(self, ex_tok, tok_ptr, fidx, fval, y_ptr, n_out):
        return self._engine.predict(ex_tok, tok_ptr, fidx, fval, y_ptr, n_out)

    def certificate(self):
        """Chains: exact primal (loss-augmented Viterbi on every held example), the dual at the
        repaired (consistent) point, gap = P(w) - D(repaired) >= P(w) - min P. Multi-label: see
        :meth:`~streamssvm.learners._gdmm_multilabel.MLPairGDMM.certificate`. Observes only."""
        return self._engine.certificate(self.passes_done)

    # ------------------------------------------------------------------ state
    def state(self):
        return self._engine.state({"n_learned": self.n_learned, "passes_done": self.passes_done,
                                   "rng": self._rng_state()})

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
        self._engine.restore(st)
        self._K = self._engine.K
        self.n_learned = int(st["n_learned"])
        self.passes_done = int(st["passes_done"])
        self._set_rng_state(st["rng"])
