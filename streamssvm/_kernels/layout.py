"""The layout of a dual block in the BlockStore's arenas: the one place that knows it.

Blocks live in two arenas (``Iar`` int32, ``Far`` float64); ``meta[slot]`` (``N_META`` int64
columns ``M_*``) holds the offsets and sizes of the block's two segments:

* ints:   ``tok_ptr (L+1) | fidx (nidx) | ytrue (ly) | pool labelings (pcap * lablen)``
* floats: ``fval (nnz) | gram (L*L, or none) | stat (stat size) | pool alpha (pcap) | avg (stat size + 1,
  or none)``

``nidx`` is ``nnz`` except for a one-token block flagged ``FLAG_DENSE_ROW`` (``common.py``),
which stores no ``fidx``: its nnz values are those of features 0..nnz-1, zeros included (the
empty ``fidx`` view tells the kernels).

A sparse chain block (``FLAG_SPARSE``) stores its transition counts as a list of pairs and its
emission statistic M as per-token (tag, value) *entries*: its ints end with
``tn | tcap | pairs (2 * tcap) | en | ecap | tptr (L + 1) | etag (ecap)`` (:func:`entries_pos`: the
offset of ``en``) and its statistic is ``MV (ecap) | TV (tcap)``: token t's entries are
``etag[tptr[t]:tptr[t + 1]]`` (global tag ids, ascending), ``MV[e]`` the value of entry e,
``en = tptr[L]`` entries in use (no start / end rows ``BM``: they are M's first and last rows,
see ``chainsparse.py``); its statistic size is read from ``tcap`` and ``ecap`` in the arena. A new
sparse block's two capacities follow from its segment sizes (:func:`sparse_caps`).

A block flagged ``FLAG_NO_GRAM`` stores no token Gram matrix (its ``G`` view is 0 x 0): the
kernels compute the entries a step needs from the tokens (``common.emission_sqnorm_tokens``, the
same values). A new block keeps its Gram matrix only when the matrix is no larger than the
block's token values, L*L <= nnz, or it has one token (:func:`stores_gram`): a sentence costs
memory linear in its tokens' values, not L^2 (on Brown, ~8 binary features per token, the
Gram matrices of 10k sentences took 47.6 MB of a 156 MB store; dense pixel rows of OCR
letters keep theirs).

A block flagged ``FLAG_AVG`` (the store of a learner that averages its iterates) ends its floats
with its averaging accumulator (:func:`avg_view`): ``zm (stat size) | zl (1)``, the sums
``sum_s W_{s-1} dm_s`` of its statistic's moves and ``sum_s W_{s-1} dL_s`` of its dual loss's
over the steps s on it since the averaging window opened (``W_{s-1} = s (s - 1) / 2``), so that
evicting the block removes exactly its part of the averaged iterate (``bcfw.avg_remove``).

The accessors below are jitted (the kernels call them); :func:`segment_sizes` and
:func:`stat_len` are plain numpy (vectorized over the lengths) for the store.

>>> import numpy as np
>>> from streamssvm._kernels.common import CHAIN
>>> [int(v) for v in segment_sizes(CHAIN, L=3, nnz=5, ly=3, pool_cap=2, Kc=4)]
[18, 52, 3]
"""
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic, overload
from numba.np.arrayobj import make_array, populate_array

from .common import _INNER, _JIT, FLAG_DENSE_ROW  # noqa: F401 (FLAG_DENSE_ROW: a block flag, re-exported)
from .structops import labeling_len, stat_size

#: columns of ``meta[slot]``: int / float segment offsets, tokens, stored values, truth length,
#: loss normalizer Ki, pool capacity, pool entries in use, labeling length, flags, int / float
#: segment sizes.
M_IOFF, M_FOFF, M_L, M_NNZ, M_LY, M_KI, M_PCAP, M_PN, M_LABLEN, M_FLAGS, M_ISIZE, M_FSIZE = range(12)
N_META = 12

#: flags of ``meta[j, M_FLAGS]``: the pool's alpha is no longer exact (an active entry was
#: evicted); a sparse chain block; a sparse block out of room for new pairs; (8: FLAG_DENSE_ROW).
FLAG_INEXACT_ALPHA = 1
FLAG_SPARSE = 2
FLAG_TFULL = 4
#: (flag 16) the block stores no token Gram matrix (see the module docstring).
FLAG_NO_GRAM = 16
#: (flag 32) the block ends with its averaging accumulator (see the module docstring).
FLAG_AVG = 32
#: A sparse chain block's M entries: a new block has room for 2 L + ENTRY_SLACK (its truth's L and
#: one more labeling's worth); a block grown for a step gets room for L + ENTRY_SLACK more entries
#: than the step needs (moves are rare: each leaves its old segment as garbage until a compaction).
ENTRY_SLACK = 4

