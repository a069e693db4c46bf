"""Numba kernels for the linear structures (chain, multiclass, multi-label).

Every structure here has a joint feature map that is *linear in a sufficient statistic*
``s(y)`` of the labeling, and the same holds for convex combinations of labelings: the dual
block of an example is represented by its mean statistic ``m = sum_y alpha(y) s(y)`` (the
"marginals"), and ``u_i = Phi_x(s(y_i) - m_i)``.

Statistic layouts (``Kc`` is the label capacity, ``K <= Kc`` the labels in use):

* chain      ``[M: L x Kc][TM: Kc x Kc][BM: 2 x Kc]`` -- unary marginals, transition counts,
  start / end indicators;
* multiclass ``[M: Kc]`` -- a chain of length one without transitions;
* multilabel ``[M: Kc]`` -- independent binary labels, ``M[k]`` = mean of ``y_k``;
* hierarchy  ``[M: Kc]`` -- one slot per node of a tree / DAG whose leaves are the labels,
  ``M[n]`` = mean of "n is in the ancestor closure of the chosen leaves" (HIER section below).

Labelings: chain and multiclass store one int per token; multi-label stores a 0/1 int per
label slot (``Kc`` of them). Ground truth for multi-label is the list of positive label ids.

Joint feature map ``Phi_x(s)``: the emission block ``E[j, k] = sum_t x_t[j] * M[t, k]`` (x
includes a constant bias feature), then ``TM`` and ``BM`` for chains.

Model weights are kept *unnormalized* (``U``: ``E``, ``T``, ``B``); the actual weight vector is
``w = scale * U`` with ``scale = 1 / (lambda * n)``. All scores computed here include ``scale``.
"""
import numpy as np
from numba import njit

CHAIN = 0
MULTICLASS = 1
MULTILABEL = 2
MLPAIR = 3   # multi-label with pairwise co-occurrence potentials (a fully connected binary MRF)
MLPAIR_MAX_LABELS = 16
HIER = 4     # hierarchical multi-label: labels are the leaves of a tree / DAG (see the HIER section)
HIER_MAX_DAG_LEAVES = 16

_JIT = dict(cache=True, nogil=True)


@njit(**_JIT)
def stat_size(kind, L, Kc):
    if kind == CHAIN:
        return L * Kc + Kc * Kc + 2 * Kc
    if kind == MLPAIR:
        return Kc + Kc * Kc
    return Kc


@njit(**_JIT)
def labeling_len(kind, L, Kc):
    if kind == MULTILABEL or kind == MLPAIR or kind == HIER:
        return Kc
    return L


@njit(**_JIT)
def emission_scores(E, scale, tok_ptr, fidx, fval, L, K, S):
    """S[t, k] = scale * <x_t, E[:, k]> for the first K labels (x_t sparse, CSR)."""
    for t in range(L):
        for k in range(K):
            S[t, k] = 0.0
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            j = fidx[p]
            v = fval[p] * scale
            for k in range(K):
                S[t, k] += v * E[j, k]


@njit(**_JIT)
def _ml_dense_truth(ytrue, ly, K, ybuf):
    for k in range(K):
        ybuf[k] = 0
    for q in range(ly):
        if ytrue[q] < K:
            ybuf[ytrue[q]] = 1


