"""Chain block statistics stored sparsely: per-token (tag, value) lists and tag-pair counts (numba).

A chain block's dual point is a convex combination of labelings, kept as its mean statistic
(``structops``): unary marginals ``M`` (L x Kc), transition counts ``TM`` (Kc x Kc) and start /
end indicators ``BM`` (2 x Kc). Each labeling puts one tag on each token and L - 1 bigrams, so
a block that touched a few labelings has a few non-zeros per token row of M and a few pairs in
TM: the dense layout costs L Kc + Kc^2 + 2 Kc floats per block (5.9k floats for a 21-token
Brown sentence with 283 tags, of which ~35 are non-zero). A *sparse* chain block
(``FLAG_SPARSE`` in its meta row; ``FLAG_SPARSE_EM`` marks this layout, see below) keeps instead:

* floats (the statistic region): ``EV (ecap) | TV (tcap)``;
* ints (after the pool): ``tn | tcap | (a_0, b_0) ... (a_{tcap-1}, b_{tcap-1}) | ecap | eptr (L + 1) |
  ek (ecap)``: the ``tn`` transition pairs in use, ``TV[q]`` the count of the pair (a_q, b_q)
  (distinct pairs, so ``tn <= K^2``); and the emission entries of token t at
  ``eptr[t] <= q < eptr[t + 1]`` with tags ``ek[q]`` ascending (distinct within a token) and
  values ``EV[q]`` = M[t, ek[q]]; ``eptr[L]`` entries in use. Tags and pairs do not depend on
  the label capacity (nothing to relayout when it grows).
* ``BM`` is not stored: ``BM[0] = M[0]`` and ``BM[1] = M[L - 1]`` (the start / end tag of a
  labeling is its tag on the first / last token), and every operation on a statistic (steps,
  averaging, blending, relayout) moves both by the same float operations, so the dense layout's
  BM rows equal those M rows bit for bit; the functions below read them from the token lists.

Every function here is the sparse twin of the dense one in ``structops`` / ``common`` (same
value, other layout). The sums visit the non-zero terms of the dense sums in the same order
(tokens, then tags ascending) and leave out only terms that are zero: adding a zero term never
changes a float sum that starts at +0.0 (it is never -0.0), so the values are the dense
layout's, bit for bit. A block step first *registers* the tags and bigrams of the labelings it
moves (value 0, so the statistic does not change; a new tag is inserted in its token's sorted
list, moving the entries after it in the statistic and in the block's averaging accumulator)
and then works on vectors aligned with the block's entries: the direction ``d`` has the same
layout. When a block has no room for a step's new entries, the step is skipped and the block
flagged (``FLAG_TFULL``); the store then moves it to a larger segment
(``BlockStore.grow_flagged``), and gives room beforehand to blocks short of one step's worth
(``BlockStore.grow_short``).

Counts that cancel to round-off (|v| < ``SNAP``, e.g. after a pairwise step drops an atom) are
set to exactly 0 and the weights corrected by the same amount, so w = sum_i u_i still holds;
pairs at 0 are dropped when the store compacts (emission entries are kept).
"""
from numba import njit
import numpy as np

from .common import _INNER, _JIT, _gram_entry, _token_table
from .layout import FLAG_SPARSE, FLAG_SPARSE_EM, FLAG_TFULL  # noqa: F401 (the block flags, declared in layout.py)

#: transition counts below this (in absolute value) after a step are round-off: set to 0
SNAP = 1e-13
_NO_B = np.zeros((1, 1))


@njit(**_INNER)
def sp_epos(Iar, kpos):
    """Offset in Iar of the block's emission list ``ecap | eptr (L + 1) | ek (ecap)`` (after its
    pair list ``tn | tcap | pairs``)."""
    return kpos + 2 + 2 * Iar[kpos + 1]


@njit(**_INNER)
def sp_toff(Iar, kpos):
    """Offset of the transition counts TV in the statistic: ``ecap`` (after EV)."""
    return Iar[sp_epos(Iar, kpos)]


