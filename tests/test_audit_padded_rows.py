"""The padded-row audit (`consumer.padded_rows[...]`) on small sglang-shaped packages written
here: a draft-extend graph runner that pads the rows past raw_bs (seq_lens = the backend's
fill, extend_seq_lens = the q width) and a backend that derives each row's KV prefix as
seq_lens - extend_seq_lens.  sglang 0.5.23's forms (clamped, q width added back) are matched;
the bare subtraction with fill 1 is red, and safe again with a fill of num_draft_tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import spec
from specbound.engines.sglang import audit as run
from specbound.audit.extract import SourceIndex
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.padded_rows import check_padded_rows, padding_site
from specbound.audit.program import Program
from specbound.audit.report import DIVERGED, MATCHED, AuditReport
from specbound.engines.sglang.testing import audit_rows, write_sglang_package

# sglang's EAGLEDraftExtendCudaGraphRunner.replay, reduced: the rows past raw_bs are padded.
RUNNER = """
class ToyDraftExtendRunner:
    def replay_prepare(self, buffers, bs, raw_bs):
        if bs != raw_bs:
            buffers.seq_lens.fill_(self.seq_len_fill_value)
            buffers.req_pool_indices.zero_()
            {extend_fill}
"""
EXTEND_FILL = "buffers.extend_seq_lens.fill_(self.captured_req_width)"

# sglang's Triton backend, reduced: the draft-extend prefix of every row, padded ones included.
BACKEND = """
import torch


class ToyBackend:
    def _update_draft_extend_buffers(self, bs, seq_lens, spec_info, num_draft_tokens):
        extend_seq_lens = spec_info.extend_seq_lens_tensor[:bs]
        kv_lens = {prefix}
        return torch.cumsum(kv_lens, dim=0)

    def get_cuda_graph_seq_len_fill_value(self):
        return {fill}
"""
CLAMPED = "torch.clamp(seq_lens[:bs] - extend_seq_lens, min=0).to(torch.int32)"   # 0.5.23's Triton
ADDED = "seq_lens - extend_seq_lens + num_draft_tokens"                           # 0.5.23's FlashMLA shape
BARE = "(seq_lens[:bs] - extend_seq_lens).to(torch.int32)"
PREFIX = "consumer.padded_rows[ToyBackend._update_draft_extend_buffers/draft_extend_prefix@"


# sglang 0.5.23's resolve_draft_extend_seq_len_fill_value, reduced: with a KPool the fill is raised.
RAISE = """

def resolve_fill(attn_backend, captured_req_width):
    fill_value = attn_backend.get_cuda_graph_seq_len_fill_value()
    if attn_backend.dsa_index_kpool > 1:
        fill_value = max(fill_value, captured_req_width + attn_backend.dsa_index_kpool)
    return fill_value
"""

# DSA's KPool draft-extend write plan, reduced: the write starts n keys before seq_lens.
KPOOL_BACKEND = """
class ToyKPoolBackend:
    def _init_kpool_metadata(self, forward_batch, forward_mode):
        if forward_mode.is_draft_extend_v2():
            return (forward_batch.seq_lens - self.speculative_num_draft_tokens, self.dsa_index_kpool)

    def get_cuda_graph_seq_len_fill_value(self):
        return 1
"""


def package(root: Path, prefix: str, fill: str = "1", extend_fill: str = EXTEND_FILL, raise_: str = "") -> Path:
    return write_sglang_package(root, {
        "srt/speculative/toy_runner.py": RUNNER.replace("{extend_fill}", extend_fill) + raise_,
        "srt/layers/attention/toy_backend.py": BACKEND.replace("{prefix}", prefix).replace("{fill}", fill),
        "srt/layers/attention/toy_kpool.py": KPOOL_BACKEND,
    }, "0.0.0+toy")


def only(root: Path, prefix: str = PREFIX):
    got = [r for r in audit_rows(root, check_padded_rows, PACKAGE) if r.id.startswith(prefix)]
    assert len(got) == 1, [(r.id, r.status, r.detail[:160]) for r in audit_rows(root, check_padded_rows, PACKAGE)]
    return got[0]


@pytest.mark.parametrize("prefix", [CLAMPED, ADDED, "(seq_lens - extend_seq_lens).clamp_min(0)"])
def test_clamped_or_widened_prefix_is_matched(tmp_path, prefix):
    row = only(package(tmp_path, prefix))
    assert row.status == MATCHED, row.detail
    assert "srt/speculative/toy_runner.py" in row.subject and "toy_backend.py" in row.subject


def test_bare_prefix_with_fill_one_is_red(tmp_path):
    """The unclamped prefix of a padded row: 1 - n < 0, kv_indptr runs backwards."""
    row = only(package(tmp_path, BARE))
    assert row.status == DIVERGED, row.detail
    x = row.counterexample
    assert x["seq_len_fill"] == 1 and x["num_draft_tokens"] == 2
    assert x["seq_len_fill"] - x["num_draft_tokens"] < 0 <= spec.padded_draft_extend_prefix_len(
        x["seq_len_fill"], x["num_draft_tokens"])
    assert "RuntimeError" in row.detail and row.replay["lengths"] == [0, -1]


def test_bare_prefix_with_a_draft_width_fill_is_matched(tmp_path):
    """aiter's fill (num_draft_tokens when set) keeps even the bare subtraction a length."""
    row = only(package(tmp_path, BARE, fill="1 if self.num_draft_tokens is None else self.num_draft_tokens"))
    assert row.status == MATCHED, row.detail


def test_bare_prefix_with_an_unknown_fill_is_red(tmp_path):
    row = only(package(tmp_path, BARE, fill="self.some_width"))
    assert row.status == DIVERGED and "any fill >= 1" in row.subject


def test_no_padding_no_row(tmp_path):
    """A release whose runner does not pad extend_seq_lens is not this contract."""
    root = package(tmp_path, BARE, extend_fill="pass")
    assert padding_site(Program(SourceIndex(root), PACKAGE)) is None
    assert audit_rows(root, check_padded_rows, PACKAGE) == []


def test_the_audit_runs_the_stage(tmp_path):
    """`specbound audit sglang` reaches the padded rows through its consumer stage."""
    root = package(tmp_path, BARE)
    index = SourceIndex(root)
    rep = AuditReport(str(root), "toy", "test", engine="sglang")
    run._consumers(index, rep, Program(index, PACKAGE), replay=False)
    assert [r.status for r in rep.rows if r.id.startswith(PREFIX)] == [DIVERGED]


KPOOL = "consumer.padded_rows[ToyKPoolBackend._init_kpool_metadata/draft_extend_prefix@"


def test_kpool_write_start_with_the_raised_fill_is_matched(tmp_path):
    """0.5.23: the runner raises the fill to captured_req_width + kpool, so seq_lens - n >= kpool."""
    row = only(package(tmp_path, CLAMPED, raise_=RAISE), KPOOL)
    assert row.status == MATCHED and "raised past n + kpool" in row.subject, row.detail


def test_kpool_write_start_with_fill_one_is_red(tmp_path):
    """The same write plan under a runner that keeps the backend's fill 1: 1 - n < 0."""
    row = only(package(tmp_path, CLAMPED), KPOOL)
    assert row.status == DIVERGED and row.counterexample["seq_len_fill"] == 1, row.detail
