"""Prototype of a per-token (tag, value) pairs layout for a sparse chain block's emission statistic M
(issue 22 item 9; the design: bench/archive/chain_pairs_design.md). Not used by the library: it checks, on the
real end state of the Brown 10k stream, that the layout's sums give today's tag-room kernels' values bit
for bit, and times them.

    PYTHONPATH=. python3 bench/chain_pairs_proto.py            # the bit-for-bit check (N=1000: fewer sentences)
    OPENBLAS_NUM_THREADS=1 flock /tmp/bench.lock python3 bench/chain_pairs_proto.py --time

The check converts every block's room (M: L x rcap) to per-token lists (token t's entries
etag[tptr[t]:tptr[t + 1]], ascending tags, values at the same positions of the statistic), keeps
the truth's tags, 5% of the zero room entries (registered at 0) and sets 3% of the non-zeros to
exactly +0.0 / -0.0 in both layouts; then compares score, linear loss, ||Phi||^2 (stored and
token-computed Gram), the weights after Phi-apply (E, T, B bytes), and one Frank-Wolfe-like step
(register the truth and a perturbed labeling, d = -st + s(y) - s(lab), st += gamma d with gamma = 1
in 30% of the blocks: entries that become exactly 0) -- every value as int64 bits.
"""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
from numba import njit
import streamssvm as ss
from streamssvm._kernels import chainsparse as CS, common as CM, layout as KL
from streamssvm._kernels.common import py_entry
from streamssvm._kernels.chain import chain_loss_norm
from chain_memory import _brown

BIG = 1 << 30

# ---------------------------------------------------------------- pairs kernels (the design)
@njit
def pp_find(tptr, etag, t, k):
    for e in range(tptr[t], tptr[t + 1]):
        if etag[e] == k:
            return e
    return -1

@njit
def pp_register(tptr, etag, mv, zm, ecap, lab, L):
    """Insert lab's tag at each token where missing (value 0, ascending place), one backward pass."""
    miss = 0
    for t in range(L):
        miss += pp_find(tptr, etag, t, lab[t]) < 0
    en = tptr[L]
    if en + miss > ecap:
        return False
    if miss == 0:
        return True
    w = en + miss
    for t in range(L - 1, -1, -1):
        a, b = tptr[t], tptr[t + 1]
        k = lab[t]
        ins = pp_find(tptr, etag, t, k) < 0
        tptr[t + 1] = w
        for e in range(b - 1, a - 1, -1):
            if ins and etag[e] < k:
                w -= 1; etag[w] = k; mv[w] = 0.0
                if zm.shape[0] > 0: zm[w] = 0.0
                ins = False
            w -= 1; etag[w] = etag[e]; mv[w] = mv[e]
            if zm.shape[0] > 0: zm[w] = zm[e]
        if ins:
            w -= 1; etag[w] = k; mv[w] = 0.0
            if zm.shape[0] > 0: zm[w] = 0.0
    return True

@njit
def pp_emission_stat(tptr, etag, lab, L, out, coef):
    for t in range(L):
        e = pp_find(tptr, etag, t, lab[t])
        out[e] += coef

@njit
def _bm_step(tptr, etag, st, L, i, j):
    """One step of the merge of token 0's and token L-1's entries (ascending tags; the BM rows):
    (tag k, token 0's value a, token L-1's value b (0.0 for a missing side), next i, next j)."""
    ki = etag[i] if i < tptr[1] else BIG
    kj = etag[j] if j < tptr[L] else BIG
    k = min(ki, kj)
    a = 0.0
    b = 0.0
    if ki == k:
        a = st[i]
        i += 1
    if kj == k:
        b = st[j]
        j += 1
    return k, a, b, i, j

@njit
def pp_score(S, T, B, scale, st, L, use_trans, tptr, etag, ecap, pairs, tn):
    v = 0.0
    for t in range(L):
        for e in range(tptr[t], tptr[t + 1]):
            v += S[t, etag[e]] * st[e]
    if use_trans:
        acc = 0.0
        i, j = tptr[0], tptr[L - 1]
        while i < tptr[1] or j < tptr[L]:
            k, a, b, i, j = _bm_step(tptr, etag, st, L, i, j)
            acc += B[0, k] * a + B[1, k] * b
        for q in range(tn):
            acc += T[pairs[2 * q], pairs[2 * q + 1]] * st[ecap + q]
        v += scale * acc
    return v

