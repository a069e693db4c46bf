"""Oracles and statistic algebra against brute-force enumeration on small random instances."""
import numpy as np
import pytest

from streamssvm._kernels import structops as so
from streamssvm._kernels.bundles import model
from streamssvm.structures import Chain, MultiClass, MultiLabel
from streamssvm._kernels.common import py_entry


def random_tokens(rng, L, d, density=0.6):
    ptr = [0]
    idx, val = [], []
    for _ in range(L):
        cols = [0] + [j for j in range(1, d) if rng.random() < density]
        idx += cols
        val += [1.0] + list(rng.normal(size=len(cols) - 1))
        ptr.append(len(idx))
    return np.array(ptr, np.int32), np.array(idx, np.int32), np.array(val, float)


def dense_score(E, T, B, scale, phi):
    pE, pT, pB = phi
    K = pE.shape[1]
    return scale * (np.sum(E[:pE.shape[0], :K] * pE) + np.sum(T[:K, :K] * pT) + np.sum(B[:, :K] * pB))


def make(kind_cls, rng, K, Kc, L, d, cost=False):
    if kind_cls == "pairwise":
        st = MultiLabel(pairwise=True)
    else:
        st = kind_cls() if kind_cls is not Chain else Chain()
    E = rng.normal(size=(d, Kc))
    T = rng.normal(size=(Kc, Kc))
    B = rng.normal(size=(2, Kc))
    C = 1.0 - np.eye(Kc)
    if cost:
        C[:K, :K] = rng.uniform(0.2, 3.0, size=(K, K)) * (1 - np.eye(K))
    tp, fi, fv = random_tokens(rng, L, d)
    return st, E, T, B, C, tp, fi, fv


CASES = [(Chain, L, K) for L in (1, 2, 3, 5) for K in (1, 2, 3, 4)] + \
        [(MultiClass, 1, K) for K in (1, 2, 5)] + [(MultiLabel, 1, K) for K in (1, 2, 4)] + \
        [("pairwise", 1, K) for K in (1, 2, 3, 5)]


@pytest.mark.parametrize("cls,L,K", CASES)
@pytest.mark.parametrize("seed", range(4))
def test_oracle_matches_brute_force(cls, L, K, seed):
    rng = np.random.default_rng(seed * 101 + L * 7 + K)
    Kc = K + 2  # spare label capacity must be ignored
    d = 6
    st, E, T, B, C, tp, fi, fv = make(cls, rng, K, Kc, L, d, cost=(seed % 2 == 1 and cls is not MultiLabel))
    scale = float(rng.uniform(0.3, 2.0))
    kind = st.kind
    if kind in (so.MULTILABEL, so.MLPAIR):
        ytrue = np.array(sorted(rng.choice(K, size=rng.integers(0, K + 1), replace=False)), np.int32)
        ly, Ki, lablen = len(ytrue), K, Kc
    else:
        ytrue = rng.integers(0, K, size=L).astype(np.int32)
        ly, Ki, lablen = L, 1, L
    S = np.zeros((L, Kc))
    so.emission_scores(E, scale, tp, fi, fv, L, K, S)
    V = np.zeros((L, Kc)); bp = np.zeros((L, Kc), np.int32); ybuf = np.zeros(Kc, np.int32)
    for loss_scale in (0.0, 1.0, 2.5):
        out = np.zeros(lablen, np.int32)
        val = so.decode(model(st, K, Kc, C), (E, T, B), S, scale, L, ytrue, ly, loss_scale, Ki,
                        (S, V, bp, ybuf, out, np.zeros(Kc + 1), np.zeros((1, 1, 1))), out)
        best = -np.inf
        for y in st.all_labelings(L, K):
            yy = y if kind not in (so.MULTILABEL, so.MLPAIR) else np.concatenate([y, np.zeros(Kc - K, np.int32)])
            phi = st.joint_feature(d, K, tp, fi, fv, yy)
            v = dense_score(E, T, B, scale, phi)
            if loss_scale:
                v += loss_scale * st.brute_loss(ytrue, yy[:K] if kind in (so.MULTILABEL, so.MLPAIR) else y, C, Ki)
            best = max(best, v)
            # labeling_score / labeling_loss agree with the dense map
            assert so.labeling_score(kind, S, T, B, scale, yy, L, K, st.use_trans) == pytest.approx(
                dense_score(E, T, B, scale, phi), abs=1e-9)
            assert so.labeling_loss(kind, yy, ytrue, ly, C, L, K, Ki, ybuf) == pytest.approx(
                st.brute_loss(ytrue, yy[:K] if kind in (so.MULTILABEL, so.MLPAIR) else y, C, Ki), abs=1e-12)
        assert val == pytest.approx(best, abs=1e-9)
        # the returned labeling attains the value
        got = so.labeling_score(kind, S, T, B, scale, out, L, K, st.use_trans)
        if loss_scale:
            got += loss_scale * so.labeling_loss(kind, out, ytrue, ly, C, L, K, Ki, ybuf)
        assert got == pytest.approx(best, abs=1e-9)


