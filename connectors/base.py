"""Sources and sinks: WHERE examples come from and predictions go.

A ``Source`` yields ``Record``s, each carrying the source *position* after it: a
JSON-serializable value that, given to ``seek`` on a fresh source, resumes right after that
record. The engine stores it inside checkpoints, which is what makes crash recovery exact.

Bad input never stops a stream and is never dropped silently: sources send it to a
``DeadLetterSink`` with the reason and the origin, and count it.

This package does not import ``streamssvm`` (dependencies point one way).
"""
from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Iterator


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
    """
    x: Any
    y: Any
    key: Any = None
    position: Any = None
    origin: str = ""


class Source:
    """Base class of sources: iterate to get records; ``position()`` / ``seek()`` resume."""

    name = "source"

    def __init__(self):
        self.n_read = 0
        self.n_bad = 0

    def __iter__(self) -> Iterator[Record]:  # pragma: no cover - interface
        raise NotImplementedError

    def position(self):  # pragma: no cover - interface
        raise NotImplementedError

    def seek(self, position) -> None:  # pragma: no cover - interface
        raise NotImplementedError

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
    """Appends one JSON line per object; ``flush`` also fsyncs."""

    def __init__(self, path):
        self.path = str(path)
        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")

    def write(self, obj):
        self._f.write(json.dumps(obj, default=_json_default) + "\n")

    def flush(self):
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())

    def close(self):
        if not self._f.closed:
            self.flush()
            self._f.close()


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
    "raw"}`` to the wrapped sink and counts. Without a sink, records are kept in memory and
    one warning per distinct reason is emitted, so nothing is lost silently.

    >>> dl = DeadLetterSink()
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     dl.send(b"{bad", "invalid JSON", "f.jsonl:3")
    >>> dl.count, dl.reasons["invalid JSON"]
    (1, 1)
    """

    def __init__(self, sink: Sink | None = None):
        self.warn = sink is None
        self.sink = sink if sink is not None else MemorySink()
        self.count = 0
        self.reasons: Counter = Counter()

    def send(self, raw, reason: str, origin: str = ""):
        extra = {}
        if isinstance(raw, (bytes, bytearray)):
            import base64
            extra["raw_base64"] = base64.b64encode(bytes(raw)).decode("ascii")
            raw = bytes(raw).decode("utf-8", errors="backslashreplace")
        elif not isinstance(raw, str):
            raw = repr(raw)
        short = reason.split(":")[0]
        if self.warn and short not in self.reasons:
            warnings.warn(f"bad record sent to the dead-letter sink ({origin}): {reason}", RuntimeWarning,
                          stacklevel=3)
        self.count += 1
        self.reasons[short] += 1
        self.sink.write({"reason": reason, "origin": origin, "raw": raw, **extra})

    def flush(self):
        self.sink.flush()

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


__all__ = ["Record", "Source", "Sink", "MemorySink", "JSONLSink", "DeadLetterSink", "IterableSource"]
