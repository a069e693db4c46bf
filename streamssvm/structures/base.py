"""The Structure protocol: WHAT is predicted.

A structure fixes the joint feature map phi(x, y), the task loss Delta(y_true, y) and the
inference routines (MAP prediction and the loss-augmented lambda-oracle). The linear
structures here share one representation (see ``streamssvm._kernels.structops``): their
feature map is linear in a sufficient statistic of the labeling, which lets a dual block be
stored as a mean statistic instead of a dense d-vector.

Weights are held by the learner as ``Weights`` (emission ``E``: features x labels, transitions
``T``: labels x labels, start/end biases ``B``: 2 x labels), unnormalized, with ``scale`` so that
the weight vector is ``scale * [E, T, B]``.
"""
from __future__ import annotations

import itertools

import numpy as np

from .._kernels import structops as so
from .._kernels.bundles import WeightsBundle, pack


#: the graph of the structures without one (see :meth:`Structure.graph`): an empty tuple, so that
#: the Model bundle of such a structure carries no arrays for it (every kernel level that passes
#: the bundle on compiles the flattening, reference counting and unpacking of each of its arrays)
_NO_GRAPH = ()


def indicator_emission(d, K, tok_ptr, fidx, fval, y):
    """Dense emission block E[j, k] = x[j] * y[k] of one token x (CSR row 0) and a 0/1 vector y
    over the K label slots (multi-label and hierarchy reference feature maps)."""
    E = np.zeros((d, K))
    for p in range(tok_ptr[0], tok_ptr[1]):
        for k in range(K):
            if y[k]:
                E[fidx[p], k] += fval[p]
    return E


class Weights:
    """Unnormalized weights ``U = (E, T, B)`` with capacities that grow with features/labels."""

    def __init__(self, d=1, Kc=4):
        self.E = np.zeros((max(d, 1), Kc))
        self.T = np.zeros((Kc, Kc))
        self.B = np.zeros((2, Kc))

    @property
    def Kc(self):
        return self.E.shape[1]

    def grow(self, d, Kc):
        dcap, kc = self.E.shape
        if d <= dcap and Kc <= kc:
            return
        nd = max(d, dcap) if d <= dcap else max(d, int(dcap * 1.5) + 1)
        nk = max(Kc, kc)
        E = np.zeros((nd, nk))
        E[:dcap, :kc] = self.E
        T = np.zeros((nk, nk))
        T[:kc, :kc] = self.T
        B = np.zeros((2, nk))
        B[:, :kc] = self.B
        self.E, self.T, self.B = E, T, B

    def bundle(self):
        """``(E, T, B)`` as the kernels take them (``streamssvm._kernels.bundles.WeightsBundle``)."""
        return pack(WeightsBundle(E=self.E, T=self.T, B=self.B))

    def sqnorm(self):
        return float(np.vdot(self.E, self.E) + np.vdot(self.T, self.T) + np.vdot(self.B, self.B))

    def copy(self):
        w = Weights.__new__(Weights)
        w.E, w.T, w.B = self.E.copy(), self.T.copy(), self.B.copy()
        return w


