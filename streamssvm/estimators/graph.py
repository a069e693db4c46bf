"""Binary segmentation of graphs (images as pixel or superpixel graphs, or any graph with node
features): a sibling of :class:`SequenceTagger` for general graphs with submodular pairwise
potentials, learned by BCFW with positivity constraints on the pairwise weights and an exact
minimum-cut oracle (:mod:`streamssvm.structures.graph`, :mod:`streamssvm.learners._graph_bcfw`).
"""
from __future__ import annotations

import numpy as np
from river import base

from .. import checkpoint
from ..certificate import Certificate
from ..learners.bcfw import BCFW
from ..learners._graph_bcfw import GraphBCFW
from ..structures.graph import BinaryGraph
from .base import Estimator


class GraphSegmenter(Estimator, base.Estimator):
    """A 0/1 label per node of a graph; unary features per node, non-negative features per edge.

    A record ``x`` is a dict ``{"nodes": (n, d) features, "edges": (m, 2) node ids,
    "edge_features": (m, q) >= 0}`` (``edge_features`` optional: one constant 1 per edge); the
    label ``y`` is a 0/1 sequence over the nodes. The score of a labeling is
    ``sum_i <w_{y_i}, x_i> - sum_e <w_p, f_e> [y_a != y_b]``; the learner keeps ``w_p >= 0``
    (``BCFW(nonneg="pairwise")``, Osokin et al. 2016, App. H) so that prediction and the
    loss-augmented oracle (normalized Hamming loss) are exact minimum cuts. ``d`` and ``q`` are
    fixed by the first record.

    Parameters
    ----------
    learner
        A :class:`~streamssvm.learners.BCFW` with ``nonneg`` covering the pairwise weights
        (``"pairwise"``; the default learner is ``BCFW(nonneg="pairwise")``), Frank-Wolfe,
        pairwise or away steps, with or without the oracle cache; margin rescaling. The weight vector is laid out ``[w_0 (d), w_1 (d), w_p (q)]``: a list of indices
        given as ``nonneg`` indexes it (it must include ``2d .. 2d + q - 1``; more coordinates,
        e.g. some unary weights, may be constrained too).

    Examples
    --------
    >>> import numpy as np, streamssvm as ss
    >>> rng = np.random.default_rng(0)
    >>> def graph():   # a path of 8 nodes, the left half 0, the right half 1, noisy features
    ...     y = np.array([0] * 4 + [1] * 4)
    ...     X = np.c_[y + rng.normal(0, 0.6, 8), np.ones(8)]
    ...     return {"nodes": X, "edges": [[i, i + 1] for i in range(7)]}, y
    >>> model = ss.GraphSegmenter(learner=ss.learners.BCFW(lam=0.01, nonneg="pairwise", seed=0))
    >>> for _ in range(30):
    ...     model.learn_one(*graph())
    >>> model.predict_one({"nodes": [[0.1, 1], [-0.2, 1], [1.1, 1], [0.9, 1]], "edges": [[0, 1], [1, 2], [2, 3]]})
    [0, 0, 1, 1]
    >>> c = model.certificate()
    >>> bool(c.raw_gap > -1e-9), bool(model.pairwise_weights.min() >= 0)
    (True, True)
    """

    _learners = (BCFW,)
    task = None

    @classmethod
    def _default_learner(cls):
        return BCFW(nonneg="pairwise")

    def __init__(self, learner=None):
        if learner is None:
            learner = self._default_learner()
        if not isinstance(learner, BCFW):
            raise TypeError(f"GraphSegmenter learns with learners.BCFW(nonneg='pairwise', ...), got {learner!r}")
        if learner.nonneg is None:
            raise ValueError("GraphSegmenter needs the pairwise weights constrained >= 0 (submodular energy, "
                             "exact minimum cut): pass learners.BCFW(nonneg='pairwise', ...)")
        GraphBCFW.check_config(learner)
        self.learner = learner
        self._structure = None
        self._learner = None

    # -------------------------------------------------------------- records
    def coerce_input(self, x, y):
        """A connector's JSON record: ``x`` the graph dict, ``y`` a list of 0/1."""
        if not isinstance(x, dict):
            raise TypeError("a graph record is a dict with 'nodes', 'edges' and optionally 'edge_features'")
        if y is not None and not isinstance(y, (list, tuple, np.ndarray)):
            raise TypeError("a graph's labels are a list of 0/1 per node")
        return x, y

    def _record(self, x):
        s = self._structure
        return BinaryGraph.record(x, None if s is None else s.d, None if s is None else s.q)

    def _nonneg(self, structure):
        nn = self.learner.nonneg
        idx = structure.pairwise_coords() if nn == "pairwise" else np.asarray(nn, dtype=np.int64)
        if not np.isin(structure.pairwise_coords(), idx).all():
            raise ValueError(f"nonneg={nn!r} does not cover the pairwise weights (coordinates "
                             f"{structure.pairwise_coords().tolist()}): the energy would not stay submodular")
        return idx

    def _engine_for(self, rec):
        """The bound engine, made at the first record (its shapes fix d and q)."""
        if self._learner is None:
            structure = BinaryGraph(rec.X.shape[1], rec.F.shape[1])
            engine = GraphBCFW(self.learner, structure, self._nonneg(structure))   # raises before any change
            self._structure, self._learner = structure, engine
        return self._learner

    # -------------------------------------------------------------- learning / prediction
    def learn_one(self, x, y):
        """Learn one graph; a malformed graph or labeling raises before anything changes."""
        rec = self._record(x)
        yy = BinaryGraph.labels(y, rec.n)
        self._engine_for(rec).learn(rec, yy)

    def learn_many(self, xs, ys):
        """Learn graphs in order; every one is validated first (a bad one changes nothing)."""
        xs, ys = list(xs), list(ys)
        if len(xs) != len(ys):
            raise ValueError(f"{len(xs)} graphs but {len(ys)} labelings")
        recs = []
        for i, (x, y) in enumerate(zip(xs, ys)):
            try:
                rec = self._record(x) if not recs else BinaryGraph.record(x, recs[0][0].X.shape[1],
                                                                          recs[0][0].F.shape[1])
                recs.append((rec, BinaryGraph.labels(y, rec.n)))
            except (TypeError, ValueError) as e:
                raise type(e)(f"row {i}: {e}") from e
        for rec, yy in recs:
            self._engine_for(rec).learn(rec, yy)

    @property
    def classes(self):
        """The node labels: 0 (background) and 1 (foreground)."""
        return [0, 1]

    def predict_one(self, x):
        """The 0/1 labeling of largest score (exact minimum cut); all zeros before any learning."""
        rec = self._record(x)
        if self._learner is None:
            return [0] * rec.n
        return self._structure.predict(rec, self._learner.predict_weights()).tolist()

    def predict_many(self, xs):
        return [self.predict_one(x) for x in xs]

    def score_one(self, x, y):
        """<w, phi(x, y)> of a labeling under the predicting weights."""
        rec = self._record(x)
        if self._learner is None:
            return 0.0
        return float(self._learner.predict_weights() @ self._structure.joint_feature(rec, BinaryGraph.labels(y, rec.n)))

    @property
    def pairwise_weights(self):
        """The predicting weights of the edge features (>= 0)."""
        if self._learner is None:
            return np.zeros(0)
        return self._learner.predict_weights()[2 * self._structure.d:]

    @property
    def unary_weights(self):
        """(d, 2): the predicting weights of the node features for labels 0 and 1."""
        if self._learner is None:
            return np.zeros((0, 2))
        w, d = self._learner.predict_weights(), self._structure.d
        return np.c_[w[:d], w[d:2 * d]]

    def certificate(self):
        if self._learner is None:
            return Certificate.empty(self.learner.effective_lam())
        return self._learner.certificate()

    def weights_finite(self, full=True):
        return self._learner is None or bool(np.isfinite(self._learner.U).all())

    def regularization_path(self, *args, **kwargs):
        raise NotImplementedError("the regularization path runs on the token structures' BCFW; GraphSegmenter's "
                                  "positivity-constrained engine does not support it yet")

    # -------------------------------------------------------------- persistence
    def state(self):
        cfg = {"class": type(self).__name__, "params": {},
               "learner": {"class": type(self.learner).__name__, "params": dict(self.learner._get_params())}}
        s = self._structure
        return {"config": cfg, "shape": None if s is None else [s.d, s.q],
                "learner": None if self._learner is None else self._learner.state()}

    @classmethod
    def from_state(cls, st):
        cfg = st["config"]
        if cfg["class"] != cls.__name__:
            raise checkpoint.CheckpointError(f"the file holds a {cfg['class']}, not a {cls.__name__}")
        if cfg["learner"]["class"] != "BCFW":
            raise checkpoint.CheckpointError(f"a GraphSegmenter file names learner {cfg['learner']['class']!r}")
        learner = BCFW(**BCFW.upgrade_params(cfg["learner"]["params"]))
        model = cls(learner=learner)
        if st.get("learner") is not None:
            d, q = (int(v) for v in st["shape"])
            if d < 1 or q < 1:
                raise checkpoint.CheckpointError("invalid model file: graph shapes must be >= 1")
            structure = BinaryGraph(d, q)
            engine = GraphBCFW(learner, structure, model._nonneg(structure))
            try:
                engine.restore(st["learner"])
            except (ValueError, TypeError, KeyError, IndexError) as e:
                raise checkpoint.CheckpointError(f"invalid model file: {e}") from None
            model._structure, model._learner = structure, engine
        return model
