"""Confirm MEMOIR's defaults on streams they were not tuned on, in one process, against the
averaged perceptron and ``MulticlassSSVM`` (BCFW, capped in CPU time).

    nice -n 10 python bench/memoir_confirm.py                 # all streams
    nice -n 10 python bench/memoir_confirm.py --streams ocr   # some of them

The defaults were tuned on the tag-pair stream's training sample only (``bench/memoir_tune.py``:
first 40k of the 100k training sample, validated on the next 10k; the test documents never
read). Confirm streams (test sets never used for any choice):

* ``tagpair``: the full tag-pair stream of ``bench/quality_memoir.py`` (2,800 Brown fine-tag
  pairs, 256-d unit-norm projection), 100k training examples x 2 epochs, 10k test examples from
  the test documents (every 5th document);
* ``context``: the Brown word-from-context stream (``bench/quality_memoir.py --stream context``,
  2,800 word classes), 20k x 2 epochs, 4k test;
* ``ocr``: OCR letters (Taskar et al.; ``/work/shared/datasets/ocr_letters.npz``) as a flat
  26-class stream of the raw 128 binary pixels (no normalization, no bias feature), the
  letters of folds 1-9 (train; shuffled with seed 0) x 2 epochs, tested on every letter of
  fold 0 (the OCR-large split of ``streamssvm.datasets.load_ocr``);
* ``finetag``: the Brown fine tag of a token (472 corpus tags as written, e.g. ``nn-tl``) from
  the lowercased words w_p-1, w_p, w_p+1, the 3-letter suffix of w_p and its capitalization,
  projected to 256-d unit norm as above; 100k x 2 epochs, 10k test from the test documents.

Peers on every stream, same data, same order: ``ExtremeClassifier()`` (the defaults), the
previous defaults (eta0=3, eta_step=2e-4 per example), the averaged perceptron of
``quality_memoir.py`` (on x, no bias), the same on [1, x] (the estimators' input: a constant
bias feature), and ``MulticlassSSVM(BCFW(lam=1e-4))`` capped at ``--cap`` CPU seconds.
Writes ``bench/results/quality_memoir_confirm.{json,md}``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import streamssvm as ss  # noqa: E402
from _common import log, table_head, write_results  # noqa: E402
from brown_extreme import Projection  # noqa: E402
from quality_memoir import AveragedPerceptron, data, data_tagpair, run  # noqa: E402


def finetag_examples(test_every=5):
    """Brown fine tag of every token from its context (see the module docstring)."""
    docs = ss.datasets.load_brown()
    out = {"train": [], "test": []}
    for i, (_, sents) in enumerate(docs):
        dest = out["test" if i % test_every == test_every - 1 else "train"]
        for s in sents:
            low = [w.lower() for w, _ in s]
            for p in range(len(s)):
                x = {"w0=" + low[p]: 1.0, "s0=" + low[p][-3:]: 1.0,
                     "w-1=" + (low[p - 1] if p else "<s>"): 1.0,
                     "w1=" + (low[p + 1] if p + 1 < len(s) else "</s>"): 1.0}
                if s[p][0][:1].isupper():
                    x["c0"] = 1.0
                dest.append((x, s[p][1]))
    classes = sorted({t for _, t in out["train"]})
    cls = {c: i for i, c in enumerate(classes)}
    out["test"] = [(x, t) for x, t in out["test"] if t in cls]
    out["classes"] = classes
    out["cls"] = cls
    return out


def data_finetag(n, m, seed=0):
    d = finetag_examples()
    rng = np.random.default_rng(seed)
    tr = [d["train"][i] for i in rng.permutation(len(d["train"]))[:n]]
    te = [d["test"][i] for i in rng.permutation(len(d["test"]))[:m]]
    P = Projection()
    Xtr = np.array([P(x) for x, _ in tr])
    Xte = np.array([P(x) for x, _ in te])
    return (Xtr, np.array([d["cls"][t] for _, t in tr]), Xte, np.array([d["cls"][t] for _, t in te]),
            len(d["classes"]), {"positions_train": len(d["train"]), "positions_test": len(d["test"])})


def data_ocr(seed=0):
    X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("large")
    Xtr, ytr = np.concatenate(X_tr), np.concatenate(y_tr)
    perm = np.random.default_rng(seed).permutation(len(ytr))
    return Xtr[perm], ytr[perm], np.concatenate(X_te), np.concatenate(y_te), 26, {}


class BiasPerceptron(AveragedPerceptron):
    """The averaged perceptron on [1, x]: the input the estimators give their learners (every
    token carries a constant bias feature of value 1)."""

    def __init__(self, K, d):
        super().__init__(K, d + 1)

    def learn_one(self, x, y):
        super().learn_one(np.concatenate(([1.0], x)), y)

    def predict(self, X):
        return super().predict(np.hstack([np.ones((len(X), 1)), X]))


STREAMS = {
    "tagpair": lambda: data_tagpair(2800, 100_000, 10_000),
    "context": lambda: (*data(2800, 20_000, 4_000), {}),
    "ocr": data_ocr,
    "finetag": lambda: data_finetag(100_000, 10_000),
}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="tagpair,context,ocr,finetag")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--cap", type=float, default=60.0, help="CPU seconds of training for BCFW")
    ap.add_argument("--peers", default="", help="comma-separated peer numbers (default: all)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "quality_memoir_confirm"))
    a = ap.parse_args(argv)
    M = ss.learners.MEMOIR
    # compile the numba kernels outside the timed runs (the first BCFW step otherwise pays them)
    w = np.random.default_rng(0).normal(size=(4, 8))
    for name, make in (("BCFW", lambda: ss.MulticlassSSVM(ss.learners.BCFW(lam=1e-4, seed=0))),
                       ("MEMOIR", lambda: ss.ExtremeClassifier())):
        m = make()
        for i in range(4):
            m.learn_one(w[i], i % 3)
        m.predict_one(w[0])
    all_results = {}
    for stream in a.streams.split(","):
        t0 = time.perf_counter()
        Xtr, ytr, Xte, yte, K, extra = STREAMS[stream]()
        log(f"{stream}: {Xtr.shape} train, {Xte.shape} test, {K} classes ({time.perf_counter() - t0:.0f} s)")
        peers = [
            ("ExtremeClassifier() defaults", lambda: ss.ExtremeClassifier()),
            ("previous defaults (eta0=3, eta_step=2e-4)", lambda: ss.ExtremeClassifier(M(eta0=3.0, eta_step=2e-4))),
            ("averaged perceptron (numpy)", lambda: AveragedPerceptron(K, Xtr.shape[1])),
            ("averaged perceptron + constant bias feature 1 (the estimator's input)", lambda: BiasPerceptron(K, Xtr.shape[1])),
            ("MulticlassSSVM (BCFW, lam=1e-4)", lambda: ss.MulticlassSSVM(ss.learners.BCFW(lam=1e-4, seed=0))),
        ]
        if a.peers:
            keep = {int(v) for v in a.peers.split(",")}
            peers = [p for i, p in enumerate(peers) if i in keep]
        res = [run(name, make, Xtr, ytr, Xte, yte, a.epochs, a.cap if "BCFW" in name else 1e9)
               for name, make in peers]
        top = np.bincount(ytr).argmax()
        info = {"K": K, "n_train": int(len(ytr)), "n_test": int(len(yte)), "epochs": a.epochs,
                "dim": int(Xtr.shape[1]), "majority_accuracy": float(np.mean(yte == top)), **extra}
        all_results[stream] = {"info": info, "results": res}
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out + ".json", "w") as f:
            json.dump({"cap_cpu_s": a.cap, "streams": all_results}, f, indent=1)
    L = ["# MEMOIR defaults on streams not used for tuning", "",
         f"`nice -n 10 python bench/memoir_confirm.py --streams {a.streams} --cap {a.cap:g}` "
         "(one process, one BLAS thread; CPU seconds are process time). Streams: see the script's docstring.", ""]
    for stream, r in all_results.items():
        info = r["info"]
        L += [f"## {stream}: K={info['K']}, {info['n_train']} train x {info['epochs']} epochs, {info['n_test']} test, "
              f"dim {info['dim']}, majority {info['majority_accuracy']:.3f}", "",
              *table_head("peer", "test accuracy", "steps", "train CPU s", "notes")]
        for x in r["results"]:
            note = []
            if x["capped"]:
                note.append(f"capped at {a.cap:g} CPU s")
            if "updates" in x:
                note.append(f"hinge active on {x['updates'] / x['trained_steps']:.0%} of steps, |W| {x['norm']:.1f}")
            L.append(f"| {x['peer']} | {x['accuracy']:.4f} | {x['trained_steps']} | {x['train_cpu_s']:.1f} | "
                     f"{'; '.join(note)} |")
        L.append("")
    write_results(a.out, {"cap_cpu_s": a.cap, "streams": all_results}, L)


if __name__ == "__main__":
    main()
