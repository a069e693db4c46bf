"""Calibrated confidence (streamssvm.calibration): Gibbs probabilities with an online temperature."""
import itertools
import math

import numpy as np
import pytest
from river import checks

import streamssvm as ss
from streamssvm import calibration
from streamssvm._kernels import marginals as KM
from streamssvm.errors import CheckpointError


def _brute_chain(S, T, B, use_trans, beta):
    L, K = S.shape
    marg = np.zeros((L, K))
    logs = []
    seqs = list(itertools.product(range(K), repeat=L))
    for y in seqs:
        logs.append(beta * KM.chain_score(S, T, B, use_trans, L, np.array(y, dtype=np.int64)))
    logs = np.array(logs)
    logZ = np.logaddexp.reduce(logs)
    for y, lv in zip(seqs, logs):
        for t, k in enumerate(y):
            marg[t, k] += np.exp(lv - logZ)
    return marg, logZ, dict(zip(seqs, np.exp(logs - logZ)))


@pytest.mark.parametrize("L,K,use_trans", [(1, 3, True), (3, 2, True), (4, 3, True), (3, 3, False)])
def test_chain_marginals_equal_enumeration(L, K, use_trans):
    rng = np.random.default_rng(L * 10 + K)
    S, T, B = rng.normal(size=(L, K)) * 2, rng.normal(size=(K, K)), rng.normal(size=(2, K))
    for beta in (0.3, 1.0, 2.5):
        marg = np.empty((L, K))
        logZ = KM.chain_marginals(S, T, B, use_trans, L, K, beta, marg)
        bm, bz, _ = _brute_chain(S, T, B, use_trans, beta)
        assert np.allclose(marg, bm, atol=1e-12) and np.isclose(logZ, bz)
        assert np.allclose(marg.sum(axis=1), 1.0)


def _tagger_data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n):
        L = int(rng.integers(2, 5))
        y = [str(v) for v in rng.integers(0, 3, size=L)]
        x = [{"w=" + t: 1.0, "n" + str(rng.integers(3)): 1.0} if rng.random() < 0.8 else {"u": 1.0} for t in y]
        X.append(x)
        Y.append(y)
    return X, Y


def test_tagger_marginals_and_sequence_probability_match_the_gibbs_distribution():
    X, Y = _tagger_data()
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, seed=0))
    for x, y in zip(X, Y):
        m.learn_one(x, y)
    assert m._temperature.n_fits >= 1 and m.temperature != 1.0
    x = X[0]
    tok_ptr, fidx, fval = m._features.encode_tokens(x, grow=False)
    S, T, B = m._gibbs_tables(tok_ptr, fidx, fval)
    bm, _, probs = _brute_chain(S, T, B, True, 1.0 / m.temperature)
    got = m.predict_proba_one(x)
    labs = m.classes
    assert np.allclose([[d[c] for c in labs] for d in got], bm, atol=1e-12)
    assert all(abs(sum(d.values()) - 1) < 1e-9 for d in got)
    pred = m.predict_one(x)
    ids = tuple(labs.index(c) for c in pred)
    assert np.isclose(m.sequence_proba_one(x), probs[ids])
    assert probs[ids] == max(probs.values())          # the prediction is the mode
    assert np.isclose(sum(m.sequence_proba_one(x, [labs[i] for i in y]) for y in probs), 1.0)
    assert m.sequence_proba_one(x, ["nope"] * len(x)) == 0.0


def test_multiclass_probabilities_sum_to_one_and_argmax_is_the_prediction():
    rng = np.random.default_rng(1)
    m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    C = rng.normal(size=(4, 5)) * 2
    for _ in range(300):
        k = int(rng.integers(4))
        x = C[k] + rng.normal(size=5)
        p = m.predict_proba_one(x)
        if p:
            assert abs(sum(p.values()) - 1) < 1e-9
            assert max(p, key=p.get) == m.predict_one(x)
        m.learn_one(x, k)
    assert m._temperature.n_fits > 0


