"""Exactness of the chain Viterbi paths (``streamssvm._kernels.chain``): the dense loop and the
sparse-transition DP against the original O(L K^2) loop (kept here as the reference) and brute
force, with sparse and dense, negative and positive transition weights, ties, L = 1, 2 and long
chains, K up to 500, MAP and loss-augmented decoding."""
import itertools

import numpy as np
import pytest
from numba import njit

from streamssvm._kernels import chain as CH
from streamssvm._kernels.common import py_entry


@njit(cache=True)
def reference_viterbi(S, T, B, scale, L, K, use_trans, ytrue, C, lw, V, bp, out):
    """The loop ``chain_viterbi`` had before the sparse path (k outer, j inner, first max)."""
    for k in range(K):
        v = S[0, k]
        if use_trans:
            v += scale * B[0, k]
        if lw != 0.0:
            v += lw * C[ytrue[0], k]
        V[0, k] = v
    for t in range(1, L):
        for k in range(K):
            best = -np.inf
            arg = 0
            for j in range(K):
                v = V[t - 1, j] + scale * T[j, k]
                if v > best:
                    best = v
                    arg = j
            u = S[t, k]
            if lw != 0.0:
                u += lw * C[ytrue[t], k]
            V[t, k] = best + u
            bp[t, k] = arg
    best = -np.inf
    arg = 0
    for k in range(K):
        v = V[L - 1, k]
        if use_trans:
            v += scale * B[1, k]
        if v > best:
            best = v
            arg = k
    out[L - 1] = arg
    for t in range(L - 1, 0, -1):
        out[t - 1] = bp[t, out[t]]
    return best


def score(S, T, B, scale, y, ytrue, C, lw, use_trans):
    L = len(y)
    v = sum(S[t, y[t]] for t in range(L)) + lw * sum(C[ytrue[t], y[t]] for t in range(L))
    if use_trans:
        v += scale * (B[0, y[0]] + B[1, y[-1]] + sum(T[y[t - 1], y[t]] for t in range(1, L)))
    else:
        v += scale * sum(T[y[t - 1], y[t]] for t in range(1, L))
    return v


def instance(rng, L, K, density, sign="mixed", ints=False, Kc=None):
    Kc = Kc or K
    S = rng.normal(size=(L, Kc))
    W = rng.normal(size=(Kc, Kc))
    if sign == "pos":
        W = np.abs(W)
    elif sign == "neg":
        W = -np.abs(W)
    T = W * (rng.random((Kc, Kc)) < density)
    B = rng.normal(size=(2, Kc))
    if ints:   # small integers: many exact ties
        S, T, B = np.round(S), np.round(T), np.round(B)
    ytrue = rng.integers(0, K, L).astype(np.int32)
    C = 1.0 - np.eye(Kc)
    return S, T, B, ytrue, C


def run(f, S, T, B, scale, L, K, use_trans, ytrue, C, lw, *extra):
    V = np.full((L + 1, S.shape[1]), np.nan)
    bp = np.full((L + 1, S.shape[1]), -7, np.int32)
    out = np.full(L, -1, np.int32)
    val = f(S, T, B, scale, L, K, use_trans, ytrue, C, lw, V, bp, out, *extra)
    return val, out


@njit
def viterbi_sparse(S, trans, scale, L, K, use_trans, ytrue, C, lw, work, out, support):
    """``chain.chain_viterbi_sparse`` called from Python (the loop itself is only called from
    kernels and has no Python entry of its own)."""
    return CH.chain_viterbi_sparse(S, trans, scale, L, K, use_trans, ytrue, C, lw, work, out, support)


@njit
def viterbi_dense(S, trans, scale, L, K, use_trans, ytrue, C, lw, work, out):
    """``chain.chain_viterbi_dense`` called from Python (see ``viterbi_sparse``)."""
    return CH.chain_viterbi_dense(S, trans, scale, L, K, use_trans, ytrue, C, lw, work, out)


def sparse(S, T, B, scale, L, K, use_trans, ytrue, C, lw, V, bp, out):
    ptr, idx, n = py_entry(CH.transition_support)(T, K, K * K)
    assert n == int((T[:K, :K] != 0).sum())
    return viterbi_sparse(S, (T, B), scale, L, K, use_trans, ytrue, C, lw, (V, bp), out, (ptr, idx, n))


def _flat(fn):
    """The Viterbi kernel with its bundles spelled out: (S, T, B, scale, L, K, use_trans, ytrue, C, lw, V, bp, out)."""
    return lambda S, T, B, scale, L, K, use_trans, ytrue, C, lw, V, bp, out: fn(
        S, (T, B), scale, L, K, use_trans, ytrue, C, lw, (V, bp), out)


