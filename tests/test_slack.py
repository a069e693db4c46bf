"""Exact slack-rescaled oracles (paper 000) against brute-force enumeration."""
import numpy as np
import pytest

from streamssvm._kernels import structops as so
from streamssvm.structures import Chain, MultiClass, MultiLabel
from test_structures import dense_score, make  # tests/ is on sys.path under pytest


@pytest.mark.parametrize("cls,L,K", [(Chain, L, K) for L in (1, 2, 3, 5) for K in (1, 2, 3, 4)]
                         + [(MultiClass, 1, K) for K in (1, 3, 6)] + [(MultiLabel, 1, K) for K in (1, 3, 5)])
@pytest.mark.parametrize("seed", range(5))
def test_slack_oracle_matches_brute_force(cls, L, K, seed):
    rng = np.random.default_rng(1000 + seed * 31 + L * 7 + K)
    Kc = K + 1
    d = 5
    cost = cls is MultiClass and seed % 2 == 1
    st, E, T, B, C, tp, fi, fv = make(cls, rng, K, Kc, L, d, cost=cost)
    scale = float(rng.uniform(0.5, 3.0))  # larger scores make the slack maximizer non-trivial
    kind = st.kind
    if kind == so.MULTILABEL:
        ytrue = np.array(sorted(rng.choice(K, size=rng.integers(0, K + 1), replace=False)), np.int32)
        ly, Ki, lablen = len(ytrue), K, Kc
        dense_true = np.zeros(Kc, np.int32)
        dense_true[ytrue] = 1
    else:
        ytrue = rng.integers(0, K, size=L).astype(np.int32)
        ly, Ki, lablen = L, 1, L
        dense_true = ytrue
    S = np.zeros((L, Kc))
    so.emission_scores(E, scale, tp, fi, fv, L, K, S)
    phi_t = st.joint_feature(d, K, tp, fi, fv, dense_true)
    s_true = dense_score(E, T, B, scale, phi_t)
    best = 0.0
    for y in st.all_labelings(L, K):
        yy = y if kind != so.MULTILABEL else np.concatenate([y, np.zeros(Kc - K, np.int32)])
        loss = st.brute_loss(ytrue, y if kind != so.MULTILABEL else yy[:K], C, Ki)
        v = loss * (1.0 + dense_score(E, T, B, scale, st.joint_feature(d, K, tp, fi, fv, yy)) - s_true)
        best = max(best, v)
    V = np.zeros((L + 1, Kc, L + 1))
    out = np.zeros(lablen, np.int32)
    val = so.slack_oracle(kind, S, T, B, scale, L, K, st.use_trans, ytrue, ly, C, Ki, V,
                          np.zeros(Kc, np.int32), np.zeros(Kc), np.zeros(Kc, np.int64), out)
    assert val == pytest.approx(best, abs=1e-9)
    # the returned labeling attains it
    ybuf = np.zeros(Kc, np.int32)
    loss = so.labeling_loss(kind, out, ytrue, ly, C, L, K, Ki, ybuf)
    sc = so.labeling_score(kind, S, T, B, scale, out, L, K, st.use_trans)
    assert loss * (1.0 + sc - s_true) == pytest.approx(best, abs=1e-9)
