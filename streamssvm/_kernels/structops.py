"""Numba kernels for the linear structures (chain, multiclass, multi-label, hierarchy): the
dispatch on the structure code ``kind`` and the short per-structure branches; the longer
per-structure routines live in ``chain.py`` (slack DP), ``multiclass.py``, ``multilabel.py``,
``mrf.py`` (pairwise multi-label enumeration), ``hierarchy.py`` (tree DPs / DAG enumeration), the
shared pieces in ``common.py``.

The inference entry points (:func:`decode`, :func:`slack_oracle`, :func:`slack_levels`) take the
bundles of ``bundles.py`` as plain tuples: ``model = (kind, K, Kc, use_trans, C, graph)``,
``w = (E, T, B)`` and ``scratch = (S, V, bp, ybuf, lab, dbuf, V3)`` (work arrays; its ``S`` is not
read -- the scores ``S`` are passed on their own, since callers may score into other buffers).

Every structure here has a joint feature map that is *linear in a sufficient statistic*
``s(y)`` of the labeling, and the same holds for convex combinations of labelings: the dual
block of an example is represented by its mean statistic ``m = sum_y alpha(y) s(y)`` (the
"marginals"), and ``u_i = Phi_x(s(y_i) - m_i)``.

Statistic layouts (``Kc`` is the label capacity, ``K <= Kc`` the labels in use):

* chain      ``[M: L x Kc][TM: Kc x Kc][BM: 2 x Kc]`` -- unary marginals, transition counts,
  start / end indicators;
* multiclass ``[M: Kc]`` -- a chain of length one without transitions;
* multilabel ``[M: Kc]`` -- independent binary labels, ``M[k]`` = mean of ``y_k``;
* hierarchy  ``[M: Kc]`` -- one slot per node of a tree / DAG whose leaves are the labels,
  ``M[n]`` = mean of "n is in the ancestor closure of the chosen leaves" (``hierarchy.py``).

Labelings: chain and multiclass store one int per token; multi-label stores a 0/1 int per
label slot (``Kc`` of them). Ground truth for multi-label is the list of positive label ids.

Joint feature map ``Phi_x(s)``: the emission block ``E[j, k] = sum_t x_t[j] * M[t, k]`` (x
includes a constant bias feature), then ``TM`` and ``BM`` for chains.

Model weights are kept *unnormalized* (``U``: ``E``, ``T``, ``B``); the actual weight vector is
``w = scale * U`` with ``scale = 1 / (lambda * n)``. All scores computed here include ``scale``.
"""
import numpy as np
from numba import njit

# the per-structure kernels (re-exported: ``structops.X`` is the one name callers use)
from .chain import (  # noqa: F401
    CHAIN_LOSS_NORMALIZED, CHAIN_LOSS_TOKEN, _chain_level_best, _chain_wrong_dp, chain_level_labeling, chain_levels,
    chain_loss_norm, chain_slack, chain_viterbi,
)
from .common import (  # noqa: F401
    _JIT, CHAIN, HIER, HIER_MAX_DAG_LEAVES, MLPAIR, MLPAIR_MAX_LABELS, MULTICLASS, MULTILABEL, _ml_dense_truth,
    emission_add, emission_scores, gram, level_points, stat_emission_apply, stat_emission_sqnorm,
)
from .hierarchy import (  # noqa: F401
    _hier_check, _hier_decode, _hier_enum, _hier_slack, _hier_slack_levels, _hier_tree_levels, _hier_tree_map,
    hier_level_labeling, hier_levels,
)
from .mrf import _mrf_enum, mrf_level_labeling  # noqa: F401
from .multiclass import mc_decode, mc_levels, mc_slack, mc_stat_apply  # noqa: F401
from .multilabel import ml_decode, ml_levels, ml_slack  # noqa: F401


@njit(**_JIT)
def stat_size(kind, L, Kc):
    if kind == CHAIN:
        return L * Kc + Kc * Kc + 2 * Kc
    if kind == MLPAIR:
        return Kc + Kc * Kc
    return Kc


@njit(**_JIT)
def labeling_len(kind, L, Kc):
    if kind == MULTILABEL or kind == MLPAIR or kind == HIER:
        return Kc
    return L


