"""The draft tree and the guarded tree walk that builds the verify mask.

Inputs of request ``b``: ``selected_index[b]`` (``n - 1`` flat score indices) and
``parent_list[b]`` (``K*(D-1) + 1`` tokens, or none when ``D = 1``).  Node ids:
root = 0, node ``j + 1`` is ``selected_index[b, j]``.  The parent of node ``j + 1``
is found from ``slot = selected_index[b, j] // K``: slot 0 means the root,
otherwise the parent is the node whose ``selected_index`` entry equals
``parent_list[b, slot]``.

The *guarded* semantics (what the reference and our kernels implement, and what
sglang's Triton port does on valid trees) differ from sglang's CUDA kernel only on
malformed input:

* the parent search scans the row's ``n - 1`` entries, never ``n``;
* a slot outside ``[1, parent_list_width)`` or a negative entry has no parent;
* a node whose parent is not found gets no links and its walk stops there;
* the root-ward walk takes at most ``D`` iterations (a cycle cannot hang it).
"""

from __future__ import annotations

from typing import Sequence

from .symbolic import all_of, check_int, floordiv, ite

# Outcome of reading a node's parent slot.
SLOT_ROOT = 0      # the parent is the root
SLOT_LOOKUP = 1    # look the parent up in parent_list, then search the row
SLOT_INVALID = 2   # negative entry or slot outside parent_list: no parent


def score_list_len(topk, depth):
    """Candidates scored over ``depth`` steps: ``K + (D-1)*K^2``."""
    k = check_int("topk", topk, minimum=1)
    d = check_int("depth", depth, minimum=1)
    return k + (d - 1) * k * k


def selected_index_width(num_draft_tokens):
    """Entries per ``selected_index`` row: ``n - 1`` (every node but the root)."""
    return check_int("num_draft_tokens", num_draft_tokens, minimum=1) - 1


def parent_list_width(topk, depth):
    """Entries per ``parent_list`` row: ``K*(D-1) + 1``, and 0 when ``D = 1`` (sglang
    passes an empty ``(bs, 0)`` tensor then)."""
    k = check_int("topk", topk, minimum=1)
    d = check_int("depth", depth, minimum=1)
    return ite(d == 1, 0, k * (d - 1) + 1)


def selected_index_cell(b, j, num_draft_tokens):
    return check_int("b", b, minimum=0) * selected_index_width(num_draft_tokens) + j


def parent_list_cell(b, slot, topk, depth):
    return check_int("b", b, minimum=0) * parent_list_width(topk, depth) + slot


def parent_search_range(num_draft_tokens):
    """Half-open range of row entries the parent search scans: ``[0, n - 1)``."""
    return 0, selected_index_width(num_draft_tokens)


def walk_max_steps(depth):
    """The walk marks at most ``D`` nodes: a valid node has depth <= D."""
    return check_int("depth", depth, minimum=1)


def parent_slot(sel_value, topk):
    """``parent_list`` slot named by a non-negative ``selected_index`` entry."""
    return floordiv(sel_value, topk)


def parent_slot_kind(sel_value, topk, depth):
    """SLOT_ROOT, SLOT_LOOKUP or SLOT_INVALID for the entry ``sel_value``."""
    slot = parent_slot(sel_value, topk)
    width = parent_list_width(topk, depth)
    return ite(sel_value < 0, SLOT_INVALID,
               ite(slot == 0, SLOT_ROOT,
                   ite(slot < width, SLOT_LOOKUP, SLOT_INVALID)))


def parent_node(sel_value, found, found_index, topk, depth):
    """Parent of the node whose entry is ``sel_value``: ``(has_parent, parent_id)``.

    ``found``/``found_index`` are the result of searching the row for
    ``parent_list[b, slot]`` (only meaningful for SLOT_LOOKUP)."""
    kind = parent_slot_kind(sel_value, topk, depth)
    has = ite(kind == SLOT_ROOT, True, all_of(kind == SLOT_LOOKUP, found))
    return has, ite(kind == SLOT_ROOT, 0, found_index + 1)


