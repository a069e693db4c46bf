"""Versioned, atomic, checksummed persistence without pickle.

A *state* is a nested structure of dicts / lists whose leaves are JSON scalars (str, int,
float -- NaN and infinities included --, bool, None) or numpy arrays of a numeric or bool
dtype. It is stored as a JSON manifest (format, version, kind, user meta, the tree with arrays
replaced by references, and for each array its dtype, shape and the SHA-256 of its ``.npy``
bytes) plus one ``.npy`` file per array. The manifest carries the SHA-256 of its own canonical
JSON (``manifest_sha256``, format version 2), so a bit flip that still parses is detected.

Reading never trusts the file: the manifest's checksum and structure are checked, array names
must be the generated ones (``a00000``...; never a path), each array member is read only up to
the size its declared dtype and shape imply, and any exception while reading becomes a
``CheckpointError`` -- so ``CheckpointManager.latest`` falls back to the previous checkpoint.

* ``save_state`` / ``load_state``: one file (a zip), for ``model.save("tagger.ssvm")``.
* ``CheckpointManager``: a directory of numbered checkpoint directories
  (``ckpt-00000001/``...), each written under a temporary name, synced to disk (one
  ``syncfs`` on Linux, else an ``fsync`` per file and directory) and renamed atomically; the
  last ``keep`` are kept; ``latest()`` returns the newest *valid* one and skips (with a
  warning) a truncated, corrupt or foreign one.

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
import re
import shutil
import tempfile
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np

from .errors import CheckpointError, RunFault, SourceFault  # noqa: F401  (CheckpointError re-exported: the file format's error)

FORMAT = "streamssvm-checkpoint"
VERSION = 2          # 2: manifest_sha256; version-1 files (no manifest checksum) are still read
_MANIFEST = "manifest.json"
_ARRAY_NAME = re.compile(r"a[0-9]{5,9}")
_NPY_HEADER_MAX = 1 << 16   # bytes allowed for the .npy header on top of the declared data
_MANIFEST_MAX = 1 << 30     # a manifest larger than this is not ours


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
                if v["__float__"] not in ("nan", "inf", "-inf"):
                    raise ValueError(f"invalid float marker {str(v['__float__'])[:40]!r}")
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


def _npy_parts(a):
    """The bytes ``np.save`` writes for ``a`` as pieces, without copying the data: the format
    1.0 header and a view of a C-contiguous array's buffer (what ``np.save`` writes for it
    whenever the header fits format 1.0); any other array as the one piece of
    :func:`_npy_bytes`. A checkpoint of a 20k-example model is ~10 MB: the BytesIO copy and its
    ``getvalue`` copy cost ~8 ms of CPU per checkpoint."""
    if a.dtype.hasobject or not a.flags.c_contiguous:
        return (_npy_bytes(a),)
    head = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(a))
        data = memoryview(a).cast("B") if a.size else b""
    except (ValueError, TypeError):   # a header too long for format 1.0 (np.save picks another
        return (_npy_bytes(a),)       # version), or a dtype without a buffer format
    return head.getvalue(), data


def _sha256(blob):
    """The SHA-256 (hex) of a blob: bytes, or the pieces of :func:`_npy_parts` in order."""
    if isinstance(blob, tuple):
        h = hashlib.sha256()
        for part in blob:
            h.update(part)
        return h.hexdigest()
    return hashlib.sha256(blob).hexdigest()


def _canonical(man):
    return json.dumps(man, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _manifest(tree, arrays, kind, meta, blobs, extra=None):
    man = {
        "format": FORMAT, "version": VERSION, "kind": kind, "meta": _split(meta or {})[0],
        "created": time.time(), "state": tree,
        "arrays": {name: {"dtype": str(a.dtype), "shape": list(a.shape),
                          "sha256": _sha256(blobs[name])}
                   for name, a in arrays.items()},
        **(extra or {}),
    }
    return man


def _manifest_text(man):
    """The manifest as written: canonical JSON plus the SHA-256 of that canonical JSON."""
    body = _canonical(man)
    return _canonical({**man, "manifest_sha256": hashlib.sha256(body.encode("utf-8")).hexdigest()})


def _parse_manifest(text, where):
    if len(text) > _MANIFEST_MAX:
        raise CheckpointError(f"{where}: manifest of {len(text)} bytes is too large")
    try:
        return json.loads(text)
    except RecursionError:
        raise CheckpointError(f"{where}: manifest nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{where}: manifest unreadable or truncated ({str(e)[:200]})") from None


def _is_sha(v):
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


def _check_manifest(man, where, kind):
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        fmt = man.get("format") if isinstance(man, dict) else None
        raise CheckpointError(f"{where}: not a streamssvm checkpoint (format {str(fmt)[:80]!r})")
    v = man.get("version")
    if type(v) is not int or v < 1:
        raise CheckpointError(f"{where}: invalid format version {str(v)[:40]!r}")
    if v > VERSION:
        raise CheckpointError(f"{where}: format version {v!r} is newer than this streamssvm reads ({VERSION}); upgrade streamssvm")
    if v >= 2:
        got = man.get("manifest_sha256")
        body = {k: u for k, u in man.items() if k != "manifest_sha256"}
        try:
            want = hashlib.sha256(_canonical(body).encode("utf-8")).hexdigest()
        except (ValueError, TypeError, RecursionError):
            want = None
        if not _is_sha(got) or got != want:
            raise CheckpointError(f"{where}: manifest checksum mismatch (corrupt manifest)")
    if kind is not None and man.get("kind") != kind:
        raise CheckpointError(f"{where}: holds a {str(man.get('kind'))[:80]!r}, expected a {kind!r}")
    if "state" not in man:
        raise CheckpointError(f"{where}: manifest has no state")
    if not isinstance(man.get("meta", {}), dict):
        raise CheckpointError(f"{where}: manifest meta is not an object")
    arrays = man.get("arrays")
    if not isinstance(arrays, dict):
        raise CheckpointError(f"{where}: manifest has no array table")
    for name, info in arrays.items():
        if not _ARRAY_NAME.fullmatch(name):
            raise CheckpointError(f"{where}: invalid array name {name[:80]!r} (only generated names a00000...)")
        if not isinstance(info, dict) or not _is_sha(info.get("sha256")):
            raise CheckpointError(f"{where}: array {name}: invalid entry")
        shape = info.get("shape")
        if (not isinstance(shape, list) or len(shape) > 32
                or not all(type(d) is int and 0 <= d < 2**62 for d in shape)):
            raise CheckpointError(f"{where}: array {name}: invalid shape")
        try:
            dt = np.dtype(info.get("dtype")) if isinstance(info.get("dtype"), str) else None
        except TypeError:
            dt = None
        if dt is None or dt.kind not in "biufc" or str(dt) != info["dtype"]:
            raise CheckpointError(f"{where}: array {name}: invalid dtype {str(info.get('dtype'))[:40]!r}")


def _max_member_size(info):
    """Largest ``.npy`` size consistent with the declared dtype and shape."""
    n = 1
    for d in info["shape"]:
        n *= d
    return n * np.dtype(info["dtype"]).itemsize + _NPY_HEADER_MAX


def _decode_arrays(man, read, where):
    """``read(name, max_bytes)`` returns the member's bytes, or raises CheckpointError when it
    is larger than ``max_bytes`` (checked before reading)."""
    arrays = {}
    for name, info in man["arrays"].items():
        try:
            blob = read(name, _max_member_size(info))
        except (KeyError, FileNotFoundError, OSError) as e:
            raise CheckpointError(f"{where}: array {name} is missing ({str(e)[:200]})") from None
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


def _read_capped(f, limit, what):
    data = f.read(limit + 1)
    if len(data) > limit:
        raise CheckpointError(f"{what} is larger than its declared dtype and shape allow")
    return data


def _restore_tree(man, arrays, where):
    try:
        return _join(man["state"], arrays), _join(man.get("meta", {}), {})
    except KeyError as e:
        raise CheckpointError(f"{where}: the state refers to an array {str(e)[:80]} not in the manifest") from None
    except RecursionError:
        raise CheckpointError(f"{where}: state nested too deeply") from None
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: invalid state ({str(e)[:200]})") from None


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _syncfs():
    """``syncfs(2)`` of the C library (Linux), or None where there is none."""
    try:
        import ctypes
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):   # pragma: no cover - not Linux / glibc
        return None
    fn.argtypes = [ctypes.c_int]
    return fn


_SYNCFS = _syncfs() if os.name == "posix" else None


def _write_durably(files, dirs):
    """Write ``files`` (``(path, bytes)`` pairs, the bytes possibly as the pieces of
    :func:`_npy_parts`; new files) so that they and their entries in ``dirs`` are on disk when
    this returns. Where the system has ``syncfs(2)`` (Linux), one call
    flushes the file system holding them instead of one ``fsync`` per file and per directory
    (a checkpoint is ~20 files; at ~5 ms per ``fsync`` on ext4 that was 0.1 s per checkpoint
    against ~6 ms); otherwise, or when ``syncfs`` fails, every file and directory is fsynced."""
    for path, blob in files:
        with open(path, "wb") as f:
            for part in (blob if isinstance(blob, tuple) else (blob,)):
                f.write(part)
    if _SYNCFS is not None and dirs:
        fd = os.open(dirs[-1], os.O_RDONLY)
        try:
            if _SYNCFS(fd) == 0:
                return
        finally:
            os.close(fd)
    for path, _ in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for d in dirs:
        _fsync_dir(d)


# ----------------------------------------------------------------------------- one file
def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def save_state(path, state, *, kind: str, meta: dict | None = None, timings: dict | None = None) -> Path:
    """Write ``state`` to one file atomically (temp file, fsync, rename, fsync dir).

    ``timings``: a dict that receives the seconds spent encoding (arrays to bytes and their
    checksums), writing and fsyncing (file and directory)."""
    path = Path(path)
    t0 = time.perf_counter()
    tree, arrays = _split(state)
    blobs = {name: _npy_bytes(a) for name, a in arrays.items()}
    man = _manifest(tree, arrays, kind, meta, blobs)
    path.parent.mkdir(parents=True, exist_ok=True)
    t1 = time.perf_counter()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())   # the mode of any new file (mkstemp's is 0600)
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as z:
                z.writestr(_MANIFEST, _manifest_text(man))
                for name, blob in blobs.items():
                    z.writestr(f"arrays/{name}.npy", blob)
            f.flush()
            t2 = time.perf_counter()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if timings is not None:
        t3 = time.perf_counter()
        timings.update(encode=t1 - t0, write=t2 - t1, fsync=t3 - t2)
    return path


def load_state(path, *, kind: str | None = None):
    """Read a file written by :func:`save_state`; returns ``(state, meta)``. Any problem with
    the file is a ``CheckpointError``."""
    path = Path(path)
    where = str(path)
    if not path.exists():
        raise CheckpointError(f"{where}: no such file")
    try:
        return _load_zip(path, where, kind)
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the bytes do, the file is invalid
        raise CheckpointError(f"{where}: unreadable ({type(e).__name__}: {str(e)[:200]})") from None


def _load_zip(path, where, kind):
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise CheckpointError(f"{where}: not a streamssvm model file or truncated ({e})") from None
    with z:
        try:
            info = z.getinfo(_MANIFEST)
        except KeyError:
            raise CheckpointError(f"{where}: no manifest (not a streamssvm file)") from None
        if info.file_size > _MANIFEST_MAX:
            raise CheckpointError(f"{where}: manifest too large")
        try:
            with z.open(info) as f:
                text = _read_capped(f, _MANIFEST_MAX, f"{where}: manifest")
        except (zipfile.BadZipFile, OSError) as e:
            raise CheckpointError(f"{where}: manifest unreadable ({e})") from None
        man = _parse_manifest(text, where)
        _check_manifest(man, where, kind)

        def read(name, limit):
            member = f"arrays/{name}.npy"
            try:
                zi = z.getinfo(member)
            except KeyError:
                raise CheckpointError(f"{where}: array {name} is missing") from None
            if zi.file_size > limit or zi.compress_size > limit:
                raise CheckpointError(f"{where}: array {name} is larger than its declared dtype and shape allow")
            try:
                with z.open(zi) as f:
                    return _read_capped(f, limit, f"{where}: array {name}")
            except zipfile.BadZipFile as e:
                raise CheckpointError(f"{where}: array {name} is corrupt ({e})") from None

        arrays = _decode_arrays(man, read, where)
    return _restore_tree(man, arrays, where)


def read_manifest(path) -> dict:
    """The manifest of a checkpoint directory or model file (no arrays loaded)."""
    path = Path(path)
    try:
        if path.is_dir():
            with open(path / _MANIFEST, "rb") as f:
                text = _read_capped(f, _MANIFEST_MAX, f"{path}: manifest")
        else:
            with zipfile.ZipFile(path) as z, z.open(_MANIFEST) as f:
                text = _read_capped(f, _MANIFEST_MAX, f"{path}: manifest")
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: manifest unreadable ({e})") from None
    man = _parse_manifest(text, str(path))
    if not isinstance(man, dict):
        raise CheckpointError(f"{path}: manifest is not an object")
    return man


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
    LOCK = ".lock"

    def __init__(self, directory, keep: int = 3):
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        self.directory = Path(directory)
        self.keep = keep
        self._lock = None

    # ------------------------------------------------------------------ the directory's lock
    def acquire(self):
        """Take the directory's lock (an exclusive ``flock`` on ``.lock``, which holds the pid of
        the run holding it), creating the directory first: the pre-flight check that it is
        writable. Raises ``RunFault`` with one line when another run holds the lock or the
        directory cannot be written. Idempotent; released by :meth:`release` or when the process
        ends (a killed run never leaves a stale lock)."""
        if self._lock is not None:
            return
        import fcntl
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.directory / self.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise RunFault(f"the checkpoint directory {self.directory} is not writable ({e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            except OSError:
                holder = ""
            os.close(fd)
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise RunFault(f"the checkpoint directory {self.directory} is in use by another run{who}; wait for "
                           f"it to end, or give this run another --checkpoint-dir") from None
        try:   # the holder's pid (for the message above), and a write that must succeed
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            probe = self.directory / f".write-check-{os.getpid()}"
            with open(probe, "wb") as f:
                f.write(b"x")
                f.flush()
                os.fsync(f.fileno())
            probe.unlink()
        except OSError as e:
            os.close(fd)
            raise RunFault(f"the checkpoint directory {self.directory} is not writable ({e.strerror or e})") from None
        self._lock = fd

    def release(self):
        """Release the directory's lock (see :meth:`acquire`)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

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
        blobs = {name: _npy_parts(a) for name, a in arrays.items()}
        seq = self._next_seq()
        man = _manifest(tree, arrays, kind, meta, blobs, extra={"seq": seq})
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-ckpt-", dir=self.directory))
        try:
            (tmp / "arrays").mkdir()
            files = [(tmp / "arrays" / f"{name}.npy", blob) for name, blob in blobs.items()]
            files.append((tmp / _MANIFEST, _manifest_text(man).encode("utf-8")))
            _write_durably(files, [tmp / "arrays", tmp])
            final = self.directory / f"{self.PREFIX}{seq:08d}"
            os.rename(tmp, final)
            _fsync_dir(self.directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for old in self.list()[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def load(self, path, kind: str | None = None):
        """``(state, meta)`` of one checkpoint directory; CheckpointError when invalid (any
        exception while reading it is turned into one)."""
        path = Path(path)
        where = str(path)
        try:
            return self._load(path, where, kind)
        except CheckpointError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the bytes do, the checkpoint is invalid
            raise CheckpointError(f"{where}: unreadable ({type(e).__name__}: {str(e)[:200]})") from None

    def _load(self, path, where, kind):
        try:
            with open(path / _MANIFEST, "rb") as f:
                text = _read_capped(f, _MANIFEST_MAX, f"{where}: manifest")
        except FileNotFoundError:
            raise CheckpointError(f"{where}: no manifest") from None
        except OSError as e:
            raise CheckpointError(f"{where}: manifest unreadable ({e})") from None
        man = _parse_manifest(text, where)
        _check_manifest(man, where, kind)

        def read(name, limit):
            f = path / "arrays" / f"{name}.npy"   # name is a generated one: never a path
            if f.stat().st_size > limit:
                raise CheckpointError(f"{where}: array {name} is larger than its declared dtype and shape allow")
            with open(f, "rb") as fh:
                return _read_capped(fh, limit, f"{where}: array {name}")

        arrays = _decode_arrays(man, read, where)
        return _restore_tree(man, arrays, where)

    def latest(self, kind: str | None = None, restore=None):
        """``(state, meta, path)`` of the newest valid checkpoint, or None.

        ``restore``: an optional ``restore(state, meta, path)`` that applies the checkpoint
        (builds the model, seeks the source...); when it raises, that checkpoint is skipped
        with a warning like an unreadable one and the previous one is tried, so a checkpoint
        that reads but cannot be applied never crashes every restart. Its return value
        replaces ``state`` in the result. A ``SourceFault`` (the input changed under the
        checkpointed position) is not the checkpoint's fault and propagates: falling back would
        only start over silently."""
        for path in reversed(self.list()):
            try:
                state, meta = self.load(path, kind=kind)
                if restore is not None:
                    try:
                        state = restore(state, meta, path)
                    except SourceFault:
                        raise
                    except Exception as e:  # noqa: BLE001 - any failure to apply it: fall back
                        raise CheckpointError(f"{path}: cannot be restored ({type(e).__name__}: "
                                              f"{str(e)[:200]})") from None
                return state, meta, path
            except CheckpointError as e:
                warnings.warn(f"skipping invalid checkpoint: {e}", RuntimeWarning, stacklevel=2)
        return None
