"""Numba kernels for block-coordinate Frank-Wolfe on the linear structures.

The dual blocks live in the BlockStore's arenas, laid out as ``layout.py`` describes (its
constants ``M_*``, ``N_META`` and flags are re-exported here). Every kernel takes the state as
the bundles of ``bundles.py`` (plain tuples: ``model``, ``w``, ``arena``, ``scratch``, ``avg``,
``cfg``, ``example``, ``batch``), unpacked in their declared field order where fields are used;
the structure is the *type* of ``model[0]`` (``structops.tag``), so each kernel compiles the code
of one structure.

The kernels score with ``emission_rows(kind, ..., True)``: ``common.emission_add`` (the body of
``common.emission_scores``, the Python callers' name) for multiclass, whose blocks may store dense
rows, and its CSR-only twin for the other structures, which then compile no dense-row code.
:func:`learn_new_blocks_cm` runs a multiclass batch on class-major copies of E and ZE (one row per
class), whose numba layout ("F" views) selects the class-major scores and steps of
``multiclass.py`` (the same values to the bit); every other reader indexes them as it indexes E.

A sparse chain block (``FLAG_SPARSE``) stores its transition counts as a list of pairs (see
``chainsparse.py``); the ``_st_*`` helpers below compile the layout of the store's blocks (all
sparse or all dense: the type of the Arena bundle's ``layout`` field, ``layout.pairs_layout``), and
the blocks' averaging accumulators only for a store whose blocks keep them (the same type says so).

Block gap estimates are kept in "numerator" units ``N * g_i`` (independent of the number of
held blocks up to the staleness every estimate has anyway).

Example weights (the Arena's ``cw`` per slot and ``csum = [N]``, ``N = sum_i c_i`` over the held
blocks; every c_i = 1 gives N = n and the unweighted algorithm, bit for bit). The primal is

    P(w) = lam/2 ||w||^2 + (1/N) sum_i c_i H_i(w),

so that weight 2 is the example held twice at the optimum. Its dual, with each block's
distribution alpha_i on its own simplex (the block statistic ``st`` stays the mean statistic
m_i of alpha_i, unweighted), is

    D(alpha) = (1/N) sum_i c_i L_i(alpha_i) - lam/2 ||w||^2,   w = U / (lam N),
    U = sum_i c_i u_i(alpha_i),

(u_i = Phi(s(y_i) - m_i), L_i = Delta . alpha_i; Lagrangian of min_w max_alpha with the
weighted hinge's multipliers c_i alpha_i / N). A step alpha_i <- alpha_i + gamma (e_y -
alpha_i), i.e. m_i += gamma d, moves U by -gamma c_i Phi(d) and L_i by gamma l(d), so

    D(gamma) - D(0) = (gamma c_i / N) (l(d) + <w, Phi(d)>) - gamma^2 c_i^2 ||Phi(d)||^2 / (2 lam N^2),

maximized at gamma = lam N (l(d) + <w, Phi(d)>) / (c_i ||Phi(d)||^2), clipped to the step's
largest feasible value (1 for Frank-Wolfe, the away / pairwise bounds unchanged: alpha_i's
simplex is unweighted). ``l(d) + <w, Phi(d)>`` is the unweighted numerator ``gnum`` of the
steps; block i's share of the duality gap is g_i = c_i gnum / N, which the estimates keep
(``gest = c_i gnum``: gap sampling draws blocks by their share of the weighted gap, the cache's
threshold compares ``c_i`` times its gap). Averaging, the accumulators and evictions take U's
moves (already multiplied by c_i) and the loss moves ``c_i dL``; ``full_gap_pass`` sums c_i
H_i, c_i L_i and c_i g_i, which the certificate divides by N. lambda following n follows N (the
learner's ``effective_lam(N)``, the kernels' ``min(lam N, lam_n_max)``): the weighted sample
size, as with duplicated examples. A weight 0 example is never held (the estimators skip it).
"""
import inspect

import numpy as np
from numba import from_dtype, njit, types
from numba.extending import overload

from .structops import (
    HIER, MLPAIR, MULTILABEL, Chain, Multiclass, decode, decode_frozen, emission_add, frozen_support,
    gram, kind_code, labeling_len, labeling_loss, labeling_score, labeling_stat, loss_const, slack_oracle, stat_apply,
    stat_loss_lin, stat_score, stat_sqnorm, tag, truth_stat,
)
from .borrow import borrowed
from .chain import chain_trans_sqnorm
from .common import emission_add_csr, emission_sqnorm_tokens, row_sqnorms, row_support, write_dense_row
from .marginals import emission_table
from .scaling import learn_dense_row
from .multiclass import mc_decode, mc_scores_cm, mc_stat_apply, mc_stat_apply2, mc_stat_apply2_cm, mc_stat_apply_cm
from .mtseed import STATE, mt_sample_block, mt_seed
from .sumtree import SAMPLE_GAP, SAMPLE_GIVEN, SAMPLE_UNIFORM, tree_sample, tree_update  # noqa: F401 (re-exported)
from .chainsparse import (
    SNAP, sp_apply, sp_emission_stat, sp_emission_support, sp_labeling_apply, sp_loss_lin, sp_missing, sp_move_grown, sp_reclaim,
    sp_labeling_stat, sp_register, sp_score, sp_snap, sp_sqnorm, sp_trans_sqnorm,
)
from .layout import (  # noqa: F401 (the layout's names, re-exported for the store and the learners)
    ENTRY_SLACK, FLAG_AVG, FLAG_DENSE_ROW, FLAG_INEXACT_ALPHA, FLAG_NO_GRAM, FLAG_SPARSE, FLAG_TFULL, M_FLAGS, M_FOFF, M_FSIZE,
    M_IOFF, M_ISIZE, M_KI, M_L, M_LABLEN, M_LY, M_NNZ, M_PCAP, M_PN, N_META, PAIRS_DENSE, PAIRS_SPARSE, avg_view,
    block_stat_len, block_views, block_views_inline, entries_pos, gram_len, is_layout, keeps_avg, n_index, pairs_pos, sparse_caps, sparse_layout,
    square_view, truth_pos,
)

STEP_FW, STEP_PAIRWISE, STEP_AWAY = 0, 1, 2

# counters
C_ORACLE, C_HIT, C_STEPS, C_DROP, C_AWAY, C_SANITY, C_POOLFULL, C_TFULL = range(8)
N_COUNTERS = 8

_JIT = dict(cache=True, nogil=True, no_cfunc_wrapper=True)
#: kernels called only from other kernels: no CPython entry (its unboxing of the bundles is
#: sizeable compiled code), not cached (see ``common._INNER``)
_INNER = dict(_JIT, no_cpython_wrapper=True, cache=False)
_CHAIN_TAG = from_dtype(np.dtype(Chain.tag))
_MULTICLASS_TAG = from_dtype(np.dtype(Multiclass.tag))


@njit(**_INNER)
def sample_block(sampling, tree, tree_size, alive, n_alive):
    """A held block: proportional to the gap estimates (sum-tree) or uniform (also when every
    estimate is 0 or the tree draw lands on an empty leaf)."""
    if sampling == SAMPLE_GAP and tree[1] > 0.0:
        j = tree_sample(tree, tree_size, np.random.random())
        if j < tree_size and tree[tree_size + j] > 0.0:
            return j
    return alive[np.random.randint(n_alive)]


@njit(**_INNER)
def avg_coef(tick, avg_t0):
    """W_{s-1} = s (s - 1) / 2 for the step s = tick - avg_t0 + 1 of the averaging window
    (-1: not averaging)."""
    if avg_t0 < 0:
        return -1.0
    s_ = float(tick - avg_t0 + 1)
    return s_ * (s_ - 1.0) / 2.0


def _chain_only(dense):
    """Decorator for the helpers that read a block in either layout: the decorated body (the
    sparse layout's code) is compiled for the chain blocks of a sparse store only, the one
    structure whose blocks can use the sparse pair list (``chainsparse.py``); every other block
    compiles ``dense`` (same parameters) instead, without the sparse code. The structure is the
    type of the first argument (a tag, or the ``model`` bundle), as for ``structops``' operations;
    the layout the type of the ``sp`` argument (``layout.PAIRS_SPARSE`` or ``PAIRS_DENSE``, the
    Arena bundle's ``layout`` field, which ``block_views`` hands on)."""
    def register(body):
        sig = inspect.signature(body)
        at = list(sig.parameters).index("sp")

        def select(first, *rest):
            t = first.types[0] if isinstance(first, types.BaseTuple) else first
            return body if t == _CHAIN_TAG and _sparse_layout(rest[at - 1]) else dense

        select.__signature__ = sig
        overload(body, jit_options=_INNER)(select)
        return body
    return register


def _sparse_layout(sp):
    """Whether an ``sp`` argument's type is the sparse layout's (``layout.pairs_layout``)."""
    if not is_layout(sp):
        raise TypeError(f"a block's sp must be a layout.pairs_layout value (block_views), not {sp}")
    return sparse_layout(sp)


def emission_rows(kind, E, coef, tok_ptr, fidx, fval, L, K, S, zero):
    """``common.emission_add`` for the rows of structure ``kind`` (a tag, or None: any rows): its
    CSR-only twin ``emission_add_csr`` for every structure but multiclass, the one whose blocks
    store dense rows (``BlockStore(dense_rows=...)``), so that their kernels compile no dense-row
    code. Same values."""


def _rows_any(kind, E, coef, tok_ptr, fidx, fval, L, K, S, zero):
    emission_add(E, coef, tok_ptr, fidx, fval, L, K, S, zero)


def _rows_csr(kind, E, coef, tok_ptr, fidx, fval, L, K, S, zero):
    emission_add_csr(E, coef, tok_ptr, fidx, fval, L, K, S, zero)


def _rows_class_major(kind, E, coef, tok_ptr, fidx, fval, L, K, S, zero):
    mc_scores_cm(E, coef, tok_ptr, fidx, fval, L, K, S, zero)


@overload(emission_rows, jit_options=_INNER)
def _ol_emission_rows(kind, E, coef, tok_ptr, fidx, fval, L, K, S, zero):
    """(A class-major E, numba layout "F", is :func:`learn_new_blocks_cm`'s: ``multiclass.mc_scores_cm``.)"""
    if kind == _MULTICLASS_TAG and E.layout == "F":
        return _rows_class_major
    return _rows_any if kind == _MULTICLASS_TAG or isinstance(kind, types.NoneType) else _rows_csr


