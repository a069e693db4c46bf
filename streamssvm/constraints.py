"""Constraints on a decoded output: ``predict_one(x, constraints=...)`` and
``predict_nbest_one(x, k, constraints=...)`` return the best outputs that satisfy them.

* Sequences (:class:`~streamssvm.SequenceTagger`): ``fixed={position: tag}`` forces a tag at a
  token, ``allowed={position: [tags]}`` restricts a token to a set of tags, ``forbidden=[(a,
  b), ...]`` forbids tag b right after tag a anywhere in the sequence.
* Multi-label (:class:`~streamssvm.MultiLabelSSVM`): ``on=[labels]`` / ``off=[labels]`` fix
  labels on / off (with a hierarchy: leaves).

Tags and labels are the estimator's (values, not ids); a tag or label the model does not know
is an error, and so is a position outside the sequence. Decoding stays exact (constrained
Viterbi, constrained flip enumeration or enumeration). When no output satisfies the
constraints ``predict_one`` raises a ValueError.

>>> from streamssvm import Constraints
>>> c = Constraints(fixed={0: "DET"}, forbidden=[("DET", "VERB")])
>>> c
Constraints(fixed={0: 'DET'}, forbidden=[('DET', 'VERB')])
>>> Constraints.coerce({"on": ["red"]})
Constraints(on=['red'])
"""
from __future__ import annotations

import numbers

import numpy as np


class Constraints:
    """Known parts of the output (see the module docstring)."""

    __slots__ = ("fixed", "allowed", "forbidden", "on", "off")

    def __init__(self, fixed=None, allowed=None, forbidden=None, on=None, off=None):
        self.fixed = dict(fixed or {})
        self.allowed = {p: list(v) for p, v in dict(allowed or {}).items()}
        self.forbidden = [tuple(ab) for ab in (forbidden or ())]
        self.on = list(on or ())
        self.off = list(off or ())
        for p in list(self.fixed) + list(self.allowed):
            if not isinstance(p, numbers.Integral) or isinstance(p, bool) or p < 0:
                raise ValueError(f"constraint positions must be token indices >= 0, got {p!r}")
        for ab in self.forbidden:
            if len(ab) != 2:
                raise ValueError(f"forbidden transitions are (tag, next_tag) pairs, got {ab!r}")
        both = set(map(repr, self.on)) & set(map(repr, self.off))
        if both:
            raise ValueError(f"labels both on and off: {sorted(both)}")

    @classmethod
    def coerce(cls, c):
        """``c`` as Constraints: None, a Constraints or a dict of its fields."""
        if c is None or isinstance(c, cls):
            return c
        if isinstance(c, dict):
            unknown = set(c) - set(cls.__slots__)
            if unknown:
                raise ValueError(f"unknown constraint fields {sorted(unknown)}; known: {list(cls.__slots__)}")
            return cls(**c)
        raise TypeError(f"constraints must be a streamssvm.Constraints or a dict, got {type(c).__name__}")

    def __repr__(self):
        parts = [f"{f}={getattr(self, f)!r}" for f in self.__slots__ if getattr(self, f)]
        return f"Constraints({', '.join(parts)})"

    @property
    def for_sequences(self):
        return bool(self.fixed or self.allowed or self.forbidden)

    @property
    def for_labels(self):
        return bool(self.on or self.off)

    # -------------------------------------------------------------- as masks over label ids
    def chain_masks(self, L, labels):
        """``(allowed (L, K) uint8, forbid (K, K) uint8)`` over the tag list ``labels``."""
        if self.for_labels:
            raise ValueError("on= / off= constrain multi-label outputs; a sequence takes fixed=, allowed=, forbidden=")
        K = len(labels)
        ids = _ids(labels)
        allowed = np.ones((L, K), np.uint8)
        forbid = np.zeros((K, K), np.uint8)
        for p, tags in self.allowed.items():
            _check_pos(p, L)
            row = np.zeros(K, np.uint8)
            for t in tags:
                row[_id(ids, t, "tag")] = 1
            allowed[p] &= row
        for p, t in self.fixed.items():
            _check_pos(p, L)
            row = np.zeros(K, np.uint8)
            row[_id(ids, t, "tag")] = 1
            allowed[p] &= row
        for a, b in self.forbidden:
            forbid[_id(ids, a, "tag"), _id(ids, b, "tag")] = 1
        return allowed, forbid

    def label_fixed(self, labels):
        """(K,) int over the label list ``labels``: -1 free, 0 off, 1 on."""
        if self.for_sequences:
            raise ValueError("fixed= / allowed= / forbidden= constrain sequences; multi-label takes on= and off=")
        ids = _ids(labels)
        fixed = np.full(len(labels), -1, dtype=np.int64)
        for lab in self.on:
            fixed[_id(ids, lab, "label")] = 1
        for lab in self.off:
            fixed[_id(ids, lab, "label")] = 0
        return fixed


def _ids(labels):
    return {lab: i for i, lab in enumerate(labels)}


def _id(ids, v, what):
    try:
        return ids[v]
    except (KeyError, TypeError):
        raise ValueError(f"constraint names the {what} {v!r}, which the model does not know "
                         f"(known: {list(ids)[:10]!r}{' ...' if len(ids) > 10 else ''})") from None


def _check_pos(p, L):
    if p >= L:
        raise ValueError(f"constraint position {p} is outside the sequence of {L} tokens")
