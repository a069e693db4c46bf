"""The k best outputs of a structure under a model's scores, best first, exact, optionally under
:class:`~streamssvm.constraints.Constraints` (``k = 1``: constrained MAP decoding).

Each function takes the scores of one example (from :mod:`streamssvm.scoring`) and returns a
list of ``(labeling, score)`` pairs, best first, at most ``k`` of them (fewer when fewer
outputs exist or satisfy the constraints):

* chains: list Viterbi (:func:`streamssvm._kernels.kbest.chain_kbest`), exact;
* multiclass: the k highest scores (ties: the smaller label id first, as the argmax);
* independent multi-label: the best labeling sets every label whose score is > 0; every
  other labeling costs the sum of ``|score|`` of the labels it flips, so the k best are the k
  cheapest flip sets, enumerated best first from a heap (each set is reached once: from a set
  whose largest flip, in increasing cost order, is i, the successors add i + 1 or replace i
  by i + 1). Exact, O(k log k + K log K);
* pairwise multi-label and hierarchies: exact enumeration of the 2^K labelings (2^leaves for
  a hierarchy) up to :data:`ENUM_MAX` labels (leaves), refused above (a ValueError saying so).

Equal scores are ordered deterministically: by arrival in the DP for chains, by label id for
multiclass, by the binary code of the labeling for the enumerations, by flip order for the
independent labels.
"""
from __future__ import annotations

import heapq

import numpy as np

#: labels (pairwise multi-label) or leaves (hierarchy) up to which n-best enumerates exactly
ENUM_MAX = 16


def chain_nbest(S, T, B, use_trans, k, allowed=None, forbid=None):
    """The k best tag-id sequences of one chain: ``S`` (L, K) emission scores, ``T`` (K, K)
    and ``B`` (2, K) the scaled transition and start / end scores; ``allowed`` (L, K) and
    ``forbid`` (K, K) masks (None: no constraint)."""
    from ._kernels.kbest import chain_kbest   # compiled on first use only
    L, K = S.shape
    if L == 0:
        return [(np.zeros(0, dtype=np.int32), 0.0)]
    allowed = np.ones((L, K), np.uint8) if allowed is None else np.ascontiguousarray(allowed, dtype=np.uint8)
    forbid = np.zeros((K, K), np.uint8) if forbid is None else np.ascontiguousarray(forbid, dtype=np.uint8)
    labs = np.zeros((k, L), dtype=np.int32)
    scores = np.zeros(k)
    n = chain_kbest(np.ascontiguousarray(S, dtype=np.float64), np.ascontiguousarray(T, dtype=np.float64),
                    np.ascontiguousarray(B, dtype=np.float64), 1.0, L, K, bool(use_trans), allowed, forbid,
                    int(k), labs, scores)
    return [(labs[q].copy(), float(scores[q])) for q in range(n)]


def multiclass_nbest(s, k, allowed=None):
    """The k best class ids of the scores ``s`` (K,), among ``allowed`` (a bool mask) if given."""
    s = np.asarray(s, dtype=np.float64)
    ids = np.arange(len(s)) if allowed is None else np.flatnonzero(allowed)
    order = ids[np.argsort(-s[ids], kind="stable")][:k]
    return [(int(c), float(s[c])) for c in order]


def independent_nbest(s, k, fixed=None):
    """The k best 0/1 labelings of independent labels with scores ``s`` (K,): a labeling
    scores the sum of its positive labels' scores. ``fixed`` (K,) int: -1 free, 0 off, 1 on."""
    s = np.asarray(s, dtype=np.float64)
    K = len(s)
    fixed = np.full(K, -1) if fixed is None else np.asarray(fixed)
    best = np.where(fixed >= 0, fixed, (s > 0).astype(np.int64)).astype(np.int32)
    top = float(np.sum(s[best == 1]))
    free = np.flatnonzero(fixed < 0)
    cost = np.abs(s[free])
    order = free[np.argsort(cost, kind="stable")]
    c = np.abs(s[order])
    out = []
    heap = [(0.0, 0, ())]
    tick = 1
    while heap and len(out) < k:
        total, _, flips = heapq.heappop(heap)
        lab = best.copy()
        for i in flips:
            lab[order[i]] ^= 1
        out.append((lab, float(np.sum(s[lab == 1])) if flips else top))
        i = flips[-1] if flips else -1
        if i + 1 < len(order):
            heapq.heappush(heap, (total + c[i + 1], tick, flips + (i + 1,)))
            tick += 1
            if flips:
                heapq.heappush(heap, (total - c[i] + c[i + 1], tick, flips[:-1] + (i + 1,)))
                tick += 1
    return out


