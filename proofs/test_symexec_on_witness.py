"""The kernel theorems' last line of defence (proofs/symexec/on_witness.py): every proof is
evaluated on the theorem's closed witness, so a core that issued a false proof is caught and
the theorem reported unsound; a goal with no truth value there fails the theorem; a real
theorem passes, with the proofs it checked counted."""

from __future__ import annotations

import z3

from specbound.proofs import core
from specbound.proofs.symexec import closure, on_witness, theorems, verifiers
from specbound.proofs.symexec.obligations import check
from specbound.engines.sglang import kernel_proofs
from specbound.audit.report import ERROR, AuditReport
from specbound.audit.extract import SourceIndex
from specbound.engines.sglang import tree_model as sglang_tree
from specbound import cli

PROP = "NO-TRUNCATION"   # the fill kernel's smallest property: a few obligations, quick


def _forging(monkeypatch, target: str):
    """A core whose check issues whatever it is asked for when the query is the obligation
    ``target`` (the planted soundness bug, in a controlled place); every other check is real."""
    real = core.check

    def check_(name, goal, *, hyps=None, by=(), rlimit=core.DEFAULT_RLIMIT, seed=0):
        if name == target or name.startswith(target + "/"):
            return core._issue(name, dict(hyps or {}), goal, {}, (), "lemma", 0.0, 0)
        return real(name, goal, hyps=hyps, by=by, rlimit=rlimit, seed=seed)
    monkeypatch.setattr(core, "check", check_)


def _fill_theorem(plant=None):
    """The fill kernel's NO-TRUNCATION theorem; ``plant(obligations)`` edits the obligations
    before they are checked."""
    verifier = verifiers.get("fill")
    run = verifier.run(verifier.default_specs[0])
    obs = theorems.kernel_obligations(verifier, run, PROP)
    if plant is not None:
        plant(obs)
    outcomes = [check(ob, run.functions) for ob in obs]
    return outcomes, theorems.theorem_result(run, PROP, outcomes, 0.0, [])


def test_a_real_theorem_passes_and_counts_the_proofs_it_checked():
    outcomes, result = _fill_theorem()
    assert result.status == "proved" and result.ok, result.detail
    assert result.witness["checked_on_witness"] >= 1
    proofs = sum(o.proof is not None for o in outcomes)
    assert result.witness["checked_on_witness"] + result.witness["premises_off_witness"] == proofs


def test_a_false_proof_from_the_core_makes_the_theorem_unsound(monkeypatch):
    """The first obligation's goal is negated (false wherever its premises hold, since the
    real goal is proved) and the core is made to prove it anyway: every obligation is
    "proved" and witnessed, but the goal is False on the closed witness."""
    target = {}

    def plant(obs):
        ob = obs[0]
        ob.goal = z3.Not(ob.goal)
        target["id"] = ob.id
    verifier = verifiers.get("fill")
    first = theorems.kernel_obligations(verifier, verifier.run(verifier.default_specs[0]), PROP)[0].id
    _forging(monkeypatch, first)
    outcomes, result = _fill_theorem(plant)
    assert target["id"] == first
    assert all(o.status == "proved" and o.witness is not None for o in outcomes)   # what would have passed
    assert result.status == "unsound" and not result.ok, (result.status, result.detail)
    assert result.detail.startswith("UNSOUND: the trusted core issued a false proof") and first in result.detail


def test_a_proof_with_no_truth_value_on_the_witness_fails_the_theorem(monkeypatch):
    """A goal whose value on the witness is a division by zero (which Z3 leaves uninterpreted)
    cannot be evaluated: the theorem fails, saying so, rather than passing unchecked."""
    verifier = verifiers.get("fill")
    first = theorems.kernel_obligations(verifier, verifier.run(verifier.default_specs[0]), PROP)[0].id

    def plant(obs):
        obs[0].goal = z3.IntVal(7) / z3.IntVal(0) == 7
    _forging(monkeypatch, first)
    _outcomes, result = _fill_theorem(plant)
    assert result.status == "failed" and not result.ok, (result.status, result.detail)
    assert "could not evaluate" in result.detail and "no truth value" in result.detail, result.detail