@njit
def pp_loss_lin(st, ytrue, C, L, Ki, tptr, etag):
    v = 0.0
    for t in range(L):
        c = ytrue[t]
        for e in range(tptr[t], tptr[t + 1]):
            v += C[c, etag[e]] * st[e]
    return v / chain_loss_norm(L, Ki)

@njit
def _dot_rows(st, tptr, etag, t, s):
    """<M_t, M_s> over their common tags with non-zero values, ascending (room: over supp(s))."""
    acc = 0.0
    i, i1 = tptr[t], tptr[t + 1]
    for p in range(tptr[s], tptr[s + 1]):
        if st[p] == 0.0:
            continue
        k = etag[p]
        while i < i1 and etag[i] < k:
            i += 1
        if i < i1 and etag[i] == k:
            acc += st[i] * st[p]
    return acc

@njit
def pp_emission_sqnorm(G, st, L, tptr, etag):
    v = 0.0
    for t in range(L):
        for s in range(L):
            g = G[t, s]
            if g == 0.0:
                continue
            v += g * _dot_rows(st, tptr, etag, t, s)
    return v

@njit
def pp_emission_sqnorm_tokens(tok_ptr, fidx, fval, st, L, tptr, etag):
    act = np.empty(L, np.int64)
    na = 0
    for t in range(L):
        for e in range(tptr[t], tptr[t + 1]):
            if st[e] != 0.0:
                act[na] = t; na += 1
                break
    if na == 0:
        return 0.0
    dense = fidx.shape[0] == 0
    nnz = tok_ptr[L] - tok_ptr[0]
    keys = np.empty(max(nnz, 1), np.int64)
    vals = np.empty(max(nnz, 1))
    tp = np.empty(na + 1, np.int64)
    tp[0] = 0
    if not dense:
        for q in range(na):
            t = act[q]; o = tp[q]
            tp[q + 1] = o + CM._token_table(tok_ptr, fidx, fval, t, keys[o:], vals[o:])
    sym = na <= CM._GRAM_SCRATCH_ROWS
    gm = np.empty((na, na) if sym else (0, 0))
    if sym:
        for qa in range(na):
            for qb in range(qa, na):
                gm[qa, qb] = gm[qb, qa] = CM._token_gram(dense, tok_ptr, fidx, fval, act[qa], act[qb], qa, keys, vals, tp)
    v = 0.0
    for qa in range(na):
        t = act[qa]
        for qb in range(na):
            s = act[qb]
            if sym:
                g = gm[qa, qb]
            elif t <= s:
                g = CM._token_gram(dense, tok_ptr, fidx, fval, t, s, qa, keys, vals, tp)
            else:
                g = CM._token_gram(dense, tok_ptr, fidx, fval, s, t, qb, keys, vals, tp)
            if g == 0.0:
                continue
            v += g * _dot_rows(st, tptr, etag, t, s)
    return v

@njit
def pp_trans_sqnorm(v, st, L, use_trans, tptr, etag, ecap, tn):
    if use_trans:
        i, j = tptr[0], tptr[L - 1]
        while i < tptr[1] or j < tptr[L]:
            k, a, b, i, j = _bm_step(tptr, etag, st, L, i, j)
            v += a * a + b * b
        for q in range(tn):
            x = st[ecap + q]
            v += x * x
    return v

@njit
def pp_apply(E, T, B, tok_ptr, fidx, fval, st, L, coef, use_trans, tptr, etag, ecap, pairs, tn):
    dense = fidx.shape[0] == 0
    for t in range(L):
        for p in range(tok_ptr[t], tok_ptr[t + 1]):
            jf = p - tok_ptr[t] if dense else fidx[p]
            v = fval[p] * coef
            for e in range(tptr[t], tptr[t + 1]):
                if st[e] != 0.0:
                    E[jf, etag[e]] += v * st[e]
    if use_trans:
        i, j = tptr[0], tptr[L - 1]
        while i < tptr[1] or j < tptr[L]:
            k, a, b, i, j = _bm_step(tptr, etag, st, L, i, j)
            B[0, k] += coef * a
            B[1, k] += coef * b
        for q in range(tn):
            T[pairs[2 * q], pairs[2 * q + 1]] += coef * st[ecap + q]

