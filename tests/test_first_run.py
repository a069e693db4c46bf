"""The first run says what it is doing before the slow part (the first-ten-minutes issue, item
1): ``import streamssvm`` is light (numba and the kernels load at the first use of an estimator,
PEP 562), and ``streamssvm demo`` / ``run`` print the compile notice, when the kernel cache is
cold, before numba is even imported. Ordering and content are asserted, never timing (the
measured times are in ``bench/archive/notice_latency.py``'s output)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT, PYTHONHASHSEED="0")
#: the environment of a test that picks its own cache root with NUMBA_CACHE_DIR:
#: $STREAMSSVM_CACHE (set by a developer or a benchmark) would take precedence over it
ENV_OWN_CACHE = {k: v for k, v in ENV.items() if k != "STREAMSSVM_CACHE"}


def _py(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=dict(ENV, **env), timeout=600)


def test_import_streamssvm_does_not_import_numba_and_the_names_still_work():
    r = _py("import sys, streamssvm as ss\n"
            "print('numba' in sys.modules, 'streamssvm._kernels' in sys.modules)\n"
            "print(ss.MulticlassSSVM.__name__, ss.learners.BCFW.__name__, ss.structures.__name__,\n"
            "      ss.datasets.__name__, ss.Certificate.__name__, callable(ss.load), ss.connectors.__name__)\n"
            "from streamssvm import *\n"
            "print(SequenceTagger.__name__, sorted(set(ss.__all__) - set(dir(ss))))\n"
            "print(ss.estimators.base.__name__, ss.engine.__name__)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "False False",
        "MulticlassSSVM BCFW streamssvm.structures streamssvm.datasets Certificate True streamssvm.connectors",
        "SequenceTagger []",
        "streamssvm.estimators.base streamssvm.engine"]
    r = _py("import streamssvm as ss; ss.no_such_name")
    assert "AttributeError: module 'streamssvm' has no attribute 'no_such_name'" in r.stderr


def test_the_default_estimators_do_not_import_scipy_sparse():
    """scipy.sparse (with what it imports: numpy.testing, f2py, ~11 MB resident) is for the
    learners that build sparse matrices (Pragam's chain engine, the LP oracle), not for a default
    model's learn and predict. Before: ``learners/_pragam_chain.py`` imported it at module level,
    so every estimator loaded it (a tenth of the chain-memory target's margin)."""
    r = _py("import sys, streamssvm as ss\n"
            "t = ss.SequenceTagger(); t.learn_one([{'a': 1.0}, {'b': 1.0}], ['x', 'y']); t.predict_one([{'a': 1.0}])\n"
            "m = ss.MulticlassSSVM(); m.learn_one({'a': 1.0}, 'x'); m.predict_one({'a': 1.0})\n"
            "print('scipy.sparse' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False"]


@pytest.mark.parametrize("cmd", ["demo", "run"])
def test_compile_notice_is_the_first_line_and_comes_before_numba_is_imported(tmp_path, cmd):
    """Before: the notice came after ``import streamssvm`` had imported numba and every kernel
    module (3.5 s on a loaded machine). ``-X importtime`` writes a line to the same stderr as
    each import finishes, so the order of the lines is the order of the events."""
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    src = tmp_path / "s.jsonl"
    src.write_text('{"x": {"a": 1}, "y": "x"}\n{"x": {"b": 1}, "y": "y"}\n')
    args = {"demo": ["demo", "--quick", "--out", str(tmp_path / "out")],
            "run": ["run", "--source", str(src), "--task", "multiclass"]}[cmd]
    p = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "streamssvm", *args], cwd=ROOT,
                         env=dict(ENV_OWN_CACHE, NUMBA_CACHE_DIR=str(cache)), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in p.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("import time:") and line.split("|")[-1].strip() == "numba":
                break
    finally:
        p.kill()
        p.wait()
    said = [i for i, ln in enumerate(lines) if not ln.startswith("import time:")]
    numba = [i for i, ln in enumerate(lines) if ln.startswith("import time:") and "numba" in ln]
    kernels = [i for i, ln in enumerate(lines) if "streamssvm._kernels" in ln]
    assert said, lines[-5:]
    assert lines[said[0]] == "compiling kernels (first run only; a minute or two)..."
    assert numba and said[0] < numba[0] and (not kernels or said[0] < kernels[0])
    assert not list(cache.rglob("*.nbi"))   # nothing was compiled yet when it was said


def test_a_warm_cache_gives_no_compile_notice_up_front(tmp_path, monkeypatch):
    from streamssvm import cli
    monkeypatch.delenv("STREAMSSVM_CACHE", raising=False)   # it would take precedence
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert cli._kernel_cache_cold()
    (d,) = cli._kernel_cache_dirs()
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "bcfw._arrive-1.py311.nbi"), "wb").close()
    assert not cli._kernel_cache_cold()
    import io
    buf = io.StringIO()
    cli._say_compiling_early(buf)
    assert buf.getvalue() == "" and cli._early_notice["t0"] is None


