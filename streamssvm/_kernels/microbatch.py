"""Progressive validation of a micro-batch in one kernel call: record e is predicted with the
weights after record e - 1, then learned, exactly as ``predict_one`` then ``learn_one`` would do
record by record (Lacoste-Julien, Jaggi, Schmidt and Pletscher, "Block-Coordinate Frank-Wolfe
Optimization for Structural SVMs": one block step on each arriving example, then ``replay``
steps on held blocks).

The per-record path of :class:`streamssvm.learners.BCFW` makes three kernel calls per record
(prediction, then ``learn_one_example``), and reseeds the sampler and re-reads the prediction's
scale and averaging coefficients between them. The sampler is reseeded here too, per record, but
through :mod:`streamssvm._kernels.mtseed`: the same blocks drawn as after ``np.random.seed``,
without initializing and twisting the generator's whole state for the one or two words a replay
step draws. This kernel makes the same calls of the same
step functions (``predict_batch``, ``write_block``, ``_append``, ``one_step`` of
:mod:`streamssvm._kernels.bcfw`), in the same order, with the same per-record seed, scale
(``lam`` following ``n``) and averaged weights, so its predictions and its state are
bit-identical to the record-by-record path. At a full FIFO store each record evicts the oldest
block first, as ``learn_one_example`` does, with the slots, victims and meta rows the record
path would give them planned beforehand (``BlockStore.plan_evicting_rows``), and the averaging
restart that ``evicted_average="restart"`` makes after each such record done here. What else the
Python side does between two records (a full gap pass when one is due, a store that grows its
slots or compacts its arenas, a new label) ends a micro-batch there; :meth:`BCFW.predict_learn_run`
cuts the batches so.

What the estimator does around a record happens inside the run as well, with the same
functions in the same order: online feature scaling (:mod:`streamssvm.scaling`: the record
predicted with its values scaled by the statistics before it, then the statistics take it and
it is learned scaled by them, ``scale_values`` / ``learn_values`` of
:mod:`streamssvm._kernels.scaling`), and the class scores the online temperature fit
(:mod:`streamssvm.calibration`) observes, computed before the record is learned by
``emission_table`` of :mod:`streamssvm._kernels.marginals` and handed to the fit after the call.
"""
import numpy as np
from numba import njit

from .bcfw import _append, evict, one_step, predict_batch, step_lam_n, write_block
from .borrow import borrowed
from .common import MULTICLASS
from .mtseed import STATE, mt_sample_block, mt_seed
from .structops import kind_code
from .marginals import emission_table
from .scaling import learn_values, scale_values

_JIT = dict(cache=True, nogil=True, no_cfunc_wrapper=True)


