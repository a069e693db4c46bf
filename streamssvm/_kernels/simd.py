"""Vector arithmetic the kernels cannot get from numba's compiler: numba turns LLVM's SLP
vectorizer off (``NUMBA_SLP_VECTORIZE=0``), so a loop that keeps one accumulator per class in
registers (``common._dense_scores``) runs scalar, one multiply and one add per class and value.
The intrinsic below writes that loop with the class accumulators as one LLVM vector of
``LANES`` doubles: lane k does exactly the operations of class k's scalar accumulator, in the
same order (a product ``(fval[p] * coef) * E[p - a, k]``, then an add; no fused multiply-add:
the instructions carry no fast-math flags, so LLVM may not contract them), so the scores are the
same to the bit on every target, only several classes move per instruction.
"""
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

#: classes per pass over a dense row (two 512-bit registers; LLVM splits the vector as the
#: target needs; lanes past the classes left are masked off, never read or written)
LANES = 16


def _scores_codegen(indexed):
    """The code of :func:`vec_scores` (``indexed`` False: row p of the values is row p - a of E)
    and of :func:`vec_scores_at` (True: row ``fidx[p]`` of E, ``fidx`` int32)."""

    def codegen(context, builder, signature, args):
        if indexed:
            eptr, estride, iptr, fptr, a, b, coef, sptr, r = args
        else:
            eptr, estride, fptr, a, b, coef, sptr, r = args
        dbl, i64, i32 = ir.DoubleType(), ir.IntType(64), ir.IntType(32)
        vt = ir.VectorType(dbl, LANES)
        mt = ir.VectorType(ir.IntType(1), LANES)
        splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
        name = f"llvm.masked.load.v{LANES}f64.p0"
        mod = builder.module
        mload = mod.globals.get(name) or ir.Function(mod, ir.FunctionType(vt, [vt.as_pointer(), i32, mt, vt]),
                                                     name=name)
        rv = builder.insert_element(ir.Constant(ir.VectorType(i64, LANES), ir.Undefined), r, ir.Constant(i32, 0))
        rv = builder.shuffle_vector(rv, rv, splat)
        mask = builder.icmp_signed("<", ir.Constant(ir.VectorType(i64, LANES), list(range(LANES))), rv)
        zero = ir.Constant(vt, [0.0] * LANES)
        fbase = builder.inttoptr(fptr, dbl.as_pointer())
        ebase = builder.inttoptr(eptr, ir.IntType(8).as_pointer())
        ibase = builder.inttoptr(iptr, i32.as_pointer()) if indexed else None
        pre = builder.block
        head = builder.append_basic_block("vs.head")
        body = builder.append_basic_block("vs.body")
        done = builder.append_basic_block("vs.done")
        builder.branch(head)
        builder.position_at_end(head)
        p = builder.phi(i64)
        acc = builder.phi(vt)
        p.add_incoming(a, pre)
        acc.add_incoming(zero, pre)
        builder.cbranch(builder.icmp_signed("<", p, b), body, done)
        builder.position_at_end(body)
        v = builder.fmul(builder.load(builder.gep(fbase, [p])), coef)
        vv = builder.insert_element(ir.Constant(vt, ir.Undefined), v, ir.Constant(i32, 0))
        vv = builder.shuffle_vector(vv, vv, splat)
        rowi = builder.sext(builder.load(builder.gep(ibase, [p])), i64) if indexed else builder.sub(p, a)
        row = builder.bitcast(builder.gep(ebase, [builder.mul(rowi, estride)]), vt.as_pointer())
        w = builder.call(mload, [row, ir.Constant(i32, 8), mask, zero])
        nxt = builder.fadd(acc, builder.fmul(vv, w))
        p.add_incoming(builder.add(p, ir.Constant(i64, 1)), body)
        acc.add_incoming(nxt, body)
        builder.branch(head)
        builder.position_at_end(done)
        sbase = builder.inttoptr(sptr, dbl.as_pointer())
        for k in range(LANES):
            with builder.if_then(builder.icmp_signed("<", ir.Constant(i64, k), r)):
                q = builder.gep(sbase, [ir.Constant(i64, k)])
                builder.store(builder.fadd(builder.load(q), builder.extract_element(acc, ir.Constant(i32, k))), q)
        return context.get_dummy_value()

    return codegen


@intrinsic
def vec_scores(typingctx, eptr, estride, fptr, a, b, coef, sptr, r):
    """S[k] += sum_p (fval[p] * coef) * E_row(p)[k] for k < r <= LANES, p = a..b-1 in order:
    ``eptr`` the address of E[0, k0] (rows ``estride`` bytes apart, the classes contiguous
    doubles), ``fptr`` of fval[0] (contiguous doubles), ``sptr`` of S[t, k0] (contiguous);
    E_row(p) is row p - a (a dense row)."""
    sig = types.void(types.uintp, types.intp, types.uintp, types.intp, types.intp, types.float64, types.uintp,
                     types.intp)
    return sig, _scores_codegen(False)


