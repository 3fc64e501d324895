"""Draft-decode ``kv_indices``: row width, used length, segments, ``kv_indptr`` and
the ``req_to_token`` slots the extension reads.

Buffer shape ``(num_steps, width)``; row ``i`` serves draft step ``iters = i + 1``.
The grid is (num_steps, num_seqs, K); branch ``(b, t)`` (``t < K``) is flat branch
``z = b*K + t`` and owns one segment per row: ``seq_len_b`` prefix slots copied from
``req_to_token[req_pool_indices[b], 0:seq_len_b]``, then ``iters`` extension slots.
``seq_len_b`` excludes draft tokens; ``P[b]`` is the prefix sum of ``seq_len``.
"""

from __future__ import annotations

from .symbolic import any_of, cdiv, check_int, floordiv, ite, mod


def draft_kv_indices_buffer_width(num_seqs, topk, max_context_len):
    """Row width: ``num_seqs * K * C`` (each of the ``num_seqs*K`` branches may attend
    to ``C`` slots).  The factor K was missing in sglang #27338."""
    s = check_int("num_seqs", num_seqs, minimum=0)
    k = check_int("topk", topk, minimum=1)
    c = check_int("max_context_len", max_context_len, minimum=1)
    return s * k * c


def draft_branches(num_seqs, topk):
    """``bs_d``: the number of draft branches, ``num_seqs * K``."""
    return check_int("num_seqs", num_seqs, minimum=0) * check_int("topk", topk, minimum=1)


def draft_kv_indices_used_len(seq_lens_sum, topk, num_branches, steps):
    """Slots used by rows up to step ``steps``: ``S*K + bs_d*steps``.

    Called with ``steps = i + 1`` to slice row ``i`` and with the full step count for
    the capacity check (every row is written by the grid)."""
    total = check_int("seq_lens_sum", seq_lens_sum, minimum=0)
    k = check_int("topk", topk, minimum=1)
    bs_d = check_int("num_branches", num_branches, minimum=0)
    st = check_int("steps", steps, minimum=0)
    return total * k + bs_d * st


def kv_indptr_row_len(num_seqs, topk):
    """Entries of one ``kv_indptr`` row the build writes: entry 0 and one per branch,
    ``num_seqs * K + 1`` (entry ``z`` is where branch ``z`` starts, entry ``bs_d`` is used_len)."""
    return draft_branches(num_seqs, topk) + 1


def kv_copy_lossless(kv_bits, r2t_bits):
    """``kv_indices`` copies slot numbers out of ``req_to_token``: its integer type must be at
    least as wide (an int64 slot in an int32 cell could be truncated)."""
    return check_int("kv_bits", kv_bits, minimum=1) >= check_int("r2t_bits", r2t_bits, minimum=1)


def draft_kv_capacity_steps(num_steps):
    """Step count the capacity check uses: all of them, because the grid writes every row
    (checking at ``num_steps - 1`` misses the last row)."""
    return check_int("num_steps", num_steps, minimum=1)


def draft_kv_capacity_ok(seq_lens_sum, topk, num_seqs, num_steps, row_width):
    """The host check before launch: ``used_len(S, K, num_seqs*K, num_steps) <= row_width``."""
    used = draft_kv_indices_used_len(seq_lens_sum, topk, draft_branches(num_seqs, topk),
                                     draft_kv_capacity_steps(num_steps))
    return used <= check_int("row_width", row_width, minimum=0)


def kv_segment_start(prefix_b, b, t, topk, iters, seq_len_b):
    """Start of branch (b, t) in row ``iters - 1``: ``P[b]*K + b*iters*K + t*(seq_len_b + iters)``.

    Written in the order the kernel computes it, so the int32 argument applies term by term."""
    p = check_int("prefix_b", prefix_b, minimum=0)
    b = check_int("b", b, minimum=0)
    t = check_int("t", t, minimum=0)
    k = check_int("topk", topk, minimum=1)
    it = check_int("iters", iters, minimum=1)
    s = check_int("seq_len", seq_len_b, minimum=0)
    return p * k + b * it * k + t * (s + it)


