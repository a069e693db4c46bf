"""ExtremeClassifier (MEMOIR): online and mini-batch learning with each MIPS oracle."""
import numpy as np
import pytest
from river import checks

import streamssvm as ss


def _ext(mips=None, loss=None, labels=None, n_features=None, rescaling=None, predict_with=None, **learner):
    """ExtremeClassifier(learner=MEMOIR(**learner), ...)."""
    return ss.ExtremeClassifier(learner=ss.learners.MEMOIR(**learner), mips=mips, loss=loss, labels=labels,
                                n_features=n_features, rescaling=rescaling, predict_with=predict_with)

def _data(C=300, d=24, n=6000, seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(C, d))
    ys = rng.integers(0, C, size=n)
    X = centers[ys] + noise * rng.normal(size=(n, d))
    return X, ys, centers


@pytest.mark.parametrize("mips", ["exact", "hnsw", "lsh"])
@pytest.mark.parametrize("variant,lam", [("l2", 1e-4), ("l1", 1e-6)])
def test_learns_with_every_oracle(mips, variant, lam):
    X, ys, centers = _data()
    m = _ext(mips=mips, variant=variant, lam=lam, seed=0, check_every=50)
    for x, y in zip(X, ys):
        m.learn_one(x, int(y))
    acc = np.mean([m.predict_one(centers[c]) == c for c in range(300)])
    assert acc > (0.85 if mips != "lsh" else 0.6)
    c = m.certificate()
    assert c.exact is False and c.gap == float("inf") and np.isfinite(c.primal)
    d = c.extra
    if mips == "exact":
        assert d["recall_at_1"] == 1.0 and d["margin_error_max"] == 0.0
    else:
        assert d["checks"] > 0 and d["margin_error_mean"] >= 0
        assert d["mips"]["candidates_per_query"] < 300


def test_index_prediction_and_minibatches():
    X, ys, centers = _data(C=200, n=5000, seed=1)
    m = _ext(mips="hnsw", lam=1e-4, batch_size=50, seed=0)
    m.learn_many(X, ys)
    exact = [m.predict_one(centers[c]) for c in range(200)]
    m.predict_with = "index"
    approx = [m.predict_one(centers[c]) for c in range(200)]
    assert np.mean(np.array(exact) == np.arange(200)) > 0.85
    assert np.mean(np.array(exact) == np.array(approx)) > 0.9
    assert m._learner.t == 5000 // 50


