"""Numba kernels of GDMM for chains and for pairwise multi-label (Yen, Huang, Zhong, Zhang,
Ravikumar, Dhillon, "Dual Decomposed Learning with Factorwise Oracles for Structural SVMs of
Large Output Domain", NIPS 2016). Chains below; pairwise multi-label in the section
"multi-label, pairwise" at the end.

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
from collections import namedtuple

import numpy as np
from numba import njit

from .mrf import _mrf_enum

_JIT = dict(cache=True, nogil=True)

#: examples held: token ranges, features, labels (one entry per token unless noted)
GData = namedtuple("GData", "ex_ptr ex_alive tok_ptr fidx fval ytrue xsq first last linv")
#: unigram blocks: active labels, marginals, multipliers (left / right bigram), counts
GUni = namedtuple("GUni", "lab mu lamL lamR cnt")
#: bigram blocks (indexed by their left token): active pairs, marginals, counts
GBi = namedtuple("GBi", "a b mu cnt")
#: max-heaps over T: global (keys a * Kc + b), per row (columns), per column (rows)
GHeap = namedtuple("GHeap", "g gpos r rpos c cpos")
#: lazy weighted average of the iterates (Lacoste-Julien, Jaggi, Schmidt, Pletscher, "Block-
#: Coordinate Frank-Wolfe Optimization for Structural SVMs", ICML 2013, weights proportional to
#: the step index): ZW / ZT accumulate W_(s-1) dU so that sum_s s U_s = W_k U_k - Z with
#: W_k = k (k + 1) / 2; coef[0] = W_(s-1) of the current step, < 0 when not averaging
GAvg = namedtuple("GAvg", "ZW ZT coef")
#: scratch space (dense label-indexed buffers kept zero between calls)
GScratch = namedtuple("GScratch", "augL augR mkL mkR rows cols aux auxv fbuf ibuf ibuf2 changed uacc")

ORACLE_BRUTE = 0
ORACLE_HEAP = 1
UNI_SLICE = 0     # exact scan of a random 1/nu slice of the labels (nu = 1: exact)
UNI_CAND = 1      # candidates given per token (MIPS)
SOLVER_QP = 0     # greedy active set + exact minimizer over it (projections)
SOLVER_FW = 1     # one Frank-Wolfe step per factor (Yen et al. 2016, Algorithm 4)
SOLVER_AFW = 2    # away-step Frank-Wolfe per factor, repeated until a non-drop step (Algorithm 2)

# counters
C_UNI_CALLS = 0
C_BI_CALLS = 1
C_BI_TOUCHED = 2      # table entries looked at by the bigram oracle
C_UNI_TOUCHED = 3     # labels scored by the unigram oracle
C_FULL = 4            # adds refused because an active set was full
C_BI_TOUCH_MAX = 5
N_COUNTERS = 6


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
    Tf = T.ravel()
    n = 0
    for a in range(K):
        for b in range(K):
            H.g[n] = a * Kc + b
            H.gpos[a * Kc + b] = n
            n += 1
    for i in range(n // 2 - 1, -1, -1):
        heap_sift_down(H.g, H.gpos, Tf, i, n)
    for a in range(K):
        for b in range(K):
            H.r[a, b] = b
            H.rpos[a, b] = b
            H.c[a, b] = b
            H.cpos[a, b] = b
        for i in range(K // 2 - 1, -1, -1):
            heap_sift_down(H.r[a], H.rpos[a], T[a], i, K)
            heap_sift_down(H.c[a], H.cpos[a], T[:, a], i, K)


@njit(**_JIT)
def heap_t_changed(T, K, Kc, H, a, b):
    heap_update(H.g, H.gpos, T.ravel(), a * Kc + b, K * K)
    heap_update(H.r[a], H.rpos[a], T[a], b, K)
    heap_update(H.c[b], H.cpos[b], T[:, b], a, K)


@njit(**_JIT)
def check_heaps(T, K, Kc, H):
    """True when every heap satisfies the heap property and its position index (tests)."""
    Tf = T.ravel()
    for i in range(1, K * K):
        if Tf[H.g[(i - 1) >> 1]] < Tf[H.g[i]]:
            return False
        if H.gpos[H.g[i]] != i:
            return False
    for a in range(K):
        for i in range(1, K):
            if T[a, H.r[a, (i - 1) >> 1]] < T[a, H.r[a, i]]:
                return False
            if T[H.c[a, (i - 1) >> 1], a] < T[H.c[a, i], a]:
                return False
            if H.rpos[a, H.r[a, i]] != i or H.cpos[a, H.c[a, i]] != i:
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
def bigram_oracle(mode, T, K, Kc, s, augL, augR, posL, nposL, posR, nposR, mkL, mkR, H, SC, counters):
    """argmax_(a, b) s T[a, b] + augL[a] + augR[b] over a, b < K.

    ``augL`` / ``augR`` are dense (zero outside the active labels); ``posL`` / ``posR`` list the
    labels whose augment is > 0 and ``mkL`` / ``mkR`` flag them. Returns (a, b, value)."""
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
        aux = SC.aux
        auxv = SC.auxv
        # (ii) a positive, b not: walk row heap of a
        for i in range(nposL):
            a = posL[i]
            best, o, tch, aux, auxv = _walk_line(T, K, s, a, H.r[a], augL[a], augR, mkR, best, aux, auxv)
            touched += tch
            if o >= 0:
                ba = a
                bb = o
        # (iii) b positive, a not: walk column heap of b (the row walk on the transposed table)
        for j in range(nposR):
            b = posR[j]
            best, o, tch, aux, auxv = _walk_line(T.T, K, s, b, H.c[b], augR[b], augL, mkL, best, aux, auxv)
            touched += tch
            if o >= 0:
                ba = o
                bb = b
        # (iv) neither positive: walk the global heap
        Tf = T.ravel()
        g = H.g
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
def uni_score(Wu, y, D, tok_ptr, fidx, fval, t, first, last):
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
    n = U.cnt[t]
    cap = U.lab.shape[1]
    if n < cap:
        U.lab[t, n] = y
        U.mu[t, n] = 0.0
        U.lamL[t, n] = 0.0
        U.lamR[t, n] = 0.0
        U.cnt[t] = n + 1
        return n
    for k in range(1, n):  # slot 0 is the ground truth
        if U.mu[t, k] != 0.0 or U.lamL[t, k] != 0.0 or U.lamR[t, k] != 0.0:
            continue
        z = U.lab[t, k]
        used = False
        if has_right:
            for q in range(B.cnt[t]):
                if B.a[t, q] == z:
                    used = True
                    break
        if not used and has_left:
            for q in range(B.cnt[t - 1]):
                if B.b[t - 1, q] == z:
                    used = True
                    break
        if used:
            continue
        U.lab[t, k] = y
        U.mu[t, k] = 0.0
        return k
    return -1


@njit(**_JIT)
def _bi_add(B, f, a, b):
    n = B.cnt[f]
    cap = B.a.shape[1]
    if n < cap:
        B.a[f, n] = a
        B.b[f, n] = b
        B.mu[f, n] = 0.0
        B.cnt[f] = n + 1
        return n
    for k in range(1, n):
        if B.mu[f, k] == 0.0:
            B.a[f, k] = a
            B.b[f, k] = b
            return k
    return -1


@njit(**_JIT)
def msg_right(U, B, t, k):
    """m_(t, f=t)(y) for the k-th active label y of token t: rowsum(mu_f)(y) - mu_t(y) + lamR."""
    y = U.lab[t, k]
    r = 0.0
    for q in range(B.cnt[t]):
        if B.a[t, q] == y:
            r += B.mu[t, q]
    return r - U.mu[t, k] + U.lamR[t, k]


@njit(**_JIT)
def msg_left(U, B, t, k):
    """m_(t, f=t-1)(y): colsum(mu_(t-1))(y) - mu_t(y) + lamL."""
    y = U.lab[t, k]
    r = 0.0
    for q in range(B.cnt[t - 1]):
        if B.b[t - 1, q] == y:
            r += B.mu[t - 1, q]
    return r - U.mu[t, k] + U.lamL[t, k]


# ---------------------------------------------------------------------------- block steps
@njit(**_JIT)
def uni_step(t, has_left, has_right, Dt, U, B, Wu, C, K, D, s, rho, uni_mode, nu, rslice,
             cptr, cands, SC, counters, A, solver=SOLVER_QP):
    """One block step on the unigram factor of token t: the oracle, then (``SOLVER_QP``) the
    exact minimizer over the active set -- a projection, the Hessian being isotropic -- or
    (``SOLVER_FW`` / ``SOLVER_AFW``) one Frank-Wolfe / away-step Frank-Wolfe step with exact line
    search. Returns True after an away-step drop step (the caller repeats the block)."""
    tok_ptr, fidx, fval = Dt.tok_ptr, Dt.fidx, Dt.fval
    first = Dt.first[t]
    last = Dt.last[t]
    yt = Dt.ytrue[t]
    lw = Dt.linv[t]
    n = U.cnt[t]
    g = SC.fbuf        # gradient of the active labels (negated: the "score" to maximize)
    mk = SC.mkL
    for k in range(n):
        y = U.lab[t, k]
        mk[y] = 1
        m = 0.0
        if has_right:
            m += msg_right(U, B, t, k)
        if has_left:
            m += msg_left(U, B, t, k)
        g[k] = s * uni_score(Wu, y, D, tok_ptr, fidx, fval, t, first, last) + lw * C[yt, y] + rho * m
    # oracle outside the active set (messages are zero there)
    best = -np.inf
    arg = -1
    touched = 0
    if uni_mode == UNI_SLICE and nu == 1:
        acc = SC.uacc
        uni_scores_all(Wu, K, tok_ptr, fidx, fval, t, first, last, acc)
        for y in range(K):
            if mk[y] == 0:
                v = s * acc[y] + lw * C[yt, y]
                if v > best:
                    best = v
                    arg = y
        touched = K - n
    elif uni_mode == UNI_SLICE:
        y = rslice
        while y < K:
            if mk[y] == 0:
                v = s * uni_score(Wu, y, D, tok_ptr, fidx, fval, t, first, last) + lw * C[yt, y]
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
            v = s * uni_score(Wu, y, D, tok_ptr, fidx, fval, t, first, last) + lw * C[yt, y]
            touched += 1
            if v > best:
                best = v
                arg = y
    for k in range(n):
        mk[U.lab[t, k]] = 0
    counters[C_UNI_CALLS] += 1
    counters[C_UNI_TOUCHED] += touched
    h = s * Dt.xsq[t] + rho * (has_left + has_right)
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
            if U.mu[t, k] > 0.0 and g[k] < worst:
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
    tmp = SC.auxv
    if tmp.shape[0] < 3 * n:
        tmp = np.empty(3 * n)
    for k in range(n):
        tmp[k] = U.mu[t, k] + g[k] / h
    project_simplex(tmp, n, tmp[n:2 * n], tmp[2 * n:3 * n])
    for k in range(n):
        d = tmp[n + k] - U.mu[t, k]
        if d != 0.0:
            U.mu[t, k] = tmp[n + k]
            y = U.lab[t, k]
            uni_axpy(Wu, y, tok_ptr, fidx, fval, t, first, last, -d)
            if A.coef[0] > 0.0:
                uni_axpy(A.ZW, y, tok_ptr, fidx, fval, t, first, last, -d * A.coef[0])
            SC.changed[y] = 1
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
    mu = U.mu[t]
    is_away, v, lin, gmax = _fw_direction(mu, g, n, fw, away)
    if lin <= 1e-15:
        return False
    d = SC.auxv
    if d.shape[0] < n:
        d = np.empty(n)
    dd = _fw_fill(mu, n, is_away, v, d)
    gam = lin / (h * dd)
    drop = False
    if gam >= gmax:
        gam = gmax
        drop = is_away
    tok_ptr, fidx, fval = Dt.tok_ptr, Dt.fidx, Dt.fval
    first = Dt.first[t]
    last = Dt.last[t]
    for k in range(n):
        nv = mu[k] + gam * d[k]
        if nv < 0.0 or (drop and k == v):
            nv = 0.0
        dk = nv - mu[k]
        if dk != 0.0:
            mu[k] = nv
            y = U.lab[t, k]
            uni_axpy(Wu, y, tok_ptr, fidx, fval, t, first, last, -dk)
            if A.coef[0] > 0.0:
                uni_axpy(A.ZW, y, tok_ptr, fidx, fval, t, first, last, -dk * A.coef[0])
            SC.changed[y] = 1
    return drop


@njit(**_JIT)
def _bi_apply(f, n, d, gam, B, T, K, Kc, heaps, H, A, zero):
    """mu_f += gam d over the active pairs (clipped at 0; slot ``zero`` set to exactly 0: a drop
    step), with T, the averaging accumulator and the heaps kept in step."""
    for k in range(n):
        x = gam * d[k]
        if x != 0.0 or k == zero:
            aa = B.a[f, k]
            bb = B.b[f, k]
            nv = B.mu[f, k] + x
            if nv < 0.0 or k == zero:
                nv = 0.0
            x = nv - B.mu[f, k]
            B.mu[f, k] = nv
            T[aa, bb] -= x
            if A.coef[0] > 0.0:
                A.ZT[aa, bb] -= x * A.coef[0]
            if heaps:
                heap_t_changed(T, K, Kc, H, aa, bb)


@njit(**_JIT)
def _bi_curvature(f, n, d, s, rho, B, rows, cols):
    """d^T H_f d = s ||d||^2 + rho (||rowsum d||^2 + ||colsum d||^2): the table's term once,
    each consistency constraint's term once (``rows`` / ``cols`` dense, left zero)."""
    dd = 0.0
    for k in range(n):
        dd += d[k] * d[k]
        rows[B.a[f, k]] += d[k]
        cols[B.b[f, k]] += d[k]
    curv = s * dd
    for k in range(n):
        aa = B.a[f, k]
        bb = B.b[f, k]
        curv += rho * (rows[aa] * rows[aa] + cols[bb] * cols[bb])
        rows[aa] = 0.0  # each label counted once: zero after use
        cols[bb] = 0.0
    return curv


