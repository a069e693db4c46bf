"""Example weights: ``learn_one(x, y, w)`` / ``learn_many(X, Y, w=...)`` on every estimator.

The weight c_i >= 0 of an example is its importance in the objective
lam/2 ||w||^2 + (1 / sum_i c_i) sum_i c_i H_i(w); normalized by the total weight, a weight of 2
is the example learned twice (checked here on the exact optimum of a tiny problem). w=0 leaves
every model bit-identical; a bad weight is refused before anything changes; a learner that does
not take weights refuses one other than 0 and 1 (no silent ignore).
"""
from __future__ import annotations

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.errors import CheckpointError
from streamssvm.estimators.base import check_weight, from_state
from streamssvm.learners import BCFW, BMRM, GDMM, MEMOIR, SGD, CuttingPlane, Pragam


def _same(a, b):
    """Nested states equal to the bit (arrays: same dtype, shape and bytes)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and a.tobytes() == b.tobytes())
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return type(a) is type(b) and a == b


def _learner(cls):
    return cls(**next(iter(cls._unit_test_params())))


def _mc_stream(n=12, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        y = int(rng.integers(3))
        out.append(({"f": y + 0.3 * rng.normal(), "g": 1.0, f"h{i % 4}": 0.5}, "abc"[y]))
    return out


def _setups():
    """(name, make model, stream of (x, y), a record with a new feature and a new label)."""
    mc = _mc_stream()
    ml = [(np.array([float(i % 2), float(1 - i % 2)]), {"red": bool(i % 2), "blue": not i % 2}) for i in range(8)]
    seq = [([{"w=the": 1.0}, {f"w={'dog' if i % 2 else 'cat'}": 1.0}], ["DET", "NOUN"]) for i in range(6)]
    out = []
    for cls in (BCFW, SGD, CuttingPlane, BMRM, Pragam):
        out.append((f"multiclass-{cls.__name__}", lambda cls=cls: ss.MulticlassSSVM(learner=_learner(cls)),
                    mc, ({"new": 1.0}, "zz")))
    for cls in (BCFW, SGD, CuttingPlane, BMRM, GDMM):
        out.append((f"multilabel-{cls.__name__}",
                    lambda cls=cls: ss.MultiLabelSSVM(learner=_learner(cls), pairwise=cls is GDMM),
                    ml, (np.array([1.0, 2.0]), {"red": True, "green": True})))
    for cls in (BCFW, SGD, GDMM):
        out.append((f"sequence-{cls.__name__}", lambda cls=cls: ss.SequenceTagger(learner=_learner(cls)),
                    seq, ([{"w=new": 1.0}, {"w=the": 1.0}], ["NEW", "DET"])))
    out.append(("extreme-MEMOIR", lambda: ss.ExtremeClassifier(learner=_learner(MEMOIR)),
                [(np.eye(3)[i % 3], "abc"[i % 3]) for i in range(9)], (np.ones(3), "zz")))
    return out


SETUPS = _setups()


@pytest.mark.parametrize("name,make,stream,novel", SETUPS, ids=[s[0] for s in SETUPS])
def test_zero_weight_leaves_every_model_bit_identical(name, make, stream, novel):
    m = make()
    for x, y in stream:
        m.learn_one(x, y)
    before = m.state()
    m.learn_one(*novel, w=0)            # new feature names and a new label: not even registered
    m.learn_one(*stream[0], w=0.0)
    m.learn_many([x for x, _ in stream[:3]], [y for _, y in stream[:3]], w=[0, 0, 0])
    assert _same(m.state(), before)
    # a bad record with w=0 is still refused
    with pytest.raises((TypeError, ValueError)):
        x0 = stream[0][0]
        bad = (np.full(len(x0), np.nan) if isinstance(x0, np.ndarray) else
               {"f": float("nan")} if isinstance(x0, dict) else [{"f": float("nan")}])
        m.learn_one(bad, stream[0][1], w=0)
    assert _same(m.state(), before)


@pytest.mark.parametrize("name,make,stream,novel", SETUPS, ids=[s[0] for s in SETUPS])
def test_bad_weights_are_refused_before_anything_changes(name, make, stream, novel):
    m = make()
    for x, y in stream[:4]:
        m.learn_one(x, y)
    before = m.state()
    for w in (-1.0, float("nan"), float("inf"), "2", True, None):
        with pytest.raises((TypeError, ValueError)):
            m.learn_one(*novel, w=w)
    with pytest.raises(ValueError, match="row 1"):
        m.learn_many([novel[0], stream[0][0]], [novel[1], stream[0][1]], w=[1.0, -2.0])
    with pytest.raises(ValueError, match="weights"):
        m.learn_many([novel[0], stream[0][0]], [novel[1], stream[0][1]], w=[1.0])
    assert _same(m.state(), before)


_WEIGHTED = ("-SGD", "-BCFW", "-CuttingPlane", "-BMRM", "-Pragam", "-MEMOIR", "-GDMM")   # the learners that take example weights


class _UnweightedGDMM(GDMM):
    """GDMM with its weights switched off (every learner takes weights now)."""
    example_weights = False


_SEQ = next(s for s in SETUPS if s[0] == "sequence-GDMM")
_UNWEIGHTED = [s for s in SETUPS if not s[0].endswith(_WEIGHTED)] or \
    [("sequence-_UnweightedGDMM", lambda: ss.SequenceTagger(learner=_learner(_UnweightedGDMM)), *_SEQ[2:])]


@pytest.mark.parametrize("name,make,stream,novel", _UNWEIGHTED, ids=[s[0] for s in _UNWEIGHTED])
def test_learners_without_weights_refuse_one_clearly(name, make, stream, novel):
    m = make()
    for x, y in stream[:4]:
        m.learn_one(x, y)
    before = m.state()
    lname = type(m.learner).__name__
    with pytest.raises(NotImplementedError, match=f"{lname} does not take example weights"):
        m.learn_one(*novel, w=2.0)
    with pytest.raises(NotImplementedError, match=lname):
        m.learn_many([stream[0][0], novel[0]], [stream[0][1], novel[1]], w=[1.0, 0.5])
    assert _same(m.state(), before)
    # weights of 1 (and 0) are the unweighted path with every learner
    m2 = make()
    for x, y in stream[:4]:
        m2.learn_one(x, y, w=1)
    m2.learn_many([stream[0][0]], [stream[0][1]], w=[0.0])
    assert _same(m2.state(), before)


def test_check_weight():
    assert check_weight(3) == 3.0 and check_weight(np.float32(0.5)) == 0.5 and check_weight(0) == 0.0
    for w in (-1e-300, float("nan"), float("-inf"), float("inf")):
        with pytest.raises(ValueError):
            check_weight(w)
    for w in (True, "1", None, [1.0]):
        with pytest.raises(TypeError):
            check_weight(w)


# ---------------------------------------------------------------------------------------- SGD
def _sgd(**kw):
    return ss.MulticlassSSVM(labels=["a", "b", "c"], learner=SGD(**{"lam": 0.1, "seed": 0, **kw}))


def test_sgd_unit_weights_are_the_unweighted_run():
    data = _mc_stream(30, seed=1)
    a, b, c = _sgd(), _sgd(), _sgd()
    for x, y in data:
        a.learn_one(x, y)
        b.learn_one(x, y, w=1)
    c.learn_many([x for x, _ in data], [y for _, y in data], w=np.ones(len(data)))
    d = _sgd()
    d.learn_many([x for x, _ in data], [y for _, y in data])
    assert _same(a.state(), b.state())
    assert _same(c.state(), d.state())


def test_sgd_weighted_batch_is_weighted_records_one_by_one():
    data = _mc_stream(20, seed=2)
    ws = np.random.default_rng(0).uniform(0.0, 3.0, len(data))
    ws[3] = 0.0
    a, b = _sgd(), _sgd()
    for (x, y), c in zip(data, ws):
        a.learn_one(x, y, w=c)
    b.learn_many([x for x, _ in data], [y for _, y in data], w=ws)
    assert _same(a.state(), b.state())
    assert a.n_blocks == len(data) - 1


def _dense_problem():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(8, 2))
    y = np.array([0, 1, 0, 1, 1, 0, 1, 0])
    X[:, 0] += 1.2 * (2 * y - 1)
    X[2] = [-0.8, 0.3]    # a point on the wrong side: its hinge is active at the optimum
    return X, y


def _weighted_primal(W, X, y, c, lam):
    """lam/2 ||W||^2 + (1 / sum c) sum_i c_i max_k (Delta(k, y_i) + s_k - s_{y_i}) of dense
    multiclass weights W (row 0 the bias feature), computed independently of the learners."""
    S = W[0] + X @ W[1:]
    H = np.max(S + (np.arange(W.shape[1])[None, :] != y[:, None]) - S[np.arange(len(y)), y][:, None], axis=1)
    return 0.5 * lam * float(np.sum(W * W)) + float(np.dot(c, H)) / float(np.sum(c))


def _optimum(X, y, c, lam, K=2):
    """The exact optimum of the weighted primal (epigraph QP, SLSQP)."""
    opt = pytest.importorskip("scipy.optimize")
    n, d = X.shape
    nw = (d + 1) * K
    Z = np.hstack([np.ones((n, 1)), X])

    def f(v):
        W = v[:nw]
        return 0.5 * lam * float(W @ W) + float(np.dot(c, v[nw:])) / float(np.sum(c))

    def g(v):
        return np.concatenate([lam * v[:nw], c / np.sum(c)])

    cons = []
    for i in range(n):
        for k in range(K):
            def h(v, i=i, k=k):
                W = v[:nw].reshape(d + 1, K)
                return v[nw + i] - (float(k != y[i]) + Z[i] @ (W[:, k] - W[:, y[i]]))
            cons.append({"type": "ineq", "fun": h})
    r = opt.minimize(f, np.zeros(nw + n), jac=g, constraints=cons, method="SLSQP",
                     options={"maxiter": 500, "ftol": 1e-12})
    assert r.success, r.message
    return r.fun, r.x[:nw].reshape(d + 1, K)


def test_weight_two_is_the_example_twice_at_the_optimum():
    """The objective normalized by sum_i c_i: weight 2 on example j and example j held twice
    have the same optimum (exact, by scipy), and the weighted SGD certificate's primal is the
    independent weighted primal of its weights."""
    X, y = _dense_problem()
    lam = 0.1
    c = np.ones(len(y))
    c[2] = 2.0
    p_w, W_w = _optimum(X, y, c, lam)
    Xd, yd = np.vstack([X, X[2:3]]), np.concatenate([y, y[2:3]])
    p_d, W_d = _optimum(Xd, yd, np.ones(len(yd)), lam)
    assert abs(p_w - p_d) <= 1e-7 * max(1.0, abs(p_w))
    assert np.allclose(W_w, W_d, atol=1e-4)

    m = ss.MulticlassSSVM(labels=[0, 1], scale=False, learner=SGD(lam=lam, seed=0))
    m.learn_many(X, list(y), w=c)
    m.refine(400)
    cert = m.certificate()
    W = m.bound_learner.emission_weights()
    assert abs(cert.primal - _weighted_primal(W, X, y, c, lam)) <= 1e-9 * max(1.0, cert.primal)
    assert cert.primal >= p_w - 1e-7
    assert cert.primal - p_w <= 1e-2 * p_w     # SGD (no gap) reaches the weighted optimum, slowly

    twice = ss.MulticlassSSVM(labels=[0, 1], scale=False, learner=SGD(lam=lam, seed=0))
    twice.learn_many(Xd, list(yd))
    twice.refine(400)
    Wt = twice.bound_learner.emission_weights()
    # both runs' weights are near the one optimum, measured by the same (weighted) objective
    assert _weighted_primal(Wt, X, y, c, lam) - p_w <= 1e-2 * p_w


def test_sgd_weights_are_saved_and_old_files_load_with_weight_one(tmp_path):
    data = _mc_stream(10, seed=4)
    m = _sgd()
    for i, (x, y) in enumerate(data):
        m.learn_one(x, y, w=0.5 + i)
    p = tmp_path / "m.ssvm"
    m.save(p)
    m2 = ss.load(p)
    assert m2.bound_learner._weights == m.bound_learner._weights
    x, y = data[0]
    m.learn_one(x, y, w=3.0)
    m2.learn_one(x, y, w=3.0)
    assert _same(m.state(), m2.state())
    # a file from before example weights: every held example weighs 1
    u = _sgd()
    for x, y in data:
        u.learn_one(x, y)
    st = u.state()
    del st["learner"]["weights"], st["learner"]["lmax_w"]
    old = from_state(st)
    assert old.bound_learner._weights == [1.0] * len(data)
    assert _same(old.state(), u.state())
    for bad in (np.full(len(data), -1.0), np.full(len(data), np.nan), np.ones(len(data) + 1)):
        st = u.state()
        st["learner"]["weights"] = bad
        with pytest.raises(CheckpointError):
            from_state(st)


@pytest.mark.parametrize("make", [
    lambda: ss.MultiLabelSSVM(learner=SGD(lam=0.1, seed=0)),
    lambda: ss.SequenceTagger(learner=SGD(lam=0.1, seed=0)),
], ids=["multilabel", "sequence"])
def test_sgd_weights_on_other_estimators(make):
    if "Sequence" in type(make()).__name__:
        data = [([{"w=the": 1.0}, {f"w={i % 3}": 1.0}], ["DET", "NOUN" if i % 2 else "VERB"]) for i in range(8)]
    else:
        data = [(np.array([float(i % 2), float(i % 3)]), {"red": bool(i % 2), "blue": not i % 3}) for i in range(8)]
    ws = [0.5, 2.0, 0.0, 1.0, 3.0, 1.5, 0.25, 1.0]
    a, b = make(), make()
    for (x, y), c in zip(data, ws):
        a.learn_one(x, y, w=c)
    b.learn_many([x for x, _ in data], [y for _, y in data], w=ws)
    assert _same(a.state(), b.state())
    assert a.n_blocks == 7
    cert = a.certificate()
    assert np.isfinite(cert.primal) and cert.gap == float("inf") and "weighted" in cert.note


# ------------------------------------------------------------------------- sources, step, CLI
def _weighted_jsonl(path, n=40, seed=5, bad=True):
    rows = []
    for i, (x, y) in enumerate(_mc_stream(n, seed)):
        rows.append({"x": x, "y": y, "w": [1.0, 0.0, 2.5, 0.5][i % 4]})
    if bad:
        rows += [{"x": {"f": 1.0}, "y": "a", "w": -1.0}, {"x": {"f": 1.0}, "y": "a", "w": "heavy"},
                 {"x": {"f": 1.0}, "y": "a"}, {"x": {"f": 1.0}, "y": "a", "w": True}]
    from streamssvm.connectors.files import write_jsonl
    write_jsonl(path, rows)
    return rows


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_file_sources_read_the_weight_field_and_dead_letter_bad_weights(tmp_path):
    from streamssvm.connectors.base import DeadLetterSink
    from streamssvm.connectors.files import open_source
    p = tmp_path / "w.jsonl"
    rows = _weighted_jsonl(p)
    dl = DeadLetterSink()
    recs = list(open_source(f"file://{p}?weight_field=w", dead_letter=dl))
    assert [r.w for r in recs] == [r["w"] for r in rows[:40]]
    assert dl.count == 4 and len(recs) == 40
    # without the option every record weighs 1 and the field is not read
    assert {r.w for r in open_source(f"file://{p}")} == {1.0}
    c = tmp_path / "w.csv"
    c.write_text("f,g,label,wt\n1.0,2.0,a,2\n0.5,1.0,b,0\n1.0,1.0,a,-3\n1.0,1.0,b,nan\n1.0,1.0,b,\n")
    src = open_source(f"file://{c}?weight_field=wt")
    got = list(src)
    assert [(r.x, r.y, r.w) for r in got] == [({"f": 1.0, "g": 2.0}, "a", 2.0), ({"f": 0.5, "g": 1.0}, "b", 0.0)]
    assert src.n_bad == 3


def test_step_learns_with_the_record_weight():
    from streamssvm.connectors.base import Record
    from streamssvm.step import step
    m = _sgd()
    for x, y in _mc_stream(6):
        assert step(m, Record(x, y)).status == "learned"
    before = m.state()
    assert step(m, Record({"new": 1.0}, "a", w=0.0)).status == "learned"
    assert _same(m.state(), before)
    b = ss.SequenceTagger(learner=_UnweightedGDMM())
    b.learn_one([{"a": 1.0}, {"b": 1.0}], ["A", "B"])
    before = b.state()
    out = step(b, Record([{"a": 1.0}], ["C"], w=2.0))
    assert out.bad and out.reason.startswith("NotImplementedError: _UnweightedGDMM does not take example weights")
    assert _same(b.state(), before)
    # BCFW takes it: the same as learn_one with the weight
    c, d = ss.MulticlassSSVM(learner=BCFW(lam=0.1)), ss.MulticlassSSVM(learner=BCFW(lam=0.1))
    for m in (c, d):
        m.learn_one({"f": 1.0}, "a")
    assert step(c, Record({"f": 1.0}, "b", w=2.0)).status == "learned"
    d.predict_one({"f": 1.0})
    d.learn_one({"f": 1.0}, "b", w=2.0)
    sc, sd = c.state(), d.state()
    sc.pop("calibration"), sd.pop("calibration")
    assert _same(sc, sd) and c.bound_learner.store.weight_total == 3.0


def test_engine_micro_batches_skip_zero_weight_records_bit_identically(tmp_path):
    """BCFW's micro-batch runs (predict_learn_each) with weighted records: records of weight 0
    leave the model as the stream without them."""
    from streamssvm.connectors.files import open_source, write_jsonl
    from streamssvm.engine import Engine
    data = _mc_stream(60, seed=7)
    full, kept = tmp_path / "full.jsonl", tmp_path / "kept.jsonl"
    write_jsonl(full, [{"x": x, "y": y, "w": 0.0 if i % 5 == 2 else 1.0} for i, (x, y) in enumerate(data)])
    write_jsonl(kept, [{"x": x, "y": y} for i, (x, y) in enumerate(data) if i % 5 != 2])
    states = []
    for uri in (f"file://{full}?weight_field=w", f"file://{kept}"):
        m = ss.MulticlassSSVM(learner=BCFW(lam=0.05, seed=0))
        Engine(m, open_source(uri), task="multiclass").run()
        st = m.state()
        st.pop("calibration")   # the temperature fit counts the records offered
        states.append(st)
    assert _same(states[0], states[1])


def test_cli_run_takes_weight_field(tmp_path):
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, PYTHONHASHSEED="0")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "streamssvm", *map(str, args)], capture_output=True,
                              text=True, cwd=root, env=env, timeout=600)

    h = cli("run", "--help")
    assert h.returncode == 0 and "weight_field=NAME" in h.stdout
    p = tmp_path / "w.jsonl"
    _weighted_jsonl(p)
    dl = tmp_path / "dead.jsonl"
    r = cli("run", "--source", f"file://{p}?weight_field=w", "--task", "multiclass", "--learner", "sgd",
            "--lam", "0.1", "--no-progress", "--dead-letter", dl, "--save", tmp_path / "m.ssvm")
    assert r.returncode == 0, r.stderr
    import json
    reasons = [json.loads(line)["reason"] for line in dl.read_text().splitlines()]
    assert len(reasons) == 4 and all("weight" in s for s in reasons), reasons
    m = ss.load(tmp_path / "m.ssvm")
    assert m.n_blocks == 30 and sorted(set(m.bound_learner._weights)) == [0.5, 1.0, 2.5]
    # BCFW (the default learner) takes them too: the same dead letters, the weights held
    dl2 = tmp_path / "dead2.jsonl"
    r = cli("run", "--source", f"file://{p}?weight_field=w", "--task", "multiclass", "--learner", "bcfw",
            "--lam", "0.1", "--no-progress", "--dead-letter", dl2, "--save", tmp_path / "b.ssvm")
    assert r.returncode == 0, r.stderr
    reasons = [json.loads(line)["reason"] for line in dl2.read_text().splitlines()]
    assert len(reasons) == 4 and all("weight" in s for s in reasons), reasons
    st = ss.load(tmp_path / "b.ssvm").bound_learner.store
    assert st.n == 30 and sorted(set(st.cw[st.slots()].tolist())) == [0.5, 1.0, 2.5]


def test_kafka_source_reads_the_weight_field(broker):
    """A real Kafka-protocol broker (Tansu): ``kafka://...?weight_field=w`` gives each record its
    weight; a bad weight is a dead letter with its reason."""
    pytest.importorskip("kafka")
    import json
    from streamssvm.connectors.base import DeadLetterSink
    from streamssvm.connectors.kafka import create_topic, open_kafka, produce_lines
    lines = [json.dumps({"x": {"f": float(i)}, "y": "ab"[i % 2], "w": i % 3}).encode() for i in range(12)]
    lines.insert(5, json.dumps({"x": {"f": 1.0}, "y": "a", "w": -2}).encode())
    create_topic(broker, "win")
    produce_lines(broker, "win", lines)
    dead = DeadLetterSink()
    src = open_kafka(f"kafka://{broker}/win?group=g&stop_at_end=1&weight_field=w", dead_letter=dead)
    recs = [r for r in src if r is not None]
    src.close()
    assert [r.w for r in recs] == [float(i % 3) for i in range(12)]
    assert src.n_bad == 1
    m = _sgd()
    from streamssvm.step import step
    assert all(step(m, r).status == "learned" for r in recs)
    assert m.n_blocks == 8     # the 4 records of weight 0 are not held


# ------------------------------------------------------------------------------- class weights
def _imbalanced(n=80, seed=8):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        y = "rare" if rng.random() < 0.15 else ("b" if rng.random() < 0.4 else "common")
        out.append(({"f": (y == "rare") + 0.5 * rng.normal(), "g": 1.0}, y))
    return out


def test_class_weight_dict_is_the_example_weight_of_its_class():
    data = _imbalanced()
    cw = {"rare": 4.0, "b": 0.0}
    a = ss.MulticlassSSVM(learner=SGD(lam=0.05, seed=0), class_weight=cw)
    b = ss.MulticlassSSVM(learner=SGD(lam=0.05, seed=0))
    for i, (x, y) in enumerate(data):
        a.learn_one(x, y, w=0.5 if i % 3 else 1.0)
        b.learn_one(x, y, w=(0.5 if i % 3 else 1.0) * cw.get(y, 1.0))
    sa, sb = a.state(), b.state()
    assert sa["config"]["params"].pop("class_weight") == {"pairs": [[["s", "rare"], 4.0], [["s", "b"], 0.0]]}
    assert sb["config"]["params"].pop("class_weight") is None
    assert _same(sa, sb)
    assert "b" not in a.classes


def test_class_weight_balanced_is_computed_online_and_saved(tmp_path):
    data = _imbalanced()
    m = ss.MulticlassSSVM(learner=SGD(lam=0.05, seed=0), class_weight="balanced")
    m.learn_many([x for x, _ in data[:50]], [y for _, y in data[:50]])
    counts, want = {}, []
    for _, y in data[:50]:
        counts[y] = counts.get(y, 0) + 1
        want.append(sum(counts.values()) / (len(counts) * counts[y]))
    assert m.bound_learner._weights == want
    m.save(tmp_path / "m.ssvm")
    m2 = ss.load(tmp_path / "m.ssvm")
    assert m2._class_counts == counts
    for x, y in data[50:]:
        m.learn_one(x, y)
        m2.learn_one(x, y)
    s1, s2 = m.state(), m2.state()
    s1.pop("calibration"), s2.pop("calibration")   # the temperature fit's window is not saved
    assert _same(s1, s2)
    before = m.state()
    m.learn_one(*data[0], w=0)    # w=0: not counted, nothing learned
    assert _same(m.state(), before)


class _UnweightedPragam(Pragam):
    """Pragam with its weights switched off (every multiclass learner takes weights now)."""
    example_weights = False


def test_class_weight_is_refused_by_learners_without_weights():
    with pytest.raises(ValueError, match="_UnweightedPragam does not take"):
        ss.MulticlassSSVM(learner=_UnweightedPragam(), class_weight="balanced")
    with pytest.raises(ValueError, match="_UnweightedPragam does not take"):
        ss.MulticlassSSVM(learner=_UnweightedPragam(), class_weight={"a": 2.0})
    ss.MulticlassSSVM(class_weight="balanced")   # the default learner (BCFW) takes weights
    m = ss.MulticlassSSVM(learner=_UnweightedPragam(lam=0.1), class_weight={"a": 1.0})   # all ones: unweighted
    m.learn_one({"f": 1.0}, "a")
    for bad in ("balance", {"a": -1.0}, {"a": float("nan")}, 3):
        with pytest.raises((TypeError, ValueError)):
            ss.MulticlassSSVM(learner=SGD(), class_weight=bad)


@pytest.mark.parametrize("learner", [lambda: BCFW(lam=0.05, seed=0), lambda: SGD(lam=0.05, seed=0)],
                         ids=["BCFW", "SGD"])
def test_predict_learn_each_with_weights_is_record_by_record(learner):
    """The micro-batch path (BCFW: runs of records in one kernel call) with weights: records of
    weight other than 1 leave the run; predictions, refusals and the state are those of
    predict_learn_one record by record."""
    data = _mc_stream(40, seed=9)
    xs, ys = [x for x, _ in data], [y for _, y in data]
    ws = [[1.0, 0.0, 1.0, -1.0, 1.0, 2.0][i % 6] for i in range(len(data))]
    a = ss.MulticlassSSVM(learner=learner())
    b = ss.MulticlassSSVM(learner=learner())
    for m in (a, b):
        m.learn_many(xs[:3], ys[:3])
    got = a.predict_learn_each(xs, ys, ws)
    want = []
    for x, y, w in zip(xs, ys, ws):
        try:
            want.append((True, b.predict_learn_one(x, y, w)))
        except Exception as e:  # noqa: BLE001
            want.append((False, e))
    assert [ok for ok, _ in got] == [ok for ok, _ in want]
    assert [v for ok, v in got if ok] == [v for ok, v in want if ok]
    assert [type(v) for ok, v in got if not ok] == [type(v) for ok, v in want if not ok]
    assert _same(a.state(), b.state())


# ------------------------------------------------------------------- BCFW's exact weighted dual
# (derivation: streamssvm/_kernels/bcfw.py). Weighted blocks: per-slot c_i, N = sum c_i.
def _rows(n=14, d=3, k=3, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = rng.integers(k, size=n)
    X[:, 0] += y   # learnable, not separable
    return X, [int(v) for v in y]


def _weighted_vs_copies(make, rows, ws, passes):
    """Two models: each row learned once with weight c, and round(c / unit) times unweighted (the
    same objective: normalized by the total weight); both refined ``passes``."""
    unit = min(ws)
    a, b = make(), make()
    for (x, y), c in zip(rows, ws):
        a.learn_one(x, y, w=c)
        for _ in range(int(round(c / unit))):
            b.learn_one(x, y)
    a.bound_learner.refine(passes=passes)
    b.bound_learner.refine(passes=passes)
    return a, b


_CONFIGS = {
    "fw": dict(),
    "pairwise-cache": dict(step="pairwise", cache=True, cache_size=8),
    "away": dict(step="away", cache_size=8),
    "uniform-no-averaging": dict(sampling="uniform", averaging=False),
    "slack": dict(rescaling="slack"),
}


@pytest.mark.parametrize("cfg", list(_CONFIGS), ids=list(_CONFIGS))
def test_bcfw_weight_two_is_the_example_twice_at_the_optimum(cfg):
    X, y = _rows()
    ws = [[1.0, 2.0, 3.0, 0.5][i % 4] for i in range(len(y))]
    a, b = _weighted_vs_copies(lambda: ss.MulticlassSSVM(learner=BCFW(lam=0.1, seed=1, **_CONFIGS[cfg]),
                                                         scale=False),
                               list(zip(X, y)), ws, 3000)
    ca, cb = a.bound_learner.certificate(), b.bound_learner.certificate()
    assert ca.gap < 1e-4 and cb.gap < 1e-4
    # the same objective: each primal within the other's certified bracket
    assert cb.dual - 1e-9 <= ca.primal and ca.dual - 1e-9 <= cb.primal
    assert abs(ca.primal - cb.primal) < 2e-4
    Wa, Wb = a.bound_learner.emission_weights(), b.bound_learner.emission_weights()
    assert np.abs(Wa - Wb).max() < 0.02 * np.abs(Wb).max()
    assert a.bound_learner.store.weight_total == sum(ws)


def test_bcfw_weighted_chain_is_the_copies_at_the_optimum():
    rng = np.random.default_rng(4)
    tags = ["D", "N", "V"]
    rows = []
    for i in range(8):
        L = 2 + i % 3
        t = [tags[int(v)] for v in rng.integers(3, size=L)]
        rows.append(([{f"w={s}{int(rng.integers(2))}": 1.0} for s in t], t))
    ws = [[1.0, 2.0, 3.0][i % 3] for i in range(len(rows))]
    a, b = _weighted_vs_copies(lambda: ss.SequenceTagger(learner=BCFW(lam=0.1, seed=2)), rows, ws, 3000)
    ca, cb = a.bound_learner.certificate(), b.bound_learner.certificate()
    assert ca.gap < 1e-3 and cb.gap < 1e-3
    assert cb.dual - 1e-9 <= ca.primal and ca.dual - 1e-9 <= cb.primal


def test_bcfw_weighted_multilabel_is_the_copies_at_the_optimum():
    rng = np.random.default_rng(5)
    rows = []
    for i in range(10):
        x = rng.normal(size=3)
        rows.append((x, {"red": bool(x[0] > 0), "blue": bool(x[1] + 0.3 * rng.normal() > 0)}))
    ws = [[1.0, 2.0, 0.5][i % 3] for i in range(len(rows))]
    a, b = _weighted_vs_copies(lambda: ss.MultiLabelSSVM(learner=BCFW(lam=0.1, seed=2), scale=False, normalize=False),
                               rows, ws, 3000)   # (running statistics would see the copies)
    ca, cb = a.bound_learner.certificate(), b.bound_learner.certificate()
    assert ca.gap < 1e-3 and cb.gap < 1e-3
    assert cb.dual - 1e-9 <= ca.primal and ca.dual - 1e-9 <= cb.primal


@pytest.mark.parametrize("cfg", ["fw", "pairwise-cache", "cache-global-rule"])
def test_bcfw_weights_scaled_by_four_give_the_same_trajectory(cfg):
    """The objective is invariant to scaling every weight (normalized by N); so are the steps, the
    gap sampling and the cache's hit rule: weights times 4 (exact in floating point) give the
    same predicting weights, bit for bit, at a fixed lambda."""
    X, y = _rows(n=20, seed=12)
    ws = [[1.0, 2.0, 0.5, 3.0][i % 4] for i in range(len(y))]
    out = []
    for k in (1.0, 4.0):
        kw = dict(step="pairwise", cache=True, cache_F=0.0, cache_nu=1.0) if cfg == "cache-global-rule" else \
            _CONFIGS[cfg]
        m = ss.MulticlassSSVM(learner=BCFW(lam=0.05, seed=0, gap_every=1.0, **kw), scale=False)
        for x, t, c in zip(X, y, ws):
            m.learn_one(x, t, w=k * c)
        m.bound_learner.refine(passes=20)
        out.append((m.bound_learner.emission_weights(), m.bound_learner.counters.copy()))
    assert np.array_equal(out[0][0], out[1][0]) and np.array_equal(out[0][1], out[1][1])


@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_cutting_plane_weight_two_is_the_example_twice_at_the_optimum(rescaling, tmp_path):
    """CuttingPlane's weighted dual (block QP at scale c_i / (lam N), moves times c_i): the
    optimum of the copies; the certificate brackets it; a weighted model saved and loaded goes on
    bit-identically; weights of 1 are the unweighted learner."""
    X, y = _rows(n=12, seed=13)
    ws = [[1.0, 2.0, 3.0, 0.5][i % 4] for i in range(len(y))]
    a, b = _weighted_vs_copies(lambda: ss.MulticlassSSVM(learner=CuttingPlane(lam=0.1, eps=1e-6, max_iter=200,
                                                                              rescaling=rescaling), scale=False),
                               list(zip(X, y)), ws, 50)
    ca, cb = a.bound_learner.certificate(), b.bound_learner.certificate()
    assert ca.gap < 1e-4 and cb.gap < 1e-4
    assert cb.dual - 1e-9 <= ca.primal and ca.dual - 1e-9 <= cb.primal
    assert abs(ca.primal - cb.primal) < 1e-4
    a.save(tmp_path / "cp.ssvm")
    a2 = ss.load(tmp_path / "cp.ssvm")
    for m in (a, a2):
        for x, t, c in zip(X[:4], y[:4], ws[::-1]):
            m.learn_one(x, t, w=c)
    s1, s2 = a.state(), a2.state()
    s1.pop("calibration"), s2.pop("calibration")
    assert _same(s1, s2)
    u, v = (ss.MulticlassSSVM(learner=CuttingPlane(lam=0.1), scale=False) for _ in range(2))
    for x, t in zip(X, y):
        u.learn_one(x, t)
        v.learn_one(x, t, w=1.0)
    assert _same(u.state(), v.state())


def _dense_weights(lr):
    """The predicting (features x labels) weights; BMRM: its best iterate's (Pragam: W_k) emission rows (the
    bias row first; a multiclass structure has no other weights)."""
    W = lr.emission_weights()
    if W is None:
        P = lr._pred() if hasattr(lr, "_pred") else lr.W
        assert not P.T.any() and not P.B.any()
        W = P.E[:, :lr._K]
    return W


def _brute_primal(m, X, y, ws, lam):
    """lam/2 ||w||^2 + (1/N) sum_i c_i max_k (C[y_i, k] + s_k - s_{y_i}) of a multiclass model
    (scale=False, no averaging), from its dense weights (the bias row first)."""
    lr = m.bound_learner
    W = _dense_weights(lr)
    ids = [m.classes.index(t) for t in y]
    S = np.hstack([np.ones((len(X), 1)), X]) @ W
    C = lr._C[:W.shape[1], :W.shape[1]]
    H = np.array([np.max(C[i] + S[r] - S[r, i]) for r, i in enumerate(ids)])
    return 0.5 * lam * float(np.sum(W * W)) + float(np.dot(ws, H)) / float(np.sum(ws))


def test_bcfw_weighted_certificate_bounds_the_true_suboptimality():
    """Random weights: the certificate's primal is the weighted objective (brute force), its dual
    never exceeds the optimum (a long run's primal), and its gap bounds P(w_t) - P* at every
    iterate of the stream."""
    X, y = _rows(n=16, seed=6)
    rng = np.random.default_rng(7)
    ws = [float(v) for v in rng.uniform(0.1, 4.0, size=len(y))]
    lam = 0.1
    ref = ss.MulticlassSSVM(learner=BCFW(lam=lam, seed=0, averaging=False, step="pairwise", cache_size=8),
                            scale=False)   # pairwise steps: linear convergence to the optimum
    for x, t, c in zip(X, y, ws):
        ref.learn_one(x, t, w=c)
    ref.bound_learner.refine(passes=3000)
    cr = ref.bound_learner.certificate()
    assert cr.gap < 1e-8
    p_star_hi, p_star_lo = cr.primal, cr.dual   # P* in [dual, primal]
    m = ss.MulticlassSSVM(learner=BCFW(lam=lam, seed=3, averaging=False), scale=False)
    for i, (x, t, c) in enumerate(zip(X, y, ws)):
        m.learn_one(x, t, w=c)
    for _ in range(6):
        cert = m.bound_learner.certificate()
        assert cert.primal == pytest.approx(_brute_primal(m, X, y, ws, lam), rel=1e-9, abs=1e-12)
        assert cert.dual <= p_star_hi + 1e-9
        assert cert.gap >= cert.primal - p_star_lo - 1e-9 >= 0.0 or cert.primal - p_star_lo < 1e-9
        assert cert.gap + 1e-12 >= cert.primal - p_star_hi
        m.bound_learner.refine(passes=0.5)
    # with every weight 1 the brute-force primal is the unweighted one (the encoding checked)
    u = ss.MulticlassSSVM(learner=BCFW(lam=lam, seed=3, averaging=False), scale=False)
    for x, t in zip(X, y):
        u.learn_one(x, t)
    assert u.bound_learner.certificate().primal == pytest.approx(_brute_primal(u, X, y, np.ones(len(y)), lam),
                                                                 rel=1e-9)


def test_bcfw_weights_of_one_are_the_unweighted_learner_bit_for_bit():
    """learn(weight=1.0) explicitly, the micro-batch path and learn_one: the same state; a
    weight-1 store saves no weights (files unchanged) and N = n."""
    X, y = _rows(n=30, seed=8)
    a = ss.MulticlassSSVM(learner=BCFW(lam=0.05, seed=0))
    b = ss.MulticlassSSVM(learner=BCFW(lam=0.05, seed=0))
    for x, t in zip(X, y):
        a.learn_one(x, t)
        b.learn_one(x, t, w=1.0)
    assert _same(a.state(), b.state())
    st = a.bound_learner.store
    assert st.weight_total == float(st.n) and "cw" not in st.state() and not st.weighted()


def test_bcfw_weights_follow_evictions_and_survive_save_load(tmp_path):
    """A FIFO window of 5 and a reservoir: N is the sum of the held blocks' weights after every
    eviction; a weighted model saved and loaded continues bit-identically; a weighted model
    certifies validly after evictions."""
    X, y = _rows(n=40, seed=9)
    ws = [[0.5, 1.0, 2.0, 3.0][i % 4] for i in range(len(y))]
    for kw in (dict(window=5), dict(window=5, eviction="reservoir"), dict(max_bytes=4096),
               dict(window=5, evicted_average="keep")):
        m = ss.MulticlassSSVM(learner=BCFW(lam=0.05, seed=0, **kw), scale=False)
        for i, (x, t, c) in enumerate(zip(X, y, ws)):
            m.learn_one(x, t, w=c)
            st = m.bound_learner.store
            assert st.weight_total == pytest.approx(float(np.sum(st.cw[st.slots()])), abs=1e-12)
        m.save(tmp_path / "m.ssvm")
        m2 = ss.load(tmp_path / "m.ssvm")
        assert _same(m2.bound_learner.store.cw[m2.bound_learner.store.slots()], st.cw[st.slots()])
        for x, t, c in zip(X[:10], y[:10], ws[::-1]):
            m.learn_one(x, t, w=c)
            m2.learn_one(x, t, w=c)
        s1, s2 = m.state(), m2.state()
        s1.pop("calibration"), s2.pop("calibration")
        assert _same(s1, s2)
        lr = m.bound_learner
        c0 = lr.certificate()
        lr.refine(passes=2000)
        c1 = lr.certificate()
        assert c1.extra["iterate_gap"] < 1e-3 and c1.gap < c0.gap
        assert c0.dual <= c1.primal + 1e-9 and c1.dual <= c0.primal + 1e-9


def test_bcfw_refuses_weights_where_the_algebra_is_not_done():
    X, y = _rows(n=6)
    m = ss.MulticlassSSVM(learner=BCFW(lam=0.05, seed=0))
    for x, t in zip(X, y):
        m.learn_one(x, t, w=2.0)
    with pytest.raises(NotImplementedError, match="set_lam"):
        m.bound_learner.set_lam(0.01)
    with pytest.raises(NotImplementedError, match="set_union"):
        m.bound_learner.set_union(0.05, 12)
    with pytest.raises(NotImplementedError, match="dual_snapshot"):
        m.bound_learner.dual_snapshot()


def test_engine_weight_field_is_learn_one_with_the_weight(tmp_path):
    """``file://...?weight_field=w`` through the engine (BCFW's micro-batch runs take the
    weight-1 records, the others go one at a time): the state of predict_learn_one record by
    record with the same weights."""
    from streamssvm.connectors.files import open_source, write_jsonl
    from streamssvm.engine import Engine
    data = _mc_stream(60, seed=11)
    ws = [[1.0, 2.0, 1.0, 0.5, 1.0, 0.0][i % 6] for i in range(len(data))]
    p = tmp_path / "w.jsonl"
    write_jsonl(p, [{"x": x, "y": y, "w": c} for (x, y), c in zip(data, ws)])
    a = ss.MulticlassSSVM(learner=BCFW(lam=0.05, seed=0))
    Engine(a, open_source(f"file://{p}?weight_field=w"), task="multiclass").run()
    b = ss.MulticlassSSVM(learner=BCFW(lam=0.05, seed=0))
    for (x, y), c in zip(data, ws):
        b.predict_learn_one(x, y, c)
    sa, sb = a.state(), b.state()
    sa.pop("calibration"), sb.pop("calibration")
    assert _same(sa, sb)
    assert a.bound_learner.store.weight_total == sum(ws)


def test_class_weight_balanced_with_the_default_learner():
    data = _imbalanced()
    m = ss.MulticlassSSVM(class_weight="balanced")
    m.learn_many([x for x, _ in data], [y for _, y in data])
    counts, want = {}, []
    for _, y in data:
        counts[y] = counts.get(y, 0) + 1
        want.append(sum(counts.values()) / (len(counts) * counts[y]))
    st = m.bound_learner.store
    got = st.cw[np.sort(st.slots())]   # slots in arrival order (no eviction)
    assert np.allclose(sorted(got), sorted(want), rtol=0, atol=1e-12)
    assert st.weight_total == pytest.approx(sum(want))


# ------------------------------------------------------------------------------- BMRM


def _bmrm(lam=0.1, **kw):
    return ss.MulticlassSSVM(learner=BMRM(lam=lam, tol=1e-9, qp_tol=1e-14, **kw), scale=False)


@pytest.mark.parametrize("kw", [dict(), dict(rescaling="slack"), dict(variant="ls", line_search="none")],
                         ids=["qp-ocas", "slack", "ls"])
def test_bmrm_weight_two_is_the_example_twice_at_the_optimum(kw):
    """BMRM's weighted risk (1/N) sum_i c_i H_i: weight c on a row and the row held c times are the
    same J; both runs' certified brackets [D, J] overlap and their optima agree."""
    X, y = _rows(n=12, seed=13)
    ws = [[1.0, 2.0, 3.0, 0.5][i % 4] for i in range(len(y))]
    a, b = _weighted_vs_copies(lambda: _bmrm(**kw), list(zip(X, y)), ws, 400 if kw.get("variant") == "ls" else 150)
    ca, cb = a.bound_learner.certificate(), b.bound_learner.certificate()
    tol = 2e-2 if kw.get("variant") == "ls" else 1e-6     # ls-bmrm: O(1/eps) iterations
    assert ca.gap < tol and cb.gap < tol
    assert cb.dual - 1e-9 <= ca.primal and ca.dual - 1e-9 <= cb.primal
    assert ca.primal == pytest.approx(_brute_primal(a, X, y, ws, 0.1), rel=1e-9)
    assert abs(ca.primal - cb.primal) < tol


