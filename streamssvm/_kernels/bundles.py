"""Typed bundles of the kernels' state: what the entry points of ``streamssvm._kernels.bcfw``
take instead of 40-48 positional arrays.

Each bundle is declared here once, as a named tuple (fields by name, so a builder cannot swap
two arrays silently), and handed to numba as a *plain* tuple (:func:`pack`): numba types a plain
tuple in its fast C dispatch path, whereas a named tuple costs a slow Python ``typeof`` on every
call (measured: ~15 us more per call). The kernels unpack them in this field order.

The builders live with the objects that own the state: :func:`model` (from a structure),
``structures.Weights.bundle()``, ``BlockStore.arena()``, ``Workspace.scratch()``, and the BCFW
learner's averaging / step configuration.

>>> import numpy as np
>>> from streamssvm.structures import MultiClass
>>> m = model(MultiClass(), K=3, Kc=4, C=1.0 - np.eye(4))
>>> m[:4]
(np.uint8(1), 3, 4, False)
"""
from collections import namedtuple

from .structops import tag

#: The structure as the kernels see it: ``tag`` (the structure's tag, ``structops.tag``: its numpy
#: scalar type selects the structure's code when a kernel compiles, its value is the code), ``K``
#: labels in use, ``Kc`` label capacity, ``use_trans`` (transition / pairwise weights in T),
#: ``C`` the (Kc, Kc) cost matrix, ``graph`` what the structure's decoders take besides the weights,
#: built by the structure (``Structure.graph``): for hierarchies five int64 arrays, the parents CSR,
#: the children CSR and ``[is_tree, n_leaves]`` (see ``_kernels/hierarchy.py``); for chains the
#: two int64 addresses of the sparse Viterbi (``chain.sparse_viterbi``: compiled when the chain
#: first holds ``VITERBI_SPARSE_MIN_K`` tags, (0, 0) before); an empty tuple for the other
#: structures (no arrays to pass on through every kernel level).
Model = namedtuple("Model", ["tag", "K", "Kc", "use_trans", "C", "graph"])

#: Unnormalized weights ``(E, T, B)``: emissions (d, Kc), transitions (Kc, Kc), start/end (2, Kc).
WeightsBundle = namedtuple("WeightsBundle", ["E", "T", "B"])

#: The BlockStore's arrays: the int / float arenas ``Iar``, ``Far``; ``meta`` (slots x N_META
#: offsets and sizes); per slot: ``gest`` gap estimates, ``last_oracle`` tick of the last oracle
#: call, ``lval`` L_i (slack rescaling); ``alive`` the dense list of live slots, ``pos`` slot ->
#: index in ``alive``, ``n`` live blocks; ``tree``/``tree_size`` the gap sum-tree (size 0: none);
#: ``cw`` the example weight c_i per slot (1: unweighted) and ``csum`` = [N], their sum over the
#: held blocks (the kernels keep it as blocks arrive and leave; see ``bcfw.py``); ``layout`` the
#: blocks' layout as a type (``layout.pairs_layout``: sparse chain blocks or dense ones, with averaging
#: accumulators or without); ``moves``
#: (int64: next int, end int, next float, end float, ints grown, floats grown) the arenas' region
#: where a kernel moves a sparse chain block whose M entries are full (``chainsparse.sp_move_grown``;
#: ``BlockStore.arena`` sets it aside, all zeros for the other stores).
Arena = namedtuple("Arena", ["Iar", "Far", "meta", "gest", "last_oracle", "lval", "alive", "pos", "n",
                             "tree", "tree_size", "cw", "csum", "layout", "moves"])

#: Scratch buffers (see ``streamssvm.workspace.Workspace``): scores ``S``, Viterbi table ``V``,
#: back-pointers ``bp``, label marks ``ybuf``, a labeling ``lab``, a statistic ``dbuf``, the
#: chains' slack DP table ``V3`` (a (1, 1, 1) placeholder when unused).
Scratch = namedtuple("Scratch", ["S", "V", "bp", "ybuf", "lab", "dbuf", "V3"])

#: Weight averaging over a window: ``t0`` the tick where it started (-1: off), ``(ZE, ZT, ZB)``
#: the weighted sums of the block statistics, ``facc`` the accumulated loss terms.
Averaging = namedtuple("Averaging", ["t0", "ZE", "ZT", "ZB", "facc"])

#: Block-step configuration: ``lam`` regularization, ``step_type`` (``bcfw.step_rule``), ``use_cache``
#: oracle cache on, ``F`` / ``nu`` its parameters, ``g_full`` the last full gap, ``sampling``
#: (SAMPLE_*) for replays, ``replay`` steps after each new block, ``slack`` slack rescaling,
#: ``lam_n_max`` the cap on lam * n (inf: none; see ``BCFW(lam_n_cap=...)``), ``grams`` whether
#: held blocks may lack a Gram matrix (``bcfw.gram_rule``: its type selects the code compiled).
StepConfig = namedtuple("StepConfig", ["lam", "step_type", "use_cache", "F", "nu", "g_full", "sampling",
                                       "replay", "slack", "lam_n_max", "grams"])

#: One new example for ``learn_one_example``: its CSR tokens, ground truth, the feature mark
#: buffer of the Gram computation, the ``slot`` its block goes to and the block it evicts
#: (``victim``, -1: none; ``bcfw.NO_VICTIM``, of its own type, when the kernel need not compile evictions).
#: With ``slot`` = ``bcfw.PREDICT``, a record to predict: its labeling goes to ``ytrue``, at the
#: weights ``scale * (E - zc * ZE, T, B)`` (``scale`` and ``zc`` are read for prediction only).
Example = namedtuple("Example", ["tok_ptr", "fidx", "fval", "ytrue", "mark", "slot", "victim", "scale", "zc"])

#: Examples to predict: ``ex_tok`` example -> tokens, ``tok_ptr``/``fidx``/``fval`` the CSR,
#: ``lab_ptr`` example -> its slice of the output.
Batch = namedtuple("Batch", ["ex_tok", "tok_ptr", "fidx", "fval", "lab_ptr"])


def pack(bundle):
    """The plain tuple numba receives (see the module docstring)."""
    return tuple(bundle)


def model(structure, K, Kc, C):
    """The :data:`Model` bundle of a structure with ``K`` labels in use at capacity ``Kc``."""
    return pack(Model(tag=tag(structure.kind), K=int(K), Kc=int(Kc), use_trans=bool(structure.use_trans), C=C,
                      graph=structure.graph(int(K))))
