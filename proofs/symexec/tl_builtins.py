"""The stand-in for the ``triton.language`` functions the kernels call.

:data:`BUILTINS` maps a ``tl.<name>`` to ``f(run, line, *args, **kwargs)``; a name missing
from it is ``Unsupported``.  Loads and stores record an :class:`~.values.Access` (the bounds,
footprint and race obligations are built from them by obligations.py and footprint.py),
observe their offsets, and raise the truncation bounds of their masks.
"""

from __future__ import annotations

import ast

import z3

from . import arith, floats, memory, truncation
from .reductions import reduce_axis
from .run_state import RunState
from .values import (
    INT32, LANES, Access, LaneTag, LoadSource, Ptr, SymDim, Unsupported, V, as_bool, as_int, broadcast, fresh_name, lift,
    lift_pair, promote,
)


def _observe_offset(ex: RunState, off, line, mask_e, shape):
    # int64 offsets: in bounds (checked per access) and numel < 2^63 imply no wrap
    if off.dtype.bits < 64:
        ex.observe(off, line, "pointer offset", active=mask_e)
    truncation.mask_bounds(ex, mask_e, shape, line)


def program_id(ex: RunState, line, axis=0):
    return V(ex.pid[axis], (), INT32)


def num_programs(ex: RunState, line, axis=0):
    return V(ex.grid[axis], (), INT32)


def arange(ex: RunState, line, start, end):
    if isinstance(end, V) and start == 0:
        n = _symbolic_length(ex, end, line)
        return V(LANES[0], (n,), INT32, tag=LaneTag(0, n, 0, "arange"))
    if not (isinstance(start, int) and isinstance(end, int)):
        raise Unsupported("tl.arange with non-constexpr bounds", line)
    n = end - start
    if n == 1:
        return V(z3.IntVal(start), (1,), INT32)
    return V(LANES[0] + start if start else LANES[0], (n,), INT32,
             tag=LaneTag(0, n, 0, "arange") if start == 0 else None)


def _symbolic_length(ex: RunState, end: V, line, what: str = "tl.arange with non-constexpr bounds") -> SymDim:
    """``tl.arange(0, B)`` with ``B`` a constexpr given as a Z3 term: a lane of ``0 <= lane < B``
    (the model states B's values as a precondition).  Only the constexpr itself: a runtime
    value, or arithmetic on the constexpr, is no arange bound (nor block shape) Triton compiles."""
    for name, v in ex.symbolic_constexprs.items():
        if end is v or (end.shape == () and end.e.eq(v.e)):
            return SymDim(v.e, name)
    raise Unsupported(what, line)


def cdiv(ex: RunState, line, a, b):
    return arith.binop(ex, ast.FloorDiv, arith.binop(ex, ast.Sub, arith.binop(ex, ast.Add, a, b, line), 1, line),
                       b, line)


def _shape_arg(ex: RunState, shape, line):
    """A block shape: ints, and symbolic constexprs as :class:`SymDim` lengths (a fill is one
    value at every lane, so its lanes need no enumeration; its axis is the arange's of that
    constexpr, so the two broadcast lane for lane)."""
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    what = f"block shape {shape!r} that is neither an int nor a symbolic constexpr"
    out = []
    for s in shape:
        if isinstance(s, V):
            s = _symbolic_length(ex, s, line, what)
        elif not isinstance(s, int):
            raise Unsupported(what, line)
        out.append(s)
    return tuple(out)


def zeros(ex: RunState, line, shape, dtype=None):
    return V(z3.BoolVal(False) if dtype.is_bool else z3.IntVal(0), _shape_arg(ex, shape, line), dtype)


def full(ex: RunState, line, shape, value, dtype=None):
    if floats.is_float(value) or (dtype is not None and dtype.is_float):
        return floats.full(_shape_arg(ex, shape, line), dtype)
    if not isinstance(value, (int, bool)):
        raise Unsupported("tl.full with a symbolic value", line)
    e = z3.BoolVal(bool(value)) if dtype.is_bool else z3.IntVal(int(value))
    return V(e, _shape_arg(ex, shape, line), dtype)


