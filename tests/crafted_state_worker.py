"""Worker of the crafted-state suite (``tests/test_crafted_state.py``): builds one small model
(a learner x structure case), saves it, and restores a crafted copy of its saved state for each
mutation -- every integer array set to its dtype's max, to -1 and emptied, every number (the
settings included) set to 2**31 / NaN / inf -- then uses it: predict, learn, certify, refine,
save and reload.

Run as ``python tests/crafted_state_worker.py LEARNER CASE START OUT``: it appends one JSON line
per mutation to OUT, ``{"i": i, "start": true}`` before it touches the mutation and
``{"i": i, "outcome": ...}`` after, so the parent sees which mutation a signal death or a hang
happened in (and restarts the batch after it). Outcomes: ``refused`` (the restore raised
``CheckpointError``), ``ok`` (restored and used, the weights finite), ``late:<Error>`` (restored,
then an operation raised), ``nan`` (restored and used, the weights are not finite). ``LIST`` as
START prints the mutations' names instead.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
import warnings

import numpy as np

BIG = 2 ** 31
N_TRAIN = 12


def learner_of(spec):
    """A small learner from ``Name`` or ``Name:key=value,...`` (values as the CLI reads them)."""
    from streamssvm import learners as L
    from streamssvm.params import spec as param_spec
    name, _, extra = spec.partition(":")
    cls = getattr(L, name)
    params = dict(next(iter(cls._unit_test_params())))
    for kv in filter(None, extra.split(",")):
        k, v = kv.split("=")
        params[k] = param_spec(cls, k).parse(v)
    if name in ("SGD", "GDMM", "MEMOIR", "CuttingPlane", "BMRM", "Pragam", "BCFW"):
        params.setdefault("window", 8)   # a full window: eviction and held-example state in play
    if name == "MEMOIR":
        params["window"] = 8
    return cls(**{k: v for k, v in params.items()})


def case_of(learner, case):
    from streamssvm.learners.checks import _cases
    for structure in ("multiclass", "multilabel", "hierarchy", "chain"):
        for name, gen, make in _cases(structure):
            if name == case:
                return gen(N_TRAIN + 6, seed=len(case)), make
    raise KeyError(case)


def base_state(learner_name, case):
    """The saved state of a small trained model (as ``load`` reads it from its file)."""
    from streamssvm import checkpoint
    data, make = case_of(learner_of(learner_name), case)
    m = make(learner_of(learner_name))
    for x, y in data[:N_TRAIN]:
        m.learn_one(x, y)
    m.refine(0.5)
    with tempfile.TemporaryDirectory() as d:
        p = m.save(os.path.join(d, "m.ssvm"))
        st, _ = checkpoint.load_state(p)
    return st, data


def _leaves(tree, path=()):
    if isinstance(tree, dict):
        for k in sorted(tree):
            yield from _leaves(tree[k], path + (k,))
    elif isinstance(tree, list):
        # per-example entries (held blocks, a window's items): the first and the last stand for all
        many = len(tree) > 2 and all(isinstance(v, dict) for v in tree)
        for i in ((0, len(tree) - 1) if many else range(len(tree))):
            yield from _leaves(tree[i], path + (i,))
    else:
        yield path, tree


def _set(tree, path, value):
    for k in path[:-1]:
        tree = tree[k]
    tree[path[-1]] = value


def mutations(st):
    """``(name, function(state) -> crafted state)`` of every mutation of a saved state."""
    out = []
    for path, v in _leaves(st):
        where = "/".join(map(str, path))
        if isinstance(v, np.ndarray) and v.dtype.kind in "iu":
            top = np.iinfo(v.dtype).max

            def fill(value, path=path):
                def f(s):
                    a = _get(s, path).copy()
                    a[...] = value
                    _set(s, path, a)
                    return s
                return f

            def one(pos, value, path=path):
                def f(s):
                    a = _get(s, path).copy()
                    if a.size:
                        a.flat[pos] = value
                    _set(s, path, a)
                    return s
                return f

            def empty(path=path):
                def f(s):
                    a = _get(s, path)
                    _set(s, path, a[:0].copy())
                    return s
                return f

            if v.size:
                out += [(f"{where}=max", fill(top)), (f"{where}[-1]=max", one(-1, top)),
                        (f"{where}[0]=-1", one(0, -1) if v.dtype.kind == "i" else one(0, top - 1))]
                if v.dtype.kind == "i":
                    out.append((f"{where}=-1", fill(-1)))
                out.append((f"{where}=empty", empty()))
        elif isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size:
            def nan(path=path):
                def f(s):
                    a = _get(s, path).copy()
                    a.flat[0] = np.nan
                    _set(s, path, a)
                    return s
                return f
            out.append((f"{where}[0]=nan", nan()))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            for label, value in (("2**31", BIG), ("-1", -1), ("nan", float("nan")), ("inf", float("inf"))):
                out.append((f"{where}={label}", (lambda value, path: lambda s: (_set(s, path, value), s)[1])(value, path)))
    return out


def _get(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def _finite_weights(m):
    lr = m.bound_learner
    W = lr.emission_weights()
    if W is not None and not np.isfinite(W).all():
        return False
    from streamssvm.estimators.base import _all_finite
    st = lr.state()
    return _all_finite({k: v for k, v in st.items() if k != "history"})   # a diagnostic trace may hold inf


def use(m, data):
    """Predict, learn, certify, refine, save and reload a restored model; ``nan`` or ``ok``."""
    import streamssvm as ss
    for x, _ in data[:3]:
        m.predict_one(x)
    for x, y in data[N_TRAIN:]:
        m.learn_one(x, y)
    m.certificate()
    m.refine(0.5)
    m.certificate()
    with tempfile.TemporaryDirectory() as d:
        p = m.save(os.path.join(d, "m.ssvm"))
        r = ss.load(p)
    r.predict_one(data[0][0])
    r.learn_one(*data[0])
    return "ok" if _finite_weights(m) and _finite_weights(r) else "nan"


def run(learner_name, case, start, out):
    from streamssvm.errors import CheckpointError
    from streamssvm.estimators import from_state
    from streamssvm.estimators.base import _restoring
    warnings.simplefilter("ignore")
    st, data = base_state(learner_name, case)
    muts = mutations(st)
    with open(out, "a", encoding="utf-8") as f:
        for i in range(start, len(muts)):
            name, fn = muts[i]
            f.write(json.dumps({"i": i, "name": name, "start": True}) + "\n")
            f.flush()
            try:
                crafted = fn(copy.deepcopy(st))
                try:
                    m = _restoring(from_state, crafted)
                except CheckpointError:
                    outcome = "refused"
                else:
                    try:
                        outcome = use(m, data)
                    except Exception as e:  # noqa: BLE001 - recorded: a late failure
                        outcome = f"late:{type(e).__name__}:{str(e)[:120]}"
            except BaseException as e:  # noqa: BLE001 - MemoryError, RecursionError...
                outcome = f"late:{type(e).__name__}:{str(e)[:120]}"
            f.write(json.dumps({"i": i, "name": name, "outcome": outcome}) + "\n")
            f.flush()


if __name__ == "__main__":
    import resource
    # a crafted size that asks for gigabytes ends in a MemoryError here, not in the machine's OOM killer
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
    lname, cname, start = sys.argv[1], sys.argv[2], sys.argv[3]
    if start == "LIST":
        st, _ = base_state(lname, cname)
        for name, _ in mutations(st):
            print(name)
    else:
        run(lname, cname, int(start), sys.argv[4])
