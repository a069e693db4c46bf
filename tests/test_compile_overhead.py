"""numba's compile overheads that change no compiled code (``_kernels/compile_overhead.py``)."""
import copy

import re

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


def _meminfo_types():
    from numba import types
    a1 = types.float64[::1]
    a2 = types.Array(types.int64, 2, "C")
    return [a1, a2, types.int64, types.Tuple((a1, types.int64, a2)),
            types.Tuple((types.UniTuple(a1, 3), types.boolean, types.Tuple((a2, types.float64)))),
            types.UniTuple(types.int64, 4)]


def _emit_meminfos(ty, ours):
    """The meminfos numba finds in a value of type ``ty`` (an argument of an empty function), and
    the instructions emitted to find them, with our change (``ours``) or numba's own."""
    from llvmlite import ir as llir
    from numba.core import cgutils
    from numba.core.registry import cpu_target
    ctx = cpu_target.target_context.subtarget(enable_nrt=True)   # as numba lowers a kernel
    mod = llir.Module()
    fn = cgutils.get_or_insert_function(mod, llir.FunctionType(llir.VoidType(), [ctx.get_value_type(ty)]), "f")
    builder = llir.IRBuilder(fn.append_basic_block())
    if ours:
        _linkonly._compiling.append(True)   # as while one of our kernels compiles
        try:
            found = ctx.nrt.get_meminfos(builder, ty, fn.args[0])
        finally:
            _linkonly._compiling.pop()
    else:
        found = co._ORIG["get_meminfos"](ctx.nrt, builder, ty, fn.args[0])
    return found, fn.blocks[0].instructions


def _extraction_path(value):
    """The chain of field indices an extracted value comes from (the argument: ())."""
    from llvmlite import ir as llir
    path = []
    while isinstance(value, llir.instructions.ExtractValue):
        path = list(value.indices) + path
        value = value.aggregate
    return tuple(path)


@pytest.mark.parametrize("ty", _meminfo_types(), ids=str)
def test_meminfos_are_numba_stock_ones_without_the_dead_extractions(ty):
    stock, stock_ins = _emit_meminfos(ty, ours=False)
    ours, ours_ins = _emit_meminfos(ty, ours=True)
    assert [t for t, _ in ours] == [t for t, _ in stock]
    assert [_extraction_path(v) for _, v in ours] == [_extraction_path(v) for _, v in stock]
    assert len(ours_ins) <= len(stock_ins)
    if stock:   # an array inside: numba extracts every field of it, we extract its meminfo only
        assert len(ours_ins) < len(stock_ins)


def test_kernels_passing_bundles_of_arrays_count_references_as_numba_stock():
    """A kernel that takes, unpacks, rebuilds, returns and drops tuples of arrays: the same values
    and no leaked or doubly freed array, with the change (ours) and without it."""
    from numba.core.runtime import _nrt_python, rtsys

    def make(mark):
        @njit(no_cpython_wrapper=True)
        @mark
        def inner(b, k):
            x, y, s = b
            z = np.empty(k, np.float64)
            for i in range(k):
                z[i] = x[i] * s + y[i % y.shape[0]]
            return (z, x), z.sum()

        @njit
        @mark
        def run(b, k):
            t = 0.0
            keep = b[0]
            for r in range(3):
                pair, v = inner(b, k)
                t += v + pair[1][0]
                keep = pair[0]
            return t, keep
        return run

    b = (np.arange(5.0), np.array([1.0, -1.0]), 0.5)
    results = []
    was_on = _nrt_python.memsys_stats_enabled()
    _nrt_python.memsys_enable_stats()
    for mark in (_ours, lambda f: f):
        f = make(mark)
        f(b, 4)
        before = rtsys.get_allocation_stats()
        t, keep = f(b, 4)
        del keep
        after = rtsys.get_allocation_stats()
        assert after.alloc - before.alloc == after.free - before.free
        assert after.mi_alloc - before.mi_alloc == after.mi_free - before.mi_free
        results.append(t)
    if not was_on:
        _nrt_python.memsys_disable_stats()
    assert results[0] == results[1]


