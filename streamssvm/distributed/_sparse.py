"""Sparse weight messages between the workers and the mixer (no Ray here).

A worker's change over a round touches few entries of the weight sums: on 5,000 Brown sentences
with 472 tags hashed to 2^14 features, about half the emission rows but 0.7% of the entries
(the tags of a token's gold and predicted labelings). A round therefore sends

* up, each worker's delta ``D_k`` as the positions and values of its non-zero entries;
* down, the mixed point as the entries where it differs (bit for bit) from the mixer's previous
  mixed point, which every worker holds (:class:`Changes`).

The mixer scatters the deltas into dense arrays and mixes them with the same operations in the
same order as the dense mixing, and a worker rebuilds the dense mixed point from the previous one
and the changed entries: the weights are the same bits as when every message was dense. An array
with more than :data:`DENSE_FRACTION` of its entries non-zero (or changed) travels dense, which is
never larger.
"""
from __future__ import annotations

import numpy as np

#: an array travels dense once more than this fraction of its entries would be listed: an entry
#: listed costs its 8-byte value and a 4-byte position (8 past 2^31 entries)
DENSE_FRACTION = 0.5


def _index_type(shape):
    """4-byte positions where they reach every entry, else 8-byte ones."""
    return np.int32 if int(np.prod(shape, dtype=np.int64)) < 2 ** 31 else np.int64


class SparseArray:
    """A float64 array of ``shape`` that is 0 except at the flat positions ``index``
    (``values`` there).

    >>> s = SparseArray.of(np.array([[0.0, 2.0], [0.0, 0.0]]))
    >>> s.index.tolist(), s.values.tolist(), s.dense().tolist()
    ([1], [2.0], [[0.0, 2.0], [0.0, 0.0]])
    """

    __slots__ = ("shape", "index", "values")

    def __init__(self, shape, index, values):
        self.shape = tuple(int(s) for s in shape)
        self.index = np.asarray(index, dtype=_index_type(self.shape))
        self.values = np.asarray(values, dtype=np.float64)

    @classmethod
    def of(cls, a):
        a = np.asarray(a, dtype=np.float64)
        idx = np.flatnonzero(a)
        return cls(a.shape, idx, a.reshape(-1)[idx])

    @property
    def nbytes(self):
        return int(self.index.nbytes + self.values.nbytes)

    def dense(self):
        out = np.zeros(self.shape)
        out.reshape(-1)[self.index] = self.values
        return out

    def __getstate__(self):
        return self.shape, self.index, self.values

    def __setstate__(self, st):
        self.shape, self.index, self.values = st


def pack(arrays):
    """``{name: array}`` for the wire: every array that is mostly 0 as a :class:`SparseArray`
    (its non-zero entries; a -0.0 entry is left out, which adding it to a sum does not see)."""
    out = {}
    for k, a in arrays.items():
        a = np.asarray(a, dtype=np.float64)
        nz = np.count_nonzero(a)
        out[k] = SparseArray.of(a) if nz <= DENSE_FRACTION * a.size else a
    return out


def unpack(arrays):
    """The dense arrays of :func:`pack` (dense ones as they are)."""
    return {k: v.dense() if isinstance(v, SparseArray) else v for k, v in arrays.items()}


def nbytes(arrays):
    """Bytes of the arrays' payload on the wire (positions and values of sparse ones)."""
    return int(sum(v.nbytes for v in arrays.values()))


def _fit(a, shape):
    """``a`` cut or padded with zeros to ``shape`` (a copy)."""
    out = np.zeros(shape)
    if a is not None:
        a = np.asarray(a, dtype=np.float64)
        sl = tuple(slice(0, min(s, t)) for s, t in zip(a.shape, shape))
        out[sl] = a[sl]
    return out


