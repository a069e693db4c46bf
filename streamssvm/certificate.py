"""Duality-gap certificates, and the notation every learner shares.

For the n examples held now (the window), a joint feature map phi and a task loss Delta:

    P(w) = (lam/2) ||w||^2 + (1/n) sum_i H_i(w)
    margin rescaling:  H_i(w) = max_y  Delta_i(y) - <w, psi_i(y)>,   psi_i(y) = phi(x_i, y_i) - phi(x_i, y)
    slack rescaling:   H_i(w) = max_y  Delta_i(y) (1 - <w, psi_i(y)>)

The dual (block-coordinate Frank-Wolfe form, Lacoste-Julien et al., ICML 2013): each block alpha_i
is a distribution over labelings, ``w = sum_i u_i / (lam n)`` with ``u_i = sum_y alpha_i(y) psi_i(y)``,
and ``L_i = sum_y alpha_i(y) Delta_i(y)``. With the weights frozen, one pass of exact oracle calls
over the held blocks gives

    P(w) = (lam/2) ||w||^2 + (1/n) sum_i max_y H_i(y; w)
    D(alpha) = (1/n) sum_i L_i - (lam/2) ||w||^2
    gap = P(w) - D(alpha) = sum_i g_i >= 0

and, by weak duality, ``gap >= P(w) - min_w P``: the model is certified to be within ``gap`` of
the optimum of the regularized objective on the examples it holds.

With example weights c_i (BCFW's weighted dual, ``streamssvm._kernels.bcfw``) every 1/n above
becomes 1/N, N = sum_i c_i, every sum over i weighs its term by c_i, and ``w = sum_i c_i u_i /
(lam N)``; the same pass certifies the weighted objective.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Certificate:
    """Result of a full duality-gap pass (one exact oracle call per held block).

    Attributes
    ----------
    gap
        The reported bound P(w) - D(alpha) >= P(w) - min P on the suboptimality of the
        predicting weights ``w``, clamped at 0 (only round-off can make the difference
        negative); ``+inf`` when the learner has no feasible dual point (see ``note``).
    primal
        P(w) on the held blocks (an upper bound on it when ``exact`` is False).
    dual
        D(alpha) on the held blocks (``-inf`` when there is no dual point).
    n_blocks
        Number of held examples the certificate covers (the n of the objective).
    oracle_calls
        Oracle calls made by this pass (one per block and certified weight vector).
    seconds
        Wall time of the pass.
    exact
        True when every max oracle call was exact (the gap is the exact duality gap); False
        when it is a certified upper bound computed another way (see ``note``).
    lam
        The regularization lambda of P(w) = lam/2 ||w||^2 + (1/n) sum_i H_i(w).
    regularizer
        (lam/2) ||w||^2 of the certified weights.
    hinge
        (1/n) sum_i max_y H_i(y; w) of the certified weights.
    dual_loss
        (1/n) sum_i L_i, the linear part of the dual.
    block_gap_sum
        (1/n) sum_i g_i over the blocks' exact gaps (equals the iterate's gap up to round-off).
    rescaling
        ``"margin"`` or ``"slack"``.
    primal_avg, gap_avg
        With averaging: P at the averaged weights and the gap P(w_avg) - max(D(alpha),
        D(alpha_avg)) (also a valid bound, clamped at 0); None otherwise.
    note
        What was certified and how (free text).
    extra
        Learner diagnostics (numbers, strings).
    raw_gap
        The gap before clamping at 0 (``primal - dual`` as computed). Equal to ``gap`` unless
        round-off made it slightly negative; tests assert validity on this number, since
        ``gap >= 0`` holds by construction. Defaults to ``gap`` when not given.

    Examples
    --------
    >>> c = Certificate(gap=0.0, primal=1.0, dual=1.0 + 1e-15, n_blocks=3, oracle_calls=3,
    ...                 seconds=0.0, raw_gap=-1e-15)
    >>> c.gap, c.raw_gap < 0, Certificate(0.5, 1.0, 0.5, 3, 3, 0.0).raw_gap
    (0.0, True, 0.5)
    """
    gap: float
    primal: float
    dual: float
    n_blocks: int
    oracle_calls: int
    seconds: float
    exact: bool = True
    lam: float = 0.0
    regularizer: float = 0.0      # (lam/2) ||w||^2
    hinge: float = 0.0            # (1/n) sum_i max_y H_i
    dual_loss: float = 0.0        # (1/n) sum_i L_i
    block_gap_sum: float = 0.0    # (1/n) sum_i g_i (equals gap up to round-off)
    rescaling: str = "margin"
    primal_avg: float | None = None   # P at the averaged weights, when averaging
    gap_avg: float | None = None      # P(w_avg) - D(alpha): also a valid bound
    note: str = ""
    extra: dict = field(default_factory=dict)
    raw_gap: float | None = None      # primal - dual before clamping at 0

    def __post_init__(self):
        for k in ("gap", "primal", "dual", "seconds", "lam", "regularizer", "hinge", "dual_loss",
                  "block_gap_sum"):
            setattr(self, k, float(getattr(self, k)))
        self.raw_gap = self.gap if self.raw_gap is None else float(self.raw_gap)
        self.n_blocks = int(self.n_blocks)
        self.oracle_calls = int(self.oracle_calls)
        self.extra = {k: (float(v) if hasattr(v, "dtype") else v) for k, v in self.extra.items()}

    @classmethod
    def empty(cls, lam, n=0, *, exact=True, seconds=0.0, rescaling="margin", note="no examples held",
              extra=None):
        """The certificate of a learner that holds no examples (or cannot certify yet): with a
        dual point (``exact``) the empty objective, gap = primal = dual = 0; without one (a
        primal-only learner) gap = +inf, primal unknown (nan), dual = -inf.

        >>> Certificate.empty(0.1).gap, Certificate.empty(0.1, exact=False).gap
        (0.0, inf)
        """
        gap, primal, dual = (0.0, 0.0, 0.0) if exact else (float("inf"), float("nan"), float("-inf"))
        return cls(gap, primal, dual, n, 0, seconds, exact, lam, rescaling=rescaling, note=note,
                   extra={} if extra is None else extra)

    def to_dict(self):
        return asdict(self)

    def __str__(self):
        return (f"Certificate(gap={self.gap:.6g}, primal={self.primal:.6g}, dual={self.dual:.6g}, "
                f"n_blocks={self.n_blocks}, exact={self.exact})")


@dataclass(frozen=True)
class DualView:
    """What a dual (block) learner shows the certificate pass: a read-only view of its state.

    ``BCFW.dual_view()`` returns one. The pass reads every array and writes only ``scratch``
    (work buffers whose contents the learner never reads back) and the ``gest`` / ``tree``
    arrays its caller hands it explicitly.

    Attributes
    ----------
    lam, rescaling
        Regularization lambda and ``"margin"`` / ``"slack"``.
    n, K
        Number of held blocks; labels in use.
    scale
        Weights are ``scale * U`` with U the unnormalized sums (scale = 1 / (lam n)).
    U
        The current unnormalized weights (a ``structures.Weights``: ``.bundle()``, ``.sqnorm()``).
    avg
        ``(U_avg, z_loss)``: the averaged unnormalized weights and the dual-loss correction of
        the averaged dual point, or None when the learner does not average.
    model
        The structure as the kernels see it (``streamssvm._kernels.bundles.Model``: kind, labels,
        capacity, transitions, cost matrix).
    arena
        The block store's arrays (``bundles.Arena``); the pass replaces its gap estimates by a
        throw-away array unless the caller hands over its own.
    scratch
        Work buffers (``bundles.Scratch``) sized for the longest held block.
    weight_total
        N = sum_i c_i, the held blocks' example weights (None: n, every weight 1). The
        certified objective is then P(w) = lam/2 ||w||^2 + (1/N) sum_i c_i H_i(w), its dual
        D(alpha) = (1/N) sum_i c_i L_i - lam/2 ||w||^2 with w = sum_i c_i u_i / (lam N)
        (derivation in ``streamssvm._kernels.bcfw``); ``full_gap_pass`` returns the weighted
        sums.
    """
    lam: float
    rescaling: str
    n: int
    K: int
    scale: float
    U: object
    avg: object
    model: tuple
    arena: tuple
    scratch: tuple
    weight_total: float = None


def dual_gap(view: DualView, gest=None, tree=None, tree_size: int = 0) -> Certificate:
    """Exact full-gap pass of a dual learner at its current weights, from its :class:`DualView`.

    Observes: nothing of the learner's state is written, except the block-gap estimates
    ``gest`` (and their sum-tree ``tree`` of size ``tree_size``) when the caller passes its own
    -- which only BCFW's own refreshing full pass does (Osokin et al., Minding the gaps for block
    Frank-Wolfe optimization of structured SVMs, ICML 2016: a full pass every few effective
    passes refreshes the stale block gaps). With the default ``gest=None`` the per-block gaps
    go to a scratch array.

    The gap of the iterate is P(w) - D(alpha); with averaging the averaged weights (the ones
    used to predict) are certified against the better of D(alpha) and D(alpha_avg) (the
    averaged dual point, feasible for the blocks held since the averaging window started;
    Lacoste-Julien et al., Block-coordinate Frank-Wolfe optimization for structural SVMs,
    ICML 2013).
    """
    import time

    import numpy as np

    from ._kernels import bcfw as K
    from ._kernels import bundles as KB

    t0 = time.perf_counter()
    v = view
    n = v.n
    lam = float(v.lam)
    if n == 0 or v.K == 0:
        return Certificate.empty(lam, n, seconds=time.perf_counter() - t0, rescaling=v.rescaling)
    slack = v.rescaling == "slack"
    U = v.U
    scale = v.scale
    out = np.zeros(4)
    arena = KB.Arena(*v.arena)
    if gest is None:   # an observing pass: the store's gap estimates and sum-tree stay untouched
        it_arena = KB.pack(arena._replace(gest=np.zeros_like(arena.gest), tree_size=0))
    else:
        it_arena = KB.pack(arena._replace(gest=gest, tree=tree, tree_size=int(tree_size)))
    K.full_gap_pass(v.model, U.bundle(), it_arena, v.scratch, scale, slack, out)
    N = n if v.weight_total is None else float(v.weight_total)   # the weighted sample size
    reg = 0.5 * lam * scale * scale * U.sqnorm()
    hinge = out[0] / N
    dual_loss = out[1] / N
    primal = reg + hinge
    dual = dual_loss - reg
    raw = primal - dual
    # Only round-off can make it negative (weak duality): reported as 0, raw value kept
    gap = max(raw, 0.0)
    c = Certificate(gap=gap, primal=primal, dual=dual, n_blocks=n, oracle_calls=n,
                    seconds=0.0, exact=True, lam=lam, regularizer=reg, hinge=hinge,
                    dual_loss=dual_loss, block_gap_sum=out[2] / N, raw_gap=raw,
                    rescaling=v.rescaling)
    if v.avg is not None:
        # The model predicts with the averaged weights: certify them. The averaged dual point
        # (same weights over the same window) is feasible, so D(alpha_bar) is a lower bound too.
        A, z_loss = v.avg
        out2 = np.zeros(4)
        K.full_gap_pass(v.model, A.bundle(), KB.pack(arena._replace(gest=np.zeros_like(arena.gest), tree_size=0)),
                        v.scratch, scale, slack, out2)
        reg_a = 0.5 * lam * scale * scale * A.sqnorm()
        p_avg = reg_a + out2[0] / N
        d_avg = (out[1] - z_loss) / N - reg_a
        best_dual = max(dual, d_avg)
        c.extra.update({"iterate_gap": float(gap), "iterate_raw_gap": float(raw),
                        "iterate_primal": float(primal), "dual_iterate": float(dual),
                        "dual_averaged": float(d_avg)})
        c.primal_avg = float(p_avg)
        c.raw_gap = float(p_avg - best_dual)
        c.gap_avg = float(max(c.raw_gap, 0.0))
        c.primal = float(p_avg)
        c.dual = float(best_dual)
        c.gap = c.gap_avg
        c.regularizer = float(reg_a)
        c.hinge = float(out2[0] / N)
        c.note = "averaged weights (the ones used to predict); dual = max(D(alpha), D(alpha_bar))"
        c.oracle_calls += n
    c.seconds = time.perf_counter() - t0
    return c
