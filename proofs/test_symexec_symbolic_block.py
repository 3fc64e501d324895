"""Our prefix fill with BLOCK_B symbolic: one proof for every power of two an interpreted
launch of the serving envelope picks (``tl.arange(0, BLOCK_B)`` a lane ``0 <= lane <
BLOCK_B``, its min/max and fills modelled at every length), refuting the planted faults at the
counterexample's BLOCK_B, and covering exactly the concrete specializations of its other
constexprs."""

from __future__ import annotations

import pytest

from specbound.kernels import plan
from specbound.proofs.symexec import theorems
from specbound.proofs.symexec.verifiers import fill_prefix

SYMBOLIC = fill_prefix.FillSpec(None, 8, 16)


@pytest.fixture(scope="module")
def results():
    return theorems.prove_kernel("fill", SYMBOLIC, mutants=False)


def test_the_fill_is_proved_for_every_block_b_at_once(results):
    values = plan.symbolic_block_b_values()
    assert values[0] == 1 and values[-1] >= 256 and SYMBOLIC.label.startswith(f"BLOCK_B=2^0..2^{len(values) - 1},")
    assert {r.id.split("[")[0] for r in results} == {f"KERNEL-FILL-PREFIX-{p}" for p in fill_prefix.VERIFIER.properties}
    assert all(r.ok for r in results), [(r.id, r.detail) for r in results if not r.ok]
    stated = f"BLOCK_B in {{1,2,4,...,{values[-1]}}}"
    assert any(stated in r.hypotheses_used for r in results)   # the range is a premise, not idle


@pytest.mark.parametrize("mutant", ["MUT-FILL-PROGRAM-STRIDE", "MUT-FILL-TAIL-NO-MASK"])
def test_planted_faults_are_refuted_at_a_concrete_block_b(mutant):
    """The counterexample names a BLOCK_B of the range, and the planted kernel launched at it
    under the checked interpreter shows the fault."""
    m = next(m for m in fill_prefix.MUTANTS if m.id == mutant)
    out = theorems.refute("fill", SYMBOLIC, m)
    assert out.status == "refuted", out.detail
    assert out.counterexample["BLOCK_B"] in plan.symbolic_block_b_values()
    assert out.counterexample["replay.BLOCK_B"] == out.counterexample["BLOCK_B"]


def test_a_symbolic_spec_covers_its_block_b_values_only():
    values = plan.symbolic_block_b_values()
    assert all(SYMBOLIC.covers(fill_prefix.FillSpec(b, 8, 16)) for b in values)
    assert not SYMBOLIC.covers(fill_prefix.FillSpec(2 * values[-1], 8, 16))
    assert not SYMBOLIC.covers(fill_prefix.FillSpec(3, 8, 16))
    assert not SYMBOLIC.covers(fill_prefix.FillSpec(2, 16, 16))
    assert not SYMBOLIC.covers(fill_prefix.FillSpec(2, 8, 32))
    assert fill_prefix.FillSpec(2, 8, 16).covers(fill_prefix.FillSpec(2, 8, 16))
    assert not fill_prefix.FillSpec(2, 8, 16).covers(fill_prefix.FillSpec(4, 8, 16))
