"""Bad input never crashes a stream or corrupts a model (the reliability issue, cases 1, 2, 5,
6, 9, 13): huge numbers, deep nesting, huge magnitudes, non-boolean truth values, unsavable
labels and feature names, huge lines. Each case: the record is rejected whole (a dead letter
from a connector, a clear TypeError / ValueError from the API) and nothing changed."""
import json
import resource

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.connectors.base import DeadLetterSink, MemorySink
from streamssvm.connectors.files import CoNLLSource, CSVSource, JSONLSource, LibSVMSource
from streamssvm.features import MAX_ABS_VALUE, FeatureIndex, LabelIndex


def _dl():
    return DeadLetterSink(MemorySink())


def _jsonl(tmp_path, lines, name="d.jsonl"):
    p = tmp_path / name
    p.write_bytes(b"".join((ln if isinstance(ln, bytes) else ln.encode()) + b"\n" for ln in lines))
    return p


GOOD = '{"x": {"a": 1.0}, "y": "u"}'


def _read(src):
    return [(r.x, r.y) for r in src]


# ---------------------------------------------------------------- 1. huge integers
@pytest.mark.parametrize("digits", [400, 5000])
def test_json_number_with_many_digits_is_a_dead_letter(tmp_path, digits):
    p = _jsonl(tmp_path, ['{"x": {"f": 1%s}, "y": "u"}' % ("0" * (digits - 1)), GOOD])
    dl = _dl()
    assert _read(JSONLSource(p, dead_letter=dl)) == [({"a": 1.0}, "u")]
    assert dl.count == 1 and ("exceeds" in dl.sink.items[0]["reason"] or "JSON" in dl.sink.items[0]["reason"])


@pytest.mark.parametrize("model", [ss.MulticlassSSVM, ss.ExtremeClassifier])
def test_api_rejects_a_huge_int_value_with_a_value_error(model):
    m = model()
    m.learn_one({"g": 1.0}, "u")
    n_feat = len(m._features.names)
    with pytest.raises(ValueError, match="exceeds MAX_ABS_VALUE"):
        m.learn_one({"f": 10**400, "new": 1.0}, "v")
    assert len(m._features.names) == n_feat and list(m._labels.labels) == ["u"]


# ---------------------------------------------------------------- 2. deep nesting
def test_deeply_nested_json_is_a_dead_letter(tmp_path):
    p = _jsonl(tmp_path, ["[" * 100000, '{"x": {"a": ' + "[" * 100000 + "}", GOOD])
    dl = _dl()
    assert _read(JSONLSource(p, dead_letter=dl, max_record_bytes=1 << 20)) == [({"a": 1.0}, "u")]
    assert dl.count == 2
    assert all("nested" in d["reason"] or "JSON" in d["reason"] for d in dl.sink.items)


# ---------------------------------------------------------------- 5. huge magnitudes
def test_1e308_is_rejected_in_every_format(tmp_path):
    dl = _dl()
    j = _jsonl(tmp_path, ['{"x": {"a": 1e308}, "y": "u"}', GOOD])
    assert _read(JSONLSource(j, dead_letter=dl)) == [({"a": 1.0}, "u")]
    c = tmp_path / "d.csv"
    c.write_text("a,label\n1e308,u\n1,u\n")
    assert _read(CSVSource(c, dead_letter=dl)) == [({"a": 1.0}, "u")]
    s = tmp_path / "d.libsvm"
    s.write_text("1 1:1e308\n1 1:1\n")
    assert _read(LibSVMSource(s, dead_letter=dl)) == [({"1": 1.0}, 1)]
    assert dl.count == 3 and all("exceeds" in d["reason"] for d in dl.sink.items)


def test_api_rejects_huge_magnitudes_and_the_gap_stays_finite():
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2))
    for i in range(20):
        m.learn_one({"a": 1.0 if i % 2 else -1.0}, "ab"[i % 2])
    with pytest.raises(ValueError, match="exceeds"):
        m.learn_one({"a": 1e308}, "a")
    with pytest.raises(ValueError, match="exceeds"):
        m.learn_one({"a": -MAX_ABS_VALUE * 2}, "a")
    assert np.isfinite(m.certificate().gap)
    fi = FeatureIndex()
    fi.encode_one(np.array([1.0, 2.0]), grow=True)
    with pytest.raises(ValueError, match="MAX_ABS_VALUE"):
        fi.encode_one(np.array([1.0, 1e308]), grow=True)


