"""Trace a buffer that reaches a kernel back to the allocation that creates it.

Start: each call site of a kernel the engine's adapter names (sglang's:
:mod:`specbound.engines.sglang.sinks`), for every class whose instances run the method it
sits in.  From the buffer argument the tracer walks back, with ``ast`` only, through

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
tracer asks the engine's bindings (:class:`.engine_bindings.Bindings`, passed in by its adapter).
Calls of the engine's own pure helpers (sglang's ``draft_kv_indices_buffer_width``) are executed
symbolically (:mod:`.trace_helpers`), path by path.

Values carry their path: the ``if`` tests they were found under (Z3 conditions; a test
reads a parameter as a Z3 variable, tied to the values the parameter is later traced to;
a test the tracer cannot evaluate is dropped, which only weakens the hypotheses) and the choices
made on the way (a local, a parameter's call site, a ``self`` class), so that the buffer,
its stride and the mask layout read at one kernel call come from one consistent path.
A walk that cannot go on ends in an :class:`Ended` value that says where and why.
"""

from __future__ import annotations

import ast

from .engine_bindings import Bindings
from .program import FuncInfo, Program
from .trace_attributes import AttributesMixin
from .trace_buffers import BuffersMixin
from .trace_calls import CallsMixin
from .trace_helpers import HelpersMixin
from .trace_names import NamesMixin
from .trace_numbers import NumbersMixin
from .trace_parameters import ParametersMixin
from .trace_values import (
    MAX_ALTERNATIVES, MAX_STEPS, Ended, Frame, Instance, Items, NoneValue, Num, Opaque, Path, Truth, Unevaluated,
    apply_delta, assume, dedupe, delta, source_text,
)


class Tracer(NamesMixin, ParametersMixin, AttributesMixin, CallsMixin, HelpersMixin, BuffersMixin, NumbersMixin):
    """One tracer per package; :meth:`resolve` is the expression walk, dispatching on the
    syntax to one mixin per kind of thing a value comes from: names (locals, module globals),
    parameters (call sites), ``self`` attributes, calls (returns, constructors), the engine's
    pure helpers (executed symbolically), buffers (allocations and views), numbers and
    conditions."""

    def __init__(self, program: Program, bindings: Bindings, role: str | None = None):
        self.p = program
        self.bindings = bindings
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
        if text in self.bindings.expressions:
            return [(Num(self.bindings.quantity(self.bindings.expressions[text], self.role)), path)]
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
        if isinstance(e, ast.BoolOp):
            chosen = self.operand_chosen(e, frame, path)
            if chosen is not None:
                return chosen
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

    def _pin(self, path: Path, key, value) -> Path:
        """Pin a local's value, except an object an ``if`` test could not see into (the
        value read outside the test may be more precise)."""
        if self._in_guard and isinstance(value, (Opaque, Ended, Unevaluated)):
            return path
        return path.with_pin(key, value)
