"""Euclidean projections onto a box with one linear equality, in O(n).

Solves, for given m, d (d_i != 0), sigma (sigma_i != 0), bounds l_i <= u_i (infinite bounds allowed)
and z,

    min_alpha  1/2 sum_i d_i^2 (alpha_i - m_i)^2   s.t.   l_i <= alpha_i <= u_i,   sum_i sigma_i alpha_i = z

(Saha, Zhang, Vishwanathan, "Lower Bounds for BMRM and Faster Rates for Training SVMs", App. B,
Algorithm 2). The simplex of mass z is the special case sigma = 1, l = 0, u = +inf (or u = z).

KKT: alpha_i(lam) = clip(m_i + lam sigma_i / d_i^2, l_i, u_i), and lam is the root of the
non-decreasing piecewise-linear

    f(lam) = sum_i sigma_i alpha_i(lam) - z,

whose kinks are lam = (l_i - m_i) d_i^2 / sigma_i and (u_i - m_i) d_i^2 / sigma_i (at most 2n).
The root is bracketed by median splitting of the kinks strictly inside the current bracket
(lo, hi); items whose two kinks both lie outside the bracket are *resolved*: on (lo, hi) their
term is a constant (clipped) or linear (free), and is folded into an aggregated offset and slope,
so each round costs O(number of unresolved items) and the rounds cost O(n) in total (the
bracket's kink count halves every round). Median by in-place quickselect with a deterministic
pseudo-random pivot: expected linear time (the paper's MED is the worst-case linear BFPRT
selection; the difference only matters for adversarial pivot sequences).

What Algorithm 2 as printed leaves out, handled here:

* duplicate kinks: the median is removed from the open bracket whatever its multiplicity, so the
  candidate set always shrinks (no stalling when many kinks coincide);
* flat pieces: when no free item is left on the final bracket (slope 0) f is constant there, and
  every lam in it gives the same alpha; the root formula (l f(u) - u f(l)) / (f(u) - f(l)) would
  divide by zero;
* roots at end kinks and at infinity-side brackets (z equal to sum of the lower or upper ends);
* l_i = u_i (fixed coordinates) and infinite bounds;
* infeasible z (outside [sum lower ends, sum upper ends]) is reported, not silently projected.

``project_sort`` is the O(n log n) reference: sort all kinks and scan.
"""
import numpy as np
from numba import njit

_JIT = dict(cache=True, nogil=True, no_cfunc_wrapper=True)


@njit(**_JIT)
def _item(i, m, d2, sig, l, u):
    """Kinks a <= b of item i (in lam) and its constant terms left of a / right of b."""
    s = sig[i]
    if s > 0:
        a = (l[i] - m[i]) * d2[i] / s
        b = (u[i] - m[i]) * d2[i] / s
        clo = s * l[i]
        chi = s * u[i]
    else:
        a = (u[i] - m[i]) * d2[i] / s
        b = (l[i] - m[i]) * d2[i] / s
        clo = s * u[i]
        chi = s * l[i]
    return a, b, clo, chi


@njit(inline="always", **_JIT)
def _alpha(i, lam, m, d2, sig, l, u):
    """alpha_i(lam) = clip(m_i + lam sigma_i / d_i^2, l_i, u_i)."""
    v = m[i] + lam * sig[i] / d2[i]
    if v < l[i]:
        v = l[i]
    elif v > u[i]:
        v = u[i]
    return v


@njit(inline="always", **_JIT)
def _term(i, lam, m, d2, sig, l, u):
    return sig[i] * _alpha(i, lam, m, d2, sig, l, u)


@njit(**_JIT)
def _fill(lam, m, d2, sig, l, u, out):
    """out = alpha(lam), the projection once the multiplier lam is known."""
    for i in range(m.shape[0]):
        out[i] = _alpha(i, lam, m, d2, sig, l, u)


@njit(**_JIT)
def _end_sums(m, d2, sig, l, u):
    """(f(-inf) + z, f(+inf) + z): sum_i sigma_i alpha_i with every item at its lower / upper end."""
    slo = 0.0
    shi = 0.0
    for i in range(m.shape[0]):
        a, b, clo, chi = _item(i, m, d2, sig, l, u)
        slo += clo
        shi += chi
    return slo, shi


