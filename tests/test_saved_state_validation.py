"""Regression tests of issue 26 (items 1, 2, 7): crafted learner states refused before any kernel
touches them, settings bounded by the Param rows, a checkpoint directory falling back past a
crafted checkpoint, held examples saved packed (a few files whatever the window) with the former
layout still read. The generated sweep is ``tests/test_crafted_state.py``; these are the cases
that crashed, hung or lost the model before, each on its own."""
import copy
import warnings

import numpy as np
import pytest

import streamssvm as ss
from streamssvm import checkpoint
from streamssvm.errors import CheckpointError
from streamssvm.estimators import from_state
from streamssvm.estimators.base import MODEL_KIND
from streamssvm.learners.checks import chain_data, multiclass_data, multilabel_data


def _trained(learner, kind="chain", n=12):
    data = {"chain": chain_data, "multiclass": multiclass_data, "multilabel": multilabel_data,
            "extreme": multiclass_data}[kind](n + 4, seed=5)
    make = {"chain": lambda lr: ss.SequenceTagger(learner=lr),
            "multiclass": lambda lr: ss.MulticlassSSVM(learner=lr),
            "multilabel": lambda lr: ss.MultiLabelSSVM(learner=lr, pairwise=True),
            "extreme": lambda lr: ss.ExtremeClassifier(learner=lr)}[kind]
    m = make(learner)
    for x, y in data[:n]:
        m.learn_one(x, y)
    m.refine(0.5)   # BMRM / Pragam build their cuts and dual point here
    return m, data


def _saved(m, tmp_path):
    p = m.save(tmp_path / "m.ssvm")
    return checkpoint.load_state(p)[0]


def _first(rows, key):
    """The first held example's array ``key``, packed or in the former list layout (a view)."""
    from streamssvm.saved_state import unpack_rows
    return unpack_rows(rows, "rows")[0][key], rows


def _empty_truth(rows):
    """The held examples with the first one's truth emptied (the file as crafted)."""
    from streamssvm.saved_state import pack_rows, unpack_rows
    r = [dict(x) for x in unpack_rows(rows, "rows")]
    r[0]["y"] = r[0]["y"][:0].copy()
    arrays = [k for k, v in r[1].items() if isinstance(v, np.ndarray)]
    return pack_rows(r, arrays, [k for k in r[1] if k not in arrays])


