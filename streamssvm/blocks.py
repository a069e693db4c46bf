"""BlockStore: the per-example dual blocks held by a dual learner.

Each held example is a *block*: its compact input (sparse token features and their Gram
matrix), its ground truth, its dual point as a mean sufficient statistic (see
``streamssvm._kernels.structops``), optionally a small pool of labelings with their dual
weights (active set / oracle cache), and a gap estimate. Blocks are stored in two growing
arenas so numba kernels can run many block steps in one call; a slot table (``meta``) holds
the offsets.

The store is bounded: by a number of blocks (``capacity``) and optionally by bytes
(``max_bytes``). When full, the ``"fifo"`` policy evicts the oldest block (a sliding window,
for drifting streams) and ``"reservoir"`` keeps a uniform sample of everything seen
(the new example replaces a random held block with probability capacity / seen; otherwise it
is not held).

The store's counters and queues change only through its methods (the kernels write its arrays
in place). A saved store is checked by :func:`streamssvm.saved_state.validate_store_state`
before it is rebuilt; the union of several saved stores (distributed runs) is
:mod:`streamssvm.distributed._union`.
"""
from __future__ import annotations

import contextlib
import mmap
import sys
import threading
from collections import deque

import numpy as np

from ._kernels import bcfw as K
from ._kernels import chainsparse as CS
from ._kernels import layout as KL
from ._kernels.bundles import Batch, pack
from ._kernels.common import CHAIN, FLAG_DENSE_ROW, MULTICLASS, dense_row_span, dense_row_spans, dense_spans, py_entry
from ._kernels.structops import truth_stat
from .saved_state import _rng_restore, _rng_state, validate_store_state
from .structures.base import Structure

_EVICTION = ("fifo", "reservoir")
_NO_SLOTS = np.zeros(0, dtype=np.int64)
_NO_SLOTS.flags.writeable = False

#: Room for TCAP_FACTOR * (L - 1) tag pairs in a new sparse chain block (the default of
#: ``BlockStore(tcap_factor=...)``): the truth's bigrams, and a few steps' worth more. 8, not 4:
#: with 4, two skipped-then-grown steps on a 30-sentence stream left pairwise steps with the cache
#: at a gap of 8e-3 after 2000 passes where the dense layout (and 8) reach 9e-4
#: (tests/test_sparse_chain.py::test_per_token_loss_sparse_and_dense_bound_each_other); a pair
#: costs 16 bytes, so 8 adds ~1.5 KB to a 25-token sentence.
TCAP_FACTOR = 8

#: A new sparse chain block has room for 2 L + ENTRY_SLACK M entries (:meth:`BlockStore.ecap0`):
#: its truth's L and one more labeling's worth (the oracle's labelings bring few: 1.5 entries per
#: token on Brown); a step that needs more grows the block in the kernel (to L + ENTRY_SLACK more
#: than it needs) or, with no move region left, waits for :meth:`BlockStore.grow_flagged`, as one
#: that needs more pairs does. One value, the kernels'.
ENTRY_SLACK = KL.ENTRY_SLACK

#: A sparse chain block of a store with at most FULL_ENTRIES_KC tags gets all its L x Kc M entries
#: when it is written (:meth:`BlockStore.ecap0`), as the dense layout's M would hold: small tag sets
#: reach most (token, tag) entries within a few passes, and growing blocks one labeling at a time
#: cost OCR-large (26 tags) ~1,000 block moves per refine pass, 409 steps of its first pass waiting
#: for room (``FLAG_TFULL``) and a pass twice as long (0.095 -> 0.197 s). Larger tag sets (Brown:
#: 472) keep the entries a block uses, which is where the layout saves memory.
FULL_ENTRIES_KC = 32

#: How a sparse store's blocks hold M (:attr:`BlockStore._legacy_m`): per-token entries (this
#: version), or, in a state read from an older file until it is rewritten, L x rcap columns of a
#: tag room (``tag_rooms``) or L x Kc (before those).
ENTRIES, ROOMS, KC_WIDE = 0, 1, 2


#: How much larger a growing arena becomes (``BlockStore._ensure_arena``). The unused tail of a
#: lazily zeroed arena costs address space, not memory: the peak resident size of a growth is the
#: used prefix twice (old arena and its copy) whatever the factor, and a smaller factor copies more.
ARENA_GROWTH = 4
#: Arenas of 4 MB or more ask for transparent huge pages (``MADV_HUGEPAGE``; used where the
#: system's THP mode is ``madvise`` or ``always``): populating a block store of 784-d rows cost
#: 19 ms per 5.4k rows in 4 KB pages against 5 ms in 2 MB pages, and the kernels' TLB misses
#: on replayed rows dropped with it (predict_learn_many 57k -> 68k rows per CPU second,
#: ``bench/hotpath.py`` batch row). **Off by default**: the headline suite's batch rows, run
#: back to back off / on / off on an idle machine (medians of 5), gave 1.31-1.33x vs 1.43x
#: scikit-learn on 15%-dense 784-d rows but 0.70-0.71x vs 0.52x (reps 0.45-0.87) on fully
#: dense ones: with THP's defrag mode ``madvise`` a request for huge pages can stall in
#: compaction, a latency a streaming engine must not take by default.
HUGE_PAGES = False
#: A growing arena that reaches ARENA_RESERVE_FROM bytes is replaced by a lazily zeroed map of
#: ARENA_RESERVE bytes of address space (``reserve_zeros``; POSIX memory maps only, and only
#: where the system grants it: otherwise the growth by ARENA_GROWTH above), so that a store of
#: up to ARENA_RESERVE bytes is never copied again: the pages the operating system zeroes are
#: then only those the blocks use. With growth by 4 alone, the copies of the used prefix
#: doubled the page faults of a stream of 784-d rows (2.8 against 1.5 per row on 5.4k upsampled
#: digits, ``bench/hotpath.py``'s batch row: a page fault is a zeroed page, ~1-1.5 us here). The
#: untouched part costs address space, not memory (MAP_NORESERVE: no commit charge either); a
#: pickled or copied store keeps its used prefix only (``BlockStore.__getstate__``).
ARENA_RESERVE = 1 << 30
ARENA_RESERVE_FROM = 1 << 22


def lazy_zeros(n, dtype):
    """A zero array of ``n`` entries whose pages are zeroed by the operating system when first
    written: above 1 MiB on POSIX an anonymous private memory map (no reservation of swap);
    ``np.zeros`` otherwise. From 4 MB on the map asks for transparent huge pages
    (:data:`HUGE_PAGES`). An earlier measurement found numpy's own huge-page advice on
    ``np.zeros`` arenas several times slower at the first touch (compaction fault by fault);
    measured again on the block store's arenas, which :func:`prefault` populates in one call,
    2 MB pages cost 80-86 ms per 5.4k 784-d rows against 98-103 ms in 4 KB pages (6 paired
    repetitions; 2.3k page faults against 15k).

    >>> a = lazy_zeros(1 << 18, np.float64); a.shape, float(a.sum()), a.flags.writeable
    ((262144,), 0.0, True)
    >>> b = lazy_zeros(1 << 20, np.float64); prefault(b, 0, 1 << 19); b[-1] = 2.0   # 8 MB
    >>> float(b.sum()), float(b[:1 << 19].max())
    (2.0, 0.0)
    """
    dtype = np.dtype(dtype)
    nbytes = int(n) * dtype.itemsize
    if nbytes >= 1 << 20 and hasattr(mmap, "MAP_PRIVATE"):
        try:
            flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_NORESERVE", 0)
            mm = mmap.mmap(-1, nbytes, flags=flags)
            if HUGE_PAGES and nbytes >= 1 << 22 and hasattr(mmap, "MADV_HUGEPAGE"):
                try:   # 2 MB pages where the system allows them: one fault per 512 pages
                    mm.madvise(mmap.MADV_HUGEPAGE)
                except OSError:
                    pass
            return np.frombuffer(mm, dtype=dtype, count=int(n))
        except (OSError, ValueError):
            pass
    return np.zeros(n, dtype=dtype)


def reserve_zeros(n, dtype):
    """A :func:`lazy_zeros` memory map of ``n`` entries, or None where the system gives none
    (no POSIX maps, a 32-bit process, an address-space limit, a strict overcommit policy that refuses it): no
    fallback to ``np.zeros``, which would commit the memory.

    >>> a = reserve_zeros(1 << 27, np.float64)   # 1 GiB of address space, none of it touched
    >>> a is None or (a.shape == (1 << 27,) and float(a[-1]) == 0.0)
    True
    """
    dtype = np.dtype(dtype)
    if not hasattr(mmap, "MAP_PRIVATE") or sys.maxsize < 1 << 40:   # POSIX, 64-bit address space
        return None
    try:
        flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_NORESERVE", 0)
        mm = mmap.mmap(-1, int(n) * dtype.itemsize, flags=flags)
    except (OSError, ValueError, OverflowError, MemoryError):
        return None
    return np.frombuffer(mm, dtype=dtype, count=int(n))


_MADV_POPULATE_WRITE = 23   # Linux >= 5.14 (not named by Python's mmap module before 3.13)
PREFAULT = True


def prefault(a, lo, hi):
    """Map the pages of ``a[lo:hi]`` for writing in one system call when ``a`` is a
    :func:`lazy_zeros` memory map (``MADV_POPULATE_WRITE``), instead of one page fault per 4 KB
    page at the first write; nothing otherwise (other systems, older kernels, numpy arrays).

    >>> a = lazy_zeros(1 << 18, np.float64); prefault(a, 10, 5000); float(a[10:5000].sum())
    0.0
    """
    mm = getattr(a.base, "obj", None)
    if not PREFAULT or hi <= lo or not isinstance(mm, mmap.mmap):
        return
    start = lo * a.itemsize // mmap.PAGESIZE * mmap.PAGESIZE
    try:
        mm.madvise(_MADV_POPULATE_WRITE, start, min(hi * a.itemsize, len(mm)) - start)
    except (OSError, ValueError, AttributeError):
        pass


_state_views = threading.local()   # state_views() is active in this thread


@contextlib.contextmanager
def state_views():
    """Within it, :meth:`BlockStore.state` returns the store's own arrays (its live parts, not
    copies), as the learners' ``state()`` returns their weights: for a caller that writes the
    state out, or copies it, before the model changes again (a run's checkpoint,
    :func:`streamssvm.run_state.run_state`: the arrays of a 20k-example store are ~10 MB, ~3 ms of
    copying per checkpoint). The same values either way."""
    prev = getattr(_state_views, "on", False)
    _state_views.on = True
    try:
        yield
    finally:
        _state_views.on = prev


