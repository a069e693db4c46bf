"""numba's compile overheads that change no compiled code (``_kernels/compile_overhead.py``)."""
import copy

import numpy as np
import pytest
from numba import njit
from numba.core import event

from streamssvm._kernels import compile_overhead as co
from streamssvm._kernels import linkonly as _linkonly

pytestmark = pytest.mark.skipif(not co.supported(), reason="numba version without the changes")


def _ours(f):
    """A function compiled as if it were one of the package's kernels (the changes are scoped to them)."""
    f.__module__ = "streamssvm._kernels.toy"
    return f


def _kernel(ours):
    mark = _ours if ours else (lambda f: f)

    @njit
    @mark
    def f(a):
        s = 0.0
        for i in range(a.size):
            if a[i] > 0:
                s += a[i]
            else:
                s -= a[i] * 0.5
        return s
    return f


def _inlining_kernel(mark):
    """A kernel inlining a step (``inline="always"``), each function marked by ``mark``."""
    @njit(inline="always")
    @mark
    def step(a, i):
        if a[i] > 0:
            return a[i] * 2.0
        return -a[i]

    @njit
    @mark
    def run(a):
        s = 0.0
        for i in range(a.size):
            s += step(a, i)
        return s
    return run


def _llvm_lock_events(fn, *args):
    seen = []

    class _Count(event.Listener):
        def on_start(self, ev):
            seen.append(1)

        def on_end(self, ev):
            pass

    listener = _Count()
    event.register("numba:llvm_lock", listener)
    try:
        fn(*args)
    finally:
        event.unregister("numba:llvm_lock", listener)
    return len(seen)


def test_installed_by_the_kernels_package():
    import streamssvm._kernels  # noqa: F401
    assert co._state["installed"]


def test_our_kernels_compile_without_llvm_lock_events_and_the_callbacks_come_back():
    from llvmlite.binding import ffi
    before = list(ffi.lib._lock._cblist)
    assert before   # numba's callbacks (what the detaching would otherwise have nothing to do for)
    a = np.array([1.0, -2.0, 3.0])
    assert _llvm_lock_events(_kernel(True), a) == 0
    assert ffi.lib._lock._cblist == before
    # anything else numba compiles keeps its events
    assert _llvm_lock_events(_kernel(False), a) > 100
    assert ffi.lib._lock._cblist == before


def test_an_error_while_compiling_our_kernel_puts_the_callbacks_back():
    from llvmlite.binding import ffi
    before = list(ffi.lib._lock._cblist)

    @njit
    @_ours
    def bad(a):
        return a.no_such_attribute

    with pytest.raises(Exception):
        bad(np.zeros(2))
    assert ffi.lib._lock._cblist == before


def test_the_blocks_of_one_ir_are_copied_with_one_scope():
    """numba's per-block deep copies give every block its own copy of the scope; the shared copy
    gives the blocks one copy (as in the IR copied), and a second IR its own."""
    from numba.core import compiler, ir

    def f(x):
        y = 0
        for i in range(x):
            if i % 2:
                y += i
            else:
                y -= 1
        return y

    func_ir = compiler.run_frontend(f)
    assert len(func_ir.blocks) > 3
    scope = next(iter(func_ir.blocks.values())).scope
    per_block = [copy.deepcopy(b) for b in func_ir.blocks.values()]
    assert len({id(b.scope) for b in per_block}) == len(per_block)
    shared = co._SharedScopeCopy()
    blocks = [shared.deepcopy(b) for b in func_ir.blocks.values()]
    scopes = {id(b.scope) for b in blocks}
    assert len(scopes) == 1 and id(scope) not in scopes
    assert all(type(b) is ir.Block for b in blocks)
    assert [[str(s) for s in b.body] for b in blocks] == [[str(s) for s in b.body] for b in func_ir.blocks.values()]
    other = [co._SharedScopeCopy().deepcopy(b) for b in func_ir.blocks.values()]
    assert {id(b.scope) for b in other}.isdisjoint(scopes)


def test_inlined_kernels_compute_what_numba_stock_computes():
    from numba.core import inline_closurecall

    make = lambda: _inlining_kernel(_ours)   # noqa: E731

    a = np.array([1.5, -2.0, 0.25, -7.0])
    ours = make()(a)
    patched = inline_closurecall.InlineWorker.inline_ir
    inline_closurecall.InlineWorker.inline_ir = co._ORIG["inline_ir"]
    try:
        stock = make()(a)
    finally:
        inline_closurecall.InlineWorker.inline_ir = patched
    assert ours == stock == 3.0 + 2.0 + 0.5 + 7.0


def test_function_passes_give_numba_stock_ir():
    from llvmlite import binding as llvm
    f = _kernel(False)
    f(np.zeros(3))
    (cres,) = f.overloads.values()
    lib = cres.library
    text = str(lib._final_module)
    m1, m2 = llvm.parse_assembly(text), llvm.parse_assembly(text)
    co._ORIG["optimize_functions"](lib, m1)
    _linkonly._compiling.append(True)   # as while one of our kernels compiles (the change is scoped to them)
    try:
        lib._optimize_functions(m2)
    finally:
        _linkonly._compiling.pop()
    assert str(m1) == str(m2)


def test_code_compiled_for_anything_else_keeps_numba_stock_inliner_and_passes(monkeypatch):
    """Only our kernels' compiles take the shared-scope copy and the one pass manager: a user's
    own numba code in the same process compiles with numba's (a changed one would raise here)."""
    from numba.core import codegen

    def boom(*a, **k):
        raise AssertionError("changed compile path taken for foreign code")

    monkeypatch.setattr(co, "_SharedScopeCopy", boom)
    monkeypatch.setattr(codegen.JITCPUCodegen, "_function_pass_manager", boom, raising=False)
    stock_fpm = co._ORIG["optimize_functions"]
    monkeypatch.setitem(co._ORIG, "optimize_functions",
                        lambda lib, mod: None)   # stock passes skipped: only the delegation is checked

    run = _inlining_kernel(lambda f: f)   # not one of ours
    assert run(np.array([1.0, 2.0])) == 6.0
    assert stock_fpm is not None


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("STREAMSSVM_COMPILE_OVERHEAD", "0")
    assert not co.supported()
