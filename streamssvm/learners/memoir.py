"""MEMOIR (Belyy & Sholokhov, "MEMOIR: Multi-class Extreme Classification with Inexact Margin"): extreme multiclass Crammer-Singer SVM trained by SGD
with an approximate most-violating class from a MIPS oracle.

``variant="l2"`` is Algorithm 1 (Pegasos with projection onto the ball of radius 1/sqrt(lam));
``variant="l1"`` is Algorithm 2 (truncated SGD for lam/2 |W|_1). Batch semantics as in the paper:
the step size eta_t = eta0 / (1 + eta_step * t) decays per batch, the l2 shrinkage applies once
per batch, the examples of a batch update the weights one after the other; ``batch_size=1`` is
the online mode.

Rows: ``W = acc * V`` with a lazy global scale ``acc`` (renormalized into V before it falls
below 1e-20, which keeps the float32 index vectors finite; the index is then rebuilt). V lives
in a row store (:mod:`streamssvm.oracles.rows`): dense (classes x features) or sparse
(memory O(nnz(W)), exact MIPS through an inverted index). ``rows="auto"`` picks dense for a
fixed input width of at most ``DENSE_MAX_DIM`` columns and sparse otherwise. Both give the
same numbers. The MIPS index holds the unscaled rows or their sketches (the argmax does not
depend on the scale).

Losses: by default the Crammer-Singer hinge max_{c != y} (1 + s_c - s_y)_+. With a cost
``Delta(y, c)`` (the structure's ``label_cost``: a matrix indexed by the label values or a
callable on labels, cached per true class by the learner) the most violating class is, under
margin rescaling, argmax_c Delta(y, c) + s_c - s_y and, under slack rescaling,
argmax_c Delta(y, c) (1 + s_c - s_y) (the step is then scaled by Delta(y, c)). With an
approximate index the choice is made among the candidates (index top-k and dirty set, re-scored
exactly): an *inexact* most violating class, whose quality is measured (``diagnostics``).

No dual point is kept: the eta schedule eta0 / (1 + eta_step t), the projection and the l1
truncation do not produce w = A alpha with alpha in the product of simplices, so the
certificate reports the primal on a held window and gap = +inf.

The learner holds the last ``window`` examples it learned: the certificate's primal is
computed on them and :meth:`MEMOIR.refine` makes SGD epochs over them.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .._kernels import mips as MK
from ..certificate import Certificate
from ..oracles.mips import ExactMIPS, HNSWMIPS, LSHMIPS
from ..oracles.rows import DENSE_MAX_DIM, DenseRows, SparseRows, rows_from_state
from .base import Learner, check_choice, check_number

_MIPS = ("exact", "hnsw", "lsh")
RENORM_BELOW = 1e-20


class MEMOIR(Learner):
    """SGD for the Crammer-Singer multiclass SVM with a MIPS oracle (a :class:`Learner`).

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
    k, max_dirty, sketch_dim, ef, M, ef_construction
        MIPS parameters (see :mod:`streamssvm.oracles.mips`).
    check_every
        Every this many steps, also run the exact search and record recall@1 and the margin
        error of the approximate answer (0: never). The checks only read the rows: they change
        neither the weights nor the choices of later steps.
    seed
        Seed of the index's random projections / graph.
    rows
        ``"auto"``, ``"dense"`` or ``"sparse"`` (see the module docstring). ``"auto"`` is
        resolved by the estimator when it binds the learner (it knows the input kind); a
        learner bound directly with ``"auto"`` uses dense rows up to ``DENSE_MAX_DIM`` features.
    rescaling
        ``"margin"`` or ``"slack"``: how the structure's cost enters the hinge.
    window
        Examples held (the last ones learned): the certificate's primal is measured on them and
        :meth:`refine` makes epochs over them (0: none held).
    predict_with
        ``"exact"`` (score every row) or ``"index"`` (ask the MIPS index).

    >>> import numpy as np
    >>> from streamssvm.structures import MultiClass
    >>> lr = MEMOIR(mips="exact", rows="sparse"); lr.bind(MultiClass(), [])
    >>> lr.ensure(4, ["a", "b", "c"])
    >>> one = np.array([0, 2])
    >>> for i in range(30):
    ...     c = i % 3; lr.learn(one, np.array([0, c + 1]), np.array([1.0, 1.0]), np.array([c]))
    >>> ex = np.arange(4); tok = np.arange(0, 8, 2); fidx = np.array([0, 1, 0, 2, 0, 3])
    >>> lr.predict(ex, tok, fidx, np.ones(6), ex, 3).tolist()
    [0, 1, 2]
    """

    structures = ("multiclass",)

    def __init__(self, lam: float = 1e-4, variant: str = "l2", mips: str = "hnsw", batch_size: int = 1,
                 eta0: float = 0.1, eta_step: float = 0.02, k: int = 10, max_dirty: int = 256,
                 sketch_dim: int | None = None, check_every: int = 100, seed: int | None = 0,
                 rows: str = "auto", rescaling: str = "margin", ef: int = 200, M: int = 16,
                 ef_construction: int = 100, window: int = 1000, predict_with: str = "exact"):
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
        self.seed = check_number("seed", seed, low=0, integer=True, allow_none=True)
        self.rows = check_choice("rows", rows, ("auto", "dense", "sparse"))
        self.rescaling = check_choice("rescaling", rescaling, ("margin", "slack"))
        self.ef = check_number("ef", ef, low=1, integer=True)
        self.M = check_number("M", M, low=2, integer=True)
        self.ef_construction = check_number("ef_construction", ef_construction, low=1, integer=True)
        self.window = check_number("window", window, low=0, integer=True)
        self.predict_with = check_choice("predict_with", predict_with, ("exact", "index"))

    @classmethod
    def _unit_test_params(cls):
        yield {"mips": "exact", "lam": 1e-3}

    # ------------------------------------------------------------------ lifecycle
    def bind(self, structure, labels):
        """Take the structure's cost (``structure.label_cost``: None, a square matrix indexed by
        the label values, or a callable ``cost(y_true, y)``); rows and index are allocated by
        the first :meth:`ensure` (they need the number of features)."""
        self.check_structure(structure)
        cost = getattr(structure, "label_cost", None)
        self._C = None
        self._cost_fn = None
        if cost is not None:
            if callable(cost):
                self._cost_fn = cost
            else:
                self._C = np.asarray(cost, dtype=np.float64)
        self._cost_cache = OrderedDict()      # true class -> row of Delta(y, .) (callable costs)
        self._lab = np.zeros(16, dtype=np.int64)   # class id -> matrix index (cost matrix)
        self._labels = []
        self.store = None
        self.oracle = None
        self.dim = 0
        self.kind = None
        self.acc = 1.0
        self.t = 0               # batch index
        self.in_batch = 0
        self.n_learned = 0       # examples learned
        self.n_steps = 0         # SGD steps (learned examples and refine steps)
        self.n_updates = 0
        self.n_renorm = 0
        self._reset_checks()
        self._touched = set()
        self._recent = []        # the window: (idx int64, val float64, class id)
        self._bound = True
        if labels:
            self._set_labels(labels)

    @property
    def has_cost(self):
        return self._C is not None or self._cost_fn is not None

    def _allocate(self, dim, store=None):
        self.dim = int(dim)
        kind = store.kind if store is not None else self.rows
        if kind == "auto":
            kind = "sparse" if self.dim > DENSE_MAX_DIM else "dense"
        self.kind = kind
        if store is None:
            store = SparseRows(dim=max(self.dim, 1)) if kind == "sparse" else DenseRows(max(self.dim, 1))
        self.store = st = store
        if self.mips == "exact":
            self.oracle = ExactMIPS(st)
        elif self.mips == "hnsw":
            self.oracle = HNSWMIPS(st, self.dim, self.sketch_dim, k=self.k, max_dirty=self.max_dirty,
                                   ef=self.ef, M=self.M, ef_construction=self.ef_construction,
                                   seed=self.seed or 0)
        else:
            self.oracle = LSHMIPS(st, self.dim, self.sketch_dim, k=max(self.k, 32), max_dirty=self.max_dirty,
                                  seed=self.seed or 0)
        self._exact = self.oracle if self.mips == "exact" else ExactMIPS(st)

    def _reset_checks(self):
        self.checks = 0
        self.hits = 0
        self.margin_err = []
        self.choice_checks = 0
        self.choice_same = 0
        self.viol_ratio = []

    def _set_labels(self, labels):
        n0 = len(self._labels)
        self._labels = list(labels)
        if self._C is not None and len(labels) > n0:
            K = self._C.shape[0]
            if len(labels) > self._lab.shape[0]:
                lab = np.zeros(max(len(labels), 2 * self._lab.shape[0]), dtype=np.int64)
                lab[:self._lab.shape[0]] = self._lab
                self._lab = lab
            for c in range(n0, len(labels)):
                y = labels[c]
                if not (isinstance(y, (int, np.integer)) and not isinstance(y, bool) and 0 <= y < K):
                    raise ValueError(f"with a cost matrix of size {K} the labels must be integers in "
                                     f"[0, {K}), got {y!r}")
                self._lab[c] = int(y)

    def ensure(self, n_features, labels):
        """Rows for ``n_features`` features and one class per label (the first call allocates
        the row store and the index)."""
        n_classes = len(labels)
        if self.store is None:
            self._allocate(n_features)
        dim = int(n_features)
        if dim > self.dim and self.kind == "dense" and self.mips != "exact" and self.sketch_dim is None:
            raise ValueError(f"the model was built for {self.dim} features; got {dim} "
                             "(use rows='sparse' or sketch_dim for growing sparse features)")
        self._set_labels(labels)
        n0 = self.store.n_rows
        self.store.ensure(n_classes, dim)
        self.dim = max(self.dim, dim)
        if n_classes > n0:
            if not self.has_cost and hasattr(self.oracle, "add_zero_rows"):
                self.oracle.add_zero_rows(n0, n_classes)   # zero rows stay out of the index
            else:
                self.oracle.update(range(n0, n_classes))

    def eta(self):
        return self.eta0 / (1.0 + self.eta_step * self.t)

    @property
    def n_blocks(self):
        """Examples held in the window (the n of the certificate's primal)."""
        return len(self._recent)

    # ------------------------------------------------------------------ costs
    def _costs(self, y, cands, m):
        """Delta(y, cands[q]) for q < m (class ids)."""
        if self._C is not None:
            return self._C[self._lab[y], self._lab[cands[:m]]]
        n = len(self._labels)
        row = self._cost_cache.get(y)
        if row is None or row.shape[0] < n:
            new = np.full(max(n, 16), np.nan)
            if row is not None:
                new[:row.shape[0]] = row
            row = new
            self._cost_cache[y] = row
        self._cost_cache.move_to_end(y)
        if len(self._cost_cache) > 1024:
            self._cost_cache.popitem(last=False)
        c = cands[:m]
        out = row[c]
        miss = np.flatnonzero(np.isnan(out))
        if miss.size:
            labels, ly = self._labels, self._labels[y]
            for q in miss:
                v = float(self._cost_fn(ly, labels[c[q]]))
                if not (v >= 0 and np.isfinite(v)) or (c[q] == y and v != 0):
                    raise ValueError(f"loss({ly!r}, {labels[c[q]]!r}) = {v!r}: it must be finite, >= 0, and 0 "
                                     "for the true class")
                row[c[q]] = v
                out[q] = v
        return out

    # ------------------------------------------------------------------ learning
    def learn(self, tok_ptr, fidx, fval, y, Ki=1):
        """One new example: a single token ``fidx[tok_ptr[0]:tok_ptr[1]]`` and its class
        ``y[0]`` (allocated by :meth:`ensure`); it enters the window."""
        a, b = int(tok_ptr[0]), int(tok_ptr[1])
        idx = np.asarray(fidx[a:b], dtype=np.int64)
        val = np.asarray(fval[a:b], dtype=np.float64)
        c = int(y[0])
        self._step(idx, val, c)
        self.n_learned += 1
        if self.window:
            self._recent.append((idx, val, c))
            if len(self._recent) > self.window:
                del self._recent[: len(self._recent) - self.window]

    def learn_batch(self, ex_tok, tok_ptr, fidx, fval, y_ptr, ys, Ki=None):
        """m new examples in order (the same as m calls of :meth:`learn`; ``batch_size`` sets
        the step-size batches, not this call)."""
        for e in range(len(ex_tok) - 1):
            t = int(ex_tok[e])
            self.learn(tok_ptr[t:t + 2], fidx, fval, ys[int(y_ptr[e]):int(y_ptr[e + 1])])

    def refine(self, passes=1.0, tol=None, progress=None):
        """SGD epochs over the window, in order, continuing the step-size schedule:
        ``round(passes * n_blocks)`` steps (the examples stay in the window once). MEMOIR keeps
        no dual point, so no certificate can reach a gap ``tol``: it is accepted for the
        protocol and ignored. ``progress(fraction, learner)`` is called after every pass."""
        n = len(self._recent)
        if n == 0 or passes <= 0:
            return self
        total = int(round(passes * n))
        for s in range(total):
            idx, val, c = self._recent[s % n]
            self._step(idx, val, c)
            if progress is not None and ((s + 1) % n == 0 or s + 1 == total):
                progress((s + 1) / total, self)
        return self

    def _step(self, idx, val, y):
        eta = self.eta()
        if self.in_batch == 0 and self.variant == "l2":
            self.acc *= (1.0 - self.lam * eta) if self.lam * eta < 1.0 else 1e-12
        st = self.store
        self.n_steps += 1
        check = self.check_every and self.n_steps % self.check_every == 0
        if not self.has_cost:
            r = self.oracle.query(idx, val, y)
            if check:
                self._check(idx, val, y, r)
            step = 0.0
            if r >= 0:
                score_r = st.dot(r, idx, val) * self.acc
                score_y = st.dot(y, idx, val) * self.acc
                if 1.0 + score_r - score_y > 0.0:
                    step = eta
        else:
            r, v, cost = self._rescaled(idx, val, y, check)
            step = 0.0
            if r >= 0 and v > 0.0:
                step = eta * cost if self.rescaling == "slack" else eta
        if step > 0.0:
            a = step / self.acc
            xx = float(val @ val)
            st.axpy(r, idx, val, -a, xx)
            st.axpy(y, idx, val, a, xx)
            self.oracle.row_changed(r, idx, val, -a)
            self.oracle.row_changed(y, idx, val, a)
            self.n_updates += 1
            self._touched.update((r, y))
        self.in_batch += 1
        if self.in_batch >= self.batch_size:
            self._end_batch(eta)

    def _pick(self, cands, scores, m, idx, val, y):
        costs = np.asarray(self._costs(y, cands, m), dtype=np.float64)
        s_y = self.store.dot(y, idx, val)
        r, v, pos = MK.pick_rescaled(cands, scores, m, y, costs, s_y, self.acc, self.rescaling == "slack")
        return int(r), float(v), (float(costs[pos]) if pos >= 0 else 0.0)

    def _rescaled(self, idx, val, y, check):
        cands, scores, m = self.oracle.query_candidates(idx, val, y)
        r, v, cost = self._pick(cands, scores, m, idx, val, y)
        if check:
            if self.oracle is self._exact:
                e, ve = r, v
            else:
                ca, sa, ma = self._exact.query_candidates(idx, val, y)
                e, ve, _ = self._pick(ca, sa, ma, idx, val, y)
            self.choice_checks += 1
            self.choice_same += int(e == r)
            self.checks += 1
            self.hits += int(e == r or v >= ve)
            if ve > 0:
                self.viol_ratio.append(max(v, 0.0) / ve)
                self.margin_err.append(ve - v)   # >= 0: exact violation minus the chosen one
            else:
                self.margin_err.append(0.0)
        return r, v, cost

    def _end_batch(self, eta):
        self.in_batch = 0
        st = self.store
        if self.variant == "l2":
            norm = np.sqrt(max(st.sq, 0.0)) * self.acc
            if norm > 0:
                phi = min(1.0, 1.0 / (np.sqrt(self.lam) * norm))
                self.acc *= phi
        else:
            # truncation of the classes touched in this batch (C / |R_t| scaling, paper eq. 13)
            if self._touched:
                ids = np.fromiter(sorted(self._touched), dtype=np.int64)
                thr = st.n_rows / len(ids) * self.lam * eta / self.acc
                st.truncate(ids, thr)
                self.oracle.update(ids)
        self._touched.clear()
        self.t += 1
        if self.acc < RENORM_BELOW:
            st.scale(self.acc)
            self.acc = 1.0
            self.n_renorm += 1
            self.oracle.update(range(st.n_rows))   # the index is rebuilt on the new scale

    def _check(self, idx, val, y, r):
        e = self._exact.query(idx, val, y) if self.oracle is not self._exact else r
        self.checks += 1
        if e >= 0 and r >= 0:
            se = self.store.dot(e, idx, val) * self.acc
            sr = self.store.dot(r, idx, val) * self.acc
            self.hits += int(e == r or sr >= se)   # a tied class is an exact answer too
            self.margin_err.append(se - sr)  # >= 0: exact runner-up score minus the returned one
        else:
            self.hits += int(e == r)

    # ------------------------------------------------------------------ inference
    def predict(self, ex_tok, tok_ptr, fidx, fval, y_ptr, n_out):
        """The best class of each example (one token each), -1 while no class exists."""
        out = np.full(n_out, -1, dtype=np.int32)
        if self.store is None or self.store.n_rows == 0:
            return out
        o = self._exact if self.predict_with == "exact" else self.oracle
        for e in range(len(ex_tok) - 1):
            t = int(ex_tok[e])
            a, b = int(tok_ptr[t]), int(tok_ptr[t + 1])
            out[int(y_ptr[e])] = o.query(np.asarray(fidx[a:b], dtype=np.int64),
                                         np.asarray(fval[a:b], dtype=np.float64), -1)
        return out

    def certificate(self):
        """The primal objective on the window (exact scores of every class) and
        :meth:`diagnostics` in ``extra``. MEMOIR keeps no dual point (its eta schedule,
        projection and truncation do not give w = A alpha), so the gap reported is +inf (a
        trivially valid bound) and ``exact`` is False. Only reads the rows."""
        import time as _t
        t0 = _t.perf_counter()
        if not self._recent:
            return Certificate(float("inf"), float("nan"), float("-inf"), 0, 0, 0.0, False, self.lam,
                               note="no examples held")
        st = self.store
        n_rows = st.n_rows
        buf = np.zeros(max(n_rows, 1))
        allc = np.arange(n_rows, dtype=np.int64)
        slack = self.rescaling == "slack"
        hinge = 0.0
        for idx, val, c in self._recent:
            st.scores_into(idx, val, buf)
            s = buf[:n_rows] * self.acc
            m = s - s[c]
            if not self.has_cost:
                m = 1.0 + m
            else:
                cost = np.asarray(self._costs(c, allc, n_rows), dtype=np.float64)
                m = cost * (1.0 + m) if slack else cost + m
            m[c] = 0.0
            hinge += max(0.0, float(m.max()))
        n = len(self._recent)
        if self.variant == "l2":
            reg = 0.5 * self.lam * st.sq * self.acc * self.acc
        else:
            reg = 0.5 * self.lam * st.l1() * self.acc
        primal = reg + hinge / n
        return Certificate(float("inf"), primal, float("-inf"), n, n, _t.perf_counter() - t0, False, self.lam,
                           regularizer=reg, hinge=hinge / n, rescaling=self.rescaling,
                           note="primal only: MEMOIR keeps no dual point (gap reported as +inf)",
                           extra=self.diagnostics())

    def diagnostics(self):
        """Quality of the inexact oracle on the sampled steps (every ``check_every``-th):
        ``recall_at_1`` (the index's choice attains the exact maximum; ties count), ``margin_error_*``
        (epsilon: exact best violation, or runner-up score, minus the chosen one; >= 0), for a
        cost loss ``choice_agreement`` and ``violation_ratio_*`` (chosen / exact violation);
        index staleness (dirty-set size, changes since the last re-index, drift bound of the
        dirty rows in W units), row-store size."""
        me = np.array(self.margin_err) if self.margin_err else np.zeros(1)
        vr = np.array(self.viol_ratio) if self.viol_ratio else None
        st = self.store
        if st is None:
            return {"checks": 0, "n_classes": 0}
        stale = self.oracle.staleness()
        for k in ("drift_max", "drift_mean"):
            if k in stale:
                stale[k] *= self.acc
        d = {"recall_at_1": self.hits / self.checks if self.checks else None, "checks": self.checks,
             "margin_error_mean": float(me.mean()), "margin_error_max": float(me.max()),
             "dirty": stale.get("dirty", 0), "updates": self.n_updates, "staleness": stale,
             "mips": self.oracle.stats(), "norm": float(np.sqrt(max(st.sq, 0)) * self.acc),
             "rows": self.kind, "rows_nnz": st.nnz, "rows_nbytes": st.nbytes, "n_classes": st.n_rows}
        if self.has_cost:
            d["choice_agreement"] = self.choice_same / self.choice_checks if self.choice_checks else None
            d["violation_ratio_mean"] = float(vr.mean()) if vr is not None else None
            d["violation_ratio_min"] = float(vr.min()) if vr is not None else None
        return d

    # ------------------------------------------------------------------ persistence
    def state(self):
        """Rows, schedule, counters and the window (the index is rebuilt from the rows)."""
        return {"allocated": self.store is not None, "dim": self.dim, "kind": self.kind,
                "rows": None if self.store is None else self.store.state(),
                "n_rows": 0 if self.store is None else self.store.n_rows, "acc": self.acc,
                "t": self.t, "in_batch": self.in_batch, "n_learned": self.n_learned, "n_steps": self.n_steps,
                "n_updates": self.n_updates, "n_renorm": self.n_renorm, "checks": self.checks, "hits": self.hits,
                "recent": [{"idx": i, "val": v, "c": int(c)} for i, v, c in self._recent]}

    def restore(self, structure, labels, state):
        st = state
        self.bind(structure, labels)
        if st["allocated"]:
            store = rows_from_state(st["rows"])
            store.ensure(int(st["n_rows"]), int(st["dim"]))
            self._allocate(int(st["dim"]), store=store)
        self.acc = float(st["acc"])
        for k in ("t", "in_batch", "n_learned", "n_steps", "n_updates", "n_renorm", "checks", "hits"):
            setattr(self, k, int(st[k]))
        self._recent = [(np.asarray(r["idx"], dtype=np.int64), np.asarray(r["val"], dtype=np.float64),
                         int(r["c"])) for r in st["recent"]]
        n = 0 if self.store is None else self.store.n_rows
        if n:
            if hasattr(self.oracle, "add_zero_rows") and not self.has_cost:
                D = self.store
                nonzero = (np.flatnonzero(D.cnnz[:n]) if D.kind == "sparse"
                           else np.flatnonzero(np.any(D.V[:n] != 0.0, axis=1)))
                self.oracle.add_zero_rows(0, n)      # zero rows stay out of the index
                self.oracle.update(nonzero)
            else:
                self.oracle.update(range(n))
            if hasattr(self.oracle, "reindex"):
                self.oracle.reindex()
        return self


__all__ = ["MEMOIR"]
