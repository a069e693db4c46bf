"""The chain losses (normalized per sentence, per token, per-tag weighted costs) against brute-force
enumeration on small chains, and their use by the learners."""
import numpy as np
import pytest

import streamssvm as ss

from streamssvm._kernels import structops as so
from streamssvm._kernels.bundles import model
from streamssvm.structures import Chain
from streamssvm.structures.chain import CHAIN_LOSSES, tag_weight_cost
from test_structures import dense_score, random_tokens


def _instance(seed, L, K, cost):
    rng = np.random.default_rng(seed)
    Kc, d = K + 1, 5
    E, T, B = rng.normal(size=(d, Kc)), rng.normal(size=(Kc, Kc)), rng.normal(size=(2, Kc))
    tp, fi, fv = random_tokens(rng, L, d)
    ytrue = rng.integers(0, K, size=L).astype(np.int32)
    C = 1.0 - np.eye(Kc)
    if cost == "tags":   # per-tag weights: missing true tag a costs w[a]
        w = rng.uniform(0.5, 4.0, size=K)
        f = tag_weight_cost({k: w[k] for k in range(K)})
        C[:K, :K] = [[f(a, b) for b in range(K)] for a in range(K)]
    return E, T, B, C, tp, fi, fv, ytrue, d, Kc


