"""Micro-batches from a Kafka source (``KafkaSource.stream``): the engine learns runs of
records of one poll in one kernel call, with the same bits as record by record, and a run never
spans two polls (the next poll may revoke partitions and checkpoint at the source's position)."""
import pickle

import pytest

import streamssvm as ss
from streamssvm.connectors.base import READ_BREAK, DeadLetterSink, MemorySink
from streamssvm.connectors.kafka import KafkaSource, create_topic, produce_lines
from streamssvm.engine import Engine

from test_kafka import messages
from same_checkpoints import assert_same_checkpoints

pytest.importorskip("kafka")


def _run(bootstrap, topic, micro, ckpt, group):
    sink, dl = MemorySink(), DeadLetterSink(MemorySink())
    src = KafkaSource(bootstrap, topic, group=group, stop_at_end=True, dead_letter=dl, max_poll_records=37,
                      session_timeout_ms=6000, heartbeat_interval_ms=1000)
    eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0)), src, task="multiclass",
                 progress=False, checkpoint_dir=ckpt, checkpoint_every=100, snapshot_every=70, sink=sink)
    eng.MICRO_BATCH = micro
    breaks = []   # the offset of the last record of each poll
    stream = src.stream

    def watched():
        last = None
        for item in stream():
            if item is READ_BREAK:
                breaks.append(last)
            elif item is not None:
                last = int(item.origin.rsplit("@", 1)[1])
            yield item
    src.stream = watched
    sizes = []
    f = eng._predict_learn
    eng._predict_learn = lambda xs, ys, recs: sizes.append([r.origin for r in recs]) or f(xs, ys, recs)
    s = eng.run()
    src.close()
    return eng, s, sink, dl, sizes, breaks


def test_kafka_micro_batches_equal_record_by_record(broker, tmp_path):
    msgs = messages(600, seed=3, bad={55: b"{broken", 56: b'{"x": {"f0": NaN}, "y": 1}', 300: b"[]"})
    create_topic(broker, "mb", 1)
    produce_lines(broker, "mb", msgs)
    e1, s1, k1, d1, z1, _ = _run(broker, "mb", 1, tmp_path / "a", "ga")
    e2, s2, k2, d2, z2, polls = _run(broker, "mb", 256, tmp_path / "b", "gb")
    assert s1["examples_seen"] == s2["examples_seen"] == 597 and s1["n_bad"] == s2["n_bad"] == 3
    assert k1.items == k2.items
    assert d1.sink.items == d2.sink.items
    assert pickle.dumps(e1.model.state()) == pickle.dumps(e2.model.state())
    assert s1["metrics"] == s2["metrics"]
    assert_same_checkpoints(e1, e2, more_than=2)   # (the newest ones kept)
    # record by record before: a Kafka source (a consumer-group member) was never micro-batched
    assert max(len(z) for z in z1) == 1 and max(len(z) for z in z2) > 1
    # no run spans two polls
    assert len(polls) >= 600 // 37
    for z in z2:
        first, last = (int(o.rsplit("@", 1)[1]) for o in (z[0], z[-1]))
        assert not any(first <= b < last for b in polls), (first, last)


def test_stream_breaks_after_every_poll(broker):
    create_topic(broker, "br", 1)
    produce_lines(broker, "br", messages(100, seed=1, bad={10: b"{broken"}))
    src = KafkaSource(broker, "br", partitions=[0], stop_at_end=True, max_poll_records=30,
                      dead_letter=DeadLetterSink(MemorySink()))
    polls, cur = [], []
    for item in src.stream():
        if item is READ_BREAK:
            polls.append(cur)
            cur = []
        elif item is not None:
            cur.append(item)
    src.close()
    assert not cur and sum(map(len, polls)) == 99 and src.n_bad == 1
    assert all(0 < len(p) <= 30 for p in polls)


def test_record_positions_are_the_source_positions(broker):
    """Each record's position is ``position()`` right after it (built from a per-partition
    template), over several partitions."""
    create_topic(broker, "pos", 3)
    produce_lines(broker, "pos", messages(90, seed=2), partitions=3)
    src = KafkaSource(broker, "pos", stop_at_end=True, max_poll_records=10, dead_letter=DeadLetterSink(MemorySink()))
    n = 0
    for item in src._items():
        if hasattr(item, "position"):
            n += 1
            p, off = item.origin.rsplit("/", 1)[1].split("@")
            assert item.position["offsets"][p] == int(off) + 1
            assert item.position == src.position()   # (read record by record here)
            assert list(item.position["offsets"]) == list(src.position()["offsets"])
    src.close()
    assert n == 90


