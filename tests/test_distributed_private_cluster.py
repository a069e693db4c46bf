"""``cluster="local"`` starts a Ray cluster of its own, also when another one runs on the machine
(a cluster left by a killed test run, ``ray start``, ``ray.cluster_utils.Cluster``): Ray's
``ray.init()`` without an address joins such a cluster and then refuses ``num_cpus``."""
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray", reason="needs the [distributed] extra (Ray)")

import streamssvm.distributed as sd  # noqa: E402

# a real Ray cluster in a process of its own: prints its address, ends (ray.shutdown) when its
# stdin closes
_OTHER = """
import sys, ray
ray.init(num_cpus=1, include_dashboard=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
ray.shutdown()
"""


@pytest.fixture()
def other_cluster(monkeypatch):
    assert not ray.is_initialized()
    p = subprocess.Popen([sys.executable, "-c", _OTHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = p.stdout.readline().strip()
        assert address, "the other cluster did not start"
        # how Ray finds a running cluster without an address (as the file of the last `ray start`)
        monkeypatch.setenv("RAY_ADDRESS", address)
        yield address
    finally:
        p.stdin.close()
        p.wait(timeout=60)


def test_local_starts_a_private_cluster_when_another_runs(other_cluster):
    """Before: ``ray.init(num_cpus=2)`` joined the other cluster and raised ValueError ("When
    connecting to an existing cluster, num_cpus and num_gpus must not be provided")."""
    try:
        assert sd.init_cluster("local", num_cpus=2) is True
        assert ray.get_runtime_context().gcs_address != other_cluster
        assert ray.cluster_resources().get("CPU") == 2.0
    finally:
        ray.shutdown()


def test_auto_still_joins_the_running_cluster(other_cluster):
    try:
        assert sd.init_cluster("auto") is True
        assert ray.get_runtime_context().gcs_address == other_cluster
        assert ray.cluster_resources().get("CPU") == 1.0
    finally:
        ray.shutdown()