def _dense_score(model, w, S, scale, st, L, sp, Iar, kpos):
    return stat_score(model[0], S, w[1], w[2], scale, st, L, model[1], model[2], model[3])


@_chain_only(_dense_score)
def _st_score(model, w, S, scale, st, L, sp, Iar, kpos):
    """<w, Phi_x(st)> of a sparse block (a dense one: ``_dense_score``)."""
    return sp_score(S, w[1], w[2], scale, st, L, model[1], model[2], model[3], Iar, kpos)


def _dense_loss_lin(model, sp, st, ytrue, ly, L, Ki, ybuf, Iar, kpos):
    return stat_loss_lin(model[0], st, ytrue, ly, model[4], L, model[1], model[2], Ki, ybuf)


@_chain_only(_dense_loss_lin)
def _st_loss_lin(model, sp, st, ytrue, ly, L, Ki, ybuf, Iar, kpos):
    """The linear part of a block's dual loss at statistic ``st`` (``structops.stat_loss_lin``)
    in the block's layout (this body: a sparse block)."""
    return sp_loss_lin(st, ytrue, model[4], L, Ki, Iar, kpos)


#: Whether held blocks may lack a Gram matrix (``layout.FLAG_NO_GRAM``), as a type (like
#: MARGIN / SLACK below): a StepConfig whose ``grams`` field is GRAMS_KEPT (a numpy uint8: every
#: held block keeps its matrix) compiles no Gram-free
#: code (``common.emission_sqnorm_tokens``); GRAM_FREE (a numpy int8) compiles it. Structures
#: of one token per example (multiclass, multi-label) pass GRAMS_KEPT and never compile that
#: path; chains pass GRAM_FREE from their first example (``Structure.many_tokens``): a real
#: stream of sentences brings one without a Gram matrix early (``layout.stores_gram``), and a switch then
#: recompiled the whole learn path mid-stream (+3.7 CPU s on a cold Brown run, more than the
#: 1.3 s a first use of short sentences saved). A store that ever holds a Gram-free block
#: passes GRAM_FREE whatever its structure.
GRAMS_KEPT, GRAM_FREE = np.uint8(0), np.int8(1)
_GRAMS_KEPT_TYPE = from_dtype(np.dtype(type(GRAMS_KEPT)))


def gram_rule(may_lack):
    """The StepConfig ``grams`` field of a store that may (True) or cannot hold a block without a
    Gram matrix."""
    return GRAM_FREE if may_lack else GRAMS_KEPT


def _dense_sqnorm(model, G, x, st, L, sp, Iar, kpos, grams):
    return stat_sqnorm(model[0], G, st, L, model[1], model[2], model[3])


def _sparse_sqnorm(model, G, x, st, L, sp, Iar, kpos, grams):
    return sp_sqnorm(G, st, L, model[1], model[2], model[3], Iar, kpos)


def _dense_sqnorm_free(model, G, x, st, L, sp, Iar, kpos, grams):
    if G.shape[0] < L:
        v = emission_sqnorm_tokens(x[0], x[1], x[2], st, L, row_support(st, L, model[1], model[2]))
        return chain_trans_sqnorm(v, st, L, model[1], model[2], model[3])
    return stat_sqnorm(model[0], G, st, L, model[1], model[2], model[3])


def _st_sqnorm(model, G, x, st, L, sp, Iar, kpos, grams):
    """||Phi_x(st)||^2 in the block's layout; a block without a stored Gram matrix (``G`` 0 x 0,
    ``layout.FLAG_NO_GRAM``) takes the entries it needs from its tokens ``x`` (same value). Only
    chain blocks can lack one; with ``grams`` of type GRAMS_KEPT none does (:func:`gram_rule`).
    (This body: a sparse block that may lack one.)"""
    if G.shape[0] < L:
        v = emission_sqnorm_tokens(x[0], x[1], x[2], st, L, sp_emission_support(Iar, kpos, st, L))
        return sp_trans_sqnorm(v, st, L, model[1], model[2], model[3], Iar, kpos)
    return sp_sqnorm(G, st, L, model[1], model[2], model[3], Iar, kpos)


@overload(_st_sqnorm, jit_options=_INNER)
def _ol_st_sqnorm(model, G, x, st, L, sp, Iar, kpos, grams):
    if model.types[0] != _CHAIN_TAG:
        return _dense_sqnorm
    kept = grams == _GRAMS_KEPT_TYPE
    if _sparse_layout(sp):
        return _sparse_sqnorm if kept else _st_sqnorm
    return _dense_sqnorm if kept else _dense_sqnorm_free


def _dense_apply(model, w, x, st, L, coef, sp, Iar, kpos):
    stat_apply(model[0], w, x, st, L, model[1], model[2], coef, model[3])


@_chain_only(_dense_apply)
def _st_apply(model, w, x, st, L, coef, sp, Iar, kpos):
    """w += coef * Phi_x(st) on a sparse block (``x = (tok_ptr, fidx, fval)``; a dense one:
    ``_dense_apply``)."""
    sp_apply(w, x, st, L, model[1], model[2], coef, model[3], Iar, kpos)


def _dense_lab(kind, sp, lab, L, Kc, out, coef, Iar, kpos):
    labeling_stat(kind, lab, L, Kc, out, coef)


@_chain_only(_dense_lab)
def _st_lab(kind, sp, lab, L, Kc, out, coef, Iar, kpos):
    """out += coef * s(lab) (a sparse block must have the bigrams of lab registered)."""
    sp_labeling_stat(Iar, kpos, lab, L, out, coef)


def _dense_truth(kind, sp, ytrue, ly, L, Kc, out, coef, Iar, kpos):
    truth_stat(kind, ytrue, ly, L, Kc, out, coef)


@_chain_only(_dense_truth)
def _st_truth(kind, sp, ytrue, ly, L, Kc, out, coef, Iar, kpos):
    """out += coef * s(ytrue) on a sparse block (a dense one: ``_dense_truth``)."""
    sp_labeling_stat(Iar, kpos, ytrue, L, out, coef)


def _step_apply(model, w, z, x, d, L, coef, avg_c, sp, Iar, kpos):
    """w += coef * Phi_x(d) and, when averaging (avg_c >= 0), z += coef * avg_c * Phi_x(d)."""
    _st_apply(model, w, x, d, L, coef, sp, Iar, kpos)
    if avg_c >= 0.0:
        _st_apply(model, z, x, d, L, coef * avg_c, sp, Iar, kpos)


def _mc_step_apply(model, w, z, x, d, L, coef, avg_c, sp, Iar, kpos):
    if avg_c >= 0.0:   # E and ZE in one pass over the row, same values
        mc_stat_apply2(w[0], z[0], x[0], x[1], x[2], d, model[1], coef, coef * avg_c)
    else:   # structops' Multiclass.stat_apply, called without its two forwarding levels
        mc_stat_apply(w[0], x[0], x[1], x[2], d, model[1], coef)


def _mc_step_apply_cm(model, w, z, x, d, L, coef, avg_c, sp, Iar, kpos):
    if avg_c >= 0.0:   # class-major E and ZE (learn_new_blocks_cm), same values
        mc_stat_apply2_cm(w[0], z[0], x[0], x[1], x[2], d, model[1], coef, coef * avg_c)
    else:
        mc_stat_apply_cm(w[0], x[0], x[1], x[2], d, model[1], coef)


@overload(_step_apply, jit_options=_INNER)
def _ol_step_apply(model, w, z, x, d, L, coef, avg_c, sp, Iar, kpos):
    """Multiclass updates E and ZE in one pass over the example's row (``mc_stat_apply2``; on a
    class-major E, numba layout "F", one contiguous pass per moved class: ``mc_stat_apply2_cm``)."""
    if model.types[0] == _MULTICLASS_TAG:
        return _mc_step_apply_cm if w.types[0].layout == "F" else _mc_step_apply
    return _step_apply


def _dense_truth_u(kind, sp, ytrue, ly, L, Kc, dbuf, T, coef, use_trans, Iar, kpos):
    truth_stat(kind, ytrue, ly, L, Kc, dbuf, 1.0)


@_chain_only(_dense_truth_u)
def _truth_u(kind, sp, ytrue, ly, L, Kc, dbuf, T, coef, use_trans, Iar, kpos):
    """dbuf += s(ytrue) for ``block_u``; a sparse block adds the truth's bigrams (which need not
    be among the block's pairs) to T directly, times ``coef`` (its tags are in the block's room:
    every margin block registers its truth when written)."""
    sp_emission_stat(Iar, kpos, ytrue, L, dbuf, 1.0)   # (no BM: chainsparse.py)
    if use_trans:
        sp_labeling_apply(T, ytrue, L, coef)


def _dense_room(kind, sp, arena, j, kpos, sts, L, Kc, lab1, lab2, counters):
    return 1


@_chain_only(_dense_room)
def _room(kind, sp, arena, j, kpos, sts, L, Kc, lab1, lab2, counters):
    """Register the M entries and bigrams of the labelings a step moves (sparse blocks; ``sts``:
    the block's statistic and its averaging accumulator, :func:`avg_view`, whose entries move
    together). Returns 1, or 2 when the block had to be moved to a segment with more entries (its
    views are then stale: the caller takes them anew), or 0 (the block flagged ``FLAG_TFULL``)
    when it has no room for them: the step is skipped."""
    Iar, meta = arena[0], arena[2]
    st, zm = sts
    if sp_register(Iar, kpos, st, zm, lab1, L) and sp_register(Iar, kpos, st, zm, lab2, L):
        return 1
    # full entries first give back those at 0 (sp_reclaim: no value moves)
    y0 = truth_pos(meta, j)
    if (sp_reclaim(Iar, kpos, st, zm, L, Iar[y0:y0 + L], lab1, lab2) > 0 and sp_register(Iar, kpos, st, zm, lab1, L)
            and sp_register(Iar, kpos, st, zm, lab2, L)):
        return 1
    ep = entries_pos(Iar, kpos)
    need = sp_missing(Iar, kpos, lab1, lab2, L)
    if need > 0 and Iar[ep] + need > Iar[ep + 1] and sp_move_grown(arena, j, kpos, L,
                                                                   min(Iar[ep] + need + L + ENTRY_SLACK, L * Kc)):
        kpos = pairs_pos(meta, j)[1]
        st = block_views(arena, j, Kc, kind)[6]
        zm = avg_view(arena, j, Kc, kind)
        if sp_register(Iar, kpos, st, zm, lab1, L) and sp_register(Iar, kpos, st, zm, lab2, L):
            return 2
    meta[j, M_FLAGS] |= FLAG_TFULL
    counters[C_TFULL] += 1
    return 0


