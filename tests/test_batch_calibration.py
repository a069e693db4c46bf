"""The temperature of a multiclass model trained in batches (``learn_many`` /
``predict_learn_many``): the batch paths offer their rows to the temperature fit as ``learn_one``
offers each record (``MulticlassSSVM._observe_batch``), scored before the batch is learned. Before,
they offered nothing: T stayed 1 and ``predict_proba_one`` of a batch-trained model was
uncalibrated (on OCR-like data its held-out log-loss was worse than the fitted one's)."""
import math

import numpy as np
import pytest

import streamssvm as ss


def _data(n=3000, d=12, K=5, seed=0):
    """Classes as Gaussian means, overlapping enough that a calibrated T is far from 1."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(K, d)) * 0.9
    y = rng.integers(0, K, size=n)
    y[:K] = np.arange(K)
    return means[y] + rng.normal(size=(n, d)), y


def _batches(m, X, y, how, size=128, preds=None):
    """Train ``m`` on batches of ``size`` rows through ``how``; the predictions go to ``preds``."""
    for a in range(0, len(y), size):
        Xb, yb = X[a:a + size], y[a:a + size]
        if how == "learn_many":
            m.learn_many(Xb, yb)
            continue
        if how == "list":
            Xb = list(Xb)
        elif how == "dicts":   # the CSR path of predict_learn_many
            Xb = [{f"f{j}": float(v) for j, v in enumerate(r)} for r in Xb]
        p = m.predict_learn_many(Xb, yb)
        if preds is not None:
            preds.append(list(p))
    return m


def _held_out_nll(m, X, y, as_dicts=False):
    tot = 0.0
    for x, c in zip(X, y):
        p = m.predict_proba_one({f"f{j}": float(v) for j, v in enumerate(x)} if as_dicts else x)
        tot -= math.log(max(p.get(int(c), 0.0), 1e-300))
    return tot / len(y)


@pytest.mark.parametrize("how", ["learn_many", "predict_learn_many", "list", "dicts"])
def test_batches_fit_the_temperature_near_the_record_path(how):
    X, y = _data()
    batch = _batches(ss.MulticlassSSVM(), X, y, how)
    one = ss.MulticlassSSVM()
    one.predict_learn_each(list(X), [int(c) for c in y])
    tb, to = batch._temperature, one._temperature
    assert tb.n_fits > 0 and tb.n_offered == len(y) == to.n_offered
    assert batch.temperature != 1.0
    # the same schedule; a batch's rows scored before the batch (not after the row before them)
    assert abs(math.log(batch.temperature / one.temperature)) < 0.25, (batch.temperature, one.temperature)


def test_batch_temperature_calibrates_held_out_probabilities():
    X, y = _data(n=4000)
    m = _batches(ss.MulticlassSSVM(), X[:3000], y[:3000], "predict_learn_many")
    fitted = _held_out_nll(m, X[3000:], y[3000:])
    t = m._temperature
    beta = t.beta
    t.beta = 1.0
    try:
        raw = _held_out_nll(m, X[3000:], y[3000:])
    finally:
        t.beta = beta
    assert fitted < raw, (fitted, raw)


@pytest.mark.parametrize("how", ["learn_many", "predict_learn_many", "dicts"])
def test_observing_the_batch_changes_nothing_learned(how, monkeypatch):
    """Learning never reads the temperature: the same predictions and weights, to the bit, as
    the batch path without its observations."""
    X, y = _data(n=1500, seed=1)
    pa, pb = [], []
    a = _batches(ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=3)), X, y, how, 100, pa)
    monkeypatch.setattr(ss.MulticlassSSVM, "_observe_batch", lambda self, *args, **kw: None)
    b = _batches(ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=3)), X, y, how, 100, pb)
    assert pa == pb
    la, lb = a._learner, b._learner
    for u, v in ((la.W.E, lb.W.E), (la._Z.E, lb._Z.E)):
        assert u.shape == v.shape and u.tobytes() == v.tobytes()
    assert b._temperature is None or b._temperature.n_fits == 0
    assert a._temperature.n_fits > 0


@pytest.mark.parametrize("how", ["predict_learn_many", "learn_many"])
def test_dense_and_list_batches_fit_the_same_temperature(how):
    """A dense batch's rows are scored by a BLAS product, a list's by the record kernel: the
    same observations, the same fits, and the scores (so beta) equal to rounding."""
    X, y = _data(n=1200, seed=2)
    a = _batches(ss.MulticlassSSVM(), X, y, how)
    b = ss.MulticlassSSVM()
    for i in range(0, len(y), 128):   # lists of rows: the CSR path
        (b.learn_many if how == "learn_many" else b.predict_learn_many)(list(X[i:i + 128]), y[i:i + 128])
    sa, sb = a._temperature.state(), b._temperature.state()
    assert a._temperature.n_fits > 0
    for k in sa:
        assert sa[k] == pytest.approx(sb[k], rel=1e-9, abs=1e-12), k
