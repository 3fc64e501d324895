"""`specbound audit sglang`: against the real sglang 0.5.23 (installed, or unpacked from a local wheel),
and against fake sglang packages written here whose helpers or kernels are deliberately wrong."""

from __future__ import annotations

import glob
import json
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from specbound.audit.report import (
    CRASH, DIVERGED, ERROR, FAILING, HOLDS_ONLY_IF, MATCHED, NOT_PRESENT, OOB, OVERRUN, PROVED, REFUTED, UNGUARDED, UNKNOWN,
    UNKNOWN_SIGNATURE, render_text,
)
from specbound.engines.sglang.locate import NotInstalled, locate
from specbound.engines.sglang.audit import run_audit
from specbound.engines.sglang.testing import write_sglang_package
from specbound.cli import main

WHEELS = "/tmp/sgl/sglang-0.5.23-*.whl"


def _row(rep, row_id):
    rows = [r for r in rep.rows if r.id == row_id]
    assert rows, f"no row {row_id}: {[r.id for r in rep.rows]}"
    return rows[0]


@pytest.fixture(scope="session")
def real_sglang(tmp_path_factory) -> Path:
    """The installed sglang (CI installs 0.5.23 with --no-deps), else one unpacked from a local wheel."""
    try:
        return locate().root
    except NotInstalled:
        pass
    wheels = sorted(glob.glob(WHEELS))
    if not wheels:
        pytest.skip("sglang is not installed (pip install --no-deps sglang==0.5.23) and no wheel at " + WHEELS)
    dest = tmp_path_factory.mktemp("sglang_wheel")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(dest, [n for n in zf.namelist() if n.startswith("sglang/")
                             and n.endswith((".py", ".cuh"))])
    return dest / "sglang"


@pytest.fixture(scope="session")
def real_report(real_sglang):
    return run_audit(str(real_sglang), examples=6)


@pytest.fixture
def no_symbolic_stage(monkeypatch):
    """Skips the symbolic proofs (the slowest stage, ~35 CPU s per kernel) in a test about
    another row of a package whose kernels are sglang's own unmodified ones: those proofs run
    on the real report, and a planted kernel's refuted proof in ``test_kernel_mutant_is_caught``."""
    monkeypatch.setattr("specbound.engines.sglang.audit._symbolic", lambda rep, symbolic_all: None)


# --- the real sglang -------------------------------------------------------------------------

def _findings_outside_consumers(rep):
    return [r for r in rep.rows if r.status in FAILING and not r.id.startswith("consumer.")]


def test_real_sglang_helpers_match(real_report):
    rep = real_report
    # 0.5.23's findings are consumer rows only (test_real_sglang_consumer_findings).
    assert not _findings_outside_consumers(rep), render_text(rep)
    for row_id in ("enum.TreeMaskMode", "helper.tree_mask_numel[FULL_MASK]", "helper.tree_mask_numel[QLEN_ONLY]",
                   "helper.VerifyMask.fits[FULL_MASK]", "helper.VerifyMask.fits[QLEN_ONLY]",
                   "safety.verify_mask_reuse[FULL_MASK]", "helper.maybe_create_verify_mask",
                   "helper.draft_kv_indices_buffer_width", "helper.draft_kv_indices_buffer_width.int32_guard",
                   "helper.draft_kv_indices_used_len", "safety.kv_capacity.with_draft_room"):
        row = _row(rep, row_id)
        assert row.status == MATCHED, (row_id, row.detail)
        assert row.method == ("ast" if row_id.startswith("enum") else "z3")
    assert _row(rep, "helper.tree_mask_numel[QLEN_ONLY_BITPACKING]").status == NOT_PRESENT


def test_real_sglang_relies_on_draft_room(real_report):
    row = _row(real_report, "safety.kv_capacity.without_draft_room")
    assert row.status == UNGUARDED
    cex = row.counterexample
    # The counterexample has a request without room: S + num_seqs*steps > num_seqs*C.
    assert cex["S"] + cex["num_seqs"] * cex["steps"] > cex["num_seqs"] * cex["C"]
    probe = _row(real_report, "kernel.draft_kv_indices[no_draft_room]")
    assert probe.status == UNGUARDED and "out-of-bounds store" in probe.detail


