"""Predict-then-learn in micro-batches (``Estimator.predict_learn_each``, ``BCFW.predict_learn_run``,
the engine's micro-batched loop): bit-identical to record by record."""
import json
import pickle

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.connectors.base import DeadLetterSink, IterableSource, MemorySink
from streamssvm.connectors.files import open_source, write_jsonl
from streamssvm.engine import Engine
from same_checkpoints import assert_same_checkpoints


def _rows(n=700, d=6, k=4, seed=0):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(k, d))
    X = rng.normal(size=(n, d))
    return X, [int(v) for v in np.argmax(X @ W.T, axis=1)]


def _dict_rows(n=500, seed=1):
    """Dicts whose vocabulary and label set grow inside batches."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x = {f"f{j}": float(rng.normal()) for j in range(4)}
        if i % 37 == 5:
            x[f"new{i}"] = 1.0          # a feature first seen mid-batch
        y = f"c{int(rng.integers(0, 3 + min(i // 60, 4)))}"   # labels arriving mid-stream
        out.append((x, y))
    return out


def _state(m):
    return pickle.dumps(m.state())


def _one(m, x, y):
    """The record-by-record reference: predict_one, then learn_one (the Python path;
    ``predict_learn_one`` takes the micro-batch kernel for one record)."""
    p = m.predict_one(x)
    m.learn_one(x, y)
    return p


LEARNERS = [
    ("BCFW", {}), ("BCFW", {"averaging": False}), ("BCFW", {"lam": 0.01, "replay": 3}),
    ("BCFW", {"sampling": "uniform"}), ("BCFW", {"capacity": 150}), ("BCFW", {"gap_every": 0.5}),
    # blocks with averaging accumulators (FLAG_AVG): a run's blocks get theirs as one at a time
    ("BCFW", {"window": 150, "evicted_average": "keep"}),
    ("SGD", {}), ("CuttingPlane", {}), ("BMRM", {}), ("Pragam", {}), ("MEMOIR", {}), ("GDMM", {}),
]


def _learner(name, kw):
    cls = getattr(ss.learners, name)
    try:
        return cls(seed=0, **kw)
    except TypeError:
        return cls(**kw)


@pytest.mark.parametrize("name,kw", LEARNERS)
@pytest.mark.parametrize("rows", ["array", "dict"])
def test_predict_learn_each_equals_record_by_record(name, kw, rows):
    data = list(zip(*_rows())) if rows == "array" else _dict_rows()
    try:
        a = ss.MulticlassSSVM(learner=_learner(name, kw), scale=False)
        b = ss.MulticlassSSVM(learner=_learner(name, kw), scale=False)
    except (TypeError, ValueError) as e:
        pytest.skip(f"{name} does not take {kw}: {e}")
    pa = [_one(a, x, y) for x, y in data]
    pb = []
    for s in range(0, len(data), 61):
        out = b.predict_learn_each([x for x, _ in data[s:s + 61]], [y for _, y in data[s:s + 61]])
        assert all(ok for ok, _ in out)
        pb += [p for _, p in out]
    assert pa == pb
    assert _state(a) == _state(b)
    if name == "BCFW" and rows == "array":
        assert b.learns_in_runs


def test_the_kernel_takes_the_runs(monkeypatch):
    from streamssvm._kernels import microbatch as MB
    calls = []
    f = MB.predict_learn_examples
    monkeypatch.setattr(MB, "predict_learn_examples", lambda *a: calls.append(len(a[6][5])) or f(*a))
    X, y = _rows(2000)
    m = ss.MulticlassSSVM(scale=False)
    for s in range(0, 2000, 200):
        m.predict_learn_each(list(X[s:s + 200]), y[s:s + 200])
    # the temperature fit observes the first 1024 records, then one in 8: the kernel scores
    # them (before learning them) inside the runs
    t = m._calibrator()
    assert sum(calls) > 0.95 * 2000
    assert t.n_offered == 2000 and t.n_observed > t.dense_until + (2000 - t.dense_until) // t.stride - 5


def _outcomes(res):
    """``predict_learn_each``'s outcomes, an error as its type and message."""
    return [(ok, v if ok else f"{type(v).__name__}: {v}") for ok, v in res]


