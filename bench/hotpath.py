"""The record path: what one record costs from a ``learn_one`` / ``predict_one`` call, a file or a
Kafka topic to the kernels, against peers measured in the same run (issue 22's table).

    python -m bench --suite hotpath [--quick]            # this checkout -> bench/results/hotpath.{json,md}
    python bench/hotpath.py --code /tmp/base --out /tmp/base_hotpath   # another checkout's streamssvm

Rows (each a median of ``--reps`` paired repetitions: ours and the peer alternate in one
process, fresh models each time, kernels compiled before the clock; CPU = process time, wall =
perf_counter; BLAS pinned to one thread before numpy is imported):

* ``numpy16``: progressive validation (predict, then learn) of OCR letters as 16-d rows (the
  16 packed pixel bytes of ``ocr_letters.npz`` as numbers), 26 classes, ``MulticlassSSVM()``
  defaults, by ``predict_one`` + ``learn_one`` and by ``predict_learn_one``; peer Vowpal Wabbit
  ``--oaa 26`` (pyvw: one parse, ``learn``, the prediction made before the update), its text
  lines built outside the clock.
* ``digits64``: the same on scikit-learn's bundled 8x8 digits (64-d, 10 classes, 1797 rows,
  streamed ``passes`` times); ``digits784``: those digits bilinearly upsampled to 28 x 28
  (784-d, values < 0.5 zeroed): no real 784-d image set is available offline (MNIST would need
  a download), so these stand in for issue 22's 784-d rows.
* ``phishing``: dict input, binary: river's Phishing (9 features), ``MulticlassSSVM()`` against
  river ``LogisticRegression()``, microseconds per example.
* ``dictkeys``: the 64-d and the 784-d digits as dicts with int keys and with str keys, against
  river ``SoftmaxRegression()`` (str keys).
* ``file``: ``streamssvm run --source file://letters.jsonl`` (CLI defaults, no progress bar, a
  fresh checkpoint folder) in a subprocess; two numbers of ours from the run's summary, each over
  the n records: the *whole run* (``cpu_seconds``: ``Engine.run``, i.e. the stream, its
  checkpoints at 10k and 20k records, the final full-gap certificate -- an O(n) pass, part of
  the product -- and the final checkpoint; not the process's start-up) and the *stream*
  (``cpu_seconds_stream``: until the last record, its in-stream checkpoints included; not the
  final certificate and checkpoint), against the library's own ``predict_learn_many`` on the
  same rows in batches of 256 (issue 22's target: predictions at the weights before each batch,
  no temperature fit), and against ``predict_learn_each`` on the same rows as numpy arrays in
  batches of 256: the library's progressive validation record by record in micro-batches (each
  record predicted with the weights after the one before it, the temperature fit fed), what
  ``run`` computes. Both library loops start from a fresh model, as ``run`` does (the classes
  arrive as the stream goes). Code whose summary has no ``cpu_seconds``: (run on n records -
  run on 1 record) / (n - 1) of whole processes.
* ``batch``: ``predict_learn_many`` in batches of 256 (predictions at the weights before the
  batch, then learning it in order; ``MulticlassSSVM()`` defaults, BCFW) on the 784-d upsampled
  digits streamed ``passes`` times, against scikit-learn ``SGDClassifier()`` on the same batches:
  ``predict`` then ``partial_fit`` (the same progressive validation), and ``partial_fit`` alone
  (issue 22's 73k ex/CPU-s peer). Not a real 784-d image stream (none is offline): upsampled
  8x8 digits, ~70% non-zero.
* ``memoir``: ``ExtremeClassifier`` (MEMOIR, ``mips="exact"``) ``predict_one`` on dense rows,
  3,700 classes x 256 features (synthetic: Gaussian class centres plus unit noise, every class
  seen, 8,000 examples learned; ``--quick``: 1,000 classes), the default averaged prediction and
  the last iterate (``averaging=False``), against numpy ``argmax(W @ x)`` with W the model's own
  (averaged) float64 weights and x the same row with the bias feature appended.
* ``floor``: an empty numba call from Python (no argument; one array; the six bundles of a BCFW step;
  the twelve arguments of ``predict_learn_one``'s kernel, through the dispatcher and through the
  compiled entry point directly).
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.environ.get("STREAMSSVM_DATA", "/work/shared/datasets")


def _setup_path(code):
    """Import streamssvm from ``code`` (a checkout), or from this one."""
    sys.path.insert(0, code or ROOT)
    if HERE not in sys.path:
        sys.path.insert(1, HERE)


class Clock:
    def __enter__(self):
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.w0, time.process_time() - self.c0
        return False


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def paired(fns, reps):
    """Run each ``fn() -> n examples`` ``reps`` times, alternating; per name the medians of CPU
    and wall seconds per example (and every rep)."""
    got = {k: {"cpu": [], "wall": []} for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            with Clock() as c:
                n = fn()
            got[k]["cpu"].append(c.cpu / n)
            got[k]["wall"].append(c.wall / n)
    return {k: {"cpu_us": 1e6 * median(v["cpu"]), "wall_us": 1e6 * median(v["wall"]),
                "cpu_us_reps": [1e6 * t for t in v["cpu"]]} for k, v in got.items()}


# ----------------------------------------------------------------------------- data
def ocr16(n):
    import numpy as np
    d = np.load(os.path.join(DATA, "ocr_letters.npz"))
    return d["pixels"][:n].astype(np.float64), d["labels"][:n].astype(np.int64)


def digits(passes):
    import numpy as np
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    return np.tile(X, (passes, 1)).astype(np.float64), np.tile(y, passes).astype(np.int64)


def digits784(passes):
    """The digits bilinearly upsampled to 28 x 28 (784-d, ~half non-zero): real images at the
    width of issue 22's 784-d rows (no 784-d image set is available offline)."""
    import numpy as np
    from scipy.ndimage import zoom
    X, y = digits(1)
    Z = np.stack([zoom(r.reshape(8, 8), 3.5, order=1).ravel() for r in X])
    Z[Z < 0.5] = 0.0
    return np.tile(Z, (passes, 1)), np.tile(y, passes)


