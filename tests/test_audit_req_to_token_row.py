"""The req_to_token row audit (`consumer.req_to_token_row[...]`) on small sglang-shaped packages
written here, and on the installed sglang: a pool builder passes ``max_context_len = context_len +
extra`` to the pool, ``extra`` from a sizing helper; the draft decode reads ``seq_len + K*num_steps``
slots of the row for a request with draft room.  Headroom ``K * num_steps`` is green; sglang's
``4 + num_draft_tokens`` is red, with a counterexample and sglang's own kernel reading past the row."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import spec
from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.audit.report import MATCHED, NOT_PRESENT, OVERREAD, OVERRUN, UNKNOWN, AuditReport
from specbound.engines.sglang.bindings import BINDINGS
from specbound.engines.sglang.locate import PACKAGE, NotInstalled, locate
from specbound.engines.sglang.req_to_token_row import check_req_to_token_rows
from specbound.engines.sglang.testing import CONFIGURATOR, CONTEXT, POOL, audit_rows, write_sglang_package

# sglang 0.5.23's allocation_sizing, reduced: the headroom is the expression under test.
SIZING = """
from sglang.srt.runtime_context import get_alloc_page_size, get_spec, max_speculative_num_draft_tokens


def get_req_to_token_extra_context_len() -> int:
    spec = get_spec()
    page = get_alloc_page_size()
    extra = {extra}
    return extra
"""

SGLANG = "4 + (max_speculative_num_draft_tokens() or 0)"                  # every release, page size 1
DRAFT_SLOTS = "4 + spec.speculative_eagle_topk * spec.speculative_num_steps"  # covers C - D + K*D
# Page aligned branches: K branches of the most pages one spans (sglang 0.5.14's page>1 reservation)
PAGED_SLOTS = ("4 + spec.speculative_eagle_topk * ((page - 1 + spec.speculative_num_steps + page - 1) // page) "
               "* page")
ROW = "ReqToTokenPool@sglang/srt/mem_cache/kv_cache_configurator.py:"


def rows(root: Path, extra: str, configurator: str = CONFIGURATOR, layout: str = "", more: dict | None = None) -> list:
    """The rows of one layout: "" (page size 1) or "_paged"."""
    files = {"srt/mem_cache/allocation_sizing.py": SIZING.replace("{extra}", extra),
             "srt/mem_cache/memory_pool.py": POOL, "srt/mem_cache/kv_cache_configurator.py": configurator,
             "srt/runtime_context.py": CONTEXT, **(more or {})}
    write_sglang_package(root, files, "0.0.0+toy")
    got = audit_rows(root, lambda program, rep: check_req_to_token_rows(program, rep, replay=False), PACKAGE)
    return [r for r in got if r.id.startswith(f"consumer.req_to_token_row{layout}[")]


def only(got: list):
    assert len(got) == 1, [(r.id, r.status) for r in got]
    return got[0]


def test_headroom_for_every_branch_of_the_draft_matches(tmp_path):
    row = only(rows(tmp_path, DRAFT_SLOTS))
    assert ROW in row.id and row.status == MATCHED, row.detail
    assert "page_size_one" in row.detail


def test_sglangs_headroom_of_the_tree_size_is_read_past_by_a_request_with_draft_room(tmp_path):
    row = only(rows(tmp_path, SGLANG))
    assert row.status == OVERREAD, row.detail
    x = row.counterexample
    s, k, d, c, tokens = x["seq_len[b]"], x["topk"], x["num_steps"], x["max_context_len"], x["num_draft_tokens"]
    assert x["page_size"] == 1 and 0 <= s and s + d <= c and (k > 1 or tokens == d + 1)
    assert spec.kv_req_to_token_span(s, k, d, 1) > c + 4 + tokens          # the read, by the spec's own formula
    # sglang's own EAGLE choice for Llama (5 steps, topk 4, 8 tokens): C - 5 + 20 > C + 12 from seq_len C - 7 on
    assert "every request with seq_len >= C - 7" in row.detail


def test_a_pool_built_with_the_context_alone_is_read_past(tmp_path):
    assert only(rows(tmp_path, "0")).status == OVERREAD


def test_a_width_the_tracer_cannot_read_is_unknown_not_a_pass(tmp_path):
    row = only(rows(tmp_path, "spec.some_future_headroom()"))
    assert row.status == UNKNOWN and "not traced" in row.detail


def test_no_pool_builder_beside_the_draft_kernel_is_an_unknown_row_not_silence(tmp_path):
    renamed = CONFIGURATOR.replace("max_context_len=self.model_config", "row_width=self.model_config")
    kernel = "def generate_draft_decode_kv_indices(req_pool_indices, req_to_token):\n    pass\n"
    write_sglang_package(tmp_path, {"kernels/ops/speculative/cache_locs.py": kernel})
    row = only(rows(tmp_path, SGLANG, renamed))
    assert row.status == UNKNOWN and "no call building a req_to_token pool" in row.detail


def test_no_pool_builder_and_no_draft_kernel_is_not_present(tmp_path):
    renamed = CONFIGURATOR.replace("max_context_len=self.model_config", "row_width=self.model_config")
    assert only(rows(tmp_path, SGLANG, renamed)).status == NOT_PRESENT


def test_page_aligned_branches_need_whole_pages_per_branch(tmp_path):
    """At page size > 1 a branch starts on its own page: sglang's headroom, and even the contiguous
    draft's K*num_steps, are read past; K branches of the most pages one spans are not."""
    for extra in (SGLANG, DRAFT_SLOTS):
        row = only(rows(tmp_path / extra[:8].replace(" ", "_"), extra, layout="_paged"))
        assert row.status == OVERREAD, (extra, row.detail)
        x = row.counterexample
        s, k, d, c, p = x["seq_len[b]"], x["topk"], x["num_steps"], x["max_context_len"], x["page_size"]
        assert p >= 2 and s + d <= c
        width = c + 4 + (x["num_draft_tokens"] if extra == SGLANG else k * d)
        assert spec.kv_req_to_token_read_end(s, k, d, p) > width       # the kernel's last read, by the spec
        assert "page size 64" in row.detail                           # sglang's own choice, at FlashMLA's page
    row = only(rows(tmp_path / "paged", PAGED_SLOTS, layout="_paged"))
    assert row.status == MATCHED, row.detail
    # the page size read off the server arguments (0.5.14-0.5.16: `server_args.page_size`)
    row = only(rows(tmp_path / "args", PAGED_SLOTS.replace("page", "spec.page_size"), layout="_paged"))
    assert row.status == MATCHED, row.detail


