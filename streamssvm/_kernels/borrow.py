"""Arrays borrowed for a kernel call: the same arrays without numba's reference counts.

numba counts the references of every array a compiled function holds (its NRT meminfo): a
function increfs each array argument it binds, each array it takes out of a tuple, and decrefs
them where they die, one atomic read-modify-write per count (~8 ns on the 2-core test machine).
Its pruning pass removes the pairs it can prove useless within a basic block, a diamond or a
fan-out; those whose paths cross a loop or an early return stay. The bundles (``bundles.py``)
pass the state as tuples of arrays through every level of a step, so a block step counted ~117
pairs' worth of them and a 784-d multiclass batch ~676 per example (``learn_new_blocks_cm``:
counted with a debugger's breakpoints on ``NRT_incref`` / ``NRT_decref``), ~17% of the batch's
CPU time in ``perf``.

:func:`borrowed` gives a value with the meminfo (and the Python parent) of every array inside
it, through nested tuples, set to NULL: numba's ``NRT_incref`` / ``NRT_decref`` return at once
for a NULL meminfo, so the counts of every view, slice, unpacking and call on them cost a test
instead of an atomic operation. The data pointers, shapes and strides are the same: every read
and write is the same, to the bit.

Only for the arrays a kernel's caller owns for the whole call (its arguments; the Python caller
holds them until the kernel returns), or that the kernel itself keeps alive past every use of
the borrowed value, and only where no borrowed array escapes the call (returned to Python or
stored in a container that outlives it): a borrowed array keeps nothing alive.
"""
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _without_counts(context, builder, ty, val):
    """``val`` of numba type ``ty`` with the meminfo and parent of each array in it NULL."""
    if isinstance(ty, types.Array):
        ary = context.make_array(ty)(context, builder, value=val)
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        ary.parent = cgutils.get_null_value(ary.parent.type)
        return ary._getvalue()
    if isinstance(ty, types.BaseTuple) and any(isinstance(t, (types.Array, types.BaseTuple)) for t in ty.types):
        items = [_without_counts(context, builder, t, builder.extract_value(val, i)) for i, t in enumerate(ty.types)]
        return context.make_tuple(builder, ty, items)
    return val


@intrinsic
def borrowed(typingctx, x):
    """``x`` (an array, or a tuple of arrays and other values, nested) with its arrays borrowed:
    the same type and values, no reference counts (see the module docstring)."""
    def codegen(context, builder, signature, args):
        return _without_counts(context, builder, signature.args[0], args[0])
    return x(x), codegen
