"""k-best and constrained Viterbi for chains (numba; compiled on first use only: nothing on the
learn or predict path imports this module).

``chain_kbest`` keeps, for every position t and tag y, the ``k`` best partial labelings ending
in y at t (list Viterbi; Seshadri & Sundberg, "List Viterbi decoding algorithms with
applications", IEEE Trans. Communications 1994): each is a score and a back pointer (previous
tag, its rank there). Position t's lists are merged from the K lists of position t - 1 in the
order (previous tag, rank), a candidate entering a list only ahead of strictly smaller scores,
so equal scores keep that order: the first labeling is exactly the one ``chain_viterbi``
(``streamssvm._kernels.chain``) returns, ties to the smallest previous tag, and the same sums
are formed in the same order (the same floats). O(L K^2 k^2) time at worst (a list stops being
read at its first entry that cannot enter, so usually far less), O(L K k) memory.

Constraints enter as a per-position mask of the allowed tags (a fixed tag allows one) and a
K x K mask of forbidden transitions; ``k = 1`` is constrained MAP decoding.

>>> import numpy as np
>>> S = np.array([[1.0, 0.0], [0.0, 0.5]]); T = np.array([[0.0, -2.0], [0.0, 0.0]])
>>> B = np.zeros((2, 2)); allowed = np.ones((2, 2), np.uint8); forbid = np.zeros((2, 2), np.uint8)
>>> labs, scores = np.zeros((4, 2), np.int32), np.zeros(4)
>>> n = chain_kbest(S, T, B, 1.0, 2, 2, True, allowed, forbid, 4, labs, scores)
>>> n, labs.tolist(), scores.tolist()
(4, [[0, 0], [1, 1], [1, 0], [0, 1]], [1.0, 0.5, 0.0, -0.5])
"""
import numpy as np
from numba import njit

_JIT = dict(cache=True, nogil=True, no_cfunc_wrapper=True)


@njit(**_JIT)
def _insert(vals, tags, ranks, n, cap, v, tag, rank):
    """Insert (v, tag, rank) into the list vals[:n] sorted by decreasing value (after every
    entry of value >= v: equal values keep their arrival order), capped at ``cap`` entries;
    returns the new length."""
    if n == cap and not v > vals[n - 1]:
        return n
    pos = n if n < cap else cap - 1
    while pos > 0 and v > vals[pos - 1]:
        pos -= 1
    last = n if n < cap else cap - 1
    for q in range(last, pos, -1):
        vals[q] = vals[q - 1]
        tags[q] = tags[q - 1]
        ranks[q] = ranks[q - 1]
    vals[pos] = v
    tags[pos] = tag
    ranks[pos] = rank
    return n + 1 if n < cap else cap


@njit(**_JIT)
def chain_kbest(S, T, B, scale, L, K, use_trans, allowed, forbid, k, labs, scores):
    """The ``k`` best labelings of a chain of ``L`` tokens over ``K`` tags, best first, with
    emission scores ``S`` (L, >= K; the scale folded in), transitions ``scale * T`` and start /
    end biases ``scale * B`` (``use_trans``), among the labelings whose tag at t is allowed by
    ``allowed[t]`` (L, K; 0 = not allowed) and with no transition a -> b where ``forbid[a, b]``
    (K, K). Writes the labelings into ``labs[:n]`` (k, L) and their scores into ``scores[:n]``;
    returns n <= k (fewer when fewer labelings satisfy the constraints; 0 when none does)."""
    V = np.full((L, K, k), -np.inf)
    bpt = np.zeros((L, K, k), dtype=np.int32)
    bpr = np.zeros((L, K, k), dtype=np.int32)
    cnt = np.zeros((L, K), dtype=np.int64)
    for y in range(K):
        if allowed[0, y] == 0:
            continue
        v = S[0, y]
        if use_trans:
            v += scale * B[0, y]
        V[0, y, 0] = v
        cnt[0, y] = 1
    for t in range(1, L):
        for y in range(K):
            if allowed[t, y] == 0:
                continue
            n = 0
            vals = V[t, y]
            tags = bpt[t, y]
            ranks = bpr[t, y]
            for j in range(K):
                if forbid[j, y] != 0:
                    continue
                tj = scale * T[j, y]
                for r in range(cnt[t - 1, j]):
                    v = V[t - 1, j, r] + tj
                    if n == k and not v > vals[k - 1]:
                        break   # the list of j is sorted: its later entries cannot enter either
                    n = _insert(vals, tags, ranks, n, k, v, j, r)
            cnt[t, y] = n
            for r in range(n):
                vals[r] += S[t, y]
    # the best complete labelings over the last position's lists
    fv = np.full(k, -np.inf)
    ft = np.zeros(k, dtype=np.int32)
    fr = np.zeros(k, dtype=np.int32)
    n = 0
    for y in range(K):
        e = scale * B[1, y] if use_trans else 0.0
        for r in range(cnt[L - 1, y]):
            v = V[L - 1, y, r]
            if use_trans:
                v += e
            if n == k and not v > fv[k - 1]:
                break
            n = _insert(fv, ft, fr, n, k, v, y, r)
    for q in range(n):
        scores[q] = fv[q]
        y = ft[q]
        r = fr[q]
        labs[q, L - 1] = y
        for t in range(L - 1, 0, -1):
            y2 = bpt[t, y, r]
            r = bpr[t, y, r]
            y = y2
            labs[q, t - 1] = y
    return n
