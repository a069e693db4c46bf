"""Where ``streamssvm run file://`` spends its time: the pieces of ``Engine.run`` in CPU
microseconds per record, for one or more checkouts, paired (issue 22's ``run file://`` row).

    flock /tmp/bench.lock python bench/run_pieces.py                        # this checkout
    flock /tmp/bench.lock python bench/run_pieces.py --code /tmp/base .     # before / after, paired

Each round runs every checkout in its own process (``--code`` order), alternating; a process
runs ``streamssvm run --source file://letters.jsonl --task multiclass --no-progress
--checkpoint-dir <fresh>`` (CLI defaults) in-process through ``streamssvm.cli.parser.main`` once
to warm up, then ``--reps`` times with the pieces below wrapped in ``time.process_time``
accumulators (a piece's time includes the pieces it calls; the wrappers cost ~0.1 us per call,
~0.05 us per record). The table shows each piece's median over the rounds of the per-process
medians. Data: the first ``--n`` OCR letters of ``ocr_letters.npz`` as JSONL (16 numbers a record,
26 classes), as ``bench/hotpath.py``'s ``file`` row writes them.

Pieces: ``run`` (``Engine.run``, = the summary's ``cpu_seconds``), ``stream`` (``Engine._loop``),
``predict_learn_each`` (the estimator's micro-batch), ``kernel run`` (``BCFW.predict_learn_run``:
the record kernel with its Python side), ``new labels`` (``predict_learn_one``: records of a
label not seen before leave the kernel's runs), ``label growth`` (``BCFW.ensure``),
``temperature`` (``Temperature.observe_classes``, with its fits) and ``temperature fits``,
``checkpoints`` (``Engine.checkpoint``, 3 at 20k records) and ``checkpoint files``
(``CheckpointManager.save``: arrays, SHA-256, write, sync), ``final snapshot``
(``Engine.snapshot``: the exact full-gap certificate), ``reader`` (``JSONLSource._read_rows``).
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
DATA = os.environ.get("STREAMSSVM_DATA", "/work/shared/datasets")

#: (label, module, class, method)
PIECES = [
    ("run", "streamssvm.engine", "Engine", "run"),
    ("stream", "streamssvm.engine", "Engine", "_loop"),
    ("predict_learn_each", "streamssvm.estimators.multiclass", "MulticlassSSVM", "predict_learn_each"),
    ("kernel run", "streamssvm.learners.bcfw", "BCFW", "predict_learn_run"),
    ("new labels", "streamssvm.estimators.multiclass", "MulticlassSSVM", "predict_learn_one"),
    ("label growth", "streamssvm.learners.bcfw", "BCFW", "ensure"),
    ("temperature", "streamssvm.calibration", "Temperature", "observe_classes"),
    ("temperature fits", "streamssvm.calibration", "Temperature", "fit"),
    ("checkpoints", "streamssvm.engine", "Engine", "checkpoint"),
    ("checkpoint files", "streamssvm.checkpoint", "CheckpointManager", "save"),
    ("final snapshot", "streamssvm.engine", "Engine", "snapshot"),
    ("reader", "streamssvm.connectors.files", "JSONLSource", "_read_rows"),
]


def write_letters(n, path):
    import numpy as np
    d = np.load(os.path.join(DATA, "ocr_letters.npz"))
    X, y = d["pixels"][:n].astype(np.float64), d["labels"][:n].astype(np.int64)
    with open(path, "w") as f:
        for r, c in zip(X, y):
            f.write(json.dumps({"x": r.tolist(), "y": int(c)}) + "\n")


def worker(path, n, reps):
    """In the checkout on sys.path: the pieces' medians (us per record) as JSON on stdout."""
    import functools
    import importlib
    import io
    import time

    acc = {}

    def wrap(label, modname, cls, meth):
        try:
            owner = getattr(importlib.import_module(modname), cls)
            f = getattr(owner, meth)
        except (ImportError, AttributeError):
            return

        @functools.wraps(f)
        def g(*a, **k):
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                acc[label] = acc.get(label, 0.0) + time.process_time() - t
        setattr(owner, meth, g)

    for p in PIECES:
        wrap(*p)
    from streamssvm.cli.parser import main

    def run():
        w = tempfile.mkdtemp(prefix="run-pieces-")
        old, sys.stdout = sys.stdout, io.StringIO()
        try:
            main(["run", "--source", f"file://{path}", "--task", "multiclass", "--no-progress",
                  "--checkpoint-dir", os.path.join(w, "ck"), "--json"])
            out = sys.stdout.getvalue()
        finally:
            sys.stdout = old
        return json.loads(out)

    run()
    per = []
    for _ in range(reps):
        acc.clear()
        s = run()
        d = {k: 1e6 * v / n for k, v in acc.items()}
        d["cpu_seconds"] = 1e6 * s["cpu_seconds"] / n
        per.append(d)
    print(json.dumps({k: statistics.median(d.get(k, 0.0) for d in per) for k in per[0]}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--code", nargs="+", default=[ROOT], help="checkouts to measure (paired, in this order)")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3, help="runs per process")
    ap.add_argument("--rounds", type=int, default=3, help="processes per checkout, alternating")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.worker[0], int(a.worker[1]), int(a.worker[2]))
    path = os.path.join(tempfile.gettempdir(), f"run-pieces-letters{a.n}.jsonl")
    if not os.path.exists(path):
        write_letters(a.n, path)
    got = {c: [] for c in a.code}
    for r in range(a.rounds):
        for c in a.code:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(c))
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", path, str(a.n), str(a.reps)],
                               env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
            if p.returncode:
                sys.exit(p.stderr[-3000:])
            got[c].append(json.loads(p.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {c}: run {got[c][-1]['run']:.2f} us/record", file=sys.stderr, flush=True)
    labels = [p[0] for p in PIECES] + ["cpu_seconds"]
    print("| piece (CPU us per record, median) | " + " | ".join(f"`{c}`" for c in a.code) + " |")
    print("|---|" + "---|" * len(a.code))
    for k in labels:
        cells = [statistics.median(d.get(k, 0.0) for d in got[c]) for c in a.code]
        print(f"| {k} | " + " | ".join(f"{v:.2f}" for v in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