@njit(**_INNER)
def sp_find(Iar, kpos, a, b):
    """Index of the pair (a, b) among the block's pairs, -1 if absent."""
    tn = Iar[kpos]
    for q in range(tn):
        if Iar[kpos + 2 + 2 * q] == a and Iar[kpos + 3 + 2 * q] == b:
            return q
    return -1


@njit(**_INNER)
def sp_em_find(Iar, epos, L, t, k):
    """Index in EV of token t's entry of tag k, -1 if absent."""
    ek0 = epos + L + 2
    for q in range(Iar[epos + 1 + t], Iar[epos + 2 + t]):
        kk = Iar[ek0 + q]
        if kk == k:
            return q
        if kk > k:
            return -1
    return -1


@njit(**_JIT)
def sp_register(Iar, kpos, st, toff, lab, L):
    """Add the bigrams of ``lab`` missing from the block's pairs (with count 0: the statistic is
    unchanged). Returns False when the block has no room left (pairs added so far stay)."""
    tcap = Iar[kpos + 1]
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


@njit(**_JIT)
def sp_em_register(Iar, kpos, st, zm, lab, L):
    """Add the (token, tag) entries of ``lab`` missing from the block's emission lists, with
    value 0 (the statistic is unchanged), each at its place in its token's ascending tags: the
    entries after it move up by one in the statistic ``st`` and in the averaging accumulator
    ``zm`` (same layout; empty when the block keeps none). Returns False when the block has no
    room left (entries added so far stay)."""
    epos = sp_epos(Iar, kpos)
    ecap = Iar[epos]
    ek0 = epos + L + 2
    avg = zm.shape[0] > 0
    for t in range(L):
        k = lab[t]
        p = Iar[epos + 1 + t]
        b = Iar[epos + 2 + t]
        while p < b and Iar[ek0 + p] < k:
            p += 1
        if p < b and Iar[ek0 + p] == k:
            continue
        en = Iar[epos + 1 + L]
        if en >= ecap:
            return False
        for q in range(en, p, -1):
            Iar[ek0 + q] = Iar[ek0 + q - 1]
            st[q] = st[q - 1]
            if avg:
                zm[q] = zm[q - 1]
        Iar[ek0 + p] = k
        st[p] = 0.0
        if avg:
            zm[p] = 0.0
        for u in range(t + 1, L + 1):
            Iar[epos + 1 + u] += 1
    return True


@njit(**_JIT)
def sp_labeling_stat(Iar, kpos, lab, L, Kc, out, coef):
    """out += coef * s(lab) in the sparse layout (the tags and bigrams of lab must be
    registered; its start / end indicators are its first / last token's entries)."""
    epos = sp_epos(Iar, kpos)
    for t in range(L):
        q = sp_em_find(Iar, epos, L, t, lab[t])
        if q < 0:
            raise AssertionError("sparse chain statistic: a tag was not registered")
        out[q] += coef
    toff = Iar[epos]
    for t in range(1, L):
        q = sp_find(Iar, kpos, lab[t - 1], lab[t])
        if q < 0:
            raise AssertionError("sparse chain statistic: a bigram was not registered")
        out[toff + q] += coef


@njit(**_INNER)
def sp_ends(B, st, L, Iar, epos, sq, acc):
    """The start / end part of a chain statistic's score, read from its first and last tokens'
    entries (``BM[0] = M[0]``, ``BM[1] = M[L - 1]``): over the tags k of either list, ascending,
    with a = st_first[k], b = st_last[k] (0.0 when absent), the sum of B[0, k] a + B[1, k] b, or
    with ``sq`` of a a + b b, added term by term to ``acc``: the dense BM sums' terms that are not
    zero, in their order."""
    ek0 = epos + L + 2
    i, ie = Iar[epos + 1], Iar[epos + 2]
    j, je = Iar[epos + L], Iar[epos + L + 1]
    big = 1 << 30
    while i < ie or j < je:
        ki = Iar[ek0 + i] if i < ie else big
        kj = Iar[ek0 + j] if j < je else big
        k = min(ki, kj)
        a = 0.0
        b = 0.0
        if ki == k:
            a = st[i]
            i += 1
        if kj == k:
            b = st[j]
            j += 1
        if sq:
            acc += a * a + b * b
        else:
            acc += B[0, k] * a + B[1, k] * b
    return acc


