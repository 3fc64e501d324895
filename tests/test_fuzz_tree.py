"""Differential properties of the tree build: spec vs reference vs Triton (checked interpreter)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from specbound import kernels
from specbound.fuzz import properties
from specbound.fuzz import strategies as sst
from specbound.pytest_plugin import fuzz_budget

needs_interpreter = pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels compiled: no checked interpreter")


@settings(max_examples=fuzz_budget("cheap"))
@given(sst.tree_cases())
def test_reference_writes_exactly_the_spec_footprint(case):
    properties.check_tree_footprint(case, "reference")


@settings(max_examples=fuzz_budget("cheap"))
@given(sst.tree_cases())
def test_reference_outputs_are_the_spec_semantics(case):
    properties.check_tree_semantics(case, "reference")


@needs_interpreter
@settings(max_examples=fuzz_budget("kernel"))
@given(sst.tree_cases())
def test_kernel_writes_exactly_the_spec_footprint_never_out_of_bounds(case):
    properties.check_tree_footprint(case, "triton")


@needs_interpreter
@settings(max_examples=fuzz_budget("kernel"))
@given(sst.tree_cases())
def test_kernel_outputs_are_the_spec_semantics(case):
    properties.check_tree_semantics(case, "triton")


@needs_interpreter
@settings(max_examples=fuzz_budget("kernel"))
@given(sst.tree_cases(malformed=0.6))
def test_kernel_equals_reference_bit_for_bit_on_valid_and_malformed_trees(case):
    properties.check_tree_differential(case)
