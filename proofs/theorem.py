"""How a theorem is stated, checked, witnessed and mutated (untrusted bookkeeping).

A :class:`Theorem` states a claim over the symbolic batch of :mod:`.model` through
a definitions namespace ``d`` (the spec module, or the spec with some functions
swapped for a mutant).  Running it:

1. proves ``hyps(spec) /\\ lemmas => claim(spec)`` through :func:`kernel.check`
   (or through a custom ``prove`` such as an induction);
2. finds a **witness**: a model of the hypotheses and lemma instances, showing the
   preconditions are satisfiable (the theorem is not vacuous);
3. **refutes each mutant**: under the mutant's definitions (or with some
   hypotheses dropped) the negated claim must be satisfiable; the model is the
   counterexample, searched first in a small box so it reads as a real batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Mapping

import z3

from specbound import spec

from . import kernel

SMALL_BOX = 40  # counterexamples are searched first with every reported value in [-SMALL_BOX, SMALL_BOX]
MINIMISE_ROUNDS = 6  # then shrunk a few times, so they read as small concrete batches
MINIMISE_RLIMIT = 150_000  # a shrink round that needs more simply stops the shrinking


class Defs(SimpleNamespace):
    """The spec, with some functions overridden (a mutant's view of the formulas)."""

    def __init__(self, **overrides):
        super().__init__(**overrides)

    def __getattr__(self, name):
        return getattr(spec, name)


SPEC = Defs()


@dataclass
class Mutant:
    id: str
    description: str
    overrides: Mapping[str, Callable] = field(default_factory=dict)
    drop: tuple = ()              # hypothesis names (labels without @index) or lemma names removed
    shape: Callable | None = None  # d -> extra constraints that make the counterexample readable


@dataclass
class MutantResult:
    id: str
    description: str
    status: str                   # "refuted" | "survived"
    counterexample: dict
    seconds: float
    note: str = ""


@dataclass
class Theorem:
    id: str
    statement: str
    hyps: Callable                # d -> {label: BoolRef}
    claim: Callable               # d -> BoolRef
    report: Callable              # () -> {name: term}: values shown in witnesses/counterexamples
    lemmas: Callable = lambda: []  # () -> [Proof]
    mutants: tuple = ()
    prove: Callable | None = None  # () -> Proof, for theorems proved by another rule (induction)
    rlimit: int = kernel.DEFAULT_RLIMIT
    family: str = ""


@dataclass
class TheoremResult:
    id: str
    statement: str
    family: str
    status: str                   # "proved" | "failed" | "unknown"
    seconds: float
    rlimit: int
    rlimit_limit: int
    hypotheses_used: list
    lemmas_cited: list
    preconditions: list
    witness: dict
    mutants: list
    detail: str = ""

    @property
    def ok(self) -> bool:
        return (self.status == "proved" and bool(self.witness)
                and bool(self.mutants) and all(m.status == "refuted" for m in self.mutants))


def _evaluate(model: z3.ModelRef, report: Mapping[str, z3.ExprRef]) -> dict:
    out = {}
    for name, term in report.items():
        value = model.eval(term, model_completion=True)
        if z3.is_int_value(value):
            out[name] = value.as_long()
        elif z3.is_true(value) or z3.is_false(value):
            out[name] = int(z3.is_true(value))
    return out


def _box(report: Mapping[str, z3.ExprRef]):
    return [z3.And(-SMALL_BOX <= term, term <= SMALL_BOX) for term in report.values()
            if z3.is_int(term)]


def _size(report: Mapping[str, z3.ExprRef]):
    return z3.Sum([z3.If(term >= 0, term, -term) for term in report.values() if z3.is_int(term)])


def _positive(report: Mapping[str, z3.ExprRef]):
    return [term >= 1 for term in report.values() if z3.is_int(term)]


def _search(name, constraints, lemmas, extra, report, rlimit, shrink_rounds=MINIMISE_ROUNDS,
            nontrivial=False):
    """A model of ``constraints``, preferring small reported values: first inside a small
    box, then anywhere; then a few rounds of asking for a strictly smaller one.  With
    ``nontrivial`` the box first asks every reported value to be at least 1 (a witness
    with an empty batch shows little)."""
    found = None
    tries = ([_box(report) + _positive(report)] if nontrivial else []) + [_box(report), []]
    for shape in tries:
        found = kernel.satisfy(name, constraints, by=lemmas, extra=list(extra) + shape, rlimit=rlimit)
        if found is not None:
            extra = list(extra) + shape  # shrinking keeps the shape it was found in
            break
    if found is None:
        return None
    size = _size(report)
    for _ in range(shrink_rounds):
        bound = found.model.eval(size, model_completion=True)
        try:
            smaller = kernel.satisfy(name, constraints, by=lemmas,
                                     extra=list(extra) + [size < bound],
                                     rlimit=min(rlimit, MINIMISE_RLIMIT))
        except kernel.Unknown:
            break
        if smaller is None:
            break
        found = smaller
    return found


def run(theorem: Theorem) -> TheoremResult:
    start = time.perf_counter()
    lemmas = theorem.lemmas()
    hyps = theorem.hyps(SPEC)
    report = theorem.report()
    status, detail, proof = "failed", "", None
    effort_before = kernel.rlimit_consumed()
    try:
        if theorem.prove is not None:
            proof = theorem.prove()
        else:
            proof = kernel.check(theorem.id, theorem.claim(SPEC), hyps=hyps, by=lemmas,
                                 rlimit=theorem.rlimit)
        status = "proved"
    except kernel.Refuted as exc:
        detail = f"counterexample: {_evaluate(exc.model, report)}"
    except kernel.Unknown as exc:
        status, detail = "unknown", exc.reason

    effort = kernel.rlimit_consumed() - effort_before  # includes lemmas proved for the first time
    witness = {}
    try:
        found = _search(f"{theorem.id}/witness", hyps, lemmas, [], report, theorem.rlimit,
                        shrink_rounds=3, nontrivial=True)
        if found is None:
            status, detail = "failed", "preconditions unsatisfiable: the theorem would be vacuous"
        else:
            witness = _evaluate(found.model, report)
    except kernel.Unknown as exc:
        status, detail = "unknown", f"witness search: {exc.reason}"

    mutants = [refute(theorem, m, lemmas, report) for m in theorem.mutants]
    hyp_used = sorted(proof.assumptions) if proof else []
    cited = list(proof.cited) if proof else []
    return TheoremResult(
        id=theorem.id, statement=theorem.statement, family=theorem.family, status=status,
        seconds=time.perf_counter() - start, rlimit=effort,
        rlimit_limit=theorem.rlimit, hypotheses_used=hyp_used, lemmas_cited=cited,
        preconditions=sorted(kernel.base_name(label) for label in hyps),
        witness=witness, mutants=mutants, detail=detail)


def refute(theorem: Theorem, mutant: Mutant, lemmas, report) -> MutantResult:
    start = time.perf_counter()
    defs = Defs(**mutant.overrides)
    hyps = {label: f for label, f in theorem.hyps(defs).items()
            if kernel.base_name(label) not in mutant.drop}
    constraints = dict(hyps)
    constraints["goal!negated"] = z3.Not(theorem.claim(defs))
    extra = mutant.shape(defs) if mutant.shape else []
    lemmas = [lemma for lemma in lemmas if lemma.name not in mutant.drop]
    try:
        found = _search(f"{theorem.id}/{mutant.id}", constraints, lemmas, extra, report,
                        theorem.rlimit)
    except kernel.Unknown as exc:
        return MutantResult(mutant.id, mutant.description, "survived", {},
                            time.perf_counter() - start, f"unknown: {exc.reason}")
    if found is None:
        return MutantResult(mutant.id, mutant.description, "survived", {},
                            time.perf_counter() - start, "no counterexample: the theorem does not see this bug")
    return MutantResult(mutant.id, mutant.description, "refuted", _evaluate(found.model, report),
                        time.perf_counter() - start)
