"""``MultiLabelSSVM()`` defaults against one-vs-rest baselines, on multi-label data held out
from the tuning of the defaults, in one run.

Data (every set fed as raw features, the same rows to every method):

* **held out** -- never looked at while choosing the default:
  ``reuters``: Reuters-21578 news stories (Lewis; ModApte split, a fifth of it as Weka ships it)
  with their two real topic labels *corn* and *grain*. Source: the ``ReutersCorn-{train,test}.arff``
  and ``ReutersGrain-{train,test}.arff`` examples of Debian's ``weka`` package (Weka 3.6,
  University of Waikato, GPL-2+; the Reuters-21578 collection is distributed freely for research
  by D. D. Lewis, copyright Reuters Ltd and Carnegie Group): the two files hold the same 1,554 /
  604 stories in the same order, one binary topic each. Get them without installing Java:
  ``apt-get download weka && dpkg -x weka_*.deb DIR`` and set ``STREAMSSVM_WEKA_EXAMPLES`` to
  ``DIR/usr/share/doc/weka/examples`` (default ``/usr/share/doc/weka/examples``, where
  ``apt-get install weka`` puts them). Features: TF-IDF (sublinear tf, English stop words, words
  in >= 3 training stories, the 3,000 most frequent) fit on the training stories.
* **looked at last round** (no longer held out: its result chose the row normalization):
  ``yeast``: river's bundled Yeast (Elisseeff & Weston, 2001), 103 features, 14 labels, the
  original 1,500 / 917 split; a real multi-label set.
* **tuning** -- the sets the candidate defaults were compared on (constructed labellings of
  single-label data, said so):
  ``digits``: scikit-learn's digits (64 pixel counts 0..16), 3 labels of the digit (even,
  below 5, prime), seeded 2/3 : 1/3 split;
  ``letters``: OCR letters (Taskar et al., binary 16x8 images), 5,000 letters, 5 labels of the
  letter (vowel, ascender, descender, first half of the alphabet, closed loop), 2/3 : 1/3;
  ``letters14``: 3,000 OCR letters, 14 labels of the letter from a seeded random code (each
  letter has each label with probability 0.3), 2/3 : 1/3 -- as many labels as Yeast.

Methods: ``MultiLabelSSVM`` settings streamed once through ``learn_one`` then ``refine``;
one-vs-rest ``LinearSVC`` (scikit-learn defaults, C=1, and C chosen by 3-fold CV on the training
rows for the samples-averaged Jaccard); one-vs-rest averaged perceptron (one online pass,
``SGDClassifier(loss="perceptron", average=True)`` through ``partial_fit``) and river's
``BinaryRelevance``-style logistic regression behind its ``StandardScaler`` (one online pass).
Scores: samples-averaged Jaccard (an empty prediction of an empty truth counts 1), Hamming
loss, the share of test rows given no label; CPU and wall seconds of learning + predicting.

    python bench/multilabel_defaults.py                 # the final run: writes bench/results/
    python bench/multilabel_defaults.py --tune --out /tmp/ml_tune   # tuning candidates (not in results)

Run it under the machine's benchmark lock (``flock /tmp/bench.lock``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import cpu_model, log, table_head, write_results  # noqa: E402

# ---------------------------------------------------------------------------------------- data

_VOWEL = set("aeiou")
_ASCENDER = set("bdfhklt")
_DESCENDER = set("gjpqy")
_LOOP = set("abdegopq")


def yeast():
    from river import datasets
    rows = list(datasets.Yeast())
    feats = sorted(rows[0][0])
    labels = sorted(rows[0][1])
    X = np.array([[x[f] for f in feats] for x, _ in rows], dtype=np.float64)
    Y = np.array([[bool(y[k]) for k in labels] for _, y in rows])
    return X[:1500], Y[:1500], X[1500:], Y[1500:], labels


def _arff_stories(path):
    """(text, 0/1 class) rows of a Weka text ARFF (one quoted string attribute, then the class)."""
    import re
    with open(path, encoding="latin-1") as f:
        data = f.read().split("@data", 1)[1]
    rows = re.findall(r"'((?:[^'\\]|\\.)*)',([01])", data, flags=re.S)
    return [bytes(t, "latin-1").decode("unicode_escape") for t, _ in rows], [c == "1" for _, c in rows]


def reuters():
    from sklearn.feature_extraction.text import TfidfVectorizer
    base = os.environ.get("STREAMSSVM_WEKA_EXAMPLES", "/usr/share/doc/weka/examples")
    parts = {}
    for split in ("train", "test"):
        tc, corn = _arff_stories(os.path.join(base, f"ReutersCorn-{split}.arff"))
        tg, grain = _arff_stories(os.path.join(base, f"ReutersGrain-{split}.arff"))
        if tc != tg:
            raise ValueError(f"ReutersCorn-{split} and ReutersGrain-{split} hold different stories")
        parts[split] = (tc, np.stack([corn, grain], axis=1))
    vec = TfidfVectorizer(sublinear_tf=True, stop_words="english", min_df=3, max_features=3000)
    Xtr = vec.fit_transform(parts["train"][0]).toarray()
    Xte = vec.transform(parts["test"][0]).toarray()
    return Xtr, parts["train"][1], Xte, parts["test"][1], ["corn", "grain"]


def _split(X, Y, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.permutation(X.shape[0])
    n = (2 * X.shape[0]) // 3
    return X[p[:n]], Y[p[:n]], X[p[n:]], Y[p[n:]]


def digits():
    from sklearn.datasets import load_digits
    X, d = load_digits(return_X_y=True)
    Y = np.stack([d % 2 == 0, d < 5, np.isin(d, [2, 3, 5, 7])], axis=1)
    return (*_split(X.astype(np.float64), Y), ["even", "small", "prime"])


def letters(n=5000):
    path = os.path.join(os.environ.get("STREAMSSVM_DATA", "/work/shared/datasets"), "ocr_letters.npz")
    z = np.load(path, allow_pickle=False)
    X = np.unpackbits(z["pixels"], axis=1).astype(np.float64)
    ch = np.array([chr(ord("a") + int(c)) for c in z["labels"]])
    sel = np.random.default_rng(0).permutation(X.shape[0])[:n]
    X, ch = X[sel], ch[sel]
    Y = np.stack([np.isin(ch, list(s)) for s in (_VOWEL, _ASCENDER, _DESCENDER, set("abcdefghijklm"), _LOOP)],
                 axis=1)
    return (*_split(X, Y), ["vowel", "ascender", "descender", "a_to_m", "loop"])


def letters14(n=3000):
    path = os.path.join(os.environ.get("STREAMSSVM_DATA", "/work/shared/datasets"), "ocr_letters.npz")
    z = np.load(path, allow_pickle=False)
    X = np.unpackbits(z["pixels"], axis=1).astype(np.float64)
    sel = np.random.default_rng(0).permutation(X.shape[0])[:n]
    code = np.random.default_rng(1).random((26, 14)) < 0.3
    return (*_split(X[sel], code[z["labels"][sel]]), [f"l{k}" for k in range(14)])


DATASETS = {"reuters": reuters, "yeast": yeast, "digits": digits, "letters": letters, "letters14": letters14}
HELD_OUT = ("reuters",)
LOOKED_AT = ("yeast",)
TUNING = ("digits", "letters", "letters14")

# ------------------------------------------------------------------------------------- scoring


def jaccards(Y, P):
    """Each test row's Jaccard index (1 for an empty prediction of an empty truth)."""
    inter = (Y & P).sum(1)
    union = (Y | P).sum(1)
    return np.where(union == 0, 1.0, inter / np.maximum(union, 1))


