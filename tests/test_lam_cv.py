"""MultiLabelSSVM(lam_cv=3) (the default since round r9): ``refine`` chooses lambda by
cross-validation over the held examples (:mod:`streamssvm.lam_cv`), and with it one shared
decision threshold on the out-of-fold per-label scores; refines at that lambda, keeps both
and saves them. No timing here: ``bench/results/multilabel_defaults.md`` measures quality and
cost against one-vs-rest LinearSVC."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm.lam_cv import LAM_FACTORS, cross_validated_lam, jaccard_rows, shared_threshold


def _rows(n=240, seed=0):
    """Noisy labels of 8 features: 3 labels, each the sign of a feature sum, 20% flipped."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 8))
    Y = np.stack([X[:, 0] + X[:, 1] > 0, X[:, 2] - X[:, 3] > 0, X[:, 4] + 0.5 * X[:, 0] > 0], axis=1)
    Y ^= rng.random(Y.shape) < 0.2
    return [({f"f{j}": float(v) for j, v in enumerate(x)}, {lab: bool(b) for lab, b in zip("abc", y)})
            for x, y in zip(X, Y)]


def _fit(rows, refine=5, **kw):
    kw.setdefault("lam_cv", 3)
    m = ss.MultiLabelSSVM(**kw)
    for x, y in rows:
        m.learn_one(x, y)
    if refine:
        m.refine(refine)
    return m


def test_the_default_is_on():
    rows = _rows()
    m = ss.MultiLabelSSVM()
    for x, y in rows:
        m.learn_one(x, y)
    assert m.lam_cv == 3 and m.lam_selection_ is None and m.learner.lam is None   # the stream: untouched
    m.refine(2)
    assert m.lam_selection_ is not None and m.learner.lam == pytest.approx(m.lam_selection_.lam)


def test_refine_chooses_lambda_by_cross_validation_and_certifies_it():
    rows = _rows()
    m = _fit(rows)
    assert m.lam_cv == 3
    sel = m.lam_selection_
    lam_n = min(1e-3, 6.0 / len(rows))   # what lambda following n gives
    assert sel is not None and sel.folds == 3 and sel.n == len(rows)
    assert np.allclose(sel.lams, sorted((lam_n * f for f in LAM_FACTORS), reverse=True))
    assert sel.lam == sel.lams[int(np.argmax(sel.scores))]
    assert all(0.0 <= s <= 1.0 for s in sel.scores)
    # the learner solves, and its certificate certifies, the objective at the chosen lambda
    assert m.bound_learner.effective_lam() == pytest.approx(sel.lam)
    assert m.learner.lam == pytest.approx(sel.lam)
    c = m.certificate()
    assert c.lam == pytest.approx(sel.lam) and c.raw_gap >= -1e-9
    assert c.regularizer + c.hinge == pytest.approx(c.primal)


def test_cross_validation_leaves_the_learner_alone():
    m = _fit(_rows(), refine=0)
    lr = m.bound_learner
    before = (lr.W.E.copy(), lr.effective_lam(), lr.n_blocks)
    sel = cross_validated_lam(lr, folds=3, passes=2)
    assert sel is not None
    assert np.array_equal(lr.W.E, before[0]) and lr.effective_lam() == before[1] and lr.n_blocks == before[2]
    # seeded: the same choice again
    assert cross_validated_lam(lr, folds=3, passes=2).scores == sel.scores


def test_selection_runs_once_per_batch_of_new_examples():
    rows = _rows()
    m = _fit(rows[:150])
    first = m.lam_selection_
    m.refine(1)
    assert m.lam_selection_ is first          # nothing new: no second selection
    for x, y in rows[150:]:
        m.learn_one(x, y)
    m.refine(1)
    assert m.lam_selection_ is not first and m.lam_selection_.n == len(rows)
    # the grid follows n, not the lambda the first selection fixed
    assert max(m.lam_selection_.lams) == pytest.approx(100 * min(1e-3, 6.0 / len(rows)))


def test_off_and_a_users_lambda_are_left_alone():
    rows = _rows()
    off = _fit(rows, lam_cv=0)
    assert off.lam_selection_ is None and off.learner.lam is None
    assert off.bound_learner.effective_lam() == pytest.approx(min(1e-3, 6.0 / len(rows)))
    mine = _fit(rows, learner=ss.learners.BCFW(lam=0.01, seed=0))
    assert mine.lam_selection_ is None and mine.bound_learner.effective_lam() == 0.01
    sgd = _fit(rows, learner=ss.learners.SGD(seed=0))   # no dual blocks to hold out
    assert sgd.lam_selection_ is None
    few = _fit(rows[:5])   # fewer than 2 examples per fold: nothing to cross-validate
    assert few.lam_selection_ is None and few.learner.lam is None
    with pytest.raises(ValueError, match="lam_cv"):
        ss.MultiLabelSSVM(lam_cv=1)