# sglang 0.5.23's unified memory pools, reduced: built only with --enable-unified-memory, their row
# keeps the old headroom; the switch's handler refuses a draft tree.
UNIFIED = """
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.runtime_context import get_spec


class UnifiedHybridReqToTokenPool(ReqToTokenPool):
    pass


def init_unified_mamba_pools(*, max_num_reqs, model_context_len, extra_max_context_len):
    return UnifiedHybridReqToTokenPool(
        size=max_num_reqs,
        max_context_len=model_context_len + extra_max_context_len,
        device="cuda",
    )


class UnifiedConfigurator:
    def _init_unified_mamba_pools(self, *, max_num_reqs):
        extra_max_context_len = 4
        if get_spec().speculative_num_draft_tokens is not None:
            extra_max_context_len += get_spec().speculative_num_draft_tokens
        return init_unified_mamba_pools(max_num_reqs=max_num_reqs, model_context_len=self.model_config.context_len,
                                        extra_max_context_len=extra_max_context_len)
"""
HANDLER = """
def handle_unified_memory_pool(server_args):
    cfg = server_args
    if not cfg.enable_unified_memory:
        return
{body}
"""
CHAIN_ONLY = "    assert cfg.speculative_eagle_topk in (None, 1), 'a linear draft chain only'"
DSPARK_ONLY = ("    assert cfg.speculative_algorithm in (None, {admitted}), 'DSPARK only'\n"
               "    if cfg.speculative_algorithm == 'DSPARK':\n" + "    " + CHAIN_ONLY)


def unified_rows(root: Path, handler_body: str | None) -> list:
    more = {"srt/mem_cache/unified_memory_pool.py": UNIFIED}
    if handler_body is not None:
        more["srt/arg_groups/kv_cache_hook.py"] = HANDLER.replace("{body}", handler_body)
    got = [r for layout in ("", "_paged") for r in rows(root, SGLANG, layout=layout, more=more)]
    return [r for r in got if "[UnifiedHybridReqToTokenPool@" in r.id]


@pytest.mark.parametrize("body, fits", [
    (CHAIN_ONLY, True),                                              # 0.5.19 on
    (DSPARK_ONLY.replace("{admitted}", "'DSPARK'"), True),           # 0.5.18: only DSPARK, and it as a chain
    ("    assert cfg.speculative_algorithm is None, 'no speculative decoding'", True),   # 0.5.17
    (DSPARK_ONLY.replace("{admitted}", "'DSPARK', 'EAGLE'"), False),  # EAGLE admitted, unbounded
    ("    if cfg.speculative_algorithm == 'DSPARK':\n    " + CHAIN_ONLY, False),   # no algorithm assert
    (None, False),                                                   # no handler: no rule assumed
])
def test_unified_pools_are_judged_under_sglangs_own_refusal_of_a_draft_tree(tmp_path, body, fits):
    got = unified_rows(tmp_path, body)
    assert len(got) == 2, [(r.id, r.status) for r in got]
    for row in got:
        if fits:
            assert row.status == MATCHED and "unified_memory_chain_only" in row.detail, row.detail
            assert "srt/arg_groups/kv_cache_hook.py:" in row.detail
        else:
            assert row.status == OVERREAD and "unified_memory_chain_only" not in row.detail, row.detail


