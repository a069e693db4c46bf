"""Hierarchical multi-label kernels (labels are the leaves of a tree / DAG); see the section
comment below and ``streamssvm.structures.hierarchy``."""
import numpy as np
from numba import njit

from .common import _JIT, HIER_MAX_DAG_LEAVES, _ml_dense_truth, level_points  # noqa: F401


# ---------------------------------------------------------------- hierarchical multi-label (HIER)
#
# Labels are the leaves of a tree or DAG over N nodes; a labeling is a set of leaves and its
# statistic is the 0/1 indicator over nodes of the ancestor closure of the set (Anc includes the
# node itself), so the score of Y is the sum of the node scores of the closure and the statistic
# layout is the multi-label one (``[M: Kc]``, one slot per node). Labelings (pools, oracle
# outputs) are closure indicators; the ground truth ``ytrue`` is the sorted list of the closure's
# node ids. The loss is the Hamming distance over the leaves divided by the number of leaves.
#
# The graph is built once by ``streamssvm.structures.Hierarchy`` and reaches the kernels as the
# ``graph`` field of the Model bundle (``_kernels/bundles.py``): a tuple of int64 arrays
# ``G = (pptr, pidx, cptr, cidx, info)`` -- the parents CSR (node a's parents are
# ``pidx[pptr[a]:pptr[a + 1]]``), the children CSR with a virtual root ``N`` whose children are
# the roots (``cptr`` has N + 2 entries), and ``info = [is_tree, n_leaves]``; O(nodes + edges)
# memory, nothing rebuilt per call. Node ids follow one convention,
# checked by ``streamssvm.structures.Hierarchy``: the leaves are ids ``0 .. Ki-1`` (``Ki`` = the
# number of leaves, the loss normalizer), the internal nodes follow, and every child id is
# smaller than its parents' ids, so increasing id order is a bottom-up order.
#
# Inference: on a tree (every node has at most one parent) MAP / loss-augmented decoding is a
# DP over (node, on/off) in O(N); the best score at each number m of wrong leaves is a DP over
# (node, on/off, m) in O(leaves^2) (subtree sizes bound the max-plus convolutions), with
# back-pointers for the level labelings. On a DAG (a node with several parents) every routine
# enumerates the leaf subsets in Gray-code order, up to HIER_MAX_DAG_LEAVES leaves.


@njit(**_JIT)
def _hier_check(G, K):
    """The graph arrays of ``G`` for K nodes: (pptr, pidx, cptr, cidx, is_tree)."""
    pptr, pidx, cptr, cidx, info = G
    if cptr.shape[0] != K + 2 or pptr.shape[0] != K + 1:
        raise ValueError("hierarchy: the model's graph does not match the number of nodes K")
    return pptr, pidx, cptr, cidx, info[0] == 1


@njit(**_JIT)
def _hier_tree_map(S, K, cptr, cidx, ybuf, w, out):
    """Tree MAP with leaf loss weight w (the leaf term is w when the leaf differs from ybuf):
    DP over (node, on/off); a node is on iff at least one child is on. O(N)."""
    on = np.empty(K + 1)
    off = np.empty(K + 1)
    for n in range(K + 1):
        c0 = cptr[n]
        c1 = cptr[n + 1]
        if c0 == c1:
            t = ybuf[n]
            on[n] = S[0, n] + (w if t == 0 else 0.0)
            off[n] = w if t == 1 else 0.0
            continue
        soff = 0.0
        acc = 0.0
        anyon = False
        bestd = -np.inf
        for p in range(c0, c1):
            c = cidx[p]
            soff += off[c]
            d = on[c] - off[c]
            if d > 0.0:
                acc += on[c]
                anyon = True
            else:
                acc += off[c]
            if d > bestd:
                bestd = d
        off[n] = soff
        if not anyon:
            acc += bestd
        on[n] = acc + (S[0, n] if n < K else 0.0)
    st = np.zeros(K + 1, dtype=np.int8)
    st[K] = 1 if on[K] > off[K] else 0
    for n in range(K, -1, -1):
        if st[n] == 0:
            continue
        c0 = cptr[n]
        c1 = cptr[n + 1]
        anyon = False
        bc = -1
        bestd = -np.inf
        for p in range(c0, c1):
            c = cidx[p]
            d = on[c] - off[c]
            if d > 0.0:
                st[c] = 1
                anyon = True
            if d > bestd:
                bestd = d
                bc = c
        if c1 > c0 and not anyon:
            st[bc] = 1
    for k in range(out.shape[0]):
        out[k] = 0
    for n in range(K):
        out[n] = st[n]
    return on[K] if on[K] > off[K] else off[K]


