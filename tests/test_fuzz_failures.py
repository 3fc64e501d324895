"""A failing property is a finding, whatever it raises: the run goes on to the summary, the
replays and the state machine, and exits 1 (exit 2 is for bad command lines only)."""

from __future__ import annotations

import io
import json
import shlex

import pytest

from specbound import cli, kernels
from specbound.fuzz import command, replay
from specbound.fuzz import properties
from specbound.spec import SpecArgumentError

needs_interpreter = pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels compiled: no checked interpreter")


def _planted(monkeypatch, name, check):
    monkeypatch.setattr(properties, "PROPERTIES", tuple(
        properties.Property(p.name, p.target, p.cost, p.strategy, check, p.doc, p.examples) if p.name == name else p
        for p in properties.PROPERTIES))


@pytest.mark.parametrize("error", [SpecArgumentError("seq_lens", "planted refusal"),
                                   IndexError("index 11 is out of bounds for dimension 0 with size 11")])
def test_any_exception_in_a_property_is_its_failure_and_the_summary_prints(monkeypatch, tmp_path, error):
    def broken(case):
        if case.bs >= 1:
            raise error
    _planted(monkeypatch, "tree.semantics.reference", broken)
    out = io.StringIO()
    rc = command.fuzz(target="reference", examples=20, profile="ci", json_path=str(tmp_path / "r.json"), out=out)
    assert rc == 1
    text = out.getvalue()
    assert "cases/min" in text                                  # the summary table
    assert f"FAILED tree.semantics.reference: {type(error).__name__}" in text
    assert "raised at" in text and "replay: specbound fuzz --property" in text
    report = json.loads((tmp_path / "r.json").read_text())
    assert {p["name"] for p in report["properties"]} == {p.name for p in properties.select("reference")}
    failed = [p for p in report["properties"] if p["failures"]]
    assert [p["name"] for p in failed] == ["tree.semantics.reference"] and len(failed[0]["case"]["seq_lens"]) == 1
    # the replay command reproduces it, with exit 1 (a finding), not 2 (a usage error)
    assert cli.main(shlex.split(failed[0]["replay_command"])[1:]) == 1


def test_a_crash_outside_the_check_is_a_failure_too(monkeypatch):
    """A strategy that cannot be built, replays that raise: failures, and the run goes on."""
    def no_strategy():
        raise IndexError("planted: the strategy cannot be built")
    monkeypatch.setattr(properties, "PROPERTIES", tuple(
        properties.Property(p.name, p.target, p.cost, no_strategy if p.name == "kv.semantics.reference" else p.strategy,
                   p.check, p.doc, p.examples) for p in properties.PROPERTIES))
    out = io.StringIO()
    assert command.fuzz(target="reference", examples=3, profile="ci", out=out) == 1
    assert "FAILED kv.semantics.reference: could not run: IndexError: planted" in out.getvalue()
    assert "kv.footprint.reference" in out.getvalue().split("cases/min")[1]    # later properties still ran


@needs_interpreter
def test_the_state_machine_still_runs_after_failed_properties_and_replays(monkeypatch):
    _planted(monkeypatch, "kv.semantics.triton", lambda case: (_ for _ in ()).throw(KeyError("planted")))

    def replays_crash(select=None, given=None):
        raise SpecArgumentError("seq_lens_sum", "planted inside a replay")
    monkeypatch.setattr(replay, "replay_all", replays_crash)
    out = io.StringIO()
    rc = command.fuzz(target="triton", examples=1, profile="ci", out=out)
    assert rc == 1
    text = out.getvalue()
    assert "FAILED kv.semantics.triton: KeyError" in text
    assert f"FAILED {command.REPLAYS}: could not run: SpecArgumentError: seq_lens_sum: planted" in text
    table = text.split("cases/min")[1].split("FAILED")[0]
    stateful_row = next(line for line in table.splitlines() if line.startswith(command.STATEFUL))
    assert int(stateful_row.split()[1]) >= 1 and int(stateful_row.split()[2]) == 0   # it ran, and passed


