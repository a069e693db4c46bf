"""Kernels called through their address: code a kernel may need but that a first use should not
compile (the chains' sparse Viterbi, needed from 32 tags on).

A kernel that calls another one compiles the callee with it (numba types and links every call).
Called instead through an address held in a bundle (an int64, :func:`jit_address`), the callee
compiles when Python first asks for its address, and the caller compiles once whatever the
address: no type changes when the callee becomes available. :func:`function_at` makes the
intrinsic that turns such an address into a numba first-class function of a given type, called
with numba's own calling convention (arrays, tuples and exceptions as in a direct call), so its
arguments must have that type exactly (a call with other argument types fails to compile).

An int64 in a bundle keeps numba's fast argument typing (a ``cfunc`` object in a bundle costs
~27 us per kernel call in numba's generic ``typeof``; measured). Address 0 means "not compiled":
a kernel checks it before calling (a call through 0 crashes).

>>> from numba import njit, types
>>> from streamssvm._kernels.chain import chain_loss_norm   # (L, Ki) -> the loss's normalizer
>>> sig = types.float64(types.int64, types.int64)
>>> at = function_at(types.FunctionType(sig))
>>> @njit(cache=False)
... def call(addr, L):
...     return at(addr)(L, 1) if addr != 0 else -1.0
>>> call(0, 4), call(jit_address(chain_loss_norm, sig), 4)
(-1.0, 4.0)
"""
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from numba import njit

from .common import _JIT

_TWINS = {}


def jit_address(kernel, sig):
    """The address of ``kernel`` compiled for ``sig`` (a numba signature), for :func:`function_at`.
    The kernel compiles as a twin of its own (the same function, cached, without a CPython
    wrapper), made on first use: a later process loads it from the kernel cache, and the callers
    that link ``kernel`` itself are not touched. The compiled code lives as long as the process
    (the twin keeps it)."""
    twin = _TWINS.get(kernel)
    if twin is None:
        twin = _TWINS[kernel] = njit(**dict(_JIT, no_cpython_wrapper=True))(kernel.py_func)
    cres = twin.get_compile_result(sig)
    return int(cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))


def function_at(fn_type):
    """An intrinsic ``at(addr)`` (inside kernels) giving the first-class function of type
    ``fn_type`` (``numba.types.FunctionType``) compiled at ``addr`` (:func:`jit_address`)."""

    @intrinsic
    def at(typingctx, addr):
        if not isinstance(addr, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            fn = cgutils.create_struct_proxy(fn_type)(context, builder)
            vp = context.get_value_type(types.voidptr)
            fn.c_addr = vp(None)    # no C wrapper: the call takes the jit address
            fn.py_addr = vp(None)
            fn.jit_addr = builder.inttoptr(context.cast(builder, args[0], addr, types.int64), vp)
            return fn._getvalue()
        return fn_type(addr), codegen
    return at
