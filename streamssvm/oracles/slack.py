"""Searches for the most violating label under slack rescaling (Choi, Meshi & Srebro, Fast and
scalable structural SVM with slack rescaling, AISTATS 2016).

Every labeling y is a point (h(y), g(y)) with h = 1 + f(y) - f(y_i) and g = Delta(y_i, y); slack
rescaling maximizes Phi = h * g, which does not decompose even when h and g do. The searches
reach labels only through oracles on the structure:

* the lambda-oracle ``oracle(lam) -> (label, h, g)``: argmax_y h(y) + lam * g(y) (loss-augmented
  inference with the loss scaled by lam);
* the constrained lambda-oracle ``oracle_c(lam, hi, lo, hi_closed, lo_closed) -> (label, h, g)
  | None``: the same argmax restricted to labels with h > 0 whose slope g / h lies between lo
  and hi (paper eq. 12; the boundary flags say which rays belong to the angle).

An oracle may also return ``(label, h, g, h_lp, g_lp)``: an integral label with its true
(h, g) and the optimum of a relaxation it solved (:mod:`streamssvm.oracles.lp`), a point whose
h_lp + lam g_lp upper-bounds the exact oracle value. The searches then bound and split with the
relaxed point (the paper's geometry on the relaxed label set, valid for the labels it contains)
and keep the best label by its true Phi.

Each search returns a :class:`SearchResult`: the best label found, its Phi, a certified upper
bound on max Phi (paper Lemma 5: every lambda-oracle value K gives max Phi <= K^2 / (4 lam)),
and the number of oracle calls.

* :func:`angular_search` — Algorithm 2 with the corrections of the notes (A.2.4): a tangent
  point closes its angle instead of ending the search, the shared ray is closed in exactly one
  child, the Lemma-5 bound prunes and certifies, FIFO (the order of Theorem 4) or
  priority order; exact within 2M + 1 queries for M labels.
* :func:`bisecting_search` — Algorithm 1 with a real termination rule (as printed it never
  stops): width tolerances on the lambda interval, same label at both ends, and a query budget.
* :func:`binary_search` — minimizes the Lemma-1 bound F(lam) over a bracket (geometric
  midpoints), stopping on the certificate or when both ends return the same label.
* :func:`sarawagi_gupta_search` — Sarawagi & Gupta (2008) as Choi et al. (section 3) describe it:
  given the current slack xi_i of the cutting-plane working set, maximize h(y) - xi_i / g(y)
  (eq. 14) through its convex bound min_lam F(lam), F(lam) = max_y h + lam g - 2 sqrt(xi_i lam)
  (eq. 15), by golden-section search over lam. Tied to xi_i, so to cutting plane.

:func:`run_search` dispatches on a search's name (the learners' ``search=`` option) and
:func:`search_example` runs one on the oracles of an example with the usual starting point.

Neither lambda-oracle search can find labels strictly inside the convex hull of the others
(Theorem 1); angular search can, through the constrained oracle.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field


@dataclass
class SearchResult:
    label: object
    phi: float
    upper_bound: float
    queries: int
    certified: bool = False          # phi >= tol * upper_bound
    history: list = field(default_factory=list)

    @property
    def ratio(self):
        if self.upper_bound <= 0:
            return 1.0
        return self.phi / self.upper_bound


def _phi(h, g):
    return h * g if h > 0 else 0.0


def _unpack(res):
    """(label, h, g, h_split, g_split, Phi(label)) from a 3- or 5-tuple oracle answer."""
    if len(res) == 5:
        label, h, g, hz, gz = res
        return label, h, g, hz, gz, _phi(h, g)
    label, h, g = res
    return label, h, g, h, g, _phi(h, g)


def angular_search(oracle_c, lam0=1.0, max_queries=1000, tol=0.999, order="fifo", floor=0.0,
                   truth=None):
    """Angular search (corrected Algorithm 2).

    Parameters
    ----------
    oracle_c
        Constrained lambda-oracle (see module docstring).
    lam0
        Weight of the first (root) query; the paper suggests H/G (max h over max loss).
    max_queries
        Query budget.
    tol
        Stop once Phi(best) >= tol * (largest upper bound among open angles).
    order
        ``"fifo"`` (breadth first, Theorem 4's order) or ``"priority"`` (largest bound first).
    floor, truth
        Phi of a label already known (e.g. from a label cache) and that label; regions whose
        bound does not exceed it are never queried.
    """
    if order not in ("fifo", "priority"):
        raise ValueError(f"order must be 'fifo' or 'priority', got {order!r}")
    best_label, best_phi = truth, float(floor)
    INF = math.inf
    root = (INF, 0.0, True, False, INF)  # hi, lo, hi_closed, lo_closed, upper bound
    queue = deque([root]) if order == "fifo" else [(-INF, 0, root)]
    counter = 1
    queries = 0
    ub_global = INF
    relaxed_phi = 0.0

    def open_bound():
        if order == "fifo":
            return max((a[4] for a in queue), default=0.0)
        return max((a[2][4] for a in queue), default=0.0)

    while queue:
        if queries >= max_queries:
            break
        bound_now = open_bound()
        if bound_now <= best_phi or (bound_now < INF and best_phi >= tol * bound_now):
            break
        angle = queue.popleft() if order == "fifo" else heapq.heappop(queue)[2]
        hi, lo, hi_c, lo_c, ub = angle
        if ub <= best_phi:
            continue
        # the root is queried at lam0; every other angle is bounded (0 < lo <= hi < inf)
        lam = lam0 if hi == INF else 1.0 / math.sqrt(hi * lo)
        res = oracle_c(lam, hi, lo, hi_c, lo_c)
        queries += 1
        if res is None:
            continue
        label, _, _, h, g, lab_phi = _unpack(res)   # (h, g): the point to bound and split with
        K = h + lam * g
        bound = K * K / (4.0 * lam) if lam > 0 else INF
        if hi == INF and lo == 0.0:
            ub_global = bound
        if lab_phi > best_phi:
            best_label, best_phi = label, lab_phi
        # a relaxed point's Phi bounds the labels of the parts of this angle closed below
        relaxed_phi = max(relaxed_phi, _phi(h, g))
        if h <= 0 or g <= 0:
            continue
        zp = (lam * g, h / lam)
        if abs(h - zp[0]) <= 1e-12 * max(1.0, abs(h)):
            continue  # tangent: z is optimal within this angle; close it (do not stop)
        dz = g / h
        dzp = zp[1] / zp[0]
        dr = 1.0 / lam
        dP, dQ = (dz, dzp) if dz > dzp else (dzp, dz)
        # children: (d(P) open, d(r) closed) and (d(r) open, d(Q) open); clip to the parent
        kids = [(min(dP, hi), max(dr, lo), False, True, bound), (min(dr, hi), max(dQ, lo), False, False, bound)]
        for kid in kids:
            if kid[0] < kid[1] or (kid[0] == kid[1] and not (kid[2] and kid[3])):
                continue  # empty angle
            if kid[4] <= best_phi:
                continue
            if order == "fifo":
                queue.append(kid)
            else:
                heapq.heappush(queue, (-kid[4], counter, kid))
                counter += 1
    # every label lies in an explored angle (Phi <= best, or <= the Phi of a relaxed point the
    # oracle returned), a pruned one (bound <= best) or an open one (Phi <= its bound); the root
    # query's bound holds globally
    ub = max(best_phi, min(ub_global, max(open_bound(), relaxed_phi)) if queue else relaxed_phi)
    return SearchResult(best_label, best_phi, ub, queries, certified=best_phi >= tol * ub)


def binary_search(oracle, lam_lo=1e-3, lam_hi=1e3, max_queries=30, tol=0.999, truth=None):
    """Binary search on the Lemma-1 bound F(lam) with geometric midpoints."""
    if not 0 < lam_lo < lam_hi:
        raise ValueError("need 0 < lam_lo < lam_hi")
    best_label, best_phi, ub, q = truth, 0.0, math.inf, 0
    seen = {}
    lo, hi = lam_lo, lam_hi
    while q < max_queries:
        lam = math.sqrt(lo * hi)
        label, _, _, h, g, ph = _unpack(oracle(lam))
        q += 1
        ub = min(ub, (h + lam * g) ** 2 / (4 * lam))
        if ph > best_phi:
            best_label, best_phi = label, ph
        seen[lam] = label
        if best_phi >= tol * ub:
            break
        if lam * g > h:
            hi = lam
        else:
            lo = lam
        if hi / lo < 1.0 + 1e-9:
            break
        # same label at both ends of the bracket: nothing new in between (Lemma 4)
        if lo in seen and hi in seen and seen[lo] == seen[hi]:
            break
    return SearchResult(best_label, best_phi, max(ub, best_phi), q, certified=best_phi >= tol * ub)


def bisecting_search(oracle, lam0=1.0, max_queries=30, tol=0.999, rel_width=1e-6, truth=None):
    """Bisecting search (Algorithm 1) with a termination rule: the h- and g-intervals of
    Lemma 3, a lambda interval bounded by doubling / halving, and stops on the certificate,
    on a lambda interval narrower than ``rel_width``, on the same label at both ends, or on
    the budget (as printed the loop never ends: the intervals always contain the optimum)."""
    best_label, best_phi, ub, q = truth, 0.0, math.inf, 0
    H = [0.0, math.inf]
    G = [0.0, math.inf]
    lo, hi = 0.0, math.inf
    lam = lam0
    ends = {}
    while q < max_queries:
        label, _, _, h, g, ph = _unpack(oracle(lam))
        q += 1
        ub = min(ub, (h + lam * g) ** 2 / (4 * lam))
        if ph > best_phi:
            best_label, best_phi = label, ph
        if best_phi >= tol * ub:
            break
        u = sorted((h, lam * g))
        v = sorted((g, h / lam))
        H = [max(H[0], u[0]), min(H[1], u[1])]
        G = [max(G[0], v[0]), min(G[1], v[1])]
        if H[0] > H[1] or G[0] > G[1]:
            break
        if g <= h / lam:
            lo = lam
            ends["lo"] = label
        else:
            hi = lam
            ends["hi"] = label
        if "lo" in ends and "hi" in ends and ends["lo"] == ends["hi"]:
            break
        if hi == math.inf:
            lam = lam * 2.0
        elif lo == 0.0:
            lam = lam / 2.0
        else:
            if hi - lo <= rel_width * hi:
                break
            lam = 0.5 * (lo + hi)
    return SearchResult(best_label, best_phi, max(ub, best_phi), q, certified=best_phi >= tol * ub)


_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def sarawagi_gupta_search(oracle, xi, lam_hi, max_queries=100, rel_tol=1e-9, tol=0.999):
    """Sarawagi & Gupta's search (Choi et al. 2016, eqs. 13-15), for cutting plane.

    With the current slack ``xi`` of the example's working set, a label violates its
    slack-rescaled constraint iff h(y) - xi / g(y) > 0 (eq. 13-14, over y with h > 0, g > 0).
    Since lam g + xi / g >= 2 sqrt(xi lam) for every lam >= 0,

        max_y h(y) - xi / g(y)  <=  min_{lam >= 0} F(lam),   F(lam) = K(lam) - 2 sqrt(xi lam)

    with K(lam) = max_y h(y) + lam g(y) the lambda-oracle value; F is convex and is minimized by
    golden-section search over [0, lam_hi] (the minimizer of each label's term is xi / g^2, so
    ``lam_hi = xi / g_min^2`` brackets every label's optimum). Every oracle answer y with
    h > 0, g > 0 is a candidate; the search returns the candidate maximizing eq. (14) (their
    objective, not Phi = h g), with its Phi.

    Bounds: every query at lam > 0 also gives Choi et al.'s Lemma-5 bound max Phi <= K^2 / (4 lam)
    (valid for any lambda-oracle answer), reported as ``upper_bound``; ``certified`` is
    Phi(label) >= tol * upper_bound. The eq.-(15) bound min F on eq. (14) is in
    ``history[-1]["min_F"]`` (min F < 0 certifies that no label violates by more than xi).
    Like every lambda-oracle search it cannot return labels inside the convex hull of the
    others (Choi et al. 2016, Theorem 1).

    Stops when the bracket is narrower than ``rel_tol * lam_hi`` or after ``max_queries``.

    Examples
    --------
    >>> o, _ = point_oracles([(2.0, 0.5), (1.2, 1.0), (0.1, 2.0)])
    >>> r = sarawagi_gupta_search(o, xi=0.5, lam_hi=2.0)
    >>> r.label, round(r.phi, 6), r.upper_bound >= 1.2   # eq. (14) picks 2 - 0.5/0.5 = 1 > 1.2 - 0.5
    (0, 1.0, True)
    """
    if not lam_hi > 0:
        raise ValueError(f"lam_hi must be > 0, got {lam_hi!r}")
    if xi < 0:
        raise ValueError(f"xi must be >= 0, got {xi!r}")
    best_label, best_obj, best_phi = None, -math.inf, 0.0
    ub = math.inf
    q = 0
    min_F = math.inf
    seen = {}

    def F(lam):
        nonlocal best_label, best_obj, best_phi, ub, q, min_F
        label, h, g = oracle(lam)
        q += 1
        K = h + lam * g
        if lam > 0:
            ub = min(ub, K * K / (4.0 * lam))
        val = K - 2.0 * math.sqrt(xi * lam)
        min_F = min(min_F, val)
        if h > 0 and g > 0:
            obj = h - xi / g
            if obj > best_obj:
                best_label, best_obj, best_phi = label, obj, h * g
        seen[lam] = label
        return val

    a, b = 0.0, float(lam_hi)
    c = b - _GOLDEN * (b - a)
    d = a + _GOLDEN * (b - a)
    fc, fd = F(c), F(d)
    while q < max_queries and (b - a) > rel_tol * lam_hi:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - _GOLDEN * (b - a)
            fc = F(c)
        else:
            a, c, fc = c, d, fd
            d = a + _GOLDEN * (b - a)
            fd = F(d)
    ub = max(ub, best_phi)
    return SearchResult(best_label, best_phi, ub, q, certified=best_phi >= tol * ub,
                        history=[{"min_F": min_F, "best_objective": best_obj, "bracket": (a, b)}])


# ----------------------------------------------------------------------------- dispatch
SEARCHES = ("angular", "bisecting", "binary", "sarawagi")


def run_search(name, oracle=None, oracle_c=None, *, lam0=1.0, max_queries=20, tol=0.999, xi=None,
               lam_hi=None):
    """The one slack-search dispatcher: run search ``name`` over the given oracles.

    ``angular`` needs the constrained oracle ``oracle_c``; ``bisecting`` and ``binary`` the
    lambda-oracle ``oracle`` (binary brackets [1e-3 lam0, 1e3 lam0]); ``sarawagi`` the
    lambda-oracle, the slack ``xi`` and the bracket end ``lam_hi``.

    Label 1 (Phi = 1.2) lies inside the convex hull of the others: only angular search, through
    the constrained oracle, finds it (Choi et al. 2016, Theorem 1).

    >>> o, oc = point_oracles([(2.0, 0.5), (1.2, 1.0), (0.1, 2.0)])
    >>> [run_search(n, o, oc, lam0=1.0, xi=0.5, lam_hi=2.0).label for n in SEARCHES]
    [1, 0, 0, 0]
    """
    if name == "angular":
        return angular_search(oracle_c, lam0=lam0, max_queries=max_queries, tol=tol)
    if name == "bisecting":
        return bisecting_search(oracle, lam0=lam0, max_queries=max_queries, tol=tol)
    if name == "binary":
        return binary_search(oracle, 1e-3 * lam0, 1e3 * lam0, max_queries=max_queries, tol=tol)
    if name == "sarawagi":
        if xi is None or lam_hi is None:
            raise ValueError("sarawagi search needs the working-set slack xi and lam_hi")
        return sarawagi_gupta_search(oracle, xi, lam_hi, max_queries=max_queries, tol=tol)
    raise ValueError(f"search must be one of {SEARCHES}, got {name!r}")


def search_example(name, o, max_queries, tol, xi=None, eps=0.0):
    """Run search ``name`` on the prepared oracles ``o`` of one example
    (:class:`streamssvm.oracles.structured.ExampleOracles`), with Choi, Meshi & Srebro's
    starting point lam0 = H-hat / G-hat (Fast and scalable structural SVM with slack
    rescaling, AISTATS 2016, section 4.5): for angular search from the level points, for the
    lambda-oracle searches from one MAP query (counted in the budget, and kept as a candidate).
    ``xi`` / ``eps``: the working-set slack and violation margin (``sarawagi`` only)."""
    if name == "angular":
        hs, gs = o.levels()
        hmax = max(float(hs.max()) if len(hs) else 1.0, 1.0)
        gmax = max(float(gs.max()) if len(gs) else 1e-12, 1e-12)
        return run_search("angular", oracle_c=o.constrained, lam0=hmax / gmax, max_queries=max_queries, tol=tol)
    kmap, hm, gm = o.map_h()
    lam0 = max(hm, 1e-12) / o.g_max()
    budget = max(max_queries - 1, 1)
    lam_hi = max(xi, eps, 1e-12) / o.g_min() ** 2 if name == "sarawagi" else None
    r = run_search(name, o.lam_oracle, lam0=lam0, max_queries=budget, tol=tol, xi=xi, lam_hi=lam_hi)
    if name != "sarawagi" and hm > 0 and gm > 0 and hm * gm > r.phi:
        r.label, r.phi = kmap, hm * gm
    return r


# ----------------------------------------------------------------------------- point-set oracles
def point_oracles(points):
    """Exact lambda- and constrained lambda-oracles over an explicit list of (h, g) points
    (label = index; the ground truth (1, 0) is implicit). For tests and small problems."""
    def oracle(lam):
        best = (None, 1.0, 0.0)
        bv = 1.0
        for i, (h, g) in enumerate(points):
            v = h + lam * g
            if v > bv:
                best, bv = (i, h, g), v
        return best

    def oracle_c(lam, hi, lo, hi_closed, lo_closed):
        return constrained_argmax(points, lam, hi, lo, hi_closed, lo_closed)

    return oracle, oracle_c


def constrained_argmax(points, lam, hi, lo, hi_closed, lo_closed):
    """The constrained lambda-oracle (paper eq. 12) over explicit (h, g) points: the index and
    point maximizing h + lam * g among those with h > 0, g > 0 and slope g / h inside the angle
    [lo, hi] (each boundary ray included when its flag is set); None when the angle is empty."""
    best, bv = None, -math.inf
    for i, (h, g) in enumerate(points):
        if h <= 0 or g <= 0:
            continue
        d = g / h
        if d > hi or (d == hi and not hi_closed) or d < lo or (d == lo and not lo_closed):
            continue
        v = h + lam * g
        if v > bv:
            best, bv = (i, h, g), v
    return best
