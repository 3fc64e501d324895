"""The buffer audit (`buffer.*` rows) on small sglang-shaped packages written here: every
verdict is shown on a correct allocation and turned red by the planted bug it exists for
(sglang #27338's kv_indices row without topk, #29450's FULL_MASK custom mask without the
draft-token term), with unusual but equivalent spellings that must not raise an alarm."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound.audit.report import ERROR, HOLDS_ONLY_IF, MATCHED, NOT_PRESENT, OVERRUN, UNKNOWN, AuditReport
from specbound.engines.sglang.buffers import check_buffers
from specbound.audit.extract import SourceIndex
from specbound.engines.sglang.audit import run_audit
from specbound.engines.sglang.testing import write_sglang_package
from specbound.engines.sglang.sinks import traced_buffers

KV_KERNEL_STUB = """
import triton
import triton.language as tl


@triton.jit
def generate_draft_decode_kv_indices(req_pool_indices, req_to_token, paged_kernel_lens, kv_indices, kv_indptr,
                                     positions, pool_len: tl.constexpr, kv_indices_stride: tl.constexpr,
                                     kv_indptr_stride: tl.constexpr, bs_upper: tl.constexpr,
                                     iter_upper: tl.constexpr, num_tokens_upper: tl.constexpr,
                                     page_size: tl.constexpr):
    pass


def draft_kv_indices_buffer_width(num_seqs, topk, max_context_len):
    width = {helper}
    assert width < 2**31
    return width
"""

# A multi-step draft backend in the shape of sglang's: the CUDA-graph buffer is allocated in
# init_cuda_graph_state, handed to common_template, which launches the kernel.
KV_BACKEND = """
import torch

from sglang.srt.speculative.spec_utils import draft_kv_indices_buffer_width, generate_draft_decode_kv_indices


class ToyMultiStepDraftBackend:
    def __init__(self, model_runner, topk, speculative_num_steps):
        self.topk = topk
        self.speculative_num_steps = speculative_num_steps
        self.max_context_len = model_runner.model_config.context_len
        self.kv_indptr = torch.zeros((speculative_num_steps, 64), dtype=torch.int32)

    def common_template(self, forward_batch, kv_indices_buffer, call_fn):
        num_seqs = forward_batch.batch_size
        generate_draft_decode_kv_indices[(self.speculative_num_steps, num_seqs, self.topk)](
            forward_batch.req_pool_indices,
            forward_batch.req_to_token_pool.req_to_token,
            forward_batch.seq_lens,
            kv_indices_buffer,
            self.kv_indptr,
            forward_batch.positions,
            64,
            kv_indices_buffer.shape[1],
            self.kv_indptr.shape[1],
            8,
            8,
            8,
            1,
        )

    def init_forward_metadata(self, forward_batch):
        kv_indices = torch.empty(
            (self.speculative_num_steps, forward_batch.batch_size * self.topk * self.max_context_len),
            dtype=torch.int64)
        self.common_template(forward_batch, kv_indices, None)

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
{alloc}

    def init_forward_metadata_capture_cuda_graph(self, forward_batch):
        self.common_template(forward_batch, kv_indices_buffer=self.cuda_graph_kv_indices, call_fn=None)
{extra}
"""

CORRECT_KV = "        self.cuda_graph_kv_indices = torch.zeros((self.speculative_num_steps, max_num_tokens * self.max_context_len))"
MISSING_TOPK = "        self.cuda_graph_kv_indices = torch.zeros((self.speculative_num_steps, max_bs * self.max_context_len))"


def _package(root: Path, files: dict[str, str]) -> Path:
    return write_sglang_package(root, files, '0.0.0+toy')


def kv_package(root: Path, alloc: str = CORRECT_KV, extra: str = "",
               helper: str = "num_seqs * topk * max_context_len") -> Path:
    return _package(root, {
        "srt/speculative/spec_utils.py": KV_KERNEL_STUB.format(helper=helper),
        "srt/layers/attention/toy_backend.py": KV_BACKEND.replace("{alloc}", alloc).replace("{extra}", extra)})


def buffer_rows(root: Path, replay: bool = False) -> AuditReport:
    rep = AuditReport(str(root), "toy", "test", engine="sglang")
    check_buffers(SourceIndex(root), rep, replay=replay)
    return rep


def row(rep, row_id):
    got = [r for r in rep.rows if r.id == row_id]
    assert got, f"no row {row_id}: {[(r.id, r.status, r.detail[:80]) for r in rep.rows]}"
    return got[0]


GRAPH = "buffer.draft_kv_indices[ToyMultiStepDraftBackend.cuda_graph_kv_indices]"
EAGER = "buffer.draft_kv_indices[ToyMultiStepDraftBackend.kv_indices]"


# --- the draft kv_indices buffer ------------------------------------------------------------------

def test_correct_kv_buffer_is_matched(tmp_path):
    rep = buffer_rows(kv_package(tmp_path))
    graph = row(rep, GRAPH)
    assert graph.status == MATCHED, graph.detail
    assert graph.size == "D x C*K*max_bs" and "toy_backend.py" in graph.allocation
    assert row(rep, EAGER).status == MATCHED
    assert not rep.failed


def test_kv_buffer_without_topk_is_an_overrun(tmp_path):
    """sglang #27338: the CUDA-graph row sized max_bs*C."""
    rep = buffer_rows(kv_package(tmp_path, alloc=MISSING_TOPK))
    graph = row(rep, GRAPH)
    assert graph.status == OVERRUN
    cex = graph.counterexample
    assert cex["topk"] >= 2 and cex["bs"] <= cex["max_bs"]
    assert cex["seq_lens_sum"] + cex["bs"] * cex["num_steps"] <= cex["bs"] * cex["max_context_len"]  # has draft room
    assert row(rep, EAGER).status == MATCHED
    assert rep.exit_code() == 1


