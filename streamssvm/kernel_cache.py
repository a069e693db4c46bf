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
    the first of :func:`cache_roots`): keyed by the sources' digest and by the folder."""
    root = cache_roots()[0] if root is None else root
    where = hashlib.sha1(os.path.abspath(folder).encode()).hexdigest()[:8]
    return os.path.join(root, f"kernels-{sources_digest(folder)[:16]}-{where}")


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
