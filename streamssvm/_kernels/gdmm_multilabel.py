"""Numba kernels of GDMM for pairwise multi-label (Yen, Huang, Zhong, Zhang, Ravikumar, Dhillon,
"Dual Decomposed Learning with Factorwise Oracles for Structural SVMs of Large Output Domain",
NIPS 2016). Chains: :mod:`streamssvm._kernels.gdmm_chain`; the bundles (``Dt``
:data:`~streamssvm._kernels.gdmm.MLData`, ``Q`` :data:`~streamssvm._kernels.gdmm.MLDual`,
``cfg`` :data:`~streamssvm._kernels.gdmm.MLStep`, ``scratch``): :mod:`streamssvm._kernels.gdmm`.

A fully connected binary MRF over K labels (MultiLabelSSVM(pairwise=True)): one binary
variable per label, score(y) = sum_k y_k <w_k, x> + sum_{k<l} y_k y_l T[k, l], loss Hamming / Ki.
Factorwise dual (Yen et al. 2016, section 3.2 (b) and Algorithm 3), per held example i:

* unigram factor k: u_k = mu_k(1) in [0, 1] (dense, n x Kc);
* pairwise factor f = (k, l), k < l: marginals over (00, 01, 10, 11), kept as
  z_f = (m_k, m_l, q) = (mu_f(1.), mu_f(.1), mu_f(11)), i.e. a point of the tetrahedron with
  vertices 00 = (0, 0, 0), 01 = (0, 1, 0), 10 = (1, 0, 0), 11 = (1, 1, 1); scaled multipliers
  lam_kf, lam_lf of the consistency constraints m_k = u_k, m_l = u_l (the 0-coordinates are
  implied by the simplex);
* a factor is *inactive* until the greedy step adds it (storage O(active factors), not O(K^2) per
  example). An inactive factor has no variables of its own: its marginals are *implicitly* the
  independent coupling of its two unigrams, z_f = (u_k, u_l, u_k u_l) (a point of the local
  polytope, so always feasible), with no multiplier. Its consistency residual is zero, so it
  constrains nothing; it only carries the pair statistic q = u_k u_l into U_T. When the greedy
  step activates it, it starts at that same point (lam = 0): U_T does not change.
  (Defining inactive factors at their ground-truth vertex instead -- the previous version --
  made the K - 1 consistency penalties of each label pin u_k to ybar_k: with 228 labels the
  unigram duals moved ~1e-7 per pass.)

Unnormalized weights U_E[:, k] = sum_i x_i (ybar_ik - u_ik) (feature-major ``E``), U_T[k, l] =
sum_i (ybar_ik ybar_il - q_ikl) (upper triangle of ``T``; q_ikl = u_ik u_il for an inactive
factor); w = s U, s = 1 / (lam n). The augmented Lagrangian (scaled by n, as for chains):

  L = (s/2) ||U||^2 - sum_i delta_i^T u_i + (rho/2) sum_i sum_{f active} [(m_k - u_k + lam_kf)^2 + (m_l - u_l + lam_lf)^2]

with delta_i^T u_i = sum_k (ybar_k ? 1 - u_k : u_k) / Ki. Per example we keep
Dv[i, k] = sum_{active f ni k} (m_fk + lam_fk - ybar_k) and nact[i, k] = the number of active
factors containing k, so that the sum of the messages of label k is
Dv[i, k] + nact[i, k] (ybar_k - u_k).

Example weights (``learn(..., weight=c)``): the objective lam/2 ||w||^2 + (1/N) sum_i c_i H_i(w),
N = sum_i c_i (BCFW's normalization), so s = 1 / (lam N), U_E = sum_i c_i x_i (ybar_i - u_i),
U_T = sum_i c_i (ybar ybar^T - q_i) and the loss term sum_i c_i delta_i^T u_i; the consistency
penalty stays rho (per-example homogeneous constraints: same saddle points). On example i a
unigram block's gradient terms from U and delta scale by c_i and its curvature from U by c_i^2;
a pairwise block minimizes (rho/2)(...)^2 + (s c_i^2 / 2)(q - q_old - U_T / c_i)^2; U moves by c_i
times the change. ``Dt.cw`` holds c_i (1.0 unweighted: every product by 1.0 is exact, so the
unweighted trajectory is bit-identical). The greedy factor activation (``ml_greedy_add``) ranks
factors by their unweighted gap: which factors are active changes the path, not the optimum.

Block solvers (exact): a unigram block is a 1-D quadratic on [0, 1] (clip of a Newton step; it
includes the inactive factors' terms of (s/2)||U_T||^2, linear in u_k); a pairwise block is
min (rho/2)(m_k - c_k)^2 + (rho/2)(m_l - c_l)^2 + (s/2)(q - c_q)^2 over the tetrahedron, solved
exactly by enumerating its 15 faces (``tetra_project``).
"""
import numpy as np
from numba import njit

