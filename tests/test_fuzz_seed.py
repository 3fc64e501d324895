"""`specbound fuzz --seed S` reproduces its whole run: every property, the mutant replays and
the CUDA-graph state machine check the same cases (Hypothesis' own seeding, no example
database) and print the same report, timings aside."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest

from specbound import kernels
from specbound.fuzz import command

pytestmark = pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels compiled: no checked interpreter")

_ROW = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+\d+\s+(\w+)$")     # a summary row, without its timings
# more than one example: Hypothesis' first is the simplest one, whatever the seed
EXAMPLES = 3


def _run(tmp_path, seed: int, target: str = "all"):
    """``(exit status, JSON report, printed report)`` of one run, timings removed."""
    path = tmp_path / "report.json"
    out = io.StringIO()
    rc = command.fuzz(target=target, examples=EXAMPLES, seed=seed, profile="dev", database=str(tmp_path / "db"),
                      json_path=str(path), out=out)
    report = json.loads(path.read_text())
    for p in report["properties"]:
        del p["seconds"], p["cases_per_minute"]
    text = [_ROW.sub(r"\1 \2 \3 \4", re.sub(r" +\d+\.\d s ", " - s ", line)) for line in out.getvalue().splitlines()
            if not line.startswith("wrote ")]
    return rc, report, text


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("seed7"), 7)


def test_the_same_seed_gives_the_same_report(first, tmp_path):
    rc, report, text = first
    assert rc == 0 and report["ok"]
    names = {p["name"] for p in report["properties"]}
    assert {command.REPLAYS, command.STATEFUL} <= names and len(names) == 15
    assert report["mutant_replays"] and all(p["cases_digest"] and p["examples"] for p in report["properties"])
    again = _run(tmp_path, 7)
    assert again[1] == report
    assert again[2] == text
    assert not (tmp_path / "db").exists()          # no example database was read or written


def test_another_seed_checks_other_cases(first, tmp_path):
    """The digests see the cases: another seed changes every drawn part (the replays
    are the prover's counterexamples, the same for every seed)."""
    seen = {p["name"]: p["cases_digest"] for p in first[1]["properties"]}
    rc, report, _ = _run(tmp_path, 8, target="reference")
    assert rc == 0 and report["properties"]
    assert all(p["cases_digest"] != seen[p["name"]] for p in report["properties"])
    other = command._run_stateful(EXAMPLES, 8, derandomize=False)
    assert other.cases_digest != seen[command.STATEFUL]


def test_an_unseeded_state_machine_differs_between_runs():
    """What the old --seed did for the state machine (it seeded Python's `random`, which
    Hypothesis does not read): two runs differ, so the comparison above would turn red."""
    a, b = (command._run_stateful(EXAMPLES, None, derandomize=False) for _ in range(2))
    assert a.cases_digest != b.cases_digest


def _cli_report(tmp_path, hash_seed: int) -> dict:
    path = tmp_path / f"report-{hash_seed}.json"
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    done = subprocess.run([sys.executable, "-m", "specbound.cli", "fuzz", "--seed", "7", "--examples", "2",
                           "--json", str(path)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(path.read_text())
    for p in report["properties"]:
        del p["seconds"], p["cases_per_minute"]
    return report


def test_two_processes_with_the_same_seed_print_the_same_report(tmp_path):
    """What a user runs: the command twice, in two processes.  Python salts str hashes per
    process, so a report that shows hash() of a string (the planted kernels' file names did,
    in the mutant replays' outcomes and so in their digest) differs between them."""
    assert _cli_report(tmp_path, 1) == _cli_report(tmp_path, 2)
