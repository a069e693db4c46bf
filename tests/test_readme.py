"""Every python block of the README runs verbatim, on its own, in a fresh interpreter and an empty
directory (issue 12: snippets that failed with ``NameError: ss``)."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_blocks():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_readme_has_python_blocks():
    assert len(python_blocks()) >= 4


@pytest.mark.parametrize("i", range(len(python_blocks())))
def test_readme_python_block_runs_verbatim(tmp_path, i):
    code = python_blocks()[i]
    if "hnsw" in code:
        pytest.importorskip("hnswlib")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=1200,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, f"README block {i} failed:\n{code}\n{r.stderr[-3000:]}"
    if "print(" in code:
        assert r.stdout.strip(), f"README block {i} printed nothing"
