"""Input features and labels -> compact integer-indexed arrays.

* ``FeatureIndex`` maps river-style dict features (``{name: value}``) to column indices,
  through a growing vocabulary (default) or the hashing trick (``n_features=2**k``). Index 0
  is reserved for the constant bias feature every token carries. 1-D / 2-D numpy arrays
  bypass the dictionaries: column ``j`` of an array is feature ``j + 1``.
* ``LabelIndex`` numbers labels in order of appearance; a new class or tag mid-stream is
  normal, not an error.
* Validation: feature names are ``str``, ``int``, ``float``, ``bool`` or tuples of them; values are finite real numbers with
  ``|v| <= MAX_ABS_VALUE`` (1e12); labels are ``str``, ``int``, ``float``, ``bool`` or tuples of
  them. An example is checked whole before any new name is registered, so a rejected example
  changes nothing.

>>> fi = FeatureIndex()
>>> fi.encode_tokens([{"a": 1.0, "b": 2.0}, {"b": 3.0}], grow=True)[1].tolist()
[0, 1, 2, 0, 2]
>>> li = LabelIndex()
>>> [li.encode(v, grow=True) for v in ["x", "y", "x"]]
[0, 1, 0]
"""
from __future__ import annotations

import itertools
import math
import numbers
import zlib

import numpy as np

from ._kernels.common import dense_rows_scan
from ._kernels.multiclass import dense_rows_csr, dict_row_csr, dict_rows_csr

_NO_DIVISORS, _NO_ROWS = np.zeros(0), np.zeros((0, 0))   # check_dense without a division

BIAS = 0
_STR, _INT, _PLAIN = {str}, {int}, {float, int}
_F64 = np.dtype(np.float64)


#: Largest accepted |feature value|. Larger values (e.g. 1e308) would overflow squared norms,
#: inner products and the duality gap to inf / NaN; rescale such inputs first.
MAX_ABS_VALUE = 1e12
#: Integer feature names and labels must fit in a signed 64-bit integer.
_INT_LIMIT = 2**63


def _short(v):
    """A bounded description of a value for error messages (never converts a huge int to str,
    which itself fails above 4300 digits)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"an integer of {v.bit_length()} bits"
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def check_value(v, what="value"):
    """``float(v)`` for a valid feature value: a real number (bools are 0/1), finite, with
    ``|v| <= MAX_ABS_VALUE``; else TypeError / ValueError whose message starts with ``what``.
    The one check of feature values: the estimators' encoders and the file connectors' parsers
    both call it.

    >>> check_value(2), check_value(True)
    (2.0, 1.0)
    >>> check_value(10**400, "feature 'a'")
    Traceback (most recent call last):
    ...
    ValueError: feature 'a': |value| an integer of 1329 bits exceeds MAX_ABS_VALUE = 1e+12
    >>> check_value(float("nan"), "x['b']")
    Traceback (most recent call last):
    ...
    ValueError: x['b'] has a non-finite value nan
    """
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if not isinstance(v, numbers.Real):
        raise TypeError(f"{what} has a non-numeric value {_short(v)} ({type(v).__name__})")
    if isinstance(v, numbers.Integral):
        if not -MAX_ABS_VALUE <= v <= MAX_ABS_VALUE:  # exact comparison, no conversion overflow
            raise ValueError(f"{what}: |value| {_short(v)} exceeds MAX_ABS_VALUE = {MAX_ABS_VALUE:g}")
        return float(v)
    try:
        f = float(v)
    except (OverflowError, ValueError):
        raise ValueError(f"{what}: value {_short(v)} is not representable as a float") from None
    if not math.isfinite(f):
        raise ValueError(f"{what} has a non-finite value {_short(v)}")
    if abs(f) > MAX_ABS_VALUE:
        raise ValueError(f"{what}: |value| {_short(v)} exceeds MAX_ABS_VALUE = {MAX_ABS_VALUE:g}")
    return f


def _check_value(name, v):
    """:func:`check_value` of feature ``name``'s value."""
    return check_value(v, f"feature {_short(name)}")


def _check_key(k, what):
    t = type(k)
    if t is str:
        return
    if t is int:   # the exact type first: river's iter_array yields int keys
        if not -_INT_LIMIT <= k < _INT_LIMIT:
            raise ValueError(f"integer {what} {_short(k)} does not fit in 64 bits")
        return
    if isinstance(k, (str, bool, np.bool_)):
        return
    if isinstance(k, numbers.Integral):
        if not -_INT_LIMIT <= k < _INT_LIMIT:
            raise ValueError(f"integer {what} {_short(k)} does not fit in 64 bits")
        return
    if isinstance(k, numbers.Real):
        try:
            ok = math.isfinite(float(k))
        except OverflowError:
            ok = False
        if not ok:
            raise ValueError(f"invalid {what} {_short(k)} (not a finite number)")
        return
    if type(k) is tuple:
        if len(k) == 0:
            raise ValueError(f"a tuple {what} must not be empty")
        for v in k:
            _check_key(v, what)
        return
    raise TypeError(f"{what}s must be str, int, float, bool or tuples of them, got {type(k).__name__}: "
                    f"{_short(k)}")


