"""The tuning prototype ``bench/multilabel_seen_sets.py`` (issue 23 item 9): it refuses the
held-out sets (the protocol: held-out sets are spent by looking), decodes only label sets seen
in training, and its BCFW primal objective falls and levels off with passes on a small problem."""
import numpy as np
import pytest

from bench import multilabel_defaults as md
from bench import multilabel_seen_sets as seen


def test_held_out_sets_are_refused_before_loading():
    for name in md.HELD_OUT:
        with pytest.raises(SystemExit, match="held out"):
            seen.run_set(name, ["seen/indep/ham"])


def _toy(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    Y = np.stack([X[:, 0] > 0, X[:, 1] > 0, (X[:, 0] > 0) & (X[:, 1] > 0)], axis=1)
    return X, Y


@pytest.mark.parametrize("spec", ["seen/indep/ham", "seen/pair/ham", "seen/indep/jac", "full/pair/ham"])
def test_predictions_are_training_label_sets_and_fit_a_separable_problem(spec):
    X, Y = _toy()
    A, B = seen.prepare(X, X, Y.shape[1])
    v = seen._variant(spec)
    P = seen.predict(seen.train(A, Y, v, lam=1e-3, passes=50), B, v["pairwise"])
    if v["space"] == "seen":
        assert {tuple(r) for r in P} <= {tuple(r) for r in Y}
    assert md.jaccards(Y, P).mean() > 0.9


def _primal(A, Y, model, lam, variant):
    W, P, S = model
    Sf = S.astype(float)
    loss = seen.hamming_loss if variant["loss"] == "ham" else seen.jaccard_loss
    total = 0.0
    for i in range(A.shape[0]):
        sc = seen._set_scores(Sf, A[i] @ W, P, variant["pairwise"])
        yt = Y[i].astype(float)
        truth = yt @ (A[i] @ W) + (np.triu(np.outer(yt, yt), 1) * P).sum() * variant["pairwise"]
        total += max(0.0, float(np.max(sc + loss(Y[i], S))) - truth)
    return lam / 2 * ((W ** 2).sum() + (P ** 2).sum()) + total / A.shape[0]


def test_more_passes_lower_the_primal_to_a_plateau():
    X, Y = _toy(80, seed=1)
    A, _ = seen.prepare(X, X, Y.shape[1])
    v = seen._variant("seen/pair/jac")
    lam = 1e-2
    p = [_primal(A, Y, seen.train(A, Y, v, lam=lam, passes=k), lam, v) for k in (2, 50, 200)]
    assert p[1] < p[0]
    assert abs(p[2] - p[1]) < 0.05 * p[1]
