"""Shared estimator machinery: feature / label indexing, learner binding, persistence, and the
registry through which a saved model is restored (:func:`from_state`, ``streamssvm.load``).

Every concrete estimator registers itself (by class name) when its class is defined; the
saved file names the estimator class and the learner class, both resolved by name: the
estimator through this registry, the learner among the subclasses of
:class:`streamssvm.learners.Learner`. This module knows no estimator or learner by name.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import numbers

import numpy as np

from .. import checkpoint
from ..certificate import Certificate
from ..calibration import Temperature
from ..features import FeatureIndex, LabelIndex, _decode_key, _encode_key
from ..scaling import ColumnScaler
from .._kernels.finite import rows_finite
from ..learners.base import Learner

MODEL_KIND = "streamssvm.model"
ONE_EX = np.array([0, 1], dtype=np.int64)

_REGISTRY: dict = {}


def check_weight(w):
    """An example weight as a float: a finite real number >= 0 (a bool is refused); raises
    before anything is learned.

    >>> check_weight(2), check_weight(0.5)
    (2.0, 0.5)
    >>> check_weight(-1.0)
    Traceback (most recent call last):
    ...
    ValueError: the example weight w must be finite and >= 0, got -1.0
    """
    if isinstance(w, bool) or not isinstance(w, numbers.Real):
        raise TypeError(f"the example weight w must be a number, got {w!r} ({type(w).__name__})")
    c = float(w)
    if not math.isfinite(c) or c < 0.0:
        raise ValueError(f"the example weight w must be finite and >= 0, got {w!r}")
    return c


def weight_batch(w, m):
    """The weights of a batch of ``m`` examples as a float array, each checked as
    :func:`check_weight` (an error names the row); None when ``w`` is None or every weight is 1
    (the unweighted path)."""
    if w is None:
        return None
    ws = list(w.tolist() if isinstance(w, np.ndarray) else w)
    if len(ws) != m:
        raise ValueError(f"the batch has {m} examples but {len(ws)} weights")
    out = np.empty(m, dtype=np.float64)
    for i, c in enumerate(ws):
        try:
            out[i] = check_weight(c)
        except (TypeError, ValueError) as e:
            raise type(e)(f"row {i}: {e}") from e
    return None if bool((out == 1.0).all()) else out


def is_missing(v):
    return v is None or (isinstance(v, float) and v != v)


def require_pandas(what):
    """Import pandas for ``what`` (a method returning a pandas object), with a clear error
    naming the extra that installs it."""
    from .._optional import require
    return require("pandas", extra="pandas", feature=f"{what} (returns a pandas object)")


def _is_dataframe(X):
    return type(X).__name__ == "DataFrame" and type(X).__module__.startswith("pandas")


def estimator_class(name):
    """The registered estimator class called ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise checkpoint.CheckpointError(f"unknown estimator class {name!r} in the file; known: "
                                         f"{sorted(_REGISTRY)}") from None


def learner_class(name):
    """The :class:`~streamssvm.learners.Learner` subclass called ``name``."""
    todo = list(Learner.__subclasses__())
    while todo:
        c = todo.pop()
        if c.__name__ == name:
            return c
        todo.extend(c.__subclasses__())
    raise checkpoint.CheckpointError(f"unknown learner class {name!r} in the file")


def from_state(st):
    """Rebuild any estimator from :meth:`Estimator.state` (dispatches on the saved class)."""
    return estimator_class(st["config"]["class"]).from_state(st)


def load(path):
    """Load any saved estimator (``MulticlassSSVM``, ``MultiLabelSSVM``, ``SequenceTagger``,
    ``ExtremeClassifier``) from a file written by ``save``; ``streamssvm.load`` is this function.

    >>> import os, tempfile, streamssvm as ss
    >>> m = ss.ExtremeClassifier(learner=ss.learners.MEMOIR(mips="exact", lam=1e-3))
    >>> for i in range(30):
    ...     m.learn_one({f"w{i % 3}": 1.0}, "abc"[i % 3])
    >>> p = os.path.join(tempfile.mkdtemp(), "m.ssvm")
    >>> _ = m.save(p)
    >>> m2 = ss.load(p)
    >>> type(m2).__name__, [m2.predict_one({f"w{k}": 1.0}) for k in range(3)]
    ('ExtremeClassifier', ['a', 'b', 'c'])
    """
    st, _ = checkpoint.load_state(path, kind=MODEL_KIND)
    return _restoring(from_state, st)


