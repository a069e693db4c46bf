"""The learners' declarative parameter specs (``params`` rows, :mod:`streamssvm.params`)."""
import inspect
import math

import pytest

from streamssvm import learners as L
from streamssvm.params import defaults

LEARNERS = [L.BCFW, L.SGD, L.CuttingPlane, L.MEMOIR, L.GDMM, L.BMRM, L.Pragam]


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
def test_spec_matches_constructor(cls):
    sig = inspect.signature(cls.__init__)
    args = [p for name, p in sig.parameters.items() if name != "self"]
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
