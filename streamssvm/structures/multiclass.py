"""Multiclass (Crammer-Singer): phi(x, y) = x (x) e_y, Delta = C[y_true, y] (0/1 by default)."""
import numpy as np

from .._kernels.structops import MULTICLASS
from .base import _Tokens


class MultiClass(_Tokens):
    """Crammer-Singer multiclass structure.

    Parameters
    ----------
    cost
        Optional cost: a (K, K) matrix over labels in order of appearance (declare the labels
        up front) or a callable ``cost(y_true, y) -> float``. Default: 0/1 loss.
    """
    kind = MULTICLASS
    use_trans = False
    name = "multiclass"

    def loss_range(self, ytrue, L, K, Ki, C):
        """The smallest positive and the largest cost of the true label's row."""
        row = C[ytrue[0], :K]
        pos = row[row > 0]
        return (float(pos.min()) if pos.size else 1.0), max(float(row.max()), 1e-12)

    def level_labeling(self, o, i, g_sel, lab):
        """Best-scoring wrong label whose cost is ``g_sel``."""
        yt = o.ytrue[0]
        best, arg = -np.inf, yt
        for k in range(o.K):
            if k != yt and abs(o.C[yt, k] - g_sel) < 1e-12 and o.S[0, k] > best:
                best, arg = o.S[0, k], k
        lab[0] = arg
