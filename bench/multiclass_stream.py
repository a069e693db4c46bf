"""MulticlassSSVM on real streams against river's and scikit-learn's online linear classifiers.

    python bench/multiclass_stream.py           # ~8 minutes
    python bench/multiclass_stream.py --quick

Progressive validation (predict, then learn, one example at a time, the same loop for every
model) on river's ImageSegments (2310 examples, 18 features, 7 classes) and OCR letters as a
flat 26-class stream (128 binary pixels), with dict input; every model sees the same
standardized features (a river StandardScaler updated progressively in front of all of them,
ImageSegments only; OCR pixels are 0/1 and used as they are). Throughput = examples per second
of the whole predict+learn loop and of learning alone; medians of 3 repetitions, peers measured
in the same run. ``learn_many`` throughput on dense 16-128-feature arrays against
scikit-learn's ``SGDClassifier.partial_fit`` in batches of 256.

Writes bench/results/multiclass_stream.{json,md}.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import river  # noqa: E402
import sklearn  # noqa: E402
from river import datasets, linear_model, multiclass, preprocessing  # noqa: E402
from sklearn.linear_model import SGDClassifier  # noqa: E402

import streamssvm as ss  # noqa: E402
from _common import Clock, cpu_model, write_results  # noqa: E402




class SklearnOnline:
    """SGDClassifier.partial_fit one example at a time behind a dict interface."""

    def __init__(self, classes, features):
        self.m = SGDClassifier(loss="hinge", alpha=1e-4, random_state=0)
        self.classes = np.array(classes)
        self.features = features
        self.fitted = False

    def _vec(self, x):
        return np.array([[x.get(f, 0.0) for f in self.features]])

    def predict_one(self, x):
        if not self.fitted:
            return None
        return self.m.predict(self._vec(x))[0]

    def learn_one(self, x, y):
        self.m.partial_fit(self._vec(x), [y], classes=self.classes)
        self.fitted = True


def imagesegments():
    raw = list(datasets.ImageSegments())
    sc = preprocessing.StandardScaler()
    out = []
    for x, y in raw:
        sc.learn_one(x)
        out.append((sc.transform_one(x), y))
    return out


def ocr_letters(n):
    out = []
    for i, (x, y) in enumerate(ss.datasets.ocr_letter_stream("large", train=True)):
        if i >= n:
            break
        out.append(({str(j): 1.0 for j in np.flatnonzero(x)}, y))
    return out


def models(classes, features, lams):
    ms = {
        "river OvR(PAClassifier)": lambda: multiclass.OneVsRestClassifier(linear_model.PAClassifier()),
        "river SoftmaxRegression": lambda: linear_model.SoftmaxRegression(),
        "river OvR(LogisticRegression)": lambda: multiclass.OneVsRestClassifier(linear_model.LogisticRegression()),
        "sklearn SGDClassifier (partial_fit, 1 ex)": lambda: SklearnOnline(classes, features),
    }
    for lam in lams:
        for r in (0, 1, 2):
            ms[f"streamssvm MulticlassSSVM lam={lam:g} replay={r}"] = (
                lambda lam=lam, r=r: ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=lam, replay=r, seed=0)))
    return ms


def progressive(make, data, reps, learn_only=True):
    """Progressive validation (predict, then learn, one example at a time) of ``make()`` on
    ``data``, ``reps`` times: accuracy, examples per wall and per CPU second (medians); with
    ``learn_only`` also the rate of learning alone (a fresh model, no predictions)."""
    walls, cpus, learn_walls, accs = [], [], [], []
    for _ in range(reps):
        m = make()
        correct = 0
        with Clock() as c:
            for x, y in data:
                p = m.predict_one(x)
                correct += p == y
                m.learn_one(x, y)
        walls.append(c.wall)
        cpus.append(c.cpu)
        accs.append(correct / len(data))
        if learn_only:
            m = make()
            with Clock() as c:
                for x, y in data:
                    m.learn_one(x, y)
            learn_walls.append(c.wall)
    out = {"accuracy": float(np.median(accs)), "ex_per_s": len(data) / float(np.median(walls)),
           "ex_per_cpu_s": len(data) / float(np.median(cpus)), "wall_s": float(np.median(walls)),
           "cpu_s": float(np.median(cpus)), "all_seconds": walls}
    if learn_only:
        out["learn_ex_per_s"] = len(data) / float(np.median(learn_walls))
    return out


def learn_many_bench(X, y, reps, replay):
    rates, accs = [], []
    for _ in range(reps):
        m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=replay, seed=0))
        m.learn_many(X[:64], y[:64])  # compile + first labels outside the clock
        t0 = time.perf_counter()
        m.learn_many(X[64:], y[64:])
        rates.append((len(X) - 64) / (time.perf_counter() - t0))
        accs.append(float(np.mean(m.predict_many(X[-2000:]) == y[-2000:])))
    return {"ex_per_s": float(np.median(rates)), "train_accuracy_last2000": float(np.median(accs))}


def sgd_batches(X, y, reps, bs=256):
    rates = []
    classes = np.unique(y)
    for _ in range(reps):
        m = SGDClassifier(loss="hinge", alpha=1e-4, random_state=0)
        t0 = time.perf_counter()
        for a in range(0, len(X), bs):
            m.partial_fit(X[a:a + bs], y[a:a + bs], classes=classes)
        rates.append(len(X) / (time.perf_counter() - t0))
    return {"ex_per_s": float(np.median(rates)), "train_accuracy_last2000": float(np.mean(m.predict(X[-2000:]) == y[-2000:]))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ocr-letters", type=int, default=20000)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.ocr_letters = 1, 3000
    os.makedirs(args.out, exist_ok=True)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731

    # warm up the numba kernels outside every clock
    w = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0))
    for i in range(50):
        w.learn_one({"a": float(i % 3), "b": 1.0}, i % 3)
        w.predict_one({"a": 1.0})
    ss.MulticlassSSVM().learn_many(np.random.default_rng(0).normal(size=(100, 4)), np.arange(100) % 3)

    results = {"streams": {}, "learn_many": {}}
    streams = {"ImageSegments (18 features, 7 classes)": imagesegments(),
               f"OCR letters, flat ({args.ocr_letters} letters, 128 pixels, 26 classes)": ocr_letters(args.ocr_letters)}
    for name, data in streams.items():
        classes = sorted({y for _, y in data})
        features = sorted({k for x, _ in data for k in x})
        res = {}
        for mname, make in models(classes, features, (1e-2, 1e-3)).items():
            log(f"{name}: {mname}")
            res[mname] = progressive(make, data, args.reps)
            log(f"   {res[mname]['accuracy']:.4f}  {res[mname]['ex_per_s']:.0f} ex/s")
        results["streams"][name] = {"n": len(data), "models": res}

    rng = np.random.default_rng(0)
    Xs = rng.normal(size=(200_000, 16))
    Wt = rng.normal(size=(10, 16))
    ys = np.argmax(Xs @ Wt.T + 0.5 * rng.normal(size=(200_000, 10)), axis=1)
    X_ocr, y_ocr = [], []
    for x, y in ss.datasets.ocr_letter_stream("large", train=True):
        X_ocr.append(x)
        y_ocr.append(ord(y) - 97)
    seg = datasets.ImageSegments()
    feats = None
    X_seg, y_seg = [], []
    for x, y in seg:
        feats = feats or sorted(x)
        X_seg.append([x[f] for f in feats])
        y_seg.append(y)
    X_seg = np.array(X_seg)
    X_seg = (X_seg - X_seg.mean(0)) / (X_seg.std(0) + 1e-12)
    dense = {"synthetic 16-d, 10 classes (200k)": (Xs, ys),
             "ImageSegments 18-d arrays (2310)": (X_seg, np.array(y_seg)),
             f"OCR letters 128-d arrays ({len(X_ocr)})": (np.array(X_ocr), np.array(y_ocr))}
    if args.quick:
        dense = {k: (v[0][:20000], v[1][:20000]) for k, v in dense.items()}
    for name, (X, y) in dense.items():
        log(f"learn_many: {name}")
        results["learn_many"][name] = {
            "streamssvm learn_many replay=0": learn_many_bench(X, y, args.reps, 0),
            "streamssvm learn_many replay=1": learn_many_bench(X, y, args.reps, 1),
            "sklearn SGDClassifier partial_fit (batches of 256)": sgd_batches(X, y, args.reps),
        }
        log(f"   {results['learn_many'][name]}")

    info = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "river": river.__version__, "sklearn": sklearn.__version__,
            "streamssvm": ss.__version__, "reps": args.reps}
    lines = ["# MulticlassSSVM on real streams", "",
             "Progressive validation (predict then learn), dict input, one example at a time; medians of "
             f"{args.reps} runs; all models measured in the same run.", ""]
    for name, r in results["streams"].items():
        river_best = max(v["ex_per_s"] for k, v in r["models"].items() if k.startswith("river"))
        river_best_learn = max(v["learn_ex_per_s"] for k, v in r["models"].items() if k.startswith("river"))
        lines += [f"## {name}", "", "| model | accuracy | predict+learn ex/s | learn-only ex/s | "
                  "speed vs river's fastest (predict+learn / learn-only) |", "|---|---|---|---|---|"]
        for k, v in sorted(r["models"].items(), key=lambda kv: -kv[1]["accuracy"]):
            lines.append(f"| {k} | {v['accuracy']:.4f} | {v['ex_per_s']:,.0f} | {v['learn_ex_per_s']:,.0f} | "
                         f"{v['ex_per_s'] / river_best:.2f}x / {v['learn_ex_per_s'] / river_best_learn:.2f}x |")
        lines.append("")
    lines += ["## learn_many on dense arrays", "", "| data | model | ex/s | accuracy on the last 2000 (train) |",
              "|---|---|---|---|"]
    for name, r in results["learn_many"].items():
        for k, v in r.items():
            lines.append(f"| {name} | {k} | {v['ex_per_s']:,.0f} | {v['train_accuracy_last2000']:.4f} |")
    lines += ["", f"Machine: {info['cpu']}, {info['cores']} cores; river {info['river']}, scikit-learn "
              f"{info['sklearn']}, numpy {info['numpy']}."]
    write_results(os.path.join(args.out, "multiclass_stream"), {"machine": info, **results}, lines, default=float)


if __name__ == "__main__":
    main()
