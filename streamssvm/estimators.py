"""River-compatible structural SVM estimators.

=================  ==============================  ==========================  =====================
class              river base                      x                           y
=================  ==============================  ==========================  =====================
MulticlassSSVM     ``base.Classifier``             dict or 1-D array           hashable label
MultiLabelSSVM     ``base.MultiLabelClassifier``   dict or 1-D array           dict[label, bool]
SequenceTagger     ``base.Estimator``              list of dicts or 2-D array  list of labels
=================  ==============================  ==========================  =====================

All have ``learn_one``, ``predict_one``, ``learn_many`` / ``predict_many`` (numpy or pandas
batches), ``refine(passes)``, ``certificate()``, ``save(path)`` and ``load(path)``.
"""
from __future__ import annotations

import numbers

import numpy as np
from river import base

from .features import FeatureIndex, LabelIndex
from .learners.bcfw import BCFW
from .structures import Chain, Hierarchy, MultiClass, MultiLabel

_MODEL_KIND = "streamssvm.model"
_ONE_EX = np.array([0, 1], dtype=np.int64)


def _default_learner(learner):
    from .learners.cutting_plane import CuttingPlane
    from .learners.sgd import SGD
    if learner is None:
        return BCFW()
    from .learners.base import Learner
    if not isinstance(learner, Learner):
        raise TypeError(f"learner must be a streamssvm learner such as learners.BCFW(...), learners.SGD(...) "
                        f"or learners.CuttingPlane(...), "
                        f"got {learner!r}")
    return learner


def _is_missing(v):
    return v is None or (isinstance(v, float) and v != v)


