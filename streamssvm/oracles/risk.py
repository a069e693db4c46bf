"""Regularized-risk oracles over a held window: the one adapter between the batch solvers
(:class:`~streamssvm.learners.BMRM`, :class:`~streamssvm.learners.Pragam`) and the structures'
kernels. Everything structure-dependent those solvers need is here.

With the examples S held now (n = |S|) and P(w) = (lam/2)||w||^2 + R(w) (the notation of :mod:`streamssvm.certificate`),

    R(w) = (1/N) sum_i c_i H_i(w),   margin: H_i = max_y Delta_i(y) - <w, psi_i(y)>,
                                 slack:  H_i = max_y Delta_i(y) (1 - <w, psi_i(y)>).

with example weights c_i > 0 (``learn(..., weight=c)``) and N = sum_i c_i over the held examples
(c_i = 1, N = n unless a weight was given: then the sums below are exactly the unweighted ones).
One pass of exact oracle calls at w gives R(w), a subgradient a = -(1/n) sum_i c_i psi_i(y^_i)
(c_i = 1, or Delta_i(y^_i) for slack rescaling) and the offset b = (1/n) sum_i c'_i Delta_i(y^_i)
(c' = 1 margin / slack alike) with R(w) = <a, w> + b: the cut (a, b) of Teo, Vishwanathan, Smola
and Le's bundle methods (BMRM), also Joachims' 1-slack constraint of the labelings y^ = (y^_i).
For *any* labelings ybar = (ybar_i) the plane built the same way is a minorant of R (each term is
one of the affine pieces H_i is the max of), so a cut can be **recomputed on a changed window**
from the labelings it was made of: examples no longer held drop out, new ones contribute their
ground truth (psi = 0, Delta = 0), and 1/n is the new n (:meth:`RiskOracle.cut_from_labelings`).

Two paths, same numbers:

* multiclass (one token per example): vectorized over the window with a sparse matrix X (n x d):
  scores X W, loss-augmented argmax in numpy, subgradient X' G;
* every other structure (chain, multi-label, pairwise MRF, hierarchy): per-example loss-augmented
  decoding / exact slack oracle through :class:`~streamssvm.oracles.structured.ExampleOracles`
  and ``structops`` statistics.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from .._kernels import structops as so
from ..saved_state import pack_rows, unpack_rows
from ..structures.base import Weights
from .structured import ExampleOracles



class Window:
    """The examples a batch solver holds: FIFO with ``capacity`` (None = unbounded), each
    example with a global sequence number; ``version`` changes whenever the held set changes.

    Examples
    --------
    >>> import numpy as np
    >>> w = Window(capacity=2)
    >>> for k in range(3):
    ...     w.add(np.array([0, 1]), np.array([k]), np.array([1.0]), np.array([k]), 1)
    >>> len(w), w.first_seq, [int(e[3][0]) for e in w]
    (2, 1, [1, 2])
    """

    def __init__(self, capacity=None):
        self.capacity = capacity
        self.items = deque()
        self.first_seq = 0
        self.version = 0
        self._csr = None
        self.weights = deque()       # the example weights c_i, parallel to ``items``
        self._nonunit = 0            # how many held weights are not 1

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def add(self, tok_ptr, fidx, fval, y, Ki=1, weight=1.0):
        weight = float(weight)
        self.weights.append(weight)
        self._nonunit += weight != 1.0
        self.items.append((np.asarray(tok_ptr, dtype=np.int32).copy(), np.asarray(fidx, dtype=np.int32).copy(),
                           np.asarray(fval, dtype=np.float64).copy(), np.asarray(y, dtype=np.int32).copy(), int(Ki)))
        if self.capacity is not None and len(self.items) > self.capacity:
            self.items.popleft()
            self._nonunit -= self.weights.popleft() != 1.0
            self.first_seq += 1
        self.version += 1
        self._csr = None

    def example_weights(self):
        """The held examples' weights as an array, or None when every one is 1."""
        return np.fromiter(self.weights, dtype=np.float64, count=len(self.weights)) if self._nonunit else None

    def total(self):
        """N = sum_i c_i (n when every weight is 1)."""
        c = self.example_weights()
        return float(len(self.items)) if c is None else float(c.sum())

    def single_token(self):
        return all(len(e[0]) == 2 for e in self.items)

    def csr(self, d):
        """(X, y): the held single-token examples as a scipy CSR matrix (n x d) and their labels."""
        import scipy.sparse as sp
        if self._csr is not None and self._csr[0].shape[1] == d:
            return self._csr
        n = len(self.items)
        if n == 0:
            X = sp.csr_matrix((0, d))
            self._csr = (X, np.zeros(0, dtype=np.int64))
            return self._csr
        lens = np.array([e[0][1] - e[0][0] for e in self.items], dtype=np.int64)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        idx = np.concatenate([e[1][e[0][0]:e[0][1]] for e in self.items]).astype(np.int32)
        val = np.concatenate([e[2][e[0][0]:e[0][1]] for e in self.items])
        X = sp.csr_matrix((val, idx, indptr), shape=(n, d))
        X.sum_duplicates()
        y = np.array([int(e[3][0]) for e in self.items], dtype=np.int64)
        self._csr = (X, y)
        return self._csr

    def state(self):
        st = {"capacity": -1 if self.capacity is None else int(self.capacity), "first_seq": int(self.first_seq),
              "version": int(self.version),
              "items": pack_rows([{"tok_ptr": tp, "fidx": fi, "fval": fv, "y": y, "Ki": int(k)}
                                  for tp, fi, fv, y, k in self.items], ("tok_ptr", "fidx", "fval", "y"), ("Ki",))}
        if self._nonunit:            # saved only when one is not 1 (files of unit weights unchanged)
            st["weights"] = self.example_weights()
        return st

    @classmethod
    def from_state(cls, st):
        cap = int(st["capacity"])
        w = cls(None if cap < 0 else cap)
        for r in unpack_rows(st["items"], "held window"):
            w.items.append((np.asarray(r["tok_ptr"], dtype=np.int32), np.asarray(r["fidx"], dtype=np.int32),
                            np.asarray(r["fval"], dtype=np.float64), np.asarray(r["y"], dtype=np.int32),
                            int(r["Ki"])))
        c = st.get("weights")       # absent: every weight 1 (also files from before weights)
        c = np.ones(len(w.items)) if c is None else np.asarray(c, dtype=np.float64).reshape(-1)
        if len(c) != len(w.items) or not (np.isfinite(c).all() and (c > 0.0).all()):
            from ..saved_state import _bad
            _bad("held window: the example weights must be one finite number > 0 per held example")
        w.weights = deque(float(v) for v in c)
        w._nonunit = int(np.count_nonzero(c != 1.0))
        w.first_seq = int(st["first_seq"])
        w.version = int(st["version"])
        return w


