"""Sparse weight messages of a distributed job (``streamssvm.distributed._sparse``): a worker sends
the non-zero entries of its round's delta, the mixer broadcasts the entries where the mixed point
moved, and the weights are the same bits as with dense messages (no Ray: plain workers and
mixer, as Ray calls them)."""
import pickle

import numpy as np
import pytest

import streamssvm as ss
from streamssvm.distributed._mix import combine
from streamssvm.distributed._mixer import Mixer
from streamssvm.distributed._sparse import Changes, SparseArray, pack, unpack
from streamssvm.distributed._worker import Worker


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def test_pack_keeps_every_non_zero_entry_and_sends_dense_when_that_is_smaller():
    a = np.zeros((50, 8))
    a[3, 2], a[7, 0], a[9, 5] = 1.5, np.nan, -np.inf
    a[4, 4] = -0.0   # left out: adding it to a sum changes nothing
    d = np.arange(1.0, 17.0).reshape(4, 4)
    p = pickle.loads(pickle.dumps(pack({"E": a, "T": d})))
    assert isinstance(p["E"], SparseArray) and p["E"].index.size == 3 and not isinstance(p["T"], SparseArray)
    u = unpack(p)
    np.testing.assert_array_equal(u["E"], a)   # (nan at the same place; -0.0 == 0.0)
    assert np.array_equal(_bits(u["T"]), _bits(d))
    assert p["E"].nbytes < a.nbytes / 20


def test_changes_rebuild_the_new_point_bit_for_bit_and_grow_shapes():
    rng = np.random.default_rng(0)
    old = {"E": rng.normal(size=(30, 5)), "T": np.zeros((5, 5))}
    old["E"][2, 2] = 0.0
    kept = old["E"].copy()
    new = {"E": old["E"].copy(), "T": old["T"].copy()}
    new["E"][4, 1] = np.nextafter(new["E"][4, 1], np.inf)   # a change of the last bit
    new["E"][2, 2] = -0.0     # a change of sign bit only
    new["T"] = np.zeros((6, 6))   # a grown array (a label added)
    new["T"][5, 5] = 2.0
    new["B"] = np.ones((2, 6))    # a new array
    c = pickle.loads(pickle.dumps(Changes.between(old, new, base_round=4, round=5)))
    assert (c.base_round, c.round) == (4, 5)
    assert c.arrays["E"].index.tolist() == [2 * 5 + 2, 4 * 5 + 1]
    got = c.apply(old)
    for k in new:
        assert got[k].shape == new[k].shape and np.array_equal(_bits(got[k]), _bits(new[k]))
    assert np.array_equal(_bits(old["E"]), _bits(kept))   # the base is not changed
    assert not isinstance(c.arrays["B"], SparseArray)   # every entry moved: dense


def _job(tmp_path, K=2, n=300, learner=None):
    rng = np.random.default_rng(3)
    X = [rng.normal(size=30) * (rng.random(30) < 0.2) for _ in range(n)]   # sparse rows: sparse deltas
    Y = [int(np.argmax(x[:6])) for x in X]
    model = ss.MulticlassSSVM(labels=list(range(6)), scale=False,
                              learner=learner or ss.learners.BCFW(lam=0.01, seed=0, averaging=False, gap_every=None))
    kind = "bcfw" if model.learner.mixing == "dual" else "ipm"
    beta = float(K) if kind == "bcfw" else 1.0
    mixer = Mixer(K, kind, 0.01, beta, tmp_path / "ck")
    workers = [Worker(k, K, model.clone(), "multiclass", {"kind": "arrays", "X": X, "Y": Y}, kind, 0.01, beta)
               for k in range(K)]
    return mixer, workers


