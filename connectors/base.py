"""Sources and sinks: WHERE examples come from and predictions go.

A ``Source`` yields ``Record``s, each carrying the source *position* after it: a
JSON-serializable value that, given to ``seek`` on a fresh source, resumes right after that
record. The engine stores it inside checkpoints, which is what makes crash recovery exact.

Bad input never stops a stream and is never dropped silently: sources send it to a
``DeadLetterSink`` with the reason and the origin, and count it. A record is validated whole
before it is yielded; any exception while parsing one record becomes a dead letter.

Limits (documented defaults, per source):

* ``max_record_bytes`` (``DEFAULT_MAX_RECORD_BYTES`` = 1 MiB): a longer line / message / CoNLL
  sentence is a dead letter, read without holding it in memory;
* feature values must be finite with ``|v| <= MAX_ABS_VALUE`` (1e12, from
  ``streamssvm.features``);
* dead letters keep at most ``max_raw_bytes`` (4096) of the raw record, plus its full length.

This package imports only ``streamssvm.features``/``streamssvm._optional`` of the core.
"""
from __future__ import annotations

import io
import json
import os
import stat
import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from streamssvm.features import MAX_ABS_VALUE  # noqa: F401  (re-exported: the documented bound)

DEFAULT_MAX_RECORD_BYTES = 1 << 20
DEFAULT_MAX_RAW_BYTES = 4096


@dataclass
class Record:
    """One example from a source.

    Attributes
    ----------
    x
        A dict of features, a numpy array (1-D flat, 2-D sequence of token vectors), or a list
        of per-token feature dicts.
    y
        A label; a list of labels (sequences, multi-label); or a dict ``{label: bool}``.
    key
        An optional key (Kafka message key, line number, ...), echoed with predictions.
    position
        Source position *after* this record (JSON-serializable; see ``Source.seek``).
    origin
        Human-readable origin, e.g. ``"train.jsonl:17"``.
    w
        The example's importance weight (a finite float >= 0; 1.0 unless the source reads it from
        a field, ``weight_field=``), learned as ``learn_one(x, y, w)``.
    """
    x: Any
    y: Any
    key: Any = None
    position: Any = None
    origin: str = ""
    w: float = 1.0


#: In :meth:`Source.stream`: a list of records handed out must end here (it is learned before
#: the source reads on).
READ_BREAK = object()


class RecordRows:
    """Consecutive records of one source whose ``x`` are flat rows of numbers of one width,
    validated whole as the source validates a record, held as arrays: ``X`` (m x d float64, row
    i the ``x`` of record i), ``y`` (the m labels), and what makes record i a :class:`Record`
    when one is asked for (``rows[i]``, iteration, slicing): its key (``keys[i]``), the source
    position after it (``position_of(i)``) and its origin. Weights are all 1.

    A source hands these out from :meth:`Source.micro_batches` where its records are regular;
    the engine then predicts and learns the rows as one array, with no per-record object (see
    :meth:`streamssvm.engine.Engine._loop`); anything else treats it as the list of records it
    stands for.
    """

    __slots__ = ("X", "y", "keys", "position_of", "origin_of")
    w = 1.0   # every record's weight

    def __init__(self, X, y, keys, position_of, origin_of):
        self.X, self.y, self.keys = X, y, keys
        self.position_of, self.origin_of = position_of, origin_of

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        if isinstance(i, slice):
            at = range(len(self.y))[i]
            if at.step != 1:
                return [self[j] for j in at]
            a, b = at.start, at.stop
            return RecordRows(self.X[a:b], self.y[a:b], self.keys[a:b], lambda j: self.position_of(a + j),
                              lambda j: self.origin_of(a + j))
        if i < 0:
            i += len(self.y)
        if not 0 <= i < len(self.y):
            raise IndexError(i)
        return Record(self.X[i].copy(), self.y[i], self.keys[i], self.position_of(i), self.origin_of(i))

    def __iter__(self):
        return (self[i] for i in range(len(self.y)))


class DictRecords(list):
    """Consecutive records of one source (the list of them) whose ``x`` are flat dicts of
    features the source validated as one: ``features``, the
    :class:`streamssvm.features.FeatureDicts` of their ``x`` (``features[i]`` is record i's).
    A source hands these out from :meth:`Source.micro_batches` (Kafka polls); the engine gives
    the model ``features``, which it encodes from the gathered arrays without checking them
    again; anything else sees the list of records."""

    __slots__ = ("features",)

    def __init__(self, records, features):
        super().__init__(records)
        self.features = features


