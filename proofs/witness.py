"""Closing a model: a witness or counterexample checked against every formula it stands for.

A model search sends Z3 the quantified hypotheses and axioms only as instances at a few
indices, so a model can satisfy every instance it was given and still break a quantified
hypothesis at another index, or the definitions of ``P`` and ``Q``.  Such a model shows
nothing: a theorem whose preconditions contradict each other at an index no search
looked at would still get a "witness", and a mutant could be "refuted" by a batch that is
not one.

Closing a model makes it one concrete interpretation: every constant takes the model's
value, every function the model's table, except the functions the batch model defines
(:func:`specbound.proofs.model.batch_completion`: ``seq_len`` becomes a finite batch and
``P``, ``Q`` its prefix sums, so their axioms hold at every index).  Each formula is then
closed (no constant, no function symbol left: only bound indices), and Z3 decides it.  A
formula that fails at an index names that index; :func:`search` instantiates it, with the
batch's indices, and searches again.  A model that closes is reported through the closed
interpretation, so the values shown are the ones that were checked.

Untrusted (it never makes a Proof); it only refuses to call a model a witness.
"""

from __future__ import annotations

from typing import Callable, Mapping

import z3

from . import core
from .terms import applications

ROUNDS = 6          # searches before a model that will not close is reported as such
CHECK_RLIMIT = 2_000_000


def symbols(formulas) -> tuple[dict, dict]:
    """The uninterpreted constants and functions of ``formulas`` (by name)."""
    consts, funcs = {}, {}
    for formula in formulas:
        for app in applications(formula):
            (consts if app.decl().arity() == 0 else funcs)[app.decl().name()] = app.decl()
    return consts, funcs


def _default(sort):
    return z3.BoolVal(False) if sort == z3.BoolSort() else z3.IntVal(0)


def table(model: z3.ModelRef, decl) -> z3.ExprRef:
    """The model's interpretation of ``decl`` as a term over ``Var(0..arity-1)``."""
    args = [z3.Var(i, decl.domain(i)) for i in range(decl.arity())]
    interp = model[decl] if decl in model else None
    if interp is None:
        return _default(decl.range())
    term = interp.else_value()
    term = _default(decl.range()) if term is None else term
    for k in reversed(range(interp.num_entries())):
        entry = interp.entry(k)
        match = z3.And(*[a == entry.arg_value(i) for i, a in enumerate(args)])
        term = z3.If(match, entry.value(), term)
    return term


class Interpretation:
    """A model made total: constants by value, functions by closed terms."""

    def __init__(self, model: z3.ModelRef, terms, complete: Callable):
        consts, funcs = symbols(terms)
        self.consts = [(decl(), model.eval(decl(), model_completion=True)) for decl in consts.values()]
        defined = complete(model, terms)
        if defined is None:
            self.funcs = None
            return
        by_name = {decl.name(): (decl, term) for decl, term in defined}
        self.funcs = [by_name.get(name, (decl, table(model, decl))) for name, decl in funcs.items()]
        self.funcs += [pair for name, pair in by_name.items() if name not in funcs]

    def close(self, formula):
        """``formula`` with every constant and function symbol replaced: only bound indices remain."""
        out = z3.substitute(formula, *self.consts) if self.consts else formula
        return z3.substitute_funs(out, *self.funcs) if self.funcs else out

    def value(self, term):
        return z3.simplify(self.close(term))


def violation(name: str, closed) -> tuple[bool, tuple | None]:
    """Whether the closed formula fails, and (for ``forall xs. ...``) the values of ``xs``
    where it does.  A quantifier-free closed formula has no symbol left: it simplifies to a
    truth value, and only a residue (a division by zero, which Z3 leaves uninterpreted) goes
    to the solver."""
    if z3.is_quantifier(closed) and closed.is_forall():
        xs = [z3.FreshConst(closed.var_sort(i), "w") for i in range(closed.num_vars())]
        body = z3.substitute_vars(closed.body(), *reversed(xs))
        found = core.satisfy(f"{name}/close", {"violated": z3.Not(body)}, rlimit=CHECK_RLIMIT)
        if found is None:
            return False, None
        values = [found.model.eval(x, model_completion=True) for x in xs]
        return True, tuple(v.as_long() for v in values) if all(z3.is_int_value(v) for v in values) else None
    value = z3.simplify(closed)
    if z3.is_true(value) or z3.is_false(value):
        return z3.is_false(value), None
    found = core.satisfy(f"{name}/close", {"violated": z3.Not(closed)}, rlimit=CHECK_RLIMIT)
    return found is not None, None


def _all_hold(name: str, closed: list) -> bool:
    """Whether one solver query shows every closed formula true.  A model usually closes, so
    one query for all replaces one per formula.  Z3 skolemizes the negated ``forall``s, so no
    fresh constant of ours is made (a later fresh name, and so every later query, is as it
    was).  False when one may fail (or Z3 gives no verdict): the caller then asks formula by
    formula, as if this had not been asked."""
    try:
        return core.satisfy(f"{name}/close", {"violated": z3.Not(z3.And(*closed))}, rlimit=CHECK_RLIMIT) is None
    except core.Unknown:
        return False


def failures(name: str, interp: Interpretation, formulas: Mapping[str, z3.BoolRef]) -> list:
    """``(label, values of its bound variables where it fails, or None)`` of every formula the
    interpretation breaks."""
    closed = {label: interp.close(formula) for label, formula in formulas.items()}
    # One query for the formulas only the solver decides, unless one already simplifies to
    # false (then, as when that query finds a violation, each formula is asked on its own).
    asked = []
    for formula in closed.values():
        value = None if z3.is_quantifier(formula) else z3.simplify(formula)
        if value is not None and z3.is_false(value):
            break
        if value is None or not z3.is_true(value):
            asked.append(formula)
    else:
        if not asked or (len(asked) > 1 and _all_hold(name, asked)):
            return []
    out = []
    for label, formula in closed.items():
        broken, where = violation(f"{name}/{label}", formula)
        if broken:
            out.append((label, where))
    return out


def search(name: str, find: Callable, formulas: Mapping[str, z3.BoolRef], complete: Callable,
           batch_indices: Callable, shown=(), rounds: int = ROUNDS):
    """``find(indices)`` (a model search that also instantiates the quantified facts at
    ``indices``, or None) until its model closes under ``formulas``; ``shown`` are terms the
    caller will read from the interpretation.

    Returns ``(found, interpretation, note)``: ``found`` None with an empty note when no
    model exists at all; with a note when no model that closes was found."""
    formulas = {label: z3.BoolVal(f) if isinstance(f, bool) else f for label, f in formulas.items()}
    indices: list[int] = []
    note = ""
    for _ in range(rounds):
        found = find(indices)
        if found is None:
            if indices:
                note = (f"none once the quantified facts hold at indices {indices[0]}..{indices[-1]} "
                        f"(the last model {note.removeprefix('no model closes: ').replace('at index', 'failed at index')})")
            return None, None, note
        terms = [*formulas.values(), *shown]
        interp = Interpretation(found.model, terms, complete)
        if interp.funcs is None:
            return None, None, "the model's batch is too large to close"
        broken = failures(name, interp, formulas)
        if not broken:
            return found, interp, ""
        note = "no model closes: " + ", ".join(label if i is None else f"{label} at index {i[0]}" for label, i in broken)
        wanted = (set(indices) | set(batch_indices(found.model, terms))
                  | {i[0] for _, i in broken if i is not None and i[0] >= 0})
        if wanted <= set(indices):
            break
        indices = sorted(wanted)
    return None, None, note or "no model closes"
