"""The numba cache of the kernels lives in a user cache folder keyed by the digest of all kernel
sources: never inside the package (a leftover folder there shadows a later editable install), and
a source change (numba alone only watches each function's own file) means a new folder, so stale
machine code is never loaded."""
import glob
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit

from streamssvm import _kernels, kernel_cache
from streamssvm._kernels import common


def test_a_source_change_is_a_new_cache_folder(tmp_path):
    src = tmp_path / "k"
    src.mkdir()
    for name in ("a.py", "b.py"):
        (src / name).write_text(f"# {name}\n")
    before = kernel_cache.cache_dir(str(src), root=str(tmp_path / "cache"))
    assert before == kernel_cache.cache_dir(str(src), root=str(tmp_path / "cache"))
    (src / "a.py").write_text("# a, edited\n")   # b's code may inline a: b's cache must go too
    after = kernel_cache.cache_dir(str(src), root=str(tmp_path / "cache"))
    assert after != before and os.path.dirname(after) == os.path.dirname(before)


def test_compiled_kernels_land_in_the_user_cache_not_in_the_package(tmp_path):
    """A fresh interpreter with ``STREAMSSVM_CACHE`` set compiles a kernel: its index and code
    files are in that cache's digest folder, and the package folder gains no numba file."""
    code = ("import numpy as np\n"
            "from streamssvm._kernels import sumtree\nfrom streamssvm._kernels.common import py_entry\n"
            "from streamssvm.kernel_cache import cache_dir\n"
            "t = np.zeros(8); py_entry(sumtree.tree_update)(t, 4, 1, 2.0)\n"
            "print(cache_dir())\n")
    pkg_cache = os.path.join(os.path.dirname(_kernels.__file__), "__pycache__")
    in_package = set(glob.glob(os.path.join(pkg_cache, "*.nb[ic]")))
    env = dict(os.environ, STREAMSSVM_CACHE=str(tmp_path / "c"))
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    folder = out.stdout.strip()
    assert folder.startswith(str(tmp_path / "c")) and os.path.basename(folder).startswith(
        "kernels-" + kernel_cache.sources_digest()[:16])
    assert any(f.startswith("sumtree.tree_update") for f in os.listdir(folder))
    assert set(glob.glob(os.path.join(pkg_cache, "*.nb[ic]"))) == in_package