def _one_by_one(m, xs, ys):
    """Record by record through ``predict_learn_one``: the outcomes as :func:`_outcomes`."""
    ref = []
    for x, y in zip(xs, ys):
        try:
            ref.append((True, m.predict_learn_one(x, y)))
        except Exception as e:  # noqa: BLE001
            ref.append((False, f"{type(e).__name__}: {e}"))
    return ref


def test_bad_records_inside_a_batch_change_nothing():
    X, y = _rows(300)
    xs, ys = [dict(enumerate(r)) for r in X], list(y)
    bad = {40: ({0: float("nan")}, 1), 41: ({0: "high"}, 1), 90: ({0: 1.0}, None), 150: ({0: 1.0}, [1, 2])}
    a, b = ss.MulticlassSSVM(), ss.MulticlassSSVM()
    xs2, ys2 = list(xs), list(ys)
    for i in sorted(bad, reverse=True):
        xs2.insert(i, bad[i][0])
        ys2.insert(i, bad[i][1])
    ref = _one_by_one(a, xs2, ys2)
    got = _outcomes(b.predict_learn_each(xs2, ys2))
    assert got == ref and sum(not ok for ok, _ in got) == 4
    assert _state(a) == _state(b)


def _engine_run(tmp_path, path, micro, tag, **kw):
    sink, dl = MemorySink(), DeadLetterSink(MemorySink())
    eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0), scale=False), open_source(path, dead_letter=dl),
                 task="multiclass", progress=False, checkpoint_dir=tmp_path / f"ck{tag}", sink=sink, **kw)
    eng.MICRO_BATCH = micro
    s = eng.run()
    return eng, s, sink, dl


def _jsonl(tmp_path, n=900, bad_every=0):
    X, y = _rows(n)
    lines = []
    for i, (r, c) in enumerate(zip(X, y)):
        lines.append(json.dumps({"x": {f"f{j}": float(v) for j, v in enumerate(r)}, "y": c}))
        if bad_every and i % bad_every == bad_every - 1:
            lines.append('{"x": {"f0": NaN}, "y": 1}')
            lines.append('{"x": {"f0": "high"}, "y": 1}')
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def _strip(history):
    drop = ("time", "elapsed", "throughput", "certificate_seconds")
    return [{k: v for k, v in h.items() if k not in drop} for h in history]


def test_engine_micro_batches_equal_record_by_record(tmp_path):
    """Predictions, dead letters, snapshots and every checkpoint: the same bits."""
    p = _jsonl(tmp_path, bad_every=97)
    e1, s1, k1, d1 = _engine_run(tmp_path, p, 1, "a", snapshot_every=70, checkpoint_every=250)
    e2, s2, k2, d2 = _engine_run(tmp_path, p, 64, "b", snapshot_every=70, checkpoint_every=250)
    assert k1.items == k2.items and len(k2.items) == 900
    assert d1.sink.items == d2.sink.items and s2["n_bad"] == 18
    assert _strip(e1.history) == _strip(e2.history)
    assert _state(e1.model) == _state(e2.model)
    assert_same_checkpoints(e1, e2, more_than=1)


def test_micro_batches_end_at_boundaries(tmp_path):
    p = _jsonl(tmp_path, n=300)
    sizes = []
    eng = Engine(ss.MulticlassSSVM(), open_source(p), task="multiclass", progress=False, snapshot_every=70,
                 checkpoint_every=100, max_examples=290)
    f = eng._predict_learn
    eng._predict_learn = lambda xs, ys, recs: sizes.append(len(xs)) or f(xs, ys, recs)
    s = eng.run()
    assert s["examples_seen"] == 290 and max(sizes) > 1
    ends = np.cumsum(sizes)
    for b in (70, 100, 140, 200, 210, 280):
        assert b in ends


