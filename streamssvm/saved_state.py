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


def _bad(msg):
    raise CheckpointError(f"invalid learner state in the file: {msg}")


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
        # sparse chain blocks of files written before they dropped their start / end rows
        sparse_bm = bool(st.get("sparse_bm", True))
        # sparse chain blocks with M as per-token entries (files written before them: M over a tag
        # room, and before those over every tag)
        entries = bool(st.get("m_entries", False))
        rooms = bool(st.get("tag_rooms", False))
        avg = bool(st.get("avg", False))   # blocks with an averaging accumulator (absent: older files)
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        _fail(f"{type(e).__name__}: {e}")
    if sparse and int(structure.kind) != CHAIN:
        _fail("sparse transition statistics are for chains only")
    try:
        seen, evicted = int(st.get("seen", 0)), int(st.get("evicted", 0))
    except (TypeError, ValueError, OverflowError) as e:
        _fail(f"{type(e).__name__}: {e}")
    if not (0 <= seen <= 1 << 62 and 0 <= evicted <= 1 << 62):
        _fail(f"counts seen={seen}, evicted={evicted} out of range")   # a reservoir draws below seen
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
    if len(order) != n or set(order.tolist()) != set(alive.tolist()):
        _fail("the arrival order must name every alive slot once")   # FIFO eviction pops it
    if "lval" in st and not np.isfinite(np.asarray(st["lval"], dtype=np.float64)).all():
        _fail("lval has non-finite values")
    if "cw" in st:   # example weights (BCFW's weighted dual): finite and > 0, their sum N with them
        cw = np.asarray(st["cw"], dtype=np.float64)
        if cw.shape != (ns,) or not (np.isfinite(cw).all() and (cw > 0).all()):
            _fail(f"cw must have {ns} finite entries > 0")
        if not np.isfinite(float(st.get("csum", 1.0))) or float(st.get("csum", 1.0)) <= 0.0:
            _fail("csum must be finite and > 0")
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
    longest = int(meta[alive, 2].max()) if n else 1
    if max_L < longest or max_L > max(longest, 1 << 16):
        _fail(f"max_L={max_L} with held blocks of at most {longest} tokens")   # sizes the kernels' scratch
    for s in alive.tolist():
        io, fo, L, nnz, ly, Ki, pcap, pn, lablen, flags, isz, fsz = (int(v) for v in meta[s])
        if not (0 <= io and 0 <= fo and 1 <= L <= max_L and 0 <= nnz and 0 <= ly and 1 <= Ki
                and pcap == pool_cap and 0 <= pn <= pcap and 0 <= lablen):
            _fail(f"slot {s}: block sizes are inconsistent ({meta[s].tolist()})")
        if (bool(flags & CS.FLAG_SPARSE) != sparse or bool(flags & K.FLAG_AVG) != avg
                or flags & ~(K.FLAG_INEXACT_ALPHA | CS.FLAG_SPARSE | CS.FLAG_TFULL | FLAG_DENSE_ROW | K.FLAG_NO_GRAM
                             | K.FLAG_AVG)):
            _fail(f"slot {s}: flags {flags} do not match the store (sparse={sparse}, avg={avg})")
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
            if entries:   # M's entries: en | ecap | tptr (L + 1) | etag (ecap)
                r = kpos + 2 + 2 * tcap
                if r + 3 + L > ni:
                    _fail(f"slot {s}: segment [{io}, {io + isz}) beyond the int arena ({ni})")
                en, ecap = int(Iar[r]), int(Iar[r + 1])
                tptr = Iar[r + 2:r + 3 + L].astype(np.int64)
                if not 0 <= en <= min(ecap, L * Kc) or r + 3 + L + en > ni:
                    _fail(f"slot {s}: {en} M entries of {ecap} (at most {L * Kc} in use)")
                if tptr[0] != 0 or tptr[-1] != en or np.any(np.diff(tptr) < 0):
                    _fail(f"slot {s}: M's token pointers are not a partition of its {en} entries")
                etag = Iar[r + 3 + L:r + 3 + L + en].astype(np.int64)
                _in_range(etag, 0, Kc, f"slot {s}: M entry tags")
                first = np.zeros(en, dtype=bool)
                first[tptr[:-1][tptr[:-1] < en]] = True
                if np.any((np.diff(etag) <= 0) & ~first[1:]):
                    _fail(f"slot {s}: a token's M entry tags are not ascending")
                need_i += 2 + L + 1 + ecap
                ss = ecap + tcap
            elif rooms:   # the tag room: rn | rcap | tags (files before the entries)
                r = kpos + 2 + 2 * tcap
                if r + 2 > ni:
                    _fail(f"slot {s}: segment [{io}, {io + isz}) beyond the int arena ({ni})")
                rn, rcap = int(Iar[r]), int(Iar[r + 1])
                if not 0 <= rn <= rcap <= Kc or r + 2 + rn > ni:
                    _fail(f"slot {s}: {rn} tags in a room of {rcap} (at most {Kc})")
                tags = Iar[r + 2:r + 2 + rn].astype(np.int64)
                _in_range(tags, 0, Kc, f"slot {s}: room tags")
                if np.any(np.diff(tags) <= 0):
                    _fail(f"slot {s}: room tags are not ascending")
                need_i += 2 + rcap
                ss = L * rcap + tcap
            else:   # older files: M over every tag (and M | BM | TV before that)
                ss = L * Kc + (2 * Kc if sparse_bm else 0) + tcap
        else:
            ss = int(structure.stat_size(L, Kc))
        need_f = nnz + gl + ss + pool_cap + (ss + 1 if avg else 0)
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
        _bad(f"{keys[0]} must be a 2-D float array (features x labels), got {E.dtype} {E.shape}")
    d, Kc = E.shape
    if T.shape != (Kc, Kc) or B.shape != (2, Kc) or T.dtype.kind != "f" or B.dtype.kind != "f":
        _bad(f"{keys[1]} / {keys[2]} must be ({Kc}, {Kc}) / (2, {Kc}) float arrays, got {T.shape} / {B.shape}")
    if cost is not None and st.get(cost) is not None:
        C = np.asarray(st[cost])
        if C.ndim != 2 or C.shape[0] != C.shape[1] or C.shape[0] > Kc or C.dtype.kind != "f":
            _bad(f"the cost matrix must be square, at most {Kc} x {Kc}, got {C.shape}")
    K = int(st["K"])
    if not 0 <= K <= Kc:
        _bad(f"K={K} labels with a label capacity of {Kc}")
    if cost is not None and st.get(cost) is not None:
        C = np.asarray(st[cost])
        if K > C.shape[0] or not np.isfinite(C).all() or (C.size and C.min() < 0):
            _bad(f"the cost matrix must cover the {K} labels with finite costs >= 0")
    for a, k in zip((E, T, B), keys):
        if not np.isfinite(a).all():
            _bad(f"{k} has non-finite weights")
    return d, Kc, K


