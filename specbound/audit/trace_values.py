"""Values, frames and paths of the buffer tracer (:mod:`.trace`), and its small pure helpers.

A value is what an expression may evaluate to on one path: a number (a Z3 term), a
truth value, an enum member, ``None``, an instance or a record of a package class, a
tensor allocation with its shape, or an :class:`Ended` / :class:`Opaque` where the trail
stops.  A :class:`Path` carries the choices made on the way and the conditions found.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from typing import Any

import z3

from .program import ClassInfo, FuncInfo, Program, callee_name

MAX_ALTERNATIVES = 160  # alternatives kept per expression (more: the rest is reported as cut)
MAX_DEPTH = 14          # frames below a kernel call site
MAX_STEPS = 6000        # resolutions per traced call site (a budget; spending it ends the trail)


# --- values -------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Num:
    term: Any               # int or Z3 integer term


@dataclass(frozen=True, eq=False)
class Truth:
    term: Any               # bool or Z3 Bool


@dataclass(frozen=True)
class EnumMember:
    enum: str
    member: str


@dataclass(frozen=True)
class NoneValue:
    pass


@dataclass(frozen=True, eq=False)
class Instance:
    """``self`` of a package class (its attributes are traced through the class)."""
    cls: ClassInfo


@dataclass(frozen=True, eq=False)
class ClassRef:
    cls: ClassInfo


@dataclass(frozen=True, eq=False)
class FuncRef:
    func: FuncInfo


@dataclass(frozen=True, eq=False)
class Record:
    """An object built by a constructor call the tracer saw (``VerifyMask(buffer=..., ...)``)."""
    cls: ClassInfo
    fields: tuple            # (name, expr, frame)
    site: str

    def field_of(self, name):
        return next(((e, f) for n, e, f in self.fields if n == name), None)


@dataclass(frozen=True, eq=False)
class Alloc:
    op: str                  # "torch.zeros"
    dims: tuple              # Z3 terms / ints, outermost first
    site: str                # "srt/...py:123"
    text: str                # the allocation as written
    owner: str               # the class (or function) it is allocated for
    func: str                # the function the allocation is written in
    view: str = ""           # indexing applied on the way to the kernel ("[i]", "[:k]")
    via: str = ""            # the owner's call of the helper that allocates (if any)
    holder: str = ""         # the variable or attribute the allocation is assigned to

    def numel(self):
        out = 1
        for d in self.dims:
            out = out * d
        return out


@dataclass(frozen=True)
class ShapeOf:
    alloc: Alloc


@dataclass(frozen=True, eq=False)
class Items:
    items: tuple             # (expr, frame)


@dataclass(frozen=True)
class Opaque:
    text: str                # an object the tracer cannot see into


@dataclass(frozen=True, eq=False)
class Unevaluated:
    """A parameter an ``if`` test did not follow to its call sites: a Z3 variable, tied to
    the values found when the same parameter is followed (so a branch taken for one layout
    is never paired with another)."""
    var: Any
    text: str


@dataclass(frozen=True)
class Ended:
    reason: str              # the trail ended here, and why
    where: str
    absent: bool = False     # not a gap of the tracer: no value exists here (no caller, never assigned)
    machinery: bool = False  # the tracer's own limit (syntax it does not follow, a budget): an error row




# --- frames and paths -----------------------------------------------------------------------

@dataclass(eq=False)
class Frame:
    func: FuncInfo
    self_val: Any            # Instance / Record / None
    args: dict | None        # param -> (expr, frame) when called from a traced site; None: unknown
    key: str
    depth: int = 0
    inherited_owner: str = ""    # a helper called from a backend allocates for that backend
    via: str = ""                # the call site in the owner's code that led here

    @property
    def owner(self) -> str:
        if self.inherited_owner:
            return self.inherited_owner
        if isinstance(self.self_val, Instance):
            return self.self_val.cls.name
        if isinstance(self.self_val, Record):
            return self.self_val.cls.name
        return self.func.qual


@dataclass(frozen=True)
class Path:
    pins: tuple = ()         # ((key, value), ...): choices made on this path
    conds: tuple = ()        # Z3 Bools (if tests, helper path conditions)
    trail: tuple = ()        # human steps, innermost last
    notes: tuple = ()        # tests that could not be evaluated, cut alternatives
    holder: str = ""         # the name the value being traced was last assigned to

    def pin(self, key):
        for k, v in self.pins:
            if k == key:
                return v
        return None

    def with_pin(self, key, value) -> "Path":
        """Record a choice; a later one for the same key replaces it (a local reassigned under
        an ``if`` that tested its old value)."""
        return replace(self, pins=tuple((k, v) for k, v in self.pins if k != key) + ((key, value),))

    def step(self, text: str) -> "Path":
        return replace(self, trail=self.trail + (text,))

    def cond(self, c) -> "Path":
        return replace(self, conds=self.conds + (c,))

    def note(self, text: str) -> "Path":
        return self if text in self.notes else replace(self, notes=self.notes + (text,))


# --- small pure helpers ----------------------------------------------------------------------

MISSING, STARRED = object(), object()


def source_text(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return type(node).__name__


def symbolic(*xs) -> bool:
    return any(isinstance(x, z3.ExprRef) for x in xs)


def floordiv(a, b):
    return a / b if symbolic(a, b) else a // b


def power(a, b):
    if symbolic(a, b):
        if isinstance(b, int) and b >= 0:
            out = 1
            for _ in range(b):
                out = out * a
            return out
        raise TypeError("symbolic exponent")
    return a ** b


def name_targets(t, idx=()):
    if isinstance(t, ast.Name):
        yield t.id, idx
    elif isinstance(t, (ast.Tuple, ast.List)):
        for i, x in enumerate(t.elts):
            if isinstance(x, ast.Starred):
                continue
            yield from name_targets(x, idx + (i,))


def self_targets(t, idx=()):
    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
        yield t.attr, idx
    elif isinstance(t, (ast.Tuple, ast.List)):
        for i, x in enumerate(t.elts):
            yield from self_targets(x, idx + (i,))


def no_args():
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                         defaults=[])


def argument_for(call: ast.Call, func: FuncInfo, name: str, method: bool):
    """The expression ``call`` passes for parameter ``name`` of ``func``; None: the default;
    MISSING: not passed and no default; STARRED: hidden in *args/**kwargs."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    params = [p.arg for p in (*func.node.args.posonlyargs, *func.node.args.args)]
    if method and params and not func.is_static():
        params = params[1:]
    if name in params:
        i = params.index(name)
        positional = call.args
        if any(isinstance(a, ast.Starred) for a in positional[: i + 1]):
            return STARRED
        if i < len(positional):
            return positional[i]
    if any(kw.arg is None for kw in call.keywords):
        return STARRED
    return None if default_for(func, name) is not None else MISSING


def default_for(func: FuncInfo, name: str):
    a = func.node.args
    positional = [*a.posonlyargs, *a.args]
    for p, d in zip(positional[len(positional) - len(a.defaults):], a.defaults):
        if p.arg == name:
            return d
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        if p.arg == name and d is not None:
            return d
    return None


def bind_call(func: FuncInfo, call: ast.Call, frame: Frame, method: bool):
    """param -> (expr, frame) for a call the tracer descends into, or an error text."""
    out = {}
    for name in func.params():
        if method and name == func.params()[0] and name in ("self", "cls"):
            continue
        expr = argument_for(call, func, name, method)
        if expr is STARRED:
            return f"call of {func.qual} passes *args/**kwargs"
        if expr is MISSING:
            return f"call of {func.qual} passes no `{name}`"
        if expr is None:
            default = default_for(func, name)
            out[name] = (default, Frame(func, None, {}, f"{func.rel}:{func.node.lineno}:defaults", frame.depth))
        else:
            out[name] = (expr, frame)
    return out


def is_pure(func: FuncInfo) -> bool:
    """Arithmetic only: no tensor, no call other than builtins and the engine's helpers of the same kind."""
    for node in ast.walk(func.node):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
            return False
        if isinstance(node, ast.Name) and node.id == "self":
            return False
        if isinstance(node, ast.Call):
            name = callee_name(node.func)
            if name not in ("int", "abs", "max", "min", "len", "NotImplementedError", "ValueError",
                            "AssertionError", "ceil", "floor", "log2", "cdiv"):
                return False
    return True


def record_fields(p: Program, cls: ClassInfo) -> list[str]:
    """Field names of a dataclass / msgspec.Struct / NamedTuple, in order (bases first)."""
    names: list[str] = []
    for c in reversed(p.mro(cls)):
        for s in c.node.body:
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.target.id not in names:
                names.append(s.target.id)
    return names


def is_enum(p: Program, cls: ClassInfo) -> bool:
    for c in p.mro(cls):
        for b in c.node.bases:
            if "Enum" in source_text(b):
                return True
    return False


def row_of(alloc: Alloc, view: str) -> Alloc:
    return replace(alloc, dims=alloc.dims[1:] if len(alloc.dims) > 1 else (1,), view=alloc.view + view)


def is_flatten(e: ast.Call) -> bool:
    if callee_name(e.func) == "flatten":
        return not e.args
    return len(e.args) == 1 and isinstance(e.args[0], (ast.UnaryOp, ast.Constant)) and source_text(e.args[0]) == "-1"


def flattened(alloc: Alloc) -> Alloc:
    return replace(alloc, dims=(alloc.numel(),), view=alloc.view + ".flatten()")


def shape_call(alloc: Alloc, name: str, e: ast.Call):
    if name == "numel":
        return Num(alloc.numel())
    idx = const_index(e.args[0]) if e.args else None
    if idx is None or not -len(alloc.dims) <= idx < len(alloc.dims):
        return Opaque(source_text(e))
    return Num(alloc.dims[idx])


def const_index(sl):
    if isinstance(sl, ast.Constant) and isinstance(sl.value, int):
        return sl.value
    if isinstance(sl, ast.UnaryOp) and isinstance(sl.op, ast.USub) and isinstance(sl.operand, ast.Constant):
        return -sl.operand.value
    return None


def describe(v) -> str:
    if isinstance(v, Opaque):
        return f"`{v.text}`"
    if isinstance(v, Ended):
        return v.reason
    return type(v).__name__


def truth_of(v):
    if isinstance(v, Truth):
        return v.term
    if isinstance(v, Unevaluated):
        return v.var != 0
    if isinstance(v, Num):
        return v.term != 0 if symbolic(v.term) else v.term != 0
    if isinstance(v, NoneValue):
        return False
    if isinstance(v, (Alloc, Record, Instance, ClassRef, FuncRef, EnumMember)):
        return True
    return None


def compare_values(op, a, b, as_int=None):
    if isinstance(a, Unevaluated) or isinstance(b, Unevaluated):
        if isinstance(op, (ast.Is, ast.IsNot)):
            return None
        x = a.var if isinstance(a, Unevaluated) else (as_int(a) if as_int else None)
        y = b.var if isinstance(b, Unevaluated) else (as_int(b) if as_int else None)
        if x is None or y is None:
            return None
        return compare_values(op, Num(x), Num(y))
    if isinstance(op, (ast.Is, ast.IsNot)):
        if isinstance(a, (Opaque, Ended)) or isinstance(b, (Opaque, Ended)):
            return None
        same = isinstance(a, NoneValue) and isinstance(b, NoneValue)
        if not (isinstance(a, NoneValue) or isinstance(b, NoneValue)):
            if isinstance(a, EnumMember) and isinstance(b, EnumMember):
                same = a == b
            else:
                return None
        return same if isinstance(op, ast.Is) else not same
    if isinstance(a, EnumMember) and isinstance(b, EnumMember):
        eq = a.enum == b.enum and a.member == b.member
        if isinstance(op, ast.Eq):
            return eq
        if isinstance(op, ast.NotEq):
            return not eq
        return None
    if isinstance(a, Num) and isinstance(b, Num):
        x, y = a.term, b.term
        table = {ast.Eq: lambda: x == y, ast.NotEq: lambda: x != y, ast.Lt: lambda: x < y,
                 ast.LtE: lambda: x <= y, ast.Gt: lambda: x > y, ast.GtE: lambda: x >= y}
        fn = table.get(type(op))
        return fn() if fn else None
    if isinstance(a, Truth) and isinstance(b, Truth) and isinstance(op, (ast.Eq, ast.NotEq)):
        eq = a.term == b.term
        return eq if isinstance(op, ast.Eq) else negate(eq)
    return None


def negate(t):
    return z3.Not(t) if isinstance(t, z3.ExprRef) else not t


def combine(terms, conj: bool):
    if any(isinstance(t, z3.ExprRef) for t in terms):
        ts = [t if isinstance(t, z3.ExprRef) else z3.BoolVal(bool(t)) for t in terms]
        return z3.And(*ts) if conj else z3.Or(*ts)
    return all(terms) if conj else any(terms)


def assume(path: Path, t, polarity: bool):
    """``path`` under test ``t`` taken with ``polarity``; None when that is impossible."""
    if t is None:
        return path
    want = t if polarity else negate(t)
    if isinstance(want, z3.ExprRef):
        simple = z3.simplify(want)
        if z3.is_false(simple):
            return None
        return path if z3.is_true(simple) else path.cond(want)
    return path if want else None


def delta(before: Path, after: Path) -> tuple:
    """What a resolution added to a path (to replay it on another path with the same pins)."""
    pins = tuple((k, v) for k, v in after.pins if before.pin(k) is not v)
    return (pins, after.conds[len(before.conds):], after.trail[len(before.trail):],
            tuple(n for n in after.notes if n not in before.notes))


def apply_delta(path: Path, delta: tuple) -> Path:
    pins, conds, trail, notes = delta
    for k, v in pins:
        path = path.with_pin(k, v)
    path = replace(path, conds=path.conds + conds, trail=path.trail + trail)
    for n in notes:
        path = path.note(n)
    return path


class TermKey:
    """A Z3 term as a key, by its id (hash-consed: equal terms share one).  The key holds its
    term: Z3 hands a freed term's id to the next term made, so a key that did not would come
    to name another term and a set of them would skip it as seen."""

    __slots__ = ("term", "id")

    def __init__(self, term: z3.ExprRef):
        self.term, self.id = term, term.get_id()

    def __hash__(self) -> int:
        return hash(self.id)

    def __eq__(self, other) -> bool:
        return isinstance(other, TermKey) and other.id == self.id

    def __repr__(self) -> str:
        return f"TermKey({self.id})"


def term_ids(terms) -> tuple:
    """A hashable identity of Z3 terms (printing them would cost more than the whole trace):
    :class:`TermKey` per term, other values as they are."""
    return tuple(TermKey(t) if isinstance(t, z3.ExprRef) else t for t in terms)


def dedupe(alts: list) -> list:
    """One alternative per untraceable value (their paths do not matter)."""
    seen, out = set(), []
    for v, p in alts:
        if isinstance(v, (Opaque, Ended, NoneValue)):
            key = (type(v), v)
        elif isinstance(v, Alloc):
            # The same allocation for the same owner under the same conditions: the paths
            # differ only in choices that did not matter for it.
            key = (v.site, v.owner, v.view, term_ids(v.dims), term_ids(p.conds))
        else:
            out.append((v, p))
            continue
        if key in seen:
            continue
        seen.add(key)
        out.append((v, p))
    return out