from .gdmm import _JIT, ML_C_ADDED, ML_C_FULL, ML_C_PAIR, ML_C_SCANNED, ML_C_UNI
from .mrf import _mrf_enum

_TETRA = np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])


@njit(**_JIT)
def _solve_small(A, b, n):
    """Solve A[:n, :n] x = b[:n] in place (Gaussian elimination, partial pivoting); x in b.
    Returns False when singular."""
    for c in range(n):
        p = c
        for r in range(c + 1, n):
            if abs(A[r, c]) > abs(A[p, c]):
                p = r
        if abs(A[p, c]) < 1e-300:
            return False
        if p != c:
            for j in range(n):
                t = A[c, j]
                A[c, j] = A[p, j]
                A[p, j] = t
            t = b[c]
            b[c] = b[p]
            b[p] = t
        for r in range(c + 1, n):
            f = A[r, c] / A[c, c]
            if f != 0.0:
                for j in range(c, n):
                    A[r, j] -= f * A[c, j]
                b[r] -= f * b[c]
    for c in range(n - 1, -1, -1):
        v = b[c]
        for j in range(c + 1, n):
            v -= A[c, j] * b[j]
        b[c] = v / A[c, c]
    return True


@njit(**_JIT)
def tetra_project(c, wt, out, A=None, b=None, idx=None):
    """argmin_z sum_j wt[j] (z_j - c_j)^2 over the tetrahedron conv(_TETRA) (wt > 0), exact:
    the minimizer lies in the relative interior of one of the 15 faces, where it is the
    weighted projection onto that face's affine hull (a KKT system in barycentric
    coordinates); the best feasible candidate over all faces is the answer. Writes z to
    ``out``, returns the objective. ``A`` (5 x 5), ``b`` (5,), ``idx`` (4,) are optional scratch.

    >>> import numpy as np
    >>> z = np.zeros(3)
    >>> float(tetra_project(np.array([0.5, 0.5, 0.25]), np.ones(3), z)), z.tolist()   # inside
    (0.0, [0.5, 0.5, 0.25])
    >>> round(float(tetra_project(np.array([2.0, 2.0, 2.0]), np.ones(3), z)), 12), z.tolist()  # vertex 11
    (3.0, [1.0, 1.0, 1.0])
    """
    # inside: barycentric coordinates (q, m_k - q, m_l - q, 1 - m_k - m_l + q) all >= 0
    if c[2] >= 0.0 and c[0] - c[2] >= 0.0 and c[1] - c[2] >= 0.0 and 1.0 - c[0] - c[1] + c[2] >= 0.0:
        out[0] = c[0]
        out[1] = c[1]
        out[2] = c[2]
        return 0.0
    V = _TETRA
    if A is None:
        A = np.zeros((5, 5))
    if b is None:
        b = np.zeros(5)
    if idx is None:
        idx = np.zeros(4, dtype=np.int64)
    best = np.inf
    for mask in range(1, 16):
        m = 0
        for v in range(4):
            if (mask >> v) & 1:
                idx[m] = v
                m += 1
        # min_beta sum_j wt_j (sum_a beta_a V[a, j] - c_j)^2, sum beta = 1
        for a in range(m):
            for bb in range(m):
                acc = 0.0
                for j in range(3):
                    acc += wt[j] * V[idx[a], j] * V[idx[bb], j]
                A[a, bb] = 2.0 * acc
            acc = 0.0
            for j in range(3):
                acc += wt[j] * V[idx[a], j] * c[j]
            b[a] = 2.0 * acc
            A[a, m] = 1.0
            A[m, a] = 1.0
        A[m, m] = 0.0
        b[m] = 1.0
        if not _solve_small(A, b, m + 1):
            continue
        ok = True
        for a in range(m):
            if b[a] < -1e-12:
                ok = False
        if not ok:
            continue
        z0 = 0.0
        z1 = 0.0
        z2 = 0.0
        for a in range(m):
            beta = max(b[a], 0.0)
            z0 += beta * V[idx[a], 0]
            z1 += beta * V[idx[a], 1]
            z2 += beta * V[idx[a], 2]
        f = wt[0] * (z0 - c[0]) ** 2 + wt[1] * (z1 - c[1]) ** 2 + wt[2] * (z2 - c[2]) ** 2
        if f < best:
            best = f
            out[0] = z0
            out[1] = z1
            out[2] = z2
    return best


