"""Trace every buffer that reaches the two kernels back to the allocation that creates it.

Start: each call site of a kernel (:data:`.bindings.KV_SINK`, :data:`.bindings.TREE_SINK`),
for every class whose instances run the method it sits in.  From the buffer argument the
tracer walks back, with ``ast`` only, through

* locals (every assignment of the name in the function, under the ``if`` tests that
  guard it), tuple unpacking, slices and ``x[i]`` rows, ``.clone()`` and the like;
* parameters: the argument of every call site of the function (positional or keyword,
  defaults included); a method's callers are the calls its class (or a subclass)
  makes on ``self``, and calls on other receivers;
* ``self.attr``: every assignment of the attribute in the methods the instance's class
  runs (its own, then its bases', the most derived definition of each), properties;
* method calls on objects the tracer cannot see (``x.attn_backend.get_...()``): every
  class that defines the method, and every subclass that inherits it;
* returns of the functions it descends into, record constructors (``VerifyMask(buffer=...)``)
  and their fields;

to an allocation (``torch.zeros/empty/full/...``), whose shape it evaluates to Z3 terms
in the same walk: names are traced the same way, and where a name has no assignment the
tracer asks the binding table (:mod:`.bindings`).  Calls of sglang's own pure helpers
(``draft_kv_indices_buffer_width``) are executed symbolically (:mod:`.symexec`), path by path.

Values carry their path: the ``if`` tests they were found under (Z3 conditions; a test
the tracer cannot evaluate is dropped, which only weakens the hypotheses) and the choices
made on the way (a local, a parameter's call site, a ``self`` class), so that the buffer,
its stride and the mask layout read at one kernel call come from one consistent path.
A walk that cannot go on ends in an :class:`Ended` value that says where and why.
"""

from __future__ import annotations

import ast
import enum
import math
from dataclasses import dataclass, replace
from typing import Any, Iterable

import z3

from . import bindings as B
from . import symexec as S
from .program import FUNC_TYPES, ClassInfo, FuncInfo, Program, callee_name, guards

MAX_ALTERNATIVES = 160  # alternatives kept per expression (more: the rest is reported as cut)
MAX_DEPTH = 14          # frames below a kernel call site
MAX_STEPS = 6000
GUARD_CALLERS = 8       # an `if` test climbs to a parameter's call sites only when they are this few        # resolutions per trace (a budget, reported when spent)


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


TENSORLIKE = (Alloc,)


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


_NO_PIN = object()


