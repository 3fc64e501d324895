"""The acceptance criteria every theorem result must meet (shared by the proof tests)."""

from __future__ import annotations


def assert_theorem_ok(result, required_mutants=()):
    assert result.status == "proved", f"{result.id}: {result.status} {result.detail}"
    assert result.witness, f"{result.id}: no witness for the preconditions"
    assert result.hypotheses_used, f"{result.id}: empty unsat core"
    assert result.mutants, f"{result.id}: kills no mutant"
    for m in result.mutants:
        assert m.status == "refuted", f"{result.id}/{m.id} survived: {m.note}"
        assert m.counterexample, f"{result.id}/{m.id}: refuted without a counterexample"
    names = {m.id for m in result.mutants}
    missing = set(required_mutants) - names
    assert not missing, f"{result.id}: required mutants missing {missing}"
