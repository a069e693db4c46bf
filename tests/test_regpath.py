"""The eps-approximate regularization path (Osokin et al., Minding the gaps for block Frank-Wolfe
optimization of structured SVMs, ICML 2016, Sec. 4): Proposition 1 (the dual rescaling keeps w
and moves the gap by (1 - rho) Delta), the first breakpoint against the paper's bound computed
by enumeration, every breakpoint and the lambdas between them re-certified, the first linear
piece, the end-of-path condition, and the path against an independent brute-force grid."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import streamssvm as ss
from streamssvm import regpath as RP
from streamssvm.datasets import load_ocr

EPS = 0.1
TOL = 1e-9


def _multiclass(n=40, d=4, K=3, seed=0, learner=None):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(K, d)) * 4.0
    m = ss.MulticlassSSVM(learner=learner or ss.learners.BCFW(lam=0.05, replay=2, seed=0))
    data = []
    for i in range(n):
        y = int(rng.integers(K))
        x = {f"f{k}": float(v) for k, v in enumerate(centers[y] + rng.normal(size=d))}
        data.append((x, y))
        m.learn_one(x, y)
    return m, data


def _chain(n=12, learner=None):
    X, Y, _, _ = load_ocr("small")
    m = ss.SequenceTagger(loss="normalized", learner=learner or ss.learners.BCFW(lam=0.05, replay=2, seed=0))
    for x, y in zip(X[:n], Y[:n]):
        m.learn_one(x, list(y))
    return m, (X[n:n + 10], [list(y) for y in Y[n:n + 10]])


def _multilabel(n=30, seed=1, leaves="abc", **kw):
    rng = np.random.default_rng(seed)
    m = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=0.05, replay=2, seed=0), **kw)
    for i in range(n):
        x = {f"f{k}": float(v) for k, v in enumerate(rng.normal(size=4))}
        y = {lab: bool(x[f"f{k}"] > 0.3) for k, lab in enumerate(leaves)}
        m.learn_one(x, y)
    return m


def _iterate_cert(est):
    lr = copy.deepcopy(est).bound_learner
    lr.averaging = False
    lr._avg_restart()
    return lr, lr.certificate()


@pytest.fixture(scope="module")
def chain_path():
    m, val = _chain()
    return m, val, RP.regularization_path(m, eps=EPS, kappa=0.7, lam_min=1e-6, data=val)


@pytest.fixture(scope="module")
def mc_path():
    m, data = _multiclass()
    return m, data, m.regularization_path(eps=EPS, kappa=0.7, lam_min=1e-6)


# ---------------------------------------------------------------- Proposition 1
@pytest.mark.parametrize("make", [
    lambda: _multiclass()[0],
    lambda: _multiclass(learner=ss.learners.BCFW(lam=0.05, replay=2, step="pairwise", cache=True, seed=0))[0],
    lambda: _multiclass(learner=ss.learners.BCFW(lam=0.05, replay=2, rescaling="slack", seed=0))[0],
    lambda: _chain()[0],
    lambda: _chain(learner=ss.learners.BCFW(lam=0.05, replay=2, step="away", seed=0))[0],
    _multilabel,
    lambda: _multilabel(pairwise=True),
    lambda: _multilabel(leaves="bce", hierarchy={"a": None, "b": "a", "c": "a", "d": None, "e": "d"}),
], ids=["multiclass", "multiclass-pairwise-cache", "multiclass-slack", "chain", "chain-away", "multilabel",
        "multilabel-pairwise", "hierarchy"])
def test_set_lam_keeps_w_and_moves_the_gap_by_one_minus_rho_delta(make):
    lr, c0 = _iterate_cert(make())
    scale0 = lr._scale()[0]
    w0 = (lr.W.E * scale0).copy(), (lr.W.T * scale0).copy()
    rho = 0.37
    delta = lr.set_lam(0.05 * rho, keep="weights")
    c1 = lr.certificate()
    scale1 = lr._scale()[0]
    np.testing.assert_allclose(lr.W.E * scale1, w0[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lr.W.T * scale1, w0[1], rtol=1e-10, atol=1e-12)
    assert c1.raw_gap == pytest.approx(c0.raw_gap + (1 - rho) * delta, rel=1e-8, abs=1e-10)
    # Delta = l - lam ||w||^2 (the certificate's numbers at the old lambda)
    assert delta == pytest.approx(c0.dual_loss - 2 * c0.regularizer, rel=1e-8, abs=1e-10)
    # the dual point is feasible and consistent: the weight sums rebuilt from the blocks agree
    E = lr.W.E.copy()
    lr.refresh_gaps()
    np.testing.assert_allclose(lr.W.E, E, rtol=1e-9, atol=1e-12)


def test_set_lam_pool_weights_stay_a_distribution():
    m, _ = _multiclass(learner=ss.learners.BCFW(lam=0.05, replay=3, step="pairwise", cache=True, seed=0))
    lr, _ = _iterate_cert(m)
    lr.set_lam(0.01, keep="weights")
    st = lr.store
    for j in st.slots():
        b = st.block(int(j))
        if b["exact_alpha"]:
            assert b["alpha"].sum() == pytest.approx(1.0)
            assert (b["alpha"] >= 0).all()


def test_set_lam_refuses_a_larger_lambda_with_keep_weights():
    lr, _ = _iterate_cert(_multiclass()[0])
    with pytest.raises(ValueError):
        lr.set_lam(1.0, keep="weights")


# ---------------------------------------------------------------- the path
def _check_piece_certificates(path, lams):
    for lam in lams:
        c = path.model_at(lam).certificate()
        assert c.lam == pytest.approx(lam)
        assert c.raw_gap <= EPS + TOL, (lam, c.raw_gap)


def test_every_breakpoint_and_the_lambdas_between_are_eps_approximate(chain_path):
    _, _, path = chain_path
    assert path.status == "end"
    bp = path.breakpoints
    assert (np.diff(bp) < 0).all()
    assert (path.gaps <= 0.7 * EPS + TOL).all()
    lams = list(bp)
    for j in range(len(bp)):
        lo = path.lower[j]
        if lo > 0:
            lams += [lo, np.sqrt(lo * bp[j]), 0.5 * (lo + bp[j])]
    _check_piece_certificates(path, lams)


def test_the_lower_end_of_each_piece_has_gap_eps(chain_path):
    """rho is the largest step (Eq. 13): w^j's gap at lambda_{j+1} is eps exactly."""
    _, _, path = chain_path
    j = len(path) // 2
    c = path.model_at(path.lower[j] * (1 + 1e-12)).certificate()
    assert c.raw_gap == pytest.approx(EPS, rel=1e-6)


