"""Faults and hostile inputs, round two (issue 26): sources that know their input (file identity,
partial last lines), parser quirks, the checkpoint directory's lock and disk faults, Kafka
brokers that die or come back empty, exact bad-record counts across resumes."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.connectors.base import DeadLetterSink
from streamssvm.connectors.files import CSVSource, LibSVMSource, open_source, write_jsonl
from streamssvm.engine import Engine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _quiet():
    d = DeadLetterSink()
    d.warn = False
    return d


def _read(src):
    return [(r.x, r.y) for r in src]


def _records(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": {"f": float(c) + 0.1 * rng.normal(), "g": float(rng.normal())}, "y": int(c)}
            for c in rng.integers(0, 3, n)]


def _cli(*args, env=None):
    e = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([sys.executable, "-m", "streamssvm", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=e)


# ----------------------------------------------------------------------------- (13) parser quirks
def test_csv_quoted_newline_is_one_record(tmp_path):
    p = tmp_path / "q.csv"
    p.write_bytes(b'a,label,c\n1,"x\ny",2\n3,z,4\n')
    dl = _quiet()
    assert _read(CSVSource(p, dead_letter=dl)) == [({"a": 1.0, "c": 2.0}, "x\ny"), ({"a": 3.0, "c": 4.0}, "z")]
    assert dl.count == 0
    p.write_bytes(b'a,label\n1,u\n2,"v\n')   # a quote open at the end: a bad record, not a fragment
    dl = _quiet()
    assert _read(CSVSource(p, dead_letter=dl)) == [({"a": 1.0}, "u")]
    assert dl.count == 1 and "still open" in dl.sink.items[0]["reason"]


def test_duplicates_are_bad_records(tmp_path):
    c = tmp_path / "d.csv"
    c.write_bytes(b"a,a,label\n1,2,u\n3,,v\n")
    dl = _quiet()
    assert _read(CSVSource(c, dead_letter=dl)) == [({"a": 3.0}, "v")]
    assert "duplicate column 'a'" in dl.sink.items[0]["reason"]
    s = tmp_path / "d.libsvm"
    s.write_bytes(b"1 1:1 1:2\n2 1:1 2:2\n")
    dl = _quiet()
    assert _read(LibSVMSource(s, dead_letter=dl)) == [({"1": 1.0, "2": 2.0}, 2)]
    assert dl.sink.items[0]["reason"] == "duplicate feature index 1"


def test_integer_labels_exact_and_ascii_digits_only(tmp_path):
    s = tmp_path / "l.libsvm"
    s.write_bytes(f"{2**53 + 1} 1:1\n{2**63 - 1} 1:1\n{2**63} 1:1\n1_000 1:1\n".encode()
                  + "\u0661 1:1\n3 1:1_0\n-2.0 1:1\n".encode())
    dl = _quiet()
    got = [y for _, y in _read(LibSVMSource(s, dead_letter=dl))]
    assert got == [2**53 + 1, 2**63 - 1, -2] and dl.count == 4
    c = tmp_path / "l.csv"
    c.write_text("a,label\n1_000,u\n\u0661,u\n1e3,u\n2,9007199254740993\n", encoding="utf-8")
    dl = _quiet()
    assert _read(CSVSource(c, dead_letter=dl)) == [({"a": 1000.0}, "u"), ({"a": 2.0}, "9007199254740993")]
    assert dl.count == 2
    dl = _quiet()
    assert _read(CSVSource(c, dead_letter=dl, label_type=int))[-1][1] == 2**53 + 1


# ----------------------------------------------------------------------------- (5) file identity
def _engine(path, ck, **kw):
    kw.setdefault("checkpoint_every", 100)
    return Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0)), open_source(path),
                  task="multiclass", checkpoint_dir=ck, progress=False, **kw)


@pytest.mark.parametrize("change", ["rotated", "truncated", "rewritten"])
def test_a_changed_file_is_refused_and_no_checkpoint_is_lost(tmp_path, change):
    p = tmp_path / "s.jsonl"
    write_jsonl(p, _records(300))
    ck = tmp_path / "ck"
    assert _engine(p, ck, keep=3, max_examples=250).run()["examples_seen"] == 250
    before = sorted(x.name for x in ck.glob("ckpt-*"))
    if change == "rotated":
        os.rename(p, tmp_path / "s.jsonl.1")
        write_jsonl(p, _records(300, seed=1))
    elif change == "truncated":
        with open(p, "r+b") as f:
            f.truncate(1000)
    else:
        write_jsonl(p, _records(300, seed=1))   # same inode, other records
    from streamssvm.errors import SourceChanged
    with pytest.raises(SourceChanged, match="skip or repeat"):
        _engine(p, ck, keep=3).run()
    assert sorted(x.name for x in ck.glob("ckpt-*")) == before
    r = _cli("run", "--source", p, "--task", "multiclass", "--checkpoint-dir", ck, "--no-progress")
    assert r.returncode == 3 and "error:" in r.stderr and "--reset" in r.stderr, r.stderr
    assert sorted(x.name for x in ck.glob("ckpt-*")) == before


def test_an_appended_file_resumes(tmp_path):
    p = tmp_path / "s.jsonl"
    recs = _records(300)
    write_jsonl(p, recs[:200])
    ck = tmp_path / "ck"
    assert _engine(p, ck).run()["examples_seen"] == 200
    write_jsonl(p, recs)    # the same first 200 lines, then 100 more (rewritten, same bytes)
    s = _engine(p, ck).run()
    assert s["resumed_from"] and s["examples_seen"] == 300


def test_a_half_written_last_line_waits_for_its_newline(tmp_path):
    p = tmp_path / "s.libsvm"
    p.write_bytes(b"1 1:0.5\n2 1:0.5 2:0.")
    ck = tmp_path / "ck"
    dl = _quiet()
    eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0)), open_source(p, dead_letter=dl),
                 task="multiclass", checkpoint_dir=ck, progress=False)
    assert eng.run()["examples_seen"] == 1
    assert dl.count == 1 and dl.sink.items[0]["reason"].startswith("incomplete last line")
    with open(p, "ab") as f:
        f.write(b"75 3:1\n")
    eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0)), open_source(p, dead_letter=_quiet()),
                 task="multiclass", checkpoint_dir=ck, progress=False)
    s = eng.run()
    assert s["examples_seen"] == 2
    assert sorted(eng.model.classes_ if hasattr(eng.model, "classes_") else eng.model._labels.labels) == [1, 2]
    assert eng.model._features.names == ["1", "2", "3"]


# ----------------------------------------------------------------------------- (10) lock, disk faults
def _run_args(src, ck, *extra):
    return ("run", "--source", src, "--task", "multiclass", "--checkpoint-dir", ck, "--no-progress",
            "--checkpoint-every", "100", *extra)


def test_a_second_run_on_one_checkpoint_directory_is_refused(tmp_path):
    from streamssvm.checkpoint import CheckpointManager
    from streamssvm.errors import RunFault
    p = tmp_path / "s.jsonl"
    write_jsonl(p, _records(200))
    ck = tmp_path / "ck"
    holder = CheckpointManager(ck)
    holder.acquire()       # the first run, alive
    try:
        r = _cli(*_run_args(p, ck, "--sink", tmp_path / "pred.jsonl"))
        assert r.returncode == 3, r.stderr
        assert f"in use by another run (pid {os.getpid()})" in r.stderr and "Traceback" not in r.stderr
        assert not (tmp_path / "pred.jsonl").exists() and not list(ck.glob("ckpt-*"))
        with pytest.raises(RunFault, match="in use"):
            _engine(p, ck).run()
    finally:
        holder.release()
    r = _cli(*_run_args(p, ck))      # released (a killed holder releases it too: flock)
    assert r.returncode == 0, r.stderr


def test_unwritable_checkpoint_directory_is_one_line_before_any_work(tmp_path):
    p = tmp_path / "s.jsonl"
    write_jsonl(p, _records(50))
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = _cli(*_run_args(p, blocker / "ck"))
    assert r.returncode == 3 and "not writable" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_full_disk_gives_one_line_and_no_torn_sink_line(tmp_path):
    p = tmp_path / "s.jsonl"
    write_jsonl(p, _records(300))
    r = _cli(*_run_args(p, tmp_path / "ck", "--sink", "/dev/full"))
    assert r.returncode == 3, r.stderr
    assert "No space left on device (/dev/full)" in r.stderr and "Traceback" not in r.stderr
    # a sink a killed (or out-of-space) run left with half a line: cut back before appending
    sink = tmp_path / "pred.jsonl"
    sink.write_bytes(b'{"key": 1, "prediction": 0, "examples_seen": 1}\n{"key": 2, "predic')
    r = _cli(*_run_args(p, tmp_path / "ck2", "--sink", sink))
    assert r.returncode == 0 and "removed a torn last line of 18 bytes" in r.stderr, r.stderr
    lines = sink.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(x) for x in lines[:-1]) and len(lines) == 302


def test_full_disk_while_checkpointing_is_one_line(tmp_path):
    import resource
    import signal as sg
    p = tmp_path / "s.jsonl"
    write_jsonl(p, _records(300))

    def small_files():
        sg.signal(sg.SIGXFSZ, sg.SIG_IGN)    # writes past the limit fail with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (1500, 1500))

    r = subprocess.run([sys.executable, "-m", "streamssvm", *map(str, _run_args(p, tmp_path / "ck"))],
                       capture_output=True, text=True, timeout=300, preexec_fn=small_files,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 3, r.stderr
    assert "error: File too large" in r.stderr and "Traceback" not in r.stderr, r.stderr


# ----------------------------------------------------------------------------- Kafka (3, 4, 9)
def _kafka_messages(n, seed=0, bad=()):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(3, 4))
    out = []
    for i in range(n):
        if i in bad:
            out.append(b"{broken %d" % i)
            continue
        x = rng.normal(size=4)
        out.append(json.dumps({"x": {f"f{j}": float(v) for j, v in enumerate(x)}, "y": int(np.argmax(W @ x))}).encode())
    return out


def _kafka_run(bootstrap, topic, ck, *extra, query="?group=g1"):
    return [sys.executable, "-m", "streamssvm", "run", "--source", f"kafka://{bootstrap}/{topic}{query}",
            "--task", "multiclass", "--checkpoint-dir", str(ck), "--checkpoint-every", "50", "--json",
            "--no-progress", *map(str, extra)]


def _env():
    return dict(os.environ, PYTHONPATH=ROOT)


@pytest.mark.parametrize("fault", ["broker killed", "topic deleted"])
def test_kafka_dead_broker_or_deleted_topic_ends_the_run_after_idle_timeout(tmp_path, fault):
    import time
    from kafka import KafkaAdminClient
    from streamssvm.cli import start_broker
    from streamssvm.connectors.kafka import create_topic, produce_lines
    log = open(tmp_path / "broker.log", "wb")
    proc, bootstrap = start_broker(log=log)
    try:
        create_topic(bootstrap, "d", partitions=1)
        produce_lines(bootstrap, "d", _kafka_messages(400))
        ck = tmp_path / "ck"
        w = subprocess.Popen(_kafka_run(bootstrap, "d", ck, "--rate", "200", "--idle-timeout", "8"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        t0 = time.time()
        while time.time() - t0 < 300 and not list(ck.glob("ckpt-*")):
            time.sleep(0.05)
        assert w.poll() is None
        if fault == "broker killed":
            proc.kill()
            proc.wait()
        else:
            a = KafkaAdminClient(bootstrap_servers=bootstrap)
            a.delete_topics(["d"])
            a.close()
        t_fault = time.time()
        out, err = w.communicate(timeout=90)   # before the fix: alive for ever (a commit without a timeout)
        err = err.decode()
        assert w.returncode == 3, err[-2000:]
        assert ("no answer from the Kafka broker" if fault == "broker killed" else "deleted or recreated") in err
        assert time.time() - t_fault < 60 and list(ck.glob("ckpt-*"))
    finally:
        proc.kill()
        proc.wait()
        log.close()


def _recreate(bootstrap, topic, msgs):
    import time
    from kafka import KafkaAdminClient
    from streamssvm.connectors.kafka import create_topic, produce_lines
    a = KafkaAdminClient(bootstrap_servers=bootstrap)
    a.delete_topics([topic])
    a.close()
    time.sleep(0.5)
    create_topic(bootstrap, topic, partitions=1)
    produce_lines(bootstrap, topic, msgs)


def test_kafka_log_restarted_below_the_checkpoint_stops_loudly(broker, tmp_path):
    from streamssvm.connectors.kafka import create_topic, produce_lines
    create_topic(broker, "r", partitions=1)
    produce_lines(broker, "r", _kafka_messages(300))
    ck = tmp_path / "ck"
    q = "?partitions=0&stop_at_end=1"
    r = subprocess.run(_kafka_run(broker, "r", ck, "--idle-timeout", "20", query=q), capture_output=True,
                       text=True, timeout=120, env=_env())
    assert r.returncode == 0 and json.loads(r.stdout)["examples_seen"] == 300, r.stderr
    _recreate(broker, "r", _kafka_messages(150, seed=5))
    # the log now ends below the checkpointed offset 300: before the fix, all 150 skipped and exit 0
    for idle in ("3", "20"):     # stopped by the idle timeout, or by the grace period (10 s)
        r = subprocess.run(_kafka_run(broker, "r", ck, "--idle-timeout", idle, query=q), capture_output=True,
                           text=True, timeout=120, env=_env())
        assert r.returncode == 3 and "below the checkpointed offset 300" in r.stderr, r.stderr
    r = subprocess.run(_kafka_run(broker, "r", ck, "--idle-timeout", "20", "--on-offset-reset", "earliest",
                                  query=q), capture_output=True, text=True, timeout=120, env=_env())
    assert r.returncode == 0, r.stderr
    assert "reading it from offset 0" in r.stderr and json.loads(r.stdout)["examples_seen"] == 450


def test_kafka_stop_at_end_does_not_end_below_the_checkpoint(broker, tmp_path):
    from streamssvm.connectors.kafka import KafkaSource, create_topic, produce_lines
    from streamssvm.errors import SourceFault
    create_topic(broker, "e", partitions=1)
    produce_lines(broker, "e", _kafka_messages(200))
    ck = tmp_path / "ck"

    def eng():
        src = KafkaSource(broker, "e", partitions=[0], stop_at_end=True, reset_grace_s=1.0)
        return Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0)), src, task="multiclass",
                      checkpoint_dir=ck, progress=False)
    assert eng().run()["examples_seen"] == 200
    _recreate(broker, "e", _kafka_messages(80, seed=5))
    with pytest.raises(SourceFault, match="below the checkpointed offset 200"):
        eng().run()


def test_kafka_kill_loop_with_bad_messages_counts_exactly(broker, tmp_path):
    """SIGKILL a run over a topic with bad messages mixed in, a few times, then let it finish:
    every bad message is counted once (before the fix, each poll's bad messages were counted
    ahead of the checkpoint's position, and again after the resume)."""
    import signal as sg
    import time
    from streamssvm.connectors.kafka import create_topic, produce_lines
    bad = set(range(7, 600, 23))
    create_topic(broker, "k", partitions=1)
    produce_lines(broker, "k", _kafka_messages(600, bad=bad))
    ck = tmp_path / "ck"
    dl = tmp_path / "dead.jsonl"
    cmd = _kafka_run(broker, "k", ck, "--dead-letter", dl, query="?partitions=0")
    kills = 0
    for k in range(4):
        w = subprocess.Popen(cmd + ["--rate", "400", "--idle-timeout", "5"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=_env())
        n0 = len(list(ck.glob("ckpt-*")))
        t0 = time.time()
        while time.time() - t0 < 300 and len(list(ck.glob("ckpt-*"))) < min(n0 + 2, 3):
            time.sleep(0.02)
        time.sleep(0.05 * k)
        w.send_signal(sg.SIGKILL)
        w.wait()
        kills += w.returncode == -sg.SIGKILL
    assert kills >= 3
    r = subprocess.run(cmd + ["--idle-timeout", "3"], capture_output=True, text=True, timeout=120, env=_env())
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["examples_seen"] == 600 - len(bad)
    assert out["n_bad"] == len(bad) and out["bad_records_at_source"] >= 0
    # every bad message reached the dead letters (at least once: a killed run may send one again)
    origins = {json.loads(x)["origin"] for x in dl.read_text().splitlines()}
    assert origins == {f"k/0@{i}" for i in bad}


def test_kafka_sink_key_with_a_lone_surrogate_does_not_stop_the_run(broker):
    from streamssvm.connectors.kafka import KafkaSink
    sink = KafkaSink(broker, "p")
    sink.write({"key": "a\udc80b", "prediction": 1})
    sink.close()


# ----------------------------------------------------------------------------- (8) distributed dead letters
def test_distributed_workers_dead_letter_and_max_bad_fraction(tmp_path, capsys):
    """Distributed workers take the one per-record step: bad lines (the source's) and bad
    records (the model's) go to --dead-letter once each, are counted, and --max-bad-fraction
    stops the job (before: 20 of 2,020 lines vanished with no count)."""
    ray = pytest.importorskip("ray", reason="needs the [distributed] extra (Ray)")
    import streamssvm.distributed as sd
    from streamssvm.cli import main
    rng = np.random.default_rng(0)
    lines = []
    for i in range(420):
        x = rng.normal(size=4)
        lines.append(json.dumps({"x": [float(v) for v in x], "y": int(np.argmax(x))}))
    for i in range(0, 420, 21):   # 20 bad: 10 unparsable lines, 10 records the model refuses
        lines[i] = "{broken" if i % 42 == 0 else json.dumps({"x": [1.0, 2.0], "y": 0})
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    sd.init_cluster("local", num_cpus=2)   # a private cluster, also when another runs on the machine
    try:
        model = ss.MulticlassSSVM(labels=[0, 1, 2, 3], learner=ss.learners.BCFW(lam=0.01, averaging=False,
                                                                                gap_every=None, seed=0))
        dl = tmp_path / "dead.jsonl"
        res = sd.run(model, str(path), task="multiclass", workers=2, round_examples=100,
                     checkpoint_dir=tmp_path / "ck", dead_letter=str(dl))
        assert res.examples_seen == 400 and res.bad_records == 20 and res.stopped == "done"
        dead = [json.loads(v) for v in dl.read_text().splitlines()]
        assert len(dead) == 20 and len({d["origin"] for d in dead}) == 20
        # mostly bad: the CLI stops with exit 1 and says so
        bad = tmp_path / "bad.jsonl"
        bad.write_text("\n".join(lines[:150] + ["{broken"] * 150) + "\n")
        capsys.readouterr()
        code = main(["run", "--workers", "2", "--source", str(bad), "--task", "multiclass", "--labels", "0,1,2,3",
                     "--lam", "0.01", "--round-examples", "40", "--checkpoint-dir", str(tmp_path / "ck2"),
                     "--max-bad-fraction", "0.3", "--dead-letter", str(tmp_path / "dead2.jsonl"), "--json",
                     "--no-progress"])
        err = capsys.readouterr().err
        assert code == 1 and "records were bad" in err, err
    finally:
        ray.shutdown()


@pytest.mark.parametrize("fmt", ["libsvm", "jsonl", "csv"])
def test_a_file_appended_in_random_chunks_is_learned_exactly_once(tmp_path, fmt):
    """A writer appends at arbitrary byte boundaries (mid-line, mid-number) and a run resumes
    after each chunk: every line is learned exactly once, whole (before the fix a half-written
    last line was learned, then its remainder as a second record)."""
    from streamssvm.connectors.base import MemorySink
    rng = np.random.default_rng(1)
    if fmt == "libsvm":
        lines = [f"{i % 3} 1:{rng.normal():.5f} 2:{rng.normal():.5f}\n" for i in range(200)]
        head = ""
    elif fmt == "jsonl":
        lines = [json.dumps({"x": {"a": float(rng.normal()), "b": float(rng.normal())}, "y": i % 3}) + "\n"
                 for i in range(200)]
        head = ""
    else:
        lines = [f"{rng.normal():.5f},{rng.normal():.5f},{i % 3}\n" for i in range(200)]
        head = "a,b,label\n"
    data = (head + "".join(lines)).encode()
    cuts = sorted(set(rng.integers(len(head) + 1, len(data), 12).tolist())) + [len(data)]
    p = tmp_path / f"s.{fmt}"
    p.write_bytes(data[:cuts[0]])
    ck = tmp_path / "ck"
    keys, partial = [], 0
    for a, b in zip(cuts, cuts[1:] + [None]):
        sink, dl = MemorySink(), _quiet()
        eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0)), open_source(p, dead_letter=dl),
                     task="multiclass", checkpoint_dir=ck, progress=False, sink=sink, checkpoint_every=7)
        eng.run()
        keys += [r["key"] for r in sink.items]
        partial += dl.count
        assert all(d["reason"].startswith("incomplete last line") for d in dl.sink.items)
        if b is not None:
            with open(p, "ab") as f:
                f.write(data[a:b])
    first = 2 if fmt == "csv" else 1
    assert sorted(keys) == list(range(first, first + 200))   # every line once (keys: line numbers)
    assert eng.examples_seen == 200 and sorted(map(str, eng.model._labels.labels)) == ["0", "1", "2"]


def test_metrics_file_whole_lines_and_torn_tail_cut(tmp_path):
    """Issue 26.10: ``--metrics`` lines were appended with a plain ``open(..., "a")``: a run
    killed (or out of space) mid-line left half a line that the resumed run appended to, and a
    full disk left a torn line. Now: whole lines, a torn tail cut (with a warning) first."""
    p = tmp_path / "s.jsonl"
    write_jsonl(p, _records(300))
    m = tmp_path / "m.jsonl"
    m.write_bytes(b'{"examples_seen": 100, "gap": 0.5}\n{"examples_seen": 2')
    r = _cli(*_run_args(p, tmp_path / "ck", "--metrics", m))
    assert r.returncode == 0 and "removed a torn last line of 19 bytes" in r.stderr, r.stderr
    lines = m.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) >= 3 and all(json.loads(x) for x in lines[:-1])
    r = _cli(*_run_args(p, tmp_path / "ck2", "--metrics", "/dev/full"))
    assert r.returncode == 3 and "No space left on device (/dev/full)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
