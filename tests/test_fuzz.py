"""Property-based fuzzing of the streaming contract (the reliability issue).

Random streams of valid and invalid records -- labels and features arriving mid-stream, bad
values (NaN, inf, 1e308, 400-digit integers, strings, None), bad labels (None, bytes, lists,
sets), wrong shapes -- go through every estimator x learner x structure combination, through
the API and through the engine with a file source. Asserted for every stream:

* no exception escapes: through the API a record is learned or refused with a ValueError /
  TypeError that leaves the model unchanged (its feature and label indexes); through the engine
  every record is learned or dead-lettered (``examples_seen + n_bad`` = the records in the file);
* the weights stay finite;
* memory stays within ``MEMORY_BOUND`` bytes of Python allocations (tracemalloc) per stream;
* save / load round-trips (same predictions, same weights).

Bounded time: ``max_examples`` per combination and short streams (``deadline=None``: the first
call of a kernel compiles or loads it).
"""
import json
import math
import tracemalloc

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import streamssvm as ss  # noqa: E402
from streamssvm.connectors.base import DeadLetterSink, MemorySink  # noqa: E402
from streamssvm.connectors.files import open_source  # noqa: E402
from streamssvm.engine import Engine  # noqa: E402

MEMORY_BOUND = 64 << 20          # bytes of Python allocations per fuzzed stream (tracemalloc peak)
MAX_EXAMPLES = 6                 # hypothesis examples per combination
FUZZ = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=list(HealthCheck))

# ------------------------------------------------------------------ the combinations
TREE = {"cat": "animal", "dog": "animal", "car": "vehicle", "bus": "vehicle"}


def _learner(name):
    return {"BCFW": lambda: ss.learners.BCFW(lam=0.05, replay=1, seed=0, window=30),
            "SGD": lambda: ss.learners.SGD(lam=0.05, seed=0),
            "CuttingPlane": lambda: ss.learners.CuttingPlane(lam=0.05, window=30, max_iter=3, seed=0),
            "MEMOIR": lambda: ss.learners.MEMOIR(mips="exact", lam=1e-2, seed=0)}[name]()


COMBOS = ([("multiclass", lr, {}) for lr in ("BCFW", "SGD", "CuttingPlane")]
          + [("multilabel", lr, {}) for lr in ("BCFW", "SGD", "CuttingPlane")]
          + [("multilabel", lr, {"pairwise": True}) for lr in ("BCFW", "SGD")]
          + [("multilabel", lr, {"hierarchy": TREE}) for lr in ("BCFW", "SGD")]
          + [("sequence", lr, {}) for lr in ("BCFW", "SGD", "CuttingPlane")]
          + [("extreme", "MEMOIR", {})])


def _model(task, learner, kw):
    cls = {"multiclass": ss.MulticlassSSVM, "multilabel": ss.MultiLabelSSVM, "sequence": ss.SequenceTagger,
           "extreme": ss.ExtremeClassifier}[task]
    return cls(learner=_learner(learner), **kw)


def _id(c):
    return f"{c[0]}-{c[1]}" + "".join(f"-{k}" for k in c[2])


# ------------------------------------------------------------------ records
NAMES = [f"f{i}" for i in range(6)]
LABELS = ["a", "b", "c", 3, 4]
LEAVES = list(TREE)
good_value = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False) | st.integers(-5, 5)
bad_value = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e300, 10 ** 400, "1.0", None, [1.0]])
feature_name = st.sampled_from(NAMES) | st.text("xyz", min_size=1, max_size=3)   # new names mid-stream
bad_name = st.sampled_from([None, b"bytes", frozenset({1}), 1.5j])


@st.composite
def features(draw, bad):
    x = draw(st.dictionaries(feature_name, good_value, min_size=0, max_size=5))
    if bad:
        kind = draw(st.sampled_from(["value", "name"]))
        if kind == "value":
            x[draw(feature_name)] = draw(bad_value)
        else:
            x[draw(bad_name)] = 1.0
    return x


def _label(draw, task, bad):
    if bad:
        return draw(st.sampled_from([None, math.nan, b"b", ["a"], {"a"}, 10 ** 400, frozenset({"a"})]))
    if task == "extreme":
        return draw(st.sampled_from(LABELS) | st.text("pq", min_size=1, max_size=2))
    return draw(st.sampled_from(LABELS) | st.text("pq", min_size=1, max_size=2))


@st.composite
def record(draw, task, kw):
    """(x, y, is_valid): one record; an invalid one has exactly one bad part."""
    bad = draw(st.booleans()) and draw(st.booleans())   # ~1 in 4 records is bad
    part = draw(st.sampled_from(["x", "y"])) if bad else None
    if task == "sequence":
        n = draw(st.integers(1, 4))
        xs = [draw(features(bad=False)) for _ in range(n)]
        ys = [_label(draw, task, False) for _ in range(n)]
        if part == "x":
            xs[draw(st.integers(0, n - 1))] = draw(features(bad=True))
        elif part == "y":
            if draw(st.booleans()):
                ys.append("a")                       # length mismatch
            else:
                ys[0] = _label(draw, task, True)
        return xs, ys, not bad
    x = draw(features(bad=part == "x"))
    if task == "multilabel":
        labs = LEAVES if "hierarchy" in kw else LABELS
        keys = draw(st.lists(st.sampled_from(labs) | (st.nothing() if "hierarchy" in kw else st.text("pq", min_size=1, max_size=2)),
                             min_size=1, max_size=4, unique=True))
        y = {k: draw(st.booleans()) for k in keys}
        if part == "y":
            how = draw(st.sampled_from(["truth", "label", "many"] if kw.get("pairwise") else ["truth", "label"]))
            if how == "truth":
                y[keys[0]] = draw(st.sampled_from(["false", 0.5, {"a": 1}, 2]))
            elif how == "label":
                y[draw(st.sampled_from([None, math.nan, b"b", 10 ** 400, frozenset({"a"})]))] = True
            else:
                y.update({f"many{i}": True for i in range(20)})   # case 4: more labels than BCFW enumerates
        if "hierarchy" in kw and part == "y" and draw(st.booleans()):
            y["not-a-leaf"] = True
        return x, y, not bad
    y = _label(draw, task, part == "y")
    return x, y, not bad


