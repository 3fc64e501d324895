"""Triton's integer arithmetic on symbolic values: operators, comparisons and casts.

A value is one mathematical (unbounded) integer term; Triton's fixed-width result agrees
with it as long as it fits the dtype.  ``+ - *`` therefore produce values marked ``arith``
and raise nothing; the no-wrap obligation is raised where such a value is *observed*
(:meth:`~.run_state.RunState.observe`: compared, divided, used as an offset, stored, cast,
widened).  Division is C's (truncating), with a divide-by-zero obligation; a cast or a
store into a narrower or differently signed dtype raises a fits-the-dtype obligation.
Python constexprs fold as Python does.
"""

from __future__ import annotations

import ast

import z3

from . import floats, truncation
from .run_state import RunState
from .values import INT1, INT32, DType, Ptr, Unsupported, V, as_bool, as_int, broadcast, lane_range, lift, lift_pair, promote

_PY_BINOPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b, ast.BitAnd: lambda a, b: a & b,
    ast.BitOr: lambda a, b: a | b, ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b,
}
_PY_CMPS = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
            ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}


def tdiv(a, b):
    """C (truncating) integer division, as Triton computes ``//`` on integers."""
    if z3.is_int_value(b) and b.as_long() > 0:
        return z3.If(a >= 0, a / b, -((-a) / b))
    return z3.If(b > 0, z3.If(a >= 0, a / b, -((-a) / b)), z3.If(a >= 0, -(a / (-b)), (-a) / (-b)))


def tmod(a, b):
    """C remainder: ``a - b * tdiv(a, b)`` (sign of the dividend)."""
    return a - b * tdiv(a, b)


def binop(ex: RunState, op, a, b, line):
    """``a op b`` for an ``ast`` operator class; pointers take offsets."""
    if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
        return _PY_BINOPS[op](a, b)
    if isinstance(a, Ptr) or isinstance(b, Ptr):
        if op is ast.Add or (op is ast.Sub and isinstance(a, Ptr) and not isinstance(b, Ptr)):
            p, o = (a, b) if isinstance(a, Ptr) else (b, a)
            if isinstance(o, Ptr):
                raise Unsupported("pointer + pointer", line)
            o = lift(o, INT32)
            if o.is_bool_expr():
                raise Unsupported("pointer + boolean", line)
            return Ptr(p.tensor, binop(ex, op, p.off, o, line))
        raise Unsupported(f"pointer arithmetic {op.__name__}", line)
    if floats.involved(a, b):
        return floats.arith(a, b)
    av, bv = lift_pair(a, b)
    (av2, bv2), shape = broadcast(av, bv)
    x, y = av2.e, bv2.e
    if op in (ast.BitAnd, ast.BitOr, ast.BitXor) and z3.is_bool(x) and z3.is_bool(y):
        e = {ast.BitAnd: z3.And, ast.BitOr: z3.Or, ast.BitXor: z3.Xor}[op](x, y)
        return V(e, shape, INT1)
    dt = promote(av.dtype, bv.dtype)
    widen(ex, av2, dt, line)
    widen(ex, bv2, dt, line)
    x, y = as_int(x), as_int(y)
    if op in (ast.Add, ast.Sub, ast.Mult):
        e = {ast.Add: x + y, ast.Sub: x - y, ast.Mult: x * y}[op]
        tag = truncation.sum_tag(ex, av2, bv2) if op is ast.Add else None
        return V(e, shape, dt, True, tag)
    if op in (ast.FloorDiv, ast.Mod):
        ex.observe(av2, line, "dividend")
        ex.observe(bv2, line, "divisor")
        ex.raise_ob("divzero", line, y != 0, shape, "divisor is not zero")
        if _nonneg_div(ex, x, y, shape, line):
            # both operands proved non-negative / positive here: C division is floor division
            return V(x / y if op is ast.FloorDiv else x % y, shape, dt)
        return V(tdiv(x, y) if op is ast.FloorDiv else tmod(x, y), shape, dt)
    if op is ast.LShift:
        ex.observe(bv2, line, "shift amount")
        ex.raise_ob("wrap", line, z3.And(y >= 0, y < dt.bits), shape, f"shift amount in [0, {dt.bits})")
        if z3.is_int_value(x) and z3.is_int_value(y) and 0 <= y.as_long() < dt.bits:
            # constants (``1 << arange(0, 1)`` is ``1 << 0``): the exact value, whose fit in
            # its dtype is then observed like any arithmetic result; ``shl`` stays for the rest
            return V(z3.IntVal(x.as_long() << y.as_long()), shape, dt, True)
        return V(shl(ex)(x, y), shape, dt)
    raise Unsupported(f"operator {op.__name__}", line)