@njit(**_JIT)
def bi_step(f, a0, a1, U, B, T, K, Kc, s, rho, bi_mode, qp_iters, heaps, H, SC, counters, A,
            solver=SOLVER_QP):
    """Block step on the bigram factor f = (f, f + 1): oracle, then (``SOLVER_QP``) projected
    steps with an isotropic majorizer and exact line search over the active pairs, or
    (``SOLVER_FW`` / ``SOLVER_AFW``) one Frank-Wolfe / away-step Frank-Wolfe step with exact line
    search. Returns True after an away-step drop step (the caller repeats the block)."""
    t = f
    u = f + 1
    augL = SC.augL
    augR = SC.augR
    posL = SC.ibuf
    posR = SC.ibuf2
    npl = 0
    npr = 0
    for k in range(U.cnt[t]):
        y = U.lab[t, k]
        v = -rho * msg_right(U, B, t, k)
        augL[y] = v
        if v > 0.0:
            posL[npl] = y
            npl += 1
            SC.mkL[y] = 1
    for k in range(U.cnt[u]):
        y = U.lab[u, k]
        v = -rho * msg_left(U, B, u, k)
        augR[y] = v
        if v > 0.0:
            posR[npr] = y
            npr += 1
            SC.mkR[y] = 1
    a, b, best = bigram_oracle(bi_mode, T, K, Kc, s, augL, augR, posL, npl, posR, npr,
                               SC.mkL, SC.mkR, H, SC, counters)
    n = B.cnt[f]
    g = SC.fbuf
    worst = np.inf
    have = -1
    fw = 0
    for k in range(n):
        aa = B.a[f, k]
        bb = B.b[f, k]
        g[k] = s * T[aa, bb] + augL[aa] + augR[bb]
        if B.mu[f, k] > 0.0 and g[k] < worst:
            worst = g[k]
        if aa == a and bb == b:
            have = k
        if g[k] > g[fw]:
            fw = k
    if solver != SOLVER_QP:
        worst = g[fw]   # Frank-Wolfe: the oracle's pair is the vertex when it beats every active one
    if have < 0 and best > worst + 1e-12:
        ok = True
        if _find(U.lab[t], U.cnt[t], a) < 0:
            if _uni_add(U, B, t, a, t > a0, True) < 0:
                ok = False
        if ok and _find(U.lab[u], U.cnt[u], b) < 0:
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
    for k in range(U.cnt[t]):
        y = U.lab[t, k]
        augL[y] = 0.0
        SC.mkL[y] = 0
    for k in range(U.cnt[u]):
        y = U.lab[u, k]
        augR[y] = 0.0
        SC.mkR[y] = 0
    # projected steps with exact line search; g holds -gradient at the start
    tmp = SC.auxv
    if tmp.shape[0] < 4 * n:
        tmp = np.empty(4 * n)
    rows = SC.rows
    cols = SC.cols
    if solver != SOLVER_QP:
        # (away-step) Frank-Wolfe step; exact line search on the quadratic (12) along d
        is_away, v, lin, gmax = _fw_direction(B.mu[f], g, n, fw, solver == SOLVER_AFW)
        if lin <= 1e-15:
            return False
        _fw_fill(B.mu[f], n, is_away, v, tmp)
        curv = _bi_curvature(f, n, tmp, s, rho, B, rows, cols)
        gam = lin / curv
        drop = False
        if gam >= gmax:
            gam = gmax
            drop = is_away
        _bi_apply(f, n, tmp, gam, B, T, K, Kc, heaps, H, A, v if drop else -1)
        return drop
    for it in range(qp_iters):
        if it > 0:
            # refresh -gradient: s T + aug, aug = -rho m, m changes with mu_f
            _bi_neg_grad(f, U, B, T, s, rho, n, g, SC)
        # majorizer: s + rho (max pairs per left label + max pairs per right label)
        mr = 0.0
        mc = 0.0
        for k in range(n):
            rows[B.a[f, k]] += 1.0
            cols[B.b[f, k]] += 1.0
        for k in range(n):
            if rows[B.a[f, k]] > mr:
                mr = rows[B.a[f, k]]
            if cols[B.b[f, k]] > mc:
                mc = cols[B.b[f, k]]
        for k in range(n):
            rows[B.a[f, k]] = 0.0
            cols[B.b[f, k]] = 0.0
        Q = s + rho * (mr + mc)
        for k in range(n):
            tmp[k] = B.mu[f, k] + g[k] / Q
        project_simplex(tmp, n, tmp[n:2 * n], tmp[2 * n:3 * n])
        # direction d = proj - mu; exact step along d
        lin = 0.0
        dd = 0.0
        for k in range(n):
            d = tmp[n + k] - B.mu[f, k]
            tmp[3 * n + k] = d
            lin += g[k] * d
            dd += d * d
            rows[B.a[f, k]] += d
            cols[B.b[f, k]] += d
        curv = s * dd
        for k in range(n):
            aa = B.a[f, k]
            bb = B.b[f, k]
            curv += rho * (rows[aa] * rows[aa] + cols[bb] * cols[bb])
            rows[aa] = 0.0  # each label counted once: zero after use
            cols[bb] = 0.0
        if lin <= 1e-15 or curv <= 0.0:
            break
        gam = lin / curv
        if gam > 1.0:
            gam = 1.0
        _bi_apply(f, n, tmp[3 * n:4 * n], gam, B, T, K, Kc, heaps, H, A, -1)
    return False