@pytest.mark.parametrize("learner", [None, ss.learners.SGD()], ids=["bcfw", "sgd"])
def test_mixed_weights_equal_dense_mixing_bit_for_bit_every_round(tmp_path, learner):
    """Every round: the mixer's point is combine(start, dense deltas, gamma) to the last bit, and
    every worker's learner holds exactly the mixer's point after the sparse broadcast."""
    mixer, workers = _job(tmp_path, learner=learner)
    for r in range(1, 6):
        outs = [w.learn_round(20) for w in workers]
        infos = [i for i, _ in outs]
        assert all(i["held_round"] == r - 1 for i in infos)
        dense = [unpack(d) for _, d in outs]
        want = combine(mixer.weights(), dense, mixer.gamma)
        mixed = pickle.loads(pickle.dumps(mixer.mix(r, [i["n_blocks"] for i in infos], *[d for _, d in outs])))
        got = mixer.weights()
        assert set(got) == set(want) and all(np.array_equal(_bits(got[k]), _bits(want[k])) for k in want)
        assert mixed["bytes"] < mixed["bytes_whole"]
        n_global = sum(i["n_blocks"] for i in infos)
        for w in workers:
            w.apply(mixed, n_global)
            assert all(np.array_equal(_bits(w.held[k]), _bits(got[k])) for k in got)   # what it installed
            if learner is None:   # (SGD keeps its running average in a form of its own: not bit for bit)
                held = w.model.bound_learner.parameters()
                assert all(np.array_equal(_bits(held[k]), _bits(got[k])) for k in got)
    assert sum(i["bytes_up"] for i in infos) < sum(sum(a.nbytes for a in d.values()) for d in dense)


def test_a_worker_without_the_previous_point_needs_the_whole_point(tmp_path):
    """After a restore a worker does not hold the mixer's last point: the changes alone are
    refused (they would rebuild a wrong point); with the whole point it continues, and the next
    broadcast is sparse again."""
    mixer, workers = _job(tmp_path)

    def round_(r, whole_for=()):
        outs = [w.learn_round(20) for w in workers]
        mixed = mixer.mix(r, [i["n_blocks"] for i, _ in outs], *[d for _, d in outs])
        n = sum(i["n_blocks"] for i, _ in outs)
        for k, w in enumerate(workers):
            w.apply(mixed, n, whole=mixer.weights() if k in whole_for else None)
        return [i for i, _ in outs], mixed

    round_(1)
    part = workers[1].save_part(1, mixer.part_path(1, 1))
    round_(2)
    workers[1].restore(part["path"])
    outs = [w.learn_round(20) for w in workers]
    assert [i["held_round"] for i, _ in outs] == [2, None]
    mixed = mixer.mix(3, [i["n_blocks"] for i, _ in outs], *[d for _, d in outs])
    with pytest.raises(RuntimeError, match="whole mixed point"):
        workers[1].apply(mixed, 0)
    for k, w in enumerate(workers):
        w.apply(mixed, sum(i["n_blocks"] for i, _ in outs), whole=mixer.weights() if k == 1 else None)
    infos, _ = round_(4)
    assert [i["held_round"] for i in infos] == [3, 3]
    got = mixer.weights()
    for w in workers:
        held = w.model.bound_learner.parameters()
        assert all(np.array_equal(_bits(held[k]), _bits(got[k])) for k in got)


@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0 / 3.0, -1.0, 0.0])
def test_combine_packed_is_the_dense_combine_bit_for_bit(gamma):
    """Listed entries, unlisted ones (-0.0 in the start included), a key only in the start, a key
    only in the deltas, a delta sent dense, and shapes that differ (the dense fallback)."""
    from streamssvm.distributed._sparse import combine_packed
    rng = np.random.default_rng(7)
    start = {"E": rng.normal(size=(60, 9)) * (rng.random((60, 9)) < 0.5), "T": rng.normal(size=(3, 3)),
             "B": np.zeros((2, 9))}
    start["E"][0, :3] = -0.0
    start["E"][1, 1] = np.nan

    def sparse_delta():
        d = np.zeros((60, 9))
        d.flat[rng.choice(d.size, 30, replace=False)] = rng.normal(size=30)
        d[0, 0] = -0.0
        return d

    deltas = [{"E": sparse_delta(), "T": rng.normal(size=(3, 3))},            # T goes dense
              {"E": sparse_delta(), "C": np.eye(4) * (np.arange(4) == 1)},  # C only in a delta
              {"E": sparse_delta(), "T": np.zeros((4, 4))}]                 # T of another shape
    want = combine(start, deltas, gamma)
    got = combine_packed(start, [pack(d) for d in deltas], gamma)
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].shape == want[k].shape and np.array_equal(_bits(got[k]), _bits(want[k])), k
