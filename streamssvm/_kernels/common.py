"""Numba kernels shared by the per-structure modules: structure codes, the jit options, emission
scores, the dense ground-truth marks of set labelings and the token Gram matrix.

Rows are CSR: token t has the entries ``tok_ptr[t]..tok_ptr[t + 1]`` of ``fidx`` (feature
indices) / ``fval`` (values). **Dense rows**: when ``fidx`` is empty while the tokens hold values,
the row stores no indices at all and the value at position ``p - tok_ptr[t]`` of token t is
feature ``p - tok_ptr[t]`` (features 0, 1, 2, ... in order, zeros included). The BlockStore keeps
such a layout for one-token rows whose non-zeros cover most of ``0..max index`` (flag
``FLAG_DENSE_ROW``): 8 bytes per value instead of 12, and the kernels below read the values
contiguously. Every kernel here visits the entries of a token in the same order in both layouts
and a stored zero adds an exact 0, so the two layouts give the same numbers to the bit.

**Allocations** inside the kernels of a default learner's path are ``np.empty(n, np.int64)``,
``np.empty(n, np.int32)``, ``np.empty(n)`` and ``np.empty((m, n))`` (float64), zeroed by hand
where zeros are read:
numba compiles an allocator per distinct (function, argument types), and ``np.zeros`` compiles its
own ``np.empty`` again plus a fill (three compiled functions, ~0.1 CPU s of every cold start per
dtype). ``tests/test_cold_compile.py`` holds the default paths to these four.
"""
import numpy as np
from numba import njit, types
from numba.core.registry import CPUDispatcher
from numba.extending import overload

from .simd import LANES, vec_scores, vec_scores_at

CHAIN = 0
MULTICLASS = 1
MULTILABEL = 2
MLPAIR = 3   # multi-label with pairwise co-occurrence potentials (a fully connected binary MRF)
MLPAIR_MAX_LABELS = 16
HIER = 4     # hierarchical multi-label: labels are the leaves of a tree / DAG (see hierarchy.py)
HIER_MAX_DAG_LEAVES = 16

_JIT = dict(cache=True, nogil=True, no_cfunc_wrapper=True)
#: the options of a kernel called only from other kernels (never from Python, doctests included):
#: no CPython wrapper, whose argument unboxing is compiled code of its own (Python lowering, LLVM
#: passes and machine code) on every cold start, never run; and not cached: its code only ever runs
#: as the copy linked into a cached entry point (``linkonly.py`` skips its own module passes and
#: machine code, which saving it would compile)
_INNER = dict(_JIT, no_cpython_wrapper=True, cache=False)


_ENTRIES = {}


def py_entry(kernel):
    """The Python entry of a kernel that other kernels call (declared ``_INNER``): the same function
    compiled as its own cached kernel with a CPython wrapper, made on first use. Library code, tests
    and doctests call a helper through it (``py_entry(gram)(...)``); kernels call the helper itself,
    so a cold start does not compile the wrapper, the helper's own machine code and its cache entry
    for callers that only ever run its copy linked into theirs. Calling an ``_INNER`` kernel
    directly from Python is not supported (it has no wrapper to unbox its arguments)."""
    entry = _ENTRIES.get(kernel)
    if entry is None:
        entry = _ENTRIES[kernel] = njit(**_JIT)(kernel.py_func)
    return entry


class InnerKernel(CPUDispatcher):
    """A kernel declared ``_INNER`` (no CPython wrapper): other kernels call it as before (numba
    types it as any dispatcher), but a call from Python raises ``TypeError`` naming
    :func:`py_entry` instead of jumping into compiled code that has no wrapper to unbox its
    arguments, which crashes the process."""

    def __call__(self, *args, **kwargs):
        name = f"{self.py_func.__module__}.{self.py_func.__qualname__}"
        raise TypeError(f"{name} is a kernel-internal function with no Python entry: "
                        f"call it from Python as streamssvm._kernels.common.py_entry({self.py_func.__qualname__})(...)")


def guard_inner(namespace):
    """Make every ``_INNER`` kernel defined in a module's ``namespace`` (its ``globals()``, called
    at the end of each kernel module) an :class:`InnerKernel`, so calling one from Python raises
    instead of crashing. The dispatcher keeps its state; only the class (same layout) changes."""
    for obj in list(namespace.values()):
        if type(obj) is CPUDispatcher and obj.targetoptions.get("no_cpython_wrapper"):
            obj.__class__ = InnerKernel

