"""The trusted core refuses everything that is not an unsat of the negated goal."""

from __future__ import annotations

import pytest
import z3

from specbound.proofs import core, registry
from specbound.proofs.terms import prove_rewritten, resolve_ifs
from specbound.spec import SpecArgumentError

x, y = z3.Ints("x y")


def test_proof_cannot_be_forged():
    with pytest.raises(TypeError):
        core.Proof("fake", {}, z3.BoolVal(False), {}, (), "lemma", 0.0, 0)


def test_valid_goal_is_proved_and_reports_its_core():
    proof = core.check("ok", x + 1 > x, hyps={"unused": y > 0})
    assert proof.goal.eq(x + 1 > x) and proof.formula.eq(x + 1 > x)
    assert "unused" not in proof.assumptions


def test_hypothesis_in_core_is_reported():
    proof = core.check("needs-hyp", x > 0, hyps={"x_positive": x >= 1, "noise": y == 3})
    assert proof.assumptions == frozenset({"x_positive"})


def test_false_goal_is_refuted_with_a_model():
    with pytest.raises(core.Refuted) as info:
        core.check("bad", x > 0, hyps={"x_nonneg": x >= 0})
    assert info.value.model.eval(x).as_long() == 0


def test_resource_out_is_unknown_not_proved():
    hard = z3.Not(x * x * x + y * y * y != 3)  # sum of two cubes: hard for the nonlinear solver
    with pytest.raises(core.Unknown):
        core.check("hard", z3.Not(hard), hyps={"x_big": x > 10**6}, rlimit=50)


def test_contradictory_hypotheses_are_not_a_proof():
    with pytest.raises(core.Unknown, match="inconsistent"):
        core.check("vacuous", x == 42, hyps={"a": x > 1, "b": x < 0})


def test_induction_and_instantiation():
    """A recurrence is a quantified hypothesis; the core makes its instance at k."""
    f, i = z3.Function("f", z3.IntSort(), z3.IntSort()), z3.Int("i")
    hyps = {"f0": f(0) == 0, "f_step": z3.ForAll([i], z3.Implies(i >= 0, f(i + 1) == f(i) + 2))}
    proof = core.induct(
        "f-nonneg", lambda v: f(v) >= 0, base_hyps=lambda: hyps, step_hyps=lambda k: hyps,
        step_by=lambda k: [core.instantiate(core.assume("f_step", hyps["f_step"]), k)])
    assert dict(proof.hyps).keys() == {"f0", "f_step"}  # the conclusion keeps both
    inst = core.instantiate(proof, 5)
    assert inst.goal.eq(z3.Implies(z3.IntVal(5) >= 0, f(5) >= 0))
    assert inst.formula.eq(z3.Implies(z3.And(*proof.hyps.values()), inst.goal))


def test_induction_rejects_a_false_step():
    g, i = z3.Function("g", z3.IntSort(), z3.IntSort()), z3.Int("i")
    step = core.axiom("g_step", z3.ForAll([i], g(i + 1) == g(i) - 1), "a test definition")
    with pytest.raises(core.Refuted):
        core.induct("g-bad", lambda v: g(v) >= 0, base_hyps=lambda: {"g0": g(0) == 0},
                      step_by=lambda k: [core.instantiate(step, k)])


def test_induction_rejects_conditions_on_generalised_parameters():
    with pytest.raises(core.RuleError, match="free in hypothesis 'a_small'"):
        core.induct("h", lambda v, a: a <= 0, arity=1, base_hyps=lambda a: {"a_small": a <= 0},
                      step_hyps=lambda k, a: {"a_small": a <= 0})


def test_instantiate_checks_arity():
    proof = core.check_forall("mono", lambda a, b: z3.Implies(a <= b, a + 1 <= b + 1), 2)
    with pytest.raises(core.RuleError, match="binds 2 variables"):
        core.instantiate(proof, 1)


def test_unknown_theorem_id_is_a_clear_error():
    with pytest.raises(SpecArgumentError, match="--only"):
        registry.select(["VM-NOPE"])


def test_check_forall_cites_conditional_instances_only_as_implications():
    mono = core.check_forall("mono", lambda a, b: z3.Implies(a <= b, a + 1 <= b + 1), 2)
    proof = core.check_forall("chain", lambda a, b: z3.Implies(a <= b, a + 2 <= b + 2), 2,
                                by_at=lambda a, b: [core.instantiate(mono, a, b)])
    assert z3.is_quantifier(proof.goal) and proof.goal.num_vars() == 2 and not proof.hyps
    # A fact proved under a hypothesis enters as "hypothesis => fact": it constrains nothing.
    local = core.check("local", x >= 1, hyps={"x_positive": x >= 1})
    with pytest.raises(core.Refuted, match="x_positive"):
        core.check_forall("bad", lambda a: a >= 1, 1, by_at=lambda a: [local])


def test_verdict_and_cost_do_not_depend_on_earlier_queries():
    """Each check runs in a fresh Z3 context, so the same query costs the same rlimit."""
    goal = z3.Implies(z3.And(x >= 3, y >= 2 * x), x * y >= 18)
    first = core.check("nl", goal)
    for i in range(30):  # unrelated terms created in between
        core.check(f"noise{i}", z3.Int(f"n{i}") * 2 != 2 * z3.Int(f"n{i}") + 1)
    again = core.check("nl", goal)
    assert first.rlimit == again.rlimit > 0


def test_resolve_ifs_uses_only_hypothesis_conjuncts():
    mask, k = z3.Bool("mask"), z3.Int("k")
    value = z3.If(mask, x, 0) * k  # a masked load's value inside a product
    hyps = {"active": z3.And(mask, y >= 0), "x_small": z3.And(0 <= x, x <= 3), "k_small": z3.And(0 <= k, k <= 3)}
    asked, used = resolve_ifs(value <= 9, hyps)
    assert asked.eq(x * k <= 9) and used == {"active"}
    proof, used = prove_rewritten("masked", value <= 9, hyps=hyps, rlimit=core.DEFAULT_RLIMIT)
    assert used > proof.rlimit  # three core checks
    assert proof.goal.eq(value <= 9)  # the Proof is of the goal as asked, re-derived by the core
    assert "active" in proof.assumptions  # the rewrite's justification is recorded
    # Without the mask among the hypotheses nothing is rewritten, and the goal is still
    # decided on its own (here: false, since If(mask, x, 0) = 0 when mask is false).
    with pytest.raises(core.Refuted):
        prove_rewritten("unmasked", value >= 1, hyps={k2: v for k2, v in hyps.items() if k2 != "active"},
                        rlimit=core.DEFAULT_RLIMIT)
    with pytest.raises(core.Refuted):  # resolving the If does not make a false goal true
        prove_rewritten("false", value >= 1, hyps=hyps, rlimit=core.DEFAULT_RLIMIT)
    # A condition that is a conjunction of known conjuncts (a load mask inside a store mask).
    both = z3.If(z3.And(mask, y >= 0), x, 0) * k
    proof, _ = prove_rewritten("conj", both <= 9, hyps=hyps, rlimit=core.DEFAULT_RLIMIT)
    assert "active" in proof.assumptions
