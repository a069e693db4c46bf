"""Multiclass kernels (one label per example, cost matrix ``C``): loss-augmented decoding, the
exact slack-rescaling oracle and its level points, all by enumeration of the K classes.

>>> import numpy as np
>>> S = np.array([[0.0, 2.0, 1.0]])
>>> C = 1.0 - np.eye(3)
>>> out = np.zeros(1, dtype=np.int32)
>>> float(py_entry(mc_decode)(S, 3, np.array([0], np.int32), C, 0.0, out)), int(out[0])
(2.0, 1)
>>> hs, gs = np.zeros(3), np.zeros(3)
>>> mc_levels(S, 3, np.array([0], np.int32), C, hs, gs), hs[:2].tolist()
(2, [3.0, 2.0])
"""
import numpy as np
from numba import njit

from .common import _INNER, _JIT, py_entry  # noqa: F401 (py_entry: the doctests' Python entries)
from .simd import vec_scores_cm8, vec_scores_cm10, vec_scores_cm12, vec_scores_cm16


@njit(**_INNER)
def mc_decode(S, K, ytrue, C, lw, out):
    """argmax_k S[0, k] + lw * C[ytrue[0], k] into out[0]; returns the maximum."""
    best = -np.inf
    arg = 0
    for k in range(K):
        v = S[0, k]
        if lw != 0.0:
            v += lw * C[ytrue[0], k]
        if v > best:
            best = v
            arg = k
    out[0] = arg
    return best


@njit(**_JIT)
def mc_slack(S, K, ytrue, C, out):
    """argmax_k C[yt, k] (1 + S[0, k] - S[0, yt]) (the truth gives 0) into out[0]."""
    yt = ytrue[0]
    st = S[0, yt]
    best = 0.0
    arg = yt
    for k in range(K):
        if k == yt:
            continue
        v = C[yt, k] * (1.0 + S[0, k] - st)
        if v > best:
            best = v
            arg = k
    out[0] = arg
    return best


@njit(**_JIT)
def mc_levels(S, K, ytrue, C, hs, gs):
    """One level point (h, g) per wrong class; returns their number."""
    yt = ytrue[0]
    c = 0
    for k in range(K):
        if k == yt:
            continue
        hs[c] = 1.0 + S[0, k] - S[0, yt]
        gs[c] = C[yt, k]
        c += 1
    return c


@njit(**_INNER)
def mc_stat_sqnorm(G, st, K):
    """||Phi_x(st)||^2 of a multiclass block (one token, Gram G (1 x 1)): G[0, 0] times the sum of
    st[k]^2 over the non-zero st[k], k ascending, added to 0.0 -- ``common.stat_emission_sqnorm``
    of ``row_support(st, 1, K, Kc)``, the same operations in the same order, to the bit, without
    allocating the support's three arrays at every step."""
    v = 0.0
    g = G[0, 0]
    if g == 0.0:
        return v
    acc = 0.0
    for k in range(K):
        x = st[k]
        if x != 0.0:
            acc += x * x
    return v + g * acc


