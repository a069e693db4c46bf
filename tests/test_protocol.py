"""The Learner protocol: every learner implements all of it, and ``certificate()`` observes.

The cadence tests run the same stream with a certificate after every example, every 50
examples and never, and require bit-identical learner state (weights, block gaps, schedules,
averaging, counters, random streams) and identical predictions. Before certificates were made
read-only, BCFW's certificate was its refreshing full pass (it rebuilt the weight sums, refreshed
the gap estimates that drive gap sampling and reset the pass schedule) and CuttingPlane's rebuilt
the weights in place, so these runs diverged.
"""
import inspect
import json

import numpy as np
import pytest

import streamssvm as ss
from streamssvm import learners as L
from streamssvm.learners.base import Learner
from streamssvm.learners.checks import (TREE, assert_same_state, chain_data, hierarchy_data, multiclass_data,
                                        multilabel_data)

# ----------------------------------------------------------------------------- data

DATA = {"multiclass": multiclass_data, "multilabel": multilabel_data, "chain": chain_data, "mrf": multilabel_data,
        "hierarchy": hierarchy_data}


def _estimator(structure, learner):
    if structure == "multiclass":
        return ss.MulticlassSSVM(learner=learner)
    if structure == "multilabel":
        return ss.MultiLabelSSVM(learner=learner, pairwise=False)   # independent labels ("auto" may pick the MRF)
    if structure == "mrf":
        return ss.MultiLabelSSVM(pairwise=True, learner=learner)
    if structure == "hierarchy":
        return ss.MultiLabelSSVM(hierarchy=TREE, learner=learner)
    return ss.SequenceTagger(learner=learner)


# ----------------------------------------------------------------------------- learners

def _bcfw(**kw):
    base = dict(lam=0.02, replay=2, gap_every=1.0, seed=0)
    base.update(kw)
    return lambda: L.BCFW(**base)


LEARNERS = {
    "bcfw-fw-uniform": _bcfw(sampling="uniform", step="fw"),
    "bcfw-fw-gap": _bcfw(sampling="gap", step="fw"),
    "bcfw-fw-gap-noavg": _bcfw(sampling="gap", step="fw", averaging=False),
    "bcfw-pairwise-gap-cache": _bcfw(sampling="gap", step="pairwise", cache=True),
    "bcfw-away-uniform-cache": _bcfw(sampling="uniform", step="away", cache=True),
    "bcfw-fw-gap-cache-noavg": _bcfw(sampling="gap", step="fw", cache=True, averaging=False),
    "bcfw-slack": _bcfw(sampling="gap", step="fw", rescaling="slack"),
    "sgd-margin": lambda: L.SGD(lam=0.02, rescaling="margin"),
    "sgd-slack-exact": lambda: L.SGD(lam=0.02, rescaling="slack", search="exact"),
    "sgd-slack-angular": lambda: L.SGD(lam=0.02, rescaling="slack", search="angular"),
    "cp-margin": lambda: L.CuttingPlane(lam=0.05, rescaling="margin"),
    "cp-slack-angular": lambda: L.CuttingPlane(lam=0.05, rescaling="slack", search="angular"),
}

# every learner on the three main structures; the pairwise MRF and the hierarchy with a few
CASES = [(lr, s) for lr in LEARNERS for s in ("multiclass", "multilabel", "chain")]
CASES += [(lr, "mrf") for lr in ("bcfw-fw-gap", "bcfw-pairwise-gap-cache", "sgd-slack-angular", "cp-margin")]
CASES += [(lr, "hierarchy") for lr in ("bcfw-fw-gap", "bcfw-slack", "sgd-slack-angular", "cp-slack-angular")]
# the batch solvers over the held window (BMRM: every structure; Pragam: Crammer-Singer)
LEARNERS.update({"bmrm-qp": lambda: L.BMRM(lam=0.05, max_cuts=4), "pragam": lambda: L.Pragam(lam=0.05)})
CASES += [("bmrm-qp", s) for s in ("multiclass", "multilabel", "chain", "mrf", "hierarchy")] + [("pragam", "multiclass")]


def _run(make_learner, structure, every, refine=1.0):
    data = DATA[structure]()
    m = _estimator(structure, make_learner())
    certs = []
    for i, (x, y) in enumerate(data, 1):
        m.learn_one(x, y)
        if every and i % every == 0:
            certs.append(m.certificate())
    if refine:
        m._learner.refine(refine)
        if every:
            certs.append(m.certificate())
    return m, data, certs


@pytest.mark.parametrize("learner,structure", CASES)
def test_certificate_cadence_does_not_change_the_model(learner, structure):
    runs = {every: _run(LEARNERS[learner], structure, every) for every in (1, 50, None)}
    ref, data, _ = runs[None]
    probes = [x for x, _ in data[:40]]
    p_ref = [ref.predict_one(x) for x in probes]
    for every in (1, 50):
        m, _, certs = runs[every]
        assert_same_state(m._learner.state(), ref._learner.state())
        assert [m.predict_one(x) for x in probes] == p_ref
        for c in certs:   # the certificates themselves are valid (on the unclamped number)
            assert c.raw_gap > -1e-9 or c.raw_gap == float("inf") or not np.isfinite(c.dual)
    # and certifying never changes the certificate: two in a row agree exactly
    m = runs[1][0]
    c1, c2 = m.certificate(), m.certificate()
    assert (c1.primal, c1.dual, c1.raw_gap) == (c2.primal, c2.dual, c2.raw_gap) or not np.isfinite(c1.dual)


