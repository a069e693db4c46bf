"""Numba kernels of GDMM for chains (Yen, Huang, Zhong, Zhang, Ravikumar, Dhillon, "Dual
Decomposed Learning with Factorwise Oracles for Structural SVMs of Large Output Domain", NIPS
2016). Pairwise multi-label: :mod:`streamssvm._kernels.gdmm_multilabel`; the bundles the kernels
take -- ``Dt`` (:data:`~streamssvm._kernels.gdmm.ChainData`), ``dual`` = (U, B) (``ChainDual``), ``W``
(``ChainWeights``), ``M`` (``ChainModel``), ``cfg`` (``ChainStep``), ``work`` (``ChainWork``), ``cand``
(``Candidates``) -- are declared in :mod:`streamssvm._kernels.gdmm`.

Notation (all per held example, n examples held, s = 1 / (lam n)):

* unigram factor of token t: marginal mu_t over the K labels (a simplex), stored sparsely over
  its active set A_t (ground truth first); feature map x~_t (x) e_y with
  x~_t = [first?, last?, x_t] (start / end indicators, then the token's features);
* bigram factor f = (t, t + 1): marginal mu_f over label pairs, sparse over its active pairs;
  feature map e_(a, b) (the transition table);
* consistency constraints  rowsum(mu_f) = mu_t,  colsum(mu_f) = mu_{t+1}  with scaled
  multipliers lamR_t (right bigram of t) and lamL_{t+1} (left bigram of t + 1), stored on the
  active labels of the token;
* unnormalized weights U = sum_i sum_f Phi_f^T (e_ytrue_f - mu_f): ``Wu`` ((2 + d) x labels,
  feature-major so that scoring all labels streams contiguous rows; rows 0 / 1 the start /
  end biases) and ``T`` (labels x labels); w = s U.

The augmented Lagrangian minimized per pass (scaled by n; the paper's (12) with
alpha_f = C (e_ytrue - mu_f), C = 1 / (lam n)):

    L(mu, lam') = (s / 2) ||U(mu)||^2 - sum_t delta_t^T mu_t
                  + (rho / 2) sum_(t, f) ||M_tf mu_f - mu_t + lam'_tf||^2

so the gradient w.r.t. mu_t(y) is -(s <U, phi_t(y)> + delta_t(y)) - rho sum_f m_tf(y) and the
one w.r.t. mu_f(a, b) is -s T[a, b] + rho (m_t,f(a) + m_t+1,f(b)). (The paper's dual (10)
prints "- delta^T alpha"; in the alpha parametrization the loss term must be "+ delta^T alpha"
for the oracle to return the loss-augmented label; tests/test_gdmm.py checks the sign: at
w = 0 the unigram oracle returns the label of largest loss.)

Example weights (``learn(..., weight=c)``): the objective lam/2 ||w||^2 + (1/N) sum_i c_i H_i(w),
N = sum_i c_i (BCFW's normalization), whose dual is BCFW's with example i's block scaled by c_i:
w = s U with s = 1 / (lam N) and U = sum_i c_i sum_f Phi_f^T (e_ytrue_f - mu_f), the loss term
sum_i c_i delta_i^T mu_i, each mu_f still a distribution. Times N the augmented Lagrangian is

    L_c(mu, lam') = (s / 2) ||U(mu)||^2 - sum_i c_i delta_i^T mu_i
                    + (rho / 2) sum_(t, f) ||M_tf mu_f - mu_t + lam'_tf||^2,

the consistency constraints unchanged (they are per example and homogeneous, so the penalty
stays rho: any positive penalty has the same saddle points). On example i's factors the
gradient's score and loss terms scale by c_i and the curvature of the ||U||^2 term by c_i^2
(unigram h = s c^2 |x~_t|^2 + rho * neighbours; bigram s c^2 ||d||^2 + rho (...)), and a change
of mu moves U by c_i times it. Per token ``Dt.cw`` holds its example's weight (1.0 unweighted:
every product by 1.0 is exact, so the unweighted trajectory is bit-identical). Weight 2 is the
objective of the example held twice -- not the same trajectory (one block instead of two).

Block solvers: unigram blocks have an isotropic Hessian (s |x~_t|^2 + rho * neighbours) I, so
the exact minimizer over the active set is one Euclidean projection onto the simplex; bigram
blocks have Hessian s I + rho (M_1^T M_1 + M_2^T M_2): projected steps with an isotropic
majorizer followed by an exact line search along the step (curvature d^T H d counted once),
repeated ``qp_iters`` times. The paper's block solvers (``SOLVER_FW``: one Frank-Wolfe step per
factor, its Algorithm 4; ``SOLVER_AFW``: away-step Frank-Wolfe until a non-drop step, its
Algorithm 2) move towards the oracle's vertex (or away from the worst active one) with the exact
step <g, d> / d^T H d, the same curvature counted once.

Bigram oracle ("heap"): the table T sits in a global max-heap plus one heap per row and one
per column; labels split by the sign of their augment (-rho m): both positive -> enumerate;
one positive -> walk that row / column heap until the bound drops below the best; neither ->
walk the global heap likewise. Exact. ``"brute"`` scans the K^2 table.
"""
import numpy as np
from numba import njit

from .gdmm import (_JIT, C_BI_CALLS, C_BI_TOUCH_MAX, C_BI_TOUCHED, C_FULL, C_UNI_CALLS, C_UNI_TOUCHED,
                   ORACLE_BRUTE, SOLVER_AFW, SOLVER_QP, UNI_SLICE)


# ---------------------------------------------------------------------------- heaps
@njit(**_JIT)
def heap_sift_up(h, pos, vals, i):
    k = h[i]
    v = vals[k]
    while i > 0:
        p = (i - 1) >> 1
        if vals[h[p]] >= v:
            break
        h[i] = h[p]
        pos[h[i]] = i
        i = p
    h[i] = k
    pos[k] = i


@njit(**_JIT)
def heap_sift_down(h, pos, vals, i, n):
    k = h[i]
    v = vals[k]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and vals[h[c + 1]] > vals[h[c]]:
            c += 1
        if vals[h[c]] <= v:
            break
        h[i] = h[c]
        pos[h[i]] = i
        i = c
    h[i] = k
    pos[k] = i


