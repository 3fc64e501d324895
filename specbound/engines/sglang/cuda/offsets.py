"""Where the CUDA tree kernels' 32-bit ``int`` offsets wrap: the smallest cases, from the spec.

The kernels form every mask offset in ``int``: the cell of (request, row, column) for
the bool layouts (``token_tree_idx + i``), and the first byte of a row's item for
BITPACKING (``(bid * n + tid) * num_bytes_per_item``, a 64-bit product narrowed to
``int``).  The differential fuzz shows those offsets are the spec's cells (the kernel's
write footprint equals ``spec.mask_kernel_cells``), so they wrap exactly when a spec cell
of the batch reaches 2^31; the largest is the batch's last cell.  For each layout this
module finds the smallest parameter at which that happens (a search on the spec's own
functions), then asks the trusted core for both halves: ``core.satisfy`` for a wrapping
offset at that value, ``core.check`` that no offset of the batch wraps for any smaller
value.  Nothing here runs a kernel: :mod:`.check` runs the one case small enough to run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import z3

from specbound import spec
from specbound.proofs import core, minimise
from specbound.spec import TreeMaskMode

from .tree import BITPACK, FULL, QLEN

LIMIT = spec.INT32_LIMIT
HOST_MAX_DRAFT_TOKENS = 1024     # sglang's host wrapper: CHECK_HOST(draft_token_num <= 1024)


@dataclass(frozen=True)
class WrapBound:
    mode: TreeMaskMode
    n: int
    bs: int
    seq_len: int               # of every request
    varied: str                # "seq_len" or "bs": the parameter minimised, the other fixed
    offset: int                # the kernel's largest offset at the smallest case (>= 2^31)
    proved: bool               # satisfy found the wrap and check proved none below
    proof: str                 # what the core said (names and seconds), or why not
    mask_bytes: int            # the mask's size at the smallest case


def offset(mode, b, t, j, n, seq_len_b, prefix_b):
    """The int the kernel forms for (request b, row t, tree column j): the spec's cell, or
    for BITPACKING the first byte of the row's item."""
    cell = spec.mask_tree_cell(mode, b, t, j, n, seq_len_b, prefix_b)
    return cell * (spec.bitpack_item_bits(n) // 8) if mode is BITPACK else cell


def _last_offset(mode, bs, n, seq_len, prefix_last):
    return offset(mode, bs - 1, n - 1, 0 if mode is BITPACK else n - 1, n, seq_len, prefix_last)


def _smallest(wraps: Callable[[int], bool], lo: int) -> int:
    """Smallest x >= lo with wraps(x), for a monotone predicate (doubling, then bisection)."""
    hi = max(lo, 1)
    while not wraps(hi):
        lo, hi = hi + 1, hi * 2
    return minimise.least(lambda x: x if wraps(x) else None, lo - 1, hi)


def _prove(name: str, mode, n: int, varied: str, value: int, fixed: int) -> tuple[bool, str]:
    """satisfy: an offset >= 2^31 at ``value``; check: every offset < 2^31 below it."""
    x, b, t, j = z3.Ints("x b t j")
    if varied == "seq_len":            # one request (bs = 1, prefix 0) of seq_len x
        last = _last_offset(mode, 1, n, x, 0)
        cell = offset(mode, 0, t, j, n, x, 0)
        ranges = {"request": b == 0}
    else:                              # x requests with seq_len 0 (QLEN/BITPACKING do not use it)
        last = _last_offset(mode, x, n, fixed, 0)
        cell = offset(mode, b, t, j, n, fixed, 0)
        ranges = {"request": z3.And(0 <= b, b < x)}
    witness = core.satisfy(f"{name}/wraps", {"at": x == value, "wraps": last >= LIMIT})
    if witness is None:
        return False, f"{name}: no wrapping offset at {varied} = {value}"
    columns = j == 0 if mode is BITPACK else z3.And(0 <= j, j < n)
    hyps = {"below": z3.And(0 <= x, x < value), "row": z3.And(0 <= t, t < n), "column": columns, **ranges}
    try:
        proof = core.check(f"{name}/none_below", z3.And(0 <= cell, cell < LIMIT), hyps=hyps)
    except (core.Refuted, core.Unknown) as e:
        return False, f"{name}: not proved below {value} ({type(e).__name__})"
    return True, (f"core.satisfy found the wrap at {varied} = {value} ({witness.seconds * 1000:.0f} ms); "
                  f"core.check proved every offset < 2^31 for {varied} < {value} ({proof.seconds * 1000:.0f} ms)")


def smallest_seq_len(n: int) -> WrapBound:
    """FULL_MASK, one request: the smallest seq_len at which an offset wraps."""
    s = _smallest(lambda v: _last_offset(FULL, 1, n, v, 0) >= LIMIT, 0)
    proved, proof = _prove(f"CUDA-INT32-FULL-n{n}", FULL, n, "seq_len", s, 0)
    return WrapBound(FULL, n, 1, s, "seq_len", _last_offset(FULL, 1, n, s, 0), proved, proof,
                     spec.mask_batch_numel(FULL, 1, n, s))


def smallest_bs(mode, n: int) -> WrapBound:
    """QLEN_ONLY / BITPACKING (no seq_len in the layout): the smallest batch that wraps."""
    bs = _smallest(lambda v: _last_offset(mode, v, n, 0, 0) >= LIMIT, 1)
    proved, proof = _prove(f"CUDA-INT32-{mode.name}-n{n}", mode, n, "bs", bs, 0)
    mask_bytes = spec.mask_batch_numel(mode, bs, n, 0) * (spec.bitpack_item_bits(n) // 8 if mode is BITPACK else 1)
    return WrapBound(mode, n, bs, 0, "bs", _last_offset(mode, bs, n, 0, 0), proved, proof, mask_bytes)


def smallest_bs_at_context(n: int, context: int) -> WrapBound:
    """FULL_MASK with every request at ``seq_len = context``: the smallest batch that wraps
    (computed with the spec on integers; not proved)."""
    def last(bs):
        return _last_offset(FULL, bs, n, context, spec.prefix_sums([context] * bs)[bs - 1])
    bs = _smallest(lambda v: last(v) >= LIMIT, 1)
    return WrapBound(FULL, n, bs, context, "bs", last(bs), False, "computed on the spec (not a proof)",
                     spec.mask_batch_numel(FULL, bs, n, bs * context))


def bounds() -> list[WrapBound]:
    """The cases the audit reports: FULL_MASK at sglang's default n = 8 and the host
    wrapper's maximum n = 1024, a 128K-context batch, QLEN_ONLY at n = 1024, BITPACKING at n = 32."""
    return [smallest_seq_len(8), smallest_seq_len(HOST_MAX_DRAFT_TOKENS), smallest_bs_at_context(8, 131072),
            smallest_bs(QLEN, HOST_MAX_DRAFT_TOKENS), smallest_bs(BITPACK, spec.BITPACK_MAX_DRAFT_TOKENS)]


def describe(w: WrapBound) -> str:
    if w.varied == "seq_len":
        case = f"bs = 1, n = {w.n}: seq_len >= {w.seq_len:,}"
    elif w.mode is FULL:
        case = f"n = {w.n}, every seq_len = {w.seq_len:,}: bs >= {w.bs:,}"
    else:
        case = f"n = {w.n}: bs >= {w.bs:,}"
    return f"{w.mode.name} {case} (mask {w.mask_bytes:,} bytes; largest offset {w.offset:,})"