def chunks(records, size):
    """Lists of at most ``size`` records of an iterable of records (``None`` while a live
    source is idle: the pending list first, then ``None``)."""
    chunk = []
    for rec in records:
        if rec is None:
            if chunk:
                yield chunk
                chunk = []
            yield None
            continue
        chunk.append(rec)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class Source:
    """Base class of sources: iterate to get records; ``position()`` / ``seek()`` resume.

    Every hook a consumer of sources may call is declared here with its default, so that the
    engine calls them instead of probing a source for them:

    * ``position()`` / ``seek(position)``: where the source is, and going back there (required
      for resuming; the default position ``None`` means "cannot resume");
    * ``batches(max_records)``: lists of records (default: consecutive records of the iteration;
      Kafka: its polls);
    * ``micro_batches(room)``: the engine's micro-batches, lists of at most ``room()`` records
      of ``stream()`` (a JSONL file of flat rows hands out :class:`RecordRows`);
    * ``stream()``: the iteration with ``READ_BREAK`` where a list of records must end, because
      reading further could act on the source's position before the records handed out are
      learned (Kafka: the end of each poll; the next poll may revoke partitions, and the engine
      then checkpoints the source's position); default: the iteration, no breaks;
    * ``commit(position, asynchronous=False)``: a checkpoint covering ``position`` is durable
      (Kafka commits the offsets to its group; default: nothing to do);
    * ``close()``;
    * ``dead_letter``: the source's own ``DeadLetterSink`` (None: it rejects nothing itself);
      ``n_read`` / ``n_bad``: records read / rejected by the source;
    * ``group_member``: whether the source is one member of a consumer group, whose
      ``on_revoke(partitions)`` callback and ``worker_id`` the engine sets (Kafka);
    * ``fault``: None, or one line saying why a live source is idle against its will (a broker
      unreachable, a topic gone): a run stopped by its idle timeout then fails with it.
    """

    name = "source"
    n_read = 0
    n_bad = 0
    fault = None
    dead_letter = None
    group_member = False
    on_revoke = None
    worker_id = None

    def __init__(self):
        self.n_read = 0
        self.n_bad = 0

    def __iter__(self) -> Iterator[Record]:  # pragma: no cover - interface
        raise NotImplementedError

    def position(self):
        """The position after the last record yielded (JSON-serializable), or None if the
        source cannot resume."""
        return None

    def seek(self, position) -> None:  # pragma: no cover - interface
        raise NotImplementedError(f"{type(self).__name__} cannot seek")

    def batches(self, max_records=None):
        """Lists of at most ``max_records`` records (``None`` while idle)."""
        return chunks(self, max_records or 1)

    def stream(self):
        """Records, ``None`` while idle and ``READ_BREAK`` where a list of records must end
        (see the class docstring); by default the iteration itself."""
        return iter(self)

    def micro_batches(self, room):
        """Consecutive records of :meth:`stream`, at most ``room()`` per list (asked when the
        list is started, after the previous one was processed), a list ending at each
        ``READ_BREAK``; ``None`` while the source is idle. A source may hand out a
        :class:`RecordRows` in place of a list (JSONL files of flat rows), or a list that
        carries more (:meth:`_micro_batch`)."""
        it = self.stream()
        end = object()
        row = 0   # records since the last READ_BREAK
        while True:
            k, chunk, rec, first = room(), [], end, row
            for rec in it:
                if rec is None or rec is READ_BREAK:
                    break
                chunk.append(rec)
                if len(chunk) >= k:
                    break
            else:
                if chunk:
                    yield self._micro_batch(chunk, first)
                return
            row = 0 if rec is READ_BREAK else first + len(chunk)
            if chunk:
                yield self._micro_batch(chunk, first)
            if rec is None:
                yield None

    def _micro_batch(self, chunk, first):
        """The micro-batch of the records ``chunk`` of :meth:`micro_batches`, the first of them
        the ``first``-th record since the last ``READ_BREAK``: the list itself (a source may
        hand out a :class:`DictRecords` of it)."""
        return chunk

    def commit(self, position=None, asynchronous=False) -> None:
        """A checkpoint covering ``position`` is durable (nothing to do by default)."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Sink:
    """Base class of sinks."""

    def write(self, obj: dict) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def sync(self) -> None:
        """Make everything written so far durable (flush; file sinks also fsync)."""
        self.flush()

    def close(self) -> None:
        self.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MemorySink(Sink):
    """Keeps everything written in ``items`` (tests, notebooks)."""

    def __init__(self):
        self.items: list = []

    def write(self, obj):
        self.items.append(obj)


class JSONLSink(Sink):
    """Appends one JSON line per object. ``path="-"`` is the standard output (left open by
    :meth:`close`).

    No torn lines: lines are written whole (a regular file in 64 KiB batches at ``flush``, a pipe
    or a device line by line), and a failed write (a full disk) cuts a regular file back to its
    last whole line before the error propagates; a file that already ends with a torn line (a run
    killed or out of space while writing it) is cut back to its last whole line when opened, with
    a warning, so a resumed run never appends to half a line. ``flush`` fsyncs a regular file
    (not a pipe or a character device such as ``/dev/null`` or ``/dev/stdout``, which cannot be
    fsynced).

    When the reader of a pipe closes it (``predict | head``), writing stops quietly: the sink
    drops the rest, points the descriptor at ``/dev/null`` (so that nothing fails at exit) and
    calls ``on_closed()`` once, e.g. to stop a run, which then checkpoints as usual."""

    #: pending bytes that trigger a write (regular files; pipes and devices are written per line)
    BUFFER = 1 << 16

    def __init__(self, path, on_closed=None):
        self.path = str(path)
        self.on_closed = on_closed
        self.closed_by_reader = False
        self._pending: list = []
        self._n = 0
        if self.path == "-":
            out = sys.stdout
            self._text = not hasattr(out, "buffer")   # a captured stdout may be text only
            self._f, self._own = (out if self._text else out.buffer), False
        else:
            d = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(d, exist_ok=True)
            self._f, self._own, self._text = open(self.path, "ab"), True, False
        try:
            self._regular = stat.S_ISREG(os.fstat(self._f.fileno()).st_mode)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            self._regular = False     # a stdout without a descriptor (captured)
        self._sync = self._own and self._regular
        self._limit = self.BUFFER if self._regular else 0
        self._good = _cut_torn_tail(self._f, self.path) if self._sync else 0

    def write(self, obj):
        if self.closed_by_reader:
            return
        line = (json.dumps(obj, default=_json_default) + "\n").encode("utf-8", "backslashreplace")
        self._pending.append(line)
        self._n += len(line)
        if self._n >= self._limit:
            self._write_pending()

    def _write_pending(self):
        data, self._pending, self._n = b"".join(self._pending), [], 0
        if not data or self._f.closed or self.closed_by_reader:
            return
        try:
            self._f.write(data.decode("utf-8") if self._text else data)
            self._f.flush()
        except BrokenPipeError:
            self._reader_closed()
            return
        except OSError as e:
            if self._own:   # a regular file cut back to its last whole line; the failed bytes dropped
                _truncate_quietly(self._f, self._good)
            raise OSError(e.errno, e.strerror, self.path) from None
        self._good += len(data)

    def flush(self):
        if self._f.closed or self.closed_by_reader:
            return
        self._write_pending()
        if self._sync and not self._f.closed:
            os.fsync(self._f.fileno())

    def _reader_closed(self):
        self.closed_by_reader = True
        self._pending, self._n = [], 0
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._f.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass
        if self.on_closed is not None:
            self.on_closed()

    def close(self):
        if not self._f.closed:
            try:
                self.flush()
            finally:
                if self._own:
                    self._f.close()


def _truncate_quietly(f, size):
    """Cut an open file back to ``size`` bytes after a failed write (best effort)."""
    try:
        f.seek(0, os.SEEK_END)
    except (OSError, ValueError):
        pass
    try:
        os.ftruncate(f.fileno(), size)
    except OSError:
        pass
    try:   # the buffered writer may still hold the failed bytes: drop them with the file object
        f.raw.close() if hasattr(f, "raw") else None
    except (OSError, ValueError):
        pass


def append_line(path, text):
    """Append one line (``text`` without its newline) to the file ``path`` whole: a torn last
    line left by a run stopped while writing it is cut first (with a warning), and a failed
    write (a full disk) cuts the file back to where it was before the error propagates. For
    files that get a line now and then (``--metrics`` snapshots), not per record."""
    data = (text + "\n").encode("utf-8", "backslashreplace")
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "ab") as f:
        good = _cut_torn_tail(f, path)
        try:
            f.write(data)
            f.flush()
        except OSError as e:
            _truncate_quietly(f, good)
            raise OSError(e.errno, e.strerror, path) from None


def _cut_torn_tail(f, path):
    """The size of ``f`` (opened for appending) after cutting a torn last line (no newline)
    back to the last whole one; a regular file only (a pipe or a device is left alone)."""
    import stat
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return st.st_size
    with open(path, "rb") as r:
        end = st.st_size
        r.seek(end - 1)
        if r.read(1) == b"\n":
            return end
        pos = end
        while pos > 0:
            step = min(pos, 1 << 16)
            r.seek(pos - step)
            chunk = r.read(step)
            i = chunk.rfind(b"\n")
            if i >= 0:
                pos = pos - step + i + 1
                break
            pos -= step
    os.ftruncate(f.fileno(), pos)
    warnings.warn(f"{path}: removed a torn last line of {end - pos} bytes (a run stopped while writing it)",
                  RuntimeWarning, stacklevel=3)
    return pos


def _json_default(v):
    try:
        import numpy as np
        if isinstance(v, np.ndarray):
            return v.tolist()
        if isinstance(v, np.generic):
            return v.item()
    except ImportError:  # pragma: no cover
        pass
    return str(v)


class DeadLetterSink:
    """Where bad records go: ``send(raw, reason, origin)`` writes ``{"reason", "origin",
    "raw", "raw_bytes"}`` to the wrapped sink and counts. ``raw`` keeps at most
    ``max_raw_bytes`` of the record (``"truncated": true`` then); bytes that are not UTF-8 are
    also given as ``raw_base64``. Without a sink, records are kept in memory and one warning
    per distinct reason is emitted, so nothing is lost silently.

    >>> dl = DeadLetterSink()
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     dl.send(b"{bad", "invalid JSON", "f.jsonl:3")
    ...     dl.send(b"x" * 10000, "too long", "f.jsonl:4")
    >>> dl.count, dl.reasons["invalid JSON"]
    (2, 1)
    >>> d = dl.sink.items[1]; len(d["raw"]), d["raw_bytes"], d["truncated"]
    (4096, 10000, True)
    """

    def __init__(self, sink: Sink | None = None, max_raw_bytes: int = DEFAULT_MAX_RAW_BYTES):
        self.warn = sink is None
        self.sink = sink if sink is not None else MemorySink()
        self.max_raw_bytes = int(max_raw_bytes)
        self.count = 0
        self.reasons: Counter = Counter()

    def send(self, raw, reason: str, origin: str = "", size: int | None = None):
        """``size``: the full length of the record when ``raw`` is already only its head."""
        extra = {}
        if isinstance(raw, (bytes, bytearray, memoryview)):
            raw = bytes(raw)
        elif not isinstance(raw, str):
            try:
                raw = repr(raw)
            except Exception as e:  # noqa: BLE001 - e.g. an int too large to print
                raw = f"<unprintable {type(raw).__name__}: {type(e).__name__}>"
        n = len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw) if size is None else int(size)
        cap = self.max_raw_bytes
        if isinstance(raw, bytes):
            head = raw[:cap]
            try:
                text = head.decode("utf-8")
            except UnicodeDecodeError as e:
                if e.start >= len(head) - 3 and len(raw) > cap:  # a character cut by the truncation
                    text = head[:e.start].decode("utf-8", "backslashreplace")
                else:
                    import base64
                    extra["raw_base64"] = base64.b64encode(head).decode("ascii")
                    text = head.decode("utf-8", errors="backslashreplace")
            raw = text
        elif len(raw) > cap:
            raw = raw[:cap]
        if n > cap:
            extra["truncated"] = True
        reason = str(reason)
        if len(reason) > 1000:
            reason = reason[:1000] + "..."
        short = reason.split(":")[0]
        if self.warn and short not in self.reasons:
            warnings.warn(f"bad record sent to the dead-letter sink ({origin}): {reason}", RuntimeWarning,
                          stacklevel=3)
        self.count += 1
        self.reasons[short] += 1
        self.sink.write({"reason": reason, "origin": origin, "raw": raw, "raw_bytes": n, **extra})

    def flush(self):
        self.sink.flush()

    def sync(self):
        """Flush and fsync the dead letters written so far; the engine calls it before each
        checkpoint, so a checkpoint never covers a record whose dead letter could be lost."""
        self.sink.sync()

    def close(self):
        self.sink.close()


class IterableSource(Source):
    """Records from any iterable of ``(x, y)`` pairs (or ``Record``s); the position is the
    number of items consumed, so ``seek(k)`` skips the first k items of a *replayable*
    iterable (a list, or a re-creatable generator given as ``factory``)."""

    def __init__(self, iterable: Iterable | None = None, name: str = "iterable", factory=None):
        super().__init__()
        if iterable is None and factory is None:
            raise ValueError("give an iterable or a factory")
        self._it = iterable
        self._factory = factory
        self.name = name
        self._pos = 0
        self._skip = 0

    def position(self):
        return self._pos

    def seek(self, position):
        if not isinstance(position, int) or position < 0:
            raise ValueError(f"IterableSource position must be a non-negative int, got {position!r}")
        self._skip = position
        self._pos = position

    def __iter__(self):
        it = self._factory() if self._factory is not None else self._it
        k = 0
        for item in it:
            k += 1
            if k <= self._skip:
                continue
            self._pos = k
            self.n_read += 1
            if isinstance(item, Record):
                item.position = k
                yield item
            else:
                x, y = item
                yield Record(x=x, y=y, key=k - 1, position=k, origin=f"{self.name}[{k - 1}]")


__all__ = ["DEFAULT_MAX_RECORD_BYTES", "MAX_ABS_VALUE", "Record", "RecordRows", "DictRecords", "Source", "READ_BREAK", "chunks", "Sink", "MemorySink", "JSONLSink", "DeadLetterSink", "IterableSource"]
