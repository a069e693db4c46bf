"""Numba kernels for block-coordinate Frank-Wolfe on the linear structures.

Blocks live in two arenas (``Iar`` int32, ``Far`` float64); ``meta[slot]`` holds the offsets
and sizes (see ``M_*``). Segment layout of one block:

* ints:   ``tok_ptr (L+1) | fidx (nnz) | ytrue (ly) | pool labelings (pcap * lablen)``
* floats: ``fval (nnz) | gram (L*L) | stat (stat_size) | pool alpha (pcap)``

A one-token block flagged ``FLAG_DENSE_ROW`` (``common.py``) stores no ``fidx``: its nnz values
are those of features 0..nnz-1, zeros included (the empty ``fidx`` view tells the kernels).

A sparse chain block (``FLAG_SPARSE``) stores its transition counts as a list of pairs: its
ints end with ``tn | tcap | pairs (2 * tcap)`` and its statistic is ``M | BM | TV (tcap)`` (see
``chainsparse.py``); the ``_st_*`` dispatchers below pick the layout of each block.

Block gap estimates are kept in "numerator" units ``n * g_i`` (independent of the number of
held blocks up to the staleness every estimate has anyway).
"""
import numpy as np
from numba import njit

from .structops import labeling_len as lablen_of
from .structops import (
    HIER, MLPAIR, MULTILABEL, decode, emission_add, emission_scores, gram, labeling_loss, slack_oracle, labeling_score,
    labeling_stat, loss_const, stat_apply, stat_loss_lin, stat_score, stat_size, stat_sqnorm, truth_stat,
)
from .chain import chain_loss_norm, chain_viterbi_with_support, viterbi_support
from .common import CHAIN, FLAG_DENSE_ROW, MULTICLASS, write_dense_row
from .multiclass import mc_stat_apply2
from .chainsparse import (
    FLAG_SPARSE, FLAG_TFULL, sp_apply, sp_labeling_apply, sp_labeling_stat, sp_register, sp_score, sp_snap,
    sp_sqnorm,
)

M_IOFF, M_FOFF, M_L, M_NNZ, M_LY, M_KI, M_PCAP, M_PN, M_LABLEN, M_FLAGS, M_ISIZE, M_FSIZE = range(12)
N_META = 12
FLAG_INEXACT_ALPHA = 1   # (FLAG_SPARSE = 2, FLAG_TFULL = 4: chainsparse.py)

STEP_FW, STEP_PAIRWISE, STEP_AWAY = 0, 1, 2
SAMPLE_GIVEN, SAMPLE_UNIFORM, SAMPLE_GAP = 0, 1, 2

# counters
C_ORACLE, C_HIT, C_STEPS, C_DROP, C_AWAY, C_SANITY, C_POOLFULL, C_TFULL = range(8)
N_COUNTERS = 8

_JIT = dict(cache=True, nogil=True)


@njit(**_JIT)
def tree_update(tree, size, slot, value):
    i = size + slot
    tree[i] = value
    i //= 2
    while i >= 1:
        tree[i] = tree[2 * i] + tree[2 * i + 1]
        i //= 2


@njit(**_JIT)
def tree_sample(tree, size, r):
    node = 1
    x = r * tree[1]
    while node < size:
        left = 2 * node
        if x < tree[left]:
            node = left
        else:
            x -= tree[left]
            node = left + 1
    return node - size


@njit(**_JIT)
def sample_block(sampling, tree, tree_size, alive, n_alive):
    """A held block: proportional to the gap estimates (sum-tree) or uniform (also when every
    estimate is 0 or the tree draw lands on an empty leaf)."""
    if sampling == SAMPLE_GAP and tree[1] > 0.0:
        j = tree_sample(tree, tree_size, np.random.random())
        if j < tree_size and tree[tree_size + j] > 0.0:
            return j
    return alive[np.random.randint(n_alive)]


@njit(**_JIT)
def avg_coef(tick, avg_t0):
    """W_{s-1} = s (s - 1) / 2 for the step s = tick - avg_t0 + 1 of the averaging window
    (-1: not averaging)."""
    if avg_t0 < 0:
        return -1.0
    s_ = float(tick - avg_t0 + 1)
    return s_ * (s_ - 1.0) / 2.0


@njit(**_JIT)
def _views(meta, Iar, Far, j, Kc, kind):
    io = meta[j, M_IOFF]
    fo = meta[j, M_FOFF]
    L = meta[j, M_L]
    nnz = meta[j, M_NNZ]
    nix = _nidx(meta, j)
    ly = meta[j, M_LY]
    pcap = meta[j, M_PCAP]
    lablen = meta[j, M_LABLEN]
    tok_ptr = Iar[io:io + L + 1]
    fidx = Iar[io + L + 1:io + L + 1 + nix]   # empty for a dense row (common.py)
    ytrue = Iar[io + L + 1 + nix:io + L + 1 + nix + ly]
    p0 = io + L + 1 + nix + ly
    pool = Iar[p0:p0 + pcap * lablen]
    fval = Far[fo:fo + nnz]
    G = Far[fo + nnz:fo + nnz + L * L].reshape((L, L))
    sp, kpos = _sinfo(meta, j)
    ss = _ssize(kind, L, Kc, sp, Iar, kpos)
    s0 = fo + nnz + L * L
    st = Far[s0:s0 + ss]
    alpha = Far[s0 + ss:s0 + ss + pcap]
    return tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos


@njit(**_JIT)
def _nidx(meta, j):
    """Feature indices stored for block j: none for a dense row (``FLAG_DENSE_ROW``), else nnz."""
    return 0 if meta[j, M_FLAGS] & FLAG_DENSE_ROW else meta[j, M_NNZ]


@njit(**_JIT)
def _sinfo(meta, j):
    """(is block j a sparse chain block, offset of its pair list ``tn | tcap | pairs`` in Iar)."""
    kpos = (meta[j, M_IOFF] + meta[j, M_L] + 1 + _nidx(meta, j) + meta[j, M_LY]
            + meta[j, M_PCAP] * meta[j, M_LABLEN])
    return (meta[j, M_FLAGS] & FLAG_SPARSE) != 0, kpos


@njit(**_JIT)
def _ssize(kind, L, Kc, sp, Iar, kpos):
    """Size of block's statistic region (dense: ``stat_size``; sparse: M | BM | TV)."""
    if sp:
        return L * Kc + 2 * Kc + Iar[kpos + 1]
    return stat_size(kind, L, Kc)


@njit(**_JIT)
def _st_score(kind, sp, S, T, B, scale, st, L, K, Kc, use_trans, Iar, kpos):
    if sp:
        return sp_score(S, T, B, scale, st, L, K, Kc, use_trans, Iar, kpos)
    return stat_score(kind, S, T, B, scale, st, L, K, Kc, use_trans)


@njit(**_JIT)
def _st_sqnorm(kind, sp, G, st, L, K, Kc, use_trans, Iar, kpos):
    if sp:
        return sp_sqnorm(G, st, L, K, Kc, use_trans, Iar, kpos)
    return stat_sqnorm(kind, G, st, L, K, Kc, use_trans)


@njit(**_JIT)
def _st_apply(kind, sp, E, T, B, tok_ptr, fidx, fval, st, L, K, Kc, coef, use_trans, Iar, kpos):
    if sp:
        sp_apply(E, T, B, tok_ptr, fidx, fval, st, L, K, Kc, coef, use_trans, Iar, kpos)
    else:
        stat_apply(kind, E, T, B, tok_ptr, fidx, fval, st, L, K, Kc, coef, use_trans)


@njit(**_JIT)
def _st_lab(kind, sp, lab, L, Kc, out, coef, Iar, kpos):
    """out += coef * s(lab) (a sparse block must have the bigrams of lab registered)."""
    if sp:
        sp_labeling_stat(Iar, kpos, lab, L, Kc, out, coef)
    else:
        labeling_stat(kind, lab, L, Kc, out, coef)


@njit(**_JIT)
def _st_truth(kind, sp, ytrue, ly, L, Kc, out, coef, Iar, kpos):
    if sp:
        sp_labeling_stat(Iar, kpos, ytrue, L, Kc, out, coef)
    else:
        truth_stat(kind, ytrue, ly, L, Kc, out, coef)


@njit(**_JIT)
def _room(sp, meta, j, Iar, kpos, st, L, Kc, lab1, lab2, counters):
    """Register the bigrams of the labelings a step moves (sparse blocks); False (and the block
    flagged ``FLAG_TFULL``) when the block has no room for them: the step is skipped."""
    if not sp:
        return True
    toff = L * Kc + 2 * Kc
    if sp_register(Iar, kpos, st, toff, lab1, L) and sp_register(Iar, kpos, st, toff, lab2, L):
        return True
    meta[j, M_FLAGS] |= FLAG_TFULL
    counters[C_TFULL] += 1
    return False


@njit(**_JIT)
def _same(a, b, n):
    for q in range(n):
        if a[q] != b[q]:
            return False
    return True