@pytest.mark.parametrize("alloc", [
    # the same size, written differently: factors reordered, locals, an augmented assignment,
    # a helper method's return, sglang's own width helper.
    "        self.cuda_graph_kv_indices = torch.zeros((self.speculative_num_steps, self.topk * (max_bs * self.max_context_len)))",
    "        per_branch = self.max_context_len\n        width = per_branch * self.topk\n        width *= max_bs\n"
    "        shape = (self.speculative_num_steps, width)\n        self.cuda_graph_kv_indices = torch.zeros(shape)",
    "        self.cuda_graph_kv_indices = self._make(max_bs)",
    "        kv_width = draft_kv_indices_buffer_width(max_bs, self.topk, self.max_context_len)\n"
    "        self.cuda_graph_kv_indices = torch.zeros((self.speculative_num_steps, kv_width), dtype=torch.int64)",
])
def test_equivalent_spellings_are_not_flagged(tmp_path, alloc):
    extra = ("\n    def _make(self, max_bs):\n        return torch.empty(self.speculative_num_steps, "
             "max_bs * self.topk * self.max_context_len).zero_()\n")
    rep = buffer_rows(kv_package(tmp_path, alloc=alloc, extra=extra))
    graph = row(rep, GRAPH)
    assert graph.status == MATCHED, (graph.size, graph.detail)


def test_helper_is_executed_symbolically_and_its_bug_found(tmp_path):
    alloc = ("        kv_width = draft_kv_indices_buffer_width(max_bs, self.topk, self.max_context_len)\n"
             "        self.cuda_graph_kv_indices = torch.zeros((self.speculative_num_steps, kv_width))")
    good = traced_buffers(kv_package(tmp_path / "good", alloc=alloc))
    assert any("executed symbolically" in step for b in good for step in b.path.trail)
    # The helper's assert becomes a path condition (widths >= 2^31 never allocate).
    assert any("2147483648" in str(c) for b in good for c in b.path.conds)
    bad = buffer_rows(kv_package(tmp_path / "bad", alloc=alloc, helper="num_seqs * max_context_len"))
    assert row(bad, GRAPH).status == OVERRUN


def test_subclasses_get_their_own_rows(tmp_path):
    extra = """

class InheritsEverything(ToyMultiStepDraftBackend):
    pass


class FixesTheAllocation(ToyMultiStepDraftBackend):
    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.cuda_graph_kv_indices = torch.zeros((self.speculative_num_steps, max_num_tokens * self.max_context_len))


class NeverLaunches(ToyMultiStepDraftBackend):
    def init_forward_metadata(self, forward_batch):
        pass

    def init_forward_metadata_capture_cuda_graph(self, forward_batch):
        pass
"""
    rep = buffer_rows(kv_package(tmp_path, alloc=MISSING_TOPK, extra=extra))
    assert row(rep, GRAPH).status == OVERRUN
    assert row(rep, GRAPH.replace("ToyMultiStep", "InheritsEverything").replace("DraftBackend.", ".")).status \
        == OVERRUN
    assert row(rep, "buffer.draft_kv_indices[FixesTheAllocation.cuda_graph_kv_indices]").status == MATCHED
    unreached = row(rep, "buffer.draft_kv_indices.not_reached")
    assert "NeverLaunches" in unreached.detail and unreached.status == NOT_PRESENT


