"""Binary segmentation of a general graph with submodular pairwise potentials: the structure of
:class:`streamssvm.estimators.GraphSegmenter` (Szummer, Kohli & Hoiem, "Learning CRFs using graph
cuts", ECCV 2008; Osokin et al., "Minding the gaps for block Frank-Wolfe optimization of
structured SVMs", ICML 2016, App. H for the positivity constraints that keep it submodular).

A record is a graph: ``n`` nodes with ``d`` unary features each (``X``, n x d), ``m`` undirected
edges (``ea``, ``eb``) with ``q`` non-negative features each (``F``, m x q; e.g. a constant and a
contrast term exp(-beta |I_a - I_b|^2)). A labeling is ``y`` in {0, 1}^n. With weights
``w = [w_0 (d), w_1 (d), w_p (q)]`` the score is

    <w, phi(x, y)> = (1/n) (sum_i <w_{y_i}, x_i> - sum_e <w_p, f_e> [y_{a_e} != y_{b_e}])

so ``phi(x, y) = (1/n) [sum_{i: y_i = 0} x_i, sum_{i: y_i = 1} x_i, -sum_e f_e [y_a != y_b]]``:
a per-node average, on the scale of the normalized loss, so that graphs of any size weigh alike
and ``||psi||`` (which sets BCFW's step sizes and rate) does not grow with the graph. With
``w_p >= 0`` (the learner's positivity constraint on the last ``q`` coordinates) and ``F >= 0``
every edge penalty is >= 0: the energy is submodular and the MAP labeling, and the
loss-augmented one with the Hamming loss (a unary term), is an s-t minimum cut
(:mod:`streamssvm._kernels.maxflow`). The loss is the normalized Hamming distance
``Delta(t, y) = (1/n) sum_i [t_i != y_i]``.

>>> import numpy as np
>>> g = BinaryGraph(d=1, q=1)
>>> rec = g.record({"nodes": [[1.0], [-1.0]], "edges": [[0, 1]], "edge_features": [[1.0]]})
>>> g.joint_feature(rec, np.array([1, 0])).tolist()
[-0.5, 0.5, -0.5]
>>> g.predict(rec, np.array([-1.0, 1.0, 0.5])).tolist()
[1, 0]
"""
from __future__ import annotations

import itertools
import numbers
from typing import NamedTuple

import numpy as np

from .._kernels import maxflow as MF


class GraphRecord(NamedTuple):
    """A validated graph: node features ``X`` (n, d), edges ``ea``, ``eb`` (m,) int64 and edge
    features ``F`` (m, q), all C-contiguous."""
    X: np.ndarray
    ea: np.ndarray
    eb: np.ndarray
    F: np.ndarray

    @property
    def n(self):
        return self.X.shape[0]


def _float_matrix(value, name, rows=None):
    try:
        A = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 2-D array of numbers") from None
    if A.ndim == 1 and rows == 0 and A.size == 0:
        A = A.reshape(0, 0)
    if A.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {A.shape}")
    if not np.isfinite(A).all():
        raise ValueError(f"{name} must be finite")
    return np.ascontiguousarray(A)