def test_the_choice_is_saved_and_older_files_load_without_it(tmp_path):
    rows = _rows()
    m = _fit(rows)
    m.save(tmp_path / "m.zip")
    back = ss.load(tmp_path / "m.zip")
    assert back.lam_cv == 3 and back.lam_selection_ == m.lam_selection_
    assert back.bound_learner.effective_lam() == pytest.approx(m.lam_selection_.lam)
    assert [back.predict_one(x) for x, _ in rows[:30]] == [m.predict_one(x) for x, _ in rows[:30]]
    back.refine(1)   # nothing new since the selection: none again
    assert back.lam_selection_ == m.lam_selection_
    # a file from before lam_cv: no parameter, no selection -> lam_cv=0, lambda follows n
    st = _fit(rows, refine=0).state()
    del st["config"]["params"]["lam_cv"], st["lam_selection"]
    old = ss.MultiLabelSSVM.from_state(st)
    assert old.lam_cv == 0 and old.lam_selection_ is None
    old.refine(1)
    assert old.lam_selection_ is None and old.learner.lam is None


def test_shared_threshold_fires_on_a_clear_gain_only():
    rng = np.random.default_rng(0)
    truth = np.eye(4, dtype=bool)[rng.integers(0, 4, size=200)]   # one label on per row
    # scores below 0 for every label (the argmax predicts nothing) but ordered: a shift is a clear gain
    low = np.where(truth, -0.05, -0.25) + 0.01 * rng.normal(size=truth.shape)
    t = shared_threshold(low, truth)
    assert -0.25 < t < -0.05
    assert jaccard_rows(truth, low > t).mean() > 0.9 > jaccard_rows(truth, low > 0).mean()
    # scores already right at 0: the ties around 0 gain nothing, so 0 (the model's argmax) stays
    assert shared_threshold(np.where(truth, 0.1, -0.1), truth) == 0.0
    # pure noise: whatever the grid's best, its gain is not clear
    assert shared_threshold(rng.normal(scale=0.1, size=truth.shape), truth[rng.permutation(200)]) == 0.0


def _one_label_rows(n, seed):
    """Exactly one of 4 labels on per row (the argmax of 4 noisy features): the Hamming
    argmax leaves many rows empty, Jaccard wants a lower threshold."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    k = np.argmax(X[:, :4] + rng.normal(size=(n, 4)), axis=1)
    return [({f"f{j}": float(v) for j, v in enumerate(x)}, {lab: bool(lab == "abcd"[c]) for lab in "abcd"})
            for x, c in zip(X, k)]


def _jaccard(m, rows):
    P = np.array([[m.predict_one(x)[lab] for lab in "abcd"] for x, _ in rows])
    Y = np.array([[y[lab] for lab in "abcd"] for _, y in rows])
    return jaccard_rows(Y, P).mean()


def test_the_threshold_is_chosen_with_lambda_and_applied(tmp_path):
    m = _fit(_one_label_rows(300, 0), refine=5, lam_cv=3)
    sel = m.lam_selection_
    assert m._pairwise and sel.threshold < 0.0   # it fires here
    test = _one_label_rows(400, 1)
    x0 = test[0][0]
    s = m._label_scores(*m._encode_to_predict(x0))
    assert m.predict_one(x0) == {lab: bool(s[k] > sel.threshold) for k, lab in enumerate("abcd")}
    p = m.predict_proba_one(x0)
    assert all((p[lab][True] > 0.5) == v for lab, v in m.predict_one(x0).items())
    with_t = _jaccard(m, test)
    m.save(tmp_path / "m.zip")
    back = ss.load(tmp_path / "m.zip")
    assert back.lam_selection_.threshold == sel.threshold
    assert [back.predict_one(x) for x, _ in test[:30]] == [m.predict_one(x) for x, _ in test[:30]]
    # threshold 0 is the model's own argmax, and scores lower on this stream
    sel.threshold = 0.0
    argmax = [m.predict_nbest_one(x, 1)[0][0] for x, _ in test[:30]]
    assert [m.predict_one(x) for x, _ in test[:30]] == argmax
    assert _jaccard(m, test) < with_t
    # a file from before thresholds: its selection loads with threshold 0
    st = back.state()
    del st["lam_selection"]["threshold"]
    assert ss.MultiLabelSSVM.from_state(st).lam_selection_.threshold == 0.0
    from streamssvm import checkpoint
    for bad in (float("nan"), "x", None):
        st = back.state()
        st["lam_selection"]["threshold"] = bad
        with pytest.raises(checkpoint.CheckpointError, match="threshold"):
            ss.MultiLabelSSVM.from_state(st)


def test_the_threshold_stays_off_where_the_argmax_is_right():
    m = _fit(_rows(), refine=5, lam_cv=3)
    assert m.lam_selection_.threshold == 0.0