def broadcast_to(ex: RunState, line, v, shape):
    shape = _shape_arg(ex, shape, line)
    target = V(z3.IntVal(0), shape, INT32)
    (out, _), s = broadcast(v, target)
    if s != shape:
        raise Unsupported(f"broadcast_to {v.shape} -> {shape}", line)
    return V(out.e, shape, v.dtype, v.arith)


def where(ex: RunState, line, c, a, b):
    if floats.involved(a, b):
        return floats.pick(c, a, b)
    cv = lift(c)
    av, bv = lift_pair(a, b)
    (cv2, av2, bv2), shape = broadcast(cv, av, bv)
    x, y = av2.e, bv2.e
    if z3.is_bool(x) != z3.is_bool(y):
        x, y = as_int(x), as_int(y)
    dt = promote(av.dtype, bv.dtype) if not (isinstance(a, int) or isinstance(b, int)) else \
        (bv.dtype if isinstance(a, int) else av.dtype)
    arith.widen(ex, av2, dt, line)
    arith.widen(ex, bv2, dt, line)
    return V(z3.If(as_bool(cv2.e), x, y), shape, dt, av2.arith or bv2.arith)


def device_assert(ex: RunState, line, cond, msg=""):
    c = lift(cond)
    ex.raise_ob("assert", line, as_bool(c.e), c.shape, f"device_assert holds: {msg}")
    if c.shape in ((), (1,)):
        ex.path_cond.append((f"device_assert@{line}", as_bool(c.e)))


def load(ex: RunState, line, ptr, mask=None, other=None, **kw):
    if kw:
        raise Unsupported(f"tl.load options {sorted(kw)}", line)
    if not isinstance(ptr, Ptr):
        raise Unsupported("tl.load of a non-pointer", line)
    parts = [ptr.off]
    if mask is not None:
        parts.append(lift(mask))
    if other is not None:
        parts.append(lift(other, ptr.tensor.dtype))
    vals, shape = broadcast(*parts)
    off_e = vals[0].e
    mask_e = as_bool(vals[1].e) if mask is not None else z3.BoolVal(True)
    _observe_offset(ex, vals[0], line, mask_e, shape)
    t = ptr.tensor
    if t.written:
        raw = memory.read(ex, t, off_e, line)   # the program's own writes, then the caller's contents
    elif t.content is None:
        raw = z3.Function(fresh_name(f"{t.name}_value@{line}"), z3.IntSort(), z3.IntSort())(off_e)
    else:
        raw = t.content(off_e)
    if t.dtype.is_bool and not z3.is_bool(raw):
        raw = raw != 0
    if mask is not None:
        oth = as_int(vals[2].e) if other is not None else z3.Int(fresh_name("undef"))
        if t.dtype.is_bool:
            oth = as_bool(oth)
        e = z3.If(mask_e, raw, oth)
    else:
        e = raw
    ex.accesses.append(Access("load", line, t, V(off_e, shape, vals[0].dtype), mask_e,
                              list(ex.path_cond), None, shape, dict(ex.cur_env)))
    source = LoadSource(t, off_e, mask_e if mask is not None else None,   # for prefix sums
                        as_int(vals[2].e) if mask is not None and other is not None else None)
    return V(e, shape, t.dtype, load=source)


