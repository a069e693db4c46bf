"""The eps-approximate regularization path of a structural SVM (Osokin, Alayrac, Lukasewitz,
Dokania & Lacoste-Julien, Minding the gaps for block Frank-Wolfe optimization of structured
SVMs, ICML 2016, Sec. 4, Algorithms 6-7).

For the n examples a BCFW learner holds, P_lam(w) = lam/2 ||w||^2 + (1/n) sum_i H_i(w). The path
is a list of breakpoints lam_0 > lam_1 > ... and weights w^j such that

* for lam >= lam_0, (lam_0 / lam) w^0 is eps-approximate (the first, linear piece: the dual
  point alpha^0 stays, w = A alpha / lam);
* for lam in [lam_{j+1}, lam_j], w^j is eps-approximate (piecewise constant: the dual point
  moves towards the ground truths, Proposition 1, and the gap grows linearly in 1 - lam/lam_j);
* when Delta <= eps - g at the last breakpoint, w^J is eps-approximate for every lam < lam_J
  (the end of the path; the printed Algorithm 7 has this test inverted, the text and the
  authors' code stop when Delta <= eps - g, as here).

The first breakpoint. Algorithm 6 puts every block on a labeling of largest loss (the oracle
at w = 0) and bounds the gap of that dual point by B / lam, B = ||psi~||^2 + (1/n) sum_i theta_i.
Here the gap g(t) of that dual point at lam = 1/t is computed exactly instead: g is convex in t
(a sum of maxima of affine functions of t) with g(0) = 0, so g(t) / t is non-decreasing and
g(t) <= t B. One exact pass at t_1 = kappa eps / ||psi~||^2 gives lam_0 = 1 / t_1 when
g(t_1) <= kappa eps, else lam_0 = g(t_1) / (t_1 kappa eps) <= B / (kappa eps) (certified by
convexity and checked by a second pass): never above the paper's lam_inf.

``exact=True`` runs the solver at each new breakpoint until an exact full gap pass certifies
gap <= kappa eps; ``exact=False`` is the paper's heuristic path, stopped by the stale block-gap
estimates (no guarantee; Osokin et al. found kappa = 0.7 accurate enough).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np

from ._kernels import bcfw as K
from .metrics import ProgressiveMetrics
from .params import Param

#: relative safety margin on the excess gap eps - g (round-off of the breakpoint arithmetic)
TAU_MARGIN = 1e-9


class PathSettings:
    """The settings of :func:`regularization_path` as :class:`~streamssvm.params.Param` rows
    (the options of ``streamssvm path`` are generated from them)."""
    params = (
        Param("eps", 0.1, "float", "path accuracy: every lambda gets weights within eps of its optimum",
              low=0.0, low_open=True),
        Param("kappa", 0.7, "float", "solver tolerance at each breakpoint, kappa * eps (Osokin et al.: 0.9 for the "
              "eps-path, 0.7 for the heuristic path)", low=0.0, low_open=True, high=0.999),
        Param("lam_min", 1e-5, "float", "stop once the next breakpoint would be below this lambda",
              low=0.0, low_open=True),
        Param("exact", True, "bool", "certify every breakpoint by an exact full gap pass (else the heuristic path "
              "stopped by the stale block-gap estimates)"),
        Param("max_passes", 1000.0, "float", "effective passes allowed per breakpoint", low=0.0, low_open=True),
        Param("check_every", 0.25, "float", "effective passes between two looks at the stale gap estimates",
              low=0.0, low_open=True),
        Param("max_seconds", None, "float", "wall-time budget of the path (None: none)", low=0.0,
              low_open=True, none=True),
    )


def _check_settings(**kw):
    from .params import spec
    for k, v in kw.items():
        spec(PathSettings, k).check(v)


def _bcfw_learner(estimator):
    """The estimator's bound BCFW learner (checked)."""
    from .learners.bcfw import BCFW
    lr = estimator.bound_learner
    if lr is None or lr.n_blocks == 0:
        raise RuntimeError("the regularization path needs a model that holds examples (learn some first)")
    if not isinstance(lr, BCFW):
        raise TypeError(f"the regularization path needs a BCFW learner, got {type(lr).__name__}")
    C = np.asarray(lr._C)
    if C.ndim == 2 and C.shape[0] == C.shape[1] and np.any(np.diag(C)[:lr.n_labels] != 0):
        raise ValueError("the regularization path needs a zero loss on the ground truth (Delta_i(y_i) = 0)")
    return lr


