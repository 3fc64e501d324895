"""``specbound prove --jobs N``: the spec theorems on worker processes give the report one
process gives, theorem for theorem and in the same order (timings aside)."""

from __future__ import annotations

import json

from specbound import cli, verify

# cheap theorems, named out of registry order: the report keeps the order asked for
IDS = ("CT-PADDED-DRAFT-EXTEND-PREFIX", "VM-QLEN-IN-BOUNDS", "CONV-BITPACK-ITEM-MINIMAL")


def _untimed(path) -> dict:
    report = json.loads(path.read_text())
    report["summary"].pop("seconds")
    for theorem in report["theorems"]:
        theorem.pop("seconds")
        for mutant in theorem["mutants"]:
            mutant.pop("seconds")
    return report


def test_jobs_report_what_one_process_reports(tmp_path, monkeypatch):
    pools = []
    pool = verify.worker_pool
    monkeypatch.setattr(verify, "worker_pool", lambda jobs, start_method: pools.append(jobs) or pool(jobs, start_method))
    only = [arg for tid in IDS for arg in ("--only", tid)]
    assert cli.main(["prove", "--jobs", "2", *only, "--json", str(tmp_path / "two.json")]) == 0
    assert pools == [2]                          # the theorems ran on two workers
    assert cli.main(["prove", "--jobs", "1", *only, "--json", str(tmp_path / "one.json")]) == 0
    assert pools == [2]                          # one job: no pool
    two, one = _untimed(tmp_path / "two.json"), _untimed(tmp_path / "one.json")
    assert [t["id"] for t in two["theorems"]] == list(IDS)
    assert two == one
