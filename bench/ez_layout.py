"""What the layout of the emission weights E and their averaging accumulator Z costs a multiclass
BCFW step on dense 784-d rows (issue 22, 784-d batches): the two pieces of a step that read or
write them (the scores of the block's row, then the update of E and Z for the classes the step
moves) replayed over the upsampled digits, with E and Z as the kernels hold them today (one row
per feature, the classes contiguous: ``common.emission_add`` and ``multiclass.mc_stat_apply2``,
the kernels themselves) and class-major (one row per class, the features contiguous), checked
equal to the bit (scores every step, E and Z at the end); and class-major through the kernels
``bcfw.learn_new_blocks_cm`` runs (``multiclass.mc_scores_cm``, whose dense-row scores go through
``simd.vec_scores_cm*``: vectors over the classes by a transpose in registers, and
``mc_stat_apply2_cm``).

    python bench/ez_layout.py [--steps 20000] [--reps 5]

Class-major scores keep each class's sum in feature order (bit-identity), one scalar accumulator
per class (numba turns off LLVM's SLP vectorizer, so no vector of accumulators without an
intrinsic like ``simd.vec_scores``); the class-major update adds the zeros of the dense row too
(each adds +-0 to an entry that is never -0: the same bits, as ``mc_stat_apply2`` argues for
skipping them), so the loop has no branch and vectorizes.
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(1, HERE)

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from streamssvm._kernels.common import emission_add  # noqa: E402
from streamssvm._kernels.multiclass import mc_scores_cm, mc_stat_apply2, mc_stat_apply2_cm  # noqa: E402


@njit(cache=False)
def row_major(E, Z, R, order, moves, coef, zcoef, K, S_all, parts=3):
    """Per step: S = coef * <x, E[:, k]> (dense row), then E += c * x s, Z += zc * x s."""
    D = R.shape[1]
    tok_ptr = np.array([0, D], np.int32)
    fidx = np.zeros(0, np.int32)
    S = np.zeros((1, K))
    st = np.zeros(K)
    for t in range(order.shape[0]):
        fval = R[order[t]]
        if parts & 1:
            emission_add(E, coef, tok_ptr, fidx, fval, 1, K, S, True)
            for k in range(K):
                S_all[t, k] = S[0, k]
        if not parts & 2:
            continue
        st[:] = 0.0
        st[moves[t, 0]] = 0.75
        st[moves[t, 1]] = -0.75
        mc_stat_apply2(E, Z, tok_ptr, fidx, fval, st, K, -coef, zcoef)


@njit(cache=False)
def class_major(Et, Zt, R, order, moves, coef, zcoef, K, S_all, parts=3):
    """The same steps with Et = E.T and Zt = Z.T (C-contiguous)."""
    D = R.shape[1]
    for t in range(order.shape[0]):
        fval = R[order[t]]
        k0 = 0 if parts & 1 else K
        while k0 < K:   # ten scalar accumulators per pass (as common._dense_scores_scalar)
            r = min(K - k0, 10)
            a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = 0.0
            if r == 10:
                e0, e1, e2, e3, e4 = Et[k0], Et[k0 + 1], Et[k0 + 2], Et[k0 + 3], Et[k0 + 4]
                e5, e6, e7, e8, e9 = Et[k0 + 5], Et[k0 + 6], Et[k0 + 7], Et[k0 + 8], Et[k0 + 9]
                for p in range(D):
                    v = fval[p] * coef
                    a0 += v * e0[p]
                    a1 += v * e1[p]
                    a2 += v * e2[p]
                    a3 += v * e3[p]
                    a4 += v * e4[p]
                    a5 += v * e5[p]
                    a6 += v * e6[p]
                    a7 += v * e7[p]
                    a8 += v * e8[p]
                    a9 += v * e9[p]
                S_all[t, k0], S_all[t, k0 + 1], S_all[t, k0 + 2], S_all[t, k0 + 3] = a0, a1, a2, a3
                S_all[t, k0 + 4], S_all[t, k0 + 5], S_all[t, k0 + 6], S_all[t, k0 + 7] = a4, a5, a6, a7
                S_all[t, k0 + 8], S_all[t, k0 + 9] = a8, a9
            else:
                for k in range(k0, k0 + r):
                    a = 0.0
                    for p in range(D):
                        a += (fval[p] * coef) * Et[k, p]
                    S_all[t, k] = a
            k0 += r
        if not parts & 2:
            continue
        for q in range(2):
            k = moves[t, q]
            s = 0.75 if q == 0 else -0.75
            e = Et[k]
            z = Zt[k]
            for p in range(D):   # no branch on the zeros: +-0 changes no entry (see the docstring)
                x = fval[p]
                e[p] += (x * -coef) * s
                z[p] += (x * zcoef) * s


@njit(cache=False)
def class_major_kernels(Et, Zt, R, order, moves, coef, zcoef, K, S_all, parts=3):
    """The same steps through the kernels of ``bcfw.learn_new_blocks_cm``: ``mc_scores_cm``
    (vector scores, ``simd.vec_scores_cm*``) and ``mc_stat_apply2_cm`` on the (d, K) views."""
    D = R.shape[1]
    tok_ptr = np.array([0, D], np.int32)
    fidx = np.zeros(0, np.int32)
    S = np.zeros((1, K))
    st = np.zeros(K)
    E, Z = Et.T, Zt.T
    for t in range(order.shape[0]):
        fval = R[order[t]]
        if parts & 1:
            mc_scores_cm(E, coef, tok_ptr, fidx, fval, 1, K, S, True)
            for k in range(K):
                S_all[t, k] = S[0, k]
        if not parts & 2:
            continue
        st[:] = 0.0
        st[moves[t, 0]] = 0.75
        st[moves[t, 1]] = -0.75
        mc_stat_apply2_cm(E, Z, tok_ptr, fidx, fval, st, K, -coef, zcoef)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    from hotpath import digits784
    X, _ = digits784(1)
    R = np.ascontiguousarray(np.hstack([np.ones((len(X), 1)), X]))   # the bias, then the pixels
    rng = np.random.default_rng(0)
    K = 10
    order = rng.integers(0, len(R), a.steps)
    moves = np.stack([rng.integers(0, K, a.steps), rng.integers(0, K - 1, a.steps)], 1)
    moves[:, 1] += moves[:, 1] >= moves[:, 0]   # two distinct classes per step
    coef, zcoef = 1e-3, 3e-4
    times = {}
    same = False
    for parts, what in ((3, "score + update"), (1, "score only"), (2, "update only")):
        for rep in range(a.reps + 1):
            D = R.shape[1]
            E, Z = np.zeros((D, K)), np.zeros((D, K))
            Et, Zt = np.zeros((K, D)), np.zeros((K, D))
            Ek, Zk = np.zeros((K, D)), np.zeros((K, D))
            S1, S2, S3 = np.zeros((a.steps, K)), np.zeros((a.steps, K)), np.zeros((a.steps, K))
            t0 = time.process_time()
            row_major(E, Z, R, order, moves, coef, zcoef, K, S1, parts)
            t1 = time.process_time()
            class_major(Et, Zt, R, order, moves, coef, zcoef, K, S2, parts)
            t2 = time.process_time()
            class_major_kernels(Ek, Zk, R, order, moves, coef, zcoef, K, S3, parts)
            t3 = time.process_time()
            if rep:   # the first: compilation
                times.setdefault(f"{what}: row-major (main)", []).append((t1 - t0) / a.steps * 1e6)
                times.setdefault(f"{what}: class-major, scalar scores", []).append((t2 - t1) / a.steps * 1e6)
                times.setdefault(f"{what}: class-major, learn_new_blocks_cm", []).append((t3 - t2) / a.steps * 1e6)
            if parts == 3 and rep == a.reps:
                bits = lambda A: np.ascontiguousarray(A).view(np.int64)   # noqa: E731
                same = all(np.array_equal(bits(S1), bits(S)) and np.array_equal(bits(E), bits(Ec.T))
                           and np.array_equal(bits(Z), bits(Zc.T)) for S, Ec, Zc in ((S2, Et, Zt), (S3, Ek, Zk)))
    print(f"{a.steps} steps (score + E/Z update of 2 classes) on 785-wide dense digit rows, K={K}, "
          f"CPU us per step, median of {a.reps}:")
    for k, v in times.items():
        print(f"  {k:52s} {np.median(v):.3f}   (all: {', '.join(f'{x:.2f}' for x in v)})")
    print(f"  bit-identical scores, E and Z: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