@njit(**_JIT)
def slack_step(kind, j, K, Kc, use_trans, lam_n, scale, E, T, B, model, Iar, Far, meta,
               gest, last_oracle, tick, S, V, bp, ybuf, lab, dbuf, counters, avg_c, ZE, ZT, ZB, facc,
               lval, V3):
    """A Frank-Wolfe step with slack rescaling (Choi, Meshi & Srebro, "Fast and Scalable
    Structural SVM with Slack Rescaling"). H_i(y) = Delta(y) (1 - <w, psi_i(y)>) is a max of
    affine functions with feature Delta(y) psi_i(y): the block keeps the statistic of u_i
    itself, u~_i = sum_y alpha(y) Delta(y) (s(y_i) - s(y)), and L_i = sum_y alpha(y) Delta(y)
    in ``lval``; the corner comes from the exact slack oracle."""
    tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = _views(meta, Iar, Far, j, Kc, kind)
    L = meta[j, M_L]
    ly = meta[j, M_LY]
    Ki = meta[j, M_KI]
    ss = st.shape[0]
    if sp and meta[j, M_FLAGS] & FLAG_TFULL:
        return gest[j]   # waits for the store to give it room (BlockStore.grow_flagged)
    emission_scores(E, scale, tok_ptr, fidx, fval, L, K, S)
    hstar = slack_oracle(model, (E, T, B), S, scale, L, ytrue, ly, Ki, (S, V, bp, ybuf, lab, dbuf, V3), lab)
    counters[C_ORACLE] += 1
    Li = lval[j]
    gnum = hstar - (Li - _st_score(kind, sp, S, T, B, scale, st, L, K, Kc, use_trans, Iar, kpos))
    if gnum < -1e-9 * (1.0 + abs(hstar)):
        counters[C_SANITY] += 1
    gest[j] = gnum if gnum > 0.0 else 0.0
    last_oracle[j] = tick
    if gnum <= 0.0:
        return gnum
    dstar = labeling_loss(kind, lab, ytrue, ly, model[4], L, K, Ki, ybuf)
    if not _room(sp, meta, j, Iar, kpos, st, L, Kc, ytrue, lab, counters):
        return gnum
    for q in range(ss):
        dbuf[q] = -st[q]
    _st_truth(kind, sp, ytrue, ly, L, Kc, dbuf, dstar, Iar, kpos)
    _st_lab(kind, sp, lab, L, Kc, dbuf, -dstar, Iar, kpos)
    sq = _st_sqnorm(kind, sp, G, dbuf, L, K, Kc, use_trans, Iar, kpos)
    if sq <= 0.0:
        return gnum
    gamma = lam_n * gnum / sq
    if gamma > 1.0:
        gamma = 1.0
    for q in range(ss):
        st[q] += gamma * dbuf[q]
    dL = gamma * (dstar - Li)
    lval[j] = Li + dL
    _st_apply(kind, sp, E, T, B, tok_ptr, fidx, fval, dbuf, L, K, Kc, gamma, use_trans, Iar, kpos)
    facc[0] += dL
    if avg_c >= 0.0:
        _st_apply(kind, sp, ZE, ZT, ZB, tok_ptr, fidx, fval, dbuf, L, K, Kc, gamma * avg_c, use_trans, Iar, kpos)
        facc[1] += avg_c * dL
    if sp:   # u~ moved by +gamma d and U += gamma Phi(d): a count set to 0 leaves U by -v
        sp_snap(st, L, Kc, Iar, kpos, T, ZT, -1.0, -avg_c if avg_c >= 0.0 else 0.0, use_trans)
    counters[C_STEPS] += 1
    return gnum