@njit(**_JIT)
def _mrf_enum(S, T, scale, K, ybuf, mode, loss_scale, Ki, ts, best_m, out, codes=None):
    """Enumerate the 2^K labelings of the pairwise multi-label MRF in Gray-code order (O(K) per
    labeling). mode 0: argmax score + loss_scale * Hamming / Ki; mode 1: argmax of the slack
    objective (m / Ki)(1 + score - ts); mode 2: best score for every number m of wrong labels
    (into best_m, and the labelings as bit codes into ``codes`` when given). ``ybuf`` holds the
    dense ground truth. Writes the argmax to ``out``."""
    cur = np.zeros(K, dtype=np.int32)
    score = 0.0
    m = 0
    for k in range(K):
        if ybuf[k] == 1:
            m += 1
    for q in range(K + 1):
        best_m[q] = -np.inf
    best_code = 0
    code = 0

    if mode == 0:
        best = score + loss_scale * m / Ki
    elif mode == 1:
        best = (m / Ki) * (1.0 + score - ts) if m > 0 else 0.0
    else:
        best = 0.0
        best_m[m] = score
        if codes is not None:
            codes[m] = 0
    n = 1 << K
    for i in range(1, n):
        b = 0
        x = i
        while (x & 1) == 0:
            x >>= 1
            b += 1
        delta = S[0, b]
        for l in range(K):
            if l != b and cur[l] == 1:
                delta += scale * (T[b, l] if b < l else T[l, b])
        if cur[b] == 0:
            cur[b] = 1
            score += delta
            m += -1 if ybuf[b] == 1 else 1
        else:
            cur[b] = 0
            score -= delta
            m += 1 if ybuf[b] == 1 else -1
        code ^= (1 << b)
        if mode == 0:
            v = score + loss_scale * m / Ki
        elif mode == 1:
            v = (m / Ki) * (1.0 + score - ts) if m > 0 else 0.0
        else:
            if score > best_m[m]:
                best_m[m] = score
                if codes is not None:
                    codes[m] = code
            continue
        if v > best:
            best = v
            best_code = code
    for k in range(out.shape[0]):
        out[k] = 0
    for k in range(K):
        if (best_code >> k) & 1:
            out[k] = 1
    return best


@njit(**_JIT)
def decode(kind, S, T, B, scale, L, K, use_trans, ytrue, ly, C, loss_scale, Ki, V, bp, ybuf, out):
    """argmax_y <w, phi(x, y)> + loss_scale * Delta(ytrue, y); writes y into ``out``.

    Returns the maximal value (score + loss_scale * loss). ``loss_scale = 0`` is MAP
    prediction (``ytrue`` is then ignored). Chain: Viterbi in O(L K^2).
    """
    if kind == HIER:
        return _hier_decode(S, C, K, ytrue, ly, loss_scale, Ki, ybuf, out)
    if kind == MLPAIR:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        dummy = np.zeros(K + 1)
        return _mrf_enum(S, T, scale, K, ybuf, 0, loss_scale, max(Ki, 1), 0.0, dummy, out)
    if kind == MULTILABEL:
        w = loss_scale / Ki if Ki > 0 else 0.0
        if loss_scale != 0.0:
            _ml_dense_truth(ytrue, ly, K, ybuf)
        total = 0.0
        for k in range(out.shape[0]):
            out[k] = 0
        for k in range(K):
            on = S[0, k]
            off = 0.0
            if loss_scale != 0.0:
                if ybuf[k] == 1:
                    off += w
                else:
                    on += w
            if on > off:
                out[k] = 1
                total += on
            else:
                total += off
        return total
    lw = loss_scale / L
    if kind == MULTICLASS or L == 1 and not use_trans:
        best = -np.inf
        arg = 0
        for k in range(K):
            v = S[0, k]
            if lw != 0.0:
                v += lw * C[ytrue[0], k]
            if v > best:
                best = v
                arg = k
        out[0] = arg
        return best
    # chain: Viterbi
    for k in range(K):
        v = S[0, k]
        if use_trans:
            v += scale * B[0, k]
        if lw != 0.0:
            v += lw * C[ytrue[0], k]
        V[0, k] = v
    for t in range(1, L):
        for k in range(K):
            best = -np.inf
            arg = 0
            for j in range(K):
                v = V[t - 1, j] + scale * T[j, k]
                if v > best:
                    best = v
                    arg = j
            u = S[t, k]
            if lw != 0.0:
                u += lw * C[ytrue[t], k]
            V[t, k] = best + u
            bp[t, k] = arg
    best = -np.inf
    arg = 0
    for k in range(K):
        v = V[L - 1, k]
        if use_trans:
            v += scale * B[1, k]
        if v > best:
            best = v
            arg = k
    out[L - 1] = arg
    for t in range(L - 1, 0, -1):
        out[t - 1] = bp[t, out[t]]
    return best