@njit(**_JIT)
def _bi_neg_grad(f, U, B, T, s, rho, n, g, SC):
    t = f
    u = f + 1
    augL = SC.augL
    augR = SC.augR
    for k in range(U.cnt[t]):
        augL[U.lab[t, k]] = -rho * msg_right(U, B, t, k)
    for k in range(U.cnt[u]):
        augR[U.lab[u, k]] = -rho * msg_left(U, B, u, k)
    for k in range(n):
        aa = B.a[f, k]
        bb = B.b[f, k]
        g[k] = s * T[aa, bb] + augL[aa] + augR[bb]
    for k in range(U.cnt[t]):
        augL[U.lab[t, k]] = 0.0
    for k in range(U.cnt[u]):
        augR[U.lab[u, k]] = 0.0


@njit(**_JIT)
def multiplier_step(e, Dt, U, B, eta):
    """lam' += eta (M mu_f - mu_t) for every (token, bigram) pair of example e (paper eq. 13)."""
    a0 = Dt.ex_ptr[e]
    a1 = Dt.ex_ptr[e + 1]
    res = 0.0
    for t in range(a0, a1):
        for k in range(U.cnt[t]):
            if t + 1 < a1:
                r = msg_right(U, B, t, k) - U.lamR[t, k]
                U.lamR[t, k] += eta * r
                res += r * r
            if t > a0:
                r = msg_left(U, B, t, k) - U.lamL[t, k]
                U.lamL[t, k] += eta * r
                res += r * r
    return res


