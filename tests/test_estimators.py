"""River compatibility, input validation and persistence of the estimators."""
import itertools

import numpy as np
import pytest
from river import checks, compose, datasets, evaluate, metrics, preprocessing

import streamssvm as ss
from test_bcfw import assert_valid_gap


def _run_river_checks(model, monkeypatch=None, dataset=None):
    if dataset is not None:
        # river's multi-label check dataset (Music) is downloaded at run time, which this
        # environment cannot do: run the same checks on river's bundled Yeast data instead.
        monkeypatch.setattr(checks, "_yield_datasets", lambda m, scale=1: iter([dataset(scale)]))
    checks.check_estimator(model)


def test_multiclass_passes_river_check_estimator():
    for params in ss.MulticlassSSVM._unit_test_params():
        _run_river_checks(ss.MulticlassSSVM(**params))


def test_multilabel_passes_river_check_estimator(monkeypatch):
    def yeast(scale):
        return list(itertools.islice(datasets.Yeast(), 50 * scale))
    for params in ss.MultiLabelSSVM._unit_test_params():
        _run_river_checks(ss.MultiLabelSSVM(**params), monkeypatch, yeast)


def test_multiclass_in_pipeline_progressive_val():
    model = compose.Pipeline(preprocessing.StandardScaler(),
                             ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-3, replay=2, seed=1)))
    acc = evaluate.progressive_val_score(datasets.ImageSegments(), model, metrics.Accuracy())
    assert acc.get() > 0.8


def test_multilabel_in_pipeline_progressive_val():
    model = compose.Pipeline(preprocessing.StandardScaler(),
                             ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=1e-3, replay=1, seed=1)))
    m = metrics.multioutput.MicroAverage(metrics.F1())
    m = evaluate.progressive_val_score(itertools.islice(datasets.Yeast(), 600), model, m)
    assert m.get() > 0.5


def test_sequence_tagger_learns_ocr_words():
    X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("small")
    tagger = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, replay=2, seed=0))
    for x, y in zip(X_tr[:300], y_tr[:300]):
        tagger.learn_one(x, list(y))
    tagger.refine(passes=5)
    pred = tagger.predict_many(X_te[:300])
    err = np.mean(np.concatenate([np.asarray(p) != y for p, y in zip(pred, y_te[:300])]))
    assert err < 0.35  # chance is 0.96
    assert tagger.predict_one(X_te[0]) == pred[0]


