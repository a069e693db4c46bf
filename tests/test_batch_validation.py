"""A batch (``learn_many`` / ``predict_learn_many``) is validated whole before anything is
registered or learned (the reliability issue): a bad row -- a bad feature value, a bad or
missing label, a length mismatch -- raises, and no feature name, label or array width of any
row of the batch is left behind; the model equals one that never saw the batch."""
import numpy as np
import pytest

import streamssvm as ss

NAN = float("nan")


def _snapshot(m):
    f = m._features
    return (list(f.names), dict(f.vocab), f.array_dim, list(m._labels.labels), dict(m._labels.index),
            m.n_blocks)


def _mc():
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.1, seed=0))
    m.learn_one({"a": 1.0}, "x")
    return m


BAD_DICT_BATCHES = [
    # a bad label after good rows with new names and labels
    ([{"b": 1.0}, {"c": 1.0}], ["y", None]),
    ([{"b": 1.0}, {"c": 1.0}], ["y", NAN]),
    ([{"b": 1.0}, {"c": 1.0}], ["y", b"bytes"]),
    ([{"b": 1.0}, {"c": 1.0}], ["y", ["unhashable"]]),
    # a bad feature value / name after good rows
    ([{"b": 1.0}, {"c": NAN}], ["y", "z"]),
    ([{"b": 1.0}, {"c": 1e308}], ["y", "z"]),
    ([{"b": 1.0}, {None: 1.0}], ["y", "z"]),
    ([{"b": 1.0}, "not a dict"], ["y", "z"]),
    # one label too many / too few
    ([{"b": 1.0}, {"c": 1.0}], ["y"]),
    ([{"b": 1.0}, {"c": 1.0}], ["y", "z", "w"]),
]


@pytest.mark.parametrize("method", ["learn_many", "predict_learn_many"])
@pytest.mark.parametrize("X,y", BAD_DICT_BATCHES)
def test_multiclass_bad_batch_of_dicts_changes_nothing(method, X, y):
    """Before: features of the good rows (and of the bad-label row) were registered, and so
    were the labels before the bad one."""
    m = _mc()
    before = _snapshot(m)
    with pytest.raises((TypeError, ValueError)):
        getattr(m, method)(X, y)
    assert _snapshot(m) == before
    # the model still learns, and the names get the indices a fresh batch gives them
    m.learn_many([{"c": 1.0}], ["z"])
    assert m._features.names == ["a", "c"] and m.classes == ["x", "z"]


@pytest.mark.parametrize("method", ["learn_many", "predict_learn_many"])
def test_multiclass_bad_first_array_does_not_fix_the_width(method):
    """Before: a first array batch with a NaN fixed ``array_dim`` to its width, so the model
    then refused dict features ("trained on numpy arrays") though it had learned nothing."""
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.1, seed=0))
    with pytest.raises(ValueError):
        getattr(m, method)(np.array([[1.0, 2.0], [NAN, 1.0]]), ["x", "y"])
    assert _snapshot(m) == ([], {}, None, [], {}, 0)
    with pytest.raises(ValueError):   # a good array, a missing label
        getattr(m, method)(np.array([[1.0, 2.0], [3.0, 1.0]]), ["x", None])
    assert _snapshot(m) == ([], {}, None, [], {}, 0)
    m.learn_one({"a": 1.0}, "x")
    assert m._features.names == ["a"]


def test_a_rejected_first_array_example_does_not_fix_the_width():
    m = ss.MulticlassSSVM()
    with pytest.raises(ValueError):
        m.learn_one(np.array([NAN, 1.0, 2.0]), "x")
    assert m._features.array_dim is None
    m.learn_one(np.array([1.0, 2.0]), "x")
    assert m._features.array_dim == 2


def test_multiclass_rejected_batch_then_good_batch_equals_only_the_good_batch():
    rng = np.random.default_rng(0)
    good = [{f"f{j}": float(rng.normal()) for j in rng.choice(8, 3, replace=False)} for _ in range(40)]
    ys = [i % 3 for i in range(40)]
    m1, m2 = _mc(), _mc()
    with pytest.raises(ValueError):
        m1.predict_learn_many(good[:20] + [{"bad": NAN}], ys[:20] + [0])
    for m in (m1, m2):
        m.predict_learn_many(good, ys)
    assert m1._features.names == m2._features.names
    np.testing.assert_array_equal(m1._learner.W.E, m2._learner.W.E)


def test_the_error_names_the_row():
    m = _mc()
    with pytest.raises(ValueError, match="row 2"):
        m.learn_many([{"b": 1.0}, {"c": 1.0}, {"d": NAN}], ["x", "x", "x"])
    with pytest.raises(TypeError, match="row 1"):
        m.learn_many([{"b": 1.0}, {"c": 1.0}], ["x", b"y"])


# ---------------------------------------------------------------- the other estimators
def _ml(**kw):
    m = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=0.1, seed=0), **kw)
    m.learn_one(np.array([1.0, 0.0]), {"p": True, "q": False})
    return m


