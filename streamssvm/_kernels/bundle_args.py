"""Bundles passed whole between our kernels (cold start).

numba's calling convention flattens every argument of a compiled function into scalars
(``datamodel.ArgPacker``): an array is 7 fields (9 LLVM values with its shape and strides), so a
call that passes a bundle of 14 arrays extracts ~130 values at the call site and the callee
rebuilds the tuple from them with as many ``insertvalue`` instructions. Our kernels pass their
state as such bundles at every level (``bundles.py``): on ``SequenceTagger``'s first records that
marshalling was ~16% of the LLVM instructions numba built in Python, printed, had LLVM parse and
optimize, and then deleted again (the calls are inlined).

:func:`install` passes an argument whose type is an array or a tuple holding one (a bundle) as one
LLVM aggregate value instead, for the functions of this package's kernels only (the rule is a function
of the callee: its mangled name is in ``streamssvm._kernels``, and of its argument types; every
other argument, and every function of numba or of a user, is passed as numba passes it). Caller
and callee agree because every place numba builds a function's LLVM type, its arguments or a call
to it asks the same rule:

- a function declared or defined (``BaseContext.declare_function``), its arguments read
  (``decode_arguments``) and named (``decorate_function``), a direct call (``call_function`` of a
  named function), the Python and C wrappers of an entry point and an unresolved (recursive)
  reference: by the function's name;
- a call through an address (a first-class function, :mod:`fnptr`): by the caller, one of our
  kernels (``linkonly._ours``) calling one of ours (the only addresses our kernels call are our
  kernels' own, :func:`fnptr.jit_address`).

The same values reach the callee (LLVM splits aggregate arguments into their scalar parts when a
call is not inlined); results are bit-identical. Because code compiled with and without it must
not be linked together, the kernel cache folder is keyed on whether it is on
(:func:`streamssvm.kernel_cache.cache_dir`). Guarded like :mod:`compile_overhead` (numba 0.68 and
the internals it wraps); ``STREAMSSVM_COMPILE_OVERHEAD=0`` leaves numba's convention.
"""
import threading

from . import linkonly as _linkonly

_ORIG = {}
_state = {"installed": False}
_rule = threading.local()     # .stack: per patched call, whether the function at hand is ours


def _prefix():
    from numba.core.itanium_mangler import mangle_identifier
    return "_ZN" + "".join(mangle_identifier(p) for p in __name__.split(".")[:2])


_PREFIX = None


def ours(name):
    """Whether a mangled function name is one of this package's kernels."""
    return bool(name) and name.startswith(_PREFIX)


def _stack():
    s = getattr(_rule, "stack", None)
    if s is None:
        s = _rule.stack = []
    return s


def _holds_array(ty, memo={}):
    from numba.core import types
    h = memo.get(ty)
    if h is None:
        if isinstance(ty, types.Array):
            h = True
        elif isinstance(ty, types.BaseTuple):
            h = any(_holds_array(t) for t in ty.types)
        else:
            h = False
        memo[ty] = h
    return h


def is_bundle(ty):
    """Whether an argument of type ``ty`` is passed whole: an array, or a tuple holding one."""
    return _holds_array(ty)


class BundlePacker:
    """``datamodel.ArgPacker`` with every bundle argument passed as its LLVM value, the other
    arguments flattened as numba flattens them."""

    def __init__(self, dmm, fe_args):
        from numba.core.datamodel.packer import ArgPacker
        self.dmm = dmm
        self._n = len(fe_args)
        self._parts = []      # per argument: (LLVM value type, None) or (None, numba's packer)
        tys = []
        for ty in fe_args:
            if is_bundle(ty):
                vt = dmm.lookup(ty).get_value_type()
                self._parts.append((vt, None, 1))
                tys.append(vt)
            else:
                p = ArgPacker(dmm, (ty,))
                self._parts.append((None, p, len(p.argument_types)))
                tys.extend(p.argument_types)
        self._tys = tuple(tys)

    def as_arguments(self, builder, values):
        if len(values) != self._n:
            raise TypeError(f"invalid number of args: expected {self._n}, got {len(values)}")
        out = []
        for v, (vt, p, _) in zip(values, self._parts):
            if p is not None:
                out.extend(p.as_arguments(builder, [v]))
                continue
            if v.type != vt:   # the same tuple typed as another (a UniTuple as a Tuple): field by field
                w = vt(None)
                for i in range(len(vt.elements) if hasattr(vt, "elements") else vt.count):
                    w = builder.insert_value(w, builder.extract_value(v, i), i)
                v = w
            out.append(v)
        return tuple(out)

    def _split(self, args):
        args, parts, i = list(args), [], 0
        for _, _, n in self._parts:
            parts.append(args[i:i + n])
            i += n
        return parts

    def from_arguments(self, builder, args):
        return [a[0] if p is None else p.from_arguments(builder, a)[0]
                for a, (_, p, _) in zip(self._split(args), self._parts)]

    def assign_names(self, args, names):
        for a, (_, p, _), name in zip(self._split(args), self._parts, names):
            if p is None:
                a[0].name = name
            else:
                p.assign_names(a, [name])

    @property
    def argument_types(self):
        return self._tys


