"""Slack-rescaling searches (paper 000) on explicit point sets, against brute force."""
import math

import numpy as np
import pytest

from streamssvm.oracles.slack import angular_search, binary_search, bisecting_search, point_oracles


def _points(rng, M):
    h = rng.uniform(-0.5, 3.0, size=M)
    g = rng.uniform(0.05, 1.0, size=M)
    return list(zip(h, g))


def _best(points):
    return max((h * g if h > 0 else 0.0) for h, g in points)


@pytest.mark.parametrize("order", ["fifo", "priority"])
def test_angular_search_is_exact_within_2m_plus_1(order):
    rng = np.random.default_rng(0)
    for trial in range(300):
        M = int(rng.integers(1, 40))
        pts = _points(rng, M)
        _, oc = point_oracles(pts)
        r = angular_search(oc, lam0=1.0, max_queries=10**6, tol=1.0, order=order)
        assert r.phi == pytest.approx(_best(pts), rel=1e-12, abs=1e-12)
        assert r.queries <= 2 * M + 1
        assert r.upper_bound >= r.phi - 1e-12


def test_theorem_1_example_only_angular_finds_it():
    """A = [eps, G], B = [H, eps], C = [H/2, G/2]: C lies under segment AB, so no lambda-oracle
    query returns it, but it is the slack maximizer."""
    eps, H, G = 1e-3, 4.0, 2.0
    pts = [(eps, G), (H, eps), (H / 2, G / 2)]
    o, oc = point_oracles(pts)
    best = _best(pts)
    assert best == pytest.approx(H * G / 4)
    for lam in np.geomspace(1e-4, 1e4, 200):
        assert o(lam)[0] != 2
    assert binary_search(o, 1e-4, 1e4, max_queries=60).label != 2
    assert bisecting_search(o, 1.0, max_queries=60).label != 2
    r = angular_search(oc, lam0=H / G)
    assert r.label == 2 and r.phi == pytest.approx(best)


def test_upper_bounds_are_valid_and_budgets_respected():
    rng = np.random.default_rng(1)
    for trial in range(200):
        pts = _points(rng, int(rng.integers(2, 60)))
        o, oc = point_oracles(pts)
        best = _best(pts)
        for r in (angular_search(oc, max_queries=3), binary_search(o, max_queries=5),
                  bisecting_search(o, max_queries=5)):
            assert r.phi <= best + 1e-12
            assert r.upper_bound >= best - 1e-9  # Lemma 5: a certified bound on max Phi
            assert r.queries <= 5
            if r.certified:
                assert r.phi >= 0.999 * best - 1e-12


def test_bisecting_terminates_without_budget():
    rng = np.random.default_rng(2)
    for trial in range(100):
        pts = _points(rng, 30)
        o, _ = point_oracles(pts)
        r = bisecting_search(o, 1.0, max_queries=10**6, tol=2.0)  # tol > 1: only the other rules stop it
        assert r.queries < 200


def test_search_argument_errors():
    o, oc = point_oracles([(1.0, 1.0)])
    with pytest.raises(ValueError):
        angular_search(oc, order="lifo")
    with pytest.raises(ValueError):
        binary_search(o, 1.0, 0.5)
