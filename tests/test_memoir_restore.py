"""MEMOIR model files are checked index by index on restore (issue 10), and a new class's
first example is learned at once (issue 12 item 9)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.checkpoint import CheckpointError, load_state, save_state
from streamssvm.estimators.base import MODEL_KIND


def _model(kind, average="linear"):
    m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(lam=1e-3, mips="exact", averaging=average != "none"))
    rng = np.random.default_rng(0)
    for i in range(40):
        c = i % 4
        if kind == "sparse":
            m.learn_one({f"w{c}": 1.0, f"n{i % 5}": 0.5}, c)
        else:
            x = np.zeros(6)
            x[c] = 1.0
            x[4 + i % 2] = 0.5 + 0.1 * rng.random()
            m.learn_one(x, c)
    assert m._learner.kind == kind
    return m


def _craft(st, case):
    from streamssvm.saved_state import unpack_rows
    lr = st["learner"]
    # crafted in the former layout (a list per example; still read): writable copies
    lr["recent"] = [{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in r.items()}
                    for r in unpack_rows(lr["recent"], "window")]
    rows = lr["rows"]
    if case == "sparse_feature":
        rows["feat"][0] = 10**8
    elif case == "sparse_class":
        rows["cls"][0] = 10**6
    elif case == "sparse_negative_class":
        rows["cls"][0] = -5
    elif case == "sparse_repeated_entry":
        rows["feat"][1], rows["cls"][1] = rows["feat"][0], rows["cls"][0]
    elif case == "sparse_rows_count":
        rows["n_rows"] = 10**6
    elif case == "sparse_class_beyond_its_rows":
        rows["n_rows"] = 2
        rows["cls"][:] = 3
    elif case == "dense_shape":
        rows["V"] = np.vstack([rows["V"], rows["V"]])     # more rows than the learner has
    elif case == "dense_flat":
        rows["V"] = rows["V"].ravel()
    elif case == "dense_nan":
        rows["V"][0, 0] = np.nan
    elif case == "avg_shape":
        if lr["kind"] == "dense":
            lr["avg"]["V"] = np.zeros((lr["n_rows"] + 5, 3))     # more rows than the learner has
        else:
            lr["avg"]["cls"] = np.zeros((1, 1))
    elif case == "window_feature":
        lr["recent"][-1]["idx"] = np.array([10**8])
        lr["recent"][-1]["val"] = np.array([1.0])
    elif case == "window_negative_feature":
        lr["recent"][-1]["idx"][0] = -3
    elif case == "window_class":
        lr["recent"][-1]["c"] = 10**6
    elif case == "window_negative_class":
        lr["recent"][-1]["c"] = -1
    elif case == "window_shapes":
        lr["recent"][-1]["val"] = np.ones(7)
    elif case == "flat_feature":
        lr["flat"] = [{"idx": np.array([10**8]), "val": np.array([1.0]), "c": 0}]
    elif case == "more_rows_than_labels":
        lr["n_rows"] = 10**4
    elif case == "acc":
        lr["acc"] = float("nan")
    elif case == "in_batch":
        lr["in_batch"] = -3
    elif case == "kind":
        lr["kind"] = "dense" if lr["kind"] == "sparse" else "sparse"
    elif case == "features_wider":
        st["features"]["names"] = st["features"]["names"] + [["s", f"extra{i}"] for i in range(5000)]
    else:
        raise AssertionError(case)


_SPARSE = ["sparse_feature", "sparse_class", "sparse_negative_class", "sparse_repeated_entry",
           "sparse_rows_count", "sparse_class_beyond_its_rows", "avg_shape", "window_feature", "window_negative_feature", "window_class",
           "window_negative_class", "window_shapes", "flat_feature", "more_rows_than_labels", "acc",
           "in_batch", "kind", "features_wider"]
_DENSE = ["dense_shape", "dense_flat", "dense_nan", "avg_shape", "window_feature", "window_negative_feature",
          "window_class", "window_negative_class", "more_rows_than_labels", "kind"]

# the crafted file is loaded and used (certificate, predictions, a step) in a child process, so
# that an out-of-bounds read or write in a numba kernel shows as a crash, not a hang of the suite
_CHILD = r'''
import sys, numpy as np, streamssvm as ss
from streamssvm import checkpoint
p, kind = sys.argv[1], sys.argv[2]
try:
    m = ss.load(p)
except checkpoint.CheckpointError as e:
    print("REFUSED", e)
    sys.exit(0)
c = m.certificate()
if kind == "sparse":
    x = {"extra4999": 1.0, "w1": 1.0}
else:
    x = np.ones(6)
out = [m.predict_one(x) for _ in range(3)]
m.learn_one(x, 1)
m.refine(1)
print("LOADED", c.primal, out)
'''


def _run_child(p, kind):
    root = os.path.dirname(os.path.dirname(os.path.abspath(ss.__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", _CHILD, str(p), kind], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.parametrize("kind,case", [("sparse", c) for c in _SPARSE] + [("dense", c) for c in _DENSE])
def test_a_crafted_memoir_model_is_refused(tmp_path, kind, case):
    """Out-of-range indices, wrong shapes, negative ids, counts beyond the labels: refused with
    ``CheckpointError`` on load (before: loaded, then crashed, read out of bounds or gave
    nonsense)."""
    m = _model(kind)
    p = tmp_path / "m.ssvm"
    m.save(p)
    st, meta = load_state(p, kind=MODEL_KIND)
    _craft(st, case)
    save_state(p, st, kind=MODEL_KIND, meta=meta)   # consistent checksums
    if case in ("sparse_feature", "sparse_class", "sparse_class_beyond_its_rows", "window_feature", "flat_feature", "features_wider",
                "window_negative_feature"):
        r = _run_child(p, kind)
        assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
        assert r.stdout.startswith("REFUSED"), r.stdout
    else:
        with pytest.raises(CheckpointError):
            ss.load(p)


@pytest.mark.parametrize("kind", ["sparse", "dense"])
@pytest.mark.parametrize("average", ["linear", "none"])
def test_a_valid_memoir_model_still_loads(tmp_path, kind, average):
    """The checks refuse nothing a model writes (flat examples included)."""
    m = _model(kind, average)
    p = tmp_path / "m.ssvm"
    m.save(p)
    m2 = ss.load(p)
    xs = ([{f"w{c}": 1.0} for c in range(4)] if kind == "sparse" else list(np.eye(6)[:4]))
    assert [m2.predict_one(x) for x in xs] == [m.predict_one(x) for x in xs]
    # a file saved while only one class had been seen keeps its flat example
    one = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact"))
    one.learn_one({"a": 1.0} if kind == "sparse" else np.array([1.0, 0.0]), "x")
    one.save(tmp_path / "one.ssvm")
    back = ss.load(tmp_path / "one.ssvm")
    assert len(back._learner._flat) == 1
    back.learn_one({"b": 1.0} if kind == "sparse" else np.array([0.0, 1.0]), "y")
    assert back.predict_one({"a": 1.0} if kind == "sparse" else np.array([1.0, 0.0])) == "x"


# ------------------------------------------------------------------ issue 12 item 9
@pytest.mark.parametrize("mips", ["exact", "hnsw", "lsh"])
@pytest.mark.parametrize("loss", [None, "callable"])
def test_new_class_first_example_is_learned(mips, loss):
    """The first example of the first class is learned with no competitor (hinge 0: no other
    class exists); it is stepped when the second class arrives, so it is predicted at once."""
    if mips == "hnsw":
        pytest.importorskip("hnswlib")
    kw = {"loss": (lambda a, b: float(a != b))} if loss else {}
    m = ss.ExtremeClassifier(mips=mips, **kw)
    m.learn_one({"a": 1}, "x")
    m.learn_one({"b": 1}, "y")
    assert m.predict_one({"a": 1}) == "x"
    assert m.predict_one({"b": 1}) == "y"
    assert m._learner.n_revisit_steps == 1 and not m._learner._flat


def test_new_class_first_example_dense_and_last_iterate():
    for average in ("linear", "none"):
        m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(averaging=average != "none"))
        m.learn_one(np.array([1.0, 0.0, 0.2]), "x")
        m.learn_one(np.array([0.0, 1.0, 0.2]), "y")
        assert m.predict_one(np.array([1.0, 0.0, 0.2])) == "x"


def test_flat_examples_are_bounded_and_stepped_once():
    """Many examples of a single class are all flat (at most FLAT_MAX kept); each gets one step
    when the second class arrives, and none after."""
    from streamssvm.learners.memoir import FLAT_MAX
    m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact"))
    for i in range(FLAT_MAX + 50):
        m.learn_one({"a": 1.0, f"n{i % 3}": 0.5}, "x")
    lr = m._learner
    assert len(lr._flat) == FLAT_MAX and lr.n_updates == 0
    m.learn_one({"b": 1.0}, "y")
    assert lr.n_revisit_steps == FLAT_MAX and not lr._flat
    m.learn_one({"c": 1.0}, "z")         # a third class: nothing left to revisit
    assert lr.n_revisit_steps == FLAT_MAX
    assert m.predict_one({"a": 1.0}) == "x"


def test_declared_labels_have_no_flat_examples():
    """With labels declared up front every example has competitors (zero rows): nothing is
    kept aside."""
    m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact"), labels=["x", "y"])
    m.learn_one({"a": 1}, "x")
    assert not m._learner._flat and m._learner.n_updates == 1
    assert m.predict_one({"a": 1}) == "x"


def test_fewer_stored_rows_than_classes_grow_with_zero_rows(tmp_path):
    """Parameter mixing installs class rows that may be fewer than the learner's classes: the
    store grows with zero rows (accepted, and safe)."""
    m = _model("dense")
    p = tmp_path / "m.ssvm"
    m.save(p)
    st, meta = load_state(p, kind=MODEL_KIND)
    st["learner"]["rows"]["V"] = st["learner"]["rows"]["V"][:2]
    save_state(p, st, kind=MODEL_KIND, meta=meta)
    m2 = ss.load(p)
    np.testing.assert_array_equal(m2._learner.store.to_dense()[2:], 0.0)
    assert m2.predict_one(np.eye(6)[0]) in (0, 1, 2, 3)
