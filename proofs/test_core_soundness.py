"""Attempts to make the trusted core prove something it did not check.

Each test is an attack that worked, or would work, against a core that trusts labels,
drops hypotheses, or lets a caller pick what a theorem's proof is about; each must fail
with an error that says what was refused.
"""

from __future__ import annotations

import copy

import pytest
import z3

from specbound.proofs import core, draft_kv_theorems, model, registry, witness
from specbound.proofs.theorem import SPEC, Mutant, run, Theorem
from specbound.proofs import theorem as runner
from specbound.proofs.model import P, bs, prefix_at
from specbound.proofs.model import bs, seq_len

x, y, p = z3.Ints("x y p")


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


def test_a_formula_cannot_name_the_cores_tracking_literals():
    """The core tracks each assertion by a fresh Boolean; a hypothesis mentioning a constant
    with a tag-like name is just a formula about that constant."""
    for name in ("goal!negated", "goal!0", "hyp!0", "goal"):
        with pytest.raises(core.Refuted):
            core.check("anything", x == 42, hyps={"h": z3.Not(z3.Bool(name))})


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


def test_forged_copied_or_mutated_proofs_are_refused():
    real = core.check("real", x + 1 > x)
    forged = object.__new__(core.Proof)    # a Proof-typed object the core never issued
    with pytest.raises(AttributeError):
        object.__setattr__(forged, "goal", x == 7)  # it has nowhere to keep a goal
    with pytest.raises(TypeError, match="not a Proof made by the core"):
        forged.goal
    with pytest.raises(TypeError, match="not a Proof made by the core"):
        core.check("use-forged", x == 7, by=[forged])
    with pytest.raises((TypeError, AttributeError)):
        core.check("use-copy", x + 1 > x, by=[copy.copy(real)])
    with pytest.raises(AttributeError, match="immutable"):
        real.goal = x == 7
    with pytest.raises(TypeError):
        real.hyps["extra"] = x == 7


def test_an_issued_proof_edited_from_outside_still_says_what_the_core_checked():
    """``object.__setattr__`` writes any attribute past ``Proof.__setattr__``; when a Proof
    carried its own goal this turned ``x + 1 > x`` into a cited lemma ``x == 7``."""
    real = core.check("real", x + 1 > x)
    try:
        object.__setattr__(real, "goal", x == 7)
    except (AttributeError, TypeError):
        pass                                  # no slot to write: the facts are not on the object
    assert real.goal.eq(x + 1 > x)
    with pytest.raises(core.Refuted):
        core.check("use-edited", x == 7, by=[real])
    with pytest.raises(AttributeError, match="sealed"):
        core.Proof.goal = property(lambda self: x == 7)
    assert real.goal.eq(x + 1 > x)


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


# --- the core's own constants (tracking literals, eigenvariables) ---------------------------------

def _tracking_literal_exploit():
    """Cite one trivial lemma and prove ``Or(y == 5, <that lemma's tracking literal>)``: the
    core assumes its tracking literals, so a query that can name one proves anything."""
    trivial = core.check("trivial", x + 1 > x)
    literal = z3.Bool(core._TAG + "lemma0")  # the name is no secret: models used to list it
    return core.check("y-is-5", z3.Or(y == 5, literal), by=[trivial])


