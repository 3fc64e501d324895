"""The trusted core's one solver query (part of the trusted core; only :mod:`.core` imports it).

Kept apart from the rules so each module stays small: here are the solver settings the core
fixes, the query itself (a fresh Z3 context, every assertion tracked by a Boolean of the
core's) and the model handed back without those Booleans.  Nothing here makes a Proof; the
rules in :mod:`.core` read its verdicts.
"""

from __future__ import annotations

import secrets
import time
from typing import Sequence

import z3

SAFETY_TIMEOUT_MS = 60_000  # wall-clock backstop: it can only turn a verdict into "unknown"

# Global Z3 parameters that change verdicts or costs, at the values the core requires.  A
# query runs only while each has this value; any other global parameter is reset to its
# default before the query's context is made.
_REQUIRED_GLOBALS = {
    "timeout": "4294967295", "rlimit": "0", "memory_max_size": "0", "auto_config": "true",
    "smt.random_seed": "0", "sat.random_seed": "0", "nlsat.seed": "0", "smt.arith.solver": "6",
    "smt.mbqi": "true", "smt.relevancy": "2", "smt.phase_selection": "3", "smt.restart_strategy": "1",
}


class SettingsError(RuntimeError):
    """A global Z3 parameter was changed outside the core."""


def require_settings():
    for name, value in _REQUIRED_GLOBALS.items():
        current = z3.get_param(name)
        if current != value:
            raise SettingsError(
                f"global Z3 parameter {name!r} is {current!r} (required {value!r}): solver settings are "
                f"fixed inside specbound.proofs.core; undo the z3.set_param call (z3.reset_params())")
    z3.reset_params()  # any other global parameter goes back to its default


TAG = f"core!{secrets.token_hex(8)}!"  # the names of the tracking literals (not a secret: see query)


def _tracked(solver, ctx, formulas, literals: list, tags: dict, mark: str) -> list:
    """Assert each ``(formula, what)`` tracked by a new Boolean of the core's; returns the
    formulas as asserted (in the query's context)."""
    out = []
    for formula, what in formulas:
        tag = z3.Bool(f"{TAG}{mark}{len(literals)}", ctx)
        literals.append(tag)
        out.append(formula.translate(ctx))
        solver.assert_and_track(out[-1], tag)
        tags[tag.get_id()] = what
    return out


def _mentions_core_constant(translated, core_consts) -> bool:
    """Whether a formula (in the query's context) contains one of the core's constants.

    Z3 identifies constants by name and sort, so a caller's ``Bool(name)`` with the name of a
    tracking literal *is* that literal once translated: a goal ``Or(y == 5, <lemma's tag>)``
    would be "proved" because the core assumes the tag.  Checked on the terms themselves (a
    substitution of the core's constants changes a formula exactly when one occurs), not on
    names, so it holds whatever the caller knows of the names."""
    if not core_consts or not translated:
        return False
    # One substitution over all formulas at once (each literal by a constant: the term changes
    # exactly where a literal occurs); per formula and per literal, this cost a third of a run.
    whole = z3.And(*translated) if len(translated) > 1 else translated[0]
    ctx = whole.ctx
    return not z3.substitute(whole, *[(c, z3.BoolVal(True, ctx)) for c in core_consts]).eq(whole)


