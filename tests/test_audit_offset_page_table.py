"""The TRT-LLM page-table audit (`consumer.page_table[...]` for a fill given a ``seqlen_offset``)
on small sglang-shaped packages written here: a fused graph-metadata fill that tells the kernel
``cache_seqlens = seq_len + seqlen_offset`` and fills at most ``max_seq_pages`` columns, and a
backend whose target-verify offset is the graph's q width (``metadata.max_seq_len_q``).  The
width sglang 0.5.23 ships is red, one with room for the draft tokens green."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import spec
from specbound.audit.report import HOLDS_ONLY_IF, MATCHED, OVERREAD
from specbound.engines.sglang.testing import audit_rows, write_sglang_package
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.offset_page_table import check_offset_page_tables

# sglang's update_trtllm_mha_graph_metadata, reduced to its signature.
FILL = """
def update_graph_metadata(*, req_pool_indices, seq_lens, req_to_token, cache_seqlens, page_table, bs,
                          seqlen_offset, max_seq_pages, page_size):
    pass
"""

# sglang's TRTLLMHAAttnBackend, reduced: one static width for the table and the fill's clamp; the
# target-verify offset is the q width recorded at capture, decode's is 0.
BACKEND = """
import torch

from sglang.kernels.ops.attention.graph_metadata import update_graph_metadata


class ToyTrtllmBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.page_size = model_runner.page_size
        self.speculative_num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.max_num_pages = {width}

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.page_table = torch.zeros(max_bs, self.max_num_pages, dtype=torch.int32)

    def apply_graph_metadata(self, bs, req_pool_indices, seq_lens, forward_mode, metadata):
        seqlen_offset = 0
        if forward_mode.is_target_verify():
            seqlen_offset = metadata.max_seq_len_q
        update_graph_metadata(req_pool_indices=req_pool_indices, seq_lens=seq_lens, req_to_token=self.req_to_token,
                              cache_seqlens=metadata.cache_seqlens_int32, page_table=metadata.page_table, bs=bs,
                              seqlen_offset=seqlen_offset, max_seq_pages=self.max_num_pages,
                              page_size=self.page_size)
"""

CONTEXT_ONLY = "(self.max_context_len + self.page_size - 1) // self.page_size"   # sglang 0.5.23
WITH_DRAFT = "(self.max_context_len + self.speculative_num_draft_tokens + self.page_size - 1) // self.page_size"
ROUNDED_DOWN = "self.max_context_len // self.page_size"
ROW = "consumer.page_table[ToyTrtllmBackend@"


def rows(root: Path, width: str) -> list:
    write_sglang_package(root, {"kernels/ops/attention/graph_metadata.py": FILL,
                                "srt/layers/attention/toy_trtllm.py": BACKEND.replace("{width}", width)}, "0.0.0+toy")
    return audit_rows(root, check_offset_page_tables, PACKAGE)


def only(got: list):
    got = [r for r in got if r.id.startswith(ROW)]
    assert len(got) == 1, [(r.id, r.status) for r in got]
    return got[0]


def test_context_only_table_holds_only_with_room_for_the_draft_tokens(tmp_path):
    """sglang 0.5.23's TRT-LLM MHA graph table: ceil(C / P) pages, read with seq_len + n."""
    row = only(rows(tmp_path, CONTEXT_ONLY))
    assert row.status == HOLDS_ONLY_IF and "seq_len[b] + delta <= max_context_len" in row.detail
    assert "offset_page_table_columns_read" in row.check and "delta 0: matched" in row.detail
    x = row.counterexample
    assert spec.offset_page_table_columns_read(x["seq_len"], x["num_draft_tokens"], x["page_size"]) \
        > spec.cdiv(x["max_context_len"], x["page_size"])
    assert "IndexError" in row.detail and row.replay["columns_read"] > row.replay["width"]


def test_table_with_the_draft_tokens_matches(tmp_path):
    row = only(rows(tmp_path, WITH_DRAFT))
    assert row.status == MATCHED, row.detail


def test_rounded_down_table_is_read_past_even_with_room(tmp_path):
    row = only(rows(tmp_path, ROUNDED_DOWN))
    assert row.status == OVERREAD, row.detail


@pytest.mark.parametrize("offset", ["metadata.max_seq_len_q", "self.speculative_num_draft_tokens"])
def test_the_q_width_and_the_draft_count_are_the_same_offset(tmp_path, offset):
    """No alarm or silence from the spelling: the q width of the verify graph is n."""
    root = tmp_path / offset.replace(".", "_")
    got = rows(root, CONTEXT_ONLY) if offset == "metadata.max_seq_len_q" else None
    if got is None:
        write_sglang_package(root, {
            "kernels/ops/attention/graph_metadata.py": FILL,
            "srt/layers/attention/toy_trtllm.py": BACKEND.replace("{width}", CONTEXT_ONLY).replace(
                "metadata.max_seq_len_q", offset)}, "0.0.0+toy")
        got = audit_rows(root, check_offset_page_tables, PACKAGE)
    assert only(got).status == HOLDS_ONLY_IF
