"""Pragam: primal-adjoint gap minimization (Saha, Zhang, Vishwanathan, "Lower Bounds for BMRM and
Faster Rates for Training SVMs", Algorithm 1 -- Nesterov's excessive gap technique, "Excessive gap
technique in nonsmooth convex minimization") for the Crammer-Singer multiclass SVM over the held
window, with the certified duality gap J(w_k) - D(alpha_k) at every iteration.

Setting (one token per example, K >= 2 classes, cost Delta_i(y) = C[y_i, y]):

    J(W) = (lam/2) ||W||^2 + (1/n) sum_i max_y [Delta_i(y) + <w_y - w_{y_i}, x_i>]
    Q    = { alpha in R^{n x K}: alpha_i >= 0, sum_y alpha_iy = 1/n }    (a product of scaled simplices)
    W(alpha) = (1/lam) X' (Y/n - alpha)          (Y: one-hot truth)           -- the paper's (24)
    D(alpha) = <alpha, Delta> - (lam/2) ||W(alpha)||^2,   grad D(alpha) = Delta + X W(alpha)

J(W) >= D(alpha) for every W and alpha in Q (weak duality), so the gap is a valid certificate of
J(W_k) - J* whatever the step sizes. The maps (23) / (25), garbled in print, are projections
(reconstructed by the paper's technical note, re-derived here):

    alpha_mu(W) = Proj_Q( g(W) / mu ),  g(W)_iy = Delta_iy + <w_y - w_{y_i}, x_i>
    v(alpha)    = Proj_Q( alpha + grad D(alpha) / L )

each an O(nK) pass of the O(n) projection (``_kernels/projection``) per example. With two classes
this *is* the paper's binary hinge SVM: the optimum (and every iterate) has w_0 = -w_1, and with
v = w_1 - w_0 the objective is (lam/4)||v||^2 + (1/n) sum_i [1 - s_i <v, x_i>]_+ -- the binary SVM
with lambda_binary = lam / 2; the per-example simplex (1/n - a_i, a_i) is the paper's box
a_i in [0, 1/n]. We therefore use ``MulticlassSSVM`` with two classes for the binary task rather
than adding a binary estimator. ``bias=True`` (Pragam-b, two classes only) adds the unregularized
b_1 - b_0: Q gains the equality sum_i s_i a_i = 0 (s_i = +1 for class 1, -1 for class 0), one box
plus one equality -- the paper's (22) -- projected by the same O(n) algorithm; the primal then
minimizes over the bias exactly (a sort over the n kinks).

L: the paper's L = ||A||^2_{1,2} / lam = sigma_max(X)^2 / lam (its section 4.1 drops the 1/lam).
``L="exact"`` computes it (sparse SVD), a number fixes it, ``"adaptive"`` (default) backtracks as
in Nesterov's composite gradient methods: each iteration tries L / 2, doubles it until the
ascent inequality D(v) >= D(beta) + <grad D(beta), v - beta> - (L/2)||v - beta||^2 holds (exact for
a quadratic: ||X'(v - beta)||^2 / lam <= L ||v - beta||^2), and when the accepted L breaks
Nesterov's condition tau_k^2 L <= (1 - tau_k) mu_k the smoothing mu_k is raised to meet it and the
step is redone (raising mu keeps the excessive gap condition J_mu(W_k) <= D(alpha_k), since J_mu
decreases in mu). Every iterate then satisfies

    J(W_k) - D(alpha_k) <= mu_k D_2 <= 4 L_max D_2 / ((k + 1)(k + 2)),   D_2 = 1 / (2n),

reported in the certificate (``extra["bound"]``) and checked by the tests.

Step schedule. ``schedule="paper"`` is Algorithm 1 as printed: tau_k = 2 / (k + 3), mu_{k+1} =
(1 - tau_k) mu_k from mu_0 = 2 L, so mu_k = 4 L / ((k+1)(k+2)) follows the *largest* L met, and the
gap tracks that worst-case bound (issue 27: 3,000 OCR letters, 26 classes, lam = 1e-2: gap 5.7e-2
after 100 iterations, with L_max = 3.4e6 while the backtracked local L is 2e5-1.7e6). The default
``"adaptive"`` keeps Nesterov's two conditions and nothing else: each step halves L, takes the
largest tau with tau^2 L <= (1 - tau) mu_k (``_largest_tau``), backtracks L at beta and, when the
accepted L breaks the condition, recomputes tau from it and redoes the step (no mu raise). The
induction of Nesterov's "Excessive gap technique in nonsmooth convex minimization"
uses only J_mu(W_k) <= D(alpha_k) and that step condition, so every iterate
keeps the excessive gap and gap_k <= mu_k D_2; since mu_{k+1} = tau^2 L_k grows with both mu_k and
L_k, mu_k stays below the printed schedule's 4 L_max / ((k+1)(k+2)) and the rate (26) still holds.
The same case certifies 1e-2 at iteration 95. ``shrink_steps > 0`` also lowers mu_k after each step to
the smallest value (down to mu_k / 2^shrink_steps) that keeps J_mu(W_k) <= D(alpha_k): a valid state
with a smaller bound, but a smaller mu forces smaller steps, and on the cases measured it was slower
(off by default).

Streaming: :meth:`learn` only adds the example to the FIFO window (no optimization; predictions
use the last W_k). A changed window is a different problem: the next :meth:`refine` restarts
Algorithm 1 (k = 0) from the projection of the previous dual point (held rows rescaled to the new
1/n, new rows on their ground truth); between a window change and that refine the certificate
reports gap = inf with a note.

Example weights (``learn(..., weight=c)``, multiclass, Pragam-b and chains): J(W) = (lam/2)||W||^2 +
(1/N) sum_i c_i H_i(W), N = sum_i c_i over the held examples; Q's row i has mass c_i / N instead of
1/n (Y likewise; Pragam-b: the box [0, c_i / N]), D_2 = (1/2) sum_i (c_i / N)^2, and the dual, the gap and the schedule follow
unchanged. The weights are held with the examples (window evictions remove them) and saved only
when one is not 1; every weight 1 is the unweighted learner, bit for bit. Chains: each example's
clique marginals have mass c_i / N (derivation in :mod:`streamssvm.learners._pragam_chain`).

Chains (``SequenceTagger``; the paper's App. E): the same Algorithm 1 on the M3N dual over clique
(edge) marginals with the paper's Euclidean prox, both maps projections onto the chain's marginal
polytope by App. E.3.1's block coordinate descent, made exactly feasible before any dual value is
used (:mod:`streamssvm.learners._pragam_chain`). ``bias`` is multiclass only.
"""
from __future__ import annotations

