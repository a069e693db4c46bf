"""Chain block statistics with sparse transition counts (numba).

A chain block's dual point is a convex combination of labelings, kept as its mean statistic
(``structops``): unary marginals ``M`` (L x Kc), transition counts ``TM`` (Kc x Kc) and start /
end indicators ``BM`` (2 x Kc). ``TM`` is a combination of the bigram counts of the labelings
the block has touched, so it has at most (L - 1) non-zeros per labeling -- storing it densely
costs Kc^2 floats per block (1.8 MB per sentence with Brown's 472 tags). A *sparse* chain block
(``FLAG_SPARSE`` in its meta row) keeps instead:

* floats (the statistic region): ``MV (ecap) | TV (tcap)``: no ``BM``, whose rows equal M's
  first and last rows bit for bit (every step moves them by the same operations), so the
  functions here read those rows instead (files written with ``M | BM | TV`` convert on load,
  ``blocks._drop_sparse_bm``);
* ints (after the pool): ``tn | tcap | (a_0, b_0) ... (a_{tcap-1}, b_{tcap-1}) | en | ecap |
  tptr (L + 1) | etag (ecap)``: the ``tn`` transition pairs in use, ``TV[q]`` the count of the
  pair (a_q, b_q), then M as per-token *entries*: token t's are ``etag[tptr[t]:tptr[t + 1]]``
  (global tag ids, ascending) with values ``MV[tptr[t]:tptr[t + 1]]``, ``en = tptr[L]`` in use.
  A block's rows mix the few labelings it touched (1.5 tags per token on Brown), so M is a few
  entries per token where the dense M had Kc (0.5% non-zero). Pairs are distinct, so
  ``tn <= K^2``; neither the pairs nor the entries depend on the label capacity (nothing to
  relayout when it grows).

A token's entries are kept ascending, so every sum over M visits its non-zeros in the order the
dense layout's loops over k = 0..K-1 did (its other terms are zeros, and a sum that starts at +0.0
is not changed by +-0 terms): the same values, bit for bit. A tag new to a token is inserted at
its place (value 0), the entries after it (and those of the averaging accumulator, laid out as
the statistic) moved right; entries at 0 are dropped when a block runs out of entries
(``sp_reclaim``) or is rewritten.

Every function here is the sparse twin of the dense one in ``structops`` (same value, other
layout). A block step first *registers* the tags and bigrams of the labelings it moves (value 0, so the
statistic does not change) and then works on vectors aligned with the block's room and pairs:
the direction ``d`` has the same layout. A block out of entries is moved, in the kernel, to a
larger segment (``sp_move_grown``); when it has no room for a step's new pairs, or no move is
possible, the step is skipped and the block flagged (``FLAG_TFULL``); the store then moves it to a
larger segment (``BlockStore.grow_flagged``).

Counts that cancel to round-off (|v| < ``SNAP``, e.g. after a pairwise step drops an atom) are
set to exactly 0 and the weights corrected by the same amount, so w = sum_i u_i still holds;
pairs at 0 are dropped when the store compacts.
"""
import numpy as np
from numba import njit

from .chain import chain_loss_norm
from .common import _INNER, _JIT, stat_emission_apply, stat_emission_sqnorm
from .layout import (  # noqa: F401 (FLAG_SPARSE, FLAG_TFULL: the block flags, declared in layout.py)
    ENTRY_SLACK, FLAG_AVG, FLAG_SPARSE, FLAG_TFULL, M_FLAGS, M_FOFF, M_FSIZE, M_IOFF, M_ISIZE, M_NNZ, M_PCAP,
    entries_pos, gram_len,
)

#: transition counts below this (in absolute value) after a step are round-off: set to 0
SNAP = 1e-13


@njit(**_INNER)
def sp_find(Iar, kpos, a, b):
    """Index of the pair (a, b) among the block's pairs, -1 if absent."""
    tn = Iar[kpos]
    for q in range(tn):
        if Iar[kpos + 2 + 2 * q] == a and Iar[kpos + 3 + 2 * q] == b:
            return q
    return -1


