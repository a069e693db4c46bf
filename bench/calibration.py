"""Calibration of the models' probabilities on held-out data, against peers in the same run.

    flock /tmp/bench.lock nice -n 0 python bench/calibration.py [--n-letters 20000]

Three held-out sets (OCR-large: train on folds 1-9, test on fold 0, ``streamssvm.datasets.load_ocr``):

* **OCR letters** (multiclass, 26 classes, 128 binary pixels + bias): the first ``--n-letters``
  training letters, all 4,8xx test letters. ``MulticlassSSVM`` (BCFW, one streaming pass,
  ``predict_proba_one``: softmax of the scores at the temperature fitted online) against
  scikit-learn ``LogisticRegression`` (batch, L-BFGS), river ``SoftmaxRegression`` (one
  streaming pass) and CRFsuite (L-BFGS CRF on one-letter sequences: multinomial logistic).
* **OCR words** (chain, 26 tags): all 6251 training words, 626 test words. ``SequenceTagger``
  (BCFW, one streaming pass, per-token marginals by forward-backward at the fitted temperature)
  against CRFsuite's marginals (L-BFGS CRF, ``Tagger.marginal``) and scikit-learn
  ``LogisticRegression`` per token (no chain).
* **Brown POS** (chain, a second real set the temperature's defaults were not tuned on): the first
  ``--brown-train`` / ``--brown-test`` sentences of Brown's training / test documents
  (``split_documents``: document i is a test one when i % 5 == 4), the features of
  ``bench/gdmm_brown.py``, the base tags mapped to 14 coarse ones (:func:`coarse_tag`: the
  temperature is fitted while learning up to 64 tags). Same peers as OCR words.

The chain sections also show the SequenceTagger's fit before its windows were pooled (the last
window alone, ``memory=0``: the same model, trained again) and, for reference only, the
temperature fitted on the test set itself.

For every model: accuracy of the argmax, expected calibration error (ECE: 15 equal-width bins of
the top-label confidence, |accuracy - mean confidence| weighted by the bin's share; Guo et al.,
"On Calibration of Modern Neural Networks", ICML 2017), mean log-loss of the true label, and the
CPU / wall seconds of training. The SSVM rows also show its probabilities at T = 1 (no fit).
Writes bench/results/calibration.{md,json} and calibration.png (reliability diagrams) if
matplotlib is installed.
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
from _common import cpu_model, log, ocr_words, table_head, write_results  # noqa: E402

BINS = 15


def ece(conf, correct, bins=BINS):
    """Expected calibration error of top-label confidences, and the per-bin (confidence,
    accuracy, count) for the reliability diagram."""
    conf, correct = np.asarray(conf, dtype=float), np.asarray(correct, dtype=float)
    idx = np.minimum((conf * bins).astype(int), bins - 1)
    e, diag = 0.0, []
    for b in range(bins):
        m = idx == b
        if m.any():
            c, a = conf[m].mean(), correct[m].mean()
            e += m.mean() * abs(a - c)
            diag.append((float(c), float(a), int(m.sum())))
    return float(e), diag


def summarize(name, P, y, secs):
    """Row of a model whose test probabilities are the rows of P (n x K), y the true indices."""
    P = np.asarray(P, dtype=float)
    pred = P.argmax(axis=1)
    conf = P[np.arange(len(y)), pred]
    e, diag = ece(conf, pred == y)
    nll = float(-np.mean(np.log(np.clip(P[np.arange(len(y)), y], 1e-12, 1.0))))
    return {"model": name, "accuracy": float(np.mean(pred == y)), "ece": e, "log_loss": nll,
            "train_cpu_s": secs[0], "train_wall_s": secs[1], "reliability": diag}


class Clock:
    def __enter__(self):
        self.c, self.w = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *a):
        self.secs = (time.process_time() - self.c, time.perf_counter() - self.w)


def _full(model, P, K):
    """predict_proba columns scattered onto all K classes (a class absent from training gets 0)."""
    out = np.zeros((P.shape[0], K))
    out[:, model.classes_] = P
    return out


def _feats(row):
    return {f"p{j}": 1.0 for j in np.flatnonzero(row)} | {"b": 1.0}


def _crf(train, params):
    """A CRFsuite tagger trained on ``(per-token feature dicts, string tags)`` pairs."""
    import pycrfsuite
    tr = pycrfsuite.Trainer(verbose=False, algorithm="lbfgs")
    for f, y in train:
        tr.append(pycrfsuite.ItemSequence(f), y)
    tr.set_params(params)
    path = f"/tmp/calibration_{os.getpid()}.crfsuite"
    tr.train(path)
    tg = pycrfsuite.Tagger()
    tg.open(path)
    os.remove(path)
    return tg


def _crf_marginals(tg, f, tags):
    """CRFsuite's per-token marginals (tokens x len(tags)) of a sequence's feature dicts ``f``."""
    import pycrfsuite
    tg.set(pycrfsuite.ItemSequence(f))
    labs = set(tg.labels())
    return np.array([[tg.marginal(str(k), t) if str(k) in labs else 0.0 for k in tags]
                     for t in range(len(f))])


def letters(args):
    X_tr, y_tr, X_te, y_te = ocr_words()
    Xl, yl = np.vstack(X_tr)[:args.n_letters], np.concatenate(y_tr)[:args.n_letters]
    Xt, yt = np.vstack(X_te), np.concatenate(y_te)
    K = 26
    rows = []
    log(f"letters: {len(yl)} train, {len(yt)} test")
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=args.lam, seed=0), labels=list(range(K)))
    with Clock() as c:
        for x, y in zip(Xl, yl):
            m.learn_one(x, int(y))
    P = np.array([[p[k] for k in range(K)] for p in map(m.predict_proba_one, Xt)])
    r = summarize("streamssvm MulticlassSSVM (BCFW, T fitted online)", P, yt, c.secs)
    r["temperature"] = m.temperature
    rows.append(r)
    beta, m._temperature.beta = m._temperature.beta, 1.0
    P1 = np.array([[p[k] for k in range(K)] for p in map(m.predict_proba_one, Xt)])
    m._temperature.beta = beta
    rows.append(summarize("streamssvm MulticlassSSVM (BCFW, T = 1, no fit)", P1, yt, c.secs))

    from sklearn.linear_model import LogisticRegression
    with Clock() as c:
        lr = LogisticRegression(max_iter=300, C=args.sk_c).fit(Xl, yl)
    rows.append(summarize(f"scikit-learn LogisticRegression (C={args.sk_c})", _full(lr, lr.predict_proba(Xt), K), yt, c.secs))

    from river import linear_model, optim
    rv = linear_model.SoftmaxRegression(optimizer=optim.SGD(0.05))
    with Clock() as c:
        for x, y in zip(Xl, yl):
            rv.learn_one(_feats(x), int(y))
    P = np.array([[rv.predict_proba_one(_feats(x)).get(k, 0.0) for k in range(K)] for x in Xt])
    rows.append(summarize("river SoftmaxRegression (SGD 0.05, one pass)", P, yt, c.secs))

    with Clock() as c:
        tg = _crf([([_feats(x)], [str(y)]) for x, y in zip(Xl, yl)], {"c2": args.crf_c2})
    P = np.vstack([_crf_marginals(tg, [_feats(x)], range(K)) for x in Xt])
    rows.append(summarize(f"CRFsuite L-BFGS (one-letter sequences, c2={args.crf_c2})", P, yt, c.secs))
    return {"dataset": "OCR letters (multiclass)", "n_train": int(len(yl)), "n_test": int(len(yt)), "rows": rows}


def _tagger_proba(m, X, tags, beta=None):
    """Per-token marginals (tokens x len(tags)) of tagger ``m`` on ``X`` (at inverse temperature ``beta``)."""
    old = m._temperature.beta
    if beta is not None:
        m._temperature.beta = beta
    P = np.vstack([[[d.get(k, 0.0) for k in tags] for d in m.predict_proba_one(x)] for x in X])
    m._temperature.beta = old
    return P


def chain_rows(args, X_tr, Y_tr, X_te, Y_te, tags, feats):
    """Rows of the chain peers: the SequenceTagger (T fitted online; the last window alone; T = 1;
    T fitted on the test set), CRFsuite's marginals and a per-token LogisticRegression. ``tags``
    lists the K tags (label index = position), ``feats(x)`` gives a sequence's per-token dicts."""
    K = len(tags)
    index = {t: i for i, t in enumerate(tags)}
    yt = np.array([index[v] for y in Y_te for v in y])
    rows = []

    def tagger():
        return ss.SequenceTagger(learner=ss.learners.BCFW(lam=args.lam, seed=0), labels=list(tags))
    m = tagger()
    with Clock() as c:
        for x, y in zip(X_tr, Y_tr):
            m.learn_one(x, y)
    r = summarize("streamssvm SequenceTagger (BCFW, marginals, T fitted online)", _tagger_proba(m, X_te, tags), yt, c.secs)
    r["temperature"] = m.temperature
    seqp = [m.sequence_proba_one(x) for x in X_te]
    seq_ok = [list(m.predict_one(x)) == list(y) for x, y in zip(X_te, Y_te)]
    r["sequence_ece"] = ece(seqp, seq_ok)[0]
    vit = np.array([index[v] for x in X_te for v in m.predict_one(x)])
    r["viterbi_accuracy"] = float(np.mean(vit == yt))
    rows.append(r)
    # the fit before the pool: the same (deterministic) training, the last window's beta alone
    m0 = tagger()
    m0._calibration_settings = {**m._calibration_settings, "memory": 0}
    for x, y in zip(X_tr, Y_tr):
        m0.learn_one(x, y)
    r = summarize("same SequenceTagger, T of the last window alone (memory=0, before the pool)",
                  _tagger_proba(m, X_te, tags, m0._temperature.beta), yt, c.secs)
    r["temperature"] = m0.temperature
    rows.append(r)
    rows.append(summarize("streamssvm SequenceTagger (BCFW, marginals, T = 1, no fit)",
                          _tagger_proba(m, X_te, tags, 1.0), yt, c.secs))
    # reference only: T fitted on the test set itself (the best a single temperature can do)
    oracle = ss.calibration.Temperature(window=10 ** 7, every=10 ** 9)
    for x, y in zip(X_te, Y_te):
        oracle.observe_chain(*m._gibbs_tables(*m._features.encode_tokens(x, grow=False)), m.transitions,
                             [index[v] for v in y])
    oracle.window_log_beta = np.log(m._temperature.beta)
    oracle.fit(steps=12)
    r = summarize("(reference) same SequenceTagger, T fitted on the test set",
                  _tagger_proba(m, X_te, tags, oracle.beta), yt, c.secs)
    r["temperature"] = 1.0 / oracle.beta
    rows.append(r)

    with Clock() as c:
        tg = _crf(((feats(x), [str(v) for v in y]) for x, y in zip(X_tr, Y_tr)), {"c2": args.crf_c2})
    P = np.vstack([_crf_marginals(tg, feats(x), tags) for x in X_te])
    r = summarize(f"CRFsuite L-BFGS CRF marginals (c2={args.crf_c2})", P, yt, c.secs)
    import pycrfsuite
    seqp, seq_ok = [], []
    for x, y in zip(X_te, Y_te):
        tg.set(pycrfsuite.ItemSequence(feats(x)))
        pred = tg.tag()
        seqp.append(tg.probability(pred))
        seq_ok.append(pred == [str(v) for v in y])
    r["sequence_ece"] = ece(seqp, seq_ok)[0]
    rows.append(r)

    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression
    with Clock() as c:
        dv = DictVectorizer()
        Xf = dv.fit_transform([f for x in X_tr for f in feats(x)])
        lr = LogisticRegression(max_iter=300, C=args.sk_c).fit(Xf, [index[v] for y in Y_tr for v in y])
    Pt = lr.predict_proba(dv.transform([f for x in X_te for f in feats(x)]))
    rows.append(summarize(f"scikit-learn LogisticRegression per token (C={args.sk_c})", _full(lr, Pt, K), yt, c.secs))
    return rows


