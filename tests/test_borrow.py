"""``_kernels.borrow.borrowed``: the same arrays without reference counts, and the batch kernels
that run their steps on borrowed bundles (the same results, no meminfo leaked or freed twice)."""
import sys

import numpy as np
import pytest
from numba import njit, types
from numba.core import cgutils
from numba.core.runtime import _nrt_python, rtsys
from numba.extending import intrinsic

import streamssvm as ss
from streamssvm._kernels import bcfw as K
from streamssvm._kernels.borrow import borrowed


@intrinsic
def _meminfo_address(typingctx, a):
    """The address of an array's NRT meminfo (0: none)."""
    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, value=args[0])
        return builder.ptrtoint(ary.meminfo, context.get_value_type(types.intp))
    return types.intp(a), codegen


@njit
def _borrow_and_write(bundle):
    """Borrow a bundle ((a, (B, k), s)), write through the borrowed views, return what they read
    and their meminfo addresses, and the owners'."""
    b = borrowed(bundle)
    a, (B, k), s = b
    a[0] = 7.0
    B[1, 1] += s
    rows = B[1:]   # a view of a borrowed array: borrowed too
    return (a.sum(), B.sum(), k, s, _meminfo_address(a), _meminfo_address(B), _meminfo_address(rows),
            _meminfo_address(bundle[0]), _meminfo_address(bundle[1][0]))


def test_borrowed_arrays_are_the_same_memory_without_meminfo():
    a = np.arange(4.0)
    B = np.ones((3, 2))
    asum, bsum, k, s, ma, mb, mrows, own_a, own_b = _borrow_and_write((a, (B, 5), 0.25))
    assert a[0] == 7.0 and B[1, 1] == 1.25   # written through the borrowed views
    assert asum == a.sum() and bsum == B.sum() and (k, s) == (5, 0.25)
    assert ma == mb == mrows == 0
    assert own_a != 0 and own_b != 0   # the arguments themselves keep their counts


def test_borrowed_leaves_values_without_arrays_alone():
    @njit
    def f(x):
        return borrowed(x)

    assert f((1, 2.5, True)) == (1, 2.5, True)
    assert f(()) == ()
    v = np.arange(3.0)
    out = f(v)
    assert np.array_equal(out, v)


def test_batch_kernels_borrow_their_bundles():
    # the steps of a batch run on borrowed bundles: ~676 atomic reference counts per 784-d
    # example without them (bench/batch_pieces.py: learn_new_blocks_cm ~30% slower)
    for kern in (K.learn_new_blocks, K.learn_new_blocks_cm, K._insert_dense_rows):
        assert "borrowed" in kern.py_func.__code__.co_names, kern


def test_record_kernels_borrow_their_bundles():
    # the record path's kernels too: ~843 atomic reference counts per OCR letter (16-d, 26
    # classes) through predict_learn_each without them, ~18 with (NUMBA_DEBUG_NRT=1 counts)
    from streamssvm._kernels import microbatch
    for kern in (microbatch.predict_learn_examples, K.learn_one_example, K.predict_class, K.predict_batch,
                 K.run_steps, K.full_gap_pass, K._insert_blocks, K.rebuild_u):
        assert "borrowed" in kern.py_func.__code__.co_names, kern


@pytest.mark.parametrize("path", ["predict_learn_each", "learn_one", "certificate"])
def test_record_paths_on_borrowed_bundles_free_what_they_allocate(path):
    X, y = _stream()
    m = ss.MulticlassSSVM()
    m.predict_learn_each(list(X[:100]), [int(c) for c in y[:100]])   # compiled, grown
    for x, c in zip(X[100:110], y[100:110]):
        m.predict_one(x)
        m.learn_one(x, c)
    m.certificate()
    def run():
        for a in range(110, 400, 50):
            if path == "predict_learn_each":
                m.predict_learn_each(list(X[a:a + 50]), [int(c) for c in y[a:a + 50]])
            elif path == "learn_one":
                for x, c in zip(X[a:a + 50], y[a:a + 50]):
                    m.predict_one(x)
                    m.learn_one(x, c)
            else:
                m.certificate()
    _assert_frees_what_it_allocates(m, run)


def _assert_frees_what_it_allocates(m, run):
    """``run()`` on model ``m``'s learner: every NRT meminfo and allocation it makes is freed
    (numba's allocation stats), and the Python refcounts of the learner's arrays are as before
    (no borrowed array keeps or drops a reference)."""
    lr = m._learner
    owners = [lr.W.E, lr._Z.E, lr.store.Far, lr.store.Iar, lr.store.meta]
    refs = [sys.getrefcount(a) for a in owners]
    was_on = _nrt_python.memsys_stats_enabled()
    _nrt_python.memsys_enable_stats()
    try:
        before = rtsys.get_allocation_stats()
        run()
        after = rtsys.get_allocation_stats()
    finally:
        if not was_on:
            _nrt_python.memsys_disable_stats()
    assert after.mi_alloc - before.mi_alloc == after.mi_free - before.mi_free > 0
    assert after.alloc - before.alloc == after.free - before.free
    if lr.W.E is owners[0] and lr.store.Far is owners[2]:   # (not regrown meanwhile)
        assert [sys.getrefcount(a) for a in owners] == refs


def _stream(n=600, d=40, k=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.9)
    return X, rng.integers(0, k, size=n)


@pytest.mark.parametrize("dense", [True, False])
def test_batches_on_borrowed_bundles_free_what_they_allocate(dense):
    X, y = _stream()
    if not dense:   # sparse dict rows: learn_new_blocks on the CSR
        X = [{f"f{j}": v for j, v in enumerate(r) if j % 3 == 0 and v != 0.0} for r in X]
    m = ss.MulticlassSSVM()
    m.predict_learn_many(X[:100], y[:100])   # compiled, grown
    _assert_frees_what_it_allocates(m, lambda: [m.predict_learn_many(X[a:a + 100], y[a:a + 100])
                                                for a in range(100, 500, 100)])


def test_dense_batches_learn_the_same_with_and_without_class_major_steps(monkeypatch):
    # both learn kernels borrow their bundles: the same model as each other, to the bit
    X, y = _stream(n=700, d=64, k=6, seed=1)
    runs = []
    for force_row_major in (False, True):
        if force_row_major:
            monkeypatch.setattr(K, "learn_new_blocks_cm", K.learn_new_blocks)
        m = ss.MulticlassSSVM()
        preds = []
        for a in range(0, len(y), 128):
            preds += list(m.predict_learn_many(X[a:a + 128], y[a:a + 128]))
        runs.append((preds, m._learner.emission_weights().copy(), m.predict_many(X[:50])))
    assert runs[0][0] == runs[1][0]
    assert np.array_equal(runs[0][1], runs[1][1])
    assert list(runs[0][2]) == list(runs[1][2])
