"""Kernel warm-up: whether numba's cache of the kernels is cold, the compile notice, and a throwaway
model that compiles every kernel a run will use before any clock starts."""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time


def _kernel_cache_dirs():
    """The folder numba will cache the kernels in (:func:`streamssvm.kernel_cache.writable_cache_dir`)."""
    from ..kernel_cache import writable_cache_dir
    path = writable_cache_dir()
    return [] if path is None else [path]


def _kernel_cache_cold():
    """True when the kernel cache holds no compiled function (a fresh install, an upgrade, a new
    cache root). Light: no numba import, so the CLI can say so at once."""
    from ..kernel_cache import is_cold
    return is_cold()


_COMPILE_NOTICE = "compiling kernels (first run only; a minute or two)..."


_early_notice = {"t0": None}   # set when main() said _COMPILE_NOTICE before the heavy imports


def _say_compiling_early(stream=None):
    """Print the compile notice now, before numba and the kernel modules are imported (that
    import alone takes seconds on a loaded machine), when the kernel cache is cold; the later
    :func:`warm_kernels` then only says how long it took."""
    if _kernel_cache_cold():
        from ..kernel_cache import mark_announced
        mark_announced()   # the library's own notice is not repeated (its progress lines come)
        print(_COMPILE_NOTICE, file=stream or sys.stderr, flush=True)
        _early_notice["t0"] = time.perf_counter()


def warm_kernels(work, notice_after=1.0, stream=None):
    """Run ``work()`` (a throwaway model learning a tiny example) so that the numba kernels are
    compiled before any clock starts. Says ``compiling kernels (first run only)...`` at once when
    the cache is cold, or after ``notice_after`` seconds if the work is still running, and how
    long it took."""
    stream = stream or sys.stderr
    said = threading.Event()
    lock = threading.Lock()
    t_early, _early_notice["t0"] = _early_notice["t0"], None
    if t_early is not None:   # main() said it already, before the imports
        said.set()

    cold = _kernel_cache_cold()
    if cold:
        from ..kernel_cache import mark_announced
        mark_announced()

    def say():
        with lock:
            if not said.is_set():
                said.set()
                print(_COMPILE_NOTICE if cold else "loading compiled kernels...", file=stream, flush=True)

    t0 = time.perf_counter() if t_early is None else t_early
    if cold:
        say()
    timer = threading.Timer(notice_after, say)
    timer.daemon = True
    timer.start()
    try:
        work()
    finally:
        timer.cancel()
        with lock:
            said_it = said.is_set()
            said.set()
    if said_it:
        print(f"kernels ready ({time.perf_counter() - t0:.1f}s; not counted in any rate)", file=stream, flush=True)


def warm_model(make_model, task, source_uri=None, fmt=None):
    """A throwaway model learns one or two records (the first records of a file source, else
    synthetic ones of the task), certifies and predicts: every kernel the run will use compiles."""
    from ..features import FeatureIndex
    m = make_model()
    recs = []
    if fmt is not None:
        from streamssvm.connectors.base import DeadLetterSink
        from streamssvm.connectors.files import open_source
        src = open_source(source_uri, dead_letter=DeadLetterSink(), format=fmt)
        src.dead_letter.warn = False
        for r in src:
            try:
                recs.append(m.coerce_input(r.x, r.y))
            except (ValueError, TypeError, KeyError):
                continue
            if len(recs) >= 2:
                break
        src.close()
    if not recs:   # nothing to read ahead (Kafka): synthetic records, small and large dicts
        big = {f"f{j}": 1.0 + j for j in range(FeatureIndex.BULK_MIN + 4)}   # the bulk path of dicts
        recs = {"sequence": [([{"a": 1.0}, big], ["p", "q"]), ([big, {"b": 1.0}], ["q", "p"])],
                "multilabel": [({"a": 1.0}, {"p": True}), (big, {"q": True}), (big, {"p": True})]}.get(
                    task, [({"a": 1.0}, "p"), (big, "q"), (big, "p")])
    for x, y in recs:
        try:
            m.predict_one(x)
            m.learn_one(x, y)
        except (ValueError, TypeError, KeyError):
            pass
    if m.learns_in_runs:   # the engine's micro-batch kernel (streamssvm._kernels.microbatch)
        m.predict_learn_each([x for x, _ in recs], [y for _, y in recs])
    m.weights_finite(full=False)   # the engine's check after every learned record
    m.weights_finite(full=True)
    with contextlib.suppress(ValueError, TypeError, RuntimeError):
        m.certificate()
        m.refine(0.5)
