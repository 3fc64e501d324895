"""How a theorem is stated, checked, witnessed and mutated (untrusted bookkeeping).

A :class:`Theorem` states a claim over the symbolic batch of :mod:`.model` through
a definitions namespace ``d`` (the spec module, or the spec with some functions
swapped for a mutant).  Running it:

1. proves the claim through the core: ``core.check(claim, hyps, lemmas)`` with the core's
   instances of the quantified hypotheses at ``at``, or a custom ``prove`` (an induction);
2. ties the proof to the statement: its conclusion must be the claim (syntactically, up to
   the names of bound variables), or one more core check derives the claim from it; and
   every hypothesis the proof rests on must be one of the declared preconditions;
3. reports the preconditions and axioms the proof used, read from the Proof;
4. finds a **witness**: a model of the hypotheses, showing the preconditions are
   satisfiable (the theorem is not vacuous);
5. **refutes each mutant**: under the mutant's definitions (or with some hypotheses
   dropped) the negated claim must be satisfiable; the model is the counterexample,
   searched first in a small box so it reads as a real batch.

Witnesses and counterexamples are shrunk on the solver that found them (:class:`_Shrink`):
unless a shrink ask runs out of its rlimit, the model shown is Pareto-minimal in the
absolute values of its reported integers and batch sizes among the models of what the
search sent (the shape it was found in, the instances at the searched indices).  A closed
model satisfies all of that, so no closed model within that shape dominates it either.

Quantified hypotheses enter a model search as their instances at ``at`` and, with the
quantified axioms the proof rests on, at the first ``search_indices`` indices; a quantified
claim is refuted at ``counter_at``, kept inside those indices, so its counterexample is a
model of every instance it depends on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Mapping

import z3

from specbound import spec

from . import core, witness
from .model import BATCH_SIZES, DEFINITIONS, batch_completion, batch_indices, instances

SMALL_BOX = 40  # counterexamples are searched first with every reported value in [-SMALL_BOX, SMALL_BOX]
MINIMISE_ROUNDS = 40  # then shrunk (a binary search: 40 asks cover reported values far past 2^31)
MINIMISE_RLIMIT = 150_000  # a shrink ask that needs more simply stops the shrinking
SEARCH_INDICES = 3  # a quantified claim's counterexample lies at an index below this


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
    drop: tuple = ()              # hypothesis labels or lemma names removed
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
    hyps: Callable                # d -> {label: BoolRef}: the declared preconditions
    claim: Callable               # d -> BoolRef
    report: Callable              # () -> {name: term}: values shown in witnesses/counterexamples
    lemmas: Callable = lambda: []  # () -> [Proof]
    mutants: tuple = ()
    prove: Callable | None = None  # () -> Proof, for theorems proved by another rule (induction)
    at: tuple = ()                # index terms: the quantified hypotheses are instantiated there
    counter_at: tuple = ()        # for a quantified claim: where witnesses of its negation are sought
    search_indices: int = 0       # model searches instantiate quantified facts at 0..search_indices-1
    rlimit: int = core.DEFAULT_RLIMIT
    family: str = ""


@dataclass
class TheoremResult:
    id: str
    statement: str
    family: str
    status: str                   # "proved" | "failed" | "unknown" | "unsound" (a proof false on its witness)
    seconds: float
    rlimit: int
    rlimit_limit: int
    hypotheses_used: list
    lemmas_cited: list
    preconditions: list
    witness: dict
    mutants: list
    detail: str = ""
    axioms_used: dict = field(default_factory=dict)  # name -> {"formula", "reason"}

    @property
    def ok(self) -> bool:
        return (self.status == "proved" and bool(self.witness)
                and bool(self.mutants) and all(m.status == "refuted" for m in self.mutants))


class NotTheClaim(Exception):
    """The proof offered for a theorem does not establish its claim under its preconditions."""


def plain_values(report: Mapping[str, z3.ExprRef], value_of: Callable) -> dict:
    """The integer (and boolean, as 0/1) values ``value_of`` gives the named terms of ``report``."""
    out = {}
    for name, term in report.items():
        value = value_of(term)
        if z3.is_int_value(value):
            out[name] = value.as_long()
        elif z3.is_true(value) or z3.is_false(value):
            out[name] = int(z3.is_true(value))
    return out


def evaluate_report(model: z3.ModelRef, report: Mapping[str, z3.ExprRef]) -> dict:
    """The integer (and boolean, as 0/1) values ``model`` gives the named terms of ``report``."""
    return plain_values(report, lambda term: model.eval(term, model_completion=True))


def _box(report: Mapping[str, z3.ExprRef]):
    return [z3.And(-SMALL_BOX <= term, term <= SMALL_BOX) for term in report.values()
            if z3.is_int(term)]


def _magnitude(term):
    return z3.If(term >= 0, term, -term)


class _Shrink:
    """The narrowing asks of one model search (``narrow`` of :func:`core.satisfy`): a binary
    search on the size (the sum of the absolute reported values) among the models that
    dominate the best one so far, i.e. have every reported value at most as large in
    absolute value.  ``low`` is a size no such model reaches (an ask answered unsat); each
    ask halves the gap between it and the best size.  When the gap closes, no model of the
    searched constraints dominates the best one strictly: it is Pareto-minimal, so no
    reported value can be lowered with the others kept.  ``minimal`` says whether that was
    reached within ``rounds`` asks (an ask that runs out of its rlimit also stops it)."""

    def __init__(self, report: Mapping[str, z3.ExprRef], rounds: int):
        shown = [term for term in report.values() if z3.is_int(term)]
        # the batch sizes too, shown or not: a model closes only into a small batch
        self.terms = shown + [size for size in BATCH_SIZES if not any(size.eq(term) for term in shown)]
        self.magnitudes = [_magnitude(term) for term in self.terms]  # built once: each z3.If costs
        self.size = z3.Sum(self.magnitudes) if self.magnitudes else z3.IntVal(0)
        self.rounds, self.low, self.best, self.asked, self.minimal = rounds, -1, [], None, False

    def __call__(self, found):
        if found is None:
            self.low = self.asked
        else:
            self.best = [abs(found.model.eval(term, model_completion=True).as_long()) for term in self.terms]
        size = sum(self.best)
        if size - self.low <= 1:
            self.minimal = True
            return None
        if self.rounds == 0:
            return None
        self.rounds -= 1
        self.asked = (self.low + size) // 2
        return z3.And(*[term <= value for term, value in zip(self.magnitudes, self.best)],
                      self.size <= self.asked)


def _positive(report: Mapping[str, z3.ExprRef]):
    return [term >= 1 for term in report.values() if z3.is_int(term)]


def _search(name, constraints, lemmas, extra, report, rlimit, nontrivial=False):
    """A model of ``constraints``, preferring small reported values: first inside a small
    box, then anywhere; then shrunk on the same solver (:class:`_Shrink`).  With ``nontrivial`` the box first asks every reported value to be at least 1 (a
    witness with an empty batch shows little)."""
    tries = ([_box(report) + _positive(report)] if nontrivial else []) + [_box(report), []]
    for shape in tries:
        found = core.satisfy(name, constraints, by=lemmas, extra=list(extra) + shape, rlimit=rlimit,
                             narrow=_Shrink(report, MINIMISE_ROUNDS), narrow_rlimit=min(rlimit, MINIMISE_RLIMIT))
        if found is not None:
            return found
    return None


def _alpha_equal(a, b) -> bool:
    """Syntactic identity up to the names of bound variables (a quantifier's body is kept
    with de Bruijn indices, so equal bodies and sorts mean the same formula)."""
    if a.eq(b):
        return True
    if not (z3.is_quantifier(a) and z3.is_quantifier(b)) or a.is_forall() != b.is_forall():
        return False
    if a.num_vars() != b.num_vars() or any(a.var_sort(i) != b.var_sort(i) for i in range(a.num_vars())):
        return False
    return a.body().eq(b.body())


def conclude(theorem_id: str, proof, claim, rlimit: int):
    """``proof`` as a Proof of ``claim``: itself when it concludes the claim, else one core
    check deriving the claim from its conclusion (under the proof's own hypotheses only, so
    the claim cannot come from elsewhere)."""
    if not core.is_proof(proof):
        raise NotTheClaim(f"{theorem_id}: prove() returned {proof!r}, not a Proof made by the core")
    said = core.facts(proof)
    if _alpha_equal(said.goal, claim):
        return proof
    try:
        return core.check(theorem_id, claim, hyps=dict(said.hyps), by=[proof], rlimit=rlimit)
    except (core.Refuted, core.Unknown) as exc:
        raise NotTheClaim(f"{theorem_id}: the proof ({said.name}) concludes {_short(said.goal)}, from which "
                          f"the claim does not follow ({exc})") from None


def _short(formula, limit: int = 160) -> str:
    text = " ".join(str(formula).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def undeclared(proof, hyps: Mapping[str, z3.BoolRef]) -> list:
    """Labels of the proof's hypotheses whose formula is none of ``hyps``."""
    declared = {f.get_id() for f in hyps.values()}
    return sorted(label for label, f in core.facts(proof).hyps.items() if f.get_id() not in declared)


