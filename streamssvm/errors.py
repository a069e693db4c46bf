"""The library's exceptions, in a leaf module that imports nothing of the package, so that any
module can raise them without importing what defines the file format (``checkpoint``) or the
estimators.

>>> issubclass(CheckpointError, StateError)
True
"""
from __future__ import annotations


class StateError(Exception):
    """A saved state (a model, a learner, a block store, a run) cannot be restored: it is
    inconsistent, out of range, or made by an incompatible version."""


class CheckpointError(StateError):
    """A checkpoint or model file is missing, foreign, too new, truncated or corrupt."""


__all__ = ["StateError", "CheckpointError"]