@njit(**_JIT)
def example_pass(e, Dt, U, B, Wu, T, C, K, Kc, D, s, rho, use_trans, bi_mode, uni_mode, nu, seed,
                 qp_iters, heaps, cptr, cands, H, SC, counters, A, solver=SOLVER_QP):
    """One sweep over the factors of held example e: every unigram block, then every bigram.
    ``SOLVER_AFW`` repeats a block after a drop step (Yen et al. 2016, Algorithm 2: "until a
    non-drop step"), at most ``qp_iters`` times."""
    a0 = Dt.ex_ptr[e]
    a1 = Dt.ex_ptr[e + 1]
    np.random.seed(seed)
    reps = qp_iters if solver == SOLVER_AFW else 1
    for t in range(a0, a1):
        rs = np.random.randint(nu) if nu > 1 else 0
        has_left = use_trans and t > a0
        has_right = use_trans and t + 1 < a1
        for _ in range(reps):
            if not uni_step(t, has_left, has_right, Dt, U, B, Wu, C, K, D, s, rho, uni_mode, nu, rs,
                            cptr, cands, SC, counters, A, solver):
                break
    if use_trans:
        for t in range(a0, a1 - 1):
            for _ in range(reps):
                if not bi_step(t, a0, a1, U, B, T, K, Kc, s, rho, bi_mode, qp_iters, heaps, H, SC, counters, A,
                               solver):
                    break


@njit(**_JIT)
def run_pass(order, Dt, U, B, Wu, T, C, K, Kc, D, s, rho, eta, use_trans, bi_mode, uni_mode, nu,
             seed, qp_iters, heaps, cptr, cands, H, SC, counters, mult, inner, rounds, A, k0, solver=SOLVER_QP):
    """Visit each example in ``order``: ``rounds`` times ``inner`` sweeps over its factors, each
    ``inner`` sweeps followed (``mult``) by the example's multiplier step. The multipliers of an
    example only couple its own factors, so its multiplier step may follow its own sweeps at once
    (``rounds = 1`` equals the paper's Algorithm 1, all block steps of a pass then all multiplier
    steps); ``rounds > 1`` takes several local method-of-multipliers iterations per visit.
    Averaging (``A.coef[0] >= 0``): each example visit is one step of the averaging window, the
    first one the step ``k0 + 1``. Returns the squared consistency residual seen by the last
    multiplier step of each example."""
    res = 0.0
    k = k0
    for i in range(order.shape[0]):
        e = order[i]
        if Dt.ex_alive[e]:
            if A.coef[0] >= 0.0:
                k += 1
                A.coef[0] = 0.5 * k * (k - 1.0)
            for q in range(rounds):
                for r in range(inner):
                    example_pass(e, Dt, U, B, Wu, T, C, K, Kc, D, s, rho, use_trans, bi_mode, uni_mode, nu,
                                 (seed + 7919 * i + 104729 * r + 15485863 * q) % 2147483647, qp_iters, heaps,
                                 cptr, cands, H, SC, counters, A, solver)
                if mult and use_trans:
                    rq = multiplier_step(e, Dt, U, B, eta)
                    if q == rounds - 1:
                        res += rq
    return res


@njit(**_JIT)
def remove_example(e, Dt, U, B, Wu, T, K, Kc, use_trans, heaps, H):
    """Subtract example e's contribution (e_ytrue - mu) from the weights (eviction)."""
    a0 = Dt.ex_ptr[e]
    a1 = Dt.ex_ptr[e + 1]
    for t in range(a0, a1):
        yt = Dt.ytrue[t]
        for k in range(U.cnt[t]):
            y = U.lab[t, k]
            c = -U.mu[t, k]
            if y == yt:
                c += 1.0
            if c != 0.0:
                uni_axpy(Wu, y, Dt.tok_ptr, Dt.fidx, Dt.fval, t, Dt.first[t], Dt.last[t], -c)
        if use_trans and t + 1 < a1:
            for k in range(B.cnt[t]):
                a = B.a[t, k]
                b = B.b[t, k]
                c = -B.mu[t, k]
                if a == yt and b == Dt.ytrue[t + 1]:
                    c += 1.0
                if c != 0.0:
                    T[a, b] -= c
                    if heaps:
                        heap_t_changed(T, K, Kc, H, a, b)
    Dt.ex_alive[e] = False