@njit(**_JIT)
def labeling_score(kind, S, T, B, scale, lab, L, K, use_trans):
    """<w, phi(x, y)> for a labeling (O(L))."""
    if kind == MLPAIR:
        v = 0.0
        for k in range(K):
            if lab[k] != 0:
                v += S[0, k]
                for l in range(k + 1, K):
                    if lab[l] != 0:
                        v += scale * T[k, l]
        return v
    if kind == MULTILABEL or kind == HIER:
        v = 0.0
        for k in range(K):
            if lab[k] != 0:
                v += S[0, k]
        return v
    v = 0.0
    for t in range(L):
        v += S[t, lab[t]]
    if kind == CHAIN and use_trans:
        v += scale * (B[0, lab[0]] + B[1, lab[L - 1]])
        for t in range(1, L):
            v += scale * T[lab[t - 1], lab[t]]
    return v


@njit(**_JIT)
def labeling_loss(kind, lab, ytrue, ly, C, L, K, Ki, ybuf):
    """Delta(ytrue, y): normalized (cost-weighted) Hamming for chains, C[y, y'] for
    multiclass, Hamming / Ki for multi-label, Hamming over the leaves (ids < Ki) / Ki for
    hierarchies."""
    if kind == HIER:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        v = 0.0
        for k in range(min(Ki, K)):
            if lab[k] != ybuf[k]:
                v += 1.0
        return v / Ki
    if kind == MULTILABEL or kind == MLPAIR:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        v = 0.0
        for k in range(K):
            if lab[k] != ybuf[k]:
                v += 1.0
        return v / Ki
    v = 0.0
    for t in range(L):
        v += C[ytrue[t], lab[t]]
    return v / L


@njit(**_JIT)
def labeling_stat(kind, lab, L, Kc, out, coef):
    """out += coef * s(lab)."""
    if kind == MLPAIR:
        for k in range(Kc):
            if lab[k] != 0:
                out[k] += coef
                for l in range(k + 1, Kc):
                    if lab[l] != 0:
                        out[Kc + k * Kc + l] += coef
        return
    if kind == MULTILABEL or kind == HIER:
        for k in range(Kc):
            if lab[k] != 0:
                out[k] += coef
        return
    for t in range(L):
        out[t * Kc + lab[t]] += coef
    if kind == CHAIN:
        off = L * Kc
        for t in range(1, L):
            out[off + lab[t - 1] * Kc + lab[t]] += coef
        off2 = off + Kc * Kc
        out[off2 + lab[0]] += coef
        out[off2 + Kc + lab[L - 1]] += coef


@njit(**_JIT)
def truth_stat(kind, ytrue, ly, L, Kc, out, coef):
    """out += coef * s(ytrue) (multi-label truth is a list of positives)."""
    if kind == MLPAIR:
        for q in range(ly):
            a = ytrue[q]
            out[a] += coef
            for r in range(ly):
                b = ytrue[r]
                if a < b:
                    out[Kc + a * Kc + b] += coef
        return
    if kind == MULTILABEL or kind == HIER:
        for q in range(ly):
            out[ytrue[q]] += coef
        return
    labeling_stat(kind, ytrue, L, Kc, out, coef)


@njit(**_JIT)
def stat_score(kind, S, T, B, scale, st, L, K, Kc, use_trans):
    """<w, Phi_x(st)> (linear in st)."""
    if kind == MLPAIR:
        v = 0.0
        for k in range(K):
            v += S[0, k] * st[k]
            for l in range(k + 1, K):
                v += scale * T[k, l] * st[Kc + k * Kc + l]
        return v
    v = 0.0
    nrow = 1 if kind != CHAIN else L
    for t in range(nrow):
        base = t * Kc
        for k in range(K):
            v += S[t, k] * st[base + k]
    if kind == CHAIN and use_trans:
        off = L * Kc
        acc = 0.0
        for j in range(K):
            for k in range(K):
                acc += T[j, k] * st[off + j * Kc + k]
        off2 = off + Kc * Kc
        for k in range(K):
            acc += B[0, k] * st[off2 + k] + B[1, k] * st[off2 + Kc + k]
        v += scale * acc
    return v


