"""``streamssvm inspect`` and ``predict --nbest`` through the real CLI in a subprocess, and
``explain_one`` (contributions add up to the scores)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.connectors.files import write_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT, PYTHONHASHSEED="0")


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "streamssvm", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=ENV, timeout=timeout)


def _tagger(path):
    t = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, replay=3, seed=0))
    for i in range(60):
        words = ["the", "dog", "runs"] if i % 2 else ["a", "cat", "sleeps"]
        t.learn_one([{"w=" + w: 1} for w in words], ["DET", "NOUN", "VERB"])
    t.save(path)
    return t


def test_inspect_text_and_json(tmp_path):
    m = tmp_path / "tagger.ssvm"
    t = _tagger(m)
    r = cli("inspect", m, "--top", "2")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "SequenceTagger" in out and "examples held     60" in out and "certificate       gap" in out
    assert "top features of NOUN: w=dog" in out or "top features of NOUN: w=cat" in out
    assert "transitions (row: previous tag, column: next tag)" in out and "(start)" in out
    r = cli("inspect", m, "--json", "--no-certificate")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["examples_held"] == 60 and s["labels"] == ["DET", "NOUN", "VERB"] and "certificate" not in s
    assert s["size_bytes"] == os.path.getsize(m) and s["lambda"] == pytest.approx(0.01)
    T, B = t._score_tables().transitions()
    assert np.allclose(s["transitions"]["table"], T) and np.allclose(s["transitions"]["start"], B[0])
    noun = next(p for p in s["top_features"] if p["label"] == "NOUN")
    assert {f["feature"] for f in noun["features"][:2]} == {"w=dog", "w=cat"}


def test_inspect_multiclass_arrays_and_extreme(tmp_path):
    rng = np.random.default_rng(0)
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0))
    for i in range(100):
        c = i % 3
        m.learn_one(np.eye(3)[c] + 0.1 * rng.normal(size=3), c)
    m.save(tmp_path / "mc.ssvm")
    s = json.loads(cli("inspect", tmp_path / "mc.ssvm", "--json").stdout)
    assert [p["features"][0]["feature"] for p in s["top_features"]] == ["x[0]", "x[1]", "x[2]"]
    assert "gap" in s["certificate"] and "transitions" not in s
    e = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact", lam=1e-3))
    for i in range(30):
        e.learn_one({f"w{i % 3}": 1.0}, "abc"[i % 3])
    e.save(tmp_path / "x.ssvm")
    r = cli("inspect", tmp_path / "x.ssvm")
    assert r.returncode == 0, r.stderr
    assert "top features of b: w1" in r.stdout and "no dual certificate" in r.stdout


def test_predict_nbest(tmp_path):
    m = tmp_path / "tagger.ssvm"
    t = _tagger(m)
    src = tmp_path / "s.jsonl"
    xs = [[{"w=the": 1}, {"w=cat": 1}], [{"w=a": 1}, {"w=dog": 1}, {"w=runs": 1}]]
    write_jsonl(src, [{"x": x} for x in xs])
    out = tmp_path / "p.jsonl"
    r = cli("predict", "--model", m, "--source", f"file://{src}", "--sink", out, "--nbest", 3)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for x, row in zip(xs, rows):
        assert row["prediction"] == t.predict_one(x) == row["nbest"][0]["output"]
        want = t.predict_nbest_one(x, 3)
        assert [b["output"] for b in row["nbest"]] == [y for y, _ in want]
        assert [b["score"] for b in row["nbest"]] == pytest.approx([s for _, s in want])
    r = cli("predict", "--model", m, "--source", f"file://{src}", "--nbest", 0)
    assert r.returncode == 2 and "positive integer" in r.stderr
    r = cli("predict", "--help")
    assert "--nbest K" in r.stdout
    r = cli("inspect", "--help")
    assert "--json" in r.stdout and "--top" in r.stdout and "--no-certificate" in r.stdout
    assert "inspect" in cli("--help").stdout


@pytest.mark.parametrize("kind", ["multiclass", "sequence", "multilabel", "pairwise", "hierarchy", "extreme"])
def test_explain_one_adds_up(kind):
    rng = np.random.default_rng(0)
    if kind == "sequence":
        m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, seed=0))
        for i in range(40):
            w = ["the", "dog"] if i % 2 else ["a", "cat"]
            m.learn_one([{"w=" + w[0]: 1, "b": 0.5}, {"w=" + w[1]: 1}], ["DET", "NOUN"])
        x = [{"w=the": 1, "b": 0.5}, {"w=cat": 1}]
    elif kind in ("multiclass", "extreme"):
        m = (ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0)) if kind == "multiclass" else
             ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact", lam=1e-3)))
        for i in range(90):
            m.learn_one({f"w{i % 3}": 1.0, "n": float(rng.normal())}, "abc"[i % 3])
        x = {"w1": 1.0, "w2": 0.3, "n": 0.2}
    else:
        kw = {"pairwise": kind == "pairwise"}   # "multilabel": independent labels (auto would pick the MRF)
        if kind == "hierarchy":
            kw = {"hierarchy": {"a": "x", "b": "x", "c": "y"}}
        m = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=0.01, seed=0), **kw)
        for i in range(60):
            z = rng.normal(size=3)
            m.learn_one({"f0": z[0], "f1": z[1], "f2": z[2]}, {lab: bool(z[j] > 0) for j, lab in enumerate("abc")})
        x = {"f0": 1.0, "f1": -0.5, "f2": 0.2}
    e = m.explain_one(x)
    best = m.predict_nbest_one(x, 2)
    assert e["output"] == m.predict_one(x) == best[0][0] and e["runner_up"] == best[1][0]
    for q, key in enumerate(("output", "runner_up")):
        total = sum(r[key] for r in e["features"]) + e["rest"][q]
        assert total == pytest.approx(best[q][1], abs=1e-9)
    if kind != "pairwise" and kind != "sequence":
        assert e["rest"] == pytest.approx([0.0, 0.0], abs=1e-9)   # no structure term: all in the features
    assert len(m.explain_one(x, top=1)["features"]) == 1
