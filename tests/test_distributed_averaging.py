"""The single machine's configuration, distributed (derivations in
``streamssvm/distributed/_bcfw.py``):

* averaging at the mixer (``BCFW(averaging=True)``, the learner's default): the step-weighted
  average of the mixed points, kept by the mixer, saved in every cut, served as the returned
  model's prediction weights;
* FIFO eviction windows per worker (``BCFW(window=W)``): shares of W, an evicted block leaves
  the union's sums whole.

In process (``cluster="inprocess"``, bit for bit the Ray run) and on a real local Ray cluster."""
import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="needs the [distributed] extra (Ray)")

import streamssvm as ss  # noqa: E402
import streamssvm.distributed as sd  # noqa: E402
from streamssvm.distributed import _bcfw  # noqa: E402
from streamssvm._kernels.bcfw import M_FOFF, M_L, M_NNZ  # noqa: E402

from test_distributed import LABELS, data  # noqa: E402  (the same small linear stream)


def bcfw_model(**kw):
    lr = dict(lam=0.01, averaging=True, gap_every=None, seed=0, replay=1)
    lr.update(kw)
    return ss.MulticlassSSVM(labels=LABELS, n_features=2 ** 10, scale=False, learner=ss.learners.BCFW(**lr))


def pad(a, shape):
    out = np.zeros(shape)
    out[tuple(slice(0, s) for s in a.shape)] = a
    return out


def averaged(model):
    """(U_bar as {"E", "T", "B"}, z_loss) the model predicts / certifies with."""
    A, z = model.bound_learner.averaged_u()
    return {"E": A.E, "T": A.T, "B": A.B}, z


def test_average_weights_and_step_index_weights():
    assert _bcfw.average_weight(0, 4) == 1 + 2 + 3 + 4
    assert _bcfw.average_weight(4, 6) == 5 + 6
    assert _bcfw.average_weight(3, 3) == 0.0
    assert _bcfw.average_weight(0, 4, 2) == 1 + 4 + 9 + 16
    assert _bcfw.average_weight(4, 6, 2) == 25 + 36
    with pytest.raises(ValueError, match="p = 1 or 2"):
        _bcfw.average_weight(0, 4, 3)


def test_several_workers_weigh_steps_by_their_squares_and_follow_the_overlap():
    """With K > 1 and averaging the mixer weighs a step t by t^2 and takes sigma' = clip(rho, 1, K)
    (no 1.25 margin: the average smooths the iterate's oscillations); one worker keeps the single
    process's weights t, and a job without averaging keeps the margin (see ``_bcfw``, "Averaging
    at the mixer"). Measured: bench/results/distributed_averaging_chains.md."""
    from streamssvm.distributed._mixer import ADAPTIVE_MARGIN, Mixer
    assert Mixer(1, "bcfw", 0.01, averaging=True).average_power == 1
    assert Mixer(4, "bcfw", 0.01, 4.0, averaging=True).average_power == 2
    d = [{"E": np.array([1.0, 0.0])}, {"E": np.array([1.0, 1.0])}, {"E": np.array([0.0, 1.0])}]
    rho = _bcfw.overlap(d)   # ||(2, 2)||^2 / (1 + 2 + 1) = 2
    sig = {}
    for avg in (True, False):
        m = Mixer(3, "bcfw", 0.01, 3.0, adaptive=True, averaging=avg)
        tot = [{"steps": 2, "loss_start": 0.0, "evicted": 0} for _ in d]
        m.mix(1, [2, 2, 2], *d, loss_deltas=[0.1, 0.1, 0.1], totals=tot)
        sig[avg] = m.sigma
        if avg:
            assert m.average["T"] == 6 and m.average["W"] == sum(t * t for t in range(1, 7))
    assert sig == {True: rho, False: ADAPTIVE_MARGIN * rho}