def test_kill_and_resume_through_micro_batches(tmp_path):
    p = _jsonl(tmp_path, n=800)
    e1, s1, _, _ = _engine_run(tmp_path, p, 64, "x", checkpoint_every=150, max_examples=450)
    assert s1["examples_seen"] == 450
    e2, s2, _, _ = _engine_run(tmp_path, p, 64, "x", checkpoint_every=150)   # resumes
    assert s2["resumed_from"] and s2["examples_seen"] == 800
    e3, s3, _, _ = _engine_run(tmp_path, p, 1, "y", checkpoint_every=150)
    # (a restored store is compacted: its layout differs from an uninterrupted run's, record by
    # record as well; the weights and the metrics do not)
    for k in ("E", "T", "B"):
        np.testing.assert_array_equal(getattr(e2.model._learner.W, k), getattr(e3.model._learner.W, k))
    assert s2["metrics"] == s3["metrics"]


class _PoisonBCFW(ss.learners.BCFW):
    """Weights made non-finite by the record whose first value is 777 (validated input cannot
    do it), in a run and one record at a time."""

    def _poison(self, fidx, fval):
        hit = np.flatnonzero(fval == 777.0)
        if len(hit):
            self.W.E[fidx[hit[0]], 0] = np.inf

    def predict_learn_run(self, tok_ptr, fidx, fval, yids, scaling=None, observed=None):
        ids, S = super().predict_learn_run(tok_ptr, fidx, fval, yids, scaling, observed)
        self._poison(fidx[:tok_ptr[len(ids)]], fval[:tok_ptr[len(ids)]])
        return ids, S

    def predict_learn_record(self, fidx, fval, yid, scaling=None, observed=False):
        got = super().predict_learn_record(fidx, fval, yid, scaling, observed)
        if got is not None:
            self._poison(fidx, fval)
        return got

    def learn(self, tok_ptr, fidx, fval, ytrue, Ki=1):
        slot = super().learn(tok_ptr, fidx, fval, ytrue, Ki)
        self._poison(fidx, fval)
        return slot


@pytest.mark.parametrize("ckpt", [True, False])
def test_a_poisoned_record_inside_a_batch_is_undone(tmp_path, ckpt):
    X, y = _rows(300)
    recs = [{"x": {f"f{j}": float(v) for j, v in enumerate(r)}, "y": c} for r, c in zip(X, y)]
    bad = {"x": {**recs[150]["x"], "f2": 777.0}, "y": recs[150]["y"]}
    write_jsonl(tmp_path / "with.jsonl", recs[:150] + [bad] + recs[150:])
    write_jsonl(tmp_path / "without.jsonl", recs)

    def run(path, d, micro):
        dl = DeadLetterSink(MemorySink())
        eng = Engine(ss.MulticlassSSVM(learner=_PoisonBCFW(seed=0), scale=False), open_source(path, dead_letter=dl),
                     task="multiclass", progress=False, checkpoint_dir=(tmp_path / d) if ckpt else None,
                     checkpoint_every=100, snapshot_every=60)
        eng.MICRO_BATCH = micro
        return eng, eng.run(), dl

    e1, s1, dl1 = run(tmp_path / "with.jsonl", "a", 64)
    e2, s2, _ = run(tmp_path / "without.jsonl", "b", 64)
    e3, s3, _ = run(tmp_path / "without.jsonl", "c", 1)
    assert s1["undone"] >= 1 and s1["examples_seen"] == 300 and dl1.count == 1
    assert "non-finite" in dl1.sink.items[0]["reason"]
    for k in ("E", "T", "B"):
        np.testing.assert_array_equal(getattr(e1.model._learner.W, k), getattr(e2.model._learner.W, k))
    assert _state(e2.model) == _state(e3.model)
    assert s1["metrics"] == s2["metrics"] == s3["metrics"]


