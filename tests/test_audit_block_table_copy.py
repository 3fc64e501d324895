"""The block-table copy's rows (`consumer.block_table_copy[...]`) on small sglang-shaped Ascend
backends written here: graph replay refills ``block_tables[:bs, :k]`` from a strided gather of the
``req_to_token`` rows, with the batch's longest length (plus the draft in target verify), with the
longest decode reservation (0.5.23's mirrorless replay), or with the whole row.  A table with the
draft's headroom matches the first; sglang's 0.5.10 table (``ceil(C / P)``) holds only while a
request has room for the draft, 0.5.1's (``C // P``) crashes; a reservation reaching past the
context crashes the mirrorless copy.  The hybrid SWA table, a lookup of the same gathered slots,
is judged with them.  Each finding is replayed with torch's ``copy_``.  The mirrorless finding names where
the backend gives up the host lengths.  A second backend has sglang 0.5.22's decode-context-parallel
tables, filled from the gather a helper returns in a tuple (stride ``page_size * attn_dcp_size``): sized
for their pass they match, and the worker and forward-mode pins are shown to be what keeps the draft
step and the verify lengths out of the other table's copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import spec
from specbound.audit.report import CRASH, HOLDS_ONLY_IF, MATCHED, UNKNOWN
from specbound.engines.sglang.block_table_copy import check_block_table_copies
from specbound.engines.sglang.locate import PACKAGE, NotInstalled, locate
from specbound.engines.sglang.testing import SCHEDULER, audit_rows, reservation_files, write_sglang_package

# what every toy backend here reads from the model runner
INIT = """    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.page_size = model_runner.page_size
        self.speculative_num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
"""
BACKEND = """
import torch


class ForwardMetadata:
    block_tables = None


class ToyAscendBackend:
{init}
    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.graph_metadata = {"block_tables": torch.empty((max_bs, {width}), dtype=torch.int32)}
        if self.is_hybrid_swa:
            self.graph_metadata["block_tables_swa"] = torch.empty((max_bs, {width}), dtype=torch.int32)

    def init_forward_metadata_capture_cuda_graph(self, bs):
        metadata = ForwardMetadata()
        metadata.block_tables = self.graph_metadata["block_tables"][:bs, :]
        if self.is_hybrid_swa:
            metadata.block_tables_swa = self.graph_metadata["block_tables_swa"][:bs, :]
        self.graph_metadata[bs] = metadata

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens_cpu, forward_mode,
                                                max_seq_len_host=None):
        metadata = self.graph_metadata[bs]
        if seq_lens_cpu is not None:
            lens = seq_lens_cpu[:bs].int()
            if forward_mode.is_target_verify():
                lens = lens + self.speculative_num_draft_tokens
            max_len = lens.max().item()
            max_seq_pages = (max_len + self.page_size - 1) // self.page_size
            if self.is_hybrid_swa:
                full_page_locs = self.req_to_token[req_pool_indices[:bs], 0 : max_len : self.page_size]
                swa_page_table = self.full_to_swa_index_mapping[full_page_locs] // self.page_size
                metadata.block_tables_swa[:bs, :max_seq_pages].copy_(swa_page_table)
            metadata.block_tables[:bs, :max_seq_pages].copy_(
                self.req_to_token[req_pool_indices[:bs], 0 : max_len : self.page_size] // self.page_size
            )
        elif max_seq_len_host is not None:
            max_len = max_seq_len_host + self.speculative_num_draft_tokens
            max_seq_pages = (max_len + self.page_size - 1) // self.page_size
            metadata.block_tables[:bs, :max_seq_pages].copy_(
                self.req_to_token[req_pool_indices[:bs], 0 : max_len : self.page_size] // self.page_size
            )
        else:
            total_pages = min(
                metadata.block_tables.shape[1],
                (self.req_to_token.shape[1] + self.page_size - 1) // self.page_size,
            )
            metadata.block_tables[:bs, :total_pages].copy_(
                self.req_to_token[req_pool_indices[:bs], 0 : total_pages * self.page_size : self.page_size]
                // self.page_size
            )