# ---------------------------------------------------------------- conversion and checks
def room_local(st_store, s, extra):
    """A standalone copy of block s in the room layout: (Iar_loc, kpos=0, st_loc) with rcap = rn + extra."""
    meta = st_store.meta
    L = int(meta[s, KL.M_L])
    kp, tags, R = st_store._room(s)
    tn, tcap = int(st_store.Iar[kp]), int(st_store.Iar[kp + 1])
    rn = len(tags)
    R2 = min(rn + extra, st_store.Kc) if extra >= 0 else R
    I = np.zeros(4 + 2 * tcap + R2, np.int32)
    I[:2 + 2 * tcap] = st_store.Iar[kp:kp + 2 + 2 * tcap]
    r = 2 + 2 * tcap
    I[r], I[r + 1] = rn, R2
    I[r + 2:r + 2 + rn] = tags
    s0 = st_store._stat_pos(s)
    M = st_store.Far[s0:s0 + L * R].reshape(L, R)[:, :rn]
    stl = np.zeros(L * R2 + tcap)
    stl[:L * R2].reshape(L, R2)[:, :rn] = M
    stl[L * R2:] = st_store.Far[s0 + L * R:s0 + L * R + tcap]
    return I, stl, tags, M, tn, tcap

def to_pairs(I, stl, L, ytrue, keep_zero, extra_cap):
    r = 2 + 2 * int(I[1]); rn, R = int(I[r]), int(I[r + 1]); tags = I[r + 2:r + 2 + rn]
    tcap = int(I[1]); tn = int(I[0])
    M = stl[:L * R].reshape(L, R)
    tptr = np.zeros(L + 1, np.int64); et = []; mvl = []
    for t in range(L):
        for c in range(rn):
            v = M[t, c]
            if v != 0.0 or tags[c] == ytrue[t] or keep_zero[t, c]:
                et.append(tags[c]); mvl.append(v)
        tptr[t + 1] = len(et)
    ecap = len(et) + extra_cap
    etag = np.zeros(ecap, np.int32); etag[:len(et)] = et
    st = np.zeros(ecap + tcap); st[:len(et)] = mvl
    st[ecap:] = stl[L * R:]
    pairs = I[2:2 + 2 * tcap].astype(np.int64)
    return tptr, etag, st, ecap, pairs, tn

def expand_room(I, stl, L, Kc):
    r = 2 + 2 * int(I[1]); rn, R = int(I[r]), int(I[r + 1]); tags = I[r + 2:r + 2 + rn]
    out = np.zeros((L, Kc)); out[:, tags] = stl[:L * R].reshape(L, R)[:, :rn]; return out

def expand_pairs(tptr, etag, st, L, Kc):
    out = np.zeros((L, Kc))
    for t in range(L):
        for e in range(tptr[t], tptr[t + 1]):
            out[t, etag[e]] = st[e]
    return out

def bits(a):
    return np.asarray(a, dtype=np.float64).view(np.int64)

