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
    lam = lr.lam
    lr.set_union(0.05, 120)
    assert lr.effective_lam() == pytest.approx(0.05 * 120 / 30)
    lr.set_union(0.05, 120, sigma=2.0)
    assert lr.effective_lam() == pytest.approx(0.05 * 120 / (2.0 * 30))
    assert lr.n_evicted == 0
    # the union's lambda is running state: the constructor parameter is never rewritten
    assert lr.lam == lam and lr._get_params()["lam"] == lam and lr.clone().effective_lam() == lam


# ----------------------------------------------------------------------------- store-state editing
def _stores(kind):
    """Two fitted BCFW learners of one structure (a chain's blocks use the sparse transition
    layout), one with evictions (free slots in its store)."""
    from test_gdmm_restore import _chain_data
    out = []
    for seed, cap in ((0, 100_000), (1, 15)):
        if kind == "chain":
            m = ss.SequenceTagger(learner=L.BCFW(lam=0.05, averaging=False, gap_every=None, seed=seed,
                                                 window=cap))
            X, Y = _chain_data(n=25, K=3, seed=seed)
            X2 = X
        else:
            m = ss.MulticlassSSVM(labels=LABELS, learner=L.BCFW(lam=0.05, averaging=False, gap_every=None,
                                                                seed=seed, window=cap))
            X2, Y = data(25, seed)
        for x, y in zip(X2, Y):
            m.learn_one(x, y)
        out.append(m)
    if kind == "chain":   # one label set and one feature index for both
        for m in out:
            m.bound_learner.ensure(max(o._features.dim for o in out), out[0]._labels.labels)
    return out


def _blocks(store):
    return [{k: np.array(v) for k, v in store.block(j).items() if isinstance(v, np.ndarray)}
            for j in store_slot_order_of(store)]


def store_slot_order_of(store):
    from streamssvm.distributed._union import store_slot_order
    return store_slot_order(store.state())


