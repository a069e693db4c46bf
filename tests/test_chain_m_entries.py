"""Sparse chain blocks keep their emission statistic M as per-token (tag, value) entries (issue 22
item 9: ``_kernels/chainsparse.py``) instead of L x Kc (and, before them, L x a tag room). A token's
entries stay ascending, so every sum visits M's non-zeros in the order the L x Kc layout did: the
weights are the same to the bit as before, also when blocks meet tags late (labels that appear
late in the stream, and the oracle's labelings during refinement), whether a block has entries
to spare, reclaims its zero entries or moves to a larger segment (``chainsparse.sp_move_grown``):
against hashes written before the entries, against blocks with entries for every step
(``blocks.ENTRY_SLACK``), and kernel by kernel against the dense layout. Files written with tag
rooms load and continue to the digests that code recorded."""
import hashlib
import os

import numpy as np
import pytest

import streamssvm as ss
import streamssvm.blocks as blk
from streamssvm._kernels import chainsparse as CS
from streamssvm._kernels import layout as KL
from streamssvm._kernels import structops as so
from streamssvm._kernels.common import py_entry

DATA = os.path.join(os.path.dirname(__file__), "data")

#: Written by 13113b8 (M as L x Kc): ``SequenceTagger(BCFW(lam=0.05, replay=2, seed=4, **kw))`` on
#: :func:`late_tags_stream` (``learn_one`` each, then ``refine(3)``): sha256 of E | T | B (first 16
#: hex digits) and the duality gap.
BEFORE = {
    "fw": ({}, "207ea93e4f9a7e7e", 1.7858603741861807),
    "pairwise": ({"step": "pairwise", "cache": True, "cache_size": 5}, "30178920b9714603", 2.4084396834119435),
    "keep": ({"evicted_average": "keep", "window": 25}, "757e7fef5146b18e", 2.2990904206042684),
}


def late_tags_stream(seed=7, n=40, K=9, d=4):
    """Chains of 1-7 tokens whose tags k >= 3 + 3 i / n only appear as the stream goes on (so blocks
    held from the start meet them late, through the oracle)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(K, d)) * 1.3
    X, Y = [], []
    for i in range(n):
        k_now = min(K, 3 + (3 * i) // max(n // 6, 1))
        L = int(rng.integers(1, 8))
        y = [int(v) for v in rng.integers(k_now, size=L)]
        X.append(centers[y] + rng.normal(size=(L, d)))
        Y.append(y)
    return X, Y


def _fit(kw):
    X, Y = late_tags_stream()
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, replay=2, seed=4, **kw))
    for x, y in zip(X, Y):
        m.learn_one(x, y)
    m.refine(3)
    lr = m._learner
    h = hashlib.sha256()
    for a in (lr.W.E, lr.W.T, lr.W.B):
        h.update(np.ascontiguousarray(a).tobytes())
    return m, h.hexdigest()[:16], m.certificate().gap


def _ecaps(st):
    """(entries in use, capacity) of each held sparse block."""
    out = []
    for j in st.slots():
        kp, ecap = st._m_len(j)
        out.append((int(st.Iar[kp + 2 + 2 * int(st.Iar[kp + 1])]), ecap))
    return out


@pytest.mark.parametrize("name", sorted(BEFORE))
@pytest.mark.parametrize("entries", ["tight", "default", "full"])
def test_m_entries_keep_the_weights_of_the_full_layout(name, entries, monkeypatch):
    """"full": the store's few tags (at most ``FULL_ENTRIES_KC``) give each block L x Kc entries
    when written; "default" / "tight": blocks start with 2 L + slack / L entries and grow."""
    kw, want, gap = BEFORE[name]
    if entries != "full":
        monkeypatch.setattr(blk, "FULL_ENTRIES_KC", 0)
    if entries == "tight":   # room for the truth's L entries only: blocks fill, reclaim their zeros and move
        monkeypatch.setattr(blk.BlockStore, "ecap0", lambda self, L, Kc=None: np.asarray(L, dtype=np.int64))
    m, digest, g = _fit(kw)
    st = m._learner.store
    assert st.sparse and m._learner.W.Kc > 4   # the label capacity grew while blocks were held
    E = _ecaps(st)
    L = [int(st.meta[s, KL.M_L]) for s in st.slots()]
    assert all(n <= c for n, c in E)
    if entries == "full":   # every block has room for every tag it could meet when written
        assert all(c >= 4 * l for (_, c), l in zip(E, L))
    else:
        assert sum(c for _, c in E) < sum(L) * st.Kc   # (fewer than L x Kc)
    if entries == "tight":   # some block outgrew its first entries
        assert any(c > l for (_, c), l in zip(E, L))
    assert digest == want
    assert g == gap


def test_the_stores_pair_list_offsets_are_the_kernels():
    """``BlockStore._kpos`` sums ``layout.pairs_pos``'s offsets in Python (no kernel entry to compile
    on a cold start): the same offset for every held block, sparse or not, with and without pools."""
    for kw in ({}, {"step": "pairwise", "cache": True, "cache_size": 5}):
        m, _, _ = _fit(kw)
        st = m._learner.store
        held = list(st.slots())
        assert held and st.sparse
        for j in held:
            assert st._kpos(j) == int(py_entry(KL.pairs_pos)(st.meta, j)[1])
            assert blk._pairs_offset(st.meta[j]) == st._kpos(j)


def noisy_late_tag_stream(seed=5, n=60, K=8, d=5, late=3):
    """Chains of 1-6 tokens whose last ``late`` tags only appear after the first third of the
    stream, with noisy features so the oracle's labelings bring tags a block's truth lacks."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(K, d))
    X, Y = [], []
    for i in range(n):
        k_now = K - late if i < n // 3 else K
        L = int(rng.integers(1, 7))
        y = [int(v) for v in rng.integers(k_now, size=L)]
        X.append(centers[y] + rng.normal(size=(L, d)) * 1.5)
        Y.append(y)
    return X, Y


