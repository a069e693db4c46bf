"""One validation, one encoding (issue 22 items 1 and 3): ``predict_learn_one`` encodes a
record once, ``learn_one`` reuses the encoding of a ``predict_one`` on the same unchanged ``x``
(river's progressive validation), and integer feature names take the exact-type fast path.
Every path must give bit-identical predictions and states to the reference: ``predict_one`` on
a copy of ``x``, then ``learn_one`` on another copy (no reuse possible)."""
import copy

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.features import EncodedRecord, FeatureIndex

LEARNERS = {
    "BCFW": lambda: ss.learners.BCFW(lam=1e-2, replay=1, seed=0),
    "BCFW-avg": lambda: ss.learners.BCFW(lam=1e-2, replay=2, seed=1, averaging=True),
    "SGD": lambda: ss.learners.SGD(seed=0),
    "CuttingPlane": lambda: ss.learners.CuttingPlane(lam=1e-2),
    "BMRM": lambda: ss.learners.BMRM(lam=1e-2),
    "Pragam": lambda: ss.learners.Pragam(lam=1e-2),
}


def _stream(kind, n=60, seed=0):
    rng = np.random.default_rng(seed)
    K, d = 4, 7
    C = rng.normal(size=(K, d))
    out = []
    for i in range(n):
        y = int(rng.integers(0, K))
        v = C[y] + rng.normal(size=d)
        v[rng.random(d) < 0.3] = 0.0
        if kind == "array":
            x = v
        elif kind == "int":
            x = {j: float(v[j]) for j in range(d) if v[j] != 0.0}
        else:   # str keys; new names keep appearing
            x = {f"f{j}": float(v[j]) for j in range(d) if v[j] != 0.0}
            x[f"rare{i % 9}"] = 1.0
        out.append((x, "abcd"[y] if kind != "int" else y))
    return out


def _flat_state(m):
    leaves = []

    def walk(v, path):
        if isinstance(v, dict):
            for k in sorted(v, key=str):
                walk(v[k], f"{path}/{k}")
        elif isinstance(v, (list, tuple)):
            for i, u in enumerate(v):
                walk(u, f"{path}/{i}")
        elif isinstance(v, np.ndarray):
            leaves.append((path, v.dtype.str, v.shape, v.tobytes()))
        else:
            leaves.append((path, repr(v)))
    walk(m.state(), "")
    return leaves


def _model(learner, hashing):
    return ss.MulticlassSSVM(learner=LEARNERS[learner](), n_features=64 if hashing else None)


@pytest.mark.parametrize("learner", sorted(LEARNERS))
@pytest.mark.parametrize("kind", ["str", "int", "array", "hashed"])
def test_encode_once_paths_are_bit_identical(learner, kind):
    """predict_learn_one, and predict_one + learn_one on the same x (the reuse), give the
    predictions and states of the reference path, for every learner of MulticlassSSVM."""
    rows = _stream("str" if kind == "hashed" else kind)
    ref, one, pv = (_model(learner, kind == "hashed") for _ in range(3))
    p_ref, p_one, p_pv = [], [], []
    for x, y in rows:
        p_ref.append(ref.predict_one(copy.deepcopy(x)))
        ref.learn_one(copy.deepcopy(x), y)
        p_one.append(one.predict_learn_one(x, y))
        p_pv.append(pv.predict_one(x))
        pv.learn_one(x, y)
    assert p_ref == p_one == p_pv
    assert _flat_state(ref) == _flat_state(one) == _flat_state(pv)


def test_learn_one_reuses_the_encoding_of_predict_one():
    m = ss.MulticlassSSVM(learner=ss.learners.SGD(seed=0))
    m.learn_one({"a": 1.0}, "x")
    m.learn_one({"b": 1.0}, "y")
    x = {"a": 2.0, "b": 1.0}
    m.predict_one(x)
    enc = m._last_enc
    assert enc.x is x and m._features.trusts(enc) and enc.unchanged()
    calls = []
    orig = m._features.encode_one
    m._features.encode_one = lambda *a, **k: calls.append(a) or orig(*a, **k)
    m.learn_one(x, "x")
    assert calls == []            # reused
    assert m._last_enc is None    # once