#: The layout of a store's blocks (a store's blocks are all sparse chain blocks or all dense), as a
#: type: the Arena bundle's ``layout`` field is PAIRS_SPARSE (a numpy uint8 of value 1: every block
#: is flagged ``FLAG_SPARSE``) or PAIRS_DENSE (a numpy int8 of value 0: none is), and
#: :func:`block_views` hands it on as the block's ``sp``, so a kernel compiles the code of the one
#: layout its store holds (``bcfw._chain_only``).
PAIRS_SPARSE, PAIRS_DENSE = np.uint8(1), np.int8(0)
#: The same two layouts in a store whose blocks keep averaging accumulators (``FLAG_AVG``: every
#: block is flagged, or none is): a numpy uint16 of value 1 and an int16 of value 0, so that the
#: kernels of a store without accumulators (the default learners') compile no accumulator code
#: (:func:`avg_view`, :func:`keeps_avg`).
PAIRS_SPARSE_AVG, PAIRS_DENSE_AVG = np.uint16(1), np.int16(0)
_SPARSE_TYPES = (types.uint8, types.uint16)
_AVG_TYPES = (types.uint16, types.int16)


def pairs_layout(sparse, avg=False):
    """The Arena bundle's ``layout`` field of a store of sparse (True) or dense chain blocks,
    whose blocks keep averaging accumulators (``avg``) or not."""
    if avg:
        return PAIRS_SPARSE_AVG if sparse else PAIRS_DENSE_AVG
    return PAIRS_SPARSE if sparse else PAIRS_DENSE


def is_layout(sp):
    """Whether a numba type is that of a ``layout`` field (:func:`pairs_layout`)."""
    return sp in _SPARSE_TYPES + (types.int8, types.int16)


def sparse_layout(sp):
    """Whether the numba type of a ``layout`` field is a sparse store's."""
    return sp in _SPARSE_TYPES


def keeps_avg(sp):
    """Whether the numba type of a ``layout`` field is that of a store whose blocks keep averaging
    accumulators."""
    return sp in _AVG_TYPES


def stores_gram(L, nnz, max_L=None):
    """Whether a new block of L tokens and nnz stored values keeps its L x L Gram matrix: one
    token, or L*L <= nnz (the matrix no larger than the values it is computed from), or
    L <= ``max_L`` when given (vectorized over L and nnz). A step on a block without one
    computes the entries it needs from the tokens, bit for bit the same values
    (``common.emission_sqnorm_tokens``)."""
    L = np.asarray(L)
    if max_L is not None:
        return L <= int(max_L)
    return (L <= 1) | (L * L <= np.asarray(nnz))


@njit(**_INNER)
def gram_len(meta, j):
    """Floats of block j's Gram matrix: L*L, or 0 for a block flagged ``FLAG_NO_GRAM``."""
    if meta[j, M_FLAGS] & FLAG_NO_GRAM:
        return 0
    return meta[j, M_L] * meta[j, M_L]


@njit(**_INNER)
def n_index(meta, j):
    """Feature indices stored for block j: none for a dense row (``FLAG_DENSE_ROW``), else nnz."""
    return 0 if meta[j, M_FLAGS] & FLAG_DENSE_ROW else meta[j, M_NNZ]


@njit(**_INNER)
def pairs_pos(meta, j):
    """(is block j a sparse chain block, offset of its pair list ``tn | tcap | pairs`` in Iar)."""
    kpos = (meta[j, M_IOFF] + meta[j, M_L] + 1 + n_index(meta, j) + meta[j, M_LY]
            + meta[j, M_PCAP] * meta[j, M_LABLEN])
    return (meta[j, M_FLAGS] & FLAG_SPARSE) != 0, kpos


@njit(**_JIT)
def truth_pos(meta, j):
    """Offset in Iar of block j's ground truth (``ly`` ints)."""
    return meta[j, M_IOFF] + meta[j, M_L] + 1 + n_index(meta, j)


@njit(**_INNER)
def stat_pos(meta, j):
    """Offset in Far of block j's statistic region."""
    return meta[j, M_FOFF] + meta[j, M_NNZ] + gram_len(meta, j)


@njit(**_INNER)
def entries_pos(Iar, kpos):
    """Offset in Iar of a sparse chain block's M entries ``en | ecap | tptr | etag`` (after its pairs)."""
    return kpos + 2 + 2 * Iar[kpos + 1]


