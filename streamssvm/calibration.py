"""Calibrated confidence: a structural SVM's scores turned into probabilities by a Gibbs
distribution p(y | x) ∝ exp(beta score(x, y)), the inverse temperature beta fitted online on
the progressive stream (each record scored by the model *before* it learns the record, as
river's progressive validation does).

This is temperature scaling (Guo, Pleiss, Sun & Weinberger, "On Calibration of Modern Neural
Networks", ICML 2017) on a structured output: over the classes for a multiclass model, a sigmoid
per label for independent multi-label models (Platt, "Probabilistic outputs for support vector
machines", 1999, with the offset fixed at the decision threshold 0), and per-token marginals by
forward-backward for chains (a CRF's marginals with the SVM's weights, Lafferty, McCallum &
Pereira, ICML 2001).

The fit keeps a window of the last ``window`` observed records (their score tables and true
outputs) and, every ``every`` observations, takes ``steps`` safeguarded Newton steps on
``u = log beta`` of the window's mean log-loss (finite-difference derivatives: three
log-loss evaluations a step). The log-loss is convex in beta (a log-partition function is);
a step that does not lower it is halved. Learning never reads beta: trajectories are unchanged.

A window is a small sample of a stream whose recent part need not look like the data the model
will be asked about (on OCR words the last thousand training words are harder than the held-out
fold, and their window put T at 0.27 where held-out data wanted 0.23). So ``beta`` is not the last
window's minimizer but a pool of all of them: each fit's ``log beta`` minimizer ``u_i``, weighted
by its curvature ``H_i`` (the window's Fisher information in ``u``) times the offered records its
observations since the previous fit stand for, and forgotten with a half-life of ``memory`` of them,
``log beta = sum w_i u_i / sum w_i`` (the minimizer of the sum of the windows' quadratic
approximations, a Laplace pooling; Bishop, "Pattern Recognition and Machine Learning", 4.4).

>>> import numpy as np
>>> t = Temperature(window=64, every=16)
>>> rng = np.random.default_rng(0)
>>> for _ in range(400):     # scores 4x too confident: the true class has logit s / 4
...     s = rng.normal(size=3) * 8
...     p = np.exp(s / 4 - np.max(s / 4)); p /= p.sum()
...     t.observe_class(s, int(rng.choice(3, p=p)))
>>> 0.15 < t.beta < 0.4
True
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np

from ._kernels import marginals as KM
from ._kernels.common import py_entry
from .saved_state import validate_calibration

#: the inverse temperature's range (a state outside it is refused on load)
BETA_MIN, BETA_MAX = 1e-8, 1e8


def predict_tables(learner):
    """``(E, ZE, zc, T, B, scale)`` with which ``learner`` predicts: emission scores
    ``scale * x (E - zc ZE)``, transitions ``scale * T`` and boundary biases ``scale * B`` (the
    arrays are the learner's own, not copies: read them, do not keep them). ``None`` for a
    learner whose weights are not one dense table (MEMOIR, GDMM, Pragam): such a model's
    probabilities are one-hot on its prediction."""
    if learner is None or not getattr(learner, "bound", False) or getattr(learner, "W", None) is None:
        return None
    return learner.prediction_tables()


def emission_scores(tables, tok_ptr, fidx, fval, K, learner=None):
    """The (L x K) emission score table of an encoded record; ``learner``: the one ``tables``
    come from, which computes it in its own record kernel when it can (``scores_records``: the
    same values, without compiling a kernel for this table on a first use)."""
    if learner is not None and learner.scores_records:
        S = learner.record_emission_table(tok_ptr, fidx, fval, K)
        if S is not None:
            return S
        if learner.record_kernel_pending and numpy_table_fits(tok_ptr, K):
            # a first record: the same values, no kernel compiled for them
            return emission_scores_numpy(tables, tok_ptr, fidx, fval, K)
    E, ZE, zc, _, _, scale = tables
    L = len(tok_ptr) - 1
    S = np.empty((L, K))
    py_entry(KM.emission_table)(E, ZE, float(zc), float(scale), np.asarray(tok_ptr, dtype=np.int64),
                                np.asarray(fidx, dtype=np.int64), np.asarray(fval, dtype=np.float64), L, K, S)
    return S


#: The largest zero-padded term array (floats) :func:`emission_scores_numpy` builds: L x (most
#: features of a token) x K; a first record past it (32 MB) is scored by the compiled table.
NUMPY_TABLE_MAX_FLOATS = 1 << 22


def numpy_table_fits(tok_ptr, K):
    """Whether :func:`emission_scores_numpy`'s padded terms for this record stay within
    :data:`NUMPY_TABLE_MAX_FLOATS`."""
    n = np.diff(np.asarray(tok_ptr, dtype=np.int64))
    return n.size == 0 or n.size * int(n.max()) * int(K) <= NUMPY_TABLE_MAX_FLOATS


def emission_scores_numpy(tables, tok_ptr, fidx, fval, K):
    """:func:`emission_scores` in numpy, the same values to the bit (``marginals.emission_table``'s
    products, each token's summed in the same order from 0.0: a sequential ``np.add.accumulate``
    over the token's terms padded with zeros, and + 0.0 for the sign of an all -0.0 sum) at ~15x
    its time: for a record scored before the learner's record kernel exists (a first record),
    where compiling a kernel for one table would cost more than all of them."""
    E, ZE, zc, _, _, scale = tables
    tok_ptr = np.asarray(tok_ptr, dtype=np.int64)
    L = len(tok_ptr) - 1
    S = np.zeros((L, K))
    if L <= 0 or K <= 0:
        return S
    a, b = int(tok_ptr[0]), int(tok_ptr[L])
    f = np.asarray(fidx, dtype=np.int64)[a:b]
    keep = (f >= 0) & (f < E.shape[0])   # a feature past the weight rows scores 0
    tok = np.repeat(np.arange(L), np.diff(tok_ptr))[keep]
    if tok.size == 0:
        return S
    f = f[keep]
    v = np.asarray(fval, dtype=np.float64)[a:b][keep] * float(scale)
    zc = float(zc)
    terms = v[:, None] * (E[f, :K] if zc == 0.0 else E[f, :K] - zc * ZE[f, :K])
    count = np.bincount(tok, minlength=L)
    padded = np.zeros((L, int(count.max()), K))
    padded[tok, np.arange(tok.size) - (np.cumsum(count) - count)[tok]] = terms
    S[:] = np.add.accumulate(padded, axis=1)[:, -1] + 0.0
    return S


def chain_tables(tables, K):
    """Transition and boundary tables of a chain with the scale folded in (copies)."""
    _, _, _, T, B, scale = tables
    return scale * np.ascontiguousarray(T[:K, :K]), scale * np.ascontiguousarray(B[:, :K])


def softmax(s, beta):
    """p_k ∝ exp(beta s_k)."""
    z = beta * np.asarray(s, dtype=np.float64)
    z = z - z.max()
    p = np.exp(z)
    return p / p.sum()


def sigmoid(s, beta):
    """1 / (1 + exp(-beta s)), stable for large |beta s|."""
    z = beta * np.asarray(s, dtype=np.float64)
    return np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))


def _chain_nll(item, beta):
    S, T, B, use_trans, y = item
    L, K = S.shape
    return float(KM.chain_token_nll(S, T, B, use_trans, L, K, beta, y, np.empty((L, K))))


class Temperature:
    """The online fit of the inverse temperature ``beta`` (see the module docstring).

    Parameters
    ----------
    window
        Records (their score tables) kept for the fit.
    every
        Observations between two fits.
    steps
        Newton steps per fit.
    dense_until, stride
        Every record is observed until ``dense_until`` have been offered, then one in
        ``stride`` (the cost per learned record stays a fraction of a prediction).
    memory
        Half-life, in offered records, of a window fit's weight in the pooled ``beta``
        (``0``, the default: ``beta`` is the last window's minimizer alone; on OCR letters the
        last window of 128 letters beat every pool on a tuning fold, 0.014 vs 0.023 ECE at a
        half-life of 4096 letters, while on OCR words the pool did, see
        :class:`~streamssvm.SequenceTagger`).
    """

    _rows = None   # the stacked class rows (class defaults: a fit pickled before them has none)
    _rows_n = 0

    def __init__(self, window=128, every=32, steps=2, dense_until=1024, stride=8, memory=0):
        self.window, self.every, self.steps = int(window), int(every), int(steps)
        self.dense_until, self.stride = int(dense_until), int(stride)
        self.memory = float(memory)
        self.beta = 1.0
        self.window_log_beta = 0.0   # the last window's minimizer (the next fit starts there)
        self.pool_weight = 0.0       # sum of the pooled fits' (forgotten) weights
        self.pool_log_beta = 0.0     # their weighted mean of log beta
        self._observed_at_fit = 0    # n_observed at the last fit
        self.n_offered = 0      # records offered to wants()
        self.n_observed = 0     # records kept in the window so far
        self.n_fits = 0
        self._items = deque(maxlen=self.window)
        self._shapes = {}   # (kind, length of the scores) -> items of the window with it
        # the window's last class rows of one length, stacked as they arrive (:meth:`_stack_rows`)
        self._rows = None  # (scores, classes, row maxima, true class scores): rings of `window`
        self._rows_n = 0   # rows written there since the last item of another kind or length

    # ------------------------------------------------------------------ observing
    def would_want(self, ahead=0):
        """Whether the record offered ``ahead`` records from now will be observed (counts nothing):
        a micro-batch sends the kernel only records the fit does not observe."""
        n = self.n_offered + ahead
        return n < self.dense_until or n % self.stride == 0

    def pass_over(self, n):
        """Count ``n`` offered records that are not observed (:meth:`would_want` said so): the
        counter :meth:`wants` would leave after them, in one step."""
        self.n_offered += int(n)

    def wants(self):
        """Count an offered record; True when it is to be observed."""
        n = self.n_offered
        self.n_offered = n + 1
        return n < self.dense_until or n % self.stride == 0

    def observe_class(self, scores, y):
        """A multiclass record: its class scores before learning and its true class index."""
        self._add(("c", np.array(scores, dtype=np.float64), int(y)))

    def observe_classes(self, S, ys):
        """:meth:`observe_class` of each row of ``S`` (n x K class scores) with its true class
        index in ``ys``, in order: the same window, a fit at the same observations, so the same
        ``beta`` to the bit. One copy of ``S`` (the window's items are views of its rows) and
        one window update per span between two fits, instead of a copy and an update per row
        (a micro-batch's observed records, :meth:`MulticlassSSVM.predict_learn_each`)."""
        S = np.array(S, dtype=np.float64)
        if S.ndim != 2 or S.shape[0] != len(ys):
            raise ValueError(f"observe_classes takes an (n x K) score table and n classes, got {S.shape} and "
                             f"{len(ys)}")
        ys = [int(y) for y in ys]
        items, shapes, every = self._items, self._shapes, self.every
        key = ("c", S.shape[1])
        i, n = 0, len(ys)
        while i < n:
            k = min(n - i, every - self.n_observed % every)   # the observations up to the next fit
            drop = len(items) + k - items.maxlen               # items that leave the window (oldest first)
            for j in range(min(max(drop, 0), len(items))):
                self._forget(items[j])
            stay = k - max(drop - len(items), 0)               # of the k new ones, those the window keeps
            if stay > 0:
                shapes[key] = shapes.get(key, 0) + stay
            items.extend([("c", S[j], ys[j]) for j in range(i, i + k)])
            self._stack_rows(S[i:i + k], ys[i:i + k])
            self.n_observed += k
            i += k
            if self.n_observed % every == 0:
                self.fit()

    def observe_labels(self, scores, y):
        """An independent multi-label record: per-label scores (on iff > 0) and the truth (bools)."""
        self._add(("l", np.array(scores, dtype=np.float64), np.asarray(y, dtype=bool)))

    def observe_chain(self, S, T, B, use_trans, y):
        """A chain: its emission table, transition and boundary tables (scaled) and true tags."""
        self._add(("s", (np.ascontiguousarray(S, dtype=np.float64), np.ascontiguousarray(T, dtype=np.float64),
                         np.ascontiguousarray(B, dtype=np.float64), bool(use_trans),
                         np.asarray(y, dtype=np.int64))))

    def _forget(self, item):
        """Count ``item`` out of the window's shapes (it leaves the window)."""
        shapes, gone = self._shapes, (item[0], len(item[1]))
        shapes[gone] -= 1
        if not shapes[gone]:
            del shapes[gone]

    def _add(self, item):
        items, shapes = self._items, self._shapes
        if len(items) == items.maxlen:   # the oldest item leaves the window
            self._forget(items[0])
        key = (item[0], len(item[1]))
        shapes[key] = shapes.get(key, 0) + 1
        items.append(item)
        if item[0] == "c":
            self._stack_rows(item[1][None], (item[2],))
        else:
            self._rows_n = 0   # the run of stacked class rows ends here
        self.n_observed += 1
        if self.n_observed % self.every == 0:
            self.fit()

    #: the stacked rows' size limit (elements): a window of wider rows is stacked at each fit
    ROWS_MAX = 1 << 22

    def _stack_rows(self, S, ys):
        """Write class rows ``S`` (k x K, in order) and their true classes into the window's
        stacked rows: a ring of ``window`` rows of one length K (with each row's largest score and
        its true class's score, which every fit reads), restarted at a row of another length (a
        new class) or an item of another kind, so that its last rows are the window's items while
        every item is a class row of that length (:meth:`_stacked`)."""
        k, K = S.shape
        W = self._items.maxlen
        if not K or W * K > self.ROWS_MAX:
            self._rows = None
            self._rows_n = 0
            return
        if self._rows is None or self._rows[0].shape[1] != K:
            self._rows = (np.empty((W, K)), np.empty(W, dtype=np.int64), np.empty(W), np.empty(W))
            self._rows_n = 0
        if k == 1:   # one record (observe_class): the same four values written as scalars
            rows, p, y, row = self._rows, self._rows_n % W, int(ys[0]), S[0]
            rows[0][p] = row
            rows[1][p] = y
            rows[2][p] = row.max()
            rows[3][p] = row[y]
            self._rows_n += 1
            return
        if k > W:
            self._rows_n += k - W
            S, ys = S[k - W:], ys[k - W:]
            k = W
        ys = np.asarray(ys, dtype=np.int64)
        # the values _groups takes from the stacked window: a row's max and its true class's score
        # are exact (no rounding), whatever rows they are computed with
        new = (S, ys, S.max(axis=1), S[np.arange(k), ys])
        p = self._rows_n % W
        a = min(k, W - p)   # rows up to the ring's end, the rest from its start
        for ring, v in zip(self._rows, new):
            ring[p:p + a] = v[:a]
            if a < k:
                ring[:k - a] = v[a:]
        self._rows_n += k

    def _stacked(self, K):
        """The window's items as (n x K scores, n classes, n row maxima, n true class scores) in
        the window's order from the stacked rows (views, or two slices joined), or None when
        those do not hold them all (every item must be a class row of length K, the rows a run
        covering the window)."""
        n = len(self._items)
        if self._rows is None or self._rows[0].shape[1] != K or self._rows_n < n or not n:
            return None
        W = len(self._rows[1])
        a = (self._rows_n - n) % W
        if a + n <= W:
            return tuple(r[a:a + n] for r in self._rows)
        b = a + n - W
        return tuple(np.concatenate((r[a:], r[:b])) for r in self._rows)

    # ------------------------------------------------------------------ fitting
    def _groups(self):
        """The window as vectorized groups: ("c", scores (n x K), truth (n,)) and ("l", scores,
        truth (n x K)) per label count K, and the chains one by one."""
        items, shapes = self._items, getattr(self, "_shapes", None)
        if shapes is not None and len(shapes) == 1 and sum(shapes.values()) == len(items) \
                and next(iter(shapes))[0] == "c":
            # every item a class row of one length (a multiclass stream once its classes are
            # known): the one group the loop below makes, without sorting the window; from the
            # stacked rows when they hold it (the same values, without stacking the window's rows)
            st = self._stacked(next(iter(shapes))[1])
            if st is not None:
                return [("c",) + st], []
            groups, chains = [("c", np.array([it[1] for it in items]), np.array([it[2] for it in items]))], []
        else:
            by, chains = {}, []
            for it in items:
                if it[0] == "s":
                    chains.append(it[1])
                else:
                    by.setdefault((it[0], len(it[1])), []).append(it)
            # np.array over the equal-length rows and the class ids (the values np.stack gives,
            # without its per-array dispatch: ~3x cheaper on a window of 128)
            groups = [(k, np.array([it[1] for it in its]),
                       np.array([it[2] for it in its]) if k == "c" else np.stack([np.asarray(it[2]) for it in its]))
                      for (k, _), its in by.items()]
        # what every loss evaluation of the window reads and beta does not change: per class row
        # its largest score and the true class's score (beta * max = max of beta * scores and
        # beta * S[i, y] = (beta * S)[i, y] to the bit for beta > 0: rounding is monotone), per
        # label the sign of its truth
        groups = [(k, S, Y, S.max(axis=1) if k == "c" and S.size else None,
                   S[np.arange(len(Y)), Y] if k == "c" else np.where(Y, 1.0, -1.0))
                  for k, S, Y in groups]
        return groups, chains

    def loss(self, beta=None, prepared=None):
        """Mean log-loss of the window at ``beta`` (default: the current one) per scored unit
        (class decision, label or token)."""
        beta = self.beta if beta is None else float(beta)
        groups, chains = self._groups() if prepared is None else prepared
        tot, units = 0.0, 0
        for kind, S, Y, smax, sy in groups:
            Z = beta * S
            if kind == "c":
                if smax is not None and 0.0 < beta < math.inf:   # the same values as below, fewer passes
                    m = beta * smax
                    Z -= m[:, None]
                    np.exp(Z, out=Z)
                    tot += float(np.sum(m + np.log(Z.sum(axis=1)) - beta * sy))
                else:
                    m = Z.max(axis=1)
                    tot += float(np.sum(m + np.log(np.exp(Z - m[:, None]).sum(axis=1)) - Z[np.arange(len(Y)), Y]))
                units += len(Y)
            else:
                tot += float(np.sum(np.logaddexp(0.0, -Z * sy)))
                units += Y.size
        for it in chains:
            tot += _chain_nll(it, beta)
            units += it[0].shape[0]
        return tot / units if units else 0.0

    def losses(self, betas, prepared=None):
        """:meth:`loss` at each of ``betas`` (each value to the bit what ``loss(beta)`` returns):
        a multiclass group's log-loss at all of them in one pass of numpy operations over the
        stacked (len(betas) x n x K) tables, whose elementwise operations and last-axis sums
        (``Z.sum(axis=-1)``, then the sum over the n records) are those of one beta's
        tables, row by row; the other groups and the chains one beta at a time."""
        betas = [float(b) for b in betas]
        groups, chains = self._groups() if prepared is None else prepared
        if not all(kind == "c" and smax is not None for kind, _, _, smax, _ in groups) or chains \
                or not all(0.0 < b < math.inf for b in betas):
            return [self.loss(b, (groups, chains)) for b in betas]
        tots, units = [0.0] * len(betas), 0
        B = np.array(betas)
        for _, S, Y, smax, sy in groups:
            Z = B[:, None, None] * S
            m = B[:, None] * smax
            Z -= m[:, :, None]
            np.exp(Z, out=Z)
            per = (m + np.log(Z.sum(axis=2)) - B[:, None] * sy).sum(axis=1)
            tots = [t + float(v) for t, v in zip(tots, per)]
            units += len(Y)
        return [t / units if units else 0.0 for t in tots]

    def fit(self, steps=None):
        """``steps`` safeguarded Newton steps on log beta; returns the window's log-loss. The
        loss at the start and at the first step's two finite-difference points are evaluated
        together, then each step's first try with the next step's two points around it, and
        those two points alone after a try not taken (:meth:`losses`): the same values as one
        at a time."""
        if not self._items:
            return 0.0
        h = 0.1
        u = self.window_log_beta
        prep = self._groups()
        loss = lambda b: self.loss(b, prep)   # noqa: E731
        n_steps = self.steps if steps is None else int(steps)
        if n_steps > 0:
            f0, fp, fm = self.losses((math.exp(u), math.exp(u + h), math.exp(u - h)), prep)
        else:
            f0 = loss(math.exp(u))
        H = 0.0
        ahead = None   # the next step's two points, evaluated with this step's first try
        for i in range(n_steps):
            if ahead is not None:
                fp, fm = ahead
            elif i:
                fp, fm = self.losses((math.exp(u + h), math.exp(u - h)), prep)
            ahead = None
            g = (fp - fm) / (2 * h)
            H = (fp - 2 * f0 + fm) / (h * h)
            if abs(g) < 1e-12:
                break
            step = -g / H if H > 1e-12 else -math.copysign(1.0, g)
            step = max(-1.0, min(1.0, step))
            # halve until the loss goes down (8 tries): the first alone (with the next step's two
            # points around it, which it needs when the try is taken), then the other seven
            # together (the same values, the first that goes down taken)
            tries = []
            for _ in range(8):
                tries.append(min(max(u + step, math.log(BETA_MIN)), math.log(BETA_MAX)))
                step *= 0.5
            if i + 1 < n_steps:
                fn, fpn, fmn = self.losses((math.exp(tries[0]), math.exp(tries[0] + h), math.exp(tries[0] - h)), prep)
            else:
                fn = loss(math.exp(tries[0]))
            if fn < f0:
                u, f0 = tries[0], fn
                if i + 1 < n_steps:
                    ahead = fpn, fmn
            else:
                fns = self.losses([math.exp(un) for un in tries[1:]], prep)
                down = next((k for k, v in enumerate(fns) if v < f0), None)
                if down is None:
                    break
                u, f0 = tries[1 + down], fns[down]
        lo, hi = math.log(BETA_MIN), math.log(BETA_MAX)
        self.window_log_beta = u = min(max(u, lo), hi)
        self._pool(u, H)
        self.beta = min(max(math.exp(self.pool_log_beta), BETA_MIN), BETA_MAX)   # exp(log(BETA_MIN)) may round below it
        self.n_fits += 1
        return f0

    def _represented(self, n):
        """Offered records that ``n`` observations stand for (each one, then one in ``stride``):
        counted from the observations, so a micro-batch (which counts offers in runs) pools alike."""
        return n if n <= self.dense_until else self.dense_until + (n - self.dense_until) * self.stride

    def _pool(self, u, H):
        """Add the window's minimizer ``u`` (curvature ``H`` per unit) to the pooled log beta."""
        span = max(self._represented(self.n_observed) - self._represented(self._observed_at_fit), 1)
        self._observed_at_fit = self.n_observed
        w = span * max(H, 1e-12)
        if self.memory <= 0:              # no pool: the window's minimizer itself
            self.pool_log_beta, self.pool_weight = u, w
            return
        keep = 0.5 ** (span / self.memory)
        total = keep * self.pool_weight + w
        self.pool_log_beta = (keep * self.pool_weight * self.pool_log_beta + w * u) / total
        self.pool_weight = total

    # ------------------------------------------------------------------ persistence
    def state(self):
        """beta, the pool and the counters (the window is not saved: it refills from the stream)."""
        return {"beta": float(self.beta), "n_offered": int(self.n_offered), "n_observed": int(self.n_observed),
                "n_fits": int(self.n_fits), "window_log_beta": float(self.window_log_beta),
                "pool_weight": float(self.pool_weight), "pool_log_beta": float(self.pool_log_beta),
                "observed_at_fit": int(self._observed_at_fit)}

    @classmethod
    def from_state(cls, st, **settings):
        """The fit saved by :meth:`state`, with ``settings`` (the constructor's arguments)."""
        validate_calibration(st, (BETA_MIN, BETA_MAX))
        t = cls(**settings)
        t.beta = float(st["beta"])
        t.n_offered, t.n_observed, t.n_fits = int(st["n_offered"]), int(st["n_observed"]), int(st["n_fits"])
        # a state saved before the pool: the saved beta is the last window's, the pool starts empty
        t.window_log_beta = float(st.get("window_log_beta", math.log(t.beta)))
        t.pool_weight = float(st.get("pool_weight", 0.0))
        t.pool_log_beta = float(st.get("pool_log_beta", math.log(t.beta)))
        t._observed_at_fit = int(st.get("observed_at_fit", t.n_observed))
        return t
