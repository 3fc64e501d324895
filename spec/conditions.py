"""Named preconditions.

A precondition is a function returning a tuple of :class:`Condition`.  Each
condition has a stable ``name`` (the proofs track it, so unsat cores and the docs
cite it), a human ``text``, and ``holds``: a Python bool on concrete arguments or a
Z3 Bool on symbolic ones.  The reference validates its inputs with the very same
functions via :func:`require`, so the hypotheses of a theorem and the checks at
run time cannot drift apart.

Convention (stated once, relied on everywhere): ``seq_len[b]`` is the verified,
committed prefix length of request ``b`` and **excludes** the draft tokens, as the
kernel's ``verified_seq_len`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .draft_kv import (
    draft_kv_capacity_ok, kv_copy_lossless, kv_indptr_row_len, kv_positions_prefix, kv_req_to_token_span,
)
from .errors import SpecArgumentError
from .symbolic import all_of, is_symbolic

# Largest value an int32 offset may hold; sglang asserts the draft kv row width below it.
INT32_LIMIT = 2**31
# BITPACKING packs a mask row into one item of at most 32 bits.
BITPACK_MAX_DRAFT_TOKENS = 32


@dataclass(frozen=True)
class Condition:
    name: str
    text: str
    holds: Any
    argument: str = ""

    def __bool__(self):  # a Condition is never truth-tested by accident
        raise TypeError("test Condition.holds, not the Condition itself")


def require(conditions: Iterable[Condition]) -> None:
    """Raise :class:`SpecArgumentError` for the first concrete condition that fails."""
    for cond in conditions:
        if is_symbolic(cond.holds):
            continue
        if not cond.holds:
            raise SpecArgumentError(cond.argument or cond.name, f"violates {cond.text}")


def conjunction(conditions: Iterable[Condition]):
    return all_of(*[c.holds for c in conditions])


# --- shapes -----------------------------------------------------------------------

def batch_size_ok(bs, name: str = "bs") -> tuple[Condition, ...]:
    return (Condition("bs_nonneg", f"{name} >= 0", bs >= 0, name),)


def max_bs_ok(max_bs) -> tuple[Condition, ...]:
    return (Condition("max_bs_nonneg", "max_bs >= 0", max_bs >= 0, "max_bs"),)


def context_ok(max_context_len) -> tuple[Condition, ...]:
    return (Condition("context_positive", "max_context_len >= 1", max_context_len >= 1,
                      "max_context_len"),)


def tree_shape_ok(topk, depth, num_draft_tokens) -> tuple[Condition, ...]:
    """A draft tree of ``num_draft_tokens`` nodes (root included) chosen by top-``topk``
    over ``depth`` steps: it needs ``n - 1 <= K + (D - 1) K^2`` score slots."""
    k, d, n = topk, depth, num_draft_tokens
    return (
        Condition("topk_positive", "topk >= 1", k >= 1, "topk"),
        Condition("depth_positive", "depth >= 1", d >= 1, "depth"),
        Condition("draft_tokens_positive", "num_draft_tokens >= 1", n >= 1, "num_draft_tokens"),
        Condition("draft_tokens_fit_scores", "num_draft_tokens - 1 <= topk + (depth - 1) * topk^2",
                  n - 1 <= k + (d - 1) * k * k, "num_draft_tokens"),
    )


def bitpack_ok(num_draft_tokens) -> tuple[Condition, ...]:
    return (Condition("bitpack_fits_32_bits", f"num_draft_tokens <= {BITPACK_MAX_DRAFT_TOKENS}",
                      num_draft_tokens <= BITPACK_MAX_DRAFT_TOKENS, "num_draft_tokens"),)


# --- per-request ------------------------------------------------------------------

def seq_len_nonneg_ok(seq_len, name: str = "seq_len[b]", argument: str | None = None) -> tuple[Condition, ...]:
    """``seq_len[b] >= 0``; ``argument``: what a refusal names (e.g. the ``seq_lens`` tensor)."""
    return (Condition("seq_len_nonneg", f"{name} >= 0", seq_len >= 0, argument or name),)


def seq_len_ok(seq_len, max_context_len, name: str = "seq_len[b]") -> tuple[Condition, ...]:
    """``0 <= seq_len[b] <= C``: the verified prefix fits the model's context."""
    return (
        *seq_len_nonneg_ok(seq_len, name),
        Condition("seq_len_le_context", f"{name} <= max_context_len", seq_len <= max_context_len, name),
    )


def draft_room_ok(seq_len, num_steps, max_context_len, name: str = "seq_len[b]") -> tuple[Condition, ...]:
    """``seq_len[b] + num_steps <= C``: the request has room for its draft tokens.

    This is the per-request condition behind KV-CAPACITY; sglang relies on it
    without checking it (the scheduler stops a request before its context is full).
    """
    return (Condition("draft_room", f"{name} + num_steps <= max_context_len",
                      seq_len + num_steps <= max_context_len, name),)


