"""Closing a model (:mod:`specbound.proofs.witness`): the closed formulas of a model are asked
in one solver query, and only when it may fail one by one, so a broken formula is still named
with its failing index."""

from __future__ import annotations

import z3

from specbound.proofs import core, model, witness

BATCH = {"three": model.bs == 3, "first": model.seq_len(0) == 1, "second": model.seq_len(1) == 5,
         "third": model.seq_len(2) == 1}
SMALL = model.forall_index(lambda i: z3.Implies(model.in_batch(i), model.seq_len(i) <= 3))
NONNEG = model.forall_index(lambda i: z3.Implies(model.in_batch(i), model.seq_len(i) >= 0))
BELOW_SIX = model.forall_index(lambda i: z3.Implies(model.in_batch(i), model.seq_len(i) <= 6))


def _closed(formulas):
    found = core.satisfy("batch", BATCH)
    return witness.Interpretation(found.model, list(formulas.values()), model.batch_completion)


def _asked(monkeypatch) -> list:
    names = []
    satisfy = core.satisfy
    monkeypatch.setattr(core, "satisfy", lambda name, *a, **k: names.append(name) or satisfy(name, *a, **k))
    return names


def test_a_broken_formula_is_named_with_its_index(monkeypatch):
    formulas = {"nonneg": NONNEG, "small": SMALL, "below_six": BELOW_SIX}
    interp = _closed(formulas)
    asked = _asked(monkeypatch)
    assert witness.failures("batch", interp, formulas) == [("small", (1,))]
    assert len(asked) == 1 + len(formulas)       # the one query found a violation: then one each


def test_formulas_that_hold_are_shown_in_one_query(monkeypatch):
    formulas = {"nonneg": NONNEG, "below_six": BELOW_SIX, "three": model.bs == 3}
    interp = _closed(formulas)
    asked = _asked(monkeypatch)
    assert witness.failures("batch", interp, formulas) == []
    assert asked == ["batch/close"]              # bs == 3 simplified to true: not asked
