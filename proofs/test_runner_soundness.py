"""Attempts to make the theorem runner report as proved what the core did not prove: a proof of
another formula, a hypothesis the theorem does not declare, an axiom that is no definition,
a witness or counterexample that is a model of a few instances only, and a core that issues
a false proof (the runner's last line of defence).
"""

from __future__ import annotations

import z3

from specbound.proofs import core, draft_kv_theorems, model, registry, witness
from specbound.proofs import theorem as runner
from specbound.proofs.model import P, bs, prefix_at, seq_len
from specbound.proofs.theorem import SPEC, Mutant, Theorem, run

x, y = z3.Ints("x y")


# --- theorems tied to their statements ------------------------------------------------------------

def _theorem(prove, hyps=None):
    return Theorem(id="T-TEST", statement="x > 3", hyps=lambda d: hyps or {"x_big": x > 5},
                   claim=lambda d: x > 3, report=lambda: {"x": x}, prove=prove,
                   mutants=(Mutant("MUT-NO-HYP", "no hypothesis", drop=("x_big",)),))


def test_theorem_with_a_proof_of_another_formula_fails():
    result = run(_theorem(lambda: core.check("other", y + 1 > y)))  # x_big alone would do: not used
    assert result.status == "failed" and "concludes" in result.detail and "does not follow" in result.detail


def test_theorem_whose_proof_follows_in_one_core_check_is_proved():
    result = run(_theorem(lambda: core.check("stronger", x > 4, hyps={"x_big": x > 5})))
    assert result.status == "proved" and result.hypotheses_used == ["x_big"], result.detail


def test_theorem_using_an_undeclared_hypothesis_fails():
    result = run(_theorem(lambda: core.check("T-TEST", x > 3, hyps={"x_huge": x > 100}),
                          hyps={"x_nonneg": x >= 0}))
    assert result.status == "failed"
    assert "outside the declared preconditions: x_huge" in result.detail


def test_theorem_prove_returning_a_non_proof_fails():
    result = run(_theorem(lambda: "QED"))
    assert result.status == "failed" and "not a Proof made by the core" in result.detail


# --- the spec theorems under the new core -------------------------------------------------------

def test_every_theorem_rests_only_on_declared_preconditions_and_lists_its_axioms(proof_results):
    # every registered theorem (the original 18 and the CONV-* family)
    assert set(proof_results) == set(registry.theorem_ids()) and len(proof_results) >= 18
    for r in proof_results.values():
        assert r.status == "proved", f"{r.id}: {r.detail}"
        assert set(r.hypotheses_used) <= set(r.preconditions), r.id
        for name, ax in r.axioms_used.items():
            assert ax["formula"] and ax["reason"], name
    # the six original theorems now declare what they assume
    assert "draft_room" in proof_results["KV-CAPACITY"].hypotheses_used
    assert "draft_room" in proof_results["KV-CUDA-GRAPH-COVERS"].hypotheses_used
    assert {"seq_len_at_context", "seq_len_le_context"} <= set(proof_results["VM-FITS-TIGHT"].hypotheses_used)
    assert {"walk_start", "walk_transition"} <= set(proof_results["VM-WALK-BOUNDED"].hypotheses_used)
    assert "search_contract" in proof_results["VM-WALK-CONFINED"].hypotheses_used
    assert {"prefix_step", "prefix_zero"} <= set(proof_results["VM-PREFIX-BOUND"].axioms_used)
    assert "positions_step" in proof_results["KV-INDPTR-MATCHES-OFFSETS"].axioms_used


def test_a_theorem_resting_on_an_axiom_that_is_no_definition_fails():
    """An axiom is assumed, not checked: one that says what the theorem claims makes a proof of
    it in one core check.  A spec theorem may rest only on the definitions of P and Q."""
    cheat = core.axiom("prefix_bounded", P(bs) <= 100, "planted: not a definition")
    theorem = Theorem(id="T-AXIOM", statement="P[bs] <= 100", hyps=lambda d: {"bs_nonneg": bs >= 0},
                      claim=lambda d: P(bs) <= 100, report=lambda: {"bs": bs, "P[bs]": P(bs)},
                      lemmas=lambda: [cheat, prefix_at(bs)],
                      mutants=(Mutant("MUT-NEGATIVE", "bs may be negative", drop=("bs_nonneg",)),))
    result = run(theorem)
    assert result.status == "failed" and "not the batch model's definitions: prefix_bounded" in result.detail
    # a renamed definition is no definition either: the formula must be the model's
    fake = core.axiom("prefix_zero", P(0) == 1, "planted: a wrong definition under the right name")
    theorem.lemmas = lambda: [fake]
    theorem.claim = lambda d: P(0) == 1
    assert "prefix_zero" in run(theorem).detail


def test_a_theorem_that_hides_a_precondition_fails():
    """KV-CAPACITY with draft_room left out of its declared preconditions: the room lemma's
    hypothesis is no longer discharged, so the claim is refuted."""

    th = draft_kv_theorems.kv_capacity()
    full = th.hyps
    th.hyps = lambda d: {k: v for k, v in full(d).items() if k != "draft_room"}
    th.mutants = ()
    result = run(th)
    assert result.status == "failed" and "counterexample" in result.detail


def test_induction_theorems_state_and_refute_their_real_claims(proof_results):
    """VM-PREFIX-BOUND and VM-WALK-* claim a formula over every index (not the induction
    step), and their mutants' counterexamples are violations of that claim at an index the
    search instantiates every hypothesis and axiom for."""

    theorems = {th.id: th for th in registry.theorems()}
    for tid in ("VM-PREFIX-BOUND", "VM-WALK-CONFINED", "VM-WALK-BOUNDED"):
        claim = theorems[tid].claim(SPEC)
        assert z3.is_quantifier(claim) and claim.is_forall(), tid
    cx = next(m for m in proof_results["VM-PREFIX-BOUND"].mutants if m.id == "MUT-NO-CONTEXT-BOUND").counterexample
    assert cx["P[k+1]"] == cx["P[k]"] + cx["seq_len[k]"] and cx["P[k+1]"] > (cx["k"] + 1) * cx["C"]
    assert cx["k"] + 1 <= cx["bs"]


