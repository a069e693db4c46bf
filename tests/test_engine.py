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
