"""Feature scaling on or off, through the command line, against LinearSVC on the same raw features.

For each data set: a seeded stratified 70/30 split written as CSV, then
``streamssvm run --source file://train.csv --task multiclass --save m.ssvm [--no-scale]`` and
``streamssvm predict --model m.ssvm --source file://test.csv``; test accuracy from the sink.
LinearSVC (scikit-learn defaults) learns the same raw training rows. CPU seconds are those of
the CLI processes (``RUSAGE_CHILDREN``) and of LinearSVC's fit + predict.

    python bench/feature_scaling.py [--sets wine breast_cancer iris digits ocr] [--ocr-n 10000]

Run it under the machine's benchmark lock (``flock /tmp/bench.lock``).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np


def load(name, ocr_n):
    if name == "ocr":
        path = os.path.join(os.environ.get("STREAMSSVM_DATA", "../shared/datasets"), "ocr_letters.npz")
        d = np.load(path, allow_pickle=False)
        X = np.unpackbits(d["pixels"], axis=1)    # 16 bytes -> the 128 binary pixels (16 x 8)
        y = d["labels"]
        rng = np.random.default_rng(0)
        sel = rng.permutation(X.shape[0])[:ocr_n]
        return X[sel].astype(np.float64), y[sel]
    import sklearn.datasets as sd
    X, y = getattr(sd, f"load_{name}")(return_X_y=True)
    return X.astype(np.float64), y


def write_csv(path, X, y):
    with open(path, "w") as f:
        f.write(",".join([f"f{j}" for j in range(X.shape[1])] + ["label"]) + "\n")
        for a, b in zip(X, y):
            f.write(",".join(repr(float(v)) for v in a) + f",c{b}\n")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cli(args, cwd):
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", os.getcwd()))
    p = subprocess.run([sys.executable, "-m", "streamssvm", *args], cwd=cwd, env=env, capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{args}: exit {p.returncode}: {p.stderr[-2000:]}")
    return p


def streamssvm_accuracy(tmp, scale, y_te):
    c0, t0 = children_cpu(), time.time()
    flag = "--scale" if scale else "--no-scale"
    cli(["run", "--source", "file://train.csv", "--task", "multiclass", "--save", f"m{flag}.ssvm", "--no-progress",
         flag], tmp)
    cli(["predict", "--model", f"m{flag}.ssvm", "--source", "file://test.csv", "--sink", f"p{flag}.jsonl"], tmp)
    with open(os.path.join(tmp, f"p{flag}.jsonl")) as f:
        preds = [json.loads(line) for line in f]
    key = next(k for k in ("prediction", "y_pred", "pred") if k in preds[0])
    acc = float(np.mean([p[key] == f"c{t}" for p, t in zip(preds, y_te)]))
    return acc, children_cpu() - c0, time.time() - t0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", nargs="+", default=["wine", "breast_cancer", "iris", "digits", "ocr"])
    ap.add_argument("--ocr-n", type=int, default=10000)
    a = ap.parse_args(argv)
    from sklearn.model_selection import train_test_split
    from sklearn.svm import LinearSVC
    print("| data set | n train / test, d | raw (--no-scale) | scaled (default) | LinearSVC (raw) | CPU s raw / "
          "scaled / LinearSVC |")
    print("|---|---|---|---|---|---|")
    for name in a.sets:
        X, y = load(name, a.ocr_n)
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
        with tempfile.TemporaryDirectory() as tmp:
            write_csv(os.path.join(tmp, "train.csv"), X_tr, y_tr)
            write_csv(os.path.join(tmp, "test.csv"), X_te, y_te)
            raw, c_raw, _ = streamssvm_accuracy(tmp, False, y_te)
            sc, c_sc, _ = streamssvm_accuracy(tmp, True, y_te)
        c0 = time.process_time()
        lsvc = LinearSVC().fit(X_tr, y_tr)
        acc_l = float(np.mean(lsvc.predict(X_te) == y_te))
        c_l = time.process_time() - c0
        print(f"| {name} | {len(y_tr)} / {len(y_te)}, {X.shape[1]} | {raw:.3f} | {sc:.3f} | {acc_l:.3f} | "
              f"{c_raw:.1f} / {c_sc:.1f} / {c_l:.2f} |", flush=True)


if __name__ == "__main__":
    main()