@njit(**_INNER)
def mc_stat_apply(E, tok_ptr, fidx, fval, st, K, coef):
    """E[j, k] += coef * x_j * st[k] (x = the one token, as ``structops.stat_apply``), on the
    classes with st[k] != 0 only: a multiclass step moves the few classes of its direction, so
    this costs O(nnz(x) * #moved) instead of O(nnz(x) * K). The products are formed in the same
    order as ``stat_apply``'s, so the result is the same to the bit (a skipped class adds 0).

    >>> import numpy as np
    >>> E = np.zeros((3, 4)); st = np.array([0.0, 1.0, 0.0, -1.0])
    >>> py_entry(mc_stat_apply)(E, np.array([0, 2], np.int32), np.array([0, 2], np.int32), np.array([1.0, 2.0]),
    ...               st, 4, 0.5)
    >>> E[2].tolist()
    [0.0, 1.0, 0.0, -1.0]
    """
    nz = np.empty(K, np.int64)
    sv = np.empty(K)
    m = 0
    for k in range(K):
        if st[k] != 0.0:
            nz[m] = k
            sv[m] = st[k]
            m += 1
    if m == 0:
        return
    if fidx.shape[0] == 0:   # a dense row (``common``): value p is feature p - tok_ptr[0]
        a = tok_ptr[0]
        if m == 1:
            k0 = nz[0]
            s0 = sv[0]
            for p in range(a, tok_ptr[1]):
                if fval[p] != 0.0:   # a zero adds +-0: skipped, as the CSR row has no entry there
                    E[p - a, k0] += fval[p] * coef * s0
        elif m == 2:
            k0 = nz[0]
            s0 = sv[0]
            k1 = nz[1]
            s1 = sv[1]
            for p in range(a, tok_ptr[1]):
                if fval[p] == 0.0:
                    continue
                w = E[p - a]
                v = fval[p] * coef
                w[k0] += v * s0
                w[k1] += v * s1
        else:
            for p in range(a, tok_ptr[1]):
                if fval[p] == 0.0:
                    continue
                w = E[p - a]
                v = fval[p] * coef
                for q in range(m):
                    w[nz[q]] += v * sv[q]
        return
    # one or two classes (a Frank-Wolfe step from a block near its truth) in registers: the
    # loop over the row is then free of the inner loop over the moved classes
    if m == 1:
        k0 = nz[0]
        s0 = sv[0]
        for p in range(tok_ptr[0], tok_ptr[1]):
            E[fidx[p], k0] += fval[p] * coef * s0
    elif m == 2:
        k0 = nz[0]
        s0 = sv[0]
        k1 = nz[1]
        s1 = sv[1]
        for p in range(tok_ptr[0], tok_ptr[1]):
            j = fidx[p]
            v = fval[p] * coef
            E[j, k0] += v * s0
            E[j, k1] += v * s1
    else:
        for p in range(tok_ptr[0], tok_ptr[1]):
            j = fidx[p]
            v = fval[p] * coef
            for q in range(m):
                E[j, nz[q]] += v * sv[q]


@njit(**_INNER)
def mc_stat_apply2(E, Z, tok_ptr, fidx, fval, st, K, coef, zcoef):
    """``mc_stat_apply(E, ..., coef)`` and ``mc_stat_apply(Z, ..., zcoef)`` in one pass over the
    row (a step that also moves the averaging accumulator): the same products, so the same
    values to the bit.

    >>> import numpy as np
    >>> E = np.zeros((3, 4)); Z = np.zeros((3, 4)); st = np.array([0.0, 1.0, 0.0, -1.0])
    >>> py_entry(mc_stat_apply2)(E, Z, np.array([0, 2], np.int32), np.array([0, 2], np.int32), np.array([1.0, 2.0]),
    ...                st, 4, 0.5, 2.0)
    >>> E[2].tolist(), Z[2].tolist()
    ([0.0, 1.0, 0.0, -1.0], [0.0, 4.0, 0.0, -4.0])
    """
    nz = np.empty(K, np.int64)
    sv = np.empty(K)
    m = 0
    for k in range(K):
        if st[k] != 0.0:
            nz[m] = k
            sv[m] = st[k]
            m += 1
    if m == 0:
        return
    dense = fidx.shape[0] == 0   # a dense row (``common``): value p is feature p - tok_ptr[0]
    # the moved classes in passes of up to four over the row, each with its classes in
    # registers: every entry E[j, k] / Z[j, k] takes the one product it took in the loop over
    # the moved classes (fval[p] * coef, times st[k]), so the values are the same to the bit.
    # The zeros of a dense row are skipped (image rows: ~30-50% of the row): each would add a
    # signed zero, which leaves every entry as it is (x + +-0 == x for x != 0, and +0 + -0 is
    # +0: an entry that starts at +0 and only takes sums is never -0), and the pass then leaves
    # the rows of E and Z it does not change out of the cache (~30% of the pass on 784-d digits)
    row = (tok_ptr, fidx, fval, dense)
    cz = (coef, zcoef)
    q = 0
    while q < m:
        r = m - q
        if r >= 4:
            _apply2_4(E, Z, row, cz, nz[q], sv[q], nz[q + 1], sv[q + 1],
                      nz[q + 2], sv[q + 2], nz[q + 3], sv[q + 3])
            q += 4
        elif r == 3:
            _apply2_3(E, Z, row, cz, nz[q], sv[q], nz[q + 1], sv[q + 1],
                      nz[q + 2], sv[q + 2])
            q += 3
        elif r == 2:
            _apply2_2(E, Z, row, cz, nz[q], sv[q], nz[q + 1], sv[q + 1])
            q += 2
        else:
            _apply2_1(E, Z, row, cz, nz[q], sv[q])
            q += 1


