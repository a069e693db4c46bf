"""n-best outputs and constrained decoding, against brute-force enumeration."""
import itertools

import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels.chain import chain_viterbi
from streamssvm.nbest import chain_nbest, hierarchy_nbest, independent_nbest, pairwise_nbest


def _chain_score(S, T, B, y, use_trans=True):
    v = sum(S[t, y[t]] for t in range(len(y)))
    if use_trans:
        v += sum(T[y[t - 1], y[t]] for t in range(1, len(y))) + B[0, y[0]] + B[1, y[-1]]
    return v


def _brute_chain(S, T, B, allowed=None, forbid=None, use_trans=True):
    L, K = S.shape
    out = []
    for y in itertools.product(range(K), repeat=L):
        if allowed is not None and not all(allowed[t, y[t]] for t in range(L)):
            continue
        if forbid is not None and any(forbid[y[t - 1], y[t]] for t in range(1, L)):
            continue
        out.append((_chain_score(S, T, B, y, use_trans), y))
    return sorted(out, key=lambda p: -p[0])


def _check_against(items, brute, k, score_of):
    """items (labeling, score) best first == the brute-force top k (scores; each labeling's own
    score; distinct labelings)."""
    assert len(items) == min(k, len(brute))
    got = np.array([s for _, s in items])
    want = np.array([s for s, _ in brute[:k]])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    for y, s in items:
        assert abs(score_of(y) - s) < 1e-9
    assert len({tuple(np.asarray(y).tolist()) for y, _ in items}) == len(items)


@pytest.mark.parametrize("seed", range(12))
def test_chain_kbest_matches_enumeration(seed):
    rng = np.random.default_rng(seed)
    L, K = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    ties = seed % 3 == 0   # small integer scores: many exact ties
    draw = (lambda *sh: rng.integers(-2, 3, size=sh).astype(float)) if ties else (lambda *sh: rng.normal(size=sh))
    S, T, B = draw(L, K), draw(K, K), draw(2, K)
    use_trans = seed % 4 != 1
    brute = _brute_chain(S, T, B, use_trans=use_trans)
    for k in (1, 3, 7, K ** L + 2):
        items = chain_nbest(S, T if use_trans else np.zeros((K, K)), B, use_trans, k)
        _check_against(items, brute, k, lambda y: _chain_score(S, T, B, y, use_trans))
        again = chain_nbest(S, T if use_trans else np.zeros((K, K)), B, use_trans, k)   # deterministic
        assert [(y.tolist(), s) for y, s in items] == [(y.tolist(), s) for y, s in again]


@pytest.mark.parametrize("seed", range(20))
def test_chain_first_is_viterbi_ties_included(seed):
    rng = np.random.default_rng(100 + seed)
    L, K = int(rng.integers(1, 7)), int(rng.integers(1, 6))
    S = rng.integers(-1, 2, size=(L, K)).astype(float)
    T = rng.integers(-1, 2, size=(K, K)).astype(float)
    B = rng.integers(-1, 2, size=(2, K)).astype(float)
    out = np.zeros(L, np.int32)
    best = chain_viterbi(S, (T, B), 1.0, L, K, True, np.zeros(L, np.int32), np.zeros((K, K)), 0.0,
                         (np.zeros((L, K)), np.zeros((L, K), np.int32)), out, (0, 0))
    (y, s), = chain_nbest(S, T, B, True, 1)
    assert y.tolist() == out.tolist() and s == best


@pytest.mark.parametrize("seed", range(10))
def test_constrained_chain_matches_constrained_enumeration(seed):
    rng = np.random.default_rng(200 + seed)
    L, K = int(rng.integers(1, 5)), int(rng.integers(2, 5))
    S, T, B = rng.normal(size=(L, K)), rng.normal(size=(K, K)), rng.normal(size=(2, K))
    allowed = (rng.random((L, K)) < 0.7).astype(np.uint8)
    forbid = (rng.random((K, K)) < 0.3).astype(np.uint8)
    brute = _brute_chain(S, T, B, allowed, forbid)
    for k in (1, 4, 50):
        items = chain_nbest(S, T, B, True, k, allowed, forbid)
        _check_against(items, brute, k, lambda y: _chain_score(S, T, B, y))
        for y, _ in items:
            assert all(allowed[t, y[t]] for t in range(L))
            assert not any(forbid[y[t - 1], y[t]] for t in range(1, L))