def test_an_unwritable_root_falls_back_to_the_next(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("STREAMSSVM_CACHE", str(blocked / "sub"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    path = kernel_cache.writable_cache_dir()
    assert path is not None and path.startswith(str(tmp_path / "xdg"))


def _kernel_dispatchers():
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher
    for info in pkgutil.iter_modules(_kernels.__path__):
        mod = importlib.import_module(f"{_kernels.__name__}.{info.name}")
        for name, obj in sorted(vars(mod).items()):
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == mod.__name__:
                yield f"{info.name}.{name}", obj


def test_kernels_compile_no_cfunc_wrapper():
    """Nothing takes a kernel's C address (ctypes / cfunc): a cfunc wrapper is compiled code (and
    LLVM time on a cold start) for nothing, so every kernel is declared without one."""
    found = dict(_kernel_dispatchers())
    assert "bcfw.learn_one_example" in found and "common.gram" in found
    assert [n for n, d in found.items() if not d.targetoptions.get("no_cfunc_wrapper")] == []


def test_single_use_step_helpers_are_inlined_not_compiled_apart():
    """Helpers called from one place on the first-use path are inlined into their caller's numba IR:
    a helper compiled as its own function is optimized and turned into machine code once alone,
    then again inside every kernel that calls it (a cold start pays both)."""
    from streamssvm._kernels import bcfw
    for d in (bcfw.write_block, bcfw.write_segment, bcfw.block_gram, bcfw.block_u, bcfw._emission_avg,
              bcfw._append, bcfw._step_loop, bcfw.one_step):
        assert d.targetoptions.get("inline") == "always", d.py_func.__name__


def test_kernels_called_only_from_kernels_have_no_python_entry():
    """A kernel that only other kernels call is compiled without a CPython wrapper (``_INNER``):
    the wrapper's unboxing of its arguments is compiled code of its own on every cold start, never
    run. Calling one of them from Python is an error, so the list names only helpers that no
    Python code (library, tests, doctests) calls."""
    found = dict(_kernel_dispatchers())
    inner = ("chain._top_tags", "chain._viterbi_first", "chain._viterbi_last", "chain._viterbi_unary",
             "chain.chain_loss_norm", "chain.chain_trans_sqnorm", "chainsparse.sp_apply", "chainsparse.sp_find",
             "chainsparse.sp_labeling_apply", "chainsparse.sp_score", "chainsparse.sp_snap", "chainsparse.sp_sqnorm",
             "chainsparse.sp_trans_sqnorm", "common._dense_scores_contiguous", "common.row_support", "common.write_dense_row",
             "layout.block_stat_len", "layout.gram_len", "layout.n_index", "layout.block_views",
             "structops._chain_stat", "structops._set_stat", "structops._set_loss_lin", "bcfw.avg_coef",
             "bcfw.sample_block",
             # helpers that library code and tests reach through ``common.py_entry`` (a cached twin
             # made on first use), so the first-record path compiles no wrapper of theirs
             "common.gram", "common.emission_add", "common.emission_add_csr", "common.stat_emission_sqnorm", "common.stat_emission_apply",
             "common.emission_sqnorm_tokens", "common._stable_order", "common._token_table",
             "common._gram_entry", "common._ml_dense_truth", "multiclass.mc_decode", "multiclass.mc_stat_apply",
             "multiclass.mc_stat_apply2", "layout.pairs_pos", "layout.stat_pos", "sumtree.tree_sample",
             "sumtree.tree_update", "mrf._mrf_enum", "chainsparse.sp_register", "chainsparse.sp_labeling_stat",
             "chain.transition_support")
    assert [n for n in inner if not found[n].targetoptions.get("no_cpython_wrapper")] == []
    # the Python entry points keep theirs
    assert not any(found[n].targetoptions.get("no_cpython_wrapper")
                   for n in ("bcfw.learn_one_example", "bcfw.predict_batch", "common.emission_scores"))


def test_py_entry_is_one_cached_twin_with_the_kernels_results():
    """``py_entry`` gives an ``_INNER`` kernel one Python entry (made once, cached, with a CPython
    wrapper) computing what the kernel computes inside other kernels."""
    import numpy as np
    from numba import njit
    from numba.core.caching import NullCache

    from streamssvm._kernels import common
    entry = common.py_entry(common.gram)
    assert common.py_entry(common.gram) is entry
    assert common.gram.targetoptions.get("no_cpython_wrapper") and not entry.targetoptions.get("no_cpython_wrapper")
    assert entry.py_func is common.gram.py_func
    assert isinstance(common.gram._cache, NullCache) and not isinstance(entry._cache, NullCache)

    @njit
    def via_kernel(tp, fi, fv, L, G, mark):
        common.gram(tp, fi, fv, L, G, mark)

    tp, fi, fv = np.array([0, 2, 3], np.int32), np.array([0, 3, 3], np.int32), np.array([1.5, -2.0, 0.25])
    G1, G2 = np.zeros((2, 2)), np.zeros((2, 2))
    entry(tp, fi, fv, 2, G1, np.zeros(4))
    via_kernel(tp, fi, fv, 2, G2, np.zeros(4))
    assert G1.tolist() == G2.tolist() and G1[0, 0] == 1.5 ** 2 + 4.0


def _python_calls_of(names, path):
    """(line, name) of the calls of ``names`` in the Python code of ``path``: outside the bodies of
    jitted functions and overloads, and not through ``py_entry(...)``."""
    import ast
    tree = ast.parse(open(path, encoding="utf-8").read())
    jitted = ("njit", "jit", "overload", "overload_method", "register_jitable", "intrinsic")

    def is_jitted(fn):
        for d in fn.decorator_list:
            f = d.func if isinstance(d, ast.Call) else d
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in jitted:
                return True
        return False

    # names bound to ``py_entry(...)`` in this file (``apply = py_entry(K.apply)``) are entries
    rebound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(c, ast.Call) and getattr(c.func, "id", None) == "py_entry"
                                                for c in ast.walk(node.value)):
            for t in node.targets:
                rebound |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    found = []

    def visit(node, in_jit):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_jit = in_jit or is_jitted(node)
        if not in_jit and isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in names and not (isinstance(f, ast.Name) and name in rebound):
                found.append((node.lineno, name))
        for child in ast.iter_child_nodes(node):
            visit(child, in_jit)

    visit(tree, False)
    return found


def test_no_python_code_calls_a_kernel_without_a_python_entry():
    """Calling an ``_INNER`` kernel (no CPython wrapper) from Python crashes the process instead of
    raising: every Python caller in the package, the connectors, the benches and the tests goes
    through ``common.py_entry``. A static scan of the call sites by name, outside
    ``streamssvm/_kernels/`` (whose plain functions are compiled as overloads of the structures;
    the kernel tests and doctests run them there); a name shared with a Python function elsewhere
    would show up here and be renamed."""
    import glob
    import os
    inner = {n.split(".", 1)[1] for n, d in _kernel_dispatchers() if d.targetoptions.get("no_cpython_wrapper")}
    assert {"gram", "mc_stat_apply2", "pairs_pos"} <= inner
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [p for pat in ("streamssvm/*.py", "streamssvm/[!_]*/**/*.py", "connectors/**/*.py", "bench/**/*.py", "tests/**/*.py",
                           "examples/**/*.py") for p in glob.glob(os.path.join(root, pat), recursive=True)]
    bad = [(os.path.relpath(p, root), line, name) for p in sorted(paths) for line, name in _python_calls_of(inner, p)]
    assert bad == []


def test_every_kernel_without_a_python_entry_raises_when_python_calls_it():
    """The run-time net under the static scan above (which cannot see a dynamic call, e.g. a user's
    ``getattr(module, name)(...)``): every kernel declared without a CPython wrapper is a
    ``common.InnerKernel``, whose call from Python raises ``TypeError`` naming ``py_entry``;
    before, the call jumped into compiled code with no wrapper and crashed the process."""
    inner = [(n, d) for n, d in _kernel_dispatchers() if d.targetoptions.get("no_cpython_wrapper")]
    assert len(inner) > 40
    assert [n for n, d in inner if not isinstance(d, common.InnerKernel)] == []
    for name, d in inner:
        with pytest.raises(TypeError, match="py_entry"):
            d(np.zeros(3), 1)
    # kernels with a Python entry keep numba's own dispatcher class
    assert [n for n, d in _kernel_dispatchers()
            if isinstance(d, common.InnerKernel) and not d.targetoptions.get("no_cpython_wrapper")] == []


def test_an_inner_kernel_still_compiles_into_its_callers_and_through_py_entry():
    """The guard changes the Python call only: a jitted caller types and runs the helper as any
    dispatcher, and ``py_entry`` gives the same numbers."""
    @njit
    def via_kernel(tp, fi, fv, L, G, mark):
        common.gram(tp, fi, fv, L, G, mark)

    tp, fi, fv = np.array([0, 2, 3], np.int32), np.array([0, 3, 3], np.int32), np.array([1.5, -2.0, 0.25])
    G1, G2 = np.zeros((2, 2)), np.zeros((2, 2))
    common.py_entry(common.gram)(tp, fi, fv, 2, G1, np.zeros(4))
    via_kernel(tp, fi, fv, 2, G2, np.zeros(4))
    assert G1.tolist() == G2.tolist()
    with pytest.raises(TypeError, match=r"py_entry\(gram\)"):   # a dynamic call, which the scan cannot see
        getattr(common, "gram")(tp, fi, fv, 2, G1, np.zeros(4))


def test_the_record_path_does_not_compile_numbas_own_sampler():
    """learn_one draws its replays through mtseed: a first learn_one + predict_one compiles no
    ``sample_block`` (numba's np.random draws, never run on that path)."""
    import os
    import subprocess
    import sys
    import tempfile
    code = ("import streamssvm as ss\n"
            "from numba.core import event\n"
            "seen = []\n"
            "class L(event.Listener):\n"
            "    def on_start(self, ev):\n"
            "        f = getattr(ev.data.get('dispatcher'), 'py_func', None)\n"
            "        seen.append(getattr(f, '__name__', '?'))\n"
            "    def on_end(self, ev):\n"
            "        pass\n"
            "event.register('numba:compile', L())\n"
            "m = ss.SequenceTagger()\n"
            "m.learn_one([{'a': 1.0}, {'b': 1.0}], ['x', 'y']); m.learn_one([{'a': 1.0}], ['x'])\n"
            "m.predict_one([{'a': 1.0}])\n"
            "assert 'learn_one_example' in seen, seen\n"
            "print('sample_block' in seen)\n")
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, STREAMSSVM_CACHE=os.path.join(d, "c"), NUMBA_CACHE_DIR=os.path.join(d, "n"))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