@njit(**_JIT)
def stat_loss_lin(kind, st, ytrue, ly, C, L, K, Kc, Ki, ybuf):
    """Linear part of the loss of a statistic (the loss is affine; see ``loss_const``)."""
    if kind == HIER:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        v = 0.0
        for k in range(min(Ki, K)):
            v += (1.0 - 2.0 * ybuf[k]) * st[k]
        return v / Ki
    if kind == MULTILABEL or kind == MLPAIR:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        v = 0.0
        for k in range(K):
            v += (1.0 - 2.0 * ybuf[k]) * st[k]
        return v / Ki
    v = 0.0
    for t in range(L):
        base = t * Kc
        c = ytrue[t]
        for k in range(K):
            v += C[c, k] * st[base + k]
    return v / L


@njit(**_JIT)
def loss_const(kind, ly, Ki, ytrue=None):
    """Constant part of the loss of a statistic. Hierarchies need ``ytrue`` (the closure's
    node ids): the constant is the number of true leaves (ids < Ki) over Ki."""
    if kind == HIER:
        if ytrue is None:
            raise ValueError("loss_const of a hierarchy needs ytrue")
        else:
            c = 0
            for q in range(ly):
                if ytrue[q] < Ki:
                    c += 1
            return c / Ki
    if kind == MULTILABEL or kind == MLPAIR:
        return ly / Ki
    return 0.0


@njit(**_JIT)
def stat_sqnorm(kind, G, st, L, K, Kc, use_trans):
    """||Phi_x(st)||^2 using the token Gram matrix G = X X^T."""
    if kind == MLPAIR:
        v = 0.0
        for k in range(K):
            v += G[0, 0] * st[k] * st[k]
            for l in range(k + 1, K):
                x = st[Kc + k * Kc + l]
                v += x * x
        return v
    v = 0.0
    nrow = 1 if kind != CHAIN else L
    for t in range(nrow):
        bt = t * Kc
        for s in range(nrow):
            g = G[t, s]
            if g == 0.0:
                continue
            bs = s * Kc
            acc = 0.0
            for k in range(K):
                acc += st[bt + k] * st[bs + k]
            v += g * acc
    if kind == CHAIN and use_trans:
        off = L * Kc
        for j in range(K):
            for k in range(K):
                x = st[off + j * Kc + k]
                v += x * x
        off2 = off + Kc * Kc
        for k in range(K):
            a = st[off2 + k]
            b = st[off2 + Kc + k]
            v += a * a + b * b
    return v


@njit(**_JIT)
def stat_apply(kind, E, T, B, tok_ptr, fidx, fval, st, L, K, Kc, coef, use_trans):
    """U += coef * Phi_x(st)."""
    if kind == MLPAIR:
        for p in range(tok_ptr[0], tok_ptr[1]):
            j = fidx[p]
            v = fval[p] * coef
            for k in range(K):
                E[j, k] += v * st[k]
        for k in range(K):
            for l in range(k + 1, K):
                T[k, l] += coef * st[Kc + k * Kc + l]
        return
    nrow = 1 if kind != CHAIN else L
    for t in range(nrow):
        base = t * Kc
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            j = fidx[p]
            v = fval[p] * coef
            for k in range(K):
                E[j, k] += v * st[base + k]
    if kind == CHAIN and use_trans:
        off = L * Kc
        for j in range(K):
            for k in range(K):
                T[j, k] += coef * st[off + j * Kc + k]
        off2 = off + Kc * Kc
        for k in range(K):
            B[0, k] += coef * st[off2 + k]
            B[1, k] += coef * st[off2 + Kc + k]