def auto(S, T, B, scale, L, K, use_trans, ytrue, C, lw, V, bp, out):
    """``chain_viterbi`` as a chain model calls it (the sparse loop's addresses from K tags on)."""
    return CH.chain_viterbi(S, (T, B), scale, L, K, use_trans, ytrue, C, lw, (V, bp), out, CH.sparse_viterbi(K))


PATHS = {"auto": auto, "dense": _flat(viterbi_dense), "sparse": sparse}


def check_all(S, T, B, scale, L, K, use_trans, ytrue, C, lw):
    ref_val, ref_lab = run(reference_viterbi, S, T, B, scale, L, K, use_trans, ytrue, C, lw)
    ref_score = score(S, T, B, scale, ref_lab, ytrue, C, lw, use_trans)
    for name, f in PATHS.items():
        val, lab = run(f, S, T, B, scale, L, K, use_trans, ytrue, C, lw)
        assert val == ref_val, (name, val, ref_val)
        assert lab.min() >= 0 and lab.max() < K, name
        s = score(S, T, B, scale, lab, ytrue, C, lw, use_trans)
        assert s == pytest.approx(ref_score, rel=1e-12, abs=1e-12), name
        assert s == pytest.approx(val, rel=1e-9, abs=1e-9), name
        # the same tie-breaking as the reference (smallest previous tag): the same labeling
        assert lab.tolist() == ref_lab.tolist(), name
    return ref_val, ref_lab


