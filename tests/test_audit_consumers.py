"""The consumer audit (`consumer.*` rows) on small sglang-shaped packages written here: a
page table filled with a clamp and read with ``seq_len + num_draft_tokens`` keys, and the
verify mask copied into a backend's CUDA-graph custom-mask buffer.  Each is shown correct and
turned red by the planted undersizing it exists for; equivalent spellings raise no alarm."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import spec
from specbound.engines.sglang.consumers import check_consumers
from specbound.audit.extract import SourceIndex
from specbound.audit.report import CRASH, HOLDS_ONLY_IF, MATCHED, OVERREAD, UNKNOWN, AuditReport
from specbound.engines.sglang.audit import run_audit
from specbound.engines.sglang.testing import write_sglang_package

FILL = """
def normal_decode_set_metadata(cache_seqlens_int32, cu_seqlens_k, page_table, req_to_token, req_pool_indices,
                               max_seq_pages, seq_lens, seq_len_delta, page_size):
    pass
"""

# sglang's FlashAttention backend, reduced: the graph table and the fill's clamp are one width;
# target verify tells the kernel seq_len + num_draft_tokens, decode seq_len.
PAGE_BACKEND = """
import torch

from sglang.kernels.ops.attention.metadata import normal_decode_set_metadata


class ToyPagedBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.page_size = model_runner.page_size
        self.speculative_num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.max_num_pages = {width}

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.page_table = torch.zeros(max_bs, self.max_num_pages, dtype=torch.int32)

    def replay_target_verify(self, metadata, req_pool_indices, seq_lens):
        self._fill(metadata, req_pool_indices, seq_lens, self.speculative_num_draft_tokens)

    def replay_decode(self, metadata, req_pool_indices, seq_lens):
        self._fill(metadata, req_pool_indices, seq_lens, 0)

    def _fill(self, metadata, req_pool_indices, seq_lens, seq_len_delta):
        normal_decode_set_metadata(metadata.cache_seqlens_int32, metadata.cu_seqlens_k, metadata.page_table,
                                   self.req_to_token, req_pool_indices, self.max_num_pages, seq_lens,
                                   seq_len_delta, self.page_size)
"""

CONTEXT_ONLY = "(self.max_context_len + self.page_size - 1) // self.page_size"   # sglang 0.5.23
WITH_DRAFT = "(self.max_context_len + self.speculative_num_draft_tokens + self.page_size - 1) // self.page_size"
ROUNDED_DOWN = "self.max_context_len // self.page_size"


def _package(root: Path, files: dict[str, str]) -> Path:
    return write_sglang_package(root, files, "0.0.0+toy")


def page_package(root: Path, width: str) -> Path:
    return _package(root, {"kernels/ops/attention/metadata.py": FILL,
                           "srt/layers/attention/toy_backend.py": PAGE_BACKEND.replace("{width}", width)})


def consumer_rows(root: Path) -> AuditReport:
    rep = AuditReport(str(root), "toy", "test", engine="sglang")
    check_consumers(SourceIndex(root), rep)
    return rep


def only(rep, prefix):
    got = [r for r in rep.rows if r.id.startswith(prefix)]
    assert len(got) == 1, [(r.id, r.status, r.detail[:120]) for r in rep.rows]
    return got[0]


PAGE = "consumer.page_table[ToyPagedBackend@"


# --- page tables read with seq_len + num_draft_tokens ---------------------------------------------

def test_context_only_page_table_holds_only_with_room_for_the_draft_tokens(tmp_path):
    """sglang 0.5.23's FlashAttention graph table: ceil(C / P) pages, read with seq_len + n."""
    row = only(consumer_rows(page_package(tmp_path, CONTEXT_ONLY)), PAGE)
    assert row.status == HOLDS_ONLY_IF and "seq_len[b] + delta <= max_context_len" in row.detail
    assert "delta 0: matched" in row.detail        # decode reads seq_len only: fine
    cex = row.counterexample
    s, n, p, c = cex["seq_len"], cex["num_draft_tokens"], cex["page_size"], cex["max_context_len"]
    assert s <= c - 1                                # an admitted request
    assert spec.page_table_columns_read(s, n, p) > spec.cdiv(c, p)   # reads past the row
    assert "IndexError" in row.detail and row.replay["columns_read"] > row.replay["width"]   # the stand-in read


