"""The minimiser: a failing case (a counterexample model, or a concrete batch a replay
fails on) made smaller while it still fails.

Verdicts come only from the trusted core (:func:`smallest_model` asks ``core.satisfy``) or
from the caller's predicate (a concrete replay, :func:`greedy`); this module decides nothing
about what fails, only which smaller case to try next.

* :func:`least`: the bisection under all of it, the least bound at which a probe still finds
  a failing case (exact for a monotone probe).
* :func:`descend`: each named value in turn pushed down by :func:`least` with the values
  already done kept, then kept itself.
* :func:`smallest_model`: :func:`descend` over a Z3 model of ``constraints`` (the audit's
  counterexamples: buffer judgements, helper paths, consumer reads).
* :func:`greedy`: a concrete case replaced by the first of its caller-given smaller
  candidates that still fails, until none does (the audit's kernel replays).
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import z3

from . import core


class _Budget:
    """How many probes are left (shared by every value of one descent)."""

    def __init__(self, probes: int):
        self.left = probes

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def least(probe: Callable[[int], int | None], lo: int, hi: int, budget: _Budget | None = None) -> int:
    """The least bound in ``(lo, hi]`` at which ``probe`` still finds a failing case, given it
    finds none at ``lo`` and one at ``hi``.  ``probe(bound)`` returns the found case's value
    (at most ``bound``: the search continues below it) or None.  Stops early, at the least
    bound found so far, when ``budget`` runs out."""
    while hi - lo > 1 and (budget is None or budget.take()):
        mid = (lo + hi) // 2
        got = probe(mid)
        if got is None:
            lo = mid
        else:
            hi = got
    return hi


def descend(start: dict, names: Iterable[str], probe: Callable[[str, int, dict], dict | None],
            budget: _Budget) -> dict:
    """Every int value of ``start`` named in ``names``, in that order, pushed down (0 first,
    then bisection) and then kept.  ``probe(name, bound, kept)`` returns the values of a
    failing case with ``name <= bound`` and every name of ``kept`` at its kept value, or None.
    A value that is not a positive int (a bool, a negative or zero int) is kept as it is."""
    values, kept = dict(start), {}
    for name in names:
        cur = values.get(name)
        if cur is None:
            continue
        if not isinstance(cur, bool) and cur > 0 and budget.take():
            found = probe(name, 0, kept)
            if found is not None:
                values = found
            else:
                best = {}

                def below(bound, name=name):
                    got = probe(name, bound, kept)
                    if got is None:
                        return None
                    best["values"] = got
                    return got[name]

                least(below, 0, cur, budget)
                values = best.get("values", values)
        kept[name] = values[name]
    return values


def _plain(model: z3.ModelRef, variables: Mapping[str, z3.ExprRef]) -> dict:
    """The model's int and bool values of ``variables`` (others left out)."""
    out = {}
    for name, var in variables.items():
        v = model.eval(var, model_completion=True)
        if isinstance(v, z3.IntNumRef):
            out[name] = v.as_long()
        elif z3.is_true(v) or z3.is_false(v):
            out[name] = z3.is_true(v)
    return out


def smallest_model(name: str, constraints: dict, variables: Mapping[str, z3.ExprRef], *, by=(), prefs=(),
                   first: z3.ModelRef | None = None, budget: int = 48, rlimit: int | None = None) -> dict | None:
    """A small model of ``constraints`` (the core's labelled hypotheses; ``by``: lemmas), as
    the values of ``variables`` (name -> Z3 term, in the order they are made small).
    ``prefs``: constraints asked for first (shapes a replay can launch), dropped when no model
    has them.  ``first``: a model to start from (none is searched then).  Every search counts
    against ``budget``; a shrinking search the solver cannot decide counts as finding
    nothing.  None when ``constraints`` have no model."""
    probes = _Budget(budget)
    prefs = list(prefs)
    limits = {} if rlimit is None else {"rlimit": rlimit}

    def search(extra):
        found = core.satisfy(name, constraints, by=list(by), extra=[*prefs, *extra], **limits)
        return None if found is None else _plain(found.model, variables)

    if first is not None:
        start = _plain(first, variables)
    else:
        probes.take()
        start = search([])
        if start is None and prefs:
            prefs = []
            probes.take()
            start = search([])
        if start is None:
            return None

    def probe(var_name, bound, kept):
        fixed = [variables[k] == v for k, v in kept.items()]
        try:
            return search([*fixed, variables[var_name] <= bound])
        except core.Unknown:
            return None

    return descend(start, variables, probe, probes)


def greedy(case, candidates: Callable[[object], Iterable], still_fails: Callable[[object], object | None],
           budget: int = 40):
    """``case`` replaced by the first of ``candidates(case)`` on which ``still_fails`` returns
    something (the caller's verdict: a replay's finding), again from the new case, until
    no candidate fails or ``budget`` replays are spent.  Returns ``(case, verdict)`` of the
    last failing case (verdict None when no candidate failed)."""
    verdict, progress = None, True
    while progress and budget > 0:
        progress = False
        for cand in candidates(case):
            budget -= 1
            got = still_fails(cand)
            if got is not None:
                case, verdict, progress = cand, got, True
                break
            if budget <= 0:
                break
    return case, verdict
