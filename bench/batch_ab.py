"""Two checkouts' ``predict_learn_many`` on the 784-d batches of ``hotpath.py``'s ``batch`` row,
interleaved rep by rep: one worker process per checkout (each warmed up), the driver asks them to
run one rep in turn, so both see the same load within a fraction of a second. Prints each
checkout's median CPU us per example and the median of the per-pair ratios (robust on a shared,
loaded machine, where whole-process alternation drifts by tens of percent). ``--sklearn`` adds a
third worker in the same turns, scikit-learn's ``SGDClassifier.partial_fit`` on the same batches
(``hotpath.py``'s peer), and each checkout's median ratio to it per rep (> 1: faster than it).

    flock /tmp/bench.lock python bench/batch_ab.py BEFORE_DIR AFTER_DIR [--reps 15] [--sklearn]
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(sklearn=False):
    """Read a line per rep from stdin, run the batch loop once (ours, or with ``sklearn``
    ``SGDClassifier.partial_fit``'s), print its CPU us per example."""
    import time
    sys.path.insert(1, HERE)
    import numpy as np
    from hotpath import digits784
    X, y = digits784(3)
    spans = [(a, min(a + 256, len(y))) for a in range(0, len(y), 256)]

    if sklearn:
        from sklearn.linear_model import SGDClassifier
        classes = np.unique(y)

        def run():
            m = SGDClassifier()
            for a, b in spans:
                m.partial_fit(X[a:b], y[a:b], classes=classes)
    else:
        import streamssvm as ss

        def run():
            m = ss.MulticlassSSVM()
            for a, b in spans:
                m.predict_learn_many(X[a:b], y[a:b])

    run()
    print("ready", flush=True)
    for _ in sys.stdin:
        t = time.process_time()
        run()
        print(1e6 * (time.process_time() - t) / len(y), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("code", nargs="*", help="two checkouts: before, after")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--sklearn", action="store_true", help="a third worker: SGDClassifier.partial_fit")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.sklearn)
    procs = []
    for c in a.code + (["sklearn"] if a.sklearn else []):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(a.code[0] if c == "sklearn" else c))
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"] + (["--sklearn"] if c == "sklearn" else []),
                             env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             cwd=tempfile.gettempdir())
        procs.append(p)
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    got = [[] for _ in procs]
    for r in range(a.reps):
        order = range(len(procs)) if r % 2 == 0 else reversed(range(len(procs)))
        for i in order:
            procs[i].stdin.write("go\n")
            procs[i].stdin.flush()
            got[i].append(float(procs[i].stdout.readline()))
    for p in procs:
        p.stdin.close()
        p.wait()
    for c, v in zip(a.code + (["SGDClassifier.partial_fit"] if a.sklearn else []), got):
        print(f"{c}: median {statistics.median(v):.2f} CPU us/example (min {min(v):.2f}, max {max(v):.2f})")
    if a.sklearn:
        for c, v in zip(a.code, got):
            sp = [s / x for x, s in zip(v, got[-1])]
            print(f"{c}: partial_fit / ours, median of {len(sp)} paired reps: {statistics.median(sp):.3f} "
                  f"(quartiles {statistics.quantiles(sp, n=4)[0]:.3f}-{statistics.quantiles(sp, n=4)[2]:.3f})")
        got = got[:-1]
    if len(got) == 2:
        ratios = [b / x for x, b in zip(*got)]
        print(f"after / before, median of {len(ratios)} paired reps: {statistics.median(ratios):.3f} "
              f"(quartiles {statistics.quantiles(ratios, n=4)[0]:.3f}-{statistics.quantiles(ratios, n=4)[2]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