@intrinsic
def vec_scores_at(typingctx, eptr, estride, iptr, fptr, a, b, coef, sptr, r):
    """:func:`vec_scores` of a CSR row: E_row(p) is row ``fidx[p]`` of E, ``iptr`` the address
    of fidx[0] (contiguous int32)."""
    sig = types.void(types.uintp, types.intp, types.uintp, types.uintp, types.intp, types.intp, types.float64,
                     types.uintp, types.intp)
    return sig, _scores_codegen(True)


#: features per block of the class-major scores (:func:`vec_scores_cm`): one 8 x 8 transpose of
#: doubles per block and group of eight classes
CM_BLOCK = 8


def _transpose8(builder, rows):
    """The 8 x 8 transpose of eight <8 x double> rows (row i, lane l -> vector l, lane i): three
    stages of four pairs of two-input shuffles, each swapping the off-diagonal blocks of size
    1, 2 and 4."""
    i32 = ir.IntType(32)
    v = list(rows)
    s = 1
    while s < 8:
        nv = list(v)
        for i in range(8):
            if i & s:
                continue
            a, b = v[i], v[i + s]
            lo = [l if not l & s else 8 + (l ^ s) for l in range(8)]
            hi = [l ^ s if not l & s else 8 + l for l in range(8)]
            nv[i] = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(i32, 8), lo))
            nv[i + s] = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(i32, 8), hi))
        v = nv
        s *= 2
    return v