def _codes_bits(n, fixed):
    """All 0/1 vectors over n slots that agree with ``fixed`` (-1 free), as rows, in code order."""
    free = np.flatnonzero(fixed < 0)
    m = len(free)
    codes = np.arange(2 ** m, dtype=np.int64)
    bits = np.zeros((2 ** m, n), dtype=np.int32)
    bits[:, fixed == 1] = 1
    for q, j in enumerate(free):
        bits[:, j] = (codes >> q) & 1
    return bits


def _top_rows(bits, scores, k):
    order = np.argsort(-scores, kind="stable")[:k]
    return [(bits[i].copy(), float(scores[i])) for i in order]


def pairwise_nbest(s, P, k, fixed=None):
    """The k best labelings of a fully connected binary MRF: unary scores ``s`` (K,), pair
    scores ``P[a, b]`` (a < b, scaled) added when both labels are on. Exact enumeration."""
    s = np.asarray(s, dtype=np.float64)
    K = len(s)
    fixed = np.full(K, -1) if fixed is None else np.asarray(fixed)
    if int(np.sum(fixed < 0)) > ENUM_MAX:
        raise ValueError(f"n-best of pairwise multi-label enumerates its labelings exactly, up to {ENUM_MAX} free "
                         f"labels; this model has {int(np.sum(fixed < 0))} (fix some with constraints, or use "
                         "predict_one: the LP relaxation gives no ranked list)")
    bits = _codes_bits(K, fixed)
    Pu = np.triu(np.asarray(P, dtype=np.float64)[:K, :K], 1)
    X = bits.astype(np.float64)
    scores = X @ s + np.einsum("ij,ij->i", X @ Pu, X)
    return _top_rows(bits, scores, k)


def hierarchy_nbest(s, hier, k, fixed=None):
    """The k best leaf labelings of a hierarchy (``streamssvm.structures.Hierarchy``): a leaf
    set scores the node scores ``s`` summed over its ancestor closure. Returns (leaf 0/1
    vector, score) pairs. Exact enumeration of the leaf subsets."""
    s = np.asarray(s, dtype=np.float64)
    n = hier.n_leaves
    fixed = np.full(n, -1) if fixed is None else np.asarray(fixed)
    if int(np.sum(fixed < 0)) > ENUM_MAX:
        raise ValueError(f"n-best of a hierarchy enumerates leaf subsets exactly, up to {ENUM_MAX} free leaves; "
                         f"this one has {int(np.sum(fixed < 0))} (fix some with constraints)")
    A = np.zeros((n, len(hier.nodes)))
    for i in range(n):
        A[i, hier.closure([i])] = 1.0
    bits = _codes_bits(n, fixed)
    closed = (bits @ A) > 0
    scores = closed.astype(np.float64) @ s[:len(hier.nodes)]
    return _top_rows(bits, scores, k)


def lead_with(items, first, key):
    """``items`` with the output ``first`` (the estimator's ``predict_one``) at the head: the
    enumerations sum scores in another order than the decoders, so on an exact tie (or a
    difference of rounding) they may rank another output first; ``key`` maps an output to
    a comparable value. ``first`` must score within rounding of the best."""
    if not items:
        return items
    kf = key(first)
    for i, (y, sc) in enumerate(items):
        if key(y) == kf:
            if i == 0:
                return items
            top = items[0][1]
            if abs(sc - top) <= 1e-9 * (1.0 + abs(top)):
                return [items[i]] + items[:i] + items[i + 1:]
            return items
    return items
