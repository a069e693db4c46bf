"""Block-coordinate Frank-Wolfe with positivity constraints on a subset of the weights, on dense
weight vectors: the engine :class:`~streamssvm.estimators.GraphSegmenter` runs for a
:class:`~streamssvm.learners.BCFW` configuration (Osokin et al., "Minding the gaps for block
Frank-Wolfe optimization of structured SVMs", ICML 2016, App. H; Lacoste-Julien et al.,
"Block-coordinate Frank-Wolfe optimization for structural SVMs", ICML 2013).

The problem, with ``P`` the constrained coordinates (``nonneg``)::

    min_w  lam/2 ||w||^2 + (1/n) sum_i H_i(w)   s.t. w_j >= 0 for j in P,
    H_i(w) = max_y Delta_i(y) - <w, psi_i(y)>,  psi_i(y) = phi(x_i, y_i) - phi(x_i, y).

Its dual (App. H's v / w split): with the unconstrained map ``v(alpha) = U / (lam n)``,
``U = sum_i u_i``, ``u_i = sum_y alpha_i(y) psi_i(y)``, and ``Pi`` the projection on the cone
(``max(v_j, 0)`` on ``P``, identity elsewhere),

    min_{w in cone} lam/2 ||w||^2 - lam <v, w>  =  -lam/2 ||Pi(v)||^2     (<v, Pi v> = ||Pi v||^2)

so ``D(alpha) = (1/n) sum_i L_i - lam/2 ||Pi(v)||^2`` with ``L_i = sum_y alpha_i(y) Delta_i(y)``,
and the primal point of ``alpha`` is ``w = Pi(v)``. D is concave with a gradient in ``alpha_i``
of ``(Delta_i(y) - <w, psi_i(y)>) / n``: the oracle is the usual loss-augmented decoding at
``w = Pi(v)``. The duality gap at ``(w, alpha)`` is ``sum_i g_i`` with the usual block gaps
(evaluated at ``w``), since ``lam ||w||^2 = <w, (1/n) sum_i u_i>``: the certificate stays exact.
The step is the exact line search of D along the block's direction (:meth:`GraphBCFW.line_search`:
D is piecewise quadratic in the step, with a breakpoint where a constrained coordinate crosses
0). It goes at least as far up as the clipped step ``min(1, g_i lam n^2 / ||u_i - psi_s||^2)`` of
the unconstrained problem, which already maximizes a quadratic lower bound of D
(``1/2 ||Pi(v)||^2`` has the 1-Lipschitz gradient ``Pi(v)``: the projection is non-expansive),
so BCFW's convergence guarantee carries over.

Averaging keeps the weighted average (weights proportional to the step index) of the dual
point ``(U, sum L)``; its primal point is ``Pi`` of the average (a valid certified pair), not the
average of the ``Pi(v_k)``. The window restarts when a block is evicted. Pairwise and away
steps keep an active set of corners per block (at most ``cache_size``) and use the same exact
line search, bounded by the away corner's weight. The oracle cache keeps up to ``cache_size``
corners per block and takes the best one without an oracle call when its gap passes Osokin et
al.'s hit rule (Algorithm 5); full gap passes then run every ``gap_every`` passes.
"""
from __future__ import annotations

import time

import numpy as np

from ..certificate import Certificate


