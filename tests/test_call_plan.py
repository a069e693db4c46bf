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
        lr._call_plan = lr._model_plan = lr._record_plan = None
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
    assert KB.Example._fields == ("tok_ptr", "fidx", "fval", "ytrue", "mark", "slot", "victim", "scale", "zc")
    assert KB.pack(KB.WeightsBundle(1, 2, 3)) == (1, 2, 3)
    assert KB.Arena._fields == ("Iar", "Far", "meta", "gest", "last_oracle", "lval", "alive", "pos", "n",
                                "tree", "tree_size", "cw", "csum", "layout", "moves")


# ---------------------------------------------------------------- the record path (predict_learn_one)
def _rows(n=700, seed=1):
    """numpy rows of a fixed width whose labels appear over time (a new label every 35 records)."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        yield rng.normal(size=6), int(rng.integers(0, 1 + i // 35))


def _plo_run(tmp_path, kept, make, records, events, dicts=False):
    m = make()
    preds, taken = [], 0
    for i, (x, y) in enumerate(records):
        if not kept:
            _drop(m)
        lr = m._learner
        before = None if lr is None else lr.n_learned
        preds.append(m.predict_learn_one(x, y))
        ev = events.get(i)
        if ev == "set_lam":
            m._learner.set_lam(0.5 * m._learner.effective_lam())
        elif ev == "load":
            path = tmp_path / f"r_{kept}_{i}.ssvm"
            m.save(path)
            m = est_base.load(path)
        elif ev == "clone":      # a deep copy (its plans dropped) continues the stream
            import copy
            m = copy.deepcopy(m)
        elif ev == "refine":
            m._learner.refine(1)
        taken += lr is not None and lr._record_plan is not None and before is not None
    lr = m._learner
    return preds, taken, lr.W.E.copy(), lr.W.T.copy(), lr.W.B.copy(), lr._Z.E.copy(), m.temperature


@pytest.mark.parametrize("make", [
    lambda: MulticlassSSVM(learner=BCFW(seed=0)),
    lambda: MulticlassSSVM(learner=BCFW(seed=0), scale=False),
    lambda: MulticlassSSVM(learner=BCFW(seed=0, lam=0.02)),
    lambda: MulticlassSSVM(learner=BCFW(seed=0, averaging=False)),
    lambda: MulticlassSSVM(learner=BCFW(seed=0, rescaling="slack")),
])
def test_record_plan_kept_matches_rebuilt(tmp_path, make):
    """predict_learn_one's record plan (BCFW._record_plan_for) and call plan kept across new labels,
    block-store growth (slot table and arenas grow past 64 blocks / their first size), a lambda
    change, a refine, a deep copy and a save / load mid-stream: the same predictions, weights,
    averages and temperature as with both plans dropped before every record."""
    events = {120: "set_lam", 250: "clone", 330: "refine", 420: "load"}
    a = _plo_run(tmp_path, True, make, _rows(), events)
    b = _plo_run(tmp_path, False, make, _rows(), events)
    assert a[1] > 500   # the record path (one kernel call) took most records
    assert a[0] == b[0]
    for u, v in zip(a[2:6], b[2:6]):
        assert u.shape == v.shape and np.array_equal(u, v)
    assert a[6] == b[6]


def test_record_plan_kept_matches_rebuilt_dicts(tmp_path):
    """The same on dict records whose features and labels appear over time (new names go the
    Python way, known ones the record path)."""
    make = lambda: MulticlassSSVM(learner=BCFW(seed=0))   # noqa: E731
    events = {200: "load", 300: "set_lam"}
    a = _plo_run(tmp_path, True, make, _stream(), events)
    b = _plo_run(tmp_path, False, make, _stream(), events)
    assert a[0] == b[0]
    for u, v in zip(a[2:6], b[2:6]):
        assert u.shape == v.shape and np.array_equal(u, v)


def test_record_plan_follows_the_model():
    """The record plan is rebuilt when the label count, the scratch buffers or the fixed lambda
    change, and is never copied."""
    import copy
    import pickle
    m = MulticlassSSVM(learner=BCFW(seed=0))
    rng = np.random.default_rng(0)
    for i in range(40):
        m.predict_learn_one(rng.normal(size=3), i % 2)
    lr = m._learner
    rp = lr._record_plan
    assert rp is not None and rp[3] == 2 and rp[0] is lr._bundles(1, 1.0)[3]
    for i in range(40):                       # a third label: K and the scratch (label capacity) change
        m.predict_learn_one(rng.normal(size=3), i % 3)
    rp2 = lr._record_plan
    assert rp2 is not rp and rp2[3] == 3 and rp2[0] is lr._bundles(1, 1.0)[3]
    assert rp2[4][0] is rp2[0] and rp2[4][2] == -1.0
    lr.set_lam(0.0005)
    m.predict_learn_one(rng.normal(size=3), 1)
    assert lr._record_plan[2] == 0.0005 and lr._record_plan[4][2] == 0.0005
    assert copy.deepcopy(m)._learner._record_plan is None
    assert pickle.loads(pickle.dumps(m))._learner._record_plan is None


@pytest.mark.parametrize("kind,kw", [("mc", {}), ("mc", {"pool_cap": 5, "avg": True}),
                                     ("chain", {"sparse": True}), ("chain", {"sparse": False, "pool_cap": 3})])
def test_reserve_row_is_reserve_of_one_row(kind, kw):
    """BlockStore.reserve_row(fidx) leaves the store as reserve(1, len(fidx), 1, 1, fidx) does (the
    learn_one path takes it for every one-token, one-label, unweighted example): dense and sparse
    rows, pools, averaging accumulators, one-token chains, through slot-table and arena growth and
    reused (freed) slots."""
    from streamssvm.blocks import BlockStore
    from streamssvm.structures import Chain, MultiClass
    rng = np.random.default_rng(0)
    make = (lambda: BlockStore(MultiClass() if kind == "mc" else Chain(), 4, capacity=1000, **kw))
    a, b = make(), make()
    for i in range(150):
        if i % 3:
            fidx = np.arange(0, 1 + int(rng.integers(1, 40)), dtype=np.int32)             # dense
        else:
            fidx = np.sort(rng.choice(500, size=5, replace=False)).astype(np.int32)      # sparse
        if i == 90:
            for st in (a, b):
                st.free.append(7)
        assert a.reserve(1, len(fidx), 1, 1, fidx) == b.reserve_row(fidx)
    for name in ("meta", "gest", "lval", "cw", "last_oracle", "birth", "pos"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for name in ("i_used", "f_used", "i_live", "f_live", "n_slots", "_seen", "max_L", "free"):
        assert getattr(a, name) == getattr(b, name), name
    assert list(a._order) == list(b._order) and a.Iar.shape == b.Iar.shape and a.Far.shape == b.Far.shape


@pytest.mark.parametrize("kind", ["sequence", "multilabel", "multiclass", "sequence_avg_off", "sequence_40_tags"])
def test_a_record_predicted_by_the_learn_kernel_is_labeled_as_predict_batch_labels_it(kind):
    """Once a BCFW learner has learned through ``learn_one_example``, a one-record ``predict``
    runs in that kernel (``bcfw.PREDICT``): the same labeling as ``predict_batch`` (the learner
    without a learn kernel to reuse), record after record, averaging on and off."""
    import copy
    from streamssvm import MultiLabelSSVM, SequenceTagger
    from streamssvm._kernels import bcfw as K
    rng = np.random.default_rng(3)
    if kind.startswith("sequence"):
        m = SequenceTagger(learner=BCFW(seed=0, averaging=kind != "sequence_avg_off"))
        tags = [f"t{i}" for i in range(40)] if kind == "sequence_40_tags" else ["D", "N", "V", "A"]   # 40: sparse Viterbi
        data = [([{f"w={rng.integers(12)}": 1.0, "b": float(rng.normal())} for _ in range(L)],
                 [tags[int(t)] for t in rng.integers(len(tags), size=L)]) for L in rng.integers(1, 6, size=60)]
    elif kind == "multilabel":
        m = MultiLabelSSVM(learner=BCFW(seed=0))
        data = [({f"f{j}": float(rng.normal()) for j in rng.integers(10, size=3)},
                 {"x": bool(rng.integers(2)), "y": bool(rng.integers(2)), "z": bool(rng.integers(2))})
                for _ in range(60)]
    else:
        m = MulticlassSSVM(learner=BCFW(seed=0))
        data = [({f"f{j}": float(rng.normal()) for j in rng.integers(10, size=3)}, int(rng.integers(4)))
                for _ in range(60)]
    calls = []
    real = K.learn_one_example

    class Spy:
        def __call__(self, *a):
            calls.append(a[6][5])
            return real(*a)

    try:
        K.learn_one_example = Spy()
        for x, y in data:
            twin = copy.deepcopy(m)   # no learn kernel used yet in the copy: predict_batch
            if twin._learner is not None:
                twin._learner._steps_example = None
            assert m.predict_one(x) == twin.predict_one(x)
            m.learn_one(x, y)
    finally:
        K.learn_one_example = real
    if kind != "multiclass":   # (multiclass records predict through predict_class)
        assert calls.count(K.PREDICT) > 40


def test_plan_follows_the_lambda_override_and_the_gram_rule():
    """The plan's key reads what ``_lam_fixed`` and ``_may_lack_gram`` read (``lam``,
    ``_lam_override``, the store's ``any_gram_free``), not their values: a distributed worker's
    lambda (``set_union``) and a store that starts holding Gram-free blocks still rebuild the
    StepConfig bundle, with the values those two give."""
    from streamssvm._kernels import bcfw as K
    m = MulticlassSSVM(learner=BCFW(seed=0))
    rng = np.random.default_rng(1)
    for i in range(30):
        m.predict_learn_one(rng.normal(size=4), i % 3)
    lr = m._learner
    cfg = lr._bundles(1, lr._g_full_now())[5]
    assert cfg[0] == lr.AUTO_LAM and lr._lam_fixed is None
    lr.set_union(0.02, lr.store.n)                  # one worker: lambda 0.02 itself
    cfg2 = lr._bundles(1, lr._g_full_now())[5]
    assert cfg2 is not cfg and cfg2[0] == lr._lam_fixed == 0.02
    assert lr._bundles(1, lr._g_full_now())[5] is cfg2   # kept while nothing changes
    lr.store.any_gram_free = True                   # as a Gram-free block written would leave it
    cfg3 = lr._bundles(1, lr._g_full_now())[5]
    assert cfg3 is not cfg2 and cfg3[-1] == K.gram_rule(lr._may_lack_gram()) != cfg2[-1]


def test_scratch_for_is_ensure_then_scratch():
    """``Workspace.scratch_for`` (the record path's one call) gives the bundle
    ``ensure(L, Kc).scratch(L, slack)`` gives: the kept one while the buffers are large enough,
    a new one when they grow or the label capacity changes, the slack table's with ``slack``."""
    from streamssvm.structures import Chain, MultiClass
    from streamssvm.workspace import Workspace
    ws = Workspace(MultiClass())
    a = ws.scratch_for(1, 8, False)
    assert a is ws.ensure(1, 8).scratch(1, False) and ws.scratch_for(1, 8, False) is a
    b = ws.scratch_for(1, 16, False)                 # another label capacity: new buffers
    assert b is not a and b[0].shape[1] == 16 and b is ws.ensure(1, 16).scratch(1, False)
    big = ws.scratch_for(ws.L_cap + 1, 16, False)    # longer labelings: grown
    assert big is not b and ws.L_cap >= big[0].shape[0] > b[0].shape[0]
    wc = Workspace(Chain())
    s = wc.scratch_for(5, 4, True)
    ref = wc.ensure(5, 4).scratch(5, True)
    assert s is not wc.scratch_for(5, 4, False) and s[6].shape == ref[6].shape and s[6].shape != (1, 1, 1)
