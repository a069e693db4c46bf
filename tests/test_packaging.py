"""Packaging: optional packages are imported only through streamssvm._optional.require, the
core dependencies are declared, the [distributed] extra (Ray) is optional and lazy, and (with CI
set) the wheel holds streamssvm/connectors and no top-level 'connectors'."""
import os
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# (pandas is also imported by the estimators where the input already is a pandas object, or
# with a fallback on ImportError; MultiLabelSSVM.predict_many goes through require)
OPTIONAL = ("kafka", "hnswlib", "matplotlib")


def _sources():
    for d in ("streamssvm", "connectors"):
        yield from (ROOT / d).rglob("*.py")


def test_optional_packages_are_imported_only_through_require():
    pat = re.compile(r"^\s*(import|from)\s+(%s)\b" % "|".join(OPTIONAL), re.M)
    offenders = []
    for f in _sources():
        text = f.read_text()
        for m in pat.finditer(text):
            # allowed: an import inside a function that called require()/_need_kafka() first
            before = text[:m.start()]
            func = before[before.rfind("\ndef ") if "\ndef " in before else 0:]
            func = func[func.rfind("\n    def ") if "\n    def " in func else 0:]
            if "_need_kafka()" not in func and "require(" not in func:
                offenders.append(f"{f.relative_to(ROOT)}: {m.group(0).strip()}")
    assert not offenders, offenders


def test_core_dependencies_are_declared():
    text = (ROOT / "pyproject.toml").read_text()
    deps = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    for pkg in ("numpy", "numba", "river", "scipy"):
        assert f'"{pkg}' in deps
    for pkg in ("hnswlib", "kafka-python", "matplotlib", "pandas"):
        assert pkg not in deps, f"{pkg} must be an extra"
    for extra in ("kafka", "extreme", "plot", "all", "test", "bench", "kafka-dev", "distributed"):
        assert re.search(rf"^{re.escape(extra)} = \[", text, re.M), extra


def test_missing_extra_error_names_it():
    from streamssvm._optional import require
    with pytest.raises(ImportError, match=r"pip install 'streamssvm\[extreme\]'"):
        require("hnswlib_not_installed_xyz", extra="extreme", feature="mips='hnsw'")


def test_connectors_are_streamssvm_connectors():
    import streamssvm
    import streamssvm.connectors.files as f
    assert f.__name__ == "streamssvm.connectors.files"
    # in a source checkout the folder is the top-level connectors/ of this very checkout
    if not (pathlib.Path(streamssvm.__file__).parent / "connectors").is_dir():
        assert pathlib.Path(f.__file__).resolve().parent == (pathlib.Path(streamssvm.__file__).resolve().parents[1]
                                                              / "connectors")


@pytest.mark.skipif(not os.environ.get("CI"), reason="builds a wheel (set CI=1)")
def test_wheel_contents(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True)
    whl = next(tmp_path.glob("streamssvm-*.whl"))
    names = zipfile.ZipFile(whl).namelist()
    assert "streamssvm/connectors/files.py" in names and "streamssvm/data/ocr_letters.npz" in names
    assert not [n for n in names if n.startswith("connectors/")]
    meta = zipfile.ZipFile(whl).read(next(n for n in names if n.endswith("METADATA"))).decode()
    requires = [ln for ln in meta.splitlines() if ln.startswith("Requires-Dist:") and "extra ==" not in ln]
    assert sorted(r.split()[1].split(">")[0] for r in requires) == ["numba", "numpy", "river", "scipy"]


def test_every_subpackage_is_installed():
    """Regression: the wheel left out streamssvm.estimators (packages are listed explicitly in
    pyproject.toml), so `pip install .` gave a package that failed on import."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^packages\s*=\s*\[(.*?)\]", text, re.S | re.M).group(1)
    listed = set(re.findall(r'"(streamssvm(?:\.[a-z_]+)*)"', block))
    on_disk = {"streamssvm." + str(p.parent.relative_to(ROOT / "streamssvm")).replace(os.sep, ".")
               for p in (ROOT / "streamssvm").rglob("__init__.py") if p.parent != ROOT / "streamssvm"}
    on_disk |= {"streamssvm", "streamssvm.connectors"}
    assert on_disk <= listed, f"not in pyproject.toml [tool.setuptools] packages: {sorted(on_disk - listed)}"


# ----------------------------------------------------------------------------- the [distributed] extra
# Ray is imported by streamssvm.distributed only, whose package __init__ calls require("ray")
# first; nothing else imports it, so `import streamssvm` and the CLI work without it.
BLOCK_RAY = "import sys; sys.modules['ray'] = None   # as if Ray were not installed\n"


def _python(code, tmp_path):
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)


def test_ray_is_declared_only_in_the_distributed_extra():
    text = (ROOT / "pyproject.toml").read_text()
    deps = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert "ray" not in deps, "ray must be an extra"
    extra = re.search(r"^distributed = \[(.*?)\]", text, re.M | re.S)
    assert extra and re.search(r'"ray\b', extra.group(1)), "ray must be in the [distributed] extra"
    from streamssvm._optional import EXTRAS
    assert EXTRAS["ray"] == ("ray", "distributed")


def test_ray_is_imported_only_inside_streamssvm_distributed():
    pat = re.compile(r"^\s*(import|from)\s+ray\b", re.M)
    outside = [str(f.relative_to(ROOT)) for f in _sources()
               if pat.search(f.read_text()) and "distributed" not in f.relative_to(ROOT).parts]
    assert not outside, outside
    init = (ROOT / "streamssvm" / "distributed" / "__init__.py").read_text()
    guard = init.index('require("ray", extra="distributed"')
    assert guard < init.index("\nfrom ._"), "require('ray') must come before the package imports its modules"


def test_import_streamssvm_does_not_import_ray(tmp_path):
    r = _python("import sys\nimport streamssvm, streamssvm.cli, streamssvm.engine, streamssvm.estimators\n"
                "print('ray' in sys.modules)", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_import_and_help_work_without_ray(tmp_path):
    code = BLOCK_RAY + (
        "import streamssvm, numpy as np\n"
        "m = streamssvm.MulticlassSSVM(learner=streamssvm.learners.SGD(seed=0))\n"
        "m.learn_one({'f': 1.0}, 'a')\n"
        "from streamssvm.cli import main\n"
        "for argv in (['--help'], ['run', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), e.code\n"
        "print('OK')\n")
    r = _python(code, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("OK") and "--workers" in r.stdout


def test_workers_without_ray_names_the_extra(tmp_path):
    """--workers without Ray: a one-line error naming pip install 'streamssvm[distributed]' (no
    traceback), before anything is read or learned."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"x": {"f": 1.0}, "y": "a"}\n')
    code = BLOCK_RAY + ("from streamssvm.cli import main\n"
                        f"main(['run', '--source', {str(data)!r}, '--task', 'multiclass', '--workers', '2', "
                        "'--labels', 'a,b'])\n")
    r = _python(code, tmp_path)
    assert r.returncode == 1
    assert "pip install 'streamssvm[distributed]'" in r.stderr and "--workers" in r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    # the package itself says the same
    r = _python(BLOCK_RAY + "import streamssvm.distributed\n", tmp_path)
    assert r.returncode == 1 and "pip install 'streamssvm[distributed]'" in r.stderr
