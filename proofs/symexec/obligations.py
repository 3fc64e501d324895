"""Obligations over one symbolic run, and their verdicts through the trusted core.

Every "proved" verdict is a :class:`specbound.proofs.kernel.Proof` made by
``kernel.check`` (unsat of the negated goal under a fixed rlimit); every obligation also
gets a reachability witness (``kernel.satisfy`` of its hypotheses, the activation mask
included), so nothing is proved vacuously.

Uninterpreted functions (tensor contents, abstract reductions, their witness lanes) carry
schemas; before a check every application occurring in the query gets its schema
instance (``name@application``), a few rounds deep, so the query stays quantifier free.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import z3

from specbound.proofs import kernel

from .values import LANES, lane_range

RLIMIT = 10_000_000
RETRY_RLIMIT = 40_000_000
WITNESS_RLIMIT = 10_000_000
RETRY_RLIMIT = 40_000_000
SCHEMA_ROUNDS = 3


@dataclass
class Obligation:
    id: str            # unique: "<kind>@<line>#k"
    kind: str          # bounds | wrap | truncation | assert | divzero | cast | region | footprint | coverage | race | value
    line: int
    note: str
    hyps: dict
    goal: Any
    lemmas: list = field(default_factory=list)
    witness_extra: list = field(default_factory=list)
    replay: Any = None  # what a counterexample means for the concrete replay


@dataclass
class Outcome:
    obligation: Obligation
    status: str        # proved | counterexample | unknown | vacuous | dead
    seconds: float
    proof: Any = None
    model: Any = None
    witness: Any = None
    detail: str = ""

    @property
    def ok(self):
        """Proved and witnessed, or dead: no lane is ever active (itself proved, under
        preconditions that are satisfiable without the activation mask)."""
        if self.status == "dead":
            return self.proof is not None
        return self.status == "proved" and self.witness is not None


def applications(exprs, names) -> list:
    """Applications of the registered functions occurring in ``exprs``."""
    out, seen, todo = [], set(), list(exprs)
    while todo:
        e = todo.pop()
        if not z3.is_expr(e) or e.get_id() in seen:
            continue
        seen.add(e.get_id())
        if z3.is_app(e):
            if e.decl().name() in names and e.decl().kind() == z3.Z3_OP_UNINTERPRETED:
                out.append(e)
            todo.extend(e.children())
        elif z3.is_quantifier(e):
            todo.append(e.body())
    return out


def instantiate(hyps: dict, goal, functions: dict, lemmas: list):
    """Add schema instances for every registered application, to a fixed depth."""
    hyps = dict(hyps)
    lemmas = list(lemmas)
    done = set()
    frontier = list(hyps.values()) + [goal]
    for _ in range(SCHEMA_ROUNDS):
        new = []
        for app in applications(frontier, functions):
            key = app.get_id()
            if key in done:
                continue
            done.add(key)
            _decl, schema = functions[app.decl().name()]
            for label, fact in schema(app).items():
                if isinstance(fact, kernel.Proof):
                    if all(fact is not l for l in lemmas):
                        lemmas.append(fact)
                        new.append(fact.formula)
                elif label not in hyps:
                    hyps[label if "@" in label else f"{label}@{app}"] = fact
                    new.append(fact)
        if not new:
            break
        frontier = new
    return hyps, lemmas


SAFETY_TIMEOUT_MS = 60_000  # Z3's nonlinear procedures can overrun the rlimit: a wall clock backstop
                            # (it only ever turns a verdict into "unknown", never into "proved")

# Proof attempts, in order: (rlimit, Z3 random seed).  Z3's nonlinear arithmetic is very
# sensitive to its seed (the same kernel query takes 0.3 s under one seed and runs out of 10M
# under another, and which one is fast depends on the process's history of terms), so eight
# short runs with different seeds come before the long ones.  Every
# attempt is a complete, fixed-limit check by the trusted core; the first definitive answer
# (unsat = proof, sat = counterexample) stands, so the verdict stays deterministic.
PORTFOLIO = tuple((1_500_000, seed) for seed in range(8)) + ((RLIMIT, 8), (RETRY_RLIMIT, 9))
WITNESS_PORTFOLIO = ((1_500_000, 0), (1_500_000, 1), (WITNESS_RLIMIT, 2), (RETRY_RLIMIT, 3))


def _attempts(rlimit, portfolio):
    """The portfolio, scaled when a caller asks for a different top limit."""
    if rlimit == RLIMIT:
        return portfolio
    return tuple((min(r, rlimit), seed) for r, seed in portfolio[:-2]) + ((rlimit, portfolio[-2][1]),)


def check(ob: Obligation, functions: dict, *, rlimit: int = RLIMIT, witness: bool = True) -> Outcome:
    z3.set_param("timeout", SAFETY_TIMEOUT_MS)
    try:
        return _check(ob, functions, rlimit=rlimit, witness=witness)
    finally:
        z3.set_param("timeout", 4294967295)
        z3.set_param("smt.random_seed", 0)


def _check(ob: Obligation, functions: dict, *, rlimit: int, witness: bool) -> Outcome:
    start = time.perf_counter()
    hyps, lemmas = instantiate(ob.hyps, ob.goal, functions, ob.lemmas)
    status, proof, model, detail = "unknown", None, None, ""
    for limit, seed in _attempts(rlimit, PORTFOLIO):
        z3.set_param("smt.random_seed", seed)
        try:
            proof = kernel.check(ob.id, ob.goal, hyps=hyps, by=lemmas, rlimit=limit)
            status, detail = "proved", ""
            break
        except kernel.Refuted as exc:
            status, model, detail = "counterexample", exc.model, ""
            break
        except kernel.Unknown as exc:
            status, detail = ("vacuous" if "inconsistent" in exc.reason else "unknown"), exc.reason
            if status == "vacuous":
                break
    wit = None
    if witness:
        reason = ""
        for limit, seed in _attempts(WITNESS_RLIMIT, WITNESS_PORTFOLIO):
            z3.set_param("smt.random_seed", seed)
            try:
                found = kernel.satisfy(f"{ob.id}/witness", hyps, by=lemmas, extra=ob.witness_extra, rlimit=limit)
            except kernel.Unknown as exc:
                reason = exc.reason
                continue
            reason = ""
            if found is None:
                status, detail = "vacuous", "no input activates this obligation"
            else:
                wit = found.model
            break
        if reason:
            if status == "proved":
                status = "unknown"
            detail = (detail + "; " if detail else "") + f"witness search: {reason}"
        if wit is None and status == "vacuous" and "active_lanes" in hyps:
            dead = _dead(ob, hyps, lemmas)
            if dead is not None:
                status, proof, detail = "dead", dead, ("dead access: no lane is ever active in this "
                                                       "specialization (proved; the other hypotheses have a model)")
    return Outcome(ob, status, time.perf_counter() - start, proof, model, wit, detail)


def _dead(ob: Obligation, hyps: dict, lemmas: list):
    """A Proof that the activation mask is never true (e.g. the parent_list loads when D = 1,
    whose row is empty), or None.  ``kernel.check`` refuses it when the remaining hypotheses
    are themselves inconsistent, so a contradictory model is still reported as vacuous."""
    rest = {k: v for k, v in hyps.items() if k != "active_lanes"}
    for limit, seed in _attempts(WITNESS_RLIMIT, WITNESS_PORTFOLIO):
        z3.set_param("smt.random_seed", seed)
        try:
            return kernel.check(f"{ob.id}/dead", z3.Not(hyps["active_lanes"]), hyps=rest, by=lemmas, rlimit=limit)
        except kernel.Refuted:
            return None
        except kernel.Unknown as exc:
            if "inconsistent" in exc.reason:
                return None
    return None


def lanes_hyps(shape) -> dict:
    return lane_range(shape)