def test_iterable_source_micro_batches(tmp_path):
    X, y = _rows(400)
    out = []
    for micro in (1, 50):
        sink = MemorySink()
        eng = Engine(ss.MulticlassSSVM(), IterableSource(list(zip(list(X), y))), task="multiclass",
                     progress=False, sink=sink)
        eng.MICRO_BATCH = micro
        eng.run()
        out.append((sink.items, _state(eng.model)))
    assert out[0] == out[1]


def test_bad_array_rows_inside_a_batch():
    """A batch of arrays with an invalid row is encoded record by record: the same refusals."""
    X, y = _rows(200)
    xs, ys = list(X), list(y)
    xs[70] = np.array([1.0, np.inf, 0, 0, 0, 0])
    xs[71] = np.ones(5)
    xs[72] = np.array([1e300, 0, 0, 0, 0, 0])
    a, b = ss.MulticlassSSVM(), ss.MulticlassSSVM()
    ref = _one_by_one(a, xs, ys)
    got = []
    for s in range(0, 200, 64):
        got += _outcomes(b.predict_learn_each(xs[s:s + 64], ys[s:s + 64]))
    assert got == ref and sum(not ok for ok, _ in got) == 3
    assert _state(a) == _state(b)


@pytest.mark.parametrize("kind", ["indicators", "real", "mixed", "bytes"])
@pytest.mark.parametrize("learner", [{}, {"averaging": False}, {"lam": 0.01, "replay": 3}])
def test_scaled_calibrated_models_take_runs(monkeypatch, kind, learner):
    """With feature scaling and the online temperature fit on (the defaults), the kernel scales
    each record (by the statistics before it for the prediction, then with it for learning)
    and scores the records the fit observes: every record of a run goes to the kernel, with
    the same predictions, weights, scaling statistics, temperature and fit counters as record
    by record. (Before, a real-valued record or one the fit observed left the kernel.)"""
    from streamssvm._kernels import microbatch as MB
    calls = []
    f = MB.predict_learn_examples
    monkeypatch.setattr(MB, "predict_learn_examples", lambda *a: calls.append(len(a[6][5])) or f(*a))
    rng = np.random.default_rng(3)
    X, y = _rows(2400)
    B = (X > 0).astype(np.float64)
    if kind == "indicators":
        X = B
    elif kind == "mixed":   # indicators, then a column turns real-valued mid-stream
        X = B.copy()
        X[1300:, 2] = rng.normal(size=1100) * 100.0
    elif kind == "bytes":   # OCR's packed pixel bytes: columns of very different scales
        X = np.floor(np.abs(X) * np.array([1, 3, 30, 100, 255, 7.0]))
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0, **learner))
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0, **learner))
    assert a.scale and b.scale
    pa = [_one(a, x, c) for x, c in zip(X, y)]
    pb = []
    for s in range(0, len(y), 50):
        out = b.predict_learn_each(list(X[s:s + 50]), y[s:s + 50])
        assert all(ok for ok, _ in out)
        pb += [p for _, p in out]
    assert pa == pb
    assert _state(a) == _state(b)
    ta, tb = a._calibrator(), b._calibrator()
    assert ta.n_fits > 10 and ta.state() == tb.state() and ta.beta == tb.beta
    assert [pickle.dumps(it) for it in ta._items] == [pickle.dumps(it) for it in tb._items]
    np.testing.assert_array_equal(a._scaler.state()["sumsq"], b._scaler.state()["sumsq"])
    x = X[7]
    assert a.predict_proba_one(x) == b.predict_proba_one(x)
    assert sum(calls) > 0.9 * len(y)   # (the first records, before two labels are known, go one at a time)


