"""The regularization lambda chosen by k-fold cross-validation over the examples a BCFW
learner holds, as scikit-learn's ``GridSearchCV`` chooses C for a linear SVM.

For each fold, a copy of the learner forgets the fold's blocks (their u_i leave the weights;
the rest of the dual point is the warm start), then walks the grid ``LAM_FACTORS`` times the
lambda that follows n from the smallest lambda up with Osokin et al.'s warm starts (Minding the
gaps for block Frank-Wolfe optimization of structured SVMs, ICML 2016, Sec. 4: Proposition 1's
move towards the ground truths when lambda falls, the dual point kept when it rises), running
``passes * sqrt(lam_min / lam)`` BCFW passes at each lambda (a larger lambda is better
conditioned and converges in fewer), and scores the fold's examples with the averaged iterate,
as the model predicts. The lambda of the best mean score wins (the larger on a tie); the caller
solves the held problem at it (``MultiLabelSSVM.refine``), so the certificate afterwards
certifies the objective at the chosen lambda.

The score is the samples-averaged Jaccard index of the predicted label set (an empty
prediction of an empty truth counts 1) on the examples as they are held (feature values as
scaled when they were learned). Cost: about ``(folds - 1) * 2.2 * passes`` effective passes
over the held examples (87 with the defaults, 3 folds and 20 passes: the smallest lambda gets
as many as a ``refine(20)``; with 10 the small lambdas were under-solved and scored low), the
predictions, and one copy of the learner per fold; ``bench/results/multilabel_defaults.md`` reports its CPU seconds
next to those of ``refine(20)``.

With ``label_scores`` (as ``MultiLabelSSVM`` passes it) the folds also keep each held-out
example's per-label scores at every lambda; at the chosen one they give
:func:`shared_threshold`, one decision threshold for all labels (Jaccard rewards recall where
the Hamming argmax leaves labels off), kept only if its out-of-fold gain is clear.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

#: The grid, as factors of the lambda that follows n (min(1e-3, 6 / n)): larger lambdas only
#: (on the tuning sets the default was under-regularized or right; 0.3 was never chosen).
LAM_FACTORS = (100.0, 30.0, 10.0, 3.0, 1.0)


@dataclass
class LamSelection:
    """What :func:`cross_validated_lam` chose and why.

    Attributes
    ----------
    lam
        The chosen lambda.
    lams, scores
        The grid (decreasing) and each lambda's mean validation Jaccard over the held examples.
    folds, passes, n
        Folds, BCFW passes per lambda and fold, examples held when it ran.
    cpu_seconds
        CPU time of the selection.
    """
    lam: float
    lams: list = field(default_factory=list)
    scores: list = field(default_factory=list)
    folds: int = 3
    passes: float = 20.0
    n: int = 0
    cpu_seconds: float = 0.0
    n_seen: int = 0     # records the learner had seen (``store.seen``) when it ran
    threshold: float = 0.0   # the shared decision threshold (:func:`shared_threshold`; 0: the argmax)

    def to_dict(self):
        return {"lam": float(self.lam), "lams": [float(v) for v in self.lams],
                "scores": [float(v) for v in self.scores], "folds": int(self.folds), "passes": float(self.passes),
                "n": int(self.n), "cpu_seconds": float(self.cpu_seconds), "n_seen": int(self.n_seen),
                "threshold": float(self.threshold)}

    @classmethod
    def from_dict(cls, d):
        return None if d is None else cls(**d)   # a file from before thresholds: threshold 0


#: The shared decision thresholds tried (:func:`shared_threshold`).
THRESHOLD_GRID = tuple(round(v, 2) for v in np.linspace(-0.3, 0.3, 61))


def jaccard_rows(truth, pred):
    """Each row's Jaccard index of two boolean matrices (1 for two empty sets)."""
    inter = np.sum(pred & truth, axis=1)
    union = np.sum(pred | truth, axis=1)
    return np.where(union == 0, 1.0, inter / np.maximum(union, 1))


def shared_threshold(S, truth, grid=THRESHOLD_GRID, reps=500, seed=0):
    """One decision threshold for every label: a label is on iff its score (``S``, rows x
    labels, out-of-fold) exceeds it. The grid value of the best mean Jaccard over the rows,
    kept only if its gain over 0 (the model's own decision) is clear: the 95% paired bootstrap
    interval of the per-row gain (``reps`` resamples) lies above 0; else 0."""
    S = np.asarray(S, dtype=np.float64)
    truth = np.asarray(truth, dtype=bool)
    if S.shape[0] == 0:
        return 0.0
    vals = [float(np.mean(jaccard_rows(truth, S > t))) for t in grid]
    t = float(grid[int(np.argmax(vals))])
    if t == 0.0:
        return 0.0
    d = jaccard_rows(truth, S > t) - jaccard_rows(truth, S > 0.0)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.shape[0], size=(reps, d.shape[0]))].mean(1)
    return t if float(np.quantile(means, 0.025)) > 0.0 else 0.0


