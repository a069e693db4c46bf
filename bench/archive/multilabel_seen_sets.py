"""Tuning prototype (issue 23 item 9): multi-label structural SVMs whose output space is the
label sets seen in training, against one-vs-rest LinearSVC, on the TUNING sets of
``bench/multilabel_defaults.py`` only (no held-out set is loaded here).

The question: is there a candidate default for ``MultiLabelSSVM`` that beats one-vs-rest
LinearSVC (C=1 and C chosen by 3-fold CV) on the tuning sets without losing anywhere? Only such
a candidate would earn a library option and a new held-out group. This script is a numpy
prototype so that the idea can be judged before it costs numba kernels:

* **output space**: ``full`` (every labeling, as the library decodes today) or ``seen`` (only
  the label sets of the training rows: the label powerset pruned to the sets that occur, after
  Read, Pfahringer & Holmes, "Multi-label classification using ensembles of pruned sets",
  ICDM 2008, here as one structural SVM whose decoder maximizes over those sets; no empty
  prediction where no training row is empty);
* **features of a labeling**: ``indep`` (x (x) y, a bias column included) or ``pair`` (plus a
  co-occurrence indicator for every pair of labels, the library's ``pairwise=True``);
* **loss** (margin rescaling, Tsochantaridis et al., JMLR 2005): ``ham`` the Hamming distance
  over K (the library's), or ``jac`` one minus the Jaccard index (the score the comparison
  reports; an empty set against an empty set costs 0). The Jaccard loss is not affine in the
  labeling's bits, so the library's dual blocks (mean statistics, ``_kernels/structops.py``)
  could not carry it without a per-block loss; the prototype keeps that scalar per block.
* **lambda**: the library's ``min(1e-3, 6 / n)``, or chosen by 3-fold CV over 1, 3, 10, 30,
  100 times it by validation Jaccard (the grid of ``MultiLabelSSVM(lam_cv=3)``).

Rows are prepared as the library prepares them: each column divided by the RMS of its non-zero
training values (``scale=True``; the variants marked ``unscaled`` skip it), every row
multiplied by one factor so that the mean squared norm is 15 / K (``normalize=True``), then a
constant bias column of 1. The solver is block-coordinate Frank-Wolfe (Lacoste-Julien, Jaggi,
Schmidt & Pletscher, ICML 2013) for 21 passes (one stream pass + ``refine(20)``), each block
kept as ``x_i a_i^T`` (plus its pair statistic and its loss), so a block costs O(K) floats.

    python bench/archive/multilabel_seen_sets.py --out /tmp/ml_seen      # tuning table (not in results/)

What it found (this round's table is in the docstring of ``bench/multilabel_defaults.py``): no
variant beats LinearSVC by CV everywhere. Seen sets help where label sets are few and
structured (supermarket, yeast, letters, letters14: up to +0.03 real, +0.16 constructed) but the
text sets lose: Brown (TF-IDF) prefers LinearSVC's squared hinge (OvR LinearSVC with the plain
hinge peaks at 0.647, with the squared hinge at 0.654 -- every hinge-loss SVM here stays at
0.644-0.647), and Reuters loses 0.012 to column scaling of TF-IDF (0.968 scaled, 0.979-0.980
unscaled), while Brown without column scaling loses 0.010 instead.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import multilabel_defaults as md  # noqa: E402
from bench._common import log  # noqa: E402

ROW_NORM_C = 15.0      # streamssvm.row_norm.RowNorm.C
LAM_FACTORS = (1, 3, 10, 30, 100)   # streamssvm.lam_cv's grid


def prepare(Xtr, Xte, K, scale=True):
    """Column RMS scaling (non-zero values), one row factor to a mean squared norm of 15 / K,
    then the bias column -- as ``MultiLabelSSVM(scale=True, normalize=True)`` learns rows."""
    rms = np.sqrt((Xtr ** 2).sum(0) / np.maximum((Xtr != 0).sum(0), 1))
    rms[rms == 0] = 1.0
    if not scale:
        rms[:] = 1.0
    A, B = Xtr / rms, Xte / rms
    f = np.sqrt(ROW_NORM_C * A.shape[0] / (K * max((A ** 2).sum(), 1e-300)))
    return (np.hstack([np.ones((A.shape[0], 1)), A * f]), np.hstack([np.ones((B.shape[0], 1)), B * f]))


def hamming_loss(y, S):
    return (y[None, :] != S).sum(1) / S.shape[1]


def jaccard_loss(y, S):
    inter, union = (S & y[None, :]).sum(1), (S | y[None, :]).sum(1)
    return np.where(union == 0, 0.0, 1.0 - inter / np.maximum(union, 1))


def output_space(Y, space):
    """The labelings decoded over: the distinct training label sets, or all 2^K."""
    if space == "seen":
        return np.unique(Y, axis=0)
    codes = np.arange(2 ** Y.shape[1])
    return ((codes[:, None] >> np.arange(Y.shape[1])) & 1).astype(bool)


def _pairs(v):
    return np.triu(np.outer(v, v), 1)


def _set_scores(S, s, P, pairwise):
    sc = S @ s
    if pairwise:
        sc = sc + np.einsum("mk,mk->m", S @ np.triu(P, 1), S)
    return sc


def train(X, Y, variant, lam=None, passes=21, seed=0):
    """BCFW on lam/2 ||w||^2 + (1/n) sum_i max_y [Delta(y_i, y) + <w, phi(x_i, y) - phi(x_i, y_i)>]
    over the variant's output space; returns ``(W, P, S)``: emission and pair weights, the sets."""
    n, D = X.shape
    K = Y.shape[1]
    lam = lam or min(1e-3, 6.0 / n)
    S = output_space(Y, variant["space"])
    Sf = S.astype(np.float64)
    loss = hamming_loss if variant["loss"] == "ham" else jaccard_loss
    pairwise = variant["pairwise"]
    W, P = np.zeros((D, K)), np.zeros((K, K))
    a, li = np.zeros((n, K)), np.zeros(n)
    Pi = np.zeros((n, K, K)) if pairwise else None
    xx = (X ** 2).sum(1)
    losses = [loss(Y[i], S) for i in range(n)]
    c = 1.0 / (lam * n)
    rng = np.random.default_rng(seed)
    for _ in range(passes):
        for i in rng.permutation(n):
            x = X[i]
            L = losses[i]
            j = int(np.argmax(_set_scores(Sf, x @ W, P, pairwise) + L))
            yt = Y[i].astype(np.float64)
            da = a[i] - (yt - Sf[j]) * c          # the block minus its corner, emission part
            num, den = x @ W @ da, xx[i] * (da @ da)
            if pairwise:
                dP = Pi[i] - (_pairs(yt) - _pairs(Sf[j])) * c
                num, den = num + (dP * P).sum(), den + (dP * dP).sum()
            num = lam * num - li[i] + L[j] / n
            g = 0.0 if den <= 0 else min(max(num / (lam * den), 0.0), 1.0)
            if g == 0.0:
                continue
            W -= g * np.outer(x, da)
            a[i] -= g * da
            if pairwise:
                P -= g * dP
                Pi[i] -= g * dP
            li[i] += g * (L[j] / n - li[i])
    return W, P, S