def test_bmrm_weighted_multilabel_is_the_copies_at_the_optimum():
    """The per-example path of the risk oracle (dense cuts) with weights, on the learner (the
    estimator's online feature scaling would see the copies as different rows)."""
    rng = np.random.default_rng(5)
    m = ss.MultiLabelSSVM(learner=BMRM(lam=0.1), scale=False)
    for _ in range(8):
        m.learn_one(rng.normal(size=3), {"a": bool(rng.random() < 0.5), "b": bool(rng.random() < 0.5)})
    src = m.bound_learner
    labels = list(range(src._K))
    ws = [1.0, 2.0, 1.0, 3.0, 1.0, 2.0, 1.0, 1.0]
    out = []
    for weighted in (True, False):
        lr = BMRM(lam=0.1, tol=1e-9, line_search="none")
        lr.bind(src.structure, labels)
        lr.ensure(src.W.E.shape[0], labels)
        for ex, c in zip(src.held, ws):
            for _ in range(1 if weighted else int(c)):
                lr.learn(*ex, weight=c if weighted else 1.0)
        lr.refine(passes=150)
        out.append(lr.certificate())
    ca, cb = out
    assert ca.gap < 1e-6 and cb.gap < 1e-6
    assert cb.dual - 1e-9 <= ca.primal and ca.dual - 1e-9 <= cb.primal