def test_meminfos_of_code_compiled_for_anything_else_come_from_numba(monkeypatch):
    calls = []
    stock = co._ORIG["get_meminfos"]

    def counting(*a, **k):
        calls.append(1)
        return stock(*a, **k)

    monkeypatch.setitem(co._ORIG, "get_meminfos", counting)
    mine = _kernel(True)
    mine(np.zeros(3))
    assert not calls
    _kernel(False)(np.zeros(3))
    assert calls


def test_error_markup_is_numba_stock_string():
    from numba.core import errors
    scheme = getattr(errors, "HighlightColorScheme", None)
    if scheme is None or "markup" not in co._ORIG:
        pytest.skip("numba formats error messages without colorama here")
    from colorama import Fore
    s = scheme(errors.themes["dark_bg"])
    for color in (None, Fore.RED):
        for style in (None, "\x1b[1m"):
            stock = co._ORIG["markup"](s, "No implementation of function", color, style)
            _linkonly._compiling.append(True)   # as while one of our kernels compiles
            try:
                ours = s._markup("No implementation of function", color, style)
            finally:
                _linkonly._compiling.pop()
            assert ours == stock
    assert s.errmsg("x") == co._ORIG["markup"](s, "x", s._errmsg)


def _array_kernel(mark):
    """Reads and writes through array values: a reshape (numba takes the array's address), views,
    shapes, element stores, a new array, arrays returned."""
    @njit
    @mark
    def f(a, b):
        m = a.reshape((2, 3))
        s = m[1, 2] + b.shape[0]
        c = b[1:]
        c[0] = s
        t = 0.0
        for i in range(c.shape[0]):
            t += c[i] * a[i]
        z = np.empty_like(a)
        z[:] = a * 2.0
        return t, m.sum(), z, b
    return f


def _lowered_instructions(fn, *args):
    from numba.core import lowering
    ops = []
    orig = lowering.Lower.lower

    def lower(self):
        out = orig(self)
        ops.extend(i.opname for bb in self.function.blocks for i in bb.instructions)
        return out

    lowering.Lower.lower = lower
    try:
        res = fn(*args)
    finally:
        lowering.Lower.lower = orig
    return res, ops


def test_array_fields_read_by_value_compute_what_numba_stock_computes():
    a = np.arange(6.0)
    out = []
    for mark in (_ours, lambda f: f):
        b = np.array([1.0, 2.0, 3.0, 4.0])
        t, msum, z, b2 = _array_kernel(mark)(a, b)
        out.append((t, msum, z.tolist(), b2.tolist(), b.tolist()))
    assert out[0] == out[1]
    assert out[0][4][1] == 9.0   # c[0] = m[1, 2] + b.shape[0], written into b[1]


def test_array_fields_read_by_value_need_fewer_instructions():
    a, b = np.arange(6.0), np.ones(4)
    _, ours = _lowered_instructions(_array_kernel(_ours), a, b.copy())
    _, stock = _lowered_instructions(_array_kernel(lambda f: f), a, b.copy())
    assert ours.count("alloca") < stock.count("alloca")
    assert len(ours) < len(stock)


def test_statement_variables_are_numba_stock_ones():
    """``Inst.list_vars`` while our kernels compile: the same variables in the same order as
    numba's own walk, for every statement of the IR of kernels compiled here."""
    from numba.core import ir, untyped_passes
    stock = co._ORIG["rec_list_vars"]
    seen = []
    orig = untyped_passes.ReconstructSSA.run_pass

    def run_pass(self, state):
        out = orig(self, state)
        for blk in state.func_ir.blocks.values():
            for inst in blk.body:
                seen.append((inst, list(inst.list_vars()), stock(inst, inst.__dict__)))
        return out

    untyped_passes.ReconstructSSA.run_pass = run_pass
    try:
        _array_kernel(_ours)(np.arange(6.0), np.ones(4))
        _inlining_kernel(_ours)(np.arange(4.0) - 2.0)
    finally:
        untyped_passes.ReconstructSSA.run_pass = orig
    assert len(seen) > 50
    _linkonly._compiling.append(True)   # as while one of our kernels compiles
    try:
        for inst, _, want in seen:
            got = inst._rec_list_vars(inst.__dict__)
            assert [v.name for v in got] == [v.name for v in want], inst
    finally:
        _linkonly._compiling.pop()
    assert any(isinstance(inst, ir.Assign) and len(want) > 1 for inst, _, want in seen)


