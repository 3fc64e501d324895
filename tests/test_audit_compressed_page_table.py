"""The compressed page-table audit (`consumer.compressed_page_table` rows) on small sglang-shaped
packages written here: a compressed sparse backend whose graph table has one page per
`compressed_page_size` blocks of `compress_ratio` tokens.  sglang's width (whole blocks and pages
rounded up) is matched while the backend refuses more draft tokens than the ratio, and holds only
with room for the draft tokens without that refusal; whole pages rounded down are read past even
so; each finding is shown by the stand-in read.  A backend without such a table has no row."""

from __future__ import annotations

from pathlib import Path

from specbound import spec
from specbound.audit.report import HOLDS_ONLY_IF, MATCHED, OVERREAD
from specbound.engines.sglang.compressed_page_table import check_compressed_page_tables
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.testing import audit_rows, write_sglang_package

BACKEND = """
import math

import torch


class ToyCompressedBackend:
    def __init__(self, model_runner, token_to_kv_pool):
        self.max_context_len = model_runner.model_config.context_len
        self.compress_ratio = model_runner.model_config.compress_ratio
        self.token_to_kv_pool = token_to_kv_pool

    def check_verify(self, spec_info):
        draft_tokens = int(spec_info.draft_token_num)
        if draft_tokens > self.compress_ratio:
            {refusal}

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        max_blocks = {blocks}
        max_pages = max(1, {pages})
        self._graph_compressed_{table} = torch.zeros((max_num_tokens, max_pages), dtype=torch.int32)
"""

CEIL_BLOCKS = "math.ceil(self.max_context_len / self.compress_ratio)"
CEIL_PAGES = "math.ceil(max_blocks / self.token_to_kv_pool.toy_compressed_page_size)"
REFUSE = "raise NotImplementedError('more draft tokens than the ratio')"
ROW = "consumer.compressed_page_table[ToyCompressedBackend._graph_compressed_page_table@"


def rows(root: Path, blocks=CEIL_BLOCKS, pages=CEIL_PAGES, refusal=REFUSE, table="page_table") -> list:
    backend = BACKEND.replace("{blocks}", blocks).replace("{pages}", pages).replace("{refusal}", refusal) \
        .replace("{table}", table)
    pkg = write_sglang_package(root, {"srt/layers/attention/toy_backend.py": backend}, "0.0.0+toy")
    return audit_rows(pkg.parent, check_compressed_page_tables, PACKAGE)


def only(got):
    assert len(got) == 1 and got[0].id.startswith(ROW), [(r.id, r.status, r.detail[:160]) for r in got]
    return got[0]


def test_rounded_up_width_is_matched_while_wide_trees_are_refused(tmp_path):
    row = only(rows(tmp_path))   # sglang 0.5.23's Qwen QSA table
    assert row.status == MATCHED, row.detail
    assert "a precondition (sglang refuses more)" in row.detail and "n > ratio refused at" in row.subject


def test_without_the_refusal_it_holds_only_with_room_for_the_draft_tokens(tmp_path):
    row = only(rows(tmp_path, refusal="pass"))
    assert row.status == HOLDS_ONLY_IF, row.detail
    x = row.counterexample
    read = spec.compressed_pages_read(x["seq_len"], x["num_draft_tokens"], x["compress_ratio"],
                                      x["compressed_page_size"])
    assert x["num_draft_tokens"] > x["compress_ratio"] and read > row.replay["width"]
    assert "IndexError" in row.detail


def test_whole_pages_rounded_down_are_read_past(tmp_path):
    row = only(rows(tmp_path, pages="max_blocks // self.token_to_kv_pool.toy_compressed_page_size"))
    assert row.status == OVERREAD, row.detail
    assert row.replay["columns_read"] > row.replay["width"] and "IndexError" in row.detail


def test_a_backend_without_a_compressed_table_has_no_row(tmp_path):
    assert rows(tmp_path, table="lengths") == []
