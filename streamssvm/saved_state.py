"""Saved learner state, read back from untrusted files: the checks that every size, index and
pointer of a block store, of the weights and of a held example passes before a numba kernel
trusts it (the kernels do not check bounds), and random generators' state as plain values.

Every check raises ``CheckpointError`` naming what is wrong; nothing is built from a state that
has not passed them (:meth:`streamssvm.blocks.BlockStore.from_state`, the learners' ``restore``).
"""
from __future__ import annotations

import numpy as np

from ._kernels import bcfw as K
from ._kernels import chainsparse as CS
from ._kernels.common import CHAIN, FLAG_DENSE_ROW, MULTICLASS
from .errors import CheckpointError


def _fail(msg):
    raise CheckpointError(f"invalid block store in the file: {msg}")


def _int_array(st, key, n=None):
    a = np.asarray(st[key])
    if a.dtype.kind not in "iu" and not (a.size == 0 and a.dtype.kind == "f"):
        _fail(f"{key} must be an integer array, got dtype {a.dtype}")
    a = a.astype(np.int64).ravel() if a.ndim != 2 else a.astype(np.int64)
    if n is not None and a.shape[0] != n:
        _fail(f"{key} has {a.shape[0]} entries, expected {n}")
    return a


def _in_range(a, lo, hi, what):
    if a.size and (int(a.min()) < lo or int(a.max()) >= hi):
        _fail(f"{what} out of range [{lo}, {hi}): min {int(a.min())}, max {int(a.max())}")