def test_bmrm_weighted_certificate_bounds_the_true_suboptimality():
    """Random weights on a two-class problem: the exact weighted optimum p* (scipy); at every
    BMRM iteration the certificate's primal is the brute-force weighted J of the predicting
    weights, its dual is <= p* and its gap >= J - p*."""
    X, y = _dense_problem()
    lam = 0.1
    c = np.random.default_rng(11).uniform(0.2, 3.0, size=len(y))
    p_star, _ = _optimum(X, y, c, lam)
    m = ss.MulticlassSSVM(labels=[0, 1], scale=False, learner=BMRM(lam=lam, tol=0.0, qp_tol=1e-14))
    m.learn_many(X, list(y), w=c)
    lr = m.bound_learner
    for _ in range(25):
        lr.refine(passes=1)
        cert = lr.certificate()
        assert cert.primal == pytest.approx(_weighted_primal(_dense_weights(lr), X, y, c, lam), rel=1e-9,
                                            abs=1e-12)
        assert cert.dual <= p_star + 1e-7
        assert cert.gap + 1e-7 >= cert.primal - p_star
    assert cert.gap < 1e-6 and abs(cert.primal - p_star) < 1e-6


def test_bmrm_weights_of_one_are_the_unweighted_learner_bit_for_bit():
    X, y = _rows(n=30, seed=8)
    for kw in (dict(), dict(variant="ls"), dict(rescaling="slack", window=10)):
        a, b = _bmrm(0.05, **kw), _bmrm(0.05, **kw)
        for x, t in zip(X, y):
            a.learn_one(x, t)
            b.learn_one(x, t, w=1.0)
        for m in (a, b):
            m.bound_learner.refine(passes=20)
        assert _same(a.state(), b.state())
        assert "weights" not in a.bound_learner.state()["window"]   # files of unit weights unchanged
        assert a.bound_learner.held.total() == float(len(a.bound_learner.held))


