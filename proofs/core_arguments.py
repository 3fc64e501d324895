"""The trusted core's checks of the arguments its rules are given, on the terms alone (no Proof
involved): a formula is a closed Bool term of Z3's main context, hypotheses map non-empty
labels to formulas, rlimit and seed are in range, and whether a constant occurs free in a
formula.  Part of the trusted core: a formula with a loose de Bruijn variable, or one from
another context, would mean something else once the core put it under a binder or into its
own context; only :mod:`.core` calls these."""

from __future__ import annotations

from typing import Mapping

import z3

MAX_RLIMIT = 400_000_000
SEEDS = range(16)  # the random seeds a caller may name (a portfolio of deterministic attempts)


def in_main(expr) -> bool:
    return expr.ctx_ref() == z3.main_ctx().ref()


def loose_variable(expr):
    """A de Bruijn variable of ``expr`` that no quantifier of ``expr`` binds, or None.

    ``z3.Var`` makes such terms; a formula holding one has no meaning of its own (the
    variable is captured by whatever binder it is later put under), so none enters a Proof."""
    if z3.z3core.Z3_is_ground(expr.ctx_ref(), expr.as_ast()):
        return None  # no variable at all, bound or not (the common case, and a check in C)
    todo, seen = [(expr, 0)], set()
    while todo:
        term, depth = todo.pop()
        key = (term.get_id(), depth)
        if key in seen:
            continue
        seen.add(key)
        if z3.is_var(term):
            if z3.get_var_index(term) >= depth:
                return term
        elif z3.is_quantifier(term):
            todo.append((term.body(), depth + term.num_vars()))
        elif z3.is_app(term):
            todo.extend((child, depth) for child in term.children())
    return None


def closed_formula(value, what: str) -> z3.BoolRef:
    if isinstance(value, bool):
        return z3.BoolVal(value)
    if not (z3.is_expr(value) and z3.is_bool(value)):
        raise TypeError(f"{what} must be a Z3 Bool formula, got {value!r}")
    if not in_main(value):
        raise TypeError(f"{what} must live in Z3's main context")
    loose = loose_variable(value)
    if loose is not None:
        raise TypeError(f"{what} has a variable no quantifier binds ({loose}): a formula must be closed")
    return value


def hyp_map(hyps, what: str = "hyps") -> dict:
    if hyps is None:
        return {}
    if not isinstance(hyps, Mapping):
        raise TypeError(f"{what} must map labels to formulas, got {type(hyps).__name__}")
    out = {}
    for label, formula in hyps.items():
        if not isinstance(label, str) or not label:
            raise TypeError(f"{what}: a hypothesis label must be a non-empty str, got {label!r}")
        out[label] = closed_formula(formula, f"{what}[{label!r}]")
    return out


def check_limits(rlimit, seed):
    if not isinstance(rlimit, int) or isinstance(rlimit, bool) or not 1 <= rlimit <= MAX_RLIMIT:
        raise ValueError(f"rlimit must be an int in [1, {MAX_RLIMIT}], got {rlimit!r}")
    if seed not in SEEDS or isinstance(seed, bool):
        raise ValueError(f"seed must be an int in [{SEEDS.start}, {SEEDS.stop}), got {seed!r}")


def occurs(const, formula) -> bool:
    """Whether ``const`` occurs free in ``formula`` (Z3 constants are never bound: a bound
    variable is a de Bruijn index, so substitution changes the term exactly when it occurs)."""
    return not z3.substitute(formula, (const, z3.FreshConst(const.sort()))).eq(formula)