CRAFTED = {
    # learner, structure, what is crafted: each died with SIGSEGV / SIGABRT before
    "cutting-plane held truth emptied": (lambda: ss.learners.CuttingPlane(lam=0.05, seed=0), "chain",
                                         lambda lr: lr.update(blocks=_empty_truth(lr["blocks"]))),
    "sgd held truth emptied": (lambda: ss.learners.SGD(lam=0.05), "chain",
                               lambda lr: lr.update(recent=_empty_truth(lr["recent"]))),
    "bmrm window truth emptied": (lambda: ss.learners.BMRM(lam=0.05), "chain",
                                  lambda lr: lr["window"].update(items=_empty_truth(lr["window"]["items"]))),
    "bmrm cut labeling past the labels": (lambda: ss.learners.BMRM(lam=0.05), "chain",
                                          lambda lr: lr.update(cuts=[{**c, "labs": [np.full_like(np.asarray(x), 2**31 - 1)
                                                                                     for x in c["labs"]]}
                                                                     for c in lr["cuts"]])),
    "pragam window feature past the rows": (lambda: ss.learners.Pragam(lam=0.05), "multiclass",
                                            lambda lr: _first(lr["window"]["items"], "fidx")[0].__setitem__(
                                                slice(None), 2**31 - 1)),
    "bcfw averaging accumulator NaN": (lambda: ss.learners.BCFW(lam=0.05, seed=0), "chain",
                                       lambda lr: lr["avg"]["facc"].__setitem__(0, np.nan)),
    "bcfw FIFO order emptied": (lambda: ss.learners.BCFW(lam=0.05, seed=0, window=8), "chain",
                                lambda lr: lr["store"].update(order=lr["store"]["order"][:0].copy())),
    "bcfw max_L 2**31": (lambda: ss.learners.BCFW(lam=0.05, seed=0), "chain",
                         lambda lr: lr["store"].update(max_L=2**31)),
    "cutting-plane counters at the int64 max": (lambda: ss.learners.CuttingPlane(lam=0.05, seed=0), "chain",
                                                lambda lr: lr.update(counters=np.full(6, np.iinfo(np.int64).max))),
    "sgd dual mass NaN": (lambda: ss.learners.SGD(lam=0.05), "chain", lambda lr: lr.update(a=float("nan"))),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_learner_state_is_refused_by_load(case, tmp_path):
    make, kind, craft = CRAFTED[case]
    m, _ = _trained(make(), kind)
    st = _saved(m, tmp_path)
    for k in ("blocks", "recent"):   # the arrays are read-only views of the file: write copies
        if k in st["learner"]:
            st["learner"][k] = copy.deepcopy(st["learner"][k])
    st = copy.deepcopy(st)
    assert st["learner"].get("cuts", [None]), "the case crafts nothing"
    craft(st["learner"])
    bad = tmp_path / "bad.ssvm"
    checkpoint.save_state(bad, st, kind=MODEL_KIND)
    with pytest.raises(CheckpointError):
        ss.load(bad)


@pytest.mark.parametrize("learner,setting", [("BCFW", "replay"), ("GDMM", "inner"), ("GDMM", "rounds"),
                                             ("GDMM", "grow"), ("SGD", "replay"), ("CuttingPlane", "replay"),
                                             ("BMRM", "max_cuts"), ("BMRM", "qp_steps")])
def test_settings_that_size_loops_are_bounded(learner, setting):
    cls = getattr(ss.learners, learner)
    with pytest.raises(ValueError, match=setting):
        cls(**{setting: 2**31})
    from streamssvm.params import spec
    with pytest.raises(ValueError, match=setting):
        spec(cls, setting).parse(str(2**31))   # the command line reads the same row


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e300"])
def test_lam_finite_positive_and_bounded_everywhere(value):
    from streamssvm.params import spec
    for name in ("BCFW", "SGD", "MEMOIR", "GDMM", "BMRM", "Pragam", "CuttingPlane"):
        cls = getattr(ss.learners, name)
        with pytest.raises(ValueError):
            spec(cls, "lam").parse(value)
        with pytest.raises(ValueError):
            cls(lam=float(value))


def test_crafted_setting_in_a_model_file_is_refused(tmp_path):
    """``replay = 2**31`` in a file loaded, then ``learn_one`` never returned."""
    m, _ = _trained(ss.learners.BCFW(lam=0.05, seed=0), "multiclass")
    st = copy.deepcopy(_saved(m, tmp_path))
    st["config"]["learner"]["params"]["replay"] = 2**31
    with pytest.raises(CheckpointError, match="replay"):
        ss.estimators.base._restoring(from_state, st)


def test_checkpoint_fallback_skips_a_crafted_checkpoint(tmp_path):
    """The newest checkpoint holds a crafted CuttingPlane state (a held truth emptied: a segfault
    inside the restore before); restoring falls back to the previous one with a warning."""
    m, data = _trained(ss.learners.CuttingPlane(lam=0.05, seed=0), "chain")
    cm = checkpoint.CheckpointManager(tmp_path / "ck", keep=3)
    cm.save({"model": m.state(), "i": 1}, kind="engine")
    m.learn_one(*data[-1])
    st = copy.deepcopy(m.state())
    st["learner"]["blocks"] = _empty_truth(st["learner"]["blocks"])
    cm.save({"model": st, "i": 2}, kind="engine")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = cm.latest(restore=lambda s, meta, path: {**s, "model": from_state(s["model"])})
    assert got[0]["i"] == 1 and got[0]["model"].bound_learner.n_blocks == 12
    assert any("cannot be restored" in str(x.message) for x in w)


# ----------------------------------------------------------------------------- packed held examples

PACKED = [(lambda: ss.learners.SGD(lam=0.05), "chain", "recent"),
          (lambda: ss.learners.CuttingPlane(lam=0.05, seed=0), "chain", "blocks"),
          (lambda: ss.learners.BMRM(lam=0.05), "chain", ("window", "items")),
          (lambda: ss.learners.Pragam(lam=0.05), "multiclass", ("window", "items")),
          (lambda: ss.learners.MEMOIR(lam=1e-3, mips="exact"), "extreme", "recent")]


@pytest.mark.parametrize("make,kind,key", PACKED, ids=["sgd", "cutting-plane", "bmrm", "pragam", "memoir"])
def test_held_examples_saved_packed_and_the_former_layout_still_loads(make, kind, key, tmp_path):
    from streamssvm.learners.checks import assert_same_state
    from streamssvm.saved_state import unpack_rows
    m, data = _trained(make(), kind)
    st = _saved(m, tmp_path)
    node = st["learner"]
    for k in ((key,) if isinstance(key, str) else key)[:-1]:
        node = node[k]
    last = key if isinstance(key, str) else key[-1]
    assert isinstance(node[last], dict) and "packed" in node[last]
    a = ss.load(tmp_path / "m.ssvm")
    node[last] = [{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in r.items()}
                  for r in unpack_rows(node[last], "rows")]   # the layout files were written in before
    old = tmp_path / "old.ssvm"
    checkpoint.save_state(old, st, kind=MODEL_KIND)
    b = ss.load(old)
    assert_same_state(a.bound_learner.state(), b.bound_learner.state())
    for r in (a, b):
        for x, y in data[12:]:
            r.learn_one(x, y)
        r.refine(0.5)
    assert_same_state(a.bound_learner.state(), b.bound_learner.state())


def test_checkpoint_is_a_few_files_whatever_the_window(tmp_path):
    """Each held example was 4 fsynced files in every checkpoint (20k records: 80,010 files)."""
    counts = []
    for n in (10, 200):
        m, _ = _trained(ss.learners.SGD(lam=0.05), "multiclass", n=n)
        cm = checkpoint.CheckpointManager(tmp_path / f"ck{n}")
        path = cm.save({"model": m.state()}, kind="engine")
        counts.append(sum(1 for _ in (path / "arrays").iterdir()))
    assert counts[0] == counts[1] < 40


def test_sgd_window_bounded_by_default():
    assert ss.learners.SGD().window == 100_000
    m, _ = _trained(ss.learners.SGD(lam=0.05, window=5), "multiclass", n=20)
    assert m.bound_learner.n_blocks == 5
