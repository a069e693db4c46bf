"""Micro-batches at a full FIFO store (``BlockStore.plan_evicting_rows``): once a BCFW window is
full, each record evicts the oldest block, and ``predict_learn_each`` still takes the records
in one kernel call per run (the kernel evicts, writes the planned meta rows when each record
arrives, and restarts averaging where ``evicted_average="restart"`` does), bit-identical to
``predict_one`` then ``learn_one`` record by record. Before, a full store ended every run at
its first record: past the window (100,000 records by default) the engine fell back to one
record at a time, 5-8x slower per record (OCR-like rows: ~15 -> 80-130 us)."""
import pickle

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.blocks import BlockStore


def _stream(n=700, d=12, K=7, seed=0):
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(K, d)) * 2.0
    y = rng.integers(0, K, n)
    y[:K] = np.arange(K)
    X = C[y] + rng.normal(size=(n, d))
    X[rng.random(X.shape) < 0.2] = 0.0   # rows of different lengths (segment sizes)
    return X, [int(c) for c in y]


def _model(kw, scale):
    return ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=2, **kw), scale=scale)


CASES = [
    {"window": 120},                                   # evicted_average="restart": a restart per record
    {"window": 120, "evicted_average": "keep"},        # blocks keep accumulators: no restart
    {"window": 120, "averaging": False},
    {"window": 120, "gap_every": 0.5},                 # full gap passes due inside the runs
    {"capacity": 90, "replay": 2},
]


@pytest.mark.parametrize("kw", CASES, ids=["restart", "keep", "no-avg", "gap-passes", "capacity"])
@pytest.mark.parametrize("rows", ["array", "dict"])
@pytest.mark.parametrize("scale", [True, False], ids=["scaled", "raw"])
def test_runs_at_a_full_store_equal_record_by_record(kw, rows, scale):
    X, y = _stream()
    xs = list(X) if rows == "array" else [{f"f{j}": float(v) for j, v in enumerate(r) if v} for r in X]
    a, b = _model(kw, scale), _model(kw, scale)
    pa = []
    for x, c in zip(xs, y):
        pa.append(a.predict_one(x))
        a.learn_one(x, c)
    pb = []
    for s in range(0, len(y), 64):
        out = b.predict_learn_each(xs[s:s + 64], y[s:s + 64])
        assert all(ok for ok, _ in out)
        pb += [p for _, p in out]
    assert pa == pb
    assert pickle.dumps(a.state()) == pickle.dumps(b.state())
    st = b._learner.store
    assert st.evicted > 400 and st.n == a._learner.store.n


def test_the_kernel_takes_the_records_of_a_full_store(monkeypatch):
    """Past the window, nearly every record goes through a planned run (before: none)."""
    taken = []
    real = BlockStore.plan_evicting_rows

    def spy(self, *args, **kw):
        plan = real(self, *args, **kw)
        taken.append(plan[0])
        return plan
    monkeypatch.setattr(BlockStore, "plan_evicting_rows", spy)
    X, y = _stream(n=1500)
    m = _model({"window": 200}, True)
    for s in range(0, len(y), 100):
        m.predict_learn_each(list(X[s:s + 100]), y[s:s + 100])
    assert m._learner.store.evicted == 1300
    assert sum(taken) >= 0.95 * 1300, (sum(taken), len(taken))


def test_a_plan_changes_nothing_until_admitted():
    """plan_evicting_rows only reads the store; the kernel and admit_planned_rows apply it."""
    X, y = _stream(n=300)
    m = _model({"window": 100}, False)
    m.predict_learn_each(list(X[:200]), y[:200])
    st = m._learner.store
    before = pickle.dumps(st.state()) if hasattr(st, "state") else None
    tp, fidx, _ = m._features.dense_csr(X[200:260], grow=False)
    plan = st.plan_evicting_rows(tp, fidx, 60, False)
    c, slots, victims = plan[0], plan[1], plan[2]
    assert c > 0 and (victims >= 0).all() and len(set(slots.tolist())) <= c
    if before is not None:
        assert pickle.dumps(st.state()) == before


@pytest.mark.parametrize("averaging,due,not_averaging", [(False, None, False), (True, None, False),
                                                         (True, None, True), (False, (500, 2, 1.0), False),
                                                         (False, (10, 2, 0.5), False)])
def test_vector_plan_equals_the_row_by_row_plan(averaging, due, not_averaging, monkeypatch):
    """_plan_full (a store full from the start) gives the row-by-row loop's plan: slots,
    victims, meta rows, cut, free list and sizes."""
    X, y = _stream(n=900, seed=3)
    for kw in ({"window": 150}, {"window": 150, "evicted_average": "keep"}):
        m = _model(kw, False)
        m.predict_learn_each(list(X[:400]), y[:400])
        st = m._learner.store
        for a, k in ((400, 64), (464, 200), (664, 150)):
            tp, fidx, _ = m._features.dense_csr(X[a:a + k], grow=False)
            fast = st.plan_evicting_rows(tp, fidx, k, averaging, due, not_averaging)
            monkeypatch.setattr(BlockStore, "VECTOR_PLANS", False)
            slow = st.plan_evicting_rows(tp, fidx, k, averaging, due, not_averaging)
            monkeypatch.setattr(BlockStore, "VECTOR_PLANS", True)
            assert fast[0] == slow[0] > 0
            for u, v in zip(fast[1:4], slow[1:4]):
                assert u.tolist() == v.tolist()
            assert fast[4] == slow[4]
