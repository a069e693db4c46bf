"""Crafted GDMM states (model files, checkpoints) are refused before anything is restored.

Every case below was accepted by ``GDMM.restore`` before the validator
(:mod:`streamssvm.learners._gdmm_state`) and then made the kernels read or write out of bounds,
crash, or learn / predict / certify garbage. ``python tests/test_gdmm_restore.py`` runs each
case with the validator disabled, one subprocess per case, and prints what happened (the
evidence quoted in the commit that added these tests).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.checkpoint import CheckpointError
from streamssvm.estimators.base import MODEL_KIND
from streamssvm.learners.gdmm import GDMM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEARNER = dict(lam=0.1, replay=1, seed=3, window=12)


def _chain_data(n=20, K=4, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n):
        L = int(rng.integers(2, 6))
        y = rng.integers(K, size=L)
        X.append([{f"f{j}": float(rng.normal() + 2.0 * (j == y[t])) for j in range(d)} for t in range(L)])
        Y.append([f"t{v}" for v in y])
    return X, Y


def _ml_data(n=30, K=4, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n):
        y = rng.random(K) < 0.5
        X.append({f"f{j}": float(rng.normal() + 2.0 * y[j % K]) for j in range(d)})
        Y.append({f"l{k}": bool(y[k]) for k in range(K)})
    return X, Y


def _chain_model(n=20):
    X, Y = _chain_data(n)
    m = ss.SequenceTagger(learner=GDMM(**LEARNER))
    for x, y in zip(X, Y):   # capacity 12 < 20: evictions leave dead slots in the store
        m.learn_one(x, y)
    assert np.count_nonzero(~m._learner.state()["ex_alive"]) == n - 12
    return m, X


def _ml_model(n=30):
    X, Y = _ml_data(n)
    m = ss.MultiLabelSSVM(learner=GDMM(lam=0.2, replay=1, seed=4, window=20), pairwise=True)
    for x, y in zip(X, Y):
        m.learn_one(x, y)
    m._learner.refine(2)
    return m, X


def _copy(st):
    return {k: (_copy(v) if isinstance(v, dict) else np.array(v) if isinstance(v, np.ndarray) else v)
            for k, v in st.items()}


def _set(st, path, fn):
    d = st
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = fn(d[path[-1]])


def _newest_token(st):
    """The first token of the newest example (held: the kernels visit it)."""
    return int(st["ex_ptr"][-2])


def _at(a, i, v):
    a = np.array(a)
    a.flat[i] = v
    return a


# name -> (the field the error must name, a function that crafts the state in place)
CHAIN_CASES = {
    "ex_ptr_past_tokens": ("ex_ptr", lambda st: _set(st, ["ex_ptr"], lambda a: _at(a, -1, a[-1] + 10_000_000))),
    "ex_ptr_decreasing": ("ex_ptr", lambda st: _set(st, ["ex_ptr"], lambda a: _at(a, -2, a[-1] + 1))),
    "tok_ptr_past_features": ("tok_ptr", lambda st: _set(st, ["tok_ptr"], lambda a: _at(a, -2, a[-1] + 10_000_000))),
    "fidx_past_rows": ("fidx", lambda st: _set(st, ["fidx"], lambda a: _at(a, -1, 10_000_000))),
    "fidx_negative": ("fidx", lambda st: _set(st, ["fidx"], lambda a: _at(a, -1, -50))),
    "fval_nan": ("fval", lambda st: _set(st, ["fval"], lambda a: _at(a, -1, np.nan))),
    "ytrue_past_labels": ("ytrue", lambda st: _set(st, ["ytrue"], lambda a: _at(a, -1, 10_000_000))),
    "U_lab_past_labels": ("U.lab", lambda st: _set(st, ["U", "lab"], lambda a: _at(a, a.shape[1] * (a.shape[0] - 1) + 1,
                                                                                  10_000_000)) or
                          _set(st, ["U", "cnt"], lambda c: _at(c, -1, 2))),
    "U_cnt_past_capacity": ("U.cnt", lambda st: _set(st, ["U", "cnt"], lambda c: _at(c, -1, 10_000))),
    "U_cnt_zero": ("U.cnt", lambda st: _set(st, ["U", "cnt"], lambda c: _at(c, -1, 0))),
    "U_mu_off_simplex": ("U.mu", lambda st: _set(st, ["U", "mu"], lambda a: a * 3.0)),
    "B_a_past_labels": ("B.a", lambda st: _set(st, ["B", "a"], lambda a: _at(a, _newest_token(st) * a.shape[1],
                                                                            10_000_000))),
    "B_cnt_past_capacity": ("B.cnt", lambda st: _set(st, ["B", "cnt"], lambda c: _at(c, _newest_token(st), 10_000))),
    "B_cnt_at_last_token": ("B.cnt", lambda st: _set(st, ["B", "cnt"], lambda c: _at(c, -1, 1))),
    "order_past_examples": ("order", lambda st: _set(st, ["order"], lambda a: _at(a, 0, 10_000_000))),
    "order_dead_example": ("order", lambda st: _set(st, ["order"], lambda a: _at(a, 0, int(np.flatnonzero(~st["ex_alive"])[0])))),
    "first_flags": ("first", lambda st: _set(st, ["first"], lambda a: np.zeros_like(a))),
    "xsq_zero": ("xsq", lambda st: _set(st, ["xsq"], lambda a: np.zeros_like(a))),
    "linv": ("linv", lambda st: _set(st, ["linv"], lambda a: a * 0.0 + 1e6)),
    "K_past_capacity": ("K", lambda st: _set(st, ["K"], lambda k: 10_000)),
    "C_too_small": ("C", lambda st: _set(st, ["C"], lambda C: C[:1, :1])),
    "C_negative_cost": ("C", lambda st: _set(st, ["C"], lambda C: -C)),
    "T_shape": ("T", lambda st: _set(st, ["T"], lambda T: np.zeros((1, 1)))),
    "acap_mismatch": ("U.lab", lambda st: _set(st, ["acap"], lambda a: 2 * a)),
    "d_past_rows": ("d", lambda st: _set(st, ["d"], lambda d: 10_000_000)),
    "object_array": ("fval", lambda st: _set(st, ["fval"], lambda a: np.array([None] * a.size, dtype=object))),
    "ml_state_for_chain": ("ml", lambda st: st.update(ml=1)),
    "rng": ("rng", lambda st: _set(st, ["rng"], lambda r: {"state": "x", "inc": 1, "has_uint32": 0, "uinteger": 0})),
}

def _last_row(a):
    """Flat index of the first entry of the last row (the newest, held example)."""
    return a.size - int(np.prod(a.shape[1:]))


ML_CASES = {
    "x_ptr_past_features": ("x_ptr", lambda st: _set(st, ["x_ptr"], lambda a: _at(a, -2, a[-1] + 10_000_000))),
    "x_ptr_decreasing": ("x_ptr", lambda st: _set(st, ["x_ptr"], lambda a: _at(a, 1, a[-1] + 1))),
    "fidx_negative": ("fidx", lambda st: _set(st, ["fidx"], lambda a: _at(a, -1, -3))),
    "fidx_past_rows": ("fidx", lambda st: _set(st, ["fidx"], lambda a: _at(a, -1, 10_000_000))),
    "fk_past_labels": ("fk", lambda st: _set(st, ["fk"], lambda a: _at(a, _last_row(a), 10_000_000)) or
                       _set(st, ["fcnt"], lambda c: _at(c, -1, max(int(c[-1]), 1)))),
    "fk_not_below_fl": ("fk", lambda st: _set(st, ["fk"], lambda a: _at(a, _last_row(a), 3)) or
                        _set(st, ["fl"], lambda a: _at(a, _last_row(a), 1)) or
                        _set(st, ["fcnt"], lambda c: _at(c, -1, max(int(c[-1]), 1)))),
    "fcnt_past_capacity": ("fcnt", lambda st: _set(st, ["fcnt"], lambda c: _at(c, -1, 10_000))),
    "inactive_factors_unknown": ("inactive_factors", lambda st: st.update(inactive_factors="nonsense")),
    "fz_outside_tetrahedron": ("fz", lambda st: _set(st, ["fz"], lambda a: a + 5.0) or
                               _set(st, ["fcnt"], lambda c: _at(c, -1, max(int(c[-1]), 1)))),
    "Y_not_binary": ("Y", lambda st: _set(st, ["Y"], lambda a: _at(a, _last_row(a), 7.0))),
    "u_outside_unit": ("u", lambda st: _set(st, ["u"], lambda a: _at(a, _last_row(a), -4.0))),
    "Ki_zero": ("Ki", lambda st: _set(st, ["Ki"], lambda a: a * 0.0)),
    "xsq_nan": ("xsq", lambda st: _set(st, ["xsq"], lambda a: _at(a, -1, np.nan))),
    "rows_short": ("alive", lambda st: _set(st, ["alive"], lambda a: a[:-1])),
    "order_past_examples": ("order", lambda st: _set(st, ["order"], lambda a: _at(a, 0, 10_000_000))),
    "K_past_capacity": ("K", lambda st: _set(st, ["K"], lambda k: int(st["Kc"]) + 1)),
    "chain_state_for_ml": ("ml", lambda st: st.pop("ml")),
}


@pytest.fixture(scope="module")
def chain():
    return _chain_model()


@pytest.fixture(scope="module")
def multilabel():
    return _ml_model()


def _restore(model, st):
    r = GDMM(**model._learner._get_params())
    r.restore(model._structure, model._labels.labels, st)
    return r


def _assert_same_state(a, b, where="state"):
    """Equal keys, and equal values with equal dtypes (arrays bit for bit), recursively."""
    assert a.keys() == b.keys(), where
    for k in a:
        if isinstance(a[k], dict):
            _assert_same_state(a[k], b[k], f"{where}.{k}")
        else:
            x, y = np.asarray(a[k]), np.asarray(b[k])
            assert x.dtype == y.dtype and np.array_equal(x, y), f"{where}.{k}"


CASES = [("chain", c) for c in sorted(CHAIN_CASES)] + [("ml", c) for c in sorted(ML_CASES)]


@pytest.mark.parametrize("kind,case", CASES, ids=[f"{k}-{c}" for k, c in CASES])
def test_crafted_state_is_refused_before_anything_changes(chain, multilabel, kind, case):
    m, _ = chain if kind == "chain" else multilabel
    field, craft = (CHAIN_CASES if kind == "chain" else ML_CASES)[case]
    st = _copy(m._learner.state())
    craft(st)
    r = GDMM(**m._learner._get_params())
    r.bind(m._structure, m._labels.labels)
    r.ensure(m._features.dim, m._labels.labels)
    before = r.state()
    with pytest.raises(ValueError, match=f"invalid GDMM state: {field}"):
        r.restore(m._structure, m._labels.labels, st)
    _assert_same_state(before, r.state())


def test_valid_states_round_trip_bit_identically(chain, multilabel):
    for m, X in (chain, multilabel):
        st = m._learner.state()
        r = _restore(m, _copy(st))
        _assert_same_state(st, r.state())
        m._learner.refine(1)
        r.refine(1)
        assert np.array_equal(m._learner.state()["T"], r.state()["T"])


@pytest.mark.parametrize("kw", [dict(transitions=False), dict(loss=np.array([[0, 1, 2, 2], [1, 0, 2, 2], [2, 2, 0, 1],
                                                                        [2, 2, 1, 0]], dtype=float))],
                         ids=["no_transitions", "cost_matrix"])
def test_other_chain_models_round_trip(kw):
    """Without transitions (no first / last flags) and with a user cost matrix (checked against
    the structure's): valid states restore and continue identically."""
    X, Y = _chain_data(n=16)
    m = ss.SequenceTagger(learner=GDMM(**LEARNER), labels=["t0", "t1", "t2", "t3"], **kw)
    for x, y in zip(X, Y):
        m.learn_one(x, y)
    r = _restore(m, _copy(m._learner.state()))
    m._learner.refine(1)
    r.refine(1)
    me, re_ = m._learner._engine, r._engine
    assert np.array_equal(me.Wu, re_.Wu) and np.array_equal(me.table.T, re_.table.T)
    st = _copy(m._learner.state())
    st["C"] = st["C"] * 2.0   # a cost the structure does not have
    with pytest.raises(ValueError, match="invalid GDMM state: C"):
        _restore(m, st)


def test_chain_state_after_compaction_and_label_growth_validates():
    """A long window with evictions (compaction renumbers slots) and labels arriving late."""
    from streamssvm.learners._gdmm_state import validate_gdmm_state
    X, Y = _chain_data(n=400, K=6, seed=5)
    order = np.argsort([max(int(v[1:]) for v in y) for y in Y], kind="stable")
    m = ss.SequenceTagger(learner=GDMM(lam=0.05, replay=2, window=150, seed=1, active_cap=2))
    for i in order:
        m.learn_one(X[i], Y[i])
    m._learner.refine(3)
    lr = m._learner._engine
    assert lr._n_tok > 1024 or lr._acap > 2   # the store was compacted or the active sets grew
    validate_gdmm_state(m._learner.state(), m._structure, m._labels.labels)


def test_window_keeps_its_fifo_order_through_compaction():
    """After a compaction (more than 1024 tokens, over half of them dead) the eviction order
    still lists every held example, so the window keeps evicting the oldest."""
    X, Y = _chain_data(n=400, K=6, seed=5)
    m = ss.SequenceTagger(learner=GDMM(lam=0.05, replay=0, window=150, seed=1))
    compacted = False
    for x, y in zip(X, Y):
        n_ex = m._learner._engine._n_ex if m._learner is not None else 0
        m.learn_one(x, y)
        compacted |= m._learner._engine._n_ex < n_ex
    lr = m._learner._engine
    assert compacted
    assert np.array_equal(np.sort(lr._order), np.flatnonzero(lr._ex_alive[:lr._n_ex]))


def test_order_written_by_the_old_compaction_is_completed_on_load(tmp_path):
    """Files written before the compaction fix list only the examples that arrived after the last
    compaction: loading puts the other held examples first (they are older), so the window
    evicts them before the listed ones instead of never."""
    from streamssvm import checkpoint
    X, Y = _chain_data(n=60, K=5, seed=3)
    m = ss.SequenceTagger(learner=GDMM(lam=0.05, replay=0, window=40, seed=1))
    for x, y in zip(X, Y):
        m.learn_one(x, y)
    path = tmp_path / "tagger"
    m.save(path)
    st, meta = checkpoint.load_state(path, kind=MODEL_KIND)
    full = [int(e) for e in st["learner"]["order"]]
    st["learner"]["order"] = np.asarray(full[-5:], dtype=np.int64)   # what the old _compact left
    old = tmp_path / "old"
    checkpoint.save_state(old, st, kind=MODEL_KIND, meta=meta)
    lr = ss.load(old)._learner._engine
    assert lr._order[-5:] == full[-5:]
    assert sorted(lr._order) == sorted(full) and lr._order[:-5] == sorted(full[:-5])


def test_crafted_model_file_is_refused_by_load(chain, tmp_path):
    """The CLI / ``ss.load`` path: a model file whose GDMM state has a feature id past the
    weight rows is a CheckpointError naming the field, not an out-of-bounds write."""
    from streamssvm import checkpoint
    m, X = chain
    path = tmp_path / "tagger"
    m.save(path)
    st, meta = checkpoint.load_state(path, kind=MODEL_KIND)
    st["learner"]["fidx"][-1] = 10_000_000
    bad = tmp_path / "bad"
    checkpoint.save_state(bad, st, kind=MODEL_KIND, meta=meta)
    with pytest.raises(CheckpointError, match="invalid GDMM state: fidx"):
        ss.load(bad)
    assert ss.load(path).predict_many(X) == m.predict_many(X)


def test_cli_refuses_a_crafted_gdmm_model_file(tmp_path):
    """``streamssvm run --model`` on a GDMM tagger file whose held example names a feature row
    far past the weights: refused with the field named, not an out-of-bounds write (before the
    validator the continued training wrote Wu[2 + fidx] out of bounds). The CLI reports a
    CheckpointError with a traceback (exit 1), not as ``error: ...`` (exit 2)."""
    from streamssvm import checkpoint
    conll = tmp_path / "w.conll"
    conll.write_text("The DT\ncat NN\nsleeps VBZ\n\nA DT\ndog NN\nruns VBZ\n\n" * 15)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "streamssvm", *map(str, args)], capture_output=True, text=True,
                              timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    good = tmp_path / "m.ssvm"
    r = cli("run", "--source", f"file://{conll}", "--task", "sequence", "--learner", "gdmm", "--lam", "0.1",
            "--save", good, "--no-progress")
    assert r.returncode == 0, r.stderr
    st, meta = checkpoint.load_state(good, kind=MODEL_KIND)
    st["learner"]["fidx"][-1] = 10_000_000
    bad = tmp_path / "bad.ssvm"
    checkpoint.save_state(bad, st, kind=MODEL_KIND, meta=meta)
    r = cli("run", "--source", f"file://{conll}", "--task", "sequence", "--model", bad, "--no-progress")
    # a refused model file is a user error (exit 2, one line), not a traceback
    assert r.returncode == 2 and "invalid GDMM state: fidx" in r.stderr, (r.returncode, r.stderr[-500:])
    assert "Traceback" not in r.stderr and r.stderr.lstrip().splitlines()[-1].startswith("error: "), r.stderr[-500:]
    r = cli("run", "--source", f"file://{conll}", "--task", "sequence", "--model", good, "--no-progress")
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------------- evidence (not a test)
_CHILD = r"""
import json, sys, numpy as np
sys.path.insert(0, "tests")
import test_gdmm_restore as t
import streamssvm.learners._gdmm_state as V
kind, case = sys.argv[1], sys.argv[2]
m, X = t._chain_model() if kind == "chain" else t._ml_model()
st = t._copy(m._learner.state())
if case != "valid":
    (t.CHAIN_CASES if kind == "chain" else t.ML_CASES)[case][1](st)
V.validate_gdmm_state = lambda *a: None          # the restore as it was before the validator
m._learner = t._restore(m, st)
out = {}
step = "predict"
try:
    p = [m.predict_one(x) for x in X[:5]]
    step = "certificate"
    c = m._learner.certificate()
    out["certificate"] = {"gap": c.gap, "primal": c.primal, "dual": c.dual}
    step = "refine"
    m._learner.refine(1)
    step = "learn"
    for x, y in zip(*(t._chain_data(6, seed=9) if kind == "chain" else t._ml_data(6, seed=9))):
        m.learn_one(x, y)
    step = "refine"
    m._learner.refine(1)
    c = m._learner.certificate()
    out["certificate_after"] = {"gap": round(c.gap, 6), "primal": round(c.primal, 6), "dual": round(c.dual, 6)}
    out["finite_weights"] = bool(all(np.isfinite(np.asarray(v)).all() for k, v in m._learner.state().items()
                                     if isinstance(v, np.ndarray) and v.dtype.kind == "f"))
except Exception as e:
    out["error"] = f"{step}: {type(e).__name__}: {str(e)[:120]}"
print(json.dumps(out))
"""


def _evidence(kinds=("chain", "ml")):
    rows = []
    for kind, cases in (("chain", CHAIN_CASES), ("ml", ML_CASES)):
        if kind not in kinds:
            continue
        for case in ["valid"] + sorted(cases):
            p = subprocess.run([sys.executable, "-c", _CHILD, kind, case], capture_output=True, text=True,
                               timeout=600)
            if p.returncode < 0:
                res = f"killed by signal {-p.returncode}"
            elif p.returncode:
                res = "exit %d: %s" % (p.returncode, (p.stderr.strip().splitlines() or [""])[-1][:160])
            else:
                res = p.stdout.strip().splitlines()[-1]
            rows.append((kind, case, res))
            print(f"{kind:5s} {case:28s} {res}", flush=True)
    return rows


if __name__ == "__main__":
    # python tests/test_gdmm_restore.py [out.json [chain,ml]]
    rows = _evidence(tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else ("chain", "ml"))
    json.dump(rows, sys.stdout if len(sys.argv) < 2 else open(sys.argv[1], "w"), indent=1)
