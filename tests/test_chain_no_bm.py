"""Sparse chain blocks keep no start / end rows BM (issue 22 item 9): BM equals the first and
last rows of the emission statistic M bit for bit, so the kernels read those rows (same floats,
same order) and a block's statistic is ``M | TV``. Files written when sparse blocks kept
``M | BM | TV`` load (converted) and continue to the digests that code recorded."""
import hashlib
import os

import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels import layout as KL
from streamssvm._kernels.common import py_entry

DATA = os.path.join(os.path.dirname(__file__), "data")

#: Written by 8f26b21 (sparse blocks with BM): ``SequenceTagger(BCFW(lam=0.05, seed=1, **kw))``
#: on 30 random chains (6 tags), ``learn_many`` of 20 then ``learn_one`` of 10, saved; then that
#: code loaded each file and ran ``refine(2)``: (sha256 of E | T | B, first 16 hex digits; gap).
OLD_FILES = {
    "fw": ({}, "d8549cb326630ac7", 0.44753435223156357),
    "keep": ({"evicted_average": "keep", "window": 20}, "d2291e74dd4df1ae", 0.900977632884186),
    "pool": ({"step": "pairwise", "cache": True, "cache_size": 4}, "e66eed8c944b634c", 0.5888513953490334),
}


def _digest(m):
    lr = m._learner
    h = hashlib.sha256()
    for a in (lr.W.E, lr.W.T, lr.W.B):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _assert_no_bm(store):
    for s in store.slots():
        m = store.meta[s]
        L, tcap = int(m[KL.M_L]), int(store.Iar[int(py_entry(KL.pairs_pos)(store.meta, s)[1]) + 1])
        kp, ecap = store._m_len(s)   # M holds the block's entries (ecap of them), not L x Kc
        en = int(store.Iar[kp + 2 + 2 * tcap])
        assert en <= ecap and store.stat_len(L, tcap, ecap=ecap) == ecap + tcap
        dense = store.dense_stat(s)   # the dense layout's BM = M's first and last rows
        o, Kc = L * store.Kc + store.Kc * store.Kc, store.Kc
        assert np.array_equal(dense[o:o + Kc], dense[:Kc])
        assert np.array_equal(dense[o + Kc:o + 2 * Kc], dense[(L - 1) * Kc:L * Kc])


@pytest.mark.parametrize("name", sorted(OLD_FILES))
def test_files_with_start_end_rows_load_and_continue_identically(name, tmp_path):
    kw, want, gap = OLD_FILES[name]
    m = ss.SequenceTagger.load(os.path.join(DATA, f"chain_sparse_bm_{name}.ssvm"))
    st = m._learner.store
    assert st.sparse and (st.avg == (name == "keep")) and (st.pool_cap > 0) == (name == "pool")
    _assert_no_bm(st)
    m.save(tmp_path / "again")   # written again in today's layout, it loads to the same model
    r = ss.SequenceTagger.load(tmp_path / "again")
    for est in (m, r):
        est.refine(2)
        assert _digest(est) == want
        assert est.certificate().gap == gap


def test_new_sparse_blocks_hold_no_start_end_rows():
    """A new sparse block's statistic is ecap + tcap floats (it was L x Kc + 2 Kc + tcap);
    its BM rows, read in the dense layout, are M's first and last rows."""
    rng = np.random.default_rng(0)
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.1, seed=0, evicted_average="keep", window=5))
    for L in (1, 2, 5, 9, 3, 7):
        m.learn_one(rng.normal(size=(L, 3)), [int(v) for v in rng.integers(7, size=L)])
    m.refine(3)
    st = m._learner.store
    assert st.sparse and st.avg
    _assert_no_bm(st)
    for s in st.slots():
        mm = st.meta[s]
        L, tcap = int(mm[KL.M_L]), int(st.Iar[int(py_entry(KL.pairs_pos)(st.meta, s)[1]) + 1])
        gl = 0 if int(mm[KL.M_FLAGS]) & KL.FLAG_NO_GRAM else L * L
        ss_ = st._m_len(s)[1] + tcap
        assert int(mm[KL.M_FSIZE]) == int(mm[KL.M_NNZ]) + gl + ss_ + st.pool_cap + ss_ + 1
