"""Numba kernels (no Python objects inside), called through thin wrappers.

The kernels with a Python entry are compiled with ``cache=True`` (those only other kernels call are
not: their code is saved inside their callers', see ``linkonly.py``), and this package decides where
that cache lives:
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
"""
import os

from numba.core import caching as _caching

from . import bundle_args as _bundle_args
from . import compile_overhead as _compile_overhead
from . import linkonly as _linkonly
from ..kernel_cache import cache_dir, cache_roots, install_compile_notice, sources_digest, writable_cache_dir  # noqa: F401

_HERE = os.path.dirname(os.path.abspath(__file__))


class KernelCacheLocator(_caching._SourceFileBackedLocatorMixin, _caching._CacheLocator):
    """Numba cache locator for the modules of this package: every kernel in one writable folder
    keyed by the sources' digest (:func:`streamssvm.kernel_cache.cache_dir`); other code is left to
    numba's own locators."""

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
            cls._path = writable_cache_dir() or ""
        if not cls._path:   # nothing writable: numba's own locators decide (or it does not cache)
            return None
        return super().from_function(py_func, py_file)


if KernelCacheLocator not in _caching.CacheImpl._locator_classes:
    _caching.CacheImpl._locator_classes.insert(0, KernelCacheLocator)

install_compile_notice(_HERE)   # one notice per process when a kernel compiles (a cold cache)
_linkonly.install()   # kernels only linked into others get no machine code of their own (linkonly.py)
_compile_overhead.install()   # numba's compile overheads (compile_overhead.py)
_bundle_args.install()   # bundles passed whole between our kernels (bundle_args.py; keys the cache folder)