def test_temperature_fit_reduces_log_loss_on_a_synthetic_stream():
    rng = np.random.default_rng(0)
    t = calibration.Temperature(window=200, every=10 ** 9)   # fit by hand below
    for _ in range(200):
        s = rng.normal(size=4) * 6
        t.observe_class(s, int(rng.choice(4, p=calibration.softmax(s, 0.2))))
    before = t.loss()
    after = t.fit(steps=6)
    assert after < before and np.isclose(after, t.loss())
    assert 0.1 < t.beta < 0.35
    grid = [t.loss(b) for b in np.linspace(0.05, 1.0, 60)]
    assert after <= min(grid) + 1e-3                        # at the minimum


def test_temperature_fit_on_chains_and_labels_reduces_log_loss():
    rng = np.random.default_rng(3)
    t = calibration.Temperature(window=100, every=10 ** 9)
    for _ in range(60):
        L, K = 3, 3
        S, T, B = rng.normal(size=(L, K)) * 5, rng.normal(size=(K, K)), np.zeros((2, K))
        t.observe_chain(S, T, B, True, rng.integers(0, K, size=L))
    f0 = t.loss()
    assert t.fit(steps=4) < f0 and t.beta < 1.0               # random tags: less confident
    u = calibration.Temperature(every=10 ** 9)
    for _ in range(100):
        s = rng.normal(size=5)
        u.observe_labels(s, rng.random(5) < calibration.sigmoid(s, 3.0))
    f0 = u.loss()
    assert u.fit(steps=6) < f0 and 1.5 < u.beta < 6.0


def test_state_round_trip_keeps_the_temperature(tmp_path):
    X, Y = _tagger_data(40)
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, seed=0))
    for x, y in zip(X, Y):
        m.learn_one(x, y)
    m.save(tmp_path / "m.ssvm")
    r = ss.load(tmp_path / "m.ssvm")
    assert r.temperature == m.temperature
    assert r.predict_proba_one(X[1]) == m.predict_proba_one(X[1])
    st = m.state()
    st["calibration"]["beta"] = float("nan")
    with pytest.raises(CheckpointError):
        ss.SequenceTagger.from_state(st)
    st["calibration"] = {"beta": 1.0}
    with pytest.raises(CheckpointError):
        ss.SequenceTagger.from_state(st)
    del st["calibration"]                                    # a file from before: T = 1
    assert ss.SequenceTagger.from_state(st).temperature == 1.0


def test_calibration_does_not_change_the_learning_trajectory():
    rng = np.random.default_rng(2)
    data = [(rng.normal(size=4), int(rng.integers(3))) for _ in range(200)]
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    b._temperature = calibration.Temperature(dense_until=0, stride=10 ** 9)   # observes only record 0
    for x, y in data:
        a.learn_one(x, y)
        b.learn_one(x, y)
    assert np.array_equal(a.bound_learner.emission_weights(), b.bound_learner.emission_weights())


def test_multiclass_with_calibration_passes_river_checks():
    for params in ss.MulticlassSSVM._unit_test_params():
        checks.check_estimator(ss.MulticlassSSVM(**params))


def test_multilabel_probabilities_agree_with_the_prediction_and_fit_a_temperature():
    rng = np.random.default_rng(4)
    m = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=1e-2, seed=0))
    W = rng.normal(size=(6, 4))
    for _ in range(300):
        x = rng.normal(size=6)
        y = {f"l{k}": bool(v) for k, v in enumerate(x @ W + rng.normal(size=4) > 0)}
        p = m.predict_proba_one(x)
        pred = m.predict_one(x)
        for lab, d in p.items():
            assert abs(d[False] + d[True] - 1) < 1e-12
            assert (d[True] > 0.5) == pred[lab] or abs(d[True] - 0.5) < 1e-9
        m.learn_one(x, y)
    assert m._temperature.n_fits > 0 and m.temperature != 1.0
    # a pairwise MRF (the default for this small known label set): max-marginal gaps, the same agreement
    assert m._pairwise is True
    pw = ss.MultiLabelSSVM(pairwise=False, learner=ss.learners.BCFW(lam=1e-2, seed=0))
    for _ in range(300):
        x = rng.normal(size=6)
        y = {f"l{k}": bool(v) for k, v in enumerate(x @ W + rng.normal(size=4) > 0)}
        p, pred = pw.predict_proba_one(x), pw.predict_one(x)
        assert all((d[True] > 0.5) == pred[lab] or abs(d[True] - 0.5) < 1e-9 for lab, d in p.items())
        pw.learn_one(x, y)
    assert pw._temperature.n_fits > 0 and pw.temperature != 1.0
    tree = ss.MultiLabelSSVM(hierarchy={"a": "r", "b": "r"}, learner=ss.learners.BCFW(lam=1e-2, seed=0))
    tree.learn_one(np.ones(3), {"a": True, "b": False})
    assert tree.predict_proba_one(np.ones(3)) == {lab: {False: float(not v), True: float(v)}
                                                  for lab, v in tree.predict_one(np.ones(3)).items()}


