"""Online feature scaling (issue 23 item 6): each column divided by the running RMS of its
non-zero values (streamssvm.scaling.ColumnScaler), on by default for MulticlassSSVM and
MultiLabelSSVM, learned on learning only, saved with the model and its checkpoints, applied at
prediction; 0/1 features unchanged to the bit; the command line's --scale / --no-scale."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import streamssvm as ss
from streamssvm import checkpoint
from streamssvm.scaling import ColumnScaler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT, PYTHONHASHSEED="0")


def cli(*argv, cwd):
    r = subprocess.run([sys.executable, "-m", "streamssvm", *map(str, argv)], capture_output=True, text=True,
                       cwd=cwd, env=ENV, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def write_csv(path, X, y):
    with open(path, "w") as f:
        f.write(",".join([f"f{j}" for j in range(X.shape[1])] + ["label"]) + "\n")
        for a, b in zip(X, y):
            f.write(",".join(repr(float(v)) for v in a) + f",c{b}\n")


def wine_split():
    sd = pytest.importorskip("sklearn.datasets")
    ms = pytest.importorskip("sklearn.model_selection")
    X, y = sd.load_wine(return_X_y=True)   # 13 raw features, one (proline) near 10^3
    return ms.train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)


def mixed_scales(n=300, seed=0):
    """Three classes, two informative unit-scale columns and a noisy one near 10^3."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n)
    X = np.column_stack([rng.normal(size=n) + 2.0 * (y == 1), rng.normal(size=n) + 2.0 * (y == 2),
                         1000.0 + 300.0 * rng.normal(size=n)])
    return X, y


# ----------------------------------------------------------------------------- the command line
def test_cli_defaults_reach_linearsvc_on_raw_wine(tmp_path):
    """Regression (issue 23 item 6): ``run`` + ``predict`` with defaults on the raw wine features
    reached 0.407-0.444 test accuracy while LinearSVC gets 0.944 on the same raw features."""
    svm = pytest.importorskip("sklearn.svm")
    X_tr, X_te, y_tr, y_te = wine_split()
    write_csv(tmp_path / "train.csv", X_tr, y_tr)
    write_csv(tmp_path / "test.csv", X_te, y_te)
    cli("run", "--source", "file://train.csv", "--task", "multiclass", "--save", "m.ssvm", "--no-progress",
        cwd=tmp_path)
    cli("predict", "--model", "m.ssvm", "--source", "file://test.csv", "--sink", "p.jsonl", cwd=tmp_path)
    preds = [json.loads(line)["prediction"] for line in open(tmp_path / "p.jsonl")]
    acc = np.mean([p == f"c{t}" for p, t in zip(preds, y_te)])
    lsvc = np.mean(svm.LinearSVC().fit(X_tr, y_tr).predict(X_te) == y_te)
    assert acc >= lsvc - 0.03, (acc, lsvc)
    cli("run", "--source", "file://train.csv", "--task", "multiclass", "--save", "raw.ssvm", "--no-progress",
        "--no-scale", cwd=tmp_path)
    assert ss.load(tmp_path / "m.ssvm").scale and not ss.load(tmp_path / "raw.ssvm").scale


def test_cli_scale_is_refused_for_sequences(tmp_path):
    (tmp_path / "s.conll").write_text("a X\nb Y\n\n")
    r = subprocess.run([sys.executable, "-m", "streamssvm", "run", "--source", "file://s.conll", "--task",
                        "sequence", "--scale"], capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=600)
    assert r.returncode != 0 and "--scale is for --task" in r.stderr


# ----------------------------------------------------------------------------- the library
def test_scale_is_on_by_default_and_helps_mixed_scales():
    X, y = mixed_scales()
    accs = {}
    for scale in (True, False):
        m = ss.MulticlassSSVM(scale=scale)
        for a, b in zip(X[:200], y[:200]):
            m.learn_one(a, b)
        accs[scale] = np.mean(m.predict_many(X[200:]) == y[200:])
    assert ss.MulticlassSSVM().scale and ss.MultiLabelSSVM().scale
    assert accs[True] > accs[False] + 0.1, accs


def test_indicator_features_are_unchanged_to_the_bit():
    """0/1 columns have RMS exactly 1: scale=True learns what scale=False learns."""
    rng = np.random.default_rng(1)
    X = (rng.random((150, 12)) < 0.3).astype(float)
    y = (X[:, :3].sum(1) + X[:, 5]).astype(int) % 3
    ws = []
    for scale in (True, False):
        m = ss.MulticlassSSVM(scale=scale)
        preds = [m.predict_learn_one({f"w{j}": 1.0 for j in np.flatnonzero(a)}, b) for a, b in zip(X, y)]
        ws.append((preds, m.bound_learner.weight_tables().E.copy()))
    assert ws[0][0] == ws[1][0]
    np.testing.assert_array_equal(ws[0][1], ws[1][1])


