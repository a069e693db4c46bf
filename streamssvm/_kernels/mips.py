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


@njit(**_JIT)
def dense_query32(idx, val, qd, q32):
    """x = (idx, val) into the dense float64 ``qd`` (repeated indices summed, as ``np.bincount``)
    and its float32 cast ``q32``; returns (|x|_2 of ``qd``, sum_p |val_p|)."""
    for j in range(qd.shape[0]):
        qd[j] = 0.0
    x1 = 0.0
    for p in range(idx.shape[0]):
        qd[idx[p]] += val[p]
        x1 += abs(val[p])
    s = 0.0
    for j in range(qd.shape[0]):
        s += qd[j] * qd[j]
        q32[j] = np.float32(qd[j])
    return np.sqrt(s), x1


@njit(**_JIT)
def averaged_best(g, n, nrm_v, nrm_z, A, bnd, tiny, V, Z, idx, val, up):
    """argmax_c A <V_c, x> - <Z_c, x> (the lazy average of MEMOIR's iterates, times their
    weights' sum) from float32 scores ``g`` (g[2c] ~ <V_c, x>, g[2c+1] ~ <Z_c, x>), exactly as
    the float64 scan computes it: ``nrm_v[c] bnd + tiny`` bounds the gap between a float32 and
    the float64 scan's <V_c, x> (the same for Z), and ``u (A |g_v| + |g_z|)`` the float64
    rounding of combining them (twice over), so with e_c their sum every class whose float64
    score can be the largest has h_c + e_c >= L = max_b (h_b - e_b). Only those (and any class
    whose float32 score is not finite) are re-scored in float64 (per-row sums in the scan's
    order, then (s_v A) - s_z), ties to the smallest class. Returns (class, candidates
    re-scored); class -2 when L is not finite from above (the caller runs the float64 scan)."""
    L = -np.inf
    u = 8.0 * 2.0 ** -53
    ta = (A + 1.0) * tiny
    for c in range(n):
        gv = np.float64(g[2 * c])
        gz = np.float64(g[2 * c + 1])
        hc = A * gv - gz
        ec = (A * nrm_v[c] * bnd + nrm_z[c] * bnd + ta + u * (A * abs(gv) + abs(gz))) * (1.0 + 1e-6)
        up[c] = hc + ec
        lo = hc - ec
        L = lo if lo > L else L    # NaN never raises L
    if L == np.inf:
        return -2, 0
    best = -np.inf
    arg = -1
    k = 0
    for c in range(n):
        if up[c] < L:    # NaN (a non-finite float32 score): re-scored
            continue
        k += 1
        sv = 0.0
        sz = 0.0
        for p in range(idx.shape[0]):
            sv += V[c, idx[p]] * val[p]
        for p in range(idx.shape[0]):
            sz += Z[c, idx[p]] * val[p]
        s = sv * A
        s = s - sz
        if s > best:   # ascending classes, strict: the smallest class among the best
            best = s
            arg = c
    return arg, k


@njit(**_JIT)
def mirror_row(M, nrm, S, k, c, idx):
    """Row c of the float64 rows S changed at the columns ``idx``: copy them into the float32
    mirror M[c, k] and recompute the row's norm nrm[c, k] (the error bounds' factor)."""
    for p in range(idx.shape[0]):
        M[c, k, idx[p]] = np.float32(S[c, idx[p]])
    s = 0.0
    for j in range(S.shape[1]):
        s += S[c, j] * S[c, j]
    nrm[c, k] = np.sqrt(s)
