"""BCFW learner and certificates: dual consistency and gap properties against brute force."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels import structops as so


def brute_primal(est):
    """P(w) by enumerating every labeling of every held block (dense feature maps)."""
    lr = est._learner
    st = lr.store
    structure = lr.structure
    K = lr._K
    d = est._features.dim
    E, T, B, scale = lr.predict_weights()  # the weights the certificate certifies
    w = [scale * E[:d, :K], scale * T[:K, :K], scale * B[:, :K]]
    reg = 0.5 * lr.effective_lam() * sum(float(np.sum(a * a)) for a in w)
    hinge = 0.0
    for slot in st.slots():
        b = st.block(slot)
        L = b["L"]
        if structure.kind in (so.MULTILABEL, so.MLPAIR):
            dense_true = np.zeros(lr.W.Kc, np.int32)
            dense_true[b["ytrue"]] = 1
            phi_true = structure.joint_feature(d, K, b["tok_ptr"], b["fidx"], b["fval"], dense_true)
        else:
            phi_true = structure.joint_feature(d, K, b["tok_ptr"], b["fidx"], b["fval"], b["ytrue"])
        s_true = sum(float(np.sum(a * p)) for a, p in zip(w, phi_true))
        best = 0.0
        for y in structure.all_labelings(L, K):
            if structure.kind in (so.MULTILABEL, so.MLPAIR):
                y = np.concatenate([y, np.zeros(lr.W.Kc - K, np.int32)])
            phi = structure.joint_feature(d, K, b["tok_ptr"], b["fidx"], b["fval"], y)
            sc = sum(float(np.sum(a * p)) for a, p in zip(w, phi))
            loss = structure.brute_loss(b["ytrue"], y[:K] if structure.kind in (so.MULTILABEL, so.MLPAIR) else y,
                                        lr._C, b["Ki"])
            best = max(best, loss + sc - s_true)
        hinge += best
    return reg + hinge / st.n


def assert_valid_gap(est, c, passes=300):
    """``c`` (a certificate of ``est`` taken just now) is a valid bound, checked on its unclamped
    gap: raw_gap >= P(w) - P(w_long) with w_long from a long run on the same held examples
    (P(w_long) >= min P, so this is implied by gap >= P(w) - min P; it fails for a gap that is
    too small, unlike ``gap >= 0`` which holds by construction)."""
    import copy
    assert np.isfinite(c.raw_gap)
    long = copy.deepcopy(est)
    long.refine(passes=passes)
    p_long = long.certificate().primal
    assert c.raw_gap >= c.primal - p_long - 1e-9
    return p_long


def small_chain_data(seed, n=25, K=3, d=6):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(K, d)) * 1.5
    trans = rng.dirichlet(np.ones(K) * 0.5, size=K)
    X, Y = [], []
    for _ in range(n):
        L = int(rng.integers(1, 5))
        y = [int(rng.integers(K))]
        for _t in range(L - 1):
            y.append(int(rng.choice(K, p=trans[y[-1]])))
        x = centers[y] + rng.normal(size=(L, d)) * 1.2
        X.append(x)
        Y.append(y)
    return X, Y


@pytest.mark.parametrize("step", ["fw", "pairwise", "away"])
@pytest.mark.parametrize("sampling", ["uniform", "gap"])
@pytest.mark.parametrize("cache", [False, True])
def test_chain_certificate_is_valid_and_converges(step, sampling, cache):
    X, Y = small_chain_data(1)
    est = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, replay=1, step=step, sampling=sampling,
                                                     cache=cache, cache_size=8, seed=3))
    for x, y in zip(X, Y):
        est.learn_one(x, y)
    c0 = est.certificate()
    # the certificate's primal is the true objective
    assert c0.primal == pytest.approx(brute_primal(est), rel=1e-9, abs=1e-12)
    assert_valid_gap(est, c0)
    # the block gaps sum to the gap of the current iterate
    assert c0.extra.get("iterate_gap", c0.gap) == pytest.approx(c0.block_gap_sum, rel=1e-6, abs=1e-9)
    est.refine(passes=60)
    c1 = est.certificate()
    assert c1.gap < c0.gap
    assert c1.primal == pytest.approx(brute_primal(est), rel=1e-9, abs=1e-12)
    assert est._learner.counters[6 - 1] == 0  # no oracle sanity failures (C_SANITY)


def _long_run_optimum(make, X, Y, lam):
    est = make(lam)
    for x, y in zip(X, Y):
        est.learn_one(x, y)
    est.refine(passes=2000, tol=1e-7)
    c = est.certificate()
    assert c.gap < 1e-4  # w* is near-optimal: P(w*) - min P <= 1e-4
    return c.primal


@pytest.mark.parametrize("lam", [0.01, 0.1])
def test_gap_bounds_suboptimality_on_real_ocr(lam):
    """gap(w) >= P(w) - P(w*) with w* from a long run, on 12 real OCR words."""
    X_tr, y_tr, _, _ = ss.datasets.load_ocr("small")
    X, Y = X_tr[:12], [list(y) for y in y_tr[:12]]

    def make(lam_):
        # the OCR papers' per-word normalized loss (P(0) = 1), the scale of the tolerances below
        return ss.SequenceTagger(learner=ss.learners.BCFW(lam=lam_, replay=0, step="away", averaging=False, seed=0),
                                 loss="normalized")

    p_star = _long_run_optimum(make, X, Y, lam)
    est = ss.SequenceTagger(learner=ss.learners.BCFW(lam=lam, replay=0, sampling="uniform", seed=1), loss="normalized")
    gaps = []
    for x, y in zip(X, Y):
        est.learn_one(x, y)
    for _ in range(6):
        c = est.certificate()
        assert c.gap >= c.primal - p_star - 1e-9
        assert c.primal >= p_star - 1e-9
        assert c.dual <= p_star + 1e-9
        gaps.append(c.gap)
        est.refine(passes=3)
    assert gaps[-1] < gaps[0]


def test_pairwise_duals_reproduce_weights():
    """With exact active sets, sum_i sum_y alpha_i(y) psi_i(y) equals the learner's U."""
    X, Y = small_chain_data(7, n=15)
    est = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.1, replay=2, step="pairwise", cache_size=40, seed=0))
    for x, y in zip(X, Y):
        est.learn_one(x, y)
    est.refine(passes=10)
    lr = est._learner
    st = lr.store
    d, K = est._features.dim, lr._K
    U = [np.zeros((d, K)), np.zeros((K, K)), np.zeros((2, K))]
    for slot in st.slots():
        b = st.block(slot)
        assert b["exact_alpha"]
        assert b["alpha"].sum() == pytest.approx(1.0, abs=1e-9)
        assert np.all(b["alpha"] >= 0)
        phi_t = lr.structure.joint_feature(d, K, b["tok_ptr"], b["fidx"], b["fval"], b["ytrue"])
        m = np.zeros_like(b["stat"])
        for a, y in zip(b["alpha"], b["pool"]):
            phi = lr.structure.joint_feature(d, K, b["tok_ptr"], b["fidx"], b["fval"], y)
            for acc, p1, p2 in zip(U, phi_t, phi):
                acc += a * (p1 - p2)
            so.labeling_stat(lr._kind, y, b["L"], lr.W.Kc, m, a)
        np.testing.assert_allclose(m, b["stat"], atol=1e-9)
    np.testing.assert_allclose(lr.W.E[:d, :K], U[0], atol=1e-8)
    np.testing.assert_allclose(lr.W.T[:K, :K], U[1], atol=1e-8)
    np.testing.assert_allclose(lr.W.B[:, :K], U[2], atol=1e-8)