@njit(**_INNER)
def _moved_views(arena, j, Kc, kind):
    """The views of block j (:func:`block_views`) taken anew after ``_room`` moved it, with its
    tokens ``x`` and statistic size, as a step function holds them."""
    tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = block_views(arena, j, Kc, kind)
    return tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos, (tok_ptr, fidx, fval), st.shape[0]


def _dense_after_room(kind, sp, room, arena, j, Kc, views):
    return views


@_chain_only(_dense_after_room)
def _after_room(kind, sp, room, arena, j, Kc, views):
    """A step's views (``tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos, x, ss``) after
    :func:`_room`: taken anew when it moved the block to a segment with more M entries (``room == 2``), else
    as they were. Other layouts compile the views as they were only (no room can move there, and
    a runtime ``room == 2`` test would compile the re-read into every entry kernel)."""
    if room == 2:
        return _moved_views(arena, j, Kc, kind)
    return views


def _dense_snap(kind, sp, st, L, Kc, Iar, kpos, T, ZT, cu, cz, use_trans):
    pass


@_chain_only(_dense_snap)
def _snap(kind, sp, st, L, Kc, Iar, kpos, T, ZT, cu, cz, use_trans):
    """``chainsparse.sp_snap`` on a sparse block."""
    sp_snap(st, L, Kc, Iar, kpos, T, ZT, cu, cz, use_trans)


def _dense_snap_avg(kind, sp, st, L, Kc, Iar, kpos, zm, za):
    pass


def _snap_avg(kind, sp, st, L, Kc, Iar, kpos, zm, za):
    """Before ``_snap`` on a sparse block: the counts it sets to 0 move the statistic by -v,
    which the block's averaging accumulator ``zm`` records with weight ``za`` (``avg_note``).
    Compiled for the chain blocks of a sparse store whose blocks keep accumulators only (else
    ``_dense_snap_avg``: ``_chain_only``, ``layout.keeps_avg``)."""
    if zm.shape[0] > 0:
        toff = Iar[entries_pos(Iar, kpos) + 1]
        for q in range(Iar[kpos]):
            v = st[toff + q]
            if v != 0.0 and abs(v) < SNAP:
                zm[toff + q] -= za * v


@overload(_snap_avg, jit_options=_INNER)
def _ol_snap_avg(kind, sp, st, L, Kc, Iar, kpos, zm, za):
    return _snap_avg if kind == _CHAIN_TAG and _sparse_layout(sp) and keeps_avg(sp) else _dense_snap_avg


@njit(inline="always", **_INNER)
def avg_note(arena, j, Kc, kind, d, coef, dL):
    """Block j's averaging accumulator after a step ``st += gamma d`` with weight
    ``W_{s-1}`` (``coef = W_{s-1} gamma``, ``dL`` the weighted move of its dual loss):
    ``zm += coef d``, ``zl += dL`` (nothing when the block keeps none). Returns the accumulator.

    Why per block: the averaged iterate is ``U - Z / W_k`` with ``Z = sum_s W_{s-1} dU_s``
    (``margin_step``), and each step moves one block, so ``Z = sum_i Z_i`` over the blocks
    stepped on, ``Z_i = -Phi_i(zm_i)`` (margin: ``u_i = Phi_i(s(y_i) - m_i)``) or ``+Phi_i(zm_i)``
    (slack: ``u_i = Phi_i(u~_i)``). Block i's part of ``sum_t t U_t`` is ``W_k u_i - Z_i``, so
    evicting it (``u_i`` leaves U) and subtracting ``Z_i`` from Z (``avg_remove``) leaves the
    weighted average of the held blocks' own iterates: the averaged dual point restricted to
    the held blocks, a feasible point of their dual. The accumulators live in U's unnormalized,
    alpha-linear coordinates, so lambda following n changes nothing here: the averaged weights
    are ``U_bar / (lambda n)`` at the current lambda and n, like the current ones."""
    z = avg_view(arena, j, Kc, kind)
    ss = z.shape[0] - 1
    if ss >= 0:
        for q in range(ss):
            z[q] += coef * d[q]
        z[ss] += dL
    return z


@njit(inline="always", **_INNER)
def avg_remove(model, avg, arena, j, slack):
    """Remove evicted block j's part from the averaged iterate: ``Z -= Z_j`` and
    ``facc[1] -= zl_j`` (see ``avg_note``). False when the block keeps no accumulator (the
    caller then stops averaging)."""
    kind, K, Kc, use_trans, C, G_ = model
    avg_t0, ZE, ZT, ZB, facc = avg
    z = avg_view(arena, j, Kc, kind)
    if z.shape[0] == 0:
        return False
    tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = block_views(arena, j, Kc, kind)
    ss = st.shape[0]
    # margin: Z_j = -Phi(zm), Z -= Z_j adds Phi(zm); slack: Z_j = +Phi(zm)
    _st_apply(model, (ZE, ZT, ZB), (tok_ptr, fidx, fval), z[:ss], arena[2][j, M_L], -1.0 if slack else 1.0,
              sp, arena[0], kpos)
    facc[1] -= z[ss]
    return True


@njit(**_JIT)
def evict_average(model, avg, arena, j, slack):
    """:func:`avg_remove` callable from Python (the learner's evictions outside the kernels)."""
    return avg_remove(model, avg, arena, j, slack)


@njit(**_JIT)
def clear_average(model, arena):
    """Zero the averaging accumulators of the held blocks (a new averaging window)."""
    alive, n = arena[6], arena[8]
    for q in range(n):
        z = avg_view(arena, alive[q], model[2], model[0])
        z[:] = 0.0


def _dense_register(kind, sp, Iar, kpos, st, lab, L):
    pass


@_chain_only(_dense_register)
def _register(kind, sp, Iar, kpos, st, lab, L):
    """``chainsparse.sp_register`` of a labeling on a new sparse block (its averaging
    accumulator is 0: nothing to move)."""
    sp_register(Iar, kpos, st, st[0:0], lab, L)


@njit(**_JIT)
def _same(a, b, n):
    for q in range(n):
        if a[q] != b[q]:
            return False
    return True


def slack_step(model, w, arena, scratch, avg, cfg, counters, j, tick, lam_n, avg_c):
    """A Frank-Wolfe step with slack rescaling (Choi, Meshi & Srebro, "Fast and Scalable
    Structural SVM with Slack Rescaling"). H_i(y) = Delta(y) (1 - <w, psi_i(y)>) is a max of
    affine functions with feature Delta(y) psi_i(y): the block keeps the statistic of u_i
    itself, u~_i = sum_y alpha(y) Delta(y) (s(y_i) - s(y)), and L_i = sum_y alpha(y) Delta(y)
    in ``lval``; the corner comes from the exact slack oracle."""
    kind, K, Kc, use_trans, C, G_ = model
    E, T, B = w
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size, cw, csum, layout, moves = arena
    S, V, bp, ybuf, lab, dbuf, V3 = scratch
    avg_t0, ZE, ZT, ZB, facc = avg
    scale = 1.0 / lam_n
    tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = block_views(arena, j, Kc, kind)
    x = (tok_ptr, fidx, fval)
    L = meta[j, M_L]
    ly = meta[j, M_LY]
    Ki = meta[j, M_KI]
    ss = st.shape[0]
    if sp and meta[j, M_FLAGS] & FLAG_TFULL:
        return gest[j]   # waits for the store to give it room (BlockStore.grow_flagged)
    emission_rows(kind, E, scale, tok_ptr, fidx, fval, L, K, S, True)
    hstar = slack_oracle(model, w, S, scale, L, ytrue, ly, Ki, scratch, lab)
    counters[C_ORACLE] += 1
    Li = lval[j]
    gnum = hstar - (Li - _st_score(model, w, S, scale, st, L, sp, Iar, kpos))
    if gnum < -1e-9 * (1.0 + abs(hstar)):
        counters[C_SANITY] += 1
    c = cw[j]
    gest[j] = c * gnum if gnum > 0.0 else 0.0
    last_oracle[j] = tick
    if gnum <= 0.0:
        return gnum
    dstar = labeling_loss(kind, lab, ytrue, ly, model[4], L, K, Ki, ybuf)
    room = _room(kind, sp, arena, j, kpos, (st, avg_view(arena, j, Kc, kind)), L, Kc, ytrue, lab, counters)
    if room == 0:
        return gnum
    tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos, x, ss = _after_room(
        kind, sp, room, arena, j, Kc, (tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos, x, ss))
    for q in range(ss):
        dbuf[q] = -st[q]
    _st_truth(kind, sp, ytrue, ly, L, Kc, dbuf, dstar, Iar, kpos)
    _st_lab(kind, sp, lab, L, Kc, dbuf, -dstar, Iar, kpos)
    sq = _st_sqnorm(model, G, x, dbuf, L, sp, Iar, kpos, cfg[10])
    if sq <= 0.0:
        return gnum
    gamma = lam_n * gnum / (c * sq)
    if gamma > 1.0:
        gamma = 1.0
    for q in range(ss):
        st[q] += gamma * dbuf[q]
    dL = gamma * (dstar - Li)
    lval[j] = Li + dL
    gc = gamma * c   # the move of U = sum_i c_i u_i
    _st_apply(model, w, x, dbuf, L, gc, sp, Iar, kpos)
    facc[0] += c * dL
    if avg_c >= 0.0:
        _st_apply(model, (ZE, ZT, ZB), x, dbuf, L, gc * avg_c, sp, Iar, kpos)
        facc[1] += avg_c * (c * dL)
        _snap_avg(kind, sp, st, L, Kc, Iar, kpos,
                  avg_note(arena, j, Kc, kind, dbuf, gc * avg_c, avg_c * (c * dL)), avg_c * c)
    # a sparse block: u~ moved by +gamma d and U += c gamma Phi(d): a count set to 0 leaves U by -c v
    _snap(kind, sp, st, L, Kc, Iar, kpos, T, ZT, -c, -avg_c * c if avg_c >= 0.0 else 0.0, use_trans)
    counters[C_STEPS] += 1
    return gnum


