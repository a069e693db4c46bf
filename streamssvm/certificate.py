"""Duality-gap certificates.

With the weights frozen, one pass of exact oracle calls over the held blocks gives

    P(w) = (lam/2) ||w||^2 + (1/n) sum_i max_y H_i(y; w)
    D(alpha) = (1/n) sum_i L_i - (lam/2) ||w||^2
    gap = P(w) - D(alpha) = sum_i g_i >= 0

and, by weak duality, ``gap >= P(w) - min_w P``: the model is certified to be within ``gap`` of
the optimum of the regularized objective on the examples it holds (DESIGN.md section 3).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Certificate:
    """Result of a full duality-gap pass.

    Attributes
    ----------
    gap
        P(w) - D(alpha) >= P(w) - min P: a valid upper bound on the suboptimality of ``w``.
    primal, dual
        P(w) and D(alpha) on the held blocks.
    n_blocks
        Number of held examples the certificate covers (the objective is over them).
    oracle_calls
        Exact oracle calls made by this pass (one per block).
    seconds
        Wall time of the pass.
    exact
        True when every max oracle call was exact (the gap is the exact duality gap); False
        when it is a certified upper bound computed another way (see ``note``).
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
    block_gap_sum: float = 0.0    # sum_i g_i (equals gap up to round-off)
    rescaling: str = "margin"
    primal_avg: float | None = None   # P at the averaged weights, when averaging
    gap_avg: float | None = None      # P(w_avg) - D(alpha): also a valid bound
    note: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        for k in ("gap", "primal", "dual", "seconds", "lam", "regularizer", "hinge", "dual_loss",
                  "block_gap_sum"):
            setattr(self, k, float(getattr(self, k)))
        self.n_blocks = int(self.n_blocks)
        self.oracle_calls = int(self.oracle_calls)
        self.extra = {k: (float(v) if hasattr(v, "dtype") else v) for k, v in self.extra.items()}

    def to_dict(self):
        return asdict(self)

    def __str__(self):
        return (f"Certificate(gap={self.gap:.6g}, primal={self.primal:.6g}, dual={self.dual:.6g}, "
                f"n_blocks={self.n_blocks}, exact={self.exact})")


def full_gap(learner, refresh: bool = True) -> Certificate:
    """Exact full-gap pass of a bound dual learner (``BCFW``) at its current weights.

    With ``refresh`` (the algorithm's own full pass): rebuilds the weight sums from the blocks
    first (removing accumulated round-off), refreshes every block-gap estimate, the global gap
    used by the cache rule and the pass schedule. Without it (an offline measurement, as the
    paper's plots): the learner's state is left untouched.
    """
    import time

    import numpy as np

    from ._kernels import bcfw as K
    from ._kernels import bundles as KB

    t0 = time.perf_counter()
    st = learner.store
    n = st.n
    lam = float(learner.lam)
    if n == 0 or learner._K == 0:
        return Certificate(0.0, 0.0, 0.0, n, 0, time.perf_counter() - t0, True, lam,
                           note="no examples held")
    W = learner.W
    model = KB.model(learner.structure, learner._K, W.Kc, learner._C)
    scratch = learner._ws.ensure(st.max_L, W.Kc).scratch(st.max_L, learner._slack)
    if refresh:
        K.rebuild_u(model, W.bundle(), st.arena(), learner._ws.dbuf, learner._slack)
    scale, _ = learner._scale()
    out = np.zeros(4)
    arena = st.arena() if refresh else st.arena(gest=np.zeros_like(st.gest), tree_size=0)
    K.full_gap_pass(model, W.bundle(), arena, scratch, scale, learner._slack, out)
    if refresh:
        st.unvisited.clear()
    reg = 0.5 * lam * scale * scale * W.sqnorm()
    hinge = out[0] / n
    dual_loss = out[1] / n
    primal = reg + hinge
    dual = dual_loss - reg
    gap = primal - dual
    if gap < 0.0:
        # Only round-off can make it negative (weak duality); a bound of 0 - |round-off| is
        # reported as 0 and the raw value kept in ``extra``.
        raw = gap
        gap = 0.0
    else:
        raw = gap
    if refresh:
        learner._g_full = gap
        learner._had_full = True
        learner._n_at_full = n
        learner._steps_since_full = 0
        learner.full_pass_oracle_calls += n
    c = Certificate(gap=gap, primal=primal, dual=dual, n_blocks=n, oracle_calls=n,
                    seconds=0.0, exact=True, lam=lam, regularizer=reg, hinge=hinge,
                    dual_loss=dual_loss, block_gap_sum=out[2] / n, extra={"raw_gap": raw},
                    rescaling=learner.rescaling)
    avg = learner.averaged_u()
    if avg is not None:
        # The model predicts with the averaged weights: certify them. The averaged dual point
        # (same weights over the same window) is feasible, so D(alpha_bar) is a lower bound too.
        A, z_loss = avg
        out2 = np.zeros(4)
        K.full_gap_pass(model, A.bundle(), st.arena(gest=np.zeros_like(st.gest), tree_size=0), scratch, scale,
                        learner._slack, out2)
        reg_a = 0.5 * lam * scale * scale * A.sqnorm()
        p_avg = reg_a + out2[0] / n
        d_avg = (out[1] - z_loss) / n - reg_a
        best_dual = max(dual, d_avg)
        c.extra.update({"iterate_gap": float(gap), "iterate_primal": float(primal),
                        "dual_iterate": float(dual), "dual_averaged": float(d_avg)})
        c.primal_avg = float(p_avg)
        c.gap_avg = float(max(p_avg - best_dual, 0.0))
        c.primal = float(p_avg)
        c.dual = float(best_dual)
        c.gap = c.gap_avg
        c.regularizer = float(reg_a)
        c.hinge = float(out2[0] / n)
        c.note = "averaged weights (the ones used to predict); dual = max(D(alpha), D(alpha_bar))"
        c.oracle_calls += n
        if refresh:
            learner.full_pass_oracle_calls += n
    c.seconds = time.perf_counter() - t0
    return c
