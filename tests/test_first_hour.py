"""A new user's first hour (issue 23), each item through the real CLI in a subprocess: one set of
defaults (every learner seeds), predicting records without labels, multi-label CSV label sets,
sinks (``-``, character devices, a closed pipe), ``--save`` and option typos."""
import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT, PYTHONHASHSEED="0")


def cli(*argv, cwd=None, stdin=None, check=None):
    """``python -m streamssvm ARGV`` in a subprocess: the CompletedProcess (text)."""
    r = subprocess.run([sys.executable, "-m", "streamssvm", *map(str, argv)], capture_output=True, text=True,
                       cwd=cwd or ROOT, env=ENV, timeout=600, input=stdin)
    if check is not None:
        assert r.returncode == check, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def two_blobs(n=120, seed=0, d=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n)
    X = rng.normal(size=(n, d)) + 2.0 * (2 * y[:, None] - 1)
    return X, ["pos" if v else "neg" for v in y]


def write_jsonl(path, X, y=None):
    with open(path, "w") as f:
        for i, x in enumerate(X):
            rec = {"x": {f"f{j}": float(v) for j, v in enumerate(x)}}
            if y is not None:
                rec["y"] = y[i]
            f.write(json.dumps(rec) + "\n")
    return path


def write_csv(path, X, y=None):
    with open(path, "w") as f:
        f.write(",".join([f"f{j}" for j in range(X.shape[1])] + (["label"] if y is not None else [])) + "\n")
        for i, x in enumerate(X):
            f.write(",".join([repr(float(v)) for v in x] + ([y[i]] if y is not None else [])) + "\n")
    return path


# ----------------------------------------------------------------------------- one set of defaults
def test_every_learner_seeds_by_default_and_two_runs_repeat():
    """Regression: MulticlassSSVM() / MultiLabelSSVM() used BCFW(seed=None) (two runs of one stream
    differed) while SequenceTagger() seeded, and the CLI's --seed 0 was a second default."""
    code = ("import numpy as np, streamssvm as ss\n"
            "from streamssvm.cli.options import LEARNERS, learner_class\n"
            "print(sorted(k for k in LEARNERS if getattr(learner_class(k)(), 'seed', 0) != 0))\n"
            "rng = np.random.default_rng(0); X = rng.normal(size=(300, 5)); y = (X @ rng.normal(size=(5, 4))).argmax(1)\n"
            "def preds():\n"
            "    m = ss.MulticlassSSVM(); out = []\n"
            "    for x, t in zip(X, y):\n"
            "        out.append(m.predict_one(x)); m.learn_one(x, int(t))\n"
            "    return out\n"
            "print(preds() == preds())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[]", "True"]
    h = cli("run", "--help", check=0).stdout
    assert "so that a run repeats" not in h   # no second table of defaults


# ----------------------------------------------------------------------------- predicting unlabeled data
@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    X, y = two_blobs(200, seed=1)
    write_jsonl(d / "train.jsonl", X, y)
    cli("run", "--source", d / "train.jsonl", "--task", "multiclass", "--no-progress", "--save", d / "m.ssvm",
        check=0)
    return d / "m.ssvm"