@njit(**_JIT)
def _hier_tree_levels(S, K, cptr, cidx, ybuf, nl, best_m, m_sel, out):
    """best_m[m] = best score of a labeling with exactly m wrong leaves (m = 0..nl; -inf when
    none). With m_sel >= 0, also writes the best labeling at level m_sel into ``out``.
    DP over (node, on/off, wrong leaves in the subtree) with max-plus convolutions bounded by
    the subtree leaf counts (O(nl^2) in all); back-pointers are stored per (edge, m)."""
    NEG = -np.inf
    nlv = np.zeros(K + 1, dtype=np.int64)
    tl = np.zeros(K + 1, dtype=np.int64)
    onp = np.zeros(K + 2, dtype=np.int64)     # ragged ON[n] of length nlv[n] + 1
    for n in range(K + 1):
        c0 = cptr[n]
        c1 = cptr[n + 1]
        if c0 == c1:
            nlv[n] = 1
            tl[n] = ybuf[n]
        else:
            for p in range(c0, c1):
                nlv[n] += nlv[cidx[p]]
                tl[n] += tl[cidx[p]]
        onp[n + 1] = onp[n] + nlv[n] + 1
    ON = np.full(onp[K + 1], NEG)
    nE = cptr[K + 1]
    chp = np.zeros(nE + 1, dtype=np.int64)   # ragged choices per edge, length cum_j + 1
    for n in range(K + 1):
        cum = 0
        for p in range(cptr[n], cptr[n + 1]):
            cum += nlv[cidx[p]]
            chp[p + 1] = chp[p] + cum + 1
    CHM = np.zeros(chp[nE], dtype=np.int32)
    CHS = np.zeros(chp[nE], dtype=np.int8)
    A = np.empty(nlv[K] + 2)
    Bn = np.empty(nlv[K] + 2)
    for n in range(K + 1):
        c0 = cptr[n]
        c1 = cptr[n + 1]
        o = onp[n]
        if c0 == c1:
            ON[o + (1 - ybuf[n])] = S[0, n]
            continue
        cum = 0
        m0 = 0
        A[0] = NEG
        for p in range(c0, c1):
            c = cidx[p]
            oc = onp[c]
            lc = nlv[c]
            tc = tl[c]
            ncum = cum + lc
            for m in range(ncum + 1):
                Bn[m] = NEG
            q0 = chp[p]
            for m1 in range(cum + 1):
                a = A[m1]
                if a == NEG:
                    continue
                for mc in range(lc + 1):
                    vo = ON[oc + mc]
                    vf = 0.0 if mc == tc else NEG
                    if vo >= vf:
                        if vo == NEG:
                            continue
                        v = a + vo
                        s = 1
                    else:
                        v = a + vf
                        s = 0
                    if v > Bn[m1 + mc]:
                        Bn[m1 + mc] = v
                        CHM[q0 + m1 + mc] = mc
                        CHS[q0 + m1 + mc] = s
            for mc in range(lc + 1):
                vo = ON[oc + mc]
                if vo == NEG:
                    continue
                if vo > Bn[m0 + mc]:
                    Bn[m0 + mc] = vo
                    CHM[q0 + m0 + mc] = mc
                    CHS[q0 + m0 + mc] = 2
            for m in range(ncum + 1):
                A[m] = Bn[m]
            cum = ncum
            m0 += tc
        base = S[0, n] if n < K else 0.0
        for m in range(cum + 1):
            if A[m] > NEG:
                ON[o + m] = A[m] + base
    oK = onp[K]
    for m in range(nl + 1):
        v = ON[oK + m] if m <= nlv[K] else NEG
        if m == tl[K] and v < 0.0:
            v = 0.0
        best_m[m] = v
    if m_sel < 0:
        return True
    for k in range(out.shape[0]):
        out[k] = 0
    if m_sel > nl or best_m[m_sel] == NEG:
        return False
    if m_sel == tl[K] and not ON[oK + m_sel] > 0.0:
        return True  # the empty labeling
    stn = np.zeros(K + 1, dtype=np.int64)
    stm = np.zeros(K + 1, dtype=np.int64)
    top = 0
    stn[0] = K
    stm[0] = m_sel
    top = 1
    while top > 0:
        top -= 1
        n = stn[top]
        m = stm[top]
        if n < K:
            out[n] = 1
        for p in range(cptr[n + 1] - 1, cptr[n] - 1, -1):
            c = cidx[p]
            q = chp[p] + m
            s = CHS[q]
            mc = CHM[q]
            if s == 0:
                m -= mc
                continue
            stn[top] = c
            stm[top] = mc
            top += 1
            if s == 2:
                break
            m -= mc
    return True