def store(ex: RunState, line, ptr, value, mask=None, **kw):
    if kw:
        raise Unsupported(f"tl.store options {sorted(kw)}", line)
    if not isinstance(ptr, Ptr):
        raise Unsupported("tl.store to a non-pointer", line)
    parts = [ptr.off, lift(value, ptr.tensor.dtype)]
    if mask is not None:
        parts.append(lift(mask))
    vals, shape = broadcast(*parts)
    mask_e = as_bool(vals[2].e) if mask is not None else z3.BoolVal(True)
    _observe_offset(ex, vals[0], line, mask_e, shape)
    ex.observe(vals[1], line, "stored value", active=mask_e)
    t = ptr.tensor
    val = vals[1]
    if not t.dtype.is_bool and not val.dtype.is_bool and not t.dtype.is_float and not val.dtype.is_float \
            and (val.dtype.bits > t.dtype.bits
                                                          or val.dtype.signed != t.dtype.signed):
        e = as_int(val.e)
        ex.raise_ob("cast", line, z3.And(e >= t.dtype.lo(), e < t.dtype.hi()), shape,
                    f"stored value fits {t.dtype}", mask_e)
    ex.accesses.append(Access("store", line, t, V(vals[0].e, shape, vals[0].dtype), mask_e,
                              list(ex.path_cond), val, shape, dict(ex.cur_env)))
    memory.write(ex, t, vals[0].e, val.e, mask_e, shape)
    return None


def _reduction(kind):
    def f(ex: RunState, line, x, axis=None, **kw):
        if floats.is_float(x):
            if set(kw) - {"return_indices"}:
                raise Unsupported(f"tl.{kind} options {sorted(kw)}", line)
            return floats.reduce(ex, line, x, axis, bool(kw.get("return_indices")))
        if kw.get("return_indices"):
            raise Unsupported(f"tl.{kind}(..., return_indices=True) of an integer block", line)
        return reduce_axis(ex, line, kind, x, axis)
    return f


def _arg_reduction(kind):
    """``tl.argmax/argmin`` of a float block: the index of the attaining lane, some lane of
    the reduced axis (the values are not modelled, so neither is which lane)."""
    def f(ex: RunState, line, x, axis=None, **kw):
        if set(kw) - {"tie_break_left", "keep_dims"} or kw.get("keep_dims"):
            raise Unsupported(f"tl.arg{kind} options {sorted(kw)}", line)
        if not floats.is_float(x):
            raise Unsupported(f"tl.arg{kind} of an integer block", line)
        if isinstance(axis, int) and axis < 0:
            axis += x.rank
        return floats.reduce(ex, line, x, axis, True)[1]
    return f


def _outside_for(ex: RunState, line, *a):
    raise Unsupported("tl.static_range outside a for loop", line)


def constexpr(ex: RunState, line, x):
    return x


def _elementwise_pick(kind):
    def f(ex: RunState, line, a, b, **kw):
        if kw and set(kw) - {"propagate_nan"}:
            raise Unsupported(f"tl.{kind}imum options {sorted(kw)}", line)
        if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
            return min(a, b) if kind == "min" else max(a, b)
        if floats.involved(a, b):
            return floats.arith(a, b)
        av, bv = lift_pair(a, b)
        (av2, bv2), shape = broadcast(av, bv)
        ex.observe(av2, line, f"{kind}imum operand")
        ex.observe(bv2, line, f"{kind}imum operand")
        x, y = as_int(av2.e), as_int(bv2.e)
        e = z3.If(x <= y, x, y) if kind == "min" else z3.If(x >= y, x, y)
        return V(e, shape, promote(av.dtype, bv.dtype))
    return f


def cast(ex: RunState, line, x, dtype, **kw):
    if kw:
        raise Unsupported(f"tl.cast options {sorted(kw)}", line)
    return arith.cast(ex, x, dtype, line)


BUILTINS = {
    "program_id": program_id, "num_programs": num_programs, "arange": arange, "cdiv": cdiv,
    "zeros": zeros, "full": full, "broadcast_to": broadcast_to, "where": where,
    "device_assert": device_assert, "load": load, "store": store,
    "max": _reduction("max"), "min": _reduction("min"), "sum": _reduction("sum"),
    "argmax": _arg_reduction("max"), "argmin": _arg_reduction("min"),
    "static_range": _outside_for, "range": _outside_for, "constexpr": constexpr,
    "minimum": _elementwise_pick("min"), "maximum": _elementwise_pick("max"), "cast": cast,
}