def main():
    n = int(os.environ.get("N", "10000"))
    X, Y, tags = _brown(n)
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0), labels=tags)
    m.learn_many(X, Y)
    lr = m._learner; store = lr.store; Kc = store.Kc
    rng = np.random.default_rng(1)
    E0 = np.array(lr.W.E); T0 = np.array(lr.W.T); B0 = np.array(lr.W.B)
    E1, E2 = E0.copy(), E0.copy(); T1, T2 = T0.copy(), T0.copy(); B1, B2 = B0.copy(), B0.copy()
    C = rng.random((Kc, Kc)); np.fill_diagonal(C, 0.0)
    sc, lo, sq, sqf, ap, stp, reg_fail = 0, 0, 0, 0, 0, 0, 0
    nb = 0; t0 = time.time()
    sp_score, sp_loss, sp_sq, sp_tsq = py_entry(CS.sp_score), py_entry(CS.sp_loss_lin), py_entry(CS.sp_sqnorm), py_entry(CS.sp_trans_sqnorm)
    sp_apply, sp_reg, sp_lab = py_entry(CS.sp_apply), py_entry(CS.sp_register), py_entry(CS.sp_labeling_stat)
    est_tok = py_entry(CM.emission_sqnorm_tokens)
    for s in store.slots():
        b = store.block(s); L = b["L"]; y = np.asarray(b["ytrue"]).astype(np.int32)
        tok_ptr, fidx, fval, G = b["tok_ptr"], np.asarray(b["fidx"]), b["fval"], b["gram"]
        if b["dense_row"]:
            fidx = fidx[:0]
        I, stl, rtags, M, tn, tcap = room_local(store, s, L + 2)
        rn = len(rtags); R = int(I[2 + 2 * tcap + 1])
        keep_zero = rng.random((L, rn)) < 0.05   # some registered-at-0 entries
        # a few values set to exactly +0.0 / -0.0 in both layouts (entries kept registered)
        z = (rng.random((L, rn)) < 0.03) & (M != 0)
        Mv = stl[:L * R].reshape(L, R)
        Mv[:, :rn][z] = np.where(rng.random(z.sum()) < 0.5, 0.0, -0.0)
        keep_zero |= z
        tptr, etag, stp_, ecap, pairs, _ = to_pairs(I, stl, L, y, keep_zero, L + 2)
        S = rng.standard_normal((L, Kc)); S[rng.random((L, Kc)) < 0.1] = 0.0
        T = rng.standard_normal((Kc, Kc)); B = rng.standard_normal((2, Kc))
        scale = 0.37
        a1 = sp_score(S, T, B, scale, stl, L, Kc, Kc, True, I, 0); a2 = pp_score(S, T, B, scale, stp_, L, True, tptr, etag, ecap, pairs, tn)
        sc += bits(a1) != bits(a2)
        Ki = int(store.meta[s, KL.M_KI])
        a1 = sp_loss(stl, y, C, L, Ki, I, 0); a2 = pp_loss_lin(stp_, y, C, L, Ki, tptr, etag)
        lo += bits(a1) != bits(a2)
        a1 = sp_sq(G, stl, L, Kc, Kc, True, I, 0)
        a2 = pp_trans_sqnorm(pp_emission_sqnorm(G, stp_, L, tptr, etag), stp_, L, True, tptr, etag, ecap, tn)
        sq += bits(a1) != bits(a2)
        a1 = sp_tsq(est_tok(tok_ptr, fidx, fval, stl, L, rn, R), stl, L, Kc, Kc, True, I, 0)
        a2 = pp_trans_sqnorm(pp_emission_sqnorm_tokens(tok_ptr, fidx, fval, stp_, L, tptr, etag), stp_, L, True, tptr, etag, ecap, tn)
        sqf += bits(a1) != bits(a2)
        coef = float(rng.standard_normal())
        sp_apply((E1, T1, B1), (tok_ptr, fidx, fval), stl, L, Kc, Kc, coef, True, I, 0)
        pp_apply(E2, T2, B2, tok_ptr, fidx, fval, stp_, L, coef, True, tptr, etag, ecap, pairs, tn)
        # a step: register the truth and a perturbed labeling, d = -st + s(y) - s(lab), st += gamma d
        lab = y.copy(); ch = rng.random(L) < 0.3; lab[ch] = rng.integers(0, Kc, ch.sum())
        ok1 = sp_reg(I, 0, stl, stl[:0], y, L) and sp_reg(I, 0, stl, stl[:0], lab, L)
        zz = stp_[:0]
        ok2 = pp_register(tptr, etag, stp_, zz, ecap, y, L) and pp_register(tptr, etag, stp_, zz, ecap, lab, L)
        if not (ok1 and ok2):
            reg_fail += 1; continue
        # transition pairs registered by sp_register: mirror them into the pairs copy
        tn = int(I[0]); pairs = I[2:2 + 2 * tcap].astype(np.int64)
        r = 2 + 2 * tcap; R = int(I[r + 1])
        d1 = -stl.copy(); d2 = -stp_.copy()
        sp_lab(I, 0, y, L, d1, 1.0); sp_lab(I, 0, lab, L, d1, -1.0)
        pp_emission_stat(tptr, etag, y, L, d2, 1.0); pp_emission_stat(tptr, etag, lab, L, d2, -1.0)
        d2[ecap:] = d1[L * R:]   # (TV: the same code as today)
        q1 = sp_sq(G, d1, L, Kc, Kc, True, I, 0)
        q2 = pp_trans_sqnorm(pp_emission_sqnorm(G, d2, L, tptr, etag), d2, L, True, tptr, etag, ecap, tn)
        gamma = 1.0 if rng.random() < 0.3 else min(1.0, abs(float(rng.standard_normal())) / max(q1, 1e-300))
        stl += gamma * d1; stp_ += gamma * d2
        bad = bits(q1) != bits(q2)
        bad |= np.any(bits(expand_room(I, stl, L, Kc)) != bits(expand_pairs(tptr, etag, stp_, L, Kc)))
        bad |= bits(sp_score(S, T, B, scale, stl, L, Kc, Kc, True, I, 0)) != bits(pp_score(S, T, B, scale, stp_, L, True, tptr, etag, ecap, pairs, tn))
        bad |= bits(sp_sq(G, stl, L, Kc, Kc, True, I, 0)) != bits(pp_trans_sqnorm(pp_emission_sqnorm(G, stp_, L, tptr, etag), stp_, L, True, tptr, etag, ecap, tn))
        stp += bool(bad)
        sp_apply((E1, T1, B1), (tok_ptr, fidx, fval), d1, L, Kc, Kc, gamma, True, I, 0)
        pp_apply(E2, T2, B2, tok_ptr, fidx, fval, d2, L, gamma, True, tptr, etag, ecap, pairs, tn)
        nb += 1
    print("blocks", nb, "reg_fail", reg_fail, "mismatches: score", sc, "loss_lin", lo, "sqnorm(G)", sq, "sqnorm(tokens)", sqf,
          "step", stp, "| apply E", int(np.sum(bits(E1) != bits(E2))), "T", int(np.sum(bits(T1) != bits(T2))),
          "B", int(np.sum(bits(B1) != bits(B2))), "| E changed vs start", int(np.sum(E1 != E0)), "%.0fs" % (time.time() - t0))

