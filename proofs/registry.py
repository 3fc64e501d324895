"""All theorems, in report order, and the JSON report ``specbound prove --json`` writes."""

from __future__ import annotations

import time

import z3

from specbound.spec import SpecArgumentError

from . import consumer_theorems, convention_theorems, draft_kv_theorems, page_table_theorems, verify_mask_theorems
from . import walk_theorems
from .theorem import Theorem, TheoremResult, run

BUILDERS = (*verify_mask_theorems.THEOREMS, *walk_theorems.THEOREMS, *draft_kv_theorems.THEOREMS,
            *convention_theorems.THEOREMS, *consumer_theorems.THEOREMS, *page_table_theorems.THEOREMS)


def theorems() -> list[Theorem]:
    return [build() for build in BUILDERS]


def theorem_ids() -> list[str]:
    return [th.id for th in theorems()]


def select(only: list[str] | None = None) -> list[Theorem]:
    """The theorems to run; ``only`` names ids (unknown ids are an error naming them)."""
    every = theorems()
    if not only:
        return every
    known = {th.id: th for th in every}
    unknown = [i for i in only if i not in known]
    if unknown:
        raise SpecArgumentError("--only", f"unknown theorem id(s) {', '.join(unknown)}; "
                                          f"known: {', '.join(known)}")
    return [known[i] for i in only]


def run_one(theorem_id: str) -> TheoremResult:
    """One theorem by id: a task a process pool can be handed (its result is plain data).  A
    theorem's result does not depend on what else ran in the process: every query is
    built in a fresh Z3 context from that theorem's formulas alone."""
    return run(select([theorem_id])[0])


def run_all(only: list[str] | None = None) -> tuple[list[TheoremResult], float]:
    start = time.perf_counter()
    results = [run(th) for th in select(only)]
    return results, time.perf_counter() - start


def to_json(results: list[TheoremResult], seconds: float) -> dict:
    return {
        "z3_version": z3.get_version_string(),
        "theorems": [
            {
                "id": r.id,
                "family": r.family,
                "statement": r.statement,
                "status": r.status,
                "ok": r.ok,
                "seconds": round(r.seconds, 4),
                "rlimit": r.rlimit,
                "rlimit_limit": r.rlimit_limit,
                "hypotheses_used": r.hypotheses_used,
                "axioms_used": r.axioms_used,
                "lemmas_cited": r.lemmas_cited,
                "preconditions": r.preconditions,
                "witness": r.witness,
                "detail": r.detail,
                "mutants": [
                    {"id": m.id, "description": m.description, "status": m.status,
                     "counterexample": m.counterexample, "seconds": round(m.seconds, 4), "note": m.note}
                    for m in r.mutants
                ],
            }
            for r in results
        ],
        "summary": {
            "proved": sum(r.status == "proved" for r in results),
            "failed": sum(not r.ok for r in results),
            "mutants_refuted": sum(m.status == "refuted" for r in results for m in r.mutants),
            "mutants_survived": sum(m.status != "refuted" for r in results for m in r.mutants),
            "seconds": round(seconds, 3),
        },
    }
