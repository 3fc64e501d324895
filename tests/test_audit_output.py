"""What a person (and GitHub code scanning) reads from `specbound audit sglang`: the summary first,
one ``file:line: status: row`` line per finding and unguarded condition with its evidence, every
line wrapped to 100 columns, progress lines while it runs, ``--strict``, ``--sarif``.

Built on small synthetic reports (and, for the progress lines, a small sglang-shaped package); the
real sglang's output is covered by tests/test_audit.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from specbound import cli
from specbound.audit import report as report_mod, statuses
from specbound.audit.report import (
    ERROR, HOLDS_ONLY_IF, MATCHED, NOT_PRESENT, OVERRUN, UNGUARDED, AuditReport, Row, location, render_markdown,
    render_text,
)
from specbound.audit.sarif import to_sarif
from specbound.engines.sglang.testing import write_sglang_package

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-2.1.0-subset.schema.json").read_text())
LOCATION_LINE = re.compile(r"^(?P<file>[\w./-]+\.\w+):(?P<line>\d+): (?P<status>[a-z ]+): (?P<row>\S.*)$")
ASAN = ("oob: AddressSanitizer use-after-poison: READ of 8 byte(s) in sglang::speculative::build_tree_efficient "
        "at kernels/jit/include/sgl_kernel/speculative/eagle.cuh:83, 0 byte(s) past the end of 'selected_index'")
LONG_REPLAY = {"parent_list": [[-1, 2, 5, 1099511627776] * 60], "seq_lens": list(range(80))}


def _unguarded() -> Row:
    return Row("kernel.build_tree[cuda, malformed.missing_parent]",
               "build_tree_efficient (kernels/jit/include/sgl_kernel/speculative/eagle.cuh:35)",
               "a parent missing from the tree: what the kernel does", "probe", UNGUARDED,
               f"{ASAN} (12 ms); replay: python -m specbound.engines.sglang.cuda.replay --kernel build_tree_efficient "
               + json.dumps(LONG_REPLAY, separators=(",", ":")),
               counterexample={"finding": "oob", "line": 83}, replay=LONG_REPLAY, evidence=ASAN)


def _finding() -> Row:
    return Row("buffer.tree_mask[TritonAttnBackend.cuda_graph_custom_mask/FULL_MASK]",
               "TritonAttnBackend (srt/layers/attention/triton_backend.py:1237) -> build_tree (srt/speculative/"
               "eagle_utils.py:213)", "the allocation holds every batch the kernel writes", "z3", HOLDS_ONLY_IF,
               "proved only with seq_len[b] + n <= C", counterexample={"bs": 1, "n": 2, "C": 1, "S": 1},
               allocation="torch.zeros(max_num_tokens * max_context_len)", size="max_bs*n*C",
               required="S*n + bs*n*n", replay_command="python -m specbound.engines.sglang.buffer_replay --case '{}'")


def synthetic(*extra: Row, unguarded: bool = True, finding: bool = True) -> AuditReport:
    rep = AuditReport("/x/site-packages/sglang", "0.0.0+fake", "test", examples=4, seed=1, seconds=1.5, engine="sglang")
    rep.add(Row("helper.tree_mask_numel[FULL_MASK]", "tree_mask_numel (srt/layers/attention/verify_mask.py:11)",
                "tree_mask_numel == spec " * 40, "z3", MATCHED, "equal on every path " * 150))
    rep.add(Row("helper.tree_mask_numel[QLEN_ONLY_BITPACKING]", "tree_mask_numel (srt/layers/attention/"
                "verify_mask.py:11)", "the BITPACKING size", "z3", NOT_PRESENT, "sglang's helper does not size it"))
    rep.add(Row("kernel.draft_kv_indices", "generate_draft_decode_kv_indices (kernels/ops/speculative/"
                "cache_locs.py:161)", "random batches", "fuzz (4 batches)", ERROR, "RuntimeError: no Triton"))
    if unguarded:
        rep.add(_unguarded())
    if finding:
        rep.add(_finding())
    for row in extra:
        rep.add(row)
    return rep


# --- the status table ------------------------------------------------------------------------------

def test_every_status_the_rows_use_is_in_the_one_table():
    named = {v for k, v in vars(report_mod).items() if k.isupper() and not k.startswith("_") and isinstance(v, str)}
    assert named <= set(statuses.BY_NAME), named - set(statuses.BY_NAME)
    assert "unchecked" not in statuses.BY_NAME and statuses.status(UNGUARDED).kind == statuses.UNGUARDED_KIND
    with pytest.raises(ValueError, match="unknown status 'unchecked'"):
        Row("x", "s", "c", "-", "unchecked")


def test_the_status_table_in_the_docs_is_the_one_in_the_code():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "audit-sglang.md").read_text()
    assert statuses.markdown() in doc, "docs/audit-sglang.md: copy statuses.markdown() between the statuses markers"


# --- the terminal ----------------------------------------------------------------------------------

def test_the_summary_comes_first_with_a_count_per_kind():
    lines = render_text(synthetic()).splitlines()
    assert lines[0].startswith("summary: findings: 1, unguarded conditions: 1, not checked: 1, warnings: 1, passed: 1")
    first_location = next(i for i, line in enumerate(lines) if LOCATION_LINE.match(line))
    assert 0 < first_location < lines.index("All checks:")


def test_each_finding_and_unguarded_condition_is_one_file_line_line_with_its_evidence():
    text = render_text(synthetic())
    lines = text.splitlines()
    assert "srt/layers/attention/triton_backend.py:1237: holds only if: buffer.tree_mask[TritonAttnBackend." \
           "cuda_graph_custom_mask/FULL_MASK]" in lines
    # the line the sanitizer names, in the subject's file (not the kernel's first line)
    assert "kernels/jit/include/sgl_kernel/speculative/eagle.cuh:83: unguarded: kernel.build_tree[cuda, " \
           "malformed.missing_parent]" in lines
    i = lines.index("kernels/jit/include/sgl_kernel/speculative/eagle.cuh:83: unguarded: kernel.build_tree[cuda, "
                    "malformed.missing_parent]")
    evidence = " ".join(line.strip() for line in lines[i + 1:i + 6])
    assert "evidence: oob: AddressSanitizer use-after-poison: READ of 8 byte(s)" in evidence
    found = [m.group("status") for m in map(LOCATION_LINE.match, lines) if m]
    assert found == [HOLDS_ONLY_IF, UNGUARDED, ERROR, NOT_PRESENT]   # findings, unguarded, not checked, warnings


def test_every_line_fits_100_columns_except_a_location_longer_than_that():
    lines = render_text(synthetic()).splitlines()
    too_wide = [line for line in lines if len(line) > 100 and not LOCATION_LINE.match(line)]
    assert not too_wide, [len(line) for line in too_wide]
    assert max(map(len, lines)) > 80   # the report's long detail and replay are there, wrapped


def test_location_prefers_the_line_the_evidence_names_in_the_subjects_file():
    row = Row("kernel.build_tree[malformed]", "sgl_build_tree (kernels/ops/speculative/spec_tree.py:53)", "c",
              "probe", UNGUARDED, "out-of-bounds load at spec_tree.py:110: parent = tl.load(")
    assert location(row) == ("kernels/ops/speculative/spec_tree.py", 110)
    row.detail = "2 checked; without a check: srt/layers/attention/aiter_backend.py:5128 common_template"
    assert location(row) == ("kernels/ops/speculative/spec_tree.py", 53)
    row.subject = "4 launch site(s)"
    assert location(row) == ("srt/layers/attention/aiter_backend.py", 5128)


# --- the verdict, --strict -------------------------------------------------------------------------

def test_unguarded_conditions_never_read_as_a_plain_ok_and_fail_with_strict():
    rep = synthetic(finding=False)
    rep.rows = [r for r in rep.rows if r.status != ERROR]
    assert rep.exit_code() == 0 and rep.exit_code(strict=True) == 1
    assert rep.verdict() == ("OK", "no finding within sglang's contract; 1 unguarded condition with evidence")
    assert rep.verdict(strict=True)[0] == "FAILED"
    clean = synthetic(unguarded=False, finding=False)
    clean.rows = [r for r in clean.rows if r.status != ERROR]
    assert clean.exit_code(strict=True) == 0 and clean.verdict() == ("OK", "no finding; every check ran")


def _cli(monkeypatch, capsys, rep: AuditReport, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr("specbound.engines.sglang.audit.run_audit", lambda *a, **k: rep)
    rc = cli.main(["audit", "sglang", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_strict_makes_an_unguarded_only_report_fail(monkeypatch, capsys):
    rep = synthetic(finding=False)
    rep.rows = [r for r in rep.rows if r.status != ERROR]
    rc, out, _ = _cli(monkeypatch, capsys, rep)
    assert rc == 0
    assert out.splitlines()[-1] == ("audit: OK (no finding within sglang's contract; 1 unguarded condition with "
                                    "evidence; 3 rows)")
    rc, out, _ = _cli(monkeypatch, capsys, rep, "--strict")
    assert rc == 1 and out.splitlines()[-1].startswith("audit: FAILED (--strict: 1 unguarded condition")


# --- SARIF -----------------------------------------------------------------------------------------

def _validate(log: dict) -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER).validate(log)


def test_sarif_is_valid_with_one_result_per_finding_and_unguarded_condition_on_its_line():
    rep = synthetic(Row("kernel.x", "k (kernels/k.py:7)", "c", "probe", OVERRUN, "too small"))
    log = to_sarif(rep, "0.1.0")
    _validate(log)
    results = log["runs"][0]["results"]
    assert [(r["properties"]["row"], r["level"]) for r in results] == [
        ("kernel.build_tree[cuda, malformed.missing_parent]", "warning"),
        ("buffer.tree_mask[TritonAttnBackend.cuda_graph_custom_mask/FULL_MASK]", "error"),
        ("kernel.x", "error")]
    where = [(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
              r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in results]
    assert where == [("kernels/jit/include/sgl_kernel/speculative/eagle.cuh", 83),
                     ("srt/layers/attention/triton_backend.py", 1237), ("kernels/k.py", 7)]
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert [rules[r["ruleIndex"]]["id"] for r in results] == [r["ruleId"] for r in results]
    assert log["runs"][0]["originalUriBaseIds"]["SGLANG_ROOT"]["uri"].endswith("/sglang/")


def test_the_report_names_only_the_engine_its_adapter_gives():
    """The audit core names no engine: the JSON block of the audited package, the header, the
    verdict, the sections and the SARIF base id all say the ``engine`` the adapter passed, and
    the status words say "the engine" (sglang's adapter passes "sglang", so its JSON keeps its key)."""
    rep = AuditReport("/x/toy", "1.0", "test", engine="toyengine")
    rep.add(Row("helper.x", "x (a.py:1)", "x == spec", "z3", UNGUARDED, "never checked"))
    js = rep.to_json()
    assert list(js)[0] == "toyengine" and js["toyengine"] == {"path": "/x/toy", "version": "1.0", "located_by": "test"}
    log = to_sarif(rep, "0.1.0")
    texts = [json.dumps(js), render_text(rep), render_markdown(rep), json.dumps(log), statuses.markdown()]
    assert not [t for t in texts if "sglang" in t.lower()]
    assert rep.verdict()[1].startswith("no finding within toyengine's contract")
    assert "toyengine relies on a condition it never checks" in texts[1]
    assert set(log["runs"][0]["originalUriBaseIds"]) == {"TOYENGINE_ROOT"}
    with pytest.raises(TypeError, match="engine"):
        AuditReport("/x/toy", "1.0", "test")


def test_the_schema_rejects_what_code_scanning_would():
    log = to_sarif(synthetic(), "0.1.0")
    for spoil in (lambda r: r.update(level="fatal"), lambda r: r.pop("message"),
                  lambda r: r["locations"][0]["physicalLocation"]["region"].update(startLine=0),
                  lambda r: r.update(severity="high")):
        bad = json.loads(json.dumps(log))
        spoil(bad["runs"][0]["results"][0])
        with pytest.raises(jsonschema.ValidationError):
            _validate(bad)


def test_sarif_written_by_the_command(monkeypatch, capsys, tmp_path):
    out = tmp_path / "audit.sarif"
    rc, _, _ = _cli(monkeypatch, capsys, synthetic(), "--sarif", str(out))
    assert rc == 1
    log = json.loads(out.read_text())
    _validate(log)
    assert len(log["runs"][0]["results"]) == 2


def test_an_unwritable_sarif_path_is_refused_before_any_work(monkeypatch, capsys, tmp_path):
    def never(*a, **k):
        raise AssertionError("the audit ran before its --sarif path was checked")
    monkeypatch.setattr("specbound.engines.sglang.audit.run_audit", never)
    path = tmp_path / "missing" / "r.sarif"
    assert cli.main(["audit", "sglang", "--sarif", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--sarif" in err[0] and str(path) in err[0]
    assert not (tmp_path / "missing").exists()


# --- progress ----------------------------------------------------------------------------------------

def test_progress_lines_name_each_group_as_it_starts_and_ends(tmp_path, capsys):
    pkg = write_sglang_package(tmp_path, {})
    assert cli.main(["audit", "sglang", "--sglang-path", str(pkg), "--no-kernels"]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines[0].startswith("audit: sglang 0.0.0+fake at ")
    assert [line.split(":")[1].strip() for line in lines[1:]] == ["[1/3] helpers", "[1/3] helpers",
                                                                  "[2/3] buffers", "[2/3] buffers",
                                                                  "[3/3] consumers", "[3/3] consumers"]
    assert lines[1].endswith("...") and re.search(r"\d+\.\d s, \d+ rows?", lines[2])
    assert "audit: [" not in out   # stdout is the report alone


def test_stages_on_worker_processes_give_the_one_job_rows_and_lines_in_order(tmp_path):
    """With ``jobs`` > 1 the stage groups run in worker processes and finish in any order; the
    report's rows and the progress lines still come in the one-job order."""
    from specbound.engines.sglang.audit import GROUPS, run_audit

    pkg = write_sglang_package(tmp_path, {})
    runs = []
    for jobs in (1, 2):
        lines: list[str] = []
        rep = run_audit(str(pkg), examples=1, jobs=jobs, progress=lines.append)
        runs.append(([(r.id, r.status, r.detail) for r in rep.rows], [line.split(":")[0] for line in lines]))
    assert runs[0] == runs[1]
    assert len(GROUPS) > 2 and len(runs[0][0]) > len(GROUPS)   # rows from several groups, more than one each


def test_a_run_of_one_group_starts_no_worker(tmp_path, monkeypatch):
    """``--no-kernels`` is one group of stages: it stays in this process (whose CPU the release
    matrix counts) whatever ``jobs`` says."""
    from specbound.engines.sglang import audit
    from specbound.engines.sglang.audit import run_audit

    def no_pool(*args, **kwargs):
        raise AssertionError("a worker pool was started")
    monkeypatch.setattr(audit, "worker_pool", no_pool)
    rep = run_audit(str(write_sglang_package(tmp_path, {})), kernels=False, jobs=2)
    assert rep.rows and not [r for r in rep.rows if r.id.endswith(".stage")]
