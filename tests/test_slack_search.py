"""Slack-rescaling searches (Choi, Meshi & Srebro, AISTATS 2016) on explicit point sets, against brute force."""
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


@pytest.mark.parametrize("kind_name,L,K", [("chain", 4, 3), ("chain", 6, 4), ("multiclass", 1, 7), ("multilabel", 1, 6)])
def test_searches_on_structure_levels_reach_the_exact_slack_oracle(kind_name, L, K):
    from streamssvm._kernels import structops as so
    from streamssvm._kernels.bundles import model
    from streamssvm.workspace import Workspace
    from streamssvm.structures import Chain, MultiClass, MultiLabel
    from test_structures import make
    cls = {"chain": Chain, "multiclass": MultiClass, "multilabel": MultiLabel}[kind_name]
    rng = np.random.default_rng(7)
    for trial in range(30):
        Kc = K + 1
        st, E, T, B, C, tp, fi, fv = make(cls, rng, K, Kc, L, 5, cost=cls is MultiClass)
        scale = float(rng.uniform(0.5, 3.0))
        if st.kind in (so.MULTILABEL, so.MLPAIR):
            ytrue = np.array(sorted(rng.choice(K, size=rng.integers(0, K + 1), replace=False)), np.int32)
            ly, Ki, lablen = len(ytrue), K, Kc
        else:
            ytrue = rng.integers(0, K, size=L).astype(np.int32)
            ly, Ki, lablen = L, 1, L
        S = np.zeros((L, Kc))
        so.emission_scores(E, scale, tp, fi, fv, L, K, S)
        V = np.zeros((L + 1, Kc, L + 1))
        mod = model(st, K, Kc, C)
        scratch = Workspace(st).ensure(L, Kc).scratch(L, True)
        exact = so.slack_oracle(mod, (E, T, B), S, scale, L, ytrue, ly, Ki, scratch, np.zeros(lablen, np.int32))
        hs, gs = np.zeros(max(K, L) + 1), np.zeros(max(K, L) + 1)
        n = so.slack_levels(mod, (E, T, B), S, scale, L, ytrue, ly, Ki, scratch, hs, gs)
        o, oc = point_oracles(list(zip(hs[:n], gs[:n])))
        r = angular_search(oc, lam0=1.0, tol=1.0)
        assert r.phi == pytest.approx(exact, abs=1e-9)
        assert r.queries <= 2 * n + 1
        # the lambda-oracle over the levels is the structure's loss-augmented decoder
        lam = float(rng.uniform(0.2, 5.0))
        lab = np.zeros(lablen, np.int32)
        val = so.decode(mod, (E, T, B), S, scale, L, ytrue, ly, lam, Ki, scratch, lab)
        ts = so.labeling_score(st.kind, S, T, B, scale, ytrue, L, K, st.use_trans) if st.kind not in (so.MULTILABEL, so.MLPAIR) \
            else float(sum(S[0, k] for k in ytrue))
        _, h, g = o(lam)
        assert 1.0 + val - ts == pytest.approx(max(h + lam * g, 1.0), abs=1e-9)


def test_sarawagi_gupta_valid_labels_and_bounds_on_random_points():
    """Returns an answer of the lambda-oracle (a real label), never a bound below max Phi, and
    the eq.-(14) objective of its label is the best among the labels it saw; min F bounds
    eq. (14) over all labels."""
    from streamssvm.oracles.slack import sarawagi_gupta_search
    rng = np.random.default_rng(3)
    for trial in range(300):
        pts = _points(rng, int(rng.integers(1, 50)))
        o, _ = point_oracles(pts)
        best = _best(pts)
        xi = float(rng.uniform(0.0, 1.5))
        r = sarawagi_gupta_search(o, xi, lam_hi=max(xi, 1e-3) / 0.05 ** 2, max_queries=int(rng.integers(3, 80)))
        assert r.queries <= 80
        assert r.upper_bound >= best - 1e-9
        if r.label is not None:
            h, g = pts[r.label]
            assert h > 0 and g > 0 and r.phi == pytest.approx(h * g)
        else:
            assert r.phi == 0.0
        if r.certified:
            assert r.phi >= 0.999 * best - 1e-12
        sg_max = max((h - xi / g for h, g in pts if h > 0 and g > 0), default=-np.inf)
        assert sg_max <= r.history[-1]["min_F"] + 1e-9


