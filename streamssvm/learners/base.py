"""The Learner protocol: HOW the weights move.

A learner is a configuration object (validated constructor arguments, a river ``Base`` so
``clone()`` works) that an estimator *binds* to a structure. Once bound it owns all running
state: weights, held examples (dual blocks), averaging, caches, scratch space. Data flows one
way: the estimator encodes an example into compact arrays (a CSR of tokens and a label array)
and hands them to the learner; the learner calls the structure's kernels; the certificate reads
the learner's public state; checkpoints save ``state()``.

Every learner implements the whole protocol, with these argument orders everywhere:

==========================================================  =====================================
``bind(structure, labels)``                                 allocate running state
``ensure(n_features, labels)``                              grow for new features / labels
``learn(tok_ptr, fidx, fval, y, Ki=1)``                     one new example (``weight=c``: see
                                                            :attr:`Learner.example_weights`)
``learn_batch(ex_tok, tok_ptr, fidx, fval, y_ptr, ys, Ki)`` m new examples, in order
``refine(passes=1.0, tol=None, progress=None)``             work on the held examples
``predict(ex_tok, tok_ptr, fidx, fval, y_ptr, n_out)``      label ids, laid out by ``y_ptr``
``certificate()``                                           a :class:`~streamssvm.Certificate`
``state()`` / ``restore(structure, labels, state)``         plain JSON leaves and numpy arrays
``n_blocks``                                                examples held (the certificate's n)
``emission_weights()``                                      dense prediction weights, or None
==========================================================  =====================================

Optional, for parameter mixing across workers (:mod:`streamssvm.distributed`); a learner that
cannot be mixed keeps the defaults, which raise ``NotImplementedError`` naming the learner:

==========================================================  =====================================
``parameters()``                                            the mixed arrays, by name (copies)
``set_parameters(params)``                                  install mixed arrays (may grow)
``dual_snapshot()`` / ``blend_dual(snapshot, weight)``      dual learners: blend the held blocks
==========================================================  =====================================

Declared, not discovered: a learner class states what it can do in class attributes the
estimators, the command line and :mod:`streamssvm.distributed` read (``structures``,
``mixing``, ``distributed``, ``dense_weights``, ``multilabel_inference``,
``default_chain_loss``, ``chain_losses``; see :class:`Learner`), and its constructor parameters
as :class:`~streamssvm.params.Param` rows (``params``), stored unchanged. The learners share
one vocabulary: ``window`` (examples held), ``averaging`` (bool), ``tol`` (a stopping
tolerance); former names are read from old model files and accepted, deprecated, from callers
(``renamed``, :meth:`Learner.upgrade_params`). :mod:`streamssvm.learners.checks` generates the
conformance checks every learner passes.

Encoded examples: ``tok_ptr`` (int, L + 1) is the CSR row pointer of the example's L tokens
into ``fidx`` (int feature ids) and ``fval`` (float values); ``y`` holds label ids (one per token
for chains and multiclass; the positive labels for multi-label, ``Ki`` of them). A batch stacks
m examples: ``ex_tok`` (m + 1) points into ``tok_ptr`` and ``y_ptr`` (m + 1) into ``ys``.

**Threads**: a learner is used by one thread at a time. The methods that touch its running
state (:data:`GUARDED`) raise a RuntimeError when another thread is inside one of them
(:func:`one_thread_at_a_time`: a non-blocking re-entrant lock per learner, about a
microsecond per call, that detects and never waits).

``certificate()`` **observes**: it never changes anything the learner will do next (weights,
sampling state, schedules, random streams). Two runs of the same stream, one certified after
every example and one never, end with bit-identical weights (``tests/test_protocol.py``).
"""
from __future__ import annotations

import abc
import functools
import itertools
import numbers
import threading
import warnings

import numpy as np
from river import base

from ..params import set_params


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_number(name, value, low=None, high=None, integer=False, low_open=False, allow_none=False):
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Integral if integer else numbers.Real) and not isinstance(value, bool)
    if not ok:
        kind = "an integer" if integer else "a number"
        raise TypeError(f"{name} must be {kind}, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value!r}")
    return value