# MEMOIR's and GDMM's cadence tests are the generated ones (tests/test_learner_checks.py).


def test_bcfw_own_full_passes_still_run_on_schedule():
    """Certificates observe, but the algorithm's own gap passes still happen (gap sampling
    needs them): with gap_every=1 their oracle calls are counted, and the same with or without
    certificates."""
    m, _, _ = _run(LEARNERS["bcfw-fw-gap"], "multiclass", None, refine=0)
    lr = m._learner
    assert lr.full_pass_oracle_calls > 0 and lr._had_full
    calls = lr.full_pass_oracle_calls
    m.certificate()
    assert lr.full_pass_oracle_calls == calls


# ----------------------------------------------------------------------------- engine level

def _file_stream(path, n=400, seed=0):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(4, 6))
    lines = []
    for _ in range(n):
        x = rng.normal(size=6)
        y = int(np.argmax(W @ x + 0.3 * rng.normal(size=4)))
        lines.append(json.dumps({"x": {f"f{j}": float(v) for j, v in enumerate(x)}, "y": y}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _engine(src, snapshot_every=None, **kw):
    from streamssvm.connectors.files import open_source
    from streamssvm.engine import Engine
    model = ss.MulticlassSSVM(learner=L.BCFW(lam=1e-2, replay=2, sampling="gap", cache=True, gap_every=1.0,
                                             seed=0))
    return Engine(model, open_source(src), task="multiclass", snapshot_every=snapshot_every, progress=False, **kw)


def _probes(seed=5, n=100):
    rng = np.random.default_rng(seed)
    return [{f"f{j}": float(v) for j, v in enumerate(rng.normal(size=6))} for _ in range(n)]


@pytest.mark.parametrize("batch_size", [None, 25])
def test_engine_snapshot_cadence_gives_the_same_model(tmp_path, batch_size):
    src = _file_stream(tmp_path / "s.jsonl")
    models = {}
    for every in (1, 50, None):
        eng = _engine(src, every, batch_size=batch_size)
        s = eng.run()
        assert s["examples_seen"] == 400
        # batched: one snapshot at the end of each batch that crosses a multiple
        n_snap = (400 // max(every, batch_size or 1)) if every else 1
        assert len(eng.history) == n_snap
        models[every] = eng.model
    probes = _probes()
    ref = models[None]
    p_ref = ref.predict_many(probes) if hasattr(ref, "predict_many") else [ref.predict_one(x) for x in probes]
    for every in (1, 50):
        assert_same_state(models[every]._learner.state(), ref._learner.state())
        assert [models[every].predict_one(x) for x in probes] == [ref.predict_one(x) for x in probes]
    assert len(p_ref) == len(probes)


def test_engine_max_examples_stop_then_resume_equals_uninterrupted(tmp_path):
    """A graceful stop (``max_examples``) takes an end-of-run certificate and a checkpoint;
    resuming from it must give the uninterrupted run's model exactly (the end-of-run
    certificate used to run BCFW's refreshing full pass before the checkpoint)."""
    src = _file_stream(tmp_path / "s.jsonl")
    full = _engine(src, 50)
    assert full.run()["examples_seen"] == 400
    first = _engine(src, 50, checkpoint_dir=tmp_path / "ck", max_examples=230)
    s1 = first.run()
    assert s1["examples_seen"] == 230 and s1["stopped"] == "max examples"
    second = _engine(src, 50, checkpoint_dir=tmp_path / "ck")
    s2 = second.run()
    assert s2["resumed_from"] is not None and s2["examples_seen"] == 400 and s2["new_examples"] == 170
    assert_same_state(second.model._learner.state(), full.model._learner.state())
    probes = _probes()
    assert [second.model.predict_one(x) for x in probes] == [full.model.predict_one(x) for x in probes]


# ----------------------------------------------------------------------------- conformance

def _learner_classes():
    return [obj for name, obj in vars(L).items()
            if inspect.isclass(obj) and issubclass(obj, Learner) and obj is not Learner]


ABSTRACT = sorted(name for name, v in vars(Learner).items() if getattr(v, "__isabstractmethod__", False)
                  or (isinstance(v, property) and getattr(v.fget, "__isabstractmethod__", False)))


def test_the_protocol_is_what_the_base_declares():
    assert set(ABSTRACT) == {"bind", "ensure", "learn", "refine", "predict", "certificate",
                             "n_blocks", "state", "restore"}   # learn_batch defaults to m learn calls


@pytest.mark.parametrize("cls", _learner_classes(), ids=lambda c: c.__name__)
def test_every_learner_implements_the_whole_protocol(cls):
    missing = []
    for name in ABSTRACT:
        impl = None
        for klass in cls.__mro__:
            if name in vars(klass):
                impl = vars(klass)[name]
                break
        fn = impl.fget if isinstance(impl, property) else impl
        if impl is None or getattr(fn, "__isabstractmethod__", False):
            missing.append(name)
    assert not missing, f"{cls.__name__} does not implement {missing}"
    # the argument orders of the protocol
    for name in ("bind", "ensure", "learn", "learn_batch", "refine", "predict", "restore"):
        want = list(inspect.signature(getattr(Learner, name)).parameters)[:]
        got = list(inspect.signature(getattr(cls, name)).parameters)
        assert len(got) == len(want), f"{cls.__name__}.{name}{tuple(got)} vs {tuple(want)}"
    assert not getattr(cls, "__abstractmethods__", None)