def validate_example(tok_ptr, fidx, fval, y, n_rows, Kc, what, structure=None, Ki=None, K=None):
    """Check one held example (CSR tokens, features, truth) against the weights' sizes; with
    ``structure`` (and the example's ``Ki``, the learner's ``K`` labels) its truth as the
    structure's kernels read it (:func:`validate_truth`)."""
    tp = np.asarray(tok_ptr)
    fi = np.asarray(fidx)
    fv = np.asarray(fval)
    yy = np.asarray(y)
    if tp.ndim != 1 or tp.size < 2 or tp.dtype.kind not in "iu":
        _bad(f"{what}: token pointers must be a 1-D integer array with at least 2 entries")
    if fi.ndim != 1 or fv.ndim != 1 or fi.shape != fv.shape or (fi.size and fi.dtype.kind not in "iu"):
        _bad(f"{what}: feature indices and values must be 1-D arrays of one length")
    if yy.ndim != 1 or (yy.size and yy.dtype.kind not in "iu"):
        _bad(f"{what}: the truth must be a 1-D integer array")
    if fi.size >= 1 << 31 or tp.size >= 1 << 31:
        _bad(f"{what}: more features than an int32 pointer holds")
    tp = tp.astype(np.int64)
    if tp[0] != 0 or tp[-1] != fi.size or np.any(np.diff(tp) < 0):
        _bad(f"{what}: token pointers are not a partition of its {fi.size} features")
    _in_range(fi, 0, n_rows, f"{what}: feature indices")
    _in_range(yy, 0, Kc, f"{what}: true labels")
    if fv.size and (fv.dtype.kind != "f" or not np.isfinite(fv).all()):
        _bad(f"{what}: feature values must be finite floats")
    if structure is not None:
        validate_truth(structure, yy, tp.size - 1, Ki, Kc if K is None else K, what)


def validate_truth(structure, y, L, Ki, K, what):
    """Check a held example's truth as the structure's kernels read it: one label per token
    for chains and multiclass, else ``Ki`` (1 <= Ki <= K) label slots and distinct positive
    labels (a hierarchy's include inner nodes). All labels are below ``K``, the labels the
    learner knows."""
    y = np.asarray(y)
    try:
        Ki = 1 if Ki is None else int(Ki)
    except (TypeError, ValueError, OverflowError):
        _bad(f"{what}: label slots {Ki!r} are not an integer")
    if int(structure.kind) in (CHAIN, MULTICLASS):
        if y.size != L:
            _bad(f"{what}: {y.size} true labels for {L} tokens (one per token)")
        _in_range(y, 0, max(K, 1), f"{what}: true labels")
        return
    if not 1 <= Ki <= max(K, 1):
        _bad(f"{what}: {Ki} label slots, the learner knows {K} labels")
    _in_range(y, 0, max(K, 1), f"{what}: positive labels")
    if len(np.unique(y)) != y.size:
        _bad(f"{what}: positive labels repeat")