#: Block flag (``meta[j, M_FLAGS]`` of ``streamssvm._kernels.bcfw``): the block's row is stored
#: dense (values of features 0..nnz-1, no index array; see the module docstring). 1, 2, 4 are
#: FLAG_INEXACT_ALPHA (bcfw.py), FLAG_SPARSE, FLAG_TFULL (chainsparse.py).
FLAG_DENSE_ROW = 8


@njit(**_JIT)
def dense_row_span(fidx, a, b):
    """The number of values a one-token row with the entries ``fidx[a:b]`` keeps in the dense
    layout (max index + 1), or -1 when it stays sparse: its indices must be strictly increasing
    from feature 0, and the dense values must take no more bytes than the sparse pairs
    (8 * span <= 12 * nnz, i.e. at least 2/3 of 0..max index non-zero).

    >>> import numpy as np
    >>> dense_row_span(np.array([0, 1, 2, 4], np.int32), 0, 4), dense_row_span(np.array([0, 9], np.int32), 0, 2)
    (5, -1)
    """
    n = b - a
    if n == 0 or fidx[a] != 0:
        return -1
    span = fidx[b - 1] + 1
    if 2 * span > 3 * n:   # too sparse (the cheap test first)
        return -1
    # increasing: counted over the whole row without an exit per entry, which the compiler
    # can vectorize (the rows of a dense array always are; dict rows need not be) -- through a
    # view from 0 and indices q + 1 / q: with fidx[p - 1] numba's negative-index wraparound
    # kept the loop scalar (0.26 us per 785-wide row against 0.07)
    f = fidx[a:b]
    dec = 0
    for q in range(n - 1):
        dec += f[q + 1] <= f[q]
    if dec:
        return -1
    return span


@njit(**dict(_JIT, error_model="numpy"))   # (a division by q: positive, no check per value)
def dense_rows_scan(A, max_abs, nnz, last, q, scaled):
    """Validate the rows of a dense 2-D float64 array as ``multiclass.dense_rows_csr`` does
    (the same return: -1 when a value is NaN or infinite, else -2 when one has |v| > ``max_abs``,
    else 0) and describe their CSR without writing it: ``nnz[i]`` the entries of row i's
    (the bias and its non-zeros), ``last[i]`` its last non-zero column (-1: none). One vectorized
    pass over each row, no branch on its zero pattern, then back from its end to its last
    non-zero. With divisors ``q`` (one per column, > 0; empty: none), the same pass also writes
    ``scaled = A / q`` (numpy's division, the same IEEE quotients): the rows a prediction scores
    (``MulticlassSSVM._dense_ids``) without reading A again.

    >>> import numpy as np
    >>> A = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
    >>> nnz, last, no = np.empty(3, np.int64), np.empty(3, np.int64), np.empty((0, 0))
    >>> dense_rows_scan(A, 1e12, nnz, last, np.empty(0), no), nnz.tolist(), last.tolist()
    (0, [2, 3, 1], [1, 2, -1])
    >>> S = np.empty((3, 3)); _ = dense_rows_scan(A, 1e12, nnz, last, np.array([2.0, 4.0, 3.0]), S); S[1].tolist()
    [0.5, 0.0, 1.0]
    >>> A[1, 1] = np.nan
    >>> dense_rows_scan(A, 1e12, nnz, last, np.empty(0), no), dense_rows_scan(A[:1], 1.0, nnz, last, np.empty(0), no)
    (-1, -2)
    """
    n, d = A.shape
    divide = q.shape[0] > 0
    bad = 0
    for i in range(n):
        row = A[i]
        # one pass that the compiler vectorizes (two sums, no exit): the non-zeros, and whether a
        # value fails the check; a failing row is looked at again for what failed
        c = 0
        out = 0
        if divide:
            s = scaled[i]
            for j in range(d):
                v = row[j]
                c += v != 0.0
                out += not abs(v) <= max_abs   # NaN fails every comparison
                s[j] = v / q[j]
        else:
            for j in range(d):
                v = row[j]
                c += v != 0.0
                out += not abs(v) <= max_abs
        if out:
            for j in range(d):
                v = row[j]
                if v != v or abs(v) == np.inf:
                    return -1
            bad = -2
        at = d - 1   # the last non-zero: from the end (image rows end in a few zeros)
        while at >= 0 and row[at] == 0.0:
            at -= 1
        nnz[i] = c + 1
        last[i] = at
    return bad


