"""MEMOIR (Belyy & Sholokhov, "MEMOIR: Multi-class Extreme Classification with Inexact Margin"): extreme multiclass Crammer-Singer SVM trained by SGD
with an approximate most-violating class from a MIPS oracle.

``variant="l2"`` is Algorithm 1 (Pegasos with projection onto the ball of radius 1/sqrt(lam));
``variant="l1"`` is Algorithm 2 (truncated SGD for lam/2 |W|_1).

Step size: eta = eta0 / (R^2 (1 + eta_step * n)), n the number of *examples* learned before the
current batch began and R^2 the running mean of |x|^2 (the step is in units of the input scale,
so the same defaults work for unit-norm input and for any rescaling of it; the estimators'
constant bias feature counts in |x|^2). The clock counts examples, not batches, so
``batch_size`` only groups the examples sharing one step size, one shrinkage
(1 - lam eta)^batch_size and one projection: the schedule over a stream does not depend on it.
(The paper's 0.02 decay is per batch of 100 sqrt(C) examples; applied per example it divides
the step by ~1000 over a 50k-example stream.)

Defaults: eta0=3, eta_step=0 (a constant step of 3 / R^2: a class row moves by 3 x / R^2 on
a violated margin, so one step changes s_y - s_r by ~6 while the margin asked is 1), lam=1e-6,
step-weighted average. Why no decay: the hinge stays active on 70-80% of the steps of a real
stream (the classes are not separable at a few hundred dimensions), and a decaying step makes
the n-th example count 1 / (1 + eta_step n) as much as the first (41x less after 200k examples
at the previous eta_step=2e-4), whatever the stream still has to teach; the averaged perceptron,
which never decays, then wins on long streams. A constant step with iterate averaging is what
Bach & Moulines analyse for smooth losses ("Non-strongly-convex smooth stochastic approximation
with convergence rate O(1/n)"); for this hinge it is a measured choice, not a guarantee. lam=1e-6 keeps the shrinkage (1 - lam eta) per
example (1.5e-6 on unit-norm input plus the bias feature) a mild forgetting (a factor 0.74
over 200k examples). They were chosen on a *tuning* split
only (``bench/archive/memoir_tune.py``: the first 40k examples of the Brown tag-pair training sample of
``bench/quality_memoir.py`` x 2 epochs, validated on the next 10k; no test document read):
validation accuracy 0.5151 (eta0=3, no decay), 0.5122 (eta0=1), 0.5060 (eta0=3, eta_step=2e-4,
the previous default), averaged perceptron 0.5123 (``bench/archive/results/memoir_tune.md``). Confirmed
on streams not used for tuning (``bench/archive/memoir_confirm.py``, ``bench/results/quality_memoir_confirm.md``):
test accuracy of the defaults / the previous defaults / an averaged perceptron on x / the same
on [1, x] (the bias feature the estimators add):
Brown tag pairs (2,800 classes, 100k x 2 epochs, 10k test) 0.5802 / 0.5515 / 0.5723 / 0.5689;
Brown fine tag of a token (453 classes, 100k x 2, 10k test) 0.7729 / 0.7727 / 0.7556 / 0.7691;
Brown word from context (2,800 classes, 20k x 2, 4k test) 0.1005 / 0.1010 / 0.0710 / 0.0968;
OCR letters (26 classes, raw 128 pixels, 47.5k x 2, 4.6k test) 0.7838 / 0.7897 / 0.7516 / 0.7808.
The defaults beat both perceptrons on every stream, by 0.3-0.4 points only against the one with
the bias feature on the last three (within the test sets' standard errors of 0.4-0.6 points).
A passive-aggressive step (Crammer et al., "Online Passive-Aggressive Algorithms":
eta = min(C, hinge / (2 |x|^2))) measured no better on the tuning split (0.5228
to 0.5237 against 0.5279 for the constant step, in a simulation without the bias feature), so
the simpler constant step is the default.

Averaging (``averaging=True``, ``avg_weighting="linear"``, the default): prediction uses the average of the iterates weighted
by their step index (the averaging of Lacoste-Julien, Schmidt & Bach, "A simpler approach to
obtaining an O(1/t) convergence rate for the projected stochastic subgradient method"), which
the SGD guarantees are stated for. It is kept lazily in O(nnz(x)) per update: with
W_s = acc_s V_s and A_t = sum_{s<=t} w_s acc_s, sum_s w_s W_s = A_t V_t - Z_t where
Z += A_{s-1} dV at every change dV of V (a second row store of the same kind). The l1
variant's truncation is not a linear update, so it does not average (as ``averaging=False``).
Measured on the Brown tag-pair stream of ``bench/quality_memoir.py`` (2,800 classes, 100k
examples x 2 epochs, 10k test, majority 0.043): with the constant default step, step-weighted
average 0.5802, uniform average 0.5727, last iterate 0.4665
(``bench/results/quality_memoir_tagpair_average.md``, ``quality_memoir_confirm.md``); with the
previous decaying step (eta_step=2e-4) they were 0.5515 / 0.5397 / 0.5495. A constant step
needs the average (the last iterate keeps moving by steps of fixed size), so it stays the
default.

Rows: ``W = acc * V`` with a lazy global scale ``acc`` (renormalized into V before it falls
below 1e-20, which keeps the float32 index vectors finite; the index is then rebuilt). V lives
in a row store (:mod:`streamssvm.oracles.rows`): dense (classes x features) or sparse
(memory O(nnz(W)), exact MIPS through an inverted index). ``rows="auto"`` picks dense for a
fixed input width of at most ``DENSE_MAX_DIM`` columns and sparse otherwise. Both give the
same numbers. The MIPS index holds the unscaled rows or their sketches (the argmax does not
depend on the scale). Exact search on dense rows is a float32 BLAS scan of a mirror of the rows,
re-scored in float64 (:class:`~streamssvm.oracles.mips.BlasExactMIPS`: the float64 scan's
answers, 2-3x faster). With the average kept, the mirror also holds the rows of
U = A0 V - Z, the averaged scores' rows at the weight sum A0 of its last rebuild: while nothing
is learned (serving) the averaged prediction argmax_c A <V_c, x> - <Z_c, x> is one float32
product over U, the same size as the last iterate's; between steps it reads V too
(h = (A - A0) <V, x> + <U, x>). A bound on every class's float32-vs-float64 error keeps the exact
argmax among the candidates, re-scored in float64 as the scan sums them
(``BlasExactMIPS.query_averaged``: the same classes as scanning both stores in float64, ties
included; 3,700 classes x 256 features, serving: below a numpy ``argmax(W @ x)`` over the
float64 averaged weights, ``bench/hotpath.py --only memoir``); an HNSW index re-inserts a changed row only once it drifted by more than
``drift_tol`` of its norm (:class:`~streamssvm.oracles.mips.HNSWMIPS`).

A class's first examples, learned while no other class existed (hinge 0 for want of a
competitor), are kept aside (at most ``FLAT_MAX``) and each stepped once when a second class
arrives, so ``learn_one(x, 'a'); learn_one(z, 'b')`` already predicts ``'a'`` for x.

Losses: by default the Crammer-Singer hinge max_{c != y} (1 + s_c - s_y)_+. With a cost
``Delta(y, c)`` (the structure's ``label_cost``: a matrix indexed by the label values or a
callable on labels, cached per true class by the learner) the most violating class is, under
margin rescaling, argmax_c Delta(y, c) + s_c - s_y and, under slack rescaling,
argmax_c Delta(y, c) (1 + s_c - s_y) (the step is then scaled by Delta(y, c)). With an
approximate index the choice is made among the candidates (index top-k and dirty set, re-scored
exactly): an *inexact* most violating class, whose quality is measured (``diagnostics``).

No dual point is kept: the eta schedule, the projection and the l1
truncation do not produce w = A alpha with alpha in the product of simplices, so the
certificate reports the primal on a held window and gap = +inf.

The learner holds the last ``window`` examples it learned: the certificate's primal is
computed on them and :meth:`MEMOIR.refine` makes SGD epochs over them.

Example weights (``learn(..., weight=c)``, ``ExtremeClassifier.learn_one(x, y, w)``): the
objective is lam/2 |W|^2 + (1 / sum_i c_i) sum_i c_i H_i(W) over the held examples, as SGD's.
Every step on example i is the subgradient step on c_i H_i (c_i times longer; slack rescaling
multiplies by the cost as before), on its first step, its flat revisit and in :meth:`refine`
alike. The shrinkage, the projection, the step-size clock, the input scale R^2 and the
averaging weights count the example once whatever its weight, so weight 2 is the example
twice only to first order in eta (two steps shrink twice and re-query the oracle); what is
exact is the objective (weight 2 and the example held twice have one optimum) and the
certificate's primal, the weighted one. The weights of the window (and of the flat examples)
are saved only when one is not 1; files without them load with every weight 1.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .._kernels import mips as MK
from ..certificate import Certificate
from ..errors import CheckpointError
from ..oracles.mips import BlasExactMIPS, ExactMIPS, HNSWMIPS, LSHMIPS
from ..oracles.rows import DENSE_MAX_DIM, DenseRows, SparseRows, rows_from_state
from .base import Learner
from ..params import Param
from ..saved_state import pack_rows, unpack_rows

_MIPS = ("auto", "exact", "hnsw", "lsh")
RENORM_BELOW = 1e-20
# mips="auto": exact search while the scan is cheap, HNSW above (if hnswlib is installed).
# Dense rows: HNSW once rows x columns (the scan's multiply-adds) exceed AUTO_HNSW_WORK; sparse
# rows (exact search through the inverted index): once there are more than AUTO_HNSW_ROWS rows.
# Measured (bench/results/memoir_scan.md, memoir_hnsw_maint.md; one core, shared machine):
# per query, the float32 BLAS scan beats one hnswlib query (ef=200) up to ~6k rows at 257
# columns (1.5M multiply-adds: 2.8k rows 135 vs 282 us CPU, 10k rows 999 vs 578 us); in
# training, HNSW also pays its maintenance (37% of its training CPU at 30k classes) and loses
# recall (0.89-0.97), so at 30k rows x 33 columns (1M) exact training took 13.0 CPU s against
# HNSW's 23.4 s, with better accuracy (0.461 vs 0.440). 5M multiply-adds (~20k rows at 257
# columns) keeps exact search wherever it measured faster.
AUTO_HNSW_WORK = 5_000_000
AUTO_HNSW_ROWS = 20_000
# mips="hnsw": a dirty row is re-inserted into the graph only once its change since its last
# insertion exceeds this fraction of its norm then (see HNSWMIPS). Measured at 30k declared
# classes (bench/results/memoir_hnsw_maint*.md): SGD steps are large relative to a rarely
# updated row, so 0.1 skips almost nothing (173 of 29k re-insertions); 0.3 skips 13%
# (re-index CPU 8.6 -> 6.9 s of ~23 s) at a recall@1 of 0.84 instead of 0.89 (accuracy 0.439
# vs 0.440). 0.1 is the conservative default; raise it when rows are updated often.
DRIFT_TOL = 0.1
# examples learned while a single class existed, kept to be stepped when a second one arrives
FLAT_MAX = 1000


def _has_hnswlib():
    from .._optional import available
    return available("hnswlib")


class MEMOIR(Learner):
    """SGD for the Crammer-Singer multiclass SVM with a MIPS oracle (a :class:`Learner`).

    Parameters
    ----------
    lam
        Regularization (the paper uses 1 for l2, 1e-6 for l1).
    variant
        ``"l2"`` (Pegasos + projection) or ``"l1"`` (truncated SGD).
    mips
        ``"auto"`` (exact search up to ``AUTO_HNSW_WORK`` multiply-adds per scan on dense rows,
        ``AUTO_HNSW_ROWS`` class rows on sparse rows, HNSW above when hnswlib is installed,
        switching as classes arrive), ``"exact"``, ``"hnsw"`` or ``"lsh"``.
    batch_size
        Examples sharing one step size, shrinkage and projection (1: online); the schedule
        counts examples, so it does not depend on this.
    eta0, eta_step
        eta = eta0 / (R^2 (1 + eta_step * n)), n the examples learned before the batch and R^2
        the running mean of |x|^2 (see the module docstring for the choice of 3 and 0: a constant
        step; eta_step > 0 decays it per example).
    averaging, avg_weighting
        Predict with an average of the iterates (default True; kept lazily), weighted
        ``"linear"`` (by step, the default) or ``"uniform"``; ``False`` predicts with the last
        iterate. The l1 variant does not average. (The former ``average="linear"`` /
        ``"uniform"`` / ``"none"`` is still read, deprecated.)
    k, max_dirty, sketch_dim, ef, M, ef_construction, drift_tol, reinsert
        MIPS parameters (see :mod:`streamssvm.oracles.mips`; ``drift_tol``: a changed row is
        re-inserted into the HNSW graph only once it drifted by more than this fraction of its
        norm; ``reinsert``: ``"fresh"`` labels with tombstones and rebuilds (the default: measured
        2.8x cheaper than ``"replace"``, whose hnswlib in-place update repairs the neighbours'
        lists), or ``"replace"`` into the slot its old vector frees).
    check_every
        Every this many steps, also run the exact search and record recall@1 and the margin
        error of the approximate answer (0: never). The checks only read the rows: they change
        neither the weights nor the choices of later steps.
    seed
        Seed of the index's random projections / graph.
    rows
        ``"auto"``, ``"dense"`` or ``"sparse"`` (see the module docstring). ``"auto"`` is
        resolved by the estimator when it binds the learner (it knows the input kind); a
        learner bound directly with ``"auto"`` uses dense rows up to ``DENSE_MAX_DIM`` features.
    rescaling
        ``"margin"`` or ``"slack"``: how the structure's cost enters the hinge.
    window
        Examples held (the last ones learned): the certificate's primal is measured on them and
        :meth:`refine` makes epochs over them (0: none held).
    predict_with
        ``"exact"`` (score every row) or ``"index"`` (ask the MIPS index).

    >>> import numpy as np
    >>> from streamssvm.structures import MultiClass
    >>> lr = MEMOIR(mips="exact", rows="sparse"); lr.bind(MultiClass(), [])
    >>> lr.ensure(4, ["a", "b", "c"])
    >>> one = np.array([0, 2])
    >>> for i in range(30):
    ...     c = i % 3; lr.learn(one, np.array([0, c + 1]), np.array([1.0, 1.0]), np.array([c]))
    >>> ex = np.arange(4); tok = np.arange(0, 8, 2); fidx = np.array([0, 1, 0, 2, 0, 3])
    >>> lr.predict(ex, tok, fidx, np.ones(6), ex, 3).tolist()
    [0, 1, 2]
    """

    structures = ("multiclass",)

    mixing = "primal"
    example_weights = True
    distributed = True

    params = (
        Param("lam", 1e-6, "float", "regularization lambda (Yen et al. use 1 for l2, 1e-6 for l1)",
              low=0.0, low_open=True, high=1e6),
        Param("variant", "l2", "choice", "l2 (Pegasos + projection) or l1 (truncated SGD)",
              choices=("l2", "l1")),
        Param("mips", "auto", "choice", "maximum-inner-product search: auto, exact, hnsw or lsh",
              choices=_MIPS),
        Param("batch_size", 1, "int", "examples sharing one step size, shrinkage and projection", low=1, high=1 << 20),
        Param("eta0", 3.0, "float", "step size scale: eta = eta0 / (R^2 (1 + eta_step n))",
              low=0.0, low_open=True),
        Param("eta_step", 0.0, "float", "per-example decay of the step size", low=0.0),
        Param("k", 10, "int", "MIPS: candidates per query", low=1, high=1 << 16),
        Param("max_dirty", 256, "int", "MIPS: changed rows buffered before the index is updated", low=1, high=1 << 24),
        Param("sketch_dim", None, "int", "MIPS: sketch dimension (None: none)", low=1, high=1 << 16, none=True),
        Param("check_every", 100, "int", "steps between exact-search recall checks (0: never)", low=0),
        Param("seed", 0, "seed", "seed of the index's random projections / graph"),
        Param("rows", "auto", "choice", "class rows: auto, dense or sparse",
              choices=("auto", "dense", "sparse")),
        Param("rescaling", "margin", "choice", "how the structure's cost enters the hinge",
              choices=("margin", "slack")),
        Param("ef", 200, "int", "HNSW: query beam width", low=1, high=1 << 16),
        Param("M", 16, "int", "HNSW: graph degree", low=2, high=1024),
        Param("ef_construction", 100, "int", "HNSW: construction beam width", low=1, high=1 << 16),
        Param("window", 1000, "int", "examples held for the certificate and refine (0: none)", low=0),
        Param("predict_with", "exact", "choice", "predict by scoring every row or asking the index",
              choices=("exact", "index")),
        Param("averaging", True, "bool", "predict with an average of the iterates (l2 variant)"),
        Param("avg_weighting", "linear", "choice", "weights of the iterates in the average: linear "
              "(step-weighted) or uniform", choices=("linear", "uniform")),
        Param("drift_tol", DRIFT_TOL, "float", "HNSW: relative drift before a row is re-inserted",
              low=0.0),
        Param("reinsert", "fresh", "choice", "HNSW: re-insert fresh (tombstones) or in place (replace)",
              choices=("replace", "fresh")),
    )

    def __init__(self, *, lam=1e-6, variant="l2", mips="auto", batch_size=1, eta0=3.0, eta_step=0.0,
                 k=10, max_dirty=256, sketch_dim=None, check_every=100, seed=0, rows="auto",
                 rescaling="margin", ef=200, M=16, ef_construction=100, window=1000,
                 predict_with="exact", averaging=True, avg_weighting="linear", drift_tol=DRIFT_TOL,
                 reinsert="fresh", **kwargs):
        self._set_params(locals())

    @classmethod
    def _upgrade_values(cls, params):
        if "average" in params:     # the former average="linear" | "uniform" | "none"
            params = dict(params)
            v = params.pop("average")
            params["averaging"] = v != "none"
            params["avg_weighting"] = "linear" if v == "none" else v
        return params

    @classmethod
    def _unit_test_params(cls):
        yield {"mips": "exact", "lam": 1e-3}

    def check_distributed(self, n_features=None):
        """Distributed MEMOIR mixes dense class rows: sparse rows (``rows="sparse"``, or
        ``"auto"`` with a hashed input wider than ``DENSE_MAX_DIM``) are refused."""
        if self.rows == "sparse" or (self.rows == "auto" and n_features is not None
                                     and n_features > DENSE_MAX_DIM):
            raise ValueError("distributed MEMOIR mixes dense class rows: use MEMOIR(rows='dense') (or array "
                             f"input of at most {DENSE_MAX_DIM} columns); sparse rows are not supported yet")

    # ------------------------------------------------------------------ lifecycle
    def bind(self, structure, labels):
        """Take the structure's cost (``structure.label_cost``: None, a square matrix indexed by
        the label values, or a callable ``cost(y_true, y)``); rows and index are allocated by
        the first :meth:`ensure` (they need the number of features)."""
        self.check_structure(structure)
        cost = getattr(structure, "label_cost", None)
        self._C = None
        self._cost_fn = None
        if cost is not None:
            if callable(cost):
                self._cost_fn = cost
            else:
                self._C = np.asarray(cost, dtype=np.float64)
        self._cost_cache = OrderedDict()      # true class -> row of Delta(y, .) (callable costs)
        self._lab = np.zeros(16, dtype=np.int64)   # class id -> matrix index (cost matrix)
        self._labels = []
        self.store = None
        self.oracle = None
        self.dim = 0
        self.kind = None
        self.acc = 1.0
        self.t = 0               # batch index
        self.n_clock = 0         # examples learned before the current batch (the eta clock)
        self.r2_sum = 0.0        # sum of |x|^2 over the steps (the input scale R^2)
        self.r2_n = 0
        self._eta_batch = self.eta0
        self.avg = None          # Z of the lazy average (a row store like ``store``)
        self.avg_A = 0.0         # A_t = sum_s w_s acc_s
        self.avg_W = 0.0         # sum_s w_s
        self._acc_fold = 1.0     # acc at the last fold of the average
        self.mips_active = None  # the oracle in use ("auto" resolves to exact or hnsw)
        self.in_batch = 0
        self.n_learned = 0       # examples learned
        self.n_steps = 0         # SGD steps (learned examples and refine steps)
        self.n_updates = 0
        self.n_renorm = 0
        self.n_revisit_steps = 0
        self._reset_checks()
        self._touched = set()
        self._recent = []        # the window: (idx int64, val float64, class id)
        self._recent_w = []      # each held example's weight c_i (learn(..., weight=c))
        self._flat = []          # examples learned with no competing class (stepped when one arrives)
        self._flat_w = []        # their weights
        self._bound = True
        if labels:
            self._set_labels(labels)

    @property
    def has_cost(self):
        return self._C is not None or self._cost_fn is not None

    def _allocate(self, dim, store=None):
        self.dim = int(dim)
        kind = store.kind if store is not None else self.rows
        if kind == "auto":
            kind = "sparse" if self.dim > DENSE_MAX_DIM else "dense"
        self.kind = kind
        if store is None:
            store = SparseRows(dim=max(self.dim, 1)) if kind == "sparse" else DenseRows(max(self.dim, 1))
        self.store = st = store
        if self._averages and self.avg is None:
            self.avg = SparseRows(dim=max(self.dim, 1)) if kind == "sparse" else DenseRows(max(self.dim, 1))
        mode = self.mips
        if mode == "auto":
            mode = "hnsw" if self._auto_hnsw(st.n_rows) else "exact"
        # dense rows searched exactly: a float32 BLAS scan re-scored in float64 (same answers as
        # the float64 scan; it needs every row change reported, which only the active oracle gets)
        # with the average kept, the rows of U = A0 V - Z are mirrored too: the averaged
        # prediction is a float32 product too (BlasExactMIPS.query_averaged)
        self._exact = (BlasExactMIPS(st, average=self.avg) if st.kind == "dense" and mode == "exact"
                       else ExactMIPS(st))
        self._make_oracle(mode)

    @property
    def _averages(self):
        """Whether the learner keeps the average (the l1 variant does not)."""
        return self.averaging and self.variant == "l2"

    def _auto_hnsw(self, n_rows):
        if self.kind == "dense":
            big = n_rows * max(self.dim, 1) > AUTO_HNSW_WORK
        else:
            big = n_rows > AUTO_HNSW_ROWS
        return big and _has_hnswlib()

    def _make_oracle(self, mode):
        st = self.store
        self.mips_active = mode
        if mode != "exact" and isinstance(self._exact, BlasExactMIPS):
            self._exact = ExactMIPS(st)    # its mirror would go stale: checks and prediction scan
        if mode == "exact":
            self.oracle = self._exact
        elif mode == "hnsw":
            self.oracle = HNSWMIPS(st, self.dim, self.sketch_dim, k=self.k, max_dirty=self.max_dirty,
                                   ef=self.ef, M=self.M, ef_construction=self.ef_construction,
                                   seed=self.seed or 0, drift_tol=self.drift_tol, reinsert=self.reinsert)
        else:
            self.oracle = LSHMIPS(st, self.dim, self.sketch_dim, k=max(self.k, 32), max_dirty=self.max_dirty,
                                  seed=self.seed or 0)

    def _index_rows(self):
        """Put the rows the store holds into a fresh index (restore, and the auto switch)."""
        n = self.store.n_rows
        if not n or self.oracle is self._exact:
            return
        if hasattr(self.oracle, "add_zero_rows") and not self.has_cost:
            D = self.store
            nonzero = (np.flatnonzero(D.cnnz[:n]) if D.kind == "sparse"
                       else np.flatnonzero(np.any(D.V[:n] != 0.0, axis=1)))
            self.oracle.add_zero_rows(0, n)      # zero rows stay out of the index
            self.oracle.update(nonzero)
        else:
            self.oracle.update(range(n))
        if hasattr(self.oracle, "reindex"):
            self.oracle.reindex()

    def _reset_checks(self):
        self.checks = 0
        self.hits = 0
        self.margin_err = []
        self.choice_checks = 0
        self.choice_same = 0
        self.viol_ratio = []

    def _set_labels(self, labels):
        n0 = len(self._labels)
        self._labels = list(labels)
        if self._C is not None and len(labels) > n0:
            K = self._C.shape[0]
            if len(labels) > self._lab.shape[0]:
                lab = np.zeros(max(len(labels), 2 * self._lab.shape[0]), dtype=np.int64)
                lab[:self._lab.shape[0]] = self._lab
                self._lab = lab
            for c in range(n0, len(labels)):
                y = labels[c]
                if not (isinstance(y, (int, np.integer)) and not isinstance(y, bool) and 0 <= y < K):
                    raise ValueError(f"with a cost matrix of size {K} the labels must be integers in "
                                     f"[0, {K}), got {y!r}")
                self._lab[c] = int(y)

    def ensure(self, n_features, labels):
        """Rows for ``n_features`` features and one class per label (the first call allocates
        the row store and the index)."""
        n_classes = len(labels)
        if self.store is None:
            self._allocate(n_features)
        dim = int(n_features)
        if (dim > self.dim and self.kind == "dense" and self.mips_active not in ("exact", None)
                and self.sketch_dim is None):
            raise ValueError(f"the model was built for {self.dim} features; got {dim} "
                             "(use rows='sparse' or sketch_dim for growing sparse features)")
        self._set_labels(labels)
        n0 = self.store.n_rows
        self.store.ensure(n_classes, dim)
        if self.avg is not None:
            self.avg.ensure(n_classes, dim)
        self.dim = max(self.dim, dim)
        if n_classes > n0:
            if self.mips == "auto" and self.mips_active == "exact" and self._auto_hnsw(n_classes):
                self._make_oracle("hnsw")     # the scan crossed the auto threshold: index every row
                self._index_rows()
            elif not self.has_cost and hasattr(self.oracle, "add_zero_rows"):
                self.oracle.add_zero_rows(n0, n_classes)   # zero rows stay out of the index
            else:
                self.oracle.update(range(n0, n_classes))
            if self._flat:
                self._revisit_flat()

    def _revisit_flat(self):
        """A second class arrived: the examples learned while their class had no competitor
        (hinge 0 only because no other class existed; at most ``FLAT_MAX``, the last ones)
        each get one step now, against the grown class set, so a class's first example counts
        as soon as a second class exists (as BCFW's revisit of flat blocks). Bounded cost: one
        step per such example, once."""
        flat, self._flat = self._flat, []
        ws, self._flat_w = self._flat_w, []
        for (idx, val, c), cw in zip(flat, ws):
            self._step(idx, val, c, cw)
        self.n_revisit_steps += len(flat)

    def eta(self):
        """The step size of the current batch: eta0 / (R^2 (1 + eta_step n)), n the examples
        learned before the batch, R^2 the running mean of |x|^2 (1 before any example)."""
        r2 = self.r2_sum / self.r2_n if self.r2_sum > 0 else 1.0
        return self.eta0 / (r2 * (1.0 + self.eta_step * self.n_clock))

    @property
    def n_blocks(self):
        """Examples held in the window (the n of the certificate's primal)."""
        return len(self._recent)

    # ------------------------------------------------------------------ costs
    def _costs(self, y, cands, m):
        """Delta(y, cands[q]) for q < m (class ids)."""
        if self._C is not None:
            return self._C[self._lab[y], self._lab[cands[:m]]]
        n = len(self._labels)
        row = self._cost_cache.get(y)
        if row is None or row.shape[0] < n:
            new = np.full(max(n, 16), np.nan)
            if row is not None:
                new[:row.shape[0]] = row
            row = new
            self._cost_cache[y] = row
        self._cost_cache.move_to_end(y)
        if len(self._cost_cache) > 1024:
            self._cost_cache.popitem(last=False)
        c = cands[:m]
        out = row[c]
        miss = np.flatnonzero(np.isnan(out))
        if miss.size:
            labels, ly = self._labels, self._labels[y]
            for q in miss:
                v = float(self._cost_fn(ly, labels[c[q]]))
                if not (v >= 0 and np.isfinite(v)) or (c[q] == y and v != 0):
                    raise ValueError(f"loss({ly!r}, {labels[c[q]]!r}) = {v!r}: it must be finite, >= 0, and 0 "
                                     "for the true class")
                row[c[q]] = v
                out[q] = v
        return out

    # ------------------------------------------------------------------ learning
    def learn(self, tok_ptr, fidx, fval, y, Ki=1, weight=1.0):
        """One new example: a single token ``fidx[tok_ptr[0]:tok_ptr[1]]`` and its class
        ``y[0]`` (allocated by :meth:`ensure`); it enters the window. ``weight`` (c > 0,
        finite) is its importance weight: its steps are c times longer (module docstring)."""
        cw = float(weight)
        if not (cw > 0.0 and cw < float("inf")):
            raise ValueError(f"MEMOIR.learn: weight must be finite and > 0, got {weight!r}")
        a, b = int(tok_ptr[0]), int(tok_ptr[1])
        idx = np.asarray(fidx[a:b], dtype=np.int64)
        val = np.asarray(fval[a:b], dtype=np.float64)
        c = int(y[0])
        self._was_flat = False
        self._step(idx, val, c, cw)
        if self._was_flat:
            self._flat.append((idx, val, c))
            self._flat_w.append(cw)
            if len(self._flat) > FLAT_MAX:
                del self._flat[0]
                del self._flat_w[0]
        self.n_learned += 1
        if self.window:
            self._recent.append((idx, val, c))
            self._recent_w.append(cw)
            if len(self._recent) > self.window:
                del self._recent[: len(self._recent) - self.window]
                del self._recent_w[: len(self._recent_w) - self.window]

    def learn_batch(self, ex_tok, tok_ptr, fidx, fval, y_ptr, ys, Ki=None):
        """m new examples in order (the same as m calls of :meth:`learn`; ``batch_size`` sets
        the step-size batches, not this call)."""
        for e in range(len(ex_tok) - 1):
            t = int(ex_tok[e])
            self.learn(tok_ptr[t:t + 2], fidx, fval, ys[int(y_ptr[e]):int(y_ptr[e + 1])])

    def refine(self, passes=1.0, tol=None, progress=None):
        """SGD epochs over the window, in order, continuing the step-size schedule:
        ``round(passes * n_blocks)`` steps (the examples stay in the window once). MEMOIR keeps
        no dual point, so no certificate can reach a gap ``tol``: it is accepted for the
        protocol and ignored. ``progress(fraction, learner)`` is called after every pass."""
        n = len(self._recent)
        if n == 0 or passes <= 0:
            return self
        total = int(round(passes * n))
        for s in range(total):
            idx, val, c = self._recent[s % n]
            self._step(idx, val, c, self._recent_w[s % n])
            if progress is not None and ((s + 1) % n == 0 or s + 1 == total):
                progress((s + 1) / total, self)
        return self

    def _step(self, idx, val, y, cw=1.0):
        """One SGD step on an example of weight ``cw`` (the subgradient step on cw H: cw times
        longer; the shrinkage, projection, clock and averaging weight count it once)."""
        xx = float(val @ val)
        self.r2_sum += xx
        self.r2_n += 1
        if self.in_batch == 0:
            self._eta_batch = self.eta()
        eta = self._eta_batch
        if self.in_batch == 0 and self.variant == "l2":
            # (1 - lam eta) per example of the batch: the shrinkage does not depend on batch_size
            f = (1.0 - self.lam * eta) if self.lam * eta < 1.0 else 1e-12
            self._scale_acc(f ** self.batch_size)
        st = self.store
        self.n_steps += 1
        check = self.check_every and self.n_steps % self.check_every == 0
        if not self.has_cost:
            r = self.oracle.query(idx, val, y)
            if check:
                self._check(idx, val, y, r)
            step = 0.0
            if r < 0:
                self._note_flat(idx, val, y)
            else:
                score_r = st.dot(r, idx, val) * self.acc
                score_y = st.dot(y, idx, val) * self.acc
                if 1.0 + score_r - score_y > 0.0:
                    step = eta
        else:
            r, v, cost = self._rescaled(idx, val, y, check)
            step = 0.0
            if r < 0:
                self._note_flat(idx, val, y)
            if r >= 0 and v > 0.0:
                step = eta * cost if self.rescaling == "slack" else eta
        if step > 0.0:
            if cw != 1.0:
                step *= cw
            a = step / self.acc
            st.axpy(r, idx, val, -a, xx)
            st.axpy(y, idx, val, a, xx)
            if self.avg is not None and self.avg_A != 0.0:
                # Z += A_{s-1} dV (the lazy average; see the module docstring)
                self.avg.axpy(r, idx, val, -a * self.avg_A, xx)
                self.avg.axpy(y, idx, val, a * self.avg_A, xx)
                if self.oracle is self._exact and isinstance(self._exact, BlasExactMIPS):
                    self._exact.average_row_changed(r, idx)
                    self._exact.average_row_changed(y, idx)
            self.oracle.row_changed(r, idx, val, -a)
            self.oracle.row_changed(y, idx, val, a)
            self.n_updates += 1
            self._touched.update((r, y))
        self.in_batch += 1
        if self.in_batch >= self.batch_size:
            self._end_batch(eta)
        if self.avg is not None:
            w = float(self.n_steps) if self.avg_weighting == "linear" else 1.0
            self.avg_A += w * self.acc
            self.avg_W += w

    def _note_flat(self, idx, val, y):
        # no competitor exists at all (the only row is the true class): learn() keeps the example
        self._was_flat = self.store.n_rows <= 1

    def _pick(self, cands, scores, m, idx, val, y):
        costs = np.asarray(self._costs(y, cands, m), dtype=np.float64)
        s_y = self.store.dot(y, idx, val)
        r, v, pos = MK.pick_rescaled(cands, scores, m, y, costs, s_y, self.acc, self.rescaling == "slack")
        return int(r), float(v), (float(costs[pos]) if pos >= 0 else 0.0)

    def _rescaled(self, idx, val, y, check):
        cands, scores, m = self.oracle.query_candidates(idx, val, y)
        r, v, cost = self._pick(cands, scores, m, idx, val, y)
        if check:
            if self.oracle is self._exact:
                e, ve = r, v
            else:
                ca, sa, ma = self._exact.query_candidates(idx, val, y)
                e, ve, _ = self._pick(ca, sa, ma, idx, val, y)
            self.choice_checks += 1
            self.choice_same += int(e == r)
            self.checks += 1
            self.hits += int(e == r or v >= ve)
            if ve > 0:
                self.viol_ratio.append(max(v, 0.0) / ve)
                self.margin_err.append(ve - v)   # >= 0: exact violation minus the chosen one
            else:
                self.margin_err.append(0.0)
        return r, v, cost

    def _end_batch(self, eta):
        self.in_batch = 0
        st = self.store
        if self.variant == "l2":
            norm = np.sqrt(max(st.sq, 0.0)) * self.acc
            if norm > 0:
                phi = min(1.0, 1.0 / (np.sqrt(self.lam) * norm))
                if phi < 1.0:
                    self._scale_acc(phi)
        else:
            # truncation of the classes touched in this batch (C / |R_t| scaling, paper eq. 13)
            if self._touched:
                ids = np.fromiter(sorted(self._touched), dtype=np.int64)
                thr = st.n_rows / len(ids) * self.lam * eta / self.acc
                st.truncate(ids, thr)
                self.oracle.update(ids)
        self._touched.clear()
        self.t += 1
        self.n_clock = self.n_steps
        if self.acc < RENORM_BELOW:
            if self.avg is not None and self.avg_A != 0.0:
                self._fold_average()
            st.scale(self.acc)
            self.acc = 1.0
            self._acc_fold = 1.0
            self.n_renorm += 1
            self.oracle.update(range(st.n_rows))   # the index is rebuilt on the new scale

    def _scale_acc(self, f):
        """acc *= f. The average's A V - Z cancels A_{s-1} acc_s / acc_now-sized terms; once acc
        has fallen 1e4-fold since the last fold, fold first (keeps that ratio below 1e4, so
        float64 keeps ~12 digits of the average)."""
        if self.avg is not None and self.avg_A != 0.0 and self.acc * f < 1e-4 * self._acc_fold:
            self._fold_average()
            self._acc_fold = self.acc * f
        self.acc *= f

    def _fold_average(self):
        """Z := Z - A V, A := 0: the same sum A V - Z, with nothing left on V, so that V can be
        rescaled (renormalization of the lazy scale) without A growing like 1 / acc."""
        st, Z, A = self.store, self.avg, self.avg_A
        n = st.n_rows
        if st.kind == "dense":
            Z.V[:n, :st.V.shape[1]] -= A * st.V[:n, :Z.V.shape[1]]
            Z.recompute_sq()
            if isinstance(self._exact, BlasExactMIPS):
                self._exact.resync()      # every row of Z changed
        else:
            for c in np.flatnonzero(st.cnnz[:n]):
                f, v = st.row(int(c))
                Z.axpy(int(c), f, v, -A, float(v @ v))
        self.avg_A = 0.0

    def _check(self, idx, val, y, r):
        e = self._exact.query(idx, val, y) if self.oracle is not self._exact else r
        self.checks += 1
        if e >= 0 and r >= 0:
            se = self.store.dot(e, idx, val) * self.acc
            sr = self.store.dot(r, idx, val) * self.acc
            self.hits += int(e == r or sr >= se)   # a tied class is an exact answer too
            self.margin_err.append(se - sr)  # >= 0: exact runner-up score minus the returned one
        else:
            self.hits += int(e == r)

    # ------------------------------------------------------------------ inference
    def predict(self, ex_tok, tok_ptr, fidx, fval, y_ptr, n_out):
        """The best class of each example (one token each), -1 while no class exists."""
        out = np.full(n_out, -1, dtype=np.int32)
        if self.store is None or self.store.n_rows == 0:
            return out
        o = self._exact if self.predict_with == "exact" else self.oracle
        averaged = self.predict_with == "exact" and self.avg is not None and self.avg_W > 0
        if averaged:
            n = self.store.n_rows
            sv, sz = np.zeros(n), np.zeros(n)
            # float32 products over the mirror [V; U], exact float64 re-scoring of the
            # candidates: the same class as the float64 scan of both stores
            blas_avg = (self._exact.query_averaged if isinstance(self._exact, BlasExactMIPS)
                        and self._exact.average is self.avg else None)
        for e in range(len(ex_tok) - 1):
            t = int(ex_tok[e])
            a, b = int(tok_ptr[t]), int(tok_ptr[t + 1])
            idx = np.asarray(fidx[a:b], dtype=np.int64)
            val = np.asarray(fval[a:b], dtype=np.float64)
            if averaged:
                c = blas_avg(idx, val, self.avg_A) if blas_avg is not None else None
                if c is None:     # sparse input, or no float32 mirror: the float64 scan
                    c = MK.best_excluding(self._avg_scores(idx, val, sv, sz), n, -1)
                out[int(y_ptr[e])] = c
            else:
                out[int(y_ptr[e])] = o.query(idx, val, -1)
        return out

    def _avg_scores(self, idx, val, sv, sz):
        """A <V_c, x> - <Z_c, x> for every class c: the averaged scores times sum_s w_s."""
        self.store.scores_into(idx, val, sv)
        self.avg.scores_into(idx, val, sz)
        sv *= self.avg_A
        sv -= sz
        return sv

    def averaged_weights(self):
        """The averaged weights (classes x features, dense; tests and small models), or the
        last iterate when not averaging."""
        W = self.store.to_dense() * self.acc
        if self.avg is None or self.avg_W <= 0:
            return W
        return (self.store.to_dense() * self.avg_A - self.avg.to_dense()[:, :W.shape[1]]) / self.avg_W

    def certificate(self):
        """The primal objective on the window (exact scores of every class) and
        :meth:`diagnostics` in ``extra``. MEMOIR keeps no dual point (its eta schedule,
        projection and truncation do not give w = A alpha), so the gap reported is +inf (a
        trivially valid bound) and ``exact`` is False. Only reads the rows."""
        import time as _t
        t0 = _t.perf_counter()
        if not self._recent:
            return Certificate.empty(self.lam, exact=False)
        st = self.store
        n_rows = st.n_rows
        buf = np.zeros(max(n_rows, 1))
        allc = np.arange(n_rows, dtype=np.int64)
        slack = self.rescaling == "slack"
        hinge = 0.0
        weighted = self._weighted()
        for (idx, val, c), cw in zip(self._recent, self._recent_w):
            st.scores_into(idx, val, buf)
            s = buf[:n_rows] * self.acc
            m = s - s[c]
            if not self.has_cost:
                m = 1.0 + m
            else:
                cost = np.asarray(self._costs(c, allc, n_rows), dtype=np.float64)
                m = cost * (1.0 + m) if slack else cost + m
            m[c] = 0.0
            h = max(0.0, float(m.max()))
            hinge += cw * h if weighted else h
        n = len(self._recent)
        if weighted:   # the weighted objective: (1 / sum_i c_i) sum_i c_i H_i
            hinge *= n / float(sum(self._recent_w))
        if self.variant == "l2":
            reg = 0.5 * self.lam * st.sq * self.acc * self.acc
        else:
            reg = 0.5 * self.lam * st.l1() * self.acc
        primal = reg + hinge / n
        return Certificate(float("inf"), primal, float("-inf"), n, n, _t.perf_counter() - t0, False, self.lam,
                           regularizer=reg, hinge=hinge / n, rescaling=self.rescaling,
                           note="primal only: MEMOIR keeps no dual point (gap reported as +inf)",
                           extra=self.diagnostics())

    def _weighted(self):
        """Whether a held example has a weight other than 1."""
        return any(c != 1.0 for c in self._recent_w)

    def diagnostics(self):
        """Quality of the inexact oracle on the sampled steps (every ``check_every``-th):
        ``recall_at_1`` (the index's choice attains the exact maximum; ties count), ``margin_error_*``
        (epsilon: exact best violation, or runner-up score, minus the chosen one; >= 0), for a
        cost loss ``choice_agreement`` and ``violation_ratio_*`` (chosen / exact violation);
        index staleness (dirty-set size, changes since the last re-index, drift bound of the
        dirty rows in W units), row-store size."""
        me = np.array(self.margin_err) if self.margin_err else np.zeros(1)
        vr = np.array(self.viol_ratio) if self.viol_ratio else None
        st = self.store
        if st is None:
            return {"checks": 0, "n_classes": 0}
        stale = self.oracle.staleness()
        for k in ("drift_max", "drift_mean"):
            if k in stale:
                stale[k] *= self.acc
        d = {"recall_at_1": self.hits / self.checks if self.checks else None, "checks": self.checks,
             "margin_error_mean": float(me.mean()), "margin_error_max": float(me.max()),
             "dirty": stale.get("dirty", 0), "updates": self.n_updates, "staleness": stale,
             "mips": self.oracle.stats(), "norm": float(np.sqrt(max(st.sq, 0)) * self.acc),
             "rows": self.kind, "rows_nnz": st.nnz, "rows_nbytes": st.nbytes, "n_classes": st.n_rows,
             "mips_active": self.mips_active, "eta": self.eta(), "average": self.avg_weighting if self.avg is not None
             else "none"}
        if self.has_cost:
            d["choice_agreement"] = self.choice_same / self.choice_checks if self.choice_checks else None
            d["violation_ratio_mean"] = float(vr.mean()) if vr is not None else None
            d["violation_ratio_min"] = float(vr.min()) if vr is not None else None
        return d

    # ------------------------------------------------------------------ persistence
    def state(self):
        """Rows, schedule, counters and the window (the index is rebuilt from the rows)."""
        return {"allocated": self.store is not None, "dim": self.dim, "kind": self.kind,
                "rows": None if self.store is None else self.store.state(),
                "n_rows": 0 if self.store is None else self.store.n_rows, "acc": self.acc,
                "t": self.t, "in_batch": self.in_batch, "n_learned": self.n_learned, "n_steps": self.n_steps,
                "n_updates": self.n_updates, "n_renorm": self.n_renorm, "checks": self.checks, "hits": self.hits,
                "n_clock": self.n_clock, "r2_sum": self.r2_sum, "r2_n": self.r2_n, "eta_batch": self._eta_batch, "acc_fold": self._acc_fold, "avg_A": self.avg_A, "avg_W": self.avg_W,
                "avg": None if self.avg is None else self.avg.state(),
                "recent": pack_rows([{"idx": i, "val": v, "c": int(c)} for i, v, c in self._recent],
                                    ("idx", "val"), ("c",)),
                "flat": pack_rows([{"idx": i, "val": v, "c": int(c)} for i, v, c in self._flat], ("idx", "val"), ("c",)),
                # example weights: only when one is not 1 (files without them: every weight 1)
                **({"weights": np.asarray(self._recent_w, dtype=np.float64)} if self._weighted() else {}),
                **({"flat_weights": np.asarray(self._flat_w, dtype=np.float64)}
                   if any(c != 1.0 for c in self._flat_w) else {})}

    def restore(self, structure, labels, state):
        """Rebuild from :meth:`state` after checking every size, index and value against the
        others (:func:`validate_memoir_state`: no file can make a kernel read or write out of
        bounds); a bad state raises ``CheckpointError``."""
        validate_memoir_state(state, len(labels), self.batch_size)
        st = {**state, "recent": unpack_rows(state["recent"], "window"),   # packed, or the former lists
              "flat": unpack_rows(state.get("flat", []), "flat examples")}
        self.bind(structure, labels)
        if st["allocated"]:
            store = rows_from_state(st["rows"])
            store.ensure(int(st["n_rows"]), int(st["dim"]))
            if st.get("avg") is not None:
                self.avg = rows_from_state(st["avg"])
                self.avg.ensure(int(st["n_rows"]), int(st["dim"]))
            self._allocate(int(st["dim"]), store=store)
        self.acc = float(st["acc"])
        for k in ("t", "in_batch", "n_learned", "n_steps", "n_updates", "n_renorm", "checks", "hits"):
            setattr(self, k, int(st[k]))
        # states written before the example clock / averaging: the clock restarts at n_steps
        self.n_clock = int(st.get("n_clock", self.n_steps))
        self.r2_sum = float(st.get("r2_sum", 0.0))
        self.r2_n = int(st.get("r2_n", 0))
        self._acc_fold = float(st.get("acc_fold", 1.0))
        self._eta_batch = float(st.get("eta_batch", self.eta()))
        if self.avg is not None and st.get("avg") is not None:
            self.avg_A, self.avg_W = float(st["avg_A"]), float(st["avg_W"])
        self._recent = [(np.asarray(r["idx"], dtype=np.int64), np.asarray(r["val"], dtype=np.float64),
                         int(r["c"])) for r in st["recent"]]
        self._flat = [(np.asarray(r["idx"], dtype=np.int64), np.asarray(r["val"], dtype=np.float64),
                       int(r["c"])) for r in st.get("flat", [])]
        self._recent_w = _weights_of(state, "weights", len(self._recent))
        self._flat_w = _weights_of(state, "flat_weights", len(self._flat))
        if self.store is not None and self.store.n_rows:
            self._index_rows()
        return self

    # ---------------------------------------- parameter mixing (Learner.parameters; streamssvm.distributed)
    def parameters(self):
        """The class rows w_c = acc V_c as one dense matrix ``V`` (dense rows only)."""
        if self.store is not None and self.store.kind != "dense":
            raise ValueError("parameter mixing needs dense class rows: use MEMOIR(rows='dense')")
        return {} if self.store is None else {"V": self.acc * self.store.V[:self.store.n_rows, :self.dim]}

    def set_parameters(self, params):
        """Install class rows (:meth:`parameters`) with acc = 1 and rebuild the MIPS index."""
        V, st = np.asarray(params["V"], dtype=np.float64), self.store
        if st is None or st.kind != "dense":
            raise ValueError("set_parameters() needs allocated dense class rows (MEMOIR(rows='dense'), one example)")
        for rows in (st, st if self.avg is None else self.avg):
            rows.ensure(V.shape[0], V.shape[1])
        st.V[...] = 0.0
        st.V[:V.shape[0], :V.shape[1]] = V
        st.sq, self.acc, self.dim = float(np.sum(V * V)), 1.0, max(self.dim, V.shape[1])
        self._touched.clear()
        self._allocate(self.dim, store=st)
        self._index_rows()


def _weights_of(st, key, n):
    """The example weights ``st[key]`` (n finite values > 0), or n ones when absent (a file
    from before example weights, or every weight 1)."""
    if key not in st:
        return [1.0] * n
    w = np.asarray(st[key])
    if w.ndim != 1 or w.shape[0] != n or (w.size and w.dtype.kind not in "iuf"):
        _bad(f"{key} must be {n} numbers, got {w.dtype} {w.shape}")
    w = w.astype(np.float64)
    if not np.all((w > 0.0) & np.isfinite(w)):
        _bad(f"{key}: example weights must be finite and > 0")
    return [float(v) for v in w]


def _bad(msg):
    raise CheckpointError(f"invalid MEMOIR state in the file: {msg}")


def _int(st, key, low=0, high=1 << 62, default=None):
    v = st.get(key, default) if default is not None else st[key]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not low <= int(v) < high:
        _bad(f"{key} must be an integer in [{low}, {high}), got {str(v)[:40]!r}")
    return int(v)


def _num(st, key, low=-np.inf, low_open=False, default=None):
    v = st.get(key, default) if default is not None else st[key]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        _bad(f"{key} must be a number, got {str(v)[:40]!r}")
    v = float(v)
    if not np.isfinite(v) or v < low or (low_open and v == low):
        _bad(f"{key} must be finite and {'>' if low_open else '>='} {low}, got {v!r}")
    return v


def _rows_ok(rs, kind, n_rows, what):
    """A row store's state (:meth:`DenseRows.state` / :meth:`SparseRows.state`); returns its
    column count (every feature index used with it must be below)."""
    if not isinstance(rs, dict) or rs.get("kind") != kind:
        _bad(f"{what}: a {kind} row store expected")
    dim = _int(rs, "dim", 0, 1 << 31)
    sq = rs.get("sq")
    if not isinstance(sq, (int, float, np.floating)) or not np.isfinite(sq) or sq < 0:
        _bad(f"{what}: sq must be a finite number >= 0")
    if kind == "dense":
        V = np.asarray(rs["V"])
        # fewer rows than n_rows: the store grows with zero rows (parameter mixing installs rows so)
        if V.ndim != 2 or (V.size and V.dtype.kind != "f") or V.shape[0] > n_rows:
            _bad(f"{what}: V must be a 2-D float array of at most {n_rows} rows, got {V.dtype} {V.shape}")
        if not np.isfinite(V).all():
            _bad(f"{what}: non-finite weights")
        return max(dim, V.shape[1])
    rows_n = _int(rs, "n_rows", 0, 1 << 31)
    if rows_n > n_rows:
        _bad(f"{what}: {rows_n} rows, more than the learner's {n_rows}")
    feat, cls, val = (np.asarray(rs[k]) for k in ("feat", "cls", "val"))
    if not (feat.ndim == cls.ndim == val.ndim == 1 and feat.shape == cls.shape == val.shape):
        _bad(f"{what}: feat / cls / val must be 1-D arrays of one length")
    if feat.size and (feat.dtype.kind not in "iu" or cls.dtype.kind not in "iu" or val.dtype.kind != "f"):
        _bad(f"{what}: feat / cls must be integer arrays and val a float array")
    if not np.isfinite(val).all():
        _bad(f"{what}: non-finite weights")
    for a, hi, name in ((feat, dim, "feature indices"), (cls, rows_n, "class indices")):
        if a.size and (int(a.min()) < 0 or int(a.max()) >= hi):
            _bad(f"{what}: {name} out of range [0, {hi}): min {int(a.min())}, max {int(a.max())}")
    if feat.size and np.unique(feat.astype(np.int64) * (n_rows + 1) + cls.astype(np.int64)).size != feat.size:
        _bad(f"{what}: repeated (feature, class) entries")
    return max(dim, 16)


def _examples_ok(exs, dim, n_rows, what):
    if not isinstance(exs, list):
        _bad(f"{what} must be a list")
    for i, r in enumerate(exs):
        if not isinstance(r, dict):
            _bad(f"{what} {i}: not an example")
        idx, val = np.asarray(r["idx"]), np.asarray(r["val"])
        if idx.ndim != 1 or idx.shape != val.shape or (idx.size and (idx.dtype.kind not in "iu" or val.dtype.kind != "f")):
            _bad(f"{what} {i}: idx / val must be 1-D integer / float arrays of one length")
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= dim):
            _bad(f"{what} {i}: feature indices out of range [0, {dim})")
        if not np.isfinite(val).all():
            _bad(f"{what} {i}: non-finite feature values")
        _int(r, "c", 0, max(n_rows, 1) if n_rows else 0)


def validate_memoir_state(st, n_labels, batch_size=1):
    """Check a :meth:`MEMOIR.state` before anything is built from it: counters and scalars,
    the row stores (shapes, feature and class indices in range, no repeated sparse entry,
    finite values), the lazy average (a store of the same kind and size), the held window and
    the flat examples (feature indices below the rows' columns, classes below the row count),
    and the row count against the ``n_labels`` labels of the file. Raises ``CheckpointError``.

    >>> from streamssvm.structures import MultiClass
    >>> lr = MEMOIR(mips="exact"); lr.bind(MultiClass(), [])
    >>> lr.ensure(3, ["a", "b"])
    >>> lr.learn(np.array([0, 1]), np.array([2]), np.array([1.0]), np.array([1]))
    >>> st = lr.state(); validate_memoir_state(st, 2)
    >>> st["recent"]["packed"]["idx"][0] = 7   # the window's examples, packed (pack_rows)
    >>> validate_memoir_state(st, 2)
    Traceback (most recent call last):
    ...
    streamssvm.errors.CheckpointError: invalid MEMOIR state in the file: window example 0: feature indices out of range [0, 3)
    """
    if not isinstance(st, dict):
        _bad("not a mapping")
    st = {**st, "recent": unpack_rows(st.get("recent", []), "window"), "flat": unpack_rows(st.get("flat", []), "flat")}
    try:
        for k in ("t", "n_learned", "n_steps", "n_updates", "n_renorm", "checks", "hits"):
            _int(st, k)
        _int(st, "in_batch", 0, max(int(batch_size), 1))
        for k in ("n_clock", "r2_n"):
            _int(st, k, default=0) if k in st else None
        _num(st, "acc", 0.0, low_open=True)
        for k in ("acc_fold",):
            if k in st:
                _num(st, k, 0.0, low_open=True)
        for k in ("r2_sum", "eta_batch", "avg_W"):
            if k in st:
                _num(st, k, 0.0)
        if "avg_A" in st:
            _num(st, "avg_A")
        allocated = st["allocated"]
        if not isinstance(allocated, (bool, np.bool_)):
            _bad("allocated must be a boolean")
        if not allocated:
            if st["recent"] or st.get("flat") or st.get("avg") is not None:
                _bad("examples or an average without rows")
            return
        kind = st["kind"]
        if kind not in ("dense", "sparse"):
            _bad(f"kind must be 'dense' or 'sparse', got {str(kind)[:40]!r}")
        dim = _int(st, "dim", 0, 1 << 31)
        n_rows = _int(st, "n_rows", 0, 1 << 31)
        if n_rows > n_labels:
            _bad(f"{n_rows} class rows but the file names {n_labels} labels")
        cols = _rows_ok(st["rows"], kind, n_rows, "rows")
        if kind == "dense" and dim > cols:
            _bad(f"dim {dim} is wider than the dense rows ({cols} columns)")
        if st.get("avg") is not None:
            _rows_ok(st["avg"], kind, n_rows, "averaged rows")
        # the store is grown to dim columns on restore; feature indices must be below both
        cols = max(cols, dim)
        _examples_ok(st["recent"], cols, n_rows, "window example")
        _examples_ok(st.get("flat", []), cols, n_rows, "flat example")
        _weights_of(st, "weights", len(st["recent"]))
        _weights_of(st, "flat_weights", len(st.get("flat", [])))
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as e:
        _bad(f"{type(e).__name__}: {e}")


__all__ = ["MEMOIR", "validate_memoir_state"]