import math
import time

import numpy as np

from .._kernels import projection as KP
from .._kernels import structops as so
from ..certificate import Certificate
from ..oracles.risk import Window
from ..structures.base import Weights
from ._pragam_chain import ChainDual
from .base import DenseWeights, Learner, label_capacity, check_number
from ..params import Param
from ..saved_state import _bad as _fail, unpack_rows, validate_scalars, validate_weights, validate_window


class Pragam(DenseWeights, Learner):
    """Pragam (Algorithm 1) on the Crammer-Singer dual of the held window, or on chains
    (``SequenceTagger``) on the App. E dual over clique marginals (module doc).

    Parameters
    ----------
    lam
        Regularization lambda (two classes: the binary SVM with lambda_binary = lam / 2).
    bias
        Pragam-b: an unregularized bias (two classes only).
    L
        ``"adaptive"`` (backtracking), ``"exact"`` (sigma_max(X)^2 / lam) or a positive number.
    tol
        :meth:`refine` stops once the certified gap is <= tol (formerly ``eps``).
    window
        FIFO window size (None: unbounded).
    seed
        Random start alpha_{-1} in Q.
    start
        ``"random"``: alpha_{-1} uniform-ish random in Q (Algorithm 1 as printed); ``"truth"``:
        alpha_{-1} = Y/n (all mass on the ground truth), i.e. W_0 = W(alpha_{-1}) = 0. Any point of Q
        is a valid start for the analysis; at small lambda the random one makes W_0 of norm ~ 1/lambda
        and J(W_0) huge.
    max_backtracks
        Cap on the doublings of L in one step (adaptive L).
    rescaling
        ``"margin"`` only (Pragam's dual is the margin-rescaled Crammer-Singer one).
    schedule
        ``"adaptive"`` (default): the largest step tau with tau^2 L_k <= (1 - tau) mu_k for the L_k
        backtracked at this step; ``"paper"``: tau_k = 2 / (k + 3) as printed (module doc).
    shrink_steps
        Adaptive schedule only: after each step lower mu by up to 2^shrink_steps to the smallest
        value keeping J_mu(W_k) <= D(alpha_k) (0, the default: never; measured slower).

    Examples
    --------
    >>> import numpy as np
    >>> from streamssvm.structures.multiclass import MultiClass
    >>> from streamssvm.learners import Pragam
    >>> rng = np.random.default_rng(0)
    >>> p = Pragam(lam=0.1, tol=1e-5); p.bind(MultiClass(), [0, 1]); p.ensure(3, [0, 1])
    >>> for _ in range(80):
    ...     y = int(rng.integers(2))
    ...     p.learn(np.array([0, 2]), np.array([0, 1]), np.array([1.0, 2 * y - 1 + rng.normal()]), np.array([y]))
    >>> p.refine(passes=2000)
    >>> c = p.certificate(); c.gap <= 1e-5, c.gap <= c.extra["bound"]
    (True, True)
    """

    structures = ("multiclass", "chain")

    renamed = {"capacity": "window", "eps": "tol"}
    params = (
        Param("lam", 1e-3, "float", "regularization lambda (two classes: the binary SVM's lambda is "
              "lam / 2)", low=0.0, low_open=True, high=1e15),
        Param("bias", False, "bool", "Pragam-b: an unregularized bias (two classes only)"),
        Param("L", "adaptive", "float", "Lipschitz constant: adaptive (backtracking), exact "
              "(sigma_max(X)^2 / lam) or a positive number", low=0.0, low_open=True,
              choices=("adaptive", "exact")),
        Param("tol", 1e-3, "float", "refine stops once the certified gap is <= tol", low=0.0),
        Param("window", 100_000, "int", "FIFO window size (None: unbounded)", low=1, none=True),
        Param("seed", 0, "seed", "random start alpha_{-1} in Q"),
        Param("max_backtracks", 60, "int", "cap on the doublings of L in one step", low=1, high=1000),
        Param("rescaling", "margin", "choice", "margin only (the Crammer-Singer dual)",
              choices=("margin",)),
        Param("start", "random", "choice", "alpha_{-1}: random in Q, or all mass on the truth",
              choices=("random", "truth")),
        Param("schedule", "adaptive", "choice", "adaptive: the largest step tau with tau^2 L_k <= (1 - tau) "
              "mu_k for the step's backtracked L_k; paper: tau_k = 2 / (k + 3), mu_k = (1 - tau_k) mu_{k-1}",
              choices=("adaptive", "paper")),
        Param("shrink_steps", 0, "int", "adaptive schedule: after each step lower mu (by up to "
              "2^shrink_steps) to the smallest value keeping J_mu(W_k) <= D(alpha_k) (0: never)",
              low=0, high=60),
    )

    @classmethod
    def _unit_test_params(cls):
        """Small, fast settings for the conformance checks (river's convention)."""
        yield {"lam": 0.05}
        yield {"lam": 0.1, "start": "truth", "schedule": "paper"}    # chains' W_0 = 0 start, printed schedule

    def __init__(self, *, lam=1e-3, bias=False, L="adaptive", tol=1e-3, window=100_000, seed=0,
                 max_backtracks=60, rescaling="margin", start="random", schedule="adaptive", shrink_steps=0,
                 **kwargs):
        self._set_params(locals())
        self._bound = False

    # ------------------------------------------------------------------ binding
    def bind(self, structure, labels):
        self.check_structure(structure)
        self.structure = structure
        self._kind = structure.kind
        self._chain = structure.kind == so.CHAIN
        self._prob = None
        if self._chain and self.bias:
            raise ValueError("Pragam(bias=True) (Pragam-b) is for two classes, not chains")
        self._K = 0
        self.W = Weights(1, 4)
        self.b = np.zeros(4)
        self._C = structure.cost_matrix(4, labels)
        self.held = Window(self.window)
        self._rng = np.random.default_rng(self.seed)
        self._version = None
        self._prev_seq = None
        self._prev_n = None
        self._prev_weighted = False   # chains: the last window set up had example weights
        self.alpha = None
        self.k = 0
        self.iterations = 0
        self.backtracks = 0
        self.mu_raises = 0
        self.tau_cuts = 0
        self.restarts = 0
        self.Lcur = None
        self.Lmax = 0.0
        self.mu = None
        self.last = None          # (J, D, gap, mu_bound, rate_bound) after the last iteration
        self.history = []         # per iteration: (k, J, D, gap, mu * D2, 4 Lmax D2 / ((k+1)(k+2)), Jmu)
        self._bound = True

    def ensure(self, n_features, labels):
        n_labels = len(labels)
        Kc = label_capacity(n_labels, self.W.Kc)
        if n_features > self.W.E.shape[0] or Kc > self.W.Kc:
            self.W.grow(n_features, Kc)
            b = np.zeros(Kc)
            b[: len(self.b)] = self.b
            self.b = b
            self._version = None
        if n_labels != self._K or Kc != self._C.shape[0]:
            if self.bias and n_labels > 2:
                raise ValueError("Pragam(bias=True) (Pragam-b) is for two classes (one box plus one equality); "
                                 f"got {n_labels} labels")
            self._K = n_labels
            self._C = self.structure.cost_matrix(Kc, labels)
            self._version = None

    @property
    def n_blocks(self):
        return len(self.held)

    #: ``learn(..., weight=c)``: multiclass, Pragam-b and chains (module docstring)
    example_weights = True

    def weights_refused(self):
        """Why this Pragam does not take example weights, or None (every structure takes them)."""
        return None

    def learn(self, tok_ptr, fidx, fval, y, Ki=1, weight=1.0):
        """Hold a new example (FIFO window) with weight ``weight`` c > 0.
        No optimization until :meth:`refine`."""
        if weight != 1.0:
            if self.weights_refused():
                raise NotImplementedError(f"{self.weights_refused()} (got weight={weight!r})")
            weight = float(weight)
            if not 0.0 < weight < math.inf:
                raise ValueError(f"Pragam example weights must be finite and > 0, got {weight!r}")
        if len(tok_ptr) != 2 and not self._chain:
            raise ValueError("Pragam learns one-token (multiclass) examples or chains")
        self.held.add(tok_ptr, fidx, fval, y, Ki, weight)

    @property
    def stale(self):
        return self._version != self.held.version

    # ------------------------------------------------------------------ the problem on the window
    def _setup(self):
        """Matrices of the current window and the restarted Algorithm 1 state (module doc)."""
        if self._chain:
            return self._setup_chain()
        d = self.W.E.shape[0]
        X, y = self.held.csr(d)
        n, K = X.shape[0], self._K
        self._X, self._XT, self._y = X, X.T.tocsr(), y
        self._n = n
        cw = self.held.example_weights()
        # the row masses of Q: 1/n, or c_i / N with example weights (D_2 = max_Q ||alpha||^2 / 2)
        self._mass = 1.0 / n if cw is None else cw / float(cw.sum())
        self._D2 = 1.0 / (2.0 * n) if cw is None else 0.5 * float(np.dot(self._mass, self._mass))
        self._Dm = self._C[y][:, :K].copy()
        self._Dm[np.arange(n), y] = 0.0
        self._Y = np.zeros((n, K))
        self._Y[np.arange(n), y] = self._mass
        self._s = np.where(y == 1, 1.0, -1.0)
        self._work = np.empty(2 * max(n, K) + 2)
        self._act = np.empty(max(n, K) + 2, dtype=np.int64)
        self._sc = [np.empty(K) for _ in range(5)]
        # start: the previous dual point (held rows rescaled, new rows on the truth) or random
        start = self._Y.copy()
        if self.alpha is not None and self._prev_seq is not None and self.alpha.shape[1] == K:
            off = self.held.first_seq - self._prev_seq
            m = self.alpha.shape[0]
            lo, hi = max(off, 0), min(m, off + n)
            if hi > lo:
                if cw is None:
                    start[lo - off:hi - off] = self.alpha[lo:hi] * (self._prev_n / n)
                else:        # each held row to its new mass c_i / N (then projected onto Q)
                    old = self.alpha[lo:hi]
                    tot = old.sum(axis=1, keepdims=True)
                    start[lo - off:hi - off] = np.where(tot > 0.0, old / np.where(tot > 0.0, tot, 1.0), 0.0) \
                        * self._mass[lo - off:hi - off, None]
            self.restarts += 1
        elif self.start == "random":
            P = self._rng.exponential(size=(n, K))
            start = P / P.sum(axis=1, keepdims=True)
            start = start / n if cw is None else start * self._mass[:, None]
        self._alpha_m1 = self._proj(start)
        self._restart_schedule(n, X, self.lipschitz)

    def _restart_schedule(self, n, X, exact_L):
        """Algorithm 1 restarted on a window of ``n`` examples (rows of ``X``): L (``exact_L()``
        for ``L="exact"``; for ``"adaptive"`` a lower bound, the largest squared row norm over
        lam, which backtracking raises where needed; else the number given), k = 0, no
        smoothing point yet, and the window's version and position remembered."""
        if self.L == "exact":
            self.Lcur = exact_L()
        elif self.L == "adaptive":
            rn = np.asarray(X.multiply(X).sum(axis=1)).ravel()
            self.Lcur = max(float(rn.max()) if rn.size else 1.0, 1e-12) / self.lam
        else:
            self.Lcur = float(self.L)
        self.Lmax = self.Lcur
        self.k = 0
        self.mu = None
        self.last = None
        self._version = self.held.version
        self._prev_seq = self.held.first_seq
        self._prev_n = n

    def _setup_chain(self):
        """The chain window's dual problem (:class:`~streamssvm.learners._pragam_chain.ChainDual`) and
        the restarted Algorithm 1 state: the previous dual point on the examples still held
        (rescaled to the new 1/n, or with weights to the new c_i / N), the new examples on their
        ground truth, projected onto Q."""
        d, K = self.W.E.shape[0], self._K
        cw = self.held.example_weights()
        prob = ChainDual(list(self.held.items), d, K, self._C, self.lam, self.structure.use_trans, cw)
        self._prob = prob
        n = prob.n
        self._n = n
        self._D2 = prob.D2
        self._Dm = prob.Lc
        start = prob.truth_point()
        prev = getattr(self, "_prev_cptr", None)
        if self.alpha is not None and self._prev_seq is not None and prev is not None \
                and self.alpha.shape[1:] == (K, K):
            off = self.held.first_seq - self._prev_seq
            m = len(prev) - 1
            for j in range(max(off, 0), min(m, off + n)):
                a, b = prev[j], prev[j + 1]
                a2, b2 = prob.c_ptr[j - off], prob.c_ptr[j - off + 1]
                if b - a == b2 - a2:
                    if cw is None and not self._prev_weighted:
                        start[a2:b2] = self.alpha[a:b] * (self._prev_n / n)
                    else:   # each held example to its new mass c_i / N
                        tot = float(self.alpha[a].sum())
                        z = prob.mass[j - off] if cw is not None else 1.0 / n
                        start[a2:b2] = self.alpha[a:b] * (z / tot) if tot > 0.0 else start[a2:b2]
            self.restarts += 1
            start = prob.project(start)
        elif self.start == "random":
            start = prob.random_point(self._rng)
        self._alpha_m1 = start
        self._restart_schedule(n, prob.X, lambda: prob.norm_sq() / self.lam)
        self._prev_cptr = prob.c_ptr.copy()
        self._prev_weighted = cw is not None

    def _lin(self, W):
        """The linear map of the weights the dual's gradient needs: X W (multiclass) or the
        chain's clique score tables."""
        if self._chain:
            return self._prob.lin(W)
        return np.asarray(self._X @ W)

    def lipschitz(self):
        """sigma_max(X)^2 / lam for the held window (the paper's L, with the 1/lam of (26))."""
        if self._chain:   # ||A|| does not depend on the example weights
            d, K = self.W.E.shape[0], self._K
            return ChainDual(list(self.held.items), d, K, self._C, self.lam,
                             self.structure.use_trans).norm_sq() / self.lam
        X = self.held.csr(self.W.E.shape[0])[0]
        if min(X.shape) == 0:
            return 1.0 / self.lam
        if min(X.shape) <= 2 or X.nnz < 50:
            s = np.linalg.norm(X.toarray(), 2)
        else:
            from scipy.sparse.linalg import svds
            s = float(svds(X.astype(np.float64), k=1, return_singular_vectors=False, tol=1e-10)[0])
            s *= 1.0 + 1e-9
        return s * s / self.lam

    def _proj(self, P, step=False):
        """Euclidean projection of an n x K array (chains: the clique tables, warm-started from the
        gradient step's multipliers when ``step``) onto Q."""
        if self._chain:
            return self._prob.project(P, self._prob.mul_step if step else None)
        n, K = P.shape
        out = np.empty_like(P)
        if not self.bias:
            return simplex_rows(P, self._mass)
        # two classes with the equality sum_i s_i a_i = 0, a_i = alpha_i(other class)
        y = self._y
        iy = np.arange(n)
        po = P[iy, 1 - y]
        py = P[iy, y]
        z = 1.0 / n if not np.ndim(self._mass) else self._mass      # row masses (weights: c_i / N)
        m = np.ascontiguousarray((po - py + z) / 2.0)
        a = np.empty(n)
        _, st = KP.project_box_eq(m, np.ones(n), self._s.copy(), np.zeros(n), np.full(n, 1.0 / n) if not np.ndim(z) else z.copy(), 0.0, a,
                                  self._work, self._act)
        out[iy, 1 - y] = a
        out[iy, y] = z - a
        return out

    def _Wof(self, alpha):
        """W(alpha) = X' (Y/n - alpha) / lam (d x K); chains: the flat (E, T, B) vector."""
        if self._chain:
            return self._prob.weights_of(alpha)
        return np.asarray(self._XT @ (self._Y - alpha)) / self.lam

    def _g(self, XW):
        """g(W)_iy = Delta_iy + <w_y - w_{y_i}, x_i> from the scores X W."""
        n = self._n
        return self._Dm + XW - XW[np.arange(n), self._y][:, None]

    def _primal(self, W, XW):
        """J(W) (minimizing over the bias for Pragam-b) and the bias."""
        if self._chain:
            return self._prob.primal(W, XW), 0.0
        n = self._n
        reg = 0.5 * self.lam * float(np.vdot(W, W))
        G = self._g(XW)
        if not self.bias:
            if np.ndim(self._mass):        # example weights: sum_i (c_i / N) H_i
                return reg + float(np.dot(self._mass, G.max(axis=1))), 0.0
            return reg + float(G.max(axis=1).sum()) / n, 0.0
        # H_i(c) = [t_i - s_i c]_+ with t_i = Delta_i + <w_o - w_y, x_i>; min over c = b_1 - b_0
        t = G[np.arange(n), 1 - self._y]
        s = self._s
        if np.ndim(self._mass):    # weights: c_i / N [t_i - s_i c]_+ = [m_i t_i - m_i s_i c]_+, same kinks
            t, s, n = t * self._mass, s * self._mass, 1.0
        kinks = t / s
        order = np.argsort(kinks)
        # sum_i [t_i - s_i c]_+ is convex piecewise linear in c: slope at c = -sum_{active} s_i
        best_c, best = 0.0, math.inf
        # evaluate at every kink in O(n) after sorting via cumulative sums
        ks = kinks[order]
        ss = s[order]
        ts = t[order]
        # active for s_i > 0 when c < kink; for s_i < 0 when c > kink
        pos = ss > 0
        # left of kink j: positives with kink > c are active -> suffix sums; negatives with kink < c -> prefix
        tp_suf = np.cumsum((ts * pos)[::-1])[::-1]
        sp_suf = np.cumsum((ss * pos)[::-1])[::-1]
        tn_pre = np.concatenate([[0.0], np.cumsum(ts * ~pos)])
        sn_pre = np.concatenate([[0.0], np.cumsum(ss * ~pos)])
        # at c = ks[j]: positives with index >= j+1 active (those at j contribute 0), negatives with index < j
        tp_next = np.concatenate([tp_suf[1:], [0.0]])
        sp_next = np.concatenate([sp_suf[1:], [0.0]])
        vals = (tp_next - sp_next * ks) + (tn_pre[:-1] - sn_pre[:-1] * ks)
        j = int(np.argmin(vals))
        best, best_c = float(vals[j]), float(ks[j])
        return reg + max(best, 0.0) / n, best_c

    def _smooth(self, XW, mu):
        """(alpha_mu(W), J_mu(W) - reg): the maximizer of <alpha, g> - mu/2 ||alpha||^2 over Q and its value."""
        if self._chain:
            return self._prob.smooth(XW, mu)
        G = self._g(XW)
        A = self._proj(G / mu)
        return A, float(np.vdot(A, G)) - 0.5 * mu * float(np.vdot(A, A))

    def _dual(self, alpha, Wa):
        return float(np.vdot(alpha, self._Dm)) - 0.5 * self.lam * float(np.vdot(Wa, Wa))

    def _vstep(self, beta, Wb, XWb, halve=True):
        """v(beta) with backtracking on L (adaptive; tries L / 2 first when ``halve``); returns (v, W(v))."""
        grad = self._Dm + XWb
        L = self.Lcur / 2.0 if self.L == "adaptive" and halve else self.Lcur
        for _ in range(self.max_backtracks):
            v = self._proj(beta + grad / L, step=True)
            Wv = self._Wof(v)
            dv = v - beta
            lhs = self.lam * float(np.vdot(Wv - Wb, Wv - Wb))
            rhs = L * float(np.vdot(dv, dv))
            if self.L != "adaptive" or lhs <= rhs * (1.0 + 1e-10) + 1e-300:
                break
            L *= 2.0
            self.backtracks += 1
        self.Lcur = L
        self.Lmax = max(self.Lmax, L)
        return v, Wv

    def iterate(self):
        """One iteration of Algorithm 1; returns the certified gap J(W_{k+1}) - D(alpha_{k+1})."""
        if self.stale:
            self._setup()
        D2 = self._D2
        lin = self._lin
        if self.mu is None:       # Algorithm 1, line 1
            am1 = self._alpha_m1
            Wm1 = self._Wof(am1)
            self._Wk = Wm1
            self._XWk = lin(Wm1)
            self.alpha, self._Wa = self._vstep(am1, Wm1, self._XWk)
            self._XWa = lin(self._Wa)
            self.mu = 2.0 * self.Lcur
            if self.schedule == "adaptive":
                self.mu = self._shrink_mu(self._XWk, self._Wk, self.mu)
        k = self.k
        mu = self.mu
        adaptive = self.schedule == "adaptive"
        if adaptive and self.L == "adaptive":
            self.Lcur = self.Lcur / 2.0         # let L decrease; backtracking raises it where needed
        tau = _largest_tau(mu, self.Lcur) if adaptive else 2.0 / (k + 3.0)
        amu, _ = self._smooth(self._XWk, mu)     # alpha_mu(W_k) depends on neither tau nor L
        Wmu = self._Wof(amu)
        XWmu = lin(Wmu)
        for _ in range(self.max_backtracks):
            beta = (1 - tau) * self.alpha + tau * amu
            Wb = (1 - tau) * self._Wa + tau * Wmu
            XWb = (1 - tau) * self._XWa + tau * XWmu
            v, Wv = self._vstep(beta, Wb, XWb, halve=not adaptive)
            if tau * tau * self.Lcur <= (1 - tau) * mu * (1.0 + 1e-12) or self.L != "adaptive":
                break
            if adaptive:
                # the accepted L breaks tau^2 L <= (1 - tau) mu: the largest tau that meets it, redo
                tau = _largest_tau(mu, self.Lcur) * (1.0 - 1e-12)
                self.tau_cuts += 1
                continue
            # Nesterov's condition broken by a larger L: raise mu (keeps J_mu(W_k) <= D(alpha_k)), redo
            mu = tau * tau * self.Lcur / (1 - tau)
            self.mu_raises += 1
            amu, _ = self._smooth(self._XWk, mu)
            Wmu = self._Wof(amu)
            XWmu = lin(Wmu)
            self.Lcur = 2.0 * self.Lcur     # the retried v-step starts from L / 2: start from L
        self._Wk = (1 - tau) * self._Wk + tau * Wb
        self.k = k + 1
        if self.k % 50 == 0:
            self._XWk = lin(self._Wk)        # drop accumulated round-off
        else:
            self._XWk = (1 - tau) * self._XWk + tau * XWb
        self.alpha, self._Wa = v, Wv
        self._XWa = lin(Wv)
        self.mu = (1 - tau) * mu
        self.iterations += 1
        J, c = self._primal(self._Wk, self._XWk)
        D = self._dual(self.alpha, self._Wa)
        if adaptive:
            self.mu = self._shrink_mu(self._XWk, self._Wk, self.mu, D)
        kk = self.k
        rate = 4.0 * self.Lmax * D2 / ((kk + 1) * (kk + 2))
        self._bias_c = c
        self.last = (J, D, J - D, self.mu * D2, rate)
        self.history.append((kk, J, D, J - D, self.mu * D2, rate))
        self._sync()
        return J - D

    def _shrink_mu(self, XW, W, mu, D=None):
        """The smallest smoothing in [mu / 2^shrink_steps, mu] (a geometric bisection) that keeps
        Nesterov's excessive gap condition J_mu(W_k) <= D(alpha_k); every step of the analysis needs
        only that condition and tau^2 L <= (1 - tau) mu, so a smaller mu is a valid state with a
        smaller bound mu D_2 on the gap (Nesterov, "Excessive gap technique in nonsmooth convex
        minimization", section 3: the invariant, not the schedule, carries the proof)."""
        if self.shrink_steps == 0:
            return mu
        D = self._dual(self.alpha, self._Wa) if D is None else D
        reg = 0.5 * self.lam * float(np.vdot(W, W))
        tol = 1e-12 * (1.0 + abs(D))

        def ok(m):
            return reg + self._smooth(XW, m)[1] <= D - tol

        hi, lo = mu, mu / (2.0 ** self.shrink_steps)
        if ok(lo):
            return lo
        for _ in range(8):                      # geometric bisection on [lo, hi], hi always valid
            mid = math.sqrt(lo * hi)
            if ok(mid):
                hi = mid
            else:
                lo = mid
        return hi

    def _sync(self):
        K = self._K
        if self._chain:
            E, T, B = self._prob.split(self._Wk)
            d = E.shape[0]
            self.W.E[:d, :K] = E
            self.W.T[:K, :K] = T
            self.W.B[:, :K] = B
            return
        d = self._Wk.shape[0]
        self.W.E[:d, :K] = self._Wk
        if self.bias:
            self.b[:] = 0.0
            self.b[1] = 0.5 * self._bias_c
            self.b[0] = -0.5 * self._bias_c

    def excessive_gap(self):
        """(J_mu(W_k), D(alpha_k)) at the current iterate: Nesterov's invariant is J_mu <= D
        (tests). Observes only."""
        _, val = self._smooth(self._XWk, self.mu)
        return 0.5 * self.lam * float(np.vdot(self._Wk, self._Wk)) + val, self._dual(self.alpha, self._Wa)

    def refine(self, passes=1.0, tol=None, progress=None):
        """Up to ``ceil(passes)`` iterations of Algorithm 1 (each O(nd): two products with X and two
        with X'); stops once the certified gap is <= ``tol`` (default: the ``tol`` parameter)."""
        check_number("passes", passes, low=0.0)
        if len(self.held) == 0 or self._K < 2:
            return
        tol = self.tol if tol is None else tol
        n_it = int(math.ceil(passes))
        for it in range(n_it):
            gap = self.iterate()
            if progress is not None:
                progress((it + 1) / n_it, self)
            if gap <= tol:
                break

    # ------------------------------------------------------------------ prediction / certificate
    def decision(self, X):
        """Scores X W + b (n x K) of a CSR matrix with the model's feature ids."""
        K = self._K
        d = X.shape[1]
        return np.asarray(X @ self.W.E[:d, :K]) + self.b[:K]

    def predict(self, ex_tok, tok_ptr, fidx, fval, y_ptr, n_out):
        import scipy.sparse as sp
        out = np.zeros(n_out, dtype=np.int32)
        if self._K == 0:
            return out
        if self._chain:
            return self._predict_chain(ex_tok, tok_ptr, fidx, fval, y_ptr, out)
        d = self.W.E.shape[0]
        fidx = np.asarray(fidx)
        keep = fidx < d
        tp = np.asarray(tok_ptr, dtype=np.int64)
        if not keep.all():
            cnt = np.concatenate([[0], np.cumsum(keep)])
            tp = cnt[tp]
            fidx, fval = fidx[keep], np.asarray(fval)[keep]
        X = sp.csr_matrix((np.asarray(fval, dtype=np.float64), fidx, tp), shape=(len(tp) - 1, d))
        S = self.decision(X)
        rows = np.asarray(ex_tok[:-1], dtype=np.int64)
        lab = np.argmax(S[rows], axis=1).astype(np.int32)
        out[np.asarray(y_ptr[:-1], dtype=np.int64)] = lab
        return out

    def _predict_chain(self, ex_tok, tok_ptr, fidx, fval, y_ptr, out):
        """Viterbi with the weight tables (the BCFW kernels' batch prediction)."""
        from .._kernels import bcfw as KB
        from .._kernels import bundles as KBu
        from ..workspace import Workspace
        W = self.W
        Lm = max(int(np.max(np.diff(ex_tok))) if len(ex_tok) > 1 else 1, 1)
        if getattr(self, "_ws", None) is None:
            self._ws = Workspace(self.structure)
        KB.predict_batch(KBu.model(self.structure, self._K, W.Kc, self._C), W.bundle(), 1.0, W.E, 0.0,
                         KBu.pack(KBu.Batch(ex_tok, tok_ptr, fidx, fval, y_ptr)), out,
                         self._ws.ensure(Lm, W.Kc).scratch(Lm, False))
        return out

    def certificate(self):
        """J(W_k) - D(alpha_k) of the last iteration (valid by weak duality; no computation), with
        Nesterov's bound mu_k D_2 and the paper's 4 L D_2 / ((k+1)(k+2)) in ``extra``."""
        n = len(self.held)
        extra = {"k": self.k, "iterations": self.iterations, "L": self.Lcur, "L_max": self.Lmax,
                 "mu": self.mu, "backtracks": self.backtracks, "mu_raises": self.mu_raises,
                 "tau_cuts": self.tau_cuts, "schedule": self.schedule,
                 "restarts": self.restarts, "bias": self.bias}
        if n == 0 or self._K < 2:
            return Certificate.empty(self.lam, n, exact=False, extra=extra,
                                     note="no examples held (or fewer than two classes)")
        if self.stale or self.last is None:
            why = "the window changed since the last refine" if self.last is not None else "no iteration yet"
            return Certificate(math.inf, math.nan, -math.inf, n, 0, 0.0, False, self.lam,
                               note=f"no certificate: {why}; refine to certify", extra=extra)
        J, D, gap, mub, rate = self.last
        extra.update({"raw_gap": gap, "mu_bound": mub, "bound": rate})
        reg = 0.5 * self.lam * float(np.vdot(self._Wk, self._Wk))
        return Certificate(max(gap, 0.0), J, D, n, 0, 0.0, True, self.lam, regularizer=reg, hinge=J - reg, raw_gap=gap,
                           dual_loss=float(np.vdot(self.alpha, self._Dm)),
                           note="Pragam primal-adjoint gap J(W_k) - D(alpha_k) (weak duality)"
                                + ("; primal minimized over the bias" if self.bias else ""),
                           extra=extra)

    # ------------------------------------------------------------------ state
    def state(self):
        st = {"K": self._K, "C": self._C, "E": self.W.E, "T": self.W.T, "B": self.W.B, "b": self.b,
              "window": self.held.state(),
              "scalars": {"k": self.k, "iterations": self.iterations, "backtracks": self.backtracks,
                          "mu_raises": self.mu_raises, "tau_cuts": self.tau_cuts, "restarts": self.restarts,
                          "Lcur": self.Lcur,
                          "Lmax": self.Lmax, "mu": self.mu, "version": self._version,
                          "prev_seq": getattr(self, "_prev_seq", None), "prev_n": getattr(self, "_prev_n", None),
                          "bias_c": getattr(self, "_bias_c", 0.0)},
              "history": np.asarray(self.history, dtype=np.float64).reshape(-1, 6)}
        if self.alpha is not None:
            st["alpha"] = self.alpha
        if self._chain and getattr(self, "_prev_cptr", None) is not None:
            st["prev_cptr"] = self._prev_cptr
            if self._prev_weighted:          # only then: unweighted files unchanged
                st["prev_weighted"] = True
        if self.mu is not None:
            st.update({"Wk": self._Wk, "Wa": self._Wa})
            if self._chain:
                st["proj_mul"] = np.stack([self._prob.mul_smooth, self._prob.mul_step])
                st["lin_k"] = self._XWk      # updated by combinations between refreshes: kept bit for bit
        return st

    def restore(self, structure, labels, st):
        validate_pragam_state(st, structure)   # every size, index and number checked first
        self.bind(structure, labels)
        self._K = int(st["K"])
        self._C = np.array(st["C"], dtype=np.float64)
        self.W.E, self.W.T, self.W.B = (np.array(st[k], dtype=np.float64) for k in ("E", "T", "B"))
        self.b = np.array(st["b"], dtype=np.float64)
        self.held = Window.from_state(st["window"])
        s = st["scalars"]
        for k in ("k", "iterations", "backtracks", "mu_raises", "restarts"):
            setattr(self, k, int(s[k]))
        self.tau_cuts = int(s.get("tau_cuts", 0))     # absent from states saved before the adaptive schedule
        self.Lcur = None if s["Lcur"] is None else float(s["Lcur"])
        self.Lmax = float(s["Lmax"])
        self._prev_seq = None if s["prev_seq"] is None else int(s["prev_seq"])
        self._prev_n = None if s["prev_n"] is None else int(s["prev_n"])
        self._bias_c = float(s["bias_c"])
        self.history = [tuple(r) for r in np.asarray(st["history"]).reshape(-1, 6)]
        self.alpha = np.array(st["alpha"], dtype=np.float64) if "alpha" in st else None
        if "prev_cptr" in st:
            self._prev_cptr = np.array(st["prev_cptr"], dtype=np.int64)
        self._prev_weighted = bool(st.get("prev_weighted", False))
        if s["mu"] is not None and s["version"] is not None and int(s["version"]) == self.held.version:
            # rebuild the window matrices, then put Algorithm 1's state back exactly
            alpha, Lcur, Lmax, k, restarts = self.alpha, self.Lcur, self.Lmax, self.k, self.restarts
            self._setup()
            self.alpha, self.Lcur, self.Lmax, self.k, self.restarts = alpha, Lcur, Lmax, k, restarts
            self.mu = float(s["mu"])
            self._Wk = np.array(st["Wk"], dtype=np.float64)
            self._Wa = np.array(st["Wa"], dtype=np.float64)
            self._XWk = self._lin(self._Wk)
            self._XWa = self._lin(self._Wa)
            if self._chain:
                self._prob.mul_smooth[...] = st["proj_mul"][0]
                self._prob.mul_step[...] = st["proj_mul"][1]
                self._XWk = np.array(st["lin_k"], dtype=np.float64)
            J, c = self._primal(self._Wk, self._XWk)
            D = self._dual(self.alpha, self._Wa)
            D2 = self._D2
            self._bias_c = c
            self.last = (J, D, J - D, self.mu * D2, 4.0 * self.Lmax * D2 / ((self.k + 1) * (self.k + 2)))
        else:
            self._version = None