def predict(model, X, pairwise):
    W, P, S = model
    Sf = S.astype(np.float64)
    sc = (X @ W) @ Sf.T
    if pairwise:
        sc = sc + np.einsum("mk,mk->m", Sf @ np.triu(P, 1), Sf)[None, :]
    return S[np.argmax(sc, 1)]


def cv_lam(X, Y, variant, folds=3):
    """Lambda among ``LAM_FACTORS`` x the default by ``folds``-fold CV on validation Jaccard."""
    n = X.shape[0]
    lam0 = min(1e-3, 6.0 / n)
    fold = np.arange(n) % folds
    score = []
    for f in LAM_FACTORS:
        tot = 0.0
        for k in range(folds):
            tr, va = fold != k, fold == k
            tot += md.jaccards(Y[va], predict(train(X[tr], Y[tr], variant, lam0 * f), X[va],
                                              variant["pairwise"])).sum()
        score.append(tot / n)
    return lam0 * LAM_FACTORS[int(np.argmax(score))]


def _variant(spec):
    """``space/features/loss[/cv | /xF][/unscaled]`` -> a dict (``xF``: F times the default lambda)."""
    parts = spec.split("/")
    times = [float(p[1:]) for p in parts[3:] if p.startswith("x")]
    return {"space": parts[0], "pairwise": parts[1] == "pair", "loss": parts[2], "cv": "cv" in parts[3:],
            "scale": "unscaled" not in parts[3:], "times": times[0] if times else 1.0}


