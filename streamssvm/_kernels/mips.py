"""Numba kernels for maximum-inner-product search over class weight rows."""
import numpy as np
from numba import njit

_JIT = dict(cache=True, nogil=True, no_cfunc_wrapper=True)


@njit(**_JIT)
def best_excluding(scores, n_rows, exclude):
    """argmax over c != exclude (exclude < 0: none); -1 when no row is left."""
    best = -np.inf
    arg = -1
    for c in range(n_rows):
        if c == exclude:
            continue
        if scores[c] > best:
            best = scores[c]
            arg = c
    return arg


@njit(**_JIT)
def rescore(W, cands, n_cands, idx, val, exclude):
    """The best candidate (exact score on the true rows), excluding ``exclude``; returns
    (class, score)."""
    best = -np.inf
    arg = -1
    for q in range(n_cands):
        c = cands[q]
        if c == exclude or c < 0:
            continue
        acc = 0.0
        for p in range(idx.shape[0]):
            acc += W[c, idx[p]] * val[p]
        if acc > best or (acc == best and c < arg):  # ties: the smallest class, as the full scan
            best = acc
            arg = c
    return arg, best


@njit(**_JIT)
def sign_codes(V, P, out):
    """64-bit sign codes of the rows of V under the 64 hyperplanes P (64 x dim)."""
    for r in range(V.shape[0]):
        code = np.uint64(0)
        for b in range(64):
            acc = 0.0
            for j in range(V.shape[1]):
                acc += P[b, j] * V[r, j]
            if acc > 0.0:
                code |= np.uint64(1) << np.uint64(b)
        out[r] = code


@njit(**_JIT)
def hamming_topk(codes, n_rows, q, k, out):
    """Indices of the k rows whose code is closest to q in Hamming distance."""
    dist = np.empty(n_rows, dtype=np.int64)
    for r in range(n_rows):
        x = codes[r] ^ q
        c = 0
        while x:
            x &= x - np.uint64(1)
            c += 1
        dist[r] = c
    order = np.argsort(dist, kind="mergesort")
    m = min(k, n_rows)
    for i in range(m):
        out[i] = order[i]
    return m


@njit(**_JIT)
def rescore_into(W, cands, n_cands, idx, val, exclude, out):
    """Like :func:`rescore`, also writing each candidate's exact score into ``out``."""
    best = -np.inf
    arg = -1
    for q in range(n_cands):
        c = cands[q]
        if c < 0:
            out[q] = -np.inf
            continue
        acc = 0.0
        for p in range(idx.shape[0]):
            acc += W[c, idx[p]] * val[p]
        out[q] = acc
        if c == exclude:
            continue
        if acc > best or (acc == best and c < arg):  # ties: the smallest class, as the full scan
            best = acc
            arg = c
    return arg, best


@njit(**_JIT)
def pick_rescaled(cands, scores, n_cands, y, costs, s_y, acc, slack):
    """Most violating candidate under a cost row (costs[q] = Delta(y, cands[q])): slack
    rescaling maximizes costs[q] (1 + acc (scores[q] - s_y)), margin rescaling
    costs[q] + acc (scores[q] - s_y); ties go to the smaller class. Returns (class, violation,
    position); class -1 when there is no candidate other than y."""
    best = -np.inf
    arg = -1
    pos = -1
    for q in range(n_cands):
        c = cands[q]
        if c == y or c < 0:
            continue
        m = acc * (scores[q] - s_y)
        if slack:
            v = costs[q] * (1.0 + m)
        else:
            v = costs[q] + m
        if v > best or (v == best and c < arg):
            best = v
            arg = c
            pos = q
    return arg, best, pos
