"""Numba kernels (no Python objects inside), called through thin wrappers.

The kernels are compiled with ``cache=True``. Numba keys each cached function on the timestamp
of its *own* source file only, so a kernel that inlines functions of another module (``bcfw``
calls ``structops``) would keep stale machine code after only that other module changed (a
``git pull`` or an edit in a source checkout) and silently compute with the old code. On import
we therefore hash all kernel sources and drop the cache files of this package when the hash
differs from the one recorded next to them.
"""
import glob
import hashlib
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_STAMP = "kernels-source.sha256"


def sources_digest(folder=_HERE):
    """SHA-256 of the kernel sources (file names and contents, in name order)."""
    h = hashlib.sha256()
    for f in sorted(glob.glob(os.path.join(folder, "*.py"))):
        h.update(os.path.basename(f).encode())
        with open(f, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def refresh_cache(folder=_HERE):
    """Remove the numba cache files in ``folder/__pycache__`` when the sources changed since they
    were written; returns the number of files removed. Best effort: an unwritable folder (numba
    then caches elsewhere, keyed the same way) is left alone."""
    digest = sources_digest(folder)
    cache = os.path.join(folder, "__pycache__")
    stamp = os.path.join(cache, _STAMP)
    try:
        with open(stamp, encoding="ascii") as fh:
            if fh.read().strip() == digest:
                return 0
    except OSError:
        pass
    removed = 0
    for f in glob.glob(os.path.join(cache, "*.nbi")) + glob.glob(os.path.join(cache, "*.nbc")):
        try:
            os.remove(f)
            removed += 1
        except OSError:
            pass
    try:
        os.makedirs(cache, exist_ok=True)
        tmp = f"{stamp}.{os.getpid()}"
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write(digest)
        os.replace(tmp, stamp)
    except OSError:
        pass
    return removed


refresh_cache()
