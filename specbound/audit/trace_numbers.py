"""Numbers and conditions of the buffer tracer (a mixin of :class:`.trace.Tracer`): arithmetic
and ``min``/``max`` on Z3 terms, and the truth of ``if`` tests and comparisons (the path
conditions a value is found under).
"""

from __future__ import annotations

import ast

import z3

from .trace_values import (
    MAX_ALTERNATIVES, Ended, Items, Num, Opaque, assume, combine, compare_values, describe, floordiv, negate,
    power, source_text, symbolic, truth_of,
)


class NumbersMixin:
    def _binop(self, e: ast.BinOp, frame, path):
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: floordiv, ast.Mod: lambda a, b: a % b, ast.Pow: power}
        fn = ops.get(type(e.op))
        if fn is None:
            return [(Ended(f"unsupported operator in `{source_text(e)[:60]}`", self._at(frame, e), machinery=True), path)]
        out = []
        for a, p in self.resolve(e.left, frame, path):
            for b, q in self.resolve(e.right, frame, p):
                if isinstance(a, Num) and isinstance(b, Num):
                    try:
                        out.append((Num(fn(a.term, b.term)), q))
                    except (TypeError, ZeroDivisionError, z3.Z3Exception) as err:
                        out.append((Ended(f"`{source_text(e)[:60]}`: {err}", self._at(frame, e)), q))
                elif isinstance(a, Items) and isinstance(b, Items) and isinstance(e.op, ast.Add):
                    out.append((Items(a.items + b.items), q))
                else:
                    bad = a if not isinstance(a, Num) else b
                    out.append((bad if isinstance(bad, Ended) else
                                Ended(f"`{source_text(e)[:60]}`: operand is {describe(bad)}", self._at(frame, e)), q))
        return out

    def _minmax(self, name, e, frame, path):
        out = []
        for a, p in self.resolve(e.args[0], frame, path):
            for b, q in self.resolve(e.args[1], frame, p):
                if isinstance(a, Num) and isinstance(b, Num):
                    x, y = a.term, b.term
                    if symbolic(x, y):
                        out.append((Num(z3.If(x >= y, x, y) if name == "max" else z3.If(x <= y, x, y)), q))
                    else:
                        out.append((Num(max(x, y) if name == "max" else min(x, y)), q))
                else:
                    out.append((Opaque(source_text(e)[:60]), q))
        return out

    def operand_chosen(self, e: ast.BoolOp, frame, path):
        """The value of ``a or b`` / ``a and b`` where an operand is a number (sglang's
        ``spec.speculative_num_steps or 1``): Python returns the first operand that decides
        it, so ``a`` where ``a != 0`` (``or``) and ``b`` under ``a == 0``.  None where no
        operand is a number: the expression is a truth value, left to :meth:`truth`."""
        out, live, numeric = [], [path], False
        for i, operand in enumerate(e.values):
            last, nxt = i == len(e.values) - 1, []
            for p in live:
                for v, q in self.resolve(operand, frame, p):
                    numeric = numeric or isinstance(v, Num)
                    if last:
                        out.append((v, q))
                        continue
                    t = truth_of(v)
                    decides = t if isinstance(e.op, ast.Or) else (None if t is None else negate(t))
                    if decides is None:   # not known: either way, the value itself or the next one
                        out.append((v, q))
                        nxt.append(q)
                        continue
                    for polarity, target in ((True, out), (False, nxt)):
                        r = assume(q, decides, polarity)
                        if r is not None:
                            target.append((v, r) if polarity else r)
            live = nxt[:MAX_ALTERNATIVES]
        return out if numeric else None

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