def _predictions(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_predict_records_without_labels(tmp_path, saved_model, fmt):
    """Regression: a CSV without the label column stopped with "label column 'label' not in the
    header" (exit 2); JSONL without "y" made every record bad (exit 1)."""
    X, y = two_blobs(50, seed=2)
    src = (write_jsonl if fmt == "jsonl" else write_csv)(tmp_path / f"test.{fmt}", X)
    r = cli("predict", "--model", saved_model, "--source", src, check=0)
    got = [p["prediction"] for p in _predictions(r.stdout)]
    assert len(got) == 50 and set(got) <= {"pos", "neg"}
    assert np.mean([a == b for a, b in zip(got, y)]) > 0.9
    assert "predicted 50 records" in r.stderr and "bad records" not in r.stderr and "accuracy" not in r.stderr
    # with the labels present, predict also scores them
    src = (write_jsonl if fmt == "jsonl" else write_csv)(tmp_path / f"test_labeled.{fmt}", X, y)
    r = cli("predict", "--model", saved_model, "--source", src, check=0)
    assert "predicted 50 records" in r.stderr and "accuracy" in r.stderr


def test_predict_one_column_conll(tmp_path):
    words = [("The", "DT"), ("dog", "NN"), ("runs", "VBZ"), ("A", "DT"), ("cat", "NN"), ("sleeps", "VBZ")]
    with open(tmp_path / "train.conll", "w") as f:
        for _ in range(30):
            f.write("\n".join(f"{w} {t}" for w, t in words[:3]) + "\n\n")
            f.write("\n".join(f"{w} {t}" for w, t in words[3:]) + "\n\n")
    cli("run", "--source", tmp_path / "train.conll", "--task", "sequence", "--no-progress", "--save",
        tmp_path / "t.ssvm", check=0)
    (tmp_path / "words.conll").write_text("The\ncat\nruns\n\nA\ndog\nsleeps\n")
    r = cli("predict", "--model", tmp_path / "t.ssvm", "--source", tmp_path / "words.conll", check=0)
    got = [p["prediction"] for p in _predictions(r.stdout)]
    assert got == [["DT", "NN", "VBZ"], ["DT", "NN", "VBZ"]], r.stderr


def test_predict_conll_of_several_columns_without_its_tags(tmp_path):
    """Regression (a new user's session, r12): a CoNLL file of several columns (word, POS) with
    its tag column removed was read with its last feature column as the tag: the predictions
    used the wrong features and the score ("token accuracy 0.0000") was meaningless, without a
    word of warning. Now the score comes with a warning naming ``?label_column=none``, which
    reads the file as unlabeled and predicts exactly as on the tagged file."""
    words = [("The", "DT", "B"), ("dog", "NN", "I"), ("runs", "VBZ", "O"), ("A", "DT", "B"), ("cat", "NN", "I"),
             ("sleeps", "VBZ", "O")]
    with open(tmp_path / "train.conll", "w") as f:
        for _ in range(30):
            f.write("\n".join(" ".join(w) for w in words[:3]) + "\n\n")
            f.write("\n".join(" ".join(w) for w in words[3:]) + "\n\n")
    cli("run", "--source", tmp_path / "train.conll", "--task", "sequence", "--no-progress", "--save",
        tmp_path / "t.ssvm", check=0)
    tagged = "The DT B\ncat NN I\nruns VBZ O\n\nA DT B\ndog NN I\nsleeps VBZ O\n"
    (tmp_path / "tagged.conll").write_text(tagged)
    (tmp_path / "untagged.conll").write_text("\n".join(" ".join(line.split()[:2]) for line in tagged.split("\n")))
    want = [p["prediction"] for p in _predictions(
        cli("predict", "--model", tmp_path / "t.ssvm", "--source", tmp_path / "tagged.conll", check=0).stdout)]
    assert want == [["B", "I", "O"], ["B", "I", "O"]]
    r = cli("predict", "--model", tmp_path / "t.ssvm", "--source", tmp_path / "untagged.conll", check=0)
    assert "warning: none of the 6 labels read" in r.stderr and "?label_column=none" in r.stderr, r.stderr
    r = cli("predict", "--model", tmp_path / "t.ssvm", "--source", f"file://{tmp_path / 'untagged.conll'}?label_column=none",
            check=0)
    assert [p["prediction"] for p in _predictions(r.stdout)] == want, r.stderr
    assert "warning" not in r.stderr and "accuracy" not in r.stderr, r.stderr
    r = cli("run", "--source", f"file://{tmp_path / 'train.conll'}?label_column=none", "--task", "sequence",
            "--no-progress", check=2)
    assert "label_column=none" in r.stderr and "only predict" in r.stderr, r.stderr


# ----------------------------------------------------------------------------- multi-label CSV
def test_multilabel_csv_splits_label_sets_on_the_documented_default(tmp_path):
    """Regression: without ?multilabel_sep=; a cell "a;b" was one label of a made-up set, and a
    row with no labels was a bad record (the run still exited 0)."""
    rng = np.random.default_rng(0)
    rows = ["f0,f1,label"]
    for _ in range(200):
        a, b = rng.integers(0, 2, size=2)
        x = rng.normal(size=2) * 0.3 + np.array([2.0 * a - 1, 2.0 * b - 1])
        labs = ";".join(t for t, on in (("u", a), ("v", b)) if on)
        rows.append(f"{x[0]:.4f},{x[1]:.4f},{labs}")
    (tmp_path / "ml.csv").write_text("\n".join(rows) + "\n")
    r = cli("run", "--source", tmp_path / "ml.csv", "--task", "multilabel", "--no-progress", "--json",
            "--save", tmp_path / "ml.ssvm", check=0)
    out = json.loads(r.stdout)
    assert out["bad_records"] == 0 and out["bad_records_at_source"] == 0
    r = cli("predict", "--model", tmp_path / "ml.ssvm", "--source", tmp_path / "ml.csv", check=0)
    preds = [sorted(k for k, on in p["prediction"].items() if on) for p in _predictions(r.stdout)]
    assert {tuple(p) for p in preds} <= {(), ("u",), ("v",), ("u", "v")}
    assert ("u", "v") in {tuple(p) for p in preds} and () in {tuple(p) for p in preds}
    # another likely separator in a cell: a loud bad record naming the option, not a made-up label
    (tmp_path / "pipe.csv").write_text("f0,label\n1.0,u|v\n2.0,u|v\n")
    r = cli("run", "--source", tmp_path / "pipe.csv", "--task", "multilabel", "--no-progress", check=1)
    assert "multilabel_sep=|" in r.stderr
    r = cli("run", "--source", f"file://{tmp_path / 'pipe.csv'}?multilabel_sep=|", "--task", "multilabel",
            "--no-progress", check=0)


# ----------------------------------------------------------------------------- sinks
@pytest.mark.parametrize("sink", ["/dev/null", "/dev/stdout", "-"])
def test_character_device_and_stdout_sinks(tmp_path, sink):
    """Regression: --sink /dev/null and /dev/stdout crashed at the end in os.fsync (EINVAL) with
    no model or checkpoint saved; --sink - wrote a file named '-'."""
    X, y = two_blobs(60)
    src = write_jsonl(tmp_path / "d.jsonl", X, y)
    r = cli("run", "--source", src, "--task", "multiclass", "--no-progress", "--sink", sink, "--checkpoint-dir",
            tmp_path / "ck", "--save", tmp_path / "m.ssvm", cwd=tmp_path, check=0)
    assert "Traceback" not in r.stderr and (tmp_path / "m.ssvm").exists() and list((tmp_path / "ck").iterdir())
    assert not (tmp_path / "-").exists()
    if sink != "/dev/null":   # stdout holds the predictions only; the summary goes to stderr
        assert sum('"prediction"' in line for line in r.stdout.splitlines()) == 60
        assert all(json.loads(line)["prediction"] in ("pos", "neg", None) for line in r.stdout.splitlines())
        assert "examples seen 60" in r.stderr


def test_a_closed_pipe_ends_quietly(tmp_path, saved_model):
    """Regression: ``predict ... | head`` ended in a BrokenPipeError traceback; ``run --sink - |
    head`` now stops, saves and checkpoints."""
    X, y = two_blobs(20000, seed=3)
    src = write_jsonl(tmp_path / "big.jsonl", X)
    cmd = [sys.executable, "-m", "streamssvm", "predict", "--model", str(saved_model), "--source", str(src)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=ROOT)
    first = p.stdout.readline()
    p.stdout.close()   # the reader goes away (head -1)
    err = p.stderr.read().decode()
    assert p.wait(timeout=600) == 0, err
    assert json.loads(first)["prediction"] in ("pos", "neg")
    assert "Traceback" not in err and "BrokenPipe" not in err and "the reader closed the output" in err
    # run: stops, checkpoints, saves
    src = write_jsonl(tmp_path / "big_labeled.jsonl", X, y)
    cmd = [sys.executable, "-m", "streamssvm", "run", "--source", str(src), "--task", "multiclass", "--learner",
           "sgd", "--no-progress", "--sink", "-", "--checkpoint-dir", str(tmp_path / "ck"), "--save",
           str(tmp_path / "m2.ssvm")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=ROOT)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=600) == 0, err
    assert "Traceback" not in err and "closed it; checkpoint written" in err
    assert (tmp_path / "m2.ssvm").exists() and list((tmp_path / "ck").iterdir())


