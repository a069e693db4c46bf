"""Distributed learning on a real multi-node Ray cluster on one machine
(``ray.cluster_utils.Cluster``: a head without CPUs and worker nodes of one CPU each, every node
its own raylet and object store), with the real Tansu broker of ``tests/conftest.py``.

One CPU per node and one CPU per worker actor place the two workers on two different nodes. A
whole node is removed mid-run (its raylet and every process on it end, not only an actor) and a
fresh node joins; the job restarts every worker from the last consistent cut and must finish
exactly-once: the same counts, Kafka offsets, weights and certificate as an uninterrupted run.
"""
import json

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="needs the [distributed] extra (Ray)")
from ray.cluster_utils import Cluster  # noqa: E402

import streamssvm as ss  # noqa: E402
import streamssvm.distributed as sd  # noqa: E402

LABELS = [0, 1, 2, 3]


@pytest.fixture(scope="module")
def nodes():
    """A head node (no CPUs: the driver and the mixer's zero-CPU actor) and two worker nodes of
    one CPU each; node death is detected within a few seconds (health checks every 0.5 s)."""
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False,
        "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 4}})
    workers = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, runtime_env=sd.runtime_env(), log_to_driver=False)
    try:
        yield c, workers
    finally:
        ray.shutdown()
        c.shutdown()


def messages(n, seed=0, d=6):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(len(LABELS), d))
    X = rng.normal(size=(n, d))
    Y = np.argmax(X @ W.T + 0.5 * rng.normal(size=(n, len(LABELS))), axis=1)
    return [json.dumps({"x": {f"f{j}": float(v) for j, v in enumerate(x)}, "y": int(y)}).encode()
            for x, y in zip(X, Y)]


def bcfw_model():
    return ss.MulticlassSSVM(labels=LABELS, n_features=2 ** 10, scale=False, learner=ss.learners.BCFW(
        lam=0.01, averaging=False, gap_every=None, seed=0, replay=1))


def committed(broker, topic, group):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=broker, group_id=group, enable_auto_commit=False)
    try:
        return {p: c.committed(TopicPartition(topic, p)) for p in (0, 1)}
    finally:
        c.close()


def test_node_removed_mid_run_finishes_exactly_once(nodes, broker, tmp_path):
    """Cuts every 3 rounds. After round 4, the node of worker 1 is removed from the cluster
    (cluster.remove_node: its raylet, object store and worker processes end) and a new node
    joins. The job restarts both workers from the cut of round 3, on the nodes then alive, and
    ends with exactly what an uninterrupted run (a cut every round) ends with."""
    cluster, _ = nodes
    from streamssvm.connectors.kafka import create_topic, produce_lines
    msgs = messages(400, seed=5)
    create_topic(broker, "tn", partitions=2)
    produce_lines(broker, "tn", msgs, partitions=2)

    def make(group, ck, **kw):
        return sd.run(bcfw_model(), f"kafka://{broker}/tn?group={group}&stop_at_end=true", task="multiclass",
                      workers=2, round_examples=40, checkpoint_dir=ck, cluster="auto", **kw)

    placed, removed, after = [], [], []
    live = {n["NodeID"] for n in ray.nodes() if n["Alive"]}

    def remove_a_node(rec, job):
        ids = ray.get([w.node_id.remote() for w in job.workers])
        if not removed:
            placed.append(ids)
        if rec["round"] == 4 and not removed:
            node = next(n for n in cluster.list_all_nodes() if n.node_id == ids[1])
            cluster.remove_node(node)
            cluster.add_node(num_cpus=1)
            removed.append(ids[1])
        elif removed and not after:
            after.append(ids)

    res = make("gn", tmp_path / "a", on_round=remove_a_node, checkpoint_every=3)
    # placement: two workers on two different worker nodes (not the CPU-less head)
    head = cluster.head_node.node_id
    assert len(placed) == 4 and all(len(set(ids)) == 2 and head not in ids and set(ids) <= live for ids in placed)
    assert removed and res.restarts == 1
    assert after and removed[0] not in after[0] and len(set(after[0])) == 2
    assert [h["round"] for h in res.history] == list(range(1, res.rounds + 1))
    ref = make("gm", tmp_path / "b")
    assert ref.restarts == 0
    assert res.examples_seen == ref.examples_seen == len(msgs) == res.model.n_blocks
    assert committed(broker, "tn", "gn") == committed(broker, "tn", "gm") == {0: 200, 1: 200}
    np.testing.assert_allclose(res.model.bound_learner.W.E, ref.model.bound_learner.W.E, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.certificate["gap"], ref.certificate["gap"], rtol=1e-12)