@njit(**_JIT)
def gram(tok_ptr, fidx, fval, L, G, mark):
    """G[t, s] = <x_t, x_s> for sparse tokens. ``mark`` is a scratch array of size
    n_features filled with zeros (left zeroed on return)."""
    for t in range(L):
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            mark[fidx[p]] += fval[p]
        for s in range(t, L):
            acc = 0.0
            for p in range(tok_ptr[s], tok_ptr[s + 1]):
                acc += mark[fidx[p]] * fval[p]
            G[t, s] = acc
            G[s, t] = acc
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            mark[fidx[p]] = 0.0


@njit(**_JIT)
def slack_oracle(kind, S, T, B, scale, L, K, use_trans, ytrue, ly, C, Ki, V, ybuf, delta, out):
    """Exact most-violating labeling under slack rescaling:
    argmax_y Delta(y_true, y) * (1 + <w, phi(x, y)> - <w, phi(x, y_true)>), written to ``out``;
    returns the maximal value (>= 0: the ground truth gives 0).

    * multiclass: enumeration with the cost matrix;
    * multi-label (Hamming / Ki): for m wrong labels the best score change is the sum of the m
      largest flip gains, so one sort and prefix sums;
    * chain with Hamming loss (the cost matrix must be 0/1): dynamic programming over
      (position, tag, number of wrong tags), O(L^2 K^2), with back-pointers recomputed.

    Work arrays: V (L+1, K, L+1) floats for chains; ybuf (>= K) ints; delta (>= K) floats.
    Pairwise multi-label: enumeration (Gray code) over the 2^K labelings.
    """
    if kind == HIER:
        return _hier_slack(S, C, K, ytrue, ly, Ki, out)
    if kind == MLPAIR:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        ts = labeling_score(kind, S, T, B, scale, ybuf, L, K, use_trans)
        return _mrf_enum(S, T, scale, K, ybuf, 1, 1.0, Ki, ts, delta, out)
    if kind == MULTICLASS:
        yt = ytrue[0]
        st = S[0, yt]
        best = 0.0
        arg = yt
        for k in range(K):
            if k == yt:
                continue
            v = C[yt, k] * (1.0 + S[0, k] - st)
            if v > best:
                best = v
                arg = k
        out[0] = arg
        return best
    if kind == MULTILABEL:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        for k in range(out.shape[0]):
            out[k] = 0
        for k in range(K):
            out[k] = ybuf[k]
            delta[k] = S[0, k] if ybuf[k] == 0 else -S[0, k]
        idx = np.argsort(-delta[:K])
        best = 0.0
        best_m = 0
        acc = 0.0
        for m in range(1, K + 1):
            acc += delta[idx[m - 1]]
            v = (m / Ki) * (1.0 + acc)
            if v > best:
                best = v
                best_m = m
        for q in range(best_m):
            k = idx[q]
            out[k] = 1 - out[k]
        return best
    # chain, Hamming loss: the DP over wrong-tag counts, then the best level and its labeling
    _chain_wrong_dp(S, T, B, scale, L, K, use_trans, ytrue, V)
    ts = labeling_score(kind, S, T, B, scale, ytrue, L, K, use_trans)
    best = 0.0
    best_m = 0
    for m in range(1, L + 1):
        v = _chain_level_best(V, B, scale, L, K, use_trans, m)
        if v == -np.inf:
            continue
        h = (m / L) * (1.0 + v - ts)
        if h > best:
            best = h
            best_m = m
    if best_m == 0:
        for t in range(L):
            out[t] = ytrue[t]
        return 0.0
    chain_level_labeling(S, T, B, scale, L, K, use_trans, ytrue, V, best_m, out)
    return best