@needs_interpreter
def test_a_kernel_variant_that_cannot_be_built_fails_its_replay(monkeypatch):
    from dataclasses import replace

    from specbound.proofs.symexec import mutants as kernel_mutants

    m = kernel_mutants.get("MUT-SEARCH-PAST-ROW")
    broken = replace(m.plant, replace=(("text no kernel contains", "x"),))
    monkeypatch.setitem(kernel_mutants.BY_ID, m.id, replace(m, plant=broken))
    rows = replay.replay_all(lambda th, m: m == "MUT-SEARCH-PAST-ROW")
    assert rows and all(r.status == "FAILED" and not r.ok and "cannot be built" in r.note for r in rows)


@needs_interpreter
def test_a_mutant_launch_that_faults_without_an_overrun_fails_its_replay(monkeypatch):
    """A sizing mutant is reproduced only by an out-of-bounds access: any other fault of the
    mutant's launch (here a planted failed assert) is FAILED, not read as the overrun."""
    from specbound.replay import Replay

    real = replay.checked_launch
    calls = []

    def assert_first(launch, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:     # the launch into the mutant's allocation
            return Replay("assert", "device_assert fired: planted")
        return real(launch, *args, **kwargs)
    monkeypatch.setattr(replay, "checked_launch", assert_first)
    rows = replay.replay_all(lambda th, m: (th, m) == ("VM-QLEN-IN-BOUNDS", "MUT-FITS-OFF-BY-ONE"))
    assert len(rows) == 1 and rows[0].status == "FAILED", rows[0].line()
    assert rows[0].mutant_outcome.startswith("assert: "), rows[0].line()


def test_bad_command_lines_still_exit_2(capsys):
    assert cli.main(["fuzz", "--property", "no.such.property", "--examples", "1"]) == 2
    assert cli.main(["fuzz", "--property", "tree.validation", "--replay", "{\"kind\": \"nope\"}"]) == 2
    assert "--replay" in capsys.readouterr().err


def test_a_crash_in_the_kernel_theorems_still_reports_the_others(monkeypatch, capsys):
    from specbound.proofs.symexec import theorems as kernel_theorems

    def refuted(**kw):
        raise RuntimeError("L-KV-SEGMENT-IN-ROW: refuted (planted)")
    monkeypatch.setattr(kernel_theorems, "run_all", refuted)
    kernel_id = "KERNEL-FILL-PREFIX-IN-BOUNDS[BLOCK_B=1,NODES=1,BLOCK_C=16]"
    assert cli.main(["prove", "--kernels", "--only", "CONV-KV-COPY-LOSSLESS", "--only", kernel_id]) == 1
    out, err = capsys.readouterr()
    assert "CONV-KV-COPY-LOSSLESS" in out and "1/1 proved" in out
    assert "FAILED kernel.theorems: the kernel theorems stopped: RuntimeError: L-KV-SEGMENT-IN-ROW" in err


def test_verify_goes_on_to_the_fuzz_when_the_proofs_crash(monkeypatch, capsys):
    def crash(args):
        raise SpecArgumentError("n", "planted crash inside a proof")
    ran = []
    monkeypatch.setattr(cli, "cmd_prove", crash)
    monkeypatch.setattr(command, "verify_step", lambda args, **kw: ran.append(1) or 0)
    assert cli.main(["verify", "--no-kernels", "--jobs", "1"]) == 1          # a failed verify, not a usage error (2)
    assert ran == [1] and "FAILED prove: SpecArgumentError: n: planted" in capsys.readouterr().err


def test_verify_without_the_fuzz_fails_instead_of_skipping_it(monkeypatch, capsys):
    """An installation that lacks specbound.fuzz has proved but not fuzzed: not 'verify: OK'."""
    monkeypatch.setattr(cli, "cmd_prove", lambda args: 0)
    real = cli._feature
    monkeypatch.setattr(cli, "_feature", lambda name: None if name == "specbound.fuzz.command" else real(name))
    assert cli.main(["verify", "--no-kernels", "--jobs", "1"]) == 1
    out, err = capsys.readouterr()
    assert "nothing was fuzzed" in err and "verify: FAILED" in out
