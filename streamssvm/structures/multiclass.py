"""Multiclass (Crammer-Singer): phi(x, y) = x (x) e_y, Delta = C[y_true, y] (0/1 by default)."""
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
