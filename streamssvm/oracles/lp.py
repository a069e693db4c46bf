"""LP relaxation of the pairwise multi-label MRF: the lambda-oracle and the constrained
lambda-oracle O_c (Choi, Meshi & Srebro, Fast and Scalable Structural SVM with Slack Rescaling, AISTATS 2016, eq. 12) on the local polytope, solved with scipy's HiGHS.

One example of the fully connected binary MRF over K labels has unary scores ``s_k`` and
pairwise weights ``P_kl`` (k < l); a labeling y in {0, 1}^K scores
``f(y) = sum_k s_k y_k + sum_{k<l} P_kl y_k y_l``. With the ground truth y* (score ``f*``) and the
normalized Hamming loss (``Ki`` = labels known when the example arrived)

    h(y) = 1 + f(y) - f*,        g(y) = Delta(y*, y) = |{k : y_k != y*_k}| / Ki.

Both are linear in the local-polytope variables: node marginals ``mu_k in [0, 1]`` and edge
marginals ``mu_kl`` with the standard linearization ``mu_kl <= mu_k``, ``mu_kl <= mu_l``,
``mu_kl >= mu_k + mu_l - 1``, ``mu_kl >= 0`` (edges with ``P_kl = 0`` are left out: they do not
enter h, g or the objective). Integral points of the polytope are exactly the labelings, so

* the lambda-oracle LP ``max h + lam g`` upper-bounds the integer maximum: its value ``K_LP(lam)``
  gives a valid (looser) Lemma-5 certificate ``max Phi <= K_LP(lam)^2 / (4 lam)``;
* the constrained oracle adds the two linear constraints of the angle, ``g <= hi h`` and
  ``g >= lo h``, and ``h > 0`` (paper: "the additional constraints are simply added to the LP").

Strict inequalities. An LP has only closed constraints, so boundary rays get a margin ``m``
(default 1e-6, above HiGHS's 1e-7 feasibility tolerance), measured as Euclidean distance from the
ray's line in the (h, g) plane: an *open* ray admits only points at distance >= m inside, a
*closed* ray also admits points up to m outside. A point within m of a ray therefore belongs to
the angle that holds the ray closed: the label on an open ray (already found by the search) is
not returned again, and the two children sharing a ray still cover every point between them.
``h > 0`` becomes ``h >= m`` (the labels dropped have Phi < m * max g). The open root boundary
``g > 0`` is written exactly as ``g >= 1 / Ki`` (integral losses are multiples of 1/Ki), a valid
cut. The returned labeling's own (h, g) is checked against the exact open / closed conditions
and reported in ``in_angle``.

Fractional solutions. Paper 000 (section 5) solves the LP relaxation and treats fractional
solutions as additional labels ("the number of labels becomes even larger (adds fractional
solutions)"); it does not round. The engine's labels, losses and updates are integral, so here
every call returns

* an integral labeling with its true (h, g): the LP solution itself when it is integral (then it
  is the exact integer argmax), otherwise the best of the roundings of the node marginals at
  1/2 (ties to 0, to 1, to the truth) each followed by greedy single-flip ascent on h + lam g;
* the LP optimum as a point (``h_lp``, ``g_lp``) and its value ``h_lp + lam g_lp``, a certified
  upper bound on ``max h + lam g`` over the labelings in the (closed-up) feasible region.

The searches of :mod:`streamssvm.oracles.slack` split angles at the LP point, which is the
paper's geometry on the relaxed label set (fractional points are labels there), so their
bounds stay valid for the integral labelings, and record Phi of the integral labeling.
``learners.SGD(relaxed=True)`` follows the paper all the way: the searches run over the LP points
themselves and the step uses the relaxed labeling's marginals (:meth:`PairwiseMRFLP.pair_marginals`).

A limit worth knowing: the (h, g) image of the local polytope is convex, so an O_c LP can never
return a labeling strictly inside the convex hull of the others (paper Theorem 1's hidden label):
over LP oracles, angular search loses the constrained oracle's edge over lambda-oracle searches
for such labels (it finds them only when a rounding happens to hit them).

Examples
--------
>>> import numpy as np
>>> from streamssvm.oracles.lp import PairwiseMRFLP
>>> s = np.array([1.0, -2.0, 0.5]); P = np.zeros((3, 3)); P[0, 2] = 1.0
>>> lp = PairwiseMRFLP(s, P, truth=np.array([0, 0, 0]), Ki=3)
>>> r = lp.oracle(0.0)                     # MAP: labels 0 and 2 on (score 2.5)
>>> r.labeling.tolist(), round(r.h, 6), r.integral
([1, 0, 1], 3.5, True)
>>> r = lp.oracle_c(1.0, hi=0.5, lo=0.1, hi_closed=True, lo_closed=True)
>>> r.labeling.tolist(), bool(r.in_angle), bool(r.g <= 0.5 * r.h)
([1, 0, 1], True, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import linprog


@dataclass
class LPSolution:
    """One oracle answer: an integral labeling with its true (h, g) and the LP optimum."""
    labeling: np.ndarray      # int32 0/1 vector of length K
    h: float                  # true h of the labeling
    g: float                  # true g (normalized Hamming loss) of the labeling
    h_lp: float               # h at the LP optimum (possibly fractional)
    g_lp: float               # g at the LP optimum
    value: float              # h_lp + lam * g_lp >= max over feasible labelings of h + lam g
    integral: bool            # the LP optimum was integral (and inside the angle): labeling is the exact argmax
    in_angle: bool = True     # the labeling satisfies the (exact, strict/closed) angle conditions
    mu: np.ndarray | None = None  # node marginals of the LP optimum
    x: np.ndarray | None = None   # the full LP optimum (node, then edge marginals)

    def search_tuple(self):
        """``(label, h, g, h_lp, g_lp)`` as consumed by :mod:`streamssvm.oracles.slack`."""
        return (tuple(int(v) for v in self.labeling), self.h, self.g, self.h_lp, self.g_lp)


class PairwiseMRFLP:
    """Local-polytope LP of one example of the pairwise multi-label MRF.

    Parameters
    ----------
    unary
        ``s_k`` (length K), scores already scaled by the weight scale.
    pairwise
        (K, K) array; the upper triangle ``P[k, l]`` (k < l) is the co-occurrence weight.
    truth
        Dense 0/1 ground truth of length K.
    Ki
        Loss normalizer (number of labels known when the example arrived), > 0.
    margin
        Margin used for open boundaries and for ``h > 0`` (see the module docstring).
    """

    def __init__(self, unary, pairwise, truth, Ki, margin=1e-6):
        s = np.asarray(unary, dtype=np.float64).ravel()
        K = s.shape[0]
        P = np.asarray(pairwise, dtype=np.float64)
        y = np.asarray(truth).ravel().astype(np.int32)
        if P.shape != (K, K):
            raise ValueError(f"pairwise must be a ({K}, {K}) array, got shape {P.shape}")
        if y.shape[0] != K or np.any((y != 0) & (y != 1)):
            raise ValueError(f"truth must be a 0/1 vector of length {K}")
        if not Ki > 0:
            raise ValueError(f"Ki must be > 0, got {Ki!r}")
        if not (np.all(np.isfinite(s)) and np.all(np.isfinite(np.triu(P, 1)))):
            raise ValueError("scores must be finite")
        if not margin > 0:
            raise ValueError(f"margin must be > 0, got {margin!r}")
        self.K, self.Ki, self.margin = K, float(Ki), float(margin)
        self.s, self.y = s, y
        iu, ju = np.triu_indices(K, 1)
        keep = P[iu, ju] != 0.0
        self.ei, self.ej = iu[keep].astype(np.int64), ju[keep].astype(np.int64)
        self.pw = P[iu, ju][keep]
        E = self.ei.shape[0]
        self.n = K + E
        Psym = np.zeros((K, K))
        Psym[self.ei, self.ej] = self.pw
        self.Psym = Psym + Psym.T
        # h(x) = h0 + ch . x ; g(x) = g0 + cg . x
        self.f_truth = float(s @ y + 0.5 * y @ self.Psym @ y)
        self.h0 = 1.0 - self.f_truth
        self.ch = np.concatenate([s, self.pw])
        a = np.where(y == 1, -1.0, 1.0) / self.Ki
        self.g0 = float(y.sum()) / self.Ki
        self.cg = np.concatenate([a, np.zeros(E)])
        e = np.arange(E)
        cols = np.empty((E, 7), dtype=np.int64)
        vals = np.empty((E, 7))
        cols[:, 0], cols[:, 1] = K + e, self.ei          # mu_kl - mu_k <= 0
        cols[:, 2], cols[:, 3] = K + e, self.ej          # mu_kl - mu_l <= 0
        cols[:, 4], cols[:, 5], cols[:, 6] = self.ei, self.ej, K + e   # mu_k + mu_l - mu_kl <= 1
        vals[:] = [1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0]
        rows = np.column_stack([3 * e, 3 * e, 3 * e + 1, 3 * e + 1, 3 * e + 2, 3 * e + 2, 3 * e + 2]).ravel()
        self.A = sparse.csr_matrix((vals.ravel(), (rows, cols.ravel())), shape=(3 * E, self.n))
        self.b = np.tile([0.0, 0.0, 1.0], E)
        # the lambda-oracle alone never needs mu_kl >= mu_k + mu_l - 1 on an attractive edge
        # (P > 0: the optimum pushes mu_kl up to min(mu_k, mu_l)) nor mu_kl <= mu_k, mu_l on a
        # repulsive one (the optimum pushes it down to max(0, mu_k + mu_l - 1)): same optimum,
        # smaller LP. The constrained oracle keeps all rows (its angle rows involve mu_kl).
        att = self.pw > 0
        keep = np.ones(3 * E, dtype=bool)
        keep[3 * e[att] + 2] = False
        keep[3 * e[~att]] = False
        keep[3 * e[~att] + 1] = False
        self.A_red, self.b_red = self.A[keep], self.b[keep]
        self.calls = 0
        self.integral_calls = 0

    # ------------------------------------------------------------------ labelings
    def score(self, lab):
        lab = np.asarray(lab, dtype=np.float64)
        return float(self.s @ lab + 0.5 * lab @ self.Psym @ lab)

    def hg(self, lab):
        """True (h, g) of an integral labeling."""
        lab = np.asarray(lab)
        return 1.0 + self.score(lab) - self.f_truth, float(np.sum(lab != self.y)) / self.Ki

    def _point(self, x):
        return float(self.h0 + self.ch @ x), float(self.g0 + self.cg @ x)

    def pair_marginals(self, sol):
        """(K, K) upper-triangular edge marginals of a solution (the relaxed labeling's pairwise
        statistic): LP values on the edges in the LP, mu_k mu_l on the zero-weight edges left out
        (any value consistent with the node marginals; equal to y_k y_l when integral)."""
        mu = sol.mu
        M = np.triu(np.outer(mu, mu), 1)
        M[self.ei, self.ej] = sol.x[self.K:]
        return M

    # ------------------------------------------------------------------ LP
    def _solve(self, lam, extra_rows=(), extra_b=()):
        c = -(self.ch + lam * self.cg)
        if len(extra_rows):
            A = sparse.vstack([self.A, sparse.csr_matrix(np.asarray(extra_rows))], format="csr")
            b = np.concatenate([self.b, np.asarray(extra_b, dtype=np.float64)])
        else:
            A, b = self.A_red, self.b_red
        if A.shape[0] == 0:
            A, b = None, None
        res = linprog(c, A_ub=A, b_ub=b, bounds=(0.0, 1.0), method="highs", options={"presolve": False})
        self.calls += 1
        if res.status == 2:
            return None
        if res.status != 0:
            raise RuntimeError(f"HiGHS failed on the MRF LP relaxation: {res.message}")
        return np.clip(res.x, 0.0, 1.0)

    def _in_angle(self, h, g, hi, lo, hi_closed, lo_closed):
        if h <= 0.0:
            return False
        d = g / h
        if hi != math.inf and (d > hi or (d == hi and not hi_closed)):
            return False
        if d < lo or (d == lo and not lo_closed):
            return False
        return True

    def _finish(self, x, lam, angle=None):
        mu = x[: self.K]
        h_lp, g_lp = self._point(x)
        value = h_lp + lam * g_lp
        # integral: 0/1 up to 1e-9 (HiGHS vertices are exact to ~1e-12; a looser tolerance would
        # let the LP slip past a margin by tiny fractions) and, under an angle, exactly inside it
        lab = np.round(mu).astype(np.int32)
        integral = not np.any(np.abs(mu - lab) > 1e-9)
        if integral and angle is not None:
            integral = self._in_angle(*self.hg(lab), *angle)
        if integral:
            self.integral_calls += 1
        else:
            lab = self._round(mu, lam, angle)
        h, g = self.hg(lab)
        ok = True if angle is None else self._in_angle(h, g, *angle)
        return LPSolution(lab, h, g, h_lp, g_lp, value, integral, ok, mu.copy(), x.copy())

    def _round(self, mu, lam, angle):
        """Best rounding of fractional node marginals (at 1/2; ties to 0, 1, the truth), each
        improved by greedy single flips on h + lam g (flips that stay inside the angle, when the
        rounding is inside); among candidates inside the angle when any."""
        cands = []
        for tie in (0, 1, 2):
            lab = (mu > 0.5 + 1e-9).astype(np.int32)
            half = np.abs(mu - 0.5) <= 1e-9
            lab[half] = tie if tie < 2 else self.y[half]
            cands.append(lab.copy())
            cands.append(self._ascend(lab, lam, angle))
        best, bkey = None, None
        for lab in cands:
            h, g = self.hg(lab)
            inside = angle is None or self._in_angle(h, g, *angle)
            key = (inside, h + lam * g)
            if bkey is None or key > bkey:
                best, bkey = lab, key
        return best

    def _ascend(self, lab, lam, angle=None, max_flips=None):
        """Greedy single flips on h + lam g; with an angle, only flips that keep a labeling
        inside it (when it starts inside)."""
        lab = lab.copy()
        fld = self.s + self.Psym @ lab          # score change of switching a label on
        h, g = self.hg(lab)
        keep_in = angle is not None and self._in_angle(h, g, *angle)
        for _ in range(max_flips or 4 * self.K):
            dh = np.where(lab == 0, fld, -fld)
            dg = np.where(lab == self.y, 1.0, -1.0) / self.Ki
            gain = dh + lam * dg
            if keep_in:
                hi, lo, hi_c, lo_c = angle
                hn, gn = h + dh, g + dg
                with np.errstate(divide="ignore", invalid="ignore"):
                    d = np.where(hn > 0, gn / hn, -1.0)
                ok = (hn > 0) & ((d < hi) | ((d == hi) & hi_c)) & ((d > lo) | ((d == lo) & lo_c))
                gain = np.where(ok, gain, -np.inf)
            k = int(np.argmax(gain))
            if gain[k] <= 1e-12:
                break
            sgn = 1.0 if lab[k] == 0 else -1.0
            h, g = h + dh[k], g + dg[k]
            lab[k] = 1 - lab[k]
            fld += sgn * self.Psym[:, k]
        return lab

    # ------------------------------------------------------------------ oracles
    def oracle(self, lam):
        """lambda-oracle: argmax_y h(y) + lam g(y) over the local polytope (lam >= 0)."""
        if not lam >= 0:
            raise ValueError(f"lam must be >= 0, got {lam!r}")
        return self._finish(self._solve(lam), lam)

    def oracle_c(self, lam, hi, lo, hi_closed=False, lo_closed=True):
        """Constrained lambda-oracle O_c (paper eq. 12): argmax h + lam g over points with
        h > 0 and slope g / h between ``lo`` and ``hi`` (``hi`` may be inf; the flags say which
        boundary rays belong to the angle). ``None`` when the LP is infeasible (then no labeling
        lies in the angle)."""
        if not (0.0 <= lo <= hi):
            raise ValueError(f"need 0 <= lo <= hi, got lo={lo!r}, hi={hi!r}")
        rows, b = [], []
        m = self.margin
        rows.append(-self.ch)                       # h >= margin
        b.append(self.h0 - m)
        if hi != math.inf:                          # g - hi h <= -m_hi
            rows.append(self.cg - hi * self.ch)
            b.append(hi * self.h0 - self.g0 + (1.0 if hi_closed else -1.0) * m * math.hypot(1.0, hi))
        if lo > 0.0:                                # lo h - g <= -m_lo
            rows.append(lo * self.ch - self.cg)
            b.append(self.g0 - lo * self.h0 + (1.0 if lo_closed else -1.0) * m * math.hypot(1.0, lo))
        elif not lo_closed:                         # g > 0  <=>  g >= 1/Ki on labelings
            rows.append(-self.cg)
            b.append(self.g0 - 1.0 / self.Ki)
        x = self._solve(lam, rows, b)
        if x is None:
            return None
        return self._finish(x, lam, (hi, lo, hi_closed, lo_closed))

    def search_oracles(self):
        """``(oracle(lam), oracle_c(lam, hi, lo, hi_closed, lo_closed))`` returning the tuples
        ``(label, h, g, h_lp, g_lp)`` the searches consume (label = tuple of 0/1)."""
        def o(lam):
            return self.oracle(lam).search_tuple()

        def oc(lam, hi, lo, hi_closed, lo_closed):
            r = self.oracle_c(lam, hi, lo, hi_closed, lo_closed)
            return None if r is None else r.search_tuple()
        return o, oc