def vw_lines(X, y):
    return [f"{int(c) + 1} | " + " ".join(f"{j}:{v:g}" for j, v in enumerate(row) if v) for row, c in zip(X, y)]


# ----------------------------------------------------------------------------- runners
def ours_rows(X, y, both=True):
    import streamssvm as ss

    def run():
        m = ss.MulticlassSSVM()
        for x, c in zip(X, y):
            m.predict_one(x)
            m.learn_one(x, c)
        return len(y)

    def run_one_call():
        m = ss.MulticlassSSVM()
        for x, c in zip(X, y):
            m.predict_learn_one(x, c)
        return len(y)
    return {"streamssvm predict_one + learn_one": run, "streamssvm predict_learn_one": run_one_call} if both \
        else {"streamssvm predict_one + learn_one": run}


def vw_runner(lines, k):
    from vowpalwabbit import pyvw

    def run():
        vw = pyvw.Workspace(f"--oaa {k} --quiet")
        for line in lines:
            ex = vw.parse(line)
            vw.learn(ex)
            ex.get_multiclass_prediction()
            vw.finish_example(ex)
        vw.finish()
        return len(lines)
    return run


def river_runner(make, data):
    def run():
        m = make()
        for x, c in data:
            m.predict_one(x)
            m.learn_one(x, c)
        return len(data)
    return run


def warm():
    """Compile (or load) the kernels the rows use before any clock."""
    import numpy as np
    import streamssvm as ss
    m = ss.MulticlassSSVM()
    for i in range(5):
        m.predict_one(np.array([1.0, i]))
        m.learn_one(np.array([1.0, i]), i % 2)
    m.predict_learn_many(np.ones((4, 2)), [0, 1, 0, 1])
    d = ss.MulticlassSSVM()
    for i in range(5):
        d.predict_one({"a": 1.0})
        d.learn_one({"a": 1.0, i: 2.0}, i % 2)


def row(name, data, res, ours, peer):
    o, p = res[ours], res[peer]
    return {"row": name, "data": data, "ours": ours, "peer": peer, "ours_cpu_us": o["cpu_us"],
            "ours_wall_us": o["wall_us"], "peer_cpu_us": p["cpu_us"], "peer_wall_us": p["wall_us"],
            "speed_ratio_cpu": p["cpu_us"] / o["cpu_us"], "speed_ratio_wall": p["wall_us"] / o["wall_us"]}


