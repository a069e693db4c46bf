"""Round r11 tuning script (issue 23 item 9): criteria for ``MultiLabelSSVM``'s lambda and
shared decision threshold that do not reward empty predictions. A tuning script, not a default;
see ``bench/multilabel_defaults.py``'s docstring for the protocol and the numbers.

Per set: the training rows are streamed once through ``MultiLabelSSVM()``; the library's
default ``refine(20)`` runs on a copy (its test Jaccard is checked against the criterion
``J0`` below, which must reproduce it exactly); the library's cross-validation
(``streamssvm.lam_cv.cross_validated_lam``, the same fold walk, copied here to keep the
out-of-fold per-label scores at every lambda) runs with 3 folds (seeds 0, 1, 2), 5 and 10
folds, and over the grid extended by 0.3x and 0.1x; a copy of the streamed model is moved to
every grid lambda as ``refine`` moves it and refined 20 passes, and keeps its per-label test
scores. A criterion picks (lambda, threshold) from the out-of-fold scores alone; the test
prediction is "label on iff its score at that lambda > threshold". So every criterion is
scored on the same models, and costs no extra run.

Criteria (``J``: the samples-averaged Jaccard, 1 for an empty prediction of an empty truth):

* ``J0``: the library's (lambda by J at threshold 0, the larger lambda on a tie; then
  :func:`streamssvm.lam_cv.shared_threshold`, kept if its out-of-fold gain is clear);
* ``J0 ungated`` / ``J0 no threshold``; ``J small tie`` (the smaller lambda on a tie);
* lambda by example-based F1, by micro-F1, by (J + micro-F1) / 2, by J over the rows with a
  non-empty truth (then the shared threshold as ``J0``); ``exF1 + exF1 threshold``;
* ``joint``: (lambda, threshold) maximizing J over the grid x ``THRESHOLD_GRID`` (ungated),
  ``joint gated`` (kept only if its gain over ``J0``'s lambda at 0 is clear);
* cardinality: the threshold whose mean predicted label count on the out-of-fold rows is
  nearest the training rows' mean (at ``J0``'s lambda, or with lambda chosen by J after it);
* noise: J averaged over three 3-fold splits, 5 folds, 10 folds (alone, when n < 1000, and
  with ``joint``; ``joint, 10-fold`` again with another fold seed, the check of the one
  candidate nominally ahead); the grid floor 0.3x, 0.1x.

Reported: each set's test Jaccard per criterion; pooled over the sets (each weighted equally,
test rows resampled within each set) each criterion minus ``J0`` and minus OvR LinearSVC C=1.

    PYTHONPATH=. python bench/archive/multilabel_criteria.py run brown yeast ...   # /tmp/mlcrit/<set>.npz
    PYTHONPATH=. python bench/archive/multilabel_criteria.py report                # the tables

It refuses round r11's held-out sets (``HELD_OUT_R11``).
"""
from __future__ import annotations

import copy
import glob
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import bench.multilabel_defaults as B  # noqa: E402
from streamssvm import calibration  # noqa: E402
from streamssvm import lam_cv as LC  # noqa: E402
from streamssvm.lam_cv import THRESHOLD_GRID, jaccard_rows, shared_threshold  # noqa: E402

OUT = os.environ.get("MLCRIT_OUT", "/tmp/mlcrit")
GRIDS = {"g": LC.LAM_FACTORS, "g03": LC.LAM_FACTORS + (0.3,), "g01": LC.LAM_FACTORS + (0.3, 0.1)}
SPLITS = {"s1": (3, 1), "s2": (3, 2), "f5": (5, 0), "f10": (10, 0), "f10s1": (10, 1)}


