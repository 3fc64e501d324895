"""The length-bounded page-table build audit (`consumer.page_table_write[...]`) on small
sglang-shaped packages written here: a build whose kernel stores every page of
``cache_seqlens`` a row holds (the table's width only sizes a grid of whole blocks), called
through a backend helper with a metadata record whose table is allocated per batch.  The width
sglang 0.5.23 ships is red and replayed on the package's own build; one with room for the draft
tokens is green; a table read with the committed lengths only is green; a rounded-down width is red
even with room."""

from __future__ import annotations

from pathlib import Path

from specbound import kernels  # noqa: F401  - before triton: it may set TRITON_INTERPRET
from specbound import spec
from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.audit.report import HOLDS_ONLY_IF, MATCHED, OVERRUN, AuditReport
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.page_table_build import check_page_table_builds
from specbound.engines.sglang.testing import write_sglang_package

# A build in the shape of sglang's build_trtllm_mha_page_table, written here: blocks of
# 64 // page_size pages, each program storing the pages of its block below the request's count.
BUILD = """
import triton
import triton.language as tl

_BLOCK_TOKENS = 64
_BLOCK_TOKENS_TL = tl.constexpr(_BLOCK_TOKENS)


def blocks_for(num_pages, page_size):
    per_block = _BLOCK_TOKENS // page_size
    return (num_pages + per_block - 1) // per_block


@triton.jit
def toy_page_table_kernel(req_to_token_ptr, req_pool_indices_ptr, seq_lens_ptr, page_table_ptr,
                          req_to_token_stride: tl.constexpr, page_table_stride: tl.constexpr,
                          PAGE_SIZE: tl.constexpr):
    PER_BLOCK: tl.constexpr = _BLOCK_TOKENS_TL // PAGE_SIZE
    req = tl.program_id(0)
    blk = tl.program_id(1)
    length = tl.load(seq_lens_ptr + req)
    page = tl.arange(0, PER_BLOCK) + blk * PER_BLOCK
    keep = page < tl.cdiv(length, PAGE_SIZE)
    row = tl.load(req_pool_indices_ptr + req).to(tl.int64)
    slot = tl.load(req_to_token_ptr + row * req_to_token_stride + page.to(tl.int64) * PAGE_SIZE, mask=keep)
    tl.store(page_table_ptr + req * page_table_stride + page, (slot // PAGE_SIZE).to(tl.int32), mask=keep)


def build_page_table(req_to_token, req_pool_indices, cache_seqlens, page_table, page_size):
    bs, num_pages = page_table.shape
    toy_page_table_kernel[(bs, blocks_for(num_pages, page_size))](
        req_to_token, req_pool_indices, cache_seqlens, page_table, req_to_token.stride(0), page_table.stride(0),
        PAGE_SIZE=page_size)
"""

BACKEND = """
import torch

from sglang.kernels.ops.attention.toy_page_table import build_page_table


class ToyMetadata:
    pass


class ToyBuildBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.page_size = model_runner.page_size
        self.speculative_num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.max_num_pages = {width}

    def _fill(self, metadata, req_pool_indices, cache_seqlens):
        build_page_table(req_to_token=self.req_to_token, req_pool_indices=req_pool_indices,
                         cache_seqlens=cache_seqlens, page_table=metadata.page_table, page_size=self.page_size)

    def init_forward_metadata(self, forward_batch):
        metadata = ToyMetadata()
        batch_size = forward_batch.batch_size
        metadata.cache_seqlens_int32 = {lengths}
        metadata.page_table = torch.empty((batch_size, self.max_num_pages), dtype=torch.int32)
        self._fill(metadata, forward_batch.req_pool_indices, metadata.cache_seqlens_int32)
        self.forward_metadata = metadata
"""

CONTEXT_ONLY = "(self.max_context_len + self.page_size - 1) // self.page_size"   # sglang 0.5.23
WITH_DRAFT = "(self.max_context_len + self.speculative_num_draft_tokens + self.page_size - 1) // self.page_size"
ROUNDED_DOWN = "self.max_context_len // self.page_size"
# ceil(C / P) pages rounded up to whole blocks of 64 // P: the grid stops the stores at the width
WHOLE_BLOCKS = ("((self.max_context_len + self.page_size - 1) // self.page_size + 64 // self.page_size - 1)"
                " // (64 // self.page_size) * (64 // self.page_size)")
VERIFY = "(forward_batch.seq_lens + self.speculative_num_draft_tokens).to(torch.int32)"
PREFIX_ONLY = "forward_batch.seq_lens.to(torch.int32)"
ROW = "consumer.page_table_write[ToyBuildBackend."


