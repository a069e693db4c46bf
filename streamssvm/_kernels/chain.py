"""Chains with Hamming loss: the slack-rescaling dynamic program over (position, tag, number of
wrong tags) and the read-back of the best labeling at a given number of wrong tags."""
import numpy as np
from numba import njit, types

from .common import _INNER, _JIT
from .fnptr import function_at, jit_address

#: The chain's loss is sum_t C[y_t, y'_t] / Z. The ``Ki`` slot of the kernels (the number of
#: labels of a multi-label example; unused by chains otherwise) carries Z's kind for chains:
#: Ki = 1 (the default everywhere): Z = L, the loss normalized per sentence; Ki = 2: Z = 1, the
#: loss per token (long sentences weigh more, as in a CRF's log-likelihood).
CHAIN_LOSS_NORMALIZED = 1
CHAIN_LOSS_TOKEN = 2


@njit(**_INNER)
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


# Compile structure: ``chain_viterbi``, ``chain_viterbi_with_support`` and ``viterbi_support`` only
# choose between the two loops (``chain_viterbi_sparse``, ``chain_viterbi_dense``), so they are
# inlined into their callers' numba IR (``inline="always"``; called from Python they compile as
# usual): numba optimizes a separately compiled function together with all it calls, then again
# inside every caller, and a selector compiled apart cost a cold start one more optimization of
# both loops per decoder. The sparse loop and its support scan are called through their
# addresses (``fnptr``; the Model bundle's ``graph`` field of a chain, :func:`sparse_viterbi`):
# they compile when a model first holds VITERBI_SPARSE_MIN_K tags, not with every decoder (a
# first use with fewer tags never compiles them: -0.8 CPU s of SequenceTagger's cold start).

#: The sparse Viterbi runs when at most this fraction of the K x K transition weights is non-zero
#: (and K >= VITERBI_SPARSE_MIN_K); denser tables take the dense loop. Measured crossover (random
#: T, L = 20, scan included): density ~0.25 at K = 48 and 472, ~0.2 at K = 96, ~0.05 at K = 24.
VITERBI_SPARSE_MAX_DENSITY = 0.2
VITERBI_SPARSE_MIN_K = 32
#: How many of the best previous tags the sparse Viterbi keeps per position (``_top_tags``).
VITERBI_TOP = 16


@njit(**_INNER)
def _viterbi_first(S, B, scale, K, use_trans, ytrue, C, lw, V):
    for k in range(K):
        v = S[0, k]
        if use_trans:
            v += scale * B[0, k]
        if lw != 0.0:
            v += lw * C[ytrue[0], k]
        V[0, k] = v


@njit(**_INNER)
def _viterbi_last(B, scale, L, K, use_trans, V, bp, out):
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


@njit(**_INNER)
def _viterbi_unary(S, ytrue, C, lw, t, K, V):
    """V[t, k] += S[t, k] + lw * C[ytrue[t], k] (the emission-like part of position t)."""
    for k in range(K):
        u = S[t, k]
        if lw != 0.0:
            u += lw * C[ytrue[t], k]
        V[t, k] += u


@njit(**_INNER)
def chain_viterbi_dense(S, trans, scale, L, K, use_trans, ytrue, C, lw, work, out):
    """``chain_viterbi`` over every tag pair, O(L K^2): the previous tag j in the outer loop and
    the tag k in the inner one, so the inner loop runs along a row of T with a running best and
    argmax per k (contiguous reads; numba 0.68 still does not vectorize the running max inside the
    nested loop: 1.2-1.3x the k-outer loop at K = 472). Ties go to the smallest j."""
    T, B = trans
    V, bp = work
    _viterbi_first(S, B, scale, K, use_trans, ytrue, C, lw, V)
    for t in range(1, L):
        Vt = V[t]
        bt = bp[t]
        for k in range(K):
            Vt[k] = -np.inf
            bt[k] = 0
        for j in range(K):
            vj = V[t - 1, j]
            Tj = T[j]
            jj = np.int32(j)
            for k in range(K):
                v = vj + scale * Tj[k]
                b = Vt[k]
                up = v > b
                Vt[k] = v if up else b
                bt[k] = jj if up else bt[k]
        _viterbi_unary(S, ytrue, C, lw, t, K, V)
    return _viterbi_last(B, scale, L, K, use_trans, V, bp, out)


