"""The K workers and the mixer of a distributed job as plain objects in this process, called one
after another -- the same algebra as on Ray (every call's arguments and result go through a
pickle round trip, as Ray's object store would copy them), without a cluster.

What it is for: deterministic pass counts at many workers on a small machine (K = 8 on 2
cores), tuning the mixing, and tests. What it is not: a measure of wall time (the workers do
not run at the same time). ``distributed.run(..., cluster="inprocess")`` selects it; with the
same inputs it reproduces the Ray run bit for bit (``tests/test_distributed.py``).
"""
from __future__ import annotations

import pickle


def _copy(value):
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


class _Call:
    """``actor.method.remote(...)`` / ``.options(num_returns=2).remote(...)``: runs the method
    at once on copies of the arguments and returns a copy of its result."""

    def __init__(self, fn):
        self.fn = fn

    def options(self, **_):
        return self

    def remote(self, *args, **kwargs):
        return _copy(self.fn(*_copy(args), **_copy(kwargs)))


class InProcessActor:
    """A plain object called the way a Ray actor handle is."""

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        return _Call(getattr(self._obj, name))


class _ActorClass:
    """``ray.remote(cls)``: ``.remote(*args)`` builds the object and returns its handle."""

    def __init__(self, cls):
        self.cls = cls

    def remote(self, *args, **kwargs):
        return InProcessActor(self.cls(*_copy(args), **_copy(kwargs)))


def actor_class(cls):
    """``ray.remote(cls)`` for an object living in this process."""
    return _ActorClass(cls)