def dense_spans(nnz, last):
    """:func:`dense_row_span` of each row :func:`dense_rows_scan` described (its CSR's entries
    ``nnz`` and last non-zero column ``last``): the span (last + 2: the bias, then the columns up
    to the last non-zero), or -1 where it stays sparse (8 * span > 12 * nnz). Vectorized.

    >>> import numpy as np
    >>> dense_spans(np.array([4, 2, 1]), np.array([2, 7, -1])).tolist()
    [4, -1, 1]
    """
    span = last + 2
    return np.where(2 * span > 3 * nnz, -1, span)


@njit(**_JIT)
def dense_row_spans(ex_tok, tok_ptr, fidx, out):
    """``dense_row_span`` of each one-token example of a batch (example e: tokens
    ex_tok[e]..ex_tok[e+1] of the CSR); -1 for longer examples."""
    for e in range(ex_tok.shape[0] - 1):
        t0 = ex_tok[e]
        if ex_tok[e + 1] - t0 != 1:
            out[e] = -1
        else:
            out[e] = dense_row_span(fidx, tok_ptr[t0], tok_ptr[t0 + 1])


@njit(**_INNER)
def write_dense_row(fidx, fval, a, b, out):
    """The values of the sparse entries ``a..b`` in the dense layout: out[fidx[p]] = fval[p],
    zero elsewhere (``out`` holds the span)."""
    for q in range(out.shape[0]):
        out[q] = 0.0
    for p in range(a, b):
        out[fidx[p]] = fval[p]


def _dense_scores(E, coef, fval, a, b, K, S, t):
    """S[t, k] = sum_p (fval[p] * coef) * E[p - a, k] for p = a..b-1 in order (the sparse loop's
    terms and order): up to ``simd.LANES`` classes per pass over the row in one vector of
    accumulators (``simd.vec_scores``: the same operations per class, so the same bits; 0.85 us
    for 785 x 10 against 1.3-1.75 us for the scalar accumulators), when the classes of E and S
    and the values are contiguous; :func:`_dense_scores_scalar` otherwise. Which of the two a
    kernel compiles is decided by the array types (:func:`_ol_dense_scores`)."""


def _dense_scores_vec(E, coef, fval, a, b, K, S, t):
    """:func:`_dense_scores` on arrays whose classes and values are contiguous."""
    k0 = 0
    while k0 < K:
        r = min(K - k0, LANES)
        vec_scores(E.ctypes.data + np.uint64(8 * k0), E.strides[0], fval.ctypes.data, a, b, coef,
                   S.ctypes.data + np.uint64(t * S.strides[0] + 8 * k0), r)
        k0 += r


_dense_scores_contiguous = njit(**_INNER)(_dense_scores_vec)


def _dense_scores_any(E, coef, fval, a, b, K, S, t):
    """:func:`_dense_scores` on arrays of any layout: the vector pass when the strides allow it."""
    if E.strides[1] != 8 or S.strides[1] != 8 or fval.strides[0] != 8:
        _dense_scores_scalar(E, coef, fval, a, b, K, S, t)
        return
    _dense_scores_contiguous(E, coef, fval, a, b, K, S, t)


@overload(_dense_scores, jit_options=_INNER)
def _ol_dense_scores(E, coef, fval, a, b, K, S, t):
    """C-contiguous E, S and fval (numba's layout "C", the kernels' arrays) have contiguous classes
    and values whatever their strides say (a stride of a length-1 axis is never used): such a
    kernel compiles the vector pass alone, without the scalar accumulators (~0.7 CPU s of a cold
    start, for a path that never runs there); other layouts check the strides at run time."""
    if E.layout == "C" and S.layout == "C" and fval.layout == "C":
        return _dense_scores_vec
    return _dense_scores_any


