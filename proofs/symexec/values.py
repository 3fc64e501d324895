"""Symbolic values of the executor: dtypes, blocks over lane variables, pointers, tensors.

A block value is ONE Z3 expression over the lane variables ``LANES[i]`` (lane of axis
``i``) plus a static shape.  An axis of size 1 never mentions its lane.  Broadcasting to
a higher rank prepends axes (numpy rules), which shifts the lane variables; ``x[:, None]``
moves them.  Python ints/bools are constexprs and stay plain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import z3

from specbound.proofs.terms import subterms

MAX_RANK = 4
LANES = [z3.Int(f"lane{i}") for i in range(MAX_RANK)]


class Unsupported(Exception):
    """A kernel construct the executor does not model (never a silent pass)."""

    def __init__(self, construct: str, line: int | None = None):
        self.construct, self.line = construct, line
        super().__init__(f"unsupported: {construct}" + (f" (kernel line {line})" if line else ""))


@dataclass(frozen=True)
class DType:
    name: str
    bits: int
    signed: bool = True
    is_float: bool = False

    @property
    def is_bool(self):
        return self.bits == 1

    def lo(self):
        return -(2 ** (self.bits - 1)) if self.signed else 0

    def hi(self):  # exclusive
        return 2 ** (self.bits - 1) if self.signed else 2 ** self.bits

    def __repr__(self):
        return self.name


INT1 = DType("int1", 1, False)
INT8 = DType("int8", 8)
INT16 = DType("int16", 16)
INT32 = DType("int32", 32)
INT64 = DType("int64", 64)
UINT8 = DType("uint8", 8, False)
UINT16 = DType("uint16", 16, False)
UINT32 = DType("uint32", 32, False)
UINT64 = DType("uint64", 64, False)
DTYPES = {d.name: d for d in (INT1, INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64)}


def promote(a: DType, b: DType) -> DType:
    """Integer promotion of two tensor dtypes (Triton: the wider wins; same width, signed
    wins unless one side is unsigned of that width... we only need the kernels' cases)."""
    if a.is_float or b.is_float:
        raise Unsupported(f"floating point arithmetic ({a}, {b})")
    if a.is_bool and b.is_bool:
        return INT1
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if not a.signed else b


@dataclass
class TensorModel:
    """A tensor argument: its element count (a spec allocation formula), element dtype,
    contents (an uninterpreted function, or fresh values when the kernel writes it) and
    the content precondition ``schema(index) -> {label: BoolRef}``."""

    name: str
    numel: Any
    dtype: DType
    content: Any = None            # z3 FuncDecl Int -> Int (read-only tensors)
    schema: Callable | None = None  # index -> dict of hypotheses
    written: bool = False
    prefix: Any = None             # (FuncDecl Pf, schema): Pf(j) = sum of content(i) for i < j (memory.py)


@dataclass
class V:
    """A block (or scalar, shape ()) value."""

    e: Any
    shape: tuple
    dtype: DType
    arith: bool = False  # produced by + - * and not yet observed (may hold a wrapped value)

    @property
    def rank(self):
        return len(self.shape)

    def is_bool_expr(self):
        return z3.is_bool(self.e)


@dataclass
class Ptr:
    """``tensor`` base pointer plus an element offset block."""

    tensor: TensorModel
    off: V

    @property
    def shape(self):
        return self.off.shape


@dataclass
class PtrDType:
    element_ty: DType


@dataclass
class Access:
    """One executed load or store (per lane: the lanes are free)."""

    kind: str            # "load" | "store"
    line: int
    tensor: TensorModel
    off: V
    mask: Any            # Bool expr (True when unmasked)
    path: list           # [(label, BoolRef)] path condition at the access
    value: V | None = None
    shape: tuple = ()
    env: dict = field(default_factory=dict)  # kernel variables at the access (for footprint maps)


def lane_range(shape: tuple) -> dict:
    out = {}
    for i, n in enumerate(shape):
        if n > 1:
            out[f"lane{i}_range"] = z3.And(LANES[i] >= 0, LANES[i] < n)
    return out


def shift(e, k: int, rank: int):
    """Prepend ``k`` axes: lane i becomes lane i + k."""
    if k == 0 or not z3.is_expr(e):
        return e
    return z3.substitute(e, *[(LANES[i], LANES[i + k]) for i in range(rank)])


def to_z3(v):
    if isinstance(v, V):
        return v.e
    if isinstance(v, bool):
        return z3.BoolVal(v)
    if isinstance(v, int):
        return z3.IntVal(v)
    return v


def as_int(e):
    if z3.is_bool(e):
        return z3.If(e, z3.IntVal(1), z3.IntVal(0))
    return e


def as_bool(e):
    if z3.is_bool(e):
        return e
    return e != 0


def lane_vars_in(e) -> set:
    """Indices of lane variables occurring in ``e``."""
    names = {str(l): i for i, l in enumerate(LANES)}
    return {names[str(x)] for x in subterms(e) if z3.is_const(x) and str(x) in names}
