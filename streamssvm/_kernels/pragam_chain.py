"""Numba kernels of structured Pragam on chains (Saha, Zhang & Vishwanathan, "Lower Bounds for
BMRM and Faster Rates for Training SVMs", App. E: the M3N dual over clique marginals, and App.
E.3.1: the Euclidean projection onto the chain's marginal polytope by block coordinate descent).

The dual variables of a held example with m >= 2 tokens are its m - 1 edge marginals
alpha_e(a, b) (K x K each, mass z_i: 1/n, or c_i / N with example weights c_i, N = sum_i c_i), those of a one-token example one node marginal stored on the
diagonal of a K x K table (off-diagonal entries stay 0). Layout (:data:`ChainCliques`, built once
per window by the learner): ``c_ptr`` (n + 1) the cliques of each example, ``c_tok`` the clique's
first token (global index), ``c_edge`` 1 for an edge clique, 0 for a one-token node clique,
``c_first`` / ``c_last`` whether it holds the example's first / last token.

Clique tables. A table G (Nc x K x K) carries per-token unary terms (the scores x_t W_E or the
losses C[y_t, .] / Z) on exactly one clique each -- token t on edge t as a row term, the last token
on the last edge as a column term -- plus the transitions T on every edge and the start / end
biases on the first / last clique. Hence <alpha, G> is the expectation of the labeling's total
under any consistent alpha, and the loss-augmented max over labelings is a max-sum over cliques.
"""
from collections import namedtuple

import numpy as np
from numba import njit

_JIT = dict(cache=True, nogil=True, no_cfunc_wrapper=True)

#: The window's cliques (module doc): int64 ``c_ptr`` (n + 1), ``c_tok`` (Nc); uint8 ``c_edge``,
#: ``c_first``, ``c_last`` (Nc).
ChainCliques = namedtuple("ChainCliques", ["c_ptr", "c_tok", "c_edge", "c_first", "c_last"])

#: The projection's settings: ``z`` the mass of each example's cliques (float64 array, one per
#: example: 1 / n, or c_i / N with example weights), ``max_sweeps`` the cap on the block coordinate
#: sweeps, ``tol`` the consistency residual (relative to the example's z) that ends them.
ProjectionConfig = namedtuple("ProjectionConfig", ["z", "max_sweeps", "tol"])


@njit(**_JIT)
def clique_tables(lay, U, T, B, use_trans, out):
    """out[c] = the clique table of the unary terms U (tokens x K), transitions T and biases B
    (2 x K; row 0 start, row 1 end) -- T and B only when ``use_trans`` (module doc)."""
    c_ptr, c_tok, c_edge, c_first, c_last = lay
    K = U.shape[1]
    for c in range(c_tok.shape[0]):
        t = c_tok[c]
        G = out[c]
        G[:, :] = 0.0
        if c_edge[c] == 0:
            for a in range(K):
                v = U[t, a]
                if use_trans:
                    v += B[0, a] + B[1, a]
                G[a, a] = v
            continue
        for a in range(K):
            ra = U[t, a]
            if use_trans and c_first[c]:
                ra += B[0, a]
            for b in range(K):
                v = ra
                if c_last[c]:
                    v += U[t + 1, b]
                    if use_trans:
                        v += B[1, b]
                if use_trans:
                    v += T[a, b]
                G[a, b] = v


