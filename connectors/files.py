"""File sources: JSONL, CSV, libsvm / svmlight, CoNLL — replayed as fast as possible or paced,
with resumable positions (byte offsets) and dead letters for bad lines.

Position of every file source: ``{"path": ..., "offset": byte offset of the next unread
record, "record": records yielded so far, "file": the file's identity}``. ``seek`` on a fresh
source resumes right after the record that position was taken at.

A position knows its file: the identity is the inode and the SHA-256 of the file's first bytes
(up to 4096, as many as it had when it was opened). ``seek`` refuses (``SourceChanged``) a file
shorter than the position (truncated), or whose first bytes differ (rotated: a new file under the
old name; rewritten): resuming there would skip or repeat records silently. A last line without
its newline (a writer still appending) is never learned: it is a dead letter at the end of the
input and the position stays before it, so a later run reads it whole once it is complete.

>>> import tempfile, os
>>> p = os.path.join(tempfile.mkdtemp(), "d.jsonl")
>>> write_jsonl(p, [{"x": {"a": 1.0}, "y": "u"}, {"x": {"a": 2.0}, "y": "v"}])
2
>>> src = open_source("file://" + p)
>>> first = next(iter(src))
>>> first.x, first.y
({'a': 1.0}, 'u')
>>> src2 = open_source(p); src2.seek(first.position)
>>> [r.y for r in src2]
['v']
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import time
from urllib.parse import parse_qsl, unquote, urlparse

import numpy as np

from streamssvm.errors import SourceChanged, SourceFault
from streamssvm.features import check_value

from .base import DEFAULT_MAX_RECORD_BYTES, MAX_ABS_VALUE, DeadLetterSink, Record, RecordRows, Source

_BOM = b"\xef\xbb\xbf"

try:   # optional: a faster decoder for the common record (see decode_json), never required
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

#: a run of 19 digits: an integer orjson may turn into a float (beyond 64 bits) or a number
#: with more digits than a double holds; such records are decoded by the standard library.
#: Found as ``_LONG_DIGITS in raw.translate(_DIGITS_ONLY)`` (every digit to b"0", every other
#: byte to a space): ~1 us on a 500-byte record where the regex ``[0-9]{19}`` takes ~9
_DIGITS_ONLY = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_LONG_DIGITS = b"0" * 19
#: at most this many opening brackets for orjson: nesting json.loads never refuses
_FAST_MAX_OPEN = 256
#: ``_DIGITS_ONLY`` that also maps both opening brackets to b"[": the one translation
#: :func:`decode_json` counts the brackets of and finds a run of 19 digits in
_DIGITS_AND_OPEN = bytes(48 if 48 <= i <= 57 else 91 if i in (91, 123) else 32 for i in range(256))
_HEAD_BYTES = 4096      # bytes of a file's head its identity checksums
_NO_MORE = object()     # JSONLSource._read_rows: the end of the input

FORMATS = ("jsonl", "csv", "libsvm", "conll")
_EXT = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".libsvm": "libsvm",
        ".svm": "libsvm", ".svmlight": "libsvm", ".txt": "libsvm", ".conll": "conll",
        ".conllu": "conll", ".iob": "conll", ".bio": "conll"}


class BadRecord(ValueError):
    """Raised by parsers; the message is the dead-letter reason."""


class _TooLong:
    """A line longer than ``max_record_bytes``: its head (for the dead letter) and its size."""

    __slots__ = ("head", "size")

    def __init__(self, head, size):
        self.head, self.size = head, size

    def strip(self):  # never blank
        return True


class _Partial(bytes):
    """The last line of a file when it has no newline yet (a writer may still be appending)."""


class _Unclosed(bytes):
    """A CSV record whose quoted field is still open at the end of the file."""


_PARTIAL_REASON = ("incomplete last line (no newline at the end of the file): not learned; the position "
                   "stays before it, so a later run reads it once its newline is written")


def file_identity(f):
    """The identity of an open binary file: ``{"inode", "head_bytes", "head"}`` (the SHA-256 of
    its first ``head_bytes`` bytes, at most 4096). The file's offset is left where it was."""
    import hashlib
    st = os.fstat(f.fileno())
    at = f.tell()
    f.seek(0)
    head = f.read(min(st.st_size, _HEAD_BYTES))
    f.seek(at)
    return {"inode": int(st.st_ino), "head_bytes": len(head), "head": hashlib.sha256(head).hexdigest()}


def check_identity(path, offset, ident):
    """Raise ``SourceChanged`` when ``path`` is not the file a position ``(offset, ident)`` was
    taken in: shorter than ``offset`` (truncated), or its first bytes differ (rotated or rewritten)."""
    import hashlib
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        ino = os.fstat(f.fileno()).st_ino
        what = None
        if offset > size:
            what = (f"position offset {offset} is outside {path} ({size} bytes): the file was truncated or "
                    f"replaced by a shorter one")
        elif isinstance(ident, dict) and "head" in ident:
            n = int(ident.get("head_bytes", 0))
            head = f.read(n)
            if len(head) < n or hashlib.sha256(head).hexdigest() != ident["head"]:
                moved = f" (inode {ident.get('inode')} then, {ino} now)" if ident.get("inode") != ino else ""
                what = (f"{path} is not the file the checkpoint read: its first {n} bytes differ{moved}; it "
                        f"was rotated (a new file under the old name) or rewritten")
    if what:
        raise SourceChanged(f"{what}. Resuming at byte {offset} would skip or repeat records: point --source "
                            f"at the file the checkpoint read, or start over with --reset")


def _reason(e):
    """The dead-letter reason of any exception raised while parsing one record."""
    if isinstance(e, BadRecord):
        return str(e)
    if isinstance(e, RecursionError):
        return "too deeply nested"
    if isinstance(e, MemoryError):
        return "out of memory while parsing the record"
    try:
        msg = str(e)
    except Exception:  # noqa: BLE001
        msg = ""
    return f"{type(e).__name__}: {msg[:300]}" if msg else type(e).__name__


