"""The target-verify tree mask: layouts, sizes, cells and who writes them.

Notation: ``n`` = num_draft_tokens (tree size with the root), ``C`` =
max_context_len, ``seq_len_b`` = verified prefix of request ``b`` (draft tokens
excluded), ``prefix_b`` = ``P[b]`` = sum of ``seq_len`` over the requests before ``b``.

Layouts (one flat buffer for the whole batch):

* QLEN_ONLY: request ``b`` owns ``n*n`` cells from ``b*n*n``; row ``t`` is ``n``
  cells, column ``j`` is tree node ``j``.  The kernel writes every cell.
* FULL_MASK: request ``b`` owns ``n*(seq_len_b+n)`` cells from ``n*P[b] + b*n*n``;
  row ``t`` has ``seq_len_b + n`` columns: the prefix columns ``[0, seq_len_b)``
  (filled True by the caller) then the tree columns ``seq_len_b + j``, which the
  kernel writes.
* QLEN_ONLY_BITPACKING: request ``b`` owns ``n`` items from ``b*n``; row ``t`` is
  the single item ``b*n + t`` and tree node ``j`` is bit ``j``.  Items are 8, 16 or
  32 bits wide, chosen by ``n``.  The kernel writes the whole item.
"""

from __future__ import annotations

import enum

from .conditions import BITPACK_MAX_DRAFT_TOKENS
from .errors import SpecArgumentError, SpecTypeError
from .symbolic import check_int, ite, is_symbolic


class TreeMaskMode(enum.IntEnum):
    FULL_MASK = 0
    QLEN_ONLY = 1
    QLEN_ONLY_BITPACKING = 2


ALL_MODES = tuple(TreeMaskMode)


def as_mode(mode) -> TreeMaskMode:
    """Accept a TreeMaskMode, its int value or its name; anything else is an error."""
    if isinstance(mode, TreeMaskMode):
        return mode
    if isinstance(mode, str):
        try:
            return TreeMaskMode[mode.upper()]
        except KeyError:
            pass
    elif isinstance(mode, int) and not isinstance(mode, bool):
        try:
            return TreeMaskMode(mode)
        except ValueError:
            pass
    else:
        raise SpecTypeError("mode", f"must be a TreeMaskMode, got {type(mode).__name__} {mode!r}")
    names = ", ".join(f"{m.name}={m.value}" for m in TreeMaskMode)
    raise SpecArgumentError("mode", f"unknown tree mask mode {mode!r} (expected one of {names})")


def _n(num_draft_tokens, mode: TreeMaskMode | None = None):
    n = check_int("num_draft_tokens", num_draft_tokens, minimum=1)
    if mode is TreeMaskMode.QLEN_ONLY_BITPACKING and not is_symbolic(n) and n > BITPACK_MAX_DRAFT_TOKENS:
        raise SpecArgumentError(
            "num_draft_tokens",
            f"must be <= {BITPACK_MAX_DRAFT_TOKENS} for QLEN_ONLY_BITPACKING, got {n}")
    return n


def bitpack_item_bits(num_draft_tokens):
    """Width of one BITPACKING item: the smallest of 8/16/32 bits holding ``n`` bits."""
    n = _n(num_draft_tokens, TreeMaskMode.QLEN_ONLY_BITPACKING)
    return ite(n <= 8, 8, ite(n <= 16, 16, 32))


def mask_dtype_name(mode, num_draft_tokens) -> str:
    """Element type of the tree mask (a torch dtype name; plain values only): ``bool``
    cells, or unsigned items of :func:`bitpack_item_bits` bits for BITPACKING (as sglang
    allocates them: uint8 / uint16 / uint32)."""
    mode = as_mode(mode)
    if mode is TreeMaskMode.QLEN_ONLY_BITPACKING:
        return f"uint{bitpack_item_bits(num_draft_tokens)}"
    _n(num_draft_tokens, mode)
    return "bool"


# --- sizes --------------------------------------------------------------------------

def mask_request_numel(mode, num_draft_tokens, seq_len_b):
    """Cells (items for BITPACKING) request ``b`` owns in a batch."""
    mode = as_mode(mode)
    n = _n(num_draft_tokens, mode)
    s = check_int("seq_len", seq_len_b, minimum=0)
    if mode is TreeMaskMode.FULL_MASK:
        return n * (s + n)
    if mode is TreeMaskMode.QLEN_ONLY:
        return n * n
    return n


def mask_request_numel_worst(mode, num_draft_tokens, max_context_len):
    """Per-request worst case: :func:`mask_request_numel` at ``seq_len_b = C``."""
    c = check_int("max_context_len", max_context_len, minimum=1)
    return mask_request_numel(mode, num_draft_tokens, c)


def tree_mask_numel(mode, max_bs, num_draft_tokens, max_context_len):
    """Preallocated VerifyMask buffer for CUDA-graph capture at ``max_bs`` requests."""
    bs = check_int("max_bs", max_bs, minimum=0)
    return bs * mask_request_numel_worst(mode, num_draft_tokens, max_context_len)


