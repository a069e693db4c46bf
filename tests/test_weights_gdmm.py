"""Example weights with GDMM (chains and pairwise multi-label): the exact weighted dual.

The objective is lam/2 ||w||^2 + (1/N) sum_i c_i H_i(w), N = sum_i c_i (as BCFW's). GDMM keeps
one factorwise dual block per example, so weight 2 is the *objective* of the example held twice,
not its trajectory: the checks compare the certified brackets reached after many passes. The
certificate's primal is checked against a brute-force weighted primal (enumeration of every
labeling) at the learner's weights, and its gap against the copies' optimum.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.errors import CheckpointError
from streamssvm.learners import GDMM
from streamssvm.learners._gdmm_state import validate_gdmm_state


def _same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return type(a) is type(b) and a == b


def _chains(n=8, seed=4):
    rng = np.random.default_rng(seed)
    tags = ["D", "N", "V"]
    rows = []
    for i in range(n):
        L = 1 + i % 3
        t = [tags[int(v)] for v in rng.integers(3, size=L)]
        rows.append(([{f"w={s}{int(rng.integers(2))}": 1.0, "b": float(rng.normal())} for s in t], t))
    return rows


def _ml_rows(n=10, seed=5):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        x = rng.normal(size=3)
        rows.append((x, {"red": bool(x[0] > 0), "blue": bool(x[1] + 0.3 * rng.normal() > 0),
                         "round": bool(x[0] + x[2] > 0)}))
    return rows


def _tagger(**kw):
    return ss.SequenceTagger(learner=GDMM(**{"lam": 0.1, "seed": 2, "replay": 2, "averaging": False, **kw}))


def _ml(**kw):
    return ss.MultiLabelSSVM(learner=GDMM(**{"lam": 0.1, "seed": 2, "replay": 2, **kw}), pairwise=True,
                             scale=False, normalize=False)


def _weighted_vs_copies(make, rows, ws, passes):
    a, b = make(), make()
    for (x, y), c in zip(rows, ws):
        a.learn_one(x, y, w=c)
        for _ in range(int(round(c / min(ws)))):
            b.learn_one(x, y)
    a.bound_learner.refine(passes=passes)
    b.bound_learner.refine(passes=passes)
    return a, b


# ---------------------------------------------------------------------------- brute force
def _chain_brute_primal(eng, lam):
    """lam/2 ||w||^2 + (1/N) sum_i c_i max_y [Delta_i(y) + <w, Psi_i(y) - Psi_i(y_i)>] by
    enumerating every labeling of every held chain, at the weights that predict."""
    Wu, T = eng._pred_weights()
    K = eng.K
    s = eng._s()
    total, N = 0.0, 0.0
    for e in eng.alive_slots():
        a, b = int(eng._ex_ptr[e]), int(eng._ex_ptr[e + 1])
        L = b - a
        S = np.zeros((L, K))
        for t in range(a, b):
            row = np.zeros(K)
            if eng._first[t]:
                row += Wu[0, :K]
            if eng._last[t]:
                row += Wu[1, :K]
            for p in range(eng._tok_ptr[t], eng._tok_ptr[t + 1]):
                row += eng._fval[p] * Wu[2 + eng._fidx[p], :K]
            S[t - a] = s * row
        yt = eng._ytrue[a:b]

        def score(y):
            v = sum(S[i, y[i]] for i in range(L))
            return v + sum(s * T[y[i], y[i + 1]] for i in range(L - 1))
        best = max(score(y) + sum(eng._C[yt[i], y[i]] for i in range(L)) / L
                   for y in itertools.product(range(K), repeat=L))
        c = float(eng._cw[a])
        total += c * (best - score(yt))
        N += c
    reg = 0.5 * lam * s * s * (float(np.vdot(Wu, Wu)) + float(np.vdot(T, T)))
    return reg + total / N


def _ml_brute_primal(eng, lam):
    K, s = eng.K, eng.s()
    total, N = 0.0, 0.0
    for i in eng.alive_slots():
        x = np.zeros(eng.E.shape[0])
        np.add.at(x, eng.fidx[eng.x_ptr[i]:eng.x_ptr[i + 1]], eng.fval[eng.x_ptr[i]:eng.x_ptr[i + 1]])
        sc = s * (x @ eng.E[:, :K])
        ybar = eng.Y[i, :K]

        def score(y):
            y = np.asarray(y, dtype=float)
            return float(sc @ y) + s * float(y @ np.triu(eng.T[:K, :K], 1) @ y)
        best = max(score(y) + float(np.abs(np.asarray(y) - ybar).sum()) / eng.Ki[i]
                   for y in itertools.product((0, 1), repeat=K))
        total += eng.cw[i] * (best - score(ybar))
        N += eng.cw[i]
    reg = 0.5 * lam * s * s * (float(np.vdot(eng.E[:, :K], eng.E[:, :K]))
                               + float(np.sum(np.triu(eng.T[:K, :K], 1) ** 2)))
    return reg + total / N


# ---------------------------------------------------------------------------- chains
@pytest.mark.parametrize("solver", ["active_qp", "bcfw"])
def test_chain_weight_two_is_the_example_twice_at_the_optimum(solver):
    rows = _chains()
    ws = [[1.0, 2.0, 3.0][i % 3] for i in range(len(rows))]
    a, b = _weighted_vs_copies(lambda: _tagger(solver=solver), rows, ws, 1500)
    ca, cb = a.certificate(), b.certificate()
    assert ca.gap < 2e-3 and cb.gap < 2e-3
    assert ca.primal >= ca.dual - 1e-12
    # the same objective: each primal above the other's certified dual
    assert cb.dual - 1e-9 <= ca.primal and ca.dual - 1e-9 <= cb.primal
    assert abs(ca.primal - cb.primal) < 2e-3
    assert a.bound_learner._engine.weight_sum() == sum(ws)


def test_chain_weighted_certificate_is_the_brute_force_weighted_primal():
    rows = _chains(n=7, seed=9)
    ws = [[0.5, 2.0, 1.0, 3.5][i % 4] for i in range(len(rows))]
    m = _tagger(averaging=True)
    for (x, y), c in zip(rows, ws):
        m.learn_one(x, y, w=c)
    for passes in (0, 3, 200):
        m.bound_learner.refine(passes=passes)
        c = m.certificate()
        eng = m.bound_learner._engine
        assert c.primal == pytest.approx(_chain_brute_primal(eng, 0.1), rel=1e-10, abs=1e-12)
        assert c.raw_gap >= -1e-12 and c.gap == max(c.raw_gap, 0.0)
    # the gap bounds the suboptimality: the copies' certified dual is below our primal
    b = _tagger()
    for (x, y), k in zip(rows, ws):
        for _ in range(int(k * 2)):
            b.learn_one(x, y)
    b.bound_learner.refine(passes=1500)
    assert b.certificate().dual - 1e-9 <= c.primal
    assert c.dual - 1e-9 <= b.certificate().primal


def test_chain_unit_weights_and_weights_with_evictions():
    """Weights of 1 take the unweighted path (state bit-identical, no ex_weight saved); a window
    evicts weighted examples and N follows the held ones."""
    rows = _chains(n=12, seed=3)
    a, b = _tagger(), _tagger()
    for x, y in rows:
        a.learn_one(x, y)
        b.learn_one(x, y, w=1.0)
    assert _same(a.bound_learner.state(), b.bound_learner.state())
    assert "ex_weight" not in a.bound_learner.state()
    m = _tagger(window=4)
    ws = [1.0 + (i % 3) for i in range(len(rows))]
    for (x, y), c in zip(rows, ws):
        m.learn_one(x, y, w=c)
    eng = m.bound_learner._engine
    assert eng.n_blocks == 4 and eng.weight_sum() == sum(ws[-4:])
    m.bound_learner.refine(passes=50)
    c = m.certificate()
    assert c.primal == pytest.approx(_chain_brute_primal(eng, 0.1), rel=1e-10)
    assert c.raw_gap >= -1e-12


def test_chain_weights_survive_save_load_and_old_states_load_with_weight_one(tmp_path):
    rows = _chains(n=9, seed=6)
    ws = [[1.0, 0.25, 4.0][i % 3] for i in range(len(rows))]
    m = _tagger()
    for (x, y), c in zip(rows[:6], ws[:6]):
        m.learn_one(x, y, w=c)
    st = m.bound_learner.state()
    assert np.array_equal(st["ex_weight"], ws[:6])
    p = tmp_path / "m.ssvm"
    m.save(p)
    m2 = ss.SequenceTagger.load(p)
    for (x, y), c in zip(rows[6:], ws[6:]):
        m.learn_one(x, y, w=c)
        m2.learn_one(x, y, w=c)
    m.bound_learner.refine(passes=3)
    m2.bound_learner.refine(passes=3)
    assert _same(m.bound_learner.state(), m2.bound_learner.state())
    # a crafted weight is refused
    lr = m.bound_learner
    for bad in (np.zeros(len(st["ex_weight"])), np.full(len(st["ex_weight"]), np.nan), np.ones(2)):
        st2 = dict(st, ex_weight=bad)
        with pytest.raises(ValueError, match="ex_weight"):
            validate_gdmm_state(st2, m._structure, m._labels.labels)
    # an unweighted state (as every file written before weights existed) loads with c = 1
    u = _tagger()
    for x, y in rows:
        u.learn_one(x, y)
    stu = u.bound_learner.state()
    assert "ex_weight" not in stu
    u2 = _tagger()
    u2.learn_one(*rows[0])
    u2.bound_learner.restore(u._structure, u._labels.labels, stu)
    assert u2.bound_learner._engine.weight_sum() == len(rows)
    assert _same(u2.bound_learner.state(), stu)
    assert lr is m.bound_learner


def test_bad_weights_are_refused_by_the_learner():
    m = _tagger()
    m.learn_one(*_chains()[0])
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="weights"):
            m.bound_learner.learn(np.array([0, 1]), np.array([0]), np.array([1.0]), np.array([0]), weight=bad)


# ---------------------------------------------------------------------------- pairwise multi-label
def test_multilabel_weight_two_is_the_example_twice_at_the_optimum():
    rows = _ml_rows()
    ws = [[1.0, 2.0, 0.5][i % 3] for i in range(len(rows))]
    a, b = _weighted_vs_copies(_ml, rows, ws, 1500)
    ca, cb = a.certificate(), b.certificate()
    assert ca.exact and cb.exact
    assert ca.gap < 5e-3 and cb.gap < 5e-3
    assert cb.dual - 1e-9 <= ca.primal and ca.dual - 1e-9 <= cb.primal
    assert a.bound_learner._engine.weight_sum() == sum(ws)


def test_multilabel_weighted_certificate_is_the_brute_force_weighted_primal(tmp_path):
    rows = _ml_rows(n=9, seed=8)
    ws = [[0.5, 3.0, 1.0][i % 3] for i in range(len(rows))]
    m = _ml(window=6)
    for (x, y), c in zip(rows, ws):
        m.learn_one(x, y, w=c)
    eng = m.bound_learner._engine
    assert eng.weight_sum() == sum(ws[-6:])
    for passes in (0, 5, 100):
        m.bound_learner.refine(passes=passes)
        c = m.certificate()
        assert c.primal == pytest.approx(_ml_brute_primal(eng, 0.1), rel=1e-10, abs=1e-12)
        assert c.raw_gap >= -1e-12
    st = m.bound_learner.state()
    assert "ex_weight" in st
    p = tmp_path / "ml.ssvm"
    m.save(p)
    m2 = ss.MultiLabelSSVM.load(p)
    x, y = rows[0]
    m.learn_one(x, y, w=2.0)
    m2.learn_one(x, y, w=2.0)
    assert _same(m.bound_learner.state(), m2.bound_learner.state())
    u = _ml()
    for x, y in rows:
        u.learn_one(x, y, w=1.0)
    assert "ex_weight" not in u.bound_learner.state()
    with pytest.raises((ValueError, CheckpointError)):
        validate_gdmm_state(dict(st, ex_weight=-np.ones(len(st["alive"]))), m._structure, m._labels.labels)


def test_estimators_take_weights_with_gdmm():
    t = _tagger()
    rows = _chains()
    t.learn_many([x for x, _ in rows], [y for _, y in rows], w=[1.0, 2.0, 0.0, 1.5, 1.0, 1.0, 3.0, 0.5])
    assert t.bound_learner.n_blocks == len(rows) - 1
    m = _ml()
    r = _ml_rows()
    m.learn_many([x for x, _ in r], [y for _, y in r], w=[2.0] * len(r))
    assert m.bound_learner._engine.weight_sum() == 2.0 * len(r)
