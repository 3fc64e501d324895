"""The one kernel mutant registry (proofs/symexec/mutants.py): every registered mutant is
planted (the kernel source, or for the host-sizing mutant the host contract, differs from
the shipped one) and its plant fails loudly when the kernel no longer holds the text it
rewrites.  That each is refuted by the proofs is checked in test_symexec.py (on the results
it computes anyway), and that the fuzz catches the ones it replays in
tests/test_fuzz_replay.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from specbound import manifest
from specbound.proofs.symexec import mutants, verifiers
from specbound.proofs.symexec import theorems
from specbound.proofs import registry


@pytest.mark.parametrize("mid", sorted(m.id for m in mutants.MUTANTS if m.plant is not None))
def test_every_source_mutant_changes_its_kernel(mid):
    plant = mutants.get(mid).plant
    shipped, planted = plant.function_source(planted=False), plant.function_source()
    assert planted != shipped, f"{mid}: {plant.describe()} leaves the kernel as shipped"
    assert (plant.module, plant.func) == mutants.KIND_KERNEL[mutants.get(mid).kind]


def test_the_host_only_mutant_changes_the_host_contract():
    host_only = [m for m in mutants.MUTANTS if m.plant is None]
    assert [m.id for m in host_only] == ["MUT-27338-HOST-WIDTH-NO-TOPK"]
    for m in host_only:
        sp = theorems.selected_specs()[m.kind][0]
        build = verifiers.get(m.kind).run
        shipped, planted = build(sp).hyps, build(sp, host=dict(m.host)).hyps
        assert {k: str(v) for k, v in shipped.items()} != {k: str(v) for k, v in planted.items()}, m.id


def test_a_plant_that_matches_nothing_fails_loudly():
    m = mutants.get("MUT-SEARCH-PAST-ROW")
    broken = replace(m.plant, replace=(("text no kernel contains", "x"),))
    with pytest.raises(mutants.PlantFailed, match="matched nothing"):
        broken.function_source()
    with pytest.raises(mutants.PlantFailed):
        verifiers.tree_build.symbolic_run(theorems.selected_specs()["tree"][0], transform=broken.transform)


def test_every_mutant_is_replayed_by_the_fuzz_or_says_why_not():
    """One id per bug: a kernel mutant the fuzz replays names the spec theorem whose mutant of
    the same id models the bug, and every spec mutant sharing a kernel mutant's id is that one."""

    spec_mutants = {(th.id, m.id) for th in registry.theorems() for m in th.mutants}
    for m in mutants.MUTANTS:
        if m.fuzz_theorem:
            assert (m.fuzz_theorem, m.id) in spec_mutants, f"{m.id}: no spec mutant of this id in {m.fuzz_theorem}"
            assert not m.fuzz_skip, m.id
        else:
            assert m.fuzz_skip, m.id
    for theorem, mid in spec_mutants:
        if mid in mutants.BY_ID:
            assert mutants.get(mid).fuzz_theorem == theorem, (theorem, mid)
    assert set(mutants.fuzzed()) == {"VM-WALK-CONFINED", "VM-WALK-BOUNDED"}


def test_a_plant_that_changes_nothing_is_seen():
    """The planted-source comparison above can fail: a rewrite to the same text leaves the
    kernel as shipped."""
    same = mutants.Plant("tree_build", "build_tree_kernel", (("node2 < sel_width", "node2 < sel_width"),))
    assert same.function_source() == same.function_source(planted=False)


def test_every_kernel_property_family_refutes_a_mutant():
    """Each layout of each kernel is its own family: every property of it refutes a mutant by
    replay in some specialization (or says why none can, ``kernel_without_mutant``)."""
    assert manifest.families_without_mutant(manifest.load()) == []


def test_a_family_refuting_no_mutant_is_named():
    """The check above can fail: a copy of the manifest whose QLEN race theorems lost their
    mutants names that family, and only it."""
    copy = json.loads(json.dumps(manifest.load()))
    for e in copy["kernel_theorems"].values():
        if (e["kernel"], e["property"]) == ("BUILD-TREE-QLEN", "RACE-FREE"):
            e["mutants"] = {}
    assert manifest.families_without_mutant(copy) == ["BUILD-TREE-QLEN/RACE-FREE"]


def test_a_mutant_naming_no_layout_is_refused():
    m = mutants.get("MUT-QLEN-MASK-TRANSPOSED")
    with pytest.raises(ValueError, match="MUT-QLEN-MASK-TRANSPOSED: layouts .'BUILD-TREE-QLEN-ONLY'. name no"):
        mutants.check_layouts([replace(m, layouts=("BUILD-TREE-QLEN-ONLY",))])
