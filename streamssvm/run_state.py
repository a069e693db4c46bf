"""What a stream run checkpoints beside its model: the run's progress (examples seen, bad
records, the progressive metrics, the source position), written by :class:`streamssvm.engine.Engine`
(section ``"engine"``) and the distributed workers (section ``"worker"``).

It sits above the estimators (it rebuilds the model with ``streamssvm.estimators.from_state``),
next to the engine; the file format below it (:mod:`streamssvm.checkpoint`) knows nothing of
models.
"""
from __future__ import annotations


def run_state(model, section, *, examples_seen, bad_records, metrics, position, **extra):
    """What a stream run checkpoints: the model's state, and under ``section`` (``"engine"``
    for :class:`streamssvm.engine.Engine`, ``"worker"`` for a distributed worker) the run's
    progress -- examples seen, bad records, the progressive metrics, the source position --
    plus ``extra`` fields. :func:`parse_run_state` reads it back. The model's arrays may be its
    own, the block store's included (:func:`streamssvm.blocks.state_views`): write them out or
    copy them before the model learns again.

    >>> import streamssvm as ss
    >>> from streamssvm.metrics import ProgressiveMetrics
    >>> m = ss.MulticlassSSVM(learner=ss.learners.SGD(seed=0)); m.learn_one({"f": 1.0}, "a")
    >>> st = run_state(m, "engine", examples_seen=1, bad_records=0, metrics=ProgressiveMetrics("multiclass"),
    ...                position={"record": 1}, task="multiclass")
    >>> r = parse_run_state(st, "engine")
    >>> r["examples_seen"], r["position"], r["task"], r["model"].classes
    (1, {'record': 1}, 'multiclass', ['a'])
    """
    from .blocks import state_views   # here: importing this module must not load the kernels
    with state_views():   # the block store's own arrays: the callers write them out or copy them at once
        model_state = model.state()
    return {"model": model_state, section: {
        "examples_seen": int(examples_seen), "bad_records": int(bad_records), "metrics": metrics.state(),
        "position": position, **extra}}


def parse_run_state(state, section):
    """A :func:`run_state` read back: the section's fields, with ``model`` rebuilt
    (``streamssvm.estimators.from_state``, which validates it), ``metrics`` a
    ``ProgressiveMetrics`` and the counts as ints. Raises on an invalid state; changes nothing."""
    from .estimators import from_state   # here: importing the engine must not load the kernels
    from .metrics import ProgressiveMetrics
    sec = state[section]
    return {**sec, "model": from_state(state["model"]), "examples_seen": int(sec["examples_seen"]),
            "bad_records": int(sec["bad_records"]), "metrics": ProgressiveMetrics.from_state(sec["metrics"]),
            "position": sec["position"]}


__all__ = ["run_state", "parse_run_state"]
