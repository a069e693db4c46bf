"""Distributed learning on Ray: a real local Ray cluster (one per module) and, for Kafka, the
real Tansu broker of ``tests/conftest.py``.

The actors import this checkout's ``streamssvm``: the cluster is started with
``runtime_env={"env_vars": {"PYTHONPATH": <repo root>}}`` (``streamssvm.distributed.runtime_env``).
"""
import json

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="needs the [distributed] extra (Ray)")

import streamssvm as ss  # noqa: E402
import streamssvm.distributed as sd  # noqa: E402
from streamssvm._kernels.bcfw import M_FOFF, M_L, M_NNZ  # noqa: E402

LABELS = [0, 1, 2, 3]


@pytest.fixture(scope="module")
def cluster():
    sd.init_cluster("local", num_cpus=2)   # a private cluster, also when another runs on the machine
    try:
        yield
    finally:
        ray.shutdown()


def data(n, seed=0, d=6):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(len(LABELS), d))
    X = rng.normal(size=(n, d))
    Y = [int(v) for v in np.argmax(X @ W.T + 0.5 * rng.normal(size=(n, len(LABELS))), axis=1)]
    return X, Y


def messages(n, seed=0):
    X, Y = data(n, seed)
    return [json.dumps({"x": {f"f{j}": float(v) for j, v in enumerate(x)}, "y": y}).encode() for x, y in zip(X, Y)]


def bcfw_model(**kw):
    lr = dict(lam=0.01, averaging=False, gap_every=None, seed=0, replay=1)
    lr.update(kw)
    return ss.MulticlassSSVM(labels=LABELS, n_features=2 ** 10, learner=ss.learners.BCFW(**lr))


def single_process_certificate(model):
    """The certificate of the union of the blocks at the mixed weights, computed in this process
    by the learner's own (observing) full-gap pass."""
    return model.bound_learner.certificate()


def assert_feasible(model):
    """w = A alpha with every alpha_i in the simplex (multiclass: the block statistic is alpha_i)."""
    lr = model.bound_learner
    st = lr.store
    for j in st.slots():
        L, nnz = int(st.meta[j, M_L]), int(st.meta[j, M_NNZ])
        s0 = int(st.meta[j, M_FOFF]) + nnz + L * L
        a = st.Far[s0:s0 + st.structure.stat_size(L, st.Kc)]
        if st.structure.name == "multiclass":
            assert a.min() >= -1e-12 and abs(a.sum() - 1.0) < 1e-9
    U = (lr.W.E.copy(), lr.W.T.copy(), lr.W.B.copy())
    lr._full_pass()   # the learner's own pass: re-sums U from the blocks, refreshes the gaps
    for a, b in zip(U, (lr.W.E, lr.W.T, lr.W.B)):
        np.testing.assert_allclose(a, b, atol=1e-9 * max(1.0, np.abs(a).max()))


