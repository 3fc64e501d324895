"""``proofs/manifest.json``: the registries agree with it, the spec theorems' verdicts and
mutants match it, and each check goes red on the drift it is there for (an id renamed or
deleted in a copy of the manifest, a mutant removed from its registry, a wrong verdict, a
report whose totals differ, a stale generated table or figure)."""

from __future__ import annotations

import copy
import json

import pytest

from specbound import cli, manifest
from specbound import manifest_docs
from specbound.proofs._checks import assert_theorem_ok
from specbound.proofs import registry
from specbound.proofs.symexec import mutants, verifiers
from specbound.proofs.symexec import theorems

EXPECTED = manifest.load()


@pytest.fixture(scope="module")
def today():
    return manifest.enumerate_registries()


def test_registries_agree_with_the_manifest(today):
    assert manifest.check_registries(EXPECTED, today) == []


def test_totals_are_the_entries_counted():
    assert EXPECTED["totals"] == manifest.totals(EXPECTED)


@pytest.mark.parametrize("theorem_id", list(EXPECTED["spec_theorems"]))
def test_spec_theorem_as_the_manifest_expects(proof_results, theorem_id):
    """Every spec theorem proved, witnessed, with exactly the manifest's mutants refuted."""
    entry = EXPECTED["spec_theorems"][theorem_id]
    assert entry["verdict"] == "proved"
    assert_theorem_ok(proof_results[theorem_id], entry["mutants"])
    assert manifest.compare_results([proof_results[theorem_id]], EXPECTED) == []


def test_every_spec_theorem_run_is_in_the_manifest(proof_results):
    assert list(proof_results) == list(EXPECTED["spec_theorems"])


def test_a_renamed_or_deleted_id_in_a_copy_is_named(tmp_path, today):
    planted = copy.deepcopy(EXPECTED)
    kernel = planted["kernel_theorems"]
    tid = next(t for t, e in kernel.items() if "MUT-UNBOUNDED-WALK" in e["mutants"])
    kernel[tid]["mutants"]["MUT-WALK-UNBOUNDED"] = kernel[tid]["mutants"].pop("MUT-UNBOUNDED-WALK")
    del planted["spec_theorems"]["KV-INT32-SAFE"]
    gone = next(iter(kernel))
    kernel[gone.replace("KERNEL-", "KERNEL-OLD-")] = kernel.pop(gone)
    path = tmp_path / "manifest.json"
    manifest.dump(planted, path)
    problems = manifest.check_registries(manifest.load(path), today)
    text = "\n".join(problems)
    assert f"{tid} mutants: renamed? MUT-WALK-UNBOUNDED (manifest) -> MUT-UNBOUNDED-WALK (today)" in text
    assert "spec_theorems: new KV-INT32-SAFE (there today, not in the manifest)" in text
    assert f"kernel_theorems: renamed? {gone.replace('KERNEL-', 'KERNEL-OLD-')} (manifest) -> {gone} (today)" in text
    assert len(problems) == 3, problems


def test_a_mutant_removed_from_its_registry_is_named(monkeypatch):
    removed = verifiers.fill_prefix.MUTANTS[0]
    monkeypatch.delitem(mutants.BY_ID, removed.id)
    monkeypatch.setattr(registry, "BUILDERS", registry.BUILDERS[:-1])
    problems = manifest.check_registries(EXPECTED)
    text = "\n".join(problems)
    assert f"mutants: missing {removed.id} (in the manifest, not there today)" in text
    last = list(EXPECTED["spec_theorems"])[-1]
    assert f"spec_theorems: missing {last} (in the manifest, not there today)" in text


def test_a_kernel_property_losing_its_exemption_is_named(monkeypatch):
    monkeypatch.setattr(theorems, "WITHOUT_MUTANT", {})
    assert manifest.check_registries(EXPECTED) == ["kernel_without_mutant: missing fill/NO-WRAP (in the manifest, not there "
                                            "today)"]


def _report_from_manifest(expected):
    """A full prove report that agrees with the manifest (the shape ``registry.to_json`` writes)."""
    rows = []
    for section in ("spec_theorems", "kernel_theorems"):
        for tid, e in expected[section].items():
            muts = e["mutants"] if isinstance(e["mutants"], dict) else {m: "counterexample" for m in e["mutants"]}
            rows.append({
                "id": tid, "status": "proved", "ok": True, "seconds": 0.5,
                "witness": {"obligations": e["obligations"], "dead": e["dead"]} if "obligations" in e else {"x": 1},
                "axioms_used": {name: {"formula": "-", "reason": "-"} for name in e["axioms"]},
                "mutants": [{"id": m, "status": "refuted", "seconds": 0.1,
                             "counterexample": {} if how == "counterexample" else {"replay": how}}
                            for m, how in muts.items()]})
    refuted = sum(len(t["mutants"]) for t in rows)
    return {"theorems": rows, "summary": {"proved": len(rows), "failed": 0, "mutants_refuted": refuted,
                                              "mutants_survived": 0, "seconds": 1.0}}