def _working_copy(estimator):
    """A deep copy of the estimator whose learner predicts with its iterate (no averaging):
    the path's certificates are those of the pair (alpha, w(alpha))."""
    _bcfw_learner(estimator)
    work = copy.deepcopy(estimator)
    lr = work.bound_learner
    lr.averaging = False
    lr._avg_restart()
    work.learner = work.learner.clone({"averaging": False})
    return work


def _oracle_calls(lr):
    return int(lr.counters[K.C_ORACLE]) + int(lr.full_pass_oracle_calls)


class _Clock:
    """Wall and CPU seconds and oracle calls spent on the path (scoring excluded)."""

    def __init__(self, lr):
        self.lr = lr
        self.n = max(lr.n_blocks, 1)
        self.calls0 = _oracle_calls(lr)
        self.wall = self.cpu = 0.0
        self._t = None

    def start(self):
        self._t = (time.perf_counter(), time.process_time())

    def stop(self):
        w, c = self._t
        self.wall += time.perf_counter() - w
        self.cpu += time.process_time() - c

    @property
    def passes(self):
        return (_oracle_calls(self.lr) - self.calls0) / self.n


def _solve(lr, tol, exact, check_every, max_passes):
    """BCFW on the held blocks until the gap is <= ``tol``: certified by an exact full pass
    (``exact``) or by the stale block-gap estimates. Returns (gap, certificate or None), gap
    None when ``max_passes`` effective passes did not reach ``tol``."""
    n = lr.n_blocks
    calls0 = _oracle_calls(lr)
    while True:
        est = lr.store.gap_sum() / n
        if est <= tol:
            if not exact:
                return est, None
            c = lr.refresh_gaps()
            if c.gap <= tol:
                return c.gap, c
        if _oracle_calls(lr) - calls0 >= max_passes * n:
            return None, None
        lr.refine(passes=check_every)


def _score(estimator, data, task):
    """Validation metrics of the estimator's predictions on ``data`` = (X, Y)."""
    X, Y = data
    m = ProgressiveMetrics(task)
    for y, p in zip(Y, estimator.predict_many(X)):
        m.update(y, p)
    return m.get()


def _materialize(data):
    if data is None:
        return None
    if isinstance(data, tuple) and len(data) == 2 and not isinstance(data[0], dict):
        X, Y = data
        return list(X), list(Y)
    X, Y = [], []
    for x, y in data:
        X.append(x)
        Y.append(y)
    return X, Y


@dataclass
class _Snapshot:
    """The dual point and weights at one breakpoint (statistics stored as their non-zeros)."""
    lam: float
    U: tuple
    nz: np.ndarray
    vals: np.ndarray
    size: int
    slots: np.ndarray
    sizes: np.ndarray
    lval: np.ndarray
    gest: np.ndarray
    Kc: int
    pools: list | None = None

    @staticmethod
    def _pools(st, slots):
        """Each block's corner pool (labelings and dual weights) and flags, when the blocks have
        one (pairwise / away steps, cache)."""
        if st.pool_cap == 0:
            return None
        from ._kernels import layout as KL
        out = []
        for j in slots:
            b = st.block(int(j))
            out.append((b["pool"].copy(), b["alpha"].copy(), int(st.meta[j, KL.M_FLAGS])))
        return out

    def _install_pools(self, st):
        from ._kernels import layout as KL
        for j, (pool, alpha, flags) in zip(self.slots, self.pools):
            st.meta[j, KL.M_PN] = len(alpha)
            st.meta[j, KL.M_FLAGS] = flags
            b = st.block(int(j))
            b["pool"][...] = pool
            b["alpha"][...] = alpha

    @classmethod
    def take(cls, lr):
        d = lr.dual_snapshot()
        stat = d["stat"]
        nz = np.flatnonzero(stat)
        st = lr.store
        return cls(float(lr.effective_lam()), (lr.W.E.copy(), lr.W.T.copy(), lr.W.B.copy()),
                   nz.astype(np.int64), stat[nz].copy(), int(stat.size), d["slots"], d["sizes"], d["lval"],
                   st.gest[d["slots"]].copy(), d["Kc"], cls._pools(st, d["slots"]))

    def install(self, lr):
        stat = np.zeros(self.size)
        stat[self.nz] = self.vals
        lr.blend_dual({"slots": self.slots, "stat": stat, "sizes": self.sizes, "lval": self.lval, "Kc": self.Kc},
                      0.0)
        lr.set_parameters({"E": self.U[0], "T": self.U[1], "B": self.U[2]})
        if self.pools is not None:
            self._install_pools(lr.store)
        lr.store.gest[self.slots] = self.gest
        lr.store._rebuild_tree()
        lr.lam = self.lam
        lr._lam_override = None

    @property
    def nbytes(self):
        pools = sum(p.nbytes + a.nbytes for p, a, _ in self.pools) if self.pools else 0
        return int(self.nz.nbytes + self.vals.nbytes + sum(a.nbytes for a in self.U) + self.lval.nbytes
                   + self.gest.nbytes + self.slots.nbytes + self.sizes.nbytes + pools)


