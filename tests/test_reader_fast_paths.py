"""The readers' good path builds no error message (issue 22 item 1): JSON objects and lists of
numbers, CSV cells and libsvm values are checked without formatting a string per feature; a bad
value still gets the reason the value-by-value check gives."""
import json

import numpy as np
import pytest

from streamssvm.connectors import files
from streamssvm.connectors.files import BadRecord
from streamssvm.features import check_value


def _no_messages(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("an error message was formatted on the good path")
    monkeypatch.setattr(files, "_short", boom)
    monkeypatch.setattr(files, "_finite", boom)
    monkeypatch.setattr(files, "_float_text", boom)


def test_good_json_records_format_no_message(monkeypatch):
    _no_messages(monkeypatch)
    x, y = files.parse_example({"x": {"a": 1, "b": -2.5, "c": 0}, "y": "u"})
    assert x == {"a": 1.0, "b": -2.5, "c": 0.0} and all(type(v) is float for v in x.values())
    x, _ = files.parse_example({"x": [1, 2.5, -1e12], "y": 1})
    assert x.dtype == np.float64 and x.tolist() == [1.0, 2.5, -1e12]
    x, _ = files.parse_example({"x": [[1, 2], [3.5, 0]], "y": ["a", "b"]})
    assert x.shape == (2, 2) and x.tolist() == [[1.0, 2.0], [3.5, 0.0]]


def test_good_csv_and_libsvm_lines_format_no_message(tmp_path, monkeypatch):
    p = tmp_path / "a.csv"
    p.write_text("f,g,label\n1.5,2,a\n")
    q = tmp_path / "a.svm"
    q.write_text("1 3:0.5 7:2\n")
    _no_messages(monkeypatch)
    assert [r.x for r in files.CSVSource(str(p), label="label")] == [{"f": 1.5, "g": 2.0}]
    assert [r.x for r in files.LibSVMSource(str(q))] == [{"3": 0.5, "7": 2.0}]


BAD_VALUES = [True, "1", None, 10**400, 2**70, 1e13, -1e13, [1]]


@pytest.mark.parametrize("v", BAD_VALUES, ids=repr)
def test_json_values_take_the_checked_path(v):
    """Values outside the fast path (bools, strings, huge or large numbers, containers) get
    check_value's result or reason, in objects and lists alike."""
    for x, what in (({"a": 1.0, "k": v}, "x['k']"), ([1.0, v], "x")):
        try:
            want = check_value(v, what)
        except (TypeError, ValueError) as e:
            with pytest.raises(BadRecord) as got:
                files.parse_example({"x": x, "y": 1})
            assert str(got.value) == str(e)
            continue
        gx, _ = files.parse_example({"x": x, "y": 1})
        assert (gx["k"] if isinstance(gx, dict) else gx[1]) == want


def test_a_400_digit_integer_in_jsonl_is_a_dead_letter(tmp_path):
    p = tmp_path / "a.jsonl"
    rows = [{"x": [1, 2], "y": 0}, {"x": [10**400, 2], "y": 0}, {"x": {"a": 10**400}, "y": 0},
            {"x": [1, 3], "y": 1}]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n" + '{"x": [NaN, 1], "y": 0}\n')
    src = files.JSONLSource(str(p))
    got = [r.x.tolist() for r in src]
    assert got == [[1.0, 2.0], [1.0, 3.0]] and src.n_bad == 3


def _json_only(raw):
    try:
        return ("ok", json.loads(raw, parse_constant=files._reject_constant))
    except Exception:  # noqa: BLE001
        return ("bad", None)


def test_long_digit_guard_finds_every_run_of_19_digits():
    """decode_json's guard (``_LONG_DIGITS in raw.translate(_DIGITS_ONLY)``) is the regex
    ``[0-9]{19}``: a record with a run of 19 digits anywhere goes to json.loads."""
    import random
    import re
    rx = re.compile(rb"[0-9]{19}")
    rng = random.Random(0)
    cases = [b"1" * 19, b"1" * 18, b"x" + b"9" * 19 + b"y", b"[" + b"0" * 18 + b".5]", b"\xff" + b"5" * 25]
    cases += [bytes(rng.choice(b"0123456789 .e-:{}[]") for _ in range(rng.randint(0, 80))) for _ in range(2000)]
    cases += [bytes(rng.choice(b"0123456789" * 6 + b"/:") for _ in range(60)) for _ in range(2000)]
    for raw in cases:
        assert (files._LONG_DIGITS in raw.translate(files._DIGITS_ONLY)) == (rx.search(raw) is not None), raw


@pytest.mark.parametrize("text", [
    b'{"x": [0.1, 1.7976931348623157e308, 5e-324, -0.0, 1E2, 12345678901234567], "y": 3}',
    b'{"x": [' + str(2**63 - 1).encode() + b', ' + str(2**64).encode() + b', ' + str(-2**63 - 1).encode() + b'], "y": 1}',
    b'{"x": [1], "y": ' + str(2**70).encode() + b'}',           # a label beyond 64 bits stays an int
    b'{"x": {"a": 123456789012345678901234567890.5}, "y": 1}',
    b'{"x": [1e400], "y": 1}', b'{"x": [NaN], "y": 1}', b'{"x": [Infinity], "y": 1}',
    b'{"x": {"\\ud800": 1.0}, "y": 1}', b'{"a": 1, "a": 2}', b'[' * 3000 + b']' * 3000, b'{"x": [1], "y": 1, "z": ' + b'[' * 3000 + b']' * 3000 + b'}',
    b'[' * 200 + b']' * 200,
    b'{"x": [1, 2,], "y": 1}', b'\xff\xfe', b'{"x": {"\xc3\xa9t\xc3\xa9": 1.5}, "y": "\xc3\xa9"}',
])
def test_decode_json_equals_the_standard_library(text):
    """decode_json takes orjson where it returns what json.loads returns (and json.loads for the
    rest): the same objects, types and refusals as the standard library alone."""
    kind, want = _json_only(text)
    try:
        got = ("ok", files.decode_json(text))
    except BadRecord:
        got = ("bad", None)
    assert got[0] == kind
    if kind == "ok":
        assert json.dumps(got[1]) == json.dumps(want)
        assert repr(got[1]) == repr(want)


def test_decode_json_random_doubles_bit_for_bit():
    rng = np.random.default_rng(0)
    v = np.concatenate([rng.normal(size=20000) * 10.0 ** rng.integers(-300, 300, 20000),
                        np.frombuffer(rng.bytes(8 * 20000), dtype=np.float64)])
    v = v[np.isfinite(v)]
    text = json.dumps({"x": v.tolist(), "y": 1}).encode()
    got = np.array(files.decode_json(text)["x"])
    np.testing.assert_array_equal(got.view(np.int64), v.view(np.int64))


def test_decode_json_uses_the_fast_decoder_when_there_is_one(monkeypatch):
    if files._orjson is None:
        pytest.skip("orjson is not installed")
    monkeypatch.setattr(files.json, "loads", lambda *a, **k: (_ for _ in ()).throw(AssertionError("json.loads")))
    assert files.decode_json(b'{"x": [1, 2.5], "y": "a"}') == {"x": [1, 2.5], "y": "a"}


def test_a_flat_row_is_checked_by_its_bounds_and_a_nan_anywhere_in_it_is_refused():
    """``_finite_list`` checks a row of plain numbers by ``min`` / ``max`` and the sum: a NaN
    that the comparisons skip (not first), +-inf, 1e12 + 1 and a 400-digit integer each go to
    the value-by-value check, which refuses them with its reason; the bounds themselves pass."""
    nan, inf = float("nan"), float("inf")
    for bad in ([1.0, nan, 2.0], [nan, 1.0], [1.0, 2.0, nan], [0.0, inf], [-inf, 0.0], [1, 10**12 + 1],
                [-(10**12) - 1, 0], [1.0, 10**400], [10**400, -10**400, 1.0]):
        with pytest.raises(BadRecord):
            files._finite_list(bad, "x")
    assert files._finite_list([1e12, -1e12, 0, 2.5], "x").tolist() == [1e12, -1e12, 0.0, 2.5]
    rng = np.random.default_rng(0)
    for _ in range(2000):   # the same verdict as |v| <= MAX_ABS_VALUE on the float64 row
        row = [float(v) for v in rng.choice([0.0, 1.0, -3.5, 1e12, -1e12, 1e13, nan, inf, -inf], size=5)]
        want = bool(np.all(np.abs(np.asarray(row)) <= files.MAX_ABS_VALUE))
        try:
            files._finite_list(row, "x")
            got = True
        except BadRecord:
            got = False
        assert got == want, row


def test_the_flat_row_fast_path_of_parse_example_gives_the_general_paths_result():
    """``parse_example`` takes a dict holding a flat row and a str / 64-bit int label first; the
    general path (reached here through a dict subclass) gives the same x, y or the same
    reason, over rows and labels of every kind."""
    class D(dict):
        pass

    rng = np.random.default_rng(1)
    values = [0, 1, -2, 2.5, 1e12, 1e13, 10**400, True, "3", None, float("nan"), [1], {"a": 1}]
    labels = ["a", 3, -2**63, 2**63, 2**70, True, 1.5, float("inf"), None, [1, 2], {"a": True}, ""]
    for _ in range(3000):
        n = int(rng.integers(0, 4))
        x = [values[int(i)] for i in rng.integers(0, len(values), n)]
        if rng.random() < 0.6:
            x = [float(v) for v in rng.normal(size=n + 1)]
        obj = {"x": x, "y": labels[int(rng.integers(0, len(labels)))]}
        if rng.random() < 0.05:
            del obj["y"]
        if rng.random() < 0.05:
            obj = {"y": 1}
        got, want = [], []
        for o, out in ((obj, got), (D(obj), want)):
            try:
                gx, gy = files.parse_example(o)
                out.append((np.asarray(gx).tolist() if isinstance(gx, np.ndarray) else gx, gy, type(gy)))
            except BadRecord as e:
                out.append(str(e))
        assert got == want, obj
