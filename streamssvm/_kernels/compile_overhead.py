"""Three overheads of numba's compiler that a cold start pays and that change no compiled code.

Measured on ``SequenceTagger``'s first records (numba 0.68, llvmlite 0.45-0.50), each a few tenths
of the ~12 CPU s of compiling:

1. **LLVM lock events.** numba registers callbacks on llvmlite's lock that broadcast a
   ``numba:llvm_lock`` start and end event around every call into LLVM (~31,000 calls: ~62,000
   events, each notifying the timers of every compile on the stack, ~0.3 CPU s). Their only use is
   the ``llvm_lock`` timer in a compiled function's metadata. While one of our kernels compiles
   (:func:`linkonly._ours`: a kernel of this package, or what numba compiles for it) the
   callbacks are detached from the lock, and put back when it is done: our kernels' metadata
   reads an ``llvm_lock`` time of 0, other numba code keeps numba's behaviour.
2. **The inliner's copies.** ``InlineWorker.inline_ir`` (``inline="always"``) deep-copies the
   callee's IR twice, one block at a time: every block's copy copies the function's whole scope
   (every variable) again, O(blocks x variables). :func:`_shared_scope_copy` copies the blocks of
   one IR with one memo, so they share one copy of their scope, as the blocks of the IR they are
   copied from do (numba's inliner asserts that they have a single scope).
3. **Function pass managers.** ``CPUCodeLibrary._optimize_functions`` builds a new function pass
   manager for every function of a module, declarations included; one manager per module runs the
   same passes on the same functions (llvmlite's pass managers are meant to be reused).

All three are scoped like :mod:`linkonly`: they act only while one of our kernels (or what numba
compiles for it) compiles; a user's own numba code in the same process compiles as stock numba
compiles it.

:func:`install` applies them (idempotent) when the numba in use is the one tested and the
internals they replace are as expected; ``STREAMSSVM_COMPILE_OVERHEAD=0`` leaves numba as it is.
"""
import copy as _copy
import os

from . import linkonly as _linkonly

_SUPPORTED = ((0, 68),)
_ORIG = {}
_state = {"installed": False}


def supported():
    """Whether :func:`install` applies to the numba and llvmlite in use."""
    if os.environ.get("STREAMSSVM_COMPILE_OVERHEAD", "1") == "0" or _linkonly._numba_version() not in _SUPPORTED:
        return False
    try:
        from llvmlite.binding import ffi
        from numba.core import codegen, event, inline_closurecall
    except ImportError:
        return False
    lock = getattr(getattr(ffi, "lib", None), "_lock", None)
    return (isinstance(getattr(lock, "_cblist", None), list) and hasattr(event, "register")
            and getattr(inline_closurecall, "copy", None) is _copy
            and hasattr(inline_closurecall.InlineWorker, "inline_ir")
            and hasattr(codegen.CPUCodeLibrary, "_optimize_functions")
            and hasattr(codegen.JITCPUCodegen, "_function_pass_manager"))


class _SharedScopeCopy:
    """The ``copy`` module as ``inline_ir`` sees it during one call: a block is deep-copied with
    the memo of its scope, so the blocks of one IR share one copy of the scope and its variables."""

    def __init__(self):
        self._memos = {}

    def deepcopy(self, x, memo=None):
        from numba.core import ir
        if memo is None and type(x) is ir.Block:
            memo = self._memos.get(id(x.scope))
            if memo is None:
                memo = self._memos[id(x.scope)] = {}
                memo[id(memo)] = [x.scope]   # deepcopy's keep-alive slot: the scope outlives its key
        return _copy.deepcopy(x, memo)

    def __getattr__(self, name):
        return getattr(_copy, name)


def _quiet_llvm_lock():
    from llvmlite.binding import ffi
    from numba.core import event

    lock = ffi.lib._lock
    detached = []   # per nested compile: the callbacks it took off the lock (None: it took none)

    class _Compiles(event.Listener):
        def on_start(self, ev):
            if _linkonly._ours() and lock._cblist:
                detached.append(lock._cblist)
                lock._cblist = []
            else:
                detached.append(None)

        def on_end(self, ev):
            if detached:
                cbs = detached.pop()
                if cbs is not None:
                    lock._cblist = cbs + lock._cblist

    # after linkonly's listener: ``_ours`` already counts the compile that starts
    event.register("numba:compile", _Compiles())


def install():
    """Install the three changes (idempotent); returns whether they are active."""
    if _state["installed"]:
        return True
    if not (supported() and _linkonly.install()):
        return False
    from numba.core import codegen, inline_closurecall

    _ORIG.update(inline_ir=inline_closurecall.InlineWorker.inline_ir,
                 optimize_functions=codegen.CPUCodeLibrary._optimize_functions)

    def inline_ir(self, *args, **kwargs):
        if not _linkonly._ours():   # code compiled for anything else: numba's own inliner
            return _ORIG["inline_ir"](self, *args, **kwargs)
        inline_closurecall.copy = _SharedScopeCopy()
        try:
            return _ORIG["inline_ir"](self, *args, **kwargs)
        finally:
            inline_closurecall.copy = _copy

    def _optimize_functions(self, ll_module):
        if not _linkonly._ours():
            return _ORIG["optimize_functions"](self, ll_module)
        ll_module.data_layout = self._codegen._data_layout
        fpm = None
        for func in ll_module.functions:
            if func.is_declaration:
                continue
            if fpm is None:
                fpm, pb = self._codegen._function_pass_manager()
            with self._recorded_timings.record(f"Function passes on {func.name!r}", pb):
                fpm.run(func, pb)

    _quiet_llvm_lock()
    inline_closurecall.InlineWorker.inline_ir = inline_ir
    codegen.CPUCodeLibrary._optimize_functions = _optimize_functions
    _state["installed"] = True
    return True