class Tracer:
    """One tracer per package; :meth:`resolve` is the expression walk."""

    def __init__(self, program: Program, role: str | None = None):
        self.p = program
        self.role = role
        self._active: set = set()
        self._locals: dict = {}
        self._self_assigns: dict = {}
        self._guards: dict = {}
        self._modes = None
        self._in_guard = 0
        self._guard_climbs = 0
        self._cycles = 0
        self._memo: dict = {}
        self._consulted: list[dict] = []
        self.steps = 0
        self.cut = 0

    # --- entry --------------------------------------------------------------------------
    def top_frame(self, func: FuncInfo, self_val) -> Frame:
        owner = self_val.cls.name if isinstance(self_val, Instance) else ""
        return Frame(func, self_val, None, f"{func.rel}:{func.node.lineno}:{func.qual}|{owner}")

    def resolve(self, expr: ast.expr, frame: Frame, path: Path, receiver: bool = False) -> list:
        """Every value ``expr`` may have in ``frame`` along ``path``: [(value, path), ...]."""
        self.steps += 1
        if self.steps > MAX_STEPS:
            return [(Ended("the tracer's step budget is spent", self._at(frame, expr)), path)]
        key = (frame.key, id(expr), receiver)
        if key in self._active:
            self._cycles += 1
            return []  # a cycle: its values are the ones the outer walk already enumerates
        memo_key = (key, self._in_guard > 0)
        for consulted, results in self._memo.get(memo_key, ()):
            if all(path.pin(k) is v for k, v in consulted):
                self._consult(consulted)
                return [(v, _apply(path, delta)) for v, delta in results]
        self._active.add(key)
        self._consulted.append({})
        cycles = self._cycles
        try:
            out = self._resolve(expr, frame, path, receiver)
        except RecursionError:
            out = [(Ended("trail too deep", self._at(frame, expr)), path)]
        finally:
            self._active.discard(key)
            consulted = tuple(self._consulted.pop().items())
            self._consult(consulted)
        if self._cycles == cycles:  # a result cut short by a cycle depends on where it was asked
            self._memo.setdefault(memo_key, []).append((consulted, [(v, _delta(path, p)) for v, p in out]))
        out = _dedupe(out)
        if len(out) > MAX_ALTERNATIVES:
            self.cut += len(out) - MAX_ALTERNATIVES
            out = [(v, p.note(f"{len(out) - MAX_ALTERNATIVES} further alternatives of "
                              f"`{_text(expr)}` not followed")) for v, p in out[:MAX_ALTERNATIVES]]
        return out

    def _pinned(self, path: Path, key):
        """``path.pin(key)``, noted as an input of every resolution in progress (their memo
        entries then apply only to paths that made the same choice)."""
        value = path.pin(key)
        if self._consulted:
            self._consulted[-1][key] = value
        return value

    def _consult(self, consulted):
        if self._consulted:
            for k, v in consulted:
                self._consulted[-1].setdefault(k, v)

    def _at(self, frame: Frame, node: ast.AST) -> str:
        return f"{frame.func.rel}:{getattr(node, 'lineno', frame.func.node.lineno)}"

    # --- dispatch -------------------------------------------------------------------------
    def _resolve(self, e, frame, path, receiver):
        text = _text(e)
        if text in B.EXPRESSIONS:
            return [(Num(B.quantity(B.EXPRESSIONS[text], self.role)), path)]
        if isinstance(e, ast.Constant):
            v = e.value
            if v is None:
                return [(NoneValue(), path)]
            if isinstance(v, bool):
                return [(Truth(v), path)]
            if isinstance(v, int):
                return [(Num(v), path)]
            return [(Opaque(repr(v)), path)]
        if isinstance(e, ast.Name):
            return self._name(e, frame, path, receiver)
        if isinstance(e, ast.Attribute):
            return self._attribute(e, frame, path, receiver)
        if isinstance(e, ast.Call):
            return self._call(e, frame, path)
        if isinstance(e, ast.Subscript):
            return self._subscript(e, frame, path)
        if isinstance(e, ast.BinOp):
            return self._binop(e, frame, path)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return [(Num(-v.term), p) if isinstance(v, Num) else (v, p) for v, p in self.resolve(e.operand, frame, path)]
        if isinstance(e, (ast.Compare, ast.BoolOp)) or isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            return [(t if t is not None else Opaque(text), p) for t, p in self.truth(e, frame, path)]
        if isinstance(e, ast.IfExp):
            out = []
            for t, p in self.test(e.test, frame, path):
                for branch, polarity in ((e.body, True), (e.orelse, False)):
                    q = _assume(p, t, polarity)
                    if q is not None:
                        out += self.resolve(branch, frame, q, receiver)
            return out
        if isinstance(e, (ast.Tuple, ast.List)):
            if any(isinstance(x, ast.Starred) for x in e.elts):
                return [(Ended(f"unsupported syntax: starred element in `{text}`", self._at(frame, e)), path)]
            return [(Items(tuple((x, frame) for x in e.elts)), path)]
        if isinstance(e, ast.NamedExpr):
            return self.resolve(e.value, frame, path, receiver)
        return [(Ended(f"unsupported syntax: {type(e).__name__} `{text[:60]}`", self._at(frame, e)), path)]

    # --- names ------------------------------------------------------------------------------
    def _function_locals(self, func: FuncInfo):
        """name -> [(statement, target index path, value expr)] for every assignment in ``func``."""
        if func.key not in self._locals:
            out: dict[str, list] = {}
            for node in ast.walk(func.node):
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        for name, idx in _targets(t):
                            out.setdefault(name, []).append((node, idx, node.value))
                elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
                    out.setdefault(node.target.id, []).append((node, (), node.value))
                elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                    out.setdefault(node.target.id, []).append((node, (), node))
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    for name, _ in _targets(node.target):
                        out.setdefault(name, []).append((node, None, None))
                elif isinstance(node, (ast.With, ast.AsyncWith)):
                    for item in node.items:
                        if item.optional_vars is not None:
                            for name, _ in _targets(item.optional_vars):
                                out.setdefault(name, []).append((node, None, None))
                elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
                    out.setdefault(node.target.id, []).append((node, (), node.value))
                elif isinstance(node, FUNC_TYPES) and node is not func.node:
                    out.setdefault(node.name, []).append((node, None, None))
                elif isinstance(node, ast.ExceptHandler) and node.name:
                    out.setdefault(node.name, []).append((node, None, None))
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    for alias in node.names:
                        out.setdefault((alias.asname or alias.name).split(".")[0], []).append((node, None, None))
            self._locals[func.key] = out
            self._guards[func.key] = guards(func.node)
        return self._locals[func.key]

    def _guarded(self, frame: Frame, stmt, path: Path) -> list:
        """``path`` extended by the ``if`` tests around ``stmt`` (paths where a test is
        known false are dropped)."""
        self._function_locals(frame.func)
        tests = self._guards[frame.func.key].get(id(stmt), ())
        paths = [path]
        for test, polarity in tests:
            nxt = []
            for p in paths:
                for t, q in self.test(test, frame, p):
                    r = _assume(q, t, polarity)
                    if r is not None:
                        if t is None:
                            r = r.note(f"{frame.func.rel}:{test.lineno} `if {_text(test)[:50]}` not evaluated")
                        nxt.append(r)
            paths = nxt
        return paths

    def _name(self, e: ast.Name, frame: Frame, path: Path, receiver: bool):
        name = e.id
        if name == "self" and frame.self_val is not None:
            return [(frame.self_val, path)]
        assigned = self._function_locals(frame.func).get(name, [])
        params = frame.func.params()
        if not assigned and name not in params:
            return self._global(name, frame, path, e)
        key = ("local", frame.key, name)
        pinned = self._pinned(path, key)
        if pinned is not None:
            return [(pinned, path)]
        out = []
        if name in params:
            for v, p in self._param(name, frame, path, receiver):
                out.append((v, self._pin(p, key, v)))
        for stmt, idx, value in assigned:
            where = f"{frame.func.rel}:{stmt.lineno}"
            if value is None:
                out.append((Opaque(f"{name} ({type(stmt).__name__.lower()} target at {where})"), path))
                continue
            for p in self._guarded(frame, stmt, path):
                p = replace(p.step(f"{where} {_text(stmt)[:90]}"), holder=name)
                if isinstance(value, ast.AugAssign):
                    vals = self._binop(ast.BinOp(value.target, value.op, value.value), frame, p)
                else:
                    vals = self.resolve(value, frame, p)
                for v, q in vals:
                    for w, r in self._unpack(v, idx, frame, q, value):
                        out.append((w, self._pin(r, key, w)))
        return out

    def _pin(self, path: Path, key, value) -> Path:
        """Pin a local's value, except an object an ``if`` test could not see into (the
        value read outside the test may be more precise)."""
        if self._in_guard and isinstance(value, (Opaque, Ended, Unevaluated)):
            return path
        return path.with_pin(key, value)

    def _unpack(self, v, idx, frame, path, node):
        if not idx:
            return [(v, path)]
        i, rest = idx[0], idx[1:]
        if isinstance(v, Items):
            if i >= len(v.items):
                return [(Ended(f"unpacking element {i} of {len(v.items)}", self._at(frame, node)), path)]
            expr, f = v.items[i]
            return [w for x, p in self.resolve(expr, f, path) for w in self._unpack(x, rest, f, p, node)]
        if isinstance(v, Alloc):
            return self._unpack(_row(v, f"[{i}]"), rest, frame, path, node)
        if isinstance(v, (Ended, Opaque)):
            return [(v, path)]
        return [(Ended(f"unpacking a {type(v).__name__}", self._at(frame, node)), path)]

    def _global(self, name, frame, path, node):
        cls = self.p.class_for(name, frame.func.path)
        if cls is not None:
            return [(ClassRef(cls), path)]
        fn = self.p.function_for(name, frame.func.path)
        if fn is not None:
            return [(FuncRef(fn), path)]
        assigns = self.p.module_assignments(frame.func.path).get(name)
        if assigns:
            return [x for value in assigns for x in self.resolve(value, self._module_frame(frame), path)]
        return [(Opaque(name), path)]

    def _module_frame(self, frame: Frame) -> Frame:
        return self._file_frame(frame.func.path, frame.func.rel, frame.depth)

    def _file_frame(self, path, rel, depth=0) -> Frame:
        """A frame for module-level (or class-body) code of a file: no parameters, no self."""
        node = ast.FunctionDef(name="<module>", args=_no_args(), body=[], decorator_list=[], lineno=1,
                               col_offset=0)
        return Frame(FuncInfo(node, path, rel), None, {}, f"{rel}:<module>", depth)

    # --- parameters ---------------------------------------------------------------------------
    def _param(self, name, frame: Frame, path: Path, receiver: bool):
        if frame.args is not None:
            bound = frame.args.get(name)
            if bound is None:
                return [(Ended(f"parameter `{name}` of {frame.func.qual} not passed", frame.func.where), path)]
            expr, caller = bound
            return self.resolve(expr, caller, path, receiver)
        if name in B.PARAMETERS:
            term = B.quantity(B.PARAMETERS[name], self.role)
            if term is None:
                return [(Ended(f"`{name}` needs the calling graph runner", frame.func.where), path)]
            return [(Num(term), path)]
        if receiver:
            return [(Opaque(f"{name} (parameter of {frame.func.qual})"), path)]
        var = z3.Int(f"{name}@{frame.key}")
        if self._in_guard:
            return [(Unevaluated(var, f"{name} (parameter of {frame.func.qual})"), path)]
        out = []
        for v, p in self._from_callers(name, frame, path):
            as_int = self._as_int(v)
            out.append((v, p.cond(var == as_int) if as_int is not None else p))
        return out

    def _as_int(self, v):
        if isinstance(v, Num):
            return v.term
        if isinstance(v, Truth):
            return z3.If(v.term, 1, 0) if isinstance(v.term, z3.ExprRef) else int(v.term)
        if isinstance(v, EnumMember):
            modes = self._sglang_modes()
            if modes is not None and v.enum == modes.__name__ and v.member in modes.__members__:
                return int(modes[v.member])
        return None

    def _callers(self, frame: Frame):
        """(call node, caller frame) for every call site that may run ``frame.func``."""
        key = ("callers", frame.key)
        if key not in self._locals:
            self._locals[key] = self._find_callers(frame)
        return self._locals[key]

    def _find_callers(self, frame: Frame):
        func = frame.func
        if func.name == "__init__" and func.cls is not None:
            return self._constructor_calls(frame)
        out = []
        for site in self.p.calls_to(func.name):
            call, caller = site.call, site.caller
            f = call.func
            if func.cls is not None:
                if not isinstance(f, ast.Attribute):
                    continue
                on_self = isinstance(f.value, ast.Name) and f.value.id == "self"
                on_super = isinstance(f.value, ast.Call) and callee_name(f.value.func) == "super"
                if on_self or on_super:
                    if not isinstance(frame.self_val, Instance) or caller.cls is None:
                        continue
                    if self.p.lookup(frame.self_val.cls, caller.name) != caller:
                        continue  # the instance runs another definition of the caller
                    if on_self and self.p.lookup(frame.self_val.cls, func.name) != func:
                        continue
                    out.append((call, self.top_frame(caller, frame.self_val)))
                else:
                    for cls in (self.p.classes_running(caller) if caller.cls else [None]):
                        out.append((call, self.top_frame(caller, Instance(cls) if cls else None)))
            else:
                if isinstance(f, ast.Name) and self.p.function_for(f.id, caller.path) != func:
                    continue
                if isinstance(f, ast.Attribute) and not (isinstance(f.value, ast.Name) and
                                                         self.p.module_named(f.value.id, caller.path) == func.path):
                    continue  # `x.f(...)` calls our function only through its module
                if isinstance(f, ast.Subscript):
                    continue
                for cls in (self.p.classes_running(caller) if caller.cls else [None]):
                    out.append((call, self.top_frame(caller, Instance(cls) if cls else None)))
        return out

    def _constructor_calls(self, frame: Frame):
        """Callers of ``__init__``: ``Cls(...)`` for the instance's class, and the
        ``super().__init__(...)`` of the subclasses between it and the definition."""
        inst = frame.self_val.cls if isinstance(frame.self_val, Instance) else frame.func.cls
        out = []
        if inst is frame.func.cls or self.p.lookup(inst, "__init__") == frame.func:
            for site in self.p.calls_to(inst.name):
                if isinstance(site.call.func, ast.Name) and self.p.class_for(site.call.func.id, site.caller.path) is inst:
                    for cls in (self.p.classes_running(site.caller) if site.caller.cls else [None]):
                        out.append((site.call, self.top_frame(site.caller, Instance(cls) if cls else None)))
        for c in self.p.mro(inst):
            if c is frame.func.cls:
                break
            init = c.methods().get("__init__")
            if init is None:
                continue
            for node in ast.walk(init.node):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr == "__init__" and isinstance(node.func.value, ast.Call) and \
                        callee_name(node.func.value.func) == "super":
                    out.append((node, self.top_frame(init, frame.self_val)))
        return out

    def _from_callers(self, name, frame: Frame, path: Path):
        key = ("site", frame.key)
        callers = self._callers(frame)
        if not callers:
            return [(Ended(f"parameter `{name}` of {frame.func.qual}: no call site in the package "
                           "reaches it", frame.func.where, absent=True), path)]
        pinned = self._pinned(path, key)
        return self._each_caller(name, frame, path, callers, key, pinned)

    def _each_caller(self, name, frame, path, callers, key, pinned):
        out = []
        for i, (call, caller) in enumerate(callers):
            if pinned is not None and pinned != i:
                continue
            p = path if pinned is not None else path.with_pin(key, i)
            expr = _argument(call, frame.func, name, method=frame.func.cls is not None)
            where = f"{caller.func.rel}:{call.lineno}"
            if expr is _MISSING:
                out.append((Ended(f"the call at {where} passes no `{name}`", where), p))
                continue
            if expr is _STARRED:
                out.append((Ended(f"the call at {where} passes *args/**kwargs", where), p))
                continue
            if expr is None:  # the default
                default = _default(frame.func, name)
                vals = self.resolve(default, frame, p) if default is not None else \
                    [(Ended(f"`{name}` has no default", frame.func.where), p)]
                out += [(v, q.step(f"{where} (default of `{name}`)")) for v, q in vals]
                continue
            out += self.resolve(expr, caller, p.step(f"{where} {_text(call)[:90]}"))
        return out

    # --- attributes ---------------------------------------------------------------------------
    def _attribute(self, e: ast.Attribute, frame: Frame, path: Path, receiver: bool = False):
        attr = e.attr
        base_is_local = isinstance(e.value, ast.Name) and e.value.id != "self" and \
            e.value.id in self._function_locals(frame.func)
        if attr in B.ATTRIBUTES and not base_is_local:
            return [(Num(B.quantity(B.ATTRIBUTES[attr], self.role)), path)]
        out = []
        for recv, p in self.resolve(e.value, frame, path, receiver=True):
            out += self._member(recv, attr, frame, p, e, receiver)
        return out

    def _member(self, recv, attr, frame, path, node, receiver=False):
        if isinstance(recv, Instance):
            return self._instance_attr(recv, attr, path, node, frame, receiver=receiver)
        if isinstance(recv, Record):
            got = recv.field_of(attr)
            if got is not None:
                return self.resolve(got[0], got[1], path.step(f"{recv.site} field `{attr}` of {recv.cls.name}"))
            return self._instance_attr(Instance(recv.cls), attr, path, node, frame, self_val=recv, receiver=receiver)
        if isinstance(recv, ClassRef):
            if _is_enum(self.p, recv.cls):
                return [(EnumMember(recv.cls.name, attr), path)]
            return [(Opaque(f"{recv.cls.name}.{attr}"), path)]
        if isinstance(recv, Alloc):
            if attr == "shape":
                return [(ShapeOf(recv), path)]
            return [(Opaque(f"tensor.{attr}"), path)]
        if isinstance(recv, NoneValue):
            return []  # attribute of None: not a live path
        if isinstance(recv, Ended):
            return [(recv, path)]
        found = self._duck_property(attr, path, node, frame)
        if receiver:
            # An object reached by duck typing is only a receiver here: what matters is a
            # record or buffer; further members of an object are looked up by name anyway.
            found = [(Opaque(f"<object>.{attr}"), p) if isinstance(v, (Instance, ClassRef, FuncRef)) else (v, p)
                     for v, p in found]
        return found

    def _instance_attr(self, inst: Instance, attr, path, node, frame, self_val=None, receiver=False):
        cls = inst.cls
        self_val = self_val or inst
        method = self.p.lookup(cls, attr)
        if method is not None and method.is_property():
            return self._returns(method, self_val, {}, frame, path, node)
        if method is not None:
            return [(FuncRef(method), path)]
        out = []
        for m in self.p.visible_methods(cls).values():
            for stmt, idx, value in self._assignments_to_self(m).get(attr, []):
                mframe = self.top_frame(m, self_val)
                where = f"{m.rel}:{stmt.lineno}"
                for p in self._guarded(mframe, stmt, path):
                    p = replace(p.step(f"{where} {_text(stmt)[:90]}"), holder=f"self.{attr}")
                    for v, q in self.resolve(value, mframe, p, receiver):
                        out += self._unpack(v, idx, mframe, q, value)
        for c in self.p.mro(cls):  # class-level defaults
            for s in c.node.body:
                if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in s.targets):
                    out += self.resolve(s.value, self._file_frame(c.path, c.rel, frame.depth), path)
        if not out:
            return [(Ended(f"`self.{attr}`: no assignment in {cls.name} or its bases", cls.where, absent=True), path)]
        return out

    def _assignments_to_self(self, m: FuncInfo):
        if m.key not in self._self_assigns:
            out: dict[str, list] = {}
            for node in ast.walk(m.node):
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if node.value is None:
                        continue
                    for t in targets:
                        for target, idx in _attr_targets(t):
                            out.setdefault(target, []).append((node, idx, node.value))
            self._self_assigns[m.key] = out
        return self._self_assigns[m.key]

    def _duck_property(self, attr, path, node, frame):
        props = [m for m in self.p.methods_named(attr) if m.is_property()]
        if not props or self._in_guard:
            return [(Opaque(f"<object>.{attr}"), path)]
        if ("duck", attr) in self._active:
            # A delegating property (`self.inner.verify_mask`) inside the enumeration of every
            # class's `verify_mask`: its values are among the ones already enumerated.
            self._cycles += 1
            return []
        self._active.add(("duck", attr))
        try:
            return self._duck_property_all(attr, props, path, node, frame)
        finally:
            self._active.discard(("duck", attr))

    def _duck_property_all(self, attr, props, path, node, frame):
        out = []
        key = ("duck", frame.key, id(node))
        pinned = self._pinned(path, key)
        for m in props:
            for cls in self._instance_classes(m):
                ident = (m.key, cls.name)
                if pinned is not None and pinned != ident:
                    continue
                p = path if pinned is not None else path.with_pin(key, ident)
                out += self._returns(m, Instance(cls), {}, frame, p.step(f"{m.where} {cls.name}.{attr} (property)"),
                                     node)
        return out

    # --- calls --------------------------------------------------------------------------------
    def _call(self, e: ast.Call, frame: Frame, path: Path):
        f = e.func
        name = callee_name(f)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch":
            if name in B.ALLOCATORS:
                return self._alloc(e, frame, path, shape_args=True)
            if name in B.LIKE_ALLOCATORS:
                return [(replace(v, site=f"{frame.func.rel}:{e.lineno}", text=_text(e)[:160],
                                 owner=frame.owner, func=frame.func.qual), p) if isinstance(v, Alloc) else (v, p)
                        for v, p in self.resolve(e.args[0], frame, path)] if e.args else []
        if isinstance(f, ast.Attribute):
            if name in B.SAME_BUFFER:
                return self.resolve(f.value, frame, path)
            if name in ("view", "reshape", "flatten") and _is_flat(e):
                return [(_flat(v), p) if isinstance(v, Alloc) else (v, p) for v, p in self.resolve(f.value, frame, path)]
            if name == "size" or name == "numel":
                return [(_shape_call(v, name, e), p) if isinstance(v, Alloc) else (Opaque(_text(e)), p)
                        for v, p in self.resolve(f.value, frame, path)]
            if isinstance(f.value, ast.Call) and callee_name(f.value.func) == "super":
                return self._super_call(e, frame, path)
            out = []
            for recv, p in self.resolve(f.value, frame, path, receiver=True):
                out += self._method_call(recv, name, e, frame, p)
            return out
        if isinstance(f, ast.Name):
            if name in ("int", "abs") and e.args:
                return self.resolve(e.args[0], frame, path)
            if name in ("max", "min") and len(e.args) == 2:
                return self._minmax(name, e, frame, path)
            if name == "len" and e.args:
                return [(Num(v.dims[0]), p) if isinstance(v, Alloc) and v.dims else
                        (Num(len(v.items)), p) if isinstance(v, Items) else (Opaque(_text(e)), p)
                        for v, p in self.resolve(e.args[0], frame, path)]
            out = []
            for target, p in self.resolve(f, frame, path, receiver=True):
                out += self._call_value(target, e, frame, p)
            return out
        return [(Opaque(_text(e)[:80]), path)]

    def _call_value(self, target, e, frame, path):
        if isinstance(target, FuncRef):
            return self._invoke(target.func, None, e, frame, path)
        if isinstance(target, ClassRef):
            return self._construct(target.cls, e, frame, path)
        if isinstance(target, Ended):
            return [(target, path)]
        return [(Opaque(f"{_text(e.func)}(...)"), path)]

    def _method_call(self, recv, name, e, frame, path):
        if isinstance(recv, Instance):
            m = self.p.lookup(recv.cls, name)
            if m is not None:
                return self._invoke(m, recv, e, frame, path)
            return self._duck_call(name, e, frame, path)
        if isinstance(recv, Record):
            m = self.p.lookup(recv.cls, name)
            if m is not None:
                return self._invoke(m, recv, e, frame, path)
            got = recv.field_of(name)
            return [(Opaque(f"{recv.cls.name}.{name}(...)"), path)] if got is None else []
        if isinstance(recv, ClassRef):
            m = self.p.lookup(recv.cls, name)
            return self._invoke(m, None, e, frame, path) if m is not None else [(Opaque(_text(e)[:80]), path)]
        if isinstance(recv, Alloc):
            return [(Opaque(f"tensor.{name}(...)"), path)]
        if isinstance(recv, NoneValue):
            return []
        if isinstance(recv, Ended):
            return [(recv, path)]
        return self._duck_call(name, e, frame, path)

    def _duck_call(self, name, e, frame, path):
        """A method called on an object the tracer cannot see: every class that runs a
        definition of that name (its own or inherited)."""
        methods = self.p.methods_named(name)
        if not methods or self._in_guard:
            return [(Opaque(f"<object>.{name}(...)"), path)]
        if ("duck()", name) in self._active:
            self._cycles += 1
            return []  # as for properties: a delegating method inside the enumeration
        self._active.add(("duck()", name))
        try:
            return self._duck_call_all(name, methods, e, frame, path)
        finally:
            self._active.discard(("duck()", name))

    def _duck_call_all(self, name, methods, e, frame, path):
        key = ("duck", frame.key, id(e))
        pinned = self._pinned(path, key)
        out = []
        for m in methods:
            for cls in self._instance_classes(m):
                ident = (m.key, cls.name)
                if pinned is not None and pinned != ident:
                    continue
                p = path if pinned is not None else path.with_pin(key, ident)
                out += self._invoke(m, Instance(cls), e, frame, p.step(f"{frame.func.rel}:{e.lineno} "
                                                                       f"{cls.name}.{name}()"))
        return out

    def _instance_classes(self, m: FuncInfo) -> list:
        """The classes to trace a method in: every class that runs it, or only its own class
        when its body never reads ``self`` (then every instance gives the same values)."""
        if not any(isinstance(n, ast.Name) and n.id == "self" for n in ast.walk(m.node)):
            return [m.cls]
        return self.p.classes_running(m)

    def _super_call(self, e, frame, path):
        cls = frame.func.cls
        if cls is None or not isinstance(frame.self_val, (Instance, Record)):
            return [(Opaque(_text(e)[:80]), path)]
        mro = self.p.mro(frame.self_val.cls)
        name = e.func.attr
        after = mro[mro.index(cls) + 1:] if cls in mro else []
        for c in after:
            m = c.methods().get(name)
            if m is not None:
                return self._invoke(m, frame.self_val, e, frame, path)
        return [(Opaque(_text(e)[:80]), path)]

    def _invoke(self, func: FuncInfo, self_val, call: ast.Call, frame: Frame, path: Path):
        """The values ``func`` returns when called at ``call`` (in ``frame``)."""
        if frame.depth >= MAX_DEPTH:
            return [(Ended("trail too deep (call nesting)", self._at(frame, call)), path)]
        if func.cls is not None and self_val is None and not func.is_static():
            return [(Opaque(f"unbound method {func.qual}"), path)]
        args = _bind_call(func, call, frame, method=func.cls is not None and not func.is_static())
        if isinstance(args, str):
            return [(Ended(args, self._at(frame, call)), path)]
        if self_val is None and _is_pure(func):
            executed = self._execute(func, args, frame, path, call)
            if executed is not None:
                return executed
        return self._returns(func, self_val, args, frame, path.step(f"{frame.func.rel}:{call.lineno} "
                                                                     f"{_text(call)[:90]}"), call)

    def _returns(self, func: FuncInfo, self_val, args, frame, path, node):
        if args:
            key = f"{frame.key}>{func.rel}:{func.node.lineno}@{getattr(node, 'lineno', 0)}"
        else:  # no arguments: the frame is the same wherever it is called from
            owner = self_val.cls.name if isinstance(self_val, Instance) else id(self_val)
            key = f"{func.rel}:{func.node.lineno}:{func.qual}|{owner}"
        callee = Frame(func, self_val, args, key, frame.depth + 1)
        if self_val is None and frame.func.name != "<module>":
            callee.inherited_owner = frame.owner
            callee.via = frame.via or f"{frame.func.rel}:{getattr(node, 'lineno', 0)}"

        returns = self._returns_of(func)
        if not returns:
            return [(NoneValue(), path)]
        out = []
        for r in returns:
            for p in self._guarded(callee, r, path):
                p = p.step(f"{func.rel}:{r.lineno} {_text(r)[:90]}")
                out += self.resolve(r.value, callee, p) if r.value is not None else [(NoneValue(), p)]
        return out

    def _returns_of(self, func: FuncInfo) -> list:
        key = ("returns", func.key)
        if key not in self._locals:
            nested = [d for d in ast.walk(func.node) if isinstance(d, FUNC_TYPES + (ast.Lambda,))
                      and d is not func.node]
            inner = {id(n) for d in nested for n in ast.walk(d)}
            self._locals[key] = [s for s in ast.walk(func.node) if isinstance(s, ast.Return) and id(s) not in inner]
        return self._locals[key]

    def _construct(self, cls: ClassInfo, e: ast.Call, frame: Frame, path: Path):
        init = self.p.lookup(cls, "__init__")
        fields = []
        names = _record_fields(self.p, cls)
        for i, a in enumerate(e.args):
            if isinstance(a, ast.Starred) or i >= len(names):
                break
            fields.append((names[i], a, frame))
        for kw in e.keywords:
            if kw.arg is not None:
                fields.append((kw.arg, kw.value, frame))
        if init is not None and not _record_fields(self.p, cls):
            # A class with its own __init__: trace it as an instance of the class.
            return [(Instance(cls), path)]
        return [(Record(cls, tuple(fields), f"{frame.func.rel}:{e.lineno}"), path)]

    # --- helpers executed symbolically ---------------------------------------------------------
    def _execute(self, func: FuncInfo, args, frame, path, call):
        """Run a pure sglang helper (arithmetic, if/assert, no tensors) on the arguments'
        Z3 terms, path by path (``symexec.explore``).  None when an argument is not a
        number or the helper cannot run symbolically (the caller then reads its returns)."""
        combos = [([], path)]
        for name in func.params():
            expr, f = args.get(name, (None, None))
            if expr is None:
                return None
            nxt = []
            for values, p in combos:
                for v, q in self.resolve(expr, f, p):
                    if not isinstance(v, (Num, Truth, EnumMember, NoneValue)):
                        return None
                    nxt.append((values + [self._concrete(v)], q))
            combos = nxt[:MAX_ALTERNATIVES]
        hook = S.make_bool_hook()
        ns = {"__sb_bool__": hook, "math": math}
        modes = self._sglang_modes()
        if modes is not None:
            ns[modes.__name__] = modes
        try:
            fn = self.p.index.load_helper(func.as_found(self.p.index), ns, transform=S.instrument)
        except Exception:  # noqa: BLE001 - not executable alone: read its returns instead
            return None
        out = []
        where = f"{frame.func.rel}:{call.lineno}"
        for values, path in combos:
            conds = [c for c in path.conds if isinstance(c, z3.BoolRef)]
            expl = S.explore(hook, lambda: fn(*values), conds)
            if expl.unsupported or expl.truncated:
                return None
            for run in expl.paths:
                if not run.returned and isinstance(run.error, (NameError, AttributeError, ImportError)):
                    return None  # a global this stand-in namespace lacks: read the returns instead
                if not run.returned:
                    continue  # the helper raises there: no buffer on that path
                p = path.step(f"{where} {_text(call)[:80]} (executed symbolically: {func.where})")
                for c in run.condition:
                    p = p.cond(c)
                out.append((self._from_python(run.value), p))
        return out

    def _sglang_modes(self):
        if self._modes is None:
            self._modes = False
            for cls in self.p.classes_named("TreeMaskMode"):
                try:
                    self._modes = self.p.index.load_helper(
                        FuncInfo(cls.node, cls.path, cls.rel).as_found(self.p.index),
                        {"IntEnum": enum.IntEnum, "Enum": enum.Enum, "enum": enum})
                    break
                except Exception:  # noqa: BLE001
                    continue
        return self._modes or None

    def _concrete(self, v):
        if isinstance(v, NoneValue):
            return None
        if isinstance(v, EnumMember):
            modes = self._sglang_modes()
            if modes is not None and v.enum == modes.__name__ and v.member in modes.__members__:
                return modes[v.member]
            return v
        return v.term

    def _from_python(self, x):
        if isinstance(x, enum.Enum):
            return EnumMember(type(x).__name__, x.name)
        if isinstance(x, bool) or isinstance(x, z3.BoolRef):
            return Truth(x)
        if isinstance(x, int) or isinstance(x, z3.ArithRef):
            return Num(x)
        if x is None:
            return NoneValue()
        return Opaque(repr(x)[:60])

    # --- allocations, subscripts, arithmetic -------------------------------------------------
    def _alloc(self, e: ast.Call, frame: Frame, path: Path, shape_args: bool):
        op = _text(e.func)
        positional = [a for a in e.args]
        kw = {k.arg: k.value for k in e.keywords if k.arg}
        if op.endswith(".full") or op.endswith(".empty_strided"):
            shape_exprs = positional[:1] or [kw.get("size")]
        elif len(positional) == 1:
            shape_exprs = positional
        elif positional:
            shape_exprs = [ast.Tuple(elts=positional, ctx=ast.Load())]
        else:
            shape_exprs = [kw.get("size")]
        if shape_exprs[0] is None:
            return [(Ended(f"`{_text(e)[:60]}`: no shape argument", self._at(frame, e)), path)]
        out = []
        site = f"{frame.func.rel}:{e.lineno}"
        holder = path.holder   # before the shape's own names are traced
        for shape, p in self.resolve(shape_exprs[0], frame, path):
            if isinstance(shape, Num):
                dim_lists = [([shape.term], p)]
            elif isinstance(shape, Items):
                dim_lists = self._dims(list(shape.items), p)
            elif isinstance(shape, ShapeOf):
                dim_lists = [(list(shape.alloc.dims), p)]
            elif isinstance(shape, Ended):
                out.append((shape, p))
                continue
            else:
                out.append((Ended(f"shape `{_text(shape_exprs[0])[:60]}` is not a number "
                                  f"({_describe(shape)})", site), p))
                continue
            for dims, q in dim_lists:
                bad = next((d for d in dims if isinstance(d, (Ended, Opaque))), None)
                if bad is not None:
                    out.append((bad if isinstance(bad, Ended) else
                                Ended(f"a dimension is `{bad.text}`, which no binding names", site), q))
                    continue
                out.append((Alloc(op, tuple(dims), site, _text(e)[:160], frame.owner, frame.func.qual, via=frame.via,
                                  holder=holder),
                            q.step(f"{site} {_text(e)[:90]}")))
        return out

    def _dims(self, items, path):
        """Every combination of the dimensions' values: [(terms, path)]."""
        combos = [([], path)]
        for expr, f in items:
            nxt = []
            for dims, p in combos:
                vals = self.resolve(expr, f, p)
                for v, q in vals:
                    if isinstance(v, Num):
                        nxt.append((dims + [v.term], q))
                    elif isinstance(v, (Ended, Opaque)):
                        nxt.append((dims + [v], q))
                    else:
                        nxt.append((dims + [Ended(f"dimension `{_text(expr)[:60]}` is {_describe(v)}",
                                                  f"{f.func.rel}:{getattr(expr, 'lineno', 0)}")], q))
            combos = nxt[:MAX_ALTERNATIVES]
        return combos

    def _subscript(self, e: ast.Subscript, frame: Frame, path: Path):
        out = []
        for v, p in self.resolve(e.value, frame, path):
            if isinstance(v, Items):
                idx = _const_index(e.slice)
                chosen = [v.items[idx]] if idx is not None and -len(v.items) <= idx < len(v.items) else list(v.items)
                for expr, f in chosen:
                    out += self.resolve(expr, f, p)
            elif isinstance(v, ShapeOf):
                idx = _const_index(e.slice)
                if idx is None or not -len(v.alloc.dims) <= idx < len(v.alloc.dims):
                    out.append((Ended(f"`{_text(e)}`: dimension index not a constant in range", self._at(frame, e)), p))
                else:
                    out.append((Num(v.alloc.dims[idx]), p))
            elif isinstance(v, Alloc):
                out += self._view(v, e.slice, frame, p)
            elif isinstance(v, (Ended, Opaque)):
                out.append((v, p))
            elif isinstance(v, NoneValue):
                continue
            else:
                out.append((Opaque(_text(e)[:60]), p))
        return out

    def _view(self, alloc: Alloc, sl, frame, path):
        if isinstance(sl, ast.Tuple):
            return [(Ended(f"multi-dimensional index `{_text(sl)}` of a buffer", self._at(frame, sl)), path)]
        if not isinstance(sl, ast.Slice):
            return [(_row(alloc, f"[{_text(sl)}]"), path)]
        if sl.step is not None or not alloc.dims:
            return [(Ended(f"strided slice `{_text(sl)}`", self._at(frame, sl)), path)]
        out = []
        lows = self.resolve(sl.lower, frame, path) if sl.lower is not None else [(Num(0), path)]
        for lo, p in lows:
            highs = self.resolve(sl.upper, frame, p) if sl.upper is not None else [(Num(alloc.dims[0]), p)]
            for hi, q in highs:
                if not (isinstance(lo, Num) and isinstance(hi, Num)):
                    out.append((Ended(f"slice bound of `[{_text(sl)}]` is not a number", self._at(frame, sl)), q))
                    continue
                d0 = alloc.dims[0]
                top = z3.If(hi.term < d0, hi.term, d0) if _symbolic(hi.term, d0) else min(hi.term, d0)
                out.append((replace(alloc, dims=(top - lo.term, *alloc.dims[1:]),
                                    view=alloc.view + f"[{_text(sl)}]"), q))
        return out

    def _binop(self, e: ast.BinOp, frame, path):
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: _floordiv, ast.Mod: lambda a, b: a % b, ast.Pow: _pow}
        fn = ops.get(type(e.op))
        if fn is None:
            return [(Ended(f"unsupported operator in `{_text(e)[:60]}`", self._at(frame, e)), path)]
        out = []
        for a, p in self.resolve(e.left, frame, path):
            for b, q in self.resolve(e.right, frame, p):
                if isinstance(a, Num) and isinstance(b, Num):
                    try:
                        out.append((Num(fn(a.term, b.term)), q))
                    except (TypeError, ZeroDivisionError, z3.Z3Exception) as err:
                        out.append((Ended(f"`{_text(e)[:60]}`: {err}", self._at(frame, e)), q))
                elif isinstance(a, Items) and isinstance(b, Items) and isinstance(e.op, ast.Add):
                    out.append((Items(a.items + b.items), q))
                else:
                    bad = a if not isinstance(a, Num) else b
                    out.append((bad if isinstance(bad, Ended) else
                                Ended(f"`{_text(e)[:60]}`: operand is {_describe(bad)}", self._at(frame, e)), q))
        return out

    def _minmax(self, name, e, frame, path):
        out = []
        for a, p in self.resolve(e.args[0], frame, path):
            for b, q in self.resolve(e.args[1], frame, p):
                if isinstance(a, Num) and isinstance(b, Num):
                    x, y = a.term, b.term
                    if _symbolic(x, y):
                        out.append((Num(z3.If(x >= y, x, y) if name == "max" else z3.If(x <= y, x, y)), q))
                    else:
                        out.append((Num(max(x, y) if name == "max" else min(x, y)), q))
                else:
                    out.append((Opaque(_text(e)[:60]), q))
        return out

    # --- conditions ------------------------------------------------------------------------------
    def test(self, e, frame, path) -> list:
        """An ``if`` test or a conditional expression's test, evaluated cheaply: parameters
        one call level up at most, no lookup by member name (what is not evaluated only
        weakens the path's hypotheses)."""
        self._in_guard += 1
        try:
            return self.truth(e, frame, path)
        finally:
            self._in_guard -= 1

    def truth(self, e, frame, path) -> list:
        """[(Z3 Bool / Python bool / None for unknown, path)]."""
        if isinstance(e, ast.BoolOp):
            combos = [([], path)]
            for v in e.values:
                nxt = []
                for acc, p in combos:
                    for t, q in self.truth(v, frame, p):
                        nxt.append((acc + [t], q))
                combos = nxt[:MAX_ALTERNATIVES]
            out = []
            for terms, p in combos:
                if any(t is None for t in terms):
                    known = [t for t in terms if t is not None]
                    # and: a known False decides it; or: a known True decides it
                    if isinstance(e.op, ast.And) and any(t is False for t in known):
                        out.append((False, p))
                    elif isinstance(e.op, ast.Or) and any(t is True for t in known):
                        out.append((True, p))
                    else:
                        out.append((None, p))
                    continue
                out.append((_combine(terms, isinstance(e.op, ast.And)), p))
            return out
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            return [(None if t is None else _negate(t), p) for t, p in self.truth(e.operand, frame, path)]
        if isinstance(e, ast.Compare) and len(e.ops) == 1:
            return self._compare(e, frame, path)
        out = []
        for v, p in self.resolve(e, frame, path):
            out.append((_truth_of(v), p))
        return out or [(None, path)]

    def _compare(self, e, frame, path):
        op = e.ops[0]
        out = []
        for a, p in self.resolve(e.left, frame, path):
            for b, q in self.resolve(e.comparators[0], frame, p):
                out.append((_compare(op, a, b, self._as_int), q))
        return out or [(None, path)]


