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
