"""What the two GDMM kernel sets share: their typed bundles and counter / mode codes.

GDMM is the greedy direction method of multipliers of Yen, Huang, Zhong, Zhang, Ravikumar,
Dhillon, "Dual Decomposed Learning with Factorwise Oracles for Structural SVMs of Large Output
Domain" (NIPS 2016). Its kernels live in :mod:`streamssvm._kernels.gdmm_chain` (chains: unigram
and bigram factors) and :mod:`streamssvm._kernels.gdmm_multilabel` (pairwise multi-label: binary
unigram and pairwise interaction factors).

The kernels' state travels as the bundles below, with the convention of
:mod:`streamssvm._kernels.bundles`: each bundle is declared here once as a named tuple (fields by
name for the Python side, which builds, grows and saves them) and handed to numba as a *plain*
tuple (:func:`pack`; a named tuple costs a slow Python ``typeof`` on every call). The kernels
unpack a bundle, in this field order, only in the functions that use its fields; between jitted
functions the tuples travel whole, at no cost.

>>> import numpy as np
>>> step = chain_step(s=0.5, rho=1.0, eta=1.0, bi_mode=ORACLE_HEAP, uni_mode=UNI_SLICE, nu=1, qp_iters=5,
...                   heaps=True, solver=SOLVER_QP, inner=1, rounds=1, mult=True)
>>> type(step) is tuple, step[:3]
(True, (0.5, 1.0, 1.0))
"""
from collections import namedtuple

_JIT = dict(cache=True, nogil=True, no_cfunc_wrapper=True)

# ---------------------------------------------------------------------------- chains
#: examples held: ``ex_ptr`` example -> its tokens, ``ex_alive``; per token: the CSR of its
#: features (``tok_ptr``, ``fidx``, ``fval``), its label ``ytrue``, ``xsq`` = |x~_t|^2, ``first`` /
#: ``last`` (start / end of its chain), ``linv`` = 1 / L (the normalized-Hamming weight), ``cw`` its
#: example's weight c_i (1.0 unweighted; see :mod:`streamssvm._kernels.gdmm_chain`)
ChainData = namedtuple("ChainData", "ex_ptr ex_alive tok_ptr fidx fval ytrue xsq first last linv cw")
#: unigram blocks (one row per token): active labels, marginals, multipliers of the left / right
#: bigram, active-set sizes
Unigrams = namedtuple("Unigrams", "lab mu lamL lamR cnt")
#: bigram blocks (indexed by their left token): active pairs (a, b), marginals, sizes
Bigrams = namedtuple("Bigrams", "a b mu cnt")
#: max-heaps over the transition table T: global (keys a * Kc + b), per row (columns), per column
#: (rows), each with its position index
Heaps = namedtuple("Heaps", "g gpos r rpos c cpos")
#: lazy weighted average of the iterates (Lacoste-Julien, Jaggi, Schmidt, Pletscher, "Block-
#: Coordinate Frank-Wolfe Optimization for Structural SVMs", ICML 2013, weights proportional to
#: the step index): ZW / ZT accumulate W_(s-1) dU so that sum_s s U_s = W_k U_k - Z with
#: W_k = k (k + 1) / 2; coef[0] = W_(s-1) of the current step, < 0 when not averaging
LazyAverage = namedtuple("LazyAverage", "ZW ZT coef")
#: scratch space (dense label-indexed buffers kept zero between calls)
ChainScratch = namedtuple("ChainScratch", "augL augR mkL mkR rows cols aux auxv fbuf ibuf ibuf2 changed uacc")
#: the dual variables: (Unigrams, Bigrams)
ChainDual = namedtuple("ChainDual", "U B")
#: the weights and what is kept in step with them: unnormalized emissions ``Wu`` ((2 + d) x Kc,
#: feature-major, rows 0 / 1 the start / end biases), transitions ``T`` (Kc x Kc), the ``H``
#: :data:`Heaps` over T, the ``A`` :data:`LazyAverage`
ChainWeights = namedtuple("ChainWeights", "Wu T H A")
#: the structure as the chain kernels see it: ``K`` labels in use, ``Kc`` capacity, ``use_trans``,
#: ``C`` the (Kc, Kc) cost matrix
ChainModel = namedtuple("ChainModel", "K Kc use_trans C")
#: a pass's configuration: ``s`` = 1 / (lam n), ``rho`` penalty, ``eta`` multiplier step,
#: ``bi_mode`` (ORACLE_*), ``uni_mode`` (UNI_*), ``nu`` slices of the sampled unigram oracle,
#: ``qp_iters``, ``heaps`` (the heaps are kept), ``solver`` (SOLVER_*), ``inner`` sweeps per
#: multiplier step, ``rounds`` per example visit, ``mult`` (take the multiplier steps)
ChainStep = namedtuple("ChainStep", "s rho eta bi_mode uni_mode nu qp_iters heaps solver inner rounds mult")
#: the unigram oracle's candidate labels per token (``UNI_CAND``): CSR ``cptr`` / ``cands``
Candidates = namedtuple("Candidates", "cptr cands")
#: per-call work space: the :data:`ChainScratch` and the counters (C_*)
ChainWork = namedtuple("ChainWork", "SC counters")
#: one side of a bigram oracle call: the dense augments, the labels with a positive one (``pos``,
#: ``npos`` of them) and their marks
OracleSide = namedtuple("OracleSide", "aug pos npos mk")

