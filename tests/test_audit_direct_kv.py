"""The direct kv-index launch audit (`consumer.direct_kv_indices` rows) on small sglang-shaped
packages written here: a backend that launches the kv-index kernel itself in target verify,
eagerly into a grow-only scratch sized in the same branch that widens the lengths, and in graph
replay into its CUDA-graph buffer.  Undersized variants (the scratch sized without the draft
tokens, the graph buffer without its draft slack, or one entry per page) are shown red and
replayed on the package's kernel under the checked interpreter; the correct sizes are matched,
which needs the widened lengths paired with the widened size (the other branch passes both
unwidened); launches outside target verify have no row."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import kernels  # noqa: F401  - before triton: it may set TRITON_INTERPRET
from specbound import spec
from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.audit.report import HOLDS_ONLY_IF, MATCHED, OVERRUN, UNKNOWN, AuditReport
from specbound.engines.sglang.direct_kv import check_direct_kv
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.testing import write_sglang_package

# Each program copies one request's slots to where kv_indptr says it starts: its stores stop at
# the request's length, whatever the buffer (the shape of sglang's kernel, written here).
KERNEL = """
import triton
import triton.language as tl


@triton.jit
def create_flashinfer_kv_indices_triton(req_to_token_ptr, req_pool_indices_ptr, page_kernel_lens_ptr, kv_indptr,
                                        kv_start_idx, kv_indices_ptr, req_to_token_ptr_stride):
    STEP: tl.constexpr = 8
    b = tl.program_id(0)
    pool_row = tl.load(req_pool_indices_ptr + b).to(tl.int64)
    base = tl.load(kv_indptr + b)
    count = tl.load(page_kernel_lens_ptr + b)
    for start in range(0, count, STEP):
        k = start + tl.arange(0, STEP)
        live = k < count
        slot = tl.load(req_to_token_ptr + pool_row * req_to_token_ptr_stride + k, mask=live)
        tl.store(kv_indices_ptr + base + k, slot, mask=live)
"""

BACKEND = """
import torch

from sglang.kernels.ops.attention.kv_indices import create_flashinfer_kv_indices_triton


class ToyDirectBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.page_size = model_runner.page_size
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.split_kv = model_runner.split_kv
        self._scratch_buf = None

    def _scratch(self, need, device):
        if self._scratch_buf is None or self._scratch_buf.numel() < need:
            self._scratch_buf = torch.empty(need, dtype=torch.int32, device=device)
        return self._scratch_buf[:need]

    def init_cuda_graph_state(self, max_bs, max_num_tokens, kv_indices_buf=None):
        if kv_indices_buf is None:
            pages = (self.max_context_len + self.page_size - 1) // self.page_size
            slack = self.num_draft_tokens or 0
            self.cuda_graph_kv_indices = torch.zeros((max_bs * ({graph}),), dtype=torch.int32)
        else:
            self.cuda_graph_kv_indices = kv_indices_buf
        self.kv_indptr = torch.zeros((max_bs + 1,), dtype=torch.int32)

    def init_forward_metadata(self, forward_batch):
        bs = forward_batch.batch_size
        spec_info = forward_batch.spec_info
        if forward_batch.forward_mode.is_decode_or_idle():
            lens = forward_batch.seq_lens
            indptr = self.kv_indptr[: bs + 1]
            indptr[1:] = torch.cumsum(lens, dim=0)
            out = torch.empty(16, dtype=torch.int32)
            create_flashinfer_kv_indices_triton[(bs,)](self.req_to_token, forward_batch.req_pool_indices, lens,
                                                       indptr, None, out, self.req_to_token.stride(0))
        elif forward_batch.forward_mode.is_target_verify():
            draft = spec_info.draft_token_num
            if self.split_kv:
                lens = forward_batch.seq_lens.clone()
                total = forward_batch.seq_lens_sum
            else:
                lens = forward_batch.seq_lens + draft
                total = {eager}
            indptr = self.kv_indptr[: bs + 1]
            indptr[1:] = torch.cumsum(lens, dim=0)
            out = self._scratch(total, forward_batch.seq_lens.device)
            create_flashinfer_kv_indices_triton[(bs,)](self.req_to_token, forward_batch.req_pool_indices, lens,
                                                       indptr, None, out, self.req_to_token.stride(0))

    def replay_cuda_graph(self, bs, req_pool_indices, seq_lens, forward_mode):
        if not forward_mode.is_target_verify():
            return
        else:
            lens = seq_lens if self.split_kv else seq_lens + self.num_draft_tokens
            indptr = self.kv_indptr[: bs + 1]
            indptr[1 : bs + 1] = torch.cumsum(lens, dim=0)
            out = self.cuda_graph_kv_indices
            create_flashinfer_kv_indices_triton[(bs, 1)](self.req_to_token, req_pool_indices, lens, indptr, None,
                                                         out, self.req_to_token.stride(0))