@njit(**_JIT)
def predict_learn_examples(model, w, arena, scratch, avg, cfg, records, predicting, observing, tick0, counters,
                           out):
    """Predict then learn m one-token examples (multiclass rows) whose slots are reserved.

    ``records`` = (tok_ptr, fidx, fval, yids, mark, slots, seeds, victims, metas): the batch's
    CSR (row e is tokens e..e+1; tok_ptr int32 into fidx / fval), the label id of each row, the
    learner's Gram mark buffer, the reserved slot of each row, the sampler's seed of each
    record's learn call, and for a full FIFO store (``BlockStore.plan_evicting_rows``; else
    empty) the block each row evicts first (-1: none) and each row's meta row, written with its
    slot's bookkeeping when the row arrives (its slot may hold an earlier row's victim until
    then). ``predicting`` = (pscratch, averaging, lam_fixed, auto_lam, auto_lam_n, rows,
    preds, restart, avstate): the prediction's scratch, whether the learner predicts with
    averaged weights, ``lam`` (< 0: ``min(auto_lam, auto_lam_n / n)``), ``rows`` = 0..m, the
    predicted label ids (out), whether an eviction that stops averaging restarts it after its
    record (``evicted_average="restart"``, the blocks keeping no accumulators: what the Python
    side does between two records, done here) and ``avstate`` = [averaging origin, Z dirty]
    after the call (out; in: [_, Z dirty]). ``observing`` = (sumsq, count, scaling, pval, lval, obs, S, K): with ``scaling``
    the column statistics of :class:`streamssvm.scaling.ColumnScaler` (updated in place), and
    the values each record is predicted with (pval, out) and learned with (lval, out); without
    it pval and lval are fval itself. obs[e] >= 0: record e's K class scores before it is
    learned go to row obs[e] of S (out). out = [held blocks, evictions, averaging origin], as
    ``learn_one_example`` leaves it. Returns the new tick."""
    model, w, arena, scratch, avg, records, predicting, observing, counters, out = borrowed(   # ``borrow.py``
        (model, w, arena, scratch, avg, records, predicting, observing, counters, out))
    tok_ptr, fidx, fval, yids, mark, slots, seeds, victims, metas = records
    pscratch, averaging, lam_fixed, auto_lam, auto_lam_n, rows, preds, restart, avstate = predicting
    sumsq, count, scaling, pval, lval, obs, S, K = observing
    E, T, B = w
    avg_t0, ZE, ZT, ZB = avg[0], avg[1], avg[2], avg[3]
    dirty = avstate[1]   # Z holds averaged steps since it was last zeroed (BCFW._z_dirty)
    n = arena[8]
    tick = tick0
    alive, tree, tree_size = arena[6], arena[9], arena[10]
    rng = np.empty(STATE, dtype=np.int64)   # the sampler, reseeded per record (mtseed.py)
    for e in range(slots.shape[0]):
        # the prediction (BCFW.predict at this record's tick and held-block count)
        nn = arena[12][0] if n > 0 else 1.0   # N, the held weight (n when every weight is 1)
        lam = lam_fixed if lam_fixed >= 0.0 else min(auto_lam, auto_lam_n / nn)
        scale = 1.0 / (lam * nn)
        a, b = tok_ptr[e], tok_ptr[e + 1]
        if scaling:   # scaled by the statistics before the record (ColumnScaler.scaled)
            scale_values(sumsq, count, fidx[a:b], fval[a:b], pval[a:b])
        batch = (rows[e:e + 2], tok_ptr, fidx, pval, rows[e:e + 2])
        k = tick - avg_t0
        zc = 0.0
        if averaging and avg_t0 >= 0 and k > 0:
            zc = 2.0 / (k * (k + 1.0))
            if kind_code(model[0]) == MULTICLASS:   # mc_decode reads the scores alone: no averaged T, B
                predict_batch(model, w, scale, ZE, zc, batch, preds, pscratch)
            else:
                predict_batch(model, (E, T - zc * ZT, B - zc * ZB), scale, ZE, zc, batch, preds, pscratch)
        else:
            predict_batch(model, w, scale, E, 0.0, batch, preds, pscratch)
        if obs[e] >= 0:   # the temperature fit's scores (calibration.emission_scores), before learning
            j = obs[e]
            emission_table(E, ZE, zc, scale, tok_ptr[e:e + 2], fidx, pval, 1, K, S[j:j + 1])
        if scaling:   # the statistics take the record, then it is learned scaled by them
            learn_values(sumsq, count, fidx[a:b], fval[a:b], lval[a:b])
        # the learning (learn_one_example's arrival of one example, its own seed: the blocks
        # its replays draw after np.random.seed(seeds[e]), drawn by mtseed without its cost)
        mt_seed(rng, seeds[e])
        slot = slots[e]
        if e < metas.shape[0]:   # a planned row (a full store): its meta row and slot bookkeeping
            # now, as BlockStore.reserve_row writes them (the slot may be an earlier row's victim)
            for q in range(metas.shape[1]):
                arena[2][slot, q] = metas[e, q]
            arena[3][slot] = np.inf
            arena[4][slot] = -1
            arena[7][slot] = -1
            arena[11][slot] = 1.0
        write_block(model[0], model[2], arena[:3] + (arena[13],), slot, tok_ptr[e:e + 2], fidx, lval,
                    yids[e:e + 1], mark, cfg[8])
        arena[5][slot] = 0.0
        out[1] = 0
        out[2] = avg_t0
        if e < victims.shape[0] and victims[e] >= 0:   # the oldest block leaves first (learn_one_example)
            n = evict(model, w, arena, scratch, avg, cfg, n, victims[e], out)
        n = _append(arena[6], arena[7], arena[11], arena[12], n, slot)
        out[0] = n
        # the first step on the new block (alive[n - 1]), then the replays on sampled blocks: the
        # steps of _step_loop(..., alive[n - 1:n], replay + 1, ...) one at a time (lambda N is
        # the same for each: a step does not change N), each block drawn after the step before
        for r in range(cfg[7] + 1):
            j = slot if r == 0 else mt_sample_block(cfg[6], tree, tree_size, alive, n, rng)
            tick = one_step(model, w, arena, scratch, avg, cfg, counters, j, step_lam_n(arena, cfg), out[2], tick)
        if out[2] >= 0:
            dirty = 1
        if restart and out[2] < 0 and e < victims.shape[0] and victims[e] >= 0 and e + 1 < slots.shape[0]:
            # the eviction stopped averaging (its block kept no accumulator): the average
            # restarts here, as BCFW._avg_restart after the record (the next records'
            # predictions and steps average from this tick); after the last record, the
            # Python side restarts it
            avg_t0 = tick
            if dirty:
                ZE[...] = 0.0
                ZT[...] = 0.0
                ZB[...] = 0.0
                dirty = 0
            avg[4][1] = 0.0
    avstate[0] = avg_t0
    avstate[1] = dirty
    return tick
