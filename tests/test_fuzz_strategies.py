"""The strategies produce what they promise."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specbound import spec
from specbound.fuzz import strategies as sst
from specbound.fuzz.records import case_from_json
from specbound.pytest_plugin import fuzz_budget
from specbound.reference import check_tree_well_formed


@settings(max_examples=fuzz_budget("cheap"))
@given(st.data())
def test_eagle_trees_are_valid_and_sorted(data):
    k, d, n = data.draw(sst.tree_shapes())
    assert n - 1 <= spec.score_list_len(k, d)
    sel, pl = data.draw(sst.eagle_tree(k, d, n))
    assert sel == sorted(sel) and len(sel) == n - 1 and len(set(sel)) == len(sel)
    assert len(pl) == spec.parent_list_width(k, d)
    check_tree_well_formed(0, sel, pl, k, d, n)


@settings(max_examples=fuzz_budget("cheap"))
@given(sst.tree_cases(), sst.kv_cases())
def test_cases_respect_their_preconditions_and_round_trip(tree, kv):
    assert all(0 <= s <= tree.max_context_len for s in tree.seq_lens)
    assert all(0 <= s and s + kv.num_steps <= kv.max_context_len for s in kv.seq_lens)
    assert kv.used_len() <= kv.width()
    assert case_from_json(tree.to_json()) == tree and case_from_json(kv.to_json()) == kv


def test_shapes_cover_serving_defaults_chains_flat_and_full_trees():
    seen = set()

    @settings(max_examples=300, derandomize=True, database=None)
    @given(sst.tree_shapes())
    def collect(shape):
        k, d, n = shape
        seen.add("serving" if shape == (4, 5, 8) else None)
        seen.add("chain" if k == 1 and n == d + 1 and d > 1 else None)
        seen.add("flat" if d == 1 else None)
        seen.add("full" if n - 1 == spec.score_list_len(k, d) and k > 1 and d > 1 else None)
    collect()
    assert {"serving", "chain", "flat", "full"} <= seen


def test_malformed_trees_are_caught_by_strict_validation_often():
    bad = []

    @settings(max_examples=150, derandomize=True, database=None)
    @given(st.data())
    def collect(data):
        k, d, n = data.draw(sst.tree_shapes())
        sel, pl, defects = data.draw(sst.malformed_tree(k, d, n))
        try:
            check_tree_well_formed(0, sel, pl, k, d, n)
            bad.append(False)
        except spec.SpecArgumentError:
            bad.append(True)
    collect()
    assert sum(bad) > len(bad) // 2
