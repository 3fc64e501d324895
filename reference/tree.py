"""Reference tree build: what sglang's ``build_tree_kernel_efficient`` writes, in plain Python.

Per request ``b`` the build reads the draft tree (``selected_index[b]``,
``parent_list[b]``) and writes, for every node ``t``:

* the mask row ``t``: the root column, ``t`` itself and ``t``'s ancestors, i.e.
  column 0 plus the columns :func:`specbound.spec.bounded_walk` marks (guarded
  semantics: parent search over ``n - 1`` entries, at most ``D`` steps);
* ``positions = seq_len[b] + depth(t)`` with ``depth(t) = len(bounded_walk(t))``;
* ``retrive_index = token_cell(b, t)``, and the ``retrive_next_token`` /
  ``retrive_next_sibling`` links of :func:`specbound.spec.links`.

Every cell index comes from the spec.  The build computes the whole batch first
and writes afterwards, so an error (validation or ``strict``) leaves every caller
buffer untouched, and it writes only inside the batch's extent.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from specbound import spec
from specbound.spec import TreeMaskMode

from .validation import BuildTreeArgs, TreeBuild, check_tree_well_formed, validate_build_tree_args


_SIGNED_TWIN = {torch.uint8: torch.int8, torch.uint16: torch.int16, torch.uint32: torch.int32}


def build_tree(parent_list, selected_index, seq_lens, *, topk, depth, num_draft_tokens, mode,
               tree_mask=None, positions=None, retrive_index=None, retrive_next_token=None,
               retrive_next_sibling=None, fill_prefix_mask=True, strict=False) -> TreeBuild:
    """Build the verify tree of a batch; outputs given by the caller are written in place.

    ``fill_prefix_mask`` (FULL_MASK only): also write the prefix columns True, which
    sglang leaves to the caller's fill; with False they are left alone.
    ``strict``: raise :class:`MalformedTreeError` (request, node, defect) for a tree
    the guarded semantics would silently repair.
    """
    args = validate_build_tree_args(
        parent_list, selected_index, seq_lens, topk=topk, depth=depth, num_draft_tokens=num_draft_tokens,
        mode=mode, tree_mask=tree_mask, positions=positions, retrive_index=retrive_index,
        retrive_next_token=retrive_next_token, retrive_next_sibling=retrive_next_sibling,
        fill_prefix_mask=fill_prefix_mask, strict=strict)
    return write_tree(args)


def write_tree(args: BuildTreeArgs) -> TreeBuild:
    """The build on arguments :func:`validate_build_tree_args` accepted (the ``strict``
    check, then every write); for callers that validate with their own options (the sglang
    drop-in's disjoint views)."""
    sel_rows = args.selected_index.tolist()
    pl_rows = args.parent_list.tolist()
    if args.strict:
        for b in range(args.bs):
            check_tree_well_formed(b, sel_rows[b], pl_rows[b], args.topk, args.depth, args.num_draft_tokens)
    plan = _plan(args, sel_rows, pl_rows)
    _write(args, plan)
    return TreeBuild(args.tree_mask, args.positions, args.retrive_index, args.retrive_next_token,
                     args.retrive_next_sibling)


class _Plan(NamedTuple):
    """Every write of the batch, as (cell, value) lists, computed before any write."""

    mask_cells: list[int]
    mask_values: list[int]               # 0/1 for bool cells, the whole item for BITPACKING
    prefix_spans: list[tuple[int, int]]  # FULL_MASK prefix columns [start, stop) to fill True
    token_cells: list[int]
    positions: list[int]
    next_token: list[int]
    next_sibling: list[int]


def _plan(args: BuildTreeArgs, sel_rows, pl_rows) -> _Plan:
    k, d, n, mode = args.topk, args.depth, args.num_draft_tokens, args.mode
    bitpack = mode is TreeMaskMode.QLEN_ONLY_BITPACKING
    plan = _Plan([], [], [], [], [], [], [])
    # Bit of tree node j inside an item; the same for every request.
    bit_value = [1 << spec.mask_bit(mode, j) for j in range(n)]
    # In-row offset of each tree column; it depends on seq_len only (FULL_MASK), so memoize.
    tree_columns: dict[int, list[int]] = {}
    for b in range(args.bs):
        s, p = args.seq_lens_list[b], args.prefix[b]
        sel_row, pl_row = sel_rows[b], pl_rows[b]
        parent_of = spec.parents(sel_row, pl_row, k, d, n)
        next_token, next_sibling = spec.links(parent_of)
        cols = tree_columns.get(s)
        if cols is None:
            cols = tree_columns[s] = [spec.mask_tree_column(mode, j, s) for j in range(spec.mask_tree_columns(mode, n))]
        n_prefix = spec.mask_prefix_columns(mode, s) if args.fill_prefix_mask else 0
        for t in range(n):
            walk = spec.bounded_walk(t, sel_row, pl_row, k, d, n)
            marked = {0, *walk}   # the root column is in every row; t itself is walk[0]
            row = spec.mask_row_start(mode, b, t, n, s, p)
            if bitpack:
                plan.mask_cells.append(row + cols[0])
                plan.mask_values.append(sum(bit_value[j] for j in marked))
            else:
                plan.mask_cells.extend(row + c for c in cols)
                plan.mask_values.extend(int(j in marked) for j in range(n))
            if n_prefix:
                # The prefix columns of a row are consecutive cells (row-major layout);
                # both ends come from the spec.
                first = spec.mask_prefix_cell(mode, b, t, 0, n, s, p)
                last = spec.mask_prefix_cell(mode, b, t, n_prefix - 1, n, s, p)
                plan.prefix_spans.append((first, last + 1))
            plan.token_cells.append(spec.token_cell(b, t, n))
            plan.positions.append(s + len(walk))
        plan.next_token.extend(next_token)
        plan.next_sibling.extend(next_sibling)
    return plan


def _write(args: BuildTreeArgs, plan: _Plan) -> None:
    device = args.device
    mask = args.tree_mask
    if plan.prefix_spans:
        for start, stop in plan.prefix_spans:
            mask[start:stop] = True
    if plan.mask_cells:
        cells = torch.tensor(plan.mask_cells, dtype=torch.int64, device=device)
        if mask.dtype in _SIGNED_TWIN:
            # torch has no index_put for uint16/uint32: write the same bit patterns through
            # a signed view of equal width.
            bits = mask.element_size() * 8
            values = [v - (1 << bits) if v >> (bits - 1) else v for v in plan.mask_values]
            twin = _SIGNED_TWIN[mask.dtype]
            mask.view(twin)[cells] = torch.tensor(values, dtype=twin, device=device)
        else:
            mask[cells] = torch.tensor(plan.mask_values, dtype=mask.dtype, device=device)
    if plan.token_cells:
        cells = torch.tensor(plan.token_cells, dtype=torch.int64, device=device)
        # retrive_index holds each node's own flat token cell.
        args.positions[cells] = torch.tensor(plan.positions, dtype=torch.int64, device=device)
        args.retrive_index.view(-1)[cells] = cells
        args.retrive_next_token.view(-1)[cells] = torch.tensor(plan.next_token, dtype=torch.int64, device=device)
        args.retrive_next_sibling.view(-1)[cells] = torch.tensor(plan.next_sibling, dtype=torch.int64,
                                                                 device=device)
