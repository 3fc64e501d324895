"""Term helpers outside the trusted core: the term-DAG walk and goal rewriting.

Nothing here makes or trusts a Proof.  A rewritten goal is proved by the core, and the
original goal is then proved again by the core from that proof (:func:`prove_rewritten`),
so a wrong rewrite can only make a check fail, never make it pass.
"""

from __future__ import annotations

from typing import Mapping

import z3

from . import core


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


_APPLICATIONS: dict = {}  # (context, AST id) -> (the term, kept so its id is not reused; its applications)
_APPLICATIONS_KEPT = 4096  # terms remembered; then the memo starts over (a long session's kernel proofs)


def applications(term) -> tuple:
    """The distinct applications of uninterpreted symbols in ``term`` (constants included),
    walked once per term: a model's closure reads the same preconditions for every search."""
    if not z3.is_expr(term):
        return ()
    key = (term.ctx_ref().value, term.get_id())
    hit = _APPLICATIONS.get(key)
    if hit is None:
        if len(_APPLICATIONS) >= _APPLICATIONS_KEPT:
            _APPLICATIONS.clear()
        found = tuple(e for e in subterms(term) if z3.is_app(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED)
        hit = _APPLICATIONS[key] = (term, found)
    return hit[1]


def conjuncts(formula) -> list:
    if z3.is_and(formula):
        return [c for child in formula.children() for c in conjuncts(child)]
    return [formula]


def resolve_ifs(goal: z3.BoolRef, hyps: Mapping[str, z3.BoolRef]):
    """``goal`` with every ``If(c, x, y)`` whose condition ``c`` is a conjunct of a hypothesis
    (or a conjunction of such) replaced by ``x``, and the labels of the hypotheses that
    justified it: equivalent wherever those hold.  A masked load's ``If(mask, value, other)``
    under that same mask then becomes one term, where Z3 would otherwise relate ``If(..)*K``
    and ``value*K`` by nonlinear search."""
    reason = {}
    for label, formula in hyps.items():
        if z3.is_expr(formula):
            for c in conjuncts(formula):
                reason.setdefault(c.get_id(), label)
    used: set = set()
    for _ in range(8):  # nested Ifs surface one level per round
        pairs = []
        for e in subterms(goal):
            if z3.is_app(e) and e.decl().kind() == z3.Z3_OP_ITE:
                parts = conjuncts(e.arg(0))
                if all(c.get_id() in reason for c in parts):
                    pairs.append((e, e.arg(1)))
                    used.update(reason[c.get_id()] for c in parts)
        if not pairs:
            break
        goal = z3.substitute(goal, *pairs)
    return goal, used


def prove_rewritten(name: str, goal, *, hyps: Mapping[str, z3.BoolRef], by=(), rlimit: int, seed: int = 0):
    """A core Proof of ``goal`` by way of its :func:`resolve_ifs` rewrite, in three core checks:
    the rewritten goal from ``hyps`` and ``by`` (the hard query); ``justification =>
    (rewritten => goal)`` alone (a congruence step Z3 settles by preprocessing); then ``goal``
    from the two (a propositional step).  Without an ``If`` to resolve it is one
    :func:`core.check`.  Returns the Proof and the rlimit all its checks consumed."""
    asked, used = resolve_ifs(goal, hyps)
    if asked.eq(goal):
        proof = core.check(name, goal, hyps=hyps, by=by, rlimit=rlimit, seed=seed)
        return proof, proof.rlimit
    rewritten = core.check(f"{name}/rewritten", asked, hyps=hyps, by=by, rlimit=rlimit, seed=seed)
    justified = {label: hyps[label] for label in used}
    # As one formula without hypotheses, so Z3's preprocessing sees the conditions as units.
    same = core.check(f"{name}/congruence", z3.Implies(z3.And(*justified.values()), z3.Implies(asked, goal)),
                        rlimit=rlimit, seed=seed)
    proof = core.check(name, goal, hyps={**rewritten.hyps, **justified}, by=[rewritten, same],
                         rlimit=rlimit, seed=seed)
    return proof, rewritten.rlimit + same.rlimit + proof.rlimit