# ---------------------------------------------------------------- 6. truth values
@pytest.mark.parametrize("bad", ['"maybe"', "0.5", '{"a": 1}', "[1]", "2"])
def test_multilabel_truth_values_must_be_booleans(tmp_path, bad):
    p = _jsonl(tmp_path, ['{"x": {"a": 1}, "y": {"u": %s}}' % bad,
                          '{"x": {"a": 1}, "y": {"u": "false", "v": 1, "w": true, "z": 0}}'])
    dl = _dl()
    assert _read(JSONLSource(p, dead_letter=dl)) == [({"a": 1.0}, {"u": False, "v": True, "w": True, "z": False})]
    assert dl.count == 1 and "truth value" in dl.sink.items[0]["reason"]


@pytest.mark.parametrize("bad", ["false", 0.5, {"a": 1}, 2])
def test_api_multilabel_truth_values_must_be_booleans(bad):
    m = ss.MultiLabelSSVM()
    m.learn_one({"a": 1.0}, {"u": True})
    with pytest.raises((TypeError, ValueError), match="truth value"):
        m.learn_one({"a": 1.0, "new": 1.0}, {"u": bad, "w": True})
    assert list(m._labels.labels) == ["u"] and m._features.names == ["a"]
    m.learn_one({"a": 1.0}, {"u": 0, "w": np.bool_(True)})
    assert list(m._labels.labels) == ["u", "w"]


# ---------------------------------------------------------------- 9. unsavable names and labels
@pytest.mark.parametrize("bad", [None, b"x", frozenset({1}), 10**30])
def test_unsavable_labels_are_rejected_before_anything_changes(tmp_path, bad):
    m = ss.MulticlassSSVM()
    m.learn_one({"a": 1.0}, "u")
    with pytest.raises((TypeError, ValueError)):
        m.learn_one({"a": 1.0, "new": 1.0}, bad)
    assert m._features.names == ["a"] and list(m._labels.labels) == ["u"]
    m.save(tmp_path / "m.ssvm")  # still savable


@pytest.mark.parametrize("bad", [None, b"x", frozenset({1}), 10**30, float("nan")])
def test_unsavable_feature_names_are_rejected_before_anything_changes(tmp_path, bad):
    m = ss.MulticlassSSVM()
    m.learn_one({"a": 1.0}, "u")
    with pytest.raises((TypeError, ValueError), match="feature name"):
        m.learn_one({"new": 1.0, bad: 1.0}, "v")
    assert m._features.names == ["a"] and list(m._labels.labels) == ["u"]
    m.save(tmp_path / "m.ssvm")


def test_a_bad_token_rejects_the_whole_sequence():
    tagger = ss.SequenceTagger()
    tagger.learn_one([{"w=a": 1.0}], ["N"])
    with pytest.raises(ValueError):
        tagger.learn_one([{"w=new": 1.0}, {"w=b": float("inf")}], ["N", "V"])
    with pytest.raises(TypeError):
        tagger.learn_one([{"w=new": 1.0}], [b"V"])
    assert tagger._features.names == ["w=a"] and list(tagger._labels.labels) == ["N"]


def test_label_index_checks_before_registering():
    li = LabelIndex(["a"])
    for bad in (None, b"x", frozenset(), [1], float("inf"), ()):
        with pytest.raises((TypeError, ValueError)):
            li.encode(bad, grow=True)
    assert li.labels == ["a"]
    assert li.encode(("a", 1), grow=True) == 1


def test_connector_labels_must_be_scalars(tmp_path):
    p = _jsonl(tmp_path, ['{"x": {"a": 1}, "y": {"k": 1}}'.replace('{"k": 1}', '[[1]]'),
                          '{"x": {"a": 1}, "y": 1%s}' % ("0" * 30), GOOD])
    dl = _dl()
    assert _read(JSONLSource(p, dead_letter=dl)) == [({"a": 1.0}, "u")]
    assert dl.count == 2


