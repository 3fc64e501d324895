"""The padded target-verify gather audit (`consumer.padded_verify_mask[...]`) on small
sglang-shaped packages written here: a backend whose CUDA-graph replay builds gather indices
from the padded ``seq_lens`` and gathers the real batch's verify mask, guarded (sglang 0.5.23's
form), unguarded, or guarded from the wrong entry.  Each is judged, and each finding replayed
by torch on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound.audit.report import CRASH, DIVERGED, MATCHED, UNKNOWN
from specbound.engines.sglang.testing import audit_rows, write_sglang_package
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.padded_verify import check_padded_verify

# sglang's FlashAttentionBackend._apply_cuda_graph_metadata (target verify, topk > 1), reduced.
BACKEND = """
import torch


class ToyVerifyBackend:
    def apply_graph_metadata(self, bs, seq_lens, spec_info):
        n = self.speculative_num_draft_tokens
        offsets = torch.arange(n).unsqueeze(0)
        cols = offsets.expand(seq_lens.numel(), -1) + seq_lens.unsqueeze(1)
        cum_len = torch.nn.functional.pad(torch.cumsum((seq_lens + n).repeat_interleave(n), dim=0), (1, 0))[:-1]
        mask_extraction_indices = (cols.repeat_interleave(n, dim=0) + cum_len[:, None]).view(1, -1)
        {guard}
        return spec_info.custom_mask[mask_extraction_indices].view(-1, n)

    def init_forward_metadata(self, forward_batch):
        idx = forward_batch.seq_lens + 1
        return forward_batch.spec_info.custom_mask[idx]
"""
GUARDED = "mask_extraction_indices[:, spec_info.positions.numel() * self.speculative_num_draft_tokens :].fill_(0)"
ROW = "consumer.padded_verify_mask[ToyVerifyBackend@"


def rows(root: Path, guard: str) -> list:
    write_sglang_package(root, {"srt/layers/attention/toy_verify.py": BACKEND.replace("{guard}", guard)}, "0.0.0+toy")
    got = audit_rows(root, check_padded_verify, PACKAGE)
    assert all(r.id.startswith(ROW) for r in got), [r.id for r in got]
    return got


def only(got: list):
    assert len(got) == 1, [(r.id, r.status) for r in got]   # the eager gather is never padded: no row
    return got[0]


def test_sglang_0_5_23_guard_matches(tmp_path):
    row = only(rows(tmp_path, GUARDED))
    assert row.status == MATCHED and "raw_bs" in row.detail, row.detail


@pytest.mark.parametrize("guard", ["pass", "mask_extraction_indices[:, bs * self.speculative_num_draft_tokens * self.speculative_num_draft_tokens :].fill_(0)"])
def test_padded_rows_gathered_past_the_mask_crash(tmp_path, guard):
    """No guard, or one zeroing only past the captured size: a padded row reads past the mask."""
    row = only(rows(tmp_path, guard))
    assert row.status == CRASH, row.detail
    x = row.counterexample
    assert x["raw_bs"] < x["bs"]
    assert "IndexError" in row.detail and row.replay["seq_lens"][x["raw_bs"]:] == [1] * (x["bs"] - x["raw_bs"])


def test_guard_per_token_drops_real_entries(tmp_path):
    """positions.numel() without the factor n zeroes real requests' entries: wrong, not out of range."""
    row = only(rows(tmp_path, "mask_extraction_indices[:, spec_info.positions.numel() :].fill_(0)"))
    assert row.status == DIVERGED, row.detail
    assert "real entries read another cell" in row.detail


def test_guard_with_zero_and_shape_spelling_matches(tmp_path):
    """Spelled with zero_() and positions.shape[0]: the same guard."""
    guard = ("mask_extraction_indices[:, spec_info.positions.shape[0] * self.speculative_num_draft_tokens :]"
             ".zero_()")
    assert only(rows(tmp_path, guard)).status == MATCHED


def test_guard_not_read_is_unknown_never_matched(tmp_path):
    row = only(rows(tmp_path, "mask_extraction_indices[:, self.live_entries() :].fill_(0)"))
    assert row.status == UNKNOWN


def test_guard_after_the_gather_does_not_count(tmp_path):
    late = BACKEND.replace("{guard}", "pass").replace(
        "        return spec_info.custom_mask[mask_extraction_indices].view(-1, n)",
        "        out = spec_info.custom_mask[mask_extraction_indices].view(-1, n)\n        " + GUARDED + "\n"
        "        return out")
    write_sglang_package(tmp_path, {"srt/layers/attention/toy_verify.py": late}, "0.0.0+toy")
    assert only(audit_rows(tmp_path, check_padded_verify, PACKAGE)).status == CRASH
