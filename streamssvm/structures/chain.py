"""Chain (linear-chain CRF-style sequence labeling).

phi(x, y) = sum_t x_t (x) e_{y_t}  +  sum_t e_{y_{t-1}, y_t}  +  start / end indicators;
Delta = (cost-weighted) Hamming sum_t C[y_t, y'_t] / Z, Z = L (``loss="normalized"``, per sentence)
or Z = 1 (``loss="hamming"``, per token). Viterbi and the loss-augmented Viterbi run in numba
(``streamssvm._kernels.structops.decode``).
"""
import numpy as np

from .._kernels.chain import sparse_viterbi
from .._kernels.structops import CHAIN, CHAIN_LOSS_NORMALIZED, CHAIN_LOSS_TOKEN, chain_level_labeling
from .base import _Tokens

#: chain losses: name -> the code the kernels read in the ``Ki`` slot (``_kernels/chain.py``)
CHAIN_LOSSES = {"normalized": CHAIN_LOSS_NORMALIZED, "hamming": CHAIN_LOSS_TOKEN}


def tag_weight_cost(weights):
    """A per-tag weighted cost: C[a, b] = weights[a] for a != b (missing a true tag ``a`` costs
    ``weights[a]``; tags not listed cost 1), as a callable cost(y_true, y).

    >>> c = tag_weight_cost({"PER": 3.0})
    >>> c("PER", "O"), c("O", "PER"), c("PER", "PER")
    (3.0, 1.0, 0.0)
    """
    w = {k: float(v) for k, v in dict(weights).items()}
    if any(not np.isfinite(v) or v < 0 for v in w.values()):
        raise ValueError("tag weights must be finite and non-negative")

    def cost(a, b):
        return 0.0 if a == b else w.get(a, 1.0)
    return cost


class Chain(_Tokens):
    """Sequence labeling with K x K transitions and start/end biases.

    Parameters
    ----------
    cost
        Optional per-token cost matrix / callable / dict of per-tag weights (see
        :func:`tag_weight_cost`); default 0/1 per token.
    transitions
        Use transition and start/end features (default True). Without them the chain is
        independent per-token multiclass.
    loss
        ``"normalized"`` (the per-token costs averaged over the sentence) or ``"hamming"`` (summed
        over the tokens: every token weighs the same, whatever its sentence's length).

    >>> Chain(loss="hamming").loss_code
    2
    """

    many_tokens = True
    kind = CHAIN
    name = "chain"

    def __init__(self, cost=None, transitions=True, loss="normalized"):
        if isinstance(cost, dict):
            cost = tag_weight_cost(cost)
        super().__init__(cost)
        self.use_trans = bool(transitions)
        if loss not in CHAIN_LOSSES:
            raise ValueError(f"loss must be one of {tuple(CHAIN_LOSSES)}, got {loss!r}")
        self.loss = loss

    @property
    def loss_code(self):
        """What the kernels read in the ``Ki`` slot of a chain example (``_kernels/chain.py``)."""
        return CHAIN_LOSSES[self.loss]

    def loss_norm(self, L):
        return 1.0 if self.loss == "hamming" else float(L)

    def check_rescaling(self, rescaling):
        if rescaling == "slack" and self._cost_user is not None:
            raise ValueError("slack rescaling of chains needs the Hamming loss (no cost matrix)")

    def brute_loss(self, ytrue, y, C, Ki=None):
        """Reference loss (tests): sum_t C[y_t, y'_t] / Z."""
        v = float(sum(C[a, b] for a, b in zip(ytrue, y)))
        return v if Ki == CHAIN_LOSS_TOKEN else v / len(ytrue)

    def graph(self, K):
        """The kernels' ``graph`` field of a chain: the addresses of the sparse Viterbi
        (``_kernels.chain.sparse_viterbi``), compiled when ``K`` first reaches
        ``VITERBI_SPARSE_MIN_K`` tags; (0, 0) below (the dense loop).

        >>> Chain().graph(3)
        (0, 0)
        """
        return sparse_viterbi(int(K))

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
        """Hamming / Z: 1/Z at least (one wrong tag), the sum of the largest per-token costs / Z at most
        (Z = L normalized, 1 per token: read from the ``Ki`` code as the kernels do)."""
        Z = 1.0 if Ki == CHAIN_LOSS_TOKEN else float(L)
        return 1.0 / Z, float(sum(C[ytrue[t], :K].max() for t in range(L))) / Z

    def level_labeling(self, o, i, g_sel, lab):
        """Best labeling with round(g_sel * Z) wrong tags, read back from the slack DP table."""
        Z = 1.0 if o.Ki == CHAIN_LOSS_TOKEN else float(o.L)
        chain_level_labeling(o.S, o.T, o.B, o.scale, o.L, o.K, o.use_trans, o.ytrue, o.slack_dp(),
                             int(round(g_sel * Z)), lab)
