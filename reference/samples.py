"""Draft trees and batches shaped like the ones sglang's EAGLE draft produces: the one
builder that the tests, the benchmarks, the audit and the fuzz strategies share.

**Growth.**  The root's ``K`` children form the first block of the score list (ids
``[0, K)``); each later step *expands* ``K`` candidates of the previous block into ``K``
children each (the next ``K^2`` ids, children of the j-th expanded candidate at
``K + K^2(l-1) + jK ...``), and ``parent_list`` records the expanded candidates, in
order, after its leading ``-1``.  The ``n - 1`` candidates with the best cumulative
scores become ``selected_index``, sorted ascending.

Scores themselves are never materialised.  Cumulative scores make a child worse than
its parent, the expanded candidates are the best of their block, and the selection is
the best ``n - 1`` overall; so the selected set contains every selected node's parent,
and within a block it is the expanded candidates in their order first, then any of
the others.  :func:`draft_tree` builds exactly the trees those two rules allow (every
EAGLE tree, and nothing else) from a sequence of choices made by a ``pick(m) -> int``
callback (an index in ``[0, m)``): one for every expansion step together (which ordered
``K`` of each block, the first step in the lowest digits) and one per selected node
(which node of the current frontier, sorted by id).

The same builder therefore runs on a seeded ``random.Random`` or numpy ``Generator``
(:func:`random_draft_tree`, :func:`random_tree_batch`) and on Hypothesis draws
(``specbound.fuzz.strategies``), where ``pick`` returning 0 everywhere yields the
simplest tree: the first ``K`` of every block expanded, nodes taken in id order.  That
is what a failing case shrinks to.

**Defects** (:data:`DEFECTS`, :func:`plant_defect`): deliberate malformations of a
valid tree, made by the same kind of choices: missing parents, cycles and self-loops,
parent slots past ``parent_list``, negative, huge (past int32) and unsorted entries, and
fully arbitrary rows.

**req_to_token** (:func:`req_to_token`): the pool every draft kv batch reads, with
distinct slot numbers so that any misplaced copy shows.
"""

from __future__ import annotations

from math import perm, prod
from typing import Callable, NamedTuple

import torch

from specbound import spec

Pick = Callable[[int], int]          # pick(m): an index in [0, m)

DEFECTS = ("missing_parent", "cycle", "self_loop", "out_of_range", "negative", "unsorted", "arbitrary",
           "huge")
HUGE_ENTRIES = (2**31 - 1, 2**31, 2**40, -(2**40))     # past int32 either way
SLOT_BASE = 1000                                          # first slot number of req_to_token


def first(m: int) -> int:
    """The ``pick`` of the simplest tree: always the first option."""
    return 0