# ----------------------------------------------------------------------------- refusals (no cluster)
@pytest.mark.parametrize("learner, msg", [
    (ss.learners.BCFW(eviction="reservoir", averaging=False, gap_every=None), "eviction='reservoir'"),
    (ss.learners.BCFW(averaging=True, evicted_average="keep", gap_every=None), "evicted_average='keep'"),
    (ss.learners.BCFW(averaging=False, max_bytes=1 << 20, gap_every=None), "max_bytes"),
])
def test_refused_bcfw_settings(learner, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(")):
        sd.run(ss.MulticlassSSVM(labels=LABELS, learner=learner), "unused.jsonl", task="multiclass")


def test_refused_learners_and_models():
    from streamssvm.learners.cutting_plane import CuttingPlane
    with pytest.raises(ValueError, match="CuttingPlane"):
        sd.run(ss.MulticlassSSVM(labels=LABELS, learner=CuttingPlane()), "unused.jsonl", task="multiclass")
    with pytest.raises(ValueError, match="sparse rows"):
        sd.run(ss.ExtremeClassifier(learner=ss.learners.MEMOIR(rows="sparse"), labels=LABELS), "unused.jsonl",
               task="extreme")
    with pytest.raises(ValueError, match="labels declared"):
        sd.run(bcfw_model().clone({"labels": None}), "unused.jsonl", task="multiclass")
    with pytest.raises(ValueError, match=r"beta must be in \(0, workers\]"):
        sd.run(bcfw_model(), "unused.jsonl", task="multiclass", workers=2, beta=3.0)


# ----------------------------------------------------------------------------- BCFW mixing
@pytest.mark.parametrize("beta, mix_step, learner", [
    (1.0, "fixed", {}),   # CoCoA averaging
    (2.0, "fixed", {}),   # CoCoA+ adding (sigma' = K = 2)
    (1.0, "line", {}),    # averaging's local steps, mixing weight by exact line search
    (2.0, "adaptive", {}),  # sigma' from the measured overlap, gamma by line search
    # gap sampling with the learner's own full gap passes (each adds back the other workers' sums)
    (2.0, "fixed", {"sampling": "gap", "gap_every": 0.3}),
    (1.0, "fixed", {"sampling": "gap", "gap_every": 0.3}),
])
def test_mixed_bcfw_point_is_dual_feasible_after_every_round(cluster, tmp_path, beta, mix_step, learner):
    X, Y = data(600, seed=1)
    # a long single-process run: its primal value bounds min P from above, so every valid dual
    # value of the mixed points must stay below it
    ref = bcfw_model(replay=2)
    for x, y in zip(X, Y):
        ref.learn_one(x, y)
    ref.refine(30)
    p_ref = ref.certificate().primal
    seen = []

    def check(rec, job):
        model = job.final_model()
        c = single_process_certificate(model)
        g = rec["certificate"]
        assert c.n_blocks == rec["n_blocks"] == g["n_blocks"]
        assert g["extra"]["raw_gap"] >= -1e-10
        np.testing.assert_allclose(c.gap, g["gap"], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(c.primal, g["primal"], rtol=1e-9)
        np.testing.assert_allclose(c.block_gap_sum, g["block_gap_sum"], rtol=1e-9, atol=1e-12)
        if rec["n_blocks"] == len(X):
            assert g["dual"] <= p_ref + 1e-9     # a feasible dual point's value is below min P
        assert_feasible(model)
        seen.append(rec["round"])

    res = sd.run(bcfw_model(**learner), (X, Y), task="multiclass", workers=2, round_examples=100,
                 checkpoint_dir=tmp_path / "ck", passes=3, passes_per_round=1.0, on_round=check, beta=beta,
                 mix_step=mix_step)
    if learner.get("gap_every"):   # the workers' own full passes ran
        assert res.model.bound_learner.full_pass_oracle_calls > 0
    assert seen == list(range(1, res.rounds + 1)) and res.rounds >= 5
    gammas = [h["gamma"] for h in res.history]
    if mix_step == "fixed":
        assert gammas == [beta / 2] * res.rounds
    if mix_step == "adaptive":
        sigmas = [h["sigma"] for h in res.history]
        assert all(1.0 <= v <= 2.0 for v in sigmas) and len(set(sigmas)) > 2
    if mix_step != "fixed":
        assert all(0.0 <= g <= 1.0 for g in gammas) and max(gammas) > 0.5
    assert res.examples_seen == len(X) and res.model.n_blocks == len(X)
    # the refinement rounds make progress on the global certificate
    gaps = [h["gap"] for h in res.history]
    assert gaps[-1] < gaps[2]


def test_a_workers_full_gap_pass_keeps_the_other_workers_sums():
    """Regression (distributed gap sampling with ``gap_every``): the learner's own full pass
    rebuilds the weight sums from the blocks it holds; on a worker the sums also hold the other
    workers' blocks. After ``hold_outside_sums`` the full pass keeps them (the sums are unchanged
    up to round-off); without it they were dropped."""
    X, Y = data(200, seed=2)
    mine, others = bcfw_model(sampling="gap", gap_every=None), bcfw_model(seed=1)
    for i, (x, y) in enumerate(zip(X, Y)):
        (mine if i % 2 == 0 else others).learn_one(x, y)
    lr = mine.bound_learner
    union = {k: v + others.bound_learner.parameters()[k] for k, v in lr.parameters().items()}
    lr.set_parameters(union)
    lr.hold_outside_sums()
    lr._full_pass(certify=False)
    for k, v in union.items():
        np.testing.assert_allclose(lr.parameters()[k], v, rtol=1e-10, atol=1e-12)
    lr._u_outside = None   # as before the fix: the pass drops the other workers' sums
    lr._full_pass(certify=False)
    assert not np.allclose(lr.parameters()["E"], union["E"])


def test_loss_sum_is_the_certificates_dual_loss():
    """_bcfw.loss_sum (sum_i L_i without an oracle call, the line search's input) equals the
    certificate's n * dual_loss, for multiclass and for chains (sparse chain statistics)."""
    from streamssvm.distributed import _bcfw
    X, Y = data(300, seed=4)
    m = bcfw_model()
    for x, y in zip(X, Y):
        m.learn_one(x, y)
    rng = np.random.default_rng(0)
    seq = ss.SequenceTagger(labels=["a", "b", "c"], learner=ss.learners.BCFW(lam=0.05, averaging=False,
                                                                              gap_every=None, seed=0))
    for _ in range(60):
        L = int(rng.integers(2, 6))
        seq.learn_one(rng.normal(size=(L, 4)), [["a", "b", "c"][int(v)] for v in rng.integers(0, 3, L)])
    for model in (m, seq):
        lr = model.bound_learner
        c = lr.certificate()
        assert c.dual_loss > 0
        np.testing.assert_allclose(_bcfw.loss_sum(lr), c.dual_loss * c.n_blocks, rtol=1e-9)


def test_line_step_maximizes_the_union_dual_on_the_segment():
    from streamssvm.distributed._bcfw import line_step
    rng = np.random.default_rng(1)
    for _ in range(50):
        U0 = {"E": rng.normal(size=(3, 2)), "T": rng.normal(size=(2, 2))}
        S = {"E": rng.normal(size=(3, 2)), "T": rng.normal(size=(2, 2))}
        L0, dL, lam, n = rng.uniform(0, 5), rng.normal(), 10 ** rng.uniform(-3, 0), int(rng.integers(5, 500))

        def dual(g):
            return (L0 + g * dL) / n - sum(float(np.sum((U0[k] + g * S[k]) ** 2)) for k in U0) / (2 * lam * n * n)

        g = line_step(U0, S, dL, lam, n, default=0.5)
        grid = np.linspace(0.0, 1.0, 2001)
        assert 0.0 <= g <= 1.0 and dual(g) >= max(dual(t) for t in grid) - 1e-12
    assert line_step({"E": np.ones(2)}, {"E": np.zeros(2)}, 1.0, 0.1, 10, default=0.25) == 0.25


def _weights(res):
    return {k: np.asarray(v) for k, v in res.model.bound_learner.parameters().items()}


@pytest.mark.parametrize("mix_step", ["fixed", "adaptive"])
def test_inprocess_workers_reproduce_the_ray_run_bit_for_bit(cluster, tmp_path, mix_step):
    """cluster="inprocess" (the workers and the mixer called in turn in this process) runs the
    same rounds as the Ray actors: every round's certificate, gamma and sigma', and the final
    weights, are equal to the last bit."""
    X, Y = data(500, seed=5)
    runs = {}
    for where in ("local", "inprocess"):
        runs[where] = sd.run(bcfw_model(replay=0), (X, Y), task="multiclass", workers=2, round_examples=60,
                             checkpoint_dir=tmp_path / where, passes=1.5, passes_per_round=0.25, cluster=where,
                             mix_step=mix_step)
    a, b = runs["local"], runs["inprocess"]
    assert a.rounds == b.rounds >= 8
    for ha, hb in zip(a.history, b.history):
        assert (ha["gap"], ha["primal"], ha["dual"], ha["gamma"], ha["sigma"]) == \
            (hb["gap"], hb["primal"], hb["dual"], hb["gamma"], hb["sigma"])
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k])


def test_adaptive_sigma_resumes_from_a_cut(tmp_path):
    """A job stopped after round 3 and resumed from its cut ends where an uninterrupted one does:
    the adaptive sigma' of the next round is part of each worker's cut. Regression: the workers
    restarted with sigma' = beta while the mixer had moved on."""
    X, Y = data(600, seed=6)
    kw = dict(task="multiclass", workers=3, round_examples=50, passes=1.0, passes_per_round=0.25,
              cluster="inprocess", mix_step="adaptive")
    whole = sd.run(bcfw_model(replay=0), (X, Y), checkpoint_dir=tmp_path / "whole", **kw)
    first = sd.run(bcfw_model(replay=0), (X, Y), checkpoint_dir=tmp_path / "cut", max_rounds=3, **kw)
    assert first.rounds == 3 and first.history[-1]["sigma"] != 3.0
    rest = sd.run(bcfw_model(replay=0), (X, Y), checkpoint_dir=tmp_path / "cut", **kw)
    assert rest.rounds == whole.rounds
    assert [h["gap"] for h in rest.history] == [h["gap"] for h in whole.history[3:]]
    wa, wb = _weights(whole), _weights(rest)
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k])


