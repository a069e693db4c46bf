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
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ._kernels import bcfw as K
from ._kernels.bundles import Arena, Batch, pack
from ._kernels.structops import truth_stat

_EVICTION = ("fifo", "reservoir")


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

    Attributes read by the learner's kernels: ``Iar`` / ``Far`` (integer / float arenas),
    ``meta`` (one row of offsets per slot), ``alive`` (the ``n`` live slots, dense),
    ``pos`` (slot -> index in ``alive``), ``gest`` (stale block-gap estimates, +inf for blocks
    never visited) with their sum-tree ``tree`` / ``tree_size`` (gap sampling), ``lval``,
    ``last_oracle``; ``unvisited`` holds slots added but not yet stepped on. The certificate
    pass reads them through ``BCFW.dual_view()`` and writes none of them.

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

    def __init__(self, structure, Kc, pool_cap=0, capacity=100_000, max_bytes=None, eviction="fifo",
                 seed=None, slack=False):
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
        self._rng = np.random.default_rng(seed)
        n0 = 64
        self.meta = np.zeros((n0, K.N_META), dtype=np.int64)
        self.gest = np.zeros(n0)
        self.lval = np.zeros(n0)   # L_i per slot (slack rescaling; margin derives it from the statistic)
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
        self.n = 0
        self.free = []
        self.n_slots = 0
        self.tree_size = 64
        self.tree = np.zeros(2 * self.tree_size)
        self.unvisited = set()
        self.order = deque()   # live slots in arrival order (FIFO eviction)
        self.seen = 0          # examples offered to the store
        self.evicted = 0
        self.max_L = 1

    # ------------------------------------------------------------------ sizes
    def nbytes(self):
        """Bytes held for the live blocks (arena segments + slot tables)."""
        return int(self.i_live * 4 + self.f_live * 8 + self.n * (K.N_META * 8 + 8 * 5))

    def allocated_bytes(self):
        return int(self.Iar.nbytes + self.Far.nbytes + self.meta.nbytes + self.gest.nbytes
                   + self.last_oracle.nbytes + self.birth.nbytes + self.alive.nbytes
                   + self.pos.nbytes + self.tree.nbytes)

    def __len__(self):
        return self.n

    def slots(self):
        return self.alive[:self.n]

    # ------------------------------------------------------------------ growth
    def _grow_slots(self, need):
        cap = self.meta.shape[0]
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for name, fill in (("meta", 0), ("gest", 0.0), ("lval", 0.0), ("last_oracle", 0), ("birth", 0),
                           ("alive", 0), ("pos", -1)):
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
        for i in range(self.tree_size - 1, 0, -1):
            self.tree[i] = self.tree[2 * i] + self.tree[2 * i + 1]

    @staticmethod
    def _ensure(arr, need):
        if need <= arr.shape[0]:
            return arr
        b = np.zeros(max(need, 2 * arr.shape[0]), dtype=arr.dtype)
        b[:arr.shape[0]] = arr
        return b

    def arena(self, gest=None, tree_size=None):
        """The store's arrays as the kernels take them (``streamssvm._kernels.bundles.Arena``);
        ``gest`` / ``tree_size`` replace the gap estimates / sum-tree size (a pass that must not
        touch them)."""
        return pack(Arena(Iar=self.Iar, Far=self.Far, meta=self.meta, gest=self.gest if gest is None else gest,
                          last_oracle=self.last_oracle, lval=self.lval, alive=self.alive, pos=self.pos,
                          n=int(self.n), tree=self.tree,
                          tree_size=int(self.tree_size if tree_size is None else tree_size)))

    def segment_sizes(self, L, nnz, ly):
        lablen = self.structure.labeling_len(L, self.Kc)
        isz = L + 1 + nnz + ly + self.pool_cap * lablen
        fsz = nnz + L * L + self.structure.stat_size(L, self.Kc) + self.pool_cap
        return isz, fsz, lablen

    # ------------------------------------------------------------------ add / remove
    def choose_victim(self):
        """Slot to evict before adding a new block, ``None`` if there is room, or ``-1`` when the
        reservoir decides not to keep the new example."""
        full = self.capacity is not None and self.n >= self.capacity
        if not full:
            return None
        if self.eviction == "fifo":
            return int(self.order[0])
        # reservoir (algorithm R)
        r = self._rng.integers(0, self.seen + 1)
        if r < self.capacity:
            return int(self.alive[self._rng.integers(0, self.n)])
        return -1

    def oldest(self):
        return int(self.order[0])

    def reserve(self, L, nnz, ly, Ki):
        """Allocate the segment and slot of one new block (not yet live: the kernel writes it
        and appends it to the alive list). Returns the slot."""
        Kc = self.Kc
        lablen = self.structure.labeling_len(L, Kc)
        ss = self.structure.stat_size(L, Kc)
        pc = self.pool_cap
        isz = L + 1 + nnz + ly + pc * lablen
        fsz = nnz + L * L + ss + pc
        if self.free:
            slot = self.free.pop()
        else:
            slot = self.n_slots
            self.n_slots += 1
            if slot >= self.meta.shape[0]:
                self._grow_slots(self.n_slots)
        io, fo = self.i_used, self.f_used
        if io + isz > self.Iar.shape[0]:
            self.Iar = self._ensure(self.Iar, io + isz)
        if fo + fsz > self.Far.shape[0]:
            self.Far = self._ensure(self.Far, fo + fsz)
        self.meta[slot] = (io, fo, L, nnz, ly, max(int(Ki), 1), pc, 0, lablen, 0, isz, fsz)
        self.i_used += isz
        self.f_used += fsz
        self.i_live += isz
        self.f_live += fsz
        self.gest[slot] = np.inf
        self.lval[slot] = 0.0
        self.last_oracle[slot] = -1
        self.birth[slot] = self.seen
        self.pos[slot] = -1
        self.seen += 1
        if L > self.max_L:
            self.max_L = L
        self.order.append(slot)
        return slot

    def forget(self, v):
        """Bookkeeping for a block the kernel already evicted (not in alive any more)."""
        self.free.append(int(v))
        self.i_live -= int(self.meta[v, K.M_ISIZE])
        self.f_live -= int(self.meta[v, K.M_FSIZE])
        self.unvisited.discard(int(v))
        self.evicted += 1

    def over_bytes(self):
        return self.max_bytes is not None and self.nbytes() > self.max_bytes and self.n > 1

    def add(self, tok_ptr, fidx, fval, ytrue, Ki, gram_fn):
        """Store a new block; returns its slot. ``gram_fn(tok_ptr, fidx, fval, L)`` -> (L, L)."""
        L = len(tok_ptr) - 1
        nnz = len(fidx)
        ly = len(ytrue)
        isz, fsz, lablen = self.segment_sizes(L, nnz, ly)
        if self.free:
            slot = self.free.pop()
        else:
            slot = self.n_slots
            self.n_slots += 1
            self._grow_slots(self.n_slots)
        io, fo = self.i_used, self.f_used
        self.Iar = self._ensure(self.Iar, io + isz)
        self.Far = self._ensure(self.Far, fo + fsz)
        I = self.Iar
        Fa = self.Far
        I[io:io + L + 1] = tok_ptr
        I[io + L + 1:io + L + 1 + nnz] = fidx
        I[io + L + 1 + nnz:io + L + 1 + nnz + ly] = ytrue
        p0 = io + L + 1 + nnz + ly
        I[p0:p0 + self.pool_cap * lablen] = 0
        Fa[fo:fo + nnz] = fval
        Fa[fo + nnz:fo + nnz + L * L] = gram_fn(tok_ptr, fidx, fval, L).ravel()
        ss = self.structure.stat_size(L, self.Kc)
        s0 = fo + nnz + L * L
        Fa[s0:s0 + ss + self.pool_cap] = 0.0
        if not self.slack:
            truth_stat(self.kind, np.asarray(ytrue, dtype=np.int32), ly, L, self.Kc, Fa[s0:s0 + ss], 1.0)
        self.lval[slot] = 0.0
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
        self.i_used += isz
        self.f_used += fsz
        self.i_live += isz
        self.f_live += fsz
        self.gest[slot] = np.inf
        self.last_oracle[slot] = -1
        self.birth[slot] = self.seen
        self.pos[slot] = self.n
        self.alive[self.n] = slot
        self.n += 1
        self.unvisited.add(slot)
        self.max_L = max(self.max_L, L)
        self.order.append(slot)
        return slot

    def fifo_victims(self, new_slots):
        """Slots that the arrivals ``new_slots`` evict under FIFO (victims[e] before arrival e,
        -1 for none); updates the arrival order."""
        m = len(new_slots)
        victims = np.full(m, -1, dtype=np.int64)
        n = self.n
        cap = self.capacity
        for e in range(m):
            if cap is not None and n >= cap:
                victims[e] = self.order.popleft()
                n -= 1
            self.order.append(int(new_slots[e]))
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
        lablen = np.zeros(m, dtype=np.int64) + self.structure.labeling_len(L, Kc)   # (vectorized over L)
        ss = np.zeros(m, dtype=np.int64) + self.structure.stat_size(L, Kc)
        isz = L + 1 + nnz + ly + self.pool_cap * lablen
        fsz = nnz + L * L + ss + self.pool_cap
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
        self.Iar = self._ensure(self.Iar, self.i_used + ti)
        self.Far = self._ensure(self.Far, self.f_used + tf)
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
        batch = pack(Batch(ex_tok=np.asarray(ex_tok, dtype=np.int64), tok_ptr=np.asarray(tok_ptr, dtype=np.int64),
                           fidx=fidx, fval=fval, lab_ptr=np.asarray(y_ptr, dtype=np.int64)))
        K.insert_blocks(self.kind, Kc, (self.Iar, self.Far, M), slots, batch, np.asarray(ys, dtype=np.int32), mark,
                        self.slack)
        self.i_used += ti
        self.f_used += tf
        self.i_live += ti
        self.f_live += tf
        self.gest[slots] = np.inf
        self.lval[slots] = 0.0
        self.last_oracle[slots] = -1
        self.birth[slots] = self.seen + np.arange(m)
        self.pos[slots] = -1
        self.seen += m
        self.max_L = max(self.max_L, int(L.max()) if m else 1)
        return slots

    def after_kernel_insert(self, victims, n_final):
        """Bookkeeping after the kernel evicted ``victims`` (-1 entries ignored)."""
        for v in victims:
            if v >= 0:
                self.forget(v)
        self.n = int(n_final)
        self.maybe_compact()

    def maybe_compact(self):
        if self.i_used > 4096 and self.i_live * 2 < self.i_used:
            self.compact()

    def remove(self, slot):
        """Forget a block (the learner must have removed its u_i from the weights first)."""
        p = self.pos[slot]
        if p < 0:
            raise KeyError(f"slot {slot} is not held")
        last = self.alive[self.n - 1]
        self.alive[p] = last
        self.pos[last] = p
        self.pos[slot] = -1
        self.n -= 1
        self.free.append(int(slot))
        self.i_live -= int(self.meta[slot, K.M_ISIZE])
        self.f_live -= int(self.meta[slot, K.M_FSIZE])
        self.gest[slot] = 0.0
        K.tree_update(self.tree, self.tree_size, slot, 0.0)
        self.unvisited.discard(int(slot))
        self.evicted += 1
        if self.order and self.order[0] == slot:
            self.order.popleft()
        else:
            self.order.remove(int(slot))
        if self.i_used > 4096 and self.i_live * 2 < self.i_used:
            self.compact()

    def compact(self, new_Kc=None):
        """Rewrite the arenas with only live segments (and optionally a larger label capacity)."""
        struct = self.structure
        oldKc = self.Kc
        Kc = oldKc if new_Kc is None else int(new_Kc)
        slots = self.slots().copy()
        slots = slots[np.argsort(self.birth[slots])]
        isizes, fsizes = [], []
        for j in slots:
            m = self.meta[j]
            L, nnz, ly = int(m[K.M_L]), int(m[K.M_NNZ]), int(m[K.M_LY])
            lablen = struct.labeling_len(L, Kc)
            isizes.append(L + 1 + nnz + ly + self.pool_cap * lablen)
            fsizes.append(nnz + L * L + struct.stat_size(L, Kc) + self.pool_cap)
        Inew = np.zeros(max(1024, int(sum(isizes) * 1.25)), dtype=np.int32)
        Fnew = np.zeros(max(1024, int(sum(fsizes) * 1.25)), dtype=np.float64)
        io = fo = 0
        for j, isz, fsz in zip(slots, isizes, fsizes):
            m = self.meta[j]
            L, nnz, ly = int(m[K.M_L]), int(m[K.M_NNZ]), int(m[K.M_LY])
            oio, ofo, olab = int(m[K.M_IOFF]), int(m[K.M_FOFF]), int(m[K.M_LABLEN])
            pcap, pn = int(m[K.M_PCAP]), int(m[K.M_PN])
            head = L + 1 + nnz + ly
            Inew[io:io + head] = self.Iar[oio:oio + head]
            lablen = struct.labeling_len(L, Kc)
            oldpool = self.Iar[oio + head:oio + head + pcap * olab].reshape(pcap, olab) if pcap else None
            if pcap:
                newpool = Inew[io + head:io + head + pcap * lablen].reshape(pcap, lablen)
                c = min(olab, lablen)
                newpool[:, :c] = oldpool[:, :c]
            Fnew[fo:fo + nnz + L * L] = self.Far[ofo:ofo + nnz + L * L]
            ost = self.Far[ofo + nnz + L * L:ofo + nnz + L * L + struct.stat_size(L, oldKc)]
            nst = Fnew[fo + nnz + L * L:fo + nnz + L * L + struct.stat_size(L, Kc)]
            if oldKc == Kc:
                nst[:] = ost
            else:
                nst[:] = 0.0
                struct.relayout_stat(L, oldKc, Kc, ost, nst)
            a0o = ofo + nnz + L * L + struct.stat_size(L, oldKc)
            a0n = fo + nnz + L * L + struct.stat_size(L, Kc)
            Fnew[a0n:a0n + pcap] = self.Far[a0o:a0o + pcap]
            m[K.M_IOFF], m[K.M_FOFF], m[K.M_LABLEN] = io, fo, lablen
            m[K.M_ISIZE], m[K.M_FSIZE] = isz, fsz
            del pn
            io += isz
            fo += fsz
        self.Iar, self.Far = Inew, Fnew
        self.i_used = self.i_live = io
        self.f_used = self.f_live = fo
        self.Kc = Kc

    def grow_labels(self, new_Kc):
        if new_Kc > self.Kc:
            self.compact(new_Kc)

    def block(self, slot):
        """Views of one held block's arrays (for inspection and tests)."""
        m = self.meta[slot]
        L, nnz, ly = int(m[K.M_L]), int(m[K.M_NNZ]), int(m[K.M_LY])
        pcap, pn, lablen = int(m[K.M_PCAP]), int(m[K.M_PN]), int(m[K.M_LABLEN])
        io, fo = int(m[K.M_IOFF]), int(m[K.M_FOFF])
        I, F = self.Iar, self.Far
        ss = self.structure.stat_size(L, self.Kc)
        s0 = fo + nnz + L * L
        p0 = io + L + 1 + nnz + ly
        return {
            "tok_ptr": I[io:io + L + 1], "fidx": I[io + L + 1:io + L + 1 + nnz],
            "ytrue": I[io + L + 1 + nnz:p0], "fval": F[fo:fo + nnz],
            "gram": F[fo + nnz:s0].reshape(L, L), "stat": F[s0:s0 + ss],
            "pool": I[p0:p0 + pcap * lablen].reshape(pcap, lablen)[:pn] if pcap else I[p0:p0],
            "alpha": F[s0 + ss:s0 + ss + pn], "L": L, "Ki": int(m[K.M_KI]),
            "exact_alpha": not (int(m[K.M_FLAGS]) & K.FLAG_INEXACT_ALPHA),
        }

    # ------------------------------------------------------------------ gaps
    def gap_sum(self):
        s = self.slots()
        g = self.gest[s]
        return float(np.sum(np.where(np.isfinite(g), np.maximum(g, 0), 0.0)))

    # ------------------------------------------------------------------ state
    def state(self):
        """Arrays for checkpoints (live segments compacted; slot numbers, the alive order and
        the FIFO order are kept, so a restored store samples exactly as the original)."""
        self.compact()
        ns = self.n_slots
        g = self.gest[:ns]
        return {
            "kind": self.kind, "Kc": self.Kc, "pool_cap": self.pool_cap,
            "capacity": self.capacity, "max_bytes": self.max_bytes, "eviction": self.eviction,
            "slack": self.slack, "lval": self.lval[:ns].copy(),
            "seen": self.seen, "evicted": self.evicted, "n": self.n, "n_slots": ns,
            "tree_size": self.tree_size, "max_L": self.max_L,
            "meta": self.meta[:ns].copy(), "gest": np.where(np.isfinite(g), g, -1.0),
            "last_oracle": self.last_oracle[:ns].copy(), "birth": self.birth[:ns].copy(),
            "alive": self.alive[:self.n].copy(), "free": np.array(self.free, dtype=np.int64),
            "order": np.array(self.order, dtype=np.int64),
            "unvisited": np.array(sorted(self.unvisited), dtype=np.int64),
            "Iar": self.Iar[:self.i_used].copy(), "Far": self.Far[:self.f_used].copy(),
            "rng": _rng_state(self._rng),
        }

    @classmethod
    def from_state(cls, st, structure):
        """The store of :meth:`state` for ``structure`` (which must be of the same kind)."""
        if int(st["kind"]) != int(structure.kind):
            raise ValueError(f"block store state of structure code {int(st['kind'])} cannot be restored "
                             f"for a {structure.name} structure (code {int(structure.kind)})")
        bs = cls(structure, st["Kc"], st["pool_cap"], st["capacity"], st["max_bytes"], st["eviction"],
                 slack=bool(st.get("slack", False)))
        ns = int(st["n_slots"])
        n = int(st["n"])
        bs._grow_slots(max(ns, 1))
        if bs.tree_size < int(st["tree_size"]):
            bs.tree_size = int(st["tree_size"])
        bs.meta[:ns] = st["meta"]
        g = np.asarray(st["gest"], dtype=float)
        bs.gest[:ns] = np.where(g < 0, np.inf, g)
        bs.last_oracle[:ns] = st["last_oracle"]
        if "lval" in st:
            bs.lval[:ns] = st["lval"]
        bs.birth[:ns] = st["birth"]
        bs.Iar = np.array(st["Iar"], dtype=np.int32)
        bs.Far = np.array(st["Far"], dtype=np.float64)
        if bs.Iar.size == 0:
            bs.Iar = np.zeros(1024, dtype=np.int32)
        if bs.Far.size == 0:
            bs.Far = np.zeros(1024)
        bs.n = n
        bs.n_slots = ns
        bs.alive[:n] = st["alive"]
        bs.pos[:] = -1
        bs.pos[bs.alive[:n]] = np.arange(n)
        bs.free = [int(v) for v in st["free"]]
        bs.order = deque(int(v) for v in st["order"])
        bs.unvisited = {int(v) for v in st["unvisited"]}
        live = bs.alive[:n]
        bs.i_used = bs.i_live = int(np.sum(bs.meta[live, K.M_ISIZE]))
        bs.f_used = bs.f_live = int(np.sum(bs.meta[live, K.M_FSIZE]))
        bs.seen = int(st["seen"])
        bs.evicted = int(st["evicted"])
        bs.max_L = int(st["max_L"])
        _rng_restore(bs._rng, st["rng"])
        bs._rebuild_tree()
        return bs


def _rng_state(rng):
    s = rng.bit_generator.state
    return {"bit_generator": s["bit_generator"], "state": str(s["state"]["state"]),
            "inc": str(s["state"]["inc"]), "has_uint32": s["has_uint32"], "uinteger": s["uinteger"]}


def _rng_restore(rng, d):
    rng.bit_generator.state = {"bit_generator": d["bit_generator"],
                               "state": {"state": int(d["state"]), "inc": int(d["inc"])},
                               "has_uint32": d["has_uint32"], "uinteger": d["uinteger"]}
