"""Multiclass speed: arrays against dicts for ``learn_one``, batches against scikit-learn.

    nice -n 10 python bench/quality_multiclass.py     # ~2-4 minutes on 2 shared cores

* 16-feature stream (synthetic, 10 classes): CPU per ``learn_one`` of ``MulticlassSSVM`` with a
  numpy row vs the same row as a dict, and the encoding alone (``FeatureIndex.encode_one``);
  array and dict runs alternate ``--reps`` times, medians reported.
* 784-d dense batches (10 classes, 256 rows per batch, 40 batches, the first one learned
  outside the timing): CPU rate and progressive accuracy (each batch predicted before it is
  learned) of ``MulticlassSSVM.predict_learn_many`` (BCFW defaults, lam = 1e-4) vs
  scikit-learn ``SGDClassifier(loss="hinge", alpha=1e-4, random_state=0)`` ``predict`` +
  ``partial_fit`` on the same batches, each in a fresh subprocess, on two synthetic streams:
  ``gauss`` (class means at 0.12 plus unit Gaussian noise: every value nonzero) and ``sparse``
  (MNIST-like: values in [0, 1] on ~15% of the pixels, zero elsewhere). With ``--before DIR``
  another checkout runs alternately with this one (same run, same load):

    nice -n 10 python bench/quality_multiclass.py --before /path/to/older/checkout

CPU seconds are process time (one BLAS thread). Writes bench/results/quality_multiclass.{json,md}.

Arena growth factor (``blocks.ARENA_GROWTH``) against peak resident memory, each factor in a fresh
subprocess learning ``--rss-batches`` gauss batches with ``learn_many``, alternated ``--reps``
times (writes bench/results/quality_multiclass_rss.{json,md}):

    nice -n 10 python bench/quality_multiclass.py --rss-growth 4 2 1.5
"""
from __future__ import annotations

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
from streamssvm.features import FeatureIndex  # noqa: E402


def cpu(fn):
    t = time.process_time()
    fn()
    return time.process_time() - t


def stream(n, d, K, seed, sep=1.0):
    """Class means (Gaussian, times ``sep``) plus unit Gaussian noise: every value nonzero."""
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(K, d)) * sep
    y = rng.integers(0, K, size=n)
    return C[y] + rng.normal(size=(n, d)), y


def sparse_stream(n, d, K, seed):
    """MNIST-like rows: each class lights 160 of a shared pool of 300 pixels (its prototype,
    intensities in (0.3, 1)); a row keeps 35% of its class's pixels, with noisy intensities,
    plus 90 random pool pixels: ~15% of the values nonzero, the classes overlapping."""
    rng = np.random.default_rng(seed)
    pool = rng.choice(d, size=300, replace=False)
    P = np.zeros((K, d))
    for k in range(K):
        on = rng.choice(pool, size=160, replace=False)
        P[k, on] = rng.uniform(0.3, 1.0, size=160)
    y = rng.integers(0, K, size=n)
    X = P[y] * (rng.random((n, d)) < 0.35) * rng.uniform(0.5, 1.2, size=(n, d))
    extra = rng.choice(pool, size=(n, 90))
    X[np.arange(n)[:, None], extra] = rng.uniform(0.2, 1.0, size=(n, 90))
    return np.minimum(X, 1.0), y


def batch_data(kind, nb, bs, seed):
    if kind == "gauss":   # class means at 0.12: ~80% accuracy, not a separable toy
        X, y = stream(nb * bs, 784, 10, seed, sep=0.12)
        return X / np.sqrt(784), y
    X, y = sparse_stream(nb * bs, 784, 10, seed)
    return X / np.sqrt(np.mean(np.sum(X * X, axis=1))), y   # mean squared row norm 1


def batch_rates(kind="gauss", nb=40, bs=256, seed=1):
    """CPU seconds and progressive accuracy of ``predict_learn_many`` (BCFW defaults, lam =
    1e-4) and of scikit-learn's ``predict`` + ``partial_fit`` on the same 784-d dense batches,
    in this process."""
    X, y = batch_data(kind, nb, bs, seed)
    return dict(batch_rates_on(X, y, bs, lam=1e-4), kind=kind)


