"""Multi-label structural SVM (independent labels, pairwise potentials or a label hierarchy)."""
from __future__ import annotations

import functools

import numpy as np
from river import base

from .. import calibration

from ..learners.bcfw import BCFW
from ..learners.cutting_plane import CuttingPlane
from ..learners.sgd import SGD
from ..learners.bmrm import BMRM
from ..learners.gdmm import GDMM
from ..structures import Hierarchy, MultiLabel
from .._kernels.structops import MLPAIR_MAX_LABELS
from ..features import BIAS, LabelIndex, _decode_key, _encode_key, check_truth
from ..lam_cv import LamSelection, cross_validated_lam
from ..lam_cv import supports as lam_cv_supports
from ..row_norm import RowNorm
from .base import Estimator, _is_dataframe, require_pandas, restore_statistics, weight_batch


AUTO_PAIRWISE_MAX_LABELS = 10


@functools.lru_cache(maxsize=32)
def _labelings(K):
    """Every labeling of K binary labels as the rows of a read-only float matrix (2^K x K)."""
    from ..nbest import _codes_bits
    X = _codes_bits(K, np.full(K, -1)).astype(np.float64)
    X.setflags(write=False)
    return X


def pairwise_label_gaps(s, P):
    """Max-marginal gaps of a fully connected binary MRF with unary scores ``s`` (K,) and pair
    scores ``P[a, b]`` (a < b) added when both labels are on: for each label, the best
    labeling's score with it on minus the best with it off (exact enumeration of the 2^K
    labelings). Positive exactly where the best labeling has the label on (barring ties)."""
    K = len(s)
    X = _labelings(K)
    scores = X @ s + np.einsum("ij,ij->i", X @ np.triu(P, 1), X)
    on = np.where(X > 0, scores[:, None], -np.inf).max(0)
    off = np.where(X > 0, -np.inf, scores[:, None]).max(0)
    return on - off


def pairwise_label_gaps_many(S, P, chunk=4096):
    """:func:`pairwise_label_gaps` of every row of ``S`` (rows x K) with the pair scores ``P``."""
    S = np.asarray(S, dtype=np.float64)
    K = S.shape[1]
    X = _labelings(K)
    pair = np.einsum("ij,ij->i", X @ np.triu(P, 1), X)
    out = np.empty_like(S)
    on_mask = X > 0
    for a in range(0, S.shape[0], chunk):
        sc = S[a:a + chunk] @ X.T + pair                      # rows x 2^K labeling scores
        on = np.where(on_mask[None], sc[:, :, None], -np.inf).max(1)
        off = np.where(on_mask[None], -np.inf, sc[:, :, None]).max(1)
        out[a:a + chunk] = on - off
    return out