# ---------------------------------------------------------------- 13. huge lines
def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("newline", [True, False])
def test_a_huge_line_is_read_in_bounded_memory(tmp_path, newline):
    p = tmp_path / "big.jsonl"
    with open(p, "wb") as f:
        f.write((GOOD + "\n").encode())
        f.write(b'{"x": {"a": [' + b"1," * (25 * 2**20) + b"1]}, \"y\": \"u\"}")
        if newline:
            f.write(b"\n" + (GOOD + "\n").encode())
    before = _rss_mb()
    dl = _dl()
    recs = _read(JSONLSource(p, dead_letter=dl))
    grew = _rss_mb() - before
    assert recs == [({"a": 1.0}, "u")] * (2 if newline else 1)
    d = dl.sink.items[0]
    assert dl.count == 1 and "max_record_bytes" in d["reason"]
    assert d["raw_bytes"] > 50 * 2**20 and d["truncated"] and len(json.dumps(d)) < 10_000
    assert grew < 40, f"reading a 50 MB line grew the peak RSS by {grew:.0f} MB"


def test_huge_lines_in_every_format(tmp_path):
    dl = _dl()
    s = tmp_path / "d.libsvm"
    s.write_text("1 " + " ".join(f"{i}:1" for i in range(1, 200_000)) + "\n0 1:1\n")
    assert _read(LibSVMSource(s, dead_letter=dl)) == [({"1": 1.0}, 0)]
    c = tmp_path / "d.csv"
    c.write_text("a,label\n" + "1" * 2_000_000 + ",u\n2,v\n")
    assert _read(CSVSource(c, dead_letter=dl)) == [({"a": 2.0}, "v")]
    n = tmp_path / "d.conll"
    n.write_text("".join(f"w{i} N\n" for i in range(300_000)) + "\nThe D\ndog N\n\n")
    assert [r.y for r in CoNLLSource(n, dead_letter=dl)] == [["D", "N"]]
    assert dl.count == 3 and all("max_record_bytes" in d["reason"] for d in dl.sink.items)
    assert all(len(d["raw"]) <= 4096 for d in dl.sink.items)


def test_bom_is_stripped(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + GOOD.encode() + b"\n")
    assert _read(JSONLSource(p)) == [({"a": 1.0}, "u")]
    c = tmp_path / "d.csv"
    c.write_bytes(b"\xef\xbb\xbfa,label\n1,u\n")
    assert _read(CSVSource(c)) == [({"a": 1.0}, "u")]


def test_any_exception_in_a_token_feature_function_is_a_dead_letter(tmp_path):
    n = tmp_path / "d.conll"
    n.write_text("bad N\n\nThe D\n\n")

    def feats(tokens, t, col):
        if tokens[t][0] == "bad":
            raise RecursionError("boom")
        return {"w": 1.0}

    dl = _dl()
    assert [r.y for r in CoNLLSource(n, dead_letter=dl, features=feats)] == [["D"]]
    assert dl.sink.items[0]["reason"] == "too deeply nested"


def test_dead_letter_sync_fsyncs(tmp_path):
    from streamssvm.connectors.base import JSONLSink
    dl = DeadLetterSink(JSONLSink(tmp_path / "dead.jsonl"))
    dl.send(b"x", "r", "o")
    dl.sync()
    assert json.loads((tmp_path / "dead.jsonl").read_text())["reason"] == "r"


def test_engine_sends_api_records_with_huge_ints_to_dead_letters():
    from streamssvm.connectors.base import IterableSource
    from streamssvm.engine import Engine
    data = [({"a": 1.0}, "u"), ({"a": 10**5000}, "u"), ({"a": 10**400}, "v"), ({"a": -1.0}, "v")]
    dl = _dl()
    eng = Engine(ss.MulticlassSSVM(), IterableSource(data), task="multiclass", dead_letter=dl, progress=False)
    summary = eng.run()
    assert summary["examples_seen"] == 2 and dl.count == 2
    assert all("MAX_ABS_VALUE" in d["reason"] for d in dl.sink.items)