def batch_rates_on(X, y, bs=256, lam=1e-4):
    """``MulticlassSSVM(BCFW(lam)).predict_learn_many`` against scikit-learn's ``predict`` +
    ``partial_fit`` on the batches of ``bs`` rows of (X, y) (integer labels), in this process:
    CPU and wall seconds after the first batch (learned outside the clock), progressive accuracy
    (each batch predicted before it is learned)."""
    from sklearn.linear_model import SGDClassifier
    from _common import Clock
    classes = np.unique(y)
    labels = classes.tolist()
    nb = len(X) // bs
    m = ss.MulticlassSSVM(ss.learners.BCFW(lam=lam, seed=0), labels=labels)
    # compile / load every kernel outside the timing: the first call only learns (no model yet),
    # the second predicts too; the model that is timed learns the first batch once
    w = ss.MulticlassSSVM(ss.learners.BCFW(lam=lam, seed=0), labels=labels)
    w.predict_learn_many(X[:bs], y[:bs])
    w.predict_learn_many(X[bs:2 * bs], y[bs:2 * bs])
    m.predict_learn_many(X[:bs], y[:bs])
    preds = []
    with Clock() as c_ss:
        for i in range(bs, nb * bs, bs):
            preds.extend(m.predict_learn_many(X[i:i + bs], y[i:i + bs]))
    sk = SGDClassifier(loss="hinge", alpha=1e-4, random_state=0)
    sk.partial_fit(X[:bs], y[:bs], classes=classes)
    sk_preds = []
    with Clock() as c_sk:
        for i in range(bs, nb * bs, bs):
            sk_preds.extend(sk.predict(X[i:i + bs]))
            sk.partial_fit(X[i:i + bs], y[i:i + bs])
    rows = (nb - 1) * bs
    yt = y[bs:nb * bs]
    return {"rows": rows, "dim": int(X.shape[1]), "nnz_fraction": float(np.mean(X != 0)),
            "streamssvm_cpu_s": c_ss.cpu, "sklearn_cpu_s": c_sk.cpu, "streamssvm_wall_s": c_ss.wall,
            "sklearn_wall_s": c_sk.wall, "streamssvm_over_sklearn": c_sk.cpu / c_ss.cpu,
            "streamssvm_accuracy": float(np.mean(np.asarray(preds) == yt)),
            "sklearn_accuracy": float(np.mean(np.asarray(sk_preds) == yt)),
            "load": os.getloadavg()[0], "streamssvm": ss.__file__}


