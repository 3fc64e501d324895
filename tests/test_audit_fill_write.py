"""The fill-write audit (`consumer.page_table_fill_write` rows) on small sglang-shaped packages
written here: a fused page-table fill whose kernel stores each request's pages up to a clamp and
never checks the row's width, called by a backend that clamps with the batch's longest KV length
(`max_seq_len_k`, XPU's shape) into its graph table.  A table as wide as the context holds only
with room for the draft tokens (replayed on the package's fill under the checked interpreter), a
floor-divided width overruns, the spec's width is matched; a clamp of the table's own width is
the reader rows' business and has no row here."""

from __future__ import annotations

from pathlib import Path

from specbound import kernels  # noqa: F401  - before triton: it may set TRITON_INTERPRET
from specbound import spec
from specbound.audit.report import HOLDS_ONLY_IF, MATCHED, OVERREAD, OVERRUN, UNKNOWN
from specbound.engines.sglang.consumers import LONGEST_UNSET, LONGEST_UNTRACED, check_consumers
from specbound.engines.sglang.fill_write import check_fill_writes
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.testing import write_sglang_package
from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.audit.report import AuditReport

FILL = """
import triton
import triton.language as tl


@triton.jit
def _toy_fill_kernel(seq_lens, req_to_token, rtt_stride, req_pool_indices, page_table, pt_stride, max_seq_pages,
                     delta, PAGE: tl.constexpr, COLS: tl.constexpr):
    b = tl.program_id(0)
    seq = tl.load(seq_lens + b)
    live = tl.minimum(tl.cdiv(seq + delta, PAGE), max_seq_pages)
    pool_row = tl.load(req_pool_indices + b)
    cols = tl.arange(0, COLS)
    keep = cols < live
    tok = tl.load(req_to_token + pool_row * rtt_stride + cols * PAGE, mask=keep, other=0)
    tl.store(page_table + b * pt_stride + cols, tok // PAGE, mask=keep)


def toy_fill(cache_seqlens_int32, cu_seqlens_k, page_table, req_to_token, req_pool_indices, max_seq_pages, seq_lens,
             seq_len_delta, page_size):
    bs = cache_seqlens_int32.shape[0]
    _toy_fill_kernel[(bs,)](seq_lens, req_to_token, req_to_token.stride(0), req_pool_indices, page_table,
                            page_table.stride(0), max_seq_pages, seq_len_delta, PAGE=page_size, COLS=64)
"""

BACKEND = """
import torch

from sglang.kernels.ops.attention.toy_metadata import toy_fill


class ToyMeta:
    page_table = None
    max_seq_len_k = 0


class ToyXpuBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.page_size = model_runner.page_size
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        pages = {width}
        self.graph = {"page_table": torch.zeros(max_bs, pages, dtype=torch.int32)}

    def _offset(self, is_verify, spec_info):
        if is_verify:
            return spec_info.num_tokens_per_req
        return 0

    def graph_metadata(self, forward_batch, in_capture=False):
        bs = forward_batch.batch_size
        if in_capture:
            metadata = ToyMeta()
            metadata.page_table = self.graph["page_table"][:bs, :]
            self.graph[bs] = metadata
        metadata = self.graph[bs]
        offset = self._offset(forward_batch.forward_mode.is_target_verify(), forward_batch.spec_info)
        metadata.max_seq_len_k = forward_batch.seq_lens_cpu.max().item() + offset
        self._fill(metadata=metadata, req_pool_indices=forward_batch.req_pool_indices,
                   seq_lens=forward_batch.seq_lens, seq_len_delta=offset)

    def _fill(self, *, metadata, req_pool_indices, seq_lens, seq_len_delta):
        max_seq_pages = {clamp}
        toy_fill(cache_seqlens_int32=metadata.cache_seqlens_int32, cu_seqlens_k=metadata.cu_seqlens_k,
                 page_table=metadata.page_table, req_to_token=self.req_to_token, req_pool_indices=req_pool_indices,
                 max_seq_pages=max_seq_pages, seq_lens=seq_lens, seq_len_delta=seq_len_delta,
                 page_size=self.page_size)
"""

CONTEXT_WIDTH = "(self.max_context_len + self.page_size - 1) // self.page_size"   # XPU's graph table
LONGEST = "(metadata.max_seq_len_k + self.page_size - 1) // self.page_size"      # XPU's clamp
ROW = "consumer.page_table_fill_write[ToyXpuBackend.graph[page_table]@"
GRAPH_TABLE = 'self.graph["page_table"][:bs, :]'


SETS_LONGEST = "metadata.max_seq_len_k = forward_batch.seq_lens_cpu.max().item() + offset"   # XPU's


