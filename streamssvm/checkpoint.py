"""Versioned, atomic, checksummed persistence without pickle.

A *state* is a nested structure of dicts / lists whose leaves are JSON scalars (str, int,
float -- NaN and infinities included --, bool, None) or numpy arrays of a numeric or bool
dtype. It is stored as a JSON manifest (format, version, kind, user meta, the tree with arrays
replaced by references, and for each array its dtype, shape and the SHA-256 of its ``.npy``
bytes) plus one ``.npy`` file per array.

* ``save_state`` / ``load_state``: one file (a zip), for ``model.save("tagger.ssvm")``.
* ``CheckpointManager``: a directory of numbered checkpoint directories
  (``ckpt-00000001/``...), each written under a temporary name, fsynced and renamed
  atomically; the last ``keep`` are kept; ``latest()`` returns the newest *valid* one and skips
  (with a warning) a truncated, corrupt or foreign one.

>>> import numpy as np, tempfile, os
>>> d = tempfile.mkdtemp()
>>> p = save_state(os.path.join(d, "m.ssvm"), {"w": np.arange(3.0), "n": 3}, kind="demo")
>>> state, meta = load_state(p, kind="demo")
>>> state["w"].tolist(), state["n"]
([0.0, 1.0, 2.0], 3)
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
import tempfile
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np

FORMAT = "streamssvm-checkpoint"
VERSION = 1
_MANIFEST = "manifest.json"


class CheckpointError(Exception):
    """A checkpoint or model file is missing, foreign, too new, truncated or corrupt."""


# ----------------------------------------------------------------------------- tree <-> JSON
def _float_to_json(v):
    if math.isnan(v):
        return {"__float__": "nan"}
    if math.isinf(v):
        return {"__float__": "inf" if v > 0 else "-inf"}
    return v


def _split(state):
    """(json tree, {name: array})."""
    arrays: dict[str, np.ndarray] = {}

    def walk(v, path):
        if isinstance(v, np.ndarray):
            if v.dtype.kind not in "biufc":
                raise TypeError(f"cannot store the array at {path or '<root>'}: dtype {v.dtype} "
                                "(only numeric and bool arrays; never objects)")
            name = f"a{len(arrays):05d}"
            arrays[name] = v if v.flags.c_contiguous else v.copy()
            return {"__array__": name}
        if isinstance(v, dict):
            out = {}
            for k, u in v.items():
                if not isinstance(k, str):
                    raise TypeError(f"dict keys must be str, got {k!r} at {path or '<root>'}")
                if k.startswith("__") and k.endswith("__"):
                    raise TypeError(f"reserved key {k!r} at {path or '<root>'}")
                out[k] = walk(u, f"{path}/{k}")
            return out
        if isinstance(v, (list, tuple)):
            return [walk(u, f"{path}[{i}]") for i, u in enumerate(v)]
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            return _float_to_json(float(v))
        if v is None or isinstance(v, str):
            return v
        raise TypeError(f"cannot store a {type(v).__name__} at {path or '<root>'}")

    return walk(state, ""), arrays


def _join(tree, arrays):
    def walk(v):
        if isinstance(v, dict):
            if "__array__" in v and len(v) == 1:
                return arrays[v["__array__"]]
            if "__float__" in v and len(v) == 1:
                return float(v["__float__"])
            return {k: walk(u) for k, u in v.items()}
        if isinstance(v, list):
            return [walk(u) for u in v]
        return v

    return walk(tree)


def _npy_bytes(a):
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _manifest(tree, arrays, kind, meta, blobs):
    return {
        "format": FORMAT, "version": VERSION, "kind": kind, "meta": _split(meta or {})[0],
        "created": time.time(), "state": tree,
        "arrays": {name: {"dtype": str(a.dtype), "shape": list(a.shape),
                          "sha256": hashlib.sha256(blobs[name]).hexdigest()}
                   for name, a in arrays.items()},
    }


def _check_manifest(man, where, kind):
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise CheckpointError(f"{where}: not a streamssvm checkpoint (format {man.get('format') if isinstance(man, dict) else None!r})")
    v = man.get("version")
    if not isinstance(v, int) or v > VERSION:
        raise CheckpointError(f"{where}: format version {v!r} is newer than this streamssvm reads ({VERSION}); upgrade streamssvm")
    if kind is not None and man.get("kind") != kind:
        raise CheckpointError(f"{where}: holds a {man.get('kind')!r}, expected a {kind!r}")


def _decode_arrays(man, read, where):
    arrays = {}
    for name, info in man["arrays"].items():
        try:
            blob = read(name)
        except (KeyError, FileNotFoundError, OSError) as e:
            raise CheckpointError(f"{where}: array {name} is missing ({e})") from None
        if hashlib.sha256(blob).hexdigest() != info["sha256"]:
            raise CheckpointError(f"{where}: checksum mismatch for array {name} (corrupt or truncated)")
        try:
            a = np.load(io.BytesIO(blob), allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - any decoding failure is a corrupt file
            raise CheckpointError(f"{where}: array {name} cannot be read ({e})") from None
        if str(a.dtype) != info["dtype"] or list(a.shape) != info["shape"]:
            raise CheckpointError(f"{where}: array {name} has dtype/shape {a.dtype}/{a.shape}, "
                                  f"manifest says {info['dtype']}/{info['shape']}")
        arrays[name] = a
    return arrays


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- one file
def save_state(path, state, *, kind: str, meta: dict | None = None) -> Path:
    """Write ``state`` to one file atomically (temp file, fsync, rename, fsync dir)."""
    path = Path(path)
    tree, arrays = _split(state)
    blobs = {name: _npy_bytes(a) for name, a in arrays.items()}
    man = _manifest(tree, arrays, kind, meta, blobs)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as z:
                z.writestr(_MANIFEST, json.dumps(man, allow_nan=False))
                for name, blob in blobs.items():
                    z.writestr(f"arrays/{name}.npy", blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load_state(path, *, kind: str | None = None):
    """Read a file written by :func:`save_state`; returns ``(state, meta)``."""
    path = Path(path)
    where = str(path)
    if not path.exists():
        raise CheckpointError(f"{where}: no such file")
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise CheckpointError(f"{where}: not a streamssvm model file or truncated ({e})") from None
    with z:
        try:
            man = json.loads(z.read(_MANIFEST))
        except KeyError:
            raise CheckpointError(f"{where}: no manifest (not a streamssvm file)") from None
        except (zipfile.BadZipFile, ValueError, OSError) as e:
            raise CheckpointError(f"{where}: manifest unreadable ({e})") from None
        _check_manifest(man, where, kind)

        def read(name):
            try:
                return z.read(f"arrays/{name}.npy")
            except zipfile.BadZipFile as e:
                raise CheckpointError(f"{where}: array {name} is corrupt ({e})") from None

        arrays = _decode_arrays(man, read, where)
    return _join(man["state"], arrays), _join(man.get("meta", {}), {})


def read_manifest(path) -> dict:
    """The manifest of a checkpoint directory or model file (no arrays loaded)."""
    path = Path(path)
    try:
        if path.is_dir():
            return json.loads((path / _MANIFEST).read_text())
        with zipfile.ZipFile(path) as z:
            return json.loads(z.read(_MANIFEST))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: manifest unreadable ({e})") from None


# ----------------------------------------------------------------------------- directories
class CheckpointManager:
    """Numbered checkpoint directories under ``directory``; keeps the last ``keep``.

    >>> import tempfile, numpy as np
    >>> cm = CheckpointManager(tempfile.mkdtemp(), keep=2)
    >>> for i in range(3):
    ...     _ = cm.save({"i": i, "a": np.full(2, i)}, kind="demo")
    >>> [p.name for p in cm.list()]
    ['ckpt-00000002', 'ckpt-00000003']
    >>> state, meta, path = cm.latest()
    >>> state["i"]
    2
    """

    PREFIX = "ckpt-"

    def __init__(self, directory, keep: int = 3):
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        self.directory = Path(directory)
        self.keep = keep

    def list(self):
        if not self.directory.is_dir():
            return []
        out = []
        for p in self.directory.iterdir():
            if p.is_dir() and p.name.startswith(self.PREFIX) and p.name[len(self.PREFIX):].isdigit():
                out.append(p)
        return sorted(out, key=lambda p: int(p.name[len(self.PREFIX):]))

    def _next_seq(self):
        cks = self.list()
        return int(cks[-1].name[len(self.PREFIX):]) + 1 if cks else 1

    def save(self, state, *, kind: str, meta: dict | None = None) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        for p in self.directory.glob(".tmp-ckpt-*"):  # leftovers of a crash mid-write
            shutil.rmtree(p, ignore_errors=True)
        tree, arrays = _split(state)
        blobs = {name: _npy_bytes(a) for name, a in arrays.items()}
        seq = self._next_seq()
        man = _manifest(tree, arrays, kind, meta, blobs)
        man["seq"] = seq
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-ckpt-", dir=self.directory))
        try:
            (tmp / "arrays").mkdir()
            for name, blob in blobs.items():
                with open(tmp / "arrays" / f"{name}.npy", "wb") as f:
                    f.write(blob)
                    f.flush()
                    os.fsync(f.fileno())
            _fsync_dir(tmp / "arrays")
            with open(tmp / _MANIFEST, "w", encoding="utf-8") as f:
                f.write(json.dumps(man, allow_nan=False))
                f.flush()
                os.fsync(f.fileno())
            _fsync_dir(tmp)
            final = self.directory / f"{self.PREFIX}{seq:08d}"
            os.rename(tmp, final)
            _fsync_dir(self.directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for old in self.list()[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def load(self, path):
        """``(state, meta)`` of one checkpoint directory; CheckpointError when invalid."""
        path = Path(path)
        where = str(path)
        try:
            man = json.loads((path / _MANIFEST).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CheckpointError(f"{where}: no manifest") from None
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{where}: manifest unreadable or truncated ({e})") from None
        _check_manifest(man, where, None)
        arrays = _decode_arrays(man, lambda name: (path / "arrays" / f"{name}.npy").read_bytes(), where)
        return _join(man["state"], arrays), _join(man.get("meta", {}), {})

    def latest(self, kind: str | None = None):
        """``(state, meta, path)`` of the newest valid checkpoint, or None."""
        for path in reversed(self.list()):
            try:
                state, meta = self.load(path)
                if kind is not None:
                    man = read_manifest(path)
                    if man.get("kind") != kind:
                        raise CheckpointError(f"{path}: holds a {man.get('kind')!r}, expected {kind!r}")
                return state, meta, path
            except CheckpointError as e:
                warnings.warn(f"skipping invalid checkpoint: {e}", RuntimeWarning, stacklevel=2)
        return None
