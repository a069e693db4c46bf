"""Surgery on saved block stores for the distributed runner: the union of the workers' blocks
(the single-process view of a distributed BCFW model) and a worker's share of it, without
building a :class:`~streamssvm.blocks.BlockStore`. The inputs and results are the dicts of
:meth:`BlockStore.state() <streamssvm.blocks.BlockStore.state>`; the results pass
:func:`streamssvm.saved_state.validate_store_state`.
"""
from __future__ import annotations

import numpy as np

from .._kernels import bcfw as K


_LAYOUT_KEYS = ("kind", "Kc", "pool_cap", "slack", "sparse", "sparse_bm", "tag_rooms", "m_entries", "tcap_factor", "avg")


def _tree_size(n_slots):
    ts = 64
    while ts < n_slots:
        ts *= 2
    return ts


def concat_store_states(states):
    """One store state holding the blocks of every state in ``states``: the slots of
    ``states[i]`` follow those of ``states[:i]`` (slot numbers, free slots, alive / FIFO /
    unvisited orders shifted; arenas concatenated with the segment offsets moved). The stores
    must share their block layout (kind, label capacity, pool size, slack, sparse transitions);
    the result is unbounded (``capacity`` and ``max_bytes`` None, FIFO eviction: a union of
    bounded stores is bounded by none of them) and keeps the first store's generator state.

    >>> from streamssvm.blocks import BlockStore
    >>> from streamssvm.saved_state import validate_store_state
    >>> from streamssvm.structures import MultiClass
    >>> gram = lambda tp, fi, fv, L: np.eye(L)
    >>> def store(labels):
    ...     s = BlockStore(MultiClass(), Kc=3)
    ...     for y in labels:
    ...         _ = s.add(np.array([0, 1]), np.array([0]), np.array([1.0]), np.array([y]), 1, gram)
    ...     return s.state()
    >>> u = concat_store_states([store([0, 1]), store([2])])
    >>> validate_store_state(u, MultiClass(), n_rows=1)
    >>> b = BlockStore.from_state(u, MultiClass(), n_rows=1)
    >>> len(b), [int(b.block(j)["ytrue"][0]) for j in b.slots()]
    (3, [0, 1, 2])
    """
    states = list(states)
    if not states:
        raise ValueError("no store states to concatenate")
    first = states[0]
    for s in states[1:]:
        for k in _LAYOUT_KEYS:
            if s.get(k) != first.get(k):
                raise ValueError(f"the stores disagree on the block layout ({k}: {s.get(k)!r} vs {first.get(k)!r})")
    if len({"lval" in s for s in states}) != 1:
        raise ValueError("the stores disagree on the block layout (lval: present in some states only)")
    metas, alive, free, order, unvisited = [], [], [], [], []
    io = fo = ns = 0
    for s in states:
        m = np.array(s["meta"], dtype=np.int64, copy=True)
        m[:, K.M_IOFF] += io
        m[:, K.M_FOFF] += fo
        metas.append(m)
        for dst, key in ((alive, "alive"), (free, "free"), (order, "order"), (unvisited, "unvisited")):
            dst.append(np.asarray(s[key], dtype=np.int64) + ns)
        io += len(s["Iar"])
        fo += len(s["Far"])
        ns += int(s["n_slots"])
    cat = np.concatenate
    out = dict(first)
    out.update({
        "capacity": None, "max_bytes": None, "eviction": "fifo",
        "seen": sum(int(s["seen"]) for s in states), "evicted": sum(int(s["evicted"]) for s in states),
        "n": sum(int(s["n"]) for s in states), "n_slots": ns, "tree_size": _tree_size(ns),
        "max_L": max(int(s["max_L"]) for s in states),
        "meta": cat(metas), "gest": cat([np.asarray(s["gest"], dtype=np.float64) for s in states]),
        "last_oracle": cat([np.asarray(s["last_oracle"]) for s in states]),
        "birth": cat([np.asarray(s["birth"]) for s in states]),
        "alive": cat(alive), "free": cat(free), "order": cat(order), "unvisited": cat(unvisited),
        "Iar": cat([np.asarray(s["Iar"], dtype=np.int32) for s in states]),
        "Far": cat([np.asarray(s["Far"], dtype=np.float64) for s in states]),
    })
    if "lval" in first:
        out["lval"] = cat([np.asarray(s["lval"], dtype=np.float64) for s in states])
    out.pop("csum", None)   # example weights (BCFW's weighted dual): carried, N recomputed at load
    if any("cw" in s for s in states):
        out["cw"] = cat([np.asarray(s["cw"], dtype=np.float64) if "cw" in s else np.ones(int(s["n_slots"]))
                         for s in states])
    return out


