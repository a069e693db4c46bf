"""Chain block statistics with sparse transition counts (numba).

A chain block's dual point is a convex combination of labelings, kept as its mean statistic
(``structops``): unary marginals ``M`` (L x Kc), transition counts ``TM`` (Kc x Kc) and start /
end indicators ``BM`` (2 x Kc). ``TM`` is a combination of the bigram counts of the labelings
the block has touched, so it has at most (L - 1) non-zeros per labeling -- storing it densely
costs Kc^2 floats per block (1.8 MB per sentence with Brown's 472 tags). A *sparse* chain block
(``FLAG_SPARSE`` in its meta row) keeps instead:

* floats (the statistic region): ``M (L * rcap) | TV (tcap)``: no ``BM``, whose rows equal M's
  first and last rows bit for bit (every step moves them by the same operations), so the
  functions here read those rows instead (files written with ``M | BM | TV`` convert on load,
  ``blocks._drop_sparse_bm``);
* ints (after the pool): ``tn | tcap | (a_0, b_0) ... (a_{tcap-1}, b_{tcap-1}) | rn | rcap |
  tags (rcap)``: the ``tn`` transition pairs in use, ``TV[q]`` the count of the pair (a_q, b_q),
  then the block's *tag room*: M holds only the columns of the ``rn`` tags its labelings used,
  ``tags[:rn]`` ascending (global tag ids), row t of M being ``M[t * rcap:t * rcap + rn]``. A
  block's rows mix the few labelings it touched (1.5 tags per token on Brown, at most a dozen per
  sentence), so the room is a few columns where the dense M had Kc (0.5% non-zero). Pairs are
  distinct, so ``tn <= K^2``; neither the pairs nor the room depend on the label capacity
  (nothing to relayout when it grows).

The room's tags are kept ascending, so every sum over M visits its non-zeros in the order the
dense layout's loops over k = 0..K-1 did (its other terms are zeros): the same values, bit for
bit. A tag new to the block is inserted at its place, M's columns after it (and those of the
averaging accumulator) moved one to the right; a compaction may drop the columns at 0.

Every function here is the sparse twin of the dense one in ``structops`` (same value, other
layout). A block step first *registers* the tags and bigrams of the labelings it moves (value 0, so the
statistic does not change) and then works on vectors aligned with the block's room and pairs:
the direction ``d`` has the same layout. When a block has no room for a step's new tags or
pairs, the step is skipped and the block flagged (``FLAG_TFULL``); the store then moves it to a
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
    FLAG_AVG, FLAG_SPARSE, FLAG_TFULL, M_FLAGS, M_FOFF, M_FSIZE, M_IOFF, M_ISIZE, M_NNZ, M_PCAP, ROOM_SLACK, gram_len,
    room_pos,
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
def sp_room(Iar, kpos):
    """(offset in Iar of the block's room tags, tags in use rn, room capacity rcap: M's row width),
    as int64 (int32 entries of Iar would give the helpers they go to a second signature once a
    count is incremented: each distinct argument type tuple compiles again)."""
    r = room_pos(Iar, kpos)
    return r + 2, np.int64(Iar[r]), np.int64(Iar[r + 1])


@njit(**_INNER)
def sp_col(Iar, rp, rn, k):
    """M's column of tag k in the room (tags at Iar[rp:rp + rn], ascending), -1 if absent."""
    for r in range(rn):
        if Iar[rp + r] == k:
            return r
    return -1


@njit(**_INNER)
def _insert_col(M, L, R, rn, c):
    """Open column c of an (L x R) M with rn columns in use: columns c..rn-1 move one to the
    right, column c is set to 0 (nothing for an empty M)."""
    if M.shape[0] > 0:
        for t in range(L):
            b = t * R
            for r in range(rn, c, -1):
                M[b + r] = M[b + r - 1]
            M[b + c] = 0.0


@njit(**_INNER)
def sp_register(Iar, kpos, st, zm, lab, L):
    """Add the tags and the bigrams of ``lab`` missing from the block's room and pairs (with value
    0: the statistic is unchanged; ``zm`` the block's averaging accumulator, laid out as ``st``,
    or empty). Returns False when the block has no room left (tags and pairs added so far stay)."""
    rp, rn, R = sp_room(Iar, kpos)
    for t in range(L):
        k = lab[t]
        if sp_col(Iar, rp, rn, k) >= 0:
            continue
        if rn >= R:
            return False
        c = rn   # the tag's ascending place
        while c > 0 and Iar[rp + c - 1] > k:
            Iar[rp + c] = Iar[rp + c - 1]
            c -= 1
        Iar[rp + c] = k
        _insert_col(st, L, R, rn, c)
        _insert_col(zm, L, R, rn, c)
        rn += 1
        Iar[rp - 2] = rn
    tcap = Iar[kpos + 1]
    toff = L * R
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
def _uses(lab, L, k):
    """Whether labeling lab (L tags) uses tag k."""
    for t in range(L):
        if lab[t] == k:
            return True
    return False


