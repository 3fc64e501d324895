"""The arithmetic every spec formula is written in.

Each helper accepts plain Python ints/bools *or* Z3 terms.  On plain values it
computes with Python and returns a plain value; as soon as one operand is a Z3
term it builds the Z3 expression instead.  Spec functions therefore never branch
with a Python ``if`` on a value that might be symbolic: they call :func:`ite`.

Z3 is imported lazily so that the reference and the kernels, which only ever pass
ints, do not pay for it.
"""

from __future__ import annotations

import numbers
from typing import Any

from .errors import SpecArgumentError, SpecTypeError

_z3 = None


def _z3mod():
    global _z3
    if _z3 is None:
        import z3

        _z3 = z3
    return _z3


def is_symbolic(value: Any) -> bool:
    """True for a Z3 expression (anything that is not a plain Python number/bool)."""
    cls = type(value)
    # ints first: the reference and the fuzz ask this millions of times per run about ints
    return cls is not int and cls is not bool and cls.__module__.startswith("z3")


def _any_symbolic(*values: Any) -> bool:
    for v in values:   # a loop, not any(genexpr): this is the reference's hottest helper
        if is_symbolic(v):
            return True
    return False


def ite(cond, then, otherwise):
    """``then if cond else otherwise``; a Z3 ``If`` when ``cond`` is symbolic."""
    if is_symbolic(cond):
        return _z3mod().If(cond, then, otherwise)
    return then if cond else otherwise


def smin(a, b):
    return ite(a <= b, a, b)


def smax(a, b):
    return ite(a >= b, a, b)


def floordiv(a, b):
    """Floor division; callers guarantee ``b > 0`` (Z3's ``div`` is floor there)."""
    if _any_symbolic(a, b):
        return a / b  # Z3 Int division: Euclidean, equal to floor for b > 0
    return a // b


def mod(a, b):
    """Remainder of :func:`floordiv`; callers guarantee ``b > 0``."""
    if _any_symbolic(a, b):
        return a % b
    return a % b


def cdiv(a, b):
    """Ceiling division for ``b > 0``."""
    return floordiv(a + b - 1, b)


def all_of(*conds):
    """Conjunction that stays a Python bool when every operand is one."""
    if _any_symbolic(*conds):
        return _z3mod().And(*conds)
    return all(conds)


def any_of(*conds):
    if _any_symbolic(*conds):
        return _z3mod().Or(*conds)
    return any(conds)


def implies(a, b):
    if _any_symbolic(a, b):
        return _z3mod().Implies(a, b)
    return (not a) or bool(b)


def negate(a):
    if is_symbolic(a):
        return _z3mod().Not(a)
    return not a


def check_int(name: str, value: Any, *, minimum: int | None = None) -> Any:
    """Validate a size-like argument.

    Symbolic values pass through untouched (their range is a proof hypothesis, not a
    runtime check).  Plain values must be integers (bools and floats are refused: a
    ``True`` batch size is always a bug) and at least ``minimum``.
    """
    if type(value) is int:  # the hot path of the reference: skip the ABC check
        if minimum is not None and value < minimum:
            raise SpecArgumentError(name, f"must be >= {minimum}, got {value}")
        return value
    if is_symbolic(value):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SpecTypeError(name, f"must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise SpecArgumentError(name, f"must be >= {minimum}, got {value}")
    return value