def test_cli_predict_proba_writes_probabilities(tmp_path):
    import json
    import subprocess
    import sys
    import os
    rng = np.random.default_rng(0)
    src = tmp_path / "s.jsonl"
    with open(src, "w") as f:
        for _ in range(80):
            k = int(rng.integers(3))
            f.write(json.dumps({"x": {"f": float(k + rng.normal() * 0.3), "g": float(rng.normal())}, "y": str(k)}) + "\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    run = lambda *a: subprocess.run([sys.executable, "-m", "streamssvm", *map(str, a)], capture_output=True,  # noqa: E731
                                    text=True, env=env, timeout=600)
    m = tmp_path / "m.ssvm"
    assert run("run", "--source", f"file://{src}", "--task", "multiclass", "--lam", "0.01", "--save", m,
               "--no-progress").returncode == 0
    r = run("predict", "--model", m, "--source", f"file://{src}", "--proba")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 80
    for row in rows:
        assert abs(sum(row["proba"].values()) - 1) < 1e-9
        assert max(row["proba"], key=row["proba"].get) == row["prediction"]


def test_a_temperature_at_its_bound_saves_and_loads():
    """A fit pushed to the smallest inverse temperature stays inside the validator's range:
    exp(log(1e-8)) rounds to 9.999999999999982e-09, which the saved-state validator refused
    (a model whose records all tie could not be checkpointed)."""
    from streamssvm.calibration import BETA_MIN, Temperature
    t = Temperature(window=8, every=8, dense_until=1000, stride=1)
    for _ in range(400):   # the truth always scores far below: the fit drives beta to its bound
        t.wants()
        t.observe_class(np.array([0.0, 50.0, 50.0]), 0)
    assert t.beta == BETA_MIN
    assert Temperature.from_state(t.state()).beta == BETA_MIN


def test_many_tag_chains_do_not_fit_the_temperature_while_learning():
    """Above _calibration_max_tags the forward-backward fit would dominate learning (Brown's 472
    tags: the first pass ~20x slower), so sequences are offered but not observed, and T stays 1."""
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0))
    tags = [f"t{i}" for i in range(m._calibration_max_tags + 6)]
    for i in range(40):
        m.learn_one([{f"w{(i + j) % 7}": 1.0} for j in range(5)], [tags[(5 * i + j) % len(tags)] for j in range(5)])
    assert m._temperature.n_offered == 40 and m._temperature.n_observed <= 14 and m.temperature == 1.0


def _atypical_tail_stream(t, n=6000, tail=4500, seed=0):
    """Offer ``n`` independent-token chains (8 tokens, 5 tags, no transitions) to ``t``, the tags
    drawn at inverse temperature 1.0 for the first ``tail`` records and 0.5 after (a recent part
    harder than the rest, as OCR words' last training words are); returns every observed item."""
    rng = np.random.default_rng(seed)
    T, B = np.zeros((5, 5)), np.zeros((2, 5))
    seen = []
    for i in range(n):
        if not t.wants():
            continue
        S = rng.normal(size=(8, 5)) * 3.0
        b = 1.0 if i < tail else 0.5
        y = [int(rng.choice(5, p=calibration.softmax(s, b))) for s in S]
        t.observe_chain(S, T, B, False, y)
        seen.append((S, y))
    return seen


