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


# ------------------------------------------------------------------ the written-out helpers
_CONFIGS = [dict(), dict(scale=False), dict(learner=dict(window=40, replay=2, seed=3)),
            dict(learner=dict(averaging=False, seed=1)), dict(learner=dict(lam=1e-2, seed=2)),
            dict(learner=dict(window=30, evicted_average="keep", seed=4))]


def _model(cfg):
    cfg = dict(cfg)
    return ss.MulticlassSSVM(learner=ss.learners.BCFW(**cfg.pop("learner", {})), **cfg)


def _stream(kind, n=400):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(n, 6)) * (rng.random((n, 6)) < 0.7)
    y = [int(v) for v in np.argmax(X[:, :4], axis=1)]
    if kind == "dicts":
        return [({f"f{j}": float(v) for j, v in enumerate(r) if v}, c) for r, c in zip(X, y)], y
    return list(zip(X, y)), y


@pytest.mark.parametrize("kind", ["rows", "dicts"])
@pytest.mark.parametrize("cfg", _CONFIGS)
def test_the_record_paths_agree_to_the_bit(kind, cfg):
    """``predict_one`` then ``learn_one`` (``BCFW._learn_fifo``, ``predict_class``),
    ``predict_learn_one`` (one ``predict_learn_record`` kernel call: its room check, seed,
    record plan and bookkeeping written out) and the generic ``Estimator.predict_learn_one``
    give the same predictions and the same state, bit for bit, with and without scaling,
    evictions (a window), averaging and a fixed lambda; ``learn_one`` alone (the temperature
    fit scoring the record itself) the same state. A wrong inlined helper on one path (the
    seed, the scale, the bookkeeping after the kernel) makes it differ from the others."""
    data, _ = _stream(kind)
    sep, one, gen, lrn = (_model(cfg) for _ in range(4))
    p_sep, p_one, p_gen = [], [], []
    for x, c in data:
        p_sep.append(sep.predict_one(x))
        sep.learn_one(x, c)
        p_one.append(one.predict_learn_one(x, c))
        p_gen.append(ss.estimators.base.Estimator.predict_learn_one(gen, x, c))
        lrn.learn_one(x, c)
    assert p_sep == p_one == p_gen
    assert _state(sep) == _state(one) == _state(gen) == _state(lrn)
    assert sep.temperature == one.temperature == lrn.temperature != 1.0


def test_predict_learn_record_takes_a_record_exactly_when_room_for_one_says_so():
    """The room check written out in ``predict_learn_record`` is ``_room_for_one``: through a
    stream that fills a window (evictions: refused) and the slot table (growth: refused) and
    after a label arrives (a settling revisit pending: refused), the record is taken exactly
    when ``_room_for_one`` holds, and a refused call changes nothing but the state version."""
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(window=300, seed=0))
    data, _ = _stream("rows", 600)
    seen = {True: 0, False: 0}
    for i, (x, c) in enumerate(data):
        lr = m._learner
        yid = None if lr is None else m._labels.index.get(c)
        if yid is None or m._synced_key != (m._features.dim, len(m._labels)):
            m.learn_one(x, c)
            continue
        _, fidx, fval = m._features.plain_row(x)
        room = lr._room_for_one(lr.store)
        before = None if room else pickle.dumps(m.state())
        got = lr.predict_learn_record(fidx, fval, yid, m._scaler.statistics(m._features.dim), False)
        assert (got is not None) == room, i
        seen[room] += 1
        if got is None:
            assert pickle.dumps(m.state()) == before
            m.learn_one(x, c)
    assert seen[True] > 200 and seen[False] > 200


@pytest.mark.parametrize("learner", [dict(), dict(averaging=False), dict(lam=1e-2), dict(window=20, replay=2)])
def test_predict_class_takes_predict_params(learner):
    """``predict_class`` writes out ``_predict_params`` for a multiclass store: the label and
    scores of the kernel called with ``_predict_params()``'s own values, to the bit (averaged
    and running weights, lambda following n or fixed, after evictions)."""
    from streamssvm._kernels import bcfw as K
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0, **learner))
    data, _ = _stream("rows", 120)
    for x, c in data:
        m.learn_one(x, c)
        lr = m._learner
        if lr.n_labels < 2:
            continue
        tok_ptr, fidx, fval = m._encode_scaled(x)
        pid, S = lr.predict_class(tok_ptr, fidx, fval, True)
        E, ZE, zc, _, _, scale = lr._predict_params()
        obs = np.empty((1, lr.n_labels))
        assert K.predict_class(E, ZE, zc, scale, tok_ptr, fidx, fval, lr.n_labels, obs) == pid
        assert obs.tobytes() == S.tobytes()


def test_one_observed_record_stacks_as_a_batch_of_rows():
    """``Temperature._stack_rows`` of one record (``observe_class``: four scalars) writes the
    rings ``observe_classes`` (the batch path) writes, through a window that wraps and a class
    count that grows (the rings restart): the same rings, counts and temperature."""
    from streamssvm.calibration import Temperature
    rng = np.random.default_rng(4)
    a, b = Temperature(window=16, every=8), Temperature(window=16, every=8)
    for K, n in ((3, 40), (4, 30)):
        S = rng.normal(size=(n, K)) * 3
        ys = rng.integers(0, K, size=n)
        for s, y in zip(S, ys):
            a.observe_class(s, y)
        b.observe_classes(S, ys)
        assert a._rows_n == b._rows_n and all(np.array_equal(u, v) for u, v in zip(a._rows, b._rows))
        assert a.beta == b.beta and a.n_fits == b.n_fits > 0
