"""``tl.sum`` / ``tl.max`` / ``tl.min`` over one axis of a block.

Exact where the shape allows: an axis of one lane; a masked prefix load (memory.py's prefix
sums); a one-hot sum ``sum(where(lane == g, f, 0))`` (the selected lane's value); a short
rank-1 sum (written out lane by lane).  Otherwise the reduced value is a fresh function
``R(program-local constants, remaining lanes)`` with only valid lemmas as its schema: for
min/max a witness lane that attains it and the bound against every lane (over an axis of
symbolic length B too: the lanes are 0 <= lane < B, the witness is guarded by B >= 1); for a sum of
``shl(1, lane)`` bits below a lane bound ``y``, ``0 <= R < 2**min(y, N)``; other sums stay
unconstrained.
"""

from __future__ import annotations

import z3

from . import memory
from .run_state import RunState
from .values import (
    INT32, LANES, MAX_RANK, SymDim, Unsupported, V, as_int, conjuncts, dim_term, fresh_name, has_lane, lane_vars_in, lift,
    mentions,
)

UNROLLED_SUM_LANES = 64   # rank-1 sums up to this many lanes are exact sums of their lanes


def reduce_axis(ex: RunState, line, kind, x, axis):
    """``tl.<kind>(x, axis)`` for kind in sum / min / max."""
    x = lift(x)
    if axis is None and x.rank <= 1:
        axis = 0   # reduce over every axis of a rank-1 block
    if not isinstance(axis, int):
        raise Unsupported(f"tl.{kind} without a constexpr axis", line)
    if axis < 0:
        axis += x.rank
    size = x.shape[axis]
    rest_shape = x.shape[:axis] + x.shape[axis + 1:]
    e = x.e
    lk = LANES[axis]

    def to_result(expr):   # result lanes: axis i (< axis) stays, axis i > axis moves to i - 1
        subs = [(LANES[i], LANES[i - 1]) for i in range(axis + 1, x.rank) if has_lane(x.shape[i])]
        return z3.substitute(expr, *subs) if subs else expr
    if size == 1:
        return V(to_result(e), rest_shape, x.dtype, x.arith)
    if kind == "sum" and axis == 0:
        exact = memory.prefix_sum(ex, x, size, line)   # sum of a masked prefix load
        if exact is not None:
            return V(exact, rest_shape, x.dtype, True)
    if kind == "sum":
        onehot = _match_onehot(e, lk)
        if onehot is not None:
            g, rest_cond, f = onehot
            r = z3.If(z3.And(g >= 0, g < dim_term(size), z3.substitute(rest_cond, (lk, g))),
                      z3.substitute(f, (lk, g)), z3.IntVal(0) if not z3.is_bool(f) else z3.BoolVal(False))
            arith = x.arith
            if arith and not z3.is_bool(f):
                # The sum selects one lane's value (or 0): it fits when every selectable lane's
                # value does.  Observing f once, lane by lane, keeps the no-wrap goal free of g,
                # which in an unrolled walk nests one selection per step.
                ex.observe(V(f, x.shape, x.dtype, True), line, "one-hot selected value", active=rest_cond)
                arith = False
            return V(to_result(ex.define(r, f"onehot@{line}")), rest_shape, x.dtype, arith)
    if isinstance(size, SymDim) and kind == "sum":
        # the exact forms above hold at every length; any other sum (written out lane by lane,
        # a bitmask bound) is modelled at a known width only.  min/max below hold at every length
        raise Unsupported(f"tl.{kind} over the block axis of symbolic length {size} that is not a masked prefix "
                          "load or a one-hot selection (needs the concrete width): prove it per value", line)
    if kind == "sum":
        if x.rank == 1 and size <= UNROLLED_SUM_LANES:
            # a short rank-1 sum of anything else: the sum of its lanes, written out (each
            # lane must fit first; the sum is then exact modulo 2^bits, so it fits iff observed)
            ex.observe(x, line, "summed value")
            return V(z3.Sum([z3.substitute(as_int(e), (lk, z3.IntVal(i))) for i in range(size)]), (),
                     x.dtype, True)
    if kind in ("min", "max"):
        ex.observe(x, line, f"{kind} operand")
    # Abstract: R(pid, loop indices, remaining lanes) with valid lemmas only.
    local = [c for c in ex.local_consts if mentions(e, c)]
    rest_lanes = [LANES[i] for i in sorted(lane_vars_in(e)) if i != axis]
    argsorts = [z3.IntSort()] * (len(local) + len(rest_lanes))
    base = f"{kind}@{line}"
    R = z3.Function(fresh_name(base), *argsorts, z3.IntSort())
    W = z3.Function(fresh_name(f"argwit@{line}"), *argsorts, z3.IntSort())
    formal = local + rest_lanes
    ebody = as_int(e)
    bitmask = kind == "sum" and _match_bitmask(e, lk, ex.functions.get("shl"))

    def schema(app, ebody=ebody, formal=formal, W=W, kind=kind, size=size, lk=lk, bitmask=bitmask):
        actual = list(app.children())
        subs = list(zip(formal, actual))
        out = {}
        if kind in ("min", "max"):
            w = W(*actual) if actual else W()
            n = dim_term(size)
            witness = z3.And(w >= 0, w < n)
            attained = app == z3.substitute(ebody, *(subs + [(lk, w)]))
            if isinstance(size, SymDim):
                # an empty axis has no lane to attain the extremum: were B = 0 allowed by the
                # preconditions, an unguarded witness 0 <= w < 0 would make them contradict
                # (and prove anything); the value of an empty reduction stays unconstrained
                witness, attained = z3.Implies(n >= 1, witness), z3.Implies(n >= 1, attained)
            out[f"{base}/witness_lane@{app}"] = witness
            out[f"{base}/attained@{app}"] = attained
            for lane in LANES[:MAX_RANK]:
                at = z3.substitute(ebody, *(subs + [(lk, lane)]))
                rel = app <= at if kind == "min" else app >= at
                out[f"{base}/bound@{app}@{lane}"] = z3.Implies(z3.And(lane >= 0, lane < n), rel)
        elif bitmask:
            ybound, _ = bitmask
            yb = z3.substitute(ybound, *subs) if ybound is not None else z3.IntVal(size)
            out[f"{base}/bits@{app}"] = z3.And(app >= 0, app < _pow2_table(yb, size))
        return out
    app = R(*formal) if formal else R()
    ex.functions[R.name()] = (R, schema)
    # an unrecognised sum stays unconstrained (no lemma is valid for it)
    return V(to_result(app), rest_shape, x.dtype if kind != "sum" or not x.dtype.is_bool else INT32,
             kind == "sum")


