"""Attempts to make the trusted core prove something it did not check, through its rules: each
rule's side conditions (generalising, induction, labels, axioms), the arguments it accepts and
the solver settings it fixes.

Each test is an attack that worked, or would work, against a core that trusts labels,
drops hypotheses, or lets a caller pick what a theorem's proof is about; each must fail
with an error that says what was refused.  The other attack classes have their own files:
the core's own constants (``test_core_soundness_constants.py``), Proof objects the core did
not issue (``test_core_soundness_forgery.py``) and the theorem runner
(``test_runner_soundness.py``).
"""

from __future__ import annotations

import pytest
import z3

from specbound.proofs import core

x, y = z3.Ints("x y")


# --- the two original exploits -----------------------------------------------------------------

def test_label_convention_no_longer_smuggles_a_hypothesis_through_induction():
    """A hypothesis labelled like a schema instance (``anything@0``) about the generalised
    parameter made ``forall p. p == 5`` provable, hence ``y == 5`` for a free ``y``."""
    with pytest.raises(core.RuleError, match=r"cannot generalise p!\d+: it is free in hypothesis 'anything@0'"):
        core.induct("CHEAT", lambda v, q: q == 5, arity=1,
                      base_hyps=lambda q: {"anything@0": q == 5},
                      step_hyps=lambda k, q: {"anything@1": q == 5})


def test_conditional_lemma_is_not_cited_as_unconditional():
    lemma = core.check("L", x > 5, hyps={"h": x > 5})
    assert lemma.goal.eq(x > 5) and dict(lemma.hyps).keys() == {"h"}
    with pytest.raises(core.Refuted, match="cited L holds only under h"):
        core.check("T", x > 3, by=[lemma])
    # In context its hypothesis is discharged and stays a hypothesis of the conclusion ...
    inside = core.check("T", x > 3, hyps={"h": x > 5}, by=[lemma])
    assert dict(inside.hyps).keys() == {"h"}
    # ... and under a stronger one the implication "h => x > 5" is what Z3 uses.
    stronger = core.check("T", x > 3, hyps={"x_big": x > 7}, by=[lemma])
    assert dict(stronger.hyps).keys() == {"x_big"}


# --- further attempts ----------------------------------------------------------------------------

def test_generalising_a_constant_of_a_hypothesis_is_refused():
    proof = core.check("P", x >= 0, hyps={"x_pos": x >= 1})
    with pytest.raises(core.RuleError, match="free in hypothesis 'x_pos'"):
        core.generalise(proof, x)
    ok = core.generalise(proof, y)  # y occurs nowhere: harmless
    assert ok.goal.is_forall() and dict(ok.hyps).keys() == {"x_pos"}


def test_generalising_a_constant_of_an_axiom_is_refused():
    three = core.axiom("x_is_3", x == 3, "a test contract about x")
    proof = core.check("Q", x >= 3, by=[three])
    assert set(proof.axioms) == {"x_is_3"}
    with pytest.raises(core.RuleError, match="free in axiom 'x_is_3'"):
        core.generalise(proof, x)


def test_induction_over_a_variable_in_a_step_hypothesis_is_refused():
    f = z3.Function("f_soundness", z3.IntSort(), z3.IntSort())
    with pytest.raises(core.RuleError, match="free in hypothesis 'f_step_at_k'"):
        core.induct("f", lambda v: f(v) >= 0, base_hyps=lambda: {"f0": f(0) == 0},
                      step_hyps=lambda k: {"f_step_at_k": f(k + 1) == f(k) + 1})


def test_the_core_labels_of_induction_are_reserved():
    with pytest.raises(core.RuleError, match="the core's own"):
        core.induct("r", lambda v: v >= 0, step_hyps=lambda k: {"induction_hypothesis": z3.BoolVal(True)})


def test_one_label_for_two_formulas_is_refused():
    f, i = z3.Function("f_two", z3.IntSort(), z3.IntSort()), z3.Int("i")
    every = z3.ForAll([i], f(i) >= 2)
    with pytest.raises(core.RuleError, match="names two different formulas"):
        core.induct("two", lambda v: f(v) >= 1, base_hyps=lambda: {"a": f(0) >= 1},
                      step_hyps=lambda k: {"a": every},
                      step_by=lambda k: [core.instantiate(core.assume("a", every), k + 1)])


def test_contradictory_axioms_prove_nothing():
    one = core.axiom("x_is_1", x == 1, "test")
    two = core.axiom("x_is_2", x == 2, "test")
    with pytest.raises(core.Unknown, match="inconsistent"):
        core.check("anything", y == 42, by=[one, two])


def test_axiom_needs_a_reason_and_rules_check_their_arguments():
    with pytest.raises(TypeError, match="reason"):
        core.axiom("silent", x == 1, "  ")
    forall = core.check_forall("inc", lambda a: a + 1 > a, 1)
    with pytest.raises(TypeError, match="sort"):
        core.instantiate(forall, z3.Bool("b"))
    with pytest.raises(core.RuleError, match="binds 1 variables"):
        core.instantiate(forall, 1, 2)
    with pytest.raises(TypeError, match="hypothesis label"):
        core.check("bad-label", x >= 0, hyps={3: x >= 0})


def test_a_variable_no_quantifier_binds_never_enters_a_proof():
    """``z3.Var`` terms are open: instantiating with one, or asserting one, would let the
    variable be captured by a later binder, so the core refuses them up front (Z3 itself
    raises on some such queries and silently simplifies others)."""
    loose = z3.Var(0, z3.IntSort())
    forall = core.check_forall("refl", lambda a: z3.Implies(a > 0, a >= 1), 1)
    with pytest.raises(TypeError, match="no quantifier binds"):
        core.instantiate(forall, loose + 1)
    with pytest.raises(TypeError, match="no quantifier binds"):
        core.axiom("open", loose == 5, "test")
    with pytest.raises(TypeError, match="no quantifier binds"):
        core.check("open-goal", z3.Or(loose == 5, loose != 5))
    with pytest.raises(TypeError, match="no quantifier binds"):
        core.check("open-hyp", x == x, hyps={"h": loose == 5})
    # a bound variable is fine, at any depth
    nested = z3.ForAll([x], z3.Exists([y], y > x))
    assert core.check("closed", nested).goal.eq(nested)


def test_solver_settings_cannot_be_changed_from_outside():
    goal = z3.Implies(z3.And(x >= 3, y >= 2 * x), x * y >= 18)
    reference = core.check("nl", goal)
    try:
        for name, value in (("timeout", 1), ("smt.random_seed", 7), ("rlimit", 10)):
            z3.set_param(name, value)
            with pytest.raises(core.SettingsError, match=name):
                core.check("nl", goal)
            with pytest.raises(core.SettingsError):
                core.satisfy("nl", {"g": z3.Not(goal)})
            z3.reset_params()
        # Any other global parameter is reset before the core's context is made.
        z3.set_param("smt.arith.nl", False)
        again = core.check("nl", goal)
        assert again.rlimit == reference.rlimit
    finally:
        z3.reset_params()
    with pytest.raises(ValueError, match="seed"):
        core.check("nl", goal, seed=99)
    with pytest.raises(ValueError, match="rlimit"):
        core.check("nl", goal, rlimit=0)
