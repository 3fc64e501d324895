"""Test support: launches of sglang's two kernels as sglang's callers make them, on buffers
pre-filled as sglang's callers pre-fill them (junk where they leave them uninitialised, so a
cell written by one implementation and not another shows), and the shape of a refusal.
Shared by ``tests/test_sglang_dropin_kv.py`` and ``tests/test_sglang_dropin_tree.py``."""

from __future__ import annotations

import random

import torch

from specbound import spec
from specbound.kernels.plan import pow2  # the value of sglang's next_power_of_2
from specbound.reference import samples
from specbound.spec import TreeMaskMode

JUNK = -7


def refused(call, argument: str, *fragments: str) -> ValueError:
    """``call()`` raises a ValueError naming ``argument`` whose message holds every fragment
    (an AssertionError otherwise); returns it."""
    try:
        call()
    except ValueError as err:
        assert getattr(err, "argument", None) == argument, str(err)
        for fragment in fragments:
            assert fragment in str(err), str(err)
        return err
    raise AssertionError(f"accepted; expected a ValueError naming {argument}")


def kv_launch(seed: int, *, num_seqs=3, topk=3, num_steps=4, page=1, blocks=0, dtype=torch.int32, slack=5):
    """``(grid, args, kwargs)`` of one launch as sglang's backends make it, on junk-filled
    buffers (kv_indptr's entry 0 zero, as sglang's torch.zeros buffer)."""
    rng = random.Random(seed)
    rows, r2t, seq = samples.random_kv_batch(rng, num_seqs, topk, num_steps, page, dtype=dtype)
    used = spec.draft_kv_indices_used_len(spec.prefix_sums(seq.tolist())[-1], topk, spec.draft_branches(num_seqs, topk), num_steps)
    kv_indices = torch.full((num_steps, used + slack), JUNK, dtype=dtype)
    kv_indptr = torch.full((num_steps, spec.kv_indptr_row_len(num_seqs, topk) + 2), JUNK, dtype=dtype)
    kv_indptr[:, 0] = 0
    positions = seq.repeat_interleave(topk)
    args = [rows, r2t, seq, kv_indices, kv_indptr, positions, r2t.shape[1], kv_indices.shape[1], kv_indptr.shape[1],
            pow2(num_seqs), pow2(num_steps), pow2(num_seqs * topk), page, 0, 0]
    grid = (num_steps * (blocks or 1), num_seqs, topk)
    return grid, args, {"NUM_STEPS": num_steps if blocks else 0}


def clone_args(args) -> list:
    """A copy of a launch's arguments (tensors cloned); retrive outputs that were views of one
    buffer stay views of one copied buffer."""
    out = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    views = [a for a in args[5:8] if isinstance(a, torch.Tensor)]
    if len(views) == 3 and views[0]._base is not None and views[0]._base is views[1]._base is views[2]._base:
        out[5:8] = list(views[0]._base.clone())
    return out


def tree_launch(seed: int, mode: TreeMaskMode, *, bs=3, topk=3, depth=3, n=8, shared=True, slack=4,
                junk_mask=False) -> list:
    """The twelve arguments of one ``build_tree_kernel_efficient`` call, pre-filled as sglang's
    caller does (mask True / zero for BITPACKING, retrive_* -1, positions junk), the three
    retrive outputs views of one ``(3, bs, n)`` buffer when ``shared``; the mask has
    ``slack`` cells past the batch (a CUDA-graph buffer is larger than one batch).
    ``junk_mask``: random cells instead (FULL_MASK when sglang skips the fill: torch.empty)."""
    rng = random.Random(seed)
    pl, sel, seq = samples.random_tree_batch(rng, bs, topk, depth, n, max_seq_len=20)
    numel = spec.mask_batch_numel(mode, bs, n, spec.prefix_sums(seq.tolist())[-1]) + slack
    dtype = getattr(torch, spec.mask_dtype_name(mode, n))
    fill = 0 if mode is TreeMaskMode.QLEN_ONLY_BITPACKING else 1
    mask = torch.full((numel,), fill, dtype=dtype)
    if junk_mask:
        mask = torch.randint(0, 2, (numel,), generator=torch.Generator().manual_seed(seed)).to(dtype)
    retrive = torch.full((3, bs, n), -1, dtype=torch.int64)
    views = list(retrive) if shared else [retrive[i].clone() for i in range(3)]
    positions = torch.full((bs * n,), JUNK, dtype=torch.int64)
    return [pl, sel, seq, mask, positions, *views, topk, depth, n, int(mode)]