@njit(**_JIT)
def init_blocks(e, Dt, U, B):
    """Put example e at its ground truth (feasible, adds nothing to the weights)."""
    a0 = Dt.ex_ptr[e]
    a1 = Dt.ex_ptr[e + 1]
    for t in range(a0, a1):
        U.cnt[t] = 1
        U.lab[t, 0] = Dt.ytrue[t]
        U.mu[t, 0] = 1.0
        U.lamL[t, 0] = 0.0
        U.lamR[t, 0] = 0.0
        B.cnt[t] = 0
        if t + 1 < a1:
            B.cnt[t] = 1
            B.a[t, 0] = Dt.ytrue[t]
            B.b[t, 0] = Dt.ytrue[t + 1]
            B.mu[t, 0] = 1.0


# ---------------------------------------------------------------------------- certificate
@njit(**_JIT)
def repaired_unigrams(e, Dt, U, B, K, use_trans, M, prev, nxt, row):
    """Dense repaired unigram marginals of example e into M[0:L, 0:K]; returns the residual
    sum_t ||mu'_t - mu_t||^2 (0 when the stored point is already consistent)."""
    a0 = Dt.ex_ptr[e]
    a1 = Dt.ex_ptr[e + 1]
    L = a1 - a0
    resid = 0.0
    for i in range(L):
        for y in range(K):
            M[i, y] = 0.0
    if not use_trans or L == 1:
        for t in range(a0, a1):
            for k in range(U.cnt[t]):
                M[t - a0, U.lab[t, k]] += U.mu[t, k]
        return 0.0
    for y in range(K):
        prev[y] = 0.0
    for k in range(B.cnt[a0]):
        prev[B.a[a0, k]] += B.mu[a0, k]
    for t in range(a0, a1):
        for y in range(K):
            M[t - a0, y] = prev[y]
        for k in range(U.cnt[t]):
            dlt = U.mu[t, k] - prev[U.lab[t, k]]
            resid += dlt * dlt
        if t + 1 == a1:
            break
        for y in range(K):
            nxt[y] = 0.0
            row[y] = 0.0
        for k in range(B.cnt[t]):
            row[B.a[t, k]] += B.mu[t, k]
        for k in range(B.cnt[t]):
            a = B.a[t, k]
            if row[a] > 0.0 and prev[a] > 0.0:
                nxt[B.b[t, k]] += prev[a] * B.mu[t, k] / row[a]
        for y in range(K):
            if prev[y] > 0.0 and row[y] <= 0.0:
                for k in range(U.cnt[t + 1]):
                    nxt[U.lab[t + 1, k]] += prev[y] * U.mu[t + 1, k]
        for y in range(K):
            prev[y] = nxt[y]
    return resid


@njit(**_JIT)
def repaired_pairs(e, Dt, U, B, K, M, Tr, row):
    """Accumulate -mu'_f (the repaired bigram marginals, from the dense unigrams ``M``) into
    ``Tr`` and +1 on the true transitions."""
    a0 = Dt.ex_ptr[e]
    a1 = Dt.ex_ptr[e + 1]
    for t in range(a0, a1 - 1):
        for y in range(K):
            row[y] = 0.0
        for k in range(B.cnt[t]):
            row[B.a[t, k]] += B.mu[t, k]
        for k in range(B.cnt[t]):
            a = B.a[t, k]
            p = M[t - a0, a]
            if row[a] > 0.0 and p > 0.0:
                Tr[a, B.b[t, k]] -= p * B.mu[t, k] / row[a]
        for y in range(K):
            p = M[t - a0, y]
            if p > 0.0 and row[y] <= 0.0:
                for k in range(U.cnt[t + 1]):
                    m = p * U.mu[t + 1, k]
                    if m > 0.0:
                        Tr[y, U.lab[t + 1, k]] -= m
        Tr[Dt.ytrue[t], Dt.ytrue[t + 1]] += 1.0


@njit(**_JIT)
def repaired_emissions(e, Dt, K, C, M, Wr):
    """Accumulate (e_ytrue - mu'_t) x~_t of example e into ``Wr``; returns the example's dual
    loss term sum_t (1/L) sum_y C[ytrue_t, y] mu'_t(y)."""
    a0 = Dt.ex_ptr[e]
    a1 = Dt.ex_ptr[e + 1]
    loss = 0.0
    for t in range(a0, a1):
        yt = Dt.ytrue[t]
        for y in range(K):
            loss += Dt.linv[t] * C[yt, y] * M[t - a0, y]
            c = -M[t - a0, y]
            if y == yt:
                c += 1.0
            if c != 0.0:
                uni_axpy(Wr, y, Dt.tok_ptr, Dt.fidx, Dt.fval, t, Dt.first[t], Dt.last[t], c)
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
    for i in range(AUGL.shape[0]):
        augL = AUGL[i]
        augR = AUGR[i]
        npl = 0
        npr = 0
        for y in range(K):
            if augL[y] > 0.0:
                SC.ibuf[npl] = y
                npl += 1
                SC.mkL[y] = 1
            if augR[y] > 0.0:
                SC.ibuf2[npr] = y
                npr += 1
                SC.mkR[y] = 1
        a, b, v = bigram_oracle(mode, T, K, Kc, s, augL, augR, SC.ibuf, npl, SC.ibuf2, npr,
                                SC.mkL, SC.mkR, H, SC, counters)
        out[i] = v
        for y in range(K):
            SC.mkL[y] = 0
            SC.mkR[y] = 0


