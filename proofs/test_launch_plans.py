"""One launch plan per kernel (kernels/plan.py): the wrappers launch through it and
the kernel proofs' host contract is the same plan evaluated on Z3 terms, so a change to a
wrapper's grid or argument list changes what the proofs assume (and a wrong one fails)."""

from __future__ import annotations

import random

import pytest
import z3

from specbound import spec
from specbound.proofs.symexec import models
from specbound.proofs.symexec.verifiers import draft_kv, fill_prefix, tree_build
from specbound.proofs.symexec import theorems

pytest.importorskip("specbound.kernels")  # before triton: it sets TRITON_INTERPRET
torch = pytest.importorskip("torch")

from specbound import kernels  # noqa: E402
from specbound import reference as ref  # noqa: E402
from specbound.kernels import plan as launch_plans  # noqa: E402
from specbound.kernels.plan import LaunchPlan  # noqa: E402
from specbound.reference.samples import random_tree_batch

FILL = fill_prefix.FillSpec(2, 8, 16)


def _contract(run, name: str):
    """The formula of the launch contract ``name`` of a symbolic run."""
    found = [ax for proof in run.axioms for ax_name, ax in proof.axioms.items() if ax_name == name]
    assert len(found) == 1, f"contract {name}: {found}"
    return found[0].formula


def test_one_plan_evaluates_on_ints_and_on_terms():
    """The tree plan's grid and widths on Z3 terms, at concrete points, are the int plan's."""
    bs, k, d, n = z3.Ints("bs K D n")
    no_tensors = {name: None for name in launch_plans.TREE_TENSORS}
    sym = launch_plans.tree_plan(no_tensors, bs=bs, topk=k, depth=d, n=n, mode=spec.TreeMaskMode.FULL_MASK,
                                 block_b=4, nodes=8)
    rng = random.Random(0)
    for _ in range(20):
        point = {bs: rng.randint(1, 40), k: rng.randint(1, 4), d: rng.randint(1, 6), n: rng.randint(2, 8)}
        conc = launch_plans.tree_plan(no_tensors, bs=point[bs], topk=point[k], depth=point[d], n=point[n],
                                      mode=spec.TreeMaskMode.FULL_MASK, block_b=4, nodes=8)
        subst = [(v, z3.IntVal(x)) for v, x in point.items()]
        ev = lambda t: z3.simplify(z3.substitute(t, *subst)).as_long()
        assert ev(sym.grid[0]) == conc.grid[0]
        for name in ("pl_width", "sel_width"):
            assert ev(sym.args[name]) == conc.args[name], name
        assert ev(sym.constexprs["DEPTH"]) == conc.constexprs["DEPTH"]


def _halved_grid(real):
    """A wrapper bug planted in the plan: half the programs (one per 2*BLOCK_B requests)."""
    def plan(*args, block_b, **kw):
        p = real(*args, block_b=block_b, **kw)
        return LaunchPlan((spec.cdiv(kw.get("bs", kw.get("num_seqs")), 2 * block_b),), p.args, p.constexprs)
    return plan


def test_a_grid_planted_in_the_fill_plan_changes_the_contract_and_fails_the_coverage_proof(monkeypatch):
    shipped = _contract(fill_prefix.symbolic_run(FILL), "grid_is_cdiv")
    held = {r.id.split("[")[0]: r.status for r in theorems.prove_kernel("fill", FILL, mutants=False)}
    assert held["KERNEL-FILL-PREFIX-FOOTPRINT"] == "proved"

    monkeypatch.setattr(launch_plans, "fill_plan", _halved_grid(launch_plans.fill_plan))
    planted = _contract(fill_prefix.symbolic_run(FILL), "grid_is_cdiv")
    assert not z3.eq(z3.simplify(shipped), z3.simplify(planted)), (shipped, planted)
    after = {r.id.split("[")[0]: r for r in theorems.prove_kernel("fill", FILL, mutants=False)}
    # too few programs: some request's prefix row is never filled (coverage), nothing else breaks
    assert after["KERNEL-FILL-PREFIX-FOOTPRINT"].status == "failed", after["KERNEL-FILL-PREFIX-FOOTPRINT"].detail
    assert after["KERNEL-FILL-PREFIX-IN-BOUNDS"].status == "proved"


@pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels compiled")
def test_the_same_planted_grid_breaks_the_wrapper(monkeypatch):
    """The wrapper launches through the plan the proofs read: the halved grid leaves requests
    unbuilt, so its output differs from the reference (and the shipped plan's does not)."""

    batch = random_tree_batch(random.Random(3), 6, 2, 3, 6)
    kw = dict(topk=2, depth=3, num_draft_tokens=6, mode=spec.TreeMaskMode.FULL_MASK)
    want = ref.build_tree(*batch, **kw)
    # tile_budget 64: one request per program (NODES = 8), six programs
    assert torch.equal(kernels.build_tree(*batch, **kw, tile_budget=64).positions, want.positions)
    monkeypatch.setattr(launch_plans, "tree_plan", _halved_grid(launch_plans.tree_plan))
    assert not torch.equal(kernels.build_tree(*batch, **kw, tile_budget=64).positions, want.positions)


def test_an_argument_added_to_a_plan_is_refused_by_the_model(monkeypatch):
    real = launch_plans.kv_plan

    def plan(*args, **kw):
        p = real(*args, **kw)
        return LaunchPlan(p.grid, {**p.args, "extra_flag": 1}, p.constexprs)
    monkeypatch.setattr(launch_plans, "kv_plan", plan)
    with pytest.raises(ValueError, match="draft_kv_kernel: the launch plan passes .*extra_flag"):
        draft_kv.symbolic_run(draft_kv.KvSpec(2, 8, 4, 16))


def test_the_tree_contracts_are_the_plan_on_terms():
    run = tree_build.symbolic_run(tree_build.TreeSpec(1, 3, 2, 8))
    bs, k, d, n = (run.report[x] for x in ("bs", "topk", "depth", "n"))
    sym = launch_plans.tree_plan({name: None for name in launch_plans.TREE_TENSORS}, bs=bs, topk=k, depth=d, n=n,
                               mode=spec.TreeMaskMode.QLEN_ONLY, block_b=2, nodes=8)
    assert z3.eq(_contract(run, "grid_is_cdiv"), run.report["grid"] == sym.grid[0])
    assert z3.eq(_contract(run, "pl_width_is_spec"), z3.Int("pl_width") == sym.args["pl_width"])
    assert z3.eq(_contract(run, "DEPTH_is_walk_max_steps"), sym.constexprs["DEPTH"] == 3)


def test_wrappers_and_proofs_read_one_plan_module():
    """The proofs load the plans without the kernels package (no torch); the kernels imported
    afterwards share that module, so a patched plan reaches both."""
    import subprocess
    import sys

    from specbound.kernels import draft_kv, tree_build

    assert models.launch_plans() is tree_build.launch_plans is draft_kv.launch_plans
    code = ("import sys\nfrom specbound.proofs.symexec import models\np = models.launch_plans()\n"
            "assert 'torch' not in sys.modules\n"
            "from specbound.kernels import draft_kv, tree_build\n"
            "assert tree_build.launch_plans is p and draft_kv.launch_plans is p\n")
    subprocess.run([sys.executable, "-c", code], check=True)
