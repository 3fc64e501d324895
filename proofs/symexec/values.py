"""Symbolic values of the executor: dtypes, blocks over lane variables, pointers, tensors.

A block value is ONE Z3 expression over the lane variables ``LANES[i]`` (lane of axis
``i``) plus a static shape.  An axis of size 1 never mentions its lane.  Broadcasting to
a higher rank prepends axes (numpy rules), which shifts the lane variables; ``x[:, None]``
moves them.  Python ints/bools are constexprs and stay plain.

A shape entry is an int, or a :class:`SymDim`: the length of ``tl.arange(0, B)`` for a
constexpr ``B`` given as a Z3 term (one proof for every value the model's preconditions
allow).  Its lane is an ordinary lane variable with ``0 <= lane < B``, which is exactly the
block's meaning at each value of ``B`` (at ``B = 1`` the lane is 0); a fill of that shape and
a min/max over that axis hold lane-wise too.  What needs the concrete length (an unrolled sum,
a trip count, broadcasting against another length) refuses it: every comparison or arithmetic
on a ``SymDim`` that no caller handles raises :class:`Unsupported`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import z3

from specbound.proofs.terms import subterms

MAX_RANK = 4
LANES = [z3.Int(f"lane{i}") for i in range(MAX_RANK)]

_counter = itertools.count()


def fresh_name(base: str) -> str:
    """A Z3 symbol name no other symbol of the process has (``base!n``)."""
    return f"{base}!{next(_counter)}"


class Unsupported(Exception):
    """A kernel construct the executor does not model (never a silent pass)."""

    def __init__(self, construct: str, line: int | None = None):
        self.construct, self.line = construct, line
        super().__init__(f"unsupported: {construct}" + (f" (kernel line {line})" if line else ""))


class SymDim:
    """A block axis of symbolic length: ``term`` (a Z3 Int), ``name`` (the constexpr's)."""

    __slots__ = ("term", "name")

    def __init__(self, term, name: str):
        self.term, self.name = term, name

    def __eq__(self, other):   # structural: the same constexpr term is the same length
        return isinstance(other, SymDim) and self.term.eq(other.term)

    def __hash__(self):
        return self.term.hash()

    def __repr__(self):
        return self.name

    def _needs_value(self, *_args):
        raise Unsupported(f"a construct that needs the concrete length of the block axis "
                          f"arange(0, {self.name}) (a symbolic constexpr): prove it per value")

    __lt__ = __le__ = __gt__ = __ge__ = __index__ = __int__ = _needs_value
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __floordiv__ = __mod__ = _needs_value


def has_lane(n) -> bool:
    """Whether an axis of length ``n`` carries its lane variable (every symbolic length does)."""
    return isinstance(n, SymDim) or n > 1


def dim_term(n):
    """The length of an axis for a Z3 expression: its constexpr's term, or the int itself
    (left to Z3's coercion, so the terms built for int lengths are built as before: the
    order Z3 meets terms in bears on which premises its unsat cores name)."""
    return n.term if isinstance(n, SymDim) else n


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
# floating point values are opaque (floats.py): never an index, so any value is sound for bounds
FLOATS = {d.name: d for d in (DType("float16", 16, True, True), DType("bfloat16", 16, True, True),
                              DType("float32", 32, True, True), DType("float64", 64, True, True))}


def promote(a: DType, b: DType) -> DType:
    """Integer promotion of two tensor dtypes (Triton: the wider wins; same width, signed
    wins unless one side is unsigned of that width... we only need the kernels' cases)."""
    if a == b:   # e.g. two opaque floats of one dtype merged after a fork (floats.py)
        return a
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


@dataclass(slots=True)
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


@dataclass(frozen=True, slots=True)
class LaneTag:
    """Provenance of ``base + lane[axis]`` with lane in [0, size): the shapes a truncation
    obligation is raised for (truncation.py).  ``kind``: "arange" (``tl.arange(0, size)``,
    base 0), "loop" (a tiled loop's index plus an arange; ``loop`` is the loop's
    ``(stop, step)``), "grid" (``pid * size`` plus an arange), "loopvar" (a symbolic loop's
    index itself: axis -1, ``size`` is the step)."""

    axis: int
    size: int
    base: Any   # python 0, or a Z3 term (loop index, pid * size)
    kind: str
    loop: Any = None

    def moved(self, axis: int) -> LaneTag:
        return replace(self, axis=axis)


@dataclass(frozen=True, slots=True)
class LoadSource:
    """Where a loaded block came from: ``load(tensor + off, mask, other)`` (for prefix sums,
    memory.py); ``mask``/``other`` are None when the load had none."""

    tensor: TensorModel
    off: Any
    mask: Any
    other: Any


@dataclass(slots=True)
class V:
    """A block (or scalar, shape ()) value."""

    e: Any
    shape: tuple
    dtype: DType
    arith: bool = False  # produced by + - * and not yet observed (may hold a wrapped value)
    # provenance, not part of the value (equality and repr ignore them)
    tag: LaneTag | None = field(default=None, compare=False, repr=False)
    load: LoadSource | None = field(default=None, compare=False, repr=False)

    @property
    def rank(self):
        return len(self.shape)

    def is_bool_expr(self):
        return z3.is_bool(self.e)


@dataclass(slots=True)
class Ptr:
    """``tensor`` base pointer plus an element offset block."""

    tensor: TensorModel
    off: V

    @property
    def shape(self):
        return self.off.shape


@dataclass(slots=True)
class PtrDType:
    element_ty: DType


@dataclass(slots=True)
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
        if has_lane(n):
            out[f"lane{i}_range"] = z3.And(LANES[i] >= 0, LANES[i] < dim_term(n))
    return out


def shift(e, k: int, rank: int):
    """Prepend ``k`` axes: lane i becomes lane i + k."""
    if k == 0 or not z3.is_expr(e):
        return e
    return z3.substitute(e, *[(LANES[i], LANES[i + k]) for i in range(rank)])


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


def mentions(e, c) -> bool:
    """Whether the constant ``c`` occurs in ``e``."""
    target = c.get_id()
    return any(x.get_id() == target for x in subterms(e))


def conjuncts(c) -> list:
    """The conjuncts of ``c`` (nested ``And`` flattened)."""
    if z3.is_and(c):
        return [x for ch in c.children() for x in conjuncts(ch)]
    return [c]


# --- lifting, broadcasting and reshaping blocks ------------------------------------------------

def lift(x, like: DType | None = None) -> V:
    """A Python constexpr as a scalar value (``like``: the dtype of the other operand)."""
    if isinstance(x, V):
        return x
    if isinstance(x, bool):
        return V(z3.BoolVal(x), (), INT1)
    if isinstance(x, int):
        return V(z3.IntVal(x), (), like if like is not None and not like.is_bool else INT32 if -2**31 <= x < 2**31 else INT64)
    raise Unsupported(f"value of type {type(x).__name__}")


def lift_pair(a, b):
    """Two operands as values; a Python constant takes the other operand's dtype."""
    av = lift(a, b.dtype if isinstance(b, V) else None)
    return av, lift(b, av.dtype)


def broadcast(*vals):
    """The values brought to a common rank (numpy rules) and the common shape."""
    rank = max(v.rank for v in vals)
    out = []
    for v in vals:
        k = rank - v.rank
        tag = v.tag.moved(v.tag.axis + k) if v.tag is not None and v.tag.axis >= 0 else None
        out.append(V(shift(v.e, k, v.rank), (1,) * k + v.shape, v.dtype, v.arith, tag))
    shape = []
    for dims in zip(*[v.shape for v in out]):
        big = {d for d in dims if d != 1}
        if len(big) > 1 and any(isinstance(d, SymDim) for d in big):
            # lengths equal at some values only: Triton compiles those and rejects the others,
            # and a length-1 arange broadcasts (its lane is 0, not the other axis's lane)
            raise Unsupported(f"broadcast of the symbolic block length {sorted(map(str, big))} against another "
                              "length (compiles for some values only): prove it per value")
        if len(big) > 1:
            raise Unsupported(f"incompatible shapes {[v.shape for v in vals]}")
        shape.append(big.pop() if big else 1)
    return out, tuple(shape)


def reshape(v: V, idx, line) -> V:
    """``v[idx]`` with ``idx`` a list of ``slice(None)`` (keep an axis) and None (new axis)."""
    src = 0
    mapping, shape = [], []
    for it in idx:
        if it is None:
            shape.append(1)
        else:
            if src >= v.rank:
                raise Unsupported("too many ':' in subscript", line)
            mapping.append((src, len(shape)))
            shape.append(v.shape[src])
            src += 1
    if src != v.rank:
        raise Unsupported("subscript must name every axis", line)
    if len(shape) > MAX_RANK:
        raise Unsupported(f"rank above {MAX_RANK}", line)
    subs = [(LANES[s], LANES[d]) for s, d in mapping if s != d and has_lane(v.shape[s])]
    e = z3.substitute(v.e, *subs) if subs and z3.is_expr(v.e) else v.e
    tag = v.tag.moved(dict(mapping)[v.tag.axis]) if v.tag is not None and v.tag.axis >= 0 else None
    return V(e, tuple(shape), v.dtype, v.arith, tag)
