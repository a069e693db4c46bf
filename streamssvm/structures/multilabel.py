"""Multi-label with independent labels: phi(x, y) = sum_{k in y} x (x) e_k,
Delta = Hamming distance / number of labels known when the example arrived."""
import itertools

import numpy as np

from .._kernels import structops as so
from .._kernels.common import py_entry
from .._kernels.structops import MLPAIR, MLPAIR_MAX_LABELS, MULTILABEL
from .base import Structure, indicator_emission


class MultiLabel(Structure):
    """Multi-label with normalized Hamming loss: independent binary labels, or with
    ``pairwise=True`` a fully connected binary MRF over the labels (a co-occurrence potential
    for every pair, Finley & Joachims as in Choi, Meshi & Srebro), decoded by exact enumeration
    (Gray code) for up to 16 labels.

    ``inference`` (pairwise only): ``"enum"`` enumerates and refuses more than 16 labels;
    ``"auto"`` enumerates up to 16 labels and above that solves the LP relaxation on the local
    polytope (:mod:`streamssvm.oracles.lp`); ``"lp"`` always uses the LP. Only learners that call
    oracles from Python (``learners.SGD``) can use the LP; the estimators pick ``"auto"`` for them
    and ``"enum"`` otherwise."""
    kind = MULTILABEL
    use_trans = False
    set_labeling = True
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

    def stat_size(self, L, Kc):
        return Kc + Kc * Kc if self.pairwise else Kc

    def relayout_stat(self, L, oldKc, Kc, ost, nst):
        """Layout: label indicators (Kc,), then pairwise: co-occurrences (Kc, Kc)."""
        nst[:oldKc] = ost[:oldKc]
        if self.pairwise:
            nst[Kc:].reshape(Kc, Kc)[:oldKc, :oldKc] = ost[oldKc:].reshape(oldKc, oldKc)

    def loss_range(self, ytrue, L, K, Ki, C):
        """Hamming / Ki: one wrong label at least, all K at most."""
        return 1.0 / max(Ki, 1), K / max(Ki, 1)

    def level_points(self, o):
        """Pairwise: one enumeration gives each level's best score and its labeling (as a bit
        code, kept on the oracles for :meth:`level_labeling`); independent labels: None."""
        if not self.pairwise:
            return None
        K = o.K
        best_m = np.zeros(K + 1)
        o._codes = np.zeros(K + 1, dtype=np.int64)
        py_entry(so._ml_dense_truth)(o.ytrue, len(o.ytrue), K, o._ybuf)
        py_entry(so._mrf_enum)(o.S, o.T, o.scale, K, o._ybuf, 2, 0.0, max(o.Ki, 1), o.ts, best_m,
                     np.zeros(K, dtype=np.int32), o._codes)
        ms = [m for m in range(1, K + 1) if best_m[m] > -np.inf]
        o._level_m = np.array(ms, dtype=np.int64)
        return (np.array([1.0 + best_m[m] - o.ts for m in ms]),
                np.array([m / max(o.Ki, 1) for m in ms]))

    def level_labeling(self, o, i, g_sel, lab):
        """Pairwise: the enumerated level's labeling; independent: flip the m best gains."""
        K = o.K
        if self.pairwise:
            code = int(o._codes[o._level_m[i]])
            for k in range(K):
                lab[k] = (code >> k) & 1
            return
        m = int(round(g_sel * o.Ki))
        dense = o.truth_lab[:K].copy()
        delta = np.where(dense == 0, o.S[0, :K], -o.S[0, :K])
        flip = np.argsort(-delta, kind="stable")[:m]
        dense[flip] = 1 - dense[flip]
        lab[:K] = dense

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
