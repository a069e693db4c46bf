"""Every ``bash`` block of the README runs, command by command, through the real CLI in a
subprocess, in one folder per block holding small stand-ins for the files the commands name
(``words.conll``, ``yeast.libsvm``, ``train.jsonl``, ...). The Kafka blocks get the real broker of
``tests/conftest.py``, the Ray block a local cluster; a block whose extra is missing is skipped.

What is not run as written, and why (:data:`SUBSTITUTIONS`): ``pip install`` lines
(``tests/test_install.py`` installs the wheel and the editable package in a fresh venv), the
test suite itself (``python3 -m pytest``),
``streamssvm broker ... &`` (the broker fixture stands in, its address replaces 127.0.0.1:9092),
``datasets fetch`` (a download), and sizes: ``demo`` gets ``--quick``, ``export`` a ``--limit``,
long idle timeouts two seconds."""
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT, PYTHONHASHSEED="0")

#: (pattern, replacement) applied to a command's text before it runs
SUBSTITUTIONS = [
    (r"^streamssvm demo\b", "streamssvm demo --quick --refine-schedule 1 --no-progress"),
    (r"^(streamssvm export ocr-letters \S+)", r"\1 --limit 3000"),
    (r"--idle-timeout \d+", "--idle-timeout 2"),
    (r"--workers 4", "--workers 2"),
    (r"--snapshot-every 5000", "--snapshot-every 100"),
]


def bash_blocks():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def commands(block):
    """The block's commands: continuation lines joined, comments dropped, split on ``;``,
    ``&&`` and ``|`` (the part after a pipe is dropped: ``| head`` reads what it likes)."""
    text = block.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lex.whitespace_split = True
        lex.commenters = "#"
        cur, piped = [], False
        for tok in lex:
            if tok in (";", "&&", "&", "|"):
                if cur and not piped:
                    out.append((cur, tok == "&"))
                cur, piped = [], tok == "|"
            else:
                cur.append(tok)
        if cur and not piped:
            out.append((cur, False))
    return out


def test_the_readme_has_bash_blocks():
    assert len(bash_blocks()) >= 5
    assert ["streamssvm", "--version"] in [c for c, _ in commands(bash_blocks()[3])]


def _blobs(path, n, seed, labeled=True, csv=False):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n)
    X = rng.normal(size=(n, 3)) + 2.0 * (2 * y[:, None] - 1)
    with open(path, "w") as f:
        if csv:
            f.write("f0,f1,f2\n" + "".join(",".join(f"{v:.4f}" for v in x) + "\n" for x in X))
            return
        for x, t in zip(X, y):
            rec = {"x": {f"f{j}": float(v) for j, v in enumerate(x)}}
            if labeled:
                rec["y"] = "pos" if t else "neg"
            f.write(json.dumps(rec) + "\n")


def stand_ins(d):
    """Small files under the names the README's commands use."""
    subprocess.run([sys.executable, "-m", "streamssvm", "export", "ocr-words", str(d / "words.conll"), "--limit",
                    "300"], env=ENV, check=True, capture_output=True, timeout=600)
    rng = np.random.default_rng(0)
    with open(d / "yeast.libsvm", "w") as f:
        for _ in range(200):
            x = rng.normal(size=5)
            labs = [str(k) for k in range(3) if x[k] > 0]
            f.write(",".join(labs) + " " + " ".join(f"{j}:{v:.4f}" for j, v in enumerate(x)) + "\n")
    (d / "tree.json").write_text(json.dumps({"a": None, "b": None, "a1": "a", "a2": "a", "b1": "b"}))
    with open(d / "docs.jsonl", "w") as f:
        for _ in range(150):
            x = rng.normal(size=3)
            y = [lab for lab, on in (("a1", x[0] > 0.5), ("a2", x[0] < -0.5), ("b1", x[1] > 0)) if on]
            f.write(json.dumps({"x": {f"f{j}": float(v) for j, v in enumerate(x)}, "y": y}) + "\n")
    with open(d / "ctx.jsonl", "w") as f:
        centers = rng.normal(size=(50, 8))
        for _ in range(300):
            c = int(rng.integers(50))
            f.write(json.dumps({"x": (centers[c] + 0.1 * rng.normal(size=8)).tolist(), "y": f"c{c}"}) + "\n")
    _blobs(d / "train.jsonl", 200, 1)
    _blobs(d / "test.jsonl", 50, 2)
    _blobs(d / "more.jsonl", 100, 3)
    _blobs(d / "new.csv", 30, 4, csv=True)


@pytest.mark.parametrize("i", range(len(bash_blocks())))
def test_readme_bash_block_runs(tmp_path, request, i):
    block = bash_blocks()[i]
    cmds = commands(block)
    text = " ".join(" ".join(c) for c, _ in cmds)
    if "kafka://" in text or "--bootstrap" in text:
        pytest.importorskip("kafka")
        try:
            bootstrap = request.getfixturevalue("broker")
        except Exception as e:   # noqa: BLE001 - no broker binary: the kafka-dev extra is missing
            pytest.skip(f"no local broker ([kafka-dev] extra): {e}")
    else:
        bootstrap = None
    if "--workers" in text:
        pytest.importorskip("ray")
    if "--mips hnsw" in text:
        pytest.importorskip("hnswlib")
    stand_ins(tmp_path)
    if bootstrap and "letters.jsonl" in text and "export ocr-letters" not in text:
        subprocess.run([sys.executable, "-m", "streamssvm", "export", "ocr-letters", str(tmp_path / "letters.jsonl"),
                        "--limit", "3000"], env=ENV, check=True, capture_output=True, timeout=600)
    ran = 0
    for argv, background in cmds:
        line = shlex.join(argv)
        if argv[:3] in (["python3", "-m", "pip"], ["python3", "-m", "pytest"]) or (
                argv[:2] == ["streamssvm", "broker"] and background):
            continue   # installs (test_install.py), the suite itself, the broker (the fixture)
        if argv[:3] == ["streamssvm", "datasets", "fetch"]:
            continue
        assert argv[0] in ("streamssvm", "python3"), line
        for pat, rep in SUBSTITUTIONS:
            line = re.sub(pat, rep, line)
        if bootstrap:
            line = line.replace("127.0.0.1:9092", bootstrap)
        if "--workers" in line and "stop_at_end" in line:
            line += " --no-progress"
        args = shlex.split(line)
        if args[0] == "streamssvm":
            args = [sys.executable, "-m", "streamssvm"] + args[1:]
        r = subprocess.run(args, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"README bash block {i}: {line}\nexit {r.returncode}\n{r.stdout[-2000:]}\n" \
                                  f"{r.stderr[-3000:]}"
        assert "Traceback" not in r.stderr, r.stderr[-3000:]
        ran += 1
    if not ran:
        pytest.skip("nothing but installs in this block (tests/test_install.py covers them)")
