"""File sources: JSONL, CSV, libsvm / svmlight, CoNLL — replayed as fast as possible or paced,
with resumable positions (byte offsets) and dead letters for bad lines.

Position of every file source: ``{"path": ..., "offset": byte offset of the next unread
record, "record": records yielded so far}``. ``seek`` on a fresh source resumes right after the
record that position was taken at.

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
import time
from urllib.parse import parse_qsl, unquote, urlparse

import numpy as np

from .base import DeadLetterSink, Record, Source

FORMATS = ("jsonl", "csv", "libsvm", "conll")
_EXT = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".libsvm": "libsvm",
        ".svm": "libsvm", ".svmlight": "libsvm", ".txt": "libsvm", ".conll": "conll",
        ".conllu": "conll", ".iob": "conll", ".bio": "conll"}


class BadRecord(ValueError):
    """Raised by parsers; the message is the dead-letter reason."""


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

    def __init__(self, path, rate=None, dead_letter: DeadLetterSink | None = None):
        super().__init__()
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"no such file: {self.path}")
        self.name = os.path.basename(self.path)
        self.dead_letter = dead_letter if dead_letter is not None else DeadLetterSink()
        self._pacer = Pacer(rate)
        self._offset = 0
        self._record = 0
        self._line = 0

    def position(self):
        return {"path": self.path, "offset": self._offset, "record": self._record}

    def seek(self, position):
        if not isinstance(position, dict) or "offset" not in position:
            raise ValueError(f"not a file position: {position!r}")
        off = int(position["offset"])
        size = os.path.getsize(self.path)
        if off < 0 or off > size:
            raise ValueError(f"position offset {off} is outside {self.path} ({size} bytes)")
        self._offset = off
        self._record = int(position.get("record", 0))
        self._line = int(position.get("line", 0))

    def _bad(self, raw, reason, line):
        self.n_bad += 1
        self.dead_letter.send(raw, reason, f"{self.name}:{line}")

    def _emit(self, x, y, key, line):
        self._pacer.wait()
        self._record += 1
        self.n_read += 1
        return Record(x=x, y=y, key=key, position=self.position(), origin=f"{self.name}:{line}")

    def _lines(self):
        """(line number, start offset, end offset, raw bytes without newline) from the current
        offset; line numbers count from 1 at the start of the file."""
        with open(self.path, "rb") as f:
            if self._offset and not self._line:
                # recover the line number for messages
                f.seek(0)
                self._line = f.read(self._offset).count(b"\n")
            f.seek(self._offset)
            line = self._line
            off = self._offset
            for raw in f:
                line += 1
                start = off
                off += len(raw)
                yield line, start, off, raw.rstrip(b"\r\n")

    def __iter__(self):  # pragma: no cover - subclasses
        raise NotImplementedError


# ----------------------------------------------------------------------------- value checks
def _reject_constant(c):
    raise BadRecord(f"non-finite number {c} in JSON")


def _finite(v, what):
    if isinstance(v, bool):
        return float(v)
    if not isinstance(v, (int, float)):
        raise BadRecord(f"{what}: non-numeric value {v!r}")
    f = float(v)
    if not math.isfinite(f):
        raise BadRecord(f"{what}: non-finite value {v!r}")
    return f


def _features_dict(d, what="x"):
    out = {}
    for k, v in d.items():
        out[k] = _finite(v, f"{what}[{k!r}]")
    return out


def parse_example(obj, x_field="x", y_field="y"):
    """Validate a decoded JSON example and convert x (see module docstring). Raises BadRecord."""
    if not isinstance(obj, dict):
        raise BadRecord(f"expected a JSON object, got {type(obj).__name__}")
    if x_field not in obj:
        raise BadRecord(f"missing field {x_field!r}")
    if y_field not in obj:
        raise BadRecord(f"missing field {y_field!r}")
    x, y = obj[x_field], obj[y_field]
    if y is None:
        raise BadRecord("missing label (null)")
    if isinstance(x, dict):
        x = _features_dict(x)
    elif isinstance(x, list):
        if len(x) == 0:
            raise BadRecord("empty x")
        if all(isinstance(t, dict) for t in x):
            x = [_features_dict(t, f"x[{i}]") for i, t in enumerate(x)]
        elif all(isinstance(t, list) for t in x):
            n = len(x[0])
            if any(len(t) != n for t in x):
                raise BadRecord("ragged token vectors (rows of different lengths)")
            for i, t in enumerate(x):
                for v in t:
                    _finite(v, f"x[{i}]")
            x = np.asarray(x, dtype=np.float64)
            if x.shape[1] == 0:
                raise BadRecord("empty token vectors")
        else:
            for v in x:
                _finite(v, "x")
            x = np.asarray(x, dtype=np.float64)
    else:
        raise BadRecord(f"x must be an object, a list of numbers or a list of tokens, got {type(x).__name__}")
    is_seq = isinstance(x, list) or (isinstance(x, np.ndarray) and x.ndim == 2)
    if is_seq:
        if not isinstance(y, list):
            raise BadRecord("a sequence x needs a list of labels y")
        if len(y) != len(x):
            raise BadRecord(f"sequence length mismatch: {len(x)} tokens but {len(y)} labels")
    if isinstance(y, float) and not math.isfinite(y):
        raise BadRecord("non-finite label")
    return x, y


class JSONLSource(FileSource):
    """One JSON object per line: ``{"x": ..., "y": ...}``.

    ``x``: an object of features, a list of numbers (a flat numpy array), a list of lists (a
    (tokens, d) array) or a list of feature objects (a sequence); ``y``: a label, a list of
    labels (sequences, multi-label) or an object ``{label: bool}``. NaN / Infinity, missing
    fields, empty or ragged sequences and length mismatches go to the dead-letter sink.
    """

    fmt = "jsonl"

    def __init__(self, path, x_field="x", y_field="y", key_field=None, rate=None, dead_letter=None,
                 max_line_bytes=16 * 2**20):
        super().__init__(path, rate, dead_letter)
        self.x_field, self.y_field, self.key_field = x_field, y_field, key_field
        self.max_line_bytes = max_line_bytes

    def __iter__(self):
        for line, start, end, raw in self._lines():
            self._offset, self._line = end, line
            if not raw.strip():
                continue
            try:
                if len(raw) > self.max_line_bytes:
                    raise BadRecord(f"line longer than {self.max_line_bytes} bytes")
                try:
                    obj = json.loads(raw, parse_constant=_reject_constant)
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    raise BadRecord(f"invalid JSON: {e}") from None
                x, y = parse_example(obj, self.x_field, self.y_field)
                key = obj.get(self.key_field) if self.key_field else line
            except BadRecord as e:
                self._bad(raw, str(e), line)
                continue
            yield self._emit(x, y, key, line)


class CSVSource(FileSource):
    """CSV with a header row; ``label`` names the label column (or its index). The other
    columns are numeric features (empty cells are skipped). ``multilabel_sep`` splits the label
    cell into a list of labels."""

    fmt = "csv"

    def __init__(self, path, label="label", rate=None, dead_letter=None, label_type=str,
                 multilabel_sep=None, delimiter=","):
        super().__init__(path, rate, dead_letter)
        self.label = label
        self.label_type = label_type
        self.multilabel_sep = multilabel_sep
        self.delimiter = delimiter
        with open(self.path, "rb") as f:
            head = f.readline()
        self._header_end = len(head)
        try:
            self.header = next(csv.reader([head.decode("utf-8").rstrip("\r\n")], delimiter=delimiter))
        except (StopIteration, UnicodeDecodeError):
            raise ValueError(f"{self.path}: the CSV needs a header row") from None
        if isinstance(label, int):
            if not -len(self.header) <= label < len(self.header):
                raise ValueError(f"label column {label} out of range ({len(self.header)} columns)")
            self.label_idx = label % len(self.header)
        else:
            if label not in self.header:
                raise ValueError(f"label column {label!r} not in the header {self.header}")
            self.label_idx = self.header.index(label)
        self._offset = self._header_end
        self._line = 1

    def seek(self, position):
        super().seek(position)
        if self._offset < self._header_end:
            self._offset, self._line = self._header_end, 1

    def __iter__(self):
        for line, start, end, raw in self._lines():
            self._offset, self._line = end, line
            if not raw.strip():
                continue
            try:
                try:
                    row = next(csv.reader([raw.decode("utf-8")], delimiter=self.delimiter))
                except (UnicodeDecodeError, csv.Error) as e:
                    raise BadRecord(f"unreadable CSV line: {e}") from None
                if len(row) != len(self.header):
                    raise BadRecord(f"{len(row)} columns, the header has {len(self.header)}")
                cell = row[self.label_idx].strip()
                if cell == "" and not self.multilabel_sep:
                    raise BadRecord("empty label")
                if self.multilabel_sep:
                    y = [self._label(c) for c in cell.split(self.multilabel_sep) if c.strip()]
                else:
                    y = self._label(cell)
                x = {}
                for j, (name, v) in enumerate(zip(self.header, row)):
                    if j == self.label_idx or v.strip() == "":
                        continue
                    try:
                        f = float(v)
                    except ValueError:
                        raise BadRecord(f"column {name!r}: non-numeric value {v!r}") from None
                    if not math.isfinite(f):
                        raise BadRecord(f"column {name!r}: non-finite value {v!r}")
                    x[name] = f
            except BadRecord as e:
                self._bad(raw, str(e), line)
                continue
            yield self._emit(x, y, line, line)

    def _label(self, cell):
        try:
            return self.label_type(cell.strip())
        except (TypeError, ValueError):
            raise BadRecord(f"label {cell!r} is not a {getattr(self.label_type, '__name__', self.label_type)}") from None


class LibSVMSource(FileSource):
    """libsvm / svmlight: ``label[,label...] idx:val idx:val ... [# comment]``.
    ``multilabel=True`` gives lists of int labels (an empty label field is an empty set)."""

    fmt = "libsvm"

    def __init__(self, path, multilabel=False, rate=None, dead_letter=None, zero_based=True):
        super().__init__(path, rate, dead_letter)
        self.multilabel = multilabel
        self.zero_based = zero_based

    def __iter__(self):
        for line, start, end, raw in self._lines():
            self._offset, self._line = end, line
            text = raw.split(b"#", 1)[0]
            if not text.strip():
                continue
            try:
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
                for tok in feats:
                    if ":" not in tok:
                        raise BadRecord(f"bad feature token {tok!r} (expected idx:val)")
                    i, v = tok.split(":", 1)
                    try:
                        idx = int(i)
                        f = float(v)
                    except ValueError:
                        raise BadRecord(f"bad feature token {tok!r}") from None
                    if idx < 0 or (idx == 0 and not self.zero_based):
                        raise BadRecord(f"bad feature index {idx}")
                    if not math.isfinite(f):
                        raise BadRecord(f"non-finite value in {tok!r}")
                    x[str(idx)] = f
            except BadRecord as e:
                self._bad(raw, str(e), line)
                continue
            yield self._emit(x, y, line, line)

    def _labels(self, lab):
        def one(t):
            try:
                f = float(t)
            except ValueError:
                raise BadRecord(f"bad label {t!r}") from None
            if not math.isfinite(f):
                raise BadRecord(f"non-finite label {t!r}")
            return int(f) if f == int(f) else f
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
    lc = label_column % ncol
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
    label_column)``, default :func:`default_token_features`), y = list of labels."""

    fmt = "conll"

    def __init__(self, path, rate=None, dead_letter=None, label_column=-1, features=default_token_features):
        super().__init__(path, rate, dead_letter)
        self.label_column = label_column
        self.features = features

    def __iter__(self):
        rows, first_line = [], None
        for line, start, end, raw in self._lines():
            if raw.strip() and not raw.startswith(b"-DOCSTART-"):
                if first_line is None:
                    first_line = line
                rows.append(raw)
                continue
            # blank line (or DOCSTART): the sentence ends; the position moves past it
            self._line = line
            self._offset = end
            if rows:
                rec = self._sentence(rows, first_line)
                rows, first_line = [], None
                if rec is not None:
                    yield rec
        if rows:  # last sentence without a trailing blank line
            self._offset = os.path.getsize(self.path)
            rec = self._sentence(rows, first_line)
            if rec is not None:
                yield rec

    def _sentence(self, rows, first_line):
        raw = b"\n".join(rows)
        try:
            try:
                toks = [r.decode("utf-8").split() for r in rows]
            except UnicodeDecodeError:
                raise BadRecord("non-UTF-8 bytes") from None
            n = len(toks[0])
            if n < 2:
                raise BadRecord("a token line needs at least a word and a label")
            for i, tk in enumerate(toks):
                if len(tk) != n:
                    raise BadRecord(f"token {i + 1} has {len(tk)} columns, the sentence's first has {n}")
            y = [tk[self.label_column] for tk in toks]
            x = [self.features(toks, t, self.label_column) for t in range(len(toks))]
        except BadRecord as e:
            self._bad(raw, str(e), first_line)
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


def open_source(uri, **kwargs) -> FileSource:
    """A file source from ``file://path?format=...&rate=...`` or a plain path. The format comes
    from ``format=`` or the extension (.jsonl/.json, .csv, .libsvm/.svm/.svmlight/.txt,
    .conll/.conllu/.iob); other query parameters are passed to the source."""
    uri = os.fspath(uri)
    params = {}
    if uri.startswith("file://"):
        u = urlparse(uri)
        path = unquote((u.netloc or "") + u.path)
        params = {k: _coerce(v) for k, v in parse_qsl(u.query)}
    elif "://" in uri:
        raise ValueError(f"unsupported source {uri!r}: file sources take file://path or a plain path")
    else:
        path = uri
    params.update(kwargs)
    fmt = params.pop("format", None)
    if fmt == "svmlight":
        fmt = "libsvm"
    if fmt is None:
        fmt = _EXT.get(os.path.splitext(path)[1].lower())
    if fmt not in _SOURCES:
        raise ValueError(f"cannot tell the format of {path!r}; use ?format= one of {FORMATS} "
                         f"(extensions: {', '.join(sorted(_EXT))})")
    return _SOURCES[fmt](path, **params)


def write_jsonl(path, records) -> int:
    """Write ``{"x", "y"}`` dicts (numpy arrays become lists) as JSON lines; returns the count."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)) + "\n")
            n += 1
    return n


__all__ = ["FORMATS", "FileSource", "JSONLSource", "CSVSource", "LibSVMSource", "CoNLLSource",
           "open_source", "write_jsonl", "parse_example", "default_token_features", "BadRecord"]
