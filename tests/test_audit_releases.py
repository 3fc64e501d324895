"""The buffer audit on sglang's own released wheels, at the releases that shipped the bugs.

Unit tests on packages written here show each verdict can be reached; these show the audit
reaches them on the code sglang actually shipped, and that its exit status says so:

* 0.5.12.post1, the last release with sglang #27338 (the FlashInfer multi-step draft
  backend's CUDA-graph kv_indices row without the topk factor): ``overrun``, replayed as an
  out-of-bounds store on that release's own ``generate_draft_decode_kv_indices``;
* 0.5.16, the last with #29450 (the Triton backend's FULL_MASK custom mask without the
  draft-token term; #27338 fixed since 0.5.13): ``holds only if``, which is a finding;
* 0.5.17, where VerifyMask replaced the custom mask: every traced buffer ``matched``.

The wheels come from ``pip download --no-deps`` into the release matrix's cache
(``bench/audit_releases.py``; ``.ci/run`` fills it).  Without a registry to download from the
tests skip, except under CI, where a release that cannot be had is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specbound.engines.sglang.buffers import check_buffers
from specbound.audit.extract import SourceIndex
from specbound.audit.report import FAILING, HOLDS_ONLY_IF, MATCHED, OVERRUN, AuditReport
from specbound.engines.sglang.audit import run_audit

ROOT = Path(__file__).resolve().parents[1]
KV_ROW = "buffer.draft_kv_indices[FlashInferMultiStepDraftBackend.cuda_graph_kv_indices]"
MASK_ROW = "buffer.tree_mask[TritonAttnBackend.cuda_graph_custom_mask/FULL_MASK]"


def _matrix():
    spec = importlib.util.spec_from_file_location("audit_releases", ROOT / "bench" / "audit_releases.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def release(version: str) -> Path:
    """The unpacked ``sglang/`` package of a released wheel (downloaded once)."""
    matrix = _matrix()
    try:
        wheel = matrix.wheel_for(version, matrix.DEFAULT_CACHE)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, FileNotFoundError) as e:
        if os.environ.get("CI"):
            pytest.fail(f"sglang {version} could not be downloaded, so the release audit checked nothing: {e}")
        pytest.skip(f"sglang {version} not downloadable here ({e})")
    return matrix.sources_for(version, wheel, matrix.DEFAULT_CACHE.parent / (matrix.DEFAULT_CACHE.name + "-src"))


def _rows(report):
    return {r.id: r for r in report.rows}


def test_0_5_12_post1_overruns_its_kv_indices_row_and_fails():
    package = release("0.5.12.post1")
    rep = run_audit(str(package), kernels=False)
    rows = _rows(rep)
    assert rows[KV_ROW].status == OVERRUN, rows[KV_ROW].detail
    assert rows[MASK_ROW].status == HOLDS_ONLY_IF
    assert rep.exit_code() == 1
    # the counterexample, launched on this release's own kernel into a row of the size it allocates
    replayed = AuditReport(str(package), "0.5.12.post1", "test", engine="sglang")
    check_buffers(SourceIndex(package), replayed, replay=True)
    row = _rows(replayed)[KV_ROW]
    assert row.status == OVERRUN and "out-of-bounds store" in row.detail, row.detail
    assert "generate_draft_decode_kv_indices" in row.detail


def test_0_5_16_fixed_the_kv_row_but_its_custom_mask_still_fails():
    rep = run_audit(str(release("0.5.16")), kernels=False)
    rows = _rows(rep)
    assert rows[KV_ROW].status == MATCHED
    mask = rows[MASK_ROW]
    assert mask.status == HOLDS_ONLY_IF and "num_draft_tokens <= max_context_len" in mask.detail, mask.detail
    # not a warning: the buffer is too small for the spec's contract, and sglang shipped it
    assert rep.failed and rep.exit_code() == 1


def test_0_5_17_verify_mask_matches_every_buffer():
    rep = run_audit(str(release("0.5.17")), kernels=False)
    rows = _rows(rep)
    buffers = [r for r in rep.rows if r.allocation and r.id.startswith("buffer.")]
    assert buffers and all(r.status == MATCHED for r in buffers), [(r.id, r.status) for r in buffers]
    assert MASK_ROW not in rows and rows[KV_ROW].status == MATCHED
    # Its findings, if any, are consumer rows (page tables, custom-mask copies), not the two kernels' buffers.
    assert not [r.id for r in rep.rows if r.status in FAILING and not r.id.startswith("consumer.")]
