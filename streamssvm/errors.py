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


class SourceFault(Exception):
    """The source cannot go on where the checkpoint left it, and guessing would lose or repeat
    data: a file rotated, truncated or rewritten under its checkpointed position; a Kafka log
    restarted below the checkpointed offsets; a broker or topic gone. Never a reason to fall
    back to an older checkpoint (every checkpoint has the same problem): the run stops with the
    message, which says how to proceed."""


class SourceChanged(SourceFault, ValueError):
    """The input under a checkpointed position is not the input the checkpoint read."""


class RunFault(Exception):
    """The run's surroundings fail it: its checkpoint directory is locked by another run or not
    writable, or the disk is full. The message is one line naming the directory or file."""


__all__ = ["StateError", "CheckpointError", "SourceFault", "SourceChanged", "RunFault"]