def mask_batch_numel(mode, bs, num_draft_tokens, seq_lens_sum):
    """Exact cells a batch uses: FULL ``S*n + bs*n*n``, QLEN ``bs*n*n``, BITPACKING ``bs*n``.

    The batch ends where a request ``bs`` would begin, so this is
    :func:`mask_request_base` at ``b = bs, P[bs] = S`` (one formula, not two).  It is
    also the size of the per-batch fallback allocation when the preallocated buffer
    does not fit.
    """
    bs = check_int("bs", bs, minimum=0)
    total = check_int("seq_lens_sum", seq_lens_sum, minimum=0)
    return mask_request_base(mode, bs, num_draft_tokens, total)


def fallback_numel(mode, bs, num_draft_tokens, seq_lens_sum):
    """Per-batch allocation used when :func:`fits` is False: exactly the batch's extent."""
    return mask_batch_numel(mode, bs, num_draft_tokens, seq_lens_sum)


def trivial_verify_numel(bs, seq_lens_sum):
    """Trivial verify (no draft steps, ``n = 1``): ``S + bs`` cells, all True."""
    bs = check_int("bs", bs, minimum=0)
    total = check_int("seq_lens_sum", seq_lens_sum, minimum=0)
    return total + bs


def fits(bs, max_bs):
    """Whether a batch of ``bs`` requests may reuse the buffer captured at ``max_bs``.

    Both layouts size every request at its worst case, so the batch size is the only
    free quantity (sglang #33127 fixed a version that let FULL_MASK always fit).
    """
    bs = check_int("bs", bs, minimum=0)
    cap = check_int("max_bs", max_bs, minimum=0)
    return bs <= cap


# --- cells --------------------------------------------------------------------------

def mask_request_base(mode, b, num_draft_tokens, prefix_b):
    """First cell of request ``b``: FULL ``n*P[b] + b*n*n``, QLEN ``b*n*n``, BITPACKING ``b*n``."""
    mode = as_mode(mode)
    n = _n(num_draft_tokens, mode)
    b = check_int("b", b, minimum=0)
    p = check_int("prefix_b", prefix_b, minimum=0)
    if mode is TreeMaskMode.FULL_MASK:
        return n * p + b * n * n
    if mode is TreeMaskMode.QLEN_ONLY:
        return b * n * n
    return b * n


def mask_row_width(mode, num_draft_tokens, seq_len_b):
    """Cells in one row: FULL ``seq_len_b + n``, QLEN ``n``, BITPACKING one item."""
    mode = as_mode(mode)
    n = _n(num_draft_tokens, mode)
    s = check_int("seq_len", seq_len_b, minimum=0)
    if mode is TreeMaskMode.FULL_MASK:
        return s + n
    if mode is TreeMaskMode.QLEN_ONLY:
        return n
    return 1


def mask_row_start(mode, b, t, num_draft_tokens, seq_len_b, prefix_b):
    """First cell of row ``t`` (tree node ``t``) of request ``b``."""
    t = check_int("t", t, minimum=0)
    return (mask_request_base(mode, b, num_draft_tokens, prefix_b)
            + mask_row_width(mode, num_draft_tokens, seq_len_b) * t)


def mask_tree_column(mode, j, seq_len_b):
    """Column of tree node ``j`` inside a row (FULL: after the prefix; BITPACKING: the
    row's single item, node ``j`` being bit ``j``)."""
    mode = as_mode(mode)
    j = check_int("j", j, minimum=0)
    s = check_int("seq_len", seq_len_b, minimum=0)
    if mode is TreeMaskMode.FULL_MASK:
        return s + j
    if mode is TreeMaskMode.QLEN_ONLY:
        return j
    return 0


def mask_tree_cell(mode, b, t, j, num_draft_tokens, seq_len_b, prefix_b):
    """Cell the kernel writes for (request ``b``, row ``t``, tree node ``j``)."""
    return (mask_row_start(mode, b, t, num_draft_tokens, seq_len_b, prefix_b)
            + mask_tree_column(mode, j, seq_len_b))


def mask_bit(mode, j):
    """Bit of tree node ``j`` inside its BITPACKING item (0 for the other layouts)."""
    mode = as_mode(mode)
    j = check_int("j", j, minimum=0)
    return j if mode is TreeMaskMode.QLEN_ONLY_BITPACKING else 0


def mask_prefix_cell(mode, b, t, c, num_draft_tokens, seq_len_b, prefix_b):
    """FULL_MASK prefix cell (row ``t``, column ``c < seq_len_b``): the caller's fill
    writes it True.  Other layouts have no prefix columns."""
    mode = as_mode(mode)
    if mode is not TreeMaskMode.FULL_MASK:
        raise SpecArgumentError("mode", f"only FULL_MASK has prefix columns, got {mode.name}")
    c = check_int("c", c, minimum=0)
    return mask_row_start(mode, b, t, num_draft_tokens, seq_len_b, prefix_b) + c


def mask_prefix_columns(mode, seq_len_b):
    """How many prefix columns each row has: ``seq_len_b`` for FULL_MASK, else 0."""
    mode = as_mode(mode)
    s = check_int("seq_len", seq_len_b, minimum=0)
    return s if mode is TreeMaskMode.FULL_MASK else 0


def mask_tree_columns(mode, num_draft_tokens):
    """How many cells per row the kernel writes: ``n``, or one item for BITPACKING."""
    mode = as_mode(mode)
    n = _n(num_draft_tokens, mode)
    return 1 if mode is TreeMaskMode.QLEN_ONLY_BITPACKING else n
