"""One validation, one encoding for dict records from Kafka: ``KafkaSource._decode_poll``
validates the ``x`` of a poll's records as one (``FeatureDicts``), the micro-batches carry it
(``DictRecords``) and the model encodes from its gathered arrays without checking them again.
The same records, dead letters and reasons as message by message, the same CSR arrays, and the
same predictions and model bits as record by record."""
import json
import pickle
from collections import namedtuple

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.connectors.base import DeadLetterSink, DictRecords, MemorySink
from streamssvm.connectors.files import _reason
from streamssvm.features import FeatureDicts, FeatureIndex

pytest.importorskip("kafka")


def _dicts(n, seed=0, names=12, ints=False):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        cols = rng.choice(names, size=int(rng.integers(1, 8)), replace=False)
        out.append({f"f{c}": (int(rng.integers(-3, 4)) if ints and c % 3 == 0 else float(rng.normal()))
                    for c in cols})
    return out


def test_feature_dicts_validate_as_the_record_checks_do():
    xs = _dicts(50)
    fd = FeatureDicts.of(xs)
    assert fd is not None and len(fd) == 50 and list(fd) == xs and fd[3] is xs[3] and not fd.ints
    assert fd.names == [k for x in xs for k in x]
    assert fd.values.tolist() == [v for x in xs for v in x.values()]
    part = fd[10:20]
    assert type(part) is FeatureDicts and list(part) == xs[10:20]
    assert part.names == [k for x in xs[10:20] for k in x] and part.ptr[0] == 0
    assert part.values.tolist() == [v for x in xs[10:20] for v in x.values()]
    assert FeatureDicts.of([{"a": 1}]).ints and FeatureDicts.of([{}]).values.shape == (0,)
    for bad in (float("nan"), float("inf"), 2e12, 10**40, True, "1", None):
        assert FeatureDicts.of(xs[:3] + [{"a": bad}]) is None, bad
    assert FeatureDicts.of(xs[:3] + [{1: 1.0}]) is None            # str and int names mixed
    assert FeatureDicts.of([{2**64: 1.0}]) is None                 # an int name beyond 64 bits
    assert FeatureDicts.of([{(1, 2): 1.0}]) is None                # names of other types: record by record
    assert FeatureDicts.of([[1.0]]) is None
    with pytest.raises(TypeError):
        FeatureDicts(object(), [], [], np.zeros(0), np.zeros(1, np.int64), False)


def test_dict_csr_of_feature_dicts_is_dict_csr_of_the_dicts():
    xs = _dicts(200, seed=1, ints=True)
    fi = FeatureIndex()
    for x in xs[:100]:
        fi.encode_dict(x, grow=True)
    for batch in (xs[:100], xs, xs[100:], [{"unseen": 1.0}] + xs, xs[:7] + [{"unseen": 0.0}] + xs[7:50]):
        a, b = fi.dict_csr(batch), fi.dict_csr(FeatureDicts.of(batch))
        assert a is not None and all(u.dtype == v.dtype and u.tobytes() == v.tobytes() for u, v in zip(a, b))
    assert FeatureIndex(n_features=64).dict_csr(FeatureDicts.of(xs)) is None   # hashing: record by record

    class Name(str):
        pass
    sub = [{Name(k): v for k, v in x.items()} for x in xs[:50]]   # str subclasses: names encode_record takes
    a, b = fi.dict_csr(sub), fi.dict_csr(FeatureDicts.of(sub))
    assert all(u.tobytes() == v.tobytes() for u, v in zip(a, b))
    for x, (lo, hi) in zip(sub, zip(b[0][:-1], b[0][1:])):
        enc = fi.encode_record(x)
        assert enc.fidx.tobytes() == b[1][lo:hi].tobytes() and enc.fval.tobytes() == b[2][lo:hi].tobytes()
    ints = [{int(k[1:]): v for k, v in x.items()} for x in xs]
    fi2 = FeatureIndex()
    for x in ints[:100]:
        fi2.encode_dict(x, grow=True)
    a, b = fi2.dict_csr(ints), fi2.dict_csr(FeatureDicts.of(ints))
    assert all(u.tobytes() == v.tobytes() for u, v in zip(a, b))


@pytest.mark.parametrize("new_names", [False, True])
def test_predict_learn_each_of_feature_dicts_is_bit_identical(new_names):
    xs = _dicts(900, seed=2, names=40 if new_names else 8)
    ys = [f"c{(len(x) + int(x.get('f0', 0) > 0)) % 5}" for x in xs]
    m1 = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    m2 = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    p1, p2 = [], []
    for i in range(0, len(xs), 128):
        p1 += m1.predict_learn_each(xs[i:i + 128], ys[i:i + 128])
        p2 += m2.predict_learn_each(FeatureDicts.of(xs[i:i + 128]), ys[i:i + 128])
    assert p1 == p2
    assert pickle.dumps(m1.state()) == pickle.dumps(m2.state())


M = namedtuple("M", "offset key value")


def _messages():
    ok = [json.dumps({"x": x, "y": f"c{i % 3}"}).encode() for i, x in enumerate(_dicts(40, seed=3))]
    return ok


def _poll_source(polls, **kw):
    """A KafkaSource over the given polls (lists of message values) of partition 0."""
    from kafka import TopicPartition
    from streamssvm.connectors.kafka import KafkaSource
    tp = TopicPartition("t", 0)
    msgs, off = [], 0
    for values in polls:
        msgs.append({tp: [M(off + i, None, v) for i, v in enumerate(values)]})
        off += len(values)

    class Polled:
        def __init__(self):
            self.k = 0

        def poll(self, timeout_ms, max_records):
            self.k += 1
            return msgs[self.k - 1] if self.k <= len(msgs) else {}

        def assignment(self):
            return {tp}

        def highwater(self, tp):
            return off

        def end_offsets(self, tps, timeout_ms):
            return {t: off for t in tps}

    s = KafkaSource("127.0.0.1:1", "t", partitions=[0], stop_at_end=True,
                    dead_letter=DeadLetterSink(MemorySink()), **kw)
    s._consumer = Polled()
    return s


