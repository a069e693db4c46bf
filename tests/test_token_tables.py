"""The Gram-free chain path (``common.emission_sqnorm_tokens``) sorts each token's features and
looks them up with its own loops instead of numpy's argsort / searchsorted (whose generic numba
implementations cost a cold start seconds of compilation): same order and same positions."""
import numpy as np

from streamssvm._kernels import common
from streamssvm._kernels.common import py_entry


def test_stable_order_is_numpys_stable_argsort():
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 3, 7, 16, 33, 100):
        for hi in (2, 5, 1000):   # few distinct keys: many ties, whose order must be kept
            v = rng.integers(0, hi, size=n + 5)
            a = int(rng.integers(0, 6))
            got = py_entry(common._stable_order)(v, a, n)
            assert got.tolist() == np.argsort(v[a:a + n], kind="mergesort").tolist()


def test_token_table_and_gram_entry_match_the_gram_matrix():
    """Repeated features inside a token: the table sums them in order, and the entries it gives
    are gram's, bit for bit."""
    rng = np.random.default_rng(1)
    L = 6
    sizes = rng.integers(1, 12, size=L)
    tok_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    fidx = rng.integers(0, 9, size=tok_ptr[-1]).astype(np.int64)
    fval = rng.normal(size=tok_ptr[-1])
    G = np.zeros((L, L))
    py_entry(common.gram)(tok_ptr, fidx, fval, L, G, np.zeros(9))
    keys, vals = np.empty(tok_ptr[-1], np.int64), np.empty(tok_ptr[-1])
    for t in range(L):
        m = py_entry(common._token_table)(tok_ptr, fidx, fval, t, keys, vals)
        assert np.all(np.diff(keys[:m]) > 0)
        for s in range(t, L):
            assert py_entry(common._gram_entry)(tok_ptr, fidx, fval, t, s, keys, vals, m) == G[t, s]