def test_a_full_report_is_checked_entry_by_entry_and_by_its_totals():
    report = _report_from_manifest(EXPECTED)
    assert manifest.check_report(report, EXPECTED) == []
    planted = copy.deepcopy(report)
    th = next(t for t in planted["theorems"] if t["mutants"] and "replay" in t["mutants"][0]["counterexample"])
    th["mutants"][0]["counterexample"]["replay"] = "output" if th["mutants"][0]["counterexample"]["replay"] != "output" \
        else "oob"
    planted["theorems"][1]["status"] = "unknown"
    planted["theorems"][1]["ok"] = False
    planted["theorems"][-1]["witness"]["obligations"] += 1
    del planted["theorems"][2]
    planted["summary"]["mutants_refuted"] += 1
    text = "\n".join(manifest.check_report(planted, EXPECTED))
    assert f"{th['id']}: mutant {th['mutants'][0]['id']}" in text
    assert f"{planted['theorems'][1]['id']}: verdict unknown (not ok), the manifest expects proved" in text
    assert f"{planted['theorems'][-1]['id']}: {planted['theorems'][-1]['witness']['obligations']} obligations" in text
    assert f"report theorems: missing {report['theorems'][2]['id']}" in text
    assert "report totals: mutants_refuted" in text and "report totals: theorems" in text
    assert manifest.check_report({**report, "partial": "3/65 specializations"}, EXPECTED)[0].startswith("the report is partial")


def test_every_proved_entry_records_the_axioms_its_proof_rests_on():
    """An entry without the list would skip the comparison below."""
    for section in ("spec_theorems", "kernel_theorems"):
        for tid, e in EXPECTED[section].items():
            assert "axioms" in e, tid
    assert any("grid_is_cdiv" in e["axioms"] for e in EXPECTED["kernel_theorems"].values())
    assert all(set(e["axioms"]) <= {"prefix_zero", "prefix_step", "positions_zero", "positions_step"}
               for e in EXPECTED["spec_theorems"].values())


def test_a_new_axiom_under_a_proof_is_named():
    """An axiom is assumed, not checked: a launch contract added to a verifier (or one
    dropped) changes what a kernel theorem rests on, and the manifest says so."""
    report = _report_from_manifest(EXPECTED)
    planted = copy.deepcopy(report)
    th = next(t for t in planted["theorems"] if t["id"].startswith("KERNEL-"))
    th["axioms_used"]["stride_is_anything"] = {"formula": "True", "reason": "planted"}
    text = "\n".join(manifest.check_report(planted, EXPECTED))
    assert f"{th['id']}: rests on axioms" in text and "stride_is_anything" in text


def test_prove_fails_when_a_verdict_leaves_the_manifest(tmp_path, monkeypatch, capsys):
    planted = copy.deepcopy(EXPECTED)
    planted["spec_theorems"]["VM-WALK-BOUNDED"]["mutants"].append("MUT-NOT-REFUTED-HERE")
    path = tmp_path / "manifest.json"
    manifest.dump(planted, path)
    monkeypatch.setattr(manifest, "PATH", path)
    assert cli.main(["prove", "--only", "VM-WALK-BOUNDED"]) == 1
    assert ("FAILED manifest: VM-WALK-BOUNDED mutants: missing MUT-NOT-REFUTED-HERE"
            in capsys.readouterr().err)
    monkeypatch.setattr(manifest, "PATH", manifest.PATH.__class__(str(path) + ".absent"))
    assert cli.main(["prove", "--only", "VM-WALK-BOUNDED"]) == 1
    assert "FAILED manifest: cannot read" in capsys.readouterr().err


def test_manifest_command_names_the_difference(tmp_path, monkeypatch, capsys):
    assert cli.main(["manifest"]) == 0
    planted = copy.deepcopy(EXPECTED)
    del planted["sglang_theorems"][next(iter(planted["sglang_theorems"]))]
    path = tmp_path / "manifest.json"
    manifest.dump(planted, path)
    monkeypatch.setattr(manifest, "PATH", path)
    capsys.readouterr()
    assert cli.main(["manifest"]) == 1
    assert "sglang_theorems: new KERNEL-SGLANG-DRAFT-KV-IN-BOUNDS[" in capsys.readouterr().err
    assert cli.main(["manifest", "--write"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"summary": {}}))
    assert cli.main(["manifest", "--report", str(bad)]) == 2


# --- generated docs -----------------------------------------------------------------------------

def test_generated_docs_are_up_to_date():
    assert manifest_docs.stale(EXPECTED) == []