def _restoring(fn, st):
    """``fn(st)`` with any exception a ``CheckpointError`` (a file never crashes a load)."""
    try:
        return fn(st)
    except checkpoint.CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - any problem with the file's content
        raise checkpoint.CheckpointError(f"invalid model file: {type(e).__name__}: {e}") from e


def restore_statistics(saved, current, option, what, build):
    """A model's optional running statistics (feature scaling, row normalization) from a file:
    ``build(saved)`` when the model's option keeps them (``current`` not None) and the file
    holds them, None when neither does; a file that disagrees with the option (``option``,
    e.g. ``"scale=True"``) or holds invalid statistics is a ``CheckpointError``."""
    if (saved is None) != (current is None):
        raise checkpoint.CheckpointError(f"invalid model file: {option} but the file "
                                         f"{'lacks' if saved is None else 'holds'} {what}")
    if saved is None:
        return None
    try:
        return build(saved)
    except ValueError as e:
        raise checkpoint.CheckpointError(f"invalid model file: {e}") from None


def _all_finite(st):
    """Every float array (and float) in a nested state is finite."""
    todo = [st]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, (list, tuple)):
            todo.extend(v)
        elif isinstance(v, np.ndarray) and v.dtype.kind == "f":
            if not np.isfinite(v).all():
                return False
    return True