def test_stop_at_end_without_waiting_for_an_empty_poll(broker):
    """``stop_at_end``: the iteration ends after the poll that reaches the end of every partition
    (before: one more poll, empty after ``fetch_max_wait_ms``, then the end probe)."""
    create_topic(broker, "end", 1)
    produce_lines(broker, "end", messages(50, seed=4))
    src = KafkaSource(broker, "end", partitions=[0], stop_at_end=True, fetch_max_wait_ms=400, poll_timeout_ms=1000,
                      dead_letter=DeadLetterSink(MemorySink()))
    polls = []
    c = src._make_consumer()
    poll = c.poll
    c.poll = lambda **kw: polls.append(poll(**kw)) or polls[-1]
    n = sum(1 for item in src if item is not None)
    src.close()
    assert n == 50 and src.position()["offsets"] == {"0": 50}
    assert polls and polls[-1]   # the last poll returned messages (before: an empty one)


def test_a_polled_record_makes_its_position_when_asked():
    """``_PolledRecord``: the poll's template with its own offset, a fresh dict each time (the
    template is shared by the poll's records and never changed); set, the value set; pickled
    and copied with it."""
    import copy
    from streamssvm.connectors.base import Record
    from streamssvm.connectors.kafka import _PolledRecord
    template = {"0": 5, "1": 7, "2": 3}
    r = _PolledRecord({"a": 1.0}, "y", "k", "t/1@9", 1.0, "t", template, "1", 10)
    assert isinstance(r, Record)
    assert r.position == {"topic": "t", "offsets": {"0": 5, "1": 10, "2": 3}}
    assert list(r.position["offsets"]) == ["0", "1", "2"]
    r.position["offsets"]["0"] = 99
    assert template == {"0": 5, "1": 7, "2": 3} and r.position["offsets"]["0"] == 5
    assert pickle.loads(pickle.dumps(r)).position == r.position == copy.deepcopy(r).position
    r.position = {"topic": "t", "offsets": {"0": 1}}
    assert r.position == {"topic": "t", "offsets": {"0": 1}}
    assert (r.x, r.y, r.key, r.origin, r.w) == ({"a": 1.0}, "y", "k", "t/1@9", 1.0)


def _run_positions(bootstrap, topic, ckpt, eager):
    """The engine over 3 partitions, polls of 50, checkpoints every 100, snapshots every 150;
    ``eager``: each record handed on as a plain ``Record`` with its position made when read
    (how the source made it before ``_PolledRecord``). The engine asks for the position of the
    last record of each micro-batch once it is learned."""
    from streamssvm.connectors.base import Record
    from streamssvm.connectors.kafka import _PolledRecord
    sink, dl = MemorySink(), DeadLetterSink(MemorySink())
    src = KafkaSource(bootstrap, topic, partitions=[0, 1, 2], stop_at_end=True, dead_letter=dl,
                      max_poll_records=50)
    eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0)), src, task="multiclass",
                 progress=False, checkpoint_dir=ckpt, checkpoint_every=100, snapshot_every=150, sink=sink)
    items, read_at = src._items, []   # each record with its position when read

    def read(*a, **k):
        for item in items(*a, **k):
            if isinstance(item, _PolledRecord):
                read_at.append((item, item.position))
                if eager:
                    item = Record(x=item.x, y=item.y, key=item.key, position=item.position,
                                  origin=item.origin, w=item.w)
            yield item
    src._items = read
    s = eng.run()
    final = src.position()
    src.close()
    assert len(read_at) == s["examples_seen"]
    assert all(r.position == p for r, p in read_at)   # the same when asked after the run
    return eng, s, sink, dl, final


def test_positions_made_when_asked_give_the_same_run(broker, tmp_path):
    """Records whose position is made when asked (``_PolledRecord``) give the run of positions
    made in advance: predictions, dead letters, model state and weights, checkpoints and their
    positions, the final position."""
    msgs = messages(900, seed=5, bad={40: b"{broken", 333: b'{"x": {"f0": NaN}, "y": 1}', 700: b"[]"})
    create_topic(broker, "lazy", 3)
    produce_lines(broker, "lazy", msgs, partitions=3)
    e1, s1, k1, d1, p1 = _run_positions(broker, "lazy", tmp_path / "a", eager=False)
    e2, s2, k2, d2, p2 = _run_positions(broker, "lazy", tmp_path / "b", eager=True)
    assert s1["examples_seen"] == s2["examples_seen"] == 897 and s1["n_bad"] == s2["n_bad"] == 3
    assert k1.items == k2.items and d1.sink.items == d2.sink.items
    assert pickle.dumps(e1.model.state()) == pickle.dumps(e2.model.state())
    assert s1["metrics"] == s2["metrics"]
    assert p1 == p2 == {"topic": "lazy", "offsets": {"0": 300, "1": 300, "2": 300}}
    assert_same_checkpoints(e1, e2, more_than=2)