def supports(lr):
    """Whether the bound learner ``lr`` can cross-validate lambda: it holds its examples as dual
    blocks it can forget one by one and moves its dual point to a new lambda (``set_lam``, the
    regularization path's warm starts: BCFW)."""
    return callable(getattr(lr, "set_lam", None)) and callable(getattr(lr, "_evict", None)) \
        and getattr(lr, "store", None) is not None


def _held_batch(lr, slots):
    """The held blocks ``slots`` as one prediction batch (ex_tok, tok_ptr, fidx, fval) and their
    truths as a boolean matrix over the learner's labels."""
    K = int(lr.n_labels)
    tok, fidx, fval = [0], [], []
    truth = np.zeros((len(slots), K), dtype=bool)
    for i, s in enumerate(slots):
        b = lr.store.block(int(s))
        fidx.append(np.asarray(b["fidx"], dtype=np.int32))
        fval.append(np.asarray(b["fval"], dtype=np.float64))
        tok.append(tok[-1] + len(fidx[-1]))
        pos = np.asarray(b["ytrue"], dtype=np.int64)
        truth[i, pos[pos < K]] = True
    m = len(slots)
    fidx = np.concatenate(fidx) if fidx else np.zeros(0, dtype=np.int32)
    fval = np.concatenate(fval) if fval else np.zeros(0)
    return (np.arange(m + 1, dtype=np.int64), np.asarray(tok, dtype=np.int32), fidx, fval), truth


def _jaccard_sum(lr, batch, truth):
    """Sum over the batch's examples of the Jaccard index of the learner's predicted label set
    (1 for an empty prediction of an empty truth)."""
    m, K = truth.shape
    Kc = int(lr.W.Kc)
    ex_tok, tok_ptr, fidx, fval = batch
    lab_ptr = np.arange(m + 1, dtype=np.int64) * Kc
    pred = lr.predict(ex_tok, tok_ptr, fidx, fval, lab_ptr, m * Kc).reshape(m, Kc)[:, :K].astype(bool)
    inter = np.sum(pred & truth, axis=1)
    union = np.sum(pred | truth, axis=1)
    return float(np.sum(np.where(union == 0, 1.0, inter / np.maximum(union, 1))))


def cross_validated_lam(lr, folds=3, passes=20.0, factors=LAM_FACTORS, seed=0, lam0=None, label_scores=None):
    """The lambda of ``factors`` times ``lam0`` (default: the learner's current one) with the best k-fold
    validation Jaccard over the held examples (see the module docstring): a
    :class:`LamSelection`, or None when fewer than 2 examples per fold are held. ``lr`` (a bound
    BCFW learner of a multi-label structure) is not changed. ``label_scores(work, batch, K)``
    (optional): the per-label scores (rows x K; a label is on iff its score > 0) of a fold's
    copy on its held-out batch; the out-of-fold scores at the chosen lambda then give the
    selection's :func:`shared_threshold`."""
    import time
    c0 = time.process_time()
    st = lr.store
    slots = np.asarray(st.slots(), dtype=np.int64).copy()
    n = len(slots)
    if folds < 2 or n < 2 * folds:
        return None
    lam0 = float(lr.effective_lam() if lam0 is None else lam0)
    lams = sorted((lam0 * float(f) for f in factors), reverse=True)
    fold_of = np.random.default_rng(seed).permutation(n) % folds
    score = np.zeros(len(lams))
    K = int(lr.n_labels)
    oof = None if label_scores is None else np.zeros((len(lams), n, K))
    truth_all = np.zeros((n, K), dtype=bool)
    for f in range(folds):
        out = np.flatnonzero(fold_of == f)
        work = copy.deepcopy(lr)
        for s in slots[out]:
            work._evict(int(s))
        batch, truth = _held_batch(lr, slots[out])
        truth_all[out] = truth
        for q in range(len(lams) - 1, -1, -1):   # smallest lambda first: nearest the learner's dual point
            lam = lams[q]
            work.set_lam(lam, keep="dual" if lam > work.effective_lam() else "weights")
            work.refine(max(1.0, passes * np.sqrt(lams[-1] / lam)))
            score[q] += _jaccard_sum(work, batch, truth)
            if oof is not None:
                oof[q, out] = label_scores(work, batch, K)
    score /= n
    best = int(np.argmax(score))   # the first (largest lambda) of equal scores
    t = 0.0 if oof is None else shared_threshold(oof[best], truth_all)
    return LamSelection(lam=lams[best], lams=lams, scores=[float(v) for v in score], folds=int(folds),
                        passes=float(passes), n=n, cpu_seconds=time.process_time() - c0, threshold=t)