def simplex_rows(P, z):
    """Euclidean projection of every row of P onto {a >= 0, sum a = z}, by sorting (Held, Wolfe &
    Crowder, "Validation of subgradient optimization"): with the row sorted decreasingly as s and
    rho the last k with s_k > (s_1 + ... + s_k - z) / k, a = max(P - theta, 0), theta = (s_1 + ... +
    s_rho - z) / rho. Vectorized over the rows, it is ~20x faster than the O(K) median split of
    ``_kernels.projection`` row by row at K = 26 (0.8 ms against 16 ms for 3000 rows), which made
    the projections nearly all of an iteration's time; the O(n) kernel stays for Pragam-b's box
    plus equality."""
    n, K = P.shape
    S = -np.sort(-P, axis=1)
    if np.ndim(z):        # one mass per row
        z = np.asarray(z, dtype=np.float64)[:, None]
    C = np.cumsum(S, axis=1) - z
    ok = S * np.arange(1, K + 1) > C
    rho = K - 1 - np.argmax(ok[:, ::-1], axis=1)
    theta = C[np.arange(n), rho] / (rho + 1)
    return np.maximum(P - theta[:, None], 0.0)


def _largest_tau(mu, L):
    """The largest tau in (0, 1) with tau^2 L <= (1 - tau) mu (Nesterov's step condition), in the
    cancellation-free form 2 mu / (mu + sqrt(mu^2 + 4 L mu))."""
    return min(2.0 * mu / (mu + math.sqrt(mu * mu + 4.0 * L * mu)), 1.0 - 1e-12)


