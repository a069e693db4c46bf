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

Mixing weight by exact line search (``mix_step="line"``). Every gamma in [0, 1] gives a
feasible point (the convex combination above), and the dual of the union along that segment is
a concave quadratic in gamma: with S = sum_k dU_k and dL = sum_k sum_{i in S_k} (L_i^k - L_i^0)
(both linear in alpha),

    D(gamma) = (L^0 + gamma dL) / n - ||U^0 + gamma S||^2 / (2 lam n^2),
    gamma*   = clip((lam n dL - <U^0, S>) / ||S||^2, 0, 1),

so the mixer takes the best feasible point of the segment -- never a smaller dual than the fixed
gamma = beta / K -- from K scalars more than the fixed mixing sends (each worker's dL, summed
from its blocks without an oracle call, :func:`loss_sum`), the way BCFW's own block step takes
its exact line search. The same gamma blends the blocks, so w = A alpha still holds.

Adaptive sigma' (``mix_step="adaptive"``). The local subproblems add up to the union's dual
change exactly when sigma' sum_k ||dU_k||^2 = ||sum_k dU_k||^2: worker k models the quadratic
term as ||U^0||^2 + 2 <U^0, dU_k> + sigma' ||dU_k||^2, and with gamma = 1 the union's is
||U^0||^2 + 2 sum_k <U^0, dU_k> + ||sum_k dU_k||^2. sigma' = K is safe for every possible
change (CoCoA+'s bound); the changes the workers actually make are often far from aligned
(measured on OCR letters: the overlap rho = ||sum_k dU_k||^2 / sum_k ||dU_k||^2 is 2.2-2.8 of
K = 4 during the stream pass and 1.1-1.3 in the refinement rounds), so sigma' = K damps every
local step several times more than the data asks. The adaptive rule takes the next round's
sigma' = clip(1.25 rho, 1, K) from the round just mixed (:func:`overlap`) and protects the
round against a sigma' that turns out too small by taking gamma by the exact line search below
(which never lowers the union's dual along the segment). Feasibility does not depend on
sigma' at all -- the blend is a convex combination for every gamma in [0, 1] -- so the mixed
point and the certificate stay valid every round. sigma' travels with the mixed weights and is
saved in each worker's part of a cut (a restart resumes with the same sigma').

Local steps use the global n: BCFW's block step on block i with weights U/(lam n) and
per-block terms u_i/(lam n), L_i/n has the line search
gamma_i = [lam <w, w_i - w_s> - (l_i - l_s)] / (lam ||w_i - w_s||^2), which is unchanged when
(lam, n) is replaced by (lam n / n_k, n_k): a worker holding n_k blocks steps exactly as a
single process holding all n blocks would, with ``lam_k = lam n / n_k`` (``BCFW.set_union``).

Certificate at the mixed w: with every worker holding U^+, each computes, for its blocks at the
common w, sum_i max_y H_i(y; w), sum_i L_i and sum_i g_i (``block_sums``); the global gap is
lam ||w||^2 - (1/n) sum L_i + (1/n) sum max H_i = (1/n) sum_k sum_{i in S_k} g_i (the block gaps
add up because sum_i <w, u_i>/n = lam ||w||^2).

Averaging at the mixer
----------------------
One process averages its iterates with weights proportional to the step index (Lacoste-Julien,
Jaggi, Schmidt and Pletscher, "Block-coordinate Frank-Wolfe optimization for structural SVMs",
ICML 2013): after T block steps, U_bar = sum_{t=1..T} t U_t / W_T with W_T = T (T + 1) / 2
(``_kernels/bcfw.py``: ``avg_coef`` gives W_{s-1}, the kernels keep Z with U_bar = U - Z / W_T),
and the same average of the loss sums L_t = sum_i L_i(alpha_t) gives the averaged dual point
alpha_bar (feasible: a convex combination of feasible points, u and L linear in alpha, a block
that arrives later sits on its ground truth, u_i = 0, L_i = 0, in the earlier iterates). The
model predicts with U_bar / (lam n) at the current n (U_bar is alpha-linear: lambda following n
changes nothing in it).

Distributed, the only points of the union are the mixed ones, U^(r) = A alpha^(r) after round
r; a worker's intermediate views are not. The analogue kept by the mixer is the same step-index
weighting on the trajectory the union actually follows: round r takes the union from T_{r-1}
to T_r block steps (summed over the workers: ``steps``), and each of those steps' iterates is
represented by the point the round produced, U^(r). So

    U_bar = sum_r c_r U^(r) / sum_r c_r,   L_bar = sum_r c_r L^(r) / sum_r c_r,
    c_r = W_{T_r} - W_{T_{r-1}} = sum_{t = T_{r-1}+1 .. T_r} t ,   sum_r c_r = W_T.

Per-step rather than per-round weights (c_r = r): rounds differ in length (a streaming round
holds round_examples new examples per worker, a refinement round passes_per_round passes of the
n blocks held, and n grows), and the weight of a point should count the steps it stands for,
as on one machine; with rounds of one step (K = 1, one new example per round, replay 0) the
average is the single process's (to round-off: the iterates are equal bit for bit, the two
accumulate their average differently), and with rounds of equal length S it is the per-round
average with weights r - 1/2 + 1/(2S). alpha_bar = sum_r c_r alpha^(r) / W_T is feasible (a
convex combination of the mixed points, each feasible), so U_bar = A alpha_bar: the averaged
model is a dual point of the union too. L^(r) = sum_k (L_k^0 + gamma dL_k) is the union's loss
sum after the blend (``loss_sum`` of every worker at the round start, and its change: the same
K scalars the line search sends).