def test_mixer_average_is_the_step_weighted_average_of_the_mixed_points(tmp_path):
    """After every round the union's mixed point U^(r), its loss sum L^(r) and its step count T_r
    are read from the workers; the returned model's averaged weights are sum_r c_r U^(r) / W_T
    with c_r = the sum of t^2 over the round's steps t (two workers), and its averaged loss sum the same average of L^(r) (the
    averaged dual point's value), through the learner's own ``averaged_u``."""
    X, Y = data(500, seed=1)
    seen = []

    def grab(rec, job):
        lrs = [w._obj.model.bound_learner for w in job.workers]
        lrs = [lr for lr in lrs if lr is not None]
        U = job.mixer._obj.weights()
        seen.append((sum(lr._tick for lr in lrs), {k: np.array(v) for k, v in U.items()},
                     sum(_bcfw.loss_sum(lr) for lr in lrs)))

    res = sd.run(bcfw_model(), (X, Y), task="multiclass", workers=2, round_examples=60, passes=2.0,
                 passes_per_round=0.5, cluster="inprocess", checkpoint_dir=tmp_path, on_round=grab)
    assert res.rounds == len(seen) >= 8
    p = 2   # two workers: steps weighted by t^2 (one worker: t, the single process's weights)
    assert res.model.bound_learner.averaging
    T_prev, W, Ubar, Lbar = 0, 0.0, None, 0.0
    shape = {k: np.shape(v) for k, v in seen[-1][1].items()}
    num = {k: np.zeros(s) for k, s in shape.items()}
    lnum = 0.0
    for T, U, L in seen:
        c = float(sum(t ** p for t in range(T_prev + 1, T + 1)))
        for k in num:
            num[k] += c * pad(U[k], shape[k])
        lnum += c * L
        W += c
        T_prev = T
    got, z = averaged(res.model)
    for k in num:
        np.testing.assert_allclose(pad(got[k], shape[k]), num[k] / W, rtol=1e-9, atol=1e-12)
    L_now = seen[-1][2]
    np.testing.assert_allclose(L_now - z, lnum / W, rtol=1e-9, atol=1e-12)
    # the averaged model differs from the last iterate, and its own certificate certifies it
    assert np.abs(got["E"] - res.model.bound_learner.W.E[:got["E"].shape[0]]).max() > 1e-6
    c = res.model.certificate()
    assert c.gap_avg is not None and c.raw_gap >= -1e-10
    assert c.extra["iterate_gap"] == pytest.approx(res.certificate["gap"], rel=1e-9, abs=1e-12)
    assert "the iterate" in res.certificate["note"]


def test_averaged_dual_point_is_feasible(tmp_path):
    """D(alpha_bar) of the returned model is below min P (bounded by a long single run's primal):
    the average of the mixed points is a dual point of the union."""
    X, Y = data(400, seed=2)
    ref = bcfw_model(averaging=False, replay=2)
    for x, y in zip(X, Y):
        ref.learn_one(x, y)
    ref.refine(30)
    p_ref = ref.certificate().primal
    res = sd.run(bcfw_model(), (X, Y), task="multiclass", workers=3, round_examples=40, passes=2.0,
                 passes_per_round=0.25, cluster="inprocess", checkpoint_dir=tmp_path)
    c = res.model.certificate()
    assert c.extra["dual_averaged"] <= p_ref + 1e-9
    assert c.dual <= p_ref + 1e-9 and c.primal >= p_ref - 1e-9