def _by_name(method, name_of):
    """``method`` run with the rule decided by the name ``name_of(*args)`` gives (None: by the
    caller, see the module docstring)."""
    def run(*args, **kwargs):
        name = name_of(*args, **kwargs)
        if name is None:
            return method(*args, **kwargs)
        s = _stack()
        s.append(ours(name))
        try:
            return method(*args, **kwargs)
        finally:
            s.pop()
    run.__wrapped__ = method
    return run


def supported():
    """Whether :func:`install` applies to the numba in use."""
    import os
    if os.environ.get("STREAMSSVM_COMPILE_OVERHEAD", "1") == "0" or _linkonly._numba_version() not in _linkonly._SUPPORTED:
        return False
    try:
        from numba.core import base, callconv, cpu
        from numba.core.datamodel.packer import ArgPacker  # noqa: F401
    except ImportError:
        return False
    return (hasattr(callconv.BaseCallConv, "_get_arg_packer") and hasattr(callconv.BaseCallConv, "decode_arguments")
            and all(hasattr(callconv.CPUCallConv, a) for a in ("call_function", "decorate_function", "get_function_type"))
            and all(hasattr(base.BaseContext, a) for a in ("declare_function", "call_unresolved"))
            and all(hasattr(cpu.CPUContext, a) for a in ("create_cpython_wrapper", "create_cfunc_wrapper")))


def install():
    """Install the convention (idempotent); returns whether it is active."""
    global _PREFIX
    if _state["installed"]:
        return True
    if not (supported() and _linkonly.install()):
        return False
    from llvmlite import ir
    from numba.core import base, callconv, cpu

    _PREFIX = _prefix()
    _ORIG["get_arg_packer"] = callconv.BaseCallConv._get_arg_packer

    packers = {}   # (data model manager, argument types) -> BundlePacker (they keep no state)

    def _get_arg_packer(self, argtypes):
        s = _stack()
        mine = s[-1] if s else _linkonly._ours()
        if mine and any(is_bundle(t) for t in argtypes):
            dmm = self.context.data_model_manager
            key = (id(dmm), tuple(argtypes))
            p = packers.get(key)
            if p is None or p.dmm is not dmm:
                p = packers[key] = BundlePacker(dmm, argtypes)
            return p
        return _ORIG["get_arg_packer"](self, argtypes)

    callconv.BaseCallConv._get_arg_packer = _get_arg_packer
    patches = [
        (base.BaseContext, "declare_function", lambda self, module, fndesc, *a, **k: fndesc.mangled_name),
        (base.BaseContext, "call_unresolved", lambda self, builder, name, *a, **k: name),
        (callconv.BaseCallConv, "decode_arguments", lambda self, builder, argtypes, func, *a, **k: func.name),
        (callconv.CPUCallConv, "decorate_function", lambda self, fn, *a, **k: fn.name),
        (callconv.CPUCallConv, "call_function",
         lambda self, builder, callee, *a, **k: callee.name if isinstance(callee, ir.Function) else None),
        (cpu.CPUContext, "create_cpython_wrapper", lambda self, library, fndesc, *a, **k: fndesc.llvm_func_name),
        (cpu.CPUContext, "create_cfunc_wrapper", lambda self, library, fndesc, *a, **k: fndesc.llvm_func_name),
    ]
    for cls, attr, name_of in patches:
        _ORIG[(cls, attr)] = cls.__dict__[attr]
        setattr(cls, attr, _by_name(cls.__dict__[attr], name_of))
    _state["installed"] = True
    return True


def uninstall():
    """Put numba's convention back (for tests; code compiled before keeps its own)."""
    if not _state["installed"]:
        return
    from numba.core import callconv
    callconv.BaseCallConv._get_arg_packer = _ORIG.pop("get_arg_packer")
    for key in [k for k in _ORIG if isinstance(k, tuple)]:
        cls, attr = key
        setattr(cls, attr, _ORIG.pop(key))
    _state["installed"] = False