# --- small pure helpers ----------------------------------------------------------------------

_MISSING, _STARRED = object(), object()


def _text(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return type(node).__name__


def _symbolic(*xs) -> bool:
    return any(isinstance(x, z3.ExprRef) for x in xs)


def _floordiv(a, b):
    return a / b if _symbolic(a, b) else a // b


def _pow(a, b):
    if _symbolic(a, b):
        if isinstance(b, int) and b >= 0:
            out = 1
            for _ in range(b):
                out = out * a
            return out
        raise TypeError("symbolic exponent")
    return a ** b


def _targets(t, idx=()):
    if isinstance(t, ast.Name):
        yield t.id, idx
    elif isinstance(t, (ast.Tuple, ast.List)):
        for i, x in enumerate(t.elts):
            if isinstance(x, ast.Starred):
                continue
            yield from _targets(x, idx + (i,))


def _attr_targets(t, idx=()):
    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
        yield t.attr, idx
    elif isinstance(t, (ast.Tuple, ast.List)):
        for i, x in enumerate(t.elts):
            yield from _attr_targets(x, idx + (i,))


def _no_args():
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                         defaults=[])


def _argument(call: ast.Call, func: FuncInfo, name: str, method: bool):
    """The expression ``call`` passes for parameter ``name`` of ``func``; None: the default;
    _MISSING: not passed and no default; _STARRED: hidden in *args/**kwargs."""
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
            return _STARRED
        if i < len(positional):
            return positional[i]
    if any(kw.arg is None for kw in call.keywords):
        return _STARRED
    return None if _default(func, name) is not None else _MISSING