def test_learning_updates_the_statistics_prediction_refine_and_certificate_do_not():
    X, y = mixed_scales(60)
    m = ss.MulticlassSSVM()
    for a, b in zip(X, y):
        m.learn_one(a, b)
    st = m._scaler.state()
    assert st["count"][1:4].tolist() == [60.0, 60.0, 60.0] and st["count"][0] == 0   # the bias: never
    m.predict_one(X[0]), m.predict_many(X), m.certificate(), m.refine(passes=2)
    after = m._scaler.state()
    for k in st:
        np.testing.assert_array_equal(st[k], after[k])


def test_predict_uses_the_statistics():
    m = ss.MulticlassSSVM()
    m.learn_one({"a": 1.0, "big": 400.0}, "x")
    m.learn_one({"a": -1.0, "big": 300.0}, "y")
    _, idx, val = m._encode_to_predict({"a": 2.0, "big": 500.0})
    rms = np.sqrt((400.0 ** 2 + 300.0 ** 2) / 2)
    assert idx.tolist() == [0, 1, 2] and np.allclose(val, [1.0, 2.0, 500.0 / rms])


def test_sparse_dict_rows_stay_sparse():
    m = ss.MulticlassSSVM()
    rows = [{"a": 3.0}, {"b": 200.0, "c": 0.5}, {"a": -1.0, "d": 7.0}]
    for i, x in enumerate(rows):
        m.learn_one(x, i % 2)
    for x in rows:
        _, idx, val = m._encode_to_predict(x)
        assert len(idx) == len(x) + 1 and np.all(val != 0)   # the bias and x's own features only


def test_hashing_scales_buckets():
    m = ss.MulticlassSSVM(n_features=2 ** 6)
    for i in range(40):
        m.learn_one({"big": 1000.0 + i, "small": 0.1 * (i % 3 + 1)}, i % 2)
    _, idx, val = m._encode_to_predict({"big": 1000.0, "small": 0.2})
    assert len(idx) == 3 and np.all(np.abs(val[1:]) < 2.0)


def test_learn_many_equals_learn_one_row_by_row():
    X, y = mixed_scales(80)
    a, b = ss.MulticlassSSVM(), ss.MulticlassSSVM()
    a.learn_many(X, y)
    for x, t in zip(X, y):
        b.learn_one(x, t)
    np.testing.assert_array_equal(a._scaler.sumsq, b._scaler.sumsq)
    sa, sb = a.bound_learner.store, b.bound_learner.store   # the learner got the same rows
    assert len(sa.slots()) == len(sb.slots()) == len(y)
    for s in sa.slots():
        np.testing.assert_array_equal(sa.block(s)["fval"], sb.block(s)["fval"])


def test_multilabel_scales():
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.normal(size=200), 500.0 + 100.0 * rng.normal(size=200)])
    Y = [{"p": bool(a > 0), "q": bool(a < -0.5)} for a in X[:, 0]]
    m = ss.MultiLabelSSVM()
    for x, t in zip(X, Y):
        m.learn_one(x, t)
    assert m._scaler.count[1:3].tolist() == [200.0, 200.0]
    hits = np.mean([m.predict_one(x) == t for x, t in zip(X, Y)])
    assert hits > 0.8


def test_save_load_keeps_the_statistics(tmp_path):
    X, y = mixed_scales(100)
    m = ss.MulticlassSSVM()
    for a, b in zip(X, y):
        m.learn_one(a, b)
    m.save(tmp_path / "m.ssvm")
    r = ss.load(tmp_path / "m.ssvm")
    np.testing.assert_array_equal(r._scaler.sumsq, m._scaler.state()["sumsq"])
    np.testing.assert_array_equal(r.predict_many(X), m.predict_many(X))
    # learning goes on alike
    for a, b in zip(X[:20], y[:20]):
        m.learn_one(a, b), r.learn_one(a, b)
    np.testing.assert_array_equal(r.predict_many(X), m.predict_many(X))


def test_a_file_from_before_scaling_loads_unscaled(tmp_path):
    X, y = mixed_scales(50)
    m = ss.MulticlassSSVM(scale=False)
    for a, b in zip(X, y):
        m.learn_one(a, b)
    st = m.state()
    del st["scaling"]
    del st["config"]["params"]["scale"]      # what a file written before feature scaling holds
    r = ss.MulticlassSSVM.from_state(st)
    assert r.scale is False and r._scaler is None
    np.testing.assert_array_equal(r.predict_many(X), m.predict_many(X))