def test_first_use_compiles_one_learn_kernel_and_shares_the_scoring_kernels_with_prediction():
    """Cold start: a first use compiles as few kernels as the record path needs. The label-arrival
    revisit steps run in ``learn_one_example`` (not a second entry point ``run_steps`` holding the
    step code again), and once it has learned, a record's prediction runs there too (a record to
    predict: no ``predict_batch`` entry point holding the decoder again); a batch predicted
    scores with the arena's int32 index type, so the scoring kernels the learn path compiled serve
    it (one ``emission_scores`` specialization, not two). Asserted on the compiled signatures,
    never on timing."""
    r = _py("import numpy as np, streamssvm as ss\n"
            "from streamssvm._kernels import bcfw as K, common\n"
            "m = ss.SequenceTagger()\n"
            "m.learn_one([{'a': 1.0}], ['A']); m.learn_one([{'b': 1.0}, {'a': 1.0}], ['B', 'A'])\n"
            "print(m.predict_one([{'a': 1.0}, {'b': 1.0}]))\n"
            "print(len(K.run_steps.signatures), len(K.learn_one_example.signatures), len(K.predict_batch.signatures))\n"
            "m.predict_many([[{'a': 1.0}], [{'b': 1.0}, {'a': 1.0}]])\n"
            "print(sorted({str(s[5].types[1].dtype) for s in K.predict_batch.signatures}))")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1] == "0 1 0"
    assert lines[2] == "['int32']"


