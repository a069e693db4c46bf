"""Eleven overheads of numba's compiler that a cold start pays. All but the sixth and the ninth change
no compiled code; the sixth hands LLVM the same values without the stack round trips its first pass
removes, the ninth skips one pass of LLVM's machine code generation (the same results; the machine
code can differ in instruction order, register allocation and addressing).

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
4. **Dead extractions around reference counts.** To find the NRT meminfos inside a value (for an
   array's incref or decref, or a tuple of arrays': one per array) ``NRTContext.get_meminfos``
   emits an ``extractvalue`` for every field of the value, recursively, and keeps the meminfo
   fields only: an array's incref builds ~11 instructions for the one it needs. With our bundles
   (tuples of arrays, unpacked and passed at every level) those were ~29% of the LLVM instructions
   lowered for ``SequenceTagger``'s first records (97,600 -> 69,700), each built in Python, printed,
   parsed by LLVM and deleted by its first pass. :func:`_live_meminfos_only` visits only the fields
   whose type can hold a meminfo (numba's own ``contains_nrt_meminfo``): the same meminfos in the
   same order, so the same reference-count calls, without the dead instructions.
5. **Error-message markup.** numba highlights the messages of the typing errors it records while
   it tries the templates of a call (most of them discarded), and its colour scheme initializes
   and resets colorama's terminal wrapping for every piece highlighted (~0.35 CPU s where colorama
   is installed). :func:`_plain_markup` builds the same string without that set-up.
6. **Arrays read through memory.** numba reads a field of an array value (its data pointer, shape,
   strides) through a ``cgutils`` structure proxy that first stores the whole value into a stack
   slot (``alloca``, a zero store, the value's store) and then loads the field through a
   ``getelementptr``: five instructions and a slot for every array a function indexes, which
   LLVM's first pass (SROA) turns back into the value's fields. :func:`_array_fields_by_value`
   reads the fields of an array proxy made from a value with ``extractvalue`` while nothing has
   written it; its first write (or a request for its address) stores the value into a slot at the
   point the proxy was made, exactly where numba stores it, and from then on it is numba's proxy.
   ~10% fewer instructions lowered for ``SequenceTagger``'s first records. (numba's ``make_array``
   also asks the context for an ``__array__`` implementation of the type at every proxy, raising
   and formatting an error for a plain array: asked once per array type here.)
7. **The variables of an IR statement.** numba's analyses ask every statement for the variables it
   uses (``Inst.list_vars``) many times per function; the answer walks the statement's attributes
   recursively with an ``isinstance`` chain per value, source locations and names included (~0.8M
   calls on ``SequenceTagger``'s first records). :func:`_fast_list_vars` walks them with exact
   type checks first and skips the values that hold no variable: the same list, in the same
   order.
8. **One implementation of an overload per argument types.** numba keeps the implementation of an
   ``@overload`` it compiled for some argument types in a cache keyed by those types *and the
   calling function's compile flags*, so an overload called with the same types from one of our
   entry kernels (a CPython wrapper) and from an inner kernel (none) is compiled twice, and both
   copies are linked, optimized and turned into machine code (``Chain.decode`` on
   ``SequenceTagger``'s first records: ~0.2 CPU s). The caller's flags reach the implementation
   only through the four options a compile inherits from it (``nrt``, ``fastmath``,
   ``error_model``, ``forceinline``: ``CPUTargetOptions.finalize``); :func:`_one_impl_per_types`
   keys the cache on those instead of the whole flags: the same implementation compiled once.
9. **Loop strength reduction.** Of the machine-code passes LLVM runs on an entry kernel's module,
   loop strength reduction (rewriting a loop's address arithmetic into induction variables) was the
   second costliest after instruction selection: 0.26 of the 1.2 CPU s of ``learn_one_example``'s
   machine code. While our kernels' machine code is emitted (``JITCodeLibrary._finalize_specific``)
   LLVM's ``-disable-lsr`` option is on, and off again after: x86's addressing modes take the
   index arithmetic as it is. Measured, paired with the pass on, in the same code: Brown 3k
   sentences' stream, ``refine(1)`` and certificate, OCR words, digits as dicts and 784-d image
   batches ran as fast or faster, with the same weights and predictions. (The option is LLVM's,
   process-wide while it is on: numba compiles under its global compiler lock, and nothing else
   in the process emits machine code meanwhile; a user who set it globally gets it cleared.)
10. **NumPy loop searches.** numba types every ``+``, ``*``, ``<`` ... of two scalars through
   NumPy's ufunc rules too, each time searching the ufunc's loops for the argument types
   (``ufunc_find_matching_loop``): ~4,100 searches for 126 distinct questions on
   ``SequenceTagger``'s first records. :func:`_memo_ufunc_loops` keeps the answer per NumPy ufunc
   (whose loops never change) and argument types; the typing and lowering code that asks reads
   the answer only. A dynamic ufunc (``@vectorize``), whose loops grow, is searched each time.
11. **Template order.** Before it tries the typing templates of a function or an attribute,
   numba orders them by how specific their target is to the current one
   (``order_by_target_specificity``: a registry lookup per template and a sort), ~12,400 times
   for 93 distinct template lists on ``SequenceTagger``'s first records (~0.14 CPU s).
   :func:`_memo_template_order` keeps the order per target and template list (the list as it is
   at the call: templates registered later make a new key) and hands each caller a copy.

All of them are scoped like :mod:`linkonly`: they act only while one of our kernels (or what numba
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
        from numba.core import codegen, event, inline_closurecall, targetconfig
        from numba.core.datamodel import models
        from numba.core.runtime import context as nrt_context
        from numba.core import utils
        from numba.core.typing import context, npydecl, templates
        from numba.np import npyimpl, numpy_support
    except ImportError:
        return False
    ovl = getattr(templates, "_OverloadFunctionTemplate", None)
    lock = getattr(getattr(ffi, "lib", None), "_lock", None)
    return (isinstance(getattr(lock, "_cblist", None), list) and hasattr(event, "register")
            and getattr(inline_closurecall, "copy", None) is _copy
            and hasattr(inline_closurecall.InlineWorker, "inline_ir")
            and hasattr(codegen.CPUCodeLibrary, "_optimize_functions")
            and hasattr(codegen.JITCodeLibrary, "_finalize_specific")
            and hasattr(codegen.JITCPUCodegen, "_function_pass_manager")
            and hasattr(getattr(nrt_context, "NRTContext", None), "get_meminfos")
            and all(hasattr(models.DataModel, a) for a in ("traverse", "has_nrt_meminfo", "get_nrt_meminfo",
                                                           "contains_nrt_meminfo"))
            and all(hasattr(ovl, a) for a in ("_get_impl", "_build_impl"))
            and all(getattr(m, "ufunc_find_matching_loop", None) in (numpy_support.ufunc_find_matching_loop,
                                                                     _ORIG.get("ufunc_loops_memo"))
                    for m in (npydecl, npyimpl))
            and all(getattr(m, "order_by_target_specificity", None) in (
                _ORIG.get("order_by_target_specificity", utils.order_by_target_specificity),
                _ORIG.get("template_order_memo")) for m in (utils, context))
            and hasattr(getattr(targetconfig, "ConfigStack", None), "top_or_none")
            and _array_proxy_as_expected())


def _array_proxy_as_expected():
    try:
        from llvmlite import ir
        from numba.core import cgutils
        from numba.np import arrayobj
    except ImportError:
        return False
    proxy = cgutils._StructProxy
    from numba.core import ir as nir
    if "_rec_list_vars" not in nir.Inst.__dict__:
        return False
    return (callable(getattr(arrayobj, "make_array", None)) and hasattr(ir.IRBuilder(), "_anchor")
            and all(a in proxy.__dict__ for a in ("_get_ptr_by_index", "__getitem__", "_getpointer", "_getvalue",
                                                  "_setvalue")))


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


def _live_meminfos_only():
    from numba.core.runtime import context as nrt_context

    _ORIG["get_meminfos"] = nrt_context.NRTContext.get_meminfos
    may_hold = {}   # frontend type -> whether its data model can hold a meminfo

    def holds(dmm, ty):
        h = may_hold.get(ty)
        if h is None:
            h = may_hold[ty] = dmm[ty].contains_nrt_meminfo()
        return h

    def get_meminfos(self, builder, ty, val):
        if not _linkonly._ours():
            return _ORIG["get_meminfos"](self, builder, ty, val)
        dmm = self._context.data_model_manager
        datamodel = dmm[ty]
        meminfos = []
        if datamodel.has_nrt_meminfo():
            meminfos.append((ty, datamodel.get_nrt_meminfo(builder, val)))
        for mtyp, getter in datamodel.traverse(builder):
            if holds(dmm, mtyp):
                meminfos.extend(get_meminfos(self, builder, mtyp, getter(val)))
        return meminfos

    nrt_context.NRTContext.get_meminfos = get_meminfos


def _plain_markup():
    from numba.core import errors

    scheme = getattr(errors, "HighlightColorScheme", None)   # absent without colorama
    if scheme is None or not hasattr(scheme, "_markup"):
        return
    from colorama import Style
    _ORIG["markup"] = scheme._markup

    def _markup(self, msg, color=None, style=Style.BRIGHT):
        if not _linkonly._ours():
            return _ORIG["markup"](self, msg, color, style)
        # numba's string: the colour and style codes, the message, the reset code
        return (color or "") + (style or "") + msg + Style.RESET_ALL

    scheme._markup = _markup


def _array_fields_by_value():
    from numba.core import cgutils, types
    from numba.np import arrayobj

    make_array = _ORIG["make_array"] = arrayobj.make_array
    classes = {}

    def fields_by_value(array_type):
        """numba's ``make_array`` class for ``array_type``, reading an unwritten value's fields
        with ``extractvalue`` while one of our kernels compiles."""
        if type(array_type) is not types.Array:   # array-like types (with an __array__): numba's
            return make_array(array_type)
        cls = classes.get(array_type)
        if cls is None:
            cls = classes[array_type] = _by_value_class(make_array(array_type), array_type, cgutils)
        return cls

    import numba.core.inline_closurecall
    import numba.np.arraymath
    import numba.np.linalg
    for mod in (arrayobj, numba.np.arraymath, numba.np.linalg, numba.core.inline_closurecall):
        if getattr(mod, "make_array", None) is make_array:
            mod.make_array = fields_by_value


def _by_value_class(base, array_type, cgutils):
    from llvmlite import ir
    from numba.core.typing import signature

    ndim = array_type.ndim
    no_array_impl = {}   # kind of context -> whether it has no __array__ for array_type

    class ArrayByValue(base):
        """numba's array proxy; made from a value (no ``ref``) in one of our kernels, it keeps the
        value (``_ssa``) and where it was made until something writes it or takes its address."""

        def __init__(self, context, builder, value=None, ref=None):
            self._ssa = None
            anchor = builder._anchor
            if value is None or ref is not None or anchor == 0 or not _linkonly._ours():
                return base.__init__(self, context, builder, value, ref)
            self._context = context
            self._builder = builder
            self._datamodel = context.data_model_manager[self._fe_type]
            self._be_type = self._datamodel.get_value_type()
            if value.type != self._be_type:
                raise AssertionError(f"bad value type: expected {self._be_type}, got {value.type}")
            self._ssa = value
            self._made_after = builder.block.instructions[anchor - 1]
            self._value = self._outer_ref = None

        def _make_refs(self, ref):
            # numba's make_array asks the context for an ``__array__`` implementation of the type
            # each time (raising and formatting a NotImplementedError when there is none, as for
            # every plain array): asked once per array type and kind of context here
            if not _linkonly._ours():
                return base._make_refs(self, ref)
            plain = no_array_impl.get(type(self._context))
            if plain is None:
                try:
                    self._context.get_function("__array__", signature(array_type, array_type))
                    plain = False
                except NotImplementedError:
                    plain = True
                no_array_impl[type(self._context)] = plain
            return cgutils._StructProxy._make_refs(self, ref) if plain else base._make_refs(self, ref)

        def _to_memory(self):
            # numba's proxy: a slot (zero-filled in the entry block, as alloca_once always does)
            # holding the value from the point the proxy was made
            ref = cgutils.alloca_once(self._builder, self._be_type)
            at = ir.IRBuilder(self._made_after.parent)
            at.position_after(self._made_after)
            at.store(self._ssa, ref)
            self._value = self._outer_ref = ref
            self._ssa = None

        def _get_ptr_by_index(self, index):
            if self._ssa is not None:
                self._to_memory()
            return base._get_ptr_by_index(self, index)

        def __getitem__(self, index):
            if self._ssa is not None:
                return self._builder.extract_value(self._ssa, index)
            return base.__getitem__(self, index)

        def _getpointer(self):
            if self._ssa is not None:
                self._to_memory()
            return self._outer_ref

        def _getvalue(self):
            if self._ssa is not None:
                return self._ssa
            return base._getvalue(self)

        def _setvalue(self, value):
            if self._ssa is not None:
                self._to_memory()
            return base._setvalue(self, value)

        @property
        def shape(self):
            if self._ssa is not None and ndim > 0:
                return self._builder.extract_value(self._ssa, self._datamodel.get_field_position("shape"))
            return base.shape.fget(self)

    return ArrayByValue


def _fast_list_vars():
    from numba.core import ir

    Var, Inst, Loc = ir.Var, ir.Inst, ir.Loc
    stock = _ORIG["rec_list_vars"] = Inst._rec_list_vars
    leaves = (Loc, str, int, float, bool, type(None))

    def walk(val):
        t = type(val)
        if t is Var:
            return [val]
        if t is dict:
            vals = val.values()
        elif t is list or t is tuple:
            vals = val
        elif t in leaves:
            return []
        elif isinstance(val, Var):
            return [val]
        elif isinstance(val, Inst):
            return val.list_vars()
        elif isinstance(val, (list, tuple)):
            vals = val
        elif isinstance(val, dict):
            vals = val.values()
        else:
            return []
        out = []
        for v in vals:
            tv = type(v)
            if tv is Var:
                out.append(v)
            elif tv not in leaves:
                out.extend(walk(v))
        return out

    def _rec_list_vars(self, val):
        if not _linkonly._ours():
            return stock(self, val)
        return walk(val)

    Inst._rec_list_vars = _rec_list_vars


#: the options a compile inherits from the function whose compile asked for it (numba 0.68's
#: ``CPUTargetOptions.finalize``): all an overload's implementation takes from its caller's flags
INHERITED_OPTIONS = ("nrt", "fastmath", "error_model", "forceinline")


def _inherited(flags):
    """The values of :data:`INHERITED_OPTIONS` in ``flags`` (None: no compile on the stack), hashable."""
    if flags is None:
        return None
    fm = flags.fastmath
    return (bool(flags.nrt), frozenset(fm.flags) if hasattr(fm, "flags") else fm, flags.error_model,
            bool(flags.forceinline))


def _one_impl_per_types():
    from numba.core import targetconfig
    from numba.core.typing import templates

    cls = templates._OverloadFunctionTemplate
    stock = _ORIG["get_impl"] = cls._get_impl

    def _get_impl(self, args, kws):
        if not _linkonly._ours():
            return stock(self, args, kws)
        key = (self.context, tuple(args), tuple(kws.items()),
               ("inherited", _inherited(targetconfig.ConfigStack.top_or_none())))
        try:
            return self._impl_cache[key]
        except KeyError:   # (built outside the handler, as numba does: no chained KeyError)
            pass
        return self._build_impl(key, args, kws)

    cls._get_impl = _get_impl


def _no_loop_strength_reduction():
    from llvmlite import binding as ll
    from numba.core import codegen

    stock = _ORIG["finalize_specific"] = codegen.JITCodeLibrary._finalize_specific

    def _finalize_specific(self):
        if not _linkonly._ours():
            return stock(self)
        ll.set_option("", "-disable-lsr=true")
        try:
            return stock(self)
        finally:
            ll.set_option("", "-disable-lsr=false")

    codegen.JITCodeLibrary._finalize_specific = _finalize_specific


def _memo_ufunc_loops():
    import numpy as np
    from numba.core.typing import npydecl
    from numba.np import npyimpl

    stock = _ORIG["ufunc_find_matching_loop"] = npydecl.ufunc_find_matching_loop
    memo = {}

    def ufunc_find_matching_loop(ufunc, arg_types):
        if type(ufunc) is not np.ufunc or not _linkonly._ours():
            return stock(ufunc, arg_types)
        key = (ufunc, tuple(arg_types))
        try:
            return memo[key]
        except KeyError:
            pass
        loop = memo[key] = stock(ufunc, arg_types)
        return loop

    _ORIG["ufunc_loops_memo"] = ufunc_find_matching_loop
    npydecl.ufunc_find_matching_loop = ufunc_find_matching_loop
    npyimpl.ufunc_find_matching_loop = ufunc_find_matching_loop


def _memo_template_order():
    from numba.core import utils
    from numba.core.typing import context

    stock = _ORIG["order_by_target_specificity"] = utils.order_by_target_specificity
    memo = {}

    def order_by_target_specificity(target, templates, fnkey=''):
        if not _linkonly._ours():
            return stock(target, templates, fnkey)
        key = (target, tuple(templates))
        order = memo.get(key)
        if order is None:
            order = memo[key] = stock(target, templates, fnkey)   # (raises as numba does: nothing kept)
        return list(order)

    _ORIG["template_order_memo"] = order_by_target_specificity
    utils.order_by_target_specificity = order_by_target_specificity
    context.order_by_target_specificity = order_by_target_specificity


def install():
    """Install the eleven changes (idempotent); returns whether they are active."""
    if _state["installed"]:
        return True
    if not (supported() and _linkonly.install()):
        return False
    from numba.core import codegen, config, inline_closurecall

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
        timed = config.LLVM_PASS_TIMINGS   # (llvmlite times a pass builder's passes only once)
        for func in ll_module.functions:
            if func.is_declaration:
                continue
            if fpm is None or timed:
                fpm, pb = self._codegen._function_pass_manager()
            with self._recorded_timings.record(f"Function passes on {func.name!r}", pb):
                fpm.run(func, pb)

    _quiet_llvm_lock()
    _live_meminfos_only()
    _plain_markup()
    _array_fields_by_value()
    _fast_list_vars()
    _one_impl_per_types()
    _no_loop_strength_reduction()
    _memo_ufunc_loops()
    _memo_template_order()
    inline_closurecall.InlineWorker.inline_ir = inline_ir
    codegen.CPUCodeLibrary._optimize_functions = _optimize_functions
    _state["installed"] = True
    return True