@njit(**_INNER)
def transition_support(T, K, max_nnz):
    """The non-zero pattern of T[:K, :K] by rows: (ptr, idx, n) with row j's columns in
    idx[ptr[j]:ptr[j + 1]] (ascending). n = -1 when there are more than ``max_nnz`` non-zeros
    (the scan stops there). One branch-free pass over T (every column index is written, the
    write position advances on non-zeros)."""
    ptr = np.empty(K + 1, np.int64)
    idx = np.empty(max_nnz + K + 1, np.int32)
    q = 0
    ptr[0] = 0
    for j in range(K):
        Tj = T[j]
        for k in range(K):
            idx[q] = k
            q += Tj[k] != 0.0
        ptr[j + 1] = q
        if q > max_nnz:
            return ptr, idx, -1
    return ptr, idx, q


@njit(**_INNER)
def _top_tags(v, K, R, tv, tj):
    """The R largest entries of v[:K] in decreasing order, ties by increasing index (tv values,
    tj indices). Returns how many were kept (min(R, K))."""
    n = 0
    for j in range(K):
        x = v[j]
        if n == R and not x > tv[n - 1]:
            continue
        p = n if n < R else R - 1
        while p > 0 and x > tv[p - 1]:
            if p < R:
                tv[p] = tv[p - 1]
                tj[p] = tj[p - 1]
            p -= 1
        tv[p] = x
        tj[p] = j
        if n < R:
            n += 1
    return n


@njit(**_INNER)
def chain_viterbi_sparse(S, trans, scale, L, K, use_trans, ytrue, C, lw, work, out, support):
    """``chain_viterbi`` when few transition weights are non-zero, exactly: with supp(k) the
    previous tags j with T[j, k] != 0 (``transition_support``; any superset works),

        max_j V[j] + s T[j, k] = max( max_{j in supp(k)} V[j] + s T[j, k],  max_{j not in supp(k)} V[j] ).

    The first term walks the support (O(nnz) per position); the second walks the previous tags
    by decreasing V (the ``VITERBI_TOP`` best, then a scan of column k if all of those are in
    supp(k)) until one is outside supp(k). Same value and, ties included, the same labeling as
    ``chain_viterbi_dense`` (smallest j on ties; every candidate is computed as V[j] + s T[j, k])."""
    T, B = trans
    V, bp = work
    ptr, idx = support[0], support[1]
    _viterbi_first(S, B, scale, K, use_trans, ytrue, C, lw, V)
    R = min(VITERBI_TOP, K)
    tv = np.empty(R)
    tj = np.empty(R, np.int64)
    cb = np.empty(K)
    ca = np.empty(K, np.int64)
    for t in range(1, L):
        Vp = V[t - 1]
        nt = _top_tags(Vp, K, R, tv, tj)
        for k in range(K):
            cb[k] = -np.inf
            ca[k] = -1
        for j in range(K):
            vj = Vp[j]
            Tj = T[j]
            for p in range(ptr[j], ptr[j + 1]):
                k = idx[p]
                v = vj + scale * Tj[k]
                if v > cb[k]:
                    cb[k] = v
                    ca[k] = j
        for k in range(K):
            nb = -np.inf
            na = -1
            for r in range(nt):
                j = tj[r]
                if T[j, k] == 0.0:
                    nb = Vp[j] + scale * T[j, k]
                    na = j
                    break
            if na < 0 and nt < K:   # the R best are all in supp(k): scan the column
                for j in range(K):
                    if T[j, k] == 0.0:
                        v = Vp[j] + scale * T[j, k]
                        if na < 0 or v > nb:
                            nb = v
                            na = j
            if na >= 0 and (ca[k] < 0 or nb > cb[k] or (nb == cb[k] and na < ca[k])):
                best = nb
                arg = na
            elif ca[k] >= 0:
                best = cb[k]
                arg = ca[k]
            else:
                best = -np.inf
                arg = 0
            V[t, k] = best
            bp[t, k] = arg
        _viterbi_unary(S, ytrue, C, lw, t, K, V)
    return _viterbi_last(B, scale, L, K, use_trans, V, bp, out)