@njit(inline="always", **_JIT)
def _clamped_root(z, c, s, lo, hi):
    """The root (z - c) / s of the linear piece c + s lam - z (s > 0), clamped to [lo, hi]."""
    lam = (z - c) / s
    if lam < lo:
        lam = lo
    if lam > hi:
        lam = hi
    return lam


@njit(**_JIT)
def _infeasible(z, slo, shi, m, d2, sig, l, u, out):
    """Whether z is outside [slo, shi] (up to rounding); if so ``out`` gets the nearest end
    (every item at its lower end when z < slo, else at its upper end)."""
    tol = 1e-12 * (abs(z) + abs(slo) + abs(shi) + 1.0)
    if not (z < slo - tol or z > shi + tol):
        return False
    for i in range(m.shape[0]):
        a, b, clo, chi = _item(i, m, d2, sig, l, u)
        out[i] = clo / sig[i] if z < slo else chi / sig[i]
    return True


@njit(**_JIT)
def _select(buf, n, k, seed):
    """k-th smallest of buf[:n] (in place, quickselect with a pseudo-random pivot)."""
    lo = 0
    hi = n - 1
    state = seed
    while hi > lo:
        state = (state * 6364136223846793005 + 1442695040888963407) & 0x7FFFFFFFFFFFFFFF
        p = lo + (state >> 17) % (hi - lo + 1)
        pivot = buf[p]
        # three-way partition: < pivot | == pivot | > pivot
        lt = lo
        gt = hi
        i = lo
        while i <= gt:
            x = buf[i]
            if x < pivot:
                buf[i] = buf[lt]
                buf[lt] = x
                lt += 1
                i += 1
            elif x > pivot:
                buf[i] = buf[gt]
                buf[gt] = x
                gt -= 1
            else:
                i += 1
        if k < lt:
            hi = lt - 1
        elif k > gt:
            lo = gt + 1
        else:
            return pivot
    return buf[lo]


