"""sglang's own Triton kernels, read from a release's source by path (never imported),
launched on a concrete batch as sglang's launch sites launch them, under the checked
interpreter, judged against the spec (the draft kv kernel) or :mod:`specbound.reference`
(the tree build).
"""

from __future__ import annotations

from specbound import spec

from specbound.replay.checked import checked_launch
from specbound.replay.outcome import Replay

KV_KERNEL = "generate_draft_decode_kv_indices"
TREE_KERNEL = "sgl_build_tree_kernel_efficient_triton"   # sglang's Triton port of its CUDA tree build
BIG_BUFFER = 1 << 24   # cells: above this a replay buffer is allocated untouched (torch.empty)


def expected_kv_outputs(seq, rows, r2t, k, d, page, width, stride):
    """kv_indices / kv_indptr (flat) as the spec defines them, zero where nothing is
    written, or None when a spec cell lies outside the buffers (the batch breaks the
    kernel's contract)."""
    import torch

    out_i = torch.zeros(d * width, dtype=torch.int64)
    out_p = torch.zeros(d * stride, dtype=torch.int64)
    prefix = spec.prefix_sums(seq)
    flat = r2t.reshape(-1)
    row_w = r2t.shape[1]
    for it in range(1, d + 1):
        for b, s in enumerate(seq):
            for t in range(k):
                start = spec.kv_segment_start(prefix[b], b, t, k, it, s)
                for col in range(spec.kv_segment_len(s, it)):
                    cell = spec.kv_indices_cell(width, it, start + col)
                    pos = col if col < s else spec.kv_extension_read(s, t, col - s, k, d, page)
                    if not (0 <= cell < d * width and 0 <= pos < row_w):
                        return None
                    out_i[cell] = flat[rows[b] * row_w + pos]
        for z in range(1, spec.draft_branches(len(seq), k) + 1):
            zb, zt = divmod(z, k)
            s_zb = seq[zb] if zb < len(seq) else 0
            cell = spec.kv_indices_cell(stride, it, z)
            if cell >= d * stride:
                return None
            out_p[cell] = spec.kv_indptr_entry(spec.kv_positions_prefix(prefix[zb], zt, k, s_zb), z, it)
    return out_i, out_p


def draft_kv(kernel, *, seq_lens: list, req_pool_indices: list, row_stride: int, pool_rows: int, topk: int,
             num_steps: int, page_size: int, width: int, indptr_stride: int, grid: tuple, seq_lens_dtype: str,
             lane_bounds: tuple, num_steps_constexpr: int, inputs: dict) -> Replay:
    """``generate_draft_decode_kv_indices`` as sglang's launch sites call it (positional
    arguments of the current signature; ``lane_bounds`` = ``(bs_upper, iter_upper,
    num_tokens_upper)``), into a ``(num_steps, width)`` kv_indices and ``(num_steps,
    indptr_stride)`` kv_indptr of int32 zeros (above :data:`BIG_BUFFER` cells allocated and
    never touched, so only the cells the kernel writes get pages); req_to_token holds
    distinct entries, so a copy from the wrong slot shows.  ``unavailable`` when the
    buffers cannot be allocated here; ``output`` when the buffers differ from the spec's."""
    import torch

    from specbound.reference import samples

    r2t = samples.req_to_token(pool_rows, row_stride, torch.int32)
    big = num_steps * max(width, indptr_stride) > BIG_BUFFER
    try:
        kv_indices = (torch.empty if big else torch.zeros)((num_steps, width), dtype=torch.int32)
        kv_indptr = (torch.empty if big else torch.zeros)((num_steps, indptr_stride), dtype=torch.int32)
    except (RuntimeError, MemoryError) as exc:
        return Replay("unavailable", f"cannot allocate the replay buffers ({num_steps} x "
                      f"{max(width, indptr_stride)} cells): {exc}", inputs)
    seq_t = torch.tensor(seq_lens, dtype=getattr(torch, seq_lens_dtype))
    positions = torch.tensor(seq_lens, dtype=torch.int64).repeat_interleave(topk)
    rows_t = torch.tensor(req_pool_indices, dtype=torch.int64)
    bs_upper, iter_upper, num_tokens_upper = lane_bounds

    def launch():
        kernel[grid](rows_t, r2t, seq_t, kv_indices, kv_indptr, positions, row_stride, width, indptr_stride,
                     bs_upper, iter_upper, num_tokens_upper, page_size, NUM_STEPS=num_steps_constexpr)
    fault = checked_launch(launch, inputs, kernel=f"sglang's {KV_KERNEL}")
    if fault is not None:
        return fault
    if big:
        return Replay("none", "the launch ran without a fault (buffers too big to compare)", inputs)
    want = expected_kv_outputs(seq_lens, req_pool_indices, r2t, topk, num_steps, page_size, width, indptr_stride)
    if want is None:
        return Replay("none", "the batch breaks the contract (a spec cell lies outside the buffers) and the "
                      "launch stayed in bounds", inputs)
    if not (torch.equal(kv_indices.reshape(-1).to(torch.int64), want[0])
            and torch.equal(kv_indptr.reshape(-1).to(torch.int64), want[1])):
        return Replay("output", "kv_indices / kv_indptr differ from the spec's", inputs)
    return Replay("none", "the launch matched the spec", inputs)


