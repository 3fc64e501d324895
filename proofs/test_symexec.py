"""Kernel theorems proved by the symbolic executor.

The default run covers a representative subset of specializations (see
``theorems.default_specs``); ``pytest --specbound-all`` runs every specialization serving
uses.  Every obligation must be proved and witnessed; every kernel mutant must be refuted
by a counterexample whose concrete replay reproduces the fault.
"""

from __future__ import annotations

import pytest

from specbound import manifest
from specbound.replay import FAULTS as replay_faults
from specbound.proofs.symexec import mutants, obligations, theorems, verifiers
from specbound.proofs import core
from specbound.proofs.symexec.interp import Executor
from specbound.proofs.symexec.obligations import Obligation, check
from specbound.proofs.symexec.obligations import check
from specbound.proofs.symexec.values import INT32, Access, Ptr, TensorModel, V
from specbound.proofs.symexec.values import INT32, V, lane_range
from specbound.proofs.symexec.values import INT64, TensorModel
from specbound.proofs.symexec.values import Unsupported
import specbound.proofs.symexec as pkg

_cache: dict = {}
EXPECTED = manifest.load()


def pytest_generate_tests(metafunc):
    """``kind, sp``: the default specializations, or every covered one with ``--specbound-all``."""
    if {"kind", "sp"} <= set(metafunc.fixturenames):
        specs = theorems.selected_specs(metafunc.config.getoption("specbound_all"))
        pairs = [(kind, sp) for kind, group in specs.items() for sp in group]
        metafunc.parametrize("kind,sp", pairs, ids=[f"{k}-{sp.label}" for k, sp in pairs])


def _results(kind, sp):
    key = (kind, sp)
    if key not in _cache:
        carries = theorems.carries_mutants(kind, sp, theorems.selected_specs())
        _cache[key] = theorems.prove_kernel(kind, sp, mutants=carries)
    return _cache[key]


def test_kernel_specialization(kind, sp):
    for r in _results(kind, sp):
        assert r.status == "proved", f"{r.id}: {r.status} {r.detail}"
        w = r.witness
        assert w["witnessed"] > 0 and w["witnessed"] + w["dead"] == w["obligations"], f"{r.id}: unwitnessed obligation"
        assert r.hypotheses_used, f"{r.id}: empty unsat cores"
        for m in r.mutants:
            assert m.status == "refuted", f"{r.id}/{m.id} survived: {m.note}"
            assert m.counterexample.get("replay") in (*replay_faults, "output"), m.counterexample
    # the verdicts, mutants (with their replay verdicts) and obligation counts the manifest records
    assert manifest.compare_results(_results(kind, sp), EXPECTED) == []


# {kind: {mutant id: replay verdict}}: the mutants each kernel's first specializations (one per
# kernel name: each tree layout) must refute and how the replay reproduces each fault, as
# recorded in proofs/manifest.json
REQUIRED_MUTANTS = {kind: {m: how for e in EXPECTED["kernel_theorems"].values() if e["kind"] == kind
                           for m, how in e["mutants"].items()} for kind in theorems.default_specs()}


def _carriers(kind):
    """The default specializations that carry mutants: the first of each kernel name."""
    specs = theorems.selected_specs()
    return [sp for sp in specs[kind] if theorems.carries_mutants(kind, sp, specs)]


@pytest.mark.parametrize("kind", sorted(REQUIRED_MUTANTS))
def test_every_property_of_the_first_specialization_refutes_a_mutant(kind):
    for sp in _carriers(kind):
        for r in _results(kind, sp):
            prop = r.id.split("[")[0][len(theorems.kernel_name(r.id)) + 1:]
            if f"{kind}/{prop}" in EXPECTED["kernel_without_mutant"]:
                assert not r.mutants, r.id
                continue
            assert r.mutants and all(m.status == "refuted" for m in r.mutants), f"{r.id}: {len(r.mutants)} mutants"