def label_capacity(n_labels, Kc):
    """The label columns to allocate for ``n_labels`` labels when ``Kc`` are: ``Kc`` while they
    fit, else a quarter more (at least ``n_labels``), so labels arriving one at a time cost
    amortized O(1) relayouts.

    >>> label_capacity(3, 4), label_capacity(5, 4), label_capacity(40, 4)
    (4, 6, 40)
    """
    return Kc if n_labels <= Kc else max(n_labels, int(Kc * 1.25) + 1)


def _no_mixing(learner, what):
    return NotImplementedError(f"{type(learner).__name__} does not support {what}, which distributed "
                               "learning uses to mix workers (supported: BCFW, SGD, MEMOIR)")


def check_search_rescaling(search, rescaling):
    """A budgeted slack search needs slack rescaling; checked when the learner is bound, after an
    estimator's ``rescaling=`` has reached it."""
    if search != "exact" and rescaling != "slack":
        raise ValueError(f"search={search!r} applies to slack rescaling (margin rescaling decodes "
                         "exactly): set rescaling='slack' on the learner or the estimator")


#: the methods that read or write a bound learner's running state (weights, held examples,
#: scratch buffers): one thread at a time (:func:`one_thread_at_a_time`)
GUARDED = ("bind", "ensure", "learn", "learn_batch", "learn_dense_rows", "refine", "predict", "certificate", "restore",
           "set_parameters", "blend_dual", "predict_learn_record", "predict_learn_run", "predict_class",
           "record_emission_table",
           "set_union", "set_lam", "reset_to_truth", "start_at_max_loss", "refresh_gaps")

#: the guarded methods that only read the running state: the others advance the learner's
#: :func:`state_version` on entry
READING = frozenset(("predict", "predict_class", "record_emission_table"))


def state_version(learner):
    """A number that changes whenever a guarded method that may write the learner's running
    state (every :data:`GUARDED` method but the :data:`READING` ones) is entered: two equal
    readings bracket no change of the weights, the held examples or the label set, so a
    prediction's scores taken at the first still hold at the second (``MulticlassSSVM`` hands
    ``predict_one``'s class scores to the temperature fit of the ``learn_one`` that follows)."""
    return learner.__dict__.get("_state_version", 0)


_VERSIONS = itertools.count(1)   # state_version: one counter for every learner (a value is never reused)


def one_thread_at_a_time(method):
    """``method`` raising a RuntimeError when another thread is inside a guarded method of the
    same learner. A model is not thread-safe (its kernels write shared weights and scratch
    buffers in place, without atomics): two threads on one model lost examples silently. The
    guard is a non-blocking re-entrant lock per learner (a guarded method may call another); it
    detects, it never waits."""
    if getattr(method, "_one_thread", False):
        return method
    writes = method.__name__ not in READING

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        if writes:   # on entry: a write that raises half-way changed the state too
            self._state_version = next(_VERSIONS)
        lock = self.__dict__.get("_thread_guard")
        if lock is None:
            lock = self.__dict__.setdefault("_thread_guard", threading.RLock())   # atomic: one lock
        if not lock.acquire(False):   # non-blocking (positional: the keyword costs a tenth of the guard)
            raise RuntimeError(f"{type(self).__name__}.{method.__name__}: another thread is using this model; "
                               "a model is not thread-safe: use it from one thread at a time (a lock of your "
                               "own around every call), or one model per thread")
        try:
            return method(self, *args, **kwargs)
        finally:
            lock.release()

    guarded._one_thread = True
    return guarded


