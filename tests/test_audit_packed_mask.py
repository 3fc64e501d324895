"""The packed-mask audit (`consumer.packed_mask` rows) on small sglang-shaped packages written here: a
sync-free plan that packs the verify mask eight cells a byte into its wrapper's `custom_mask_buf`
(by a Triton packer of the package's own), installed on a backend's target-verify graph wrappers
whose mask buffer is one allocation handed on in a `**extra` dict.  A buffer of `max_num_tokens * C`
bytes holds only with room for the draft tokens (a tree longer than seven contexts overflows it),
and the core proves it for every context at least as long as the tree; one byte per context column
and request is refuted: a crash behind the host assert, an overrun without it; the spec's size is
matched; each finding is replayed by the package's packer under the checked interpreter.  An
install outside target verify has no row."""

from __future__ import annotations

from pathlib import Path

from specbound import spec
from specbound.audit.report import CRASH, HOLDS_ONLY_IF, MATCHED, OVERRUN
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.packed_mask import check_packed_masks
from specbound.engines.sglang.testing import audit_rows, write_sglang_package

PACKER = """
import triton
import triton.language as tl


@triton.jit
def _toy_pack_kernel(mask, kv_indptr, packed_indptr, output, Q: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    byte = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    first = tl.load(kv_indptr + row)
    cells = (tl.load(kv_indptr + row + 1) - first) * Q
    bit0 = tl.load(mask + first * Q + byte * 8, byte * 8 < cells, other=0)
    start = tl.load(packed_indptr + row)
    tl.store(output + start + byte, bit0.to(tl.uint8), byte < (cells + 7) // 8)


def toy_pack_into(mask, kv_indptr, packed_indptr, output, *, batch_size, query_width, max_kv_len):
    _toy_pack_kernel[(batch_size, triton.cdiv(query_width * max_kv_len, 8 * 64))](
        mask, kv_indptr, packed_indptr, output, Q=query_width, BLOCK=64)
"""

BACKEND = """
from functools import partial

import torch


def quick_plan(self, kv_indptr, kv_lens_host, custom_mask=None, width=None):
    if custom_mask is not None:
        from sglang.kernels.ops.speculative.toy_pack import toy_pack_into

        packed_indptr = torch.zeros(len(kv_lens_host) + 1, dtype=torch.int32)
        packed_indptr[1:] = torch.cumsum((kv_lens_host * width + 7) // 8, dim=0)
        {guard}
        toy_pack_into(custom_mask, kv_indptr, packed_indptr, self._custom_mask_buf,
                      batch_size=len(kv_lens_host), query_width=width, max_kv_len=int(kv_lens_host.max()))


class ToyPrefillWrapper:
    def __init__(self, workspace, layout, use_cuda_graph=False, custom_mask_buf=None):
        self._custom_mask_buf = custom_mask_buf


class ToyInferBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.graph_wrappers = {}

    def init_cuda_graph_state(self, max_bs, max_num_tokens, kv_indices_buf=None):
        self.graph_mask = torch.zeros(({size},), dtype=torch.uint8)

    def _wrappers_for(self, bs, use_mask):
        out = []
        for i in range(2):
            extra = {"custom_mask_buf": self.graph_mask} if use_mask else {}
            out.append(ToyPrefillWrapper(None, "NHD", use_cuda_graph=True, **extra))
        return out

    def capture(self, bs, forward_mode, spec_info):
        made = self._wrappers_for(bs, True)
        self.graph_wrappers[bs] = made
        if {test} and spec_info is not None:
            for w in self.graph_wrappers[bs]:
                w.begin_forward = partial(quick_plan, w)
"""

VERIFY = "forward_mode.is_target_verify()"
GUARD = "assert int(packed_indptr[-1]) <= self._custom_mask_buf.numel()"
ROW = "consumer.packed_mask[ToyInferBackend.graph_mask@"


def rows(root: Path, size: str, test: str = VERIFY, guard: str = GUARD) -> list:
    backend = BACKEND.replace("{size}", size).replace("{test}", test).replace("{guard}", guard)
    pkg = write_sglang_package(root, {"srt/layers/attention/toy_backend.py": backend,
                                      "kernels/ops/speculative/toy_pack.py": PACKER}, "0.0.0+toy")
    return audit_rows(pkg.parent, check_packed_masks, PACKAGE)


def only(got):
    assert len(got) == 1 and got[0].id.startswith(ROW), [(r.id, r.status, r.detail[:160]) for r in got]
    return got[0]


def _packed(cex) -> int:
    return cex["bs"] * spec.packed_mask_request_bytes(cex["num_draft_tokens"], cex["seq_len"])


def test_tokens_times_context_holds_only_with_room_and_fits_every_context_holding_the_tree(tmp_path):
    row = only(rows(tmp_path, "max_num_tokens * self.max_context_len"))   # sglang 0.5.23's FlashInfer buffer
    assert row.status == HOLDS_ONLY_IF, row.detail
    assert "seq_len[b] + num_draft_tokens <= max_context_len" in row.detail
    # the reading "fits whenever n >= 2" is refuted; a context at least the tree's length is enough
    assert "with num_draft_tokens >= 2: refuted" in row.detail
    assert "with max_context_len >= num_draft_tokens: matched" in row.detail
    cex = row.counterexample
    assert _packed(cex) > cex["max_bs"] * cex["num_draft_tokens"] * cex["max_context_len"]
    assert cex["num_draft_tokens"] > 7 * cex["max_context_len"]
    assert row.method == "z3 + checked interpreter" and "out-of-bounds store" in row.detail
    assert "host assert at" in row.detail


def test_one_byte_per_context_column_crashes_behind_the_host_assert(tmp_path):
    row = only(rows(tmp_path, "max_bs * self.max_context_len"))
    assert row.status == CRASH, row.detail
    assert _packed(row.counterexample) > row.counterexample["max_bs"] * row.counterexample["max_context_len"]
    assert row.replay["bytes_packed"] > row.replay["buffer_numel"] and "out-of-bounds store" in row.detail


def test_without_the_host_assert_the_packer_overruns(tmp_path):
    row = only(rows(tmp_path, "max_bs * self.max_context_len", guard="pass"))
    assert row.status == OVERRUN, row.detail
    assert "no host check" in row.detail and "out-of-bounds store" in row.detail


def test_room_for_the_packed_draft_columns_is_matched(tmp_path):
    size = "max_bs * (((self.max_context_len + self.num_draft_tokens) * self.num_draft_tokens + 7) // 8)"
    assert only(rows(tmp_path, size)).status == MATCHED


def test_an_install_outside_target_verify_has_no_row(tmp_path):
    assert rows(tmp_path, "max_bs", test="forward_mode.is_draft_extend_v2()") == []
