"""A large-domain chain built from Brown, in the regime of GDMM's ChineseOCR (3,039 labels):
recognise each word of a sentence among the K most frequent words from a noisy spelling, with
word-bigram transitions (Yen et al., NIPS 2016: sublinear factorwise oracles vs brute force vs
a structured Viterbi oracle).

What is built, exactly:

* Brown documents split as in ``bench/gdmm_brown.py`` (document i is test when i % 5 == 4).
* Vocabulary: the K most frequent lowercased word-like tokens (containing a letter or digit)
  of the training documents (ties alphabetical). Labels = these K words.
* Sequences: each sentence filtered to its in-vocabulary tokens (others dropped, order kept),
  cut to at most 25 tokens; sequences shorter than 2 are skipped. The first ``--train``
  training sequences are held; the first ``--test`` test sequences are the test set.
* Features of a token: its spelling corrupted independently per occurrence (each character
  replaced by a uniformly random letter with probability ``--noise``, seed 0), then the
  character 1-, 2- and 3-grams of "^word$" hashed (CRC32) into ``--dim`` buckets, counts
  scaled to unit norm, plus a bias feature. Transitions: the chain's K x K table.

Methods on the same held sequences (the stream is the first pass, then ``refine(1)`` per pass):
GDMM with the heap bigram oracle and the exact unigram oracle (nu = 1), with the nu-sampled
unigram oracle, with the HNSW (MIPS) unigram oracle, and with the brute-force K^2 bigram
oracle; BCFW+Viterbi cannot hold this training set (its block statistic is a dense K x K
table per sentence: 8 MB at K = 1k, 74 MB at K = 3k), so its per-sentence step cost is
measured on a few sentences and the pass time extrapolated, marked as such.

    nice -n 10 python bench/gdmm_large_domain.py --K 1000 --train 600 --test 100 --passes 4
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")   # BLAS threads spinning on a shared 2-core machine cost 20x

import argparse
import json
import resource
import sys
import time
import zlib
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import streamssvm as ss  # noqa: E402
from _common import brown_documents, split_documents  # noqa: E402
from streamssvm.structures.chain import Chain  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def build(K, n_train, n_test, noise, dim, seed=0):
    docs = brown_documents()

    def wordlike(w):
        return any(c.isalnum() for c in w)
    freq = Counter(w.lower() for i, (_, ss_) in enumerate(docs) if i % 5 != 4
                   for s in ss_ for w, _ in s if wordlike(w))
    vocab = [w for w, _ in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[:K]]
    vid = {w: i for i, w in enumerate(vocab)}
    rng = np.random.default_rng(seed)

    def example(s):
        ws = [w.lower() for w, _ in s if w.lower() in vid][:25]
        return None if len(ws) < 2 else ([vid[w] for w in ws], [featurize(w, noise, dim, rng) for w in ws])
    tr, te = split_documents(docs, n_train, n_test, example)
    return vocab, tr, te


def featurize(w, noise, dim, rng):
    ch = [c if rng.random() >= noise else LETTERS[rng.integers(26)] for c in w]
    s = "^" + "".join(ch) + "$"
    cnt = Counter()
    for n in (1, 2, 3):
        for a in range(len(s) - n + 1):
            cnt[zlib.crc32(s[a:a + n].encode()) % dim] += 1.0
    idx = np.array(sorted(cnt), dtype=np.int64)
    val = np.array([cnt[j] for j in idx])
    val /= np.linalg.norm(val)
    return np.concatenate([[dim], idx]), np.concatenate([[1.0], val])   # bias feature = dim


def encode(seq):
    ys, feats = seq
    tok_ptr = np.zeros(len(ys) + 1, dtype=np.int64)
    tok_ptr[1:] = np.cumsum([len(f[0]) for f in feats])
    return (tok_ptr, np.concatenate([f[0] for f in feats]), np.concatenate([f[1] for f in feats]),
            np.asarray(ys, dtype=np.int32))


def accuracy(lr, test):
    ok = tot = 0
    for seq in test:
        tp, fi, fv, ys = encode(seq)
        L = len(ys)
        pred = lr.predict(np.array([0, L]), tp, fi, fv, np.array([0, L]), L)
        ok += int(np.sum(pred == ys))
        tot += L
    return ok / tot


def warmup(make, labels, dim, train, test):
    """Load the compiled kernels (numba cache) outside the timed region."""
    lr = make()
    lr.bind(Chain(), labels)
    lr.ensure(dim + 1, labels)
    for tp, fi, fv, ys in (encode(s) for s in train[:3]):
        lr.learn(tp, fi, fv, ys)
    lr.refine(1)
    accuracy(lr, test[:1])


def run_gdmm(name, learner, labels, dim, train, test, passes, eval_every, log):
    lr = learner
    lr.bind(Chain(), labels)
    lr.ensure(dim + 1, labels)
    enc = [encode(s) for s in train]
    rows = []
    t0 = time.perf_counter()
    for tp, fi, fv, ys in enc:
        lr.learn(tp, fi, fv, ys)
    secs = time.perf_counter() - t0
    pass_secs = [secs]
    from streamssvm._kernels import gdmm as G
    for p in range(1, passes + 1):
        if p % eval_every == 0 or p == passes or p == 1:
            t1 = time.perf_counter()
            acc = accuracy(lr, test)
            te = time.perf_counter() - t1
            c = lr.counters
            rows.append({"method": name, "pass": p, "seconds": secs, "test_acc": acc,
                         "bigram_touched_mean": float(c[G.C_BI_TOUCHED] / max(c[G.C_BI_CALLS], 1)),
                         "bigram_touched_max": int(c[G.C_BI_TOUCH_MAX]),
                         "unigram_scored_mean": float(c[G.C_UNI_TOUCHED] / max(c[G.C_UNI_CALLS], 1)),
                         "mips_seconds": float(lr.seconds_oracle)})
            log(f"{name:>22} pass {p:2d}  {secs:8.2f} s (last pass {pass_secs[-1]:.2f} s)  acc={acc:.4f}  "
                f"bigram entries/call={rows[-1]['bigram_touched_mean']:.1f} (max {rows[-1]['bigram_touched_max']})  "
                f"unigram labels/call={rows[-1]['unigram_scored_mean']:.1f}  [eval {te:.1f} s]")
        if p == passes:
            break
        t0 = time.perf_counter()
        lr.refine(1)
        dt = time.perf_counter() - t0
        pass_secs.append(dt)
        secs += dt
    return rows, pass_secs


def bcfw_step_cost(labels, dim, train, lam, n_sent, log):
    """Seconds per BCFW block step (Viterbi oracle + dense statistic) on the first n_sent
    sentences, and the bytes each held block needs."""
    def make():
        return ss.learners.BCFW(lam=lam, replay=0, seed=0, sampling="uniform", gap_every=None, averaging=False)
    warmup(make, labels, dim, train, train)
    lr = make()
    lr.bind(Chain(), labels)
    lr.ensure(dim + 1, labels)
    enc = [encode(s) for s in train[:n_sent]]
    t0 = time.perf_counter()
    for tp, fi, fv, ys in enc:
        lr.learn(tp, fi, fv, ys)
    t_learn = time.perf_counter() - t0
    t0 = time.perf_counter()
    lr.refine(1)
    t_pass = time.perf_counter() - t0
    per_step = (t_learn + t_pass) / (2 * len(enc))
    K = len(labels)
    Lmean = np.mean([len(s[0]) for s in train])
    block_bytes = 8 * (Lmean * K + K * K + 2 * K)
    log(f"{'BCFW+Viterbi':>22} {per_step * 1e3:.1f} ms per block step (measured on {len(enc)} sentences); "
        f"block statistic {block_bytes / 2**20:.1f} MB per sentence -> a held set of {len(train)} sentences needs "
        f"{block_bytes * len(train) / 2**30:.1f} GB; extrapolated pass {per_step * len(train):.1f} s")
    return {"per_step_seconds": per_step, "block_bytes": block_bytes, "measured_sentences": len(enc),
            "extrapolated_pass_seconds": per_step * len(train),
            "held_set_gb": block_bytes * len(train) / 2**30}


def run_pair(labels, dim, train, test, lam, n_sent, passes, log):
    """GDMM (heap) and BCFW+Viterbi on the same first ``n_sent`` sequences (BCFW can hold
    that many): time of each pass and test accuracy; time for GDMM to reach BCFW's final
    accuracy."""
    sub = train[:n_sent]
    out = {}
    for name, make in (("GDMM heap, nu=1", lambda: ss.learners.GDMM(lam=lam, replay=0, seed=0)),
                       ("BCFW+Viterbi", lambda: ss.learners.BCFW(lam=lam, replay=0, seed=0, sampling="uniform",
                                                                 gap_every=None))):
        warmup(make, labels, dim, sub, test)
        lr = make()
        lr.bind(Chain(), labels)
        lr.ensure(dim + 1, labels)
        t0 = time.perf_counter()
        for tp, fi, fv, ys in (encode(x) for x in sub):
            lr.learn(tp, fi, fv, ys)
        secs = time.perf_counter() - t0
        rows = []
        for p in range(1, passes + 1):
            acc = accuracy(lr, test)
            rows.append({"pass": p, "seconds": secs, "test_acc": acc})
            log(f"[same {n_sent} sequences] {name:>16} pass {p}  {secs:7.2f} s  acc={acc:.4f}")
            if p < passes:
                t0 = time.perf_counter()
                lr.refine(1)
                secs += time.perf_counter() - t0
        out[name] = rows
        del lr
    target = out["BCFW+Viterbi"][-1]["test_acc"]
    hit = [r["seconds"] for r in out["GDMM heap, nu=1"] if r["test_acc"] >= target]
    t_g = min(hit) if hit else None
    t_b = min(r["seconds"] for r in out["BCFW+Viterbi"] if r["test_acc"] >= target)
    log(f"[same {n_sent} sequences] BCFW final acc {target:.4f} at {t_b:.1f} s; GDMM reaches it at "
        f"{'never' if t_g is None else format(t_g, '.1f') + ' s'}"
        + ("" if t_g is None else f" ({t_b / max(t_g, 1e-9):.1f}x sooner)"))
    return {"rows": out, "bcfw_final_acc": target, "bcfw_seconds": t_b, "gdmm_seconds_to_it": t_g}


def oracle_micro(lr, n_calls, rng, log):
    """Bigram oracle: heap vs brute force on the trained table with random message patterns
    like those of the run (a few active labels each side)."""
    from streamssvm._kernels import gdmm as G
    tab = lr.table
    tab.ready()
    K, Kc = tab.K, tab.Kc
    s = lr._s()
    U = lr._U
    AL = np.zeros((n_calls, Kc))
    AR = np.zeros((n_calls, Kc))
    for i in range(n_calls):
        t = int(rng.integers(lr._n_tok - 1))
        AL[i, U.lab[t, :U.cnt[t]]] = rng.normal(scale=0.5, size=U.cnt[t])
        AR[i, U.lab[t + 1, :U.cnt[t + 1]]] = rng.normal(scale=0.5, size=U.cnt[t + 1])
    res = {}
    for mode in (G.ORACLE_HEAP, G.ORACLE_BRUTE):
        cnt = np.zeros(G.N_COUNTERS, dtype=np.int64)
        out = np.zeros(n_calls)
        G.oracle_batch(mode, tab.T, K, Kc, s, AL[:2], AR[:2], tab.H, tab.SC, cnt, out[:2])   # compile / load
        cnt[:] = 0
        t0 = time.perf_counter()
        G.oracle_batch(mode, tab.T, K, Kc, s, AL, AR, tab.H, tab.SC, cnt, out)
        res[mode] = (time.perf_counter() - t0, out.copy(), cnt.copy())
    th, vh, ch = res[G.ORACLE_HEAP]
    tb, vb, _ = res[G.ORACLE_BRUTE]
    assert np.allclose(vh, vb, rtol=1e-12, atol=1e-12)
    touched = [ch[G.C_BI_TOUCHED] / n_calls, ch[G.C_BI_TOUCH_MAX]]
    log(f"bigram oracle on the trained table, {n_calls} calls: heap {th / n_calls * 1e6:.1f} us/call "
        f"({touched[0]:.1f} entries, max {touched[1]}), brute {tb / n_calls * 1e6:.1f} us/call "
        f"({K * K} entries): ratio {tb / max(th, 1e-12):.0f}x; same maxima")
    return {"heap_us": th / n_calls * 1e6, "brute_us": tb / n_calls * 1e6, "entries_heap_mean": float(touched[0]),
            "entries_heap_max": int(touched[1]), "entries_brute": K * K}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--K", type=int, default=1000)
    ap.add_argument("--train", type=int, default=600)
    ap.add_argument("--test", type=int, default=100)
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--eval-every", type=int, default=2)
    ap.add_argument("--noise", type=float, default=0.2)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--lam", type=float, default=1e-3)
    ap.add_argument("--nu", type=int, default=8)
    ap.add_argument("--methods", default="heap,nu,mips,brute,bcfw")
    ap.add_argument("--bcfw-sentences", type=int, default=10)
    ap.add_argument("--pair-sentences", type=int, default=0,
                    help="also run GDMM and BCFW on the same first N sequences (0: skip)")
    args = ap.parse_args()
    lines = []

    def log(s):
        print(s, flush=True)
        lines.append(s)

    t0 = time.perf_counter()
    vocab, train, test = build(args.K, args.train, args.test, args.noise, args.dim)
    n_tok = sum(len(s[0]) for s in train)
    log(f"K={len(vocab)} words, {len(train)} train sequences ({n_tok} tokens), {len(test)} test sequences "
        f"({sum(len(s[0]) for s in test)} tokens), noise={args.noise}, dim={args.dim}, lam={args.lam} "
        f"[built in {time.perf_counter() - t0:.1f} s]")
    L = ss.learners
    methods = args.methods.split(",")
    rows, passes, micro, bcfw = [], {}, None, None
    cfg = {"heap": ("GDMM heap, nu=1", dict(fmo="heap")),
           "nu": (f"GDMM heap, nu={args.nu}", dict(fmo="heap", nu=args.nu)),
           "mips": ("GDMM heap + HNSW unigram", dict(fmo="mips", mips_k=10, sketch_dim=64)),
           "brute": ("GDMM brute K^2", dict(fmo="brute"))}
    rss = {}
    for m in methods:
        if m == "bcfw":
            bcfw = bcfw_step_cost(vocab, args.dim, train, args.lam, args.bcfw_sentences, log)
            continue
        name, kw = cfg[m]
        warmup(lambda: L.GDMM(lam=args.lam, replay=0, seed=0, **kw), vocab, args.dim, train, test)
        lr = L.GDMM(lam=args.lam, replay=0, seed=0, **kw)
        r, ps = run_gdmm(name, lr, vocab, args.dim, train, test, args.passes, args.eval_every, log)
        rows += r
        passes[name] = ps
        rss[name] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if m == "heap":
            micro = oracle_micro(lr, 2000, np.random.default_rng(0), log)
        del lr
    pair = None
    if args.pair_sentences:
        pair = run_pair(vocab, args.dim, train, test, args.lam, args.pair_sentences, args.passes, log)
    res = {"args": vars(args), "K": len(vocab), "train_tokens": n_tok, "rows": rows, "pass_seconds": passes, "pair": pair,
           "bigram_oracle_micro": micro, "bcfw": bcfw, "max_rss_mb_after": rss}
    os.makedirs(RESULTS, exist_ok=True)
    base = os.path.join(RESULTS, f"gdmm_large_domain_K{len(vocab)}")
    with open(base + ".json", "w") as fh:
        json.dump(res, fh, indent=1)
    with open(base + ".md", "w") as fh:
        fh.write(f"# Large-domain chain from Brown: K = {len(vocab)} words\n\n{__doc__.split('What is built, exactly:')[1].split('Methods on')[0]}\n")
        fh.write(f"{len(train)} train sequences ({n_tok} tokens), {len(test)} test sequences; lam = {args.lam}\n\n")
        fh.write("| method | pass | seconds (cum.) | test acc | bigram entries / call (max) | unigram labels / call |\n|---|---|---|---|---|---|\n")
        for r in rows:
            fh.write(f"| {r['method']} | {r['pass']} | {r['seconds']:.1f} | {r['test_acc']:.4f} | "
                     f"{r['bigram_touched_mean']:.1f} ({r['bigram_touched_max']}) | {r['unigram_scored_mean']:.1f} |\n")
        fh.write("\nSeconds per pass (first = the stream): " + json.dumps({k: [round(x, 2) for x in v] for k, v in passes.items()}) + "\n\n")
        if pair:
            fh.write(f"GDMM and BCFW+Viterbi on the same first {args.pair_sentences} sequences:\n\n| method | pass | seconds | test acc |\n|---|---|---|---|\n")
            for k, rr in pair["rows"].items():
                for r in rr:
                    fh.write(f"| {k} | {r['pass']} | {r['seconds']:.1f} | {r['test_acc']:.4f} |\n")
            fh.write(f"\nBCFW final accuracy {pair['bcfw_final_acc']:.4f} at {pair['bcfw_seconds']:.1f} s; GDMM reaches it at {pair['gdmm_seconds_to_it']} s\n\n")
        fh.write(f"Bigram oracle micro-benchmark: {micro}\n\nBCFW+Viterbi: {bcfw}\n\nmax RSS (MB) after each method: {rss}\n\n```\n"
                 + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