"""
HEADROOM = "(self.max_context_len + self.page_size - 1 + self.speculative_num_draft_tokens) // self.page_size"
CONTEXT_PAGES = "(self.max_context_len + self.page_size - 1) // self.page_size"    # sglang 0.5.10
WHOLE_PAGES = "self.max_context_len // self.page_size"                              # sglang 0.5.1
BACKEND_FILE = "srt/hardware_backend/npu/attention/ascend_backend.py"


def rows(root: Path, width: str, reservation: dict | None = None, method: str = "") -> dict:
    """The rows by the copy's branch: "swa" (the hybrid SWA table, with the lengths), "lengths",
    "allocated" (max_seq_len_host), "row" (the whole row).  ``method``: one more method of the
    backend (placed after the copies, so their lines stay)."""
    files = {BACKEND_FILE: BACKEND.replace("{init}", INIT).replace("{width}", width) + method,
             **(reservation or {})}
    write_sglang_package(root, files, "0.0.0+toy")
    got = audit_rows(root, check_block_table_copies, PACKAGE)
    lines = {line: branch for branch, line in zip(("swa", "lengths", "allocated", "row"), _copy_lines())}
    out = {lines[int(r.id.rsplit(":", 1)[1].rstrip("]"))]: r for r in got}
    assert len(out) == len(got) == 4, [(r.id, r.status) for r in got]
    return out


def _copy_lines() -> list:
    return [i for i, line in enumerate(BACKEND.replace("{init}", INIT).splitlines(), 1) if ".copy_(" in line]


def _fits(x: dict, length: int, table_width: int) -> bool:
    """The spec's contract at a counterexample's values."""
    page = x["page_size"]
    return spec.block_table_copy_fits(spec.cdiv(length, page), length, page, table_width, x["row_width"])


def test_a_table_with_the_drafts_headroom_matches_every_branch_but_the_reservations(tmp_path):
    got = rows(tmp_path, HEADROOM, reservation_files(reserve="3", aligned=False))
    assert got["lengths"].status == MATCHED, got["lengths"].detail
    assert got["swa"].status == MATCHED and "block_tables_swa" in got["swa"].id, got["swa"].detail
    assert got["row"].status == MATCHED, got["row"].detail
    # a reservation that never passes the context (3 slots past a committed length <= C - 4)
    assert got["allocated"].status == MATCHED, got["allocated"].detail
    # rounded up to whole pages, the same 3 slots pass it
    assert rows(tmp_path / "aligned", HEADROOM, reservation_files(reserve="3"))["allocated"].status == CRASH


def test_a_table_of_the_context_holds_only_while_a_request_has_room_for_the_draft(tmp_path):
    got = rows(tmp_path, CONTEXT_PAGES)
    # the hybrid SWA table is a lookup of the same gathered slots: the same columns, the same verdict
    assert got["swa"].status == HOLDS_ONLY_IF, got["swa"].detail
    row = got["lengths"]
    assert row.status == HOLDS_ONLY_IF and "max(seq_lens) + n <= max_context_len" in row.detail, row.detail
    x = row.counterexample
    c, tokens, page = x["max_context_len"], x["num_draft_tokens"], x["page_size"]
    assert x["max(seq_lens)"] <= c - 1 and x["max(seq_lens)"] + tokens > c
    assert not _fits(x, x["max(seq_lens)"] + tokens, spec.cdiv(c, page))
    assert "raises RuntimeError" in row.detail and row.method == "z3 + torch"


def test_a_table_of_whole_context_pages_crashes_even_with_room(tmp_path):
    row = rows(tmp_path, WHOLE_PAGES)["lengths"]
    assert row.status == CRASH and "even with the longest request's length within the context" in row.detail
    assert "raises RuntimeError" in row.detail, row.detail


def test_a_decode_reservation_past_the_context_crashes_the_mirrorless_copy(tmp_path):
    row = rows(tmp_path, HEADROOM, reservation_files())["allocated"]
    assert row.status == CRASH and "decode reservation reaches past the context" in row.detail, row.detail
    x = row.counterexample
    c, page, tokens = x["max_context_len"], x["page_size"], x["num_draft_tokens"]
    reserve = 2 * max(x["topk"] * x["num_steps"], tokens)
    at = x["kv_committed_len at that reservation"]
    assert 0 <= at <= c - 4 and x["max(kv_allocated_len)"] == spec.decode_reservation_end(at, reserve, page)
    assert not _fits(x, x["max(kv_allocated_len)"] + tokens, (c + page - 1 + tokens) // page)
    assert "raises RuntimeError" in row.detail
    # sglang's MTP choice for DeepSeek at a 128-token page and a 128K context, by hand: a reservation of
    # 2 * max(1 * 3, 4) = 8 slots at 131065 ends at 131073, rounded up to 131200; + 4 tokens gathers
    # cdiv(131204, 128) = 1026 pages from a row at least 131201 wide, into (131072 + 127 + 4) // 128 = 1025 columns
    # (131064 ends at 131072: 1025 pages, no crash)
    assert "kv_committed_len = 131065 (C - 7) crashes whenever the req_to_token row is at least 131201" \
        in row.detail


def test_the_mirrorless_finding_says_where_the_backend_gives_up_the_host_lengths(tmp_path):
    row = rows(tmp_path, HEADROOM, reservation_files())["allocated"]
    assert "no opt-out of the host copy of seq_lens found" in row.detail, row.detail
    opt_out = """
    def _host_lengths(self):
        if not envs.NEEDS_CPU_SEQ_LENS.get():
            self.needs_cpu_seq_lens = False
