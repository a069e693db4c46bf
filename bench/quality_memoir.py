"""MEMOIR (``ExtremeClassifier``) against its peers on a real dense stream with ~2.8k classes.

    nice -n 10 python bench/quality_memoir.py                      # tagpair stream, 100k x 2 epochs
    nice -n 10 python bench/quality_memoir.py --stream context     # word from context (regime b)
    nice -n 10 python bench/quality_memoir.py --quick              # ~1 minute

Streams (``--stream``):

* ``tagpair`` (default): the Brown fine-tag bigram stream (:func:`tagpair_examples`): predict
  the pair of corpus tags (tag_p, tag_p+1) of two adjacent tokens, among the K=2800 most
  frequent pairs of the training documents (of 7,530 distinct pairs; majority baseline ~0.04),
  from the words w_p-1..w_p+2, two suffixes and two capitalization flags;
* ``context``: the word-from-context stream of ``bench/brown_extreme.py``, regime (b)
  (``streamssvm.datasets.brown_context_stream(n_classes=K)``): every learner stays within a
  few points of the majority baseline there, so it cannot rank averaging.

Either way the feature dicts are projected by a fixed seeded Gaussian projection to 256
dimensions and normalized to unit norm (``brown_extreme.Projection``); a seeded random sample
of ``--n`` training examples is replayed for ``--epochs`` epochs in that order, ``--m`` test
examples come from the test documents (every 5th document).

Peers (same data, same order, one process, one BLAS thread; ``--peers`` picks some):

0. ``ExtremeClassifier()`` with no arguments (the defaults: mips="auto", averaged weights);
1. the same with ``average="none"`` (last iterate); 2. ``average="uniform"``;
3. ``mips="hnsw"``; 4. the old defaults (eta0=0.1, eta_step=0.02 per example, lam=1e-4, last
   iterate);
5. an averaged multiclass perceptron (numpy, below; the issue's reference point);
6. ``MulticlassSSVM`` (BCFW), capped at ``--cap`` CPU seconds of training.

Vowpal Wabbit is reported as not run when the ``vowpalwabbit`` wheel is not installed.
Writes bench/results/quality_memoir[_tagpair].{json,md}.
"""
from __future__ import annotations

import argparse
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
from _common import brown_documents, log, table_head, write_results  # noqa: E402
from brown_extreme import Projection  # noqa: E402


def data(K, n, m, seed=0):
    d = ss.datasets.brown_context_stream(n_classes=K)
    rng = np.random.default_rng(seed)
    tr = [d["train"][i] for i in rng.permutation(len(d["train"]))[:n]]
    te = [d["test"][i] for i in rng.permutation(len(d["test"]))[:m]]
    P = Projection()
    Xtr = np.array([P(x) for x, _ in tr])
    Xte = np.array([P(x) for x, _ in te])
    classes = {w: i for i, w in enumerate(d["classes"])}
    ytr = np.array([classes[y] for _, y in tr])
    yte = np.array([classes[y] for _, y in te])
    return Xtr, ytr, Xte, yte, len(d["classes"])


