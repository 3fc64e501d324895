"""Our kernels with BLOCK_B symbolic: one proof for every power of two a block chooser can pick
(compiled or interpreted) (``tl.arange(0, BLOCK_B)`` a lane ``0 <= lane < BLOCK_B``, its
min/max and fills modelled at every length), the range a premise the proofs use, planted
faults refuted at the counterexample's BLOCK_B, and each symbolic spec covering exactly the
concrete specializations of its other constexprs."""

from __future__ import annotations

import dataclasses

import pytest

from specbound.kernels import plan
from specbound.proofs.symexec import theorems
from specbound.proofs.symexec.verifiers import VERIFIERS, fill_prefix

BY_KIND = {v.kind: v for v in VERIFIERS}


def _symbolic(kind):
    return dataclasses.replace(BY_KIND[kind].default_specs[0], BLOCK_B=None)


@pytest.mark.parametrize("kind", ["fill", "tree", "kv"])
def test_a_kernel_is_proved_for_every_block_b_at_once(kind):
    values = plan.symbolic_block_b_values()
    sp = _symbolic(kind)
    assert values[0] == 1 and values[-1] >= 256 and f"BLOCK_B=2^0..2^{len(values) - 1}" in sp.label
    results = theorems.prove_kernel(kind, sp, mutants=False)
    assert {r.id.split("[")[0] for r in results} == {f"KERNEL-{sp.name}-{p}" for p in BY_KIND[kind].properties}
    assert all(r.ok for r in results), [(r.id, r.detail) for r in results if not r.ok]
    stated = f"BLOCK_B in {{1,2,4,...,{values[-1]}}}"
    assert any(stated in r.hypotheses_used for r in results)   # the range is a premise, not idle


@pytest.mark.parametrize("kind,mutant", [("fill", "MUT-FILL-PROGRAM-STRIDE"), ("fill", "MUT-FILL-TAIL-NO-MASK"),
                                         ("tree", "MUT-TREE-PROGRAM-STRIDE"), ("kv", "MUT-KV-TAIL-NO-MASK")])
def test_planted_faults_are_refuted_at_a_concrete_block_b(kind, mutant):
    """The counterexample names a BLOCK_B of the range, and the planted kernel launched at it
    under the checked interpreter shows the fault."""
    m = next(m for m in BY_KIND[kind].mutants if m.id == mutant)
    out = theorems.refute(kind, _symbolic(kind), m)
    assert out.status == "refuted", out.detail
    assert out.counterexample["BLOCK_B"] in plan.symbolic_block_b_values()
    assert out.counterexample["replay.BLOCK_B"] == out.counterexample["BLOCK_B"]


def test_a_symbolic_spec_covers_its_block_b_values_only():
    values = plan.symbolic_block_b_values()
    symbolic = fill_prefix.FillSpec(None, 8, 16)
    assert all(symbolic.covers(fill_prefix.FillSpec(b, 8, 16)) for b in values)
    assert not symbolic.covers(fill_prefix.FillSpec(2 * values[-1], 8, 16))
    assert not symbolic.covers(fill_prefix.FillSpec(3, 8, 16))
    assert not symbolic.covers(fill_prefix.FillSpec(2, 16, 16))
    assert not symbolic.covers(fill_prefix.FillSpec(2, 8, 32))
    assert fill_prefix.FillSpec(2, 8, 16).covers(fill_prefix.FillSpec(2, 8, 16))
    assert not fill_prefix.FillSpec(2, 8, 16).covers(fill_prefix.FillSpec(4, 8, 16))
    assert not fill_prefix.FillSpec(2, 8, 16).covers(symbolic)


@pytest.mark.parametrize("kind", ["tree", "kv"])
def test_the_symbolic_label_is_the_one_coverage_looks_up(kind):
    """The label a symbolic proof records is the plan's for BLOCK_B = its range label."""
    sp = _symbolic(kind)
    assert (sp.name, sp.label) == plan.specialization(BY_KIND[kind].func, {**sp.constexprs,
                                                                            "BLOCK_B": plan.symbolic_block_b_label()})
    assert sp.covers(dataclasses.replace(sp, BLOCK_B=4)) and not sp.covers(dataclasses.replace(sp, BLOCK_B=5))
