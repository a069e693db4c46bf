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