def _brute_sets(K, score, fixed=None):
    out = []
    for bits in itertools.product((0, 1), repeat=K):
        if fixed is not None and any(f >= 0 and f != b for f, b in zip(fixed, bits)):
            continue
        out.append((score(np.array(bits)), bits))
    return sorted(out, key=lambda p: -p[0])


@pytest.mark.parametrize("seed", range(10))
def test_independent_multilabel_nbest(seed):
    rng = np.random.default_rng(300 + seed)
    K = int(rng.integers(1, 8))
    s = rng.integers(-3, 4, size=K).astype(float) if seed % 2 else rng.normal(size=K)
    fixed = rng.integers(-1, 2, size=K) if seed % 3 == 0 else None
    score = lambda y: float(np.sum(s[np.asarray(y) == 1]))  # noqa: E731
    brute = _brute_sets(K, score, fixed)
    for k in (1, 2, 5, 2 ** K + 3):
        _check_against(independent_nbest(s, k, fixed), brute, k, score)


@pytest.mark.parametrize("seed", range(6))
def test_pairwise_and_hierarchy_nbest(seed):
    rng = np.random.default_rng(400 + seed)
    K = int(rng.integers(2, 7))
    s, P = rng.normal(size=K), rng.normal(size=(K, K))
    fixed = rng.integers(-1, 2, size=K) if seed % 2 else None

    def pscore(y):
        y = np.asarray(y)
        return float(s @ y + sum(P[a, b] * y[a] * y[b] for a in range(K) for b in range(a + 1, K)))
    _check_against(pairwise_nbest(s, P, 6, fixed), _brute_sets(K, pscore, fixed), 6, pscore)

    from streamssvm.structures import Hierarchy
    h = Hierarchy({"a": "x", "b": "x", "c": "y", "d": ["y", "x"], "x": "r", "y": "r"})
    sn = rng.normal(size=len(h.nodes))

    def hscore(bits):
        on = h.closure([i for i, b in enumerate(bits) if b])
        return float(sn[on].sum()) if len(on) else 0.0
    hfixed = rng.integers(-1, 2, size=h.n_leaves) if seed % 2 else None
    _check_against(hierarchy_nbest(sn, h, 5, hfixed), _brute_sets(h.n_leaves, hscore, hfixed), 5, hscore)


def test_pairwise_refuses_above_the_enumeration_limit():
    with pytest.raises(ValueError, match="up to 16"):
        pairwise_nbest(np.zeros(17), np.zeros((17, 17)), 3)


# ------------------------------------------------------------------ estimators

def _sentences(n, seed=0):
    rng = np.random.default_rng(seed)
    words = {"DET": ["the", "a"], "NOUN": ["dog", "cat", "run"], "VERB": ["runs", "run", "sleeps"]}
    X, Y = [], []
    for _ in range(n):
        tags = ["DET", "NOUN", "VERB"][:int(rng.integers(1, 4))]
        X.append([{"w=" + str(rng.choice(words[t])): 1.0, "len": 0.5} for t in tags])
        Y.append(tags)
    return X, Y


SEQ_LEARNERS = [ss.learners.BCFW(lam=0.05, seed=0), ss.learners.BCFW(lam=0.05, seed=0, averaging=True),
                ss.learners.SGD(lam=0.05, seed=0), ss.learners.SGD(lam=0.05, seed=0, averaging="uniform"),
                ss.learners.CuttingPlane(lam=0.05), ss.learners.BMRM(lam=0.05), ss.learners.GDMM(lam=0.05, seed=0)]


@pytest.mark.parametrize("learner", SEQ_LEARNERS, ids=lambda lr: repr(lr)[:40])
def test_sequence_tagger_nbest(learner):
    X, Y = _sentences(40)
    m = ss.SequenceTagger(learner=learner)
    m.learn_many(X, Y)
    labs = m.classes
    for x in X[:8] + [[{"w=dog": 1.0}, {"w=new": 1.0}, {"w=the": 1.0}, {"w=runs": 1.0}]]:
        items = m.predict_nbest_one(x, 5)
        assert items[0][0] == m.predict_one(x)
        S, T, B = m._chain_tables(x)
        brute = _brute_chain(S, T, B)
        _check_against([([labs.index(t) for t in y], s) for y, s in items], brute, 5,
                       lambda y: _chain_score(S, T, B, y))
    assert [r[0][0] for r in m.predict_nbest_many(X[:3], 2)] == m.predict_many(X[:3])