# ----------------------------------------------------------------------------- smaller items
def test_save_says_what_it_saved_with_the_usual_file_mode(tmp_path):
    """Regression: --save printed nothing and wrote the file with mode 0600 (mkstemp's)."""
    X, y = two_blobs(40)
    src = write_jsonl(tmp_path / "d.jsonl", X, y)
    r = cli("run", "--source", src, "--task", "multiclass", "--no-progress", "--save", tmp_path / "m.ssvm", check=0)
    assert f"saved the model (MulticlassSSVM, 40 examples held" in r.stderr and str(tmp_path / "m.ssvm") in r.stderr
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(tmp_path / "m.ssvm").st_mode & 0o777 == 0o666 & ~mask


def test_an_option_typo_names_the_closest_option():
    r = cli("run", "--source", "x.jsonl", "--task", "multiclass", "--lamda", "0.1", "--chekpoint-dir", "d", check=2)
    assert "--lamda -> --lam" in r.stderr and "--chekpoint-dir -> --checkpoint-dir" in r.stderr
    assert "Traceback" not in r.stderr


def test_kafka_predictions_carry_the_input_key(tmp_path, broker, saved_model):
    """Regression: predictions of unkeyed Kafka messages had key null; messages without "y" were
    bad records. The key is now the message's key, or its place (topic/partition@offset)."""
    pytest.importorskip("kafka")
    X, y = two_blobs(10, seed=4)
    write_jsonl(tmp_path / "k.jsonl", X)
    cli("produce", tmp_path / "k.jsonl", "--bootstrap", broker, "--topic", "unlabeled", check=0)
    r = cli("predict", "--model", saved_model, "--source", f"kafka://{broker}/unlabeled?group=g&stop_at_end=1",
            check=0)
    keys = [p["key"] for p in _predictions(r.stdout)]
    assert keys == [f"unlabeled/0@{i}" for i in range(10)], r.stderr