def test_one_worker_with_one_step_rounds_averages_as_one_process(tmp_path):
    """With one worker, one new example per round and no replay, each round is one block step:
    the iterate is the single process's bit for bit, and the mixer's average is its averaged
    iterate (to round-off: the two accumulate it differently). Regression (bits): a worker's
    lambda was lam n / n, an ulp off lam."""
    X, Y = data(150, seed=3)
    single = bcfw_model(replay=0)
    for x, y in zip(X, Y):
        single.learn_one(x, y)
    res = sd.run(bcfw_model(replay=0), (X, Y), task="multiclass", workers=1, round_examples=1,
                 checkpoint_every=10_000, cluster="inprocess", checkpoint_dir=tmp_path)
    assert res.rounds == len(X) + 1   # the last round finds the end of the stream
    np.testing.assert_array_equal(res.model.bound_learner.W.E[:single.bound_learner.W.E.shape[0]],
                                  single.bound_learner.W.E)
    got, z = averaged(res.model)
    want, zw = averaged(single)
    for k in got:
        np.testing.assert_allclose(got[k], pad(want[k], got[k].shape), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(z, zw, rtol=1e-9, atol=1e-12)
    assert [res.model.predict_one(x) for x in X] == [single.predict_one(x) for x in X]
    a, b = res.model.certificate(), single.certificate()
    np.testing.assert_allclose(a.gap, b.gap, rtol=1e-7)


def test_average_resumes_from_a_cut(tmp_path):
    """A job stopped after round 3 and resumed from its cut returns the average of an
    uninterrupted job, to the last bit (the average is part of the mixer's cut)."""
    X, Y = data(500, seed=4)
    kw = dict(task="multiclass", workers=3, round_examples=50, passes=1.0, passes_per_round=0.25,
              cluster="inprocess")
    whole = sd.run(bcfw_model(replay=0), (X, Y), checkpoint_dir=tmp_path / "whole", **kw)
    first = sd.run(bcfw_model(replay=0), (X, Y), checkpoint_dir=tmp_path / "cut", max_rounds=3, **kw)
    assert first.rounds == 3
    rest = sd.run(bcfw_model(replay=0), (X, Y), checkpoint_dir=tmp_path / "cut", **kw)
    assert rest.rounds == whole.rounds
    (a, za), (b, zb) = averaged(whole.model), averaged(rest.model)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert za == zb


def test_a_job_without_averaging_resumes_with_the_average_starting_there(tmp_path):
    """A cut without an average (a job run with averaging=False, e.g. by the CLI before it kept
    averaging) resumed with averaging=True: a warning, and the average covers the rounds since."""
    X, Y = data(400, seed=5)
    kw = dict(task="multiclass", workers=2, round_examples=50, cluster="inprocess", checkpoint_dir=tmp_path)
    first = sd.run(bcfw_model(averaging=False), (X, Y), max_rounds=2, **kw)
    steps_before = first.model.bound_learner._tick
    with pytest.warns(UserWarning, match="average starts at this round"):
        res = sd.run(bcfw_model(), (X, Y), **kw)
    lr = res.model.bound_learner
    assert res.examples_seen == 400 and lr._tick > steps_before
    assert lr._avg_t0 == steps_before and lr.averaged_u() is not None


def test_refused_per_block_average():
    with pytest.raises(ValueError, match="evicted_average='keep'"):
        sd.run(bcfw_model(evicted_average="keep"), "unused.jsonl", task="multiclass")


@pytest.mark.parametrize("learner, mixing", [
    ({}, {}),
    ({"step": "pairwise", "cache": True, "gap_every": 1.0}, {"beta": 1.0, "mix_step": "fixed"}),
])
def test_averaging_and_windows_on_ray_equal_in_process_bit_for_bit(tmp_path, learner, mixing):
    """The same job (averaging, a window of 240 blocks shared by 2 workers, 400 examples; FW
    steps with adaptive mixing, or pairwise steps and the cache with blended pools) on a real
    local Ray cluster and in process: the same rounds, and the same weights and averaged weights
    to the last bit."""
    X, Y = data(400, seed=6)
    sd.init_cluster("local", num_cpus=2)   # a private cluster, also when another runs on the machine
    try:
        runs = {where: sd.run(bcfw_model(replay=0, window=240, **learner), (X, Y), task="multiclass", workers=2,
                              round_examples=50, passes=1.0, passes_per_round=0.25, checkpoint_dir=tmp_path / where,
                              cluster=where, **mixing)
                for where in ("local", "inprocess")}
    finally:
        ray.shutdown()
    a, b = runs["local"], runs["inprocess"]
    assert a.rounds == b.rounds >= 6
    assert a.model.n_blocks == b.model.n_blocks == 240
    assert [h["gap"] for h in a.history] == [h["gap"] for h in b.history]
    # the progressive predictions (made with the mixer's average) alike
    assert [[w["metrics"] for w in h["workers"]] for h in a.history] == \
        [[w["metrics"] for w in h["workers"]] for h in b.history]
    np.testing.assert_array_equal(a.model.bound_learner.W.E, b.model.bound_learner.W.E)
    (ua, za), (ub, zb) = averaged(a.model), averaged(b.model)
    for k in ua:
        np.testing.assert_array_equal(ua[k], ub[k])
    assert za == zb


# ----------------------------------------------------------------------------- eviction windows
@pytest.mark.parametrize("averaging", [False, True])
def test_one_worker_window_is_the_single_process_window(tmp_path, averaging):
    """One worker, one new example per round, no replay, a window of 50 blocks over 200 examples:
    the worker evicts its oldest block before each new one past the window as one process does,
    and the union's sums lose it whole: the same blocks, weights (and averaged weights, restarted
    at every eviction on both sides), certificate and predictions as the single process."""
    X, Y = data(200, seed=7)
    single = bcfw_model(replay=0, window=50, averaging=averaging)
    for x, y in zip(X, Y):
        single.learn_one(x, y)
    res = sd.run(bcfw_model(replay=0, window=50, averaging=averaging), (X, Y), task="multiclass", workers=1,
                 round_examples=1, checkpoint_every=10_000, cluster="inprocess", checkpoint_dir=tmp_path)
    a, b = res.model.bound_learner, single.bound_learner
    assert a.n_blocks == b.n_blocks == 50 and res.model.learner.window == 50 and a.store.capacity == 50
    sa = sorted(int(a.store.block(j)["ytrue"][0]) for j in a.store.slots())
    sb = sorted(int(b.store.block(j)["ytrue"][0]) for j in b.store.slots())
    assert sa == sb == sorted(Y[-50:])
    np.testing.assert_allclose(a.W.E[:b.W.E.shape[0]], b.W.E, rtol=1e-12, atol=1e-14)
    if averaging:   # one process restarted its average after the last eviction: it predicts with the iterate
        got, _ = averaged(res.model)
        np.testing.assert_allclose(got["E"][:b.W.E.shape[0]], b.W.E, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.certificate["gap"], b.certificate().extra.get("iterate_gap", b.certificate().gap),
                               rtol=1e-9)
    assert [res.model.predict_one(x) for x in X] == [single.predict_one(x) for x in X]


@pytest.mark.parametrize("beta, mix_step", [(1.0, "fixed"), (2.0, "adaptive"), (1.0, "line")])
def test_worker_windows_keep_the_union_sums_whole(tmp_path, beta, mix_step):
    """Windows of 30 + 30 blocks (window=60, 2 workers) over 240 examples, blended mixing
    (gamma = 1/2) and adaptive: after every round the mixed sums are the sums of the blocks the
    union holds (an evicted block left whole, not by gamma), every alpha_i is in its simplex, the
    union's certificate is the mixer's, and the mixer's average restarts in a round with an
    eviction (it then holds that round's steps only)."""
    X, Y = data(240, seed=8)
    seen = []

    def check(rec, job):
        model = job.final_model()
        lr = model.bound_learner
        assert lr.n_blocks == rec["n_blocks"] <= 60
        for j in lr.store.slots():   # multiclass: the block statistic is alpha_i
            L, nnz = int(lr.store.meta[j, M_L]), int(lr.store.meta[j, M_NNZ])
            s0 = int(lr.store.meta[j, M_FOFF]) + nnz + L * L
            a = lr.store.Far[s0:s0 + lr.store.structure.stat_size(L, lr.store.Kc)]
            assert a.min() >= -1e-12 and abs(a.sum() - 1.0) < 1e-9
        U = lr.W.E.copy()
        c = lr.certificate()
        lr._full_pass()   # re-sums U from the held blocks
        np.testing.assert_allclose(U, lr.W.E, atol=1e-10 * max(1.0, np.abs(U).max()))
        np.testing.assert_allclose(c.extra["iterate_gap"], rec["gap"], rtol=1e-9, atol=1e-12)
        steps = sum(w._obj.mixing.totals(w._obj.model)["steps"] for w in job.workers)
        evicted = sum(w._obj.mixing.evicted for w in job.workers)
        seen.append((evicted, steps, job.mixer._obj.average["T"]))

    res = sd.run(bcfw_model(window=60), (X, Y), task="multiclass", workers=2, round_examples=20, passes=1.0,
                 passes_per_round=0.5, beta=beta, mix_step=mix_step, cluster="inprocess", checkpoint_dir=tmp_path,
                 on_round=check)
    assert res.model.n_blocks == 60 and res.examples_seen == 240
    assert sum(e for e, _, _ in seen) == 240 - 60
    for evicted, steps, T in seen:
        if evicted:
            assert T == steps
    assert seen[-1][2] > seen[-1][1]   # refinement rounds (no eviction) extend the average


def test_windows_resume_from_a_cut(tmp_path):
    X, Y = data(300, seed=9)
    kw = dict(task="multiclass", workers=2, round_examples=30, passes=1.0, passes_per_round=0.5,
              cluster="inprocess")
    whole = sd.run(bcfw_model(window=100), (X, Y), checkpoint_dir=tmp_path / "whole", **kw)
    first = sd.run(bcfw_model(window=100), (X, Y), checkpoint_dir=tmp_path / "cut", max_rounds=3, **kw)
    assert first.rounds == 3
    rest = sd.run(bcfw_model(window=100), (X, Y), checkpoint_dir=tmp_path / "cut", **kw)
    assert rest.model.n_blocks == whole.model.n_blocks == 100
    np.testing.assert_array_equal(rest.model.bound_learner.W.E, whole.model.bound_learner.W.E)
    (a, za), (b, zb) = averaged(whole.model), averaged(rest.model)
    np.testing.assert_array_equal(a["E"], b["E"])


@pytest.mark.parametrize("kw, msg", [
    ({"eviction": "reservoir"}, "eviction='reservoir'"),
    ({"max_bytes": 1 << 20}, "max_bytes"),
    ({"window": 1}, "every worker needs a window"),
])
def test_refused_windows(kw, msg):
    with pytest.raises(ValueError, match=msg):
        sd.run(bcfw_model(**kw), "unused.jsonl", task="multiclass", workers=2)


# ----------------------------------------------------------------------------- pairwise / away steps, the cache
@pytest.mark.parametrize("learner", [
    {"step": "pairwise"}, {"step": "away"}, {"step": "pairwise", "cache_size": 2},
    {"cache": True, "gap_every": 1.0}, {"step": "pairwise", "cache": True, "gap_every": 1.0, "window": 120},
])
def test_blended_pools_stay_below_the_true_dual_weights(tmp_path, learner):
    """Pairwise / away steps and the cache with blended mixing (gamma = 1/2 every round): after
    every round each block's pool weight of a labeling is at most the block's true dual weight
    of it (multiclass: alpha_i is the block statistic), a pool flagged exact sums to 1 (so it is
    alpha_i), alpha_i is in its simplex, and the mixed sums are the blocks' sums. Regression:
    without the pools' blend a pool kept its round-end weights c^k while alpha_i moved to
    (1 - gamma) alpha^0 + gamma alpha^k, and a pairwise step could take more mass than a
    labeling holds."""
    X, Y = data(300, seed=10)
    seen = []

    def check(rec, job):
        lr = job.final_model().bound_learner
        st = lr.store
        for j in st.slots():
            b = st.block(j)
            a = b["stat"]
            assert a.min() >= -1e-12 and abs(a.sum() - 1.0) < 1e-9
            for lab, c in zip(b["pool"], b["alpha"]):
                assert c <= a[lab[0]] + 1e-12
            if b["exact_alpha"]:
                assert abs(b["alpha"].sum() - 1.0) < 1e-9
        U = lr.W.E.copy()
        lr._full_pass()
        np.testing.assert_allclose(U, lr.W.E, atol=1e-10 * max(1.0, np.abs(U).max()))
        seen.append(sum(not st.block(j)["exact_alpha"] for j in st.slots()))

    res = sd.run(bcfw_model(averaging=True, **learner), (X, Y), task="multiclass", workers=2, round_examples=50,
                 passes=2.0, passes_per_round=0.5, beta=1.0, mix_step="fixed", cluster="inprocess",
                 checkpoint_dir=tmp_path, on_round=check)
    assert len(seen) == res.rounds >= 6 and {h["gamma"] for h in res.history} == {0.5}
    if learner.get("cache_size") == 2:   # full pools lose start entries: flagged, still below alpha
        assert max(seen) > 0
    c = res.model.certificate()
    assert c.raw_gap >= -1e-10


def test_pairwise_chain_mixing_keeps_w_equal_A_alpha(tmp_path):
    tags = ["a", "b", "c"]
    rng = np.random.default_rng(11)
    X = [rng.normal(size=(int(rng.integers(2, 5)), 4)) for _ in range(120)]
    Y = [[tags[int(np.argmax(t[:3]))] for t in x] for x in X]
    m = ss.SequenceTagger(labels=tags, learner=ss.learners.BCFW(lam=0.05, step="pairwise", gap_every=None, seed=0))
    checked = []

    def check(rec, job):
        lr = job.final_model().bound_learner
        U = (lr.W.E.copy(), lr.W.T.copy())
        c = lr.certificate()
        lr._full_pass()
        for a, b in zip(U, (lr.W.E, lr.W.T)):
            np.testing.assert_allclose(a, b, atol=1e-9 * max(1.0, np.abs(a).max()))
        np.testing.assert_allclose(c.extra["iterate_gap"], rec["gap"], rtol=1e-9, atol=1e-12)
        checked.append(rec["round"])

    res = sd.run(m, (X, Y), task="sequence", workers=2, round_examples=20, passes=1.0, passes_per_round=0.5,
                 beta=1.0, mix_step="fixed", cluster="inprocess", checkpoint_dir=tmp_path, on_round=check)
    assert len(checked) == res.rounds >= 5


@pytest.mark.filterwarnings("ignore:bad record sent to the dead-letter sink")
def test_a_bad_record_at_a_full_window_evicts_nothing(tmp_path):
    """A record the model rejects (a NaN feature) leaves the model unchanged (``step``'s
    contract), so a worker whose window is full evicts no block for it: one worker ends with the
    single process's window, its oldest block included."""
    X, Y = data(80, seed=3)
    X[-1, 0] = np.nan   # a bad record, after the window has filled
    single = bcfw_model(replay=0, window=50, averaging=False)
    for x, y in zip(X[:-1], Y[:-1]):
        single.learn_one(x, y)
    res = sd.run(bcfw_model(replay=0, window=50, averaging=False), (X, Y), task="multiclass", workers=1,
                 round_examples=1, checkpoint_every=10_000, cluster="inprocess", checkpoint_dir=tmp_path)
    a, b = res.model.bound_learner, single.bound_learner
    assert res.bad_records == 1
    assert a.n_blocks == b.n_blocks == 50
    np.testing.assert_allclose(a.W.E[:b.W.E.shape[0]], b.W.E, rtol=1e-12, atol=1e-14)


def test_a_weighted_record_is_a_dead_letter_not_the_end_of_a_bcfw_job(tmp_path):
    """Distributed BCFW cannot mix held example weights yet (``BCFW.set_union`` refuses them):
    a record with a weight other than 1 (or 0) becomes a bad record with its reason before any
    state changes, and the job ends with the other records learned (it used to learn the record
    and then fail at the next mix)."""
    import json
    X, Y = data(40, seed=5)
    path = tmp_path / "w.jsonl"
    with open(path, "w") as f:
        for i, (x, y) in enumerate(zip(X, Y)):
            rec = {"x": [float(v) for v in x], "y": int(y), "w": 1.0}
            if i == 17:
                rec["w"] = 2.5
            elif i == 23:
                rec["w"] = 0.0
            f.write(json.dumps(rec) + "\n")
    res = sd.run(bcfw_model(replay=0, averaging=False), f"file://{path}?weight_field=w", task="multiclass",
                 workers=2, round_examples=8, checkpoint_every=10_000, cluster="inprocess",
                 checkpoint_dir=tmp_path / "ck")
    assert res.bad_records == 1
    assert res.examples_seen == 39


@pytest.mark.parametrize("bad", [{"T": -1}, {"W": 7.0}, {"L": float("nan")}, {"U": {"U": np.array([1.0, np.inf])}},
                                 {"power": 3}, {"power": 2, "W": 15.0}])
def test_a_crafted_mixer_average_is_refused(bad):
    """A cut's mixer average is checked as it loads (step count, its weight W <= T (T + 1) / 2,
    finite sums): a crafted one is a CheckpointError, not a model that predicts with it."""
    from streamssvm.distributed._mixer import Mixer
    from streamssvm.errors import CheckpointError
    good = {"T": 3, "W": 6.0, "L": 0.5, "L_now": 0.4, "U": {"U": np.array([1.0, 2.0])}}
    mixer = Mixer(2, "bcfw", 0.01, 2.0, averaging=True)
    mixer._restore_average({"round": 1, "average": good})
    assert mixer.average["W"] == 6.0 and mixer.average_power == 1   # a cut without the power: weights t
    mixer._restore_average({"round": 1, "average": {**good, "power": 2, "W": 14.0}})
    assert mixer.average_power == 2
    with pytest.raises(CheckpointError, match="mixer average"):
        mixer._restore_average({"round": 1, "average": {**good, **bad}})


def _correct_per_round(history, worker):
    """Correct progressive predictions of ``worker`` in each round (from its running accuracy)."""
    out, before = [], 0
    for rec in history:
        m = rec["workers"][worker]["metrics"]
        now = int(round(m.get("accuracy", 0.0) * m.get("n", 0)))
        out.append(now - before)
        before = now
    return out


def test_progressive_predictions_use_the_mixers_average(tmp_path):
    """During a 2-worker stream with averaging, each worker predicts the records of round r + 1
    with the mixer's average as of round r -- what the returned model predicts with -- not with
    its own iterate: its correct predictions in each round equal those of the job's model taken
    at the boundary before that round. Regression: the workers predicted with their iterates."""
    X, Y = data(600, seed=11)
    K, RE = 2, 30
    boundary = {}

    def grab(rec, job):
        boundary[rec["round"]] = job.final_model()

    res = sd.run(bcfw_model(), (X, Y), task="multiclass", workers=K, round_examples=RE, cluster="inprocess",
                 checkpoint_dir=tmp_path, on_round=grab)
    rounds = [h["round"] for h in res.history]
    checked = 0
    for k in range(K):
        got = _correct_per_round(res.history, k)
        mine = list(range(k, len(X), K))
        for q, r in enumerate(rounds):
            recs = mine[(r - 1) * RE:r * RE]
            if r == 1 or not recs:
                continue
            model = boundary[r - 1]
            want = sum(int(model.predict_one(X[i]) == Y[i]) for i in recs)
            assert got[q] == want, (k, r)
            checked += 1
    assert checked >= 2 * 8


def test_one_worker_progressive_predictions_are_one_processs(tmp_path):
    """One worker, rounds of one record, no replay: each record is predicted with the average
    after the record before, as one process with averaging predicts it (record for record).
    Regression: the worker predicted with its iterate."""
    X, Y = data(150, seed=12)
    single = bcfw_model(replay=0)
    want = []
    for x, y in zip(X, Y):
        want.append(int(single.predict_one(x) == y))
        single.learn_one(x, y)
    res = sd.run(bcfw_model(replay=0), (X, Y), task="multiclass", workers=1, round_examples=1,
                 checkpoint_every=10_000, cluster="inprocess", checkpoint_dir=tmp_path)
    got = _correct_per_round(res.history, 0)[:len(X)]
    assert got == want


def test_progressive_predictions_resume_from_a_cut_with_the_average(tmp_path):
    """A job stopped after round 3 and resumed from its cut predicts the following records as an
    uninterrupted job does (the workers take the average back from the mixer's cut)."""
    X, Y = data(400, seed=13)
    kw = dict(task="multiclass", workers=2, round_examples=25, cluster="inprocess")
    full = sd.run(bcfw_model(), (X, Y), checkpoint_dir=tmp_path / "a", **kw)
    sd.run(bcfw_model(), (X, Y), checkpoint_dir=tmp_path / "b", max_rounds=3, **kw)
    resumed = sd.run(bcfw_model(), (X, Y), checkpoint_dir=tmp_path / "b", **kw)
    for k in range(2):
        assert _correct_per_round(resumed.history, k)[1:] == _correct_per_round(full.history, k)[4:]


def _chain_data(n, seed, tags=("a", "b", "c", "d", "e")):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(int(rng.integers(2, 7)), 6)) for _ in range(n)]
    Y = [[tags[int(np.argmax(t[:len(tags)] if len(tags) <= 6 else t))] for t in x] for x in X]
    return X, Y, list(tags)