@njit(**_JIT)
def _hier_enum(S, K, G, ybuf, mode, w, Ki, ts, best_m, out, m_sel):
    """Gray-code enumeration of the leaf subsets (DAGs, up to HIER_MAX_DAG_LEAVES leaves):
    O(|Anc(leaf)|) per step with per-node counts of chosen leaves below. mode 0: argmax score +
    w * wrong leaves; mode 1: argmax (m / Ki)(1 + score - ts); mode 2: best score per number m
    of wrong leaves into best_m, and with m_sel >= 0 that level's best labeling into ``out``."""
    pptr, pidx, cptr, cidx, tree = _hier_check(G, K)
    nl = 0
    for n in range(K):
        if cptr[n] == cptr[n + 1]:
            nl += 1
    if nl > HIER_MAX_DAG_LEAVES:
        raise ValueError("hierarchy: exact inference on a DAG enumerates leaf subsets, up to 16 leaves")
    leaves = np.zeros(nl, dtype=np.int64)
    q = 0
    for n in range(K):
        if cptr[n] == cptr[n + 1]:
            leaves[q] = n
            q += 1
    # ancestor closures (node itself included) of the leaves, as a CSR
    aptr = np.zeros(nl + 1, dtype=np.int64)
    aidx = np.zeros(nl * K, dtype=np.int64)
    mark = np.zeros(K, dtype=np.int8)
    for i in range(nl):
        for n in range(K):
            mark[n] = 0
        mark[leaves[i]] = 1
        c = aptr[i]
        for n in range(K):  # bottom-up: parents have larger ids
            if mark[n] == 1:
                aidx[c] = n
                c += 1
                for j in range(pptr[n], pptr[n + 1]):
                    mark[pidx[j]] = 1
        aptr[i + 1] = c
    cnt = np.zeros(K, dtype=np.int64)
    cur = np.zeros(nl, dtype=np.int8)
    score = 0.0
    m = 0
    for i in range(nl):
        m += ybuf[leaves[i]]
    for q2 in range(nl + 1):
        best_m[q2] = -np.inf
    code = 0
    best_code = 0
    codes = np.zeros(nl + 1, dtype=np.int64)
    if mode == 0:
        best = w * m
    elif mode == 1:
        best = (m / Ki) * (1.0 + score - ts) if m > 0 else 0.0
    else:
        best = 0.0
        best_m[m] = 0.0
    for it in range(1, 1 << nl):
        b = 0
        x = it
        while (x & 1) == 0:
            x >>= 1
            b += 1
        lf = leaves[b]
        if cur[b] == 0:
            cur[b] = 1
            for p in range(aptr[b], aptr[b + 1]):
                a = aidx[p]
                cnt[a] += 1
                if cnt[a] == 1:
                    score += S[0, a]
            m += -1 if ybuf[lf] == 1 else 1
        else:
            cur[b] = 0
            for p in range(aptr[b], aptr[b + 1]):
                a = aidx[p]
                cnt[a] -= 1
                if cnt[a] == 0:
                    score -= S[0, a]
            m += 1 if ybuf[lf] == 1 else -1
        code ^= (1 << b)
        if mode == 2:
            if score > best_m[m]:
                best_m[m] = score
                codes[m] = code
            continue
        if mode == 0:
            v = score + w * m
        else:
            v = (m / Ki) * (1.0 + score - ts) if m > 0 else 0.0
        if v > best:
            best = v
            best_code = code
    if mode == 2:
        if m_sel < 0:
            return 0.0
        if m_sel > nl or best_m[m_sel] == -np.inf:
            for k in range(out.shape[0]):
                out[k] = 0
            return -np.inf
        best_code = codes[m_sel]
    for k in range(out.shape[0]):
        out[k] = 0
    for i in range(nl):
        if (best_code >> i) & 1:
            for p in range(aptr[i], aptr[i + 1]):
                out[aidx[p]] = 1
    return best


