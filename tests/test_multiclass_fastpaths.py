"""The multiclass fast paths of issue 11 part 5: a numpy row validated and encoded in one numba
pass, ``learn_one`` growing the learner only when something was added, integer label arrays
encoded with array operations, the block store's arenas grown into lazily zeroed memory, and
``Learner.emission_weights``. Each must give exactly the results of the general path."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm.blocks import BlockStore, lazy_zeros
from streamssvm.features import FeatureIndex
from streamssvm.structures import MultiClass


def _rows(seed, n=300, d=12, K=4):
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(K, d))
    y = rng.integers(0, K, size=n)
    X = C[y] + rng.normal(size=(n, d))
    X[rng.random(size=X.shape) < 0.3] = 0.0
    return X, y


@pytest.mark.parametrize("row", [
    np.array([0.0, 2.5, -0.0, 1e-300, -3.0]),
    np.array([1, 0, 7], dtype=np.int64),
    np.array([True, False, True]),
    np.array([0.0, 0.0]),
    np.arange(12.0).reshape(3, 4)[:, 1],          # not contiguous
    np.array([1.5, 0.0, 2.0], dtype=np.float32),
], ids=["float", "int", "bool", "zeros", "strided", "float32"])
def test_encode_one_array_equals_encode_tokens(row):
    """A 1-D row gives the CSR of encode_tokens(row[None, :]), dtypes included."""
    a, b = FeatureIndex(), FeatureIndex()
    got = a.encode_one(row, grow=True)
    ref = b.encode_tokens(np.asarray(row)[None, :], grow=True)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(g, r)
    assert a.array_dim == b.array_dim == row.shape[0]


@pytest.mark.parametrize("bad, msg", [
    ([1.0, np.nan], "NaN or infinite"),
    ([np.inf, 1.0], "NaN or infinite"),
    ([1e13, 1.0], "MAX_ABS_VALUE"),
    ([1e13, np.nan], "NaN or infinite"),   # a non-finite value is named first, wherever it is
])
def test_encode_one_rejects_bad_values_and_changes_nothing(bad, msg):
    f = FeatureIndex()
    with pytest.raises(ValueError, match=msg):
        f.encode_one(np.array(bad), grow=True)
    assert f.array_dim is None   # a rejected first row does not fix the width
    f.encode_one(np.array([1.0, 2.0, 3.0]), grow=True)
    assert f.array_dim == 3
    with pytest.raises(ValueError, match="expected 3 features"):
        f.encode_one(np.array([1.0, 2.0]), grow=True)


def test_learn_one_array_rows_equal_dict_rows():
    """learn_one on numpy rows (one-pass encoding, the learner grown only when something was
    added) learns exactly what learn_one learns from the same rows as dicts (names in column
    order, the first row registering all of them): bit-identical weights and certificate."""
    X, y = _rows(0)
    X[0] = np.where(X[0] == 0.0, 1.0, X[0])
    D = [{f"f{j:02d}": float(v) for j, v in enumerate(x) if v != 0.0} for x in X]
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    for x, dx, c in zip(X, D, y):
        a.learn_one(x, int(c))
        b.learn_one(dx, int(c))
    assert b._features.names == [f"f{j:02d}" for j in range(X.shape[1])]
    np.testing.assert_array_equal(a.bound_learner.W.E, b.bound_learner.W.E)
    assert a.certificate().gap == b.certificate().gap
    assert a.classes == b.classes


def test_learn_one_grows_the_learner_when_a_feature_or_label_arrives():
    """The learner is grown whenever learn_one adds a feature name or a label (and after a batch
    call grew it label by label), never left behind the indexes."""
    m = ss.MulticlassSSVM(learner=ss.learners.SGD(lam=1e-2))
    m.learn_one({"a": 1.0}, "x")
    m.learn_one({"a": 1.0}, "x")
    m.learn_one({"b": 1.0}, "y")                   # a feature and a label
    lr = m.bound_learner
    assert lr._K == 2 and lr.W.E.shape[0] >= m._features.dim == 3
    m.learn_many([{"c": 1.0}, {"a": 1.0}], ["z", "x"])
    m.learn_one({"d": 1.0}, "w")
    assert lr._K == 4 and lr.W.E.shape[0] >= m._features.dim == 5
    assert m.predict_one({"d": 1.0}) == "w"


def test_integer_label_arrays_equal_label_lists():
    """predict_learn_many with an integer numpy label array (encoded with array operations)
    gives the label ids, new-label cuts, predictions and weights of the same labels as a list,
    including labels first seen in the middle of a batch and out of order."""
    X, y = _rows(1, n=256, K=6)
    y = y.copy()
    y[:40] = y[:40] % 2                             # labels 2..5 first appear inside the batches
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    for i in range(0, 256, 64):
        pa = a.predict_learn_many(X[i:i + 64], y[i:i + 64])
        pb = b.predict_learn_many(X[i:i + 64], list(y[i:i + 64]))
        assert pa == pb
    assert a.classes == b.classes
    np.testing.assert_array_equal(a.bound_learner.W.E, b.bound_learner.W.E)
    m = ss.MulticlassSSVM()
    with pytest.raises(ValueError, match="row 1: integer label .* 64 bits"):
        m.learn_many(X[:2], np.array([1, 2**63], dtype=np.uint64))
    assert m.classes == [] and m.n_blocks == 0


def test_arena_growth_keeps_every_block():
    """Blocks written across many arena growths (lazily zeroed memory, used prefix copied) read
    back as written, and the store's state round-trips."""
    rng = np.random.default_rng(2)
    st = BlockStore(MultiClass(), Kc=3)
    gram = lambda tp, fi, fv, L: np.array([[float(fv @ fv)]])   # noqa: E731
    rows = []
    for i in range(400):
        nnz = int(rng.integers(1, 800))
        fidx = np.sort(rng.choice(1000, size=nnz, replace=False)).astype(np.int32)
        fval = rng.normal(size=nnz)
        slot = st.add(np.array([0, nnz], dtype=np.int32), fidx, fval, np.array([i % 3], dtype=np.int32), 1, gram)
        rows.append((slot, fidx, fval))
    assert st.Far.shape[0] > 1 << 17   # grown past the lazily mapped size
    for slot, fidx, fval in rows:
        b = st.block(slot)
        np.testing.assert_array_equal(b["fidx"], fidx)
        np.testing.assert_array_equal(b["fval"], fval)
    assert not st.Far[st.f_used:].any() and not st.Iar[st.i_used:].any()
    st2 = BlockStore.from_state(st.state(), MultiClass(), n_rows=1000)
    for slot, fidx, fval in rows:
        np.testing.assert_array_equal(st2.block(slot)["fval"], fval)
    z = lazy_zeros(1 << 18, np.int32)
    assert z.dtype == np.int32 and z.flags.writeable and not z.any()


