"""Closed witnesses of kernel theorems (proofs/symexec/closure.py): a theorem whose
preconditions contradict at an index no schema instance mentions is vacuous, and a real
theorem's witness satisfies every precondition at every index of its batch."""

from __future__ import annotations

import z3

from specbound.proofs import core
from specbound.proofs.model import C, bs, seq_len
from specbound.proofs.symexec import closure, theorems, verifiers
from specbound.proofs.symexec.obligations import check

PROP = "NO-TRUNCATION"   # the fill kernel's smallest property: a few obligations, quick


def _fill_theorem(planted=None):
    verifier = verifiers.get("fill")
    run = verifier.run(verifier.default_specs[0])
    if planted is not None:
        run.hyps["planted"] = planted
    outcomes = [check(ob, run.functions) for ob in theorems.kernel_obligations(verifier, run, PROP)]
    return run, outcomes, theorems.theorem_result(run, PROP, outcomes, 0.0, [])


def test_contradiction_at_an_unread_index_is_vacuous():
    """``seq_len_le_context`` is instantiated only where the kernel reads ``seq_len``; a planted
    precondition that every request is longer than the context contradicts it at every
    request, but no query instantiates it, so every obligation is still proved and has a raw
    witness.  The theorem has no closed witness: it fails as vacuous."""
    planted = z3.ForAll([z3.Int("i")], z3.Implies(z3.And(0 <= z3.Int("i"), z3.Int("i") < bs),
                                                  seq_len(z3.Int("i")) > C))
    _run, outcomes, result = _fill_theorem(planted)
    assert outcomes and all(o.status == "proved" and o.witness is not None for o in outcomes)  # what fooled it
    assert result.status == "failed" and "vacuous: no closed witness" in result.detail, result.detail
    assert not result.ok


def test_contradiction_only_at_the_last_request_is_vacuous():
    """Subtler: the planted precondition breaks only request ``bs - 1``, an index the kernel's
    queries name only through the program id."""
    i = z3.Int("i")
    planted = z3.ForAll([i], z3.Implies(i == bs - 1, seq_len(i) < 0))
    _run, _outcomes, result = _fill_theorem(planted)
    assert result.status == "failed" and "vacuous" in result.detail, result.detail


def _holds_everywhere(interp, formula, indices) -> list:
    """Where ``formula`` (closed by ``interp``) is false: a one-variable ``forall`` evaluated
    index by index over ``indices`` by simplification, independently of the closure's own
    solver check."""
    closed = interp.close(formula)
    if z3.is_quantifier(closed):
        assert closed.num_vars() == 1, formula
        return [k for k in indices if not z3.is_true(z3.simplify(z3.substitute_vars(closed.body(), z3.IntVal(k))))]
    return [] if z3.is_true(z3.simplify(closed)) else [None]


def test_real_theorem_witness_satisfies_every_precondition_at_every_index():
    verifier = verifiers.get("kv")
    run = verifier.run(verifier.default_specs[0])
    outcomes = [check(ob, run.functions) for ob in theorems.kernel_obligations(verifier, run, "RACE-FREE")]
    found, note = closure.theorem_witness(run, outcomes)
    assert found is not None, note
    interp = found.interp
    size = found.values["num_seqs"]
    assert 1 <= size <= 4 and all(abs(v) <= 64 for v in found.values.values())   # found in the small box
    indices = range(-4, size + 8)
    for label, formula in run.hyps.items():   # every precondition, quantified ones at every index tried
        assert _holds_everywhere(interp, formula, indices) == [], label
    for axiom in run.axioms:                  # and every launch contract
        fact = core.facts(axiom)
        assert _holds_everywhere(interp, fact.goal, indices) == [], fact.name
    # the requests are a real batch: P is the prefix sum of the seq_len shown
    lens = [interp.value(seq_len(k)).as_long() for k in range(size)]
    for k in range(size + 1):
        assert interp.value(run.functions["P"][0](k)).as_long() == sum(lens[:k])
    # the witness activates an obligation of the theorem
    assert z3.is_true(interp.value(found.obligation.hyps.get("active_lanes", z3.BoolVal(True))))
    # and the theorem reports these values
    result = theorems.theorem_result(run, "RACE-FREE", outcomes, 0.0, [])
    assert result.status == "proved" and {k: result.witness[k] for k in found.values} == found.values