@pytest.mark.parametrize("est_cls", ["multiclass", "multilabel"])
def test_flat_structures_certificate(est_cls):
    rng = np.random.default_rng(0)
    W = rng.normal(size=(4, 5))
    if est_cls == "multiclass":
        est = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.05, replay=2, seed=0))
        for _ in range(40):
            x = rng.normal(size=5)
            est.learn_one(x, int(np.argmax(W @ x + rng.normal(size=4))))
    else:
        est = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=0.05, replay=2, seed=0))
        for _ in range(40):
            x = rng.normal(size=5)
            s = W @ x + rng.normal(size=4)
            est.learn_one(x, {f"l{k}": bool(s[k] > 0) for k in range(4)})
    c0 = est.certificate()
    assert c0.primal == pytest.approx(brute_primal(est), rel=1e-9)
    est.refine(passes=100)
    c1 = est.certificate()
    assert 0 <= c1.gap < c0.gap
    assert c1.gap < 0.1 * c0.gap
    assert c1.primal == pytest.approx(brute_primal(est), rel=1e-9)


def test_eviction_fifo_keeps_dual_consistent():
    X, Y = small_chain_data(3, n=40)
    est = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.1, replay=2, window=10, seed=0))
    for x, y in zip(X, Y):
        est.learn_one(x, y)
    lr = est._learner
    assert lr.store.n == 10
    assert lr.store.evicted == 30
    U_before = lr.W.E.copy()
    c = est.certificate()  # rebuilds U from the held blocks
    np.testing.assert_allclose(lr.W.E, U_before, atol=1e-8)
    assert c.n_blocks == 10
    assert c.primal == pytest.approx(brute_primal(est), rel=1e-9)