def fw_step(model, w, arena, scratch, avg, cfg, counters, j, tick, lam_n, avg_c):
    """One block Frank-Wolfe step (Lacoste-Julien et al., "Block-Coordinate Frank-Wolfe
    Optimization for Structural SVMs", ICML 2013) on a block without a corner pool: the exact
    oracle gives the corner, the step moves towards it with the exact line search. The
    arithmetic of ``margin_step``'s FW step on a block whose pool capacity is 0 (same operations
    in the same order), without its cache, pool and pairwise / away code, so the default learner
    compiles only this. Returns the gap numerator (n * g_j); averaging as in ``margin_step``."""
    kind, K, Kc, use_trans, C, G_ = model
    E, T, B = w
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size, cw, csum, layout, moves = arena
    S, V, bp, ybuf, lab, dbuf, V3 = scratch
    avg_t0, ZE, ZT, ZB, facc = avg
    scale = 1.0 / lam_n
    tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = block_views(arena, j, Kc, kind)
    x = (tok_ptr, fidx, fval)
    L = meta[j, M_L]
    ly = meta[j, M_LY]
    Ki = meta[j, M_KI]
    ss = st.shape[0]
    if sp and meta[j, M_FLAGS] & FLAG_TFULL:
        return gest[j]   # waits for the store to give it room (BlockStore.grow_flagged)
    emission_rows(kind, E, scale, tok_ptr, fidx, fval, L, K, S, True)
    m_val = (loss_const(kind, ly, Ki, ytrue) + _st_loss_lin(model, sp, st, ytrue, ly, L, Ki, ybuf, Iar, kpos)
             + _st_score(model, w, S, scale, st, L, sp, Iar, kpos))
    star_val = decode(model, w, S, scale, L, ytrue, ly, 1.0, Ki, scratch, lab)
    counters[C_ORACLE] += 1
    gnum = star_val - m_val
    # sanity: the oracle can never be worse than the ground truth / current point
    if gnum < -1e-9 * (1.0 + abs(star_val)):
        counters[C_SANITY] += 1
    c = cw[j]
    gest[j] = c * gnum if gnum > 0.0 else 0.0
    last_oracle[j] = tick
    if gnum <= 0.0:
        return gnum
    # the pairs of the corner's labeling must be in a sparse block's list
    if sp:
        room = _room(kind, sp, arena, j, kpos, (st, avg_view(arena, j, Kc, kind)), L, Kc, lab, lab, counters)
        if room == 0:
            return gnum
        tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos, x, ss = _after_room(
            kind, sp, room, arena, j, Kc, (tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos, x, ss))
    for q in range(ss):
        dbuf[q] = -st[q]
    _st_lab(kind, sp, lab, L, Kc, dbuf, 1.0, Iar, kpos)
    sq = _st_sqnorm(model, G, x, dbuf, L, sp, Iar, kpos, cfg[10])
    if sq <= 0.0:
        return gnum
    gamma = lam_n * gnum / (c * sq)
    if gamma > 1.0:
        gamma = 1.0
    if gamma <= 0.0:
        return gnum
    for q in range(ss):
        st[q] += gamma * dbuf[q]
    gc = gamma * c   # the move of U = sum_i c_i u_i
    _step_apply(model, w, (ZE, ZT, ZB), x, dbuf, L, -gc, avg_c, sp, Iar, kpos)
    dL = c * (gamma * _st_loss_lin(model, sp, dbuf, ytrue, ly, L, Ki, ybuf, Iar, kpos))
    facc[0] += dL
    if avg_c >= 0.0:
        facc[1] += avg_c * dL
        _snap_avg(kind, sp, st, L, Kc, Iar, kpos, avg_note(arena, j, Kc, kind, dbuf, gc * avg_c, avg_c * dL),
                  avg_c * c)
    # a sparse block: m moved by +gamma d and U += -c gamma Phi(d): a count set to 0 leaves U by +c v
    _snap(kind, sp, st, L, Kc, Iar, kpos, T, ZT, c, avg_c * c if avg_c >= 0.0 else 0.0, use_trans)
    counters[C_STEPS] += 1
    return gnum


def margin_step(model, w, arena, scratch, avg, cfg, counters, j, tick, lam_n, avg_c):
    """One BCFW / pairwise / away step on block j, with the block's corner pool (oracle cache,
    active set; ``fw_step`` on blocks without one). Returns the gap numerator (n * g_j)
    measured at the corner used (exact oracle on a miss).

    Averaging (``avg_c >= 0``): the weighted average of the iterates (weights proportional to
    the iteration index s) is kept lazily through ``Z += W_{s-1} * dU`` with
    ``W_{s-1} = s (s - 1) / 2`` (``avg_c``), so that ``sum_t t U_t = W_k U_k - Z``; ``facc``
    accumulates the same for the dual loss sum: facc[0] += dL, facc[1] += W_{s-1} dL."""
    kind, K, Kc, use_trans, C, G_ = model
    E, T, B = w
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size, cw, csum, layout, moves = arena
    S, V, bp, ybuf, lab, dbuf, V3 = scratch
    avg_t0, ZE, ZT, ZB, facc = avg
    scale = 1.0 / lam_n
    lam, step_type, use_cache, F, nu, g_full, sampling, replay, slack, lam_n_max, grams = cfg
    tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = block_views(arena, j, Kc, kind)
    x = (tok_ptr, fidx, fval)
    L = meta[j, M_L]
    ly = meta[j, M_LY]
    Ki = meta[j, M_KI]
    pcap = meta[j, M_PCAP]
    pn = meta[j, M_PN]
    lablen = meta[j, M_LABLEN]
    ss = st.shape[0]
    c = cw[j]
    if sp and meta[j, M_FLAGS] & FLAG_TFULL:
        return gest[j]   # waits for the store to give it room (BlockStore.grow_flagged)
    emission_rows(kind, E, scale, tok_ptr, fidx, fval, L, K, S, True)
    m_val = (loss_const(kind, ly, Ki, ytrue) + _st_loss_lin(model, sp, st, ytrue, ly, L, Ki, ybuf, Iar, kpos)
             + _st_score(model, w, S, scale, st, L, sp, Iar, kpos))
    # ---- corner: cache (pool) or exact oracle ----
    corner = -1  # pool index of the FW corner if it is in the pool
    hit = False
    if use_cache and pn > 0:
        best = -np.inf
        for p in range(pn):
            lp = pool[p * lablen:(p + 1) * lablen]
            v = (labeling_loss(kind, lp, ytrue, ly, C, L, K, Ki, ybuf)
                 + labeling_score(kind, S, T, B, scale, lp, L, K, use_trans))
            if v > best:
                best = v
                corner = p
        gh = best - m_val
        # (weighted: the block's share c gh against F times its last one and nu times its weight's
        # share of the full gap; every side scales alike when all weights do)
        thr = F * gest[j]
        if nu * g_full * c > thr:
            thr = nu * g_full * c
        if np.isfinite(gest[j]) and c * gh >= thr and gh > 0.0:
            hit = True
            star_val = best
            for q in range(lablen):
                lab[q] = pool[corner * lablen + q]
            counters[C_HIT] += 1
    if not hit:
        corner = -1
        star_val = decode(model, w, S, scale, L, ytrue, ly, 1.0, Ki, scratch, lab)
        counters[C_ORACLE] += 1
        gnum = star_val - m_val
        # sanity: the oracle can never be worse than the ground truth / current point
        if gnum < -1e-9 * (1.0 + abs(star_val)):
            counters[C_SANITY] += 1
        gest[j] = c * gnum if gnum > 0.0 else 0.0
        last_oracle[j] = tick
        if pcap > 0:
            for p in range(pn):
                if _same(pool[p * lablen:(p + 1) * lablen], lab, lablen):
                    corner = p
                    break
    else:
        gnum = star_val - m_val
    # insert the corner into the pool if tracked and absent
    if pcap > 0 and corner < 0:
        if pn < pcap:
            corner = pn
            pn += 1
            meta[j, M_PN] = pn
        else:
            # evict the inactive entry with the lowest value; FW may also evict active ones
            worst = -1
            wv = np.inf
            for p in range(pn):
                if alpha[p] > 0.0 and step_type != STEP_FW:
                    continue
                lp = pool[p * lablen:(p + 1) * lablen]
                v = (labeling_loss(kind, lp, ytrue, ly, C, L, K, Ki, ybuf)
                     + labeling_score(kind, S, T, B, scale, lp, L, K, use_trans))
                if alpha[p] > 0.0:
                    v += 1e300  # prefer inactive entries
                if v < wv:
                    wv = v
                    worst = p
            if worst >= 0:
                if alpha[worst] > 0.0:
                    meta[j, M_FLAGS] |= FLAG_INEXACT_ALPHA
                corner = worst
                alpha[worst] = 0.0
            else:
                counters[C_POOLFULL] += 1
        if corner >= 0:
            for q in range(lablen):
                pool[corner * lablen + q] = lab[q]
    if gnum <= 0.0:
        return gnum
    # ---- choose the step ----
    mode = STEP_FW
    a = -1
    a_val = 0.0
    if step_type != STEP_FW and pcap > 0:
        wv = np.inf
        nact = 0
        for p in range(pn):
            if alpha[p] > 0.0:
                nact += 1
                lp = pool[p * lablen:(p + 1) * lablen]
                v = (labeling_loss(kind, lp, ytrue, ly, C, L, K, Ki, ybuf)
                     + labeling_score(kind, S, T, B, scale, lp, L, K, use_trans))
                if v < wv:
                    wv = v
                    a = p
        if a >= 0 and a != corner:
            a_val = wv
            if step_type == STEP_PAIRWISE:
                if corner >= 0:
                    mode = STEP_PAIRWISE
            else:
                g_away = m_val - a_val
                if nact > 1 and g_away > gnum:
                    mode = STEP_AWAY
    # ---- direction d in statistic space, numerator, max step ----
    if sp:   # the pairs of the labelings moved must be in the block's list
        room = _room(kind, sp, arena, j, kpos, (st, avg_view(arena, j, Kc, kind)), L, Kc, lab,
                     pool[a * lablen:(a + 1) * lablen] if a >= 0 else lab, counters)
        if room == 0:
            return gnum
        tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos, x, ss = _after_room(
            kind, sp, room, arena, j, Kc, (tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos, x, ss))
    for q in range(ss):
        dbuf[q] = 0.0
    if mode == STEP_FW:
        for q in range(ss):
            dbuf[q] = -st[q]
        _st_lab(kind, sp, lab, L, Kc, dbuf, 1.0, Iar, kpos)
        num = gnum
        gmax = 1.0
    elif mode == STEP_PAIRWISE:
        _st_lab(kind, sp, lab, L, Kc, dbuf, 1.0, Iar, kpos)
        _st_lab(kind, sp, pool[a * lablen:(a + 1) * lablen], L, Kc, dbuf, -1.0, Iar, kpos)
        num = star_val - a_val
        gmax = alpha[a]
    else:
        for q in range(ss):
            dbuf[q] = st[q]
        _st_lab(kind, sp, pool[a * lablen:(a + 1) * lablen], L, Kc, dbuf, -1.0, Iar, kpos)
        num = m_val - a_val
        gmax = alpha[a] / (1.0 - alpha[a]) if alpha[a] < 1.0 else 1e300
        counters[C_AWAY] += 1
    sq = _st_sqnorm(model, G, x, dbuf, L, sp, Iar, kpos, grams)
    if sq <= 0.0 or num <= 0.0:
        return gnum
    gamma = lam_n * num / (c * sq)
    if gamma > gmax:
        gamma = gmax
    if gamma <= 0.0:
        return gnum
    # ---- apply ----
    for q in range(ss):
        st[q] += gamma * dbuf[q]
    gc = gamma * c   # the move of U = sum_i c_i u_i
    _step_apply(model, w, (ZE, ZT, ZB), x, dbuf, L, -gc, avg_c, sp, Iar, kpos)
    dL = c * (gamma * _st_loss_lin(model, sp, dbuf, ytrue, ly, L, Ki, ybuf, Iar, kpos))
    facc[0] += dL
    if avg_c >= 0.0:
        facc[1] += avg_c * dL
        _snap_avg(kind, sp, st, L, Kc, Iar, kpos, avg_note(arena, j, Kc, kind, dbuf, gc * avg_c, avg_c * dL),
                  avg_c * c)
    # a sparse block: m moved by +gamma d and U += -c gamma Phi(d): a count set to 0 leaves U by +c v
    _snap(kind, sp, st, L, Kc, Iar, kpos, T, ZT, c, avg_c * c if avg_c >= 0.0 else 0.0, use_trans)
    if pcap > 0:
        if mode == STEP_FW:
            for p in range(pn):
                alpha[p] *= (1.0 - gamma)
            if corner >= 0:
                alpha[corner] += gamma
            else:
                meta[j, M_FLAGS] |= FLAG_INEXACT_ALPHA
            if gamma >= 1.0:
                for p in range(pn):
                    if p != corner:
                        alpha[p] = 0.0
        elif mode == STEP_PAIRWISE:
            alpha[corner] += gamma
            if gamma >= gmax:
                alpha[a] = 0.0
                counters[C_DROP] += 1
            else:
                alpha[a] -= gamma
        else:
            for p in range(pn):
                alpha[p] *= (1.0 + gamma)
            if gamma >= gmax:
                alpha[a] = 0.0
                counters[C_DROP] += 1
            else:
                alpha[a] -= gamma
        for p in range(pn):
            if alpha[p] < 1e-14:
                alpha[p] = 0.0
    counters[C_STEPS] += 1
    return gnum


