"""Kafka connector and exactly-once streaming, against a real Kafka-protocol broker (Tansu)."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.connectors.base import DeadLetterSink
from streamssvm.connectors.kafka import KafkaSink, KafkaSource, create_topic, produce_lines
from streamssvm.engine import Engine

FAST = dict(session_timeout_ms=6000, heartbeat_interval_ms=1000)


def messages(n, seed=0, bad=()):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(4, 6))
    out = []
    for i in range(n):
        if i in bad:
            out.append(bad[i] if isinstance(bad, dict) else b"{broken")
            continue
        x = rng.normal(size=6)
        out.append(json.dumps({"x": {f"f{j}": float(v) for j, v in enumerate(x)},
                               "y": int(np.argmax(W @ x))}).encode())
    return out


def consume_all(bootstrap, topic, timeout=20):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    deadline = time.time() + timeout
    while not c.partitions_for_topic(topic):
        if time.time() > deadline:
            return []
        time.sleep(0.1)
    tps = [TopicPartition(topic, p) for p in c.partitions_for_topic(topic)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    ends = c.end_offsets(tps)
    out = []
    while any(c.position(tp) < ends[tp] for tp in tps) and time.time() < deadline:
        for _, msgs in c.poll(timeout_ms=200).items():
            out.extend(msgs)
    c.close()
    return out


def worker_cmd(bootstrap, topic, ckpt, save, extra=()):
    return [sys.executable, "-m", "streamssvm", "run", "--source",
            f"kafka://{bootstrap}/{topic}?group=g1", "--task", "multiclass", "--lam", "0.01",
            "--replay", "1", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "50",
            "--save", str(save), "--json", "--no-progress", *extra]


def reference_weights(msgs):
    """The model an uninterrupted run over the same messages (in order) must end with."""
    # the CLI's BCFW: the library's defaults (FW steps, no oracle cache), seed 0
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, replay=1, seed=0))
    for raw in msgs:
        try:
            obj = json.loads(raw)
            x, y = obj["x"], obj["y"]
        except (ValueError, KeyError):
            continue
        m.predict_one(x)
        m.learn_one(x, y)
    m.certificate()  # the worker's final snapshot (it re-sums the weights from the blocks)
    return m


def test_round_trip_topic_to_predictions(broker):
    msgs = messages(300, bad={10: b"{no", 150: b'{"x": {"a": 1}}'})
    create_topic(broker, "in", partitions=2)
    produce_lines(broker, "in", msgs, partitions=2, key_prefix="m")
    dead = DeadLetterSink(KafkaSink(broker, "dead"))
    src = KafkaSource(broker, "in", group="g", stop_at_end=True, dead_letter=dead, **FAST)
    eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0)), src, task="multiclass",
                 sink=KafkaSink(broker, "preds"), dead_letter=dead, progress=False)
    s = eng.run()
    eng.sink.close()
    dead.close()
    assert s["examples_seen"] == 298 and src.n_bad == 2
    preds = consume_all(broker, "preds")
    dl = consume_all(broker, "dead")
    assert len(preds) == 298 and len(dl) == 2
    keys = {p.key.decode() for p in preds}
    assert keys == {f"m{i}" for i in range(300)} - {"m10", "m150"}  # every message accounted for
    assert max(json.loads(p.value)["examples_seen"] for p in preds) == 298
    reasons = sorted(json.loads(d.value)["reason"] for d in dl)
    assert reasons[0].startswith("invalid JSON") and "missing field 'y'" in reasons[1]
    assert {json.loads(d.value)["origin"].split("@")[0] for d in dl} <= {"in/0", "in/1"}


def test_malformed_messages_go_to_dead_letter_topic(broker):
    bad = {3: b"not json", 5: b'{"x": {"a": 1}}', 7: b'{"y": 1}', 9: b'{"x": {"a": NaN}, "y": 1}',
           11: b'{"x": {"a": Infinity}, "y": 1}', 13: b'{"x": [[1, 2], [3]], "y": [1, 2]}',
           15: json.dumps({"x": {"a": 1.0, "pad": "z" * 2000}, "y": 1}).encode(),
           17: b'{"x": {"f0": 1.0}, "y": [1, 2]}', 19: b"\xff\xfe\x00"}
    msgs = messages(60, bad=bad)
    create_topic(broker, "t", partitions=1)
    produce_lines(broker, "t", msgs)
    dead = DeadLetterSink(KafkaSink(broker, "dlq"))
    src = KafkaSource(broker, "t", group="g", stop_at_end=True, dead_letter=dead, max_message_bytes=1000, **FAST)
    eng = Engine(ss.MulticlassSSVM(), src, task="multiclass", dead_letter=dead, progress=False)
    s = eng.run()
    dead.close()
    assert s["examples_seen"] == 60 - len(bad)
    assert src.n_bad + s["bad_records"] == len(bad) == dead.count
    dl = [json.loads(d.value) for d in consume_all(broker, "dlq")]
    assert len(dl) == len(bad)
    text = " | ".join(d["reason"] for d in dl)
    for frag in ("invalid JSON", "missing field 'y'", "missing field 'x'", "non-finite", "ragged",
                 "oversized", "multiclass label must be a single value"):
        assert frag in text
    assert all("origin" in d and "raw_base64" in d or d["origin"].startswith("t/0@") for d in dl)


def test_sigkill_worker_then_resume_equals_uninterrupted(broker, tmp_path):
    msgs = messages(800, seed=1, bad={100: b"{x"})
    create_topic(broker, "s", partitions=1)
    produce_lines(broker, "s", msgs)
    ref = reference_weights(msgs)
    ck = tmp_path / "ck"
    cmd = worker_cmd(broker, "s", ck, tmp_path / "m.ssvm", ["--rate", "250", "--idle-timeout", "4"])
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t0 = time.time()
    while time.time() - t0 < 300 and not (ck.is_dir() and len(list(ck.glob("ckpt-*"))) >= 3):
        time.sleep(0.05)
    # the wait is for the worker's start (interpreter, compiled kernels, group join): under a
    # loaded CI it once took more than 60 s, and the kill then found no checkpoint
    assert len(list(ck.glob("ckpt-*"))) >= 3, "the worker wrote no 3 checkpoints in 300 s"
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL
    seen_at_kill = max(json.loads((d / "manifest.json").read_text())["meta"]["examples_seen"]
                       for d in ck.glob("ckpt-*"))
    assert 0 < seen_at_kill < 799
    # the killed member's session (6 s) must expire before the group hands its partition over
    res = subprocess.run(worker_cmd(broker, "s", ck, tmp_path / "m.ssvm", ["--idle-timeout", "15"]),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["examples_seen"] == 799 and out["resumed_from"]
    m = ss.MulticlassSSVM.load(tmp_path / "m.ssvm")
    assert m._learner.n_learned == 799
    np.testing.assert_array_equal(m._learner.W.E, ref._learner.W.E)


def test_corrupt_newest_checkpoint_uses_previous_and_seeks(broker, tmp_path):
    msgs = messages(400, seed=2)
    create_topic(broker, "c", partitions=1)
    produce_lines(broker, "c", msgs)
    ck = tmp_path / "ck"
    r1 = subprocess.run(worker_cmd(broker, "c", ck, tmp_path / "a.ssvm", ["--max-examples", "300",
                                                                           "--idle-timeout", "4"]),
                        capture_output=True, text=True, timeout=120)
    assert r1.returncode == 0, r1.stderr
    newest = sorted(ck.glob("ckpt-*"))[-1]
    assert json.loads((newest / "manifest.json").read_text())["meta"]["examples_seen"] == 300
    (newest / "manifest.json").write_text('{"format": "streamssvm-checkpoint", "trunc')
    # the idle timeout also covers joining the group: 4 s expired once before the first record on a
    # machine at load 7, so the run that ends by it waits longer
    r2 = subprocess.run(worker_cmd(broker, "c", ck, tmp_path / "b.ssvm", ["--idle-timeout", "10"]),
                        capture_output=True, text=True, timeout=120)
    assert r2.returncode == 0, r2.stderr
    assert "skipping invalid checkpoint" in r2.stderr
    out = json.loads(r2.stdout)
    assert out["examples_seen"] == 400  # resumed at 250, re-read 250..299 once more, nothing lost
    m = ss.MulticlassSSVM.load(tmp_path / "b.ssvm")
    np.testing.assert_array_equal(m._learner.W.E, reference_weights(msgs)._learner.W.E)


def test_broker_restart_during_consumption(tmp_path):
    """The broker dies mid-stream and comes back (same address; its in-memory log is
    re-produced identically, as a durable broker would serve it): the worker reconnects, seeks
    to its own offsets and ends with the uninterrupted model."""
    from streamssvm.cli import free_port, start_broker
    port = free_port()
    log = open(tmp_path / "broker.log", "wb")
    proc, bootstrap = start_broker(port, log=log)
    msgs = messages(900, seed=3)
    try:
        create_topic(bootstrap, "r", partitions=1)
        produce_lines(bootstrap, "r", msgs, partitions=1)
        ck = tmp_path / "ck"
        w = subprocess.Popen(worker_cmd(bootstrap, "r", ck, tmp_path / "m.ssvm",
                                        ["--rate", "300", "--idle-timeout", "12"]),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        t0 = time.time()
        while time.time() - t0 < 300 and not (ck.is_dir() and len(list(ck.glob("ckpt-*"))) >= 2):
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        time.sleep(1.0)
        proc, _ = start_broker(port, log=log)
        time.sleep(4.0)   # let the worker rejoin first (the race below, made certain)
        create_topic(bootstrap, "r", partitions=1)
        # all to partition 0, as the first time: the worker's group join may already have made
        # the broker auto-create "r" with its default 4 partitions (Tansu does, whatever the
        # consumer's allow_auto_create_topics), and the producer's default partitioner would then
        # spread the re-produced log over them (the worker learned 1563 of 900 under load)
        produce_lines(bootstrap, "r", msgs, partitions=1)
        out, err = w.communicate(timeout=180)
        assert w.returncode == 0, err.decode()[-3000:]
        res = json.loads(out)
        assert res["examples_seen"] == 900
        m = ss.MulticlassSSVM.load(tmp_path / "m.ssvm")
        np.testing.assert_array_equal(m._learner.W.E, reference_weights(msgs)._learner.W.E)
    finally:
        proc.kill()
        proc.wait()
        log.close()


def test_two_workers_split_partitions(broker, tmp_path):
    """Two workers of one consumer group split a two-partition topic: every message lands in
    exactly one worker's model and both learn. The messages come in rounds of 50 per partition
    until both workers have checkpointed (each has held a partition), then all the rest: with
    the whole topic there from the start, the first worker to join could read all of it before
    the group rebalanced to let the second in (CI saw 1200 and 0 under load)."""
    msgs = messages(1200, seed=4)
    create_topic(broker, "p", partitions=2)
    ws = [subprocess.Popen(worker_cmd(broker, "p", tmp_path / f"ck{k}", tmp_path / f"w{k}.ssvm",
                                      ["--idle-timeout", "15"]),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE) for k in range(2)]

    def both_checkpointed():
        return all(any((tmp_path / f"ck{k}").glob("ckpt-*")) for k in range(2))

    sent = 0
    while sent < len(msgs) and not both_checkpointed():
        produce_lines(broker, "p", msgs[sent:sent + 100], partitions=2)  # 50 to each partition
        sent += 100
        deadline = time.time() + 1.5
        while time.time() < deadline and not both_checkpointed():
            time.sleep(0.1)
    produce_lines(broker, "p", msgs[sent:], partitions=2)
    outs = []
    for w in ws:
        out, err = w.communicate(timeout=180)
        assert w.returncode == 0, err.decode()[-3000:]
        outs.append(json.loads(out))
    seen = [o["examples_seen"] for o in outs]
    assert sum(seen) == 1200  # every message in exactly one worker's model
    assert all(s > 0 for s in seen), (seen, sent)
    for k in range(2):
        man = json.loads(sorted((tmp_path / f"ck{k}").glob("ckpt-*"))[-1].joinpath("manifest.json").read_text())
        assert man["meta"]["examples_seen"] == seen[k]
        assert set(man["meta"]["position"]["offsets"]) <= {"0", "1"}


def test_the_kafka_extra_checks_message_crcs_in_c():
    """kafka-python checks every message's CRC-32C; in pure Python that was the largest cost of
    consuming (57 of ~72 us per letter message): the ``kafka`` extra brings the ``crc32c``
    package (kafka-python's own ``crc32c`` extra), which it then uses."""
    from streamssvm.connectors.kafka import crc_in_python
    assert not crc_in_python()


def test_a_pure_python_crc_check_is_said_once(monkeypatch):
    import warnings

    from kafka.record import util

    from streamssvm.connectors import kafka as K
    monkeypatch.setattr(util, "crc32c_c", None)
    monkeypatch.setitem(K._CRC_NOTICE, "given", False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        K.warn_if_crc_in_python()
        K.warn_if_crc_in_python()
    assert [str(w.message).split(";")[0] for w in seen] == [
        "kafka-python checks every message's CRC in pure Python, the largest cost of consuming it"]
