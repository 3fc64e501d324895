"""The plan-copy audit (`consumer.plan_copy` rows) on small sglang-shaped packages written here: a
sync-free plan that copies the verify kv-index stream into its wrapper's buffer, installed on a
backend's target-verify graph wrappers, whose buffer is one allocation of the backend.  A buffer
of `max_num_tokens * C` entries holds only with room for the draft tokens (a one-token tree at
the context overflows it) and is matched for every tree of two or more tokens; one context for the
whole graph crashes; the spec's size is matched; each finding is replayed by torch's copy.  An
install outside target verify has no row."""

from __future__ import annotations

from pathlib import Path

from specbound import spec
from specbound.audit.report import CRASH, HOLDS_ONLY_IF, MATCHED
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.plan_copy import check_plan_copies
from specbound.engines.sglang.testing import audit_rows, write_sglang_package

BACKEND = """
from functools import partial

import torch


def quick_plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len):
    self._qo_indptr_buf.copy_(qo_indptr)
    self._paged_kv_indices_buf[: len(paged_kv_indices)].copy_(paged_kv_indices)


class ToyPrefillWrapper:
    def __init__(self, workspace, layout, use_cuda_graph=False, paged_kv_indices_buf=None):
        self._paged_kv_indices_buf = paged_kv_indices_buf


class ToyInferBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.graph_wrappers = {}

    def init_cuda_graph_state(self, max_bs, max_num_tokens, kv_indices_buf=None):
        self.graph_kv = [torch.zeros(({size},), dtype=torch.int32) for _ in range(2)]

    def _wrappers_for(self, bs):
        return [ToyPrefillWrapper(None, "NHD", use_cuda_graph=True, paged_kv_indices_buf=self.graph_kv[i])
                for i in range(2)]

    def capture(self, bs, forward_mode, spec_info):
        made = self._wrappers_for(bs)
        self.graph_wrappers[bs] = made
        if {test} and spec_info is not None:
            for w in self.graph_wrappers[bs]:
                w.begin_forward = partial(quick_plan, w)
"""

VERIFY = "forward_mode.is_target_verify()"
ROW = "consumer.plan_copy[ToyInferBackend.graph_kv@"


def rows(root: Path, size: str, test: str = VERIFY) -> list:
    pkg = write_sglang_package(root, {"srt/layers/attention/toy_backend.py":
                                      BACKEND.replace("{size}", size).replace("{test}", test)}, "0.0.0+toy")
    return audit_rows(pkg.parent, check_plan_copies, PACKAGE)


def only(got):
    assert len(got) == 1 and got[0].id.startswith(ROW), [(r.id, r.status, r.detail[:160]) for r in got]
    return got[0]


def test_tokens_times_context_holds_only_with_room_and_fits_every_tree_of_two_tokens(tmp_path):
    row = only(rows(tmp_path, "max_num_tokens * self.max_context_len"))   # sglang 0.5.23's FlashInfer buffer
    assert row.status == HOLDS_ONLY_IF, row.detail
    assert "seq_len[b] + num_draft_tokens <= max_context_len" in row.detail
    assert "with num_draft_tokens >= 2 and max_context_len >= 2: matched" in row.detail
    cex = row.counterexample
    copied = spec.plan_copy_kv_indices_len(cex["bs"], cex["num_draft_tokens"], cex["seq_lens_sum"])
    assert copied > cex["max_bs"] * cex["num_draft_tokens"] * cex["max_context_len"]
    assert row.method == "z3 + torch" and "raises RuntimeError" in row.detail


def test_one_context_for_the_whole_graph_crashes(tmp_path):
    row = only(rows(tmp_path, "self.max_context_len"))
    assert row.status == CRASH, row.detail
    assert row.replay["entries_copied"] > row.replay["buffer_numel"] and "raises RuntimeError" in row.detail


def test_room_for_the_draft_tokens_is_matched(tmp_path):
    assert only(rows(tmp_path, "max_bs * (self.max_context_len + self.num_draft_tokens)")).status == MATCHED


def test_an_install_outside_target_verify_has_no_row(tmp_path):
    assert rows(tmp_path, "self.max_context_len", test="forward_mode.is_draft_extend_v2()") == []