@njit(**_INNER)
def sp_score(S, T, B, scale, st, L, K, Kc, use_trans, Iar, kpos):
    """<w, Phi_x(st)> (``structops.stat_score`` for the sparse layout)."""
    epos = sp_epos(Iar, kpos)
    ek0 = epos + L + 2
    v = 0.0
    for t in range(L):
        for q in range(Iar[epos + 1 + t], Iar[epos + 2 + t]):
            v += S[t, Iar[ek0 + q]] * st[q]
    if use_trans:
        acc = sp_ends(B, st, L, Iar, epos, False, 0.0)
        toff = Iar[epos]
        for q in range(Iar[kpos]):
            acc += T[Iar[kpos + 2 + 2 * q], Iar[kpos + 3 + 2 * q]] * st[toff + q]
        v += scale * acc
    return v


@njit(**_INNER)
def sp_loss_lin(st, ytrue, C, L, Iar, kpos, norm):
    """The linear part of the loss of a statistic (``structops.stat_loss_lin`` for chains,
    ``norm`` its ``chain_loss_norm``) in the sparse layout."""
    epos = sp_epos(Iar, kpos)
    ek0 = epos + L + 2
    v = 0.0
    for t in range(L):
        c = ytrue[t]
        for q in range(Iar[epos + 1 + t], Iar[epos + 2 + t]):
            v += C[c, Iar[ek0 + q]] * st[q]
    return v / norm


@njit(**_INNER)
def sp_support(st, L, Iar, epos):
    """The non-zero entries of each token of a sparse statistic, tags ascending:
    (ptr, ks, ps) with token t's tags in ks[ptr[t]:ptr[t + 1]] and their values at st[ps[...]]
    (``common.row_support`` for the sparse layout)."""
    ek0 = epos + L + 2
    ptr = np.empty(L + 1, np.int64)
    n = Iar[epos + 1 + L]
    ks = np.empty(n + 1, np.int64)
    ps = np.empty(n + 1, np.int64)
    q = 0
    ptr[0] = 0
    for t in range(L):
        for p in range(Iar[epos + 1 + t], Iar[epos + 2 + t]):
            if st[p] != 0.0:
                ks[q] = Iar[ek0 + p]
                ps[q] = p
                q += 1
        ptr[t + 1] = q
    return ptr, ks, ps


@njit(**_INNER)
def _row_dot(st, ptr, ks, ps, t, s):
    """<st_t, st_s> over token s's non-zero tags in order (``stat_emission_sqnorm``'s inner sum:
    a tag token t lacks adds a zero term, left out)."""
    acc = 0.0
    i = ptr[t]
    ie = ptr[t + 1]
    for p in range(ptr[s], ptr[s + 1]):
        k = ks[p]
        while i < ie and ks[i] < k:
            i += 1
        if i < ie and ks[i] == k:
            acc += st[ps[i]] * st[ps[p]]
    return acc


@njit(**_INNER)
def sp_emission_sqnorm(G, st, L, Iar, kpos):
    """``common.stat_emission_sqnorm`` for the sparse layout: sum_{t,s} G[t, s] <st_t, st_s>."""
    ptr, ks, ps = sp_support(st, L, Iar, sp_epos(Iar, kpos))
    v = 0.0
    for t in range(L):
        for s in range(L):
            g = G[t, s]
            if g == 0.0:
                continue
            v += g * _row_dot(st, ptr, ks, ps, t, s)
    return v