# The graph path of sglang's TRT-LLM MHA backend, reduced: the table is a graph dict's entry, set on a
# record at capture and stored under the batch size; the ragged verify reads the record back and
# rebuilds the table through the same helper.
GRAPH = """
    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.target_verify_metadata = {
            "page_table": torch.zeros(max_bs, self.max_num_pages, dtype=torch.int32),
        }

    def _build_graph_metadata(self, bs):
        metadata = ToyMetadata()
        metadata.page_table = self.target_verify_metadata["page_table"][:bs, :]
        self.target_verify_metadata[bs] = metadata

    def _write_ragged(self, metadata, forward_batch, bs):
        metadata.cache_seqlens_int32.copy_(forward_batch.seq_lens[:bs] + self.speculative_num_draft_tokens)
        self._fill(metadata, forward_batch.req_pool_indices, metadata.cache_seqlens_int32)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        bs = forward_batch.batch_size
        if in_capture:
            self._build_graph_metadata(bs)
        self.forward_metadata = self.target_verify_metadata[bs]
        self._write_ragged(self.forward_metadata, forward_batch, bs)
"""


def rows(root: Path, width: str, lengths: str = VERIFY, replay: bool = True, graph: bool = False) -> list:
    backend = BACKEND.replace("{width}", width).replace("{lengths}", lengths) + (GRAPH if graph else "")
    write_sglang_package(root, {"kernels/ops/attention/toy_page_table.py": BUILD,
                                "srt/layers/attention/toy_backend.py": backend}, "0.0.0+toy")
    rep = AuditReport(str(root), "toy", "test", engine="sglang")
    check_page_table_builds(Program(SourceIndex(root / "sglang"), PACKAGE), rep, replay=replay)
    return rep.rows


def only(root: Path, width: str, lengths: str = VERIFY, replay: bool = True):
    got = rows(root, width, lengths, replay)
    assert len(got) == 1, [(r.id, r.status, r.detail[:200]) for r in got]
    row = got[0]
    assert row.id.startswith(ROW) and row.id.endswith("toy_backend.py:27]"), row.id
    return row


def test_context_only_table_is_written_past_by_the_build(tmp_path):
    """sglang 0.5.23's shape: ceil(C / P) pages, built with seq_len + n."""
    row = only(tmp_path, CONTEXT_ONLY)
    assert row.status == HOLDS_ONLY_IF and "seq_len[b] + delta <= max_context_len" in row.detail
    assert "blocks of 64 // page_size pages" in row.detail
    x = row.counterexample
    width = spec.cdiv(x["max_context_len"], x["page_size"])
    assert x["pages_per_block"] * x["page_size"] == 64
    assert spec.page_table_build_columns_stored(x["seq_len"], x["num_draft_tokens"], x["page_size"], width,
                                                x["pages_per_block"]) > width
    # the package's own build, run by the checked interpreter at the counterexample, stores past the table
    assert row.method == "z3 + checked interpreter" and "out-of-bounds store" in row.evidence
    assert "toy_page_table_kernel" in row.evidence and row.replay["pages"] > row.replay["width"]


def test_table_with_the_draft_tokens_matches(tmp_path):
    assert only(tmp_path, WITH_DRAFT).status == MATCHED


def test_committed_lengths_only_fit_the_context_table(tmp_path):
    row = only(tmp_path, CONTEXT_ONLY, PREFIX_ONLY)
    assert row.status == MATCHED and "cache_seqlens = seq_len + 0" in row.check


def test_rounded_down_table_is_overrun_even_with_room(tmp_path):
    row = only(tmp_path, ROUNDED_DOWN, replay=False)
    assert row.status == OVERRUN, row.detail


def test_graph_table_is_followed_through_the_record_stored_per_batch_size(tmp_path):
    got = {r.id: r for r in rows(tmp_path, CONTEXT_ONLY, replay=False, graph=True)}
    graph = "consumer.page_table_write[ToyBuildBackend.target_verify_metadata[page_table]@" \
            "srt/layers/attention/toy_backend.py:42]"
    assert sorted(got) == sorted([graph, "consumer.page_table_write[ToyBuildBackend.metadata.page_table@"
                                         "srt/layers/attention/toy_backend.py:27]"]), sorted(got)
    assert got[graph].status == HOLDS_ONLY_IF and "the table allocated at srt/layers/attention/toy_backend.py:32" \
        in got[graph].detail


def test_graph_table_with_the_draft_tokens_matches(tmp_path):
    assert {r.status for r in rows(tmp_path, WITH_DRAFT, graph=True)} == {MATCHED}


def test_a_fill_with_a_column_clamp_is_no_build(tmp_path):
    """A fill handed ``max_seq_pages`` writes at most that many columns: judged as a reader
    elsewhere, never as a length-bounded build."""
    root = tmp_path / "clamped"
    write_sglang_package(root, {
        "kernels/ops/attention/toy_page_table.py": BUILD.replace(
            "cache_seqlens, page_table, page_size):", "cache_seqlens, page_table, page_size, max_seq_pages):"),
        "srt/layers/attention/toy_backend.py": BACKEND.replace("{width}", CONTEXT_ONLY).replace("{lengths}", VERIFY)
        .replace("page_size=self.page_size)", "page_size=self.page_size, max_seq_pages=self.max_num_pages)")},
        "0.0.0+toy")
    rep = AuditReport(str(root), "toy", "test", engine="sglang")
    check_page_table_builds(Program(SourceIndex(root / "sglang"), PACKAGE), rep)
    assert rep.rows == []