"""
    row = rows(tmp_path / "opt_out", HEADROOM, reservation_files(), method=opt_out)["allocated"]
    line = (BACKEND.replace("{init}", INIT) + opt_out).splitlines().index("            self.needs_cpu_seq_lens = False") + 1
    assert row.status == CRASH
    assert "which the backend gives up at" in row.detail, row.detail
    assert f"{BACKEND_FILE}:{line} under `not envs.NEEDS_CPU_SEQ_LENS.get()`" in row.detail, row.detail


def test_without_the_schedulers_bound_the_mirrorless_copy_is_not_judged(tmp_path):
    loose = SCHEDULER.replace("self.max_req_len - input_len - 1", "self.max_req_len - input_len")
    row = rows(tmp_path, HEADROOM, reservation_files(scheduler=loose))["allocated"]
    assert row.status == UNKNOWN and "scheduler bound" in row.detail, row.detail
    row = rows(tmp_path / "none", HEADROOM)["allocated"]    # no reserve helper at all
    assert row.status == UNKNOWN and "get_alloc_reserve_per_decode" in row.detail, row.detail


# --- decode context parallelism (sglang 0.5.22+): the target worker's own tables, strided by
# page_size * attn_dcp_size and filled from the tuple a helper returns -------------------------

DCP_BACKEND = """
import torch


def get_parallel():
    return None


class ForwardMetadata:
    dcp_block_tables = None
    dcp_spec_block_tables = None


