"""The verify kv-index audit (`consumer.verify_kv_indices` rows) on small sglang-shaped
packages written here: a verify input that widens each request's length by its draft tokens
and writes the kv-index stream with a Triton kernel into the buffer a backend hands it.  A
buffer sized with the context only is shown red (and replayed on the package's kernel under
the checked interpreter); correct sizes, spelled two ways, are matched; a draft step's row and
a subclass that routes verify elsewhere are not verify consumers."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import kernels  # noqa: F401  - before triton: it may set TRITON_INTERPRET
from specbound import spec
from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.engines.sglang.locate import PACKAGE
from specbound.audit.report import HOLDS_ONLY_IF, MATCHED, OVERRUN, AuditReport
from specbound.engines.sglang.testing import write_sglang_package
from specbound.engines.sglang.verify_kv import check_verify_kv

# A per-request gather bounded by the request's length, never by the buffer it writes (the
# shape of sglang's create_flashinfer_kv_indices_triton, written here).
KERNEL = """
import triton
import triton.language as tl


@triton.jit
def create_flashinfer_kv_indices_triton(req_to_token_ptr, req_pool_indices_ptr, page_kernel_lens_ptr, kv_indptr,
                                        kv_start_idx, kv_indices_ptr, req_to_token_ptr_stride):
    BLOCK: tl.constexpr = 16
    pid = tl.program_id(axis=0)
    row = tl.load(req_pool_indices_ptr + pid).to(tl.int64)
    first = tl.load(kv_indptr + pid)
    length = tl.load(page_kernel_lens_ptr + pid)
    for i in range(0, tl.cdiv(length, BLOCK)):
        off = i * BLOCK + tl.arange(0, BLOCK)
        keep = off < length
        v = tl.load(req_to_token_ptr + row * req_to_token_ptr_stride + off, mask=keep)
        tl.store(kv_indices_ptr + first + off, v, mask=keep)
"""

VERIFY_INPUT = """
import torch

from sglang.kernels.ops.attention.kv_indices import create_flashinfer_kv_indices_triton


class ToyVerifyInput:
    def generate_attn_arg_prefill(self, *, req_pool_indices, paged_kernel_lens, req_to_token,
                                  kv_indices_buf=None):
        bs = req_pool_indices.numel()
        paged_kernel_lens = paged_kernel_lens + self.draft_token_num
        kv_indptr = torch.zeros((bs + 1,), dtype=torch.int32)
        kv_indptr[1:] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indices = kv_indices_buf
        create_flashinfer_kv_indices_triton[(bs,)](req_to_token, req_pool_indices, paged_kernel_lens, kv_indptr,
                                                   None, kv_indices, req_to_token.stride(0))
        return kv_indices, kv_indptr
"""

BACKEND = """
import torch


class ToyMLABackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens

    def init_cuda_graph_state(self, max_bs, max_num_tokens, kv_indices_buf=None):
        if kv_indices_buf is None:
            buf = torch.zeros(({size},), dtype=torch.int32)
        else:
            buf = kv_indices_buf
        self.cuda_graph_kv_indices = buf

    def _plan_kwargs(self):
        return {"kv_indices_buf": self.cuda_graph_kv_indices}

    def replay_target_verify(self, forward_batch, spec_info):
        kwargs = self._plan_kwargs()
        return spec_info.generate_attn_arg_prefill(req_pool_indices=forward_batch.req_pool_indices,
                                                   paged_kernel_lens=forward_batch.seq_lens,
                                                   req_to_token=self.req_to_token,
                                                   kv_indices_buf=kwargs["kv_indices_buf"])


class ToyOwnVerifyBackend(ToyMLABackend):
    # Its table is a page table of its own; verify never reaches the parent's plan.
    def init_cuda_graph_state(self, max_bs, max_num_tokens, kv_indices_buf=None):
        self.cuda_graph_kv_indices = torch.zeros((max_bs, 3), dtype=torch.int32)

    def replay_target_verify(self, forward_batch, spec_info):
        if not forward_batch.forward_mode.is_target_verify():
            return super().replay_target_verify(forward_batch, spec_info)
        return None


class ToyMultiStepDraftBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.topk = model_runner.server_args.speculative_eagle_topk
        self.speculative_num_steps = model_runner.server_args.speculative_num_steps
        self.attn_backends = [ToyMLABackend(model_runner) for _ in range(self.speculative_num_steps)]

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.cuda_graph_kv_indices = torch.zeros((self.speculative_num_steps, max_bs * self.max_context_len),
                                                 dtype=torch.int32)
        for i in range(self.speculative_num_steps):
            self.attn_backends[i].init_cuda_graph_state(max_bs, max_num_tokens,
                                                        kv_indices_buf=self.cuda_graph_kv_indices[i])
"""

CONTEXT_ONLY = "max_bs * self.max_context_len"   # sglang 0.5.23's FlashInfer MLA graph buffer
ROW = "consumer.verify_kv_indices[ToyMLABackend."


def package(root: Path, size: str, keyword: bool = False) -> Path:
    backend = BACKEND.replace("{size}", size)
    if keyword:   # the buffer handed over as a keyword instead of through a dict
        backend = backend.replace('kv_indices_buf=kwargs["kv_indices_buf"]', "kv_indices_buf=self.cuda_graph_kv_indices")
        backend = backend.replace('return {"kv_indices_buf": self.cuda_graph_kv_indices}', "return {}")
    return write_sglang_package(root, {"kernels/ops/attention/kv_indices.py": KERNEL,
                                       "srt/speculative/toy_info.py": VERIFY_INPUT,
                                       "srt/layers/attention/toy_backend.py": backend}, "0.0.0+toy")


def rows(root: Path, replay: bool = True) -> AuditReport:
    rep = AuditReport(str(root), "toy", "test", engine="sglang")
    check_verify_kv(Program(SourceIndex(root), PACKAGE), rep, replay=replay)
    return rep


def only(rep: AuditReport):
    assert len(rep.rows) == 1, [(r.id, r.status, r.detail[:160]) for r in rep.rows]
    return rep.rows[0]


def test_context_only_buffer_holds_only_with_room_and_the_kernel_writes_past_it(tmp_path):
    rep = rows(package(tmp_path, CONTEXT_ONLY))
    row = only(rep)
    assert row.id.startswith(ROW) and row.status == HOLDS_ONLY_IF
    assert "seq_len[b] + num_draft_tokens <= max_context_len" in row.detail
    cex = row.counterexample
    assert cex["bs"] <= cex["max_bs"] and cex["seq_lens_sum"] <= cex["bs"] * cex["max_context_len"]
    assert spec.verify_kv_indices_written(cex["bs"], cex["num_draft_tokens"], cex["seq_lens_sum"]) > \
        cex["max_bs"] * cex["max_context_len"]
    # the package's kernel, run by the checked interpreter at the counterexample, stores past the buffer
    assert row.method == "z3 + checked interpreter" and "out-of-bounds store" in row.evidence
    assert row.replay["entries_written"] > row.replay["buffer_numel"]
    assert rep.exit_code() == 1


def test_one_context_for_the_whole_graph_is_an_overrun(tmp_path):
    row = only(rows(package(tmp_path, "self.max_context_len", keyword=True), replay=False))
    cex = row.counterexample
    assert row.status == OVERRUN, row.detail   # refuted even when every request has room for its draft tokens
    assert spec.verify_kv_indices_written(cex["bs"], cex["num_draft_tokens"], cex["seq_lens_sum"]) > \
        cex["max_context_len"]


@pytest.mark.parametrize("size, keyword", [
    ("max_bs * (self.max_context_len + self.num_draft_tokens)", False),
    ("max_num_tokens * self.max_context_len + max_num_tokens", True),   # max_num_tokens = max_bs * n
])
def test_room_for_the_draft_tokens_is_matched(tmp_path, size, keyword):
    row = only(rows(package(tmp_path, size, keyword)))
    assert row.id.startswith(ROW) and row.status == MATCHED, row.detail


def test_no_writer_no_rows(tmp_path):
    pkg = package(tmp_path, CONTEXT_ONLY)
    info = pkg / "srt/speculative/toy_info.py"
    info.write_text(info.read_text().replace("paged_kernel_lens + self.draft_token_num", "paged_kernel_lens"))
    assert rows(tmp_path / "sglang").rows == []   # lengths not widened: not a verify stream