@njit(**_INNER)
def sp_entries(Iar, kpos, L):
    """(tptr (L + 1), etag (ecap), ecap as int64) of the block's M entries: views of Iar."""
    e = entries_pos(Iar, kpos)
    ecap = np.int64(Iar[e + 1])
    return Iar[e + 2:e + 3 + L], Iar[e + 3 + L:e + 3 + L + ecap], ecap


@njit(**_INNER)
def sp_find_entry(tptr, etag, t, k):
    """Index of token t's entry of tag k, -1 if absent (a token's tags are ascending)."""
    for e in range(tptr[t], tptr[t + 1]):
        if etag[e] >= k:
            return e if etag[e] == k else -1
    return -1


@njit(**_INNER)
def sp_support(st, tptr, etag, L):
    """The row support (``common.row_support``) of M: its non-zero entries, token by token."""
    ptr = np.empty(L + 1, np.int64)
    pos = np.empty(tptr[L] + 1, np.int64)
    tag = np.empty(tptr[L] + 1, np.int32)
    q = 0
    ptr[0] = 0
    for t in range(L):
        for e in range(tptr[t], tptr[t + 1]):
            pos[q] = e
            tag[q] = etag[e]
            q += st[e] != 0.0
        ptr[t + 1] = q
    return ptr, pos, tag


@njit(**_INNER)
def _register_entries(Iar, kpos, st, zm, lab, L):
    """Insert lab[t] among token t's entries where missing (value 0 in ``st`` and ``zm``, at its
    ascending place), in one backward pass. False (nothing changed) when the entries are short."""
    tptr, etag, ecap = sp_entries(Iar, kpos, L)
    miss = 0
    for t in range(L):
        miss += sp_find_entry(tptr, etag, t, lab[t]) < 0
    if miss == 0:
        return True
    en = tptr[L]
    if en + miss > ecap:
        return False
    acc = zm.shape[0] > 0
    w = en + miss
    for t in range(L - 1, -1, -1):
        a, b = tptr[t], tptr[t + 1]
        k = lab[t]
        ins = sp_find_entry(tptr, etag, t, k) < 0
        tptr[t + 1] = w
        for e in range(b - 1, a - 1, -1):
            if ins and etag[e] < k:
                w -= 1
                etag[w] = k
                st[w] = 0.0
                if acc:
                    zm[w] = 0.0
                ins = False
            w -= 1
            etag[w] = etag[e]
            st[w] = st[e]
            if acc:
                zm[w] = zm[e]
        if ins:
            w -= 1
            etag[w] = k
            st[w] = 0.0
            if acc:
                zm[w] = 0.0
    Iar[entries_pos(Iar, kpos)] = en + miss
    return True


@njit(**_INNER)
def sp_register(Iar, kpos, st, zm, lab, L):
    """Add the entries (token t, tag lab[t]) and the bigrams of ``lab`` missing from the block's
    M entries and pairs (with value 0: the statistic is unchanged; ``zm`` the block's averaging
    accumulator, laid out as ``st``, or empty). Returns False when the block has no room left
    (the entries and pairs added so far stay)."""
    if not _register_entries(Iar, kpos, st, zm, lab, L):
        return False
    tcap = Iar[kpos + 1]
    toff = Iar[entries_pos(Iar, kpos) + 1]
    for t in range(1, L):
        a = lab[t - 1]
        b = lab[t]
        if sp_find(Iar, kpos, a, b) >= 0:
            continue
        tn = Iar[kpos]
        if tn >= tcap:
            return False
        Iar[kpos + 2 + 2 * tn] = a
        Iar[kpos + 3 + 2 * tn] = b
        st[toff + tn] = 0.0
        Iar[kpos] = tn + 1
    return True