def _default(func: FuncInfo, name: str):
    a = func.node.args
    positional = [*a.posonlyargs, *a.args]
    for p, d in zip(positional[len(positional) - len(a.defaults):], a.defaults):
        if p.arg == name:
            return d
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        if p.arg == name and d is not None:
            return d
    return None


def _bind_call(func: FuncInfo, call: ast.Call, frame: Frame, method: bool):
    """param -> (expr, frame) for a call the tracer descends into, or an error text."""
    out = {}
    for name in func.params():
        if method and name == func.params()[0] and name in ("self", "cls"):
            continue
        expr = _argument(call, func, name, method)
        if expr is _STARRED:
            return f"call of {func.qual} passes *args/**kwargs"
        if expr is _MISSING:
            return f"call of {func.qual} passes no `{name}`"
        if expr is None:
            default = _default(func, name)
            out[name] = (default, Frame(func, None, {}, f"{func.rel}:{func.node.lineno}:defaults", frame.depth))
        else:
            out[name] = (expr, frame)
    return out


def _is_pure(func: FuncInfo) -> bool:
    """Arithmetic only: no tensor, no call other than builtins and sglang helpers of the same kind."""
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


def _record_fields(p: Program, cls: ClassInfo) -> list[str]:
    """Field names of a dataclass / msgspec.Struct / NamedTuple, in order (bases first)."""
    names: list[str] = []
    for c in reversed(p.mro(cls)):
        for s in c.node.body:
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.target.id not in names:
                names.append(s.target.id)
    return names