@njit(**_JIT)
def clique_adjoint(lay, alpha, use_trans, nu, Tsum, Bsum):
    """The adjoint of :func:`clique_tables`: token marginals nu (tokens x K), the sum of the edge
    marginals Tsum (K x K) and the start / end marginal sums Bsum (2 x K), all overwritten."""
    c_ptr, c_tok, c_edge, c_first, c_last = lay
    K = nu.shape[1]
    nu[:, :] = 0.0
    Tsum[:, :] = 0.0
    Bsum[:, :] = 0.0
    for c in range(c_tok.shape[0]):
        t = c_tok[c]
        A = alpha[c]
        if c_edge[c] == 0:
            for a in range(K):
                nu[t, a] += A[a, a]
                if use_trans:
                    Bsum[0, a] += A[a, a]
                    Bsum[1, a] += A[a, a]
            continue
        for a in range(K):
            for b in range(K):
                v = A[a, b]
                nu[t, a] += v
                if c_last[c]:
                    nu[t + 1, b] += v
                if use_trans:
                    Tsum[a, b] += v
                    if c_first[c]:
                        Bsum[0, a] += v
                    if c_last[c]:
                        Bsum[1, b] += v


@njit(**_JIT)
def chain_max(lay, G, ytrue, best, truth):
    """Per example: best[i] = max over labelings of the sum of its clique tables (Viterbi over the
    edges), truth[i] = that sum at the ground truth ``ytrue`` (per token)."""
    c_ptr, c_tok, c_edge, c_first, c_last = lay
    K = G.shape[1]
    V = np.empty(K)
    Vn = np.empty(K)
    for i in range(c_ptr.shape[0] - 1):
        c0, c1 = c_ptr[i], c_ptr[i + 1]
        if c_edge[c0] == 0:
            t = c_tok[c0]
            m = -np.inf
            for a in range(K):
                m = max(m, G[c0, a, a])
            best[i] = m
            truth[i] = G[c0, ytrue[t], ytrue[t]]
            continue
        V[:] = 0.0
        s = 0.0
        for c in range(c0, c1):
            t = c_tok[c]
            for b in range(K):
                m = -np.inf
                for a in range(K):
                    m = max(m, V[a] + G[c, a, b])
                Vn[b] = m
            V[:] = Vn
            s += G[c, ytrue[t], ytrue[t + 1]]
        best[i] = V.max()
        truth[i] = s


@njit(inline="always", **_JIT)
def _simplex(v, z, out, keep):
    """Euclidean projection of v onto {a >= 0, sum a = z} (Michelot, "A finite algorithm for
    finding the projection of a point onto the canonical simplex of R^n": drop the coordinates
    below the current threshold until none is dropped; the survivors of the first pass are kept
    as an index list, so later passes cost their number only). ``keep``: int64 scratch of len(v)."""
    n = v.shape[0]
    tau = (v.sum() - z) / n
    cnt = 0
    s = 0.0
    for k in range(n):
        if v[k] > tau:
            keep[cnt] = k
            cnt += 1
            s += v[k]
    if cnt > 0:
        tau = (s - z) / cnt
    while cnt > 0:
        j = 0
        s = 0.0
        for q in range(cnt):
            k = keep[q]
            if v[k] > tau:
                keep[j] = k
                j += 1
                s += v[k]
        if j == cnt or j == 0:
            break
        cnt = j
        tau = (s - z) / cnt
    for k in range(n):
        out[k] = max(v[k] - tau, 0.0)


@njit(inline="always", **_JIT)
def _project_edge(M, mul, e, E, z, out, buf, res, keep):
    """alpha_e = simplex projection (mass z) of M_e + mu_e(b) - mu_{e-1}(a) (App. E.3.1, (37)); buf,
    res, keep: K^2 scratch."""
    K = M.shape[1]
    for a in range(K):
        for b in range(K):
            v = M[e, a, b]
            if e < E - 1:
                v += mul[e, b]
            if e > 0:
                v -= mul[e - 1, a]
            buf[a * K + b] = v
    _simplex(buf, z, res, keep)
    for a in range(K):
        for b in range(K):
            out[e, a, b] = res[a * K + b]