# ----------------------------------------------------------------------------- compile notice
def test_the_python_api_announces_compilation_once_with_progress(tmp_path):
    """Regression: a cold first MulticlassSSVM().learn_one(...) compiled for a minute or more
    without a word. Now one notice per process (logging, silenceable) and progress lines."""
    code = ("import logging, sys\n"
            "import streamssvm.kernel_cache as K; K.PROGRESS_EVERY = 0.5\n"
            "if sys.argv[1] == 'quiet': logging.getLogger('streamssvm.kernels').setLevel(logging.ERROR)\n"
            "import streamssvm as ss\n"
            "for _ in range(2):\n"
            "    m = ss.MulticlassSSVM(learner=ss.learners.SGD(seed=0))\n"
            "    m.learn_one({'f': 1.0}, 'a'); m.learn_one({'f': -1.0}, 'b')\n"
            "print(m.predict_one({'f': 1.0}))\n")
    env = dict(ENV, STREAMSSVM_CACHE=str(tmp_path / "cache"))

    def py(mode):
        return subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=600)
    r = py("loud")
    assert r.returncode == 0 and r.stdout.strip() == "a", r.stderr
    assert r.stderr.count("compiling its numba kernels") == 1 and str(tmp_path / "cache") in r.stderr
    assert "still compiling kernels" in r.stderr
    r = py("loud")   # warm cache: not a word
    assert r.returncode == 0 and r.stderr == "", r.stderr
    env["STREAMSSVM_CACHE"] = str(tmp_path / "cache2")
    r = py("quiet")   # cold, silenced
    assert r.returncode == 0 and r.stderr == "", r.stderr