def test_bmrm_weights_follow_evictions_and_survive_save_load(tmp_path):
    """A FIFO window of 5: N is the sum of the held weights after every eviction; saved and
    loaded, a weighted model goes on bit-identically; a file without weights loads with weight 1;
    bad weights in a file are refused."""
    X, y = _rows(n=20, seed=9)
    ws = [[0.5, 1.0, 2.0, 3.0][i % 4] for i in range(len(y))]
    m = _bmrm(0.05, window=5)
    for i, (x, t, c) in enumerate(zip(X, y, ws)):
        m.learn_one(x, t, w=c)
        held = m.bound_learner.held
        assert list(held.weights) == ws[max(0, i - 4):i + 1]
        assert held.total() == pytest.approx(sum(ws[max(0, i - 4):i + 1]), abs=1e-12)
        if i % 3 == 0:
            m.bound_learner.refine(passes=5)
            cert = m.bound_learner.certificate()
            assert cert.gap >= 0.0
    m.save(tmp_path / "m.ssvm")
    m2 = ss.load(tmp_path / "m.ssvm")
    assert list(m2.bound_learner.held.weights) == list(m.bound_learner.held.weights)
    for mm in (m, m2):
        for x, t, c in zip(X[:6], y[:6], ws[::-1]):
            mm.learn_one(x, t, w=c)
        mm.bound_learner.refine(passes=10)
    s1, s2 = m.state(), m2.state()
    s1.pop("calibration"), s2.pop("calibration")
    assert _same(s1, s2)
    st = m.bound_learner.state()
    old = st["window"].copy()
    del old["weights"]
    lr = BMRM(lam=0.05)
    lr.restore(m.bound_learner.structure, m.classes, {**st, "window": old})
    assert list(lr.held.weights) == [1.0] * len(lr.held) and lr.held.example_weights() is None
    for bad in (np.array([1.0, -1.0, 1.0, 1.0, 1.0]), np.array([1.0, np.nan, 1, 1, 1]), np.ones(3),
                np.array(["a"] * 5)):
        with pytest.raises(CheckpointError, match="weights"):
            BMRM(lam=0.05).restore(m.bound_learner.structure, m.classes, {**st, "window": {**old, "weights": bad}})