#: The loss rescaling of the steps, as a type (like the structure tags of ``structops``): the
#: ``slack`` field of a StepConfig is MARGIN (margin rescaling, ``margin_step``) or SLACK (slack
#: rescaling, ``slack_step``), so a kernel compiles the one step it runs.
MARGIN, SLACK = np.uint8(0), np.int8(1)


def rescaling(slack):
    """The StepConfig ``slack`` field of a learner with (True) or without slack rescaling."""
    return SLACK if slack else MARGIN


#: The step rule of a learner whose blocks have no corner pool (``step="fw"`` without cache), as
#: a type: a StepConfig whose ``step_type`` is FW_PLAIN (a numpy uint8 of value STEP_FW) compiles
#: ``fw_step``; an int STEP_* compiles ``margin_step`` with its pool, cache and pairwise / away
#: code.
FW_PLAIN = np.uint8(STEP_FW)


def step_rule(step_type, pooled):
    """The StepConfig ``step_type`` field: FW_PLAIN for blocks without a corner pool (``pooled``
    False: every step is a Frank-Wolfe step there, whatever ``step_type``), else the int
    ``step_type`` (STEP_*)."""
    return int(step_type) if pooled else FW_PLAIN


def block_step(model, w, arena, scratch, avg, cfg, counters, j, tick, lam_n, avg_c):
    """One step on block j: ``fw_step``, ``margin_step`` or ``slack_step``, chosen when the
    calling kernel compiles by the types of ``cfg``'s ``slack`` field (:func:`rescaling`) and
    ``step_type`` field (:func:`step_rule`). Returns the gap numerator (n * g_j) measured at
    the corner used."""
    raise TypeError("block_step runs inside the kernels (numba)")


@overload(block_step, jit_options=_INNER)
def _block_step(model, w, arena, scratch, avg, cfg, counters, j, tick, lam_n, avg_c):
    rule = cfg.types[8]
    if rule == from_dtype(np.dtype(type(MARGIN))):
        return fw_step if cfg.types[1] == from_dtype(np.dtype(type(FW_PLAIN))) else margin_step
    if rule == from_dtype(np.dtype(type(SLACK))):
        return slack_step
    raise TypeError(f"StepConfig.slack must be bcfw.MARGIN or bcfw.SLACK (rescaling(...)), not {rule}")


@njit(**_JIT)
def truth_score(kind, S, T, B, scale, ytrue, ly, L, K, Kc, use_trans, lab):
    """<w, Phi(x_i, y_i)> of a held example's ground truth from its emission scores ``S`` (a
    pairwise multi-label truth is written into ``lab`` as its 0/1 labeling first; multi-label and
    hierarchy sum the scores of the true labels the model knows)."""
    code = kind_code(kind)
    if code == MLPAIR:
        for q in range(labeling_len(kind, L, Kc)):
            lab[q] = 0
        for p in range(ly):
            lab[ytrue[p]] = 1
        return labeling_score(kind, S, T, B, scale, lab, L, K, use_trans)
    if code == MULTILABEL or code == HIER:
        t = 0.0
        for p in range(ly):
            if ytrue[p] < K:
                t += S[0, ytrue[p]]
        return t
    return labeling_score(kind, S, T, B, scale, ytrue, L, K, use_trans)


@njit(**_JIT)
def full_gap_pass(model, w, arena, scratch, scale, slack, out):
    """Exact oracle on every held block at frozen weights ``scale * w``; an arena with
    ``tree_size`` 0 leaves the sum-tree alone.

    out[0] = sum_i c_i max_y H_i(y; w)  (weighted hinge terms, >= 0)
    out[1] = sum_i c_i L_i              (weighted dual loss terms, Delta of the block statistic)
    out[2] = sum_i N g_i                (sum of block gap numerators, N = sum_i c_i)
    out[3] = number of oracle calls
    Refreshes every block gap estimate.
    """
    model, w, arena, scratch, out = borrowed((model, w, arena, scratch, out))   # ``borrow.py``
    kind, K, Kc, use_trans, C, G_ = model
    E, T, B = w
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size, cw, csum, layout, moves = arena
    S, V, bp, ybuf, lab, dbuf, V3 = scratch
    sh = 0.0
    sl = 0.0
    sg = 0.0
    support = frozen_support(model, T)   # T is frozen for the whole pass
    for q in range(n):
        j = alive[q]
        tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = block_views_inline(arena, j, Kc, kind)
        L = meta[j, M_L]
        ly = meta[j, M_LY]
        Ki = meta[j, M_KI]
        emission_rows(kind, E, scale, tok_ptr, fidx, fval, L, K, S, True)
        if slack:
            h = slack_oracle(model, w, S, scale, L, ytrue, ly, Ki, scratch, lab)
            Li = lval[j]
            g = h - (Li - _st_score(model, w, S, scale, st, L, sp, Iar, kpos))
            if g < 0.0:
                g = 0.0
            c = cw[j]
            gest[j] = c * g
            if tree_size > 0:
                tree_update(tree, tree_size, j, c * g)
            sh += c * h
            sl += c * Li
            sg += c * g
            continue
        star = decode_frozen(model, w, S, scale, L, ytrue, ly, 1.0, Ki, scratch, lab, support)
        # score of the ground truth
        t_score = truth_score(kind, S, T, B, scale, ytrue, ly, L, K, Kc, use_trans, lab)
        h = star - t_score
        if h < 0.0:
            h = 0.0  # y_true is feasible: max_y H_i >= 0 (guards round-off)
        Li = loss_const(kind, ly, Ki, ytrue) + _st_loss_lin(model, sp, st, ytrue, ly, L, Ki, ybuf, Iar, kpos)
        m_val = Li + _st_score(model, w, S, scale, st, L, sp, Iar, kpos)
        g = star - m_val
        if g < 0.0:
            g = 0.0
        c = cw[j]
        gest[j] = c * g
        if tree_size > 0:
            tree_update(tree, tree_size, j, c * g)
        sh += c * h
        sl += c * Li
        sg += c * g
    out[0] = sh
    out[1] = sl
    out[2] = sg
    out[3] = n


@njit(inline="always", **_JIT)
def block_u(model, w, arena, j, coef, dbuf, slack):
    """w += coef * c_j * u_j with u_j = Phi(s(y_j) - m_j) (margin) or Phi(u~_j) (slack) and c_j
    the block's weight: the contribution of block ``j``."""
    kind, K, Kc, use_trans, C, G_ = model
    E, T, B = w
    Iar, meta = arena[0], arena[2]
    coef = coef * arena[11][j]   # the block's weight c_j: U = sum_i c_i u_i
    tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = block_views(arena, j, Kc, kind)
    x = (tok_ptr, fidx, fval)
    L = meta[j, M_L]
    ly = meta[j, M_LY]
    ss = st.shape[0]
    if slack:
        _st_apply(model, w, x, st, L, coef, sp, Iar, kpos)
        return
    for q in range(ss):
        dbuf[q] = -st[q]
    _truth_u(kind, sp, ytrue, ly, L, Kc, dbuf, T, coef, use_trans, Iar, kpos)
    _st_apply(model, w, x, dbuf, L, coef, sp, Iar, kpos)