def test_sequence_constraints():
    X, Y = _sentences(40)
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, seed=0))
    m.learn_many(X, Y)
    labs = m.classes
    x = [{"w=the": 1.0}, {"w=dog": 1.0}, {"w=runs": 1.0}]
    c = ss.Constraints(fixed={1: "VERB"}, allowed={2: ["NOUN", "DET"]}, forbidden=[("DET", "VERB")])
    S, T, B = m._chain_tables(x)
    allowed, forbid = c.chain_masks(3, labs)
    brute = _brute_chain(S, T, B, allowed, forbid)
    got = m.predict_one(x, constraints=c)
    assert got == [labs[i] for i in brute[0][1]] and got[1] == "VERB" and got[0] != "DET"
    assert m.predict_one(x, constraints={"fixed": {0: "NOUN"}})[0] == "NOUN"
    items = m.predict_nbest_one(x, 100, constraints=c)
    assert len(items) == len(brute)
    with pytest.raises(ValueError, match="does not know"):
        m.predict_one(x, constraints={"fixed": {0: "ADJ"}})
    with pytest.raises(ValueError, match="outside the sequence"):
        m.predict_one(x, constraints={"fixed": {3: "DET"}})
    with pytest.raises(ValueError, match="no tag sequence satisfies"):
        m.predict_one(x, constraints={"fixed": {0: "DET", 1: "VERB"}, "forbidden": [("DET", "VERB")]})
    with pytest.raises(ValueError, match="unknown constraint fields"):
        m.predict_one(x, constraints={"fixd": {0: "DET"}})


@pytest.mark.parametrize("learner", [ss.learners.BCFW(lam=0.01, seed=0), ss.learners.SGD(lam=0.01, seed=0),
                                     ss.learners.Pragam(lam=0.01), ss.learners.BMRM(lam=0.01)],
                         ids=lambda lr: type(lr).__name__)
def test_multiclass_nbest(learner):
    rng = np.random.default_rng(0)
    C = rng.normal(size=(6, 5))
    m = ss.MulticlassSSVM(learner=learner)
    for i in range(300):
        c = int(rng.integers(6))
        m.learn_one(C[c] + 0.5 * rng.normal(size=5), f"c{c}")
    for i in range(20):
        x = rng.normal(size=5)
        items = m.predict_nbest_one(x, 4)
        assert items[0][0] == m.predict_one(x) and len(items) == 4
        assert all(a[1] >= b[1] for a, b in zip(items, items[1:]))
    all6 = m.predict_nbest_one(x, 10)
    assert sorted(lab for lab, _ in all6) == sorted(m.classes)
    X = rng.normal(size=(3, 5))
    assert [r[0][0] for r in m.predict_nbest_many(X, 2)] == list(m.predict_many(X))


@pytest.mark.parametrize("kind", ["independent", "pairwise", "hierarchy", "pairwise-gdmm"])
def test_multilabel_nbest_and_constraints(kind):
    rng = np.random.default_rng(1)
    kw = {"pairwise": True} if kind.startswith("pairwise") else {}
    if kind == "hierarchy":
        kw = {"hierarchy": {"a": "x", "b": "x", "c": "y", "d": "y"}}
    learner = ss.learners.GDMM(lam=0.01, seed=0) if kind.endswith("gdmm") else ss.learners.BCFW(lam=0.01, seed=0)
    m = ss.MultiLabelSSVM(learner=learner, **kw)
    for i in range(200):
        x = rng.normal(size=4)
        m.learn_one(x, {lab: bool(x[j] > 0) for j, lab in enumerate("abcd")})
    labs = list("abcd")
    for _ in range(10):
        x = rng.normal(size=4)
        items = m.predict_nbest_one(x, 5)
        assert items[0][0] == m.predict_one(x)
        assert all(a[1] >= b[1] - 1e-12 for a, b in zip(items, items[1:]))
        assert len({tuple(y.values()) for y, _ in items}) == 5
        # the full ranking has every labeling; constrained: the best satisfying one
        full = m.predict_nbest_one(x, 16)
        assert len(full) == 16
        got = m.predict_one(x, constraints={"on": ["a"], "off": ["d"]})
        want = next(y for y, _ in full if y["a"] and not y["d"])
        assert got == want and [k for k in got] == labs
    with pytest.raises(ValueError, match="does not know"):
        m.predict_one(x, constraints={"on": ["zzz"]})


