"""How each learner's weights are mixed after a round (no Ray here).

* BCFW: CoCoA-style averaging of the weight-sum changes, blocks blended consistently, so the
  mixed point stays w = A alpha with alpha feasible (derivation in :mod:`._bcfw`).
* SGD and MEMOIR (``ExtremeClassifier`` with dense class rows): iterative parameter mixing (McDonald, Hall and Mann, "Distributed training strategies
  for the structured perceptron", NAACL 2010): after every round the workers' weight vectors
  (and their running averages) are averaged and every worker continues from the average.

Both are one formula at the mixer, ``new = start + (beta / K) sum_k delta_k`` with
``delta_k = (worker k's weights at the round end) - start``; with ``beta = 1`` that is the plain
average of the K workers' weights for parameter mixing.
"""
from __future__ import annotations

import numpy as np

from ..structures.base import Weights
from . import _bcfw


def bound_learner(model):
    """The estimator's bound learner, or None before its first example (binding earlier would
    change how the estimator treats its first input)."""
    return model.bound_learner


def learner_kind(model):
    """``"bcfw"`` (dual mixing: blend the held blocks) or ``"ipm"`` (iterative parameter
    mixing), from the learner's declared ``mixing``; raises a clear error for learners or
    settings that cannot be mixed yet."""
    lr = model.learner
    lr.check_distributed(model.n_features)
    if getattr(model, "scale", False):
        # each worker would learn its own running RMS of each column: the mixed weights would
        # mix models of differently scaled features
        raise ValueError(f"distributed learning does not share feature-scaling statistics between workers: "
                         f"pass {type(model).__name__}(scale=False, ...) (distributed.run and the CLI's --workers do, with a warning)")
    if getattr(model, "normalize", False):
        # likewise each worker's running mean row norm (streamssvm.row_norm)
        raise ValueError(f"distributed learning does not share row-normalization statistics between workers: "
                         f"pass {type(model).__name__}(normalize=False, ...) (distributed.run and the CLI's --workers "
                         "do, with a warning)")
    if lr.mixing == "dual":
        _bcfw.check_learner(lr)
        return "bcfw"
    if lr.mixing == "primal":
        return "ipm"
    raise ValueError(f"{type(lr).__name__} declares no mixing and cannot be distributed")


def pad(a, shape):
    a = np.asarray(a, dtype=np.float64)
    if a.shape == tuple(shape):
        return a
    out = np.zeros(shape)
    out[tuple(slice(0, s) for s in a.shape)] = a
    return out


def _sub(now, start):
    out = {}
    for k, a in now.items():
        b = start.get(k)
        if b is None:
            out[k] = a.copy()
            continue
        shape = tuple(max(x, y) for x, y in zip(a.shape, b.shape))
        out[k] = pad(a, shape) - pad(b, shape)
    return out


def combine(start, deltas, gamma):
    """``start + gamma * sum(deltas)`` over dicts of arrays, padding to the largest shapes."""
    keys = set(start)
    for d in deltas:
        keys |= set(d)
    out = {}
    for k in sorted(keys):
        arrs = [a[k] for a in [start, *deltas] if k in a]
        shape = tuple(max(s) for s in zip(*(a.shape for a in arrs)))
        acc = np.zeros(shape)
        for d in deltas:
            if k in d:
                acc += pad(d[k], shape)
        out[k] = (pad(start[k], shape) if k in start else np.zeros(shape)) + gamma * acc
    return out


def average_step(U_bar, U, f):
    """``U_bar + f (U - U_bar)`` over dicts of arrays (padding to the largest shapes; in place in
    ``U_bar``'s arrays when the shapes agree): one move of the mixer's average of the mixed
    points, done alike by the mixer and by every worker that predicts with that average, so that
    both hold the same bits.

    >>> average_step({}, {"E": np.ones(2)}, 1.0)["E"].tolist()
    [1.0, 1.0]
    """
    if set(U_bar) == set(U) and all(np.shape(U_bar[k]) == np.shape(U[k]) for k in U) \
            and all(isinstance(v, np.ndarray) and v.flags.writeable and v.dtype == np.float64 for v in U_bar.values()):
        # in place, in the operations combine() does: ((0 + U) + (-U_bar)) is U - U_bar exactly,
        # then U_bar + f (U - U_bar) -- the same bits without the weight-sized temporaries
        for k, a in U_bar.items():
            d = np.subtract(U[k], a)
            d *= f
            a += d
        return U_bar
    return combine(U_bar, [{k: v for k, v in U.items()}, {k: -np.asarray(v) for k, v in U_bar.items()}], f)


def union_lam(lam, n):
    """The lambda of the union's objective with ``n`` blocks: ``lam``, or with ``lam=None`` the
    single process's rule, lambda following n (``BCFW.effective_lam``: min(1e-3, 6 / n)), so
    that a distributed run certifies the objective a single run over the same examples does.

    >>> union_lam(0.01, 10_000), union_lam(None, 500), union_lam(None, 12_000)
    (0.01, 0.001, 0.0005)
    """
    if lam is not None:
        return float(lam)
    from ..learners.bcfw import BCFW
    return min(BCFW.AUTO_LAM, BCFW.AUTO_LAM_N / max(int(n), 1))


