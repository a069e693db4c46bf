"""The Learner protocol: HOW the weights move.

A learner is configured by the user (validated constructor arguments, river ``Base`` so
``clone`` works) and bound to a structure by the estimator. It consumes one encoded example
at a time (``learn``), revisits held examples (``refine``), predicts, certifies
(``certificate``), and exports its state as plain arrays (``state`` / ``restore``).
"""
from __future__ import annotations

import numbers

from river import base


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_number(name, value, low=None, high=None, integer=False, low_open=False, allow_none=False):
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Integral if integer else numbers.Real) and not isinstance(value, bool)
    if not ok:
        kind = "an integer" if integer else "a number"
        raise TypeError(f"{name} must be {kind}, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value!r}")
    return value


def check_search_rescaling(search, rescaling):
    """A budgeted slack search needs slack rescaling; checked when the learner is bound, after an
    estimator's ``rescaling=`` has reached it."""
    if search != "exact" and rescaling != "slack":
        raise ValueError(f"search={search!r} applies to slack rescaling (margin rescaling decodes "
                         "exactly): set rescaling='slack' on the learner or the estimator")


class Learner(base.Base):
    """Base class of learners (configuration + running state once bound)."""

    def bind(self, *args):  # pragma: no cover - interface
        """Allocate the running state (called by the estimator on first use)."""
        raise NotImplementedError

    @property
    def bound(self):
        return getattr(self, "_bound", False)
