"""The decode reservation's rows (`consumer.req_to_token_reservation[...]`) on small sglang-shaped
packages written here, and on the installed sglang: a pool builder passes ``max_context_len =
context_len + extra``; each decode step reserves ``kv_committed_len + get_alloc_reserve_per_decode()``
slots of the row, for a request the scheduler keeps decoding (``kv_committed_len <= C - 3`` by its
``max_req_len`` and ``max_new_tokens`` bounds).  A headroom of the reserve is green; sglang's ``4 +
num_draft_tokens`` is red even for a chain draft.  The installed release's rows, and sglang's own store
kernel writing past the row, are checked with the draft read's rows (one audit of the installed
sglang: tests/test_audit_req_to_token_row.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import spec
from specbound.audit.report import MATCHED, NOT_PRESENT, OVERRUN, UNKNOWN
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.req_to_token_row import check_req_to_token_rows
from specbound.engines.sglang.testing import CONFIGURATOR, POOL, SCHEDULER, SGLANG_RESERVE, audit_rows, \
    reservation_files, write_sglang_package

SGLANG_ROW = "4 + (max_speculative_num_draft_tokens() or 0)"
RESERVE_ROW = "get_alloc_reserve_per_decode()"          # the row holds a whole reservation past the context


def rows(root: Path, extra: str, reserve: str | None = SGLANG_RESERVE, scheduler: str = SCHEDULER,
         layout: str = "", aligned: bool = True, more: dict | None = None) -> list:
    """The reservation rows of one layout: "" (page size 1) or "_paged"."""
    files = {**reservation_files(extra, reserve, scheduler, aligned), "srt/mem_cache/memory_pool.py": POOL,
             "srt/mem_cache/kv_cache_configurator.py": CONFIGURATOR, **(more or {})}
    write_sglang_package(root, files, "0.0.0+toy")
    got = audit_rows(root, lambda program, rep: check_req_to_token_rows(program, rep, replay=False), PACKAGE)
    return [r for r in got if r.id.startswith(f"consumer.req_to_token_reservation{layout}[")]


def only(got: list):
    assert len(got) == 1, [(r.id, r.status) for r in got]
    return got[0]


def test_a_row_holding_a_whole_reservation_past_the_context_matches(tmp_path):
    row = only(rows(tmp_path, RESERVE_ROW))
    assert row.status == MATCHED and "scheduler_bound" in row.detail, row.detail


def test_sglangs_headroom_is_written_past_by_the_reservation_even_for_a_chain_draft(tmp_path):
    row = only(rows(tmp_path, SGLANG_ROW))
    assert row.status == OVERRUN, row.detail
    x = row.counterexample
    c, k, d, tokens, committed = (x[key] for key in ("max_context_len", "topk", "num_steps", "num_draft_tokens",
                                                       "kv_committed_len"))
    assert 0 <= committed <= c - 3 and (k > 1 or tokens == d + 1)
    reserve = 2 * max(k * d, tokens)
    assert spec.decode_reservation_end(committed, reserve, 1) > c + 4 + tokens        # the write, by the spec
    # a chain draft (topk 1, num_steps 7, num_draft_tokens 8): 2 * 8 past C - 3 is C + 13 > C + 12
    assert "even a chain draft (topk 1) with num_draft_tokens = 8" in row.detail
    assert "every request with kv_committed_len >= C - 27" in row.detail             # sglang's Llama choice


def test_without_the_schedulers_bound_the_row_is_unknown_not_a_pass_or_an_alarm(tmp_path):
    loose = SCHEDULER.replace("self.max_req_len - input_len - 1", "self.max_req_len - input_len")
    row = only(rows(tmp_path, RESERVE_ROW, scheduler=loose))
    assert row.status == UNKNOWN and "bound on the committed length" in row.detail


def test_a_release_without_the_reserve_helper_says_so(tmp_path):
    row = only(rows(tmp_path, SGLANG_ROW, reserve=None))
    assert row.status == NOT_PRESENT and "get_alloc_reserve_per_decode" in row.detail


# sglang's page > 1 headroom from 0.5.16 on: the reserve plus the page the alignment may add
PAGED_ROW = "max(4 + (max_speculative_num_draft_tokens() or 0), get_alloc_reserve_per_decode() + page - 1)"


def test_a_page_aligned_reservation_needs_a_page_more_than_the_reserve(tmp_path):
    row = only(rows(tmp_path / "narrow", SGLANG_ROW, layout="_paged"))
    assert row.status == OVERRUN and "page aligned" in row.detail, row.detail
    x = row.counterexample
    assert x["page_size"] >= 2 and spec.decode_reservation_end(
        x["kv_committed_len"], 2 * max(x["topk"] * x["num_steps"], x["num_draft_tokens"]), x["page_size"]) \
        > x["max_context_len"] + 4 + x["num_draft_tokens"]
    # the reserve alone is enough only where the reservation is not rounded up (0.5.13-0.5.15)
    assert only(rows(tmp_path / "unaligned", RESERVE_ROW, layout="_paged", aligned=False)).status == MATCHED
    row = only(rows(tmp_path / "aligned", RESERVE_ROW, layout="_paged"))
    assert row.status == OVERRUN, row.detail
    assert only(rows(tmp_path / "wide", PAGED_ROW, layout="_paged")).status == MATCHED


# A unified memory pool (built only with --enable-unified-memory) and that switch's handler.
UNIFIED = """
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool


def init_unified_pools(*, max_num_reqs, model_context_len, extra_max_context_len):
    return ReqToTokenPool(size=max_num_reqs, max_context_len=model_context_len + extra_max_context_len, device="x")


class UnifiedConfigurator:
    def _init_unified_pools(self, *, max_num_reqs):
        return init_unified_pools(max_num_reqs=max_num_reqs, model_context_len=self.model_config.context_len,
                                  extra_max_context_len=4 + self.speculative_num_draft_tokens)
"""
HANDLER = """
def handle_unified_memory_pool(cfg):
    if not cfg.enable_unified_memory:
        return
    assert {test}
"""


@pytest.mark.parametrize("test, reserved", [
    ("cfg.speculative_algorithm is None", False),        # 0.5.17 and before: no draft on these pools
    ("cfg.speculative_eagle_topk in (None, 1)", True),   # 0.5.19 on: chain drafts reserve into them
])
def test_a_unified_pool_is_reserved_into_only_where_sglang_lets_a_draft_run_on_it(tmp_path, test, reserved):
    more = {"srt/mem_cache/unified_memory_pool.py": UNIFIED,
            "srt/arg_groups/kv_cache_hook.py": HANDLER.replace("{test}", test)}
    got = [r for layout in ("", "_paged") for r in rows(tmp_path, SGLANG_ROW, layout=layout, more=more)
           if "unified_memory_pool.py" in r.id]
    assert len(got) == 2, [r.id for r in got]
    for row in got:
        if reserved:   # a chain of 8 tokens at page size 1; the page-aligned reservation at page size > 1
            assert row.status == OVERRUN and row.counterexample["topk"] == 1, row.detail
            assert "refuses a draft tree (topk > 1) with --enable-unified-memory" in row.detail
        else:
            assert row.status == MATCHED and "no draft reserves into this pool" in row.detail, row.detail
