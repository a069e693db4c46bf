"""The README's two install commands in order, in one fresh virtual environment: the wheel
(``pip install .``) compiles its kernels, then ``pip install -e .`` replaces it, and the CLI
still works. Regression: the numba cache of the first install stayed in
``site-packages/streamssvm/`` after pip uninstalled the package, and that leftover folder (a
namespace package) shadowed the editable install (``ImportError: cannot import name
'__version__' from 'streamssvm' (unknown location)``).

The venv sees the system's site-packages (numpy, numba, river, scipy are not downloaded again);
building needs pip's build isolation (setuptools from the index): without it the test
is skipped, as it is without ``venv``."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 600


def _run(argv, cwd, env, check=True):
    r = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if check:
        assert r.returncode == 0, f"{argv}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r


def _copy_source(dst):
    """The package's files (not build leftovers) in a fresh folder: a fresh clone."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", ".git", "*.nbi", "*.nbc")
    for name in ("streamssvm", "connectors"):
        shutil.copytree(ROOT / name, dst / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, dst / name)


def test_wheel_then_editable_install_keeps_the_cli_working(tmp_path):
    pytest.importorskip("venv")
    src = tmp_path / "clone"
    src.mkdir()
    _copy_source(src)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR", "STREAMSSVM_CACHE")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")   # the user cache of this test only
    env["PYTHONNOUSERSITE"] = "1"
    wheels = tmp_path / "wheels"
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, src], tmp_path, env, check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot build the wheel (no network for the build backend?): {r.stderr[-300:]}")
    venv = tmp_path / "venv"
    r = _run([sys.executable, "-m", "venv", "--system-site-packages", venv], tmp_path, env, check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot create a venv: {r.stderr[-300:]}")
    py = venv / "bin" / "python"
    cli = venv / "bin" / "streamssvm"
    pip = [py, "-m", "pip", "--disable-pip-version-check", "-q"]
    # command 1: the wheel, and a first use that compiles kernels
    _run(pip + ["install", "--no-deps", next(wheels.glob("streamssvm-*.whl"))], tmp_path, env)
    site = pathlib.Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             tmp_path, env).stdout.strip())
    code = ("import streamssvm as ss, os\n"
            "m = ss.MulticlassSSVM(learner=ss.learners.SGD(seed=0))\n"
            "m.learn_one({'f': 1.0}, 'a'); m.learn_one({'f': -1.0}, 'b')\n"
            "print(m.predict_one({'f': 2.0}), os.path.dirname(ss.__file__))\n")
    out = _run([py, "-c", code], tmp_path, env).stdout.split()
    assert out[0] == "a" and pathlib.Path(out[1]) == site / "streamssvm"
    assert not list((site / "streamssvm").rglob("*.nbi")), "compiled kernels inside the installed package"
    assert list((tmp_path / "cache").rglob("*.nbi")), "no compiled kernels in the user cache"
    # command 2: the editable install replaces the wheel; nothing of the wheel's stays behind
    r = _run(pip + ["install", "--no-deps", "-e", src], tmp_path, env, check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot install editable (no network for the build backend?): {r.stderr[-300:]}")
    if (site / "streamssvm").exists():
        leftover = sorted(str(p.relative_to(site)) for p in (site / "streamssvm").rglob("*"))[:10]
        pytest.fail(f"site-packages/streamssvm survived the reinstall: {leftover}")
    r = _run([py, "-c", "import streamssvm; print(streamssvm.__file__)"], tmp_path, env)
    assert pathlib.Path(r.stdout.strip()).parent == src / "streamssvm", r.stderr
    r = _run([cli, "--version"], tmp_path, env)
    assert "streamssvm" in r.stdout
    data = tmp_path / "d.jsonl"
    data.write_text("".join('{"x": {"f": %d}, "y": "%s"}\n' % (s, "a" if s > 0 else "b") for s in (1, -1) * 20))
    r = _run([cli, "run", "--source", data, "--task", "multiclass", "--learner", "sgd", "--no-progress",
              "--save", tmp_path / "m.ssvm"], tmp_path, env)
    assert "examples seen 40" in r.stdout