def picker(rng) -> Pick:
    """A ``pick`` drawing uniformly from a ``random.Random`` or a numpy ``Generator``."""
    if hasattr(rng, "randrange"):
        return rng.randrange
    # numpy draws int64: a larger range (an ordered choice of many) is drawn from random bytes
    return lambda m: int(rng.integers(m)) if m < 2**62 else int.from_bytes(rng.bytes(m.bit_length() // 8 + 8),
                                                                                "little") % m


def _ordered_subset(options: list[int], size: int, rank: int) -> list[int]:
    """The ``rank``-th of the ``perm(len(options), size)`` ordered choices of ``size``
    distinct options (decoded digit by digit; rank 0 is the first ``size`` in order)."""
    rest, out = list(options), []
    for i in range(size):
        base = perm(len(rest) - 1, size - 1 - i)
        out.append(rest.pop(rank // base))
        rank %= base
    return out


def draft_tree(topk: int, depth: int, num_draft_tokens: int, pick: Pick) -> tuple[list[int], list[int]]:
    """One request's ``(selected_index row, parent_list row)`` of a valid EAGLE tree,
    every choice made by ``pick`` (see the module doc)."""
    k, d, n = topk, depth, num_draft_tokens
    spec.require(spec.tree_shape_ok(k, d, n))
    children: dict[int, list[int]] = {}
    level_of = dict.fromkeys(range(k), 0)
    expanded: list[list[int]] = []            # per level (0-based) but the last, in order
    block = list(range(k))
    # the root's K children are one block of K, every later block K^2 candidates
    ways = [perm(k, k)] + [perm(k * k, k)] * (d - 2) if d > 1 else []
    rank = pick(prod(ways))
    for level in range(d - 1):
        rank, digit = divmod(rank, ways[level])
        chosen = _ordered_subset(block, k, digit)
        expanded.append(chosen)
        start = spec.score_list_len(k, level + 1)       # first id of the next block
        block = []
        for j, parent in enumerate(chosen):
            children[parent] = list(range(start + j * k, start + (j + 1) * k))
            level_of.update(dict.fromkeys(children[parent], level + 1))
            block += children[parent]
    rank = {x: i for chosen in expanded for i, x in enumerate(chosen)}
    taken = [0] * d                           # expanded candidates selected so far, per level
    selected: set[int] = set()
    reachable = set(range(k))                 # candidates whose parent is the root or selected

    def ready(x: int) -> bool:
        # within a block: the expanded candidates in their order, then any other
        level = level_of[x]
        if x in rank:
            return rank[x] == taken[level]
        return level == len(expanded) or taken[level] == k

    for _ in range(spec.selected_index_width(n)):
        frontier = sorted(x for x in reachable if ready(x))
        x = frontier[pick(len(frontier))]
        reachable.discard(x)
        selected.add(x)
        if x in rank:
            taken[level_of[x]] += 1
            reachable.update(children[x])
    parent_row = [-1] + [x for chosen in expanded for x in chosen] if d > 1 else []
    return sorted(selected), parent_row


def canonical_tree(topk: int, depth: int, num_draft_tokens: int) -> tuple[list[int], list[int]]:
    """The simplest tree of a shape (every choice the first)."""
    return draft_tree(topk, depth, num_draft_tokens, first)


def random_draft_tree(rng, topk: int, depth: int, num_draft_tokens: int) -> tuple[list[int], list[int]]:
    """A random valid tree (``rng``: ``random.Random`` or numpy ``Generator``)."""
    return draft_tree(topk, depth, num_draft_tokens, picker(rng))


# --- defects ------------------------------------------------------------------------------------

def scramble(sel: list[int], pl: list[int], topk: int, depth: int, pick: Pick, percent: int = 100) -> None:
    """Replace entries (each with probability ``percent``/100) by arbitrary values around
    the score list, ``parent_list`` entries often by a token of the row; in place."""
    hi = spec.score_list_len(topk, depth) + 2 * topk

    def hit() -> bool:
        return percent >= 100 or pick(100) < percent
    sel[:] = [pick(hi + 4) - 3 if hit() else x for x in sel]
    tokens = sel or [0]
    out = []
    for x in pl:
        if hit():
            v = pick(hi + 4 + len(tokens))
            x = v - 3 if v < hi + 4 else tokens[v - hi - 4]
        out.append(x)
    pl[:] = out


def plant_defect(defect: str, sel: list[int], pl: list[int], topk: int, depth: int, pick: Pick) -> bool:
    """Plant one of :data:`DEFECTS` in place; False when the shape has no room for it
    (e.g. a cycle when D = 1: no entry looks its parent up)."""
    k, width = topk, len(pl)
    score_len = spec.score_list_len(k, depth)
    lookups = [j for j, x in enumerate(sel) if spec.parent_slot_kind(x, k, depth) == spec.SLOT_LOOKUP]
    if defect in ("missing_parent", "cycle", "self_loop"):
        if not lookups:
            return False
        j = lookups[pick(len(lookups))]
        slot = spec.parent_slot(sel[j], k)
        if defect == "missing_parent":
            absent = [v for v in range(-1, score_len + 2) if v not in sel]
            pl[slot] = absent[pick(len(absent))]
        else:   # self-loop: the node is its own parent; cycle: its parent is a node at or below it
            pl[slot] = sel[j] if defect == "self_loop" else sel[j + pick(len(sel) - j)]
    elif defect in ("out_of_range", "huge"):
        if not sel:
            return False
        j = pick(len(sel))
        sel[j] = (k * max(width, 1) + pick(3 * k + 1) if defect == "out_of_range"    # a slot past parent_list
                  else HUGE_ENTRIES[pick(len(HUGE_ENTRIES))])
    elif defect == "negative":
        if not sel and not pl:
            return False
        row = sel if not pl or (sel and pick(2) == 0) else pl
        row[pick(len(row))] = -1 - pick(3)
    elif defect == "unsorted":
        if len(sel) < 2:
            return False
        i = pick(len(sel))
        j = pick(len(sel) - 1)
        j += j >= i
        sel[i], sel[j] = sel[j], sel[i]
        if sel == sorted(sel):
            sel.reverse()
    elif defect == "arbitrary":
        scramble(sel, pl, k, depth, pick)
    else:
        raise ValueError(f"unknown defect {defect!r}; known: {', '.join(DEFECTS)}")
    return True


# --- batches ------------------------------------------------------------------------------------

class TreeBatch(NamedTuple):
    parent_list: torch.Tensor     # (bs, K*(D-1)+1) or (bs, 0)
    selected_index: torch.Tensor  # (bs, n-1)
    seq_lens: torch.Tensor        # (bs,)


def tree_tensors(rows, seq_lens, topk: int, depth: int, num_draft_tokens: int) -> TreeBatch:
    """int64 tensors of ``rows`` (``(selected_index row, parent_list row)`` per request)."""
    bs = len(rows)
    return TreeBatch(
        torch.tensor([pl for _, pl in rows], dtype=torch.int64).reshape(bs, spec.parent_list_width(topk, depth)),
        torch.tensor([sel for sel, _ in rows], dtype=torch.int64).reshape(
            bs, spec.selected_index_width(num_draft_tokens)),
        torch.tensor(list(seq_lens), dtype=torch.int64))


def random_tree_batch(rng, bs: int, topk: int, depth: int, num_draft_tokens: int, max_seq_len: int = 64,
                      malformed: float = 0.0) -> TreeBatch:
    """A batch of random valid trees and ``seq_lens`` in ``[0, max_seq_len]``; with
    ``malformed`` > 0 each entry is replaced by an arbitrary value with that probability
    (:func:`scramble`).  ``rng``: ``random.Random`` or numpy ``Generator``."""
    pick = picker(rng)
    rows = []
    for _ in range(bs):
        sel, pl = draft_tree(topk, depth, num_draft_tokens, pick)
        if malformed:
            scramble(sel, pl, topk, depth, pick, round(100 * malformed))
        rows.append((sel, pl))
    return tree_tensors(rows, [pick(max_seq_len + 1) for _ in range(bs)], topk, depth, num_draft_tokens)


class KvBatch(NamedTuple):
    req_pool_indices: torch.Tensor
    req_to_token: torch.Tensor
    seq_lens: torch.Tensor


def req_to_token(rows: int, width: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """A ``(rows, width)`` pool of distinct slot numbers, ``SLOT_BASE + row * width + column``."""
    return (torch.arange(rows * width, dtype=torch.int64) + SLOT_BASE).to(dtype).reshape(rows, width)


def random_kv_batch(rng, num_seqs: int, topk: int, num_steps: int, page_size: int = 1, max_seq_len: int = 64,
                    dtype=torch.int32, seq_lens=None) -> KvBatch:
    """A batch whose ``req_to_token`` rows are exactly as wide as the widest read
    (``spec.kv_req_to_token_span``), in a pool of ``num_seqs + 2`` rows, each request on
    a random row of its own."""
    pick = picker(rng)
    seq = list(seq_lens) if seq_lens is not None else [pick(max_seq_len + 1) for _ in range(num_seqs)]
    span = max([spec.kv_req_to_token_span(s, topk, num_steps, page_size) for s in seq] or [1])
    pool = num_seqs + 2
    rows = _ordered_subset(list(range(pool)), num_seqs, pick(perm(pool, num_seqs)))
    return KvBatch(torch.tensor(rows, dtype=torch.int64), req_to_token(pool, span, dtype),
                   torch.tensor(seq, dtype=torch.int64))