@njit(**_JIT)
def hier_levels(S, G, K, ytrue, ly, Ki, best_m, m_sel, out):
    """best_m[m] (m = 0..Ki) = the best score of a hierarchical labeling with exactly m wrong
    leaves (-inf: none); with m_sel >= 0 also the best labeling of level m_sel into ``out``
    (closure indicator). ``G`` is the graph of the Model bundle. Returns False when level m_sel
    is empty."""
    ybuf = np.zeros(K, dtype=np.int32)
    _ml_dense_truth(ytrue, ly, K, ybuf)
    pptr, pidx, cptr, cidx, tree = _hier_check(G, K)
    nleaf = 0
    for n in range(K):
        if cptr[n] == cptr[n + 1]:
            nleaf += 1
    if nleaf != Ki or best_m.shape[0] < Ki + 1:
        raise ValueError("hierarchy: Ki must be the number of leaves and best_m hold Ki + 1 values")
    if tree:
        return _hier_tree_levels(S, K, cptr, cidx, ybuf, Ki, best_m, m_sel, out)
    r = _hier_enum(S, K, G, ybuf, 2, 0.0, Ki, 0.0, best_m, out, m_sel)
    return r > -np.inf


@njit(**_JIT)
def hier_level_labeling(S, G, K, ytrue, ly, Ki, m, out):
    """The best hierarchical labeling with exactly m wrong leaves (closure indicator)."""
    best_m = np.zeros(Ki + 1)
    return hier_levels(S, G, K, ytrue, ly, Ki, best_m, m, out)


@njit(**_JIT)
def _hier_decode(S, G, K, ytrue, ly, loss_scale, Ki, ybuf, out):
    w = loss_scale / Ki if loss_scale != 0.0 else 0.0
    if loss_scale != 0.0:
        _ml_dense_truth(ytrue, ly, K, ybuf)
    else:
        for k in range(K):
            ybuf[k] = 0
    pptr, pidx, cptr, cidx, tree = _hier_check(G, K)
    if tree:
        return _hier_tree_map(S, K, cptr, cidx, ybuf, w, out)
    dummy = np.zeros(K + 1)
    return _hier_enum(S, K, G, ybuf, 0, w, max(Ki, 1), 0.0, dummy, out, -1)


@njit(**_JIT)
def _hier_truth_levels(S, G, K, ytrue, ly, Ki, ybuf, best_m, out):
    """The prelude of the slack routines: the dense truth into ybuf, the best score per number of
    wrong leaves into best_m; returns the truth's score."""
    _ml_dense_truth(ytrue, ly, K, ybuf)
    ts = 0.0
    for k in range(K):
        if ybuf[k] == 1:
            ts += S[0, k]
    hier_levels(S, G, K, ytrue, ly, Ki, best_m, -1, out)
    return ts


@njit(**_JIT)
def _hier_slack(S, G, K, ytrue, ly, Ki, ybuf, out):
    best_m = np.zeros(Ki + 1)
    ts = _hier_truth_levels(S, G, K, ytrue, ly, Ki, ybuf, best_m, out)
    best = 0.0
    bm = 0
    for m in range(1, Ki + 1):
        if best_m[m] == -np.inf:
            continue
        v = (m / Ki) * (1.0 + best_m[m] - ts)
        if v > best:
            best = v
            bm = m
    if bm == 0:
        for k in range(out.shape[0]):
            out[k] = 0
        for k in range(K):
            out[k] = ybuf[k]
        return 0.0
    hier_levels(S, G, K, ytrue, ly, Ki, best_m, bm, out)
    return best


@njit(**_JIT)
def _hier_slack_levels(S, G, K, ytrue, ly, Ki, ybuf, hs, gs):
    best_m = np.zeros(Ki + 1)
    lab = np.zeros(K, dtype=np.int32)
    ts = _hier_truth_levels(S, G, K, ytrue, ly, Ki, ybuf, best_m, lab)
    return level_points(best_m, Ki, ts, Ki, hs, gs)