@njit(**_INNER)
def _dense_scores_scalar(E, coef, fval, a, b, K, S, t):
    """:func:`_dense_scores` with the class accumulators in scalar registers, up to ten classes
    per pass over the row (the sparse loop keeps S in memory and reads an index per value). Ten
    accumulators per pass measured fastest (2.3 us for 785 x 10 against 6.7 us for 8 + 2 and ~10
    us sparse)."""
    k0 = 0
    while k0 < K:
        r = K - k0
        if r >= 10:
            a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = 0.0
            for p in range(a, b):
                v = fval[p] * coef
                w = E[p - a]
                a0 += v * w[k0]
                a1 += v * w[k0 + 1]
                a2 += v * w[k0 + 2]
                a3 += v * w[k0 + 3]
                a4 += v * w[k0 + 4]
                a5 += v * w[k0 + 5]
                a6 += v * w[k0 + 6]
                a7 += v * w[k0 + 7]
                a8 += v * w[k0 + 8]
                a9 += v * w[k0 + 9]
            S[t, k0] += a0
            S[t, k0 + 1] += a1
            S[t, k0 + 2] += a2
            S[t, k0 + 3] += a3
            S[t, k0 + 4] += a4
            S[t, k0 + 5] += a5
            S[t, k0 + 6] += a6
            S[t, k0 + 7] += a7
            S[t, k0 + 8] += a8
            S[t, k0 + 9] += a9
            k0 += 10
        elif r >= 8:
            a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
            for p in range(a, b):
                v = fval[p] * coef
                w = E[p - a]
                a0 += v * w[k0]
                a1 += v * w[k0 + 1]
                a2 += v * w[k0 + 2]
                a3 += v * w[k0 + 3]
                a4 += v * w[k0 + 4]
                a5 += v * w[k0 + 5]
                a6 += v * w[k0 + 6]
                a7 += v * w[k0 + 7]
            S[t, k0] += a0
            S[t, k0 + 1] += a1
            S[t, k0 + 2] += a2
            S[t, k0 + 3] += a3
            S[t, k0 + 4] += a4
            S[t, k0 + 5] += a5
            S[t, k0 + 6] += a6
            S[t, k0 + 7] += a7
            k0 += 8
        elif r >= 4:
            a0 = a1 = a2 = a3 = 0.0
            for p in range(a, b):
                v = fval[p] * coef
                w = E[p - a]
                a0 += v * w[k0]
                a1 += v * w[k0 + 1]
                a2 += v * w[k0 + 2]
                a3 += v * w[k0 + 3]
            S[t, k0] += a0
            S[t, k0 + 1] += a1
            S[t, k0 + 2] += a2
            S[t, k0 + 3] += a3
            k0 += 4
        elif r >= 2:
            a0 = a1 = 0.0
            for p in range(a, b):
                v = fval[p] * coef
                w = E[p - a]
                a0 += v * w[k0]
                a1 += v * w[k0 + 1]
            S[t, k0] += a0
            S[t, k0 + 1] += a1
            k0 += 2
        else:
            a0 = 0.0
            for p in range(a, b):
                a0 += fval[p] * coef * E[p - a, k0]
            S[t, k0] += a0
            k0 += 1


@njit(**_INNER)
def emission_add(E, coef, tok_ptr, fidx, fval, L, K, S, zero):
    """S[t, k] += coef * <x_t, E[:, k]> for the first K labels (x_t sparse, CSR, or a dense row:
    see the module docstring); with ``zero`` the rows are cleared first.

    >>> import numpy as np
    >>> E = np.arange(12.0).reshape(4, 3); S = np.zeros((1, 3)); tp = np.array([0, 3], np.int32)
    >>> py_entry(emission_add)(E, 1.0, tp, np.array([0, 2, 3], np.int32), np.array([1.0, 2.0, 3.0]), 1, 3, S, True)
    >>> sparse = S.tolist()
    >>> py_entry(emission_add)(E, 1.0, np.array([0, 4], np.int32), np.zeros(0, np.int32),
    ...              np.array([1.0, 0.0, 2.0, 3.0]), 1, 3, S, True)
    >>> sparse, S.tolist() == sparse
    ([[39.0, 45.0, 51.0]], True)
    """
    dense = fidx.shape[0] == 0
    for t in range(L):
        if zero:
            for k in range(K):
                S[t, k] = 0.0
        if dense:
            # the sums start from 0 in registers: S[t, k] + sum equals the running sum only
            # when S[t, k] is 0, so a non-zero start (``zero`` False) takes the plain loop
            if zero:
                _dense_scores(E, coef, fval, tok_ptr[t], tok_ptr[t + 1], K, S, t)
            else:
                a = tok_ptr[t]
                for p in range(a, tok_ptr[t + 1]):
                    v = fval[p] * coef
                    for k in range(K):
                        S[t, k] += v * E[p - a, k]
            continue
        if zero:   # (as the dense rows: the sums start from 0 in registers)
            _csr_scores(E, coef, fidx, fval, tok_ptr[t], tok_ptr[t + 1], K, S, t)
            continue
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            j = fidx[p]
            v = fval[p] * coef
            for k in range(K):
                S[t, k] += v * E[j, k]


