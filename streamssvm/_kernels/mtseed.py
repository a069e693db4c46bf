"""The draws numba's ``np.random`` makes after ``np.random.seed(s)``, without paying for the seeding.

The record path reseeds the sampler for every record (each record's learning call has its own
seed, so that a micro-batch learns exactly as record by record). numba's ``np.random.seed(s)``
runs the Mersenne Twister's initialization over all 624 state words, and the first draw after it
regenerates all 624 (the twist): ~1.3 µs per record, for the one or two 32-bit words a replay step
draws. Word k < 227 of the twisted state depends only on initial words k, k + 1 and k + 397
(Matsumoto and Nishimura, "Mersenne Twister: a 623-dimensionally equidistributed uniform
pseudo-random number generator", ACM TOMACS 8(1), 1998), so the first words are computed from the
initialization's first ~400 words alone (~0.65 µs). From word 227 on (never on the record path:
a gap draw takes two words, a uniform one about two), the whole state is built and twisted as
numba does, so every draw stays exact.

The generator is an int64 array ``st`` of :data:`STATE` entries: the state words (initial, then
twisted once the whole state is built), and at :data:`_C` the initial words computed so far, at
:data:`_K` the next word's index, at :data:`_FULL` 1 once the whole state is built. The draws
are numba's, to the bit (``numba/cpython/randomimpl.py``: ``get_next_int32`` with its tempering,
``get_next_double``, ``_randrange_impl`` for ``np.random.randint(n)``); ``tests/test_mtseed.py``
compares them with numba's own for many seeds and draw patterns.
"""
from numba import njit

from .common import _INNER
from .sumtree import SAMPLE_GAP, tree_sample

_N, _M = 624, 397
_C, _K, _FULL = _N, _N + 1, _N + 2
#: entries of a generator array (``np.empty(STATE, np.int64)``)
STATE = _N + 3
_LAZY_WORDS = _N - _M   # words 0..226 of the twisted state need the initial words up to 623 at most


@njit(**_INNER)
def mt_seed(st, seed):
    """``np.random.seed(seed)`` (a 32-bit seed) for the draws of this module: nothing is computed
    until a word is drawn."""
    st[0] = seed & 0xFFFFFFFF
    st[_C] = 1
    st[_K] = 0
    st[_FULL] = 0


@njit(inline="always", **_INNER)
def _mt_init_to(st, need):
    """The initialization's words up to index ``need - 1`` (Knuth's recurrence, as numba's
    ``numba_rnd_init``). Inlined: its two calls pass an int and the constant ``_N`` (a literal),
    which would compile it twice."""
    c = st[_C]
    if c < need:
        x = st[c - 1]
        for i in range(c, need):
            x = (1812433253 * (x ^ (x >> 30)) + i) & 0xFFFFFFFF
            st[i] = x
        st[_C] = need


@njit(**_INNER)
def _mt_twist(st):
    """numba's ``numba_rnd_shuffle`` over the whole state, in place."""
    for i in range(_N):
        y = (st[i] & 0x80000000) | (st[(i + 1) % _N] & 0x7FFFFFFF)
        v = st[(i + _M) % _N] ^ (y >> 1)
        if y & 1:
            v ^= 0x9908B0DF
        st[i] = v


@njit(**_INNER)
def mt_next_u32(st):
    """The next 32-bit word, tempered (numba's ``get_next_int32``)."""
    k = st[_K]
    if st[_FULL] == 0 and k < _LAZY_WORDS:
        _mt_init_to(st, k + _M + 1)
        y = (st[k] & 0x80000000) | (st[k + 1] & 0x7FFFFFFF)
        v = st[k + _M] ^ (y >> 1)
        if y & 1:
            v ^= 0x9908B0DF
    else:
        if st[_FULL] == 0:   # the whole state, twisted as numba twists it (words before k unchanged)
            _mt_init_to(st, _N)
            _mt_twist(st)
            st[_FULL] = 1
        if k >= _N:
            _mt_twist(st)
            k = 0
        v = st[k]
    st[_K] = k + 1
    v ^= v >> 11
    v ^= (v << 7) & 0x9D2C5680
    v ^= (v << 15) & 0xEFC60000
    v ^= v >> 18
    return v


@njit(**_INNER)
def mt_random(st):
    """``np.random.random()`` (numba's ``get_next_double``)."""
    a = mt_next_u32(st) >> 5
    b = mt_next_u32(st) >> 6
    return (b + a * 67108864.0) / 9007199254740992.0


@njit(**_INNER)
def mt_randint(st, n):
    """``np.random.randint(n)`` for an int64 ``n >= 1`` (numba's ``_randrange_impl``: the low
    bits of a word, as many as ``n - 1`` has, drawn again while >= n; none drawn for n == 1)."""
    if n == 1:
        return 0
    m = n - 1
    nbits = 0
    while m > 0:
        nbits += 1
        m >>= 1
    while True:
        if nbits <= 32:
            r = mt_next_u32(st) & (0xFFFFFFFF >> (32 - nbits))
        else:   # the high word first, as numpy
            high = mt_next_u32(st) & (0xFFFFFFFF >> (64 - nbits))
            r = mt_next_u32(st) + (high << 32)
        if r < n:
            return r


@njit(**_INNER)
def mt_sample_block(sampling, tree, tree_size, alive, n_alive, st):
    """``bcfw.sample_block`` with this module's draws (the same blocks after the same seed)."""
    if sampling == SAMPLE_GAP and tree[1] > 0.0:
        j = tree_sample(tree, tree_size, mt_random(st))
        if j < tree_size and tree[tree_size + j] > 0.0:
            return j
    return alive[mt_randint(st, n_alive)]


from .common import guard_inner as _guard_inner  # noqa: E402 (last: it sees every kernel above)

_guard_inner(globals())   # a Python call of an _INNER kernel raises (common.InnerKernel)
