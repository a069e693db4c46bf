"""Numba kernels for the linear structures (chain, multiclass, multi-label, hierarchy): the
table of per-structure operations and the short per-structure bodies; the longer per-structure
routines live in ``chain.py`` (slack DP), ``multiclass.py``, ``multilabel.py``,
``mrf.py`` (pairwise multi-label enumeration), ``hierarchy.py`` (tree DPs / DAG enumeration), the
shared pieces in ``common.py``.

**Structures are types.** Each structure is declared once below (a class holding its
operations) with a *tag*: a numpy scalar type (``np.uint8`` multiclass, ``np.uint16`` chain, ...)
whose value is the structure code ``kind``. Every operation (:func:`decode`, :func:`stat_apply`,
...) is a plain Python function with a numba ``overload`` that, at compile time, returns the
implementation of the structure whose tag *type* is the type of its first argument (the tag
itself, or the first field of the ``model`` bundle). A kernel calling ``decode(model, ...)`` is
therefore compiled for one structure only, the one it is called with, instead of branching at run
time on an integer code and compiling every structure's code into every kernel; the kernels stay
cacheable (no function objects travel as arguments or globals), and numpy scalars are typed in
numba's fast dispatch path. The idea of selecting the inner routine of a jitted loop by what is
passed in follows pynndescent (McInnes, "PyNNDescent", which passes its distance metric as a
jitted function to the jitted search loops). Called from Python, an operation accepts the integer
code as well (``Structure.kind``, saved states) and converts it with :func:`tag`.

The inference entry points (:func:`decode`, :func:`slack_oracle`, :func:`slack_levels`) take the
bundles of ``bundles.py`` as plain tuples: ``model = (tag, K, Kc, use_trans, C, graph)``,
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
import inspect

import numpy as np
from numba import from_dtype, njit, types
from numba.extending import overload

# the per-structure kernels (re-exported: ``structops.X`` is the one name callers use)
from .chain import (  # noqa: F401
    CHAIN_LOSS_NORMALIZED, CHAIN_LOSS_TOKEN, _chain_level_best, _chain_wrong_dp, chain_level_labeling, chain_levels,
    chain_loss_norm, chain_slack, chain_trans_sqnorm, chain_viterbi, chain_viterbi_with_support, dense_support,
    viterbi_support,
)
from .common import (  # noqa: F401
    _INNER, _JIT, CHAIN, HIER, HIER_MAX_DAG_LEAVES, MLPAIR, MLPAIR_MAX_LABELS, MULTICLASS, MULTILABEL, _ml_dense_truth,
    emission_add, emission_scores, gram, level_points, row_support, stat_emission_apply, stat_emission_sqnorm,
)
from .hierarchy import (  # noqa: F401
    _hier_check, _hier_decode, _hier_enum, _hier_slack, _hier_slack_levels, _hier_tree_levels, _hier_tree_map,
    hier_level_labeling, hier_levels,
)
from .mrf import _mrf_enum, mrf_level_labeling  # noqa: F401
from .multiclass import mc_decode, mc_levels, mc_slack, mc_stat_apply, mc_stat_sqnorm  # noqa: F401
from .multilabel import ml_decode, ml_levels, ml_slack  # noqa: F401


# ---------------------------------------------------------------------------------------------
# The operations. Each is called as ``op(kind, ...)`` (or ``op(model, ...)``) from jitted code,
# where the overload registered by ``_per_structure`` picks the structure's body at compile time;
# the Python bodies below are the entry points for Python callers.

def stat_size(kind, L, Kc):
    """Length of the sufficient statistic ``s(y)`` of a labeling of L tokens."""
    return _py_stat_size(tag(kind), L, Kc)


def labeling_len(kind, L, Kc):
    """Length of a labeling: one int per token (chain, multiclass) or per label slot (sets)."""
    return _py_labeling_len(tag(kind), L, Kc)


def decode(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out):
    """argmax_y <w, phi(x, y)> + loss_scale * Delta(ytrue, y); writes y into ``out``.

    Returns the maximal value (score + loss_scale * loss). ``loss_scale = 0`` is MAP
    prediction (``ytrue`` is then ignored). Chain: Viterbi (``chain.chain_viterbi``: O(L K^2), or
    O(K^2 + L (nnz(T) + K)) when the transition weights are sparse). Work arrays of
    ``scratch``: V, bp (chains), ybuf.
    """
    return _py_decode(tagged(model), w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out)


def labeling_score(kind, S, T, B, scale, lab, L, K, use_trans):
    """<w, phi(x, y)> for a labeling (O(L))."""
    return _py_labeling_score(tag(kind), S, T, B, scale, lab, L, K, use_trans)


def labeling_loss(kind, lab, ytrue, ly, C, L, K, Ki, ybuf):
    """Delta(ytrue, y): normalized (cost-weighted) Hamming for chains, C[y, y'] for
    multiclass, Hamming / Ki for multi-label, Hamming over the leaves (ids < Ki) / Ki for
    hierarchies."""
    return _py_labeling_loss(tag(kind), lab, ytrue, ly, C, L, K, Ki, ybuf)


def labeling_stat(kind, lab, L, Kc, out, coef):
    """out += coef * s(lab)."""
    return _py_labeling_stat(tag(kind), lab, L, Kc, out, coef)


def truth_stat(kind, ytrue, ly, L, Kc, out, coef):
    """out += coef * s(ytrue) (multi-label truth is a list of positives)."""
    return _py_truth_stat(tag(kind), ytrue, ly, L, Kc, out, coef)


def stat_score(kind, S, T, B, scale, st, L, K, Kc, use_trans):
    """<w, Phi_x(st)> (linear in st)."""
    return _py_stat_score(tag(kind), S, T, B, scale, st, L, K, Kc, use_trans)


def stat_loss_lin(kind, st, ytrue, ly, C, L, K, Kc, Ki, ybuf):
    """Linear part of the loss of a statistic (the loss is affine; see ``loss_const``)."""
    return _py_stat_loss_lin(tag(kind), st, ytrue, ly, C, L, K, Kc, Ki, ybuf)


def loss_const(kind, ly, Ki, ytrue=None):
    """Constant part of the loss of a statistic. Hierarchies need ``ytrue`` (the closure's
    node ids): the constant is the number of true leaves (ids < Ki) over Ki."""
    return _py_loss_const(tag(kind), ly, Ki, ytrue)


def stat_sqnorm(kind, G, st, L, K, Kc, use_trans):
    """||Phi_x(st)||^2 using the token Gram matrix G = X X^T."""
    return _py_stat_sqnorm(tag(kind), G, st, L, K, Kc, use_trans)


def stat_apply(kind, w, x, st, L, K, Kc, coef, use_trans):
    """U += coef * Phi_x(st) with ``w = (E, T, B)`` the weights moved and ``x = (tok_ptr,
    fidx, fval)`` the example's tokens."""
    return _py_stat_apply(tag(kind), w, x, st, L, K, Kc, coef, use_trans)


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
    return _py_slack_oracle(tagged(model), w, S, scale, L, ytrue, ly, Ki, scratch, out)


def slack_levels(model, w, S, scale, L, ytrue, ly, Ki, scratch, hs, gs):
    """The (h, g) points that matter for slack rescaling, one per loss level, with
    h = 1 + best score at that level - score(y_true) and g = the level's loss: the classes for
    multiclass; m wrong labels (the m best flips) for multi-label; m wrong tags (the DP of
    ``slack_oracle``) for Hamming chains; m wrong leaves for hierarchies. Every lambda-oracle and
    constrained lambda-oracle answer of the structure is one of these points, so the searches of
    ``streamssvm.oracles.slack`` can run on them. Returns the number of points written to hs, gs."""
    return _py_slack_levels(tagged(model), w, S, scale, L, ytrue, ly, Ki, scratch, hs, gs)


def kind_code(kind):
    """The structure code of a tag (a compile-time constant in a kernel)."""
    return int(tag(kind))


def frozen_support(model, T):
    """``chain.viterbi_support`` of a chain's T, for weights that stay fixed over a loop (n = -1,
    nothing scanned, for the other structures)."""
    return _py_frozen_support(tagged(model), T)


def decode_frozen(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out, support):
    """:func:`decode` for weights that stay fixed over a loop (a gap pass, a prediction batch):
    chains take the Viterbi with the transition ``support`` found once per loop
    (:func:`frozen_support`) instead of once per call; same values and labelings."""
    return _py_decode_frozen(tagged(model), w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out, support)


#: every per-structure operation (each structure class below implements all of them)
_OPERATIONS = (kind_code, frozen_support, decode_frozen, stat_size, labeling_len, decode, labeling_score, labeling_loss,
               labeling_stat, truth_stat, stat_score, stat_loss_lin, loss_const, stat_sqnorm, stat_apply, slack_oracle,
               slack_levels)


# ---------------------------------------------------------------------------------------------
# The structures: one class each, its tag and its body of every operation (same parameter names
# as the operation; the first, the tag or the model, only selected the class).

class _NoTransitions:
    """The frozen-weights operations of the structures without a transition table: no Viterbi
    support to find, and decoding at frozen weights is plain decoding."""

    def frozen_support(model, T):
        return dense_support()

    def decode_frozen(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out, support):
        return decode(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out)


class Multiclass(_NoTransitions):
    """One label per example: a chain of length one without transitions, statistic ``[M: Kc]``."""
    kind = MULTICLASS
    tag = np.uint8

    def kind_code(kind):
        return MULTICLASS

    def stat_size(kind, L, Kc):
        return Kc

    def labeling_len(kind, L, Kc):
        return L

    def decode(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out):
        return mc_decode(S, model[1], ytrue, model[4], loss_scale / L, out)

    def labeling_score(kind, S, T, B, scale, lab, L, K, use_trans):
        v = 0.0
        for t in range(L):
            v += S[t, lab[t]]
        return v

    def labeling_loss(kind, lab, ytrue, ly, C, L, K, Ki, ybuf):
        v = 0.0
        for t in range(L):
            v += C[ytrue[t], lab[t]]
        return v / L

    def labeling_stat(kind, lab, L, Kc, out, coef):
        for t in range(L):
            out[t * Kc + lab[t]] += coef

    def truth_stat(kind, ytrue, ly, L, Kc, out, coef):
        for t in range(L):
            out[t * Kc + ytrue[t]] += coef

    def stat_score(kind, S, T, B, scale, st, L, K, Kc, use_trans):
        v = 0.0
        for k in range(K):
            v += S[0, k] * st[k]
        return v

    def stat_loss_lin(kind, st, ytrue, ly, C, L, K, Kc, Ki, ybuf):
        v = 0.0
        for t in range(L):
            base = t * Kc
            c = ytrue[t]
            for k in range(K):
                v += C[c, k] * st[base + k]
        return v / L

    def loss_const(kind, ly, Ki, ytrue=None):
        return 0.0

    def stat_sqnorm(kind, G, st, L, K, Kc, use_trans):   # (no support arrays: one row)
        return mc_stat_sqnorm(G, st, K)

    def stat_apply(kind, w, x, st, L, K, Kc, coef, use_trans):   # only the classes the step moves
        mc_stat_apply(w[0], x[0], x[1], x[2], st, K, coef)

    def slack_oracle(model, w, S, scale, L, ytrue, ly, Ki, scratch, out):
        return mc_slack(S, model[1], ytrue, model[4], out)

    def slack_levels(model, w, S, scale, L, ytrue, ly, Ki, scratch, hs, gs):
        return mc_levels(S, model[1], ytrue, model[4], hs, gs)


class Chain:
    """A sequence of L tags with transition and start / end weights, statistic
    ``[M: L x Kc][TM: Kc x Kc][BM: 2 x Kc]``; the loss is the (cost-weighted) Hamming loss over
    ``chain_loss_norm(L, Ki)``."""
    kind = CHAIN
    tag = np.uint16

    def kind_code(kind):
        return CHAIN

    def frozen_support(model, T):
        K = model[1]
        if T.shape[0] >= K and T.shape[1] >= K:
            return viterbi_support(T, K, model[5])
        return dense_support()

    def decode_frozen(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out, support):
        # ``decode``'s body with the support given: both compile the same two Viterbi loops (the
        # selectors ``chain_viterbi`` / ``chain_viterbi_with_support`` are inlined), and neither
        # links the other
        K, use_trans, C = model[1], model[3], model[4]
        lw = loss_scale / chain_loss_norm(L, Ki)
        if L == 1 and not use_trans:
            return mc_decode(S, K, ytrue, C, lw, out)
        return chain_viterbi_with_support(S, (w[1], w[2]), scale, L, K, use_trans, ytrue, C, lw,
                                          (scratch[1], scratch[2]), out, support)

    def stat_size(kind, L, Kc):
        return L * Kc + Kc * Kc + 2 * Kc

    def labeling_len(kind, L, Kc):
        return L

    def decode(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out):
        K, use_trans, C = model[1], model[3], model[4]
        lw = loss_scale / chain_loss_norm(L, Ki)
        if L == 1 and not use_trans:
            return mc_decode(S, K, ytrue, C, lw, out)
        return chain_viterbi(S, (w[1], w[2]), scale, L, K, use_trans, ytrue, C, lw, (scratch[1], scratch[2]), out,
                             model[5])

    def labeling_score(kind, S, T, B, scale, lab, L, K, use_trans):
        v = 0.0
        for t in range(L):
            v += S[t, lab[t]]
        if use_trans:
            v += scale * (B[0, lab[0]] + B[1, lab[L - 1]])
            for t in range(1, L):
                v += scale * T[lab[t - 1], lab[t]]
        return v

    def labeling_loss(kind, lab, ytrue, ly, C, L, K, Ki, ybuf):
        v = 0.0
        for t in range(L):
            v += C[ytrue[t], lab[t]]
        return v / chain_loss_norm(L, Ki)

    def labeling_stat(kind, lab, L, Kc, out, coef):
        _chain_stat(lab, L, Kc, out, coef)

    def truth_stat(kind, ytrue, ly, L, Kc, out, coef):
        _chain_stat(ytrue, L, Kc, out, coef)

    def stat_score(kind, S, T, B, scale, st, L, K, Kc, use_trans):
        v = 0.0
        for t in range(L):
            base = t * Kc
            for k in range(K):
                v += S[t, k] * st[base + k]
        if use_trans:
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

    def stat_loss_lin(kind, st, ytrue, ly, C, L, K, Kc, Ki, ybuf):
        v = 0.0
        for t in range(L):
            base = t * Kc
            c = ytrue[t]
            for k in range(K):
                v += C[c, k] * st[base + k]
        return v / chain_loss_norm(L, Ki)

    def loss_const(kind, ly, Ki, ytrue=None):
        return 0.0

    def stat_sqnorm(kind, G, st, L, K, Kc, use_trans):
        return chain_trans_sqnorm(stat_emission_sqnorm(G, st, L, row_support(st, L, K, Kc)), st, L, K, Kc, use_trans)

    def stat_apply(kind, w, x, st, L, K, Kc, coef, use_trans):
        E, T, B = w
        stat_emission_apply(E, x[0], x[1], x[2], st, L, row_support(st, L, K, Kc), coef)
        if use_trans:
            off = L * Kc
            for j in range(K):
                for k in range(K):
                    T[j, k] += coef * st[off + j * Kc + k]
            off2 = off + Kc * Kc
            for k in range(K):
                B[0, k] += coef * st[off2 + k]
                B[1, k] += coef * st[off2 + Kc + k]

    def slack_oracle(model, w, S, scale, L, ytrue, ly, Ki, scratch, out):
        return chain_slack(S, w[1], w[2], scale, L, model[1], model[3], ytrue, scratch[6], out,
                           chain_loss_norm(L, Ki))

    def slack_levels(model, w, S, scale, L, ytrue, ly, Ki, scratch, hs, gs):
        return chain_levels(S, w[1], w[2], scale, L, model[1], model[3], ytrue, scratch[6], hs, gs,
                            chain_loss_norm(L, Ki))


class MultiLabel(_NoTransitions):
    """Independent binary labels, statistic ``[M: Kc]`` (``M[k]`` the mean of ``y_k``); a
    labeling is a 0/1 int per label slot, the truth the list of positive label ids; the loss is
    Hamming / Ki."""
    kind = MULTILABEL
    tag = np.uint32

    def kind_code(kind):
        return MULTILABEL

    def stat_size(kind, L, Kc):
        return Kc

    def labeling_len(kind, L, Kc):
        return Kc

    def decode(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out):
        return ml_decode(S, model[1], ytrue, ly, loss_scale, Ki, scratch[3], out)

    def labeling_score(kind, S, T, B, scale, lab, L, K, use_trans):
        return _set_score(S, lab, K)

    def labeling_loss(kind, lab, ytrue, ly, C, L, K, Ki, ybuf):
        return _set_hamming(lab, ytrue, ly, K, K, Ki, ybuf)

    def labeling_stat(kind, lab, L, Kc, out, coef):
        _set_stat(lab, Kc, out, coef)

    def truth_stat(kind, ytrue, ly, L, Kc, out, coef):
        for q in range(ly):
            out[ytrue[q]] += coef

    def stat_score(kind, S, T, B, scale, st, L, K, Kc, use_trans):
        v = 0.0
        for k in range(K):
            v += S[0, k] * st[k]
        return v

    def stat_loss_lin(kind, st, ytrue, ly, C, L, K, Kc, Ki, ybuf):
        return _set_loss_lin(st, ytrue, ly, K, K, Ki, ybuf)

    def loss_const(kind, ly, Ki, ytrue=None):
        return ly / Ki

    def stat_sqnorm(kind, G, st, L, K, Kc, use_trans):
        return stat_emission_sqnorm(G, st, 1, row_support(st, 1, K, Kc))

    def stat_apply(kind, w, x, st, L, K, Kc, coef, use_trans):
        stat_emission_apply(w[0], x[0], x[1], x[2], st, 1, row_support(st, 1, K, Kc), coef)

    def slack_oracle(model, w, S, scale, L, ytrue, ly, Ki, scratch, out):
        return ml_slack(S, model[1], ytrue, ly, Ki, scratch[3], scratch[5], out)

    def slack_levels(model, w, S, scale, L, ytrue, ly, Ki, scratch, hs, gs):
        return ml_levels(S, model[1], ytrue, ly, Ki, scratch[3], scratch[5], hs, gs)


class PairwiseMultiLabel(_NoTransitions):
    """Multi-label with pairwise co-occurrence potentials (a fully connected binary MRF, exact by
    Gray-code enumeration up to ``MLPAIR_MAX_LABELS``), statistic ``[M: Kc][pairs: Kc x Kc]``."""
    kind = MLPAIR
    tag = np.int8

    def kind_code(kind):
        return MLPAIR

    def stat_size(kind, L, Kc):
        return Kc + Kc * Kc

    def labeling_len(kind, L, Kc):
        return Kc

    def decode(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out):
        K = model[1]
        ybuf = scratch[3]
        _ml_dense_truth(ytrue, ly, K, ybuf)
        dummy = np.empty(K + 1)   # (_mrf_enum sets it before reading; ``common.py`` on allocations)
        return _mrf_enum(S, w[1], scale, K, ybuf, 0, loss_scale, max(Ki, 1), 0.0, dummy, out)

    def labeling_score(kind, S, T, B, scale, lab, L, K, use_trans):
        return _pair_score(S, T, scale, lab, K)

    def labeling_loss(kind, lab, ytrue, ly, C, L, K, Ki, ybuf):
        return _set_hamming(lab, ytrue, ly, K, K, Ki, ybuf)

    def labeling_stat(kind, lab, L, Kc, out, coef):
        for k in range(Kc):
            if lab[k] != 0:
                out[k] += coef
                for l in range(k + 1, Kc):
                    if lab[l] != 0:
                        out[Kc + k * Kc + l] += coef

    def truth_stat(kind, ytrue, ly, L, Kc, out, coef):
        for q in range(ly):
            a = ytrue[q]
            out[a] += coef
            for r in range(ly):
                b = ytrue[r]
                if a < b:
                    out[Kc + a * Kc + b] += coef

    def stat_score(kind, S, T, B, scale, st, L, K, Kc, use_trans):
        v = 0.0
        for k in range(K):
            v += S[0, k] * st[k]
            for l in range(k + 1, K):
                v += scale * T[k, l] * st[Kc + k * Kc + l]
        return v

    def stat_loss_lin(kind, st, ytrue, ly, C, L, K, Kc, Ki, ybuf):
        return _set_loss_lin(st, ytrue, ly, K, K, Ki, ybuf)

    def loss_const(kind, ly, Ki, ytrue=None):
        return ly / Ki

    def stat_sqnorm(kind, G, st, L, K, Kc, use_trans):
        v = 0.0
        for k in range(K):
            v += G[0, 0] * st[k] * st[k]
            for l in range(k + 1, K):
                x = st[Kc + k * Kc + l]
                v += x * x
        return v

    def stat_apply(kind, w, x, st, L, K, Kc, coef, use_trans):
        E, T, B = w
        tok_ptr, fidx, fval = x
        for p in range(tok_ptr[0], tok_ptr[1]):
            j = fidx[p]
            v = fval[p] * coef
            for k in range(K):
                E[j, k] += v * st[k]
        for k in range(K):
            for l in range(k + 1, K):
                T[k, l] += coef * st[Kc + k * Kc + l]

    def slack_oracle(model, w, S, scale, L, ytrue, ly, Ki, scratch, out):
        K = model[1]
        ybuf = scratch[3]
        _ml_dense_truth(ytrue, ly, K, ybuf)
        ts = _pair_score(S, w[1], scale, ybuf, K)
        return _mrf_enum(S, w[1], scale, K, ybuf, 1, 1.0, Ki, ts, scratch[5], out)

    def slack_levels(model, w, S, scale, L, ytrue, ly, Ki, scratch, hs, gs):
        K = model[1]
        ybuf, delta = scratch[3], scratch[5]
        _ml_dense_truth(ytrue, ly, K, ybuf)
        ts = _pair_score(S, w[1], scale, ybuf, K)
        lab = np.zeros(K, dtype=np.int32)
        _mrf_enum(S, w[1], scale, K, ybuf, 2, 0.0, Ki, ts, delta, lab)
        return level_points(delta, K, ts, Ki, hs, gs)


class Hierarchy(_NoTransitions):
    """Hierarchical multi-label: the labels are the leaves of a tree / DAG, statistic
    ``[M: Kc]`` with one slot per node (``M[n]`` the mean of "n is in the ancestor closure of the
    chosen leaves"); the loss is Hamming over the leaves (ids < Ki) / Ki (``hierarchy.py``)."""
    kind = HIER
    tag = np.int16

    def kind_code(kind):
        return HIER

    def stat_size(kind, L, Kc):
        return Kc

    def labeling_len(kind, L, Kc):
        return Kc

    def decode(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out):
        return _hier_decode(S, model[5], model[1], ytrue, ly, loss_scale, Ki, scratch[3], out)

    def labeling_score(kind, S, T, B, scale, lab, L, K, use_trans):
        return _set_score(S, lab, K)

    def labeling_loss(kind, lab, ytrue, ly, C, L, K, Ki, ybuf):
        return _set_hamming(lab, ytrue, ly, K, min(Ki, K), Ki, ybuf)

    def labeling_stat(kind, lab, L, Kc, out, coef):
        _set_stat(lab, Kc, out, coef)

    def truth_stat(kind, ytrue, ly, L, Kc, out, coef):
        for q in range(ly):
            out[ytrue[q]] += coef

    def stat_score(kind, S, T, B, scale, st, L, K, Kc, use_trans):
        v = 0.0
        for k in range(K):
            v += S[0, k] * st[k]
        return v

    def stat_loss_lin(kind, st, ytrue, ly, C, L, K, Kc, Ki, ybuf):
        return _set_loss_lin(st, ytrue, ly, K, min(Ki, K), Ki, ybuf)

    def loss_const(kind, ly, Ki, ytrue=None):
        if ytrue is None:
            raise ValueError("loss_const of a hierarchy needs ytrue")
        else:
            c = 0
            for q in range(ly):
                if ytrue[q] < Ki:
                    c += 1
            return c / Ki

    def stat_sqnorm(kind, G, st, L, K, Kc, use_trans):
        return stat_emission_sqnorm(G, st, 1, row_support(st, 1, K, Kc))

    def stat_apply(kind, w, x, st, L, K, Kc, coef, use_trans):
        stat_emission_apply(w[0], x[0], x[1], x[2], st, 1, row_support(st, 1, K, Kc), coef)

    def slack_oracle(model, w, S, scale, L, ytrue, ly, Ki, scratch, out):
        return _hier_slack(S, model[5], model[1], ytrue, ly, Ki, scratch[3], out)

    def slack_levels(model, w, S, scale, L, ytrue, ly, Ki, scratch, hs, gs):
        return _hier_slack_levels(S, model[5], model[1], ytrue, ly, Ki, scratch[3], hs, gs)


#: Every structure, by its code ``kind``.
STRUCTURES = {cls.kind: cls for cls in (Chain, Multiclass, MultiLabel, PairwiseMultiLabel, Hierarchy)}
_BY_TAG_TYPE = {from_dtype(np.dtype(cls.tag)): cls for cls in STRUCTURES.values()}
_TAGS = {kind: cls.tag(kind) for kind, cls in STRUCTURES.items()}
_TAG_CLASSES = frozenset(cls.tag for cls in STRUCTURES.values())


def tag(kind):
    """The tag of the structure with code ``kind``: a numpy scalar whose *type* selects the
    structure's implementation of every operation when numba compiles a kernel, and whose value is
    ``kind``. A tag passes through unchanged.

    >>> tag(MULTICLASS), int(tag(CHAIN)), tag(tag(HIER)) is tag(HIER)
    (np.uint8(1), 0, True)
    """
    if type(kind) in _TAG_CLASSES:
        return kind
    return _TAGS[int(kind)]


def tagged(model):
    """``model`` (``bundles.Model`` as a plain tuple) with its first field a tag."""
    t = tag(model[0])
    return model if t is model[0] else (t,) + tuple(model[1:])


def _per_structure(op, by_model):
    """Register the overload of ``op``: the body of the structure whose tag type is the type of
    the first argument (``by_model``: the first field of that argument)."""
    name = op.__name__

    def select(first, *rest):
        t = first
        if by_model:
            t = first.types[0] if isinstance(first, types.BaseTuple) else None
        cls = _BY_TAG_TYPE.get(t)
        return None if cls is None else getattr(cls, name)

    select.__signature__ = inspect.signature(op)
    # a structure's body is only ever called from kernels (Python calls go through the ``_py_*``
    # entry points below): no CPython wrapper, whose unboxing of the bundles is compiled code of
    # its own on every cold start
    overload(op, jit_options=_INNER)(select)


for _op in _OPERATIONS:
    _per_structure(_op, by_model=_op in (frozen_support, decode, decode_frozen, slack_oracle, slack_levels))


# ---------------------------------------------------------------------------------------------
# Shared bodies of the set structures and the chain statistic.

@njit(**_INNER)
def _chain_stat(lab, L, Kc, out, coef):
    for t in range(L):
        out[t * Kc + lab[t]] += coef
    off = L * Kc
    for t in range(1, L):
        out[off + lab[t - 1] * Kc + lab[t]] += coef
    off2 = off + Kc * Kc
    out[off2 + lab[0]] += coef
    out[off2 + Kc + lab[L - 1]] += coef


@njit(**_JIT)
def _set_score(S, lab, K):
    v = 0.0
    for k in range(K):
        if lab[k] != 0:
            v += S[0, k]
    return v


@njit(**_JIT)
def _pair_score(S, T, scale, lab, K):
    v = 0.0
    for k in range(K):
        if lab[k] != 0:
            v += S[0, k]
            for l in range(k + 1, K):
                if lab[l] != 0:
                    v += scale * T[k, l]
    return v


@njit(**_INNER)
def _set_stat(lab, Kc, out, coef):
    for k in range(Kc):
        if lab[k] != 0:
            out[k] += coef


@njit(**_JIT)
def _set_hamming(lab, ytrue, ly, K, nk, Ki, ybuf):
    """Hamming distance over the first ``nk`` slots / Ki (truth marked into ybuf)."""
    _ml_dense_truth(ytrue, ly, K, ybuf)
    v = 0.0
    for k in range(nk):
        if lab[k] != ybuf[k]:
            v += 1.0
    return v / Ki


@njit(**_INNER)
def _set_loss_lin(st, ytrue, ly, K, nk, Ki, ybuf):
    _ml_dense_truth(ytrue, ly, K, ybuf)
    v = 0.0
    for k in range(nk):
        v += (1.0 - 2.0 * ybuf[k]) * st[k]
    return v / Ki


# ---------------------------------------------------------------------------------------------
# Python entry points of the operations (called with a tag: compiled for that structure only).

@njit(**_JIT)
def _py_stat_size(kind, L, Kc):
    return stat_size(kind, L, Kc)


@njit(**_JIT)
def _py_labeling_len(kind, L, Kc):
    return labeling_len(kind, L, Kc)


@njit(**_JIT)
def _py_decode(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out):
    return decode(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out)


@njit(**_JIT)
def _py_labeling_score(kind, S, T, B, scale, lab, L, K, use_trans):
    return labeling_score(kind, S, T, B, scale, lab, L, K, use_trans)


@njit(**_JIT)
def _py_labeling_loss(kind, lab, ytrue, ly, C, L, K, Ki, ybuf):
    return labeling_loss(kind, lab, ytrue, ly, C, L, K, Ki, ybuf)


@njit(**_JIT)
def _py_labeling_stat(kind, lab, L, Kc, out, coef):
    labeling_stat(kind, lab, L, Kc, out, coef)


@njit(**_JIT)
def _py_truth_stat(kind, ytrue, ly, L, Kc, out, coef):
    truth_stat(kind, ytrue, ly, L, Kc, out, coef)


@njit(**_JIT)
def _py_stat_score(kind, S, T, B, scale, st, L, K, Kc, use_trans):
    return stat_score(kind, S, T, B, scale, st, L, K, Kc, use_trans)


@njit(**_JIT)
def _py_stat_loss_lin(kind, st, ytrue, ly, C, L, K, Kc, Ki, ybuf):
    return stat_loss_lin(kind, st, ytrue, ly, C, L, K, Kc, Ki, ybuf)


@njit(**_JIT)
def _py_loss_const(kind, ly, Ki, ytrue):
    return loss_const(kind, ly, Ki, ytrue)


@njit(**_JIT)
def _py_stat_sqnorm(kind, G, st, L, K, Kc, use_trans):
    return stat_sqnorm(kind, G, st, L, K, Kc, use_trans)


@njit(**_JIT)
def _py_stat_apply(kind, w, x, st, L, K, Kc, coef, use_trans):
    stat_apply(kind, w, x, st, L, K, Kc, coef, use_trans)


@njit(**_JIT)
def _py_slack_oracle(model, w, S, scale, L, ytrue, ly, Ki, scratch, out):
    return slack_oracle(model, w, S, scale, L, ytrue, ly, Ki, scratch, out)


@njit(**_JIT)
def _py_slack_levels(model, w, S, scale, L, ytrue, ly, Ki, scratch, hs, gs):
    return slack_levels(model, w, S, scale, L, ytrue, ly, Ki, scratch, hs, gs)


@njit(**_JIT)
def _py_frozen_support(model, T):
    return frozen_support(model, T)


@njit(**_JIT)
def _py_decode_frozen(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out, support):
    return decode_frozen(model, w, S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out, support)


from .common import guard_inner as _guard_inner  # noqa: E402 (last: it sees every kernel above)

_guard_inner(globals())   # a Python call of an _INNER kernel raises (common.InnerKernel)