@njit(**_INNER)
def sparse_caps(isize, fsize, head_i, head_f, L, avg):
    """(pair capacity tcap, entry capacity ecap) of a sparse chain block from its segment sizes:
    ``isize = head_i + 4 + 2 tcap + L + 1 + ecap`` ints (``head_i``: its ints before the pair
    list) and ``fsize = head_f + s (+ s + 1 with the averaging accumulator)`` floats with
    ``s = ecap + tcap`` (``head_f``: its floats but the statistic's)."""
    a = isize - head_i - 5 - L
    b = (fsize - head_f - 1) // 2 if avg else fsize - head_f
    return a - b, 2 * b - a


@njit(**_INNER)
def block_stat_len(kind, L, Kc, sp, Iar, kpos):
    """Size of a block's statistic region (dense: ``stat_size``; sparse: MV | TV)."""
    if sp:
        return Iar[entries_pos(Iar, kpos) + 1] + Iar[kpos + 1]
    return stat_size(kind, L, Kc)


@intrinsic
def square_view(typingctx, a, d):
    """``a[:d * d].reshape((d, d))`` of a C-contiguous 1-D array ``a`` of at least d * d items, as
    a view built in place. numba's ``reshape`` calls a C helper (``numba_attempt_nocopy_reshape``)
    on every call, C-contiguous arrays included, whose exit on error also keeps the kernel from
    dropping the views it does not use: in :func:`block_views` it cost ~0.4 us per block, ~30
    times the views' own cost (a certificate pass over 20k OCR letters: 1.23 us per block)."""
    if not (isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and isinstance(d, types.Integer)):
        return None
    sig = a.copy(ndim=2, layout="C")(a, d)

    def codegen(context, builder, sig, args):
        aty, rty = sig.args[0], sig.return_type
        src = make_array(aty)(context, builder, args[0])
        dst = make_array(rty)(context, builder)
        n = context.cast(builder, args[1], sig.args[1], types.intp)
        item = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(aty.dtype)))
        populate_array(dst, data=src.data, shape=cgutils.pack_array(builder, [n, n]),
                       strides=cgutils.pack_array(builder, [builder.mul(n, item), item]),
                       itemsize=src.itemsize, meminfo=src.meminfo, parent=src.parent)
        return impl_ret_borrowed(context, builder, rty, dst._getvalue())

    return sig, codegen


@njit(**_INNER)
def block_views(arena, j, Kc, kind):
    """Views of block j's segments in the arena (``bundles.Arena``): ``(tok_ptr, fidx, ytrue,
    pool, fval, G, st, alpha, sp, kpos)`` with ``kpos`` of :func:`pairs_pos` and ``sp`` the
    arena's ``layout`` (PAIRS_SPARSE or PAIRS_DENSE: the block's sparse flag as a type)."""
    Iar, Far, meta = arena[0], arena[1], arena[2]
    io = meta[j, M_IOFF]
    fo = meta[j, M_FOFF]
    L = meta[j, M_L]
    nnz = meta[j, M_NNZ]
    nix = n_index(meta, j)
    ly = meta[j, M_LY]
    pcap = meta[j, M_PCAP]
    lablen = meta[j, M_LABLEN]
    tok_ptr = Iar[io:io + L + 1]
    fidx = Iar[io + L + 1:io + L + 1 + nix]   # empty for a dense row (common.py)
    ytrue = Iar[io + L + 1 + nix:io + L + 1 + nix + ly]
    p0 = io + L + 1 + nix + ly
    pool = Iar[p0:p0 + pcap * lablen]
    fval = Far[fo:fo + nnz]
    gl = gram_len(meta, j)
    gd = L if gl > 0 else 0
    G = square_view(Far[fo + nnz:fo + nnz + gl], gd)
    kpos = pairs_pos(meta, j)[1]
    sp = arena[13]
    ss = block_stat_len(kind, L, Kc, sp, Iar, kpos)
    s0 = fo + nnz + gl
    st = Far[s0:s0 + ss]
    alpha = Far[s0 + ss:s0 + ss + pcap]
    return tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos


#: :func:`block_views` inlined into its caller, for a pass over every held block (``bcfw.full_gap_pass``):
#: a call returns its ten views (ten references counted up and down) and keeps the ones the
#: caller does not read; inlined, the kernel reads what it uses. A certificate pass over 20k OCR
#: letters: 1.24 -> 0.74 us per block. Not everywhere: inlined at every one of its eleven call
#: sites, it added compile time for no gain measured in the learning steps.
block_views_inline = njit(inline="always", **_INNER)(block_views.py_func)


def avg_view(arena, j, Kc, kind):
    """Block j's averaging accumulator ``zm | zl`` (stat size + 1 floats after its pool alpha),
    or an empty view when the block keeps none (not flagged ``FLAG_AVG``). A kernel for a store
    whose blocks keep none (the type of the Arena's ``layout``, :func:`keeps_avg`) compiles the
    empty view only."""


