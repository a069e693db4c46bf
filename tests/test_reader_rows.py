"""JSONL micro-batches of flat rows (``JSONLSource.micro_batches`` -> ``RecordRows``): the same
records, values to the bit, keys, positions, origins and dead letters as the record-by-record
reader, whatever irregular lines sit between the regular ones; and the engine learns them with
the same predictions, model and checkpoints."""
import json

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.connectors.base import DeadLetterSink, MemorySink, RecordRows
from streamssvm.connectors.files import open_source
from streamssvm.engine import Engine
from same_checkpoints import assert_same_checkpoints

pytest.importorskip("orjson")


def _lines(n=700, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        r = rng.normal(size=5) * rng.choice([1.0, 1e3, 1e-3])
        row = r.tolist() if i % 3 else [int(v * 100) for v in r]   # some rows of integers
        out.append(json.dumps({"x": row, "y": int(rng.integers(0, 4)) if i % 2 else "abc"[i % 3]}))
    irregular = {
        30: "", 31: "   ", 60: '{"x": [1, 2, 3, 4, NaN], "y": 1}', 90: '{"x": [1, 2, 3, 4], "y": 1}',
        120: '{"x": [1, 2, 3, 4, 5], "y": true}', 150: '{"x": [1, 2, 3, 4, 5], "y": 1.5}',
        180: '{"x": [1, 2, 3, 4, 5], "y": 1, "w": 2}', 210: '{"x": [1, 2, 3, 4, "5"], "y": 1}',
        240: '{"x": [true, 2, 3, 4, 5], "y": 1}', 270: '{"x": [1, 2, 3, 4, 1234567890123456789], "y": 1}',
        300: '{"x": [1, 2, 3, 4, 1e13], "y": 1}', 330: "{bad json", 360: '{"x": [1, 2, 3, 4, 5], "y": 1}, 2',
        390: '{"x": [], "y": 1}', 420: '{"x": [1, 2, 3, 4, 5], "y": null}', 450: '[1, 2]',
        480: '{"x": [1, 2, 3, 4, 5], "y": 99999999999999999999}', 510: '{"x": [[1, 2], [3, 4]], "y": [1, 2]}',
        540: '{"x": {"a": 1}, "y": 1}', 570: '{"x": [1, 2, 3, 4, 5], "y": "\\ud800"}',
    }
    for i in sorted(irregular, reverse=True):
        out.insert(i, irregular[i])
    return out


def _write(tmp_path, lines, name="r.jsonl", crlf=False, tail=""):
    p = tmp_path / name
    p.write_bytes(("\r\n" if crlf else "\n").join(lines).encode() + (b"\r\n" if crlf else b"\n") + tail.encode())
    return p


def _same(a, b):
    assert type(a.x) is type(b.x)
    if type(a.x) is np.ndarray:
        assert a.x.dtype == b.x.dtype and a.x.tobytes() == b.x.tobytes() and a.x.shape == b.x.shape
    else:
        assert a.x == b.x
    assert (a.y, type(a.y), a.key, a.position, a.origin, a.w) == (b.y, type(b.y), b.key, b.position, b.origin, b.w)


@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("room", [1, 7, 64, 1000])
def test_micro_batches_of_rows_are_the_records_of_the_general_reader(tmp_path, crlf, room):
    p = _write(tmp_path, _lines(), crlf=crlf, tail='{"x": [1, 2, 3, 4, 5], "y": 1}')   # unfinished last line
    d1, d2 = DeadLetterSink(MemorySink()), DeadLetterSink(MemorySink())
    s1, s2 = open_source(p, dead_letter=d1), open_source(p, dead_letter=d2)
    ref = list(s1)
    got, fast = [], 0
    for chunk in s2.micro_batches(lambda: room):
        assert 0 < len(chunk) <= room
        fast += len(chunk) if type(chunk) is RecordRows else 0
        got.extend(chunk)
    assert len(got) == len(ref) > 650
    for a, b in zip(ref, got):
        _same(a, b)
    assert d1.sink.items == d2.sink.items and d1.count >= 10
    assert (s1.n_read, s1.n_bad, s1.position()) == (s2.n_read, s2.n_bad, s2.position())
    if room > 1:
        assert fast > len(got) // 3


def test_rows_resume_from_any_position(tmp_path):
    p = _write(tmp_path, _lines(300, seed=1))
    ref = list(open_source(p))
    rows = [c for c in open_source(p).micro_batches(lambda: 50)]
    at = next(c for c in rows if type(c) is RecordRows)
    for i in (0, len(at) // 2, len(at) - 1):
        rec = at[i]
        k = next(j for j, r in enumerate(ref) if r.position == rec.position)
        s = open_source(p)
        s.seek(rec.position)
        rest = [r for c in s.micro_batches(lambda: 33) for r in c]
        assert len(rest) == len(ref) - k - 1
        for a, b in zip(ref[k + 1:], rest):
            _same(a, b)


def test_rows_slices_are_their_records(tmp_path):
    p = _write(tmp_path, _lines(300, seed=2)[:40] + _lines(300, seed=2)[41:])
    chunks = list(open_source(p).micro_batches(lambda: 64))
    rows = next(c for c in chunks if type(c) is RecordRows and len(c) > 10)
    recs = list(rows)
    for sl in (slice(3, 9), slice(0, 1), slice(-4, None)):
        part = rows[sl]
        assert type(part) is RecordRows
        for a, b in zip(recs[sl], part):
            _same(a, b)
    _same(rows[-1], recs[-1])


@pytest.mark.parametrize("sink", [False, True])
def test_engine_rows_equal_record_by_record(tmp_path, sink):
    """The engine on RecordRows micro-batches and record by record: the same predictions, dead
    letters, history, model and every checkpoint (default estimator: scaled, calibrated)."""
    p = _write(tmp_path, _lines(900, seed=3))
    runs = []
    for micro in (1, 64):
        dl = DeadLetterSink(MemorySink())
        eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0)), open_source(p, dead_letter=dl),
                     task="multiclass", progress=False, checkpoint_dir=tmp_path / f"ck{micro}{sink}",
                     snapshot_every=110, checkpoint_every=250, sink=MemorySink() if sink else None)
        eng.MICRO_BATCH = micro
        s = eng.run()
        runs.append((eng, s, dl))
    (e1, s1, d1), (e2, s2, d2) = runs
    if sink:
        assert e1.sink.items == e2.sink.items and len(e2.sink.items) > 850
    assert d1.sink.items == d2.sink.items
    assert s1["metrics"] == s2["metrics"] and s1["n_bad"] == s2["n_bad"] and s1["position"] == s2["position"]
    drop = ("time", "elapsed", "throughput", "certificate_seconds")
    assert [{k: v for k, v in h.items() if k not in drop} for h in e1.history] == \
        [{k: v for k, v in h.items() if k not in drop} for h in e2.history]
    assert_same_checkpoints(e1, e2, more_than=1)