@njit(**_JIT)
def project_box_eq(m, d2, sig, l, u, z, out, work, active):
    """O(n) projection (module doc). ``d2`` holds d_i^2. ``work`` (float, >= 2n) and ``active``
    (int, >= n) are scratch. Writes alpha to ``out``; returns (lam, status) with status 0 = ok,
    1 = infeasible z (``out`` then holds the nearest end: all items at their lower or upper end)."""
    n = m.shape[0]
    # feasibility: f(-inf) = sum clo - z <= 0 <= f(+inf) = sum chi - z
    if n == 0:
        return 0.0, 0 if z == 0.0 else 1
    slo, shi = _end_sums(m, d2, sig, l, u)
    if _infeasible(z, slo, shi, m, d2, sig, l, u, out):
        return (-np.inf if z < slo else np.inf), 1
    lo = -np.inf
    hi = np.inf
    c0 = 0.0       # aggregated offset of resolved items on (lo, hi)
    s0 = 0.0       # aggregated slope of resolved items on (lo, hi)
    na = n
    for i in range(n):
        active[i] = i
    seed = 88172645463325252
    while True:
        # resolve items with no kink strictly inside (lo, hi); collect the kinks that are
        nk = 0
        j = 0
        for t in range(na):
            i = active[t]
            a, b, clo, chi = _item(i, m, d2, sig, l, u)
            ina = lo < a < hi
            inb = lo < b < hi
            if ina or inb:
                active[j] = i
                j += 1
                if ina:
                    work[nk] = a
                    nk += 1
                if inb:
                    work[nk] = b
                    nk += 1
            elif b <= lo:
                c0 += chi
            elif a >= hi:
                c0 += clo
            else:      # a <= lo and b >= hi: free on the whole bracket
                c0 += sig[i] * m[i]
                s0 += sig[i] * sig[i] / d2[i]
        na = j
        if nk == 0:
            break
        seed += 1
        med = _select(work, nk, nk // 2, seed)
        fm = c0 + s0 * med - z
        for t in range(na):
            fm += _term(active[t], med, m, d2, sig, l, u)
        if fm == 0.0:
            lo = med
            hi = med
            break
        if fm > 0.0:
            hi = med
        else:
            lo = med
    if lo == hi:
        lam = lo
    elif s0 > 0.0:
        lam = _clamped_root(z, c0, s0, lo, hi)
    else:
        # flat piece: f is constant on (lo, hi); every lam there gives the same alpha
        if lo > -np.inf:
            lam = lo
        elif hi < np.inf:
            lam = hi
        else:
            lam = 0.0
    _fill(lam, m, d2, sig, l, u, out)
    return lam, 0


@njit(**_JIT)
def project_sort(m, d2, sig, l, u, z, out):
    """O(n log n) reference: sort the finite kinks, scan with running offset and slope. Returns
    (lam, status) as :func:`project_box_eq`."""
    n = m.shape[0]
    ks = np.empty(2 * n)
    ev = np.empty(2 * n, dtype=np.int64)   # item * 2 + (0: enters free at a, 1: leaves free at b)
    slo = 0.0      # the end sums of _end_sums, in the same pass as the kinks
    shi = 0.0
    c = 0.0        # f(lam) + z = c + s lam left of the first finite kink
    s = 0.0
    ne = 0
    for i in range(n):
        a, b, clo, chi = _item(i, m, d2, sig, l, u)
        slo += clo
        shi += chi
        if a == -np.inf:
            if b == -np.inf:
                c += chi
            else:
                c += sig[i] * m[i]
                s += sig[i] * sig[i] / d2[i]
        else:
            c += clo
            ks[ne] = a
            ev[ne] = 2 * i
            ne += 1
        if b < np.inf and b > -np.inf:
            ks[ne] = b
            ev[ne] = 2 * i + 1
            ne += 1
    if n == 0 or _infeasible(z, slo, shi, m, d2, sig, l, u, out):
        return 0.0, 1
    order = np.argsort(ks[:ne], kind="mergesort")
    prev = -np.inf
    lam = 0.0
    found = False
    p = 0
    while p < ne:
        x = ks[order[p]]
        fx = c + s * x - z       # f on [prev, x] is c + s lam - z
        if fx >= 0.0:
            if s > 0.0:
                lam = _clamped_root(z, c, s, prev, x)
            else:
                lam = prev if prev > -np.inf else x
            found = True
            break
        while p < ne and ks[order[p]] == x:      # cross every kink at x
            e = ev[order[p]]
            i = e // 2
            a, b, clo, chi = _item(i, m, d2, sig, l, u)
            if e % 2 == 0:
                if a == b:          # zero-width free piece: straight from clo to chi
                    c += chi - clo
                else:
                    c += sig[i] * m[i] - clo
                    s += sig[i] * sig[i] / d2[i]
            elif a != b:
                c += chi - sig[i] * m[i]
                s -= sig[i] * sig[i] / d2[i]
            p += 1
        prev = x
    if not found:
        if s > 0.0:
            lam = (z - c) / s
            if lam < prev:
                lam = prev
        else:
            lam = prev if prev > -np.inf else 0.0
    _fill(lam, m, d2, sig, l, u, out)
    return lam, 0


@njit(**_JIT)
def project_simplex_rows(P, z, out, work, active, m, d2, sig, l, u):
    """Project every row of P (n x K) onto {a >= 0, sum a = z}; scratch sized for K."""
    n, K = P.shape
    for k in range(K):
        d2[k] = 1.0
        sig[k] = 1.0
        l[k] = 0.0
        u[k] = z
    o = np.empty(K)
    for r in range(n):
        for k in range(K):
            m[k] = P[r, k]
        project_box_eq(m, d2, sig, l, u, z, o, work, active)
        for k in range(K):
            out[r, k] = o[k]


@njit(**_JIT)
def smo_simplex(Q, g, x, s, tol, max_steps, wolfe, zero_below):
    """Pairwise (SMO) steps with exact line search for

        max_{x in simplex}  x . c - (s / 2) x' Q x,

    from the feasible ``x`` with its gradient ``g = c - s Q x`` (both updated in place). Each step
    moves mass from the support coordinate j of least gradient to the coordinate i of largest
    gradient, by min(x_j, (g_i - g_j) / (s (Q_ii + Q_jj - 2 Q_ij))). Stops after ``max_steps``
    steps or once, with ``wolfe``, the Wolfe gap max_i g_i - x . g <= tol, else the stronger
    max_i g_i - min_{x_j > 0} g_j <= tol. A coordinate left below ``zero_below`` becomes 0.
    Shared by BMRM's bundle dual (:func:`simplex_qp`) and the cutting-plane learner's block
    QP (``streamssvm._kernels.cp.block_qp``). Returns the number of steps."""
    m = x.shape[0]
    steps = 0
    while steps < max_steps:
        i = 0
        for y in range(1, m):
            if g[y] > g[i]:
                i = y
        j = -1
        acc = 0.0
        for y in range(m):
            acc += x[y] * g[y]
            if x[y] > 0.0 and (j < 0 or g[y] < g[j]):
                j = y
        if j < 0 or i == j or (g[i] - acc if wolfe else g[i] - g[j]) <= tol:
            break
        curv = s * (Q[i, i] + Q[j, j] - 2.0 * Q[i, j])
        t = x[j]
        if curv > 0.0:
            e = (g[i] - g[j]) / curv
            if e < t:
                t = e
        if t <= 0.0:
            break
        x[i] += t
        x[j] -= t
        if x[j] < zero_below:
            x[j] = 0.0
        for y in range(m):
            g[y] -= s * t * (Q[y, i] - Q[y, j])
        steps += 1
    return steps


@njit(**_JIT)
def simplex_qp(G, b, lam, alpha, tol, max_steps):
    """max_{alpha in simplex} alpha.b - alpha' G alpha / (2 lam) (the bundle dual of BMRM), by
    pairwise (SMO) steps with exact line search (:func:`smo_simplex`) from the feasible warm
    start ``alpha`` (updated in place) until max_i g_i - min_{alpha_j > 0} g_j <= tol (then the
    Wolfe gap, an upper bound on the distance to the optimum, is <= tol), g = b - G alpha / lam.
    Returns the number of steps."""
    t = b.shape[0]
    g = np.empty(t)
    for i in range(t):
        acc = 0.0
        for j in range(t):
            acc += G[i, j] * alpha[j]
        g[i] = b[i] - acc / lam
    return smo_simplex(G, g, alpha, 1.0 / lam, tol, max_steps, False, 1e-300)


def project(m, lower=0.0, upper=np.inf, z=1.0, sigma=1.0, d=1.0, method="linear"):
    """Thin wrapper: argmin 1/2 sum d_i^2 (a_i - m_i)^2 s.t. lower <= a <= upper, <sigma, a> = z.

    Scalars broadcast. ``method="linear"`` is the O(n) median-split algorithm, ``"sort"`` the
    O(n log n) reference. Raises ``ValueError`` when z is infeasible.

    >>> import numpy as np
    >>> project(np.array([0.5, 0.2, -0.3]))               # onto the probability simplex
    array([0.65, 0.35, 0.  ])
    >>> project(np.array([1.0, 1.0]), 0.0, 0.5, z=0.0, sigma=np.array([1.0, -1.0]))   # box + sum y a = 0
    array([0.5, 0.5])
    """
    m = np.ascontiguousarray(m, dtype=np.float64)
    n = m.shape[0]
    full = lambda v: np.ascontiguousarray(np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)))  # noqa: E731
    l, u, sig, dd = full(lower), full(upper), full(sigma), full(d)
    if np.any(l > u):
        raise ValueError("projection: lower > upper for some coordinate")
    if np.any(sig == 0) or np.any(dd == 0):
        raise ValueError("projection: sigma and d must be non-zero")
    out = np.empty(n)
    if method == "linear":
        _, status = project_box_eq(m, dd * dd, sig, l, u, float(z), out, np.empty(2 * n + 1),
                                   np.empty(n + 1, dtype=np.int64))
    elif method == "sort":
        _, status = project_sort(m, dd * dd, sig, l, u, float(z), out)
    else:
        raise ValueError(f"method must be 'linear' or 'sort', got {method!r}")
    if status != 0:
        raise ValueError(f"projection: z={z} is infeasible for these bounds")
    return out
