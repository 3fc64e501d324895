"""The command line's plumbing: output paths checked before any work, the checkout found by the
package's location, theorem selection, refused no-op combinations, fuzz --list = --property,
one verdict line per command, --version, verify's progress and table width, the top-level help.

Work is replaced by :class:`WorkStarted` (a BaseException, so no ``except Exception`` of a
command swallows it): a check that should come first fails the test if the work began."""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path

import pytest

import specbound
from specbound import cli, manifest
from specbound.fuzz import command as fuzz_command
from specbound.proofs import registry

CHECKOUT = Path(__file__).resolve().parents[1]
VERDICT = re.compile(r"^(prove|verify|fuzz|manifest|docs|audit): (OK|FAILED|INCOMPLETE) \(.+\)$")


class WorkStarted(BaseException):
    pass


def _never(*args, **kwargs):
    raise WorkStarted("the command started its work before checking its command line")


@pytest.fixture
def no_work(monkeypatch):
    """Every command's work raises WorkStarted."""
    import specbound.engines.sglang.audit
    import specbound.fuzz.replay
    monkeypatch.setattr(registry, "run_all", _never)
    monkeypatch.setattr(cli, "_prove_spec", _never)   # the spec theorems on worker processes
    monkeypatch.setattr(fuzz_command, "fuzz", _never)
    monkeypatch.setattr(fuzz_command, "verify_step", _never)
    monkeypatch.setattr(specbound.engines.sglang.audit, "run_audit", _never)
    monkeypatch.setattr(specbound.fuzz.replay, "replay_all", _never)


def _one_line_error(capsys, *words) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and all(w in lines[0] for w in words), err
    return lines[0]


# --- output paths --------------------------------------------------------------------------------

JSON_COMMANDS = (["prove"], ["verify"], ["fuzz"], ["audit", "sglang"])


