"""Validation of a saved :class:`~streamssvm.learners.GDMM` state (chains and pairwise
multi-label) before anything is restored.

The GDMM kernels (:mod:`streamssvm._kernels.gdmm_chain`,
:mod:`streamssvm._kernels.gdmm_multilabel`) trust their index arrays: the example and token
pointers, the feature ids, the true labels, the active sets' labels and counts. A model file or
checkpoint is data from outside, so :meth:`GDMM.restore` first runs
:func:`validate_gdmm_state`, which checks every array of the state -- shape, dtype, monotone
pointers, index ranges, finiteness and the consistency of the arrays with each other -- and
refuses a state that breaks any of them with a ``ValueError`` naming the field. It observes only
(it never changes the state or the learner), like ``saved_state.validate_store_state`` does for the
block learners' stores. :func:`grow_rows` is the engines' one rule for growing their arrays.

>>> import streamssvm as ss
>>> from streamssvm.learners import GDMM
>>> tagger = ss.SequenceTagger(learner=GDMM(lam=0.1, seed=0))
>>> tagger.learn_one([{"w=a": 1}, {"w=b": 1}], ["X", "Y"])
>>> st = tagger._learner.state()
>>> validate_gdmm_state(st, tagger._structure, tagger._labels.labels)
>>> st["fidx"][0] = 99      # a feature id past the weight rows
>>> validate_gdmm_state(st, tagger._structure, tagger._labels.labels)
Traceback (most recent call last):
...
ValueError: invalid GDMM state: fidx: values out of range [0, 3): min 0, max 99
"""
from __future__ import annotations

import numpy as np

from .._kernels import gdmm as G

#: tolerance on the simplex constraint of the stored factor marginals (the kernels' projections
#: keep it to rounding; a marginal off the simplex makes the certificate's dual infeasible)
SIMPLEX_TOL = 1e-6
#: relative tolerance on the stored squared token norms (recomputed from the features)
NORM_RTOL = 1e-9

_MAX_CAP = 1 << 24   # label capacity / active-set width / factor capacity


def grow_rows(x, n):
    """``x`` with at least ``n`` rows (doubling; new rows zero): the engines' held-example arrays grow
    this way."""
    if x.shape[0] >= n:
        return x
    shape = (max(n, 2 * x.shape[0]),) + x.shape[1:]
    y = np.zeros(shape, dtype=x.dtype)
    y[:x.shape[0]] = x
    return y

def _fail(field, msg):
    raise ValueError(f"invalid GDMM state: {field}: {msg}")


def _get(st, key):
    try:
        return st[key]
    except (KeyError, TypeError):
        _fail(key, "missing")


