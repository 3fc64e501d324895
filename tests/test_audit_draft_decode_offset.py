"""The draft-decode page-table audit (`consumer.page_table_draft_decode[...]`) on small
sglang-shaped packages written here: a multi-step draft backend builds one step backend per
step ``i in range(num_steps - 1)`` with ``speculative_step_id=i``, and each step's graph
metadata fill is given the offset ``speculative_step_id + 1`` (TRT-LLM MHA's
``seqlen_offset``, FlashAttention's ``seq_len_delta``).  The width sglang 0.5.23 ships is red,
one with room for the draft steps green."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import spec
from specbound.audit.report import HOLDS_ONLY_IF, MATCHED, OVERREAD
from specbound.engines.sglang.draft_decode_offset import check_draft_decode_offsets
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.testing import audit_rows, write_sglang_package

# sglang's update_trtllm_mha_graph_metadata and normal_decode_set_metadata, reduced to their signatures.
FILLS = """
def update_graph_metadata(*, req_pool_indices, seq_lens, req_to_token, cache_seqlens, page_table, bs,
                          seqlen_offset, max_seq_pages, page_size):
    pass


def decode_set_metadata(cache_seqlens, page_table, req_to_token, req_pool_indices, seq_lens,
                        seq_len_delta, max_seq_pages, page_size):
    pass
"""

# sglang's TRTLLMHAAttnBackend and its multi-step draft backend, reduced: one static width for the
# draft-decode table and the fill's clamp; draft decode's offset is the step + 1, target verify's n.
BACKEND = """
import torch

from sglang.kernels.ops.attention.graph_metadata import {fill}


class ToyDraftBackend:
    def __init__(self, model_runner, speculative_step_id=0):
        self.max_context_len = model_runner.model_config.context_len
        self.page_size = model_runner.page_size
        self.speculative_num_steps = model_runner.server_args.speculative_num_steps
        self.speculative_num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.speculative_step_id = speculative_step_id
        self.max_num_pages = {width}

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.page_table_draft_decode = torch.zeros(max_bs, self.max_num_pages, dtype=torch.int32)

    def apply_graph_metadata(self, bs, req_pool_indices, seq_lens, forward_mode, spec_info, metadata):
        offset = 0
        if forward_mode.is_decode_or_idle():
            if spec_info is not None:
                offset = self.speculative_step_id + 1
        else:
            offset = self.speculative_num_draft_tokens
        {call}


class ToyMultiStepDraftBackend:
    def __init__(self, model_runner, topk, speculative_num_steps):
        self.attn_backends = []
        for i in range(speculative_num_steps - 1):
            self.attn_backends.append(ToyDraftBackend(model_runner, speculative_step_id=i))
"""

TRTLLM_CALL = ("update_graph_metadata(req_pool_indices=req_pool_indices, seq_lens=seq_lens, "
               "req_to_token=self.req_to_token, cache_seqlens=metadata.cache_seqlens_int32, "
               "page_table=metadata.page_table, bs=bs, seqlen_offset=offset, "
               "max_seq_pages=self.max_num_pages, page_size=self.page_size)")
FA_CALL = ("decode_set_metadata(metadata.cache_seqlens_int32, metadata.page_table, self.req_to_token, "
           "req_pool_indices, seq_lens, offset, self.max_num_pages, self.page_size)")
CONTEXT_ONLY = "(self.max_context_len + self.page_size - 1) // self.page_size"   # sglang 0.5.23
WITH_STEPS = "(self.max_context_len + self.speculative_num_steps - 1 + self.page_size - 1) // self.page_size"
ROUNDED_DOWN = "self.max_context_len // self.page_size"
ROW = "consumer.page_table_draft_decode[ToyDraftBackend@"
FILLS_FOR = {"trtllm": ("update_graph_metadata", TRTLLM_CALL), "flashattention": ("decode_set_metadata", FA_CALL)}


def rows(root: Path, width: str, kind: str = "trtllm", offset: str = "self.speculative_step_id + 1") -> list:
    fill, call = FILLS_FOR[kind]
    backend = BACKEND.replace("{fill}", fill).replace("{call}", call).replace("{width}", width)
    backend = backend.replace("offset = self.speculative_step_id + 1", f"offset = {offset}")
    write_sglang_package(root, {"kernels/ops/attention/graph_metadata.py": FILLS,
                                "srt/layers/attention/toy_draft.py": backend}, "0.0.0+toy")
    return audit_rows(root, check_draft_decode_offsets, PACKAGE)


def only(got: list):
    got = [r for r in got if r.id.startswith(ROW)]
    assert len(got) == 1, [(r.id, r.status) for r in got]
    return got[0]


@pytest.mark.parametrize("kind", sorted(FILLS_FOR))
def test_context_only_table_holds_only_with_room_for_the_draft_steps(tmp_path, kind):
    """sglang 0.5.23's TRT-LLM MHA and FlashAttention draft-decode tables: ceil(C / P) pages, read
    with seq_len + step + 1 at step `step`."""
    row = only(rows(tmp_path, CONTEXT_ONLY, kind))
    assert row.status == HOLDS_ONLY_IF and "seq_len[b] + delta <= max_context_len" in row.detail
    assert "draft_decode_offset_columns_read" in row.check and "delta = 1 + step" in row.detail
    x = row.counterexample
    assert 0 <= x["step"] <= x["num_steps"] - 2 and x["seq_len"] <= x["max_context_len"] - 1
    assert spec.draft_decode_offset_columns_read(x["seq_len"], x["step"], x["page_size"]) \
        > spec.cdiv(x["max_context_len"], x["page_size"])
    assert "IndexError" in row.detail and row.replay["columns_read"] > row.replay["width"]


def test_table_with_room_for_the_draft_steps_matches(tmp_path):
    row = only(rows(tmp_path, WITH_STEPS))
    assert row.status == MATCHED, row.detail


def test_rounded_down_table_is_read_past_even_with_room(tmp_path):
    row = only(rows(tmp_path, ROUNDED_DOWN))
    assert row.status == OVERREAD, row.detail


def test_a_fill_without_the_step_offset_gives_no_draft_decode_row(tmp_path):
    """The verify and decode offsets are the other consumer rows' to judge, not these."""
    assert not [r for r in rows(tmp_path, CONTEXT_ONLY, offset="1") if r.id.startswith(ROW)]


def test_the_step_is_bounded_by_the_steps_the_backend_builds(tmp_path):
    """The last step backend is num_steps - 2 (offset num_steps - 1) and an admitted request has
    seq_len <= C - 1: a width of C + num_steps - 2 slots is exactly enough, one slot less is not."""
    tight = "(self.max_context_len + self.speculative_num_steps - 2 + self.page_size - 1) // self.page_size"
    short = "(self.max_context_len + self.speculative_num_steps - 3 + self.page_size - 1) // self.page_size"
    assert only(rows(tmp_path / "tight", tight)).status == MATCHED
    assert only(rows(tmp_path / "short", short)).status == OVERREAD
