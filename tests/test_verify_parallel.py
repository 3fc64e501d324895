"""``specbound verify`` on several worker processes: the same checks as on one, the output in
the one-job order, and every failure inside a worker (a failed check, a crashed proof, a dead
worker) a failed verify.  The workers are forked here (``start_method="fork"``), so the plants
made with monkeypatch reach them; ``fresh_process`` keeps that fork out of a process with
other threads (specbound.pytest_plugin)."""

from __future__ import annotations

import functools
import multiprocessing
import os
import time

import pytest

from specbound import cli, verify
from specbound.fuzz import command as fuzz_command
from specbound.fuzz.runner import RunResult

pytestmark = [pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                 reason="the plants reach the workers only when they are forked"),
              pytest.mark.fresh_process]

CHEAP = ["tree.footprint.reference", "kv.semantics.reference", "verify_mask.reuse"]


def _plan(checks):
    def plan():
        profile, _, cost = REAL_PLAN()
        return profile, checks, cost
    return plan


REAL_PLAN = fuzz_command.verify_plan


def _proofs_ok():
    print("proofs ran")
    return 0


def _run(monkeypatch, checks, *, scale=0.05, jobs=2):
    monkeypatch.setattr(fuzz_command, "verify_plan", _plan(checks))
    monkeypatch.setattr(cli, "cmd_prove", lambda args: _proofs_ok())
    return verify.run_parallel(jobs=jobs, no_kernels=True, fuzz=fuzz_command, scale=scale,
                               prove=functools.partial(cli.prove_step, True, None), start_method="fork")


def _digests(out: str) -> dict:
    rows = [line.split() for line in out.splitlines()]
    return {r[0]: r[-1] for r in rows if len(r) == 6 and r[0] in CHEAP}


def test_the_workers_check_the_same_cases_as_one_process(monkeypatch, capsys):
    assert _run(monkeypatch, CHEAP) == 0
    parallel = capsys.readouterr().out
    assert fuzz_command.fuzz(profile="ci", only=CHEAP, scale=0.05) == 0
    one = capsys.readouterr().out
    assert len(_digests(one)) == len(CHEAP) and _digests(parallel) == _digests(one)


def _planted(failing=(), slow=(), dying=()):
    def run_check(check, profile, **kwargs):
        if check in dying:
            os._exit(3)
        if check in slow:
            time.sleep(1.5)
        r = RunResult(check, examples=1)
        if check in failing:
            r.failures, r.message = 1, "planted"
        return r
    return run_check


def test_a_check_failing_in_a_worker_fails_verify(monkeypatch, capsys):
    monkeypatch.setattr(fuzz_command, "run_check", _planted(failing={"kv.semantics.reference"}))
    assert _run(monkeypatch, CHEAP) == 1
    out = capsys.readouterr().out
    assert "FAILED kv.semantics.reference: planted" in out
    assert out.splitlines()[-1].startswith("verify: FAILED (proofs OK, fuzz FAILED")


def test_the_output_is_in_the_one_job_order_whatever_finishes_first(monkeypatch, capsys):
    monkeypatch.setattr(fuzz_command, "run_check", _planted(slow={CHEAP[0]}))
    assert _run(monkeypatch, CHEAP, jobs=3) == 0
    out = capsys.readouterr().out
    places = [out.index(text) for text in (verify.proofs_line(True), "proofs ran", verify.FUZZ, *CHEAP)]
    assert places == sorted(places), out


def test_a_crashed_proof_is_a_failure_and_the_fuzz_still_runs(monkeypatch, capsys):
    def crash(args):
        raise RuntimeError("planted crash inside a proof")
    monkeypatch.setattr(fuzz_command, "run_check", _planted())
    monkeypatch.setattr(fuzz_command, "verify_plan", _plan(CHEAP))
    monkeypatch.setattr(cli, "cmd_prove", crash)
    rc = verify.run_parallel(jobs=2, no_kernels=True, fuzz=fuzz_command, scale=1.0,
                             prove=functools.partial(cli.prove_step, True, None), start_method="fork")
    out, err = capsys.readouterr()
    assert rc == 1 and "FAILED prove: RuntimeError: planted crash" in err
    assert "fuzz: OK (3 checks" in out and out.splitlines()[-1].startswith("verify: FAILED (proofs FAILED, fuzz OK")


def test_a_worker_that_dies_is_a_failed_check_not_a_hang(monkeypatch, capsys):
    monkeypatch.setattr(fuzz_command, "run_check", _planted(dying={"verify_mask.reuse"}))
    assert _run(monkeypatch, CHEAP) == 1
    out = capsys.readouterr().out
    assert "FAILED verify_mask.reuse: could not run: BrokenProcessPool" in out, out


def test_jobs_is_a_positive_count(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["verify", "--jobs", "0"])
    assert stop.value.code == 2 and "--jobs must be >= 1, got 0" in capsys.readouterr().err


def test_the_replays_get_the_counterexamples_the_proofs_found(monkeypatch, capsys):
    """The spec theorems are proved once, here: the worker's mutant replays are handed their
    counterexamples (and prove nothing again)."""
    from types import SimpleNamespace as NS

    found = [NS(id="KV-CAPACITY", mutants=[NS(id="MUT-27338-MISSING-TOPK", status="refuted", counterexample={"bs": 3})])]

    def proofs(args):
        args.spec_results_to(found)
        return 0

    def run_check(check, profile, **kwargs):
        r = RunResult(check, examples=1)
        given = kwargs.get("spec_counterexamples")
        if check == fuzz_command.REPLAYS and given != [("KV-CAPACITY", "MUT-27338-MISSING-TOPK", {"bs": 3})]:
            r.failures, r.message = 1, f"the replays were given {given}"
        return r
    monkeypatch.setattr(fuzz_command, "run_check", run_check)
    monkeypatch.setattr(fuzz_command, "verify_plan", _plan([CHEAP[0], fuzz_command.REPLAYS]))
    monkeypatch.setattr(cli, "cmd_prove", proofs)
    rc = verify.run_parallel(jobs=2, no_kernels=True, fuzz=fuzz_command, scale=1.0,
                             prove=functools.partial(cli.prove_step, True, None), start_method="fork")
    assert rc == 0, capsys.readouterr().out
