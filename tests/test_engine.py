"""Engine and CLI: progressive validation, snapshots, dead letters, checkpoints, crash recovery."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.connectors.base import DeadLetterSink, MemorySink
from streamssvm.connectors.files import open_source, write_jsonl
from streamssvm.cli import main
from streamssvm.engine import Engine


def _stream(path, n=600, seed=0, bad_every=0):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(4, 6))
    lines = []
    for i in range(n):
        x = rng.normal(size=6)
        y = int(np.argmax(W @ x))
        lines.append(json.dumps({"x": {f"f{j}": float(v) for j, v in enumerate(x)}, "y": y}))
        if bad_every and i % bad_every == bad_every - 1:
            lines.append('{"x": {"f0": NaN}, "y": 1}')
            lines.append("{not json")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_engine_end_to_end(tmp_path):
    src_path = _stream(tmp_path / "s.jsonl", n=500, bad_every=100)
    dl = DeadLetterSink(MemorySink())
    sink = MemorySink()
    model = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0))
    eng = Engine(model, open_source(src_path, dead_letter=dl), task="multiclass", snapshot_every=100,
                 checkpoint_dir=tmp_path / "ck", metrics_path=tmp_path / "m.jsonl", sink=sink,
                 dead_letter=dl, progress=False)
    s = eng.run()
    assert s["examples_seen"] == 500
    assert dl.count == 10 and len(sink.items) == 500
    assert sink.items[-1]["examples_seen"] == 500
    lines = [json.loads(v) for v in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [v["examples_seen"] for v in lines] == [100, 200, 300, 400, 500]
    assert all(v["gap"] >= 0 for v in lines) and lines[-1]["accuracy"] > 0.6
    assert s["metrics"]["accuracy"] == pytest.approx(
        np.mean([p["prediction"] == json.loads(r)["y"] for p, r in zip(
            sink.items, [r for r in src_path.read_text().splitlines() if "NaN" not in r and "not json" not in r])]))
    # a new engine on the same checkpoint dir resumes at the end: nothing is learned twice
    eng2 = Engine(ss.MulticlassSSVM(), open_source(src_path, dead_letter=DeadLetterSink(MemorySink())),
                  task="multiclass", checkpoint_dir=tmp_path / "ck", progress=False)
    s2 = eng2.run()
    assert s2["examples_seen"] == 500 and s2["new_examples"] == 0


def test_engine_sends_model_rejections_to_dead_letter(tmp_path):
    p = tmp_path / "seq.jsonl"
    write_jsonl(p, [{"x": [[1.0, 0.0], [0.0, 1.0]], "y": ["a", "b"]},
                    {"x": [[1.0, 0.0, 5.0]], "y": ["a"]},          # wrong width for the model
                    {"x": [[0.0, 1.0]], "y": ["b"]}])
    dl = DeadLetterSink(MemorySink())
    eng = Engine(ss.SequenceTagger(), open_source(p, dead_letter=dl), task="sequence", progress=False)
    s = eng.run()
    assert s["examples_seen"] == 2 and s["bad_records"] == 1
    assert "expected 2 features" in dl.sink.items[0]["reason"]


def _cli_run(tmp_path, src, ckpt, extra=()):
    return [sys.executable, "-m", "streamssvm", "run", "--source", f"file://{src}", "--task", "multiclass",
            "--lam", "0.01", "--replay", "2", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "50",
            "--snapshot-every", "100", "--save", str(tmp_path / f"{ckpt.name}.ssvm"), "--json",
            "--no-progress", *extra]


def _weights(path):
    m = ss.MulticlassSSVM.load(path)
    return m._learner.W.E[: m._features.dim, : len(m._labels)], m._learner.n_learned


def test_sigkill_mid_stream_then_resume_equals_uninterrupted(tmp_path):
    src = _stream(tmp_path / "s.jsonl", n=600, bad_every=150)
    env = dict(os.environ, PYTHONHASHSEED="0")
    ref = subprocess.run(_cli_run(tmp_path, src, tmp_path / "ref"), capture_output=True, text=True, env=env,
                         timeout=300)
    assert ref.returncode == 0, ref.stderr
    # paced run, killed with SIGKILL once a few checkpoints exist
    ck = tmp_path / "crash"
    p = subprocess.Popen(_cli_run(tmp_path, src, ck, ["--rate", "400"]), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    t0 = time.time()
    while time.time() - t0 < 120:
        if ck.is_dir() and len([d for d in ck.iterdir() if d.name.startswith("ckpt-")]) >= 2:
            break
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL
    killed_at = json.loads(next(iter(sorted(ck.glob("ckpt-*"))))
                           .joinpath("manifest.json").read_text())["meta"]["examples_seen"]
    assert 0 < killed_at < 600
    res = subprocess.run(_cli_run(tmp_path, src, ck), capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["resumed_from"] is not None and out["examples_seen"] == 600
    w_ref, n_ref = _weights(tmp_path / "ref.ssvm")
    w_res, n_res = _weights(tmp_path / "crash.ssvm")
    assert n_ref == n_res == 600
    np.testing.assert_array_equal(w_ref, w_res)


def test_corrupt_newest_checkpoint_falls_back(tmp_path):
    src = _stream(tmp_path / "s.jsonl", n=300)
    args = ["run", "--source", str(src), "--task", "multiclass", "--checkpoint-dir", str(tmp_path / "ck"),
            "--checkpoint-every", "100", "--max-examples", "250", "--no-progress", "--json",
            "--save", str(tmp_path / "a.ssvm")]
    assert main(args) == 0
    cks = sorted((tmp_path / "ck").glob("ckpt-*"))
    newest = cks[-1]
    arr = sorted((newest / "arrays").iterdir())[0]
    arr.write_bytes(arr.read_bytes()[:20])  # truncated by a crash
    args2 = [a if a != str(tmp_path / "a.ssvm") else str(tmp_path / "b.ssvm") for a in args]
    args2[args2.index("250")] = "300"
    with pytest.warns(RuntimeWarning, match="skipping invalid checkpoint"):
        assert main(args2) == 0
    m = ss.MulticlassSSVM.load(tmp_path / "b.ssvm")
    assert m._learner.n_learned == 300
    # the reference: straight through 300
    ref = ["run", "--source", str(src), "--task", "multiclass", "--no-progress", "--json",
           "--checkpoint-dir", str(tmp_path / "ck2"), "--checkpoint-every", "100", "--save", str(tmp_path / "c.ssvm")]
    assert main(ref) == 0
    np.testing.assert_array_equal(ss.MulticlassSSVM.load(tmp_path / "c.ssvm")._learner.W.E, m._learner.W.E)


def test_cli_report_and_conll(tmp_path, capsys):
    conll = tmp_path / "w.conll"
    sents = [("the DT", "dog NN", "runs VBZ"), ("a DT", "cat NN", "sleeps VBZ")] * 30
    conll.write_text("".join("\n".join(s) + "\n\n" for s in sents))
    assert main(["run", "--source", f"file://{conll}", "--task", "sequence", "--learner", "bcfw",
                 "--lam", "1e-2", "--checkpoint-dir", str(tmp_path / "ck"), "--snapshot-every", "20",
                 "--metrics", str(tmp_path / "m.jsonl"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "ck"), "--json", "--plot", str(tmp_path / "g.png")]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["examples_seen"] == 60 and rep["source_position"]["record"] == 60
    assert rep["last_certificate"]["gap"] >= 0 and rep["snapshots"] == 3
    assert (tmp_path / "g.png").stat().st_size > 1000
    assert rep["metrics"]["token_accuracy"] > 0.6


def test_cli_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["run", "--task", "multiclass"])  # --source required
    assert main(["run", "--source", str(tmp_path / "nope.jsonl"), "--task", "multiclass", "--no-progress"]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["report", str(tmp_path / "empty")])


def test_cli_export_then_run(tmp_path, capsys):
    f = tmp_path / "w.jsonl"
    assert main(["export", "ocr-words", str(f), "--limit", "40"]) == 0
    assert main(["run", "--source", str(f), "--task", "sequence", "--lam", "0.01", "--no-progress", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{"):])["examples_seen"] == 40


def test_batched_engine_matches_learn_many(tmp_path):
    src_path = _stream(tmp_path / "s.jsonl", n=450, bad_every=100)
    dl = DeadLetterSink(MemorySink())
    sink = MemorySink()
    eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=0, seed=0)),
                 open_source(src_path, dead_letter=dl), task="multiclass", batch_size=64,
                 snapshot_every=100, checkpoint_dir=tmp_path / "ck", checkpoint_every=100, sink=sink,
                 dead_letter=dl, progress=False)
    s = eng.run()
    assert s["examples_seen"] == 450 and dl.count == 8 and len(sink.items) == 450
    assert [h["examples_seen"] for h in eng.history] == [128, 256, 320, 448, 450]
    # the same examples learned with learn_many directly
    recs = [json.loads(r) for r in src_path.read_text().splitlines() if "NaN" not in r and "not json" not in r]
    ref = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=0, seed=0))
    for a in range(0, 450, 64):
        ref.learn_many([r["x"] for r in recs[a:a + 64]], [r["y"] for r in recs[a:a + 64]])
    ref.certificate()
    m = eng.model
    d = m._features.dim
    np.testing.assert_allclose(m._learner.W.E[:d, :4], ref._learner.W.E[:d, :4], atol=1e-9)
    with pytest.raises(ValueError, match="multiclass"):
        Engine(ss.SequenceTagger(), open_source(src_path), task="sequence", batch_size=8)


def test_cli_multilabel_libsvm(tmp_path, capsys):
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(200):
        x = rng.normal(size=5)
        labs = [k for k in range(3) if x[k] > 0.2]
        lines.append(",".join(map(str, labs)) + " " + " ".join(f"{j}:{v:.4f}" for j, v in enumerate(x)))
    lines.insert(50, "1 3:abc")
    f = tmp_path / "ml.svm"
    f.write_text("\n".join(lines) + "\n")
    assert main(["run", "--source", f"file://{f}?multilabel=true", "--task", "multilabel", "--lam", "0.01",
                 "--replay", "2", "--no-progress", "--json", "--dead-letter", str(tmp_path / "dl.jsonl")]) == 0
    out = capsys.readouterr().out
    s = json.loads(out[out.index("{"):])
    assert s["examples_seen"] == 200 and s["bad_records_at_source"] == 1
    assert s["metrics"]["micro_f1"] > 0.6 and 0 <= s["metrics"]["hamming_loss"] < 0.3
    assert json.loads((tmp_path / "dl.jsonl").read_text())["reason"].startswith("bad feature token")


def test_one_loop_batched_by_one_equals_unbatched(tmp_path):
    """The engine has one loop: batches of one record (predict_learn_many) and the unbatched
    path (predict_one, learn_one) take the same examples, dead letters, snapshots, sink records,
    positions, predictions and model (bit for bit)."""
    src_path = _stream(tmp_path / "s.jsonl", n=300, bad_every=70)
    out = []
    for bs in (None, 1):
        dl, sink = DeadLetterSink(MemorySink()), MemorySink()
        eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0)),
                     open_source(src_path, dead_letter=dl), task="multiclass", batch_size=bs,
                     snapshot_every=50, sink=sink, dead_letter=dl, progress=False, max_examples=280)
        s = eng.run()
        out.append((s, dl.count, [h["examples_seen"] for h in eng.history], sink.items, eng.model))
    (s0, d0, h0, p0, m0), (s1, d1, h1, p1, m1) = out
    assert s0["examples_seen"] == s1["examples_seen"] == 280 and s0["stopped"] == s1["stopped"] == "max examples"
    assert d0 == d1 > 0 and h0 == h1 == [50, 100, 150, 200, 250, 280]
    assert [r["examples_seen"] for r in p0] == [r["examples_seen"] for r in p1] == list(range(1, 281))
    assert [r["key"] for r in p0] == [r["key"] for r in p1]
    assert s0["position"] == s1["position"] and m0.n_blocks == m1.n_blocks == 280
    assert [r["prediction"] for r in p0] == [r["prediction"] for r in p1]
    d = m0._features.dim
    np.testing.assert_array_equal(m0._learner.W.E[:d, :4], m1._learner.W.E[:d, :4])


def test_engine_rate_uses_the_one_pacer(tmp_path, monkeypatch):
    """``Engine(rate=...)`` paces with ``connectors.files.Pacer`` (the project's one pacer)."""
    import inspect

    import streamssvm.connectors.files as files
    from streamssvm import engine as engine_mod
    assert "sleep" not in inspect.getsource(engine_mod)
    waits = []
    real = files.Pacer.wait
    monkeypatch.setattr(files.Pacer, "wait", lambda self: (waits.append(self.rate), real(self))[1])
    src_path = _stream(tmp_path / "s.jsonl", n=40)
    eng = Engine(ss.MulticlassSSVM(), open_source(src_path), task="multiclass", rate=5000.0, progress=False)
    assert eng.run()["examples_seen"] == 40
    assert [w for w in waits if w is not None] == [5000.0] * 40
    with pytest.raises(ValueError, match="rate"):
        Engine(ss.MulticlassSSVM(), open_source(src_path), task="multiclass", rate=0)


# ------------------------------------------------------------------ reliability (issue: no record kills a stream)
def test_n_bad_counts_source_rejections_across_a_resume(tmp_path, capsys):
    """Case 7: ``report --json`` counted only the engine's rejections (17 of 45); the
    source-level rejections are now stored in the checkpoint (``n_bad``) and survive a resume."""
    src = _stream(tmp_path / "s.jsonl", n=400, bad_every=50)   # 8 NaN (engine) + 8 not-JSON (source)
    ck = tmp_path / "ck"
    for stop in (150, None):
        dl = DeadLetterSink(MemorySink())
        eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0)), open_source(src, dead_letter=dl),
                     task="multiclass", checkpoint_dir=ck, checkpoint_every=50, max_examples=stop, progress=False)
        s = eng.run()
    assert s["examples_seen"] == 400 and s["n_bad"] == 16
    assert s["bad_records"] + s["bad_records_at_source"] == 16
    assert main(["report", str(ck), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["n_bad"] == 16


class _Exploding(ss.MulticlassSSVM):
    """A model whose learn_one raises ``exc`` on records with feature ``boom``."""
    exc = MemoryError

    def learn_one(self, x, y):
        if isinstance(x, dict) and "boom" in x:
            raise self.exc("from this record")
        return super().learn_one(x, y)


@pytest.mark.parametrize("exc", [MemoryError, RecursionError, OverflowError, ZeroDivisionError])
def test_any_exception_from_one_record_is_a_dead_letter(tmp_path, exc):
    """Only ValueError / TypeError / KeyError were caught: a MemoryError, RecursionError or
    OverflowError from one record stopped the stream (and every restart)."""
    recs = [{"x": {"f": float(i % 2), "boom": 1.0} if i == 7 else {"f": float(i % 2)}, "y": i % 2}
            for i in range(30)]
    write_jsonl(tmp_path / "s.jsonl", recs)
    dl = DeadLetterSink(MemorySink())
    m = _Exploding(learner=ss.learners.BCFW(lam=0.1, seed=0))
    m.exc = exc
    s = Engine(m, open_source(tmp_path / "s.jsonl", dead_letter=dl), task="multiclass", progress=False).run()
    assert s["examples_seen"] == 29 and s["bad_records"] == 1
    assert dl.sink.items[0]["reason"].startswith(exc.__name__)


class _Poisoning(ss.MulticlassSSVM):
    """Simulates a step that makes the weights non-finite on the record with feature
    ``poison`` (validated input cannot do it: |v| <= 1e12)."""

    def learn_one(self, x, y):
        super().learn_one(x, y)
        if "poison" in x:
            self._learner.W.E[self._last_fidx[-1], 0] = np.inf


@pytest.mark.parametrize("ckpt", [True, False])
@pytest.mark.parametrize("learner", ["BCFW", "SGD", "CuttingPlane"])
def test_a_step_that_makes_weights_non_finite_is_undone(tmp_path, monkeypatch, ckpt, learner):
    """The step is undone (restore point + replay without the record): the model equals a
    run that never saw the record, bit for bit, and the record is a dead letter."""
    from streamssvm.estimators import base
    monkeypatch.setitem(base._REGISTRY, "_Poisoning", _Poisoning)   # checkpoints restore the test class
    rng = np.random.default_rng(1)
    recs = [{"x": {"f": float(rng.normal()), "g": float(i % 3)}, "y": i % 3} for i in range(90)]
    bad = dict(recs[67], x={**recs[67]["x"], "poison": 1.0})
    write_jsonl(tmp_path / "with.jsonl", recs[:67] + [bad] + recs[67:])
    write_jsonl(tmp_path / "without.jsonl", recs)

    def run(path, model, d):
        dl = DeadLetterSink(MemorySink())
        eng = Engine(model, open_source(path, dead_letter=dl), task="multiclass", progress=False,
                     checkpoint_dir=(tmp_path / d) if ckpt else None, checkpoint_every=25, snapshot_every=30)
        return eng, eng.run(), dl

    mk = lambda cls: cls(learner=getattr(ss.learners, learner)(lam=0.1, seed=0))   # noqa: E731
    e1, s1, dl1 = run(tmp_path / "with.jsonl", mk(_Poisoning), "a")
    e2, s2, _ = run(tmp_path / "without.jsonl", mk(ss.MulticlassSSVM), "b")
    assert s1["undone"] == 2 and s1["examples_seen"] == s2["examples_seen"] == 90
    assert s1["bad_records"] == 1 and dl1.count == 1 and "non-finite" in dl1.sink.items[0]["reason"]
    assert e1.model.weights_finite()
    for k in ("E", "T", "B"):
        np.testing.assert_array_equal(getattr(e1.model._learner.W, k), getattr(e2.model._learner.W, k))
    assert s1["metrics"] == s2["metrics"]


def test_a_non_finite_model_is_never_checkpointed(tmp_path, monkeypatch):
    """Weights made non-finite outside a record's step (found by the full check before the
    checkpoint) are located by the careful replay and undone the same way."""
    class _Late(ss.MulticlassSSVM):
        def learn_one(self, x, y):
            super().learn_one(x, y)
            if "poison" in x:   # a row the per-record check does not look at
                self._learner.W.E[self._features.vocab["g"], 0] = np.nan   # not a row of this record

    from streamssvm.estimators import base
    monkeypatch.setitem(base._REGISTRY, "_Late", _Late)
    recs = [{"x": {"f": float(i % 2), "g": 1.0}, "y": i % 2} for i in range(40)]
    recs[23] = {"x": {"f": 1.0, "poison": 1.0}, "y": 1}
    write_jsonl(tmp_path / "s.jsonl", recs)
    dl = DeadLetterSink(MemorySink())
    eng = Engine(_Late(learner=ss.learners.SGD(lam=0.1)), open_source(tmp_path / "s.jsonl", dead_letter=dl),
                 task="multiclass", checkpoint_dir=tmp_path / "ck", checkpoint_every=10, progress=False)
    s = eng.run()
    assert s["examples_seen"] == 39 and s["undone"] >= 1 and eng.model.weights_finite(), (s, dl.sink.items)
    assert dl.count == 1
    for p in eng.ckpt.list():
        st, _ = eng.ckpt.load(p)
        assert np.isfinite(st["model"]["learner"]["E"]).all()


def test_dead_letters_are_synced_before_each_checkpoint(tmp_path):
    """Case 7: dead letters were lost on a crash; the engine syncs (flush + fsync) the dead
    letters before each checkpoint that counts them."""
    events = []

    class _Sink(DeadLetterSink):
        def sync(self):
            events.append(("sync", self.count))
            return super().sync()

    src = _stream(tmp_path / "s.jsonl", n=100, bad_every=20)
    dl = _Sink(MemorySink())
    eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0)), open_source(src, dead_letter=dl),
                 task="multiclass", checkpoint_dir=tmp_path / "ck", checkpoint_every=25, progress=False)
    save = eng.ckpt.save
    eng.ckpt.save = lambda *a, **k: (events.append(("save", dl.count)), save(*a, **k))[1]
    eng.run()
    assert [e[0] for e in events] == ["sync", "save"] * 5
    assert all(events[i][1] == events[i + 1][1] for i in range(0, len(events), 2))


