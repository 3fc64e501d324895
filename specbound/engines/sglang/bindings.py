"""sglang's bindings (:class:`specbound.audit.engine_bindings.Bindings`): its runtime names for
the spec's quantities, the calls that allocate, what it relies on unchecked, and the kernel
call sites the buffer audit starts from.

``max_num_tokens`` is per graph runner: CUDA-graph runners call
``init_cuda_graph_state(max_bs, max_num_tokens)`` with ``max_num_tokens = max_bs *
num_tokens_per_bs``, and the tokens per request depend on the runner.  A buffer that
reaches the draft kv kernel is allocated for the draft-decode runner
(``EAGLEDraftCudaGraphRunner``: ``num_tokens_per_bs = topk``); one that reaches the tree
build (the target-verify mask) for the target's runner in verify mode
(``num_tokens_per_bs = speculative_num_draft_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass

from specbound.audit.engine_bindings import Bindings, ExtraCondition
from specbound.proofs import model

# Tokens per request of the CUDA-graph runner that allocates a buffer for each kernel.
DRAFT_DECODE, TARGET_VERIFY = "draft decode", "target verify"

# What sglang may rely on beyond the spec's preconditions, per kernel (tried in this order).
_MASK_DRAFT_ROOM = (ExtraCondition("mask_draft_room", model.n, "seq_len[b] + num_draft_tokens <= max_context_len"),)

BINDINGS = Bindings(
    engine="sglang",
    parameters={
        "max_bs": "max_bs",
        "max_num_tokens": "max_num_tokens",
        "seq_lens_sum": "seq_lens_sum",
        "topk": "topk",
        "speculative_num_steps": "num_steps",
        "spec_steps": "num_steps",
        "num_steps": "num_steps",
        "num_draft_tokens": "num_draft_tokens",
        "speculative_num_draft_tokens": "num_draft_tokens",
        "num_verify_tokens": "num_draft_tokens",
        "draft_token_num": "num_draft_tokens",
        "max_context_len": "max_context_len",
        "page_size": "page_size",
    },
    attributes={
        "topk": "topk",
        "speculative_eagle_topk": "topk",
        "speculative_num_steps": "num_steps",
        "num_draft_tokens": "num_draft_tokens",
        "speculative_num_draft_tokens": "num_draft_tokens",
        "max_context_len": "max_context_len",
        "page_size": "page_size",
        "batch_size": "bs",
        "seq_lens_sum": "seq_lens_sum",
    },
    expressions={
        "seq_lens.numel()": "bs",
        "seq_lens.shape[0]": "bs",
        "len(seq_lens)": "bs",
        "forward_batch.seq_lens.shape[0]": "bs",
        "batch.seq_lens.shape[0]": "bs",
    },
    # torch constructors whose first argument(s) give the shape, and those that take a tensor's
    allocators=frozenset({"zeros", "empty", "ones", "full", "randn", "rand", "empty_strided"}),
    like_allocators=frozenset({"zeros_like", "empty_like", "ones_like", "full_like"}),
    # methods that return the same storage (or a copy of the same shape)
    same_buffer=frozenset({"clone", "contiguous", "detach", "to", "cuda", "fill_", "zero_", "copy_", "type"}),
    tokens_per_request={DRAFT_DECODE: "topk", TARGET_VERIFY: "num_draft_tokens"},
    per_runner={"max_num_tokens": "max_bs"},
    derived_text={"max_num_tokens": "max_bs * tokens per request of the calling graph runner"},
    helper_enum="TreeMaskMode",   # the mask layouts sglang's sizing helpers branch on
    extra_conditions={"tree_mask": _MASK_DRAFT_ROOM, "draft_kv_indices": (),
                      # a verify mask copied into a backend's custom-mask buffer; the target-verify
                      # kv-index stream written into a backend's graph kv_indices buffer
                      "custom_mask_copy": _MASK_DRAFT_ROOM, "verify_kv_indices": _MASK_DRAFT_ROOM,
                      # a backend's own launch of the kv-index kernel in target verify
                      "direct_kv_indices": _MASK_DRAFT_ROOM},
)


# --- the kernel call sites ------------------------------------------------------------------

@dataclass(frozen=True)
class Sink:
    kind: str                  # "draft_kv_indices" or "tree_mask"
    kernel: str                # what the call site launches
    role: str                  # the graph runner whose buffers reach it
    buffer: str                # the kernel parameter (normalised name) holding the buffer
    companions: tuple = ()     # other arguments read with the same choices (stride, mode)


KV_SINK = Sink("draft_kv_indices", "generate_draft_decode_kv_indices", DRAFT_DECODE, "kv_indices",
               ("kv_indices_stride",))
TREE_SINK = Sink("tree_mask", "build_tree", TARGET_VERIFY, "tree_mask", ("tree_mask_mode",))

# The tree-build op's positional parameters (sgl-kernel's build_tree_kernel_efficient, the
# NPU op and the Triton wrapper share them), used when the op is not defined in the package.
TREE_OP_PARAMS = ("parent_list", "selected_index", "verified_seq_len", "tree_mask", "positions",
                  "retrive_index", "retrive_next_token", "retrive_next_sibling", "topk", "depth",
                  "draft_token_num", "tree_mask_mode")
