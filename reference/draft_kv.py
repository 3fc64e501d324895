"""Reference draft-decode ``kv_indices`` (sglang: ``generate_draft_decode_kv_indices``).

Row ``iters - 1`` of ``kv_indices`` serves draft step ``iters``.  Branch
``(b, t)`` owns the segment starting at :func:`specbound.spec.kv_segment_start`,
:func:`specbound.spec.kv_segment_len` slots long: first the request's prefix
slots ``req_to_token[row_b, 0:seq_len_b]``, then ``iters`` extension slots read at
:func:`specbound.spec.kv_extension_read`.  ``kv_indptr[iters - 1, z]`` is
:func:`specbound.spec.kv_indptr_entry` for every flat branch ``z = 0..num_seqs*K``,
entry 0 included (written, not assumed zero).

All checks, the capacity check against the row width included, run before the
first write.
"""

from __future__ import annotations

import torch

from specbound import spec

from .validation import DraftKvArgs, validate_draft_kv_args


def draft_decode_kv_indices(req_pool_indices, req_to_token, seq_lens, *, topk, num_steps, page_size=1,
                            kv_indices=None, kv_indptr=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fill ``kv_indices`` (num_steps, width) and ``kv_indptr`` (num_steps, >= num_seqs*topk + 1).

    Buffers given by the caller (int32 or int64) are written in place, only inside
    the footprint.  When omitted, ``kv_indices`` is allocated int64 with the
    *minimal* row width that passes the capacity check,
    ``spec.draft_kv_indices_used_len(S, topk, num_seqs*topk, num_steps)`` (a
    CUDA-graph buffer would instead use ``spec.draft_kv_indices_buffer_width``),
    and cells outside the footprint hold -1.  ``kv_indptr`` is allocated int64.
    """
    args = validate_draft_kv_args(req_pool_indices, req_to_token, seq_lens, topk=topk, num_steps=num_steps,
                                  page_size=page_size, kv_indices=kv_indices, kv_indptr=kv_indptr)
    return write_draft_kv(args)


def write_draft_kv(args: DraftKvArgs, *, indptr_entry_zero: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The build on arguments :func:`validate_draft_kv_args` accepted.  ``indptr_entry_zero=False``
    leaves entry 0 of every ``kv_indptr`` row untouched, as sglang's kernel does (it relies on
    a zero-filled buffer)."""
    _write_indices(args)
    _write_indptr(args, first=0 if indptr_entry_zero else 1)
    return args.kv_indices, args.kv_indptr


def _write_indices(args: DraftKvArgs) -> None:
    k, steps, page = args.topk, args.num_steps, args.page_size
    flat = args.kv_indices.view(-1)
    width = args.width
    for b, (row, s) in enumerate(zip(args.pool_rows, args.seq_lens_list)):
        slots = args.req_to_token[row]
        prefix_values = slots[:s].to(flat.dtype)
        # The extension reads do not depend on the step: gather them once per branch.
        reads = [[spec.kv_extension_read(s, t, e, k, steps, page) for e in range(steps)] for t in range(k)]
        ext_values = slots[torch.tensor(reads, dtype=torch.int64, device=slots.device)].to(flat.dtype)
        for iters in range(1, steps + 1):
            seg_len = spec.kv_segment_len(s, iters)
            for t in range(k):
                start = spec.kv_segment_start(args.prefix[b], b, t, k, iters, s)
                # A segment is consecutive cells of one row: prefix slots, then extensions.
                cell = spec.kv_indices_cell(width, iters, start)
                flat[cell:cell + s] = prefix_values
                flat[cell + s:cell + seg_len] = ext_values[t, :iters]


def _write_indptr(args: DraftKvArgs, first: int = 0) -> None:
    k = args.topk
    flat = args.kv_indptr.view(-1)
    stride = args.kv_indptr.shape[1]
    # positions = seq_len repeated topk times (one per branch); its prefix sums feed kv_indptr_entry.
    branch_prefix = spec.prefix_sums([s for s in args.seq_lens_list for _ in range(k)])
    cells, values = [], []
    for iters in range(1, args.num_steps + 1):
        for z in range(first, args.num_branches + 1):
            cells.append(spec.kv_indices_cell(stride, iters, z))
            values.append(spec.kv_indptr_entry(branch_prefix[z], z, iters))
    index = torch.tensor(cells, dtype=torch.int64, device=flat.device)
    flat[index] = torch.tensor(values, dtype=torch.int64, device=flat.device).to(flat.dtype)