class Estimator:
    """Base of the streamssvm estimators (mixed with a river base class by each subclass).

    A subclass sets ``_learners`` (the learner classes it accepts), ``_default_learner`` and
    implements ``_make_structure``. The ``learner`` parameter stays a pure configuration; the
    estimator binds a clone of it (with the estimator's overrides, e.g. ``rescaling=``) at the
    first example.
    """

    _learners: tuple = ()
    #: the learning task, as the engine and the command line name it: ``"multiclass"``,
    #: ``"multilabel"``, ``"sequence"`` or ``"extreme"``
    task: str | None = None

    def coerce_input(self, x, y):
        """A connector record's ``(x, y)`` in the form this estimator learns (e.g. a JSON list
        of features as a numpy array, a list of positive labels as a ``{label: True}`` dict);
        raises ValueError / TypeError with a reason for a record it cannot take. The default
        is the single-label one (multiclass, extreme): flat features, one label."""
        if isinstance(x, list):
            x = np.asarray(x, dtype=np.float64)
        if isinstance(x, np.ndarray) and x.ndim != 1:
            raise ValueError(f"multiclass examples need flat features, got an array of shape {x.shape}")
        if isinstance(y, (list, dict, set)):
            raise TypeError(f"multiclass label must be a single value, got {type(y).__name__}")
        return x, y

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if not cls.__name__.startswith("_"):
            _REGISTRY[cls.__name__] = cls

    @classmethod
    def _default_learner(cls):  # pragma: no cover - overridden
        raise NotImplementedError

    def _init_common(self, learner, n_features, labels, rescaling=None, scale=False):
        if learner is None:
            learner = self._default_learner()
        if not isinstance(learner, self._learners):
            names = ", ".join(f"learners.{c.__name__}(...)" for c in self._learners)
            raise TypeError(f"learner must be a streamssvm learner that {type(self).__name__} takes, such as "
                            f"{names}; got {learner!r}")
        self.learner = learner
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
        if labels is not None and any(is_missing(lab) for lab in labels):
            raise ValueError("labels must not contain None/NaN")
        self.labels = labels
        if not isinstance(scale, bool):
            raise TypeError(f"scale must be True or False, got {scale!r}")
        self.scale = scale
        self._features = FeatureIndex(n_features)
        self._scaler = ColumnScaler() if scale else None
        self._labels = LabelIndex(labels)
        self._learner = None  # bound copy of the learner (the parameter stays a pure config)

    def _make_structure(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def _overrides(self):
        """Learner parameters the estimator sets on the bound copy."""
        return {"rescaling": self.rescaling} if self.rescaling is not None else {}

    def _bound(self):
        if self._learner is None:
            self._learner = self.learner.clone(self._overrides() or None)
            self._structure = self._make_structure()
            self._learner.bind(self._structure, self._labels.labels)
        return self._learner

    def _sync(self):
        lr = self._bound()
        lr.ensure(self._features.dim, self._labels.labels)
        return lr

    @contextlib.contextmanager
    def _registering(self, keep=True):
        """Feature names and labels registered inside the block are forgotten if it raises
        (and always when ``keep`` is False: a dry run that validates a batch by encoding it).
        The learner must not be changed inside the block."""
        fm, lm = self._features.mark(), self._labels.mark()
        try:
            yield
        except BaseException:
            self._features.rollback(fm)
            self._labels.rollback(lm)
            raise
        if not keep:
            self._features.rollback(fm)
            self._labels.rollback(lm)

    def _check_batch(self, encode, xs, ys):
        """Validate a whole batch before any of it is learned: ``encode(x, y)`` (what
        ``learn_one`` runs before it changes the learner) on every row, in order, then forget
        what it registered. A bad row raises its error, prefixed with its position, and the
        model is unchanged."""
        with self._registering(keep=False):
            for i, (x, y) in enumerate(zip(xs, ys)):
                try:
                    encode(x, y)
                except (TypeError, ValueError) as e:
                    if type(e) not in (TypeError, ValueError):
                        raise
                    raise type(e)(f"row {i}: {e}") from e

    # -------------------------------------------------------------- example weights
    def _encode_checked(self, x, y):  # pragma: no cover - overridden
        """Everything ``learn_one(x, y)`` checks before it changes the learner, registering what
        it must (called inside :meth:`_registering`)."""
        raise NotImplementedError

    def _check_record(self, x, y):
        """Raise what ``learn_one(x, y)`` would raise for a bad record; changes nothing (the
        feature names and labels it registers are forgotten)."""
        with self._registering(keep=False):
            self._encode_checked(x, y)

    def _check_weighted(self, c):
        """Raise a NotImplementedError, before anything changes, when the learner does not take
        an example weight ``c`` other than 0 and 1 (:attr:`Learner.example_weights`)."""
        lr = self._learner if self._learner is not None else self.learner
        if not type(lr).example_weights:
            raise NotImplementedError(
                f"{type(lr).__name__} does not take example weights (got w={c!r}); the learners that "
                "do: SGD, BCFW, CuttingPlane, BMRM, Pragam, MEMOIR, GDMM (w=0 and w=1 work with every learner)")
        why = getattr(lr, "weights_refused", lambda: None)()     # a learner taking them on some problems only
        if why:
            raise NotImplementedError(why)

    def _weighted_start(self, x, y, w):
        """The checked weight of ``learn_one(x, y, w)``, or None when the record is done: w=0 learns
        nothing (the record is checked, the model stays bit-identical). A weight other than 0 and 1
        needs a learner that takes weights."""
        c = check_weight(w)
        if c == 0.0:
            self._check_record(x, y)
            return None
        if c != 1.0:
            self._check_weighted(c)
        return c

    @staticmethod
    def _give(lr, tok_ptr, fidx, fval, y, Ki, c):
        """``lr.learn`` of one encoded example with weight ``c`` (the unweighted call for 1)."""
        if c == 1.0:
            lr.learn(tok_ptr, fidx, fval, y, Ki)
        else:
            lr.learn(tok_ptr, fidx, fval, y, Ki, weight=c)

    def _learn_weighted_rows(self, xs, ys, ws):
        """``learn_one(x, y, w)`` on each row of a batch with weights ``ws`` (of
        :func:`weight_batch`), the whole batch checked first: a bad row or weight raises and the
        model is unchanged."""
        for c in ws:
            if c != 0.0 and c != 1.0:
                self._check_weighted(float(c))
                break
        self._check_batch(self._encode_checked, xs, ys)
        for x, y, c in zip(xs, ys, ws):
            self.learn_one(x, y, float(c))

    _last_enc = None     # the EncodedRecord of the last predict_one (reused by learn_one)
    _temperature = None  # the calibration.Temperature fitted on the progressive stream
    #: the Temperature's settings (window, every, dense_until, stride) for this kind of model
    _calibration_settings: dict = {}

    def _calibrator(self):
        """The :class:`~streamssvm.calibration.Temperature` of the model (made on first use)."""
        if self._temperature is None:
            self._temperature = Temperature(**self._calibration_settings)
        return self._temperature

    @property
    def temperature(self):
        """The temperature T of the model's Gibbs distribution p(y | x) ∝ exp(score(x, y) / T)
        (``predict_proba_one``), fitted online on the records learned (each scored before it
        is learned); 1.0 before any fit."""
        return 1.0 if self._temperature is None else 1.0 / self._temperature.beta

    def _encode_to_predict(self, x):
        """CSR arrays of a flat ``x`` for prediction (``encode_one(x, grow=False)``), its
        encoding kept for a ``learn_one`` on the same ``x`` (:meth:`_encode_to_learn`)."""
        enc = self._features.encode_record(x, keep=True)
        self._last_enc = enc
        return enc.tok_ptr, enc.fidx, self._scaled(enc.fidx, enc.fval)

    def _scaled(self, fidx, fval):
        """``fval`` as a prediction sees it: divided by the columns' running RMS with
        ``scale=True`` (:class:`streamssvm.scaling.ColumnScaler`); the statistics do not change."""
        return fval if self._scaler is None else self._scaler.scaled(fidx, fval)

    def _encode_scaled(self, x):
        """CSR arrays of a flat ``x`` as a prediction sees them (``encode_one(x, grow=False)``,
        then :meth:`_scaled`), keeping nothing for a later ``learn_one``: n-best and
        explanations score what ``predict_one`` scores."""
        tok_ptr, fidx, fval = self._features.encode_one(x, grow=False)
        return tok_ptr, fidx, self._scaled(fidx, fval)

    def _learned(self, fidx, fval, tok_ptr=None):
        """``fval`` (of one example, or of the rows ``tok_ptr`` in order) as the learner gets it:
        with ``scale=True`` the statistics take the rows in first. Called once per learned
        example, after it is validated, right before the learner takes it."""
        return fval if self._scaler is None else self._scaler.learn_scaled(fidx, fval, tok_ptr)

    def _encode_to_learn(self, x):
        """``encode_one(x, grow=True)``, or the arrays the last prediction encoded when ``x`` is
        the same object, unchanged (:meth:`EncodedRecord.unchanged`), holding no new name, and
        the index has not changed since: river's progressive validation calls ``predict_one(x)``
        then ``learn_one(x, y)``. An encoding is reused once (the learner gets its own arrays
        for every learn)."""
        enc = self._last_enc
        if enc is not None and enc.x is x and self._features.trusts(enc) and enc.unchanged():
            self._last_enc = None
            return enc.tok_ptr, enc.fidx, enc.fval
        return self._features.encode_one(x, grow=True)

    def predict_learn_one(self, x, y, w=1.0):
        """Predict ``x``, then learn ``(x, y)`` with weight ``w``; returns the prediction made
        before learning (progressive validation in one call, as ``streamssvm.step`` takes it).
        The learning reuses the prediction's encoding (:meth:`_encode_to_learn`); an estimator
        may override it to encode the record once in every case."""
        c = 1.0 if type(w) is float and w == 1.0 else check_weight(w)   # a bad weight changes nothing
        p = self.predict_one(x)
        if c == 1.0:
            self.learn_one(x, y)
        else:
            self.learn_one(x, y, c)
        return p

    #: whether :meth:`predict_learn_each` takes runs of records in one kernel call (else it goes
    #: record by record; either way the same predictions and the same state)
    learns_in_runs = False

    def predict_learn_each(self, xs, ys, ws=None):
        """Progressive validation of records in order, as :meth:`predict_learn_one` on each
        (with its weight from ``ws``, None: all 1): per record ``(True, prediction)``, or
        ``(False, exception)`` for a record it refused (which changed nothing). An estimator
        that :attr:`learns_in_runs` predicts and learns runs of records of weight 1 in one
        kernel call, with the same predictions and the same state; the others leave the run."""
        out = []
        for i, (x, y) in enumerate(zip(xs, ys)):
            try:
                out.append((True, self.predict_learn_one(x, y) if ws is None else self.predict_learn_one(x, y, ws[i])))
            except Exception as e:  # noqa: BLE001 - the caller's rule for bad records (streamssvm.step)
                out.append((False, e))
        return out

    # -------------------------------------------------------------- n-best / explanations
    def predict_nbest_one(self, x, k, constraints=None):  # pragma: no cover - overridden
        """The ``k`` best outputs for ``x`` with their scores, best first: a list of
        ``(output, score)`` pairs (outputs as ``predict_one`` returns them; the first is
        ``predict_one(x)``'s). Exact; see :mod:`streamssvm.nbest`."""
        raise NotImplementedError

    def predict_nbest_many(self, X, k, constraints=None):
        """:meth:`predict_nbest_one` of every example of a batch (a list, or a 2-D array /
        DataFrame of flat examples), in order."""
        if isinstance(X, (list, tuple)):
            rows = X
        else:
            rows, _ = self._as_matrix(X)
        return [self.predict_nbest_one(x, k, constraints) for x in rows]

    def explain_one(self, x, top=None):
        """How the model scores ``x``: a dict with the predicted ``output`` and the
        ``runner_up`` (the second best output), their ``score`` / ``runner_up_score``, and
        ``features``: every feature of ``x`` (per token for a sequence) with its ``value`` and
        its contribution (value x weight) to each of the two scores, the features favouring
        the prediction most first (``top``: keep that many). ``rest`` holds the part of each
        score no single feature carries (transitions, start / end, pairwise potentials). See
        :func:`streamssvm.inspection.explain`.

        >>> import streamssvm as ss
        >>> m = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.1, seed=0))
        >>> m.learn_many([{"fur": 1.0}, {"wheels": 1.0}], ["cat", "car"])
        >>> e = m.explain_one({"fur": 1.0, "wheels": 0.2})
        >>> e["output"], e["runner_up"], e["features"][0]["feature"]
        ('cat', 'car', 'fur')
        """
        from ..inspection import explain
        return explain(self, x, top)

    @staticmethod
    def _check_k(k):
        if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        return int(k)

    def _score_tables(self):
        """The fitted learner's :class:`streamssvm.scoring.ScoreTables`."""
        from ..scoring import score_tables
        return score_tables(self._learner)

    # -------------------------------------------------------------- optimization / certificates
    def refine(self, passes: float = 1.0, tol: float | None = None, progress=None, certify: bool = False):
        """Work on the held examples for ``passes`` effective passes (what that means is the
        learner's: e.g. BCFW block steps, MEMOIR SGD epochs over its window);
        ``progress(fraction, learner)`` is called between chunks.

        Returns None, or with ``certify=True`` the :meth:`certificate` after refining. The
        certificate is a full exact pass over the held examples (one or two oracle calls per
        example: about as costly as a refinement pass), so a loop of ``refine(1)`` does not pay
        for it unless asked; ``tol`` stops early on the learner's own gap checks either way."""
        if self._learner is None:
            raise RuntimeError("refine() needs at least one learned example")
        self._learner.refine(passes, tol=tol, progress=progress)
        return self._learner.certificate() if certify else None

    def certificate(self):
        """Certificate of the model on the examples it holds (see
        :class:`streamssvm.certificate.Certificate`); observing it changes nothing."""
        if self._learner is None:
            lam = self.learner.effective_lam()
            return Certificate.empty(lam)
        return self._learner.certificate()

    def regularization_path(self, eps=0.1, kappa=0.7, lam_min=1e-5, exact=True, data=None, **kwargs):
        """The eps-approximate regularization path of the examples a BCFW learner holds (Osokin
        et al., Minding the gaps for block Frank-Wolfe optimization of structured SVMs, ICML
        2016, Sec. 4): a :class:`streamssvm.regpath.RegularizationPath` (breakpoints, certified
        gaps, ``model_at(lam)``, ``best(metric)`` on ``data``). The model is not changed; see
        :func:`streamssvm.regpath.regularization_path` for the other options."""
        from ..regpath import regularization_path
        return regularization_path(self, eps, kappa, lam_min, exact, data, **kwargs)

    def grid_search(self, lams, warm_start=True, eps=0.1, data=None, **kwargs):
        """The baseline of the path: solve the held problem at each lambda of ``lams`` to a
        certified gap <= ``eps`` (:func:`streamssvm.regpath.grid_search`)."""
        from ..regpath import grid_search
        return grid_search(self, lams, warm_start, eps, data, **kwargs)

    def weights_finite(self, full=True):
        """Whether the learner's weights are finite: all of them (``full``), else the feature
        rows of the last learned record and the label-pair and bias weights (what a step on it
        changes; cheap enough to run after every record). The stream engine undoes a step after
        which this is False (``Engine._undo``).

        >>> import streamssvm as ss
        >>> m = ss.MulticlassSSVM(learner=ss.learners.SGD())
        >>> m.learn_one({"f": 1.0}, "a"); m.learn_one({"f": -1.0}, "b")
        >>> m.weights_finite(), m.weights_finite(full=False)
        (True, True)
        """
        lr = self._learner
        if lr is None:
            return True
        W = lr.weight_tables()
        if W is None:   # a learner without weight tables (MEMOIR): every float array of its state
            if not full:
                return True
            return _all_finite(lr.state())
        rows = None if full else getattr(self, "_last_fidx", None)
        if (type(rows) is np.ndarray and rows.ndim == 1 and rows.dtype.kind == "i"
                and all(type(a) is np.ndarray and a.ndim == 2 and a.dtype == np.float64 for a in (W.E, W.T, W.B))):
            return bool(rows_finite(W.E, rows, W.T, W.B))   # one compiled pass, the same answer
        if not (np.isfinite(W.T).all() and np.isfinite(W.B).all()):
            return False
        if full:
            return bool(np.isfinite(W.E).all())
        if rows is None:
            return True
        rows = np.asarray(rows)
        rows = rows[(rows >= 0) & (rows < W.E.shape[0])]
        return bool(np.isfinite(W.E[rows]).all())

    @property
    def bound_learner(self):
        """The learner bound to this model's structure (it holds the running state; ``learner``
        stays the configuration), or None before the first example."""
        return self._learner

    @property
    def n_blocks(self):
        """Examples held by the learner (the n of its certificate)."""
        return 0 if self._learner is None else self._learner.n_blocks

    @staticmethod
    def labels_of(y):
        """The label values a target ``y`` of this task holds (one here; each token's tag of a
        sequence, the keys of a multi-label dict): what :attr:`classes` is made of."""
        return (y,)

    @property
    def classes(self):
        """The labels known so far, in the order they were registered."""
        return list(self._labels.labels)

    # -------------------------------------------------------------- persistence
    def _params_state(self):
        p = {k: v for k, v in self._get_params().items() if k != "learner"}
        if p.get("labels") is not None:
            p["labels"] = [_encode_key(lab) for lab in p["labels"]]
        if p.get("loss") is not None:
            p["loss"] = np.asarray(p["loss"], dtype=np.float64)
        return {"class": type(self).__name__, "params": p,
                "learner": {"class": type(self.learner).__name__, "params": dict(self.learner._get_params())}}

    @classmethod
    def _params_from_state(cls, params):
        """Decode estimator parameters saved by ``_params_state`` (hook for non-JSON values)."""
        if params.get("labels") is not None:
            params["labels"] = [_decode_key(lab) for lab in params["labels"]]
        if params.get("loss") is not None:
            params["loss"] = np.asarray(params["loss"])
        return params

    def state(self):
        """Everything the model needs, as JSON leaves and numpy arrays (no pickle); arrays may be
        the model's own (:meth:`Learner.state <streamssvm.learners.base.Learner.state>`): copy it to
        keep it while the model learns."""
        if getattr(self, "loss", None) is not None and callable(self.loss):
            raise TypeError("a model with a callable loss cannot be saved (no pickle); pass the cost as a matrix")
        return {"config": self._params_state(), "features": self._features.state(),
                "scaling": None if self._scaler is None else self._scaler.state(),
                "labels": self._labels.state(),
                "learner": None if self._learner is None else self._learner.state(),
                "calibration": None if self._temperature is None else self._temperature.state()}

    def save(self, path):
        """Save to one file (zip of a JSON manifest and .npy arrays, checksummed, atomic)."""
        return checkpoint.save_state(path, self.state(), kind=MODEL_KIND,
                                     meta={"estimator": type(self).__name__})

    @classmethod
    def from_state(cls, st):
        """Rebuild a model from :meth:`state`; ``cls`` must be the saved class."""
        cfg = st["config"]
        if cfg["class"] != cls.__name__:
            raise checkpoint.CheckpointError(f"the file holds a {cfg['class']}, not a {cls.__name__} "
                                             "(streamssvm.load(path) loads any estimator)")
        lcls = learner_class(cfg["learner"]["class"])
        learner = lcls(**lcls.upgrade_params(cfg["learner"]["params"]))   # files may use former names
        params = cls._params_from_state(dict(cfg["params"]))
        if "scale" in inspect.signature(cls.__init__).parameters and "scale" not in params:
            params["scale"] = False    # a file from before feature scaling: learned unscaled
        model = cls(learner=learner, **params)
        model._features = FeatureIndex.from_state(st["features"])
        dim = model._features.dim
        model._scaler = restore_statistics(st.get("scaling"), model._scaler, f"scale={model.scale}",
                                           "scaling statistics", lambda v: ColumnScaler.from_state(v, dim))
        model._labels = LabelIndex.from_state(st["labels"])
        if st.get("calibration") is not None:     # files before calibrated confidence have none
            model._temperature = Temperature.from_state(st["calibration"], **cls._calibration_settings)
        if st["learner"] is not None:
            model._learner = learner.clone(model._overrides() or None)
            model._structure = model._make_structure()
            model._learner.restore(model._structure, model._labels.labels, st["learner"])
            model._check_restored()
        return model

    def _check_restored(self):
        """The restored learner fits the restored indexes: every feature index the index can
        produce has a weight row, every label id the learner can predict has a label."""
        W = self._learner.weight_tables()
        if W is None:
            return
        if W.E.shape[0] < self._features.dim:
            raise checkpoint.CheckpointError(f"invalid model file: {self._features.dim} feature columns but "
                                             f"{W.E.shape[0]} weight rows")
        K = int(self._learner.n_labels)
        if K > len(self._labels):
            raise checkpoint.CheckpointError(f"invalid model file: the learner knows {K} labels, the file "
                                             f"names {len(self._labels)}")

    @classmethod
    def load(cls, path):
        """Load a model of this class (a file of another class is refused; see
        ``streamssvm.load``)."""
        st, _ = checkpoint.load_state(path, kind=MODEL_KIND)
        return _restoring(cls.from_state, st)

    # -------------------------------------------------------------- batch helpers
    @staticmethod
    def _as_matrix(X):
        """(2-D float array, pandas index or None) of a DataFrame or an array-like."""
        if _is_dataframe(X):
            return X.to_numpy(dtype=np.float64), X.index
        A = np.asarray(X, dtype=np.float64)
        if A.ndim != 2:
            raise ValueError(f"X must be 2-D (examples x features), got shape {A.shape}")
        return A, None
