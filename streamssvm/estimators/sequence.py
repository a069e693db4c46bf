"""Sequence labeling: chain structural SVM with Viterbi decoding."""
from __future__ import annotations

import numpy as np
from river import base

from .. import calibration
from .._kernels import marginals as KM
from ..learners.bcfw import BCFW
from ..learners.cutting_plane import CuttingPlane
from ..learners.gdmm import GDMM
from ..learners.sgd import SGD
from ..features import _decode_key, _encode_key
from ..learners.bmrm import BMRM
from ..learners.pragam import Pragam
from ..structures import Chain
from ..structures.chain import CHAIN_LOSSES
from .base import Estimator, is_missing, weight_batch


#: the loss of ``SequenceTagger(loss=None)``: per-token Hamming. bench/quality_sequence.py measures it
#: ahead of the per-sentence normalized loss on Brown (BCFW, 3 passes: 12 tags 0.9616 vs 0.9543, base
#: tags 0.9037 vs 0.8825 token accuracy), and not as a rescaled lambda (normalized at lambda / 20 stays
#: behind). The OCR papers' protocol (Lacoste-Julien et al., Block-coordinate Frank-Wolfe optimization
#: for structural SVMs) uses ``loss="normalized"``: the OCR benchmarks and the demo name it.
DEFAULT_LOSS = "hamming"
_LOSS_NAMES = {"normalized": "Hamming loss normalized per sentence", "hamming": "per-token Hamming loss"}