# ============================================================================ multi-label, pairwise
# A fully connected binary MRF over K labels (MultiLabelSSVM(pairwise=True)): one binary
# variable per label, score(y) = sum_k y_k <w_k, x> + sum_{k<l} y_k y_l T[k, l], loss Hamming / Ki.
# Factorwise dual (Yen et al. 2016, section 3.2 (b) and Algorithm 3), per held example i:
#
# * unigram factor k: u_k = mu_k(1) in [0, 1] (dense, n x Kc);
# * pairwise factor f = (k, l), k < l: marginals over (00, 01, 10, 11), kept as
#   z_f = (m_k, m_l, q) = (mu_f(1.), mu_f(.1), mu_f(11)), i.e. a point of the tetrahedron with
#   vertices 00 = (0, 0, 0), 01 = (0, 1, 0), 10 = (1, 0, 0), 11 = (1, 1, 1); scaled multipliers
#   lam_kf, lam_lf of the consistency constraints m_k = u_k, m_l = u_l (the 0-coordinates are
#   implied by the simplex);
# * a factor is *inactive* until the greedy step adds it (storage O(active factors), not O(K^2) per
#   example). An inactive factor has no variables of its own: its marginals are *implicitly* the
#   independent coupling of its two unigrams, z_f = (u_k, u_l, u_k u_l) (a point of the local
#   polytope, so always feasible), with no multiplier. Its consistency residual is zero, so it
#   constrains nothing; it only carries the pair statistic q = u_k u_l into U_T. When the greedy
#   step activates it, it starts at that same point (lam = 0): U_T does not change.
#   (Defining inactive factors at their ground-truth vertex instead -- the previous version --
#   made the K - 1 consistency penalties of each label pin u_k to ybar_k: with 228 labels the
#   unigram duals moved ~1e-7 per pass.)
#
# Unnormalized weights U_E[:, k] = sum_i x_i (ybar_ik - u_ik) (feature-major ``E``), U_T[k, l] =
# sum_i (ybar_ik ybar_il - q_ikl) (upper triangle of ``T``; q_ikl = u_ik u_il for an inactive
# factor); w = s U, s = 1 / (lam n). The augmented Lagrangian (scaled by n, as for chains):
#
#   L = (s/2) ||U||^2 - sum_i delta_i^T u_i + (rho/2) sum_i sum_{f active} [(m_k - u_k + lam_kf)^2 + (m_l - u_l + lam_lf)^2]
#
# with delta_i^T u_i = sum_k (ybar_k ? 1 - u_k : u_k) / Ki. Per example we keep
# Dv[i, k] = sum_{active f ni k} (m_fk + lam_fk - ybar_k) and nact[i, k] = the number of active
# factors containing k, so that the sum of the messages of label k is
# Dv[i, k] + nact[i, k] (ybar_k - u_k).
#
# Block solvers (exact): a unigram block is a 1-D quadratic on [0, 1] (clip of a Newton step; it
# includes the inactive factors' terms of (s/2)||U_T||^2, linear in u_k); a pairwise block is
# min (rho/2)(m_k - c_k)^2 + (rho/2)(m_l - c_l)^2 + (s/2)(q - c_q)^2 over the tetrahedron, solved
# exactly by enumerating its 15 faces (``tetra_project``).

MLData = namedtuple("MLData", "x_ptr fidx fval xsq Ki Y alive")
MLDual = namedtuple("MLDual", "u Dv fk fl fz flam fcnt nact")

_TETRA = np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])

ML_C_UNI = 0
ML_C_PAIR = 1
ML_C_ADDED = 2
ML_C_SCANNED = 3
ML_C_FULL = 4
ML_N_COUNTERS = 5


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
def ml_uni_step(i, k, Dt, Q, E, T, K, s, rho, score, mark, tub):
    """Exact minimization of L over u_ik in [0, 1] (``score`` = <U_E[:, k], x_i>); returns the
    change. The inactive factors (k, l) of example i (``mark`` is 0 there; 1 on the active ones)
    hold q = u_k u_l, so U_T[k, l] is linear in u_k with slope -u_l: their part of
    (s/2)||U_T||^2 enters the quadratic, and U_T (and its bound ``tub``) follows the step."""
    yk = Dt.Y[i, k]
    u = Q.u[i, k]
    na = Q.nact[i, k]
    g = -s * score - (1.0 - 2.0 * yk) / Dt.Ki[i] - rho * (na * (yk - u) + Q.Dv[i, k])
    h = s * Dt.xsq[i] + rho * na
    gt = 0.0
    ht = 0.0
    for l in range(K):
        ul = Q.u[i, l]
        if l == k or ul == 0.0:
            continue
        a = min(k, l)
        b = max(k, l)
        if mark[a, b]:
            continue
        gt += T[a, b] * ul
        ht += ul * ul
    g -= s * gt
    h += s * ht
    if h <= 0.0:
        return 0.0
    un = u - g / h
    if un < 0.0:
        un = 0.0
    elif un > 1.0:
        un = 1.0
    d = un - u
    if d != 0.0:
        Q.u[i, k] = un
        for p in range(Dt.x_ptr[i], Dt.x_ptr[i + 1]):
            E[Dt.fidx[p], k] -= d * Dt.fval[p]
        if ht > 0.0:
            for l in range(K):
                ul = Q.u[i, l]
                if l == k or ul == 0.0:
                    continue
                a = min(k, l)
                b = max(k, l)
                if mark[a, b]:
                    continue
                T[a, b] -= d * ul
                _ml_tub_raise(tub, a, b, T[a, b])
    return d