def _csr_scores(E, coef, fidx, fval, a, b, K, S, t):
    """S[t, k] += sum_p (fval[p] * coef) * E[fidx[p], k] for p = a..b-1 in order (the CSR loop's
    terms and order, S[t] zero on entry: see :func:`emission_add`): up to ``simd.LANES`` classes
    per pass over the row in one vector of accumulators (``simd.vec_scores_at``, the dense rows'
    ``vec_scores`` reading row fidx[p]: the same operations per class, so the same bits; the
    loop over the classes with S in memory chains a load, an add and a store per class and
    value) when E, S, fidx (int32) and fval are C-contiguous; that loop otherwise
    (:func:`_ol_csr_scores`)."""


def _csr_scores_vec(E, coef, fidx, fval, a, b, K, S, t):
    """:func:`_csr_scores` on C-contiguous arrays."""
    k0 = 0
    while k0 < K:
        r = min(K - k0, LANES)
        vec_scores_at(E.ctypes.data + np.uint64(8 * k0), E.strides[0], fidx.ctypes.data, fval.ctypes.data, a, b,
                      coef, S.ctypes.data + np.uint64(t * S.strides[0] + 8 * k0), r)
        k0 += r


def _csr_scores_loop(E, coef, fidx, fval, a, b, K, S, t):
    """:func:`_csr_scores` on arrays of any layout: the loop over the classes."""
    for p in range(a, b):
        j = fidx[p]
        v = fval[p] * coef
        for k in range(K):
            S[t, k] += v * E[j, k]


@overload(_csr_scores, jit_options=_INNER)
def _ol_csr_scores(E, coef, fidx, fval, a, b, K, S, t):
    """The vector pass for C-contiguous arrays with int32 indices (the kernels' arrays; the strides
    of a C array's length-1 axis are never used), the loop for the rest."""
    if (E.layout == "C" and S.layout == "C" and fval.layout == "C" and fidx.layout == "C"
            and fidx.dtype == types.int32):
        return _csr_scores_vec
    return _csr_scores_loop


@njit(**_INNER)
def emission_add_csr(E, coef, tok_ptr, fidx, fval, L, K, S, zero):
    """:func:`emission_add` for rows in the CSR layout only: the scoring of the structures whose
    blocks never store a dense row (every one but multiclass: ``blocks.BlockStore`` keeps dense
    rows for one-token multiclass blocks only, and saved states are checked for it), where an
    empty ``fidx`` means tokens without entries, which both loops skip alike (same values). Its
    callers compile no dense-row code (:func:`_dense_scores`: ~1 CPU s of a cold start)."""
    for t in range(L):
        if zero:
            for k in range(K):
                S[t, k] = 0.0
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            j = fidx[p]
            v = fval[p] * coef
            for k in range(K):
                S[t, k] += v * E[j, k]


@njit(**_INNER)
def row_support(st, nrow, K, Kc):
    """The non-zeros of each per-token row of a statistic in the dense layout (rows of width Kc,
    the first K tags used), ascending: a *row support* ``(ptr, pos, tag)``, row t's non-zeros
    being ``st[pos[q]]`` of tag ``tag[q]`` for q in ptr[t]..ptr[t + 1] - 1. A block's rows are
    mixtures of the few labelings it touched, so they hold few non-zeros out of K. (A sparse
    chain block's entries give the same support: ``chainsparse.sp_support``.)"""
    ptr = np.empty(nrow + 1, np.int64)
    pos = np.empty(nrow * K + 1, np.int64)
    tag = np.empty(nrow * K + 1, np.int32)
    q = 0
    ptr[0] = 0
    for t in range(nrow):
        base = t * Kc
        for k in range(K):
            pos[q] = base + k
            tag[q] = k
            q += st[base + k] != 0.0
        ptr[t + 1] = q
    return ptr, pos, tag