# ----------------------------------------------------------------------------- results shown
def test_test_results_on_console_json_report_and_plot(tmp_path):
    """Regression: --test results reached only the --metrics file; the summary's examples/s
    counted the refinement."""
    X, y = two_blobs(150, seed=5)
    src = write_jsonl(tmp_path / "d.jsonl", X, y)
    Xt, yt = two_blobs(40, seed=6)
    test = write_jsonl(tmp_path / "t.jsonl", Xt, yt)
    common = ["run", "--source", src, "--task", "multiclass", "--no-progress", "--test", f"file://{test}",
              "--snapshot-every", "50", "--refine-passes", "2"]
    r = cli(*common, "--checkpoint-dir", tmp_path / "ck", "--metrics", tmp_path / "m.jsonl", check=0)
    assert "test metrics" in r.stdout and '"accuracy"' in r.stdout.split("test metrics", 1)[1]
    snaps = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    # the snapshot after --refine-passes belongs to the refinement (not a cliff in the stream panel)
    assert snaps[-1]["phase"] == "refine" and snaps[-1]["passes"] == 2
    assert all("phase" not in h for h in snaps[:-1]) and all("test" in h for h in snaps)
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = cli(*common, "--json", check=0)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s = json.loads(r.stdout)
    assert s["test"]["accuracy"] > 0.9 and s["test"]["n"] == 40
    assert s["throughput"] == pytest.approx(s["new_examples"] / s["seconds_stream"])
    assert s["seconds_stream"] <= s["seconds"]
    # the run's own CPU (bench/hotpath.py's file row): the stream and the refinement, not the
    # process's start-up (imports and kernel loading, over a CPU second)
    process_cpu = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
    assert isinstance(s["cpu_seconds"], float) and 0.0 < s["cpu_seconds"] < process_cpu
    # the stream's part of it: without the refinement, the final snapshot and checkpoint
    assert isinstance(s["cpu_seconds_stream"], float) and 0.0 < s["cpu_seconds_stream"] < s["cpu_seconds"]
    r = cli("report", tmp_path / "ck", "--json", check=0)
    assert json.loads(r.stdout)["test"]["n"] == 40
    r = cli("report", tmp_path / "ck", check=0)
    assert "test metrics" in r.stdout
    pytest.importorskip("matplotlib")
    r = cli("report", tmp_path / "ck", "--plot", tmp_path / "p.png", check=0)
    assert (tmp_path / "p.png").stat().st_size > 0


def test_the_progress_line_ends_before_the_refinement_speaks():
    import io

    from streamssvm.engine import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    s = Tty()
    p = Progress(True, stream=s)
    p.update(10, {"accuracy": 0.5}, 0.1, force=True)
    p.finish(20, {"accuracy": 0.5}, 0.1)
    p.update(30, {"accuracy": 0.5}, 0.1, force=True)   # after finish: nothing
    p.close()
    assert s.getvalue().endswith("\n") and "examples 30" not in s.getvalue() and s.getvalue().count("\n") == 1


def test_report_after_demo_shows_the_refined_model(tmp_path):
    """Regression: the report command the demo prints showed the checkpoint from before the
    refinement."""
    out = tmp_path / "demo"
    cli("demo", "--quick", "--out", out, "--refine-schedule", "1", "2", "--no-progress", check=0)
    demo = json.loads((out / "demo.json").read_text())
    r = cli("report", out / "ckpt", "--json", check=0)
    rep = json.loads(r.stdout)
    assert rep["last_certificate"]["gap"] == pytest.approx(demo["refine"][-1]["gap"])
    assert rep["test"]["token_accuracy"] == pytest.approx(1 - demo["refine"][-1]["test_error"])