class Pacer:
    """Paces a stream at ``rate`` records per second (None: as fast as possible): the k-th
    :meth:`wait` returns no earlier than k / rate seconds after the first one. The one pacer
    of the project: file sources (``rate=``) and ``Engine(rate=...)`` both use it.

    >>> p = Pacer(1000.0); t = time.monotonic()
    >>> for _ in range(11): p.wait()
    >>> time.monotonic() - t >= 0.0099
    True
    """

    def __init__(self, rate):
        if rate is not None and (not isinstance(rate, (int, float)) or rate <= 0):
            raise ValueError(f"rate must be a positive number of records per second, got {rate!r}")
        self.rate = rate
        self.t0 = None
        self.k = 0

    def wait(self):
        if self.rate is None:
            return
        now = time.monotonic()
        if self.t0 is None:
            self.t0 = now
        target = self.t0 + self.k / self.rate
        if target > now:
            time.sleep(target - now)
        self.k += 1


class FileSource(Source):
    """Base class: reads a file in binary mode and tracks byte offsets."""

    fmt = "?"

    def __init__(self, path, rate=None, dead_letter: DeadLetterSink | None = None,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES):
        super().__init__()
        if not isinstance(max_record_bytes, int) or max_record_bytes < 1:
            raise ValueError(f"max_record_bytes must be a positive int, got {max_record_bytes!r}")
        self.max_record_bytes = max_record_bytes
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"no such file: {self.path}")
        self.name = os.path.basename(self.path)
        self.dead_letter = dead_letter if dead_letter is not None else DeadLetterSink()
        self._pacer = Pacer(rate)
        self._offset = 0
        self._record = 0
        self._line = 0
        with open(self.path, "rb") as f:
            self._ident = file_identity(f)

    def position(self):
        return {"path": self.path, "offset": self._offset, "record": self._record, "file": self._ident}

    def seek(self, position):
        if not isinstance(position, dict) or "offset" not in position:
            raise ValueError(f"not a file position: {position!r}")
        off = int(position["offset"])
        if off < 0:
            raise ValueError(f"position offset {off} is outside {self.path}")
        check_identity(self.path, off, position.get("file"))
        self._offset = off
        self._record = int(position.get("record", 0))
        self._line = int(position.get("line", 0))

    def _bad(self, raw, reason, line):
        self.n_bad += 1
        if isinstance(raw, _TooLong):
            self.dead_letter.send(raw.head, reason, f"{self.name}:{line}", size=raw.size)
        else:
            self.dead_letter.send(raw, reason, f"{self.name}:{line}")

    def _too_long(self, raw):
        return BadRecord(f"record of {raw.size} bytes exceeds max_record_bytes={self.max_record_bytes}")

    def _emit(self, x, y, key, line, w=1.0):
        if self._pacer.rate is not None:
            self._pacer.wait()
        self._record += 1
        self.n_read += 1
        return Record(x, y, key, {"path": self.path, "offset": self._offset, "record": self._record,
                                  "file": self._ident}, f"{self.name}:{line}", w)

    def _lines(self):
        """(line number, start offset, end offset, raw bytes without newline) from the current
        offset; line numbers count from 1 at the start of the file. A UTF-8 byte-order mark at
        the start of the file is dropped. A line longer than ``max_record_bytes`` comes as a
        ``_TooLong`` (its head and size), read in bounded chunks, never held whole."""
        cap = self.max_record_bytes
        keep = self.dead_letter.max_raw_bytes
        with open(self.path, "rb") as f:
            if not self._offset:
                self._ident = file_identity(f)
            if self._offset and not self._line:
                # recover the line number for messages (bounded memory)
                n, left = 0, self._offset
                while left > 0:
                    chunk = f.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    n += chunk.count(b"\n")
                    left -= len(chunk)
                self._line = n
            f.seek(self._offset)
            line = self._line
            off = self._offset
            while True:
                raw = f.readline(cap + 2)  # the content, up to 2 newline bytes
                if not raw:
                    return
                line += 1
                start = off
                off += len(raw)
                if not raw.endswith(b"\n") and len(raw) <= cap:   # the last line, not finished yet
                    yield line, start, start, _Partial(raw)
                    return
                if not raw.endswith(b"\n") and len(raw) > cap:
                    head = raw[:keep]
                    size = len(raw)
                    while True:  # skip the rest of the line in bounded chunks
                        chunk = f.readline(1 << 20)
                        if not chunk:
                            break
                        off += len(chunk)
                        size += len(chunk)
                        if chunk.endswith(b"\n"):
                            break
                    yield line, start, off, _TooLong(head, size)
                    continue
                raw = raw.rstrip(b"\r\n")
                if start == 0 and raw.startswith(_BOM):
                    raw = raw[len(_BOM):]
                if len(raw) > cap:
                    yield line, start, off, _TooLong(raw[:keep], len(raw))
                    continue
                yield line, start, off, raw

    def __iter__(self):
        """The records of a line format: each line with content (:meth:`_content`) parsed by
        :meth:`_parse` into ``(x, y, key)``; any exception on a line makes it a dead letter."""
        plain = type(self)._content is FileSource._content
        # a line format reads its lines directly (one generator less per record than _units)
        by_line = type(self)._units is FileSource._units
        for line, last, end, raw in (self._lines() if by_line else self._units()):
            if by_line:
                last = line   # _lines gives the start offset there
            t = type(raw)
            if t is _Partial:   # the position stays before it
                if raw.strip():
                    self._bad(bytes(raw), _PARTIAL_REASON, line)
                return
            before = self._offset, self._line
            self._offset, self._line = end, last
            text = raw if t is _TooLong or plain else self._content(raw)
            if not text.strip():
                continue
            try:
                if t is _TooLong:
                    raise self._too_long(raw)
                parsed = self._parse(text, line)   # (x, y, key) or (x, y, key, weight)
            except SourceFault:   # the input cannot be read on: the position stays before the line
                self._offset, self._line = before
                raise
            except Exception as e:  # noqa: BLE001 - any failure on one record is a dead letter
                self._bad(raw, _reason(e), line)
                continue
            yield self._emit(*parsed[:3], line, *parsed[3:])

    def _units(self):
        """(first line, last line, end offset, raw bytes) of each record's text: one line each
        (CSV: a quoted field may span lines)."""
        for line, _, end, raw in self._lines():
            yield line, line, end, raw

    def _content(self, raw):
        """The part of a line that holds the record (libsvm drops its ``#`` comment)."""
        return raw

    def _parse(self, text, line):  # pragma: no cover - subclasses
        """``(x, y, key)`` of one line, or an exception whose message is the dead-letter reason."""
        raise NotImplementedError


# ----------------------------------------------------------------------------- value checks
def _reject_constant(c):
    raise BadRecord(f"non-finite number {c} in JSON")