def check_name(name):
    """Feature names are ``str``, ``int`` (64-bit), finite ``float``, ``bool`` or tuples of
    them -- what a model file stores exactly; anything else (None, bytes, frozenset, ...) is a
    TypeError.

    >>> check_name(("w", 3))
    >>> check_name(None)
    Traceback (most recent call last):
    ...
    TypeError: feature names must be str, int, float, bool or tuples of them, got NoneType: None
    """
    if type(name) is not str:
        _check_key(name, "feature name")


def check_label(label):
    """Labels are ``str``, ``int`` (64-bit), finite ``float``, ``bool`` or (possibly nested)
    tuples of them -- what a model file can store. TypeError / ValueError otherwise.

    >>> check_label(("animal", 3))
    >>> check_label(b"x")
    Traceback (most recent call last):
    ...
    TypeError: labels must be str, int, float, bool or tuples of them, got bytes: b'x'
    """
    if type(label) is not str:
        _check_key(label, "label")


def check_truth(v, label=None):
    """A multi-label truth value as a bool: ``True`` / ``False``, ``1`` / ``0`` (also numpy
    bools and ints); ``None`` means unknown and is returned as is. Strings such as ``"false"``,
    other numbers and containers are a TypeError / ValueError (``bool("false")`` is True).

    >>> check_truth(1), check_truth(False)
    (True, False)
    >>> check_truth("false")
    Traceback (most recent call last):
    ...
    TypeError: the truth value of a label must be a bool or 0/1, got str 'false'
    """
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, numbers.Integral):
        if v == 0 or v == 1:
            return bool(v)
        raise ValueError(f"the truth value of label {_short(label)} must be 0 or 1, got {_short(v)}")
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral):
        if v == 0.0 or v == 1.0:
            return bool(v)
        raise ValueError(f"the truth value of label {_short(label)} must be 0 or 1, got {_short(v)}")
    raise TypeError(f"the truth value of a label must be a bool or 0/1, got {type(v).__name__} {_short(v)}")


_ISSUER = object()   # only FeatureIndex.encode_record makes an EncodedRecord


class EncodedRecord:
    """One flat example (a dict of features or a 1-D array) validated and encoded by a
    :class:`FeatureIndex` into the CSR arrays the kernels take (``tok_ptr``, ``fidx``, ``fval``
    of the features the index knows). Only :meth:`FeatureIndex.encode_record` makes one, so
    nothing else can skip the validation; the index that made it trusts it while it has not
    changed since (:meth:`FeatureIndex.trusts`).

    ``complete`` is False when ``x`` names features the index does not know yet: the arrays
    then hold the known ones (what a prediction uses) and learning encodes ``x`` again.
    :meth:`unchanged` says whether ``x`` still holds what was encoded (a dict equal to a copy
    taken then; an array with the same dtype, shape and bytes).
    """

    __slots__ = ("x", "tok_ptr", "fidx", "fval", "complete", "_index", "_mark", "_snap")

    def __init__(self, issuer, x, arrays, complete, index, snap):
        if issuer is not _ISSUER:
            raise TypeError("an EncodedRecord is made by FeatureIndex.encode_record only")
        self.x = x
        self.tok_ptr, self.fidx, self.fval = arrays
        self.complete = complete
        self._index = index
        self._mark = index._state_mark()
        self._snap = snap

    def unchanged(self):
        """``x`` holds what was encoded (False when no copy was kept: no reuse)."""
        snap, x = self._snap, self.x
        if snap is None:
            return False
        if type(snap) is dict:
            try:
                return type(x) is dict and x == snap   # subclasses may compare otherwise
            except Exception:  # noqa: BLE001 - a value whose == fails: no reuse
                return False
        dt, shape, raw = snap
        return x.dtype == dt and x.shape == shape and x.tobytes() == raw


