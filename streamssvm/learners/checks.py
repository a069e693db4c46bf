"""Conformance checks every learner passes, generated from what it declares (river's
``utils.estimator_checks`` idea): :func:`yield_learner_checks` yields one check per property
and per structure the learner can learn, each a function of no argument that raises
``AssertionError`` on a violation.

* **protocol**: learn, certify, refine, predict, certify again through an estimator; the
  certificate covers the held examples and predictions are labels the model knows;
* **certificate observes**: the same stream certified after every example and never ends with
  bit-identical learner state (weights, schedules, random streams) and the same predictions;
* **state round trip**: a model saved and loaded mid-stream continues bit-identically;
* **clone and seed**: two clones of a seeded learner on the same stream end identical;
* **new labels mid-stream**: labels arriving late are learned and predicted, and the grown
  model still round-trips.

The data are small synthetic streams (a few dozen examples), so a learner's whole suite runs in
seconds once its kernels are compiled.

>>> from streamssvm import learners
>>> sorted({c.__name__.split("[")[0] for c in yield_learner_checks(learners.Pragam(lam=0.05))})
['check_certificate_observes', 'check_clone_and_seed', 'check_new_labels', 'check_protocol', 'check_state_round_trip']
"""
from __future__ import annotations

import functools
import os
import tempfile

import numpy as np

# ----------------------------------------------------------------------------- data and models

TREE = {"cat": "animal", "dog": "animal", "cow": "animal", "car": "vehicle", "bus": "vehicle",
        "animal": "thing", "vehicle": "thing", "rock": "thing"}


def multiclass_data(n=120, seed=0, K=4, d=5):
    """(x dict, class) pairs from a noisy linear model."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(K, d))
    out = []
    for _ in range(n):
        x = rng.normal(size=d)
        y = int(np.argmax(W @ x + 0.5 * rng.normal(size=K)))
        out.append(({f"f{j}": float(v) for j, v in enumerate(x)}, y))
    return out


def multilabel_data(n=100, seed=1, K=4, d=5):
    """(x dict, {label: bool}) pairs; l3 is l0 and l1 (a label interaction)."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(K, d))
    out = []
    for _ in range(n):
        x = rng.normal(size=d)
        s = W @ x + 0.5 * rng.normal(size=K)
        y = {f"l{k}": bool(s[k] > 0) for k in range(K)}
        y["l3"] = y["l0"] and y["l1"]
        out.append(({f"f{j}": float(v) for j, v in enumerate(x)}, y))
    return out