def test_first_linear_piece(chain_path, mc_path):
    for _, _, path in (chain_path, mc_path):
        lam0 = path.breakpoints[0]
        _check_piece_certificates(path, [lam0, 1.5 * lam0, 10 * lam0, 1e6 * lam0])
        # w = (lam0 / lam) w^0: the weights scale, the dual point stays
        a, b = path.model_at(lam0).bound_learner, path.model_at(4 * lam0).bound_learner
        np.testing.assert_allclose(b.W.E * b._scale()[0] * 4, a.W.E * a._scale()[0], rtol=1e-10, atol=1e-14)


def test_end_of_path_covers_every_smaller_lambda(chain_path, mc_path):
    for _, _, path in (chain_path, mc_path):
        assert path.status == "end" and path.lower[-1] == 0.0
        last = path.breakpoints[-1]
        _check_piece_certificates(path, [0.9 * last, 1e-3 * last, 1e-9 * last])


def test_end_of_path_condition_is_not_the_printed_inverted_test():
    """Algorithm 7 as printed continues when Delta <= tau and stops otherwise; the text (rho <= 0
    is the end) and the certificates need the reverse: stopping at Delta > tau would claim
    lambdas whose gap exceeds eps."""
    m, _ = _multiclass()
    path = m.regularization_path(eps=EPS, lam_min=1e-8)
    lr = copy.deepcopy(path._base).bound_learner
    path._snapshots[0].install(lr)
    delta = float(np.sum(lr.block_deltas())) / lr.n_blocks
    g0 = lr.certificate().raw_gap
    assert delta > EPS - g0        # the first breakpoint is not the end ...
    assert len(path) > 1           # ... and the path went on
    # the printed test would stop here and claim w^0 for every smaller lambda: brute force says no
    lr.set_lam(path.breakpoints[0] / 100, keep="weights")
    assert lr.certificate().raw_gap > EPS