def test_the_engine_takes_the_rows_as_one_array(tmp_path, monkeypatch):
    p = _write(tmp_path, [json.dumps({"x": [float(i % 7), 1.0, float(i % 3)], "y": i % 3}) for i in range(2000)])
    seen = []
    f = ss.MulticlassSSVM.predict_learn_each
    monkeypatch.setattr(ss.MulticlassSSVM, "predict_learn_each",
                        lambda self, xs, ys, ws=None: seen.append(type(xs)) or f(self, xs, ys, ws))
    eng = Engine(ss.MulticlassSSVM(), open_source(p), task="multiclass", progress=False)
    eng.MICRO_BATCH = 256   # 2000 records: at least 6 micro-batches of rows
    assert eng.run()["examples_seen"] == 2000
    assert seen.count(np.ndarray) >= 6


@pytest.mark.parametrize("d", [
    {}, {"a": 1.0, "b": 2}, {"a": -0.0, "b": 1e12, "c": -1e12}, {"a": 1e12 + 1}, {"a": 10**13}, {"a": 10**400},
    {"a": float("nan")}, {"a": 1.0, "b": float("nan")}, {"a": float("inf")}, {"a": True, "b": 2.0},
    {"a": "1.5"}, {"a": None}, {"a": [1]}, {"b": 3, "a": 1.5, "c": 0},
])
def test_a_dict_of_features_is_checked_as_value_by_value(d):
    """``_features_dict``'s one-pass check of plain numbers: the same floats (keys in order) or
    the same reason as the value-by-value check."""
    from streamssvm.connectors.files import BadRecord, _features_dict, _finite, _short

    def by_value():
        return {k: _finite(v, f"x[{_short(k)}]") for k, v in d.items()}
    try:
        want = by_value()
    except BadRecord as e:
        with pytest.raises(BadRecord) as got:
            _features_dict(d)
        assert str(got.value) == str(e)
        return
    got = _features_dict(d)
    assert list(got) == list(want) and all(type(v) is float for v in got.values())
    assert [np.float64(v).tobytes() for v in got.values()] == [np.float64(v).tobytes() for v in want.values()]