@njit(**_JIT)
def _chain_wrong_dp(S, T, B, scale, L, K, use_trans, ytrue, V):
    """V[t, k, m] = best score of tags 0..t ending in tag k with m wrong tags (-inf: none)."""
    NEG = -np.inf
    for t in range(L):
        for k in range(K):
            for m in range(L + 1):
                V[t, k, m] = NEG
    for k in range(K):
        w = 1 if k != ytrue[0] else 0
        v = S[0, k]
        if use_trans:
            v += scale * B[0, k]
        V[0, k, w] = v
    for t in range(1, L):
        for k in range(K):
            w = 1 if k != ytrue[t] else 0
            for m in range(w, t + 2):
                best = NEG
                for j in range(K):
                    pv = V[t - 1, j, m - w]
                    if pv == NEG:
                        continue
                    v = pv + (scale * T[j, k] if use_trans else 0.0)
                    if v > best:
                        best = v
                if best > NEG:
                    V[t, k, m] = best + S[t, k]


@njit(**_JIT)
def _chain_level_best(V, B, scale, L, K, use_trans, m):
    """Best full-sequence score with exactly m wrong tags (end bias included)."""
    best = -np.inf
    for k in range(K):
        v = V[L - 1, k, m]
        if v == -np.inf:
            continue
        if use_trans:
            v += scale * B[1, k]
        if v > best:
            best = v
    return best


@njit(**_JIT)
def slack_levels(kind, S, T, B, scale, L, K, use_trans, ytrue, ly, C, Ki, V, ybuf, delta, hs, gs):
    """The (h, g) points that matter for slack rescaling, one per loss level, with
    h = 1 + best score at that level - score(y_true) and g = the level's loss: the classes for
    multiclass; m wrong labels (the m best flips) for multi-label; m wrong tags (the DP of
    ``slack_oracle``) for Hamming chains. Every lambda-oracle and constrained lambda-oracle answer
    of the structure is one of these points, so the searches of ``streamssvm.oracles.slack`` can
    run on them. Returns the number of points written to hs, gs."""
    if kind == HIER:
        return _hier_slack_levels(S, C, K, ytrue, ly, Ki, hs, gs)
    if kind == MLPAIR:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        ts = labeling_score(kind, S, T, B, scale, ybuf, L, K, use_trans)
        lab = np.zeros(K, dtype=np.int32)
        _mrf_enum(S, T, scale, K, ybuf, 2, 0.0, Ki, ts, delta, lab)
        c = 0
        for m in range(1, K + 1):
            if delta[m] > -np.inf:
                hs[c] = 1.0 + delta[m] - ts
                gs[c] = m / Ki
                c += 1
        return c
    if kind == MULTICLASS:
        yt = ytrue[0]
        c = 0
        for k in range(K):
            if k == yt:
                continue
            hs[c] = 1.0 + S[0, k] - S[0, yt]
            gs[c] = C[yt, k]
            c += 1
        return c
    if kind == MULTILABEL:
        _ml_dense_truth(ytrue, ly, K, ybuf)
        for k in range(K):
            delta[k] = S[0, k] if ybuf[k] == 0 else -S[0, k]
        idx = np.argsort(-delta[:K])
        acc = 0.0
        for m in range(1, K + 1):
            acc += delta[idx[m - 1]]
            hs[m - 1] = 1.0 + acc
            gs[m - 1] = m / Ki
        return K
    _chain_wrong_dp(S, T, B, scale, L, K, use_trans, ytrue, V)
    ts = labeling_score(kind, S, T, B, scale, ytrue, L, K, use_trans)
    c = 0
    for m in range(1, L + 1):
        best = _chain_level_best(V, B, scale, L, K, use_trans, m)
        if best > -np.inf:
            hs[c] = 1.0 + best - ts
            gs[c] = m / L
            c += 1
    return c


@njit(**_JIT)
def mrf_level_labeling(S, T, scale, K, ytrue, ly, Ki, m, out):
    """The best labeling of the pairwise multi-label MRF with exactly m wrong labels."""
    yb = np.zeros(K, dtype=np.int32)
    _ml_dense_truth(ytrue, ly, K, yb)
    best_m = np.zeros(K + 1)
    codes = np.zeros(K + 1, dtype=np.int64)
    _mrf_enum(S, T, scale, K, yb, 2, 0.0, Ki, 0.0, best_m, out, codes)
    for k in range(out.shape[0]):
        out[k] = 0
    for k in range(K):
        if (codes[m] >> k) & 1:
            out[k] = 1
    return best_m[m] > -np.inf