def _is_enum(p: Program, cls: ClassInfo) -> bool:
    for c in p.mro(cls):
        for b in c.node.bases:
            if "Enum" in _text(b):
                return True
    return False


def _row(alloc: Alloc, view: str) -> Alloc:
    return replace(alloc, dims=alloc.dims[1:] if len(alloc.dims) > 1 else (1,), view=alloc.view + view)


def _is_flat(e: ast.Call) -> bool:
    if callee_name(e.func) == "flatten":
        return not e.args
    return len(e.args) == 1 and isinstance(e.args[0], (ast.UnaryOp, ast.Constant)) and _text(e.args[0]) == "-1"


def _flat(alloc: Alloc) -> Alloc:
    return replace(alloc, dims=(alloc.numel(),), view=alloc.view + ".flatten()")


def _shape_call(alloc: Alloc, name: str, e: ast.Call):
    if name == "numel":
        return Num(alloc.numel())
    idx = _const_index(e.args[0]) if e.args else None
    if idx is None or not -len(alloc.dims) <= idx < len(alloc.dims):
        return Opaque(_text(e))
    return Num(alloc.dims[idx])


def _const_index(sl):
    if isinstance(sl, ast.Constant) and isinstance(sl.value, int):
        return sl.value
    if isinstance(sl, ast.UnaryOp) and isinstance(sl.op, ast.USub) and isinstance(sl.operand, ast.Constant):
        return -sl.operand.value
    return None