def test_reservoir_and_bytes_bound():
    X, Y = small_chain_data(4, n=60)
    est = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.1, window=15, eviction="reservoir", seed=0))
    for x, y in zip(X, Y):
        est.learn_one(x, y)
    assert est._learner.store.n == 15
    assert est._learner.store.seen == 60
    est2 = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.1, window=None, max_bytes=4096, seed=0))
    for x, y in zip(X, Y):
        est2.learn_one(x, y)
    assert est2._learner.store.nbytes() <= 4096
    assert 1 < est2._learner.store.n < 60
    assert_valid_gap(est2, est2.certificate())


def test_new_labels_mid_stream_grow_blocks():
    """Tags appearing late force a label-capacity relayout; the dual must survive it."""
    rng = np.random.default_rng(2)
    est = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.1, replay=2, step="pairwise", seed=0))
    for i in range(40):
        K = 2 + i // 5  # 2 .. 9 labels over time (capacity 4 -> grows twice)
        L = int(rng.integers(1, 4))
        y = [f"t{int(rng.integers(K))}" for _ in range(L)]
        x = [{f"w{v}": 1.0, "noise": float(rng.normal())} for v in y]
        est.learn_one(x, y)
    assert len(est._labels) > 4
    c = est.certificate()
    assert_valid_gap(est, c, passes=100)
    lr = est._learner
    # dual consistency after relayout: U rebuilt from blocks equals the incremental U
    est.refine(passes=2)
    E_inc = lr.W.E.copy()
    est.certificate()
    np.testing.assert_allclose(lr.W.E, E_inc, atol=1e-8)
    assert est.predict_one([{"wt7": 1.0}]) == ["t7"]


def test_learner_argument_errors():
    with pytest.raises(ValueError, match="lam"):
        ss.learners.BCFW(lam=0)
    with pytest.raises(ValueError, match="sampling"):
        ss.learners.BCFW(sampling="random")
    with pytest.raises(ValueError, match="step"):
        ss.learners.BCFW(step="newton")
    with pytest.raises(TypeError, match="replay"):
        ss.learners.BCFW(replay=1.5)
    with pytest.raises(TypeError, match="unexpected keyword"):
        ss.learners.BCFW(lamda=1.0)


def test_certificate_has_no_side_effects():
    X, Y = small_chain_data(5, n=20)
    a = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, replay=1, cache=True, seed=0))
    b = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.05, replay=1, cache=True, seed=0))
    for x, y in zip(X, Y):
        a.learn_one(x, y)
        b.learn_one(x, y)
        ma = a._learner.certificate()
        assert ma.raw_gap > -1e-9
    np.testing.assert_array_equal(a._learner.W.E, b._learner.W.E)
    assert a._learner.certificate().gap == pytest.approx(b.certificate().gap, rel=1e-9)


