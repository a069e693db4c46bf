"""Past the window: what a record costs once a BCFW store is full (each record evicts the oldest
block), for one or more checkouts, paired (issue 22: a stream longer than the window).

    flock /tmp/bench.lock python bench/full_store.py --code /tmp/base .   # before / after

Data: all OCR letters (``ocr_letters.npz``, 52,152 records of 16 numbers, 26 classes), in
order. Each round runs every checkout in its own process (``--code`` order, alternating); a
process loads the kernels (a short stream past a small window), then measures, with BCFW's
``window=W`` (default 10,000: the stream is five windows long):

* ``library``: ``MulticlassSSVM.predict_learn_each`` in micro-batches of 256 (what the engine
  calls), CPU microseconds per record before the window is full and after;
* ``no window``: the same with ``window=None`` (no eviction ever), the same two spans: what a
  record costs without evictions;
* ``run file://``: ``streamssvm run --source file://letters.jsonl --task multiclass --window W``
  (CLI defaults otherwise), its summary's CPU seconds per record over the whole stream.

BLAS on one thread. Writes ``bench/results/full_store.{json,md}`` (``--out`` to put them
elsewhere; tuning runs do not belong in ``bench/results``).
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
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.environ.get("STREAMSSVM_DATA", "/work/shared/datasets")


def letters():
    import numpy as np
    d = np.load(os.path.join(DATA, "ocr_letters.npz"))
    return d["pixels"].astype(np.float64), [int(c) for c in d["labels"]]


def worker(window, path):
    """In the checkout on sys.path: the measurements (us per record) as JSON on stdout."""
    import streamssvm as ss
    X, y = letters()
    rows, n = list(X), len(y)
    warm = ss.MulticlassSSVM(learner=ss.learners.BCFW(window=500))   # the kernels loaded before the clock
    for a in range(0, 2000, 256):
        warm.predict_learn_each(rows[a:a + 256], y[a:a + 256])
    out = {}
    for name, w in (("library", window), ("no window", None)):
        m = ss.MulticlassSSVM(learner=ss.learners.BCFW(window=w))
        spans = {"before": 0.0, "after": 0.0}
        for a in range(0, n, 256):
            b = min(a + 256, n)
            t = time.process_time()
            m.predict_learn_each(rows[a:b], y[a:b])
            spans["before" if b <= window else "after"] += time.process_time() - t
        k_before = (min(window, n) // 256) * 256
        out[name] = {"before": 1e6 * spans["before"] / max(k_before, 1),
                     "after": 1e6 * spans["after"] / max(n - k_before, 1)}
    ck = tempfile.mkdtemp()
    p = subprocess.run([sys.executable, "-m", "streamssvm", "run", "--source", f"file://{path}", "--task", "multiclass",
                        "--window", str(window), "--no-progress", "--checkpoint-dir", ck, "--json"],
                       check=True, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=sys.path[0]))
    s = json.loads(p.stdout)
    out["run file://"] = {"whole": 1e6 * s["cpu_seconds"] / n, "seconds": s["seconds"]}
    json.dump(out, sys.stdout)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--code", nargs="+", default=[ROOT], help="checkouts to compare (before first)")
    ap.add_argument("--window", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        sys.path.insert(0, a.worker[1])
        return worker(a.window, a.worker[0])
    X, y = letters()
    work = tempfile.mkdtemp(prefix="full-store-")
    path = os.path.join(work, "letters.jsonl")
    with open(path, "w") as f:
        for r, c in zip(X, y):
            f.write(json.dumps({"x": r.tolist(), "y": c}) + "\n")
    codes = [os.path.abspath(c) for c in a.code]
    res = {c: [] for c in codes}
    for r in range(a.rounds):
        for c in codes:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--window", str(a.window), "--worker", path, c],
                               check=True, capture_output=True, text=True, cwd=work)
            res[c].append(json.loads(p.stdout))
            print(f"round {r + 1} {c}: {res[c][-1]}", flush=True)

    def med(c, k, s):
        return statistics.median(v[k][s] for v in res[c])
    commits = {c: subprocess.run(["git", "-C", c, "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip() for c in codes}
    rows = [("library predict_learn_each (256), before the window is full", "library", "before"),
            ("library predict_learn_each (256), past the window (each record evicts)", "library", "after"),
            ("the same without a window, records 1..W", "no window", "before"),
            ("the same without a window, records W+1..", "no window", "after"),
            ("`run file://` whole run, CPU per record", "run file://", "whole")]
    L = ["# Past the window (issue 22)", "",
         f"`python bench/full_store.py --code {' '.join(a.code)}` — {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} "
         f"UTC, load average {os.getloadavg()[0]:.2f} at the end. All {len(y):,} OCR letters in order, BCFW "
         f"`window={a.window:,}`, CLI defaults otherwise; medians of {a.rounds} alternated rounds, one process per "
         "checkout and round; CPU microseconds per record; BLAS on one thread.", "",
         "| measurement | " + " | ".join(f"`{c}` ({commits[c]})" for c in codes) + " |",
         "|---|" + "---|" * len(codes)]
    for label, k, s in rows:
        L.append(f"| {label} | " + " | ".join(f"{med(c, k, s):.1f}" for c in codes) + " |")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "full_store.json"), "w") as f:
        json.dump({"window": a.window, "records": len(y), "codes": codes, "commits": commits, "rounds": res}, f,
                  indent=1)
    with open(os.path.join(a.out, "full_store.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