def test_a_formula_naming_a_tracking_literal_is_refused():
    with pytest.raises(core.RuleError, match="tracking literals"):
        _tracking_literal_exploit()
    # the other places a caller's formula enters a query: hypotheses, satisfy's constraints and extras
    trivial = core.check("trivial", x + 1 > x)
    def tag(name):
        return z3.Bool(core._TAG + name)

    # hypotheses h, g are tracked first (hyp0, hyp1), then the lemma (lemma2), then the goal
    for name in ("hyp0", "lemma2", "goal"):
        with pytest.raises(core.RuleError, match="tracking literals"):
            core.check("h", y == 5, hyps={"h": z3.Or(y == 5, z3.Not(tag(name))), "g": x > 0}, by=[trivial])
    # satisfy tracks its constraint (hyp0) and the lemma (lemma1); its extras are untracked
    for name in ("hyp0", "lemma1"):
        with pytest.raises(core.RuleError, match="tracking literals"):
            core.satisfy("s", {"c": z3.Or(y == 1, tag(name))}, by=[trivial])
        with pytest.raises(core.RuleError, match="tracking literals"):
            core.satisfy("s", {"c": y == 1}, by=[trivial], extra=[z3.Not(tag(name))])
        with pytest.raises(core.RuleError, match="tracking literals"):  # a narrowing ask on its solver
            core.satisfy("s", {"c": y == 1}, by=[trivial], narrow=lambda last, name=name: z3.Not(tag(name)))
    # a constant of another sort under the same name is another constant: harmless, accepted
    core.check("int-named-like-a-tag", z3.Int(core._TAG + "lemma0") >= 0,
               hyps={"nonneg": z3.Int(core._TAG + "lemma0") >= 1}, by=[trivial])


def _fail_if_false(proof):
    """A proof whose goal simplifies to False, with no hypotheses: the core is unsound."""
    facts = core.facts(proof) if hasattr(core, "facts") else proof
    if z3.is_false(z3.simplify(facts.goal)):
        pytest.fail(f"the core proved {facts.goal} from hypotheses {dict(facts.hyps)} and axioms {list(facts.axioms)}")


def test_the_tracking_literal_exploit_reaches_no_false():
    """On a core that let it through, the exploit's proof, generalised over the literal and
    ``y`` and instantiated at (False, 0), was ``|- 0 == 5`` with no hypotheses and no axioms."""
    literal = z3.Bool(core._TAG + "lemma0")
    try:
        y_is_5 = _tracking_literal_exploit()
    except core.RuleError:
        return
    _fail_if_false(core.instantiate(core.generalise(y_is_5, literal, y), z3.BoolVal(False), 0))


def test_models_handed_out_hold_no_constant_of_the_core():
    trivial = core.check("trivial", x + 1 > x)
    with pytest.raises(core.Refuted) as refuted:
        core.check("refuted", y == 5, hyps={"h": y >= 0}, by=[trivial])
    found = core.satisfy("found", {"c": y == 3}, by=[trivial])
    for model in (refuted.value.model, found.model):
        names = {decl.name() for decl in model.decls()}
        assert names and not any(name.startswith("core!") for name in names), names
    assert found.model.eval(y).as_long() == 3
    f = z3.Function("f_model", z3.IntSort(), z3.IntSort())
    table = core.satisfy("table", {"c": z3.And(f(1) == 7, f(2) == 9, y == f(1))}, by=[trivial]).model
    assert [table.eval(f(i)).as_long() for i in (1, 2)] == [7, 9]  # tables survive the stripping


def _next_fresh(prefix: str, ahead: int):
    """The constant ``z3.Fresh*`` will return ``ahead`` calls from now (its counter is global)."""
    probe = str(z3.FreshInt("probe"))
    return z3.Int(f"{prefix}!{int(probe.split('!')[1]) + ahead}")


def test_induction_cannot_name_its_own_step_index():
    """``phi(v) = (v == 0) or (v == k + 1)`` for the ``k`` induct is about to make: the step is
    proved at the one index ``k``, and the conclusion ``forall v >= 0. phi(v)`` (k free) gave
    ``|- 5 == k + 1``, hence ``|- False``."""
    k = _next_fresh("k", 2)  # induct makes v, then k
    with pytest.raises(core.RuleError, match="phi mentions k!"):
        core.induct("guess-k", lambda v: z3.Or(v == 0, v == k + 1))


def test_the_induction_exploit_reaches_no_false():
    k = _next_fresh("k", 2)
    try:
        every = core.induct("guess-k", lambda v: z3.Or(v == 0, v == k + 1))
    except core.RuleError:
        return
    k_is_4 = core.generalise(core.check("k-is-4", k == 4, by=[core.instantiate(every, 5)]), k)
    _fail_if_false(core.instantiate(k_is_4, 0))