def _fit_with_entry_slack(monkeypatch, slack, **kw):
    monkeypatch.setattr(blk, "FULL_ENTRIES_KC", 0)   # blocks grow their entries (8 tags)
    monkeypatch.setattr(blk, "ENTRY_SLACK", slack)
    X, Y = noisy_late_tag_stream()
    est = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, seed=1, replay=2, **kw))
    for x, y in zip(X, Y):
        est.learn_one(x, y)
    est.learn_many(X[:20], Y[:20])
    est.refine(passes=2)
    lr = est._learner
    st = lr.store
    return est, lr.certificate(), _ecaps(st), est.predict_many(X)


@pytest.mark.parametrize("kw", [{}, {"step": "pairwise", "cache": True, "cache_size": 4}])
def test_growing_m_entries_give_the_weights_of_blocks_with_spare_entries(monkeypatch, kw):
    small, c_small, e_small, p_small = _fit_with_entry_slack(monkeypatch, 0, **kw)
    full, c_full, e_full, p_full = _fit_with_entry_slack(monkeypatch, 1000, **kw)
    # some block holds more entries than tokens (tags its truth lacks), the small ones fewer in all
    L = [int(small._learner.store.meta[j, 2]) for j in small._learner.store.slots()]
    assert any(n > l for (n, _), l in zip(e_small, L))
    assert sum(c for _, c in e_small) < sum(c for _, c in e_full)
    a, b = small._learner.W, full._learner.W
    for u, v in ((a.E, b.E), (a.T, b.T), (a.B, b.B)):
        assert np.array_equal(u, v)
    assert (c_small.gap, c_small.primal, c_small.dual) == (c_full.gap, c_full.primal, c_full.dual)
    assert p_small == p_full


#: Written by 5c77914 (M over tag rooms): ``SequenceTagger(BCFW(lam=0.05, replay=2, seed=4, **kw))``
#: on :func:`late_tags_stream`, ``learn_one`` of the first 30, ``learn_many`` of the last 10,
#: saved; then that code loaded each file and ran ``refine(2)``: (sha256 of E | T | B, first 16
#: hex digits; gap).
ROOM_FILES = {
    "fw": ({}, "275fc37cca8849a6", 2.0755341677094163),
    "keep": ({"evicted_average": "keep", "window": 25}, "ec2bff3c4eb24e20", 2.658038339422314),
    "pool": ({"step": "pairwise", "cache": True, "cache_size": 4}, "b94a5fb1bcaeb007", 2.5465607453342427),
}


