"""BCFW internals used by distributed mixing -- kept in this one module so that a change of the
learner's internals (weights, block store layout) is adapted in one place.

Mixing that keeps the mixed point dual-feasible
-----------------------------------------------
Notation of DESIGN.md section 3: block i holds alpha_i in the simplex over labelings,
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

# the column layout of a saved block store's ``meta`` (BCFW.state()["store"])
from .._kernels.bcfw import M_FOFF, M_FSIZE, M_IOFF, M_ISIZE, M_L


def is_bcfw(learner):
    from ..learners.bcfw import BCFW
    return isinstance(learner, BCFW)


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
    (the single-process view of the distributed model). ``states`` are ``BCFW.state()`` dicts."""
    states = [s for s in states if s is not None]
    if not states:
        raise ValueError("no worker has learned anything yet")
    base = states[0]
    stores = [s["store"] for s in states]
    for s in stores[1:]:
        for k in ("kind", "Kc", "pool_cap", "slack"):
            if s[k] != stores[0][k]:
                raise ValueError(f"workers disagree on the block layout ({k}: {s[k]!r} vs {stores[0][k]!r})")
    metas, alive, free, order, unvisited = [], [], [], [], []
    io = fo = so_ = 0
    for s in stores:
        m = np.array(s["meta"], dtype=np.int64, copy=True)
        m[:, M_IOFF] += io
        m[:, M_FOFF] += fo
        metas.append(m)
        for dst, key in ((alive, "alive"), (free, "free"), (order, "order"), (unvisited, "unvisited")):
            dst.append(np.asarray(s[key], dtype=np.int64) + so_)
        io += len(s["Iar"])
        fo += len(s["Far"])
        so_ += int(s["n_slots"])
    ts = 64
    while ts < so_:
        ts *= 2
    cat = np.concatenate
    store = dict(stores[0])
    store.update({
        "capacity": None, "max_bytes": None, "eviction": "fifo",
        "lval": cat([np.asarray(s["lval"], dtype=np.float64) for s in stores]),
        "seen": sum(int(s["seen"]) for s in stores), "evicted": sum(int(s["evicted"]) for s in stores),
        "n": sum(int(s["n"]) for s in stores), "n_slots": so_, "tree_size": ts,
        "max_L": max(int(s["max_L"]) for s in stores),
        "meta": cat(metas), "gest": cat([s["gest"] for s in stores]),
        "last_oracle": cat([s["last_oracle"] for s in stores]), "birth": cat([s["birth"] for s in stores]),
        "alive": cat(alive), "free": cat(free), "order": cat(order), "unvisited": cat(unvisited),
        "Iar": cat([np.asarray(s["Iar"], dtype=np.int32) for s in stores]),
        "Far": cat([np.asarray(s["Far"], dtype=np.float64) for s in stores]),
    })
    E = np.asarray(U["E"], dtype=np.float64)
    out = dict(base)
    out.update({
        "tick": sum(int(s["tick"]) for s in states), "steps_since_full": 0,
        "counters": np.sum([np.asarray(s["counters"]) for s in states], axis=0),
        "full_pass_oracle_calls": sum(int(s["full_pass_oracle_calls"]) for s in states),
        "n_learned": sum(int(s["n_learned"]) for s in states),
        "E": E.copy(), "T": np.asarray(U["T"], dtype=np.float64).copy(),
        "B": np.asarray(U["B"], dtype=np.float64).copy(), "store": store,
        "avg": {"t0": -1, "ZE": np.zeros_like(E), "ZT": np.zeros_like(np.asarray(U["T"], dtype=np.float64)),
                "ZB": np.zeros_like(np.asarray(U["B"], dtype=np.float64)), "facc": np.zeros(2)},
    })
    return out


def select_blocks(state, slots):
    """A BCFW learner state holding only the blocks in ``slots`` (renumbered 0..m-1 in the given
    order) with the same weight sums U -- a worker's share when partitions move between workers
    (every worker holds the global U; its blocks are its own)."""
    slots = np.asarray(slots, dtype=np.int64)
    s = state["store"]
    meta = np.asarray(s["meta"], dtype=np.int64)
    Iar, Far = np.asarray(s["Iar"], dtype=np.int32), np.asarray(s["Far"], dtype=np.float64)
    m = len(slots)
    new_meta = meta[slots].copy() if m else np.zeros((0, meta.shape[1]), dtype=np.int64)
    isegs, fsegs = [], []
    io = fo = 0
    for q, j in enumerate(slots):
        a, isz = int(meta[j, M_IOFF]), int(meta[j, M_ISIZE])
        b, fsz = int(meta[j, M_FOFF]), int(meta[j, M_FSIZE])
        isegs.append(Iar[a:a + isz])
        fsegs.append(Far[b:b + fsz])
        new_meta[q, M_IOFF], new_meta[q, M_FOFF] = io, fo
        io += isz
        fo += fsz
    ts = 64
    while ts < m:
        ts *= 2
    pos = {int(j): q for q, j in enumerate(slots)}
    store = dict(s)
    store.update({
        "lval": np.asarray(s["lval"], dtype=np.float64)[slots], "seen": m, "evicted": 0, "n": m, "n_slots": m,
        "tree_size": ts, "max_L": int(max([int(meta[j, M_L]) for j in slots], default=1)),
        "meta": new_meta, "gest": np.asarray(s["gest"])[slots], "last_oracle": np.asarray(s["last_oracle"])[slots],
        "birth": np.arange(m, dtype=np.int64), "alive": np.arange(m, dtype=np.int64),
        "free": np.zeros(0, dtype=np.int64), "order": np.arange(m, dtype=np.int64),
        "unvisited": np.array(sorted(pos[int(v)] for v in s["unvisited"] if int(v) in pos), dtype=np.int64),
        "Iar": np.concatenate(isegs) if isegs else np.zeros(0, dtype=np.int32),
        "Far": np.concatenate(fsegs) if fsegs else np.zeros(0, dtype=np.float64),
    })
    out = dict(state)
    out["store"] = store
    return out


def slot_order(state):
    """The live slots of a learner state in arrival order (slot numbers follow arrivals when
    nothing is evicted)."""
    s = state["store"]
    alive = np.asarray(s["alive"], dtype=np.int64)
    return alive[np.argsort(np.asarray(s["birth"])[alive], kind="stable")]