@njit
def run_room(I, koff, F, soff, ssz, Ls, G, goff, S, T, B, E, tok, fidx, fval, toff, foff, Kc, d, reps):
    v = 0.0
    for _ in range(reps):
        for b in range(Ls.shape[0]):
            L = Ls[b]; st = F[soff[b]:soff[b] + ssz[b]]; Gb = G[goff[b]:goff[b] + L * L].reshape((L, L))
            kp = koff[b]
            v += CS.sp_score(S, T, B, 0.5, st, L, Kc, Kc, True, I, kp)
            v += CS.sp_sqnorm(Gb, st, L, Kc, Kc, True, I, kp)
            dd = d[:ssz[b]]
            for q in range(ssz[b]):
                dd[q] = -st[q]
            for q in range(ssz[b]):
                v += dd[q] * 1e-9
            CS.sp_apply((E, T, B), (tok[toff[b]:toff[b] + L + 1], fidx, fval), st, L, Kc, Kc, 1e-12, True, I, kp)
    return v

@njit
def run_pairs(TP, tpo, ET, eo, ecaps, P, po, tns, F, soff, ssz, Ls, G, goff, S, T, B, E, tok, fidx, fval, toff, d, reps):
    v = 0.0
    for _ in range(reps):
        for b in range(Ls.shape[0]):
            L = Ls[b]; st = F[soff[b]:soff[b] + ssz[b]]; Gb = G[goff[b]:goff[b] + L * L].reshape((L, L))
            tptr = TP[tpo[b]:tpo[b] + L + 1]; etag = ET[eo[b]:eo[b] + ecaps[b]]; pairs = P[po[b]:po[b + 1]]
            v += pp_score(S, T, B, 0.5, st, L, True, tptr, etag, ecaps[b], pairs, tns[b])
            v += pp_trans_sqnorm(pp_emission_sqnorm(Gb, st, L, tptr, etag), st, L, True, tptr, etag, ecaps[b], tns[b])
            dd = d[:ssz[b]]
            for q in range(ssz[b]):
                dd[q] = -st[q]
            for q in range(ssz[b]):
                v += dd[q] * 1e-9
            pp_apply(E, T, B, tok[toff[b]:toff[b] + L + 1], fidx, fval, st, L, 1e-12, True, tptr, etag, ecaps[b], pairs, tns[b])
    return v