@njit(**_JIT)
def rebuild_u(model, w, arena, dbuf, slack):
    """w = sum_i c_i u_i over the held blocks (removes accumulated round-off)."""
    model, w, arena, dbuf = borrowed((model, w, arena, dbuf))   # ``borrow.py``
    E, T, B = w
    alive, n = arena[6], arena[8]
    E[:, :] = 0.0
    T[:, :] = 0.0
    B[:, :] = 0.0
    for q in range(n):
        block_u(model, w, arena, alive[q], 1.0, dbuf, slack)


@njit(inline="always", **_INNER)
def _emission_avg(kind, E, ZE, zc, scale, tok_ptr, fidx, fval, L, K, S):
    """S = scale * x (E - zc * ZE): scores with the lazily averaged weights (``emission_rows``)."""
    emission_rows(kind, E, scale, tok_ptr, fidx, fval, L, K, S, True)
    emission_rows(kind, ZE, -zc * scale, tok_ptr, fidx, fval, L, K, S, False)


@njit(inline="always", **_INNER)
def record_scores(kind, E, ZE, zc, scale, tok_ptr, fidx, fval, L, K, S):
    """S = a record's scores at weights ``scale * (E - zc * ZE)`` (zc = 0: plain E), as every
    prediction scores it (``predict_example``, ``predict_class``, ``learn_one_example``'s record
    to predict)."""
    if zc != 0.0:
        _emission_avg(kind, E, ZE, zc, scale, tok_ptr, fidx, fval, L, K, S)
    else:
        emission_rows(kind, E, scale, tok_ptr, fidx, fval, L, K, S, True)


@njit(**_JIT)
def emission_avg_scores(E, ZE, zc, scale, tok_ptr, fidx, fval, L, K, S):
    """:func:`_emission_avg` callable from Python (it is inlined into its kernels and has no
    Python wrapper of its own): n-best, explanations and probabilities score as predict does."""
    _emission_avg(None, E, ZE, zc, scale, tok_ptr, fidx, fval, L, K, S)


@njit(**_INNER)
def predict_example(model, w, scale, ZE, zc, tok_ptr, fidx, fval, out, scratch, support):
    """The MAP labeling (into ``out``) of one example of L = len(tok_ptr) - 1 >= 1 tokens at
    weights ``scale * (E - zc * ZE, T, B)`` (zc = 0: plain E), T's Viterbi ``support`` found
    beforehand (``structops.frozen_support``): what ``predict_batch`` does for each example
    (``learn_one_example`` scores a record to predict the same way and decodes it with
    ``decode``: the same labeling)."""
    kind, K = model[0], model[1]
    E = w[0]
    L = tok_ptr.shape[0] - 1
    dummy = np.empty(1, np.int32)   # (not np.zeros: ``common.py`` on allocations)
    dummy[0] = 0
    S = scratch[0]
    record_scores(kind, E, ZE, zc, scale, tok_ptr, fidx, fval, L, K, S)
    decode_frozen(model, w, S, scale, L, dummy, 0, 0.0, 1, scratch, out, support)


@njit(**_JIT)
def predict_batch(model, w, scale, ZE, zc, batch, out, scratch):
    """MAP labelings of a batch (``bundles.Batch``) at weights ``scale * (E - zc * ZE, T, B)``
    (zc = 0: plain E). Example e has tokens ex_tok[e]..ex_tok[e+1] of the global CSR (tok_ptr
    into fidx/fval); its labeling goes to out[lab_ptr[e]:lab_ptr[e+1]]."""
    model, w, ZE, batch, out, scratch = borrowed((model, w, ZE, batch, out, scratch))   # ``borrow.py``
    ex_tok, tok_ptr, fidx, fval, lab_ptr = batch
    support = frozen_support(model, w[1])   # T is frozen for the whole batch
    for e in range(ex_tok.shape[0] - 1):
        t0 = ex_tok[e]
        L = ex_tok[e + 1] - t0
        if L == 0:
            continue
        predict_example(model, w, scale, ZE, zc, tok_ptr[t0:t0 + L + 1], fidx, fval, out[lab_ptr[e]:lab_ptr[e + 1]],
                        scratch, support)


@njit(**_JIT)
def predict_class(E, ZE, zc, scale, tok_ptr, fidx, fval, K, obs):
    """The class :func:`predict_batch` predicts for a batch of one single-token (multiclass)
    record, by its scoring and decoding (``_emission_avg`` / ``emission_rows``, ``mc_decode``
    at loss weight 0), with the few arguments they read: 9 arguments, 6 of them arrays, where
    ``predict_batch`` takes 8 holding 18 arrays (most in its bundles), each array a cost of the
    call. With ``obs`` of one row (1 x K),
    the record's class scores as the temperature fit takes them (``marginals.emission_table``
    at the same weights, to the bit what ``calibration.emission_scores`` returns) go to it: a
    prediction and its calibration scores in one call."""
    E, ZE, tok_ptr, fidx, fval, obs = borrowed((E, ZE, tok_ptr, fidx, fval, obs))   # ``borrow.py``
    S = np.empty((1, K))
    record_scores(None, E, ZE, zc, scale, tok_ptr, fidx, fval, 1, K, S)
    out = np.empty(1, np.int32)
    out[0] = 0
    mc_decode(S, K, out, S, 0.0, out)   # loss weight 0: neither the truth (out) nor the costs (S) are read
    if obs.shape[0]:
        emission_table(E, ZE, zc, scale, tok_ptr, fidx, fval, 1, K, obs)
    return out[0]


@njit(inline="always", **_INNER)
def write_block(kind, Kc, store, j, tok_ptr, fidx, fval, ytrue, mark, slack=False):
    """Write one block's segment at the offsets already in meta[j] (``store = (Iar, Far, meta,
    layout)``, the Arena bundle's fields): tokens (tok_ptr relative to fidx/fval), ground truth,
    Gram matrix, the dual point on the ground truth (statistic s(y), pool = {y} with alpha 1 when
    pools are kept)."""
    write_segment(kind, Kc, store, j, tok_ptr, fidx, fval, ytrue, mark, slack)
    block_gram(store[0], store[1], store[2], j, mark)


@njit(inline="always", **_INNER)
def block_gram(Iar, Far, meta, j, mark):
    """Block j's Gram matrix (none for a block flagged ``FLAG_NO_GRAM``), from the tokens its
    segment holds (``write_segment``)."""
    gl = gram_len(meta, j)
    if gl > 0:
        io = meta[j, M_IOFF]
        fo = meta[j, M_FOFF]
        L = meta[j, M_L]
        nnz = meta[j, M_NNZ]
        G = square_view(Far[fo + nnz:fo + nnz + gl], L)
        gram(Iar[io:io + L + 1], Iar[io + L + 1:io + L + 1 + n_index(meta, j)], Far[fo:fo + nnz], L, G, mark)


@njit(inline="always", **_INNER)
def write_segment(kind, Kc, store, j, tok_ptr, fidx, fval, ytrue, mark, slack=False):
    """:func:`write_block` but the Gram matrix (:func:`block_gram`), whose place it leaves as is."""
    Iar, Far, meta, sp = store
    io = meta[j, M_IOFF]
    fo = meta[j, M_FOFF]
    L = meta[j, M_L]
    nnz = meta[j, M_NNZ]
    base = tok_ptr[0]
    if not meta[j, M_FLAGS] & FLAG_DENSE_ROW:
        for t in range(L + 1):
            Iar[io + t] = tok_ptr[t] - base
        for p in range(nnz):
            Iar[io + L + 1 + p] = fidx[base + p]
            Far[fo + p] = fval[base + p]
    else:   # a dense row of nnz values (one token; BlockStore decides with common.dense_row_span)
        Iar[io] = 0
        Iar[io + 1] = nnz
        write_dense_row(fidx, fval, base, tok_ptr[1], Far[fo:fo + nnz])
    write_segment_rest(kind, Kc, store, j, ytrue, slack)


@njit(inline="always", **_INNER)
def write_segment_rest(kind, Kc, store, j, ytrue, slack):
    """What :func:`write_segment` writes after the tokens: the ground truth ``ytrue``, an empty
    pool, the pair list of a sparse block, and the dual point on the ground truth."""
    Iar, Far, meta, sp = store
    io = meta[j, M_IOFF]
    fo = meta[j, M_FOFF]
    L = meta[j, M_L]
    nnz = meta[j, M_NNZ]
    ly = meta[j, M_LY]
    pcap = meta[j, M_PCAP]
    lablen = meta[j, M_LABLEN]
    nix = n_index(meta, j)
    for q in range(ly):
        Iar[io + L + 1 + nix + q] = ytrue[q]
    p0 = io + L + 1 + nix + ly
    for q in range(pcap * lablen):
        Iar[p0 + q] = 0
    gl = gram_len(meta, j)
    kpos = pairs_pos(meta, j)[1]
    if sp:   # the pair list and the M entries: empty, capacities from the segment sizes
        avg = meta[j, M_FLAGS] & FLAG_AVG
        tcap, ecap = sparse_caps(meta[j, M_ISIZE], meta[j, M_FSIZE], kpos - io, nnz + gl + pcap, L, avg)
        Iar[kpos] = 0
        Iar[kpos + 1] = tcap
        ep = kpos + 2 + 2 * tcap
        Iar[ep] = 0
        Iar[ep + 1] = ecap
        for t in range(L + 1):
            Iar[ep + 2 + t] = 0
    ss = block_stat_len(kind, L, Kc, sp, Iar, kpos)
    s0 = fo + nnz + gl
    nz = ss + pcap + (ss + 1 if meta[j, M_FLAGS] & FLAG_AVG else 0)   # the averaging accumulator too
    for q in range(nz):
        Far[s0 + q] = 0.0
    yt = Iar[io + L + 1 + nix:io + L + 1 + nix + ly]
    if not slack:  # margin: the mean statistic of alpha = e_{y_i}; slack: u~_i = 0
        _register(kind, sp, Iar, kpos, Far[s0:s0 + ss], yt, L)
        _st_truth(kind, sp, yt, ly, L, Kc, Far[s0:s0 + ss], 1.0, Iar, kpos)
    meta[j, M_PN] = 0
    if pcap > 0:
        code = kind_code(kind)
        if code == MULTILABEL or code == MLPAIR or code == HIER:
            for q in range(ly):
                Iar[p0 + yt[q]] = 1
        else:
            for q in range(L):
                Iar[p0 + q] = yt[q]
        Far[s0 + ss] = 1.0
        meta[j, M_PN] = 1


