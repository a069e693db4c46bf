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
def emission_scores(E, scale, tok_ptr, fidx, fval, L, K, S):
    """S[t, k] = scale * <x_t, E[:, k]> for the first K labels (x_t sparse, CSR)."""
    for t in range(L):
        for k in range(K):
            S[t, k] = 0.0
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            j = fidx[p]
            v = fval[p] * scale
            for k in range(K):
                S[t, k] += v * E[j, k]

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
