"""GDMM vs BCFW+Viterbi vs SGD vs python-crfsuite on Brown POS tagging (Yen et al., NIPS 2016,
section 4: 45-tag POS there; Brown's ~97 base tags and 472 fine tags here).

Split: document i (archive order ca01 ... cr09) is a test document when i % 5 == 4, else a
training document; the first ``--train`` sentences of the training documents are held, the
first ``--test`` sentences of the test documents are the test set. Features per token
(identical for every method, crfsuite included): lowercased word, suffixes of length 2 and 3,
prefix of length 2, capitalized / all-caps / has-digit / has-hyphen flags, previous and next
lowercased words, a bias.

Protocol: every method holds the training set; the first pass is the stream (one step per
arriving sentence, ``replay=0``), then ``refine(1)`` per further pass. Only learning is timed;
after each pass (untimed) the exact primal objective P(w) on the training set and the test
token accuracy are measured, and every certificate's dual bound is kept: "rel. primal" is
(P - LB) / LB with LB the best certified lower bound on min P over all methods of the run.

    nice -n 10 python bench/gdmm_brown.py --tags base --train 1500 --test 500 --passes 8
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")   # BLAS threads spinning on a shared 2-core machine

import argparse
import json
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import streamssvm as ss  # noqa: E402
from _common import brown_documents, split_documents  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def base_tag(tag):
    for suf in ("-tl", "-hl", "-nc"):
        while tag.endswith(suf):
            tag = tag[: -len(suf)]
    return tag.split("+")[0].rstrip("*") or tag


def token_features(words, t):
    w = words[t]
    lw = w.lower()
    f = {"b": 1.0, "w=" + lw: 1.0, "s2=" + lw[-2:]: 1.0, "s3=" + lw[-3:]: 1.0, "p2=" + lw[:2]: 1.0}
    if w[:1].isupper():
        f["cap"] = 1.0
    if w.isupper():
        f["allcap"] = 1.0
    if any(c.isdigit() for c in w):
        f["digit"] = 1.0
    if "-" in w:
        f["hyph"] = 1.0
    f["w-1=" + (words[t - 1].lower() if t else "<s>")] = 1.0
    f["w+1=" + (words[t + 1].lower() if t + 1 < len(words) else "</s>")] = 1.0
    return f


def load(tags, n_train, n_test):
    docs = brown_documents()
    alltags = sorted({base_tag(t) if tags == "base" else t for _, sents in docs for s in sents for _, t in s})

    def example(s):
        words = [w for w, _ in s]
        ys = [base_tag(t) if tags == "base" else t for _, t in s]
        return [token_features(words, t) for t in range(len(words))], ys
    tr, te = split_documents(docs, n_train, n_test, example)
    return tr, te, alltags


def accuracy(pred, Y):
    ok = sum(int(a == b) for p, y in zip(pred, Y) for a, b in zip(p, y))
    return ok / sum(len(y) for y in Y)


def cert(lr):
    """The learner's certificate computed as an observation (BCFW before the certs rework:
    ``measure()``; afterwards ``certificate()`` observes)."""
    return getattr(lr, "measure", lr.certificate)()


def run_ssvm(name, learner, Xtr, Ytr, Xte, Yte, labels, passes, log):
    # warm-up (numba cache load) outside the timed region
    w = ss.SequenceTagger(learner=learner.clone(), labels=labels, loss="normalized")
    w.learn_many(Xtr[:3], Ytr[:3])
    w._learner.refine(1)
    cert(w._learner)
    w.predict_many(Xte[:2])
    m = ss.SequenceTagger(learner=learner, labels=labels, loss="normalized")
    rows = []
    t0, c0 = time.perf_counter(), time.process_time()
    m.learn_many(Xtr, Ytr)
    secs = time.perf_counter() - t0
    cpu = time.process_time() - c0
    lr = m._learner
    for p in range(1, passes + 1):
        c = cert(lr)
        acc = accuracy(m.predict_many(Xte), Yte)
        lb = c.dual if np.isfinite(c.gap) else None
        rows.append({"method": name, "pass": p, "seconds": secs, "cpu_seconds": cpu, "primal": c.primal,
                     "lower_bound": lb, "gap": c.gap if np.isfinite(c.gap) else None, "test_acc": acc})
        log(f"{name:>18} pass {p:2d}  {secs:8.2f} s  cpu {cpu:8.2f} s  P={c.primal:.5f}  gap={c.gap:.3g}  acc={acc:.4f}")
        if p == passes:
            break
        t0, c0 = time.perf_counter(), time.process_time()
        lr.refine(1)
        secs += time.perf_counter() - t0
        cpu += time.process_time() - c0
    extra = {}
    if hasattr(lr, "counters") and name.startswith("GDMM"):
        from streamssvm._kernels import gdmm as G
        cnt = lr._engine.counters
        extra = {"bigram_calls": int(cnt[G.C_BI_CALLS]),
                 "bigram_entries_touched_mean": float(cnt[G.C_BI_TOUCHED] / max(cnt[G.C_BI_CALLS], 1)),
                 "bigram_entries_touched_max": int(cnt[G.C_BI_TOUCH_MAX])}
    return rows, extra


def run_crfsuite(algo, Xtr, Ytr, Xte, Yte, log, **params):
    import pycrfsuite
    tr = pycrfsuite.Trainer(algorithm=algo, verbose=False)
    for x, y in zip(Xtr, Ytr):
        tr.append(pycrfsuite.ItemSequence(x), y)
    tr.set_params(params)
    path = f"/tmp/gdmm_brown_{algo}_{os.getpid()}.crfsuite"
    t0, c0 = time.perf_counter(), time.process_time()
    tr.train(path)
    secs = time.perf_counter() - t0
    cpu = time.process_time() - c0
    tg = pycrfsuite.Tagger()
    tg.open(path)
    pred = [tg.tag(pycrfsuite.ItemSequence(x)) for x in Xte]
    os.remove(path)
    acc = accuracy(pred, Yte)
    log(f"{'crfsuite-' + algo:>18}          {secs:8.2f} s  cpu {cpu:8.2f} s  acc={acc:.4f}  {params}")
    return {"method": "crfsuite-" + algo, "seconds": secs, "cpu_seconds": cpu, "test_acc": acc, "params": params}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tags", choices=("base", "fine"), default="base")
    ap.add_argument("--train", type=int, default=1500)
    ap.add_argument("--test", type=int, default=500)
    ap.add_argument("--passes", type=int, default=8)
    ap.add_argument("--lam", type=float, default=1e-3)
    ap.add_argument("--methods", default="gdmm,bcfw,sgd,crf")
    ap.add_argument("--only", default=None, choices=("gdmm", "bcfw", "sgd", "crf", "ap"),
                    help="run this peer only; the other peers' rows are kept from the existing results file of "
                         "the same --tags/--train/--test/--lam (e.g. re-run BCFW after a faster Viterbi)")
    ap.add_argument("--gdmm", default="", help="extra GDMM keyword arguments, e.g. 'rounds=2,rho=3'")
    ap.add_argument("--solvers", default="active_qp",
                    help="GDMM block solvers to run, comma-separated (active_qp, bcfw, afw)")
    ap.add_argument("--suffix", default="", help="appended to the results file name")
    args = ap.parse_args()
    out_base = os.path.join(RESULTS, f"gdmm_brown_{args.tags}_{args.train}{args.suffix}")
    lines = []

    def log(s):
        print(s, flush=True)
        lines.append(s)

    tr, te, labels = load(args.tags, args.train, args.test)   # every tag of the corpus is a label
    Xtr, Ytr = zip(*tr)
    Xte, Yte = zip(*te)
    n_tok = sum(len(y) for y in Ytr)
    log(f"Brown {args.tags} tags: {len(labels)} tags (all of the corpus, declared up front; "
        f"{len({t for y in Ytr for t in y})} occur in the training sentences), {len(Xtr)} train sentences ({n_tok} tokens), "
        f"{len(Xte)} test sentences ({sum(len(y) for y in Yte)} tokens), lam={args.lam}")
    methods = [args.only] if args.only else args.methods.split(",")
    rows, extras, crf = [], {}, []
    keep = {}
    if args.only and os.path.exists(out_base + ".json"):
        keep = json.load(open(out_base + ".json"))
        own = {"gdmm": "GDMM-heap", "bcfw": "BCFW+Viterbi", "sgd": "SGD", "crf": "crfsuite-lbfgs",
               "ap": "crfsuite-ap"}[args.only]
        rows = [r for r in keep["rows"] if r["method"] != own]
        crf = [c for c in keep["crfsuite"] if c["method"] != own]
        extras = {k: v for k, v in keep.get("gdmm_oracle", {}).items() if k != own}
        lines.append(f"(--only {args.only}: the other peers' rows are from the earlier run in {out_base}.json)")
    L = ss.learners
    def conv(k, v):
        return float(v) if k in ("rho", "eta") else v if k in ("solver", "fmo") else int(v)
    gkw = {k: conv(k, v) for k, v in (kv.split("=") for kv in args.gdmm.split(",") if kv)}
    if "gdmm" in methods:
        for solver in args.solvers.split(","):
            name = "GDMM-heap" + ("" if solver == "active_qp" else "-" + solver)
            kw = dict(gkw, solver=solver) if solver != "active_qp" else gkw
            r, e = run_ssvm(name, L.GDMM(lam=args.lam, replay=0, fmo="heap", seed=0, **kw), Xtr, Ytr, Xte, Yte,
                            labels, args.passes, log)
            rows += r
            extras[name] = e
    if "bcfw" in methods:
        r, _ = run_ssvm("BCFW+Viterbi", L.BCFW(lam=args.lam, replay=0, seed=0), Xtr, Ytr, Xte, Yte, labels,
                        args.passes, log)
        rows += r
    if "sgd" in methods:
        r, _ = run_ssvm("SGD", L.SGD(lam=args.lam), Xtr, Ytr, Xte, Yte, labels, args.passes, log)
        rows += r
    if "crf" in methods:
        crf.append(run_crfsuite("lbfgs", Xtr, Ytr, Xte, Yte, log, c2=1.0, max_iterations=50))
    if "crf" in methods or "ap" in methods:
        crf.append(run_crfsuite("ap", Xtr, Ytr, Xte, Yte, log, max_iterations=args.passes))
    lbs = [r["lower_bound"] for r in rows if r["lower_bound"] is not None]
    LB = max(lbs) if lbs else None
    for r in rows:
        r["rel_primal"] = (r["primal"] - LB) / abs(LB) if LB else None
    # time to reach BCFW's final test accuracy
    ttr = {}
    bc = [r for r in rows if r["method"] == "BCFW+Viterbi"]
    if bc:
        target = bc[-1]["test_acc"]
        for meth in sorted({r["method"] for r in rows}):
            hit = [r.get("cpu_seconds", r["seconds"]) for r in rows if r["method"] == meth and r["test_acc"] >= target]
            ttr[meth] = min(hit) if hit else None
    res = {"args": vars(args), "n_labels": len(labels), "train_tokens": n_tok, "lower_bound": LB, "rows": rows,
           "crfsuite": crf, "gdmm_oracle": extras, "time_to_bcfw_final_acc": ttr,
           "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "load_average": os.getloadavg()}
    os.makedirs(RESULTS, exist_ok=True)
    with open(out_base + ".json", "w") as fh:
        json.dump(res, fh, indent=1)
    with open(out_base + ".md", "w") as fh:
        fh.write(f"# Brown POS, {args.tags} tags ({len(labels)} tags): GDMM vs BCFW+Viterbi vs SGD vs crfsuite\n\n")
        fh.write(f"{len(Xtr)} train sentences ({n_tok} tokens), {len(Xte)} test sentences; lam = {args.lam}; "
                 f"LB = best certified lower bound on min P = {LB}\n\n")
        fh.write(f"Command: `nice -n 10 python bench/gdmm_brown.py {' '.join(sys.argv[1:])}`; load average at the end "
                 f"{res['load_average']}. Seconds are cumulative learning time (evaluation excluded), CPU = process "
                 "time. Every SSVM peer optimizes the same objective (normalized Hamming loss, `loss=\"normalized\"`).\n\n")
        fh.write("| method | pass | wall s | CPU s | primal P(w) | rel. primal (P-LB)/LB | gap | test acc |\n|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            fh.write(f"| {r['method']} | {r['pass']} | {r['seconds']:.2f} | {r.get('cpu_seconds', float('nan')):.2f} | {r['primal']:.5f} | "
                     f"{r['rel_primal'] if r['rel_primal'] is None else format(r['rel_primal'], '.4f')} | "
                     f"{'-' if r['gap'] is None else format(r['gap'], '.3g')} | {r['test_acc']:.4f} |\n")
        for c in crf:
            fh.write(f"| {c['method']} ({c['params']}) | - | {c['seconds']:.2f} | {c.get('cpu_seconds', float('nan')):.2f} | - | - | - | {c['test_acc']:.4f} |\n")
        fh.write(f"\nCPU seconds to BCFW's final test accuracy: {ttr}\n\nGDMM oracle: {extras}\n\n"
                 f"max RSS {res['max_rss_mb']:.0f} MB\n\n```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