def test_real_sglang_output_reads_summary_first_with_each_unguarded_conditions_evidence(real_report):
    """0.5.23 as a person reads it: the summary first, each unguarded condition on its sglang file and
    line with the sanitizer / interpreter report under it, never a plain OK, --strict fails, and
    the SARIF log has one warning per unguarded condition."""
    from specbound.audit.report import finding_line
    from specbound.audit.sarif import to_sarif

    rep = real_report
    lines = render_text(rep).splitlines()
    findings = [r for r in rep.rows if r.status in FAILING]
    assert lines[0].startswith(f"summary: findings: {len(findings)}, unguarded conditions: ")
    # the findings on 0.5.23 are the consumer rows (pages read past the page table, the custom
    # mask and verify kv-index buffers): test_real_sglang_consumer_findings pins them
    unguarded = [r for r in rep.rows if r.status == UNGUARDED]
    assert len(unguarded) >= 10
    for row in unguarded:
        i = lines.index(finding_line(row))
        assert i < lines.index("All checks:") and lines[i + 1].startswith("    check:")
        end = next(j for j in range(i + 1, len(lines)) if not lines[j].startswith(" "))
        assert any(line.startswith("    evidence: ") for line in lines[i + 1:end]), lines[i:end]
    text = "\n".join(lines)
    cuda = any(r.id.startswith("kernel.build_tree[cuda") for r in unguarded)   # needs g++ with ASan/UBSan
    for report_words in ("out-of-bounds load", "out-of-bounds store") + (
            ("AddressSanitizer", "UndefinedBehaviorSanitizer") if cuda else ()):
        assert report_words in text.split("All checks:")[0], report_words
    assert findings and all(r.id.startswith("consumer.") for r in findings), [r.id for r in findings]
    assert rep.verdict()[1].startswith(f"{len(findings)} findings within sglang's contract; ")
    assert "unguarded conditions with evidence" in rep.verdict()[1]
    assert rep.exit_code() == 1 and rep.exit_code(strict=True) == 1
    results = to_sarif(rep, "test")["runs"][0]["results"]
    assert sorted(r["properties"]["row"] for r in results) == sorted(r.id for r in [*unguarded, *findings])


def test_real_sglang_kernels(real_report):
    for row_id in ("kernel.build_tree[valid]", "kernel.draft_kv_indices"):
        row = _row(real_report, row_id)
        assert row.status == MATCHED, (row_id, row.detail, row.replay)
        assert row.method.startswith("fuzz")
    mal = _row(real_report, "kernel.build_tree[malformed]")
    assert mal.status == UNGUARDED and "out-of-bounds load" in mal.detail and "parent_list" in mal.detail
    assert mal.replay is not None
    kv = _row(real_report, "kernel.symbolic_proof[draft_kv]")
    assert kv.status == PROVED, kv.detail
    assert "draft_room" in kv.detail and "out-of-bounds store" in kv.detail and kv.replay
    # what the proofs rest on, read from them: draft room among the preconditions, the launch
    # contracts among the axioms
    used = kv.detail.split("preconditions used: ", 1)[1].split(";", 1)[0].split(", ")
    axioms = kv.detail.split("axioms used (launch contracts, definitions): ", 1)[1].split(";", 1)[0].split(", ")
    assert "draft_room" in used and "seq_len_le_context" in used
    assert "width_from_sizing" in axioms and "prefix_step" in axioms
    tree = _row(real_report, "kernel.symbolic_proof[tree]")
    assert tree.status == PROVED, tree.detail
    assert "well-formed" in tree.detail and "parent_list" in tree.detail and tree.replay