@njit(**_INNER)
def sp_reclaim(Iar, kpos, st, zm, L, y, a, b):
    """Drop the M entries at 0 in the statistic and in its averaging accumulator ``zm`` (or
    empty) whose tag is not that of the labelings y, a, b at their token (the truth and the
    labelings a step moves, whose entries may be registered at 0), the entries kept moved left in
    order (the tags stay ascending: no sum changes). Returns the number of entries dropped."""
    tptr, etag, ecap = sp_entries(Iar, kpos, L)
    acc = zm.shape[0] > 0
    en = tptr[L]
    w = 0
    for t in range(L):
        e0, e1 = tptr[t], tptr[t + 1]
        tptr[t] = w
        for e in range(e0, e1):
            k = etag[e]
            if (st[e] == 0.0 and not (acc and zm[e] != 0.0)
                    and k != y[t] and k != a[t] and k != b[t]):
                continue
            etag[w] = k
            st[w] = st[e]
            if acc:
                zm[w] = zm[e]
            w += 1
    tptr[L] = w
    for e in range(w, en):
        st[e] = 0.0
        if acc:
            zm[e] = 0.0
    Iar[entries_pos(Iar, kpos)] = w
    return en - w


@njit(**_INNER)
def sp_missing(Iar, kpos, a, b, L):
    """How many M entries of the labelings a and b (L tags each) the block lacks."""
    tptr, etag, ecap = sp_entries(Iar, kpos, L)
    n = 0
    for t in range(L):
        n += sp_find_entry(tptr, etag, t, a[t]) < 0
        if b[t] != a[t]:
            n += sp_find_entry(tptr, etag, t, b[t]) < 0
    return n


@njit(**_INNER)
def _widen_entries(Far, src, dst, ecap, ecap2, tcap):
    """Copy a statistic ``MV (ecap) | TV (tcap)`` at Far[src:] to Far[dst:] as ``MV (ecap2) | TV``."""
    for e in range(ecap):
        Far[dst + e] = Far[src + e]
    for e in range(ecap, ecap2):
        Far[dst + e] = 0.0
    for q in range(tcap):
        Far[dst + ecap2 + q] = Far[src + ecap + q]


@njit(**_INNER)
def sp_move_grown(arena, j, kpos, L, ecap2):
    """Move sparse block j to the arenas' move region (the Arena's ``moves``) with room for
    ecap2 >= its ecap M entries, its values unchanged; its old segment is garbage. False (nothing
    moved) when the region is short: the step then waits for the store (``FLAG_TFULL``)."""
    Iar, Far, meta, mv = arena[0], arena[1], arena[2], arena[14]
    io, fo, isz, fsz = meta[j, M_IOFF], meta[j, M_FOFF], meta[j, M_ISIZE], meta[j, M_FSIZE]
    ep = entries_pos(Iar, kpos)
    ecap = np.int64(Iar[ep + 1])
    tcap = Iar[kpos + 1]
    avg = meta[j, M_FLAGS] & FLAG_AVG
    ss, ss2 = ecap + tcap, ecap2 + tcap
    isz2 = isz + ecap2 - ecap
    fsz2 = fsz + (ss2 - ss) * (2 if avg else 1)
    ni, nf = mv[0], mv[2]
    if ni + isz2 > mv[1] or nf + fsz2 > mv[3]:
        return False
    for q in range(isz):   # ints: the entries' tags end the segment, ecap2 - ecap more slots after them
        Iar[ni + q] = Iar[io + q]
    for q in range(isz, isz2):
        Iar[ni + q] = 0
    Iar[ni + ep + 1 - io] = ecap2
    h = meta[j, M_NNZ] + gram_len(meta, j)   # values and Gram matrix
    for q in range(h):
        Far[nf + q] = Far[fo + q]
    _widen_entries(Far, fo + h, nf + h, ecap, ecap2, tcap)
    pc = meta[j, M_PCAP]
    for q in range(pc):   # the pool's alpha
        Far[nf + h + ss2 + q] = Far[fo + h + ss + q]
    if avg:   # the averaging accumulator zm | zl, laid out as the statistic
        _widen_entries(Far, fo + h + ss + pc, nf + h + ss2 + pc, ecap, ecap2, tcap)
        Far[nf + h + 2 * ss2 + pc] = Far[fo + h + 2 * ss + pc]
    meta[j, M_IOFF], meta[j, M_FOFF], meta[j, M_ISIZE], meta[j, M_FSIZE] = ni, nf, isz2, fsz2
    mv[0] += isz2
    mv[2] += fsz2
    mv[4] += isz2 - isz
    mv[5] += fsz2 - fsz
    return True


