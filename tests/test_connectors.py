"""File connectors: parsing, resumable positions, dead letters, pacing, format detection."""
import json
import time

import numpy as np
import pytest

from streamssvm.connectors.base import DeadLetterSink, IterableSource, JSONLSink, MemorySink
from streamssvm.connectors.files import (CoNLLSource, CSVSource, JSONLSource, LibSVMSource, open_source,
                              write_jsonl)


def _dl():
    return DeadLetterSink(MemorySink())


def _files(tmp_path):
    j = tmp_path / "d.jsonl"
    write_jsonl(j, [{"x": {"a": i, "b": 0.5}, "y": f"c{i % 3}"} for i in range(7)]
                + [{"x": [[1, 2], [3, 4]], "y": ["p", "q"]}, {"x": [1.0, 2.0, 3.0], "y": 1}])
    c = tmp_path / "d.csv"
    c.write_text("f1,label,f2\n" + "".join(f"{i},{'ab'[i % 2]},{i * 2}\n" for i in range(8)))
    s = tmp_path / "d.libsvm"
    s.write_text("".join(f"{i % 2} 1:{i} 3:0.5  # comment\n" for i in range(8)))
    n = tmp_path / "d.conll"
    n.write_text("-DOCSTART- -X- O\n\n" + "".join(
        f"The DT B-NP\ndog{i} NN I-NP\nruns VBZ B-VP\n\n" for i in range(6)))
    return {"jsonl": j, "csv": c, "libsvm": s, "conll": n}


def test_parsing(tmp_path):
    f = _files(tmp_path)
    recs = list(open_source(f["jsonl"]))
    assert recs[0].x == {"a": 1.0 * 0, "b": 0.5} and recs[0].y == "c0"
    assert isinstance(recs[7].x, np.ndarray) and recs[7].x.shape == (2, 2) and recs[7].y == ["p", "q"]
    assert recs[8].x.shape == (3,)
    recs = list(open_source(f"file://{f['csv']}"))
    assert recs[1].x == {"f1": 1.0, "f2": 2.0} and recs[1].y == "b"
    recs = list(CSVSource(f["csv"], label=1))
    assert len(recs) == 8
    recs = list(open_source(f["libsvm"]))
    assert recs[3].x == {"1": 3.0, "3": 0.5} and recs[3].y == 1
    ml = tmp_path / "m.svm"
    ml.write_text("1,4 2:1\n 3:1\n0 1:2\n")
    recs = list(LibSVMSource(ml, multilabel=True))
    assert [r.y for r in recs] == [[1, 4], [], [0]]
    recs = list(open_source(f["conll"]))
    assert len(recs) == 6
    assert recs[0].y == ["B-NP", "I-NP", "B-VP"]
    assert recs[0].x[1]["w=dog0"] == 1.0 and recs[0].x[1]["c1=NN"] == 1.0
    assert recs[0].x[0]["w-1=<s>"] == 1.0 and "c2=B-NP" not in recs[0].x[0]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "libsvm", "conll"])
@pytest.mark.parametrize("k", [0, 1, 3, 6])
def test_positions_resume_exactly(tmp_path, fmt, k):
    path = _files(tmp_path)[fmt]
    full = [(json.dumps(r.x, default=str, sort_keys=True), json.dumps(r.y)) for r in open_source(path)]
    src = open_source(path)
    it = iter(src)
    pos = src.position()
    for _ in range(k):
        pos = next(it).position
        assert src.position() == pos
    rest = open_source(path)
    rest.seek(json.loads(json.dumps(pos)))  # positions survive JSON
    tail = [(json.dumps(r.x, default=str, sort_keys=True), json.dumps(r.y)) for r in rest]
    assert tail == full[k:]


def test_dead_letters_jsonl(tmp_path):
    p = tmp_path / "bad.jsonl"
    lines = ['{"x": {"a": 1}, "y": 1}', '{bad json', '{"x": {"a": 1}}', '{"y": 2}',
             '{"x": {"a": NaN}, "y": 1}', '{"x": {"a": Infinity}, "y": 1}', '{"x": {"a": "red"}, "y": 1}',
             '{"x": [], "y": 1}', '{"x": [[1, 2], [3]], "y": [1, 2]}', '{"x": [[1], [2]], "y": [1]}',
             '{"x": {"a": 1}, "y": null}', '[1, 2]', '{"x": {"a": 2}, "y": 3}']
    p.write_text("\n".join(lines) + "\n")
    dl = _dl()
    recs = list(JSONLSource(p, dead_letter=dl))
    assert [r.y for r in recs] == [1, 3]
    assert dl.count == 11
    reasons = " | ".join(i["reason"] for i in dl.sink.items)
    for frag in ("invalid JSON", "missing field 'y'", "missing field 'x'", "non-finite", "non-numeric",
                 "empty x", "ragged", "length mismatch", "missing label", "expected a JSON object"):
        assert frag in reasons
    assert dl.sink.items[0]["origin"] == "bad.jsonl:2"
    assert dl.sink.items[0]["raw"] == "{bad json"


