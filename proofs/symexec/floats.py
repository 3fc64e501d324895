"""Opaque floating point: a float value is any value.

Floats in the kernels we read (probabilities, uniform samples, Gumbel noise) only decide
*which* token is accepted or picked, never *where* a load or store goes.  So every float
operation yields a fresh unconstrained value and every comparison involving a float a
fresh boolean: an over-approximation of what the kernel computes, sound for IN-BOUNDS,
NO-WRAP and RACE-FREE (a property that held for every float outcome holds for the real
one), and useless for anything that depends on float values (nothing here claims that).
"""

from __future__ import annotations

import z3

from .values import FLOATS, INT1, V, broadcast, fresh_name, lift
from .values import INT32, Unsupported, dim_term

F32 = FLOATS["float32"]


def is_float(x) -> bool:
    return isinstance(x, float) or (isinstance(x, V) and x.dtype.is_float)


def involved(a, b) -> bool:
    return is_float(a) or is_float(b)


def constant(x: float) -> V:
    """A Python float literal (Triton types it fp32)."""
    return V(z3.Int(fresh_name("float_const")), (), F32)


def _as_value(x, like):
    if isinstance(x, float):
        return constant(x)
    return lift(x, like)


def _dtype(a, b):
    fl = [x.dtype for x in (a, b) if isinstance(x, V) and x.dtype.is_float]
    return max(fl, key=lambda d: d.bits) if fl else F32


def arith(a, b) -> V:
    """``a op b`` with a float operand: a fresh value of the result's float dtype and shape."""
    dt = _dtype(a, b)
    av, bv = _as_value(a, dt), _as_value(b, dt)
    _vals, shape = broadcast(av, bv)
    return V(z3.Int(fresh_name("float")), shape, dt)


def compare(a, b) -> V:
    """A comparison with a float operand: a fresh boolean per lane block."""
    dt = _dtype(a, b)
    av, bv = _as_value(a, dt), _as_value(b, dt)
    _vals, shape = broadcast(av, bv)
    return V(z3.Bool(fresh_name("float_cmp")), shape, INT1)


def pick(c, a, b) -> V:
    """``tl.where(c, a, b)`` with a float side: a fresh float of the broadcast shape."""
    dt = _dtype(a, b)
    vals = [lift(c)] + [_as_value(x, dt) for x in (a, b)]
    _vals, shape = broadcast(*vals)
    return V(z3.Int(fresh_name("float")), shape, dt)


def full(shape: tuple, dt) -> V:
    """``tl.full(shape, <float>, dtype)``: a fresh value (a float fill is never an index)."""
    return V(z3.Int(fresh_name("float_full")), shape, dt if dt is not None and dt.is_float else F32)


def reduce(ex, line, x: V, axis, return_indices: bool = False):
    """``tl.max/min/sum`` of a float block: a fresh value; with ``return_indices`` also the
    index of the attaining lane, some lane of the reduced axis (``0 <= index < size``)."""
    if axis is None and x.rank <= 1:
        axis = 0
    if not isinstance(axis, int) or not 0 <= axis < max(x.rank, 1):
        raise Unsupported("float reduction without a constexpr axis", line)
    rest = x.shape[:axis] + x.shape[axis + 1:]
    value = V(z3.Int(fresh_name("float_reduced")), rest, x.dtype)
    if not return_indices:
        return value
    if rest:
        raise Unsupported("return_indices of a reduction that leaves lanes", line)
    idx = z3.Int(fresh_name(f"argmax@{line}"))
    ex.local_consts.append(idx)
    ex.path_cond.append((f"reduction_index@{line}#{idx}", z3.And(0 <= idx, idx < dim_term(x.shape[axis]))))
    return value, V(idx, (), INT32)
