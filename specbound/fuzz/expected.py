"""What the spec says a build writes, from the spec alone, and how a mismatch is reported.

The differential properties (:mod:`.properties`), the validation properties
(:mod:`.refusals`) and the stateful machine (:mod:`.stateful`) compare the reference and
the kernels against these values; a difference raises :class:`PropertyFailure`.
"""

from __future__ import annotations

import torch

from specbound import spec
from specbound.spec import TreeMaskMode

from .calls import _SIGNED, _signed
from .strategies import KvCase, TreeCase

TOKEN_OUTPUTS = ("positions", "retrive_index", "retrive_next_token", "retrive_next_sibling")


class PropertyFailure(AssertionError):
    """A property does not hold on a case."""


def fail(what: str) -> None:
    raise PropertyFailure(what)


def same(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        fail(f"{name}: dtype/shape {got.dtype} {tuple(got.shape)} != {want.dtype} {tuple(want.shape)}")
    a, b = _signed(got).reshape(-1), _signed(want).reshape(-1)
    diff = (a != b).nonzero().reshape(-1)
    if diff.numel():
        cells = diff[:8].tolist()
        fail(f"{name}: {diff.numel()} cell(s) differ, first {cells}: got {a[diff[:8]].tolist()}, "
              f"want {b[diff[:8]].tolist()}")


def _ancestors(parent_of, t):
    out, cur, seen = [], t, set()
    while cur is not None and cur != 0 and cur not in seen:
        seen.add(cur)
        out.append(cur)
        cur = parent_of[cur]
    return out, cur == 0


def expected_tree(case: TreeCase) -> dict[str, torch.Tensor]:
    """The outputs of a build into freshly allocated buffers (mask zero-filled, positions
    zero, retrive_* -1), computed from the spec alone."""
    k, d, n, mode = case.topk, case.depth, case.num_draft_tokens, case.tree_mode
    prefix = spec.prefix_sums(case.seq_lens)
    numel = spec.mask_batch_numel(mode, case.bs, n, prefix[-1])
    bitpack = mode is TreeMaskMode.QLEN_ONLY_BITPACKING
    mask = [0] * numel
    positions = [0] * spec.token_numel(case.bs, n)
    next_token, next_sibling = [], []
    for b, s in enumerate(case.seq_lens):
        sel_row, pl_row, p = case.selected_index[b], case.parent_list[b], prefix[b]
        parent_of = spec.parents(sel_row, pl_row, k, d, n)
        nt, ns = spec.links(parent_of)
        next_token += nt
        next_sibling += ns
        for t in range(n):
            walk = spec.bounded_walk(t, sel_row, pl_row, k, d, n)
            marked = {0, *walk}
            if not case.defects and t:
                chain, rooted = _ancestors(parent_of, t)
                if not rooted or set(chain) != set(walk) or len(walk) != len(chain):
                    fail(f"spec: request {b} node {t}: bounded_walk {walk} is not the ancestor chain "
                          f"{chain} of a valid EAGLE tree")
            positions[spec.token_cell(b, t, n)] = s + len(walk)
            if bitpack:
                cell = spec.mask_tree_cell(mode, b, t, 0, n, s, p)
                mask[cell] = sum(1 << spec.mask_bit(mode, j) for j in marked)
            else:
                for j in range(n):
                    mask[spec.mask_tree_cell(mode, b, t, j, n, s, p)] = int(j in marked)
                if case.fill_prefix_mask:
                    for c in range(spec.mask_prefix_columns(mode, s)):
                        mask[spec.mask_prefix_cell(mode, b, t, c, n, s, p)] = 1
    dtype = spec_mask_dtype(mode, n)
    if dtype in _SIGNED:
        bits = torch.empty(0, dtype=dtype).element_size() * 8
        mask_t = torch.tensor([v - (1 << bits) if v >> (bits - 1) else v for v in mask],
                              dtype=_SIGNED[dtype]).view(dtype)
    else:
        mask_t = torch.tensor(mask, dtype=torch.int64).to(dtype)
    shape = (case.bs, n)
    return {
        "tree_mask": mask_t,
        "positions": torch.tensor(positions, dtype=torch.int64),
        "retrive_index": torch.arange(spec.token_numel(case.bs, n), dtype=torch.int64).reshape(shape),
        "retrive_next_token": torch.tensor(next_token, dtype=torch.int64).reshape(shape),
        "retrive_next_sibling": torch.tensor(next_sibling, dtype=torch.int64).reshape(shape),
    }


def spec_mask_dtype(mode, n) -> torch.dtype:
    return getattr(torch, spec.mask_dtype_name(mode, n))


def spec_tree_footprint(case: TreeCase) -> dict[str, set[int]]:
    mode, n = case.tree_mode, case.num_draft_tokens
    fill = spec.mask_fill_cells(mode, n, case.seq_lens) if case.fill_prefix_mask else set()
    tokens = spec.token_cells(case.bs, n)
    return {"tree_mask.kernel": spec.mask_kernel_cells(mode, n, case.seq_lens), "tree_mask.fill": fill,
            **{name: tokens for name in TOKEN_OUTPUTS}}


# --- kv: what the spec says -------------------------------------------------------------------

def expected_kv(case: KvCase, fill: int = -1, buffers=None) -> tuple[torch.Tensor, torch.Tensor]:
    """kv_indices and kv_indptr after a build into ``case.buffers(fill)`` (or into copies of
    ``buffers``), from the spec alone."""
    kv_indices, kv_indptr = case.buffers(fill) if buffers is None else (t.clone() for t in buffers)
    pool, r2t, _ = case.tensors()
    k, steps, page = case.topk, case.num_steps, case.page_size
    width = kv_indices.shape[1]
    flat = kv_indices.view(-1)
    prefix = spec.prefix_sums(case.seq_lens)
    for iters in range(1, steps + 1):
        for b, s in enumerate(case.seq_lens):
            row = r2t[case.req_pool_indices[b]]
            for t in range(k):
                start = spec.kv_segment_start(prefix[b], b, t, k, iters, s)
                cell = spec.kv_indices_cell(width, iters, start)
                reads = list(range(s)) + [spec.kv_extension_read(s, t, e, k, steps, page) for e in range(iters)]
                assert len(reads) == spec.kv_segment_len(s, iters)
                flat[cell:cell + len(reads)] = row[reads].to(flat.dtype)
    positions = spec.prefix_sums([s for s in case.seq_lens for _ in range(k)])
    ind = kv_indptr.view(-1)
    for iters in range(1, steps + 1):
        for z in range(spec.kv_indptr_row_len(case.num_seqs, k)):
            ind[spec.kv_indices_cell(kv_indptr.shape[1], iters, z)] = spec.kv_indptr_entry(positions[z], z, iters)
    return kv_indices, kv_indptr