def test_learn_many_matches_learn_one():
    """The batched kernel path does exactly what learn_one does (replay=0: no sampling)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6))
    y = (X[:, 0] > 0).astype(int) + 2 * (X[:, 1] > 0)
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, replay=0, seed=0))
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, replay=0, seed=0))
    a.learn_many(X, y)
    for xi, yi in zip(X, y):
        b.learn_one(xi, yi)
    np.testing.assert_allclose(a._learner.W.E, b._learner.W.E)
    pa = a.predict_many(X)
    assert list(pa) == [b.predict_one(xi) for xi in X]
    a.refine(passes=30)
    assert np.mean(a.predict_many(X) == y) > 0.9


@pytest.mark.parametrize("capacity", [None, 150])
def test_learn_many_with_replay_and_eviction(capacity):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 8))
    y = np.array(["abcd"[i] for i in (X[:, 0] > 0).astype(int) + 2 * (X[:, 1] > 0)])
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, replay=2, window=capacity, seed=0))
    m.learn_many(X[:100], y[:100])
    m.learn_many(X[100:], y[100:])
    lr = m._learner
    assert lr.store.n == (400 if capacity is None else capacity)
    # one step per new example + 2 replay steps (+ one step on each zero-gap block when a label arrives)
    assert lr._tick == 400 * 3 + getattr(lr, "n_revisit_steps", 0)
    c = m.certificate()
    assert c.n_blocks == lr.store.n
    assert_valid_gap(m, c, passes=50)
    assert np.mean(m.predict_many(X[-100:]) == y[-100:]) > 0.7


def test_input_errors_are_clear():
    t = ss.SequenceTagger()
    with pytest.raises(ValueError, match="2 tokens but y has 3"):
        t.learn_one([{"a": 1}, {"b": 1}], ["x", "y", "z"])
    with pytest.raises(ValueError, match="empty sequence"):
        t.learn_one([], [])
    with pytest.raises(ValueError, match="non-finite"):
        t.learn_one([{"a": float("nan")}], ["x"])
    with pytest.raises(ValueError, match="NaN"):
        ss.SequenceTagger().learn_one(np.array([[np.inf, 1.0]]), ["x"])
    with pytest.raises(TypeError, match="list of labels"):
        t.learn_one([{"a": 1}], "x")
    m = ss.MulticlassSSVM()
    with pytest.raises(TypeError, match="non-numeric"):
        m.learn_one({"a": "red"}, 1)
    with pytest.raises(ValueError, match="missing"):
        m.learn_one({"a": 1.0}, None)
    m.learn_one(np.ones(3), 1)
    with pytest.raises(ValueError, match="expected 3 features"):
        m.learn_one(np.ones(4), 1)
    with pytest.raises(TypeError, match="trained on numpy arrays"):
        m.learn_one({"a": 1.0}, 1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        ss.MulticlassSSVM(lam=0.1)
    with pytest.raises(TypeError, match="learner must be"):
        ss.MulticlassSSVM(learner="bcfw")
    with pytest.raises(TypeError, match=r"dict \{label: bool\}"):
        ss.MultiLabelSSVM().learn_one({"a": 1.0}, ["x"])


def test_hashing_trick_and_new_labels():
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, replay=2, seed=0), n_features=2**10)
    for i in range(300):
        c = i % 5  # labels appear one by one
        if i < 50 and c > i // 10:
            c = i // 10
        m.learn_one({f"tok{c}": 1.0, f"tok{c}b": 1.0}, f"class{c}")
    assert m.predict_one({"tok3": 1.0, "tok3b": 1.0}) == "class3"
    assert m._features.dim == 2**10 + 1


def test_cost_matrix_changes_the_objective():
    """Classes on a line (0 | 1 | 2, overlapping); confusing 0 and 2 costs 5. Against the 0/1
    loss on the same stream, the cost-sensitive objective must move the decision boundaries so
    that far confusions become rare and the expected cost drops (the direction the costs imply),
    and its objective is the costlier one: P_C >= P_01 for every w, so min P_C >= D_01."""
    C = np.array([[0, 1, 5], [1, 0, 1], [5, 1, 0]], dtype=float)

    def fit(loss):
        m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, replay=2, seed=0), loss=loss, labels=[0, 1, 2])
        rng = np.random.default_rng(0)
        for _ in range(300):
            y = int(rng.integers(3))
            m.learn_one({"f": float(y) + 0.9 * rng.normal(), "g": 1.0}, y)
        m.refine(passes=20)
        return m

    cost, zero_one = fit(C), fit(None)
    assert cost._learner._C[0, 2] == 5.0 and zero_one._learner._C[0, 2] == 1.0
    rng = np.random.default_rng(1)
    ys = rng.integers(3, size=1000)
    xs = [{"f": float(y) + 0.9 * rng.normal(), "g": 1.0} for y in ys]
    p_cost = np.array([cost.predict_one(x) for x in xs])
    p_01 = np.array([zero_one.predict_one(x) for x in xs])
    far_cost, far_01 = np.sum(np.abs(p_cost - ys) == 2), np.sum(np.abs(p_01 - ys) == 2)
    assert far_cost < 0.5 * far_01                              # measured: 17 vs 100
    assert np.mean(C[ys, p_cost]) < 0.8 * np.mean(C[ys, p_01])  # measured: 0.48 vs 0.84
    c_cost, c_01 = cost.certificate(), zero_one.certificate()
    assert c_cost.raw_gap > -1e-9 and c_01.raw_gap > -1e-9
    # P_C(w) >= P_01(w) for every w: P_C(w_C) >= min P_C >= min P_01 >= D_01 (measured 1.66 vs 0.76)
    assert c_cost.primal >= c_01.dual
    assert c_cost.primal > c_01.primal                          # measured 1.66 vs 0.79


@pytest.mark.parametrize("step", ["fw", "pairwise"])
def test_save_load_round_trip(tmp_path, step):
    X_tr, y_tr, X_te, _ = ss.datasets.load_ocr("small")
    t = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, replay=1, step=step, cache=True, seed=0))
    for x, y in zip(X_tr[:40], y_tr[:40]):
        t.learn_one(x, list(y))
    path = tmp_path / "tagger.ssvm"
    t.save(path)
    t2 = ss.SequenceTagger.load(path)
    assert t2.predict_many(X_te[:20]) == t.predict_many(X_te[:20])
    c1, c2 = t.certificate(), t2.certificate()
    assert c1.gap == pytest.approx(c2.gap, rel=1e-12)
    # the loaded model keeps learning exactly like the original
    for x, y in zip(X_tr[40:60], y_tr[40:60]):
        t.learn_one(x, list(y))
        t2.learn_one(x, list(y))
    np.testing.assert_array_equal(t._learner.W.E, t2._learner.W.E)
    with pytest.raises(Exception, match="MulticlassSSVM|SequenceTagger"):
        ss.MulticlassSSVM.load(path)


def test_save_load_dict_features_and_labels(tmp_path):
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0))
    for i in range(30):
        m.learn_one({"a": i % 3, ("t", 1): 1.0, 7: 0.5}, ["x", 2, True][i % 3])
    m.save(tmp_path / "m.ssvm")
    m2 = ss.MulticlassSSVM.load(tmp_path / "m.ssvm")
    for i in range(3):
        x = {"a": i, ("t", 1): 1.0, 7: 0.5}
        assert m2.predict_one(x) == m.predict_one(x)
    assert m2._labels.labels == ["x", 2, True]


def test_predict_learn_many_equals_predict_then_learn():
    rng = np.random.default_rng(3)
    rows = [{f"f{j}": float(v) for j, v in enumerate(rng.normal(size=5)) if v > -0.5} for _ in range(300)]
    ys = [int(sum(r.values()) > 0) + 2 * ("f0" in r) for r in rows]
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, replay=1, seed=0))
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, replay=1, seed=0))
    for k in range(0, 300, 50):
        pa = a.predict_learn_many(rows[k:k + 50], ys[k:k + 50])
        pb = list(b.predict_many(rows[k:k + 50]))
        b.learn_many(rows[k:k + 50], ys[k:k + 50])
        assert pa == pb
    np.testing.assert_allclose(a._learner.W.E[: a._features.dim], b._learner.W.E[: b._features.dim], atol=1e-12)


def _four_models():
    """One fitted model of every estimator class (the ExtremeClassifier with dict input)."""
    rng = np.random.default_rng(0)
    mc = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0), labels=[0, 1, 2])
    ml = ss.MultiLabelSSVM(learner=ss.learners.SGD(lam=1e-2, seed=0))
    sq = ss.SequenceTagger(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0))
    ex = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(lam=1e-3, mips="hnsw", window=50), labels=["a", "b"])
    for i in range(120):
        c = i % 3
        x = {f"f{c}": 1.0, "g": float(rng.normal())}
        mc.learn_one(x, c)
        ml.learn_one(x, {"red": c == 0, "blue": c != 0})
        sq.learn_one([x, {"h": 1.0}], [f"t{c}", "o"])
        ex.learn_one(x, "abc"[c])
    return mc, ml, sq, ex


def test_streamssvm_load_round_trips_every_estimator(tmp_path):
    """``streamssvm.load`` restores any saved estimator through the registry; the restored
    model predicts the same and keeps learning exactly like the original."""
    queries = [{"f0": 1.0}, {"f1": 1.0, "g": 0.3}, {"f2": 1.0}]
    for m in _four_models():
        p = tmp_path / f"{type(m).__name__}.ssvm"
        m.save(p)
        m2 = ss.load(p)
        assert type(m2) is type(m) and type(m2.learner) is type(m.learner)
        assert m2.learner._get_params() == m.learner._get_params()
        pred = (lambda mm, q: mm.predict_one([q, {"h": 1.0}])) if isinstance(m, ss.SequenceTagger) else \
            (lambda mm, q: mm.predict_one(q))
        assert [pred(m2, q) for q in queries] == [pred(m, q) for q in queries]
        assert type(m).load(p).classes == m.classes
        # the restored copy continues like the original
        for i in range(30):
            x = {f"f{i % 3}": 1.0, "g": 0.1 * i}
            for mm in (m, m2):
                if isinstance(m, ss.SequenceTagger):
                    mm.learn_one([x, {"h": 1.0}], [f"t{i % 3}", "o"])
                elif isinstance(m, ss.MultiLabelSSVM):
                    mm.learn_one(x, {"red": i % 3 == 0, "blue": i % 3 != 0})
                else:
                    mm.learn_one(x, "abc"[i % 3] if isinstance(m, ss.ExtremeClassifier) else i % 3)
        assert [pred(m2, q) for q in queries] == [pred(m, q) for q in queries]
        assert m2.certificate().primal == pytest.approx(m.certificate().primal, rel=1e-9, abs=1e-12)
    # an empty (never fitted) model round-trips too
    e = ss.ExtremeClassifier(mips="exact", labels=[2, 0])
    e.save(tmp_path / "e.ssvm")
    assert ss.load(tmp_path / "e.ssvm").predict_one({"x": 1.0}) == 2


def test_load_refuses_a_file_of_another_class(tmp_path):
    from streamssvm.checkpoint import CheckpointError
    mc, _, _, ex = _four_models()
    mc.save(tmp_path / "mc.ssvm")
    ex.save(tmp_path / "ex.ssvm")
    with pytest.raises(CheckpointError, match="holds a MulticlassSSVM, not a ExtremeClassifier"):
        ss.ExtremeClassifier.load(tmp_path / "mc.ssvm")
    with pytest.raises(CheckpointError, match="holds a ExtremeClassifier, not a SequenceTagger"):
        ss.SequenceTagger.load(tmp_path / "ex.ssvm")


def test_registry_resolves_estimators_and_learners_by_name():
    from streamssvm.checkpoint import CheckpointError
    from streamssvm.estimators import base
    for cls in (ss.MulticlassSSVM, ss.MultiLabelSSVM, ss.SequenceTagger, ss.ExtremeClassifier):
        assert base.estimator_class(cls.__name__) is cls
    for cls in (ss.learners.BCFW, ss.learners.SGD, ss.learners.CuttingPlane, ss.learners.MEMOIR):
        assert base.learner_class(cls.__name__) is cls
    with pytest.raises(CheckpointError, match="unknown estimator class 'Nope'"):
        base.estimator_class("Nope")
    with pytest.raises(CheckpointError, match="unknown learner class 'Nope'"):
        base.learner_class("Nope")
    # the base module's code names no estimator or learner class
    import ast
    import inspect
    names = {n.id for n in ast.walk(ast.parse(inspect.getsource(base))) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(ast.parse(inspect.getsource(base))) if isinstance(n, ast.Attribute)}
    assert not names & {"MulticlassSSVM", "MultiLabelSSVM", "SequenceTagger", "ExtremeClassifier", "BCFW", "SGD",
                        "CuttingPlane", "MEMOIR"}


def test_engine_and_cli_use_public_api_only():
    import inspect

    from streamssvm import cli, engine
    for mod in (engine, cli):
        src = inspect.getsource(mod)
        assert "_SSVM" not in src and "._learner" not in src


def test_pandas_is_optional(monkeypatch):
    """Without pandas (simulated: ``import pandas`` fails): numpy batches work; a method
    returning a pandas object says what to install."""
    import sys
    monkeypatch.setitem(sys.modules, "pandas", None)
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0))
    X = np.eye(3)
    m.learn_many(X, [0, 1, 2])
    assert list(m.predict_many(X)) == [m.predict_one(x) for x in X]
    ml = ss.MultiLabelSSVM()
    ml.learn_many(X, [{"a": True}, {"a": False}, {"b": True}])
    with pytest.raises(ImportError, match=r"needs pandas: pip install 'streamssvm\[pandas\]'"):
        ml.predict_many(X)


@pytest.mark.parametrize("labels", [None, [0, 1, 2, 3]])
def test_learn_many_of_one_equals_learn_one(labels):
    """Regression: learn_many / predict_learn_many ensured the learner for the labels up to the
    batch's largest label id only, so a batch whose labels were all old (or declared) ones
    learned against fewer classes than learn_one."""
    rng = np.random.default_rng(0)
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0), labels=labels)
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0), labels=labels)
    for i in range(60):
        y = int(rng.integers(0, 4))
        x = {f"f{j}": float(v) for j, v in enumerate(rng.normal(size=5) + y)}
        pa = a.predict_one(x)
        a.learn_one(x, y)
        assert b.predict_learn_many([x], [y]) == [pa]
    d = a._features.dim
    np.testing.assert_array_equal(a._learner.W.E[:d, :4], b._learner.W.E[:d, :4])


@pytest.mark.parametrize("make", [
    lambda: ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0)),
    lambda: ss.MulticlassSSVM(learner=ss.learners.SGD(lam=0.01, seed=0)),
    lambda: ss.ExtremeClassifier(learner=ss.learners.MEMOIR(lam=0.01, seed=0), mips="exact"),
])
def test_refine_certifies_only_when_asked(make):
    """refine() returns None and computes no certificate (a full exact pass, as costly as a
    refinement pass) unless ``certify=True``; the model it leaves is the same either way."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = (X[:, 0] > 0).astype(int) + 2 * (X[:, 1] > 0)
    a, b = make(), make()
    for m in (a, b):
        m.learn_many(X, y)

    def no_certificate():
        raise AssertionError("refine() computed a certificate it was not asked for")
    a._learner.certificate = no_certificate
    assert a.refine(2) is None
    c = b.refine(2, certify=True)
    assert c.n_blocks == b.n_blocks and c.gap >= 0
    assert list(a.predict_many(X)) == list(b.predict_many(X))