def test_refinement_rounds_cut_every_checkpoint_every_rounds(tmp_path):
    """After the stream ends, cuts follow ``checkpoint_every`` (plus the round that ended the
    stream and the last one). Regression: every round after the end of the stream was cut (49 of
    68 rounds in bench/distributed.py, 0.1 s each)."""
    X, Y = data(400, seed=7)
    res = sd.run(bcfw_model(replay=0), (X, Y), task="multiclass", workers=2, round_examples=50, passes=3.0,
                 passes_per_round=0.25, checkpoint_every=4, cluster="inprocess", checkpoint_dir=tmp_path)
    cuts = [h["round"] for h in res.history if h["cut"]]
    first_ended = next(h["round"] for h in res.history if h["ended"])
    expected = sorted({r for r in range(1, res.rounds + 1) if r % 4 == 0} | {first_ended, res.rounds})
    assert res.rounds >= 16 and cuts == expected


@pytest.mark.parametrize("mix_step", ["line", "adaptive"])
def test_carried_loss_sum_equals_the_blocks_sum_after_every_round(tmp_path, mix_step):
    """The line search's sum_i L_i at a round's start is carried over from the last round's end
    (moved by gamma (end - start)) instead of summed again: after every round it equals the sum
    over the blended blocks, streaming rounds (new blocks) and refinement rounds alike."""
    from streamssvm.distributed import _bcfw
    X, Y = data(500, seed=8)
    checked = []

    def check(rec, job):
        for w in job.workers:
            worker = w._obj   # in process: the Worker object itself
            lr = worker.model.bound_learner
            if lr is not None:
                np.testing.assert_allclose(worker.mixing.loss_next, _bcfw.loss_sum(lr), rtol=1e-10, atol=1e-12)
                checked.append(rec["gamma"])

    sd.run(bcfw_model(replay=0), (X, Y), task="multiclass", workers=3, round_examples=40, passes=1.0,
           passes_per_round=0.25, cluster="inprocess", mix_step=mix_step, beta=1.0, on_round=check,
           checkpoint_dir=tmp_path)
    assert len(checked) >= 24
    if mix_step == "line":
        assert min(checked) < 1.0   # blended rounds (gamma < 1) among them


def test_overlap_of_the_workers_changes():
    from streamssvm.distributed._bcfw import overlap
    rng = np.random.default_rng(2)
    d = [{"E": rng.normal(size=(3, 4))} for _ in range(4)]
    assert overlap(d) == pytest.approx(float(np.sum(sum(x["E"] for x in d) ** 2)) /
                                       sum(float(np.sum(x["E"] ** 2)) for x in d))
    assert overlap([{"E": d[0]["E"]}] * 4) == pytest.approx(4.0)
    assert overlap([{"E": np.zeros(3)}, {}]) is None


