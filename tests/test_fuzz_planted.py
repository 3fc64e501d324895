"""Every property catches a planted bug: a test that cannot fail is a defect.

Bugs are planted into the *implementations* (never the spec the properties read): proof
mutants' formulas swapped into the reference's view of the spec, and variants of our own
Triton kernel carrying sglang's historical CUDA-kernel bugs (the kernel mutant registry, specbound.proofs.symexec.mutants).
"""

from __future__ import annotations

import pytest

from specbound import kernels, spec
from specbound.proofs.symexec import mutants as kernel_mutants
from specbound.fuzz import properties
from specbound.fuzz import strategies as sst
from specbound.fuzz.runner import falsify
from specbound.proofs import registry
from specbound.proofs.theorem import Defs

needs_interpreter = pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels compiled: no checked interpreter")


def _overrides(theorem_id, mutant_id):
    for th in registry.theorems():
        if th.id == theorem_id:
            for m in th.mutants:
                if m.id == mutant_id:
                    return dict(m.overrides)
    raise KeyError(mutant_id)


def _plant_reference(monkeypatch, module, **overrides):
    import importlib
    monkeypatch.setattr(importlib.import_module(f"specbound.reference.{module}"), "spec", Defs(**overrides))


def test_tree_footprint_catches_a_row_stride_bug_in_the_reference(monkeypatch):
    _plant_reference(monkeypatch, "tree", **_overrides("VM-ROWS-DISJOINT", "MUT-ROW-STRIDE-NO-DRAFT"))
    case = falsify(lambda c: properties.check_tree_footprint(c, "reference"),
                   sst.tree_cases(modes=(spec.TreeMaskMode.FULL_MASK,)), 100, shrink=False)
    assert case is not None and case.bs >= 1


def test_tree_semantics_catches_a_depth_bug_in_the_reference(monkeypatch):
    def short_walk(t, *a):
        return spec.bounded_walk(t, *a)[:-1] or spec.bounded_walk(t, *a)   # drops the deepest mark
    _plant_reference(monkeypatch, "tree", bounded_walk=short_walk)
    case = falsify(lambda c: properties.check_tree_semantics(c, "reference"), sst.tree_cases(), 100, shrink=False)
    assert case is not None and case.num_draft_tokens >= 3
    # the footprint alone would not see it: same cells, wrong values
    properties.check_tree_footprint(case, "reference")


def test_kv_properties_catch_the_segment_bug_in_the_reference(monkeypatch):
    _plant_reference(monkeypatch, "draft_kv", **_overrides("KV-TILING", "MUT-SEGMENT-NO-TOPK"))
    for check in (lambda c: properties.check_kv_footprint(c, "reference"), lambda c: properties.check_kv_semantics(c, "reference")):
        case = falsify(check, sst.kv_cases(), 100, shrink=False)
        assert case is not None and case.topk > 1


@needs_interpreter
def test_differential_catches_a_links_bug_in_the_reference(monkeypatch):
    def swapped(parent_of):
        nt, ns = spec.links(parent_of)
        return ns, nt
    _plant_reference(monkeypatch, "tree", links=swapped)
    assert falsify(properties.check_tree_differential, sst.tree_cases(max_bs=3), 40, shrink=False) is not None


@needs_interpreter
def test_kernel_footprint_property_catches_the_search_past_row_variant(monkeypatch):
    monkeypatch.setattr(kernels.tree_build, "build_tree_kernel", kernel_mutants.get("MUT-SEARCH-PAST-ROW").plant.kernel())
    case = falsify(lambda c: properties.check_tree_footprint(c, "triton"), sst.tree_cases(max_bs=4), 40, shrink=False)
    assert case is not None and case.bs >= 1


@needs_interpreter
def test_kernel_semantics_property_catches_the_unbounded_walk_variant(monkeypatch):
    monkeypatch.setattr(kernels.tree_build, "build_tree_kernel", kernel_mutants.get("MUT-UNBOUNDED-WALK").plant.kernel())
    case = falsify(lambda c: properties.check_tree_semantics(c, "triton"), sst.tree_cases(max_bs=4, malformed=True), 60, shrink=False)
    assert case is not None and case.defects   # only a malformed tree (a cycle) walks past D


@needs_interpreter
def test_kv_kernel_property_catches_a_short_row(monkeypatch):
    """A planted host bug: the wrapper's launch plan passes one slot less of row width."""
    from specbound.kernels import plan as launch_plans

    real = launch_plans.kv_plan

    def short(tensors, *, width, **kw):
        return real(tensors, width=width - 1, **kw)          # rows overlap by one slot
    monkeypatch.setattr(launch_plans, "kv_plan", short)
    case = falsify(lambda c: properties.check_kv_footprint(c, "triton"), sst.kv_cases(max_bs=3), 40, shrink=False)
    assert case is not None and case.num_steps >= 2