@njit(**_JIT)
def ml_scores(E, K, x_ptr, fidx, fval, i, acc):
    """acc[k] = <U_E[:, k], x_i> for k < K (feature-major rows)."""
    for k in range(K):
        acc[k] = 0.0
    for p in range(x_ptr[i], x_ptr[i + 1]):
        row = E[fidx[p]]
        v = fval[p]
        for k in range(K):
            acc[k] += v * row[k]


@njit(**_JIT)
def _ml_inactive_pair(k, l, ul, mark):
    """(min(k, l), max(k, l)) when the pair factor of labels k != l is inactive (``mark`` 0) and
    u_l != 0 -- a pair whose implicit statistic u_k u_l moves with u_k -- else (-1, -1)."""
    if l == k or ul == 0.0:
        return -1, -1
    a = min(k, l)
    b = max(k, l)
    if mark[a, b]:
        return -1, -1
    return a, b


@njit(**_JIT)
def ml_uni_step(i, k, Dt, Q, E, T, K, s, rho, score, mark, tub):
    """Exact minimization of L over u_ik in [0, 1] (``score`` = <U_E[:, k], x_i>); returns the
    change. The inactive factors (k, l) of example i (``mark`` is 0 there; 1 on the active ones)
    hold q = u_k u_l, so U_T[k, l] is linear in u_k with slope -u_l: their part of
    (s/2)||U_T||^2 enters the quadratic, and U_T (and its bound ``tub``) follows the step."""
    Dt_x_ptr, Dt_fidx, Dt_fval, Dt_xsq, Dt_Ki, Dt_Y, _, Dt_cw = Dt
    Q_u, Q_Dv, _, _, _, _, _, Q_nact = Q
    yk = Dt_Y[i, k]
    u = Q_u[i, k]
    na = Q_nact[i, k]
    c = Dt_cw[i]      # the example's weight (module doc)
    sc = s * c
    g = -sc * score - (1.0 - 2.0 * yk) * c / Dt_Ki[i] - rho * (na * (yk - u) + Q_Dv[i, k])
    h = sc * c * Dt_xsq[i] + rho * na
    gt = 0.0
    ht = 0.0
    for l in range(K):
        ul = Q_u[i, l]
        a, b = _ml_inactive_pair(k, l, ul, mark)
        if a < 0:
            continue
        gt += T[a, b] * ul
        ht += ul * ul
    g -= sc * gt
    h += sc * c * ht
    if h <= 0.0:
        return 0.0
    un = u - g / h
    if un < 0.0:
        un = 0.0
    elif un > 1.0:
        un = 1.0
    d = un - u
    if d != 0.0:
        Q_u[i, k] = un
        dc = d * c
        for p in range(Dt_x_ptr[i], Dt_x_ptr[i + 1]):
            E[Dt_fidx[p], k] -= dc * Dt_fval[p]
        if ht > 0.0:
            for l in range(K):
                ul = Q_u[i, l]
                a, b = _ml_inactive_pair(k, l, ul, mark)
                if a < 0:
                    continue
                T[a, b] -= dc * ul
                _ml_tub_raise(tub, a, b, T[a, b])
    return d


@njit(**_JIT)
def ml_pair_step(i, c, Q, T, s, rho, scratch, tub, cw=1.0):
    """Exact block minimization of L over the active pairwise factor c of example i (raises the
    bound ``tub`` of ``ml_t_bound`` when U_T[k, l] grows). ``cw``: the example's weight; U_T[k, l]
    = R - cw q, so the table's term is (s cw^2 / 2) (q - (q_old + U_T / cw))^2."""
    _, _, _, _, _, cbuf, wbuf, zbuf, tA, tb, tidx, _ = scratch
    Q_u, Q_Dv, Q_fk, Q_fl, Q_fz, Q_flam, _, _ = Q
    k = Q_fk[i, c]
    l = Q_fl[i, c]
    mk = Q_fz[i, c, 0]
    ml = Q_fz[i, c, 1]
    q = Q_fz[i, c, 2]
    cbuf[0] = Q_u[i, k] - Q_flam[i, c, 0]
    cbuf[1] = Q_u[i, l] - Q_flam[i, c, 1]
    cbuf[2] = q + T[k, l] / cw
    wbuf[0] = rho
    wbuf[1] = rho
    wbuf[2] = s * cw * cw
    tetra_project(cbuf, wbuf, zbuf, tA, tb, tidx)
    Q_fz[i, c, 0] = zbuf[0]
    Q_fz[i, c, 1] = zbuf[1]
    Q_fz[i, c, 2] = zbuf[2]
    T[k, l] += (q - zbuf[2]) * cw
    _ml_tub_raise(tub, k, l, T[k, l])
    Q_Dv[i, k] += zbuf[0] - mk
    Q_Dv[i, l] += zbuf[1] - ml