def test_engine_micro_batches_scaled_and_calibrated_every_checkpoint(tmp_path):
    """The engine with the defaults (scaling, temperature fit) on real-valued records: micro
    batches of 64 and record by record give the same predictions, history and checkpoint bits."""
    X, y = _rows(1500)
    X = X * np.array([1, 10, 100, 0.01, 1000, 3.0])
    write_jsonl(tmp_path / "r.jsonl", [{"x": {f"f{j}": float(v) for j, v in enumerate(r)}, "y": c}
                                       for r, c in zip(X, y)])
    runs = []
    for micro, tag in ((1, "a"), (64, "b")):
        sink = MemorySink()
        eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0)), open_source(tmp_path / "r.jsonl"),
                     task="multiclass", progress=False, checkpoint_dir=tmp_path / f"ck{tag}", sink=sink,
                     snapshot_every=110, checkpoint_every=300, keep=10)
        eng.MICRO_BATCH = micro
        eng.run()
        runs.append((eng, sink))
    (e1, k1), (e2, k2) = runs
    assert k1.items == k2.items and len(k2.items) == 1500
    assert _strip(e1.history) == _strip(e2.history)
    assert _state(e1.model) == _state(e2.model)
    assert e1.model.temperature == e2.model.temperature != 1.0
    assert_same_checkpoints(e1, e2, more_than=3)


@pytest.mark.parametrize("kind", ["indicators", "real", "bytes"])
@pytest.mark.parametrize("learner", [{}, {"averaging": False}, {"lam": 0.01, "replay": 3}, {"capacity": 300},
                                     {"gap_every": 0.5}, {"sampling": "uniform"}])
def test_predict_learn_one_takes_the_kernel_record_by_record(monkeypatch, kind, learner):
    """``predict_learn_one`` of a record of known features and label is one call of the
    micro-batch kernel (``BCFW.predict_learn_record``: scaling, the temperature fit's scores,
    prediction and step; before, a prediction call, Python scaling and scoring, then a learn
    call) with the predictions, weights, scaling statistics and temperature of ``predict_one``
    then ``learn_one``; a store that evicts (``capacity``) or a due gap pass leaves it to the
    Python side."""
    from streamssvm._kernels import microbatch as MB
    calls = []
    f = MB.predict_learn_examples
    monkeypatch.setattr(MB, "predict_learn_examples", lambda *a: calls.append(len(a[6][5])) or f(*a))
    X, y = _rows(1500)
    if kind == "indicators":
        X = (X > 0).astype(np.float64)
    elif kind == "bytes":
        X = np.floor(np.abs(X) * np.array([1, 3, 30, 100, 255, 7.0]))
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0, **learner))
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0, **learner))
    pa = [_one(a, x, c) for x, c in zip(X, y)]
    assert not calls
    pb = [b.predict_learn_one(x, c) for x, c in zip(X, y)]
    assert pa == pb
    assert _state(a) == _state(b)
    ta, tb = a._calibrator(), b._calibrator()
    assert ta.n_fits > 5 and ta.state() == tb.state() and ta.beta == tb.beta
    np.testing.assert_array_equal(a._scaler.state()["sumsq"], b._scaler.state()["sumsq"])
    assert a.predict_proba_one(X[3]) == b.predict_proba_one(X[3])
    if "capacity" not in learner:
        assert sum(calls) > 0.9 * len(y) and max(calls) == 1