def bench_numpy(n, passes, reps, log):
    out = []
    X, y = ocr16(n)
    fns = {**ours_rows(X, y), "VW --oaa 26": vw_runner(vw_lines(X, y), 26)}
    res = paired(fns, reps)
    log(f"numpy16: {res}")
    for k in ("streamssvm predict_one + learn_one", "streamssvm predict_learn_one"):
        out.append(row("learn_one + predict_one, numpy row, 16-d, 26 classes", f"OCR letters, {len(y)} rows",
                       res, k, "VW --oaa 26"))
    X, y = digits(passes)
    fns = {**ours_rows(X, y), "VW --oaa 10": vw_runner(vw_lines(X, y), 10)}
    res = paired(fns, reps)
    log(f"digits64: {res}")
    for k in ("streamssvm predict_one + learn_one", "streamssvm predict_learn_one"):
        out.append(row("learn_one + predict_one, numpy row, 64-d, 10 classes",
                       f"scikit-learn digits x{passes}, {len(y)} rows", res, k, "VW --oaa 10"))
    X, y = digits784(1)
    fns = {**ours_rows(X, y), "VW --oaa 10": vw_runner(vw_lines(X, y), 10)}
    res = paired(fns, reps)
    log(f"digits784: {res}")
    for k in ("streamssvm predict_one + learn_one", "streamssvm predict_learn_one"):
        out.append(row("learn_one + predict_one, numpy row, 784-d, 10 classes",
                       f"digits upsampled to 28x28, {len(y)} rows", res, k, "VW --oaa 10"))
    return out


def bench_dicts(passes, reps, log):
    import streamssvm as ss
    from river import datasets, linear_model
    out = []
    phish = list(datasets.Phishing())
    fns = {"streamssvm predict_one + learn_one": river_runner(ss.MulticlassSSVM, phish),
           "streamssvm predict_learn_one": lambda: _plo(phish),
           "river LogisticRegression": river_runner(linear_model.LogisticRegression, phish)}
    res = paired(fns, reps)
    log(f"phishing: {res}")
    for k in ("streamssvm predict_one + learn_one", "streamssvm predict_learn_one"):
        out.append(row("learn_one + predict_one, dict, binary (9 features)", f"river Phishing, {len(phish)} rows",
                       res, k, "river LogisticRegression"))
    X, y = digits(passes)
    as_int = [({j: float(v) for j, v in enumerate(r) if v}, int(c)) for r, c in zip(X, y)]
    as_str = [({str(j): float(v) for j, v in enumerate(r) if v}, int(c)) for r, c in zip(X, y)]
    fns = {"streamssvm, int keys": river_runner(ss.MulticlassSSVM, as_int),
           "streamssvm, str keys": river_runner(ss.MulticlassSSVM, as_str),
           "river SoftmaxRegression": river_runner(linear_model.SoftmaxRegression, as_str)}
    res = paired(fns, reps)
    log(f"dictkeys: {res}")
    for k in ("streamssvm, int keys", "streamssvm, str keys"):
        out.append(row("learn_one + predict_one, dict, 64-d, 10 classes", f"scikit-learn digits x{passes}, "
                       f"{len(y)} rows", res, k, "river SoftmaxRegression"))
    X, y = digits784(1)
    as_int = [({j: float(v) for j, v in enumerate(r) if v}, int(c)) for r, c in zip(X, y)]
    as_str = [({str(j): float(v) for j, v in enumerate(r) if v}, int(c)) for r, c in zip(X, y)]
    fns = {"streamssvm, int keys": river_runner(ss.MulticlassSSVM, as_int),
           "streamssvm, str keys": river_runner(ss.MulticlassSSVM, as_str),
           "river SoftmaxRegression": river_runner(linear_model.SoftmaxRegression, as_str)}
    res = paired(fns, reps)
    log(f"dictkeys784: {res}")
    for k in ("streamssvm, int keys", "streamssvm, str keys"):
        out.append(row("learn_one + predict_one, dict, 784-d, 10 classes", f"digits upsampled to 28x28, "
                       f"{len(y)} rows", res, k, "river SoftmaxRegression"))
    return out


def _plo(data):
    import streamssvm as ss
    m = ss.MulticlassSSVM()
    for x, c in data:
        m.predict_learn_one(x, c)
    return len(data)


def _children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cli_run(code, path, workdir):
    ck = tempfile.mkdtemp(dir=workdir)
    env = dict(os.environ, PYTHONPATH=code or ROOT)
    c0, w0 = _children_cpu(), time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "streamssvm", "run", "--source", f"file://{path}", "--task", "multiclass",
                        "--no-progress", "--checkpoint-dir", ck, "--json"], env=env, check=True, capture_output=True,
                       cwd=workdir)
    cpu, wall = _children_cpu() - c0, time.perf_counter() - w0
    # the run's own CPU (the summary's cpu_seconds: Engine.run, its final snapshot and checkpoint;
    # cpu_seconds_stream: until the stream stopped) where the code reports it: the process's
    # start-up (imports, ~1.5 CPU s of kernel loading) stays out, whose noise dominated a
    # difference of two processes (9.8-22.7 us per record for the same code)
    return cpu, wall, json.loads(p.stdout)


