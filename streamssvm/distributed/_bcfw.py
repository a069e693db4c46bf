"""BCFW internals used by distributed mixing -- kept in this one module so that a change of the
learner's internals (weights, block store layout) is adapted in one place.

Mixing that keeps the mixed point dual-feasible
-----------------------------------------------
Notation of :mod:`streamssvm.certificate`: block i holds alpha_i in the simplex over labelings,
u_i = sum_y alpha_i(y) psi_i(y) and L_i = sum_y alpha_i(y) Delta_i(y) (both linear in alpha_i);
the weights are w = U / (lam n) with U = sum_i u_i (the map w = A alpha).

K workers hold disjoint sets of blocks S_1 ... S_K (the partition CoCoA assumes: Jaggi et al.,
"Communication-efficient distributed dual coordinate ascent", NeurIPS 2014; Ma, Smith, Jaggi,
Jordan, Richtarik and Takac, "Adding vs. averaging in distributed primal-dual optimization",
ICML 2015 -- CoCoA+). A round starts at a
feasible point (alpha^0, U^0 = sum_i u_i(alpha^0)) known to every worker. Worker k runs BCFW
block steps on its own blocks only, against its local view U^0 + dU_k, where

    dU_k = sum_{i in S_k} (u_i(alpha_i^k) - u_i(alpha_i^0))

(a new block starts at alpha on its ground truth, u_i = 0, L_i = 0). The mixer forms, with
gamma = beta / K and 0 < beta <= K,

    U^+ = U^0 + gamma sum_k dU_k ,        alpha_i^+ = alpha_i^0 + gamma (alpha_i^k - alpha_i^0)  (i in S_k).

Each alpha_i^+ = (1 - gamma) alpha_i^0 + gamma alpha_i^k is a convex combination of two points
of the simplex, so it is in the simplex; and because u_i, L_i are linear in alpha_i and the
blocks are disjoint, sum_i u_i(alpha^+) = U^0 + gamma sum_k dU_k = U^+. Hence w^+ = U^+/(lam n)
= A alpha^+ with alpha^+ feasible: the mixed point is a dual point and the certificate
P(w^+) - D(alpha^+) is a valid bound after every round, for any 0 < gamma <= 1.

Local subproblem (CoCoA+, Ma et al. 2015, with sigma' = gamma K = beta). Worker k's block steps
maximize the dual along its own blocks with the quadratic term scaled by sigma': the gradient is
taken at w + sigma' dW_k and the curvature is sigma' lam. BCFW's kernel does exactly that when
its sums are held divided by sigma' (U_kernel = U^0 / sigma' + dU_k, so that sigma' U_kernel =
U^0 + sigma' dU_k) and it runs with lam_k n_k = lam n / sigma': its weights are then
U_kernel / (lam_k n_k) = (U^0 + sigma' dU_k) / (lam n), a block's direction counts sigma' times,
and the exact line search returns gamma_1 / sigma' where gamma_1 is the single-process step.
dU_k is still U_kernel(end) - U^0 / sigma' (the kernel adds the exact block changes), so the
mixing formula and the feasibility argument above are unchanged. beta = 1 is CoCoA averaging
(sigma' = 1, gamma = 1/K); beta = K is CoCoA+ adding (sigma' = K, gamma = 1: blocks are not
blended at all), the safe bound sigma' >= gamma K holding with equality for every beta.

The worker blends its *blocks* the same way (the stored per-block statistic is linear in
alpha_i, see ``streamssvm._kernels.structops``; slack rescaling stores u~_i and L_i, also
linear), so that every worker's blocks and the broadcast U^+ stay consistent.

Local steps use the global n: BCFW's block step on block i with weights U/(lam n) and
per-block terms u_i/(lam n), L_i/n has the line search
gamma_i = [lam <w, w_i - w_s> - (l_i - l_s)] / (lam ||w_i - w_s||^2), which is unchanged when
(lam, n) is replaced by (lam n / n_k, n_k): a worker holding n_k blocks steps exactly as a
single process holding all n blocks would, with ``lam_k = lam n / n_k`` (``BCFW.set_union``).

Certificate at the mixed w: with every worker holding U^+, each computes, for its blocks at the
common w, sum_i max_y H_i(y; w), sum_i L_i and sum_i g_i (``block_sums``); the global gap is
lam ||w||^2 - (1/n) sum L_i + (1/n) sum max H_i = (1/n) sum_k sum_{i in S_k} g_i (the block gaps
add up because sum_i <w, u_i>/n = lam ||w||^2).

Restrictions (each refused with a clear error by ``check_learner``): ``step="fw"`` without the
oracle cache (pairwise / away steps and the cache keep per-block pools whose weights would also
need blending), ``averaging=False`` (the averaged iterate of one worker is not a dual point of the
union), and no full gap passes inside the learner (``gap_every=None`` or uniform sampling: the
learner's refreshing pass re-sums U from the worker's own blocks only). Eviction is refused at
run time (a block that leaves one worker would have to leave the union's sums whole).
"""
from __future__ import annotations

