"""Numba kernels (no Python objects inside), called through thin wrappers.

The kernels are compiled with ``cache=True``, and this package decides where that cache lives:
**in a user cache folder, never next to the sources** (numba's default, ``__pycache__`` beside
each module, would write into an installed package — a folder that ``pip uninstall`` leaves
behind and that then shadows a later editable install — or into a source checkout).

The folder is keyed by the digest of all kernel sources (and by the package's folder):
``<root>/kernels-<digest>-<folder hash>``. Numba keys each cached function on the timestamp of
its *own* source file only, so a kernel that inlines functions of another module (``bcfw`` calls
``structops``) would otherwise keep stale machine code after only that other module changed (a
``git pull``, an edit, an upgrade) and silently compute with the old code; a new digest is a new
folder, so stale code is never loaded. ``<root>`` is ``$STREAMSSVM_CACHE``, else
``$NUMBA_CACHE_DIR/streamssvm``, else ``$XDG_CACHE_HOME/streamssvm`` (``~/.cache/streamssvm``),
else (none writable) a folder in the system's temporary directory. Removing the root is always
safe: the kernels compile again on first use.

>>> import os
>>> path = cache_dir()
>>> os.path.basename(path).startswith("kernels-" + sources_digest()[:16])
True
>>> path.startswith(_HERE)   # never inside the package
False
"""
import glob
import hashlib
import os
import tempfile

from numba.core import caching as _caching

_HERE = os.path.dirname(os.path.abspath(__file__))


def sources_digest(folder=_HERE):
    """SHA-256 of the kernel sources (file names and contents, in name order)."""
    h = hashlib.sha256()
    for f in sorted(glob.glob(os.path.join(folder, "*.py"))):
        h.update(os.path.basename(f).encode())
        with open(f, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def cache_roots():
    """The candidate roots of the kernel cache, in order of preference (see the module doc)."""
    roots = []
    if os.environ.get("STREAMSSVM_CACHE"):
        roots.append(os.environ["STREAMSSVM_CACHE"])
    if os.environ.get("NUMBA_CACHE_DIR"):
        roots.append(os.path.join(os.environ["NUMBA_CACHE_DIR"], "streamssvm"))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    roots.append(os.path.join(base, "streamssvm"))
    roots.append(os.path.join(tempfile.gettempdir(), f"streamssvm-{os.getuid() if hasattr(os, 'getuid') else 0}"))
    return roots


def cache_dir(folder=_HERE, root=None):
    """The folder of the compiled kernels of the sources in ``folder`` under ``root`` (default:
    the first root of :func:`cache_roots`)."""
    root = cache_roots()[0] if root is None else root
    where = hashlib.sha1(os.path.abspath(folder).encode()).hexdigest()[:8]
    return os.path.join(root, f"kernels-{sources_digest(folder)[:16]}-{where}")


def _writable_cache_dir():
    for root in cache_roots():
        path = cache_dir(root=root)
        try:
            os.makedirs(path, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
            return path
        except OSError:
            continue
    return None


class KernelCacheLocator(_caching._SourceFileBackedLocatorMixin, _caching._CacheLocator):
    """Numba cache locator for the modules of this package: every kernel in one writable folder
    keyed by the sources' digest (:func:`cache_dir`); other code is left to numba's locators."""

    _path = None

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno

    def get_cache_path(self):
        return KernelCacheLocator._path

    @classmethod
    def from_function(cls, py_func, py_file):
        if os.path.dirname(os.path.abspath(py_file)) != _HERE:
            return None
        if cls._path is None:
            cls._path = _writable_cache_dir() or ""
        if not cls._path:   # nothing writable: numba's own locators decide (or it does not cache)
            return None
        return super().from_function(py_func, py_file)


if KernelCacheLocator not in _caching.CacheImpl._locator_classes:
    _caching.CacheImpl._locator_classes.insert(0, KernelCacheLocator)