def _short(v):
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"an integer of {v.bit_length()} bits"
    try:
        r = repr(v)
    except Exception:  # noqa: BLE001
        r = f"<{type(v).__name__}>"
    return r if len(r) <= 60 else r[:57] + "..."


def _finite(v, what):
    """A feature value as a float (:func:`streamssvm.features.check_value`: a number, bools are
    0/1, finite, ``|v| <= MAX_ABS_VALUE``); a bad one is a :class:`BadRecord`."""
    try:
        return check_value(v, what)
    except (TypeError, ValueError) as e:
        raise BadRecord(str(e)) from None


#: a number as text: ASCII digits only (``float()`` also takes ``1_000`` and other scripts' digits)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
                     r"|inf|infinity|nan)", re.ASCII | re.IGNORECASE)
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_SPACE = " \t\r\n\v\f"


def _float_text(text, what, plain=False):
    """A feature value from text (CSV cell, libsvm value), with the same checks; ASCII digits
    only (``1_000`` and non-ASCII digits are not numbers; ``plain``: the caller checked that).

    >>> _float_text(" 2.5e1 ", "v")
    25.0
    >>> try:
    ...     _float_text("1_000", "v")
    ... except BadRecord as e:
    ...     print(e)
    v: non-numeric value '1_000'
    """
    try:   # float() on ASCII text without underscores takes exactly the decimal forms
        if not plain and (not text.isascii() or "_" in text):
            raise ValueError
        f = float(text)
    except ValueError:
        raise BadRecord(f"{what}: non-numeric value {_short(text)}") from None
    return _finite(f, what)


def _float_cell(text, name, plain=False):
    """A CSV cell as a float, as :func:`_float_text` checks it; the message of a bad cell is
    built only when there is one."""
    f = None
    if plain:   # the row is ASCII without "_": float() takes exactly the decimal forms
        try:
            f = float(text)
        except ValueError:
            pass
    if f is not None and -MAX_ABS_VALUE <= f <= MAX_ABS_VALUE:   # False for NaN
        return f
    return _float_text(text, f"column {name!r}", plain)


def _number_label(t, what="label"):
    """A numeric label from text, exactly: an integer as a Python int (``2**53 + 1`` stays
    itself; 64 bits at most), else a finite float (integral floats such as ``1.0`` become ints,
    as before); ASCII digits only.

    >>> _number_label(str(2**53 + 1)) == 2**53 + 1, _number_label("-3.0"), _number_label("0.5")
    (True, -3, 0.5)
    """
    t = t.strip(_SPACE)
    if _INTEGER.fullmatch(t):
        v = int(t)
        if not -2**63 <= v < 2**63:
            raise BadRecord(f"{what} {_short(t)} does not fit in 64 bits")
        return v
    if not _NUMBER.fullmatch(t):
        raise BadRecord(f"bad {what} {_short(t)}")
    f = float(t)
    if not math.isfinite(f):
        raise BadRecord(f"non-finite {what} {_short(t)}")
    if f == int(f):
        if abs(f) >= 2**63:
            raise BadRecord(f"{what} {_short(t)} does not fit in 64 bits")
        return int(f)
    return f


def _features_dict(d, what="x"):
    """The features of a JSON object as floats, checked (:func:`_finite`); the message of a bad
    one is built only when there is one (no string formatting on the good path)."""
    lim = MAX_ABS_VALUE
    vals = d.values()
    types = set(map(type, vals))
    if types <= _PLAIN_NUMBERS and (not d or (-lim <= min(vals) and max(vals) <= lim and math.isfinite(sum(vals)))):
        # every value a plain number within the bounds (a NaN the comparisons skip makes the sum
        # NaN, checked once the bounds hold): the floats as they are, the integers converted
        return dict(d) if int not in types else {k: float(v) for k, v in d.items()}
    out = {}
    for k, v in d.items():
        t = type(v)
        if (t is float or t is int) and -lim <= v <= lim:   # False for NaN
            out[k] = float(v)
        else:
            out[k] = _finite(v, f"{what}[{_short(k)}]")
    return out


_PLAIN_NUMBERS = {float, int}
_INT64 = 2**63


def _finite_list(x, what):
    """A JSON list of numbers as a float64 array, each value checked as :func:`_finite` does:
    plain ints and floats within ``MAX_ABS_VALUE`` in one pass; anything else (bools,
    strings, huge integers, NaN) value by value for its reason."""
    if set(map(type, x)) <= _PLAIN_NUMBERS:
        # the bounds on the Python numbers (~3x cheaper than numpy's reductions on a short row);
        # a NaN the comparisons skip makes the sum NaN, which is checked once the bounds hold
        # (no huge integer left to overflow the sum)
        if not x or (-MAX_ABS_VALUE <= min(x) and max(x) <= MAX_ABS_VALUE and math.isfinite(sum(x))):
            return np.asarray(x, dtype=np.float64)
    for v in x:
        _finite(v, what)
    return np.asarray(x, dtype=np.float64)


def _label(v, what="label"):
    """A scalar label from JSON: a string, a bool, an integer within 64 bits or a finite float."""
    if isinstance(v, (str, bool)):
        return v
    if type(v) is int:
        if not -2**63 <= v < 2**63:
            raise BadRecord(f"{what} {_short(v)} does not fit in 64 bits")
        return v
    if type(v) is float:
        if not math.isfinite(v):
            raise BadRecord(f"non-finite {what}")
        return v
    if v is None:
        raise BadRecord(f"missing {what} (null)")
    raise BadRecord(f"{what} must be a string, a number or a boolean, got {type(v).__name__} {_short(v)}")


def _truth(v, lab):
    """A multi-label truth value: true/false, 1/0, or the strings "true"/"false" (any case)."""
    if isinstance(v, bool):
        return v
    if type(v) in (int, float) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise BadRecord(f"truth value of label {_short(lab)} must be true/false, 1/0 or \"true\"/\"false\", "
                    f"got {_short(v)}")


def parse_weight(v, what="weight"):
    """An example weight read from a record: a finite number >= 0 (JSON number, or a CSV cell's
    text); raises BadRecord with the reason.

    >>> parse_weight(2), parse_weight("0.5")
    (2.0, 0.5)
    """
    if isinstance(v, str):
        v = _float_text(v, what)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadRecord(f"{what} must be a number, got {_short(v)}")
    try:
        c = float(v)
    except OverflowError:
        raise BadRecord(f"{what} {_short(v)} is not finite") from None
    if not math.isfinite(c) or c < 0.0:
        raise BadRecord(f"{what} must be finite and >= 0, got {_short(v)}")
    return c


