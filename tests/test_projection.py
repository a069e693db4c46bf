"""The O(n) box-plus-one-equality projection (Saha, Zhang, Vishwanathan, App. B, Algorithm 2)
against the O(n log n) sort-based projection, the KKT conditions and SciPy's SLSQP, on random and
adversarial inputs (duplicate kinks, flat pieces, roots at end kinks, fixed coordinates, infinite
bounds); and the bundle-QP kernel against SLSQP."""
import numpy as np
import pytest
from scipy.optimize import minimize

from streamssvm._kernels import projection as KP
from streamssvm._kernels.projection import project


def _kkt_ok(a, m, d2, sig, l, u, z, tol=1e-7):
    """alpha feasible and alpha_i = clip(m_i + lam sigma_i / d_i^2) for one lam."""
    if np.any(a < l - tol) or np.any(a > u + tol) or abs(sig @ a - z) > tol * (1 + abs(z)):
        return False
    free = (a > l + 1e-9) & (a < u - 1e-9)
    if free.any():
        lams = (a[free] - m[free]) * d2[free] / sig[free]
        lam = np.median(lams)
        if np.max(np.abs(lams - lam)) > 1e-6 * (1 + abs(lam)):
            return False
    else:   # all clipped: some lam in the intersection of the half-lines must exist
        lo, hi = -np.inf, np.inf
        for i in range(len(a)):
            # at l with sigma > 0 the unclipped value is <= l: lam <= (l - m) d2 / sigma, etc.
            r = (a[i] - m[i]) * d2[i] / sig[i]
            at_low = abs(a[i] - l[i]) <= 1e-9
            if l[i] == u[i]:
                continue
            if at_low == (sig[i] > 0):
                hi = min(hi, r)
            else:
                lo = max(lo, r)
        if lo > hi + 1e-7:
            return False
    return True


