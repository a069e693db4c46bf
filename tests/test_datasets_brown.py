"""The Brown corpus loader and the word-from-context stream (skipped without the archive)."""
import math
import os

import pytest

from streamssvm import datasets

try:
    BROWN = datasets._brown_path()
except FileNotFoundError as e:  # pragma: no cover - depends on the machine
    BROWN = None
    REASON = f"Brown corpus archive missing: {e}"
else:
    REASON = ""

needs_brown = pytest.mark.skipif(BROWN is None, reason=REASON or "Brown corpus archive missing")


def test_missing_archive_error_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="Brown corpus archive not found"):
        datasets.load_brown(str(tmp_path / "nope.tgz"))


@needs_brown
def test_load_first_documents():
    docs = datasets.load_brown(documents=3)
    assert [d for d, _ in docs] == ["ca01", "ca02", "ca03"]
    first = docs[0][1][0]
    assert first[:3] == [("The", "at"), ("Fulton", "np-tl"), ("County", "nn-tl")]
    assert first[-1] == (".", ".")
    assert all(len(tok) == 2 for _, sents in docs for s in sents for tok in s)


@needs_brown
def test_context_stream_on_ten_documents():
    d = datasets.brown_context_stream(n_classes=50, documents=10, window=3, keep_every=2, test_every=5)
    docs = datasets.load_brown(documents=10)
    # documents 4 and 9 (0-based) are the test documents
    train_words = [w.lower() for i, (_, ss) in enumerate(docs) if i % 5 != 4 for s in ss for w, _ in s
                   if any(c.isalnum() for c in w)]
    assert len(d["classes"]) == 50 and "the" == d["classes"][0]
    assert all(c != "," and c != "." for c in d["classes"])
    assert set(d["classes"]) <= set(train_words)
    n_tr, n_te = d["n_eligible"]
    assert n_tr == sum(w in set(d["classes"]) for w in train_words)
    # every other eligible position is kept: ceil(eligible / 2)
    assert len(d["train"]) == math.ceil(n_tr / 2) and len(d["test"]) == math.ceil(n_te / 2)
    x, y = d["train"][0]
    # 'The Fulton County ...': the first class position is 'The' at the sentence start
    assert y == "the" and x["t-1=<s>"] > 0 and "w=fulton" in x and "w=the" not in x
    for x, y in d["train"][:200] + d["test"][:200]:
        assert y in set(d["classes"])
        assert abs(sum(v * v for v in x.values()) - 1.0) < 1e-12
        assert sum(k.startswith("t-1=") for k in x) == 1
        assert 1 <= sum(k.startswith("w=") for k in x) <= 6


def test_context_stream_rejects_bad_arguments():
    with pytest.raises(ValueError, match="test_every"):
        datasets.brown_context_stream(n_classes=10, test_every=1, path=os.devnull)