@njit(**_JIT)
def _ml_pair_gap(gq, uk, ul):
    """Frank-Wolfe gap of an inactive pairwise factor at its implicit point z = (u_k, u_l,
    u_k u_l): the gradient of L in (m_k, m_l, q) there is (0, 0, gq) (zero residual, no
    multiplier; gq = -s U_T[k, l]), so max over the tetrahedron's vertices v of <g, z - v> is
    gq u_k u_l - min(0, gq). At the ground truth (u = ybar) it is max(0, -gq) unless both labels
    are positive, max(0, gq) if they are."""
    return gq * (uk * ul) - min(0.0, gq)


@njit(**_JIT)
def _ml_before(g1, k1, l1, g2, k2, l2):
    """Candidate order: larger gap first, ties by smaller (k, l) -- a total order, so the
    selection does not depend on the order in which pairs are scanned."""
    if g1 != g2:
        return g1 > g2
    return k1 < k2 or (k1 == k2 and l1 < l2)


@njit(**_JIT)
def _ml_cand_push(gap, k, l, grow, nc, cand_f, cand_k, cand_l):
    """Insert (gap, k, l) into the short list of the ``grow`` first candidates in the order
    ``_ml_before``. Returns the new length."""
    if nc < grow:
        j = nc
        nc += 1
    elif _ml_before(gap, k, l, cand_f[nc - 1], cand_k[nc - 1], cand_l[nc - 1]):
        j = nc - 1
    else:
        return nc
    while j > 0 and _ml_before(gap, k, l, cand_f[j - 1], cand_k[j - 1], cand_l[j - 1]):
        cand_f[j] = cand_f[j - 1]
        cand_k[j] = cand_k[j - 1]
        cand_l[j] = cand_l[j - 1]
        j -= 1
    cand_f[j] = gap
    cand_k[j] = k
    cand_l[j] = l
    return nc


@njit(**_JIT)
def ml_t_bound(T, K, tub):
    """tub[k] = max_{l != k} U_T[min(k, l), max(k, l)] (the largest interaction weight touching
    label k, upper-triangle storage); -inf for K < 2. The kernels keep ``tub`` an upper bound
    between two calls (every increase of an entry of T raises it; decreases leave it loose)."""
    for k in range(K):
        tub[k] = -np.inf
    for k in range(K):
        for l in range(k + 1, K):
            t = T[k, l]
            if t > tub[k]:
                tub[k] = t
            if t > tub[l]:
                tub[l] = t


@njit(**_JIT)
def _ml_tub_raise(tub, k, l, t):
    if t > tub[k]:
        tub[k] = t
    if t > tub[l]:
        tub[l] = t