class Learner(base.Base, abc.ABC):
    """Base class of learners: configuration, plus running state once bound (see module doc).

    Subclasses set ``lam`` (the regularization lambda of P(w) = lam/2 ||w||^2 + (1/n) sum_i H_i(w))
    and ``rescaling`` (``"margin"`` or ``"slack"``) in their constructor.
    """

    #: the constructor's parameters (:class:`~streamssvm.params.Param` rows)
    params: tuple = ()

    #: whether the learner predicts then learns a run of records in one kernel call
    #: (``predict_learn_run``, bit-identical to record by record; see
    #: :mod:`streamssvm._kernels.microbatch`)
    predicts_learns_runs = False

    def learns_dense_rows(self):
        """Whether ``learn_dense_rows(A, nnz, last, ys, scaling)`` learns the rows of a dense
        2-D array in one call now, bit-identical to ``learn_batch`` of their CSR (BCFW: a FIFO
        store bounded by blocks); else the caller learns the CSR."""
        return False

    #: whether the learner predicts a multiclass record, and gives its class scores (those of
    #: ``calibration.emission_scores``), in one kernel call (``predict_class``, a
    #: :data:`READING` method)
    predicts_classes = False

    #: whether the learner computes a record's emission table at its prediction weights (those of
    #: ``calibration.emission_scores``, to the bit) in its own record kernel
    #: (``record_emission_table``, a :data:`READING` method)
    scores_records = False

    #: (with ``scores_records``) whether nothing is learned yet, so that kernel does not exist
    record_kernel_pending = False

    def prediction_tables(self):
        """``(E, ZE, zc, T, B, scale)`` with which the learner predicts (the arrays its own, not
        copies; :func:`streamssvm.calibration.predict_tables` asks once the learner is bound), or
        None for weights that are not one dense table (MEMOIR, GDMM, Pragam): such a model's
        probabilities are one-hot on its prediction."""
        return None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in GUARDED:   # threads: detected, see one_thread_at_a_time
            if name in cls.__dict__ and callable(cls.__dict__[name]):
                setattr(cls, name, one_thread_at_a_time(cls.__dict__[name]))

    def __getstate__(self):
        """The instance's attributes without its thread guard (a lock neither copies nor pickles)."""
        st = dict(self.__dict__)
        st.pop("_thread_guard", None)
        return st
    #: former parameter names, ``{old: new}``: accepted with a DeprecationWarning (and read
    #: silently from model files written before the learners shared one vocabulary)
    renamed: dict = {}

    @classmethod
    def upgrade_params(cls, params):
        """``params`` (constructor arguments, e.g. read from a model file) with former names
        and values in their current form (:attr:`renamed`, :meth:`_upgrade_values`)."""
        return cls._upgrade_values({cls.renamed.get(k, k): v for k, v in params.items()})

    @classmethod
    def _upgrade_values(cls, params):
        """Former values (and names with a value change) in their current form; the default
        changes nothing."""
        return params

    def _set_params(self, values):
        """Store the constructor's ``locals()`` through :func:`~streamssvm.params.set_params`;
        former names and values (the constructor's ``**kwargs``, named so river's ``repr`` and
        ``clone`` skip it) are taken with a DeprecationWarning."""
        cls = type(self)
        current = {p.name: values[p.name] for p in cls.params}
        former = dict(values.get("kwargs") or {})
        new = cls.upgrade_params(current | former)
        unknown = sorted(set(new) - set(current))
        if unknown:
            raise TypeError(f"{cls.__name__}.__init__() got an unexpected keyword argument {unknown[0]!r}")
        targets = {cls.renamed.get(k, k) for k in former}
        said = [f"{k}= (now {cls.renamed[k]}=)" if k in cls.renamed else f"{k}=" for k in sorted(former)]
        said += [f"{k}={current[k]!r} (now {k}={new[k]!r})" for k in current
                 if k not in targets and new[k] is not current[k]]
        if said:
            warnings.warn(f"{cls.__name__}: {', '.join(said)} deprecated, see its docstring",
                          DeprecationWarning, stacklevel=3)
        set_params(self, new)

    # ---------------------------------------------------------------- declared capabilities
    # Read by the estimators, the command line and :mod:`streamssvm.distributed` instead of
    # asking which class a learner is.

    #: names of the structures this learner can be bound to (``Structure.name``); None = all
    structures: tuple | None = None
    #: how :mod:`streamssvm.distributed` mixes workers' models: ``"dual"`` (blend the held dual
    #: blocks and sum the weights' changes: BCFW), ``"primal"`` (iterative parameter mixing,
    #: McDonald et al. 2010: average the :meth:`parameters`: SGD, MEMOIR), or None (not mixable)
    mixing: str | None = None
    #: whether :mod:`streamssvm.distributed` can run this learner (see :meth:`check_distributed`)
    distributed: bool = False
    #: whether :meth:`emission_weights` returns a dense (features x labels) matrix
    dense_weights: bool = False
    #: the multi-label inference the learner drives: ``"enum"`` (exact enumeration inside the
    #: kernels) or ``"auto"`` (oracles called from Python, the LP relaxation above 16 labels)
    multilabel_inference: str = "enum"
    #: the chain loss a :class:`~streamssvm.SequenceTagger` uses when its ``loss`` is not set
    default_chain_loss: str = "hamming"
    #: the chain losses the learner optimizes (None: every loss of the chain structure)
    chain_losses: tuple | None = None
    #: whether :meth:`learn` takes ``weight=c`` (c > 0): the importance weight of the example in
    #: the objective lam/2 ||w||^2 + (1 / sum_i c_i) sum_i c_i H_i(w). A learner without it is
    #: given no weight other than 1 (the estimators refuse one with a NotImplementedError naming
    #: the learner; w=0 learns nothing with any learner)
    example_weights: bool = False

    def check_structure(self, structure):
        """Raise a clear error when this learner cannot learn ``structure``."""
        if self.structures is not None and structure.name not in self.structures:
            raise ValueError(f"{type(self).__name__} learns {', '.join(self.structures)} models, "
                             f"not {structure.name}")

    def check_distributed(self, n_features=None):
        """Raise a ValueError naming what :mod:`streamssvm.distributed` cannot do with this
        learner as configured (``n_features``: the estimator's hashed input width, if any)."""
        if not self.distributed:
            raise ValueError(f"{type(self).__name__} is not supported by distributed learning yet "
                             "(supported: BCFW, SGD, MEMOIR with dense rows)")

    def effective_lam(self, n=None):
        """The regularization lambda of the objective with ``n`` examples held (default: the
        held ones): ``lam`` (BCFW's ``lam=None`` makes it follow n)."""
        return self.lam

    def weight_tables(self):
        """The :class:`~streamssvm.structures.base.Weights` (emission, transition and bias
        tables) the learner steps on, or None for a learner that keeps its weights otherwise
        (MEMOIR's class rows). Its live state, for checks (finiteness, restored shapes)."""
        return None

    @property
    def bound(self):
        return getattr(self, "_bound", False)

    # ------------------------------------------------------------------ lifecycle
    @abc.abstractmethod
    def bind(self, structure, labels):
        """Allocate the running state for ``structure``; ``labels`` is the estimator's label list."""

    @abc.abstractmethod
    def ensure(self, n_features, labels):
        """Grow weights and buffers for ``n_features`` features and the labels in ``labels``."""

    # ------------------------------------------------------------------ learning
    @abc.abstractmethod
    def learn(self, tok_ptr, fidx, fval, y, Ki=1, weight=1.0):
        """Learn one new example (the estimator has called :meth:`ensure` for its features and
        labels) with importance weight ``weight`` > 0; a learner that does not take weights
        (:attr:`example_weights` False) raises a NotImplementedError for one other than 1
        (:meth:`_unweighted`)."""

    def _unweighted(self, weight):
        """Raise a NotImplementedError naming the learner when ``weight`` is not 1 (a learner
        without :attr:`example_weights`: a weight is never ignored silently)."""
        if weight != 1.0:
            raise NotImplementedError(f"{type(self).__name__} does not take example weights (got weight="
                                      f"{weight!r}); the learners that do: SGD, BCFW, CuttingPlane, BMRM, Pragam, MEMOIR, GDMM")

    def learn_batch(self, ex_tok, tok_ptr, fidx, fval, y_ptr, ys, Ki=None):
        """Learn m new examples in order, exactly as m calls of :meth:`learn` would (the
        default makes those m calls; a learner with a batched kernel overrides it)."""
        for e in range(len(ex_tok) - 1):
            a, b = ex_tok[e], ex_tok[e + 1]
            tp = np.asarray(tok_ptr[a:b + 1] - tok_ptr[a], dtype=np.int32)
            self.learn(tp, fidx[tok_ptr[a]:tok_ptr[b]], fval[tok_ptr[a]:tok_ptr[b]], ys[y_ptr[e]:y_ptr[e + 1]],
                       1 if Ki is None else Ki[e])

    @abc.abstractmethod
    def refine(self, passes=1.0, tol=None, progress=None):
        """Work on the held examples for ``passes`` effective passes (stop early once a
        certificate shows gap <= ``tol``); ``progress(fraction, learner)`` is called between chunks."""

    # ------------------------------------------------------------------ inference / certificates
    @abc.abstractmethod
    def predict(self, ex_tok, tok_ptr, fidx, fval, y_ptr, n_out):
        """Label ids of a batch: an int32 array of length ``n_out``, example e at ``y_ptr[e]:y_ptr[e+1]``."""

    @abc.abstractmethod
    def certificate(self):
        """A :class:`~streamssvm.certificate.Certificate` of the current model on the held
        examples. Must not change any state that affects what the learner does next."""

    @property
    @abc.abstractmethod
    def n_blocks(self):
        """Number of examples held (the n of the objective)."""

    # ------------------------------------------------------------------ persistence
    @abc.abstractmethod
    def state(self):
        """The running state as a dict of JSON leaves and numpy arrays (no pickle). Its arrays may
        be the learner's own (BCFW, SGD, BMRM, cutting plane and Pragam hand out their weights
        without a copy, for a save that writes them at once): copy it (``copy.deepcopy``) to keep
        it while learning goes on, as ``Engine.checkpoint``'s in-memory restore point does."""

    @abc.abstractmethod
    def restore(self, structure, labels, state):
        """Rebuild the running state saved by :meth:`state` (bind included)."""

    def emission_weights(self):
        """The dense emission weights the learner predicts with, as a (features x labels) array
        with the scale folded in: the emission score of label k for a token x is
        ``sum_j x_j W[j, k]`` (row 0 is the bias feature; the columns are the labels known to
        the learner, in order). For a multiclass model these scores are the whole prediction
        (``MulticlassSSVM.predict_learn_many`` scores a dense batch with one matrix product).
        A fresh array (the learner's state is not exposed), or ``None`` for a learner whose
        weights are not one dense matrix (the default).

        >>> import numpy as np, streamssvm as ss
        >>> m = ss.MulticlassSSVM(labels=["a", "b"], learner=ss.learners.BCFW(lam=0.1, seed=0))
        >>> m.learn_one(np.array([1.0, 0.0]), "b"); m.learn_one(np.array([0.0, 1.0]), "a")
        >>> W = m.bound_learner.emission_weights(); W.shape
        (3, 2)
        >>> ["ab"[int(np.argmax(W[0] + x @ W[1:]))] for x in np.eye(2)] == list(m.predict_many(np.eye(2)))
        True
        """
        return None

    # ------------------------------------------------------------------ parameter mixing (optional)
    def parameters(self):
        """The arrays that define the model, by name (copies), for parameter mixing: workers
        average (or add) each other's changes of these arrays and install the result with
        :meth:`set_parameters` (:mod:`streamssvm.distributed`). Empty before the first example.

        >>> import numpy as np, streamssvm as ss
        >>> m = ss.MulticlassSSVM(labels=[0, 1], learner=ss.learners.SGD(lam=0.1, seed=0))
        >>> m.learn_one(np.array([1.0, 0.0]), 1)
        >>> p = m.bound_learner.parameters()
        >>> sorted(p)
        ['AB', 'AE', 'AT', 'B', 'E', 'T']
        >>> m.bound_learner.set_parameters({k: 2 * v for k, v in p.items()})
        >>> bool(np.allclose(m.bound_learner.parameters()["E"], 2 * p["E"]))
        True
        """
        raise _no_mixing(self, "parameters()")

    def set_parameters(self, params):
        """Install arrays named as :meth:`parameters` returns them; arrays larger than the
        learner's grow it (zero-padded), smaller ones are zero-padded."""
        raise _no_mixing(self, "set_parameters()")

    def dual_snapshot(self):
        """Dual learners: the state of the held dual blocks, for :meth:`blend_dual`."""
        raise _no_mixing(self, "dual_snapshot() (it keeps no dual blocks)")

    def blend_dual(self, snapshot, weight):
        """Dual learners: move every held block from its state in ``snapshot`` (a
        :meth:`dual_snapshot`; blocks not in it start from their birth state) a fraction
        ``weight`` of the way to its current state: ``alpha_i <- alpha_i^0 + weight (alpha_i -
        alpha_i^0)``. With 0 < weight <= 1 every block stays feasible (a convex combination)."""
        raise _no_mixing(self, "blend_dual() (it keeps no dual blocks)")


class DenseWeights:
    """Mixin of the learners whose weights are one :class:`~streamssvm.structures.base.Weights`
    ``W`` (emission rows E, transition table T, bias B; ``Kc`` label columns allocated, the
    first ``_K`` of them the labels the learner knows)."""

    def weight_tables(self):
        return self.W

    @property
    def n_labels(self):
        """Labels the learner knows (the used columns of its weight tables)."""
        return self._K