def validate_store_state(st, structure, n_rows=None):
    """Check every index and pointer of a saved :class:`~streamssvm.blocks.BlockStore` against the
    sizes, so that no file can make a numba kernel read or write out of bounds (the kernels trust them). The
    one validator of block stores, used by ``streamssvm.load`` and by checkpoint restores alike
    (both go through :meth:`~streamssvm.blocks.BlockStore.from_state`). Raises ``CheckpointError``.

    >>> from streamssvm.blocks import BlockStore
    >>> from streamssvm.structures import MultiClass
    >>> st = BlockStore(MultiClass(), Kc=3)
    >>> gram = lambda tp, fi, fv, L: np.eye(L)
    >>> _ = st.add(np.array([0, 1], dtype=np.int32), np.array([0], dtype=np.int32), np.array([1.0]),
    ...            np.array([1], dtype=np.int32), 1, gram)
    >>> s = st.state(); validate_store_state(s, MultiClass(), n_rows=1)
    >>> s["Iar"][2] = 7   # the block's feature index (after its 2 token pointers), past the rows
    >>> try:
    ...     validate_store_state(s, MultiClass(), n_rows=1)
    ... except Exception as e:
    ...     print(type(e).__name__, e)
    CheckpointError invalid block store in the file: slot 0: feature indices out of range [0, 1): min 7, max 7
    """
    try:
        Kc, ns, n = int(st["Kc"]), int(st["n_slots"]), int(st["n"])
        pool_cap, tree_size, max_L = int(st["pool_cap"]), int(st["tree_size"]), int(st["max_L"])
        # an absent tcap_factor (older files) takes the store's default, which is in range
        sparse, tcap_factor = bool(st.get("sparse", False)), int(st.get("tcap_factor", 1))
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        _fail(f"{type(e).__name__}: {e}")
    if sparse and int(structure.kind) != CHAIN:
        _fail("sparse transition statistics are for chains only")
    if not 1 <= tcap_factor <= 1 << 16:
        _fail(f"tcap_factor={tcap_factor} out of range")
    if not (1 <= Kc <= 1 << 24 and 0 <= n <= ns <= 1 << 40 and 0 <= pool_cap <= 1 << 16
            and 1 <= tree_size <= 1 << 40 and tree_size >= ns and 1 <= max_L <= 1 << 31):
        _fail(f"sizes Kc={Kc}, n={n}, n_slots={ns}, pool_cap={pool_cap}, tree_size={tree_size}, "
              f"max_L={max_L} are inconsistent")
    meta = _int_array(st, "meta", ns)
    if meta.ndim != 2 or meta.shape[1] != K.N_META:
        _fail(f"meta must be ({ns}, {K.N_META}), got {meta.shape}")
    for key in ("gest", "last_oracle", "birth") + (("lval",) if "lval" in st else ()):
        if np.asarray(st[key]).shape != (ns,):
            _fail(f"{key} must have {ns} entries")
    alive = _int_array(st, "alive", n)
    _in_range(alive, 0, ns, "alive slots")
    if len(np.unique(alive)) != n:
        _fail("alive slots repeat")
    free = _int_array(st, "free")
    order = _int_array(st, "order")
    unvisited = _int_array(st, "unvisited")
    for a, what in ((free, "free slots"), (order, "order"), (unvisited, "unvisited slots")):
        _in_range(a, 0, ns, what)
    if not (set(order.tolist()) <= set(alive.tolist()) and set(unvisited.tolist()) <= set(alive.tolist())):
        _fail("order / unvisited name slots that are not alive")
    if len(np.unique(order)) != len(order) or len(np.unique(free)) != len(free):
        _fail("order / free slots repeat")   # a repeated FIFO entry evicts the wrong block, a repeated free slot holds two
    if "lval" in st and not np.isfinite(np.asarray(st["lval"], dtype=np.float64)).all():
        _fail("lval has non-finite values")
    if set(free.tolist()) & set(alive.tolist()) or len(free) + n != ns:
        _fail("free and alive slots overlap or do not cover the slots")
    Iar = np.asarray(st["Iar"])
    Far = np.asarray(st["Far"])
    if Iar.ndim != 1 or Far.ndim != 1 or Iar.dtype.kind not in "iu" and Iar.size or Far.dtype.kind != "f" and Far.size:
        _fail("the arenas must be 1-D integer / float arrays")
    kind_ok = int(st["kind"]) == int(structure.kind)
    if not kind_ok:
        return   # from_state names the mismatch
    ni, nf = Iar.shape[0], Far.shape[0]
    for s in alive.tolist():
        io, fo, L, nnz, ly, Ki, pcap, pn, lablen, flags, isz, fsz = (int(v) for v in meta[s])
        if not (0 <= io and 0 <= fo and 1 <= L <= max_L and 0 <= nnz and 0 <= ly and 1 <= Ki
                and pcap == pool_cap and 0 <= pn <= pcap and 0 <= lablen):
            _fail(f"slot {s}: block sizes are inconsistent ({meta[s].tolist()})")
        if bool(flags & CS.FLAG_SPARSE) != sparse or flags & ~(K.FLAG_INEXACT_ALPHA | CS.FLAG_SPARSE | CS.FLAG_TFULL
                                                                | FLAG_DENSE_ROW | K.FLAG_NO_GRAM):
            _fail(f"slot {s}: flags {flags} do not match the store (sparse={sparse})")
        dense = bool(flags & FLAG_DENSE_ROW)
        if dense and (int(structure.kind) != MULTICLASS or L != 1):
            _fail(f"slot {s}: a dense row is for one-token multiclass blocks (L={L})")
        nix = 0 if dense else nnz
        gl = 0 if flags & K.FLAG_NO_GRAM else L * L   # the Gram matrix, when the block stores one
        if int(structure.kind) == CHAIN and ly != L:
            _fail(f"slot {s}: a chain block needs one true label per token ({ly} labels, {L} tokens)")
        want_lab = int(structure.labeling_len(L, Kc))
        need_i = L + 1 + nix + ly + pool_cap * want_lab
        kpos = io + need_i
        tn = tcap = 0
        if sparse:
            if kpos + 2 > ni or io + isz > ni:
                _fail(f"slot {s}: segment [{io}, {io + isz}) beyond the int arena ({ni})")
            tn, tcap = int(Iar[kpos]), int(Iar[kpos + 1])
            if not 0 <= tn <= tcap <= Kc * Kc:
                _fail(f"slot {s}: {tn} transition pairs of {tcap} (at most {Kc * Kc})")
            need_i += 2 + 2 * tcap
            need_f = nnz + gl + L * Kc + 2 * Kc + tcap + pool_cap
        else:
            need_f = nnz + gl + int(structure.stat_size(L, Kc)) + pool_cap
        if lablen != want_lab or isz != need_i or fsz != need_f:
            _fail(f"slot {s}: segment sizes {isz}/{fsz} (labeling length {lablen}) do not match the block "
                  f"({need_i}/{need_f}, {want_lab})")
        if io + isz > ni or fo + fsz > nf:
            _fail(f"slot {s}: segment [{io}, {io + isz}) / [{fo}, {fo + fsz}) beyond the arenas ({ni} / {nf})")
        if sparse:
            pairs = Iar[kpos + 2:kpos + 2 + 2 * tn].astype(np.int64)
            _in_range(pairs, 0, Kc, f"slot {s}: transition pairs")
            if len(np.unique(pairs[0::2] * Kc + pairs[1::2])) != tn:
                _fail(f"slot {s}: transition pairs repeat")
        tp = Iar[io:io + L + 1].astype(np.int64)
        if tp[0] != 0 or tp[-1] != nnz or np.any(np.diff(tp) < 0):
            _fail(f"slot {s}: token pointers are not a partition of its {nnz} features")
        if n_rows is not None and dense and nnz > n_rows:
            _fail(f"slot {s}: a dense row of {nnz} features, the weights have {n_rows} rows")
        if n_rows is not None:
            _in_range(Iar[io + L + 1:io + L + 1 + nix], 0, n_rows, f"slot {s}: feature indices")
        _in_range(Iar[io + L + 1 + nix:io + L + 1 + nix + ly], 0, Kc, f"slot {s}: true labels")
        p0 = io + L + 1 + nix + ly
        _in_range(Iar[p0:p0 + pn * lablen], -1, max(Kc, 2), f"slot {s}: pool labelings")
        if not np.isfinite(Far[fo:fo + fsz]).all():
            _fail(f"slot {s}: non-finite values")


