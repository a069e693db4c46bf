"""Chain (linear-chain CRF-style sequence labeling).

phi(x, y) = sum_t x_t (x) e_{y_t}  +  sum_t e_{y_{t-1}, y_t}  +  start / end indicators;
Delta = normalized (cost-weighted) Hamming: (1/L) sum_t C[y_t, y'_t]. Viterbi and the
loss-augmented Viterbi run in numba (``streamssvm._kernels.structops.decode``).
"""
import numpy as np

from .._kernels.structops import CHAIN, chain_level_labeling
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

    def check_rescaling(self, rescaling):
        if rescaling == "slack" and self._cost_user is not None:
            raise ValueError("slack rescaling of chains needs the Hamming loss (no cost matrix)")

    def stat_size(self, L, Kc):
        return L * Kc + Kc * Kc + 2 * Kc

    def relayout_stat(self, L, oldKc, Kc, ost, nst):
        """Layout: emissions (L, Kc), transitions (Kc, Kc), start/end biases (2, Kc)."""
        nst[:L * Kc].reshape(L, Kc)[:, :oldKc] = ost[:L * oldKc].reshape(L, oldKc)
        o, n_ = L * oldKc, L * Kc
        nst[n_:n_ + Kc * Kc].reshape(Kc, Kc)[:oldKc, :oldKc] = ost[o:o + oldKc * oldKc].reshape(oldKc, oldKc)
        o2, n2 = o + oldKc * oldKc, n_ + Kc * Kc
        nst[n2:n2 + 2 * Kc].reshape(2, Kc)[:, :oldKc] = ost[o2:o2 + 2 * oldKc].reshape(2, oldKc)

    def slack_dp_shape(self, L, Kc):
        """(position, tag, number of wrong tags) table of the slack-rescaling DP."""
        return (L + 1, Kc, L + 1)

    def loss_range(self, ytrue, L, K, Ki, C):
        """Normalized Hamming: 1/L at least, the mean of the largest per-token costs at most."""
        return 1.0 / L, float(np.mean([C[ytrue[t], :K].max() for t in range(L)]))

    def level_labeling(self, o, i, g_sel, lab):
        """Best labeling with round(g_sel * L) wrong tags, read back from the slack DP table."""
        chain_level_labeling(o.S, o.T, o.B, o.scale, o.L, o.K, o.use_trans, o.ytrue, o.slack_dp(),
                             int(round(g_sel * o.L)), lab)
