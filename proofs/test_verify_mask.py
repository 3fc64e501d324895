"""VM-*: the verify tree mask stays inside its buffer in every layout."""

from __future__ import annotations

from specbound import spec

# Each theorem's verdict and the mutants it must refute are in proofs/manifest.json
# (proofs/test_manifest.py::test_spec_theorem_as_the_manifest_expects).


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
