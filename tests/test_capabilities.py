"""Declared capabilities: what the estimators, the CLI and streamssvm.distributed read instead of
asking which class a learner or an estimator is."""
import ast
import pathlib

import numpy as np
import pytest

import streamssvm as ss
from streamssvm import learners as L

LEARNERS = [L.BCFW, L.SGD, L.CuttingPlane, L.MEMOIR, L.GDMM, L.BMRM, L.Pragam]
ESTIMATORS = {ss.MulticlassSSVM: "multiclass", ss.MultiLabelSSVM: "multilabel", ss.SequenceTagger: "sequence",
              ss.ExtremeClassifier: "extreme"}
ROOT = pathlib.Path(ss.__file__).parent


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
def test_learner_declarations(cls):
    assert cls.mixing in (None, "dual", "primal")
    assert cls.distributed == (cls.mixing is not None)
    assert isinstance(cls.dense_weights, bool)
    assert cls.multilabel_inference in ("enum", "auto")
    assert cls.chain_losses is None or cls.default_chain_loss in cls.chain_losses
    assert cls.structures is None or all(isinstance(s, str) for s in cls.structures)


def test_declared_values():
    assert [c.__name__ for c in LEARNERS if c.mixing == "dual"] == ["BCFW"]
    assert [c.__name__ for c in LEARNERS if c.mixing == "primal"] == ["SGD", "MEMOIR"]
    assert [c.__name__ for c in LEARNERS if c.dense_weights] == ["BCFW", "SGD"]
    assert [c.__name__ for c in LEARNERS if c.multilabel_inference == "auto"] == ["SGD", "GDMM"]
    assert L.GDMM.default_chain_loss == "normalized" and L.BCFW.default_chain_loss == "hamming"


@pytest.mark.parametrize("cls", [c for c in LEARNERS if "multiclass" in (c.structures or ("multiclass",))],
                         ids=lambda c: c.__name__)
def test_dense_weights_is_what_emission_weights_returns(cls):
    est = ss.ExtremeClassifier if cls is L.MEMOIR else ss.MulticlassSSVM
    kw = {"mips": "exact"} if cls is L.MEMOIR else {}
    m = est(learner=cls(**kw), labels=["a", "b"])
    m.learn_one(np.array([1.0, 0.0]), "a")
    m.learn_one(np.array([0.0, 1.0]), "b")
    W = m.bound_learner.emission_weights()
    assert (W is not None) == cls.dense_weights
    if W is not None:
        assert W.shape == (3, 2)
    assert (m.bound_learner.weight_tables() is None) == (cls is L.MEMOIR)


def test_distributed_refusals_are_declared():
    with pytest.raises(ValueError, match="CuttingPlane is not supported by distributed learning"):
        L.CuttingPlane().check_distributed()
    with pytest.raises(ValueError, match="sparse rows"):
        L.MEMOIR(rows="sparse").check_distributed()
    L.MEMOIR(rows="auto").check_distributed(n_features=10)
    L.SGD().check_distributed()


@pytest.mark.parametrize("cls, task", ESTIMATORS.items(), ids=lambda c: getattr(c, "__name__", c))
def test_estimator_task(cls, task):
    assert cls.task == task


def test_coerce_input():
    x, y = ss.MulticlassSSVM().coerce_input([1, 2], "a")
    assert x.dtype == np.float64 and y == "a"
    with pytest.raises(TypeError, match="single value"):
        ss.ExtremeClassifier().coerce_input([1.0], ["a"])
    with pytest.raises(ValueError, match="flat features"):
        ss.MulticlassSSVM().coerce_input(np.ones((2, 2)), "a")
    assert ss.MultiLabelSSVM().coerce_input([1.0], ["a", "b"])[1] == {"a": True, "b": True}
    assert ss.MultiLabelSSVM().coerce_input([1.0], "a")[1] == {"a": True}
    assert ss.SequenceTagger().coerce_input(np.ones((2, 3)), ("N", "V"))[1] == ["N", "V"]
    with pytest.raises(TypeError, match="must be a list"):
        ss.SequenceTagger().coerce_input(np.ones((2, 3)), "N")


def _class_checks(path, names):
    """isinstance(..., <a learner / estimator class>) and ``type(...).__name__ == "<name>"`` sites."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
            ids = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            if ids & names:
                out.append(f"{path.name}:{node.lineno}")
        if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value in names
                                                 for c in node.comparators):
            out.append(f"{path.name}:{node.lineno}")
    return out


@pytest.mark.parametrize("rel", ["distributed/_mix.py", "distributed/_bcfw.py", "distributed/_cli.py",
                                 "estimators/sequence.py", "estimators/multilabel.py",
                                 "estimators/multiclass.py", "estimators/extreme.py"])
def test_no_class_dispatch_outside_own_module(rel):
    names = {c.__name__ for c in LEARNERS} | {c.__name__ for c in ESTIMATORS}
    assert _class_checks(ROOT / rel, names) == []