def test_matches_liblinear_crammer_singer_optimum():
    """An independent solver of the same objective: liblinear's Crammer-Singer SVM with
    C = 1 / (lam n) and a regularized unit bias feature minimizes P(w) / lam. Our certificate
    must bound our suboptimality against its solution, and both optima must agree."""
    from river import datasets
    from sklearn.svm import LinearSVC
    rows = list(datasets.ImageSegments())[:400]
    feats = sorted(rows[0][0])
    X = np.array([[x[f] for f in feats] for x, _ in rows])
    X = (X - X.mean(0)) / (X.std(0) + 1e-12)
    labels = sorted({y for _, y in rows})
    y = np.array([labels.index(v) for _, v in rows])
    lam, n = 0.01, len(y)
    est = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=lam, replay=0, step="pairwise", averaging=False, seed=0),
                            labels=list(range(len(labels))), scale=False)   # liblinear's objective: X as is
    est.learn_many(X, y)
    est.refine(passes=300, tol=1e-7)
    c = est.certificate()
    svc = LinearSVC(multi_class="crammer_singer", C=1.0 / (lam * n), fit_intercept=True, intercept_scaling=1.0,
                    tol=1e-8, max_iter=200000).fit(X, y)
    Wl = np.hstack([svc.intercept_[:, None], svc.coef_])  # rows: classes, cols: [bias, features]
    Xb = np.hstack([np.ones((n, 1)), X])
    S = Xb @ Wl.T
    hinge = np.mean(np.max(S + (1 - np.eye(len(labels)))[y] - S[np.arange(n), y][:, None], axis=1))
    p_lib = 0.5 * lam * np.sum(Wl ** 2) + hinge
    assert c.gap < 1e-5
    assert c.primal - p_lib <= c.gap + 1e-9      # weak duality against an independent point
    assert abs(c.primal - p_lib) < 1e-3 * p_lib  # both solvers found the same optimum


@pytest.mark.parametrize("lam", [1e-3, 1e-2, 1e-1])
@pytest.mark.parametrize("batch", [False, True])
def test_new_tag_first_sequence_is_learned_at_once(lam, batch):
    """A tag's first sequence counts as soon as the next tag arrives, at any lam: the flat block
    and the new one share the start/end weights, so one step each could leave the new block the
    last word ([a] -> x, then [b] -> y predicted y for [a] at lam = 1e-2)."""
    m = ss.SequenceTagger(learner=ss.learners.BCFW(lam=lam))
    X, Y = [[{"a": 1.0}], [{"b": 1.0}]], [["x"], ["y"]]
    if batch:
        m.learn_many(X, Y)
    else:
        for x, y in zip(X, Y):
            m.learn_one(x, y)
    assert m.predict_one([{"a": 1.0}]) == ["x"]
    assert m.predict_one([{"b": 1.0}]) == ["y"]


def _mc_stream(n, seed=0, k=4):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        y = int(rng.integers(k))
        out.append(({"f%d" % y: 1.0 + 0.3 * rng.normal(), "g": rng.normal(), "b": 1.0}, y))
    return out


def test_default_lambda_is_fixed_below_the_cap():
    """BCFW() (lam=None) and BCFW(lam=1e-3) take the same steps while n <= AUTO_LAM_N / AUTO_LAM
    (6,000): the small-data default is unchanged, bit for bit."""
    data = _mc_stream(600)
    a = ss.MulticlassSSVM(learner=ss.learners.BCFW(seed=0))
    b = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-3, seed=0))
    for m in (a, b):
        m.learn_many([x for x, _ in data], [y for _, y in data])
        m.refine(2)
    np.testing.assert_array_equal(a._learner.W.E, b._learner.W.E)
    assert a.certificate().gap == b.certificate().gap and a.certificate().lam == 1e-3


def test_default_lambda_follows_n_beyond_the_cap():
    """With n > AUTO_LAM_N / AUTO_LAM examples held, the default lambda is AUTO_LAM_N / n (lam * n
    stops growing: the regularizer does not outweigh more data): the stream and refine steps, the
    certificate and the predictions all use it, so the default learner converges to the optimum
    of the fixed-lambda problem at that lambda (before: lambda = 1e-3 whatever n)."""
    BCFW = ss.learners.BCFW
    n = int(BCFW.AUTO_LAM_N / BCFW.AUTO_LAM) + 600
    data = _mc_stream(n, seed=1)
    X, Y = [x for x, _ in data], [y for _, y in data]
    lam_n = BCFW.AUTO_LAM_N / n
    a = ss.MulticlassSSVM(learner=BCFW(seed=0))
    b = ss.MulticlassSSVM(learner=BCFW(lam=lam_n, seed=0))
    for m in (a, b):
        m.learn_many(X, Y)
        m.refine(300, tol=1e-4)
    ca, cb = a.certificate(), b.certificate()
    assert a._learner.effective_lam() == ca.lam == lam_n < BCFW.AUTO_LAM
    assert ca.gap <= 1e-4 and cb.gap <= 1e-4
    assert abs(ca.primal - cb.primal) <= ca.gap + cb.gap + 1e-9
    # a different problem from lambda = 1e-3 (its optimum is higher: P grows with lambda)
    c = ss.MulticlassSSVM(learner=BCFW(lam=BCFW.AUTO_LAM, seed=0))
    c.learn_many(X, Y)
    c.refine(300, tol=1e-4)
    assert c.certificate().dual > ca.primal


