"""Attempts to pass off as a Proof an object the core did not issue: a forged, copied or edited
proof, a subclass or a look-alike, and a patched Proof class read by the theorem runner.
"""

from __future__ import annotations

import copy

import pytest
import z3

from specbound.proofs import core
from specbound.proofs.theorem import Mutant, Theorem, run

x, y = z3.Ints("x y")


# --- Proof objects: exactly the core's, read through the core ------------------------------------

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