def record_weight(obj, weight_field):
    """The weight of a decoded JSON record: ``obj[weight_field]`` checked by :func:`parse_weight`
    (a record without the field is bad), or 1.0 when ``weight_field`` is None."""
    if weight_field is None:
        return 1.0
    if weight_field not in obj:
        raise BadRecord(f"missing weight field {weight_field!r}")
    return parse_weight(obj[weight_field], f"weight field {weight_field!r}")


def parse_example(obj, x_field="x", y_field="y", require_label=True):
    """Validate a decoded JSON example whole and convert x and y; raises BadRecord.

    ``y``: a label (string, number, boolean), a list of labels, or an object ``{label: truth}``
    whose truth values are booleans, 0/1 or the strings ``"true"``/``"false"`` (converted to
    booleans; anything else is rejected rather than read as true). ``require_label=False``
    (predicting): a record without ``y`` gives ``y = None``.

    >>> parse_example({"x": {"a": 1}, "y": {"u": "false", "v": 1}})
    ({'a': 1.0}, {'u': False, 'v': True})
    >>> try:
    ...     parse_example({"x": {"a": 10**400}, "y": 1})
    ... except BadRecord as e:
    ...     print(e)
    x['a']: |value| an integer of 1329 bits exceeds MAX_ABS_VALUE = 1e+12
    """
    if type(obj) is dict:   # the common records first: a flat row of numbers or a dict of features, a str or 64-bit int label
        x, y = obj.get(x_field), obj.get(y_field)
        t = type(y)
        if t is str or (t is int and -_INT64 <= y < _INT64):
            if type(x) is list and x and (type(x[0]) is float or type(x[0]) is int):
                return _finite_list(x, "x"), y
            if type(x) is dict:
                return _features_dict(x), y
    if not isinstance(obj, dict):
        raise BadRecord(f"expected a JSON object, got {type(obj).__name__}")
    if x_field not in obj:
        raise BadRecord(f"missing field {x_field!r}")
    if y_field not in obj and require_label:
        raise BadRecord(f"missing field {y_field!r}")
    x, y = obj[x_field], obj.get(y_field)
    if y is None and require_label:
        raise BadRecord("missing label (null)")
    if isinstance(x, dict):
        x = _features_dict(x)
    elif isinstance(x, list):
        if len(x) == 0:
            raise BadRecord("empty x")
        t0 = type(x[0])
        if t0 is float or t0 is int:   # a flat row (neither all objects nor all lists)
            x = _finite_list(x, "x")
        elif all(isinstance(t, dict) for t in x):
            x = [_features_dict(t, f"x[{i}]") for i, t in enumerate(x)]
        elif all(isinstance(t, list) for t in x):
            n = len(x[0])
            if any(len(t) != n for t in x):
                raise BadRecord("ragged token vectors (rows of different lengths)")
            x = np.stack([_finite_list(t, f"x[{i}]") for i, t in enumerate(x)]) if n else np.zeros((len(x), 0))
            if x.shape[1] == 0:
                raise BadRecord("empty token vectors")
        else:
            x = _finite_list(x, "x")
    else:
        raise BadRecord(f"x must be an object, a list of numbers or a list of tokens, got {type(x).__name__}")
    if y is None:
        return x, None
    is_seq = isinstance(x, list) or (isinstance(x, np.ndarray) and x.ndim == 2)
    if is_seq:
        if not isinstance(y, list):
            raise BadRecord("a sequence x needs a list of labels y")
        if len(y) != len(x):
            raise BadRecord(f"sequence length mismatch: {len(x)} tokens but {len(y)} labels")
    if isinstance(y, dict):
        y = {k: _truth(v, k) for k, v in y.items()}
    elif isinstance(y, list):
        y = [_label(v, f"label {i}") for i, v in enumerate(y)]
    else:
        y = _label(y)
    return x, y


def decode_json(raw):
    """Decode one JSON record (bytes or str); every failure is a BadRecord: invalid UTF-8 or
    JSON, NaN / Infinity, integers too long to convert, nesting too deep."""
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw)
        if raw.startswith(_BOM):
            raw = raw[len(_BOM):]
        marks = raw.translate(_DIGITS_AND_OPEN) if _orjson is not None else None
        if marks is not None and marks.count(b"[") <= _FAST_MAX_OPEN and _LONG_DIGITS not in marks:
            # orjson (~8x faster on a 16-number record) where it returns what json.loads
            # returns: strict JSON (no NaN / Infinity), integers within 64 bits, correctly
            # rounded doubles, nesting json.loads takes (it refuses deep nesting, orjson may
            # not); anything orjson refuses (a lone surrogate, 1e400) goes to json.loads below
            # for the same result or reason as without it
            try:
                return _orjson.loads(raw)
            except Exception:  # noqa: BLE001 - orjson.JSONDecodeError, RecursionError, ...
                pass
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except BadRecord:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRecord(f"invalid JSON: {e}") from None
    except RecursionError:
        raise BadRecord("invalid JSON: too deeply nested") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise BadRecord(f"invalid JSON: {str(e)[:200]}") from None