@njit(**_INNER)
def sp_emission_stat(Iar, kpos, lab, L, out, coef):
    """The emission part of ``out += coef * s(lab)`` in the sparse layout (the entries of lab must
    be registered)."""
    tptr, etag, ecap = sp_entries(Iar, kpos, L)
    for t in range(L):
        e = sp_find_entry(tptr, etag, t, lab[t])
        if e < 0:
            raise AssertionError("sparse chain statistic: a tag was not registered")
        out[e] += coef


@njit(**_INNER)
def sp_labeling_stat(Iar, kpos, lab, L, out, coef):
    """out += coef * s(lab) in the sparse layout (the tags and bigrams of lab must be registered)."""
    sp_emission_stat(Iar, kpos, lab, L, out, coef)
    toff = Iar[entries_pos(Iar, kpos) + 1]
    for t in range(1, L):
        q = sp_find(Iar, kpos, lab[t - 1], lab[t])
        if q < 0:
            raise AssertionError("sparse chain statistic: a bigram was not registered")
        out[toff + q] += coef


_BIG_TAG = 1 << 30


@njit(**_INNER)
def _bm_step(tptr, etag, st, L, i, j):
    """One step of the merge of token 0's and token L-1's entries (ascending tags: the BM rows):
    (tag k, token 0's value a, token L-1's value b (0.0 for a missing side), next i, next j). With
    L = 1 both sides are the same list, each entry once per side."""
    ki = etag[i] if i < tptr[1] else _BIG_TAG
    kj = etag[j] if j < tptr[L] else _BIG_TAG
    k = min(ki, kj)
    a = 0.0
    b = 0.0
    if ki == k:
        a = st[i]
        i += 1
    if kj == k:
        b = st[j]
        j += 1
    return k, a, b, i, j


@njit(**_INNER)
def sp_score(S, T, B, scale, st, L, K, Kc, use_trans, Iar, kpos):
    """<w, Phi_x(st)> (``structops.stat_score`` for the sparse layout: a token's entries,
    ascending, are the non-zero terms of its loops over k, in their order)."""
    tptr, etag, ecap = sp_entries(Iar, kpos, L)
    v = 0.0
    for t in range(L):
        for e in range(tptr[t], tptr[t + 1]):
            v += S[t, etag[e]] * st[e]
    if use_trans:
        acc = 0.0
        i, j = np.int64(tptr[0]), np.int64(tptr[L - 1])   # BM: the first and last rows of M (int64: one _bm_step)
        while i < tptr[1] or j < tptr[L]:
            k, a, b, i, j = _bm_step(tptr, etag, st, L, i, j)
            acc += B[0, k] * a + B[1, k] * b
        for q in range(Iar[kpos]):
            acc += T[Iar[kpos + 2 + 2 * q], Iar[kpos + 3 + 2 * q]] * st[ecap + q]
        v += scale * acc
    return v


@njit(**_INNER)
def sp_loss_lin(st, ytrue, C, L, Ki, Iar, kpos):
    """The linear part of the dual loss, ``structops.stat_loss_lin`` for the sparse layout."""
    tptr, etag, ecap = sp_entries(Iar, kpos, L)
    v = 0.0
    for t in range(L):
        c = ytrue[t]
        for e in range(tptr[t], tptr[t + 1]):
            v += C[c, etag[e]] * st[e]
    return v / chain_loss_norm(L, Ki)