def test_kernel_theorems_list_their_launch_contracts():
    """Launch contracts are core axioms, listed per theorem from its proofs."""
    results = {r.id.split("[")[0]: r for r in _results("tree", theorems.selected_specs()["tree"][0])}
    assert "grid_is_cdiv" in results["KERNEL-BUILD-TREE-FULL-FOOTPRINT"].axioms_used  # coverage: enough programs
    assert "DEPTH_is_walk_max_steps" in results["KERNEL-BUILD-TREE-FULL-WALK-BOUNDED"].axioms_used
    kv = {r.id.split("[")[0]: r for r in _results("kv", theorems.selected_specs()["kv"][0])}
    assert "req_to_token_contiguous" in kv["KERNEL-KV-IN-BOUNDS"].axioms_used
    assert "draft_kv_capacity_ok" in kv["KERNEL-KV-IN-BOUNDS"].hypotheses_used


def test_every_registered_mutant_is_required():
    assert {k: set(v) for k, v in REQUIRED_MUTANTS.items()} == \
        {kind: {m.id for m in mutants.of_kind(kind)} for kind in mutants.KIND_KERNEL}


@pytest.mark.parametrize("kind", sorted(REQUIRED_MUTANTS))
def test_mutants_refuted_by_replay(kind):
    """Every registered mutant is refuted by the proofs (a counterexample whose concrete
    launch on the planted kernel reproduces the fault)."""

    seen = {m.id: m for sp in _carriers(kind) for r in _results(kind, sp) for m in r.mutants}
    for mid, verdict in REQUIRED_MUTANTS[kind].items():
        assert mid in seen, f"{mid} not run"
        assert seen[mid].status == "refuted", f"{mid}: {seen[mid].note}"
        assert seen[mid].counterexample["replay"] == verdict, seen[mid].counterexample
        assert verdict in mutants.get(mid).expect, (mid, verdict)


@pytest.mark.parametrize("kind,mid", [(k, m) for k, ids in sorted(theorems.FOOTPRINT_ONLY.items()) for m in ids])
def test_footprint_only_mutants_escape_bounds_and_races(kind, mid):
    """The FOOTPRINT mutants are faults bounds, regions and races cannot see: on the mutated
    kernel those theorems still hold, so the footprint obligation is the one that refutes it."""

    m = mutants.get(mid)
    assert m.prop == "FOOTPRINT"
    sp = theorems.first_carrier(m)
    sp = m.spec_override(sp) if m.spec_override else sp
    run = verifiers.get(kind).run(sp, transform=m.transform, host=dict(m.host))
    for prop in ("IN-BOUNDS", "RACE-FREE"):
        failed = [o.obligation.id for o in (check(ob, run.functions) for ob in theorems.obligations(run, prop)) if not o.ok]
        assert not failed, f"{m.id}: {prop} already refutes it ({failed})"


def test_footprint_obligations_cover_every_store():
    """Each store of each kernel gets a soundness and a completeness obligation."""

    for kind, specs in theorems.default_specs().items():
        run = verifiers.get(kind).run(specs[0])
        stores = [a for a in run.result.accesses if a.kind == "store"]
        obs = verifiers.get(kind).footprint(run)
        assert len([o for o in obs if o.kind == "footprint"]) == len(stores), kind
        assert len([o for o in obs if o.kind == "coverage"]) == len(stores), kind


def test_unsupported_construct_is_an_error(tmp_path):
    src = tmp_path / "k.py"
    src.write_text("import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr, N: tl.constexpr):\n"
                   "    i = 0\n    while i < N:\n        i += 1\n")
    with pytest.raises(Unsupported, match="While"):
        Executor(str(src), "k", constexprs={"N": 4}, scalars={}, tensors={"x_ptr": None}, grid=[1]).run()