@njit(**_INNER)
def sp_emission_sqnorm_tokens(tok_ptr, fidx, fval, st, L, Iar, kpos):
    """``common.emission_sqnorm_tokens`` for the sparse layout (the Gram entries it needs from
    the tokens, as ``gram`` computes them)."""
    ptr, ks, ps = sp_support(st, L, Iar, sp_epos(Iar, kpos))
    act = np.empty(L, np.int64)
    na = 0
    for t in range(L):
        if ptr[t + 1] > ptr[t]:
            act[na] = t
            na += 1
    if na == 0:
        return 0.0
    dense = fidx.shape[0] == 0
    nnz = tok_ptr[L] - tok_ptr[0]
    keys = np.empty(max(nnz, 1), np.int64)
    vals = np.empty(max(nnz, 1))
    tptr = np.zeros(na + 1, np.int64)
    if not dense:
        for q in range(na):
            t = act[q]
            o = tptr[q]
            tptr[q + 1] = o + _token_table(tok_ptr, fidx, fval, t, keys[o:], vals[o:])
    v = 0.0
    for qa in range(na):
        t = act[qa]
        for qb in range(na):
            s = act[qb]
            lo, hi, ql = (t, s, qa) if t <= s else (s, t, qb)
            if dense:
                a = tok_ptr[lo]
                c = tok_ptr[hi]
                n = min(tok_ptr[lo + 1] - a, tok_ptr[hi + 1] - c)
                g = 0.0
                for q in range(n):
                    g += fval[a + q] * fval[c + q]
            else:
                o = tptr[ql]
                g = _gram_entry(tok_ptr, fidx, fval, lo, hi, keys[o:], vals[o:], tptr[ql + 1] - o)
            if g == 0.0:
                continue
            v += g * _row_dot(st, ptr, ks, ps, t, s)
    return v


@njit(**_INNER)
def sp_sqnorm(G, st, L, K, Kc, use_trans, Iar, kpos):
    """||Phi_x(st)||^2 (``structops.stat_sqnorm`` for the sparse layout; the pairs are distinct)."""
    return sp_trans_sqnorm(sp_emission_sqnorm(G, st, L, Iar, kpos), st, L, K, Kc, use_trans, Iar, kpos)


@njit(**_INNER)
def sp_trans_sqnorm(v, st, L, K, Kc, use_trans, Iar, kpos):
    """v + the transition part of ||Phi_x(st)||^2 in the sparse layout (v: the emission part)."""
    if use_trans:
        epos = sp_epos(Iar, kpos)
        v = sp_ends(_NO_B, st, L, Iar, epos, True, v)
        toff = Iar[epos]
        for q in range(Iar[kpos]):
            x = st[toff + q]
            v += x * x
    return v


@njit(**_INNER)
def sp_apply(w, x, st, L, K, Kc, coef, use_trans, Iar, kpos):
    """U += coef * Phi_x(st) (``structops.stat_apply`` for the sparse layout; ``w = (E, T, B)``,
    ``x = (tok_ptr, fidx, fval)``)."""
    E, T, B = w
    tok_ptr, fidx, fval = x
    epos = sp_epos(Iar, kpos)
    ptr, ks, ps = sp_support(st, L, Iar, epos)
    dense = fidx.shape[0] == 0
    for t in range(L):
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            j = p - tok_ptr[t] if dense else fidx[p]
            v = fval[p] * coef
            for q in range(ptr[t], ptr[t + 1]):
                E[j, ks[q]] += v * st[ps[q]]
    if use_trans:
        ek0 = epos + L + 2
        for q in range(Iar[epos + 1], Iar[epos + 2]):
            B[0, Iar[ek0 + q]] += coef * st[q]
        for q in range(Iar[epos + L], Iar[epos + L + 1]):
            B[1, Iar[ek0 + q]] += coef * st[q]
        toff = Iar[epos]
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
    toff = sp_toff(Iar, kpos)
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
