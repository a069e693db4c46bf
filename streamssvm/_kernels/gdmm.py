"""Numba kernels of GDMM for chains (Yen, Huang, Zhong, Zhang, Ravikumar, Dhillon, "Dual
Decomposed Learning with Factorwise Oracles for Structural SVMs of Large Output Domain",
NIPS 2016).

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
repeated ``qp_iters`` times.

Bigram oracle ("heap"): the table T sits in a global max-heap plus one heap per row and one
per column; labels split by the sign of their augment (-rho m): both positive -> enumerate;
one positive -> walk that row / column heap until the bound drops below the best; neither ->
walk the global heap likewise. Exact. ``"brute"`` scans the K^2 table.
"""
from collections import namedtuple

import numpy as np
from numba import njit

_JIT = dict(cache=True, nogil=True)

#: examples held: token ranges, features, labels (one entry per token unless noted)
GData = namedtuple("GData", "ex_ptr ex_alive tok_ptr fidx fval ytrue xsq first last linv")
#: unigram blocks: active labels, marginals, multipliers (left / right bigram), counts
GUni = namedtuple("GUni", "lab mu lamL lamR cnt")
#: bigram blocks (indexed by their left token): active pairs, marginals, counts
GBi = namedtuple("GBi", "a b mu cnt")
#: max-heaps over T: global (keys a * Kc + b), per row (columns), per column (rows)
GHeap = namedtuple("GHeap", "g gpos r rpos c cpos")
#: scratch space (dense label-indexed buffers kept zero between calls)
GScratch = namedtuple("GScratch", "augL augR mkL mkR rows cols aux auxv fbuf ibuf ibuf2 changed uacc")

ORACLE_BRUTE = 0
ORACLE_HEAP = 1
UNI_SLICE = 0     # exact scan of a random 1/nu slice of the labels (nu = 1: exact)
UNI_CAND = 1      # candidates given per token (MIPS)

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
            ra = augL[a]
            h = H.r[a]
            na = 0
            aux, auxv, na = _aux_push(aux, auxv, na, 0, T[a, h[0]])
            while na > 0:
                p, na = _aux_pop(aux, auxv, na)
                b = h[p]
                tv = s * T[a, b]
                touched += 1
                if tv + ra <= best:
                    break
                if mkR[b] == 0:
                    v = tv + ra + augR[b]
                    if v > best:
                        best = v
                        ba = a
                        bb = b
                for c in (2 * p + 1, 2 * p + 2):
                    if c < K:
                        aux, auxv, na = _aux_push(aux, auxv, na, c, T[a, h[c]])
        # (iii) b positive, a not: walk column heap of b
        for j in range(nposR):
            b = posR[j]
            rb = augR[b]
            h = H.c[b]
            na = 0
            aux, auxv, na = _aux_push(aux, auxv, na, 0, T[h[0], b])
            while na > 0:
                p, na = _aux_pop(aux, auxv, na)
                a = h[p]
                tv = s * T[a, b]
                touched += 1
                if tv + rb <= best:
                    break
                if mkL[a] == 0:
                    v = tv + rb + augL[a]
                    if v > best:
                        best = v
                        ba = a
                        bb = b
                for c in (2 * p + 1, 2 * p + 2):
                    if c < K:
                        aux, auxv, na = _aux_push(aux, auxv, na, c, T[h[c], b])
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
             cptr, cands, SC, counters):
    """One exact block step on the unigram factor of token t (oracle, then the exact
    minimizer over the active set: a projection, the Hessian being isotropic)."""
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
    h = s * Dt.xsq[t] + rho * (has_left + has_right)
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
            SC.changed[y] = 1
    return n


@njit(**_JIT)
def bi_step(f, a0, a1, U, B, T, K, Kc, s, rho, bi_mode, qp_iters, heaps, H, SC, counters):
    """Block step on the bigram factor f = (f, f + 1): oracle, then projected steps with an
    isotropic majorizer and exact line search over the active pairs."""
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
    for k in range(n):
        aa = B.a[f, k]
        bb = B.b[f, k]
        g[k] = s * T[aa, bb] + augL[aa] + augR[bb]
        if B.mu[f, k] > 0.0 and g[k] < worst:
            worst = g[k]
        if aa == a and bb == b:
            have = k
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
        for k in range(n):
            d = gam * tmp[3 * n + k]
            if d != 0.0:
                aa = B.a[f, k]
                bb = B.b[f, k]
                nv = B.mu[f, k] + d
                if nv < 0.0:
                    nv = 0.0
                d = nv - B.mu[f, k]
                B.mu[f, k] = nv
                T[aa, bb] -= d
                if heaps:
                    heap_t_changed(T, K, Kc, H, aa, bb)
    return n


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
                 qp_iters, heaps, cptr, cands, H, SC, counters):
    """One sweep over the factors of held example e: every unigram block, then every bigram."""
    a0 = Dt.ex_ptr[e]
    a1 = Dt.ex_ptr[e + 1]
    np.random.seed(seed)
    for t in range(a0, a1):
        rs = np.random.randint(nu) if nu > 1 else 0
        has_left = use_trans and t > a0
        has_right = use_trans and t + 1 < a1
        uni_step(t, has_left, has_right, Dt, U, B, Wu, C, K, D, s, rho, uni_mode, nu, rs,
                 cptr, cands, SC, counters)
    if use_trans:
        for t in range(a0, a1 - 1):
            bi_step(t, a0, a1, U, B, T, K, Kc, s, rho, bi_mode, qp_iters, heaps, H, SC, counters)


@njit(**_JIT)
def run_pass(order, Dt, U, B, Wu, T, C, K, Kc, D, s, rho, eta, use_trans, bi_mode, uni_mode, nu,
             seed, qp_iters, heaps, cptr, cands, H, SC, counters, mult, inner):
    """``inner`` sweeps over each example in ``order``; then (``mult``) the multiplier step on
    each of them. Returns the squared consistency residual seen by the multiplier step."""
    for i in range(order.shape[0]):
        e = order[i]
        if Dt.ex_alive[e]:
            for r in range(inner):
                example_pass(e, Dt, U, B, Wu, T, C, K, Kc, D, s, rho, use_trans, bi_mode, uni_mode, nu,
                             (seed + 7919 * i + 104729 * r) % 2147483647, qp_iters, heaps, cptr, cands, H, SC,
                             counters)
    res = 0.0
    if mult and use_trans:
        for i in range(order.shape[0]):
            e = order[i]
            if Dt.ex_alive[e]:
                res += multiplier_step(e, Dt, U, B, eta)
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
