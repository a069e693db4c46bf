"""Multi-label with independent labels: phi(x, y) = sum_{k in y} x (x) e_k,
Delta = Hamming distance / number of labels known when the example arrived."""
import itertools

import numpy as np

from .._kernels.structops import MULTILABEL
from .base import Structure


class MultiLabel(Structure):
    """Independent binary labels with normalized Hamming loss."""
    kind = MULTILABEL
    use_trans = False
    name = "multilabel"

    def __init__(self):
        super().__init__(None)

    def joint_feature(self, d, K, tok_ptr, fidx, fval, y):
        """``y`` is a dense 0/1 vector of length >= K."""
        E = np.zeros((d, K))
        for p in range(tok_ptr[0], tok_ptr[1]):
            for k in range(K):
                if y[k]:
                    E[fidx[p], k] += fval[p]
        return E, np.zeros((K, K)), np.zeros((2, K))

    def all_labelings(self, L, K):
        return [np.array(p, dtype=np.int32) for p in itertools.product((0, 1), repeat=K)]

    def brute_loss(self, ytrue_pos, y, C, Ki=None):
        dense = np.zeros(len(y), dtype=int)
        dense[list(ytrue_pos)] = 1
        return float(np.sum(dense != np.asarray(y))) / Ki