class MultiLabelSSVM(Estimator, base.MultiLabelClassifier):
    """Multi-label structural SVM with independent labels and normalized Hamming loss.

    ``y`` is a dict ``{label: bool}``; labels never seen before are added (an example's loss is
    normalized by the number of labels known when it arrived).

    ``pairwise=True`` adds a co-occurrence potential for every pair of labels (a fully connected
    binary MRF), decoded exactly by enumeration up to 16 labels; above that ``learners.SGD``
    solves the LP relaxation (:mod:`streamssvm.oracles.lp`) and ``learners.BCFW`` refuses.
    ``pairwise="auto"`` (default) chooses when learning starts: the MRF when the label set is
    known then (``labels=`` declared, or the first ``y`` names labels that are off, as river's
    ``{label: bool}`` dicts do) and has at most ``AUTO_PAIRWISE_MAX_LABELS`` = 10 labels;
    independent labels otherwise. The choice is saved with the model. Why: one
    vs rest cannot learn which labels go together; on the tuning sets the MRF scored +0.04 to
    +0.05 test Jaccard over independent labels at every K from 5 to 14, at 1-2x the CPU up to
    10 labels, 11x at 12 and 70x at 14 (2^K labelings per oracle call); see
    ``bench/results/multilabel_defaults.md``. Pairwise models give 0/1 from ``predict_proba_one``
    (no per-label temperature); pass ``pairwise=False`` for calibrated per-label probabilities.

    ``hierarchy``: hierarchical multi-label classification (Choi, Meshi & Srebro, AISTATS 2016, section 5.2). The labels
    are the leaves of a tree or DAG given as ``{child: parent}`` (tree), ``{child: [parents]}``
    (DAG; a value ``None`` declares a root) or a list of ``(child, parent)`` pairs; a labeling's
    score sums the potentials of every node in the ancestor closure of its positive leaves, the
    loss is the Hamming distance over the leaves divided by the number of leaves. The label set
    is fixed by the hierarchy (a label outside it is an error); ``predict_one`` returns every
    leaf. Inference is exact: tree dynamic programs, or enumeration for DAGs up to 16 leaves.
    Works with BCFW and SGD, margin or slack rescaling (see :mod:`streamssvm.structures.hierarchy`).

    ``scale=True`` (default) divides each column by its running RMS
    (:class:`streamssvm.scaling.ColumnScaler`). ``normalize=True`` (default) then divides every
    row by one running factor so that the rows learned have a mean squared norm of 15 / K
    (K labels; :class:`streamssvm.row_norm.RowNorm`): the objective lam/2 ||w||^2 + (1/n) sum of
    Hamming losses normalized by K acts, per label, as a linear SVM of C = K ||x||^2 / (lam n),
    so without it the default lambda means a different C for every scale of the data and number
    of labels. Yeast's 103 scaled columns (rows of squared norm ~104, 14 labels) left the former
    default (``normalize=False``) under-regularized and badly conditioned: after ``refine(20)``
    its certificate was mostly the dual's lag and it scored Jaccard 0.459 against one-vs-rest
    LinearSVC's 0.500; normalized, 0.499 (``bench/results/multilabel_defaults.md``, where
    Yeast was held out from the choice). Files saved before it load with ``normalize=False``.
    ``tests/test_multilabel_optimum.py`` checks the learner against an independent QP.

    ``lam_cv=k`` (k >= 2 folds; default 3; 0 turns it off): :meth:`refine` first chooses lambda
    by k-fold cross-validation over the held examples, as a user would choose LinearSVC's C
    (:mod:`streamssvm.lam_cv`: 1, 3, 10, 30 or 100 times the lambda that follows n, scored by
    validation Jaccard), then refines at it; the lambda stays fixed afterwards
    (``learner.lam``), is chosen again by the next ``refine`` after new examples, and is saved
    with the model (``lam_selection_``: the grid, the scores, the CPU seconds, the threshold).
    The certificate then certifies the objective at the chosen lambda. The same folds, at the
    chosen lambda, give out-of-fold per-label scores (a label's own score, or a pairwise
    model's max-marginal gap) from which one decision threshold shared by all labels is chosen
    for Jaccard (:func:`streamssvm.lam_cv.shared_threshold`: kept only if its out-of-fold gain
    over 0 is clear, else 0, the model's own argmax); :meth:`predict_one` then puts a label on
    iff its score exceeds it (:meth:`predict_nbest_one` and constrained predictions rank by the
    model's scores, without it). It applies to learners with dual blocks and ``set_lam``
    (BCFW) whose lambda the user left to follow n (a ``BCFW(lam=...)`` is kept) and to
    unweighted examples; a stream that is never refined is untouched. Why the default: on a
    group held out from its tuning (round r9: Brown sentences and tags no run had used, Weka's
    German credit data with 6 labels fixed from attribute names) it was never worse than
    one-vs-rest LinearSVC (C=1 and C by 3-fold CV: +0.003 and +0.011 test Jaccard, neither
    significant) and beat the former default (``lam_cv=0``: +0.002 and +0.025, the latter
    significant), at 5-10x the CPU of a ``refine(20)`` (about a second on 3,000 Brown
    sentences); on the tuning sets it gained up to +0.05 over LinearSVC with C by CV and lost
    only Reuters (-0.008); see ``bench/results/multilabel_defaults.md``.

    Examples
    --------
    >>> import streamssvm as ss
    >>> m = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=0.01, replay=2, seed=0))
    >>> for i in range(200):
    ...     a = i % 2
    ...     m.learn_one({"a": a, "b": 1 - a}, {"red": bool(a), "blue": not a})
    >>> m.predict_one({"a": 1, "b": 0})
    {'red': True, 'blue': False}

    A hierarchy (the leaves cat, dog, car, bus are the labels):

    >>> tree = {"cat": "animal", "dog": "animal", "car": "vehicle", "bus": "vehicle"}
    >>> h = ss.MultiLabelSSVM(hierarchy=tree, learner=ss.learners.BCFW(lam=0.01, replay=2, seed=0))
    >>> for i in range(200):
    ...     a = i % 2
    ...     h.learn_one({"fur": a, "wheels": 1 - a}, {"cat": bool(a), "dog": bool(a), "bus": not a})
    >>> h.predict_one({"fur": 1, "wheels": 0})
    {'cat': True, 'dog': True, 'car': False, 'bus': False}
    """

    _learners = (BCFW, SGD, CuttingPlane, BMRM, GDMM)
    task = "multilabel"

    @staticmethod
    def labels_of(y):
        """The labels a target dict names (present or absent); none for anything else."""
        return list(y) if isinstance(y, dict) else []

    @classmethod
    def _default_learner(cls):
        return BCFW()

    def __init__(self, learner=None, n_features=None, labels=None, rescaling=None, pairwise="auto",
                 hierarchy=None, scale=True, normalize=True, lam_cv=3):
        if isinstance(lam_cv, bool) or not isinstance(lam_cv, (int, np.integer)) or lam_cv < 0 or lam_cv == 1:
            raise ValueError(f"lam_cv must be 0 (off) or a number of folds >= 2, got {lam_cv!r}")
        self.lam_cv = int(lam_cv)
        self.lam_selection_ = None
        if not isinstance(normalize, bool):
            raise TypeError(f"normalize must be True or False, got {normalize!r}")
        self.normalize = normalize
        self._row_norm = RowNorm() if normalize else None
        if pairwise != "auto" and not isinstance(pairwise, (bool, np.bool_)):
            raise TypeError(f"pairwise must be True, False or 'auto', got {pairwise!r}")
        self.pairwise = pairwise if pairwise == "auto" else bool(pairwise)
        # the structure used: a bool, or None while "auto" waits for the first example
        self._pairwise = None if pairwise == "auto" else bool(pairwise)
        self.hierarchy = hierarchy
        self._hier = None
        if hierarchy is not None:
            if self._pairwise:
                raise ValueError("pairwise=True and hierarchy=... are two different structures; choose one")
            self._pairwise = False
            self._hier = Hierarchy(hierarchy)
            if labels is not None and (not isinstance(labels, (list, tuple))
                                       or set(labels) != set(self._hier.leaves)):
                raise ValueError("with a hierarchy the labels are its leaves; pass labels=None (or exactly "
                                 f"the leaves {self._hier.leaves!r})")
        self._init_common(learner, n_features, labels, rescaling, scale)
        if self._hier is not None:
            self._labels = LabelIndex(self._hier.nodes)

    def coerce_input(self, x, y):
        """A record's ``(x, y)``: a JSON list of features as a float array; ``y`` a ``{label:
        bool}`` dict, or the positive labels (a list, or one label) as one."""
        if isinstance(x, list):
            x = np.asarray(x, dtype=np.float64)
        if isinstance(y, dict):
            return x, y
        if isinstance(y, (list, tuple, set)):
            return x, {lab: True for lab in y}
        return x, {y: True}

    def _make_structure(self):
        if self.hierarchy is not None:
            return Hierarchy(self.hierarchy)
        # SGD and GDMM call their oracles from Python and can solve the LP relaxation above 16 labels
        if self._pairwise is None:
            self._pairwise = self._auto_pairwise(None)
        return MultiLabel(pairwise=self._pairwise, inference=self.learner.multilabel_inference)

    def _auto_pairwise(self, y):
        """``pairwise="auto"``: the pairwise MRF when the label set is known when learning starts
        (``labels=`` declared, or the first example's ``y`` names labels that are off) and has at
        most :data:`AUTO_PAIRWISE_MAX_LABELS` labels; independent labels otherwise (label sets
        that grow as records name their positive labels, large label sets)."""
        if self._hier is not None:
            return False
        if self.labels is not None:
            known = set(self._labels.labels)
        elif isinstance(y, dict) and any(v is not None and not check_truth(v, lab) for lab, v in y.items()):
            known = set(self._labels.labels) | set(y)
        else:
            return False
        return len(known) <= AUTO_PAIRWISE_MAX_LABELS

    def _params_state(self):
        st = super()._params_state()
        if self.pairwise == "auto" and self._pairwise is not None:   # the structure chosen is saved
            st["params"]["pairwise"] = self._pairwise
            st["params"]["pairwise_auto"] = True
        if self.hierarchy is not None:
            pairs = Hierarchy.parse(self.hierarchy)
            st["params"]["hierarchy"] = {"pairs": [[_encode_key(c), None if p is None else _encode_key(p)]
                                                   for c, p in pairs]}
        return st

    @classmethod
    def _params_from_state(cls, params):
        params = super()._params_from_state(params)
        params.setdefault("normalize", False)   # a file from before row normalization
        params.setdefault("lam_cv", 0)          # a file from before lambda by cross-validation
        params.setdefault("pairwise", False)    # a file from before pairwise="auto"
        params.pop("pairwise_auto", None)       # from_state sets "auto" back after building
        h = params.get("hierarchy")
        if isinstance(h, dict) and set(h) == {"pairs"}:
            params["hierarchy"] = [(_decode_key(c), None if p is None else _decode_key(p)) for c, p in h["pairs"]]
        return params

    def _n_loss_labels(self):
        """K of the normalized Hamming loss: the labels known (a hierarchy's leaves)."""
        return self._hier.n_leaves if self._hier is not None else len(self._labels)

    def _scaled(self, fidx, fval):
        v = super()._scaled(fidx, fval)
        return v if self._row_norm is None else self._row_norm.scaled(fidx, v, self._n_loss_labels())

    def _learned(self, fidx, fval, tok_ptr=None):
        if tok_ptr is not None:   # pragma: no cover - multi-label examples are learned one by one
            raise ValueError("MultiLabelSSVM learns one row at a time")
        v = super()._learned(fidx, fval)
        return v if self._row_norm is None else self._row_norm.learn_scaled(fidx, v, self._n_loss_labels())

    def state(self):
        st = super().state()
        st["row_norm"] = None if self._row_norm is None else self._row_norm.state()
        st["lam_selection"] = None if self.lam_selection_ is None else self.lam_selection_.to_dict()
        return st

    @classmethod
    def from_state(cls, st):
        model = super().from_state(st)
        if st["config"]["params"].get("pairwise_auto"):
            model.pairwise = "auto"   # built with the structure "auto" had chosen
        model._row_norm = restore_statistics(st.get("row_norm"), model._row_norm, f"normalize={model.normalize}",
                                             "row norm statistics", RowNorm.from_state)
        sel = LamSelection.from_dict(st.get("lam_selection"))
        if sel is not None and not (isinstance(sel.threshold, (int, float)) and np.isfinite(sel.threshold)):
            from .. import checkpoint
            raise checkpoint.CheckpointError(f"invalid model file: the decision threshold {sel.threshold!r} "
                                             "is not a finite number")
        model.lam_selection_ = sel
        return model

    # ------------------------------------------------------------- lambda by cross-validation
    def _lam_cv_due(self):
        """Whether :meth:`refine` chooses lambda first: ``lam_cv`` folds asked for, a BCFW
        learner whose lambda is not the user's (it follows n, or an earlier selection set it),
        unweighted examples, and examples held that the last selection did not see."""
        lr = self._learner
        if not self.lam_cv or not lam_cv_supports(lr) or self._hier is not None:
            return False
        sel = self.lam_selection_
        if sel is None and self.learner.lam is not None:
            return False   # the user's lambda
        if lr.store.weighted():
            return False   # Proposition 1's warm start is derived for the unweighted dual
        return sel is None or int(lr.store.seen) != sel.n_seen

    def _select_lam(self):
        """Choose lambda by ``lam_cv``-fold cross-validation over the held examples and move the
        held problem to it (:func:`streamssvm.lam_cv.cross_validated_lam`)."""
        lr = self._learner
        n = lr._n_weighted()
        lam_auto = min(lr.AUTO_LAM, lr.AUTO_LAM_N / max(float(n), 1.0))   # what lam=None would use
        sel = cross_validated_lam(lr, folds=self.lam_cv, lam0=lam_auto, label_scores=self._fold_label_scores())
        if sel is None:
            return
        sel.n_seen = int(lr.store.seen)
        lr.set_lam(sel.lam, keep="dual" if sel.lam > lr.effective_lam() else "weights")
        self.learner = self.learner.clone({"lam": float(sel.lam)})
        self.lam_selection_ = sel

    def _fold_label_scores(self):
        """For :func:`streamssvm.lam_cv.cross_validated_lam`: the per-label scores of a fold's
        copy on its held-out batch (as :meth:`_label_scores`), or None where there are none."""
        if self._hier is not None or (self._pairwise and int(self._learner.n_labels) > MLPAIR_MAX_LABELS):
            return None
        pairwise = bool(self._pairwise)

        def scores(work, batch, K):
            tables = calibration.predict_tables(work)
            _, tok_ptr, fidx, fval = batch
            S = calibration.emission_scores(tables, tok_ptr, fidx, fval, K)
            if not pairwise:
                return S
            return pairwise_label_gaps_many(S, float(tables[5]) * np.asarray(tables[3])[:K, :K])
        return scores

    def _threshold(self):
        """The shared decision threshold chosen with lambda (0: the model's own argmax)."""
        sel = self.lam_selection_
        return 0.0 if sel is None or self._hier is not None else float(sel.threshold)

    def refine(self, passes: float = 1.0, tol: float | None = None, progress=None, certify: bool = False):
        """See :meth:`streamssvm.estimators.base.Estimator.refine`. With ``lam_cv`` folds (and a
        BCFW learner whose lambda the user did not fix), lambda is first chosen by
        cross-validation over the held examples among ``LAM_FACTORS`` times the lambda that
        follows n (:mod:`streamssvm.lam_cv`), once per new batch of examples: the learner then
        solves, and its certificate certifies, the objective at the chosen lambda, which stays
        fixed (``learner.lam``) and is saved with the model (``lam_selection_``)."""
        if self._learner is not None and self._lam_cv_due():
            self._select_lam()
        return super().refine(passes, tol=tol, progress=progress, certify=certify)

    @classmethod
    def _unit_test_params(cls):
        yield {"learner": BCFW(lam=1e-2, replay=1, seed=0)}

    def _encode_y(self, y):
        if not isinstance(y, dict):
            raise TypeError(f"y must be a dict {{label: bool}}, got {type(y).__name__}")
        if self._hier is not None:
            return self._encode_hier_y(y)
        pos = []
        for lab, v in y.items():
            j = self._labels.encode(lab, grow=True)
            if v is None:
                continue
            if check_truth(v, lab):
                pos.append(j)
        return np.array(sorted(pos), dtype=np.int32)

    def _encode_hier_y(self, y):
        """Positive leaves -> the sorted node ids of their ancestor closure."""
        h = self._hier
        pos = []
        for lab, v in y.items():
            try:
                j = h.index.get(lab)
            except TypeError:
                raise TypeError(f"labels must be hashable, got {type(lab).__name__}") from None
            if j is None:
                raise ValueError(f"label {lab!r} is not in the hierarchy; its labels are the leaves "
                                 f"{h.leaves[:10]!r}{' ...' if h.n_leaves > 10 else ''}")
            if j >= h.n_leaves:
                raise ValueError(f"label {lab!r} is an internal node of the hierarchy; labels are its leaves "
                                 "(an internal node is on when one of its leaves is)")
            if check_truth(v, lab):
                pos.append(j)
        return h.closure(pos)

    def _encode_example(self, x, y):
        """Validate one example whole, then encode it (registering new names and labels)."""
        for lab, v in (y.items() if isinstance(y, dict) else ()):  # validate before any state changes
            self._labels.check(lab), check_truth(v, lab)
        if self._pairwise is None and self._learner is None:
            self._pairwise = self._auto_pairwise(y)
        if isinstance(y, dict) and self._hier is None:
            new = [lab for lab in y if lab not in self._labels.index]
            if new:   # a label count the structure refuses is refused before any label is registered
                s = self._structure if self._learner is not None else self._make_structure()
                labels = self._labels.labels + new
                s.cost_matrix(len(labels), labels)
        with self._registering():   # a label outside the hierarchy is found after the features
            tok_ptr, fidx, fval = self._encode_to_learn(x)
            pos = self._encode_y(y)
        return tok_ptr, fidx, fval, pos

    def learn_one(self, x, y, w=1.0):
        """Learn ``(x, y)`` with importance weight ``w`` >= 0: see
        :meth:`streamssvm.MulticlassSSVM.learn_one` (w=0 learns nothing; other weights need a
        learner that takes them)."""
        c = 1.0 if type(w) is float and w == 1.0 else self._weighted_start(x, y, w)
        if c is None:
            return
        tok_ptr, fidx, fval, pos = self._encode_example(x, y)
        lr = self._sync()
        self._observe_calibration(tok_ptr, fidx, self._scaled(fidx, fval), pos)   # as predicted
        self._last_fidx = fidx   # rows a step on this record changes (weights_finite)
        Ki = self._hier.n_leaves if self._hier is not None else len(self._labels)
        self._give(lr, tok_ptr, fidx, self._learned(fidx, fval), pos, max(Ki, 1), c)

    def _encode_checked(self, x, y):
        self._encode_example(x, y)

    def _label_scores(self, tok_ptr, fidx, fval):
        """Per-label scores, a label predicted on iff its score > 0: independent labels' own
        scores; a pairwise MRF's max-marginal gaps (the best labeling's score with the label on
        minus with it off, by enumeration up to 16 labels); None for hierarchies, larger MRFs and
        learners without dense weight tables."""
        if self._hier is not None:
            return None
        tables = calibration.predict_tables(self._learner)
        if tables is None:
            return None
        K = int(self._learner.n_labels)
        s = calibration.emission_scores(tables, tok_ptr, fidx, fval, K, self._learner)[0]
        if not self._pairwise:
            return s
        if K > MLPAIR_MAX_LABELS:
            return None
        return pairwise_label_gaps(s, float(tables[5]) * np.asarray(tables[3])[:K, :K])

    def _observe_calibration(self, tok_ptr, fidx, fval, pos):
        """Offer the record, scored by the model before it learns it, to the temperature fit."""
        t = self._calibrator()
        if not t.wants():
            return
        s = self._label_scores(tok_ptr, fidx, fval)
        if s is None or len(s) == 0:
            return
        truth = np.zeros(len(s), dtype=bool)
        p = np.asarray(pos, dtype=np.int64)
        truth[p[p < len(s)]] = True
        t.observe_labels(s, truth)

    def predict_proba_one(self, x):
        """``{label: {False: 1 - p, True: p}}`` (river's multi-label form): p = sigmoid(score /
        T), T the :attr:`temperature` fitted online, the score a label's own (independent labels)
        or its max-marginal gap (pairwise MRFs up to 16 labels): a label is predicted on iff
        p > 1/2. Hierarchies and larger MRFs give 0/1 on their prediction."""
        pred = self.predict_one(x)
        if self._learner is None or len(self._labels) == 0:
            return {lab: {False: 1.0, True: 0.0} for lab in pred}
        s = self._label_scores(*self._encode_to_predict(x))
        if s is None:
            return {lab: {False: float(not v), True: float(v)} for lab, v in pred.items()}
        p = calibration.sigmoid(s - self._threshold(), 1.0 / self.temperature)
        return {lab: {False: 1.0 - float(p[k]), True: float(p[k])} if k < len(p) else {False: 1.0, True: 0.0}
                for k, lab in enumerate(self._labels.labels)}

    def predict_one(self, x, constraints=None):
        """The best labeling for ``x`` as ``{label: bool}``; with ``constraints`` (a
        :class:`streamssvm.Constraints` or a dict with ``on=`` / ``off=`` label lists) the best
        one that satisfies them."""
        if constraints is not None:
            return self._predict_constrained(x, constraints)
        if self._learner is None or len(self._labels) == 0:
            if self._hier is not None:
                return {lab: False for lab in self._hier.leaves}
            return {}
        tok_ptr, fidx, fval = self._encode_to_predict(x)
        t = self._threshold()
        if t != 0.0:
            s = self._label_scores(tok_ptr, fidx, fval)
            if s is not None:
                return {lab: bool(k < len(s) and s[k] > t) for k, lab in enumerate(self._labels.labels)}
        Kc = self._learner.W.Kc
        out = self._learner.predict(np.array([0, 1], dtype=np.int64), tok_ptr.astype(np.int64),
                                        fidx, fval, np.array([0, Kc], dtype=np.int64), Kc)
        labs = self._labels.labels if self._hier is None else self._hier.leaves
        return {lab: bool(out[k]) for k, lab in enumerate(labs)}

    def predict_nbest_one(self, x, k, constraints=None):
        """The ``k`` best labelings for ``x`` with their scores, best first: a list of
        ``({label: bool}, score)``; the first is ``predict_one(x)``. Exact: independent labels
        by a best-first enumeration of the flips away from the best labeling, pairwise models
        and hierarchies by enumerating the labelings (up to 16 free labels / leaves; above, a
        ValueError). ``constraints``: a :class:`streamssvm.Constraints` (or a dict) with
        ``on=`` / ``off=`` label lists.

        >>> import streamssvm as ss
        >>> m = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=0.01, replay=2, seed=0))
        >>> for i in range(100):
        ...     a = i % 2
        ...     m.learn_one({"a": a, "b": 1 - a}, {"red": bool(a), "blue": not a})
        >>> [y for y, score in m.predict_nbest_one({"a": 1, "b": 0}, 2)]
        [{'red': True, 'blue': False}, {'red': True, 'blue': True}]
        >>> m.predict_one({"a": 1, "b": 0}, constraints={"on": ["blue"]})
        {'red': True, 'blue': True}
        """
        from ..constraints import Constraints
        from ..nbest import hierarchy_nbest, independent_nbest, lead_with, pairwise_nbest
        k = self._check_k(k)
        c = Constraints.coerce(constraints)
        if self._learner is None or len(self._labels) == 0:
            if c is not None and (c.on or c.off or c.for_sequences):
                raise ValueError("constrained decoding needs a fitted model (no label is known yet)")
            return [(self.predict_one(x), 0.0)]
        tab = self._score_tables()
        s = tab.emission(*self._encode_scaled(x))[0]
        want, enum = k, c is None and (self._pairwise or self._hier is not None)
        if enum:
            k += 1   # one more: on a tie predict_one's labeling may be the (k + 1)-th
        if self._hier is not None:
            leaves = self._hier.leaves
            fixed = c.label_fixed(leaves) if c is not None else None
            items = hierarchy_nbest(s, self._hier, k, fixed)
            out = [({lab: bool(y[i]) for i, lab in enumerate(leaves)}, sc) for y, sc in items]
        else:
            labs = self._labels.labels[:len(s)]
            fixed = c.label_fixed(labs) if c is not None else None
            if self._pairwise:
                items = pairwise_nbest(s, tab.transitions()[0], k, fixed)
            else:
                items = independent_nbest(s, k, fixed)
            out = [({lab: bool(y[i]) for i, lab in enumerate(labs)}, sc) for y, sc in items]
        if enum:
            # the decoders sum in another order: on a tie the first is predict_one's labeling
            out = lead_with(out, self.predict_one(x), lambda y: tuple(y.values()))
        return out[:want]

    def _predict_constrained(self, x, constraints):
        best = self.predict_nbest_one(x, 1, constraints)
        if not best:
            raise ValueError(f"no labeling satisfies the constraints {constraints!r}")
        return best[0][0]

    def learn_many(self, X, Y, w=None):
        """``Y``: a DataFrame of booleans (one column per label) or a list of dicts; ``w``: None
        or one weight per row, as :meth:`learn_one` takes it. The whole batch is validated
        first: a bad row raises and the model is unchanged."""
        A, _ = self._as_matrix(X)
        rows = Y.to_dict(orient="records") if _is_dataframe(Y) else list(Y)
        if len(rows) != A.shape[0]:
            raise ValueError(f"X has {A.shape[0]} rows but Y has {len(rows)}")
        ws = weight_batch(w, len(rows))
        if ws is not None:
            return self._learn_weighted_rows(list(A), rows, ws)
        self._check_batch(self._encode_example, A, rows)   # a bad row: an error, nothing learned
        for i in range(A.shape[0]):
            self.learn_one(A[i], rows[i])

    def predict_many(self, X):
        """A pandas DataFrame of booleans (one column per label; pandas must be installed)."""
        pd = require_pandas("MultiLabelSSVM.predict_many")
        A, index = self._as_matrix(X)
        preds = [self.predict_one(A[i]) for i in range(A.shape[0])]
        return pd.DataFrame(preds, index=index)

