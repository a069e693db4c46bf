"""Class-major E and ZE in the multiclass batch kernel (``bcfw.learn_new_blocks_cm``, issue 22's
784-d batches): its scores (``multiclass.mc_scores_cm``, in vectors on dense rows through
``simd.vec_scores_cm*``) and steps (``mc_stat_apply2_cm`` / ``mc_stat_apply_cm``) equal the
row-major kernels' to the bit, and a learner whose batches take it learns, predicts and saves
exactly what one forced onto the row-major ``learn_new_blocks`` does."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels import bcfw as K
from streamssvm._kernels.common import emission_add, py_entry
from streamssvm._kernels.multiclass import (
    mc_scores_cm, mc_stat_apply, mc_stat_apply2, mc_stat_apply2_cm, mc_stat_apply_cm,
)


def _bits(a):
    return np.ascontiguousarray(a).view(np.int64)


def _row(rng, d, dense):
    """(tok_ptr, fidx, fval) of one row: dense (no indices, zeros kept) or CSR (sorted indices)."""
    x = rng.standard_normal(d) * (rng.random(d) < 0.55)
    x[0] = 1.0
    if dense:
        return np.array([0, d], np.int32), np.zeros(0, np.int32), x
    j = np.flatnonzero(x).astype(np.int32)
    return np.array([0, len(j)], np.int32), j, x[j].copy()


# every vector variant (8, 10, 12, 16 classes per pass, several passes) and the scalar tails; row
# lengths with and without a tail past the blocks of eight features
@pytest.mark.parametrize("K_, d", [(1, 5), (3, 97), (8, 64), (10, 785), (11, 33), (12, 40), (13, 64), (16, 17),
                                   (26, 100)])
@pytest.mark.parametrize("dense", [True, False], ids=["dense", "csr"])
def test_class_major_scores_equal_row_major(K_, d, dense):
    rng = np.random.default_rng(K_ * 1000 + d)
    Kc = K_ + 3
    E = rng.standard_normal((d, Kc)) * (rng.random((d, Kc)) < 0.8)
    Ecm = np.ascontiguousarray(E.T).T   # the same values, class-major (numba layout "F")
    add, cm = py_entry(emission_add), py_entry(mc_scores_cm)
    for t in range(6):
        tok_ptr, fidx, fval = _row(rng, d, dense)
        coef = float(rng.uniform(0.1, 3.0))
        S0 = rng.standard_normal((1, Kc))
        for zero in (True, False):   # a fresh score, and one added to (the averaged weights' second term)
            S1, S2 = S0.copy(), S0.copy()
            add(E, coef, tok_ptr, fidx, fval, 1, K_, S1, zero)
            cm(Ecm, coef, tok_ptr, fidx, fval, 1, K_, S2, zero)
            assert np.array_equal(_bits(S1), _bits(S2)), (t, zero)


@pytest.mark.parametrize("dense", [True, False], ids=["dense", "csr"])
def test_class_major_steps_equal_row_major(dense):
    """E and Z after steps moving 1..6 classes, with and without the averaging accumulator; E
    holds -0 entries too, which a dense row's zeros must leave as they are (no premise on E)."""
    rng = np.random.default_rng(5)
    d, Kc, K_ = 97, 14, 11
    E = rng.standard_normal((d, Kc)) * (rng.random((d, Kc)) < 0.7)
    E[rng.random((d, Kc)) < 0.1] = -0.0
    Z = rng.standard_normal((d, Kc))
    Et, Zt = np.ascontiguousarray(E.T), np.ascontiguousarray(Z.T)
    a2, a2cm, a1, a1cm = (py_entry(f) for f in (mc_stat_apply2, mc_stat_apply2_cm, mc_stat_apply, mc_stat_apply_cm))
    for t in range(40):
        tok_ptr, fidx, fval = _row(rng, d, dense)
        st = np.zeros(Kc)
        m = 1 + t % 6
        st[rng.choice(K_, m, replace=False)] = rng.standard_normal(m)
        c, zc = -float(rng.uniform(0.01, 1.0)), float(rng.uniform(0.0, 1.0))
        if t % 3:
            a2(E, Z, tok_ptr, fidx, fval, st, K_, c, zc)
            a2cm(Et.T, Zt.T, tok_ptr, fidx, fval, st, K_, c, zc)
        else:
            a1(E, tok_ptr, fidx, fval, st, K_, c)
            a1cm(Et.T, tok_ptr, fidx, fval, st, K_, c)
        assert np.array_equal(_bits(E), _bits(Et.T)), t
        assert np.array_equal(_bits(Z), _bits(Zt.T)), t


