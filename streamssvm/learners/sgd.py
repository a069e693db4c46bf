"""Stochastic subgradient (Pegasos) for structural SVMs with margin or slack rescaling (Choi, Meshi &
Srebro, Fast and scalable structural SVM with slack rescaling, AISTATS 2016).

Each example takes one step w <- (1 - eta_t lam) w - eta_t * Delta(y^) psi_i(y^) (slack) or
w <- (1 - eta_t lam) w - eta_t * psi_i(y^) (margin), eta_t = 1 / (lam t), where y^ is the most
violating labeling: exact (loss-augmented decoding for margin rescaling, the exact slack oracle
for slack rescaling) or, for slack rescaling, found by a budgeted search over lambda-oracles
(angular / bisecting / binary, :mod:`streamssvm.oracles.slack`) over the structure's oracles
(:mod:`streamssvm.oracles.structured`): bisecting and binary search call the lambda-oracle, i.e.
loss-augmented decoding with the loss scaled by lambda (Viterbi for chains, cheaper per query than
the exact O(L^2 K^2) chain slack DP); angular search needs the constrained lambda-oracle, which for
these structures is answered from the level points (one pass of the exact DP's cost per search,
counted in ``level_passes``).

A dual point (the dual of :mod:`streamssvm.certificate`). From w = 0 with eta_t = 1 / (lam (t + t0)), the T-th iterate is
w_T = sum_s gamma_s c_s psi_s (c_s = 1, or Delta(y^_s) for slack rescaling) with
gamma_s = 1 / (lam (T + t0)) times the product of the projection factors applied since step s, so
gamma_s <= 1 / (lam T): in the dual of the n held examples it is alpha_i(y^_s) = lam n gamma_s for
every violating visit s of example i (the rest of the mass on the ground truth), with dual value
D = lam * sum_s gamma_s Delta(y^_s) - (lam/2) ||w_T||^2 (the sum is kept as ``ell``, scaled as w
is). That alpha is feasible when every example learned is still held and no example was visited
(violating) more than T / n times -- true after one streaming pass, and after any number of
whole :meth:`refine` epochs (each a permutation of the held examples). Exactly: the learner keeps
each example's share gamma_i = sum of its gamma_s, and the point is feasible while
lam n gamma_i <= 1 for every held example -- which the replayed steps keep by drawing only
examples with fewer than 1 + replay violating visits (each carries at most n / ((1 + replay) n)
of alpha_i). :meth:`certificate` then
reports the valid gap P(w) - D >= P(w) - min P for the predicting (averaged) weights; otherwise
it reports the primal objective only, gap = +inf, and says why.

The pairwise multi-label MRF with more than 16 labels (``MultiLabel(pairwise=True,
inference="auto")``) has no exact oracle: SGD then solves the LP relaxation on the local polytope
(:mod:`streamssvm.oracles.lp`) -- the lambda-oracle at lam = 1 for margin rescaling, the LP
constrained oracle inside angular search and the LP lambda-oracle inside bisecting / binary search
for slack rescaling, the LP MAP for prediction -- and steps on rounded integral labelings, or with
``relaxed=True`` on the LP optimum itself (Choi et al.'s handling of fractional solutions). The
certificate's hinge terms are then LP upper bounds (the primal reported is an upper bound, and so is
the gap); relaxed steps are not a mixture of labelings, so they leave no dual point.
"""
from __future__ import annotations

import numpy as np

from .._kernels import bcfw as KB
from .._kernels import bundles as KBu
from .._kernels import structops as so
from ..certificate import Certificate
from ..oracles.slack import run_search, search_example
from ..workspace import Workspace
from ..oracles.structured import ExampleOracles
from ..saved_state import pack_rows, unpack_rows, validate_example, validate_scalars, validate_weights
from ..errors import CheckpointError
from ..structures.base import Weights
from .base import DenseWeights, Learner, label_capacity, check_search_rescaling
from ..params import Param

_SEARCH = ("exact", "angular", "bisecting", "binary")
_M64 = (1 << 64) - 1


def _mix(seed, t):
    """SplitMix64 (Steele, Lea & Flood, Fast splittable pseudorandom number generators) of
    (seed, t): the replay draw of step t."""
    z = (seed * 0x9E3779B97F4A7C15 + (t + 1) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)
#: SGD's former ``averaging`` values: (averaging, avg_weighting)
_AVERAGING = {"weighted": (True, "linear"), "uniform": (True, "uniform"), "none": (False, "linear"),
              None: (False, "linear")}


