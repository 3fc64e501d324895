"""The sparse-attention page-table audit (`consumer.sparse_page_table[...]`) on small
sglang-shaped packages written here: a DSA-like backend allocates its token-granular graph
table in ``init_cuda_graph_state`` and fills it with a fused kernel handed ``req_to_token=``,
``page_table_1=`` and the column bound ``max_seqlen_k=``; target verify reads
``seq_len + num_draft_tokens`` columns.  A table as wide as a ``req_to_token`` row (sglang
0.5.23) is green, one as wide as the model context is red."""

from __future__ import annotations

from pathlib import Path

from specbound import spec
from specbound.audit.report import HOLDS_ONLY_IF, MATCHED, OVERREAD
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.sparse_page_table import check_sparse_page_tables
from specbound.engines.sglang.testing import audit_rows, write_sglang_package

# sglang's fused_dsa_target_verify_metadata, reduced to its signature.
FILL = """
def fused_verify_metadata(seq_lens, req_pool_indices, req_to_token, cache_seqlens, page_table_1, bs,
                          max_seqlen_k, next_n):
    pass
"""

# sglang's DeepseekSparseAttnBackend, reduced: the graph table and a compact page table; the
# replay fill is bounded by the table's own width.
BACKEND = """
import torch

from sglang.kernels.ops.attention.dsa_metadata import fused_verify_metadata


class ToySparseBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.page_size = model_runner.page_size
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.speculative_num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        max_ctx_len = {width}
        page_table = torch.zeros(max_num_tokens, max_ctx_len, dtype=torch.int32)
        self.graph_metadata = {
            "page_table": page_table,
            "real_page_table": torch.zeros(max_num_tokens, 1, dtype=torch.int32),
        }

    def replay(self, bs, seq_lens, req_pool_indices, metadata):
        fused_verify_metadata(seq_lens=seq_lens, req_pool_indices=req_pool_indices, req_to_token=self.req_to_token,
                              cache_seqlens=metadata.cache_seqlens_int32, page_table_1=metadata.page_table_1, bs=bs,
                              max_seqlen_k=metadata.page_table_1.shape[1], next_n=self.speculative_num_draft_tokens)
"""

ROW_WIDE = "self.req_to_token.shape[1]"   # sglang 0.5.23
CONTEXT = "self.max_context_len"
SHORT = "self.max_context_len - 1"
ROW = "consumer.sparse_page_table[ToySparseBackend."


def rows(root: Path, width: str, backend: str = BACKEND) -> list:
    write_sglang_package(root, {"kernels/ops/attention/dsa_metadata.py": FILL,
                                "srt/layers/attention/toy_sparse.py": backend.replace("{width}", width)}, "0.0.0+toy")
    return [r for r in audit_rows(root, check_sparse_page_tables, PACKAGE) if r.id.startswith(ROW)]


def only(got: list):
    assert len(got) == 1, [(r.id, r.status) for r in got]
    return got[0]


def test_table_as_wide_as_a_req_to_token_row_matches(tmp_path):
    row = only(rows(tmp_path, ROW_WIDE))
    assert row.status == MATCHED, row.detail
    assert row.id.startswith(ROW + "page_table@") and "4 + C + n" in row.detail


def test_context_wide_table_holds_only_with_room_for_the_draft_tokens(tmp_path):
    row = only(rows(tmp_path, CONTEXT))
    assert row.status == HOLDS_ONLY_IF and "seq_len[b] + delta <= max_context_len" in row.detail
    x = row.counterexample
    assert x["seq_len"] <= x["max_context_len"] - 1
    assert spec.sparse_page_table_columns_read(x["seq_len"], x["num_draft_tokens"]) > x["max_context_len"]
    assert "IndexError" in row.detail and row.replay["columns_read"] > row.replay["width"]


def test_table_narrower_than_the_context_is_read_past_even_with_room(tmp_path):
    assert only(rows(tmp_path, SHORT)).status == OVERREAD


def test_only_a_class_that_runs_a_sparse_fill_is_judged(tmp_path):
    """A backend allocating a page table but filling it some other way is not this stage's."""
    unfilled = BACKEND.replace("req_to_token=self.req_to_token,", "")
    assert rows(tmp_path, CONTEXT, unfilled) == []
