"""VM-*: the verify tree mask stays inside its buffer in every layout."""

from __future__ import annotations

import pytest

from specbound import spec
from specbound.proofs._checks import assert_theorem_ok

REQUIRED = {
    "VM-PREFIX-BOUND": (),
    "VM-QLEN-IN-BOUNDS": (),
    "VM-FULL-IN-BOUNDS": ("MUT-33127-FULL-ALWAYS-FITS", "MUT-29450-MISSING-DRAFT-TERM"),
    "VM-BITPACK-IN-BOUNDS": (),
    "VM-FITS-TIGHT": ("MUT-33127-FULL-ALWAYS-FITS",),
    "VM-ROWS-DISJOINT": (),
    "VM-EXACT-EXTENT": ("MUT-29450-MISSING-DRAFT-TERM",),
    "VM-FALLBACK-COVERS": (),
    "VM-INT32-SAFE": ("MUT-INT32-OVERFLOW",),
}


@pytest.mark.parametrize("theorem_id", sorted(REQUIRED))
def test_theorem(proof_results, theorem_id):
    assert_theorem_ok(proof_results[theorem_id], REQUIRED[theorem_id])


def test_full_always_fits_counterexample_is_a_real_overrun(proof_results):
    """The counterexample, evaluated with the spec on plain ints, writes past the buffer
    that the mutant's fits() would have reused."""
    m = next(m for m in proof_results["VM-FULL-IN-BOUNDS"].mutants if m.id == "MUT-33127-FULL-ALWAYS-FITS")
    x = m.counterexample
    assert x["bs"] > x["max_bs"]
    cell = spec.mask_tree_cell(spec.TreeMaskMode.FULL_MASK, x["b"], x["t"], x["j"], x["n"],
                               x["seq_len[b]"], x["P[b]"])
    assert cell >= spec.tree_mask_numel(spec.TreeMaskMode.FULL_MASK, x["max_bs"], x["n"], x["C"])


def test_missing_draft_term_counterexample_overruns(proof_results):
    m = next(m for m in proof_results["VM-FULL-IN-BOUNDS"].mutants if m.id == "MUT-29450-MISSING-DRAFT-TERM")
    x = m.counterexample
    cell = spec.mask_tree_cell(spec.TreeMaskMode.FULL_MASK, x["b"], x["t"], x["j"], x["n"],
                               x["seq_len[b]"], x["P[b]"])
    assert x["bs"] <= x["max_bs"]
    assert cell >= x["max_bs"] * x["n"] * x["C"]  # the mutant's size
    assert cell < spec.tree_mask_numel(spec.TreeMaskMode.FULL_MASK, x["max_bs"], x["n"], x["C"])