class SGD(DenseWeights, Learner):
    """Pegasos-style SGD with margin or slack rescaling.

    Parameters
    ----------
    lam
        Regularization lambda (Choi et al.'s C).
    rescaling
        ``"margin"`` or ``"slack"``.
    search
        For slack rescaling: ``"exact"`` (the structure's exact slack oracle) or a budgeted
        search ``"angular"``, ``"bisecting"``, ``"binary"``.
    max_queries, tol
        Search budget and stopping ratio (Phi(best) / certified upper bound).
    averaging, avg_weighting
        Predict with an average of the iterates (default True), weighted ``"linear"`` (default;
        iterate t weighs t, Lacoste-Julien, Schmidt & Bach 2012) or ``"uniform"``; ``False``
        predicts with the last iterate. Kept lazily: O(nnz) per step, as BCFW's average. (The
        former ``averaging="weighted"`` / ``"uniform"`` / ``"none"`` are still read, deprecated.)
    avg_start
        Iterates before this step get weight 0 in the average (a late start).
    project
        Project the iterate onto the ball of radius sqrt(P(0) / lam), which holds the optimum
        (Shalev-Shwartz et al., Pegasos). Projections only shrink w, so the dual point stays valid.
    t0
        Step sizes eta_t = 1 / (lam (t + t0)). ``"auto"``: calibrated (see ``calibrate``);
        ``0`` gives the textbook Pegasos steps 1 / (lam t).
    calibrate
        With ``t0="auto"``: after this many examples (learned with a provisional t0 meanwhile),
        pick t0 among 6 candidates by the primal objective of one pass over them, and learn them
        again from w = 0 with it (Bottou, Stochastic gradient descent tricks).
    relaxed
        Only with the LP relaxation (pairwise multi-label MRF above 16 labels): step on the LP's
        optimum as a *relaxed labeling* (its node and edge marginals), as Choi et al. do
        (fractional solutions are additional labels; Finley & Joachims' relaxed training),
        instead of on its rounding. Prediction still rounds.
    replay
        Steps on held examples after each new one (default 1, as ``BCFW(replay=1)``): drawn
        uniformly by a hash of (seed, t), among the examples stepped on fewer than ``1 + replay``
        times, which keeps the iterate a dual point (see :meth:`dual_point`). With ``replay=0``
        one streaming pass is one step per example: on OCR-large at lam = 1e-2 that is 7 points
        of token accuracy behind BCFW's default (which replays one step per example); with
        ``replay=1`` SGD is within a point of it (``bench/results/quality_sequence.md``).
    truncate
        Truncated steps (Asi & Duchi, The importance of better models in stochastic
        optimization): no step goes past the point where the hinge of the labeling it moves
        away from reaches 0, step min(eta_t, H / (c^2 ||psi||^2)). A lower primal objective
        after a pass on OCR-large, a lower accuracy on OCR-large and Brown: off by default.
    window
        Examples held for the certificate and :meth:`refine`: the most recent ones, 100,000 by
        default, so memory and checkpoints stay bounded on an endless stream (once examples
        leave it the certificate reports the primal only); ``None`` holds every example learned.
    seed
        Seed of the refine permutations (``None``: fresh entropy).

    Example weights (``learn(..., weight=c)``, an estimator's ``learn_one(x, y, w)``): the
    objective is lam/2 ||w||^2 + (1 / sum_i c_i) sum_i c_i H_i(w) over the held examples; every
    step on example i is the subgradient step on c_i H_i (c_i times longer, before the
    truncation bound), on its first visit and on replays / refine passes alike. The certificate
    then reports the weighted primal and gap +inf (the dual point of weighted steps is not
    tracked).

    Examples
    --------
    >>> import numpy as np, streamssvm as ss
    >>> rng = np.random.default_rng(0)
    >>> m = ss.MulticlassSSVM(learner=ss.learners.SGD(lam=1e-2, rescaling="slack", search="angular"))
    >>> for _ in range(500):
    ...     y = int(rng.integers(3)); m.learn_one({"f": y + 0.1 * rng.normal(), "g": 1.0}, y)
    >>> m.predict_one({"f": 2.0, "g": 1.0})
    2
    """

    mixing = "primal"
    example_weights = True
    distributed = True
    dense_weights = True
    multilabel_inference = "auto"

    params = (
        Param("lam", 1e-3, "float", "regularization lambda", low=0.0, low_open=True, high=1e15),
        Param("rescaling", "margin", "choice", "margin or slack rescaling of the loss",
              choices=("margin", "slack")),
        Param("search", "exact", "choice", "slack rescaling: the exact slack oracle or a budgeted search",
              choices=_SEARCH),
        Param("max_queries", 20, "int", "budgeted search: most oracle queries", low=1, high=10_000),
        Param("tol", 0.999, "float", "budgeted search: stopping ratio Phi(best) / upper bound",
              low=0.0, high=1.0),
        Param("averaging", True, "bool", "predict with an average of the iterates"),
        Param("avg_weighting", "linear", "choice", "weights of the iterates in the average: linear "
              "(iterate t weighs t) or uniform", choices=("linear", "uniform")),
        Param("avg_start", 0, "int", "iterates before this step get weight 0 in the average", low=0),
        Param("project", True, "bool", "project onto the ball that holds the optimum (Pegasos)"),
        Param("t0", "auto", "float", "step sizes 1 / (lam (t + t0)); auto: calibrated", low=0.0,
              choices=("auto",)),
        Param("calibrate", 300, "int", "t0='auto': examples learned before t0 is calibrated", low=0),
        Param("window", 100_000, "int", "examples held for the certificate and refine (None: all)",
              low=0, none=True),
        Param("seed", 0, "seed", "seed of the replay draws and refine permutations"),
        Param("relaxed", False, "bool", "LP relaxation: step on the relaxed labeling, not its rounding"),
        Param("replay", 1, "int", "steps on held examples after each new one", low=0, high=1000),
        Param("truncate", False, "bool", "truncated steps (Asi & Duchi)"),
    )

    @classmethod
    def _unit_test_params(cls):
        """Small, fast settings for the conformance checks (river's convention)."""
        yield {"lam": 0.05, "seed": 0}

    def __init__(self, *, lam=1e-3, rescaling="margin", search="exact", max_queries=20, tol=0.999,
                 averaging=True, avg_weighting="linear", avg_start=0, project=True, t0="auto", calibrate=300, window=100_000,
                 seed=0, relaxed=False, replay=1, truncate=False, **kwargs):
        self._set_params(locals())
        # the averaging scheme the steps read: "weighted" (linear), "uniform" or "none"
        self._avg_kind = ("none" if not self.averaging else
                          "weighted" if self.avg_weighting == "linear" else "uniform")
        self._bound = False

    @classmethod
    def _upgrade_values(cls, params):
        v = params.get("averaging")
        if v is None or isinstance(v, str):     # the former averaging="weighted" | "uniform" | "none"
            params = dict(params)
            params["averaging"], weighting = _AVERAGING[v]
            if v is not None or "avg_weighting" not in params:
                params["avg_weighting"] = weighting
        return params

    # ------------------------------------------------------------------ binding
    def bind(self, structure, labels):
        check_search_rescaling(self.search, self.rescaling)
        self.structure = structure
        self._kind = structure.kind
        self._use_trans = bool(structure.use_trans)
        self._K = 0
        self.W = Weights(1, 4)          # U: the iterate is w = a * U
        self.V = Weights(1, 4)          # lazy average: sum_s c_s w_s = beta * U - V
        self.a = 1.0
        self.beta = 0.0                 # sum_s c_s a_s, in the units of the current U
        self.csum = 0.0                 # sum_s c_s (the averaging weights)
        self.unorm2 = 0.0               # ||U||^2, kept up to date step by step
        self.ell = 0.0                  # dual linear term: D = lam * ell - lam/2 ||w||^2
        self._lmax_sum = 0.0            # sum over learned examples of max_y Delta_i(y) = H_i(0) ...
        self._lmax_n = 0                # ... and their number (the projection radius)
        self._lmax_w = 0.0              # ... and their total weight (sum of the example weights c_i)
        self.projections = 0            # steps where the projection was active
        self.calibrated = None          # what the t0 calibration chose
        self.folds = 0                  # O(d K) renormalizations of the scale a into U
        self._t0 = None if self.t0 == "auto" else float(self.t0)
        self._pending = 0               # examples held, not yet stepped on (t0 calibration)
        self._labels = labels
        self._C = structure.cost_matrix(4, labels)
        self.t = 0
        self.queries = 0
        self.searches = 0
        self.certified = 0
        self.level_passes = 0
        self.n_learned = 0
        self._recent = []
        self._visits = []               # violating visits of each held example (dual point)
        self._mass = []                 # sum of eta_s / a_s over them: alpha_i = lam n a mass_i
        self._weights = []              # each held example's weight c_i (learn(..., weight=c))
        self._q = 0.0                   # eta / a of the last step (0 if it did not move)
        self._dropped = 0               # examples learned but no longer held
        self._arrived = 0               # examples learned (ids of _flat)
        self._flat = []                 # ids of held examples learned without a competitor
        self.flat_revisits = 0
        self._relaxed_steps = 0         # steps on fractional LP marginals (no dual point)
        self._ws = Workspace(structure).ensure(1, self.W.Kc)   # the kernels' scratch buffers
        self._avg_cache = None
        self.lp_calls = 0
        self.lp_integral = 0
        self._relaxed_stat = None
        self._bound = True

    def ensure(self, n_features, labels):
        self._labels = labels
        n_labels = len(labels)
        Kc = label_capacity(n_labels, self.W.Kc)
        self.W.grow(n_features, Kc)
        self.V.grow(n_features, Kc)
        if n_labels != self._K or Kc != self._C.shape[0]:
            uses_lp = getattr(self.structure, "uses_lp", None)
            if (uses_lp is not None and uses_lp(n_labels) and self.rescaling == "slack"
                    and self.search == "exact"):
                raise ValueError(f"search='exact' for slack rescaling enumerates the labelings of the pairwise MRF "
                                 f"and works up to {so.MLPAIR_MAX_LABELS} labels; got {n_labels} labels. Use "
                                 "search='angular' (LP constrained oracle), 'bisecting' or 'binary' (LP lambda-oracle)")
            grew = n_labels > self._K > 0
            self._K = n_labels
            self._C = self.structure.cost_matrix(Kc, labels)
            self._ws.ensure(1, self.W.Kc)
            if grew and self._flat:
                self._revisit_flat()

    def _revisit_flat(self):
        """A new label arrived: every held example learned while it had no competing labeling
        (a class's examples before a second class existed: its step could not move) gets one step
        now, against the grown label set -- as BCFW revisits its flat blocks. Costs one step per
        such example, once: only those are listed."""
        offset = self._arrived - len(self._recent)
        flat, self._flat = self._flat, []
        for ident in flat:
            i = ident - offset
            if i < 0:
                continue   # no longer held
            tp, fi, fv, y, Ki = self._recent[i]
            cw = self._weights[i]
            lmax = self.structure.loss_range(y, len(tp) - 1, self._K, Ki, self._C)[1]
            if lmax <= 1e-12:
                self._flat.append(ident)   # still no competitor (e.g. a label it cannot take)
                continue
            self._lmax_sum += lmax if cw == 1.0 else cw * lmax   # counted as 0 in the radius when learned
            if self._t0 is None:
                self._start_t0(tp, fv)
            elif self._pending:
                self._pending += 1
            self._visits[i] += int(self._step(tp, fi, fv, y, Ki, cw))
            self._mass[i] += self._q
            self.n_learned -= 1   # a revisit, not a new example
            self.flat_revisits += 1
        if self._pending >= self.calibrate > 0:
            self._calibrate()

    @property
    def n_blocks(self):
        return len(self._recent)

    # ------------------------------------------------------------------ LP relaxation (pairwise MRF)
    def _lp_on(self):
        uses_lp = getattr(self.structure, "uses_lp", None)
        return uses_lp is not None and uses_lp(self._K)

    def _lp_problem(self, tok_ptr, fidx, fval, ytrue, Ki, W, scale):
        from ..oracles.lp import PairwiseMRFLP
        K = self._K
        S = self._ws.ensure(1, self.W.Kc).S
        so.emission_scores(W.E, scale, tok_ptr, fidx, fval, 1, K, S)
        dense = np.zeros(K, dtype=np.int32)
        dense[[k for k in ytrue if k < K]] = 1
        return PairwiseMRFLP(S[0, :K].copy(), scale * np.triu(W.T[:K, :K], 1), dense, max(Ki, 1))

    def _most_violating_lp(self, tok_ptr, fidx, fval, ytrue, Ki, W, scale, count):
        """Most violating labeling through the LP relaxation; with ``count=False`` (certificate)
        the returned H is a certified upper bound on the exact hinge."""
        lp = self._lp_problem(tok_ptr, fidx, fval, ytrue, Ki, W, scale)
        K = self._K
        lab = self._ws.lab[: self.W.Kc]
        lab[:] = 0
        if self.relaxed and count:
            return self._most_violating_relaxed(lp, lab, Ki)
        try:
            if self.rescaling == "margin":
                r = lp.oracle(1.0)
                lab[:K] = r.labeling
                # max_y Delta + f(y) - f* = max (h - 1) + g <= LP value - 1
                return lab, r.g, max(r.value - 1.0, 0.0) if not count else max(r.h - 1.0 + r.g, 0.0)
            o, oc = lp.search_oracles()
            hmax = max(1.0, lp.hg(lp._ascend(lp.y, 0.0))[0])   # greedy MAP: Choi et al.'s H-hat
            gmax = K / max(Ki, 1)
            r = self._lp_search(o, oc, hmax / gmax)
        finally:
            if count:   # the certificate's calls are not the learner's (certificates observe)
                self.lp_calls += lp.calls
                self.lp_integral += lp.integral_calls
        if count:
            self.queries += r.queries
            self.searches += 1
            self.certified += int(r.certified)
        if r.label is None or r.phi <= 0:
            lab[:K] = lp.y
            return lab, 0.0, 0.0 if count else r.upper_bound
        lab[:K] = r.label
        return lab, lp.hg(r.label)[1], r.phi if count else r.upper_bound

    def _lp_search(self, o, oc, lam0):
        """The configured search over LP oracles, started at lam0 = H-hat / G-hat."""
        return run_search(self.search, o, oc, lam0=lam0, max_queries=self.max_queries, tol=self.tol)

    def _most_violating_relaxed(self, lp, lab, Ki):
        """Choi et al.'s handling: the LP optimum is a (relaxed) label with h, g linear in its
        marginals; the searches run over those points. Leaves the relaxed statistic in
        ``self._relaxed_stat`` for :meth:`learn`; returns (labeling = its rounding, g, H)."""
        K = self._K
        sols = []

        def keep(sol):
            if sol is None:
                return None
            sols.append(sol)
            return (len(sols) - 1, sol.h_lp, sol.g_lp)
        try:
            if self.rescaling == "margin":
                sol = lp.oracle(1.0)
                H = max(sol.value - 1.0, 0.0)
            else:
                hmax = max(1.0, lp.hg(lp._ascend(lp.y, 0.0))[0])
                gmax = K / max(Ki, 1)
                o = lambda lam: keep(lp.oracle(lam))                      # noqa: E731
                oc = lambda lam, hi, lo, hc, lc: keep(lp.oracle_c(lam, hi, lo, hc, lc))  # noqa: E731
                r = self._lp_search(o, oc, hmax / gmax)
                self.queries += r.queries
                self.searches += 1
                self.certified += int(r.certified)
                if r.label is None or r.phi <= 0:
                    lab[:K] = lp.y
                    return lab, 0.0, 0.0
                sol, H = sols[r.label], r.phi
        finally:
            self.lp_calls += lp.calls
            self.lp_integral += lp.integral_calls
        lab[:K] = sol.labeling
        Kc = self.W.Kc
        st = np.zeros(Kc + Kc * Kc)
        st[:K] = sol.mu
        st[Kc:].reshape(Kc, Kc)[:K, :K] = lp.pair_marginals(sol)
        self._relaxed_stat = st
        return lab, sol.g_lp, H

    # ------------------------------------------------------------------ oracle
    def _most_violating(self, tok_ptr, fidx, fval, ytrue, Ki, W, scale, count=True):
        """(labeling, loss, H) of the most violating labeling at weights scale * W."""
        if self._lp_on():
            return self._most_violating_lp(tok_ptr, fidx, fval, ytrue, Ki, W, scale, count)
        L = len(tok_ptr) - 1
        ly = len(ytrue)
        kind, K = self._kind, self._K
        ws = self._ws.ensure(L, self.W.Kc)
        S = ws.S
        so.emission_scores(W.E, scale, tok_ptr, fidx, fval, L, K, S)
        lab = ws.lab[: self.structure.labeling_len(L, self.W.Kc)]
        truth = self.structure.truth_labeling(ytrue, K, self.W.Kc)
        ts = so.labeling_score(kind, S, W.T, W.B, scale, truth, L, K, self._use_trans)
        model = KBu.model(self.structure, K, self.W.Kc, self._C)
        if self.rescaling == "margin":
            val = so.decode(model, W.bundle(), S, scale, L, ytrue, ly, 1.0, Ki, ws.scratch(L, False), lab)
            loss = so.labeling_loss(kind, lab, ytrue, ly, self._C, L, K, Ki, ws.ybuf)
            return lab, loss, max(val - ts, 0.0)
        if self.search == "exact" or not count:
            h = so.slack_oracle(model, W.bundle(), S, scale, L, ytrue, ly, Ki, ws.scratch(L, True), lab)
            loss = so.labeling_loss(kind, lab, ytrue, ly, self._C, L, K, Ki, ws.ybuf)
            return lab, loss, h
        # budgeted search over the structure's oracles (streamssvm.oracles.structured): the
        # lambda-oracle is loss-scaled decoding (Viterbi for chains); angular search's
        # constrained oracle is answered on the level points (one level pass, counted)
        o = self._example_oracles()
        o.prepare(W.E, W.T, W.B, scale, tok_ptr, fidx, fval, ytrue, Ki)
        q0, lp0 = o.lam_queries + o.c_queries, o.level_passes
        r = search_example(self.search, o, self.max_queries, self.tol)
        self.queries += o.lam_queries + o.c_queries - q0
        self.level_passes += o.level_passes - lp0
        self.searches += 1
        self.certified += int(r.certified)
        if r.label is None or r.phi <= 0:
            lab[:] = 0
            lab[:len(truth)] = truth
            return lab, 0.0, 0.0
        lab_full = o.labeling(r.label)
        lab[:len(lab_full)] = lab_full[:len(lab)]
        loss = so.labeling_loss(kind, lab, ytrue, ly, self._C, L, K, Ki, ws.ybuf)
        return lab, loss, r.phi

    def _example_oracles(self):
        o = getattr(self, "_oracles", None)
        if o is None or o.K != self._K or o.Kc != self.W.Kc or o.C is not self._C:
            o = ExampleOracles(self.structure, self._K, self.W.Kc, self._C)
            self._oracles = o
        return o

    # ------------------------------------------------------------------ steps
    def learn(self, tok_ptr, fidx, fval, ytrue, Ki=1, weight=1.0):
        """One step on a new example, which joins the held window. ``weight`` (c > 0, finite:
        the estimators check it) is the example's importance weight in the objective
        lam/2 ||w||^2 + (1 / sum_i c_i) sum_i c_i H_i(w): its subgradient steps are c times
        longer (the step on c_i H_i), every time it is stepped on."""
        cw = float(weight)
        if not (cw > 0.0 and cw < float("inf")):
            raise ValueError(f"SGD.learn: weight must be finite and > 0, got {weight!r}")
        L = len(tok_ptr) - 1
        lmax = self.structure.loss_range(ytrue, L, self._K, Ki, self._C)[1] if self._K > 1 else 0.0
        self._lmax_sum += lmax if cw == 1.0 else cw * lmax
        self._lmax_n += 1
        self._lmax_w += cw
        if self._t0 is None and lmax > 1e-9:
            self._start_t0(tok_ptr, fval)
        elif self._pending:
            self._pending += 1
        viol = self._step(tok_ptr, fidx, fval, ytrue, Ki, cw)
        self._arrived += 1
        if lmax <= 1e-12 and (self.window is None or self.window > 0):
            self._flat.append(self._arrived - 1)   # no competitor yet: stepped again by _revisit_flat
        if self.window is None or self.window > 0:
            self._recent.append((tok_ptr.copy(), fidx.copy(), fval.copy(), np.array(ytrue, dtype=np.int32), Ki))
            self._visits.append(int(viol))
            self._mass.append(self._q)
            self._weights.append(cw)
            if self.window is not None and len(self._recent) > self.window:
                del self._recent[0]
                del self._visits[0]
                del self._mass[0]
                del self._weights[0]
                self._dropped += 1
        else:
            self._dropped += 1
        if self._pending >= self.calibrate > 0:
            self._calibrate()
        elif self.replay and not self._pending and self._recent:
            self._replay_steps(self.replay)

    def _replay_steps(self, k, n=None):
        """``k`` steps on held examples drawn uniformly, each by a hash of (seed, t): the draws
        depend only on the state, so a restored checkpoint continues as the uninterrupted run.

        An example already stepped on ``1 + replay`` times is not drawn again (up to 8 draws,
        then the step is skipped): each violating visit carries at most n / ((1 + replay) n + t0)
        of the dual mass alpha_i (see :meth:`dual_point`), so the iterate stays a dual point --
        uniform draws would revisit the first examples ~ln(n) times and lose the certificate."""
        n = len(self._recent) if n is None else n   # draw among the first n held examples
        cap = 1 + self.replay
        for _ in range(k):
            for j in range(8):
                i = _mix((self.seed or 0) + (j << 32), self.t) % n
                if self._visits[i] < cap:
                    break
            else:
                continue
            tp, fi, fv, y, Ki = self._recent[i]
            self._visits[i] += int(self._step(tp, fi, fv, y, Ki, self._weights[i]))
            self._mass[i] += self._q
            self.n_learned -= 1   # a revisit, not a new example

    def _start_t0(self, tok_ptr, fval):
        """The first example with a competing labeling: a provisional t0; the first ``calibrate``
        examples are learned with it, then t0 is calibrated on them and they are learned again
        from w = 0 (see :meth:`_calibrate`)."""
        self._t0 = self._t0_base([(tok_ptr, None, fval)])
        self._pending = 1 if self.t0 == "auto" and self.calibrate and (
            self.window is None or self.window >= self.calibrate) else 0

    def _t0_base(self, examples):
        """t0 such that a first step of size 1 / (lam (1 + t0)) on a labeling wrong everywhere,
        ||psi|| ~ G, reaches the edge of the ball of radius R = sqrt(P(0) / lam)."""
        G = float(np.mean([np.sqrt(2.0 * (np.dot(fv, fv) + len(tp))) for tp, _, fv in examples]))
        R = float(np.sqrt(max(self._lmax_sum / max(self._lmax_n, 1), 1e-12) / self.lam))
        return max(G / (self.lam * R) - 1.0, 0.0)

    def _calibrate(self):
        """Choose t0 (eta_t = 1 / (lam (t + t0))) on the held examples, as Bottou's SGD calibrates
        its eta_0 on a sample (Bottou, Stochastic gradient descent tricks): one pass of a fresh
        copy per candidate t0 in base * 10^k, k = 0..5, keeping the lowest primal objective of its
        predicting weights on these examples; then learn them again from w = 0 with it (the
        examples before were learned with the provisional t0 of :meth:`_t0_base`)."""
        ex = list(self._recent)   # every example learned so far (the window holds them all)
        base = self._t0_base([(tp, fi, fv) for tp, fi, fv, _, _ in ex])
        best = (np.inf, base)
        params = self._get_params()
        for k in range(6):
            cand = base * 10.0 ** k
            trial = SGD(**{**params, "t0": cand, "calibrate": 0, "window": None})
            trial.bind(self.structure, self._labels)
            trial.ensure(self.W.E.shape[0], self._labels)
            for (tp, fi, fv, y, Ki), cw in zip(ex, self._weights):
                trial.learn(tp, fi, fv, y, Ki, cw)
            p = trial.certificate().primal
            if p < best[0]:
                best = (p, cand)
        self._t0 = best[1]
        self.calibrated = {"t0": best[1], "primal": best[0], "base": base, "examples": len(ex)}
        self._pending = 0
        # learn the calibration examples again, from w = 0, with the chosen t0
        for W in (self.W, self.V):
            for u in self._arrays(W):
                u[...] = 0.0
        self.a, self.beta, self.csum, self.unorm2, self.ell = 1.0, 0.0, 0.0, 0.0, 0.0
        self.t = self.projections = self.folds = self.n_learned = 0
        self._t0 = best[1]
        for i in range(len(self._recent)):
            self._visits[i], self._mass[i] = 0, 0.0
        for i in range(len(self._recent)):
            tp, fi, fv, y, Ki = self._recent[i]
            self._visits[i] = int(self._step(tp, fi, fv, y, Ki, self._weights[i]))
            self._mass[i] = self._q
            if self.replay:   # as the stream does after each new example
                self._replay_steps(self.replay, i + 1)

    def _arrays(self, W):
        return (W.E, W.T, W.B)

    def _step(self, tok_ptr, fidx, fval, ytrue, Ki, cw=1.0):
        """The Pegasos step (then the projection and the lazy average) on an example of weight
        ``cw`` (the subgradient of cw H_i: a step cw times longer); returns whether it moved the
        weights (a violating visit)."""
        self.t += 1
        self._avg_cache = None
        t0 = self._t0 or 0.0
        eta = 1.0 / (self.lam * (self.t + t0))
        shrink = 1.0 - eta * self.lam
        if shrink <= 0.0:   # t = 1: the first step forgets the starting point
            self._mass = [0.0] * len(self._mass)
            for v, u in zip(self._arrays(self.V), self._arrays(self.W)):
                if self.beta:
                    v -= self.beta * u
                u[...] = 0.0
            self.a, self.unorm2, self.ell = 1.0, 0.0, 0.0
        else:
            self.a *= shrink
            self.ell *= shrink
        L = len(tok_ptr) - 1
        self._relaxed_stat = None
        self._q = 0.0
        lab, loss, H = self._most_violating(tok_ptr, fidx, fval, ytrue, Ki, self.W, self.a)
        viol = H > 0.0 and loss > 0.0
        if viol:
            st = self._ws.ensure(L, self.W.Kc).dbuf
            ss = self.structure.stat_size(L, self.W.Kc)
            st[:ss] = 0.0
            if self._relaxed_stat is not None:   # a relaxed labeling of the LP (SGD(relaxed=True))
                self._relaxed_steps += 1
                st[:ss] = self._relaxed_stat
            else:
                so.labeling_stat(self._kind, lab, L, self.W.Kc, st, 1.0)
            so.truth_stat(self._kind, ytrue, len(ytrue), L, self.W.Kc, st, -1.0)
            c = loss if self.rescaling == "slack" else 1.0
            rows, psi = self._psi(tok_ptr, fidx, fval, st[:ss], L)
            if self.truncate:
                # truncated step (Asi & Duchi, The importance of better models in stochastic
                # optimization): the hinge is >= 0 and, along -c psi, falls at rate c^2 ||psi||^2,
                # so no step needs to go past the point where this labeling's hinge reaches 0
                g2 = sum(float(np.vdot(p, p)) for p in psi) * c * c
                if cw != 1.0:
                    eta *= cw   # the step on cw H_i; the truncation bounds the step, not eta
                if g2 > 0.0:
                    eta = min(eta, H / g2)
            elif cw != 1.0:
                eta *= cw
            self.ell += eta * loss
            self._q = eta / self.a
            self._apply(rows, psi, -eta * c / self.a)
        if self.project and self._lmax_n:
            # Pegasos projection (Shalev-Shwartz, Singer, Srebro & Cotter, Pegasos: primal
            # estimated sub-gradient solver for SVM): the optimum has lam ||w*||^2 <= P(0) =
            # mean_i max_y Delta_i(y), so projecting on that ball loses nothing and bounds the
            # early steps of size 1 / (lam t). A projection only shrinks w, so the iterate stays
            # a dual point (see dual_point()).
            r2 = self._lmax_sum / (self._lmax_n if self._lmax_w == self._lmax_n else self._lmax_w) / self.lam
            w2 = self.a * self.a * self.unorm2
            if w2 > r2:
                rho = float(np.sqrt(r2 / w2))
                self.a *= rho
                self.ell *= rho
                self.projections += 1
        if self.a < 1e-3:
            # fold the scale into U (O(d K), rare: a shrinks by 1 - 1/t per step, faster only while
            # the projection is active) and restart the lazy average from the materialized sum
            # S = beta U - V (V := -S, beta := 0): beta U and V never grow far beyond S, so their
            # difference loses at most ~3 digits
            for u, v in zip(self._arrays(self.W), self._arrays(self.V)):
                if self.beta:
                    v -= self.beta * u
                u *= self.a
            self.unorm2 *= self.a * self.a
            self._mass = [m * self.a for m in self._mass]
            if self._q:
                self._q *= self.a
            self.beta, self.a = 0.0, 1.0
            self.folds += 1
        c = self._avg_weight(self.t)
        if c:
            self.beta += c * self.a
            self.csum += c
        self.n_learned += 1
        return viol

    def _avg_weight(self, t):
        """Weight c_t of the iterate w_t in the average: 0 before ``avg_start``; then 1
        (``"uniform"``) or t - avg_start (``"weighted"``: Lacoste-Julien, Schmidt & Bach, A simpler
        approach to obtaining an O(1/t) convergence rate for the projected stochastic subgradient
        method -- the early, large Pegasos steps weigh little)."""
        if self._avg_kind == "none" or t <= self.avg_start:
            return 0.0
        return float(t - self.avg_start) if self._avg_kind == "weighted" else 1.0

    def _psi(self, tok_ptr, fidx, fval, st, L):
        """(rows, (PE, PT, PB)): Phi_x(st) on the touched feature rows only (PE[r] is row rows[r]
        of the emission part), O(nnz K + K^2)."""
        rows, inv = np.unique(fidx, return_inverse=True)
        Kc = self.W.Kc
        PE = np.zeros((len(rows), Kc))
        PT = np.zeros_like(self.W.T)
        PB = np.zeros_like(self.W.B)
        so.stat_apply(self._kind, (PE, PT, PB), (tok_ptr, inv.astype(np.int32), fval), st, L, self._K, Kc, 1.0,
                      self._use_trans)
        return rows, (PE, PT, PB)

    def _apply(self, rows, psi, coef):
        """U += coef * psi (from :meth:`_psi`), with ||U||^2 and the lazy average updated on the
        touched rows only (O(nnz K + K^2), not O(d K)): sum_s c_s a_s U_s = beta * U - V with
        V += beta * dU."""
        W, V = self.W, self.V
        PE, PT, PB = psi
        e0, t0, b0 = W.E[rows], W.T.copy(), W.B.copy()
        e1 = e0 + coef * PE
        W.E[rows] = e1
        W.T += coef * PT
        W.B += coef * PB
        self.unorm2 += (float(np.vdot(e1, e1) - np.vdot(e0, e0)) + float(np.vdot(W.T, W.T) - np.vdot(t0, t0))
                        + float(np.vdot(W.B, W.B) - np.vdot(b0, b0)))
        if self.beta:
            V.E[rows] += self.beta * (e1 - e0)
            V.T += self.beta * (W.T - t0)
            V.B += self.beta * (W.B - b0)

    def learn_batch(self, ex_tok, tok_ptr, fidx, fval, y_ptr, ys, Ki=None):
        for e in range(len(ex_tok) - 1):
            a, b = ex_tok[e], ex_tok[e + 1]
            tp = np.asarray(tok_ptr[a:b + 1] - tok_ptr[a], dtype=np.int32)
            self.learn(tp, fidx[tok_ptr[a]:tok_ptr[b]], fval[tok_ptr[a]:tok_ptr[b]], ys[y_ptr[e]:y_ptr[e + 1]],
                       1 if Ki is None else Ki[e])

    def refine(self, passes=1.0, tol=None, progress=None):
        """Further SGD steps over the held window: ``passes`` epochs, each a fresh permutation of
        the held examples (whole epochs keep the dual point of :meth:`certificate` feasible). The
        permutations are drawn from (seed, t): the same seed gives the same run."""
        n = len(self._recent)
        todo = int(round(passes * n))
        rng = np.random.default_rng(None if self.seed is None else [self.seed, self.t])
        done = 0
        while todo > 0 and n:
            for i in rng.permutation(n)[:todo]:
                tp, fi, fv, y, Ki = self._recent[i]
                self._visits[i] += int(self._step(tp, fi, fv, y, Ki, self._weights[i]))
                self._mass[i] += self._q
                self.n_learned -= 1  # a revisit, not a new example
                done += 1
            todo -= n
            if progress is not None:
                progress(done / max(passes * n, 1), self)
            if tol is not None and self.certificate().gap <= tol:
                break

    # ------------------------------------------------------------------ prediction / certificate
    def _averaged(self):
        return self._avg_kind != "none" and self.csum > 0.0

    def emission_weights(self):
        """The predicting emission weights on the known labels (see
        :meth:`Learner.emission_weights`)."""
        W, scale = self._pred_weights()
        return W.E[:, :self._K] * scale

    def prediction_tables(self):
        """The predicting weights (:meth:`_pred_weights`) as ``(E, E, 0, T, B, scale)``."""
        W, scale = self._pred_weights()
        return W.E, W.E, 0.0, W.T, W.B, float(scale)

    def _pred_weights(self):
        """(Weights, scale) of the predicting weights: the average (materialized, O(d K), cached
        until the next step) or the last iterate."""
        if not self._averaged():
            return self.W, self.a
        if self._avg_cache is None:
            A = Weights.__new__(Weights)
            A.E, A.T, A.B = ((self.beta * u - v) / self.csum for u, v in zip(self._arrays(self.W),
                                                                             self._arrays(self.V)))
            self._avg_cache = A
        return self._avg_cache, 1.0

    def predict(self, ex_tok, tok_ptr, fidx, fval, lab_ptr, lablen_total):
        out = np.zeros(lablen_total, dtype=np.int32)
        if self._K == 0:
            return out
        L = int(np.max(np.diff(ex_tok))) if len(ex_tok) > 1 else 1
        if self._lp_on():  # MAP by the LP relaxation (rounded when fractional)
            W, scale = self._pred_weights()
            for e in range(len(ex_tok) - 1):
                if ex_tok[e + 1] == ex_tok[e]:
                    continue
                tp = np.asarray(tok_ptr[ex_tok[e]:ex_tok[e] + 2], dtype=np.int64)
                lp = self._lp_problem(tp, fidx, fval, (), 1, W, scale)
                r = lp.oracle(0.0)
                out[lab_ptr[e]:lab_ptr[e] + self._K] = r.labeling
            return out
        if self._averaged():
            # the average (beta U - V) / csum without materializing it: the kernel scores the
            # emissions at scale * (E - zc * ZE), the small T, B are formed here
            scale, zc = self.beta / self.csum, 1.0 / self.beta
            wb = KBu.pack(KBu.WeightsBundle(self.W.E, self.W.T - zc * self.V.T, self.W.B - zc * self.V.B))
            ZE = self.V.E
        else:
            scale, zc, wb, ZE = self.a, 0.0, self.W.bundle(), self.W.E
        KB.predict_batch(KBu.model(self.structure, self._K, self.W.Kc, self._C), wb, scale, ZE, zc,
                         KBu.pack(KBu.Batch(ex_tok, tok_ptr, fidx, fval, lab_ptr)), out,
                         self._ws.ensure(L, self.W.Kc).scratch(L, False))
        return out

    def dual_point(self):
        """(dual value D, None) when the iterates form a feasible dual point over the held
        examples (see the module docstring), else (None, reason)."""
        n, T = len(self._recent), self.t
        if n == 0 or T == 0:
            return None, "no examples held"
        if self._dropped:
            return None, (f"{self._dropped} learned examples are no longer held (window={self.window}); "
                          "the iterate is not a dual point of the held ones")
        if self._relaxed_steps:
            return None, (f"{self._relaxed_steps} steps on fractional LP marginals (relaxed=True) are not a "
                          "mixture of labelings")
        if self._weighted():
            return None, "weighted examples (the dual point of weighted Pegasos steps is not tracked)"
        # alpha_i = lam n gamma_i with gamma_i = a * mass_i the weight of example i's steps in w
        # (exact), or the bound gamma_s <= 1 / (lam T) of each violating visit (older checkpoints)
        if self.lam * n * self.a * max(self._mass) > 1.0 + 1e-9 and max(self._visits) * n > T:
            return None, ("uneven revisits (an example's steps carry more than 1 / (lam n) of the weights; "
                          "refine by whole epochs to keep a dual point)")
        reg_T = 0.5 * self.lam * self.a * self.a * self.W.sqnorm()
        return self.lam * self.ell - reg_T, None

    def _weighted(self):
        """Whether a held example has a weight other than 1."""
        return any(c != 1.0 for c in self._weights)

    def certificate(self):
        """Primal objective on the held window (exact oracle) and, when the Pegasos iterates form a
        feasible dual point (see :meth:`dual_point`), the valid duality gap of the predicting
        weights; otherwise gap = +inf and ``note`` says why."""
        import time
        t0 = time.perf_counter()
        W, scale = self._pred_weights()
        n = len(self._recent)
        if n == 0 or self._K == 0:
            return Certificate.empty(self.lam, exact=False, rescaling=self.rescaling)
        hinge = 0.0
        weighted = self._weighted()
        for (tp, fi, fv, y, Ki), cw in zip(self._recent, self._weights):
            h = self._most_violating(tp, fi, fv, y, Ki, W, scale, count=False)[2]
            hinge += cw * h if weighted else h
        reg = 0.5 * self.lam * scale * scale * W.sqnorm()
        extra = {"queries_per_search": self.queries / max(self.searches, 1),
                 "certified_fraction": self.certified / max(self.searches, 1)} if self.searches else {}
        extra["projections"] = self.projections
        extra["folds"] = self.folds
        extra["t0"] = self._t0
        if weighted:   # the weighted objective: (1 / sum_i c_i) sum_i c_i H_i
            hinge *= n / float(sum(self._weights))
        primal = reg + hinge / n
        lp_note = ""
        if self._lp_on():
            lp_note = ("; bound from the LP relaxation of the pairwise MRF: each hinge term is an upper bound "
                       "(LP value, or the Lemma-5 bound of a search over LP oracles), so the primal is an "
                       "upper bound on P(w)")
            extra["lp_calls"] = self.lp_calls
            extra["lp_integral_fraction"] = self.lp_integral / max(self.lp_calls, 1)
        dual, why = self.dual_point()
        if dual is None:
            return Certificate(float("inf"), primal, float("-inf"), n, n, time.perf_counter() - t0, False,
                               self.lam, regularizer=reg, hinge=hinge / n, rescaling=self.rescaling,
                               note=f"primal only: no dual point ({why}); gap reported as +inf" + lp_note,
                               extra=extra)
        raw = primal - dual
        which = (f"{self._avg_kind} average of the iterates (the weights used to predict)" if self._averaged()
                 else "last iterate")
        return Certificate(max(raw, 0.0), primal, dual, n, n, time.perf_counter() - t0, not lp_note, self.lam,
                           raw_gap=raw, regularizer=reg, hinge=hinge / n, dual_loss=self.lam * self.ell,
                           rescaling=self.rescaling, extra=extra,
                           note=f"{which}; dual point of the Pegasos iterates (w_T = A alpha)" + lp_note)

    # ------------------------------------------------------------------ state
    def state(self):
        return {"K": self._K, "a": self.a, "t": self.t, "queries": self.queries, "searches": self.searches,
                "certified": self.certified, "n_learned": self.n_learned, "beta": self.beta, "csum": self.csum,
                "unorm2": self.unorm2, "ell": self.ell, "lmax_sum": self._lmax_sum, "lmax_n": self._lmax_n,
                "projections": self.projections, "folds": self.folds, "pending": self._pending, "t0": -1.0 if self._t0 is None else self._t0,
                "dropped": self._dropped, "relaxed_steps": self._relaxed_steps,
                "visits": np.asarray(self._visits, dtype=np.int64), "mass": np.asarray(self._mass, dtype=np.float64),
                "weights": np.asarray(self._weights, dtype=np.float64), "lmax_w": self._lmax_w,
                "arrived": self._arrived, "flat": np.asarray(self._flat, dtype=np.int64),
                "flat_revisits": self.flat_revisits,
                "E": self.W.E, "T": self.W.T, "B": self.W.B, "VE": self.V.E, "VT": self.V.T, "VB": self.V.B,
                "C": self._C,
                "recent": pack_rows([{"tok_ptr": tp, "fidx": fi, "fval": fv, "y": y, "Ki": int(k)}
                                     for tp, fi, fv, y, k in self._recent], ("tok_ptr", "fidx", "fval", "y"), ("Ki",))}

    def restore(self, structure, labels, st):
        st = {**st, "recent": unpack_rows(st["recent"], "held examples")}   # packed, or the former list
        d, Kc, K = validate_weights(st)   # every size and index checked before anything is used
        avg = ("VE", "VT", "VB") if "VE" in st else ("AE", "AT", "AB")   # lazy average, or the older format
        validate_weights({**{k: st[k] for k in avg}, "K": st["K"]}, keys=avg, cost=None)
        if np.shape(st[avg[0]]) != (d, Kc):
            raise CheckpointError("invalid learner state in the file: averaged weights do not match the weights")
        for i, r in enumerate(st["recent"]):
            validate_example(r["tok_ptr"], r["fidx"], r["fval"], r["y"], d, Kc, f"held example {i}",
                             structure=structure, Ki=r["Ki"], K=K)
        counts, big = (0, 1 << 62, "int"), 1e300
        validate_scalars(st, {**{k: counts for k in ("t", "queries", "searches", "certified", "n_learned", "lmax_n",
                                                    "projections", "folds", "pending", "dropped", "relaxed_steps",
                                                    "arrived", "flat_revisits")},
                              "a": (0.0, big, "float"), "beta": (0.0, big, "float"), "csum": (0.0, big, "float"),
                              "unorm2": (0.0, big, "float"), "ell": (-big, big, "float"),
                              "lmax_sum": (0.0, big, "float"), "t0": (-1.0, big, "float"),
                              "dual_loss": (-big, big, "float")}, "learner")
        if "VE" in st and float(st["csum"]) > 0.0 and (float(st["beta"]) <= 0.0 or int(st["t"]) < self.avg_start):
            raise CheckpointError("invalid learner state in the file: an average of weight "
                                  f"{float(st['csum'])} with beta={float(st['beta'])} after {int(st['t'])} steps "
                                  f"(averaging starts at step {self.avg_start})")
        visits = np.asarray(st.get("visits", []))
        if visits.size and (visits.dtype.kind not in "iu" or int(visits.min()) < 0 or int(visits.max()) > 1 << 62):
            raise CheckpointError("invalid learner state in the file: visit counts must be integers in [0, 2**62]")
        self.bind(structure, labels)
        self._K = int(st["K"])
        self.a = float(st["a"])
        for k in ("t", "queries", "searches", "certified", "n_learned"):
            setattr(self, k, int(st[k]))
        self.W = Weights(1, 1)
        self.W.E, self.W.T, self.W.B = (np.array(st[k], dtype=np.float64) for k in ("E", "T", "B"))
        self.V = Weights(1, 1)
        if "VE" in st:
            self.V.E, self.V.T, self.V.B = (np.array(st[k], dtype=np.float64) for k in ("VE", "VT", "VB"))
            self.beta, self.csum, self.ell = float(st["beta"]), float(st["csum"]), float(st["ell"])
            self.unorm2 = float(st["unorm2"])
            self._lmax_sum, self._lmax_n = float(st["lmax_sum"]), int(st["lmax_n"])
            self.projections, self.folds = int(st["projections"]), int(st["folds"])
            self._t0 = None if float(st["t0"]) < 0 else float(st["t0"])
            self._pending = int(st["pending"])
        else:   # saved before the lazy average: the stored average A enters with weight t
            A = [np.array(st[k], dtype=np.float64) for k in ("AE", "AT", "AB")]
            self.csum = float(self.t) if self._avg_kind != "none" else 0.0
            self.beta = 0.0
            self.V.E, self.V.T, self.V.B = (-self.csum * x for x in A)
            self.ell = float(st.get("dual_loss", 0.0)) / (self.lam * max(self.t, 1))
            self.unorm2 = self.W.sqnorm()
            self._t0 = 0.0   # the 1 / (lam t) steps it was trained with
        self._C = np.array(st["C"], dtype=np.float64)
        self._dropped = int(st.get("dropped", 0))
        self._relaxed_steps = int(st.get("relaxed_steps", 0))
        self._recent = [(np.asarray(r["tok_ptr"], dtype=np.int32), np.asarray(r["fidx"], dtype=np.int32),
                         np.asarray(r["fval"], dtype=np.float64), np.asarray(r["y"], dtype=np.int32), int(r["Ki"]))
                        for r in st["recent"]]
        if "lmax_sum" not in st:
            self._lmax_sum = sum(self.structure.loss_range(y, len(tp) - 1, self._K, k, self._C)[1]
                                 for tp, _, _, y, k in self._recent)
            self._lmax_n = len(self._recent)
        visits = st.get("visits")
        if visits is None:  # a model saved before the dual point existed: no dual point
            self._visits, self._dropped = [0] * len(self._recent), max(self._dropped, 1)
        else:
            self._visits = [int(v) for v in np.asarray(visits).ravel()]
        self._arrived = int(st.get("arrived", self.n_learned))
        self._flat = [int(v) for v in np.asarray(st.get("flat", []), dtype=np.int64).ravel()]
        self.flat_revisits = int(st.get("flat_revisits", 0))
        if any(not (self._arrived - len(self._recent) <= v < self._arrived) for v in self._flat):
            # ids below the window are tolerated by _revisit_flat, but not ids never learned
            if any(v >= self._arrived or v < 0 for v in self._flat):
                raise CheckpointError("invalid learner state in the file: flat example ids out of range")
        mass = st.get("mass")
        # saved before the exact mass was kept: +inf leaves the visit-count rule to decide
        self._mass = ([float(v) for v in np.asarray(mass, dtype=np.float64).ravel()] if mass is not None
                      else [float("inf")] * len(self._recent))
        weights = st.get("weights")   # files before example weights: every example weighs 1
        self._weights = ([float(v) for v in np.asarray(weights, dtype=np.float64).ravel()] if weights is not None
                         else [1.0] * len(self._recent))
        if any(not (0.0 < c < float("inf")) for c in self._weights):
            raise CheckpointError("invalid learner state in the file: example weights must be finite and > 0")
        self._lmax_w = float(st.get("lmax_w", self._lmax_n))
        if not (0.0 <= self._lmax_w < float("inf")):
            raise CheckpointError("invalid learner state in the file: lmax_w must be finite and >= 0")
        if (len(self._mass) != len(self._recent) or len(self._visits) != len(self._recent)
                or len(self._weights) != len(self._recent)):
            raise CheckpointError("invalid learner state in the file: per-example visits / mass do not match "
                                  "the held examples")
        if any(not (m >= 0.0) for m in self._mass):
            raise CheckpointError("invalid learner state in the file: negative or NaN dual mass")
        self._ws = Workspace(self.structure).ensure(1, self.W.Kc)

    # ---------------------------------------- parameter mixing (Learner.parameters; streamssvm.distributed)
    def parameters(self):
        """w = a U (``E``, ``T``, ``B``) and the predicting average (``AE``, ``AT``, ``AB``)."""
        A, s = self._pred_weights() if self.bound else (None, 0.0)
        return {} if A is None else {**{k: self.a * getattr(self.W, k) for k in "ETB"},
                                     **{"A" + k: s * getattr(A, k) for k in "ETB"}}

    def set_parameters(self, params):
        """Install w and the average (:meth:`parameters`); the average is kept lazily as
        (beta U - V) / csum, so V is chosen to make it the given one."""
        self.W.grow(*np.shape(params["E"]))
        self.V.grow(*np.shape(params["E"]))
        for k in "ETB":
            w, avg = getattr(self.W, k), np.zeros_like(getattr(self.W, k))
            for dst, src in ((w, params[k]), (avg, params["A" + k])):
                dst[...] = 0.0
                dst[tuple(slice(0, n) for n in np.shape(src))] = src
            if self.csum > 0.0:
                getattr(self.V, k)[...] = self.beta * w - self.csum * avg
        self.a, self.unorm2, self._avg_cache = 1.0, self.W.sqnorm(), None