def test_no_torch_import_for_symbolic_runs():
    import subprocess
    import sys

    code = ("import sys\nfrom specbound.proofs.symexec.verifiers import draft_kv\n"
            "draft_kv.symbolic_run(draft_kv.KvSpec(2, 8, 4, 16))\n"
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules, 'imported torch/triton'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def _run_source(tmp_path, body, scalars):
    src = tmp_path / "k.py"
    src.write_text("import triton\nimport triton.language as tl\n\n@triton.jit\n"
                   "def k(out_ptr, x, N: tl.constexpr):\n" + body)
    out = TensorModel("out", 1, INT64, written=True)
    return Executor(str(src), "k", constexprs={"N": 8}, scalars=scalars, tensors={"out_ptr": out}, grid=[1]).run()


def test_one_hot_selection_is_checked_lane_by_lane(tmp_path):
    """A one-hot sum is as wide as the value it selects: the executor asks for that value to
    fit on every selectable lane (one obligation, not one per nested selection), and a value
    that can wrap is refuted."""
    import z3

    x = z3.Int("x")
    res = _run_source(tmp_path, "    u = tl.arange(0, N)\n    g = tl.sum(tl.where(u == 3, x + u, 0), axis=0)\n"
                                "    tl.store(out_ptr + 0, g.to(tl.int64))\n", {"x": V(x, (), INT32)})
    sel = [o for o in res.obligations if o.kind == "wrap" and "one-hot" in o.note]
    assert len(sel) == 1
    hyps = {**lane_range(sel[0].shape), **dict(sel[0].path), "x_int32": z3.And(x >= -2**31, x < 2**31)}
    with pytest.raises(core.Refuted):
        core.check("wraps", sel[0].goal, hyps=hyps)
    core.check("fits", sel[0].goal, hyps={**hyps, "x_small": z3.And(x >= 0, x < 100)})


def test_definitions_are_withheld_only_for_proofs(tmp_path):
    """A defined value is first left uninterpreted: only unsat counts there.  A goal that
    needs the definition is still proved, and a false one still refuted, by the full query."""
    import z3

    a = z3.Int("a")
    ex = Executor(str(tmp_path / "none.py"), "k", constexprs={}, scalars={}, tensors={}, grid=[1])
    f = ex.define(a + 1, "succ")
    hyps = {"a_nonneg": a >= 0}
    free = check(Obligation("free", "value", 1, "", hyps, z3.Or(f > 0, f <= 0)), ex.functions)
    needs = check(Obligation("needs", "value", 1, "", hyps, f > a), ex.functions)
    false = check(Obligation("false", "value", 1, "", hyps, f > a + 1), ex.functions, witness=False)
    assert free.status == "proved" and not any("def/" in h for h in free.proof.assumptions)
    assert needs.status == "proved" and any(h.startswith("def/") for h in needs.proof.assumptions)
    assert false.status == "counterexample"


def test_run_all_reports_progress_per_specialization():
    calls = []
    out = theorems.run_all(kinds=("fill",), mutant_specs=0,
                    progress=lambda done, total, kind, sp, new, so_far, s: calls.append((done, total, kind, sp, new)))
    (done, total, kind, sp, new), = calls
    assert (done, total, kind, sp) == (1, 1, "fill", theorems.default_specs()["fill"][0])
    assert new == out and {r.id.split("[")[0] for r in new} == {
        f"KERNEL-FILL-PREFIX-{p}" for p in ("IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE", "FOOTPRINT")}


def test_witness_search_falls_back_to_a_small_box(monkeypatch):
    """When every portfolio attempt is without a verdict (here: an rlimit of 1), the witness is
    searched once more with every integer constant in [-64, 64]: a model found there is a
    model of the hypotheses; none there leaves the search without a verdict (never "vacuous")."""
    import z3

    x, y = z3.Ints("box_x box_y")
    monkeypatch.setattr(obligations, "WITNESS_PORTFOLIO", tuple((1, seed) for seed in range(4)))
    monkeypatch.setattr(obligations, "_WITNESSES", {})
    small = obligations.Obligation("box-small", "bounds", 1, "", {"h": z3.And(x * y == 12, x > 1, y > 1)}, x >= 0)
    found, reason, _h, _l = obligations._witness(small, {})
    assert reason == "" and found.model.eval(x * y).as_long() == 12
    large = obligations.Obligation("box-large", "bounds", 1, "", {"h": z3.And(x * y == 2000, x > 1000, y >= 1)}, x >= 0)
    found, reason, _h, _l = obligations._witness(large, {})
    assert found is None and reason   # outside the box: still no verdict, not "no input"
    monkeypatch.setattr(obligations, "WITNESS_BOX", 0)   # the planted bug: a box that holds no model
    monkeypatch.setattr(obligations, "_WITNESSES", {})
    found, reason, _h, _l = obligations._witness(small, {})
    assert found is None and reason


def test_executor_modules_import_downwards_only():
    """The executor's modules import only the ones listed above them in the package
    docstring's table (the import graph it documents stays true)."""
    import ast
    import pathlib

    lines = pkg.__doc__.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("====")]
    table = lines[rules[0] + 1:rules[-1]]   # the module table only, not the prose after it
    order = [line.split("``")[1] for line in table if line.startswith("``") and line.split("``")[1].isidentifier()]
    assert "values" in order and "interp" in order, order
    folder = pathlib.Path(pkg.__file__).parent
    for i, name in enumerate(order):
        tree = ast.parse((folder / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps = [node.module] if node.module else [a.name for a in node.names]
                for dep in deps:
                    if dep in order:
                        assert order.index(dep) < i, f"{name} imports {dep}, listed below it"


def test_value_types_reject_undeclared_attributes(tmp_path):
    """Values and runs have declared fields: a misspelt attribute is an error, not a new
    attribute a later ``getattr(..., None)`` would read as absent."""
    import z3

    v = V(z3.IntVal(0), (), INT32)
    t = TensorModel("t", 4, INT32)
    ex = Executor(str(tmp_path / "none.py"), "k", constexprs={}, scalars={}, tensors={}, grid=[1])
    for obj in (v, Ptr(t, v), t, Access("load", 1, t, v, True, []), ex, ex.result()):
        with pytest.raises(AttributeError):
            obj.tga = 1


def test_footprint_obligations_need_the_kernels_maps():
    """The generic runner has no default footprint: a run whose maps were not given is an error
    naming the property, never a property proved without its footprint obligations."""

    fill = verifiers.get("fill")
    run = fill.run(fill.default_specs[0])
    with pytest.raises(ValueError, match="FOOTPRINT: the kernel's footprint obligations were not given"):
        theorems.obligations(run, "FOOTPRINT")
    assert theorems.kernel_obligations(fill, run, "FOOTPRINT")



def test_a_single_node_bitpacked_tree_is_proved():
    """The GPU launch of a one-token BITPACKING tree (NODES = 1: ``1 << arange(0, 1)`` is the
    constant shift ``1 << 0``).  The executor left constant shifts to its uninterpreted
    ``shl``, whose model could put 256 in a uint8 item, so NO-WRAP failed on a kernel that
    cannot wrap there; constant shifts now have their exact value."""
    sp = next(s for s in theorems.all_specs()["tree"]
              if s.name == "BUILD-TREE-BITPACK" and s.label.startswith("NODES=1,"))
    results = {r.id.split("[")[0]: r for r in theorems.prove_kernel("tree", sp, mutants=False)}
    assert results["KERNEL-BUILD-TREE-BITPACK-NO-WRAP"].status == "proved", results["KERNEL-BUILD-TREE-BITPACK-NO-WRAP"].detail
    assert all(r.ok for r in results.values()), {k: r.detail for k, r in results.items() if not r.ok}