@njit(**_INNER)
def sp_emission_support(Iar, kpos, st, L):
    """The row support of the block's M (``sp_support``) from the arena."""
    tptr, etag, ecap = sp_entries(Iar, kpos, L)
    return sp_support(st, tptr, etag, L)


@njit(**_INNER)
def sp_sqnorm(G, st, L, K, Kc, use_trans, Iar, kpos):
    """||Phi_x(st)||^2 (``structops.stat_sqnorm`` for the sparse layout; the pairs are distinct)."""
    v = stat_emission_sqnorm(G, st, L, sp_emission_support(Iar, kpos, st, L))
    return sp_trans_sqnorm(v, st, L, K, Kc, use_trans, Iar, kpos)


@njit(**_INNER)
def sp_trans_sqnorm(v, st, L, K, Kc, use_trans, Iar, kpos):
    """v + the transition part of ||Phi_x(st)||^2 in the sparse layout (v: the emission part)."""
    if use_trans:
        tptr, etag, ecap = sp_entries(Iar, kpos, L)
        i, j = np.int64(tptr[0]), np.int64(tptr[L - 1])   # BM: the first and last rows of M (int64: one _bm_step)
        while i < tptr[1] or j < tptr[L]:
            k, a, b, i, j = _bm_step(tptr, etag, st, L, i, j)
            v += a * a + b * b
        for q in range(Iar[kpos]):
            x = st[ecap + q]
            v += x * x
    return v


@njit(**_INNER)
def sp_apply(w, x, st, L, K, Kc, coef, use_trans, Iar, kpos):
    """U += coef * Phi_x(st) (``structops.stat_apply`` for the sparse layout; ``w = (E, T, B)``,
    ``x = (tok_ptr, fidx, fval)``)."""
    E, T, B = w
    tptr, etag, ecap = sp_entries(Iar, kpos, L)
    stat_emission_apply(E, x[0], x[1], x[2], st, L, sp_support(st, tptr, etag, L), coef)
    if use_trans:
        i, j = np.int64(tptr[0]), np.int64(tptr[L - 1])   # BM: the first and last rows of M (int64: one _bm_step)
        while i < tptr[1] or j < tptr[L]:
            k, a, b, i, j = _bm_step(tptr, etag, st, L, i, j)
            B[0, k] += coef * a
            B[1, k] += coef * b
        for q in range(Iar[kpos]):
            T[Iar[kpos + 2 + 2 * q], Iar[kpos + 3 + 2 * q]] += coef * st[ecap + q]


@njit(**_INNER)
def sp_labeling_apply(T, lab, L, coef):
    """T += coef * (the bigram counts of lab) (the transition part of Phi(s(lab)))."""
    for t in range(1, L):
        T[lab[t - 1], lab[t]] += coef


@njit(**_INNER)
def sp_snap(st, L, Kc, Iar, kpos, T, ZT, cu, cz, use_trans):
    """Set transition counts within round-off of 0 (|v| < SNAP) to exactly 0, and keep the
    weights equal to the sum of the blocks: T += cu * v, ZT += cz * v (cz = 0: no averaging)."""
    toff = Iar[entries_pos(Iar, kpos) + 1]
    for q in range(Iar[kpos]):
        v = st[toff + q]
        if v != 0.0 and abs(v) < SNAP:
            st[toff + q] = 0.0
            if use_trans:
                a = Iar[kpos + 2 + 2 * q]
                b = Iar[kpos + 3 + 2 * q]
                T[a, b] += cu * v
                if cz != 0.0:
                    ZT[a, b] += cz * v


from .common import guard_inner as _guard_inner  # noqa: E402 (last: it sees every kernel above)

_guard_inner(globals())   # a Python call of an _INNER kernel raises (common.InnerKernel)
