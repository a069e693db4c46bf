"""Round r9 prototype (issue 23 item 9): ``MultiLabelSSVM(lam_cv=3)`` plus one decision threshold
shared by all labels, chosen on out-of-fold scores of the training rows. A tuning script, not a
default; see ``bench/multilabel_defaults.py``'s docstring for the protocol and the numbers.

The candidate, fixed on the tuning sets before the held-out group was run:

1. stream the training rows through ``MultiLabelSSVM(lam_cv=3)`` and ``refine(20)`` (lambda
   chosen by 3-fold CV in ``refine``);
2. 3 fold models (row i in fold i mod 3) at that lambda (``BCFW(lam=...)``), each streamed
   over 2/3 of the rows and refined 20 passes, score the other third: per-label scores
   (independent labels: a label's own score; pairwise MRF: its max-marginal gap);
3. one threshold t from -0.30..0.30 (step 0.01) maximizing the out-of-fold mean Jaccard of
   "label on iff score > t"; kept only if its out-of-fold gain over t = 0 has a 95% paired
   bootstrap lower bound above 0 (500 resamples, seed 0), else t = 0 (the model's argmax);
4. predict the test rows: label on iff the full model's score > t.

Variants screened on the tuning sets (per-label thresholds, halved, gated or not; the default
lambda instead of ``lam_cv=3``; a non-empty rule) are in the docstring table.

    python bench/archive/multilabel_thresholds.py brown supermarket ...   # tuning sets
    python bench/archive/multilabel_thresholds.py --held-out                # once, the winner
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.multilabel_defaults import (DATASETS, HELD_OUT_R9 as HELD_OUT, TUNING, jaccards, ovr_linearsvc,  # noqa: E402
                                       paired_bootstrap, ssvm)

GRID = np.round(np.linspace(-0.3, 0.3, 61), 2)


def label_scores(m, X):
    """The model's per-label scores of the rows of ``X`` (a label is on iff its score > 0)."""
    names = [f"f{j}" for j in range(X.shape[1])]
    out = []
    for a in X:
        x = {names[j]: float(a[j]) for j in np.flatnonzero(a)}
        out.append(m._label_scores(*m._encode_to_predict(x)))
    return np.array(out)


def out_of_fold_scores(Xtr, Ytr, labels, lam, folds=3):
    import streamssvm as ss
    fold = np.arange(Xtr.shape[0]) % folds
    S = np.zeros(Ytr.shape)
    for f in range(folds):
        tr = fold != f
        _, mf = ssvm(Xtr[tr], Ytr[tr], Xtr[:1], labels, learner=ss.learners.BCFW(lam=lam))
        S[~tr] = label_scores(mf, Xtr[~tr])
    return S


def shared_threshold(S, Y):
    vals = np.array([jaccards(Y, S > t).mean() for t in GRID])
    t = float(GRID[int(np.argmax(vals))])
    if paired_bootstrap(jaccards(Y, S > t), jaccards(Y, S > 0), reps=500)[1] <= 0:
        t = 0.0
    return t


def candidate(Xtr, Ytr, Xte, labels):
    P, m = ssvm(Xtr, Ytr, Xte, labels, lam_cv=3)
    lam = float(m.learner.lam)
    t = shared_threshold(out_of_fold_scores(Xtr, Ytr, labels, lam), Ytr)
    return label_scores(m, Xte) > t, P, lam, t


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    sets = list(HELD_OUT) if argv == ["--held-out"] else (argv or list(TUNING))
    for s in sets:
        Xtr, Ytr, Xte, Yte, labels = DATASETS[s]()
        Q, P, lam, t = candidate(Xtr, Ytr, Xte, labels)
        P0, _ = ssvm(Xtr, Ytr, Xte, labels)
        L1, _ = ovr_linearsvc(Xtr, Ytr, Xte)
        Lcv, C = ovr_linearsvc(Xtr, Ytr, Xte, cv=True)
        j = {k: jaccards(Yte, v) for k, v in dict(cand=Q, lamcv=P, dflt=P0, l1=L1, lcv=Lcv).items()}
        d = {k: "%+.3f [%+.3f, %+.3f]" % paired_bootstrap(j["cand"], j[k]) for k in ("dflt", "lamcv", "l1", "lcv")}
        print(f"| {s} | {'held out' if s in HELD_OUT else 'tuning'} | lam={lam:g} t={t:+.2f} | "
              f"{j['cand'].mean():.3f} | {j['dflt'].mean():.3f} | {j['lamcv'].mean():.3f} | {j['l1'].mean():.3f} | "
              f"{j['lcv'].mean():.3f} (C={C}) | {d['l1']} | {d['lcv']} | {d['dflt']} |", flush=True)


if __name__ == "__main__":
    main()