def test_the_chain_temperature_pools_its_windows_rather_than_trusting_the_last():
    """The SequenceTagger's fit pools its window fits (half-life ``memory`` offered records): a
    window of 64 sequences is a small sample of the stream, and on OCR words (train folds 1-8,
    tune on fold 9) the last window alone set beta 3.74 where the tuning fold wanted 4.39 (token
    ECE 0.054 vs 0.014). Before the pool, beta was the last window's minimizer: here ~0.5, the
    atypical tail's (~0.55), where the stream as a whole wants ~0.86."""
    t = calibration.Temperature(**ss.SequenceTagger._calibration_settings)
    seen = _atypical_tail_stream(t)
    whole = calibration.Temperature(window=10 ** 6, every=10 ** 9)
    for S, y in seen:
        whole.observe_chain(S, np.zeros((5, 5)), np.zeros((2, 5)), False, y)
    whole.fit(steps=12)
    assert t.n_fits >= 8 and 0.75 < whole.beta < 0.95
    assert abs(np.log(t.beta / whole.beta)) < 0.1, (t.beta, whole.beta, np.exp(t.window_log_beta))
    assert np.exp(t.window_log_beta) < 0.65          # the last window alone: the tail's


def test_memory_zero_keeps_the_last_windows_beta_and_pool_state_round_trips():
    """memory=0 (the multiclass and multi-label default) is the fit before the pool, bit for bit:
    beta is the last window's minimizer. The pool is saved; a state from before the pool (no
    pool keys) loads with the saved beta, and a bad pool value is refused."""
    from streamssvm.calibration import Temperature
    t = Temperature(**{**ss.SequenceTagger._calibration_settings, "memory": 0})
    _atypical_tail_stream(t)
    assert t.beta == np.exp(t.window_log_beta) < 0.65
    p = Temperature(**ss.SequenceTagger._calibration_settings)
    _atypical_tail_stream(p)
    r = Temperature.from_state(p.state(), **ss.SequenceTagger._calibration_settings)
    assert r.state() == p.state()
    old = {k: p.state()[k] for k in ("beta", "n_offered", "n_observed", "n_fits")}
    r = Temperature.from_state(old, **ss.SequenceTagger._calibration_settings)
    assert r.beta == p.beta and r.window_log_beta == np.log(p.beta) and r.pool_weight == 0.0
    for key, bad in (("pool_weight", -1.0), ("pool_log_beta", float("nan")), ("window_log_beta", 1e3)):
        with pytest.raises(CheckpointError):
            Temperature.from_state({**p.state(), key: bad})


def test_the_chain_pool_is_the_same_record_by_record_and_in_batches():
    """The pool weighs a fit by the records its observations stand for (counted from the
    observations, not from the offers a batch path counts in runs): learn_one and learn_many
    leave the same temperature state."""
    X, Y = _tagger_data(1600, seed=3)
    a = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, seed=0))
    b = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, seed=0))
    for x, y in zip(X, Y):
        a.learn_one(x, y)
    for s in range(0, len(X), 97):
        b.learn_many(X[s:s + 97], Y[s:s + 97])
    ta, tb = a._temperature, b._temperature
    assert ta.n_fits >= 5 and ta.pool_weight > 0 and ta.state() == tb.state()


def _reference_loss(t, beta):
    """The window's log-loss by the formula written out (one pass per step, per beta)."""
    tot, units = 0.0, 0
    by = {}
    for it in t._items:
        by.setdefault((it[0], len(it[1])), []).append(it)
    for (kind, _), its in by.items():
        S = np.array([it[1] for it in its])
        Z = beta * S
        if kind == "c":
            Y = np.array([it[2] for it in its])
            m = Z.max(axis=1)
            tot += float(np.sum(m + np.log(np.exp(Z - m[:, None]).sum(axis=1)) - Z[np.arange(len(Y)), Y]))
            units += len(Y)
        else:
            Y = np.stack([np.asarray(it[2]) for it in its])
            tot += float(np.sum(np.logaddexp(0.0, -Z * np.where(Y, 1.0, -1.0))))
            units += Y.size
    return tot / units