@njit(inline="always", **_INNER)
def _apply2_1(E, Z, row, cz, k0, s0):
    """One pass of :func:`mc_stat_apply2` over the row for class k0 (st[k0] = s0); ``row`` is
    (tok_ptr, fidx, fval, dense), ``cz`` (coef, zcoef)."""
    tok_ptr, fidx, fval, dense = row
    coef, zcoef = cz
    a = tok_ptr[0]
    for q in range(tok_ptr[1] - a):   # (j = q: numba then drops the negative-index checks)
        x = fval[a + q]
        if dense and x == 0.0:   # adds +-0 to E and Z: skipped (see mc_stat_apply2)
            continue
        j = q if dense else fidx[a + q]
        v = x * coef
        u = x * zcoef
        E[j, k0] += v * s0
        Z[j, k0] += u * s0


@njit(inline="always", **_INNER)
def _apply2_2(E, Z, row, cz, k0, s0, k1, s1):
    """One pass of :func:`mc_stat_apply2` over the row for two classes."""
    tok_ptr, fidx, fval, dense = row
    coef, zcoef = cz
    a = tok_ptr[0]
    for q in range(tok_ptr[1] - a):   # (j = q: numba then drops the negative-index checks)
        x = fval[a + q]
        if dense and x == 0.0:   # adds +-0 to E and Z: skipped (see mc_stat_apply2)
            continue
        j = q if dense else fidx[a + q]
        v = x * coef
        u = x * zcoef
        E[j, k0] += v * s0
        E[j, k1] += v * s1
        Z[j, k0] += u * s0
        Z[j, k1] += u * s1


@njit(inline="always", **_INNER)
def _apply2_3(E, Z, row, cz, k0, s0, k1, s1, k2, s2):
    """One pass of :func:`mc_stat_apply2` over the row for three classes (a replayed block: its
    truth, an earlier corner and the new one)."""
    tok_ptr, fidx, fval, dense = row
    coef, zcoef = cz
    a = tok_ptr[0]
    for q in range(tok_ptr[1] - a):   # (j = q: numba then drops the negative-index checks)
        x = fval[a + q]
        if dense and x == 0.0:   # adds +-0 to E and Z: skipped (see mc_stat_apply2)
            continue
        j = q if dense else fidx[a + q]
        v = x * coef
        u = x * zcoef
        E[j, k0] += v * s0
        E[j, k1] += v * s1
        E[j, k2] += v * s2
        Z[j, k0] += u * s0
        Z[j, k1] += u * s1
        Z[j, k2] += u * s2


@njit(inline="always", **_INNER)
def _apply2_4(E, Z, row, cz, k0, s0, k1, s1, k2, s2, k3, s3):
    """One pass of :func:`mc_stat_apply2` over the row for four classes."""
    tok_ptr, fidx, fval, dense = row
    coef, zcoef = cz
    a = tok_ptr[0]
    for q in range(tok_ptr[1] - a):   # (j = q: numba then drops the negative-index checks)
        x = fval[a + q]
        if dense and x == 0.0:   # adds +-0 to E and Z: skipped (see mc_stat_apply2)
            continue
        j = q if dense else fidx[a + q]
        v = x * coef
        u = x * zcoef
        E[j, k0] += v * s0
        E[j, k1] += v * s1
        E[j, k2] += v * s2
        E[j, k3] += v * s3
        Z[j, k0] += u * s0
        Z[j, k1] += u * s1
        Z[j, k2] += u * s2
        Z[j, k3] += u * s3


# --- class-major E and Z (``bcfw.learn_new_blocks_cm``) ------------------------------------------
# The kernels below take E and Z as (d, Kc) views of class-major arrays (numba layout "F": E.T is
# C-contiguous, one row per class, the features contiguous), indexed as the row-major ones, and
# do the arithmetic of their row-major twins entry by entry: the same products added to the same
# entries, each class's score summed in feature order. So the values are the same to the bit; only
# the memory order differs (a step moves one contiguous row per class it moves, instead of two
# entries in each of d rows of Kc doubles).