def test_lambda_following_n_certifies_the_single_run_objective(cluster, tmp_path):
    """BCFW(lam=None): lambda follows n (min(1e-3, 6 / n)) in a distributed run as in a single
    one, so the global certificate is the saved model's own. Regression: the union kept lambda
    at 1e-3 while the model it saved certified 6 / n (past 6,000 examples the two differed)."""
    X, Y = data(6400, seed=3)
    seen = []

    def check(rec, job):
        c = single_process_certificate(job.final_model())
        g = rec["certificate"]
        assert g["lam"] == pytest.approx(min(1e-3, 6.0 / rec["n_blocks"]))
        np.testing.assert_allclose(c.primal, g["primal"], rtol=1e-9)
        np.testing.assert_allclose(c.gap, g["gap"], rtol=1e-9, atol=1e-12)
        seen.append(rec["n_blocks"])

    res = sd.run(bcfw_model(lam=None), (X, Y), task="multiclass", workers=2, round_examples=1600, passes=1,
                 passes_per_round=1.0, on_round=check)
    assert max(seen) == len(X) > 6000
    assert res.model.certificate().lam == pytest.approx(6.0 / len(X))


def test_sequence_tagger_mixing_keeps_w_equal_A_alpha(cluster, tmp_path):
    rng = np.random.default_rng(3)
    tags = ["a", "b", "c"]
    X, Y = [], []
    for _ in range(120):
        L = int(rng.integers(2, 6))
        y = [tags[int(v)] for v in rng.integers(0, 3, L)]
        X.append(np.array([[1.0 if tags.index(t) == j else 0.0 for j in range(3)] + list(rng.normal(size=2))
                           for t in y]))
        Y.append(y)
    m = ss.SequenceTagger(labels=tags, learner=ss.learners.BCFW(lam=0.05, averaging=False, gap_every=None, seed=0))
    res = sd.run(m, (X, Y), task="sequence", workers=2, round_examples=20, checkpoint_dir=tmp_path / "ck",
                 passes=1, passes_per_round=1.0)
    c = single_process_certificate(res.model)
    np.testing.assert_allclose(c.gap, res.certificate["gap"], rtol=1e-9, atol=1e-12)
    assert res.model.n_blocks == len(X)
    assert_feasible(res.model)


def test_chain_mixing_in_rounds_of_one_example_stays_a_valid_dual_point(tmp_path):
    """The short rounds that bring chains near one machine's passes (bench/results/distributed_words.md:
    rounds of 1/(20 K) pass, a block or two per worker) with K = 4 and adaptive mixing: after every
    round, stream and refinement, the job's certificate is the union's own (computed in this
    process from the merged blocks), w = A alpha, and the dual stays below a long single run's
    primal (a feasible point's dual bounds min P from below)."""
    rng = np.random.default_rng(5)
    tags = ["a", "b", "c"]
    X, Y = [], []
    for _ in range(48):
        L = int(rng.integers(2, 6))
        y = [tags[int(v)] for v in rng.integers(0, 3, L)]
        X.append(np.array([[1.0 if tags.index(t) == j else 0.0 for j in range(3)] + list(rng.normal(size=2))
                           for t in y]))
        Y.append(y)

    def model():
        return ss.SequenceTagger(labels=tags, learner=ss.learners.BCFW(lam=0.05, averaging=False, gap_every=None,
                                                                       seed=0, replay=0))
    ref = model()
    for x, y in zip(X, Y):
        ref.learn_one(x, y)
    ref.bound_learner.refine(40)
    p_ref = ref.bound_learner.certificate().primal
    seen = []

    def check(rec, job):
        m = job.final_model()
        c = single_process_certificate(m)
        g = rec["certificate"]
        np.testing.assert_allclose(c.gap, g["gap"], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(c.primal, g["primal"], rtol=1e-9)
        assert g["dual"] <= p_ref + 1e-9
        assert_feasible(m)
        seen.append((rec["new_examples"], rec["sigma"], rec["gamma"]))

    res = sd.run(model(), (X, Y), task="sequence", workers=4, round_examples=1, passes=1.0,
                 passes_per_round=1.0 / 16, checkpoint_dir=tmp_path / "ck", cluster="inprocess", on_round=check)
    assert res.model.n_blocks == len(X) and len(seen) == res.rounds >= 12 + 16
    assert sum(s[0] for s in seen) == len(X)
    assert all(1.0 <= s[1] <= 4.0 and 0.0 <= s[2] <= 1.0 for s in seen)


def test_file_shards_and_metrics_log(cluster, tmp_path, capsys):
    """A JSONL file: worker k learns records k mod K (a bad line is dead-lettered, not learned);
    the metrics log gets one line per certified round with the per-worker part."""
    lines = [line.decode() for line in messages(301, seed=7)]
    lines[100] = "{broken"
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    log = tmp_path / "metrics.jsonl"
    res = sd.run(bcfw_model(), str(path), task="multiclass", workers=2, round_examples=60,
                 checkpoint_dir=tmp_path / "ck", metrics_path=str(log))
    assert res.examples_seen == 300 == res.model.n_blocks
    assert sorted(w["n_blocks"] for w in res.workers) == [150, 150]
    recs = [json.loads(v) for v in log.read_text().splitlines()]
    assert len(recs) == res.rounds and recs[-1]["n_blocks"] == 300
    assert recs[-1]["gap"] == pytest.approx(res.certificate["gap"])
    assert [w["worker"] for w in recs[-1]["workers"]] == [0, 1]
    # report: per-worker throughput and the global gap, from the newest cut
    from streamssvm.distributed._cli import report
    capsys.readouterr()
    report(tmp_path / "ck", as_json=True)
    rep = json.loads(capsys.readouterr().out)
    assert rep["examples_seen"] == 300 and [w["n_blocks"] for w in rep["workers"]] == [150, 150]
    assert all(w["throughput"] > 0 for w in rep["workers"])
    assert rep["global_certificate"]["gap"] == pytest.approx(res.certificate["gap"])


# ----------------------------------------------------------------------------- SGD parameter mixing
def test_sgd_parameter_mixing_averages_the_workers(cluster, tmp_path):
    X, Y = data(400, seed=2)
    m = ss.MulticlassSSVM(labels=LABELS, learner=ss.learners.SGD(lam=0.01, seed=0))
    rounds = []

    def grab(rec, job):
        ws = ray.get([w.model_state.remote() for w in job.workers])
        E = [s["learner"]["a"] * s["learner"]["E"] for s in ws]
        rounds.append(E)

    res = sd.run(m, (X, Y), task="multiclass", workers=2, round_examples=50, checkpoint_dir=tmp_path / "ck",
                 on_round=grab)
    assert res.examples_seen == len(X)
    for E in rounds:   # after every round every worker continues from the same (mixed) weights
        np.testing.assert_allclose(E[0], E[1])
    assert np.abs(rounds[-1][0]).sum() > 0
    acc = np.mean([res.model.predict_one(x) == y for x, y in zip(X, Y)])
    assert acc > 0.6
    assert res.certificate["exact"] is False and np.isinf(res.certificate["gap"])


def test_memoir_parameter_mixing(cluster, tmp_path):
    X, Y = data(400, seed=4)
    m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(lam=1e-3, mips="hnsw", rows="dense", seed=0), labels=LABELS)
    rounds = []

    def grab(rec, job):
        ws = ray.get([w.model_state.remote() for w in job.workers])
        rounds.append([s["learner"]["acc"] * s["learner"]["rows"]["V"] for s in ws])

    res = sd.run(m, (X, Y), task="extreme", workers=2, round_examples=50, checkpoint_dir=tmp_path / "ck",
                 on_round=grab)
    assert res.examples_seen == len(X) and len(rounds) == res.rounds
    for V in rounds:   # every worker continues from the mixed rows
        np.testing.assert_allclose(V[0], V[1], rtol=1e-12, atol=1e-14)
    acc = np.mean([res.model.predict_one(x) == y for x, y in zip(X, Y)])
    assert acc > 0.6
    assert np.isfinite(res.certificate["primal"]) and res.certificate["exact"] is False