class JSONLSource(FileSource):
    """One JSON object per line: ``{"x": ..., "y": ...}``.

    ``x``: an object of features, a list of numbers (a flat numpy array), a list of lists (a
    (tokens, d) array) or a list of feature objects (a sequence); ``y``: a label, a list of
    labels (sequences, multi-label) or an object ``{label: bool}``. NaN / Infinity, missing
    fields, empty or ragged sequences and length mismatches go to the dead-letter sink;
    ``require_label=False`` (predicting) reads a record without ``y`` as ``y = None``.
    ``weight_field=NAME``: the record's importance weight (``Record.w``), a number >= 0 in that
    field (missing, non-numeric, negative or non-finite: a dead letter); ignored when predicting.
    """

    fmt = "jsonl"

    def __init__(self, path, x_field="x", y_field="y", key_field=None, rate=None, dead_letter=None,
                 max_record_bytes=DEFAULT_MAX_RECORD_BYTES, require_label=True, weight_field=None):
        super().__init__(path, rate, dead_letter, max_record_bytes)
        self.x_field, self.y_field, self.key_field = x_field, y_field, key_field
        self.require_label = require_label
        self.weight_field = weight_field

    def _parse(self, text, line):
        obj = decode_json(text)
        x, y = parse_example(obj, self.x_field, self.y_field, self.require_label)
        key = obj.get(self.key_field) if self.key_field else line
        if self.weight_field is None or not self.require_label:
            return x, y, key
        return x, y, key, record_weight(obj, self.weight_field)

    # ------------------------------------------------------------------ micro-batches of rows
    def micro_batches(self, room):
        """:meth:`Source.micro_batches`; where the records are regular -- ``{x_field: [numbers],
        y_field: label}`` and nothing else, every row of one width, a string or 64-bit integer
        label -- a micro-batch is read and validated as one :class:`RecordRows`
        (:meth:`_read_rows`); it ends before any other line (a bad record, blank lines aside, a
        row of another width, another shape), which the record-by-record reader takes with a
        few records after it (8, doubling while the fast reader finds no regular record: a
        file of other records goes in micro-batches of the full size), and the file's first
        record; the same records, dead letters and positions either way."""
        if not self._rows_possible():
            yield from super().micro_batches(room)
            return
        from itertools import islice
        general = 8   # records the general reader takes next: doubling while the records are irregular
        while True:
            k = room()
            rows = self._read_rows(k)
            if rows is _NO_MORE:
                return
            if rows is not None:
                general = 8
                yield rows
                continue
            # the general reader, from the current position (the first record alone: it finds
            # the byte-order mark, the file's identity or the line numbers after a seek)
            k = 1 if not self._offset or not self._line else min(k, general)
            general *= 2
            chunk = list(islice(iter(self), k))
            if chunk:
                yield chunk
            if len(chunk) < k:   # it reached the end of the input (or an unfinished last line)
                return

    def _rows_possible(self):
        return (_orjson is not None and self._pacer.rate is None and self.key_field is None
                and self.weight_field is None and self.require_label and self.x_field != self.y_field)

    def _read_rows(self, k):
        """Up to ``k`` regular records from the current position as a :class:`RecordRows`, the
        position moved past the last one (the rows end before the first record that is not
        regular); ``None`` (nothing read) when the next record is not regular or the file's
        first line is next (its byte-order mark and identity are the general reader's);
        ``_NO_MORE`` at the end of the input (blank lines passed).

        The values are those of the record-by-record reader to the bit: each line is decoded by
        ``orjson`` only under :func:`decode_json`'s conditions for it (no run of 19 digits; a
        regular record nests two deep), the rows converted to float64 by numpy as
        ``np.asarray`` converts each row (integers beyond 10**12 are refused either way), and
        checked as :func:`_finite_list` checks them (finite, ``|v| <= MAX_ABS_VALUE``); a line
        holding a run of 19 digits is decoded by the standard library, as there."""
        if not self._offset or not self._line:
            return None
        cap = self.max_record_bytes
        bodies, ends, lines = [], [], []
        off, line = self._offset, self._line
        with open(self.path, "rb") as f:
            f.seek(off)
            readline = f.readline
            while len(bodies) < k:
                raw = readline(cap + 2)
                if not raw:
                    if not bodies:   # only blank lines were left: passed, as the general reader does
                        self._offset, self._line = off, line
                        return _NO_MORE
                    break
                body = raw.rstrip(b"\r\n")
                if not raw.endswith(b"\n") or len(body) > cap:
                    break   # an unfinished last line or a line too long: the general reader's
                if not body.strip():
                    off += len(raw)
                    line += 1
                    continue
                if not bodies and not self._regular_line(body):
                    return None   # found on the first line, before reading the others
                off += len(raw)
                line += 1
                bodies.append(body)
                ends.append(off)
                lines.append(line)
        if not bodies:
            return None
        # the records before the first irregular one (it and the rest: the general reader's)
        if _LONG_DIGITS not in b"\n".join(bodies).translate(_DIGITS_ONLY):
            loads = _orjson.loads
        else:   # a line with a run of 19 digits is decoded as decode_json decodes it
            def loads(b):
                if _LONG_DIGITS not in b.translate(_DIGITS_ONLY):
                    return _orjson.loads(b)
                return json.loads(b, parse_constant=_reject_constant)
        xf, yf, lim = self.x_field, self.y_field, _INT64
        xs, ys, d = [], [], None
        for b in bodies:
            try:
                o = loads(b)
            except Exception:  # noqa: BLE001 - invalid JSON, a lone surrogate, ...
                break
            if type(o) is not dict or len(o) != 2:
                break
            x, y = o.get(xf), o.get(yf)
            t = type(y)
            if not (t is str or (t is int and -lim <= y < lim)) or type(x) is not list:
                break
            if d is None:
                d = len(x)
            if len(x) != d or not d:
                break
            xs.append(x)
            ys.append(y)
        if not ys:
            return None
        try:
            X = np.array(xs)
        except (ValueError, TypeError):   # e.g. a list inside a row
            return None
        if X.ndim != 2 or (X.dtype != np.float64 and X.dtype != np.int64):   # strings, objects, bools only
            return None
        if X.dtype != np.float64:
            X = X.astype(np.float64)
        ok = np.abs(X).max(axis=1) <= MAX_ABS_VALUE   # False for NaN
        m = len(ys) if ok.all() else int(np.argmin(ok))
        if m == 0:
            return None
        if m < len(ys):
            X, ys = X[:m], ys[:m]
        rec0 = self._record
        self._offset, self._line = ends[m - 1], lines[m - 1]
        self._record += m
        self.n_read += m
        path, ident, name = self.path, self._ident, self.name
        return RecordRows(X, ys, lines[:m],
                          lambda i: {"path": path, "offset": ends[i], "record": rec0 + i + 1, "file": ident},
                          lambda i: f"{name}:{lines[i]}")


    def _regular_line(self, body):
        """Whether a line reads as a regular record at a glance (an object whose x field holds
        a list), so that a file of other records does not read a micro-batch of lines in vain."""
        try:
            o = _orjson.loads(body)
        except Exception:  # noqa: BLE001 - invalid JSON, a lone surrogate, a long number, ...
            return False
        return type(o) is dict and type(o.get(self.x_field)) is list