Several workers: quadratic step weights and sigma' = rho. With K > 1 the mixer weighs the
steps by t^2 instead of t (``Mixer.average_power``; c_r = S_2(T_r) - S_2(T_{r-1}), the
polynomial-decay averaging of Shamir and Zhang, "Stochastic gradient descent for non-smooth
optimization: convergence results and optimal averaging schemes", ICML 2013, with eta = 2), and
the adaptive sigma' follows the measured overlap without the 1.25 margin (``_mixer``'s
``ADAPTIVE_MARGIN_AVERAGED``). Why: the union's early mixed points are further behind one
process's early iterates than its late ones are (the workers' changes overlap most while every
block pushes the weights the same way: sigma' near K in the stream pass, 1.3-2 later), so the
linear weights keep more of that slow start in the average; and the margin damps the local
steps against the iterate's primal oscillating from round to round, which the average smooths
away. Measured in process on 2,000 OCR words (gap 0.2 of the averaged weights, rounds of
1/(20 K) pass; one process 5.8 passes): K = 4 9.91 -> 8.04 passes, K = 8 9.76 -> 8.09
(``bench/results/distributed_averaging_chains.md``, with Brown and the letters). Both choices
change only the convex weights of feasible mixed points and sigma', which feasibility does not
depend on: alpha_bar stays a dual point of the union and every certificate stays valid. With one
worker the weights stay t (the mixer's average is then the single process's).

The mixer's state holds (T, W_T, U_bar, L_bar, the power p) and goes into every cut, so a job resumed after a
kill replays the rounds since the cut from the same average (exactly-once, as the weights).
The model the job returns predicts with U_bar (:func:`averaged_state` writes it in the
learner's own averaging state: with t0 = tick - T, Z = W_T (U - U_bar), facc[1] = W_T (L - L_bar),
so that ``BCFW.averaged_u`` returns exactly (U_bar, L - L_bar) and further learning continues the
step-index weighting). The global certificate of every round stays the mixer's, of the mixed
point (the iterate), not of the average; the returned model's own ``certificate()`` certifies the
averaged weights against max(D(alpha), D(alpha_bar)), as one process does.