def _describe(v) -> str:
    if isinstance(v, Opaque):
        return f"`{v.text}`"
    if isinstance(v, Ended):
        return v.reason
    return type(v).__name__


def _truth_of(v):
    if isinstance(v, Truth):
        return v.term
    if isinstance(v, Unevaluated):
        return v.var != 0
    if isinstance(v, Num):
        return v.term != 0 if _symbolic(v.term) else v.term != 0
    if isinstance(v, NoneValue):
        return False
    if isinstance(v, (Alloc, Record, Instance, ClassRef, FuncRef, EnumMember)):
        return True
    return None


def _compare(op, a, b, as_int=None):
    if isinstance(a, Unevaluated) or isinstance(b, Unevaluated):
        if isinstance(op, (ast.Is, ast.IsNot)):
            return None
        x = a.var if isinstance(a, Unevaluated) else (as_int(a) if as_int else None)
        y = b.var if isinstance(b, Unevaluated) else (as_int(b) if as_int else None)
        if x is None or y is None:
            return None
        return _compare(op, Num(x), Num(y))
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
        return eq if isinstance(op, ast.Eq) else _negate(eq)
    return None


def _negate(t):
    return z3.Not(t) if isinstance(t, z3.ExprRef) else not t


def _combine(terms, conj: bool):
    if any(isinstance(t, z3.ExprRef) for t in terms):
        ts = [t if isinstance(t, z3.ExprRef) else z3.BoolVal(bool(t)) for t in terms]
        return z3.And(*ts) if conj else z3.Or(*ts)
    return all(terms) if conj else any(terms)