def _no_avg_view(arena, j, Kc, kind):
    return arena[1][0:0]


@overload(avg_view, jit_options=_INNER)
def _ol_avg_view(arena, j, Kc, kind):
    return _avg_view if keeps_avg(arena.types[13]) else _no_avg_view


def _avg_view(arena, j, Kc, kind):
    Far, meta = arena[1], arena[2]
    if not meta[j, M_FLAGS] & FLAG_AVG:
        return Far[0:0]
    sp, kpos = pairs_pos(meta, j)
    ss = block_stat_len(kind, meta[j, M_L], Kc, sp, arena[0], kpos)
    z0 = stat_pos(meta, j) + ss + meta[j, M_PCAP]
    return Far[z0:z0 + ss + 1]


def stat_len(kind, L, Kc, sparse=False, tcap=0, ecap=0):
    """Floats of a block's statistic region: the structure's statistic size, or ``MV | TV``
    for a sparse chain block with ``tcap`` pairs and ``ecap`` M entries. Vectorized over L,
    tcap and ecap."""
    if sparse:
        return ecap + tcap
    return stat_size(kind, L, Kc)


def segment_sizes(kind, L, nnz, ly, pool_cap, Kc, sparse=False, tcap=0, nidx=None, gram=True, avg=False, ecap=0):
    """(int size, float size, labeling length) of a block's segments: ``L`` tokens, ``nnz``
    values stored and ``nidx`` feature indices (default nnz; 0 for a dense row), ``ly`` truth
    entries, a pool of ``pool_cap`` labelings, a sparse chain block with room for ``tcap`` pairs
    and ``ecap`` M entries, a Gram matrix when ``gram``, the averaging accumulator when ``avg``.
    Vectorized over L, nnz, ly, nidx, tcap, ecap and gram."""
    lablen = labeling_len(kind, L, Kc)
    isz = L + 1 + (nnz if nidx is None else nidx) + ly + pool_cap * lablen
    if sparse:
        isz = isz + 4 + 2 * tcap + L + 1 + ecap
    else:
        tcap = ecap = 0
    ss = stat_len(kind, L, Kc, sparse, tcap, ecap)
    fsz = nnz + np.where(gram, L * L, 0) + ss + pool_cap + (ss + 1 if avg else 0)
    return isz, fsz, lablen


@njit(**_JIT)
def one_token_meta(meta, slots, nnz, span, template, flags_sparse, flags_dense, isz0, fsz0, i0, f0):
    """The meta rows of m new one-token blocks of one label placed one after the other from
    arena offsets ``i0`` / ``f0``: block e in ``slots[e]`` is ``template`` (the columns every
    such block shares) with its offsets, its values ``span[e]`` and flags ``flags_dense`` where
    ``span[e] > 0`` (a dense row: no indices), else ``nnz[e]`` values and indices and flags
    ``flags_sparse``; its segments ``isz0 + indices`` ints and ``fsz0 + values`` floats (the
    sizes of :func:`segment_sizes`, which grow by one per value and per index). Returns the
    (ints, floats) of the m segments.

    >>> import numpy as np
    >>> meta = np.zeros((3, N_META), np.int64); t = np.zeros(N_META, np.int64); t[M_L] = 1
    >>> one_token_meta(meta, np.array([2, 0]), np.array([3, 4]), np.array([-1, 5]), t, 0, 8, 3, 10, 100, 200)
    (9, 28)
    >>> meta[[2, 0]][:, [M_IOFF, M_FOFF, M_L, M_NNZ, M_FLAGS, M_ISIZE, M_FSIZE]].tolist()
    [[100, 200, 1, 3, 0, 6, 13], [106, 213, 1, 5, 8, 3, 15]]
    """
    io = i0
    fo = f0
    for e in range(slots.shape[0]):
        j = slots[e]
        n = nnz[e]
        nidx = n
        fl = flags_sparse
        if span[e] > 0:
            n = span[e]
            nidx = 0
            fl = flags_dense
        for c in range(template.shape[0]):
            meta[j, c] = template[c]
        isz = isz0 + nidx
        fsz = fsz0 + n
        meta[j, M_IOFF] = io
        meta[j, M_FOFF] = fo
        meta[j, M_NNZ] = n
        meta[j, M_FLAGS] = fl
        meta[j, M_ISIZE] = isz
        meta[j, M_FSIZE] = fsz
        io += isz
        fo += fsz
    return io - i0, fo - f0


from .common import guard_inner as _guard_inner  # noqa: E402 (last: it sees every kernel above)

_guard_inner(globals())   # a Python call of an _INNER kernel raises (common.InnerKernel)