class SequenceTagger(Estimator, base.Estimator):
    """Sequence labeling (chain structural SVM, Viterbi decoding).

    ``x`` is a list of per-token feature dicts or a (L, d) array; ``y`` a list of L labels.

    Parameters
    ----------
    loss
        ``"hamming"`` (default: the per-token costs summed over the sentence, every token weighs
        the same, as in a CRF's likelihood; measured better for tagging on Brown against
        python-crfsuite, ``bench/results/quality_sequence.md``) or ``"normalized"`` (averaged
        over the sentence: every sentence weighs the same, long sentences' tokens less, and
        P(0) = 1; the OCR papers' loss). A cost matrix / callable here is the pre-``costs`` form
        of ``costs`` (with the default loss).
    costs
        Per-token costs: a dict ``{tag: weight}`` (missing a true ``tag`` costs ``weight``, other
        tags 1), a (K, K) matrix over the declared ``labels`` or a callable ``cost(y_true, y)``.
    transitions, labels, n_features, rescaling
        As for the other estimators.
    max_record_cost
        A per-record budget (default 2**31; None: none): a sentence whose work
        ``tokens x tags**2 + stored features x tags + tokens**2`` exceeds it raises
        ``ValueError`` with that count (a dead letter with its reason in a run) and leaves the
        model unchanged. The ``tokens**2`` term is the chain statistic's squared norm, which
        still goes through token pairs (no L x L array is held; a 20,000-token sentence takes
        about 40 s of CPU against 10 s at 10,000 tokens).

    The default learner is ``learners.BCFW(seed=0)``: runs are deterministic by default.

    Examples
    --------
    >>> import numpy as np, streamssvm as ss
    >>> tagger = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, replay=3, seed=0))
    >>> for i in range(60):
    ...     words = ["the", "dog", "runs"] if i % 2 else ["a", "cat", "sleeps"]
    ...     tagger.learn_one([{"w=" + w: 1} for w in words], ["DET", "NOUN", "VERB"])
    >>> tagger.predict_one([{"w=the": 1}, {"w=cat": 1}, {"w=runs": 1}])
    ['DET', 'NOUN', 'VERB']
    >>> per_token = ss.SequenceTagger(loss="hamming", costs={"NOUN": 2.0})
    >>> per_token.learn_one([{"w=dog": 1}], ["NOUN"]); per_token.predict_one([{"w=dog": 1}])
    ['NOUN']
    """

    _learners = (BCFW, SGD, CuttingPlane, BMRM, GDMM, Pragam)
    task = "sequence"

    @staticmethod
    def labels_of(y):
        """Each token's tag."""
        return y

    @classmethod
    def _default_learner(cls):
        return BCFW(seed=0)

    def __init__(self, learner=None, loss=None, transitions=True, labels=None, n_features=None, rescaling=None,
                 costs=None, max_record_cost=1 << 31):
        if max_record_cost is not None and (not isinstance(max_record_cost, int) or isinstance(max_record_cost, bool)
                                            or max_record_cost < 1):
            raise ValueError(f"max_record_cost must be None or a positive int, got {max_record_cost!r}")
        self.max_record_cost = max_record_cost
        if isinstance(loss, str) and loss not in CHAIN_LOSSES:
            raise ValueError(f"loss must be one of {tuple(CHAIN_LOSSES)} or a cost, got {loss!r}")
        if isinstance(loss, str) or loss is None:
            self.loss = loss
        else:   # the pre-`costs` form: a cost matrix / callable, with the default loss
            if costs is not None:
                raise ValueError("pass the per-token cost as costs= (loss= names the loss)")
            self.loss, costs = None, loss
        self.costs = costs
        self.transitions = bool(transitions)
        self._init_common(learner, n_features, labels, rescaling)
        allowed = self.learner.chain_losses
        if self.loss is not None and allowed is not None and self.loss not in allowed:
            what = " or ".join(f"{_LOSS_NAMES[k]} (loss={k!r})" for k in allowed)
            raise ValueError(f"learners.{type(self.learner).__name__} optimizes the {what}; use "
                             f"loss={self.learner.default_chain_loss!r} (its default) or another learner "
                             f"for loss={self.loss!r}")
        self._make_structure()

    def coerce_input(self, x, y):
        """A record's ``(x, y)``: x a list of token feature dicts or a 2-D array, y a list of tags."""
        if isinstance(x, np.ndarray) and x.ndim != 2:
            raise ValueError(f"sequence examples need a 2-D array (tokens x features), got shape {x.shape}")
        if not isinstance(y, (list, tuple)):
            raise TypeError(f"sequence labels must be a list, got {type(y).__name__}")
        return x, list(y)

    def _loss_name(self):
        """The loss in use: ``loss``, else the learner's ``default_chain_loss`` (per-token
        ``"hamming"``, except for GDMM, whose factorwise steps are written for the normalized loss)."""
        if self.loss:
            return self.loss
        return self.learner.default_chain_loss

    def _make_structure(self):
        return Chain(cost=self.costs, transitions=self.transitions, loss=self._loss_name())

    def _ki(self):
        """The chain's loss code, read by the kernels in the Ki slot (``_kernels/chain.py``)."""
        return CHAIN_LOSSES[self._loss_name()]

    def state(self):
        if callable(self.costs):
            raise TypeError("a model with a callable cost cannot be saved (no pickle); pass costs as a dict "
                            "{tag: weight} or a matrix")
        return super().state()

    def _params_state(self):
        loss, self.loss = self.loss, None   # a name, not the cost array the base converts
        try:
            st = super()._params_state()
        finally:
            self.loss = loss
        st["params"]["loss"] = loss or self._loss_name()   # the name in use: a later default cannot change it
        c = self.costs
        if isinstance(c, dict):
            st["params"]["costs"] = {"tags": [_encode_key(k) for k in c], "weights": [float(v) for v in c.values()]}
        elif c is not None:
            st["params"]["costs"] = np.asarray(c, dtype=np.float64)
        return st

    @classmethod
    def _params_from_state(cls, params):
        # files written since the default became per-token name their loss; older ones stored None
        # for the default of their time, the per-sentence normalized loss: keep it
        loss = params.pop("loss", None) or "normalized"
        params = super()._params_from_state(params)
        params["loss"] = loss
        c = params.get("costs")
        if isinstance(c, dict) and "tags" in c:
            params["costs"] = {_decode_key(k): float(v) for k, v in zip(c["tags"], c["weights"])}
        elif c is not None:
            params["costs"] = np.asarray(c)
        return params

    @classmethod
    def _unit_test_params(cls):
        yield {"learner": BCFW(lam=1e-2, replay=1, seed=0)}

    def _encode_seq(self, x, y):
        for lab in (y if isinstance(y, (list, tuple)) else ()):  # validate before any state changes
            if lab is not None:  # (a missing label is reported below)
                self._labels.check(lab)
        if isinstance(y, (str, bytes)) or not hasattr(y, "__len__"):
            raise TypeError(f"y must be a list of labels (one per token), got {type(y).__name__}")
        for t, lab in enumerate(y):
            if is_missing(lab):
                raise ValueError(f"label of token {t} is missing")
        if isinstance(x, (list, tuple, np.ndarray)) and len(x) != len(y):   # before any name is registered
            raise ValueError(f"x has {len(x)} tokens but y has {len(y)} labels")
        tok_ptr, fidx, fval = self._features.encode_tokens(x, grow=True)
        L = len(tok_ptr) - 1
        if len(y) != L:
            raise ValueError(f"x has {L} tokens but y has {len(y)} labels")
        ys = np.empty(L, dtype=np.int32)
        for t, lab in enumerate(y):
            if is_missing(lab):
                raise ValueError(f"label of token {t} is missing")
            ys[t] = self._labels.encode(lab, grow=True)
        return tok_ptr, fidx, fval, ys

    def _check_cost(self, tok_ptr):
        """Raise when a record's decoding work exceeds ``max_record_cost``."""
        if self.max_record_cost is None:
            return
        L, K = len(tok_ptr) - 1, max(len(self._labels), 1)
        cost = L * K * K + int(tok_ptr[-1]) * K + L * L
        if cost > self.max_record_cost:
            raise ValueError(f"record of {L} tokens, {int(tok_ptr[-1])} stored features and {K} tags costs "
                             f"{cost} > max_record_cost={self.max_record_cost} (tokens x tags**2 + features x "
                             f"tags + tokens**2): split the sentence or raise max_record_cost")

    def learn_one(self, x, y, w=1.0):
        """Learn ``(x, y)`` with importance weight ``w`` >= 0: see
        :meth:`streamssvm.MulticlassSSVM.learn_one` (w=0 learns nothing; other weights need a
        learner that takes them)."""
        c = 1.0 if type(w) is float and w == 1.0 else self._weighted_start(x, y, w)
        if c is None:
            return
        with self._registering():
            tok_ptr, fidx, fval, ys = self._encode_seq(x, y)
            self._check_cost(tok_ptr)
        lr = self._sync()
        self._observe_calibration(tok_ptr, fidx, fval, ys)
        self._last_fidx = fidx   # rows a step on this record changes (weights_finite)
        self._give(lr, tok_ptr, fidx, fval, ys, self._ki(), c)

    def _encode_checked(self, x, y):
        tok_ptr = self._encode_seq(x, y)[0]
        self._check_cost(tok_ptr)

    #: a window evaluation is a forward-backward per held sequence: refit once per window and
    #: observe one sequence in 16 after the first 256 (under half a forward-backward per learned
    #: sequence). The fits are pooled with a half-life of 8192 offered sequences: a window of 64
    #: sequences is a small, not necessarily typical sample of the stream (OCR words, training on
    #: folds 1-8 and tuning on fold 9: the last window alone put beta at 3.74 (token ECE 0.054), the
    #: pool at 4.30 (0.018), the tuning fold's own best 4.39 (0.014))
    _calibration_settings = {"window": 64, "every": 64, "dense_until": 256, "stride": 16, "memory": 8192}

    def _gibbs_tables(self, tok_ptr, fidx, fval):
        """(S, T, B) of an encoded sequence with the scale folded in, or None for a learner
        without dense weight tables (GDMM)."""
        tables = calibration.predict_tables(self._learner)
        if tables is None:
            return None
        K = int(self._learner.n_labels)
        S = calibration.emission_scores(tables, tok_ptr, fidx, fval, K, self._learner)
        T, B = calibration.chain_tables(tables, K)
        return S, T, B

    #: the most tags for which the temperature is fitted while learning: a fit evaluates a
    #: forward-backward (~K^2 exp per token) of every sequence in its window several times; at
    #: Brown's 472 tags that made the first pass ~20x slower (283 vs 14.5 CPU s), so above it T
    #: stays 1 (predict_proba_one's marginals are then unfitted)
    _calibration_max_tags = 64

    def _observe_calibration(self, tok_ptr, fidx, fval, ys):
        """Offer the sequence, scored by the model before it learns it, to the temperature fit."""
        t = self._calibrator()
        if not t.wants() or len(ys) == 0 or int(self._learner.n_labels) > self._calibration_max_tags:
            return
        st = self._gibbs_tables(tok_ptr, fidx, fval)
        if st is None or st[0].shape[1] < 2:
            return
        t.observe_chain(*st, self.transitions, ys)

    def predict_proba_one(self, x):
        """Per-token marginals ``[{tag: p(y_t = tag | x)}, ...]`` of the Gibbs distribution
        p(y | x) ∝ exp(score(x, y) / T) over tag sequences (forward-backward; T the
        :attr:`temperature` fitted online). Tags the model has not learned yet get 0; a learner
        without dense weight tables (GDMM) gives one-hot marginals on the prediction."""
        labs = self._labels.labels
        if self._learner is None or len(self._labels) == 0:
            return [{} for _ in self.predict_one(x)]
        tok_ptr, fidx, fval = self._features.encode_tokens(x, grow=False)
        st = self._gibbs_tables(tok_ptr, fidx, fval)
        if st is None:
            return [{c: float(c == y) for c in labs} for y in self.predict_one(x)]
        S, T, B = st
        L, K = S.shape
        if L == 0:
            return []
        marg = np.empty((L, K))
        KM.chain_marginals(S, T, B, self.transitions, L, K, 1.0 / self.temperature, marg)
        return [{c: float(marg[t, i]) if i < K else 0.0 for i, c in enumerate(labs)} for t in range(L)]

    def sequence_proba_one(self, x, y=None):
        """p(y | x) of a whole tag sequence (default: the prediction) under the same Gibbs
        distribution as :meth:`predict_proba_one`; 0 for a sequence with a tag the model does not
        know, None before the first example or for a learner without dense weight tables."""
        if self._learner is None or len(self._labels) == 0:
            return None
        if y is None:
            y = self.predict_one(x)
        tok_ptr, fidx, fval = self._features.encode_tokens(x, grow=False)
        st = self._gibbs_tables(tok_ptr, fidx, fval)
        if st is None:
            return None
        S, T, B = st
        L, K = S.shape
        if len(y) != L:
            raise ValueError(f"x has {L} tokens but y has {len(y)} labels")
        if L == 0:
            return 1.0
        ids = np.empty(L, dtype=np.int64)
        for t, lab in enumerate(y):
            i = self._labels.index.get(lab)
            if i is None or i >= K:
                return 0.0
            ids[t] = i
        beta = 1.0 / self.temperature
        logZ = KM.chain_marginals(S, T, B, self.transitions, L, K, beta, np.empty((L, K)))
        return float(np.exp(beta * KM.chain_score(S, T, B, self.transitions, L, ids) - logZ))

    def predict_one(self, x, constraints=None):
        """The best tag sequence for ``x``; with ``constraints`` (a :class:`streamssvm.Constraints`
        or a dict of its fields) the best one that satisfies them (constrained Viterbi; a
        ValueError when none does)."""
        if constraints is not None:
            return self._predict_constrained(x, constraints)
        if self._learner is None or len(self._labels) == 0:
            if not isinstance(x, (list, tuple, np.ndarray)):
                raise TypeError(f"a sequence must be a list of feature dicts or a 2-D array, got {type(x).__name__}")
            return [None] * len(x)
        tok_ptr, fidx, fval = self._features.encode_tokens(x, grow=False)
        self._check_cost(tok_ptr)
        L = len(tok_ptr) - 1
        out = self._learner.predict(np.array([0, L], dtype=np.int64), tok_ptr.astype(np.int64),
                                        fidx, fval, np.array([0, L], dtype=np.int64), L)
        labs = self._labels.labels
        return [labs[i] for i in out]

    def learn_many(self, X, Y, w=None):
        """Learn a list of sequences in order (``w``: None or one weight per sequence, as
        :meth:`learn_one` takes it). The whole batch is validated first: a bad sequence raises
        and the model is unchanged."""
        X = list(X)
        Y = list(Y)
        if len(X) != len(Y):
            raise ValueError(f"got {len(X)} sequences but {len(Y)} label sequences")
        ws = weight_batch(w, len(X))
        if ws is not None:
            return self._learn_weighted_rows(X, Y, ws)
        self._check_batch(self._encode_seq, X, Y)
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


    # -------------------------------------------------------------- n-best, constraints
    def _chain_tables(self, x):
        """(S, T, B) of ``x``: emission (L, K), scaled transitions (K, K) and start / end scores."""
        tab = self._score_tables()
        tok_ptr, fidx, fval = self._features.encode_tokens(x, grow=False)
        T, B = tab.transitions()
        return tab.emission(tok_ptr.astype(np.int32), fidx, fval), T, B

    def predict_nbest_one(self, x, k, constraints=None):
        """The ``k`` best tag sequences for ``x`` with their scores, best first: a list of
        ``(tags, score)``; exact (list Viterbi, :mod:`streamssvm.nbest`). The first is
        ``predict_one(x)``. ``constraints``: a :class:`streamssvm.Constraints` (or a dict of
        its fields: ``fixed``, ``allowed``, ``forbidden``); fewer than ``k`` (possibly none) are
        returned when fewer sequences satisfy it.

        >>> import streamssvm as ss
        >>> tagger = ss.SequenceTagger(learner=ss.learners.BCFW(lam=0.01, replay=3, seed=0))
        >>> for i in range(40):
        ...     tagger.learn_one([{"w=the": 1}, {"w=dog": 1}], ["DET", "NOUN"])
        >>> [tags for tags, score in tagger.predict_nbest_one([{"w=the": 1}, {"w=dog": 1}], 2)]
        [['DET', 'NOUN'], ['NOUN', 'NOUN']]
        >>> tagger.predict_one([{"w=the": 1}, {"w=dog": 1}], constraints={"fixed": {1: "DET"}})
        ['DET', 'DET']
        """
        from ..constraints import Constraints
        from ..nbest import chain_nbest
        k = self._check_k(k)
        c = Constraints.coerce(constraints)
        if self._learner is None or len(self._labels) == 0:
            if c is not None and (c.fixed or c.allowed or c.forbidden):
                raise ValueError("constrained decoding needs a fitted model (no tag is known yet)")
            return [(self.predict_one(x), 0.0)]
        S, T, B = self._chain_tables(x)
        labs = self._labels.labels[:S.shape[1]]
        allowed, forbid = c.chain_masks(S.shape[0], labs) if c is not None else (None, None)
        items = chain_nbest(S, T, B, self.transitions, k, allowed, forbid)
        return [([labs[i] for i in y], score) for y, score in items]

    def _predict_constrained(self, x, constraints):
        best = self.predict_nbest_one(x, 1, constraints)
        if not best:
            raise ValueError(f"no tag sequence satisfies the constraints {constraints!r}")
        return best[0][0]