def _averaged_vs_brute_force(window, n=12):
    """(averaged E weights, brute-force weighted average of the iterates since the window's
    start) after each of ``n`` one-step learn calls, or None once averaging has no window."""
    rng = np.random.default_rng(0)
    from streamssvm.learners.bcfw import BCFW
    m = ss.MulticlassSSVM(labels=[0, 1, 2], learner=BCFW(lam=0.1, replay=0, seed=0, window=window, gap_every=None))
    its, out = [], []
    for i in range(n):
        c = int(rng.integers(0, 3))
        m.learn_one({"a": c + 0.1 * float(rng.normal()), "b": 1.0, f"n{i % 4}": 1.0}, c)
        lr = m._learner
        its.append((lr._tick, lr.W.E.copy()))
        A, t0 = lr.averaged_u(), lr._avg_t0
        if A is None:
            out.append(None)
            continue
        k = lr._tick - t0
        E = A[0].E
        bf = sum((t - t0) * np.pad(W, ((0, E.shape[0] - W.shape[0]), (0, E.shape[1] - W.shape[1])))
                 for t, W in its if t > t0) / (k * (k + 1) / 2)
        out.append((E, bf))
    return out


def test_averaged_iterate_matches_brute_force():
    """The lazily kept averaged iterate (U - Z / W_k) is the index-weighted average of the
    iterates, recomputed by brute force after every step (no eviction)."""
    for got in _averaged_vs_brute_force(None):
        assert got is not None and np.allclose(got[0], got[1], atol=1e-12)


def _block_u(lr, slot):
    """u_i of one held block (its part of the weight sums U), computed from its dual point."""
    from streamssvm._kernels import bcfw as K, bundles as KB
    from streamssvm.structures.base import Weights
    W = Weights(lr.W.E.shape[0], lr.W.Kc)
    K.block_u(KB.model(lr.structure, lr._K, lr.W.Kc, lr._C), W.bundle(), lr.store.arena(), int(slot), 1.0,
              lr._dbuf_for(lr.store.meta[slot, K.M_L]), lr._slack)
    return W


def _averaged_with_evictions_vs_brute_force(model, records, extra=2, seed=0):
    """After each record (learned, then ``extra`` single steps on random held blocks, every
    iterate observed): the largest difference between the learner's averaged weights and the
    explicit index-weighted average of the iterates U_t minus the evicted blocks' averaged parts
    (sum_t t u_{i,t} over the ticks each evicted block was held, u_i from its dual point)."""
    from streamssvm._kernels import bcfw as K
    from streamssvm.structures.base import Weights
    rng = np.random.default_rng(seed)
    hist, errs = [], []
    for x, y in records:
        model.learn_one(x, y)
        lr = model._learner
        for r in range(extra + 1):
            if r:
                s = lr.store.slots()
                lr._run(K.SAMPLE_GIVEN, 1, np.array([int(s[rng.integers(len(s))])], dtype=np.int64))
            if hist and hist[-1][0] == lr._tick:   # a record the reservoir did not keep: no step
                hist.pop()
            U = Weights.__new__(Weights)
            U.E, U.T, U.B = lr.W.E.copy(), lr.W.T.copy(), lr.W.B.copy()
            hist.append((lr._tick, U, {int(lr.store.birth[j]): _block_u(lr, j) for j in lr.store.slots()}))
        A, t0 = lr.averaged_u(), lr._avg_t0
        assert A is not None and t0 == 0   # one averaging window since the start, evictions or not
        k = lr._tick - t0
        held = {int(lr.store.birth[j]) for j in lr.store.slots()}
        err = 0.0
        for name in ("E", "T", "B"):
            got = getattr(A[0], name)

            def pad(W):
                return np.pad(W, [(0, g - w) for g, w in zip(got.shape, W.shape)])
            total = sum((t - t0) * pad(getattr(U, name)) for t, U, _ in hist if t > t0)
            gone = sum((t - t0) * pad(getattr(u, name)) for t, _, per in hist if t > t0
                       for b, u in per.items() if b not in held)
            err = max(err, float(np.abs(got - (total - gone) / (k * (k + 1) / 2)).max()))
        errs.append(err)
    return max(errs), model._learner.store.evicted