def _same_blocks(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


@pytest.mark.parametrize("kind", ["multiclass", "chain"])
def test_concat_and_select_store_states_round_trip(kind):
    """The union of two real stores holds both stores' blocks unchanged (and validates); selecting
    one store's slots back out of the union gives that store's blocks in their order."""
    from streamssvm.blocks import BlockStore
    from streamssvm.distributed._union import concat_store_states, select_store_blocks, store_slot_order
    from streamssvm.saved_state import validate_store_state
    a, b = _stores(kind)
    la, lb = a.bound_learner, b.bound_learner
    assert len(lb.store.state()["free"]) > 0   # the evicting store has free slots
    structure = a._structure
    rows = max(la.W.E.shape[0], lb.W.E.shape[0])
    sa, sb = la.store.state(), lb.store.state()
    u = concat_store_states([sa, sb])
    validate_store_state(u, structure, n_rows=rows)
    assert u["n"] == sa["n"] + sb["n"] and u["n_slots"] == sa["n_slots"] + sb["n_slots"]
    union = BlockStore.from_state(u, structure, n_rows=rows)
    # the union's slots: a's first (same numbers), then b's shifted by a's slot count
    ua = [{k: np.array(v) for k, v in union.block(j).items() if isinstance(v, np.ndarray)}
          for j in store_slot_order(sa)]
    ub = [{k: np.array(v) for k, v in union.block(j + sa["n_slots"]).items() if isinstance(v, np.ndarray)}
          for j in store_slot_order(sb)]
    _same_blocks(ua, _blocks(la.store))
    _same_blocks(ub, _blocks(lb.store))
    # b's share back out of the union, in b's arrival order
    share = select_store_blocks(u, store_slot_order(sb) + sa["n_slots"])
    validate_store_state(share, structure, n_rows=rows)
    _same_blocks(_blocks(BlockStore.from_state(share, structure, n_rows=rows)), _blocks(lb.store))
    # an empty selection is a valid empty store
    validate_store_state(select_store_blocks(u, []), structure, n_rows=rows)


def test_store_state_editing_refuses_what_it_cannot_do():
    from streamssvm.distributed._union import concat_store_states, select_store_blocks
    a, b = _stores("multiclass")
    sa, sb = a.bound_learner.store.state(), b.bound_learner.store.state()
    with pytest.raises(ValueError, match="block layout \\(Kc"):
        concat_store_states([sa, dict(sb, Kc=sb["Kc"] + 1)])
    with pytest.raises(ValueError, match="no store states"):
        concat_store_states([])
    dead = int(sb["free"][0])
    with pytest.raises(ValueError, match="alive and distinct"):
        select_store_blocks(sb, [dead])
    with pytest.raises(ValueError, match="alive and distinct"):
        select_store_blocks(sb, [int(sb["alive"][0])] * 2)


def test_merged_learner_state_restores_as_one_bcfw():
    """distributed._bcfw on top of the store functions: the merged state of two workers is a
    BCFW state that restores (every block validated) and holds both workers' blocks; a worker's
    share selected back restores too."""
    from streamssvm.distributed import _bcfw
    m1, _ = fitted(bcfw(), n=30, seed=0)
    m2, _ = fitted(bcfw(), n=20, seed=1)
    s1, s2 = m1.bound_learner.state(), m2.bound_learner.state()
    U = m1.bound_learner.parameters()
    merged = _bcfw.merge_learner_states([s1, None, s2], U)
    r = L.BCFW(lam=0.05, averaging=False, gap_every=None, seed=0)
    r.restore(m1._structure, m1._labels.labels, merged)
    assert r.n_blocks == 50 and np.array_equal(r.W.E, U["E"])
    share = _bcfw.select_blocks(merged, _bcfw.slot_order(s2) + int(s1["store"]["n_slots"]))   # worker 2's slots
    r2 = L.BCFW(lam=0.05, averaging=False, gap_every=None, seed=0)
    r2.restore(m1._structure, m1._labels.labels, share)
    assert r2.n_blocks == 20
    _same_blocks(_blocks(r2.store), _blocks(m2.bound_learner.store))
    with pytest.raises(ValueError, match="cannot join the workers' blocks"):
        _bcfw.merge_learner_states([s1, dict(s2, store=dict(s2["store"], pool_cap=3))], U)


@pytest.mark.parametrize("bad", ["order", "free", "lval"])
def test_store_state_with_repeated_fifo_or_free_slots_is_refused(bad):
    """validate_store_state refuses a FIFO order or free list that repeats a slot (a repeated
    FIFO entry made the window evict the newest block instead of the oldest; a repeated free
    slot would hold two blocks) and non-finite slack losses."""
    from streamssvm.saved_state import validate_store_state
    from streamssvm.checkpoint import CheckpointError
    m = ss.MulticlassSSVM(labels=LABELS, learner=L.BCFW(lam=0.05, seed=0, window=10))
    X, Y = data(22, 0)
    for x, y in zip(X, Y):
        m.learn_one(x, y)
    s = m.bound_learner.state()["store"]
    rows = m.bound_learner.W.E.shape[0]
    validate_store_state(s, m._structure, n_rows=rows)
    s = dict(s)
    if bad == "order":
        s["order"] = np.array([s["order"][0]] * len(s["order"]))
    elif bad == "free":
        assert len(s["free"]) >= 1
        s["free"] = np.array([s["free"][0]] * len(s["free"]))
        s["n_slots"] = s["n_slots"] + 1   # still len(free) + n == n_slots ... with a repeated slot
        s["free"] = np.append(s["free"], s["free"][0])
        for k in ("meta", "gest", "last_oracle", "birth", "lval"):
            a = np.asarray(s[k])
            s[k] = np.concatenate([a, a[-1:]])
    else:
        s["lval"] = np.array(s["lval"], dtype=float)
        s["lval"][int(s["alive"][0])] = np.nan
    with pytest.raises(CheckpointError, match="repeat|lval"):
        validate_store_state(s, m._structure, n_rows=rows)