@pytest.mark.parametrize("cls,L,K", [(Chain, 4, 3), (Chain, 1, 2), (MultiClass, 1, 4), (MultiLabel, 1, 3),
                                     ("pairwise", 1, 4)])
def test_statistic_algebra_matches_dense_feature_map(cls, L, K):
    """score / loss / squared norm / accumulation of mean statistics equal the dense phi."""
    rng = np.random.default_rng(5)
    Kc = K + 1
    d = 5
    st, E, T, B, C, tp, fi, fv = make(cls, rng, K, Kc, L, d)
    kind = st.kind
    scale = 0.7
    labs = st.all_labelings(L, K)
    pick = [labs[i] for i in rng.choice(len(labs), size=min(4, len(labs)), replace=False)]
    if kind in (so.MULTILABEL, so.MLPAIR):
        pick = [np.concatenate([p, np.zeros(Kc - K, np.int32)]) for p in pick]
        ytrue = np.flatnonzero(pick[0][:K]).astype(np.int32)
        ly, Ki = len(ytrue), K
    else:
        ytrue = pick[0].astype(np.int32)
        ly, Ki = L, 1
    coefs = rng.dirichlet(np.ones(len(pick)))
    ss = so.stat_size(kind, L, Kc)
    m = np.zeros(ss)
    dense = [np.zeros((d, K)), np.zeros((K, K)), np.zeros((2, K))]
    loss = 0.0
    for c, y in zip(coefs, pick):
        so.labeling_stat(kind, y, L, Kc, m, c)
        for a, b in zip(dense, st.joint_feature(d, K, tp, fi, fv, y)):
            a += c * b
        loss += c * st.brute_loss(ytrue, y[:K] if kind in (so.MULTILABEL, so.MLPAIR) else y, C, Ki)
    S = np.zeros((L, Kc))
    so.emission_scores(E, scale, tp, fi, fv, L, K, S)
    assert so.stat_score(kind, S, T, B, scale, m, L, K, Kc, st.use_trans) == pytest.approx(
        dense_score(E, T, B, scale, dense), abs=1e-9)
    ybuf = np.zeros(Kc, np.int32)
    assert so.loss_const(kind, ly, Ki) + so.stat_loss_lin(kind, m, ytrue, ly, C, L, K, Kc, Ki, ybuf) == \
        pytest.approx(loss, abs=1e-12)
    G = np.zeros((L, L))
    py_entry(so.gram)(tp, fi, fv, L, G, np.zeros(d))
    sq = sum(float(np.sum(a * a)) for a in dense)
    assert so.stat_sqnorm(kind, G, m, L, K, Kc, st.use_trans) == pytest.approx(sq, rel=1e-10)
    E2, T2, B2 = np.zeros((d, Kc)), np.zeros((Kc, Kc)), np.zeros((2, Kc))
    so.stat_apply(kind, (E2, T2, B2), (tp, fi, fv), m, L, K, Kc, 2.0, st.use_trans)
    np.testing.assert_allclose(E2[:, :K], 2 * dense[0], atol=1e-12)
    if st.use_trans:
        np.testing.assert_allclose(T2[:K, :K], 2 * dense[1], atol=1e-12)
        np.testing.assert_allclose(B2[:, :K], 2 * dense[2], atol=1e-12)


def test_cost_validation():
    with pytest.raises(ValueError, match="zero diagonal"):
        MultiClass(cost=np.ones((2, 2))).cost_matrix(2, ["a", "b"])
    with pytest.raises(ValueError, match="declare all labels"):
        MultiClass(cost=np.zeros((2, 2))).cost_matrix(4, ["a", "b", "c"])
    with pytest.raises(TypeError):
        MultiClass(cost="nope")