@njit(**_JIT)
def chain_level_labeling(S, T, B, scale, L, K, use_trans, ytrue, V, m, out):
    """After ``slack_levels`` (which fills V), the best labeling with exactly m wrong tags.
    Returns False when no labeling has m wrong tags."""
    NEG = -np.inf
    best = NEG
    bk = -1
    for k in range(K):
        v = V[L - 1, k, m]
        if v == NEG:
            continue
        if use_trans:
            v += scale * B[1, k]
        if v > best:
            best = v
            bk = k
    if bk < 0:
        return False
    k = bk
    out[L - 1] = k
    for t in range(L - 1, 0, -1):
        w = 1 if k != ytrue[t] else 0
        target = V[t, k, m] - S[t, k]
        found = -1
        for j in range(K):
            pv = V[t - 1, j, m - w]
            if pv == NEG:
                continue
            v = pv + (scale * T[j, k] if use_trans else 0.0)
            if abs(v - target) <= 1e-9 * (1.0 + abs(target)):
                found = j
                break
        k = found
        m -= w
        out[t - 1] = k
    return True


# ---------------------------------------------------------------- hierarchical multi-label (HIER)
#
# Labels are the leaves of a tree or DAG over N nodes; a labeling is a set of leaves and its
# statistic is the 0/1 indicator over nodes of the ancestor closure of the set (Anc includes the
# node itself), so the score of Y is the sum of the node scores of the closure and the statistic
# layout is the multi-label one (``[M: Kc]``, one slot per node). Labelings (pools, oracle
# outputs) are closure indicators; the ground truth ``ytrue`` is the sorted list of the closure's
# node ids. The loss is the Hamming distance over the leaves divided by the number of leaves.
#
# The graph travels in the cost matrix argument every kernel already receives (a hierarchy has
# no cost matrix), as parent lists: ``C[a, 0] = -(number of parents of a)`` and
# ``C[a, 1 + i] = -(id of its i-th parent)`` -- negative so that ``C.max()``, which learners read
# as the largest loss, stays 0 (the loss is at most 1); it always fits, since parents have larger
# ids (at most Kc - 1 - a of them). Reading the graph costs O(nodes + edges). Node ids follow one
# convention,
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
def _hier_npar(C, a):
    return int(-C[a, 0])


@njit(**_JIT)
def _hier_parent(C, a, i):
    return int(-C[a, 1 + i])