class ToyDcpBackend:
{init}
    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        dcp_page_size = self.page_size * get_parallel().attn_dcp_size
        self.graph_metadata = {
            "dcp_spec_block_tables": torch.zeros((max_bs * self.speculative_num_draft_tokens, {spec_width})),
            "dcp_block_tables": torch.zeros((max_bs, {plain_width})),
        }

    def init_forward_metadata_capture_cuda_graph(self, bs):
        metadata = ForwardMetadata()
        metadata.dcp_block_tables = self.graph_metadata["dcp_block_tables"][:bs]
        metadata.dcp_spec_block_tables = self.graph_metadata["dcp_spec_block_tables"][
            : bs * self.speculative_num_draft_tokens
        ]
        self.graph_metadata[bs] = metadata

    def _lens_and_tables(self, kv_lens_cpu, req_pool_indices, is_spec=False):
        parallel = get_parallel()
        page_stride = self.page_size * parallel.attn_dcp_size
        max_len = int(kv_lens_cpu.max().item()) if kv_lens_cpu.numel() else 0
        tables = (self.req_to_token[req_pool_indices, :max_len:page_stride] // page_stride).to(torch.int32)
        if is_spec:
            tables = tables.repeat_interleave(self.speculative_num_draft_tokens, dim=0)
        return kv_lens_cpu, tables

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens_cpu, forward_mode, spec_info):
        metadata = self.graph_metadata[bs]
        {reassigned}
        kv_lens_cpu = seq_lens_cpu[:bs].int()
        if forward_mode.is_target_verify():
            kv_lens_cpu = kv_lens_cpu + self.speculative_num_draft_tokens
        elif forward_mode.is_decode_or_idle() and spec_info is not None:
            kv_lens_cpu = kv_lens_cpu + self.speculative_step_id + 1
        if get_parallel().dcp_enabled and {worker_test}:
            if forward_mode.is_target_verify():
                lens, spec_tables = self._lens_and_tables(kv_lens_cpu, req_pool_indices[:bs], is_spec=True)
                pages = spec_tables.shape[1]
                metadata.dcp_spec_block_tables[:, :pages].copy_(spec_tables)
            else:
                lens, tables = self._lens_and_tables(kv_lens_cpu, req_pool_indices[:bs])
                pages = tables.shape[1]
                metadata.dcp_block_tables[:bs, :pages].copy_(tables)