def test_real_sglang_buffers_are_all_matched(real_report):
    """sglang 0.5.23 sizes every kv_indices row with its width helper and every verify mask with
    tree_mask_numel: each traced allocation is proved large enough."""
    rows = [r for r in real_report.rows if r.allocation and r.id.startswith("buffer.")]
    assert len(rows) >= 10
    assert all(r.status == MATCHED for r in rows), [(r.id, r.status, r.detail[:120]) for r in rows
                                                    if r.status != MATCHED]
    ids = {r.id for r in rows}
    for cls in ("FlashInferMultiStepDraftBackend", "FlashInferMLAMultiStepDraftBackend", "TritonMultiStepDraftBackend"):
        assert f"buffer.draft_kv_indices[{cls}.cuda_graph_kv_indices]" in ids
    assert "buffer.tree_mask[TritonAttnBackend._verify_mask/FULL_MASK]" in ids
    assert not [r for r in real_report.rows if r.id.startswith("buffer.") and r.status == UNKNOWN]


def test_real_sglang_consumer_findings(real_report):
    """What sglang 0.5.23 still carries: FlashAttention's graph page table, ceil(C / P) wide, read
    with seq_len + num_draft_tokens keys; aiter's and wave's custom-mask buffers sized without the
    draft columns.  The Triton backend's copy into its VerifyMask buffer is matched."""
    rows = {r.id: r for r in real_report.rows if r.id.startswith("consumer.")}
    fa = [r for i, r in rows.items() if i.startswith("consumer.page_table[FlashAttentionBackend@")]
    assert fa and all(r.status == HOLDS_ONLY_IF for r in fa), [(r.id, r.status) for r in fa]
    assert all("seq_len[b] + delta <= max_context_len" in r.detail for r in fa)
    status = {i.split("@")[0]: r.status for i, r in rows.items() if i.startswith("consumer.custom_mask[")}
    assert status["consumer.custom_mask[AiterAttnBackend.cuda_graph_custom_mask/FULL_MASK"] == HOLDS_ONLY_IF
    assert status["consumer.custom_mask[WaveAttnBackend.cuda_graph_custom_mask/FULL_MASK"] == CRASH
    assert status["consumer.custom_mask[TritonAttnBackend._verify_mask/FULL_MASK"] == MATCHED
    assert real_report.exit_code() == 1


def test_real_sglang_verify_kv_indices(real_report):
    """FlashInfer MLA's graph kv_indices (max_bs * C) handed to the DFlash verify input, which writes
    seq_len + n entries per request: holds only with draft room, and sglang's own kernel stores past
    it at the counterexample.  Draft-step rows and subclasses that route verify elsewhere: no row."""
    rows = [r for r in real_report.rows if r.id.startswith("consumer.verify_kv_indices[")]
    assert [r.id.split("@")[0] for r in rows] == \
        ["consumer.verify_kv_indices[FlashInferMLAAttnBackend.cuda_graph_kv_indices"], [r.id for r in rows]
    row = rows[0]
    assert row.status == HOLDS_ONLY_IF and "seq_len[b] + num_draft_tokens <= max_context_len" in row.detail
    assert "max_bs * self.max_context_len" in row.allocation
    assert "out-of-bounds store" in row.evidence and "create_flashinfer_kv_indices_triton" in row.detail


def _real_files(real_sglang, tmp_path, rels, plant=None):
    """A package of a few real sglang files (copied into tmp, never into the repo), with one
    planted replacement ``(rel, old, new)``."""
    files = {}
    for rel in rels:
        src = real_sglang / rel
        if not src.is_file():
            pytest.skip(f"this sglang has no {rel}")
        files[rel] = src.read_text()
    if plant is not None:
        rel, old, new = plant
        if old not in files[rel]:
            pytest.skip(f"this sglang spells {old!r} differently")
        files[rel] = files[rel].replace(old, new)
    return _package(tmp_path, files)


KV_FILES = ("srt/layers/attention/flashinfer_backend.py", "srt/speculative/spec_utils.py",
            "kernels/ops/speculative/cache_locs.py")
KV_HELPER_CALL = "draft_kv_indices_buffer_width(\n            max_bs, self.topk, self.max_context_len\n        )"