def test_engine_micro_batches_of_flat_rows_with_bad_records_in_the_middle(tmp_path, monkeypatch):
    """JSONL rows of equal-length numbers (the reader's arrays): a micro-batch whose rows are all
    valid and whose labels are all known is one kernel run from its CSR (``_known_label_ids``);
    a batch holding a bad record (a row of the wrong width, a non-finite value), a bool label
    (``True`` is the known class 1, as record by record) or a label first seen in it goes record
    by record, the bad record a dead
    letter with its reason and the rest of its batch learned in order. Micro-batches of 64 and
    record by record: the same predictions, dead letters, history, model and checkpoints."""
    X, y = _rows(1400)
    X = X * np.array([1, 10, 100, 0.01, 1000, 3.0])
    lines = []
    for i, (r, c) in enumerate(zip(X, y)):
        c = 4 if i == 700 else c   # a label first seen mid-batch
        lines.append(json.dumps({"x": r.tolist(), "y": c}))
        if i in (300, 301, 900):
            lines.append(json.dumps({"x": r.tolist()[:5], "y": c}))   # the wrong width: the model refuses it
        if i == 500:
            lines.append('{"x": [1, 2, 3, 4, 5, 1e400], "y": 1}')    # inf: the reader refuses it
            lines.append(json.dumps({"x": r.tolist(), "y": True}))    # a bool label: class 1
    p = tmp_path / "rows.jsonl"
    p.write_text("\n".join(lines) + "\n")
    fast = []
    f = ss.MulticlassSSVM._known_label_ids
    monkeypatch.setattr(ss.MulticlassSSVM, "_known_label_ids", lambda self, ys: fast.append(f(self, ys)) or fast[-1])
    runs = []
    for micro, tag in ((1, "a"), (64, "b")):
        e, s, k, d = _engine_run(tmp_path, p, micro, tag, snapshot_every=110, checkpoint_every=300)
        runs.append((e, s, k, d))
    (e1, s1, k1, d1), (e2, s2, k2, d2) = runs
    assert k1.items == k2.items and len(k2.items) == 1401
    assert d1.sink.items == d2.sink.items and s2["n_bad"] == 4
    reasons = [it["reason"] for it in d2.sink.items]
    assert len(reasons) == 4 and sum("expected 6 features per token, got 5" in r for r in reasons) == 3
    assert _strip(e1.history) == _strip(e2.history)
    assert _state(e1.model) == _state(e2.model)
    assert_same_checkpoints(e1, e2, more_than=1)
    taken = [ids for ids in fast if ids is not None]
    assert len(taken) > 10 and sum(len(ids) for ids in taken) > 900   # most batches went whole


def test_a_runs_seeds_are_the_per_record_seeds(monkeypatch):
    """``predict_learn_run`` computes the seeds of a run's records as (A + e * B) % M in int64:
    the seeds ``_seed()`` gives record by record, also at ticks far beyond 2^31."""
    from streamssvm._kernels import microbatch as MB
    X, y = _rows(400)
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=7, replay=2))
    m.predict_learn_each(list(X[:100]), y[:100])
    lr = m._learner
    seen = []
    f = MB.predict_learn_examples
    monkeypatch.setattr(MB, "predict_learn_examples", lambda *a: seen.append((a[6][6].copy(), lr._tick)) or f(*a))
    for tick in (None, 2**40 + 3, 2**62 + 11):
        if tick is not None:
            lr._tick = tick
        seen.clear()
        m.predict_learn_each(list(X[100:160]), y[100:160])
        assert seen
        seeds, t0 = seen[0]
        per = 1 + int(lr.replay)
        want = [(lr._seed_base + (t0 + e * per + 1) * 2654435761) % 2147483647 for e in range(len(seeds))]
        assert seeds.dtype == np.int64 and seeds.tolist() == want


def _wide_dicts(n=600, keys="str", seed=4):
    """Dicts of 4-40 features (under and over FeatureIndex.BULK_MIN) from a vocabulary that
    is known after the first records: zero and negative-zero values, integer values, a
    zero-valued name never seen, and now and then a nonzero new name."""
    rng = np.random.default_rng(seed)
    name = (lambda j: f"w{j}") if keys == "str" else (lambda j: int(j) * 7 - 100)
    out = []
    for i in range(n):
        d = int(rng.integers(4, 41))
        cols = rng.choice(60, size=d, replace=False)
        vals = rng.normal(size=d)
        vals[rng.random(d) < 0.15] = 0.0
        vals[rng.random(d) < 0.05] = -0.0
        x = {name(c): (int(round(3 * v)) if k % 6 == 0 else float(v)) for k, (c, v) in enumerate(zip(cols, vals))}
        x[name(1000 + i)] = 0.0                 # a name never learned, zero: left out
        if i % 97 == 50:
            x[name(5000 + i)] = 1.0             # a new name mid-stream: that batch per record
        out.append((x, f"c{int(np.argmax([x.get(name(c), 0) for c in range(4)]))}"))
    return out