def _match_onehot(e, lk):
    """``If(And(lane_k == g, rest), f, 0)`` with g free of lane_k -> (g, rest, f)."""
    if not (z3.is_app(e) and e.decl().kind() == z3.Z3_OP_ITE):
        return None
    cond, f, z = e.children()
    if not ((z3.is_int_value(z) and z.as_long() == 0) or z3.is_false(z)):
        return None
    parts = conjuncts(cond)
    for i, p in enumerate(parts):
        if z3.is_eq(p):
            a, b = p.children()
            for l, g in ((a, b), (b, a)):
                if l.eq(lk) and not mentions(g, lk):
                    rest = z3.And(*(parts[:i] + parts[i + 1:])) if len(parts) > 1 else z3.BoolVal(True)
                    return g, rest, f
    return None


def _match_bitmask(e, lk, shl):
    """``If(cond, shl(1, lane_k), 0)``: a bit set per lane; returns (bound y or None, cond)
    where ``lane_k < y`` is a conjunct of cond."""
    if shl is None or not (z3.is_app(e) and e.decl().kind() == z3.Z3_OP_ITE):
        return None
    cond, f, z = e.children()
    if not (z3.is_int_value(z) and z.as_long() == 0):
        return None
    if not (z3.is_app(f) and f.decl().eq(shl[0]) and z3.is_int_value(f.arg(0)) and f.arg(0).as_long() == 1
            and f.arg(1).eq(lk)):
        return None
    y = None
    for p in conjuncts(cond):
        if z3.is_app(p) and p.decl().kind() == z3.Z3_OP_LT and p.arg(0).eq(lk):
            y = p.arg(1)
        if z3.is_not(p) and z3.is_app(p.arg(0)) and p.arg(0).decl().kind() == z3.Z3_OP_LE \
                and p.arg(0).arg(1).eq(lk):
            y = p.arg(0).arg(0)  # not (y <= lane)  ==  lane < y
    return y, cond


def _pow2_table(y, size):
    """``2**min(max(y, 0), size)`` as an If chain (y is a small symbolic count)."""
    out = z3.IntVal(2 ** size)
    for k in range(size - 1, -1, -1):
        out = z3.If(y <= k, z3.IntVal(2 ** k), out)
    return out