def test_unbound_name_is_an_unknown_row_naming_it(tmp_path):
    alloc = "        self.cuda_graph_kv_indices = torch.zeros((self.speculative_num_steps, max_bs * self.mystery_width))"
    rep = buffer_rows(kv_package(tmp_path, alloc=alloc))
    unknown = [r for r in rep.rows if r.status == UNKNOWN]
    assert unknown and "mystery_width" in unknown[0].detail, [(r.id, r.status, r.detail) for r in rep.rows]
    assert rep.exit_code() == 3   # incomplete: a buffer that was not judged is not a pass


def test_untraceable_buffer_says_where_the_trail_ended(tmp_path):
    extra = "\n    def init_forward_metadata_replay_cuda_graph(self, forward_batch):\n" \
            "        self.common_template(forward_batch, forward_batch.spec_info.some_buffer(), None)\n"
    rep = buffer_rows(kv_package(tmp_path, extra=extra))
    unknown = [r for r in rep.rows if r.status == UNKNOWN]
    assert unknown and "trail ended" in unknown[0].detail and "some_buffer" in unknown[0].detail


def test_overrun_replays_as_an_oob_store_on_sglangs_kernel(tmp_path):
    from specbound.engines.sglang.locate import NotInstalled, locate

    try:
        real = locate().root
    except NotInstalled:
        pytest.skip("sglang is not installed (its kv kernel is what the replay runs)")
    src = real / "kernels/ops/speculative/cache_locs.py"
    if not src.is_file():
        pytest.skip("this sglang keeps its kv kernel elsewhere")
    pkg = kv_package(tmp_path, alloc=MISSING_TOPK)
    (pkg / "kernels/ops/speculative").mkdir(parents=True)
    (pkg / "kernels/ops/speculative/cache_locs.py").write_text(src.read_text())
    stub = pkg / "srt/speculative/spec_utils.py"
    stub.write_text(stub.read_text().split("import triton")[0] +
                    "from sglang.kernels.ops.speculative.cache_locs import generate_draft_decode_kv_indices\n\n"
                    "def draft_kv_indices_buffer_width(num_seqs, topk, max_context_len):\n"
                    "    return num_seqs * topk * max_context_len\n")
    rep = buffer_rows(pkg, replay=True)
    graph = row(rep, GRAPH)
    assert graph.status == OVERRUN, graph.detail
    assert "out-of-bounds store" in graph.detail and "kv_indices" in graph.detail
    assert graph.replay_command.startswith("python -m specbound.engines.sglang.buffer_replay")
    # The one-line replay reproduces it.
    from specbound.engines.sglang import buffer_replay as replay
    import shlex

    argv = shlex.split(graph.replay_command)[3:]
    assert replay.main(argv) == 1


# --- the tree mask ----------------------------------------------------------------------------------

EAGLE_UTILS = """
from enum import IntEnum

import torch


class TreeMaskMode(IntEnum):
    FULL_MASK = 0
    QLEN_ONLY = 1
    QLEN_ONLY_BITPACKING = 2


def build_tree_kernel_efficient(verified_id, parent_list, top_scores_index, draft_tokens, seq_lens, seq_lens_sum,
                                topk, spec_steps, num_verify_tokens, tree_mask_mode=TreeMaskMode.FULL_MASK,
                                tree_mask_buf=None):
    bs = seq_lens.numel()
    if tree_mask_buf is not None:
        tree_mask = tree_mask_buf
    elif tree_mask_mode == TreeMaskMode.QLEN_ONLY:
        tree_mask = torch.full((num_verify_tokens * bs * num_verify_tokens,), True)
    else:
        tree_mask = torch.full((seq_lens_sum * num_verify_tokens + num_verify_tokens * num_verify_tokens * bs,), True)
    positions = torch.empty((bs * num_verify_tokens,))
    retrive = torch.full((3, bs, num_verify_tokens), -1)
    sgl_build_tree_kernel_efficient(parent_list, top_scores_index, seq_lens, tree_mask, positions, retrive[0],
                                    retrive[1], retrive[2], topk, spec_steps, num_verify_tokens, tree_mask_mode)
"""

