"""The numba cache of the kernels is dropped when any kernel source changes (numba alone only
watches each function's own file)."""
import os

from streamssvm import _kernels


def test_stale_cache_files_are_removed_when_a_source_changes(tmp_path):
    src = tmp_path / "k"
    src.mkdir()
    for name in ("a.py", "b.py"):
        (src / name).write_text(f"# {name}\n")
    cache = src / "__pycache__"
    cache.mkdir()
    (cache / "b.f-1.py311.nbi").write_bytes(b"index")
    (cache / "b.f-1.py311.1.nbc").write_bytes(b"code")
    (cache / "b.cpython-311.pyc").write_bytes(b"pyc")
    # first import with no stamp: unknown provenance, dropped; the stamp is written
    assert _kernels.refresh_cache(str(src)) == 2
    assert (cache / _kernels._STAMP).read_text() == _kernels.sources_digest(str(src))
    assert (cache / "b.cpython-311.pyc").exists()
    # unchanged sources: cache files written now are kept
    (cache / "b.f-1.py311.nbi").write_bytes(b"index")
    assert _kernels.refresh_cache(str(src)) == 0 and (cache / "b.f-1.py311.nbi").exists()
    # another module changed (b's file did not): b's compiled code may inline it, so it goes
    (src / "a.py").write_text("# a, edited\n")
    assert _kernels.refresh_cache(str(src)) == 1 and not (cache / "b.f-1.py311.nbi").exists()


def test_the_package_stamp_matches_its_sources():
    stamp = os.path.join(os.path.dirname(_kernels.__file__), "__pycache__", _kernels._STAMP)
    with open(stamp) as fh:   # a source checkout: the folder is writable, the stamp written at import
        assert fh.read().strip() == _kernels.sources_digest()