def _bad_paths(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    return {"no such directory": tmp_path / "missing" / "dir" / "r.json",
            "not a directory": a_file / "r.json",
            "is a directory": tmp_path}


@pytest.mark.parametrize("argv", JSON_COMMANDS, ids=lambda a: a[0])
def test_an_unwritable_json_path_is_refused_before_any_work(argv, tmp_path, capsys, no_work):
    for reason, path in _bad_paths(tmp_path).items():
        assert cli.main([*argv, "--json", str(path)]) == 2, reason
        _one_line_error(capsys, "--json", str(path))
        assert not (tmp_path / "missing").exists()                # nothing created


@pytest.mark.skipif(hasattr(__import__("os"), "geteuid") and __import__("os").geteuid() == 0,
                    reason="root writes into a read-only folder")
def test_a_read_only_folder_is_refused(tmp_path, capsys, no_work):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert cli.main(["prove", "--json", str(locked / "r.json")]) == 2
    _one_line_error(capsys, "--json", "writ")


def test_manifest_write_checks_the_manifest_is_writable_first(tmp_path, monkeypatch, capsys, no_work):
    report = tmp_path / "full.json"
    report.write_text(json.dumps({"theorems": []}))
    monkeypatch.setattr(manifest, "PATH", tmp_path / "missing" / "manifest.json")
    assert cli.main(["manifest", "--write", "--report", str(report)]) == 2
    _one_line_error(capsys, "--write", "manifest.json")
    assert cli.main(["manifest", "--report", str(tmp_path / "absent.json")]) == 2
    _one_line_error(capsys, "--report", "absent.json")


def test_docs_reads_its_timings_before_writing_anything(tmp_path, monkeypatch, capsys):
    from specbound import docs
    monkeypatch.setattr(docs, "render", _never)
    assert cli.main(["docs", "--timings", str(tmp_path / "absent.json")]) == 2
    _one_line_error(capsys, "--timings", "absent.json")


def test_an_unreadable_replay_case_file_is_one_line(tmp_path, capsys, no_work):
    assert cli.main(["fuzz", "--property", "tree.validation", "--replay", f"@{tmp_path / 'absent.json'}"]) == 2
    _one_line_error(capsys, "--replay", "absent.json")


def test_docs_checks_every_file_it_writes_before_rendering(monkeypatch, capsys):
    from specbound import docs, manifest_docs
    monkeypatch.setattr(docs, "render", _never)
    monkeypatch.setattr(manifest_docs, "FILES", (*manifest_docs.FILES, "no_such_folder/generated.md"))
    assert cli.main(["docs"]) == 2
    _one_line_error(capsys, "docs", "no_such_folder")
    assert not (CHECKOUT / "no_such_folder").exists()


# --- docs finds the checkout -----------------------------------------------------------------------

def test_docs_check_finds_the_checkout_from_any_directory(tmp_path, monkeypatch, capsys):
    from specbound import docs
    committed = (CHECKOUT / "docs" / "invariants.md").read_text()
    monkeypatch.setattr(docs, "render", lambda: committed)   # the real render takes ~15 s
    monkeypatch.chdir(tmp_path)
    assert cli.main(["docs", "--check"]) == 0, capsys.readouterr()
    assert not (tmp_path / "docs").exists()


def test_docs_outside_a_checkout_says_so(tmp_path, monkeypatch, capsys):
    from specbound import docs
    monkeypatch.setattr(docs, "render", lambda: "generated\n")
    installed = tmp_path / "site-packages" / "specbound"
    installed.mkdir(parents=True)
    monkeypatch.setattr(specbound, "__file__", str(installed / "__init__.py"))
    monkeypatch.chdir(tmp_path)
    for argv in (["docs", "--check"], ["docs"]):
        assert cli.main(argv) == 2, argv
        _one_line_error(capsys, "checkout")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site-packages"]    # nothing written here


# --- prove --only ----------------------------------------------------------------------------------

FILL = "KERNEL-FILL-PREFIX-{}[BLOCK_B=1,NODES=1,BLOCK_C=16]"   # a cheap, non-first specialization


def test_prove_only_takes_a_kernel_theorem_id(capsys):
    tid = FILL.format("IN-BOUNDS")
    assert cli.main(["prove", "--only", tid]) == 2
    _one_line_error(capsys, "--only", "--kernels")
    assert cli.main(["prove", "--kernels", "--only", tid, "--only", "VM-WALK-BOUNDED"]) == 0
    out, err = capsys.readouterr()
    assert "2/2 proved" in out and "NO-WRAP" not in out          # only the named theorems ran
    assert max(len(line) for line in (out + err).splitlines()) <= 100, out + err


def test_prove_only_names_the_closest_ids(capsys, no_work):
    assert cli.main(["prove", "--only", "VM-WALK-BOUNDD"]) == 2
    line = _one_line_error(capsys, "--only", "VM-WALK-BOUNDD", "VM-WALK-BOUNDED")
    assert len(line) < 400                                        # the closest, not every id
    assert cli.main(["prove", "--kernels", "--only", FILL.format("IN-BOUND")]) == 2
    _one_line_error(capsys, FILL.format("IN-BOUNDS"))


# --- options that do nothing are refused -----------------------------------------------------------

NO_OP = (
    (["prove", "--all"], "--all"),
    (["prove", "--kernels", "--all", "--only", "VM-WALK-BOUNDED"], "--all"),
    (["prove", "--kernels", "--only", "VM-WALK-BOUNDED"], "--kernels"),
    (["prove", "--explain", "VM-WALK-BOUNDED", "--kernels"], "--kernels"),
    (["docs", "--check", "--timings", "r.json"], "--timings"),
    (["fuzz", "--list", "--examples", "3"], "--list"),
    (["fuzz", "--replay", "VALID", "--property", "tree.validation", "--examples", "3"], "--replay"),
    (["fuzz", "--property", "tree.validation", "--target", "reference"], "--target"),
    (["fuzz", "--seed", "1", "--database", "db"], "--database"),
    (["fuzz", "--profile", "ci", "--database", "db"], "--database"),
    (["audit", "sglang", "--no-kernels", "--examples", "3"], "--examples"),
    (["audit", "sglang", "--no-kernels", "--seed", "3"], "--seed"),
)


@pytest.mark.parametrize("argv,option", NO_OP, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_an_option_that_does_nothing_is_refused(argv, option, capsys, no_work, monkeypatch, tmp_path):
    from specbound import docs
    monkeypatch.setattr(docs, "render", _never)
    monkeypatch.chdir(tmp_path)
    if "VALID" in argv:        # a case --replay accepts: only the extra option is wrong
        from specbound.fuzz import properties
        case = next(iter(properties.property_named("tree.validation").examples())).to_json()
        argv = [case if a == "VALID" else a for a in argv]
    assert cli.main(argv) == 2
    _one_line_error(capsys, option)
    assert list(tmp_path.iterdir()) == []


# --- fuzz --list and --property agree ----------------------------------------------------------------

def test_every_listed_fuzz_check_is_accepted_by_property(capsys, monkeypatch):
    assert cli.main(["fuzz", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert "replay.mutants" in listed and "stateful.cuda_graph" in listed
    ran = []

    def record(*args, **kwargs):
        ran.append(kwargs)
        return 0
    monkeypatch.setattr(fuzz_command, "fuzz", record)
    for name in listed:
        assert cli.main(["fuzz", "--property", name, "--examples", "1"]) == 0, capsys.readouterr().err
    assert [kw["only"] for kw in ran] == [[n] for n in listed]
    checks = fuzz_command.select_checks(["replay.mutants", "stateful.cuda_graph"], "all")
    assert checks == ([], ["replay.mutants", "stateful.cuda_graph"])
    monkeypatch.setattr(fuzz_command, "fuzz", _never)
    assert cli.main(["fuzz", "--property", "no.such.check"]) == 2
    assert "stateful.cuda_graph" in _one_line_error(capsys, "--property", "no.such.check")


# --- one verdict line --------------------------------------------------------------------------------

def _last_line(capsys) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


def test_every_command_ends_with_one_verdict_line(capsys, monkeypatch, tmp_path):
    assert cli.main(["prove", "--only", "VM-WALK-BOUNDED"]) == 0
    assert VERDICT.match(_last_line(capsys))
    assert cli.main(["fuzz", "--target", "reference", "--examples", "1", "--profile", "ci"]) == 0
    line = _last_line(capsys)
    assert VERDICT.match(line) and line.startswith("fuzz: OK (") and "examples" in line, line
    assert cli.main(["manifest"]) == 0
    assert VERDICT.match(_last_line(capsys))
    assert cli.main(["audit", "sglang", "--sglang-path", str(tmp_path), "--no-kernels"]) == 3
    line = _last_line(capsys)
    assert VERDICT.match(line) and line.startswith("audit: INCOMPLETE ("), line
    monkeypatch.setattr(cli, "cmd_prove", lambda args: 0)
    monkeypatch.setattr(fuzz_command, "verify_step", lambda args, **kw: 1)
    assert cli.main(["verify", "--jobs", "1"]) == 1
    line = _last_line(capsys)
    assert VERDICT.match(line) and line.startswith("verify: FAILED ("), line


def test_prove_verdict_counts_the_theorems(capsys):
    assert cli.main(["prove", "--only", "VM-WALK-BOUNDED"]) == 0
    line = _last_line(capsys)
    assert VERDICT.match(line) and line.startswith("prove: OK (1/1 proved"), line


# --- version, help, verify's progress and width -------------------------------------------------------

def test_version_comes_from_the_installed_metadata(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"specbound {importlib.metadata.version('specbound')}"


def test_top_level_help_is_for_users(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "register(subparsers)" not in out and "verify_step" not in out
    assert "exit status" in out.lower() and "specbound verify" in out


def test_verify_announces_each_phase_before_it_runs(capsys, monkeypatch):
    seen = {}

    def prove(only=None):
        seen["prove"] = capsys.readouterr().out
        return [], 0.0

    def prove_kernels(**kwargs):
        seen["kernels"] = capsys.readouterr().out
        return []

    def fuzz_step(args, spec_results=None):
        seen["fuzz"] = capsys.readouterr().out
        return 0
    from specbound.proofs.symexec import theorems as kernel_theorems
    monkeypatch.setattr(registry, "run_all", prove)
    monkeypatch.setattr(kernel_theorems, "run_all", prove_kernels)
    monkeypatch.setattr(fuzz_command, "verify_step", fuzz_step)
    monkeypatch.setattr(cli, "_manifest_problems", lambda *a: [])
    cli.main(["verify", "--jobs", "1"])
    seen["end"] = capsys.readouterr().out
    assert "spec theorems" in seen["prove"], seen
    assert "kernel theorems" in seen["kernels"], seen
    assert "fuzz" in seen["fuzz"], seen
    assert max(len(line) for text in seen.values() for line in text.splitlines()) <= 100, seen


def test_the_prove_table_fits_100_columns(capsys):
    assert cli.main(["prove", "--only", "VM-WALK-BOUNDED", "--only", "KV-CAPACITY"]) in (0, 1)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100, out


def test_the_kernel_rows_fit_100_columns():
    from specbound.report import prove_table
    from specbound.proofs.theorem import TheoremResult
    ids = [*manifest.load()["kernel_theorems"]][:40]
    rows = [TheoremResult(id=i, statement="s", family="kernel symexec", status="failed", seconds=1.5, rlimit=10**9,
                          rlimit_limit=0, hypotheses_used=["h"] * 30, lemmas_cited=[], preconditions=[],
                          witness={}, mutants=[]) for i in ids]
    text = prove_table(rows)
    assert max(len(line) for line in text.splitlines()) <= 100, text
    for i in ids:                                  # every id can be read back from the table
        name, label = i.split("[", 1)
        assert f"[{label}" in text and name.rsplit("-", 1)[-1] in text


def test_prove_explain_says_the_claim_in_words(capsys, no_work):
    assert cli.main(["prove", "--explain", "VM-WALK-BOUNDED", "--explain", FILL.format("NO-WRAP")]) == 0
    out = capsys.readouterr().out
    assert "the walk runs at most D iterations" in out and "MUT-UNBOUNDED-WALK" in out
    assert "no int32/int64 value wraps" in out and "FILL-PREFIX (fill)" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert cli.main(["prove", "--explain", "VM-WALK"]) == 2
    _one_line_error(capsys, "--explain", "VM-WALK-BOUNDED")
