"""Pairwise multi-label (a fully connected binary MRF over the labels): exact inference by
enumeration of the 2^K labelings in Gray-code order (Finley & Joachims, "Training structural SVMs
when exact inference is intractable")."""
import numpy as np
from numba import njit

from .common import _INNER, _JIT, _ml_dense_truth


@njit(**_INNER)
def _mrf_enum(S, T, scale, K, ybuf, mode, loss_scale, Ki, ts, best_m, out, codes=None):
    """Enumerate the 2^K labelings of the pairwise multi-label MRF in Gray-code order (O(K) per
    labeling). mode 0: argmax score + loss_scale * Hamming / Ki; mode 1: argmax of the slack
    objective (m / Ki)(1 + score - ts); mode 2: best score for every number m of wrong labels
    (into best_m, and the labelings as bit codes into ``codes`` when given). ``ybuf`` holds the
    dense ground truth. Writes the argmax to ``out``."""
    cur = np.empty(K, np.int32)   # (not np.zeros: ``common.py`` on allocations)
    for k in range(K):
        cur[k] = 0
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


from .common import guard_inner as _guard_inner  # noqa: E402 (last: it sees every kernel above)

_guard_inner(globals())   # a Python call of an _INNER kernel raises (common.InnerKernel)