@pytest.mark.parametrize("name", sorted(ROOM_FILES))
def test_files_with_tag_rooms_load_and_continue_identically(name, tmp_path):
    kw, want, gap = ROOM_FILES[name]
    m = ss.SequenceTagger.load(os.path.join(DATA, f"chain_tag_rooms_{name}.ssvm"))
    st = m._learner.store
    assert st.sparse and st._legacy_m == blk.ENTRIES and (st.avg == (name == "keep"))
    m.save(tmp_path / "again")   # written again with M's entries, it loads to the same model
    r = ss.SequenceTagger.load(tmp_path / "again")
    for est in (m, r):
        est.refine(2)
        assert _digest(est) == want
        assert est.certificate().gap == gap


def _digest(m):
    return _fit_digest(m._learner)


def _fit_digest(lr):
    h = hashlib.sha256()
    for a in (lr.W.E, lr.W.T, lr.W.B):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _bits(a):
    return np.asarray(a, dtype=np.float64).view(np.int64)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_entry_kernels_give_the_dense_layouts_values_bit_for_bit(seed):
    """Score, linear loss, ||Phi||^2 (stored and token-computed Gram matrix) and Phi-apply of every
    held block, its M entries set to random values with some exactly +0.0 / -0.0, against the
    dense layout's kernels on the same statistic (``dense_stat``): the same bits. (TV at 0 for the
    sums: the pairs' order is their registration order, not the dense table's.)"""
    rng = np.random.default_rng(seed)
    X, Y = noisy_late_tag_stream(seed=seed)
    est = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, seed=seed))
    est.learn_many(X, Y)
    est.refine(1)
    st = est._learner.store
    Kc = st.Kc
    score, sqn, loss_lin, apply_ = (py_entry(CS.sp_score), py_entry(CS.sp_sqnorm), py_entry(CS.sp_loss_lin),
                                    py_entry(CS.sp_apply))
    C = rng.random((Kc, Kc))
    np.fill_diagonal(C, 0.0)
    E1 = rng.normal(size=(est._learner.W.E.shape[0], Kc))
    T1, B1 = rng.normal(size=(Kc, Kc)), rng.normal(size=(2, Kc))
    E2, T2, B2 = E1.copy(), T1.copy(), B1.copy()
    seen_zero = 0
    for j in st.slots():
        L = int(st.meta[j, KL.M_L])
        kp, ecap = st._m_len(j)
        tcap = int(st.Iar[kp + 1])
        s0 = st._stat_pos(j)
        sp = st.Far[s0:s0 + ecap + tcap]
        en = int(st.Iar[kp + 2 + 2 * tcap])
        v = rng.normal(size=en)
        z = rng.random(en) < 0.2
        v[z] = np.where(rng.random(int(z.sum())) < 0.5, 0.0, -0.0)
        seen_zero += int(z.sum())
        sp[:en] = v
        sp[ecap:] = 0.0
        dense = st.dense_stat(j)
        b = st.block(j)
        x = (np.asarray(b["tok_ptr"]), np.asarray(b["fidx"]), np.asarray(b["fval"]))
        G = np.asarray(b["gram"])
        yt = np.asarray(b["ytrue"]).astype(np.int32)
        S = rng.normal(size=(L, Kc))
        S[rng.random((L, Kc)) < 0.1] = 0.0
        for use_trans in (False, True):
            assert _bits(score(S, T1, B1, 0.37, sp, L, Kc, Kc, use_trans, st.Iar, kp)) == _bits(
                so.stat_score(so.CHAIN, S, T1 * 0.0, B1, 0.37, dense, L, Kc, Kc, use_trans))
            assert _bits(sqn(G, sp, L, Kc, Kc, use_trans, st.Iar, kp)) == _bits(
                so.stat_sqnorm(so.CHAIN, G, dense, L, Kc, Kc, use_trans))
        Ki = int(st.meta[j, KL.M_KI])
        assert _bits(loss_lin(sp, yt, C, L, Ki, st.Iar, kp)) == _bits(
            so.stat_loss_lin(so.CHAIN, dense, yt, L, C, L, Kc, Kc, Ki, np.zeros(Kc, np.int32)))
        sp[ecap:ecap + int(st.Iar[kp])] = rng.normal(size=int(st.Iar[kp]))   # (apply: each pair once, any order)
        dense = st.dense_stat(j)
        coef = float(rng.normal())
        apply_((E1, T1, B1), x, sp, L, Kc, Kc, coef, True, st.Iar, kp)
        so.stat_apply(so.CHAIN, (E2, T2, B2), x, dense, L, Kc, Kc, coef, True)
    assert seen_zero > 0
    for a, b in ((E1, E2), (T1, T2), (B1, B2)):
        assert np.array_equal(_bits(a), _bits(b))


