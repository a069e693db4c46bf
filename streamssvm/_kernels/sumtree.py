"""The block sampler's sum tree and sampling rules (``BCFW(sampling=...)``), shared by the
sampler after ``np.random.seed`` (:func:`streamssvm._kernels.bcfw.sample_block`) and by its
seed-free twin (:func:`streamssvm._kernels.mtseed.mt_sample_block`).

The tree of ``size`` leaves is an array of ``2 * size`` values: leaf ``j`` at ``size + j``,
each inner node ``i`` the sum of its children ``2 i`` and ``2 i + 1``, the root at 1.
"""
from numba import njit

from .common import _INNER

#: how the steps after a new block choose theirs: given slots, uniform over the held blocks,
#: proportional to the blocks' gap estimates (the sum tree)
SAMPLE_GIVEN, SAMPLE_UNIFORM, SAMPLE_GAP = 0, 1, 2


@njit(**_INNER)
def tree_update(tree, size, slot, value):
    i = size + slot
    tree[i] = value
    i //= 2
    while i >= 1:
        tree[i] = tree[2 * i] + tree[2 * i + 1]
        i //= 2


@njit(**_INNER)
def tree_sample(tree, size, r):
    node = 1
    x = r * tree[1]
    while node < size:
        left = 2 * node
        if x < tree[left]:
            node = left
        else:
            x -= tree[left]
            node = left + 1
    return node - size


from .common import guard_inner as _guard_inner  # noqa: E402 (last: it sees every kernel above)

_guard_inner(globals())   # a Python call of an _INNER kernel raises (common.InnerKernel)
