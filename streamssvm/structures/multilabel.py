"""Multi-label with independent labels: phi(x, y) = sum_{k in y} x (x) e_k,
Delta = Hamming distance / number of labels known when the example arrived."""
import itertools

import numpy as np

from .._kernels.structops import MLPAIR, MLPAIR_MAX_LABELS, MULTILABEL
from .base import Structure, indicator_emission


class MultiLabel(Structure):
    """Multi-label with normalized Hamming loss: independent binary labels, or with
    ``pairwise=True`` a fully connected binary MRF over the labels (a co-occurrence potential
    for every pair, Finley & Joachims as in paper 000), decoded by exact enumeration
    (Gray code) for up to 16 labels.

    ``inference`` (pairwise only): ``"enum"`` enumerates and refuses more than 16 labels;
    ``"auto"`` enumerates up to 16 labels and above that solves the LP relaxation on the local
    polytope (:mod:`streamssvm.oracles.lp`); ``"lp"`` always uses the LP. Only learners that call
    oracles from Python (``learners.SGD``) can use the LP; the estimators pick ``"auto"`` for them
    and ``"enum"`` otherwise."""
    kind = MULTILABEL
    use_trans = False
    name = "multilabel"

    def __init__(self, pairwise=False, inference="enum"):
        super().__init__(None)
        self.pairwise = bool(pairwise)
        if inference not in ("enum", "auto", "lp"):
            raise ValueError(f"inference must be 'enum', 'auto' or 'lp', got {inference!r}")
        self.inference = inference
        if self.pairwise:
            self.kind = MLPAIR
            self.use_trans = True  # the pairwise weights live in the transition matrix T

    def uses_lp(self, n_labels):
        """True when oracles on ``n_labels`` labels go through the LP relaxation."""
        return self.pairwise and (self.inference == "lp" or
                                  (self.inference == "auto" and n_labels > MLPAIR_MAX_LABELS))

    def cost_matrix(self, Kc, labels):
        if self.pairwise and self.inference == "enum" and len(labels) > MLPAIR_MAX_LABELS:
            raise ValueError(f"pairwise multi-label decodes by exact enumeration up to {MLPAIR_MAX_LABELS} labels "
                             f"(the numba kernels of BCFW enumerate); got {len(labels)} labels. For more labels use "
                             "learners.SGD, which solves the LP relaxation (streamssvm.oracles.lp)")
        return super().cost_matrix(Kc, labels)

    def joint_feature(self, d, K, tok_ptr, fidx, fval, y):
        """``y`` is a dense 0/1 vector of length >= K."""
        E = indicator_emission(d, K, tok_ptr, fidx, fval, y)
        T = np.zeros((K, K))
        if self.pairwise:
            for k in range(K):
                for l in range(k + 1, K):
                    T[k, l] = float(y[k] and y[l])
        return E, T, np.zeros((2, K))

    def all_labelings(self, L, K):
        return [np.array(p, dtype=np.int32) for p in itertools.product((0, 1), repeat=K)]

    def brute_loss(self, ytrue_pos, y, C, Ki=None):
        dense = np.zeros(len(y), dtype=int)
        dense[list(ytrue_pos)] = 1
        return float(np.sum(dense != np.asarray(y))) / Ki
