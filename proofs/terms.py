"""Term helpers outside the trusted core: the term-DAG walk and goal rewriting.

Nothing here makes or trusts a Proof.  A rewritten goal is proved by the core, and the
original goal is then proved again by the core from that proof (:func:`prove_rewritten`),
so a wrong rewrite can only make a check fail, never make it pass.
"""

from __future__ import annotations

from typing import Mapping

import z3

from . import kernel


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


def conjuncts(formula) -> list:
    if z3.is_and(formula):
        return [c for child in formula.children() for c in conjuncts(child)]
    return [formula]


def resolve_ifs(goal: z3.BoolRef, hyps: Mapping[str, z3.BoolRef]) -> z3.BoolRef:
    """``goal`` with every ``If(c, x, y)`` whose condition ``c`` is a conjunct of a hypothesis
    (or a conjunction of such) replaced by ``x``: equivalent wherever the hypotheses hold.
    A masked load's ``If(mask, value, other)`` under that same mask then becomes one term,
    where Z3 would otherwise relate ``If(..)*K`` and ``value*K`` by nonlinear search."""
    known = {c.get_id() for formula in hyps.values() if z3.is_expr(formula) for c in conjuncts(formula)}
    for _ in range(8):  # nested Ifs surface one level per round
        pairs = [(e, e.arg(1)) for e in subterms(goal)
                 if z3.is_app(e) and e.decl().kind() == z3.Z3_OP_ITE
                 and all(c.get_id() in known for c in conjuncts(e.arg(0)))]
        if not pairs:
            break
        goal = z3.substitute(goal, *pairs)
    return goal


def prove_rewritten(name: str, goal, *, hyps: Mapping[str, z3.BoolRef], by=(), rlimit: int, seed: int = 0):
    """A core Proof of ``goal``: first of its :func:`resolve_ifs` rewrite (the hard query),
    then of ``goal`` itself from that proof and the hypotheses (a congruence step).  Without
    an ``If`` to resolve it is one :func:`kernel.check`."""
    asked = resolve_ifs(goal, hyps)
    if asked.eq(goal):
        return kernel.check(name, goal, hyps=hyps, by=by, rlimit=rlimit, seed=seed)
    rewritten = kernel.check(f"{name}/rewritten", asked, hyps=hyps, by=by, rlimit=rlimit, seed=seed)
    return kernel.check(name, goal, hyps=hyps, by=[rewritten], rlimit=rlimit, seed=seed)
