"""Numba kernels of the regularization path (Osokin et al., Minding the gaps for block
Frank-Wolfe optimization of structured SVMs, ICML 2016, Sec. 4, Proposition 1).

With ``Delta_i(y_i) = 0`` and ``psi_i(y_i) = 0``, moving every block's dual point towards its
ground truth, ``alpha_i <- (1 - rho) e_{y_i} + rho alpha_i``, scales ``u_i`` and ``L_i`` by
``rho``: the weights ``w = sum_i u_i / (lam n)`` are unchanged at ``lam' = rho lam`` and every
block gap grows by ``(1 - rho) delta_i``, ``n delta_i = L_i - <w, u_i>``
(= ``sum_y alpha_i(y) H_i(y; w)``). The kernels below compute the ``n delta_i`` and move the
blocks; the learner (``BCFW.set_lam``) scales the weight sums.
"""
from numba import njit

from .bcfw import _st_loss_lin, _st_score, _JIT, truth_score
from .layout import FLAG_INEXACT_ALPHA, M_FLAGS, M_KI, M_L, M_LABLEN, M_LY, M_PCAP, M_PN, block_views
from .structops import emission_scores, loss_const, truth_stat


@njit(**_JIT)
def block_deltas(model, w, arena, scratch, scale, slack, out):
    """out[q] = n delta_i = L_i - <w, u_i> of the held block ``alive[q]`` at weights
    ``scale * w`` (no oracle call: the scores of the block's dual point and of its truth)."""
    kind, K, Kc, use_trans, C, G_ = model
    E, T, B = w
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size, cw, csum, layout, moves = arena
    S, V, bp, ybuf, lab, dbuf, V3 = scratch
    for q in range(n):
        j = alive[q]
        tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = block_views(arena, j, Kc, kind)
        L = meta[j, M_L]
        ly = meta[j, M_LY]
        Ki = meta[j, M_KI]
        emission_scores(E, scale, tok_ptr, fidx, fval, L, K, S)
        if slack:   # the block holds u~_i itself and L_i in lval
            out[q] = lval[j] - _st_score(model, w, S, scale, st, L, sp, Iar, kpos)
            continue
        t_score = truth_score(kind, S, T, B, scale, ytrue, ly, L, K, Kc, use_trans, lab)
        Li = loss_const(kind, ly, Ki, ytrue) + _st_loss_lin(model, sp, st, ytrue, ly, L, Ki, ybuf, Iar, kpos)
        # <w, u_i> = <w, Phi(s(y_i))> - <w, Phi(st)>
        out[q] = Li - t_score + _st_score(model, w, S, scale, st, L, sp, Iar, kpos)


@njit(**_JIT)
def shrink_to_truth(model, arena, rho, slack, set_labeling, lab):
    """alpha_i <- (1 - rho) e_{y_i} + rho alpha_i on every held block (dense statistics only):
    the statistic, the slack loss ``lval`` and the pool's dual weights (the ground truth is put
    back in the pool when it was evicted; a full pool loses its smallest entry and the block is
    flagged ``FLAG_INEXACT_ALPHA``, as the steps do)."""
    kind, K, Kc, use_trans, C, G_ = model
    Iar, Far, meta, gest, last_oracle, lval, alive, pos, n, tree, tree_size, cw, csum, layout, moves = arena
    for q in range(n):
        j = alive[q]
        tok_ptr, fidx, ytrue, pool, fval, G, st, alpha, sp, kpos = block_views(arena, j, Kc, kind)
        L = meta[j, M_L]
        ly = meta[j, M_LY]
        for r in range(st.shape[0]):
            st[r] *= rho
        if slack:
            lval[j] *= rho    # s(y_i) contributes 0 to u~_i and to L_i
        else:
            truth_stat(kind, ytrue, ly, L, Kc, st, 1.0 - rho)
        pcap = meta[j, M_PCAP]
        if pcap == 0:
            continue
        pn = meta[j, M_PN]
        lablen = meta[j, M_LABLEN]
        for r in range(lablen):
            lab[r] = 0
        if set_labeling:
            for p in range(ly):
                if ytrue[p] < lablen:
                    lab[ytrue[p]] = 1
        else:
            for p in range(ly):
                lab[p] = ytrue[p]
        t = -1
        for p in range(pn):
            same = True
            for r in range(lablen):
                if pool[p * lablen + r] != lab[r]:
                    same = False
                    break
            if same:
                t = p
                break
        if t < 0:
            if pn < pcap:
                t = pn
                pn += 1
                meta[j, M_PN] = pn
            else:   # the entry of least dual weight makes room
                t = 0
                for p in range(1, pn):
                    if alpha[p] < alpha[t]:
                        t = p
                if alpha[t] > 0.0:
                    meta[j, M_FLAGS] |= FLAG_INEXACT_ALPHA
            for r in range(lablen):
                pool[t * lablen + r] = lab[r]
            alpha[t] = 0.0
        rest = 0.0
        for p in range(pn):
            if p != t:
                alpha[p] *= rho
                rest += alpha[p]
        alpha[t] = 1.0 - rest if rest < 1.0 else 0.0