class FeatureDicts:
    """A micro-batch of flat dicts of features validated whole as one, their names and values
    gathered: every name a ``str`` (or every name a 64-bit ``int``; a ``str`` subclass is a
    name :meth:`FeatureIndex.encode_record` takes too, looked up the same way), every value a plain
    ``float`` / ``int`` within ``MAX_ABS_VALUE`` (finite). ``names`` (every record's names, in
    order), ``values`` (their float64 values), ``ptr`` (record i's entries are
    ``ptr[i]:ptr[i + 1]``), ``dicts`` (the records). Only :meth:`of` makes one (and slicing
    one), so nothing else can skip its checks: :meth:`FeatureIndex.dict_csr` takes its arrays
    as they are. A source validates its records into one (``KafkaSource``), the model encodes
    them from it: one validation, one gathering of the values.

    It is the sequence of its dicts (``len``, iteration, ``fd[i]``; ``fd[a:b]`` another one).

    >>> fd = FeatureDicts.of([{"a": 1.0, "b": 2}, {"c": 3.0}])
    >>> fd.names, fd.values.tolist(), fd.ptr.tolist(), fd[1:].names
    (['a', 'b', 'c'], [1.0, 2.0, 3.0], [0, 2, 3], ['c'])
    >>> FeatureDicts.of([{"a": float("nan")}]) is None, FeatureDicts.of([{"a": True}]) is None
    (True, True)
    """

    __slots__ = ("dicts", "names", "values", "ptr", "ints")

    def __init__(self, issuer, dicts, names, values, ptr, ints):
        if issuer is not _ISSUER:
            raise TypeError("a FeatureDicts is made by FeatureDicts.of only")
        self.dicts, self.names, self.values, self.ptr = dicts, names, values, ptr
        self.ints = ints   # some value is an int (the dicts hold it as given)

    @classmethod
    def of(cls, dicts):
        """The records ``dicts`` (a list) validated as one, or None when one of them is not a
        ``dict`` of such names and values (then each is checked on its own, for its reason);
        the dicts are kept as they are (a value that is an ``int`` stays one: ``ints``)."""
        names, vals, lens = [], [], []
        for d in dicts:
            if type(d) is not dict:
                return None
            names += d
            vals += d.values()
            lens.append(len(d))
        try:   # every name a str (a JSON object's are), in one pass (~4x cheaper than their types' set)
            "".join(names)
        except TypeError:   # or every name a 64-bit int
            if set(map(type, names)) != _INT or not (-_INT_LIMIT <= min(names) and max(names) < _INT_LIMIT):
                return None
        vt = set(map(type, vals))
        if not vt <= _PLAIN:
            return None
        try:
            v = np.array(vals, dtype=np.float64)
        except (OverflowError, ValueError):   # an int beyond 64 bits
            return None
        if len(v) and not (-MAX_ABS_VALUE <= v.min() and v.max() <= MAX_ABS_VALUE):   # False for NaN
            return None
        ptr = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        return cls(_ISSUER, list(dicts), names, v, ptr, int in vt)

    def __len__(self):
        return len(self.dicts)

    def __iter__(self):
        return iter(self.dicts)

    def __getitem__(self, i):
        if not isinstance(i, slice):
            return self.dicts[i]
        a, b, step = i.indices(len(self.dicts))
        if step != 1:
            return self.dicts[i]
        b = max(a, b)
        ptr = self.ptr[a:b + 1]
        lo, hi = int(ptr[0]), int(ptr[-1])
        return FeatureDicts(_ISSUER, self.dicts[a:b], self.names[lo:hi], self.values[lo:hi], ptr - lo, self.ints)