@pytest.mark.parametrize("mutate", [
    lambda x: x.__setitem__("a", 3.0),       # a value changed
    lambda x: x.__setitem__("c", 1.0),       # a name added (a new feature)
    lambda x: x.pop("b"),                    # a name removed
    lambda x: x.__setitem__("a", float("nan")),   # now invalid: learn_one must reject it
])
def test_a_dict_mutated_between_predict_and_learn_is_encoded_again(mutate):
    """The reuse is keyed on identity AND an unchanged copy: a mutated dict is re-encoded
    (and re-validated), giving what a fresh model gets from learn_one on the new dict."""
    def fresh():
        m = ss.MulticlassSSVM(learner=ss.learners.SGD(seed=0))
        m.learn_one({"a": 1.0}, "x")
        m.learn_one({"b": 1.0}, "y")
        return m
    m, ref = fresh(), fresh()
    x = {"a": 2.0, "b": 1.0}
    m.predict_one(x)
    mutate(x)
    try:
        ref.learn_one(dict(x), "x")
    except ValueError:
        with pytest.raises(ValueError, match="non-finite"):
            m.learn_one(x, "x")
        assert _flat_state(m) == _flat_state(fresh())
        return
    m.learn_one(x, "x")
    assert _flat_state(m) == _flat_state(ref)


def test_a_mutated_array_is_encoded_again():
    def fresh():
        m = ss.MulticlassSSVM(learner=ss.learners.SGD(seed=0))
        m.learn_one(np.array([1.0, 0.0]), "x")
        m.learn_one(np.array([0.0, 1.0]), "y")
        return m
    m, ref = fresh(), fresh()
    x = np.array([2.0, 1.0])
    m.predict_one(x)
    x[0] = -5.0
    m.learn_one(x, "x")
    ref.learn_one(x.copy(), "x")
    assert _flat_state(m) == _flat_state(ref)


def test_hashing_does_not_reuse_dicts():
    """With hashing, 1, 1.0 and True are equal keys in different buckets: no copy is kept."""
    f = FeatureIndex(n_features=16)
    enc = f.encode_record({1: 1.0}, keep=True)
    assert not enc.unchanged()


def test_a_rollback_makes_an_encoding_stale():
    f = FeatureIndex()
    f.encode_dict({"a": 1.0, "b": 1.0}, grow=True)
    enc = f.encode_record({"a": 1.0}, keep=True)
    assert f.trusts(enc)
    m = f.mark()
    f.encode_dict({"c": 1.0}, grow=True)
    f.rollback(m)
    assert not f.trusts(enc)   # same size again, but the index went through a rollback


def test_encoded_records_come_from_an_index_only():
    with pytest.raises(TypeError, match="encode_record"):
        EncodedRecord(object(), {}, (None, None, None), True, FeatureIndex(), None)


def test_new_names_make_an_incomplete_record():
    f = FeatureIndex()
    f.encode_dict({"a": 1.0}, grow=True)
    enc = f.encode_record({"a": 2.0, "z": 1.0})
    assert not enc.complete and not f.trusts(enc)
    assert enc.fidx.tolist() == [0, 1] and f.names == ["a"]   # nothing registered


def test_predict_learn_one_bad_record_changes_nothing_and_names_x_first():
    m = ss.MulticlassSSVM(learner=ss.learners.SGD(seed=0))
    m.learn_one({"a": 1.0}, "x")
    before = _flat_state(m)
    with pytest.raises(TypeError, match="non-numeric"):
        m.predict_learn_one({"new": 1.0, "a": "high"}, None)
    with pytest.raises(ValueError, match="missing"):
        m.predict_learn_one({"new": 1.0}, None)
    assert _flat_state(m) == before and m._features.names == ["a"]


@pytest.mark.parametrize("key, err", [(2**63, ValueError), (-2**63 - 1, ValueError), (True, None),
                                      (np.int64(3), None), (3, None)])
def test_int_key_fast_path_keeps_the_checks(key, err):
    f = FeatureIndex()
    if err is None:
        f.encode_dict({key: 1.0}, grow=True)
        assert f.names == [key]
    else:
        with pytest.raises(err, match="64 bits"):
            f.encode_dict({key: 1.0}, grow=True)
        assert f.names == []