class CSVSource(FileSource):
    """CSV with a header row; ``label`` names the label column (or its index). The other
    columns are numeric features (empty cells are skipped).

    Label sets: ``multilabel=True`` (implied by ``--task multilabel``) splits the label cell on
    ``multilabel_sep``, by default ``;`` (``politics;tech``); an empty cell is the empty set.
    With the default separator, a label cell holding another likely separator (``|`` or ``,``)
    is a bad record naming ``multilabel_sep=`` rather than one label of
    a made-up set. Giving ``multilabel_sep`` alone also reads label sets.
    ``require_label=False`` (predicting): a file whose header has no label column gives
    records with ``y = None``. ``weight_field=NAME``: that column is the record's importance
    weight (``Record.w``, a number >= 0; a bad cell makes a dead letter), not a feature."""

    fmt = "csv"
    #: the label-set separator of ``multilabel=True`` when ``multilabel_sep`` is not given
    MULTILABEL_SEP = ";"

    def __init__(self, path, label="label", rate=None, dead_letter=None, label_type=str,
                 multilabel_sep=None, delimiter=",", max_record_bytes=DEFAULT_MAX_RECORD_BYTES,
                 multilabel=False, require_label=True, weight_field=None):
        super().__init__(path, rate, dead_letter, max_record_bytes)
        self.label = label
        self.label_type = label_type
        self._guard_sep = multilabel and multilabel_sep is None
        self.multilabel_sep = self.MULTILABEL_SEP if self._guard_sep else multilabel_sep
        self.delimiter = delimiter
        with open(self.path, "rb") as f:
            head = f.readline(max_record_bytes + 2)
        if len(head) > max_record_bytes and not head.endswith(b"\n"):
            raise ValueError(f"{self.path}: the CSV header is longer than max_record_bytes={max_record_bytes}")
        self._header_end = len(head)
        if head.startswith(_BOM):
            head = head[len(_BOM):]
        try:
            self.header = next(csv.reader([head.decode("utf-8").rstrip("\r\n")], delimiter=delimiter))
        except (StopIteration, UnicodeDecodeError):
            raise ValueError(f"{self.path}: the CSV needs a header row") from None
        if isinstance(label, int):
            if not -len(self.header) <= label < len(self.header):
                raise ValueError(f"label column {label} out of range ({len(self.header)} columns)")
            self.label_idx = label % len(self.header)
        elif label in self.header:
            self.label_idx = self.header.index(label)
        elif require_label:
            raise ValueError(f"label column {label!r} not in the header {self.header}")
        else:
            self.label_idx = None   # unlabeled records (predicting): every column is a feature
        self.weight_field = weight_field
        self.weight_idx = None
        if weight_field is not None:
            if weight_field not in self.header:
                raise ValueError(f"weight column {weight_field!r} not in the header {self.header}")
            self.weight_idx = self.header.index(weight_field)
            if self.weight_idx == self.label_idx:
                raise ValueError(f"the weight column {weight_field!r} is the label column")
        self._offset = self._header_end
        self._line = 1
        self._duplicates = len(set(self.header)) != len(self.header)   # rows then checked cell by cell
        self._header_cells = sorted(c.strip() for c in self.header)
        self._header_names = frozenset(self._header_cells)

    def _header_again(self, row, line):
        """A row holding the header's names (files concatenated with their headers): the same
        order is a dead letter; another order stops the run (``SourceFault``), since the rows
        after it would be read by the first header's order with their features swapped."""
        if [c.strip() for c in row] == [c.strip() for c in self.header]:
            raise BadRecord("a repeated header line")
        raise SourceFault(f"{self.path}:{line} is a header line with the columns in another order "
                          f"({_short(','.join(row))} after {_short(','.join(self.header))}): the rows after it "
                          f"would be read with their features swapped; split the file at line {line} and "
                          f"read each part as its own source")

    def _units(self):
        """Records by the ``csv`` module's rules: a quoted field may hold newlines, so a line
        with an open quote continues on the next ones (the record then spans them; bounded by
        ``max_record_bytes``; a quote still open at the end of the file is a bad record)."""
        parts, first, size, quotes = None, None, 0, 0
        for line, _, end, raw in self._lines():
            if isinstance(raw, _Partial):
                if parts is not None:
                    raw = _Partial(b"\n".join(parts + [bytes(raw)])[:self.dead_letter.max_raw_bytes])
                    line = first
                yield line, line, end, raw
                return
            if parts is None:
                if isinstance(raw, _TooLong) or raw.count(b'"') % 2 == 0:
                    yield line, line, end, raw
                    continue
                parts, first, size, quotes = [], line, 0, 0
            if isinstance(raw, _TooLong):
                size += raw.size + 1
                parts.append(raw.head)
                quotes = 1   # unknown inside the skipped part: the record is too long anyway
            else:
                size += len(raw) + 1
                parts.append(raw)
                quotes += raw.count(b'"')
            if quotes % 2 == 0 or size > self.max_record_bytes:
                text = b"\n".join(parts)
                if size > self.max_record_bytes:
                    text = _TooLong(text[:self.dead_letter.max_raw_bytes], size)
                yield first, line, end, text
                parts = None
        if parts is not None:   # a quote still open at the end of the file
            yield first, line, end, _Unclosed(b"\n".join(parts))

    def seek(self, position):
        super().seek(position)
        if self._offset < self._header_end:
            self._offset, self._line = self._header_end, 1

    def _parse(self, text, line):
        if isinstance(text, _Unclosed):
            raise BadRecord("a quoted field is still open at the end of the file")
        try:
            row = next(csv.reader([text.decode("utf-8")], delimiter=self.delimiter))
        except (UnicodeDecodeError, csv.Error) as e:
            raise BadRecord(f"unreadable CSV line: {e}") from None
        if len(row) != len(self.header):
            raise BadRecord(f"{len(row)} columns, the header has {len(self.header)}")
        if row and row[0].strip() in self._header_names and self._header_cells == sorted(c.strip() for c in row):
            self._header_again(row, line)
        plain = text.isascii() and b"_" not in text   # then every cell is plain ASCII without "_"
        y = None if self.label_idx is None else self._cell_labels(row[self.label_idx].strip())
        x = {}
        for j, (name, v) in enumerate(zip(self.header, row)):
            if j == self.label_idx or j == self.weight_idx or v.strip() == "":
                continue
            if self._duplicates and name in x:
                raise BadRecord(f"duplicate column {_short(name)}: two values for one feature")
            x[name] = _float_cell(v, name, plain)
        if self.weight_idx is None or self.label_idx is None:
            return x, y, line
        return x, y, line, parse_weight(row[self.weight_idx].strip(), f"weight column {_short(self.weight_field)}")

    def _cell_labels(self, cell):
        if not self.multilabel_sep:
            if cell == "":
                raise BadRecord("empty label")
            return self._label(cell)
        if self._guard_sep and self.multilabel_sep not in cell:
            for sep in ("|", ","):
                if sep in cell:
                    raise BadRecord(f"label cell {_short(cell)} holds {sep!r}: label sets are split on "
                                    f"{self.multilabel_sep!r} by default; give the source "
                                    f"?multilabel_sep={sep} if {sep!r} separates the labels")
        return [self._label(c) for c in cell.split(self.multilabel_sep) if c.strip()]

    def _label(self, cell):
        if self.label_type in (int, float):   # exactly, ASCII digits only (not through float())
            lab = _number_label(cell)
            if self.label_type is int and not isinstance(lab, int):
                raise BadRecord(f"label {_short(cell)} is not an int")
            return float(lab) if self.label_type is float else lab
        try:
            lab = self.label_type(cell.strip())
        except (TypeError, ValueError, OverflowError):
            raise BadRecord(f"label {_short(cell)} is not a {getattr(self.label_type, '__name__', self.label_type)}") from None
        return _label(lab)