@njit(**_JIT)
def decode(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out):
    """argmax_y <w, phi(x, y)> + loss_scale * Delta(ytrue, y); writes y into ``out``.

    Returns the maximal value (score + loss_scale * loss). ``loss_scale = 0`` is MAP
    prediction (``ytrue`` is then ignored). Chain: Viterbi (``chain.chain_viterbi``: O(L K^2), or
    O(K^2 + L (nnz(T) + K)) when the transition weights are sparse). Work arrays of
    ``scratch``: V, bp (chains), ybuf.
    """
    kind, K, Kc, use_trans, C, G = model
    E, T, B = w
    V, bp, ybuf = scratch[1], scratch[2], scratch[3]
    if kind == HIER:
        return _hier_decode(S, G, K, ytrue, ly, loss_scale, Ki, ybuf, out)
    if kind == MLPAIR:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        dummy = np.zeros(K + 1)
        return _mrf_enum(S, T, scale, K, ybuf, 0, loss_scale, max(Ki, 1), 0.0, dummy, out)
    if kind == MULTILABEL:
        return ml_decode(S, K, ytrue, ly, loss_scale, Ki, ybuf, out)
    lw = loss_scale / (chain_loss_norm(L, Ki) if kind == CHAIN else L)
    if kind == MULTICLASS or L == 1 and not use_trans:
        return mc_decode(S, K, ytrue, C, lw, out)
    return chain_viterbi(S, T, B, scale, L, K, use_trans, ytrue, C, lw, V, bp, out)


@njit(**_JIT)
def labeling_score(kind, S, T, B, scale, lab, L, K, use_trans):
    """<w, phi(x, y)> for a labeling (O(L))."""
    if kind == MLPAIR:
        v = 0.0
        for k in range(K):
            if lab[k] != 0:
                v += S[0, k]
                for l in range(k + 1, K):
                    if lab[l] != 0:
                        v += scale * T[k, l]
        return v
    if kind == MULTILABEL or kind == HIER:
        v = 0.0
        for k in range(K):
            if lab[k] != 0:
                v += S[0, k]
        return v
    v = 0.0
    for t in range(L):
        v += S[t, lab[t]]
    if kind == CHAIN and use_trans:
        v += scale * (B[0, lab[0]] + B[1, lab[L - 1]])
        for t in range(1, L):
            v += scale * T[lab[t - 1], lab[t]]
    return v


@njit(**_JIT)
def labeling_loss(kind, lab, ytrue, ly, C, L, K, Ki, ybuf):
    """Delta(ytrue, y): normalized (cost-weighted) Hamming for chains, C[y, y'] for
    multiclass, Hamming / Ki for multi-label, Hamming over the leaves (ids < Ki) / Ki for
    hierarchies."""
    if kind == HIER:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        v = 0.0
        for k in range(min(Ki, K)):
            if lab[k] != ybuf[k]:
                v += 1.0
        return v / Ki
    if kind == MULTILABEL or kind == MLPAIR:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        v = 0.0
        for k in range(K):
            if lab[k] != ybuf[k]:
                v += 1.0
        return v / Ki
    v = 0.0
    for t in range(L):
        v += C[ytrue[t], lab[t]]
    return v / (chain_loss_norm(L, Ki) if kind == CHAIN else L)


@njit(**_JIT)
def labeling_stat(kind, lab, L, Kc, out, coef):
    """out += coef * s(lab)."""
    if kind == MLPAIR:
        for k in range(Kc):
            if lab[k] != 0:
                out[k] += coef
                for l in range(k + 1, Kc):
                    if lab[l] != 0:
                        out[Kc + k * Kc + l] += coef
        return
    if kind == MULTILABEL or kind == HIER:
        for k in range(Kc):
            if lab[k] != 0:
                out[k] += coef
        return
    for t in range(L):
        out[t * Kc + lab[t]] += coef
    if kind == CHAIN:
        off = L * Kc
        for t in range(1, L):
            out[off + lab[t - 1] * Kc + lab[t]] += coef
        off2 = off + Kc * Kc
        out[off2 + lab[0]] += coef
        out[off2 + Kc + lab[L - 1]] += coef