@pytest.mark.parametrize("key", [2**63, -2**63 - 1, 2**70])
@pytest.mark.parametrize("value", [0.0, 1.0])
def test_bulk_int_key_path_checks_an_unknown_names_range(key, value):
    """The one-pass path of dicts of >= BULK_MIN int names looks the names up first and checks
    the int range only when one is not known: a name beyond 64 bits (zero-valued or not) still
    raises as the feature-by-feature scan does, and a record of known names encodes as it."""
    f = FeatureIndex()
    known = {j: float(j + 1) for j in range(2 * FeatureIndex.BULK_MIN)}
    f.encode_dict(known, grow=True)
    x = dict(known)
    x[key] = value
    with pytest.raises(ValueError, match="64 bits"):
        f.encode_record(x)
    with pytest.raises(ValueError, match="64 bits"):
        f.encode_dict(x, grow=True)
    assert sorted(f.names) == sorted(known)
    x = {j: 2.0 for j in range(3, 3 + FeatureIndex.BULK_MIN)}
    enc = f.encode_record(x)
    idx, val = f.encode_dict(x, grow=False)
    assert f.trusts(enc) and enc.fidx.tolist() == list(idx) and enc.fval.tolist() == list(val)


@pytest.mark.parametrize("where", ["row", "other_row", "T", "B", "none"])
def test_weights_finite_after_one_record_matches_numpy(where):
    """The one-pass kernel of weights_finite(full=False) answers what the numpy checks do."""
    m = ss.MulticlassSSVM(learner=ss.learners.SGD(seed=0))
    for i in range(6):
        m.learn_one({f"f{i % 3}": 1.0, "g": float(i)}, "abc"[i % 3])
    W = m._learner.weight_tables()
    rows = m._last_fidx
    if where == "row":
        W.E[rows[-1], 0] = np.nan
    elif where == "other_row":
        other = [j for j in range(W.E.shape[0]) if j not in set(rows.tolist())][0]
        W.E[other, 1] = np.inf
    elif where == "T":
        W.T[0, 0] = np.inf
    elif where == "B":
        W.B[-1, -1] = np.nan
    want = (np.isfinite(W.T).all() and np.isfinite(W.B).all()
            and np.isfinite(W.E[rows[(rows >= 0) & (rows < W.E.shape[0])]]).all())
    assert m.weights_finite(full=False) == bool(want)
    assert m.weights_finite(full=True) == (where == "none")


def _ml_stream(kind, n=40, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        v = rng.normal(size=6)
        v[rng.random(6) < 0.3] = 0.0
        y = {lab: bool(v[j] > 0.2) for j, lab in enumerate("pqr")}
        x = v if kind == "array" else {f"f{j}": float(v[j]) for j in range(6) if v[j] != 0.0} | {f"n{i % 7}": 1.0}
        out.append((x, y))
    return out


@pytest.mark.parametrize("kind", ["dict", "array"])
@pytest.mark.parametrize("make", [
    lambda: ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact", lam=1e-3, seed=0)),
    lambda: ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0)),
    lambda: ss.MultiLabelSSVM(learner=ss.learners.SGD(seed=0)),
], ids=["extreme-memoir", "multilabel-bcfw", "multilabel-sgd"])
def test_reuse_is_bit_identical_for_the_other_flat_estimators(make, kind):
    """ExtremeClassifier and MultiLabelSSVM reuse predict_one's encoding in learn_one (and so
    in predict_learn_one) with the predictions and states of the path without reuse."""
    multilabel = "MultiLabel" in type(make()).__name__
    rows = _ml_stream(kind) if multilabel else [(x, "abcd"[i % 4]) for i, (x, _) in enumerate(_stream(
        "array" if kind == "array" else "str"))]
    ref, pv, one = make(), make(), make()
    p_ref, p_pv, p_one = [], [], []
    for x, y in rows:
        p_ref.append(ref.predict_one(copy.deepcopy(x)))
        ref.learn_one(copy.deepcopy(x), y)
        p_pv.append(pv.predict_one(x))
        pv.learn_one(x, y)
        p_one.append(one.predict_learn_one(x, y))
    assert p_ref == p_pv == p_one
    assert _flat_state(ref) == _flat_state(pv) == _flat_state(one)


def _slow(f, x, grow):
    i, v = f._register(*f._scan(x, grow))
    return np.asarray(i, dtype=np.int32), np.asarray(v, dtype=np.float64)