def test_check_forall_refuses_a_cited_lemma_about_its_eigenvariable():
    """``by`` is given before check_forall makes its constants: a lemma that names one got its
    name by guessing (instances at them belong in ``by_at``, which is given the constants)."""
    guessed = _next_fresh("x", 1)
    lemma = core.check("about-guess", guessed + 0 == guessed)
    with pytest.raises(core.RuleError, match="cited lemma 'about-guess' mentions x!"):
        core.check_forall("guess-x", lambda a: a == guessed, 1, by=[lemma])
    # by_at, given the constants, may speak of them
    ok = core.check_forall("at", lambda a: a + 1 > a, 1, by_at=lambda a: [core.check("inc", a + 1 > a)])
    assert ok.goal.is_forall()


def test_nested_quantifiers_are_instantiated_without_capture():
    """Instantiating the outer binder of ``forall a. exists b. b != a`` with the constant ``y``
    gives ``exists b. b != y``, never ``exists b. b != b``."""
    a, b = z3.Ints("a b")
    proof = core.check("nested", z3.ForAll([a], z3.Exists([b], b != a)))
    at_y = core.instantiate(proof, y)
    assert at_y.goal.eq(z3.Exists([b], b != y))
    with pytest.raises(core.Refuted):
        core.check("captured", z3.Not(at_y.goal), by=[at_y])


# --- Proof objects: exactly the core's, read through the core ------------------------------------

def test_proof_cannot_be_subclassed():
    """A subclass whose ``__eq__``/``__hash__`` alias a real proof passed ``is_proof`` (the
    registry lookup used them) and overrode ``goal``, which the runner read."""
    with pytest.raises(TypeError, match="cannot be subclassed"):
        class Alias(core.Proof):  # noqa: F841 - the definition itself is refused
            pass
    with pytest.raises(TypeError, match="cannot be subclassed"):
        type(core.Proof)("Alias", (core.Proof,), {})


def test_a_look_alike_that_equals_a_real_proof_is_no_proof():
    """A variant without subclassing: an object equal to (and hashing like) a real proof."""
    real = core.check("real", x + 1 > x)

    class LookAlike:
        def __eq__(self, other):
            return True

        def __hash__(self):
            return hash(real)

    fake = LookAlike()
    assert not core.is_proof(fake)
    with pytest.raises(TypeError, match="not a Proof made by the core"):
        core.check("via-fake", x == 7, by=[fake])
    assert core.is_proof(real) and core.facts(real).goal.eq(x + 1 > x)


def test_the_runner_reads_a_proofs_facts_from_the_core():
    """``type.__setattr__`` gets past the Proof class's sealing; a runner that read
    ``proof.goal`` then judged whatever the patched accessor returned."""
    real = core.check("real", x + 1 > x)
    theorem = Theorem(id="T-PATCHED", statement="y == 5", hyps=lambda d: {"y_nonneg": y >= 0},
                      claim=lambda d: y == 5, report=lambda: {"y": y}, prove=lambda: real,
                      mutants=(Mutant("MUT-Y", "y is 4", overrides={}),))
    original = core.Proof.__dict__["goal"]
    type.__setattr__(core.Proof, "goal", property(lambda self: y == 5))
    try:
        result = run(theorem)
    finally:
        type.__setattr__(core.Proof, "goal", original)
    assert result.status == "failed" and not result.ok, result


def test_the_tracking_literal_exploit_as_a_theorem_is_not_proved():
    """Wrapped in a Theorem, the exploit came out ``ok`` with a witness ``y = 1`` that
    contradicts its own claim."""
    theorem = Theorem(id="T-EXPLOIT", statement="y == 5", hyps=lambda d: {"y_nonneg": y >= 0},
                      claim=lambda d: z3.Or(y == 5, z3.Bool(core._TAG + "lemma0")), report=lambda: {"y": y},
                      prove=_tracking_literal_exploit, mutants=(Mutant("MUT-Y", "y is 4"),))
    result = run(theorem)
    assert result.status == "failed" and not result.ok and "tracking literals" in result.detail, result


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
