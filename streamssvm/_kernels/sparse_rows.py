"""Numba kernels for sparse class-weight rows (MEMOIR, Belyy & Sholokhov) and their dense twins.

Sparse layout (all preallocated, grown by the Python wrapper before a call could overflow):

* slots ``s``: ``sval[s]`` (value), ``sfeat[s]`` (feature), ``scls[s]`` (class);
* an open-addressing hash ``(feature, class) -> slot``: ``hkey`` (packed key, -1 empty),
  ``hslot`` — linear probing, load factor kept <= 1/2;
* feature-major posting lists (the inverted index used by exact MIPS): ``fhead[j]`` first slot
  of feature j, ``fnext[s]`` next slot of the same feature;
* class-major lists (row iteration: truncation, sketches): ``chead[c]``, ``cnext[s]``,
  ``cnnz[c]`` slots of row c;
* ``meta = [n_slots, n_zero]`` (int64) and ``fm = [sq]`` (float64, ||V||^2 kept incrementally).

The kernels that touch every structure take them as one plain tuple ``rows = (hkey, hslot, sval,
sfeat, scls, fnext, cnext, fhead, chead, cnnz, meta, fm)`` (in this order; see
``streamssvm.oracles.rows.SparseRows.kernel_rows``).

Summation orders are the same as in the dense kernels (sequential over the entries of x), so
sparse and dense rows give bit-identical scores and updates.
"""
import numpy as np
from numba import njit

_JIT = dict(cache=True, nogil=True, no_cfunc_wrapper=True)
_CSHIFT = 2147483648  # classes < 2**31; key = feature * 2**31 + class


@njit(**_JIT)
def _hash(key, mask):
    x = np.uint64(key)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return np.int64(x & np.uint64(mask))


@njit(**_JIT)
def find(hkey, hslot, f, c):
    """Slot of entry (f, c), -1 when absent."""
    key = np.int64(f) * _CSHIFT + c
    mask = hkey.shape[0] - 1
    i = _hash(key, mask)
    while hkey[i] != -1:
        if hkey[i] == key:
            return np.int64(hslot[i])
        i = (i + 1) & mask
    return np.int64(-1)


@njit(**_JIT)
def _hput(hkey, hslot, key, s):
    mask = hkey.shape[0] - 1
    i = _hash(key, mask)
    while hkey[i] != -1:
        i = (i + 1) & mask
    hkey[i] = key
    hslot[i] = s


@njit(**_JIT)
def dot(hkey, hslot, sval, c, idx, x):
    """<V[c], x> for sparse x, O(nnz(x)) hash probes."""
    acc = 0.0
    for p in range(idx.shape[0]):
        s = find(hkey, hslot, idx[p], c)
        if s >= 0:
            acc += sval[s] * x[p]
        else:
            acc += 0.0 * x[p]
    return acc


@njit(**_JIT)
def axpy(rows, c, idx, x, a, xx):
    """V[c] += a * x (inserting missing entries); ||V||^2 updated as sq + 2a<V[c],x> + a^2|x|^2.
    The caller guarantees room for nnz(x) new slots and a hash load <= 1/2 afterwards."""
    hkey, hslot, sval, sfeat, scls, fnext, cnext, fhead, chead, cnnz, meta, fm = rows
    mask = hkey.shape[0] - 1
    d = 0.0
    for p in range(idx.shape[0]):
        f = idx[p]
        key = np.int64(f) * _CSHIFT + c
        i = _hash(key, mask)
        s = -1
        while hkey[i] != -1:
            if hkey[i] == key:
                s = hslot[i]
                break
            i = (i + 1) & mask
        if s < 0:
            s = meta[0]
            meta[0] += 1
            hkey[i] = key
            hslot[i] = s
            sval[s] = 0.0
            sfeat[s] = f
            scls[s] = c
            fnext[s] = fhead[f]
            fhead[f] = s
            cnext[s] = chead[c]
            chead[c] = s
            cnnz[c] += 1
            meta[1] += 1  # a new entry counts as zero until it is set below
        old = sval[s]
        d += old * x[p]
        new = old + a * x[p]
        sval[s] = new
        if old == 0.0 and new != 0.0:
            meta[1] -= 1
        elif old != 0.0 and new == 0.0:
            meta[1] += 1
    fm[0] += 2.0 * a * d + a * a * xx
    return d


