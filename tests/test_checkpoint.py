"""Checkpoint format: round trips, corruption, foreign files, retention, no pickle."""
import json
import os
import warnings
import zipfile

import numpy as np
import pytest

from streamssvm.checkpoint import (CheckpointError, CheckpointManager, load_state, read_manifest,
                                   save_state)


def _state():
    return {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "z": np.zeros((0, 4)),
            "s": np.array(3.5), "b": np.array([True, False]), "i8": np.arange(-3, 3, dtype=np.int8),
            "cube": np.ones((2, 2, 2)), "nested": {"x": [1, 2.5, None, "t", True, np.arange(2)]},
            "nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"), "tup": (1, 2)}


def _check(st):
    ref = _state()
    for k in ("a", "z", "s", "b", "i8", "cube"):
        assert st[k].dtype == ref[k].dtype and st[k].shape == ref[k].shape
        np.testing.assert_array_equal(st[k], ref[k])
    assert st["nested"]["x"][:5] == [1, 2.5, None, "t", True]
    np.testing.assert_array_equal(st["nested"]["x"][5], np.arange(2))
    assert np.isnan(st["nan"]) and st["inf"] == float("inf") and st["ninf"] == float("-inf")
    assert st["tup"] == [1, 2]


def test_file_round_trip(tmp_path):
    p = save_state(tmp_path / "with space" / "m.ssvm", _state(), kind="k", meta={"who": "me"})
    st, meta = load_state(p, kind="k")
    _check(st)
    assert meta == {"who": "me"}
    assert read_manifest(p)["kind"] == "k"
    assert not [f for f in os.listdir(p.parent) if f.endswith(".tmp")]


def test_file_errors(tmp_path):
    p = save_state(tmp_path / "m.ssvm", _state(), kind="k")
    with pytest.raises(CheckpointError, match="expected a 'other'"):
        load_state(p, kind="other")
    # corrupt one array byte
    with zipfile.ZipFile(p) as z:
        items = {n: z.read(n) for n in z.namelist()}
    name = sorted(n for n in items if n.startswith("arrays/"))[0]
    blob = bytearray(items[name])
    blob[-1] ^= 0xFF
    items[name] = bytes(blob)
    bad = tmp_path / "bad.ssvm"
    with zipfile.ZipFile(bad, "w") as z:
        for n, b in items.items():
            z.writestr(n, b)
    with pytest.raises(CheckpointError, match="checksum mismatch for array"):
        load_state(bad)
    # newer version / foreign zip / truncated file / missing file
    man = json.loads(items["manifest.json"])
    for mutate, msg in ((lambda m: m.update(version=99), "newer"), (lambda m: m.update(format="x"), "not a streamssvm")):
        m2 = dict(man)
        mutate(m2)
        f = tmp_path / "v.ssvm"
        with zipfile.ZipFile(f, "w") as z:
            z.writestr("manifest.json", json.dumps(m2))
        with pytest.raises(CheckpointError, match=msg):
            load_state(f)
    f = tmp_path / "foreign.zip"
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("hello.txt", "hi")
    with pytest.raises(CheckpointError, match="no manifest"):
        load_state(f)
    data = p.read_bytes()
    (tmp_path / "trunc.ssvm").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError):
        load_state(tmp_path / "trunc.ssvm")
    with pytest.raises(CheckpointError, match="no such file"):
        load_state(tmp_path / "missing.ssvm")


def test_object_arrays_and_bad_leaves_are_refused(tmp_path):
    with pytest.raises(TypeError, match="/o"):
        save_state(tmp_path / "x", {"o": np.array([object()])}, kind="k")
    with pytest.raises(TypeError, match="set"):
        save_state(tmp_path / "x", {"s": {1, 2}}, kind="k")


def test_manager_retention_and_fallback(tmp_path):
    cm = CheckpointManager(tmp_path / "ck", keep=3)
    for i in range(5):
        cm.save({"i": i, "a": np.full(3, i)}, kind="k", meta={"i": i})
    assert [p.name for p in cm.list()] == ["ckpt-00000003", "ckpt-00000004", "ckpt-00000005"]
    st, meta, path = cm.latest()
    assert st["i"] == 4 and meta["i"] == 4
    # truncate the newest checkpoint's array: detected, previous one used
    arr = next((path / "arrays").iterdir())
    arr.write_bytes(arr.read_bytes()[:10])
    with pytest.warns(RuntimeWarning, match="checksum|cannot be read"):
        st, meta, path2 = cm.latest()
    assert st["i"] == 3 and path2.name == "ckpt-00000004"
    # a corrupt manifest too
    (path2 / "manifest.json").write_text("{not json")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        st, _, _ = cm.latest()
    assert st["i"] == 2 and len(w) == 2
    # a leftover temp dir of a crash is never picked and is cleaned by the next save
    (tmp_path / "ck" / ".tmp-ckpt-abc").mkdir()
    assert cm.latest()[0]["i"] == 2
    cm.save({"i": 9}, kind="k")
    assert not list((tmp_path / "ck").glob(".tmp-ckpt-*"))
    assert cm.latest()[0]["i"] == 9


def test_manager_empty(tmp_path):
    assert CheckpointManager(tmp_path / "none").latest() is None
    with pytest.raises(ValueError):
        CheckpointManager(tmp_path, keep=0)