import numpy as np

from ._union import concat_store_states, select_store_blocks, store_slot_order


def check_learner(learner):
    """Raise ValueError naming what distributed BCFW does not support yet."""
    bad = []
    if learner.step != "fw":
        bad.append(f"step={learner.step!r} (use step='fw')")
    if learner.cache:
        bad.append("cache=True (use cache=False)")
    if learner.averaging:
        bad.append("averaging=True (use averaging=False: one worker's averaged iterate is not a dual "
                   "point of the union of blocks)")
    if learner.gap_every is not None and learner.sampling == "gap":
        bad.append("sampling='gap' with gap_every set (use gap_every=None or sampling='uniform': the "
                   "learner's own full pass would re-sum the weights from one worker's blocks)")
    if bad:
        raise ValueError("distributed BCFW does not support " + "; ".join(bad))


# ----------------------------------------------------------------------------- the learner's side
# Everything below goes through BCFW's public mixing interface (Learner.parameters,
# set_parameters, dual_snapshot, blend_dual; BCFW.set_union, n_evicted).
def scale_u(learner, f):
    """Multiply the learner's weight sums by ``f``; returns the scaled sums."""
    U = {k: v * f for k, v in learner.parameters().items()}
    learner.set_parameters(U)
    return U


def block_sums(learner, lam, n_global):
    """Per-worker parts of the global certificate at the learner's current (mixed) weights:
    sum_i max_y H_i, sum_i L_i, sum_i g_i over the worker's blocks, with the global scale
    1/(lam n_global). Observes only (the learner's working lam is set as by ``set_union``)."""
    n_k = int(learner.n_blocks)
    if n_k == 0:
        return {"hinge_sum": 0.0, "loss_sum": 0.0, "gap_sum": 0.0, "n": 0, "oracle_calls": 0, "exact": True}
    learner.set_union(lam, n_global)
    c = learner.certificate()   # observes only
    return {"hinge_sum": c.hinge * n_k, "loss_sum": c.dual_loss * n_k, "gap_sum": c.block_gap_sum * n_k,
            "n": n_k, "oracle_calls": c.oracle_calls, "exact": bool(c.exact)}


# ----------------------------------------------------------------------------- union of blocks
def merge_learner_states(states, U):
    """One BCFW learner state holding the union of the workers' blocks and the mixed sums U
    (the single-process view of the distributed model). ``states`` are ``BCFW.state()`` dicts;
    their block stores are joined by :func:`streamssvm.distributed._union.concat_store_states`."""
    states = [s for s in states if s is not None]
    if not states:
        raise ValueError("no worker has learned anything yet")
    try:
        store = concat_store_states([s["store"] for s in states])
    except ValueError as e:
        raise ValueError(f"cannot join the workers' blocks: {e}") from None
    E = np.asarray(U["E"], dtype=np.float64)
    T = np.asarray(U["T"], dtype=np.float64)
    out = dict(states[0])
    out.update({
        "tick": sum(int(s["tick"]) for s in states), "steps_since_full": 0,
        "counters": np.sum([np.asarray(s["counters"]) for s in states], axis=0),
        "full_pass_oracle_calls": sum(int(s["full_pass_oracle_calls"]) for s in states),
        "n_learned": sum(int(s["n_learned"]) for s in states),
        "E": E.copy(), "T": T.copy(), "B": np.asarray(U["B"], dtype=np.float64).copy(), "store": store,
        "avg": {"t0": -1, "ZE": np.zeros_like(E), "ZT": np.zeros_like(T),
                "ZB": np.zeros_like(np.asarray(U["B"], dtype=np.float64)), "facc": np.zeros(2)},
    })
    return out


def select_blocks(state, slots):
    """A BCFW learner state holding only the blocks in ``slots`` (renumbered 0..m-1 in the given
    order, :func:`streamssvm.distributed._union.select_store_blocks`) with the same weight sums U -- a
    worker's share when partitions move between workers (every worker holds the global U; its
    blocks are its own)."""
    out = dict(state)
    out["store"] = select_store_blocks(state["store"], slots)
    return out


def slot_order(state):
    """The live slots of a learner state in arrival order (slot numbers follow arrivals when
    nothing is evicted)."""
    return store_slot_order(state["store"])
