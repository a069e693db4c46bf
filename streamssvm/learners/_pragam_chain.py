"""Structured Pragam's problem on chains (Saha, Zhang & Vishwanathan, "Lower Bounds for BMRM and
Faster Rates for Training SVMs", App. E.1 / E.3.1): the M3N dual of the held window over clique
marginals, and the maps Algorithm 1 needs. The public learner is :class:`~streamssvm.learners.Pragam`
(``structure="chain"``); the kernels are in :mod:`streamssvm._kernels.pragam_chain`.

With Psi_i(y) the chain's joint feature map (emissions x_t (x) e_{y_t}, transitions, start / end
biases) and alpha in Q (per example, consistent clique marginals of total mass 1/n; module doc of
the kernels):

    W(alpha) = (1/lam) (sum_i Psi_i(y_i) / n - A' alpha)        (A' alpha: the expected features)
    D(alpha) = <alpha, Lc> - (lam/2) ||W(alpha)||^2,             grad D = Lc + A W(alpha)
    J(W)     = (lam/2) ||W||^2 + (1/n) sum_i [max_y (Delta_i(y) + <W, Psi_i(y)>) - <W, Psi_i(y_i)>]

where Lc is the clique table of the per-token losses C[y_t, .] / Z_i and A W the clique table of the
scores (so <alpha, Lc + A W> is the expected loss-augmented score). The prox function is the
paper's Euclidean one, d(alpha) = ||alpha||^2 / 2 over the clique marginals (App. E.1: "projecting
a vector onto the probability simplex under L2 distance ... restricted to the pmf which satisfies
the conditional independence properties"), so both maps are Euclidean projections onto Q:

    alpha_mu(W) = Proj_Q((Lc + A W) / mu),    v(beta) = Proj_Q(beta + grad D(beta) / L)

computed by the App. E.3.1 block coordinate descent and made exactly feasible
(:func:`~streamssvm._kernels.pragam_chain.project_marginals`). max_Q d = Nc / (2 n^2) = D_2 (Nc cliques).

Example weights c_i (``learn(..., weight=c)``): J(W) = (lam/2) ||W||^2 + (1/N) sum_i c_i H_i(W),
N = sum_i c_i. The M3N dual is the same with example i's clique marginals of mass z_i = c_i / N
instead of 1/n: the risk is a sum over examples, so sum_i (c_i / N) max_y (...) is the max over the
product of the mass-z_i polytopes, and every map above keeps its form -- psi_true = sum_i z_i
Psi_i(y_i), the hinge and truth averages weighted by z_i, Proj_Q onto the product of the z_i-scaled
polytopes, D_2 = max_Q d = (1/2) sum_i Nc_i z_i^2. The prox, its strong convexity (1) and ||A||
do not depend on the masses, so Algorithm 1's schedule and its certificate follow unchanged. All
weights 1 take the unweighted arithmetic, bit for bit.
Weights are one flat vector [E (d x K), T (K x K), B (2 x K)].
"""
from __future__ import annotations

import numpy as np

from .._kernels import pragam_chain as PC
from .._kernels.chain import CHAIN_LOSS_TOKEN

#: block coordinate sweeps of the projection at most, and the residual (relative to 1/n) that ends them
PROJECTION_SWEEPS = 200
PROJECTION_TOL = 1e-8


