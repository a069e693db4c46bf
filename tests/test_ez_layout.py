"""The arithmetic a class-major layout of the emission weights E and their averaging accumulator
Z would do on dense rows equals, to the bit, what the kernels do with today's row-major E and Z
(``common.emission_add``'s dense scores, ``multiclass.mc_stat_apply2``'s update): per class, the
products ``(x_p * coef) * E[p, k]`` summed in feature order, and the update adding every value of
the row, its zeros included (each adds +-0 to an entry that started at +0 and only took sums, so
is never -0: no bit changes). ``bench/ez_layout.py`` measures what the class-major layout would
save (issue 22, 784-d batches); this pins the equivalence such a change relies on."""
import numpy as np

from streamssvm._kernels.common import emission_add, py_entry
from streamssvm._kernels.multiclass import mc_stat_apply2


def _rows(rng, n, d):
    """Dense rows like image rows: runs of zeros between runs of non-zeros, the bias first."""
    R = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.6)
    R[:, 0] = 1.0
    return R


def test_class_major_scores_and_updates_are_bit_identical():
    rng = np.random.default_rng(7)
    D, K, steps = 97, 11, 60
    R = _rows(rng, 20, D)
    E, Z = np.zeros((D, K)), np.zeros((D, K))
    Et, Zt = np.zeros((K, D)), np.zeros((K, D))
    tok_ptr = np.array([0, D], np.int32)
    no_idx = np.zeros(0, np.int32)   # a dense row (common's convention)
    S = np.zeros((1, K))
    add, apply2 = py_entry(emission_add), py_entry(mc_stat_apply2)
    for t in range(steps):
        x = R[rng.integers(len(R))]
        coef = float(rng.uniform(0.1, 3.0))
        add(E, coef, tok_ptr, no_idx, x, 1, K, S, True)
        # class-major: each class's sum in feature order (cumsum is sequential, not pairwise)
        St = np.cumsum((x * coef) * Et, axis=1)[:, -1]
        assert np.array_equal(S[0].view(np.int64), St.view(np.int64)), t
        m = 1 + t % 5   # 1..5 moved classes: every pass shape of mc_stat_apply2
        st = np.zeros(K)
        st[rng.choice(K, m, replace=False)] = rng.standard_normal(m)
        c, zc = -float(rng.uniform(0.01, 1.0)), float(rng.uniform(0.0, 1.0))
        apply2(E, Z, tok_ptr, no_idx, x, st, K, c, zc)
        for k in np.flatnonzero(st):
            Et[k] += (x * c) * st[k]
            Zt[k] += (x * zc) * st[k]
        assert np.array_equal(E.view(np.int64), Et.T.view(np.int64)), t
        assert np.array_equal(Z.view(np.int64), Zt.T.view(np.int64)), t
    assert not np.signbit(E[E == 0.0]).any()   # no -0 entry: the premise of adding the zeros