@njit(**_INNER)
def mc_stat_apply_cm(E, tok_ptr, fidx, fval, st, K, coef):
    """:func:`mc_stat_apply` on a class-major E (see above): the same products, entry by entry."""
    Et = E.T
    a = tok_ptr[0]
    b = tok_ptr[1]
    fv = fval[a:b]
    dense = fidx.shape[0] == 0
    for k in range(K):
        s = st[k]
        if s == 0.0:
            continue
        e = Et[k]
        if dense:
            for q in range(b - a):   # a zero adds nothing (mc_stat_apply skips it): kept by a select
                x = fv[q]
                v = e[q] + x * coef * s
                e[q] = v if x != 0.0 else e[q]
        else:
            fi = fidx[a:b]
            for q in range(b - a):
                e[fi[q]] += fv[q] * coef * s


@njit(**_INNER)
def mc_stat_apply2_cm(E, Z, tok_ptr, fidx, fval, st, K, coef, zcoef):
    """:func:`mc_stat_apply2` on class-major E and Z (see above): one contiguous pass over the row
    per moved class, each entry taking the product it takes there (``(x * coef) * st[k]``); a
    zero of a dense row leaves its entries as they are (a select, not a branch: the pass
    vectorizes)."""
    Et = E.T
    Zt = Z.T
    a = tok_ptr[0]
    b = tok_ptr[1]
    fv = fval[a:b]
    dense = fidx.shape[0] == 0
    for k in range(K):
        s = st[k]
        if s == 0.0:
            continue
        e = Et[k]
        z = Zt[k]
        if dense:
            for q in range(b - a):
                x = fv[q]
                ev = e[q] + (x * coef) * s
                zv = z[q] + (x * zcoef) * s
                e[q] = ev if x != 0.0 else e[q]
                z[q] = zv if x != 0.0 else z[q]
        else:
            fi = fidx[a:b]
            for q in range(b - a):
                j = fi[q]
                x = fv[q]
                e[j] += (x * coef) * s
                z[j] += (x * zcoef) * s


@njit(**_INNER)
def mc_scores_cm(E, coef, tok_ptr, fidx, fval, L, K, S, zero):
    """``common.emission_add`` on a class-major E (see above): S[t, k] (cleared first with
    ``zero``) plus (fval[p] * coef) * E[j_p, k] for the row's entries p in order, one scalar
    accumulator per class, started from S[t, k] (``emission_add``'s sums start from 0 and are
    added to the cleared S: the same value, as a sum started from +0 is never -0): a dense row
    (contiguous) up to 16 classes per pass in vectors (``simd.vec_scores_cm*``, the same
    operations per class), a CSR row up to ten per pass in scalar accumulators."""
    Et = E.T
    dense = fidx.shape[0] == 0
    vec = dense and fval.strides[0] == 8 and S.strides[1] == 8 and Et.strides[1] == 8
    for t in range(L):
        if zero:
            for k in range(K):
                S[t, k] = 0.0
        a = tok_ptr[t]
        b = tok_ptr[t + 1]
        fv = fval[a:b]
        fi = fidx[a:b] if not dense else fidx[0:0]
        k0 = 0
        while vec and k0 < K:   # a dense row: up to 16 classes per pass, in vectors (simd.vec_scores_cm*)
            r = min(K - k0, 16)
            ep = Et.ctypes.data + np.uint64(k0 * Et.strides[0])
            sp = S.ctypes.data + np.uint64(t * S.strides[0] + 8 * k0)
            fp = fval.ctypes.data + np.uint64(8 * a)
            if r <= 8:
                vec_scores_cm8(ep, Et.strides[0], fp, b - a, coef, sp, r)
            elif r <= 10:
                vec_scores_cm10(ep, Et.strides[0], fp, b - a, coef, sp, r)
            elif r <= 12:
                vec_scores_cm12(ep, Et.strides[0], fp, b - a, coef, sp, r)
            else:
                vec_scores_cm16(ep, Et.strides[0], fp, b - a, coef, sp, r)
            k0 += r
        while k0 < K:
            r = K - k0
            if r >= 10:
                e0, e1, e2, e3, e4 = Et[k0], Et[k0 + 1], Et[k0 + 2], Et[k0 + 3], Et[k0 + 4]
                e5, e6, e7, e8, e9 = Et[k0 + 5], Et[k0 + 6], Et[k0 + 7], Et[k0 + 8], Et[k0 + 9]
                a0, a1, a2, a3, a4 = S[t, k0], S[t, k0 + 1], S[t, k0 + 2], S[t, k0 + 3], S[t, k0 + 4]
                a5, a6, a7, a8, a9 = S[t, k0 + 5], S[t, k0 + 6], S[t, k0 + 7], S[t, k0 + 8], S[t, k0 + 9]
                for q in range(b - a):
                    j = q if dense else fi[q]
                    v = fv[q] * coef
                    a0 += v * e0[j]
                    a1 += v * e1[j]
                    a2 += v * e2[j]
                    a3 += v * e3[j]
                    a4 += v * e4[j]
                    a5 += v * e5[j]
                    a6 += v * e6[j]
                    a7 += v * e7[j]
                    a8 += v * e8[j]
                    a9 += v * e9[j]
                S[t, k0], S[t, k0 + 1], S[t, k0 + 2], S[t, k0 + 3], S[t, k0 + 4] = a0, a1, a2, a3, a4
                S[t, k0 + 5], S[t, k0 + 6], S[t, k0 + 7], S[t, k0 + 8], S[t, k0 + 9] = a5, a6, a7, a8, a9
                k0 += 10
            elif r >= 4:
                e0, e1, e2, e3 = Et[k0], Et[k0 + 1], Et[k0 + 2], Et[k0 + 3]
                a0, a1, a2, a3 = S[t, k0], S[t, k0 + 1], S[t, k0 + 2], S[t, k0 + 3]
                for q in range(b - a):
                    j = q if dense else fi[q]
                    v = fv[q] * coef
                    a0 += v * e0[j]
                    a1 += v * e1[j]
                    a2 += v * e2[j]
                    a3 += v * e3[j]
                S[t, k0], S[t, k0 + 1], S[t, k0 + 2], S[t, k0 + 3] = a0, a1, a2, a3
                k0 += 4
            else:
                e0 = Et[k0]
                a0 = S[t, k0]
                for q in range(b - a):
                    j = q if dense else fi[q]
                    a0 += (fv[q] * coef) * e0[j]
                S[t, k0] = a0
                k0 += 1