def test_a_stale_figure_block_or_verdict_is_named(tmp_path):
    for rel in manifest_docs.FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((manifest_docs.ROOT / rel).read_text())
    assert manifest_docs.stale(EXPECTED, root=tmp_path) == []
    doc = tmp_path / "docs/kernel-proofs.md"
    text = doc.read_text()
    # seconds come from an uncommitted report: changing one is not staleness
    row = next(ln for ln in text.splitlines() if ln.startswith("| KV | "))
    cells = row.split("|")
    cells[3] = " 99.9 "
    doc.write_text(text.replace(row, "|".join(cells)))
    assert manifest_docs.stale(EXPECTED, root=tmp_path) == []
    # a figure, a mutant's replay verdict and an expected verdict are
    readme = tmp_path / "README.md"
    count = EXPECTED["totals"]["kernel_theorems"]
    figure = "<!-- figure:kernel-theorems -->{}<"
    assert figure.format(count) in readme.read_text()
    readme.write_text(readme.read_text().replace(figure.format(count), figure.format(count + 1)))
    planted = copy.deepcopy(EXPECTED)
    tid = next(iter(planted["kernel_theorems"]))
    planted["kernel_theorems"][tid]["verdict"] = "unknown"
    problems = manifest_docs.stale(planted, root=tmp_path)
    assert any(f"README.md: figure kernel-theorems reads '{count + 1}'" in p for p in problems), problems
    assert any("docs/kernel-proofs.md: block kernel-specializations is stale" in p for p in problems), problems
    doc.write_text(text.replace("| oob |", "| race |", 1))
    assert any("block kernel-mutants is stale" in p for p in manifest_docs.stale(EXPECTED, root=tmp_path))
    doc.write_text(text.replace("<!-- end generated:kernel-without-mutant -->", ""))
    assert manifest_docs.stale(EXPECTED, root=tmp_path) != []
    readme.write_text("no markers\n")
    assert "README.md: no generated blocks or figures (markers removed?)" in manifest_docs.stale(EXPECTED, root=tmp_path)
    readme.unlink()
    assert any(p.startswith("README.md: not found under") for p in manifest_docs.stale(EXPECTED, root=tmp_path))


def test_docs_are_regenerated_from_the_manifest_and_a_report(tmp_path):
    """``specbound docs``: the blocks and figures from the manifest, the seconds from a report
    (or kept from the file), and the result passes the check."""
    for rel in manifest_docs.FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((manifest_docs.ROOT / rel).read_text())
    report = _report_from_manifest(EXPECTED)
    assert manifest_docs.write(EXPECTED, report, root=tmp_path) == ["docs/kernel-proofs.md"]
    text = (tmp_path / "docs/kernel-proofs.md").read_text()
    assert manifest_docs.stale(EXPECTED, root=tmp_path) == []
    assert "| 0.5 | 0.5 |" in text
    assert manifest_docs.write(EXPECTED, None, root=tmp_path) == []       # without a report the seconds stay


def test_recording_sglang_verdicts_names_what_is_not_proved():
    """record_sglang: a result's verdict replaces the entry's, an id without a result keeps its
    previous verdict, a failed one is named; the totals follow."""
    from types import SimpleNamespace

    current = manifest.load()
    first, second = list(current["sglang_theorems"])[:2]
    result = lambda tid, ok: SimpleNamespace(id=tid, status="proved" if ok else "counterexample", ok=ok, mutants=[],
                                             axioms_used=set(), witness={})
    written, problems = manifest.record_sglang([result(first, True)], copy.deepcopy(current))
    assert problems == [] and written["sglang_theorems"] == current["sglang_theorems"]
    written, problems = manifest.record_sglang([result(first, False)], copy.deepcopy(current))
    assert written["sglang_theorems"][first]["verdict"] != "proved"
    assert written["sglang_theorems"][second]["verdict"] == "proved"
    assert problems == [f"{first}: {written['sglang_theorems'][first]['verdict']}"]
    emptied = {**copy.deepcopy(current), "sglang_theorems": {}}
    _written, problems = manifest.record_sglang([], emptied)
    assert len(problems) == len(current["sglang_theorems"]) and all(p.endswith(": not run") for p in problems)


def test_a_figure_holding_a_less_than_sign_is_read():
    """A percent such as ``<0.1%`` is a figure's value (a pattern stopping at ``<`` skipped it,
    so it was never checked nor regenerated)."""
    text = "a <!-- figure:spec-theorems --><0.1%<!-- /figure --> b <!-- figure:spec-mutants -->3<!-- /figure -->"
    assert [(m["name"], m["value"]) for m in manifest_docs.FIGURE.finditer(text)] == \
        [("spec-theorems", "<0.1%"), ("spec-mutants", "3")]