@pytest.mark.parametrize("Y", [
    [{"r": True}, {"s": "false"}],            # a bad truth value in the second row
    [{"r": True}, {b"s": True}],              # an unsavable label
    [{"r": True}, "not a dict"],
    [{"r": True}],                            # too few rows of labels
])
def test_multilabel_bad_batch_changes_nothing(Y):
    """Before: rows were learned one by one until the bad one: the first row's label 'r' (and
    its step) stayed."""
    m = _ml()
    before, W = _snapshot(m), m._learner.W.E.copy()
    with pytest.raises((TypeError, ValueError)):
        m.learn_many(np.array([[0.0, 1.0], [1.0, 1.0]]), Y)
    assert _snapshot(m) == before
    np.testing.assert_array_equal(m._learner.W.E, W)


def test_multilabel_bad_feature_value_in_a_later_row_changes_nothing():
    m = _ml()
    before = _snapshot(m)
    with pytest.raises(ValueError):
        m.learn_many(np.array([[0.0, 1.0], [NAN, 1.0]]), [{"r": True}, {"s": True}])
    assert _snapshot(m) == before


def test_multilabel_pairwise_label_cap_counts_the_whole_batch():
    """Pairwise multi-label refuses more than its label cap; labels new in several rows of
    one batch count together (each row alone is under the cap)."""
    from streamssvm.structures.multilabel import MLPAIR_MAX_LABELS
    m = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=0.1, seed=0), pairwise=True)
    half = MLPAIR_MAX_LABELS // 2 + 1
    Y = [{i: True for i in range(half)}, {i: True for i in range(half, 2 * half)}]
    with pytest.raises(ValueError):
        m.learn_many(np.eye(2), Y)
    assert _snapshot(m) == ([], {}, None, [], {}, 0)


def test_multilabel_hierarchy_unknown_label_leaves_no_feature_names():
    """learn_one found a label outside the hierarchy after it had registered the features."""
    m = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=0.1, seed=0),
                          hierarchy={"cat": "animal", "dog": "animal"})
    with pytest.raises(ValueError, match="not in the hierarchy"):
        m.learn_one({"f": 1.0}, {"c": True})
    assert m._features.names == []


def _seq():
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.1, seed=0))
    m.learn_one([{"a": 1.0}, {"b": 1.0}], ["N", "V"])
    return m


@pytest.mark.parametrize("X,Y", [
    ([[{"c": 1.0}], [{"d": NAN}]], [["N"], ["V"]]),
    ([[{"c": 1.0}], [{"d": 1.0}]], [["D"], [None]]),
    ([[{"c": 1.0}], [{"d": 1.0}, {"e": 1.0}]], [["D"], ["V"]]),          # length mismatch
    ([[{"c": 1.0}], np.ones((1, 3))], [["D"], ["V"]]),                   # dicts, then an array
])
def test_sequence_bad_batch_changes_nothing(X, Y):
    m = _seq()
    before = _snapshot(m)
    with pytest.raises((TypeError, ValueError)):
        m.learn_many(X, Y)
    assert _snapshot(m) == before


def test_sequence_arrays_then_dicts_in_one_batch_is_refused_whole():
    """The batch is checked as it would be learned: a first array sequence fixes the width,
    so a later dict sequence is refused -- before anything is learned."""
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.1, seed=0))
    with pytest.raises(TypeError):
        m.learn_many([np.ones((2, 3)), [{"a": 1.0}]], [["N", "V"], ["N"]])
    assert _snapshot(m) == ([], {}, None, [], {}, 0)


def test_extreme_bad_batch_changes_nothing():
    m = ss.ExtremeClassifier()
    m.learn_one(np.array([1.0, 0.0]), "x")
    before = _snapshot(m)
    for X, y in [(np.array([[0.0, 1.0], [NAN, 1.0]]), ["y", "z"]),
                 (np.array([[0.0, 1.0], [1.0, 1.0]]), ["y", None]),
                 (np.array([[0.0, 1.0], [1.0, 1.0]]), ["y", b"z"])]:
        with pytest.raises((TypeError, ValueError)):
            m.learn_many(X, y)
        assert _snapshot(m) == before


def test_good_batches_still_equal_learn_one():
    """The validation pass changes no result: learn_many equals learn_one row by row."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(30, 4))
    Y = [{"p": bool(r[0] > 0), "q": bool(r[1] > 0)} for r in X]
    a, b = (ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=0.1, seed=0)) for _ in range(2))
    a.learn_many(X, Y)
    for x, y in zip(X, Y):
        b.learn_one(x, y)
    np.testing.assert_array_equal(a._learner.W.E, b._learner.W.E)
    seqs = [[{f"w{int(v * 3)}": 1.0} for v in r] for r in rng.random(size=(10, 3))]
    tags = [["N" if v["w0" if "w0" in v else next(iter(v))] and "w0" in v else "V" for v in s] for s in seqs]
    s1, s2 = (ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.1, seed=0)) for _ in range(2))
    s1.learn_many(seqs, tags)
    for x, y in zip(seqs, tags):
        s2.learn_one(x, y)
    assert s1._features.names == s2._features.names
    np.testing.assert_array_equal(s1._learner.W.E, s2._learner.W.E)