@dataclass
class RegularizationPath:
    """An eps-approximate regularization path (see the module docstring).

    Attributes
    ----------
    breakpoints
        lam_0 > lam_1 > ... (decreasing); w^j is the solution computed at ``breakpoints[j]``.
    gaps
        The gap of w^j at ``breakpoints[j]``: certified by an exact pass (``exact``), the stale
        estimate otherwise (``true_gaps`` then has the exact values when asked for).
    lower
        ``lower[j]``: the smallest lambda of the piece of w^j (``breakpoints[j + 1]`` inside
        the path; 0 after the end of the path).
    primals, duals
        P and D at each breakpoint (exact path; NaN for the heuristic one unless certified).
    passes, seconds, cpu_seconds
        Cumulative effective passes (oracle calls / n, the certifying passes included) and wall
        / CPU time when each breakpoint was reached (validation scoring excluded).
    scores
        Validation metrics of w^j (``data=``), else None.
    status
        ``"end"`` (the end-of-path condition holds: every lam > 0 is covered), ``"lam_min"``
        or ``"max_passes"`` (the solver did not reach kappa eps at the next breakpoint).
    """
    eps: float
    kappa: float
    exact: bool
    task: str
    breakpoints: np.ndarray = field(default_factory=lambda: np.zeros(0))
    gaps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lower: np.ndarray = field(default_factory=lambda: np.zeros(0))
    primals: np.ndarray = field(default_factory=lambda: np.zeros(0))
    duals: np.ndarray = field(default_factory=lambda: np.zeros(0))
    passes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cpu_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    true_gaps: np.ndarray | None = None
    scores: list | None = None
    status: str = ""
    n_blocks: int = 0
    _snapshots: list = field(default_factory=list, repr=False)
    _base: object = field(default=None, repr=False)

    def __len__(self):
        return len(self.breakpoints)

    @property
    def lam_min_covered(self):
        """The smallest lambda the path covers (0 when it reached its end)."""
        return float(self.lower[-1]) if len(self.lower) else float("inf")

    def piece(self, lam):
        """Index j of the breakpoint whose weights serve ``lam`` (ValueError outside the path)."""
        lam = float(lam)
        if not lam > 0.0:
            raise ValueError(f"lam must be > 0, got {lam!r}")
        if lam >= self.breakpoints[0]:
            return 0
        if lam < self.lam_min_covered:
            raise ValueError(f"lam={lam!r} is below the path, which covers lam >= {self.lam_min_covered!r} "
                             f"(status {self.status!r})")
        j = int(np.searchsorted(-self.breakpoints, -lam, side="right")) - 1
        return min(max(j, 0), len(self.breakpoints) - 1)

    def model_at(self, lam):
        """An estimator for ``lam``, on the examples the path was computed on, whose
        ``certificate()`` at ``lam`` is <= eps (exact path): w^0 scaled by lam_0 / lam above
        the first breakpoint, else w^j of the piece holding lam with its dual point moved to lam
        (Proposition 1)."""
        j = self.piece(lam)
        if not self._snapshots:
            raise RuntimeError("the path kept no models (keep_models=False)")
        est = copy.deepcopy(self._base)
        lr = est.bound_learner
        self._snapshots[j].install(lr)
        lr.set_lam(lam, keep="dual" if lam >= self.breakpoints[0] else "weights")
        est.learner = est.learner.clone({"lam": float(lam), "averaging": False})
        return est

    def best(self, metric="accuracy"):
        """(lam, scores) of the breakpoint with the best validation ``metric`` (largest; smallest
        for ``hamming_loss``)."""
        if self.scores is None:
            raise RuntimeError("no validation scores: compute the path with data=(X, Y)")
        vals = np.array([s[metric] for s in self.scores], dtype=float)
        j = int(np.argmin(vals) if metric == "hamming_loss" else np.argmax(vals))
        return float(self.breakpoints[j]), dict(self.scores[j])

    def to_dict(self):
        """The path's numbers as JSON-ready lists."""
        out = {k: getattr(self, k) for k in ("eps", "kappa", "exact", "task", "status", "n_blocks")}
        for k in ("breakpoints", "gaps", "lower", "primals", "duals", "passes", "seconds", "cpu_seconds"):
            out[k] = [float(v) for v in getattr(self, k)]
        out["true_gaps"] = None if self.true_gaps is None else [float(v) for v in self.true_gaps]
        out["scores"] = self.scores
        return out

    @property
    def snapshot_bytes(self):
        """Memory held by the breakpoints' dual points and weights (for ``model_at``)."""
        return sum(s.nbytes for s in self._snapshots)