def test_sarawagi_gupta_misses_the_theorem_1_maximizer_that_angular_finds():
    from streamssvm.oracles.slack import sarawagi_gupta_search
    eps, H, G = 1e-3, 4.0, 2.0
    pts = [(eps, G), (H, eps), (H / 2, G / 2)]
    o, oc = point_oracles(pts)
    best = _best(pts)
    for xi in (0.0, 0.5, 1.0, 1.9, 3.0):
        r = sarawagi_gupta_search(o, xi, lam_hi=max(xi, 1e-3) / eps ** 2, max_queries=200)
        assert r.label != 2 and r.phi < 0.01 * best          # C is never found
        assert r.upper_bound >= best                           # and the bound stays honest
        assert not r.certified
    # C violates the constraint for these xi (Phi(C) = 2 > xi), yet SG never sees it
    ra = angular_search(oc, lam0=H / G)
    assert ra.label == 2 and ra.phi == pytest.approx(best)
    with pytest.raises(ValueError):
        sarawagi_gupta_search(o, -1.0, 1.0)
    with pytest.raises(ValueError):
        sarawagi_gupta_search(o, 1.0, 0.0)


@pytest.mark.parametrize("kind_name,L,K", [("chain", 4, 3), ("multiclass", 1, 6), ("multilabel", 1, 5),
                                           ("pairwise", 1, 5)])
def test_example_oracles_against_brute_force(kind_name, L, K):
    """ExampleOracles: the lambda-oracle (loss-scaled decoding) attains max_y h + lam g over all
    labelings, the constrained oracle on the level points returns the best point of the angle,
    every key maps to a labeling with the reported (h, g), and the counters count."""
    from streamssvm._kernels import structops as so
    from streamssvm.oracles.structured import ExampleOracles
    from streamssvm.structures import Chain, MultiClass, MultiLabel
    from test_structures import make
    cls = {"chain": Chain, "multiclass": MultiClass, "multilabel": MultiLabel, "pairwise": "pairwise"}[kind_name]
    rng = np.random.default_rng(11)
    for trial in range(10):
        Kc = K + 1
        st, E, T, B, C, tp, fi, fv = make(cls, rng, K, Kc, L, 5)
        scale = float(rng.uniform(0.5, 3.0))
        ml = st.kind in (so.MULTILABEL, so.MLPAIR)
        if ml:
            ytrue = np.array(sorted(rng.choice(K, size=rng.integers(0, K + 1), replace=False)), np.int32)
            Ki = K
        else:
            ytrue = rng.integers(0, K, size=L).astype(np.int32)
            Ki = 1
        o = ExampleOracles(st, K, Kc, C)
        o.prepare(E, T, B, scale, tp, fi, fv, ytrue, Ki)
        pts = []
        for y in st.all_labelings(L, K):
            yy = np.concatenate([y, np.zeros(Kc - K, np.int32)]).astype(np.int32) if ml else np.asarray(y, np.int32)
            pts.append(o.hg(yy))
        for lam in (0.0, 0.3, 1.0, 4.0):
            key, h, g = o.lam_oracle(lam)
            assert h + lam * g == pytest.approx(max(a + lam * b for a, b in pts), abs=1e-9)
            assert o.hg(o.labeling(key)) == pytest.approx((h, g), abs=1e-12)
        for hi, lo in ((np.inf, 0.0), (2.0, 0.1), (0.5, 0.05)):
            res = o.constrained(1.0, hi, lo, True, True)
            inside = [(a, b) for a, b in pts if a > 0 and b > 0 and lo <= b / a <= hi]
            if res is None:
                # the level points are each level's best labeling; none may fall in the angle
                continue
            key, h, g = res
            assert o.hg(o.labeling(key)) == pytest.approx((h, g), abs=1e-9)
            assert inside and h + g <= max(a + b for a, b in inside) + 1e-9
        r = angular_search(o.constrained, lam0=1.0, tol=1.0)
        lab, ex = o.exact()
        assert r.phi == pytest.approx(ex, abs=1e-9) and ex == pytest.approx(max([max(a, 0) * b for a, b in pts]), abs=1e-9)
        assert o.lam_queries == 4 and o.level_passes == 1 and o.exact_calls == 1