@pytest.mark.parametrize("keys", ["str", "int"])
def test_dict_micro_batches_are_one_run_and_equal_record_by_record(keys, monkeypatch):
    """A micro-batch of dicts whose every nonzero feature and label are known is one run, its
    CSR made in one pass (FeatureIndex.dict_csr), with no per-record encoding; predictions and
    state are those of record by record (before: every dict was encoded on its own). A batch
    holding a record with a new name is cut there, the same bits again."""
    from streamssvm.features import FeatureIndex
    data = _wide_dicts(keys=keys)
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0))
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0))
    pa = [_one(a, x, y) for x, y in data]
    encoded = []
    enc = FeatureIndex.encode_record
    monkeypatch.setattr(FeatureIndex, "encode_record", lambda self, x, keep=False: encoded.append(1) or enc(self, x, keep))
    pb, per_batch = [], []
    for s in range(0, len(data), 50):
        n0 = len(encoded)
        out = b.predict_learn_each([x for x, _ in data[s:s + 50]], [y for _, y in data[s:s + 50]])
        assert all(ok for ok, _ in out)
        pb += [p for _, p in out]
        per_batch.append(len(encoded) - n0)
    assert pa == pb
    assert _state(a) == _state(b)
    # after the first batches, records are encoded one by one only now and then: the record
    # with a new nonzero name (the batch is cut there: the records before it one run, then
    # the rest), or one the kernel leaves to the Python side (e.g. when the block store grows)
    assert all(per_batch[k] <= 3 for k in range(2, len(per_batch))), per_batch


def test_dict_csr_is_encode_record_per_row():
    from streamssvm.features import FeatureIndex
    data = _wide_dicts(200, seed=9)
    fi = FeatureIndex()
    for x, _ in data[:150]:
        fi.encode_dict(x, grow=True)
    xs = [x for x, _ in data[:150]]
    tp, idx, val = fi.dict_csr(xs)
    for i, x in enumerate(xs):
        e = fi.encode_record(x)
        assert fi.trusts(e)
        assert idx[tp[i]:tp[i + 1]].tolist() == e.fidx.tolist()
        assert val[tp[i]:tp[i + 1]].tobytes() == e.fval.tobytes()
    # what the batch path leaves to the per-record encoding (which registers or raises)
    # a record with a new name: the records before it (that one and the rest: the caller's)
    tp2, idx2, val2 = fi.dict_csr(xs[:7] + [{"unseen": 1.0}] + xs[7:])
    assert tp2.tolist() == tp[:8].tolist() and idx2.tolist() == idx[:tp[7]].tolist()
    assert fi.dict_csr([{"unseen": 1.0}] + xs)[0].tolist() == [0]
    for bad in (float("nan"), float("inf"), 1e13, True, "1.5", np.float64(1.0)):
        assert fi.dict_csr(xs[:3] + [{"w1": bad}]) is None
    assert fi.dict_csr(xs[:3] + [{1: 1.0}]) is None            # str and int names mixed
    assert fi.dict_csr(xs[:3] + [{"w1": 1.0, 2.5: 0.0}]) is None   # a float name, even zero-valued
    assert fi.dict_csr(xs[:3] + [[1.0]]) is None
    assert FeatureIndex(n_features=64).dict_csr([{"a": 1.0}]) is None