@njit(**_JIT)
def exact_argmax(fhead, fnext, scls, sval, idx, x, n_rows, exclude, scores, mark, touched):
    """argmax_{c != exclude, c < n_rows} <V[c], x> through the feature posting lists, in
    O(sum_j postings(j) + touched) — untouched rows score 0. Ties go to the smallest class
    (as the dense scan). ``scores`` / ``mark`` are zero / False on entry and on exit. Returns
    (class, number of rows touched)."""
    nt = 0
    for p in range(idx.shape[0]):
        f = idx[p]
        if f >= fhead.shape[0]:
            continue
        s = fhead[f]
        while s >= 0:
            c = scls[s]
            if not mark[c]:
                mark[c] = True
                touched[nt] = c
                nt += 1
            scores[c] += sval[s] * x[p]
            s = fnext[s]
    best = -np.inf
    arg = -1
    for q in range(nt):
        c = touched[q]
        if c == exclude or c >= n_rows:
            continue
        v = scores[c]
        if v > best or (v == best and c < arg):
            best = v
            arg = c
    u = 0
    while u < n_rows and (mark[u] or u == exclude):
        u += 1
    if u < n_rows:
        if arg < 0 or best < 0.0 or (best == 0.0 and u < arg):
            arg = u
    for q in range(nt):
        c = touched[q]
        scores[c] = 0.0
        mark[c] = False
    return arg, nt


@njit(**_JIT)
def scores_into(fhead, fnext, scls, sval, idx, x, n_rows, out):
    """out[:n_rows] = V x (every row; O(n_rows + sum_j postings(j)))."""
    for c in range(n_rows):
        out[c] = 0.0
    for p in range(idx.shape[0]):
        f = idx[p]
        if f >= fhead.shape[0]:
            continue
        s = fhead[f]
        while s >= 0:
            c = scls[s]
            if c < n_rows:
                out[c] += sval[s] * x[p]
            s = fnext[s]


@njit(**_JIT)
def rescore(hkey, hslot, sval, cands, n_cands, idx, x, exclude, out):
    """Exact scores of the candidates into ``out``; returns the best (class, score) != exclude."""
    best = -np.inf
    arg = -1
    for q in range(n_cands):
        c = cands[q]
        if c < 0:
            out[q] = -np.inf
            continue
        acc = dot(hkey, hslot, sval, c, idx, x)
        out[q] = acc
        if c == exclude:
            continue
        if acc > best or (acc == best and c < arg):  # ties: the smallest class, as the full scan
            best = acc
            arg = c
    return arg, best


@njit(**_JIT)
def truncate(sval, cnext, chead, meta, fm, ids, thr):
    """Soft-threshold the rows ``ids`` by ``thr`` (l1 truncation), keeping sq and zero count."""
    for q in range(ids.shape[0]):
        s = chead[ids[q]]
        while s >= 0:
            v = sval[s]
            if v > thr:
                new = v - thr
            elif v < -thr:
                new = v + thr
            else:
                new = 0.0
            if v != 0.0 and new == 0.0:
                meta[1] += 1
            fm[0] += new * new - v * v
            sval[s] = new
            s = cnext[s]


@njit(**_JIT)
def abs_sum(sval, n):
    acc = 0.0
    for s in range(n):
        acc += abs(sval[s])
    return acc


@njit(**_JIT)
def sq_sum(sval, n):
    acc = 0.0
    for s in range(n):
        acc += sval[s] * sval[s]
    return acc


@njit(**_JIT)
def row_entries(chead, cnext, sfeat, sval, c, fout, vout):
    """Entries of row c (stored zeros included) into fout / vout; returns their count."""
    m = 0
    s = chead[c]
    while s >= 0:
        fout[m] = sfeat[s]
        vout[m] = sval[s]
        m += 1
        s = cnext[s]
    return m