def test_multiclass_max_labels_points_to_extreme_classifier():
    """Issue 26.12: MulticlassSSVM took any number of labels with only a warning (BCFW at 10k
    labels: 11.6 ms CPU and 1.6 GB RSS by record 2,000, growing); past ``max_labels`` a new
    label is refused by every learning path, naming ExtremeClassifier, and the model is unchanged."""
    import numpy as np
    import streamssvm as ss
    for learn in ("learn_one", "predict_learn_one", "learn_many", "predict_learn_many"):
        m = ss.MulticlassSSVM(max_labels=3)
        m.learn_many([{"a": 1.0}, {"b": 1.0}, {"c": 1.0}], ["x", "y", "z"])
        before = (list(m.classes), list(m._features.names))
        with pytest.raises(ValueError, match="ExtremeClassifier"):
            if learn.endswith("many"):
                getattr(m, learn)([{"d": 1.0}, {"a": 1.0}], ["x", "w"])
            else:
                getattr(m, learn)({"d": 1.0}, "w")
        assert (list(m.classes), list(m._features.names)) == before, learn
        m.learn_one({"a": 2.0}, "x")   # known labels still learn
    assert ss.MulticlassSSVM().max_labels == 4096 and ss.MulticlassSSVM(max_labels=None).max_labels is None
    m = ss.MulticlassSSVM(max_labels=None)
    m.learn_many([{"a": float(i)} for i in range(5)], list(range(5)))
    assert len(m.classes) == 5
    with pytest.raises(ValueError, match="max_labels"):
        ss.MulticlassSSVM(max_labels=0)