def kv_shape_ok(topk, num_steps, page_size) -> tuple[Condition, ...]:
    return (
        Condition("topk_positive", "topk >= 1", topk >= 1, "topk"),
        Condition("num_steps_positive", "num_steps >= 1", num_steps >= 1, "num_steps"),
        Condition("page_size_positive", "page_size >= 1", page_size >= 1, "page_size"),
    )


def int32_alloc_ok(numel, name: str = "numel") -> tuple[Condition, ...]:
    return (Condition("alloc_below_int32", f"{name} < 2^31", numel < INT32_LIMIT, name),)


def int32_row_offsets_ok(rows, row_width, name: str = "row_width") -> tuple[Condition, ...]:
    """``(rows - 1) * row_width < 2^31``: a kernel that finds row ``i < rows`` of a buffer as
    ``row_width * i`` in int32 (sglang's ``kv_indices_stride * iters``, a constexpr times a
    program id) computes every row's offset exactly; ``row_width < 2^31`` alone does not."""
    return (Condition(f"row_offsets_int32_{name}", f"(rows - 1) * {name} < 2^31",
                      (rows - 1) * row_width < INT32_LIMIT, name),)


# --- launch contracts of the Triton kernels (host side) ------------------------------------

def lane_bound_ok(needed, lanes, name: str = "lanes") -> tuple[Condition, ...]:
    """A constexpr lane axis of ``lanes`` lanes covers ``needed`` items (``NODES >= n``,
    ``PAIRS >= num_steps*K``, ``STEPS >= num_steps``); else a masked copy is cut short."""
    return (Condition(f"lane_bound_{name}", f"{name} >= needed lanes", needed <= lanes, name),)


def grid_lanes_int32_ok(grid, block, name: str = "grid") -> tuple[Condition, ...]:
    """``grid * block <= 2^31``: the int32 lane index ``pid * block + arange(block)`` of
    every program is representable (Triton computes it in int32)."""
    return (Condition(f"grid_lanes_int32_{name}", f"{name} * block <= 2^31", grid * block <= INT32_LIMIT,
                      name),)


def int32_arg_ok(value, name: str) -> tuple[Condition, ...]:
    """A runtime integer argument Triton passes as int32 (it fits)."""
    return (Condition(f"int32_arg_{name}", f"-2^31 <= {name} < 2^31",
                      all_of(-INT32_LIMIT <= value, value < INT32_LIMIT), name),)


# --- caller tensors (host side) -------------------------------------------------------------
# What a build needs of the tensors it is handed.  ``reference.validation`` refuses a call
# that violates one of these (naming ``Condition.argument``) before any write; the fuzz
# evaluates them on its own boundary cases to decide whether a call must be accepted.
# Plain values only: dtypes are torch dtype names ("int64", "uint8", "bool").

def dtype_ok(dtype_name: str, allowed, name: str) -> tuple[Condition, ...]:
    allowed = (allowed,) if isinstance(allowed, str) else tuple(allowed)
    return (Condition("dtype", f"{name} dtype is {' or '.join(allowed)}", dtype_name in allowed, name),)


def rank_ok(rank, expected, name: str) -> tuple[Condition, ...]:
    return (Condition("rank", f"{name} is {expected}-D", rank == expected, name),)


def table_shape_ok(shape, expected, name: str) -> tuple[Condition, ...]:
    """An input table has exactly the spec's shape (e.g. ``selected_index``: ``(bs, n - 1)``)."""
    return (Condition("table_shape", f"{name} has shape {tuple(expected)}", tuple(shape) == tuple(expected),
                      name),)


def output_holds_ok(numel, needed, name: str) -> tuple[Condition, ...]:
    """An output holds every cell the batch writes; a larger one is fine (only the batch's
    extent is written)."""
    return (Condition("output_holds_batch", f"{name} holds >= {needed} cells", numel >= needed, name),)


def output_rows_ok(width, expected, name: str) -> tuple[Condition, ...]:
    """A 2-D output's rows are exactly ``expected`` entries wide (its cells are ``row * width + col``)."""
    return (Condition("output_row_width", f"{name} rows have {expected} entries", width == expected, name),)


def output_row_count_ok(rows, expected, name: str) -> tuple[Condition, ...]:
    """A per-step output has exactly one row per draft step (row ``iters - 1`` serves step ``iters``)."""
    return (Condition("output_row_count", f"{name} has {expected} rows", rows == expected, name),)


def flat_layout_ok(contiguous: bool, name: str) -> tuple[Condition, ...]:
    """Cells are flat row-major offsets: an output must be contiguous."""
    return (Condition("output_contiguous", f"{name} is contiguous", bool(contiguous), name),)


def distinct_outputs_ok(shares_storage_with: str | None, name: str) -> tuple[Condition, ...]:
    """Two outputs that hold cells never share storage (one write would clobber the other)."""
    return (Condition("outputs_distinct", f"{name} shares storage with no other output",
                      shares_storage_with is None, name),)


