"""Run a plain-Python sizing helper on Z3 terms, one path at a time, and compare it with the spec.

A helper such as ``tree_mask_numel`` mixes arithmetic (which Z3 terms support as is)
with ``if`` / ``assert`` / ``and`` / ``or`` / ``not`` on values that become symbolic
(which Python cannot decide).  :func:`instrument` rewrites those tests into calls of
``__sb_bool__``; :func:`explore` then re-runs the helper once per feasible path, each
run forcing a sequence of decisions, and returns every path's condition and outcome
(a returned value or a raised exception).  Anything else that asks Python for the
truth of a Z3 term surfaces as :class:`Unsupported`, and the caller falls back to a
concrete grid.

Semantics kept: ``a and b`` / ``a or b`` become ``bool(a) and b`` / ``bool(a) or b``
(the value of a truthy ``a`` in ``a or b`` is lost; sizing helpers only use them as
conditions).  A non-Boolean term's truth is ``term != 0``.

Verdicts use ``rlimit`` (deterministic), and ``unknown`` is never read as success.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import z3

RLIMIT = 5_000_000
MAX_PATHS = 64
MAX_DECISIONS = 256


class Unsupported(Exception):
    """The helper asked for the truth of a Z3 term outside an instrumented test."""


class _Instrument(ast.NodeTransformer):
    def _wrap(self, expr):
        return ast.Call(func=ast.Name("__sb_bool__", ast.Load()), args=[expr], keywords=[])

    def visit_If(self, node):
        self.generic_visit(node)
        node.test = self._wrap(node.test)
        return node

    visit_While = visit_If
    visit_IfExp = visit_If

    def visit_Assert(self, node):
        self.generic_visit(node)
        node.test = self._wrap(node.test)
        return node

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        node.values = [self._wrap(v) for v in node.values[:-1]] + [node.values[-1]]
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            node.operand = self._wrap(node.operand)
        return node


def instrument(tree: ast.AST) -> ast.AST:
    return _Instrument().visit(tree)


def _is_z3(v) -> bool:
    return isinstance(v, z3.ExprRef)


def as_bool(v):
    """A Z3 Bool for a Z3 term (``!= 0`` for numbers), a Python bool otherwise."""
    if isinstance(v, z3.BoolRef):
        return v
    if isinstance(v, z3.ArithRef):
        return v != 0
    return bool(v)


def _solver(*facts) -> z3.Solver:
    s = z3.Solver()
    s.set("rlimit", RLIMIT)
    for f in facts:
        s.add(f)
    return s


class _Driver:
    def __init__(self, forced: Sequence[bool], pre: Sequence[Any]):
        self.forced = list(forced)
        self.pre = list(pre)
        self.decisions: list[bool] = []
        self.pc: list[Any] = []
        self.branch_points: list[int] = []   # decision indexes where the other side is feasible too

    def decide(self, value) -> bool:
        cond = as_bool(value)
        if not _is_z3(cond):
            return cond
        cond = z3.simplify(cond)
        if z3.is_true(cond):
            return True
        if z3.is_false(cond):
            return False
        k = len(self.decisions)
        if k >= MAX_DECISIONS:
            raise Unsupported(f"more than {MAX_DECISIONS} symbolic decisions on one path")
        if k < len(self.forced):
            d = self.forced[k]
        else:
            yes = _solver(*self.pre, *self.pc, cond).check() != z3.unsat
            no = _solver(*self.pre, *self.pc, z3.Not(cond)).check() != z3.unsat
            d = yes
            if yes and no:
                self.branch_points.append(k)
        self.decisions.append(d)
        self.pc.append(cond if d else z3.Not(cond))
        return d


class _Holder:
    driver: _Driver | None = None

    def __call__(self, value):
        if self.driver is None:  # called concretely (grid fallback)
            if _is_z3(value):
                raise Unsupported("symbolic test outside an exploration")
            return bool(value)
        return self.driver.decide(value)


def make_bool_hook() -> _Holder:
    """The ``__sb_bool__`` callable; put it in the helper's namespace.  One hook may serve
    several helpers that call each other (they then share the path)."""
    return _Holder()


@dataclass
class Path:
    condition: list[Any]
    returned: bool
    value: Any = None
    error: BaseException | None = None

    def describe_error(self) -> str:
        e = self.error
        return f"{type(e).__name__}: {e}" if e is not None else ""


@dataclass
class Exploration:
    paths: list[Path] = field(default_factory=list)
    unsupported: str | None = None     # why the helper could not run symbolically
    truncated: bool = False


def explore(hook: _Holder, fn: Callable[[], Any], pre: Sequence[Any]) -> Exploration:
    """Every feasible path of ``fn()`` under ``pre`` (depth-first, at most MAX_PATHS)."""
    out = Exploration()
    pending: list[list[bool]] = [[]]
    while pending:
        if len(out.paths) >= MAX_PATHS:
            out.truncated = True
            break
        forced = pending.pop()
        driver = _Driver(forced, pre)
        hook.driver = driver
        try:
            value = fn()
            path = Path(list(driver.pc), True, value=value)
        except Unsupported as e:
            out.unsupported = str(e)
            hook.driver = None
            return out
        except z3.Z3Exception as e:
            out.unsupported = f"Z3 term used where Python needs a concrete value ({e})"
            hook.driver = None
            return out
        except (TypeError, AttributeError) as e:
            # int(term), math.ceil(term), term.bit_length(), ...: the code needs concrete values.
            out.unsupported = f"{type(e).__name__}: {e}"
            hook.driver = None
            return out
        except Exception as e:  # noqa: BLE001 - a raise is an outcome of the helper
            path = Path(list(driver.pc), False, error=e)
        finally:
            hook.driver = None
        out.paths.append(path)
        for k in reversed(driver.branch_points):
            pending.append(driver.decisions[:k] + [not driver.decisions[k]])
    return out


# --- verdicts ---------------------------------------------------------------------------

@dataclass
class Verdict:
    status: str                      # "proved", "counterexample", "unknown"
    model: dict[str, int] | None = None


def _model_dict(m: z3.ModelRef, variables: Sequence[z3.ExprRef]) -> dict[str, int]:
    out = {}
    for v in variables:
        val = m.eval(v, model_completion=True)
        out[str(v)] = val.as_long() if isinstance(val, z3.IntNumRef) else bool(z3.is_true(val))
    return out


def minimal_model(facts: Iterable[Any], variables: Sequence[z3.ExprRef], budget: int = 60):
    """A model of ``facts`` made small greedily: each variable in turn is pushed down by
    bisection (``v <= 0`` first) while the facts stay satisfiable, then fixed.  None if
    the facts are unsat or unknown."""
    facts = list(facts)
    s = _solver(*facts)
    if s.check() != z3.sat:
        return None
    model = _model_dict(s.model(), variables)
    fixed: list[Any] = []

    def attempt(extra):
        nonlocal budget
        budget -= 1
        s2 = _solver(*facts, *fixed, extra)
        return _model_dict(s2.model(), variables) if s2.check() == z3.sat else None

    for v in variables:
        cur = model[str(v)]
        if isinstance(cur, bool) or cur <= 0 or budget <= 0:
            fixed.append(v == cur)
            continue
        m = attempt(v <= 0)
        if m is not None:
            model = m
        else:
            lo, hi = 0, cur          # v <= lo is unsat, v <= hi is sat
            while hi - lo > 1 and budget > 0:
                mid = (lo + hi) // 2
                m = attempt(v <= mid)
                if m is not None:
                    model, hi = m, m[str(v)]
                else:
                    lo = mid
        fixed.append(v == model[str(v)])
    return model


def refute(facts: Iterable[Any], variables: Sequence[z3.ExprRef]) -> Verdict:
    """``proved`` when ``facts`` are unsat, else the (small) counterexample."""
    facts = list(facts)
    r = _solver(*facts).check()
    if r == z3.unsat:
        return Verdict("proved")
    if r == z3.unknown:
        return Verdict("unknown")
    return Verdict("counterexample", minimal_model(facts, variables))


def equal(a, b):
    """Z3 equality of two helper results (ints, bools or terms)."""
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, z3.BoolRef) or isinstance(b, z3.BoolRef):
        return as_bool(a) == as_bool(b) if (_is_z3(a) or _is_z3(b)) else (bool(a) == bool(b))
    return a == b


def grid(ranges: dict[str, Iterable[int]]):
    """Every combination of the given concrete values, smallest sums first."""
    names = list(ranges)
    points = [dict(zip(names, combo)) for combo in itertools.product(*(list(r) for r in ranges.values()))]
    points.sort(key=lambda p: (sum(abs(v) for v in p.values()), tuple(p.values())))
    return points
