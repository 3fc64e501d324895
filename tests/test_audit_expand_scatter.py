"""The expand page-table audit (`consumer.expand_page_table[...]`) on small sglang-shaped
packages written here: a draft-decode backend (topk > 1, page_size > 1) whose fill scatters
each branch's draft-slot pages into a narrow expand table, at graph replay and eagerly.  The
correct slicing is matched (also written another way); scattering every step's slots into the
step's row is a `crash`, replayed by running the package's own fill on torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import spec
from specbound.engines.sglang.expand_scatter import check_expand_scatter
from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.engines.sglang.locate import PACKAGE
from specbound.audit.report import CRASH, MATCHED, UNKNOWN, AuditReport
from specbound.engines.sglang.testing import write_sglang_package

BACKEND = """
import torch


class ToyExpandBackend:
    def __init__(self, model_runner):
        self.topk = model_runner.server_args.speculative_eagle_topk
        self.speculative_num_steps = model_runner.server_args.speculative_num_steps
        self.page_size = model_runner.page_size
        self.speculative_step_id = 0

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        decode_length = self.speculative_step_id + 1
        self.draft_decode_metadata_topk_expand = {
            "page_table": torch.zeros(max_bs * self.topk, WIDTH, dtype=torch.int32),
        }

    def replay_draft_decode(self, bs, out_cache_loc, last_page_lens):
        metadata_expand = self.draft_decode_metadata_topk_expand[bs]
        decode_length = self.speculative_step_id + 1
        cache_loc = out_cache_loc.view(-1, self.speculative_num_steps)
        SLICE
        fill_expand(page_table=metadata_expand.page_table, last_page_lens=last_page_lens,
                    decode_length=decode_length, cache_loc=cache_loc, page_size=self.page_size)

    def eager_draft_decode(self, forward_batch, out_cache_loc, last_page_lens):
        table = torch.zeros(forward_batch.batch_size * self.topk, self.speculative_num_steps, dtype=torch.int32)
        cache_loc = out_cache_loc.view(-1, self.speculative_num_steps)
        fill_expand(page_table=table, last_page_lens=last_page_lens, decode_length=self.speculative_step_id + 1,
                    cache_loc=cache_loc, page_size=self.page_size)


def fill_expand(page_table, last_page_lens, decode_length, cache_loc, page_size):
    # one column per distinct page of each branch's slots, in order
    pages = cache_loc // page_size
    changed = torch.ones_like(pages, dtype=torch.bool)
    changed[:, 1:] = pages[:, 1:] != pages[:, :-1]
    columns = changed.cumsum(dim=1) - 1
    page_table[: pages.shape[0], :].scatter_(1, columns, pages.to(page_table.dtype))
"""

SLICED = "cache_loc = cache_loc[:, :decode_length]"   # sglang 0.5.13 on


def _call_at(text: str) -> str:
    line = next(i for i, x in enumerate(BACKEND.splitlines(), 1) if x.strip().startswith(text))
    return f"consumer.expand_page_table[ToyExpandBackend@srt/layers/attention/toy_backend.py:{line}]"


GRAPH = _call_at("fill_expand(page_table=metadata_expand.page_table")
EAGER = _call_at("fill_expand(page_table=table")


def package(root: Path, width: str, slice_line: str) -> Path:
    return write_sglang_package(root, {"srt/layers/attention/toy_backend.py":
                                       BACKEND.replace("WIDTH", width).replace("SLICE", slice_line or "pass")},
                                "0.0.0+toy")


def rows(root: Path) -> dict:
    rep = AuditReport(str(root), "toy", "test", engine="sglang")
    check_expand_scatter(Program(SourceIndex(root), PACKAGE), rep)
    return {r.id: r for r in rep.rows}


@pytest.mark.parametrize("width", ["decode_length + 1", "self.speculative_step_id + 2"])
def test_sliced_slots_fit_the_row(tmp_path, width):
    got = rows(package(tmp_path, width, SLICED))
    assert set(got) == {GRAPH, EAGER}, list(got)
    assert got[GRAPH].status == MATCHED, got[GRAPH].detail
    assert got[EAGER].status == MATCHED, got[EAGER].detail   # num_steps slots into num_steps columns


def test_every_step_slot_into_the_step_row_is_a_crash(tmp_path):
    """sglang 0.5.7 to 0.5.12.post1: all num_steps slots scattered into a (step + 1) + 1-wide row."""
    row = rows(package(tmp_path, "decode_length + 1", ""))[GRAPH]
    assert row.status == CRASH
    x = row.counterexample
    assert 0 <= x["last_page_len"] < x["page_size"] and 0 <= x["step"] < x["num_steps"]
    assert spec.expand_scatter_columns(x["last_page_len"], x["num_steps"], x["page_size"]) > \
        spec.expand_page_table_width(x["step"] + 1)
    assert "fill_expand" in row.detail and "RuntimeError" in row.detail and "out of bounds" in row.evidence


def test_untraced_width_is_unknown(tmp_path):
    row = rows(package(tmp_path, "self.mystery_width", SLICED))[GRAPH]
    assert row.status == UNKNOWN