def test_first_breakpoint_is_at_most_the_papers_lambda_inf(mc_path):
    """Algorithm 6's lam_inf = (||psi~||^2 + (1/n) sum_i theta_i) / (kappa eps), theta_i by
    enumeration over the labels (multiclass: psi_i(y) = x_i (e_{y_i} - e_y))."""
    m, data, path = mc_path
    snap = path._snapshots[0]
    n = path.n_blocks
    lr = path._base.bound_learner
    K = lr.n_labels
    U = snap.U[0][:, :K]
    assert not snap.U[1].any() and not snap.U[2].any()
    psi = U / n
    vocab = m._features.vocab
    theta = []
    for x, y in data:
        v = np.zeros(U.shape[0])
        v[0] = 1.0                       # the bias column
        for k, val in x.items():
            v[vocab[k]] = val
        s = v @ psi
        theta.append(np.max(s - s[m._labels.index[y]]))
    lam_inf = (np.sum(psi ** 2) + np.mean(theta)) / (0.7 * EPS)
    assert path.breakpoints[0] <= lam_inf * (1 + 1e-9)
    assert path.gaps[0] <= 0.7 * EPS + TOL


def test_path_against_an_independent_brute_force_grid(chain_path, mc_path):
    """P_lam(w_path(lam)) - P*_lam <= eps, with P*_lam bounded below by the dual of a fresh model
    solved at lam from scratch (no path code involved)."""
    X, Y, _, _ = load_ocr("small")
    for kind, (m, data, path) in (("chain", chain_path), ("mc", mc_path)):
        lo = max(path.breakpoints[-1] / 3, 2e-3)
        for lam in np.geomspace(lo, path.breakpoints[0] * 3, 5):
            if kind == "chain":
                ref = ss.SequenceTagger(loss="normalized", learner=ss.learners.BCFW(lam=lam, replay=2, seed=1))
                for x, y in zip(X[:12], Y[:12]):
                    ref.learn_one(x, list(y))
            else:
                ref = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=lam, replay=2, seed=1))
                for x, y in data:
                    ref.learn_one(x, y)
            c_ref = ref.refine(passes=300, tol=1e-3, certify=True)
            c = path.model_at(lam).certificate()
            assert c.primal - c_ref.dual <= EPS + TOL, (kind, lam, c.primal, c_ref.dual)


def test_model_at_is_a_working_estimator_and_the_source_is_unchanged(chain_path):
    m, val, path = chain_path
    before = m.certificate()
    lam = float(np.sqrt(path.breakpoints[0] * path.breakpoints[-1]))
    est = path.model_at(lam)
    assert est.bound_learner.lam == pytest.approx(lam) and est.learner.lam == pytest.approx(lam)
    assert len(est.predict_one(val[0][0])) == len(val[0][0])
    est.refine(passes=1)
    assert m.certificate().gap == pytest.approx(before.gap)
    assert m.bound_learner.lam == 0.05


def test_validation_scores_and_best(chain_path):
    _, _, path = chain_path
    assert len(path.scores) == len(path)
    lam, sc = path.best("accuracy")
    assert sc["accuracy"] == max(s["accuracy"] for s in path.scores)
    assert lam in set(path.breakpoints)
    assert (np.diff(path.passes) > 0).all() and (np.diff(path.seconds) >= 0).all()


def test_heuristic_path_reports_true_gaps():
    m, _ = _chain()
    path = RP.regularization_path(m, eps=EPS, kappa=0.7, lam_min=1e-2, exact=False, certify=True)
    assert len(path) > 3
    assert (path.gaps <= 0.7 * EPS + TOL).all()
    assert path.true_gaps.shape == path.gaps.shape and (path.true_gaps >= 0).all()


def test_grid_search_certifies_every_lambda_warm_and_cold():
    m, _ = _multiclass()
    lams = [2.0 ** k for k in range(2, -6, -1)]
    for warm in (True, False):
        gs = m.grid_search(lams, warm_start=warm, eps=EPS)
        assert gs.status == "done" and list(gs.lams) == sorted(lams, reverse=True)
        assert (gs.gaps <= EPS + TOL).all()
        assert (np.diff(gs.passes) >= 0).all()


