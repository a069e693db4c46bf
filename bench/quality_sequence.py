"""Sequence-labeling quality against peers, in one run (the real-data quality issue, parts 2 and 3).

    nice -n 10 python bench/quality_sequence.py                  # both parts (~several minutes)
    nice -n 10 python bench/quality_sequence.py --part sgd       # part 2 only
    nice -n 10 python bench/quality_sequence.py --part losses    # part 3 only

Part 2 (SGD on sequences): one streaming pass over OCR-large (train folds 1-9, 6251 words; test fold
0, 626 words) and over Brown with the 12 universal tags (split below), SGD against BCFW at the same
lambda: token accuracy on the held-out part, primal objective P(w) of the predicting (averaged)
weights on the examples learned, against P(0) (= 1 for the normalized Hamming loss, which part 2
names: the OCR papers' loss). Both learners' defaults replay one step on a held example per new one;
"SGD replay=0" is one step per example (the configuration measured 7 points behind on OCR-large).

Part 3 (losses): Brown (12 universal tags and the ~97 base tags) with identical features for every
learner: BCFW with ``loss="normalized"`` (per sentence) and ``loss="hamming"`` (per token), against
python-crfsuite (CRF L-BFGS, averaged perceptron, passive-aggressive).

Brown split: documents in archive order (ca01 ... cr09); sentence i of the stream (counting over
all documents) is a test sentence when i % 10 == 0, a training sentence otherwise; the first
``--n-train`` training and ``--n-test`` test sentences are used. Features of token t: the word, its
lower case, suffixes of length 1-3, prefix of length 2, shape flags (capitalized, all caps, digit,
hyphen), previous and next word (lower case), a bias.

Writes bench/results/quality_sequence.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import streamssvm as ss  # noqa: E402
from _common import brown_documents, cpu_model, ocr_words  # noqa: E402

# Brown base tags -> the 12 universal tags (Petrov, Das & McDonald, A universal part-of-speech
# tagset), by the base tag's leading letters (the corpus tagset of Francis & Kucera)
_UNIV = [("nr", "ADV"), ("np", "NOUN"), ("nn", "NOUN"), ("vb", "VERB"), ("be", "VERB"),
         ("do", "VERB"), ("hv", "VERB"), ("md", "VERB"), ("jj", "ADJ"), ("rb", "ADV"), ("rp", "PRT"),
         ("ql", "ADV"), ("wrb", "ADV"), ("wdt", "DET"), ("wp", "PRON"), ("pp", "PRON"), ("dt", "DET"),
         ("at", "DET"), ("ap", "ADJ"), ("abn", "DET"), ("abx", "DET"), ("ex", "DET"), ("in", "ADP"),
         ("to", "PRT"), ("cc", "CONJ"), ("cs", "ADP"), ("cd", "NUM"), ("od", "ADJ"), ("uh", "X"),
         ("fw", "X"), ("nil", "X"), ("*", "PRT")]


def universal(base):
    if base and not base[0].isalpha():
        return "."
    for p, u in _UNIV:
        if base.startswith(p):
            return u
    return "X"


def _base(tag):
    from streamssvm.datasets import _base_tag
    t = _base_tag(tag.lower())
    for sep in ("+", "*"):
        if sep in t and len(t) > 1:
            t = t.split(sep)[0] or t
    return t or tag


def brown_split(n_train, n_test, tags):
    docs = brown_documents()
    tr, te = [], []
    i = 0
    for _, sents in docs:
        for s in sents:
            if not s:
                continue
            words = [w for w, _ in s]
            bases = [_base(t) for _, t in s]
            y = bases if tags == "base" else [universal(b) for b in bases]
            (te if i % 10 == 0 else tr).append((words, y))
            i += 1
        if len(tr) >= n_train and len(te) >= n_test:
            break
    return tr[:n_train], te[:n_test]


def token_features(words):
    out = []
    L = len(words)
    for t, w in enumerate(words):
        lw = w.lower()
        f = {"b": 1.0, "w=" + w: 1.0, "l=" + lw: 1.0, "s1=" + lw[-1:]: 1.0, "s2=" + lw[-2:]: 1.0,
             "s3=" + lw[-3:]: 1.0, "p2=" + lw[:2]: 1.0,
             "prev=" + (words[t - 1].lower() if t else "<s>"): 1.0,
             "next=" + (words[t + 1].lower() if t + 1 < L else "</s>"): 1.0}
        if w[:1].isupper():
            f["cap"] = 1.0
        if w.isupper():
            f["caps"] = 1.0
        if any(c.isdigit() for c in w):
            f["digit"] = 1.0
        if "-" in w:
            f["hyph"] = 1.0
        out.append(f)
    return out


def ocr_data():
    Xtr, Ytr, Xte, Yte = ocr_words()
    return list(zip(Xtr, Ytr)), list(zip(Xte, Yte))


def brown_data(n_train, n_test, tags):
    tr, te = brown_split(n_train, n_test, tags)
    return ([(token_features(w), y) for w, y in tr], [(token_features(w), y) for w, y in te])


def token_accuracy(pred, data):
    ok = tot = 0
    for p, (_, y) in zip(pred, data):
        ok += sum(int(a == b) for a, b in zip(p, y))
        tot += len(y)
    return ok / max(tot, 1)


def run_ssvm(learner, train, test, loss="normalized", passes=1):
    m = ss.SequenceTagger(learner=learner, loss=loss)
    t0, c0 = time.perf_counter(), time.process_time()
    for x, y in train:
        m.learn_one(x, y)
    t_stream, c_stream = time.perf_counter() - t0, time.process_time() - c0
    t1 = time.perf_counter()
    if passes > 1:
        m.refine(passes=passes - 1)
    t_refine = time.perf_counter() - t1
    c = m.certificate()
    acc = token_accuracy(m.predict_many([x for x, _ in test]), test)
    return {"token_accuracy": acc, "primal": c.primal, "gap": c.gap, "stream_s": t_stream, "stream_cpu_s": c_stream,
            "refine_s": t_refine, "extra": {k: v for k, v in (c.extra or {}).items() if np.isscalar(v)}}


def crfsuite_run(algorithm, train, test, params):
    import pycrfsuite

    def feats(x):
        if isinstance(x, np.ndarray):
            return [{f"p{j}": float(v) for j, v in enumerate(row) if v} | {"b": 1.0} for row in x]
        return x
    tr = pycrfsuite.Trainer(verbose=False, algorithm=algorithm)
    for x, y in train:
        tr.append(pycrfsuite.ItemSequence(feats(x)), [str(v) for v in y])
    tr.set_params(params)
    path = f"/tmp/quality_sequence_{os.getpid()}_{algorithm}.crfsuite"
    t0 = time.perf_counter()
    tr.train(path)
    t = time.perf_counter() - t0
    tg = pycrfsuite.Tagger()
    tg.open(path)
    pred = [tg.tag(pycrfsuite.ItemSequence(feats(x))) for x, _ in test]
    os.remove(path)
    gold = [(x, [str(v) for v in y]) for x, y in test]
    return {"token_accuracy": token_accuracy(pred, gold), "train_s": t}


def part_sgd(args, res):
    rows = []
    sets = [("OCR-large", ocr_data, args.lam_ocr), ("Brown-12", lambda: brown_data(args.n_train, args.n_test, "univ"),
                                                    args.lam_brown)]
    for name, load, lams in sets:
        train, test = load()
        for lam in lams:
            for lname, make in (("BCFW", lambda: ss.learners.BCFW(lam=lam, seed=0)),
                                ("SGD", lambda: ss.learners.SGD(lam=lam)),
                                ("SGD replay=0", lambda: ss.learners.SGD(lam=lam, replay=0)),
                                ("SGD truncate", lambda: ss.learners.SGD(lam=lam, truncate=True)),
                                ("SGD (issue config)", lambda: ss.learners.SGD(lam=lam, averaging="uniform",
                                                                               project=False, t0=0, window=1000,
                                                                               replay=0))):
                r = run_ssvm(make(), train, test)
                r.update(dataset=name, lam=lam, learner=lname, P0=1.0, n_train=len(train), n_test=len(test))
                rows.append(r)
                print(json.dumps(r), flush=True)
    res["sgd"] = rows


def part_losses(args, res):
    rows = []
    for tags in args.tagsets:
        n_tr = args.n_train if tags == "univ" else args.n_train_base
        train, test = brown_data(n_tr, args.n_test, tags)
        name = "Brown-12" if tags == "univ" else "Brown-base"
        for lam in args.lam_brown:
            for loss in ("normalized", "hamming"):
                r = run_ssvm(ss.learners.BCFW(lam=lam, seed=0), train, test, loss=loss, passes=args.passes)
                r.update(dataset=name, lam=lam, learner=f"BCFW loss={loss}", passes=args.passes, n_train=len(train))
                rows.append(r)
                print(json.dumps(r), flush=True)
        for alg, params in (("lbfgs", {"c2": 1e-3, "max_iterations": 100}), ("ap", {"max_iterations": 10}),
                            ("pa", {"max_iterations": 10})):
            try:
                r = crfsuite_run(alg, train, test, params)
            except ImportError as e:
                r = {"error": f"python-crfsuite not installed ({e})"}
            r.update(dataset=name, learner=f"crfsuite {alg}", params=params, n_train=len(train))
            rows.append(r)
            print(json.dumps(r), flush=True)
    res["losses"] = rows


def write_md(res, path):
    lines = ["# Sequence quality (bench/quality_sequence.py)", "",
             f"Machine: {res['machine']['cpu']}, Python {res['machine']['python']}. {res['split']}", ""]
    if "sgd" in res:
        lines += ["## Part 2: SGD vs BCFW, one streaming pass", "",
                  "| data | lambda | learner | token acc. | P(w) | P(0) | gap | stream s | stream CPU s | notes |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in res["sgd"]:
            ex = r.get("extra", {})
            note = ", ".join(f"{k}={v}" for k, v in ex.items() if k in ("projections", "folds"))
            lines.append(f"| {r['dataset']} | {r['lam']:g} | {r['learner']} | {r['token_accuracy']:.4f} | "
                         f"{r['primal']:.4g} | {r['P0']:g} | {r['gap']:.3g} | {r['stream_s']:.1f} | "
                         f"{r.get('stream_cpu_s', float('nan')):.1f} | {note} |")
        lines.append("")
    if "losses" in res:
        lines += ["## Part 3: losses vs python-crfsuite (Brown, identical features)", "",
                  "| data | learner | lambda / params | token acc. | train s |", "|---|---|---|---|---|"]
        for r in res["losses"]:
            if "error" in r:
                lines.append(f"| {r['dataset']} | {r['learner']} | | {r['error']} | |")
                continue
            lp = f"{r['lam']:g}, {r['passes']} passes" if "lam" in r else json.dumps(r.get("params"))
            t = r.get("train_s", r.get("stream_s", 0) + r.get("refine_s", 0))
            lines.append(f"| {r['dataset']} | {r['learner']} | {lp} | {r['token_accuracy']:.4f} | {t:.1f} |")
        lines.append("")
    open(path, "w").write("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["sgd", "losses", "all"], default="all")
    ap.add_argument("--n-train", type=int, default=5000)
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--lam-ocr", type=float, nargs="+", default=[1e-2, 1e-4])
    ap.add_argument("--lam-brown", type=float, nargs="+", default=[1e-4])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--tagsets", nargs="+", default=["univ", "base"], choices=["univ", "base"])
    ap.add_argument("--n-train-base", type=int, default=1000, help="training sentences with the base tags "
                    "(Viterbi costs K^2: ~97 tags is ~65x the 12-tag cost)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "quality_sequence"))
    args = ap.parse_args(argv)
    res = {"machine": {"cpu": cpu_model(), "python": platform.python_version()},
           "split": (f"Brown: sentence i (archive order) is test when i % 10 == 0; first {args.n_train} "
                     f"training / {args.n_test} test sentences. OCR-large: folds 1-9 / fold 0."),
           "args": vars(args)}
    if args.part in ("sgd", "all"):
        part_sgd(args, res)
    if args.part in ("losses", "all"):
        part_losses(args, res)
    suffix = "" if args.part == "all" else "_" + args.part
    with open(args.out + suffix + ".json", "w") as f:
        json.dump(res, f, indent=1, default=float)
    write_md(res, args.out + suffix + ".md")


if __name__ == "__main__":
    main()