def test_the_window_loss_is_the_written_out_formula_to_the_bit():
    """Temperature.loss reads each class row's largest and true score once per window (beta * max
    is the max of beta * scores for beta > 0): the same bits as the formula at every beta, also
    with ties, zeros of both signs, a single class and mixed class counts."""
    rng = np.random.default_rng(7)
    t = calibration.Temperature(window=64, every=10 ** 9)
    for i in range(60):
        K = (3, 26, 1)[i % 3]
        s = np.round(rng.normal(size=K) * 4, 1 if i % 5 == 0 else 12)   # rounded: ties
        if i % 7 == 0:
            s[0], s[-1] = 0.0, -0.0
        t.observe_class(s, rng.integers(K))
        if i % 4 == 0:
            t.observe_labels(rng.normal(size=5), rng.random(5) < 0.5)
    prep = t._groups()
    for beta in [1e-8, 1e-3, 0.37, 1.0, 1.0 + 2 ** -40, 7.5, 123.456, 1e8, *np.exp(rng.normal(size=200) * 3)]:
        assert t.loss(beta, prep).hex() == _reference_loss(t, beta).hex(), beta
    for beta in (0.0, -1.5, np.inf, np.nan):   # outside the fit's range: the formula itself
        with np.errstate(invalid="ignore", over="ignore"):
            a, b = t.loss(beta, prep), _reference_loss(t, beta)
        assert (a == b) or (np.isnan(a) and np.isnan(b)), beta