def test_rounded_down_page_table_is_an_overread(tmp_path):
    rep = consumer_rows(page_package(tmp_path, ROUNDED_DOWN))
    row = only(rep, PAGE)
    assert row.status == OVERREAD
    cex = row.counterexample
    assert spec.page_table_columns_read(cex["seq_len"], cex["num_draft_tokens"], cex["page_size"]) > \
        cex["max_context_len"] // cex["page_size"]
    assert "IndexError" in row.detail
    assert rep.failed and rep.exit_code() == 1


def test_untraced_clamp_is_unknown(tmp_path):
    row = only(consumer_rows(page_package(tmp_path, "self.mystery_pages")), PAGE)
    assert row.status == UNKNOWN and "mystery_pages" in row.detail


# --- the verify mask copied into a graph custom-mask buffer ---------------------------------------

MASK_BACKEND = """
import torch


class ToyMaskBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.cuda_graph_custom_mask = torch.zeros({size}, dtype=torch.uint8)

    def replay_target_verify(self, bs, seq_lens, spec_info):
        custom_mask = self.cuda_graph_custom_mask
        custom_mask[: spec_info.custom_mask.shape[0]] = spec_info.custom_mask
        seq_mask_len = self.num_draft_tokens * (seq_lens + self.num_draft_tokens)
        return custom_mask, seq_mask_len
"""

MASK = "consumer.custom_mask[ToyMaskBackend.cuda_graph_custom_mask/FULL_MASK@"


def mask_package(root: Path, size: str) -> Path:
    return _package(root, {"srt/layers/attention/toy_backend.py": MASK_BACKEND.replace("{size}", size)})


@pytest.mark.parametrize("build, size, prefix", [
    # page tables with room for the draft tokens; the same bound written another way
    (page_package, WITH_DRAFT, PAGE),
    (page_package, "(self.max_context_len + self.speculative_num_draft_tokens - 1) // self.page_size + 1", PAGE),
    # custom masks with the draft columns; the same size written another way
    (mask_package, "max_num_tokens * (self.max_context_len + self.num_draft_tokens)", MASK),
    (mask_package, "max_bs * self.num_draft_tokens * self.max_context_len + max_num_tokens * self.num_draft_tokens",
     MASK),
])
def test_correct_sizes_are_matched(tmp_path, build, size, prefix):
    row = only(consumer_rows(build(tmp_path, size)), prefix)
    assert row.status == MATCHED, row.detail


def test_custom_mask_without_draft_columns_holds_only_if(tmp_path):
    """sglang 0.5.23's aiter graph buffer (and #29450's Triton one): max_num_tokens * C."""
    row = only(consumer_rows(mask_package(tmp_path, "max_num_tokens * self.max_context_len")), MASK)
    assert row.status == HOLDS_ONLY_IF and "seq_len[b] + num_draft_tokens <= max_context_len" in row.detail
    assert "raises RuntimeError" in row.detail   # the torch replay of the copy at the counterexample


def test_custom_mask_per_request_context_is_a_crash(tmp_path):
    """sglang 0.5.23's wave graph buffer: max_bs * C cells."""
    rep = consumer_rows(mask_package(tmp_path, "max_bs * self.max_context_len"))
    row = only(rep, MASK)
    assert row.status == CRASH and "raises RuntimeError" in row.detail
    cex = row.counterexample
    assert cex["bs"] <= cex["max_bs"]
    assert row.replay["mask_numel"] > row.replay["buffer_numel"]
    assert rep.exit_code() == 1


@pytest.mark.parametrize("folder", ["srt/hardware_backend/npu/attention", "srt/hardware_backend/musa/attention"])
def test_a_backend_under_hardware_backend_is_audited_as_one_under_layers(tmp_path, folder):
    """sglang moved its Ascend backend to srt/hardware_backend/npu/attention/ (0.5.7): the
    consumer stages must follow it there, not stop checking it."""
    _package(tmp_path, {f"{folder}/toy_backend.py": MASK_BACKEND.replace("{size}", "max_bs * self.max_context_len")})
    row = only(consumer_rows(tmp_path), MASK)
    assert row.status == CRASH and folder in row.id, row.id


def test_run_audit_reports_consumer_findings(tmp_path):
    page_package(tmp_path, ROUNDED_DOWN)
    rep = run_audit(str(tmp_path / "sglang"), kernels=False)
    assert any(r.id.startswith(PAGE) and r.status == OVERREAD for r in rep.rows)
    assert rep.exit_code() == 1