class GraphBCFW:
    """The running state of BCFW with positivity constraints over dense weight vectors of one
    structure (``structure.dim`` long) whose examples are held whole (graphs).

    ``config`` is the :class:`~streamssvm.learners.BCFW` whose parameters it follows (``lam``,
    ``replay``, ``sampling``, ``gap_every``, ``averaging``, ``window``, ``seed``); ``nonneg`` is
    the index array of the constrained coordinates."""

    def __init__(self, config, structure, nonneg):
        self.check_config(config)
        self.config = config
        self._init_state(structure, nonneg)

    @staticmethod
    def check_config(config):
        """Raise ValueError for the BCFW options this engine does not support."""
        if config.rescaling != "margin":
            raise ValueError("positivity constraints (nonneg=...) support rescaling='margin' only")
        if config.max_bytes is not None or config.eviction != "fifo":
            raise ValueError("GraphSegmenter holds a FIFO window of graphs: max_bytes / reservoir are not "
                             "supported")

    def _init_state(self, structure, nonneg):
        self.structure = structure
        D = structure.dim
        self.nonneg = np.unique(np.asarray(nonneg, dtype=np.int64))
        if self.nonneg.size and (self.nonneg.min() < 0 or self.nonneg.max() >= D):
            raise ValueError(f"nonneg indexes coordinates in [0, {D}), got {self.nonneg.tolist()}")
        # per block, pairwise / away steps: {labeling bytes: [weight, psi, loss]} (None for fw)
        self.active = None if self.config.step == "fw" else []
        # per block, with the oracle cache: {labeling bytes: [0, psi, loss]}, oldest first (None: no cache)
        self.pool = [] if self.config.cache else None
        self.g_full = np.inf     # the gap of the last full pass (the cache's hit rule)
        self.oracle_calls = 0
        self.cache_hits = 0
        self.records = []        # GraphRecord per held block, oldest first
        self.truths = []         # int32 labelings
        self.phi_true = []       # phi(x_i, y_i)
        self.u = np.zeros((0, D))
        self.L = np.zeros(0)
        self.gest = np.zeros(0)
        self.U = np.zeros(D)
        self.Lsum = 0.0
        self.Ubar = np.zeros(D)
        self.Lbar = 0.0
        self.k_avg = -1          # steps in the averaging window (-1: no window)
        self.tick = 0
        self.steps_since_full = 0
        self.evicted = 0
        self.n_learned = 0
        self._seed_base = int(np.random.default_rng(self.config.seed).integers(2**31 - 1))

    # ------------------------------------------------------------------ objective
    @property
    def n(self):
        return len(self.records)

    @property
    def n_blocks(self):
        """Graphs held (the n of the certificate)."""
        return len(self.records)

    def lam(self, n=None):
        n = self.n if n is None else n
        return self.config.effective_lam(max(n, 1))

    def project(self, v):
        """Pi(v): the coordinates in ``nonneg`` clipped at 0."""
        w = v.copy()
        if self.nonneg.size:
            w[self.nonneg] = np.maximum(w[self.nonneg], 0.0)
        return w

    def weights(self, averaged=False):
        """w = Pi(U / (lam n)) (of the averaged dual point with ``averaged``)."""
        n = max(self.n, 1)
        U = self.Ubar if (averaged and self.k_avg > 0) else self.U
        return self.project(U / (self.lam() * n))

    def predict_weights(self):
        return self.weights(averaged=bool(self.config.averaging))

    # ------------------------------------------------------------------ steps
    def _rng(self):
        return np.random.default_rng((self._seed_base + (self.tick + 1) * 2654435761) % 2147483647)

    def _corner(self, i, w):
        """(psi_i(y_hat), Delta_i(y_hat)) of the loss-augmented oracle at ``w``."""
        rec, t = self.records[i], self.truths[i]
        y = self.structure.oracle(rec, w, t)
        return self.phi_true[i] - self.structure.joint_feature(rec, y), self.structure.loss(t, y)

    def step(self, i):
        n = self.n
        lam = self.lam()
        v = self.U / (lam * n)
        w = self.project(v)
        ui, Li = self.u[i], self.L[i]
        hit = self._cache_hit(i, w) if self.pool is not None else None
        if hit is None:
            rec, t = self.records[i], self.truths[i]
            y = self.structure.oracle(rec, w, t)
            psi = self.phi_true[i] - self.structure.joint_feature(rec, y)
            loss = self.structure.loss(t, y)
            self.oracle_calls += 1
            if self.pool is not None:
                self._remember(i, y, psi, loss)
        else:
            y, psi, loss = hit
            self.cache_hits += 1
        G = (loss - w @ psi) - (Li - w @ ui)        # n times the block gap g_i (a lower bound on a hit)
        if self.active is None:
            du, dL, gmax = psi - ui, loss - Li, 1.0
            gamma = self.line_search(v, du / (lam * n), dL / n, lam, gmax)
        else:
            du, dL, gamma = self._active_step(i, w, v, y, psi, loss, G, lam)
        if gamma > 0.0:
            self.u[i] = ui + gamma * du
            self.L[i] = Li + gamma * dL
            self.U += gamma * du
            self.Lsum += gamma * dL
        self.gest[i] = max(G, 0.0) / n
        self.tick += 1
        self.steps_since_full += 1
        if self.config.averaging:
            self.k_avg = max(self.k_avg, 0)
            rho = 2.0 / (self.k_avg + 2.0)
            self.Ubar = (1.0 - rho) * self.Ubar + rho * self.U
            self.Lbar = (1.0 - rho) * self.Lbar + rho * self.Lsum
            self.k_avg += 1

    def _cache_hit(self, i, w):
        """The best cached corner of block ``i`` when it passes Osokin et al.'s hit rule
        (Algorithm 5: its gap >= max(F g_i, nu g / n), g_i the block's last gap estimate, g the
        last full pass's gap), else None (the oracle is called)."""
        pool = self.pool[i]
        if not pool or not np.isfinite(self.gest[i]):
            return None
        base = self.L[i] - w @ self.u[i]
        best, arg = -np.inf, None
        for k, (_, psi, loss) in pool.items():
            g = loss - w @ psi - base
            if g > best:
                best, arg = g, (k, psi, loss)
        n = self.n
        cfg = self.config
        if best / n >= max(cfg.cache_F * self.gest[i], cfg.cache_nu * self.g_full / n) and best > 0.0:
            return np.frombuffer(arg[0], dtype=np.int32), arg[1], arg[2]
        return None

    def _remember(self, i, y, psi, loss):
        pool = self.pool[i]
        key = y.tobytes()
        if key in pool:
            pool[key] = pool.pop(key)          # most recent last
            return
        if len(pool) >= self.config.cache_size:
            del pool[next(iter(pool))]
        pool[key] = [0.0, psi, loss]

    def _active_step(self, i, w, v, y, psi, loss, G, lam):
        """A pairwise or away step (Lacoste-Julien & Jaggi, "On the global linear convergence of
        Frank-Wolfe optimization variants", NIPS 2015; Osokin et al. 2016) on block ``i``'s active
        set, with the exact constrained line search; returns (direction of u_i, of L_i, step)
        and updates the corner weights. A full active set (``cache_size`` corners) makes room
        for a new corner by moving the lightest corner's whole weight onto it (a drop step)."""
        n = self.n
        act = self.active[i]
        key = y.tobytes()
        keys = list(act)
        gains = [act[k][2] - w @ act[k][1] for k in keys]
        ka = keys[int(np.argmin(gains))]                  # the away corner
        alpha_a, psi_a, loss_a = act[ka]
        if key not in act and len(act) >= self.config.cache_size:
            km = min(keys, key=lambda k: act[k][0])
            am, pm, lm = act.pop(km)
            act[key] = [am, psi, loss]
            return psi - pm, loss - lm, am
        away_gain = (self.L[i] - w @ self.u[i]) - (loss_a - w @ psi_a)
        if self.config.step == "pairwise":
            du, dL, gmax = psi - psi_a, loss - loss_a, alpha_a
            gamma = self.line_search(v, du / (lam * n), dL / n, lam, gmax)
            if gamma > 0.0:
                act.setdefault(key, [0.0, psi, loss])[0] += gamma
                act[ka][0] -= gamma
        elif away_gain > G and len(act) > 1 and alpha_a < 1.0 - 1e-9:   # away step
            du, dL, gmax = self.u[i] - psi_a, self.L[i] - loss_a, alpha_a / (1.0 - alpha_a)
            gamma = self.line_search(v, du / (lam * n), dL / n, lam, gmax)
            if gamma > 0.0:
                for k in keys:
                    act[k][0] *= 1.0 + gamma
                act[ka][0] -= gamma
        else:                                             # Frank-Wolfe step
            du, dL = psi - self.u[i], loss - self.L[i]
            gamma = self.line_search(v, du / (lam * n), dL / n, lam, 1.0)
            if gamma > 0.0:
                for k in keys:
                    act[k][0] *= 1.0 - gamma
                act.setdefault(key, [0.0, psi, loss])[0] += gamma
        for k in [k for k in act if act[k][0] <= 1e-14]:
            del act[k]
        if len(act) == 1:
            next(iter(act.values()))[0] = 1.0     # no round-off left on a single corner
        return du, dL, gamma

    def line_search(self, v, delta, a, lam, gmax=1.0):
        """argmax over gamma in [0, gmax] of ``a gamma - lam/2 ||Pi(v + gamma delta)||^2`` (the dual
        along a block's Frank-Wolfe direction): concave and piecewise quadratic, with breakpoints
        where a constrained coordinate of ``v + gamma delta`` crosses 0; its derivative
        ``a - lam <Pi(v + gamma delta), delta>`` is continuous and decreasing, so the root is
        found segment by segment (without constraints: the usual closed form)."""
        P = self.nonneg
        bps = [0.0, gmax]
        if P.size:
            dP = delta[P]
            nz = dP != 0.0
            cross = -v[P][nz] / dP[nz]
            bps += cross[(cross > 0.0) & (cross < gmax)].tolist()
        bps = sorted(set(bps))
        for g0, g1 in zip(bps[:-1], bps[1:]):
            z = v + 0.5 * (g0 + g1) * delta
            act = np.ones(v.shape[0], dtype=bool)
            if P.size:
                act[P] = z[P] > 0.0
            dv = float(v[act] @ delta[act])
            dd = float(delta[act] @ delta[act])
            slope_end = a - lam * (dv + g1 * dd)
            if slope_end >= 0.0:
                continue
            if dd <= 0.0:
                return g0
            return min(max((a / lam - dv) / dd, g0), g1)
        return gmax

    def _avg_restart(self):
        self.k_avg = -1
        self.Ubar = self.U.copy()
        self.Lbar = self.Lsum

    def _pick(self, rng):
        if self.config.sampling == "gap":
            g = self.gest
            if not np.all(np.isfinite(g)):
                return int(np.flatnonzero(~np.isfinite(g))[0])
            tot = float(g.sum())
            if tot > 0.0:
                return int(min(np.searchsorted(np.cumsum(g), rng.random() * tot, side="right"), self.n - 1))
        return int(rng.integers(self.n))

    def _replay(self, steps):
        cfg = self.config
        needs_full = cfg.gap_every is not None and (cfg.sampling == "gap" or cfg.cache)
        for _ in range(int(steps)):
            if needs_full and self.steps_since_full >= cfg.gap_every * self.n:
                self.full_pass()
            self.step(self._pick(self._rng()))

    def learn(self, rec, y):
        """Hold a new graph as a block (its dual point on the ground truth), step on it, then
        ``replay`` steps; the oldest block leaves when the window is full."""
        cfg = self.config
        if cfg.window is not None and self.n >= cfg.window:
            self._evict(0)
        self.records.append(rec)
        self.truths.append(y)
        self.phi_true.append(self.structure.joint_feature(rec, y))
        D = self.structure.dim
        self.u = np.vstack([self.u, np.zeros((1, D))])
        self.L = np.append(self.L, 0.0)
        self.gest = np.append(self.gest, np.inf)
        if self.active is not None:
            self.active.append({y.tobytes(): [1.0, np.zeros(D), 0.0]})
        if self.pool is not None:
            self.pool.append({})
        self.step(self.n - 1)
        self._replay(cfg.replay)
        self.n_learned += 1

    def _evict(self, i):
        self.U -= self.u[i]
        self.Lsum -= self.L[i]
        for lst in (self.records, self.truths, self.phi_true, self.active, self.pool):
            if lst is not None:
                del lst[i]
        self.u = np.delete(self.u, i, axis=0)
        self.L = np.delete(self.L, i)
        self.gest = np.delete(self.gest, i)
        self.evicted += 1
        self._avg_restart()

    def refine(self, passes=1.0, tol=None, progress=None):
        if self.n == 0:
            return
        total = int(round(passes * self.n))
        done = 0
        while done < total:
            s = min(self.n, total - done)
            self._replay(s)
            done += s
            if progress is not None:
                progress(done / max(total, 1), self)
            if tol is not None and self.certificate().gap <= tol:
                return

    # ------------------------------------------------------------------ certificate
    def _hinge_sum(self, w):
        """sum_i H_i(w) (one oracle call per block) and the oracles' n-scaled block gaps
        against the iterate's dual blocks."""
        h = 0.0
        G = np.zeros(self.n)
        for i in range(self.n):
            psi, loss = self._corner(i, w)
            Hi = loss - w @ psi
            h += Hi
            G[i] = Hi - (self.L[i] - w @ self.u[i])
        return h, G

    def full_pass(self):
        """Refresh every block-gap estimate (one oracle call each); returns the iterate's gap."""
        w = self.weights()
        _, G = self._hinge_sum(w)
        self.gest = np.maximum(G, 0.0) / max(self.n, 1)
        self.steps_since_full = 0
        self.g_full = float(np.sum(G)) / max(self.n, 1)
        return self.g_full

    def _dual(self, U, Lsum):
        n = max(self.n, 1)
        lam = self.lam()
        w = self.project(U / (lam * n))
        return Lsum / n - 0.5 * lam * float(w @ w), w

    def primal(self, w):
        n = max(self.n, 1)
        h, _ = self._hinge_sum(w)
        return 0.5 * self.lam() * float(w @ w) + h / n

    def certificate(self):
        """The exact duality gap of the predicting weights (module docstring); observes only."""
        t0 = time.perf_counter()
        lam = self.lam()
        n = self.n
        if n == 0:
            return Certificate.empty(lam)
        D_it, w_it = self._dual(self.U, self.Lsum)
        h_it, G = self._hinge_sum(w_it)
        P_it = 0.5 * lam * float(w_it @ w_it) + h_it / n
        calls = n
        extra = {"iterate_gap": P_it - D_it, "nonneg": int(self.nonneg.size)}
        P, D, w = P_it, D_it, w_it
        P_avg = gap_avg = None
        if self.config.averaging and self.k_avg > 0:
            D_av, w_av = self._dual(self.Ubar, self.Lbar)
            P_avg = self.primal(w_av)
            calls += n
            D = max(D_it, D_av)
            gap_avg = max(P_avg - D, 0.0)
            P, w = P_avg, w_av
        raw = P - D
        return Certificate(gap=max(raw, 0.0), primal=P, dual=D, n_blocks=n, oracle_calls=calls,
                           seconds=time.perf_counter() - t0, lam=lam, regularizer=0.5 * lam * float(w @ w),
                           hinge=P - 0.5 * lam * float(w @ w), dual_loss=self.Lsum / n,
                           block_gap_sum=float(np.sum(G)) / n, primal_avg=P_avg, gap_avg=gap_avg,
                           note="BCFW with positivity constraints (Osokin et al. 2016, App. H): exact min-cut oracle",
                           extra=extra, raw_gap=raw)

    # ------------------------------------------------------------------ state
    def state(self):
        recs = self.records
        nptr = np.cumsum([0] + [r.n for r in recs]).astype(np.int64)
        eptr = np.cumsum([0] + [r.ea.size for r in recs]).astype(np.int64)
        D = self.structure.dim
        cat = (lambda xs, shape: np.concatenate(xs) if xs else np.zeros(shape))
        return {
            "X": cat([r.X for r in recs], (0, self.structure.d)),
            "ea": cat([r.ea for r in recs], (0,)).astype(np.int64),
            "eb": cat([r.eb for r in recs], (0,)).astype(np.int64),
            "F": cat([r.F for r in recs], (0, self.structure.q)),
            "y": cat(self.truths, (0,)).astype(np.int32), "node_ptr": nptr, "edge_ptr": eptr,
            "u": self.u.reshape(-1, D), "L": self.L, "gest": np.where(np.isfinite(self.gest), self.gest, -1.0),
            "U": self.U, "Lsum": self.Lsum, "Ubar": self.Ubar, "Lbar": self.Lbar, "k_avg": self.k_avg,
            "tick": self.tick, "steps_since_full": self.steps_since_full, "evicted": self.evicted,
            "n_learned": self.n_learned, "seed_base": self._seed_base, "nonneg": self.nonneg,
            "active": None if self.active is None else self._corner_sets_state(self.active),
            "pool": None if self.pool is None else self._corner_sets_state(self.pool),
            "g_full": self.g_full if np.isfinite(self.g_full) else -1.0,
            "oracle_calls": self.oracle_calls, "cache_hits": self.cache_hits,
        }

    def _corner_sets_state(self, sets):
        """Active sets or cache pools as arrays: corners per block, their labelings
        (concatenated), weights, psi rows and losses."""
        D = self.structure.dim
        counts = np.array([len(a) for a in sets], dtype=np.int64)
        corners = [c for a in sets for c in a.items()]
        return {"counts": counts,
                "labelings": (np.concatenate([np.frombuffer(k, dtype=np.int32) for k, _ in corners])
                              if corners else np.zeros(0, dtype=np.int32)),
                "alpha": np.array([c[1][0] for c in corners], dtype=np.float64),
                "psi": np.array([c[1][1] for c in corners], dtype=np.float64).reshape(-1, D),
                "loss": np.array([c[1][2] for c in corners], dtype=np.float64)}

    def restore(self, st):
        """Install a :meth:`state` (checked for shapes first; raises ValueError)."""
        from ..structures.graph import GraphRecord
        D = self.structure.dim
        nptr = np.asarray(st["node_ptr"], dtype=np.int64)
        eptr = np.asarray(st["edge_ptr"], dtype=np.int64)
        nb = len(nptr) - 1
        X = np.asarray(st["X"], dtype=np.float64)
        F = np.asarray(st["F"], dtype=np.float64)
        u = np.asarray(st["u"], dtype=np.float64)
        ok = (nb >= 0 and len(eptr) == nb + 1 and X.ndim == 2 and X.shape[1] == self.structure.d
              and F.ndim == 2 and F.shape[1] == self.structure.q and nptr[0] == 0 and eptr[0] == 0
              and np.all(np.diff(nptr) > 0) and np.all(np.diff(eptr) >= 0) and nptr[-1] == X.shape[0]
              and eptr[-1] == F.shape[0] and len(st["y"]) == X.shape[0] and u.shape == (nb, D)
              and len(st["L"]) == nb and len(st["gest"]) == nb and np.shape(st["U"]) == (D,)
              and np.shape(st["Ubar"]) == (D,) and len(st["ea"]) == len(st["eb"]) == F.shape[0])
        if not ok:
            raise ValueError("invalid GraphSegmenter learner state: inconsistent shapes")
        self.records, self.truths, self.phi_true = [], [], []
        for b in range(nb):
            a0, a1, e0, e1 = nptr[b], nptr[b + 1], eptr[b], eptr[b + 1]
            rec = GraphRecord(np.ascontiguousarray(X[a0:a1]), np.ascontiguousarray(st["ea"][e0:e1], dtype=np.int64),
                              np.ascontiguousarray(st["eb"][e0:e1], dtype=np.int64), np.ascontiguousarray(F[e0:e1]))
            rec = self.structure.record(rec)
            y = self.structure.labels(np.asarray(st["y"][a0:a1], dtype=np.int64), rec.n)
            self.records.append(rec)
            self.truths.append(y)
            self.phi_true.append(self.structure.joint_feature(rec, y))
        self.u = u.copy()
        self.L = np.asarray(st["L"], dtype=np.float64).copy()
        g = np.asarray(st["gest"], dtype=np.float64)
        self.gest = np.where(g < 0, np.inf, g)
        self.U = np.asarray(st["U"], dtype=np.float64).copy()
        self.Ubar = np.asarray(st["Ubar"], dtype=np.float64).copy()
        self.Lsum, self.Lbar = float(st["Lsum"]), float(st["Lbar"])
        self.k_avg, self.tick = int(st["k_avg"]), int(st["tick"])
        self.steps_since_full, self.evicted = int(st["steps_since_full"]), int(st["evicted"])
        self.n_learned, self._seed_base = int(st["n_learned"]), int(st["seed_base"])
        self.active = self._corner_sets_from(st.get("active"), nptr, self.active is not None, "active sets", 1)
        self.pool = self._corner_sets_from(st.get("pool"), nptr, self.pool is not None, "cache pools", 0)
        g = float(st.get("g_full", -1.0))
        self.g_full = np.inf if g < 0 else g
        self.oracle_calls, self.cache_hits = int(st.get("oracle_calls", 0)), int(st.get("cache_hits", 0))
        if not np.array_equal(np.asarray(st["nonneg"], dtype=np.int64), self.nonneg):
            raise ValueError("invalid GraphSegmenter learner state: constrained coordinates differ from the model's")
        arrays = (self.u, self.L, self.U, self.Ubar, X, F)
        if not all(np.isfinite(a).all() for a in arrays):
            raise ValueError("invalid GraphSegmenter learner state: non-finite values")

    def _corner_sets_from(self, a, nptr, expected, what, least):
        """The corner sets of :meth:`_corner_sets_state` (None when not ``expected``)."""
        if (a is None) == expected:
            raise ValueError(f"invalid GraphSegmenter learner state: {what} do not match the learner's step / cache")
        if a is None:
            return None
        D = self.structure.dim
        counts = np.asarray(a["counts"], dtype=np.int64)
        sizes = np.diff(nptr)
        labs = np.asarray(a["labelings"], dtype=np.int32)
        alpha, psi, loss = (np.asarray(a[k], dtype=np.float64) for k in ("alpha", "psi", "loss"))
        m = int(counts.sum()) if counts.size else 0
        ok = (counts.shape == (len(sizes),) and np.all(counts >= least) and alpha.shape == (m,) and loss.shape == (m,)
              and psi.shape == (m, D) and labs.shape == (int(np.sum(np.repeat(sizes, counts))),)
              and np.isfinite(alpha).all() and np.isfinite(psi).all() and np.isfinite(loss).all())
        if not ok:
            raise ValueError(f"invalid GraphSegmenter learner state: inconsistent {what}")
        out, c, p = [], 0, 0
        for b, k in enumerate(counts):
            act = {}
            for _ in range(int(k)):
                act[labs[p:p + sizes[b]].tobytes()] = [float(alpha[c]), psi[c].copy(), float(loss[c])]
                p += int(sizes[b])
                c += 1
            out.append(act)
        return out
