"""Hierarchical multi-label classification (Choi, Meshi & Srebro, "Fast and Scalable Structural
SVM with Slack Rescaling", section 5.2; Cai & Hofmann 2004).

The labels are the leaves of a given tree or DAG. A labeling is a set Y of leaves; its score sums
the node potentials of the ancestor closure of Y (Anc(n) includes n itself)::

    <w, phi(x, Y)> = sum_{n in Anc(Y)} <w_n, x>,        Anc(Y) = union_{y in Y} Anc(y)

so the sufficient statistic is the 0/1 indicator of Anc(Y) over the nodes (one emission column
per node). The loss is the Hamming distance over the *leaves* divided by the number of leaves
(the multi-label loss of :class:`MultiLabel` on the label set); internal nodes carry potentials,
not loss.

Node ids follow the convention of the kernels (``streamssvm._kernels.hierarchy``): leaves
first (in order of first appearance), then the internal nodes bottom-up, so that every child id
is smaller than its parents' ids. The graph is built once, here, as arrays (parents CSR,
children CSR under a virtual root, ``[is_tree, n_leaves]``; O(nodes + edges)) and reaches the
kernels as the ``graph`` field of the Model bundle (:meth:`Hierarchy.graph`); the cost matrix
is a plain one (the leaves' 0/1 costs), not the graph.

Inference is exact: dynamic programs over the tree (MAP / loss-augmented decoding in O(nodes),
best score per number of wrong leaves in O(leaves^2) for the slack oracle and the level points
of the searches); on a DAG, enumeration of the leaf subsets, up to 16 leaves.

>>> h = Hierarchy({"cat": "animal", "dog": "animal", "car": "vehicle", "bus": "vehicle"})
>>> h.nodes
['cat', 'dog', 'car', 'bus', 'animal', 'vehicle']
>>> h.n_leaves, h.is_tree
(4, True)
>>> [h.nodes[i] for i in h.closure([0, 1])]
['cat', 'dog', 'animal']
>>> pptr, pidx, cptr, cidx, info = h.graph(6)
>>> pidx.tolist(), cptr.tolist(), cidx.tolist(), info.tolist()
([4, 4, 5, 5], [0, 0, 0, 0, 0, 2, 4, 6], [0, 1, 2, 3, 4, 5], [1, 4])
"""
from __future__ import annotations

import itertools
from collections import deque

import numpy as np

from .._kernels.structops import HIER, HIER_MAX_DAG_LEAVES, hier_level_labeling
from .base import Structure, indicator_emission


def _parents_of(value):
    """A dict value: None (a root), a list / set / frozenset of parents, or one parent (any
    other hashable, tuples included)."""
    if value is None:
        return []
    if isinstance(value, (list, set, frozenset)):
        return list(value)
    return [value]