@njit(**_JIT)
def ml_greedy_add(i, Dt, Q, T, cfg, scratch, counters, tub):
    """Block-greedy factor selection (Yen et al. Algorithm 3, step 1): among the inactive
    pairwise factors of example i, add the ``grow`` with the largest Frank-Wolfe gap at their
    implicit point (``_ml_pair_gap``) among those with gap > ``tol``; they are added in (k, l)
    order, at their implicit point (u_k, u_l, u_k u_l) with zero multipliers (``Dv``, ``nact``
    updated; U_T unchanged). ``mark`` (the ``scratch``'s K x K int8, zero on entry and exit) flags the active
    factors. Returns the
    number added.

    ``full``: scan all K(K-1)/2 pairs. Otherwise an exact pruned search (it selects the same
    factors): a label k is *at the truth* when u_k = ybar_k. A pair with both labels at the truth has gap
    max(0, -s U_T) if both labels are positive and max(0, s U_T) otherwise (section 3.2 (b) of
    the paper: only the interaction weight matters). So the search scans (1) every pair touching
    a label off the truth, O(|off| K); (2) the pairs of positive labels at the truth; (3) for the
    other pairs at the truth, only the rows k whose bound s * tub[k] (``ml_t_bound``) can reach
    the current admission threshold (``tol``, or the last kept gap once ``grow`` are kept). Ties
    are broken by (k, l) (``_ml_before``), so both searches select the same factors.
    ``lbuf`` (int64, >= 2 K) is scratch. ``counters[ML_C_SCANNED]`` counts the pairs evaluated."""
    K, s, _, _, grow, tol, _, _, full = cfg
    _, mark, cand_f, cand_k, cand_l, _, _, _, _, _, _, lbuf = scratch
    _, _, _, _, _, Dt_Y, _, _ = Dt
    Q_u, Q_Dv, Q_fk, Q_fl, Q_fz, Q_flam, Q_fcnt, Q_nact = Q
    n = Q_fcnt[i]
    for c in range(n):
        mark[Q_fk[i, c], Q_fl[i, c]] = 1
    nc = 0
    scanned = 0
    if full:
        for k in range(K):
            uk = Q_u[i, k]
            for l in range(k + 1, K):
                if mark[k, l]:
                    continue
                scanned += 1
                gap = _ml_pair_gap(-s * T[k, l], uk, Q_u[i, l])
                if gap > tol:
                    nc = _ml_cand_push(gap, k, l, grow, nc, cand_f, cand_k, cand_l)
    else:
        # lbuf[:K]: 1 = off the truth, 0 = at the truth; lbuf[K:2K]: row scanned in step (3)
        noff = 0
        for k in range(K):
            off = 1 if Q_u[i, k] != Dt_Y[i, k] else 0
            lbuf[k] = off
            lbuf[K + k] = 0
            noff += off
        # (1) pairs with at least one label off the truth (each such pair once)
        if noff > 0:
            for k in range(K):
                if lbuf[k] == 0:
                    continue
                uk = Q_u[i, k]
                for l in range(K):
                    if l == k or (lbuf[l] == 1 and l < k):
                        continue
                    a = min(k, l)
                    b = max(k, l)
                    if mark[a, b]:
                        continue
                    scanned += 1
                    gap = _ml_pair_gap(-s * T[a, b], uk, Q_u[i, l])
                    if gap > tol:
                        nc = _ml_cand_push(gap, a, b, grow, nc, cand_f, cand_k, cand_l)
        # (2) both labels at the truth and positive: gap = max(0, -s U_T)
        for k in range(K):
            if lbuf[k] == 1 or Dt_Y[i, k] != 1.0:
                continue
            for l in range(k + 1, K):
                if lbuf[l] == 1 or Dt_Y[i, l] != 1.0 or mark[k, l]:
                    continue
                scanned += 1
                gap = max(0.0, -s * T[k, l])
                if gap > tol:
                    nc = _ml_cand_push(gap, k, l, grow, nc, cand_f, cand_k, cand_l)
        # (3) both at the truth, not both positive: gap = max(0, s U_T[k, l]) <= s tub[k]
        for k in range(K):
            if lbuf[k] == 1:
                continue
            if s * tub[k] <= tol or (nc == grow and s * tub[k] < cand_f[nc - 1]):
                continue
            lbuf[K + k] = 1
            yk = Dt_Y[i, k]
            for l in range(K):
                if l == k or lbuf[l] == 1 or (yk == 1.0 and Dt_Y[i, l] == 1.0):
                    continue
                if l < k and lbuf[K + l] == 1:
                    continue   # seen from row l
                a = min(k, l)
                b = max(k, l)
                if mark[a, b]:
                    continue
                scanned += 1
                gap = max(0.0, s * T[a, b])
                if gap > tol:
                    nc = _ml_cand_push(gap, a, b, grow, nc, cand_f, cand_k, cand_l)
    counters[ML_C_SCANNED] += scanned
    for c in range(n):
        mark[Q_fk[i, c], Q_fl[i, c]] = 0
    cap = Q_fk.shape[1]
    if nc > cap - n:   # no room for all: keep the largest gaps
        counters[ML_C_FULL] += 1
        nc = max(cap - n, 0)
    # canonical (k, l) order, so that the full and the pruned search add identically
    for a in range(1, nc):
        j = a
        while j > 0 and (cand_k[j - 1] > cand_k[j] or (cand_k[j - 1] == cand_k[j] and cand_l[j - 1] > cand_l[j])):
            cand_f[j], cand_f[j - 1] = cand_f[j - 1], cand_f[j]
            cand_k[j], cand_k[j - 1] = cand_k[j - 1], cand_k[j]
            cand_l[j], cand_l[j - 1] = cand_l[j - 1], cand_l[j]
            j -= 1
    added = 0
    for j in range(nc):
        k = cand_k[j]
        l = cand_l[j]
        uk = Q_u[i, k]
        ul = Q_u[i, l]
        Q_fk[i, n] = k
        Q_fl[i, n] = l
        Q_fz[i, n, 0] = uk
        Q_fz[i, n, 1] = ul
        Q_fz[i, n, 2] = uk * ul
        Q_flam[i, n, 0] = 0.0
        Q_flam[i, n, 1] = 0.0
        Q_Dv[i, k] += uk - Dt_Y[i, k]
        Q_Dv[i, l] += ul - Dt_Y[i, l]
        Q_nact[i, k] += 1.0
        Q_nact[i, l] += 1.0
        n += 1
        added += 1
    Q_fcnt[i] = n
    counters[ML_C_ADDED] += added
    return added