@pytest.mark.parametrize("loss", ["normalized", "hamming"])
@pytest.mark.parametrize("cost", ["01", "tags"])
@pytest.mark.parametrize("L,K", [(1, 3), (3, 3), (4, 2), (5, 3)])
def test_chain_losses_match_brute_force(loss, cost, L, K):
    st = Chain(loss=loss)
    Ki = st.loss_code
    E, T, B, C, tp, fi, fv, ytrue, d, Kc = _instance(L * 31 + K + (cost == "tags"), L, K, cost)
    scale = 0.7
    S = np.zeros((L, Kc))
    so.emission_scores(E, scale, tp, fi, fv, L, K, S)
    V, bp, ybuf = np.zeros((L, Kc)), np.zeros((L, Kc), np.int32), np.zeros(Kc, np.int32)
    Z = 1.0 if loss == "hamming" else float(L)
    labs = st.all_labelings(L, K)
    score = {tuple(y): dense_score(E, T, B, scale, st.joint_feature(d, K, tp, fi, fv, y)) for y in labs}
    loss_of = {tuple(y): sum(C[a, b] for a, b in zip(ytrue, y)) / Z for y in labs}
    for y in labs:   # the loss itself: kernel, reference, hand-computed
        assert so.labeling_loss(so.CHAIN, y, ytrue, L, C, L, K, Ki, ybuf) == pytest.approx(loss_of[tuple(y)], abs=1e-12)
        assert st.brute_loss(ytrue, y, C, Ki) == pytest.approx(loss_of[tuple(y)], abs=1e-12)
    # loss-augmented Viterbi (margin rescaling)
    for lam in (1.0, 2.5):
        out = np.zeros(L, np.int32)
        val = so.decode(model(st, K, Kc, C), (E, T, B), S, scale, L, ytrue, L, lam, Ki,
                        (S, V, bp, ybuf, out, np.zeros(Kc + 1), np.zeros((1, 1, 1))), out)
        assert val == pytest.approx(max(score[k] + lam * loss_of[k] for k in score), abs=1e-9)
    # the statistic's linear loss equals the loss of a labeling's statistic
    y = labs[len(labs) // 2]
    stat = np.zeros(st.stat_size(L, Kc))
    so.labeling_stat(so.CHAIN, y, L, Kc, stat, 1.0)
    assert so.stat_loss_lin(so.CHAIN, stat, ytrue, L, C, L, K, Kc, Ki, ybuf) == pytest.approx(loss_of[tuple(y)])
    # loss range
    lo, hi = st.loss_range(ytrue, L, K, Ki, C)
    pos = [v for v in loss_of.values() if v > 0]
    if cost == "01" and K > 1:
        assert lo == pytest.approx(min(pos)) and hi == pytest.approx(max(loss_of.values()))
    if cost == "01":   # slack rescaling (Hamming costs only): exact oracle and its levels
        ts = score[tuple(ytrue)]
        best = max(loss_of[k] * (1.0 + score[k] - ts) for k in score)
        V3 = np.zeros((L + 1, Kc, L + 1))
        out = np.zeros(L, np.int32)
        scratch = (S, V, bp, ybuf, out, np.zeros(Kc + 1), V3)
        h = so.slack_oracle(model(st, K, Kc, C), (E, T, B), S, scale, L, ytrue, L, Ki, scratch, out)
        assert h == pytest.approx(max(best, 0.0), abs=1e-9)
        hs, gs = np.zeros(L + 1), np.zeros(L + 1)
        n = so.slack_levels(model(st, K, Kc, C), (E, T, B), S, scale, L, ytrue, L, Ki, scratch, hs, gs)
        for m in range(n):
            level = [k for k in score if loss_of[k] == pytest.approx(gs[m])]
            assert level and hs[m] == pytest.approx(1.0 + max(score[k] for k in level) - ts, abs=1e-9)


def test_loss_names_and_tag_weight_validation():
    assert set(CHAIN_LOSSES) == {"normalized", "hamming"}
    with pytest.raises(ValueError, match="loss must be one of"):
        Chain(loss="token")
    with pytest.raises(ValueError, match="non-negative"):
        tag_weight_cost({"A": -1.0})
    c = Chain(cost={"PER": 2.0}).cost_matrix(3, ["O", "PER", "LOC"])
    np.testing.assert_array_equal(c[:3, :3], [[0, 1, 1], [2, 0, 2], [1, 1, 0]])


def _words(n, seed=0):
    rng = np.random.default_rng(seed)
    vocab = {"the": "DET", "a": "DET", "dog": "NOUN", "cat": "NOUN", "runs": "VERB", "sleeps": "VERB"}
    out = []
    for _ in range(n):
        L = int(rng.integers(2, 9))
        ws = [str(w) for w in rng.choice(list(vocab), size=L)]
        out.append(([{"w=" + w: 1.0, "b": 1.0} for w in ws], [vocab[w] for w in ws]))
    return out


@pytest.mark.parametrize("loss", ["normalized", "hamming"])
def test_estimator_losses_learn_and_default_seed_is_deterministic(loss, tmp_path):
    import streamssvm as ss
    data = _words(80)

    def run():
        m = ss.SequenceTagger(loss=loss)   # default learner: BCFW(seed=0)
        for x, y in data:
            m.learn_one(x, y)
        m.refine(passes=2)
        return m
    a, b = run(), run()
    assert a.learner.seed == 0
    np.testing.assert_array_equal(a._learner.W.E, b._learner.W.E)   # default seed=0: same run
    assert a.predict_many([x for x, _ in data[:10]]) == [y for _, y in data[:10]]
    # the per-token loss weighs a sentence by its length: P(0) = mean max loss = mean L
    z = ss.SequenceTagger(loss=loss, learner=ss.learners.SGD(lam=1.0, calibrate=0, t0=1e12))
    for x, y in data:
        z.learn_one(x, y)
    expect = np.mean([len(y) for _, y in data]) if loss == "hamming" else 1.0
    assert z.certificate().primal == pytest.approx(expect, rel=1e-6)
    a.save(tmp_path / "m.ssvm")
    assert ss.load(tmp_path / "m.ssvm").loss == a.loss == loss


def test_cli_run_test_reports_held_out_metrics(tmp_path):
    import json

    from streamssvm.cli import main
    tr, te = tmp_path / "tr.conll", tmp_path / "te.conll"
    sents = [("the DT", "dog NN", "runs VBZ"), ("a DT", "cat NN", "sleeps VBZ")]
    tr.write_text("".join("\n".join(s) + "\n\n" for s in sents * 15))
    te.write_text("".join("\n".join(s) + "\n\n" for s in sents[::-1] * 2))
    metrics = tmp_path / "m.jsonl"
    assert main(["run", "--source", f"file://{tr}", "--task", "sequence", "--test", f"file://{te}",
                 "--snapshot-every", "10", "--metrics", str(metrics), "--no-progress", "--json"]) == 0
    recs = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(recs) >= 3 and all("test" in r for r in recs)
    assert recs[-1]["test"]["token_accuracy"] == 1.0


def test_default_loss_is_per_token_hamming_except_gdmm(tmp_path):
    """The default loss is per-token Hamming (measured better for tagging on Brown); GDMM, whose
    steps are written for the normalized loss, keeps it by default and refuses "hamming"; the
    name in use is saved, so a later change of the default does not change a saved model."""
    import streamssvm as ss
    t = ss.SequenceTagger()
    assert t._make_structure().loss == "hamming"
    g = ss.SequenceTagger(learner=ss.learners.GDMM(lam=0.1))
    assert g._make_structure().loss == "normalized"
    with pytest.raises(ValueError, match="GDMM optimizes the Hamming loss normalized"):
        ss.SequenceTagger(learner=ss.learners.GDMM(), loss="hamming")
    t.learn_one([{"a": 1}, {"b": 1}], ["x", "y"])
    t.save(tmp_path / "t.ssvm")
    assert ss.SequenceTagger.load(tmp_path / "t.ssvm").loss == "hamming"


def test_models_saved_with_the_old_default_keep_the_normalized_loss():
    """Files written before the default loss became per-token stored ``loss: None`` for the
    default of their time (normalized per sentence): loading one must not switch its loss."""
    params = {"loss": None, "labels": None}
    assert ss.SequenceTagger._params_from_state(dict(params))["loss"] == "normalized"
    params["loss"] = "hamming"
    assert ss.SequenceTagger._params_from_state(dict(params))["loss"] == "hamming"