def bench_file(code, n, reps, log):
    """Rows ``file``: the whole run and its stream, per record, against the library's
    ``predict_learn_many`` (issue 22's peer) and ``predict_learn_each`` (the same progressive
    validation as ``run``) on the same rows, paired."""
    import streamssvm as ss
    X, y = ocr16(n)
    work = tempfile.mkdtemp(prefix="hotpath-")
    big, one = os.path.join(work, "letters.jsonl"), os.path.join(work, "one.jsonl")
    with open(big, "w") as f:
        for r, c in zip(X, y):
            f.write(json.dumps({"x": r.tolist(), "y": int(c)}) + "\n")
    with open(one, "w") as f:
        f.write(json.dumps({"x": X[0].tolist(), "y": int(y[0])}) + "\n")
    _cli_run(code, one, work)   # the kernel cache loaded once before the clock
    keys = ("run whole", "run stream", "lib many", "lib each")
    cpu, wall = {k: [] for k in keys}, {k: [] for k in keys}
    rows, labels = list(X), [int(c) for c in y]   # what the reader hands the model: arrays, int labels
    for _ in range(reps):
        cn, wn, s = _cli_run(code, big, work)
        if s.get("cpu_seconds") is None:   # code that does not report its own CPU: a difference of processes
            c1, w1, _ = _cli_run(code, one, work)
            cpu["run whole"].append((cn - c1) / (n - 1))
            wall["run whole"].append((wn - w1) / (n - 1))
        else:
            cpu["run whole"].append(s["cpu_seconds"] / n)
            wall["run whole"].append(s["seconds"] / n)
        if s.get("cpu_seconds_stream") is not None:
            cpu["run stream"].append(s["cpu_seconds_stream"] / n)
            wall["run stream"].append(s["seconds_stream"] / n)
        with Clock() as c:
            m = ss.MulticlassSSVM()
            for a in range(0, n, 256):
                m.predict_learn_many(X[a:a + 256], y[a:a + 256])
        cpu["lib many"].append(c.cpu / n)
        wall["lib many"].append(c.wall / n)
        if hasattr(ss.MulticlassSSVM, "predict_learn_each"):
            with Clock() as c:
                m = ss.MulticlassSSVM()
                for a in range(0, n, 256):
                    m.predict_learn_each(rows[a:a + 256], labels[a:a + 256])
            cpu["lib each"].append(c.cpu / n)
            wall["lib each"].append(c.wall / n)
    names = {"run whole": "streamssvm run file://, whole run", "run stream": "streamssvm run file://, stream",
             "lib many": "library predict_learn_many (256)", "lib each": "library predict_learn_each (256)"}
    res = {names[k]: {"cpu_us": 1e6 * median(cpu[k]), "wall_us": 1e6 * median(wall[k])} for k in keys if cpu[k]}
    log(f"file: {res}")
    data = f"OCR letters as JSONL (16 numbers per record), {n} records"
    whole = "`run file://` whole run (stream, checkpoints, final certificate)"
    stream = "`run file://` stream only (records, in-stream checkpoints; no final certificate)"
    out = []
    for label, ours in ((whole, "run whole"), (stream, "run stream")):
        if names[ours] not in res:
            continue
        out.append(row(label + " vs the library's predict_learn_many", data, res, names[ours], names["lib many"]))
        if names["lib each"] in res:
            out.append(row(label + " vs the library's predict_learn_each", data, res, names[ours], names["lib each"]))
    return out


def bench_batch(passes, reps, log, size=256):
    import numpy as np
    import streamssvm as ss
    from sklearn.linear_model import SGDClassifier
    X, y = digits784(passes)
    classes = np.unique(y)
    spans = [(a, min(a + size, len(y))) for a in range(0, len(y), size)]

    def ours():
        m = ss.MulticlassSSVM()
        for a, b in spans:
            m.predict_learn_many(X[a:b], y[a:b])
        return len(y)

    def sk(predict):
        def run():
            m = SGDClassifier()
            for a, b in spans:
                if predict and a:
                    m.predict(X[a:b])
                m.partial_fit(X[a:b], y[a:b], classes=classes)
            return len(y)
        return run
    ours()   # kernels and the first block store growth compiled / warmed before the clock
    fns = {"streamssvm predict_learn_many": ours, "SGDClassifier predict + partial_fit": sk(True),
           "SGDClassifier partial_fit": sk(False)}
    res = paired(fns, reps)
    log(f"batch: {res}")
    name = f"predict_learn_many, batches of {size}, 784-d images, 10 classes"
    data = f"digits upsampled to 28x28 x{passes}, {len(y)} rows"
    return [row(name, data, res, "streamssvm predict_learn_many", p)
            for p in ("SGDClassifier predict + partial_fit", "SGDClassifier partial_fit")]


