"""The trusted core: the only code that can make a :class:`Proof`.

Modelled on the LCF style of Knuckledragger's kernel: a ``Proof`` can only be
constructed here, and only by :func:`check` after Z3 answered ``unsat`` for the
negated goal together with the named hypotheses and cited lemmas.  Everything
else (theorem definitions, reports, the CLI) is untrusted and merely asks.

Rules:

* :func:`check`  - SMT: ``hyps /\\ lemmas /\\ not goal`` is ``unsat``  =>  ``goal``
  (free constants and uninterpreted functions are implicitly universal).
* :func:`induct` - integer induction: ``phi(0)`` and ``k >= 0 /\\ phi(k) => phi(k+1)``,
  both by :func:`check`  =>  ``forall v >= 0. phi(v)``.
* :func:`instantiate` - ``forall v. body``  =>  ``body[v := term]``.

A hypothesis is either a parameter condition (``bs >= 0``) or one instance of a
schema that holds for every index (``seq_len(i) <= C`` for ``0 <= i < bs``); a
schema instance is tracked under ``name@index`` and reported under ``name``.
Verdicts are deterministic: every check runs under a fixed Z3 ``rlimit``; ``sat``
and ``unknown`` (including a resource-out) never yield a proof.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import z3

DEFAULT_RLIMIT = 2_000_000

_KERNEL_TOKEN = object()
_rlimit_seen = 0  # total rlimit of every check so far (each runs in its own context)


@dataclass(frozen=True, eq=False)
class Proof:
    """A checked fact.  ``assumptions``: hypothesis names it depends on; ``cited``: lemma names."""

    name: str
    formula: z3.BoolRef
    assumptions: frozenset
    cited: tuple
    seconds: float
    rlimit: int
    _token: object = field(repr=False, default=None)

    def __post_init__(self):
        if self._token is not _KERNEL_TOKEN:
            raise TypeError("Proof objects are made only by specbound.proofs.kernel")


class Refuted(Exception):
    """The goal is false under the hypotheses: ``model`` is a counterexample."""

    def __init__(self, name: str, model: z3.ModelRef, seconds: float, rlimit: int):
        super().__init__(f"{name}: refuted (counterexample found)")
        self.name, self.model, self.seconds, self.rlimit = name, model, seconds, rlimit


class Unknown(Exception):
    """Z3 gave no verdict within the rlimit: a failure, never a proof."""

    def __init__(self, name: str, reason: str, seconds: float, rlimit: int):
        super().__init__(f"{name}: unknown ({reason})")
        self.name, self.reason, self.seconds, self.rlimit = name, reason, seconds, rlimit


def rlimit_consumed() -> int:
    """Z3 resource units consumed by every check so far (a deterministic effort measure)."""
    return _rlimit_seen


def base_name(label: str) -> str:
    """Report name of a tracked hypothesis (``seq_len_le_context@b`` -> ``seq_len_le_context``)."""
    return label.split("@", 1)[0]


def _solve(hyps: Mapping[str, z3.BoolRef], lemmas: Sequence[Proof], extra: Sequence[z3.BoolRef],
           rlimit: int, goal: z3.BoolRef | None = None):
    """One Z3 check with every hypothesis, lemma and (negated) goal tracked.

    The query is translated into a fresh Z3 context: its terms then get the same internal
    ids whatever ran before in the process, so a verdict and its cost (time, rlimit) depend
    on the query alone (in the shared context the same query took 0.3 s or ran out of
    10M rlimit depending on the process's history)."""
    global _rlimit_seen
    ctx = z3.Context()

    def local(formula):
        return z3.BoolVal(formula, ctx) if isinstance(formula, bool) else formula.translate(ctx)
    solver = z3.Solver(ctx=ctx)
    solver.set("rlimit", rlimit)
    labels: dict[str, object] = {}
    for label, formula in hyps.items():
        tag = z3.Bool(f"hyp!{label}", ctx)
        solver.assert_and_track(local(formula), tag)
        labels[str(tag)] = ("hyp", label)
    for lemma in lemmas:
        if not isinstance(lemma, Proof):
            raise TypeError(f"cited lemma {lemma!r} is not a Proof")
        tag = z3.Bool(f"lemma!{lemma.name}!{len(labels)}", ctx)
        solver.assert_and_track(local(lemma.formula), tag)
        labels[str(tag)] = ("lemma", lemma)
    if goal is not None:
        solver.assert_and_track(z3.Not(local(goal)), z3.Bool(_GOAL_TAG, ctx))
    for formula in extra:
        solver.add(local(formula))
    start = time.perf_counter()
    result = solver.check()
    seconds = time.perf_counter() - start
    used = int(solver.statistics().get_key_value("rlimit count"))
    _rlimit_seen += used
    return result, solver, labels, seconds, used


def _model(solver) -> z3.ModelRef:
    """The solver's model, back in the caller's (main) context."""
    return solver.model().translate(z3.main_ctx())


_GOAL_TAG = "goal!negated"


def _conjuncts(formula) -> list:
    if z3.is_and(formula):
        return [c for child in formula.children() for c in _conjuncts(child)]
    return [formula]


def _resolve_ifs(goal: z3.BoolRef, hyps: Mapping[str, z3.BoolRef]):
    """``goal`` with every ``If(c, x, y)`` whose condition ``c`` is a conjunct of a hypothesis
    (or a conjunction of such) replaced by ``x``, and the labels of the hypotheses that
    justified it.  In every model of the hypotheses ``c`` holds, so the rewritten goal is
    equivalent there."""
    reason = {}
    for label, formula in hyps.items():
        if z3.is_expr(formula):
            for c in _conjuncts(formula):
                reason.setdefault(c.get_id(), label)
    used: set[str] = set()
    for _ in range(8):  # nested Ifs surface one level per round
        pairs = []
        for e in subterms(goal):
            if z3.is_app(e) and e.decl().kind() == z3.Z3_OP_ITE:
                parts = _conjuncts(e.arg(0))  # a conjunction is known when each conjunct is
                if all(c.get_id() in reason for c in parts):
                    pairs.append((e, e.arg(1)))
                    used.update(reason[c.get_id()] for c in parts)
        if not pairs:
            break
        goal = z3.substitute(goal, *pairs)
    return goal, used


def check(name: str, goal: z3.BoolRef, *, hyps: Mapping[str, z3.BoolRef] | None = None,
          by: Sequence[Proof] = (), rlimit: int = DEFAULT_RLIMIT, resolve_ifs: bool = False) -> Proof:
    """Prove ``goal`` from ``hyps`` and the lemmas ``by``; raise Refuted/Unknown otherwise.

    With ``resolve_ifs`` the goal's ``If``s whose condition is a hypothesis conjunct are
    resolved first (a masked load's ``If(mask, value, other)`` under that same mask): the
    query then holds one term where Z3 would otherwise relate ``If(..)*K`` and ``value*K``
    by nonlinear search.  The Proof is of the original goal, and the hypotheses used for
    the rewrite are among its assumptions."""
    hyps = dict(hyps or {})
    asked, rewrote = (_resolve_ifs(goal, hyps) if resolve_ifs else (goal, set()))
    result, solver, labels, seconds, used = _solve(hyps, by, [], rlimit, asked)
    if result == z3.sat:
        raise Refuted(name, _model(solver), seconds, used)
    if result != z3.unsat:
        raise Unknown(name, solver.reason_unknown(), seconds, used)
    core = {str(c) for c in solver.unsat_core()}
    if _GOAL_TAG not in core:
        # The hypotheses alone are contradictory: such a "proof" would be vacuous.
        raise Unknown(name, "hypotheses are inconsistent (goal not in unsat core)", seconds, used)
    assumptions: set[str] = {base_name(label) for label in rewrote}
    cited: list[str] = []
    for tag in core:
        kind = labels.get(tag)
        if kind is None:
            continue
        if kind[0] == "hyp":
            assumptions.add(base_name(kind[1]))
        else:
            lemma = kind[1]
            assumptions |= lemma.assumptions
            if lemma.name not in cited:
                cited.append(lemma.name)
    return Proof(name, goal, frozenset(assumptions), tuple(sorted(cited)), seconds, used, _KERNEL_TOKEN)


def subterms(*exprs):
    """Every distinct subterm of ``exprs``, each shared one once (a walk of the term DAG),
    quantifier bodies included; non-terms are skipped."""
    todo, seen = list(exprs), set()
    while todo:
        e = todo.pop()
        if not z3.is_expr(e) or e.get_id() in seen:
            continue
        seen.add(e.get_id())
        yield e
        if z3.is_quantifier(e):
            todo.append(e.body())
        elif z3.is_app(e):
            todo.extend(e.children())


def _mentions(formula: z3.ExprRef, consts: Sequence[z3.ExprRef]) -> bool:
    ids = {c.get_id() for c in consts}
    return any(z3.is_const(e) and e.get_id() in ids for e in subterms(formula))


def check_forall(name: str, body, arity: int, *, by: Sequence[Proof] = (), by_at=None,
                 rlimit: int = DEFAULT_RLIMIT) -> Proof:
    """Prove ``forall x1..xn. body(x1..xn)`` with no hypotheses: fresh constants stand for
    the bound variables, so generalising them afterwards is sound.  ``by_at(*xs)`` may
    supply lemma instances at those constants, but only of lemmas without assumptions
    (valid formulas stay valid at any term, so they constrain nothing)."""
    xs = [z3.FreshInt("x") for _ in range(arity)]
    if any(_mentions(lemma.formula, xs) for lemma in by):
        raise TypeError("cited lemmas may not mention the generalised variables")
    at = list(by_at(*xs)) if by_at else []
    for lemma in at:
        if not isinstance(lemma, Proof) or lemma.assumptions:
            raise TypeError(f"{name}: an instance at the generalised variables must be an "
                            "assumption-free Proof")
    inner = check(name, body(*xs), by=list(by) + at, rlimit=rlimit)
    vs = [z3.Int(f"x{i}") for i in range(arity)]
    return Proof(name, z3.ForAll(vs, body(*vs)), inner.assumptions, inner.cited, inner.seconds,
                 inner.rlimit, _KERNEL_TOKEN)


def is_schema_instance(label: str) -> bool:
    """Labels ``name@index`` are instances of schemas that hold at every index (built by
    :mod:`.model` from per-request conditions and definitions); they may mention any term."""
    return "@" in label


def induct(name: str, phi, *, arity: int = 0, base_hyps=None, step_hyps=None,
           base_by=None, step_by=None, rlimit: int = DEFAULT_RLIMIT) -> Proof:
    """Integer induction on the first argument of ``phi(v, *params)``.

    Proves ``phi(0, ps)`` and ``k >= 0 /\\ phi(k, ps) => phi(k + 1, ps)`` by :func:`check`
    for fresh ``k`` and fresh parameters ``ps`` (``arity`` of them), then concludes
    ``forall v, ps. v >= 0 => phi(v, ps)``.  ``base_hyps(*ps)`` / ``step_hyps(k, *ps)``
    supply hypotheses, ``base_by(*ps)`` / ``step_by(k, *ps)`` lemma instances.  A
    parameter condition (a label without ``@``) may not mention the fresh parameters:
    that is what makes the generalisation sound.
    """
    ps = [z3.FreshInt("p") for _ in range(arity)]
    k = z3.FreshInt("k")
    base_hyp_map = dict(base_hyps(*ps)) if base_hyps else {}
    step_hyp_map = dict(step_hyps(k, *ps)) if step_hyps else {}
    for label, formula in list(base_hyp_map.items()) + list(step_hyp_map.items()):
        if not is_schema_instance(label) and _mentions(formula, ps):
            raise TypeError(f"{name}: parameter condition {label} mentions a generalised parameter")
    base = check(f"{name}/base", phi(z3.IntVal(0), *ps), hyps=base_hyp_map,
                 by=list(base_by(*ps)) if base_by else [], rlimit=rlimit)
    step_hyp_map["induction_index_nonneg"] = k >= 0
    step_hyp_map["induction_hypothesis"] = phi(k, *ps)
    step = check(f"{name}/step", phi(k + 1, *ps), hyps=step_hyp_map,
                 by=list(step_by(k, *ps)) if step_by else [], rlimit=rlimit)
    vs = [z3.Int("v")] + [z3.Int(f"q{i}") for i in range(arity)]
    formula = z3.ForAll(vs, z3.Implies(vs[0] >= 0, phi(*vs)))
    assumptions = (base.assumptions | step.assumptions) - {"induction_index_nonneg", "induction_hypothesis"}
    cited = tuple(sorted(set(base.cited) | set(step.cited)))
    return Proof(name, formula, frozenset(assumptions), cited, base.seconds + step.seconds,
                 base.rlimit + step.rlimit, _KERNEL_TOKEN)


def instantiate(proof: Proof, *terms) -> Proof:
    """From ``forall vs. body`` derive ``body[vs := terms]`` (a quantifier-free fact)."""
    formula = proof.formula
    if not (z3.is_quantifier(formula) and formula.is_forall()):
        raise TypeError(f"{proof.name} is not a universally quantified proof")
    if formula.num_vars() != len(terms):
        raise TypeError(f"{proof.name} binds {formula.num_vars()} variables, got {len(terms)} terms")
    # De Bruijn indices count from the innermost binder, hence the reversal.
    body = z3.substitute_vars(formula.body(), *reversed([z3.IntVal(t) if isinstance(t, int) else t
                                                          for t in terms]))
    return Proof(proof.name, body, proof.assumptions, proof.cited, 0.0, 0, _KERNEL_TOKEN)


@dataclass
class Model:
    """A satisfying assignment (a witness or a counterexample) with solver figures."""

    model: z3.ModelRef
    seconds: float
    rlimit: int


def satisfy(name: str, constraints: Mapping[str, z3.BoolRef], *, by: Sequence[Proof] = (),
            extra: Sequence[z3.BoolRef] = (), rlimit: int = DEFAULT_RLIMIT) -> Model | None:
    """Find a model of ``constraints`` (and the lemmas, and ``extra`` shaping constraints).

    Returns None when unsat; raises Unknown when Z3 gives no verdict."""
    result, solver, _labels, seconds, used = _solve(dict(constraints), by, list(extra), rlimit)
    if result == z3.sat:
        return Model(_model(solver), seconds, used)
    if result == z3.unsat:
        return None
    raise Unknown(name, solver.reason_unknown(), seconds, used)