def cv_oof(lr, label_scores, lam0, factors, folds=3, seed=0, passes=20.0):
    """``cross_validated_lam``'s fold walk, keeping the out-of-fold scores at every lambda:
    (lambdas, decreasing; scores lambdas x n x K; truths n x K)."""
    slots = np.asarray(lr.store.slots(), dtype=np.int64).copy()
    n = len(slots)
    lams = sorted((lam0 * float(f) for f in factors), reverse=True)
    fold_of = np.random.default_rng(seed).permutation(n) % folds
    K = int(lr.n_labels)
    oof, truth_all = np.zeros((len(lams), n, K)), np.zeros((n, K), dtype=bool)
    for f in range(folds):
        out = np.flatnonzero(fold_of == f)
        work = copy.deepcopy(lr)
        for s in slots[out]:
            work._evict(int(s))
        batch, truth = LC._held_batch(lr, slots[out])
        truth_all[out] = truth
        for q in range(len(lams) - 1, -1, -1):
            lam = lams[q]
            work.set_lam(lam, keep="dual" if lam > work.effective_lam() else "weights")
            work.refine(max(1.0, passes * np.sqrt(lams[-1] / lam)))
            oof[q, out] = label_scores(work, batch, K)
    return np.array(lams), oof, truth_all


def run(name):
    if name in B.HELD_OUT_R11:
        raise SystemExit(f"{name} is held out (round r11): not a tuning set")
    import streamssvm as ss
    from streamssvm.estimators.multilabel import pairwise_label_gaps_many
    Xtr, Ytr, Xte, Yte, labels = B.DATASETS[name]()
    for pw in (False, True):   # compile first
        B.ssvm(Xtr[:60], Ytr[:60], Xte[:5], labels, refine=2, pairwise=pw)
    feat = [f"f{j}" for j in range(Xtr.shape[1])]

    def row(a):
        return {feat[j]: float(a[j]) for j in np.flatnonzero(a)}

    m = ss.MultiLabelSSVM()
    for a, y in zip(Xtr, Ytr):
        m.learn_one(row(a), {lab: bool(v) for lab, v in zip(labels, y)})
    md = copy.deepcopy(m)
    c0 = time.process_time()
    md.refine(20)
    out = {"lib_cpu": time.process_time() - c0, "Yte": Yte, "Ytr": Ytr,
           "Plib": np.array([[bool(md.predict_one(row(a)).get(lab, False)) for lab in labels] for a in Xte])}
    lr = m._learner
    K = int(lr.n_labels)
    lam0 = min(lr.AUTO_LAM, lr.AUTO_LAM_N / max(float(lr._n_weighted()), 1.0))
    ls = m._fold_label_scores()
    for tag, fac in GRIDS.items():
        c0 = time.process_time()
        out[f"{tag}_lams"], out[f"{tag}_oof"], out["oof_truth"] = cv_oof(lr, ls, lam0, fac)
        out[f"{tag}_cpu"] = time.process_time() - c0
    for tag, (folds, seed) in SPLITS.items():
        c0 = time.process_time()
        _, out[f"{tag}_oof"], out[f"{tag}_truth"] = cv_oof(lr, ls, lam0, LC.LAM_FACTORS, folds=folds, seed=seed)
        out[f"{tag}_cpu"] = time.process_time() - c0
    tok, fi, fv = [0], [], []
    for a in Xte:   # the test rows, encoded once (refinement changes no feature statistic)
        _, fidx, fval = m._encode_to_predict(row(a))
        fi.append(np.asarray(fidx))
        fv.append(np.asarray(fval, dtype=np.float64))
        tok.append(tok[-1] + len(fi[-1]))
    tok, fi, fv = np.array(tok, dtype=np.int64), np.concatenate(fi), np.concatenate(fv)
    lams = out["g01_lams"]
    S_test = np.zeros((len(lams), Xte.shape[0], K))
    for q, lam in enumerate(lams):   # the streamed model moved to lam as refine moves it
        mc = copy.deepcopy(m)
        mc._learner.set_lam(lam, keep="dual" if lam > mc._learner.effective_lam() else "weights")
        mc.learner, mc.lam_cv = mc.learner.clone({"lam": float(lam)}), 0
        mc.refine(20)
        tables = calibration.predict_tables(mc._learner)
        S = calibration.emission_scores(tables, tok, fi, fv, K)
        if m._pairwise:
            S = pairwise_label_gaps_many(S, float(tables[5]) * np.asarray(tables[3])[:K, :K])
        S_test[q] = S
    out.update(all_lams=lams, S_test=S_test, Psvc=B.ovr_linearsvc(Xtr, Ytr, Xte)[0])
    os.makedirs(OUT, exist_ok=True)
    np.savez(os.path.join(OUT, f"{name}.npz"), **out)
    print(name, "library default J", round(float(B.jaccards(Yte, out["Plib"]).mean()), 4), flush=True)


