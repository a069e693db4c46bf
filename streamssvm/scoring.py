"""The score tables a fitted learner predicts with, read without changing it: what n-best
decoding, constrained decoding and per-feature explanations need (:mod:`streamssvm.nbest`).

A learner's predicting weights are ``scale * (E - zc * ZE, T, B)`` (``zc = 0``: plain ``E``;
the lazily averaged iterates of BCFW and SGD are the other case), plus a per-label bias for
Pragam. :func:`score_tables` reads them from the learners that keep dense weight tables
(BCFW, SGD, CuttingPlane, BMRM, Pragam, GDMM); the emission scores are formed by the kernels the
learners' ``predict`` uses, in the same order, so the scores are the same floats and the best
output is ``predict_one``'s.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ScoreTables:
    """Predicting weights ``scale * (E - zc * ZE)`` (features x label slots), transitions
    ``scale * T`` and start / end biases ``scale * B``; ``bias`` (K,) is added to every
    emission score (None: no bias); ``K`` labels are in use."""

    E: np.ndarray
    ZE: np.ndarray
    zc: float
    scale: float
    T: np.ndarray
    B: np.ndarray
    K: int
    bias: np.ndarray | None = None

    def emission(self, tok_ptr, fidx, fval):
        """(L, K) emission scores of the tokens of one CSR example (features the weights do
        not know score 0)."""
        from ._kernels.bcfw import emission_avg_scores
        from ._kernels.common import emission_scores
        tok_ptr = np.asarray(tok_ptr, dtype=np.int64)
        fidx = np.asarray(fidx, dtype=np.int32)
        fval = np.asarray(fval, dtype=np.float64)
        L = len(tok_ptr) - 1
        d = self.E.shape[0]
        if fidx.size and int(fidx.max()) >= d:   # unknown features: dropped (their weights are 0)
            keep = fidx < d
            cnt = np.concatenate([[0], np.cumsum(keep)])
            tok_ptr, fidx, fval = cnt[tok_ptr].astype(np.int64), fidx[keep], fval[keep]
        S = np.zeros((max(L, 1), self.E.shape[1]))
        if L == 0:
            return S[:0, :self.K]
        if self.zc != 0.0:
            emission_avg_scores(self.E, self.ZE, self.zc, self.scale, tok_ptr, fidx, fval, L, self.K, S)
        else:
            emission_scores(self.E, self.scale, tok_ptr, fidx, fval, L, self.K, S)
        S = S[:L, :self.K]
        if self.bias is not None:
            S = S + self.bias[:self.K]
        return S

    def emission_weights(self):
        """The (features x K) emission weights with the scale folded in."""
        W = self.E[:, :self.K] - self.zc * self.ZE[:, :self.K] if self.zc else self.E[:, :self.K]
        return W * self.scale

    def transitions(self):
        """``(scale * T, scale * B)`` over the K labels in use."""
        return self.scale * self.T[:self.K, :self.K], self.scale * self.B[:, :self.K]


def _bcfw(lr):
    E, ZE, zc, T, B, scale = lr._predict_params()
    return ScoreTables(E, ZE, zc, scale, T, B, lr._K)


def _sgd(lr):
    if lr._averaged():   # as SGD.predict: the average (beta U - V) / csum, not materialized
        zc = 1.0 / lr.beta
        return ScoreTables(lr.W.E, lr.V.E, zc, lr.beta / lr.csum, lr.W.T - zc * lr.V.T, lr.W.B - zc * lr.V.B, lr._K)
    return ScoreTables(lr.W.E, lr.W.E, 0.0, lr.a, lr.W.T, lr.W.B, lr._K)


def _cutting_plane(lr):
    return ScoreTables(lr.W.E, lr.W.E, 0.0, lr._scale(), lr.W.T, lr.W.B, lr._K)


def _bmrm(lr):
    W = lr._pred()
    return ScoreTables(W.E, W.E, 0.0, 1.0, W.T, W.B, lr._K)


def _pragam(lr):
    return ScoreTables(lr.W.E, lr.W.E, 0.0, 1.0, lr.W.T, lr.W.B, lr._K, bias=np.asarray(lr.b, dtype=np.float64))


def _gdmm(lr):
    eng = lr._engine
    if hasattr(eng, "_pred_weights"):   # chains: rows 0 / 1 of the unigram table are the start / end biases
        Wp, Tp = eng._pred_weights()
        E = Wp[2:]
        return ScoreTables(E, E, 0.0, eng._s(), Tp, np.ascontiguousarray(Wp[:2]), eng._K)
    return ScoreTables(eng.E, eng.E, 0.0, eng.s(), eng.T, np.zeros((2, eng.E.shape[1])), eng.K)


_READERS = {"GDMM": _gdmm, "BCFW": _bcfw, "SGD": _sgd, "CuttingPlane": _cutting_plane, "BMRM": _bmrm, "Pragam": _pragam}


def score_tables(learner):
    """The :class:`ScoreTables` of a fitted learner (bound, at least one label), or a
    NotImplementedError naming the learners that have them."""
    for cls in type(learner).__mro__:
        read = _READERS.get(cls.__name__)
        if read is not None:
            return read(learner)
    raise NotImplementedError(f"n-best, constrained decoding and explanations read dense score tables, which "
                              f"learners.{type(learner).__name__} does not keep (supported: "
                              f"{', '.join(sorted(_READERS))}; ExtremeClassifier's MEMOIR has its own)")
