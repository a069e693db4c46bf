"""n-slack cutting plane with per-example working sets (Tsochantaridis et al. 2005; the training
algorithm of Table 1 in Choi, Meshi & Srebro, Fast and scalable structural SVM with slack
rescaling, AISTATS 2016), for margin or slack rescaling.

Every held example i has a working set W_i of labelings (starting with its ground truth). With
d_y = c_y (s(y_i) - s(y)) (c_y = 1 for margin, Delta(y) for slack rescaling) every constraint is
affine in w: H_i(y; w) = Delta(y) - <w, Phi_x(d_y)>. The restricted dual is the BCFW dual of
the dual of :mod:`streamssvm.certificate` with each block alpha_i on the simplex over W_i; it is solved by
block-coordinate pairwise (SMO) steps with exact line search (``_kernels/cp.block_qp``), each
block to the tolerance ``qp_tol`` on its restricted Wolfe gap.

Streaming: a new example is held with its ground truth as working set and visited once
(separation, then its block solve), then ``replay`` held examples are visited again, in turn.
The replay matters because every block's contribution to w = A alpha / (lam n) shrinks as n
grows and a new block's solve moves the weights the examples share (the bias at least): without
it, the first example of a class could be outvoted by the second example of another class
until the next ``refine`` (``{'a': 1} -> x``, ``{'b': 1} -> y`` predicted ``y`` for ``{'a': 1}``).
It is the counterpart of the replay steps of block-coordinate Frank-Wolfe (Lacoste-Julien,
Jaggi, Schmidt & Pletscher, Block-Coordinate Frank-Wolfe Optimization for Structural SVMs).

A round (``refine``) visits every example: it computes the current slack
xi_i = max_{y in W_i} H_i(y; w) (>= 0, the ground truth gives 0), runs the separation
(``search``) at the current w, adds the label if H_i(y^; w) > xi_i + eps, and re-solves the
block; then it sweeps the blocks of the restricted QP until their gaps are below ``qp_tol``.
Rounds stop when one adds no constraint.

Certificate: the restricted alpha is feasible for the full dual and w = A alpha is rebuilt from
it, so one pass of the *exact* oracle (whatever ``search`` is) gives the exact full duality gap
P(w) - D(alpha) >= P(w) - min P.

Example weights (``learn(..., weight=c)``): the objective lam/2 ||w||^2 + (1/N) sum_i c_i H_i(w),
N = sum_i c_i over the held examples, has the dual of BCFW's weighted dual
(``streamssvm._kernels.bcfw``): w = sum_i c_i Phi(alpha_i D_i) / (lam N), D(alpha) = (1/N) sum_i
c_i alpha_i . delta_i - lam/2 ||w||^2. Block i's part of D, divided by c_i / N, is
beta . grad - (c_i s / 2) beta^T Q beta with s = 1 / (lam N) and grad the block's H_i: the
block QP with the scale c_i s, its change applied to the weights times c_i; the certificate sums
c_i H_i and c_i alpha_i . delta_i over N. Every weight 1 is the unweighted learner, bit for bit.
"""
from __future__ import annotations

import math
import time

import numpy as np

from .._kernels import bcfw as KB
from .._kernels import bundles as KBu
from .._kernels import cp as KC
from .._kernels import structops as so
from .._kernels.common import py_entry
from ..saved_state import (_rng_restore, _rng_state, pack_rows, unpack_rows, validate_example, validate_scalars,
                           validate_weights)
from ..certificate import Certificate
from ..errors import CheckpointError
from ..oracles.slack import search_example
from ..oracles.structured import ExampleOracles
from ..structures.base import Weights
from ..workspace import Workspace
from .base import DenseWeights, Learner, label_capacity, check_number, check_search_rescaling
from ..params import Param

_SEARCH = ("exact", "angular", "bisecting", "binary", "sarawagi")


class _Block:
    __slots__ = ("tok_ptr", "fidx", "fval", "ytrue", "Ki", "L", "G", "labs", "keys", "delta", "D", "Q", "alpha", "c")

    def __init__(self):
        self.c = 1.0   # the example weight