@pytest.mark.parametrize("kw", [dict(), dict(schedule="paper", L="exact")], ids=["adaptive", "paper"])
def test_pragam_weight_two_is_the_example_twice_at_the_optimum(kw):
    """Pragam's weighted dual (row masses c_i / N): the copies' optimum, brackets overlap; the
    certificate's primal is the brute-force weighted J."""
    X, y = _rows(n=12, seed=13)
    ws = [[1.0, 2.0, 3.0, 0.5][i % 4] for i in range(len(y))]
    make = lambda: ss.MulticlassSSVM(learner=Pragam(lam=0.1, tol=1e-9, **kw), scale=False)  # noqa: E731
    a, b = _weighted_vs_copies(make, list(zip(X, y)), ws, 3000)
    ca, cb = a.bound_learner.certificate(), b.bound_learner.certificate()
    assert ca.gap < 1e-4 and cb.gap < 1e-4
    assert cb.dual - 1e-9 <= ca.primal and ca.dual - 1e-9 <= cb.primal
    assert ca.primal == pytest.approx(_brute_primal(a, X, y, ws, 0.1), rel=1e-9)


def test_pragam_weighted_certificate_bounds_the_true_suboptimality(tmp_path):
    """Random weights, three classes: every iterate's gap bounds J - p* (p* by scipy), its dual
    is <= p*; saved and loaded it goes on bit-identically; weights of 1 are the unweighted run."""
    X, y = _rows(n=9, seed=4)
    lam = 0.1
    c = np.random.default_rng(12).uniform(0.2, 3.0, size=len(y))
    p_star, _ = _optimum(X, np.array(y), c, lam, K=3)
    m = ss.MulticlassSSVM(labels=[0, 1, 2], scale=False, learner=Pragam(lam=lam, tol=0.0))
    m.learn_many(X, list(y), w=c)
    lr = m.bound_learner
    for _ in range(30):
        lr.refine(passes=20)
        cert = lr.certificate()
        assert cert.primal == pytest.approx(_brute_primal(m, X, y, c, lam), rel=1e-9, abs=1e-12)
        assert cert.dual <= p_star + 1e-7
        assert cert.gap + 1e-7 >= cert.primal - p_star
    m.save(tmp_path / "p.ssvm")
    m2 = ss.load(tmp_path / "p.ssvm")
    for mm in (m, m2):
        mm.learn_one(X[0], y[0], w=2.5)
        mm.bound_learner.refine(passes=5)
    s1, s2 = m.state(), m2.state()
    s1.pop("calibration"), s2.pop("calibration")
    assert _same(s1, s2)
    u, v = (ss.MulticlassSSVM(learner=Pragam(lam=lam), scale=False) for _ in range(2))
    for x, t in zip(X, y):
        u.learn_one(x, t)
        v.learn_one(x, t, w=1.0)
    for mm in (u, v):
        mm.bound_learner.refine(passes=30)
    assert _same(u.state(), v.state()) and "weights" not in u.bound_learner.state()["window"]


