"""BMRM: bundle methods for regularized risk minimization over the held window (Teo,
Vishwanathan, Smola, Le, "Bundle Methods for Regularized Risk Minimization"; the analysis and the
``ls`` / ``qp`` variants of Saha, Zhang, Vishwanathan, "Lower Bounds for BMRM and Faster Rates
for Training SVMs"), for every structure, margin or slack rescaling.

    J(w) = (lam/2) ||w||^2 + R(w),    R(w) = (1/n) sum_{i in window} H_i(w)

Iteration t: one pass of exact loss-augmented oracle calls over the held examples at w_{t-1}
gives J(w_{t-1}) and one cut (a_t, b_t) with R >= <a_t, .> + b_t (equality at w_{t-1})
(:mod:`streamssvm.oracles.risk`). The model J_t(w) = (lam/2)||w||^2 + max_{k<=t} <a_k, w> + b_k
is a minorant of J; its dual over the simplex of cuts,

    D_t(alpha) = <alpha, b> - (1 / (2 lam)) || sum_k alpha_k a_k ||^2,   w(alpha) = -(1/lam) sum_k alpha_k a_k,

satisfies D_t(alpha) <= min J_t <= min J for *every* alpha in the simplex, so

    eps_t = min_{t' < t} J(w_t') - max_{s <= t} D_s(alpha_s)  >=  min_{t'} J(w_t') - J*

is a valid certificate whatever the accuracy of the inner solve (the paper's eps_t (4) uses
J_t(w_t), which equals D_t at the exact bundle optimum).

* ``variant="qp"``: the bundle dual is solved to a Wolfe gap <= ``qp_tol`` by pairwise (SMO)
  steps with exact line search, warm-started from the previous alpha with the new cut at 0
  (``_kernels/projection.simplex_qp``).
* ``variant="ls"``: ls-bmrm's line search: alpha <- (1 - eta) alpha + eta e_t with the exact eta
  of the concave quadratic; only the aggregate sum_k alpha_k (a_k, b_k) and the new cut are kept.

OCAS step (``line_search="ocas"``, one-token windows; Franc & Sonnenburg, "Optimized Cutting
Plane Algorithm for Large-Scale Risk Minimization"): before each oracle pass the best iterate moves
to the exact minimizer of J on the ray from it towards w_t (the scores are affine along the ray, so
R is piecewise linear there), and the cut is taken at (1 - mu) w_best + mu w_t (mu = 0.1) rather
than at w_t. The bundle dual and the certificate are unchanged (J(w_best) is exact); on 3,000 OCR
letters at lam = 1e-2 it takes eps_t from 2.4e-2 to 1.8e-4 after 100 iterations.

Cuts as labelings (one-token windows): a cut is a_t = (1/n) sum_i c_i x_i (e_{yh_i} - e_{y_i}),
stored as its labels yh (n ints; c_i = 1 for margin, Delta_i(yh_i) for slack rescaling) and b_t, not
as a d x K vector. The Gram row of a new cut is sum_i c_ik / n (S[i, yh_ik] - S[i, y_i]) with the
scores S = X a_t (one product with X, then O(n) per cut), and w(alpha) is X' M / (-lam) with the
per-example label mixture M = sum_k alpha_k Z_k. Other structures keep dense cuts.

Bounded bundle (``max_cuts``): when the bundle is full, cuts with alpha_k = 0 are dropped; if none
is, all cuts are replaced by their alpha-weighted aggregate (a convex combination of minorants of
R is a minorant of R, so the model stays a minorant of J and every D_t stays a lower bound on J*),
and alpha = e_aggregate reproduces the previous D_t, so the next D_t can only grow.

Streaming: :meth:`learn` only adds the example to the FIFO window (``window``) and does no
optimization -- predictions keep using the current best iterate until :meth:`refine`. A changed
window is a different risk: the cuts are stale. At the next :meth:`refine` every cut that is
stored as per-example labelings is **recomputed** on the new window (examples no longer held drop
out, new ones contribute their ground truth, 1/n uses the new n; a minorant of the new R, no
oracle call), the aggregate cut (a mixture, not labelings) is dropped, and the best primal value
and the lower bound restart: :meth:`certificate` never reports an eps built from a model of a
different risk -- between a window change and the next refine it reports gap = inf with a note.

Predictions use the best iterate argmin_{t'} J(w_t'), the weights the certificate is about.

Example weights (``learn(..., weight=c)``): R(w) = (1/N) sum_i c_i H_i(w), N = sum_i c_i over the
held examples; every cut (and its recomputation on a changed window) is the weighted mean of the
per-example planes, so the bundle dual and eps_t certify the weighted J. The weights are held with
the examples (a window eviction removes its weight from N) and saved only when one is not 1.
Every weight 1 is the unweighted learner, bit for bit.
"""
from __future__ import annotations

