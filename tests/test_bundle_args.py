"""Bundles passed whole between our kernels (``_kernels/bundle_args.py``)."""
import numpy as np
import pytest
from llvmlite import ir as llir
from numba import njit, types
from numba.core import lowering

from streamssvm import kernel_cache
from streamssvm._kernels import bundle_args as ba
from streamssvm._kernels.fnptr import function_at

pytestmark = pytest.mark.skipif(not ba.supported(), reason="numba version without the change")


def _ours(f):
    """A function compiled as if it were one of the package's kernels (the change is scoped to them)."""
    f.__module__ = "streamssvm._kernels.toy"
    return f


def _plain(f):
    return f


def _pair(mark_inner, mark_outer):
    @njit(no_cpython_wrapper=True)
    @mark_inner
    def inner(b, k):
        x, (y, s) = b
        z = np.empty(k, np.float64)
        for i in range(k):
            z[i] = x[i] * s + y[i % y.shape[0]]
        return (z, x), z.sum()

    @njit
    @mark_outer
    def outer(b, k):
        t = 0.0
        for r in range(3):
            pair, v = inner(b, k)
            t += v + pair[1][r]
        return t
    return outer


def _lowered_argument_types(fn, *args):
    """The LLVM parameter types of every function lowered while ``fn(*args)`` compiles, by name."""
    seen = {}
    orig = lowering.Lower.lower

    def lower(self):
        out = orig(self)
        seen[self.fndesc.qualname] = [a.type for a in self.function.args[2:]]
        return out

    lowering.Lower.lower = lower
    try:
        fn(*args)
    finally:
        lowering.Lower.lower = orig
    return seen


BUNDLE = (np.arange(6.0), (np.array([1.0, -1.0]), 0.5))


def test_installed_by_the_kernels_package():
    assert ba._state["installed"]


def test_our_kernels_take_a_bundle_as_one_argument():
    seen = _lowered_argument_types(_pair(_ours, _ours), BUNDLE, 4)
    inner = seen["_pair.<locals>.inner"]
    assert len(inner) == 2 and isinstance(inner[0], llir.LiteralStructType)   # the bundle, whole
    stock = _lowered_argument_types(_pair(_plain, _plain), BUNDLE, 4)["_pair.<locals>.inner"]
    assert len(stock) > 10 and not any(isinstance(t, llir.LiteralStructType) for t in stock)   # flattened


@pytest.mark.parametrize("marks", [(_ours, _ours), (_plain, _plain), (_ours, _plain), (_plain, _ours)],
                         ids=["ours", "stock", "stock_calls_ours", "ours_calls_stock"])
def test_callers_and_callees_agree_whoever_compiles_them(marks):
    """Each function is called as its own convention says, whoever calls it: the same values."""
    x, (y, s) = BUNDLE
    z = x[:4] * s + y[np.arange(4) % 2]
    assert _pair(*marks)(BUNDLE, 4) == 3 * z.sum() + x[0] + x[1] + x[2]


def test_a_call_through_an_address_passes_the_bundle_as_the_callee_takes_it():
    @_ours
    def scaled_sum(b, s):
        x, y = b
        return (x.sum() + y.sum()) * s

    bundle_t = types.Tuple((types.float64[::1], types.float64[::1]))
    sig = types.float64(bundle_t, types.float64)
    at = function_at(types.FunctionType(sig))

    @njit
    @_ours
    def call(addr, b):
        return at(addr)(b, 2.0)

    # the callee compiled as jit_address compiles its twins (no CPython wrapper), not cached: a test
    # module's function has no cache locator
    cres = njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)(scaled_sum).get_compile_result(sig)
    addr = int(cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))
    b = (np.arange(4.0), np.ones(3))
    assert call(addr, b) == 2.0 * (6.0 + 3.0)


def test_user_code_keeps_numba_convention():
    @njit(no_cpython_wrapper=True)
    def inner(b):
        return b[0].sum() + b[1].sum()

    @njit
    def outer(b):
        return inner(b)

    b = (np.arange(3.0), np.ones(2))
    seen = _lowered_argument_types(outer, b)
    inner_args = [v for k, v in seen.items() if k.endswith("inner")][0]
    assert not any(isinstance(t, llir.LiteralStructType) for t in inner_args)
    assert outer(b) == 5.0


def test_the_kernel_cache_is_apart_without_it(monkeypatch):
    on = kernel_cache.cache_dir()
    monkeypatch.setenv("STREAMSSVM_COMPILE_OVERHEAD", "0")
    assert not ba.supported()
    assert kernel_cache.cache_dir() != on