def test_pragam_b_weight_two_is_the_example_twice():
    """Pragam-b (two classes, unregularized bias): the box [0, c_i / N] and the primal minimized
    over the bias with weighted hinges: the copies' optimum, brackets overlap (chains:
    tests/test_pragam_chain.py)."""
    X, y = _rows(n=12, k=2, seed=13)
    ws = [[1.0, 2.0, 3.0, 0.5][i % 4] for i in range(len(y))]
    make = lambda: ss.MulticlassSSVM(learner=Pragam(lam=0.1, tol=1e-9, bias=True), scale=False)  # noqa: E731
    a, b = _weighted_vs_copies(make, list(zip(X, y)), ws, 3000)
    ca, cb = a.bound_learner.certificate(), b.bound_learner.certificate()
    assert ca.gap < 1e-4 and cb.gap < 1e-4
    assert cb.dual - 1e-9 <= ca.primal and ca.dual - 1e-9 <= cb.primal


def test_pragam_weights_follow_evictions():
    """A FIFO window of 5: the held weights are the last 5, the restart rescales the kept rows to
    their new mass c_i / N, and the certificate is of the weighted window's J (brute force)."""
    X, y = _rows(n=16, seed=9)
    ws = [[0.5, 1.0, 2.0, 3.0][i % 4] for i in range(len(y))]
    m = ss.MulticlassSSVM(labels=[0, 1, 2], scale=False, learner=Pragam(lam=0.1, window=5))
    for i, (x, t, c) in enumerate(zip(X, y, ws)):
        m.learn_one(x, t, w=c)
        lo = max(0, i - 4)
        assert list(m.bound_learner.held.weights) == ws[lo:i + 1]
        if i % 3 == 2:
            m.bound_learner.refine(passes=30)
            cert = m.bound_learner.certificate()
            assert cert.gap >= 0.0 and cert.dual <= cert.primal
            assert cert.primal == pytest.approx(_brute_primal(m, X[lo:i + 1], y[lo:i + 1], ws[lo:i + 1], 0.1),
                                                rel=1e-9, abs=1e-12)
            assert np.allclose(m.bound_learner.alpha.sum(axis=1), np.array(ws[lo:i + 1]) / sum(ws[lo:i + 1]))


