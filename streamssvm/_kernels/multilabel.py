"""Independent multi-label kernels (Hamming loss over the K labels / Ki): loss-augmented
decoding label by label, and the exact slack-rescaling oracle: for m wrong labels the best score
change is the sum of the m largest flip gains, so one sort and prefix sums give every level.

>>> import numpy as np
>>> S = np.array([[1.0, -2.0, 0.5]])
>>> ybuf, out = np.zeros(3, np.int32), np.zeros(3, np.int32)
>>> float(ml_decode(S, 3, np.array([1], np.int32), 1, 0.0, 1, ybuf, out)), out.tolist()
(1.5, [1, 0, 1])
"""
import numpy as np
from numba import njit

from .common import _JIT, _ml_dense_truth


@njit(**_JIT)
def ml_decode(S, K, ytrue, ly, loss_scale, Ki, ybuf, out):
    """argmax_y score + loss_scale * Hamming / Ki, label by label; returns the maximum."""
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


@njit(**_JIT)
def _ml_flip_order(S, K, ytrue, ly, ybuf, delta):
    """Dense truth into ybuf, flip gains into delta; returns the labels by decreasing gain."""
    _ml_dense_truth(ytrue, ly, K, ybuf)
    for k in range(K):
        delta[k] = S[0, k] if ybuf[k] == 0 else -S[0, k]
    return np.argsort(-delta[:K])


@njit(**_JIT)
def ml_slack(S, K, ytrue, ly, Ki, ybuf, delta, out):
    """argmax_y (m / Ki)(1 + score change), m wrong labels: the m best flips; into ``out``."""
    idx = _ml_flip_order(S, K, ytrue, ly, ybuf, delta)
    for k in range(out.shape[0]):
        out[k] = 0
    for k in range(K):
        out[k] = ybuf[k]
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


@njit(**_JIT)
def ml_levels(S, K, ytrue, ly, Ki, ybuf, delta, hs, gs):
    """The level points: m wrong labels (the m best flips), m = 1..K; returns K."""
    idx = _ml_flip_order(S, K, ytrue, ly, ybuf, delta)
    acc = 0.0
    for m in range(1, K + 1):
        acc += delta[idx[m - 1]]
        hs[m - 1] = 1.0 + acc
        gs[m - 1] = m / Ki
    return K