_F2 = types.Array(types.float64, 2, "C")
_I32 = types.Array(types.int32, 1, "C")
#: (ptr, idx, n) of ``transition_support``
_SUPPORT = types.Tuple((types.Array(types.int64, 1, "C"), _I32, types.int64))
#: ``transition_support`` and ``chain_viterbi_sparse`` as their callers call them through an address
_SUPPORT_FN = types.FunctionType(_SUPPORT(_F2, types.int64, types.int64))
_SPARSE_FN = types.FunctionType(types.float64(
    _F2, types.UniTuple(_F2, 2), types.float64, types.int64, types.int64, types.boolean, _I32, _F2, types.float64,
    types.Tuple((_F2, types.Array(types.int32, 2, "C"))), _I32, _SUPPORT))
_support_at = function_at(_SUPPORT_FN)
_sparse_at = function_at(_SPARSE_FN)
_ADDRESSES = {}


def sparse_viterbi(K):
    """The chain's ``graph`` field of the Model bundle (``bundles.Model``): the addresses of
    ``transition_support`` and ``chain_viterbi_sparse`` (``fnptr.jit_address``; compiled, or
    loaded from the kernel cache, at the first call of the process) when ``K`` >=
    VITERBI_SPARSE_MIN_K, else (0, 0): the decoders then run the dense loop.

    >>> sparse_viterbi(3)
    (0, 0)
    >>> min(sparse_viterbi(VITERBI_SPARSE_MIN_K)) > 0
    True
    """
    if K < VITERBI_SPARSE_MIN_K:
        return (0, 0)
    got = _ADDRESSES.get("sparse")
    if got is None:
        got = _ADDRESSES["sparse"] = (jit_address(transition_support, _SUPPORT_FN.signature),
                                      jit_address(chain_viterbi_sparse, _SPARSE_FN.signature))
    return got


@njit(inline="always", **_INNER)
def dense_support():
    """The support that says "run the dense loop" (n = -1, no sparse loop address), in the
    shape of :func:`viterbi_support`'s. (``np.empty`` then a store, not ``np.zeros``: see
    ``common.py`` on allocations.)"""
    ptr = np.empty(1, np.int64)
    idx = np.empty(1, np.int32)
    ptr[0] = 0
    idx[0] = 0
    return ptr, idx, np.int64(-1), np.int64(0)


@njit(inline="always", **_JIT)
def viterbi_support(T, K, sparse):
    """The transition support ``chain_viterbi`` would scan, for a T that stays fixed over many
    calls (a gap pass, a prediction batch): (ptr, idx, n, address of the sparse loop) with
    (ptr, idx, n) as ``transition_support``, n = -1 when the dense loop is the one to run
    (K < ``VITERBI_SPARSE_MIN_K``, T too dense, or ``sparse`` = :func:`sparse_viterbi` (0, 0))."""
    if K < VITERBI_SPARSE_MIN_K or sparse[0] == 0:
        return dense_support()
    ptr, idx, n = _support_at(sparse[0])(T, np.int64(K), np.int64(VITERBI_SPARSE_MAX_DENSITY * K * K))
    return ptr, idx, n, np.int64(sparse[1])