def build_tree(kernel, *, seq_lens: list, selected_index: list, parent_list: list, topk: int, depth: int,
               n: int, mode: spec.TreeMaskMode, sel_width: int, pl_width: int, compare: bool,
               inputs: dict) -> Replay:
    """sglang's Triton tree build as ``sgl_build_tree_kernel_triton`` launches it (one program
    per request), into buffers of the batch's exact extent (the mask all True, the
    retrieve tensors -1).  ``compare``: the tree is well formed, so the outputs are judged
    against :func:`specbound.reference.build_tree` (a malformed one only for faults)."""
    import torch

    from specbound import reference

    bs = len(seq_lens)
    seq_t = torch.tensor(seq_lens, dtype=torch.int64)
    sel_t = torch.tensor(selected_index, dtype=torch.int64).reshape(bs, sel_width)
    pl_t = torch.tensor(parent_list, dtype=torch.int64).reshape(bs, pl_width)
    prefix = torch.cumsum(seq_t, 0) - seq_t
    numel = spec.mask_batch_numel(mode, bs, n, sum(seq_lens))

    def buffers():
        return {"tree_mask": torch.ones(numel, dtype=torch.bool),
                "positions": torch.zeros(bs * n, dtype=torch.int64),
                "retrive_index": torch.full((bs, n), -1, dtype=torch.int64),
                "retrive_next_token": torch.full((bs, n), -1, dtype=torch.int64),
                "retrive_next_sibling": torch.full((bs, n), -1, dtype=torch.int64)}
    outs = buffers()

    def launch():
        kernel[(bs,)](pl_t, sel_t, seq_t, prefix, outs["tree_mask"], outs["positions"], outs["retrive_index"],
                      outs["retrive_next_token"], outs["retrive_next_sibling"], topk=topk, depth=depth,
                      draft_token_num=n, tree_mask_mode=int(mode), batch_size=bs,
                      parent_list_stride=pl_width if pl_width else 1,
                      selected_index_stride=sel_width if sel_width else 1)
    fault = checked_launch(launch, inputs, kernel=f"sglang's {TREE_KERNEL}")
    if fault is not None:
        return fault
    if not compare:
        return Replay("none", "malformed tree, the launch stayed in bounds", inputs)
    want = reference.build_tree(pl_t, sel_t, seq_t, topk=topk, depth=depth, num_draft_tokens=n, mode=mode,
                                **buffers())
    for (name, ours), theirs in zip(outs.items(), want):
        if not torch.equal(ours.reshape(-1), theirs.reshape(-1)):
            return Replay("output", f"{name} differs from specbound.reference", inputs)
    return Replay("none", "the launch matched specbound.reference", inputs)
