"""Multiclass structural SVM (Crammer-Singer) learned online by a dual learner."""
from __future__ import annotations

import warnings

import numpy as np
from river import base

from .. import calibration
from ..learners.base import state_version
from ..learners.bcfw import BCFW
from ..learners.cutting_plane import CuttingPlane
from ..learners.sgd import SGD
from ..learners.bmrm import BMRM
from ..learners.pragam import Pragam
from ..structures import MultiClass
from .base import ONE_EX, Estimator, check_weight, is_missing, require_pandas, weight_batch
from ..features import _INT_LIMIT, FeatureDicts, _decode_key, _encode_key

_NOT_TAKEN = object()   # _predict_learn_record: the record goes the Python way
_PLAIN_LABELS = {int, str}   # label types whose known values need no check (_known_label_ids)
_F64 = np.dtype(np.float64)
_I64 = np.int64


def _label_batch(y):
    """The labels of a batch: a 1-D integer (or bool) numpy array as is (validated and encoded
    with array operations), anything else as a list.

    >>> _label_batch(np.array([3, 1])).dtype.kind, _label_batch(("a", "b"))
    ('i', ['a', 'b'])
    """
    if isinstance(y, np.ndarray) and y.ndim == 1 and y.dtype.kind in "biu":
        return y
    return list(y)