import math
import time

import numpy as np

from .._kernels import bcfw as KB
from .._kernels import bundles as KBu
from .._kernels import cp as KC
from .._kernels import projection as KP
from .._kernels import structops as so
from ..certificate import Certificate
from ..oracles.risk import RiskOracle, Window, weights_dot, weights_like
from ..structures.base import Weights
from .base import DenseWeights, Learner, label_capacity, check_number
from ..params import Param
from ..saved_state import _bad as _fail, validate_labeling, validate_scalars, validate_weights, validate_window


_OCAS_MU = 0.1        # Franc & Sonnenburg's cut point between the best iterate and w_t


def line_min(oracle, X, y, E0, dE, lam, wd, dd, iters=40, cw=None):
    """(t, R(w0 + t d)): argmin_{t >= 0} (lam/2)||w0 + t d||^2 + R(w0 + t d) for a one-token window
    (X: n x d CSR, E0 / dE: emission weights of w0 and d; wd = <w0, d>, dd = ||d||^2): every margin
    (or slack) term is affine in t, so R is convex piecewise linear in t; bisection on its right
    derivative to a relative width of 1e-9 (R is exact at the t returned, whatever its accuracy).
    ``cw``: the example weights (None: all 1); a row's terms times c_i > 0 have the same maximizer,
    so the weighted slope and risk are the unweighted ones of the scaled rows over N = sum c_i."""
    n, K = len(y), oracle.K
    if n == 0:
        return 0.0, 0.0
    S0 = np.asarray(X @ E0[:, :K])
    S1 = np.asarray(X @ dE[:, :K])
    r = np.arange(n)
    D = oracle.C[y][:, :K]
    m0 = S0 - S0[r, y][:, None]
    m1 = S1 - S1[r, y][:, None]
    if oracle.rescaling == "margin":
        c0, c1 = D + m0, m1
    else:
        c0, c1 = D * (1.0 + m0), D * m1
    c0[r, y] = 0.0          # the ground truth: H_i >= 0
    c1[r, y] = 0.0
    if cw is not None:
        c0 *= cw[:, None]
        c1 *= cw[:, None]
        n = float(cw.sum())

    c0, c1 = np.ascontiguousarray(c0), np.ascontiguousarray(c1)

    def slope(t):
        return lam * (wd + t * dd) + KC.ray_slope(c0, c1, t, 1e-12) / n

    if slope(0.0) >= 0.0:
        return 0.0, float(c0.max(axis=1).sum()) / n
    lo, hi = 0.0, 1.0
    while slope(hi) < 0.0 and hi < 1e6:
        lo, hi = hi, 2.0 * hi
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if slope(mid) < 0.0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * hi:
            break
    return hi, float((c0 + hi * c1).max(axis=1).sum()) / n


class _Cut:
    __slots__ = ("a", "b", "seq0", "labs")

    def __init__(self, a, b, seq0, labs):
        self.a, self.b, self.seq0, self.labs = a, b, seq0, labs   # labs None: an aggregate


