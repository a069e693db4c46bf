"""CuttingPlane's streaming replay (``replay=1``: one held example revisited after each new one,
then the restricted QP over the two solved) against ``replay=0`` (the new example only, the
previous behaviour), in the same run: CPU time and progressive accuracy on scikit-learn's digits
(multiclass, 10 classes) and on a synthetic stream whose classes arrive one at a time.

    nice -n 10 python bench/cp_replay.py [--out bench/results/cp_replay]
"""
import argparse
import json
import os

import numpy as np

import streamssvm as ss
from _common import Clock, table_head, write_results

HERE = os.path.dirname(os.path.abspath(__file__))


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
    with Clock() as c:
        for x, y in zip(xs, ys):
            hits += m.predict_one(x) == y
            m.learn_one(x, y)
            if y not in first:
                first[y] = x
    firsts = sum(m.predict_one(x) == y for y, x in first.items()) / len(first)
    return {"cpu_s": c.cpu, "wall_s": c.wall, "progressive_accuracy": hits / len(ys),
            "first_examples_right_at_end": firsts}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cp_replay"), help="writes OUT.json and OUT.md")
    args = ap.parse_args(argv)
    m = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane())
    m.learn_one({0: 1.0}, 0); m.learn_one({1: 1.0}, 1)   # compile outside the clock
    res = {}
    for name, xs, ys in streams():
        res[name] = {f"replay={r}": run(xs, ys, r) for r in (0, 1)}
        print(name, json.dumps(res[name], indent=1), flush=True)
    lines = ["# CuttingPlane streaming replay", "", "Same run, `nice -n 10`, lam=1e-3; one learn_one per "
             "record with progressive validation.", "",
             *table_head("stream", "replay", "CPU s", "wall s", "progressive acc.", "first examples right at the end")]
    for name, r in res.items():
        for k, v in r.items():
            lines.append(f"| {name} | {k} | {v['cpu_s']:.2f} | {v['wall_s']:.2f} | {v['progressive_accuracy']:.3f} "
                         f"| {v['first_examples_right_at_end']:.3f} |")
    write_results(args.out, res, lines, echo=False)


if __name__ == "__main__":
    main()