class _SSVM:
    """Shared machinery: feature / label indexing, learner binding, persistence."""

    _structure_cls = None

    def _init_common(self, learner, n_features, labels, rescaling=None):
        self.learner = _default_learner(learner)
        if rescaling not in (None, "margin", "slack"):
            raise ValueError(f"rescaling must be None, 'margin' or 'slack', got {rescaling!r}")
        if rescaling is not None and self.learner.rescaling not in ("margin", rescaling):
            raise ValueError(f"rescaling={rescaling!r} conflicts with the learner's rescaling={self.learner.rescaling!r}")
        self.rescaling = rescaling
        if n_features is not None and (not isinstance(n_features, numbers.Integral) or n_features < 1):
            raise ValueError(f"n_features must be None (growing vocabulary) or a positive int, got {n_features!r}")
        self.n_features = n_features
        if labels is not None and not isinstance(labels, (list, tuple)):
            raise TypeError("labels must be a list of the labels known up front (or None)")
        self.labels = labels
        self._features = FeatureIndex(n_features)
        self._labels = LabelIndex(labels)
        self._learner = None  # bound copy of the learner (the parameter stays a pure config)

    def _make_structure(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def _bound(self):
        if self._learner is None:
            new = {"rescaling": self.rescaling} if self.rescaling is not None else None
            self._learner = self.learner.clone(new)
            self._structure = self._make_structure()
            self._learner.bind(self._structure, self._labels.labels)
        return self._learner

    def _sync(self):
        lr = self._bound()
        lr.ensure(self._features.dim, self._labels.labels)
        return lr

    # -------------------------------------------------------------- optimization / certificates
    def refine(self, passes: float = 1.0, tol: float | None = None):
        """Block steps on the held examples (``passes`` effective passes, gap-sampled when the
        learner samples by gap); returns the certificate after refining."""
        if self._learner is None:
            raise RuntimeError("refine() needs at least one learned example")
        self._learner.refine(passes, tol=tol)
        return self._learner.certificate()

    def certificate(self):
        """Exact full duality gap of the model on the examples it holds (see
        :class:`streamssvm.certificate.Certificate`)."""
        if self._learner is None:
            from .certificate import Certificate
            return Certificate(0.0, 0.0, 0.0, 0, 0, 0.0, True, self.learner.lam, note="no examples held")
        return self._learner.certificate()

    @property
    def n_blocks(self):
        return 0 if self._learner is None else self._learner.n_blocks

    # -------------------------------------------------------------- persistence
    def _params_state(self):
        p = {}
        for k, v in self._get_params().items():
            if k == "learner":
                continue
            p[k] = v
        lp = dict(self.learner._get_params())
        return {"class": type(self).__name__, "params": p, "learner": {"class": type(self.learner).__name__,
                                                                       "params": lp}}

    def state(self):
        """Everything the model needs, as JSON leaves and numpy arrays (no pickle)."""
        if getattr(self, "loss", None) is not None and callable(self.loss):
            raise TypeError("a model with a callable loss cannot be saved; pass the cost as a matrix")
        st = {"config": self._params_state(), "features": self._features.state(),
              "labels": self._labels.state(), "learner": None}
        if self._learner is not None:
            st["learner"] = self._learner.state()
        return st

    def save(self, path):
        from . import checkpoint
        """Save to one file (zip of a JSON manifest and .npy arrays, checksummed, atomic)."""
        return checkpoint.save_state(path, self.state(), kind=_MODEL_KIND,
                                     meta={"estimator": type(self).__name__})

    @classmethod
    def from_state(cls, st):
        from . import checkpoint
        cfg = st["config"]
        if cfg["class"] != cls.__name__ and cls is not _SSVM:
            raise checkpoint.CheckpointError(f"the file holds a {cfg['class']}, not a {cls.__name__}")
        if cfg["class"] == "ExtremeClassifier":
            return ExtremeClassifier.from_state(st)
        klass = _ESTIMATORS[cfg["class"]]
        from .learners.cutting_plane import CuttingPlane
        from .learners.sgd import SGD
        lcls = {"BCFW": BCFW, "SGD": SGD, "CuttingPlane": CuttingPlane}[cfg["learner"]["class"]]
        learner = lcls(**cfg["learner"]["params"])
        params = klass._params_from_state(dict(cfg["params"]))
        if params.get("loss") is not None:
            params["loss"] = np.asarray(params["loss"])
        model = klass(learner=learner, **params)
        model._features = FeatureIndex.from_state(st["features"])
        model._labels = LabelIndex.from_state(st["labels"])
        if st["learner"] is not None:
            model._learner = learner.clone({"rescaling": params["rescaling"]} if params.get("rescaling") else None)
            model._structure = model._make_structure()
            model._learner.restore(model._structure, model._labels.labels, st["learner"])
        return model

    @classmethod
    def _params_from_state(cls, params):
        """Decode estimator parameters saved by ``_params_state`` (hook for non-JSON values)."""
        return params

    @classmethod
    def load(cls, path):
        from . import checkpoint
        st, _ = checkpoint.load_state(path, kind=_MODEL_KIND)
        return cls.from_state(st)

    # -------------------------------------------------------------- batch helpers
    @staticmethod
    def _as_matrix(X):
        try:
            import pandas as pd
            if isinstance(X, pd.DataFrame):
                return X.to_numpy(dtype=np.float64), X.index
        except ImportError:  # pragma: no cover
            pass
        A = np.asarray(X, dtype=np.float64)
        if A.ndim != 2:
            raise ValueError(f"X must be 2-D (examples x features), got shape {A.shape}")
        return A, None


class MulticlassSSVM(_SSVM, base.Classifier):
    """Multiclass structural SVM (Crammer-Singer) learned online by a dual learner.

    Parameters
    ----------
    learner
        A learner configuration, e.g. ``learners.BCFW(lam=1e-4, replay=2)`` (default BCFW()).
    loss
        Optional cost matrix over ``labels`` (K x K, zero diagonal) or callable
        ``loss(y_true, y)``; default 0/1.
    labels
        Labels known up front (needed with a cost matrix); new labels may appear anyway.
    n_features
        ``None``: growing vocabulary of dict features; int: hashing trick with that many buckets.
    rescaling
        ``"margin"`` or ``"slack"`` (paper 000): overrides the learner's ``rescaling``. The same
        parameter exists on every estimator.

    Examples
    --------
    >>> from river import datasets, evaluate, metrics, compose, preprocessing
    >>> import streamssvm as ss
    >>> model = compose.Pipeline(preprocessing.StandardScaler(),
    ...     ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-3, replay=2, seed=1)))
    >>> m = evaluate.progressive_val_score(datasets.ImageSegments(), model, metrics.Accuracy())
    >>> m.get() > 0.8
    True
    """

    def __init__(self, learner=None, loss=None, labels=None, n_features=None, rescaling=None):
        self.loss = loss
        self._init_common(learner, n_features, labels, rescaling)
        self._make_structure()  # validate the loss now

    def _make_structure(self):
        return MultiClass(cost=self.loss)

    @classmethod
    def _unit_test_params(cls):
        yield {"learner": BCFW(lam=1e-2, replay=1, seed=0)}

    @property
    def _multiclass(self):
        return True

    def learn_one(self, x, y):
        if _is_missing(y):
            raise ValueError("y is missing (None/NaN)")
        tok_ptr, fidx, fval = self._features.encode_one(x, grow=True)
        yid = self._labels.encode(y, grow=True)
        lr = self._sync()
        lr.learn(tok_ptr, fidx, fval, np.array([yid], dtype=np.int32))

    def predict_one(self, x):
        if self._learner is None or len(self._labels) == 0:
            return None
        tok_ptr, fidx, fval = self._features.encode_one(x, grow=False)
        out = self._learner.predict(_ONE_EX, tok_ptr, fidx, fval, _ONE_EX, 1)
        return self._labels.labels[out[0]]

    def predict_proba_one(self, x):
        """One-hot distribution on the predicted class (an SVM gives no probabilities)."""
        y = self.predict_one(x)
        if y is None:
            return {}
        return {c: float(c == y) for c in self._labels.labels}

    def _encode_rows(self, X, grow):
        """CSR of a batch: a DataFrame, a 2-D array, or a list of feature dicts / 1-D arrays."""
        if isinstance(X, (list, tuple)):
            if X and isinstance(X[0], dict):
                ptr = [0]
                idx: list = []
                val: list = []
                for x in X:
                    if not isinstance(x, dict):
                        raise TypeError(f"mixed batch: expected dicts, got {type(x).__name__}")
                    i, v = self._features.encode_dict(x, grow)
                    idx.extend(i)
                    val.extend(v)
                    ptr.append(len(idx))
                return (np.asarray(ptr, dtype=np.int32), np.asarray(idx, dtype=np.int32),
                        np.asarray(val, dtype=np.float64), len(X), None)
            X = np.asarray(X, dtype=np.float64) if X else np.zeros((0, max(self._features.array_dim or 1, 1)))
        A, index = self._as_matrix(X)
        if A.shape[0] == 0:
            return np.zeros(1, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0), 0, index
        tok_ptr, fidx, fval = self._features.encode_tokens(A, grow=grow)
        return tok_ptr, fidx, fval, A.shape[0], index

    def learn_many(self, X, y):
        """Learn a batch in order, as a stream, in one kernel call (``X``: a DataFrame, a 2-D
        array or a list of feature dicts; ``y``: a sequence of labels)."""
        self._learn_encoded(list(y), *self._encode_rows(X, grow=True)[:4])

    def predict_learn_many(self, X, y):
        """Progressive validation of a batch: the predictions of all rows (made before learning
        any of them), then learning them, with a single encoding of the batch."""
        ys = list(y)
        tok_ptr, fidx, fval, n, _ = self._encode_rows(X, grow=True)
        # features first seen in this batch have zero weights: encoding them before predicting
        # does not change the predictions
        if self._learner is None or len(self._labels) == 0:
            preds = [None] * n
        else:
            self._learner.ensure(self._features.dim, self._labels.labels)
            ids = self._learner.predict(np.arange(n + 1, dtype=np.int64), tok_ptr.astype(np.int64),
                                            fidx, fval, np.arange(n + 1, dtype=np.int64), n)
            labs = self._labels.labels
            preds = [labs[i] for i in ids]
        self._learn_encoded(ys, tok_ptr, fidx, fval, n)
        return preds

    def _learn_encoded(self, ys, tok_ptr, fidx, fval, n):
        if len(ys) != n:
            raise ValueError(f"X has {n} rows but y has {len(ys)} labels")
        if n == 0:
            return
        for v in ys:
            if _is_missing(v):
                raise ValueError("y contains a missing label (None/NaN)")
        # labels are indexed as they arrive, exactly as with learn_one: the batch is cut where a
        # new label appears, and each piece is learned in one kernel call
        yids = np.empty(n, dtype=np.int32)
        cuts = [0]
        for i in range(n):
            k = len(self._labels)
            yids[i] = self._labels.encode(ys[i], grow=True)
            if len(self._labels) != k and i > 0:
                cuts.append(i)
        cuts.append(n)
        tok64 = tok_ptr.astype(np.int64)
        for a, b in zip(cuts[:-1], cuts[1:]):
            if a == b:
                continue
            # grow the label set up to (and including) the label that opens this piece
            k_here = int(yids[:b].max()) + 1
            lr = self._bound()
            lr.ensure(self._features.dim, self._labels.labels[:k_here])
            lr.learn_batch(np.arange(a, b + 1, dtype=np.int64) - a, tok64[a:b + 1] - tok64[a],
                           fidx[tok64[a]:tok64[b]], fval[tok64[a]:tok64[b]],
                           np.arange(b - a + 1, dtype=np.int64), yids[a:b])
        self._sync()

    def predict_many(self, X):
        """Predictions for a batch (same inputs as :meth:`learn_many`), one kernel call."""
        if self._learner is None or len(self._labels) == 0:
            n = len(X) if isinstance(X, (list, tuple)) else self._as_matrix(X)[0].shape[0]
            out = [None] * n
            index = None if isinstance(X, (list, tuple)) else self._as_matrix(X)[1]
        else:
            tok_ptr, fidx, fval, n, index = self._encode_rows(X, grow=False)
            ids = self._learner.predict(np.arange(n + 1, dtype=np.int64), tok_ptr.astype(np.int64),
                                            fidx, fval, np.arange(n + 1, dtype=np.int64), n)
            labs = self._labels.labels
            out = [labs[i] for i in ids]
        if index is not None:
            import pandas as pd
            return pd.Series(out, index=index)
        return np.asarray(out, dtype=object) if out and not isinstance(out[0], (int, float, np.number)) else np.asarray(out)


class MultiLabelSSVM(_SSVM, base.MultiLabelClassifier):
    """Multi-label structural SVM with independent labels and normalized Hamming loss.

    ``y`` is a dict ``{label: bool}``; labels never seen before are added (an example's loss is
    normalized by the number of labels known when it arrived).

    ``pairwise=True`` adds a co-occurrence potential for every pair of labels (a fully connected
    binary MRF), decoded exactly by enumeration up to 16 labels; above that ``learners.SGD``
    solves the LP relaxation (:mod:`streamssvm.oracles.lp`) and ``learners.BCFW`` refuses.

    ``hierarchy``: hierarchical multi-label classification (paper 000, section 5.2). The labels
    are the leaves of a tree or DAG given as ``{child: parent}`` (tree), ``{child: [parents]}``
    (DAG; a value ``None`` declares a root) or a list of ``(child, parent)`` pairs; a labeling's
    score sums the potentials of every node in the ancestor closure of its positive leaves, the
    loss is the Hamming distance over the leaves divided by the number of leaves. The label set
    is fixed by the hierarchy (a label outside it is an error); ``predict_one`` returns every
    leaf. Inference is exact: tree dynamic programs, or enumeration for DAGs up to 16 leaves.
    Works with BCFW and SGD, margin or slack rescaling (see :mod:`streamssvm.structures.hierarchy`).

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

    def __init__(self, learner=None, n_features=None, labels=None, rescaling=None, pairwise=False,
                 hierarchy=None):
        self.pairwise = bool(pairwise)
        self.hierarchy = hierarchy
        self._hier = None
        if hierarchy is not None:
            if self.pairwise:
                raise ValueError("pairwise=True and hierarchy=... are two different structures; choose one")
            self._hier = Hierarchy(hierarchy)
            if labels is not None and (not isinstance(labels, (list, tuple))
                                       or set(labels) != set(self._hier.leaves)):
                raise ValueError("with a hierarchy the labels are its leaves; pass labels=None (or exactly "
                                 f"the leaves {self._hier.leaves!r})")
        self._init_common(learner, n_features, labels, rescaling)
        if self._hier is not None:
            self._labels = LabelIndex(self._hier.nodes)

    def _make_structure(self):
        if self.hierarchy is not None:
            return Hierarchy(self.hierarchy)
        from .learners.sgd import SGD
        # SGD calls its oracles from Python and can solve the LP relaxation above 16 labels
        return MultiLabel(pairwise=self.pairwise, inference="auto" if isinstance(self.learner, SGD) else "enum")

    def _params_state(self):
        st = super()._params_state()
        if self.hierarchy is not None:
            from .features import _encode_key
            pairs = Hierarchy.parse(self.hierarchy)
            st["params"]["hierarchy"] = {"pairs": [[_encode_key(c), None if p is None else _encode_key(p)]
                                                   for c, p in pairs]}
        return st

    @classmethod
    def _params_from_state(cls, params):
        h = params.get("hierarchy")
        if isinstance(h, dict) and set(h) == {"pairs"}:
            from .features import _decode_key
            params["hierarchy"] = [(_decode_key(c), None if p is None else _decode_key(p)) for c, p in h["pairs"]]
        return params

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
            if bool(v):
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
            if v is not None and bool(v):
                pos.append(j)
        return h.closure(pos)

    def learn_one(self, x, y):
        tok_ptr, fidx, fval = self._features.encode_one(x, grow=True)
        pos = self._encode_y(y)
        lr = self._sync()
        Ki = self._hier.n_leaves if self._hier is not None else len(self._labels)
        lr.learn(tok_ptr, fidx, fval, pos, Ki=max(Ki, 1))

    def predict_one(self, x):
        if self._learner is None or len(self._labels) == 0:
            if self._hier is not None:
                return {lab: False for lab in self._hier.leaves}
            return {}
        tok_ptr, fidx, fval = self._features.encode_one(x, grow=False)
        Kc = self._learner.W.Kc
        out = self._learner.predict(np.array([0, 1], dtype=np.int64), tok_ptr.astype(np.int64),
                                        fidx, fval, np.array([0, Kc], dtype=np.int64), Kc)
        labs = self._labels.labels if self._hier is None else self._hier.leaves
        return {lab: bool(out[k]) for k, lab in enumerate(labs)}

    def learn_many(self, X, Y):
        """``Y``: a DataFrame of booleans (one column per label) or a list of dicts."""
        A, _ = self._as_matrix(X)
        try:
            import pandas as pd
            rows = Y.to_dict(orient="records") if isinstance(Y, pd.DataFrame) else list(Y)
        except ImportError:  # pragma: no cover
            rows = list(Y)
        if len(rows) != A.shape[0]:
            raise ValueError(f"X has {A.shape[0]} rows but Y has {len(rows)}")
        for i in range(A.shape[0]):
            self.learn_one(A[i], rows[i])

    def predict_many(self, X):
        A, index = self._as_matrix(X)
        preds = [self.predict_one(A[i]) for i in range(A.shape[0])]
        import pandas as pd
        return pd.DataFrame(preds, index=index)


class SequenceTagger(_SSVM, base.Estimator):
    """Sequence labeling (chain structural SVM, Viterbi decoding).

    ``x`` is a list of per-token feature dicts or a (L, d) array; ``y`` a list of L labels.

    Examples
    --------
    >>> import numpy as np, streamssvm as ss
    >>> tagger = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, replay=3, seed=0))
    >>> for i in range(60):
    ...     words = ["the", "dog", "runs"] if i % 2 else ["a", "cat", "sleeps"]
    ...     tagger.learn_one([{"w=" + w: 1} for w in words], ["DET", "NOUN", "VERB"])
    >>> tagger.predict_one([{"w=the": 1}, {"w=cat": 1}, {"w=runs": 1}])
    ['DET', 'NOUN', 'VERB']
    """

    def __init__(self, learner=None, loss=None, transitions=True, labels=None, n_features=None, rescaling=None):
        self.loss = loss
        self.transitions = bool(transitions)
        self._init_common(learner, n_features, labels, rescaling)
        self._make_structure()

    def _make_structure(self):
        return Chain(cost=self.loss, transitions=self.transitions)

    @classmethod
    def _unit_test_params(cls):
        yield {"learner": BCFW(lam=1e-2, replay=1, seed=0)}

    def _encode_seq(self, x, y):
        tok_ptr, fidx, fval = self._features.encode_tokens(x, grow=True)
        if isinstance(y, (str, bytes)) or not hasattr(y, "__len__"):
            raise TypeError(f"y must be a list of labels (one per token), got {type(y).__name__}")
        L = len(tok_ptr) - 1
        if len(y) != L:
            raise ValueError(f"x has {L} tokens but y has {len(y)} labels")
        ys = np.empty(L, dtype=np.int32)
        for t, lab in enumerate(y):
            if _is_missing(lab):
                raise ValueError(f"label of token {t} is missing")
            ys[t] = self._labels.encode(lab, grow=True)
        return tok_ptr, fidx, fval, ys

    def learn_one(self, x, y):
        tok_ptr, fidx, fval, ys = self._encode_seq(x, y)
        lr = self._sync()
        lr.learn(tok_ptr, fidx, fval, ys)

    def predict_one(self, x):
        if self._learner is None or len(self._labels) == 0:
            if not isinstance(x, (list, tuple, np.ndarray)):
                raise TypeError(f"a sequence must be a list of feature dicts or a 2-D array, got {type(x).__name__}")
            return [None] * len(x)
        tok_ptr, fidx, fval = self._features.encode_tokens(x, grow=False)
        L = len(tok_ptr) - 1
        out = self._learner.predict(np.array([0, L], dtype=np.int64), tok_ptr.astype(np.int64),
                                        fidx, fval, np.array([0, L], dtype=np.int64), L)
        labs = self._labels.labels
        return [labs[i] for i in out]

    def learn_many(self, X, Y):
        """Learn a list of sequences in order."""
        X = list(X)
        Y = list(Y)
        if len(X) != len(Y):
            raise ValueError(f"got {len(X)} sequences but {len(Y)} label sequences")
        for x, y in zip(X, Y):
            self.learn_one(x, y)

    def predict_many(self, X):
        """Predict a list of sequences in one kernel call."""
        X = list(X)
        if not X:
            return []
        ptrs, fids, fvals, lens = [], [], [], []
        off = 0
        for x in X:
            tp, fi, fv = self._features.encode_tokens(x, grow=False)
            ptrs.append(tp[:-1].astype(np.int64) + off)
            fids.append(fi)
            fvals.append(fv)
            off += len(fi)
            lens.append(len(tp) - 1)
        if self._learner is None or len(self._labels) == 0:
            return [[None] * n for n in lens]
        tok_ptr = np.concatenate(ptrs + [np.array([off], dtype=np.int64)])
        ex_tok = np.zeros(len(X) + 1, dtype=np.int64)
        np.cumsum(lens, out=ex_tok[1:])
        out = self._learner.predict(ex_tok, tok_ptr, np.concatenate(fids), np.concatenate(fvals),
                                        ex_tok, int(ex_tok[-1]))
        labs = self._labels.labels
        return [[labs[i] for i in out[ex_tok[e]:ex_tok[e + 1]]] for e in range(len(X))]


_ESTIMATORS = {"MulticlassSSVM": MulticlassSSVM, "MultiLabelSSVM": MultiLabelSSVM,
               "SequenceTagger": SequenceTagger}


class ExtremeClassifier(base.Classifier):
    """Multiclass with very many classes (MEMOIR, paper 004): Crammer-Singer SVM trained by SGD
    whose most-violating class comes from a maximum-inner-product index over the class rows.

    Parameters
    ----------
    variant, mips, lam, batch_size
        See :class:`streamssvm.learners.MEMOIR` (``"l2"`` / ``"l1"``; ``"exact"`` / ``"hnsw"`` /
        ``"lsh"``).
    predict_exact
        Kept for compatibility: False is ``predict_with="index"``.
    window
        Examples kept to report the primal objective in :meth:`certificate`.
    n_features
        Hashing trick buckets (None: growing vocabulary / array input).
    rows
        ``"auto"`` (dense class rows for array input of at most 4096 columns, sparse rows —
        memory O(nnz(W)) — for dict input, the hashing trick or wider arrays), ``"dense"`` or
        ``"sparse"``. Both give the same model.
    loss
        None (Crammer-Singer: cost 1 for every wrong class), a cost matrix ``C[y, c]`` (labels
        must then be the integers 0..K-1) or a callable ``loss(y_true, y) -> float >= 0`` with
        ``loss(y, y) == 0`` (cached per true class).
    rescaling
        With a ``loss``: ``"margin"`` (most violating class maximizes C[y,c] + s_c - s_y) or
        ``"slack"`` (maximizes C[y,c] (1 + s_c - s_y); the step is scaled by C[y,c]). With an
        index the choice is made among its candidates, re-scored exactly (inexact; measured in
        ``certificate().extra``); the exact oracle scores every class.
    predict_with
        ``"exact"`` (every row, the paper's choice; sparse rows make it cheap) or ``"index"``.
    ef, M, ef_construction
        hnswlib search breadth and graph parameters (``mips="hnsw"``).
    labels
        Classes known up front (a list), registered in that order: the model holds a (zero)
        row for each from its first example on, so every search faces all of them (zero rows
        stay out of an index, the smallest one standing for all; exact search scores them 0)
        and a declared class can be predicted before it is learned. Labels not declared still
        grow the set when they arrive. With a cost matrix they must be integers in [0, K).

    Examples
    --------
    >>> import numpy as np, streamssvm as ss
    >>> rng = np.random.default_rng(0)
    >>> centers = rng.normal(size=(200, 16))
    >>> m = ss.ExtremeClassifier(mips="hnsw", lam=1e-4, seed=0)
    >>> for _ in range(4000):
    ...     c = int(rng.integers(200)); m.learn_one(centers[c] + 0.1 * rng.normal(size=16), c)
    >>> bool(np.mean([m.predict_one(centers[c]) == c for c in range(200)]) > 0.9)
    True

    Dict input (a growing vocabulary) uses sparse rows; a cost matrix with slack rescaling:

    >>> C = 1.0 - np.eye(3); C[0, 2] = C[2, 0] = 3.0
    >>> m = ss.ExtremeClassifier(mips="exact", loss=C, rescaling="slack", lam=1e-3)
    >>> for i in range(300):
    ...     y = i % 3; m.learn_one({f"w{y}": 1.0, f"n{i % 7}": 0.5}, y)
    >>> [m.predict_one({f"w{y}": 1.0}) for y in range(3)], m._learner.kind
    ([0, 1, 2], 'sparse')
    """

    def __init__(self, variant="l2", mips="hnsw", lam=1e-4, batch_size=1, eta0=0.1, eta_step=0.02,
                 k=10, max_dirty=256, sketch_dim=None, predict_exact=True, window=1000,
                 n_features=None, check_every=100, seed=0, rows="auto", loss=None, rescaling="margin",
                 predict_with="exact", ef=200, M=16, ef_construction=100, labels=None):
        from .learners.memoir import MEMOIR
        self.variant, self.mips, self.lam, self.batch_size = variant, mips, lam, batch_size
        self.eta0, self.eta_step, self.k, self.max_dirty = eta0, eta_step, k, max_dirty
        self.sketch_dim, self.predict_exact, self.window = sketch_dim, predict_exact, window
        self.n_features, self.check_every, self.seed = n_features, check_every, seed
        self.rows, self.loss, self.rescaling, self.predict_with, self.ef = rows, loss, rescaling, predict_with, ef
        self.M, self.ef_construction = M, ef_construction
        if labels is not None and not isinstance(labels, (list, tuple)):
            raise TypeError("labels must be a list of the labels known up front (or None)")
        self.labels = labels
        if predict_with not in ("exact", "index"):
            raise ValueError(f"predict_with must be 'exact' or 'index', got {predict_with!r}")
        self._cost_matrix = None
        if loss is not None and not callable(loss):
            Cm = np.asarray(loss, dtype=np.float64)
            if Cm.ndim != 2 or Cm.shape[0] != Cm.shape[1]:
                raise ValueError(f"loss must be a square cost matrix or a callable, got shape {Cm.shape}")
            if not np.all(np.isfinite(Cm)) or np.any(Cm < 0) or np.any(np.diag(Cm) != 0):
                raise ValueError("a cost matrix must be finite, >= 0, with a zero diagonal")
            self._cost_matrix = Cm
        self._cfg = dict(lam=lam, variant=variant, mips=mips, batch_size=batch_size, eta0=eta0,
                         eta_step=eta_step, k=k, max_dirty=max_dirty, sketch_dim=sketch_dim,
                         check_every=check_every, seed=seed, rows=rows, rescaling=rescaling, ef=ef, M=M,
                         ef_construction=ef_construction)
        MEMOIR(**self._cfg)  # validate now
        self._features = FeatureIndex(n_features)
        self._learner = None
        self._recent = []
        self._lab = np.zeros(16, dtype=np.int64)   # internal class -> matrix index (cost matrix)
        from collections import OrderedDict
        self._cost_cache = OrderedDict()
        if labels is not None:
            for lab in labels:
                if _is_missing(lab):
                    raise ValueError("labels must not contain None/NaN")
                if self._cost_matrix is not None:
                    self._check_label(lab)
        self._labels = LabelIndex(labels)   # declared classes first, in order (rows at first use)
        for c, lab in enumerate(self._labels.labels):
            self._register(lab, c)

    @classmethod
    def _unit_test_params(cls):
        yield {"mips": "exact", "lam": 1e-3}

    @property
    def _multiclass(self):
        return True

    def _lr(self):
        if self._learner is None:
            from .learners.memoir import MEMOIR
            self._learner = MEMOIR(**self._cfg)
            f = self._features
            self._learner.bind(f.dim, growing=f.array_dim is None and f.n_features is None)
            self._attach_cost()
        return self._learner

    # ------------------------------------------------------------------ costs
    def _attach_cost(self):
        if self.loss is not None:
            self._learner.set_cost(self._costs)

    def _costs(self, y, cands, m):
        """Delta(y, cands[q]) for q < m (internal class ids)."""
        if self._cost_matrix is not None:
            return self._cost_matrix[self._lab[y], self._lab[cands[:m]]]
        n = len(self._labels)
        row = self._cost_cache.get(y)
        if row is None or row.shape[0] < n:
            new = np.full(max(n, 16), np.nan)
            if row is not None:
                new[:row.shape[0]] = row
            row = new
            self._cost_cache[y] = row
        self._cost_cache.move_to_end(y)
        if len(self._cost_cache) > 1024:
            self._cost_cache.popitem(last=False)
        c = cands[:m]
        out = row[c]
        miss = np.flatnonzero(np.isnan(out))
        if miss.size:
            labels, ly = self._labels.labels, self._labels.labels[y]
            for q in miss:
                v = float(self.loss(ly, labels[c[q]]))
                if not (v >= 0 and np.isfinite(v)) or (c[q] == y and v != 0):
                    raise ValueError(f"loss({ly!r}, {labels[c[q]]!r}) = {v!r}: it must be finite, >= 0, and 0 "
                                     "for the true class")
                row[c[q]] = v
                out[q] = v
        return out

    def _check_label(self, y):
        K = self._cost_matrix.shape[0]
        if not (isinstance(y, (int, np.integer)) and not isinstance(y, bool) and 0 <= y < K):
            raise ValueError(f"with a cost matrix of size {K} the labels must be integers in [0, {K}), got {y!r}")

    def _register(self, y, c):
        if self._cost_matrix is None:
            return
        self._check_label(y)
        if c >= self._lab.shape[0]:
            lab = np.zeros(max(c + 1, 2 * self._lab.shape[0]), dtype=np.int64)
            lab[:self._lab.shape[0]] = self._lab
            self._lab = lab
        self._lab[c] = int(y)

    def learn_one(self, x, y):
        if _is_missing(y):
            raise ValueError("y is missing (None/NaN)")
        if self._cost_matrix is not None:
            self._check_label(y)  # before anything changes
        tok_ptr, fidx, fval = self._features.encode_one(x, grow=True)
        c = self._labels.encode(y, grow=True)
        self._register(y, c)
        lr = self._lr()
        lr.ensure(len(self._labels), self._features.dim)
        idx = fidx.astype(np.int64)
        lr.learn(idx, fval, c)
        if self.window:
            self._recent.append((idx, fval, c))
            if len(self._recent) > self.window:
                del self._recent[: len(self._recent) - self.window]

    def predict_one(self, x):
        if len(self._labels) == 0:
            return None
        if self._learner is None:
            # declared classes, nothing learned: every row is zero and scores 0; exact search
            # and the index both return the smallest class id
            return self._labels.labels[0]
        tok_ptr, fidx, fval = self._features.encode_one(x, grow=False)
        exact = self.predict_with == "exact" and self.predict_exact
        c = self._learner.predict(fidx.astype(np.int64), fval, exact=exact)
        return self._labels.labels[c] if c >= 0 else None

    def predict_proba_one(self, x):
        y = self.predict_one(x)
        return {} if y is None else {c: float(c == y) for c in self._labels.labels}

    def learn_many(self, X, y):
        A, _ = _SSVM._as_matrix(X)
        for xi, yi in zip(A, y):
            self.learn_one(xi, yi)

    def predict_many(self, X):
        A, index = _SSVM._as_matrix(X)
        out = [self.predict_one(xi) for xi in A]
        if index is not None:
            import pandas as pd
            return pd.Series(out, index=index)
        return np.asarray(out, dtype=object)

    def state(self):
        """Everything the model needs, as JSON leaves and numpy arrays (no pickle); the MIPS
        index is rebuilt from the rows on load."""
        if callable(self.loss):
            raise ValueError("a model with a callable loss cannot be saved (no pickle); use a cost matrix")
        params = dict(self._get_params())
        if params.get("loss") is not None:
            params["loss"] = np.asarray(params["loss"], dtype=np.float64)
        if params.get("labels") is not None:
            from .features import _encode_key
            params["labels"] = [_encode_key(lab) for lab in params["labels"]]
        return {"config": {"class": "ExtremeClassifier", "params": params},
                "features": self._features.state(), "labels": self._labels.state(),
                "learner": None if self._learner is None else self._learner.state(),
                "recent": [{"idx": i, "val": v, "c": int(c)} for i, v, c in self._recent]}

    def save(self, path):
        """Save to one file (see :func:`streamssvm.checkpoint.save_state`)."""
        from . import checkpoint
        return checkpoint.save_state(path, self.state(), kind=_MODEL_KIND, meta={"estimator": "ExtremeClassifier"})

    @classmethod
    def from_state(cls, st):
        params = dict(st["config"]["params"])
        if params.get("labels") is not None:
            from .features import _decode_key
            params["labels"] = [_decode_key(lab) for lab in params["labels"]]
        m = cls(**params)
        m._features = FeatureIndex.from_state(st["features"])
        m._labels = LabelIndex.from_state(st["labels"])
        if st["learner"] is not None:
            from .learners.memoir import MEMOIR
            m._learner = MEMOIR(**m._cfg)
            m._attach_cost()
            m._learner.restore(st["learner"])
        for c, lab in enumerate(m._labels.labels):
            m._register(lab, c)
        m._recent = [(np.asarray(r["idx"], dtype=np.int64), np.asarray(r["val"], dtype=np.float64), int(r["c"]))
                     for r in st["recent"]]
        return m

    @classmethod
    def load(cls, path):
        from . import checkpoint
        st, _ = checkpoint.load_state(path, kind=_MODEL_KIND)
        if st["config"]["class"] != "ExtremeClassifier":
            raise checkpoint.CheckpointError(f"the file holds a {st['config']['class']}, not an ExtremeClassifier")
        return cls.from_state(st)

    def certificate(self):
        """The primal objective on the last ``window`` examples (exact scores of every class)
        and the learner's diagnostics in ``extra``: recall@1 of the index against exact search
        and the margin error epsilon on sampled steps, for a cost loss the agreement of the
        candidate-restricted choice with the exact one and the violation ratio, the index
        staleness (dirty set, changes since the last re-index, drift bound), the row store
        size. MEMOIR keeps no dual point (its eta schedule, projection and truncation do not
        give w = A alpha), so the gap reported is +inf (a trivially valid bound) and ``exact``
        is False."""
        import time as _t

        from .certificate import Certificate
        t0 = _t.perf_counter()
        lr = self._learner
        if lr is None or not self._recent:
            return Certificate(float("inf"), float("nan"), float("-inf"), 0, 0, 0.0, False, self.lam,
                               note="no examples held")
        st = lr.store
        n_rows = st.n_rows
        buf = np.zeros(max(n_rows, 1))
        allc = np.arange(n_rows, dtype=np.int64)
        slack = self.rescaling == "slack"
        hinge = 0.0
        for idx, val, c in self._recent:
            st.scores_into(idx, val, buf)
            s = buf[:n_rows] * lr.acc
            m = s - s[c]
            if self.loss is None:
                m = 1.0 + m
            else:
                cost = np.asarray(self._costs(c, allc, n_rows), dtype=np.float64)
                m = cost * (1.0 + m) if slack else cost + m
            m[c] = 0.0
            hinge += max(0.0, float(m.max()))
        n = len(self._recent)
        if self.variant == "l2":
            reg = 0.5 * self.lam * st.sq * lr.acc * lr.acc
        else:
            reg = 0.5 * self.lam * st.l1() * lr.acc
        primal = reg + hinge / n
        return Certificate(float("inf"), primal, float("-inf"), n, n, _t.perf_counter() - t0, False, self.lam,
                           regularizer=reg, hinge=hinge / n, rescaling=self.rescaling,
                           note="primal only: MEMOIR keeps no dual point (gap reported as +inf)",
                           extra=lr.diagnostics())
