"""Extreme multiclass: very many classes, learned by :class:`streamssvm.learners.MEMOIR`."""
from __future__ import annotations

import numpy as np
from river import base

from ..learners.memoir import MEMOIR
from ..oracles.rows import DENSE_MAX_DIM
from ..structures import MultiClass
from .base import Estimator, is_missing, require_pandas, weight_batch


class LabelCost(MultiClass):
    """The Crammer-Singer structure with a cost on label *values*: ``label_cost`` is None, a
    square matrix ``C[y_true, y]`` indexed by the labels (integers 0..K-1) or a callable
    ``cost(y_true, y)``. MEMOIR reads it when bound and keeps its own cost cache."""

    def __init__(self, label_cost=None):
        super().__init__()
        self.label_cost = label_cost


class ExtremeClassifier(Estimator, base.Classifier):
    """Multiclass with very many classes (MEMOIR; Belyy & Sholokhov, "MEMOIR: Multi-class
    Extreme Classification with Inexact Margin"): a Crammer-Singer SVM trained by SGD whose
    most-violating class comes from a maximum-inner-product index over the class rows.

    Parameters
    ----------
    learner
        A :class:`streamssvm.learners.MEMOIR` configuration (default ``MEMOIR()``): variant,
        lam, batch size, step schedule, rows, MIPS index settings, window.
    mips
        ``"auto"``, ``"exact"``, ``"hnsw"`` or ``"lsh"``: overrides the learner's ``mips`` (None: keep it).
    loss
        None (Crammer-Singer: cost 1 for every wrong class), a cost matrix ``C[y, c]`` (labels
        must then be the integers 0..K-1) or a callable ``loss(y_true, y) -> float >= 0`` with
        ``loss(y, y) == 0`` (cached per true class by the learner).
    labels
        Classes known up front (a list), registered in that order: the model holds a (zero)
        row for each from its first example on, so every search faces all of them (zero rows
        stay out of an index, the smallest one standing for all; exact search scores them 0)
        and a declared class can be predicted before it is learned. Labels not declared still
        grow the set when they arrive. With a cost matrix they must be integers in [0, K).
    n_features
        Hashing trick buckets (None: growing vocabulary / array input).
    rescaling
        With a ``loss``: ``"margin"`` (most violating class maximizes C[y,c] + s_c - s_y) or
        ``"slack"`` (maximizes C[y,c] (1 + s_c - s_y); the step is scaled by C[y,c]); overrides
        the learner's. With an index the choice is made among its candidates, re-scored exactly
        (inexact; measured in ``certificate().extra``); the exact oracle scores every class.
    predict_with
        ``"exact"`` (every row, the paper's choice; sparse rows make it cheap) or ``"index"``;
        overrides the learner's (None: keep it, ``"exact"`` by default).

    The learner's ``rows="auto"`` is resolved when it is bound: dense class rows for array
    input of at most 4096 columns, sparse rows (memory O(nnz(W))) for dict input, the hashing
    trick or wider arrays. Both give the same model. :meth:`certificate` reports the primal on
    the learner's window (gap +inf: MEMOIR keeps no dual point) and the index diagnostics;
    :meth:`refine` makes SGD epochs over the window.

    Examples
    --------
    >>> import numpy as np, streamssvm as ss
    >>> rng = np.random.default_rng(0)
    >>> centers = rng.normal(size=(200, 16))
    >>> m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(lam=1e-4, seed=0), mips="hnsw")
    >>> for _ in range(4000):
    ...     c = int(rng.integers(200)); m.learn_one(centers[c] + 0.1 * rng.normal(size=16), c)
    >>> bool(np.mean([m.predict_one(centers[c]) == c for c in range(200)]) > 0.9)
    True

    Dict input (a growing vocabulary) uses sparse rows; a cost matrix with slack rescaling:

    >>> C = 1.0 - np.eye(3); C[0, 2] = C[2, 0] = 3.0
    >>> m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(lam=1e-3), mips="exact", loss=C,
    ...                          rescaling="slack")
    >>> for i in range(300):
    ...     y = i % 3; m.learn_one({f"w{y}": 1.0, f"n{i % 7}": 0.5}, y)
    >>> [m.predict_one({f"w{y}": 1.0}) for y in range(3)], m.certificate().extra["rows"]
    ([0, 1, 2], 'sparse')
    """

    _learners = (MEMOIR,)
    task = "extreme"

    @classmethod
    def _default_learner(cls):
        return MEMOIR()

    def __init__(self, learner=None, mips=None, loss=None, labels=None, n_features=None, rescaling=None,
                 predict_with=None):
        if mips not in (None, "auto", "exact", "hnsw", "lsh"):
            raise ValueError(f"mips must be None, 'auto', 'exact', 'hnsw' or 'lsh', got {mips!r}")
        if predict_with not in (None, "exact", "index"):
            raise ValueError(f"predict_with must be None, 'exact' or 'index', got {predict_with!r}")
        self.mips = mips
        self.predict_with = predict_with
        self.loss = loss
        self._cost_matrix = None
        if loss is not None and not callable(loss):
            Cm = np.asarray(loss, dtype=np.float64)
            if Cm.ndim != 2 or Cm.shape[0] != Cm.shape[1]:
                raise ValueError(f"loss must be a square cost matrix or a callable, got shape {Cm.shape}")
            if not np.all(np.isfinite(Cm)) or np.any(Cm < 0) or np.any(np.diag(Cm) != 0):
                raise ValueError("a cost matrix must be finite, >= 0, with a zero diagonal")
            self._cost_matrix = Cm
        self._init_common(learner, n_features, labels, rescaling)
        if self._cost_matrix is not None:
            for lab in self._labels.labels:
                self._check_label(lab)

    @classmethod
    def _unit_test_params(cls):
        yield {"learner": MEMOIR(lam=1e-3), "mips": "exact"}

    @property
    def _multiclass(self):
        return True

    def _make_structure(self):
        return LabelCost(self._cost_matrix if self._cost_matrix is not None else self.loss)

    def _overrides(self):
        new = super()._overrides()
        if self.mips is not None:
            new["mips"] = self.mips
        if self.predict_with is not None:
            new["predict_with"] = self.predict_with
        if self.learner.rows == "auto":
            f = self._features
            growing = f.array_dim is None and f.n_features is None
            new["rows"] = "sparse" if growing or f.dim > DENSE_MAX_DIM else "dense"
        return new

    def _check_restored(self):
        """The restored learner fits the restored indexes: its rows have a column for every
        feature index the feature index can produce and a label for every row (the learner's
        own state was checked by :func:`~streamssvm.learners.memoir.validate_memoir_state`)."""
        from .. import checkpoint
        lr = self._learner
        if lr.store is None:
            return
        if lr.dim < self._features.dim:
            raise checkpoint.CheckpointError(f"invalid model file: {self._features.dim} feature columns but "
                                             f"class rows of {lr.dim}")
        if lr.store.n_rows > len(self._labels):
            raise checkpoint.CheckpointError(f"invalid model file: {lr.store.n_rows} class rows, the file "
                                             f"names {len(self._labels)} labels")

    def _check_label(self, y):
        K = self._cost_matrix.shape[0]
        if not (isinstance(y, (int, np.integer)) and not isinstance(y, bool) and 0 <= y < K):
            raise ValueError(f"with a cost matrix of size {K} the labels must be integers in [0, {K}), got {y!r}")

    def _encode_example(self, x, y):
        """Validate one example whole, then encode it (registering new names and labels)."""
        if is_missing(y):
            raise ValueError("y is missing (None/NaN)")
        if self._cost_matrix is not None:
            self._check_label(y)  # before anything changes
        self._labels.check(y)
        tok_ptr, fidx, fval = self._encode_to_learn(x)
        return tok_ptr, fidx, fval, self._labels.encode(y, grow=True)

    def learn_one(self, x, y, w=1.0):
        """Learn ``(x, y)`` with importance weight ``w`` >= 0: see
        :meth:`streamssvm.MulticlassSSVM.learn_one` (w=0 learns nothing; other weights need a
        learner that takes them)."""
        cw = 1.0 if type(w) is float and w == 1.0 else self._weighted_start(x, y, w)
        if cw is None:
            return
        tok_ptr, fidx, fval, c = self._encode_example(x, y)
        lr = self._sync()
        self._last_fidx = fidx   # rows a step on this record changes (weights_finite)
        self._give(lr, tok_ptr, fidx, fval, np.array([c], dtype=np.int32), 1, cw)

    def _encode_checked(self, x, y):
        self._encode_example(x, y)

    def predict_one(self, x):
        if len(self._labels) == 0:
            return None
        if self._learner is None:
            # declared classes, nothing learned: every row is zero and scores 0; exact search
            # and the index both return the smallest class id
            return self._labels.labels[0]
        tok_ptr, fidx, fval = self._encode_to_predict(x)
        one = np.array([0, 1], dtype=np.int64)
        lr = self._learner
        # predict_with may be changed on a fitted model (it changes no learned state)
        lr.predict_with = self.predict_with or self.learner.predict_with
        c = int(lr.predict(one, tok_ptr, fidx, fval, one, 1)[0])
        return self._labels.labels[c] if c >= 0 else None

    def predict_proba_one(self, x):
        """One-hot distribution on the predicted class (an SVM gives no probabilities)."""
        y = self.predict_one(x)
        return {} if y is None else {c: float(c == y) for c in self._labels.labels}

    def predict_nbest_one(self, x, k, constraints=None):
        """The ``k`` best classes for ``x`` with their scores, best first: a list of
        ``(label, score)``; the first is ``predict_one(x)``. With ``predict_with="exact"``
        every class row is scored (the averaged rows when averaging, as ``predict_one``);
        with ``"index"`` the MIPS index's candidates are re-scored exactly and ranked, and
        when the index gives fewer than ``k`` classes the rows are scanned exactly instead.
        Scores are inner products with the (averaged) class rows; ties go to the earlier class.

        >>> import streamssvm as ss
        >>> m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact", lam=1e-3))
        >>> for i in range(30):
        ...     m.learn_one({f"w{i % 3}": 1.0}, "abc"[i % 3])
        >>> [lab for lab, score in m.predict_nbest_one({"w1": 1.0}, 3)][0]
        'b'
        """
        from ..nbest import multiclass_nbest
        k = self._check_k(k)
        if constraints is not None:
            raise ValueError("extreme classification models take no constraints")
        labs = self._labels.labels
        if len(labs) == 0:
            return []
        lr = self._learner
        if lr is None or lr.store is None or lr.store.n_rows == 0:
            return [(lab, 0.0) for lab in labs[:k]]
        tok_ptr, fidx, fval = self._features.encode_one(x, grow=False)
        idx = np.asarray(fidx, dtype=np.int64)
        val = np.asarray(fval, dtype=np.float64)
        n = lr.store.n_rows
        lr.predict_with = self.predict_with or self.learner.predict_with
        if lr.predict_with == "index" and lr.oracle is not lr._exact:
            cands, buf, m = lr.oracle.query_candidates(idx, val, -1)
            ids, first = np.unique(np.asarray(cands[:m], dtype=np.int64), return_index=True)
            if len(ids) >= min(k, n):
                s = np.asarray(buf[:m], dtype=np.float64)[first] * lr.acc
                return [(labs[int(ids[c])], score) for c, score in multiclass_nbest(s, k)]
        s = np.zeros(n)
        if lr.avg is not None and lr.avg_W > 0:
            lr._avg_scores(idx, val, s, np.zeros(n))
            s /= lr.avg_W
        else:
            lr.store.scores_into(idx, val, s)
            s *= lr.acc
        return [(labs[c], score) for c, score in multiclass_nbest(s, k)]

    def learn_many(self, X, y, w=None):
        """Learn the rows of ``X`` in order (``w``: None or one weight per row, as
        :meth:`learn_one` takes it); a bad row raises and the model is unchanged."""
        A, _ = self._as_matrix(X)
        ys = list(y)
        if len(ys) != A.shape[0]:
            raise ValueError(f"X has {A.shape[0]} rows but y has {len(ys)} labels")
        ws = weight_batch(w, len(ys))
        if ws is not None:
            return self._learn_weighted_rows(list(A), ys, ws)
        self._check_batch(self._encode_example, A, ys)   # a bad row: an error, nothing learned
        for xi, yi in zip(A, ys):
            self.learn_one(xi, yi)

    def predict_many(self, X):
        A, index = self._as_matrix(X)
        out = [self.predict_one(xi) for xi in A]
        if index is not None:
            return require_pandas("predict_many of a DataFrame").Series(out, index=index)
        return np.asarray(out, dtype=object)
