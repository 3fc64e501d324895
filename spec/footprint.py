"""Concrete write footprints: the exact set of cells each writer touches for one batch.

Built only from the cell functions of :mod:`.verify_mask`, :mod:`.draft_kv` and
:mod:`.tree`; tests compare these sets with what the reference and the kernels
actually write.  Plain ints only (they enumerate).
"""

from __future__ import annotations

from itertools import accumulate
from typing import Sequence

from . import draft_kv as kv
from . import verify_mask as vm
from .tree import token_cell


def prefix_sums(seq_lens: Sequence[int]) -> list[int]:
    """``P[b]`` for every b, plus the total at index ``len(seq_lens)``."""
    return [0, *accumulate(int(s) for s in seq_lens)]


def mask_kernel_cells(mode, num_draft_tokens: int, seq_lens: Sequence[int]) -> set[int]:
    """Cells the tree kernel writes (tree columns; whole items for BITPACKING)."""
    mode = vm.as_mode(mode)
    n = num_draft_tokens
    prefix = prefix_sums(seq_lens)
    cells = set()
    for b, s in enumerate(seq_lens):
        for t in range(n):
            for j in range(vm.mask_tree_columns(mode, n)):
                cells.add(vm.mask_tree_cell(mode, b, t, j, n, int(s), prefix[b]))
    return cells


def mask_fill_cells(mode, num_draft_tokens: int, seq_lens: Sequence[int]) -> set[int]:
    """Cells the caller's prefix fill writes (FULL_MASK prefix columns; empty otherwise)."""
    mode = vm.as_mode(mode)
    n = num_draft_tokens
    prefix = prefix_sums(seq_lens)
    cells = set()
    for b, s in enumerate(seq_lens):
        for t in range(n):
            for c in range(vm.mask_prefix_columns(mode, int(s))):
                cells.add(vm.mask_prefix_cell(mode, b, t, c, n, int(s), prefix[b]))
    return cells


def token_cells(bs: int, num_draft_tokens: int) -> set[int]:
    """Cells of ``positions`` and of the flattened ``retrive_*`` outputs a batch writes
    (``[0, token_numel(bs, n))``)."""
    return {token_cell(b, t, num_draft_tokens) for b in range(bs) for t in range(num_draft_tokens)}


def kv_indices_cells(seq_lens: Sequence[int], topk: int, num_steps: int, width: int) -> set[int]:
    """Flat cells of the ``(num_steps, width)`` kv_indices buffer the draft kernel writes."""
    prefix = prefix_sums(seq_lens)
    cells = set()
    for iters in range(1, num_steps + 1):
        for b, s in enumerate(seq_lens):
            for t in range(topk):
                start = kv.kv_segment_start(prefix[b], b, t, topk, iters, int(s))
                for k in range(kv.kv_segment_len(int(s), iters)):
                    cells.add(kv.kv_indices_cell(width, iters, start + k))
    return cells


def kv_indptr_cells(num_seqs: int, topk: int, num_steps: int, stride: int) -> set[int]:
    """Flat cells of ``kv_indptr`` written: entries ``0..bs_d`` of every row."""
    return {kv.kv_indices_cell(stride, iters, z)
            for iters in range(1, num_steps + 1) for z in range(kv.kv_indptr_row_len(num_seqs, topk))}
