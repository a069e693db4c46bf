"""Chain (linear-chain CRF-style sequence labeling).

phi(x, y) = sum_t x_t (x) e_{y_t}  +  sum_t e_{y_{t-1}, y_t}  +  start / end indicators;
Delta = normalized (cost-weighted) Hamming: (1/L) sum_t C[y_t, y'_t]. Viterbi and the
loss-augmented Viterbi run in numba (``streamssvm._kernels.structops.decode``).
"""
from .._kernels.structops import CHAIN
from .base import _Tokens


class Chain(_Tokens):
    """Sequence labeling with K x K transitions and start/end biases.

    Parameters
    ----------
    cost
        Optional per-token cost matrix / callable; default Hamming (normalized by length).
    transitions
        Use transition and start/end features (default True). Without them the chain is
        independent per-token multiclass.
    """
    kind = CHAIN
    name = "chain"

    def __init__(self, cost=None, transitions=True):
        super().__init__(cost)
        self.use_trans = bool(transitions)
