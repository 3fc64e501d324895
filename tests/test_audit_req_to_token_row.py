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
from specbound.audit.report import MATCHED, NOT_PRESENT, OVERREAD, UNKNOWN, AuditReport
from specbound.engines.sglang.bindings import BINDINGS
from specbound.engines.sglang.locate import PACKAGE, NotInstalled, locate
from specbound.engines.sglang.req_to_token_row import check_req_to_token_rows
from specbound.engines.sglang.testing import audit_rows, write_sglang_package

# sglang 0.5.23's allocation_sizing, reduced: the headroom is the expression under test.
SIZING = """
from sglang.srt.runtime_context import get_spec, max_speculative_num_draft_tokens


def get_req_to_token_extra_context_len() -> int:
    spec = get_spec()
    extra = {extra}
    return extra
"""

POOL = """
class ReqToTokenPool:
    def __init__(self, size, max_context_len, device):
        self.max_context_len = max_context_len
"""

# sglang 0.5.23's KVCacheConfigurator._build_default_req_pool, reduced.
CONFIGURATOR = """
from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool


class KVCacheConfigurator:
    def _build_default_req_pool(self, *, max_num_reqs):
        extra_max_context_len = get_req_to_token_extra_context_len()
        return ReqToTokenPool(
            size=max_num_reqs,
            max_context_len=self.model_config.context_len + extra_max_context_len,
            device=self.device,
        )
"""

SGLANG = "4 + (max_speculative_num_draft_tokens() or 0)"                  # every release, page size 1
DRAFT_SLOTS = "4 + spec.speculative_eagle_topk * spec.speculative_num_steps"  # covers C - D + K*D
ROW = "ReqToTokenPool@sglang/srt/mem_cache/kv_cache_configurator.py:"


def rows(root: Path, extra: str, configurator: str = CONFIGURATOR) -> list:
    files = {"srt/mem_cache/allocation_sizing.py": SIZING.replace("{extra}", extra),
             "srt/mem_cache/memory_pool.py": POOL, "srt/mem_cache/kv_cache_configurator.py": configurator,
             "srt/runtime_context.py": "def get_spec():\n    pass\n\n\ndef max_speculative_num_draft_tokens():\n    pass\n"}
    write_sglang_package(root, files, "0.0.0+toy")
    return audit_rows(root, lambda program, rep: check_req_to_token_rows(program, rep, replay=False), PACKAGE)


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


def test_installed_sglang_reads_past_its_rows_on_its_own_kernel():
    """The installed release (0.5.23 in CI): every pool builder passes C + 4 + n, and sglang's
    generate_draft_decode_kv_indices, run at the counterexample with the request in the pool's
    last row, loads past the tensor under the checked interpreter."""
    try:
        root = locate().root
    except NotInstalled:
        pytest.skip("sglang is not installed")
    index = SourceIndex(root)
    rep = AuditReport(str(root), "installed", "test", engine=BINDINGS.engine)
    check_req_to_token_rows(Program(index, PACKAGE), rep, index=index, replay=True)
    assert rep.rows and all(r.status == OVERREAD for r in rep.rows), [(r.id, r.status, r.detail) for r in rep.rows]
    assert any("@srt/mem_cache/kv_cache_configurator.py:" in r.id for r in rep.rows)
    for r in rep.rows:
        assert r.replay["verdict"] == "oob" and "past the end of 'req_to_token'" in r.evidence
        assert r.replay["inputs"]["row_width"] < spec.kv_req_to_token_span(
            r.replay["inputs"]["seq_lens"][0], r.replay["inputs"]["topk"], r.replay["inputs"]["num_steps"], 1)
