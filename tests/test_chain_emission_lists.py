"""Sparse chain blocks keep their emission statistic as per-token (tag, value) lists
(``_kernels/chainsparse.py``): trajectories equal those of the dense L x Kc rows bit for bit,
files written before load and continue identically, the block's statistic is linear in its
tokens, and crafted lists are refused."""
import copy
import hashlib
import os

import numpy as np
import pytest
from numba import njit

import streamssvm as ss
import streamssvm.blocks as blk
from streamssvm._kernels import bcfw as K
from streamssvm._kernels import chainsparse as CS
from streamssvm._kernels import common as CM
from streamssvm._kernels import structops as so
from streamssvm._kernels.chain import chain_loss_norm
from streamssvm.blocks import BlockStore
from streamssvm.checkpoint import CheckpointError
from test_chain_memory import dict_stream
from test_sparse_chain import _u_from_blocks, chain_stream, fit

DATA = os.path.join(os.path.dirname(__file__), "data")


def digest(est):
    """Weights, averaged weights and certificate of a model, to the bit."""
    lr = est._learner
    m = hashlib.sha256()
    for a in (lr.W.E, lr.W.T, lr.W.B, lr._Z.E, lr._Z.T, lr._Z.B):
        m.update(np.ascontiguousarray(a).tobytes())
    c = est.certificate()
    m.update(np.array([c.gap, c.primal, c.dual, c.block_gap_sum]).tobytes())
    return m.hexdigest()[:20]


# Recorded with the code before per-token lists (commit 81781d8: dense L x Kc rows and start /
# end rows in sparse chain blocks), the same runs: the lists must give the same floats.
BEFORE = {
    "fw": "dee387a57a52a65131f1",
    "pairwise": "f49940d7499cf8c78c57",
    "away": "c2f3c5fdbcca8e11bc22",
    "fifo": "a2c7e4bffacb86ebd389",
    "slack": "a8bc56a2e50ef4b8ee67",
    "keep": "dc44da61dedd680c5b7e",
    "nogram": "ccef7722565b9b7e8e53",
}
CFGS = {
    "fw": dict(step="fw"),
    "pairwise": dict(step="pairwise", cache=True, cache_size=6),
    "away": dict(step="away", cache_size=6, sampling="uniform"),
    "fifo": dict(step="fw", cache=True, cache_size=4, window=12),
    "slack": dict(step="fw", rescaling="slack", window=12, averaging=False),
    "keep": dict(step="pairwise", cache=True, cache_size=6, window=12, evicted_average="keep"),
    "nogram": dict(step="pairwise", cache=True, cache_size=6),
}


@pytest.mark.parametrize("name", list(CFGS))
def test_trajectories_equal_the_dense_rows_bit_for_bit(monkeypatch, name):
    """FW / pairwise / away steps, the cache, FIFO eviction, slack rescaling, the averaging
    accumulators of evicted_average="keep", blocks without a Gram matrix, the label capacity
    growing and learn_many: the same weights, averaged weights and certificate as the dense rows."""
    if name == "nogram":
        monkeypatch.setattr(blk.BlockStore, "gram_max_L", 1)
        X, Y = dict_stream(2)
    else:
        X, Y = chain_stream(4, n=40)
    est = fit("sparse", X, Y, batch=True, **CFGS[name])
    assert est._learner.counters[K.C_TFULL] == 0
    assert digest(est) == BEFORE[name]


@pytest.mark.parametrize("name, before, after", [
    ("fw", "699b5aec371199589dd7", "02b248a46fc052474b8f"),
    ("keep", "89d6e850b6b75d7f61c0", "c3dc6cd84996796ec138"),
])
def test_files_before_the_lists_load_and_continue_identically(name, before, after):
    """Models saved by the code before per-token lists (``tests/data``; FW steps, and pairwise
    steps with the cache, a window and the averaging accumulators): their sparse blocks are
    converted on load, and learning goes on as it did with that code (digests recorded there)."""
    est = ss.load(os.path.join(DATA, f"chain_sparse_before_lists_{name}.ssvm"))
    st = est._learner.store
    assert st.sparse and all(st.meta[j, K.M_FLAGS] & K.FLAG_SPARSE_EM for j in st.slots())
    assert digest(est) == before
    X, Y = chain_stream(7, n=12)
    for x, y in zip(X, Y):
        est.learn_one(x, y)
    est.refine(passes=2)
    assert digest(est) == after