VARIANTS = ("full/indep/ham", "seen/indep/ham", "seen/pair/ham", "seen/indep/jac", "seen/pair/ham/x3",
            "seen/pair/ham/x3/unscaled", "seen/pair/ham/cv", "seen/indep/jac/cv", "seen/pair/ham/cv/unscaled",
            "seen/indep/jac/cv/unscaled")


def run_set(name, variants):
    if name in md.HELD_OUT or name in md.HELD_OUT_R9:
        raise SystemExit(f"{name} is held out: this script runs on tuning sets only")
    Xtr, Ytr, Xte, Yte, labels = md.DATASETS[name]()
    K = Ytr.shape[1]
    log(f"{name}: {Xtr.shape[0]} train, {Xte.shape[0]} test, {Xtr.shape[1]} features, {K} labels, "
        f"{len(np.unique(Ytr, axis=0))} distinct training label sets")
    per_row, notes = {}, {}
    per_row["MultiLabelSSVM() + refine(20)"] = md.jaccards(Yte, md.ssvm(Xtr, Ytr, Xte, labels)[0])
    per_row["OvR LinearSVC (C=1)"] = md.jaccards(Yte, md.ovr_linearsvc(Xtr, Ytr, Xte)[0])
    P, C = md.ovr_linearsvc(Xtr, Ytr, Xte, cv=True)
    per_row["OvR LinearSVC (C by 3-fold CV)"], notes["OvR LinearSVC (C by 3-fold CV)"] = md.jaccards(Yte, P), f"C={C:g}"
    prepared = {}
    for spec in variants:
        v = _variant(spec)
        if v["space"] == "full" and K > 10:
            continue   # 2^K labelings per step
        if v["scale"] not in prepared:
            prepared[v["scale"]] = prepare(Xtr, Xte, K, v["scale"])
        A, B = prepared[v["scale"]]
        c0 = time.process_time()
        lam = cv_lam(A, Ytr, v) if v["cv"] else v["times"] * min(1e-3, 6.0 / A.shape[0])
        per_row[spec] = md.jaccards(Yte, predict(train(A, Ytr, v, lam), B, v["pairwise"]))
        notes[spec] = f"lam={lam:.3g}"
        log(f"  {spec}: {per_row[spec].mean():.3f} ({notes[spec]}, {time.process_time() - c0:.1f} s CPU, not locked)")
    peers = ("OvR LinearSVC (C=1)", "OvR LinearSVC (C by 3-fold CV)")
    return {"n_distinct_sets": int(len(np.unique(Ytr, axis=0))), "K": K,
            "jaccard": {m: float(r.mean()) for m, r in per_row.items()}, "notes": notes,
            "minus": {m: {p: md.paired_bootstrap(per_row[m], per_row[p]) for p in peers}
                      for m in per_row if m not in peers}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="*", default=list(md.TUNING))
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--out", default="/tmp/ml_seen")
    a = ap.parse_args(argv)
    res = {s: run_set(s, a.variants) for s in a.sets}
    lines = ["# Seen label sets: tuning table (tuning sets only)", "",
             "Test Jaccard; below it the difference to OvR LinearSVC C=1 / C by 3-fold CV with 95% paired "
             "bootstrap intervals (2,000 resamples). Generated by `python bench/archive/multilabel_seen_sets.py`.", ""]
    methods = list(next(iter(res.values()))["minus"])
    lines.append("| method | " + " | ".join(res) + " |")
    lines.append("|---|" + "---|" * len(res))
    for m in ["OvR LinearSVC (C=1)", "OvR LinearSVC (C by 3-fold CV)"] + methods:
        cells = []
        for s, r in res.items():
            if m not in r["jaccard"]:
                cells.append("—")
                continue
            cell = f"{r['jaccard'][m]:.3f}"
            if m in r["minus"]:
                d1, d2 = r["minus"][m].values()
                cell += (f"<br>{d1[0]:+.3f} [{d1[1]:+.3f}, {d1[2]:+.3f}]"
                         f"<br>{d2[0]:+.3f} [{d2[1]:+.3f}, {d2[2]:+.3f}]")
            cells.append(cell)
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump(res, f, indent=1)
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