ORACLE_BRUTE = 0
ORACLE_HEAP = 1
UNI_SLICE = 0     # exact scan of a random 1/nu slice of the labels (nu = 1: exact)
UNI_CAND = 1      # candidates given per token (MIPS)
SOLVER_QP = 0     # greedy active set + exact minimizer over it (projections)
SOLVER_FW = 1     # one Frank-Wolfe step per factor (Yen et al. 2016, Algorithm 4)
SOLVER_AFW = 2    # away-step Frank-Wolfe per factor, repeated until a non-drop step (Algorithm 2)

# counters of the chain kernels
C_UNI_CALLS = 0
C_BI_CALLS = 1
C_BI_TOUCHED = 2      # table entries looked at by the bigram oracle
C_UNI_TOUCHED = 3     # labels scored by the unigram oracle
C_FULL = 4            # adds refused because an active set was full
C_BI_TOUCH_MAX = 5
N_COUNTERS = 6

# ---------------------------------------------------------------------------- pairwise multi-label
#: examples held: the CSR of the feature vectors (``x_ptr``, ``fidx``, ``fval``), ``xsq`` = |x|^2,
#: ``Ki`` the Hamming normalizer, ``Y`` (n x Kc) the ground truth, ``alive``, ``cw`` the example's
#: weight c_i (1.0 unweighted; see :mod:`streamssvm._kernels.gdmm_multilabel`)
MLData = namedtuple("MLData", "x_ptr fidx fval xsq Ki Y alive cw")
#: the dual variables: unigrams ``u`` (n x Kc), message sums ``Dv``, active pairwise factors
#: (``fk`` < ``fl``, marginals ``fz`` (m_k, m_l, q), multipliers ``flam``, count ``fcnt``) and
#: ``nact`` (active factors containing each label)
MLDual = namedtuple("MLDual", "u Dv fk fl fz flam fcnt nact")
#: a pass's configuration: ``K`` labels, ``s`` = 1 / (lam n), ``rho`` (absolute), ``eta``,
#: ``grow`` / ``tol`` of the greedy factor additions, ``inner`` sweeps, ``mult`` (multiplier
#: steps), ``full`` (the greedy step scans every pair instead of the pruned search)
MLStep = namedtuple("MLStep", "K s rho eta grow tol inner mult full")
#: scratch space: scores ``acc``, active-factor marks ``mark`` (Kc x Kc), the greedy step's short
#: list (``cand_f``, ``cand_k``, ``cand_l``), the tetrahedron projection's buffers (``cbuf``,
#: ``wbuf``, ``zbuf``, ``tA``, ``tb``, ``tidx``) and the pruned search's ``lbuf``
MLScratch = namedtuple("MLScratch", "acc mark cand_f cand_k cand_l cbuf wbuf zbuf tA tb tidx lbuf")

ML_C_UNI = 0
ML_C_PAIR = 1
ML_C_ADDED = 2
ML_C_SCANNED = 3
ML_C_FULL = 4
ML_N_COUNTERS = 5


def pack(bundle):
    """The plain tuple numba receives (a nested bundle is packed by its builder)."""
    return tuple(bundle)


def _typed(bundle, types):
    """The plain tuple of a bundle of scalars, each field cast to its type (numba compiles one
    specialization per type signature: an int where a float was expected would compile another)."""
    return tuple(t(v) for t, v in zip(types, bundle))


def chain_step(**fields):
    """A :data:`ChainStep` as numba receives it."""
    return _typed(ChainStep(**fields), (float, float, float, int, int, int, int, bool, int, int, int, bool))


def ml_step(**fields):
    """An :data:`MLStep` as numba receives it."""
    return _typed(MLStep(**fields), (int, float, float, float, int, float, int, bool, bool))