def stream(task, kw, max_size=14):
    return st.lists(record(task, kw), min_size=1, max_size=max_size)


# ------------------------------------------------------------------ helpers
def _weights(model):
    lr = model._learner
    if lr is None:
        return []
    W = getattr(lr, "W", None)
    if W is not None:
        return [W.E, W.T, W.B]
    from streamssvm.estimators.base import _all_finite   # MEMOIR: every float array of the state
    st_ = lr.state()
    assert _all_finite(st_)
    return []


def _indexes(model):
    return (len(model._features.names), model._features.array_dim, list(model._labels.labels))


def _probe(task):
    if task == "sequence":
        return [[{"f0": 1.0}, {"f1": -1.0}], [{"f2": 0.5}]]
    return [{"f0": 1.0}, {"f1": -1.0, "f2": 0.5}, {}]


def _check_model(model, task, tmp_path):
    for a in _weights(model):
        assert np.isfinite(a).all()
    assert model.weights_finite()
    p = tmp_path / "m.ssvm"
    model.save(p)
    m2 = ss.load(p)
    assert type(m2) is type(model) and _indexes(m2) == _indexes(model)
    for x in _probe(task):
        assert m2.predict_one(x) == model.predict_one(x)
    for a, b in zip(_weights(model), _weights(m2)):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ through the API
@pytest.mark.parametrize("combo", COMBOS, ids=_id)
def test_api_streams(combo, tmp_path_factory):
    task, learner, kw = combo

    @FUZZ
    @given(recs=stream(task, kw))
    def run(recs):
        model = _model(task, learner, kw)
        tracemalloc.start()
        try:
            for x, y, valid in recs:
                before = _indexes(model)
                try:
                    model.predict_one(x)
                except (ValueError, TypeError):
                    pass
                try:
                    model.learn_one(x, y)
                except (ValueError, TypeError):
                    assert _indexes(model) == before, "a refused record changed the model"
                    continue
                assert valid or _accepted_ok(learner, kw, y), f"an invalid record was learned: {x!r} {y!r}"
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < MEMORY_BOUND, f"{peak} bytes"
        _check_model(model, task, tmp_path_factory.mktemp("api"))

    run()


def _accepted_ok(learner, kw, y):
    """Records the strategy marks invalid that a combination legitimately learns: 20 labels on
    a pairwise model learned by SGD (it solves the LP relaxation above 16 labels)."""
    return bool(kw.get("pairwise")) and learner == "SGD" and any(str(k).startswith("many") for k in y)


# ------------------------------------------------------------------ through the engine
def _dump(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    return json.dumps(v)


def _line(x, y):
    """A JSONL line of a record, or a raw bad line for the records JSON cannot hold."""
    try:
        return json.dumps({"x": x, "y": y}, allow_nan=True)
    except (TypeError, ValueError):
        return '{"x": ' + repr(x)[:50] + ', "y": 1}'   # not JSON: a source-level rejection


raw_bad_line = st.sampled_from(['{"x": {"f0": 1', "[" * 5000, "not json", '{"x": 5, "y": 1}', '{"y": 1}',
                                '{"x": {"f0": 1e999}, "y": "a"}', '{"x": {"f0": ' + "9" * 5000 + '}, "y": "a"}'])


@pytest.mark.parametrize("combo", COMBOS, ids=_id)
def test_engine_streams(combo, tmp_path_factory):
    task, learner, kw = combo

    @FUZZ
    @given(recs=stream(task, kw, max_size=12), raws=st.lists(raw_bad_line, max_size=3))
    def run(recs, raws):
        d = tmp_path_factory.mktemp("eng")
        lines = [_line(x, y) for x, y, _ in recs] + raws
        src = d / "s.jsonl"
        src.write_text("\n".join(lines) + "\n")
        dl = DeadLetterSink(MemorySink())
        eng = Engine(_model(task, learner, kw), open_source(str(src), dead_letter=dl), task=task,
                     checkpoint_dir=str(d / "ck"), checkpoint_every=5, snapshot_every=7, progress=False)
        tracemalloc.start()
        try:
            s = eng.run()   # nothing escapes
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert s["examples_seen"] + s["n_bad"] == len(lines), (s, dl.sink.items)
        assert dl.count == s["n_bad"]
        assert all(item["reason"] for item in dl.sink.items)
        assert peak < MEMORY_BOUND, f"{peak} bytes"
        if eng.model._learner is not None:
            _check_model(eng.model, task, d)
        # a resumed engine sees nothing new
        eng2 = Engine(_model(task, learner, kw), open_source(str(src), dead_letter=DeadLetterSink(MemorySink())),
                      task=task, checkpoint_dir=str(d / "ck"), progress=False)
        s2 = eng2.run()
        assert s2["new_examples"] == 0 and s2["n_bad"] == s["n_bad"]

    run()