def not_definitions(proof) -> list:
    """Names of the axioms the proof rests on that are not :data:`.model.DEFINITIONS` (the
    definitions of ``P`` and ``Q``, formula for formula): a spec theorem assumes nothing else,
    so an axiom that states what it should prove cannot make one."""
    return sorted(name for name, ax in core.facts(proof).axioms.items()
                  if name not in DEFINITIONS or not ax.formula.eq(DEFINITIONS[name].formula))


def declared_labels(proof, hyps: Mapping[str, z3.BoolRef]) -> list:
    """The declared labels of the proof's hypotheses (matched by formula)."""
    label_of = {f.get_id(): label for label, f in hyps.items()}
    return sorted({label_of.get(f.get_id(), label) for label, f in core.facts(proof).hyps.items()})


def axioms_of(proof) -> dict:
    return {name: {"formula": " ".join(str(ax.formula).split()), "reason": ax.reason}
            for name, ax in sorted(core.facts(proof).axioms.items())}


def _axiom_instances(axioms: Mapping, terms) -> list:
    """Instances of the quantified axioms a proof rested on, for model searches."""
    out = []
    for ax in axioms.values():
        fact = core.axiom(ax.name, ax.formula, ax.reason)
        if z3.is_quantifier(ax.formula) and ax.formula.num_vars() == 1:
            out += [core.instantiate(fact, term) for term in terms]
        elif not z3.is_quantifier(ax.formula):
            out.append(fact)
    return out


