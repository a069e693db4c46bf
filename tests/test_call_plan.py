"""BCFW's per-model call plan (and the block store's memo of segment sizes) (the kernels' bundles kept between calls) never goes stale: a
stream learned with the plan kept is bit-identical to the same stream learned with the plan
dropped before every call, while the model grows (labels, features, capacity), is refined,
has its lambda set, and is saved and loaded mid-stream."""
import numpy as np
import pytest

from streamssvm.estimators import MulticlassSSVM, base as est_base
from streamssvm.learners import BCFW


def _drop(model):
    lr = model._learner
    if lr is not None:
        lr._call_plan = lr._model_plan = None
        lr.store._sizes.clear()   # the block store's memo of segment sizes


def _stream(n=600, seed=0):
    """dict records whose features and labels appear over time."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        d = 3 + i // 50                       # one more feature every 50 records
        x = {f"f{j}": float(v) for j, v in enumerate(rng.normal(size=d))}
        y = int(rng.integers(0, 1 + i // 40))   # one more label every 40 records
        yield x, y


def _run(tmp_path, kept, learner_kw, events):
    m = MulticlassSSVM(learner=BCFW(seed=0, **learner_kw))
    preds = []
    for i, (x, y) in enumerate(_stream()):
        if not kept:
            _drop(m)
        preds.append(m.predict_one(x))
        if not kept:
            _drop(m)
        m.learn_one(x, y)
        ev = events.get(i)
        if ev == "refine":
            m._learner.refine(1)
        elif ev == "set_lam":
            m._learner.set_lam(0.5 * m._learner.effective_lam())
        elif ev == "load":
            path = tmp_path / f"m_{kept}_{i}.ssvm"
            m.save(path)
            m = est_base.load(path)
    lr = m._learner
    return preds, lr.W.E.copy(), lr.W.T.copy(), lr.W.B.copy()


@pytest.mark.parametrize("learner_kw", [{}, {"averaging": False}, {"cache": True}, {"step": "pairwise"}])
def test_plan_kept_matches_plan_rebuilt(tmp_path, learner_kw):
    events = {150: "refine", 260: "set_lam", 400: "load", 480: "refine"}
    a = _run(tmp_path, True, learner_kw, events)
    b = _run(tmp_path, False, learner_kw, events)
    assert a[0] == b[0]
    for u, v in zip(a[1:], b[1:]):
        assert u.shape == v.shape and np.array_equal(u, v)


def test_plan_rebuilt_when_weights_grow():
    m = MulticlassSSVM(learner=BCFW(seed=0))
    m.learn_one({"a": 1.0}, 0)
    m.learn_one({"a": -1.0}, 1)
    plan = m._learner._call_plan
    assert plan is not None
    E0 = m._learner.W.E
    for k in range(2, 40):                    # new labels and features: capacity grows
        m.learn_one({f"b{k}": 1.0, "a": 0.5}, k)
    assert m._learner.W.E is not E0
    assert m._learner._call_plan[2][0] is m._learner.W.E   # the weights bundle holds the grown E


def test_plan_not_copied(tmp_path):
    import copy
    import pickle
    m = MulticlassSSVM(learner=BCFW(seed=0))
    for i in range(20):
        m.learn_one({"a": float(i % 3), "b": 1.0}, i % 3)
    assert m._learner._call_plan is not None
    assert copy.deepcopy(m)._learner._call_plan is None
    assert pickle.loads(pickle.dumps(m))._learner._call_plan is None


def test_plain_tuple_field_order():
    """learners/bcfw.py builds these bundles as plain tuples on the per-record path."""
    from streamssvm._kernels import bundles as KB
    assert KB.WeightsBundle._fields == ("E", "T", "B")
    assert KB.Batch._fields == ("ex_tok", "tok_ptr", "fidx", "fval", "lab_ptr")
    assert KB.Example._fields == ("tok_ptr", "fidx", "fval", "ytrue", "mark", "slot", "victim")
    assert KB.pack(KB.WeightsBundle(1, 2, 3)) == (1, 2, 3)
    assert KB.Arena._fields == ("Iar", "Far", "meta", "gest", "last_oracle", "lval", "alive", "pos", "n",
                                "tree", "tree_size", "cw", "csum")