class FeatureIndex:
    """Feature name -> column index (0 is the bias).

    Parameters
    ----------
    n_features
        ``None`` for a growing vocabulary; an int (e.g. ``2**18``) for the hashing trick
        (stable CRC32 of the feature name, independent of the process).
    """

    def __init__(self, n_features: int | None = None):
        if n_features is not None and (not isinstance(n_features, numbers.Integral) or n_features < 1):
            raise ValueError(f"n_features must be None or a positive int, got {n_features!r}")
        self.n_features = None if n_features is None else int(n_features)
        self.vocab: dict = {}
        self.names: list = []
        self.array_dim: int | None = None  # set once numpy arrays are seen
        self._epoch = 0   # counts rollbacks (a mark taken before one is stale after it)

    @property
    def dim(self) -> int:
        """Number of columns in use (including the bias column 0)."""
        if self.n_features is not None:
            return self.n_features + 1
        if self.array_dim is not None:
            return self.array_dim + 1
        return len(self.names) + 1

    def _index(self, name, grow):
        if self.n_features is not None:
            key = name if isinstance(name, str) else repr(name)
            return 1 + zlib.crc32(key.encode("utf-8", "surrogatepass")) % self.n_features
        j = self.vocab.get(name)
        if j is None:
            if not grow:
                return -1
            j = len(self.names) + 1
            self.vocab[name] = j
            self.names.append(name)
        return j

    def encode_dict(self, x, grow):
        """Sparse (indices, values) of one token, bias first; unknown features are skipped
        when ``grow`` is False (prediction). The whole dict is validated (names: str / int;
        values: finite, ``|v| <= MAX_ABS_VALUE``) before any new name is registered."""
        return self._register(*self._scan(x, grow))

    #: dicts of at least this many features take :meth:`_dict_arrays` (one compiled pass,
    #: ``dict_row_csr``; measured: as fast as the feature-by-feature scan at 9 features, about
    #: twice as fast at 30-40)
    BULK_MIN = 16

    def _dict_arrays(self, x):
        """The CSR arrays ``(idx, val)`` of a dict of known names, in one compiled pass
        (``dict_row_csr``): ``(idx, val, unknown)`` where ``unknown`` says that non-zero
        features with new names were left out (the arrays are those of
        ``encode_dict(x, grow=False)``), or None when the dict is not one this path takes (then
        :meth:`_scan` checks it): a growing vocabulary, at least :attr:`BULK_MIN` names all
        ``str`` or all ``int`` (64-bit), values all plain ``float`` / ``int`` within
        ``MAX_ABS_VALUE``. Same values, same order (by column), so the same arrays to the bit."""
        if self.n_features is not None or self.array_dim is not None or len(x) < self.BULK_MIN:
            return None
        cols = self._known_columns(x, list(x.values()))
        if cols is None:
            return None
        j, v = cols
        n = len(v)
        idx = np.empty(n + 1, dtype=np.int32)
        val = np.empty(n + 1, dtype=np.float64)
        r = dict_row_csr(j, v, MAX_ABS_VALUE, idx, val)
        if r < 0:
            return None
        m = r >> 1
        return idx[:m], val[:m], bool(r & 1)

    def _known_columns(self, keys, vals):
        """``(cols, values)`` of names ``keys`` (an iterable of them, e.g. a dict) and their
        values ``vals`` (a list): the vocabulary's column of each name (-1 for a name it does
        not know, int64) and the values as float64, when every name is a ``str`` or every name
        a 64-bit ``int`` and every value a plain ``float`` / ``int``; else None."""
        kt = set(map(type, keys))
        if kt - _STR and kt != _INT:
            return None
        if not set(map(type, vals)) <= _PLAIN:
            return None
        try:
            v = np.array(vals, dtype=np.float64)
        except (OverflowError, ValueError):
            return None
        if kt == _INT:   # (a name not known is looked up below: the int names in range first)
            cols = self._columns(keys, len(vals), check_ints=True)
            return None if cols is None else (cols, v)
        return self._columns(keys, len(vals)), v

    def _columns(self, keys, n, check_ints=False):
        """The vocabulary's column of each of the ``n`` names ``keys`` (-1 for a name it does
        not know), int64; ``check_ints``: the names are ints, None when a name not known is
        out of 64 bits (a known one was checked when it was registered)."""
        vocab = self.vocab
        try:   # every name known (a stream's steady state): each was checked when registered
            return np.fromiter(map(vocab.get, keys), dtype=np.int64, count=n)
        except TypeError:   # (None: a name not known)
            if check_ints and not (-_INT_LIMIT <= min(keys) and max(keys) < _INT_LIMIT):
                return None
            return np.fromiter(map(vocab.get, keys, itertools.repeat(-1, n)), dtype=np.int64, count=n)

    def dict_csr(self, xs):
        """The CSR ``(tok_ptr, fidx, fval)`` of the records of a batch of dicts up to the first
        with a nonzero feature of an unknown name (all of them when there is none; its length
        is ``len(tok_ptr) - 1``), in one compiled pass (``dict_rows_csr``): per record the
        arrays of ``encode_record`` (a complete record, the index unchanged). None when the
        batch is not one this path takes (then each record is encoded on its own, which checks
        it): a growing vocabulary, every ``x``
        a ``dict``, every name ``str`` or every name a 64-bit ``int``, every value a plain
        ``float`` / ``int`` within ``MAX_ABS_VALUE`` (:meth:`FeatureDicts.of`; ``xs`` may be one).

        >>> fi = FeatureIndex(); _ = fi.encode_dict({"a": 1.0, "b": 2.0}, grow=True)
        >>> tp, idx, val = fi.dict_csr([{"b": 3.0, "a": 0.0}, {}])
        >>> tp.tolist(), idx.tolist(), val.tolist()
        ([0, 2, 3], [0, 2, 0], [1.0, 3.0, 1.0])
        >>> fi.dict_csr([{"c": 1.0}])[0].tolist()   # an unknown name: no record before it
        [0]
        >>> fi.dict_csr([{"a": 1.0}, {"c": 1.0}, {"b": 1.0}])[0].tolist()   # the records before it
        [0, 2]
        """
        if self.n_features is not None or self.array_dim is not None:
            return None
        if type(xs) is not FeatureDicts:   # (one a source validated: its arrays as they are)
            xs = FeatureDicts.of(xs)   # the records gathered and checked as one
            if xs is None:
                return None
        v, key_ptr = xs.values, xs.ptr
        j = self._columns(xs.names, len(v))
        n, r = len(v), len(xs)
        tok_ptr = np.empty(r + 1, dtype=np.int32)
        idx = np.empty(n + r, dtype=np.int32)
        val = np.empty(n + r, dtype=np.float64)
        m = dict_rows_csr(key_ptr, j, v, MAX_ABS_VALUE, tok_ptr, idx, val)
        if m == -1:
            return None
        if m < -1:   # record k has a new name: the records before it
            k = -2 - m
            tok_ptr, m = tok_ptr[:k + 1], tok_ptr[k]
        return tok_ptr, idx[:m], val[:m]

    def _scan(self, x, grow):
        """Validate one token and split it into known (index, value) pairs and new names;
        changes nothing."""
        if self.array_dim is not None:
            raise TypeError("this model was trained on numpy arrays; got a dict of features")
        if not isinstance(x, dict):
            raise TypeError(f"a token must be a dict of features, got {type(x).__name__}")
        pairs = []
        new = None
        vocab = self.vocab if self.n_features is None else None
        lim = MAX_ABS_VALUE
        ilim = _INT_LIMIT
        for name, v in x.items():
            tn = type(name)
            # exact key types first (str, then a 64-bit int); the ABC checks only for the rest
            if tn is not str and not (tn is int and -ilim <= name < ilim):
                check_name(name)
            t = type(v)
            if (t is float or t is int) and -lim <= v <= lim:  # fast path; False for NaN
                f = v
            else:
                f = _check_value(name, v)
            if f == 0:
                continue
            if vocab is not None:
                j = vocab.get(name, -1)
            else:
                j = self._index(name, grow)
            if j >= 0:
                pairs.append((j, float(f)))
            elif grow:
                if new is None:
                    new = []
                new.append((name, float(f)))
        return pairs, new

    def _register(self, pairs, new):
        if new:
            # new names get indices in a canonical order, so the model does not depend on the
            # order of the keys of the first dict that mentions them
            new.sort(key=lambda t: (type(t[0]).__name__, repr(t[0])))
            for name, f in new:
                pairs.append((self._index(name, True), f))
        # canonical order of the sums in the kernels: sorted by column
        pairs.sort()
        idx = [BIAS]
        val = [1.0]
        for j, f in pairs:
            if idx[-1] == j:  # hashing collision: add up
                val[-1] += f
            else:
                idx.append(j)
                val.append(f)
        return idx, val

    def _known_pairs(self, pairs):
        """The CSR arrays of one token's known ``(index, value)`` pairs (of :meth:`_scan`):
        ``_register(pairs, None)``'s, as arrays. With a growing vocabulary distinct names have
        distinct indices, so sorting the pairs is the whole of it (no sums of collisions)."""
        if self.n_features is not None or not pairs:
            idx, val = self._register(pairs, None)
            return (np.array([0, len(idx)], dtype=np.int32), np.asarray(idx, dtype=np.int32),
                    np.asarray(val, dtype=np.float64))
        pairs.sort()
        m = len(pairs) + 1
        cols, vals = zip(*pairs)
        idx = np.empty(m, dtype=np.int32)
        val = np.empty(m, dtype=np.float64)
        idx[0], val[0] = BIAS, 1.0
        idx[1:] = cols
        val[1:] = vals
        return np.array([0, m], dtype=np.int32), idx, val

    def _check_width(self, d, grow):
        """An array of ``d`` features per token fits this index (changes nothing)."""
        if self.vocab:
            raise TypeError("this model was trained on dict features; got a numpy array")
        if self.array_dim is None:
            if not grow:
                raise ValueError("the model has not seen any array input yet")
        elif d != self.array_dim:
            raise ValueError(f"expected {self.array_dim} features per token, got {d}")

    @staticmethod
    def value_error(code):
        """The error of a rejected array value: ``code`` -1 (NaN / infinite) or -2 (too large),
        as returned by ``dense_rows_csr``."""
        if code == -1:
            return ValueError("input contains NaN or infinite values")
        return ValueError(f"input has a value with |v| > MAX_ABS_VALUE = {MAX_ABS_VALUE:g}")

    def _check_array(self, a, grow):
        self._check_width(a.shape[-1], grow)
        # one pass: max |v| is NaN when a value is NaN, inf when one is infinite
        if a.size and not np.max(np.abs(a)) <= MAX_ABS_VALUE:
            raise self.value_error(-1 if not np.all(np.isfinite(a)) else -2)
        # the width is fixed only by an array that passed every check (a rejected first array
        # must not lock the model into arrays of its width)
        self.array_dim = a.shape[-1]

    def dense_csr(self, A, grow):
        """:meth:`encode_tokens` of a dense 2-D float64 array (same checks, same arrays) in one
        numba pass (``dense_rows_csr``) that also validates the values.

        >>> fi = FeatureIndex(); tp, idx, val = fi.dense_csr(np.array([[0.0, 2.0], [1.0, 0.0]]), True)
        >>> tp.tolist(), idx.tolist(), val.tolist()
        ([0, 2, 4], [0, 2, 0, 1], [1.0, 2.0, 1.0, 1.0])
        >>> fi.dense_csr(np.array([[1.0, float("inf")]]), True)
        Traceback (most recent call last):
        ...
        ValueError: input contains NaN or infinite values
        """
        n, d = A.shape
        self._check_width(d, grow)
        tok_ptr = np.empty(n + 1, dtype=np.int32)
        fidx = np.empty(n * (d + 1), dtype=np.int32)
        fval = np.empty(n * (d + 1), dtype=np.float64)
        m = dense_rows_csr(A, tok_ptr, fidx, fval, MAX_ABS_VALUE)
        if m < 0:
            raise self.value_error(m)
        self.array_dim = d
        return tok_ptr, fidx[:m], fval[:m]

    def check_dense(self, A, grow, divide_by=None):
        """:meth:`dense_csr`'s checks of a dense 2-D float64 array (the same errors, and the
        index takes its width as there) without writing the CSR: per row the entries of its CSR
        (the bias and its non-zeros) and its last non-zero column (-1: none), int64 arrays, in one
        numba pass (``dense_rows_scan``), for a consumer that reads the rows themselves
        (``BlockStore.write_dense``). ``divide_by``: per-column divisors (> 0) of which the same
        pass also returns ``A / divide_by`` (else None) as a third array.

        >>> fi = FeatureIndex(); nnz, last, _ = fi.check_dense(np.array([[0.0, 2.0], [1.0, 0.0]]), True)
        >>> nnz.tolist(), last.tolist(), fi.array_dim
        ([2, 2], [1, 0], 2)
        """
        n, d = A.shape
        self._check_width(d, grow)
        nnz = np.empty(n, dtype=np.int64)
        last = np.empty(n, dtype=np.int64)
        if divide_by is None:
            q, scaled = _NO_DIVISORS, _NO_ROWS
        else:
            q, scaled = divide_by, np.empty((n, d))
        code = dense_rows_scan(A, MAX_ABS_VALUE, nnz, last, q, scaled)
        if code < 0:
            raise self.value_error(code)
        self.array_dim = d
        return nnz, last, (None if divide_by is None else scaled)

    def encode_tokens(self, tokens, grow):
        """CSR arrays (tok_ptr, fidx, fval) for a sequence of tokens (list of dicts or a 2-D
        array)."""
        if isinstance(tokens, np.ndarray):
            a = tokens
            if a.ndim != 2:
                raise ValueError(f"a sequence must be a 2-D array (tokens x features), got shape {a.shape}")
            if a.shape[0] == 0:
                raise ValueError("empty sequence")
            if a.dtype.kind not in "biuf":
                raise TypeError(f"array input must be numeric, got dtype {a.dtype}")
            a = np.asarray(a, dtype=np.float64)
            self._check_array(a, grow)
            rows, cols = np.nonzero(a)
            counts = np.bincount(rows, minlength=a.shape[0]) + 1
            L = a.shape[0]
            tok_ptr = np.zeros(L + 1, dtype=np.int32)
            np.cumsum(counts, out=tok_ptr[1:])
            nnz = int(tok_ptr[-1])
            fidx = np.empty(nnz, dtype=np.int32)
            fval = np.empty(nnz, dtype=np.float64)
            starts = tok_ptr[:-1]
            fidx[starts] = BIAS
            fval[starts] = 1.0
            mask = np.ones(nnz, dtype=bool)
            mask[starts] = False
            fidx[mask] = cols + 1
            fval[mask] = a[rows, cols]
            return tok_ptr, fidx, fval
        if not isinstance(tokens, (list, tuple)):
            raise TypeError(f"a sequence must be a list of feature dicts or a 2-D array, got {type(tokens).__name__}")
        if len(tokens) == 0:
            raise ValueError("empty sequence")
        for t in tokens:
            if not isinstance(t, dict):
                raise TypeError(f"each token must be a dict of features, got {type(t).__name__}")
        # validate every token before registering any new name (a bad token rejects the
        # whole sequence without changing the vocabulary)
        scanned = [self._scan(t, grow) for t in tokens]
        ptr = [0]
        idx: list = []
        val: list = []
        for pairs, new in scanned:
            i, v = self._register(pairs, new)
            idx.extend(i)
            val.extend(v)
            ptr.append(len(idx))
        return (np.asarray(ptr, dtype=np.int32), np.asarray(idx, dtype=np.int32),
                np.asarray(val, dtype=np.float64))

    def encode_one(self, x, grow):
        """CSR arrays for a single flat example (dict or 1-D array)."""
        if isinstance(x, dict):
            bulk = self._dict_arrays(x)
            if bulk is not None and not (grow and bulk[2]):   # new names: registered by encode_dict
                i, v = bulk[0], bulk[1]
            else:
                pairs, new = self._scan(x, grow)
                if not new:
                    return self._known_pairs(pairs)
                i, v = self._register(pairs, new)
            return (np.array([0, len(i)], dtype=np.int32), np.asarray(i, dtype=np.int32),
                    np.asarray(v, dtype=np.float64))
        if isinstance(x, np.ndarray):
            if x.ndim != 1:
                raise ValueError(f"a flat example must be a 1-D array, got shape {x.shape}")
            # the array fast path: the same CSR as encode_tokens(x[None, :]), validated and
            # written in one numba pass; no feature names to look up
            if x.shape[0] == 0 and self.array_dim is None:
                return self.encode_tokens(x[None, :], grow)
            if x.dtype.kind not in "biuf":
                raise TypeError(f"array input must be numeric, got dtype {x.dtype}")
            tok_ptr, fidx, fval = self.dense_csr(
                (x if x.dtype == np.float64 and x.flags.c_contiguous else np.ascontiguousarray(x, dtype=np.float64))
                .reshape(1, x.shape[0]), grow)
            return tok_ptr, fidx, fval
        raise TypeError(f"x must be a dict of features or a 1-D numpy array, got {type(x).__name__}")

    def _array_row(self, x):
        """``encode_one(x, grow=False)`` of a C-contiguous 1-D float64 array of the index's
        width (the caller checked that much): the values checked and the CSR written by the
        same numba pass as :meth:`dense_csr`, the same arrays."""
        d = x.shape[0]
        tok_ptr = np.empty(2, dtype=np.int32)
        fidx = np.empty(d + 1, dtype=np.int32)
        fval = np.empty(d + 1, dtype=np.float64)
        m = dense_rows_csr(x.reshape(1, d), tok_ptr, fidx, fval, MAX_ABS_VALUE)
        if m < 0:
            raise self.value_error(m)
        return tok_ptr, fidx[:m], fval[:m]

    def plain_row(self, x):
        """The arrays of ``encode_record(x)`` when ``x`` is a plain row -- a C-contiguous 1-D
        float64 numpy array of the index's width, the index built from arrays -- validated
        (raising ``encode_one``'s errors) in one numba pass (:meth:`_array_row`); else None.
        The record is complete and the index unchanged by it: an :class:`EncodedRecord` of it
        would be trusted (:meth:`trusts`)."""
        if type(x) is np.ndarray and x.dtype is _F64 and x.ndim == 1 and x.shape[0] == self.array_dim \
                and x.flags.c_contiguous and not self.vocab:
            return self._array_row(x)
        return None

    def encode_record(self, x, keep=False):
        """An :class:`EncodedRecord` of one flat example (dict or 1-D array), validated whole;
        registers nothing (its arrays are those of ``encode_one(x, grow=False)``). ``keep``: take
        a copy of ``x`` so that a later call may check it is unchanged and reuse the encoding
        (dicts: only with a growing vocabulary, where equal names have equal indices; with
        hashing ``1``, ``1.0`` and ``True`` are equal keys of different buckets)."""
        if isinstance(x, dict):
            bulk = self._dict_arrays(x)
            if bulk is not None:   # (int32 and float64 arrays already)
                idx, val, new = bulk
                arrays = (np.array([0, len(idx)], dtype=np.int32), idx, val)
            else:
                pairs, new = self._scan(x, True)   # grow=True only lists the new names
                arrays = self._known_pairs(pairs)
            snap = dict(x) if keep and not new and self.n_features is None else None
            return EncodedRecord(_ISSUER, x, arrays, not new, self, snap)
        arrays = self.plain_row(x)   # the common record: encode_one's checks and arrays, fewer steps
        if arrays is None:
            arrays = self.encode_one(x, grow=False)
        snap = (x.dtype, x.shape, x.tobytes()) if keep and isinstance(x, np.ndarray) else None
        return EncodedRecord(_ISSUER, x, arrays, True, self, snap)

    def trusts(self, enc):
        """``enc`` was made by this index, which has not changed since, and holds every feature
        of its record: its arrays are what ``encode_one(enc.x, grow=True)`` would return."""
        return enc._index is self and enc.complete and enc._mark == self._state_mark()

    def _state_mark(self):
        return len(self.names), self.array_dim, self._epoch

    def mark(self):
        """A restore point of the index (it only ever grows): see :meth:`rollback`."""
        return len(self.names), self.array_dim

    def rollback(self, mark):
        """Forget every name registered (and the array width fixed) since ``mark``.

        >>> fi = FeatureIndex(); m = fi.mark()
        >>> _ = fi.encode_dict({"a": 1.0}, grow=True); fi.rollback(m); fi.names, fi.dim
        ([], 1)
        """
        n, array_dim = mark
        if n < len(self.names) or array_dim != self.array_dim:
            self._epoch += 1
        for name in self.names[n:]:
            del self.vocab[name]
        del self.names[n:]
        self.array_dim = array_dim

    def state(self):
        return {"n_features": self.n_features, "array_dim": self.array_dim,
                "names": [_encode_key(n) for n in self.names]}

    @classmethod
    def from_state(cls, st):
        fi = cls(st["n_features"])
        dim = st["array_dim"]
        if dim is not None and not (isinstance(dim, numbers.Integral) and not isinstance(dim, bool)
                                    and 0 <= dim < (1 << 31) - 1):   # feature ids are int32
            raise ValueError(f"array_dim must be None or an int >= 0, got {dim!r}")
        fi.array_dim = None if dim is None else int(dim)
        fi.names = [_decode_key(n) for n in st["names"]]
        fi.vocab = {n: i + 1 for i, n in enumerate(fi.names)}
        if len(fi.vocab) != len(fi.names):
            raise ValueError("feature names repeat")
        return fi