# ----------------------------------------------------------------------------- Kafka
def kafka_job(broker, topic, msgs, ck, group, **kw):
    from streamssvm.connectors.kafka import create_topic, produce_lines
    create_topic(broker, topic, partitions=2)
    produce_lines(broker, topic, msgs, partitions=2)
    return lambda **more: sd.run(bcfw_model(), f"kafka://{broker}/{topic}?group={group}&stop_at_end=true",
                                 task="multiclass", workers=2, round_examples=40, checkpoint_dir=ck,
                                 **{**kw, **more})


def committed(broker, topic, group):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=broker, group_id=group, enable_auto_commit=False)
    try:
        return {p: c.committed(TopicPartition(topic, p)) for p in (0, 1)}
    finally:
        c.close()


def test_two_workers_two_partitions_count_and_certificate(cluster, broker, tmp_path):
    msgs = messages(300)
    job = kafka_job(broker, "t2", msgs, tmp_path / "ck", "g2")
    res = job(passes=1, passes_per_round=1.0)
    assert res.examples_seen == len(msgs)
    assert sum(w["n_blocks"] for w in res.workers) == len(msgs) == res.model.n_blocks
    assert [w["n_blocks"] for w in res.workers] == [150, 150]   # one partition each
    c = single_process_certificate(res.model)
    np.testing.assert_allclose(c.gap, res.certificate["gap"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(c.dual, res.certificate["dual"], rtol=1e-9, atol=1e-12)
    assert committed(broker, "t2", "g2") == {0: 150, 1: 150}
    # a second job on the same checkpoint directory resumes after the last cut: nothing new
    again = job()
    assert again.examples_seen == len(msgs) and again.model.n_blocks == len(msgs)


def test_killed_worker_resumes_from_last_cut_exactly_once(cluster, broker, tmp_path):
    """Cuts every 3 rounds. After round 4 (one round past the cut of round 3), worker 1 runs one
    more round ahead (it consumes and learns 40 more messages that no cut holds), then worker 0
    is killed (ray.kill). The job restarts every worker from the cut of round 3. Compared with an
    uninterrupted run of the same topic with a cut every round: the number of examples and
    blocks (each message once), the Kafka offsets committed, and the final mixed weights and
    certificate (rounds hold exactly ``round_examples`` records per worker, so the runs are
    deterministic and must agree to round-off, whatever the cut cadence)."""
    msgs = messages(400, seed=5)
    from streamssvm.connectors.kafka import create_topic, produce_lines
    create_topic(broker, "tk", partitions=2)
    produce_lines(broker, "tk", msgs, partitions=2)

    def make(group, ck, **kw):   # averaging at the mixer (the learner's default): in the cut too
        return sd.run(bcfw_model(averaging=True), f"kafka://{broker}/tk?group={group}&stop_at_end=true",
                      task="multiclass",
                      workers=2, round_examples=40, checkpoint_dir=ck, **kw)

    killed = []

    def kill(rec, job):
        if rec["round"] == 4 and not killed:
            info, _ = ray.get(job.workers[1].learn_round.options(num_returns=2).remote(40))
            assert info["n_new"] == 40
            ray.kill(job.workers[0])
            killed.append(rec["round"])

    res = make("gk", tmp_path / "a", on_round=kill, checkpoint_every=3)
    assert killed == [4] and res.restarts == 1
    assert [h["round"] for h in res.history] == list(range(1, res.rounds + 1))
    ref = make("gr", tmp_path / "b")
    assert res.restarts == 1 and ref.restarts == 0
    assert res.examples_seen == ref.examples_seen == len(msgs)
    assert res.model.n_blocks == len(msgs)
    assert committed(broker, "tk", "gk") == committed(broker, "tk", "gr") == {0: 200, 1: 200}
    np.testing.assert_allclose(res.model.bound_learner.W.E, ref.model.bound_learner.W.E, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.certificate["gap"], ref.certificate["gap"], rtol=1e-12)
    (A, za), (B, zb) = res.model.bound_learner.averaged_u(), ref.model.bound_learner.averaged_u()
    np.testing.assert_allclose(A.E, B.E, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(za, zb, rtol=1e-12)
    assert np.abs(A.E - res.model.bound_learner.W.E).max() > 1e-6   # the average, not the iterate


def test_killed_during_an_asynchronous_cut_resumes_from_the_previous_cut_exactly_once(cluster, broker, tmp_path):
    """Asynchronous cuts (``async_cuts=True``): the cut of round r is snapshotted at the end of round r,
    its parts are written by the workers' threads while round r + 1 learns, and the mixer commits
    it in a thread after that round, while round r + 2 learns; the Kafka offsets of cut r follow
    once that commit is done. Right after round 4 -- its cut staged, its parts in flight, the cut
    of round 3 being committed (the test waits until it is), the Kafka offsets those of round 2 --
    worker 0 is killed. The job restarts every worker from the cut of round 3 (round 4 runs again)
    and ends with the counts, Kafka offsets, weights and certificate of an uninterrupted run with
    synchronous cuts."""
    from streamssvm.distributed._cut import CutStore
    msgs = messages(400, seed=6)
    from streamssvm.connectors.kafka import create_topic, produce_lines
    create_topic(broker, "ta", partitions=2)
    produce_lines(broker, "ta", msgs, partitions=2)

    def make(group, ck, **kw):   # averaging at the mixer: its average is in the staged cut too
        return sd.run(bcfw_model(averaging=True), f"kafka://{broker}/ta?group={group}&stop_at_end=true",
                      task="multiclass",
                      workers=2, round_examples=40, checkpoint_dir=ck, **kw)

    rounds, at_kill = [], {}

    def kill(rec, job):
        rounds.append(rec["round"])
        if rec["round"] == 4 and not at_kill:
            assert job.pending == 4 and job.committing == 3
            import time
            deadline = time.monotonic() + 30
            while CutStore(tmp_path / "a").latest()[0]["round"] < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            at_kill["cut"] = CutStore(tmp_path / "a").latest()[0]["round"]
            at_kill["offsets"] = committed(broker, "ta", "ga")
            ray.kill(job.workers[0])

    res = make("ga", tmp_path / "a", on_round=kill, async_cuts=True)
    assert at_kill == {"cut": 3, "offsets": {0: 80, 1: 80}}
    assert rounds[:5] == [1, 2, 3, 4, 4] and res.restarts == 1
    assert [h["round"] for h in res.history] == list(range(1, res.rounds + 1))
    # the parts of rounds 1, 2, (again) 4 and 5 were written during the next round; the restarted
    # workers had none in flight; the cut of round 6 (the stream's end) was synchronous
    assert res.rounds == 6 and [len(h["parts_written"]) for h in res.history] == [0, 2, 2, 0, 2, 2]
    ref = make("gb", tmp_path / "b", async_cuts=False)
    assert ref.restarts == 0 and not any(h["parts_written"] for h in ref.history)
    assert res.examples_seen == ref.examples_seen == len(msgs) == res.model.n_blocks
    assert committed(broker, "ta", "ga") == committed(broker, "ta", "gb") == {0: 200, 1: 200}
    np.testing.assert_allclose(res.model.bound_learner.W.E, ref.model.bound_learner.W.E, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.certificate["gap"], ref.certificate["gap"], rtol=1e-12)
    (A, za), (B, zb) = res.model.bound_learner.averaged_u(), ref.model.bound_learner.averaged_u()
    np.testing.assert_allclose(A.E, B.E, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(za, zb, rtol=1e-12)
    st, _ = CutStore(tmp_path / "a").latest()
    assert st["round"] == res.rounds   # the last cut is written synchronously


def test_mixer_killed_while_it_commits_a_cut_resumes_exactly_once(cluster, broker, tmp_path):
    """The mixer writes its own state as an incremental part of every cut (the weights' and the
    average's changed words, ``parts/round-N/mixer.ssvm``). Right after round 4 -- with
    asynchronous cuts the mixer's thread is committing the cut of round 3, writing its part --
    the mixer actor is killed. The job restarts every actor from the newest cut whose parts (the
    mixer's and the older parts its patches need included) all verify, and ends with the counts,
    Kafka offsets, weights and certificate of an uninterrupted run."""
    from streamssvm.distributed._cut import CutStore
    msgs = messages(400, seed=8)
    from streamssvm.connectors.kafka import create_topic, produce_lines
    create_topic(broker, "tm", partitions=2)
    produce_lines(broker, "tm", msgs, partitions=2)

    def make(group, ck, **kw):
        return sd.run(bcfw_model(averaging=True), f"kafka://{broker}/tm?group={group}&stop_at_end=true",
                      task="multiclass", workers=2, round_examples=40, checkpoint_dir=ck, **kw)

    rounds, killed = [], []

    def kill(rec, job):
        rounds.append(rec["round"])
        if rec["round"] == 4 and not killed:
            assert job.committing == 3
            killed.append(True)
            ray.kill(job.mixer)

    res = make("gm", tmp_path / "a", on_round=kill, async_cuts=True)
    assert killed and res.restarts == 1 and rounds[:4] == [1, 2, 3, 4]
    assert rounds[4] in (3, 4)   # resumed from the cut of round 2 or 3: what was committed
    assert [h["round"] for h in res.history] == list(range(1, res.rounds + 1))
    ref = make("gn", tmp_path / "b")
    assert res.examples_seen == ref.examples_seen == len(msgs) == res.model.n_blocks
    assert committed(broker, "tm", "gm") == committed(broker, "tm", "gn") == {0: 200, 1: 200}
    np.testing.assert_allclose(res.model.bound_learner.W.E, ref.model.bound_learner.W.E, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.certificate["gap"], ref.certificate["gap"], rtol=1e-12)
    (A, za), (B, zb) = res.model.bound_learner.averaged_u(), ref.model.bound_learner.averaged_u()
    np.testing.assert_allclose(A.E, B.E, rtol=1e-12, atol=1e-14)
    st, _ = CutStore(tmp_path / "a").latest()
    assert st["round"] == res.rounds and "mixer_part" in CutStore(tmp_path / "a").cuts.load(
        CutStore(tmp_path / "a").cuts.list()[-1])[0]


def test_resume_with_more_workers_moves_blocks_with_their_partitions(cluster, broker, tmp_path):
    """A job of 2 workers on a 4-partition topic stops after 2 rounds; the same checkpoint
    directory is resumed with 4 workers: each new worker gets the dual blocks of its partition
    (the cut records the partition of every block) and continues from that partition's offset."""
    from streamssvm.connectors.kafka import create_topic, produce_lines
    from streamssvm.checkpoint import load_state
    from streamssvm.distributed._cut import CutStore
    msgs = messages(400, seed=9)
    create_topic(broker, "t4", partitions=4)
    produce_lines(broker, "t4", msgs, partitions=4)
    uri = f"kafka://{broker}/t4?group=g4&stop_at_end=true"
    first = sd.run(bcfw_model(averaging=True), uri, task="multiclass", workers=2, round_examples=40,
                   checkpoint_dir=tmp_path / "ck", max_rounds=2)
    assert first.examples_seen == 160 and first.rounds == 2
    res = sd.run(bcfw_model(averaging=True), uri, task="multiclass", workers=4, round_examples=40,
                 checkpoint_dir=tmp_path / "ck")
    assert res.examples_seen == len(msgs) == res.model.n_blocks
    assert [w["n_blocks"] for w in res.workers] == [100, 100, 100, 100]
    st, _ = CutStore(tmp_path / "ck").latest()
    for p in st["parts"]:
        part, _ = load_state(p["path"])
        assert set(part["worker"]["block_partitions"].tolist()) == {p["worker"]}
        assert part["worker"]["position"]["offsets"] == {str(p["worker"]): 100}
    assert committed(broker, "t4", "g4") == {0: 100, 1: 100}
    c = single_process_certificate(res.model)   # (with averaging: of the average; its iterate's gap is the job's)
    np.testing.assert_allclose(c.extra["iterate_gap"], res.certificate["gap"], rtol=1e-9, atol=1e-12)
    assert c.extra["dual_averaged"] <= c.primal   # the average moved with the blocks: a dual point of the union
    assert_feasible(res.model)


def test_cli_run_workers_and_report(cluster, tmp_path, capsys):
    """``streamssvm run --workers 2 ...`` then ``streamssvm report`` on its checkpoint directory."""
    from streamssvm.cli import main
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(v.decode() for v in messages(200, seed=11)) + "\n")
    ck = tmp_path / "ck"
    assert main(["run", "--workers", "2", "--cluster", "local", "--source", str(path), "--task", "multiclass",
                 "--labels", "0,1,2,3", "--n-features", "1024", "--lam", "0.01", "--round-examples", "50",
                 "--checkpoint-dir", str(ck), "--refine-passes", "1", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["examples_seen"] == 200 and out["global_certificate"]["n_blocks"] == 200
    assert main(["report", str(ck), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["examples_seen"] == 200 and len(rep["workers"]) == 2
    assert rep["global_certificate"]["gap"] == pytest.approx(out["global_certificate"]["gap"])


def test_cli_workers_take_dict_features_and_labels_as_a_single_run_does(cluster, tmp_path, capsys):
    """Regression: ``run --workers 2`` on dict features stopped with "--workers needs --labels",
    then "needs one feature index for all workers"; with ``--labels 0,1,2,3`` on records whose
    y is the string "1", the run died with "the label capacity changed inside a round"."""
    from streamssvm.cli import main
    path = tmp_path / "s.jsonl"
    with open(path, "w") as f:
        for v in messages(200, seed=12):
            rec = json.loads(v)
            rec["y"] = str(rec["y"])
            f.write(json.dumps(rec) + "\n")
    base = ["run", "--workers", "2", "--source", str(path), "--task", "multiclass", "--round-examples", "50",
            "--json", "--no-progress"]
    assert main(base) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["examples_seen"] == 200
    assert "labels read from" in cap.err and "hashed into" in cap.err
    assert main(base + ["--labels", "0,1,2,3", "--save", str(tmp_path / "m.ssvm")]) == 0
    assert json.loads(capsys.readouterr().out)["examples_seen"] == 200
    assert sorted(ss.load(tmp_path / "m.ssvm").labels) == ["0", "1", "2", "3"]


def test_default_mixing_is_adaptive_for_bcfw_and_fixed_for_parameter_mixing(tmp_path):
    """``mix_step=None`` (default): adaptive sigma' for BCFW with several workers (the measured
    best: bench/results/distributed.md), the fixed weight for one worker and for SGD / MEMOIR."""
    X, Y = data(300, seed=9)
    kw = dict(task="multiclass", round_examples=50, passes=0.5, passes_per_round=0.25, cluster="inprocess")
    res = sd.run(bcfw_model(replay=0), (X, Y), workers=3, checkpoint_dir=tmp_path / "a", **kw)
    assert len({h["sigma"] for h in res.history}) > 1   # sigma' follows the measured overlap
    one = sd.run(bcfw_model(replay=0), (X, Y), workers=1, checkpoint_dir=tmp_path / "b", **kw)
    assert {h["gamma"] for h in one.history} == {1.0}
    sgd = ss.MulticlassSSVM(learner=ss.learners.SGD(lam=0.01), labels=LABELS, scale=False)
    res = sd.run(sgd, (X, Y), workers=2, checkpoint_dir=tmp_path / "c", **kw)
    assert {h["gamma"] for h in res.history} == {0.5}


def test_default_refinement_rounds_are_one_twentieth_k_of_a_pass(tmp_path):
    """``passes_per_round=None`` (default): a refinement round is 1 / (20 K) pass of the data held,
    so K = 8 workers mix four times as often per pass as K = 2 (rounds of 1/20 pass took 1.63x one
    process's passes to gap 0.1 on 10k OCR letters at K = 8, rounds of 1/(20 K) 1.19x:
    bench/results/distributed.md); the streaming rounds keep ``round_examples`` per worker; the
    mixed point stays dual-feasible and a job stops once ``passes`` are done."""
    X, Y = data(1280, seed=4)   # n >= 20 K^2: a round holds a step per worker at K = 8
    from streamssvm.distributed._run import RunOptions
    assert RunOptions(task="multiclass").passes_per_round is None
    assert sd.default_passes_per_round(2) == 1 / 40 and sd.default_passes_per_round(8) == 1 / 160
    runs = {}
    for K in (2, 8):
        res = sd.run(bcfw_model(replay=0), (X, Y), task="multiclass", workers=K, round_examples=10, passes=0.125,
                     snapshot_every=10_000, checkpoint_every=10_000, cluster="inprocess",
                     checkpoint_dir=tmp_path / str(K))
        stream = [h for h in res.history if h["new_examples"] > 0]
        refine = [h for h in res.history if h["refine_passes"] > 0]
        assert sum(h["new_examples"] for h in stream) == 1280 and len(stream) == 1280 // (10 * K)
        assert [h["refine_passes"] for h in refine] == pytest.approx([1.0 / (20 * K)] * len(refine))
        assert sum(h["refine_passes"] for h in refine) == pytest.approx(0.125)
        assert_feasible(res.model)
        runs[K] = len(refine)
    assert runs == {2: 5, 8: 20}


def test_default_streaming_rounds_are_one_twentieth_k_of_a_known_stream(tmp_path):
    """``round_examples=None`` (default): an in-memory stream of n examples goes in rounds of
    ceil(n / (20 K^2)) new examples per worker (1/(20 K) pass), at most 500; a file or a topic
    (length unknown) 500 per worker. (500 per worker streamed 2,000 Brown sentences in one round
    at K = 4: 1.52x one process's passes to gap 0.1 against 1.41x in rounds of 1/(20 K) pass.)"""
    from streamssvm.distributed._run import RunOptions
    assert RunOptions(task="multiclass").round_examples is None
    assert [sd.default_round_examples(K, 2000) for K in (1, 2, 4, 8)] == [100, 25, 7, 2]
    assert sd.default_round_examples(2, 10 ** 6) == 500 and sd.default_round_examples(8, None) == 500
    X, Y = data(160, seed=5)
    for K, per_worker in ((2, 2), (4, 1)):
        res = sd.run(bcfw_model(replay=0), (X, Y), task="multiclass", workers=K, max_rounds=3, snapshot_every=10_000,
                     checkpoint_every=10_000, cluster="inprocess", checkpoint_dir=tmp_path / str(K))
        assert [h["new_examples"] for h in res.history] == [per_worker * K] * 3


def test_default_refinement_rounds_take_a_step_on_every_worker(tmp_path):
    """With the default round length a refinement round is 1/(20 K) pass, under one block step per
    worker once n < 20 K^2 (10k OCR letters at K = 32: the job counted refinement passes and took no
    step, gap 1.51); the default takes at least one step on the worker holding the fewest blocks."""
    X, Y = data(160, seed=6)
    gaps = {}
    for passes in (0.0, 0.5):
        res = sd.run(bcfw_model(replay=0), (X, Y), task="multiclass", workers=8, passes=passes,
                     snapshot_every=10_000, checkpoint_every=10_000, cluster="inprocess",
                     checkpoint_dir=tmp_path / str(passes))
        refine = [h for h in res.history if h["refine_passes"] > 0]
        assert all(h["refine_passes"] >= 1.0 / 20 - 1e-12 for h in refine)   # 160 / 8 = 20 blocks per worker
        assert_feasible(res.model)
        gaps[passes] = res.certificate["gap"]
    assert gaps[0.5] < 0.9 * gaps[0.0]