def _search_facts(theorem: Theorem, hyps, lemmas, axioms, more=()) -> list:
    """The lemmas, the instances of the quantified hypotheses at ``at``, at the first
    ``search_indices`` indices and at ``more``, and the axioms (the quantified ones at those
    indices)."""
    first = [z3.IntVal(i) for i in sorted(set(range(theorem.search_indices)) | set(more))]
    facts = list(lemmas)
    for term in first + list(theorem.at):
        facts += instances(hyps, term)
    return facts + _axiom_instances(axioms, first)


def _closed_search(name, theorem, constraints, lemmas, axioms, extra, report, also=(), **search_args):
    """A model (:func:`_search`) that closes (:mod:`.witness`): it satisfies every formula of
    ``constraints`` and every axiom at every index, not only the instances searched.
    Returns ``(values of report, note, interpretation)``; values None when there is no such
    model.  ``also``: further terms the interpretation must give values to."""
    formulas = dict(constraints)
    formulas.update({f"axiom {ax.name}": ax.formula for ax in axioms.values()})

    def find(more):
        return _search(name, constraints, _search_facts(theorem, constraints, lemmas, axioms, more), extra,
                       report, theorem.rlimit, **search_args)

    found, interp, note = witness.search(name, find, formulas, batch_completion, batch_indices,
                                         shown=[*report.values(), *also])
    if found is None:
        return None, note, None
    return plain_values(report, interp.value), "", interp  # the values that were checked, not the raw model's


def false_on_witness(theorem_id: str, claim, interp) -> bool:
    """Whether a proved claim fails on a closed witness of its own preconditions.  The
    witness satisfies every precondition and definition at every index, so a sound core
    never lets this happen: it is the runner's last line of defence, not a check of the
    theorem."""
    return bool(witness.failures(f"{theorem_id}/claim-on-witness", interp, {"claim": claim}))


def _negated_claim(theorem: Theorem, claim):
    """``not claim``; for a quantified claim its body at ``counter_at`` (a violation there is
    a violation of the claim), with those indices kept where the search instantiates."""
    if not (z3.is_quantifier(claim) and claim.is_forall() and theorem.counter_at):
        return z3.Not(claim), []
    body = z3.substitute_vars(claim.body(), *reversed(theorem.counter_at))
    keep = [z3.And(0 <= term, term < theorem.search_indices) for term in theorem.counter_at]
    return z3.Not(body), keep


