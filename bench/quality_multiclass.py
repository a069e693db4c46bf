"""Multiclass speed: arrays against dicts for ``learn_one``, batches against scikit-learn.

    nice -n 10 python bench/quality_multiclass.py     # ~1-2 minutes on 2 shared cores

* 16-feature stream (synthetic, 10 classes): CPU per ``learn_one`` of ``MulticlassSSVM`` with a
  numpy row vs the same row as a dict, and the encoding alone (``FeatureIndex.encode_one``).
* 784-d dense batches (synthetic, 10 classes, 256 rows per batch, 40 batches): CPU rate of
  ``MulticlassSSVM.predict_learn_many`` vs scikit-learn ``SGDClassifier(loss="hinge")``
  ``predict`` + ``partial_fit`` on the same batches, each run in a fresh subprocess; with
  ``--before DIR`` another checkout runs alternately with this one (same run, same load):

    nice -n 10 python bench/quality_multiclass.py --before /path/to/older/checkout

CPU seconds are process time (one BLAS thread). Writes bench/results/quality_multiclass.{json,md}.
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

import streamssvm as ss  # noqa: E402
from streamssvm.features import FeatureIndex  # noqa: E402


def cpu(fn):
    t = time.process_time()
    fn()
    return time.process_time() - t


def stream(n, d, K, seed):
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(K, d))
    y = rng.integers(0, K, size=n)
    return C[y] + rng.normal(size=(n, d)), y


def batch_rates(nb=40, bs=256, seed=1):
    """CPU seconds of ``predict_learn_many`` (BCFW defaults, lam = 1e-4) and of scikit-learn's
    ``predict`` + ``partial_fit`` on the same 784-d dense batches, in this process."""
    from sklearn.linear_model import SGDClassifier
    X, y = stream(nb * bs, 784, 10, seed)
    X /= np.sqrt(784)
    m = ss.MulticlassSSVM(ss.learners.BCFW(lam=1e-4, seed=0), labels=list(range(10)))
    # compile / load every kernel outside the timing: the first call only learns (no model yet),
    # the second predicts too (the per-row kernel before this change, BLAS after)
    m.predict_learn_many(X[:bs], y[:bs])
    m.predict_learn_many(X[:bs], y[:bs])
    t_ss = cpu(lambda: [m.predict_learn_many(X[i:i + bs], y[i:i + bs]) for i in range(bs, nb * bs, bs)])
    sk = SGDClassifier(loss="hinge", alpha=1e-4)
    sk.partial_fit(X[:bs], y[:bs], classes=np.arange(10))

    def run_sk():
        for i in range(bs, nb * bs, bs):
            sk.predict(X[i:i + bs])
            sk.partial_fit(X[i:i + bs], y[i:i + bs])
    t_sk = cpu(run_sk)
    rows = (nb - 1) * bs
    return {"rows": rows, "streamssvm_cpu_s": t_ss, "sklearn_cpu_s": t_sk, "streamssvm_over_sklearn": t_sk / t_ss,
            "streamssvm": ss.__file__}


def batch_rates_in_one_run(args):
    """This checkout ("after") and, with ``--before DIR`` (another checkout whose kernels are
    compiled), that one, alternately in subprocesses (``--reps`` times each): the ratio to
    scikit-learn measured in the same run, under the same load."""
    import subprocess
    runs = {"after": os.path.dirname(HERE)}
    if args.before:
        runs["before"] = args.before
    got = {k: [] for k in runs}
    for _ in range(args.reps):
        for k, repo in runs.items():
            code = (f"import sys, json; sys.path.insert(0, {repo!r}); sys.path.insert(1, {HERE!r}); "
                    "import streamssvm; import quality_multiclass as q; print(json.dumps(q.batch_rates()))")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                 cwd=repo).stdout
            got[k].append(json.loads(out.strip().splitlines()[-1]))
            print(k, got[k][-1], flush=True)
    res = {}
    for k, rs in got.items():
        ratio = sorted(r["streamssvm_over_sklearn"] for r in rs)
        res[f"{k}_streamssvm_over_sklearn_median"] = ratio[len(ratio) // 2]
        res[f"{k}_predict_learn_many_rows_per_cpu_s_median"] = sorted(r["rows"] / r["streamssvm_cpu_s"]
                                                                      for r in rs)[len(rs) // 2]
        res[f"{k}_sklearn_rows_per_cpu_s_median"] = sorted(r["rows"] / r["sklearn_cpu_s"] for r in rs)[len(rs) // 2]
    return res


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default=None, help="another checkout (kernels compiled) to compare in the same run")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    res = {}
    n = 4000
    X, y = stream(n, 16, 10, 0)
    D = [{f"f{j}": float(v) for j, v in enumerate(x)} for x in X]
    for name, data in (("array", X), ("dict", D)):
        m = ss.MulticlassSSVM(ss.learners.BCFW(lam=1e-3, seed=0))
        m.learn_one(data[0], int(y[0]))    # compile / allocate outside the timing
        res[f"learn_one_{name}_us"] = 1e6 * cpu(lambda: [m.learn_one(x, int(c)) for x, c in zip(data, y)]) / n
        f = FeatureIndex(None)
        f.encode_one(data[0], True)
        res[f"encode_one_{name}_us"] = 1e6 * cpu(lambda: [f.encode_one(x, True) for x in data]) / n
    res["learn_one_array_over_dict"] = res["learn_one_array_us"] / res["learn_one_dict_us"]

    res.update(batch_rates_in_one_run(args))
    out = os.path.join(HERE, "results", "quality_multiclass")
    with open(out + ".json", "w") as fh:
        json.dump(res, fh, indent=1)
    L = ["# Multiclass speed (issue part 5)", "",
         "| measure | value |", "|---|---|"] + [f"| {k} | {v:.3g} |" for k, v in res.items()]
    with open(out + ".md", "w") as fh:
        fh.write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