@njit(**_JIT)
def truth_stat(kind, ytrue, ly, L, Kc, out, coef):
    """out += coef * s(ytrue) (multi-label truth is a list of positives)."""
    if kind == MLPAIR:
        for q in range(ly):
            a = ytrue[q]
            out[a] += coef
            for r in range(ly):
                b = ytrue[r]
                if a < b:
                    out[Kc + a * Kc + b] += coef
        return
    if kind == MULTILABEL or kind == HIER:
        for q in range(ly):
            out[ytrue[q]] += coef
        return
    labeling_stat(kind, ytrue, L, Kc, out, coef)


@njit(**_JIT)
def stat_score(kind, S, T, B, scale, st, L, K, Kc, use_trans):
    """<w, Phi_x(st)> (linear in st)."""
    if kind == MLPAIR:
        v = 0.0
        for k in range(K):
            v += S[0, k] * st[k]
            for l in range(k + 1, K):
                v += scale * T[k, l] * st[Kc + k * Kc + l]
        return v
    v = 0.0
    nrow = 1 if kind != CHAIN else L
    for t in range(nrow):
        base = t * Kc
        for k in range(K):
            v += S[t, k] * st[base + k]
    if kind == CHAIN and use_trans:
        off = L * Kc
        acc = 0.0
        for j in range(K):
            for k in range(K):
                acc += T[j, k] * st[off + j * Kc + k]
        off2 = off + Kc * Kc
        for k in range(K):
            acc += B[0, k] * st[off2 + k] + B[1, k] * st[off2 + Kc + k]
        v += scale * acc
    return v


@njit(**_JIT)
def stat_loss_lin(kind, st, ytrue, ly, C, L, K, Kc, Ki, ybuf):
    """Linear part of the loss of a statistic (the loss is affine; see ``loss_const``)."""
    if kind == HIER:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        v = 0.0
        for k in range(min(Ki, K)):
            v += (1.0 - 2.0 * ybuf[k]) * st[k]
        return v / Ki
    if kind == MULTILABEL or kind == MLPAIR:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        v = 0.0
        for k in range(K):
            v += (1.0 - 2.0 * ybuf[k]) * st[k]
        return v / Ki
    v = 0.0
    for t in range(L):
        base = t * Kc
        c = ytrue[t]
        for k in range(K):
            v += C[c, k] * st[base + k]
    return v / (chain_loss_norm(L, Ki) if kind == CHAIN else L)


@njit(**_JIT)
def loss_const(kind, ly, Ki, ytrue=None):
    """Constant part of the loss of a statistic. Hierarchies need ``ytrue`` (the closure's
    node ids): the constant is the number of true leaves (ids < Ki) over Ki."""
    if kind == HIER:
        if ytrue is None:
            raise ValueError("loss_const of a hierarchy needs ytrue")
        else:
            c = 0
            for q in range(ly):
                if ytrue[q] < Ki:
                    c += 1
            return c / Ki
    if kind == MULTILABEL or kind == MLPAIR:
        return ly / Ki
    return 0.0


@njit(**_JIT)
def stat_sqnorm(kind, G, st, L, K, Kc, use_trans):
    """||Phi_x(st)||^2 using the token Gram matrix G = X X^T."""
    if kind == MLPAIR:
        v = 0.0
        for k in range(K):
            v += G[0, 0] * st[k] * st[k]
            for l in range(k + 1, K):
                x = st[Kc + k * Kc + l]
                v += x * x
        return v
    v = stat_emission_sqnorm(G, st, 1 if kind != CHAIN else L, K, Kc)
    if kind == CHAIN and use_trans:
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


@njit(**_JIT)
def stat_apply(kind, E, T, B, tok_ptr, fidx, fval, st, L, K, Kc, coef, use_trans):
    """U += coef * Phi_x(st)."""
    if kind == MULTICLASS:   # only the classes the step moves
        return mc_stat_apply(E, tok_ptr, fidx, fval, st, K, coef)
    if kind == MLPAIR:
        for p in range(tok_ptr[0], tok_ptr[1]):
            j = fidx[p]
            v = fval[p] * coef
            for k in range(K):
                E[j, k] += v * st[k]
        for k in range(K):
            for l in range(k + 1, K):
                T[k, l] += coef * st[Kc + k * Kc + l]
        return
    stat_emission_apply(E, tok_ptr, fidx, fval, st, 1 if kind != CHAIN else L, K, Kc, coef)
    if kind == CHAIN and use_trans:
        off = L * Kc
        for j in range(K):
            for k in range(K):
                T[j, k] += coef * st[off + j * Kc + k]
        off2 = off + Kc * Kc
        for k in range(K):
            B[0, k] += coef * st[off2 + k]
            B[1, k] += coef * st[off2 + Kc + k]