class BMRM(DenseWeights, Learner):
    """Bundle method (qp-bmrm or ls-bmrm) on the held window, with the eps_t certificate.

    Parameters
    ----------
    lam
        Regularization lambda of J(w) = lam/2 ||w||^2 + (1/n) sum_i H_i(w) (for a two-class
        ``MulticlassSSVM`` this is the binary hinge SVM with lambda_binary = lam / 2, see
        :class:`~streamssvm.learners.Pragam`).
    variant
        ``"qp"`` (exact bundle QP) or ``"ls"`` (line search).
    tol
        Stop :meth:`refine` once eps_t <= tol (absolute, in units of J; formerly ``eps``).
    max_cuts
        Bundle size bound (aggregation beyond it, see module doc).
    rescaling
        ``"margin"`` or ``"slack"`` (the exact slack oracle).
    window
        FIFO window size (examples held); None: unbounded.
    qp_tol, qp_steps
        Inner QP tolerance (Wolfe gap) and step cap (``qp``).
    line_search
        ``"ocas"`` (one-token windows, e.g. multiclass): before the oracle pass, the exact line
        search of J from the best iterate towards w_t, and the cut taken at
        (1 - mu) w_best + mu w_t, mu = 0.1 (Franc & Sonnenburg, "Optimized Cutting Plane Algorithm
        for Large-Scale Risk Minimization"); ``"none"``: the cut at w_t (plain BMRM; other
        structures always).

    Examples
    --------
    >>> import numpy as np
    >>> from streamssvm.structures.multiclass import MultiClass
    >>> from streamssvm.learners import BMRM
    >>> rng = np.random.default_rng(0)
    >>> b = BMRM(lam=0.1, tol=1e-6); b.bind(MultiClass(), [0, 1, 2]); b.ensure(3, [0, 1, 2])
    >>> for _ in range(60):
    ...     y = int(rng.integers(3))
    ...     b.learn(np.array([0, 2]), np.array([0, 1]), np.array([1.0, y + 0.3 * rng.normal()]), np.array([y]))
    >>> b.refine(passes=200)
    >>> c = b.certificate(); c.gap <= 1e-6, c.exact
    (True, True)
    """

    structures = ("multiclass", "multilabel", "hierarchy", "chain")

    renamed = {"capacity": "window", "eps": "tol"}
    params = (
        Param("lam", 1e-3, "float", "regularization lambda", low=0.0, low_open=True, high=1e15),
        Param("variant", "qp", "choice", "exact bundle QP or line search", choices=("qp", "ls")),
        Param("tol", 1e-3, "float", "refine stops once eps_t <= tol (absolute, in units of J)", low=0.0),
        Param("max_cuts", 200, "int", "bundle size bound (aggregation beyond it)", low=2, high=10_000),
        Param("rescaling", "margin", "choice", "margin or slack rescaling of the loss",
              choices=("margin", "slack")),
        Param("window", 100_000, "int", "FIFO window size (None: unbounded)", low=1, none=True),
        Param("qp_tol", 1e-12, "float", "inner QP tolerance (Wolfe gap)", low=0.0),
        Param("qp_steps", 100_000, "int", "inner QP step cap", low=1, high=10_000_000),
        Param("line_search", "ocas", "choice", "one-token windows: exact line search from the best "
              "iterate towards w_t and the next cut near it (OCAS), or none (cut at w_t)",
              choices=("ocas", "none")),
    )

    @classmethod
    def _unit_test_params(cls):
        """Small, fast settings for the conformance checks (river's convention)."""
        yield {"lam": 0.05, "max_cuts": 4}

    def __init__(self, *, lam=1e-3, variant="qp", tol=1e-3, max_cuts=200, rescaling="margin",
                 window=100_000, qp_tol=1e-12, qp_steps=100_000, line_search="ocas", **kwargs):
        self._set_params(locals())
        self._bound = False

    # ------------------------------------------------------------------ binding
    def bind(self, structure, labels):
        self.check_structure(structure)
        self.structure = structure
        self._kind = structure.kind
        self._use_trans = bool(structure.use_trans)
        structure.check_rescaling(self.rescaling)
        self._K = 0
        self.W = Weights(1, 4)            # current bundle iterate w_t
        self.Wbest = Weights(1, 4)        # argmin_{t'} J(w_t') (predicts)
        self._C = structure.cost_matrix(4, labels)
        self.held = Window(self.window)
        self._oracle = None
        self._ws = None                   # the kernels' scratch buffers (prediction)
        self._reset_bundle()
        self.iterations = 0               # cuts taken (oracle passes), all windows
        self.oracle_calls = 0
        self.qp_steps_total = 0
        self.aggregations = 0
        self.rebuilds = 0
        self.line_steps = 0               # OCAS line searches that improved the best iterate
        self.history = []                 # per iteration: (J(w_{t-1}), min J, D_t, eps_t)
        self._bound = True

    def _reset_bundle(self):
        self.cuts = []
        self.alpha = np.zeros(0)
        self.G = np.zeros((0, 0))
        self.Jbest = math.inf
        self.lower = -math.inf
        self.D = -math.inf
        self._version = None              # window version the cuts / Jbest / lower belong to

    def ensure(self, n_features, labels):
        n_labels = len(labels)
        Kc = label_capacity(n_labels, self.W.Kc)
        grew = n_features > self.W.E.shape[0] or Kc > self.W.Kc
        self.W.grow(n_features, Kc)
        self.Wbest.grow(n_features, Kc)
        if n_labels != self._K or Kc != self._C.shape[0]:
            self._K = n_labels
            self._C = self.structure.cost_matrix(Kc, labels)
            self._oracle = None
            grew = True
        if grew:
            self._version = None          # cut shapes / labels changed: recompute at the next refine

    @property
    def n_blocks(self):
        return len(self.held)

    def _one_token(self):
        """The window is one-token single-label (cuts as labelings, OCAS); cached per version."""
        key = (id(self.held), self.held.version, len(self.held))
        if getattr(self, "_tok_key", None) != key:
            self._tok_key, self._tok = key, self._orc().vectorized(self.held)
        return self._tok

    def _orc(self):
        if self._oracle is None:
            self._oracle = RiskOracle(self.structure, self._K, self.W.Kc, self._C, self.rescaling)
        return self._oracle

    # ------------------------------------------------------------------ learning
    #: ``learn(..., weight=c)``: the weighted risk (see the module docstring)
    example_weights = True

    def learn(self, tok_ptr, fidx, fval, y, Ki=1, weight=1.0):
        """Hold a new example (FIFO window) with weight ``weight`` c > 0. No optimization until
        :meth:`refine`."""
        if weight != 1.0:
            weight = float(weight)
            if not 0.0 < weight < math.inf:
                raise ValueError(f"BMRM example weights must be finite and > 0, got {weight!r}")
        self.held.add(tok_ptr, fidx, fval, y, Ki, weight)

    @property
    def stale(self):
        """True when the window changed since the cuts were (re)built."""
        return self._version != self.held.version

    def _rebuild(self):
        """Recompute the labeled cuts on the current window, drop the aggregate (module doc)."""
        o = self._orc()
        kept = [c for c in self.cuts if c.labs is not None]
        had = len(self.cuts) > 0
        self.cuts = []
        dense = []
        sparse = o.vectorized(self.held)
        for c in kept:
            a, b = o.cut_from_labelings(self.W, self.held, c.seq0, c.labs)
            dense.append(a)
            if sparse:     # labelings of the current window, no dense vector kept
                self.cuts.append(_Cut(None, b, self.held.first_seq, self._aligned(c.seq0, c.labs)))
            else:
                self.cuts.append(_Cut(a, b, c.seq0, c.labs))
        t = len(self.cuts)
        self.G = np.array([[weights_dot(dense[i], dense[j]) for j in range(t)] for i in range(t)])
        self.G = self.G.reshape(t, t)
        self.alpha = np.full(t, 1.0 / t) if t else np.zeros(0)
        self.Jbest = math.inf
        self.lower = -math.inf
        self.D = -math.inf
        self._version = self.held.version
        if had:
            self.rebuilds += 1
        if t:
            self._solve()

    def _aligned(self, seq0, labs):
        """Labels of the current window from labelings stored when the window started at ``seq0``
        (held examples not in ``labs`` take their ground truth: no contribution)."""
        y = self.held.csr(self.W.E.shape[0])[1]
        n = len(y)
        yh = y.astype(np.int32)
        off = self.held.first_seq - seq0
        stored = np.asarray(labs, dtype=np.int32)
        lo, hi = max(off, 0), min(len(stored), off + n)
        if hi > lo:
            yh[lo - off:hi - off] = stored[lo:hi]
        return np.where(yh < self._K, yh, y).astype(np.int32)

    def _coefs(self, yh, y):
        """c_i / n of a labeled cut a = (1/n) sum_i c_i x_i (e_{yh_i} - e_{y_i}) (c_i = 1 for margin,
        Delta_i(yh_i) for slack rescaling; 0 where yh_i = y_i); weighted: c_i c'_i / N."""
        n = max(len(y), 1)
        c = np.where(yh != y, 1.0 if self.rescaling == "margin" else self._C[y, yh], 0.0)
        cw = self.held.example_weights()
        return c / n if cw is None else c * cw / self.held.total()

    def _labeled_dots(self, a):
        """<a, a_k> for every cut k stored as labelings, from the scores S = X a (one product with
        X, then O(n) per cut): <a, a_k> = sum_i c_ik / n (S[i, yh_ik] - S[i, y_i])."""
        X, y = self.held.csr(self.W.E.shape[0])
        S = np.asarray(X @ a.E[:, : self._K])
        r = np.arange(len(y))
        Sy = S[r, y]
        return [float(self._coefs(c.labs, y) @ (S[r, c.labs] - Sy)) if c.a is None else None for c in self.cuts]

    def _combine(self, alpha):
        """sum_k alpha_k a_k and <alpha, b>. Cuts stored as labelings are mixed per example first
        (M = sum_k alpha_k Z_k, n x K), then one product X' M."""
        A = weights_like(self.W)
        M = None
        for c, al in zip(self.cuts, alpha):
            if al == 0.0:
                continue
            if c.a is None:
                X, y = self.held.csr(self.W.E.shape[0])
                if M is None:
                    M = np.zeros((len(y), self._K))
                r = np.arange(len(y))
                w = al * self._coefs(c.labs, y)
                np.add.at(M, (r, c.labs), w)
                np.add.at(M, (r, y), -w)
            else:
                A.E += al * c.a.E
                A.T += al * c.a.T
                A.B += al * c.a.B
        if M is not None:
            X = self.held.csr(self.W.E.shape[0])[0]
            A.E[:, : self._K] += np.asarray(X.T @ M)
        return A, float(sum(al * c.b for c, al in zip(self.cuts, alpha)))

    def dense_cut(self, k):
        """The d-vector a_k of cut k (materialized for cuts stored as labelings; tests)."""
        c = self.cuts[k]
        if c.a is not None:
            return c.a
        e = np.zeros(len(self.cuts))
        e[k] = 1.0
        return self._combine(e)[0]

    def _solve(self):
        """Solve the bundle dual (qp) from the warm start, set w_t and D_t."""
        if self.variant == "qp" and len(self.cuts) > 1:
            bvec = np.array([c.b for c in self.cuts])
            scale = max(1.0, float(np.abs(bvec).max()), float(np.abs(np.diag(self.G)).max()) / self.lam)
            self.qp_steps_total += KP.simplex_qp(self.G, bvec, self.lam, self.alpha, self.qp_tol * scale,
                                                 self.qp_steps)
            self.alpha = np.maximum(self.alpha, 0.0)
            self.alpha /= self.alpha.sum()
        A, bb = self._combine(self.alpha)
        inv = -1.0 / self.lam
        self.W.E[...] = inv * A.E
        self.W.T[...] = inv * A.T
        self.W.B[...] = inv * A.B
        self.D = bb - 0.5 * self.lam * self.W.sqnorm()
        self.lower = max(self.lower, self.D)

    def _add_cut(self, cut, a):
        """Add ``cut`` (its dense vector ``a``, which a cut stored as labelings does not keep)."""
        o = 0
        if len(self.cuts) >= (2 if self.variant == "ls" else self.max_cuts):
            keep = [k for k in range(len(self.cuts)) if self.alpha[k] > 0.0]
            if len(keep) < len(self.cuts) and self.variant == "qp":
                self.cuts = [self.cuts[k] for k in keep]
                self.G = self.G[np.ix_(keep, keep)]
                self.alpha = self.alpha[keep]
            else:
                A, bb = self._combine(self.alpha)
                self.cuts = [_Cut(A, bb, -1, None)]
                self.G = np.array([[weights_dot(A, A)]])
                self.alpha = np.ones(1)
                self.aggregations += 1
        t = len(self.cuts)
        lab = self._labeled_dots(a) if any(c.a is None for c in self.cuts) else [None] * t
        row = np.array([weights_dot(a, c.a) if c.a is not None else lab[k] for k, c in enumerate(self.cuts)]
                       + [weights_dot(a, a)])
        G = np.zeros((t + 1, t + 1))
        G[:t, :t] = self.G
        G[t, :] = row
        G[:, t] = row
        self.G = G
        self.cuts.append(cut)
        if t == 0:
            self.alpha = np.ones(1)
        elif self.variant == "ls":
            # alpha <- (1 - eta) alpha + eta e_t, exact eta of the concave quadratic
            bvec = np.array([c.b for c in self.cuts])
            al = np.append(self.alpha, 0.0)
            d = -al
            d[t] = 1.0
            curv = float(d @ self.G @ d)
            slope = float(d @ bvec) - float(d @ (self.G @ al)) / self.lam
            eta = 1.0 if curv <= 0.0 else min(max(self.lam * slope / curv, 0.0), 1.0)
            self.alpha = al + eta * d
        else:
            self.alpha = np.append(self.alpha, 0.0)
        return o

    def iterate(self):
        """One BMRM iteration (one oracle pass = one cut); returns eps_t."""
        if self.stale:
            self._rebuild()
        o = self._orc()
        Wc = self.W
        if self.line_search == "ocas" and self.Jbest < math.inf and self._one_token():
            Wc = self._ocas_point()
        c0 = o.oracle_calls
        R, a, b, labs = o.evaluate(Wc, self.held)
        self.oracle_calls += o.oracle_calls - c0
        J = 0.5 * self.lam * Wc.sqnorm() + R
        if J < self.Jbest:
            self.Jbest = J
            self.Wbest = Wc.copy()
        sparse = self._one_token()
        self._add_cut(_Cut(None if sparse else a, b, self.held.first_seq, labs), a)
        self._solve()
        self.iterations += 1
        eps = self.Jbest - self.lower
        self.history.append((J, self.Jbest, self.D, eps))
        return eps

    def _ocas_point(self):
        """OCAS step (Franc & Sonnenburg): w_best <- the exact minimizer of J on the ray
        w_best + t (w_t - w_best), t >= 0 (J is a convex quadratic plus a piecewise linear function
        of t: its scores are affine in t, bisection on the right derivative), then the cut point
        (1 - mu) w_best + mu w_t with mu = 0.1. One-token windows only (the scores of every label
        are one product with X)."""
        Wb, Wt = self.Wbest, self.W
        dW = weights_like(Wb)
        dW.E[...] = Wt.E - Wb.E
        dW.T[...] = Wt.T - Wb.T
        dW.B[...] = Wt.B - Wb.B
        dd = dW.sqnorm()
        if dd > 0.0:
            X, y = self.held.csr(Wb.E.shape[0])
            t, R = line_min(self._orc(), X, y, Wb.E, dW.E, self.lam, weights_dot(Wb, dW), dd,
                            cw=self.held.example_weights())
            if t > 0.0:
                V = Wb.copy()
                V.E += t * dW.E
                V.T += t * dW.T
                V.B += t * dW.B
                J = 0.5 * self.lam * V.sqnorm() + R
                if J < self.Jbest:
                    self.Jbest, self.Wbest = J, V
                    self.line_steps += 1
        Wc = self.Wbest.copy()
        for a, b in ((Wc.E, Wt.E), (Wc.T, Wt.T), (Wc.B, Wt.B)):
            a *= 1.0 - _OCAS_MU
            a += _OCAS_MU * b
        return Wc

    def refine(self, passes=1.0, tol=None, progress=None):
        """Up to ``ceil(passes)`` BMRM iterations (each one oracle pass over the window and one
        cut); stops once eps_t <= ``tol`` (default: the ``tol`` parameter)."""
        check_number("passes", passes, low=0.0)
        if len(self.held) == 0 or self._K == 0:
            return
        tol = self.tol if tol is None else tol
        n_it = int(math.ceil(passes))
        for k in range(n_it):
            eps = self.iterate()
            if progress is not None:
                progress((k + 1) / n_it, self)
            if eps <= tol:
                break

    # ------------------------------------------------------------------ prediction / certificate
    def prediction_tables(self):
        """The best iterate's tables (:meth:`_pred`, unscaled)."""
        W = self._pred()
        return W.E, W.E, 0.0, W.T, W.B, 1.0

    def _pred(self):
        return self.Wbest if self.Jbest < math.inf else self.W

    def predict(self, ex_tok, tok_ptr, fidx, fval, y_ptr, n_out):
        out = np.zeros(n_out, dtype=np.int32)
        if self._K == 0:
            return out
        W = self._pred()
        Lm = max(int(np.max(np.diff(ex_tok))) if len(ex_tok) > 1 else 1, 1)
        if self._ws is None:
            from ..workspace import Workspace
            self._ws = Workspace(self.structure)
        KB.predict_batch(KBu.model(self.structure, self._K, W.Kc, self._C), W.bundle(), 1.0, W.E, 0.0,
                         KBu.pack(KBu.Batch(ex_tok, tok_ptr, fidx, fval, y_ptr)), out,
                         self._ws.ensure(Lm, W.Kc).scratch(Lm, False))
        return out

    def certificate(self):
        """eps_t = min J(w_t') - max D_t (a valid bound on J(w_best) - J*) for the predicting
        weights, from the solver's own state (no oracle call). Between a window change and the
        next refine: gap = inf (the cuts are of another risk) and the primal of the predicting
        weights on the new window (one oracle pass)."""
        t0 = time.perf_counter()
        n = len(self.held)
        base = dict(lam=self.lam, rescaling=self.rescaling)
        extra = {"variant": self.variant, "iterations": self.iterations, "cuts": len(self.cuts),
                 "aggregations": self.aggregations, "rebuilds": self.rebuilds,
                 "qp_steps": self.qp_steps_total, "D_t": self.D,
                 "line_search": self.line_search, "line_steps": self.line_steps}
        if n == 0 or self._K == 0:
            return Certificate.empty(self.lam, n, exact=False, rescaling=self.rescaling, extra=extra)
        W = self._pred()
        reg = 0.5 * self.lam * W.sqnorm()
        if self.stale or self.Jbest == math.inf:
            R = self._orc().risk(W, self.held)
            why = ("the window changed since the last refine (the cuts are of a different risk)" if self.cuts
                   else "no BMRM iteration yet")
            return Certificate(math.inf, reg + R, -math.inf, n, n, time.perf_counter() - t0, False,
                               regularizer=reg, hinge=R, note=f"primal only: {why}; refine to certify",
                               extra=extra, **base)
        gap = self.Jbest - self.lower
        return Certificate(max(gap, 0.0), self.Jbest, self.lower, n, 0, time.perf_counter() - t0, True, raw_gap=gap,
                           regularizer=reg, hinge=self.Jbest - reg, dual_loss=self.lower + reg,
                           note="BMRM eps_t = min_t' J(w_t') - max_s D_s(alpha_s) (bundle dual, a lower "
                                "bound on min J); primal of the best iterate, the one that predicts",
                           extra=extra, **base)

    # ------------------------------------------------------------------ state
    def state(self):
        cuts = []
        for c in self.cuts:
            labs = c.labs
            if labs is not None and not isinstance(labs, np.ndarray):
                labs = [np.asarray(x) for x in labs]
            if c.a is None:       # stored as labelings: no dense vector (empty E / T / B)
                E = T = B = np.zeros(0)
            else:
                E, T, B = c.a.E, c.a.T, c.a.B
            cuts.append({"E": E, "T": T, "B": B, "b": float(c.b), "seq0": int(c.seq0),
                         "aggregate": labs is None, "labs": [] if labs is None else labs})
        return {"K": self._K, "C": self._C, "E": self.W.E, "T": self.W.T, "B": self.W.B,
                "bE": self.Wbest.E, "bT": self.Wbest.T, "bB": self.Wbest.B,
                "alpha": self.alpha, "G": self.G, "cuts": cuts, "window": self.held.state(),
                "scalars": {"Jbest": self.Jbest if self.Jbest < math.inf else None,
                            "lower": self.lower if self.lower > -math.inf else None,
                            "D": self.D if self.D > -math.inf else None,
                            "version": self._version, "iterations": self.iterations,
                            "oracle_calls": self.oracle_calls, "qp_steps": self.qp_steps_total,
                            "aggregations": self.aggregations, "rebuilds": self.rebuilds,
                            "line_steps": self.line_steps},
                "history": np.asarray(self.history, dtype=np.float64).reshape(-1, 4)}

    def restore(self, structure, labels, st):
        validate_bmrm_state(st, structure)   # every size, index and number checked first
        self.bind(structure, labels)
        self._K = int(st["K"])
        self._C = np.array(st["C"], dtype=np.float64)
        for W, pre in ((self.W, ""), (self.Wbest, "b")):
            W.E, W.T, W.B = (np.array(st[pre + k], dtype=np.float64) for k in ("E", "T", "B"))
        self.held = Window.from_state(st["window"])
        self.cuts = []
        for c in st["cuts"]:
            a = Weights.__new__(Weights)
            a.E, a.T, a.B = (np.array(c[k], dtype=np.float64) for k in ("E", "T", "B"))
            if c["aggregate"]:
                labs = None
            elif self.structure.single_label and self.held.single_token():
                labs = np.asarray(c["labs"], dtype=np.int32)
            else:
                labs = [np.asarray(x, dtype=np.int32) for x in c["labs"]]
            if labs is not None and isinstance(labs, np.ndarray):
                # one-token window: the cut is its labelings (a dense vector saved by older
                # versions is dropped; the labelings are realigned to the window's start)
                a, labs, seq0 = None, self._aligned(int(c["seq0"]), labs), self.held.first_seq
            elif a.E.size == 0:
                raise ValueError("BMRM state: a cut saved as labelings only, on a window that is not one-token")
            else:
                seq0 = int(c["seq0"])
            self.cuts.append(_Cut(a, float(c["b"]), seq0, labs))
        self.alpha = np.array(st["alpha"], dtype=np.float64)
        self.G = np.array(st["G"], dtype=np.float64).reshape(len(self.cuts), len(self.cuts))
        s = st["scalars"]
        self.Jbest = math.inf if s["Jbest"] is None else float(s["Jbest"])
        self.lower = -math.inf if s["lower"] is None else float(s["lower"])
        self.D = -math.inf if s["D"] is None else float(s["D"])
        self._version = None if s["version"] is None else int(s["version"])
        self.iterations, self.oracle_calls, self.qp_steps_total, self.aggregations, self.rebuilds = (
            int(s[k]) for k in ("iterations", "oracle_calls", "qp_steps", "aggregations", "rebuilds"))
        self.line_steps = int(s.get("line_steps", 0))      # absent in states saved before OCAS
        self.history = [tuple(r) for r in np.asarray(st["history"]).reshape(-1, 4)]


