"""sglang's own Triton kernels, read from a release's source by path (never imported),
launched on a concrete batch as sglang's launch sites launch them, under the checked
interpreter, judged against the spec (the draft kv kernel) or :mod:`specbound.reference`
(the tree build).

The arguments of a launch are built once, here (:func:`kv_values`, :func:`tree_values`: by
sglang's parameter names, bound to whatever signature the release's kernel has), for the
theorems' replays below and for the audit's fuzzing and buffer replays
(:mod:`.kv_kernel`, :mod:`.tree_kernel`).
"""

from __future__ import annotations

from specbound import spec

from specbound.audit.kernels import Aliases, bind_params, jit_params
from specbound.replay.checked import checked_launch
from specbound.replay.outcome import Replay

KV_KERNEL = "generate_draft_decode_kv_indices"
TREE_KERNEL = "sgl_build_tree_kernel_efficient_triton"   # sglang's Triton port of its CUDA tree build
# Where each kernel is looked up first: its home today, then the one it had before sglang moved
# its Triton kernels under kernels/ops/ (found there, a kernel is not reported as moved; found
# anywhere else, it is).
KV_FILES = ("kernels/ops/speculative/cache_locs.py", "srt/speculative/spec_utils.py")
TREE_FILES = ("kernels/ops/speculative/spec_tree.py", "srt/speculative/spec_tree.py")

# sglang's names for the kernels' parameters (normalised: lower case, no ``_ptr``), and its
# ``retrive`` for ``retrieve`` in the tree's index buffers.
RESPELL = (("retrive", "retrieve"),)
TREE_ALIASES = Aliases({"seq_lens": "verified_seq_len", "num_draft_tokens": "draft_token_num",
                        "num_verify_tokens": "draft_token_num", "bs": "batch_size"}, RESPELL)
KV_ALIASES = Aliases({"pool_len": "row_stride", "seq_lens": "paged_kernel_lens"}, RESPELL)
BIG_BUFFER = 1 << 24   # cells: above this a replay buffer is allocated untouched (torch.empty)


def kv_values(req_pool_indices, req_to_token, seq_lens, kv_indices, kv_indptr, positions, *, row_stride: int,
              width: int, indptr_stride: int, lane_bounds: tuple, page_size: int, num_steps: int | None = None) -> dict:
    """The draft kv kernel's arguments by (normalised) parameter name, as sglang's launch
    sites pass them: ``lane_bounds`` = ``(bs_upper, iter_upper, num_tokens_upper)``; no
    sliding window, sink or page translation; ``num_steps`` the ``NUM_STEPS`` constexpr of
    the token-block launch (left to the kernel's default when None)."""
    bs_upper, iter_upper, num_tokens_upper = lane_bounds
    values = {"req_pool_indices": req_pool_indices, "req_to_token": req_to_token, "paged_kernel_lens": seq_lens,
              "kv_indices": kv_indices, "kv_indptr": kv_indptr, "positions": positions, "row_stride": row_stride,
              "kv_indices_stride": width, "kv_indptr_stride": indptr_stride, "bs_upper": bs_upper,
              "iter_upper": iter_upper, "num_tokens_upper": num_tokens_upper, "page_size": page_size,
              "window_size": 0, "sink_size": 0, "entry_page_size": 1, "v2p": None, "translate": False}
    if num_steps is not None:
        values["num_steps"] = num_steps
    return values


def tree_values(parent_list, selected_index, seq_lens, outs: dict, *, topk: int, depth: int, n: int,
                mode: spec.TreeMaskMode, parent_list_stride: int, selected_index_stride: int) -> dict:
    """The tree build's arguments by (normalised) parameter name, as ``sgl_build_tree_kernel_triton``
    passes them: the exclusive prefix sum of ``seq_lens`` as its own input, the outputs
    ``outs`` named as :func:`specbound.reference.build_tree` names them."""
    import torch

    return {"parent_list": parent_list, "selected_index": selected_index, "verified_seq_len": seq_lens,
            "seq_len_prefix_sum": torch.cumsum(seq_lens, 0) - seq_lens, "tree_mask": outs["tree_mask"],
            "positions": outs["positions"], "retrieve_index": outs["retrive_index"],
            "retrieve_next_token": outs["retrive_next_token"], "retrieve_next_sibling": outs["retrive_next_sibling"],
            "topk": topk, "depth": depth, "draft_token_num": n, "tree_mask_mode": int(mode),
            "batch_size": seq_lens.numel(), "parent_list_stride": parent_list_stride,
            "selected_index_stride": selected_index_stride}


def _bound(kernel, values: dict, aliases: dict) -> dict:
    kwargs, missing = bind_params(jit_params(kernel), values, aliases)
    if missing:
        raise ValueError(f"kernel: sglang's {kernel.fn.__name__} takes parameters a launch site gives no value for: "
                         f"{missing}")
    return kwargs


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
    kwargs = _bound(kernel, kv_values(rows_t, r2t, seq_t, kv_indices, kv_indptr, positions, row_stride=row_stride,
                                      width=width, indptr_stride=indptr_stride, lane_bounds=lane_bounds,
                                      page_size=page_size, num_steps=num_steps_constexpr), KV_ALIASES)
    fault = checked_launch(lambda: kernel[grid](**kwargs), inputs, kernel=f"sglang's {KV_KERNEL}")
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
    numel = spec.mask_batch_numel(mode, bs, n, sum(seq_lens))

    def buffers():
        return {"tree_mask": torch.ones(numel, dtype=torch.bool),
                "positions": torch.zeros(bs * n, dtype=torch.int64),
                "retrive_index": torch.full((bs, n), -1, dtype=torch.int64),
                "retrive_next_token": torch.full((bs, n), -1, dtype=torch.int64),
                "retrive_next_sibling": torch.full((bs, n), -1, dtype=torch.int64)}
    outs = buffers()
    kwargs = _bound(kernel, tree_values(pl_t, sel_t, seq_t, outs, topk=topk, depth=depth, n=n, mode=mode,
                                        parent_list_stride=pl_width if pl_width else 1,
                                        selected_index_stride=sel_width if sel_width else 1), TREE_ALIASES)
    fault = checked_launch(lambda: kernel[(bs,)](**kwargs), inputs, kernel=f"sglang's {TREE_KERNEL}")
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