@pytest.mark.parametrize("mips,predict_with", [("exact", None), ("hnsw", "index"), ("hnsw", None)])
def test_extreme_nbest(mips, predict_with):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(40, 8))
    m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(lam=1e-4, seed=0), mips=mips, predict_with=predict_with)
    for _ in range(1500):
        c = int(rng.integers(40))
        m.learn_one(centers[c] + 0.1 * rng.normal(size=8), c)
    for c in range(10):
        x = centers[c] + 0.1 * rng.normal(size=8)
        items = m.predict_nbest_one(x, 5)
        assert items[0][0] == m.predict_one(x) and len(items) == 5
        assert all(a[1] >= b[1] for a, b in zip(items, items[1:]))
    assert len(m.predict_nbest_one(x, 40)) == 40   # more than the index gives: exact scan
    lr = m.bound_learner
    W = lr.averaged_weights()
    _, fidx, fval = m._features.encode_one(x, grow=False)
    s = W[:, fidx] @ fval
    if predict_with is None:   # exact: the scores of the (averaged) rows
        top = np.argsort(-s, kind="stable")[:5]
        assert [lab for lab, _ in m.predict_nbest_one(x, 5)] == [m.classes[i] for i in top]


def test_k_must_be_positive():
    m = ss.MulticlassSSVM()
    m.learn_one({"a": 1.0}, "x")
    for k in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="positive int"):
            m.predict_nbest_one({"a": 1.0}, k)


def test_kbest_kernels_stay_off_the_learn_and_predict_path():
    """Cold start: the k-best kernels compile only when n-best or constraints are used."""
    import subprocess
    import sys
    code = ("import sys, streamssvm as ss\n"
            "m = ss.SequenceTagger(); m.learn_one([{'a': 1}], ['A']); m.predict_one([{'a': 1}])\n"
            "c = ss.MulticlassSSVM(); c.learn_one({'a': 1}, 'x'); c.predict_one({'a': 1})\n"
            "print(any(n.startswith(('streamssvm._kernels.kbest', 'streamssvm.nbest', 'streamssvm.scoring',"
            " 'streamssvm.constraints')) for n in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_multilabel_tie_first_is_predict_one():
    """An untrained pairwise model scores every labeling 0: the first n-best is predict_one's."""
    m = ss.MultiLabelSSVM(pairwise=True, learner=ss.learners.BCFW(lam=1.0, seed=0))
    m.learn_one({"a": 0.0}, {"p": False, "q": False})
    for k in (1, 3):
        items = m.predict_nbest_one({"a": 0.0}, k)
        assert items[0][0] == m.predict_one({"a": 0.0}) and len(items) == k


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_nbest_and_explain_score_the_scaled_features(task):
    """With feature scaling on (the default), n-best and explain_one score x as predict_one
    does: divided by the running RMS (they once scored the raw values, so on mixed-scale
    features their first answer differed from predict_one and their scores were off)."""
    import numpy as np
    import streamssvm as ss
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)) * np.array([1.0, 1e3, 1e-2])
    if task == "multiclass":
        ys = [int(a > 0) + 2 * int(c > 0) for a, _, c in X]
        m = ss.MulticlassSSVM()
    else:
        ys = [{"a": bool(r[0] > 0), "c": bool(r[2] > 0)} for r in X]
        m = ss.MultiLabelSSVM()
    assert m.scale
    xs = [{f"f{j}": float(v) for j, v in enumerate(r)} for r in X]
    for x, y in zip(xs[:150], ys[:150]):
        m.learn_one(x, y)
    for x in xs[150:]:
        best = m.predict_nbest_one(x, 2)
        assert best[0][0] == m.predict_one(x)
        e = m.explain_one(x)
        assert e["score"] == pytest.approx(best[0][1], rel=1e-12, abs=1e-12)
        # flat models have no transitions: the features' contributions make the whole score
        assert max(abs(r) for r in e["rest"]) < 1e-9