def _scores_cm_codegen(nhi):
    """The code of a :func:`vec_scores_cm` variant: eight classes transposed in registers, and
    ``nhi`` (0, 2, 4 or 8) more in a second group (rows past ``nhi`` are undefined values, which
    LLVM folds out of the transpose; their lanes are never stored)."""
    groups = (8,) if nhi == 0 else (8, nhi)

    def codegen(context, builder, signature, args):
        eptr, rstride, fptr, n, coef, sptr, r = args
        dbl, i64, i32, i8 = ir.DoubleType(), ir.IntType(64), ir.IntType(32), ir.IntType(8)
        vt = ir.VectorType(dbl, 8)
        mt = ir.VectorType(ir.IntType(1), 8)
        undef = ir.Constant(vt, ir.Undefined)
        splat = ir.Constant(ir.VectorType(i32, 8), [0] * 8)
        mod = builder.module
        name = "llvm.masked.load.v8f64.p0"
        mload = mod.globals.get(name) or ir.Function(mod, ir.FunctionType(vt, [vt.as_pointer(), i32, mt, vt]),
                                                     name=name)
        name = "llvm.masked.store.v8f64.p0"
        mstore = mod.globals.get(name) or ir.Function(
            mod, ir.FunctionType(ir.VoidType(), [vt, vt.as_pointer(), i32, mt]), name=name)
        zero = ir.Constant(vt, [0.0] * 8)
        rv = builder.insert_element(ir.Constant(ir.VectorType(i64, 8), ir.Undefined), r, ir.Constant(i32, 0))
        rv = builder.shuffle_vector(rv, rv, splat)
        G = len(groups)
        masks = [builder.icmp_signed("<", ir.Constant(ir.VectorType(i64, 8), list(range(8 * g, 8 * g + 8))), rv)
                 for g in range(G)]
        sbase = builder.inttoptr(sptr, dbl.as_pointer())
        spos = [builder.bitcast(builder.gep(sbase, [ir.Constant(i64, 8 * g)]), vt.as_pointer()) for g in range(G)]
        acc0 = [builder.call(mload, [spos[g], ir.Constant(i32, 8), masks[g], zero]) for g in range(G)]
        fbase = builder.inttoptr(fptr, dbl.as_pointer())
        ebase = builder.inttoptr(eptr, i8.as_pointer())
        one = ir.Constant(i64, 1)
        rm1 = builder.sub(r, one)
        # row k: class min(k, r - 1) (a row past the classes repeats the last one: never stored)
        rowp = []
        for g in range(G):
            for k in range(groups[g]):
                kk = ir.Constant(i64, 8 * g + k)
                c = builder.select(builder.icmp_signed("<", kk, r), kk, rm1)
                rowp.append(builder.gep(ebase, [builder.mul(c, rstride)]))
        nblk = builder.sdiv(n, ir.Constant(i64, CM_BLOCK))
        tail0 = builder.mul(nblk, ir.Constant(i64, CM_BLOCK))
        pre = builder.block
        head = builder.append_basic_block("cm.head")
        body = builder.append_basic_block("cm.body")
        thead = builder.append_basic_block("cm.thead")
        tbody = builder.append_basic_block("cm.tbody")
        done = builder.append_basic_block("cm.done")
        builder.branch(head)
        builder.position_at_end(head)
        blk = builder.phi(i64)
        accs = [builder.phi(vt) for _ in range(G)]
        blk.add_incoming(ir.Constant(i64, 0), pre)
        for g in range(G):
            accs[g].add_incoming(acc0[g], pre)
        builder.cbranch(builder.icmp_signed("<", blk, nblk), body, thead)
        builder.position_at_end(body)
        p0 = builder.mul(blk, ir.Constant(i64, CM_BLOCK))
        off = builder.mul(p0, ir.Constant(i64, 8))
        xs = builder.load(builder.bitcast(builder.gep(fbase, [p0]), vt.as_pointer()), align=8)
        cv = builder.shuffle_vector(builder.insert_element(undef, coef, ir.Constant(i32, 0)), undef, splat)
        vs = builder.fmul(xs, cv)   # lane q: fval[p0 + q] * coef
        nxt = []
        for g in range(G):
            # the products e_k[p] * v_p (a product is commutative to the bit) in the class rows, then
            # transposed: no broadcast of each value
            rows = [builder.fmul(builder.load(builder.bitcast(builder.gep(rowp[8 * g + k], [off]), vt.as_pointer()),
                                              align=8), vs)
                    if k < groups[g] else undef for k in range(8)]
            cols = _transpose8(builder, rows)   # cols[q][k]: class 8 g + k, feature p0 + q
            acc = accs[g]
            for q in range(8):
                acc = builder.fadd(acc, cols[q])
            nxt.append(acc)
        blk.add_incoming(builder.add(blk, one), body)
        for g in range(G):
            accs[g].add_incoming(nxt[g], body)
        builder.branch(head)
        # the last n % CM_BLOCK features, one at a time
        builder.position_at_end(thead)
        p = builder.phi(i64)
        taccs = [builder.phi(vt) for _ in range(G)]
        p.add_incoming(tail0, head)
        for g in range(G):
            taccs[g].add_incoming(accs[g], head)
        builder.cbranch(builder.icmp_signed("<", p, n), tbody, done)
        builder.position_at_end(tbody)
        v = builder.fmul(builder.load(builder.gep(fbase, [p])), coef)
        vv = builder.shuffle_vector(builder.insert_element(undef, v, ir.Constant(i32, 0)), undef, splat)
        off = builder.mul(p, ir.Constant(i64, 8))
        tnxt = []
        for g in range(G):
            col = undef
            for k in range(groups[g]):
                e = builder.load(builder.bitcast(builder.gep(rowp[8 * g + k], [off]), dbl.as_pointer()))
                col = builder.insert_element(col, e, ir.Constant(i32, k))
            tnxt.append(builder.fadd(taccs[g], builder.fmul(vv, col)))
        p.add_incoming(builder.add(p, one), tbody)
        for g in range(G):
            taccs[g].add_incoming(tnxt[g], tbody)
        builder.branch(thead)
        builder.position_at_end(done)
        for g in range(G):
            builder.call(mstore, [taccs[g], spos[g], ir.Constant(i32, 8), masks[g]])
        return context.get_dummy_value()

    return codegen


_CM_DOC = """S[k] = S[k] + sum_p (fval[p] * coef) * Et[k, p] for k < r, p = 0..n-1 in order, on a
class-major Et (``eptr`` the address of Et[k0, 0], class rows ``rstride`` bytes apart, the
features contiguous doubles; ``fptr`` of the row's first value, ``sptr`` of S[t, k0],
contiguous), for r <= {} classes: lane k of a vector of accumulators does exactly the
operations of class k's scalar sum (a product, then an add, in feature order; no fused
multiply-add), the features read eight at a time from each class row and turned into vectors
over the classes by an 8 x 8 transpose in registers, so the sums are those of
``multiclass.mc_scores_cm``'s scalar accumulators to the bit."""


def _scores_cm(nhi):
    def typer(typingctx, eptr, rstride, fptr, n, coef, sptr, r):
        sig = types.void(types.uintp, types.intp, types.uintp, types.intp, types.float64, types.uintp, types.intp)
        return sig, _scores_cm_codegen(nhi)
    typer.__name__ = typer.__qualname__ = f"vec_scores_cm{8 + nhi}"
    typer.__doc__ = _CM_DOC.format(8 + nhi)
    return intrinsic(typer)


#: :data:`_CM_DOC` for up to 8, 10, 12 and 16 classes (the second group of 0, 2, 4 or 8 rows)
vec_scores_cm8, vec_scores_cm10, vec_scores_cm12, vec_scores_cm16 = (_scores_cm(h) for h in (0, 2, 4, 8))