def validate_weights(st, keys=("E", "T", "B"), cost="C"):
    """Check a learner state's weight arrays (``E``: features x label capacity, ``T``, ``B``,
    the cost matrix) and its label count ``K`` against each other; returns ``(rows, Kc, K)``.
    Raises ``CheckpointError``."""
    E, T, B = (np.asarray(st[k]) for k in keys)
    if E.ndim != 2 or E.dtype.kind != "f" or E.shape[0] < 1 or E.shape[1] < 1:
        _fail(f"{keys[0]} must be a 2-D float array (features x labels), got {E.dtype} {E.shape}")
    d, Kc = E.shape
    if T.shape != (Kc, Kc) or B.shape != (2, Kc) or T.dtype.kind != "f" or B.dtype.kind != "f":
        _fail(f"{keys[1]} / {keys[2]} must be ({Kc}, {Kc}) / (2, {Kc}) float arrays, got {T.shape} / {B.shape}")
    if cost is not None and st.get(cost) is not None:
        C = np.asarray(st[cost])
        if C.ndim != 2 or C.shape[0] != C.shape[1] or C.shape[0] > Kc or C.dtype.kind != "f":
            _fail(f"the cost matrix must be square, at most {Kc} x {Kc}, got {C.shape}")
    K = int(st["K"])
    if not 0 <= K <= Kc:
        _fail(f"K={K} labels with a label capacity of {Kc}")
    for a, k in zip((E, T, B), keys):
        if not np.isfinite(a).all():
            _fail(f"{k} has non-finite weights")
    return d, Kc, K


def validate_example(tok_ptr, fidx, fval, y, n_rows, Kc, what):
    """Check one held example (CSR tokens, features, truth) against the weights' sizes."""
    tp = np.asarray(tok_ptr)
    fi = np.asarray(fidx)
    fv = np.asarray(fval)
    yy = np.asarray(y)
    if tp.ndim != 1 or tp.size < 2 or tp.dtype.kind not in "iu":
        _fail(f"{what}: token pointers must be a 1-D integer array with at least 2 entries")
    if fi.ndim != 1 or fv.ndim != 1 or fi.shape != fv.shape or (fi.size and fi.dtype.kind not in "iu"):
        _fail(f"{what}: feature indices and values must be 1-D arrays of one length")
    if yy.ndim != 1 or (yy.size and yy.dtype.kind not in "iu"):
        _fail(f"{what}: the truth must be a 1-D integer array")
    tp = tp.astype(np.int64)
    if tp[0] != 0 or tp[-1] != fi.size or np.any(np.diff(tp) < 0):
        _fail(f"{what}: token pointers are not a partition of its {fi.size} features")
    _in_range(fi, 0, n_rows, f"{what}: feature indices")
    _in_range(yy, 0, Kc, f"{what}: true labels")
    if fv.size and (fv.dtype.kind != "f" or not np.isfinite(fv).all()):
        _fail(f"{what}: feature values must be finite floats")


def _rng_state(rng):
    s = rng.bit_generator.state
    return {"bit_generator": s["bit_generator"], "state": str(s["state"]["state"]),
            "inc": str(s["state"]["inc"]), "has_uint32": s["has_uint32"], "uinteger": s["uinteger"]}


def _rng_restore(rng, d):
    rng.bit_generator.state = {"bit_generator": d["bit_generator"],
                               "state": {"state": int(d["state"]), "inc": int(d["inc"])},
                               "has_uint32": d["has_uint32"], "uinteger": d["uinteger"]}