"""

GOOD_GRAPH = "pages * self.page_size + slack"           # sglang 0.5.23's aiter buffer
GOOD_EAGER = "forward_batch.seq_lens_sum + draft * bs"   # 0.5.23's kv_lens_sum
EAGER_ROW = "consumer.direct_kv_indices[ToyDirectBackend._scratch_buf@"
GRAPH_ROW = "consumer.direct_kv_indices[ToyDirectBackend.cuda_graph_kv_indices@"


def package(root: Path, graph: str = GOOD_GRAPH, eager: str = GOOD_EAGER) -> Path:
    backend = BACKEND.replace("{graph}", graph).replace("{eager}", eager)
    return write_sglang_package(root, {"kernels/ops/attention/kv_indices.py": KERNEL,
                                       "srt/layers/attention/toy_backend.py": backend}, "0.0.0+toy")


def audit(root: Path, replay: bool = True) -> dict:
    rep = AuditReport(str(root), "toy", "test", engine="sglang")
    check_direct_kv(Program(SourceIndex(root), PACKAGE), rep, replay=replay)
    assert len(rep.rows) == 2, [(r.id, r.status, r.detail[:160]) for r in rep.rows]   # decode: no row
    return {("eager" if r.id.startswith(EAGER_ROW) else "graph" if r.id.startswith(GRAPH_ROW) else r.id): r
            for r in rep.rows}


def test_correct_sizes_are_matched_with_each_branch_paired(tmp_path):
    rows = audit(package(tmp_path), replay=False)
    assert rows["eager"].status == MATCHED, rows["eager"].detail
    assert rows["graph"].status == MATCHED, rows["graph"].detail
    # both branches were judged: the widened lengths against the widened size, and unwidened alike
    assert "lengths seq_len + n" in rows["eager"].detail and "seq_len + 0: matched" in rows["eager"].detail


def _written(cex) -> int:
    return spec.direct_kv_indices_written(cex["bs"], cex["num_draft_tokens"], cex["seq_lens_sum"])


def test_scratch_sized_without_the_draft_tokens_overruns_and_the_kernel_writes_past_it(tmp_path):
    rows = audit(package(tmp_path, eager="forward_batch.seq_lens_sum"))
    row = rows["eager"]
    assert row.status == OVERRUN, row.detail
    assert _written(row.counterexample) > row.counterexample["seq_lens_sum"]
    assert row.method == "z3 + checked interpreter" and "out-of-bounds store" in row.evidence
    assert row.replay["entries_written"] > row.replay["buffer_numel"]
    assert rows["graph"].status == MATCHED


def test_graph_buffer_without_draft_slack_holds_only_with_room(tmp_path):
    row = audit(package(tmp_path, graph="pages * self.page_size"))["graph"]
    assert row.status == HOLDS_ONLY_IF, row.detail
    assert "seq_len[b] + num_draft_tokens <= max_context_len" in row.detail
    cex = row.counterexample
    assert _written(cex) > cex["max_bs"] * spec.cdiv(cex["max_context_len"], cex["page_size"]) * cex["page_size"]
    assert "out-of-bounds store" in row.evidence


def test_graph_buffer_of_one_entry_per_page_overruns(tmp_path):
    row = audit(package(tmp_path, graph="pages + slack"), replay=False)["graph"]
    assert row.status == OVERRUN, row.detail
    assert row.counterexample["page_size"] >= 2


@pytest.mark.parametrize("graph", ["pages * self.page_size + self.num_draft_tokens",
                                   "self.max_context_len + self.num_draft_tokens"])
def test_room_for_the_draft_tokens_written_another_way_is_matched(tmp_path, graph):
    assert audit(package(tmp_path, graph=graph), replay=False)["graph"].status == MATCHED


def test_a_size_from_a_caller_is_not_followed(tmp_path):
    # the stage reads the backend only: a size handed in by a caller stays untraced (unknown)
    pkg = package(tmp_path)
    path = pkg / "srt/layers/attention/toy_backend.py"
    path.write_text(path.read_text().replace("def replay_cuda_graph(self, bs, req_pool_indices, seq_lens, forward_mode):",
                                             "def replay_cuda_graph(self, bs, req_pool_indices, seq_lens, forward_mode, "
                                             "room):").replace("out = self.cuda_graph_kv_indices",
                                                               "out = torch.empty(room, dtype=torch.int32)"))
    caller = "from sglang.srt.layers.attention.toy_backend import ToyDirectBackend\n\n\n" \
             "def run(b):\n    b.replay_cuda_graph(1, None, None, None, room=4096)\n"
    (pkg / "srt/toy_runner.py").write_text(caller)
    rows = audit(tmp_path / "sglang", replay=False)
    assert rows["eager"].status == MATCHED
    row = next(r for key, r in rows.items() if key != "eager")
    assert row.status == UNKNOWN and "callers are not followed" in row.detail, row.detail
