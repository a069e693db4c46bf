"""GDMM's engine for pairwise multi-label (:class:`~streamssvm.MultiLabelSSVM` with
``pairwise=True``): the held examples, their factorwise dual (binary unigram and pairwise
interaction factors), the weights, prediction and the certificate (Yen, Huang, Zhong, Zhang,
Ravikumar, Dhillon, "Dual Decomposed Learning with Factorwise Oracles for Structural SVMs of Large
Output Domain", NIPS 2016, section 3.2 (b), Algorithm 3). The public learner is
:class:`~streamssvm.learners.GDMM`; the kernels and the mathematics are in
:mod:`streamssvm._kernels.gdmm_multilabel`.
"""
from __future__ import annotations

import time

import numpy as np

from .. import certificate as cert_mod
from .._kernels import gdmm as G
from .._kernels import gdmm_multilabel as GM
from .._kernels import structops as so
from .._kernels.common import py_entry
from ._gdmm_state import grow_rows
from .base import label_capacity



class MLWeights:
    """The estimator-facing view of the multi-label weights (``W.E``, ``W.T``, ``W.B``,
    ``W.Kc``: what :class:`~streamssvm.MultiLabelSSVM` reads), unscaled (w = s U)."""

    def __init__(self, eng):
        self._eng = eng

    E = property(lambda self: self._eng.E)
    T = property(lambda self: self._eng.T)
    B = property(lambda self: np.zeros((2, self._eng.Kc)))
    Kc = property(lambda self: self._eng.Kc)


_ML_FACTOR_BYTES = 1 << 30