def test_engine_leaves_plain_dict_records_as_they_are(monkeypatch):
    """Micro-batches of dict features with str / int labels skip the per-record conversion
    (it changes nothing for them: before, coerce_input ran on every record); a record the
    conversion refuses still goes to the dead letters with its reason, and the run equals
    record by record."""
    from streamssvm.estimators.base import Estimator
    data = [(x, y) for x, y in _wide_dicts(300)]
    data.insert(150, ({"w1": 1.0}, ["c1"]))   # a list label: refused by the conversion
    calls = []
    co = Estimator.coerce_input
    monkeypatch.setattr(Estimator, "coerce_input", lambda self, x, y: calls.append(1) or co(self, x, y))
    out = []
    for micro in (1, 64):
        sink, dl = MemorySink(), DeadLetterSink(MemorySink())
        eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0)), IterableSource(list(data)),
                     task="multiclass", progress=False, sink=sink, dead_letter=dl, snapshot_every=100)
        eng.MICRO_BATCH = micro
        calls.clear()
        s = eng.run()
        out.append((sink.items, dl.sink.items, _strip(eng.history), _state(eng.model), s["examples_seen"], len(calls)))
    assert out[0][:5] == out[1][:5]
    assert out[1][4] == 300 and len(out[1][1]) == 1 and "single value" in json.dumps(out[1][1])
    assert out[1][5] <= 64   # only the micro-batch holding the refused record is converted per record


def test_dict_batches_cut_at_new_names_equal_record_by_record(monkeypatch):
    """Batches with several records of new names (more than RUN_CUTS: the rest goes record by
    record) and a bad value after a new name: predictions, refusals and state of record by
    record."""
    data = _wide_dicts(400, seed=11)
    for i in range(60, 400, 7):   # many new names, some batches with more than RUN_CUTS of them
        data[i][0][f"n{i}"] = 2.0
    data[130] = ({**data[130][0], "w3": float("nan")}, data[130][1])
    xs, ys = [x for x, _ in data], [y for _, y in data]
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0))
    ref = _one_by_one(a, xs, ys)
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0))
    got = []
    for s in range(0, len(xs), 45):
        got += _outcomes(b.predict_learn_each(xs[s:s + 45], ys[s:s + 45]))
    assert got == ref and sum(not ok for ok, _ in got) == 1
    assert _state(a) == _state(b)


def test_engine_row_micro_batches_with_labels_arriving_mid_stream_keep_the_temperature_bits(tmp_path):
    """The file reader's rows (``RecordRows``, as ``run file://`` reads a JSONL of numbers) in
    micro-batches of the default size and record by record, on a stream whose labels arrive
    mid-stream (each new one cuts a run) with a bad record inside a batch: the same predictions,
    model (temperature fit, its window's observations scored by the kernel and handed over per
    run, ``Temperature.observe_classes``), checkpoints, and beta to the bit."""
    X, y = _rows(2600, d=8, k=7, seed=3)
    y = [c if i >= 700 or c < 3 else c % 3 for i, c in enumerate(y)]   # labels 3..6 only after 700
    recs = [{"x": r.tolist(), "y": c} for r, c in zip(X, y)]
    recs.insert(1500, {"x": [1.0, 2.0], "y": 1})   # another width: a dead letter inside a batch
    write_jsonl(tmp_path / "r.jsonl", recs)
    runs = []
    for micro, tag in ((1, "a"), (Engine.MICRO_BATCH, "b")):
        sink = MemorySink()
        eng = Engine(ss.MulticlassSSVM(), open_source(tmp_path / "r.jsonl"), task="multiclass", progress=False,
                     checkpoint_dir=tmp_path / f"ck{tag}", sink=sink, dead_letter=DeadLetterSink(),
                     snapshot_every=900, checkpoint_every=1000, keep=10)
        eng.MICRO_BATCH = micro
        s = eng.run()
        runs.append((eng, sink, s))
    (e1, k1, s1), (e2, k2, s2) = runs
    assert s1["bad_records"] + s1["bad_records_at_source"] == 1 == s2["bad_records"] + s2["bad_records_at_source"]
    assert k1.items == k2.items and len(k2.items) == 2600
    assert _state(e1.model) == _state(e2.model)
    t1, t2 = e1.model._calibrator(), e2.model._calibrator()
    assert t1.n_observed == t2.n_observed > 1100 and t1.n_fits == t2.n_fits > 30
    assert e1.model.temperature.hex() == e2.model.temperature.hex() and e1.model.temperature != 1.0
    assert_same_checkpoints(e1, e2, more_than=2)