class _Mixing:
    """Worker side of one mixing scheme, through the learner's public mixing interface
    (:meth:`~streamssvm.learners.base.Learner.parameters` and friends): the round's start
    point, the worker's delta from it, installing the mixed parameters."""

    kind = None
    #: whether the mixing takes held example weights other than 1 (BCFW's union of weighted dual
    #: blocks is not derived yet: ``BCFW.set_union`` refuses them)
    example_weights = True

    def __init__(self, lam, n_workers, beta=1.0, line_search=False):
        self.lam = None if lam is None else float(lam)   # None: lambda follows n (union_lam)
        self.gamma = float(beta) / int(n_workers)
        self.line_search = bool(line_search)
        self.start = {}

    def round_start(self, model, n_global):
        lr = bound_learner(model)
        self.start = {} if lr is None else lr.parameters()

    def prepare(self, model):
        """Before learning more examples (every 32 examples of a round)."""

    def full(self, model):
        """Whether a new example would first evict (the worker's window is full: BCFW windows)."""
        return False

    def make_room(self, model):
        """Before one new example: evict what the worker's window needs (BCFW windows)."""

    def check(self, model):
        """After the round's examples: raise when the worker's state cannot be mixed."""

    def delta(self, model):
        lr = bound_learner(model)
        return {} if lr is None else _sub(lr.parameters(), self.start)

    def loss_delta(self, model):
        """sum over this worker's blocks of L_i(end) - L_i(start) (the line search's dL; None
        without one)."""
        return None

    def n_blocks(self, model):
        lr = bound_learner(model)
        return 0 if lr is None else int(lr.n_blocks)

    def totals(self, model):
        """What the mixer needs of this worker after a round besides its delta: its block steps
        in the round and its held blocks' loss sum at the round start (the average), the blocks
        it evicted and their sums at the round start (None where the scheme has none)."""
        return {"steps": None, "loss_start": None, "evicted": 0, "removed": None, "removed_loss": 0.0}