@pytest.mark.parametrize("keys", ["str", "int"])
def test_bulk_dict_encoding_equals_the_scan(keys):
    """Dicts of >= BULK_MIN features take array operations (FeatureIndex._dict_arrays): the
    arrays of the feature-by-feature scan, to the bit, for known, new and zero features."""
    rng = np.random.default_rng(3)
    name = (lambda j: f"w{j}") if keys == "str" else (lambda j: int(j) * 7 - 100)
    fast, slow = FeatureIndex(), FeatureIndex()
    for t in range(60):
        d = int(rng.integers(FeatureIndex.BULK_MIN, 80))
        cols = rng.choice(120, size=d, replace=False)
        vals = rng.normal(size=d) * 10.0 ** rng.integers(-3, 4, size=d)
        vals[rng.random(d) < 0.2] = 0.0
        vals[rng.random(d) < 0.05] = -0.0
        x = {name(c): (int(round(v)) if k % 5 == 0 else float(v)) for k, (c, v) in enumerate(zip(cols, vals))}
        for grow in (False, True):
            tf, i_f, v_f = fast.encode_one(x, grow=grow)
            i_s, v_s = _slow(slow, x, grow)
            assert i_f.tolist() == i_s.tolist() and v_f.tobytes() == v_s.tobytes()
            assert fast.names == slow.names
        enc = fast.encode_record(x)
        i_s, v_s = _slow(slow, x, False)
        assert enc.fidx.tolist() == i_s.tolist() and enc.fval.tobytes() == v_s.tobytes()


@pytest.mark.parametrize("bad, err", [(float("nan"), "non-finite"), (1e13, "MAX_ABS_VALUE"), ("x", "non-numeric"),
                                      (10**400, "MAX_ABS_VALUE")])
def test_bulk_dict_path_leaves_bad_values_to_the_scan(bad, err):
    f = FeatureIndex()
    x = {f"w{j}": 1.0 for j in range(40)}
    f.encode_one(x, grow=True)
    x["w7"] = bad
    with pytest.raises((ValueError, TypeError), match=err):
        f.encode_one(x, grow=False)
    with pytest.raises((ValueError, TypeError), match=err):
        f.encode_record(x)


def test_predict_learn_one_calls_a_subclass_learn_one():
    """A subclass overriding learn_one (or predict_one) gets it called by predict_learn_one."""
    seen = []

    class Logged(ss.MulticlassSSVM):
        def learn_one(self, x, y):
            seen.append(y)
            return super().learn_one(x, y)
    m = Logged(learner=ss.learners.SGD(seed=0))
    for i in range(4):
        m.predict_learn_one({"f": float(i)}, i % 2)
    assert seen == [0, 1, 0, 1]


@pytest.mark.parametrize("keys", ["str", "int"])
@pytest.mark.parametrize("d", [1, 4, 16, 63, 64, 65, 66, 300])
def test_compiled_dict_encoding_sorts_like_the_scan(keys, d, monkeypatch):
    """``dict_row_csr`` orders the kept columns by insertion (up to 64) or by argsort (more):
    both give the scan's arrays for keys in any order, with zeros and unknown names mixed in
    (dicts of every size: BULK_MIN lowered to 1)."""
    monkeypatch.setattr(FeatureIndex, "BULK_MIN", 1)
    rng = np.random.default_rng(d)
    name = (lambda j: f"w{j}") if keys == "str" else (lambda j: int(j) * 3 - 50)
    fast, slow = FeatureIndex(), FeatureIndex()
    for t in range(6):
        cols = rng.permutation(2 * d)[:d]
        vals = rng.normal(size=d)
        vals[rng.random(d) < 0.1] = 0.0
        x = {name(c): float(v) for c, v in zip(cols, vals)}
        if t % 2 == 0:
            x = dict(sorted(x.items(), key=lambda kv: str(kv[0])))
        enc = fast.encode_record(x)
        i_s, v_s = _slow(slow, x, False)
        assert enc.fidx.tolist() == i_s.tolist() and enc.fval.tobytes() == v_s.tobytes()
        assert enc.complete == (t > 0 and all(k in slow.vocab or v == 0.0 for k, v in x.items()))
        for grow in (True, False):
            tf, i_f, v_f = fast.encode_one(x, grow=grow)
            i_s, v_s = _slow(slow, x, grow)
            assert i_f.tolist() == i_s.tolist() and v_f.tobytes() == v_s.tobytes()
        assert fast.names == slow.names