def _stream(seed, n, d, K_, dense_frac):
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(K_, d))
    y = rng.integers(0, K_, size=n)
    X = (C[y] + rng.normal(size=(n, d))) / np.sqrt(d)
    X[rng.random(size=X.shape) > dense_frac] = 0.0
    return X, y


def _run(monkeypatch, row_major, X, y, make, size=64):
    """predict_learn_many in batches; ``row_major``: the batch kernel forced to learn_new_blocks.
    Returns the predictions, the saved state's arrays and the calls of each kernel."""
    calls = {"cm": 0, "rm": 0}
    rm, cm = K.learn_new_blocks, K.learn_new_blocks_cm

    def count(name, f):
        return lambda *a: calls.__setitem__(name, calls[name] + 1) or f(*a)

    monkeypatch.setattr(K, "learn_new_blocks", count("rm", rm))
    monkeypatch.setattr(K, "learn_new_blocks_cm", count("rm", rm) if row_major else count("cm", cm))
    m = ss.MulticlassSSVM(learner=make())
    preds = []
    for s in range(0, len(y), size):
        preds += list(m.predict_learn_many(X[s:s + size], y[s:s + size]))
    preds += list(m.predict_many(X[:50]))
    from streamssvm import checkpoint
    tree, arrays = checkpoint._split(m.state())
    monkeypatch.setattr(K, "learn_new_blocks", rm)
    monkeypatch.setattr(K, "learn_new_blocks_cm", cm)
    return preds, repr(tree), {k: _bits(np.asarray(v)) if np.asarray(v).dtype == np.float64 else np.asarray(v)
                               for k, v in arrays.items()}, calls


@pytest.mark.parametrize("make", [
    lambda: ss.learners.BCFW(seed=0),
    lambda: ss.learners.BCFW(seed=0, averaging=False),
    lambda: ss.learners.BCFW(seed=0, window=150),   # FIFO evictions inside the kernel
    lambda: ss.learners.BCFW(seed=0, step="pairwise", cache=True),
    lambda: ss.learners.BCFW(seed=0, replay=3, sampling="uniform"),
], ids=["default", "no-avg", "evicting", "pairwise-cache", "replay3"])
@pytest.mark.parametrize("K_, d", [(10, 60), (5, 24), (13, 31)])
def test_learner_class_major_batches_bit_identical(monkeypatch, make, K_, d):
    X, y = _stream(K_ + d, 700, d, K_, 0.6)
    pa, ta, aa, ca = _run(monkeypatch, False, X, y, make)
    pb, tb, ab, cb = _run(monkeypatch, True, X, y, make)
    assert ca["cm"] > 5 and cb["cm"] == 0   # the class-major kernel ran, and only in the first run
    assert pa == pb and ta == tb
    assert aa.keys() == ab.keys()
    for k in aa:
        assert np.array_equal(aa[k], ab[k]), k


def test_sparse_rows_keep_the_row_major_kernel(monkeypatch):
    """Rows covering less than an eighth of E's rows (sparse, many features) are learned by the
    row-major kernel: the class-major copies would cost more than they save."""
    X, y = _stream(1, 300, 400, 6, 0.03)
    _, _, _, calls = _run(monkeypatch, False, X, y, lambda: ss.learners.BCFW(seed=0))
    assert calls["cm"] == 0 and calls["rm"] > 0


def test_small_batches_keep_the_row_major_kernel(monkeypatch):
    """A batch of a few rows is learned by the row-major kernel (the copies of E and ZE would
    cost more than its few steps save), and both kernels' learners stay bit-identical."""
    X, y = _stream(2, 90, 600, 10, 0.5)
    pa, ta, aa, calls = _run(monkeypatch, False, X, y, lambda: ss.learners.BCFW(seed=0), size=3)
    pb, tb, ab, _ = _run(monkeypatch, True, X, y, lambda: ss.learners.BCFW(seed=0), size=3)
    assert calls["cm"] == 0 and calls["rm"] > 0
    assert pa == pb and ta == tb