WORKER = """
from sglang.srt.speculative.eagle_utils import TreeMaskMode, build_tree_kernel_efficient


class ToyWorker:
    def __init__(self, target_worker, server_args):
        self.target_worker = target_worker
        self.tree_mask_mode = TreeMaskMode.{mode}


class ToyWorkerV2(ToyWorker):
    # Overrides __init__ but runs the base's through super(): its attributes are set.
    def __init__(self, target_worker, server_args):
        super().__init__(target_worker, server_args)
        self.overlap = True

    def draft(self, batch, parent_list, top_scores_index, draft_tokens):
        tree_mask_buf, position_buf = (
            self.target_worker.model_runner.attn_backend.get_verify_buffers_to_fill_after_draft()
        )
        return build_tree_kernel_efficient(batch.verified_id, parent_list, top_scores_index, draft_tokens,
                                           batch.seq_lens, batch.seq_lens_sum, self.topk,
                                           self.speculative_num_steps, self.speculative_num_draft_tokens,
                                           self.tree_mask_mode, tree_mask_buf)
"""

MASK_BACKEND = """
import torch


class AttentionBackend:
    def get_verify_buffers_to_fill_after_draft(self):
        return [None, None]


class ToyAttnBackend(AttentionBackend):
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.cuda_graph_custom_mask = torch.zeros({mask}, dtype=torch.uint8)

    def get_verify_buffers_to_fill_after_draft(self):
        return [self.cuda_graph_custom_mask, None]


class ToySubclass(ToyAttnBackend):
    pass
"""

GOOD_MASK = "max_num_tokens * (self.max_context_len + self.num_draft_tokens)"
MASK_ROW = "buffer.tree_mask[ToyAttnBackend.cuda_graph_custom_mask/{}]"


def mask_package(root: Path, mask: str = GOOD_MASK, mode: str = "FULL_MASK") -> Path:
    return _package(root, {"srt/speculative/eagle_utils.py": EAGLE_UTILS,
                           "srt/speculative/toy_worker.py": WORKER.replace("{mode}", mode),
                           "srt/layers/attention/toy_backend.py": MASK_BACKEND.replace("{mask}", mask)})


def test_correct_custom_mask_is_matched(tmp_path):
    rep = buffer_rows(mask_package(tmp_path))
    full = row(rep, MASK_ROW.format("FULL_MASK"))
    assert full.status == MATCHED, full.detail
    assert "max_bs" in full.size and "C + n" in full.size
    assert row(rep, "buffer.tree_mask[ToySubclass.cuda_graph_custom_mask/FULL_MASK]").status == MATCHED
    # The eager allocation of the FULL layout, on the path where no buffer is handed over.
    assert row(rep, "buffer.tree_mask[build_tree_kernel_efficient.tree_mask/FULL_MASK]").status == MATCHED
    assert not rep.failed


def test_custom_mask_without_draft_term_holds_only_with_draft_room(tmp_path):
    """sglang #29450: the FULL_MASK custom mask sized max_num_tokens * C."""
    rep = buffer_rows(mask_package(tmp_path, mask="max_num_tokens * self.max_context_len"))
    full = row(rep, MASK_ROW.format("FULL_MASK"))
    assert full.status == HOLDS_ONLY_IF, full.detail
    assert "seq_len[b] + num_draft_tokens <= max_context_len" in full.detail
    cex = full.counterexample   # without the condition: a request with less room than its draft tokens
    assert cex["seq_lens_sum"] + cex["bs"] * cex["num_draft_tokens"] > cex["bs"] * cex["max_context_len"]
    assert "with one slot less" in full.detail   # the weakest condition of its family
    # a finding: too small for the spec's contract (seq_len[b] <= C); safe only under a room
    # sglang never checks, and the bug sglang shipped in 0.5.3.post2 to 0.5.16
    assert rep.exit_code() == 1


def test_mask_without_the_draft_factor_is_an_overrun(tmp_path):
    rep = buffer_rows(mask_package(tmp_path, mask="max_bs * (self.max_context_len + self.num_draft_tokens)"))
    assert row(rep, MASK_ROW.format("FULL_MASK")).status == OVERRUN
    assert rep.exit_code() == 1