# ---------------------------------------------------------------- 14. bounded memory: CuttingPlane
@pytest.mark.parametrize("eviction", ["fifo", "reservoir"])
def test_cutting_plane_holds_at_most_capacity_examples(tmp_path, eviction):
    """CuttingPlane held every example forever; now at most ``capacity``, and the weights stay
    w = A alpha over the held examples (an evicted example's contribution leaves with it)."""
    rng = np.random.default_rng(0)
    m = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane(lam=0.05, window=25, eviction=eviction, seed=0))
    for i in range(120):
        y = int(rng.integers(3))
        m.learn_one({"f": y + 0.1 * rng.normal(), "g": 1.0}, y)
    lr = m._learner
    assert m.n_blocks == 25 and lr.evicted >= 120 - 25 - (0 if eviction == "fifo" else 120)
    if eviction == "fifo":
        assert lr.evicted == 95
    W = lr.W.copy()
    lr.rebuild_weights(out=W)
    for a, b in ((lr.W.E, W.E), (lr.W.T, W.T), (lr.W.B, W.B)):
        np.testing.assert_allclose(a, b, atol=1e-9)
    c = m.refine(passes=10, certify=True)
    assert c.exact and c.n_blocks == 25 and c.raw_gap > -1e-9
    p = tmp_path / "m.ssvm"
    m.save(p)
    m2 = ss.load(p)
    assert m2._learner.evicted == lr.evicted and m2._learner.seen == lr.seen
    for i in range(10):   # the restored learner evicts exactly as the original
        x, y = {"f": float(i % 3), "g": 1.0}, i % 3
        m.learn_one(x, y)
        m2.learn_one(x, y)
    np.testing.assert_array_equal(m._learner.W.E, m2._learner.W.E)


# ---------------------------------------------------------------- 4. pairwise multi-label bricked
def test_pairwise_bcfw_refuses_too_many_labels_before_registering_them():
    """Case 4: one record with 20 labels registered them before BCFW refused, and every later
    record was refused (101 of 201 dead-lettered). Now the label count is checked first."""
    m = ss.MultiLabelSSVM(pairwise=True, learner=ss.learners.BCFW(lam=0.1, seed=0))
    m.learn_one({"a": 1.0}, {"x": True, "y": False})
    with pytest.raises(ValueError, match="up to 16 labels"):
        m.learn_one({"a": 1.0}, {f"l{i}": True for i in range(20)})
    assert m.classes == ["x", "y"]
    for i in range(20):   # the model still learns
        m.learn_one({"a": float(i % 2)}, {"x": bool(i % 2), "y": not i % 2})
    assert m.predict_one({"a": 1.0}) == {"x": True, "y": False}


def test_sgd_learns_labels_arriving_one_at_a_time():
    """Case 3 (fixed by the Workspace growing by need): the 11th-12th label asked for 22-112 GiB."""
    m = ss.MulticlassSSVM(learner=ss.learners.SGD())
    for i in range(40):
        m.learn_one({"f": 1.0, f"g{i}": 1.0}, i)
    assert len(m.classes) == 40 and m.weights_finite()


def test_one_step_and_one_dead_letter_payload_for_every_caller():
    """``streamssvm.step``: the engine, the distributed workers and ``predict`` take the same
    step; any exception makes the record bad, and its dead letter is the record's JSON."""
    from streamssvm.connectors.base import Record
    from streamssvm.step import send_dead_letter, step

    m = ss.MulticlassSSVM(learner=ss.learners.SGD(seed=0))
    assert step(m, Record({"f": 1.0}, "a")).status == "learned"
    bad = Record({"f": float("nan")}, "a", origin="f.jsonl:2")
    for learn in (True, False):
        out = step(m, bad, learn=learn)
        assert out.bad and out.reason.startswith("ValueError: ") and "non-finite" in out.reason
    assert step(m, Record({"f": 1.0}, None), learn=False).prediction == "a"
    assert step(m, Record([[1.0]], "a")).reason.startswith("ValueError: multiclass")

    class Deep(ss.MulticlassSSVM):
        def learn_one(self, x, y):
            raise RecursionError("too deep")

    assert step(Deep(), Record({"f": 1.0}, "a")).reason == "RecursionError: too deep"
    dl = DeadLetterSink(MemorySink())
    send_dead_letter(dl, bad, out.reason)
    item = dl.sink.items[0]
    assert json.loads(item["raw"]) == {"x": {"f": None}, "y": "a"} and item["origin"] == "f.jsonl:2"