def insert_blocks(kind, Kc, store, slots, batch, ys, mark, slack=False):
    """Write the segments of new blocks whose offsets/sizes are already in ``meta``.
    ``kind`` the structure's code or tag; ``store = (Iar, Far, meta, layout)`` (the BlockStore's
    arenas and ``layout.pairs_layout``); ``batch`` the examples as a ``bundles.Batch`` (example e: tokens
    ex_tok[e]..ex_tok[e+1] of the global CSR, truth ys[y_ptr[e]:y_ptr[e+1]] with ``y_ptr`` in
    the ``lab_ptr`` field)."""
    _insert_blocks(tag(kind), Kc, store, slots, batch, ys, mark, slack)


@njit(inline="always", **_INNER)
def _gram_or_defer(Iar, Far, meta, j, mark, offs, lens, dense, c):
    """The Gram entries of new block j (written): a dense one-token row's (one squared norm) left
    for :func:`_deferred_grams`, noted as the c-th (returns c + 1), any other block's now."""
    if meta[j, M_FLAGS] & FLAG_DENSE_ROW and gram_len(meta, j) == 1:
        offs[c] = meta[j, M_FOFF]   # its values: Far[offs[c]:offs[c] + lens[c]]
        lens[c] = meta[j, M_NNZ]
        dense[c] = j
        return c + 1
    block_gram(Iar, Far, meta, j, mark)
    return c


@njit(inline="always", **_INNER)
def _deferred_grams(Far, meta, offs, lens, dense):
    """The squared norms of the rows :func:`_gram_or_defer` left, four rows at a time
    (``common.row_sqnorms``: the same sums to the bit), each written after its block's values."""
    sq = np.empty(offs.shape[0])
    row_sqnorms(Far, offs, lens, sq)
    for q in range(offs.shape[0]):
        j = dense[q]
        Far[meta[j, M_FOFF] + meta[j, M_NNZ]] = sq[q]   # G (1 x 1) follows the values


@njit(**_JIT)
def _insert_blocks(kind, Kc, store, slots, batch, ys, mark, slack):
    """``write_block`` of each new block, the Gram entries of the dense one-token rows (one
    squared norm each) computed after all are written, four rows at a time
    (``common.row_sqnorms``: the same sums to the bit)."""
    store, slots, batch, ys, mark = borrowed((store, slots, batch, ys, mark))   # ``borrow.py``
    Iar, Far, meta, sp = store
    ex_tok, tok_ptr, fidx, fval, y_ptr = batch
    m = slots.shape[0]
    offs = np.empty(m, dtype=np.int64)   # the dense rows' values: Far[offs[c]:offs[c] + lens[c]]
    lens = np.empty(m, dtype=np.int64)
    dense = np.empty(m, dtype=np.int64)
    c = 0
    for e in range(m):
        j = slots[e]
        write_segment(kind, Kc, store, j, tok_ptr[ex_tok[e]:ex_tok[e + 1] + 1], fidx, fval,
                      ys[y_ptr[e]:y_ptr[e + 1]], mark, slack)
        c = _gram_or_defer(Iar, Far, meta, j, mark, offs, lens, dense, c)
    _deferred_grams(Far, meta, offs[:c], lens[:c], dense[:c])


def insert_dense_rows(kind, Kc, store, slots, A, ys, mark, slack, scaling):
    """:func:`insert_blocks` of one-token blocks whose rows are those of a dense 2-D float64 array
    ``A`` (validated: ``FeatureIndex.check_dense``), row e into ``slots[e]`` with the label
    ``ys[e]``, without their CSR: row e is the bias (feature 0, value 1) then its non-zero
    columns c as features c + 1, as ``FeatureIndex.dense_csr`` encodes it. A block flagged
    ``FLAG_DENSE_ROW`` (``meta``'s nnz: the row's span) gets its values from the row directly,
    another one its non-zeros and their indices. ``scaling``: the ``(sumsq, count)`` statistics
    of a :class:`~streamssvm.scaling.ColumnScaler` (holding every column of ``A``), which take
    the rows in order, each row stored as scaled by the statistics that include it
    (``scaling.learn_dense_row``: ``ColumnScaler.learn_scaled``'s values to the bit); None: the
    values as they are. The same segments as :func:`insert_blocks` of the CSR of the rows
    (scaled by ``learn_scaled``), to the bit."""
    if scaling is None:
        scaling = (np.zeros(0), np.zeros(0))
        scale = False
    else:
        scale = True
    _insert_dense_rows(tag(kind), Kc, store, slots, A, ys, mark, slack, scaling[0], scaling[1], scale)


@njit(**_JIT)
def _insert_dense_rows(kind, Kc, store, slots, A, ys, mark, slack, sumsq, count, scale):
    # (the arguments borrowed for the call: no reference counts per row, ``borrow.py``)
    store, A, sumsq, count, mark = borrowed((store, A, sumsq, count, mark))
    Iar, Far, meta, sp = store
    m = slots.shape[0]
    d = A.shape[1]
    offs = np.empty(m, dtype=np.int64)   # the dense rows' values: Far[offs[c]:offs[c] + lens[c]]
    lens = np.empty(m, dtype=np.int64)
    dense = np.empty(m, dtype=np.int64)
    row = np.empty(d)   # a sparse row's values, scaled
    c = 0
    for e in range(m):
        j = slots[e]
        io = meta[j, M_IOFF]
        fo = meta[j, M_FOFF]
        nnz = meta[j, M_NNZ]
        Iar[io] = 0
        Iar[io + 1] = nnz
        Far[fo] = 1.0   # the bias (never scaled)
        if meta[j, M_FLAGS] & FLAG_DENSE_ROW:   # features 0..nnz-1: the row's first nnz - 1 columns
            learn_dense_row(sumsq[1:], count[1:], A[e, :nnz - 1], Far[fo + 1:fo + nnz], scale)
        else:
            learn_dense_row(sumsq[1:], count[1:], A[e], row, scale)
            Iar[io + 2] = 0
            p = 1
            for q in range(d):
                if A[e, q] != 0.0:
                    Iar[io + 2 + p] = q + 1
                    Far[fo + p] = row[q]
                    p += 1
        write_segment_rest(kind, Kc, store, j, ys[e:e + 1], slack)
        c = _gram_or_defer(Iar, Far, meta, j, mark, offs, lens, dense, c)
    _deferred_grams(Far, meta, offs[:c], lens[:c], dense[:c])


@njit(**_JIT)
def run_steps(model, w, arena, scratch, avg, cfg, sampling, slots, n_steps, tick0, seed, counters):
    """Run ``n_steps`` block steps; returns the new tick. ``sampling``: SAMPLE_GIVEN takes
    ``slots`` in order, SAMPLE_UNIFORM draws uniformly over the held blocks, SAMPLE_GAP
    proportionally to the gap estimates (sum-tree)."""
    model, w, arena, scratch, avg, slots, counters = borrowed(   # ``borrow.py``
        (model, w, arena, scratch, avg, slots, counters))
    alive, n, tree, tree_size = arena[6], arena[8], arena[9], arena[10]
    lam_n = step_lam_n(arena, cfg)
    np.random.seed(seed)
    tick = tick0
    for it in range(n_steps):
        j = slots[it] if sampling == SAMPLE_GIVEN else sample_block(sampling, tree, tree_size, alive, n)
        tick = one_step(model, w, arena, scratch, avg, cfg, counters, j, lam_n, avg[0], tick)
    return tick


#: The ``victim`` of an Example bundle (``bundles.Example``) that evicts nothing, as a type (like
#: the structure tags of ``structops``): a kernel given NO_VICTIM (a numpy int8) compiles no
#: eviction code (``evict``); an int victim (-1: none) compiles it. A store with free room passes
#: NO_VICTIM, so a first use (from an empty cache to the first prediction) does not compile the
#: evictions it cannot make; the first eviction compiles (or loads) the other specialization.
NO_VICTIM = np.int8(-1)
#: the ``slot`` of an Example that ``learn_one_example`` predicts instead of learning it
PREDICT = -2
#: the ``slot`` of an Example whose emission table ``learn_one_example`` computes instead of
#: learning it (the temperature fit's scores, ``marginals.emission_table``)
SCORE = -3
_NO_VICTIM_TYPE = from_dtype(np.dtype(type(NO_VICTIM)))


def victim_field(victim):
    """The Example bundle's ``victim`` field: the block ``victim`` (an int), or NO_VICTIM when
    it is negative (no eviction)."""
    return int(victim) if victim >= 0 else NO_VICTIM


def evict(model, w, arena, scratch, avg, cfg, n, v, out):
    """Evict block v (if >= 0) of the ``n`` held; returns the number of blocks held after. Reads
    the averaging origin from out[2] and updates out[1] (evictions), out[2] (-1: averaging stops,
    at the eviction of a block without an averaging accumulator). An evicted block's part leaves
    the weights (``block_u``) and the averaged iterate (``avg_remove``) with it. ``v`` of type
    NO_VICTIM compiles ``_no_eviction`` instead."""
    gest, alive, pos, tree, tree_size = arena[3], arena[6], arena[7], arena[9], arena[10]
    if v >= 0:
        block_u(model, w, arena, v, -1.0, scratch[5], cfg[8])
        if out[2] >= 0 and not avg_remove(model, avg, arena, v, cfg[8]):
            out[2] = -1
        p = pos[v]
        last = alive[n - 1]
        alive[p] = last
        pos[last] = p
        pos[v] = -1
        n -= 1
        gest[v] = 0.0
        if tree_size > 0:
            tree_update(tree, tree_size, v, 0.0)
        out[1] += 1
        arena[12][0] -= arena[11][v]   # N -= c_v
    return n


def _no_eviction(model, w, arena, scratch, avg, cfg, n, v, out):
    return n


@overload(evict, jit_options=_INNER)
def _ol_evict(model, w, arena, scratch, avg, cfg, n, v, out):
    return _no_eviction if v == _NO_VICTIM_TYPE else evict


@njit(inline="always", **_INNER)
def _append(alive, pos, cw, csum, n, jn):
    """Append block jn to the ``n`` held (the arena's ``alive``, ``pos``, example weights ``cw``
    and their sum ``csum[0]``), after ``evict`` of the victim if any; returns the number of held
    blocks. Its callers pass the four arrays, not the bundles: an inlined call binds each array
    of its arguments, an atomic reference count up and down per array and call (numba), 31
    pairs per record with the six bundles."""
    csum[0] += cw[jn]
    alive[n] = jn
    pos[jn] = n
    return n + 1


