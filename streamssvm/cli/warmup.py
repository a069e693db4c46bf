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


_PARTLY_WARM_NOTICE = "compiling kernels this run has not used before (a minute or so)..."


def warm_kernels(work, notice_after=1.0, stream=None, poll=0.2):
    """Run ``work()`` (a throwaway model learning a tiny example) so that the numba kernels are
    compiled before any clock starts, and say what is happening: ``compiling kernels (first run
    only)...`` at once when the cache is cold; otherwise, after ``notice_after`` seconds if the work
    is still running, ``loading compiled kernels...`` or, when kernels the cache does not hold are
    compiling (a cache warmed by another kind of run: only some kernels are there), that they
    compile, said as soon as the first one starts; at the end, how long it took. The CLI speaks for
    the library here: its own compile notice (a log line) is held back while the work runs, and
    given back after it when nothing compiled (a later compile is then still announced)."""
    from ..kernel_cache import announced as kernel_cache_announced, compiles_started, mark_announced
    stream = stream or sys.stderr
    t_early, _early_notice["t0"] = _early_notice["t0"], None
    cold = _kernel_cache_cold()
    held_back, started = not kernel_cache_announced(), compiles_started()
    mark_announced()
    said = {"any": t_early is not None or cold, "compile": t_early is not None or cold}
    done = threading.Event()
    lock = threading.Lock()

    def say(text, compile_notice):
        with lock:
            if not done.is_set():
                print(text, file=stream, flush=True)
                said["any"] = True
                said["compile"] = said["compile"] or compile_notice

    def watch():
        t_start = time.perf_counter()
        while not done.wait(poll):
            if not said["compile"] and compiles_started() > started:
                say(_PARTLY_WARM_NOTICE, True)
            elif not said["any"] and time.perf_counter() - t_start >= notice_after:
                say("loading compiled kernels...", False)
            if said["compile"]:
                return

    t0 = time.perf_counter() if t_early is None else t_early
    if cold and t_early is None:
        print(_COMPILE_NOTICE, file=stream, flush=True)
    watcher = threading.Thread(target=watch, name="streamssvm-warmup-notice", daemon=True)
    watcher.start()
    try:
        work()
    finally:
        with lock:
            done.set()
        watcher.join()
        if held_back and compiles_started() == started:
            mark_announced(False)
    if said["any"]:
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