def run(theorem: Theorem) -> TheoremResult:
    start = time.perf_counter()
    lemmas = theorem.lemmas()
    hyps = theorem.hyps(SPEC)
    claim = theorem.claim(SPEC)
    report = theorem.report()
    status, detail, proof = "failed", "", None
    try:
        if theorem.prove is not None:
            offered = theorem.prove()
        else:
            at = [fact for term in theorem.at for fact in instances(hyps, term)]
            offered = core.check(theorem.id, claim, hyps=hyps, by=lemmas + at, rlimit=theorem.rlimit)
        proof = conclude(theorem.id, offered, claim, theorem.rlimit)
        outside = undeclared(proof, hyps)
        assumed = not_definitions(proof)
        if outside:
            detail = f"the proof uses hypotheses outside the declared preconditions: {', '.join(outside)}"
        elif assumed:
            detail = f"the proof rests on axioms that are not the batch model's definitions: {', '.join(assumed)}"
        else:
            status = "proved"
    except core.Refuted as exc:
        detail = f"counterexample: {evaluate_report(exc.model, report)}"
    except core.Unknown as exc:
        status, detail = "unknown", exc.reason
    except (NotTheClaim, core.RuleError) as exc:
        detail = str(exc)

    said = core.facts(proof) if proof is not None else None
    axioms = said.axioms if said is not None else {}
    witness = {}
    try:
        found, note, interp = _closed_search(f"{theorem.id}/witness", theorem, hyps, lemmas, axioms, [], report,
                                             also=[claim], nontrivial=True)
        if found is None:
            status = "failed"
            detail = (f"no witness: {note}" if note else
                      "preconditions unsatisfiable: the theorem would be vacuous")
        else:
            witness = found
            if status == "proved" and false_on_witness(theorem.id, claim, interp):
                status = "unsound"
                detail = (f"UNSOUND: the proved claim is false on its own witness {found}, a batch on which "
                          "every precondition holds: the trusted core issued a false proof")
    except core.Unknown as exc:
        status, detail = "unknown", f"witness search: {exc.reason}"

    mutants = [refute(theorem, m, lemmas, report, axioms) for m in theorem.mutants]
    return TheoremResult(
        id=theorem.id, statement=theorem.statement, family=theorem.family, status=status,
        seconds=time.perf_counter() - start, rlimit=said.rlimit if said is not None else 0,
        rlimit_limit=theorem.rlimit, hypotheses_used=declared_labels(proof, hyps) if proof is not None else [],
        lemmas_cited=list(said.cited) if said is not None else [], preconditions=sorted(hyps),
        witness=witness, mutants=mutants, detail=detail,
        axioms_used=axioms_of(proof) if proof is not None else {})


def refute(theorem: Theorem, mutant: Mutant, lemmas, report, axioms=None) -> MutantResult:
    start = time.perf_counter()
    defs = Defs(**mutant.overrides)
    hyps = {label: f for label, f in theorem.hyps(defs).items() if label not in mutant.drop}
    negated, keep = _negated_claim(theorem, theorem.claim(defs))
    constraints = dict(hyps)
    constraints["goal!negated"] = negated
    extra = (mutant.shape(defs) if mutant.shape else []) + keep
    kept = [lemma for lemma in lemmas if core.facts(lemma).name not in mutant.drop]
    axioms = {name: ax for name, ax in (axioms or {}).items() if name not in mutant.drop}
    try:
        found, note, _interp = _closed_search(f"{theorem.id}/{mutant.id}", theorem, constraints, kept, axioms,
                                              extra, report)
    except core.Unknown as exc:
        return MutantResult(mutant.id, mutant.description, "survived", {},
                            time.perf_counter() - start, f"unknown: {exc.reason}")
    if found is None:
        return MutantResult(mutant.id, mutant.description, "survived", {}, time.perf_counter() - start,
                            f"no counterexample: {note}" if note else "no counterexample: the theorem does not see this bug")
    return MutantResult(mutant.id, mutant.description, "refuted", found, time.perf_counter() - start)