@njit(**_JIT)
def block_step(kind, j, K, Kc, use_trans, lam_n, scale, E, T, B, model, Iar, Far, meta,
               gest, last_oracle, tick, step_type, use_cache, F, nu, g_full,
               S, V, bp, ybuf, lab, dbuf, counters, avg_c, ZE, ZT, ZB, facc, slack, lval, V3):
    """One BCFW / pairwise / away step on block j. Returns the gap numerator (n * g_j)
    measured at the corner used (exact oracle on a miss).

    Averaging (``avg_c >= 0``): the weighted average of the iterates (weights proportional to
    the iteration index s) is kept lazily through ``Z += W_{s-1} * dU`` with
    ``W_{s-1} = s (s - 1) / 2`` (``avg_c``), so that ``sum_t t U_t = W_k U_k - Z``; ``facc``
    accumulates the same for the dual loss sum: facc[0] += dL, facc[1] += W_{s-1} dL."""
    if slack:
        return slack_step(kind, j, K, Kc, use_trans, lam_n, scale, E, T, B, model, Iar, Far, meta,
                          gest, last_oracle, tick, S, V, bp, ybuf, lab, dbuf, counters, avg_c, ZE, ZT, ZB,
                          facc, lval, V3)
    tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = _views(meta, Iar, Far, j, Kc, kind)
    L = meta[j, M_L]
    ly = meta[j, M_LY]
    Ki = meta[j, M_KI]
    pcap = meta[j, M_PCAP]
    pn = meta[j, M_PN]
    lablen = meta[j, M_LABLEN]
    ss = st.shape[0]
    if sp and meta[j, M_FLAGS] & FLAG_TFULL:
        return gest[j]   # waits for the store to give it room (BlockStore.grow_flagged)
    emission_scores(E, scale, tok_ptr, fidx, fval, L, K, S)
    m_val = (loss_const(kind, ly, Ki, ytrue) + stat_loss_lin(kind, st, ytrue, ly, model[4], L, K, Kc, Ki, ybuf)
             + _st_score(kind, sp, S, T, B, scale, st, L, K, Kc, use_trans, Iar, kpos))
    # ---- corner: cache (pool) or exact oracle ----
    corner = -1  # pool index of the FW corner if it is in the pool
    hit = False
    if use_cache and pn > 0:
        best = -np.inf
        for p in range(pn):
            lp = pool[p * lablen:(p + 1) * lablen]
            v = (labeling_loss(kind, lp, ytrue, ly, model[4], L, K, Ki, ybuf)
                 + labeling_score(kind, S, T, B, scale, lp, L, K, use_trans))
            if v > best:
                best = v
                corner = p
        gh = best - m_val
        thr = F * gest[j]
        if nu * g_full > thr:
            thr = nu * g_full
        if np.isfinite(gest[j]) and gh >= thr and gh > 0.0:
            hit = True
            star_val = best
            for q in range(lablen):
                lab[q] = pool[corner * lablen + q]
            counters[C_HIT] += 1
    if not hit:
        corner = -1
        star_val = decode(model, (E, T, B), S, scale, L, ytrue, ly, 1.0, Ki, (S, V, bp, ybuf, lab, dbuf, V3), lab)
        counters[C_ORACLE] += 1
        gnum = star_val - m_val
        # sanity: the oracle can never be worse than the ground truth / current point
        if gnum < -1e-9 * (1.0 + abs(star_val)):
            counters[C_SANITY] += 1
        gest[j] = gnum if gnum > 0.0 else 0.0
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
                v = (labeling_loss(kind, lp, ytrue, ly, model[4], L, K, Ki, ybuf)
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
                v = (labeling_loss(kind, lp, ytrue, ly, model[4], L, K, Ki, ybuf)
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
        if not _room(sp, meta, j, Iar, kpos, st, L, Kc, lab, pool[a * lablen:(a + 1) * lablen] if a >= 0 else lab,
                     counters):
            return gnum
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
    sq = _st_sqnorm(kind, sp, G, dbuf, L, K, Kc, use_trans, Iar, kpos)
    if sq <= 0.0 or num <= 0.0:
        return gnum
    gamma = lam_n * num / sq
    if gamma > gmax:
        gamma = gmax
    if gamma <= 0.0:
        return gnum
    # ---- apply ----
    for q in range(ss):
        st[q] += gamma * dbuf[q]
    if kind == MULTICLASS and avg_c >= 0.0:   # E and ZE in one pass over the row, same values
        mc_stat_apply2(E, ZE, tok_ptr, fidx, fval, dbuf, K, -gamma, -gamma * avg_c)
    else:
        _st_apply(kind, sp, E, T, B, tok_ptr, fidx, fval, dbuf, L, K, Kc, -gamma, use_trans, Iar, kpos)
    dL = gamma * stat_loss_lin(kind, dbuf, ytrue, ly, model[4], L, K, Kc, Ki, ybuf)
    facc[0] += dL
    if avg_c >= 0.0:
        if kind != MULTICLASS:
            _st_apply(kind, sp, ZE, ZT, ZB, tok_ptr, fidx, fval, dbuf, L, K, Kc, -gamma * avg_c, use_trans, Iar, kpos)
        facc[1] += avg_c * dL
    if sp:   # m moved by +gamma d and U += -gamma Phi(d): a count set to 0 leaves U by +v
        sp_snap(st, L, Kc, Iar, kpos, T, ZT, 1.0, avg_c if avg_c >= 0.0 else 0.0, use_trans)
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


@njit(**_JIT)
def _run_steps(kind, K, Kc, use_trans, lam_n, scale, E, T, B, model, Iar, Far, meta,
              gest, last_oracle, tick0, step_type, use_cache, F, nu, g_full,
              sampling, slots, alive, n_alive, tree, tree_size, n_steps, seed,
              S, V, bp, ybuf, lab, dbuf, counters, avg_t0, ZE, ZT, ZB, facc, slack, lval, V3):
    """Run ``n_steps`` block steps. ``sampling``: given ``slots`` in order / uniform over
    ``alive[:n_alive]`` / proportional to the gap estimates (sum-tree)."""
    np.random.seed(seed)
    tick = tick0
    for it in range(n_steps):
        if sampling == SAMPLE_GIVEN:
            j = slots[it]
        else:
            j = sample_block(sampling, tree, tree_size, alive, n_alive)
        avg_c = avg_coef(tick, avg_t0)
        block_step(kind, j, K, Kc, use_trans, lam_n, scale, E, T, B, model, Iar, Far, meta,
                   gest, last_oracle, tick, step_type, use_cache, F, nu, g_full,
                   S, V, bp, ybuf, lab, dbuf, counters, avg_c, ZE, ZT, ZB, facc, slack, lval, V3)
        if tree_size > 0:
            tree_update(tree, tree_size, j, gest[j])
        tick += 1
    return tick


@njit(**_JIT)
def _frozen_support(kind, T, K):
    """``chain.viterbi_support`` of a chain's T (n = -1, nothing scanned, for other structures)."""
    if kind == CHAIN and T.shape[0] >= K and T.shape[1] >= K:
        return viterbi_support(T, K)
    return np.zeros(1, np.int64), np.zeros(1, np.int32), -1


@njit(**_JIT)
def _decode_frozen(model, E, T, B, S, scale, L, ytrue, ly, loss_scale, Ki, V, bp, scratch, out, ptr, idx, nsup):
    """``structops.decode`` for weights that stay fixed over a loop (a gap pass, a prediction
    batch): chains take the Viterbi with the transition support found once per loop
    (``chain.viterbi_support``) instead of once per call; same values and labelings."""
    if model[0] == CHAIN and L > 1:
        return chain_viterbi_with_support(S, T, B, scale, L, model[1], model[3], ytrue, model[4],
                                          loss_scale / chain_loss_norm(L, Ki), V, bp, out, ptr, idx, nsup)
    return decode(model, (E, T, B), S, scale, L, ytrue, ly, loss_scale, Ki, scratch, out)


@njit(**_JIT)
def _full_gap_pass(kind, K, Kc, use_trans, scale, E, T, B, model, Iar, Far, meta, alive, n_alive,
                  gest, tree, tree_size, S, V, bp, ybuf, lab, out, slack, lval, V3, dbuf):
    """Exact oracle on every held block at frozen weights.

    out[0] = sum_i max_y H_i(y; w)  (hinge terms, >= 0)
    out[1] = sum_i L_i              (dual loss terms, Delta of the block statistic)
    out[2] = sum_i n g_i            (sum of block gap numerators)
    out[3] = number of oracle calls
    Refreshes every block gap estimate.
    """
    sh = 0.0
    sl = 0.0
    sg = 0.0
    ptr, sidx, nsup = _frozen_support(kind, T, K)   # T is frozen for the whole pass
    for q in range(n_alive):
        j = alive[q]
        tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = _views(meta, Iar, Far, j, Kc, kind)
        L = meta[j, M_L]
        ly = meta[j, M_LY]
        Ki = meta[j, M_KI]
        emission_scores(E, scale, tok_ptr, fidx, fval, L, K, S)
        if slack:
            h = slack_oracle(model, (E, T, B), S, scale, L, ytrue, ly, Ki, (S, V, bp, ybuf, lab, dbuf, V3), lab)
            Li = lval[j]
            g = h - (Li - _st_score(kind, sp, S, T, B, scale, st, L, K, Kc, use_trans, Iar, kpos))
            if g < 0.0:
                g = 0.0
            gest[j] = g
            if tree_size > 0:
                tree_update(tree, tree_size, j, g)
            sh += h
            sl += Li
            sg += g
            continue
        star = _decode_frozen(model, E, T, B, S, scale, L, ytrue, ly, 1.0, Ki, V, bp, (S, V, bp, ybuf, lab, dbuf, V3),
                              lab, ptr, sidx, nsup)
        # score of the ground truth
        if kind == MLPAIR:
            for q in range(lablen_of(kind, L, Kc)):
                lab[q] = 0
            for p in range(ly):
                lab[ytrue[p]] = 1
            t_score = labeling_score(kind, S, T, B, scale, lab, L, K, use_trans)
        elif kind == MULTILABEL or kind == HIER:
            t_score = 0.0
            for p in range(ly):
                if ytrue[p] < K:
                    t_score += S[0, ytrue[p]]
        else:
            t_score = labeling_score(kind, S, T, B, scale, ytrue, L, K, use_trans)
        h = star - t_score
        if h < 0.0:
            h = 0.0  # y_true is feasible: max_y H_i >= 0 (guards round-off)
        Li = loss_const(kind, ly, Ki, ytrue) + stat_loss_lin(kind, st, ytrue, ly, model[4], L, K, Kc, Ki, ybuf)
        m_val = Li + _st_score(kind, sp, S, T, B, scale, st, L, K, Kc, use_trans, Iar, kpos)
        g = star - m_val
        if g < 0.0:
            g = 0.0
        gest[j] = g
        if tree_size > 0:
            tree_update(tree, tree_size, j, g)
        sh += h
        sl += Li
        sg += g
    out[0] = sh
    out[1] = sl
    out[2] = sg
    out[3] = n_alive


@njit(**_JIT)
def _block_u(kind, K, Kc, use_trans, E, T, B, Iar, Far, meta, j, coef, dbuf, slack=False):
    """U += coef * u_j with u_j = Phi(s(y_j) - m_j) (margin) or Phi(u~_j) (slack)."""
    tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = _views(meta, Iar, Far, j, Kc, kind)
    L = meta[j, M_L]
    ly = meta[j, M_LY]
    ss = st.shape[0]
    if slack:
        _st_apply(kind, sp, E, T, B, tok_ptr, fidx, fval, st, L, K, Kc, coef, use_trans, Iar, kpos)
        return
    for q in range(ss):
        dbuf[q] = -st[q]
    if sp:   # the truth's bigrams need not be among the block's pairs: added to T directly
        o = L * Kc
        for t in range(L):
            dbuf[t * Kc + ytrue[t]] += 1.0
        dbuf[o + ytrue[0]] += 1.0
        dbuf[o + Kc + ytrue[L - 1]] += 1.0
        if use_trans:
            sp_labeling_apply(T, ytrue, L, coef)
    else:
        truth_stat(kind, ytrue, ly, L, Kc, dbuf, 1.0)
    _st_apply(kind, sp, E, T, B, tok_ptr, fidx, fval, dbuf, L, K, Kc, coef, use_trans, Iar, kpos)


@njit(**_JIT)
def _rebuild_u(kind, K, Kc, use_trans, E, T, B, Iar, Far, meta, alive, n_alive, dbuf, slack=False):
    """Recompute U = sum_i u_i from the blocks (removes accumulated round-off)."""
    E[:, :] = 0.0
    T[:, :] = 0.0
    B[:, :] = 0.0
    for q in range(n_alive):
        _block_u(kind, K, Kc, use_trans, E, T, B, Iar, Far, meta, alive[q], 1.0, dbuf, slack)


@njit(**_JIT)
def _emission_avg(E, ZE, zc, scale, tok_ptr, fidx, fval, L, K, S):
    """S = scale * x (E - zc * ZE): scores with the lazily averaged weights."""
    emission_add(E, scale, tok_ptr, fidx, fval, L, K, S, True)
    emission_add(ZE, -zc * scale, tok_ptr, fidx, fval, L, K, S, False)


@njit(**_JIT)
def _predict_batch(kind, K, use_trans, scale, E, ZE, zc, T, B, model, ex_tok, tok_ptr, fidx, fval,
                  lab_ptr, out, scratch):
    """MAP labelings for many examples. Example e has tokens ex_tok[e]..ex_tok[e+1] of the
    global CSR (tok_ptr into fidx/fval); its labeling goes to out[lab_ptr[e]:lab_ptr[e+1]].
    Emission weights are E - zc * ZE (zc = 0: plain E)."""
    dummy = np.zeros(1, dtype=np.int32)
    S = scratch[0]
    ptr, sidx, nsup = _frozen_support(kind, T, K)   # T is frozen for the whole batch
    for e in range(ex_tok.shape[0] - 1):
        t0 = ex_tok[e]
        L = ex_tok[e + 1] - t0
        if L == 0:
            continue
        tp = tok_ptr[t0:t0 + L + 1]
        if zc != 0.0:
            _emission_avg(E, ZE, zc, scale, tp, fidx, fval, L, K, S)
        else:
            emission_scores(E, scale, tp, fidx, fval, L, K, S)
        _decode_frozen(model, E, T, B, S, scale, L, dummy, 0, 0.0, 1, scratch[1], scratch[2], scratch,
                       out[lab_ptr[e]:lab_ptr[e + 1]], ptr, sidx, nsup)


@njit(**_JIT)
def write_block(kind, Kc, Iar, Far, meta, j, tok_ptr, fidx, fval, ytrue, mark, slack=False):
    """Write one block's segment at the offsets already in meta[j]: tokens (tok_ptr relative
    to fidx/fval), ground truth, Gram matrix, the dual point on the ground truth (statistic
    s(y), pool = {y} with alpha 1 when pools are kept)."""
    io = meta[j, M_IOFF]
    fo = meta[j, M_FOFF]
    L = meta[j, M_L]
    nnz = meta[j, M_NNZ]
    ly = meta[j, M_LY]
    pcap = meta[j, M_PCAP]
    lablen = meta[j, M_LABLEN]
    base = tok_ptr[0]
    nix = _nidx(meta, j)
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
    for q in range(ly):
        Iar[io + L + 1 + nix + q] = ytrue[q]
    p0 = io + L + 1 + nix + ly
    for q in range(pcap * lablen):
        Iar[p0 + q] = 0
    G = Far[fo + nnz:fo + nnz + L * L].reshape((L, L))
    gram(Iar[io:io + L + 1], Iar[io + L + 1:io + L + 1 + nix], Far[fo:fo + nnz], L, G, mark)
    sp, kpos = _sinfo(meta, j)
    if sp:   # the pair list: empty, capacity from the segment size
        Iar[kpos] = 0
        Iar[kpos + 1] = (meta[j, M_ISIZE] - (kpos - io) - 2) // 2
    ss = _ssize(kind, L, Kc, sp, Iar, kpos)
    s0 = fo + nnz + L * L
    for q in range(ss + pcap):
        Far[s0 + q] = 0.0
    yt = Iar[io + L + 1 + nix:io + L + 1 + nix + ly]
    if not slack:  # margin: the mean statistic of alpha = e_{y_i}; slack: u~_i = 0
        if sp:
            sp_register(Iar, kpos, Far[s0:s0 + ss], L * Kc + 2 * Kc, yt, L)
        _st_truth(kind, sp, yt, ly, L, Kc, Far[s0:s0 + ss], 1.0, Iar, kpos)
    meta[j, M_PN] = 0
    if pcap > 0:
        if kind == MULTILABEL or kind == MLPAIR or kind == HIER:
            for q in range(ly):
                Iar[p0 + yt[q]] = 1
        else:
            for q in range(L):
                Iar[p0 + q] = yt[q]
        Far[s0 + ss] = 1.0
        meta[j, M_PN] = 1


@njit(**_JIT)
def insert_blocks(kind, Kc, store, slots, batch, ys, mark, slack=False):
    """Write the segments of new blocks whose offsets/sizes are already in ``meta``.
    ``store = (Iar, Far, meta)`` (the BlockStore's arenas); ``batch`` the examples as a
    ``bundles.Batch`` (example e: tokens ex_tok[e]..ex_tok[e+1] of the global CSR, truth
    ys[y_ptr[e]:y_ptr[e+1]] with ``y_ptr`` in the ``lab_ptr`` field)."""
    Iar, Far, meta = store
    ex_tok, tok_ptr, fidx, fval, y_ptr = batch
    for e in range(slots.shape[0]):
        write_block(kind, Kc, Iar, Far, meta, slots[e], tok_ptr[ex_tok[e]:ex_tok[e + 1] + 1],
                    fidx, fval, ys[y_ptr[e]:y_ptr[e + 1]], mark, slack)


@njit(**_JIT)
def _arrive(kind, K, Kc, use_trans, lam, lam_n_max, n, jn, v, replay, E, T, B, model,
            Iar, Far, meta, gest, last_oracle, tick, step_type, use_cache, F, nu, g_full,
            sampling, alive, pos, tree, tree_size, S, V, bp, ybuf, lab, dbuf, counters,
            avg_t0, ZE, ZT, ZB, facc, out, slack, lval, V3):
    """Evict v (if >= 0), append block jn, step on it, then ``replay`` sampled steps.
    Updates out[0] (held blocks), out[1] (evictions), out[2] (averaging origin, -1 = off);
    returns the new tick."""
    if v >= 0:
        _block_u(kind, K, Kc, use_trans, E, T, B, Iar, Far, meta, v, -1.0, dbuf, slack)
        p = pos[v]
        last = alive[n - 1]
        alive[p] = last
        pos[last] = p
        pos[v] = -1
        n -= 1
        gest[v] = 0.0
        if tree_size > 0:
            tree_update(tree, tree_size, v, 0.0)
        avg_t0 = -1
        out[1] += 1
    alive[n] = jn
    pos[jn] = n
    n += 1
    lam_n = min(lam * n, lam_n_max)
    scale = 1.0 / lam_n
    for r in range(replay + 1):
        j = jn if r == 0 else sample_block(sampling, tree, tree_size, alive, n)
        avg_c = avg_coef(tick, avg_t0)
        block_step(kind, j, K, Kc, use_trans, lam_n, scale, E, T, B, model, Iar, Far, meta,
                   gest, last_oracle, tick, step_type, use_cache, F, nu, g_full,
                   S, V, bp, ybuf, lab, dbuf, counters, avg_c, ZE, ZT, ZB, facc, slack, lval, V3)
        if tree_size > 0:
            tree_update(tree, tree_size, j, gest[j])
        tick += 1
    out[0] = n
    out[2] = avg_t0
    return tick


@njit(**_JIT)
def _learn_new_blocks(kind, K, Kc, use_trans, lam, lam_n_max, n0, new_slots, victims, replay, E, T, B, model,
                     Iar, Far, meta, gest, last_oracle, tick0, step_type, use_cache, F, nu, g_full,
                     sampling, alive, pos, tree, tree_size, seed,
                     S, V, bp, ybuf, lab, dbuf, counters, avg_t0, ZE, ZT, ZB, facc, out, slack, lval, V3):
    """The online loop for m new blocks whose segments are already written (slots
    ``new_slots``, not yet in ``alive``): for each, in order, evict ``victims[e]`` if >= 0
    (its u_i leaves the weights; averaging stops until the caller restarts it), append the new
    block (n changes), one step on it, then ``replay`` steps on blocks sampled among the held
    ones. out = [held blocks, evictions, averaging origin]."""
    np.random.seed(seed)
    tick = tick0
    out[0] = n0
    out[1] = 0
    out[2] = avg_t0
    for e in range(new_slots.shape[0]):
        tick = _arrive(kind, K, Kc, use_trans, lam, lam_n_max, out[0], new_slots[e], victims[e], replay, E, T, B, model,
                       Iar, Far, meta, gest, last_oracle, tick, step_type, use_cache, F, nu, g_full,
                       sampling, alive, pos, tree, tree_size, S, V, bp, ybuf, lab, dbuf, counters,
                       out[2], ZE, ZT, ZB, facc, out, slack, lval, V3)
    return tick


@njit(**_JIT)
def _learn_one_example(kind, K, Kc, use_trans, lam, lam_n_max, n0, slot, victim, replay, E, T, B, model,
                      Iar, Far, meta, gest, last_oracle, tick0, step_type, use_cache, F, nu, g_full,
                      sampling, alive, pos, tree, tree_size, seed,
                      S, V, bp, ybuf, lab, dbuf, counters, avg_t0, ZE, ZT, ZB, facc, out,
                      tok_ptr, fidx, fval, ytrue, mark, slack, lval, V3):
    """``write_block`` + ``_arrive`` for one example in a single call (the learn_one path)."""
    write_block(kind, Kc, Iar, Far, meta, slot, tok_ptr, fidx, fval, ytrue, mark, slack)
    lval[slot] = 0.0
    np.random.seed(seed)
    out[1] = 0
    return _arrive(kind, K, Kc, use_trans, lam, lam_n_max, n0, slot, victim, replay, E, T, B, model,
                   Iar, Far, meta, gest, last_oracle, tick0, step_type, use_cache, F, nu, g_full,
                   sampling, alive, pos, tree, tree_size, S, V, bp, ybuf, lab, dbuf, counters,
                   avg_t0, ZE, ZT, ZB, facc, out, slack, lval, V3)


# ---------------------------------------------------------------------------------------------
# Entry points: the state travels as the bundles of ``streamssvm._kernels.bundles`` (plain
# tuples, unpacked here in the field order declared there).

@njit(**_JIT)
def run_steps(model, w, arena, scratch, avg, cfg, sampling, slots, n_steps, tick0, seed, counters):
    """Run ``n_steps`` block steps (``sampling``: SAMPLE_GIVEN takes ``slots`` in order);
    returns the new tick."""
    kind, K, Kc, use_trans, _, _ = model
    E, T, B = w
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size = arena
    S, V, bp, ybuf, lab, dbuf, V3 = scratch
    avg_t0, ZE, ZT, ZB, facc = avg
    lam, step_type, use_cache, F, nu, g_full, _sampling, _replay, slack, lam_n_max = cfg
    lam_n = min(lam * n, lam_n_max)
    scale = 1.0 / lam_n
    return _run_steps(kind, K, Kc, use_trans, lam_n, scale, E, T, B, model, Iar, Far, meta,
                      gest, last_oracle, tick0, step_type, use_cache, F, nu, g_full,
                      sampling, slots, alive, n, tree, tree_size, n_steps, seed,
                      S, V, bp, ybuf, lab, dbuf, counters, avg_t0, ZE, ZT, ZB, facc, slack, lval, V3)


@njit(**_JIT)
def learn_new_blocks(model, w, arena, scratch, avg, cfg, new_slots, victims, tick0, seed, counters, out):
    """The online loop over new blocks already written (see ``_learn_new_blocks``)."""
    kind, K, Kc, use_trans, _, _ = model
    E, T, B = w
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size = arena
    S, V, bp, ybuf, lab, dbuf, V3 = scratch
    avg_t0, ZE, ZT, ZB, facc = avg
    lam, step_type, use_cache, F, nu, g_full, sampling, replay, slack, lam_n_max = cfg
    return _learn_new_blocks(kind, K, Kc, use_trans, lam, lam_n_max, n, new_slots, victims, replay, E, T, B, model,
                             Iar, Far, meta, gest, last_oracle, tick0, step_type, use_cache, F, nu, g_full,
                             sampling, alive, pos, tree, tree_size, seed,
                             S, V, bp, ybuf, lab, dbuf, counters, avg_t0, ZE, ZT, ZB, facc, out, slack, lval, V3)


@njit(**_JIT)
def learn_one_example(model, w, arena, scratch, avg, cfg, example, slot, victim, tick0, seed, counters, out):
    """Write one example's block into ``slot`` and learn it (see ``_learn_one_example``)."""
    kind, K, Kc, use_trans, _, _ = model
    E, T, B = w
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size = arena
    S, V, bp, ybuf, lab, dbuf, V3 = scratch
    avg_t0, ZE, ZT, ZB, facc = avg
    lam, step_type, use_cache, F, nu, g_full, sampling, replay, slack, lam_n_max = cfg
    tok_ptr, fidx, fval, ytrue, mark = example
    return _learn_one_example(kind, K, Kc, use_trans, lam, lam_n_max, n, slot, victim, replay, E, T, B, model,
                              Iar, Far, meta, gest, last_oracle, tick0, step_type, use_cache, F, nu, g_full,
                              sampling, alive, pos, tree, tree_size, seed,
                              S, V, bp, ybuf, lab, dbuf, counters, avg_t0, ZE, ZT, ZB, facc, out,
                              tok_ptr, fidx, fval, ytrue, mark, slack, lval, V3)


@njit(**_JIT)
def full_gap_pass(model, w, arena, scratch, scale, slack, out):
    """Exact oracle on every held block at weights ``scale * w`` (see ``_full_gap_pass``); an
    arena with ``tree_size`` 0 leaves the sum-tree alone."""
    kind, K, Kc, use_trans, _, _ = model
    E, T, B = w
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size = arena
    S, V, bp, ybuf, lab, dbuf, V3 = scratch
    _full_gap_pass(kind, K, Kc, use_trans, scale, E, T, B, model, Iar, Far, meta, alive, n,
                   gest, tree, tree_size, S, V, bp, ybuf, lab, out, slack, lval, V3, dbuf)


@njit(**_JIT)
def block_u(model, w, arena, j, coef, dbuf, slack):
    """w += coef * (the contribution of block ``j``)."""
    kind, K, Kc, use_trans, _, _ = model
    E, T, B = w
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size = arena
    _block_u(kind, K, Kc, use_trans, E, T, B, Iar, Far, meta, j, coef, dbuf, slack)


@njit(**_JIT)
def rebuild_u(model, w, arena, dbuf, slack):
    """w = the sum of the held blocks' contributions."""
    kind, K, Kc, use_trans, _, _ = model
    E, T, B = w
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size = arena
    _rebuild_u(kind, K, Kc, use_trans, E, T, B, Iar, Far, meta, alive, n, dbuf, slack)


@njit(**_JIT)
def predict_batch(model, w, scale, ZE, zc, batch, out, scratch):
    """MAP labelings of a batch at weights ``scale * (E - zc * ZE, T, B)``."""
    kind, K, Kc, use_trans, _, _ = model
    E, T, B = w
    ex_tok, tok_ptr, fidx, fval, lab_ptr = batch
    _predict_batch(kind, K, use_trans, scale, E, ZE, zc, T, B, model, ex_tok, tok_ptr, fidx, fval,
                   lab_ptr, out, scratch)
