"""Numba kernels shared by the per-structure modules: structure codes, the jit options, emission
scores, the dense ground-truth marks of set labelings and the token Gram matrix."""
import numpy as np
from numba import njit

CHAIN = 0
MULTICLASS = 1
MULTILABEL = 2
MLPAIR = 3   # multi-label with pairwise co-occurrence potentials (a fully connected binary MRF)
MLPAIR_MAX_LABELS = 16
HIER = 4     # hierarchical multi-label: labels are the leaves of a tree / DAG (see hierarchy.py)
HIER_MAX_DAG_LEAVES = 16

_JIT = dict(cache=True, nogil=True)


@njit(**_JIT)
def emission_add(E, coef, tok_ptr, fidx, fval, L, K, S, zero):
    """S[t, k] += coef * <x_t, E[:, k]> for the first K labels (x_t sparse, CSR); with ``zero``
    the rows are cleared first."""
    for t in range(L):
        if zero:
            for k in range(K):
                S[t, k] = 0.0
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            j = fidx[p]
            v = fval[p] * coef
            for k in range(K):
                S[t, k] += v * E[j, k]


@njit(**_JIT)
def row_support(st, nrow, K, Kc):
    """The non-zero tags of each per-token row of a statistic, ascending: (ptr, ks) with row t's
    tags in ks[ptr[t]:ptr[t + 1]]. A block's rows are mixtures of the few labelings it touched,
    so they hold few non-zeros out of K."""
    ptr = np.empty(nrow + 1, np.int64)
    ks = np.empty(nrow * K + 1, np.int32)
    q = 0
    ptr[0] = 0
    for t in range(nrow):
        base = t * Kc
        for k in range(K):
            ks[q] = k
            q += st[base + k] != 0.0
        ptr[t + 1] = q
    return ptr, ks


@njit(**_JIT)
def stat_emission_sqnorm(G, st, nrow, K, Kc):
    """The emission part of ||Phi_x(st)||^2: sum_{t,s} G[t, s] <st_t, st_s> over the ``nrow``
    per-token slots of width Kc at the start of a statistic (dense and sparse chain layouts).
    Only the non-zeros of each row are visited (the zero terms are left out, in the same order,
    so the value is the plain sum's): O(L K + L^2 nnz/row) instead of O(L^2 K)."""
    ptr, ks = row_support(st, nrow, K, Kc)
    v = 0.0
    for t in range(nrow):
        bt = t * Kc
        for s in range(nrow):
            g = G[t, s]
            if g == 0.0:
                continue
            bs = s * Kc
            acc = 0.0
            for p in range(ptr[s], ptr[s + 1]):
                k = ks[p]
                acc += st[bt + k] * st[bs + k]
            v += g * acc
    return v


@njit(**_JIT)
def stat_emission_apply(E, tok_ptr, fidx, fval, st, nrow, K, Kc, coef):
    """The emission part of U += coef * Phi_x(st) (per-token slots of width Kc), over the
    non-zeros of each row only (the zero terms would add 0)."""
    ptr, ks = row_support(st, nrow, K, Kc)
    for t in range(nrow):
        base = t * Kc
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            j = fidx[p]
            v = fval[p] * coef
            for q in range(ptr[t], ptr[t + 1]):
                k = ks[q]
                E[j, k] += v * st[base + k]


@njit(**_JIT)
def emission_scores(E, scale, tok_ptr, fidx, fval, L, K, S):
    """S[t, k] = scale * <x_t, E[:, k]> for the first K labels (x_t sparse, CSR)."""
    emission_add(E, scale, tok_ptr, fidx, fval, L, K, S, True)


@njit(**_JIT)
def level_points(best, m_max, ts, Ki, hs, gs):
    """The level points of the slack searches from the best score ``best[m]`` at each number
    m = 1..m_max of wrong labels (-inf: no labeling): h = 1 + best[m] - ts, g = m / Ki.
    Returns the number of points written to hs, gs."""
    c = 0
    for m in range(1, m_max + 1):
        if best[m] > -np.inf:
            hs[c] = 1.0 + best[m] - ts
            gs[c] = m / Ki
            c += 1
    return c

@njit(**_JIT)
def _ml_dense_truth(ytrue, ly, K, ybuf):
    for k in range(K):
        ybuf[k] = 0
    for q in range(ly):
        if ytrue[q] < K:
            ybuf[ytrue[q]] = 1

@njit(**_JIT)
def gram(tok_ptr, fidx, fval, L, G, mark):
    """G[t, s] = <x_t, x_s> for sparse tokens. ``mark`` is a scratch array of size
    n_features filled with zeros (left zeroed on return)."""
    for t in range(L):
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            mark[fidx[p]] += fval[p]
        for s in range(t, L):
            acc = 0.0
            for p in range(tok_ptr[s], tok_ptr[s + 1]):
                acc += mark[fidx[p]] * fval[p]
            G[t, s] = acc
            G[s, t] = acc
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            mark[fidx[p]] = 0.0