def query(hyps: dict, lemmas: list, extra: Sequence, rlimit: int, seed: int, goal=None):
    """One query in a fresh context: hypotheses (quantified ones only for discharge), cited
    lemmas (their undischarged hypotheses as antecedents) and the negated goal, each tracked
    by a Boolean of the core's.  ``lemmas`` are the facts of cited proofs, ``extra``
    checked formulas.  Returns the verdict, the solver, the tags (AST id -> what it tracks),
    the goal's tag (None when nothing else is asserted: the negated goal is then the whole
    query, left untracked), the tracking literals, and whether a supplied formula mentions
    one of them (:func:`_mentions_core_constant`; the core then refuses the query)."""
    require_settings()
    ctx = z3.Context()
    solver = z3.Solver(ctx=ctx)
    solver.set("rlimit", rlimit)
    solver.set("random_seed", seed)
    solver.set("timeout", SAFETY_TIMEOUT_MS)
    known: dict[int, str] = {}  # AST id of a hypothesis formula -> its label
    plain = []
    for label, formula in hyps.items():
        known.setdefault(formula.get_id(), label)
        if not z3.is_quantifier(formula):
            plain.append((formula, ("hyp", label)))
    open_hyps = []  # (lemma name, labels of its hypotheses this query does not have)
    facts = []
    for lemma in lemmas:
        discharged, rest, rest_labels = [], [], []
        for label, formula in lemma.hyps.items():
            mine = known.get(formula.get_id())
            if mine is not None and hyps[mine].eq(formula):
                discharged.append(mine)
            else:
                rest.append(formula)
                rest_labels.append(label)
        fact = lemma.goal if not rest else z3.Implies(z3.And(*rest), lemma.goal)
        if rest:
            open_hyps.append((lemma.name, rest_labels))
        facts.append((fact, ("lemma", lemma, tuple(discharged))))
    literals: list = []
    tags: dict[int, tuple] = {}
    asserted = _tracked(solver, ctx, plain, literals, tags, "hyp") + _tracked(solver, ctx, facts, literals, tags, "lemma")
    goal_tag = None
    if goal is not None and literals:
        goal_tag = z3.Bool(f"{TAG}goal", ctx)
        literals.append(goal_tag)
        asserted.append(z3.Not(goal).translate(ctx))
        solver.assert_and_track(asserted[-1], goal_tag)
    elif goal is not None:
        # Nothing else is asserted, so unsat can only come from the goal: left untracked, the
        # negated goal's conjuncts are units Z3's preprocessing can propagate.
        asserted.append(z3.Not(goal).translate(ctx))
        solver.add(asserted[-1])
    for formula in extra:
        asserted.append(formula.translate(ctx))
        solver.add(asserted[-1])
    start = time.perf_counter()
    result = solver.check()
    seconds = time.perf_counter() - start
    used = int(solver.statistics().get_key_value("rlimit count"))
    # Checked after the search (whose verdict is not read before this), so that the query Z3
    # sees is built exactly as it would be without the check: verdicts, models and rlimits
    # depend on the order terms were created in.
    named = _mentions_core_constant(asserted, literals)
    return result, solver, tags, goal_tag, seconds, used, open_hyps, literals, named


def ask_again(solver, formula, literals: list, rlimit: int):
    """Check a query's solver once more with one formula added in a scope of its own (taken
    away again after the check, so every further ask is the first query plus one formula),
    spending at most ``rlimit`` on this check (Z3's rlimit counts from the check's start).
    Returns the verdict, the model when sat (without the tracking literals), the seconds and
    rlimit the check took, and whether the formula mentions one of the query's tracking
    literals (then nothing was asserted nor checked)."""
    translated = formula.translate(solver.ctx)
    if _mentions_core_constant([translated], literals):
        return None, None, 0.0, 0, True
    solver.push()
    try:
        solver.add(translated)
        solver.set("rlimit", rlimit)
        before = int(solver.statistics().get_key_value("rlimit count"))
        start = time.perf_counter()
        result = solver.check()
        seconds = time.perf_counter() - start
        used = int(solver.statistics().get_key_value("rlimit count")) - before
        model = model_without(solver, literals) if result == z3.sat else None
    finally:
        solver.pop()
    return result, model, seconds, used, False


def model_without(solver, literals) -> z3.ModelRef:
    """The solver's model without the core's tracking literals, in the main context."""
    raw, ctx = solver.model(), solver.ctx
    hidden = {lit.decl().get_id() for lit in literals}
    clean = z3.Model(ctx)
    for decl in raw.decls():
        if decl.get_id() in hidden:
            continue
        value = raw.get_interp(decl)
        if decl.arity() == 0:
            clean.update_value(decl, value)
            continue
        default = value.else_value()
        if default is None:  # no else value: the table's entries say all Z3 fixed
            default = value.entry(0).value() if value.num_entries() else None
        if default is None:
            continue
        table = z3.FuncInterp(z3.z3core.Z3_add_func_interp(ctx.ref(), clean.model, decl.ast, default.as_ast()), ctx)
        for k in range(value.num_entries()):
            entry, args = value.entry(k), z3.AstVector(ctx=ctx)
            for j in range(entry.num_args()):
                args.push(entry.arg_value(j))
            z3.z3core.Z3_func_interp_add_entry(ctx.ref(), table.f, args.vector, entry.value().as_ast())
    return clean.translate(z3.main_ctx())