@njit(**_JIT)
def dense_rows_csr(A, tok_ptr, fidx, fval, max_abs):
    """CSR of the rows of a dense 2-D array, as ``FeatureIndex.encode_tokens`` writes it: each row
    is the bias (feature 0, value 1) then its nonzero columns j, in order, as feature j + 1.
    ``tok_ptr`` has n + 1 entries, ``fidx`` / ``fval`` room for n + nnz(A); returns the entries
    written. One pass over A (the numpy route takes a scan for the largest |value|, a nonzero
    scan and fancy indexing), which also validates it: -1 when a value is NaN or infinite, -2
    when one has |v| > ``max_abs`` (the arrays are then partly written; the caller raises).

    >>> import numpy as np
    >>> A = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0]])
    >>> tp = np.zeros(3, np.int32); fi = np.zeros(8, np.int32); fv = np.zeros(8)
    >>> m = dense_rows_csr(A, tp, fi, fv, 1e12)
    >>> tp.tolist(), fi[:m].tolist(), fv[:m].tolist()
    ([0, 2, 5], [0, 2, 0, 1, 3], [1.0, 2.0, 1.0, 1.0, 3.0])
    >>> A[1, 1] = np.nan; dense_rows_csr(A, tp, fi, fv, 1e12), dense_rows_csr(A[:1], tp, fi, fv, 1.0)
    (-1, -2)
    """
    n, d = A.shape
    cap = min(fidx.shape[0], fval.shape[0])
    c = 0
    bad = 0
    tok_ptr[0] = 0
    for i in range(n):
        fidx[c] = 0
        fval[c] = 1.0
        c += 1
        for j in range(d):
            v = A[i, j]
            if not abs(v) <= max_abs:   # NaN fails every comparison
                if v != v or abs(v) == np.inf:
                    return -1
                bad = -2
            # written in every case and kept by moving on only when non-zero: no branch on the
            # zero pattern of the row (image rows alternate runs of zeros and non-zeros)
            if c < cap:
                fidx[c] = j + 1
                fval[c] = v
            c += v != 0.0
        tok_ptr[i + 1] = c
    if bad != 0:
        return bad
    return c