@njit(**_INNER)
def support_dot(st, sup, t, s):
    """<st_t, st_s>: the sum over the tags non-zero in both rows (row support ``sup``,
    :func:`row_support`), ascending. The plain sum over every tag has the same value bit for bit:
    the terms left out are +-0 and a sum that starts at +0.0 never becomes -0.0."""
    ptr, pos, tag = sup
    acc = 0.0
    if t == s:
        for p in range(ptr[s], ptr[s + 1]):
            x = st[pos[p]]
            acc += x * x
        return acc
    i, i1 = ptr[t], ptr[t + 1]
    for p in range(ptr[s], ptr[s + 1]):
        k = tag[p]
        while i < i1 and tag[i] < k:
            i += 1
        if i < i1 and tag[i] == k:
            acc += st[pos[i]] * st[pos[p]]
    return acc


@njit(**_INNER)
def stat_emission_sqnorm(G, st, nrow, sup):
    """The emission part of ||Phi_x(st)||^2: sum_{t,s} G[t, s] <st_t, st_s> over the ``nrow``
    per-token rows of a statistic, given their non-zeros (``sup``: :func:`row_support`, or a
    sparse chain block's entries). Only the non-zeros of each row are visited (the zero terms
    are left out, in the same order, so the value is the plain sum's): O(L^2 nnz/row) instead of
    O(L^2 K)."""
    v = 0.0
    for t in range(nrow):
        for s in range(nrow):
            g = G[t, s]
            if g == 0.0:
                continue
            v += g * support_dot(st, sup, t, s)
    return v


@njit(**_INNER)
def _stable_order(v, a, n):
    """The stable ascending order of v[a:a + n] (what ``np.argsort(v[a:a + n], kind="mergesort")``
    returns: equal keys keep their order), by a bottom-up merge sort written out in loops: numba's
    own argsort compiles its generic merge sort, a cold start's largest single piece of the chains'
    Gram-free path (``emission_sqnorm_tokens``)."""
    order = np.empty(n, np.int64)
    tmp = np.empty(n, np.int64)
    for q in range(n):
        order[q] = q
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i = lo
            j = mid
            k = lo
            while i < mid and j < hi:
                if v[a + order[j]] < v[a + order[i]]:
                    tmp[k] = order[j]
                    j += 1
                else:
                    tmp[k] = order[i]
                    i += 1
                k += 1
            while i < mid:
                tmp[k] = order[i]
                i += 1
                k += 1
            while j < hi:
                tmp[k] = order[j]
                j += 1
                k += 1
        order, tmp = tmp, order
        width *= 2
    return order


@njit(**_INNER)
def _token_table(tok_ptr, fidx, fval, t, keys, vals):
    """Token t's features as a sorted table (keys ascending, distinct) into keys / vals; a
    repeated feature's value is the sum of its values in order from 0.0, as ``gram``'s ``mark``
    accumulates it. Returns the table's length."""
    a = tok_ptr[t]
    n = tok_ptr[t + 1] - a
    order = _stable_order(fidx, a, n)   # stable: repeats keep their order
    m = 0
    for q in range(n):
        p = a + order[q]
        f = fidx[p]
        if m > 0 and keys[m - 1] == f:
            vals[m - 1] += fval[p]
        else:
            keys[m] = f
            vals[m] = 0.0 + fval[p]
            m += 1
    return m


@njit(**_INNER)
def _gram_entry(tok_ptr, fidx, fval, t, s, keys, vals, m):
    """``gram``'s G[t, s] (t <= s) from token t's table (``_token_table``): the sum over token s's
    values in order of mark_t[f] * v (the zero terms, which do not change the sum, left out)."""
    acc = 0.0
    for p in range(tok_ptr[s], tok_ptr[s + 1]):
        f = fidx[p]
        i = 0   # np.searchsorted(keys[:m], f), written out (no generic search to compile)
        hi = m
        while i < hi:
            mid = (i + hi) >> 1
            if keys[mid] < f:
                i = mid + 1
            else:
                hi = mid
        if i < m and keys[i] == f:
            acc += vals[i] * fval[p]
    return acc


