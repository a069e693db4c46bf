"""Numba kernels of the cutting-plane learner (restricted dual QP on per-example working sets).

A working-set entry of example i is a statistic ``d = c (s(y_i) - s(y))`` (``c = 1`` for margin
rescaling, ``c = Delta(y)`` for slack rescaling; see ``structops`` for the statistic layouts), so
that ``H_i(y; w) = Delta(y) - <w, Phi_x(d)>``.
"""
import numpy as np
from numba import njit

from .projection import smo_simplex
from .structops import CHAIN, MLPAIR

_JIT = dict(cache=True, nogil=True, no_cfunc_wrapper=True)


@njit(**_JIT)
def score_vector(kind, S, T, B, scale, L, K, Kc, use_trans, r):
    """r such that <w, Phi_x(st)> = r . st for every statistic st (S: emission scores with
    ``scale`` included, as ``structops.emission_scores`` writes them)."""
    for q in range(r.shape[0]):
        r[q] = 0.0
    if kind == MLPAIR:
        for k in range(K):
            r[k] = S[0, k]
            for l in range(k + 1, K):
                r[Kc + k * Kc + l] = scale * T[k, l]
        return
    nrow = 1 if kind != CHAIN else L
    for t in range(nrow):
        for k in range(K):
            r[t * Kc + k] = S[t, k]
    if kind == CHAIN and use_trans:
        off = L * Kc
        for j in range(K):
            for k in range(K):
                r[off + j * Kc + k] = scale * T[j, k]
        off2 = off + Kc * Kc
        for k in range(K):
            r[off2 + k] = scale * B[0, k]
            r[off2 + Kc + k] = scale * B[1, k]


@njit(**_JIT)
def stat_dot(kind, G, a, b, L, K, Kc, use_trans):
    """<Phi_x(a), Phi_x(b)> with the token Gram matrix G = X X^T."""
    v = 0.0
    if kind == MLPAIR:
        for k in range(K):
            v += G[0, 0] * a[k] * b[k]
            for l in range(k + 1, K):
                v += a[Kc + k * Kc + l] * b[Kc + k * Kc + l]
        return v
    nrow = 1 if kind != CHAIN else L
    for t in range(nrow):
        for s in range(nrow):
            g = G[t, s]
            if g == 0.0:
                continue
            acc = 0.0
            for k in range(K):
                acc += a[t * Kc + k] * b[s * Kc + k]
            v += g * acc
    if kind == CHAIN and use_trans:
        off = L * Kc
        for q in range(off, off + Kc * Kc + 2 * Kc):
            v += a[q] * b[q]
    return v


@njit(**_JIT)
def block_qp(Q, grad, beta, s, tol, max_steps):
    """Pairwise (SMO) steps with exact line search on one block of the restricted dual:

        max_beta  beta . c - (s / 2) beta^T Q beta   over the simplex,

    given ``grad`` = c - s Q beta at the current ``beta`` (updated in place with ``beta``).
    In the learner, grad_y = H_i(y; w) for the working-set labelings y (the dual is scaled by
    n). Stops when the block's Wolfe gap max_y grad_y - beta . grad <= tol or after
    ``max_steps`` steps (the loop is :func:`streamssvm._kernels.projection.smo_simplex`).
    Returns the number of steps."""
    return smo_simplex(Q, grad, beta, s, tol, max_steps, True, 1e-15)


@njit(**_JIT)
def ray_slope(c0, c1, t, tol):
    """sum_i of the right derivative at t of max_y (c0[i, y] + t c1[i, y]) (the largest slope
    among the maximizers, ties within ``tol`` relative): BMRM's line search along a ray."""
    s = 0.0
    for i in range(c0.shape[0]):
        top = -np.inf
        for k in range(c0.shape[1]):
            v = c0[i, k] + t * c1[i, k]
            if v > top:
                top = v
        thr = top - tol * (1.0 + abs(top))
        e = -np.inf
        for k in range(c0.shape[1]):
            if c0[i, k] + t * c1[i, k] >= thr and c1[i, k] > e:
                e = c1[i, k]
        s += e
    return s