class Changes:
    """The mixed point of round ``round`` as the entries where it differs from the mixed point of
    round ``base_round``: per array its shape and either the changed entries
    (:class:`SparseArray` of the new values; positions compared bit for bit, so -0.0 against 0.0
    counts as a change) or the whole array.

    >>> old = {"E": np.zeros((2, 2))}
    >>> new = {"E": np.array([[0.0, 1.5], [0.0, 0.0]])}
    >>> c = Changes.between(old, new, base_round=3, round=4)
    >>> c.apply(old)["E"].tolist(), c.nbytes
    ([[0.0, 1.5], [0.0, 0.0]], 12)
    """

    __slots__ = ("base_round", "round", "arrays")

    def __init__(self, base_round, round, arrays):
        self.base_round, self.round, self.arrays = int(base_round), int(round), dict(arrays)

    @classmethod
    def between(cls, old, new, base_round, round):
        arrays = {}
        for k, a in new.items():
            a = np.ascontiguousarray(a, dtype=np.float64)
            o = old.get(k)
            same_shape = o is not None and np.shape(o) == a.shape
            b = np.ascontiguousarray(o, dtype=np.float64) if same_shape else _fit(o, a.shape)
            idx = np.flatnonzero(a.reshape(-1).view(np.uint64) != b.reshape(-1).view(np.uint64))
            if idx.size > DENSE_FRACTION * a.size:
                arrays[k] = a
            else:
                arrays[k] = SparseArray(a.shape, idx, a.reshape(-1)[idx])
        return cls(base_round, round, arrays)

    @property
    def nbytes(self):
        return nbytes(self.arrays)

    def apply(self, base):
        """The new mixed point from the mixed point of ``base_round`` (``base``; its arrays are
        not changed): new arrays, each the base fitted to the new shape with the changes set."""
        out = {}
        for k, v in self.arrays.items():
            if isinstance(v, SparseArray):
                b = base.get(k)
                a = np.array(b, dtype=np.float64) if b is not None and np.shape(b) == v.shape else _fit(b, v.shape)
                a.reshape(-1)[v.index] = v.values
                out[k] = a
            else:
                out[k] = np.array(v, dtype=np.float64)
        return out

    def __getstate__(self):
        return self.base_round, self.round, self.arrays

    def __setstate__(self, st):
        self.base_round, self.round, self.arrays = st


def combine_packed(start, deltas, gamma):
    """``start + gamma * sum(deltas)`` for packed deltas (:func:`pack`), the same bits as
    :func:`streamssvm.distributed._mix.combine` of the dense deltas, in a pass over ``start`` and
    work on the listed entries only: an entry no delta lists is ``start + gamma * 0.0`` there
    (``start + 0.0``, which turns -0.0 into 0.0, for gamma >= 0; ``start`` itself for gamma < 0),
    a listed one ``start + gamma * ((0.0 + d_1) + d_2 ...)`` with the deltas in their order. An
    array whose shapes differ or that some delta sends dense is combined dense.

    >>> a = {"E": np.array([[1.0, -0.0], [2.0, 3.0]])}
    >>> d = [pack({"E": np.array([[0.0, 0.0], [0.0, 1.0]])}), pack({"E": np.array([[0.5, 0.0], [0.0, 1.0]])})]
    >>> combine_packed(a, d, 0.5)["E"].tolist(), combine_packed({}, d, 1.0)["E"].tolist()
    ([[1.25, 0.0], [2.0, 4.0]], [[0.5, 0.0], [0.0, 2.0]])
    """
    from ._mix import combine
    gamma = float(gamma)
    keys = set(start).union(*deltas) if deltas else set(start)
    out = {}
    for k in sorted(keys):
        listed = [d[k] for d in deltas if k in d]
        s = None if k not in start else np.asarray(start[k], dtype=np.float64)
        shape = listed[0].shape if s is None and listed else (None if s is None else s.shape)
        if shape is None or not all(isinstance(v, SparseArray) and v.shape == shape for v in listed):
            part = {k: start[k]} if k in start else {}
            out[k] = combine(part, [{k: v.dense() if isinstance(v, SparseArray) else v} for v in listed], gamma)[k]
            continue
        idx = np.unique(np.concatenate([v.index.astype(np.int64) for v in listed])) if listed else \
            np.zeros(0, dtype=np.int64)
        acc = np.zeros(idx.size)
        for v in listed:
            acc[np.searchsorted(idx, v.index)] += v.values
        if s is None:   # combine: 0.0 + gamma * acc
            o = np.zeros(shape)
            o.reshape(-1)[idx] = 0.0 + gamma * acc
        else:
            o = s + 0.0 if gamma >= 0.0 else s.copy()
            o.reshape(-1)[idx] = s.reshape(-1)[idx] + gamma * acc
        out[k] = o
    return out
