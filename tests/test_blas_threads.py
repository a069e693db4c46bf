"""BLAS threads around per-query products (issue 22, item 6): one thread while a small product
runs, the libraries' setting restored after; large products left alone."""
import numpy as np

from streamssvm import blas_threads
from streamssvm.oracles.mips import BlasExactMIPS, ExactMIPS
from streamssvm.oracles.rows import DenseRows


class _Lib:
    """A stand-in for one threadpoolctl library controller: records the thread counts set."""

    def __init__(self, n):
        self.n, self.calls = n, []

    def get_num_threads(self):
        return self.n

    def set_num_threads(self, n):
        self.calls.append(n)
        self.n = n


def test_single_thread_limits_small_products_and_restores(monkeypatch):
    lib = _Lib(4)
    monkeypatch.setattr(blas_threads, "_LIBS", [lib])
    with blas_threads.single_thread(1000):
        assert lib.n == 1
    assert lib.n == 4 and lib.calls == [1, 4]
    with blas_threads.single_thread(blas_threads.SMALL):
        assert lib.n == 4   # a large product keeps every thread
    assert lib.calls == [1, 4]


def test_blas_mips_query_runs_on_one_thread(monkeypatch):
    seen = []

    class Spy(_Lib):
        def set_num_threads(self, n):
            super().set_num_threads(n)
            seen.append(n)
    monkeypatch.setattr(blas_threads, "_LIBS", [Spy(2)])
    R = DenseRows(64)
    R.ensure(200, 64)
    rng = np.random.default_rng(0)
    for c in range(200):
        R.axpy(c, np.arange(64), rng.normal(size=64), 1.0, 64.0)
    o = BlasExactMIPS(R)
    x = rng.normal(size=64)
    assert o.query(np.arange(64), x, 3) == ExactMIPS(R).query(np.arange(64), x, 3)
    assert o.n_blas == 1 and seen == [1, 2]


def test_without_threadpoolctl_nothing_changes(monkeypatch):
    monkeypatch.setattr(blas_threads, "_LIBS", [])
    with blas_threads.single_thread(10):
        assert float((np.ones((3, 3)) @ np.ones(3))[0]) == 3.0