"""
DCP_PAGE = "dcp_page_size"
DCP_SPEC = f"(self.max_context_len + self.page_size - 1 + self.speculative_num_draft_tokens + {DCP_PAGE} - 1) // {DCP_PAGE}"
DCP_PLAIN = f"(self.max_context_len + self.page_size - 1 + {DCP_PAGE} - 1) // {DCP_PAGE}"   # sglang 0.5.23's


def dcp_rows(root: Path, spec_width=DCP_SPEC, plain_width=DCP_PLAIN, worker_test="not self.is_draft_worker",
             reassigned="pass") -> dict:
    """The rows by table: "spec" (target verify) and "plain" (the other modes)."""
    source = DCP_BACKEND.replace("{init}", INIT).replace("{spec_width}", spec_width) \
        .replace("{plain_width}", plain_width).replace("{worker_test}", worker_test).replace("{reassigned}", reassigned)
    write_sglang_package(root, {BACKEND_FILE: source}, "0.0.0+toy")
    got = audit_rows(root, check_block_table_copies, PACKAGE)
    out = {("spec" if "dcp_spec_block_tables" in r.id else "plain"): r for r in got}
    assert len(out) == len(got) == 2, [(r.id, r.status) for r in got]
    return out


def test_dcp_tables_sized_for_their_pass_match(tmp_path):
    got = dcp_rows(tmp_path)
    for row in got.values():
        assert row.status == MATCHED, row.detail
    # the verify table's copy reads the target-verify lengths only; neither reads the draft worker's step
    assert "L = max(seq_lens) + n" in got["spec"].detail and "+ step" not in got["spec"].detail
    assert "+ n" not in got["plain"].detail and "+ step" not in got["plain"].detail, got["plain"].detail


def test_a_dcp_verify_table_without_the_drafts_headroom_holds_only_if(tmp_path):
    row = dcp_rows(tmp_path, spec_width=f"(self.max_context_len + {DCP_PAGE} - 1) // {DCP_PAGE}")["spec"]
    assert row.status == HOLDS_ONLY_IF and "max(seq_lens) + n <= max_context_len" in row.detail, row.detail
    x = row.counterexample
    stride = x["page_size"] * x["attn_dcp_size"]
    length = x["max(seq_lens)"] + x["num_draft_tokens"]
    assert x["max(seq_lens)"] <= x["max_context_len"] - 1 < length - 1
    assert not spec.block_table_copy_fits(spec.strided_gather_pages(length, stride, x["row_width"]), length, stride,
                                          spec.cdiv(x["max_context_len"], stride), x["row_width"])
    assert "raises RuntimeError" in row.detail and row.method == "z3 + torch"


def test_the_worker_and_mode_tests_are_what_keep_other_passes_out_of_a_dcp_copy(tmp_path):
    # without the target-worker guard the draft worker's step reaches the plain table's copy
    row = dcp_rows(tmp_path / "any_worker", worker_test="True")["plain"]
    assert row.status == HOLDS_ONLY_IF and "1 + max(seq_lens) + step <= max_context_len" in row.detail, row.detail
    # a forward_mode reassigned in the function is not taken to read the same at both tests:
    # the target-verify lengths then reach the plain table's copy too
    row = dcp_rows(tmp_path / "reassigned", reassigned="forward_mode = forward_mode")["plain"]
    assert row.status == HOLDS_ONLY_IF and "max(seq_lens) + n <= max_context_len" in row.detail, row.detail


def test_a_dcp_helper_whose_gather_is_not_recognised_is_unknown_and_one_without_the_row_has_no_row(tmp_path):
    gather = "self.req_to_token[req_pool_indices, :max_len:page_stride]"
    source = DCP_BACKEND.replace("{init}", INIT).replace("{spec_width}", DCP_SPEC).replace("{plain_width}", DCP_PLAIN) \
        .replace("{worker_test}", "not self.is_draft_worker").replace("{reassigned}", "pass")
    assert gather in source
    # an offset gather (`page_stride - 1::page_stride`) is not the strided gather the contract describes
    write_sglang_package(tmp_path / "offset", {BACKEND_FILE: source.replace(
        gather, "self.req_to_token[req_pool_indices][:, page_stride - 1 :: page_stride]")}, "0.0.0+toy")
    got = audit_rows(tmp_path / "offset", check_block_table_copies, PACKAGE)
    assert len(got) == 2 and all(r.status == UNKNOWN and "no strided gather" in r.detail for r in got), \
        [(r.id, r.status, r.detail) for r in got]
    # a helper that never reads req_to_token fills its table from something else: not a block-table copy
    write_sglang_package(tmp_path / "other", {BACKEND_FILE: source.replace(gather, "self.cached_tables")}, "0.0.0+toy")
    assert audit_rows(tmp_path / "other", check_block_table_copies, PACKAGE) == []


def test_the_installed_sglangs_ascend_copies():
    """sglang 0.5.23 (CI installs it): the mirrorless copy crashes, opt-in at the line the release
    gives the host lengths up; the DCP tables, read through the helper's tuple, match."""
    try:
        root = locate().root
    except NotInstalled:
        pytest.skip("sglang is not installed")
    got = audit_rows(root, check_block_table_copies, PACKAGE)
    mirrorless = [r for r in got if r.status == CRASH and "max(kv_allocated_len)" in r.detail]
    assert mirrorless, [(r.id, r.status) for r in got]
    for r in mirrorless:
        assert "which the backend gives up at srt/hardware_backend/npu/attention/ascend_backend.py:" in r.detail
        assert "SGLANG_NPU_ATTN_BACKEND_NEEDS_CPU_SEQ_LENS" in r.detail and "raises RuntimeError" in r.detail
    dcp = [r for r in got if "dcp_" in r.id]
    assert {r.id.split("[", 2)[2].split("]")[0] for r in dcp} == {"dcp_spec_block_tables", "dcp_block_tables"}
    assert all(r.status == MATCHED and "attn_dcp_size" in r.detail for r in dcp), [(r.id, r.status) for r in dcp]