def validate_labeling(lab, K, what):
    """Check a stored labeling (a working set's, a cut's): a 1-D integer array of labels (or
    0 / 1 marks of a set labeling) in [0, max(K, 2)), so that no kernel reads past a cost row or
    a score column of the ``K`` labels. Returns it as an int32 array."""
    a = np.asarray(lab)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        _bad(f"{what}: a labeling must be a 1-D integer array")
    _in_range(a, 0, max(K, 2), f"{what}: labels")
    return a.astype(np.int32)


def validate_window(st, structure, n_rows, Kc, K, what="held window"):
    """Check a saved :class:`~streamssvm.oracles.risk.Window` (BMRM's, Pragam's held examples):
    its capacity and counters, every example (:func:`validate_example` with its truth)."""
    try:
        cap, first, version = int(st["capacity"]), int(st["first_seq"]), int(st["version"])
        items = unpack_rows(st["items"], what)
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        _bad(f"{what}: {type(e).__name__}: {e}")
    if not (cap == -1 or 1 <= cap <= 1 << 40) or not 0 <= first <= 1 << 62 or not 0 <= version <= 1 << 62:
        _bad(f"{what}: capacity {cap}, first sequence number {first}, version {version} out of range")
    if cap != -1 and len(items) > cap:
        _bad(f"{what}: {len(items)} examples held, capacity {cap}")
    for i, r in enumerate(items):
        validate_example(r["tok_ptr"], r["fidx"], r["fval"], r["y"], n_rows, Kc, f"{what}: example {i}",
                         structure=structure, Ki=r["Ki"], K=K)
    c = st.get("weights")      # example weights: absent when every one is 1
    if c is not None:
        c = np.asarray(c)
        if c.dtype.kind not in "fiu" or c.shape != (len(items),) or not (np.isfinite(c).all() and (c > 0).all()):
            _bad(f"{what}: the example weights must be one finite number > 0 per held example")


def validate_scalars(values, bounds, what):
    """Check named numbers of a saved state: ``bounds`` maps a key of ``values`` to ``(low,
    high, kind)``, kind ``"int"`` (an integer in [low, high]), ``"float"`` (a finite number in
    [low, high]) or ``"float?"`` (the same, or None). Raises ``CheckpointError``."""
    import math
    for key, (low, high, kind) in bounds.items():
        if key not in values:
            continue
        v = values[key]
        if v is None and kind.endswith("?"):
            continue
        if kind.startswith("int"):
            ok = isinstance(v, (int, np.integer)) and not isinstance(v, bool) and low <= int(v) <= high
        else:
            ok = (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                  and math.isfinite(float(v)) and low <= float(v) <= high)
        if not ok:
            _bad(f"{what}: {key}={v!r} out of range [{low}, {high}]")



def validate_calibration(st, beta_range):
    """Check a saved :class:`~streamssvm.calibration.Temperature` state: a dict with a finite
    inverse temperature in ``beta_range`` and non-negative integer counters. Raises ``CheckpointError``."""
    if not isinstance(st, dict) or any(k not in st for k in ("beta", "n_offered", "n_observed", "n_fits")):
        _bad("calibration: expected a dict with beta, n_offered, n_observed and n_fits")
    import math
    big = 2 ** 62
    validate_scalars(st, {"beta": (beta_range[0], beta_range[1], "float"), "n_offered": (0, big, "int"),
                          "n_observed": (0, big, "int"), "n_fits": (0, big, "int"),
                          # the pool (files before it have none)
                          "window_log_beta": (math.log(beta_range[0]), math.log(beta_range[1]), "float"),
                          "pool_weight": (0.0, float("inf"), "float"),
                          "pool_log_beta": (math.log(beta_range[0]), math.log(beta_range[1]), "float"),
                          "observed_at_fit": (0, big, "int")}, "calibration")

def _rng_state(rng):
    s = rng.bit_generator.state
    return {"bit_generator": s["bit_generator"], "state": str(s["state"]["state"]),
            "inc": str(s["state"]["inc"]), "has_uint32": s["has_uint32"], "uinteger": s["uinteger"]}


def _rng_restore(rng, d):
    rng.bit_generator.state = {"bit_generator": d["bit_generator"],
                               "state": {"state": int(d["state"]), "inc": int(d["inc"])},
                               "has_uint32": d["has_uint32"], "uinteger": d["uinteger"]}


