"""Memory a program reads back, and masked prefix sums.

**Program-written memory.**  A tensor the kernel stores to starts with unconstrained
contents (``<tensor>_initial``, one function per tensor: whatever the caller put there);
each scalar store of the program appends ``(condition, offset, value)`` to the tensor's
:class:`~.flow.MemState`, and a load reads the latest write to the same offset whose
condition holds, else the initial contents: ``If(c_n /\\ off == o_n, v_n, ... init(off))``.
This is the program's own view in program order; that no *other* program writes the
cells it reads is a separate obligation of the kernel's model (the cells read lie in the
program's own region, and regions of different programs are disjoint).  A block store,
or a store inside a symbolic loop, makes the state opaque: reading it back is
``Unsupported``.

**Prefix sums.**  ``tl.sum`` over the lanes of a direct masked load
``load(t + c0 + lane, mask=lane < x [& lane-free conditions], other=0)`` is exact when the
tensor model names the prefix function ``Pf`` of its contents (``Pf(0) = 0``,
``Pf(i + 1) = Pf(i) + content(i)``, given as schema instances by the model):
``If(x <= 0, 0, Pf(c0 + min(x, N)) - Pf(c0))`` for ``0 <= c0`` (N lanes; a bound above N
truncates, which the no-truncation obligation ``x <= N`` of the comparison rules out), an
unconstrained value for ``c0 < 0`` (an out-of-bounds read).
"""

from __future__ import annotations

import z3

from specbound.proofs import core

from .flow import MemState
from .values import LANES, Unsupported, as_bool, fresh_name, as_int, conjuncts, dim_term, has_lane, lane_vars_in

_CELL = z3.Int("cell")  # the bound variable of a tensor-contents hypothesis


def initial(ex, t):
    """The tensor's contents before the launch (one uninterpreted function per tensor)."""
    f = ex.initial_contents.get(t.name)
    if f is None:
        sort = z3.BoolSort() if t.dtype.is_bool else z3.IntSort()
        f = z3.Function(f"{t.name}_initial", z3.IntSort(), sort)
        ex.initial_contents[t.name] = f
        if not t.dtype.is_bool:
            # the caller's contents are values of the tensor's dtype: a quantified hypothesis of
            # the run (Run adds it), used at each cell read through the core's instance
            label, lo, hi = f"{f.name()}_in_dtype", t.dtype.lo(), t.dtype.hi()
            fact = z3.ForAll([_CELL], z3.And(f(_CELL) >= lo, f(_CELL) < hi))
            ex.content_hyps[label] = fact
            ex.functions[f.name()] = (f, lambda app, label=label, fact=fact: {
                label: core.instantiate(core.assume(label, fact), app.arg(0))})
        else:
            ex.functions[f.name()] = (f, lambda app: {})
    return f


def read(ex, t, off, line):
    """The value the program sees at ``off`` (a lane term) of a tensor it writes."""
    state = ex.mem.get(t.name)
    if ex.symbolic_loops:
        if not ex.summarise_loops or lane_vars_in(off):
            raise Unsupported(f"read of {t.name}, which the kernel writes, inside a symbolic loop", line)
        # what earlier iterations stored is not replayed: any value of the dtype (sound for
        # every property, as the real value is one of them)
        v = z3.Int(fresh_name(f"{t.name}_read@{line}"))
        ex.local_consts.append(v)
        lo, hi = (0, 2) if t.dtype.is_bool else (t.dtype.lo(), t.dtype.hi())
        ex.path_cond.append((f"havoc_read_{t.name}@{line}#{v}", z3.And(v >= lo, v < hi)))
        return v != 0 if t.dtype.is_bool else v
    if state is not None and state.opaque:
        raise Unsupported(f"read of {t.name} after a block store or a store in a symbolic loop "
                          "(program-written memory is modelled for scalar stores only)", line)
    value = initial(ex, t)(off)
    for cond, o, v in (state.writes if state is not None else ()):
        if t.dtype.is_bool:
            v = as_bool(v)
        else:
            v = as_int(v)
        value = z3.If(z3.And(cond, off == o), v, value)
    return value