@njit
def _sparse_values(S, T, B, G, x, st, L, K_, Kc, Iar, kp, ytrue, C, Ki, w):
    v = CS.sp_score(S, T, B, 0.7, st, L, K_, Kc, True, Iar, kp)
    q = CS.sp_emission_sqnorm(G, st, L, Iar, kp)
    qt = CS.sp_emission_sqnorm_tokens(x[0], x[1], x[2], st, L, Iar, kp)
    e = CS.sp_trans_sqnorm(0.25, st, L, K_, Kc, True, Iar, kp)
    ll = CS.sp_loss_lin(st, ytrue, C, L, Iar, kp, chain_loss_norm(L, Ki))
    CS.sp_apply(w, x, st, L, K_, Kc, -0.37, True, Iar, kp)
    return v, q, qt, e, ll


def test_list_kernels_equal_the_dense_rows_bit_for_bit():
    """Score, emission norms (Gram matrix and tokens), loss, weight update and the start / end
    part read from the first / last token's lists: the dense rows' floats, to the bit (the sums
    visit the same non-zero terms in the same order)."""
    X, Y = chain_stream(1)
    est = fit("sparse", X, Y, step="pairwise", cache=True, cache_size=6)
    lr = est._learner
    st, Kc, K_ = lr.store, lr.store.Kc, lr._K
    rng = np.random.default_rng(0)
    for j in st.slots():
        b = st.block(j)
        L = b["L"]
        kp = st._kpos(j)
        m = st.meta[j]
        s0 = int(m[K.M_FOFF]) + int(m[K.M_NNZ]) + L * L
        sst = st.Far[s0:s0 + st._stat_size_of(j)]
        d = st.dense_stat(j)
        BM = d[L * Kc + Kc * Kc:].reshape(2, Kc)
        assert np.array_equal(BM[0], d[:Kc]) and np.array_equal(BM[1], d[(L - 1) * Kc:L * Kc])
        S, B = rng.normal(size=(L, Kc)), rng.normal(size=(2, Kc))
        T = np.zeros((Kc, Kc))   # (transition sums are in the pairs' order in both sparse layouts)
        x = (b["tok_ptr"], b["fidx"], b["fval"])
        w1 = tuple(rng.normal(size=s) for s in (lr.W.E.shape, (Kc, Kc), (2, Kc)))
        w2 = tuple(a.copy() for a in w1)
        v, q, qt, e, ll = _sparse_values(S, T, B, b["gram"], x, sst, L, K_, Kc, st.Iar, kp, b["ytrue"], lr._C,
                                         b["Ki"], w1)
        assert v == so.stat_score(so.CHAIN, S, T, B, 0.7, d, L, K_, Kc, True)
        assert q == CM.stat_emission_sqnorm(b["gram"], d, L, K_, Kc)
        assert qt == CM.emission_sqnorm_tokens(x[0], x[1], x[2], d, L, K_, Kc)
        ends = 0.25
        for k in range(K_):
            ends += BM[0, k] * BM[0, k] + BM[1, k] * BM[1, k]
        tv = sst[st._sp_lists(j)[3]:st._sp_lists(j)[3] + int(st.Iar[kp])]
        for t in tv:
            ends += t * t
        assert e == ends
        assert ll == so.stat_loss_lin(so.CHAIN, d, b["ytrue"], L, lr._C, L, K_, Kc, b["Ki"], np.zeros(64))
        so.stat_apply(so.CHAIN, w2, x, d, L, K_, Kc, -0.37, True)
        assert all(np.array_equal(a1, a2) for a1, a2 in zip(w1, w2))


def test_block_statistic_is_linear_in_the_tokens():
    """With 120 tags a sparse block's statistic holds its per-token entries and pairs, not
    L x Kc + 2 Kc floats (dense rows): ecap + tcap floats."""
    rng = np.random.default_rng(0)
    K_ = 120
    est = ss.SequenceTagger(labels=list(range(K_)), learner=ss.learners.BCFW(lam=0.1, seed=0))
    for _ in range(20):
        L = int(rng.integers(2, 8))
        est.learn_one(rng.normal(size=(L, 4)), [int(v) for v in rng.integers(K_, size=L)])
    st = est._learner.store
    assert st.Kc >= K_
    for j in st.slots():
        L = int(st.meta[j, K.M_L])
        kp, tcap, ep, ecap, eptr, ek = st._sp_lists(j)
        assert st._stat_size_of(j) == ecap + tcap
        assert len(ek) <= ecap < L * st.Kc
        assert ecap + 2 * tcap < L * st.Kc   # (the dense rows alone: L Kc + 2 Kc floats)