@njit(**_JIT)
def slack_oracle(model, w, S, scale, L, ytrue, ly, Ki, scratch, out):
    """Exact most-violating labeling under slack rescaling:
    argmax_y Delta(y_true, y) * (1 + <w, phi(x, y)> - <w, phi(x, y_true)>), written to ``out``;
    returns the maximal value (>= 0: the ground truth gives 0).

    * multiclass: enumeration with the cost matrix;
    * multi-label (Hamming / Ki): for m wrong labels the best score change is the sum of the m
      largest flip gains, so one sort and prefix sums;
    * chain with Hamming loss (the cost matrix must be 0/1): dynamic programming over
      (position, tag, number of wrong tags), O(L^2 K^2), with back-pointers recomputed;
    * hierarchy: the level DP (trees) / enumeration (DAGs) of ``hierarchy.py``.

    Work arrays of ``scratch``: V3 (L+1, K, L+1) floats for chains; ybuf (>= K) ints; dbuf
    (>= K + 1) floats. Pairwise multi-label: enumeration (Gray code) over the 2^K labelings.
    """
    kind, K, Kc, use_trans, C, G = model
    E, T, B = w
    ybuf, delta, V = scratch[3], scratch[5], scratch[6]
    if kind == HIER:
        return _hier_slack(S, G, K, ytrue, ly, Ki, ybuf, out)
    if kind == MLPAIR:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        ts = labeling_score(kind, S, T, B, scale, ybuf, L, K, use_trans)
        return _mrf_enum(S, T, scale, K, ybuf, 1, 1.0, Ki, ts, delta, out)
    if kind == MULTICLASS:
        return mc_slack(S, K, ytrue, C, out)
    if kind == MULTILABEL:
        return ml_slack(S, K, ytrue, ly, Ki, ybuf, delta, out)
    return chain_slack(S, T, B, scale, L, K, use_trans, ytrue, V, out, chain_loss_norm(L, Ki))


@njit(**_JIT)
def slack_levels(model, w, S, scale, L, ytrue, ly, Ki, scratch, hs, gs):
    """The (h, g) points that matter for slack rescaling, one per loss level, with
    h = 1 + best score at that level - score(y_true) and g = the level's loss: the classes for
    multiclass; m wrong labels (the m best flips) for multi-label; m wrong tags (the DP of
    ``slack_oracle``) for Hamming chains; m wrong leaves for hierarchies. Every lambda-oracle and
    constrained lambda-oracle answer of the structure is one of these points, so the searches of
    ``streamssvm.oracles.slack`` can run on them. Returns the number of points written to hs, gs."""
    kind, K, Kc, use_trans, C, G = model
    E, T, B = w
    ybuf, delta, V = scratch[3], scratch[5], scratch[6]
    if kind == HIER:
        return _hier_slack_levels(S, G, K, ytrue, ly, Ki, ybuf, hs, gs)
    if kind == MLPAIR:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        ts = labeling_score(kind, S, T, B, scale, ybuf, L, K, use_trans)
        lab = np.zeros(K, dtype=np.int32)
        _mrf_enum(S, T, scale, K, ybuf, 2, 0.0, Ki, ts, delta, lab)
        return level_points(delta, K, ts, Ki, hs, gs)
    if kind == MULTICLASS:
        return mc_levels(S, K, ytrue, C, hs, gs)
    if kind == MULTILABEL:
        return ml_levels(S, K, ytrue, ly, Ki, ybuf, delta, hs, gs)
    return chain_levels(S, T, B, scale, L, K, use_trans, ytrue, V, hs, gs, chain_loss_norm(L, Ki))