def select_store_blocks(state, slots):
    """A store state holding only the blocks in ``slots`` (renumbered 0..m-1 in the given
    order, which becomes their arrival and FIFO order; arenas cut down to their segments; the
    unvisited ones stay unvisited). Refuses slots that are not alive or repeat.

    >>> from streamssvm.blocks import BlockStore
    >>> from streamssvm.saved_state import validate_store_state
    >>> from streamssvm.structures import MultiClass
    >>> gram = lambda tp, fi, fv, L: np.eye(L)
    >>> s = BlockStore(MultiClass(), Kc=3)
    >>> for y in (0, 1, 2):
    ...     _ = s.add(np.array([0, 1]), np.array([0]), np.array([1.0]), np.array([y]), 1, gram)
    >>> sel = select_store_blocks(s.state(), [2, 0])
    >>> validate_store_state(sel, MultiClass(), n_rows=1)
    >>> b = BlockStore.from_state(sel, MultiClass(), n_rows=1)
    >>> [int(b.block(j)["ytrue"][0]) for j in store_slot_order(sel)]
    [2, 0]
    """
    slots = np.asarray(slots, dtype=np.int64).ravel()
    alive = np.asarray(state["alive"], dtype=np.int64)
    if len(np.unique(slots)) != slots.size or not np.isin(slots, alive).all():
        raise ValueError(f"select_store_blocks: slots must be alive and distinct, got {slots.tolist()[:20]}")
    meta = np.asarray(state["meta"], dtype=np.int64)
    Iar, Far = np.asarray(state["Iar"], dtype=np.int32), np.asarray(state["Far"], dtype=np.float64)
    m = slots.size
    new_meta = meta[slots].copy() if m else np.zeros((0, meta.shape[1]), dtype=np.int64)
    isegs, fsegs = [], []
    io = fo = 0
    for q, j in enumerate(slots.tolist()):
        a, isz = int(meta[j, K.M_IOFF]), int(meta[j, K.M_ISIZE])
        b, fsz = int(meta[j, K.M_FOFF]), int(meta[j, K.M_FSIZE])
        isegs.append(Iar[a:a + isz])
        fsegs.append(Far[b:b + fsz])
        new_meta[q, K.M_IOFF], new_meta[q, K.M_FOFF] = io, fo
        io += isz
        fo += fsz
    pos = {int(j): q for q, j in enumerate(slots.tolist())}
    out = dict(state)
    out.update({
        "seen": m, "evicted": 0, "n": m, "n_slots": m, "tree_size": _tree_size(m),
        "max_L": int(max((int(meta[j, K.M_L]) for j in slots.tolist()), default=1)),
        "meta": new_meta, "gest": np.asarray(state["gest"], dtype=np.float64)[slots],
        "last_oracle": np.asarray(state["last_oracle"])[slots],
        "birth": np.arange(m, dtype=np.int64), "alive": np.arange(m, dtype=np.int64),
        "free": np.zeros(0, dtype=np.int64), "order": np.arange(m, dtype=np.int64),
        "unvisited": np.array(sorted(pos[int(v)] for v in state["unvisited"] if int(v) in pos), dtype=np.int64),
        "Iar": np.concatenate(isegs) if isegs else np.zeros(0, dtype=np.int32),
        "Far": np.concatenate(fsegs) if fsegs else np.zeros(0, dtype=np.float64),
    })
    if "lval" in state:
        out["lval"] = np.asarray(state["lval"], dtype=np.float64)[slots]
    out.pop("csum", None)   # example weights: carried, N recomputed at load
    if "cw" in state:
        out["cw"] = np.asarray(state["cw"], dtype=np.float64)[slots]
    return out


def store_slot_order(state):
    """The live slots of a store state in arrival order (by ``birth``)."""
    alive = np.asarray(state["alive"], dtype=np.int64)
    return alive[np.argsort(np.asarray(state["birth"])[alive], kind="stable")]