def test_losses_at_several_betas_are_each_loss_to_the_bit():
    """Temperature.losses evaluates a multiclass window at several betas in one stacked pass: each
    value is loss(beta)'s to the bit (windows of 1..128 records, class counts 2..64, several class
    counts in one window, ties and zeros); a window with label groups takes loss() itself."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        t = calibration.Temperature(window=int(rng.integers(1, 129)), every=10 ** 9)
        Ks = [int(k) for k in rng.integers(2, 65, size=1 + trial % 3)]
        for i in range(int(rng.integers(1, 200))):
            K = Ks[i % len(Ks)]
            s = np.round(rng.normal(size=K) * rng.choice([0.5, 4.0, 40.0]), 1 if i % 5 == 0 else 12)
            if i % 7 == 0:
                s[0], s[-1] = 0.0, -0.0
            t.observe_class(s, rng.integers(K))
        prep = t._groups()
        betas = [float(b) for b in np.exp(rng.normal(size=3) * 2)] + [1e-8, 1e8]
        for k in (1, 2, 3, 5):
            got = t.losses(betas[:k], prep)
            assert [v.hex() for v in got] == [t.loss(b, prep).hex() for b in betas[:k]], (trial, k)
    t.observe_labels(rng.normal(size=5), rng.random(5) < 0.5)
    prep = t._groups()
    assert [v.hex() for v in t.losses([0.3, 2.0], prep)] == [t.loss(b, prep).hex() for b in (0.3, 2.0)]


def _reference_fit(t, steps):
    """Temperature.fit as written before the stacked evaluations: one loss() at a time."""
    h = 0.1
    u = t.window_log_beta
    prep = t._groups()
    f0 = t.loss(math.exp(u), prep)
    H = 0.0
    for _ in range(steps):
        fp, fm = t.loss(math.exp(u + h), prep), t.loss(math.exp(u - h), prep)
        g = (fp - fm) / (2 * h)
        H = (fp - 2 * f0 + fm) / (h * h)
        if abs(g) < 1e-12:
            break
        step = -g / H if H > 1e-12 else -math.copysign(1.0, g)
        step = max(-1.0, min(1.0, step))
        for _ in range(8):
            un = min(max(u + step, math.log(calibration.BETA_MIN)), math.log(calibration.BETA_MAX))
            fn = t.loss(math.exp(un), prep)
            if fn < f0:
                u, f0 = un, fn
                break
            step *= 0.5
        else:
            break
    return u, H, f0


def test_the_fit_with_stacked_losses_is_the_one_at_a_time_fit_to_the_bit():
    """Every fit along a stream (2 and 5 Newton steps) lands on the log beta, curvature and loss of
    the fit that evaluates one beta at a time, bit for bit."""
    rng = np.random.default_rng(5)
    for steps in (2, 5):
        t = calibration.Temperature(window=128, every=32, steps=steps)
        for i in range(1500):
            K = 26
            s = rng.normal(size=K) * 6
            y = int(np.argmax(s + rng.normal(size=K) * 5))
            if t.n_observed % t.every == t.every - 1:   # the next observation fits: compare it
                ref = calibration.Temperature(window=128, every=10 ** 9)
                ref._items.extend(t._items)
                ref._items.append(("c", np.array(s, dtype=np.float64), y))
                ref.window_log_beta = t.window_log_beta
                u, H, f0 = _reference_fit(ref, steps)
                t.observe_class(s, y)
                assert t.window_log_beta.hex() == min(max(u, math.log(calibration.BETA_MIN)),
                                                      math.log(calibration.BETA_MAX)).hex(), i
                assert t.pool_log_beta.hex() == t.window_log_beta.hex()   # memory 0: the window's
            else:
                t.observe_class(s, y)
        assert t.n_fits > 40


@pytest.mark.parametrize("window,every,memory", [(128, 32, 0), (16, 40, 0), (64, 7, 500.0)])
def test_observing_a_table_of_rows_is_observing_each_row_to_the_bit(window, every, memory):
    """``observe_classes`` (a micro-batch's observed rows at once) keeps the window, fits at the
    same observations and lands on the beta, pool and counters of ``observe_class`` row by row,
    in chunks of every size (across fit points, longer than the window), also when the class
    count grows mid-stream (rows of another length in the window) and when chains share it."""
    rng = np.random.default_rng(11)
    a = calibration.Temperature(window=window, every=every, memory=memory)
    b = calibration.Temperature(window=window, every=every, memory=memory)
    i = 0
    for size in [1, 3, 31, 32, 33, 1, 0, 5, 97, 200, 2, 64, 129, 17] * 3:
        K = 4 if i < 300 else 6   # the classes grow mid-stream
        S = rng.normal(size=(size, K)) * 4
        ys = rng.integers(0, K, size=size).astype(np.int32)
        for s, y in zip(S, ys):
            a.observe_class(s, y)
        b.observe_classes(S, ys)
        S[:] = np.nan   # the caller's table is not the window's
        i += size
        if i % 5 == 0:   # a chain among the class rows
            ch = (rng.normal(size=(3, 2)), rng.normal(size=(2, 2)), rng.normal(size=(2, 2)), True, [0, 1, 1])
            a.observe_chain(*ch)
            b.observe_chain(*ch)
        assert a.state() == b.state()
        assert a._shapes == b._shapes
        assert [(it[0], it[2] if it[0] == "c" else None) for it in a._items] == \
               [(it[0], it[2] if it[0] == "c" else None) for it in b._items]
        assert all(np.array_equal(x[1], y[1]) for x, y in zip(a._items, b._items) if x[0] == "c")
    assert a.n_fits > 10 and a.beta.hex() == b.beta.hex()
    with pytest.raises(ValueError):
        b.observe_classes(np.zeros((2, 3)), [0])


def _kernel_table(tables, tok_ptr, fidx, fval, K):
    """``marginals.emission_table``'s table (``emission_scores`` without a learner: its kernel)."""
    return calibration.emission_scores(tables, tok_ptr, fidx, fval, K)


def test_emission_scores_in_numpy_are_the_kernels_to_the_bit():
    """``emission_scores_numpy`` (a first record's scores, before any kernel exists) against
    ``marginals.emission_table``: tokens with hundreds of features over values of 16 orders of
    magnitude (a pairwise or blocked sum would differ), -0.0 values and weights, features past the
    weight rows, empty tokens, tok_ptr not from 0, averaged weights (zc != 0)."""
    rng = np.random.default_rng(0)
    for trial in range(400):
        d, K, L = int(rng.integers(1, 40)), int(rng.integers(1, 10)), int(rng.integers(1, 8))
        lens = rng.integers(0, 120 if trial % 3 == 0 else 6, size=L)
        tok_ptr = np.r_[0, np.cumsum(lens)].astype(np.int64) + (3 if trial % 5 == 0 else 0)
        n = int(tok_ptr[-1]) + 2
        fidx = rng.integers(-2, d + 3, size=n).astype(np.int64)
        fval = rng.normal(size=n) * 10.0 ** rng.integers(-8, 9, size=n)
        fval[rng.random(n) < 0.1] = -0.0
        E = rng.normal(size=(d, K + 2)) * 10.0 ** rng.integers(-6, 7, size=(d, 1))
        E[rng.random(E.shape) < 0.1] = -0.0
        tables = (E, rng.normal(size=(d, K + 2)), [0.0, 0.3, 1e-9][trial % 3], None, None, [1.0, 0.7, 3e5][trial % 3])
        want = _kernel_table(tables, tok_ptr, fidx, fval, K)
        assert calibration.emission_scores_numpy(tables, tok_ptr, fidx, fval, K).tobytes() == want.tobytes()


def _state_digest(lr):
    return (lr.W.E.tobytes(), lr.W.T.tobytes(), lr.W.B.tobytes(), lr._Z.E.tobytes(), lr.counters.tobytes(), lr._tick)


@pytest.mark.parametrize("averaging", [True, False])
def test_the_record_kernels_scores_are_the_emission_tables_and_change_nothing(averaging):
    """``BCFW.record_emission_table`` (the temperature fit's scores in ``learn_one_example``) gives
    ``marginals.emission_table``'s values to the bit, for chains (averaged or last iterate),
    multiclass and multi-label records, with unseen features, and leaves the learner as it was."""
    rng = np.random.default_rng(1)
    seq = ss.SequenceTagger(learner=ss.learners.BCFW(averaging=averaging, seed=0))
    mc = ss.MulticlassSSVM(learner=ss.learners.BCFW(averaging=averaging, seed=0))
    ml = ss.MultiLabelSSVM(learner=ss.learners.BCFW(averaging=averaging, seed=0))
    for i in range(30):
        x = [{f"w{int(v)}": 1.0, "b": float(rng.normal())} for v in rng.integers(0, 12, size=int(rng.integers(1, 6)))]
        seq.learn_one(x, [str(int(v) % 4) for v in rng.integers(0, 8, size=len(x))])
        d = {f"f{j}": float(v) for j, v in enumerate(rng.normal(size=4))}
        mc.learn_one(d, int(rng.integers(0, 4)))
        ml.learn_one(d, {k: bool(rng.random() < 0.5) for k in "abc"})
    checked = 0
    for est in (seq, mc, ml):
        lr = est._learner
        assert not lr.record_kernel_pending
        K = int(lr.n_labels)
        for t in range(5):
            if est is seq:
                x = [{f"w{int(v)}": 1.0, "b": 0.5, "unseen": 2.0} for v in rng.integers(0, 14, size=t + 1)]
                tok_ptr, fidx, fval = est._features.encode_tokens(x, grow=False)
            else:
                tok_ptr, fidx, fval = est._features.encode_tokens([{"f0": 1.5, "f2": -0.25, "unseen": 1.0}], grow=False)
            before = _state_digest(lr)
            got = lr.record_emission_table(tok_ptr, fidx, fval, K)
            assert _state_digest(lr) == before
            want = _kernel_table(calibration.predict_tables(lr), tok_ptr, fidx, fval, K)
            assert got is not None and got.tobytes() == want.tobytes()
            assert calibration.emission_scores(calibration.predict_tables(lr), tok_ptr, fidx, fval, K, lr).tobytes() \
                == want.tobytes()
            checked += 1
    assert checked == 15


def test_only_a_learner_that_learned_nothing_scores_in_numpy():
    """The numpy table serves the first record only: after ``learn_many`` (its own kernels, maybe
    no record kernel), the scores come from a kernel, not from numpy at ~15x the time."""
    m = ss.SequenceTagger()
    m.learn_one([{"a": 1.0}, {"b": 1.0}], ["x", "y"])   # (bound; the first record was scored in numpy)
    fresh = ss.SequenceTagger()
    fresh.learn_many([[{"a": 1.0}, {"b": 1.0}], [{"b": 1.0}]], [["x", "y"], ["y"]])
    assert not m._learner.record_kernel_pending and not fresh._learner.record_kernel_pending
    p = fresh.predict_proba_one([{"a": 1.0}, {"c": 1.0}])
    assert len(p) == 2 and all(abs(sum(d.values()) - 1.0) < 1e-12 for d in p)


def _first_record_calibration(monkeypatch, max_floats):
    calls = []
    real = calibration.emission_scores_numpy
    monkeypatch.setattr(calibration, "emission_scores_numpy", lambda *a: (calls.append(a[1]), real(*a))[1])
    monkeypatch.setattr(calibration, "NUMPY_TABLE_MAX_FLOATS", max_floats)
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0))
    x = [{"a": 1.0, "b": 2.0, "c": -1.0}, {"b": 1.0}, {"a": 0.5, "d": 3.0}]
    m.learn_one(x, ["x", "y", "z"])
    return calls, m.predict_proba_one(x), m.temperature