class BlockStore:
    """The dual blocks of a block-coordinate learner (``BCFW``), in numba-friendly arenas.

    Parameters
    ----------
    structure, Kc
        The structure whose examples the blocks hold (it owns the statistic's layout) and the
        label capacity (grown by :meth:`grow_labels`).
    pool_cap
        Labelings kept per block (oracle cache / active set; 0 = none).
    capacity, max_bytes
        Bounds on the number of blocks and on the bytes of the arenas (None: unbounded).
    eviction
        ``"fifo"`` (sliding window) or ``"reservoir"`` (uniform sample of everything seen).
    seed
        Seed of the reservoir's random choices.
    slack
        Blocks hold the slack-rescaled statistic u~_i and its dual loss (``lval``).
    sparse
        Chains only: keep the transition part of each block's statistic as a list of (tag pair,
        count) entries (``streamssvm._kernels.chainsparse``) instead of a dense Kc x Kc table,
        and its emission statistic M as per-token (tag, value) entries, so a block costs
        O(L tags + pairs) floats, not O(L Kc + Kc^2). The list starts with room for
        ``tcap_factor * (L - 1)`` pairs, M with :meth:`ecap0` entries; both grow when a step
        needs more (:meth:`grow_flagged`).
    dense_rows
        Multiclass: keep a row whose non-zeros cover at least 2/3 of features 0..max index as
        its values only, zeros included, without feature indices (``FLAG_DENSE_ROW``, see
        ``streamssvm._kernels.common``): 8 bytes per value instead of 12, read contiguously by
        the step kernels, with the same results to the bit. Decided per block; rows added by
        :meth:`add` stay sparse.

    Attributes read by the learner's kernels: ``Iar`` / ``Far`` (integer / float arenas),
    ``meta`` (one row of offsets per slot), ``alive`` (the ``n`` live slots, dense),
    ``pos`` (slot -> index in ``alive``), ``gest`` (stale block-gap estimates, +inf for blocks
    never visited) with their sum-tree ``tree`` / ``tree_size`` (gap sampling), ``lval``,
    ``last_oracle``. Read-only counters and queues: ``n`` (live blocks), ``seen`` (examples
    offered), ``evicted``, ``order`` (FIFO arrival order) and ``unvisited`` (slots added but not
    yet stepped on); the learner changes them through :meth:`add` / :meth:`reserve` /
    :meth:`write_new`, :meth:`note_seen`, :meth:`fifo_victim`, :meth:`fifo_victims`,
    :meth:`after_learn_one`, :meth:`after_kernel_insert`, :meth:`remove`, :meth:`mark_visited`
    and :meth:`mark_all_visited`. The certificate pass reads the arrays through
    ``BCFW.dual_view()`` and writes none of them.

    Examples
    --------
    >>> import numpy as np
    >>> from streamssvm.structures import MultiClass
    >>> st = BlockStore(MultiClass(), Kc=3, capacity=2)
    >>> gram = lambda tp, fi, fv, L: np.eye(L)
    >>> ex = (np.array([0, 1], dtype=np.int32), np.array([0], dtype=np.int32), np.array([1.0]))
    >>> slots = [st.add(*ex, np.array([k], dtype=np.int32), 1, gram) for k in range(2)]
    >>> st.n, st.choose_victim() == slots[0]     # full: FIFO evicts the oldest
    (2, True)
    """

    #: The longest new block that keeps its Gram matrix; None: a block keeps it when it is no
    #: larger than its token values (``layout.stores_gram``). Blocks without one compute the
    #: entries a step needs (same values).
    gram_max_L = None

    def __init__(self, structure, Kc, pool_cap=0, capacity=100_000, max_bytes=None, eviction="fifo",
                 seed=None, slack=False, sparse=False, tcap_factor=None, dense_rows=True, avg=False):
        if eviction not in _EVICTION:
            raise ValueError(f"eviction must be one of {_EVICTION}, got {eviction!r}")
        if capacity is not None and int(capacity) < 1:
            raise ValueError(f"capacity must be a positive number of blocks, got {capacity!r}")
        if max_bytes is not None and int(max_bytes) < 1024:
            raise ValueError(f"max_bytes must be at least 1024, got {max_bytes!r}")
        self.structure = structure
        self.kind = int(structure.kind)   # the kernels' structure code
        self.Kc = int(Kc)
        self.pool_cap = int(pool_cap)
        self.capacity = int(capacity) if capacity is not None else None
        self.max_bytes = int(max_bytes) if max_bytes is not None else None
        self.eviction = eviction
        self.slack = bool(slack)   # blocks hold u~_i (slack rescaling) instead of the mean statistic
        self.sparse = bool(sparse) and self.kind == CHAIN
        #: how the sparse blocks hold M: ENTRIES (per-token entries, ``_kernels/layout.py``), or, in
        #: a state read from an older file until :meth:`from_state` rewrites it, ROOMS (L x rcap
        #: columns of a tag room) or KC_WIDE (L x Kc) (:meth:`_m_len`)
        self._legacy_m = ENTRIES
        # the move region of the kernels (``_move_region``; a view of its first 6 entries is the
        # Arena's ``moves``, all 0 for a dense store)
        self._moves = np.zeros(8, dtype=np.int64)
        self.dense_rows = bool(dense_rows) and self.kind == MULTICLASS
        self.tcap_factor = int(TCAP_FACTOR if tcap_factor is None else tcap_factor)
        self.avg = bool(avg)   # blocks keep an averaging accumulator (``layout.FLAG_AVG``)
        if self.tcap_factor < 1:
            raise ValueError(f"tcap_factor must be a positive integer, got {tcap_factor!r}")
        self._rng = np.random.default_rng(seed)
        n0 = 64
        self.meta = np.zeros((n0, K.N_META), dtype=np.int64)
        self.gest = np.zeros(n0)
        self.lval = np.zeros(n0)   # L_i per slot (slack rescaling; margin derives it from the statistic)
        self.cw = np.ones(n0)      # the example weight c_i per slot (``bcfw.py``: the weighted dual)
        self.csum = np.zeros(1)    # [N]: sum of c_i over the held blocks (n when every weight is 1)
        self.any_weight = False    # a weight other than 1 was ever held (else every cw is 1 and N = n)
        self.any_gram_free = False   # a block without a Gram matrix was ever written (``stores_gram``)
        self.last_oracle = np.zeros(n0, dtype=np.int64)
        self.birth = np.zeros(n0, dtype=np.int64)  # arrival number of the example in the slot
        self.Iar = np.zeros(1024, dtype=np.int32)
        self.Far = np.zeros(1024, dtype=np.float64)
        self.i_used = 0
        self.f_used = 0
        self.i_live = 0
        self.f_live = 0
        self.alive = np.zeros(n0, dtype=np.int64)   # dense list of live slots
        self.pos = np.full(n0, -1, dtype=np.int64)  # slot -> index in alive, -1 if free
        self._n = 0
        self.free = []
        self.n_slots = 0
        self.tree_size = 64
        self.tree = np.zeros(2 * self.tree_size)
        self._unvisited = set()
        self._order = deque()   # live slots in arrival order (FIFO eviction)
        self._seen = 0          # examples offered to the store
        self._sizes = {}        # (record shape, layout) -> segment sizes, for reserve
        self._evicted = 0
        self.max_L = 1

    # ------------------------------------------------------------------ counters (read-only)
    # Written only by the store's own methods (the kernels write the arrays, never these).
    @property
    def n(self):
        """Number of live blocks."""
        return self._n

    @property
    def seen(self):
        """Examples offered to the store (held or not)."""
        return self._seen

    @property
    def evicted(self):
        """Blocks evicted or removed so far."""
        return self._evicted

    @property
    def order(self):
        """The live slots in arrival order (the FIFO queue), as a tuple."""
        return tuple(self._order)

    @property
    def unvisited(self):
        """Slots added but not stepped on yet (a frozen copy; see :meth:`mark_visited`)."""
        return frozenset(self._unvisited)

    # ------------------------------------------------------------------ sizes
    def nbytes(self):
        """Bytes held for the live blocks (arena segments + slot tables)."""
        self._fold_moves()
        return int(self.i_live * 4 + self.f_live * 8 + self._n * (K.N_META * 8 + 8 * 5))

    def allocated_bytes(self):
        """Bytes allocated by the arenas and slot tables (live blocks, garbage and room)."""
        return int(self.Iar.nbytes + self.Far.nbytes + self.meta.nbytes + self.gest.nbytes
                   + self.last_oracle.nbytes + self.birth.nbytes + self.alive.nbytes
                   + self.pos.nbytes + self.tree.nbytes)

    def __len__(self):
        return self._n

    def slots(self):
        """The live slots (a view of ``alive``, in the kernels' sampling order)."""
        return self.alive[:self._n]

    # ------------------------------------------------------------------ growth
    def _grow_slots(self, need):
        cap = self.meta.shape[0]
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for name, fill in (("meta", 0), ("gest", 0.0), ("lval", 0.0), ("cw", 1.0), ("last_oracle", 0),
                           ("birth", 0), ("alive", 0), ("pos", -1)):
            a = getattr(self, name)
            shape = (new,) + a.shape[1:]
            b = np.full(shape, fill, dtype=a.dtype)
            b[:cap] = a
            setattr(self, name, b)
        if new > self.tree_size:
            ts = self.tree_size
            while ts < new:
                ts *= 2
            self.tree_size = ts
            self._rebuild_tree()

    def _rebuild_tree(self):
        self.tree = np.zeros(2 * self.tree_size)
        leaves = self.tree[self.tree_size:]
        s = self.slots()
        vals = self.gest[s]
        vals = np.where(np.isfinite(vals), np.maximum(vals, 0.0), 0.0)
        leaves[s] = vals
        # level by level (the same sums as node by node, in whole-array operations)
        lo = self.tree_size // 2
        while lo >= 1:
            self.tree[lo:2 * lo] = self.tree[2 * lo:4 * lo:2] + self.tree[2 * lo + 1:4 * lo:2]
            lo //= 2

    def _ensure_arena(self, name, need):
        """Room for ``need`` entries in the arena ``name`` (``"Iar"`` or ``"Far"``); the new
        part is zero. A growing arena is replaced by one four times larger from
        :func:`lazy_zeros` (pages the operating system zeroes when first written, so the unused
        tail costs address space only), into which only the used prefix is copied; from
        ``ARENA_RESERVE_FROM`` bytes on, by a reservation of ``ARENA_RESERVE`` bytes where the
        system grants one (no copy until it is full). The
        previous ``np.zeros`` doubling copied every arena whole and touched each fresh page
        at once: 38% of ``MulticlassSSVM.predict_learn_many`` on 784-feature rows
        (``bench/results/quality_multiclass.md``).

        >>> from streamssvm.structures import MultiClass
        >>> st = BlockStore(MultiClass(), Kc=2); st.Far[:3] = 1.0; st.f_used = 3
        >>> st._ensure_arena("Far", 1100); st.Far.shape, st.Far[2:4].tolist()
        ((4096,), [1.0, 0.0])
        """
        old = getattr(self, name)
        size = old.shape[0]
        if need <= size:
            return
        used = self.i_used if name == "Iar" else self.f_used
        grown = max(need, int(ARENA_GROWTH * size))
        b = None
        if grown * old.dtype.itemsize >= ARENA_RESERVE_FROM and need * old.dtype.itemsize < ARENA_RESERVE:
            b = reserve_zeros(ARENA_RESERVE // old.dtype.itemsize, old.dtype)   # never copied again
        if b is None:
            b = lazy_zeros(grown, old.dtype)
        prefault(b, 0, used)
        b[:used] = old[:used]
        setattr(self, name, b)

    def __getstate__(self):
        """A pickled or copied store keeps the used prefix of an arena of ``ARENA_RESERVE_FROM``
        bytes or more (at least its first 1024 entries), not its room (up to ``ARENA_RESERVE``
        bytes of address space): the copy's arena grows again at its next write. Smaller arenas
        are kept whole (a copy equal to the store, room included).

        >>> import pickle
        >>> from streamssvm.structures import MultiClass
        >>> st = BlockStore(MultiClass(), Kc=2); st._ensure_arena("Far", 1 << 20); st.Far[:3] = 1.0; st.f_used = 3
        >>> c = pickle.loads(pickle.dumps(st)); c.Far.shape, c.Far[:4].tolist()
        ((1024,), [1.0, 1.0, 1.0, 0.0])
        """
        state = self.__dict__.copy()
        for name, used in (("Iar", self.i_used), ("Far", self.f_used)):
            a = state[name]
            if a.nbytes >= ARENA_RESERVE_FROM:
                state[name] = a[:max(used, 1024)].copy()
        return state

    def arena(self, gest=None, tree_size=None):
        """The store's arrays as the kernels take them (``streamssvm._kernels.bundles.Arena``);
        ``gest`` / ``tree_size`` replace the gap estimates / sum-tree size (a pass that must not
        touch them)."""
        # pack(Arena(...)) written as the plain tuple it makes (built per kernel call; the field
        # order is pinned by tests/test_call_plan.py; the move region first: it may grow the arenas)
        moves = self._move_region() if self.sparse else self._moves[:6]
        return (self.Iar, self.Far, self.meta, self.gest if gest is None else gest, self.last_oracle, self.lval,
                self.alive, self.pos, int(self._n), self.tree,
                int(self.tree_size if tree_size is None else tree_size), self.cw, self.csum,
                KL.pairs_layout(self.sparse, self.avg), moves)

    def _move_region(self):
        """The Arena's ``moves`` of a sparse store: the sizes its kernels' moves grew the live
        blocks by folded into the live sizes (:meth:`_fold_moves`), and a region at the arenas'
        end set aside (counted as used) for the moves of the next kernel call when less than half
        of the last one is left, or less than twice the largest block: 1/64 of the used sizes
        plus four times the largest block and at least 4096 ints / 65536 floats (its unused
        rest is garbage until the next compaction). A move grows a block by less than its size,
        so a step never waits for lack of a region (``FLAG_TFULL``) on a block that fits."""
        mv = self._fold_moves()
        ns = self.n_slots
        big_i = int(self.meta[:ns, K.M_ISIZE].max()) if ns else 0
        big_f = int(self.meta[:ns, K.M_FSIZE].max()) if ns else 0
        if (2 * (mv[1] - mv[0]) < max(mv[6], 4 * big_i) or 2 * (mv[3] - mv[2]) < max(mv[7], 4 * big_f)
                or mv[6] == 0):
            ni, nf = 4096 + self.i_used // 64 + 4 * big_i, 65536 + self.f_used // 64 + 4 * big_f
            self._ensure_arena("Iar", self.i_used + ni)
            self._ensure_arena("Far", self.f_used + nf)
            mv[:] = (self.i_used, self.i_used + ni, self.f_used, self.f_used + nf, 0, 0, ni, nf)
            self.i_used += ni
            self.f_used += nf
        return mv[:6]

    def _fold_moves(self):
        """Fold the growth of the blocks the kernels moved (``chainsparse.sp_move_grown``) into
        the live sizes; returns the move state (next int, end int, next float, end float, ints
        grown, floats grown, region's ints, region's floats)."""
        mv = self._moves
        if mv[4] or mv[5]:
            self.i_live += int(mv[4])
            self.f_live += int(mv[5])
            mv[4] = mv[5] = 0
        return mv

    def tcap0(self, L, Kc=None):
        """Initial number of transition pairs of a sparse block of length L (vectorized over L)."""
        Kc = self.Kc if Kc is None else Kc
        return np.minimum(self.tcap_factor * np.maximum(np.asarray(L, dtype=np.int64) - 1, 1), Kc * Kc)

    def ecap0(self, L, Kc=None):
        """Initial M entries of a sparse block of length L: 2 L + ``ENTRY_SLACK``, at most L Kc
        (a token has at most Kc entries; the kernels' scratch holds L Kc); all L Kc with at most
        ``FULL_ENTRIES_KC`` tags (vectorized)."""
        Kc = self.Kc if Kc is None else Kc
        L = np.asarray(L, dtype=np.int64)
        if Kc <= FULL_ENTRIES_KC:
            return L * Kc
        return np.minimum(2 * L + ENTRY_SLACK, L * Kc)

    def stat_len(self, L, tcap=0, Kc=None, ecap=0):
        """Floats of a block's statistic region (dense: ``structure.stat_size``; sparse:
        MV (ecap) | TV (tcap), no start / end rows: ``_kernels/chainsparse.py``)."""
        Kc = self.Kc if Kc is None else Kc
        if self.sparse:
            return ecap + tcap
        return self.structure.stat_size(L, Kc)

    def stores_gram(self, L, nnz):
        """Whether a new block of L tokens and nnz values keeps its Gram matrix (``layout.stores_gram``; every
        block written asks). A False sets :attr:`any_gram_free` for good: the kernels then compile
        their Gram-free code (``bcfw.gram_rule``), which a store of one-token blocks never needs."""
        keep = KL.stores_gram(L, nnz, self.gram_max_L)
        if not self.any_gram_free and not np.all(keep):
            self.any_gram_free = True
        return keep

    def segment_sizes(self, L, nnz, ly, tcap=None, Kc=None, nidx=None, gram=None, ecap=None):
        """(int size, float size, labeling length) of a block's segments; ``tcap`` / ``ecap``: the
        pairs and M entries of a sparse block (default :meth:`tcap0` / :meth:`ecap0`); ``nnz`` the
        values stored, ``nidx`` the feature
        indices stored (default nnz; 0 for a dense row); ``gram``: a Gram matrix is stored
        (default :meth:`stores_gram`). Vectorized over L, nnz, ly, nidx, gram."""
        Kc = self.Kc if Kc is None else Kc
        gram = self.stores_gram(L, nnz) if gram is None else gram
        lablen = self.structure.labeling_len(L, Kc)
        isz = L + 1 + (nnz if nidx is None else nidx) + ly + self.pool_cap * lablen
        if self.sparse:
            tcap = self.tcap0(L, Kc) if tcap is None else tcap
            ecap = self.ecap0(L, Kc) if ecap is None else ecap
            isz = isz + 4 + 2 * tcap + L + 1 + ecap
        else:
            tcap = ecap = 0
        ss = self.stat_len(L, tcap, Kc, ecap)
        fsz = nnz + np.where(gram, L * L, 0) + ss + self.pool_cap + (ss + 1 if self.avg else 0)
        return isz, fsz, lablen

    # ------------------------------------------------------------------ add / remove
    def choose_victim(self):
        """Slot to evict before adding a new block, ``None`` if there is room, or ``-1`` when the
        reservoir decides not to keep the new example."""
        full = self.capacity is not None and self._n >= self.capacity
        if not full:
            return None
        if self.eviction == "fifo":
            return int(self._order[0])
        # reservoir (algorithm R)
        r = self._rng.integers(0, self._seen + 1)
        if r < self.capacity:
            return int(self.alive[self._rng.integers(0, self._n)])
        return -1

    def oldest(self):
        """The slot of the oldest held block (the next FIFO victim)."""
        return int(self._order[0])

    def note_seen(self):
        """Count an offered example that the store does not hold (the reservoir declined it:
        :meth:`choose_victim` returned -1)."""
        self._seen += 1

    def fifo_victim(self):
        """Before one new block of a FIFO store bounded by blocks: the oldest slot, taken off
        the arrival queue, when the store is full (the kernel evicts it, then
        :meth:`after_learn_one`); -1 when there is room."""
        if self.capacity is not None and self._n >= self.capacity:
            return self._order.popleft()
        return -1

    def after_learn_one(self, n, victim):
        """Bookkeeping after the kernel made a :meth:`reserve`-d block live (``n`` live blocks
        now) and evicted ``victim`` (from :meth:`fifo_victim`; -1 for none)."""
        self._n = int(n)
        if victim >= 0:
            self.forget(victim)
            self.maybe_compact()

    def mark_visited(self, slots):
        """The blocks in ``slots`` were stepped on: no longer unvisited."""
        if self._unvisited:
            self._unvisited.difference_update(int(s) for s in slots)

    def mark_all_visited(self):
        """A full pass visited every held block."""
        self._unvisited.clear()

    def unvisited_slots(self):
        """The slots added but not stepped on yet, in increasing order (int64 array)."""
        if not self._unvisited:
            return _NO_SLOTS
        return np.array(sorted(self._unvisited), dtype=np.int64)

    def reserve(self, L, nnz, ly, Ki, fidx=None, weight=1.0):
        """Allocate the segment and slot of one new block (not yet live: the kernel writes it
        and appends it to the alive list, adding ``weight`` to N). ``fidx``: the row's feature
        indices (a one-token row may then be kept dense, see ``dense_rows``); ``weight``: the
        example weight c_i > 0. Returns the slot."""
        pc = self.pool_cap
        flags = (CS.FLAG_SPARSE if self.sparse else 0) | (KL.FLAG_AVG if self.avg else 0)
        nidx = nnz
        if self.dense_rows and L == 1 and fidx is not None and len(fidx):
            span = dense_row_span(fidx, 0, len(fidx))
            if span > 0:
                nnz, nidx, flags = span, 0, FLAG_DENSE_ROW | (flags & KL.FLAG_AVG)
        key = (L, nnz, ly, nidx, self.Kc, self.sparse, self.pool_cap, self.tcap_factor, self.gram_max_L, self.avg)
        sizes = self._sizes.get(key)
        if sizes is None:   # one entry per record shape and layout (a stream has few)
            if len(self._sizes) > 4096:
                self._sizes.clear()
            sizes = self._sizes[key] = tuple(int(v) for v in self.segment_sizes(int(L), int(nnz), int(ly),
                                                                              nidx=int(nidx))) + (
                0 if self.stores_gram(int(L), int(nnz)) else KL.FLAG_NO_GRAM,)
        isz, fsz, lablen, no_gram = sizes
        flags |= no_gram
        slot, io, fo = self._take_slot(isz, fsz)
        self.meta[slot] = (io, fo, L, nnz, ly, max(int(Ki), 1), pc, 0, lablen, flags, isz, fsz)
        self.i_used += isz
        self.f_used += fsz
        self.i_live += isz
        self.f_live += fsz
        self.gest[slot] = np.inf
        self.lval[slot] = 0.0
        if weight != 1.0 or self.any_weight:   # (unweighted stores: every cw is already 1)
            self.cw[slot] = weight
            self.any_weight = True
        self.last_oracle[slot] = -1
        self.birth[slot] = self._seen
        self.pos[slot] = -1
        self._seen += 1
        if L > self.max_L:
            self.max_L = L
        self._order.append(slot)
        return slot

    def _take_slot(self, isz, fsz):
        """A slot for a new block (a freed one first) and the arenas' room for its ``isz`` ints and
        ``fsz`` floats at their used ends: (slot, int offset, float offset). The caller writes the
        meta row and advances the used ends (``reserve``, ``reserve_row``)."""
        if self.free:
            slot = self.free.pop()
        else:
            slot = self.n_slots
            self.n_slots += 1
            if slot >= self.meta.shape[0]:
                self._grow_slots(self.n_slots)
        io, fo = self.i_used, self.f_used
        if io + isz > self.Iar.shape[0]:
            self._ensure_arena("Iar", io + isz)
        if fo + fsz > self.Far.shape[0]:
            self._ensure_arena("Far", fo + fsz)
        return slot, io, fo

    #: reserve_row's plans: per row shape and store layout, the segment sizes and the block's
    #: meta row (its offsets left 0); made from ``_sizes`` (the same sizes and flags)
    _row_plans = None

    def reserve_row(self, fidx):
        """:meth:`reserve` of one unweighted one-token row, ``reserve(1, len(fidx), 1, 1, fidx)``:
        the same slot, segments and bookkeeping, without the general call's arguments (the
        record path, ``BCFW.predict_learn_record``); the meta row is written from a per-shape
        template (:attr:`_row_plans`) and the two offsets, not built as a tuple per record."""
        nnz = nidx = len(fidx)
        dense = False
        if self.dense_rows and nnz:
            span = dense_row_span(fidx, 0, nnz)
            if span > 0:
                nnz, nidx, dense = span, 0, True
        key = (nnz, nidx, dense, self.Kc, self.sparse, self.pool_cap, self.tcap_factor, self.gram_max_L, self.avg)
        plans = self._row_plans
        if plans is None:
            plans = self._row_plans = {}
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = self._row_plan(nnz, nidx, dense)
            if len(plans) > 4096:
                plans.clear()
                plans[key] = plan
        isz, fsz, tmpl = plan
        slot, io, fo = self._take_slot(isz, fsz)
        meta = self.meta
        meta[slot] = tmpl
        meta[slot, 0] = io
        meta[slot, 1] = fo
        self.i_used = io + isz
        self.f_used = fo + fsz
        self.i_live += isz
        self.f_live += fsz
        self.gest[slot] = np.inf
        self.lval[slot] = 0.0
        if self.any_weight:   # weight 1 (an unweighted store's cw is already 1)
            self.cw[slot] = 1.0
        self.last_oracle[slot] = -1
        seen = self._seen
        self.birth[slot] = seen
        self.pos[slot] = -1
        self._seen = seen + 1
        self._order.append(slot)
        if self.max_L < 1:
            self.max_L = 1
        return slot

    def _row_plan(self, nnz, nidx, dense):
        """(int size, float size, meta row with offsets 0) of a one-token row block of ``nnz``
        values and ``nidx`` indices (``dense``: a dense row), as :meth:`reserve` sizes and flags it
        (through the ``_sizes`` cache, whose first computation also notes a Gram-free block)."""
        flags = (CS.FLAG_SPARSE if self.sparse else 0) | (KL.FLAG_AVG if self.avg else 0)
        if dense:
            flags = FLAG_DENSE_ROW | (flags & KL.FLAG_AVG)
        key = (1, nnz, 1, nidx, self.Kc, self.sparse, self.pool_cap, self.tcap_factor, self.gram_max_L, self.avg)
        sizes = self._sizes.get(key)
        if sizes is None:
            if len(self._sizes) > 4096:
                self._sizes.clear()
            sizes = self._sizes[key] = tuple(int(v) for v in self.segment_sizes(1, int(nnz), 1, nidx=int(nidx))) + (
                0 if self.stores_gram(1, int(nnz)) else KL.FLAG_NO_GRAM,)
        isz, fsz, lablen, no_gram = sizes
        tmpl = np.array((0, 0, 1, nnz, 1, 1, self.pool_cap, 0, lablen, flags | no_gram, isz, fsz), dtype=np.int64)
        return isz, fsz, tmpl

    def _admitted(self, slots, m, ti, tf):
        """The bookkeeping of ``m`` new blocks (``slots``: their indices or a slice of them)
        written with ``ti`` / ``tf`` arena entries: used and live sizes, fresh gap estimates,
        losses, oracle ticks, births in arrival order, no queue position yet."""
        self.i_used += ti
        self.f_used += tf
        self.i_live += ti
        self.f_live += tf
        self.gest[slots] = np.inf
        self.lval[slots] = 0.0
        self.cw[slots] = 1.0
        self.last_oracle[slots] = -1
        self.birth[slots] = self._seen + np.arange(m)
        self.pos[slots] = -1
        self._seen += m

    def reserve_rows(self, tok_ptr, fidx):
        """:meth:`reserve` of m one-token blocks (row e: ``fidx[tok_ptr[e]:tok_ptr[e + 1]]``, one
        label, ``Ki`` 1) in order, for all of them at once: the same slots, segments, meta rows
        and bookkeeping as m calls. Returns the slots (int64). What every row shares (one token,
        one label: the Gram rule, the labeling length, the statistic) is computed once, and the
        meta rows are written from that template (a run is one kernel call per micro-batch:
        this is its Python side's largest part)."""
        m = len(tok_ptr) - 1
        tok_ptr = np.asarray(tok_ptr, dtype=np.int64)
        span = None
        if self.dense_rows and m:
            span = np.empty(m, dtype=np.int64)
            dense_row_spans(np.arange(m + 1, dtype=np.int64), tok_ptr, fidx, span)
        slots = self._place_rows(tok_ptr[1:] - tok_ptr[:-1], span)[0]
        self._order.extend(slots.tolist())
        return slots

    def write_dense(self, A, nnz, last, ys, mark, scaling=None):
        """:meth:`write_new` of m one-token examples of one label each (``Ki`` 1) whose rows are
        the rows of a dense 2-D float64 array ``A`` (validated: ``FeatureIndex.check_dense``, which
        gives ``nnz`` and ``last``, the entries of each row's CSR and its last non-zero column),
        label ids ``ys``: the same slots, segments, meta rows and bookkeeping as :meth:`write_new`
        of the rows' CSR (``FeatureIndex.dense_csr``), without the CSR (``bcfw.insert_dense_rows``
        reads the rows). ``scaling``: a ColumnScaler's ``(sumsq, count)``, which take the rows in
        order as ``ColumnScaler.learn_scaled`` of their CSR would (the blocks hold the rows
        scaled so), or None. Returns the slots (not live yet, as with :meth:`write_new`)."""
        m = A.shape[0]
        span = dense_spans(nnz, last) if self.dense_rows and m else None
        i0, f0 = self.i_used, self.f_used
        slots, ti, tf = self._place_rows(nnz, span)
        prefault(self.Iar, i0, i0 + ti)
        prefault(self.Far, f0, f0 + tf)
        K.insert_dense_rows(self.kind, self.Kc, (self.Iar, self.Far, self.meta, KL.pairs_layout(self.sparse, self.avg)),
                            slots, A, np.asarray(ys, dtype=np.int32), mark, self.slack, scaling)
        return slots

    def _place_rows(self, nnz, span):
        """The slots, segments, meta rows and bookkeeping of m new one-token blocks of one label
        and ``Ki`` 1 whose rows have ``nnz`` entries (int64), ``span`` (or None) their
        ``dense_row_span`` where rows may be kept dense (``dense_rows``); nothing is written in
        the segments. Returns (slots, int entries, float entries) of the m segments. What every
        row shares (the Gram rule, the labeling length, the statistic: :meth:`segment_sizes` of
        a row without values) is computed once; the meta rows are written by one numba loop
        (``layout.one_token_meta``)."""
        m = nnz.shape[0]
        tmpl = self._one_token_template()
        nfree = min(len(self.free), m)
        if nfree:
            slots = np.empty(m, dtype=np.int64)
            for q in range(nfree):
                slots[q] = self.free.pop()
            slots[nfree:] = np.arange(self.n_slots, self.n_slots + m - nfree)
            at = slots
        else:   # new slots, in order: the bookkeeping written through a slice
            slots = np.arange(self.n_slots, self.n_slots + m, dtype=np.int64)
            at = slice(self.n_slots, self.n_slots + m)
        self.n_slots += m - nfree
        if self.n_slots > self.meta.shape[0]:
            self._grow_slots(self.n_slots)
        ti, tf = KL.one_token_meta(self.meta, slots, np.asarray(nnz, dtype=np.int64),
                                   np.full(m, -1, dtype=np.int64) if span is None else span, *tmpl,
                                   self.i_used, self.f_used)
        if self.i_used + ti > self.Iar.shape[0]:
            self._ensure_arena("Iar", self.i_used + ti)
        if self.f_used + tf > self.Far.shape[0]:
            self._ensure_arena("Far", self.f_used + tf)
        self._admitted(at, m, ti, tf)
        if m and self.max_L < 1:
            self.max_L = 1
        return slots, ti, tf

    def _one_token_template(self):
        """``one_token_meta``'s (template row, sparse flags, dense-row flags, int size, float
        size) of a one-token block of one label: one token, one label, ``Ki`` 1, an empty pool;
        reserve's flags (an averaging accumulator, FLAG_AVG, on every block of a store that keeps
        them; no Gram matrix where a one-token block keeps none)."""
        gram = bool(self.stores_gram(1, 1))
        tail = (KL.FLAG_AVG if self.avg else 0) | (0 if gram else KL.FLAG_NO_GRAM)
        isz0, fsz0, lablen = (int(v) for v in self.segment_sizes(1, 0, 1, nidx=0, gram=gram))
        row = np.zeros(KL.N_META, dtype=np.int64)
        row[KL.M_L] = row[KL.M_LY] = row[KL.M_KI] = 1
        row[KL.M_PCAP] = self.pool_cap
        row[KL.M_LABLEN] = lablen
        return row, (CS.FLAG_SPARSE if self.sparse else 0) | tail, FLAG_DENSE_ROW | tail, isz0, fsz0

    #: a store full from the start plans its run in vector form (:meth:`_plan_full`), else row by row
    VECTOR_PLANS = True

    def plan_evicting_rows(self, tok_ptr, fidx, m, averaging, due=None, not_averaging=False):
        """The slots, victims and meta rows of up to ``m`` one-token rows (``reserve_rows``' rows)
        arriving at a full FIFO store, as record by record (``BCFW._learn_fifo``) would give them:
        before row e the oldest held block is its victim (``fifo_victim``) and row e takes the
        last freed slot (``_take_slot``: the victim of row e - 1 once the store is full), its
        segments at the arenas' used ends. Nothing is changed: the kernel writes each row's meta
        row and slot bookkeeping when its turn comes (``microbatch.predict_learn_examples``: its
        slot may hold an earlier row's victim until then), and :meth:`admit_planned_rows` does
        the rest after it. Returns ``(c, slots, victims, metas, after)``, ``c`` the rows one
        kernel call may take: it stops before a row that would grow the slot table, and after
        the row whose eviction compacts the arenas (``maybe_compact``), after an eviction with
        ``averaging`` (a learner that averages with these blocks' accumulators) whose victim
        keeps none, or while ``not_averaging`` (the learner restarts averaging there, over every
        held block), or after which a full gap pass is due (``due`` = (steps since the last
        pass, steps per row, passes' spacing ``gap_every``): due after row e when
        ``steps + (e + 1) * per >= gap_every * held``)."""
        tok_ptr = np.asarray(tok_ptr[:m + 1], dtype=np.int64)
        nnz = tok_ptr[1:] - tok_ptr[:-1]
        span = np.full(m, -1, dtype=np.int64)
        if self.dense_rows and m:
            dense_row_spans(np.arange(m + 1, dtype=np.int64), tok_ptr, fidx, span)
        metas = np.empty((m, KL.N_META), dtype=np.int64)
        KL.one_token_meta(metas, np.arange(m, dtype=np.int64), nnz, span, *self._one_token_template(), self.i_used,
                          self.f_used)
        meta, cap = self.meta, self.capacity
        self._fold_moves()
        if (self.VECTOR_PLANS and cap is not None and self._n >= cap and 0 < m <= len(self._order)
                and (self.free or meta.shape[0] > self.n_slots)):
            return self._plan_full(m, metas, averaging, due, not_averaging)
        free = list(self.free)
        old = iter(self._order)          # the held blocks, oldest first
        mine = deque()                   # rows of this run held, in arrival order (evicted after the old)
        n, n_slots, spare = self._n, self.n_slots, meta.shape[0] - self.n_slots
        i_used, i_live, f_live = self.i_used, self.i_live, self.f_live
        slots = np.empty(m, dtype=np.int64)
        victims = np.full(m, -1, dtype=np.int64)
        c = 0
        for e in range(m):
            if free:
                s = free.pop()
            elif spare > 0:
                s, n_slots, spare = n_slots, n_slots + 1, spare - 1
            else:
                break   # the slot table would grow: the record path's turn
            v = -1
            if cap is not None and n >= cap:
                v = next(old, -1)
                vrow = meta[v] if v >= 0 else metas[mine[0]]   # its meta row, read before the kernel
                if v < 0:
                    v = int(slots[mine.popleft()])
                i_live -= int(vrow[KL.M_ISIZE])
                f_live -= int(vrow[KL.M_FSIZE])
                no_avg = not vrow[KL.M_FLAGS] & KL.FLAG_AVG
            slots[e], victims[e] = s, v
            mine.append(e)
            i_used += int(metas[e, KL.M_ISIZE])
            i_live += int(metas[e, KL.M_ISIZE])
            f_live += int(metas[e, KL.M_FSIZE])
            if v >= 0:
                free.append(v)
            else:
                n += 1
            c = e + 1
            if v >= 0 and ((averaging and (no_avg or not_averaging)) or (i_used > 4096 and i_live * 2 < i_used)):
                break
            if due is not None and due[0] + (e + 1) * due[1] >= due[2] * n:
                break
        f_used = int(self.f_used + metas[:c, KL.M_FSIZE].sum())
        return c, slots[:c], victims[:c], metas[:c], (free, n_slots, i_used, f_used, i_live, f_live)

    def _plan_full(self, m, metas, averaging, due, not_averaging):
        """:meth:`plan_evicting_rows` of a store full from the start, whose m rows evict m held
        blocks (the oldest ``m`` of the arrival order) and take a freed slot each (or one new
        slot for the first), in vector form: row 0 takes the last freed slot and row e > 0 the
        victim of row e - 1 (``_take_slot`` pops the slot ``forget`` freed last); the same plan
        as the record-by-record loop (``tests/test_full_store_runs.py`` compares them)."""
        from itertools import islice
        meta = self.meta
        victims = np.fromiter(islice(self._order, m), dtype=np.int64, count=m)
        slots = np.empty(m, dtype=np.int64)
        slots[1:] = victims[:-1]
        free = list(self.free)
        n_slots = self.n_slots
        if free:
            slots[0] = free.pop()
        else:
            slots[0], n_slots = n_slots, n_slots + 1
        isz, fsz = metas[:, KL.M_ISIZE], metas[:, KL.M_FSIZE]
        vrows = meta[victims]
        i_used = self.i_used + np.cumsum(isz)
        i_live = self.i_live + np.cumsum(isz - vrows[:, KL.M_ISIZE])
        stop = (i_used > 4096) & (2 * i_live < i_used)
        if averaging:
            stop |= not_averaging | ((vrows[:, KL.M_FLAGS] & KL.FLAG_AVG) == 0)
        if due is not None:
            stop |= due[0] + np.arange(1, m + 1) * due[1] >= due[2] * self._n
        c = int(np.argmax(stop)) + 1 if stop.any() else m
        free.append(int(victims[c - 1]))
        f_live = self.f_live + int((fsz[:c] - vrows[:c, KL.M_FSIZE]).sum())
        f_used = int(self.f_used + fsz[:c].sum())
        return c, slots[:c], victims[:c], metas[:c], (free, n_slots, int(i_used[c - 1]), f_used, int(i_live[c - 1]),
                                                      f_live)

    def ensure_used(self, i_used, f_used):
        """Room in the arenas for ``i_used`` ints and ``f_used`` floats (a planned run's segments)."""
        if i_used > self.Iar.shape[0]:
            self._ensure_arena("Iar", i_used)
        if f_used > self.Far.shape[0]:
            self._ensure_arena("Far", f_used)

    def admit_planned_rows(self, plan, n_final):
        """The Python side's bookkeeping of a :meth:`plan_evicting_rows` run the kernel took
        (``n_final`` blocks held after it): the arrival order, freed and taken slots, used and
        live sizes, births, evictions, as record by record (``reserve_row``, then
        ``after_learn_one``), then ``maybe_compact``."""
        c, slots, victims, _, (free, n_slots, i_used, f_used, i_live, f_live) = plan
        order = self._order
        gone = victims[victims >= 0].tolist()
        order.extend(slots.tolist())   # each row's slot after its victim left the front: the same queue
        for _ in range(len(gone)):
            order.popleft()
        if self._unvisited:
            self._unvisited.difference_update(gone)
        self._evicted += len(gone)
        seen = self._seen
        if len(np.unique(slots)) == c:
            self.birth[slots] = seen + np.arange(c)
        else:   # a slot taken twice (the run evicted its own rows): its last row's
            for e in range(c):
                self.birth[slots[e]] = seen + e
        self.free[:] = free
        self.n_slots = n_slots
        self.i_used, self.f_used, self.i_live, self.f_live = i_used, f_used, i_live, f_live
        self._seen = seen + c
        self._n = int(n_final)
        if c and self.max_L < 1:
            self.max_L = 1
        self.maybe_compact()

    def forget(self, v):
        """Bookkeeping for a block no longer in the alive list (evicted by the kernel, or
        :meth:`remove`-d): its slot is free, its segments garbage until the next compaction."""
        self.free.append(int(v))
        self.i_live -= int(self.meta[v, K.M_ISIZE])
        self.f_live -= int(self.meta[v, K.M_FSIZE])
        self._unvisited.discard(int(v))
        self._evicted += 1

    def over_bytes(self):
        """The live blocks exceed ``max_bytes`` (and more than one block is held)."""
        return self.max_bytes is not None and self.nbytes() > self.max_bytes and self._n > 1

    def add(self, tok_ptr, fidx, fval, ytrue, Ki, gram_fn, weight=1.0):
        """Store a new block, live and unvisited, with example weight ``weight`` (added to N), and
        count its example as seen; returns its slot. ``gram_fn(tok_ptr, fidx, fval, L)`` -> (L, L)."""
        L = len(tok_ptr) - 1
        nnz = len(fidx)
        ly = len(ytrue)
        isz, fsz, lablen = (int(v) for v in self.segment_sizes(L, nnz, ly))
        gl = L * L if self.stores_gram(L, nnz) else 0
        if self.free:
            slot = self.free.pop()
        else:
            slot = self.n_slots
            self.n_slots += 1
            self._grow_slots(self.n_slots)
        io, fo = self.i_used, self.f_used
        self._ensure_arena("Iar", io + isz)
        self._ensure_arena("Far", fo + fsz)
        I = self.Iar
        Fa = self.Far
        I[io:io + L + 1] = tok_ptr
        I[io + L + 1:io + L + 1 + nnz] = fidx
        I[io + L + 1 + nnz:io + L + 1 + nnz + ly] = ytrue
        p0 = io + L + 1 + nnz + ly
        I[p0:p0 + self.pool_cap * lablen] = 0
        Fa[fo:fo + nnz] = fval
        if gl:
            Fa[fo + nnz:fo + nnz + gl] = gram_fn(tok_ptr, fidx, fval, L).ravel()
        kp = p0 + self.pool_cap * lablen
        tcap, ecap = (int(self.tcap0(L)), int(self.ecap0(L))) if self.sparse else (0, 0)
        ss = self.stat_len(L, tcap, ecap=ecap)
        s0 = fo + nnz + gl
        Fa[s0:s0 + ss + self.pool_cap + (ss + 1 if self.avg else 0)] = 0.0   # with the averaging accumulator
        if self.sparse:
            I[kp:kp + 2] = (0, tcap)
            ep = kp + 2 + 2 * tcap
            I[ep:ep + 3 + L] = 0
            I[ep + 1] = ecap
            if not self.slack:
                yt = np.asarray(ytrue, dtype=np.int32)
                py_entry(CS.sp_register)(I, kp, Fa[s0:s0 + ss], Fa[0:0], yt, L)
                py_entry(CS.sp_labeling_stat)(I, kp, yt, L, Fa[s0:s0 + ss], 1.0)
        elif not self.slack:
            truth_stat(self.kind, np.asarray(ytrue, dtype=np.int32), ly, L, self.Kc, Fa[s0:s0 + ss], 1.0)
        self.lval[slot] = 0.0
        self.cw[slot] = weight
        self.any_weight |= weight != 1.0
        self.csum[0] += weight
        pn = 0
        if self.pool_cap > 0:
            # the ground truth is the first pool entry, with all the dual mass
            I[p0:p0 + lablen] = self.structure.truth_labeling(ytrue, self.Kc, self.Kc)
            Fa[s0 + ss] = 1.0
            pn = 1
        m = self.meta[slot]
        m[:] = 0
        m[K.M_IOFF], m[K.M_FOFF], m[K.M_L], m[K.M_NNZ], m[K.M_LY] = io, fo, L, nnz, ly
        m[K.M_KI], m[K.M_PCAP], m[K.M_PN], m[K.M_LABLEN] = max(int(Ki), 1), self.pool_cap, pn, lablen
        m[K.M_ISIZE], m[K.M_FSIZE] = isz, fsz
        m[K.M_FLAGS] = ((CS.FLAG_SPARSE if self.sparse else 0) | (0 if self.stores_gram(L, nnz) else KL.FLAG_NO_GRAM)
                        | (KL.FLAG_AVG if self.avg else 0))
        self.i_used += isz
        self.f_used += fsz
        self.i_live += isz
        self.f_live += fsz
        self.gest[slot] = np.inf
        self.last_oracle[slot] = -1
        self.birth[slot] = self._seen
        self.pos[slot] = self._n
        self.alive[self._n] = slot
        self._n += 1
        self._unvisited.add(slot)
        self.max_L = max(self.max_L, L)
        self._order.append(slot)
        self._seen += 1
        return slot

    def fifo_victims(self, new_slots):
        """Slots that the arrivals ``new_slots`` evict under FIFO (victims[e] before arrival e,
        -1 for none); updates the arrival order."""
        m = len(new_slots)
        victims = np.full(m, -1, dtype=np.int64)
        n = self._n
        cap = self.capacity
        if cap is None or n + m <= cap:   # room for all: no victim
            self._order.extend(np.asarray(new_slots).tolist())
            return victims
        for e in range(m):
            if cap is not None and n >= cap:
                victims[e] = self._order.popleft()
                n -= 1
            self._order.append(int(new_slots[e]))
            n += 1
        return victims

    def write_new(self, ex_tok, tok_ptr, fidx, fval, y_ptr, ys, Ki, mark):
        """Write m new blocks' segments into fresh slots without making them live (the kernel
        appends them to the alive list as they arrive). Returns the slots."""
        m = len(ex_tok) - 1
        L = np.diff(ex_tok).astype(np.int64)
        nnz = (tok_ptr[ex_tok[1:]] - tok_ptr[ex_tok[:-1]]).astype(np.int64)
        ly = np.diff(y_ptr).astype(np.int64)
        Kc = self.Kc
        nidx = nnz
        dense = None
        if self.dense_rows and m:   # rows kept dense: their span of values, no indices
            span = np.empty(m, dtype=np.int64)
            dense_row_spans(np.asarray(ex_tok, dtype=np.int64), np.asarray(tok_ptr, dtype=np.int64), fidx, span)
            dense = span > 0
            if dense.any():
                nnz = np.where(dense, span, nnz)
                nidx = np.where(dense, 0, nnz)
            else:
                dense = None
        isz, fsz, lablen = self.segment_sizes(L, nnz, ly, nidx=nidx)   # (vectorized over L)
        lablen = np.zeros(m, dtype=np.int64) + lablen
        isz = np.zeros(m, dtype=np.int64) + isz
        fsz = np.zeros(m, dtype=np.int64) + fsz
        slots = np.empty(m, dtype=np.int64)
        nfree = min(len(self.free), m)
        for q in range(nfree):
            slots[q] = self.free.pop()
        nnew = m - nfree
        slots[nfree:] = np.arange(self.n_slots, self.n_slots + nnew)
        self.pos[slots[slots < self.pos.shape[0]]] = -1
        self.n_slots += nnew
        self._grow_slots(self.n_slots)
        ioff = self.i_used + np.concatenate([[0], np.cumsum(isz)[:-1]])
        foff = self.f_used + np.concatenate([[0], np.cumsum(fsz)[:-1]])
        ti, tf = int(isz.sum()), int(fsz.sum())
        self._ensure_arena("Iar", self.i_used + ti)
        self._ensure_arena("Far", self.f_used + tf)
        prefault(self.Iar, self.i_used, self.i_used + ti)
        prefault(self.Far, self.f_used, self.f_used + tf)
        M = self.meta
        M[slots] = 0
        M[slots, K.M_IOFF] = ioff
        M[slots, K.M_FOFF] = foff
        M[slots, K.M_L] = L
        M[slots, K.M_NNZ] = nnz
        M[slots, K.M_LY] = ly
        M[slots, K.M_KI] = np.maximum(np.asarray(Ki, dtype=np.int64), 1)
        M[slots, K.M_PCAP] = self.pool_cap
        M[slots, K.M_LABLEN] = lablen
        M[slots, K.M_ISIZE] = isz
        M[slots, K.M_FSIZE] = fsz
        M[slots, K.M_FLAGS] = CS.FLAG_SPARSE if self.sparse else 0
        if dense is not None:
            M[slots[dense], K.M_FLAGS] = FLAG_DENSE_ROW
        M[slots, K.M_FLAGS] |= np.where(self.stores_gram(L, nnz), 0, KL.FLAG_NO_GRAM) | (KL.FLAG_AVG if self.avg else 0)
        batch = pack(Batch(ex_tok=np.asarray(ex_tok, dtype=np.int64), tok_ptr=np.asarray(tok_ptr, dtype=np.int64),
                           fidx=fidx, fval=fval, lab_ptr=np.asarray(y_ptr, dtype=np.int64)))
        K.insert_blocks(self.kind, Kc, (self.Iar, self.Far, M, KL.pairs_layout(self.sparse, self.avg)), slots, batch, np.asarray(ys, dtype=np.int32), mark,
                        self.slack)
        self._admitted(slots, len(slots), ti, tf)
        self.max_L = max(self.max_L, int(L.max()) if m else 1)
        return slots

    def after_kernel_insert(self, victims, n_final):
        """Bookkeeping after the kernel evicted ``victims`` (-1 entries ignored)."""
        for v in victims[victims >= 0].tolist():   # (a batch that evicts nothing: no Python loop)
            self.forget(v)
        self._n = int(n_final)
        self.maybe_compact()

    def maybe_compact(self):
        """Compact when more than half of the int arena is garbage (evicted segments)."""
        self._fold_moves()
        if self.i_used > 4096 and self.i_live * 2 < self.i_used:
            self.compact()

    def remove(self, slot):
        """Forget a block (the learner must have removed its u_i from the weights first)."""
        p = self.pos[slot]
        if p < 0:
            raise KeyError(f"slot {slot} is not held")
        last = self.alive[self._n - 1]
        self.alive[p] = last
        self.pos[last] = p
        self.pos[slot] = -1
        self._n -= 1
        self.csum[0] -= self.cw[slot]
        self.gest[slot] = 0.0
        py_entry(K.tree_update)(self.tree, self.tree_size, slot, 0.0)
        self.forget(slot)
        if self._order and self._order[0] == slot:
            self._order.popleft()
        else:
            self._order.remove(int(slot))
        self.maybe_compact()

    def compact(self, new_Kc=None, sparse=None):
        """Rewrite the arenas with only live segments (and optionally a larger label capacity, or
        the other layout of chain statistics: ``sparse`` True / False). Sparse blocks drop their
        pairs at 0 and get room for the steps that were waiting for it (``FLAG_TFULL``)."""
        Kc = self.Kc if new_Kc is None else int(new_Kc)
        to_sparse = self.sparse if sparse is None else (bool(sparse) and self.kind == CHAIN)
        slots = self.slots().copy()
        slots = slots[np.argsort(self.birth[slots])]
        if to_sparse == self.sparse and self._compact_in_place(slots, Kc):
            return
        plans = [self._plan(j, Kc, to_sparse) for j in slots]
        Inew = np.zeros(max(1024, int(sum(p[0] for p in plans) * 1.25)), dtype=np.int32)
        Fnew = np.zeros(max(1024, int(sum(p[1] for p in plans) * 1.25)), dtype=np.float64)
        io = fo = 0
        for j, (isz, fsz, tcap, ecap) in zip(slots, plans):
            self._copy_block(j, Inew, Fnew, io, fo, Kc, to_sparse, tcap, ecap)
            io += isz
            fo += fsz
        self.Iar, self.Far = Inew, Fnew
        self.i_used = self.i_live = io
        self.f_used = self.f_live = fo
        self.Kc = Kc
        self.sparse = to_sparse
        self._legacy_m = ENTRIES
        self._moves[:] = 0   # a new move region at the next kernel call

    def _compact_in_place(self, slots, Kc):
        """:meth:`compact` in the same layout, for stores of dense-layout blocks (no sparse
        chain statistics) whose pools and labelings have the store's sizes: each block's
        rewritten segments are its current ones, end to end, at label capacity ``Kc`` also
        when it grows, for structures whose statistic is one value per label slot
        (:meth:`Structure.relayout_stat`'s own layout: multiclass), by slices of the old
        arenas, with the sizes, offsets and flags :meth:`_plan` and :meth:`_copy_block`
        give, computed for all blocks at once. The same arrays as the block-by-block
        rewrite, which cost ~30 µs of Python per block at every checkpoint and every label
        capacity growth. Returns False (nothing done) when some block needs that rewrite."""
        struct = self.structure
        oldKc = self.Kc
        if self.sparse or self.avg or len(slots) == 0:
            # blocks with averaging accumulators (``layout.FLAG_AVG``: BCFW(evicted_average="keep"))
            # relayout them as their statistic, block by block
            return False
        if Kc != oldKc and (struct.set_labeling or type(struct).relayout_stat is not Structure.relayout_stat
                            or type(struct).stat_size is not Structure.stat_size):
            return False
        m = self.meta[slots]
        flags = m[:, K.M_FLAGS]
        L, nnz, ly = m[:, K.M_L], m[:, K.M_NNZ], m[:, K.M_LY]
        lablen = np.broadcast_to(struct.labeling_len(L, Kc), L.shape)
        if np.any(flags & CS.FLAG_SPARSE) or np.any(m[:, K.M_PCAP] != self.pool_cap) \
                or np.any(m[:, K.M_LABLEN] != lablen):
            return False
        pc = self.pool_cap
        nidx = np.where(flags & FLAG_DENSE_ROW, 0, nnz)
        gl = np.where(flags & KL.FLAG_NO_GRAM, 0, L * L)
        isz = L + 1 + nidx + ly + pc * lablen
        ost = np.broadcast_to(struct.stat_size(L, oldKc), L.shape)
        nst = np.broadcast_to(struct.stat_size(L, Kc), L.shape)
        fsz = nnz + gl + nst + pc
        io = np.cumsum(isz) - isz
        fo = np.cumsum(fsz) - fsz
        Inew = np.zeros(max(1024, int(int(isz.sum()) * 1.25)), dtype=self.Iar.dtype)
        Fnew = np.zeros(max(1024, int(int(fsz.sum()) * 1.25)), dtype=self.Far.dtype)
        _move(self.Iar, Inew, m[:, K.M_IOFF], io, isz)
        if Kc == oldKc:
            _move(self.Far, Fnew, m[:, K.M_FOFF], fo, fsz)
        else:   # values, Gram and the old statistic; the new label slots stay 0; the pool's floats
            head = nnz + gl + ost
            _move(self.Far, Fnew, m[:, K.M_FOFF], fo, head)
            _move(self.Far, Fnew, m[:, K.M_FOFF] + head, fo + nnz + gl + nst, np.full(len(L), pc))
        self.meta[slots, K.M_IOFF] = io
        self.meta[slots, K.M_FOFF] = fo
        self.meta[slots, K.M_ISIZE] = isz
        self.meta[slots, K.M_FSIZE] = fsz
        self.meta[slots, K.M_FLAGS] = flags & ~(CS.FLAG_TFULL | CS.FLAG_SPARSE)
        self.Iar, self.Far = Inew, Fnew
        self.i_used = self.i_live = int(isz.sum())
        self.f_used = self.f_live = int(fsz.sum())
        self.Kc = Kc
        return True

    def _m_len(self, j):
        """(offset in Iar of sparse block j's pair list, floats of its M before its transition
        counts TV) -- ``_kernels/layout.py``: ecap entries, or, for the blocks of a state read from
        an older file (:attr:`_legacy_m`), L x rcap (tag rooms) or L x Kc."""
        kp = self._kpos(j)
        r = kp + 2 + 2 * int(self.Iar[kp + 1])
        L = int(self.meta[j, K.M_L])
        if self._legacy_m == KC_WIDE:
            return kp, L * self.Kc
        if self._legacy_m == ROOMS:
            return kp, L * int(self.Iar[r + 1])
        return kp, int(self.Iar[r + 1])

    def _entries(self, j):
        """(token, tag) of each of sparse block j's M entries in use, in their order (int64)."""
        kp = self._kpos(j)
        ep = kp + 2 + 2 * int(self.Iar[kp + 1])
        L = int(self.meta[j, K.M_L])
        tptr = self.Iar[ep + 2:ep + 3 + L].astype(np.int64)
        tok = np.repeat(np.arange(L, dtype=np.int64), np.diff(tptr))
        return tok, self.Iar[ep + 3 + L:ep + 3 + L + int(tptr[L])].astype(np.int64)

    def _stat_pos(self, j):
        """Offset in Far of block j's statistic (``layout.stat_pos``)."""
        m = self.meta[j]
        return int(m[K.M_FOFF]) + int(m[K.M_NNZ]) + _gram_len(m)

    def _emission(self, j, at):
        """Sparse block j's emission statistic M (or its averaging accumulator's: ``at`` its offset
        in Far) as a dense (L, Kc) array (a copy)."""
        L = int(self.meta[j, K.M_L])
        out = np.zeros((L, self.Kc))
        if self._legacy_m == KC_WIDE:
            out[:] = self.Far[at:at + L * self.Kc].reshape(L, self.Kc)
        elif self._legacy_m == ROOMS:
            kp = self._kpos(j)
            r = kp + 2 + 2 * int(self.Iar[kp + 1])
            rn, R = int(self.Iar[r]), int(self.Iar[r + 1])
            out[:, self.Iar[r + 2:r + 2 + rn]] = self.Far[at:at + L * R].reshape(L, R)[:, :rn]
        else:
            tok, tag = self._entries(j)
            out[tok, tag] = self.Far[at:at + len(tag)]
        return out

    def _kept_entries(self, j, Md, Zd):
        """The M entries a block keeps when it is rewritten, as (tokens, tags) in the layout's
        order (token by token, tags ascending): those non-zero in M (``Md``) or in its averaging
        accumulator (``Zd``, or None), and its truth's (margin blocks: ``block_u`` adds the
        truth's statistic in the block's layout)."""
        nz = Md != 0.0
        if Zd is not None:
            nz |= Zd != 0.0
        if not self.slack:
            y0 = int(KL.truth_pos(self.meta, j))
            L = nz.shape[0]
            nz[np.arange(L), self.Iar[y0:y0 + L]] = True
        return np.nonzero(nz)

    def _pairs(self, j):
        """The transition part of block j's statistic as (pairs (n, 2), counts (n,), their
        averaging accumulator (n,) or None), the pairs whose count or accumulator is non-zero
        (either layout)."""
        m = self.meta[j]
        L = int(m[K.M_L])
        s0 = self._stat_pos(j)
        Kc = self.Kc
        z0 = self._avg_pos(j)
        if int(m[K.M_FLAGS]) & CS.FLAG_SPARSE:
            kp, h = self._m_len(j)
            tn = int(self.Iar[kp])
            pairs = self.Iar[kp + 2:kp + 2 + 2 * tn].reshape(tn, 2).astype(np.int64)
            vals = self.Far[s0 + h:s0 + h + tn]
            zv = None if z0 < 0 else self.Far[z0 + h:z0 + h + tn]
            nz = (vals != 0.0) if zv is None else (vals != 0.0) | (zv != 0.0)
            return pairs[nz], vals[nz].copy(), None if zv is None else zv[nz].copy()
        TM = self.Far[s0 + L * Kc:s0 + L * Kc + Kc * Kc].reshape(Kc, Kc)
        ZM = None if z0 < 0 else self.Far[z0 + L * Kc:z0 + L * Kc + Kc * Kc].reshape(Kc, Kc)
        a, b = np.nonzero(TM if ZM is None else (TM != 0.0) | (ZM != 0.0))
        return np.stack([a, b], axis=1).astype(np.int64), TM[a, b].copy(), None if ZM is None else ZM[a, b].copy()

    def _avg_pos(self, j):
        """Offset in Far of block j's averaging accumulator (``layout.avg_view``), -1 if none."""
        m = self.meta[j]
        if not int(m[K.M_FLAGS]) & KL.FLAG_AVG:
            return -1
        L = int(m[K.M_L])
        if int(m[K.M_FLAGS]) & CS.FLAG_SPARSE:
            kp, h = self._m_len(j)
            ss = h + int(self.Iar[kp + 1])
        else:
            ss = int(self.structure.stat_size(L, self.Kc))
        return self._stat_pos(j) + ss + int(m[K.M_PCAP])

    def _kpos(self, j):
        """Offset in Iar of block j's pair list (``_kernels/layout.py``)."""
        return _pairs_offset(self.meta[j])

    def _sources(self, j):
        """Block j's emission statistic and averaging accumulator as dense (L, Kc) arrays (the
        latter None when it keeps none) -- what a rewrite into a sparse layout reads."""
        m = self.meta[j]
        L = int(m[K.M_L])
        s0, z0 = self._stat_pos(j), self._avg_pos(j)
        if int(m[K.M_FLAGS]) & CS.FLAG_SPARSE:
            return self._emission(j, s0), None if z0 < 0 else self._emission(j, z0)
        Kc = self.Kc
        return (self.Far[s0:s0 + L * Kc].reshape(L, Kc),
                None if z0 < 0 else self.Far[z0:z0 + L * Kc].reshape(L, Kc))

    def _plan(self, j, Kc, to_sparse, grow=False):
        """(int size, float size, pair capacity, M entry capacity) of block j rewritten at
        capacity Kc in the target layout; ``grow`` (or a block flagged ``FLAG_TFULL``): room for
        more pairs and entries (one more labeling's: L + ``ENTRY_SLACK``)."""
        m = self.meta[j]
        L, nnz, ly = int(m[K.M_L]), int(m[K.M_NNZ]), int(m[K.M_LY])
        lablen = self.structure.labeling_len(L, Kc)
        isz = L + 1 + _nidx(m) + ly + self.pool_cap * lablen
        if not (to_sparse and self.kind == CHAIN):
            ss = self.structure.stat_size(L, Kc)
            return isz, nnz + _gram_len(m) + ss + self.pool_cap + (ss + 1 if self.avg else 0), 0, 0
        npairs = len(self._pairs(j)[1])
        nused = len(self._kept_entries(j, *self._sources(j))[0])
        full = grow or int(m[K.M_FLAGS]) & CS.FLAG_TFULL
        if int(m[K.M_FLAGS]) & CS.FLAG_SPARSE:
            tcap = int(self.Iar[self._kpos(j) + 1])
            if full:
                tcap = max(2 * tcap, npairs + 2 * (L - 1))
            if Kc != self.Kc:   # more tags: the room a new block would get (it was capped at Kc^2)
                tcap = max(tcap, int(self.tcap0(L, Kc)))
        else:
            tcap = int(self.tcap0(L, Kc))
        if int(m[K.M_FLAGS]) & CS.FLAG_SPARSE and self._legacy_m == ENTRIES:
            ecap = self._m_len(j)[1]
            ecap = max(ecap, nused + L + ENTRY_SLACK) if full else max(ecap, nused)
        else:
            ecap = max(int(self.ecap0(L, Kc)), nused + L + ENTRY_SLACK)
        tcap = max(min(tcap, Kc * Kc), npairs)
        ecap = max(min(ecap, L * Kc), nused)
        ss = ecap + tcap
        return (isz + 4 + 2 * tcap + L + 1 + ecap,
                nnz + _gram_len(m) + ss + self.pool_cap + (ss + 1 if self.avg else 0), tcap, ecap)

    def _copy_block(self, j, Inew, Fnew, io, fo, Kc, to_sparse, tcap, ecap=0):
        """Write block j (read from the current arenas and layout) at offsets io / fo of Inew /
        Fnew, at label capacity Kc, in the target layout with ``tcap`` pairs and ``ecap`` M
        entries (sparse); updates its meta row."""
        struct = self.structure
        oldKc = self.Kc
        m = self.meta[j]
        L, nnz, ly = int(m[K.M_L]), int(m[K.M_NNZ]), int(m[K.M_LY])
        oio, ofo, olab = int(m[K.M_IOFF]), int(m[K.M_FOFF]), int(m[K.M_LABLEN])
        pcap = int(m[K.M_PCAP])
        old_sparse = bool(int(m[K.M_FLAGS]) & CS.FLAG_SPARSE)
        pairs, vals, zvals = self._pairs(j) if (old_sparse or to_sparse) else (None, None, None)
        Md, Zd = self._sources(j) if (old_sparse or to_sparse) else (None, None)
        kept = self._kept_entries(j, Md, Zd) if to_sparse else None
        oz0 = self._avg_pos(j)
        head = L + 1 + _nidx(m) + ly
        Inew[io:io + head] = self.Iar[oio:oio + head]
        lablen = struct.labeling_len(L, Kc)
        if pcap:
            oldpool = self.Iar[oio + head:oio + head + pcap * olab].reshape(pcap, olab)
            newpool = Inew[io + head:io + head + pcap * lablen].reshape(pcap, lablen)
            c = min(olab, lablen)
            newpool[:, :c] = oldpool[:, :c]
        gl = _gram_len(m)   # a block keeps its Gram matrix (or its lack of one) when moved
        Fnew[fo:fo + nnz + gl] = self.Far[ofo:ofo + nnz + gl]
        os0, ns0 = ofo + nnz + gl, fo + nnz + gl
        if old_sparse:
            kp_old, h_old = self._m_len(j)
            oss = h_old + int(self.Iar[kp_old + 1])
        else:
            oss = struct.stat_size(L, oldKc)
        isz = head + pcap * lablen
        nss = ecap + tcap if to_sparse else struct.stat_size(L, Kc)
        # the statistic, then (when the store averages) the averaging accumulator laid out the same
        # way after the pool alpha; a block that had none (a file of an older version) starts at 0
        nz0 = ns0 + nss + pcap
        for src, dst, pv, Ed in ((os0, ns0, vals, Md), (oz0, nz0 if self.avg else -1, zvals, Zd)):
            if dst < 0:
                continue
            if src < 0:
                Fnew[dst:dst + nss + 1] = 0.0
                continue
            self._copy_stat(L, oldKc, Kc, self.Far[src:src + oss], Fnew[dst:dst + nss], (old_sparse, to_sparse),
                            (pairs, pv), Ed, (kept, ecap))
            if dst == nz0:
                Fnew[nz0 + nss] = self.Far[src + oss]   # zl
        if to_sparse:
            n = len(vals)
            kp = io + isz
            Inew[kp:kp + 2] = (n, tcap)
            Inew[kp + 2:kp + 2 + 2 * tcap] = 0
            Inew[kp + 2:kp + 2 + 2 * n] = pairs.ravel()
            ep = kp + 2 + 2 * tcap
            tok, tag = kept
            Inew[ep:ep + 3 + L + ecap] = 0
            Inew[ep:ep + 2] = (len(tag), ecap)
            Inew[ep + 3:ep + 3 + L] = np.cumsum(np.bincount(tok, minlength=L))
            Inew[ep + 3 + L:ep + 3 + L + len(tag)] = tag
            isz += 4 + 2 * tcap + L + 1 + ecap
            flags = (int(m[K.M_FLAGS]) & ~CS.FLAG_TFULL) | CS.FLAG_SPARSE
        else:
            flags = int(m[K.M_FLAGS]) & ~(CS.FLAG_TFULL | CS.FLAG_SPARSE)
        flags = (flags | KL.FLAG_AVG) if self.avg else (flags & ~KL.FLAG_AVG)
        Fnew[ns0 + nss:ns0 + nss + pcap] = self.Far[os0 + oss:os0 + oss + pcap]
        fsz = nnz + gl + nss + pcap + (nss + 1 if self.avg else 0)
        m[K.M_IOFF], m[K.M_FOFF], m[K.M_LABLEN] = io, fo, lablen
        m[K.M_ISIZE], m[K.M_FSIZE], m[K.M_FLAGS] = isz, fsz, flags
        return isz, fsz

    def _copy_stat(self, L, oldKc, Kc, ost, nst, layouts, trans, Md, entries):
        """Write statistic ``ost`` (capacity oldKc, layouts = (old sparse, target sparse)) into
        ``nst`` at capacity Kc in the target layout; ``trans``: its transition entries (pairs,
        counts) kept (:meth:`_pairs`) and ``Md`` its emission part as a dense (L, oldKc) array
        (:meth:`_sources`) when either layout is sparse; ``entries``: the target's ((tokens, tags)
        kept, ecap)."""
        old_sparse, to_sparse = layouts
        pairs, vals = trans
        if to_sparse:   # MV (ecap) | TV: the dense layout's BM rows are M's first and last rows
            (tok, tag), ecap = entries
            nst[:] = 0.0
            nst[:len(tag)] = Md[tok, tag]
            nst[ecap:ecap + len(vals)] = vals
        elif old_sparse:
            nst[:] = 0.0
            nst[:L * Kc].reshape(L, Kc)[:, :oldKc] = Md
            nst[L * Kc:L * Kc + Kc * Kc].reshape(Kc, Kc)[pairs[:, 0], pairs[:, 1]] = vals
            o2 = L * Kc + Kc * Kc
            nst[o2:o2 + Kc] = nst[:Kc]                          # BM: M's first row
            nst[o2 + Kc:o2 + 2 * Kc] = nst[(L - 1) * Kc:L * Kc]   # and its last
        elif oldKc == Kc:
            nst[:] = ost
        else:
            nst[:] = 0.0
            self.structure.relayout_stat(L, oldKc, Kc, ost, nst)

    def grow_flagged(self):
        """Move every sparse block flagged ``FLAG_TFULL`` (a step found no room for its new tags or
        tag pairs and was skipped) to a segment at the end of the arenas with twice the pairs and
        room for L + ``ENTRY_SLACK`` more M entries than it uses (its old segment is garbage until the next
        compaction). Returns the number of blocks moved."""
        if not self.sparse:
            return 0
        s = self.slots()
        flagged = s[(self.meta[s, K.M_FLAGS] & CS.FLAG_TFULL) != 0]
        for j in flagged.tolist():
            self._move_to_end(j)
        if len(flagged):
            self.maybe_compact()
        return len(flagged)

    def _move_to_end(self, j, ecap_min=0):
        """Rewrite sparse block j at the end of the arenas with more room (:meth:`_plan` with
        ``grow``; at least ``ecap_min`` M entries); its old segment is garbage until the next
        compaction."""
        isz, fsz, tcap, ecap = self._plan(j, self.Kc, True, grow=True)
        ecap_min = min(ecap_min, int(self.meta[j, K.M_L]) * self.Kc)
        if ecap < ecap_min:
            isz, fsz, ecap = isz + ecap_min - ecap, fsz + (ecap_min - ecap) * (2 if self.avg else 1), ecap_min
        io, fo = self.i_used, self.f_used
        self._ensure_arena("Iar", io + isz)
        self._ensure_arena("Far", fo + fsz)
        oi, of = int(self.meta[j, K.M_ISIZE]), int(self.meta[j, K.M_FSIZE])
        self._copy_block(j, self.Iar, self.Far, io, fo, self.Kc, True, tcap, ecap)
        self.i_used += isz
        self.f_used += fsz
        self.i_live += isz - oi
        self.f_live += fsz - of

    def grow_short(self):
        """Flag and grow the sparse blocks with room for fewer than 2 (L - 1) new pairs (one more
        step's worth) or L / 2 new M entries, so that the steps of the next kernel call rarely find
        a block full (a block out of entries moves in the kernel, to the call's move region; when
        that is used up the step waits, ``FLAG_TFULL``. Brown 10k before ``refine(1)``: 1,419 of
        10,000 blocks grown here, no step waits; L spare entries grew 6,513 blocks, +64 MB of
        moved segments and +0.9 s; none grown here made 40 steps of Brown 3k's refine wait).
        O(n) array operations; called before the kernel calls that run many steps."""
        if not self.sparse or self._n == 0:
            return 0
        s = self.slots()
        m = self.meta[s]
        kpos = (m[:, K.M_IOFF] + m[:, K.M_L] + 1 + np.where(m[:, K.M_FLAGS] & FLAG_DENSE_ROW, 0, m[:, K.M_NNZ])
                + m[:, K.M_LY]
                + m[:, K.M_PCAP] * m[:, K.M_LABLEN])
        tn, tcap = self.Iar[kpos].astype(np.int64), self.Iar[kpos + 1].astype(np.int64)
        ep = kpos + 2 + 2 * tcap
        en, ecap = self.Iar[ep].astype(np.int64), self.Iar[ep + 1].astype(np.int64)
        short = (((tcap - tn < 2 * (m[:, K.M_L] - 1)) & (tcap < self.Kc * self.Kc))
                 | ((2 * (ecap - en) < m[:, K.M_L]) & (ecap < m[:, K.M_L] * self.Kc)))
        if not short.any():
            return 0
        self.meta[s[short], K.M_FLAGS] |= CS.FLAG_TFULL
        return self.grow_flagged()

    def dense_stat(self, slot):
        """Block ``slot``'s statistic in the dense chain layout ``M | TM | BM`` (a copy), whichever
        layout it is stored in (tests and inspection)."""
        m = self.meta[slot]
        L = int(m[K.M_L])
        s0 = self._stat_pos(slot)
        Kc = self.Kc
        if not int(m[K.M_FLAGS]) & CS.FLAG_SPARSE:
            return self.Far[s0:s0 + self.structure.stat_size(L, Kc)].copy()
        out = np.zeros(self.structure.stat_size(L, Kc))
        out[:L * Kc] = self._emission(slot, s0).ravel()
        pairs, vals, _ = self._pairs(slot)
        np.add.at(out[L * Kc:L * Kc + Kc * Kc].reshape(Kc, Kc), (pairs[:, 0], pairs[:, 1]), vals)
        o2 = L * Kc + Kc * Kc   # BM: M's first and last rows
        out[o2:o2 + Kc] = out[:Kc]
        out[o2 + Kc:o2 + 2 * Kc] = out[(L - 1) * Kc:L * Kc]
        return out

    def grow_labels(self, new_Kc):
        """Relayout every block for a label capacity of ``new_Kc`` (when larger)."""
        if new_Kc > self.Kc:
            self.compact(new_Kc)

    def block(self, slot):
        """Views of one held block's arrays (for inspection and tests)."""
        m = self.meta[slot]
        L, nnz, ly = int(m[K.M_L]), int(m[K.M_NNZ]), int(m[K.M_LY])
        pcap, pn, lablen = int(m[K.M_PCAP]), int(m[K.M_PN]), int(m[K.M_LABLEN])
        io, fo = int(m[K.M_IOFF]), int(m[K.M_FOFF])
        I, F = self.Iar, self.Far
        sparse = bool(int(m[K.M_FLAGS]) & CS.FLAG_SPARSE)
        kp, h = self._m_len(slot) if sparse else (0, 0)
        ss = h + int(I[kp + 1]) if sparse else self.stat_len(L)
        s0 = fo + nnz + _gram_len(m)
        nix = _nidx(m)
        p0 = io + L + 1 + nix + ly
        tp, fi, fv = I[io:io + L + 1], I[io + L + 1:io + L + 1 + nix], F[fo:fo + nnz]
        if _gram_len(m):
            gram = F[fo + nnz:s0].reshape(L, L)
        else:   # not stored: computed (a new array)
            from ._kernels import structops as so
            gram = np.zeros((L, L))
            py_entry(so.gram)(tp, fi, fv, L, gram, np.zeros(int(fi.max()) + 1 if len(fi) else 1))
        return {
            # a dense row's feature indices are 0..nnz-1 (a new array: the block stores none)
            "tok_ptr": I[io:io + L + 1],
            "fidx": I[io + L + 1:io + L + 1 + nnz] if nix else np.arange(nnz, dtype=np.int32),
            "ytrue": I[io + L + 1 + nix:p0], "fval": F[fo:fo + nnz], "dense_row": not nix and nnz > 0,
            "gram": gram,
            # the statistic in the dense layout (a copy when the block is sparse)
            "stat": self.dense_stat(slot) if sparse else F[s0:s0 + ss],
            "pool": I[p0:p0 + pcap * lablen].reshape(pcap, lablen)[:pn] if pcap else I[p0:p0],
            "alpha": F[s0 + ss:s0 + ss + pn], "L": L, "Ki": int(m[K.M_KI]),
            "exact_alpha": not (int(m[K.M_FLAGS]) & K.FLAG_INEXACT_ALPHA),
        }

    # ------------------------------------------------------------------ dual statistics (mixing)
    def stat_regions(self, slots):
        """Flat indices into ``Far`` of each slot's dual statistic (linear in alpha_i, see
        ``streamssvm._kernels.structops``), and the per-slot sizes. Blending is linear in dense
        statistics, so a sparse chain store is converted to dense first."""
        if self.sparse:
            self.compact(sparse=False)
        # vectorized over the slots (layout.stat_pos: FOFF + NNZ + the Gram matrix's floats)
        M = self.meta[np.asarray(slots, dtype=np.int64)].astype(np.int64)
        L = M[:, K.M_L]
        s0 = M[:, K.M_FOFF] + M[:, K.M_NNZ] + np.where(M[:, K.M_FLAGS] & KL.FLAG_NO_GRAM, 0, L * L)
        size_of = {int(v): int(self.structure.stat_size(int(v), self.Kc)) for v in np.unique(L)}
        sizes = np.array([size_of[int(v)] for v in L], dtype=np.int64)
        if not sizes.size:
            return np.zeros(0, dtype=np.int64), sizes
        ends = np.cumsum(sizes)
        idx = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(s0 - (ends - sizes), sizes)
        return idx, sizes

    # ------------------------------------------------------------------ sparse chain statistics, mixed
    # (distributed BCFW's blend alpha^0 + gamma (alpha - alpha^0), kept in the sparse layout: the
    # dense one holds Kc^2 transition floats per block -- 1.8 MB at 472 Brown tags -- which
    # stat_regions' conversion made every round cost seconds and gigabytes)
    def blends_sparse(self):
        """Whether :meth:`sparse_stats` / :meth:`blend_sparse_stats` serve this store: sparse
        chain statistics without pools or per-block averaging accumulators (those go through
        the dense layout, :meth:`stat_regions`)."""
        return bool(self.sparse) and self.pool_cap == 0 and not self.avg

    def _sparse_pos(self, j):
        """(offset in Far of block j's statistic, M's length there (its entry capacity), offset in
        Iar of its pair list, pairs in use) -- a sparse chain block (``_kernels/layout.py``)."""
        m = self.meta[j]
        if not int(m[K.M_FLAGS]) & CS.FLAG_SPARSE:
            raise RuntimeError("a block of a sparse chain store is not in the sparse layout")
        kp, h = self._m_len(j)
        return self._stat_pos(j), h, kp, int(self.Iar[kp])

    def sparse_stats(self, slots):
        """The statistics of sparse chain blocks ``slots``: ``{"head": M of each block (dense, L x
        Kc) end to end, "hsizes", "pairs": (n, 2) tag pairs end to end, "vals": their counts,
        "psizes"}`` (copies)."""
        heads, pairs, vals = [], [], []
        hs = np.zeros(len(slots), dtype=np.int64)
        ps = np.zeros(len(slots), dtype=np.int64)
        for q, j in enumerate(np.asarray(slots, dtype=np.int64).tolist()):
            s0, h, kp, tn = self._sparse_pos(j)
            heads.append(self._emission(j, s0).ravel())
            pairs.append(self.Iar[kp + 2:kp + 2 + 2 * tn].reshape(tn, 2))
            vals.append(self.Far[s0 + h:s0 + h + tn])
            hs[q], ps[q] = heads[-1].size, tn
        cat = (lambda a, shape: np.concatenate(a) if a else np.zeros(shape))
        return {"head": cat(heads, 0), "hsizes": hs, "pairs": cat(pairs, (0, 2)).astype(np.int64),
                "vals": cat(vals, 0), "psizes": ps}

    def _truth_sparse(self, j):
        """(M (dense, L x Kc), pairs, counts) of block j with alpha on its ground truth (a block new
        in the round starts there; zero for slack-rescaled blocks): the truth's bigrams in the
        order the kernels register them (``chainsparse.sp_register``)."""
        m = self.meta[j]
        L, Kc = int(m[K.M_L]), self.Kc
        out = np.zeros(L * Kc)
        if self.slack:
            return out, np.zeros((0, 2), dtype=np.int64), np.zeros(0)
        y0 = int(KL.truth_pos(self.meta, j))
        yt = self.Iar[y0:y0 + int(m[K.M_LY])].astype(np.int64)
        out[np.arange(L) * Kc + yt[:L]] += 1.0
        seen = {}
        for t in range(1, L):
            key = (int(yt[t - 1]), int(yt[t]))
            seen[key] = seen.get(key, 0.0) + 1.0
        pairs = np.array(list(seen), dtype=np.int64).reshape(-1, 2)
        return out, pairs, np.array(list(seen.values()), dtype=np.float64)

    def swap_sparse_stat(self, j, head, pairs, vals):
        """Install (M, pairs, counts) as block j's statistic (``head``: M dense, L x Kc; None: M
        kept); returns the one it replaces (install that to undo). The block must have room for
        the pairs; it is moved to a segment with more M entries when M needs them."""
        s0, h, kp, tn = self._sparse_pos(j)
        L = int(self.meta[j, K.M_L])
        old = (self._emission(j, s0).ravel(), self.Iar[kp + 2:kp + 2 + 2 * tn].reshape(tn, 2).astype(np.int64),
               self.Far[s0 + h:s0 + h + tn].copy())
        n, tcap = len(vals), int(self.Iar[kp + 1])
        if n > tcap:
            raise RuntimeError("a sparse block has no room for the pairs of its statistic")
        if head is not None:
            Hd = np.asarray(head, dtype=np.float64).reshape(L, self.Kc)
            tok, tag = self._kept_entries(j, Hd, None)
            if len(tag) > h:   # more entries, at the end of the arenas (and more pairs: read tcap anew)
                self._move_to_end(j, ecap_min=len(tag))
                s0, h, kp, tn = self._sparse_pos(j)
                tcap = int(self.Iar[kp + 1])
            ep = kp + 2 + 2 * tcap
            self.Iar[ep] = len(tag)
            self.Iar[ep + 2] = 0
            self.Iar[ep + 3:ep + 3 + L] = np.cumsum(np.bincount(tok, minlength=L))
            self.Iar[ep + 3 + L:ep + 3 + L + h] = 0
            self.Iar[ep + 3 + L:ep + 3 + L + len(tag)] = tag
            self.Far[s0:s0 + h] = 0.0
            self.Far[s0:s0 + len(tag)] = Hd[tok, tag]
        self.Iar[kp] = n
        self.Iar[kp + 2:kp + 2 + 2 * tcap] = 0
        self.Iar[kp + 2:kp + 2 + 2 * n] = np.asarray(pairs).ravel()
        self.Far[s0 + h:s0 + h + tcap] = 0.0
        self.Far[s0 + h:s0 + h + n] = vals
        return old

    def blend_sparse_stats(self, slots, snapshot, where, weight):
        """``stat <- start + weight (stat - start)`` for sparse chain blocks ``slots``, in the
        sparse layout: M elementwise, the tag pairs on the union of the start's and the
        current pairs (a pair one side lacks counts 0 there; pairs blended to 0 are dropped),
        the same numbers the dense layout's blend gives. ``snapshot``: :meth:`sparse_stats` of
        the round start, ``where`` maps a slot to its row there (a slot not in it starts at its
        ground truth). A block without room for the union is moved to a segment with more
        (:meth:`grow_flagged`)."""
        Kc = self.Kc
        if snapshot is not None:
            hoff = np.concatenate([[0], np.cumsum(snapshot["hsizes"])])
            poff = np.concatenate([[0], np.cumsum(snapshot["psizes"])])
        for j in np.asarray(slots, dtype=np.int64).tolist():
            w = where.get(j)
            if w is None:
                h0, p0, v0 = self._truth_sparse(j)
            else:
                h0 = snapshot["head"][hoff[w]:hoff[w + 1]]
                p0 = snapshot["pairs"][poff[w]:poff[w + 1]]
                v0 = snapshot["vals"][poff[w]:poff[w + 1]]
            s0, h, kp, tn = self._sparse_pos(j)
            cur = self._emission(j, s0).ravel()
            if h0.size != cur.size:
                raise RuntimeError("a block's statistic changed its layout inside a round")
            cur = h0 + weight * (cur - h0)
            p1 = self.Iar[kp + 2:kp + 2 + 2 * tn].reshape(tn, 2).astype(np.int64)
            v1 = self.Far[s0 + h:s0 + h + tn]
            k0, k1 = p0[:, 0] * Kc + p0[:, 1], p1[:, 0] * Kc + p1[:, 1]
            keys = np.union1d(k0, k1)
            a0, a1 = np.zeros(keys.size), np.zeros(keys.size)
            a0[np.searchsorted(keys, k0)] = v0
            a1[np.searchsorted(keys, k1)] = v1
            v = a0 + weight * (a1 - a0)
            keep = v != 0.0
            keys, v = keys[keep], v[keep]
            if keys.size > int(self.Iar[kp + 1]):
                self.meta[j, K.M_FLAGS] |= CS.FLAG_TFULL
                self.grow_flagged()
            self.swap_sparse_stat(j, cur, np.stack([keys // Kc, keys % Kc], axis=1), v)

    def start_stat(self, slot, size):
        """The statistic of block ``slot`` with alpha on its ground truth (how a new block
        starts; zero for slack-rescaled blocks), ``size`` floats (dense layout)."""
        out = np.zeros(size)
        if not self.slack:
            m = self.meta[slot]
            L, ly, y0 = int(m[K.M_L]), int(m[K.M_LY]), int(KL.truth_pos(self.meta, slot))
            ytrue = self.Iar[y0:y0 + ly].astype(np.int32)
            truth_stat(self.kind, ytrue, ly, L, self.Kc, out, 1.0)
        return out

    def blend_stats(self, slots, idx, start, lstart, weight):
        """``stat <- start + weight (stat - start)`` on the regions ``idx`` (:meth:`stat_regions`
        of ``slots``) and the same for the slots' dual losses from ``lstart``."""
        self.Far[idx] = start + weight * (self.Far[idx] - start)
        self.lval[slots] = lstart + weight * (self.lval[slots] - lstart)

    # ------------------------------------------------------------------ gaps
    @property
    def weight_total(self):
        """N = sum of the held blocks' example weights (``float(n)`` when every weight is 1)."""
        return float(self.csum[0])

    def weighted(self):
        """Whether a held block has an example weight other than 1."""
        s = self.slots()
        return bool(len(s)) and bool(np.any(self.cw[s] != 1.0))

    def gap_sum(self):
        s = self.slots()
        g = self.gest[s]
        return float(np.sum(np.where(np.isfinite(g), np.maximum(g, 0), 0.0)))

    # ------------------------------------------------------------------ state
    def _compact_as_is(self, shortcuts=True):
        """Whether :meth:`compact` would leave the arenas as they are: dense layout, every live
        block where compaction would put it (birth order, no holes) at its planned size. Checked
        on the meta rows in a few vectorized steps (a checkpoint then skips the per-block copy).
        ``shortcuts``: the live slots already in birth order are not sorted, consecutive ones
        are read as a slice of the meta rows (not gathered), blocks of one length take their
        sizes once (not through ``np.unique``); the same answer (a store that never evicted, at
        20k blocks: 2.7 -> ~1 ms per checkpoint)."""
        if self.sparse or self._n == 0:
            return self._n == 0 and self.i_used == 0 and self.f_used == 0
        slots = self.slots()
        b = self.birth[slots]
        if shortcuts and bool(np.all(b[1:] >= b[:-1])):   # in birth order: the stable sort's own
            n, s0 = len(slots), int(slots[0])
            if int(slots[-1]) - s0 == n - 1 and bool(np.all(slots[1:] - slots[:-1] == 1)):
                M = self.meta[s0:s0 + n]   # the rows themselves (read only)
            else:
                M = self.meta[slots]
        else:
            M = self.meta[slots[np.argsort(b, kind="stable")]].astype(np.int64)
        flags = M[:, K.M_FLAGS]
        if np.any(flags & (CS.FLAG_SPARSE | CS.FLAG_TFULL)) or np.any(M[:, K.M_PCAP] != self.pool_cap):
            return False
        L, nnz, ly = M[:, K.M_L], M[:, K.M_NNZ], M[:, K.M_LY]
        # per distinct length, then gathered (a Python loop over the blocks cost ~5 ms per
        # checkpoint of a 20k-example store)
        if shortcuts and int(L.min()) == int(L.max()):   # one length (e.g. multiclass: every L is 1)
            lv, inv = L[:1], np.zeros(len(L), dtype=np.intp)
        else:
            lv, inv = np.unique(L, return_inverse=True)
        lablen = np.array([int(self.structure.labeling_len(int(v), self.Kc)) for v in lv], dtype=np.int64)[inv]
        stat = np.array([int(self.structure.stat_size(int(v), self.Kc)) for v in lv], dtype=np.int64)[inv]
        nidx = np.where(flags & FLAG_DENSE_ROW, 0, nnz)
        gl = np.where(flags & KL.FLAG_NO_GRAM, 0, L * L)
        isz = L + 1 + nidx + ly + self.pool_cap * lablen
        fsz = nnz + gl + stat + self.pool_cap
        ioff = np.concatenate([[0], np.cumsum(isz)])
        foff = np.concatenate([[0], np.cumsum(fsz)])
        return bool(np.array_equal(M[:, K.M_LABLEN], lablen) and np.array_equal(M[:, K.M_ISIZE], isz)
                    and np.array_equal(M[:, K.M_FSIZE], fsz) and np.array_equal(M[:, K.M_IOFF], ioff[:-1])
                    and np.array_equal(M[:, K.M_FOFF], foff[:-1]) and self.i_used == ioff[-1]
                    and self.f_used == foff[-1])

    def state(self):
        """Arrays for checkpoints (live segments compacted; slot numbers, the alive order and
        the FIFO order are kept, so a restored store samples exactly as the original). A store
        already compact (:meth:`_compact_as_is`) is saved without rewriting its arenas."""
        if not self._compact_as_is():
            self.compact()
        ns = self.n_slots
        g = self.gest[:ns]
        own = getattr(_state_views, "on", False)   # state_views(): the live arrays themselves

        def part(a):
            return a if own else a.copy()
        return {
            "kind": self.kind, "Kc": self.Kc, "pool_cap": self.pool_cap,
            "capacity": self.capacity, "max_bytes": self.max_bytes, "eviction": self.eviction,
            "slack": self.slack, "lval": part(self.lval[:ns]),
            **({"cw": part(self.cw[:ns]), "csum": float(self.csum[0])} if self.weighted() else {}),
            "sparse": self.sparse, "sparse_bm": False, "tag_rooms": False, "m_entries": True, "tcap_factor": self.tcap_factor, "dense_rows": self.dense_rows, "avg": self.avg,
            "seen": self._seen, "evicted": self._evicted, "n": self._n, "n_slots": ns,
            "tree_size": self.tree_size, "max_L": self.max_L,
            "meta": part(self.meta[:ns]), "gest": np.where(np.isfinite(g), g, -1.0),
            "last_oracle": part(self.last_oracle[:ns]), "birth": part(self.birth[:ns]),
            "alive": part(self.alive[:self._n]), "free": np.array(self.free, dtype=np.int64),
            "order": np.array(self._order, dtype=np.int64),
            "unvisited": np.array(sorted(self._unvisited), dtype=np.int64),
            "Iar": part(self.Iar[:self.i_used]), "Far": part(self.Far[:self.f_used]),
            "rng": _rng_state(self._rng),
        }

    @classmethod
    def from_state(cls, st, structure, n_rows=None):
        """The store of :meth:`state` for ``structure`` (which must be of the same kind);
        ``n_rows``: the rows of the learner's emission weights (every feature index of a block
        must be below it). The state is checked whole first (:func:`validate_store_state`)."""
        validate_store_state(st, structure, n_rows)
        if st.get("sparse", False) and st.get("sparse_bm", True):
            st = _drop_sparse_bm(st)   # a file written when sparse blocks kept start / end rows
        bs = cls(structure, st["Kc"], st["pool_cap"], st["capacity"], st["max_bytes"], st["eviction"],
                 slack=bool(st.get("slack", False)), sparse=bool(st.get("sparse", False)),
                 tcap_factor=int(st.get("tcap_factor", TCAP_FACTOR)), dense_rows=bool(st.get("dense_rows", True)),
                 avg=bool(st.get("avg", False)))   # files before the averaging accumulators: none
        ns = int(st["n_slots"])
        n = int(st["n"])
        bs._grow_slots(max(ns, 1))
        if bs.tree_size < int(st["tree_size"]):
            bs.tree_size = int(st["tree_size"])
        bs.meta[:ns] = st["meta"]
        bs.any_gram_free = bool(np.any(bs.meta[:ns, K.M_FLAGS] & KL.FLAG_NO_GRAM))
        g = np.asarray(st["gest"], dtype=float)
        bs.gest[:ns] = np.where(g < 0, np.inf, g)
        bs.last_oracle[:ns] = st["last_oracle"]
        if "lval" in st:
            bs.lval[:ns] = st["lval"]
        if "cw" in st:   # example weights (files without them: every weight 1)
            bs.cw[:ns] = st["cw"]
            bs.any_weight = True
        bs.birth[:ns] = st["birth"]
        bs.Iar = np.array(st["Iar"], dtype=np.int32)
        bs.Far = np.array(st["Far"], dtype=np.float64)
        if bs.Iar.size == 0:
            bs.Iar = np.zeros(1024, dtype=np.int32)
        if bs.Far.size == 0:
            bs.Far = np.zeros(1024)
        bs._n = n
        bs.n_slots = ns
        bs.alive[:n] = st["alive"]
        bs.pos[:] = -1
        bs.pos[bs.alive[:n]] = np.arange(n)
        bs.csum[0] = float(st["csum"]) if "csum" in st else float(np.sum(bs.cw[bs.alive[:n]]))
        bs.free = [int(v) for v in st["free"]]
        bs._order = deque(int(v) for v in st["order"])
        bs._unvisited = {int(v) for v in st["unvisited"]}
        live = bs.alive[:n]
        bs.i_used = bs.i_live = int(np.sum(bs.meta[live, K.M_ISIZE]))
        bs.f_used = bs.f_live = int(np.sum(bs.meta[live, K.M_FSIZE]))
        bs._seen = int(st["seen"])
        bs._evicted = int(st["evicted"])
        bs.max_L = int(st["max_L"])
        _rng_restore(bs._rng, st["rng"])
        bs._rebuild_tree()
        if bs.sparse and not st.get("m_entries", False):   # a file written before the M entries
            bs._legacy_m = ROOMS if st.get("tag_rooms", False) else KC_WIDE
            bs.compact()   # every block rewritten with its entries (compact ends the legacy reading)
        bs.grow_flagged()   # blocks still waiting for room (a file written between two steps)
        return bs


def _drop_sparse_bm(st):
    """A store state whose sparse chain blocks were written as ``M | BM | TV`` (files of
    versions before the blocks dropped their start / end rows ``BM``, which equal M's first and
    last rows bit for bit) in today's layout ``M | TV``: the 2 x Kc floats after M are cut from
    each block's statistic and from its averaging accumulator, offsets and sizes follow. The
    state is checked before (``validate_store_state`` knows both layouts)."""
    Kc = int(st["Kc"])
    meta = np.array(st["meta"], dtype=np.int64, copy=True)
    Iar, Far = np.asarray(st["Iar"]), np.asarray(st["Far"], dtype=np.float64)
    alive = np.asarray(st["alive"], dtype=np.int64)
    segs, fo = [], 0
    for j in alive[np.argsort(meta[alive, K.M_FOFF], kind="stable")].tolist():
        m = meta[j]
        L, nnz, pcap = int(m[K.M_L]), int(m[K.M_NNZ]), int(m[K.M_PCAP])
        seg = Far[int(m[K.M_FOFF]):int(m[K.M_FOFF]) + int(m[K.M_FSIZE])]
        tcap = int(Iar[_pairs_offset(m) + 1])
        h, ss = nnz + _gram_len(m) + L * Kc, L * Kc + 2 * Kc + tcap
        parts = [seg[:h], seg[h + 2 * Kc:h - L * Kc + ss + pcap]]
        if int(m[K.M_FLAGS]) & KL.FLAG_AVG:
            z = seg[h - L * Kc + ss + pcap:]
            parts += [z[:L * Kc], z[L * Kc + 2 * Kc:]]
        new = np.concatenate(parts)
        segs.append(new)
        m[K.M_FOFF], m[K.M_FSIZE] = fo, len(new)
        fo += len(new)
    out = dict(st)
    out.update({"meta": meta, "Far": np.concatenate(segs) if segs else np.zeros(0), "sparse_bm": False})
    return out


def _move(src, dst, s_off, d_off, size, chunk=1 << 16):
    """``dst[d_off[i]:d_off[i] + size[i]] = src[s_off[i]:s_off[i] + size[i]]`` for every piece i
    (in increasing order, not overlapping): pieces adjacent in both arrays move as one slice
    (a store that never evicted is one slice); when there are many runs, by index arrays
    built ``chunk`` pieces at a time (bounded memory)."""
    if len(size) == 0:
        return
    brk = np.flatnonzero((s_off[1:] != s_off[:-1] + size[:-1]) | (d_off[1:] != d_off[:-1] + size[:-1])) + 1
    if len(brk) < 64:
        bounds = np.concatenate([[0], brk, [len(size)]]).tolist()
        for a, b in zip(bounds[:-1], bounds[1:]):
            s0, d0, n = int(s_off[a]), int(d_off[a]), int(d_off[b - 1] + size[b - 1] - d_off[a])
            dst[d0:d0 + n] = src[s0:s0 + n]
        return
    for a in range(0, len(size), chunk):
        sz = size[a:a + chunk]
        tot = int(sz.sum())
        if tot == 0:
            continue
        start = np.cumsum(sz) - sz
        within = np.arange(tot) - np.repeat(start, sz)
        dst[np.repeat(d_off[a:a + chunk], sz) + within] = src[np.repeat(s_off[a:a + chunk], sz) + within]


def _gram_len(m):
    """Floats of the Gram matrix stored by the block of meta row ``m`` (``layout.gram_len``)."""
    return 0 if int(m[K.M_FLAGS]) & KL.FLAG_NO_GRAM else int(m[K.M_L]) ** 2


def _nidx(m):
    """Feature indices stored by the block of meta row ``m``: none for a dense row."""
    return 0 if int(m[K.M_FLAGS]) & FLAG_DENSE_ROW else int(m[K.M_NNZ])


def _pairs_offset(m):
    """Offset in Iar of the pair list of the sparse chain block of meta row ``m``:
    ``layout.pairs_pos``'s sum in Python (a kernel called from Python here would be compiled
    with a CPython wrapper of its own on every cold start; tests check the two agree)."""
    return (int(m[K.M_IOFF]) + int(m[K.M_L]) + 1 + _nidx(m) + int(m[K.M_LY])
            + int(m[K.M_PCAP]) * int(m[K.M_LABLEN]))