@pytest.mark.parametrize("bad", [
    {"sumsq": np.array([0.0, -1.0]), "count": np.array([0.0, 1.0])},
    {"sumsq": np.array([0.0, np.nan]), "count": np.array([0.0, 1.0])},
    {"sumsq": np.array([0.0, 1.0]), "count": np.array([0.0, 0.5])},
    {"sumsq": np.array([0.0, 1.0]), "count": np.array([0.0, 0.0])},
    {"sumsq": np.array([1.0, 1.0]), "count": np.array([1.0, 1.0])},
    {"sumsq": np.array([0.0, 1.0]), "count": np.array([0.0])},
    {"sumsq": np.zeros(50), "count": np.zeros(50)},
    {"sumsq": [0.0], "count": [0.0]},
    {"sumsq": np.array([0.0])},
    None,
])
def test_crafted_scaling_state_is_refused(bad):
    X, y = mixed_scales(20)
    m = ss.MulticlassSSVM()
    for a, b in zip(X, y):
        m.learn_one(a, b)
    st = m.state()
    st["scaling"] = bad
    with pytest.raises(checkpoint.CheckpointError):
        ss.MulticlassSSVM.from_state(st)


def test_engine_checkpoint_resume_keeps_the_statistics(tmp_path):
    from streamssvm.connectors.files import open_source
    from streamssvm.engine import Engine
    X, y = mixed_scales(120)
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps({"x": {f"f{j}": float(v) for j, v in enumerate(a)}, "y": int(b)}) + "\n"
                            for a, b in zip(X, y)))

    def engine(ck, **kw):
        return Engine(ss.MulticlassSSVM(), open_source(path), task="multiclass", checkpoint_dir=tmp_path / ck,
                      progress=False, **kw)
    full = engine("a")
    full.run()
    engine("b", max_examples=60).run()
    resumed = engine("b")
    resumed.run()
    assert resumed.resumed_from is not None and resumed.model._scaler.count[1] == 120
    np.testing.assert_array_equal(resumed.model._scaler.state()["sumsq"], full.model._scaler.state()["sumsq"])
    rows = [{f"f{j}": float(v) for j, v in enumerate(a)} for a in X]
    np.testing.assert_array_equal(resumed.model.predict_many(rows), full.model.predict_many(rows))


def test_distributed_refuses_scaling_with_a_clear_message():
    from streamssvm.distributed._mix import learner_kind
    model = ss.MulticlassSSVM(learner=ss.learners.BCFW(averaging=False, gap_every=None), n_features=2 ** 8, labels=[0, 1])
    with pytest.raises(ValueError, match="scale=False"):
        learner_kind(model)
    assert learner_kind(model.clone({"scale": False})) == "bcfw"


def test_column_scaler_underflow_and_unseen_columns_keep_values():
    s = ColumnScaler()
    out = s.learn_scaled(np.array([0, 1], np.int32), np.array([1.0, 1e-200]))   # 1e-200 ** 2 underflows
    assert out.tolist() == [1.0, 1e-200]
    assert s.scaled(np.array([0, 5], np.int32), np.array([1.0, 3.0])).tolist() == [1.0, 3.0]
    ColumnScaler.from_state(s.state())   # a state the scaler wrote loads


def test_a_checkpoint_from_before_scale_resumes_without_a_settings_refusal():
    """A checkpoint written before --scale existed records no "scale" in its settings: resuming it
    is not refused (its model keeps its own scale=False); a recorded, different scale is."""
    import types

    from streamssvm.cli.run import Refused, _check_settings
    new = {"task": "multiclass", "learner": "bcfw", "scale": True}
    eng = types.SimpleNamespace(restored_settings={"task": "multiclass", "learner": "bcfw"}, settings=new,
                                resumed_from="ck")
    _check_settings(eng, types.SimpleNamespace(override=False))
    eng.restored_settings = {**new, "scale": False}
    with pytest.raises(Refused, match="--scale"):
        _check_settings(eng, types.SimpleNamespace(override=False))


def test_a_fresh_scaler_scales_nothing():
    """A scaler that has learned nothing keeps every value (it once indexed its empty arrays:
    the first learned record's pre-learning score, the calibration's observation, crashed)."""
    import numpy as np
    from streamssvm.scaling import ColumnScaler
    out = ColumnScaler().scaled(np.array([0, 3], np.int32), np.array([2.0, -5.0]))
    assert out.tolist() == [2.0, -5.0]