def test_path_refuses_other_learners_and_empty_models():
    with pytest.raises(RuntimeError):
        ss.MulticlassSSVM().regularization_path()
    m = ss.MulticlassSSVM(learner=ss.learners.SGD())
    m.learn_one({"a": 1.0}, 0)
    m.learn_one({"a": -1.0}, 1)
    with pytest.raises(TypeError):
        m.regularization_path()


def test_cli_path_json_plot_and_saved_model(tmp_path, capsys):
    import json

    from streamssvm.cli.parser import main
    tr, te = tmp_path / "tr.jsonl", tmp_path / "te.jsonl"
    assert main(["export", "ocr-words", str(tr), "--limit", "15"]) == 0
    assert main(["export", "ocr-words", str(te), "--test", "--limit", "8"]) == 0
    capsys.readouterr()
    args = ["path", "--source", f"file://{tr}", "--task", "sequence", "--loss", "normalized", "--test", f"file://{te}",
            "--eps", "0.1", "--kappa", "0.7", "--save", str(tmp_path / "m.ssvm"), "--json"]
    try:
        import matplotlib  # noqa: F401
        args += ["--plot", str(tmp_path / "p.png")]
    except ImportError:
        pass
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["examples"] == 15 and out["status"] == "end"
    assert max(out["gaps"]) <= 0.07 + TOL
    lam = out["best"]["lam"]
    assert lam in out["breakpoints"]
    m = ss.load(str(tmp_path / "m.ssvm"))
    c = m.certificate()
    assert c.lam == pytest.approx(lam) and c.raw_gap <= EPS + TOL
    with pytest.raises(SystemExit) as e:   # argparse refuses a setting outside its Param row
        main(["path", "--source", f"file://{tr}", "--task", "sequence", "--kappa", "1.5"])
    assert e.value.code == 2


def test_model_at_restores_the_pools_of_pairwise_steps():
    """A pooled learner's model_at has each block's corner weights consistent with its statistic
    (multiclass: the statistic is the distribution over classes), so pairwise / away steps can go
    on from it."""
    m, _ = _multiclass(learner=ss.learners.BCFW(lam=0.05, replay=2, step="pairwise", cache=True, seed=0))
    path = m.regularization_path(eps=EPS, lam_min=1e-6)
    for lam in (path.breakpoints[1], np.sqrt(path.breakpoints[2] * path.breakpoints[3])):
        est = path.model_at(lam)
        st = est.bound_learner.store
        K = est.bound_learner.n_labels
        for j in st.slots():
            b = st.block(int(j))
            assert b["exact_alpha"]
            dist = np.zeros(st.Kc)
            np.add.at(dist, b["pool"][:, 0], b["alpha"])
            np.testing.assert_allclose(b["stat"][:K], dist[:K], atol=1e-10)
        assert est.certificate().raw_gap <= EPS + TOL
        est.refine(passes=2)
        assert est.certificate().raw_gap >= -1e-9


@pytest.mark.parametrize("make", [lambda: _multiclass()[0], lambda: _chain()[0],
                                  lambda: _chain(learner=ss.learners.BCFW(lam=0.05, step="pairwise", cache=True))[0],
                                  lambda: _multiclass(learner=ss.learners.BCFW(lam=0.05, rescaling="slack"))[0]],
                         ids=["multiclass", "chain", "chain-pairwise-cache", "multiclass-slack"])
def test_start_at_max_loss_puts_every_block_on_a_largest_loss(make):
    """Algorithm 6's dual point: every block on argmax_y Delta_i(y) (0/1 and normalized Hamming:
    loss 1), so l = mean max loss and the gap vanishes as lambda -> inf (g(0) = 0, which the
    first linear piece relies on)."""
    lr, _ = _iterate_cert(make())
    lr.start_at_max_loss()
    lr.set_lam(1e9, keep="dual")
    c = lr.certificate()
    assert c.dual_loss == pytest.approx(1.0, abs=1e-12)
    assert c.raw_gap <= 1e-6


def test_keep_models_false_keeps_the_numbers_only():
    m, _ = _multiclass()
    a = m.regularization_path(eps=EPS, lam_min=1e-6)
    b = m.regularization_path(eps=EPS, lam_min=1e-6, keep_models=False)
    np.testing.assert_allclose(a.breakpoints, b.breakpoints)
    assert b.snapshot_bytes == 0 < a.snapshot_bytes
    with pytest.raises(RuntimeError):
        b.model_at(b.breakpoints[0])