class Structure:
    """Base class of the linear structures (see module docstring)."""

    kind: int = -1
    use_trans: bool = False
    name = "structure"
    #: Examples of several tokens, so that a block may be long enough to keep no Gram matrix
    #: (``layout.stores_gram``): the BCFW step kernels then compile their Gram-free code from the
    #: first example (``bcfw.gram_rule``), not at the first long one (a mid-stream recompilation
    #: of the whole learn path, ~3.7 CPU s on Brown, where sentences longer than the label
    #: capacity come early).
    many_tokens: bool = False

    def __init__(self, cost=None):
        if cost is not None and not (callable(cost) or isinstance(cost, (np.ndarray, list, tuple))):
            raise TypeError("cost must be a square matrix (array-like) or a callable cost(y_true, y) -> float")
        self._cost_user = cost
        self.C = np.zeros((0, 0))

    def cost_matrix(self, Kc, labels):
        """(Kc, Kc) per-token cost: 1 - I by default, the user's matrix or callable otherwise.
        Delta(y, y) must be 0 and costs non-negative."""
        K = len(labels)
        C = np.zeros((Kc, Kc))
        base = 1.0 - np.eye(Kc)
        C[:, :] = base
        u = self._cost_user
        if u is None:
            pass
        elif callable(u):
            for a in range(K):
                for b in range(K):
                    C[a, b] = float(u(labels[a], labels[b]))
        else:
            M = np.asarray(u, dtype=float)
            if M.ndim != 2 or M.shape[0] != M.shape[1]:
                raise ValueError(f"cost matrix must be square, got shape {M.shape}")
            if K > M.shape[0]:
                raise ValueError(f"cost matrix is {M.shape[0]}x{M.shape[0]} but {K} labels have been "
                                 "seen; declare all labels up front (labels=[...]) or use a callable cost")
            C[:M.shape[0], :M.shape[0]] = M[:Kc, :Kc] if M.shape[0] > Kc else M
        if np.any(np.diag(C)[:K] != 0) or np.any(C[:K, :K] < 0) or not np.all(np.isfinite(C)):
            raise ValueError("cost must be finite, non-negative, with a zero diagonal (Delta(y, y) = 0)")
        return C

    def graph(self, K):
        """The structure's graph over its ``K`` labels in use, as the kernels take it (the
        ``graph`` field of ``streamssvm._kernels.bundles.Model``): five int64 arrays. Structures
        without a graph give an empty tuple.

        >>> from streamssvm.structures import MultiClass
        >>> MultiClass().graph(3)
        ()
        """
        return _NO_GRAPH

    # --- sizes and facts the learners, block store and oracles ask of a structure ---
    #: labelings are 0/1 vectors over the label slots (multi-label, hierarchy), not one label
    #: per token (chain, multiclass)
    set_labeling: bool = False

    def stat_size(self, L, Kc):
        """Length of the sufficient statistic of a labeling of ``L`` tokens over ``Kc`` slots."""
        return Kc

    def labeling_len(self, L, Kc):
        """Length of a labeling array (``L`` tokens, or ``Kc`` slots for set labelings)."""
        return Kc if self.set_labeling else L

    def relayout_stat(self, L, oldKc, Kc, ost, nst):
        """Copy a statistic laid out for ``oldKc`` label slots into the zeroed ``nst`` laid out
        for ``Kc`` > ``oldKc`` slots (label capacity growth)."""
        nst[:oldKc] = ost[:oldKc]

    def slack_dp_shape(self, L, Kc):
        """Shape of the work table of the exact slack oracle, None when it needs none."""
        return None

    def truth_labeling(self, ytrue, K, Kc):
        """The ground truth ``ytrue`` (label ids) as a labeling array of ``labeling_len``."""
        ytrue = np.asarray(ytrue, dtype=np.int32)
        if not self.set_labeling:
            return ytrue.copy()
        dense = np.zeros(Kc, dtype=np.int32)
        dense[[k for k in ytrue if k < K]] = 1
        return dense

    def loss_range(self, ytrue, L, K, Ki, C):
        """(smallest positive, largest) loss of a labeling of one example."""
        raise NotImplementedError

    #: a labeling is one class per token and nothing else (multiclass): learners may vectorize
    single_label: bool = False

    def check_rescaling(self, rescaling):
        """Raise ValueError when this structure's exact oracles do not support ``rescaling``."""

    def level_points(self, oracles):
        """The level points (h, g) of an :class:`~streamssvm.oracles.structured.ExampleOracles`
        when this structure computes them itself, None to use ``structops.slack_levels``."""
        return None

    def level_labeling(self, oracles, i, g_sel, lab):
        """Write into ``lab`` the labeling of level point ``i`` (loss ``g_sel``) of ``oracles``."""
        raise NotImplementedError

    # --- reference implementations (dense, slow) used by tests and small problems ---
    def joint_feature(self, d, K, tok_ptr, fidx, fval, y):
        """Dense phi(x, y) as (E, T, B) arrays of shapes (d, K), (K, K), (2, K)."""
        raise NotImplementedError

    def all_labelings(self, L, K):
        raise NotImplementedError

    def brute_loss(self, ytrue, y, C, Ki=None):
        raise NotImplementedError


class _Tokens(Structure):
    def joint_feature(self, d, K, tok_ptr, fidx, fval, y):
        E = np.zeros((d, K))
        T = np.zeros((K, K))
        B = np.zeros((2, K))
        L = len(tok_ptr) - 1
        for t in range(L):
            for p in range(tok_ptr[t], tok_ptr[t + 1]):
                E[fidx[p], y[t]] += fval[p]
        if self.use_trans:
            for t in range(1, L):
                T[y[t - 1], y[t]] += 1
            B[0, y[0]] += 1
            B[1, y[L - 1]] += 1
        return E, T, B

    def all_labelings(self, L, K):
        return [np.array(p, dtype=np.int32) for p in itertools.product(range(K), repeat=L)]

    def brute_loss(self, ytrue, y, C, Ki=None):
        return float(np.mean([C[a, b] for a, b in zip(ytrue, y)]))