def bench_memoir(n_classes, reps, log, dim=256, n_learn=8000, n_query=400):
    import numpy as np
    import streamssvm as ss
    rng = np.random.default_rng(0)
    C = rng.normal(size=(n_classes, dim))
    ys = np.concatenate([np.arange(n_classes), rng.integers(0, n_classes, size=max(n_learn - n_classes, 0))])
    X = C[ys] + rng.normal(size=(len(ys), dim))
    Q = C[rng.integers(0, n_classes, size=n_query)] + rng.normal(size=(n_query, dim))
    Qb = np.hstack([Q, np.ones((n_query, 1))])    # the estimator's bias feature
    out = []
    for averaging in (True, False):
        m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact", averaging=averaging, seed=0))
        for x, y in zip(X, ys):
            m.learn_one(x, int(y))
        W = np.ascontiguousarray(m._learner.averaged_weights()[:, :dim + 1])

        def ours():
            for q in Q:
                m.predict_one(q)
            return n_query

        def peer():
            for q in Qb:
                int(np.argmax(W @ q))
            return n_query
        ours(), peer()
        same = float(np.mean([m.predict_one(q) == int(np.argmax(W @ qb)) for q, qb in zip(Q[:100], Qb[:100])]))
        res = paired({"ours": ours, "numpy": peer}, reps)
        kind = "averaged (default)" if averaging else "last iterate"
        log(f"memoir {kind}: {res}; agreement with numpy {same}")
        out.append(row(f"ExtremeClassifier.predict_one (MEMOIR exact, {kind}), {n_classes} classes, {dim}-d dense",
                       f"synthetic, {len(ys)} learned, {n_query} queries", {
                           "MEMOIR predict_one": res["ours"], "numpy argmax(W @ x)": res["numpy"]},
                       "MEMOIR predict_one", "numpy argmax(W @ x)"))
    return out


def bench_floor(log):
    """What a call from Python into numba costs before any work: an empty jitted function called
    with no argument, one array, the six bundles of a BCFW step, and the twelve arguments of the
    record path's kernel (``predict_learn_examples``, as ``predict_learn_one`` passes them, captured
    from a real call); the last also through the compiled entry point itself (no type dispatch:
    what is left is unboxing the arguments)."""
    import numba
    import numpy as np
    import timeit
    import streamssvm as ss

    @numba.njit(nogil=True, no_cfunc_wrapper=True)
    def empty0():
        return 0

    @numba.njit(nogil=True, no_cfunc_wrapper=True)
    def empty1(a):
        return 0

    @numba.njit(nogil=True, no_cfunc_wrapper=True)
    def empty6(a, b, c, d, e, f):
        return 0

    @numba.njit(nogil=True, no_cfunc_wrapper=True)
    def empty12(a, b, c, d, e, f, g, h, i, j, k, l):
        return 0

    def us(fn):
        return min(timeit.repeat(fn, number=20000, repeat=5)) / 20000 * 1e6
    a = np.zeros(3)
    empty0()
    empty1(a)
    m = ss.MulticlassSSVM()
    for i in range(30):
        m.learn_one(np.array([1.0, i % 3]), i % 3)
    tup = m._learner._bundles(1, 1.0) if hasattr(m._learner, "_bundles") else None
    out = {"empty numba call, no argument": us(lambda: empty0()),
           "empty numba call, 1 array": us(lambda: empty1(a))}
    if tup is not None:
        empty6(*tup)
        out["empty numba call, the 6 BCFW bundles"] = us(lambda: empty6(*tup))
    try:   # the record kernel's arguments, captured from a predict_learn_one call
        from streamssvm.learners import bcfw as lb
        real, got = lb.MB.predict_learn_examples, []

        def capture(*args):
            got.append(args)
            return real(*args)
        lb.MB.predict_learn_examples = capture
        try:
            m.predict_learn_one(np.array([1.0, 2.0]), 1)
        finally:
            lb.MB.predict_learn_examples = real
    except (ImportError, AttributeError):
        got = []
    if got and len(got[0]) == 12:
        args = got[0]
        empty12(*args)
        entry = next(iter(empty12.overloads.values())).entry_point
        out["empty numba call, the 12 arguments of predict_learn_one's kernel"] = us(lambda: empty12(*args))
        out["the same, its compiled entry point called directly (unboxing only)"] = us(lambda: entry(*args))
    log(f"floor: {out}")
    return out


