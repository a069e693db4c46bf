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
def averaged_best(gv, gu, n, nrm, par, V, Z, idx, val, up):
    """argmax_c A <V_c, x> - <Z_c, x> (the lazy average of MEMOIR's iterates, times their
    weights' sum) from float32 scores, exactly as the float64 scan computes it (per-row sums
    sv, sz in the scan's order, then (sv A) - sz, ties to the smallest class).

    ``gu[c]`` ~ <U_c, x> with U_c = A0 V_c - Z_c (the float32 mirror of the average at the
    weight sum A0 it was built at), ``gv[c]`` ~ <V_c, x> (read only when A != A0), so
    h_c = (A - A0) g_v + g_u estimates the score. ``nrm[c]`` = (|V_c|, |Z_c|, |U_c|), float64
    2-norms of the float64 rows. ``par`` = (A, A0, bnd, r64, tiny, w64, x1u), x1 = sum |x_p|:

    - ``bnd |r|``: a float32 product's error for the float64 row r (casts of r and x, any
      summation order; and x's dense form against its entries);
    - ``r64 (A |V_c| + |Z_c|)``: the float64 scan's own error (its two sums, then (sv A) - sz);
    - ``w64 (A0 |V_c| + |Z_c|)``, w64 = 2.0001 u x1: U's entries are A0 V - Z rounded in float64;
    - ``|dA| (|V_c| (bnd + x1u) + tiny) + 4u (|dA| |g_v| + |g_u|)``: g_v's error, the rounding of
      dA = A - A0 and of h itself (``4u |g_u|`` alone when dA = 0: a non-finite g_u then gets a
      NaN or infinite bound and is re-scored);
    - ``tiny``: float32 subnormals.

    With e_c their sum (times 1 + 1e-6 for the norms' own rounding), every class whose float64
    score can be the largest has h_c + e_c >= L = max_b (h_b - e_b); only those (and any class
    whose float32 score is not finite) are re-scored. Returns (class, candidates re-scored);
    class -2 when L is not finite from above (the caller runs the float64 scan)."""
    A = par[0]
    A0 = par[1]
    bnd = par[2]
    r64 = par[3]
    tiny = par[4]
    w64 = par[5]
    x1u = par[6]
    dA = A - A0
    adA = abs(dA)
    u4 = 4.0 * 2.0 ** -53
    L = -np.inf
    for c in range(n):
        nv = nrm[c, 0]
        nz = nrm[c, 1]
        gu_ = np.float64(gu[c])
        if dA != 0.0:
            gv_ = np.float64(gv[c])
            hc = dA * gv_ + gu_
            er = adA * (nv * (bnd + x1u) + tiny) + u4 * (adA * abs(gv_) + abs(gu_))
        else:
            hc = gu_
            er = u4 * abs(gu_)    # also makes a non-finite g_u's bound NaN / inf: re-scored
        ec = (er + nrm[c, 2] * bnd + tiny + (A0 * nv + nz) * w64 + (A * nv + nz) * r64) * (1.0 + 1e-6)
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
def mirror_average_rows(M, nrm, V, Z, A0, ids, n_ids, with_z):
    """Rows ``ids[:n_ids]`` of the averaged mirror: M[1, c] = float32(A0 V_c - Z_c) (each entry
    rounded in float64 first), nrm[c, 2] = |A0 V_c - Z_c| and, with ``with_z``, nrm[c, 1] =
    |Z_c| (float64; four partial sums, so the norms are not the sequential sums' bits: the
    bounds that use them carry a 1 + 1e-6 factor)."""
    d = M.shape[2]
    d4 = d - d % 4
    for q in range(n_ids):
        c = ids[q]
        u0 = u1 = u2 = u3 = 0.0
        for j in range(0, d4, 4):
            a0 = A0 * V[c, j] - Z[c, j]
            a1 = A0 * V[c, j + 1] - Z[c, j + 1]
            a2 = A0 * V[c, j + 2] - Z[c, j + 2]
            a3 = A0 * V[c, j + 3] - Z[c, j + 3]
            M[1, c, j] = np.float32(a0)
            M[1, c, j + 1] = np.float32(a1)
            M[1, c, j + 2] = np.float32(a2)
            M[1, c, j + 3] = np.float32(a3)
            u0 += a0 * a0
            u1 += a1 * a1
            u2 += a2 * a2
            u3 += a3 * a3
        for j in range(d4, d):
            a0 = A0 * V[c, j] - Z[c, j]
            M[1, c, j] = np.float32(a0)
            u0 += a0 * a0
        nrm[c, 2] = np.sqrt((u0 + u1) + (u2 + u3))
        if with_z:
            z0 = z1 = z2 = z3 = 0.0
            for j in range(0, d4, 4):
                z0 += Z[c, j] * Z[c, j]
                z1 += Z[c, j + 1] * Z[c, j + 1]
                z2 += Z[c, j + 2] * Z[c, j + 2]
                z3 += Z[c, j + 3] * Z[c, j + 3]
            for j in range(d4, d):
                z0 += Z[c, j] * Z[c, j]
            nrm[c, 1] = np.sqrt((z0 + z1) + (z2 + z3))


@njit(**_JIT)
def mirror_row(M, nrm, S, k, c, idx):
    """Row c of the float64 rows S changed at the columns ``idx``: copy them into the float32
    mirror M[k, c] and recompute the row's norm nrm[c, k] (the error bounds' factor)."""
    for p in range(idx.shape[0]):
        M[k, c, idx[p]] = np.float32(S[c, idx[p]])
    s = 0.0
    for j in range(S.shape[1]):
        s += S[c, j] * S[c, j]
    nrm[c, k] = np.sqrt(s)
