"""Attempts to make the trusted core prove something through its own constants: the tracking
literals of a query and the fresh constants (eigenvariables) of ``check_forall`` and
``induct``, whose names can be known or guessed.  Each exploit is kept with a test that it
no longer reaches ``False``.
"""

from __future__ import annotations

import pytest
import z3

from specbound.proofs import core
from specbound.proofs.theorem import Mutant, Theorem, run

x, y = z3.Ints("x y")


# --- the core's own constants (tracking literals, eigenvariables) ---------------------------------

def _tracking_literal_exploit():
    """Cite one trivial lemma and prove ``Or(y == 5, <that lemma's tracking literal>)``: the
    core assumes its tracking literals, so a query that can name one proves anything."""
    trivial = core.check("trivial", x + 1 > x)
    literal = z3.Bool(core._TAG + "lemma0")  # the name is no secret: models used to list it
    return core.check("y-is-5", z3.Or(y == 5, literal), by=[trivial])


def test_a_formula_cannot_name_the_cores_tracking_literals():
    """The core tracks each assertion by a fresh Boolean; a hypothesis mentioning a constant
    with a tag-like name is just a formula about that constant."""
    for name in ("goal!negated", "goal!0", "hyp!0", "goal"):
        with pytest.raises(core.Refuted):
            core.check("anything", x == 42, hyps={"h": z3.Not(z3.Bool(name))})


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


def test_the_tracking_literal_exploit_as_a_theorem_is_not_proved():
    """Wrapped in a Theorem, the exploit came out ``ok`` with a witness ``y = 1`` that
    contradicts its own claim."""
    theorem = Theorem(id="T-EXPLOIT", statement="y == 5", hyps=lambda d: {"y_nonneg": y >= 0},
                      claim=lambda d: z3.Or(y == 5, z3.Bool(core._TAG + "lemma0")), report=lambda: {"y": y},
                      prove=_tracking_literal_exploit, mutants=(Mutant("MUT-Y", "y is 4"),))
    result = run(theorem)
    assert result.status == "failed" and not result.ok and "tracking literals" in result.detail, result
