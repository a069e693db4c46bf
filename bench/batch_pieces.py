"""Where ``MulticlassSSVM.predict_learn_many`` spends its time on dense 784-d rows in batches of
256 (``bench/hotpath.py``'s ``batch`` row): its pieces in CPU microseconds per example, for one or
more checkouts, paired.

    flock /tmp/bench.lock python bench/batch_pieces.py                        # this checkout
    flock /tmp/bench.lock python bench/batch_pieces.py --code /tmp/base .     # before / after, paired

Each round runs every checkout in its own process (``--code`` order), alternating; a process runs
the batch loop of ``hotpath.bench_batch`` (``MulticlassSSVM()`` defaults on the 784-d upsampled
digits x3) once to warm up, then ``--reps`` times with the pieces below wrapped in
``time.process_time`` accumulators (a piece's time includes the pieces it calls; a piece a
checkout does not have reads 0). The table shows each piece's median over the rounds of the
per-process medians; ``total`` is the whole loop.
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: (label, module, owner (a class, or None for the module), attribute)
PIECES = [
    ("predict_learn_many", "streamssvm.estimators.multiclass", "MulticlassSSVM", "predict_learn_many"),
    ("encode rows", "streamssvm.estimators.multiclass", "MulticlassSSVM", "_encode_rows"),
    ("dense_csr", "streamssvm.features", "FeatureIndex", "dense_csr"),
    ("encode labels", "streamssvm.estimators.multiclass", "MulticlassSSVM", "_encode_labels"),
    ("dense ids (predict)", "streamssvm.estimators.multiclass", "MulticlassSSVM", "_dense_ids"),
    ("is_identity", "streamssvm.scaling", "ColumnScaler", "is_identity"),
    ("check_dense", "streamssvm.features", "FeatureIndex", "check_dense"),
    ("emission_weights", "streamssvm.learners.bcfw", "BCFW", "emission_weights"),
    ("divisors", "streamssvm.scaling", "ColumnScaler", "divisors"),
    ("learn_encoded", "streamssvm.estimators.multiclass", "MulticlassSSVM", "_learn_encoded"),
    ("learn_dense", "streamssvm.estimators.multiclass", "MulticlassSSVM", "_learn_dense"),
    ("scaling (learn_scaled)", "streamssvm.scaling", "ColumnScaler", "learn_scaled"),
    ("learn_batch", "streamssvm.learners.bcfw", "BCFW", "learn_batch"),
    ("ensure", "streamssvm.learners.bcfw", "BCFW", "ensure"),
    ("learn_dense_rows", "streamssvm.learners.bcfw", "BCFW", "learn_dense_rows"),
    ("write_new", "streamssvm.blocks", "BlockStore", "write_new"),
    ("write_dense", "streamssvm.blocks", "BlockStore", "write_dense"),
    ("place_rows", "streamssvm.blocks", "BlockStore", "_place_rows"),
    ("ensure_arena", "streamssvm.blocks", "BlockStore", "_ensure_arena"),
    ("fifo_victims", "streamssvm.blocks", "BlockStore", "fifo_victims"),
    ("after_kernel_insert", "streamssvm.blocks", "BlockStore", "after_kernel_insert"),
    ("bundles", "streamssvm.learners.bcfw", "BCFW", "_bundles"),
    ("grow_flagged", "streamssvm.learners.bcfw", "BCFW", "_grow_flagged"),
    ("prefault", "streamssvm.blocks", None, "prefault"),
    ("insert_blocks", "streamssvm._kernels.bcfw", None, "insert_blocks"),
    ("insert_dense_rows", "streamssvm._kernels.bcfw", None, "insert_dense_rows"),
    ("learn_new_blocks", "streamssvm._kernels.bcfw", None, "learn_new_blocks"),
    ("learn_new_blocks_cm", "streamssvm._kernels.bcfw", None, "learn_new_blocks_cm"),
    ("full_pass", "streamssvm.learners.bcfw", "BCFW", "_full_pass"),
    ("sync", "streamssvm.estimators.multiclass", "MulticlassSSVM", "_sync"),
]


def worker(reps):
    """In the checkout on sys.path: the pieces' medians (us per example) as JSON on stdout."""
    import functools
    import importlib
    import time

    acc = {}

    def wrap(label, modname, cls, attr):
        try:
            mod = importlib.import_module(modname)
            owner = mod if cls is None else getattr(mod, cls)
            f = getattr(owner, attr)
        except (ImportError, AttributeError):
            return

        @functools.wraps(f)
        def g(*a, **k):
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                acc[label] = acc.get(label, 0.0) + time.process_time() - t
        setattr(owner, attr, g)

    for p in PIECES:
        wrap(*p)
    sys.path.insert(1, HERE)
    import streamssvm as ss
    from hotpath import digits784
    X, y = digits784(3)
    spans = [(a, min(a + 256, len(y))) for a in range(0, len(y), 256)]

    def run():
        m = ss.MulticlassSSVM()
        for a, b in spans:
            m.predict_learn_many(X[a:b], y[a:b])

    run()
    per = []
    for _ in range(reps):
        acc.clear()
        t = time.process_time()
        run()
        d = {k: 1e6 * v / len(y) for k, v in acc.items()}
        d["total"] = 1e6 * (time.process_time() - t) / len(y)
        per.append(d)
    print(json.dumps({k: statistics.median(d.get(k, 0.0) for d in per) for k in per[0]}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--code", nargs="+", default=[ROOT], help="checkouts to measure (paired, in this order)")
    ap.add_argument("--reps", type=int, default=3, help="runs per process")
    ap.add_argument("--rounds", type=int, default=3, help="processes per checkout, alternating")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.worker)
    got = {c: [] for c in a.code}
    for r in range(a.rounds):
        for c in a.code:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(c))
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", str(a.reps)],
                               env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
            if p.returncode:
                sys.exit(p.stderr[-3000:])
            got[c].append(json.loads(p.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {c}: total {got[c][-1]['total']:.2f} us/example", file=sys.stderr, flush=True)
    labels = [p[0] for p in PIECES] + ["total"]
    print("| piece (CPU us per example, median) | " + " | ".join(f"`{c}`" for c in a.code) + " |")
    print("|---|" + "---|" * len(a.code))
    for k in labels:
        cells = [statistics.median(d.get(k, 0.0) for d in got[c]) for c in a.code]
        print(f"| {k} | " + " | ".join(f"{v:.2f}" for v in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