def test_real_backend_with_27338_planted_is_an_overrun(real_sglang, tmp_path, no_symbolic_stage):
    """sglang 0.5.23's flashinfer backend with the CUDA-graph row put back to max_bs*C (#27338)."""
    good = run_audit(str(_real_files(real_sglang, tmp_path / "good", KV_FILES)), kernels=False)
    graph = "buffer.draft_kv_indices[FlashInferMultiStepDraftBackend.cuda_graph_kv_indices]"
    assert _row(good, graph).status == MATCHED
    pkg = _real_files(real_sglang, tmp_path / "bad", KV_FILES,
                      ("srt/layers/attention/flashinfer_backend.py", KV_HELPER_CALL, "(max_bs * self.max_context_len)"))
    rep = run_audit(str(pkg), examples=1)
    row = _row(rep, graph)
    assert row.status == OVERRUN and row.counterexample["topk"] >= 2
    assert "out-of-bounds store" in row.detail and "cache_locs.py" in row.detail   # sglang's own kernel
    assert rep.exit_code() == 1


MASK_FILES = ("srt/layers/attention/triton_backend.py", "srt/layers/attention/verify_mask.py",
              "srt/speculative/eagle_utils.py", "srt/speculative/eagle_worker_common.py",
              "kernels/ops/speculative/spec_tree.py")


def test_real_verify_mask_with_29450_planted_holds_only_with_draft_room(real_sglang, tmp_path, no_symbolic_stage):
    """sglang 0.5.23's tree_mask_numel with the FULL_MASK draft-token term dropped (#29450)."""
    pkg = _real_files(real_sglang, tmp_path, MASK_FILES,
                      ("srt/layers/attention/verify_mask.py", "per_req = num_draft_tokens * (max_context_len + "
                       "num_draft_tokens)", "per_req = num_draft_tokens * max_context_len"))
    rep = run_audit(str(pkg), examples=1)
    row = _row(rep, "buffer.tree_mask[TritonAttnBackend._verify_mask/FULL_MASK]")
    assert row.status == HOLDS_ONLY_IF and "num_draft_tokens <= max_context_len" in row.detail, row.detail
    # Replayed on sglang's own Triton tree build (0.5.23 ships one).
    assert "sgl_build_tree_kernel_efficient_triton" in row.detail and "out-of-bounds store" in row.detail
    assert _row(rep, "helper.tree_mask_numel[FULL_MASK]").status == DIVERGED


def test_audit_never_imports_sglang(real_report):
    assert not any(m == "sglang" or m.startswith("sglang.") for m in sys.modules)


def test_cli_real_sglang(real_sglang, real_report, tmp_path, capsys, monkeypatch):
    """The command line's plumbing (arguments through to the audit, the verdict, the JSON and
    Markdown outputs) on the real report, which the fixture already computed: a second audit
    of the same release would check nothing new."""
    asked = []

    def audit_once(path, **kwargs):
        asked.append((path, kwargs))
        return real_report
    monkeypatch.setattr("specbound.engines.sglang.audit.run_audit", audit_once)
    out = tmp_path / "audit.json"
    rc = main(["audit", "sglang", "--sglang-path", str(real_sglang), "--no-kernels",
               "--json", str(out), "--markdown"])
    assert [(p, k["kernels"]) for p, k in asked] == [(str(real_sglang), False)]
    assert rc == 1   # the consumer findings (test_real_sglang_consumer_findings)
    text = capsys.readouterr().out
    assert "| `helper.tree_mask_numel[FULL_MASK]` |" in text
    payload = json.loads(out.read_text())
    assert payload["summary"]["failed"] is True
    assert not [r["id"] for r in payload["rows"] if r["status"] in FAILING and not r["id"].startswith("consumer.")]
    assert {r["id"] for r in payload["rows"]} >= {"helper.draft_kv_indices_used_len", "safety.kv_capacity.with_draft_room"}