def test_dead_letters_other_formats(tmp_path):
    c = tmp_path / "b.csv"
    c.write_text("a,label\n1,x\nzz,y\n2\nnan,z\n3,\n4,w\n")
    dl = _dl()
    assert [r.y for r in CSVSource(c, dead_letter=dl)] == ["x", "w"]
    assert dl.count == 4
    s = tmp_path / "b.svm"
    s.write_text("1 1:2\nfoo 1:2\n1 1:x\n1 a\n1,2 1:1\n2 2:inf\n0 1:1\n")
    dl = _dl()
    assert [r.y for r in LibSVMSource(s, dead_letter=dl)] == [1, 0]
    assert dl.count == 5
    n = tmp_path / "b.conll"
    n.write_text("a DT B\nb NN\n\nc DT B\nd NN I\n\nlonely\n\n")
    dl = _dl()
    assert [r.y for r in CoNLLSource(n, dead_letter=dl)] == [["B", "I"]]
    assert dl.count == 2


def test_default_dead_letter_warns(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_text('{oops\n{"x": {"a": 1}, "y": 1}\n')
    src = JSONLSource(p)
    with pytest.warns(RuntimeWarning, match="dead-letter"):
        recs = list(src)
    assert len(recs) == 1 and src.n_bad == 1 and src.dead_letter.count == 1


def test_pacing(tmp_path):
    p = tmp_path / "p.jsonl"
    write_jsonl(p, [{"x": {"a": 1}, "y": 1}] * 21)
    t = time.perf_counter()
    n = sum(1 for _ in JSONLSource(p, rate=200))
    assert n == 21
    assert time.perf_counter() - t >= 0.095  # 20 intervals of 5 ms
    with pytest.raises(ValueError, match="rate"):
        JSONLSource(p, rate=0)


def test_open_source_errors(tmp_path):
    p = tmp_path / "x.weird"
    p.write_text("")
    with pytest.raises(ValueError, match="cannot tell the format"):
        open_source(p)
    assert isinstance(open_source(f"file://{p}?format=jsonl"), JSONLSource)
    src = open_source(f"file://{tmp_path / 'd.csv'}?label=k&rate=5", ) if False else None
    with pytest.raises(FileNotFoundError):
        open_source(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="unsupported source"):
        open_source("http://example/x.jsonl")
    c = tmp_path / "q.csv"
    c.write_text("k,f\n1,2\n")
    src = open_source(f"file://{c}?label=k&label_type=int")
    assert src.label == "k"
    with pytest.raises(ValueError, match="not in the header"):
        open_source(c)
    with pytest.raises(ValueError, match="outside"):
        JSONLSource(p).seek({"offset": 10**6})


def test_jsonl_sink_and_iterable_source(tmp_path):
    sink = JSONLSink(tmp_path / "out" / "p.jsonl")
    sink.write({"k": np.int64(3), "v": np.arange(2)})
    sink.close()
    assert json.loads((tmp_path / "out" / "p.jsonl").read_text()) == {"k": 3, "v": [0, 1]}
    data = [({"a": i}, i) for i in range(5)]
    src = IterableSource(data)
    it = iter(src)
    next(it), next(it)
    src2 = IterableSource(data)
    src2.seek(src.position())
    assert [r.y for r in src2] == [2, 3, 4]


def test_kafka_messages_are_decoded_one_by_one_and_any_failure_is_a_bad_record():
    """No broker needed: the per-message codec of the Kafka source (reliability issue, cases 1,
    2, 13): deep nesting, huge integers, oversized messages, BOM."""
    pytest.importorskip("kafka")
    from streamssvm.connectors.files import BadRecord
    from streamssvm.connectors.kafka import KafkaSource
    src = KafkaSource("127.0.0.1:1", "t", max_message_bytes=1 << 20)  # does not connect
    for bad in (b"[" * 100000, b'{"x": {"a": 1' + b"0" * 5000 + b'}, "y": 1}', b'{"x": {"a": 1e308}, "y": 1}',
                b"x" * (2 << 20), None, b'{"x": {"a": 1}, "y": {"u": "maybe"}}'):
        with pytest.raises(BadRecord):
            src._decode(bad)
    assert src._decode(b'\xef\xbb\xbf{"x": {"a": 1}, "y": {"u": "false"}}') == ({"a": 1.0}, {"u": False})


def test_csv_repeated_header_is_a_dead_letter(tmp_path):
    """Issue 26.13: a header line repeated mid-file (files concatenated with their headers) was
    learned as a record of class "label" (or a non-numeric bad parse); it is a dead letter."""
    c = tmp_path / "cat.csv"
    c.write_text("f1,label,f2\n1,a,2\n f1 ,label,f2\n3,b,4\n")
    dl = DeadLetterSink(MemorySink())
    src = CSVSource(c, dead_letter=dl)
    recs = list(src)
    assert [r.y for r in recs] == ["a", "b"] and recs[1].x == {"f1": 3.0, "f2": 4.0}
    assert src.n_bad == 1 and "repeated header" in dl.sink.items[0]["reason"]


def test_csv_reordered_header_stops_the_run(tmp_path):
    """Issue 26.13: a header with its columns swapped mid-file made every later row learned with
    swapped features; it stops the run (SourceFault) with the position before it, so a resume
    stops there again instead of reading on."""
    from streamssvm.errors import SourceFault
    c = tmp_path / "swap.csv"
    c.write_text("f1,f2,label\n1,2,a\nf2,f1,label\n3,4,b\n")
    src = CSVSource(c)
    got = []
    with pytest.raises(SourceFault, match="another order"):
        for r in src:
            got.append(r)
    assert [r.y for r in got] == ["a"]
    assert src.position()["offset"] == len("f1,f2,label\n1,2,a\n")
    again = CSVSource(c)
    again.seek(src.position())
    with pytest.raises(SourceFault):
        list(again)
