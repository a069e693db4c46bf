"""One record through a model: the step the stream engine, the distributed workers and
``streamssvm predict`` all take, with one rule for bad records and one dead-letter payload.

A record is converted to the estimator's ``(x, y)`` (``Estimator.coerce_input``), predicted, then
learned (progressive validation). *Any* exception on the way -- ValueError, TypeError,
KeyError, OverflowError, RecursionError, MemoryError, ... -- makes it a bad record with the
reason ``"<ExceptionType>: <message>"`` (the message bounded): one record never stops a stream.
The estimators validate the whole record before changing any state, so a bad record leaves the
model as it was. A bad record goes to the dead letters as the JSON text of ``{"x", "y"}``
(:func:`dead_letter_payload`).

>>> import streamssvm as ss
>>> from streamssvm.connectors.base import Record
>>> m = ss.MulticlassSSVM(learner=ss.learners.SGD(seed=0))
>>> step(m, Record({"f": 1.0}, "a")).status
'learned'
>>> out = step(m, Record({"f": "high"}, "a"))
>>> out.status, out.reason
('bad', "TypeError: feature 'f' has a non-numeric value 'high' (str)")
>>> dead_letter_payload(Record({"f": float("nan")}, "a"))
'{"x": {"f": null}, "y": "a"}'
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

#: the tasks a stream run knows
TASKS = ("multiclass", "multilabel", "sequence", "extreme")

#: the longest exception message a reason keeps
REASON_MAX = 500

LEARNED, PREDICTED, BAD = "learned", "predicted", "bad"


@dataclass
class Outcome:
    """What one step did: ``status`` is ``"learned"``, ``"predicted"`` (``learn=False``) or
    ``"bad"``; ``prediction`` the model's prediction made before learning; ``x`` / ``y`` the
    record as the model took it; ``reason`` why a bad record is bad."""

    status: str
    prediction: object = None
    x: object = None
    y: object = None
    reason: str | None = None

    @property
    def bad(self):
        return self.status == BAD


def jsonable(v):
    """Plain JSON types; non-finite floats become ``None`` (strict JSON has no ``Infinity``).

    >>> jsonable({"gap": float("inf"), "n": np.int64(3), "a": np.array([0.5, np.nan])})
    {'gap': None, 'n': 3, 'a': [0.5, None]}
    """
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, np.ndarray):
        return jsonable(v.tolist())
    if isinstance(v, (list, tuple)):
        return [jsonable(u) for u in v]
    if isinstance(v, dict):
        return {str(k): jsonable(u) for k, u in v.items()}
    return v


def short_reason(e):
    """An exception's message, bounded (a 5000-digit number must not fill the dead letters)."""
    try:
        m = str(e)
    except Exception:  # noqa: BLE001 - e.g. an int too large to convert
        m = repr(type(e))
    return m if len(m) <= REASON_MAX else m[:REASON_MAX] + f"... ({len(m)} characters)"


def reason_of(e):
    """The dead-letter reason of an exception: ``"<type>: <bounded message>"``."""
    return f"{type(e).__name__}: {short_reason(e)}"


def dead_letter_payload(record):
    """What the dead letters keep of a bad record: the JSON text of ``{"x", "y"}`` (non-finite
    numbers as null; other objects as their ``str``); a record JSON cannot hold (e.g. a
    5000-digit integer) as the dict itself, which the dead-letter sink bounds by its ``repr``."""
    if record is None:
        return ""
    try:
        return json.dumps(jsonable({"x": record.x, "y": record.y}), default=str)
    except (ValueError, TypeError, RecursionError):
        return {"x": record.x, "y": record.y}


def send_dead_letter(dead_letter, record, reason):
    """Send a bad record to a ``DeadLetterSink`` with its reason and origin."""
    dead_letter.send(dead_letter_payload(record), reason, record.origin if record is not None else "")


def predict_learn(model, x, y, learn=True, w=1.0):
    """Predict ``x``, then learn ``(x, y)`` with weight ``w`` (unless ``learn`` is false): the
    :class:`Outcome`, ``"bad"`` with its reason if anything raised (a weight the model refuses
    included)."""
    try:
        if not learn:
            p = model.predict_one(x)
        elif type(w) is float and w == 1.0:
            p = model.predict_learn_one(x, y)
        else:
            p = model.predict_learn_one(x, y, w)
    except Exception as e:  # noqa: BLE001 - one record never stops the stream
        return Outcome(BAD, x=x, y=y, reason=reason_of(e))
    return Outcome(LEARNED if learn else PREDICTED, p, x, y)


def step(model, record, *, learn=True):
    """One record through ``model``: converted (``model.coerce_input``), predicted, then learned
    with the record's weight ``record.w`` (``learn=False``: only predicted; a record without a
    label is then predicted alike).
    Returns an :class:`Outcome`; a bad record (any exception) leaves the model unchanged."""
    y = record.y
    if y is None and not learn:
        y = [] if model.task == "sequence" else 0   # a placeholder: nothing is learned from it
    try:
        x, y = model.coerce_input(record.x, y)
    except Exception as e:  # noqa: BLE001 - one record never stops the stream
        return Outcome(BAD, reason=reason_of(e))
    return predict_learn(model, x, y, learn=learn, w=record.w)


__all__ = ["BAD", "LEARNED", "PREDICTED", "TASKS", "Outcome", "dead_letter_payload", "jsonable",
           "predict_learn", "reason_of", "send_dead_letter", "short_reason", "step"]
