"""The per-record path's shortcuts give what the general code gives (issue 22, item 3): the
exact-type label check, the array row encoder, the dict pairs of a growing vocabulary and the
one-row scaling update -- the same arrays, errors and states, and a bad record still changes
nothing."""
import pickle

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.features import FeatureIndex
from streamssvm.scaling import ColumnScaler


def _state(m):
    return pickle.dumps(m.state())


@pytest.mark.parametrize("make", [int, np.int64, str, lambda v: bool(v % 2)])
def test_label_types_of_the_exact_type_check_learn_as_before(make):
    """Labels of the types ``_check_y`` passes by their type (str, bool, int, numpy.int64):
    ``predict_learn_one`` (one kernel call) and ``predict_one`` then ``learn_one`` give the same
    predictions and state, bit for bit."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    y = [make(int(v)) for v in np.argmax(X[:, :3], axis=1)]
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0))
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0))
    pa = [a.predict_learn_one(x, c) for x, c in zip(X, y)]
    pb = [ss.estimators.base.Estimator.predict_learn_one(b, x, c) for x, c in zip(X, y)]
    assert pa == pb and _state(a) == _state(b)


@pytest.mark.parametrize("bad, err", [(2**63, ValueError), (None, ValueError), (float("nan"), ValueError),
                                      (b"x", TypeError), (1.5j, TypeError)])
def test_a_bad_label_changes_nothing_on_the_record_path(bad, err):
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0))
    for i in range(20):
        m.predict_learn_one(np.array([float(i % 3), 1.0]), i % 3)
    before = _state(m)
    for call in (lambda: m.predict_learn_one(np.array([1.0, 2.0]), bad),
                 lambda: m.learn_one(np.array([1.0, 2.0]), bad)):
        with pytest.raises(err):
            call()
        assert _state(m) == before


def test_max_labels_is_checked_on_the_exact_type_path():
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0), max_labels=2)
    m.learn_one({"a": 1.0}, "x")
    m.learn_one({"b": 1.0}, np.int64(7))
    before = _state(m)
    with pytest.raises(ValueError, match="max_labels"):
        m.predict_learn_one({"a": 1.0}, "z")
    with pytest.raises(ValueError, match="max_labels"):
        m.learn_one({"a": 1.0}, 8)
    assert _state(m) == before
    m.learn_one({"a": 2.0}, 7)   # a known label (np.int64(7) == 7)
    assert m.classes == ["x", np.int64(7)]


def test_array_rows_encode_as_the_general_encoder():
    rng = np.random.default_rng(1)
    fi = FeatureIndex()
    fi.encode_one(np.zeros(6), grow=True)
    for _ in range(50):
        x = rng.normal(size=6) * (rng.random(6) < 0.6)
        enc = fi.encode_record(x)
        ref = fi.encode_one(np.asarray(x[None, :][0], order="C"), grow=False)
        for u, v in zip((enc.tok_ptr, enc.fidx, enc.fval), ref):
            assert u.dtype == v.dtype and np.array_equal(u, v)
    for x, msg in ((np.array([1.0, np.nan, 0, 0, 0, 0]), "NaN"), (np.array([1e13, 0, 0, 0, 0, 0.0]), "MAX_ABS")):
        with pytest.raises(ValueError, match=msg):
            fi.encode_record(x)
    with pytest.raises(ValueError, match="expected 6 features"):
        fi.encode_record(np.zeros(5))


@pytest.mark.parametrize("n_features", [None, 8])
def test_dict_pairs_encode_as_register(n_features):
    """``_known_pairs`` (one sort with a growing vocabulary; hashing sums its collisions) gives
    ``_register(pairs, None)``'s arrays, keys int and str, values of every sign and zeros."""
    rng = np.random.default_rng(2)
    fi = FeatureIndex(n_features)
    names = [f"f{j}" for j in range(12)] + list(range(12))
    fi.encode_dict({k: 1.0 for k in names}, grow=True)
    for _ in range(100):
        keys = rng.choice(len(names), size=int(rng.integers(0, 10)), replace=False)
        x = {names[k]: float(rng.normal()) if rng.random() < 0.8 else 0.0 for k in keys}
        pairs, new = fi._scan(x, True)
        assert not new
        ref = fi._register(list(pairs), None)
        tp, idx, val = fi._known_pairs(pairs)
        assert tp.tolist() == [0, len(ref[0])] and idx.tolist() == ref[0] and val.tolist() == ref[1]
        enc = fi.encode_record(x)
        assert enc.fidx.tolist() == ref[0] and enc.fval.tolist() == ref[1]
        one = fi.encode_one(x, grow=True)
        assert one[1].tolist() == ref[0] and one[2].tolist() == ref[1]


def test_learn_row_is_learn_scaled_of_one_row():
    rng = np.random.default_rng(3)
    a, b = ColumnScaler(), ColumnScaler()
    for _ in range(200):
        cols = np.concatenate([[0], np.sort(rng.choice(np.arange(1, 40), size=5, replace=False))]).astype(np.int32)
        vals = np.concatenate([[1.0], rng.normal(size=5) * 10])
        u = a.learn_scaled(cols, vals)
        v = b.learn_row(cols, vals, 40)
        assert np.array_equal(u, v)
    sa, sb = a.state(), b.state()
    assert np.array_equal(sa["sumsq"], sb["sumsq"]) and np.array_equal(sa["count"], sb["count"])
