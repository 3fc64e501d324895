"""Obligations over one symbolic run, and their verdicts through the trusted core.

Every "proved" verdict is a :class:`specbound.proofs.core.Proof` made by
``core.check`` (unsat of the negated goal under a fixed rlimit); every obligation also
gets a reachability witness (``core.satisfy`` of its hypotheses, the activation mask
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

from specbound.proofs import core
from specbound.proofs.terms import prove_rewritten, subterms

from .values import lane_range

RLIMIT = 10_000_000
RETRY_RLIMIT = 40_000_000
WITNESS_RLIMIT = 10_000_000
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
    rlimit: int = 0    # consumed by the checks that made the proof

    @property
    def ok(self):
        """Proved and witnessed, or dead: no lane is ever active (itself proved, under
        preconditions that are satisfiable without the activation mask)."""
        if self.status == "dead":
            return self.proof is not None
        return self.status == "proved" and self.witness is not None


def applications(exprs, names) -> list:
    """Applications of the registered functions occurring in ``exprs``, in the order of
    :func:`subterms` over them all: it walks the last first, each to the end, so that order is
    each term's own walk, the last term's first, without the applications already found."""
    out, found = [], set()
    for e in reversed(list(exprs)):
        for app, name in _uninterpreted(e):
            if name in names and app.get_id() not in found:
                found.add(app.get_id())
                out.append(app)
    return out


# term id -> (the term, its uninterpreted applications and their names in subterms' order): a run's
# hypotheses are walked for every obligation and every mutant; the term is kept, so its id is never reused
_UNINTERPRETED: dict = {}


def _uninterpreted(e) -> tuple:
    if not z3.is_expr(e):
        return ()
    hit = _UNINTERPRETED.get(e.get_id())
    if hit is None:
        apps = tuple((x, x.decl().name()) for x in subterms(e)
                     if z3.is_app(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED)
        hit = _UNINTERPRETED[e.get_id()] = (e, apps)
    return hit[1]


DEFINITION = "def/"  # label prefix of a definitional schema instance (run_state.RunState.define)


def instantiate(hyps: dict, goal, functions: dict, lemmas: list, *, definitions: bool = True):
    """Add schema instances for every registered application, to a fixed depth; without
    ``definitions`` the defined functions stay uninterpreted (a weaker, sound query)."""
    hyps = dict(hyps)
    lemmas = list(lemmas)
    done = set()
    # A quantified hypothesis is used through instances only: its body's applications have
    # bound arguments, nothing to instantiate.
    frontier = [h for h in hyps.values() if not z3.is_quantifier(h)] + [goal]
    for _ in range(SCHEMA_ROUNDS):
        new = []
        for app in applications(frontier, functions):
            key = app.get_id()
            if key in done:
                continue
            done.add(key)
            _decl, schema = functions[app.decl().name()]
            for label, fact in schema(app).items():
                if isinstance(fact, core.Proof):
                    if all(fact is not l for l in lemmas):
                        lemmas.append(fact)
                        new.append(fact.goal)
                elif label not in hyps and (definitions or not label.startswith(DEFINITION)):
                    hyps[label if "@" in label else f"{label}@{app}"] = fact
                    new.append(fact)
        if not new:
            break
        frontier = new
    return hyps, lemmas


# Proof attempts, in order: (rlimit, Z3 random seed; the core records both in the Proof).  Z3's nonlinear arithmetic is very
# sensitive to its seed (the same kernel query takes 0.3 s under one seed and runs out of 10M
# under another, and which one is fast depends on the process's history of terms), so eight
# short runs with different seeds come before the long ones.  Every
# attempt is a complete, fixed-limit check by the trusted core; the first definitive answer
# (unsat = proof, sat = counterexample) stands, so the verdict stays deterministic.
PORTFOLIO = tuple((1_500_000, seed) for seed in range(8)) + ((RLIMIT, 8), (RETRY_RLIMIT, 9))
LEAN_PORTFOLIO = ((1_500_000, 0), (1_500_000, 1))
WITNESS_PORTFOLIO = ((1_500_000, 0), (1_500_000, 1), (WITNESS_RLIMIT, 2), (RETRY_RLIMIT, 3))


def _attempts(rlimit, portfolio):
    """The portfolio, scaled when a caller asks for a different top limit."""
    if rlimit == RLIMIT:
        return portfolio
    return tuple((min(r, rlimit), seed) for r, seed in portfolio[:-2]) + ((rlimit, portfolio[-2][1]),)


def check(ob: Obligation, functions: dict, *, rlimit: int = RLIMIT, witness: bool = True) -> Outcome:
    start = time.perf_counter()
    hyps, lemmas = instantiate(ob.hyps, ob.goal, functions, ob.lemmas)
    status, proof, model, detail, used = "unknown", None, None, "", 0
    attempts = _attempts(rlimit, PORTFOLIO)
    if any(label.startswith(DEFINITION) for label in hyps):
        # First without the definitions: most goals (a walk's depth bound, a stored value's
        # range) hold whatever the defined values are, and the query then stays small.  Only
        # unsat counts there; a model of the weaker query may be spurious, so "sat" falls
        # through to the full query below.
        lean, lean_lemmas = instantiate(ob.hyps, ob.goal, functions, ob.lemmas, definitions=False)
        for limit, seed in LEAN_PORTFOLIO:
            try:
                proof, used = prove_rewritten(ob.id, ob.goal, hyps=lean, by=lean_lemmas, rlimit=limit, seed=seed)
                status, attempts = "proved", ()
                break
            except core.Refuted:
                break
            except core.Unknown:
                continue
    for limit, seed in attempts:
        try:
            proof, used = prove_rewritten(ob.id, ob.goal, hyps=hyps, by=lemmas, rlimit=limit, seed=seed)
            status, detail = "proved", ""
            break
        except core.Refuted as exc:
            status, model, detail = "counterexample", exc.model, ""
            break
        except core.Unknown as exc:
            status, detail = ("vacuous" if "inconsistent" in exc.reason else "unknown"), exc.reason
            if status == "vacuous":
                break
    wit = None
    if witness:
        found, reason, w_hyps, w_lemmas = _witness(ob, functions)
        if reason:
            if status == "proved":
                status = "unknown"
            detail = (detail + "; " if detail else "") + f"witness search: {reason}"
        elif found is None:
            status, detail = "vacuous", "no input activates this obligation"
        else:
            wit = found.model
        if wit is None and status == "vacuous" and "active_lanes" in w_hyps:
            dead = _dead(ob, w_hyps, w_lemmas)
            if dead is not None:
                status, proof, detail = "dead", dead, ("dead access: no lane is ever active in this "
                                                       "specialization (proved; the other hypotheses have a model)")
                used = dead.rlimit
    return Outcome(ob, status, time.perf_counter() - start, proof, model, wit, detail, used)


_WITNESSES: dict = {}


def witness_key(functions: dict, ob: Obligation) -> tuple:
    """``(key, pinned)``: obligations with the same hypotheses share a witness search; the
    pinned terms keep the Z3 ids in the key from being reused by other terms."""
    pinned = (functions, tuple(ob.hyps.values()), tuple(ob.witness_extra), tuple(ob.lemmas))
    key = (id(functions), tuple(sorted((k, v.get_id() if z3.is_expr(v) else v) for k, v in ob.hyps.items())),
           tuple(e.get_id() for e in ob.witness_extra), tuple(id(lemma) for lemma in ob.lemmas))
    return key, pinned


def _witness(ob: Obligation, functions: dict):
    """A model of the obligation's hypotheses (activation mask included) and the schema
    instances they need: the goal plays no part, so the obligations of one access (lower
    and upper bound, ...) share one search, cached per process.  The cache entry pins the
    hypothesis terms, so a Z3 id in the key cannot be reused by another term."""
    key, pinned = witness_key(functions, ob)
    hit = _WITNESSES.get(key)
    if hit is not None:
        return hit[1]
    hyps, lemmas = instantiate(ob.hyps, z3.BoolVal(True), functions, ob.lemmas)
    found, reason = None, ""
    for limit, seed in _attempts(WITNESS_RLIMIT, WITNESS_PORTFOLIO):
        try:
            found = core.satisfy(f"{ob.id}/witness", hyps, by=lemmas, extra=ob.witness_extra, rlimit=limit,
                                   seed=seed)
        except core.Unknown as exc:
            reason = exc.reason
            continue
        reason = ""
        break
    if reason:
        # Nonlinear queries without a verdict often have small models: one more search with
        # every integer constant in [-WITNESS_BOX, WITNESS_BOX].  A model found there is a
        # model of the hypotheses; no model there proves nothing, and the reason stands.
        box = [z3.And(c >= -WITNESS_BOX, c <= WITNESS_BOX) for c in int_constants(hyps, lemmas, ob.witness_extra)]
        try:
            boxed = core.satisfy(f"{ob.id}/witness-small", hyps, by=lemmas, extra=[*ob.witness_extra, *box],
                                   rlimit=WITNESS_RLIMIT)
        except core.Unknown:
            boxed = None
        if boxed is not None:
            found, reason = boxed, ""
    result = (found, reason, hyps, lemmas)
    _WITNESSES[key] = (pinned, result)
    return result


WITNESS_BOX = 64


def int_constants(hyps: dict, lemmas: list, extra) -> list:
    """The uninterpreted integer constants of a witness query (quantified hypotheses aside)."""
    formulas = [f for f in hyps.values() if not z3.is_quantifier(f)] + [lm.goal for lm in lemmas] + list(extra)
    found = {e.get_id(): e for e in subterms(*formulas)
             if z3.is_const(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED and e.sort() == z3.IntSort()}
    return list(found.values())


def _dead(ob: Obligation, hyps: dict, lemmas: list):
    """A Proof that the activation mask is never true (e.g. the parent_list loads when D = 1,
    whose row is empty), or None.  ``core.check`` refuses it when the remaining hypotheses
    are themselves inconsistent, so a contradictory model is still reported as vacuous."""
    rest = {k: v for k, v in hyps.items() if k != "active_lanes"}
    for limit, seed in _attempts(WITNESS_RLIMIT, WITNESS_PORTFOLIO):
        try:
            return core.check(f"{ob.id}/dead", z3.Not(hyps["active_lanes"]), hyps=rest, by=lemmas, rlimit=limit,
                                seed=seed)
        except core.Refuted:
            return None
        except core.Unknown as exc:
            if "inconsistent" in exc.reason:
                return None
    return None


def lanes_hyps(shape) -> dict:
    return lane_range(shape)