class ChainDual:
    """The held chains of one window as Pragam's dual problem (module doc).

    Parameters
    ----------
    items
        The window's examples ``(tok_ptr, fidx, fval, y, Ki)``.
    weights
        Their weights c_i (None: all 1; see the module doc).
    d, K
        Feature and label counts of the weights.
    C
        Cost matrix (at least K x K).
    lam
        Regularization.
    use_trans
        Transition and start / end features.
    """

    def __init__(self, items, d, K, C, lam, use_trans, weights=None):
        self.d, self.K, self.lam, self.use_trans = d, K, float(lam), bool(use_trans)
        n = len(items)
        self.n = n
        #: each example's mass z_i (c_i / N), None when unweighted (1 / n)
        self.mass = None if weights is None else np.asarray(weights, dtype=np.float64) / float(np.sum(weights))
        rows, idx, val, ys, zs, lens = [], [], [], [], [], []
        for tp, fi, fv, y, Ki in items:
            m = len(tp) - 1
            lens.append(m)
            for t in range(m):
                a, b = tp[t], tp[t + 1]
                keep = fi[a:b] < d
                idx.append(fi[a:b][keep])
                val.append(fv[a:b][keep])
                rows.append(int(keep.sum()))
            ys.append(np.asarray(y[:m], dtype=np.int64))
            zs.append(np.full(m, 1.0 if Ki == CHAIN_LOSS_TOKEN else float(m)))
        self.lens = np.asarray(lens, dtype=np.int64)
        N = int(self.lens.sum())
        indptr = np.zeros(N + 1, dtype=np.int64)
        np.cumsum(rows, out=indptr[1:])
        import scipy.sparse as sp   # here, not at import: ~11 MB a model that is not Pragam's does not need

        self.X = sp.csr_matrix((np.concatenate(val) if val else np.zeros(0),
                                np.concatenate(idx).astype(np.int32) if idx else np.zeros(0, np.int32), indptr),
                               shape=(N, d))
        self.X.sum_duplicates()
        self.XT = self.X.T.tocsr()
        self.y = np.concatenate(ys) if ys else np.zeros(0, dtype=np.int64)
        Z = np.concatenate(zs) if zs else np.zeros(0)
        # cliques: m - 1 edges of an example of m >= 2 tokens, one node clique of a one-token example
        nc = np.maximum(self.lens - 1, 1)
        c_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(nc, out=c_ptr[1:])
        tok0 = np.concatenate([[0], np.cumsum(self.lens)[:-1]]).astype(np.int64)
        c_tok, c_edge, c_first, c_last = [], [], [], []
        for i in range(n):
            m = int(self.lens[i])
            if m == 1:
                c_tok.append([tok0[i]]); c_edge.append([0]); c_first.append([1]); c_last.append([1])
                continue
            c_tok.append(tok0[i] + np.arange(m - 1))
            c_edge.append(np.ones(m - 1)); c_first.append(np.arange(m - 1) == 0)
            c_last.append(np.arange(m - 1) == m - 2)
        cat = (lambda parts, dt: np.concatenate([np.asarray(p) for p in parts]).astype(dt)
               if parts else np.zeros(0, dt))
        self.layout = tuple(PC.ChainCliques(c_ptr, cat(c_tok, np.int64), cat(c_edge, np.uint8),
                                            cat(c_first, np.uint8), cat(c_last, np.uint8)))
        self.Nc = int(c_ptr[-1])
        self.c_ptr = c_ptr
        if self.mass is None:
            self.D2 = self.Nc / (2.0 * n * n)
            zs = np.full(n, 1.0 / n)
        else:
            self.D2 = 0.5 * float(np.dot(nc, self.mass * self.mass))
            zs = self.mass
            self.zc = np.repeat(self.mass, nc)   # per clique
        self.cfg = tuple(PC.ProjectionConfig(zs, PROJECTION_SWEEPS, PROJECTION_TOL))
        # the loss table, and the truth's features / n
        NL = np.asarray(C, dtype=np.float64)[self.y][:, :K] / Z[:, None]
        self.Lc = self._tables(NL, np.zeros((K, K)), np.zeros((2, K)), False)
        Ytok = np.zeros((N, K))
        Ytok[np.arange(N), self.y] = 1.0
        self.Ytrue = self._truth_tables(Ytok)
        self.psi_true = self._adjoint(self.Ytrue) / n if self.mass is None else \
            self._adjoint(self.Ytrue * self.zc[:, None, None])
        self.last_sweeps = 0
        self.last_residual = 0.0
        # warm starts of the projection's multipliers: the smoothing map and the gradient step
        self.mul_smooth = np.zeros((self.Nc, K))
        self.mul_step = np.zeros((self.Nc, K))

    # ------------------------------------------------------------------ linear maps
    @property
    def dim(self):
        K = self.K
        return self.d * K + K * K + 2 * K

    def split(self, w):
        """(E, T, B) views of a flat weight vector."""
        d, K = self.d, self.K
        return (w[:d * K].reshape(d, K), w[d * K:d * K + K * K].reshape(K, K),
                w[d * K + K * K:].reshape(2, K))

    def _tables(self, U, T, B, use_trans):
        out = np.empty((self.Nc, self.K, self.K))
        PC.clique_tables(self.layout, np.ascontiguousarray(U), np.ascontiguousarray(T),
                         np.ascontiguousarray(B), use_trans, out)
        return out

    def _truth_tables(self, Ytok):
        """Clique marginals of the ground truth (mass 1 per clique)."""
        out = np.zeros((self.Nc, self.K, self.K))
        c_ptr, c_tok, c_edge = self.layout[:3]
        y = self.y
        for c in range(self.Nc):
            t = c_tok[c]
            if c_edge[c]:
                out[c, y[t], y[t + 1]] = 1.0
            else:
                out[c, y[t], y[t]] = 1.0
        return out

    def lin(self, w):
        """A W: the clique tables of the scores of the flat weights w."""
        E, T, B = self.split(w)
        return self._tables(np.asarray(self.X @ E), T, B, self.use_trans)

    def _adjoint(self, alpha):
        """A' alpha as a flat weight vector (expected features)."""
        K = self.K
        N = self.X.shape[0]
        nu, Ts, Bs = np.empty((N, K)), np.empty((K, K)), np.empty((2, K))
        PC.clique_adjoint(self.layout, alpha, self.use_trans, nu, Ts, Bs)
        return np.concatenate([np.asarray(self.XT @ nu).ravel(), Ts.ravel(), Bs.ravel()])

    def weights_of(self, alpha):
        """W(alpha) = (Psi_true / n - A' alpha) / lam."""
        return (self.psi_true - self._adjoint(alpha)) / self.lam

    # ------------------------------------------------------------------ projection and values
    def project(self, M, mul=None):
        """Proj_Q(M); ``mul``: the separator multipliers to warm start from and update (cliques x K;
        None: from zero)."""
        out = np.empty_like(M)
        mul = np.zeros((self.Nc, self.K)) if mul is None else mul
        sw, res = PC.project_marginals(self.layout, np.ascontiguousarray(M), self.cfg, mul, out)
        self.last_sweeps, self.last_residual = int(sw), float(res)
        return out

    def hinge_sum(self, G):
        """(1/n) sum_i [max_y G_i(y) - G_i(y_i)] for loss-augmented score tables G (weights: sum_i z_i [...])."""
        best, truth = np.empty(self.n), np.empty(self.n)
        PC.chain_max(self.layout, G, self.y, best, truth)
        if self.mass is not None:
            return float(np.dot(self.mass, best - truth))
        return float((best - truth).sum()) / self.n

    def truth_mean(self, G):
        """(1/n) sum_i G_i(y_i) (weights: sum_i z_i G_i(y_i))."""
        if self.mass is not None:
            return float(np.vdot(self.Ytrue * self.zc[:, None, None], G))
        return float(np.vdot(self.Ytrue, G)) / self.n

    def primal(self, w, Aw):
        return 0.5 * self.lam * float(np.vdot(w, w)) + self.hinge_sum(self.Lc + Aw)

    def smooth(self, Aw, mu):
        """(alpha_mu(W), J_mu(W) - reg): the maximizer of <alpha, Lc + A W> - mu/2 ||alpha||^2 over Q
        and its value minus the truth's score."""
        G = self.Lc + Aw
        A = self.project(G / mu, self.mul_smooth)
        return A, float(np.vdot(A, G)) - 0.5 * mu * float(np.vdot(A, A)) - self.truth_mean(G)

    def dual(self, alpha, wa):
        return float(np.vdot(alpha, self.Lc)) - 0.5 * self.lam * float(np.vdot(wa, wa))

    def random_point(self, rng):
        P = rng.exponential(size=(self.Nc, self.K, self.K))
        if self.mass is not None:
            return self.project(P / P.sum(axis=(1, 2), keepdims=True) * self.zc[:, None, None])
        return self.project(P / (P.sum(axis=(1, 2), keepdims=True) * self.n))

    def truth_point(self):
        if self.mass is not None:
            return self.Ytrue * self.zc[:, None, None]
        return self.Ytrue / self.n

    def norm_sq(self, iters=60, seed=0):
        """||A||^2 (power iteration on A'A; an estimate from below, raised by 1 %)."""
        rng = np.random.default_rng(seed)
        v = rng.normal(size=(self.Nc, self.K, self.K))
        s = 1.0
        for _ in range(iters):
            v /= np.linalg.norm(v)
            v = self.lin(self._adjoint(v))
            s = float(np.linalg.norm(v))
        return 1.01 * s
