"""Class weights on an imbalanced real set, against scikit-learn's LinearSVC in the same run.

    flock /tmp/bench.lock nice -n 0 env OPENBLAS_NUM_THREADS=1 python bench/class_weight.py [--n-letters 20000]

OCR letters (OCR-large: train on folds 1-9, test on fold 0, ``streamssvm.datasets.load_ocr``;
26 classes, 128 binary pixels, English letter frequencies: 'e' is ~40x more frequent than 'q'
or 'z' in the training set). Two training sets, one test set (all test letters, natural
frequencies):

* **natural**: ``--n-letters`` training letters drawn in a seeded random order (the file's order
  groups words, so its first letters miss whole classes: a stream that is not stationary);
* **skewed**: the same letters with those of the classes n..z thinned to 10% (every tenth), so
  half the classes are rare at training time only.

Models (ours: one streaming pass in stream order, ``learn_many``; SGD lam = 1/(C n) with
LinearSVC's C = 1 and n training letters: the same objective up to the loss form):
``MulticlassSSVM`` with SGD unweighted and with ``class_weight="balanced"`` (computed online:
n / (K n_y) when a letter is learned), BCFW (the default learner: the exact weighted dual,
``streamssvm._kernels.bcfw``) unweighted and with ``class_weight="balanced"``; peers
scikit-learn ``LinearSVC`` (liblinear, batch, one-vs-rest squared hinge) unweighted and with
``class_weight="balanced"`` (n / (K bincount(y)) over the whole training set). Metrics on the test
letters: accuracy, balanced accuracy (mean per-class recall), macro-F1, the lowest per-class
recall; CPU and wall seconds of training. Writes bench/results/class_weight.{md,json}.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import streamssvm as ss  # noqa: E402
from _common import cpu_model, fmt, log, ocr_letters, table_head, write_results  # noqa: E402


def scores(y, p):
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, f1_score, recall_score
    rec = recall_score(y, p, average=None, labels=np.arange(26), zero_division=0)
    return {"accuracy": float(accuracy_score(y, p)), "balanced_accuracy": float(balanced_accuracy_score(y, p)),
            "macro_f1": float(f1_score(y, p, average="macro", labels=np.arange(26), zero_division=0)),
            "min_recall": float(rec.min())}


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def run_set(name, X, y, X_te, y_te, lam):
    from sklearn.svm import LinearSVC
    rows = []

    def ours(label, learner, **kw):
        m = ss.MulticlassSSVM(labels=list(range(26)), scale=False, learner=learner, **kw)
        _, cpu, wall = timed(lambda: m.learn_many(X, y))
        p = np.asarray(m.predict_many(X_te), dtype=np.int64)
        rows.append({"set": name, "model": label, **scores(y_te, p), "cpu_s": cpu, "wall_s": wall})
        log(f"{name}: {label} {rows[-1]}")

    ours("ours SGD", ss.learners.SGD(lam=lam, seed=0))
    ours("ours SGD class_weight=balanced", ss.learners.SGD(lam=lam, seed=0), class_weight="balanced")
    ours("ours BCFW (default learner)", ss.learners.BCFW(seed=0))
    ours("ours BCFW class_weight=balanced", ss.learners.BCFW(seed=0), class_weight="balanced")
    for label, cw in (("LinearSVC", None), ("LinearSVC class_weight=balanced", "balanced")):
        clf = LinearSVC(C=1.0, class_weight=cw)
        _, cpu, wall = timed(lambda: clf.fit(X, y))
        rows.append({"set": name, "model": label, **scores(y_te, clf.predict(X_te)), "cpu_s": cpu, "wall_s": wall})
        log(f"{name}: {label} {rows[-1]}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-letters", type=int, default=20000)
    args = ap.parse_args()
    X_tr, y_tr, X_te, y_te = ocr_letters()
    order = np.random.default_rng(0).permutation(len(y_tr))[:args.n_letters]
    X, y = X_tr[order], y_tr[order]
    keep = (y < 13) | (np.cumsum(y >= 13) % 10 == 0)
    sets = {"natural": (X, y), "skewed": (X[keep], y[keep])}
    rows = []
    for name, (Xs, ys) in sets.items():
        counts = np.bincount(ys, minlength=26)
        log(f"{name}: {len(ys)} letters, class counts {counts.min()}..{counts.max()}")
        rows += run_set(name, Xs, ys, X_te, y_te, lam=1.0 / len(ys))
    lines = ["# Class weights on imbalanced OCR letters (same run, peers included)", "",
             f"Train: {args.n_letters} OCR-large training letters in a seeded random order (natural), and the same with classes "
             f"n..z thinned to 10% (skewed: {int(keep.sum())} letters); test: all {len(y_te)} test letters. "
             "Ours: one streaming pass (SGD lam = 1/n, LinearSVC's C = 1; BCFW its default lambda following the "
             "held weight N); LinearSVC: batch liblinear. "
             f"CPU: {cpu_model()}.", ""]
    lines += table_head("set", "model", "accuracy", "balanced acc.", "macro-F1", "min recall", "CPU s", "wall s")
    for r in rows:
        lines.append(f"| {r['set']} | {r['model']} | {r['accuracy']:.3f} | {r['balanced_accuracy']:.3f} | "
                     f"{r['macro_f1']:.3f} | {r['min_recall']:.3f} | {fmt(r['cpu_s'])} | {fmt(r['wall_s'])} |")
    write_results(os.path.join(HERE, "results", "class_weight"), {"rows": rows, "n_letters": args.n_letters}, lines)


if __name__ == "__main__":
    main()