BAD = [None, b"{broken", b'{"x": {"a": NaN}, "y": "c0"}', b'{"x": {"a": 1e400}, "y": "c0"}',
       b'{"x": {"a": 2e12}, "y": "c0"}', b'{"x": {"a": 100000000000000000000000}, "y": "c0"}',
       b'{"x": {"a": true}, "y": "c0"}', b'{"x": {"a": "1"}, "y": "c0"}', b'{"x": {"a": 1.0}}',
       b'{"x": {"a": 1.0}, "y": null}', b'{"x": {"a": 1.0}, "y": 100000000000000000000}', b"[]",
       b'{"x": 3, "y": "c0"}', b"x" * 2000]
ODD = [b'{"x": {"a": 1, "b": 2.5}, "y": "c1"}', b'{"x": [1.0, 2.0], "y": "c1"}', b'{"x": {"a": 1.0}, "y": 2.5}',
       b'{"x": {}, "y": "c2"}', b'{"x": {"a": 1.0}, "y": 7, "z": 1}']


@pytest.mark.parametrize("extra", [[], [BAD[2]], BAD, ODD[:1], ODD, BAD + ODD])
def test_decode_poll_is_decode_record_per_message(extra):
    """The same (x, y, w) or the same dead-letter reason per message; a FeatureDicts exactly when
    every record's x is a flat dict of plain numbers (and it holds those very x)."""
    s = _poll_source([], max_message_bytes=1000)
    values = _messages()
    for i, v in enumerate(extra):
        values.insert(3 * i + 1, v)
    got, fd = s._decode_poll(values)
    for v, g in zip(values, got, strict=True):
        try:
            want = s._decode_record(v)
        except Exception as e:  # noqa: BLE001
            assert not isinstance(g, tuple) and _reason(g) == _reason(e), (v, g, e)
            continue
        assert all(type(a) is type(b) for a, b in zip(g, want)), v
        assert pickle.dumps(g) == pickle.dumps(want), v
        if isinstance(want[0], dict):
            assert [type(u) for u in g[0].values()] == [type(u) for u in want[0].values()]
    recs = [g for g in got if isinstance(g, tuple)]
    plain = all(isinstance(x, dict) and type(y) in (str, int) for x, y, _ in recs)
    # a poll with a dict x of a bad value: every x checked on its own (for its reason)
    assert (fd is not None) == (plain and not any(v in extra for v in BAD[3:8]))
    if fd is not None:
        assert len(fd) == len(recs) and all(a is r[0] for a, r in zip(fd, recs))


def test_decode_poll_of_a_source_with_weights_or_its_own_decoder_is_per_message():
    values = _messages()
    assert _poll_source([], weight_field="w")._decode_poll(values)[1] is None
    s = _poll_source([])
    s._decode_record = lambda v: ({"a": 1.0}, "y", 1.0)
    got, fd = s._decode_poll(values)
    assert fd is None and got == [({"a": 1.0}, "y", 1.0)] * len(values)


def test_micro_batches_carry_the_poll_features_and_learn_the_same_bits(tmp_path):
    msgs = _messages() * 6
    polls = [msgs[:70], msgs[70:71] + [b"{broken"] + msgs[71:150], [b'{"x": [1.0], "y": "c0"}'] + msgs[150:200],
             msgs[200:220] + [b'{"x": {"f1": 2e12}, "y": "c0"}', b'{"x": {"f1": true}, "y": "c1"}'] + msgs[220:]]
    s = _poll_source(polls)
    seen = []
    for chunk in s.micro_batches(lambda: 32):
        if chunk is None:
            continue
        seen.append(type(chunk))
        if type(chunk) is DictRecords:
            assert [r.x for r in chunk] == list(chunk.features)
            assert all(r.x is x for r, x in zip(chunk, chunk.features))
    # the poll with a list x and the one with bad values: lists (each x checked on its own)
    assert s.n_bad == 2 and seen.count(list) == 4 and DictRecords in seen   # 2 + 2 micro-batches of 32

    def run(micro):
        src = _poll_source(polls)
        eng = ss.engine.Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0)), src,
                               task="multiclass", progress=False, sink=MemorySink(),
                               checkpoint_dir=tmp_path / f"m{micro}", checkpoint_every=50)
        eng.MICRO_BATCH = micro
        f = eng._predict_learn
        eng._predict_learn = lambda xs, ys, recs: kinds.append(type(xs)) or f(xs, ys, recs)
        summary = eng.run()
        return eng, summary, src.dead_letter.sink.items
    kinds = []
    e1, s1, d1 = run(1)
    assert FeatureDicts not in kinds
    e2, s2, d2 = run(64)
    assert FeatureDicts in kinds   # the engine handed the model the source's FeatureDicts
    # (a bool value is a 0/1 feature: learned, from a poll whose x were checked one by one)
    assert s1["examples_seen"] == s2["examples_seen"] == 241 and s1["n_bad"] == s2["n_bad"] == 3
    assert d1 == d2 and len(d1) == 3 and "MAX_ABS_VALUE" in d1[2]["reason"], d1
    assert e1.sink.items == e2.sink.items and s1["metrics"] == s2["metrics"]
    assert pickle.dumps(e1.model.state()) == pickle.dumps(e2.model.state())
