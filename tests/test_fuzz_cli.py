"""`specbound fuzz`: arguments, report, failure output with a replay command that replays."""

from __future__ import annotations

import io
import json
import shlex

import pytest

from specbound import cli
from specbound.fuzz import command, properties
from specbound.fuzz.strategies import TreeCase


def test_bad_arguments_are_named(capsys):
    for argv, name in ((["fuzz", "--examples", "0"], "--examples"), (["fuzz", "--minutes", "-1"], "--minutes"),
                       (["fuzz", "--target", "gpu"], "--target"), (["fuzz", "--profile", "x"], "--profile")):
        with pytest.raises(SystemExit):
            cli.main(argv)
        assert name in capsys.readouterr().err
    assert cli.main(["fuzz", "--property", "nope", "--examples", "1"]) == 2
    assert "--property" in capsys.readouterr().err
    assert cli.main(["fuzz", "--property", "tree.semantics.reference", "--replay", "{}"]) == 2
    assert "--replay" in capsys.readouterr().err


def test_reference_run_writes_the_json_report(tmp_path):
    path = tmp_path / "fuzz.json"
    out = io.StringIO()
    assert command.fuzz(target="reference", examples=5, profile="ci", json_path=str(path), out=out) == 0
    report = json.loads(path.read_text())
    assert report["ok"] and {p["name"] for p in report["properties"]} == {p.name for p in properties.select("reference")}
    assert all(p["examples"] >= 5 and p["cases_per_minute"] > 0 for p in report["properties"])
    assert "cases/min" in out.getvalue()


def test_a_failure_prints_the_minimal_case_and_a_replay_command_that_replays(monkeypatch, tmp_path):
    def broken(case):
        if case.bs >= 2:
            raise properties.PropertyFailure("planted: batches of two or more fail")
    prop = properties.property_named("tree.semantics.reference")
    monkeypatch.setattr(properties, "PROPERTIES", tuple(
        properties.Property(p.name, p.target, p.cost, p.strategy, broken, p.doc) if p is prop else p for p in properties.PROPERTIES))
    out = io.StringIO()
    rc = command.fuzz(only=[prop.name], examples=50, profile="ci", json_path=str(tmp_path / "r.json"), out=out)
    assert rc == 1
    text = out.getvalue()
    assert "FAILED tree.semantics.reference" in text and "replay: specbound fuzz --property" in text
    report = json.loads((tmp_path / "r.json").read_text())
    failed = report["properties"][0]
    assert failed["failures"] == 1 and len(failed["case"]["seq_lens"]) == 2   # shrunk to the smallest
    argv = shlex.split(failed["replay_command"])[1:]
    assert cli.main(argv) == 1                                                 # replays the failure
    case = TreeCase(**failed["case"])
    assert case.bs == 2
