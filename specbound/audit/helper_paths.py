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

Every solver answer comes from the trusted core: path feasibility and counterexamples from
``core.satisfy``, a ``proved`` verdict only with the Proof ``core.check`` issued for it.  Each
query runs under the fixed ``RLIMIT`` (deterministic); ``unknown`` is never read as success
(a branch whose feasibility is unknown is explored, a claim whose check is unknown is no
proof).  The core does not send quantified formulas to Z3, so every formula here must be
quantifier free: one that is not is refused (:class:`QuantifiedFormula`), never dropped.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import z3

from specbound.proofs import core, minimise
from specbound.proofs.terms import subterms

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


class QuantifiedFormula(ValueError):
    """A formula given to the explorer holds a quantifier (the core would not send it to Z3)."""


def _constraints(formulas, prefix: str) -> dict:
    """``formulas`` (a sequence, or a mapping of labels) as the core's labelled constraints,
    each checked quantifier free."""
    items = formulas.items() if hasattr(formulas, "items") else ((f"{prefix}[{i}]", f) for i, f in enumerate(formulas))
    out = {}
    for label, f in items:
        if isinstance(f, z3.ExprRef) and any(z3.is_quantifier(t) for t in subterms(f)):
            raise QuantifiedFormula(f"{prefix}: {label} = {f} holds a quantifier; the path explorer and its "
                                    "verdicts take quantifier-free formulas only (instantiate it first)")
        out[label] = f
    return out


def _satisfiable(name: str, constraints: dict):
    """The core's model of ``constraints``, None when unsat, ``core.Unknown`` raised as is."""
    found = core.satisfy(name, constraints, rlimit=RLIMIT)
    return None if found is None else found.model


class _Driver:
    def __init__(self, forced: Sequence[bool], pre: dict):
        self.forced = list(forced)
        self.pre = pre
        self.decisions: list[bool] = []
        self.pc: list[Any] = []
        self.branch_points: list[int] = []   # decision indexes where the other side is feasible too
        # A failure of the solver query itself; kept here because the helper's own code could
        # catch the exception (``try: ... except Exception``) and carry on.
        self.failure: BaseException | None = None

    def _feasible(self, branch) -> bool:
        """Whether the path can continue with ``branch``; ``unknown`` counts as feasible, so a
        branch is never skipped for want of a verdict."""
        constraints = {**self.pre, **_constraints([*self.pc, branch], "path")}
        try:
            return _satisfiable("helper path feasibility", constraints) is not None
        except core.Unknown:
            return True

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
            try:
                yes, no = self._feasible(cond), self._feasible(z3.Not(cond))
            except Exception as e:
                self.failure = e
                raise
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


def _run(driver: _Driver, fn: Callable[[], Any]) -> Path | str:
    """One run of ``fn()`` along ``driver``'s decisions: its Path, or why it cannot run on Z3 terms."""
    try:
        value = fn()  # before reading the path condition, which the run extends
    except Unsupported as e:
        return str(e)
    except z3.Z3Exception as e:
        return f"Z3 term used where Python needs a concrete value ({e})"
    except (TypeError, AttributeError) as e:
        # int(term), math.ceil(term), term.bit_length(), ...: the code needs concrete values.
        return f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - a raise is an outcome of the helper
        return Path(list(driver.pc), False, error=e)
    return Path(list(driver.pc), True, value=value)


def explore(hook: _Holder, fn: Callable[[], Any], pre: Sequence[Any]) -> Exploration:
    """Every feasible path of ``fn()`` under ``pre`` (depth-first, at most MAX_PATHS).  A
    failed solver query (not an ``unknown``) is raised, never taken for the helper's own raise."""
    pre = _constraints(pre, "pre")
    out = Exploration()
    pending: list[list[bool]] = [[]]
    while pending:
        if len(out.paths) >= MAX_PATHS:
            out.truncated = True
            break
        driver = _Driver(pending.pop(), pre)
        hook.driver = driver
        try:
            path = _run(driver, fn)
        finally:
            hook.driver = None
        if driver.failure is not None:
            raise driver.failure
        if isinstance(path, str):
            out.unsupported = path
            return out
        out.paths.append(path)
        for k in reversed(driver.branch_points):
            pending.append(driver.decisions[:k] + [not driver.decisions[k]])
    return out


# --- verdicts ---------------------------------------------------------------------------

@dataclass
class Verdict:
    status: str                      # "proved", "counterexample", "unknown"
    model: dict[str, int] | None = None
    proof: core.Proof | None = None  # the core's Proof, for "proved" (and only then)

    def __post_init__(self):
        if self.status not in ("proved", "counterexample", "unknown"):
            raise ValueError(f"Verdict.status must be proved, counterexample or unknown, got {self.status!r}")
        if (self.status == "proved") != core.is_proof(self.proof):
            raise ValueError(f"a {self.status!r} verdict must carry a Proof made by the core exactly when "
                             "it is 'proved'")


def prove(name: str, goal, pre, variables: Sequence[z3.ExprRef], path: Sequence[Any] = ()) -> Verdict:
    """``core.check`` of ``pre |- (And(path) => goal)``: ``proved`` with the core's Proof, a
    small counterexample when the core refutes it, or ``unknown``.  The path condition is an
    antecedent of the goal, not a hypothesis, so a path no input takes proves its goal
    vacuously rather than making the hypotheses contradictory (which the core refuses)."""
    hyps = _constraints(pre, "pre")
    claim = as_bool(goal)
    if path:
        claim = z3.Implies(z3.And(*[as_bool(c) for c in path]), claim)
    claim = _constraints({"goal": claim}, name)["goal"]
    try:
        proof = core.check(name, claim, hyps=hyps, rlimit=RLIMIT)
    except core.Refuted as e:
        return Verdict("counterexample", minimise.smallest_model(
            "helper counterexample", {**hyps, "negated_goal": z3.Not(claim)}, {str(v): v for v in variables},
            first=e.model, budget=60, rlimit=RLIMIT))
    except core.Unknown:
        return Verdict("unknown")
    return Verdict("proved", proof=proof)


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