@njit(inline="always", **_JIT)
def chain_viterbi_with_support(S, trans, scale, L, K, use_trans, ytrue, C, lw, work, out, support):
    """``chain_viterbi`` with the support of T computed once by ``viterbi_support`` (T unchanged
    since): the same value and labeling, without the per-call scan of T.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0); K, L = 40, 6
    >>> T = np.where(rng.random((K, K)) < 0.05, rng.normal(size=(K, K)), 0.0)
    >>> S = rng.normal(size=(L, K)); B = np.zeros((2, K)); y = np.zeros(L, np.int32); C = np.zeros((K, K))
    >>> o1, o2 = np.zeros(L, np.int32), np.zeros(L, np.int32)
    >>> V, bp = np.zeros((L, K)), np.zeros((L, K), np.int32)
    >>> a = chain_viterbi(S, (T, B), 1.0, L, K, True, y, C, 0.0, (V, bp), o1, sparse_viterbi(K))
    >>> support = viterbi_support(T, K, sparse_viterbi(K))
    >>> b = chain_viterbi_with_support(S, (T, B), 1.0, L, K, True, y, C, 0.0, (V, bp), o2, support)
    >>> support[2] > 0, a == b, o1.tolist() == o2.tolist()
    (True, True, True)
    """
    n = support[2]
    if L > 1 and n >= 0:
        return _sparse_at(support[3])(S, trans, scale, np.int64(L), np.int64(K), use_trans, ytrue, C, lw, work, out,
                                      (support[0], support[1], n))
    return chain_viterbi_dense(S, trans, scale, L, K, use_trans, ytrue, C, lw, work, out)


@njit(inline="always", **_JIT)
def chain_viterbi(S, trans, scale, L, K, use_trans, ytrue, C, lw, work, out, sparse):
    """Viterbi: argmax_y score(y) + lw * sum_t C[ytrue[t], y_t] (lw = 0: MAP) into ``out``;
    returns the maximum. V, bp: (>= L, >= K) work tables. Exact either way: the sparse DP of
    ``chain_viterbi_sparse`` when at most ``VITERBI_SPARSE_MAX_DENSITY`` of T[:K, :K] is non-zero
    (one scan of T per call finds the support), else the dense O(L K^2) loop; both return the
    same value and labeling (ties to the smallest previous tag). ``sparse``: :func:`sparse_viterbi`
    (K) (the chain's Model ``graph`` field); (0, 0) runs the dense loop whatever T.

    >>> import numpy as np
    >>> S = np.array([[1.0, 0.0], [0.0, 0.5]]); T = np.array([[0.0, -2.0], [0.0, 0.0]])
    >>> B = np.zeros((2, 2)); out = np.zeros(2, np.int32); y = np.zeros(2, np.int32)
    >>> V = np.zeros((2, 2)); bp = np.zeros((2, 2), np.int32)
    >>> float(chain_viterbi(S, (T, B), 1.0, 2, 2, True, y, np.zeros((2, 2)), 0.0, (V, bp), out, (0, 0))), out.tolist()
    (1.0, [0, 0])
    """
    T = trans[0]
    if L > 1 and K >= VITERBI_SPARSE_MIN_K and sparse[0] != 0:
        support = _support_at(sparse[0])(T, np.int64(K), np.int64(VITERBI_SPARSE_MAX_DENSITY * K * K))
        if support[2] >= 0:
            return _sparse_at(sparse[1])(S, trans, scale, np.int64(L), np.int64(K), use_trans, ytrue, C, lw, work, out,
                                         support)
    return chain_viterbi_dense(S, trans, scale, L, K, use_trans, ytrue, C, lw, work, out)


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


@njit(**_INNER)
def chain_trans_sqnorm(v, st, L, K, Kc, use_trans):
    """v + the transition part of ||Phi_x(st)||^2 of a chain statistic ``M | TM | BM`` (v: the
    emission part; the terms in the order of ``structops.Chain.stat_sqnorm``)."""
    if use_trans:
        off = L * Kc
        for j in range(K):
            for k in range(K):
                x = st[off + j * Kc + k]
                v += x * x
        off2 = off + Kc * Kc
        for k in range(K):
            a = st[off2 + k]
            b = st[off2 + Kc + k]
            v += a * a + b * b
    return v


from .common import guard_inner as _guard_inner  # noqa: E402 (last: it sees every kernel above)

_guard_inner(globals())   # a Python call of an _INNER kernel raises (common.InnerKernel)
