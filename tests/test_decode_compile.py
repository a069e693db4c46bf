"""The chain decoders' compile structure (a SequenceTagger's cold start) and their equality.

Numba optimizes every separately compiled kernel together with everything it calls, then again
inside each caller: a helper that only branches between two loops, or that has one caller, costs
a cold start a whole extra optimization of its callees. Those are inlined into their caller's
numba IR (``inline="always"``; still callable from Python) and the step's ``decode`` and the
prediction's ``decode_frozen`` share the same two Viterbi loops."""
import numpy as np
import pytest

from streamssvm._kernels import chain as CH
from streamssvm._kernels import common
from streamssvm._kernels import structops as so


def test_viterbi_selectors_and_single_use_helpers_are_inlined():
    from streamssvm._kernels import chainsparse as CS
    for d in (CH.chain_viterbi, CH.chain_viterbi_with_support, CH.viterbi_support, CH._top_tags, CH._viterbi_first,
              CH._viterbi_unary, CH._viterbi_last, CH.chain_trans_sqnorm, CS.sp_sqnorm, CS.sp_trans_sqnorm,
              common.emission_sqnorm_tokens, common._token_table, common._stable_order, common._gram_entry):
        assert d.targetoptions.get("inline") == "always", d.py_func.__name__


def _model(K, use_trans):
    return (so.tag(so.CHAIN), K, K, use_trans, 1.0 - np.eye(K), np.zeros((1, 1)))


@pytest.mark.parametrize("K", [3, 40])
@pytest.mark.parametrize("L", [1, 2, 7])
@pytest.mark.parametrize("use_trans", [True, False])
@pytest.mark.parametrize("loss_scale", [0.0, 1.0])
def test_decode_frozen_is_decode(K, L, use_trans, loss_scale):
    """Same labeling and value, bit for bit, from the step's decoder (support scanned per call)
    and the frozen-weights one (support found once), sparse T (K >= 32) and dense, L = 1 included."""
    rng = np.random.default_rng(K * 100 + L)
    E = rng.normal(size=(4, K))
    T = np.where(rng.random((K, K)) < 0.05, rng.normal(size=(K, K)), 0.0)
    B = rng.normal(size=(2, K))
    w = (E, T, B)
    S = rng.normal(size=(L, K))
    ytrue = rng.integers(0, K, L).astype(np.int32)
    scratch = (S, np.zeros((L, K)), np.zeros((L, K), np.int32), np.zeros(K, np.int32), np.zeros(L, np.int32),
               np.zeros(K + 1), np.zeros((1, 1, 1)))
    model = _model(K, use_trans)
    o1, o2 = np.zeros(L, np.int32), np.zeros(L, np.int32)
    a = so.decode(model, w, S, 0.5, L, ytrue, L, loss_scale, 1, scratch, o1)
    support = so.frozen_support(so.CHAIN, T, K)
    b = so.decode_frozen(model, w, S, 0.5, L, ytrue, L, loss_scale, 1, scratch, o2, support)
    assert a == b and o1.tolist() == o2.tolist()