@pytest.mark.parametrize("window", [None, 30])
def test_sparse_chain_mixing_keeps_w_equal_A_alpha_and_the_store_sparse(tmp_path, window):
    """FW steps on a sparse chain store (the default ``chain_stats="sparse"``): the workers
    snapshot and blend the statistics in the sparse layout (gamma < 1: beta = 1, fixed), evict
    from it (a window), and the mixed point stays w = A alpha after every round. Regression: the
    snapshot converted every worker's store to the dense layout (Kc^2 transition floats per
    block, 1.8 MB at 472 Brown tags) at every round start."""
    X, Y, tags = _chain_data(160, 21)
    m = ss.SequenceTagger(labels=tags, learner=ss.learners.BCFW(lam=0.05, gap_every=None, seed=0, window=window))
    checked = []

    def check(rec, job):
        for w in job.workers:
            lr = w._obj.model.bound_learner
            assert lr is None or lr.store.sparse
        lr = job.final_model().bound_learner
        U = (lr.W.E.copy(), lr.W.T.copy(), lr.W.B.copy())
        lr._full_pass()
        for a, b in zip(U, (lr.W.E, lr.W.T, lr.W.B)):
            np.testing.assert_allclose(a, b, atol=1e-9 * max(1.0, np.abs(a).max()))
        checked.append(rec["round"])

    res = sd.run(m, (X, Y), task="sequence", workers=2, round_examples=15, passes=1.0, passes_per_round=0.5,
                 beta=1.0, mix_step="fixed", cluster="inprocess", checkpoint_dir=tmp_path, on_round=check)
    assert len(checked) == res.rounds >= 7