def test_emission_lists_grow_and_keep_the_weights_exact(monkeypatch):
    """With room for the truth's tags only, steps find the emission lists full, are skipped and
    the blocks move to larger segments: the weights stay the sum of the blocks."""
    monkeypatch.setattr(blk, "ECAP_ROOM", 0)
    monkeypatch.setattr(blk, "ECAP_EXTRA", 0)
    monkeypatch.setattr(blk, "ECAP_SHORT", 0)
    X, Y = chain_stream(4, n=40)
    est = fit("sparse", X, Y, refine=6, step="pairwise", cache=True, cache_size=6)
    lr = est._learner
    assert lr.counters[K.C_TFULL] > 0
    assert not np.any(lr.store.meta[lr.store.slots(), K.M_FLAGS] & CS.FLAG_TFULL)
    for a, b in zip((lr.W.E, lr.W.T, lr.W.B), _u_from_blocks(lr)):
        np.testing.assert_allclose(a, b, atol=1e-10, rtol=0)
    dense = copy.deepcopy(est)
    dense._learner.store.compact(sparse=False)
    back = copy.deepcopy(dense)
    back._learner.store.compact(sparse=True)
    for s in lr.store.slots():
        assert np.array_equal(dense._learner.store.dense_stat(s), back._learner.store.dense_stat(s))


def _state():
    X, Y = chain_stream(3, n=12)
    est = fit("sparse", X, Y, refine=1)
    lr = est._learner
    return lr, copy.deepcopy(lr.store.state())


@pytest.mark.parametrize("case", ["tag_range", "not_ascending", "missing_truth", "eptr_over_ecap"])
def test_crafted_emission_lists_are_refused(case):
    lr, st = _state()
    bs = BlockStore.from_state(copy.deepcopy(st), lr.structure, n_rows=lr.W.E.shape[0])
    j = next(int(s) for s in bs.slots() if len(bs._sp_lists(int(s))[5]) >= 2 and bs.meta[s, K.M_L] >= 2)
    kp, tcap, ep, ecap, eptr, ek = bs._sp_lists(j)
    L = int(bs.meta[j, K.M_L])
    Iar = st["Iar"]
    e0 = ep + L + 2
    if case == "tag_range":
        Iar[e0] = st["Kc"]
        msg = "emission tags"
    elif case == "not_ascending":
        t = next(t for t in range(L) if eptr[t + 1] - eptr[t] >= 2) if any(np.diff(eptr) >= 2) else None
        if t is None:   # make token 0 hold two equal tags
            Iar[ep + 2:ep + L + 2] += 1
            Iar[e0 + 1:e0 + int(eptr[L]) + 1] = Iar[e0:e0 + int(eptr[L])].copy()
            msg = "emission"
        else:
            q = int(eptr[t])
            Iar[e0 + q], Iar[e0 + q + 1] = Iar[e0 + q + 1], Iar[e0 + q]
            msg = "not strictly ascending"
    elif case == "missing_truth":
        y = int(Iar[int(st["meta"][j, K.M_IOFF]) + L + 1 + int(st["meta"][j, K.M_NNZ])])
        q = int(eptr[0]) + list(ek[eptr[0]:eptr[1]]).index(y)
        Iar[e0 + q] = (y + 1) % st["Kc"] if eptr[1] - eptr[0] == 1 else Iar[e0 + q]
        if eptr[1] - eptr[0] > 1:   # drop the truth's entry: shift the token's others down
            Iar[ep + 2:ep + L + 2] -= 1
            Iar[e0 + q:e0 + int(eptr[L]) - 1] = Iar[e0 + q + 1:e0 + int(eptr[L])].copy()
        msg = "true tag is missing|not strictly ascending"
    else:
        Iar[ep + 1 + L] = ecap + 1
        msg = "do not fit"
    with pytest.raises(CheckpointError, match=msg):
        BlockStore.from_state(st, lr.structure, n_rows=lr.W.E.shape[0])