@njit(**_JIT)
def project_marginals(lay, M, cfg, mul_all, out):
    """Euclidean projection of the clique tables M onto the product of the (z-scaled) chain marginal
    polytopes, written to ``out``; returns (sweeps, largest consistency residual before repair).

    Per example (App. E.3.1): the normalization and non-negativity multipliers (lambda_t, xi_t) are
    solved exactly for fixed separator multipliers mu by one simplex projection per edge (the hinge
    (36)); the separator multipliers mu_s (node s + 1, K values) are updated block by block with the
    diagonal majorizer of the dual's curvature, mu_s(j) -= r_s(j) / (a_j + b_j), r_s = colsum(alpha_s)
    - rowsum(alpha_{s+1}), a_j / b_j the active entries of that column / row (an ascent step: the
    dual's generalized Hessian is that diagonal minus a positive semidefinite part). The sweeps
    stop once max |r| <= tol z. The result is then made exactly consistent by rebuilding the
    marginals of the Markov chain whose transitions are the rows of alpha_e normalized, started at
    rowsum(alpha_0): the point is in the polytope whatever the residual left, so a dual value
    computed from it is a valid bound. ``mul_all`` (cliques x K; row c0 + s holds separator s of the
    example whose cliques start at c0) is the warm start of the separator multipliers, updated in
    place (Algorithm 1's successive targets are close, so the last multipliers save most sweeps)."""
    c_ptr, c_tok, c_edge, c_first, c_last = lay
    zs, max_sweeps, tol = cfg
    K = M.shape[1]
    sweeps_max = 0
    res_max = 0.0
    diag = np.empty(K)
    dres = np.empty(K)
    buf = np.empty(K * K)
    res = np.empty(K * K)
    keep = np.empty(K * K, dtype=np.int64)
    for i in range(c_ptr.shape[0] - 1):
        c0, c1 = c_ptr[i], c_ptr[i + 1]
        z = zs[i]
        if c_edge[c0] == 0:
            for a in range(K):
                diag[a] = M[c0, a, a]
            _simplex(diag, z, dres, keep)
            out[c0, :, :] = 0.0
            for a in range(K):
                out[c0, a, a] = dres[a]
            continue
        E = c1 - c0
        Mi = M[c0:c1]
        Oi = out[c0:c1]
        mul = mul_all[c0:c1]
        for e in range(E):
            _project_edge(Mi, mul, e, E, z, Oi, buf, res, keep)
        sw = 0
        r_last = 0.0
        while E > 1:
            r_all = 0.0
            for s in range(E - 1):
                for j in range(K):
                    col = 0.0
                    na = 0
                    for a in range(K):
                        col += Oi[s, a, j]
                        if Oi[s, a, j] > 0.0:
                            na += 1
                    row = 0.0
                    nb = 0
                    for b in range(K):
                        row += Oi[s + 1, j, b]
                        if Oi[s + 1, j, b] > 0.0:
                            nb += 1
                    r = col - row
                    r_all = max(r_all, abs(r))
                    mul[s, j] -= r / max(na + nb, 1)
                _project_edge(Mi, mul, s, E, z, Oi, buf, res, keep)
                _project_edge(Mi, mul, s + 1, E, z, Oi, buf, res, keep)
            sw += 1
            r_last = r_all
            if r_all <= tol * z or sw >= max_sweeps:
                break
        sweeps_max = max(sweeps_max, sw)
        res_max = max(res_max, r_last)
        # exact consistency: the Markov chain of the normalized rows, started at rowsum(alpha_0)
        for a in range(K):
            diag[a] = Oi[0, a, :].sum()
        tot = diag.sum()
        for a in range(K):
            diag[a] = diag[a] * z / tot if tot > 0.0 else z / K
        for e in range(E):
            for a in range(K):
                rs = Oi[e, a, :].sum()
                if rs > 0.0:
                    f = diag[a] / rs
                    for b in range(K):
                        Oi[e, a, b] *= f
                else:
                    for b in range(K):
                        Oi[e, a, b] = diag[a] / K
            for b in range(K):
                diag[b] = Oi[e, :, b].sum()
    return sweeps_max, res_max