class LibSVMSource(FileSource):
    """libsvm / svmlight: ``label[,label...] idx:val idx:val ... [# comment]``.
    ``multilabel=True`` gives lists of int labels (an empty label field is an empty set)."""

    fmt = "libsvm"

    def __init__(self, path, multilabel=False, rate=None, dead_letter=None, zero_based=True,
                 max_record_bytes=DEFAULT_MAX_RECORD_BYTES):
        super().__init__(path, rate, dead_letter, max_record_bytes)
        self.multilabel = multilabel
        self.zero_based = zero_based

    def _content(self, raw):
        return raw.split(b"#", 1)[0]

    def _parse(self, text, line):
        try:
            s = text.decode("ascii")
        except UnicodeDecodeError:
            raise BadRecord("non-ASCII bytes in a libsvm line") from None
        parts = s.split()
        if self.multilabel and ":" in parts[0]:
            lab, feats = "", parts
        else:
            lab, feats = parts[0], parts[1:]
        y = self._labels(lab)
        x = {}
        if "_" in s:   # the line is ASCII: int() / float() then take only decimal forms
            tok = next(t for t in parts if "_" in t)
            raise BadRecord(f"bad feature token {_short(tok)}" if ":" in tok else f"bad label {_short(tok)}")
        for tok in feats:
            if ":" not in tok:
                raise BadRecord(f"bad feature token {tok!r} (expected idx:val)")
            i, v = tok.split(":", 1)
            try:
                idx = int(i)
                f = float(v)
            except ValueError:
                raise BadRecord(f"bad feature token {_short(tok)}") from None
            if idx < 0 or (idx == 0 and not self.zero_based) or idx >= 2**63:
                raise BadRecord(f"bad feature index {_short(idx)}")
            k = str(idx)
            if k in x:
                raise BadRecord(f"duplicate feature index {idx}")
            x[k] = f if -MAX_ABS_VALUE <= f <= MAX_ABS_VALUE else _finite(f, f"feature {idx}")
        return x, y, line

    def _labels(self, lab):
        one = _number_label
        if self.multilabel:
            return [one(t) for t in lab.split(",") if t.strip()]
        if "," in lab:
            raise BadRecord(f"several labels {lab!r} in a single-label file (use multilabel=True)")
        return one(lab)


def _shape(w):
    out = []
    for ch in w:
        c = "X" if ch.isupper() else "x" if ch.islower() else "d" if ch.isdigit() else ch
        if not out or out[-1] != c:
            out.append(c)
    return "".join(out)


def default_token_features(tokens, t, label_column):
    """Features of token t of a sentence (rows of columns, label column excluded):
    ``w=`` lowercased word, ``suf3=``, ``pre2=``, ``shape=`` (character classes collapsed),
    ``is_title``, ``has_digit``, ``c<j>=`` for the other columns, ``w-1=`` / ``w+1=`` for the
    neighbours (``<s>`` / ``</s>`` at the edges). All values 1.0; the model adds the bias."""
    row = tokens[t]
    w = row[0]
    lw = w.lower()
    f = {"w=" + lw: 1.0, "suf3=" + lw[-3:]: 1.0, "pre2=" + lw[:2]: 1.0, "shape=" + _shape(w): 1.0}
    if w[:1].isupper():
        f["is_title"] = 1.0
    if any(ch.isdigit() for ch in w):
        f["has_digit"] = 1.0
    ncol = len(row)
    lc = None if label_column is None else label_column % ncol
    for j in range(1, ncol):
        if j != lc:
            f[f"c{j}={row[j]}"] = 1.0
    f["w-1=" + (tokens[t - 1][0].lower() if t > 0 else "<s>")] = 1.0
    f["w+1=" + (tokens[t + 1][0].lower() if t + 1 < len(tokens) else "</s>")] = 1.0
    return f