def kv_segment_len(seq_len_b, iters):
    """A branch's segment: its ``seq_len_b`` prefix slots, then ``iters`` extension slots."""
    return check_int("seq_len", seq_len_b, minimum=0) + check_int("iters", iters, minimum=1)


def kv_positions_prefix(prefix_b, t, topk, seq_len_b):
    """``sum_{z' < z} positions[z']`` for branch ``z = b*K + t``: ``P[b]*K + t*seq_len_b``
    (positions is seq_len repeated K times; KV-INDPTR-MATCHES-OFFSETS proves the identity)."""
    p = check_int("prefix_b", prefix_b, minimum=0)
    t = check_int("t", t, minimum=0)
    return p * check_int("topk", topk, minimum=1) + t * check_int("seq_len", seq_len_b, minimum=0)


def kv_indptr_entry(positions_prefix_z, z, iters):
    """``kv_indptr[row][z] = sum_{z' < z} positions[z'] + z*iters`` where ``positions`` is
    ``seq_len`` repeated K times per request (entry 0 is 0; entry ``bs_d`` is used_len)."""
    q = check_int("positions_prefix", positions_prefix_z, minimum=0)
    z = check_int("z", z, minimum=0)
    it = check_int("iters", iters, minimum=1)
    return q + z * it


def kv_indices_cell(width, iters, offset):
    """Flat element of ``kv_indices[iters - 1, offset]`` in a row-major ``(num_steps, width)`` buffer."""
    w = check_int("width", width, minimum=0)
    it = check_int("iters", iters, minimum=1)
    o = check_int("offset", offset, minimum=0)
    return (it - 1) * w + o


# --- reads of req_to_token ------------------------------------------------------------

def _contiguous_branches(topk, page_size):
    """Branches extend contiguously after the prefix when pages are single slots or K = 1."""
    return any_of(page_size == 1, topk == 1)


def kv_last_page_len(seq_len_b, page_size):
    return mod(check_int("seq_len", seq_len_b, minimum=0), check_int("page_size", page_size, minimum=1))


def kv_prefix_base(seq_len_b, page_size):
    """First slot of the page that holds the end of the prefix: ``(seq_len // page) * page``."""
    page = check_int("page_size", page_size, minimum=1)
    return floordiv(check_int("seq_len", seq_len_b, minimum=0), page) * page


def kv_pages_per_branch(seq_len_b, num_steps, page_size):
    """``npp = ceil((seq_len % page + num_steps) / page)``: pages each branch's extension spans."""
    page = check_int("page_size", page_size, minimum=1)
    st = check_int("num_steps", num_steps, minimum=1)
    return cdiv(kv_last_page_len(seq_len_b, page) + st, page)


def kv_extension_start(seq_len_b, t, topk, num_steps, page_size):
    """``req_to_token`` slot of extension 0 of branch ``t``.

    page_size 1 or K = 1: ``seq_len + t*num_steps``.  Otherwise branches are page
    aligned: ``prefix_base + t*npp*page + seq_len % page``."""
    s = check_int("seq_len", seq_len_b, minimum=0)
    t = check_int("t", t, minimum=0)
    k = check_int("topk", topk, minimum=1)
    st = check_int("num_steps", num_steps, minimum=1)
    page = check_int("page_size", page_size, minimum=1)
    paged = (kv_prefix_base(s, page) + t * kv_pages_per_branch(s, st, page) * page
             + kv_last_page_len(s, page))
    return ite(_contiguous_branches(k, page), s + t * st, paged)


def kv_extension_read(seq_len_b, t, e, topk, num_steps, page_size):
    """``req_to_token`` slot read for extension ``e`` (``0 <= e < iters``) of branch ``t``."""
    return kv_extension_start(seq_len_b, t, topk, num_steps, page_size) + check_int("e", e, minimum=0)


