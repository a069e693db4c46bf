"""Kernels only linked into other kernels get no machine code of their own (``_kernels/linkonly.py``)."""
import numpy as np
import pytest
from numba import njit

from streamssvm._kernels import linkonly

_INNER = dict(no_cpython_wrapper=True, no_cfunc_wrapper=True)

pytestmark = pytest.mark.skipif(not linkonly.supported(), reason="numba version without the deferral")


def _ours(f):
    """A function compiled as if it were one of the package's kernels (the deferral is scoped to them)."""
    f.__module__ = "streamssvm._kernels.toy"
    return f


def _make(ours=True):
    """Fresh functions (one compile per test): an inner callee, an inner that raises, a caller."""
    mark = _ours if ours else (lambda f: f)

    @njit(**_INNER)
    @mark
    def inner(a, k):
        s = 0.0
        for i in range(a.size):
            s += a[i] * k
        return s

    @njit(**_INNER)
    @mark
    def checked(v):
        if v < 0:
            raise ValueError("negative value", v)
        return v

    @njit
    @mark
    def outer(a, k):
        return inner(a, k) + checked(a[0])

    return inner, checked, outer


def _lib(disp):
    (cres,) = disp.overloads.values()
    return cres.library


def test_installed_by_the_kernels_package():
    import streamssvm._kernels  # noqa: F401
    assert linkonly._state["installed"]


def test_a_callee_without_entry_is_linked_but_never_turned_into_machine_code():
    inner, checked, outer = _make()
    a = np.arange(5.0)
    assert outer(a, 2.0) == 2.0 * a.sum() + a[0]
    lib = _lib(inner)
    assert lib._finalized and lib.__dict__.get("_ssvm_deferred") is True
    assert not lib._codegen._engine.is_symbol_defined(next(f.name for f in lib.get_defined_functions()))
    assert not _lib(outer).__dict__.get("_ssvm_deferred", False)   # the entry point is compiled as usual


def test_an_exception_raised_in_a_deferred_callee_reaches_python():
    inner, checked, outer = _make()
    with pytest.raises(ValueError, match="negative value"):
        outer(np.array([-1.0, 2.0]), 1.0)
    assert outer(np.array([1.0, 2.0]), 1.0) == 4.0


def test_asking_for_the_machine_code_compiles_it_on_demand():
    inner, checked, outer = _make()
    outer(np.ones(3), 1.0)
    lib = _lib(inner)
    assert lib.__dict__.get("_ssvm_deferred")
    asm = inner.inspect_asm(inner.signatures[0])
    assert asm and not lib.__dict__.get("_ssvm_deferred")
    assert lib._codegen._engine.is_symbol_defined(next(f.name for f in lib.get_defined_functions()))
    assert outer(np.ones(3), 1.0) == 4.0


def test_the_same_results_with_numba_stock_behaviour():
    a = np.linspace(-1.0, 3.0, 17) ** 3
    got = _make()[2](a[4:], 0.7)
    linkonly.uninstall()
    try:
        inner, checked, outer = _make()
        want = outer(a[4:], 0.7)
        assert not _lib(inner).__dict__.get("_ssvm_deferred", False)
    finally:
        assert linkonly.install()
    assert got == want


def test_code_compiled_for_anything_else_keeps_numba_behaviour():
    inner, checked, outer = _make(ours=False)
    assert outer(np.ones(2), 1.0) == 3.0
    assert not _lib(inner).__dict__.get("_ssvm_deferred", False)
    assert inner.py_func.__module__ == __name__


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("STREAMSSVM_LINK_ONLY", "0")
    assert not linkonly.supported()


def test_compile_flags_compare_and_hash_as_numba_does():
    """``install`` replaces numba's equality and hash of compile flags by cheaper ones (the typing
    cache of every overload call compares them): the same answers as numba's own on random flags,
    equal pairs included (an option set explicitly to its default equals it unset)."""
    import random

    from numba.core.compiler import Flags
    from numba.core.targetconfig import TargetConfig
    assert TargetConfig.__eq__ is not linkonly._ORIG["flags_eq"]
    rng = random.Random(0)
    opts = [(k, o) for k, o in Flags.options.items() if isinstance(o.default, bool)]

    def flags():
        f = Flags()
        for k, o in rng.sample(opts, rng.randint(0, 4)):
            setattr(f, k, o.default if rng.random() < 0.5 else not o.default)
        return f
    n_equal = 0
    for _ in range(3000):
        a, b = flags(), flags()
        assert (a == b) == linkonly._ORIG["flags_eq"](a, b)
        assert hash(a) == linkonly._ORIG["flags_hash"](a)
        n_equal += a == b
    assert n_equal > 100   # the equal pairs were exercised too