def tagpair_examples(K, test_every=5):
    """The Brown fine-tag bigram stream: at every position p of a sentence with a successor,
    the class is the pair of corpus tags (tag_p, tag_p+1) (fine tags as written in the corpus,
    e.g. ``at nn``, ``nn-tl in``); only the K most frequent pairs of the training documents
    are classes (ties alphabetical), other positions are skipped. Features (a dict): the
    lowercased words w_p-1, w_p, w_p+1, w_p+2 (``w-1=``, ``w0=``, ``w1=``, ``w2=``), the
    3-letter suffixes of w_p and w_p+1 (``s0=``, ``s1=``), and whether w_p / w_p+1 are
    capitalized (``c0``, ``c1``). Document i is a test document when i % 5 == 4 (as
    ``brown_context_stream``)."""
    from collections import Counter
    docs = brown_documents()
    is_test = [i % test_every == test_every - 1 for i in range(len(docs))]
    freq = Counter(f"{s[p][1]} {s[p + 1][1]}" for (_, sents), t in zip(docs, is_test) if not t
                   for s in sents for p in range(len(s) - 1))
    classes = [c for c, _ in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[:K]]
    cls = {c: i for i, c in enumerate(classes)}
    out = {"classes": classes, "train": [], "test": [], "pairs_total": len(freq)}
    for (_, sents), t in zip(docs, is_test):
        dest = out["test" if t else "train"]
        for s in sents:
            low = [w.lower() for w, _ in s]
            for p in range(len(s) - 1):
                c = cls.get(f"{s[p][1]} {s[p + 1][1]}")
                if c is None:
                    continue
                x = {"w0=" + low[p]: 1.0, "w1=" + low[p + 1]: 1.0, "s0=" + low[p][-3:]: 1.0,
                     "s1=" + low[p + 1][-3:]: 1.0, "w-1=" + (low[p - 1] if p else "<s>"): 1.0,
                     "w2=" + (low[p + 2] if p + 2 < len(s) else "</s>"): 1.0}
                if s[p][0][:1].isupper():
                    x["c0"] = 1.0
                if s[p + 1][0][:1].isupper():
                    x["c1"] = 1.0
                dest.append((x, c))
    return out


def data_tagpair(K, n, m, seed=0):
    d = tagpair_examples(K)
    rng = np.random.default_rng(seed)
    tr = [d["train"][i] for i in rng.permutation(len(d["train"]))[:n]]
    te = [d["test"][i] for i in rng.permutation(len(d["test"]))[:m]]
    P = Projection()
    Xtr = np.array([P(x) for x, _ in tr])
    Xte = np.array([P(x) for x, _ in te])
    ytr = np.array([y for _, y in tr])
    yte = np.array([y for _, y in te])
    return Xtr, ytr, Xte, yte, len(d["classes"]), {"positions_train": len(d["train"]),
                                                   "positions_test": len(d["test"]),
                                                   "distinct_pairs": d["pairs_total"]}


class AveragedPerceptron:
    """Multiclass perceptron (update on a mistake: +x to the true row, -x to the predicted one),
    predicting with the average of all iterates (kept lazily: W_avg = W - U / t)."""

    def __init__(self, K, d):
        self.W = np.zeros((K, d))
        self.U = np.zeros((K, d))
        self.t = 1

    def learn_one(self, x, y):
        p = int(np.argmax(self.W @ x))
        if p != y:
            self.W[y] += x
            self.W[p] -= x
            self.U[y] += self.t * x
            self.U[p] -= self.t * x
        self.t += 1

    def predict(self, X):
        return np.argmax(X @ (self.W - self.U / self.t).T, axis=1)