def test_the_rate_of_a_run_ended_by_idle_timeout_leaves_out_the_idle_wait():
    """A live source that goes quiet ends the run at ``idle_timeout``; that wait is not the stream's
    time, so the summary's rate (``throughput``, the CLI's ex/s) is over the time until the last
    record (the Kafka quickstart printed 168 ex/s for 3,000 records learned at thousands per second:
    10 s of the idle wait were in it)."""
    from streamssvm.connectors.base import IterableSource

    class Quiet(IterableSource):   # a live source: its records, then idle heartbeats
        def __iter__(self):
            yield from super().__iter__()
            while True:
                time.sleep(0.02)
                yield None

    rng = np.random.default_rng(0)
    data = [(rng.normal(size=4), int(i % 3)) for i in range(60)]
    eng = Engine(ss.MulticlassSSVM(), Quiet(data), task="multiclass", idle_timeout=0.6, progress=False)
    s = eng.run()
    assert s["stopped"] == "idle timeout" and s["new_examples"] == 60
    # the idle wait (>= 0.6 s) is in the run's time, not in the stream's
    assert s["seconds"] - s["seconds_stream"] >= 0.55
    assert s["throughput"] == pytest.approx(60 / s["seconds_stream"])


def test_the_rate_of_a_run_leaves_out_the_wait_for_its_first_record():
    """A live source may be silent before its first record (a Kafka consumer group's join and first
    fetch: ~7 s on the local broker); that wait is not the stream's time either, so the summary's
    rate is from the first record (the Kafka quickstart printed 381 ex/s for 3,000 records learned
    at thousands per second). ``seconds`` keeps the whole run."""
    from streamssvm.connectors.base import IterableSource

    class SlowStart(IterableSource):   # a live source: idle heartbeats, then its records
        def __iter__(self):
            t_end = time.monotonic() + 0.6
            while time.monotonic() < t_end:
                time.sleep(0.02)
                yield None
            yield from super().__iter__()

    rng = np.random.default_rng(0)
    data = [(rng.normal(size=4), int(i % 3)) for i in range(60)]
    eng = Engine(ss.MulticlassSSVM(), SlowStart(data), task="multiclass", progress=False)
    s = eng.run()
    assert s["stopped"] == "end of source" and s["new_examples"] == 60
    assert s["seconds"] - s["seconds_stream"] >= 0.55
    assert s["throughput"] == pytest.approx(60 / s["seconds_stream"])