def test_indicator_batches_learn_the_statistics_of_row_by_row():
    """The vectorized update of +-1 batches (the fast path that keeps predict_learn_many on
    BLAS for 0/1 rows) leaves the statistics and values of the row-by-row update, bit for bit."""
    import numpy as np
    from streamssvm.scaling import ColumnScaler
    rng = np.random.default_rng(0)
    B = (rng.random((50, 9)) < 0.3).astype(np.float64)
    B[:, 4] *= -1.0
    fidx = np.tile(np.arange(9, dtype=np.int32), 50)
    fval = B.ravel()
    tok = np.arange(0, 451, 9)
    a, b = ColumnScaler(), ColumnScaler()
    assert a.is_identity(fidx, fval)
    va = a.learn_scaled(fidx, fval, tok)
    vb = np.concatenate([b.learn_scaled(fidx[i:j], fval[i:j]) for i, j in zip(tok[:-1], tok[1:])])
    assert np.array_equal(va, vb) and np.array_equal(va, fval)
    assert np.array_equal(a.sumsq[:9], b.sumsq[:9]) and np.array_equal(a.count[:9], b.count[:9])
    assert not a.is_identity(np.array([1], np.int32), np.array([2.0]))


def test_dense_batches_learn_the_statistics_of_row_by_row():
    """Batches whose rows fill most columns take the dense-row kernel (``learn_rows_dense``): the
    values and statistics of the row-by-row update, bit for bit, with explicit zeros, the bias,
    columns first seen mid-batch, underflowed squares and wide magnitudes; sparse batches keep
    the per-entry kernel with the same results."""
    import numpy as np
    from unittest import mock
    from streamssvm import scaling
    from streamssvm.scaling import ColumnScaler
    rng = np.random.default_rng(4)
    for fill in (0.9, 0.6, 0.2):
        B = rng.normal(size=(40, 12)) * 10.0 ** rng.integers(-3, 4, size=(40, 12))
        B[rng.random(size=B.shape) > fill] = 0.0
        B[:10, 7] = 0.0   # column 7 first seen after a few rows
        B[3, 2] = 1e-200   # its square underflows to 0 (counted, RMS 0: scale 1)
        rows = [(np.concatenate([[0], 1 + np.flatnonzero(r)]).astype(np.int32),
                 np.concatenate([[1.0], r[r != 0]])) for r in B]
        rows[5] = (np.array([0, 3, 4], np.int32), np.array([1.0, 0.0, -2.0]))   # an explicit zero
        fidx = np.concatenate([f for f, _ in rows])
        fval = np.concatenate([v for _, v in rows])
        tok = np.concatenate([[0], np.cumsum([len(f) for f, _ in rows])])
        a, b = ColumnScaler(), ColumnScaler()
        a.learn_scaled(np.array([0, 1], np.int32), np.array([1.0, 3.0]))   # statistics from before
        b.learn_scaled(np.array([0, 1], np.int32), np.array([1.0, 3.0]))
        with mock.patch.object(scaling, "learn_rows_dense", wraps=scaling.learn_rows_dense) as dense:
            va = a.learn_scaled(fidx, fval, tok)
        assert dense.called == (fill > 0.5)
        vb = np.concatenate([b.learn_scaled(fidx[i:j], fval[i:j]) for i, j in zip(tok[:-1], tok[1:])])
        assert va.tobytes() == vb.tobytes()
        assert a.sumsq.tobytes() == b.sumsq.tobytes() and a.count.tobytes() == b.count.tobytes()


def test_the_scaling_kernels_equal_the_vectorized_formula():
    """_kernels/scaling (one pass per record) gives the bits of the vectorized numpy formula it
    replaced: zeros, the bias, unseen and out-of-range columns, underflowed squares, huge values."""
    import numpy as np
    from streamssvm import features
    from streamssvm._kernels import scaling as KS
    from streamssvm.scaling import ColumnScaler
    assert KS.BIAS == features.BIAS

    def reference(sumsq, count, cols, vals):
        inside = cols < sumsq.shape[0]
        c = np.where(inside, cols, 0)
        n = np.where(inside, count[c], 0.0)
        s = np.where(inside, sumsq[c], 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.sqrt(s / n)
        ok = (n > 0) & (r > 0) & np.isfinite(r) & (cols != features.BIAS)
        return vals / np.where(ok, r, 1.0)

    rng = np.random.default_rng(0)
    a, b = ColumnScaler(), ColumnScaler()
    b._grow(40)
    for t in range(300):
        cols = np.sort(rng.choice(40, size=8, replace=False)).astype(np.int32)
        vals = rng.normal(size=8) * 10.0 ** rng.integers(-200, 200, size=8)
        vals[rng.random(8) < 0.2] = 0.0
        got = a.learn_scaled(cols, vals)
        keep = (cols != features.BIAS) & (vals != 0.0)
        b.sumsq[cols[keep]] += vals[keep] * vals[keep]
        b.count[cols[keep]] += 1.0
        assert np.array_equal(got, reference(b.sumsq, b.count, cols, vals))
        probe = np.array([0, 3, 39, 55], np.int32)
        pv = rng.normal(size=4)
        assert np.array_equal(a.scaled(probe, pv), reference(b.sumsq, b.count, probe, pv))