# ----------------------------------------------------------------------------- packed rows
#: a saved list of held examples at least this long is packed (:func:`pack_rows`)
PACK_MIN = 1


def pack_rows(rows, arrays, ints):
    """A list of held examples (dicts with the same keys: the 1-D or 2-D arrays ``arrays`` and
    the integers ``ints``) as a few concatenated arrays plus pointers -- so a checkpoint is a
    few files whatever the window holds, not a few per example. :func:`unpack_rows` reads it
    back (and reads the former layout, the plain list, unchanged).

    >>> rows = [{"a": np.array([1, 2], dtype=np.int32), "k": 3}, {"a": np.array([5], dtype=np.int32), "k": 1}]
    >>> p = pack_rows(rows, ("a",), ("k",))
    >>> sorted(p["packed"]), [r["a"].tolist() for r in unpack_rows(p, "rows")], [r["k"] for r in unpack_rows(p, "rows")]
    (['a', 'a/ptr', 'a/shape', 'k', 'n'], [[1, 2], [5]], [3, 1])
    """
    if len(rows) < PACK_MIN:
        return list(rows)
    out = {"n": len(rows)}
    for k in arrays:
        parts = [np.asarray(r[k]) for r in rows]
        dtype = parts[0].dtype
        if any(p.dtype != dtype or p.ndim != parts[0].ndim for p in parts):   # not one kind: keep the list
            return list(rows)
        sizes = np.array([p.size for p in parts], dtype=np.int64)
        ptr = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(sizes, out=ptr[1:])
        out[k] = np.concatenate([p.ravel() for p in parts]) if ptr[-1] else np.zeros(0, dtype=dtype)
        out[k + "/ptr"] = ptr
        out[k + "/shape"] = np.array([p.shape for p in parts], dtype=np.int64).reshape(len(parts), parts[0].ndim)
    for k in ints:
        out[k] = np.array([int(r[k]) for r in rows], dtype=np.int64)
    return {"packed": out}


def unpack_rows(saved, what):
    """The list of held examples :func:`pack_rows` packed (views into its arrays), every pointer
    and shape checked first; a plain list (the former layout) is returned as it is. Raises
    ``CheckpointError``."""
    if isinstance(saved, list):
        return saved
    if not isinstance(saved, dict) or not isinstance(saved.get("packed"), dict):
        _bad(f"{what}: neither a list of examples nor packed examples")
    p = saved["packed"]
    try:
        n = int(p["n"])
    except (KeyError, TypeError, ValueError, OverflowError):
        _bad(f"{what}: packed examples without a count")
    if not 0 <= n <= 1 << 40:
        _bad(f"{what}: {n} packed examples")
    arrays = sorted(k[:-4] for k in p if isinstance(k, str) and k.endswith("/ptr"))
    ints = [k for k in p if k != "n" and "/" not in k and k not in arrays]
    witnessed = [np.shape(p[k + "/ptr"])[:1] == (n + 1,) for k in arrays] + [np.shape(p[k]) == (n,) for k in ints]
    if not all(witnessed) or (n and not witnessed):   # the count is the arrays' own, before anything is built
        _bad(f"{what}: {n} packed examples, the arrays hold another count")
    rows = [{} for _ in range(n)]
    for k in arrays:
        data, ptr, shape = np.asarray(p[k]), np.asarray(p[k + "/ptr"]), np.asarray(p.get(k + "/shape"))
        if data.ndim != 1 or ptr.shape != (n + 1,) or ptr.dtype.kind not in "iu" or shape.ndim != 2 \
                or shape.shape[0] != n or shape.dtype.kind not in "iu" and shape.size:
            _bad(f"{what}: {k}: packed data, pointers and shapes do not fit {n} examples")
        ptr = ptr.astype(np.int64)
        shape = shape.astype(np.int64)
        if ptr[0] != 0 or ptr[-1] != data.size or np.any(np.diff(ptr) < 0):
            _bad(f"{what}: {k}: pointers are not a partition of its {data.size} entries")
        if shape.size and (shape.min() < 0 or shape.max() > data.size):
            _bad(f"{what}: {k}: negative or oversized shapes")
        if np.any(np.prod(shape, axis=1) != np.diff(ptr)):
            _bad(f"{what}: {k}: shapes do not match the pointers")
        for i in range(n):
            rows[i][k] = data[ptr[i]:ptr[i + 1]].reshape(tuple(shape[i]))
    for k in ints:
        v = np.asarray(p[k])
        if v.shape != (n,) or (v.size and v.dtype.kind not in "iu"):
            _bad(f"{what}: {k}: {n} integers expected")
        for i in range(n):
            rows[i][k] = int(v[i])
    return rows
