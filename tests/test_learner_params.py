"""The learners' declarative parameter specs (``params`` rows, :mod:`streamssvm.params`)."""
import inspect
import math

import pytest

import streamssvm as ss
from streamssvm import learners as L
from streamssvm.params import defaults

LEARNERS = [L.BCFW, L.SGD, L.CuttingPlane, L.MEMOIR, L.GDMM, L.BMRM, L.Pragam]


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
def test_spec_matches_constructor(cls):
    sig = inspect.signature(cls.__init__)
    args = [p for name, p in sig.parameters.items() if name != "self" and p.kind is not p.VAR_KEYWORD]
    assert all(p.kind is p.KEYWORD_ONLY for p in args), "learner parameters are keyword-only"
    assert [p.name for p in args] == [r.name for r in cls.params]
    assert {p.name: p.default for p in args} == defaults(cls)
    assert all(r.help for r in cls.params)


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
def test_parameters_stored_as_passed(cls):
    lr = cls()
    assert lr._get_params() == defaults(cls)
    assert lr.clone()._get_params() == defaults(cls)
    lam = cls(lam=0.5)
    assert lam.lam == 0.5 and type(lam.lam) is float


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.0, -1.0])
def test_lam_finite_and_positive(cls, bad):
    with pytest.raises(ValueError, match="lam"):
        cls(lam=bad)


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
def test_positional_arguments_refused(cls):
    with pytest.raises(TypeError):
        cls(0.1)


def test_mixed_numeric_literals():
    assert L.SGD(t0="auto").t0 == "auto" and L.SGD(t0=5).t0 == 5
    assert L.Pragam(L="exact").L == "exact" and L.Pragam(L=2.0).L == 2.0
    with pytest.raises(ValueError, match="t0"):
        L.SGD(t0=-1.0)
    with pytest.raises(ValueError, match="L"):
        L.Pragam(L=0.0)
    with pytest.raises(TypeError, match="L"):
        L.Pragam(L="sometimes")


@pytest.mark.parametrize("make, name, value", [
    (lambda: L.BCFW(capacity=10), "window", 10),
    (lambda: L.CuttingPlane(capacity=7), "window", 7),
    (lambda: L.GDMM(capacity=5), "window", 5),
    (lambda: L.BMRM(eps=1e-5, capacity=9), "tol", 1e-5),
    (lambda: L.Pragam(eps=1e-4), "tol", 1e-4),
    (lambda: L.MEMOIR(average="none"), "averaging", False),
    (lambda: L.MEMOIR(average="uniform"), "avg_weighting", "uniform"),
    (lambda: L.SGD(averaging="uniform"), "avg_weighting", "uniform"),
    (lambda: L.SGD(averaging="none"), "averaging", False),
])
def test_former_names_and_values_are_deprecated_aliases(make, name, value):
    with pytest.warns(DeprecationWarning):
        lr = make()
    assert getattr(lr, name) == value
    assert set(lr._get_params()) == {p.name for p in type(lr).params}


def test_unknown_names_still_refused():
    with pytest.raises(TypeError, match="unexpected keyword argument 'capacityy'"):
        L.BCFW(capacityy=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        L.Pragam(window=3, bogus=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'capacity'"):
        L.SGD(capacity=3)        # SGD never had a capacity


def test_sgd_averaging_schemes_step_alike():
    """The former averaging strings and the new pair give the same learner."""
    with pytest.warns(DeprecationWarning):
        old = [L.SGD(averaging=v) for v in ("weighted", "uniform", "none")]
    new = [L.SGD(), L.SGD(avg_weighting="uniform"), L.SGD(averaging=False)]
    assert [o._avg_kind for o in old] == [n._avg_kind for n in new] == ["weighted", "uniform", "none"]


@pytest.mark.parametrize("make, former", [
    (lambda: ss.MulticlassSSVM(learner=L.BCFW(lam=0.1, window=20, seed=0)), {"window": "capacity"}),
    (lambda: ss.MulticlassSSVM(learner=L.BMRM(lam=0.1, tol=1e-4, window=20)), {"window": "capacity", "tol": "eps"}),
    (lambda: ss.ExtremeClassifier(learner=L.MEMOIR(mips="exact", averaging=False)), {"averaging": "average"}),
    (lambda: ss.MulticlassSSVM(learner=L.SGD(lam=0.1, avg_weighting="uniform")), {"averaging": "averaging"}),
])
def test_model_files_with_former_names_load(make, former):
    """A model file written before the rename (its learner params under the former names and
    values) loads into the same model, without a warning."""
    import warnings
    import numpy as np
    m = make()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    for x in X:
        m.learn_one(x, int(x[0] > 0))
    st = m.state()
    params = st["config"]["learner"]["params"]
    old = dict(params)
    for new, name in former.items():
        v = old.pop(new)
        if name == "average":
            v = "none" if v is False else old.pop("avg_weighting")
        elif name == "averaging":
            v = {"uniform": "uniform", "linear": "weighted"}[old.pop("avg_weighting")] if v else "none"
        old[name] = v
    st["config"]["learner"]["params"] = old
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m2 = type(m).from_state(st)
    assert m2.learner._get_params() == m.learner._get_params()
    assert [m2.predict_one(x) for x in X] == [m.predict_one(x) for x in X]