def _ex_f1(truth, pred):
    inter, s = (truth & pred).sum(1), truth.sum(1) + pred.sum(1)
    return np.where(s == 0, 1.0, 2 * inter / np.maximum(s, 1))


def _micro_f1(truth, pred):
    tp, fp, fn = (truth & pred).sum(), (~truth & pred).sum(), (truth & ~pred).sum()
    return 2 * tp / max(2 * tp + fp + fn, 1)


def _best(vals, small_tie=False):
    idx = np.flatnonzero(np.asarray(vals) == np.max(vals))
    return int(idx[-1] if small_tie else idx[0])   # lambdas decrease: the first is the largest


def _card_t(S, card):
    return float(THRESHOLD_GRID[int(np.argmin([abs((S > t).sum(1).mean() - card) for t in THRESHOLD_GRID]))])


def _clear_gain(d, reps=500, seed=0):
    rng = np.random.default_rng(seed)
    return float(np.quantile(d[rng.integers(0, d.shape[0], size=(reps, d.shape[0]))].mean(1), 0.025)) > 0.0


def _joint(lams, reps):
    best = None
    for i in range(len(lams)):
        for t in THRESHOLD_GRID:
            v = np.mean([jaccard_rows(tr, oo[i] > t).mean() for oo, tr in reps])
            if best is None or v > best[0]:
                best = (v, i, float(t))
    return lams[best[1]], best[2]


def criteria(z):
    """{criterion: (lambda, threshold)} from the out-of-fold scores alone."""
    truth, card, lams, oof = z["oof_truth"], z["Ytr"].sum(1).mean(), z["g_lams"], z["g_oof"]
    out = {}
    for tag in GRIDS:
        J = [jaccard_rows(truth, o > 0).mean() for o in z[f"{tag}_oof"]]
        q = _best(J)
        out[f"J0[{tag}]"] = (z[f"{tag}_lams"][q], shared_threshold(z[f"{tag}_oof"][q], truth))
    J = [jaccard_rows(truth, o > 0).mean() for o in oof]
    q0 = _best(J)
    tJ = float(THRESHOLD_GRID[int(np.argmax([jaccard_rows(truth, oof[q0] > t).mean() for t in THRESHOLD_GRID]))])
    out["J0 ungated"], out["J0 no threshold"] = (lams[q0], tJ), (lams[q0], 0.0)
    q = _best(J, small_tie=True)
    out["J small tie"] = (lams[q], shared_threshold(oof[q], truth))
    M = [_micro_f1(truth, o > 0) for o in oof]
    ne = truth.any(1)
    for name, vals in (("exF1", [_ex_f1(truth, o > 0).mean() for o in oof]), ("microF1", M),
                       ("(J+microF1)/2", [(a + b) / 2 for a, b in zip(J, M)]),
                       ("J non-empty rows", [jaccard_rows(truth[ne], o[ne] > 0).mean() for o in oof])):
        q = _best(vals)
        out[name] = (lams[q], shared_threshold(oof[q], truth))
    q = _best([_ex_f1(truth, o > 0).mean() for o in oof])
    out["exF1 + exF1 threshold"] = (lams[q], float(THRESHOLD_GRID[int(np.argmax(
        [_ex_f1(truth, oof[q] > t).mean() for t in THRESHOLD_GRID]))]))
    lj, tj = _joint(lams, [(oof, truth)])
    i = int(np.flatnonzero(np.isclose(lams, lj))[0])
    gain = jaccard_rows(truth, oof[i] > tj) - jaccard_rows(truth, oof[q0] > 0)
    out["joint"] = (lj, tj)
    out["joint gated"] = (lj, tj) if (i, tj) != (q0, 0.0) and _clear_gain(gain) else out["J0[g]"]
    out["J0 + cardinality threshold"] = (lams[q0], _card_t(oof[q0], card))
    q = _best([jaccard_rows(truth, o > _card_t(o, card)).mean() for o in oof])
    out["cardinality at each lambda"] = (lams[q], _card_t(oof[q], card))
    reps = [(oof, truth), (z["s1_oof"], z["s1_truth"]), (z["s2_oof"], z["s2_truth"])]
    q = _best(np.mean([[jaccard_rows(tr, o > 0).mean() for o in oo] for oo, tr in reps], axis=0))
    out["3 x 3-fold"] = (lams[q], shared_threshold(np.concatenate([oo[q] for oo, _ in reps]),
                                                   np.concatenate([tr for _, tr in reps])))
    for f in ("f5", "f10"):
        oo, tr = z[f"{f}_oof"], z[f"{f}_truth"]
        q = _best([jaccard_rows(tr, o > 0).mean() for o in oo])
        out[f"{f[1:]}-fold"] = (lams[q], shared_threshold(oo[q], tr))
    out["10-fold if n < 1000"] = out["10-fold"] if truth.shape[0] < 1000 else out["J0[g]"]
    out["joint, 3 x 3-fold"] = _joint(lams, reps)
    out["joint, 5-fold"] = _joint(lams, [(z["f5_oof"], z["f5_truth"])])
    out["joint, 10-fold"] = _joint(lams, [(z["f10_oof"], z["f10_truth"])])
    out["joint, 10-fold, fold seed 1"] = _joint(lams, [(z["f10s1_oof"], z["f10s1_truth"])])
    return out