def timing():
    X, Y, tags = _brown(10000)
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0), labels=tags)
    m.learn_many(X, Y)
    store = m._learner.store; Kc = store.Kc
    rng = np.random.default_rng(0)
    Ir, koff, Fr, soff, ssz, Ls, Gs, goff = [], [], [], [], [], [], [], []
    TP, tpo, ET, eo, ecaps, P, po, tns, Fp, spo, sps = [], [], [], [], [], [], [0], [], [], [], []
    toks, fid, fv, toff = [], [], [], []
    io = fo = go = to = fo2 = to_tok = 0; tp_o = e_o = p_o = sp_o = 0
    for s in store.slots():
        b = store.block(s); L = b["L"]; y = np.asarray(b["ytrue"])
        I, stl, rtags, M, tn, tcap = room_local(store, s, -1)   # the room as stored (rcap)
        Ir.append(I); koff.append(io); io += len(I)
        Fr.append(stl); soff.append(fo); ssz.append(len(stl)); fo += len(stl)
        Ls.append(L); g = np.asarray(b["gram"]).ravel(); Gs.append(g); goff.append(go); go += len(g)
        tp = np.asarray(b["tok_ptr"]).astype(np.int64); nb = tp[-1] - tp[0]
        toks.append(tp - tp[0] + to); fid.append(np.asarray(b["fidx"])); fv.append(np.asarray(b["fval"])); toff.append(to_tok); to_tok += L + 1; to += nb
        tptr, etag, stp_, ecap, pairs, _ = to_pairs(I, stl, L, y, np.zeros((L, len(rtags)), bool), L + 4)
        TP.append(tptr); tpo.append(tp_o); tp_o += L + 1
        ET.append(etag); eo.append(e_o); e_o += ecap; ecaps.append(ecap)
        P.append(pairs); p_o += len(pairs); po.append(p_o); tns.append(tn)
        Fp.append(stp_); spo.append(sp_o); sps.append(len(stp_)); sp_o += len(stp_)
    cat = np.concatenate; a64 = lambda x: np.asarray(x, np.int64)
    Ir, Fr, Gs, Fp = cat(Ir).astype(np.int32), cat(Fr), cat(Gs), cat(Fp)
    toks, fid, fv = cat(toks), cat(fid).astype(np.int32), cat(fv)
    TP, ET, P = cat(TP), cat(ET), cat(P)
    E = np.zeros((max(int(fid.max()) + 1, 1), Kc)); T = rng.standard_normal((Kc, Kc)); B = rng.standard_normal((2, Kc))
    S = rng.standard_normal((200, Kc))
    d = np.zeros(max(max(ssz), max(sps)) + 1)
    print("room floats (M|TV) MB", Fr.nbytes / 2**20, "pairs floats (MV cap L+4|TV) MB", Fp.nbytes / 2**20, "+ tptr/etag ints MB", (TP.nbytes / 2 + ET.nbytes) / 2**20)
    args_r = (Ir, a64(koff), Fr, a64(soff), a64(ssz), a64(Ls), Gs, a64(goff), S, T, B, E, toks, fid, fv, a64(toff), 0, Kc, d)
    po_ = a64(po)
    run_room(*args_r[:16], 0, Kc, d, 1); run_pairs(TP, a64(tpo), ET, a64(eo), a64(ecaps), P, po_, a64(tns), Fp, a64(spo), a64(sps), a64(Ls), Gs, a64(goff), S, T, B, E, toks, fid, fv, a64(toff), d, 1)
    for rep in range(3):
        c = time.process_time(); run_room(*args_r[:16], 0, Kc, d, 5); cr = time.process_time() - c
        c = time.process_time(); run_pairs(TP, a64(tpo), ET, a64(eo), a64(ecaps), P, po_, a64(tns), Fp, a64(spo), a64(sps), a64(Ls), Gs, a64(goff), S, T, B, E, toks, fid, fv, a64(toff), d, 5); cp = time.process_time() - c
        print("5 passes over 10k blocks: room CPU %.3f s, pairs CPU %.3f s" % (cr, cp))


if __name__ == "__main__":
    timing() if "--time" in sys.argv else main()