def compare(ex: RunState, op, a, b, line):
    """``a op b`` for an ``ast`` comparison class (a boolean block)."""
    if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
        return _PY_CMPS[op](a, b)
    if floats.involved(a, b):
        return floats.compare(a, b)
    av, bv = lift_pair(a, b)
    (av2, bv2), shape = broadcast(av, bv)
    ex.observe(av2, line, "comparison operand")
    ex.observe(bv2, line, "comparison operand")
    x, y = av2.e, bv2.e
    if z3.is_bool(x) != z3.is_bool(y):
        x, y = as_int(x), as_int(y)
    e = {ast.Lt: x < y if not z3.is_bool(x) else None, ast.LtE: x <= y if not z3.is_bool(x) else None,
         ast.Gt: x > y if not z3.is_bool(x) else None, ast.GtE: x >= y if not z3.is_bool(x) else None,
         ast.Eq: x == y, ast.NotEq: x != y}.get(op)
    if e is None:
        raise Unsupported(f"comparison {op.__name__}", line)
    if op is ast.Lt:
        truncation.note_comparison(ex, av2, bv2, shape, line)
    return V(e, shape, INT1)


def cast(ex: RunState, v, dt, line):
    """``v.to(dt)`` / ``tl.cast``: the value must fit a narrower or differently signed dtype
    (on the active lanes of the store it feeds, if any)."""
    if isinstance(v, (int, bool)):
        v = lift(v)
    if not isinstance(dt, DType):
        raise Unsupported(f"cast to {dt!r}", line)
    if isinstance(v, Ptr):
        raise Unsupported("pointer cast", line)
    if dt.is_bool:
        return V(as_bool(v.e), v.shape, INT1, tag=v.tag)
    e = as_int(v.e)
    active = True
    m = ex.store_mask
    if m is not None and m.rank == v.rank and all(a == b or a == 1 for a, b in zip(m.shape, v.shape)):
        active = as_bool(m.e)  # feeds a masked store: only its active lanes matter
    ex.observe(v, line, "cast operand", active=active)
    if not v.dtype.is_bool and (dt.bits < v.dtype.bits or dt.signed != v.dtype.signed):
        ex.raise_ob("cast", line, z3.And(e >= dt.lo(), e < dt.hi()), v.shape,
                    f"value fits {dt} (cast from {v.dtype})", active)
    return V(e, v.shape, dt, tag=v.tag)


def widen(ex: RunState, v, dt, line):
    """A narrower value that may hold a wrapped result (``int32 * int32``) is widened by
    sign extension of its wrapped bits: it must fit its own dtype before the wider
    operation sees it."""
    if v.arith and not v.dtype.is_bool and not dt.is_bool and v.dtype.bits < dt.bits:
        ex.observe(v, line, f"{v.dtype} operand widened to {dt}")


def shl(ex: RunState):
    """The run's one uninterpreted ``shl(x, y)`` (``x << y``; reductions know its bit masks)."""
    f = ex.functions.get("shl")
    if f is None:
        f = z3.Function("shl", z3.IntSort(), z3.IntSort(), z3.IntSort())
        ex.functions["shl"] = (f, lambda app: {})
    else:
        f = f[0]
    return f


def _nonneg_div(ex: RunState, x, y, shape, line):
    if ex.oracle is None:
        return False
    hyps = {label: c for label, c in ex.path_cond}
    hyps.update(lane_range(shape))
    proof = ex.ask(f"floor-division@{line}", hyps, z3.And(x >= 0, y > 0))
    if proof is None:
        return False
    ex.side_proofs.append(proof)
    return True