@njit(**_JIT)
def ml_multiplier_step(i, Q, eta):
    """lam_f += eta (m_f - u) on the active factors of example i (paper eq. 13); returns the
    squared residual (inactive factors follow their unigrams: residual zero)."""
    Q_u, Q_Dv, Q_fk, Q_fl, Q_fz, Q_flam, Q_fcnt, _ = Q
    res = 0.0
    for c in range(Q_fcnt[i]):
        k = Q_fk[i, c]
        l = Q_fl[i, c]
        rk = Q_fz[i, c, 0] - Q_u[i, k]
        rl = Q_fz[i, c, 1] - Q_u[i, l]
        res += rk * rk + rl * rl
        if eta != 0.0:
            Q_flam[i, c, 0] += eta * rk
            Q_flam[i, c, 1] += eta * rl
            Q_Dv[i, k] += eta * rk
            Q_Dv[i, l] += eta * rl
    return res


@njit(**_JIT)
def ml_scratch(Kc, grow):
    """A zeroed :data:`~streamssvm._kernels.gdmm.MLScratch` for Kc labels and a short list of
    ``grow`` candidates."""
    g = max(grow, 1)
    return (np.zeros(Kc), np.zeros((Kc, Kc), dtype=np.int8), np.zeros(g), np.zeros(g, dtype=np.int64),
            np.zeros(g, dtype=np.int64), np.zeros(3), np.zeros(3), np.zeros(3), np.zeros((5, 5)), np.zeros(5),
            np.zeros(4, dtype=np.int64), np.zeros(2 * Kc, dtype=np.int64))


@njit(**_JIT)
def ml_example_pass(i, Dt, Q, E, T, cfg, scratch, counters, tub):
    """One sweep over the factors of example i: every unigram block (exact), the greedy
    factor additions, every active pairwise block (exact)."""
    K, s, rho, _, _, _, _, _, _ = cfg
    acc, mark, _, _, _, _, _, _, _, _, _, _ = scratch
    Dt_x_ptr, Dt_fidx, Dt_fval, _, _, _, _, Dt_cw = Dt
    _, _, Q_fk, Q_fl, _, _, Q_fcnt, _ = Q
    ml_scores(E, K, Dt_x_ptr, Dt_fidx, Dt_fval, i, acc)
    for c in range(Q_fcnt[i]):
        mark[Q_fk[i, c], Q_fl[i, c]] = 1
    for k in range(K):
        ml_uni_step(i, k, Dt, Q, E, T, K, s, rho, acc[k], mark, tub)
    for c in range(Q_fcnt[i]):
        mark[Q_fk[i, c], Q_fl[i, c]] = 0
    counters[ML_C_UNI] += K
    if K > 1:
        ml_greedy_add(i, Dt, Q, T, cfg, scratch, counters, tub)
    for c in range(Q_fcnt[i]):
        ml_pair_step(i, c, Q, T, s, rho, scratch, tub, Dt_cw[i])
    counters[ML_C_PAIR] += Q_fcnt[i]


@njit(**_JIT)
def ml_run_pass(order, Dt, Q, E, T, cfg, counters, tub):
    """``inner`` sweeps over each example of ``order``, then (``mult``) the multiplier step on
    each of them; returns the squared consistency residual of the active factors. ``tub``: the
    interaction-weight bound of ``ml_t_bound`` (kept valid), ``full``: see ``ml_greedy_add``."""
    _, _, _, eta, grow, _, inner, mult, _ = cfg
    _, _, _, _, _, _, Dt_alive, _ = Dt
    Q_u, _, _, _, _, _, _, _ = Q
    scratch = ml_scratch(Q_u.shape[1], grow)
    for j in range(order.shape[0]):
        i = order[j]
        if Dt_alive[i]:
            for r in range(inner):
                ml_example_pass(i, Dt, Q, E, T, cfg, scratch, counters, tub)
    res = 0.0
    if mult:
        for j in range(order.shape[0]):
            i = order[j]
            if Dt_alive[i]:
                res += ml_multiplier_step(i, Q, eta)
    return res