def test_a_first_record_past_the_numpy_tables_bound_is_scored_by_the_kernel(monkeypatch):
    """``emission_scores_numpy`` pads a record's terms to L x (most features of a token) x K
    floats: a first record past ``NUMPY_TABLE_MAX_FLOATS`` is scored by the compiled table (the
    same values), so that padding is bounded by design, not by the record."""
    calls, p_numpy, t_numpy = _first_record_calibration(monkeypatch, calibration.NUMPY_TABLE_MAX_FLOATS)
    assert len(calls) == 1   # 3 tokens x 3 features x 3 tags fit
    calls, p_kernel, t_kernel = _first_record_calibration(monkeypatch, 3 * 3 * 3 - 1)
    assert calls == []
    assert p_kernel == p_numpy and t_kernel == t_numpy
    assert calibration.numpy_table_fits(np.zeros(1, dtype=np.int64), 5)   # no token


@pytest.mark.parametrize("name, dense", [("BCFW", True), ("SGD", True), ("BMRM", True), ("CuttingPlane", True),
                                         ("Pragam", False)])
def test_prediction_tables_are_a_declared_learner_method(name, dense):
    """``calibration.predict_tables`` asks the learner (``Learner.prediction_tables``, None unless
    a learner declares its tables): a learner with tables predicts their argmax, one without gives
    one-hot probabilities on its prediction."""
    cls = getattr(ss.learners, name)
    assert ("prediction_tables" in vars(cls)) == dense
    rng = np.random.default_rng(2)
    centers = rng.normal(size=(3, 4)) * 2
    m = ss.MulticlassSSVM(learner=cls())
    data = []
    for i in range(60):
        k = int(rng.integers(0, 3))
        data.append(({f"f{j}": float(v) for j, v in enumerate(centers[k] + rng.normal(size=4))}, k))
    for x, k in data:
        m.learn_one(x, k)
    tables = calibration.predict_tables(m._learner)
    assert (tables is not None) == dense
    for x, _ in data[:10]:
        p = m.predict_proba_one(x)
        assert max(p, key=p.get) == m.predict_one(x)
        if not dense:   # one-hot on the prediction
            assert sorted(p.values()) == [0.0, 0.0, 1.0]