def _overload_called_from_an_entry_and_an_inner_kernel(mark):
    """(entry kernel, implementation): the entry (a CPython wrapper) calls an overload and an inner
    kernel (none) that calls it with the same argument types, every function marked by ``mark``."""
    from numba.extending import overload

    def doubled(a, i):
        raise NotImplementedError

    @mark
    def impl(a, i):
        return a[i] * 2.0

    overload(doubled, jit_options=dict(no_cpython_wrapper=True, no_cfunc_wrapper=True))(lambda a, i: impl)

    @njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
    @mark
    def inner(a, i):
        return doubled(a, i) + 1.0

    @njit(no_cfunc_wrapper=True)
    @mark
    def entry(a):
        return doubled(a, 0) + inner(a, 1)
    return entry, impl


def _compiles_of(fn, py_func, *args):
    seen = []

    class _Count(event.Listener):
        def on_start(self, ev):
            if getattr((ev.data or {}).get("dispatcher"), "py_func", None) is py_func:
                seen.append(tuple((ev.data or {}).get("args", ())))

        def on_end(self, ev):
            pass

    listener = _Count()
    event.register("numba:compile", listener)
    try:
        value = fn(*args)
    finally:
        event.unregister("numba:compile", listener)
    return value, seen


def test_an_overload_called_with_the_same_types_from_an_entry_and_an_inner_kernel_compiles_once():
    a = np.array([1.5, -2.0])
    value, seen = _compiles_of(*_overload_called_from_an_entry_and_an_inner_kernel(_ours), a)
    assert value == 3.0 + (-4.0 + 1.0)
    assert len(seen) == 1
    # numba stock (code compiled for anything else): the implementation is compiled per caller's flags
    value, seen = _compiles_of(*_overload_called_from_an_entry_and_an_inner_kernel(lambda f: f), a)
    assert value == 3.0 + (-4.0 + 1.0)
    assert len(seen) == 2 and seen[0] == seen[1]


def test_the_key_of_an_overload_keeps_the_options_a_compile_inherits():
    from numba.core import compiler
    plain, fast, numpy_errors = compiler.Flags(), compiler.Flags(), compiler.Flags()
    fast.fastmath = True
    numpy_errors.error_model = "numpy"
    keys = {co._inherited(f) for f in (plain, fast, numpy_errors)}
    assert len(keys) == 3 and co._inherited(None) is None
    other = compiler.Flags()
    other.no_cpython_wrapper = True   # not inherited: the same implementation
    assert co._inherited(other) == co._inherited(plain)
    assert set(co.INHERITED_OPTIONS) == {"nrt", "fastmath", "error_model", "forceinline"}


def _machine_code(fn, *args):
    """``fn``'s machine code (compiled by this call), its symbols' names and directives left out."""
    fn(*args)
    (sig,) = fn.signatures
    asm = re.sub(r"_ZN\S+", "<name>", fn.inspect_asm(sig))
    return [ln for ln in asm.splitlines() if not ln.strip().startswith((".", "#")) or ln.strip().startswith(".LBB")]


def _strided_kernel(ours):
    """A loop whose machine code loop strength reduction changes (strided loads and stores)."""
    mark = _ours if ours else (lambda f: f)

    @njit
    @mark
    def f(a, b, n):
        for i in range(n):
            b[3 * i] = a[2 * i] + a[2 * i + 1]
            b[3 * i + 1] = a[i]
        return b[:3 * n].sum()
    return f


def test_our_machine_code_skips_loop_strength_reduction_and_the_option_comes_back(monkeypatch):
    """Witnessed by the machine code itself. (An earlier version looked for the pass's name in numba's
    LLVM pass timings, which is flaky even for numba's stock kernels: LLVM's legacy pass manager keys a
    pass's timer by the pass object's address, so a pass allocated where one of an earlier compile
    lay is timed under that pass's name, and "Loop Strength Reduction" went missing from about one
    compile in ten; CI failed on it.)"""
    import llvmlite.binding as ll
    args = (np.arange(20.0), np.zeros(20), 6)
    stock = _machine_code(_strided_kernel(False), *args)
    ll.set_option("", "-disable-lsr=true")
    try:   # (the pass changes this loop's machine code)
        assert _machine_code(_strided_kernel(False), *args) != stock
    finally:
        ll.set_option("", "-disable-lsr=false")
    assert _machine_code(_strided_kernel(False), *args) == stock
    ours = _machine_code(_strided_kernel(True), *args)
    with monkeypatch.context() as m:   # our kernel again, the option left alone
        m.setattr(ll, "set_option", lambda *a: None)
        ours_with_lsr = _machine_code(_strided_kernel(True), *args)
    assert ours != ours_with_lsr
    # anything else numba compiles afterwards gets LLVM's pass (the option was put back)
    assert _machine_code(_strided_kernel(False), *args) == stock
    assert _strided_kernel(True)(*args) == _strided_kernel(False)(*args)