def words(args):
    X_tr, Y_tr, X_te, Y_te = ocr_words()
    log(f"words: {len(X_tr)} train, {len(X_te)} test ({sum(map(len, Y_te))} tokens)")
    rows = chain_rows(args, X_tr, Y_tr, X_te, Y_te, list(range(26)), lambda x: [_feats(r) for r in x])
    return {"dataset": "OCR words (chain, per-token marginals)", "n_train": len(X_tr), "n_test": len(X_te),
            "rows": rows}


#: Brown base tags (``gdmm_brown.base_tag``) to coarse parts of speech, by the base tag's prefix
#: (the first match wins); a tag of punctuation only is ".", anything else "X"
COARSE = (("np", "PROPN"), ("n", "NOUN"), ("md", "AUX"), ("be", "AUX"), ("hv", "AUX"), ("do", "AUX"),
          ("v", "VERB"), ("j", "ADJ"), ("rp", "PRT"), ("to", "PRT"), ("r", "ADV"), ("ql", "ADV"),
          ("in", "ADP"), ("at", "DET"), ("ap", "DET"), ("ab", "DET"), ("dt", "DET"), ("wdt", "DET"),
          ("pp", "PRON"), ("wp", "PRON"), ("ex", "PRON"), ("cc", "CONJ"), ("cs", "CONJ"), ("cd", "NUM"),
          ("od", "NUM"))