@njit(**_INNER)
def emission_sqnorm_tokens(tok_ptr, fidx, fval, st, nrow, sup):
    """``stat_emission_sqnorm`` without a stored Gram matrix: the entries <x_t, x_s> it needs,
    those of two rows of ``st`` with non-zeros, computed from the tokens exactly as ``gram``
    computes them (the same value, bit for bit: the left-out pairs add only zeros). Memory
    O(nnz), time O(m^2 nnz/token log) for m non-zero rows, instead of an L x L matrix per block
    (``sup``: the rows' non-zeros, :func:`row_support`)."""
    ptr = sup[0]
    act = np.empty(nrow, np.int64)
    na = 0
    for t in range(nrow):
        if ptr[t + 1] > ptr[t]:
            act[na] = t
            na += 1
    if na == 0:
        return 0.0
    dense = fidx.shape[0] == 0
    nnz = tok_ptr[nrow] - tok_ptr[0]
    keys = np.empty(max(nnz, 1), np.int64)
    vals = np.empty(max(nnz, 1))
    tptr = np.empty(na + 1, np.int64)   # the sorted table of each non-zero row (sparse tokens)
    tptr[0] = 0   # (the rest is written below before it is read)
    if not dense:
        for q in range(na):
            t = act[q]
            o = tptr[q]
            tptr[q + 1] = o + _token_table(tok_ptr, fidx, fval, t, keys[o:], vals[o:])
    # each entry once (G is symmetric: entry (t, s) is computed from the lower index's table
    # either way), kept for the sum below when the na x na scratch is small
    sym = na <= _GRAM_SCRATCH_ROWS
    gm = np.empty((na, na) if sym else (0, 0))
    if sym:
        for qa in range(na):
            for qb in range(qa, na):
                gm[qa, qb] = gm[qb, qa] = _token_gram(dense, tok_ptr, fidx, fval, act[qa], act[qb], qa, keys, vals, tptr)
    v = 0.0
    for qa in range(na):
        t = act[qa]
        for qb in range(na):
            s = act[qb]
            if sym:
                g = gm[qa, qb]
            elif t <= s:
                g = _token_gram(dense, tok_ptr, fidx, fval, t, s, qa, keys, vals, tptr)
            else:
                g = _token_gram(dense, tok_ptr, fidx, fval, s, t, qb, keys, vals, tptr)
            if g == 0.0:
                continue
            v += g * support_dot(st, sup, t, s)
    return v


#: :func:`emission_sqnorm_tokens` keeps the Gram entries it computes in an na x na scratch (each
#: computed once) up to this many non-zero rows (128 KB); beyond, it computes each entry where used.
_GRAM_SCRATCH_ROWS = 128


@njit(**_INNER)
def _token_gram(dense, tok_ptr, fidx, fval, lo, hi, ql, keys, vals, tptr):
    """``gram``'s G[lo, hi] (lo <= hi) for :func:`emission_sqnorm_tokens`: dense tokens directly,
    sparse ones from token lo's sorted table (the ``ql``-th in ``tptr``)."""
    if dense:
        a = tok_ptr[lo]
        c = tok_ptr[hi]
        n = min(tok_ptr[lo + 1] - a, tok_ptr[hi + 1] - c)
        g = 0.0
        for q in range(n):
            g += fval[a + q] * fval[c + q]
        return g
    o = tptr[ql]
    return _gram_entry(tok_ptr, fidx, fval, lo, hi, keys[o:], vals[o:], tptr[ql + 1] - o)


@njit(**_INNER)
def stat_emission_apply(E, tok_ptr, fidx, fval, st, nrow, sup, coef):
    """The emission part of U += coef * Phi_x(st) over the non-zeros of each row only (the zero
    terms would add 0; ``sup``: the rows' non-zeros, :func:`row_support`, or a sparse chain
    block's entries)."""
    ptr, pos, tag = sup
    dense = fidx.shape[0] == 0
    for t in range(nrow):
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            j = p - tok_ptr[t] if dense else fidx[p]
            v = fval[p] * coef
            for q in range(ptr[t], ptr[t + 1]):
                E[j, tag[q]] += v * st[pos[q]]