@njit(**_JIT)
def _hier_graph(C, K):
    """Children CSR of the node graph from the parent lists in C, with a virtual root K whose
    children are the roots; returns (cptr, cidx, is_tree)."""
    nch = np.zeros(K + 1, dtype=np.int64)
    npar = np.zeros(K, dtype=np.int64)
    for a in range(K):
        npar[a] = _hier_npar(C, a)
        for i in range(npar[a]):
            nch[_hier_parent(C, a, i)] += 1
    tree = True
    for a in range(K):
        if npar[a] == 0:
            nch[K] += 1
        elif npar[a] > 1:
            tree = False
    cptr = np.zeros(K + 2, dtype=np.int64)
    for n in range(K + 1):
        cptr[n + 1] = cptr[n] + nch[n]
    cidx = np.zeros(cptr[K + 1], dtype=np.int64)
    fill = cptr[:K + 1].copy()
    for a in range(K):
        if npar[a] == 0:
            cidx[fill[K]] = a
            fill[K] += 1
        for i in range(npar[a]):
            b = _hier_parent(C, a, i)
            cidx[fill[b]] = a
            fill[b] += 1
    return cptr, cidx, tree


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
def _hier_enum(S, K, C, cptr, ybuf, mode, w, Ki, ts, best_m, out, m_sel):
    """Gray-code enumeration of the leaf subsets (DAGs, up to HIER_MAX_DAG_LEAVES leaves):
    O(|Anc(leaf)|) per step with per-node counts of chosen leaves below. mode 0: argmax score +
    w * wrong leaves; mode 1: argmax (m / Ki)(1 + score - ts); mode 2: best score per number m
    of wrong leaves into best_m, and with m_sel >= 0 that level's best labeling into ``out``."""
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
                for j in range(_hier_npar(C, n)):
                    mark[_hier_parent(C, n, j)] = 1
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
def hier_levels(S, C, K, ytrue, ly, Ki, best_m, m_sel, out):
    """best_m[m] (m = 0..Ki) = the best score of a hierarchical labeling with exactly m wrong
    leaves (-inf: none); with m_sel >= 0 also the best labeling of level m_sel into ``out``
    (closure indicator). Returns False when level m_sel is empty."""
    ybuf = np.zeros(K, dtype=np.int32)
    _ml_dense_truth(ytrue, ly, K, ybuf)
    cptr, cidx, tree = _hier_graph(C, K)
    nleaf = 0
    for n in range(K):
        if cptr[n] == cptr[n + 1]:
            nleaf += 1
    if nleaf != Ki or best_m.shape[0] < Ki + 1:
        raise ValueError("hierarchy: Ki must be the number of leaves and best_m hold Ki + 1 values")
    if tree:
        return _hier_tree_levels(S, K, cptr, cidx, ybuf, Ki, best_m, m_sel, out)
    r = _hier_enum(S, K, C, cptr, ybuf, 2, 0.0, Ki, 0.0, best_m, out, m_sel)
    return r > -np.inf


@njit(**_JIT)
def hier_level_labeling(S, C, K, ytrue, ly, Ki, m, out):
    """The best hierarchical labeling with exactly m wrong leaves (closure indicator)."""
    best_m = np.zeros(Ki + 1)
    return hier_levels(S, C, K, ytrue, ly, Ki, best_m, m, out)


@njit(**_JIT)
def _hier_decode(S, C, K, ytrue, ly, loss_scale, Ki, ybuf, out):
    w = loss_scale / Ki if loss_scale != 0.0 else 0.0
    if loss_scale != 0.0:
        _ml_dense_truth(ytrue, ly, K, ybuf)
    else:
        for k in range(K):
            ybuf[k] = 0
    cptr, cidx, tree = _hier_graph(C, K)
    if tree:
        return _hier_tree_map(S, K, cptr, cidx, ybuf, w, out)
    dummy = np.zeros(K + 1)
    return _hier_enum(S, K, C, cptr, ybuf, 0, w, max(Ki, 1), 0.0, dummy, out, -1)


@njit(**_JIT)
def _hier_slack(S, C, K, ytrue, ly, Ki, out):
    ybuf = np.zeros(K, dtype=np.int32)
    _ml_dense_truth(ytrue, ly, K, ybuf)
    ts = 0.0
    for k in range(K):
        if ybuf[k] == 1:
            ts += S[0, k]
    best_m = np.zeros(Ki + 1)
    hier_levels(S, C, K, ytrue, ly, Ki, best_m, -1, out)
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
    hier_levels(S, C, K, ytrue, ly, Ki, best_m, bm, out)
    return best


@njit(**_JIT)
def _hier_slack_levels(S, C, K, ytrue, ly, Ki, hs, gs):
    ybuf = np.zeros(K, dtype=np.int32)
    _ml_dense_truth(ytrue, ly, K, ybuf)
    ts = 0.0
    for k in range(K):
        if ybuf[k] == 1:
            ts += S[0, k]
    best_m = np.zeros(Ki + 1)
    lab = np.zeros(K, dtype=np.int32)
    hier_levels(S, C, K, ytrue, ly, Ki, best_m, -1, lab)
    c = 0
    for m in range(1, Ki + 1):
        if best_m[m] > -np.inf:
            hs[c] = 1.0 + best_m[m] - ts
            gs[c] = m / Ki
            c += 1
    return c