def rows(root: Path, width: str, clamp: str = LONGEST, replay: bool = True, readers: bool = False,
         table: str = GRAPH_TABLE, delta: str = "seq_len_delta=offset", fill: str = FILL,
         longest: str = SETS_LONGEST) -> list:
    """The fill-write rows, or with ``readers`` the reader rows (``consumer.page_table``) of the
    same call; ``table``: what the capture stores as the metadata's table; ``delta``: what the
    backend passes its fill as the delta."""
    backend = BACKEND.replace("{width}", width).replace("{clamp}", clamp).replace(GRAPH_TABLE, table) \
        .replace("seq_len_delta=offset", delta).replace(SETS_LONGEST, longest)
    write_sglang_package(root, {"kernels/ops/attention/toy_metadata.py": fill,
                                "srt/layers/attention/toy_backend.py": backend}, "0.0.0+toy")
    rep = AuditReport(str(root), "toy", "test", engine="sglang")
    program = Program(SourceIndex(root), PACKAGE)
    if readers:
        check_consumers(SourceIndex(root), rep, program)
        return [r for r in rep.rows if r.id.startswith("consumer.page_table[")]
    check_fill_writes(program, rep, replay=replay)
    return rep.rows


def only(got):
    assert len(got) == 1 and got[0].id.startswith(ROW), [(r.id, r.status, r.detail[:200]) for r in got]
    return got[0]


def test_context_wide_table_holds_only_with_room_and_the_fill_writes_past_it(tmp_path):
    row = only(rows(tmp_path, CONTEXT_WIDTH))
    assert row.status == HOLDS_ONLY_IF, row.detail
    assert "seq_len[b] + delta <= max_context_len" in row.detail and "delta = n" in row.detail
    cex = row.counterexample
    assert cex["seq_len"] <= cex["max_context_len"] - 1
    assert spec.page_table_columns_read(cex["seq_len"], cex["num_draft_tokens"], cex["page_size"]) > \
        spec.cdiv(cex["max_context_len"], cex["page_size"])
    # the package's own fill, run by the checked interpreter at the counterexample, stores past the table
    assert row.method == "z3 + checked interpreter" and "out-of-bounds store" in row.evidence


def test_floor_divided_width_overruns_even_with_room(tmp_path):
    row = only(rows(tmp_path, "self.max_context_len // self.page_size", replay=False))
    assert row.status == OVERRUN, row.detail
    assert row.counterexample["page_size"] >= 2


def test_room_for_the_draft_tokens_is_matched(tmp_path):
    width = "(self.max_context_len + self.num_draft_tokens + self.page_size - 1) // self.page_size"
    assert only(rows(tmp_path, width)).status == MATCHED


def test_a_clamp_of_the_tables_own_width_has_no_row_here(tmp_path):
    assert rows(tmp_path, CONTEXT_WIDTH, clamp=CONTEXT_WIDTH) == []


# What attention reads of the same call: cdiv(seq_len + delta, P) columns of the row.  The clamp
# (the batch's longest request) never cuts that read, so only the table's width can.

def reader(got):
    assert len(got) == 1 and got[0].id.startswith("consumer.page_table[ToyXpuBackend@"), \
        [(r.id, r.status, r.detail[:200]) for r in got]
    return got[0]


def test_attention_reads_past_a_context_wide_table_unless_the_request_has_room(tmp_path):
    row = reader(rows(tmp_path, CONTEXT_WIDTH, readers=True))
    assert row.status == HOLDS_ONLY_IF, row.detail
    cex = row.counterexample
    # the counterexample is one sglang can reach: max_seq_len_k = max(seq_lens) + delta, delta = n
    assert cex["max_seq_len_k"] >= cex["seq_len"] + cex["num_draft_tokens"]
    assert cex["seq_len"] <= cex["max_context_len"] - 1
    assert spec.page_table_columns_read(cex["seq_len"], cex["num_draft_tokens"], cex["page_size"]) > \
        spec.cdiv(cex["max_context_len"], cex["page_size"])
    assert "longest_covers_request" not in row.detail and "IndexError" in row.detail   # the stand-in read


def test_attention_read_of_a_table_with_room_for_the_draft_is_matched(tmp_path):
    width = "(self.max_context_len + self.num_draft_tokens + self.page_size - 1) // self.page_size"
    row = reader(rows(tmp_path, width, readers=True))
    assert row.status == MATCHED, row.detail
    assert "longest_covers_request" in row.detail   # the proof used what sglang sets the clamp to


def test_a_longest_request_clamp_is_not_judged_without_the_table(tmp_path):
    # the clamp alone would prove every read in bounds: with the table untraced the row says so
    row = reader(rows(tmp_path, CONTEXT_WIDTH, readers=True, table="self.make_table(bs)"))
    assert row.status == UNKNOWN and LONGEST_UNTRACED in row.detail, row.detail


# FlashAttention before 0.5.15 clamps with the longest length it is given, seq_lens.max().item().
COMMITTED = "(seq_lens.max().item() + self.page_size - 1) // self.page_size"