def _finite_float(a, shape, what):
    a = np.asarray(a)
    if a.shape != shape or (a.size and a.dtype.kind != "f") or not np.isfinite(a).all():
        _fail(f"{what} must be a finite float array of shape {shape}, got {a.dtype} {a.shape}")


def validate_pragam_state(st, structure):
    """Check a saved Pragam state whole before anything is built from it: the weights
    (:func:`~streamssvm.saved_state.validate_weights`), the bias, the held window
    (:func:`~streamssvm.saved_state.validate_window`), Algorithm 1's dual point and iterates
    against the window and the labels, the scalars and the history. Raises ``CheckpointError``."""
    d, Kc, K = validate_weights(st)
    b = np.asarray(st["b"])
    if b.ndim != 1 or b.shape[0] < K:
        _fail(f"the bias must have at least {K} entries, got {b.shape}")
    _finite_float(b, b.shape, "the bias")
    validate_window(st["window"], structure, d, Kc, K)
    rows = unpack_rows(st["window"]["items"], "held window")
    n = len(rows)
    chain = structure.kind == so.CHAIN
    s = st["scalars"]
    big = (-1e300, 1e300, "float?")
    validate_scalars(s, {**{k: (0, 1 << 62, "int") for k in ("k", "iterations", "backtracks", "mu_raises",
                                                            "restarts", "tau_cuts")},
                         "Lcur": (0.0, 1e300, "float?"), "Lmax": (0.0, 1e300, "float"), "mu": (0.0, 1e300, "float?"),
                         "version": (0, 1 << 62, "int?"), "prev_seq": (0, 1 << 62, "int?"),
                         "prev_n": (1, 1 << 40, "int?"), "bias_c": big}, "scalars")
    if "prev_cptr" in st:
        pc = np.asarray(st["prev_cptr"])
        if pc.ndim != 1 or pc.size < 1 or pc.dtype.kind not in "iu" or pc[0] != 0 or (np.diff(pc) < 1).any():
            _fail("prev_cptr must be the increasing clique offsets of the previous window")
        if "alpha" in st and np.shape(st["alpha"])[0] != int(pc[-1]):
            _fail(f"the dual point must have {int(pc[-1])} cliques (prev_cptr), got {np.shape(st['alpha'])}")
    if "alpha" in st:
        a = np.asarray(st["alpha"])
        if a.ndim != (3 if chain else 2):
            _fail(f"the dual point must be a {3 if chain else 2}-D array, got {a.shape}")
        _finite_float(a, a.shape, "the dual point")
    if s.get("mu") is not None and s.get("version") is not None and int(s["version"]) == int(st["window"]["version"]):
        if chain:
            nc = sum(max(len(r["tok_ptr"]) - 2, 1) for r in rows)
            shape, wshape = (nc, K, K), (d * K + K * K + 2 * K,)
        else:
            shape, wshape = (n, K), (d, K)
        if "alpha" not in st or np.shape(st["alpha"]) != shape:
            _fail(f"the dual point must be {shape} (window x labels)")
        _finite_float(st["Wk"], wshape, "Wk")
        _finite_float(st["Wa"], wshape, "Wa")
        if chain:
            _finite_float(st.get("proj_mul", np.zeros(0)), (2, shape[0], K), "the projection's multipliers")
            _finite_float(st.get("lin_k", np.zeros(0)), shape, "the clique scores of W_k")
    h = np.asarray(st["history"])
    if h.dtype.kind not in "fiu" and h.size or h.size % 6:
        _fail("the history must be rows of 6 numbers")