def chain_data(n=80, seed=2, K=3, d=5):
    """(L x d array, L tags) pairs; a tag stays or moves to the next one."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(K, d)) * 1.5
    out = []
    for _ in range(n):
        Ln = int(rng.integers(1, 5))
        y = [int(rng.integers(K))]
        for _t in range(Ln - 1):
            y.append(int((y[-1] + rng.integers(0, 2)) % K))
        out.append((centers[y] + rng.normal(size=(Ln, d)) * 1.2, y))
    return out


def hierarchy_data(n=60, seed=3, d=5):
    """(x, {leaf: bool}) pairs over the leaves of :data:`TREE`."""
    from ..structures import Hierarchy
    rng = np.random.default_rng(seed)
    hier = Hierarchy(TREE)
    nl = hier.n_leaves
    P = rng.normal(size=(nl, d)) * 1.5
    out = []
    for _ in range(n):
        pos = {int(rng.integers(nl))}
        if rng.random() < 0.4:
            pos.add(int(rng.integers(nl)))
        x = P[sorted(pos)].sum(axis=0) + 0.3 * rng.normal(size=d)
        out.append((x, {hier.nodes[j]: j in pos for j in range(nl)}))
    return out


def _cases(structure):
    """The cases a structure name stands for: (case, data generator, estimator factory)."""
    import streamssvm as ss
    if structure == "multiclass":
        return [("multiclass", multiclass_data, lambda lr: ss.MulticlassSSVM(learner=lr)),
                ("extreme", multiclass_data, lambda lr: ss.ExtremeClassifier(learner=lr))]
    if structure == "multilabel":
        return [("multilabel", multilabel_data, lambda lr: ss.MultiLabelSSVM(learner=lr, pairwise=False)),
                ("mrf", multilabel_data, lambda lr: ss.MultiLabelSSVM(learner=lr, pairwise=True))]
    if structure == "hierarchy":
        return [("hierarchy", hierarchy_data, lambda lr: ss.MultiLabelSSVM(learner=lr, hierarchy=TREE))]
    if structure == "chain":
        return [("chain", chain_data, lambda lr: ss.SequenceTagger(learner=lr))]
    return []


def _applicable(learner, make, data):
    """Whether the estimator takes this learner and binds it (GDMM, e.g., learns only the
    pairwise multi-label model)."""
    try:
        m = make(learner.clone())
        m.learn_one(*data[0])
    except (TypeError, ValueError):
        return False
    return True


# ----------------------------------------------------------------------------- state comparison

def _flat(state, prefix=""):
    if isinstance(state, dict):
        return [kv for k in sorted(state) for kv in _flat(state[k], f"{prefix}/{k}")]
    if isinstance(state, (list, tuple)):
        return [kv for i, v in enumerate(state) for kv in _flat(v, f"{prefix}[{i}]")]
    return [(prefix, state)]


def assert_same_state(a, b):
    """Two learner states (:meth:`Learner.state`) are bit-identical."""
    fa, fb = _flat(a), _flat(b)
    assert [k for k, _ in fa] == [k for k, _ in fb], "the states hold different entries"
    for (k, va), (_, vb) in zip(fa, fb):
        if isinstance(va, np.ndarray) or isinstance(vb, np.ndarray):
            va, vb = np.asarray(va), np.asarray(vb)
            assert va.shape == vb.shape and va.dtype == vb.dtype, f"{k}: shape or dtype differs"
            assert np.array_equal(va, vb, equal_nan=va.dtype.kind == "f"), f"{k} differs"
        elif isinstance(va, float) and np.isnan(va):
            assert isinstance(vb, float) and np.isnan(vb), k
        else:
            assert va == vb, f"{k}: {va!r} != {vb!r}"


def _seeded(learner):
    """A clone with a fixed seed when the learner takes one and has none (the checks compare runs)."""
    if "seed" in learner._get_params() and learner.seed is None:
        return learner.clone({"seed": 0})
    return learner.clone()


def _stream(m, data, every=None):
    for i, (x, y) in enumerate(data, 1):
        m.learn_one(x, y)
        if every and i % every == 0:
            m.certificate()
    return m


def _same_model(a, b, probes):
    assert_same_state(a.bound_learner.state(), b.bound_learner.state())
    assert [a.predict_one(x) for x in probes] == [b.predict_one(x) for x in probes]


# ----------------------------------------------------------------------------- checks

def check_protocol(learner, make, data):
    m = _stream(make(_seeded(learner)), data)
    lr = m.bound_learner
    c = m.certificate()
    assert c.n_blocks == lr.n_blocks <= len(data)
    assert c.raw_gap > -1e-9 or not np.isfinite(c.dual), "a negative duality gap"
    m.refine(0.5)
    m.certificate()
    known = set(m.classes) if hasattr(m, "classes") else None
    for x, _ in data[:10]:
        p = m.predict_one(x)
        if known is not None and not isinstance(p, (dict, list)):
            assert p in known, f"predicted {p!r}, not a known label"
    W = lr.emission_weights()
    assert (W is not None) == type(lr).dense_weights


def check_certificate_observes(learner, make, data):
    ref = _stream(make(_seeded(learner)), data)
    ref.refine(1.0)
    m = _stream(make(_seeded(learner)), data, every=1)
    m.refine(1.0)
    m.certificate()
    _same_model(m, ref, [x for x, _ in data[:15]])
    c1, c2 = m.certificate(), m.certificate()
    assert (c1.primal, c1.dual, c1.raw_gap) == (c2.primal, c2.dual, c2.raw_gap) or not np.isfinite(c1.dual)


def check_state_round_trip(learner, make, data):
    from .. import load
    half = len(data) // 2
    a = _stream(make(_seeded(learner)), data[:half])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.ssvm")
        a.save(path)
        b = load(path)
    _same_model(a, b, [x for x, _ in data[:5]])
    for m in (a, b):
        _stream(m, data[half:])
        m.refine(1.0)
    _same_model(a, b, [x for x, _ in data[:15]])


def check_clone_and_seed(learner, make, data):
    seeded = _seeded(learner)
    a = _stream(make(seeded.clone()), data)
    b = _stream(make(seeded.clone()), data)
    _same_model(a, b, [x for x, _ in data[:15]])


def check_new_labels(learner, make, data):
    """The first half of the stream shows two labels only (the others arrive later)."""
    first = data[:len(data) // 2]
    y0 = first[0][1]
    if isinstance(y0, int):   # multiclass: keep two classes in the first half
        early = [(x, y) for x, y in first if y in (0, 1)] or first[:1]
    elif isinstance(y0, dict):
        keep = sorted(y0)[:2]
        early = [(x, {k: v for k, v in y.items() if k in keep}) for x, y in first]
    else:                     # chains: tags 0 and 1 first
        early = [(x, y) for x, y in first if max(y) <= 1] or first[:1]
    m = _stream(make(_seeded(learner)), early + data[len(data) // 2:])
    m.refine(0.5)
    c = m.certificate()
    assert c.n_blocks == m.bound_learner.n_blocks
    for x, _ in data[:10]:
        m.predict_one(x)
    with tempfile.TemporaryDirectory() as d:
        from .. import load
        path = os.path.join(d, "model.ssvm")
        m.save(path)
        r = load(path)
    _same_model(m, r, [x for x, _ in data[:10]])


CHECKS = (check_protocol, check_certificate_observes, check_state_round_trip, check_clone_and_seed,
          check_new_labels)


def yield_learner_checks(learner, n=40):
    """The conformance checks of ``learner`` (a configured learner, e.g. from
    ``_unit_test_params``): one per check and per case of the structures it declares
    (``Learner.structures``; None: all), each a function of no argument named
    ``check_x[case]``."""
    structures = learner.structures or ("multiclass", "multilabel", "hierarchy", "chain")
    for structure in structures:
        for case, gen, make in _cases(structure):
            data = gen(n, seed=len(case))
            if not _applicable(learner, make, data):
                continue
            for check in CHECKS:
                fn = functools.partial(check, learner, make, data)
                fn.__name__ = f"{check.__name__}[{case}]"
                yield fn