@njit(**_JIT)
def ml_implicit_t_add(i, Dt, Q, T, K, c, tub):
    """T[k, l] += c (ybar_k ybar_l - u_k u_l) over the *inactive* factors of example i (their
    implicit pair statistic); keeps ``tub`` a bound."""
    _, _, _, _, _, Dt_Y, _, _ = Dt
    Q_u, _, Q_fk, Q_fl, _, _, Q_fcnt, _ = Q
    for k in range(K):
        yk = Dt_Y[i, k]
        uk = Q_u[i, k]
        if yk == 0.0 and uk == 0.0:
            continue
        for l in range(k + 1, K):
            v = yk * Dt_Y[i, l] - uk * Q_u[i, l]
            if v != 0.0:
                T[k, l] += c * v
                _ml_tub_raise(tub, k, l, T[k, l])
    for f in range(Q_fcnt[i]):   # active factors: undo the above
        k = Q_fk[i, f]
        l = Q_fl[i, f]
        v = Dt_Y[i, k] * Dt_Y[i, l] - Q_u[i, k] * Q_u[i, l]
        if v != 0.0:
            T[k, l] -= c * v
            _ml_tub_raise(tub, k, l, T[k, l])


@njit(**_JIT)
def ml_remove_example(i, Dt, Q, E, T, K, tub):
    """Subtract example i's contribution from the weights (eviction); keeps ``tub`` a bound."""
    Dt_x_ptr, Dt_fidx, Dt_fval, _, _, Dt_Y, Dt_alive, Dt_cw = Dt
    Q_u, _, Q_fk, Q_fl, Q_fz, _, Q_fcnt, _ = Q
    cw = Dt_cw[i]
    for k in range(K):
        d = (Dt_Y[i, k] - Q_u[i, k]) * cw
        if d != 0.0:
            for p in range(Dt_x_ptr[i], Dt_x_ptr[i + 1]):
                E[Dt_fidx[p], k] -= d * Dt_fval[p]
    ml_implicit_t_add(i, Dt, Q, T, K, -cw, tub)
    for c in range(Q_fcnt[i]):
        k = Q_fk[i, c]
        l = Q_fl[i, c]
        T[k, l] -= (Dt_Y[i, k] * Dt_Y[i, l] - Q_fz[i, c, 2]) * cw
        _ml_tub_raise(tub, k, l, T[k, l])
    Dt_alive[i] = False


@njit(**_JIT)
def _ml_coupling(kind, uk, ul, yk, yl):
    """E[y_k y_l] under a coupling of two Bernoulli labels driven by one uniform U: kind 0
    comonotone values (y = [U < u]): min(u_k, u_l); kind 1 comonotone flips away from the
    ground truth (flip = [U < |u - ybar|], as when a loss-augmented labeling flips several
    labels at once)."""
    if kind == 0:
        return min(uk, ul)
    vk = abs(uk - yk)
    vl = abs(ul - yl)
    if yk == 1.0 and yl == 1.0:
        return 1.0 - max(vk, vl)
    if yk == 1.0:
        return max(0.0, vl - vk)
    if yl == 1.0:
        return max(0.0, vk - vl)
    return min(vk, vl)


