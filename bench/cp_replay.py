"""CuttingPlane's streaming replay (``replay=1``: one held example revisited after each new one,
then the restricted QP over the two solved) against ``replay=0`` (the new example only, the
previous behaviour), in the same run: CPU time and progressive accuracy on scikit-learn's digits
(multiclass, 10 classes) and on a synthetic stream whose classes arrive one at a time.

    nice -n 10 python bench/cp_replay.py
"""
import json
import os
import time

import numpy as np

import streamssvm as ss


def streams():
    from sklearn.datasets import load_digits
    d = load_digits()
    rng = np.random.default_rng(0)
    p = rng.permutation(len(d.target))
    X = d.data[p] / 16.0
    yield "digits (1797 x 64, 10 classes)", [dict(enumerate(r)) for r in X], [int(v) for v in d.target[p]]
    # 40 classes, their first examples arrive in order (the first-ten-minutes case)
    K, n = 40, 1200
    protos = rng.normal(size=(K, 20))
    ys = [i if i < K else int(rng.integers(K)) for i in range(n)]
    xs = [dict(enumerate(protos[c] + 0.5 * rng.normal(size=20))) for c in ys]
    yield "synthetic (1200 x 20, 40 classes arriving one by one)", xs, ys


def run(xs, ys, replay):
    m = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane(lam=1e-3, replay=replay, seed=0))
    hits = 0
    first = {}
    c0, w0 = time.process_time(), time.perf_counter()
    for x, y in zip(xs, ys):
        hits += m.predict_one(x) == y
        m.learn_one(x, y)
        if y not in first:
            first[y] = x
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    firsts = sum(m.predict_one(x) == y for y, x in first.items()) / len(first)
    return {"cpu_s": cpu, "wall_s": wall, "progressive_accuracy": hits / len(ys),
            "first_examples_right_at_end": firsts}


def main():
    m = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane())
    m.learn_one({0: 1.0}, 0); m.learn_one({1: 1.0}, 1)   # compile outside the clock
    res = {}
    for name, xs, ys in streams():
        res[name] = {f"replay={r}": run(xs, ys, r) for r in (0, 1)}
        print(name, json.dumps(res[name], indent=1), flush=True)
    os.makedirs("bench/results", exist_ok=True)
    with open("bench/results/cp_replay.json", "w") as f:
        json.dump(res, f, indent=1)
    lines = ["# CuttingPlane streaming replay", "", "Same run, `nice -n 10`, lam=1e-3; one learn_one per "
             "record with progressive validation.", "",
             "| stream | replay | CPU s | wall s | progressive acc. | first examples right at the end |",
             "|---|---|---|---|---|---|"]
    for name, r in res.items():
        for k, v in r.items():
            lines.append(f"| {name} | {k} | {v['cpu_s']:.2f} | {v['wall_s']:.2f} | {v['progressive_accuracy']:.3f} "
                         f"| {v['first_examples_right_at_end']:.3f} |")
    with open("bench/results/cp_replay.md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