def test_function_passes_of_a_module_of_several_functions_are_timed_when_numba_times_passes(monkeypatch):
    """Regression: one pass manager per module (change 3) reused its pass builder for every function,
    and llvmlite times a pass builder only once: with ``NUMBA_LLVM_PASS_TIMINGS=1``, a first compile
    of one of our kernels (numba's NRT module, several functions) raised ``RuntimeError``."""
    import llvmlite.binding as ll
    from numba.core import config
    from numba.core.registry import cpu_target
    monkeypatch.setattr(config, "LLVM_PASS_TIMINGS", True)
    mod = ll.parse_assembly("define i64 @f(i64 %a) {\n  %b = add i64 %a, 0\n  ret i64 %b\n}\n"
                            "define i64 @g(i64 %a) {\n  %b = mul i64 %a, 1\n  ret i64 %b\n}\n")
    lib = cpu_target.target_context.codegen().create_library("several_functions")
    _linkonly._compiling.append(True)   # as while one of our kernels compiles
    try:
        lib._optimize_functions(mod)
    finally:
        _linkonly._compiling.pop()
    assert [r.name for r in lib.recorded_timings] == ["Function passes on 'f'", "Function passes on 'g'"]


def test_numpy_loop_searches_give_numba_stock_answers_once_per_question():
    from numba import types
    from numba.core.typing import npydecl
    from numba.np import npyimpl, numpy_support
    search = npydecl.ufunc_find_matching_loop
    assert search is npyimpl.ufunc_find_matching_loop and search is not numpy_support.ufunc_find_matching_loop
    questions = [(np.add, (types.int64, types.int64)), (np.multiply, (types.float64, types.int32)),
                 (np.less, (types.int64, types.float64)), (np.sqrt, (types.float32,)),
                 (np.add, (types.int64, types.IntegerLiteral(1)))]
    _linkonly._compiling.append(True)   # as while one of our kernels compiles
    try:
        for ufunc, args in questions:
            got = search(ufunc, list(args))
            assert got == numpy_support.ufunc_find_matching_loop(ufunc, list(args))
            assert search(ufunc, args) is got   # the same answer, kept
        # a dynamic ufunc's loops grow: asked each time
        from numba import vectorize
        dyn = vectorize(lambda a: a + 1)
        dyn(np.arange(3))
        assert search(dyn, (types.int64,)) is not search(dyn, (types.int64,))
    finally:
        _linkonly._compiling.pop()
    # anything else numba compiles asks numba
    assert search(np.add, (types.int64, types.int64)) is not search(np.add, (types.int64, types.int64))


def test_template_orders_are_numba_stock_ones_kept_per_target_and_template_list():
    import operator

    from numba.core import utils
    from numba.core.registry import cpu_target
    from numba.core.target_extension import get_local_target
    from numba.core.typing import context
    order = utils.order_by_target_specificity
    assert order is context.order_by_target_specificity and order is not co._ORIG["order_by_target_specificity"]
    ctx = cpu_target.typing_context
    ctx.refresh()
    target = get_local_target(ctx)
    templates = list(ctx._functions[operator.add])
    stock = co._ORIG["order_by_target_specificity"](target, templates, "add")
    _linkonly._compiling.append(True)   # as while one of our kernels compiles
    try:
        first = order(target, templates, "add")
        assert first == stock
        first.append("mutated by a caller")   # each caller gets its own copy
        assert order(target, templates, "add") == stock
        assert order(target, templates[:3], "add") == co._ORIG["order_by_target_specificity"](target, templates[:3])
    finally:
        _linkonly._compiling.pop()
    assert order(target, templates, "add") == stock