def markdown(info, rows, floor, before=None):
    L = ["# The record path (issue 22)", "",
         f"`python -m bench --suite hotpath{' --quick' if info['quick'] else ''}` — {info['started']} UTC, streamssvm "
         f"from `{info['code']}` (commit `{info['commit']}`), load average {info['load']} at the start. Paired "
         f"repetitions ({info['reps']}), medians; CPU = process time; BLAS on one thread. Speed ratio = peer time / our "
         "time (> 1: we are faster).", "",
         "| row | data | ours | µs/example CPU (wall) | peer | µs/example CPU (wall) | speed ratio CPU (wall) |"
         + (" before: ours µs CPU, ratio CPU |" if before else ""),
         "|---|---|---|---|---|---|---|" + ("---|" if before else "")]
    old = {(b["row"], b["ours"], b["peer"]): b for b in (before or {}).get("rows", [])}
    for r in rows:
        b = old.get((r["row"], r["ours"], r["peer"]))
        L.append(f"| {r['row']} | {r['data']} | {r['ours']} | {r['ours_cpu_us']:.1f} ({r['ours_wall_us']:.1f}) | "
                 f"{r['peer']} | {r['peer_cpu_us']:.1f} ({r['peer_wall_us']:.1f}) | {r['speed_ratio_cpu']:.2f} "
                 f"({r['speed_ratio_wall']:.2f}) |"
                 + ((f" {b['ours_cpu_us']:.1f}, {b['speed_ratio_cpu']:.2f} |" if b else " — |") if before else ""))
    if before:
        bi = before["machine"]
        L += ["", f"Before: the same script on `{bi['code']}` (commit `{bi['commit']}`), {bi['started']} UTC, load "
              f"average {bi['load']} (its own peers; ratios compare within each run)."]
    L += ["", "Floor: " + "; ".join(f"{k}: {v:.2f} µs" for k, v in floor.items()) + "."]
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run, ~1 minute)")
    ap.add_argument("--code", default=None, help="import streamssvm from this checkout (default: this one)")
    ap.add_argument("--out", default=None, help="results stem (default bench/results/hotpath; --quick: a temp file)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", nargs="+", default=None, help="numpy dicts batch file memoir")
    ap.add_argument("--before", default=None, help="a hotpath .json of another checkout: its numbers as a column")
    a = ap.parse_args(argv)
    _setup_path(a.code)
    import streamssvm
    code = os.path.dirname(os.path.dirname(os.path.abspath(streamssvm.__file__)))

    def log(m):
        print(f"[{time.strftime('%H:%M:%S')}] {m}", file=sys.stderr, flush=True)
    n, passes, nfile = (3000, 1, 3000) if a.quick else (20000, 3, 20000)
    warm()
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=code, capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    info = {"started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "code": code, "commit": commit,
            "load": " ".join(f"{v:.2f}" for v in os.getloadavg()), "reps": a.reps, "quick": a.quick}
    rows = []
    if not a.only or "numpy" in a.only:
        rows += bench_numpy(n, passes, a.reps, log)
    if not a.only or "dicts" in a.only:
        rows += bench_dicts(passes, a.reps, log)
    if not a.only or "batch" in a.only:
        rows += bench_batch(passes, a.reps, log)
    if not a.only or "file" in a.only:
        rows += bench_file(code, nfile, a.reps, log)
    if not a.only or "memoir" in a.only:
        rows += bench_memoir(1000 if a.quick else 3700, a.reps, log)
    floor = bench_floor(log)
    info["load_end"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    out = a.out or (os.path.join(tempfile.gettempdir(), "hotpath-quick") if a.quick
                    else os.path.join(HERE, "results", "hotpath"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    before = None
    if a.before:
        with open(a.before) as f:
            before = json.load(f)
    md = markdown(info, rows, floor, before)
    with open(out + ".json", "w") as f:
        json.dump({"machine": info, "rows": rows, "floor_us": floor, "before": before}, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