@njit(**_JIT)
def ml_certificate_sums(Dt, Q, E, T, K, s, exact_primal):
    """Certificate sums over the held examples. Per example:

    * the exact hinge max_y [s <U, phi(x, y) - phi(x, ybar)> + Delta] by enumeration
      (``exact_primal``; K <= 16);
    * the dual loss delta_i^T u_i;
    * the *local* repair: every pairwise marginal q_kl clipped into the local polytope given
      (u_k, u_l) (inactive factors: their implicit u_k u_l, already inside) -- a point of the LP
      relaxation's dual;
    * a *distribution* repair: a distribution over labelings with unigram marginals u, so a
      feasible dual point of the exact problem. Labels with integral u_k are deterministic; with
      at most two fractional labels the local repair's q of that pair is realized exactly (a
      single edge is a tree); with more, the pair statistics are those of a mixture
      theta * coupling + (1 - theta) * independent labels, with the coupling (``_ml_coupling``)
      and theta fitted by least squares to the local repair's q.

    Returns (hinge_sum, dloss_sum, sq_dist, sq_local, residual_sq) where sq_* = ||U_T'||^2 of
    the repaired points (upper triangle) and residual_sq the squared consistency residual of
    the active factors (the inactive ones have none by definition)."""
    Dt_x_ptr, Dt_fidx, Dt_fval, _, Dt_Ki, Dt_Y, Dt_alive, Dt_cw = Dt
    Q_u, _, Q_fk, Q_fl, Q_fz, _, Q_fcnt, _ = Q
    Kc = Q_u.shape[1]
    n = Dt_alive.shape[0]
    Tp = np.zeros((K, K))
    Tl = np.zeros((K, K))
    Ml = np.zeros((K, K))
    acc = np.zeros(Kc)
    S = np.zeros((1, Kc))
    ybuf = np.zeros(Kc, dtype=np.int32)
    best_m = np.zeros(K + 1)
    lab = np.zeros(K, dtype=np.int32)
    frac = np.zeros(K, dtype=np.int64)
    hinge = 0.0
    dloss = 0.0
    resid = 0.0
    for i in range(n):
        if not Dt_alive[i]:
            continue
        Ki = Dt_Ki[i]
        cw = Dt_cw[i]
        nf = 0
        for k in range(K):
            yk = Dt_Y[i, k]
            uk = Q_u[i, k]
            dloss += cw * (((1.0 - uk) if yk == 1.0 else uk) / Ki)
            if 1e-12 < uk < 1.0 - 1e-12:
                frac[nf] = k
                nf += 1
            for l in range(k + 1, K):
                ul = Q_u[i, l]
                Ml[k, l] = min(max(uk * ul, max(0.0, uk + ul - 1.0)), min(uk, ul))
        for c in range(Q_fcnt[i]):
            k = Q_fk[i, c]
            l = Q_fl[i, c]
            uk = Q_u[i, k]
            ul = Q_u[i, l]
            Ml[k, l] = min(max(Q_fz[i, c, 2], max(0.0, uk + ul - 1.0)), min(uk, ul))
            resid += (Q_fz[i, c, 0] - uk) ** 2 + (Q_fz[i, c, 1] - ul) ** 2
        for k in range(K):
            uk = Q_u[i, k]
            for l in range(k + 1, K):
                t = Dt_Y[i, k] * Dt_Y[i, l]
                Tl[k, l] += cw * (t - Ml[k, l])
                Tp[k, l] += cw * (t - uk * Q_u[i, l])   # independent coupling; corrected below
        if nf == 2:
            k = frac[0]
            l = frac[1]
            Tp[k, l] -= cw * (Ml[k, l] - Q_u[i, k] * Q_u[i, l])
        elif nf > 2:
            best_r = np.inf
            best_th = 0.0
            best_c = 0
            for cp in range(2):
                num = 0.0
                den = 0.0
                r0 = 0.0
                for a in range(nf):
                    k = frac[a]
                    for b in range(a + 1, nf):
                        l = frac[b]
                        p = Q_u[i, k] * Q_u[i, l]
                        dm = _ml_coupling(cp, Q_u[i, k], Q_u[i, l], Dt_Y[i, k], Dt_Y[i, l]) - p
                        num += dm * (Ml[k, l] - p)
                        den += dm * dm
                        r0 += (Ml[k, l] - p) ** 2
                th = 0.0
                if den > 0.0:
                    th = min(max(num / den, 0.0), 1.0)
                r = r0 - 2.0 * th * num + th * th * den
                if r < best_r:
                    best_r = r
                    best_th = th
                    best_c = cp
            for a in range(nf):
                k = frac[a]
                for b in range(a + 1, nf):
                    l = frac[b]
                    p = Q_u[i, k] * Q_u[i, l]
                    Tp[k, l] -= cw * best_th * (_ml_coupling(best_c, Q_u[i, k], Q_u[i, l], Dt_Y[i, k], Dt_Y[i, l]) - p)
        if exact_primal:
            ml_scores(E, K, Dt_x_ptr, Dt_fidx, Dt_fval, i, acc)
            ts = 0.0
            for k in range(K):
                S[0, k] = s * acc[k]
                ybuf[k] = np.int32(Dt_Y[i, k])
            for k in range(K):
                if ybuf[k]:
                    ts += S[0, k]
                    for l in range(k + 1, K):
                        if ybuf[l]:
                            ts += s * T[k, l]
            v = _mrf_enum(S, T, s, K, ybuf, 0, 1.0, Ki, 0.0, best_m, lab)
            hinge += cw * (v - ts)
    sqp = 0.0
    sql = 0.0
    for k in range(K):
        for l in range(k + 1, K):
            sqp += Tp[k, l] ** 2
            sql += Tl[k, l] ** 2
    return hinge, dloss, sqp, sql, resid
