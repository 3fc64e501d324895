"""Raw kernel launches (no host validation).

The wrappers in :mod:`specbound.kernels` validate every size before launching, so a too
small buffer never reaches a kernel through them.  The mutant replays and the CUDA-graph
state machine model a caller that *does* launch with its own sizing (a captured graph
replays without host checks), so they launch the same ``@triton.jit`` kernels directly,
with the grid and block sizes the wrappers would choose.  Inside ``checked_interpreter``
an access outside the given buffers raises ``OutOfBoundsAccess``.

Planted kernels (the historical bug of a mutant in our kernel) come from the one mutant
registry, :mod:`specbound.proofs.symexec.mutants`; pass one as ``kernel=``.
"""

from __future__ import annotations

from specbound import kernels, spec  # noqa: F401  (kernels first: it sets TRITON_INTERPRET)

import torch  # noqa: E402

from specbound.kernels import draft_kv as kv_mod  # noqa: E402
from specbound.kernels import tree_build  # noqa: E402


def tree_outputs(bs: int, n: int) -> dict[str, torch.Tensor]:
    """Exact-size positions / retrive_* buffers (what the caller allocates)."""
    return {"positions": torch.zeros(spec.token_numel(bs, n), dtype=torch.int64),
            **{name: torch.full((bs, n), -1, dtype=torch.int64)
               for name in ("retrive_index", "retrive_next_token", "retrive_next_sibling")}}


def launch_tree_raw(parent_list, selected_index, seq_lens, tree_mask, *, topk, depth, num_draft_tokens, mode,
                    fill_prefix_mask=True, outputs=None, kernel=None):
    """Launch the tree build as ``kernels.build_tree`` would, minus its checks: ``tree_mask``
    is used as given, whatever its size.  Returns the outputs dict."""
    outputs = outputs if outputs is not None else tree_outputs(int(seq_lens.shape[0]), num_draft_tokens)
    tree_build.launch_tree(parent_list, selected_index, seq_lens, tree_mask, outputs["positions"],
                           outputs["retrive_index"], outputs["retrive_next_token"], outputs["retrive_next_sibling"],
                           topk=topk, depth=depth, num_draft_tokens=num_draft_tokens, mode=mode,
                           fill_prefix_mask=fill_prefix_mask, kernel=kernel)
    return {"tree_mask": tree_mask, **outputs}


def launch_kv_raw(req_pool_indices, req_to_token, seq_lens, kv_indices, kv_indptr, *, topk, num_steps,
                  page_size=1):
    """Launch the draft kv kernel as ``kernels.draft_decode_kv_indices`` would, minus its
    checks (no capacity check against the row width)."""
    kv_mod.launch_kv(req_pool_indices, req_to_token, seq_lens, kv_indices, kv_indptr, topk=topk,
                     num_steps=num_steps, page_size=page_size)
    return kv_indices, kv_indptr