def test_sequence_per_record_budget():
    """Issue 26.6: nothing bounded a sentence's work (a 20k-token sentence took 6.5 GB); a
    sentence whose tokens x tags**2 + features x tags + tokens**2 exceeds ``max_record_cost`` is refused
    (a dead letter with that reason in a run), the model unchanged."""
    import streamssvm as ss
    from streamssvm.connectors.base import Record
    from streamssvm.step import BAD, step
    m = ss.SequenceTagger(max_record_cost=200)
    m.learn_one([{"a": 1.0}, {"b": 1.0}], ["X", "Y"])
    names, tags = list(m._features.names), list(m.classes)
    long_x = [{f"w{t}": 1.0} for t in range(40)]
    with pytest.raises(ValueError, match="max_record_cost"):
        m.learn_one(long_x, ["X", "Z"] * 20)
    assert (list(m._features.names), list(m.classes)) == (names, tags)
    out = step(m, Record(x=long_x, y=["X"] * 40, key=0, position=None, origin="t"))
    assert out.status == BAD and "max_record_cost" in out.reason
    assert m.predict_one([{"a": 1.0}]) is not None
    assert ss.SequenceTagger().max_record_cost == 1 << 31


def test_labels_of_gives_the_label_values_each_task_registers():
    """``labels_of(y)`` (what ``predict``'s label check reads) names exactly the labels learning
    ``y`` registers in ``classes``, for every task."""
    import streamssvm as ss
    cases = [(ss.MulticlassSSVM(), {"a": 1.0}, "cat"),
             (ss.SequenceTagger(), [{"a": 1.0}, {"b": 1.0}], ["D", "N"]),
             (ss.MultiLabelSSVM(), {"a": 1.0}, {"x": True, "y": False})]
    for m, x, y in cases:
        m.learn_one(x, y)
        assert sorted(m.labels_of(y)) == sorted(m.classes), type(m).__name__
