"""Chain block statistics with sparse transition counts (numba).

A chain block's dual point is a convex combination of labelings, kept as its mean statistic
(``structops``): unary marginals ``M`` (L x Kc), transition counts ``TM`` (Kc x Kc) and start /
end indicators ``BM`` (2 x Kc). ``TM`` is a combination of the bigram counts of the labelings
the block has touched, so it has at most (L - 1) non-zeros per labeling -- storing it densely
costs Kc^2 floats per block (1.8 MB per sentence with Brown's 472 tags). A *sparse* chain block
(``FLAG_SPARSE`` in its meta row) keeps instead:

* floats (the statistic region): ``M (L * Kc) | TV (tcap)``: no ``BM``, whose rows equal M's
  first and last rows bit for bit (every step moves them by the same operations), so the
  functions here read those rows instead (files written with ``M | BM | TV`` convert on load,
  ``blocks._drop_sparse_bm``);
* ints (after the pool): ``tn | tcap | (a_0, b_0) ... (a_{tcap-1}, b_{tcap-1})``: the ``tn``
  transition pairs in use, ``TV[q]`` the count of the pair (a_q, b_q). Pairs are distinct, so
  ``tn <= K^2``; their labels do not depend on the label capacity (nothing to relayout when it
  grows).

Every function here is the sparse twin of the dense one in ``structops`` (same value, other
layout). A block step first *registers* the bigrams of the labelings it moves (value 0, so the
statistic does not change) and then works on vectors aligned with the block's pairs: the
direction ``d`` has the same layout, its transition part indexed by the block's pairs. When a
block has no room for a step's new pairs, the step is skipped and the block flagged
(``FLAG_TFULL``); the store then moves it to a larger segment (``BlockStore.grow_flagged``).

Counts that cancel to round-off (|v| < ``SNAP``, e.g. after a pairwise step drops an atom) are
set to exactly 0 and the weights corrected by the same amount, so w = sum_i u_i still holds;
pairs at 0 are dropped when the store compacts.
"""
from numba import njit

from .common import _INNER, _JIT, stat_emission_apply, stat_emission_sqnorm
from .layout import FLAG_SPARSE, FLAG_TFULL  # noqa: F401 (the block flags, declared in layout.py)

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


@njit(**_INNER)
def sp_labeling_stat(Iar, kpos, lab, L, Kc, out, coef):
    """out += coef * s(lab) in the sparse layout (the bigrams of lab must be registered)."""
    for t in range(L):
        out[t * Kc + lab[t]] += coef
    toff = L * Kc
    for t in range(1, L):
        q = sp_find(Iar, kpos, lab[t - 1], lab[t])
        if q < 0:
            raise AssertionError("sparse chain statistic: a bigram was not registered")
        out[toff + q] += coef


@njit(**_INNER)
def sp_score(S, T, B, scale, st, L, K, Kc, use_trans, Iar, kpos):
    """<w, Phi_x(st)> (``structops.stat_score`` for the sparse layout)."""
    v = 0.0
    for t in range(L):
        base = t * Kc
        for k in range(K):
            v += S[t, k] * st[base + k]
    if use_trans:
        o = (L - 1) * Kc   # BM: the first and last rows of M
        acc = 0.0
        for k in range(K):
            acc += B[0, k] * st[k] + B[1, k] * st[o + k]
        toff = L * Kc
        for q in range(Iar[kpos]):
            acc += T[Iar[kpos + 2 + 2 * q], Iar[kpos + 3 + 2 * q]] * st[toff + q]
        v += scale * acc
    return v


@njit(**_INNER)
def sp_sqnorm(G, st, L, K, Kc, use_trans, Iar, kpos):
    """||Phi_x(st)||^2 (``structops.stat_sqnorm`` for the sparse layout; the pairs are distinct)."""
    return sp_trans_sqnorm(stat_emission_sqnorm(G, st, L, K, Kc), st, L, K, Kc, use_trans, Iar, kpos)


@njit(**_INNER)
def sp_trans_sqnorm(v, st, L, K, Kc, use_trans, Iar, kpos):
    """v + the transition part of ||Phi_x(st)||^2 in the sparse layout (v: the emission part)."""
    if use_trans:
        o = (L - 1) * Kc   # BM: the first and last rows of M
        for k in range(K):
            a = st[k]
            b = st[o + k]
            v += a * a + b * b
        toff = L * Kc
        for q in range(Iar[kpos]):
            x = st[toff + q]
            v += x * x
    return v


@njit(**_INNER)
def sp_apply(w, x, st, L, K, Kc, coef, use_trans, Iar, kpos):
    """U += coef * Phi_x(st) (``structops.stat_apply`` for the sparse layout; ``w = (E, T, B)``,
    ``x = (tok_ptr, fidx, fval)``)."""
    E, T, B = w
    stat_emission_apply(E, x[0], x[1], x[2], st, L, K, Kc, coef)
    if use_trans:
        o = (L - 1) * Kc   # BM: the first and last rows of M
        for k in range(K):
            B[0, k] += coef * st[k]
            B[1, k] += coef * st[o + k]
        toff = L * Kc
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
    toff = L * Kc
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
