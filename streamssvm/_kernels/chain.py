"""Chains with Hamming loss: the slack-rescaling dynamic program over (position, tag, number of
wrong tags) and the read-back of the best labeling at a given number of wrong tags."""
import numpy as np
from numba import njit

from .common import _JIT

#: The chain's loss is sum_t C[y_t, y'_t] / Z. The ``Ki`` slot of the kernels (the number of
#: labels of a multi-label example; unused by chains otherwise) carries Z's kind for chains:
#: Ki = 1 (the default everywhere): Z = L, the loss normalized per sentence; Ki = 2: Z = 1, the
#: loss per token (long sentences weigh more, as in a CRF's log-likelihood).
CHAIN_LOSS_NORMALIZED = 1
CHAIN_LOSS_TOKEN = 2


@njit(**_JIT)
def chain_loss_norm(L, Ki):
    """Z of the chain loss sum_t C[y_t, y'_t] / Z: L for Ki = 1 (normalized), 1 for Ki = 2 (per token)."""
    return 1.0 if Ki == CHAIN_LOSS_TOKEN else float(L)


@njit(**_JIT)
def _chain_wrong_dp(S, T, B, scale, L, K, use_trans, ytrue, V):
    """V[t, k, m] = best score of tags 0..t ending in tag k with m wrong tags (-inf: none)."""
    NEG = -np.inf
    for t in range(L):
        for k in range(K):
            for m in range(L + 1):
                V[t, k, m] = NEG
    for k in range(K):
        w = 1 if k != ytrue[0] else 0
        v = S[0, k]
        if use_trans:
            v += scale * B[0, k]
        V[0, k, w] = v
    for t in range(1, L):
        for k in range(K):
            w = 1 if k != ytrue[t] else 0
            for m in range(w, t + 2):
                best = NEG
                for j in range(K):
                    pv = V[t - 1, j, m - w]
                    if pv == NEG:
                        continue
                    v = pv + (scale * T[j, k] if use_trans else 0.0)
                    if v > best:
                        best = v
                if best > NEG:
                    V[t, k, m] = best + S[t, k]

@njit(**_JIT)
def _chain_level_best(V, B, scale, L, K, use_trans, m):
    """Best full-sequence score with exactly m wrong tags (end bias included)."""
    best = -np.inf
    for k in range(K):
        v = V[L - 1, k, m]
        if v == -np.inf:
            continue
        if use_trans:
            v += scale * B[1, k]
        if v > best:
            best = v
    return best

@njit(**_JIT)
def chain_level_labeling(S, T, B, scale, L, K, use_trans, ytrue, V, m, out):
    """After ``slack_levels`` (which fills V), the best labeling with exactly m wrong tags.
    Returns False when no labeling has m wrong tags."""
    NEG = -np.inf
    best = NEG
    bk = -1
    for k in range(K):
        v = V[L - 1, k, m]
        if v == NEG:
            continue
        if use_trans:
            v += scale * B[1, k]
        if v > best:
            best = v
            bk = k
    if bk < 0:
        return False
    k = bk
    out[L - 1] = k
    for t in range(L - 1, 0, -1):
        w = 1 if k != ytrue[t] else 0
        target = V[t, k, m] - S[t, k]
        found = -1
        for j in range(K):
            pv = V[t - 1, j, m - w]
            if pv == NEG:
                continue
            v = pv + (scale * T[j, k] if use_trans else 0.0)
            if abs(v - target) <= 1e-9 * (1.0 + abs(target)):
                found = j
                break
        k = found
        m -= w
        out[t - 1] = k
    return True


@njit(**_JIT)
def chain_viterbi(S, T, B, scale, L, K, use_trans, ytrue, C, lw, V, bp, out):
    """Viterbi: argmax_y score(y) + lw * sum_t C[ytrue[t], y_t] (lw = 0: MAP) in O(L K^2), into
    ``out``; returns the maximum. V, bp: (>= L, >= K) work tables."""
    for k in range(K):
        v = S[0, k]
        if use_trans:
            v += scale * B[0, k]
        if lw != 0.0:
            v += lw * C[ytrue[0], k]
        V[0, k] = v
    for t in range(1, L):
        for k in range(K):
            best = -np.inf
            arg = 0
            for j in range(K):
                v = V[t - 1, j] + scale * T[j, k]
                if v > best:
                    best = v
                    arg = j
            u = S[t, k]
            if lw != 0.0:
                u += lw * C[ytrue[t], k]
            V[t, k] = best + u
            bp[t, k] = arg
    best = -np.inf
    arg = 0
    for k in range(K):
        v = V[L - 1, k]
        if use_trans:
            v += scale * B[1, k]
        if v > best:
            best = v
            arg = k
    out[L - 1] = arg
    for t in range(L - 1, 0, -1):
        out[t - 1] = bp[t, out[t]]
    return best


@njit(**_JIT)
def _chain_truth_score(S, T, B, scale, L, use_trans, ytrue):
    v = 0.0
    for t in range(L):
        v += S[t, ytrue[t]]
    if use_trans:
        v += scale * (B[0, ytrue[0]] + B[1, ytrue[L - 1]])
        for t in range(1, L):
            v += scale * T[ytrue[t - 1], ytrue[t]]
    return v


@njit(**_JIT)
def chain_slack(S, T, B, scale, L, K, use_trans, ytrue, V, out, Z):
    """Exact slack oracle of a chain with Hamming loss: the DP over wrong-tag counts, then the
    best level (m / Z)(1 + best score with m wrong tags - truth score) and its labeling
    (Z = ``chain_loss_norm(L, Ki)``)."""
    _chain_wrong_dp(S, T, B, scale, L, K, use_trans, ytrue, V)
    ts = _chain_truth_score(S, T, B, scale, L, use_trans, ytrue)
    best = 0.0
    best_m = 0
    for m in range(1, L + 1):
        v = _chain_level_best(V, B, scale, L, K, use_trans, m)
        if v == -np.inf:
            continue
        h = (m / Z) * (1.0 + v - ts)
        if h > best:
            best = h
            best_m = m
    if best_m == 0:
        for t in range(L):
            out[t] = ytrue[t]
        return 0.0
    chain_level_labeling(S, T, B, scale, L, K, use_trans, ytrue, V, best_m, out)
    return best


@njit(**_JIT)
def chain_levels(S, T, B, scale, L, K, use_trans, ytrue, V, hs, gs, Z):
    """The level points of a Hamming chain: one per number m of wrong tags."""
    _chain_wrong_dp(S, T, B, scale, L, K, use_trans, ytrue, V)
    ts = _chain_truth_score(S, T, B, scale, L, use_trans, ytrue)
    c = 0
    for m in range(1, L + 1):
        best = _chain_level_best(V, B, scale, L, K, use_trans, m)
        if best > -np.inf:
            hs[c] = 1.0 + best - ts
            gs[c] = m / Z
            c += 1
    return c