def weights_dot(A, B):
    """<A, B> of two ``Weights`` (equal shapes)."""
    return float(np.vdot(A.E, B.E) + np.vdot(A.T, B.T) + np.vdot(A.B, B.B))


def weights_like(W):
    Z = Weights.__new__(Weights)
    Z.E, Z.T, Z.B = np.zeros_like(W.E), np.zeros_like(W.T), np.zeros_like(W.B)
    return Z


def _example_oracles(structure, K, Kc, C):
    """The structure's per-example oracles (the one call into ``oracles.structured``)."""
    return ExampleOracles(structure, K, Kc, C)


class RiskOracle:
    """R(w), its cut and its recomputation for one structure (see module doc).

    Parameters
    ----------
    structure, K, Kc, C
        The structure (:mod:`streamssvm.structures`), labels in use, label capacity, cost
        matrix (Kc x Kc).
    rescaling
        ``"margin"`` or ``"slack"``.

    Examples
    --------
    >>> import numpy as np
    >>> from streamssvm.structures.base import Weights
    >>> from streamssvm.structures.multiclass import MultiClass
    >>> win = Window()
    >>> win.add(np.array([0, 1]), np.array([0]), np.array([1.0]), np.array([1]))
    >>> W = Weights(1, 2)
    >>> r = RiskOracle(MultiClass(), 2, 2, 1.0 - np.eye(2), "margin")
    >>> R, a, b, labs = r.evaluate(W, win)       # at w = 0 the hinge is Delta = 1
    >>> R, b, a.E.tolist(), labs.tolist()
    (1.0, 1.0, [[1.0, -1.0]], [0])
    """

    def __init__(self, structure, K, Kc, C, rescaling):
        self.structure = structure
        self.kind, self.K, self.Kc, self.use_trans, self.C = (int(structure.kind), int(K), int(Kc),
                                                              bool(structure.use_trans), C)
        self.rescaling = rescaling
        self.oracle_calls = 0
        self._orc = _example_oracles(structure, self.K, self.Kc, C)

    def vectorized(self, window):
        return self.structure.single_label and window.single_token()

    # ------------------------------------------------------------------ multiclass, vectorized
    def _mc_scores(self, W, window):
        X, y = window.csr(W.E.shape[0])
        S = np.asarray(X @ W.E[:, : self.K])
        return X, y, S

    def _mc_max(self, S, y):
        """(labels y^, H_i, Delta_i(y^)) of the most violating labels (ties -> ground truth)."""
        n = len(y)
        K = self.K
        D = self.C[y][:, :K]                                   # Delta_i(y)
        marg = S - S[np.arange(n), y][:, None]                 # <w, phi(y)> - <w, phi(y_i)>
        V = D + marg if self.rescaling == "margin" else D * (1.0 + marg)
        V[np.arange(n), y] = 0.0
        yh = np.argmax(V, axis=1)
        H = V[np.arange(n), yh]
        viol = H > 0.0
        yh = np.where(viol, yh, y)
        H = np.where(viol, H, 0.0)
        return yh, H, D[np.arange(n), yh]

    def _mc_cut(self, X, y, yh, delta, W, cw=None, N=None):
        """(a, b) of the plane of labelings yh (ground truth where yh == y); ``cw``: the example
        weights (None: all 1), ``N`` their sum."""
        n = len(y)
        c = np.where(yh != y, 1.0 if self.rescaling == "margin" else delta, 0.0)
        if cw is None:
            c = c / max(n, 1)
        else:
            c = c * cw / N
            delta = delta * cw
        import scipy.sparse as sp
        Gm = sp.csr_matrix((np.concatenate([c, -c]), (np.concatenate([np.arange(n), np.arange(n)]),
                                                     np.concatenate([yh, y]))), shape=(n, self.K))
        a = weights_like(W)
        a.E[:, : self.K] = np.asarray((X.T @ Gm).todense())
        b = float(np.sum(np.where(yh != y, delta, 0.0))) / (max(n, 1) if cw is None else N)
        return a, b

    # ------------------------------------------------------------------ generic, per example
    def _labeling_from(self, lab, L, ytrue):
        n = so.labeling_len(self.kind, L, self.Kc)
        out = np.zeros(max(n, 1), dtype=np.int32)
        m = min(len(out), len(lab))
        out[:m] = lab[:m]
        return out

    def _apply_labeling(self, a, ex, lab, coef):
        """a += coef * c(lab) * Phi_x(s(lab) - s(y_i)) for one example; returns Delta(lab)."""
        tp, fi, fv, y, Ki = ex
        L = len(tp) - 1
        ybuf = np.zeros(self.Kc, dtype=np.int32)
        delta = so.labeling_loss(self.kind, lab, y, len(y), self.C, L, self.K, max(Ki, 1), ybuf)
        if delta <= 0.0 and self.rescaling == "slack":
            return 0.0
        st = np.zeros(so.stat_size(self.kind, L, self.Kc))
        so.labeling_stat(self.kind, lab, L, self.Kc, st, 1.0)
        so.truth_stat(self.kind, y, len(y), L, self.Kc, st, -1.0)
        c = 1.0 if self.rescaling == "margin" else delta
        so.stat_apply(self.kind, (a.E, a.T, a.B), (tp, fi, fv), st, L, self.K, self.Kc, coef * c, self.use_trans)
        return delta

    # ------------------------------------------------------------------ API
    def evaluate(self, W, window):
        """One pass of exact oracle calls at w = W: (R(w), a, b, labelings) with R(w) = <a, w> + b.
        ``labelings``: an int array of labels (multiclass) or a list of labeling arrays."""
        n = len(window)
        self.oracle_calls += n
        if n == 0:
            return 0.0, weights_like(W), 0.0, []
        cw = window.example_weights()
        N = window.total()
        if self.vectorized(window):
            X, y, S = self._mc_scores(W, window)
            yh, H, delta = self._mc_max(S, y)
            a, b = self._mc_cut(X, y, yh, delta, W, cw, N)
            R = float(H.sum()) / n if cw is None else float(np.dot(cw, H)) / N
            return R, a, b, yh.astype(np.int32)
        o = self._orc
        a = weights_like(W)
        R = 0.0
        b = 0.0
        labs = []
        for i, ex in enumerate(window):
            ci = 1.0 if cw is None else cw[i]
            tp, fi, fv, y, Ki = ex
            o.prepare(W.E, W.T, W.B, 1.0, tp, fi, fv, y, max(Ki, 1))
            lab, H = o.exact() if self.rescaling == "slack" else o.margin()
            lab = self._labeling_from(lab, len(tp) - 1, y).copy()
            if H <= 0.0:
                lab = self._labeling_from(o.truth_lab, len(tp) - 1, y).copy()
                H = 0.0
            else:
                b += ci * self._apply_labeling(a, ex, lab, 1.0 / n if cw is None else ci / N)
            R += ci * H
            labs.append(lab)
        return R / N, a, b / N, labs

    def risk(self, W, window):
        """R(w) alone (one pass; used by certificates, does not count toward ``oracle_calls``)."""
        calls = self.oracle_calls
        R = self.evaluate(W, window)[0]
        self.oracle_calls = calls
        return R

    def cut_from_labelings(self, W, window, seq0, labs):
        """The plane of stored labelings ``labs`` (made when the window started at ``seq0``) on
        the current window: held examples found in ``labs`` use their labeling, the others their
        ground truth. Valid minorant of the current R (module doc); costs no oracle call."""
        n = len(window)
        if n == 0:
            return weights_like(W), 0.0
        off = window.first_seq - seq0
        if self.vectorized(window):
            X, y = window.csr(W.E.shape[0])
            yh = y.copy()
            stored = np.asarray(labs, dtype=np.int64)
            lo = max(off, 0)
            hi = min(len(stored), off + n)
            if hi > lo:
                yh[lo - off:hi - off] = stored[lo:hi]
            yh = np.where(yh < self.K, yh, y)
            delta = self.C[y, yh]
            return self._mc_cut(X, y, yh, delta, W, window.example_weights(), window.total())
        cw = window.example_weights()
        N = window.total()
        a = weights_like(W)
        b = 0.0
        for k, ex in enumerate(window):
            j = off + k
            if 0 <= j < len(labs):
                ci = 1.0 if cw is None else cw[k]
                lab = self._labeling_from(labs[j], len(ex[0]) - 1, ex[3])
                b += ci * self._apply_labeling(a, ex, lab, 1.0 / n if cw is None else ci / N)
        return a, b / N