class BinaryGraph:
    """The feature map, loss and exact oracles of binary graph segmentation (module docstring).

    Parameters
    ----------
    d
        Unary features per node.
    q
        Features per edge (their weights are the constrained ones).
    """

    name = "graph"

    def __init__(self, d, q):
        self.d = int(d)
        self.q = int(q)

    @property
    def dim(self):
        """Length of the weight vector: 2 d unary weights, then q pairwise weights."""
        return 2 * self.d + self.q

    def pairwise_coords(self):
        """Indices of the pairwise weights (the coordinates constrained >= 0)."""
        return np.arange(2 * self.d, self.dim, dtype=np.int64)

    # ------------------------------------------------------------------ records
    @staticmethod
    def shape_of(x):
        """(d, q) of a record (q = 1 when it has no edge features: a constant edge feature)."""
        rec = BinaryGraph.record(x)
        return rec.X.shape[1], rec.F.shape[1]

    @staticmethod
    def record(x, d=None, q=None):
        """Validate a record ``{"nodes": (n, d), "edges": (m, 2), "edge_features": (m, q)}``
        (``edge_features`` optional: one constant feature 1 per edge) into a
        :class:`GraphRecord`; raises ValueError / TypeError naming what is wrong. Edges are
        undirected pairs of distinct node ids in [0, n); edge features must be >= 0."""
        if isinstance(x, GraphRecord):
            rec = x
        else:
            if not isinstance(x, dict) or "nodes" not in x or "edges" not in x:
                raise TypeError("a graph record is a dict with 'nodes' (n x d features), 'edges' (m pairs of "
                                "node ids) and optionally 'edge_features' (m x q, >= 0)")
            X = _float_matrix(x["nodes"], "nodes")
            if X.shape[0] == 0:
                raise ValueError("a graph needs at least one node")
            E = np.asarray(x["edges"])
            if E.size == 0:
                E = np.zeros((0, 2), dtype=np.int64)
            if E.ndim != 2 or E.shape[1] != 2:
                raise ValueError(f"edges must be m pairs (shape (m, 2)), got shape {E.shape}")
            if E.dtype.kind not in "iu":
                if E.dtype.kind != "f" or not np.all(np.isfinite(E)) or np.any(E != np.round(E)):
                    raise TypeError("edges must hold integer node ids")
            E = E.astype(np.int64)
            m = E.shape[0]
            if x.get("edge_features") is None:
                F = np.ones((m, 1))
            else:
                F = _float_matrix(x["edge_features"], "edge_features", rows=m)
                if m == 0 and F.size == 0:
                    F = F.reshape(0, q if q is not None else max(F.shape[1], 1))
                if F.shape[0] != m:
                    raise ValueError(f"edge_features has {F.shape[0]} rows for {m} edges")
            rec = GraphRecord(X, np.ascontiguousarray(E[:, 0]), np.ascontiguousarray(E[:, 1]), F)
        n = rec.X.shape[0]
        if rec.ea.size and (rec.ea.min() < 0 or rec.eb.min() < 0 or rec.ea.max() >= n or rec.eb.max() >= n):
            raise ValueError(f"edges must join node ids in [0, {n})")
        if np.any(rec.ea == rec.eb):
            raise ValueError("an edge must join two different nodes (no self-loops)")
        if np.any(rec.F < 0):
            raise ValueError("edge features must be >= 0 (with non-negative pairwise weights they keep the "
                             "energy submodular)")
        if d is not None and rec.X.shape[1] != d:
            raise ValueError(f"nodes have {rec.X.shape[1]} features, the model {d}")
        if q is not None and rec.F.shape[1] != q:
            raise ValueError(f"edges have {rec.F.shape[1]} features, the model {q}")
        return rec

    @staticmethod
    def labels(y, n):
        """A labeling given as 0/1 (or bool) per node, as int32; raises ValueError otherwise."""
        if isinstance(y, (str, bytes, dict)) or not hasattr(y, "__len__"):
            raise TypeError("a graph's labels are a sequence of 0/1 per node")
        a = np.asarray(y)
        if a.ndim != 1 or a.shape[0] != n:
            raise ValueError(f"labels must be one 0/1 per node ({n}), got shape {a.shape}")
        if a.dtype == bool:
            return a.astype(np.int32)
        if not all(isinstance(v, (numbers.Integral, np.bool_)) or (isinstance(v, float) and v in (0.0, 1.0))
                   for v in a.tolist()) or np.any((a != 0) & (a != 1)):
            raise ValueError("graph labels must be 0 or 1 per node")
        return a.astype(np.int32)

    # ------------------------------------------------------------------ feature map and scores
    def joint_feature(self, rec, y):
        d = self.d
        out = np.zeros(self.dim)
        y = np.asarray(y)
        out[:d] = rec.X[y == 0].sum(axis=0)
        out[d:2 * d] = rec.X[y == 1].sum(axis=0)
        cut = y[rec.ea] != y[rec.eb]
        out[2 * d:] = -rec.F[cut].sum(axis=0)
        return out / rec.n

    def potentials(self, rec, w, ytrue=None, loss_scale=0.0):
        """(theta (n, 2), edge penalties (m,)) of weights ``w``, n times the score's terms (the
        same argmax); with ``ytrue`` the Hamming loss times ``loss_scale`` is added to the node
        scores (``loss_scale=1``: n times the loss-augmented problem)."""
        d = self.d
        theta = np.empty((rec.n, 2))
        theta[:, 0] = rec.X @ w[:d]
        theta[:, 1] = rec.X @ w[d:2 * d]
        if ytrue is not None and loss_scale:
            theta[np.arange(rec.n), 1 - ytrue] += loss_scale
        pen = np.ascontiguousarray(rec.F @ w[2 * d:])
        if pen.size and pen.min() < 0:
            raise ValueError("negative edge penalty: the pairwise weights must be >= 0 (BCFW(nonneg=...))")
        return theta, pen

    def predict(self, rec, w):
        """The labeling of largest score (exact, by minimum cut)."""
        theta, pen = self.potentials(rec, w)
        out = np.zeros(rec.n, dtype=np.int32)
        MF.binary_map(theta, rec.ea, rec.eb, pen, out)
        return out

    def loss(self, ytrue, y):
        return float(np.mean(np.asarray(ytrue) != np.asarray(y)))

    def oracle(self, rec, w, ytrue):
        """argmax_y Delta(ytrue, y) + <w, phi(x, y)> (exact, by minimum cut)."""
        theta, pen = self.potentials(rec, w, ytrue, 1.0)
        out = np.zeros(rec.n, dtype=np.int32)
        MF.binary_map(theta, rec.ea, rec.eb, pen, out)
        return out

    # ------------------------------------------------------------------ reference (tests)
    def brute_force(self, rec, w, ytrue=None):
        """The best labeling by enumeration of all 2^n (small graphs only)."""
        best, arg = -np.inf, None
        for bits in itertools.product((0, 1), repeat=rec.n):
            y = np.array(bits, dtype=np.int32)
            s = float(w @ self.joint_feature(rec, y))
            if ytrue is not None:
                s += self.loss(ytrue, y)
            if s > best + 1e-12:
                best, arg = s, y
        return arg, best
