"""Where the compiled numba kernels are cached, computed without importing numba (the CLI asks
whether the cache is cold before the heavy imports). :mod:`streamssvm._kernels` installs the numba
cache locator that uses it; its docstring says why the cache lives outside the package.

>>> import os
>>> path = cache_dir()
>>> os.path.basename(path).startswith("kernels-" + sources_digest()[:16])
True
>>> path.startswith(KERNELS)   # never inside the package
False
"""
import glob
import hashlib
import os
import tempfile

#: the folder of the kernel sources
KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_kernels")


def sources_digest(folder=KERNELS):
    """SHA-256 of the kernel sources (file names and contents, in name order)."""
    h = hashlib.sha256()
    for f in sorted(glob.glob(os.path.join(folder, "*.py"))):
        h.update(os.path.basename(f).encode())
        with open(f, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def cache_roots():
    """The candidate roots of the kernel cache, in order of preference: ``$STREAMSSVM_CACHE``,
    ``$NUMBA_CACHE_DIR/streamssvm``, ``$XDG_CACHE_HOME/streamssvm`` (``~/.cache/streamssvm``), a
    folder in the system's temporary directory."""
    roots = []
    if os.environ.get("STREAMSSVM_CACHE"):
        roots.append(os.environ["STREAMSSVM_CACHE"])
    if os.environ.get("NUMBA_CACHE_DIR"):
        roots.append(os.path.join(os.environ["NUMBA_CACHE_DIR"], "streamssvm"))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    roots.append(os.path.join(base, "streamssvm"))
    uid = os.getuid() if hasattr(os, "getuid") else 0
    roots.append(os.path.join(tempfile.gettempdir(), f"streamssvm-{uid}"))
    return roots


def cache_dir(folder=KERNELS, root=None):
    """The folder of the compiled kernels of the sources in ``folder`` under ``root`` (default:
    the first of :func:`cache_roots`): keyed by the sources' digest and by the folder, and apart
    with ``STREAMSSVM_COMPILE_OVERHEAD=0`` (numba's own calling convention between kernels, which
    must not be linked with ours: ``_kernels/bundle_args.py``)."""
    root = cache_roots()[0] if root is None else root
    where = hashlib.sha1(os.path.abspath(folder).encode()).hexdigest()[:8]
    stock = "-stock" if os.environ.get("STREAMSSVM_COMPILE_OVERHEAD", "1") == "0" else ""
    return os.path.join(root, f"kernels-{sources_digest(folder)[:16]}-{where}{stock}")


def writable_cache_dir():
    """The cache folder of the first writable root (created), or None when none is writable."""
    for root in cache_roots():
        path = cache_dir(root=root)
        try:
            os.makedirs(path, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
            return path
        except OSError:
            continue
    return None


def is_cold():
    """True when the kernel cache holds no compiled function (a fresh install, an upgrade, an
    edited kernel, or a new cache root)."""
    path = writable_cache_dir()
    return path is None or not glob.glob(os.path.join(path, "*.nbi"))


# ----------------------------------------------------------------------------- compile notices
#: the logger of the compile notice and its progress lines; silence them with
#: ``logging.getLogger("streamssvm.kernels").setLevel(logging.ERROR)``
LOGGER = "streamssvm.kernels"
#: seconds between two progress lines while kernels compile
PROGRESS_EVERY = 15.0

_notice = {"announced": False, "depth": 0, "compiled": 0, "t0": None, "thread": None, "current": ""}


def mark_announced(announced=True):
    """The caller (the CLI) has told the user that kernels compile: the library's own notice
    is not repeated in this process (its progress lines still come). ``False`` gives the notice
    back to the library (a warm-up that held it back and saw nothing compile)."""
    _notice["announced"] = announced


def announced():
    """Whether the compile notice was given (or taken over by a caller) in this process."""
    return _notice["announced"]


def compiles_started():
    """How many kernel compilations of this package started in this process since the notice
    was installed (cache misses: numba's compile events never fire on a cache load): those that
    ended and those still going."""
    return _notice["compiled"] + _notice["depth"]


def _progress_loop():
    import logging
    import time
    log = logging.getLogger(LOGGER)
    idle = 0.0
    while idle < 60.0:
        time.sleep(PROGRESS_EVERY)
        if _notice["depth"] > 0:
            idle = 0.0
            log.warning("still compiling kernels: %d compiled in %.0f s (now %s)...", _notice["compiled"],
                        time.perf_counter() - _notice["t0"], _notice["current"])
        else:
            idle += PROGRESS_EVERY
    _notice["thread"] = None


def _on_compile_start(name):
    import logging
    import threading
    import time
    if _notice["t0"] is None:
        _notice["t0"] = time.perf_counter()
    _notice["depth"] += 1
    _notice["current"] = name
    if not _notice["announced"]:
        _notice["announced"] = True
        where = writable_cache_dir() or "nowhere (no writable cache folder)"
        logging.getLogger(LOGGER).warning(
            "streamssvm: compiling its numba kernels (%s, ...) into %s: once after an install, an upgrade or "
            "from a new folder, a minute or two; later processes load them from the cache. (Silence: "
            "logging.getLogger(%r).setLevel(logging.ERROR))", name, where, LOGGER)
    if _notice["thread"] is None:
        t = threading.Thread(target=_progress_loop, name="streamssvm-compile-progress", daemon=True)
        _notice["thread"] = t
        t.start()


def _on_compile_end():
    _notice["depth"] = max(_notice["depth"] - 1, 0)
    _notice["compiled"] += 1


def install_compile_notice(folder=KERNELS):
    """Listen to numba's compile events (they fire on a cache miss only, never on a cache
    load): the first compilation of a kernel of ``folder`` in this process logs one notice
    (logger :data:`LOGGER`, level WARNING: shown by default, silenced with the logging module),
    then a progress line every :data:`PROGRESS_EVERY` seconds while compilation goes on.
    Called by :mod:`streamssvm._kernels` when it is imported (numba is imported then)."""
    from numba.core import event

    class _Listener(event.Listener):
        def _ours(self, ev):
            disp = (ev.data or {}).get("dispatcher")
            fn = getattr(disp, "py_func", None)
            path = getattr(getattr(fn, "__code__", None), "co_filename", "")
            return os.path.dirname(os.path.abspath(path)) == folder if path else False, fn

        def on_start(self, ev):
            ours, fn = self._ours(ev)
            if ours:
                _on_compile_start(f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}")

        def on_end(self, ev):
            if self._ours(ev)[0]:
                _on_compile_end()

    if not _notice.get("installed"):
        event.register("numba:compile", _Listener())
        _notice["installed"] = True
