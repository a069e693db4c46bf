"""MEMOIR quality fixes: the step-size clock counts examples (batch_size does not change the
schedule), the step is in units of the input scale, prediction uses lazily averaged weights
(checked against an explicit average of the iterates), mips="auto"."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm.learners import memoir as memoir_mod
from streamssvm.learners.memoir import MEMOIR
from streamssvm.structures import MultiClass


def _stream(K=8, d=5, n=300, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(K, d))
    ys = rng.integers(0, K, size=n)
    X = scale * (centers[ys] + 0.8 * rng.normal(size=(n, d)))
    return X, ys


def _learner(K, d, **kw):
    lr = MEMOIR(mips="exact", rows="dense", window=0, check_every=0, **kw)
    lr.bind(MultiClass(), [])
    lr.ensure(d, list(range(K)))
    return lr


def _learn(lr, X, ys, record=None):
    one = np.array([0, X.shape[1]], dtype=np.int64)
    idx = np.arange(X.shape[1], dtype=np.int64)
    for x, y in zip(X, ys):
        if record is not None:
            record.append(lr.eta())
        lr.learn(one, idx, x, np.array([y]))


@pytest.mark.parametrize("batch_size", [1, 10, 50])
def test_step_size_clock_counts_examples_not_batches(batch_size):
    # before: eta0 / (1 + eta_step * t) with t the batch index, so batch_size=50 decayed 50x slower
    X, ys = _stream(n=500)
    X /= np.linalg.norm(X, axis=1, keepdims=True)     # unit norm: R^2 = 1
    lr = _learner(8, 5, eta0=2.0, eta_step=0.01, batch_size=batch_size)
    _learn(lr, X, ys)
    assert lr.n_clock == 500 and lr.t == 500 // batch_size
    assert lr.eta() == pytest.approx(2.0 / (1 + 0.01 * 500))


def test_shrinkage_per_example_does_not_depend_on_batch_size():
    # no updates (one class): only the l2 shrinkage acts, (1 - lam eta)^n whatever the batch size
    X = np.ones((100, 3)) / np.sqrt(3)
    accs = []
    for bs in (1, 20):
        lr = _learner(1, 3, eta0=1.0, eta_step=0.0, lam=1e-3, batch_size=bs)
        _learn(lr, X, np.zeros(100, dtype=int))
        accs.append(lr.acc)
    assert accs[0] == pytest.approx((1 - 1e-3) ** 100, rel=1e-12)
    assert accs[1] == pytest.approx(accs[0], rel=1e-12)


def test_step_is_in_units_of_the_input_scale():
    # rescaling every input by 10 rescales the weights by 1/10: the same predictions (the l2
    # shrinkage 1 - lam eta is not scale-free, hence a negligible lam here)
    X, ys = _stream(n=400, seed=2)
    a, b = _learner(8, 5, lam=1e-14), _learner(8, 5, lam=1e-14)
    _learn(a, X, ys)
    _learn(b, 10.0 * X, ys)
    np.testing.assert_allclose(b.averaged_weights() * 10.0, a.averaged_weights(), rtol=1e-6, atol=1e-9)


def _explicit_average(lr_kw, X, ys, K, linear):
    """The same learner with averaging off; the iterates W_s averaged explicitly."""
    lr = _learner(K, X.shape[1], averaging=False, **lr_kw)
    one = np.array([0, X.shape[1]], dtype=np.int64)
    idx = np.arange(X.shape[1], dtype=np.int64)
    S, wsum = 0.0, 0.0
    for s, (x, y) in enumerate(zip(X, ys), start=1):
        lr.learn(one, idx, x, np.array([y]))
        w = float(s) if linear else 1.0
        S = S + w * lr.store.to_dense() * lr.acc
        wsum += w
    return S / wsum, lr


@pytest.mark.parametrize("average", ["linear", "uniform"])
@pytest.mark.parametrize("lam", [1e-6, 2.0])   # 2.0: the lazy scale underflows and is renormalized
def test_lazy_average_matches_explicit_average(average, lam):
    X, ys = _stream(n=400, seed=3)
    kw = dict(eta0=1.0, eta_step=1e-3, lam=lam, batch_size=3)
    ref, last = _explicit_average(kw, X, ys, 8, average == "linear")
    lr = _learner(8, 5, avg_weighting=average, **kw)
    _learn(lr, X, ys)
    if lam == 2.0:
        assert lr.n_renorm > 0
    # the same iterates (averaging only reads them)
    np.testing.assert_array_equal(lr.store.to_dense(), last.store.to_dense())
    np.testing.assert_allclose(lr.averaged_weights(), ref, rtol=1e-8, atol=1e-12 * np.abs(ref).max())


def test_prediction_uses_the_averaged_weights():
    X, ys = _stream(n=300, seed=5)
    lr = _learner(8, 5)
    _learn(lr, X, ys)
    Wbar = lr.averaged_weights()
    W = lr.store.to_dense() * lr.acc
    Xt, _ = _stream(n=400, seed=6)
    n = len(Xt)
    ex = np.arange(n + 1, dtype=np.int64)
    tok = np.arange(0, 5 * (n + 1), 5, dtype=np.int64)
    fidx = np.tile(np.arange(5, dtype=np.int64), n)
    got = lr.predict(ex, tok, fidx, Xt.ravel(), np.arange(n), n)
    np.testing.assert_array_equal(got, np.argmax(Xt @ Wbar.T, axis=1))
    assert np.any(got != np.argmax(Xt @ W.T, axis=1))   # the last iterate predicts differently here


def test_averaged_model_survives_save_and_load(tmp_path):
    X, ys = _stream(n=200, seed=7)
    m = ss.ExtremeClassifier()
    for x, y in zip(X[:150], ys[:150]):
        m.learn_one(x, int(y))
    m2 = ss.ExtremeClassifier.load(m.save(tmp_path / "m"))
    for x, y in zip(X[150:], ys[150:]):
        m.learn_one(x, int(y))
        m2.learn_one(x, int(y))
    np.testing.assert_array_equal(m2._learner.averaged_weights(), m._learner.averaged_weights())
    assert [m.predict_one(x) for x in X] == [m2.predict_one(x) for x in X]


def test_defaults_learn_a_separable_stream():
    # ExtremeClassifier() with no arguments on unit-norm input
    rng = np.random.default_rng(0)
    C = rng.normal(size=(50, 32))
    m = ss.ExtremeClassifier()
    for _ in range(3000):
        c = int(rng.integers(50))
        x = C[c] + 0.3 * rng.normal(size=32)
        m.learn_one(x / np.linalg.norm(x), c)
    acc = np.mean([m.predict_one(C[c] / np.linalg.norm(C[c])) == c for c in range(50)])
    assert acc > 0.95


def test_mips_auto_switches_to_hnsw_as_classes_arrive(monkeypatch):
    pytest.importorskip("hnswlib")
    monkeypatch.setattr(memoir_mod, "AUTO_HNSW_WORK", 20 * 9)     # dense rows: 20 rows of 8 features + bias
    rng = np.random.default_rng(1)
    C = rng.normal(size=(40, 8))
    m, ref = ss.ExtremeClassifier(), ss.ExtremeClassifier(mips="exact")
    for i in range(1200):
        c = i % 10 if i < 200 else i % 40         # 10 classes first, then 40
        x = C[c] + 0.1 * rng.normal(size=8)
        m.learn_one(x, c)
        ref.learn_one(x, c)
        if i == 199:
            assert m._learner.mips_active == "exact"
    assert m._learner.mips_active == "hnsw" and ref._learner.mips_active == "exact"
    # the index found the exact most violating classes (recall measured inside training)
    assert m.certificate().extra["recall_at_1"] > 0.9
    assert [m.predict_one(C[c]) for c in range(40)] == [ref.predict_one(C[c]) for c in range(40)]


def test_mips_auto_without_hnswlib_stays_exact(monkeypatch):
    monkeypatch.setattr(memoir_mod, "AUTO_HNSW_ROWS", 5)
    monkeypatch.setattr(memoir_mod, "AUTO_HNSW_WORK", 5)
    monkeypatch.setattr(memoir_mod, "_has_hnswlib", lambda: False)
    m = ss.ExtremeClassifier()
    for i in range(60):
        m.learn_one(np.eye(12)[i % 12], i % 12)
    assert m._learner.mips_active == "exact"
    assert m.predict_one(np.eye(12)[3]) == 3


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_array_fast_path_encodes_like_the_token_path(dtype):
    from streamssvm.features import FeatureIndex
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(20, 9)) * 3).astype(dtype)
    X[:, ::2] = 0
    X[3] = 0
    a, b = FeatureIndex(None), FeatureIndex(None)
    for x in X:
        for u, v in zip(a.encode_one(x, True), b.encode_tokens(x[None, :], True)):
            assert u.dtype == v.dtype
            np.testing.assert_array_equal(u, v)
    with pytest.raises(ValueError, match="NaN or infinite"):
        a.encode_one(np.full(9, np.nan), False)
    with pytest.raises(ValueError, match="MAX_ABS_VALUE"):
        a.encode_one(np.full(9, 1e300), False)
    with pytest.raises(ValueError, match="expected 9 features"):
        a.encode_one(np.ones(4), False)


def test_mips_auto_threshold_counts_the_scan_work(monkeypatch):
    """Dense rows switch on rows x columns (the scan's cost), sparse rows on the row count."""
    monkeypatch.setattr(memoir_mod, "_has_hnswlib", lambda: True)
    monkeypatch.setattr(memoir_mod, "AUTO_HNSW_WORK", 1000)
    monkeypatch.setattr(memoir_mod, "AUTO_HNSW_ROWS", 50)
    lr = ss.learners.MEMOIR()
    lr.kind, lr.dim = "dense", 10
    assert not lr._auto_hnsw(100) and lr._auto_hnsw(101)
    lr.dim = 200
    assert not lr._auto_hnsw(5) and lr._auto_hnsw(6)
    lr.kind = "sparse"
    assert not lr._auto_hnsw(50) and lr._auto_hnsw(51)


def test_default_step_is_constant_in_units_of_the_input_scale():
    # issue 11: the default step no longer decays per example (before: eta0=3, eta_step=2e-4,
    # so eta had fallen to 3 / 1.1 after 500 examples); it is eta0 / R^2 throughout the stream
    X, ys = _stream(n=500, seed=8)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    lr = _learner(8, 5)
    etas = []
    _learn(lr, X, ys, record=etas)
    assert MEMOIR().eta_step == 0.0 and MEMOIR().eta0 == 3.0
    assert etas[0] == 3.0 and lr.eta() == pytest.approx(3.0, rel=1e-12)
    np.testing.assert_allclose(etas, 3.0, rtol=1e-12)
    # input scale 10: R^2 = 100, the step 3 / 100
    lr10 = _learner(8, 5)
    _learn(lr10, 10.0 * X, ys)
    assert lr10.eta() == pytest.approx(0.03, rel=1e-12)


def test_default_steps_on_a_hand_computed_case():
    # defaults (eta0=3, eta_step=0, lam=1e-6, step-weighted average), two classes, two examples:
    # 1. x1 = (1, 0), y = 0: R^2 = 1, eta = 3, scores 0 and 0 (hinge 1): W0 = 3 x1, W1 = -3 x1
    #    (the shrinkage 1 - lam eta acts before the step);
    # 2. x2 = (0, 2), y = 1: R^2 = (1 + 4) / 2, eta = 1.2, both scores 0 (hinge 1): the rows first
    #    shrink by f = 1 - 1.2e-6, then W1 += 1.2 x2, W0 -= 1.2 x2.
    lr = _learner(2, 2)
    _learn(lr, np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([0, 1]))
    f = 1.0 - 1.2e-6
    W2 = np.array([[3.0 * f, -2.4], [-3.0 * f, 2.4]])
    np.testing.assert_allclose(lr.store.to_dense() * lr.acc, W2, rtol=1e-13)
    W1 = np.array([[3.0, 0.0], [-3.0, 0.0]])
    # step-weighted average: weights 1 and 2
    np.testing.assert_allclose(lr.averaged_weights(), (W1 + 2.0 * W2) / 3.0, rtol=1e-13)
