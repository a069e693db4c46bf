"""Probabilities of a linear structured model's Gibbs distribution p(y | x) ∝ exp(beta score(x, y)):
the emission score table of a record, and the per-token marginals, the log partition function and
a sequence's score of a chain, by the forward-backward recursions in log space (Lafferty,
McCallum & Pereira, "Conditional Random Fields", ICML 2001; Rabiner, "A tutorial on hidden
Markov models", Proc. IEEE 1989).

A chain's score is ``sum_t S[t, y_t] + sum_t T[y_{t-1}, y_t] + B[0, y_0] + B[1, y_{L-1}]`` (the
transition and boundary terms only with ``use_trans``), the tables already multiplied by the
learner's scale, as the decoding kernels of ``streamssvm._kernels.chain`` score it.
"""
import numpy as np
from numba import njit

from .common import _INNER, _JIT, guard_inner


@njit(**_INNER)
def emission_table(E, ZE, zc, scale, tok_ptr, fidx, fval, L, K, S):
    """S[t, k] = scale * <x_t, E[:, k] - zc ZE[:, k]> for the first K labels; a feature index
    past the weight rows (a name the learner has not grown for) scores 0."""
    d = E.shape[0]
    for t in range(L):
        for k in range(K):
            S[t, k] = 0.0
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            f = fidx[p]
            if f < 0 or f >= d:
                continue
            v = fval[p] * scale
            if zc != 0.0:
                for k in range(K):
                    S[t, k] += v * (E[f, k] - zc * ZE[f, k])
            else:
                for k in range(K):
                    S[t, k] += v * E[f, k]


@njit(**_JIT)
def _logsumexp(a, n):
    m = -np.inf
    for i in range(n):
        if a[i] > m:
            m = a[i]
    if m == -np.inf:
        return m
    s = 0.0
    for i in range(n):
        s += np.exp(a[i] - m)
    return m + np.log(s)


@njit(**_JIT)
def chain_marginals(S, T, B, use_trans, L, K, beta, marg):
    """Per-token marginals ``marg[t, k] = p(y_t = k | x)`` of the chain's Gibbs distribution at
    inverse temperature ``beta``; returns log Z. O(L K^2) time, O(L K) memory."""
    A = np.empty((L, K))       # forward log messages (the position's own score included)
    Bk = np.empty((L, K))      # backward log messages (the position's own score excluded)
    buf = np.empty(K)
    for k in range(K):
        A[0, k] = beta * S[0, k] + (beta * B[0, k] if use_trans else 0.0)
    for t in range(1, L):
        for k in range(K):
            for j in range(K):
                buf[j] = A[t - 1, j] + (beta * T[j, k] if use_trans else 0.0)
            A[t, k] = _logsumexp(buf, K) + beta * S[t, k]
    for k in range(K):
        Bk[L - 1, k] = beta * B[1, k] if use_trans else 0.0
    for t in range(L - 2, -1, -1):
        for j in range(K):
            for k in range(K):
                buf[k] = (beta * T[j, k] if use_trans else 0.0) + beta * S[t + 1, k] + Bk[t + 1, k]
            Bk[t, j] = _logsumexp(buf, K)
    for k in range(K):
        buf[k] = A[L - 1, k] + Bk[L - 1, k]
    logZ = _logsumexp(buf, K)
    for t in range(L):
        for k in range(K):
            marg[t, k] = np.exp(A[t, k] + Bk[t, k] - logZ)
    return logZ


@njit(**_JIT)
def chain_score(S, T, B, use_trans, L, y):
    """score(x, y) of the tag sequence ``y`` (beta = 1)."""
    v = 0.0
    for t in range(L):
        v += S[t, y[t]]
        if use_trans:
            if t > 0:
                v += T[y[t - 1], y[t]]
    if use_trans:
        v += B[0, y[0]] + B[1, y[L - 1]]
    return v


@njit(**_JIT)
def chain_token_nll(S, T, B, use_trans, L, K, beta, y, marg):
    """- sum_t log p(y_t | x): the log-loss of the per-token marginals on the true tags."""
    chain_marginals(S, T, B, use_trans, L, K, beta, marg)
    v = 0.0
    for t in range(L):
        v -= np.log(max(marg[t, y[t]], 1e-300))
    return v


guard_inner(globals())