@njit(**_JIT)
def ml_pair_step(i, c, Dt, Q, T, s, rho, cbuf, wbuf, zbuf, tA, tb, tidx, tub):
    """Exact block minimization of L over the active pairwise factor c of example i (raises the
    bound ``tub`` of ``ml_t_bound`` when U_T[k, l] grows)."""
    k = Q.fk[i, c]
    l = Q.fl[i, c]
    mk = Q.fz[i, c, 0]
    ml = Q.fz[i, c, 1]
    q = Q.fz[i, c, 2]
    cbuf[0] = Q.u[i, k] - Q.flam[i, c, 0]
    cbuf[1] = Q.u[i, l] - Q.flam[i, c, 1]
    cbuf[2] = q + T[k, l]
    wbuf[0] = rho
    wbuf[1] = rho
    wbuf[2] = s
    tetra_project(cbuf, wbuf, zbuf, tA, tb, tidx)
    Q.fz[i, c, 0] = zbuf[0]
    Q.fz[i, c, 1] = zbuf[1]
    Q.fz[i, c, 2] = zbuf[2]
    T[k, l] += q - zbuf[2]
    _ml_tub_raise(tub, k, l, T[k, l])
    Q.Dv[i, k] += zbuf[0] - mk
    Q.Dv[i, l] += zbuf[1] - ml


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
def ml_greedy_add(i, Dt, Q, T, K, s, rho, grow, tol, mark, cand_f, cand_k, cand_l, counters,
                  tub, lbuf, full):
    """Block-greedy factor selection (Yen et al. Algorithm 3, step 1): among the inactive
    pairwise factors of example i, add the ``grow`` with the largest Frank-Wolfe gap at their
    implicit point (``_ml_pair_gap``) among those with gap > ``tol``; they are added in (k, l)
    order, at their implicit point (u_k, u_l, u_k u_l) with zero multipliers (``Dv``, ``nact``
    updated; U_T unchanged). ``mark`` (K x K int8, zero on entry and exit) flags the active factors. Returns the
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
    n = Q.fcnt[i]
    for c in range(n):
        mark[Q.fk[i, c], Q.fl[i, c]] = 1
    nc = 0
    scanned = 0
    if full:
        for k in range(K):
            uk = Q.u[i, k]
            for l in range(k + 1, K):
                if mark[k, l]:
                    continue
                scanned += 1
                gap = _ml_pair_gap(-s * T[k, l], uk, Q.u[i, l])
                if gap > tol:
                    nc = _ml_cand_push(gap, k, l, grow, nc, cand_f, cand_k, cand_l)
    else:
        # lbuf[:K]: 1 = off the truth, 0 = at the truth; lbuf[K:2K]: row scanned in step (3)
        noff = 0
        for k in range(K):
            off = 1 if Q.u[i, k] != Dt.Y[i, k] else 0
            lbuf[k] = off
            lbuf[K + k] = 0
            noff += off
        # (1) pairs with at least one label off the truth (each such pair once)
        if noff > 0:
            for k in range(K):
                if lbuf[k] == 0:
                    continue
                uk = Q.u[i, k]
                for l in range(K):
                    if l == k or (lbuf[l] == 1 and l < k):
                        continue
                    a = min(k, l)
                    b = max(k, l)
                    if mark[a, b]:
                        continue
                    scanned += 1
                    gap = _ml_pair_gap(-s * T[a, b], uk, Q.u[i, l])
                    if gap > tol:
                        nc = _ml_cand_push(gap, a, b, grow, nc, cand_f, cand_k, cand_l)
        # (2) both labels at the truth and positive: gap = max(0, -s U_T)
        for k in range(K):
            if lbuf[k] == 1 or Dt.Y[i, k] != 1.0:
                continue
            for l in range(k + 1, K):
                if lbuf[l] == 1 or Dt.Y[i, l] != 1.0 or mark[k, l]:
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
            yk = Dt.Y[i, k]
            for l in range(K):
                if l == k or lbuf[l] == 1 or (yk == 1.0 and Dt.Y[i, l] == 1.0):
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
        mark[Q.fk[i, c], Q.fl[i, c]] = 0
    cap = Q.fk.shape[1]
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
        uk = Q.u[i, k]
        ul = Q.u[i, l]
        Q.fk[i, n] = k
        Q.fl[i, n] = l
        Q.fz[i, n, 0] = uk
        Q.fz[i, n, 1] = ul
        Q.fz[i, n, 2] = uk * ul
        Q.flam[i, n, 0] = 0.0
        Q.flam[i, n, 1] = 0.0
        Q.Dv[i, k] += uk - Dt.Y[i, k]
        Q.Dv[i, l] += ul - Dt.Y[i, l]
        Q.nact[i, k] += 1.0
        Q.nact[i, l] += 1.0
        n += 1
        added += 1
    Q.fcnt[i] = n
    counters[ML_C_ADDED] += added
    return added


@njit(**_JIT)
def ml_multiplier_step(i, Q, eta):
    """lam_f += eta (m_f - u) on the active factors of example i (paper eq. 13); returns the
    squared residual (inactive factors follow their unigrams: residual zero)."""
    res = 0.0
    for c in range(Q.fcnt[i]):
        k = Q.fk[i, c]
        l = Q.fl[i, c]
        rk = Q.fz[i, c, 0] - Q.u[i, k]
        rl = Q.fz[i, c, 1] - Q.u[i, l]
        res += rk * rk + rl * rl
        if eta != 0.0:
            Q.flam[i, c, 0] += eta * rk
            Q.flam[i, c, 1] += eta * rl
            Q.Dv[i, k] += eta * rk
            Q.Dv[i, l] += eta * rl
    return res


@njit(**_JIT)
def ml_example_pass(i, Dt, Q, E, T, K, s, rho, grow, tol, acc, mark, cand_f, cand_k, cand_l,
                    cbuf, wbuf, zbuf, tA, tb, tidx, counters, tub, lbuf, full):
    """One sweep over the factors of example i: every unigram block (exact), the greedy
    factor additions, every active pairwise block (exact)."""
    ml_scores(E, K, Dt.x_ptr, Dt.fidx, Dt.fval, i, acc)
    for c in range(Q.fcnt[i]):
        mark[Q.fk[i, c], Q.fl[i, c]] = 1
    for k in range(K):
        ml_uni_step(i, k, Dt, Q, E, T, K, s, rho, acc[k], mark, tub)
    for c in range(Q.fcnt[i]):
        mark[Q.fk[i, c], Q.fl[i, c]] = 0
    counters[ML_C_UNI] += K
    if K > 1:
        ml_greedy_add(i, Dt, Q, T, K, s, rho, grow, tol, mark, cand_f, cand_k, cand_l, counters, tub, lbuf, full)
    for c in range(Q.fcnt[i]):
        ml_pair_step(i, c, Dt, Q, T, s, rho, cbuf, wbuf, zbuf, tA, tb, tidx, tub)
    counters[ML_C_PAIR] += Q.fcnt[i]


@njit(**_JIT)
def ml_run_pass(order, Dt, Q, E, T, K, s, rho, eta, grow, tol, inner, mult, counters, tub, full):
    """``inner`` sweeps over each example of ``order``, then (``mult``) the multiplier step on
    each of them; returns the squared consistency residual of the active factors. ``tub``: the
    interaction-weight bound of ``ml_t_bound`` (kept valid), ``full``: see ``ml_greedy_add``."""
    Kc = Q.u.shape[1]
    acc = np.zeros(Kc)
    mark = np.zeros((Kc, Kc), dtype=np.int8)
    g = max(grow, 1)
    cand_f = np.zeros(g)
    cand_k = np.zeros(g, dtype=np.int64)
    cand_l = np.zeros(g, dtype=np.int64)
    cbuf = np.zeros(3)
    wbuf = np.zeros(3)
    zbuf = np.zeros(3)
    tA = np.zeros((5, 5))
    tb = np.zeros(5)
    tidx = np.zeros(4, dtype=np.int64)
    lbuf = np.zeros(2 * Kc, dtype=np.int64)
    for j in range(order.shape[0]):
        i = order[j]
        if Dt.alive[i]:
            for r in range(inner):
                ml_example_pass(i, Dt, Q, E, T, K, s, rho, grow, tol, acc, mark, cand_f, cand_k, cand_l,
                                cbuf, wbuf, zbuf, tA, tb, tidx, counters, tub, lbuf, full)
    res = 0.0
    if mult:
        for j in range(order.shape[0]):
            i = order[j]
            if Dt.alive[i]:
                res += ml_multiplier_step(i, Q, eta)
    return res


@njit(**_JIT)
def ml_implicit_t_add(i, Dt, Q, T, K, c, tub):
    """T[k, l] += c (ybar_k ybar_l - u_k u_l) over the *inactive* factors of example i (their
    implicit pair statistic); keeps ``tub`` a bound."""
    for k in range(K):
        yk = Dt.Y[i, k]
        uk = Q.u[i, k]
        if yk == 0.0 and uk == 0.0:
            continue
        for l in range(k + 1, K):
            v = yk * Dt.Y[i, l] - uk * Q.u[i, l]
            if v != 0.0:
                T[k, l] += c * v
                _ml_tub_raise(tub, k, l, T[k, l])
    for f in range(Q.fcnt[i]):   # active factors: undo the above
        k = Q.fk[i, f]
        l = Q.fl[i, f]
        v = Dt.Y[i, k] * Dt.Y[i, l] - Q.u[i, k] * Q.u[i, l]
        if v != 0.0:
            T[k, l] -= c * v
            _ml_tub_raise(tub, k, l, T[k, l])


@njit(**_JIT)
def ml_remove_example(i, Dt, Q, E, T, K, tub):
    """Subtract example i's contribution from the weights (eviction); keeps ``tub`` a bound."""
    for k in range(K):
        d = Dt.Y[i, k] - Q.u[i, k]
        if d != 0.0:
            for p in range(Dt.x_ptr[i], Dt.x_ptr[i + 1]):
                E[Dt.fidx[p], k] -= d * Dt.fval[p]
    ml_implicit_t_add(i, Dt, Q, T, K, -1.0, tub)
    for c in range(Q.fcnt[i]):
        k = Q.fk[i, c]
        l = Q.fl[i, c]
        T[k, l] -= Dt.Y[i, k] * Dt.Y[i, l] - Q.fz[i, c, 2]
        _ml_tub_raise(tub, k, l, T[k, l])
    Dt.alive[i] = False


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
    Kc = Q.u.shape[1]
    n = Dt.alive.shape[0]
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
        if not Dt.alive[i]:
            continue
        Ki = Dt.Ki[i]
        nf = 0
        for k in range(K):
            yk = Dt.Y[i, k]
            uk = Q.u[i, k]
            dloss += ((1.0 - uk) if yk == 1.0 else uk) / Ki
            if 1e-12 < uk < 1.0 - 1e-12:
                frac[nf] = k
                nf += 1
            for l in range(k + 1, K):
                ul = Q.u[i, l]
                Ml[k, l] = min(max(uk * ul, max(0.0, uk + ul - 1.0)), min(uk, ul))
        for c in range(Q.fcnt[i]):
            k = Q.fk[i, c]
            l = Q.fl[i, c]
            uk = Q.u[i, k]
            ul = Q.u[i, l]
            Ml[k, l] = min(max(Q.fz[i, c, 2], max(0.0, uk + ul - 1.0)), min(uk, ul))
            resid += (Q.fz[i, c, 0] - uk) ** 2 + (Q.fz[i, c, 1] - ul) ** 2
        for k in range(K):
            uk = Q.u[i, k]
            for l in range(k + 1, K):
                t = Dt.Y[i, k] * Dt.Y[i, l]
                Tl[k, l] += t - Ml[k, l]
                Tp[k, l] += t - uk * Q.u[i, l]   # independent coupling; corrected below
        if nf == 2:
            k = frac[0]
            l = frac[1]
            Tp[k, l] -= Ml[k, l] - Q.u[i, k] * Q.u[i, l]
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
                        p = Q.u[i, k] * Q.u[i, l]
                        dm = _ml_coupling(cp, Q.u[i, k], Q.u[i, l], Dt.Y[i, k], Dt.Y[i, l]) - p
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
                    p = Q.u[i, k] * Q.u[i, l]
                    Tp[k, l] -= best_th * (_ml_coupling(best_c, Q.u[i, k], Q.u[i, l], Dt.Y[i, k], Dt.Y[i, l]) - p)
        if exact_primal:
            ml_scores(E, K, Dt.x_ptr, Dt.fidx, Dt.fval, i, acc)
            ts = 0.0
            for k in range(K):
                S[0, k] = s * acc[k]
                ybuf[k] = np.int32(Dt.Y[i, k])
            for k in range(K):
                if ybuf[k]:
                    ts += S[0, k]
                    for l in range(k + 1, K):
                        if ybuf[l]:
                            ts += s * T[k, l]
            v = _mrf_enum(S, T, s, K, ybuf, 0, 1.0, Ki, 0.0, best_m, lab)
            hinge += v - ts
    sqp = 0.0
    sql = 0.0
    for k in range(K):
        for l in range(k + 1, K):
            sqp += Tp[k, l] ** 2
            sql += Tl[k, l] ** 2
    return hinge, dloss, sqp, sql, resid