def test_cli_symbolic_all_reaches_the_symbolic_rows(monkeypatch, tmp_path, capsys):
    """``--symbolic-all`` asks the symbolic rows for every listed specialization; without it
    they prove the default one per kernel; with ``--no-kernels`` it is refused by name."""
    from specbound.engines.sglang import kernel_proofs

    asked = []
    monkeypatch.setattr(kernel_proofs, "check_kv", lambda index, report, full: asked.append(("kv", full)))
    monkeypatch.setattr(kernel_proofs, "check_tree", lambda index, report, full: asked.append(("tree", full)))
    monkeypatch.setattr("specbound.engines.sglang.audit._helpers", lambda index, rep: None)
    monkeypatch.setattr("specbound.engines.sglang.audit._buffers", lambda index, rep, replay, program: None)
    monkeypatch.setattr("specbound.engines.sglang.audit._consumers", lambda index, rep, program, replay: None)
    from specbound.engines.sglang import kv_kernel, sites, tree_kernel
    from specbound.engines.sglang.cuda import check as cuda_check
    monkeypatch.setattr(tree_kernel, "check_tree_kernel", lambda *a, **k: None)
    monkeypatch.setattr(kv_kernel, "check_kv_kernel", lambda *a, **k: None)
    monkeypatch.setattr(sites, "check_launch_sites", lambda *a, **k: None)
    monkeypatch.setattr(cuda_check, "check_cuda_tree", lambda *a, **k: None)
    pkg = write_sglang_package(tmp_path, {})
    # one process: the stand-ins above are this process's (a worker would run the real stages)
    assert main(["audit", "sglang", "--sglang-path", str(pkg), "--symbolic-all", "--jobs", "1"]) == 0
    assert main(["audit", "sglang", "--sglang-path", str(pkg), "--jobs", "1"]) == 0
    assert asked == [("kv", True), ("tree", True), ("kv", False), ("tree", False)]
    assert len(kernel_proofs.kv_specs(True)) > len(kernel_proofs.kv_specs(False)) == 1
    with pytest.raises(SystemExit) as exc:
        main(["audit", "sglang", "--sglang-path", str(pkg), "--symbolic-all", "--no-kernels"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_kernel_mutant_is_caught(real_sglang, tmp_path):
    """sglang's own kv kernel with one term dropped from the segment offset (read from the real
    file into tmp, never into the repo): the audit must report it with a replay case."""
    src = (real_sglang / "kernels/ops/speculative/cache_locs.py").read_text()
    good = "topk_id * (seq_len_w + iters)"
    if good not in src:
        pytest.skip("this sglang spells the segment offset differently")
    pkg = _package(tmp_path, {"kernels/ops/speculative/cache_locs.py": src.replace(good, "topk_id * seq_len_w")})
    rep = run_audit(str(pkg), examples=6)
    row = _row(rep, "kernel.draft_kv_indices")
    assert row.status in (DIVERGED, OOB), row.detail
    assert row.replay and row.replay["topk"] > 1
    # the symbolic proof of the same kernel is refuted too, its counterexample replayed
    proof = _row(rep, "kernel.symbolic_proof[draft_kv]")
    assert proof.status == REFUTED and proof.replay, proof.detail
    assert rep.exit_code() == 1


# --- fake packages -------------------------------------------------------------------------------

MODES = """
from enum import IntEnum
class TreeMaskMode(IntEnum):
    FULL_MASK = 0
    QLEN_ONLY = 1
    QLEN_ONLY_BITPACKING = 2
"""

VERIFY_MASK = """
from __future__ import annotations
from typing import Optional
import msgspec
import torch
from sglang.kernels.ops.speculative.spec_tree import TreeMaskMode

def tree_mask_numel(mode: TreeMaskMode, bs: int, num_draft_tokens: int, max_context_len: int) -> int:
    if mode == TreeMaskMode.QLEN_ONLY:
        per_req = num_draft_tokens * num_draft_tokens
    elif mode == TreeMaskMode.FULL_MASK:
        per_req = num_draft_tokens * {full}
    else:
        raise NotImplementedError(mode)
    return bs * per_req

class VerifyMask(msgspec.Struct, frozen=True):
    buffer: torch.Tensor
    mode: TreeMaskMode
    max_bs: int
    is_read: bool = True

    def fits(self, bs: int) -> bool:
        {fits}
"""

SPEC_UTILS = """
from __future__ import annotations

def draft_kv_indices_buffer_width(num_seqs: int, topk: int, max_context_len: int) -> int:
    assert {width} < 2**31
    return {width}

def draft_kv_indices_used_len(seq_lens_sum: int, topk: int, bs: int, num_steps: int) -> int:
    return {used}
"""


def _package(root: Path, files: dict[str, str]) -> Path:
    return write_sglang_package(root, files, '0.0.0+fake')


def _fake(tmp_path, *, full="(max_context_len + num_draft_tokens)", fits="return bs <= self.max_bs",
          width="num_seqs * topk * max_context_len", used="seq_lens_sum * topk + bs * num_steps",
          drop: tuple[str, ...] = ()) -> Path:
    spec_utils = SPEC_UTILS.format(width=width, used=used)
    for name in drop:
        start = spec_utils.index(f"def {name}")
        end = spec_utils.find("\ndef ", start + 1)
        spec_utils = spec_utils[:start] + (spec_utils[end:] if end != -1 else "")
    return _package(tmp_path, {
        "kernels/ops/speculative/spec_tree.py": MODES,
        "srt/layers/attention/verify_mask.py": VERIFY_MASK.format(full=full, fits=fits),
        "srt/speculative/spec_utils.py": spec_utils,
    })


def test_fake_correct_package_matches(tmp_path):
    rep = run_audit(str(_fake(tmp_path)), kernels=False)
    assert rep.version == "0.0.0+fake"
    assert not rep.failed, render_text(rep)
    assert _row(rep, "helper.draft_kv_indices_used_len").status == MATCHED


def test_width_without_topk_is_flagged(tmp_path, capsys):
    pkg = _fake(tmp_path, width="num_seqs * max_context_len")  # sglang #27338
    rep = run_audit(str(pkg), kernels=False)
    row = _row(rep, "helper.draft_kv_indices_buffer_width")
    assert row.status == DIVERGED
    cex = row.counterexample
    assert cex["K"] >= 2 and cex["num_seqs"] >= 1
    assert cex == {"num_seqs": 1, "K": 2, "C": 1}  # the smallest one
    assert main(["audit", "sglang", "--sglang-path", str(pkg), "--no-kernels"]) == 1
    assert "diverged" in capsys.readouterr().out


def test_fits_ignoring_max_bs_for_full_mask_is_flagged(tmp_path):
    fits = "return True if self.mode == TreeMaskMode.FULL_MASK else bs <= self.max_bs"  # sglang #33119
    rep = run_audit(str(_fake(tmp_path, fits=fits)), kernels=False)
    assert _row(rep, "helper.VerifyMask.fits[FULL_MASK]").status == DIVERGED
    assert _row(rep, "helper.VerifyMask.fits[QLEN_ONLY]").status == MATCHED
    reuse = _row(rep, "safety.verify_mask_reuse[FULL_MASK]")
    assert reuse.status == DIVERGED and reuse.counterexample["bs"] > reuse.counterexample["max_bs"]


def test_mask_without_draft_term_is_flagged(tmp_path):
    rep = run_audit(str(_fake(tmp_path, full="max_context_len")), kernels=False)  # sglang #29450
    row = _row(rep, "helper.tree_mask_numel[FULL_MASK]")
    assert row.status == DIVERGED and row.counterexample["bs"] >= 1
    assert _row(rep, "safety.verify_mask_reuse[FULL_MASK]").status == DIVERGED


def test_capacity_check_one_step_short_is_flagged(tmp_path):
    # used_len that forgets the last step: the capacity proof with room no longer bounds the kernel.
    rep = run_audit(str(_fake(tmp_path, used="seq_lens_sum * topk + bs * (num_steps - 1)")), kernels=False)
    assert _row(rep, "helper.draft_kv_indices_used_len").status == DIVERGED


def test_missing_function_is_not_present(tmp_path):
    rep = run_audit(str(_fake(tmp_path, drop=("draft_kv_indices_used_len",))), kernels=False)
    assert _row(rep, "helper.draft_kv_indices_used_len").status == NOT_PRESENT
    assert _row(rep, "safety.kv_capacity").status == NOT_PRESENT
    assert rep.exit_code() == 0


def test_moved_function_is_found(tmp_path):
    pkg = _fake(tmp_path, drop=("draft_kv_indices_used_len",))
    (pkg / "srt" / "elsewhere.py").write_text(
        "def draft_kv_indices_used_len(seq_lens_sum, topk, bs, num_steps):\n"
        "    return seq_lens_sum * topk + bs * num_steps\n")
    row = _row(run_audit(str(pkg), kernels=False), "helper.draft_kv_indices_used_len")
    assert row.status == MATCHED and "srt/elsewhere.py" in row.subject and "moved" in row.subject


def test_non_symbolic_helper_falls_back_to_grid(tmp_path):
    rep = run_audit(str(_fake(tmp_path, used="int(seq_lens_sum) * topk + bs * num_steps")), kernels=False)
    row = _row(rep, "helper.draft_kv_indices_used_len")
    assert row.status == MATCHED and row.method.startswith("grid")
    rep = run_audit(str(_fake(tmp_path / "b", used="int(seq_lens_sum) + bs * num_steps")), kernels=False)
    row = _row(rep, "helper.draft_kv_indices_used_len")
    assert row.status == DIVERGED and row.method.startswith("grid") and row.counterexample["K"] >= 2


def test_unknown_kernel_signature(tmp_path):
    pkg = _fake(tmp_path)
    tree = pkg / "kernels/ops/speculative/spec_tree.py"
    tree.write_text(MODES + textwrap.dedent("""
        import triton
        import triton.language as tl

        @triton.jit
        def sgl_build_tree_kernel_efficient_triton(tree_ptr, mystery_table, topk: tl.constexpr):
            pass
    """))
    rep = run_audit(str(pkg), examples=1)
    row = _row(rep, "kernel.build_tree[valid]")
    assert row.status == UNKNOWN_SIGNATURE and "mystery_table" in row.detail
    assert _row(rep, "kernel.draft_kv_indices").status == NOT_PRESENT
    assert rep.exit_code() == 3   # the tree kernel was not checked


def test_no_sglang_at_an_explicit_path(tmp_path, capsys):
    # A typo in a CI job's --sglang-path must not pass: an error row and exit 3 (not argparse's 2).
    empty = tmp_path / "empty"
    empty.mkdir()
    rep = run_audit(str(empty))
    assert [r.status for r in rep.rows] == [ERROR]
    assert "no sglang package folder" in rep.rows[0].detail
    assert main(["audit", "sglang", "--sglang-path", str(empty)]) == 3
    assert "audit: INCOMPLETE (nothing audited" in capsys.readouterr().out


def test_no_sglang_anywhere_audits_nothing_and_does_not_pass(monkeypatch, capsys):
    """A job that forgot to install sglang: one `not present` row, and exit 3, never 0."""
    from specbound.engines.sglang import audit as audit_run

    def nowhere(path=None):
        raise NotInstalled("no sglang installed")

    monkeypatch.delenv("SPECBOUND_SGLANG_PATH", raising=False)
    monkeypatch.setattr(audit_run, "locate", nowhere)
    rep = run_audit(None, kernels=False)
    assert [r.status for r in rep.rows] == [NOT_PRESENT] and rep.exit_code() == 3
    assert main(["audit", "sglang", "--no-kernels"]) == 3
    assert "audit: INCOMPLETE (nothing audited" in capsys.readouterr().out


def test_broken_helper_source_is_a_row(tmp_path):
    pkg = _fake(tmp_path)
    (pkg / "srt/speculative/spec_utils.py").write_text("def draft_kv_indices_used_len(:\n")
    rep = run_audit(str(pkg), kernels=False)
    assert _row(rep, "helper.draft_kv_indices_used_len").status == NOT_PRESENT