def kv_req_to_token_span(seq_len_b, topk, num_steps, page_size):
    """One past the last ``req_to_token`` slot request ``b`` may read (prefix and every
    branch's extension): ``seq_len + K*num_steps`` (contiguous) or
    ``prefix_base + K*npp*page`` (page aligned).  The ``req_to_token`` row must be
    at least this wide."""
    s = check_int("seq_len", seq_len_b, minimum=0)
    k = check_int("topk", topk, minimum=1)
    st = check_int("num_steps", num_steps, minimum=1)
    page = check_int("page_size", page_size, minimum=1)
    paged = kv_prefix_base(s, page) + k * kv_pages_per_branch(s, st, page) * page
    return ite(_contiguous_branches(k, page), s + k * st, paged)


def kv_req_to_token_read_end(seq_len_b, topk, num_steps, page_size):
    """One past the last ``req_to_token`` slot the draft kv build reads for request ``b``: the
    last extension of the last branch, in the last draft step (theorem KV-R2T-READ-END).  Equal
    to :func:`kv_req_to_token_span` for contiguous branches; below it when branches are page
    aligned, because a branch's last page is read only up to its ``num_steps`` slots (the span
    counts whole pages: what sglang reserves, not what the kernel reads)."""
    k = check_int("topk", topk, minimum=1)
    st = check_int("num_steps", num_steps, minimum=1)
    return kv_extension_read(seq_len_b, k - 1, st - 1, k, st, page_size) + 1


def req_to_token_draft_row_width(max_context_len, topk, num_steps, page_size):
    """The spec's ``req_to_token`` row width for the draft decode: at least
    :func:`kv_req_to_token_span` of every request with draft room (``seq_len + num_steps <=
    C``; theorem KV-R2T-ROW-COVERS).  The longest such request has ``seq_len = C - num_steps``:
    contiguous branches end at ``C - num_steps + K*num_steps``; page-aligned ones at that
    request's prefix base plus ``K`` branches of the most pages any request's extension spans,
    ``ceil((page - 1 + num_steps) / page)`` (the largest ``seq_len % page`` is ``page - 1``).

    A ``req_to_token`` row is also what sglang's decode reservation writes into (the draft
    slots live there); ``C + 4 + num_draft_tokens``, the row sglang allocates at page size 1,
    is narrower whenever ``(K - 1) * num_steps > 4 + num_draft_tokens``."""
    c = check_int("max_context_len", max_context_len, minimum=1)
    k = check_int("topk", topk, minimum=1)
    st = check_int("num_steps", num_steps, minimum=1)
    page = check_int("page_size", page_size, minimum=1)
    longest = ite(c >= st, c - st, 0)
    paged = kv_prefix_base(longest, page) + k * cdiv(page - 1 + st, page) * page
    return ite(_contiguous_branches(k, page), longest + k * st, paged)


# --- the decode reservation's writes into req_to_token ---------------------------------

def decode_reservation_end(committed_len, reserve, page_size):
    """One past the last ``req_to_token`` slot a decode step's reservation writes for a request:
    its committed length plus the reserve, rounded up to whole pages (the reservation allocates
    pages; sglang's ``page_aligned_decode_alloc_lens`` and the kernel ``assign_req_to_token_pool``
    that stores the slots).  The row must be at least this wide (theorem KV-R2T-RESERVATION-COVERS)."""
    c = check_int("committed_len", committed_len, minimum=0)
    r = check_int("reserve", reserve, minimum=0)
    page = check_int("page_size", page_size, minimum=1)
    return cdiv(c + r, page) * page


def req_to_token_reservation_row_width(max_committed_len, reserve, page_size):
    """The spec's ``req_to_token`` row width for the decode reservation: the end of the
    reservation of the longest request still decoding (the engine's scheduler bounds its
    committed length by ``max_committed_len``)."""
    return decode_reservation_end(max_committed_len, reserve, page_size)
