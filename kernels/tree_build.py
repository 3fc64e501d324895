"""Tree build (verify mask, positions, retrive_* links) as Triton kernels.

One program handles ``BLOCK_B`` requests at once as a (request x node) tile, and the
per-node work as (request x node x node) tiles:

* parent search: every node's parent token against the row's ``n - 1`` entries in one
  compare, first match by a min-reduction (``spec.parent_search_range``);
* walk: ``DEPTH`` unrolled vector steps over all rows at once (``spec.walk_step``: stop at
  the root, at a node without a parent, after ``D`` marks); moving to the parent is a
  one-hot select inside the tile, so the walk makes no data-dependent memory access;
* links: the closed form of ``spec.links`` (smallest child, next larger sibling), which is
  order independent and so a pair of masked min-reductions.

Every offset is int64 before any multiplication.  The per-request prefix sum ``P[b]``
(FULL_MASK only) is computed once by the host (one cumsum), not re-summed per program.
Index expressions are written in the shape of the spec function named beside them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specbound import spec
from specbound.reference import validation

from .checked import interpreter_active

# Mask layouts as the kernels see them (constexpr); equal to spec.TreeMaskMode values.
FULL_MASK: tl.constexpr = tl.constexpr(int(spec.TreeMaskMode.FULL_MASK))
QLEN_ONLY: tl.constexpr = tl.constexpr(int(spec.TreeMaskMode.QLEN_ONLY))
BITPACKING: tl.constexpr = tl.constexpr(int(spec.TreeMaskMode.QLEN_ONLY_BITPACKING))
# Outcome of a parent slot, equal to spec.SLOT_* (asserted in tests).
SLOT_ROOT: tl.constexpr = tl.constexpr(spec.SLOT_ROOT)
SLOT_LOOKUP: tl.constexpr = tl.constexpr(spec.SLOT_LOOKUP)
SLOT_INVALID: tl.constexpr = tl.constexpr(spec.SLOT_INVALID)


@triton.jit
def build_tree_kernel(
    parent_list_ptr, selected_index_ptr, seq_lens_ptr, prefix_ptr,
    tree_mask_ptr, positions_ptr, retrive_index_ptr, next_token_ptr, next_sibling_ptr,
    bs, topk, pl_width, sel_width, n,
    MODE: tl.constexpr, DEPTH: tl.constexpr, BLOCK_B: tl.constexpr, NODES: tl.constexpr,
):
    """Grid: (cdiv(bs, BLOCK_B),).  ``NODES`` is a power of two >= n; ``DEPTH`` = D.

    Host-computed runtime scalars: ``pl_width`` = spec.parent_list_width(K, D),
    ``sel_width`` = spec.selected_index_width(n).  ``prefix_ptr`` holds P[b] (read only
    for FULL_MASK)."""
    # Host contract: the node lanes cover the tree (else rows would be silently cut short).
    tl.device_assert(n <= NODES, "build_tree_kernel: NODES < num_draft_tokens")
    pid = tl.program_id(0)
    rb = pid.to(tl.int64) * BLOCK_B + tl.arange(0, BLOCK_B)           # request of each tile row
    req_ok = rb < bs
    b = rb.to(tl.int64)
    u = tl.arange(0, NODES)                               # node id / entry index
    b2 = b[:, None]                                       # (B, 1)
    req2 = req_ok[:, None]
    node2 = u[None, :]                                    # (1, NODES)
    node_ok2 = req2 & (node2 < n)

    # --- inputs ------------------------------------------------------------------------
    # Entries j of each row, for the parent search: spec.selected_index_cell(b, j, n).
    ent_ok2 = req2 & (node2 < sel_width)
    entries = tl.load(selected_index_ptr + (b2 * sel_width + node2), mask=ent_ok2, other=-1)
    # Each node's own entry: node t >= 1 is entry t - 1 (spec.selected_index_cell(b, t - 1, n)).
    own_ok2 = node_ok2 & (node2 >= 1)
    sel = tl.load(selected_index_ptr + (b2 * sel_width + (node2 - 1)), mask=own_ok2, other=-1)
    sel = sel.to(tl.int64)
    entries = entries.to(tl.int64)

    # spec.parent_slot / spec.parent_slot_kind (sel >= 0 here, so // is floor division).
    slot = tl.where(sel >= 0, sel, 0) // topk
    kind = tl.where(sel < 0, SLOT_INVALID,
                    tl.where(slot == 0, SLOT_ROOT,
                             tl.where(slot < pl_width, SLOT_LOOKUP, SLOT_INVALID)))
    lookup = own_ok2 & (kind == SLOT_LOOKUP)
    # Guarded read of parent_list[b, slot]: spec.parent_list_cell(b, slot, K, D).
    token = tl.load(parent_list_ptr + (b2 * pl_width + slot), mask=lookup, other=-1).to(tl.int64)

    # --- parent search: first j in spec.parent_search_range(n) = [0, n - 1) ------------
    j3 = u[None, None, :]                                 # (1, 1, NODES) entry index
    match = (entries[:, None, :] == token[:, :, None]) & (j3 < sel_width)
    found_j = tl.min(tl.where(match, j3, NODES), axis=2)  # (B, NODES); NODES = not found
    found = lookup & (found_j < NODES)
    # spec.parent_node: root for SLOT_ROOT, entry found_j + 1 when found, else none (-1).
    parent = tl.where(own_ok2 & (kind == SLOT_ROOT), 0, tl.where(found, found_j + 1, -1))
    # Where the walk goes next from each node: spec.walk_step continues only through a
    # found SLOT_LOOKUP parent; 0 means stop (the root column is marked for every row).
    walk_next = tl.where(found, found_j + 1, 0)

    # --- bounded walk: at most DEPTH marks (spec.walk_max_steps) -----------------------
    c3 = u[None, None, :]                                 # (1, 1, NODES) mask column
    cur = tl.where(own_ok2, node2, 0)                     # node being marked, 0 = stopped
    depth = tl.zeros([BLOCK_B, NODES], dtype=tl.int64)
    marks = (c3 == 0) & (cur[:, :, None] >= 0)            # root column of every row
    for _step in tl.static_range(DEPTH):
        hit = c3 == cur[:, :, None]                       # one-hot of the marked column
        marks = marks | hit
        depth += (cur > 0).to(tl.int64)
        cur = tl.sum(tl.where(hit, walk_next[:, None, :], 0), axis=2)

    # --- links: closed form of spec.links ----------------------------------------------
    # next_token[p] = smallest child c of p.
    is_child = parent[:, None, :] == u[None, :, None]     # (B, p, c)
    first_child = tl.min(tl.where(is_child, c3, NODES), axis=2)
    next_token = tl.where(first_child < NODES, first_child, -1)
    # next_sibling[c] = smallest c' > c with the same (existing) parent.
    same_parent = (parent[:, None, :] == parent[:, :, None]) & (parent[:, :, None] >= 0) \
        & (c3 > u[None, :, None])
    sib = tl.min(tl.where(same_parent, c3, NODES), axis=2)
    next_sibling = tl.where(sib < NODES, sib, -1)

    # --- per-token outputs: spec.token_cell(b, t, n) = b*n + t ------------------------
    tok = b2 * n + node2
    s = tl.load(seq_lens_ptr + b, mask=req_ok, other=0).to(tl.int64)
    s2 = s[:, None]
    tl.store(positions_ptr + tok, s2 + depth, mask=node_ok2)
    tl.store(retrive_index_ptr + tok, tok, mask=node_ok2)
    tl.store(next_token_ptr + tok, next_token.to(tl.int64), mask=node_ok2)
    tl.store(next_sibling_ptr + tok, next_sibling.to(tl.int64), mask=node_ok2)

    # --- mask rows ---------------------------------------------------------------------
    t3 = u[None, :, None]                                 # (1, NODES, 1) row
    b3 = b[:, None, None]
    if MODE == BITPACKING:
        # One item per row: spec.mask_tree_cell = mask_request_base (b*n)
        # + mask_row_width (1) * t + mask_tree_column (0); node j is bit spec.mask_bit(j).
        bit = tl.full([1, 1, NODES], 1, tl.int64) << c3.to(tl.int64)
        item = tl.sum(tl.where(marks & (c3 < n), bit, 0), axis=2)
        cell = b2 * n + 1 * node2 + 0
        tl.store(tree_mask_ptr + cell, item.to(tree_mask_ptr.dtype.element_ty), mask=node_ok2)
    else:
        if MODE == FULL_MASK:
            # spec.mask_request_base = n*P[b] + b*n*n; spec.mask_row_width = seq_len + n;
            # spec.mask_tree_column(j) = seq_len + j.
            p3 = tl.load(prefix_ptr + b, mask=req_ok, other=0).to(tl.int64)[:, None, None]
            s3 = s[:, None, None]
            cell = (n * p3 + b3 * n * n) + (s3 + n) * t3 + (s3 + c3)
        else:
            # QLEN_ONLY: spec.mask_request_base = b*n*n; row width n; column j.
            cell = (b3 * n * n) + n * t3 + c3
        ok3 = req_ok[:, None, None] & (t3 < n) & (c3 < n)
        tl.store(tree_mask_ptr + cell, marks, mask=ok3)


@triton.jit
def fill_prefix_kernel(
    tree_mask_ptr, seq_lens_ptr, prefix_ptr, bs, n,
    BLOCK_B: tl.constexpr, NODES: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """FULL_MASK prefix fill (the spec's caller fill, spec.mask_prefix_cell): True into
    columns c < seq_len[b] of every row t < n of every request; tree columns are not
    touched.  A (request x row x column) tile walks the columns.  Grid:
    (cdiv(bs, BLOCK_B),)."""
    tl.device_assert(n <= NODES, "fill_prefix_kernel: NODES < num_draft_tokens")
    pid = tl.program_id(0)
    rb = pid.to(tl.int64) * BLOCK_B + tl.arange(0, BLOCK_B)
    req_ok = rb < bs
    b = rb.to(tl.int64)
    s = tl.load(seq_lens_ptr + b, mask=req_ok, other=0).to(tl.int64)
    p = tl.load(prefix_ptr + b, mask=req_ok, other=0).to(tl.int64)
    t3 = tl.arange(0, NODES)[None, :, None]
    b3 = b[:, None, None]
    s3 = s[:, None, None]
    # spec.mask_row_start(FULL, b, t) = mask_request_base (n*P[b] + b*n*n)
    #                                   + mask_row_width (seq_len + n) * t
    row = (n * p[:, None, None] + b3 * n * n) + (s3 + n) * t3
    row_ok = req_ok[:, None, None] & (t3 < n)
    c_lane = tl.arange(0, BLOCK_C).to(tl.int64)[None, None, :]
    s_max = tl.max(tl.where(req_ok, s, 0), axis=0)
    ones = tl.full([BLOCK_B, NODES, BLOCK_C], 1, tl.int1)
    for c0 in range(0, s_max, BLOCK_C):
        c = c0 + c_lane
        # spec.mask_prefix_cell(b, t, c) = mask_row_start + c, for c < spec.mask_prefix_columns
        tl.store(tree_mask_ptr + (row + c), ones, mask=row_ok & (c < s3))


# --- launch wrapper ----------------------------------------------------------------------

# below the kernels, so that their line numbers (cited by the proofs and their reports) stay put
from . import plan as launch_plans  # noqa: E402

# Compiled or interpreted, as the kernels above were defined (the block choosers' budgets
# differ: launch_plans.BUDGETS).
COMPILED = not interpreter_active()


def tree_blocks(bs: int, n: int, tile_budget: int | None = None) -> tuple[int, int]:
    """(BLOCK_B, NODES) this process launches (``launch_plans.tree_blocks`` in its mode)."""
    return launch_plans.tree_blocks(bs, n, compiled=COMPILED, tile_budget=tile_budget)


def fill_blocks(bs: int, nodes: int, tile_budget: int | None = None) -> tuple[int, int]:
    """(BLOCK_B, BLOCK_C) of the prefix fill this process launches (``launch_plans.fill_blocks``)."""
    return launch_plans.fill_blocks(bs, nodes, compiled=COMPILED, tile_budget=tile_budget)


def build_tree(parent_list, selected_index, seq_lens, *, topk, depth, num_draft_tokens, mode,
               tree_mask=None, positions=None, retrive_index=None, retrive_next_token=None,
               retrive_next_sibling=None, fill_prefix_mask=True, strict=False,
               tile_budget: int | None = None, require_proved: bool = False) -> validation.TreeBuild:
    """Triton tree build: same signature, validation, errors and results as
    ``specbound.reference.build_tree`` (``tile_budget`` only tunes the launch;
    ``strict`` refuses a malformed tree, as the reference does).  ``require_proved=True``
    refuses (``plan.UnprovedSpecialization``, before any write) a launch whose
    specialization is not proved (``plan.proved_specialization``)."""
    require_proved = validation.check_flag("require_proved", require_proved)
    args = validation.validate_build_tree_args(
        parent_list, selected_index, seq_lens, topk=topk, depth=depth,
        num_draft_tokens=num_draft_tokens, mode=mode, tree_mask=tree_mask, positions=positions,
        retrive_index=retrive_index, retrive_next_token=retrive_next_token,
        retrive_next_sibling=retrive_next_sibling, fill_prefix_mask=fill_prefix_mask,
        strict=strict)
    if args.strict:
        # The same defect report as the reference, before any write.
        sel_rows, pl_rows = args.selected_index.tolist(), args.parent_list.tolist()
        for b in range(args.bs):
            validation.check_tree_well_formed(b, sel_rows[b], pl_rows[b], args.topk, args.depth,
                                              args.num_draft_tokens)
    out = validation.TreeBuild(args.tree_mask, args.positions, args.retrive_index, args.retrive_next_token,
                    args.retrive_next_sibling)
    if args.bs == 0:
        return out
    launch_tree(args.parent_list, args.selected_index, args.seq_lens, args.tree_mask, args.positions,
                args.retrive_index, args.retrive_next_token, args.retrive_next_sibling, topk=args.topk,
                depth=args.depth, num_draft_tokens=args.num_draft_tokens, mode=args.mode,
                fill_prefix_mask=args.fill_prefix_mask, seq_lens_list=args.seq_lens_list, prefix=args.prefix,
                tile_budget=tile_budget, require_proved=require_proved)
    return out


def launch_tree(parent_list, selected_index, seq_lens, tree_mask, positions, retrive_index,
                retrive_next_token, retrive_next_sibling, *, topk, depth, num_draft_tokens, mode,
                fill_prefix_mask=True, seq_lens_list=None, prefix=None, tile_budget: int | None = None,
                kernel=None, require_proved: bool = False):
    """The launches alone (prefix fill, then tree build), with no check of any size:
    ``build_tree`` calls it after validation, and the fuzz's replays call it with a caller's
    own (possibly wrong) buffers.  ``kernel`` replaces ``build_tree_kernel`` (a planted-bug
    variant); ``seq_lens_list`` / ``prefix`` (P[0..bs]) may be passed when already known;
    ``require_proved``: see ``build_tree``."""
    mode = spec.as_mode(mode)
    n = num_draft_tokens
    lens = seq_lens.tolist() if seq_lens_list is None else seq_lens_list
    bs = len(lens)
    if bs == 0:
        return
    # P[b] once per batch on the host.
    prefix = spec.prefix_sums(lens) if prefix is None else prefix
    p = torch.tensor(prefix[:-1], dtype=torch.int64, device=seq_lens.device)
    block_b, nodes = tree_blocks(bs, n, tile_budget)
    fill = mode is spec.TreeMaskMode.FULL_MASK and fill_prefix_mask
    fill_b, fill_c = fill_blocks(bs, nodes) if fill else (None, None)
    if require_proved:   # both launches, before the first
        launches = [("build_tree_kernel", {"MODE": int(mode), "DEPTH": spec.walk_max_steps(depth), "BLOCK_B": block_b,
                                           "NODES": nodes})]
        if fill:
            launches.append(("fill_prefix_kernel", {"BLOCK_B": fill_b, "NODES": nodes, "BLOCK_C": fill_c}))
        launch_plans.require_proved(launches, f"bs={bs}, num_draft_tokens={n}, depth={depth}, max_seq_len={max(lens)}, "
                                              f"{'compiled' if COMPILED else 'interpreted'}, tile_budget={tile_budget}")
    if fill:
        launch_plans.fill_plan({"tree_mask_ptr": tree_mask, "seq_lens_ptr": seq_lens, "prefix_ptr": p}, bs=bs,
                               n=n, block_b=fill_b, nodes=nodes, block_c=fill_c).launch(fill_prefix_kernel)
    tensors = {"parent_list_ptr": parent_list, "selected_index_ptr": selected_index, "seq_lens_ptr": seq_lens,
               "prefix_ptr": p, "tree_mask_ptr": tree_mask, "positions_ptr": positions,
               "retrive_index_ptr": retrive_index, "next_token_ptr": retrive_next_token,
               "next_sibling_ptr": retrive_next_sibling}
    launch_plans.tree_plan(tensors, bs=bs, topk=topk, depth=depth, n=n, mode=mode, block_b=block_b,
                           nodes=nodes).launch(kernel or build_tree_kernel)
