"""The draft-extend page-table audit (`consumer.page_table[.../draft_extend@...]`) on small
sglang-shaped packages written here: a worker that widens the lengths by the draft tokens
before the draft-extend pass, and a backend whose graph table that pass reads.  Each width is
shown correct, or turned red by the undersizing sglang ships; equivalent spellings raise no
alarm, and a release without the widening gets no row."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import spec
from specbound.engines.sglang.draft_extend import check_draft_extend, widening_site
from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.engines.sglang.locate import PACKAGE
from specbound.audit.report import HOLDS_ONLY_IF, MATCHED, OVERREAD, AuditReport
from specbound.engines.sglang.testing import write_sglang_package

# sglang's prepare_for_draft_extend, reduced: the forward sees the post-write length.
WORKER = """
from sglang.srt.model_executor.forward_batch_info import ForwardMode


def prepare_for_draft_extend(batch, forward_batch, num_draft_tokens):
    batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
    forward_batch.seq_lens = {lengths}
    return forward_batch
"""
WIDENED = "forward_batch.seq_lens + num_draft_tokens"

# sglang's FlashAttention backend, reduced: the draft-extend graph table, filled clamped to its
# width and read with cache_seqlens = the (widened) seq_lens.
BACKEND = """
import torch


class ToyDraftExtendBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.page_size = model_runner.page_size
        self.speculative_num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        max_num_pages = {width}
        self.draft_extend_metadata = {{
            "cache_seqlens": torch.zeros(max_bs, dtype=torch.int32),
            "page_table": torch.zeros(max_bs, max_num_pages, dtype=torch.int32),
        }}

    def replay_draft_extend(self, bs, seq_lens, page_indices, max_seq_pages):
        table = self.draft_extend_metadata["page_table"]
        table[:bs, :max_seq_pages].copy_(page_indices)
        self.draft_extend_metadata["cache_seqlens"][:bs].copy_(seq_lens)
"""

CONTEXT_ONLY = "(self.max_context_len + self.page_size - 1) // self.page_size"   # sglang 0.5.23
WITH_DRAFT = "(self.max_context_len + self.speculative_num_draft_tokens + self.page_size - 1) // self.page_size"
PREFIX = "consumer.page_table[ToyDraftExtendBackend.draft_extend_metadata[page_table]/draft_extend@"


def package(root: Path, width: str, lengths: str = WIDENED) -> Path:
    return write_sglang_package(root, {
        "srt/speculative/toy_worker.py": WORKER.replace("{lengths}", lengths),
        "srt/layers/attention/toy_backend.py": BACKEND.replace("{width}", width).replace("{{", "{").replace("}}", "}"),
    }, "0.0.0+toy")


def rows(root: Path) -> list:
    rep = AuditReport(str(root), "toy", "test", engine="sglang")
    check_draft_extend(Program(SourceIndex(root), PACKAGE), rep)
    return rep.rows


def only(root: Path):
    got = [r for r in rows(root) if r.id.startswith(PREFIX)]
    assert len(got) == 1, [(r.id, r.status, r.detail[:160]) for r in rows(root)]
    return got[0]


@pytest.mark.parametrize("width", [
    WITH_DRAFT,
    # the same bound written another way
    "(self.max_context_len + self.speculative_num_draft_tokens - 1) // self.page_size + 1",
])
def test_table_with_room_for_the_draft_tokens_is_matched(tmp_path, width):
    row = only(package(tmp_path, width))
    assert row.status == MATCHED, row.detail


def test_context_only_table_holds_only_with_room_for_the_draft_tokens(tmp_path):
    """sglang 0.5.23's FlashAttention / TRT-LLM MHA draft_extend_metadata["page_table"]."""
    row = only(package(tmp_path, CONTEXT_ONLY))
    assert row.status == HOLDS_ONLY_IF and "seq_len[b] + delta <= max_context_len" in row.detail
    assert "srt/speculative/toy_worker.py" in row.subject          # the widening is cited
    cex = row.counterexample
    s, n, p, c = cex["seq_len"], cex["num_draft_tokens"], cex["page_size"], cex["max_context_len"]
    assert s <= c - 1
    assert spec.draft_extend_columns_read(s, n, p) > spec.cdiv(c, p)
    assert "IndexError" in row.detail and row.replay["columns_read"] > row.replay["width"]


def test_rounded_down_table_is_an_overread(tmp_path):
    row = only(package(tmp_path, "self.max_context_len // self.page_size"))
    assert row.status == OVERREAD and "IndexError" in row.detail


def test_no_widening_no_row(tmp_path):
    """A draft extend whose lengths are not widened by the draft tokens is not this contract."""
    root = package(tmp_path, CONTEXT_ONLY, lengths="forward_batch.seq_lens + accept_lens")
    assert widening_site(Program(SourceIndex(root), PACKAGE)) is None
    assert rows(root) == []