def _assume(path: Path, t, polarity: bool):
    """``path`` under test ``t`` taken with ``polarity``; None when that is impossible."""
    if t is None:
        return path
    want = t if polarity else _negate(t)
    if isinstance(want, z3.ExprRef):
        simple = z3.simplify(want)
        if z3.is_false(simple):
            return None
        return path if z3.is_true(simple) else path.cond(want)
    return path if want else None


def _delta(before: Path, after: Path) -> tuple:
    """What a resolution added to a path (to replay it on another path with the same pins)."""
    pins = tuple((k, v) for k, v in after.pins if before.pin(k) is not v)
    return (pins, after.conds[len(before.conds):], after.trail[len(before.trail):],
            tuple(n for n in after.notes if n not in before.notes))


def _apply(path: Path, delta: tuple) -> Path:
    pins, conds, trail, notes = delta
    for k, v in pins:
        path = path.with_pin(k, v)
    path = replace(path, conds=path.conds + conds, trail=path.trail + trail)
    for n in notes:
        path = path.note(n)
    return path


def _dedupe(alts: list) -> list:
    """One alternative per untraceable value (their paths do not matter)."""
    seen, out = set(), []
    for v, p in alts:
        if isinstance(v, (Opaque, Ended, NoneValue)):
            key = (type(v), v)
        elif isinstance(v, Alloc):
            # The same allocation for the same owner under the same conditions: the paths
            # differ only in choices that did not matter for it.
            key = (v.site, v.owner, v.view, str(v.dims), tuple(str(c) for c in p.conds))
        else:
            out.append((v, p))
            continue
        if key in seen:
            continue
        seen.add(key)
        out.append((v, p))
    return out


def iter_values(alts: Iterable) -> Iterable:
    for v, _ in alts:
        yield v
