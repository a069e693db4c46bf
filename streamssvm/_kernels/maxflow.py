"""Exact MAP of a binary pairwise energy with submodular (attractive) potentials by s-t minimum
cut (Greig, Porteous & Seheult, "Exact maximum a posteriori estimation for binary images",
1989; Kolmogorov & Zabih, "What energy functions can be minimized via graph cuts?", 2004).

The problem: over labelings ``y`` in {0, 1}^n of the nodes of a graph, maximize

    score(y) = sum_i theta[i, y_i] - sum_e p_e [y_{a_e} != y_{b_e}],       p_e >= 0

(node scores ``theta``, edge penalties ``p``; the loss-augmented oracle of a Hamming loss adds
the loss to ``theta``). Node ``i`` on the source side of the cut is ``y_i = 1``: the arc
source -> i carries ``max(theta[i, 1] - theta[i, 0], 0)`` (cut when ``y_i = 0``), the arc
i -> sink ``max(theta[i, 0] - theta[i, 1], 0)``, every edge a pair of arcs of capacity ``p_e``.

The maximum flow is Dinic's algorithm (blocking flows on BFS level graphs, "Algorithm for
solution of a problem of maximum flow in networks with power estimation", 1970) with an
explicit path stack, on a CSR arc table built once per call. Capacities are floats: an arc
counts as saturated below ``1e-12`` times the largest capacity.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_JIT = dict(cache=True, nogil=True, no_cfunc_wrapper=True)


@njit(**_JIT)
def _arc_table(theta, ea, eb, pen, ptr, head, rev, cap):
    """Fill the CSR arc table of the cut graph (nodes 0..n-1, source n, sink n+1): ``ptr``
    (n + 3), and per arc its head, its reverse arc and its capacity (4 n + 2 m arcs)."""
    n = theta.shape[0]
    m = ea.shape[0]
    s = n
    t = n + 1
    deg = np.zeros(n + 2, dtype=np.int64)
    for i in range(n):
        deg[i] += 2
        deg[s] += 1
        deg[t] += 1
    for e in range(m):
        deg[ea[e]] += 1
        deg[eb[e]] += 1
    ptr[0] = 0
    for v in range(n + 2):
        ptr[v + 1] = ptr[v] + deg[v]
    fill = ptr[:n + 2].copy()
    for i in range(n):
        d = theta[i, 1] - theta[i, 0]
        a = fill[s]
        b = fill[i]
        fill[s] += 1
        fill[i] += 1
        head[a] = i
        head[b] = s
        rev[a] = b
        rev[b] = a
        cap[a] = d if d > 0.0 else 0.0
        cap[b] = 0.0
        a = fill[i]
        b = fill[t]
        fill[i] += 1
        fill[t] += 1
        head[a] = t
        head[b] = i
        rev[a] = b
        rev[b] = a
        cap[a] = -d if d < 0.0 else 0.0
        cap[b] = 0.0
    for e in range(m):
        u = ea[e]
        v = eb[e]
        a = fill[u]
        b = fill[v]
        fill[u] += 1
        fill[v] += 1
        head[a] = v
        head[b] = u
        rev[a] = b
        rev[b] = a
        cap[a] = pen[e]
        cap[b] = pen[e]


@njit(**_JIT)
def _levels(ptr, head, cap, s, t, eps, level, queue):
    """BFS levels from ``s`` over arcs with residual capacity > eps; True when ``t`` is reached."""
    level[:] = -1
    level[s] = 0
    qh = 0
    qt = 1
    queue[0] = s
    while qh < qt:
        u = queue[qh]
        qh += 1
        for a in range(ptr[u], ptr[u + 1]):
            v = head[a]
            if level[v] < 0 and cap[a] > eps:
                level[v] = level[u] + 1
                queue[qt] = v
                qt += 1
    return level[t] >= 0


@njit(**_JIT)
def _blocking_flow(ptr, head, rev, cap, s, t, eps, level, it, path):
    """Augment along level-graph paths until none is left (dead ends are cut off)."""
    total = 0.0
    depth = 0
    u = s
    while True:
        if u == t:
            f = np.inf
            for k in range(depth):
                if cap[path[k]] < f:
                    f = cap[path[k]]
            for k in range(depth):
                a = path[k]
                cap[a] -= f
                cap[rev[a]] += f
            total += f
            depth = 0
            u = s
            continue
        moved = False
        while it[u] < ptr[u + 1]:
            a = it[u]
            v = head[a]
            if cap[a] > eps and level[v] == level[u] + 1:
                path[depth] = a
                depth += 1
                u = v
                moved = True
                break
            it[u] += 1
        if not moved:
            if u == s:
                break
            level[u] = -1
            depth -= 1
            a = path[depth]
            u = head[rev[a]]
            it[u] += 1
    return total


@njit(**_JIT)
def max_flow(ptr, head, rev, cap, s, t):
    """Dinic's maximum flow from ``s`` to ``t``; ``cap`` becomes the residual capacities.
    Returns (flow value, saturation threshold eps)."""
    nv = ptr.shape[0] - 1
    cmax = 0.0
    for a in range(cap.shape[0]):
        if cap[a] > cmax:
            cmax = cap[a]
    eps = 1e-12 * max(cmax, 1e-300)
    level = np.empty(nv, dtype=np.int64)
    queue = np.empty(nv, dtype=np.int64)
    it = np.empty(nv, dtype=np.int64)
    path = np.empty(nv, dtype=np.int64)
    flow = 0.0
    while _levels(ptr, head, cap, s, t, eps, level, queue):
        for v in range(nv):
            it[v] = ptr[v]
        flow += _blocking_flow(ptr, head, rev, cap, s, t, eps, level, it, path)
    return flow, eps


@njit(**_JIT)
def labeling_score(theta, ea, eb, pen, y):
    """score(y) = sum_i theta[i, y_i] - sum_e pen_e [y_a != y_b]."""
    sc = 0.0
    for i in range(theta.shape[0]):
        sc += theta[i, y[i]]
    for e in range(ea.shape[0]):
        if y[ea[e]] != y[eb[e]]:
            sc -= pen[e]
    return sc


@njit(**_JIT)
def binary_map(theta, ea, eb, pen, out):
    """Write into ``out`` (int32, n) a labeling maximizing score(y) (module docstring) for edge
    penalties ``pen >= 0``; returns its score."""
    n = theta.shape[0]
    m = ea.shape[0]
    na = 4 * n + 2 * m
    ptr = np.empty(n + 3, dtype=np.int64)
    head = np.empty(na, dtype=np.int64)
    rev = np.empty(na, dtype=np.int64)
    cap = np.empty(na)
    _arc_table(theta, ea, eb, pen, ptr, head, rev, cap)
    s = n
    t = n + 1
    _, eps = max_flow(ptr, head, rev, cap, s, t)
    level = np.empty(n + 2, dtype=np.int64)
    queue = np.empty(n + 2, dtype=np.int64)
    _levels(ptr, head, cap, s, t, eps, level, queue)   # the source side of a minimum cut
    for i in range(n):
        out[i] = 1 if level[i] >= 0 else 0
    return labeling_score(theta, ea, eb, pen, out)