_COUNTS = (0, 1 << 62, "int")


def validate_bmrm_state(st, structure):
    """Check a saved BMRM state whole before anything is built from it: the weights and the best
    iterate (:func:`~streamssvm.saved_state.validate_weights`), the held window
    (:func:`~streamssvm.saved_state.validate_window`), every cut (the weights' shapes, finite,
    its labelings in range, one per example it was made on), the bundle QP's weights and Gram
    matrix against the cuts, the scalars and the history. Raises ``CheckpointError``."""
    d, Kc, K = validate_weights(st)
    validate_weights({"E": st["bE"], "T": st["bT"], "B": st["bB"], "K": K}, cost=None)
    if np.shape(st["bE"]) != (d, Kc):
        _fail("the best iterate's weights do not match the weights")
    validate_window(st["window"], structure, d, Kc, K)
    first = int(st["window"]["first_seq"])
    cuts = list(st["cuts"])
    for i, c in enumerate(cuts):
        what = f"cut {i}"
        labelings_only = (not c["aggregate"] and isinstance(c["labs"], np.ndarray)
                          and all(np.size(c[k]) == 0 for k in ("E", "T", "B")))
        if not labelings_only:   # a one-token cut may be saved as its labelings alone
            validate_weights({"E": c["E"], "T": c["T"], "B": c["B"], "K": K}, cost=None)
            if np.shape(c["E"]) != (d, Kc):
                _fail(f"{what}: its weights do not match the weights")
        validate_scalars(c, {"b": (-1e300, 1e300, "float"), "seq0": (-1, first, "int")}, what)
        if not isinstance(c["aggregate"], (bool, np.bool_)):
            _fail(f"{what}: aggregate must be true or false")
        if c["aggregate"]:
            continue
        labs = c["labs"]
        if isinstance(labs, np.ndarray):
            if labs.ndim != 1 or labs.size > 1 << 40:
                _fail(f"{what}: labels must be a 1-D array")
            validate_labeling(labs, K, what)
        else:
            for j, lab in enumerate(labs):
                validate_labeling(lab, K, f"{what}: labeling {j}")
    t = len(cuts)
    alpha, G = np.asarray(st["alpha"]), np.asarray(st["G"])
    if alpha.shape != (t,) or G.size != t * t or alpha.dtype.kind != "f" and alpha.size or G.dtype.kind != "f" and G.size:
        _fail(f"the bundle weights {alpha.shape} and Gram matrix {G.shape} do not match {t} cuts")
    if not (np.isfinite(alpha).all() and np.isfinite(G).all()):
        _fail("the bundle weights or Gram matrix are not finite")
    s = st["scalars"]
    validate_scalars(s, {"Jbest": (-1e300, 1e300, "float?"), "lower": (-1e300, 1e300, "float?"),
                         "D": (-1e300, 1e300, "float?"), "version": (0, 1 << 62, "int?"),
                         **{k: _COUNTS for k in ("iterations", "oracle_calls", "qp_steps", "aggregations",
                                                 "rebuilds", "line_steps")}}, "scalars")
    h = np.asarray(st["history"])
    if h.dtype.kind not in "fiu" and h.size or h.size % 4:
        _fail("the history must be rows of 4 numbers")