@pytest.mark.parametrize("make", [lambda: ss.learners.BCFW(lam=1e-2, seed=0), lambda: ss.learners.SGD(lam=1e-2)],
                         ids=["bcfw", "sgd"])
def test_emission_weights_give_the_predictions(make):
    X, y = _rows(3)
    m = ss.MulticlassSSVM(learner=make(), scale=False)   # the weights of the raw features
    m.learn_many(X, list(y))
    W = m.bound_learner.emission_weights()
    assert W.shape == (X.shape[1] + 1, len(m.classes))
    ids = np.argmax(X @ W[1:] + W[0], axis=1)
    assert [m.classes[i] for i in ids] == list(m.predict_many(X))
    W[...] = 0.0   # a copy: the learner is untouched
    assert m.bound_learner.emission_weights().any()


def test_learner_without_emission_weights_uses_the_kernel_path():
    X, y = _rows(4, n=120)
    a = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane(lam=1e-1))
    assert a.learner.emission_weights() is None
    a.learn_many(X[:60], list(y[:60]))
    preds = a.predict_learn_many(X[60:], list(y[60:]))
    assert len(preds) == 60 and set(preds) <= set(a.classes)


def test_many_labels_point_to_the_extreme_classifier_once():
    """Issue 26 (many labels): a dense-score learner past MANY_LABELS labels warns once, naming
    ExtremeClassifier, instead of slowing down silently."""
    import warnings
    import streamssvm as ss

    class Small(ss.MulticlassSSVM):
        MANY_LABELS = 5

    m = Small(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i in range(9):
            m.learn_one({"a": float(i)}, f"c{i}")
    hits = [x for x in w if issubclass(x.category, ResourceWarning)]
    assert len(hits) == 1 and "ExtremeClassifier" in str(hits[0].message)