class Hierarchy(Structure):
    """Multi-label over the leaves of a tree or DAG (see the module docstring).

    Parameters
    ----------
    hierarchy
        ``{child: parent}`` for a tree, ``{child: [parents]}`` for a DAG (a value may also be
        ``None`` to declare a root explicitly), or a list of ``(child, parent)`` pairs. Nodes
        that are nobody's parent are the leaves: the labels. Node names must be hashable.
    """
    kind = HIER
    use_trans = False
    set_labeling = True
    name = "hierarchy"

    def __init__(self, hierarchy):
        super().__init__(None)
        edges = self.parse(hierarchy)
        order: list = []
        seen: dict = {}

        def add(n):
            try:
                if n not in seen:
                    seen[n] = len(order)
                    order.append(n)
            except TypeError:
                raise TypeError(f"hierarchy node names must be hashable, got {type(n).__name__}") from None

        parents: dict = {}
        for c, p in edges:
            add(c)
            parents.setdefault(c, [])
            if p is None:
                continue
            add(p)
            parents.setdefault(p, [])
            if p == c:
                raise ValueError(f"hierarchy: node {c!r} is its own parent")
            if p not in parents[c]:
                parents[c].append(p)
        children: dict = {n: [] for n in order}
        for c in order:
            for p in parents[c]:
                children[p].append(c)
        leaves = [n for n in order if not children[n]]
        # bottom-up order: a node once all its children are placed (leaves first)
        remaining = {n: len(children[n]) for n in order}
        queue = deque(leaves)
        nodes = []
        while queue:
            n = queue.popleft()
            nodes.append(n)
            for p in parents[n]:
                remaining[p] -= 1
                if remaining[p] == 0:
                    queue.append(p)
        if len(nodes) != len(order):
            cyc = [n for n in order if remaining[n] > 0]
            raise ValueError(f"hierarchy has a cycle (through {cyc[:5]!r}); it must be a tree or a DAG")
        self.nodes = nodes
        self.index = {n: i for i, n in enumerate(nodes)}
        self.n_leaves = len(leaves)
        self.parent_ids = [sorted(self.index[p] for p in parents[n]) for n in nodes]
        self.is_tree = all(len(p) <= 1 for p in self.parent_ids)
        if not self.is_tree and self.n_leaves > HIER_MAX_DAG_LEAVES:
            raise ValueError(f"hierarchy is a DAG (a node has several parents) with {self.n_leaves} leaves; "
                             f"exact inference on DAGs enumerates leaf subsets and supports up to "
                             f"{HIER_MAX_DAG_LEAVES} leaves (trees have no limit)")
        # parents have larger ids: compute the closures top-down
        anc = [None] * len(nodes)
        for i in range(len(nodes) - 1, -1, -1):
            s = {i}
            for p in self.parent_ids[i]:
                s |= anc[p]
            anc[i] = s
        self._anc = anc
        self._graph = self._graph_arrays(self.parent_ids)
        self._flat = {}

    @staticmethod
    def _graph_arrays(parent_ids):
        """(pptr, pidx, cptr, cidx, info) of the nodes ``0 .. N-1`` with the given parent lists:
        the parents CSR, the children CSR with a virtual root ``N`` whose children are the roots
        (children listed in increasing id order), ``info = [is_tree, n_leaves]``."""
        N = len(parent_ids)
        npar = np.array([len(p) for p in parent_ids], dtype=np.int64)
        pptr = np.zeros(N + 1, dtype=np.int64)
        np.cumsum(npar, out=pptr[1:])
        pidx = np.array([q for p in parent_ids for q in p], dtype=np.int64)
        child = np.repeat(np.arange(N, dtype=np.int64), npar)
        par = pidx.copy()
        roots = np.flatnonzero(npar == 0).astype(np.int64)
        child = np.concatenate([child, roots])
        par = np.concatenate([par, np.full(len(roots), N, dtype=np.int64)])
        order = np.lexsort((child, par))
        cidx = child[order]
        nch = np.bincount(par, minlength=N + 1).astype(np.int64)
        cptr = np.zeros(N + 2, dtype=np.int64)
        np.cumsum(nch, out=cptr[1:])
        n_leaves = int(np.sum(nch[:N] == 0))
        info = np.array([int(np.all(npar <= 1)), n_leaves], dtype=np.int64)
        return pptr, pidx, cptr, cidx, info

    def graph(self, K):
        """The graph over the ``K`` nodes in use, for the kernels (the Model bundle's ``graph``):
        the hierarchy's graph, built once, when ``K`` is its number of nodes; while a learner's
        label index holds fewer nodes, ``K`` unconnected nodes (every node a leaf)."""
        K = int(K)
        if K == len(self.nodes):
            return self._graph
        g = self._flat.get(K)
        if g is None:
            g = self._flat[K] = self._graph_arrays([[] for _ in range(K)])
        return g

    @staticmethod
    def parse(hierarchy):
        """The (child, parent) pairs of a hierarchy given as a dict or a list of pairs."""
        if isinstance(hierarchy, dict):
            if not hierarchy:
                raise ValueError("hierarchy is empty")
            return [(c, p) for c, v in hierarchy.items() for p in (_parents_of(v) or [None])]
        if isinstance(hierarchy, (list, tuple)):
            if not hierarchy:
                raise ValueError("hierarchy is empty")
            out = []
            for e in hierarchy:
                if not isinstance(e, (list, tuple)) or len(e) != 2:
                    raise ValueError(f"a hierarchy given as a list must hold (child, parent) pairs, got {e!r}")
                out.append((e[0], e[1]))
            return out
        raise TypeError(f"hierarchy must be a dict {{child: parent}} / {{child: [parents]}} or a list of "
                        f"(child, parent) pairs, got {type(hierarchy).__name__}")

    @property
    def leaves(self):
        return self.nodes[:self.n_leaves]

    def closure(self, leaf_ids):
        """Sorted node ids of the ancestor closure of the given leaf ids."""
        s = set()
        for i in leaf_ids:
            s |= self._anc[int(i)]
        return np.array(sorted(s), dtype=np.int32)

    def cost_matrix(self, Kc, labels):
        """A plain (Kc, Kc) 0/1 cost matrix (the leaves' Hamming costs; the kernels read the loss
        of a hierarchy from the leaves, and the graph from :meth:`graph`). ``labels`` must list
        the nodes in this structure's order."""
        n = len(self.nodes)
        if list(labels[:n]) != self.nodes[:len(labels)] or len(labels) > n:
            raise ValueError("the label index of a hierarchical model must list the hierarchy's nodes "
                             "(leaves first, then internal nodes bottom-up); got a different label set")
        return super().cost_matrix(Kc, labels)

    def loss_range(self, ytrue, L, K, Ki, C):
        """Hamming over the leaves / number of leaves: one wrong leaf at least, 1 at most."""
        return 1.0 / max(Ki, 1), 1.0

    def level_labeling(self, o, i, g_sel, lab):
        """Best labeling with round(g_sel * Ki) wrong leaves (tree DP or DAG enumeration)."""
        hier_level_labeling(o.S, self.graph(o.K), o.K, o.ytrue, len(o.ytrue), max(o.Ki, 1), int(round(g_sel * o.Ki)),
                            lab)

    # --- reference implementations (dense, slow) used by tests ---
    def joint_feature(self, d, K, tok_ptr, fidx, fval, y):
        """``y`` is a closure indicator over the nodes (length >= K)."""
        E = indicator_emission(d, K, tok_ptr, fidx, fval, y)
        return E, np.zeros((K, K)), np.zeros((2, K))

    def all_labelings(self, L=1, K=None):
        """Closure indicators of all 2^leaves leaf subsets."""
        K = len(self.nodes) if K is None else K
        out = []
        for bits in itertools.product((0, 1), repeat=self.n_leaves):
            y = np.zeros(K, dtype=np.int32)
            y[self.closure([i for i, b in enumerate(bits) if b])] = 1
            out.append(y)
        return out

    def brute_loss(self, ytrue_closure, y, C=None, Ki=None):
        """Hamming distance over the leaves / number of leaves."""
        nl = self.n_leaves
        dense = np.zeros(nl, dtype=int)
        t = [q for q in ytrue_closure if q < nl]
        dense[t] = 1
        return float(np.sum(dense != np.asarray(y)[:nl])) / nl