def _mc_records(n, seed=0):
    rng = np.random.default_rng(seed)
    for i in range(n):
        c = int(rng.integers(0, 3))
        yield {"a": c + 0.3 * float(rng.normal()), "b": 1.0, f"n{i % 5}": 1.0}, c


def _chain_records(n, seed=0, tags=6):
    """Sentences whose tag set grows (the label capacity too: blocks are relaid out)."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        L = int(rng.integers(2, 7))
        ys = [int(v) for v in rng.integers(0, min(tags, 2 + i // 3), size=L)]
        yield ([{f"w{y}": 1.0, "b": 1.0, f"n{(i + t) % 7}": 0.5 + float(rng.random())} for t, y in enumerate(ys)],
               [f"t{y}" for y in ys])


_EVICTING = {
    "multiclass-fifo": (lambda: ss.MulticlassSSVM(labels=[0, 1, 2], learner=ss.learners.BCFW(
        lam=0.1, replay=0, window=4, gap_every=None, evicted_average="keep")), _mc_records),
    "multiclass-slack": (lambda: ss.MulticlassSSVM(labels=[0, 1, 2], learner=ss.learners.BCFW(
        lam=0.1, replay=0, window=4, gap_every=None, evicted_average="keep", rescaling="slack")), _mc_records),
    "multiclass-reservoir-away": (lambda: ss.MulticlassSSVM(labels=[0, 1, 2], learner=ss.learners.BCFW(
        lam=0.1, replay=0, window=4, gap_every=None, evicted_average="keep", eviction="reservoir",
        step="away")), _mc_records),
    "chain-sparse-pairwise": (lambda: ss.SequenceTagger(learner=ss.learners.BCFW(
        lam=0.1, replay=0, window=4, gap_every=None, evicted_average="keep", step="pairwise")), _chain_records),
    "chain-dense": (lambda: ss.SequenceTagger(learner=ss.learners.BCFW(
        lam=0.1, replay=0, window=4, gap_every=None, evicted_average="keep", chain_stats="dense")), _chain_records),
    "chain-max-bytes": (lambda: ss.SequenceTagger(learner=ss.learners.BCFW(
        lam=0.1, replay=0, window=None, max_bytes=4096, gap_every=None, evicted_average="keep")), _chain_records),
}


@pytest.mark.parametrize("case", sorted(_EVICTING))
def test_averaging_survives_evictions(case):
    """Issue 26.12: a full store used to restart averaging at every eviction (the averaged
    iterate was then the current one). Each block now keeps the weighted sum of its own moves,
    subtracted from Z when it is evicted: the averaged weights are the average of the iterates
    minus the evicted blocks' averaged parts, after every step, on every store policy."""
    make, records = _EVICTING[case]
    err, evicted = _averaged_with_evictions_vs_brute_force(make(), records(16))
    assert evicted >= 4 and err < 1e-12


def _evicting_chain_model():
    return ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.1, replay=1, window=4, gap_every=None, seed=0,
                                                      evicted_average="keep"))


def test_averaging_accumulators_round_trip(tmp_path):
    """A saved model carries the blocks' averaging accumulators: the loaded one continues
    exactly as the original, evictions included (same averaged weights, same predictions)."""
    recs = list(_chain_records(24))
    a = _evicting_chain_model()
    for x, y in recs[:12]:
        a.learn_one(x, y)
    p = a.save(tmp_path / "m.ssvm")
    b = ss.load(p)
    for m in (a, b):
        for x, y in recs[12:]:
            m.learn_one(x, y)
    la, lb = a._learner, b._learner
    assert la.store.evicted >= 12 and la._avg_t0 == lb._avg_t0 == 0
    for k in ("E", "T", "B"):
        assert np.array_equal(getattr(la.averaged_u()[0], k), getattr(lb.averaged_u()[0], k))
    assert [a.predict_one(x) for x, _ in recs] == [b.predict_one(x) for x, _ in recs]