def batch_rates_in_one_run(args):
    """This checkout ("after") and, with ``--before DIR`` (another checkout whose kernels are
    compiled), that one, alternately in subprocesses (``--reps`` times each, per stream): the
    ratio to scikit-learn measured in the same run, under the same load."""
    import subprocess
    runs = {"after": os.path.dirname(HERE)}
    if args.before:
        runs["before"] = args.before
    got = {(k, kind): [] for k in runs for kind in args.streams}
    for _ in range(args.reps):
        for kind in args.streams:
            for k, repo in runs.items():
                # the script of this checkout, the library of the other (sys.path order)
                code = (f"import sys, json; sys.path.insert(0, {repo!r}); sys.path.insert(1, {HERE!r}); "
                        f"import streamssvm; import quality_multiclass as q; print(json.dumps(q.batch_rates({kind!r})))")
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                     cwd=repo).stdout
                got[(k, kind)].append(json.loads(out.strip().splitlines()[-1]))
                print(k, got[(k, kind)][-1], flush=True)
    res, runs_out = {}, []
    for (k, kind), rs in got.items():
        med = lambda v: sorted(v)[len(v) // 2]   # noqa: E731
        p = f"{kind}_{k}"
        res[f"{p}_streamssvm_over_sklearn_median"] = med([r["streamssvm_over_sklearn"] for r in rs])
        res[f"{p}_predict_learn_many_rows_per_cpu_s_median"] = med([r["rows"] / r["streamssvm_cpu_s"] for r in rs])
        res[f"{p}_sklearn_rows_per_cpu_s_median"] = med([r["rows"] / r["sklearn_cpu_s"] for r in rs])
        res[f"{p}_streamssvm_accuracy"] = rs[0]["streamssvm_accuracy"]
        res[f"{p}_sklearn_accuracy"] = rs[0]["sklearn_accuracy"]
        runs_out += [dict(r, checkout=k) for r in rs]
    return res, runs_out


def arena_rss(growth, nb=160, bs=256, seed=1):
    """Peak resident memory (``ru_maxrss``) and CPU seconds of learning ``nb`` gauss batches with
    ``learn_many`` (BCFW defaults, lam = 1e-4) with arenas growing by ``growth``, in this process
    (the data are made before, their memory is in the baseline)."""
    import resource
    from streamssvm import blocks
    blocks.ARENA_GROWTH = float(growth)
    X, y = batch_data("gauss", nb, bs, seed)
    m = ss.MulticlassSSVM(ss.learners.BCFW(lam=1e-4, seed=0), labels=list(range(10)))
    m.learn_many(X[:bs], y[:bs])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = cpu(lambda: [m.learn_many(X[i:i + bs], y[i:i + bs]) for i in range(bs, nb * bs, bs)])
    st = m._learner.store
    return {"growth": float(growth), "rows": nb * bs, "learn_cpu_s": t, "maxrss_mb_before": base,
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "arena_used_mb": (st.f_used * 8 + st.i_used * 4) / 2**20,
            "arena_reserved_mb": (st.Far.nbytes + st.Iar.nbytes) / 2**20, "load": os.getloadavg()[0],
            "accuracy_last_batch": float(np.mean(m.predict_many(X[-bs:]) == y[-bs:]))}


def rss_in_one_run(args):
    import subprocess
    root = os.path.dirname(HERE)
    runs = []
    for _ in range(args.reps):
        for g in args.rss_growth:
            code = (f"import sys, json; sys.path.insert(0, {root!r}); sys.path.insert(1, {HERE!r}); "
                    f"import quality_multiclass as q; print(json.dumps(q.arena_rss({g!r}, {args.rss_batches})))")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
            print(runs[-1], flush=True)
    out = os.path.join(HERE, "results", "quality_multiclass_rss")
    with open(out + ".json", "w") as fh:
        json.dump({"runs": runs, "args": vars(args)}, fh, indent=1)
    L = ["# Arena growth factor against peak resident memory", "",
         f"`nice -n 10 python bench/quality_multiclass.py --rss-growth {' '.join(map(str, args.rss_growth))} "
         f"--rss-batches {args.rss_batches} --reps {args.reps}`: each factor in a fresh subprocess, alternated; "
         "gauss stream (784-d dense rows, every value non-zero), `learn_many` of 256-row batches, BCFW defaults.", "",
         "| growth | rows | peak RSS MB (before learning) | arena used MB | arena reserved MB | learn CPU s | load |",
         "|---|---|---|---|---|---|---|"]
    L += [f"| {r['growth']} | {r['rows']} | {r['maxrss_mb']:.0f} ({r['maxrss_mb_before']:.0f}) | "
          f"{r['arena_used_mb']:.0f} | {r['arena_reserved_mb']:.0f} | {r['learn_cpu_s']:.2f} | {r['load']:.1f} |"
          for r in runs]
    with open(out + ".md", "w") as fh:
        fh.write("\n".join(L) + "\n")
    print("\n".join(L))


def learn_one_costs(reps):
    """Median CPU microseconds per ``learn_one`` / ``encode_one`` of array and dict rows, the two
    alternating ``reps`` times (each rep a fresh model on the same 4000 rows)."""
    n = 4000
    X, y = stream(n, 16, 10, 0)
    D = [{f"f{j}": float(v) for j, v in enumerate(x)} for x in X]
    got = {}
    for _ in range(reps):
        for name, data in (("array", X), ("dict", D)):
            m = ss.MulticlassSSVM(ss.learners.BCFW(lam=1e-3, seed=0))
            m.learn_one(data[0], int(y[0]))    # compile / allocate outside the timing
            got.setdefault(f"learn_one_{name}_us", []).append(
                1e6 * cpu(lambda: [m.learn_one(x, int(c)) for x, c in zip(data, y)]) / n)
            f = FeatureIndex(None)
            f.encode_one(data[0], True)
            got.setdefault(f"encode_one_{name}_us", []).append(1e6 * cpu(lambda: [f.encode_one(x, True) for x in data]) / n)
    res = {k: sorted(v)[len(v) // 2] for k, v in got.items()}
    res["learn_one_array_over_dict"] = res["learn_one_array_us"] / res["learn_one_dict_us"]
    return res, got


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default=None, help="another checkout (kernels compiled) to compare in the same run")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--streams", nargs="+", default=["gauss", "sparse"], choices=["gauss", "sparse"])
    ap.add_argument("--skip-learn-one", action="store_true")
    ap.add_argument("--rss-growth", nargs="+", type=float, default=None,
                    help="only compare these arena growth factors' peak memory")
    ap.add_argument("--rss-batches", type=int, default=160)
    ap.add_argument("--out", default="quality_multiclass", help="results name under bench/results/")
    args = ap.parse_args()
    if args.rss_growth:
        rss_in_one_run(args)
        return
    res, raw = {}, {}
    if not args.skip_learn_one:
        r, raw["learn_one"] = learn_one_costs(args.reps)
        res.update(r)
    r, raw["batches"] = batch_rates_in_one_run(args)
    res.update(r)
    out = os.path.join(HERE, "results", args.out)
    with open(out + ".json", "w") as fh:
        json.dump({"summary": res, "runs": raw, "args": vars(args)}, fh, indent=1)
    L = ["# Multiclass speed (issue part 5)", "",
         "| measure | value |", "|---|---|"] + [f"| {k} | {v:.3g} |" for k, v in res.items()]
    L += ["", "| stream | checkout | streamssvm CPU s | sklearn CPU s | rate ratio (sklearn s / ours) | "
          "accuracy ours / sklearn | load |", "|---|---|---|---|---|---|---|"]
    L += [f"| {r['kind']} | {r['checkout']} | {r['streamssvm_cpu_s']:.3f} | {r['sklearn_cpu_s']:.3f} | "
          f"{r['streamssvm_over_sklearn']:.2f} | {r['streamssvm_accuracy']:.3f} / {r['sklearn_accuracy']:.3f} | "
          f"{r['load']:.1f} |" for r in raw["batches"]]
    with open(out + ".md", "w") as fh:
        fh.write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
