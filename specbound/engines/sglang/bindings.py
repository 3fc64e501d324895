"""The one table that binds sglang's runtime names to the spec's quantities, and the
kernel call sites the buffer audit starts from.

The tracer (:mod:`.trace`) evaluates an allocation's shape in sglang's own terms
(``max_num_tokens * self.max_context_len``).  Every name it cannot trace to an
assignment is looked up here; a name that is neither traced nor bound stays unknown
and the buffer's row says so (never a guess).  Three kinds of entry:

* ``PARAMETERS``: a function parameter of that name (``max_bs`` of
  ``init_cuda_graph_state``) -- used only for parameters, never for a local that is
  assigned in the function (a local is traced to its assignment);
* ``ATTRIBUTES``: ``<anything>.name`` (``self.topk``, ``forward_batch.batch_size``);
* ``EXPRESSIONS``: an expression as ``ast.unparse`` spells it (``seq_lens.numel()``).

``max_num_tokens`` is derived: CUDA-graph runners call
``init_cuda_graph_state(max_bs, max_num_tokens)`` with ``max_num_tokens = max_bs *
num_tokens_per_bs``, and the tokens per request depend on the runner.  A buffer that
reaches the draft kv kernel is allocated for the draft-decode runner
(``EAGLEDraftCudaGraphRunner``: ``num_tokens_per_bs = topk``); one that reaches the tree
build (the target-verify mask) for the target's runner in verify mode
(``num_tokens_per_bs = speculative_num_draft_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from specbound.proofs import model

# Spec quantities: the same Z3 constants the spec's theorems quantify over.
QUANTITIES = {
    "max_bs": model.max_bs,            # requests a CUDA graph was captured for
    "bs": model.bs,                    # requests in the batch (the draft kernel's num_seqs)
    "seq_lens_sum": z3.Int("S"),   # sum of seq_len[b] over the batch (verified prefix, no draft tokens)
    "topk": model.K,
    "num_steps": model.D,              # speculative_num_steps, the tree depth
    "num_draft_tokens": model.n,       # tree size including the root
    "max_context_len": model.C,
    "page_size": model.page,
}

QUANTITY_TEXT = {
    "max_bs": "max_bs", "bs": "bs", "seq_lens_sum": "S", "topk": "K", "num_steps": "D",
    "num_draft_tokens": "n", "max_context_len": "C", "page_size": "page_size",
}

# Tokens per request of the CUDA-graph runner that allocates a buffer for each kernel.
DRAFT_DECODE, TARGET_VERIFY = "draft decode", "target verify"
TOKENS_PER_REQUEST = {DRAFT_DECODE: "topk", TARGET_VERIFY: "num_draft_tokens"}
DERIVED = {"max_num_tokens": "max_bs * tokens per request of the calling graph runner"}

PARAMETERS = {
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
}

ATTRIBUTES = {
    "topk": "topk",
    "speculative_eagle_topk": "topk",
    "speculative_num_steps": "num_steps",
    "num_draft_tokens": "num_draft_tokens",
    "speculative_num_draft_tokens": "num_draft_tokens",
    "max_context_len": "max_context_len",
    "page_size": "page_size",
    "batch_size": "bs",
    "seq_lens_sum": "seq_lens_sum",
}

EXPRESSIONS = {
    "seq_lens.numel()": "bs",
    "seq_lens.shape[0]": "bs",
    "len(seq_lens)": "bs",
    "forward_batch.seq_lens.shape[0]": "bs",
    "batch.seq_lens.shape[0]": "bs",
}

# Tensor constructors whose first argument(s) give the shape.
ALLOCATORS = {"zeros", "empty", "ones", "full", "randn", "rand", "empty_strided"}
LIKE_ALLOCATORS = {"zeros_like", "empty_like", "ones_like", "full_like"}
# Methods that return the same storage (or a copy of the same shape).
SAME_BUFFER = {"clone", "contiguous", "detach", "to", "cuda", "fill_", "zero_", "copy_", "type"}


def quantity(name: str, role: str | None) -> z3.ArithRef | None:
    """The Z3 term of a table quantity (``max_num_tokens`` needs the runner's role)."""
    if name == "max_num_tokens":
        if role is None:
            return None
        return QUANTITIES["max_bs"] * QUANTITIES[TOKENS_PER_REQUEST[role]]
    return QUANTITIES.get(name)


def table_markdown() -> str:
    """The binding table as Markdown (docs/audit-sglang.md)."""
    rows = ["| sglang spells it | as | spec quantity |", "|---|---|---|"]

    def q(name):
        return DERIVED.get(name, QUANTITY_TEXT.get(name, name))
    for n, v in PARAMETERS.items():
        rows.append(f"| `{n}` | parameter | {q(v)} |")
    for n, v in ATTRIBUTES.items():
        rows.append(f"| `<x>.{n}` | attribute | {q(v)} |")
    for n, v in EXPRESSIONS.items():
        rows.append(f"| `{n}` | expression | {q(v)} |")
    return "\n".join(rows)


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
