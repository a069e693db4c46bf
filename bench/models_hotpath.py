"""Models on the hot path (issue 22 items 8-9, issue 26 item 6): what ``refine`` costs with and
without its certificate, what a held chain block stores, and peak memory against python-crfsuite.

Every measurement runs in its own subprocess (peak RSS = that process's ``ru_maxrss``), one after
the other; run the whole script under the machine-wide lock with one BLAS thread:

    OPENBLAS_NUM_THREADS=1 flock /tmp/bench.lock nice -n 0 python3 bench/models_hotpath.py --sentences 3000

* ``refine``: BCFW ``SequenceTagger`` on the first N Brown training sentences (fine tags, the
  features of ``bench/gdmm_brown.py``), stream, then ``refine(1)`` (no certificate: the default
  now) against ``refine(1, certify=True)`` (what ``refine(1)`` always did before), CPU and wall.
* ``brown-store``: the block store after the stream, by segment (token values, Gram matrices,
  emission statistic M = L x Kc and how many of its entries are nonzero, the rest), and the process's peak RSS, against python-crfsuite's
  averaged perceptron (one iteration) on the same sentences and features.
* ``long-sentence``: one sentence of L tokens (5 tags, 2 features per token) learned, then one
  refine pass: peak RSS with the Gram matrix stored (``BlockStore.gram_max_L`` = L: what every
  block did before) and without (the default: L * L > its 2 L values).

Writes bench/results/hotpath_models.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _brown(n):
    sys.path.insert(0, HERE)
    import gdmm_brown as gb
    tr, _, tags = gb.load("fine", n, 1)
    return [x for x, _ in tr], [y for _, y in tr], tags


def child_refine(n):
    import streamssvm as ss
    X, Y, tags = _brown(n)
    out = {}
    for certify in (False, True):
        m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0), labels=tags)
        m.learn_many(X, Y)
        m.refine(0.01)   # kernels loaded, stale gap estimates refreshed: both runs start alike
        c0, w0 = time.process_time(), time.perf_counter()
        m.refine(1, certify=certify)
        out["certify" if certify else "plain"] = {"cpu_s": time.process_time() - c0,
                                                  "wall_s": time.perf_counter() - w0}
    return out


def child_store(n):
    import numpy as np
    import streamssvm as ss
    from streamssvm._kernels import layout as KL
    X, Y, tags = _brown(n)
    rss0 = _rss_mb()
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0), labels=tags)
    c0 = time.process_time()
    m.learn_many(X, Y)
    cpu = time.process_time() - c0
    st = m._learner.store
    meta = st.meta[st.slots()]
    L, nnz = meta[:, KL.M_L], meta[:, KL.M_NNZ]
    gl = np.where(meta[:, KL.M_FLAGS] & KL.FLAG_NO_GRAM, 0, L * L)
    mb = 1 / 2**20
    peak = _rss_mb()   # before the analysis below allocates anything
    # how sparse the emission statistic is: nonzero entries of each block's L x Kc M
    nzM = [np.count_nonzero(b["stat"][:b["L"] * st.Kc].reshape(b["L"], st.Kc), axis=1)
           for b in (st.block(s) for s in st.slots())]
    nzM = np.concatenate(nzM) if nzM else np.zeros(1, dtype=np.int64)
    return {"M_nonzero_frac": float(nzM.sum() / max((L * st.Kc).sum(), 1)),
            "M_nonzero_per_token_mean": float(nzM.mean()), "M_nonzero_per_token_max": int(nzM.max()),
            "M_as_index_value_pairs_mb": float(nzM.sum() * 12 * mb), "tags": len(tags), "Kc": int(m._learner.W.Kc), "tokens": int(L.sum()), "cpu_s": cpu,
            "store_mb": st.nbytes() * mb, "store_alloc_mb": st.allocated_bytes() * mb,
            "fval_mb": float(nnz.sum() * 8 * mb), "gram_mb": float(gl.sum() * 8 * mb),
            "M_mb": float((L * st.Kc).sum() * 8 * mb),
            "weights_mb": (m._learner.W.E.nbytes + m._learner._Z.E.nbytes) * mb,
            "rss_before_mb": rss0, "peak_rss_mb": peak}


def child_crfsuite(n):
    import pycrfsuite
    X, Y, _ = _brown(n)
    rss0 = _rss_mb()
    c0, w0 = time.process_time(), time.perf_counter()
    trn = pycrfsuite.Trainer(algorithm="ap", verbose=False)
    for x, y in zip(X, Y):
        trn.append(pycrfsuite.ItemSequence(x), y)
    trn.set_params({"max_iterations": 1})
    path = f"/tmp/models_hotpath_{os.getpid()}.crfsuite"
    trn.train(path)
    os.remove(path)
    return {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0, "rss_before_mb": rss0,
            "peak_rss_mb": _rss_mb()}


def child_long(L, with_gram):
    import numpy as np
    import streamssvm as ss
    import streamssvm.blocks as blk
    if with_gram:
        blk.BlockStore.gram_max_L = L
    w = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, seed=0))   # kernels loaded
    w.learn_one([{"a": 1.0}, {"b": 1.0}], [0, 1])
    rng = np.random.default_rng(0)
    y = [int(v) for v in rng.integers(5, size=L)]
    x = [{f"w{k}": 1.0, f"b{int(rng.integers(50))}": 0.5} for k in y]
    rss0 = _rss_mb()
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, seed=0))
    c0 = time.process_time()
    m.learn_one(x, y)
    m.refine(1)
    return {"L": L, "gram_stored": with_gram, "cpu_s": time.process_time() - c0,
            "store_mb": m._learner.store.nbytes() / 2**20, "rss_before_mb": rss0, "peak_rss_mb": _rss_mb()}


def child_extreme(n_classes, dim, n, limit):
    """ExtremeClassifier (MEMOIR, exact BLAS oracle) training on dense rows with OpenBLAS's
    default threads: ``limit`` False emulates before (``blas_threads.SMALL`` = 0: never limited)."""
    import numpy as np
    import streamssvm as ss
    from streamssvm import blas_threads
    if not limit:
        blas_threads.SMALL = 0
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(n_classes, dim)).astype(np.float64)
    ys = rng.integers(n_classes, size=n)
    X = centers[ys] + 0.5 * rng.normal(size=(n, dim))
    w = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(lam=1e-4, seed=0), mips="exact")
    w.learn_one(X[0], int(ys[0]))
    w.predict_one(X[0])
    m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(lam=1e-4, seed=0), mips="exact")
    for c in range(n_classes):   # every class known up front (the oracle scans all of them)
        m.learn_one(centers[c], c)
    c0, w0 = time.process_time(), time.perf_counter()
    hits = 0
    for x, y in zip(X, ys):
        hits += m.predict_one(x) == y
        m.learn_one(x, int(y))
    return {"limit": limit, "classes": n_classes, "dim": dim, "n": n, "cpu_s": time.process_time() - c0,
            "wall_s": time.perf_counter() - w0, "progressive_acc": hits / n,
            "blas_threads": _blas_threads()}


def _blas_threads():
    try:
        from threadpoolctl import threadpool_info
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    except ImportError:
        return None


def run(args, env_extra=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(args)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env_extra or {}))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=3000)
    ap.add_argument("--long", type=int, nargs="+", default=[3000, 6000])
    ap.add_argument("--extreme", type=int, nargs=3, metavar=("CLASSES", "DIM", "N"),
                    help="only the BLAS-threads measurement (ExtremeClassifier training), into hotpath_models_blas.*")
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        kind, *rest = json.loads(a.child)
        fn = {"extreme": child_extreme, "refine": child_refine, "store": child_store, "crfsuite": child_crfsuite, "long": child_long}[kind]
        print(json.dumps(fn(*rest)))
        return
    if a.extreme:
        return blas_main(a)
    res = {"command": "python3 bench/models_hotpath.py " + " ".join(sys.argv[1:]),
           "sentences": a.sentences,
           "refine": run(["refine", a.sentences]),
           "brown_store": run(["store", a.sentences]),
           "crfsuite_ap": run(["crfsuite", a.sentences]),
           "long_sentence": [run(["long", L, g]) for L in a.long for g in (True, False)]}
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "hotpath_models.json"), "w") as f:
        json.dump(res, f, indent=1)
    r, b, c = res["refine"], res["brown_store"], res["crfsuite_ap"]
    md = [f"# Models on the hot path (`{res['command']}`)", "",
          f"Brown, first {a.sentences} training sentences, {b['tags']} fine tags ({b['tokens']} tokens); "
          "one process per row, peak RSS = ru_maxrss.", "",
          "| refine(1) | CPU s | wall s |", "|---|---|---|",
          f"| no certificate (default now) | {r['plain']['cpu_s']:.2f} | {r['plain']['wall_s']:.2f} |",
          f"| certify=True (every refine before) | {r['certify']['cpu_s']:.2f} | {r['certify']['wall_s']:.2f} |", "",
          "| block store after the stream | MB |", "|---|---|",
          f"| live store | {b['store_mb']:.1f} |", f"| allocated arenas | {b['store_alloc_mb']:.1f} |",
          f"| emission statistic M (L x Kc, Kc = {b['Kc']}) | {b['M_mb']:.1f} |",
          f"| M's nonzero entries as (tag, value) pairs ({b['M_nonzero_frac']:.2%} of M; per token mean "
          f"{b['M_nonzero_per_token_mean']:.2f}, max {b['M_nonzero_per_token_max']}) | {b['M_as_index_value_pairs_mb']:.1f} |",
          f"| Gram matrices (L x L) | {b['gram_mb']:.1f} |", f"| token values | {b['fval_mb']:.1f} |",
          f"| weights E + averaging Z | {b['weights_mb']:.1f} |", "",
          "| peak RSS | MB | CPU s |", "|---|---|---|",
          f"| streamssvm BCFW stream | {b['peak_rss_mb']:.0f} | {b['cpu_s']:.1f} |",
          f"| python-crfsuite AP, 1 iteration | {c['peak_rss_mb']:.0f} | {c['cpu_s']:.1f} |", "",
          "| one long sentence: L | Gram stored | store MB | peak RSS MB | CPU s (learn + refine(1)) |",
          "|---|---|---|---|---|"]
    for q in res["long_sentence"]:
        md.append(f"| {q['L']} | {'yes (before)' if q['gram_stored'] else 'no (now)'} | {q['store_mb']:.1f} | "
                  f"{q['peak_rss_mb']:.0f} | {q['cpu_s']:.2f} |")
    with open(os.path.join(RESULTS, "hotpath_models.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


def blas_main(a):
    """Default BLAS threads (the environment's OPENBLAS_NUM_THREADS removed), before and after,
    alternating, 2 repetitions each."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    os.environ.clear()
    os.environ.update(env)
    rows = []
    for rep in range(2):
        for limit in (False, True):
            rows.append(run(["extreme", *a.extreme, limit]) | {"rep": rep})
    res = {"command": "python3 bench/models_hotpath.py " + " ".join(sys.argv[1:]),
           "load": os.getloadavg(), "runs": rows}
    with open(os.path.join(RESULTS, "hotpath_models_blas.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = [f"# BLAS threads per query (`{res['command']}`)", "",
          f"ExtremeClassifier (MEMOIR, mips='exact': BlasExactMIPS), {a.extreme[0]} dense classes, "
          f"{a.extreme[1]}-d, {a.extreme[2]} predict_one + learn_one; OpenBLAS default threads; "
          f"load average at the end {res['load'][0]:.1f} (the machine is shared).", "",
          "| run | BLAS threads per query | CPU s | wall s | progressive acc |", "|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['rep']} | {'one below blas_threads.SMALL (now)' if r['limit'] else 'default (before)'} | "
                  f"{r['cpu_s']:.2f} | {r['wall_s']:.2f} | {r['progressive_acc']:.4f} |")
    with open(os.path.join(RESULTS, "hotpath_models_blas.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