class LabelIndex:
    """Labels numbered in order of appearance."""

    def __init__(self, labels=None):
        self.labels: list = []
        self.index: dict = {}
        for lab in labels or ():
            self.encode(lab, grow=True)

    def __len__(self):
        return len(self.labels)

    def encode(self, label, grow):
        try:
            j = self.index.get(label)
        except TypeError:
            raise TypeError(f"labels must be hashable, got {type(label).__name__}") from None
        if j is None:
            check_label(label)
            if not grow:
                return -1
            j = len(self.labels)
            self.index[label] = j
            self.labels.append(label)
        return j

    def check(self, label):
        """Validate a label without registering it (see :func:`check_label`); call before
        changing any state so that a rejected example leaves the model untouched."""
        check_label(label)

    def decode(self, j):
        return self.labels[j]

    def mark(self):
        """A restore point (labels are only ever appended): see :meth:`rollback`."""
        return len(self.labels)

    def rollback(self, mark):
        """Forget every label registered since ``mark``.

        >>> li = LabelIndex(["x"]); m = li.mark(); _ = li.encode("y", grow=True)
        >>> li.rollback(m); li.labels
        ['x']
        """
        for lab in self.labels[mark:]:
            del self.index[lab]
        del self.labels[mark:]

    def state(self):
        return {"labels": [_encode_key(lab) for lab in self.labels]}

    @classmethod
    def from_state(cls, st):
        return cls([_decode_key(lab) for lab in st["labels"]])


def _encode_key(k):
    """JSON-safe, type-preserving encoding of a feature name / label."""
    if isinstance(k, (bool, np.bool_)):
        return ["b", bool(k)]
    if isinstance(k, str):
        return ["s", k]
    if isinstance(k, numbers.Integral):
        return ["i", int(k)]
    if isinstance(k, numbers.Real):
        return ["f", float(k)]
    if isinstance(k, tuple):
        return ["t", [_encode_key(v) for v in k]]
    raise TypeError(f"cannot save a label or feature name of type {type(k).__name__}: {k!r} "
                    "(use str, int, float, bool or tuples of them)")


def _decode_key(e):
    t, v = e
    if t == "t":
        return tuple(_decode_key(x) for x in v)
    return {"b": bool, "s": str, "i": int, "f": float}[t](v)