def run(name, make, Xtr, ytr, Xte, yte, epochs, cap):
    log(name)
    m = make()
    t0 = time.process_time()
    n = 0
    capped = False
    slow = isinstance(m, ss.MulticlassSSVM)
    for _ in range(epochs):
        for x, y in zip(Xtr, ytr):
            m.learn_one(x, int(y))
            n += 1
            if (n % 500 == 0 or slow) and time.process_time() - t0 > cap:
                capped = True
                break
        if capped:
            break
    dt = time.process_time() - t0
    if isinstance(m, AveragedPerceptron):
        pred = m.predict(Xte)
    else:
        pred = np.array([m.predict_one(x) for x in Xte])
    res = {"peer": name, "trained_steps": n, "capped": capped, "train_cpu_s": dt, "steps_per_cpu_s": n / dt,
           "accuracy": float(np.mean(pred == yte))}
    if hasattr(m, "certificate") and isinstance(m, ss.ExtremeClassifier):
        dg = m.certificate().extra
        res.update(norm=dg["norm"], mips_active=dg["mips_active"], updates=dg["updates"], rows=dg["n_classes"])
    log(f"  {res}")
    return res


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--stream", choices=("tagpair", "context"), default="tagpair",
                    help="tagpair: Brown fine-tag bigrams (tagpair_examples); context: word from context")
    ap.add_argument("--K", type=int, default=2800)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--m", type=int, default=10_000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--cap", type=float, default=400.0, help="CPU seconds of training per peer")
    ap.add_argument("--peers", default="", help="comma-separated peer numbers to run (default: all)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.quick:
        a.n, a.m, a.cap = 5000, 1000, 30.0
    if a.out is None:
        a.out = os.path.join(HERE, "results", "quality_memoir" + ("_tagpair" if a.stream == "tagpair" else ""))
    t0 = time.perf_counter()
    if a.stream == "tagpair":
        Xtr, ytr, Xte, yte, K, extra = data_tagpair(a.K, a.n, a.m)
    else:
        Xtr, ytr, Xte, yte, K = data(a.K, a.n, a.m)
        extra = {}
    log(f"data: {Xtr.shape} train, {Xte.shape} test, {K} classes, {len(set(ytr.tolist()))} in the sample "
        f"({time.perf_counter() - t0:.0f} s)")
    M = ss.learners.MEMOIR
    peers = [
        ("ExtremeClassifier() defaults (auto, averaged)", lambda: ss.ExtremeClassifier()),
        ("defaults, last iterate (average='none')", lambda: ss.ExtremeClassifier(M(average="none"))),
        ("defaults, average='uniform'", lambda: ss.ExtremeClassifier(M(average="uniform"))),
        ("defaults, mips='hnsw'", lambda: ss.ExtremeClassifier(mips="hnsw")),
        ("old defaults (eta0=0.1, eta_step=0.02/example, lam=1e-4, last iterate)",
         lambda: ss.ExtremeClassifier(M(eta0=0.1, eta_step=0.02, lam=1e-4, average="none"), mips="exact")),
        ("averaged perceptron (numpy)", lambda: AveragedPerceptron(K, Xtr.shape[1])),
        ("MulticlassSSVM (BCFW, lam=1e-4)", lambda: ss.MulticlassSSVM(ss.learners.BCFW(lam=1e-4, seed=0))),
    ]
    if a.peers:
        keep = {int(v) for v in a.peers.split(",")}
        peers = [p for i, p in enumerate(peers) if i in keep]
    results = []
    for name, make in peers:
        results.append(run(name, make, Xtr, ytr, Xte, yte, a.epochs, a.cap))
    try:
        import vowpalwabbit  # noqa: F401
        vw = "installed but not wired in this script"
    except ImportError:
        vw = "not run: the vowpalwabbit wheel is not installed here"
    top = np.bincount(ytr).argmax()
    info = {"K": K, "n_train": int(len(ytr)), "n_test": int(len(yte)), "epochs": a.epochs, "dim": int(Xtr.shape[1]),
            "classes_in_train_sample": int(len(set(ytr.tolist()))), "majority_accuracy": float(np.mean(yte == top)),
            "vowpal_wabbit": vw, "cap_cpu_s": a.cap, "stream": a.stream, **extra}
    what = ("the Brown fine-tag bigram stream (bench/quality_memoir.py: tagpair_examples)" if a.stream == "tagpair"
            else "the Brown word-from-context stream, regime (b)")
    L = [f"# MEMOIR quality on {what}", "",
         f"K={K} classes ({info['classes_in_train_sample']} in the training sample), 256-d unit-norm dense "
         f"projection, {info['n_train']} training examples x {a.epochs} epochs, {info['n_test']} test examples, "
         f"majority baseline {info['majority_accuracy']:.3f}. CPU seconds (process time), one BLAS thread. "
         f"Vowpal Wabbit: {vw}.", "",
         *table_head("peer", "test accuracy", "steps", "train CPU s", "steps / CPU s", "notes")]
    for r in results:
        note = []
        if r["capped"]:
            note.append(f"capped at {a.cap:g} CPU s")
        if "mips_active" in r:
            note.append(f"mips {r['mips_active']}, |W| {r['norm']:.1f}, updates {r['updates']}")
        L.append(f"| {r['peer']} | {r['accuracy']:.3f} | {r['trained_steps']} | {r['train_cpu_s']:.1f} | "
                 f"{r['steps_per_cpu_s']:.0f} | {'; '.join(note)} |")
    write_results(a.out, {"info": info, "results": results}, L)


if __name__ == "__main__":
    main()