def report():
    sets = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(OUT, "*.npz")))
    sets = [s for s in sets if s not in B.HELD_OUT_R11]
    J, chosen = {}, {}
    for s in sets:
        z = np.load(os.path.join(OUT, f"{s}.npz"))
        Y = z["Yte"].astype(bool)
        J[s] = {"LinearSVC C=1": jaccard_rows(Y, z["Psvc"]), "library default": jaccard_rows(Y, z["Plib"])}
        for name, (lam, t) in criteria(z).items():
            q = int(np.argmin(np.abs(np.log(z["all_lams"] / lam))))
            P = z["S_test"][q] > t
            J[s][name] = jaccard_rows(Y, P)
            chosen.setdefault(name, {})[s] = (float(lam / z["all_lams"][4]), t, float((P.sum(1) == 0).mean()))
    gap = max(abs(J[s]["J0[g]"].mean() - J[s]["library default"].mean()) for s in sets)
    print(f"{len(sets)} sets; J0[g] reproduces the library default to {gap:.1e} (set means)\n")
    names = [n for n in J[sets[0]] if n != "library default"]
    print(f"{'criterion':27s} " + " ".join(f"{s[:7]:>7s}" for s in sets))
    for n in names:
        print(f"{n:27s} " + " ".join(f"{J[s][n].mean():7.3f}" for s in sets))
    print("\npooled (sets weighted equally, 20,000 resamples within sets): minus J0 (the library) | minus LinearSVC C=1")
    for n in names:
        a = B.pooled_difference({s: J[s][n] - J[s]["J0[g]"] for s in sets}, reps=20000)
        b = B.pooled_difference({s: J[s][n] - J[s]["LinearSVC C=1"] for s in sets}, reps=20000)
        print(f"{n:27s} {a['mean']:+.4f} [{a['lo']:+.4f}, {a['hi']:+.4f}] P(<=0) {a['p_not_above_0']:.3f} "
              f"sets +{a['above']}/-{a['below']} | {b['mean']:+.4f} [{b['lo']:+.4f}, {b['hi']:+.4f}] "
              f"sets +{b['above']}/-{b['below']}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        for s in sys.argv[2:]:
            run(s)
    elif sys.argv[1:2] == ["report"]:
        report()
    else:
        raise SystemExit(__doc__)