@njit(inline="always", **_INNER)
def one_step(model, w, arena, scratch, avg, cfg, counters, j, lam_n, avg_t0, tick):
    """One block step on block j at ``tick`` (averaging from ``avg_t0``), its gap estimate into
    the sum-tree; returns the next tick. The one call site of ``block_step`` in a record-path
    kernel: the kernels whose steps draw their blocks through :mod:`mtseed`
    (``learn_one_example``, ``microbatch.predict_learn_examples``) call it directly and do not
    compile numba's own sampler."""
    block_step(model, w, arena, scratch, avg, cfg, counters, j, tick, lam_n, avg_coef(tick, avg_t0))
    if arena[10] > 0:
        tree_update(arena[9], arena[10], j, arena[3][j])
    return tick + 1


@njit(**_INNER)
def step_lam_n(arena, cfg):
    """lambda N of a step (N = the sum of the held blocks' weights: n when every weight is 1),
    capped by ``lam_n_max``."""
    return min(cfg[0] * arena[12][0], cfg[9])


@njit(inline="always", **_INNER)
def _step_loop(model, w, arena, scratch, avg, cfg, counters, slots, n_steps, n, avg_t0, tick):
    """``n_steps`` block steps with ``n`` blocks held: on ``slots`` in order, then (when
    ``n_steps`` is longer) on blocks sampled as ``cfg``'s ``sampling`` says; returns the new
    tick."""
    lam_n = step_lam_n(arena, cfg)
    for r in range(n_steps):
        j = slots[r] if r < slots.shape[0] else sample_block(cfg[6], arena[9], arena[10], arena[6], n)
        tick = one_step(model, w, arena, scratch, avg, cfg, counters, j, lam_n, avg_t0, tick)
    return tick


@njit(**_JIT)
def learn_new_blocks(model, w, arena, scratch, avg, cfg, new_slots, victims, tick0, seed, counters, out):
    """:func:`_learn_new` on the learner's weights as they are (row-major E and ZE), the bundles
    borrowed for the call (``borrow.py``: no reference counts in the steps)."""
    model, w, arena, scratch, avg, new_slots, victims, counters, out = borrowed(
        (model, w, arena, scratch, avg, new_slots, victims, counters, out))
    return _learn_new(model, w, arena, scratch, avg, cfg, new_slots, victims, tick0, seed, counters, out)


@njit(**_JIT)
def learn_new_blocks_cm(model, w, arena, scratch, avg, cfg, new_slots, victims, tick0, seed, counters, out):
    """:func:`learn_new_blocks` with E and ZE class-major for the call: copied into arrays with
    one row per class (the features contiguous), the blocks learned on their (d, Kc) views
    (numba layout "F", which selects the class-major scores and steps of a multiclass model,
    ``multiclass.mc_scores_cm`` / ``mc_stat_apply2_cm``; every other reader indexes them as
    the row-major arrays: the same arithmetic entry by entry, so the same values to the bit),
    then copied back. A step on a dense row then moves one contiguous row of E and of ZE per
    moved class instead of two entries in each of the d rows (issue 22: 784-d image rows); the
    two copies cost O(d Kc) per call, which the learner pays only for batches of rows dense
    enough (``BCFW.learn_batch``). The bundles and the copies are borrowed for the steps
    (``borrow.py``; the copies live until they are copied back)."""
    E, ZE = w[0], avg[1]
    Ec = class_major_copy(E)
    Zc = class_major_copy(ZE)
    mb, wc, ab, sb, zc, new_slots, victims, counters, out = borrowed(
        (model, (Ec.T, w[1], w[2]), arena, scratch, (avg[0], Zc.T, avg[2], avg[3], avg[4]), new_slots, victims,
         counters, out))
    tick = _learn_new(mb, wc, ab, sb, zc, cfg, new_slots, victims, tick0, seed, counters, out)
    row_major_into(Ec, E)
    row_major_into(Zc, ZE)
    return tick


@njit(inline="always", **_INNER)
def class_major_copy(A):
    """A (d, Kc) array's class-major copy, (Kc, d) C-contiguous (``np.empty((m, n))``: the
    kernels' allocations, ``common.py``)."""
    d, kc = A.shape
    C = np.empty((kc, d))
    for j in range(d):
        for k in range(kc):
            C[k, j] = A[j, k]
    return C


@njit(inline="always", **_INNER)
def row_major_into(C, A):
    """A[j, k] = C[k, j]: a class-major copy back into its (d, Kc) array."""
    d, kc = A.shape
    for j in range(d):
        for k in range(kc):
            A[j, k] = C[k, j]


@njit(inline="always", **_INNER)
def _learn_new(model, w, arena, scratch, avg, cfg, new_slots, victims, tick0, seed, counters, out):
    """The online loop for m new blocks whose segments are already written (slots
    ``new_slots``, not yet in ``alive``): for each, in order, evict ``victims[e]`` if >= 0
    (its u_i leaves the weights and its part of the averaged iterate leaves Z), append the new
    block (n changes), one step on it, then ``replay`` steps on blocks sampled among the held
    ones. out = [held blocks, evictions, averaging origin]; returns the new tick."""
    np.random.seed(seed)
    tick = tick0
    out[0] = arena[8]
    out[1] = 0
    out[2] = avg[0]
    for e in range(new_slots.shape[0]):
        n = out[0]
        if victims[e] >= 0:   # (no call without a victim: the call passes every bundle's arrays)
            n = evict(model, w, arena, scratch, avg, cfg, n, victims[e], out)
        out[0] = _append(arena[6], arena[7], arena[11], arena[12], n, new_slots[e])
        tick = _step_loop(model, w, arena, scratch, avg, cfg, counters, new_slots[e:e + 1], cfg[7] + 1, out[0],
                          out[2], tick)
    return tick


@njit(**_JIT)
def learn_one_example(model, w, arena, scratch, avg, cfg, example, slots, tick0, seed, counters, out):
    """Write one example's block (``bundles.Example``) into its slot and learn it: ``write_block``
    and one arrival (see ``learn_new_blocks``) in a single call, the learn_one path;
    out = [held blocks, evictions, averaging origin].

    With ``slots`` non-empty, no example is written (``example`` only gives the types) and
    ``out`` is left alone: the steps of ``run_steps(..., SAMPLE_GIVEN, slots, len(slots), ...)``
    instead, same values. The learn_one path runs its given steps (the revisits when a label
    arrives) here, through the same call site of the step, so that a first use compiles one
    kernel holding the step code, not two (each numba entry point optimizes and emits machine
    code for every function it calls).

    The replays draw their blocks as after ``np.random.seed(seed)``, through
    :mod:`streamssvm._kernels.mtseed` (numba's draws without the cost of its seeding, as
    ``microbatch.predict_learn_examples`` draws them): one step at a time, each block drawn
    after the step before, as ``_step_loop`` over all of them (a step does not change N).

    An example whose ``slot`` is ``PREDICT`` is a record to predict, not to learn: its labeling
    goes to its ``ytrue`` at weights ``scale * (E - zc * ZE, T, B)`` (``w`` = the weights to
    predict with, ZE the averaging bundle's, ``scale`` and ``zc`` the example's), the labeling
    ``predict_batch`` gives it (``predict_example``'s scores and decoder), and nothing else changes. The learn_one
    path predicts so once it has learned: a first use compiles one kernel holding the decoder,
    not two (see above).

    An example whose ``slot`` is ``SCORE`` is a record to score for the temperature fit: its
    emission table at the same weights (``marginals.emission_table``, K = the model's labels in
    use) goes to the first L rows of ``scratch[0]``, and nothing else changes: a first use
    compiles no emission-table kernel of its own."""
    model, w, arena, scratch, avg, example, slots, counters, out = borrowed(   # ``borrow.py``
        (model, w, arena, scratch, avg, example, slots, counters, out))
    if example[5] == SCORE:
        tok_ptr = example[0]
        emission_table(w[0], avg[1], example[8], example[7], tok_ptr, example[1], example[2], tok_ptr.shape[0] - 1,
                       model[1], scratch[0])
        return tick0
    if example[5] == PREDICT:
        # the scores of a prediction, then the decoder the steps compiled (``decode``: the same
        # labeling as ``decode_frozen``, its Viterbi support found for this one record; no
        # frozen-support code compiles on this path)
        tok_ptr, fidx, fval, labels, scale, zc = example[0], example[1], example[2], example[3], example[7], example[8]
        L = tok_ptr.shape[0] - 1
        S = scratch[0]
        record_scores(model[0], w[0], avg[1], zc, scale, tok_ptr, fidx, fval, L, model[1], S)
        zero = L - L   # (ly, Ki and the loss scale as typed values, not literals: the steps' decode)
        decode(model, w, S, scale, L, labels, zero, 0.0 * scale, zero + 1, scratch, labels)
        return tick0
    rng = np.empty(STATE, dtype=np.int64)
    mt_seed(rng, seed)
    if slots.shape[0] > 0:
        n, avg_t0, steps, n_steps = arena[8], avg[0], slots, slots.shape[0]
    else:
        tok_ptr, fidx, fval, ytrue, mark, slot, victim = example[:7]
        write_block(model[0], model[2], arena[:3] + (arena[13],), slot, tok_ptr, fidx, fval, ytrue, mark, cfg[8])
        arena[5][slot] = 0.0
        out[1] = 0
        out[2] = avg[0]
        n = arena[8]
        if victim >= 0:
            n = evict(model, w, arena, scratch, avg, cfg, n, victim, out)
        n = _append(arena[6], arena[7], arena[11], arena[12], n, slot)
        out[0] = n
        # the first step on the new block (alive[n - 1]), then the replays
        avg_t0, steps, n_steps = out[2], arena[6][n - 1:n], cfg[7] + 1
    alive, tree, tree_size = arena[6], arena[9], arena[10]
    tick = tick0
    for r in range(n_steps):
        j = steps[r] if r < steps.shape[0] else mt_sample_block(cfg[6], tree, tree_size, alive, n, rng)
        tick = one_step(model, w, arena, scratch, avg, cfg, counters, j, step_lam_n(arena, cfg), avg_t0, tick)
    return tick


from .common import guard_inner as _guard_inner  # noqa: E402 (last: it sees every kernel above)

_guard_inner(globals())   # a Python call of an _INNER kernel raises (common.InnerKernel)
