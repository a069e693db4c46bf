"""The chain decoders' compile structure (a SequenceTagger's cold start) and their equality.

Numba optimizes every separately compiled kernel together with everything it calls, then again
inside each caller: the Viterbi selectors, which only branch between the sparse and the dense
loop, are inlined into their callers' numba IR (``inline="always"``; still callable from Python),
so the step's ``decode`` and the prediction's ``decode_frozen`` each compile the two loops' callers
once, and neither links the other. The sparse loop itself is called through its address
(``chain.sparse_viterbi``, the chain's Model ``graph`` field): compiled only once a model holds
``VITERBI_SPARSE_MIN_K`` tags."""
import numpy as np
import pytest

from streamssvm._kernels import chain as CH
from streamssvm._kernels import structops as so


def test_viterbi_selectors_are_inlined():
    for d in (CH.chain_viterbi, CH.chain_viterbi_with_support, CH.viterbi_support):
        assert d.targetoptions.get("inline") == "always", d.py_func.__name__
    # the two loops are shared by the decoders and have no Python entry (its unboxing would be
    # compiled code of its own on every cold start; tests reach them through jitted callers; the
    # sparse one compiles as an addressed twin, fnptr.jit_address)
    for d in (CH.chain_viterbi_sparse, CH.chain_viterbi_dense):
        assert d.targetoptions.get("no_cpython_wrapper"), d.py_func.__name__


def _model(K, use_trans):
    return (so.tag(so.CHAIN), K, K, use_trans, 1.0 - np.eye(K), CH.sparse_viterbi(K))


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
    support = so.frozen_support(model, T)
    b = so.decode_frozen(model, w, S, 0.5, L, ytrue, L, loss_scale, 1, scratch, o2, support)
    assert a == b and o1.tolist() == o2.tolist()


def test_few_tags_never_compile_the_sparse_loop():
    """A chain model below ``VITERBI_SPARSE_MIN_K`` tags passes (0, 0) for the sparse loop's
    addresses and its decoders run the dense loop: in a fresh process, learning and predicting
    with 3 tags leaves the sparse loop's twins uncompiled; at 40 tags they compile (and give the
    labeling the dense loop gives: ``test_decode_frozen_is_decode``)."""
    import subprocess
    import sys
    code = ("import streamssvm as ss\n"
            "from streamssvm._kernels import chain as CH, fnptr\n"
            "m = ss.SequenceTagger()\n"
            "m.learn_one([{'a': 1.0}, {'b': 1.0}], ['D', 'N'])\n"
            "m.predict_one([{'a': 1.0}, {'b': 1.0}])\n"
            "print(len(fnptr._TWINS), CH.sparse_viterbi(3))\n"
            "tags = [f't{i}' for i in range(40)]\n"
            "m.learn_one([{f'w{i}': 1.0} for i in range(40)], tags)\n"
            "m.predict_one([{'w1': 1.0}, {'w2': 1.0}])\n"
            "print(len(fnptr._TWINS), min(CH.sparse_viterbi(40)) > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "0 (0, 0)" and out[1] == "2 True"