@pytest.mark.parametrize("window,every,memory", [(128, 32, 0), (16, 40, 0), (64, 7, 500.0)])
def test_the_stacked_window_rows_fit_as_the_window_items_to_the_bit(window, every, memory):
    """The window's class rows stacked as they arrive (a ring, restarted at a new class count or
    an item of another kind) give every fit the arrays stacking the window's items gives: the
    same beta, pool and window arrays as a fit that stacks the items (``ROWS_MAX = 0``), row by
    row and in tables, across the ring's wrap, class growth and chains in the window."""
    rng = np.random.default_rng(12)
    a = calibration.Temperature(window=window, every=every, memory=memory)
    b = calibration.Temperature(window=window, every=every, memory=memory)
    b.ROWS_MAX = 0   # never stacked as they arrive
    i = 0
    for size in [1, 3, 31, 32, 33, 1, 0, 5, 97, 200, 2, 64, 129, 17] * 3:
        K = 4 if i < 300 else (6 if i < 900 else 7)   # the classes grow mid-stream
        S = rng.normal(size=(size, K)) * 4
        ys = rng.integers(0, K, size=size)
        if size % 2:
            for s, y in zip(S, ys):
                a.observe_class(s, y)
                b.observe_class(s, y)
        else:
            a.observe_classes(S, ys)
            b.observe_classes(S, ys)
        i += size
        if i % 5 == 0 and i < 1500:   # a chain among the class rows (none at the end: stacked again)
            ch = (rng.normal(size=(3, 2)), rng.normal(size=(2, 2)), rng.normal(size=(2, 2)), True, [0, 1, 1])
            a.observe_chain(*ch)
            b.observe_chain(*ch)
        assert a.state() == b.state() and a.beta.hex() == b.beta.hex()
        ga, gb = a._groups()[0], b._groups()[0]
        assert len(ga) == len(gb)
        for x, y in zip(ga, gb):
            assert x[0] == y[0] and all(np.array_equal(u, v) and u.dtype == v.dtype for u, v in zip(x[1:], y[1:]))
    assert a.n_fits > 10 and a._stacked(7) is not None and b._stacked(7) is None