Eviction windows per worker
---------------------------
One process holds a FIFO window of W blocks: before a new block arrives at a full window the
oldest leaves, and its u_i leaves the sums, U -= u_i (``BCFW._evict``); lambda follows the n
held. Distributed, worker k holds a FIFO window of W_k blocks of its own shard (shares of W
that add up to W, :func:`window_share`) and evicts its oldest block before a new one arrives
when it holds W_k, as one process does (its learner runs unbounded; :func:`evict_oldest`). The
union then holds n = sum_k n_k <= W blocks, and lambda follows that n (``union_lam``) as on one
machine.

What the union's sums must lose. Let E_k be the blocks worker k evicted during a round and
D_k = sum_{i in S_k held} (u_i(alpha_i^k) - u_i(alpha_i^0)) the change of the blocks it still
holds. The union after the round holds the blocks not evicted, blended, so its sums are

    U^+ = sum_{i held} u_i(alpha_i^0 + gamma (alpha_i^k - alpha_i^0))
        = U^0 - sum_k R_k + gamma sum_k D_k ,     R_k = sum_{i in E_k} u_i(alpha_i^0):

an evicted block leaves whole (its start point was in U^0 with weight 1, not gamma), the held
blocks' changes are blended. The worker's own sums lose u_i at the block's current point when
it is evicted (U_kernel -= u_i(alpha_i^k)); whatever the block moved during the round before
that cancels, so its measured delta is dU_k = D_k - R_k. The worker therefore computes R_k at
each eviction (the block's statistic at the round start is in the round's snapshot; a block that
arrived in the same round has u_i^0 = 0) and sends D_k = dU_k + R_k as its delta and R_k beside
it; the mixer forms U^+ above. The losses alike: L^+ = L^0 - sum_k R^L_k + gamma sum_k dL_k,
with R^L_k = sum_{i in E_k} L_i(alpha_i^0). The blended alpha^+ is feasible as before (the held
blocks' convex combinations; the evicted ones are gone), so w^+ = A alpha^+ over the blocks the
union holds and the certificate is valid after every round. The line search runs on the
segment U^0 - sum R_k + gamma sum D_k (the evictions are not scaled by gamma). The averaging
window restarts in a round with an eviction, as one process's ``evicted_average="restart"``
restarts it at an eviction (``"keep"`` is refused). With K = 1, one new example per round and no
replay the rounds are the single process's records, evictions included (equal to round-off:
the eviction subtracts u_i in Python rather than inside the learning kernel).

Only FIFO windows by number of blocks: a reservoir (random) or a byte bound (``max_bytes``) is
refused.

What the algebra allows and what is refused (each refused with a clear error by
``check_learner``):