@njit(**_JIT)
def dict_row_csr(cols, vals, max_abs, fidx, fval):
    """CSR of one dict record from its looked-up columns (``cols``: the vocabulary's index of
    each key, -1 for a name it does not know) and values (``vals``, in key order), as
    ``FeatureIndex._scan`` then ``_known_pairs`` write it: the bias (feature 0, value 1), then
    the nonzero values of known columns sorted by column. ``fidx`` / ``fval`` have room for
    len(cols) + 1 entries. Returns the entries written, times 2, plus 1 when a nonzero value has
    an unknown name; -1 when a value is NaN, infinite or beyond ``max_abs`` (nothing usable:
    the caller takes the feature-by-feature scan, which raises the error).

    >>> import numpy as np
    >>> fi = np.zeros(4, np.int32); fv = np.zeros(4)
    >>> r = dict_row_csr(np.array([5, -1, 2]), np.array([2.0, 1.0, 3.0]), 1e12, fi, fv)
    >>> r >> 1, r & 1, fi[:r >> 1].tolist(), fv[:r >> 1].tolist()
    (3, 1, [0, 2, 5], [1.0, 3.0, 2.0])
    >>> dict_row_csr(np.array([5]), np.array([np.nan]), 1e12, fi, fv)
    -1
    """
    n = cols.shape[0]
    unknown = 0
    c = 1
    ordered = True
    fidx[0] = 0
    fval[0] = 1.0
    for p in range(n):
        v = vals[p]
        if not abs(v) <= max_abs:   # NaN fails every comparison
            return -1
        if v != 0.0:
            j = cols[p]
            if j < 0:
                unknown = 1
                continue
            if c > 1 and fidx[c - 1] > j:
                ordered = False
            fidx[c] = j
            fval[c] = v
            c += 1
    if not ordered:   # by column (the names are distinct, so are their columns: any sort will do)
        if c <= 65:
            for a in range(2, c):
                j = fidx[a]
                v = fval[a]
                q = a
                while q > 1 and fidx[q - 1] > j:
                    fidx[q] = fidx[q - 1]
                    fval[q] = fval[q - 1]
                    q -= 1
                fidx[q] = j
                fval[q] = v
        else:
            order = np.argsort(fidx[1:c])
            ci = fidx[1:c][order]
            cv = fval[1:c][order]
            fidx[1:c] = ci
            fval[1:c] = cv
    return 2 * c + unknown


@njit(**_JIT)
def dict_rows_csr(key_ptr, cols, vals, max_abs, tok_ptr, fidx, fval):
    """CSR of a batch of dict records, each as :func:`dict_row_csr` writes it: record i's
    looked-up columns and values are ``cols`` / ``vals`` at ``key_ptr[i]:key_ptr[i + 1]``, its
    entries go to ``fidx`` / ``fval`` at ``tok_ptr[i]:tok_ptr[i + 1]`` (room for
    ``len(cols) + len(key_ptr) - 1`` entries). Returns the entries written; -1 when a value
    is NaN, infinite or beyond ``max_abs`` (nothing usable: the caller encodes the records one
    by one, which raises); ``-2 - i`` when record i is the first with a nonzero value of an
    unknown name (records 0..i-1 are written, ``tok_ptr[:i + 1]``; record i is for the
    per-record path, which registers the name).

    >>> import numpy as np
    >>> tp = np.zeros(3, np.int32); fi = np.zeros(5, np.int32); fv = np.zeros(5)
    >>> m = dict_rows_csr(np.array([0, 2, 3]), np.array([5, 2, 1]), np.array([2.0, 3.0, 0.0]), 1e12, tp, fi, fv)
    >>> m, tp.tolist(), fi[:m].tolist(), fv[:m].tolist()
    (4, [0, 3, 4], [0, 2, 5, 0], [1.0, 3.0, 2.0, 1.0])
    >>> dict_rows_csr(np.array([0, 1, 2]), np.array([5, -1]), np.array([2.0, 1.0]), 1e12, tp, fi, fv), tp[:2].tolist()
    (-3, [0, 2])
    """
    n = key_ptr.shape[0] - 1
    c = 0
    tok_ptr[0] = 0
    for i in range(n):
        r = dict_row_csr(cols[key_ptr[i]:key_ptr[i + 1]], vals[key_ptr[i]:key_ptr[i + 1]], max_abs,
                         fidx[c:], fval[c:])
        if r < 0:
            return -1
        if r & 1:
            return -2 - i
        c += r >> 1
        tok_ptr[i + 1] = c
    return c


from .common import guard_inner as _guard_inner  # noqa: E402 (last: it sees every kernel above)

_guard_inner(globals())   # a Python call of an _INNER kernel raises (common.InnerKernel)