def _instances(rng, count):
    for trial in range(count):
        n = int(rng.integers(1, 14))
        m = rng.normal(size=n) * rng.choice([0.1, 1.0, 10.0])
        if trial % 3 == 0:
            m = np.round(m)                               # duplicate kinks
        d2 = rng.uniform(0.5, 2.0, size=n) ** 2 if trial % 2 else np.ones(n)
        sig = rng.choice([-1.0, 1.0, 2.0, -0.5], size=n) if trial % 5 else np.ones(n)
        l = np.zeros(n)
        u = np.full(n, rng.choice([1.0, 0.5]))
        if trial % 7 == 0:
            u[:] = np.inf
        if trial % 11 == 0:
            u[0] = l[0]                                   # fixed coordinate
        lo_s = np.sum(np.where(sig > 0, sig * l, sig * u))
        hi_s = np.sum(np.where(sig > 0, sig * u, sig * l))
        lo_s, hi_s = max(lo_s, -5.0), min(hi_s, 5.0)
        z = rng.uniform(lo_s, hi_s) if trial % 4 else [lo_s, hi_s][trial % 8 // 4]   # roots at end kinks
        yield m, d2, sig, l, u, z


def _run(fn, m, d2, sig, l, u, z):
    n = len(m)
    out = np.zeros(n)
    if fn is KP.project_box_eq:
        lam, st = fn(m, d2, sig, l, u, z, out, np.zeros(2 * n + 1), np.zeros(n + 1, dtype=np.int64))
    else:
        lam, st = fn(m, d2, sig, l, u, z, out)
    return out, st


def test_linear_matches_sort_and_kkt_on_random_and_adversarial():
    rng = np.random.default_rng(0)
    for m, d2, sig, l, u, z in _instances(rng, 2000):
        a, st = _run(KP.project_box_eq, m, d2, sig, l, u, z)
        b, st2 = _run(KP.project_sort, m, d2, sig, l, u, z)
        assert st == 0 and st2 == 0
        np.testing.assert_allclose(a, b, atol=1e-8)
        assert _kkt_ok(a, m, d2, sig, l, u, z), (m, sig, l, u, z, a)


def test_against_slsqp():
    rng = np.random.default_rng(1)
    done = 0
    for m, d2, sig, l, u, z in _instances(rng, 300):
        if np.any(np.isinf(u)) or len(m) < 2:
            continue
        a, _ = _run(KP.project_box_eq, m, d2, sig, l, u, z)
        f = lambda x: 0.5 * np.sum(d2 * (x - m) ** 2)          # noqa: E731
        r = minimize(f, np.clip(m, l, u), jac=lambda x: d2 * (x - m), method="SLSQP",
                     bounds=list(zip(l, u)), constraints=[{"type": "eq", "fun": lambda x: sig @ x - z,
                                                           "jac": lambda x: sig}],
                     options={"ftol": 1e-14, "maxiter": 500})
        if not r.success:
            continue
        assert f(a) <= r.fun + 1e-7 * (1 + abs(r.fun))
        done += 1
    assert done > 100


def test_flat_piece_and_end_kinks():
    # f(lam) = sum clip(m + lam, 0, 1) - 1 is flat (= 0) on [-9, 0]: the printed root formula divides by 0
    m, one = np.array([0.0, 10.0]), np.ones(2)
    for fn in (KP.project_box_eq, KP.project_sort):
        a, st = _run(fn, m, one, one, np.zeros(2), one, 1.0)
        assert st == 0
        np.testing.assert_allclose(a, [0.0, 1.0])
    # z at the sum of the lower ends / upper ends: the root is at the first / last kink
    m = np.array([0.3, -0.2, 0.9])
    np.testing.assert_allclose(project(m, 0.0, 1.0, z=0.0), [0, 0, 0])
    np.testing.assert_allclose(project(m, 0.0, 1.0, z=3.0), [1, 1, 1])


def test_many_duplicate_kinks_terminate():
    n = 20001
    m = np.zeros(n)
    a = project(m, 0.0, 1.0 / n, z=0.3)
    np.testing.assert_allclose(a, 0.3 / n)
    m = np.repeat(np.array([0.0, 1.0, -1.0]), 5000)
    sig = np.tile(np.array([1.0, -1.0]), 7500)
    np.testing.assert_allclose(project(m, 0.0, 0.1, z=0.0, sigma=sig), project(m, 0.0, 0.1, z=0.0, sigma=sig,
                                                                              method="sort"), atol=1e-12)


def test_large_random_matches_sort():
    rng = np.random.default_rng(3)
    n = 100_000
    m = rng.normal(size=n)
    y = rng.choice([-1.0, 1.0], size=n)
    a = project(m, 0.0, 1.0 / n, z=0.0, sigma=y)
    b = project(m, 0.0, 1.0 / n, z=0.0, sigma=y, method="sort")
    np.testing.assert_allclose(a, b, atol=1e-12)
    assert abs(y @ a) < 1e-12


def test_infeasible_and_bad_arguments():
    with pytest.raises(ValueError, match="infeasible"):
        project(np.zeros(3), 0.0, 1.0, z=4.0)
    with pytest.raises(ValueError, match="non-zero"):
        project(np.zeros(3), 0.0, 1.0, z=1.0, sigma=np.array([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="lower > upper"):
        project(np.zeros(2), 1.0, 0.0)


def test_simplex_rows():
    rng = np.random.default_rng(4)
    P = rng.normal(size=(50, 6))
    out = np.empty_like(P)
    sc = [np.empty(6) for _ in range(5)]
    KP.project_simplex_rows(P, 0.25, out, np.empty(13), np.empty(7, dtype=np.int64), *sc)
    for r in range(50):
        np.testing.assert_allclose(out[r], project(P[r], 0.0, np.inf, z=0.25, method="sort"), atol=1e-12)


def test_simplex_qp_against_slsqp():
    rng = np.random.default_rng(5)
    for _ in range(20):
        t = int(rng.integers(2, 15))
        A = rng.normal(size=(5, t))
        G = A.T @ A
        b = rng.normal(size=t)
        lam = 0.3
        a = np.full(t, 1.0 / t)
        KP.simplex_qp(G, b, lam, a, 1e-12, 100000)
        f = lambda x: -(x @ b - x @ G @ x / (2 * lam))     # noqa: E731
        r = minimize(f, np.full(t, 1.0 / t), method="SLSQP", bounds=[(0, 1)] * t,
                     constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}],
                     options={"ftol": 1e-14, "maxiter": 1000})
        assert abs(a.sum() - 1) < 1e-12 and a.min() >= 0
        assert -f(a) >= -r.fun - 1e-9
