"""MEMOIR (paper 004, Belyy & Sholokhov): extreme multiclass Crammer-Singer SVM trained by SGD
with an approximate most-violating class from a MIPS oracle.

``variant="l2"`` is Algorithm 1 (Pegasos with projection onto the ball of radius 1/sqrt(lam));
``variant="l1"`` is Algorithm 2 (truncated SGD for lam/2 |W|_1). Batch semantics as in the paper:
the step size eta_t = eta0 / (1 + eta_step * t) decays per batch, the l2 shrinkage applies once
per batch, the examples of a batch update the weights one after the other; ``batch_size=1`` is
the online mode.

Rows are dense here (``W = acc * V`` with a lazy global scale, renormalized before it
underflows); the MIPS index holds the unscaled rows (the argmax does not depend on the scale).
"""
from __future__ import annotations

import numpy as np

from ..oracles.mips import ExactMIPS, HNSWMIPS, LSHMIPS
from .base import Learner, check_choice, check_number

_MIPS = ("exact", "hnsw", "lsh")


class MEMOIR(Learner):
    """SGD for the Crammer-Singer multiclass SVM with a MIPS oracle.

    Parameters
    ----------
    lam
        Regularization (the paper uses 1 for l2, 1e-6 for l1).
    variant
        ``"l2"`` (Pegasos + projection) or ``"l1"`` (truncated SGD).
    mips
        ``"exact"``, ``"hnsw"`` or ``"lsh"``.
    batch_size
        Examples per step-size / shrinkage step (1: online).
    eta0, eta_step
        eta_t = eta0 / (1 + eta_step * t), t the batch index (paper: 0.1, 0.02).
    k, max_dirty, sketch_dim
        MIPS parameters (see :mod:`streamssvm.oracles.mips`).
    check_every
        Every this many queries, also run the exact search and record recall@1 and the margin
        error of the approximate answer (0: never).
    """

    def __init__(self, lam: float = 1e-4, variant: str = "l2", mips: str = "hnsw", batch_size: int = 1,
                 eta0: float = 0.1, eta_step: float = 0.02, k: int = 10, max_dirty: int = 256,
                 sketch_dim: int | None = None, check_every: int = 100, seed: int | None = 0):
        self.lam = check_number("lam", lam, low=0.0, low_open=True)
        self.variant = check_choice("variant", variant, ("l2", "l1"))
        self.mips = check_choice("mips", mips, _MIPS)
        self.batch_size = check_number("batch_size", batch_size, low=1, integer=True)
        self.eta0 = check_number("eta0", eta0, low=0.0, low_open=True)
        self.eta_step = check_number("eta_step", eta_step, low=0.0)
        self.k = check_number("k", k, low=1, integer=True)
        self.max_dirty = check_number("max_dirty", max_dirty, low=1, integer=True)
        self.sketch_dim = check_number("sketch_dim", sketch_dim, low=1, integer=True, allow_none=True)
        self.check_every = check_number("check_every", check_every, low=0, integer=True)
        self.seed = seed
        self._bound = False

    # ------------------------------------------------------------------ state
    def bind(self, dim):
        self.dim = int(dim)
        self.V = np.zeros((16, max(self.dim, 1)))
        self.n_rows = 0
        self.acc = 1.0
        self.sq = 0.0            # ||V||^2 (unscaled)
        self.t = 0               # batch index
        self.in_batch = 0
        self.n_learned = 0
        self.n_updates = 0
        self.checks = 0
        self.hits = 0
        self.margin_err = []
        self._touched = set()
        rows = self._rows
        if self.mips == "exact":
            self.oracle = ExactMIPS(rows)
        elif self.mips == "hnsw":
            self.oracle = HNSWMIPS(rows, self.dim, self.sketch_dim, k=self.k, max_dirty=self.max_dirty,
                                   seed=self.seed or 0)
        else:
            self.oracle = LSHMIPS(rows, self.dim, self.sketch_dim, k=max(self.k, 32), max_dirty=self.max_dirty,
                                  seed=self.seed or 0)
        self._exact = ExactMIPS(rows)
        self._bound = True

    def _rows(self):
        return self.V, self.n_rows

    def ensure(self, n_classes, dim):
        if dim > self.V.shape[1]:
            if self.mips != "exact" and self.sketch_dim is None:
                raise ValueError(f"the model was built for {self.dim} features; got {dim} "
                                 "(use sketch_dim for growing sparse features)")
            V = np.zeros((self.V.shape[0], max(dim, int(self.V.shape[1] * 1.5))))
            V[:, :self.V.shape[1]] = self.V
            self.V = V
            self.dim = dim
        if n_classes > self.V.shape[0]:
            V = np.zeros((max(n_classes, 2 * self.V.shape[0]), self.V.shape[1]))
            V[:self.V.shape[0]] = self.V
            self.V = V
        if n_classes > self.n_rows:
            new = list(range(self.n_rows, n_classes))
            self.n_rows = n_classes
            self.oracle.update(new)

    def eta(self):
        return self.eta0 / (1.0 + self.eta_step * self.t)

    # ------------------------------------------------------------------ learning
    def learn(self, idx, val, y):
        """One example (x sparse: idx, val; class y already allocated by ``ensure``)."""
        eta = self.eta()
        if self.in_batch == 0 and self.variant == "l2":
            self.acc *= (1.0 - self.lam * eta) if self.lam * eta < 1.0 else 1e-12
        r = self.oracle.query(idx, val, y)
        self.n_learned += 1
        if self.check_every and self.n_learned % self.check_every == 0:
            self._check(idx, val, y, r)
        if r >= 0:
            V = self.V
            score_r = float(V[r, idx] @ val) * self.acc
            score_y = float(V[y, idx] @ val) * self.acc
            if 1.0 + score_r - score_y > 0.0:
                a = eta / self.acc
                xx = float(val @ val)
                self.sq += (-2 * a * float(V[r, idx] @ val) + a * a * xx
                            + 2 * a * float(V[y, idx] @ val) + a * a * xx)
                V[r, idx] -= a * val
                V[y, idx] += a * val
                self.oracle.row_changed(r, idx, val, -a)
                self.oracle.row_changed(y, idx, val, a)
                self.n_updates += 1
                self._touched.update((r, y))
        self.in_batch += 1
        if self.in_batch >= self.batch_size:
            self._end_batch(eta)

    def _end_batch(self, eta):
        self.in_batch = 0
        if self.variant == "l2":
            norm = np.sqrt(max(self.sq, 0.0)) * self.acc
            if norm > 0:
                phi = min(1.0, 1.0 / (np.sqrt(self.lam) * norm))
                self.acc *= phi
        else:
            # truncation of the classes touched in this batch (C / |R_t| scaling, paper eq. 13)
            if self._touched:
                ids = np.fromiter(self._touched, dtype=np.int64)
                thr = self.n_rows / len(ids) * self.lam * eta
                rows = self.V[ids]
                rows = np.sign(rows) * np.maximum(np.abs(rows) - thr, 0.0)
                self.V[ids] = rows
                self.oracle.update(ids)
                self.sq = float(np.sum(self.V[:self.n_rows] ** 2))
        self._touched.clear()
        self.t += 1
        if self.acc < 1e-100:
            self.V *= self.acc
            self.sq *= self.acc * self.acc
            self.acc = 1.0
            self.oracle.update(range(self.n_rows))

    def _check(self, idx, val, y, r):
        e = self._exact.query(idx, val, y)
        self.checks += 1
        self.hits += int(e == r)
        if e >= 0 and r >= 0:
            se = float(self.V[e, idx] @ val) * self.acc
            sr = float(self.V[r, idx] @ val) * self.acc
            self.margin_err.append(se - sr)  # >= 0: how far the returned class is from the runner-up

    def predict(self, idx, val, exact=True):
        if self.n_rows == 0:
            return -1
        o = self._exact if exact else self.oracle
        return o.query(idx, val, -1)

    def state(self):
        return memoir_state(self)

    def restore(self, st):
        memoir_restore(self, st)

    def diagnostics(self):
        me = np.array(self.margin_err) if self.margin_err else np.zeros(1)
        return {"recall_at_1": self.hits / self.checks if self.checks else None, "checks": self.checks,
                "margin_error_mean": float(me.mean()), "margin_error_max": float(me.max()),
                "dirty": len(getattr(self.oracle, "dirty", ())), "updates": self.n_updates,
                "mips": self.oracle.stats(), "norm": float(np.sqrt(max(self.sq, 0)) * self.acc)}


def memoir_state(lr):
    return {"dim": lr.dim, "V": lr.V[:lr.n_rows].copy(), "n_rows": lr.n_rows, "acc": lr.acc, "sq": lr.sq,
            "t": lr.t, "in_batch": lr.in_batch, "n_learned": lr.n_learned, "n_updates": lr.n_updates,
            "checks": lr.checks, "hits": lr.hits}


def memoir_restore(lr, st):
    lr.bind(int(st["dim"]))
    n = int(st["n_rows"])
    V = np.asarray(st["V"], dtype=np.float64)
    lr.V = np.zeros((max(16, n), max(V.shape[1] if V.size else lr.dim, 1)))
    lr.V[:n, :V.shape[1]] = V
    lr.n_rows = n
    for k in ("acc", "sq"):
        setattr(lr, k, float(st[k]))
    for k in ("t", "in_batch", "n_learned", "n_updates", "checks", "hits"):
        setattr(lr, k, int(st[k]))
    if n:
        lr.oracle.update(range(n))
        if hasattr(lr.oracle, "reindex"):
            lr.oracle.reindex()