def test_file_without_averaging_accumulators_loads():
    """A file written before the blocks kept averaging accumulators (no ``avg`` in its store,
    no block flagged ``FLAG_AVG``) loads: its blocks get accumulators and the averaging window
    restarts at the load; from then on it survives evictions."""
    from streamssvm._kernels import bcfw as K
    from streamssvm.blocks import BlockStore
    recs = list(_chain_records(24))
    a = _evicting_chain_model()
    for x, y in recs[:12]:
        a.learn_one(x, y)
    st = a.state()
    store = BlockStore.from_state(st["learner"]["store"], a._learner.structure)
    store.avg = False
    store.compact()   # the older layout: no accumulator segments
    old = store.state()
    del old["avg"]
    st["learner"]["store"] = old
    st["learner"]["avg"]["t0"] = 5   # a window opened after its last eviction
    b = type(a).from_state(st)
    lb = b._learner
    assert lb.store.avg and lb._avg_t0 == lb._tick
    assert all(lb.store.meta[j, K.M_FLAGS] & K.FLAG_AVG for j in lb.store.slots())
    t0 = lb._avg_t0
    for x, y in recs[12:]:
        b.learn_one(x, y)
    assert lb.store.evicted >= 12 and lb._avg_t0 == t0
    c = b.certificate()
    assert np.isfinite(c.gap) and c.raw_gap >= -1e-9


def test_averaged_certificate_after_evictions_is_a_valid_bound():
    """After evictions the averaged dual point is a feasible dual point of the held blocks: its
    dual value (the certificate's ``dual_averaged``) is at most the optimum of their problem,
    bounded by refining a copy to a gap of 1e-3, and the averaged weights' primal at least it."""
    import copy
    m = ss.MulticlassSSVM(labels=[0, 1, 2], learner=ss.learners.BCFW(lam=0.1, replay=1, window=6, gap_every=None,
                                                                      evicted_average="keep"))
    for x, y in _mc_records(40):
        m.learn_one(x, y)
    assert m._learner.store.evicted >= 30 and m._learner._avg_t0 == 0
    c = m.certificate()
    d_avg = c.extra["dual_averaged"]
    opt = copy.deepcopy(m)
    opt._learner.averaging, opt._learner._avg_t0 = False, -1   # certify the refined iterate itself
    opt._learner.sampling = "uniform"   # (without gap passes, gap sampling after evictions stalls)
    opt._learner._constants()
    opt.refine(2000)
    co = opt.certificate()
    assert co.gap <= 1e-3
    assert d_avg <= co.primal + 1e-9 and c.primal >= co.dual - 1e-9
    assert c.raw_gap >= -1e-9


def test_evicted_average_restart_is_the_default_and_keeps_no_accumulators():
    """By default an eviction restarts the averaging window (the blocks keep no accumulator: the
    store's layout and memory are those of a learner without them)."""
    from streamssvm._kernels import bcfw as K
    m = ss.MulticlassSSVM(labels=[0, 1, 2], learner=ss.learners.BCFW(lam=0.1, window=4))
    for x, y in _mc_records(10):
        m.learn_one(x, y)
    lr = m._learner
    assert lr.evicted_average == "restart" and not lr.store.avg
    assert not any(lr.store.meta[j, K.M_FLAGS] & K.FLAG_AVG for j in lr.store.slots())
    assert lr.store.evicted == 6 and lr._avg_t0 > 0


def test_full_fifo_restart_skips_zeroing_a_clean_average():
    """Issue 26.12's cost: past the window every record restarts the average, and each restart
    zeroed O(features) arrays that were already 0 (the eviction comes before the record's
    steps, which are then not averaged). The restart now skips the zeroing when no step was
    averaged since the last one; the results are those of zeroing every time, to the bit."""
    def run(force):
        m = ss.MulticlassSSVM(labels=[0, 1, 2], learner=ss.learners.BCFW(lam=0.1, replay=1, window=5, seed=0))
        preds, clean = [], []
        for x, y in _mc_records(40):
            preds.append(m.predict_one(x))
            if force and m._learner is not None:
                m._learner._z_dirty = True
            m.learn_one(x, y)
            lr = m._learner
            clean.append(not lr._z_dirty and not (lr._Z.E.any() or lr._Z.T.any() or lr._Z.B.any()))
        return preds, clean, m._learner
    (pa, clean, la), (pb, _, lb) = run(False), run(True)
    assert pa == pb and np.array_equal(la.W.E, lb.W.E) and np.array_equal(la._Z.E, lb._Z.E)
    assert all(clean[10:]) and la.store.evicted == 35