class CuttingPlane(DenseWeights, Learner):
    """n-slack cutting plane on the held examples, margin or slack rescaling.

    Parameters
    ----------
    lam
        Regularization lambda of P(w) = lam/2 ||w||^2 + (1/n) sum_i H_i(w) (Choi et al.'s C;
        SVM-struct's C is 1 / (lam n)).
    rescaling
        ``"margin"`` or ``"slack"``.
    search
        Separation oracle: ``"exact"`` (loss-augmented decoding for margin, the exact slack
        oracle for slack) or, for slack rescaling, a search over the structure's
        lambda-oracles: ``"angular"`` (constrained oracle on the level points), ``"bisecting"``,
        ``"binary"`` or ``"sarawagi"`` (Sarawagi & Gupta, given xi_i).
    eps
        A label enters the working set when it violates by more than ``eps``: H_i(y^) > xi_i + eps.
    max_iter
        Maximal number of rounds one ``refine`` call runs.
    max_queries, tol
        Search budget and stopping ratio.
    qp_tol
        Tolerance on each block's restricted Wolfe gap (default eps / 10).
    qp_sweeps
        Maximal sweeps over all blocks of the restricted QP after a round.
    replay
        Held examples visited again (separation and block solve) after each new one, in
        turn, oldest first; the restricted QP over the new example and these is then solved
        to ``qp_tol`` (0: only the new example is visited until ``refine``).
    seed
        Order of the examples in a round (shuffled each round; None: in order) and the
        reservoir's choices.
    window
        Most examples held (None: unbounded). Each held example keeps its working set, so the
        memory grows with the stream without a bound; when full, ``eviction`` makes room.
    eviction
        ``"fifo"``: the oldest held example leaves (a sliding window, for drifting streams);
        ``"reservoir"``: a uniform sample of everything seen is kept (the new example replaces a
        random held one with probability capacity / seen, else it is not held). An evicted
        example's contribution A alpha_i leaves the weights with it, so w = A alpha stays exact
        over the held examples and the certificate is that of the window.

    Examples
    --------
    >>> import numpy as np, streamssvm as ss
    >>> rng = np.random.default_rng(0)
    >>> m = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane(lam=0.05, rescaling="slack"))
    >>> for _ in range(100):
    ...     y = int(rng.integers(3)); m.learn_one({"f": y + 0.1 * rng.normal(), "g": 1.0}, y)
    >>> c = m.refine(passes=20, certify=True)
    >>> m.predict_one({"f": 2.0, "g": 1.0}), 0 <= c.gap < 1e-2, c.exact
    (2, True, True)

    A class's first example counts at once:

    >>> m = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane())
    >>> m.learn_one({"a": 1}, "x"); m.learn_one({"b": 1}, "y")
    >>> m.predict_one({"a": 1}), m.predict_one({"b": 1})
    ('x', 'y')
    """

    #: ``learn(..., weight=c)``: the exact weighted dual (see the module docstring)
    example_weights = True

    renamed = {"capacity": "window"}
    params = (
        Param("lam", 1e-3, "float", "regularization lambda", low=0.0, low_open=True, high=1e15),
        Param("rescaling", "margin", "choice", "margin or slack rescaling of the loss",
              choices=("margin", "slack")),
        Param("search", "exact", "choice", "separation oracle: exact, or a search over lambda-oracles "
              "(slack rescaling)", choices=_SEARCH),
        Param("eps", 1e-3, "float", "a label enters the working set when it violates by more than eps",
              low=0.0),
        Param("max_iter", 100, "int", "most rounds one refine call runs", low=1, high=1_000_000),
        Param("max_queries", 100, "int", "budgeted search: most oracle queries", low=1, high=10_000),
        Param("tol", 0.999, "float", "budgeted search: stopping ratio", low=0.0, high=1.0),
        Param("qp_tol", None, "float", "tolerance on each block's restricted Wolfe gap (None: eps / 10)",
              low=0.0, none=True),
        Param("qp_sweeps", 20, "int", "most sweeps of the restricted QP after a round", low=0, high=10_000),
        Param("seed", 0, "seed", "order of the examples in a round (None: in order), reservoir"),
        Param("window", 100_000, "int", "most examples held (None: unbounded)", low=1, none=True),
        Param("eviction", "fifo", "choice", "what makes room when full: a FIFO window or a reservoir",
              choices=("fifo", "reservoir")),
        Param("replay", 1, "int", "held examples visited again after each new one", low=0, high=1000),
    )

    @classmethod
    def _unit_test_params(cls):
        """Small, fast settings for the conformance checks (river's convention)."""
        yield {"lam": 0.05, "max_iter": 5, "seed": 0}

    def __init__(self, *, lam=1e-3, rescaling="margin", search="exact", eps=1e-3, max_iter=100,
                 max_queries=100, tol=0.999, qp_tol=None, qp_sweeps=20, seed=0, window=100_000,
                 eviction="fifo", replay=1, **kwargs):
        self._set_params(locals())
        self._bound = False

    # ------------------------------------------------------------------ binding
    def bind(self, structure, labels):
        check_search_rescaling(self.search, self.rescaling)
        self.structure = structure
        self._kind = structure.kind
        self._use_trans = bool(structure.use_trans)
        structure.check_rescaling(self.rescaling)
        self._K = 0
        self.W = Weights(1, 4)
        self._C = structure.cost_matrix(4, labels)
        self.blocks = []
        self._N = 0.0                 # sum of the held examples' weights (n when every weight is 1)
        self.rounds = 0
        self.n_learned = 0
        self.oracle_calls = 0         # separation calls (one per example visit)
        self.queries = 0              # oracle queries made by the searches
        self.constraints_added = 0
        self.qp_steps = 0
        self._rng = np.random.default_rng(self.seed)
        self._res_rng = np.random.default_rng(self.seed)   # the reservoir's choices
        self.seen = 0                 # examples offered (held or not)
        self.evicted = 0
        self._cursor = 0              # the next held example the replay visits
        self._oracles = None
        self._ws = Workspace(structure)   # the kernels' scratch buffers
        self._bound = True

    def ensure(self, n_features, labels):
        n_labels = len(labels)
        Kc = label_capacity(n_labels, self.W.Kc)
        old_Kc = self.W.Kc
        self.W.grow(n_features, Kc)
        grew = n_labels > self._K > 0
        if n_labels != self._K or Kc != self._C.shape[0]:
            self._K = n_labels
            self._C = self.structure.cost_matrix(Kc, labels)
            self._oracles = None
            if Kc != old_Kc:
                for b in self.blocks:
                    self._rebuild_block(b)
        if grew:
            # a block whose working set is still only its ground truth (e.g. learned while a
            # single label was known: nothing violated it) is separated again against the grown
            # label set, so a class's first example counts as soon as a second class exists
            for b in self.blocks:
                if len(b.labs) <= 1:
                    self._visit(b)

    @property
    def n_blocks(self):
        return len(self.blocks)

    def _orc(self):
        if self._oracles is None:
            self._oracles = ExampleOracles(self.structure, self._K, self.W.Kc, self._C)
        return self._oracles

    def prediction_tables(self):
        """The iterate's tables, scaled by :meth:`_scale`."""
        W = self.W
        return W.E, W.E, 0.0, W.T, W.B, float(self._scale())

    def _scale(self):
        return 1.0 / (self.lam * (self._N if self.blocks else 1.0))

    # ------------------------------------------------------------------ working sets
    def _stat_of(self, b, lab):
        """d_y = c_y (s(y_i) - s(y)) and Delta(y) for a labeling of block b."""
        Kc = self.W.Kc
        d = np.zeros(self.structure.stat_size(b.L, Kc))
        so.truth_stat(self._kind, b.ytrue, len(b.ytrue), b.L, Kc, d, 1.0)
        so.labeling_stat(self._kind, lab, b.L, Kc, d, -1.0)
        ybuf = np.zeros(Kc, dtype=np.int32)
        delta = so.labeling_loss(self._kind, lab, b.ytrue, len(b.ytrue), self._C, b.L, self._K, max(b.Ki, 1), ybuf)
        if self.rescaling == "slack":
            d *= delta
        return d, float(delta)

    def _fit_lab(self, b, lab):
        n = self.structure.labeling_len(b.L, self.W.Kc)
        out = np.zeros(n, dtype=np.int32)
        m = min(n, len(lab))
        out[:m] = lab[:m]
        return out

    def _rebuild_block(self, b):
        """Recompute the statistics and the Gram matrix of a block's working set (label capacity
        changed)."""
        b.labs = [self._fit_lab(b, lab) for lab in b.labs]
        b.keys = {lab.tobytes() for lab in b.labs}
        rows = [self._stat_of(b, lab) for lab in b.labs]
        b.D = np.array([r[0] for r in rows])
        b.delta = np.array([r[1] for r in rows])
        m = len(b.labs)
        b.Q = np.zeros((m, m))
        for i in range(m):   # the later labeling first, as _add_label computes it (stat_dot's
            for j in range(i + 1):   # sum is not bitwise symmetric on chains), so a restore is exact
                b.Q[i, j] = b.Q[j, i] = KC.stat_dot(self._kind, b.G, b.D[i], b.D[j], b.L, self._K, self.W.Kc,
                                                    self._use_trans)

    def _add_label(self, b, lab):
        lab = self._fit_lab(b, lab)
        key = lab.tobytes()
        if key in b.keys:
            return False
        d, delta = self._stat_of(b, lab)
        m = len(b.labs)
        row = np.array([KC.stat_dot(self._kind, b.G, d, b.D[j], b.L, self._K, self.W.Kc, self._use_trans)
                        for j in range(m)] + [KC.stat_dot(self._kind, b.G, d, d, b.L, self._K, self.W.Kc,
                                                          self._use_trans)])
        Q = np.zeros((m + 1, m + 1))
        Q[:m, :m] = b.Q
        Q[m, :] = row
        Q[:, m] = row
        b.Q = Q
        b.D = np.vstack([b.D, d[None, :]])
        b.delta = np.append(b.delta, delta)
        b.alpha = np.append(b.alpha, 0.0)
        b.labs.append(lab)
        b.keys.add(key)
        self.constraints_added += 1
        return True

    def _H(self, b, scale=None, W=None):
        """H_i(y; w) for the working set of b at the weights ``scale * W`` (default: current)."""
        Kc = self.W.Kc
        scale = self._scale() if scale is None else scale
        W = self.W if W is None else W
        S = self._ws.ensure(b.L, Kc).S
        so.emission_scores(W.E, scale, b.tok_ptr, b.fidx, b.fval, b.L, self._K, S)
        r = np.zeros(b.D.shape[1])
        KC.score_vector(self._kind, S, W.T, W.B, scale, b.L, self._K, Kc, self._use_trans, r)
        return b.delta - b.D @ r

    def _solve_block(self, b, tol):
        """Restricted block QP to ``tol``; applies the change to the weights."""
        if len(b.labs) < 2:
            return 0.0
        grad = self._H(b)
        beta = b.alpha.copy()
        gap = float(grad.max() - beta @ grad)
        if gap <= tol:
            return gap
        self.qp_steps += KC.block_qp(b.Q, grad, beta, b.c * self._scale(), tol, 1000)
        delta = beta - b.alpha
        st = delta @ b.D
        so.stat_apply(self._kind, (self.W.E, self.W.T, self.W.B), (b.tok_ptr, b.fidx, b.fval), st, b.L, self._K,
                      self.W.Kc, b.c, self._use_trans)
        b.alpha = beta
        return gap

    # ------------------------------------------------------------------ separation
    def _separate(self, b, xi):
        """The separation call at the current weights: (labeling, H_i(y^; w)) from ``search``."""
        o = self._orc()
        o.prepare(self.W.E, self.W.T, self.W.B, self._scale(), b.tok_ptr, b.fidx, b.fval, b.ytrue, max(b.Ki, 1))
        self.oracle_calls += 1
        lab, H, _ = self._run_search(o, self.search, xi)
        return lab, H

    def _run_search(self, o, name, xi):
        """(labeling, H, SearchResult or None) of search ``name`` on the prepared oracles ``o``."""
        if self.rescaling == "margin":
            lab, H = o.margin()
            return lab, H, None
        if name == "exact":
            lab, H = o.exact()
            return lab, H, None
        q0 = o.lam_queries + o.c_queries
        r = search_example(name, o, self.max_queries, self.tol, xi=xi, eps=self.eps)
        self.queries += o.lam_queries + o.c_queries - q0
        if r.label is None or r.phi <= 0:
            return o.truth_lab.copy(), 0.0, r
        return o.labeling(r.label).copy(), float(r.phi), r

    # ------------------------------------------------------------------ learning
    def _make_room(self):
        """Evict a held example if the store is full; False when the reservoir does not keep
        the new one."""
        self.seen += 1
        if self.window is None or len(self.blocks) < self.window:
            return True
        if self.eviction == "fifo":
            self._evict(0)
            return True
        r = int(self._res_rng.integers(0, self.seen))   # algorithm R
        if r >= self.window:
            return False
        self._evict(int(self._res_rng.integers(0, len(self.blocks))))
        return True

    def _evict(self, i):
        """Drop held example ``i`` and its contribution A alpha_i from the weights."""
        b = self.blocks.pop(i)
        self._N -= b.c
        if i < self._cursor:   # the replay's next example stays the same
            self._cursor -= 1
        if len(b.labs) > 1:
            so.stat_apply(self._kind, (self.W.E, self.W.T, self.W.B), (b.tok_ptr, b.fidx, b.fval), -(b.alpha @ b.D),
                          b.L, self._K, self.W.Kc, b.c, self._use_trans)
        self.evicted += 1

    def learn(self, tok_ptr, fidx, fval, ytrue, Ki=1, weight=1.0):
        """Hold a new example (working set = its ground truth), then one separation and block
        solve on it (after an eviction when ``capacity`` examples are held), then ``replay``
        visits of held examples. ``weight`` c > 0: the example's weight (see the module
        docstring)."""
        if weight != 1.0:
            weight = float(weight)
            if not 0.0 < weight < math.inf:
                raise ValueError(f"CuttingPlane example weights must be finite and > 0, got {weight!r}")
        if not self._make_room():
            self.n_learned += 1
            return
        b = _Block()
        b.tok_ptr = np.asarray(tok_ptr, dtype=np.int32).copy()
        b.fidx = np.asarray(fidx, dtype=np.int32).copy()
        b.fval = np.asarray(fval, dtype=np.float64).copy()
        b.ytrue = np.asarray(ytrue, dtype=np.int32).copy()
        b.Ki = int(Ki)
        b.L = len(b.tok_ptr) - 1
        mark = np.zeros(max(self.W.E.shape[0], 1))
        b.G = np.zeros((b.L, b.L))
        py_entry(so.gram)(b.tok_ptr, b.fidx, b.fval, b.L, b.G, mark)
        o_truth = self._truth_lab(b)
        b.labs, b.keys = [], set()
        b.D = np.zeros((0, self.structure.stat_size(b.L, self.W.Kc)))
        b.delta = np.zeros(0)
        b.Q = np.zeros((0, 0))
        b.alpha = np.zeros(0)
        self._add_label(b, o_truth)
        self.constraints_added -= 1
        b.alpha[0] = 1.0
        b.c = weight
        self.blocks.append(b)
        self._N += weight
        self.n_learned += 1
        self._visit(b)
        touched = self._replay()
        if touched:
            self._solve_touched([b] + touched)

    def _replay(self):
        """Visit ``replay`` held examples other than the newest, in turn (a cursor over the
        held examples, so each is revisited every ~n / replay new examples); returns them."""
        n_old = len(self.blocks) - 1
        out = []
        for _ in range(min(self.replay, n_old)):
            if self._cursor >= n_old:
                self._cursor = 0
            out.append(self.blocks[self._cursor])
            self._visit(out[-1])
            self._cursor += 1
        return out

    def _solve_touched(self, blocks):
        """The restricted QP over the blocks just visited, by block sweeps (at most
        ``qp_sweeps``) until each block's restricted gap is below ``qp_tol``: one solve per block
        leaves the last one solved the last word on the weights they share (the bias, the
        transitions), so the new example and a replayed one would undo each other's margin."""
        tol = self._qp_tol()
        for _ in range(self.qp_sweeps):
            if max(self._solve_block(b, tol) for b in blocks) <= tol:
                break

    def _truth_lab(self, b):
        return self.structure.truth_labeling(b.ytrue, self._K, self.W.Kc)

    def _visit(self, b):
        """Separation on one example, then its block solve; True when a label was added."""
        xi = max(float(self._H(b).max()), 0.0)
        lab, H = self._separate(b, xi)
        added = False
        if H > xi + self.eps:
            added = self._add_label(b, lab)
        self._solve_block(b, self._qp_tol())
        return added

    def _qp_tol(self):
        return self.eps / 10.0 if self.qp_tol is None else self.qp_tol

    def round(self):
        """One cutting-plane round; returns the number of constraints added."""
        order = np.arange(len(self.blocks)) if self.seed is None else self._rng.permutation(len(self.blocks))
        added = 0
        for i in order:
            added += int(self._visit(self.blocks[i]))
        self._worst = self.solve_restricted()
        # w = A alpha again, exactly (removes the round-off of the block updates; the learner's
        # own schedule: once per round, whatever the certificates)
        self.rebuild_weights()
        self.rounds += 1
        return added

    def solve_restricted(self, sweeps=None):
        """Sweeps of block solves over the restricted QP until every block's restricted gap is
        below ``qp_tol`` (or ``qp_sweeps`` sweeps). Returns the last sweep's largest block gap."""
        tol = self._qp_tol()
        worst = 0.0
        for _ in range(self.qp_sweeps if sweeps is None else sweeps):
            worst = 0.0
            for b in self.blocks:
                worst = max(worst, self._solve_block(b, tol))
            if worst <= tol:
                break
        return worst

    def refine(self, passes=1.0, tol=None, progress=None):
        """Up to ``ceil(passes)`` cutting-plane rounds (at most ``max_iter``); stops after a
        round that adds no constraint with the restricted QP solved to ``qp_tol``, or once the certificate is <= ``tol``."""
        check_number("passes", passes, low=0.0)
        n_rounds = min(int(np.ceil(passes)), self.max_iter)
        for k in range(n_rounds):
            added = self.round()
            if progress is not None:
                progress((k + 1) / n_rounds, self)
            if added == 0 and self._worst <= self._qp_tol():
                break
            if tol is not None and self.certificate().gap <= tol:
                break

    # ------------------------------------------------------------------ prediction / certificate
    def predict(self, ex_tok, tok_ptr, fidx, fval, lab_ptr, lablen_total):
        out = np.zeros(lablen_total, dtype=np.int32)
        if self._K == 0:
            return out
        Lm = int(np.max(np.diff(ex_tok))) if len(ex_tok) > 1 else 1
        KB.predict_batch(KBu.model(self.structure, self._K, self.W.Kc, self._C), self.W.bundle(), self._scale(),
                         self.W.E, 0.0, KBu.pack(KBu.Batch(ex_tok, tok_ptr, fidx, fval, lab_ptr)), out,
                         self._ws.ensure(Lm, self.W.Kc).scratch(Lm, False))
        return out

    def rebuild_weights(self, out=None):
        """U = sum_i Phi_{x_i}(alpha_i . D_i) from the dual point (removes round-off drift), into
        ``out`` (a :class:`Weights` shaped like ``self.W``; default: the learner's own weights)."""
        W = self.W if out is None else out
        for a in (W.E, W.T, W.B):
            a[...] = 0.0
        for b in self.blocks:
            if len(b.labs) > 1:
                so.stat_apply(self._kind, (W.E, W.T, W.B), (b.tok_ptr, b.fidx, b.fval), b.alpha @ b.D,
                              b.L, self._K, W.Kc, b.c, self._use_trans)
        return W

    def certificate(self):
        """Exact full duality gap of w = A alpha (the current weights up to round-off, rebuilt into
        a copy from the restricted dual point): one exact oracle call per held example. Observes:
        the learner's weights and counters are left untouched."""
        t0 = time.perf_counter()
        n = len(self.blocks)
        if n == 0 or self._K == 0:
            return Certificate.empty(self.lam, n, rescaling=self.rescaling)
        W = Weights(1, 1)
        W.E, W.T, W.B = np.zeros_like(self.W.E), np.zeros_like(self.W.T), np.zeros_like(self.W.B)
        self.rebuild_weights(out=W)
        scale = self._scale()
        o = ExampleOracles(self.structure, self._K, self.W.Kc, self._C)
        hinge = dual_loss = gsum = 0.0
        for b in self.blocks:
            o.prepare(W.E, W.T, W.B, scale, b.tok_ptr, b.fidx, b.fval, b.ytrue, max(b.Ki, 1))
            Hmax = o.exact()[1] if self.rescaling == "slack" else o.margin()[1]
            hinge += b.c * Hmax
            dual_loss += b.c * float(b.alpha @ b.delta)
            gsum += b.c * (Hmax - float(b.alpha @ self._H(b, scale, W)))
        n = self._N   # the weighted sample size (float(n) when every weight is 1)
        reg = 0.5 * self.lam * scale * scale * W.sqnorm()
        primal = reg + hinge / n
        dual = dual_loss / n - reg
        raw = primal - dual
        nb = len(self.blocks)
        return Certificate(gap=max(raw, 0.0), raw_gap=raw, primal=primal, dual=dual, n_blocks=nb, oracle_calls=nb,
                           seconds=time.perf_counter() - t0, exact=True, lam=self.lam, regularizer=reg,
                           hinge=hinge / n, dual_loss=dual_loss / n, block_gap_sum=gsum / n,
                           rescaling=self.rescaling,
                           note="exact oracle pass; dual = restricted cutting-plane QP (feasible for the full dual)",
                           extra={"rounds": self.rounds, "working_set_size":
                                  float(np.mean([len(b.labs) for b in self.blocks])),
                                  "separation_calls": self.oracle_calls, "search_queries": self.queries,
                                  "constraints_added": self.constraints_added})

    # ------------------------------------------------------------------ state
    def state(self):
        return {"K": self._K, "E": self.W.E, "T": self.W.T, "B": self.W.B, "C": self._C,
                "counters": np.array([self.rounds, self.n_learned, self.oracle_calls, self.queries,
                                      self.constraints_added, self.qp_steps], dtype=np.int64),
                "seen": self.seen, "evicted": self.evicted, "cursor": self._cursor,
                **({"res_rng": _rng_state(self._res_rng)} if self.eviction == "reservoir" else {}),
                **({"round_rng": _rng_state(self._rng)} if self.seed is not None else {}),
                "blocks": self._pack_blocks()}

    def _pack_blocks(self):
        """The held examples as ``pack_rows`` rows; their weights (``c``, one float each) only
        when one is not 1 (files of unweighted learners unchanged)."""
        weighted = any(b.c != 1.0 for b in self.blocks)
        rows = [{"tok_ptr": b.tok_ptr, "fidx": b.fidx, "fval": b.fval, "y": b.ytrue, "Ki": b.Ki,
                 "labs": np.array(b.labs, dtype=np.int32), "alpha": b.alpha,
                 **({"c": np.array([b.c])} if weighted else {})} for b in self.blocks]
        return pack_rows(rows, ("tok_ptr", "fidx", "fval", "y", "labs", "alpha") + (("c",) if weighted else ()),
                         ("Ki",))

    def restore(self, structure, labels, st):
        st = {**st, "blocks": unpack_rows(st["blocks"], "held examples")}   # packed, or the former list
        d, Kc, K = validate_weights(st)   # every size and index checked before anything is used
        for i, r in enumerate(st["blocks"]):
            validate_example(r["tok_ptr"], r["fidx"], r["fval"], r["y"], d, Kc, f"held example {i}",
                             structure=structure, Ki=r["Ki"], K=K)
            labs, alpha = np.asarray(r["labs"]), np.asarray(r["alpha"])
            L = len(r["tok_ptr"]) - 1
            if (labs.ndim != 2 or labs.shape[1] != structure.labeling_len(L, Kc) or alpha.shape != (labs.shape[0],)
                    or labs.shape[0] < 1 or (labs.size and labs.dtype.kind not in "iu")
                    or not np.isfinite(alpha).all()):
                raise CheckpointError(f"invalid learner state in the file: held example {i}: working set of "
                                      f"shape {labs.shape} / weights {alpha.shape}")
            if labs.size and (labs.min() < -1 or labs.max() >= max(Kc, 2)):
                raise CheckpointError(f"invalid learner state in the file: held example {i}: labelings out of range")
            if "c" in r:
                c = np.asarray(r["c"], dtype=np.float64).ravel()
                if c.shape != (1,) or not 0.0 < float(c[0]) < math.inf:
                    raise CheckpointError(f"invalid learner state in the file: held example {i}: weight must be one "
                                          "finite number > 0")
        c = np.asarray(st["counters"])
        if c.shape != (6,) or c.dtype.kind not in "iu" or int(c.min()) < 0 or int(c.max()) > 1 << 62:
            raise CheckpointError(f"invalid learner state in the file: counters must be 6 integers in [0, 2**62], "
                                  f"got {c.dtype} {c.shape}")
        validate_scalars(st, {"seen": (0, 1 << 62, "int"), "evicted": (0, 1 << 62, "int"),
                              "cursor": (0, 1 << 62, "int")}, "learner")
        self.bind(structure, labels)
        self._K = int(st["K"])
        self.W = Weights(1, 1)
        self.W.E, self.W.T, self.W.B = (np.array(st[k], dtype=np.float64) for k in ("E", "T", "B"))
        self._C = np.array(st["C"], dtype=np.float64)
        (self.rounds, self.n_learned, self.oracle_calls, self.queries, self.constraints_added,
         self.qp_steps) = (int(v) for v in st["counters"])
        self.seen = int(st.get("seen", len(st["blocks"])))
        self.evicted = int(st.get("evicted", 0))
        self._cursor = max(int(st.get("cursor", 0)), 0)
        if "res_rng" in st:
            _rng_restore(self._res_rng, st["res_rng"])
        if "round_rng" in st:   # the rounds' order (older files: restarts from the seed)
            _rng_restore(self._rng, st["round_rng"])
        mark = np.zeros(max(self.W.E.shape[0], 1))
        for r in st["blocks"]:
            b = _Block()
            b.tok_ptr = np.asarray(r["tok_ptr"], dtype=np.int32)
            b.fidx = np.asarray(r["fidx"], dtype=np.int32)
            b.fval = np.asarray(r["fval"], dtype=np.float64)
            b.ytrue = np.asarray(r["y"], dtype=np.int32)
            b.Ki = int(r["Ki"])
            b.L = len(b.tok_ptr) - 1
            b.G = np.zeros((b.L, b.L))
            py_entry(so.gram)(b.tok_ptr, b.fidx, b.fval, b.L, b.G, mark)
            b.labs = [np.asarray(x, dtype=np.int32) for x in np.asarray(r["labs"])]
            b.keys = {x.tobytes() for x in b.labs}
            b.alpha = np.asarray(r["alpha"], dtype=np.float64)
            if "c" in r:   # the example's weight (older files and unweighted learners: 1)
                b.c = float(np.asarray(r["c"], dtype=np.float64).ravel()[0])
            self._rebuild_block(b)
            self.blocks.append(b)
            self._N += b.c