def test_first_use_compiles_no_eviction_code_until_the_store_is_full():
    """A FIFO store with room passes ``bcfw.NO_VICTIM`` (its own type) as the example's victim, so
    the first ``learn_one_example`` specialization holds no eviction code; the first eviction
    brings the int one. Asserted on the compiled signatures, never on timing."""
    r = _py("import streamssvm as ss\n"
            "from streamssvm._kernels import bcfw as K\n"
            "from streamssvm.learners import BCFW\n"
            "m = ss.MulticlassSSVM(learner=BCFW(window=3))\n"
            "for i in range(3): m.learn_one({'a': float(i)}, i % 2)\n"
            "print(m.predict_one({'a': 1.0}))\n"
            "print(sorted(str(s[6].types[6]) for s in K.learn_one_example.signatures))\n"
            "m.learn_one({'a': 1.0}, 0)\n"
            "print(sorted(str(s[6].types[6]) for s in K.learn_one_example.signatures))\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == ["['int8']", "['int64', 'int8']"]


def test_the_no_eviction_specialization_learns_bit_identically(monkeypatch):
    """Passing NO_VICTIM while the store has room changes nothing but what compiles: the same
    stream (with evictions after the window fills) learned with an int victim on every record
    gives the same predictions and weights to the bit."""
    import numpy as np
    import streamssvm as ss
    from streamssvm._kernels import bcfw as K
    from streamssvm.learners import BCFW

    def run():
        rng = np.random.default_rng(3)
        m = ss.MulticlassSSVM(learner=BCFW(window=7, seed=0))
        preds = []
        for i in range(40):
            x = {f"f{j}": float(v) for j, v in enumerate(rng.normal(size=3))}
            preds.append(m.predict_one(x))
            m.learn_one(x, int(rng.integers(0, 3)))
        w = m._learner.W
        return preds, w.E.copy(), w.T.copy(), w.B.copy()

    a = run()
    monkeypatch.setattr(K, "victim_field", lambda victim: int(victim))   # -1: the int type, as before
    b = run()
    assert a[0] == b[0]
    for u, v in zip(a[1:], b[1:]):
        assert u.shape == v.shape and np.array_equal(u, v)


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_the_warm_up_without_a_file_compiles_what_a_stream_of_dicts_runs(task):
    """Regression (a new user's Kafka quickstart, r12): with nothing to read ahead (a Kafka
    source), the warm-up learned two one-feature dicts, so the kernels of the bulk dict path
    (``dict_row_csr``, dicts of ``FeatureIndex.BULK_MIN`` features or more: OCR letters have ~60)
    and of the engine's finiteness check after each record (``rows_finite``) compiled inside the
    stream, after "kernels ready", and the summary read 515 ex/s on a cold cache. The warm-up
    must call every kernel the first records of such a stream call (here: their dispatchers
    have a compiled signature after it, in a fresh process)."""
    r = _py("from streamssvm.cli.parser import build_parser\n"
            "from streamssvm.cli.options import make_model\n"
            "from streamssvm.cli.warmup import warm_model\n"
            "from streamssvm._kernels.multiclass import dict_row_csr, dict_rows_csr\n"
            "from streamssvm._kernels.finite import rows_finite\n"
            f"args = build_parser().parse_args(['run', '--source', 'kafka://127.0.0.1:1/t', '--task', '{task}'])\n"
            f"warm_model(lambda: make_model(args), '{task}')\n"
            "print(len(dict_row_csr.signatures), len(rows_finite.signatures), len(dict_rows_csr.signatures))")
    assert r.returncode == 0, r.stderr
    # multiclass: also the kernel of a micro-batch of known dicts (FeatureIndex.dict_csr)
    assert r.stdout.split() == ["1", "1", "1" if task == "multiclass" else "0"], r.stdout


def test_a_record_predicted_after_the_record_path_compiles_no_other_kernel():
    """A one-record ``predict`` after ``predict_learn_one`` runs (whose given-steps example holds
    an int victim) is a record for the learn kernel in the type its first use compiled
    (``NO_VICTIM``): no second learn_one_example specialization, no predict_batch. Asserted on the
    compiled signatures, never on timing."""
    r = _py("import numpy as np\n"
            "from streamssvm import MulticlassSSVM\n"
            "from streamssvm.learners import BCFW\n"
            "from streamssvm._kernels import bcfw as K\n"
            "rng = np.random.default_rng(5)\n"
            "m = MulticlassSSVM(learner=BCFW(seed=0))\n"
            "for i in range(30): m.predict_learn_one(rng.normal(size=4), i % 3)\n"
            "print(sorted(str(s[6].types[6]) for s in K.learn_one_example.signatures))\n"
            "m._learner.predict(np.array([0, 1]), np.array([0, 4], dtype=np.int32), np.arange(4, dtype=np.int32),\n"
            "                   rng.normal(size=4), np.array([0, 1]), 1)\n"
            "print(sorted(str(s[6].types[6]) for s in K.learn_one_example.signatures), len(K.predict_batch.signatures))\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["['int8']", "['int8'] 0"]


def test_a_first_use_compiles_no_emission_table_kernel_for_the_temperature_fit():
    """The temperature fit scores a record (before learning it) at the prediction weights: the
    first record, before any kernel exists, in numpy (``calibration.emission_scores_numpy``), the
    next ones in the record kernel (``learn_one_example``, slot ``SCORE``): no Python entry of
    ``marginals.emission_table`` compiles on a first use of any estimator with the default learner.
    Asserted on the entries made, never on timing."""
    r = _py("import streamssvm as ss\n"
            "from streamssvm._kernels import common, marginals as KM\n"
            "m = ss.SequenceTagger()\n"
            "m.learn_one([{'w=the': 1.0}, {'w=cat': 1.0}], ['D', 'N'])\n"
            "m.learn_one([{'w=a': 1.0}, {'w=dog': 1.0}, {'w=runs': 1.0}], ['D', 'N', 'V'])\n"
            "m.predict_one([{'w=the': 1.0}])\n"
            "c = ss.MulticlassSSVM(); c.learn_one({'a': 1.0}, 'x'); c.learn_one({'b': 1.0}, 'y'); c.predict_one({'a': 1.0})\n"
            "l = ss.MultiLabelSSVM(); l.learn_one({'a': 1.0}, {'x': True, 'y': False})\n"
            "l.learn_one({'b': 1.0}, {'x': False, 'y': True}); l.predict_one({'a': 1.0})\n"
            "print(m._calibrator().n_offered, KM.emission_table in common._ENTRIES)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "2 False"