def paired_bootstrap(a, b, reps=2000, seed=0):
    """Mean of a - b (per-row Jaccards of two methods on the same rows) and its 95% paired
    bootstrap interval."""
    d = np.asarray(a) - np.asarray(b)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.shape[0], size=(reps, d.shape[0]))].mean(1)
    return float(d.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def scores(Y, P):
    jac = jaccards(Y, P)
    return {"jaccard": float(jac.mean()), "hamming": float((Y != P).mean()),
            "empty": float((P.sum(1) == 0).mean())}


def _timed(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - t0


# ------------------------------------------------------------------------------------- methods


def ssvm(Xtr, Ytr, Xte, labels, refine=20, **kw):
    import streamssvm as ss
    m = ss.MultiLabelSSVM(**kw)
    names = [f"f{j}" for j in range(Xtr.shape[1])]

    def row(a):
        return {names[j]: float(a[j]) for j in np.flatnonzero(a)}

    for a, y in zip(Xtr, Ytr):
        m.learn_one(row(a), {lab: bool(v) for lab, v in zip(labels, y)})
    if refine:
        m.refine(refine)
    P = np.array([[bool(m.predict_one(row(a)).get(lab, False)) for lab in labels] for a in Xte])
    return P, m


def ovr_linearsvc(Xtr, Ytr, Xte, C=1.0, cv=False, standardize=False):
    from sklearn.model_selection import GridSearchCV
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC
    est = OneVsRestClassifier(LinearSVC(C=C))
    if standardize:
        est = make_pipeline(StandardScaler(), est)
    if cv:
        from sklearn.metrics import jaccard_score, make_scorer
        key = ("onevsrestclassifier__" if standardize else "") + "estimator__C"
        est = GridSearchCV(est, {key: [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0]}, cv=3,
                           scoring=make_scorer(jaccard_score, average="samples", zero_division=1.0))
    est.fit(Xtr, Ytr.astype(int))
    P = est.predict(Xte).astype(bool)
    return P, (est.best_params_[key] if cv else C)


def ovr_averaged_perceptron(Xtr, Ytr, Xte):
    from sklearn.linear_model import SGDClassifier
    models = [SGDClassifier(loss="perceptron", penalty=None, learning_rate="constant", eta0=1.0, average=True,
                            random_state=0) for _ in range(Ytr.shape[1])]
    for i in range(Xtr.shape[0]):   # one online pass, one record at a time
        for k, m in enumerate(models):
            m.partial_fit(Xtr[i:i + 1], Ytr[i:i + 1, k].astype(int), classes=[0, 1])
    return np.stack([m.predict(Xte).astype(bool) for m in models], axis=1)


def river_binary_relevance(Xtr, Ytr, Xte, labels):
    from river import compose, linear_model, multioutput, preprocessing
    model = compose.Pipeline(preprocessing.StandardScaler(),
                             multioutput.ClassifierChain(linear_model.LogisticRegression(), order=list(labels)))
    names = [f"f{j}" for j in range(Xtr.shape[1])]
    for a, y in zip(Xtr, Ytr):
        model.learn_one(dict(zip(names, map(float, a))), {lab: bool(v) for lab, v in zip(labels, y)})
    out = []
    for a in Xte:
        p = model.predict_one(dict(zip(names, map(float, a))))
        out.append([bool(p.get(lab, False)) for lab in labels])
    return np.array(out)


# --------------------------------------------------------------------------------- candidates


def candidates(tune):
    import streamssvm as ss
    BCFW = ss.learners.BCFW
    out = [("MultiLabelSSVM() + refine(20)", {}),
           ("MultiLabelSSVM(), stream only", {"refine": 0}),
           ("MultiLabelSSVM() + refine(100)", {"refine": 100}),
           ("pairwise=False (last round's default) + refine(20)", {"pairwise": False}),
           ("pairwise=False, refine(100)", {"pairwise": False, "refine": 100}),
           ("normalize=False, pairwise=False (two rounds ago) + refine(20)", {"normalize": False, "pairwise": False}),
           ("pairwise=True + refine(20)", {"pairwise": True, "max_labels": 8})]
    if tune:
        out = out[:1]
        out += [
            ("stream only (no refine)", {"refine": 0}),
            ("refine(50)", {"refine": 50}),
            ("scale=False", {"scale": False}),
            ("sampling=uniform", {"learner": BCFW(sampling="uniform")}),
            ("pairwise=True", {"pairwise": True}),
            ("pairwise=True + refine(50)", {"pairwise": True, "refine": 50}),
            ("pairwise=True, BCFW(lam=0.01)", {"pairwise": True, "learner": BCFW(lam=0.01)}),
            ("pairwise=True, BCFW(lam=1e-4)", {"pairwise": True, "learner": BCFW(lam=1e-4)}),
        ]
        for lam in (1e-4, 1e-3, 1e-2, 3e-2, 0.1, 0.3):
            out.append((f"BCFW(lam={lam:g})", {"learner": BCFW(lam=lam)}))
    return out


def run_set(name, tune):
    Xtr, Ytr, Xte, Yte, labels = DATASETS[name]()
    log(f"{name}: {Xtr.shape[0]} train, {Xte.shape[0]} test, {Xtr.shape[1]} features, {len(labels)} labels")
    rows = []
    per_row = {}

    def add(method, fn, **extra):
        (P, *rest), cpu, wall = _timed(lambda: (lambda r: r if isinstance(r, tuple) else (r,))(fn()))
        r = {"method": method, **scores(Yte, P), "cpu_s": cpu, "wall_s": wall, **extra}
        per_row[method] = jaccards(Yte, P)
        if rest and not isinstance(rest[0], (int, float)):
            m = rest[0]
            c = m.certificate()
            r.update(lam=float(m._learner.effective_lam()), gap=float(c.raw_gap), primal=float(c.primal))
        elif rest:
            r["C"] = rest[0]
        rows.append(r)
        log(f"  {method}: jaccard {r['jaccard']:.3f}  empty {r['empty']:.3f}  cpu {cpu:.1f}s")

    for label, kw in candidates(tune):
        kw = dict(kw)
        refine = kw.pop("refine", 20)
        if len(labels) > kw.pop("max_labels", len(labels)):
            continue   # pairwise decoding enumerates 2^K labelings per oracle call
        add(label, lambda: ssvm(Xtr, Ytr, Xte, labels, refine=refine, **kw))
    add("OvR LinearSVC (C=1)", lambda: ovr_linearsvc(Xtr, Ytr, Xte))
    add("OvR LinearSVC (C by 3-fold CV)", lambda: ovr_linearsvc(Xtr, Ytr, Xte, cv=True))
    add("StandardScaler + OvR LinearSVC (C by 3-fold CV)", lambda: ovr_linearsvc(Xtr, Ytr, Xte, cv=True,
                                                                               standardize=True))
    if not tune:
        add("OvR averaged perceptron (1 pass)", lambda: ovr_averaged_perceptron(Xtr, Ytr, Xte))
        add("river StandardScaler + ClassifierChain(LogisticRegression) (1 pass)",
            lambda: river_binary_relevance(Xtr, Ytr, Xte, labels))
    default = candidates(tune)[0][0]
    diffs = {peer: paired_bootstrap(per_row[default], per_row[peer]) for peer in per_row if peer != default}
    return {"n_train": int(Xtr.shape[0]), "n_test": int(Xte.shape[0]), "n_features": int(Xtr.shape[1]),
            "labels": list(labels), "rows": rows, "default_minus_peer": diffs}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tune", action="store_true", help="the tuning candidates on the tuning sets")
    ap.add_argument("--sets", nargs="*", default=None)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                  "multilabel_defaults"))
    a = ap.parse_args(argv)
    sets = a.sets or (list(TUNING) if a.tune else list(HELD_OUT) + list(LOOKED_AT) + list(TUNING))
    res = {"machine": cpu_model(), "tune": a.tune, "sets": {}}
    for s in sets:
        res["sets"][s] = run_set(s, a.tune)
    lines = ["# MultiLabelSSVM defaults against one-vs-rest baselines", "",
             f"Machine: {res['machine']}. Generated by `python bench/multilabel_defaults.py"
             f"{' --tune' if a.tune else ''}`. Held out from the tuning: {', '.join(HELD_OUT)}; looked at "
             f"last round: {', '.join(LOOKED_AT)}; tuning sets: {', '.join(TUNING)} (constructed labellings). "
             "CPU and wall seconds: learning + predicting, one process, OPENBLAS_NUM_THREADS=1.", ""]
    for s, r in res["sets"].items():
        tag = "held out" if s in HELD_OUT else "looked at last round" if s in LOOKED_AT else "tuning set"
        lines += [f"## {s} ({tag}: {r['n_train']} train / {r['n_test']} test, {r['n_features']} features, "
                  f"{len(r['labels'])} labels)", ""]
        lines += table_head("method", "Jaccard", "Hamming loss", "no label", "CPU s", "wall s", "notes")
        for row in r["rows"]:
            notes = []
            if "C" in row:
                notes.append(f"C={row['C']:g}")
            if "lam" in row:
                notes.append(f"lam={row['lam']:.3g}, gap {row['gap']:.3g} / primal {row['primal']:.3g}")
            lines.append(f"| {row['method']} | {row['jaccard']:.3f} | {row['hamming']:.4f} | {row['empty']:.3f} | "
                         f"{row['cpu_s']:.1f} | {row['wall_s']:.1f} | {'; '.join(notes)} |")
        lines += ["", f"Jaccard of `{candidates(a.tune)[0][0]}` minus each peer's, on the same test rows "
                  "(mean, 95% paired bootstrap interval, 2,000 resamples):", ""]
        lines += table_head("peer", "difference", "95% interval")
        for peer, (m, lo, hi) in r["default_minus_peer"].items():
            lines.append(f"| {peer} | {m:+.3f} | [{lo:+.3f}, {hi:+.3f}] |")
        lines.append("")
    write_results(a.out, res, lines)


if __name__ == "__main__":
    main()