# --- witnesses and counterexamples are closed models, not models of a few instances ----------

def _closure_theorem():
    i, b, j = z3.Ints("i wb wj")

    def hyps(d):
        out = {"all_small": z3.ForAll([i], z3.Implies(z3.And(0 <= i, i < bs), seq_len(i) <= 5)),
               "b_in_batch": z3.And(0 <= b, b < bs)}
        if getattr(d, "pinned", False):  # a mutant that also pins another request past the bound
            out["pin"] = z3.And(0 <= j, j < bs, seq_len(j) == 9)
        return out

    def claim(d):
        return seq_len(b) <= getattr(d, "limit", lambda: 5)()

    return Theorem(id="T-CLOSURE", statement="seq_len[b] <= 5", hyps=hyps, claim=claim, at=(b,),
                   report=lambda: {"bs": bs, "b": b, "j": j, "seq_len[b]": seq_len(b), "seq_len[j]": seq_len(j)},
                   mutants=(Mutant("MUT-LIMIT-4", "claims 4", overrides={"limit": lambda: 4}),
                            Mutant("MUT-LIMIT-4-PINNED", "claims 4, with a request pinned at 9",
                                   overrides={"limit": lambda: 4, "pinned": True})))


def test_a_mutant_refuted_only_by_a_model_of_some_instances_survives():
    """Searched with ``all_small`` instantiated at ``b`` only, the pinned mutant has a
    "counterexample" (seq_len[b] = 5, seq_len[j] = 9), but its hypotheses say every request
    is at most 5: closing the model finds ``all_small`` broken at ``j``, and once it holds
    there too nothing is left.  The unpinned mutant's counterexample is a real batch."""
    result = run(_closure_theorem())
    assert result.status == "proved" and result.witness
    honest, pinned = result.mutants
    assert honest.status == "refuted" and honest.counterexample["seq_len[b]"] == 5
    assert pinned.status == "survived" and "all_small" in pinned.note, pinned.note


def test_preconditions_that_contradict_where_no_search_looks_have_no_witness():
    """The witness search sees ``all_zero`` at no index at all (``at`` and ``search_indices``
    are empty), so ``seq_len[2] = 1`` with ``bs = 3`` looks satisfiable; closing the model
    shows the preconditions contradict, and the theorem fails as vacuous."""
    i = z3.Int("i")
    theorem = Theorem(
        id="T-VACUOUS", statement="bs >= 3",
        hyps=lambda d: {"all_zero": z3.ForAll([i], z3.Implies(z3.And(0 <= i, i < bs), seq_len(i) == 0)),
                        "third_is_one": seq_len(2) == 1, "three_requests": bs == 3},
        claim=lambda d: bs >= 3, report=lambda: {"bs": bs, "seq_len[2]": seq_len(2)},
        mutants=(Mutant("MUT-DROP-SIZE", "forgets the size", drop=("three_requests",)),))
    result = run(theorem)
    assert not result.ok
    assert result.status == "failed" and result.detail.startswith("no witness"), result.detail
    assert "all_zero" in result.detail


def test_a_closed_batch_satisfies_the_prefix_sum_definitions_everywhere():
    """The completion's ``P`` and ``Q`` are the prefix sums of its batch: their defining
    axioms hold at every index, not only at the ones a search instantiated."""
    raw = core.satisfy("raw batch", {"bs": model.bs == 3, "K": model.K == 2, "s0": model.seq_len(0) == 4,
                                     "s1": model.seq_len(1) == 1, "s2": model.seq_len(2) == 7,
                                     "P1": model.P(1) == 99})  # a raw P is anything: the completion recomputes it
    assert raw is not None
    axioms = [model.PREFIX_ZERO, model.PREFIX_STEP, model.POSITIONS_ZERO, model.POSITIONS_STEP]
    interp = witness.Interpretation(raw.model, [ax.goal for ax in axioms] + [model.P(3)], model.batch_completion)
    for ax in axioms:
        assert witness.violation(ax.name, interp.close(ax.goal)) == (False, None), ax.name
    assert interp.value(model.P(3)).as_long() == 12 and interp.value(model.Q(6)).as_long() == 24


# --- the runner's last line of defence -------------------------------------------------------------

def test_a_proved_claim_false_on_its_own_witness_fails_the_run(monkeypatch):
    """Should the core ever issue a false proof, the closed witness shows it: the claim is
    evaluated there, and a claim that is false on a model of its own preconditions means
    the core is unsound.  Simulated by a core.check that issues what it is asked for."""

    def unsound_check(name, goal, *, hyps=None, by=(), rlimit=core.DEFAULT_RLIMIT, seed=0):
        return core._issue(name, dict(hyps or {}), goal, {}, (), "lemma", 0.0, 0)

    monkeypatch.setattr(runner.core, "check", unsound_check)
    theorem = Theorem(id="T-UNSOUND", statement="y == 5", hyps=lambda d: {"y_small": z3.And(y >= 0, y <= 3)},
                      claim=lambda d: y == 5, report=lambda: {"y": y},
                      mutants=(Mutant("MUT-Y", "y unbounded", drop=("y_small",)),))
    result = run(theorem)
    assert result.status == "unsound" and not result.ok
    assert "false on its own witness" in result.detail and "y" in result.detail, result.detail