* pairwise / away steps (``step="pairwise"`` / ``"away"``) and the oracle cache (``cache=True``):
  allowed. They read the per-block pool (labelings with dual weights c_y, at most ``cache_size``);
  the statistics are blended as above, and so are the pools' weights,
  c_y <- (1 - gamma) c^0_y + gamma c^k_y (:func:`blend_pools`). The invariant one process keeps
  is that a pool weight is at most the block's true dual weight of its labeling (a full pool
  that loses an active entry flags the block ``FLAG_INEXACT_ALPHA``), which is all a pairwise /
  away step needs: its largest step is the pool weight of the away labeling. The blend keeps
  the entries the block holds at the round end (no union of supports, so no capacity overflow);
  an entry only the start held, with weight > 0, is dropped and the block flagged, as one
  process does; both blended terms are below the true weights, so the blend is too. The cache's
  planes psi_i(y), Delta_i(y) do not depend on alpha; its hit rule reads the worker's own gap
  estimates (with ``gap_every``, its full passes add back the other workers' sums).
* averaging (``averaging=True``, the learner's default): kept by the mixer over the *mixed*
  points, never by a worker (a worker's own average would mix its local views, which are not
  points of the union; the workers run with ``averaging=False``). See "Averaging at the mixer"
  above.
* the per-block averaging accumulators of ``evicted_average="keep"``: refused (the mixer's
  average has no per-block split; without eviction ``"restart"`` is the same average).
* gap sampling with the learner's own full gap passes (``sampling="gap"`` with ``gap_every``):
  allowed. Gap *sampling* is a choice among the worker's own blocks. The refreshing full pass
  rebuilds U from the held blocks, U_kernel = sum_{i in S_k} u_i, which would drop the other
  workers' part; at every round start (after the sums are installed and scaled by 1/sigma') the
  worker keeps O_k = U_kernel - sum_{i in S_k} u_i (``BCFW.hold_outside_sums``), constant during
  the round since its steps move only its own blocks, and the full pass adds it back:
  U_kernel = O_k + sum_{i in S_k} u_i, the same sums up to round-off, so dU_k, the mixing and
  the feasibility argument are unchanged. Its block-gap estimates are those of the worker's
  local view (what its sampling uses); the global certificate is still the mixer's.
* eviction: FIFO windows per worker, above; ``eviction="reservoir"`` and ``max_bytes`` are
  refused.
"""
from __future__ import annotations

import numpy as np

from ._union import concat_store_states, select_store_blocks, store_slot_order


def check_learner(learner):
    """Raise ValueError naming what distributed BCFW does not support yet."""
    bad = []
    if learner.window is not None and learner.eviction != "fifo":
        bad.append(f"eviction={learner.eviction!r} (distributed BCFW keeps a FIFO window per worker: "
                   "eviction='fifo')")
    if learner.max_bytes is not None:
        bad.append("max_bytes (distributed BCFW bounds each worker's window by blocks: window=...)")
    if learner.averaging and learner.evicted_average == "keep":
        bad.append("evicted_average='keep' (the mixer's average has no per-block accumulators; without "
                   "eviction evicted_average='restart' keeps the same average)")
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


def window_share(window, index, n_workers):
    """Worker ``index``'s share W_k of the union's FIFO window W (``BCFW(window=W)``): the shares
    differ by at most one and add up to W (None: unbounded).

    >>> [window_share(10, k, 4) for k in range(4)], window_share(None, 0, 2)
    ([3, 3, 2, 2], None)
    """
    if window is None:
        return None
    W, K = int(window), int(n_workers)
    return W // K + (1 if int(index) < W % K else 0)


def unbound_window(model):
    """A worker's restored BCFW model with its store unbounded (the worker keeps the window):
    parts written before the workers kept the windows held the learner's own bound."""
    for lr in (model.learner, model.bound_learner):
        if lr is not None and getattr(lr, "window", None) is not None:
            lr.window = None
    if model.bound_learner is not None:
        model.bound_learner.store.capacity = None


def evict_oldest(learner, snapshot, removed):
    """Evict the learner's oldest block (FIFO) during a round: adds the block's part of the
    union's sums at the round start, u_i(alpha_i^0), to ``removed`` (a ``Weights``, grown to the
    learner's shapes; nothing for a block that arrived in this round) and returns L_i(alpha_i^0)
    -- what the mixer subtracts whole (see "Eviction windows per worker"). The learner's own
    eviction subtracts u_i(alpha_i) (its current point) from its sums, so the worker's delta is
    D_k - R_k; the snapshot forgets the block (its slot may be reused by a new block in the same
    round, which then blends from its ground truth). O(the block's size)."""
    from .._kernels import bcfw as K
    from .._kernels import bundles as KB
    st = learner.store
    slot = st.oldest()
    W = learner.W
    for k in ("E", "T", "B"):   # the learner's shapes exactly (its tables may have grown)
        a, shape = getattr(removed, k), getattr(W, k).shape
        if a.shape != shape:
            b = np.zeros(shape)
            b[:a.shape[0], :a.shape[1]] = a
            setattr(removed, k, b)
    l0 = 0.0
    hit = np.flatnonzero(snapshot["slots"] == slot) if snapshot is not None else ()
    if len(hit):
        q = int(hit[0])
        sp = snapshot.get("sparse")
        if sp is not None:   # a sparse chain store's snapshot (BCFW.dual_snapshot(layout="store"))
            ho, po = int(np.sum(sp["hsizes"][:q])), int(np.sum(sp["psizes"][:q]))
            hs, ps = int(sp["hsizes"][q]), int(sp["psizes"][q])
            now = st.swap_sparse_stat(int(slot), sp["head"][ho:ho + hs], sp["pairs"][po:po + ps],
                                      sp["vals"][po:po + ps])   # alpha_i^0, for the block's u_i only
        else:
            off = int(np.sum(snapshot["sizes"][:q]))
            size = int(snapshot["sizes"][q])
            idx, sizes = st.stat_regions(np.array([slot], dtype=np.int64))
            if int(sizes[0]) != size:
                raise RuntimeError("a block's statistic changed its layout inside a round")
            now = st.Far[idx].copy()
            st.Far[idx] = snapshot["stat"][off:off + size]   # alpha_i^0, for the block's u_i only
        K.block_u(KB.model(learner.structure, learner._K, W.Kc, learner._C), removed.bundle(), st.arena(),
                  int(slot), 1.0, learner._dbuf_for(st.meta[slot, K.M_L]), learner._slack)
        if sp is not None:
            st.swap_sparse_stat(int(slot), *now)
        else:
            st.Far[idx] = now
        l0 = float(snapshot["lval"][q])
        snapshot["slots"][q] = -1
    learner._evict(slot)
    return l0


def _pool_index(store, slots):
    """Flat indices of the pools of ``slots`` (dense layout, as after ``stat_regions``): into
    ``Far`` the pool's dual weights (pcap per block) and into ``Iar`` its labelings (pcap *
    lablen per block), with the per-block sizes."""
    from .._kernels import layout as KL
    slots = np.asarray(slots, dtype=np.int64)
    idx, sizes = store.stat_regions(slots)
    M = store.meta[slots].astype(np.int64)
    if not len(slots):
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    s0 = idx[first]   # the pool's weights follow the statistic
    pcap, lablen = M[:, KL.M_PCAP], M[:, KL.M_LABLEN]
    nidx = np.where(M[:, KL.M_FLAGS] & KL.FLAG_DENSE_ROW, 0, M[:, KL.M_NNZ])
    p0 = M[:, KL.M_IOFF] + M[:, KL.M_L] + 1 + nidx + M[:, KL.M_LY]
    asz, lsz = pcap, pcap * lablen

    def flat(start, size):
        if not int(size.sum()):
            return np.zeros(0, dtype=np.int64)
        ends = np.cumsum(size)
        return np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(start - (ends - size), size)
    return flat(s0 + sizes, asz), asz, flat(p0, lsz), lsz


def pool_snapshot(learner, slots):
    """The pools (labelings, dual weights, entries in use) of the held blocks ``slots`` at a
    round start, in that order (None for a learner without pools)."""
    st = learner.store
    if st.pool_cap == 0:
        return None
    from .._kernels import layout as KL
    a_idx, asz, l_idx, lsz = _pool_index(st, slots)
    return {"alpha": st.Far[a_idx].copy(), "asz": asz, "lab": st.Iar[l_idx].copy(), "lsz": lsz,
            "pn": st.meta[np.asarray(slots, dtype=np.int64), KL.M_PN].astype(np.int64)}


def blend_pools(learner, snapshot, pools, gamma):
    """The pools' dual weights blended as the statistics are, c <- (1 - gamma) c^0 + gamma c^k,
    keeping the entries the block holds now (the capacity rule: an entry only the round's start
    held, with weight > 0, is dropped and the block flagged ``FLAG_INEXACT_ALPHA``, as one
    process does when a full pool loses an active entry). Each kept weight stays at most the
    block's true dual weight of its labeling (both terms are), which is what makes pairwise and
    away steps feasible (their largest step is the pool weight of the away labeling). Only the
    blocks whose pool moved in the round are visited (a new block starts with its ground truth
    at weight 1)."""
    from .._kernels import layout as KL
    st = learner.store
    if st.pool_cap == 0 or st.n == 0 or gamma == 1.0:
        return
    slots_now = st.slots()
    # (no snapshot: the learner was bound in this round, every block is new)
    where = {} if pools is None else {int(j): q for q, j in enumerate(snapshot["slots"]) if int(j) >= 0}
    held = np.array([j for j in slots_now if int(j) in where], dtype=np.int64)
    fresh = [int(j) for j in slots_now if int(j) not in where]
    if pools is not None:
        a_off = np.concatenate([[0], np.cumsum(pools["asz"])])
        l_off = np.concatenate([[0], np.cumsum(pools["lsz"])])
    visit = list(fresh)
    if held.size:
        qs = np.array([where[int(j)] for j in held], dtype=np.int64)
        a_idx, asz, l_idx, lsz = _pool_index(st, held)
        a0 = np.concatenate([pools["alpha"][a_off[q]:a_off[q + 1]] for q in qs]) if a_idx.size else a_idx
        l0 = np.concatenate([pools["lab"][l_off[q]:l_off[q + 1]] for q in qs]) if l_idx.size else l_idx
        moved = st.meta[held, KL.M_PN].astype(np.int64) != pools["pn"][qs]
        if a_idx.size:
            d = (st.Far[a_idx] != a0).astype(np.int64)
            moved |= np.add.reduceat(d, np.concatenate([[0], np.cumsum(asz)[:-1]])) > 0
        if l_idx.size:
            d = (st.Iar[l_idx] != l0).astype(np.int64)
            moved |= np.add.reduceat(d, np.concatenate([[0], np.cumsum(lsz)[:-1]])) > 0
        visit += [int(j) for j in held[moved]]
    for j in visit:
        b = st.block(j)
        pn = len(b["alpha"])
        if pn == 0:
            continue
        lablen = b["pool"].shape[1]
        q = where.get(j)
        if q is None:   # arrived in the round: alpha^0 = its ground truth
            lab0 = st.structure.truth_labeling(b["ytrue"], st.Kc, st.Kc)[None, :lablen]
            c0 = np.ones(1)
        else:
            n0 = int(pools["pn"][q])
            lab0 = pools["lab"][l_off[q]:l_off[q + 1]].reshape(-1, lablen)[:n0]
            c0 = pools["alpha"][a_off[q]:a_off[q] + n0]
        used = np.zeros(len(c0), dtype=bool)
        alpha = b["alpha"]   # a view into the arena
        for p in range(pn):
            hit = np.flatnonzero(np.all(lab0 == b["pool"][p], axis=1))
            start = 0.0
            if hit.size:
                start = float(c0[hit[0]])
                used[hit[0]] = True
            alpha[p] = (1.0 - gamma) * start + gamma * alpha[p]
        if np.any(c0[~used] > 0.0):
            st.meta[j, KL.M_FLAGS] |= KL.FLAG_INEXACT_ALPHA


def steps(learner):
    """Block steps the learner has taken (its step counter, the ``tick`` of its averaging)."""
    return int(learner._tick)


def power_sum(T, power=1):
    """S_p(T) = sum_{t=1..T} t^p for p = 1 (W_T = T (T + 1) / 2) and p = 2.

    >>> power_sum(3), power_sum(3, 2)
    (6.0, 14.0)
    """
    t = float(T)
    if int(power) == 1:
        return t * (t + 1.0) / 2.0
    if int(power) == 2:
        return t * (t + 1.0) * (2.0 * t + 1.0) / 6.0
    raise ValueError(f"average weights t^p are defined for p = 1 or 2, not {power!r}")


def average_weight(t_before, t_after, power=1):
    """c_r = S_p(T_r) - S_p(T_{r-1}): the sum of the step indices (``power`` 2: of their squares)
    of the steps a round took -- the weight of its mixed point in the mixer's average.

    >>> average_weight(0, 1), average_weight(1, 3), average_weight(0, 3), average_weight(1, 3, 2)
    (1.0, 5.0, 6.0, 13.0)
    """
    return power_sum(t_after, power) - power_sum(t_before, power)


def averaged_state(state, average, loss_now):
    """A merged BCFW learner state (:func:`merge_learner_states`) that predicts with the mixer's
    average: ``average`` = {"T", "W", "U", "L"} (steps, W_T, U_bar, L_bar), ``loss_now`` the
    union's sum_i L_i at the mixed point. Writes the learner's own averaging state so that its
    ``averaged_u()`` is (U_bar, loss_now - L_bar) (see "Averaging at the mixer")."""
    T = int(average["T"])
    tick = int(state["tick"])
    out = dict(state)
    if T <= 0 or T > tick:
        return out
    Wt = T * (T + 1) / 2.0   # W_k of BCFW.averaged_u with k = tick - t0 = T
    Z = {}
    for k in ("E", "T", "B"):
        U = np.asarray(state[k], dtype=np.float64)
        Ub = np.zeros(U.shape)
        a = np.asarray(average["U"].get(k, np.zeros(0)), dtype=np.float64)
        if a.size:
            Ub[tuple(slice(0, s) for s in a.shape)] = a
        Z[k] = Wt * (U - Ub)
    out["avg"] = {"t0": tick - T, "ZE": Z["E"], "ZT": Z["T"], "ZB": Z["B"],
                  "facc": np.array([float(loss_now), Wt * (float(loss_now) - float(average["L"]))])}
    return out


def loss_sum(learner):
    """sum_i L_i over the learner's held blocks (no oracle call): the regularization path's
    per-block n delta_i = L_i - <w, u_i> evaluated with the weights scaled by 0."""
    from .._kernels import bundles as KB
    from .._kernels import regpath as RK
    st = learner.store
    if not st.n or not learner._K:
        return 0.0
    out = np.zeros(st.n)
    RK.block_deltas(KB.model(learner.structure, learner._K, learner.W.Kc, learner._C), learner.W.bundle(),
                    st.arena(), learner._ws.ensure(st.max_L, learner.W.Kc).scratch(st.max_L, learner._slack),
                    0.0, learner._slack, out)
    return float(np.sum(out))


def overlap(deltas):
    """The measured overlap of the workers' changes, rho = ||sum_k dU_k||^2 / sum_k ||dU_k||^2
    in [0, K] (None when nothing moved): the smallest sigma' for which the workers' local
    subproblems add up to at most the union's dual change for *these* changes (1: orthogonal
    changes, K: identical ones; see the module docstring).

    >>> overlap([{"E": np.array([1.0, 0.0])}, {"E": np.array([0.0, 2.0])}])
    1.0
    >>> overlap([{"E": np.array([1.0, 1.0])}, {"E": np.array([1.0, 1.0])}])
    2.0
    """
    keys = set().union(*deltas) if deltas else set()
    total = 0.0
    own = 0.0
    for k in sorted(keys):
        arrs = [np.asarray(d[k], dtype=np.float64) for d in deltas if k in d]
        shape = tuple(max(s) for s in zip(*(a.shape for a in arrs)))
        acc = np.zeros(shape)
        for a in arrs:
            acc[tuple(slice(0, s) for s in a.shape)] += a
            own += float(np.vdot(a, a))
        total += float(np.vdot(acc, acc))
    if not own > 0.0:
        return None
    return total / own


def line_step(U0, S, dL, lam, n, default):
    """The mixing weight gamma in [0, 1] maximizing the dual of the union along
    alpha^0 + gamma sum_k (alpha^k - alpha^0) (see the module docstring): ``U0`` the round's start
    sums, ``S`` = sum_k dU_k, ``dL`` = sum_k sum_{i in S_k} (L_i^k - L_i^0); ``default`` when the
    workers did not move.

    >>> line_step({"E": np.zeros(2)}, {"E": np.ones(2)}, dL=1.0, lam=0.5, n=2, default=0.5)
    0.5
    """
    ss = sum(float(np.vdot(a, a)) for a in S.values())
    if not ss > 0.0:
        return float(default)
    cross = sum(float(np.vdot(U0[k], a)) for k, a in S.items() if k in U0)
    return float(min(max((lam * n * dL - cross) / ss, 0.0), 1.0))


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