@njit(**_JIT)
def emission_scores(E, scale, tok_ptr, fidx, fval, L, K, S):
    """S[t, k] = scale * <x_t, E[:, k]> for the first K labels (x_t sparse, CSR)."""
    emission_add(E, scale, tok_ptr, fidx, fval, L, K, S, True)


@njit(**_JIT)
def level_points(best, m_max, ts, Ki, hs, gs):
    """The level points of the slack searches from the best score ``best[m]`` at each number
    m = 1..m_max of wrong labels (-inf: no labeling): h = 1 + best[m] - ts, g = m / Ki.
    Returns the number of points written to hs, gs."""
    c = 0
    for m in range(1, m_max + 1):
        if best[m] > -np.inf:
            hs[c] = 1.0 + best[m] - ts
            gs[c] = m / Ki
            c += 1
    return c

@njit(**_INNER)
def _ml_dense_truth(ytrue, ly, K, ybuf):
    for k in range(K):
        ybuf[k] = 0
    for q in range(ly):
        if ytrue[q] < K:
            ybuf[ytrue[q]] = 1

@njit(**_INNER)
def gram(tok_ptr, fidx, fval, L, G, mark):
    """G[t, s] = <x_t, x_s> for sparse tokens. ``mark`` is a scratch array of size
    n_features filled with zeros (left zeroed on return). Dense rows (empty ``fidx``): the
    products of the values at the same positions, in the same order (``mark`` unused)."""
    if fidx.shape[0] == 0:
        for t in range(L):
            a = tok_ptr[t]
            for s in range(t, L):
                c = tok_ptr[s]
                n = min(tok_ptr[t + 1] - a, tok_ptr[s + 1] - c)
                acc = 0.0
                for q in range(n):
                    acc += fval[a + q] * fval[c + q]
                G[t, s] = acc
                G[s, t] = acc
        return
    for t in range(L):
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            mark[fidx[p]] += fval[p]
        for s in range(t, L):
            acc = 0.0
            for p in range(tok_ptr[s], tok_ptr[s + 1]):
                acc += mark[fidx[p]] * fval[p]
            G[t, s] = acc
            G[s, t] = acc
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            mark[fidx[p]] = 0.0



@njit(inline="always", **_INNER)
def row_sqnorms(F, offs, lens, out):
    """out[e] = ||F[offs[e]:offs[e] + lens[e]]||^2, each summed in order from 0.0 as
    :func:`gram` sums a dense one-token row (the same products added in the same order: the
    same value to the bit), four rows at a time: the four sums advance together over their
    common length and each row's tail finishes alone. A single sum waits on the latency of its
    previous add at every value; four independent ones overlap theirs."""
    m = offs.shape[0]
    e = 0
    while e + 4 <= m:
        o0, o1, o2, o3 = offs[e], offs[e + 1], offs[e + 2], offs[e + 3]
        n = min(min(lens[e], lens[e + 1]), min(lens[e + 2], lens[e + 3]))
        a0 = a1 = a2 = a3 = 0.0
        for q in range(n):
            v0 = F[o0 + q]
            v1 = F[o1 + q]
            v2 = F[o2 + q]
            v3 = F[o3 + q]
            a0 += v0 * v0
            a1 += v1 * v1
            a2 += v2 * v2
            a3 += v3 * v3
        out[e] = _sqnorm_from(F, o0, n, lens[e], a0)
        out[e + 1] = _sqnorm_from(F, o1, n, lens[e + 1], a1)
        out[e + 2] = _sqnorm_from(F, o2, n, lens[e + 2], a2)
        out[e + 3] = _sqnorm_from(F, o3, n, lens[e + 3], a3)
        e += 4
    while e < m:
        out[e] = _sqnorm_from(F, offs[e], 0, lens[e], 0.0)
        e += 1


@njit(inline="always", **_INNER)
def _sqnorm_from(F, o, a, b, acc):
    """acc + the squares of F[o + a:o + b], added in order."""
    for q in range(a, b):
        v = F[o + q]
        acc += v * v
    return acc


guard_inner(globals())   # a Python call of an _INNER kernel raises (InnerKernel)
