"""The learners' public parameter-mixing interface (``Learner.parameters``, ``set_parameters``,
``dual_snapshot``, ``blend_dual``; ``BCFW.set_union``), which ``streamssvm.distributed`` uses
instead of the learners' internals. No Ray here: these run in one process."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm import learners as L

LABELS = [0, 1, 2]


def data(n, seed=0, d=5):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(len(LABELS), d))
    X = rng.normal(size=(n, d))
    Y = [int(v) for v in np.argmax(X @ W.T + 0.3 * rng.normal(size=(n, len(LABELS))), axis=1)]
    return X, Y


def fitted(model, n=60, seed=0):
    X, Y = data(n, seed)
    for x, y in zip(X, Y):
        model.learn_one(x, y)
    return model, X


def bcfw(**kw):
    return ss.MulticlassSSVM(labels=LABELS, learner=L.BCFW(lam=0.05, averaging=False, gap_every=None, seed=0, **kw))


def sgd(**kw):
    return ss.MulticlassSSVM(labels=LABELS, learner=L.SGD(lam=0.05, seed=0, **kw))


def memoir():
    return ss.ExtremeClassifier(learner=L.MEMOIR(lam=1e-3, mips="hnsw", rows="dense", seed=0), labels=LABELS)


@pytest.mark.parametrize("cls", [L.CuttingPlane, L.GDMM, L.BMRM, L.Pragam])
def test_learners_without_mixing_say_so(cls):
    lr = cls()
    for call in (lambda: lr.parameters(), lambda: lr.set_parameters({}), lambda: lr.dual_snapshot(),
                 lambda: lr.blend_dual(None, 0.5)):
        with pytest.raises(NotImplementedError, match=f"{cls.__name__} does not support .*distributed"):
            call()


def test_primal_learners_have_no_dual_blocks():
    m, _ = fitted(sgd())
    with pytest.raises(NotImplementedError, match="keeps no dual blocks"):
        m.bound_learner.dual_snapshot()


@pytest.mark.parametrize("make", [bcfw, sgd, memoir], ids=["bcfw", "sgd", "memoir"])
def test_parameters_round_trip_keeps_the_model(make):
    """set_parameters(parameters()) changes no prediction and no parameter; parameters() are copies."""
    m, X = fitted(make())
    lr = m.bound_learner
    p = lr.parameters()
    assert p and all(isinstance(v, np.ndarray) for v in p.values())
    before = [m.predict_one(x) for x in X]
    for v in lr.parameters().values():       # copies: changing them changes nothing
        v += 1.0
    for k, v in lr.parameters().items():
        np.testing.assert_array_equal(v, p[k])
    lr.set_parameters(p)
    q = lr.parameters()
    assert sorted(p) == sorted(q)
    for k in p:
        np.testing.assert_allclose(q[k], p[k], rtol=1e-12, atol=1e-14)
    assert [m.predict_one(x) for x in X] == before


@pytest.mark.parametrize("make", [bcfw, sgd, memoir], ids=["bcfw", "sgd", "memoir"])
def test_set_parameters_installs_what_it_is_given(make):
    m, X = fitted(make())
    lr = m.bound_learner
    p = lr.parameters()
    q = {k: 2.0 * v + 0.25 for k, v in p.items()}
    lr.set_parameters(q)
    got = lr.parameters()
    for k in q:
        np.testing.assert_allclose(got[k][tuple(slice(0, s) for s in q[k].shape)], q[k], rtol=1e-12)


@pytest.mark.parametrize("make", [bcfw, sgd], ids=["bcfw", "sgd"])
def test_set_parameters_grows_the_weights(make):
    m, _ = fitted(make())
    lr = m.bound_learner
    p = lr.parameters()
    big = {k: np.pad(v, [(0, 7)] + [(0, 0)] * (v.ndim - 1)) if k.endswith("E") else v for k, v in p.items()}
    big["E"][-1, 0] = 3.0
    lr.set_parameters(big)
    got = lr.parameters()["E"]
    assert got.shape[0] >= big["E"].shape[0] and got[big["E"].shape[0] - 1, 0] == pytest.approx(3.0)


def test_sgd_set_parameters_installs_the_average():
    """SGD keeps its average lazily ((beta U - V) / csum): the installed average is the one
    predictions use, and learning on continues from it."""
    m, X = fitted(sgd())
    lr = m.bound_learner
    p = lr.parameters()
    assert not np.allclose(p["AE"], p["E"])          # the average is not the iterate
    q = dict(p, AE=-p["AE"], AT=-p["AT"], AB=-p["AB"])
    lr.set_parameters(q)
    np.testing.assert_allclose(lr.parameters()["AE"], -p["AE"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lr.parameters()["E"], p["E"], rtol=1e-12, atol=1e-14)


def test_bcfw_blend_dual_moves_every_block_and_keeps_it_feasible():
    m, X = fitted(bcfw(), n=40)
    lr = m.bound_learner
    snap = lr.dual_snapshot()
    Y = data(80, 0)[1]
    for x, y in zip(data(80, 0)[0][40:], Y[40:]):   # new blocks, and steps on the old ones
        m.learn_one(x, y)
    lr.refine(2)
    now = lr.dual_snapshot()
    assert len(now["slots"]) == 80 and not np.allclose(now["stat"][:snap["stat"].size], snap["stat"])
    lr.blend_dual(snap, 0.25)
    got = lr.dual_snapshot()
    np.testing.assert_array_equal(got["slots"], now["slots"])
    n0 = snap["stat"].size
    # old blocks: a quarter of the way from the snapshot; new ones: from their ground truth
    np.testing.assert_allclose(got["stat"][:n0], snap["stat"] + 0.25 * (now["stat"][:n0] - snap["stat"]),
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got["lval"][:40], snap["lval"] + 0.25 * (now["lval"][:40] - snap["lval"]),
                               rtol=1e-12, atol=1e-15)
    K = now["sizes"][0]
    alpha = got["stat"].reshape(-1, K)            # multiclass: the block statistic is alpha_i
    assert alpha.min() >= -1e-12 and np.allclose(alpha.sum(axis=1), 1.0)
    truth = np.eye(K)[[Y[i] for i in range(40, 80)]]
    np.testing.assert_allclose(alpha[40:], 0.75 * truth + 0.25 * now["stat"][n0:].reshape(-1, K), atol=1e-12)
    # weight 1 keeps the blocks as they are
    lr.blend_dual(lr.dual_snapshot(), 1.0)
    np.testing.assert_array_equal(lr.dual_snapshot()["stat"], got["stat"])


def test_bcfw_set_union_steps_as_the_union():
    """A worker holding n_k blocks of a union of n steps with lam n / n_k: its weights
    U / (lam_k n_k) are the union's U / (lam n)."""
    m, _ = fitted(bcfw(), n=30)
    lr = m.bound_learner
    lr.set_union(0.05, 120)
    assert lr.lam == pytest.approx(0.05 * 120 / 30)
    lr.set_union(0.05, 120, sigma=2.0)
    assert lr.lam == pytest.approx(0.05 * 120 / (2.0 * 30))
    assert lr.n_evicted == 0
