"""The engine's undo of a step that makes the weights non-finite, on a real Kafka-protocol
broker (Tansu; the reliability issue): the record is dead-lettered with its reason, the run goes
on, the offsets committed with each checkpoint count exactly the records done, and the model is
bit-identical to a run over the topic without that record."""
import json

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.connectors.base import DeadLetterSink, MemorySink
from streamssvm.connectors.kafka import KafkaSource, create_topic, produce_lines
from streamssvm.engine import Engine
from test_engine import _Poisoning
from test_kafka import FAST, messages

POISON_AT = 180   # offset of the poisoned record in the topic that has it


def _committed(bootstrap, topic, group):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return c.committed(TopicPartition(topic, 0))
    finally:
        c.close()


@pytest.mark.parametrize("ckpt", [True, False])
@pytest.mark.parametrize("learner", ["BCFW", "SGD"])
def test_a_poisoning_kafka_record_is_undone_and_dead_lettered(broker, tmp_path, monkeypatch, ckpt, learner):
    from streamssvm.estimators import base
    monkeypatch.setitem(base._REGISTRY, "_Poisoning", _Poisoning)   # checkpoints restore the test class
    msgs = messages(300, seed=3)
    bad = json.loads(msgs[POISON_AT])
    bad["x"]["poison"] = 1.0
    create_topic(broker, "with", partitions=1)
    produce_lines(broker, "with", msgs[:POISON_AT] + [json.dumps(bad).encode()] + msgs[POISON_AT:])
    create_topic(broker, "without", partitions=1)
    produce_lines(broker, "without", msgs)

    def run(topic, cls):
        dead = DeadLetterSink(MemorySink())
        src = KafkaSource(broker, topic, group=f"g-{topic}", stop_at_end=True, dead_letter=dead, **FAST)
        commits = []
        commit = src.commit

        def logged(position=None, asynchronous=False):
            commits.append((eng.examples_seen, eng.bad_records, int((position or src.position())["offsets"]["0"])))
            return commit(position, asynchronous)
        src.commit = logged
        eng = Engine(cls(learner=getattr(ss.learners, learner)(lam=0.01, seed=0)), src, task="multiclass",
                     dead_letter=dead, progress=False, checkpoint_dir=(tmp_path / topic) if ckpt else None,
                     checkpoint_every=50, snapshot_every=70)
        try:
            return eng, eng.run(), dead, commits
        finally:
            src.close()

    e1, s1, dl1, commits1 = run("with", _Poisoning)
    e2, s2, _, _ = run("without", ss.MulticlassSSVM)
    # dead-lettered with its reason and origin, once; the run went on to the end of the topic
    assert s1["undone"] >= 1 and s1["bad_records"] == 1 and dl1.count == 1
    (item,) = dl1.sink.items
    assert "non-finite" in item["reason"] and item["origin"] == f"with/0@{POISON_AT}", item
    assert s1["examples_seen"] == s2["examples_seen"] == 300
    # bit-identical to a run that never saw the record
    assert e1.model.weights_finite()
    for k in ("E", "T", "B"):
        np.testing.assert_array_equal(getattr(e1.model._learner.W, k), getattr(e2.model._learner.W, k))
    assert s1["metrics"] == s2["metrics"]
    if not ckpt:
        return
    # every commit follows a durable checkpoint and counts exactly the records done: the
    # offset is the records learned plus the dead letter once past it, and never goes back
    assert len(commits1) >= 6
    for seen, n_bad, off in commits1:
        assert off == seen + n_bad and n_bad == (1 if off > POISON_AT else 0), commits1
    assert [c[2] for c in commits1] == sorted(c[2] for c in commits1)
    assert commits1[-1][2] == 301 and _committed(broker, "with", "g-with") == 301
    # the newest checkpoint on disk says the same
    st, meta = e1.ckpt.load(e1.ckpt.list()[-1])
    assert meta["position"]["offsets"] == {"0": 301} and meta["examples_seen"] == 300 and meta["bad_records"] == 1