def test_new_classes_mid_stream_and_errors():
    m = _ext(mips="hnsw", seed=0)
    rng = np.random.default_rng(0)
    for i in range(3000):
        c = i % (10 + i // 100)  # classes keep appearing
        x = np.zeros(40)
        x[c] = 1.0
        m.learn_one(x + 0.05 * rng.normal(size=40), f"c{c}")
    assert len(m._labels) == 39
    for c in (3, 20, 30):  # classes that arrived at different times
        x = np.zeros(40)
        x[c] = 1
        assert m.predict_one(x) == f"c{c}"
    with pytest.raises(ValueError, match="mips"):
        ss.ExtremeClassifier(mips="faiss")
    with pytest.raises(ValueError, match="variant"):
        ss.learners.MEMOIR(variant="l3")
    with pytest.raises(TypeError, match="MEMOIR"):
        ss.ExtremeClassifier(learner=ss.learners.BCFW())


def test_river_check_estimator():
    checks.check_estimator(_ext(mips="exact", lam=1e-3))
    checks.check_estimator(ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact", lam=1e-3)))


def test_save_load_and_cli(tmp_path):
    import json

    from streamssvm.connectors.files import write_jsonl
    from streamssvm.cli import main
    X, ys, centers = _data(C=50, n=1500, seed=2)
    m = _ext(mips="hnsw", lam=1e-4, seed=0)
    m.learn_many(X[:1000], ys[:1000])
    m.save(tmp_path / "x.ssvm")
    m2 = ss.ExtremeClassifier.load(tmp_path / "x.ssvm")
    assert [m2.predict_one(c) for c in centers] == [m.predict_one(c) for c in centers]
    for x, y in zip(X[1000:], ys[1000:]):
        m.learn_one(x, int(y))
        m2.learn_one(x, int(y))
    np.testing.assert_allclose(m2._learner.store.to_dense()[:50], m._learner.store.to_dense()[:50])
    f = tmp_path / "e.jsonl"
    write_jsonl(f, [{"x": x.tolist(), "y": int(y)} for x, y in zip(X, ys)])
    assert main(["run", "--source", str(f), "--task", "extreme", "--learner", "memoir", "--mips", "hnsw",
                 "--lam", "1e-4", "--checkpoint-dir", str(tmp_path / "ck"), "--snapshot-every", "500",
                 "--no-progress", "--json", "--save", str(tmp_path / "e.ssvm")]) == 0
    e = ss.ExtremeClassifier.load(tmp_path / "e.ssvm")
    assert e._learner.n_learned == 1500
    from streamssvm.checkpoint import CheckpointManager
    _, meta, _ = CheckpointManager(tmp_path / "ck").latest()
    assert meta["examples_seen"] == 1500 and meta["last_certificate"]["exact"] is False
    assert meta["last_certificate"]["gap"] is None  # no dual certificate; strict JSON has no Infinity
    assert json.loads(sorted((tmp_path / "ck").glob("ckpt-*"))[-1].joinpath("manifest.json").read_text())
    # sparse rows from the command line, dict input
    g = tmp_path / "d.jsonl"
    write_jsonl(g, [{"x": {f"f{j}": float(v) for j, v in enumerate(x) if v > 0}, "y": int(y)} for x, y in zip(X, ys)])
    assert main(["run", "--source", str(g), "--task", "extreme", "--learner", "memoir", "--mips", "hnsw",
                 "--rows", "sparse", "--max-dirty", "32", "--ef", "32", "--lam", "1e-4", "--no-progress", "--json",
                 "--snapshot-every", "700", "--metrics", str(tmp_path / "m.jsonl"),
                 "--save", str(tmp_path / "s.ssvm")]) == 0
    recs = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    diag = recs[-1]["diagnostics"]   # index quality and staleness reach the metrics log
    assert diag["rows"] == "sparse" and 0 <= diag["recall_at_1"] <= 1 and "dirty" in diag["staleness"]
    s = ss.ExtremeClassifier.load(tmp_path / "s.ssvm")
    assert s._learner.kind == "sparse" and s.learner.max_dirty == 32 and s._learner.n_learned == 1500


def test_labels_declared_up_front(tmp_path):
    """``labels=``: a zero row per declared class from the first example on; declared classes
    are predicted (and only they) before being learned; save/load keeps them; exact and hnsw
    agree on a small case."""
    C, d = 60, 16
    X, ys, centers = _data(C=C, d=d, n=3000, seed=3, noise=0.2)
    declared = [f"k{c}" for c in range(C)]
    m0 = _ext(mips="exact", labels=declared, lam=1e-4)
    assert m0.predict_one(centers[0]) == "k0"          # nothing learned: all rows zero
    # learn only the first half of the classes; the other half stays declared but unseen
    half = ys < C // 2
    models = {}
    for mips in ("exact", "hnsw"):
        m = _ext(mips=mips, labels=declared, lam=1e-4, seed=0, check_every=20)
        for x, y in zip(X[half][:200], ys[half][:200]):
            m.learn_one(x, f"k{y}")
            assert m._learner.store.n_rows == C            # a row for every declared class
        preds = [m.predict_one(centers[c]) for c in range(C)]
        assert set(preds) <= set(declared)
        m.predict_with = "index"
        assert set(m.predict_one(centers[c]) for c in range(C)) <= set(declared)
        m.predict_with = "exact"
        for x, y in zip(X[half][200:], ys[half][200:]):
            m.learn_one(x, f"k{y}")
        assert len(m._labels) == C and m._labels.labels == declared
        models[mips] = m
    ex = [models["exact"].predict_one(centers[c]) for c in range(C // 2)]
    hn = [models["hnsw"].predict_one(centers[c]) for c in range(C // 2)]
    assert np.mean(np.array(ex) == np.array(declared[:C // 2])) > 0.9
    assert np.mean(np.array(hn) == np.array(declared[:C // 2])) > 0.9
    models["hnsw"].predict_with = "index"
    hi = [models["hnsw"].predict_one(centers[c]) for c in range(C // 2)]
    assert np.mean(np.array(hi) == np.array(hn)) > 0.9
    # the unseen declared classes still hold zero rows (the learner moved rows of the learned
    # classes and of violating unseen ones only)
    m = models["exact"]
    # an undeclared label grows the set
    m.learn_one(centers[0], "new")
    assert m._labels.labels[-1] == "new" and m._learner.store.n_rows == C + 1
    # save / load round trip keeps the declared labels, the rows and the predictions
    p = tmp_path / "m.ssvm"
    for mm in (m, models["hnsw"]):
        mm.save(p)
        m2 = ss.ExtremeClassifier.load(p)
        assert m2.labels == declared and m2._labels.labels == mm._labels.labels
        assert m2._learner.store.n_rows == mm._learner.store.n_rows
        assert [m2.predict_one(centers[c]) for c in range(C)] == [mm.predict_one(centers[c]) for c in range(C)]
    # an empty model with declared labels round-trips too
    e = _ext(mips="hnsw", labels=[3, 1, 2])
    e.save(p)
    e2 = ss.ExtremeClassifier.load(p)
    assert e2.labels == [3, 1, 2] and e2.predict_one(np.ones(4)) == 3
    with pytest.raises(TypeError):
        _ext(labels="abc")
    with pytest.raises(ValueError):
        _ext(loss=1.0 - np.eye(3), labels=[0, 1, 5])


def test_labels_declared_hnsw_zero_rows_and_exact_scores():
    """With declared classes the index keeps the zero rows out and exact search still scores
    them 0: an example whose learned scores are all negative predicts the first zero row."""
    m = _ext(mips="hnsw", labels=["a", "b", "c", "d"], lam=1e-6, seed=0)
    x = np.array([1.0, 0.0])
    m.learn_one(x, "a")     # one step: row a moves towards x, the violator (zero row b) away
    lr = m._learner
    assert lr.store.n_rows == 4
    q = np.array([-3.0, 0.5])   # (a bias feature is added: row a scores 0.1 (1 - 3) < 0)
    _, fidx, fval = m._features.encode_one(q, grow=False)
    buf = np.zeros(4)
    lr.store.scores_into(fidx.astype(np.int64), fval, buf)
    assert buf[2] == 0.0 and buf[3] == 0.0 and buf[0] < 0 < buf[1]   # c, d: zero rows
    exp = m._labels.labels[int(np.argmax(buf))]          # exact: zero rows score 0
    assert m.predict_one(q) == exp
    m.predict_with = "index"
    assert m.predict_one(q) == exp


def _memoir_run(certify, check_every, mips="hnsw", loss=None):
    X, ys, _ = _data(C=40, d=12, n=800, seed=7)
    m = _ext(mips=mips, loss=loss, rescaling="slack" if loss is not None else None, lam=1e-4, seed=0,
             check_every=check_every, window=100)
    for i, (x, y) in enumerate(zip(X, ys)):
        m.learn_one(x, int(y))
        if certify and i % 7 == 0:
            m.certificate()
    return m


@pytest.mark.parametrize("mips,cost", [("hnsw", False), ("lsh", False), ("hnsw", True)])
def test_certificates_and_recall_checks_observe(mips, cost):
    """Certifying after many examples, or checking the index against exact search at every
    step, changes neither the rows nor anything the learner does next."""
    loss = (1.0 - np.eye(40)) * (1.0 + np.arange(40)[None, :] % 3) if cost else None
    ref = _memoir_run(False, 0, mips, loss)
    for certify, check_every in ((True, 0), (False, 1), (True, 3)):
        m = _memoir_run(certify, check_every, mips, loss)
        np.testing.assert_array_equal(m._learner.store.to_dense(), ref._learner.store.to_dense())
        assert m._learner.acc == ref._learner.acc and m._learner.n_updates == ref._learner.n_updates
    assert m.certificate().extra["checks"] > 0


def test_memoir_is_a_learner_with_the_protocol():
    from streamssvm.learners import Learner
    lr = ss.learners.MEMOIR()
    assert isinstance(lr, Learner) and not type(lr).__abstractmethods__
    with pytest.raises(ValueError, match="multiclass"):
        lr.clone().bind(ss.structures.Chain(), [])
    # ensure / learn_batch / predict with the protocol's argument orders
    X, ys, centers = _data(C=20, d=8, n=600, seed=9)
    a = _ext(mips="exact", lam=1e-4, labels=list(range(20)))   # class id = label
    a.learn_many(X, ys)
    b = ss.learners.MEMOIR(mips="exact", lam=1e-4, rows="dense").clone()
    b.bind(ss.estimators.extreme.LabelCost(), [])
    b.ensure(9, list(range(20)))   # 8 columns + the bias feature of the estimator's encoding
    tok = [a._features.encode_one(x, grow=False) for x in X]
    ptr = np.concatenate([[0], np.cumsum([len(t[1]) for t in tok])])
    fidx = np.concatenate([t[1] for t in tok])
    fval = np.concatenate([t[2] for t in tok])
    ex = np.arange(len(X) + 1)
    b.learn_batch(ex, ptr, fidx, fval, ex, np.asarray(ys, dtype=np.int32))
    np.testing.assert_array_equal(b.store.to_dense()[:20, :9], a._learner.store.to_dense()[:20, :9])
    np.testing.assert_array_equal(b.predict(ex, ptr, fidx, fval, ex, len(X)),
                                  [a.predict_one(x) for x in X])
    assert b.n_blocks == 600 and b.certificate().n_blocks == 600


def test_refine_makes_epochs_over_the_window(tmp_path):
    X, ys, _ = _data(C=30, d=10, n=400, seed=11)
    m = _ext(mips="exact", lam=1e-3, window=200, check_every=0)
    for x, y in zip(X, ys):
        m.learn_one(x, int(y))
    p0 = m.certificate().primal
    t0 = m._learner.t
    seen = []
    c = m.refine(3.0, progress=lambda f, lr: seen.append(f), certify=True)
    assert m._learner.t == t0 + 600 and seen == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert m.n_blocks == 200 and c.n_blocks == 200 and c.primal < p0
    # saved and restored mid-way, refining continues identically
    m.save(tmp_path / "r.ssvm")
    m2 = ss.load(tmp_path / "r.ssvm")
    m.refine(1.0)
    m2.refine(1.0)
    np.testing.assert_array_equal(m2._learner.store.to_dense(), m._learner.store.to_dense())