@njit(**_INNER)
def sp_reclaim(Iar, kpos, st, zm, L, y, a, b):
    """Drop from the room the tags whose column is 0 in the statistic and in its averaging
    accumulator ``zm`` (or empty) and that none of the labelings y, a, b uses (the truth and
    the labelings a step moves, whose tags may be registered at 0), the columns kept moved left
    in order (the tags stay ascending: no sum changes). Returns the number of tags dropped."""
    rp, rn, R = sp_room(Iar, kpos)
    w = 0
    for r in range(rn):
        k = Iar[rp + r]
        zero = True
        for t in range(L):
            if st[t * R + r] != 0.0 or (zm.shape[0] > 0 and zm[t * R + r] != 0.0):
                zero = False
                break
        if zero and not (_uses(y, L, k) or _uses(a, L, k) or _uses(b, L, k)):
            continue
        if w != r:
            Iar[rp + w] = k
            for t in range(L):
                st[t * R + w] = st[t * R + r]
                if zm.shape[0] > 0:
                    zm[t * R + w] = zm[t * R + r]
        w += 1
    for t in range(L):
        for r in range(w, rn):
            st[t * R + r] = 0.0
            if zm.shape[0] > 0:
                zm[t * R + r] = 0.0
    Iar[rp - 2] = w
    return rn - w


@njit(**_INNER)
def sp_missing(Iar, kpos, a, b, L):
    """How many distinct tags of the labelings a and b (L tags each) the block's room lacks."""
    rp, rn, R = sp_room(Iar, kpos)
    n = 0
    for q in range(2 * L):
        k = a[q] if q < L else b[q - L]
        if sp_col(Iar, rp, rn, k) >= 0:
            continue
        first = True
        for p in range(q):
            if (a[p] if p < L else b[p - L]) == k:
                first = False
                break
        n += first
    return n


@njit(**_INNER)
def _widen_room(Far, src, dst, L, R, R2, tcap):
    """Copy a statistic ``M (L x R) | TV (tcap)`` at Far[src:] to Far[dst:] as ``M (L x R2) | TV``."""
    for t in range(L):
        for r in range(R):
            Far[dst + t * R2 + r] = Far[src + t * R + r]
        for r in range(R, R2):
            Far[dst + t * R2 + r] = 0.0
    for q in range(tcap):
        Far[dst + L * R2 + q] = Far[src + L * R + q]


@njit(**_INNER)
def sp_move_grown(arena, j, kpos, L, R2):
    """Move sparse block j to the arenas' move region (the Arena's ``moves``) with a tag room of
    R2 >= its rcap columns, its values unchanged; its old segment is garbage. False (nothing
    moved) when the region is short: the step then waits for the store (``FLAG_TFULL``)."""
    Iar, Far, meta, mv = arena[0], arena[1], arena[2], arena[14]
    io, fo, isz, fsz = meta[j, M_IOFF], meta[j, M_FOFF], meta[j, M_ISIZE], meta[j, M_FSIZE]
    rp, rn, R = sp_room(Iar, kpos)
    tcap = Iar[kpos + 1]
    avg = meta[j, M_FLAGS] & FLAG_AVG
    ss, ss2 = L * R + tcap, L * R2 + tcap
    isz2 = isz + R2 - R
    fsz2 = fsz + (ss2 - ss) * (2 if avg else 1)
    ni, nf = mv[0], mv[2]
    if ni + isz2 > mv[1] or nf + fsz2 > mv[3]:
        return False
    for q in range(isz):   # ints: the room's tags end the segment, R2 - R more slots after them
        Iar[ni + q] = Iar[io + q]
    for q in range(isz, isz2):
        Iar[ni + q] = 0
    Iar[ni + rp - 1 - io] = R2
    h = meta[j, M_NNZ] + gram_len(meta, j)   # values and Gram matrix
    for q in range(h):
        Far[nf + q] = Far[fo + q]
    _widen_room(Far, fo + h, nf + h, L, R, R2, tcap)
    pc = meta[j, M_PCAP]
    for q in range(pc):   # the pool's alpha
        Far[nf + h + ss2 + q] = Far[fo + h + ss + q]
    if avg:   # the averaging accumulator zm | zl, laid out as the statistic
        _widen_room(Far, fo + h + ss + pc, nf + h + ss2 + pc, L, R, R2, tcap)
        Far[nf + h + 2 * ss2 + pc] = Far[fo + h + 2 * ss + pc]
    meta[j, M_IOFF], meta[j, M_FOFF], meta[j, M_ISIZE], meta[j, M_FSIZE] = ni, nf, isz2, fsz2
    mv[0] += isz2
    mv[2] += fsz2
    mv[4] += isz2 - isz
    mv[5] += fsz2 - fsz
    return True