def test_the_layout_follows_the_caller(tmp_path):
    """A QLEN_ONLY caller: the n*n-per-request buffer is enough, and the eager FULL branch is never taken."""
    rep = buffer_rows(mask_package(tmp_path, mask="max_bs * self.num_draft_tokens * self.num_draft_tokens",
                                   mode="QLEN_ONLY"))
    assert row(rep, MASK_ROW.format("QLEN_ONLY")).status == MATCHED
    assert not [r for r in rep.rows if r.id.endswith("/FULL_MASK]")]
    # The same buffer with a FULL_MASK caller is far too small.
    rep = buffer_rows(mask_package(tmp_path / "full", mask="max_bs * self.num_draft_tokens * self.num_draft_tokens"))
    assert row(rep, MASK_ROW.format("FULL_MASK")).status == OVERRUN


def test_mask_overrun_replays_on_a_triton_tree_build(tmp_path):
    rep = buffer_rows(mask_package(tmp_path, mask="max_bs * self.max_context_len"), replay=True)
    full = row(rep, MASK_ROW.format("FULL_MASK"))
    assert full.status == OVERRUN and "out-of-bounds store" in full.detail, full.detail
    # No Triton tree build in this package: the row says which kernel ran instead, and why.
    assert "specbound.kernels" in full.detail and "needs a GPU" in full.detail


def test_explicit_path_without_sglang_is_an_error(tmp_path, capsys):
    from specbound.cli import main

    empty = tmp_path / "typo"
    empty.mkdir()
    rep = run_audit(str(empty))
    assert rep.exit_code() == 3 and rep.rows[0].status == ERROR   # nothing audited; not argparse's 2
    assert main(["audit", "sglang", "--sglang-path", str(empty), "--no-kernels"]) == 3
    assert "audit: INCOMPLETE (nothing audited" in capsys.readouterr().out


# --- honest rows --------------------------------------------------------------------------------------

def test_a_stand_in_failure_is_an_error_not_a_divergence(tmp_path):
    """maybe_create_verify_mask reads a field our VerifyMask stand-in record does not have:
    the audit's machinery failed, sglang is not to blame."""
    verify_mask = '''
from sglang.kernels.ops.speculative.spec_tree import TreeMaskMode


def tree_mask_numel(mode, bs, num_draft_tokens, max_context_len):
    if mode == TreeMaskMode.QLEN_ONLY:
        return bs * num_draft_tokens * num_draft_tokens
    if mode == TreeMaskMode.FULL_MASK:
        return bs * num_draft_tokens * (max_context_len + num_draft_tokens)
    raise NotImplementedError(mode)


def maybe_create_verify_mask(*, is_draft_runner, skip_prefill, max_bs, max_context_len, num_draft_tokens,
                             device, is_read):
    if is_draft_runner or skip_prefill or not num_draft_tokens:
        return None
    mode = default_tree_mask_mode() if is_read else TreeMaskMode.QLEN_ONLY
    buf = torch.zeros(tree_mask_numel(mode, max_bs, num_draft_tokens, max_context_len), device=device)
    return VerifyMask(buffer=buf, mode=mode, max_bs=max_bs, is_read=is_read, layout=buf.layout)
'''
    pkg = _package(tmp_path, {"kernels/ops/speculative/spec_tree.py": EAGLE_UTILS.split("def build_tree")[0],
                              "srt/layers/attention/verify_mask.py": verify_mask})
    rep = run_audit(str(pkg), kernels=False)
    got = [r for r in rep.rows if r.id == "helper.maybe_create_verify_mask"][0]
    assert got.status == ERROR and "stand-in" in got.detail and "layout" in got.detail, got.detail
    assert rep.exit_code() == 3   # not sglang's fault, and not a pass either: the check did not run


def test_the_binding_table_in_the_docs_is_the_one_in_the_code():
    from specbound.engines.sglang.bindings import BINDINGS

    doc = (Path(__file__).resolve().parents[1] / "docs" / "audit-sglang.md").read_text()
    assert BINDINGS.table_markdown() in doc, "docs/audit-sglang.md: regenerate the table between the bindings markers"


def test_syntax_the_tracer_does_not_follow_is_an_error_row(tmp_path):
    alloc = ("        self.cuda_graph_kv_indices = torch.zeros((self.speculative_num_steps, "
             "max_bs * self.topk * self.max_context_len))[:, ::2]")
    rep = buffer_rows(kv_package(tmp_path, alloc=alloc))
    got = [r for r in rep.rows if r.id == "buffer.draft_kv_indices[ToyMultiStepDraftBackend]"]
    assert got and got[0].status == ERROR and "the tracer stopped" in got[0].detail, \
        [(r.id, r.status, r.detail[:100]) for r in rep.rows]