# ------------------------------------------------------------------------------------- MEMOIR
# SGD-like steps: the step on example i is c_i times longer; shrinkage, projection, step clock
# and averaging weights count the example once. Weight 2 is the example twice only to first
# order in eta (two steps shrink twice and re-query the oracle), so what is tested exactly is
# the objective (the certificate's weighted primal) and, within tolerance, the long-run optimum.
def _extreme(**kw):
    return ss.ExtremeClassifier(labels=[0, 1], learner=MEMOIR(**{"mips": "exact", "lam": 0.1,
                                                                  "check_every": 0, **kw}))


def _extreme_stream(n=30, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = rng.integers(3, size=n)
    X[:, 0] += y
    return X, ["abc"[v] for v in y]


def test_memoir_unit_weights_are_the_unweighted_run():
    X, ys = _extreme_stream()
    make = lambda: ss.ExtremeClassifier(learner=MEMOIR(mips="exact", lam=1e-3))  # noqa: E731
    a, b, c, d = make(), make(), make(), make()
    for x, y in zip(X, ys):
        a.learn_one(x, y)
        b.learn_one(x, y, w=1)
    c.learn_many(X, ys, w=np.ones(len(ys)))
    d.learn_many(X, ys)
    assert _same(a.state(), b.state()) and _same(c.state(), d.state()) and _same(a.state(), d.state())
    assert "weights" not in a.state()["learner"] and "flat_weights" not in a.state()["learner"]
    # zero weights are skipped: the rest of the stream is the unweighted run
    e = make()
    e.learn_many(np.vstack([X[:5], X[:2], X[5:]]), ys[:5] + ys[:2] + ys[5:], w=[1.0] * 5 + [0.0] * 2 + [1.0] * 25)
    assert _same(e.state(), a.state())


def test_memoir_weighted_step_is_the_step_scaled():
    """One violated step of weight c moves the rows by c times the unit step (the shrinkage, the
    clock and the input scale count the example once): exact on the first step of a class pair."""
    x0, x1 = np.array([1.0, 0.5]), np.array([0.2, 1.0])
    a, b = _extreme(averaging=False, lam=1e-6), _extreme(averaging=False, lam=1e-6)   # no projection
    for m in (a, b):
        m.learn_one(x0, 0)
    before = a.bound_learner.store.to_dense()
    a.learn_one(x1, 1)
    b.learn_one(x1, 1, w=2.5)
    la, lb = a.bound_learner, b.bound_learner
    assert la.acc == lb.acc and la.n_steps == lb.n_steps and la.r2_sum == lb.r2_sum and la.n_updates == 2
    # W = acc V with the same acc in both: the moves of the unscaled rows V are in ratio 2.5
    da, db = la.store.to_dense() - before, lb.store.to_dense() - before
    assert np.abs(da).max() > 0 and np.allclose(db, 2.5 * da, rtol=1e-12, atol=1e-15)
    assert lb._recent_w == [1.0, 2.5] and la._recent_w == [1.0, 1.0]


def test_memoir_certificate_is_the_weighted_primal():
    X, y = _dense_problem()
    c = np.random.default_rng(1).uniform(0.5, 3.0, len(y))
    m = _extreme(averaging=False)
    m.learn_many(X, list(y), w=c)
    cert = m.certificate()
    W = m.bound_learner.averaged_weights().T     # the last iterate (bias feature first)
    assert abs(cert.primal - _weighted_primal(W, X, y, c, 0.1)) <= 1e-12 * max(1.0, cert.primal)
    assert cert.gap == float("inf") and not cert.exact and "primal only" in cert.note
    # weight 2 on one example is that example held twice, for the objective of any weights
    c2 = np.ones(len(y))
    c2[2] = 2.0
    Xd, yd = np.vstack([X, X[2:3]]), np.concatenate([y, y[2:3]])
    assert abs(_weighted_primal(W, X, y, c2, 0.1) - _weighted_primal(W, Xd, yd, np.ones(len(yd)), 0.1)) <= 1e-12


def test_memoir_weight_two_is_the_example_twice_at_the_optimum():
    """Weighted MEMOIR and MEMOIR on the duplicated stream both reach the exact weighted
    optimum (scipy) within 1% after enough decaying steps; the unweighted run does not."""
    X, y = _dense_problem()
    lam = 0.1
    c = np.ones(len(y))
    c[2] = 2.0
    p_w, _ = _optimum(X, y, c, lam)
    Xd, yd = np.vstack([X, X[2:3]]), np.concatenate([y, y[2:3]])
    a, b = _extreme(eta0=1.0, eta_step=0.05), _extreme(eta0=1.0, eta_step=0.05)
    a.learn_many(X, list(y), w=c)
    b.learn_many(Xd, list(yd))
    a.bound_learner.refine(1000)
    b.bound_learner.refine(1000)
    for m in (a, b):
        assert _weighted_primal(m.bound_learner.averaged_weights().T, X, y, c, lam) - p_w <= 1e-2 * p_w
    assert a.certificate().primal >= p_w - 1e-9    # the last iterate's weighted primal
    u = _extreme(eta0=1.0, eta_step=0.05)          # the weight matters: unweighted is 19% above
    u.learn_many(X, list(y))
    u.bound_learner.refine(1000)
    assert _weighted_primal(u.bound_learner.averaged_weights().T, X, y, c, lam) - p_w > 0.1 * p_w


def test_memoir_weights_are_saved_and_old_files_load_with_weight_one(tmp_path):
    X, ys = _extreme_stream(12, seed=6)
    m = ss.ExtremeClassifier(learner=MEMOIR(mips="exact", lam=1e-3))
    m.learn_one(X[0], ys[0], w=3.0)        # flat: no competitor yet, kept with its weight
    for i in range(1, len(ys)):
        m.learn_one(X[i], ys[i], w=0.5 + i)
    st = m.state()["learner"]
    assert "weights" in st and "flat_weights" not in st     # the flat example was revisited
    p = tmp_path / "m.ssvm"
    m.save(p)
    m2 = ss.load(p)
    assert m2.bound_learner._recent_w == m.bound_learner._recent_w
    m.learn_one(X[1], ys[1], w=2.0)
    m2.learn_one(X[1], ys[1], w=2.0)
    assert _same(m.state(), m2.state())
    m.bound_learner.refine(2)
    m2.bound_learner.refine(2)
    assert _same(m.state(), m2.state())
    # a flat example of weight 3 waits with its weight, saved, until a second class arrives
    f = ss.ExtremeClassifier(learner=MEMOIR(mips="exact", lam=1e-3))
    f.learn_one(X[0], "a", w=3.0)
    assert list(f.state()["learner"]["flat_weights"]) == [3.0]
    f2 = from_state(f.state())
    for g in (f, f2):
        g.learn_one(X[1], "b")
    assert _same(f.state(), f2.state())
    # a file from before example weights: every held example weighs 1
    u = ss.ExtremeClassifier(learner=MEMOIR(mips="exact", lam=1e-3))
    u.learn_many(X, ys)
    old = from_state(u.state())
    assert old.bound_learner._recent_w == [1.0] * len(ys) and _same(old.state(), u.state())
    for bad in (np.full(len(ys), -1.0), np.full(len(ys), np.nan), np.ones(len(ys) + 1), np.array(["1"] * len(ys))):
        st = u.state()
        st["learner"]["weights"] = bad
        with pytest.raises(CheckpointError):
            from_state(st)