class MLPairGDMM:
    """GDMM's running state for :class:`~streamssvm.MultiLabelSSVM` with ``pairwise=True``
    (Yen et al. 2016, section 3.2 (b), Algorithm 3: block-greedy coordinate descent over
    binary unigram and pairwise interaction factors). Kernels and mathematics:
    :mod:`streamssvm._kernels.gdmm_multilabel`."""

    def __init__(self, cfg, structure, labels, rng=None):
        self.cfg = cfg
        self.structure = structure
        self.K = 0
        self.Kc = 4
        self.d = 0
        self.E = np.zeros((1, self.Kc))
        self.T = np.zeros((self.Kc, self.Kc))
        self.counters = np.zeros(G.ML_N_COUNTERS, dtype=np.int64)
        self.fcap = 8
        self.n = 0          # slots used
        self.nnz = 0
        self._alloc(16, 256)
        self.order = []
        self.tub = np.full(self.Kc, -np.inf)   # per-label bound on U_T (gdmm_multilabel.ml_t_bound), derived from T
        self._visits = 0

    #: inactive pair-factor search: "pruned" (exact, see gdmm_multilabel.ml_greedy_add) or "full" (all K^2 pairs)
    pair_search = "pruned"
    #: the bound ``tub`` is recomputed exactly every this many example visits (it only loosens between)
    TUB_REFRESH = 64

    def refresh_bound(self):
        if self.tub.shape[0] != self.Kc:
            self.tub = np.full(self.Kc, -np.inf)
        GM.ml_t_bound(self.T, self.K, self.tub)
        self._visits = 0

    def _restore_bound(self, tub, visits):
        """The saved bound ``tub`` and its visit count, so the pruned pair search scans what it
        would have scanned without the save (its selection is exact either way). A saved bound
        below the exact one (a crafted file) would prune factors the search must see: then the
        exact bound just computed stays."""
        tub = np.asarray(tub)
        if (tub.shape != self.tub.shape or tub.dtype.kind != "f" or np.isnan(tub).any() or np.isposinf(tub).any()
                or not np.all(tub >= self.tub)):
            return
        if not isinstance(visits, (int, np.integer)) or not 0 <= int(visits) < 1 << 62:
            return
        self.tub = tub.astype(np.float64)
        self._visits = int(visits)

    # -------------------------------------------------------------- storage
    def _alloc(self, n_ex, nnz):
        Kc, fc = self.Kc, self.fcap
        self.x_ptr = np.zeros(n_ex + 1, dtype=np.int64)
        self.fidx = np.zeros(nnz, dtype=np.int64)
        self.fval = np.zeros(nnz)
        self.xsq = np.zeros(n_ex)
        self.Ki = np.ones(n_ex)
        self.cw = np.ones(n_ex)     # example weights c_i
        self.Y = np.zeros((n_ex, Kc))
        self.alive = np.zeros(n_ex, dtype=np.bool_)
        self.u = np.zeros((n_ex, Kc))
        self.Dv = np.zeros((n_ex, Kc))
        self.fk = np.zeros((n_ex, fc), dtype=np.int32)
        self.fl = np.zeros((n_ex, fc), dtype=np.int32)
        self.fz = np.zeros((n_ex, fc, 3))
        self.flam = np.zeros((n_ex, fc, 2))
        self.fcnt = np.zeros(n_ex, dtype=np.int32)
        self.nact = np.zeros((n_ex, Kc))

    _ROWS = ("xsq", "Ki", "Y", "alive", "u", "Dv", "fk", "fl", "fz", "flam", "fcnt", "nact", "cw")
    #: rows derived from the others (not saved): nact[i, k] = active factors of example i containing k
    _DERIVED = ("nact", "cw")   # cw: saved as "ex_weight" only when a weight is not 1
    #: how inactive pair factors are defined in a saved state: "product" = implicitly (u_k, u_l, u_k u_l)
    #: (current); states without the key put them at the ground truth (converted on restore)
    INACTIVE = "product"

    def _reserve(self, n_ex, nnz):
        g = grow_rows
        self.x_ptr = g(self.x_ptr, n_ex + 1)
        self.fidx = g(self.fidx, nnz)
        self.fval = g(self.fval, nnz)
        for k in self._ROWS:
            setattr(self, k, g(getattr(self, k), n_ex))

    def _widen(self, Kc=None, fcap=None):
        """Grow the label capacity (columns of the per-example arrays) or the factor capacity."""
        def w(x, axis_len):
            shape = (x.shape[0], axis_len) + x.shape[2:]
            y = np.zeros(shape, dtype=x.dtype)
            y[:, :x.shape[1]] = x
            return y
        if Kc is not None and Kc > self.u.shape[1]:
            self.Y, self.u, self.Dv, self.nact = w(self.Y, Kc), w(self.u, Kc), w(self.Dv, Kc), w(self.nact, Kc)
        if fcap is not None and fcap > self.fk.shape[1]:
            self.fk, self.fl, self.fz, self.flam = (w(self.fk, fcap), w(self.fl, fcap), w(self.fz, fcap),
                                                    w(self.flam, fcap))
            self.fcap = fcap

    def ensure(self, n_features, labels):
        K = len(labels)
        Kc = label_capacity(K, self.Kc)
        D = max(int(n_features), 1)
        if Kc > self.Kc or D > self.E.shape[0]:
            E = np.zeros((D if D <= self.E.shape[0] else max(D, int(self.E.shape[0] * 1.5) + 1), Kc))
            E[:self.E.shape[0], :self.Kc] = self.E
            self.E = E
        if Kc > self.Kc:
            T = np.zeros((Kc, Kc))
            T[:self.Kc, :self.Kc] = self.T
            self.T = T
            self._widen(Kc=Kc)
            self.Kc = Kc
        if K != self.K:
            self.structure.cost_matrix(Kc, labels)   # refuses label counts the structure cannot decode
            self.K = K
            self.refresh_bound()
        self.d = max(self.d, int(n_features))

    @property
    def n_blocks(self):
        return int(np.count_nonzero(self.alive[:self.n]))

    _weighted = False   # some example held with a weight other than 1 (since the last reset)

    def weight_sum(self):
        """N = sum of the held examples' weights c_i (their count when unweighted)."""
        if not self._weighted:
            return self.n_blocks
        return float(self.cw[self.alive_slots()].sum())

    def s(self):
        N = self.weight_sum()
        return 1.0 / (self.cfg.lam * (N if N > 0 else 1))

    def data(self):
        return G.pack(G.MLData(self.x_ptr, self.fidx, self.fval, self.xsq, self.Ki, self.Y, self.alive, self.cw))

    def dual(self):
        return G.pack(G.MLDual(self.u, self.Dv, self.fk, self.fl, self.fz, self.flam, self.fcnt, self.nact))

    # -------------------------------------------------------------- learning
    def add(self, tok_ptr, fidx, fval, y, Ki, weight=1.0):
        if len(tok_ptr) != 2:
            raise ValueError("a multi-label example is one feature vector (one token)")
        cfg = self.cfg
        if cfg.window is not None and self.n_blocks >= cfg.window:
            i = self.order.pop(0)
            GM.ml_remove_example(i, self.data(), self.dual(), self.E, self.T, self.K, self.tub)
            if self.n > 1024 and self.n_blocks < self.n // 2:
                self._compact()
        a, b = int(tok_ptr[0]), int(tok_ptr[1])
        nz = b - a
        i, z0 = self.n, self.nnz
        self._reserve(i + 1, z0 + nz)
        self.fidx[z0:z0 + nz] = fidx[a:b]
        self.fval[z0:z0 + nz] = fval[a:b]
        self.x_ptr[i] = z0
        self.x_ptr[i + 1] = z0 + nz
        fv = np.asarray(fval[a:b], dtype=np.float64)
        self.xsq[i] = float(fv @ fv)
        self.Ki[i] = float(max(Ki, 1))
        self.cw[i] = weight
        if weight != 1.0:
            self._weighted = True
        self.Y[i] = 0.0
        self.Y[i, np.asarray(y, dtype=np.int64)] = 1.0
        self.u[i] = self.Y[i]      # ground truth: feasible, adds nothing to the weights
        self.Dv[i] = 0.0
        self.nact[i] = 0.0
        self.fcnt[i] = 0
        self.alive[i] = True
        self.n, self.nnz = i + 1, z0 + nz
        self.order.append(i)
        return i

    def _compact(self):
        alive = np.flatnonzero(self.alive[:self.n])
        remap = {int(e): j for j, e in enumerate(alive)}
        old = {k: getattr(self, k) for k in self._ROWS}
        xp, fi, fv = self.x_ptr, self.fidx, self.fval
        zs = np.concatenate([np.arange(xp[e], xp[e + 1]) for e in alive]) if len(alive) else np.zeros(0, np.int64)
        lens = xp[alive + 1] - xp[alive]
        m = len(alive)
        self._alloc(max(16, 2 * m), max(256, 2 * len(zs)))
        self.x_ptr[1:m + 1] = np.cumsum(lens)
        self.fidx[:len(zs)] = fi[zs]
        self.fval[:len(zs)] = fv[zs]
        for k in self._ROWS:
            getattr(self, k)[:m] = old[k][alive]
        self.n, self.nnz = m, len(zs)
        self.order = [remap[e] for e in self.order]

    def sweep(self, order, mult):
        if len(order) == 0 or self.K == 0:
            return 0.0
        cfg = self.cfg
        full0 = self.counters[G.ML_C_FULL]
        if self._visits >= self.TUB_REFRESH:
            self.refresh_bound()
        self._visits += len(order)
        step = G.ml_step(K=self.K, s=self.s(), rho=float(cfg.rho) * self.s(), eta=cfg.eta, grow=cfg.grow,
                         tol=cfg.add_tol, inner=cfg.inner, mult=mult, full=self.pair_search == "full")
        res = GM.ml_run_pass(np.asarray(order, dtype=np.int64), self.data(), self.dual(), self.E, self.T, step,
                             self.counters, self.tub)
        maxf = self.K * (self.K - 1) // 2
        new = min(maxf, 2 * self.fcap)
        # factor slots cost 48 bytes per held row; past _ML_FACTOR_BYTES the greedy step keeps
        # refusing additions (counted in counters[ML_C_FULL]) instead of growing
        if self.counters[G.ML_C_FULL] > full0 and self.fcap < maxf and self.fk.shape[0] * new * 48 <= _ML_FACTOR_BYTES:
            self._widen(fcap=new)
        return res

    def alive_slots(self):
        return np.flatnonzero(self.alive[:self.n])

    def learned(self, e):
        """After the learner's sweeps for the new example e: nothing to do."""

    def weights(self):
        """The estimator-facing view of the weights."""
        return MLWeights(self)

    # -------------------------------------------------------------- prediction
    def predict(self, ex_tok, tok_ptr, fidx, fval, y_ptr, n_out):
        out = np.zeros(n_out, dtype=np.int32)
        K = self.K
        if K == 0:
            return out
        s = self.s()
        lp = self.structure.uses_lp(K)
        S = np.zeros((1, self.Kc))
        ybuf = np.zeros(K, dtype=np.int32)
        lab = np.zeros(K, dtype=np.int32)
        best_m = np.zeros(K + 1)
        for e in range(len(ex_tok) - 1):
            if ex_tok[e + 1] == ex_tok[e]:
                continue
            t = int(ex_tok[e])
            a, b = int(tok_ptr[t]), int(tok_ptr[t + 1])
            sc = s * (np.asarray(fval[a:b], dtype=np.float64) @ self.E[np.asarray(fidx[a:b], dtype=np.int64), :K]) \
                if b > a else np.zeros(K)
            if lp:
                lab[:] = self._predict_reduced(sc, s)
            else:
                S[0, :K] = sc
                py_entry(so._mrf_enum)(S, self.T, s, K, ybuf, 0, 0.0, 1, 0.0, best_m, lab)
            out[y_ptr[e]:y_ptr[e] + K] = lab
        return out

    def _predict_reduced(self, sc, s):
        """MAP labeling above 16 labels. Labels that are off in some optimum are removed first:
        if theta_k + sum_{l in R} max(0, P_kl) <= 0 over the labels R still undecided, then for
        the LP relaxation (and the integer problem) theta_k mu_k + sum_l P_kl mu_kl <=
        mu_k (theta_k + sum max(0, P_kl)) <= 0 since mu_kl <= mu_k, so setting mu_k = 0 (and its
        pair marginals to 0, still in the local polytope) loses nothing; repeated until no label
        is removed. The rest is solved exactly by enumeration when at most 16 labels remain,
        else by the LP relaxation (:mod:`streamssvm.oracles.lp`) on the remaining labels."""
        K = self.K
        P = s * np.triu(self.T[:K, :K], 1)
        Pp = np.maximum(P + P.T, 0.0)
        live = np.ones(K, dtype=bool)
        while True:
            ub = sc + Pp[:, live].sum(axis=1)
            drop = live & (ub <= 0.0)
            if not drop.any():
                break
            live &= ~drop
        R = np.flatnonzero(live)
        out = np.zeros(K, dtype=np.int32)
        m = len(R)
        if m == 0:
            return out
        if m <= so.MLPAIR_MAX_LABELS:
            S = np.zeros((1, m))
            S[0] = sc[R]
            lab = np.zeros(m, dtype=np.int32)
            py_entry(so._mrf_enum)(S, np.ascontiguousarray(self.T[np.ix_(R, R)]), s, m, np.zeros(m, dtype=np.int32), 0, 0.0,
                         1, 0.0, np.zeros(m + 1), lab)
        else:
            from ..oracles.lp import PairwiseMRFLP
            lab = PairwiseMRFLP(sc[R], P[np.ix_(R, R)], np.zeros(m, np.int32), 1).oracle(0.0).labeling
        out[R] = lab
        return out

    # -------------------------------------------------------------- certificate
    def certificate(self, passes_done):
        t0 = time.perf_counter()
        cfg = self.cfg
        n = self.n_blocks
        lam = float(cfg.lam)
        if n == 0 or self.K == 0:
            return cert_mod.Certificate.empty(lam, n, seconds=time.perf_counter() - t0)
        K, s = self.K, self.s()
        N = self.weight_sum()   # sum of the weights: P(w) = lam/2 ||w||^2 + (1/N) sum_i c_i H_i(w)
        exact = K <= so.MLPAIR_MAX_LABELS
        hinge, dloss, sqp, sql, resid = GM.ml_certificate_sums(self.data(), self.dual(), self.E, self.T, K, s, exact)
        sqE = float(np.vdot(self.E[:, :K], self.E[:, :K]))
        sqT = float(np.sum(np.triu(self.T[:K, :K], 1) ** 2))
        reg = 0.5 * lam * s * s * (sqE + sqT)
        d_prod = dloss / N - 0.5 * lam * s * s * (sqE + sqp)
        d_local = dloss / N - 0.5 * lam * s * s * (sqE + sql)
        extra = {"consistency_residual": float(resid), "dual_local_polytope": d_local,
                 "dual_distribution": d_prod, "passes": passes_done,
                 "active_factors": int(self.fcnt[self.alive_slots()].sum())}
        if not exact:
            return cert_mod.Certificate(
                gap=float("inf"), primal=float("nan"), dual=d_prod, n_blocks=n, oracle_calls=0,
                seconds=time.perf_counter() - t0, exact=False, lam=lam, regularizer=reg, dual_loss=dloss / N,
                note=(f"{K} labels: the exact primal needs MAP by enumeration (up to {so.MLPAIR_MAX_LABELS} labels) "
                      "and is not computed; dual = D at a distribution repair (a feasible dual point, a lower bound "
                      "on min P); extra['dual_local_polytope'] bounds only the LP-relaxed objective"),
                extra=extra)
        primal = reg + hinge / N
        raw = primal - d_prod
        return cert_mod.Certificate(
            gap=max(raw, 0.0), primal=primal, dual=d_prod, n_blocks=n, oracle_calls=n,
            seconds=time.perf_counter() - t0, exact=True, lam=lam, regularizer=reg, hinge=hinge / N,
            dual_loss=dloss / N, block_gap_sum=raw, raw_gap=raw,
            note=("primal P(w) by exact enumeration of the 2^K labelings; dual at a distribution repair "
                  "(per example a distribution over labelings with the unigram marginals u: a feasible "
                  "dual point of the exact problem), so gap = P(w) - D bounds P(w) - min P. The dual "
                  "GDMM optimizes is the LP relaxation's (local polytope), extra['dual_local_polytope'], "
                  "which bounds only the relaxed objective"),
            extra=extra)

    # -------------------------------------------------------------- state
    def state(self, learner_state):
        """The saved state, with the learner's own entries ``learner_state`` (``n_learned``,
        ``passes_done``, ``rng``)."""
        n, z = self.n, self.nnz
        st = {"K": self.K, "Kc": self.Kc, "d": self.d, "fcap": self.fcap, "E": self.E.copy(), "T": self.T.copy(),
              "counters": self.counters.copy(), "x_ptr": self.x_ptr[:n + 1].copy(), "fidx": self.fidx[:z].copy(),
              "fval": self.fval[:z].copy(), "order": np.asarray(self.order, dtype=np.int64),
              "inactive_factors": self.INACTIVE, "tub": self.tub.copy(), "tub_visits": self._visits}
        for k in self._ROWS:
            if k not in self._DERIVED:
                st[k] = getattr(self, k)[:n].copy()
        if self._weighted and (self.cw[:n] != 1.0).any():
            st["ex_weight"] = self.cw[:n].copy()   # only when a weight is not 1: unweighted files unchanged
        st.update({"ml": 1, **learner_state})
        return st

    def restore(self, st):
        if "ml" not in st:
            raise ValueError("invalid GDMM state: a chain model's state for a multi-label structure")
        self.K, self.Kc, self.d, self.fcap = int(st["K"]), int(st["Kc"]), int(st["d"]), int(st["fcap"])
        self.E = np.array(st["E"], dtype=np.float64)
        self.T = np.array(st["T"], dtype=np.float64)
        if self.T.shape != (self.Kc, self.Kc) or self.E.shape[1] != self.Kc or self.K > self.Kc:
            raise ValueError("invalid GDMM multi-label state: weight shapes do not match the label capacity")
        self.counters = np.array(st["counters"], dtype=np.int64)
        self.x_ptr = np.array(st["x_ptr"], dtype=np.int64)
        self.fidx = np.array(st["fidx"], dtype=np.int64)
        self.fval = np.array(st["fval"], dtype=np.float64)
        types = {"xsq": np.float64, "Ki": np.float64, "Y": np.float64, "alive": np.bool_, "u": np.float64,
                 "Dv": np.float64, "fk": np.int32, "fl": np.int32, "fz": np.float64, "flam": np.float64,
                 "fcnt": np.int32}
        for k in self._ROWS:
            if k not in self._DERIVED:
                setattr(self, k, np.array(st[k], dtype=types[k]))
        self.n = len(self.alive)
        self.nnz = len(self.fidx)
        self.cw = np.array(st.get("ex_weight", np.ones(self.n)), dtype=np.float64)
        self._weighted = bool((self.cw != 1.0).any())
        if (self.fidx.size and (self.fidx.min() < 0 or self.fidx.max() >= self.E.shape[0])) \
                or self.fk.shape[1] != self.fcap or self.u.shape[1] != self.Kc:
            raise ValueError("invalid GDMM multi-label state: feature ids or capacities out of range")
        for i, c in enumerate(self.fcnt.tolist()):
            fk, fl = self.fk[i, :max(c, 0)], self.fl[i, :max(c, 0)]
            if c < 0 or c > self.fcap or np.any(fk < 0) or np.any(fk >= fl) or np.any(fl >= self.K):
                raise ValueError(f"invalid GDMM multi-label state: pair factors of example slot {i} out of range")
        listed = [int(e) for e in st["order"]]
        # every held example is in the FIFO order (its window pops it); one missing from a crafted
        # file is older than the listed ones, as the chain engine's restore takes it
        seen = set(listed)
        self.order = [int(e) for e in np.flatnonzero(self.alive[:self.n]) if int(e) not in seen] + listed
        self.nact = np.zeros((self.n, self.Kc))
        for i in range(self.n):
            c = int(self.fcnt[i])
            np.add.at(self.nact[i], self.fk[i, :c], 1.0)
            np.add.at(self.nact[i], self.fl[i, :c], 1.0)
        self._reserve(self.n + 1, self.nnz + 1)
        self.refresh_bound()
        form = st.get("inactive_factors", "truth")
        if form == self.INACTIVE and "tub" in st:
            self._restore_bound(st["tub"], st.get("tub_visits", 0))
        if form == "truth":
            # saved before inactive factors followed their unigrams: they sat at the ground truth
            # (pair statistic ybar_k ybar_l, contributing nothing to U_T); add their implicit
            # statistic ybar_k ybar_l - u_k u_l now
            Dt, Q = self.data(), self.dual()
            for i in self.alive_slots():
                GM.ml_implicit_t_add(int(i), Dt, Q, self.T, self.K, 1.0, self.tub)
        elif form != self.INACTIVE:
            raise ValueError(f"invalid GDMM multi-label state: unknown inactive-factor form {form!r}")