def regularization_path(estimator, eps=0.1, kappa=0.7, lam_min=1e-5, exact=True, data=None, *,
                        max_passes=1000.0, check_every=0.25, certify=False, max_seconds=None,
                        keep_models=True, progress=None):
    """Osokin et al.'s Algorithm 7 on the examples the estimator's BCFW learner holds: see
    :class:`RegularizationPath`. The estimator is not changed (the path runs on a copy).

    Parameters
    ----------
    eps, kappa
        Path accuracy and the solver's tolerance kappa * eps at each breakpoint (0 < kappa < 1).
    lam_min
        Stop once the next breakpoint would be below it.
    exact
        Certify each breakpoint with an exact full gap pass (else the heuristic path).
    data
        Validation examples, (X, Y) or an iterable of (x, y), scored at each breakpoint.
    max_passes
        Effective passes allowed per breakpoint.
    check_every
        Effective passes between two checks of the stale gap estimates.
    certify
        Heuristic path only: also compute the exact gap at each breakpoint (not counted in the
        passes and times), in ``true_gaps``.
    max_seconds
        Wall-time budget of the path (status ``"budget"`` when reached).
    keep_models
        Keep each breakpoint's dual point and weights for ``model_at`` (their non-zeros: about
        0.4 MB per breakpoint on OCR-small's 626 words); False keeps none (``model_at`` then
        refuses).
    progress
        ``progress(j, lam, gap)`` after each breakpoint.
    """
    _check_settings(eps=eps, kappa=kappa, lam_min=lam_min, exact=exact, max_passes=max_passes,
                    check_every=check_every, max_seconds=max_seconds)
    work = _working_copy(estimator)
    lr = work.bound_learner
    data = _materialize(data)
    n = lr.n_blocks
    clock = _Clock(lr)
    clock.start()
    tol = kappa * eps
    # ---- Algorithm 6: every block on a labeling of largest loss, the first breakpoint
    lr.start_at_max_loss()
    s2 = lr.W.sqnorm() / (n * n)                # ||psi~||^2
    lam = s2 / tol if s2 > 0.0 else 1.0
    lr.set_lam(lam, keep="dual")
    c = lr.refresh_gaps()
    if c.gap > tol:
        lam = lam * c.gap / tol                 # g(t) / t is non-decreasing: certified by convexity
        lr.set_lam(lam, keep="dual")
        c = lr.refresh_gaps()
    path = RegularizationPath(eps=float(eps), kappa=float(kappa), exact=bool(exact), task=work.task, n_blocks=n)
    rows = []
    true_gaps = [] if (certify and not exact) else None
    scores = [] if data is not None else None
    g = c.gap

    def record(lam, g, c):
        clock.stop()
        rows.append((lam, g, c.primal if c is not None else np.nan, c.dual if c is not None else np.nan,
                     clock.passes, clock.wall, clock.cpu))
        if keep_models:
            path._snapshots.append(_Snapshot.take(lr))
        if true_gaps is not None:
            true_gaps.append(c.gap if c is not None else lr.certificate().gap)
        if scores is not None:
            scores.append(_score(work, data, work.task))
        if progress is not None:
            progress(len(rows) - 1, lam, g)
        clock.start()

    record(lam, g, c)
    lower = []
    status = "lam_min"
    while True:
        delta = float(np.sum(lr.block_deltas())) / n       # Delta = (1/n) sum_i sum_y alpha_i(y) H_i(y; w)
        tau = eps - g - TAU_MARGIN * eps
        if delta <= tau:
            lower.append(0.0)
            status = "end"
            break
        rho = 1.0 - tau / delta
        lam_new = rho * lam
        lower.append(lam_new)
        if lam_new < lam_min:
            status = "lam_min"
            break
        if max_seconds is not None and clock.wall + time.perf_counter() - clock._t[0] > max_seconds:
            status = "budget"
            break
        lr.set_lam(lam_new, keep="weights")
        g_new, c = _solve(lr, tol, exact, check_every, max_passes)
        if g_new is None:
            status = "max_passes"
            break
        lam, g = lam_new, g_new
        record(lam, g, c)
    clock.stop()
    arr = np.array(rows, dtype=float).reshape(-1, 7)
    path.breakpoints, path.gaps, path.primals, path.duals = arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]
    path.passes, path.seconds, path.cpu_seconds = arr[:, 4], arr[:, 5], arr[:, 6]
    path.lower = np.array(lower, dtype=float)
    path.true_gaps = None if true_gaps is None else np.array(true_gaps, dtype=float)
    path.scores = scores
    path.status = status
    path._base = work
    return path


