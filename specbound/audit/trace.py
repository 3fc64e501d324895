"""Trace every buffer that reaches the two kernels back to the allocation that creates it.

Start: each call site of a kernel (:data:`.bindings.KV_SINK`, :data:`.bindings.TREE_SINK`),
for every class whose instances run the method it sits in.  From the buffer argument the
tracer walks back, with ``ast`` only, through

* locals (the assignments that reach the use, under the ``if`` tests that guard them),
  tuple unpacking, slices and ``x[i]`` rows, ``.clone()`` and the like;
* parameters: the argument of every call site of the function (positional or keyword,
  defaults included); a method's callers are the calls its class (or a subclass)
  makes on ``self`` or ``super()``, and calls on other receivers; ``__init__``'s are
  the constructor calls;
* ``self.attr``: every assignment of the attribute in the methods the instance runs (the
  most derived definition of each, and those it reaches through ``super()``), properties;
* method calls on objects the tracer cannot see (``x.attn_backend.get_...()``): every
  class that defines the method, and every subclass that inherits it;
* returns of the functions it descends into, record constructors (``VerifyMask(buffer=...)``)
  and their fields;

to an allocation (``torch.zeros/empty/full/...``), whose shape it evaluates to Z3 terms
in the same walk: names are traced the same way, and where a name has no assignment the
tracer asks the binding table (:mod:`.bindings`).  Calls of sglang's own pure helpers
(``draft_kv_indices_buffer_width``) are executed symbolically (:mod:`.symexec`), path by path.

Values carry their path: the ``if`` tests they were found under (Z3 conditions; a test
reads a parameter as a Z3 variable, tied to the values the parameter is later traced to;
a test the tracer cannot evaluate is dropped, which only weakens the hypotheses) and the choices
made on the way (a local, a parameter's call site, a ``self`` class), so that the buffer,
its stride and the mask layout read at one kernel call come from one consistent path.
A walk that cannot go on ends in an :class:`Ended` value that says where and why.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from . import bindings
from .program import FUNC_TYPES, FuncInfo, Program, guards
from .trace_attributes import AttributesMixin
from .trace_calls import CallsMixin
from .trace_parameters import ParametersMixin
from .trace_values import (
    MAX_ALTERNATIVES, MAX_STEPS, Alloc, ClassRef, Ended, Frame, FuncRef, Instance, Items, NoneValue, Num, Opaque,
    Path, Truth, Unevaluated, apply_delta, assume, combine, compare_values, dedupe, delta, name_targets, negate,
    no_args, row_of, source_text, truth_of,
)


class Tracer(CallsMixin, ParametersMixin, AttributesMixin):
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
            return [(Ended("the tracer's step budget is spent", self._at(frame, expr), machinery=True), path)]
        key = (frame.key, id(expr), receiver)
        if key in self._active:
            self._cycles += 1
            return []  # a cycle: its values are the ones the outer walk already enumerates
        memo_key = (key, self._in_guard > 0)
        for consulted, results in self._memo.get(memo_key, ()):
            if all(path.pin(k) is v for k, v in consulted):
                self._consult(consulted)
                return [(v, apply_delta(path, delta)) for v, delta in results]
        self._active.add(key)
        self._consulted.append({})
        cycles = self._cycles
        try:
            out = self._resolve(expr, frame, path, receiver)
        except RecursionError:
            out = [(Ended("trail too deep", self._at(frame, expr), machinery=True), path)]
        finally:
            self._active.discard(key)
            consulted = tuple(self._consulted.pop().items())
            self._consult(consulted)
        if self._cycles == cycles:  # a result cut short by a cycle depends on where it was asked
            self._memo.setdefault(memo_key, []).append((consulted, [(v, delta(path, p)) for v, p in out]))
        out = dedupe(out)
        if len(out) > MAX_ALTERNATIVES:
            self.cut += len(out) - MAX_ALTERNATIVES
            out = [(v, p.note(f"{len(out) - MAX_ALTERNATIVES} further alternatives of "
                              f"`{source_text(expr)}` not followed")) for v, p in out[:MAX_ALTERNATIVES]]
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
        text = source_text(e)
        if text in bindings.EXPRESSIONS:
            return [(Num(bindings.quantity(bindings.EXPRESSIONS[text], self.role)), path)]
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
                    q = assume(p, t, polarity)
                    if q is not None:
                        out += self.resolve(branch, frame, q, receiver)
            return out
        if isinstance(e, (ast.Tuple, ast.List)):
            if any(isinstance(x, ast.Starred) for x in e.elts):
                return [(Ended(f"unsupported syntax: starred element in `{text}`", self._at(frame, e), machinery=True), path)]
            return [(Items(tuple((x, frame) for x in e.elts)), path)]
        if isinstance(e, ast.NamedExpr):
            return self.resolve(e.value, frame, path, receiver)
        return [(Ended(f"unsupported syntax: {type(e).__name__} `{text[:60]}`", self._at(frame, e), machinery=True), path)]

    # --- names ------------------------------------------------------------------------------
    def _function_locals(self, func: FuncInfo):
        """name -> [(statement, target index path, value expr)] for every assignment in ``func``."""
        if func.key not in self._locals:
            out: dict[str, list] = {}
            for node in ast.walk(func.node):
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        for name, idx in name_targets(t):
                            out.setdefault(name, []).append((node, idx, node.value))
                elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
                    out.setdefault(node.target.id, []).append((node, (), node.value))
                elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                    out.setdefault(node.target.id, []).append((node, (), node))
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    for name, _ in name_targets(node.target):
                        out.setdefault(name, []).append((node, None, None))
                elif isinstance(node, (ast.With, ast.AsyncWith)):
                    for item in node.items:
                        if item.optional_vars is not None:
                            for name, _ in name_targets(item.optional_vars):
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
                    r = assume(q, t, polarity)
                    if r is not None:
                        if t is None:
                            r = r.note(f"{frame.func.rel}:{test.lineno} `if {source_text(test)[:50]}` not evaluated")
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
        assigned, param_reaches = self._reaching(frame.func, e, assigned)
        # One value per (name, the definitions that reach this use) on a path.
        key = ("local", frame.key, name, tuple(id(a[0]) for a in assigned), param_reaches)
        pinned = self._pinned(path, key)
        if pinned is not None:
            return [(pinned, path)]
        out = []
        if name in params and param_reaches:
            for v, p in self._param(name, frame, path, receiver):
                out.append((v, self._pin(p, key, v)))
        for stmt, idx, value in assigned:
            where = f"{frame.func.rel}:{_line(stmt)}"
            if value is None:
                out.append((Opaque(f"{name} ({type(stmt).__name__.lower()} target at {where})"), path))
                continue
            for p in self._guarded(frame, stmt, path):
                p = replace(p.step(f"{where} {source_text(stmt)[:90]}"), holder=name)
                if isinstance(value, ast.AugAssign):
                    vals = self._binop(ast.BinOp(value.target, value.op, value.value), frame, p)
                else:
                    vals = self.resolve(value, frame, p)
                for v, q in vals:
                    for w, r in self._unpack(v, idx, frame, q, value):
                        out.append((w, self._pin(r, key, w)))
        return out

    def _reaching(self, func: FuncInfo, use: ast.Name, assigned: list):
        """The assignments of a local that may reach ``use``, and whether the parameter's own
        value may: those before it (by line), minus any an assignment in a block that
        encloses the use overwrites on the way.  A use before every assignment (a loop
        carrying a value around) keeps them all."""
        stmt_of, blocks = self._statements(func)
        at = stmt_of.get(id(use))
        if at is None:
            return assigned, True
        # A comprehension has no line of its own: its target's stands for it.
        before = [a for a in assigned if a[0] is not at and _line(a[0]) <= use.lineno
                  and not any(n is use for n in ast.walk(a[0]))]
        if not before:
            return assigned, True
        use_blocks = blocks.get(id(at), ())
        killers = [a for a in before if blocks.get(id(a[0]), ()) == use_blocks[:len(blocks.get(id(a[0]), ()))]
                   and not isinstance(a[0], (ast.For, ast.AsyncFor, ast.comprehension))]
        if not killers:
            return before, True
        last = max(killers, key=lambda a: (a[0].lineno, a[0].col_offset))  # comprehensions never kill
        return [a for a in before if (a[0].lineno, a[0].col_offset) >= (last[0].lineno, last[0].col_offset)], False

    def _statements(self, func: FuncInfo):
        """node id -> its innermost statement, and statement id -> its enclosing blocks."""
        key = ("statements", func.key)
        if key not in self._locals:
            stmt_of: dict[int, ast.stmt] = {}
            blocks: dict[int, tuple] = {}

            def visit(body, chain):
                for s in body:
                    blocks[id(s)] = chain
                    for n in ast.walk(s):
                        stmt_of[id(n)] = s      # inner statements overwrite below
                    for field in ("body", "orelse", "finalbody"):
                        inner = getattr(s, field, None)
                        if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                            visit(inner, chain + ((id(s), field),))
                    for h in getattr(s, "handlers", []):
                        visit(h.body, chain + ((id(h), "handler"),))
            visit(func.node.body, ())
            self._locals[key] = (stmt_of, blocks)
        return self._locals[key]

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
            return self._unpack(row_of(v, f"[{i}]"), rest, frame, path, node)
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
        node = ast.FunctionDef(name="<module>", args=no_args(), body=[], decorator_list=[], lineno=1,
                               col_offset=0)
        return Frame(FuncInfo(node, path, rel), None, {}, f"{rel}:<module>", depth)

    # --- conditions ------------------------------------------------------------------------------
    def test(self, e, frame, path) -> list:
        """An ``if`` test or a conditional expression's test, evaluated cheaply: a parameter
        of an outermost frame is a Z3 variable (not followed to its call sites), no lookup by
        member name; what is not evaluated only weakens the path's hypotheses."""
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
                out.append((combine(terms, isinstance(e.op, ast.And)), p))
            return out
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            return [(None if t is None else negate(t), p) for t, p in self.truth(e.operand, frame, path)]
        if isinstance(e, ast.Compare) and len(e.ops) == 1:
            return self._compare(e, frame, path)
        out = []
        for v, p in self.resolve(e, frame, path):
            out.append((truth_of(v), p))
        return out or [(None, path)]

    def _compare(self, e, frame, path):
        op = e.ops[0]
        out = []
        for a, p in self.resolve(e.left, frame, path):
            for b, q in self.resolve(e.comparators[0], frame, p):
                out.append((compare_values(op, a, b, self._as_int), q))
        return out or [(None, path)]


def _line(node) -> int:
    return node.target.lineno if isinstance(node, ast.comprehension) else node.lineno