@pytest.mark.parametrize("L", [1, 2, 3, 7, 40])
@pytest.mark.parametrize("density", [0.0, 0.01, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("sign", ["mixed", "pos", "neg"])
def test_paths_equal_reference_random(L, density, sign):
    rng = np.random.default_rng(hash((L, density, sign)) % 2**32)
    for K in (1, 3, 30, 97):
        S, T, B, ytrue, C = instance(rng, L, K, density, sign, Kc=K + 3)
        for lw in (0.0, 0.37, 1.0 / L):
            for use_trans in (True, False):
                check_all(S, T, B, 0.8, L, K, use_trans, ytrue, C, lw)


@pytest.mark.parametrize("density", [0.002, 0.03, 0.2])
def test_large_tag_set(density):
    rng = np.random.default_rng(5)
    K, L = 480, 25
    S, T, B, ytrue, C = instance(rng, L, K, density, Kc=500)
    for lw in (0.0, 1.0 / L):
        check_all(S, T, B, 0.05, L, K, True, ytrue, C, lw)


@pytest.mark.parametrize("density", [0.05, 0.3, 1.0])
def test_ties_smallest_previous_tag(density):
    rng = np.random.default_rng(11)
    for L in (2, 5, 12):
        for K in (4, 40, 130):
            S, T, B, ytrue, C = instance(rng, L, K, density, ints=True)
            S = np.round(S / 2.0)   # mostly zeros and +-1: ties everywhere
            for lw in (0.0, 1.0):
                check_all(S, T, B, 1.0, L, K, True, ytrue, C, lw)


def test_brute_force_small():
    rng = np.random.default_rng(3)
    for L in (1, 2, 3, 4):
        for K in (1, 2, 3, 4):
            for density in (0.3, 1.0):
                S, T, B, ytrue, C = instance(rng, L, K, density)
                for lw in (0.0, 0.5):
                    best = max(score(S, T, B, 1.3, y, ytrue, C, lw, True)
                               for y in itertools.product(range(K), repeat=L))
                    val, lab = check_all(S, T, B, 1.3, L, K, True, ytrue, C, lw)
                    assert val == pytest.approx(best, rel=1e-12, abs=1e-12)


def test_top_tags_exhausted_column_scan():
    """Every one of the VITERBI_TOP best previous tags has a (very negative) transition into
    tag 0: the best previous tag outside supp(0) comes from the column scan."""
    rng = np.random.default_rng(8)
    K, L = 60, 6
    S = rng.normal(size=(L, K))
    S[:, :30] += 10.0   # tags 0..29 are the best at every position
    T = np.zeros((K, K))
    T[:30, 0] = -50.0
    T[:30, 1] = 3.0      # positive support only: the best is inside the support
    B = np.zeros((2, K))
    ytrue = np.zeros(L, np.int32)
    C = 1.0 - np.eye(K)
    assert CH.VITERBI_TOP < 30
    S[:, 0] += 60.0      # make tag 0 worth reaching
    check_all(S, T, B, 1.0, L, K, True, ytrue, C, 0.0)


def test_superset_support_is_exact():
    """The sparse DP is exact for any superset of the non-zero pattern (zeros in the list)."""
    rng = np.random.default_rng(4)
    K, L = 70, 9
    S, T, B, ytrue, C = instance(rng, L, K, 0.05)
    ref_val, ref_lab = run(reference_viterbi, S, T, B, 1.0, L, K, True, ytrue, C, 0.2)
    mask = (T != 0) | (rng.random((K, K)) < 0.1)
    ptr = np.zeros(K + 1, np.int64)
    idx = []
    for j in range(K):
        cols = np.nonzero(mask[j])[0]
        idx.extend(cols)
        ptr[j + 1] = len(idx)
    idx = np.array(idx, np.int32)
    def sparse_with(S, T, B, scale, L, K, use_trans, ytrue, C, lw, V, bp, out):
        return viterbi_sparse(S, (T, B), scale, L, K, use_trans, ytrue, C, lw, (V, bp), out, (ptr, idx, -2))

    val, lab = run(sparse_with, S, T, B, 1.0, L, K, True, ytrue, C, 0.2)
    assert val == ref_val and lab.tolist() == ref_lab.tolist()


def test_transition_support_dense_refused():
    T = np.ones((10, 10))
    ptr, idx, n = py_entry(CH.transition_support)(T, 10, 50)
    assert n == -1
    T[:, 3:] = 0.0
    ptr, idx, n = py_entry(CH.transition_support)(T, 8, 50)
    assert n == 24 and ptr.tolist() == [3 * j for j in range(9)] and idx[:3].tolist() == [0, 1, 2]


def test_dispatch_threshold_follows_density():
    """``chain_viterbi`` takes the sparse DP below the density threshold and the dense loop
    above it; both agree with the reference either way (checked above); here: both sides of the
    threshold on one instance size."""
    rng = np.random.default_rng(2)
    K, L = 64, 10
    for density in (CH.VITERBI_SPARSE_MAX_DENSITY * 0.5, min(1.0, CH.VITERBI_SPARSE_MAX_DENSITY * 2)):
        S, T, B, ytrue, C = instance(rng, L, K, density)
        check_all(S, T, B, 0.5, L, K, True, ytrue, C, 0.1)



def test_frozen_support_paths_equal_per_call_viterbi():
    """BCFW's prediction batch and full gap pass find the transition support once per loop
    (``chain.viterbi_support``, T frozen) instead of once per Viterbi call: the same labelings
    as ``chain_viterbi`` called per sentence on the same scores."""
    import streamssvm as ss
    rng = np.random.default_rng(5)
    K, d = 100, 6
    centers = rng.normal(size=(K, d)) * 2.0
    X, Y = [], []
    for _ in range(100):   # tags follow tag + 0 or 1: few tag pairs ever get a weight
        L = int(rng.integers(1, 9))
        y = [int(v) % K for v in np.cumsum(np.append(rng.integers(0, K), rng.integers(0, 2, L - 1)))]
        X.append(centers[y] + 0.3 * rng.normal(size=(L, d)))
        Y.append(y)
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0, lam=1e-2), labels=list(range(K)))
    m.learn_many(X, Y)
    m.refine(2)
    lr = m._learner
    E, ZE, zc, T, B, scale = lr._predict_params()
    Kn = lr._K
    nnz = np.count_nonzero(T[:Kn, :Kn])
    assert 0 < nnz <= CH.VITERBI_SPARSE_MAX_DENSITY * Kn * Kn and Kn >= CH.VITERBI_SPARSE_MIN_K  # sparse path
    enc = [m._features.encode_tokens(x, grow=False) for x in X]
    lens = [len(tp) - 1 for tp, _, _ in enc]
    ex_tok = np.zeros(len(X) + 1, dtype=np.int64)
    np.cumsum(lens, out=ex_tok[1:])
    offs = np.cumsum([0] + [len(fi) for _, fi, _ in enc])
    tok_ptr = np.concatenate([tp[:-1].astype(np.int64) + o for (tp, _, _), o in zip(enc, offs)] + [offs[-1:]])
    fidx = np.concatenate([fi for _, fi, _ in enc])
    fval = np.concatenate([fv for _, _, fv in enc])
    batch = lr.predict(ex_tok, tok_ptr, fidx, fval, ex_tok, int(ex_tok[-1]))
    W = E - zc * ZE
    n_multi = 0
    for e, (tp, fi, fv) in enumerate(enc):
        L = lens[e]
        S = np.zeros((L, Kn))
        for t in range(L):
            S[t] = scale * (fv[tp[t]:tp[t + 1]] @ W[fi[tp[t]:tp[t + 1]], :Kn])
        out = np.zeros(L, np.int32)
        V, bp = np.zeros((L, Kn)), np.zeros((L, Kn), np.int32)
        CH.chain_viterbi(S, (T, B), scale, L, Kn, True, np.zeros(L, np.int32), np.zeros((Kn, Kn)), 0.0, (V, bp), out,
                         CH.sparse_viterbi(Kn))
        assert out.tolist() == batch[ex_tok[e]:ex_tok[e + 1]].tolist()
        n_multi += L > 1
    assert n_multi > 40