def test_sparse_blend_equals_the_dense_blend():
    """BlockStore.blend_sparse_stats gives the numbers the dense layout's blend gives, pair for
    pair (old blocks, blocks new in the round, pairs only one side holds, a block whose pairs
    outgrow their room)."""
    import copy
    from streamssvm._kernels.chainsparse import FLAG_TFULL
    from streamssvm._kernels.layout import M_FLAGS
    X, Y, tags = _chain_data(60, 22, tags=tuple("abcdefghijklmnopqrst"))
    m = ss.SequenceTagger(labels=tags, learner=ss.learners.BCFW(lam=0.05, gap_every=None, seed=0, replay=2))
    for x, y in zip(X[:30], Y[:30]):
        m.learn_one(x, y)
    lr = m.bound_learner
    snap_sparse = lr.dual_snapshot(layout="store")
    other = copy.deepcopy(m)
    snap_dense = other.bound_learner.dual_snapshot()
    assert "sparse" in snap_sparse and "stat" in snap_dense
    for mm in (m, other):
        for x, y in zip(X[30:], Y[30:]):
            mm.learn_one(x, y)
        mm.bound_learner.refine(2.0)
    # block 0 now holds tcap pairs none of which its start held: the union outgrows its room
    fresh = None
    for mm in (m, other):
        st = mm.bound_learner.store
        st.compact(sparse=True)   # (the dense snapshot turned the other store dense)
        j = int(st.slots()[0])
        head, p0, v0 = st.swap_sparse_stat(j, None, np.zeros((0, 2), dtype=np.int64), np.zeros(0))
        if fresh is None:
            tcap = int(st.Iar[st._kpos(j) + 1])
            held = {(int(a), int(b)) for a, b in p0}
            fresh = [(a, b) for a in range(len(tags)) for b in range(len(tags)) if (a, b) not in held][:tcap]
            assert held and len(fresh) == tcap
        while int(st.Iar[st._kpos(j) + 1]) < len(fresh):   # the same room in the other store
            st.meta[j, M_FLAGS] |= FLAG_TFULL
            st.grow_flagged()
        st.swap_sparse_stat(j, None, np.array(fresh, dtype=np.int64), np.linspace(0.1, 0.9, len(fresh)))
    lr.blend_dual(snap_sparse, 0.37)
    other.bound_learner.blend_dual(snap_dense, 0.37)
    assert lr.store.sparse and not other.bound_learner.store.sparse
    lr.store.compact(sparse=False)
    a, b = lr.store, other.bound_learner.store
    slots = a.slots()
    np.testing.assert_array_equal(slots, b.slots())
    ia, _ = a.stat_regions(slots)
    ib, _ = b.stat_regions(slots)
    np.testing.assert_allclose(a.Far[ia], b.Far[ib], rtol=0, atol=1e-15)
    np.testing.assert_array_equal(a.lval[slots], b.lval[slots])