@dataclass
class GridSearch:
    """Grid search over ``lams`` (decreasing), each solved to gap <= eps: cumulative passes and
    times as for :class:`RegularizationPath`."""
    lams: np.ndarray
    gaps: np.ndarray
    passes: np.ndarray
    seconds: np.ndarray
    cpu_seconds: np.ndarray
    warm_start: bool
    scores: list | None = None
    status: str = "done"

    def to_dict(self):
        out = {k: [float(v) for v in getattr(self, k)] for k in ("lams", "gaps", "passes", "seconds", "cpu_seconds")}
        out.update(warm_start=self.warm_start, scores=self.scores, status=self.status)
        return out


def grid_search(estimator, lams, warm_start=True, eps=0.1, data=None, *, max_passes=1000.0, check_every=0.25,
                max_seconds=None):
    """Solve the held problem at every lambda of ``lams`` (largest first) to a certified gap <=
    ``eps``: from the ground truths (w = 0, the learner's start) or, with ``warm_start``, from
    the previous lambda's solution with the primal kept and the dual rescaled (Proposition 1;
    Osokin et al.'s first kind of warm start). The estimator is not changed."""
    work = _working_copy(estimator)
    lr = work.bound_learner
    data = _materialize(data)
    lams = np.sort(np.asarray(lams, dtype=float))[::-1]
    clock = _Clock(lr)
    rows, scores, status = [], ([] if data is not None else None), "done"
    for q, lam in enumerate(lams):
        clock.start()
        if q == 0 or not warm_start:
            lr.reset_to_truth(lam)
        else:
            lr.set_lam(lam, keep="weights")
        g, c = _solve(lr, eps, True, check_every, max_passes)
        clock.stop()
        if g is None:
            status = "max_passes"
            break
        rows.append((lam, g, clock.passes, clock.wall, clock.cpu))
        if scores is not None:
            scores.append(_score(work, data, work.task))
        if max_seconds is not None and clock.wall > max_seconds:
            status = "budget"
            break
    arr = np.array(rows, dtype=float).reshape(-1, 5)
    return GridSearch(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], bool(warm_start), scores, status)