def test_the_sglang_audit_row_of_an_unsound_theorem_is_an_error_naming_it(monkeypatch, sglang_root):
    """``specbound audit sglang`` proves sglang's tree kernel through the same theorems: with
    the core forging one false proof (the first RACE-FREE obligation's goal negated) the
    kernel row is an error that says the core is unsound, not a proof and not a refutation
    of sglang's kernel."""
    from pathlib import Path

    real = sglang_tree.obligations
    planted = {}

    def obligations(run, prop):
        obs = real(run, prop)
        if prop == "RACE-FREE":
            obs[0].goal = z3.Not(obs[0].goal)
            planted["id"] = obs[0].id
            _forging(monkeypatch, obs[0].id)
        return obs
    monkeypatch.setattr(sglang_tree, "obligations", obligations)
    report = AuditReport(str(sglang_root), None, None, engine="sglang")
    kernel_proofs.check_tree(SourceIndex(Path(sglang_root)), report, full=False)
    (row,) = [r for r in report.rows if r.id == kernel_proofs.TREE_ROW]
    assert planted and row.status == ERROR, (row.status, row.detail)
    assert "RACE-FREE" in row.detail and "unsound (UNSOUND: the trusted core issued a false proof" in row.detail, \
        row.detail


def test_a_false_proof_about_another_program_of_the_witness_launch_is_caught(monkeypatch):
    """The closed witness's model speaks of one program and lane; a proof about an access that
    is inactive there is evaluated at a program of the same launch where its premises hold
    (the kv kernel's NO-WRAP: most of its obligations are).  Negated and forged, it is caught
    there too."""
    verifier = verifiers.get("kv")
    sp = verifier.default_specs[0]

    def theorem(plant=None):
        run = verifier.run(sp)
        obs = theorems.kernel_obligations(verifier, run, "NO-WRAP")
        if plant is not None:
            plant(obs)
        outcomes = [check(ob, run.functions) for ob in obs]
        return run, outcomes, theorems.theorem_result(run, "NO-WRAP", outcomes, 0.0, [])

    run, outcomes, result = theorem()
    closed, _note = closure.theorem_witness(run, outcomes)
    seen = on_witness.evaluate("test", run, closed, outcomes)
    assert result.ok and seen.elsewhere and not seen.false, (result.detail, seen)
    target = seen.elsewhere[0]

    def plant(obs):
        ob = next(ob for ob in obs if ob.id == target)
        ob.goal = z3.Not(ob.goal)
    _forging(monkeypatch, target)
    _run, _outcomes, result = theorem(plant)
    assert result.status == "unsound" and target in result.detail, (result.status, result.detail)


def test_prove_exits_1_saying_the_core_is_unsound(monkeypatch, capsys):
    """``specbound prove --kernels --only <a kernel theorem>`` with the core forging one false
    proof: exit status 1, and stderr says the core issued a false proof."""
    verifier = verifiers.get("fill")
    sp = verifier.default_specs[0]
    tid = f"KERNEL-{verifier.run(sp).name}-{PROP}[{sp.label}]"
    real = theorems.kernel_obligations

    def obligations(verifier_, run, prop):
        obs = real(verifier_, run, prop)
        if prop == PROP:
            obs[0].goal = z3.Not(obs[0].goal)
            _forging(monkeypatch, obs[0].id)
        return obs
    monkeypatch.setattr(theorems, "kernel_obligations", obligations)
    assert cli.main(["prove", "--kernels", "--only", tid]) == 1
    err = capsys.readouterr().err
    assert f"FAILED {tid}: unsound UNSOUND: the trusted core issued a false proof" in err, err