def _int(st, key, lo=None, hi=None):
    """A scalar integer field in [lo, hi]."""
    v = _get(st, key)
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v[()]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        _fail(key, f"must be an integer, got {type(v).__name__}")
    v = int(v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        _fail(key, f"{v} out of range [{lo}, {hi}]")
    return v


def _arr(st, key, kind, shape, where=None):
    """A numpy array of ``kind`` ("int", "float", "bool") and exactly ``shape``."""
    name = key if where is None else f"{where}.{key}"
    a = np.asarray(_get(st, key))
    dk = a.dtype.kind
    if kind == "int":
        ok = dk in "iu" or (a.size == 0 and dk in "fb")
    elif kind == "float":
        ok = dk in "fiu" or (a.size == 0 and dk == "b")
    else:
        ok = dk == "b" or (dk in "iu" and (a.size == 0 or np.isin(a, (0, 1)).all()))
    if not ok:
        _fail(name, f"must be a {kind} array, got dtype {a.dtype}")
    if a.shape != tuple(shape):
        _fail(name, f"shape {a.shape}, expected {tuple(shape)}")
    if kind == "float":
        a = a.astype(np.float64, copy=False)
        if not np.isfinite(a).all():
            _fail(name, "non-finite values")
    elif kind == "int":
        a = a.astype(np.int64, copy=False)
    else:
        a = a.astype(np.bool_, copy=False)
    return a


def _in_range(a, lo, hi, name):
    if a.size and (int(a.min()) < lo or int(a.max()) >= hi):
        _fail(name, f"values out of range [{lo}, {hi}): min {int(a.min())}, max {int(a.max())}")


def _pointers(a, end, name, strict=False):
    """a[0] == 0, a[-1] == end, non-decreasing (increasing when ``strict``)."""
    if a[0] != 0 or a[-1] != end:
        _fail(name, f"must run from 0 to {end}, got {int(a[0])} .. {int(a[-1])}")
    d = np.diff(a)
    if d.size and (d.min() < 1 if strict else d.min() < 0):
        _fail(name, "not " + ("increasing (every example needs a token)" if strict else "non-decreasing"))


def _csr(st, ptr_key, n_rows, d):
    """The held rows' features: ``st[ptr_key]`` (n_rows + 1 non-decreasing pointers from 0 to the
    number of features), ``fidx`` in [0, d), finite ``fval``. Returns each row's squared norm."""
    ptr = np.asarray(_get(st, ptr_key))
    if ptr.shape != (n_rows + 1,):
        _fail(ptr_key, f"shape {ptr.shape}, expected ({n_rows + 1},) (one pointer per row + 1)")
    fidx = np.asarray(_get(st, "fidx"))
    if fidx.ndim != 1:
        _fail("fidx", f"must be 1-D, got shape {fidx.shape}")
    nz = fidx.size
    ptr = _arr(st, ptr_key, "int", (n_rows + 1,))
    _pointers(ptr, nz, ptr_key)
    _in_range(_arr(st, "fidx", "int", (nz,)), 0, d, "fidx")
    fval = _arr(st, "fval", "float", (nz,))
    rows = np.repeat(np.arange(n_rows), np.diff(ptr))
    return np.bincount(rows, weights=fval * fval, minlength=n_rows)


def _rng(st):
    r = _get(st, "rng")
    bg = np.random.PCG64()
    try:
        s0 = bg.state
        s0["state"] = {"state": int(r["state"]), "inc": int(r["inc"])}
        s0["has_uint32"] = int(r["has_uint32"])
        s0["uinteger"] = int(r["uinteger"])
        bg.state = s0
    except Exception as e:  # noqa: BLE001 - whatever the content, it is not a generator state
        _fail("rng", f"not a PCG64 state ({type(e).__name__}: {e})")


def _repeats(keys, active):
    """Whether some row of ``keys`` repeats a value among its ``active`` entries."""
    if keys.size == 0:
        return False
    fill = -1 - np.arange(keys.shape[1], dtype=np.int64)   # distinct, below every real key
    k = np.sort(np.where(active, keys, fill[None, :]), axis=1)
    return bool((np.diff(k, axis=1) == 0).any())


def _order(st, alive):
    order = np.asarray(_get(st, "order"))
    if order.ndim != 1 or (order.size and order.dtype.kind not in "iu"):
        _fail("order", f"must be a 1-D integer array, got {order.dtype} {order.shape}")
    order = order.astype(np.int64)
    _in_range(order, 0, alive.shape[0], "order")
    if len(np.unique(order)) != order.size or not alive[order].all():
        _fail("order", "must name held (alive) examples, each once")


def validate_gdmm_state(st, structure, labels):
    """Refuse (``ValueError`` naming the field) a GDMM state that the kernels could not use
    safely or that breaks the learner's invariants; observes only. Dispatches on the structure:
    chains (:func:`validate_chain_state`) or pairwise multi-label (:func:`validate_ml_state`)."""
    if not isinstance(st, dict):
        _fail("state", f"must be a dict, got {type(st).__name__}")
    if getattr(structure, "name", None) == "multilabel":
        validate_ml_state(st, structure, labels)
    else:
        validate_chain_state(st, structure, labels)


def _common_scalars(st, labels):
    _int(st, "n_learned", 0)
    _int(st, "passes_done", 0)
    _rng(st)


def _example_weights(st, n):
    """The optional ``ex_weight`` (one weight c_i > 0 per stored example slot; saved only when a
    weight is not 1)."""
    if "ex_weight" in st:
        c = _arr(st, "ex_weight", "float", (n,))
        if c.size and c.min() <= 0.0:
            _fail("ex_weight", "example weights must be > 0")


def validate_chain_state(st, structure, labels):
    """Every array of a chain GDMM state (see :meth:`GDMM.state`): weights, cost, averaging
    accumulators, the CSR store of the held examples (example / token pointers, feature ids and
    values, true labels, squared norms, first / last flags, 1 / L weights) and the factor duals
    (unigram active sets ``U``, bigram active sets ``B``) with their invariants (slot 0 holds
    the ground truth, labels < K and distinct, marginals on the simplex, every active bigram's
    labels active at its two tokens), the FIFO order and the generator state."""
    if "ml" in st:
        _fail("ml", "a multi-label model's state for a chain structure")
    use_trans = bool(structure.use_trans)
    Wu = np.asarray(_get(st, "Wu"))
    if Wu.ndim != 2 or Wu.shape[0] < 3 or not 1 <= Wu.shape[1] <= _MAX_CAP:
        _fail("Wu", f"must be (2 + features) x label capacity, got shape {Wu.shape}")
    D, Kc = Wu.shape
    Wu = _arr(st, "Wu", "float", (D, Kc))
    _arr(st, "T", "float", (Kc, Kc))
    C = _arr(st, "C", "float", (Kc, Kc))
    K = _int(st, "K", 0, Kc)
    if K > len(labels):
        _fail("K", f"{K} labels, the label index names {len(labels)}")
    d = _int(st, "d", 0, D - 2)
    _int(st, "tick", 0)
    _int(st, "seed_base", 0)
    _common_scalars(st, labels)
    acap = _int(st, "acap", 2, _MAX_CAP)
    _arr(st, "counters", "int", (G.N_COUNTERS,))
    if K:
        try:
            want = np.asarray(structure.cost_matrix(Kc, list(labels)[:K]), dtype=np.float64)
        except ValueError as e:
            _fail("C", f"the structure refuses the labels ({e})")
        if not np.allclose(C[:K, :K], want[:K, :K], rtol=1e-12, atol=0.0):
            _fail("C", "the cost matrix differs from the structure's for these labels")
    avg = [k for k in ("ZW", "ZT", "avg_k") if k in st]
    if avg:
        if len(avg) != 3:
            _fail("ZW", "the averaging accumulators need ZW, ZT and avg_k together")
        for key, shape in (("ZW", (D, Kc)), ("ZT", (Kc, Kc))):
            Z = np.asarray(st[key])
            if Z.shape != shape or Z.dtype.kind not in "fiu":
                _fail(key, f"the averaging accumulators must match the weights' shape {shape}, got {Z.dtype} {Z.shape}")
            if not np.isfinite(Z).all():
                _fail(key, "the averaging accumulators must be finite")
        avg_k = _int(st, "avg_k")
        if avg_k < 0:
            _fail("avg_k", f"the averaging accumulators need a visit count avg_k >= 0, got {avg_k}")

    # ---- the held examples (CSR)
    ex_ptr = np.asarray(_get(st, "ex_ptr"))
    if ex_ptr.ndim != 1 or ex_ptr.size < 1:
        _fail("ex_ptr", f"must be a 1-D array of n_examples + 1 pointers, got shape {ex_ptr.shape}")
    ne = ex_ptr.size - 1
    ex_ptr = _arr(st, "ex_ptr", "int", (ne + 1,))
    alive = _arr(st, "ex_alive", "bool", (ne,))
    _example_weights(st, ne)
    ytrue_raw = np.asarray(_get(st, "ytrue"))
    if ytrue_raw.ndim != 1:
        _fail("ytrue", f"must be 1-D, got shape {ytrue_raw.shape}")
    nt = ytrue_raw.size
    _pointers(ex_ptr, nt, "ex_ptr", strict=True)
    ytrue = _arr(st, "ytrue", "int", (nt,))
    _in_range(ytrue, 0, K, "ytrue")
    sq = _csr(st, "tok_ptr", nt, d)
    first = _arr(st, "first", "bool", (nt,))
    last = _arr(st, "last", "bool", (nt,))
    want_first = np.zeros(nt, dtype=np.bool_)
    want_last = np.zeros(nt, dtype=np.bool_)
    if use_trans and nt:
        want_first[ex_ptr[:-1]] = True
        want_last[ex_ptr[1:] - 1] = True
    if not np.array_equal(first, want_first):
        _fail("first", "must flag exactly each example's first token" if use_trans
              else "must be all False (the chain has no transitions)")
    if not np.array_equal(last, want_last):
        _fail("last", "must flag exactly each example's last token" if use_trans
              else "must be all False (the chain has no transitions)")
    lens = np.diff(ex_ptr)
    linv = _arr(st, "linv", "float", (nt,))
    if not np.allclose(linv, 1.0 / np.repeat(lens, lens), rtol=1e-12, atol=0.0):
        _fail("linv", "must be 1 / (length of the token's example)")
    xsq = _arr(st, "xsq", "float", (nt,))
    if not np.allclose(xsq, sq + want_first + want_last, rtol=NORM_RTOL, atol=1e-12):
        _fail("xsq", "the squared token norms do not match the features (+ the start / end biases)")

    # ---- unigram factors: active labels, marginals, multipliers
    U, B = _get(st, "U"), _get(st, "B")
    if not isinstance(U, dict) or not isinstance(B, dict):
        _fail("U", "U and B must be dicts of arrays")
    cnt = _arr(U, "cnt", "int", (nt,), "U")
    _in_range(cnt, 1, acap + 1, "U.cnt")
    lab = _arr(U, "lab", "int", (nt, acap), "U")
    mu = _arr(U, "mu", "float", (nt, acap), "U")
    for k in ("lamL", "lamR"):
        _arr(U, k, "float", (nt, acap), "U")
    act = np.arange(acap)[None, :] < cnt[:, None]
    _in_range(lab[act], 0, K, "U.lab")
    if nt and not np.array_equal(lab[:, 0], ytrue):
        _fail("U.lab", "slot 0 of every token's active set must hold its true label")
    if _repeats(lab, act):
        _fail("U.lab", "a token's active set repeats a label")
    _simplex(mu, act, "U.mu")

    # ---- bigram factors: active pairs and marginals
    bcnt = _arr(B, "cnt", "int", (nt,), "B")
    ba = _arr(B, "a", "int", (nt, acap), "B")
    bb = _arr(B, "b", "int", (nt, acap), "B")
    bmu = _arr(B, "mu", "float", (nt, acap), "B")
    want_bcnt = np.ones(nt, dtype=np.int64)
    if nt:
        want_bcnt[ex_ptr[1:] - 1] = 0
    if np.any((bcnt == 0) != (want_bcnt == 0)) or bcnt.min(initial=0) < 0 or bcnt.max(initial=0) > acap:
        _fail("B.cnt", f"must be in [1, {acap}] between two tokens of an example and 0 at its last token")
    bact = np.arange(acap)[None, :] < bcnt[:, None]
    _in_range(ba[bact], 0, K, "B.a")
    _in_range(bb[bact], 0, K, "B.b")
    inner = np.flatnonzero(want_bcnt)
    if inner.size and not (np.array_equal(ba[inner, 0], ytrue[inner])
                           and np.array_equal(bb[inner, 0], ytrue[inner + 1])):
        _fail("B.a", "slot 0 of every bigram's active set must hold the true pair")
    if _repeats(ba * Kc + bb, bact):
        _fail("B.a", "a bigram's active set repeats a pair")
    _simplex(bmu, bact, "B.mu")
    # every active pair's labels are active at its two tokens (the unigram eviction relies on it)
    ukeys = (np.arange(nt)[:, None] * Kc + lab)[act]
    rows = np.nonzero(bact)[0]
    if rows.size:
        ka = rows * Kc + ba[bact]
        kb = (rows + 1) * Kc + bb[bact]
        if not (np.isin(ka, ukeys).all() and np.isin(kb, ukeys).all()):
            _fail("B.a", "an active pair names a label that is not active at its token")
    _order(st, alive)


def _simplex(mu, act, name):
    m = np.where(act, mu, 0.0)
    if (m < 0.0).any():
        _fail(name, "negative marginals")
    if mu.shape[0] and act.any():
        rows = act.any(axis=1)
        if np.abs(m.sum(axis=1)[rows] - 1.0).max() > SIMPLEX_TOL:
            _fail(name, "the active marginals do not sum to 1")


def validate_ml_state(st, structure, labels):
    """Every array of a pairwise multi-label GDMM state (see ``MLPairGDMM.state``): weights,
    the held examples' CSR store (pointers, feature ids and values, squared norms, label
    counts, 0/1 truths), the unigram duals in [0, 1], the active pairwise factors (label pairs
    k < l < K, distinct per example, marginals in the tetrahedron), the FIFO order and the
    generator state."""
    if "ml" not in st:
        _fail("ml", "a chain model's state for a multi-label structure")
    # how inactive pair factors are defined: "product" (they follow their unigrams, u_k u_l) or
    # "truth" (states saved before that: they sat at the ground truth; converted on restore)
    if st.get("inactive_factors", "truth") not in ("product", "truth"):
        _fail("inactive_factors", f"unknown form {st.get('inactive_factors')!r}")
    E = np.asarray(_get(st, "E"))
    if E.ndim != 2 or E.shape[0] < 1 or not 1 <= E.shape[1] <= _MAX_CAP:
        _fail("E", f"must be features x label capacity, got shape {E.shape}")
    Kc = _int(st, "Kc", 1, _MAX_CAP)
    if E.shape[1] != Kc:
        _fail("E", f"has {E.shape[1]} columns, the label capacity Kc is {Kc}")
    Drows = E.shape[0]
    _arr(st, "E", "float", (Drows, Kc))
    _arr(st, "T", "float", (Kc, Kc))
    K = _int(st, "K", 0, Kc)
    if K > len(labels):
        _fail("K", f"{K} labels, the label index names {len(labels)}")
    d = _int(st, "d", 0, Drows)
    fcap = _int(st, "fcap", 1, _MAX_CAP)
    _common_scalars(st, labels)
    _arr(st, "counters", "int", (G.ML_N_COUNTERS,))
    x_ptr = np.asarray(_get(st, "x_ptr"))
    if x_ptr.ndim != 1 or x_ptr.size < 1:
        _fail("x_ptr", f"must be a 1-D array of n_examples + 1 pointers, got shape {x_ptr.shape}")
    n = x_ptr.size - 1
    sq = _csr(st, "x_ptr", n, d)
    xsq = _arr(st, "xsq", "float", (n,))
    if not np.allclose(xsq, sq, rtol=NORM_RTOL, atol=1e-12):
        _fail("xsq", "the squared norms do not match the features")
    Ki = _arr(st, "Ki", "float", (n,))
    if Ki.size and Ki.min() < 1.0:
        _fail("Ki", "label counts must be >= 1")
    Y = _arr(st, "Y", "float", (n, Kc))
    if not np.isin(Y, (0.0, 1.0)).all() or Y[:, K:].any():
        _fail("Y", f"truths must be 0 / 1 over the first {K} labels")
    alive = _arr(st, "alive", "bool", (n,))
    _example_weights(st, n)
    u = _arr(st, "u", "float", (n, Kc))
    if u.size and (u.min() < 0.0 or u.max() > 1.0):
        _fail("u", "unigram marginals must lie in [0, 1]")
    _arr(st, "Dv", "float", (n, Kc))
    fcnt = _arr(st, "fcnt", "int", (n,))
    _in_range(fcnt, 0, fcap + 1, "fcnt")
    fk = _arr(st, "fk", "int", (n, fcap))
    fl = _arr(st, "fl", "int", (n, fcap))
    fz = _arr(st, "fz", "float", (n, fcap, 3))
    _arr(st, "flam", "float", (n, fcap, 2))
    act = np.arange(fcap)[None, :] < fcnt[:, None]
    ka, la = fk[act], fl[act]
    _in_range(ka, 0, K, "fk")
    _in_range(la, 0, K, "fl")
    if (ka >= la).any():
        _fail("fk", "a pairwise factor must name labels k < l")
    if _repeats(fk * Kc + fl, act):
        _fail("fk", "an example's active factors repeat a label pair")
    z = fz[act]
    tol = SIMPLEX_TOL   # the tetrahedron: 0 <= q <= min(mk, ml), mk + ml - q <= 1
    if z.size and ((z[:, 2] < -tol).any() or (z[:, 2] > np.minimum(z[:, 0], z[:, 1]) + tol).any()
                   or (z[:, 0] + z[:, 1] - z[:, 2] > 1.0 + tol).any()):
        _fail("fz", "pairwise marginals outside the tetrahedron")
    _order(st, alive)