def test_swapping_in_a_statistic_with_more_entries_moves_the_block_and_keeps_it_whole(monkeypatch):
    """``swap_sparse_stat`` with an M of more entries than the block holds moves the block to a
    larger segment, which also doubles its pair capacity: the entries are then written after the
    new pair list (a stale pair capacity wrote them over it: the block read back wrong)."""
    monkeypatch.setattr(blk, "FULL_ENTRIES_KC", 0)   # blocks hold fewer than L x Kc entries
    rng = np.random.default_rng(3)
    X, Y = noisy_late_tag_stream(seed=3)
    est = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, seed=3))
    est.learn_many(X, Y)
    st = est._learner.store
    assert st.blends_sparse()
    Kc = st.Kc
    j = max(st.slots(), key=lambda s: int(st.meta[s, KL.M_L]))
    L = int(st.meta[j, KL.M_L])
    others = {s: st.dense_stat(s) for s in st.slots() if s != j}
    pairs, vals, _ = st._pairs(j)
    head = rng.normal(size=(L, Kc))   # every tag of every token: more entries than the block holds
    assert L * Kc > st._m_len(j)[1]
    tcap0 = int(st.Iar[st._kpos(j) + 1])
    st.swap_sparse_stat(j, head.ravel(), pairs, vals)
    assert int(st.Iar[st._kpos(j) + 1]) > tcap0   # (the move gave it more pairs too)
    want = np.zeros(st.structure.stat_size(L, Kc))
    want[:L * Kc] = head.ravel()
    T = want[L * Kc:L * Kc + Kc * Kc].reshape(Kc, Kc)
    T[pairs[:, 0], pairs[:, 1]] = vals
    o2 = L * Kc + Kc * Kc
    want[o2:o2 + Kc], want[o2 + Kc:o2 + 2 * Kc] = head[0], head[L - 1]
    assert np.array_equal(st.dense_stat(j), want)
    assert all(np.array_equal(st.dense_stat(s), d) for s, d in others.items())
    est.refine(1)   # the kernels read the block as written
    assert np.isfinite(est.certificate().gap)


def test_few_tags_refine_without_waiting_steps_or_moving_blocks(monkeypatch):
    """300 OCR words (26 tags, at most ``FULL_ENTRIES_KC``): every block is written with its L x Kc
    entries, so a refinement pass moves no block for entries and no step waits for room
    (``C_TFULL``). With blocks that grow their entries (as before ``FULL_ENTRIES_KC``), 28 steps of the
    first pass waited and 79 blocks moved; on OCR-large 409 waited and the pass took twice as long."""
    from streamssvm._kernels import bcfw as KB
    X, y, _, _ = ss.datasets.load_ocr("large")
    moves = []
    copy = blk.BlockStore._copy_block
    monkeypatch.setattr(blk.BlockStore, "_copy_block", lambda self, *a, **k: (moves.append(a[0]), copy(self, *a, **k))[1])
    t = ss.SequenceTagger(learner=ss.learners.BCFW(lam=1e-3, replay=0, sampling="uniform", gap_every=None, seed=0),
                          labels=list(range(26)), loss="normalized")
    t.learn_many(X[:300], [list(v) for v in y[:300]])
    t._learner.refine(2)
    assert t._learner.counters[KB.C_STEPS] > 300
    assert int(t._learner.counters[KB.C_TFULL]) == 0
    assert moves == []
