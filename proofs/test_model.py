"""The symbolic batch's one writer of per-request preconditions (``model.per_request``): a
condition binds every request of the batch and no index past it, whichever form its family
takes (spec Conditions or ``{name: formula}``)."""

from __future__ import annotations

import pytest
import z3

from specbound.proofs import core, model
from specbound.proofs.model import C, D, seq_len

SIZE = 4


def _past_the_end(*families, size=None):
    """Planted: the guard admits index ``size`` too (``i <= size``)."""
    i = z3.Int("i")
    return {name: z3.ForAll([i], z3.Implies(z3.And(0 <= i, i <= size), f.holds if hasattr(f, "holds") else f))
            for family in families for name, f in _named(family(i))}


def _named(conds):
    return conds.items() if isinstance(conds, dict) else ((c.name, c) for c in conds)


@pytest.mark.parametrize("writer", [model.per_request, _past_the_end], ids=["per_request", "planted"])
def test_a_per_request_condition_binds_the_batch_and_nothing_past_it(writer):
    hyps = writer(model.seq_len_conds, lambda i: {"room": seq_len(i) + D <= C}, size=SIZE)
    assert list(hyps) == ["seq_len_nonneg", "seq_len_le_context", "room"]
    last = core.check("last_request", seq_len(SIZE - 1) + D <= C, hyps=hyps, by=model.instances(hyps, z3.IntVal(SIZE - 1)))
    assert "room" in last.assumptions
    try:
        core.check("past_the_end", seq_len(SIZE) <= C, hyps=hyps, by=model.instances(hyps, z3.IntVal(SIZE)))
        bound_past_the_end = True
    except core.Refuted:
        bound_past_the_end = False
    assert bound_past_the_end is (writer is _past_the_end)


def test_both_family_forms_write_the_same_hypothesis():
    as_conditions = model.per_request(model.seq_len_conds, size=SIZE)
    as_formulas = model.per_request(lambda i: {c.name: c.holds for c in model.seq_len_conds(i)}, size=SIZE)
    assert as_conditions.keys() == as_formulas.keys()
    assert all(as_conditions[k].eq(as_formulas[k]) for k in as_conditions)