def outputs_disjoint_ok(overlaps: str | None, name: str) -> tuple[Condition, ...]:
    """Weaker than :func:`distinct_outputs_ok`, for callers that hand over views of one
    allocation (sglang's ``(3, bs, n)`` retrive buffer as three views): the outputs' memory
    ranges do not intersect, so each is still its own memory and no write clobbers another."""
    return (Condition("outputs_disjoint", f"{name} overlaps no other output", overlaps is None, name),)


def input_holds_ok(numel, needed, name: str) -> tuple[Condition, ...]:
    """An input a launch reads at entries ``[0, needed)`` has at least that many."""
    return (Condition("input_holds_launch", f"{name} holds >= {needed} entries", numel >= needed, name),)


def kv_positions_ok(positions_prefix_z, prefix_b, t, topk, seq_len_b, z) -> tuple[Condition, ...]:
    """The ``positions`` a draft kv launch sums for ``kv_indptr`` entry ``z = b*K + t`` are the
    model's: ``sum(positions[:z]) == kv_positions_prefix(P[b], t, K, seq_len[b])`` (positions
    is each request's ``seq_len`` repeated K times)."""
    want = kv_positions_prefix(prefix_b, t, topk, seq_len_b)
    return (Condition("positions_are_branch_seq_lens",
                      f"sum(positions[:{z}]) == kv_positions_prefix = {want}",
                      positions_prefix_z == want, "positions"),)


def prefilled_ok(first_other_cell, fill, name: str) -> tuple[Condition, ...]:
    """An output the kernel reads before it writes (sglang's tree build links siblings
    through ``retrive_next_token``'s -1 cells, and ORs bits into a zeroed BITPACKING mask)
    holds ``fill`` in every cell of the batch before the launch."""
    return (Condition("prefilled", f"{name} holds {fill} in every cell of the batch before the launch",
                      first_other_cell is None, name),)


def input_layout_ok(contiguous: bool, name: str) -> tuple[Condition, ...]:
    """An input the kernel reads in place (``req_to_token``, never copied) is addressed as
    ``row * row_width + col``: it must be contiguous, not a column slice or a strided view of
    a wider table (the kernel proofs assume row stride = row width and column stride 1)."""
    return (Condition("input_contiguous", f"{name} is contiguous", bool(contiguous), name),)


def output_not_input_ok(shares_storage_with: str | None, name: str) -> tuple[Condition, ...]:
    """An output shares storage with no input the build reads (a write could change what
    another program reads; the kernel proofs model every tensor as its own memory)."""
    return (Condition("output_not_input", f"{name} shares storage with no input",
                      shares_storage_with is None, name),)


def pool_index_ok(row, pool_rows, b) -> tuple[Condition, ...]:
    """``req_pool_indices[b]`` names a row of ``req_to_token``."""
    return (Condition("pool_index_in_range", f"0 <= req_pool_indices[{b}] < req_to_token rows ({pool_rows})",
                      all_of(0 <= row, row < pool_rows), "req_pool_indices"),)


def req_to_token_row_ok(row_width, seq_len, topk, num_steps, page_size, b) -> tuple[Condition, ...]:
    """The ``req_to_token`` row of request ``b`` holds every slot the draft build reads
    (:func:`~specbound.spec.kv_req_to_token_span`, which depends on the page size)."""
    span = kv_req_to_token_span(seq_len, topk, num_steps, page_size)
    return (Condition("req_to_token_covers_reads",
                      f"req_to_token row width >= kv_req_to_token_span of request {b} ({span})",
                      span <= row_width, "req_to_token"),)


def kv_capacity_holds(seq_lens_sum, topk, num_seqs, num_steps, row_width) -> tuple[Condition, ...]:
    """:func:`~specbound.spec.draft_kv_capacity_ok` (the host check sglang asserts), named."""
    return (Condition("kv_capacity",
                      "kv_indices row width >= draft_kv_indices_used_len(S, K, num_seqs*K, num_steps)",
                      draft_kv_capacity_ok(seq_lens_sum, topk, num_seqs, num_steps, row_width), "kv_indices"),)


def kv_indptr_row_ok(row_width, num_seqs, topk) -> tuple[Condition, ...]:
    """Every branch's ``kv_indptr`` entry and entry 0 (:func:`~specbound.spec.kv_indptr_row_len`)."""
    needed = kv_indptr_row_len(num_seqs, topk)
    return (Condition("kv_indptr_covers_branches", f"kv_indptr rows have >= {needed} entries",
                      needed <= row_width, "kv_indptr"),)


def kv_copy_lossless_ok(kv_bits, r2t_bits) -> tuple[Condition, ...]:
    """A slot number copied from ``req_to_token`` into ``kv_indices`` is never truncated
    (:func:`~specbound.spec.kv_copy_lossless`)."""
    return (Condition("kv_copy_lossless", "kv_indices is at least as wide as req_to_token",
                      kv_copy_lossless(kv_bits, r2t_bits), "kv_indices"),)
