"""VM-WALK-*: the guarded walk is confined to its row and bounded, for any input."""

from __future__ import annotations

from specbound import spec

# Each theorem's verdict and the mutants it must refute are in proofs/manifest.json
# (proofs/test_manifest.py::test_spec_theorem_as_the_manifest_expects).


def test_unbounded_walk_counterexample_is_a_cycle(proof_results):
    """Replayed on plain ints: the state the counterexample names is a self-loop, which the
    spec's bounded walk cuts after D iterations."""
    m = next(m for m in proof_results["VM-WALK-BOUNDED"].mutants if m.id == "MUT-UNBOUNDED-WALK")
    x = m.counterexample
    n, k, d = x["n"], x["K"], x["D"]
    cur, value = x["cur[k]"], x["sel[k]"]
    sel_row = [0] * (n - 1)
    sel_row[cur] = value
    pl_row = [0] * spec.parent_list_width(k, d)
    pl_row[spec.parent_slot(value, k)] = value  # the parent token is the node itself
    assert spec.parent_slot_kind(value, k, d) == spec.SLOT_LOOKUP
    marks = spec.bounded_walk(cur + 1, sel_row, pl_row, k, d, n)
    assert marks == [cur + 1] * d
