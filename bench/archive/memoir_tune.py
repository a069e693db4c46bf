"""Tune MEMOIR's step schedule on a *tuning* split of the Brown tag-pair stream (the test
documents are never read): the 100k-example training sample of ``bench/quality_memoir.py``
(``data_tagpair``, seed 0), the first ``--ntr`` examples replayed ``--epochs`` times, validated
on examples ``[--ntr, --ntr + --nv)`` of the same sample.

    nice -n 10 python bench/memoir_tune.py --ntr 40000 --nv 10000 \
        --cfg '{"eta_step": 0}' --cfg '{"eta0": 1, "eta_step": 0}'

Each ``--cfg`` is a JSON dict of ``MEMOIR`` arguments (``"perceptron": true`` runs the averaged
perceptron of ``quality_memoir.py``). Prints one JSON line per configuration (validation
accuracy, fraction of steps with an active hinge, train CPU seconds) and appends it to
``--out`` (bench/results/memoir_tune.jsonl).
"""
from __future__ import annotations

import argparse
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
from quality_memoir import AveragedPerceptron, data_tagpair  # noqa: E402

CACHE = "/tmp/memoir_tagpair_sample.npz"


def sample():
    if os.path.exists(CACHE):
        D = np.load(CACHE)
        return D["Xtr"], D["ytr"], int(D["K"])
    Xtr, ytr, _, _, K, _ = data_tagpair(2800, 100_000, 10)
    np.savez(CACHE, Xtr=Xtr, ytr=ytr, K=K)
    return Xtr, ytr, K


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--ntr", type=int, default=40_000)
    ap.add_argument("--nv", type=int, default=10_000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--cfg", action="append", default=[])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "memoir_tune.jsonl"))
    a = ap.parse_args(argv)
    X, y, K = sample()
    Xt, yt = X[:a.ntr], y[:a.ntr]
    Xv, yv = X[a.ntr:a.ntr + a.nv], y[a.ntr:a.ntr + a.nv]
    for c in a.cfg:
        cfg = json.loads(c)
        t0 = time.process_time()
        if cfg.get("perceptron"):
            m = AveragedPerceptron(K, X.shape[1])
        else:
            m = ss.ExtremeClassifier(ss.learners.MEMOIR(**cfg), mips="exact")
        for _ in range(a.epochs):
            for x, c_ in zip(Xt, yt):
                m.learn_one(x, int(c_))
        cpu = time.process_time() - t0
        if isinstance(m, AveragedPerceptron):
            pred = m.predict(Xv)
            extra = {}
        else:
            pred = np.array([m.predict_one(x) for x in Xv])
            lr = m._learner
            extra = {"hinge_active": lr.n_updates / lr.n_steps, "norm": m.certificate().extra["norm"],
                     "eta_end": lr.eta(), "acc_scale": lr.acc}
        res = {"cfg": cfg, "ntr": a.ntr, "nv": a.nv, "epochs": a.epochs, "val_accuracy": float(np.mean(pred == yv)),
               "train_cpu_s": round(cpu, 1), **extra}
        print(json.dumps(res), flush=True)
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "a") as f:
            f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