class CoNLLSource(FileSource):
    """CoNLL-style sequences: one token per line (whitespace-separated columns, the label in
    ``label_column``, default the last), a blank line between sentences, ``-DOCSTART-`` lines
    skipped. Records: x = list of per-token feature dicts (``features(tokens, t,
    label_column)``, default :func:`default_token_features`), y = list of labels.
    ``require_label=False`` (predicting): a file of one column (the words) gives records with
    ``y = None``; ``label_column=None`` (``?label_column=none``) reads every column as a feature
    column and gives ``y = None`` whatever the number of columns (words with other columns, no tag)."""

    fmt = "conll"

    def __init__(self, path, rate=None, dead_letter=None, label_column=-1, features=default_token_features,
                 max_record_bytes=DEFAULT_MAX_RECORD_BYTES, require_label=True):
        super().__init__(path, rate, dead_letter, max_record_bytes)
        if isinstance(label_column, str) and label_column.lower() == "none":
            label_column = None
        if label_column is not None and (isinstance(label_column, bool) or not isinstance(label_column, int)):
            raise ValueError(f"label_column={label_column!r}: give a column number (0 the first, -1 the last) "
                             "or none (the records carry no tags)")
        if label_column is None and require_label:
            raise ValueError("label_column=none reads records without tags: only predict takes them")
        self.label_column = label_column
        self.features = features
        self.require_label = require_label

    def __iter__(self):
        rows, first_line, size = [], None, 0
        for line, start, end, raw in self._lines():
            if isinstance(raw, _Partial):   # the position stays before the unfinished sentence
                if raw.strip() or rows:
                    held = rows.head if isinstance(rows, _TooLong) else b"\n".join(
                        [r.head if isinstance(r, _TooLong) else r for r in rows] + [bytes(raw)])
                    self._bad(held, _PARTIAL_REASON, first_line or line)
                return
            if isinstance(raw, _TooLong) or (raw.strip() and not raw.startswith(b"-DOCSTART-")):
                if first_line is None:
                    first_line = line
                # a sentence longer than max_record_bytes keeps only its head (for the dead letter)
                size += raw.size if isinstance(raw, _TooLong) else len(raw) + 1
                if isinstance(rows, _TooLong):
                    rows.size = size
                elif size > self.max_record_bytes:
                    head = b"\n".join(r.head if isinstance(r, _TooLong) else r for r in rows + [raw])
                    rows = _TooLong(head[:self.dead_letter.max_raw_bytes], size)
                else:
                    rows.append(raw)
                continue
            # blank line (or DOCSTART): the sentence ends; the position moves past it
            self._line = line
            self._offset = end
            if rows:
                rec = self._sentence(rows, first_line)
                rows, first_line, size = [], None, 0
                if rec is not None:
                    yield rec
        if rows:  # last sentence without a trailing blank line
            self._offset = os.path.getsize(self.path)
            rec = self._sentence(rows, first_line)
            if rec is not None:
                yield rec

    def _sentence(self, rows, first_line):
        if isinstance(rows, _TooLong):
            self._bad(rows, f"sentence of {rows.size} bytes exceeds max_record_bytes={self.max_record_bytes}",
                      first_line)
            return None
        raw = b"\n".join(rows)
        try:
            try:
                toks = [r.decode("utf-8").split() for r in rows]
            except UnicodeDecodeError:
                raise BadRecord("non-UTF-8 bytes") from None
            n = len(toks[0])
            if n < 2 and self.require_label:
                raise BadRecord("a token line needs at least a word and a label")
            for i, tk in enumerate(toks):
                if len(tk) != n:
                    raise BadRecord(f"token {i + 1} has {len(tk)} columns, the sentence's first has {n}")
            y = None if n < 2 or self.label_column is None else [tk[self.label_column] for tk in toks]
            x = [self.features(toks, t, self.label_column) for t in range(len(toks))]
        except Exception as e:  # noqa: BLE001 - any failure on one record is a dead letter
            self._bad(raw, _reason(e), first_line)
            return None
        return self._emit(x, y, first_line, first_line)


_SOURCES = {"jsonl": JSONLSource, "csv": CSVSource, "libsvm": LibSVMSource, "conll": CoNLLSource}


def _coerce(v):
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    return v


SOURCE_OPTIONS = """\
file sources: file://PATH[?OPTION=VALUE&...] (or a plain PATH). The format comes from the
extension (.jsonl .json .ndjson: JSONL; .csv; .libsvm .svm .svmlight: libsvm; .txt: JSONL if
its first line starts with '{', else libsvm; .conll .conllu .iob .bio: CoNLL) or from an option:
  format=jsonl|csv|libsvm|conll   override the extension
  rate=N                          replay at N records per second
  max_record_bytes=N              skip longer records (default 1048576)
  jsonl: x_field=x, y_field=y, key_field=NAME  field names of the features, label and key
  jsonl, csv, kafka: weight_field=NAME  the field / column holding each record's importance
       weight (a number >= 0, learned as learn_one(x, y, w); a record with a bad or missing
       weight is a dead letter; a learner that takes no weights makes a weight other than 0
       and 1 a dead letter too)
  csv: label=NAME (default: label), delimiter=, multilabel_sep=SEP  (label sets split on SEP;
       --task multilabel splits on ';' by default and refuses cells holding '|' or ',')
  libsvm: multilabel=true (comma-separated labels; implied by --task multilabel), zero_based=true
  conll: label_column=-1 (the column holding the tag; none: no tags, every column a feature,
       for predicting on a file of several columns without its tag column)"""


def parse_file_uri(uri):
    """``(path, options)`` of ``file://path?k=v&...`` or a plain path; option values are
    converted to int / float / bool when they read as one.

    >>> parse_file_uri("file://d/x.libsvm?multilabel=true&rate=10")
    ('d/x.libsvm', {'multilabel': True, 'rate': 10})
    """
    uri = os.fspath(uri)
    if uri.startswith("file://"):
        u = urlparse(uri)
        return unquote((u.netloc or "") + u.path), {k: _coerce(v) for k, v in parse_qsl(u.query)}
    if "://" in uri:
        raise ValueError(f"unsupported source {uri!r}: file sources take file://path or a plain path")
    return uri, {}


def detect_format(path, fmt=None):
    """The source format of ``path``: ``fmt`` if given, else from the extension; a ``.txt`` file
    whose first non-blank line starts with ``{`` is JSONL (else libsvm). A directory or an
    unknown extension raises ValueError naming what to do."""
    if os.path.isdir(path):
        raise ValueError(f"{path} is a directory; give one file (e.g. file://{os.path.join(path, 'data.jsonl')})")
    if fmt == "svmlight":
        fmt = "libsvm"
    ext = os.path.splitext(path)[1].lower()
    if fmt is None:
        fmt = _EXT.get(ext)
        if ext == ".txt" and os.path.isfile(path):
            with open(path, "rb") as f:
                for raw in f:
                    if raw.strip():
                        if raw.lstrip(_BOM + b" \t").startswith(b"{"):
                            fmt = "jsonl"
                        break
    if fmt not in _SOURCES:
        raise ValueError(f"cannot tell the format of {path!r}; use ?format= one of {FORMATS} "
                         f"(extensions: {', '.join(sorted(_EXT))})")
    return fmt


def open_source(uri, **kwargs) -> FileSource:
    """A file source from ``file://path?format=...&rate=...`` or a plain path. The format comes
    from ``format=`` or the extension (see :data:`SOURCE_OPTIONS` and :func:`detect_format`);
    other query parameters are passed to the source."""
    path, params = parse_file_uri(uri)
    params.update(kwargs)
    fmt = detect_format(path, params.pop("format", None))
    return _SOURCES[fmt](path, **params)


def write_jsonl(path, records) -> int:
    """Write ``{"x", "y"}`` dicts (numpy arrays become lists) as JSON lines; returns the count."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)) + "\n")
            n += 1
    return n


__all__ = ["FORMATS", "SOURCE_OPTIONS", "detect_format", "parse_file_uri", "decode_json", "FileSource", "JSONLSource", "CSVSource", "LibSVMSource", "CoNLLSource",
           "open_source", "write_jsonl", "parse_example", "default_token_features", "BadRecord"]