def test_width_in_whole_blocks_keeps_the_stores_in_the_row(tmp_path):
    """No false alarm on a width written another way: in whole blocks the grid stops the stores
    (what the reader then sees is the reader rows' question)."""
    row = only(tmp_path, WHOLE_BLOCKS)
    assert row.status == MATCHED, row.detail


# sglang 0.5.14's TRT-LLM MHA graph path, reduced: the record is declared `metadata = None` and taken
# from a per-mode graph dict (allocated as a dict literal) in each branch; the lengths the build gets
# are the branch's own: the draft step's in draft decode, the committed ones in plain decode, the
# verify tree's in target verify, and in draft extend `seq_lens`, which the worker has widened.
MODES = """
    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.decode_cuda_graph_metadata = {
            "cache_seqlens": torch.zeros(max_bs, dtype=torch.int32),
            "page_table": torch.zeros(max_bs, self.max_num_pages, dtype=torch.int32),
        }
        self.target_verify_metadata = {"page_table": torch.zeros(max_bs, self.max_num_pages, dtype=torch.int32)}
        self.draft_extend_metadata = {"page_table": torch.zeros(max_bs, self.max_num_pages, dtype=torch.int32)}

    def capture(self, bs, forward_mode):
        metadata = ToyMetadata()
        if forward_mode.is_decode_or_idle():
            metadata.page_table = self.decode_cuda_graph_metadata["page_table"][:bs, :]
            self.decode_cuda_graph_metadata[bs] = metadata
        elif forward_mode.is_target_verify():
            metadata.page_table = self.target_verify_metadata["page_table"][:bs, :]
            self.target_verify_metadata[bs] = metadata
        else:
            metadata.page_table = self.draft_extend_metadata["page_table"][:bs, :]
            self.draft_extend_metadata[bs] = metadata

    def apply(self, bs, req_pool_indices, seq_lens, forward_mode, spec_info):
        metadata = None
        if forward_mode.is_decode_or_idle():
            if spec_info is not None:
                metadata = self.decode_cuda_graph_metadata[bs]
                metadata.cache_seqlens_int32 = self.decode_cuda_graph_metadata["cache_seqlens"][:bs]
                metadata.cache_seqlens_int32.copy_(seq_lens + self.speculative_step_id + 1)
            else:
                metadata = self.decode_cuda_graph_metadata[bs]
                metadata.cache_seqlens_int32.copy_(seq_lens)
            self._fill(metadata, req_pool_indices, metadata.cache_seqlens_int32)
        elif forward_mode.is_target_verify():
            metadata = self.target_verify_metadata[bs]
            metadata.cache_seqlens_int32.copy_(seq_lens + self.speculative_num_draft_tokens)
            self._fill(metadata, req_pool_indices, metadata.cache_seqlens_int32)
        elif forward_mode.is_draft_extend_v2():
            metadata = self.draft_extend_metadata[bs]
            metadata.cache_seqlens_int32.copy_(seq_lens)
            self._fill(metadata, req_pool_indices, metadata.cache_seqlens_int32)
"""


def test_each_mode_of_a_graph_path_is_judged_with_its_own_lengths(tmp_path):
    backend = BACKEND.replace("{width}", CONTEXT_ONLY).replace("{lengths}", VERIFY) + MODES
    write_sglang_package(tmp_path, {"kernels/ops/attention/toy_page_table.py": BUILD,
                                    "srt/layers/attention/toy_backend.py": backend}, "0.0.0+toy")
    rep = AuditReport(str(tmp_path), "toy", "test", engine="sglang")
    check_page_table_builds(Program(SourceIndex(tmp_path / "sglang"), PACKAGE), rep, replay=False)
    got = {r.id.split("ToyBuildBackend.", 1)[1].split("@")[0]: r for r in rep.rows if "toy_backend.py:27]" not in r.id}
    assert sorted(got) == ["decode_cuda_graph_metadata[page_table]", "draft_extend_metadata[page_table]",
                           "target_verify_metadata[page_table]"], [(r.id, r.status, r.detail[:200]) for r in rep.rows]
    decode = got["decode_cuda_graph_metadata[page_table]"]
    assert decode.status == HOLDS_ONLY_IF and "cache_seqlens = seq_len + 1 + step" in decode.check, decode.check
    x = decode.counterexample
    assert 0 <= x["step"] <= x["num_steps"] - 2
    assert spec.page_table_build_columns_stored(x["seq_len"], x["step"] + 1, x["page_size"],
                                                spec.cdiv(x["max_context_len"], x["page_size"]),
                                                x["pages_per_block"]) > spec.cdiv(x["max_context_len"], x["page_size"])
    for key in ("target_verify_metadata[page_table]", "draft_extend_metadata[page_table]"):
        assert got[key].status == HOLDS_ONLY_IF and "cache_seqlens = seq_len + n" in got[key].check, got[key].check