def write(ex, t, off, value, mask, shape):
    """Record a store in the program's memory state (scalar stores only)."""
    state = ex.mem.get(t.name, MemState())
    if state.opaque:
        return
    if any(has_lane(s) for s in shape) or lane_vars_in(off) or ex.symbolic_loops:
        ex.mem[t.name] = MemState(state.writes, True)
        return
    ex.mem[t.name] = MemState(state.writes + ((mask, off, value),))


# --- prefix sums -------------------------------------------------------------------------------

def _lane_offset(off, lane):
    """``c0`` when ``off`` is ``lane`` or ``c0 + lane`` (c0 free of lanes), else None."""
    if off.eq(lane):
        return z3.IntVal(0)
    if z3.is_app(off) and off.decl().kind() == z3.Z3_OP_ADD and off.num_args() == 2:
        a, b = off.children()
        for l, c in ((a, b), (b, a)):
            if l.eq(lane) and not lane_vars_in(c):
                return c
    return None


def _lane_bound(mask, lane):
    """``(x, rest)`` when ``mask`` is ``lane < x`` conjoined with lane-free conditions."""
    parts = conjuncts(mask)
    for i, p in enumerate(parts):
        if z3.is_app(p) and p.decl().kind() == z3.Z3_OP_LT and p.arg(0).eq(lane) and not lane_vars_in(p.arg(1)):
            rest = parts[:i] + parts[i + 1:]
            if all(not lane_vars_in(r) for r in rest):
                return p.arg(1), (z3.And(*rest) if rest else z3.BoolVal(True))
        if z3.is_not(p) and z3.is_app(p.arg(0)) and p.arg(0).decl().kind() == z3.Z3_OP_LE \
                and p.arg(0).arg(1).eq(lane) and not lane_vars_in(p.arg(0).arg(0)):
            rest = parts[:i] + parts[i + 1:]
            if all(not lane_vars_in(r) for r in rest):
                return p.arg(0).arg(0), (z3.And(*rest) if rest else z3.BoolVal(True))
    return None


def prefix_sum(ex, x, size, line):
    """The exact value of ``tl.sum`` of a masked prefix load ``x`` (rank 1), or None."""
    src = x.load
    if src is None or x.rank != 1:
        return None
    t, off, mask, other = src.tensor, src.off, src.mask, src.other
    if t.prefix is None or t.written or mask is None or other is None:
        return None
    if not (z3.is_int_value(other) and other.as_long() == 0):
        return None
    lane = LANES[0]
    c0 = _lane_offset(off, lane)
    bound = _lane_bound(mask, lane)
    if c0 is None or bound is None:
        return None
    xb, rest = bound
    pf, schema = t.prefix
    ex.functions.setdefault(pf.name(), (pf, schema))
    if _in_range(ex, c0, xb, size, line):   # proved under the path: the plain prefix difference
        plain = pf(xb) if z3.is_int_value(c0) and c0.as_long() == 0 else pf(c0 + xb) - pf(c0)  # Pf(0) = 0
        return z3.If(rest, plain, z3.IntVal(0))
    # lanes 0 .. min(x, N) - 1 are summed: a bound above N truncates the sum (the comparison
    # raised the no-truncation obligation x <= N); an offset before the tensor is out of bounds
    unknown = z3.Function(f"{t.name}_sum_before_start@{line}", z3.IntSort(), z3.IntSort(), z3.IntSort())
    count = z3.If(xb <= dim_term(size), xb, dim_term(size))
    exact = z3.If(c0 >= 0, z3.If(xb <= 0, z3.IntVal(0), pf(c0 + count) - pf(c0)), unknown(c0, xb))
    return z3.If(rest, exact, z3.IntVal(0))


def _in_range(ex, c0, xb, size, line) -> bool:
    """``0 <= c0``, ``0 <= x <= N`` proved by the core under the current path (a side proof
    the run keeps): then the sum is ``Pf(c0 + x) - Pf(c0)`` with no case split."""
    if ex.oracle is None:
        return False
    hyps = {label: c for label, c in ex.path_cond}
    proof = ex.ask(f"prefix-sum-in-range@{line}", hyps, z3.And(c0 >= 0, xb >= 0, xb <= dim_term(size)))
    if proof is None:
        return False
    ex.side_proofs.append(proof)
    return True