def test_a_clamp_of_the_longest_committed_length_leaves_the_draft_pages_unfilled(tmp_path):
    # the fill stops at max(seq_lens)'s pages, attention reads seq_len + n: stale entries are read
    row = reader(rows(tmp_path, CONTEXT_WIDTH, clamp=COMMITTED, readers=True))
    assert row.status == OVERREAD and "delta = n" in row.detail, row.detail
    cex = row.counterexample
    assert cex["seq_len"] <= cex["max(seq_lens)"] <= cex["max_context_len"] - 1
    assert spec.page_table_columns_read(cex["seq_len"], cex["num_draft_tokens"], cex["page_size"]) > \
        spec.cdiv(cex["max(seq_lens)"], cex["page_size"])


def test_a_clamp_of_the_longest_committed_length_is_matched_without_a_delta(tmp_path):
    row = reader(rows(tmp_path, CONTEXT_WIDTH, clamp=COMMITTED, readers=True, delta="seq_len_delta=0"))
    assert row.status == MATCHED and "longest_length_covers_request" in row.detail, row.detail
    write = only(rows(tmp_path / "w", CONTEXT_WIDTH, clamp=COMMITTED, delta="seq_len_delta=0"))
    assert write.status == MATCHED, write.detail


def test_a_delta_not_traced_keeps_the_fill_write_from_matched(tmp_path):
    width = "(self.max_context_len + self.num_draft_tokens + self.page_size - 1) // self.page_size"
    row = only(rows(tmp_path, width, delta="seq_len_delta=(offset if offset else self.lookup_offset())"))
    assert row.status == UNKNOWN and "a delta was not traced" in row.detail, row.detail


def test_the_draft_step_delta_is_judged_by_the_draft_decode_rows_not_the_verify_ones(tmp_path):
    got = rows(tmp_path, CONTEXT_WIDTH, readers=True, delta="seq_len_delta=self.speculative_step_id + 1")
    assert got == [], [(r.id, r.status) for r in got]
    # the fill still writes cdiv(seq_len + step + 1, P) pages into a context-wide row
    write = only(rows(tmp_path / "w", CONTEXT_WIDTH, delta="seq_len_delta=self.speculative_step_id + 1",
                      replay=False))
    assert write.status == HOLDS_ONLY_IF and "step" in write.counterexample, write.detail


def test_a_fills_launch_of_its_own_kernel_is_not_a_site(tmp_path):
    # the kernel takes the fill's parameters under the same names: its launch passes them
    # through, and the backend's call (with the table it chooses) is the one judged
    fill = FILL.replace("max_seq_pages,\n                     delta,", "max_seq_pages,\n                     seq_len_delta,") \
        .replace("tl.cdiv(seq + delta, PAGE)", "tl.cdiv(seq + seq_len_delta, PAGE)")
    assert "max_seq_pages,\n                     seq_len_delta," in fill
    got = rows(tmp_path, CONTEXT_WIDTH, readers=True, fill=fill)
    assert [r.id.split("@")[0] for r in got] == ["consumer.page_table[ToyXpuBackend"], [(r.id, r.status) for r in got]


WITH_DRAFT = "(self.max_context_len + self.num_draft_tokens + self.page_size - 1) // self.page_size"


def test_a_longest_length_set_without_the_delta_leaves_the_draft_pages_unfilled(tmp_path):
    # max_seq_len_k = max(seq_lens), the fill given delta = n: the clamp stops the fill at the
    # committed pages, attention reads seq_len + n (stale entries), however wide the table
    row = reader(rows(tmp_path, WITH_DRAFT, readers=True,
                      longest="metadata.max_seq_len_k = forward_batch.seq_lens_cpu.max().item()"))
    assert row.status == OVERREAD and "delta = n" in row.detail, row.detail
    assert row.counterexample["max_seq_len_k"] == row.counterexample["max(seq_lens)"]


def test_a_longest_length_never_set_is_not_judged(tmp_path):
    row = reader(rows(tmp_path, WITH_DRAFT, readers=True, longest="pass"))
    assert row.status == UNKNOWN and LONGEST_UNSET in row.detail, row.detail


def test_a_longest_length_set_to_a_value_not_read_is_not_judged(tmp_path):
    # one assignment read (max(seq_lens), not paired with delta = n), one not: the one not read
    # may be what the verify path runs, so the row is not judged on the other alone
    longest = ("metadata.max_seq_len_k = forward_batch.seq_lens_cpu.max().item()\n"
               "        if forward_batch.spec_info is not None:\n"
               "            metadata.max_seq_len_k = self.mystery_longest()")
    row = reader(rows(tmp_path, WITH_DRAFT, readers=True, longest=longest))
    assert row.status == UNKNOWN and LONGEST_UNSET in row.detail, row.detail