def test_a_plain_pool_built_by_a_unified_memory_builder_is_judged_under_the_same_rule(tmp_path):
    """0.5.15-0.5.20's `_init_unified_swa_pools` builds a plain ReqToTokenPool with the old headroom."""
    handler = {"srt/arg_groups/kv_cache_hook.py": HANDLER.replace("{body}", CHAIN_ONLY)}
    builder = CONFIGURATOR.replace("_build_default_req_pool", "_init_unified_swa_pools")
    row = only(rows(tmp_path / "unified", SGLANG, builder, more=handler))
    assert row.status == MATCHED and "unified_memory_chain_only" in row.detail, row.detail
    # the same pool and handler, built by the default builder: no rule applies, and the rows name
    # the two apart (a release matrix keys its tables by the pool's name)
    default = only(rows(tmp_path / "default", SGLANG, more=handler))
    assert default.status == OVERREAD
    assert "[ReqToTokenPool/unified@" in row.id and "[ReqToTokenPool@" in default.id, (row.id, default.id)


def test_installed_sglang_reads_past_its_rows_on_its_own_kernel():
    """The installed release (0.5.23 in CI): every pool builder passes C + 4 + n at page size 1, and
    sglang's generate_draft_decode_kv_indices, run at the counterexample with the request in the
    pool's last row, loads past the tensor under the checked interpreter.  The unified memory pools
    keep that width at every page size, but sglang refuses topk > 1 with them; the other builders
    widen the row at page size > 1 (PR #26972)."""
    try:
        root = locate().root
    except NotInstalled:
        pytest.skip("sglang is not installed")
    index = SourceIndex(root)
    rep = AuditReport(str(root), "installed", "test", engine=BINDINGS.engine)
    check_req_to_token_rows(Program(index, PACKAGE), rep, index=index, replay=True)
    read = [r for r in rep.rows if r.id.startswith("consumer.req_to_token_row")]
    unified = [r for r in read if "[Unified" in r.id]
    paged = [r for r in read if r.id.startswith("consumer.req_to_token_row_paged[") and r not in unified]
    contiguous = [r for r in read if r not in unified and r not in paged]
    assert unified and all(r.status == MATCHED and "unified_memory_chain_only" in r.detail for r in unified)
    assert paged and all(r.status == MATCHED for r in paged), [(r.id, r.status, r.detail) for r in paged]
    assert contiguous and all(r.status == OVERREAD for r in contiguous), [(r.id, r.status) for r in contiguous]
    assert any("@srt/mem_cache/kv_cache_configurator.py:" in r.id for r in contiguous)
    for r in contiguous:
        assert r.replay["verdict"] == "oob" and "past the end of 'req_to_token'" in r.evidence
        assert r.replay["inputs"]["row_width"] < spec.kv_req_to_token_span(
            r.replay["inputs"]["seq_lens"][0], r.replay["inputs"]["topk"], r.replay["inputs"]["num_steps"], 1)
    # the decode reservation's rows (tests/test_audit_req_to_token_reservation.py): every pool, unified ones too
    # (a chain draft of 8 tokens), written past by sglang's own assign_req_to_token_pool
    reserved = [r for r in rep.rows if r.id.startswith("consumer.req_to_token_reservation")]
    assert len(reserved) == len(rep.rows) // 2, [r.id for r in reserved]
    # at page size > 1 sglang widens the row by the reserve plus a page, but not the unified memory pools'
    # (their builders keep 4 + n), which the page-aligned reservation passes even for a short chain
    widened = [r for r in reserved if r.id.startswith("consumer.req_to_token_reservation_paged[") and
               "[Unified" not in r.id]
    assert widened and all(r.status == MATCHED for r in widened), [(r.id, r.status) for r in widened]
    for r in (r for r in reserved if r not in widened):
        assert r.status == OVERRUN and r.replay["verdict"] == "oob", (r.id, r.status, r.detail[:300])
        assert "past the end of 'req_to_token'" in r.evidence
        assert r.replay["inputs"]["end"] > r.replay["inputs"]["row_width"]