@njit(**_JIT)
def rebuild(feat, cls, val, n, rows):
    """Fill empty structures with the entries (feat, cls, val)[:n], dropping zeros (compaction,
    load). Entries must be distinct (feature, class) pairs."""
    hkey, hslot, sval, sfeat, scls, fnext, cnext, fhead, chead, cnnz, meta, fm = rows
    m = 0
    nz = 0
    for q in range(n):
        v = val[q]
        if v == 0.0:
            continue
        f = feat[q]
        c = cls[q]
        sval[m] = v
        sfeat[m] = f
        scls[m] = c
        fnext[m] = fhead[f]
        fhead[f] = m
        cnext[m] = chead[c]
        chead[c] = m
        cnnz[c] += 1
        _hput(hkey, hslot, np.int64(f) * _CSHIFT + c, m)
        m += 1
    meta[0] = m
    meta[1] = nz
    return m


@njit(**_JIT)
def rehash(hkey, hslot, sfeat, scls, n):
    for s in range(n):
        _hput(hkey, hslot, np.int64(sfeat[s]) * _CSHIFT + scls[s], s)


# ---------------------------------------------------------------- dense twins
@njit(**_JIT)
def dense_dot(V, c, idx, x):
    acc = 0.0
    for p in range(idx.shape[0]):
        acc += V[c, idx[p]] * x[p]
    return acc


@njit(**_JIT)
def dense_axpy(V, fm, c, idx, x, a, xx):
    d = 0.0
    for p in range(idx.shape[0]):
        old = V[c, idx[p]]
        d += old * x[p]
        V[c, idx[p]] = old + a * x[p]
    fm[0] += 2.0 * a * d + a * a * xx
    return d


@njit(**_JIT)
def dense_truncate(V, fm, ids, thr):
    for q in range(ids.shape[0]):
        c = ids[q]
        for j in range(V.shape[1]):
            v = V[c, j]
            if v > thr:
                new = v - thr
            elif v < -thr:
                new = v + thr
            else:
                new = 0.0
            fm[0] += new * new - v * v
            V[c, j] = new


@njit(**_JIT)
def dense_scores_into(V, n_rows, idx, x, out):
    """out[c] = <V[c], x> for c < n_rows. Four rows at a time (independent accumulators: the
    same per-row summation order as a plain loop, so bit-identical, but no add-latency chain)."""
    m = idx.shape[0]
    c = 0
    while c + 4 <= n_rows:
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        for p in range(m):
            j = idx[p]
            xv = x[p]
            a0 += V[c, j] * xv
            a1 += V[c + 1, j] * xv
            a2 += V[c + 2, j] * xv
            a3 += V[c + 3, j] * xv
        out[c] = a0
        out[c + 1] = a1
        out[c + 2] = a2
        out[c + 3] = a3
        c += 4
    while c < n_rows:
        acc = 0.0
        for p in range(m):
            acc += V[c, idx[p]] * x[p]
        out[c] = acc
        c += 1


# ---------------------------------------------------------------- hashed sketches
@njit(**_JIT)
def _feature_seed(f, seed):
    x = np.uint64(f) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed) * np.uint64(0xD1B54A32D192ED03)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(**_JIT)
def _project_feature(f, v, m, seed, out):
    """out += v * sqrt(m) * (row f of P): the m signs of feature f from a xorshift stream."""
    h = _feature_seed(f, seed)
    for k in range(m):
        if k % 64 == 0 and k > 0:
            h = h ^ (h << np.uint64(13))
            h = h ^ (h >> np.uint64(7))
            h = h ^ (h << np.uint64(17))
        if (h >> np.uint64(k % 64)) & np.uint64(1):
            out[k] += v
        else:
            out[k] -= v


@njit(**_JIT)
def hash_project_add(idx, x, coef, m, seed, out):
    """out += coef * P^T x for the implicit m-column random sign projection P (entries
    +-1/sqrt(m), a deterministic hash of (feature, column, seed)): no d x m matrix, works for
    any feature id."""
    scale = coef / np.sqrt(m)
    for p in range(idx.shape[0]):
        _project_feature(idx[p], scale * x[p], m, seed, out)


@njit(**_JIT)
def sketch_rows(chead, cnext, sfeat, sval, ids, m, seed, out):
    """out[q] = P^T V[ids[q]] (hashed projection of sparse rows)."""
    scale = 1.0 / np.sqrt(m)
    for q in range(ids.shape[0]):
        for k in range(m):
            out[q, k] = 0.0
        s = chead[ids[q]]
        while s >= 0:
            _project_feature(sfeat[s], scale * sval[s], m, seed, out[q])
            s = cnext[s]