class MulticlassSSVM(Estimator, base.Classifier):
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
        ``"margin"`` or ``"slack"`` (Choi, Meshi & Srebro, AISTATS 2016): overrides the learner's ``rescaling``. The same
        parameter exists on every estimator.
    scale
        Online feature scaling (default True): each feature divided by the running RMS of its
        non-zero values, learned with the model, applied at prediction; 0/1 features keep their
        values (:mod:`streamssvm.scaling`). Also on ``MultiLabelSSVM``.
    max_labels
        The most labels the model takes (default 4096; None: no limit). Its learners score
        every label at every step and keep label-wide statistics, so time and memory grow with
        the label count (measured at 10,000 labels: BCFW 11.6 ms and SGD 13.8 ms of CPU per
        record, 1.6 GB and 0.8 GB of RSS after 2,000 records; ExtremeClassifier, whose MEMOIR
        learner scores only the labels an inner-product index returns, learns the same stream
        far faster). A record with a label beyond it raises ``ValueError`` naming
        :class:`streamssvm.ExtremeClassifier` (a dead letter in a run) and the model is unchanged.
    class_weight
        ``None`` (default), a dict ``{label: weight}`` (weights finite and >= 0; labels not in
        it weigh 1) or ``"balanced"``: each learned example's weight (``learn_one``'s ``w``) is
        multiplied by its class's weight. ``"balanced"`` is scikit-learn's
        n_samples / (n_classes * count(y)) computed online: when a record of class y is learned,
        its factor is n / (K * n_y) with n the examples learned so far (this one included, w=0
        records not counted), K the classes among them and n_y those of class y. An example
        keeps the factor it was learned with (earlier examples are not reweighted as the counts
        move); the counts are saved with the model. Needs a learner that takes example weights
        (``learners.SGD``, ``learners.BCFW``), unless every weight of the dict is 1.

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

    _learners = (BCFW, SGD, CuttingPlane, BMRM, Pragam)
    task = "multiclass"

    @classmethod
    def _default_learner(cls):
        return BCFW()

    def __init__(self, learner=None, loss=None, labels=None, n_features=None, rescaling=None, scale=True, max_labels=4096,
                 class_weight=None):
        if max_labels is not None and (not isinstance(max_labels, int) or isinstance(max_labels, bool)
                                       or not 1 <= max_labels <= 1 << 31):
            raise ValueError(f"max_labels must be None or an int in [1, 2**31], got {max_labels!r}")
        self.max_labels = max_labels
        self.loss = loss
        self._init_common(learner, n_features, labels, rescaling, scale)
        self._make_structure()  # validate the loss now
        self.class_weight = class_weight
        self._class_weights = None if class_weight is None else self._check_class_weight(class_weight)
        self._class_counts = {}   # "balanced": examples learned per class

    def _check_class_weight(self, cw):
        """``class_weight`` checked: a dict of finite weights >= 0 (copied) or "balanced"; a
        learner that takes no example weights gets only a dict of ones."""
        if isinstance(cw, str):
            if cw != "balanced":
                raise ValueError(f"class_weight must be None, a dict {{label: weight}} or 'balanced', got {cw!r}")
            out = cw
        elif isinstance(cw, dict):
            out = {}
            for lab, v in cw.items():
                if is_missing(lab):
                    raise ValueError("class_weight labels must not be None/NaN")
                try:
                    out[lab] = check_weight(v)
                except (TypeError, ValueError) as e:
                    raise type(e)(f"class_weight[{lab!r}]: {e}") from None
        else:
            raise TypeError(f"class_weight must be None, a dict {{label: weight}} or 'balanced', got {cw!r}")
        if (out == "balanced" or any(v != 1.0 for v in out.values())) and (
                not type(self.learner).example_weights or getattr(self.learner, "weights_refused", lambda: None)()):
            raise ValueError(f"class_weight={cw!r} weighs examples, which {type(self.learner).__name__} does not "
                             "take: use learners.SGD")
        return out

    def _class_factor(self, y):
        """The class weight of a record of label ``y`` about to be learned (``"balanced"``: counts
        it first)."""
        cw = self._class_weights
        if cw != "balanced":
            return cw.get(y, 1.0)
        counts = self._class_counts
        counts[y] = counts.get(y, 0) + 1
        n = sum(counts.values())
        return n / (len(counts) * counts[y])

    def _learn_class_weighted(self, x, y, w):
        """``learn_one`` with ``class_weight``: the record checked whole, then learned with its
        weight times its class's."""
        c = check_weight(w)
        self._check_record(x, y)
        if c == 0.0:
            return
        self._learn_weighted_one(x, y, c * self._class_factor(y))

    def _make_structure(self):
        return MultiClass(cost=self.loss)

    def _params_state(self):
        st = super()._params_state()
        cw = st["params"].get("class_weight")
        if isinstance(cw, dict):   # JSON keys are strings: the labels as encoded keys
            st["params"]["class_weight"] = {"pairs": [[_encode_key(k), float(v)] for k, v in cw.items()]}
        return st

    @classmethod
    def _params_from_state(cls, params):
        params = super()._params_from_state(params)
        cw = params.get("class_weight")
        if isinstance(cw, dict):
            params["class_weight"] = {_decode_key(k): v for k, v in cw["pairs"]}
        return params

    def state(self):
        st = super().state()
        if self._class_weights == "balanced":
            st["class_counts"] = [[_encode_key(k), int(v)] for k, v in self._class_counts.items()]
        return st

    @classmethod
    def from_state(cls, st):
        model = super().from_state(st)
        if model._class_weights == "balanced":
            counts = {}
            for k, v in st.get("class_counts", []):
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    from ..errors import CheckpointError
                    raise CheckpointError(f"invalid model file: class count {v!r}")
                counts[_decode_key(k)] = v
            model._class_counts = counts
        return model

    @classmethod
    def _unit_test_params(cls):
        yield {"learner": BCFW(lam=1e-2, replay=1, seed=0)}

    #: label count from which a dense-score learner is pointed to ExtremeClassifier (a warning,
    #: once per model): BCFW, SGD, CuttingPlane, BMRM and Pragam score every label at every
    #: step and keep K-wide statistics, so their time and memory grow with K (at 4k labels BCFW
    #: took 90 s and 1 GB on a stream MEMOIR learns in 0.8 s)
    MANY_LABELS = 2000

    _synced = None       # the learner learn_one last grew, and to what (features, labels)
    _warned_many = False

    def _sync(self):
        lr = super()._sync()
        if len(self._labels) >= self.MANY_LABELS and not self._warned_many:
            self._warned_many = True
            warnings.warn(f"MulticlassSSVM with {type(lr).__name__} now has {len(self._labels)} labels: it "
                          "scores every label at every step, so its time and memory grow with the label "
                          "count; for thousands of labels use streamssvm.ExtremeClassifier (MEMOIR: an "
                          "inner-product index scores only the labels a step needs)",
                          ResourceWarning, stacklevel=3)
        return lr
    _synced_key = None

    @property
    def _multiclass(self):
        return True

    def _too_many_labels(self, label):
        return ValueError(
            f"label {label!r} would be label {self.max_labels + 1} of a MulticlassSSVM with max_labels="
            f"{self.max_labels}: its {type(self.learner).__name__} learner scores every label at every step, so "
            f"time and memory grow with the label count; for thousands of labels use "
            f"streamssvm.ExtremeClassifier (run --task extreme: MEMOIR scores only the labels an "
            f"inner-product index returns), or raise max_labels (None: no limit)")

    def _check_label_room(self):
        """Raise when the labels registered exceed ``max_labels`` (inside ``_registering``,
        which forgets them)."""
        if self.max_labels is not None and len(self._labels) > self.max_labels:
            raise self._too_many_labels(self._labels.labels[self.max_labels])

    def learn_one(self, x, y, w=1.0):
        """Learn ``(x, y)`` with importance weight ``w`` >= 0 (river's signature): the example's
        c_i in the objective lam/2 ||w||^2 + (1 / sum_i c_i) sum_i c_i H_i(w), normalized by the
        total weight so that weight 2 is the example learned twice at the optimum. ``w=0`` learns
        nothing (the record is still checked); other weights need a learner that takes them
        (:attr:`Learner.example_weights`: SGD, BCFW, CuttingPlane, BMRM, Pragam, MEMOIR, GDMM). A bad record or weight raises
        before anything changes."""
        if self._class_weights is not None:
            return self._learn_class_weighted(x, y, w)
        return self._learn_weighted_one(x, y, w)

    def _learn_weighted_one(self, x, y, w):
        c = 1.0 if type(w) is float and w == 1.0 else self._weighted_start(x, y, w)
        if c is None:
            return
        self._check_y(y)  # validate the whole example before any state changes
        tok_ptr, fidx, fval = self._encode_to_learn(x)   # predict_one's encoding of x, if reusable
        self._learn_arrays(tok_ptr, fidx, fval, self._labels.encode(y, grow=True), c)

    def _check_y(self, y):
        """Raise what ``learn_one`` raises for the label ``y`` (missing, invalid, or beyond
        ``max_labels``); changes nothing. A ``str``, a ``bool``, a 64-bit ``int`` or a
        ``numpy.int64`` is a valid label (``check_label``): then only ``max_labels`` is checked."""
        t = type(y)
        if not (t is str or t is _I64 or t is bool or (t is int and -_INT_LIMIT <= y < _INT_LIMIT)):
            if is_missing(y):
                raise ValueError("y is missing (None/NaN)")
            self._labels.check(y)
        if self.max_labels is not None and len(self._labels) >= self.max_labels and y not in self._labels.index:
            raise self._too_many_labels(y)

    def _encode_checked(self, x, y):
        if is_missing(y):
            raise ValueError("y is missing (None/NaN)")
        self._labels.check(y)
        if self.max_labels is not None and len(self._labels) >= self.max_labels and y not in self._labels.index:
            raise self._too_many_labels(y)
        self._features.encode_one(x, grow=True)
        self._labels.encode(y, grow=True)

    def _learn_arrays(self, tok_ptr, fidx, fval, yid, c=1.0):
        """Learn one encoded example whose features and label are registered."""
        # the learner is grown (``ensure``) only when a feature or a label was added since the
        # last learn_one: the call costs more than the rest of a 16-feature array row's path
        lr = self._learner
        dim = self._features.dim
        key = (dim, len(self._labels.labels))
        if lr is None or self._synced is not lr or self._synced_key != key:
            lr = self._sync()
            self._synced, self._synced_key = lr, key
        self._observe_calibration(tok_ptr, fidx, fval, yid)   # scored as predicted
        self._last_fidx = fidx   # rows a step on this record changes (weights_finite)
        # one encoded row, its columns below the index's dim (the statistics grown to it)
        lval = fval if self._scaler is None else self._scaler.learn_row(fidx, fval, dim)
        self._give(lr, tok_ptr, fidx, lval, np.array([yid], dtype=np.int32), 1, c)

    def predict_one(self, x):
        if self._learner is None or not self._labels.labels:
            return None
        return self._predict_arrays(*self._encode_to_predict(x))

    def _predict_arrays(self, tok_ptr, fidx, fval):
        lr = self._learner
        if not type(lr).predicts_classes:
            return self._labels.labels[lr.predict(ONE_EX, tok_ptr, fidx, fval, ONE_EX, 1)[0]]
        # when the temperature fit observes the next record learned: its scores now, in the
        # prediction's kernel call, for a learn_one of these arrays (_observe_calibration)
        t = self._temperature
        if t is None:
            t = self._calibrator()
        scored = lr.n_labels >= 2 and t.would_want()
        pid, S = lr.predict_class(tok_ptr, fidx, fval, scored)
        if scored:
            self._predicted_scores = (fidx, S, lr, state_version(lr))
        return self._labels.labels[pid]

    #: (fidx, class scores, learner, its state_version) of the last prediction that scored its
    #: record for the temperature fit (:meth:`_predict_arrays`)
    _predicted_scores = None

    def _scores_predicted(self, fidx):
        """The class scores the last prediction took of the record of feature ids ``fidx`` (the
        same array object: ``learn_one`` reusing ``predict_one``'s encoding) when the learner
        has not changed since (the scores at its current weights, of the values scaled by the
        same statistics: they change only with a learned record), else None."""
        got = self._predicted_scores
        if got is None or got[0] is not fidx:
            return None
        self._predicted_scores = None
        lr = self._learner
        return got[1] if got[2] is lr and got[3] == state_version(lr) else None

    def predict_learn_one(self, x, y, w=1.0):
        """Predict ``x``, then learn ``(x, y)`` (weight ``w``), encoding ``x`` once (validated
        whole first); the prediction and the learned state are those of ``predict_one`` then
        ``learn_one`` (which a subclass overriding either gets: predict_one, then learn_one; and
        a weight other than 1)."""
        cls = type(self)
        if (cls.learn_one is not MulticlassSSVM.learn_one or cls.predict_one is not MulticlassSSVM.predict_one
                or not (type(w) is float and w == 1.0) or self._class_weights is not None):
            return Estimator.predict_learn_one(self, x, y, w)
        if self._learner is None or not self._labels.labels:
            self.learn_one(x, y)
            return None
        row = self._features.plain_row(x)   # x's errors first, as predict_one raises them
        if row is not None:   # a plain numpy row: encode_record's arrays, trusted (no record object)
            self._check_y(y)
            tok_ptr, fidx, fval = row
            trusted = True
        else:
            enc = self._features.encode_record(x)
            self._check_y(y)
            trusted = self._features.trusts(enc)
            tok_ptr, fidx, fval = enc.tok_ptr, enc.fidx, enc.fval
        if trusted:   # known features and label: prediction, scaling, calibration and step in one kernel call
            p = self._predict_learn_record(fidx, fval, y)
            if p is not _NOT_TAKEN:
                return p
        p = self._predict_arrays(tok_ptr, fidx, self._scaled(fidx, fval))
        if not trusted:   # new feature names: registered now (the prediction did not know them)
            tok_ptr, fidx, fval = self._features.encode_one(x, grow=True)
        self._learn_arrays(tok_ptr, fidx, fval, self._labels.encode(y, grow=True))
        return p

    def _predict_learn_record(self, fidx, fval, y):
        """Predict then learn one validated record of known features (its CSR row ``fidx`` /
        ``fval``) through ``BCFW.predict_learn_record``: one kernel call scales it, scores it
        for the temperature fit, predicts and learns it, as :meth:`_learn_run` does for a run of
        one (the same prediction and state as ``predict_one`` then ``learn_one``). Returns the
        prediction, or ``_NOT_TAKEN`` (nothing changed) when the label is new, the learner
        does not take runs or is not grown to the index, or its store needs the Python side."""
        lr = self._learner
        dim = self._features.dim
        labels = self._labels
        # learns_in_runs, of which predict_learn_one (the caller) checked the rest: a plain
        # learn_one and predict_one, no class weights
        if not (type(lr).predicts_learns_runs and type(self).predict_learn_one is MulticlassSSVM.predict_learn_one
                and self._synced is lr and self._synced_key == (dim, len(labels.labels))):
            return _NOT_TAKEN
        try:   # labels.encode(y, grow=False) of a validated label: its id, or None when new
            yid = labels.index.get(y)
        except TypeError:
            yid = None
        if yid is None:
            return _NOT_TAKEN
        t = self._temperature
        if t is None:
            t = self._calibrator()
        n = t.n_offered
        observed = lr.n_labels >= 2 and (n < t.dense_until or n % t.stride == 0)
        scaling = None if self._scaler is None else self._scaler.statistics(dim)
        got = lr.predict_learn_record(fidx, fval, yid, scaling, observed)
        if got is None:
            return _NOT_TAKEN
        pid, S = got
        if S is not None:
            t.observe_class(S[0], yid)
        t.pass_over(1)
        self._last_fidx = fidx   # rows a step on this record changes (weights_finite)
        return labels.labels[pid]

    @property
    def learns_in_runs(self):
        cls = type(self)
        lr = self._learner if self._learner is not None else self.learner
        return (type(lr).predicts_learns_runs and self._class_weights is None and cls.learn_one is MulticlassSSVM.learn_one
                and cls.predict_one is MulticlassSSVM.predict_one
                and cls.predict_learn_one is MulticlassSSVM.predict_learn_one)

    #: a micro-batch is cut at most this many times at a record with a new feature name (dicts)
    #: or label (the records before it one run, that record on its own, then the rest); the
    #: rest of a batch with more of them goes record by record (e.g. a stream of new words)
    RUN_CUTS = 4

    def predict_learn_each(self, xs, ys, ws=None):
        """:meth:`Estimator.predict_learn_each`; with a learner that predicts and learns runs
        (BCFW), the records whose features and label are known are taken in runs by one
        kernel call each (``BCFW.predict_learn_run``), the others one at a time
        (:meth:`predict_learn_one`), in order. Each record is validated whole before anything
        is learned from it, as record by record."""
        if not self.learns_in_runs:
            return Estimator.predict_learn_each(self, xs, ys, ws)
        return self._predict_learn_runs(xs, ys, ws, self.RUN_CUTS)

    def _predict_learn_runs(self, xs, ys, ws, cuts):
        """:meth:`predict_learn_each` with a learner that takes runs; ``cuts``: how many more
        times the batch may be cut at a record with a new name or label (:attr:`RUN_CUTS`)."""
        out = [None] * len(xs)
        run = []        # (i, x, y, fidx, fval, label id) waiting for the kernel
        learned = []    # feature rows of every learned record (weights_finite)
        rows = self._dense_rows(xs)
        lr = self._learner
        if (ws is None and lr is not None and self._synced is lr
                and self._synced_key == (self._features.dim, len(self._labels))):
            # every row valid and every label known (the steady state of a stream): the whole
            # micro-batch is one run, its CSR in one pass (rows of arrays as _dense_rows made
            # it; dicts whose every nonzero feature is known, FeatureIndex.dict_csr: the arrays
            # encode_record makes of each), no per-record checks
            batch = rows if rows is not None else self._dict_rows(xs)
            yids = None if batch is None else self._known_label_ids(ys)
            if yids is not None:
                k = min(len(batch[0]) - 1, len(yids))   # records before a new feature name or label
                if k == len(xs):
                    self._learn_rows(range(k), batch[0], batch[1], batch[2], yids, xs, ys, out, learned)
                    self._last_fidx = learned[0]   # every row of the batch
                    return out
                if cuts > 0:
                    # the records before it one run, that record on its own (it registers the
                    # name or label), then the rest: each as record by record
                    fidx = []
                    if k:
                        self._learn_rows(range(k), batch[0][:k + 1], batch[1], batch[2], yids[:k], xs, ys, out,
                                         learned)
                        fidx.append(learned[0])
                    out[k:k + 1] = self._predict_learn_runs(xs[k:k + 1], ys[k:k + 1], None, 0)
                    fidx.append(self._last_fidx)
                    out[k + 1:] = self._predict_learn_runs(xs[k + 1:], ys[k + 1:], None, cuts - 1)
                    fidx.append(self._last_fidx)
                    self._last_fidx = np.concatenate(fidx)   # the rows of every learned record
                    return out
        for i, (x, y) in enumerate(zip(xs, ys)):
            lr = self._learner
            w = 1.0 if ws is None else ws[i]   # a record of weight other than 1 leaves the run
            if (type(w) is float and w == 1.0 and lr is not None and len(self._labels) and self._synced is lr
                    and self._synced_key == (self._features.dim, len(self._labels))):
                try:
                    if rows is None:
                        enc = self._features.encode_record(x)   # predict_learn_one's checks, in its order
                        trusted, fi, fv = self._features.trusts(enc), enc.fidx, enc.fval
                    else:   # every row valid, of the index's width: encode_record's arrays
                        a, b = rows[0][i], rows[0][i + 1]
                        trusted, fi, fv = True, rows[1][a:b], rows[2][a:b]
                    if is_missing(y):
                        raise ValueError("y is missing (None/NaN)")
                    self._labels.check(y)
                    yid = self._labels.encode(y, grow=False)
                except Exception as e:  # noqa: BLE001 - a bad record: see Estimator.predict_learn_each
                    out[i] = (False, e)
                    continue
                if yid >= 0 and trusted:
                    run.append((i, x, y, fi, fv, yid))
                    continue
            self._learn_run(run, out, learned)
            try:
                out[i] = (True, self.predict_learn_one(x, y) if ws is None else self.predict_learn_one(x, y, w))
                learned.append(self._last_fidx)
            except Exception as e:  # noqa: BLE001
                out[i] = (False, e)
        self._learn_run(run, out, learned)
        if learned:
            self._last_fidx = np.concatenate(learned) if len(learned) > 1 else learned[0]
        return out

    def _dense_rows(self, xs):
        """The CSR of a batch of 1-D float arrays (or the rows of a 2-D one) of the index's width, valid, in one pass
        (``FeatureIndex.dense_csr``: per row the arrays ``encode_record`` makes), else None
        (then each record is encoded, and refused, on its own)."""
        f = self._features
        d = f.array_dim
        if d is None or len(xs) < 2:
            return None
        shape = (d,)   # float64 as the identical dtype object (another one takes the per-record way)
        if type(xs) is np.ndarray:   # the rows of one array (a source's RecordRows)
            if xs.ndim != 2 or xs.shape[1:] != shape or xs.dtype is not _F64:
                return None
            A = xs
        elif not all(type(x) is np.ndarray and x.shape == shape and x.dtype is _F64 for x in xs):
            return None
        else:
            A = np.array(xs)   # (np.vstack: ~3x the per-row cost)
        try:
            with self._registering(keep=False):
                return f.dense_csr(A, grow=False)
        except (TypeError, ValueError):
            return None

    def _dict_rows(self, xs):
        """The CSR of the records of a micro-batch of dicts before the first with a new feature
        name (``FeatureIndex.dict_csr``: per record the arrays of a trusted ``encode_record``;
        all of them when there is none), else None. A :class:`FeatureDicts` (validated by
        its source) is encoded from its gathered arrays."""
        if len(xs) < 2 or (type(xs) is not FeatureDicts and (type(xs) is not list or type(xs[0]) is not dict)):
            return None
        return self._features.dict_csr(xs)

    def _known_label_ids(self, ys):
        """The label ids of a micro-batch whose labels are all ``str`` or ``int`` (a known one
        passes ``predict_learn_one``'s label checks: it was checked when it was registered), up
        to the first label not known yet (all of them when every one is known), in one pass;
        else None (the records are checked one by one)."""
        if self._learner is None or not len(self._labels) or not set(map(type, ys)) <= _PLAIN_LABELS:
            return None
        ids = list(map(self._labels.index.get, ys))
        if None in ids:
            ids = ids[:ids.index(None)]
        return np.array(ids, dtype=np.int32)

    def _learn_run(self, run, out, learned):
        """Predict then learn the records of ``run`` (all known features and labels) through
        ``predict_learn_run``; a record it does not take goes through :meth:`predict_learn_one`.
        Empties ``run``."""
        if not run:
            return
        lens = [len(r[3]) for r in run]
        tok_ptr = np.zeros(len(run) + 1, dtype=np.int32)
        np.cumsum(lens, out=tok_ptr[1:])
        fidx = np.concatenate([r[3] for r in run]).astype(np.int32, copy=False)
        fval = np.concatenate([r[4] for r in run]).astype(np.float64, copy=False)
        yids = np.array([r[5] for r in run], dtype=np.int32)
        self._learn_rows([r[0] for r in run], tok_ptr, fidx, fval, yids, [r[1] for r in run],
                         [r[2] for r in run], out, learned, local=True)
        run.clear()

    def _learn_rows(self, at, tok_ptr, fidx, fval, yids, xs, ys, out, learned, local=False):
        """Predict then learn CSR rows (known features, label ids ``yids``) through
        ``predict_learn_run``, record e's outcome into ``out[at[e]]``; a record the kernel does
        not take goes through :meth:`predict_learn_one` (its ``x`` / ``y``: ``xs`` / ``ys`` at
        ``e`` when ``local``, else at ``at[e]``)."""
        labels = self._labels.labels
        learned.append(fidx)
        # scaling and the temperature fit's observations happen inside the kernel, as record by
        # record: its statistics are updated in place, the observed records' scores come back
        scaling = None if self._scaler is None else self._scaler.statistics(self._features.dim)
        t = self._calibrator()
        e, n = 0, len(yids)
        while e < n:
            a = int(tok_ptr[e])
            ahead = t.n_offered + np.arange(n - e)
            observed = ((ahead < t.dense_until) | (ahead % t.stride == 0)) if self._learner.n_labels >= 2 else None
            ids, S = self._learner.predict_learn_run(tok_ptr[e:] - a, fidx[a:], fval[a:], yids[e:], scaling, observed)
            for i, p in zip(at[e:e + len(ids)], ids.tolist()):
                out[i] = (True, labels[p])
            if len(ids):
                if S is not None and len(S):
                    t.observe_classes(S, yids[e:e + len(ids)][observed[:len(ids)]])
                t.pass_over(len(ids))   # offered (wants() counted each), the observed ones kept above
            e += len(ids)
            if len(ids) == 0:   # something of the Python side is due before it: one at a time
                i = at[e]
                j = e if local else i
                try:
                    out[i] = (True, self.predict_learn_one(xs[j], ys[j]))
                except Exception as ex:  # noqa: BLE001
                    out[i] = (False, ex)
                e += 1

    def _observe_calibration(self, tok_ptr, fidx, fval, yid):
        """Offer the record (its unscaled values ``fval``), scored by the model before it learns
        it (scaled as a prediction scales it), to the temperature fit."""
        t = self._temperature
        if t is None:
            t = self._calibrator()
        if not t.wants():
            return
        S = self._scores_predicted(fidx)   # predict_one's scores of these arrays, if they still hold
        if S is None:
            lr = self._learner
            tables = calibration.predict_tables(lr)
            K = int(lr.n_labels) if tables is not None else 0
            if K < 2 or yid >= K:
                return
            S = calibration.emission_scores(tables, tok_ptr, fidx, self._scaled(fidx, fval), K, lr)
        elif yid >= S.shape[1]:
            return
        t.observe_class(S[0], yid)

    def predict_proba_one(self, x):
        """p(class | x) ∝ exp(score(x, class) / T), T the :attr:`temperature` fitted online
        (:mod:`streamssvm.calibration`); one-hot on the prediction for a learner without a
        dense weight table (MEMOIR, Pragam)."""
        if self._learner is None or len(self._labels) == 0:
            return {}
        tables = calibration.predict_tables(self._learner)
        if tables is None:
            y = self.predict_one(x)
            return {c: float(c == y) for c in self._labels.labels}
        tok_ptr, fidx, fval = self._encode_to_predict(x)
        K = int(self._learner.n_labels)
        p = calibration.softmax(calibration.emission_scores(tables, tok_ptr, fidx, fval, K, self._learner)[0],
                                1.0 / self.temperature)
        return {c: float(p[i]) if i < K else 0.0 for i, c in enumerate(self._labels.labels)}

    def predict_nbest_one(self, x, k, constraints=None):
        """The ``k`` best classes for ``x`` with their scores, best first: a list of
        ``(label, score)`` (ties: the earlier label first, as ``predict_one``, which is the
        first). ``constraints`` is not used by multiclass models (None).

        >>> import streamssvm as ss
        >>> m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.1, seed=0))
        >>> m.learn_many([{"a": 1.0}, {"b": 1.0}, {"c": 1.0}], ["x", "y", "z"])
        >>> [lab for lab, score in m.predict_nbest_one({"a": 1.0}, 2)][0]
        'x'
        """
        from ..nbest import multiclass_nbest
        k = self._check_k(k)
        if constraints is not None:
            raise ValueError("multiclass models take no constraints")
        if self._learner is None or len(self._labels) == 0:
            return []
        tab = self._score_tables()
        s = tab.emission(*self._encode_scaled(x))[0]
        labs = self._labels.labels
        return [(labs[c], score) for c, score in multiclass_nbest(s, k)]

    def _encode_rows(self, X, grow, ys=None):
        """CSR of a batch: a DataFrame, a 2-D array, or a list of feature dicts / 1-D arrays.
        With ``ys`` (learning), the labels are validated and the whole batch is checked before
        any feature name is registered: a bad row raises and leaves the model unchanged."""
        if isinstance(X, (list, tuple)):
            if X and isinstance(X[0], dict):
                if ys is not None:
                    self._check_labels(ys, len(X))
                scanned = []
                for i, x in enumerate(X):
                    if not isinstance(x, dict):
                        raise TypeError(f"mixed batch: expected dicts, got {type(x).__name__} in row {i}")
                    try:
                        scanned.append(self._features._scan(x, grow))
                    except (TypeError, ValueError) as e:
                        if type(e) not in (TypeError, ValueError):
                            raise
                        raise type(e)(f"row {i}: {e}") from e
                # every row is valid: register the new names, row by row
                ptr = [0]
                idx: list = []
                val: list = []
                for pairs, new in scanned:
                    i, v = self._features._register(pairs, new)
                    idx.extend(i)
                    val.extend(v)
                    ptr.append(len(idx))
                return (np.asarray(ptr, dtype=np.int32), np.asarray(idx, dtype=np.int32),
                        np.asarray(val, dtype=np.float64), len(X), None)
            X = np.asarray(X, dtype=np.float64) if X else np.zeros((0, max(self._features.array_dim or 1, 1)))
        A, index = self._as_matrix(X)
        if ys is not None:
            self._check_labels(ys, A.shape[0])
        if A.shape[0] == 0:
            return np.zeros(1, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0), 0, index
        tok_ptr, fidx, fval = self._dense_csr(A, grow)   # checks all before it registers
        return tok_ptr, fidx, fval, A.shape[0], index

    def _check_labels(self, ys, n):
        """Every label of a batch of ``n`` rows is valid (changes nothing)."""
        if len(ys) != n:
            raise ValueError(f"X has {n} rows but y has {len(ys)} labels")
        if isinstance(ys, np.ndarray):   # integers (see _label_batch): valid if they fit 64 bits
            if ys.dtype.kind == "u" and ys.size and int(ys.max()) >= 2**63:
                i = int(np.argmax(ys >= 2**63))
                raise ValueError(f"row {i}: integer label {int(ys[i])} does not fit in 64 bits")
            return
        for i, v in enumerate(ys):
            if is_missing(v):
                raise ValueError(f"y contains a missing label (None/NaN) in row {i}")
            try:
                self._labels.check(v)
            except (TypeError, ValueError) as e:
                raise type(e)(f"row {i}: {e}") from e

    def _dense_csr(self, A, grow):
        """``FeatureIndex.encode_tokens`` of a dense batch (same checks, same arrays) in one
        numba pass (``FeatureIndex.dense_csr``)."""
        f = self._features
        if not isinstance(A, np.ndarray) or A.ndim != 2 or A.shape[0] == 0 or A.dtype.kind not in "biuf":
            return f.encode_tokens(A, grow=grow)   # its errors
        return f.dense_csr(np.ascontiguousarray(A, dtype=np.float64), grow)

    def learn_many(self, X, y, w=None):
        """Learn a batch in order, as a stream, in one kernel call (``X``: a DataFrame, a 2-D
        array or a list of feature dicts; ``y``: a sequence of labels; ``w``: None or one weight
        per row, as :meth:`learn_one` takes it -- weighted rows are learned one by one). The
        whole batch is validated first: a bad row raises and the model is unchanged.

        >>> import streamssvm as ss
        >>> m = ss.MulticlassSSVM()
        >>> m.learn_many([{"a": 1.0}, {"b": 1.0}], ["x", "y"])
        >>> try:
        ...     m.learn_many([{"c": 1.0}, {"d": float("nan")}], ["z", "x"])
        ... except ValueError as e:
        ...     print(e)
        row 1: feature 'd' has a non-finite value nan
        >>> m.classes, m._features.names
        (['x', 'y'], ['a', 'b'])
        """
        ys = _label_batch(y)
        if w is not None or self._class_weights is not None:
            xs = list(X) if isinstance(X, (list, tuple)) else list(self._as_matrix(X)[0])
            if len(xs) != len(ys):
                raise ValueError(f"X has {len(xs)} rows but y has {len(ys)} labels")
            ws = weight_batch(w, len(xs))
            if ws is not None or self._class_weights is not None:
                return self._learn_weighted_rows(xs, list(ys), np.ones(len(xs)) if ws is None else ws)
        with self._registering():
            dense = self._dense_batch(X, ys)
            enc = self._encode_rows(X, grow=True, ys=ys)[:4] if dense is None else None
            labs = self._encode_labels(ys)
            self._check_label_room()
        self._observe_batch(labs[0], labs[2], dense, enc)
        if dense is None:
            self._learn_encoded(*labs, *enc)
        else:
            self._learn_dense(*labs, *dense[:3])

    def predict_learn_many(self, X, y):
        """Progressive validation of a batch: the predictions of all rows (made before learning
        any of them), then learning them, with a single encoding of the batch. The whole batch
        is validated first: a bad row raises and the model is unchanged."""
        if self._class_weights is not None:   # weighted rows: predicted, then learned one by one
            xs = list(X) if isinstance(X, (list, tuple)) else list(self._as_matrix(X)[0])
            ys = list(_label_batch(y))
            if len(xs) != len(ys):
                raise ValueError(f"X has {len(xs)} rows but y has {len(ys)} labels")
            self._check_batch(self._encode_checked, xs, ys)
            preds = [self.predict_one(x) for x in xs]
            self._learn_weighted_rows(xs, ys, np.ones(len(xs)))
            return preds
        ys = _label_batch(y)
        n0 = len(self._labels)
        predicting = self._learner is not None and n0 > 0
        with self._registering():
            # a dense 2-D array: its rows are read as they are, no CSR (unless a learner needs
            # it); divided for the predictions' scores in the pass that validates them
            dense = self._dense_batch(X, ys, self._scaler if predicting else None)
            if dense is None:
                tok_ptr, fidx, fval, n, _ = self._encode_rows(X, grow=True, ys=ys)
            else:
                n = dense[0].shape[0]
            lab_enc = self._encode_labels(ys)
            self._check_label_room()
        # features first seen in this batch have zero weights: encoding them before predicting
        # does not change the predictions; labels first seen in it are not predicted
        S = None   # the batch's class scores, when its prediction computes them (a dense batch)
        if not predicting:
            preds = [None] * n
        else:
            labs = self._labels.labels[:n0]
            self._synced = None
            self._learner.ensure(self._features.dim, labs)
            if dense is not None:
                S = self._dense_scores(X, self._scaler, dense[3])
                ids = None if S is None else np.argmax(S, axis=1)
            else:
                as_is = self._scaler is None or self._scaler.is_identity(fidx, fval)   # e.g. 0/1 pixels
                ids = (self._dense_ids(X, None if as_is else self._scaler)
                       if isinstance(X, np.ndarray) and X.ndim == 2 else None)
            if ids is None:
                if dense is not None:
                    tok_ptr, fidx, fval = self._features.dense_csr(dense[0], grow=False)
                ids = self._learner.predict(np.arange(n + 1, dtype=np.int64), tok_ptr.astype(np.int64),
                                            fidx, self._scaled(fidx, fval), np.arange(n + 1, dtype=np.int64), n)
            preds = [labs[i] for i in np.asarray(ids).tolist()]   # (Python ints index a list faster)
        self._observe_batch(lab_enc[0], n0, dense, None if dense is not None else (tok_ptr, fidx, fval, n), S)
        if dense is None:
            self._learn_encoded(*lab_enc, tok_ptr, fidx, fval, n)
        else:
            self._learn_dense(*lab_enc, *dense[:3])
        return preds

    def _dense_batch(self, X, ys, scaler=None):
        """A batch given as a 2-D numeric numpy array of at least one row, validated as
        :meth:`_encode_rows` validates it (its labels, then ``FeatureIndex.check_dense``: the
        same errors, in the same order) without writing its CSR: ``(A, nnz, last, divided)``, A
        the rows as a C-contiguous float64 array, ``nnz`` / ``last`` per row the entries of its
        CSR and its last non-zero column, ``divided`` the rows divided by the ``scaler``'s column
        divisors as :meth:`_dense_ids` divides them, written by the validating pass (None
        without a scaler, when every divisor is 1, or when A is a converted copy of X: then
        ``_dense_ids`` divides X as it always did). None for another batch (then encoded by
        ``_encode_rows``)."""
        if type(X) is not np.ndarray or X.ndim != 2 or X.shape[0] == 0 or X.dtype.kind not in "biuf":
            return None
        A = np.ascontiguousarray(X, dtype=np.float64)
        self._check_labels(ys, A.shape[0])
        q = None
        if scaler is not None and A is X:
            q = scaler.divisors(A.shape[1] + 1)[1:]
            if (q == 1.0).all():
                q = None
        return (A,) + self._features.check_dense(A, grow=True, divide_by=q)

    def _learn_dense(self, yids, cuts, n0, A, nnz, last):
        """:meth:`_learn_encoded` of the rows of a validated dense batch (:meth:`_dense_batch`):
        learned from the rows themselves where the learner takes them
        (``Learner.learn_dense_rows``: BCFW; the column scaling's statistics take each row as
        its block is written, as ``ColumnScaler.learn_scaled`` of the batch's CSR would), else
        from their CSR. The same model either way, to the bit."""
        if not self._bound().learns_dense_rows():
            tok_ptr, fidx, fval = self._features.dense_csr(A, grow=False)
            return self._learn_encoded(yids, cuts, n0, tok_ptr, fidx, fval, A.shape[0])
        self._synced = None   # the pieces grow the learner label by label
        # learn_scaled's statistics, grown as it grows them for the batch's CSR (its largest
        # feature: the largest last non-zero column + 1)
        scaling = None if self._scaler is None else self._scaler.statistics(int(last.max()) + 2)
        for a, b in zip(cuts[:-1], cuts[1:]):   # as _learn_encoded: cut where a new label appears
            if a == b:
                continue
            k_here = max(n0, int(yids[:b].max()) + 1)
            lr = self._bound()
            lr.ensure(self._features.dim, self._labels.labels[:k_here])
            lr.learn_dense_rows(A[a:b], nnz[a:b], last[a:b], yids[a:b], scaling)
        self._sync()

    def _observe_batch(self, yids, n0, dense=None, csr=None, S=None):
        """Offer a batch's rows to the temperature fit before the batch is learned
        (:meth:`learn_many`, :meth:`predict_learn_many`), as ``learn_one`` offers each record:
        the rows the fit's schedule observes (``Temperature.would_want``) are scored at the
        weights before the batch, their values scaled by the statistics before it (``learn_one``
        scores a record at the weights after the record before it), and a row whose label the
        model did not know before the batch is offered, not observed. ``dense``: the batch as
        :meth:`_dense_batch` validated it, else ``csr``: its ``(tok_ptr, fidx, fval, n)``; ``S``:
        the batch's class scores when its prediction computed them. What is learned does not
        change (learning never reads the temperature); without this the batch paths left the
        temperature at 1, their probabilities uncalibrated."""
        n = len(yids)
        if n == 0:
            return
        t = self._calibrator()
        lr = self._learner
        if lr is not None and n0 >= 2 and calibration.predict_tables(lr) is not None:
            if S is None:   # grown to the batch's features (as its learning grows it first)
                self._synced = None
                lr.ensure(self._features.dim, self._labels.labels[:n0])
            K = int(lr.n_labels)
            ahead = t.n_offered + np.arange(n)
            want = ((ahead < t.dense_until) | (ahead % t.stride == 0)) & (np.asarray(yids) < K)
            idx = np.flatnonzero(want)
            if len(idx) and K >= 2:
                t.observe_classes(S[idx] if S is not None else self._batch_scores(idx, K, dense, csr),
                                  np.asarray(yids)[idx])
        t.pass_over(n)

    def _batch_scores(self, idx, K, dense, csr):
        """The class scores (len(idx) x K) of the rows ``idx`` of a validated batch
        (:meth:`_observe_batch`) at the prediction weights, their values scaled as a prediction
        scales them: a dense batch's by one BLAS product (:meth:`_dense_scores`, as its
        prediction scores it), else the rows as the tokens of one record
        (``calibration.emission_scores``, as ``learn_one`` scores a record)."""
        lr = self._learner
        if dense is not None:
            S = self._dense_scores(dense[0][idx], self._scaler)
            if S is not None:
                return S
            tok_ptr, fidx, fval = self._features.dense_csr(dense[0][idx], grow=False)
        else:
            tp = np.asarray(csr[0], dtype=np.int64)
            starts, lens = tp[idx], tp[idx + 1] - tp[idx]
            ptr = np.zeros(len(idx) + 1, dtype=np.int64)
            np.cumsum(lens, out=ptr[1:])
            take = np.repeat(starts - ptr[:-1], lens) + np.arange(ptr[-1])
            tok_ptr, fidx, fval = ptr.astype(np.int32), csr[1][take], csr[2][take]
        return calibration.emission_scores(calibration.predict_tables(lr), tok_ptr, fidx, self._scaled(fidx, fval), K,
                                           lr)

    def _dense_ids(self, A, scaler=None, divided=None):
        """The argmax of :meth:`_dense_scores` (None where it is None): ties go to the first
        class, as in ``mc_decode``."""
        S = self._dense_scores(A, scaler, divided)
        return None if S is None else np.argmax(S, axis=1)

    def _dense_scores(self, A, scaler=None, divided=None):
        """The class scores (rows x the learner's labels) of the rows of a dense 2-D array
        (already validated by the encoding) by one BLAS product with the learner's emission weights
        (``Learner.emission_weights``): column j is feature j + 1, feature 0 the bias
        (``FeatureIndex.encode_tokens``). The per-row kernel reads every weight once per row;
        the product reads them once per batch. The scores agree with the kernel's to rounding.
        With ``scaler`` (a
        :class:`~streamssvm.scaling.ColumnScaler`) the rows are first divided by its column
        divisors: the values the kernel would score, to the bit (``ColumnScaler.divisors``; the
        bias is never scaled); ``divided``: those rows, already divided (``_dense_batch``).
        ``None`` for learners without dense emission weights."""
        W = self._learner.emission_weights()
        d = A.shape[1]
        if W is None or W.shape[1] == 0 or W.shape[0] < d + 1:
            return None
        A = np.asarray(A, dtype=np.float64)
        if divided is not None:
            A = divided
        elif scaler is not None:
            q = scaler.divisors(d + 1)[1:]
            if not (q == 1.0).all():   # (x / 1.0 is x: 0/1 pixels so far need no division)
                A = A / q
        S = A @ W[1:d + 1]
        S += W[0]
        return S

    def _encode_labels(self, ys):
        """Label ids of a validated batch, registered as they arrive (exactly as with
        learn_one), the cuts where a new label appears, and the number of labels known before."""
        n = len(ys)
        n0 = len(self._labels)
        if isinstance(ys, np.ndarray):
            # an integer array: each distinct label is looked up once, the new ones registered
            # in order of first appearance (the ids and cuts of the row-by-row loop below)
            uniq, first, inv = np.unique(ys, return_index=True, return_inverse=True)
            ids = np.empty(len(uniq), dtype=np.int32)
            cuts = [0]
            for u in np.argsort(first, kind="stable"):
                k = len(self._labels)
                ids[u] = self._labels.encode(ys[first[u]], grow=True)
                if len(self._labels) != k and first[u] > 0:
                    cuts.append(int(first[u]))
            cuts.append(n)
            return ids[inv.ravel()], cuts, n0
        yids = np.empty(n, dtype=np.int32)
        cuts = [0]
        for i in range(n):
            k = len(self._labels)
            yids[i] = self._labels.encode(ys[i], grow=True)
            if len(self._labels) != k and i > 0:
                cuts.append(i)
        cuts.append(n)
        return yids, cuts, n0

    def _learn_encoded(self, yids, cuts, n0, tok_ptr, fidx, fval, n):
        if n == 0:
            return
        self._synced = None   # the pieces grow the learner label by label
        fval = self._learned(fidx, fval, tok_ptr)   # row by row, as learn_one takes them
        # the batch is cut where a new label appears, and each piece is learned in one kernel
        # call, with the labels learn_one would know at that point
        tok64 = tok_ptr.astype(np.int64)
        for a, b in zip(cuts[:-1], cuts[1:]):
            if a == b:
                continue
            # grow the label set up to (and including) the label that opens this piece
            # (the labels known before the batch are all there already: never fewer, or the
            # learner would see a smaller label set than learn_one does)
            k_here = max(n0, int(yids[:b].max()) + 1)
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
                                            fidx, self._scaled(fidx, fval), np.arange(n + 1, dtype=np.int64), n)
            labs = self._labels.labels
            out = [labs[i] for i in ids]
        if index is not None:
            return require_pandas("predict_many of a DataFrame").Series(out, index=index)
        return np.asarray(out, dtype=object) if out and not isinstance(out[0], (int, float, np.number)) else np.asarray(out)