class BCFWMixing(_Mixing):
    """BCFW: snapshot at the round start, delta of the weight sums U, apply the mixed sums and
    blend the dual blocks (CoCoA with beta = 1, CoCoA+ adding with beta = K; see :mod:`._bcfw`)."""

    kind = "bcfw"
    example_weights = False

    def __init__(self, lam, n_workers, beta=1.0, line_search=False):
        super().__init__(lam, n_workers, beta, line_search)
        self.sigma = float(beta)     # CoCoA+ local subproblem sigma' = gamma K
        self.snap = None
        self.n_others = 0
        self.loss0 = 0.0
        self.loss_end = None
        # the line search's sum_i L_i at the next round's start, carried over from this round's end
        # (L_i is linear in alpha_i: the blend moves the sum by gamma (end - start)) so that a round
        # sums the blocks' losses once, not twice; None: sum them
        self.loss_next = None
        self.steps0 = 0
        self.pools = None    # the held blocks' pools at the round start (_bcfw.pool_snapshot)
        self.window = None   # this worker's FIFO window W_k (None: unbounded; see _bcfw.window_share)
        self._no_evictions()

    def _no_evictions(self):
        self.evicted = 0
        self.removed = None      # R_k = sum over this round's evicted blocks of u_i(alpha_i^0) (Weights)
        self.removed_loss = 0.0  # their L_i(alpha_i^0)

    def _removed_sums(self):
        R = self.removed
        return None if R is None else {"E": R.E, "T": R.T, "B": R.B}

    def round_start(self, model, n_global):
        # a worker without a learner yet starts its sums at 0: its delta is then its own blocks'
        # sums, which keeps the mixed sums consistent (its local view lags for one round)
        super().round_start(model, n_global)
        lr = bound_learner(model)
        self.snap = None if lr is None else lr.dual_snapshot(layout="store")
        self.steps0 = 0 if lr is None else _bcfw.steps(lr)
        self.pools = None if lr is None else _bcfw.pool_snapshot(lr, self.snap["slots"])
        self._no_evictions()
        if lr is None or not self.line_search:
            self.loss0 = 0.0
        else:
            self.loss0 = self.loss_next if self.loss_next is not None else _bcfw.loss_sum(lr)
        self.loss_end = self.loss_next = None
        if lr is not None and self.sigma != 1.0:
            # the learner holds U / sigma' during the round (the CoCoA+ local subproblem)
            self.start = _bcfw.scale_u(lr, 1.0 / self.sigma)
        if lr is not None and lr.gap_every is not None and (lr.sampling == "gap" or lr.cache):
            lr.hold_outside_sums()   # its own full passes add back the other workers' sums
        self.n_others = max(int(n_global) - self.n_blocks(model), 0)
        self.prepare(model)

    def prepare(self, model):
        """Before learning more examples: step with the global n (local view)."""
        lr = bound_learner(model)
        if lr is not None:
            n = self.n_others + lr.n_blocks
            lr.set_union(union_lam(self.lam, n), n, self.sigma)

    def full(self, model):
        if self.window is None:
            return False
        lr = bound_learner(model)
        return lr is not None and lr.n_blocks >= self.window

    def make_room(self, model):
        """Before a new example: with the worker's window W_k full, evict its oldest blocks (FIFO,
        as one process does) and keep their round-start sums (``_bcfw.evict_oldest``)."""
        if self.window is None:
            return
        lr = bound_learner(model)
        while lr is not None and lr.n_blocks >= self.window:
            if self.removed is None:
                self.removed = Weights(1, lr.W.Kc)
            self.removed_loss += _bcfw.evict_oldest(lr, self.snap, self.removed)
            self.evicted += 1

    def check(self, model):
        lr = bound_learner(model)
        if lr is not None and lr.store.capacity is not None:
            raise ValueError("a distributed worker's BCFW must run unbounded (the worker keeps its window)")

    def delta(self, model):
        """D_k = dU_k + R_k: the change of the blocks the worker still holds (the evicted ones'
        start sums R_k go to the mixer whole, in :meth:`totals`)."""
        d = super().delta(model)
        return combine(d, [self._removed_sums()], 1.0) if self.removed is not None else d

    def loss_delta(self, model):
        """sum_{i held} (L_i(end) - L_i(start)): the held blocks' change (evicted ones excluded)."""
        if not self.line_search:
            return None
        lr = bound_learner(model)
        if lr is None:
            return 0.0
        self.loss_end = _bcfw.loss_sum(lr)
        return self.loss_end - (self.loss0 - self.removed_loss)

    def totals(self, model):
        """Block steps of this round (the mixer's average weighs each mixed point by the step
        indices of its round) and sum_i L_i at the round start (None unless the loss sums are
        reported)."""
        lr = bound_learner(model)
        return {"steps": 0 if lr is None else _bcfw.steps(lr) - self.steps0,
                "loss_start": (float(self.loss0 - self.removed_loss) if lr is not None else 0.0)
                if self.line_search else None,
                "evicted": int(self.evicted), "removed": self._removed_sums(),
                "removed_loss": float(self.removed_loss)}

    def apply(self, model, mixed, n_global, gamma=None, sigma=None):
        if sigma is not None:   # adaptive mixing: the mixer's sigma' for the next round
            self.sigma = float(sigma)
        lr = bound_learner(model)
        if lr is None:
            return
        gamma = self.gamma if gamma is None else float(gamma)
        if self.loss_end is not None:   # the held blocks' sum after the blend
            held0 = self.loss0 - self.removed_loss
            self.loss_next = held0 + gamma * (self.loss_end - held0)
        if gamma != 1.0:   # gamma = 1 (adding): every block keeps its new alpha as it is
            lr.blend_dual(self.snap, gamma)
            _bcfw.blend_pools(lr, self.snap, self.pools, gamma)   # pairwise / away steps, the cache
        lr.set_parameters(mixed)
        lr.set_union(union_lam(self.lam, n_global), n_global)

    def block_sums(self, model, n_global):
        lr = bound_learner(model)
        if lr is None:
            return {"hinge_sum": 0.0, "loss_sum": 0.0, "gap_sum": 0.0, "n": 0, "oracle_calls": 0, "exact": True}
        return _bcfw.block_sums(lr, union_lam(self.lam, n_global), n_global)


class ParameterMixing(_Mixing):
    """Iterative parameter mixing (SGD: w and its running average; MEMOIR: the dense class rows)."""

    kind = "ipm"

    def __init__(self, lam, n_workers, beta=1.0, line_search=False):
        if line_search:
            raise ValueError("mix_step='line' needs a dual point (BCFW); parameter mixing has none")
        super().__init__(lam, n_workers, beta)
        self.pending = {}

    def round_start(self, model, n_global):
        # a worker without a learner yet holds the last mixed weights (it applies them once bound)
        super().round_start(model, n_global)
        if bound_learner(model) is None:
            self.start = dict(self.pending)

    def apply(self, model, mixed, n_global, gamma=None, sigma=None):
        lr = bound_learner(model)
        self.pending = mixed
        if lr is not None and mixed and lr.parameters():
            lr.set_parameters(mixed)

    def block_sums(self, model, n_global):
        """Parameter mixing keeps no dual point of the union: the primal's hinge sum only."""
        lr = bound_learner(model)
        if lr is None:
            return {"hinge_sum": 0.0, "loss_sum": float("nan"), "gap_sum": float("nan"), "n": 0,
                    "oracle_calls": 0, "exact": False, "regularizer": 0.0}
        c = model.certificate()   # the estimator's (observes the learner; MEMOIR's too)
        n = int(c.n_blocks)
        return {"hinge_sum": (c.hinge * n) if n else 0.0, "loss_sum": float("nan"), "gap_sum": float("nan"),
                "n": n, "oracle_calls": c.oracle_calls, "exact": False, "regularizer": c.regularizer}


def make_mixing(kind, lam, n_workers, beta=1.0, line_search=False):
    return {"bcfw": BCFWMixing, "ipm": ParameterMixing}[kind](lam, n_workers, beta, line_search)