@njit(**_JIT)
def heap_update(h, pos, vals, key, n):
    i = pos[key]
    heap_sift_up(h, pos, vals, i)
    heap_sift_down(h, pos, vals, pos[key], n)


@njit(**_JIT)
def build_heaps(T, K, Kc, H):
    """(Re)build all heaps over the K x K table (keys of the global heap: a * Kc + b)."""
    H_g, H_gpos, H_r, H_rpos, H_c, H_cpos = H
    Tf = T.ravel()
    n = 0
    for a in range(K):
        for b in range(K):
            H_g[n] = a * Kc + b
            H_gpos[a * Kc + b] = n
            n += 1
    for i in range(n // 2 - 1, -1, -1):
        heap_sift_down(H_g, H_gpos, Tf, i, n)
    for a in range(K):
        for b in range(K):
            H_r[a, b] = b
            H_rpos[a, b] = b
            H_c[a, b] = b
            H_cpos[a, b] = b
        for i in range(K // 2 - 1, -1, -1):
            heap_sift_down(H_r[a], H_rpos[a], T[a], i, K)
            heap_sift_down(H_c[a], H_cpos[a], T[:, a], i, K)


@njit(**_JIT)
def heap_t_changed(T, K, Kc, H, a, b):
    H_g, H_gpos, H_r, H_rpos, H_c, H_cpos = H
    heap_update(H_g, H_gpos, T.ravel(), a * Kc + b, K * K)
    heap_update(H_r[a], H_rpos[a], T[a], b, K)
    heap_update(H_c[b], H_cpos[b], T[:, b], a, K)


@njit(**_JIT)
def check_heaps(T, K, Kc, H):
    """True when every heap satisfies the heap property and its position index (tests)."""
    H_g, H_gpos, H_r, H_rpos, H_c, H_cpos = H
    Tf = T.ravel()
    for i in range(1, K * K):
        if Tf[H_g[(i - 1) >> 1]] < Tf[H_g[i]]:
            return False
        if H_gpos[H_g[i]] != i:
            return False
    for a in range(K):
        for i in range(1, K):
            if T[a, H_r[a, (i - 1) >> 1]] < T[a, H_r[a, i]]:
                return False
            if T[H_c[a, (i - 1) >> 1], a] < T[H_c[a, i], a]:
                return False
            if H_rpos[a, H_r[a, i]] != i or H_cpos[a, H_c[a, i]] != i:
                return False
    return True


@njit(**_JIT)
def _aux_push(aux, auxv, na, p, v):
    """Push heap position p with value v on the auxiliary max-heap; returns (aux, auxv, na)
    (grown when full)."""
    if na >= aux.shape[0]:
        a2 = np.empty(2 * aux.shape[0], dtype=aux.dtype)
        v2 = np.empty(2 * aux.shape[0])
        a2[:na] = aux[:na]
        v2[:na] = auxv[:na]
        aux, auxv = a2, v2
    i = na
    while i > 0:
        q = (i - 1) >> 1
        if auxv[q] >= v:
            break
        aux[i] = aux[q]
        auxv[i] = auxv[q]
        i = q
    aux[i] = p
    auxv[i] = v
    return aux, auxv, na + 1


@njit(**_JIT)
def _aux_pop(aux, auxv, na):
    """Pop the max; returns (position, new size)."""
    top = aux[0]
    na -= 1
    if na > 0:
        p = aux[na]
        v = auxv[na]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= na:
                break
            if c + 1 < na and auxv[c + 1] > auxv[c]:
                c += 1
            if auxv[c] <= v:
                break
            aux[i] = aux[c]
            auxv[i] = auxv[c]
            i = c
        aux[i] = p
        auxv[i] = v
    return top, na


# ---------------------------------------------------------------------------- bigram oracle
@njit(**_JIT)
def _walk_line(M, K, s, r, h, ra, augO, mkO, best, aux, auxv):
    """Best s M[r, o] + ra + augO[o] over the labels o without a message (mkO[o] == 0), walking
    the max-heap ``h`` of row r of M in decreasing order until the bound s M[r, o] + ra drops to
    ``best`` (cases (ii) / (iii) of the bigram oracle; M is T or its transpose). Returns (best,
    o or -1 when nothing beat ``best``, entries touched, aux, auxv)."""
    bo = -1
    touched = 0
    na = 0
    aux, auxv, na = _aux_push(aux, auxv, na, 0, M[r, h[0]])
    while na > 0:
        p, na = _aux_pop(aux, auxv, na)
        o = h[p]
        tv = s * M[r, o]
        touched += 1
        if tv + ra <= best:
            break
        if mkO[o] == 0:
            v = tv + ra + augO[o]
            if v > best:
                best = v
                bo = o
        for c in (2 * p + 1, 2 * p + 2):
            if c < K:
                aux, auxv, na = _aux_push(aux, auxv, na, c, M[r, h[c]])
    return best, bo, touched, aux, auxv


@njit(**_JIT)
def bigram_oracle(mode, T, K, Kc, s, left, right, H, SC, counters):
    """argmax_(a, b) s T[a, b] + augL[a] + augR[b] over a, b < K.

    ``left`` / ``right`` (:data:`~streamssvm._kernels.gdmm.OracleSide`): ``augL`` / ``augR`` dense
    (zero outside the active labels), ``posL`` / ``posR`` the labels whose augment is > 0 (``nposL``
    / ``nposR`` of them), ``mkL`` / ``mkR`` flag them. Returns (a, b, value)."""
    augL, posL, nposL, mkL = left
    augR, posR, nposR, mkR = right
    H_g, _, H_r, _, H_c, _ = H
    _, _, _, _, _, _, SC_aux, SC_auxv, _, _, _, _, _ = SC
    best = -np.inf
    ba = 0
    bb = 0
    touched = 0
    if mode == ORACLE_BRUTE:
        for a in range(K):
            ra = augL[a]
            for b in range(K):
                v = s * T[a, b] + ra + augR[b]
                if v > best:
                    best = v
                    ba = a
                    bb = b
        touched = K * K
    else:
        # (i) both augments positive: enumerate
        for i in range(nposL):
            a = posL[i]
            for j in range(nposR):
                b = posR[j]
                v = s * T[a, b] + augL[a] + augR[b]
                touched += 1
                if v > best:
                    best = v
                    ba = a
                    bb = b
        aux = SC_aux
        auxv = SC_auxv
        # (ii) a positive, b not: walk row heap of a
        for i in range(nposL):
            a = posL[i]
            best, o, tch, aux, auxv = _walk_line(T, K, s, a, H_r[a], augL[a], augR, mkR, best, aux, auxv)
            touched += tch
            if o >= 0:
                ba = a
                bb = o
        # (iii) b positive, a not: walk column heap of b (the row walk on the transposed table)
        for j in range(nposR):
            b = posR[j]
            best, o, tch, aux, auxv = _walk_line(T.T, K, s, b, H_c[b], augR[b], augL, mkL, best, aux, auxv)
            touched += tch
            if o >= 0:
                ba = o
                bb = b
        # (iv) neither positive: walk the global heap
        Tf = T.ravel()
        g = H_g
        n = K * K
        na = 0
        aux, auxv, na = _aux_push(aux, auxv, na, 0, Tf[g[0]])
        while na > 0:
            p, na = _aux_pop(aux, auxv, na)
            key = g[p]
            tv = s * Tf[key]
            touched += 1
            if tv <= best:
                break
            a = key // Kc
            b = key - a * Kc
            if mkL[a] == 0 and mkR[b] == 0:
                v = tv + augL[a] + augR[b]
                if v > best:
                    best = v
                    ba = a
                    bb = b
            for c in (2 * p + 1, 2 * p + 2):
                if c < n:
                    aux, auxv, na = _aux_push(aux, auxv, na, c, Tf[g[c]])
    counters[C_BI_CALLS] += 1
    counters[C_BI_TOUCHED] += touched
    if touched > counters[C_BI_TOUCH_MAX]:
        counters[C_BI_TOUCH_MAX] = touched
    return ba, bb, best


# ---------------------------------------------------------------------------- helpers
@njit(**_JIT)
def project_simplex(v, m, out, buf):
    """Euclidean projection of v[:m] onto the probability simplex into out[:m] (O(m^2) sort
    of the small active set into ``buf``)."""
    for i in range(m):
        buf[i] = v[i]
    # insertion sort, descending
    for i in range(1, m):
        x = buf[i]
        j = i - 1
        while j >= 0 and buf[j] < x:
            buf[j + 1] = buf[j]
            j -= 1
        buf[j + 1] = x
    cs = 0.0
    theta = 0.0
    for i in range(m):
        cs += buf[i]
        t = (cs - 1.0) / (i + 1)
        if buf[i] - t > 0:
            theta = t
    for i in range(m):
        x = v[i] - theta
        out[i] = x if x > 0.0 else 0.0


@njit(**_JIT)
def uni_score(Wu, y, tok_ptr, fidx, fval, t, first, last):
    """<U_y, x~_t> (unscaled)."""
    v = 0.0
    if first:
        v += Wu[0, y]
    if last:
        v += Wu[1, y]
    for p in range(tok_ptr[t], tok_ptr[t + 1]):
        v += Wu[2 + fidx[p], y] * fval[p]
    return v


@njit(**_JIT)
def uni_scores_all(Wu, K, tok_ptr, fidx, fval, t, first, last, acc):
    """acc[y] = <U_y, x~_t> for every y < K (feature-major: contiguous rows)."""
    for y in range(K):
        acc[y] = 0.0
    if first:
        for y in range(K):
            acc[y] += Wu[0, y]
    if last:
        for y in range(K):
            acc[y] += Wu[1, y]
    for p in range(tok_ptr[t], tok_ptr[t + 1]):
        row = Wu[2 + fidx[p]]
        v = fval[p]
        for y in range(K):
            acc[y] += v * row[y]


@njit(**_JIT)
def uni_axpy(Wu, y, tok_ptr, fidx, fval, t, first, last, c):
    if first:
        Wu[0, y] += c
    if last:
        Wu[1, y] += c
    for p in range(tok_ptr[t], tok_ptr[t + 1]):
        Wu[2 + fidx[p], y] += c * fval[p]


@njit(**_JIT)
def _find(arr, n, x):
    for i in range(n):
        if arr[i] == x:
            return i
    return -1


@njit(**_JIT)
def _uni_add(U, B, t, y, has_left, has_right):
    """Add label y to A_t (mu 0); evicts a removable entry when full. Returns the slot or -1."""
    U_lab, U_mu, U_lamL, U_lamR, U_cnt = U
    B_a, B_b, _, B_cnt = B
    n = U_cnt[t]
    cap = U_lab.shape[1]
    if n < cap:
        U_lab[t, n] = y
        U_mu[t, n] = 0.0
        U_lamL[t, n] = 0.0
        U_lamR[t, n] = 0.0
        U_cnt[t] = n + 1
        return n
    for k in range(1, n):  # slot 0 is the ground truth
        if U_mu[t, k] != 0.0 or U_lamL[t, k] != 0.0 or U_lamR[t, k] != 0.0:
            continue
        z = U_lab[t, k]
        used = False
        if has_right:
            for q in range(B_cnt[t]):
                if B_a[t, q] == z:
                    used = True
                    break
        if not used and has_left:
            for q in range(B_cnt[t - 1]):
                if B_b[t - 1, q] == z:
                    used = True
                    break
        if used:
            continue
        U_lab[t, k] = y
        U_mu[t, k] = 0.0
        return k
    return -1


@njit(**_JIT)
def _bi_add(B, f, a, b):
    B_a, B_b, B_mu, B_cnt = B
    n = B_cnt[f]
    cap = B_a.shape[1]
    if n < cap:
        B_a[f, n] = a
        B_b[f, n] = b
        B_mu[f, n] = 0.0
        B_cnt[f] = n + 1
        return n
    for k in range(1, n):
        if B_mu[f, k] == 0.0:
            B_a[f, k] = a
            B_b[f, k] = b
            return k
    return -1


@njit(**_JIT)
def msg_right(U, B, t, k):
    """m_(t, f=t)(y) for the k-th active label y of token t: rowsum(mu_f)(y) - mu_t(y) + lamR."""
    U_lab, U_mu, _, U_lamR, _ = U
    B_a, _, B_mu, B_cnt = B
    y = U_lab[t, k]
    r = 0.0
    for q in range(B_cnt[t]):
        if B_a[t, q] == y:
            r += B_mu[t, q]
    return r - U_mu[t, k] + U_lamR[t, k]


@njit(**_JIT)
def msg_left(U, B, t, k):
    """m_(t, f=t-1)(y): colsum(mu_(t-1))(y) - mu_t(y) + lamL."""
    U_lab, U_mu, U_lamL, _, _ = U
    _, B_b, B_mu, B_cnt = B
    y = U_lab[t, k]
    r = 0.0
    for q in range(B_cnt[t - 1]):
        if B_b[t - 1, q] == y:
            r += B_mu[t - 1, q]
    return r - U_mu[t, k] + U_lamL[t, k]


# ---------------------------------------------------------------------------- block steps
@njit(**_JIT)
def uni_step(t, has_left, has_right, rslice, Dt, dual, W, M, cfg, work, cand):
    """One block step on the unigram factor of token t: the oracle, then (``SOLVER_QP``) the
    exact minimizer over the active set -- a projection, the Hessian being isotropic -- or
    (``SOLVER_FW`` / ``SOLVER_AFW``) one Frank-Wolfe / away-step Frank-Wolfe step with exact line
    search (``rslice``: the first label of the sampled oracle's slice). Returns True after an
    away-step drop step (the caller repeats the block)."""
    U, B = dual
    Wu, _, _, A = W
    K, _, _, C = M
    s, rho, _, _, uni_mode, nu, _, _, solver, _, _, _ = cfg
    SC, counters = work
    cptr, cands = cand
    _, _, Dt_tok_ptr, Dt_fidx, Dt_fval, Dt_ytrue, Dt_xsq, Dt_first, Dt_last, Dt_linv, Dt_cw = Dt
    U_lab, U_mu, _, _, U_cnt = U
    A_ZW, _, A_coef = A
    _, _, SC_mkL, _, _, _, _, SC_auxv, SC_fbuf, _, _, SC_changed, SC_uacc = SC
    tok_ptr, fidx, fval = Dt_tok_ptr, Dt_fidx, Dt_fval
    first = Dt_first[t]
    last = Dt_last[t]
    yt = Dt_ytrue[t]
    c = Dt_cw[t]        # the example's weight: its score and loss terms scale by c (module doc)
    lw = Dt_linv[t] * c
    sc = s * c
    n = U_cnt[t]
    g = SC_fbuf        # gradient of the active labels (negated: the "score" to maximize)
    mk = SC_mkL
    for k in range(n):
        y = U_lab[t, k]
        mk[y] = 1
        m = 0.0
        if has_right:
            m += msg_right(U, B, t, k)
        if has_left:
            m += msg_left(U, B, t, k)
        g[k] = sc * uni_score(Wu, y, tok_ptr, fidx, fval, t, first, last) + lw * C[yt, y] + rho * m
    # oracle outside the active set (messages are zero there)
    best = -np.inf
    arg = -1
    touched = 0
    if uni_mode == UNI_SLICE and nu == 1:
        acc = SC_uacc
        uni_scores_all(Wu, K, tok_ptr, fidx, fval, t, first, last, acc)
        for y in range(K):
            if mk[y] == 0:
                v = sc * acc[y] + lw * C[yt, y]
                if v > best:
                    best = v
                    arg = y
        touched = K - n
    elif uni_mode == UNI_SLICE:
        y = rslice
        while y < K:
            if mk[y] == 0:
                v = sc * uni_score(Wu, y, tok_ptr, fidx, fval, t, first, last) + lw * C[yt, y]
                touched += 1
                if v > best:
                    best = v
                    arg = y
            y += nu
    else:
        for q in range(cptr[t], cptr[t + 1]):
            y = cands[q]
            if y < 0 or y >= K or mk[y] != 0:
                continue
            v = sc * uni_score(Wu, y, tok_ptr, fidx, fval, t, first, last) + lw * C[yt, y]
            touched += 1
            if v > best:
                best = v
                arg = y
    for k in range(n):
        mk[U_lab[t, k]] = 0
    counters[C_UNI_CALLS] += 1
    counters[C_UNI_TOUCHED] += touched
    h = sc * c * Dt_xsq[t] + rho * (has_left + has_right)
    if solver != SOLVER_QP:
        # Frank-Wolfe vertex: the best active label, or the oracle's when it scores higher
        fw = 0
        for k in range(1, n):
            if g[k] > g[fw]:
                fw = k
        if arg >= 0 and best > g[fw]:
            k = _uni_add(U, B, t, arg, has_left, has_right)
            if k < 0:
                counters[C_FULL] += 1
            else:
                g[k] = best
                fw = k
                if k >= n:
                    n = k + 1
        return _uni_fw_step(t, n, fw, g, h, Dt, U, Wu, SC, A, solver == SOLVER_AFW)
    # add the oracle's label when it is a descent direction (its score beats a label in use)
    if arg >= 0:
        worst = np.inf
        for k in range(n):
            if U_mu[t, k] > 0.0 and g[k] < worst:
                worst = g[k]
        if best > worst + 1e-12:
            k = _uni_add(U, B, t, arg, has_left, has_right)
            if k < 0:
                counters[C_FULL] += 1
            else:
                g[k] = best
                if k >= n:
                    n = k + 1
    # exact minimizer over the active set: mu <- P(mu + g / h)
    tmp = SC_auxv
    if tmp.shape[0] < 3 * n:
        tmp = np.empty(3 * n)
    for k in range(n):
        tmp[k] = U_mu[t, k] + g[k] / h
    project_simplex(tmp, n, tmp[n:2 * n], tmp[2 * n:3 * n])
    for k in range(n):
        d = tmp[n + k] - U_mu[t, k]
        if d != 0.0:
            U_mu[t, k] = tmp[n + k]
            y = U_lab[t, k]
            uni_axpy(Wu, y, tok_ptr, fidx, fval, t, first, last, -d * c)
            if A_coef[0] > 0.0:
                uni_axpy(A_ZW, y, tok_ptr, fidx, fval, t, first, last, -d * c * A_coef[0])
            SC_changed[y] = 1
    return False


@njit(**_JIT)
def _fw_direction(mu, g, n, fw, away):
    """Choose between the Frank-Wolfe direction e_fw - mu and (``away``) the away direction
    mu - e_v, v the active vertex of lowest score (Lacoste-Julien and Jaggi, "On the Global Linear
    Convergence of Frank-Wolfe Optimization Variants", NIPS 2015; Yen et al. 2016, Algorithm 2,
    (16)-(17)). ``g`` is the negated gradient. Returns (is_away, vertex, <g, d>, largest step)."""
    mg = 0.0
    for k in range(n):
        mg += mu[k] * g[k]
    lin = g[fw] - mg
    if not away:
        return False, fw, lin, 1.0
    v = -1
    for k in range(n):
        if mu[k] > 0.0 and (v < 0 or g[k] < g[v]):
            v = k
    if v < 0 or mu[v] >= 1.0:
        return False, fw, lin, 1.0
    lin_a = mg - g[v]
    if lin_a > lin:
        return True, v, lin_a, mu[v] / (1.0 - mu[v])
    return False, fw, lin, 1.0


@njit(**_JIT)
def _fw_fill(mu, n, is_away, v, d):
    """d[:n] = e_v - mu (Frank-Wolfe) or mu - e_v (away); returns ||d||^2."""
    dd = 0.0
    for k in range(n):
        x = -mu[k]
        if k == v:
            x += 1.0
        if is_away:
            x = -x
        d[k] = x
        dd += x * x
    return dd


@njit(**_JIT)
def _uni_fw_step(t, n, fw, g, h, Dt, U, Wu, SC, A, away):
    """One (away-step) Frank-Wolfe step on the unigram block of token t with exact line search:
    along d the augmented Lagrangian is <-g, d> gamma + (h / 2) ||d||^2 gamma^2 (isotropic block
    Hessian h I, h = s |x~_t|^2 + rho * neighbours). Returns True for a drop step."""
    _, _, Dt_tok_ptr, Dt_fidx, Dt_fval, _, _, Dt_first, Dt_last, _, Dt_cw = Dt
    U_lab, U_mu, _, _, _ = U
    A_ZW, _, A_coef = A
    _, _, _, _, _, _, _, SC_auxv, _, _, _, SC_changed, _ = SC
    mu = U_mu[t]
    is_away, v, lin, gmax = _fw_direction(mu, g, n, fw, away)
    if lin <= 1e-15:
        return False
    d = SC_auxv
    if d.shape[0] < n:
        d = np.empty(n)
    dd = _fw_fill(mu, n, is_away, v, d)
    gam = lin / (h * dd)
    drop = False
    if gam >= gmax:
        gam = gmax
        drop = is_away
    tok_ptr, fidx, fval = Dt_tok_ptr, Dt_fidx, Dt_fval
    first = Dt_first[t]
    last = Dt_last[t]
    c = Dt_cw[t]
    for k in range(n):
        nv = mu[k] + gam * d[k]
        if nv < 0.0 or (drop and k == v):
            nv = 0.0
        dk = nv - mu[k]
        if dk != 0.0:
            mu[k] = nv
            y = U_lab[t, k]
            uni_axpy(Wu, y, tok_ptr, fidx, fval, t, first, last, -dk * c)
            if A_coef[0] > 0.0:
                uni_axpy(A_ZW, y, tok_ptr, fidx, fval, t, first, last, -dk * c * A_coef[0])
            SC_changed[y] = 1
    return drop


@njit(**_JIT)
def _bi_apply(f, n, d, gam, B, T, K, heaps, H, A, zero, c):
    """mu_f += gam d over the active pairs (clipped at 0; slot ``zero`` set to exactly 0: a drop
    step), with T (moving by c times the change, c the example's weight), the averaging
    accumulator and the heaps kept in step (T is the Kc x Kc table)."""
    B_a, B_b, B_mu, _ = B
    _, A_ZT, A_coef = A
    Kc = T.shape[1]
    for k in range(n):
        x = gam * d[k]
        if x != 0.0 or k == zero:
            aa = B_a[f, k]
            bb = B_b[f, k]
            nv = B_mu[f, k] + x
            if nv < 0.0 or k == zero:
                nv = 0.0
            x = nv - B_mu[f, k]
            B_mu[f, k] = nv
            x *= c
            T[aa, bb] -= x
            if A_coef[0] > 0.0:
                A_ZT[aa, bb] -= x * A_coef[0]
            if heaps:
                heap_t_changed(T, K, Kc, H, aa, bb)


@njit(**_JIT)
def _bi_curvature(f, n, d, s, rho, B, rows, cols):
    """d^T H_f d = s ||d||^2 + rho (||rowsum d||^2 + ||colsum d||^2): the table's term once,
    each consistency constraint's term once (``rows`` / ``cols`` dense, left zero)."""
    B_a, B_b, _, _ = B
    dd = 0.0
    for k in range(n):
        dd += d[k] * d[k]
        rows[B_a[f, k]] += d[k]
        cols[B_b[f, k]] += d[k]
    curv = s * dd
    for k in range(n):
        aa = B_a[f, k]
        bb = B_b[f, k]
        curv += rho * (rows[aa] * rows[aa] + cols[bb] * cols[bb])
        rows[aa] = 0.0  # each label counted once: zero after use
        cols[bb] = 0.0
    return curv


@njit(**_JIT)
def bi_step(f, a0, a1, dual, W, M, cfg, work, c=1.0):
    """Block step on the bigram factor f = (f, f + 1): oracle, then (``SOLVER_QP``) projected
    steps with an isotropic majorizer and exact line search over the active pairs, or
    (``SOLVER_FW`` / ``SOLVER_AFW``) one Frank-Wolfe / away-step Frank-Wolfe step with exact line
    search. ``c``: the example's weight (module doc). Returns True after an away-step drop step
    (the caller repeats the block)."""
    U, B = dual
    _, T, H, A = W
    K, Kc, _, _ = M
    s0, rho, _, bi_mode, _, _, qp_iters, heaps, solver, _, _, _ = cfg
    s = s0 * c          # the table's term of the gradient scales by c, of the curvature by c^2
    s2 = s * c
    SC, counters = work
    U_lab, _, _, _, U_cnt = U
    B_a, B_b, B_mu, B_cnt = B
    SC_augL, SC_augR, SC_mkL, SC_mkR, SC_rows, SC_cols, _, SC_auxv, SC_fbuf, SC_ibuf, SC_ibuf2, _, _ = SC
    t = f
    u = f + 1
    augL = SC_augL
    augR = SC_augR
    posL = SC_ibuf
    posR = SC_ibuf2
    npl = 0
    npr = 0
    for k in range(U_cnt[t]):
        y = U_lab[t, k]
        v = -rho * msg_right(U, B, t, k)
        augL[y] = v
        if v > 0.0:
            posL[npl] = y
            npl += 1
            SC_mkL[y] = 1
    for k in range(U_cnt[u]):
        y = U_lab[u, k]
        v = -rho * msg_left(U, B, u, k)
        augR[y] = v
        if v > 0.0:
            posR[npr] = y
            npr += 1
            SC_mkR[y] = 1
    a, b, best = bigram_oracle(bi_mode, T, K, Kc, s, (augL, posL, npl, SC_mkL), (augR, posR, npr, SC_mkR),
                               H, SC, counters)
    n = B_cnt[f]
    g = SC_fbuf
    worst = np.inf
    have = -1
    fw = 0
    for k in range(n):
        aa = B_a[f, k]
        bb = B_b[f, k]
        g[k] = s * T[aa, bb] + augL[aa] + augR[bb]
        if B_mu[f, k] > 0.0 and g[k] < worst:
            worst = g[k]
        if aa == a and bb == b:
            have = k
        if g[k] > g[fw]:
            fw = k
    if solver != SOLVER_QP:
        worst = g[fw]   # Frank-Wolfe: the oracle's pair is the vertex when it beats every active one
    if have < 0 and best > worst + 1e-12:
        ok = True
        if _find(U_lab[t], U_cnt[t], a) < 0:
            if _uni_add(U, B, t, a, t > a0, True) < 0:
                ok = False
        if ok and _find(U_lab[u], U_cnt[u], b) < 0:
            if _uni_add(U, B, u, b, True, u + 1 < a1) < 0:
                ok = False
        if ok:
            k = _bi_add(B, f, a, b)
            if k < 0:
                counters[C_FULL] += 1
            else:
                g[k] = best
                fw = k
                if k >= n:
                    n = k + 1
        else:
            counters[C_FULL] += 1
    # clear the dense augment buffers / marks
    for k in range(U_cnt[t]):
        y = U_lab[t, k]
        augL[y] = 0.0
        SC_mkL[y] = 0
    for k in range(U_cnt[u]):
        y = U_lab[u, k]
        augR[y] = 0.0
        SC_mkR[y] = 0
    # projected steps with exact line search; g holds -gradient at the start
    tmp = SC_auxv
    if tmp.shape[0] < 4 * n:
        tmp = np.empty(4 * n)
    rows = SC_rows
    cols = SC_cols
    if solver != SOLVER_QP:
        # (away-step) Frank-Wolfe step; exact line search on the quadratic (12) along d
        is_away, v, lin, gmax = _fw_direction(B_mu[f], g, n, fw, solver == SOLVER_AFW)
        if lin <= 1e-15:
            return False
        _fw_fill(B_mu[f], n, is_away, v, tmp)
        curv = _bi_curvature(f, n, tmp, s2, rho, B, rows, cols)
        gam = lin / curv
        drop = False
        if gam >= gmax:
            gam = gmax
            drop = is_away
        _bi_apply(f, n, tmp, gam, B, T, K, heaps, H, A, v if drop else -1, c)
        return drop
    for it in range(qp_iters):
        if it > 0:
            # refresh -gradient: s T + aug, aug = -rho m, m changes with mu_f
            _bi_neg_grad(f, U, B, T, s, rho, n, g, SC)
        # majorizer: s + rho (max pairs per left label + max pairs per right label)
        mr = 0.0
        mc = 0.0
        for k in range(n):
            rows[B_a[f, k]] += 1.0
            cols[B_b[f, k]] += 1.0
        for k in range(n):
            if rows[B_a[f, k]] > mr:
                mr = rows[B_a[f, k]]
            if cols[B_b[f, k]] > mc:
                mc = cols[B_b[f, k]]
        for k in range(n):
            rows[B_a[f, k]] = 0.0
            cols[B_b[f, k]] = 0.0
        Q = s2 + rho * (mr + mc)
        for k in range(n):
            tmp[k] = B_mu[f, k] + g[k] / Q
        project_simplex(tmp, n, tmp[n:2 * n], tmp[2 * n:3 * n])
        # direction d = proj - mu; exact step along d
        lin = 0.0
        dd = 0.0
        for k in range(n):
            d = tmp[n + k] - B_mu[f, k]
            tmp[3 * n + k] = d
            lin += g[k] * d
            dd += d * d
            rows[B_a[f, k]] += d
            cols[B_b[f, k]] += d
        curv = s2 * dd
        for k in range(n):
            aa = B_a[f, k]
            bb = B_b[f, k]
            curv += rho * (rows[aa] * rows[aa] + cols[bb] * cols[bb])
            rows[aa] = 0.0  # each label counted once: zero after use
            cols[bb] = 0.0
        if lin <= 1e-15 or curv <= 0.0:
            break
        gam = lin / curv
        if gam > 1.0:
            gam = 1.0
        _bi_apply(f, n, tmp[3 * n:4 * n], gam, B, T, K, heaps, H, A, -1, c)
    return False


@njit(**_JIT)
def _bi_neg_grad(f, U, B, T, s, rho, n, g, SC):
    U_lab, _, _, _, U_cnt = U
    B_a, B_b, _, _ = B
    SC_augL, SC_augR, _, _, _, _, _, _, _, _, _, _, _ = SC
    t = f
    u = f + 1
    augL = SC_augL
    augR = SC_augR
    for k in range(U_cnt[t]):
        augL[U_lab[t, k]] = -rho * msg_right(U, B, t, k)
    for k in range(U_cnt[u]):
        augR[U_lab[u, k]] = -rho * msg_left(U, B, u, k)
    for k in range(n):
        aa = B_a[f, k]
        bb = B_b[f, k]
        g[k] = s * T[aa, bb] + augL[aa] + augR[bb]
    for k in range(U_cnt[t]):
        augL[U_lab[t, k]] = 0.0
    for k in range(U_cnt[u]):
        augR[U_lab[u, k]] = 0.0


@njit(**_JIT)
def multiplier_step(e, Dt, dual, eta):
    """lam' += eta (M mu_f - mu_t) for every (token, bigram) pair of example e (paper eq. 13)."""
    U, B = dual
    Dt_ex_ptr, _, _, _, _, _, _, _, _, _, _ = Dt
    _, _, U_lamL, U_lamR, U_cnt = U
    a0 = Dt_ex_ptr[e]
    a1 = Dt_ex_ptr[e + 1]
    res = 0.0
    for t in range(a0, a1):
        for k in range(U_cnt[t]):
            if t + 1 < a1:
                r = msg_right(U, B, t, k) - U_lamR[t, k]
                U_lamR[t, k] += eta * r
                res += r * r
            if t > a0:
                r = msg_left(U, B, t, k) - U_lamL[t, k]
                U_lamL[t, k] += eta * r
                res += r * r
    return res


@njit(**_JIT)
def example_pass(e, Dt, dual, W, M, cfg, work, cand, seed):
    """One sweep over the factors of held example e: every unigram block, then every bigram.
    ``SOLVER_AFW`` repeats a block after a drop step (Yen et al. 2016, Algorithm 2: "until a
    non-drop step"), at most ``qp_iters`` times."""
    _, _, use_trans, _ = M
    _, _, _, _, _, nu, qp_iters, _, solver, _, _, _ = cfg
    Dt_ex_ptr, _, _, _, _, _, _, _, _, _, Dt_cw = Dt
    a0 = Dt_ex_ptr[e]
    a1 = Dt_ex_ptr[e + 1]
    np.random.seed(seed)
    reps = qp_iters if solver == SOLVER_AFW else 1
    for t in range(a0, a1):
        rs = np.random.randint(nu) if nu > 1 else 0
        has_left = use_trans and t > a0
        has_right = use_trans and t + 1 < a1
        for _ in range(reps):
            if not uni_step(t, has_left, has_right, rs, Dt, dual, W, M, cfg, work, cand):
                break
    if use_trans:
        for t in range(a0, a1 - 1):
            for _ in range(reps):
                if not bi_step(t, a0, a1, dual, W, M, cfg, work, Dt_cw[t]):
                    break


@njit(**_JIT)
def run_pass(order, Dt, dual, W, M, cfg, work, cand, seed, k0):
    """Visit each example in ``order``: ``rounds`` times ``inner`` sweeps over its factors, each
    ``inner`` sweeps followed (``mult``) by the example's multiplier step. The multipliers of an
    example only couple its own factors, so its multiplier step may follow its own sweeps at once
    (``rounds = 1`` equals the paper's Algorithm 1, all block steps of a pass then all multiplier
    steps); ``rounds > 1`` takes several local method-of-multipliers iterations per visit.
    Averaging (``A.coef[0] >= 0``): each example visit is one step of the averaging window, the
    first one the step ``k0 + 1``. Returns the squared consistency residual seen by the last
    multiplier step of each example."""
    _, _, _, A = W
    _, _, use_trans, _ = M
    _, _, eta, _, _, _, _, _, _, inner, rounds, mult = cfg
    _, Dt_ex_alive, _, _, _, _, _, _, _, _, _ = Dt
    _, _, A_coef = A
    res = 0.0
    k = k0
    for i in range(order.shape[0]):
        e = order[i]
        if Dt_ex_alive[e]:
            if A_coef[0] >= 0.0:
                k += 1
                A_coef[0] = 0.5 * k * (k - 1.0)
            for q in range(rounds):
                for r in range(inner):
                    example_pass(e, Dt, dual, W, M, cfg, work, cand,
                                 (seed + 7919 * i + 104729 * r + 15485863 * q) % 2147483647)
                if mult and use_trans:
                    rq = multiplier_step(e, Dt, dual, eta)
                    if q == rounds - 1:
                        res += rq
    return res


@njit(**_JIT)
def remove_example(e, Dt, dual, W, M, heaps):
    """Subtract example e's contribution (e_ytrue - mu) from the weights (eviction)."""
    U, B = dual
    Wu, T, H, _ = W
    K, Kc, use_trans, _ = M
    Dt_ex_ptr, Dt_ex_alive, Dt_tok_ptr, Dt_fidx, Dt_fval, Dt_ytrue, _, Dt_first, Dt_last, _, Dt_cw = Dt
    U_lab, U_mu, _, _, U_cnt = U
    B_a, B_b, B_mu, B_cnt = B
    a0 = Dt_ex_ptr[e]
    a1 = Dt_ex_ptr[e + 1]
    for t in range(a0, a1):
        yt = Dt_ytrue[t]
        for k in range(U_cnt[t]):
            y = U_lab[t, k]
            c = -U_mu[t, k]
            if y == yt:
                c += 1.0
            if c != 0.0:
                uni_axpy(Wu, y, Dt_tok_ptr, Dt_fidx, Dt_fval, t, Dt_first[t], Dt_last[t], -c * Dt_cw[t])
        if use_trans and t + 1 < a1:
            for k in range(B_cnt[t]):
                a = B_a[t, k]
                b = B_b[t, k]
                c = -B_mu[t, k]
                if a == yt and b == Dt_ytrue[t + 1]:
                    c += 1.0
                if c != 0.0:
                    T[a, b] -= c * Dt_cw[t]
                    if heaps:
                        heap_t_changed(T, K, Kc, H, a, b)
    Dt_ex_alive[e] = False


@njit(**_JIT)
def init_blocks(e, Dt, dual):
    """Put example e at its ground truth (feasible, adds nothing to the weights)."""
    U, B = dual
    Dt_ex_ptr, _, _, _, _, Dt_ytrue, _, _, _, _, _ = Dt
    U_lab, U_mu, U_lamL, U_lamR, U_cnt = U
    B_a, B_b, B_mu, B_cnt = B
    a0 = Dt_ex_ptr[e]
    a1 = Dt_ex_ptr[e + 1]
    for t in range(a0, a1):
        U_cnt[t] = 1
        U_lab[t, 0] = Dt_ytrue[t]
        U_mu[t, 0] = 1.0
        U_lamL[t, 0] = 0.0
        U_lamR[t, 0] = 0.0
        B_cnt[t] = 0
        if t + 1 < a1:
            B_cnt[t] = 1
            B_a[t, 0] = Dt_ytrue[t]
            B_b[t, 0] = Dt_ytrue[t + 1]
            B_mu[t, 0] = 1.0


# ---------------------------------------------------------------------------- certificate
@njit(**_JIT)
def repaired_unigrams(e, Dt, dual, K, use_trans, M, prev, nxt, row):
    """Dense repaired unigram marginals of example e into M[0:L, 0:K]; returns the residual
    sum_t ||mu'_t - mu_t||^2 (0 when the stored point is already consistent)."""
    U, B = dual
    Dt_ex_ptr, _, _, _, _, _, _, _, _, _, _ = Dt
    U_lab, U_mu, _, _, U_cnt = U
    B_a, B_b, B_mu, B_cnt = B
    a0 = Dt_ex_ptr[e]
    a1 = Dt_ex_ptr[e + 1]
    L = a1 - a0
    resid = 0.0
    for i in range(L):
        for y in range(K):
            M[i, y] = 0.0
    if not use_trans or L == 1:
        for t in range(a0, a1):
            for k in range(U_cnt[t]):
                M[t - a0, U_lab[t, k]] += U_mu[t, k]
        return 0.0
    for y in range(K):
        prev[y] = 0.0
    for k in range(B_cnt[a0]):
        prev[B_a[a0, k]] += B_mu[a0, k]
    for t in range(a0, a1):
        for y in range(K):
            M[t - a0, y] = prev[y]
        for k in range(U_cnt[t]):
            dlt = U_mu[t, k] - prev[U_lab[t, k]]
            resid += dlt * dlt
        if t + 1 == a1:
            break
        for y in range(K):
            nxt[y] = 0.0
            row[y] = 0.0
        for k in range(B_cnt[t]):
            row[B_a[t, k]] += B_mu[t, k]
        for k in range(B_cnt[t]):
            a = B_a[t, k]
            if row[a] > 0.0 and prev[a] > 0.0:
                nxt[B_b[t, k]] += prev[a] * B_mu[t, k] / row[a]
        for y in range(K):
            if prev[y] > 0.0 and row[y] <= 0.0:
                for k in range(U_cnt[t + 1]):
                    nxt[U_lab[t + 1, k]] += prev[y] * U_mu[t + 1, k]
        for y in range(K):
            prev[y] = nxt[y]
    return resid


@njit(**_JIT)
def repaired_pairs(e, Dt, dual, K, M, Tr, row):
    """Accumulate -mu'_f (the repaired bigram marginals, from the dense unigrams ``M``) into
    ``Tr`` and +1 on the true transitions."""
    U, B = dual
    Dt_ex_ptr, _, _, _, _, Dt_ytrue, _, _, _, _, Dt_cw = Dt
    U_lab, U_mu, _, _, U_cnt = U
    B_a, B_b, B_mu, B_cnt = B
    a0 = Dt_ex_ptr[e]
    a1 = Dt_ex_ptr[e + 1]
    for t in range(a0, a1 - 1):
        cw = Dt_cw[t]
        for y in range(K):
            row[y] = 0.0
        for k in range(B_cnt[t]):
            row[B_a[t, k]] += B_mu[t, k]
        for k in range(B_cnt[t]):
            a = B_a[t, k]
            p = M[t - a0, a]
            if row[a] > 0.0 and p > 0.0:
                Tr[a, B_b[t, k]] -= cw * (p * B_mu[t, k] / row[a])
        for y in range(K):
            p = M[t - a0, y]
            if p > 0.0 and row[y] <= 0.0:
                for k in range(U_cnt[t + 1]):
                    m = p * U_mu[t + 1, k]
                    if m > 0.0:
                        Tr[y, U_lab[t + 1, k]] -= cw * m
        Tr[Dt_ytrue[t], Dt_ytrue[t + 1]] += cw


@njit(**_JIT)
def repaired_emissions(e, Dt, K, C, M, Wr):
    """Accumulate (e_ytrue - mu'_t) x~_t of example e into ``Wr``; returns the example's dual
    loss term sum_t (1/L) sum_y C[ytrue_t, y] mu'_t(y)."""
    Dt_ex_ptr, _, Dt_tok_ptr, Dt_fidx, Dt_fval, Dt_ytrue, _, Dt_first, Dt_last, Dt_linv, Dt_cw = Dt
    a0 = Dt_ex_ptr[e]
    a1 = Dt_ex_ptr[e + 1]
    loss = 0.0
    for t in range(a0, a1):
        yt = Dt_ytrue[t]
        cw = Dt_cw[t]
        for y in range(K):
            loss += cw * (Dt_linv[t] * C[yt, y] * M[t - a0, y])
            c = -M[t - a0, y]
            if y == yt:
                c += 1.0
            if c != 0.0:
                uni_axpy(Wr, y, Dt_tok_ptr, Dt_fidx, Dt_fval, t, Dt_first[t], Dt_last[t], c * cw)
    return loss


@njit(**_JIT)
def emission_scores(Wu, K, s, tok_ptr, fidx, fval, L, first_last, S):
    """S[t, y] = s <U_y, x~_t> for a CSR of L tokens (``first_last``: add the start / end bias
    columns; pass False when the chain has no transitions)."""
    for t in range(L):
        f = first_last and t == 0
        l = first_last and t == L - 1
        row = S[t]
        uni_scores_all(Wu, K, tok_ptr, fidx, fval, t, f, l, row)
        for y in range(K):
            row[y] *= s


@njit(**_JIT)
def oracle_batch(mode, T, K, Kc, s, AUGL, AUGR, H, SC, counters, out):
    """Run the bigram oracle on each row pair of AUGL / AUGR (message patterns) inside one
    kernel call (benchmarks: no per-call dispatch); maxima into ``out``."""
    _, _, SC_mkL, SC_mkR, _, _, _, _, _, SC_ibuf, SC_ibuf2, _, _ = SC
    for i in range(AUGL.shape[0]):
        augL = AUGL[i]
        augR = AUGR[i]
        npl = 0
        npr = 0
        for y in range(K):
            if augL[y] > 0.0:
                SC_ibuf[npl] = y
                npl += 1
                SC_mkL[y] = 1
            if augR[y] > 0.0:
                SC_ibuf2[npr] = y
                npr += 1
                SC_mkR[y] = 1
        a, b, v = bigram_oracle(mode, T, K, Kc, s, (augL, SC_ibuf, npl, SC_mkL), (augR, SC_ibuf2, npr, SC_mkR),
                                H, SC, counters)
        out[i] = v
        for y in range(K):
            SC_mkL[y] = 0
            SC_mkR[y] = 0