@njit(**_INNER)
def sp_emission_stat(Iar, kpos, lab, L, out, coef):
    """The emission part of ``out += coef * s(lab)`` in the sparse layout (the tags of lab must be
    in the room)."""
    rp, rn, R = sp_room(Iar, kpos)
    for t in range(L):
        r = sp_col(Iar, rp, rn, lab[t])
        if r < 0:
            raise AssertionError("sparse chain statistic: a tag was not registered")
        out[t * R + r] += coef


@njit(**_INNER)
def sp_labeling_stat(Iar, kpos, lab, L, out, coef):
    """out += coef * s(lab) in the sparse layout (the tags and bigrams of lab must be registered)."""
    sp_emission_stat(Iar, kpos, lab, L, out, coef)
    toff = L * Iar[room_pos(Iar, kpos) + 1]
    for t in range(1, L):
        q = sp_find(Iar, kpos, lab[t - 1], lab[t])
        if q < 0:
            raise AssertionError("sparse chain statistic: a bigram was not registered")
        out[toff + q] += coef


@njit(**_INNER)
def sp_score(S, T, B, scale, st, L, K, Kc, use_trans, Iar, kpos):
    """<w, Phi_x(st)> (``structops.stat_score`` for the sparse layout: the room's tags, ascending,
    are the non-zero terms of its loops over k, in their order)."""
    rp, rn, R = sp_room(Iar, kpos)
    v = 0.0
    for t in range(L):
        base = t * R
        for r in range(rn):
            v += S[t, Iar[rp + r]] * st[base + r]
    if use_trans:
        o = (L - 1) * R   # BM: the first and last rows of M
        acc = 0.0
        for r in range(rn):
            k = Iar[rp + r]
            acc += B[0, k] * st[r] + B[1, k] * st[o + r]
        toff = L * R
        for q in range(Iar[kpos]):
            acc += T[Iar[kpos + 2 + 2 * q], Iar[kpos + 3 + 2 * q]] * st[toff + q]
        v += scale * acc
    return v


@njit(**_INNER)
def sp_loss_lin(st, ytrue, C, L, Ki, Iar, kpos):
    """The linear part of the dual loss, ``structops.stat_loss_lin`` for the sparse layout."""
    rp, rn, R = sp_room(Iar, kpos)
    v = 0.0
    for t in range(L):
        base = t * R
        c = ytrue[t]
        for r in range(rn):
            v += C[c, Iar[rp + r]] * st[base + r]
    return v / chain_loss_norm(L, Ki)


@njit(**_INNER)
def sp_sqnorm(G, st, L, K, Kc, use_trans, Iar, kpos):
    """||Phi_x(st)||^2 (``structops.stat_sqnorm`` for the sparse layout; the pairs are distinct)."""
    rp, rn, R = sp_room(Iar, kpos)
    return sp_trans_sqnorm(stat_emission_sqnorm(G, st, L, rn, R), st, L, K, Kc, use_trans, Iar, kpos)


@njit(**_INNER)
def sp_trans_sqnorm(v, st, L, K, Kc, use_trans, Iar, kpos):
    """v + the transition part of ||Phi_x(st)||^2 in the sparse layout (v: the emission part)."""
    if use_trans:
        rp, rn, R = sp_room(Iar, kpos)
        o = (L - 1) * R   # BM: the first and last rows of M
        for r in range(rn):
            a = st[r]
            b = st[o + r]
            v += a * a + b * b
        toff = L * R
        for q in range(Iar[kpos]):
            x = st[toff + q]
            v += x * x
    return v


@njit(**_INNER)
def sp_apply(w, x, st, L, K, Kc, coef, use_trans, Iar, kpos):
    """U += coef * Phi_x(st) (``structops.stat_apply`` for the sparse layout; ``w = (E, T, B)``,
    ``x = (tok_ptr, fidx, fval)``)."""
    E, T, B = w
    rp, rn, R = sp_room(Iar, kpos)
    stat_emission_apply(E, x[0], x[1], x[2], st, L, rn, R, coef, Iar[rp:rp + rn])
    if use_trans:
        o = (L - 1) * R   # BM: the first and last rows of M
        for r in range(rn):
            k = Iar[rp + r]
            B[0, k] += coef * st[r]
            B[1, k] += coef * st[o + r]
        toff = L * R
        for q in range(Iar[kpos]):
            T[Iar[kpos + 2 + 2 * q], Iar[kpos + 3 + 2 * q]] += coef * st[toff + q]


@njit(**_INNER)
def sp_labeling_apply(T, lab, L, coef):
    """T += coef * (the bigram counts of lab) (the transition part of Phi(s(lab)))."""
    for t in range(1, L):
        T[lab[t - 1], lab[t]] += coef


@njit(**_INNER)
def sp_snap(st, L, Kc, Iar, kpos, T, ZT, cu, cz, use_trans):
    """Set transition counts within round-off of 0 (|v| < SNAP) to exactly 0, and keep the
    weights equal to the sum of the blocks: T += cu * v, ZT += cz * v (cz = 0: no averaging)."""
    toff = L * Iar[room_pos(Iar, kpos) + 1]
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