def coarse_tag(tag):
    from gdmm_brown import base_tag
    b = base_tag(tag)
    if not any(ch.isalpha() for ch in b):
        return "."
    return next((c for p, c in COARSE if b.startswith(p)), "X")


def brown(args):
    from _common import brown_documents, split_documents
    from gdmm_brown import token_features

    def example(s):
        words = [w for w, _ in s]
        return [token_features(words, t) for t in range(len(words))], [coarse_tag(t) for _, t in s]
    tr, te = split_documents(brown_documents(), args.brown_train, args.brown_test, example)
    tags = sorted({v for _, y in tr + te for v in y})
    X_tr, Y_tr = [x for x, _ in tr], [y for _, y in tr]
    X_te, Y_te = [x for x, _ in te], [y for _, y in te]
    log(f"brown: {len(X_tr)} train, {len(X_te)} test sentences ({sum(map(len, Y_te))} tokens), {len(tags)} tags")
    rows = chain_rows(args, X_tr, Y_tr, X_te, Y_te, tags, lambda x: x)
    return {"dataset": f"Brown POS ({len(tags)} coarse tags; chain, per-token marginals)", "n_train": len(X_tr),
            "n_test": len(X_te), "rows": rows}


def plot(sets, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 5))
    for ax, s in zip(np.atleast_1d(axes), sets):
        ax.plot([0, 1], [0, 1], "k:", lw=1)
        for r in s["rows"]:
            if "no fit" in r["model"] or r["model"].startswith("(reference)"):
                continue
            c, a, _ = zip(*r["reliability"])
            ax.plot(c, a, "o-", ms=3, label=f"{r['model']} (ECE {r['ece']:.3f})")
        ax.set(title=s["dataset"], xlabel="confidence (top label)", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1))
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-letters", type=int, default=20000)
    ap.add_argument("--lam", type=float, default=1e-3)
    ap.add_argument("--sk-c", type=float, default=1.0)
    ap.add_argument("--crf-c2", type=float, default=1.0)
    ap.add_argument("--brown-train", type=int, default=3000)
    ap.add_argument("--brown-test", type=int, default=1000)
    ap.add_argument("--no-brown", action="store_true", help="skip the Brown section")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "calibration"))
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sets = [letters(args), words(args)] + ([] if args.no_brown else [brown(args)])
    lines = ["# Calibration on held-out data", "",
             f"CPU: {cpu_model()}. OCR-large split (train folds 1-9, test fold 0); Brown: document i is a test "
             f"document when i % 5 == 4. ECE: {BINS} equal-width "
             "bins of the top-label confidence (per token for the chains). Training time only (CPU / wall s); "
             "the streamssvm rows include the online temperature fit. Generated by bench/calibration.py.", ""]
    for s in sets:
        lines += [f"## {s['dataset']}: {s['n_train']} train, {s['n_test']} test", "",
                  *table_head("model", "accuracy", "ECE", "log-loss", "T", "sequence ECE", "train CPU s", "train wall s")]
        for r in s["rows"]:
            T = f"{r['temperature']:.3g}" if "temperature" in r else ""
            sq = f"{r['sequence_ece']:.3f}" if "sequence_ece" in r else ""
            lines.append(f"| {r['model']} | {r['accuracy']:.4f} | {r['ece']:.4f} | {r['log_loss']:.3f} | {T} | {sq} "
                         f"| {r['train_cpu_s']:.1f} | {r['train_wall_s']:.1f} |")
        lines.append("")
        if "viterbi_accuracy" in s["rows"][0]:
            lines += [f"Token accuracy of the SequenceTagger's Viterbi prediction: "
                      f"{s['rows'][0]['viterbi_accuracy']:.4f} (the table's accuracy is the argmax of each "
                      "token's marginal).", ""]
    if plot(sets, args.out + ".png"):
        lines += [f"Reliability diagrams: `{os.path.basename(args.out)}.png`.", ""]
    write_results(args.out, {"args": vars(args), "sets": sets}, lines)


if __name__ == "__main__":
    main()