def walk_step(cur, steps, sel_value, found, found_index, topk, depth):
    """One iteration of the root-ward walk of a row.

    State: at node ``cur + 1`` after ``steps`` iterations.  The iteration marks
    tree column ``cur + 1`` of the row, then moves to the parent, found at row
    entry ``found_index`` when ``found``.  Returns ``(mark_column, continues,
    next_cur, next_steps)``; the walk stops at the root, at a node without a
    parent, or after ``D`` iterations.
    """
    kind = parent_slot_kind(sel_value, topk, depth)
    next_steps = steps + 1
    continues = all_of(kind == SLOT_LOOKUP, found, next_steps < walk_max_steps(depth))
    return cur + 1, continues, found_index, next_steps


# --- concrete helpers shared by the reference and the tests ------------------------

def find_parent_entry(sel_row: Sequence[int], token: int, num_draft_tokens: int):
    """First ``j`` in :func:`parent_search_range` with ``sel_row[j] == token``."""
    lo, hi = parent_search_range(num_draft_tokens)
    for j in range(lo, hi):
        if sel_row[j] == token:
            return True, j
    return False, 0


def lookup(sel_row: Sequence[int], pl_row: Sequence[int], j: int, topk: int, depth: int,
           num_draft_tokens: int):
    """Read entry ``j`` and resolve its parent: ``(sel_value, found, found_index)``."""
    sel_value = int(sel_row[j])
    if parent_slot_kind(sel_value, topk, depth) != SLOT_LOOKUP:
        return sel_value, False, 0
    token = int(pl_row[parent_slot(sel_value, topk)])
    found, idx = find_parent_entry(sel_row, token, num_draft_tokens)
    return sel_value, found, idx


def bounded_walk(t: int, sel_row: Sequence[int], pl_row: Sequence[int], topk: int, depth: int,
                 num_draft_tokens: int) -> list[int]:
    """Tree columns marked for row ``t`` (node ``t``) in walk order; the root column 0 is
    not included (every row has it).  ``len(result)`` is node ``t``'s depth."""
    marks: list[int] = []
    if t == 0:
        return marks
    cur, steps, continues = t - 1, 0, True
    while continues:
        sel_value, found, idx = lookup(sel_row, pl_row, cur, topk, depth, num_draft_tokens)
        col, continues, cur, steps = walk_step(cur, steps, sel_value, found, idx, topk, depth)
        marks.append(col)
    return marks


def parents(sel_row: Sequence[int], pl_row: Sequence[int], topk: int, depth: int,
            num_draft_tokens: int) -> list[int | None]:
    """Parent id of every node (``None`` for the root and for nodes without one)."""
    out: list[int | None] = [None]
    for j in range(selected_index_width(num_draft_tokens)):
        sel_value, found, idx = lookup(sel_row, pl_row, j, topk, depth, num_draft_tokens)
        has, parent = parent_node(sel_value, found, idx, topk, depth)
        out.append(parent if has else None)
    return out


def links(parent_of: Sequence[int | None]) -> tuple[list[int], list[int]]:
    """``(next_token, next_sibling)`` of one request: the smallest child of each node and
    the next larger sibling of each node, -1 where none.  Order independent, so it
    equals sglang's descending insertion loop for every parent function."""
    n = len(parent_of)
    next_token = [-1] * n
    next_sibling = [-1] * n
    for child in range(n - 1, 0, -1):
        p = parent_of[child]
        if p is None:
            continue
        next_sibling[child] = next_token[p]
        next_token[p] = child
    return next_token, next_sibling


def token_cell(b, t, num_draft_tokens):
    """Flat index of (request ``b``, node ``t``) in positions and the ``retrive_*`` rows;
    also the value of ``retrive_index[b, t]``."""
    return check_int("b", b, minimum=0) * check_int("num_draft_tokens", num_draft_tokens, minimum=1) + t


def token_numel(bs, num_draft_tokens):
    """Cells of ``positions`` (and of each flattened ``retrive_*`` output) a batch owns:
    ``bs * n``, where a request ``bs`` would begin (:func:`token_cell`, one formula)."""
    return token_cell(check_int("bs", bs, minimum=0), 0, num_draft_tokens)
