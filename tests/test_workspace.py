"""The kernels' scratch buffers (streamssvm.workspace): grown by need, never doubled per label."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm.structures import Chain, Hierarchy, MultiClass, MultiLabel
from streamssvm.workspace import Workspace

MB = 1 << 20


def test_new_labels_do_not_grow_the_length():
    ws = Workspace(MultiClass())
    for Kc in range(2, 200):
        ws.ensure(1, Kc)
    assert ws.L_cap == 8 and ws.S.shape == (8, 199) and ws.ybuf.shape == (199,)
    assert ws.nbytes < MB


def test_length_grows_modestly_and_to_need():
    ws = Workspace(Chain()).ensure(10, 5)
    assert ws.L_cap == 10
    ws.ensure(11, 5)
    assert ws.L_cap == 12          # 1.25 x, not 2 x
    ws.ensure(100, 5)
    assert ws.L_cap == 100
    ws.ensure(3, 5)                # never shrinks
    assert ws.L_cap == 100 and ws.dbuf.shape[0] >= Chain().stat_size(100, 5)


def test_slack_table_only_on_demand_and_by_that_length():
    ws = Workspace(Chain()).ensure(500, 10)
    assert ws.V3.shape == (1, 1, 1)                     # margin rescaling never pays for it
    assert ws.slack_dp(500, needed=False).shape == (1, 1, 1)
    assert ws.slack_dp(40).shape == (41, 10, 41)        # sized by this call's L, not L_cap
    assert ws.slack_dp(20).shape == (41, 10, 41)        # reused
    assert ws.slack_dp(60).shape == (61, 10, 61)
    ws.ensure(1, 11)                                    # a new label drops the table
    assert ws.V3.shape == (1, 1, 1)
    for st in (MultiClass(), MultiLabel(), MultiLabel(pairwise=True), Hierarchy({"a": "r", "b": "r"})):
        assert Workspace(st).ensure(5, 8).slack_dp(5).shape == (1, 1, 1)


def test_sgd_labels_one_at_a_time():
    """Regression: every new label doubled SGD's buffer length and allocated the (L+1) x Kc x
    (L+1) slack table; MemoryError at the 11th-12th label."""
    m = ss.MulticlassSSVM(learner=ss.learners.SGD())
    for i in range(15):
        m.learn_one({"f": 1.0}, i)
    lr = m._learner
    assert lr._ws.nbytes < MB
    assert m.predict_one({"f": 1.0}) in range(15)


@pytest.mark.parametrize("learner", [
    lambda: ss.learners.SGD(search="exact"),
    lambda: ss.learners.BCFW(lam=0.01, seed=0),
])
def test_slack_tagger_26_tags_bounded_workspace(learner):
    """Regression: SequenceTagger(rescaling='slack', learner=SGD(search='exact')) on OCR-like
    words with the tags arriving one at a time tried to allocate 54 GB by the 26th tag."""
    m = ss.SequenceTagger(rescaling="slack", learner=learner())
    rng = np.random.default_rng(0)
    tags = [chr(ord("a") + k) for k in range(26)]
    for k in range(26):
        L = int(rng.integers(3, 12))
        seq = [tags[k]] + [tags[int(j)] for j in rng.integers(0, k + 1, size=L - 1)]
        xs = [{f"p{int(q)}": 1.0 for q in rng.integers(0, 64, size=8)} for _ in range(L)]
        m.learn_one(xs, seq)
    lr = m._learner
    assert lr._ws.Kc >= 26
    assert lr._ws.nbytes < 50 * MB
