"""Draft-decode ``kv_indices`` / ``kv_indptr`` as one Triton kernel.

A program handles ``BLOCK_B`` requests and every (step, branch) pair of them at once:
the pair axis ``q`` enumerates ``iters = q // K + 1``, ``t = q % K`` for ``q < num_steps*K``.
The prefix copy loads each column block of ``req_to_token`` once and stores it into
all ``num_steps * K`` segments of the request (a (request x pair x column) tile); the
extension slots are a (request x pair x e) tile.  ``P[b]`` comes from the host (one
cumsum per batch), every offset is int64 before any multiplication, and index
expressions are written in the shape of the spec function named beside them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specbound import spec
from specbound.reference import validation

from .checked import interpreter_active


@triton.jit
def draft_kv_kernel(
    req_pool_indices_ptr, req_to_token_ptr, seq_lens_ptr, prefix_ptr,
    kv_indices_ptr, kv_indptr_ptr,
    num_seqs, topk, num_steps, page_size, width, indptr_stride, r2t_stride0, r2t_stride1,
    BLOCK_B: tl.constexpr, PAIRS: tl.constexpr, STEPS: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Grid: (cdiv(num_seqs, BLOCK_B),).  ``PAIRS`` >= num_steps*K and ``STEPS`` >=
    num_steps are powers of two; ``width`` = kv_indices row width, ``indptr_stride`` =
    kv_indptr row width."""
    # Host contract: the lane axes cover every (step, branch) pair and every step (else
    # segments would be silently cut short).
    tl.device_assert(num_steps * topk <= PAIRS, "draft_kv_kernel: PAIRS < num_steps * topk")
    tl.device_assert(num_steps <= STEPS, "draft_kv_kernel: STEPS < num_steps")
    pid = tl.program_id(0)
    rb = pid.to(tl.int64) * BLOCK_B + tl.arange(0, BLOCK_B)
    req_ok = rb < num_seqs
    b = rb.to(tl.int64)
    s = tl.load(seq_lens_ptr + b, mask=req_ok, other=0).to(tl.int64)
    p = tl.load(prefix_ptr + b, mask=req_ok, other=0).to(tl.int64)
    row = tl.load(req_pool_indices_ptr + b, mask=req_ok, other=0).to(tl.int64)
    src_row = req_to_token_ptr + row * r2t_stride0                   # (B,) row base

    q = tl.arange(0, PAIRS)
    pair_ok = q < num_steps * topk
    iters = (q // topk + 1).to(tl.int64)                              # step served by row iters-1
    t = (q % topk).to(tl.int64)                                       # branch
    # Scalar arguments are never cast with .to (Triton may specialize a 1 into a
    # constexpr): every product below starts from an int64 tile, which widens them.

    # (B, PAIRS) segment starts: spec.kv_segment_start = P[b]*K + b*iters*K + t*(seq_len + iters)
    p2 = p[:, None]
    b2 = b[:, None]
    s2 = s[:, None]
    it2 = iters[None, :]
    t2 = t[None, :]
    start = p2 * topk + b2 * it2 * topk + t2 * (s2 + it2)
    # spec.kv_indices_cell(width, iters, offset) = (iters - 1)*width + offset
    seg = (it2 - 1) * width + start
    ok2 = req_ok[:, None] & pair_ok[None, :]

    # --- prefix slots: req_to_token[row, c] for c < seq_len, into every segment ----------
    c_lane = tl.arange(0, BLOCK_C).to(tl.int64)
    s_max = tl.max(tl.where(req_ok, s, 0), axis=0)
    for c0 in range(0, s_max, BLOCK_C):
        c = c0 + c_lane                                               # (BLOCK_C,)
        c_ok = req_ok[:, None] & (c[None, :] < s2)                    # (B, BLOCK_C)
        vals = tl.load(src_row[:, None] + c[None, :] * r2t_stride1, mask=c_ok, other=0)
        dst = seg[:, :, None] + c[None, None, :]                      # (B, PAIRS, BLOCK_C)
        tl.store(kv_indices_ptr + dst,
                 tl.broadcast_to(vals[:, None, :], [BLOCK_B, PAIRS, BLOCK_C]).to(
                     kv_indices_ptr.dtype.element_ty),
                 mask=ok2[:, :, None] & c_ok[:, None, :])

    # --- extension slots: e < iters, read at spec.kv_extension_read -----------------------
    e = tl.arange(0, STEPS).to(tl.int64)[None, None, :]               # (1, 1, STEPS)
    last = s2 % page_size                                             # spec.kv_last_page_len
    prefix_base = (s2 // page_size) * page_size                       # spec.kv_prefix_base
    npp = (last + num_steps + page_size - 1) // page_size             # spec.kv_pages_per_branch
    paged = prefix_base + t2 * npp * page_size + last
    contiguous = (page_size == 1) | (topk == 1)
    ext_start = tl.where(contiguous, s2 + t2 * num_steps, paged)      # spec.kv_extension_start
    e_ok = ok2[:, :, None] & (e < it2[:, :, None])
    read = ext_start[:, :, None] + e                                  # spec.kv_extension_read
    ext = tl.load(src_row[:, None, None] + read * r2t_stride1, mask=e_ok, other=0)
    # the segment's extension cells follow its seq_len prefix cells
    tl.store(kv_indices_ptr + (seg[:, :, None] + s2[:, :, None] + e),
             ext.to(kv_indices_ptr.dtype.element_ty), mask=e_ok)

    # --- kv_indptr ----------------------------------------------------------------------
    # Branch z = b*K + t writes entry z + 1 (its segment's end):
    # spec.kv_indptr_entry(positions_prefix_{z+1}, z + 1, iters) with
    # positions_prefix_{z+1} = spec.kv_positions_prefix(P[b], t + 1, K, seq_len).
    z1 = b2 * topk + t2 + 1
    entry = (p2 * topk + (t2 + 1) * s2) + z1 * it2
    tl.store(kv_indptr_ptr + ((it2 - 1) * indptr_stride + z1),
             entry.to(kv_indptr_ptr.dtype.element_ty), mask=ok2)
    # Entry 0 of every row is written too (kv_indptr_entry(0, 0, iters) = 0), by program 0
    # only: pid*STEPS + i < num_steps holds for pid = 0 alone, as STEPS >= num_steps.  (A
    # block & scalar-bool mask would trip triton 3.9's interpreter, which keeps such a
    # mask as int32 data.)
    i = tl.arange(0, STEPS)
    tl.store(kv_indptr_ptr + i.to(tl.int64) * indptr_stride,
             tl.zeros([STEPS], dtype=kv_indptr_ptr.dtype.element_ty),
             mask=(pid.to(tl.int64) * STEPS + i) < num_steps)


# --- launch wrapper ----------------------------------------------------------------------

# below the kernels, so that their line numbers (cited by the proofs and their reports) stay put
from . import plan as launch_plans  # noqa: E402

# Compiled or interpreted, as the kernels above were defined (the block choosers' budgets
# differ: launch_plans.BUDGETS).
COMPILED = not interpreter_active()


def kv_blocks(num_seqs: int, topk: int, num_steps: int,
              tile_budget: int | None = None) -> tuple[int, int, int, int]:
    """(BLOCK_B, PAIRS, STEPS, BLOCK_C) this process launches for a batch
    (``launch_plans.kv_blocks`` in this process's mode)."""
    return launch_plans.kv_blocks(num_seqs, topk, num_steps, compiled=COMPILED,
                                  tile_budget=tile_budget)


def r2t_strides(req_to_token) -> tuple[int, int]:
    """``req_to_token``'s strides as launched.  A dimension of size 1 is only ever indexed at
    0, so torch leaves its stride arbitrary (a one-row slice of a wider table keeps that
    table's row stride) and it never reaches an address; it is launched as the row-major one,
    so a contiguous table gets exactly (row width, 1), the proofs' req_to_token_contiguous."""
    rows, width = req_to_token.shape
    s0, s1 = req_to_token.stride()
    return (s0 if rows > 1 else width), (s1 if width > 1 else 1)


def draft_decode_kv_indices(req_pool_indices, req_to_token, seq_lens, *, topk, num_steps,
                            page_size=1, kv_indices=None, kv_indptr=None,
                            tile_budget: int | None = None, require_proved: bool = False):
    """Triton draft-decode kv_indices: same signature, validation, errors and results as
    ``specbound.reference.draft_decode_kv_indices`` (``tile_budget`` only tunes the
    launch).  ``require_proved=True`` refuses (``plan.UnprovedSpecialization``, before any
    write) a launch whose specialization is not proved (``plan.proved_specialization``).
    Returns ``(kv_indices, kv_indptr)``."""
    require_proved = validation.check_flag("require_proved", require_proved)
    a = validation.validate_draft_kv_args(
        req_pool_indices, req_to_token, seq_lens, topk=topk, num_steps=num_steps,
        page_size=page_size, kv_indices=kv_indices, kv_indptr=kv_indptr)
    launch_kv(a.req_pool_indices, a.req_to_token, a.seq_lens, a.kv_indices, a.kv_indptr, topk=a.topk,
              num_steps=a.num_steps, page_size=a.page_size, seq_lens_list=a.seq_lens_list,
              prefix=a.prefix, tile_budget=tile_budget, require_proved=require_proved)
    return a.kv_indices, a.kv_indptr


def launch_kv(req_pool_indices, req_to_token, seq_lens, kv_indices, kv_indptr, *, topk, num_steps,
              page_size=1, seq_lens_list=None, prefix=None, tile_budget: int | None = None,
              require_proved: bool = False):
    """The launch alone, with no check of any size: ``draft_decode_kv_indices`` calls it after
    validation, and the fuzz's mutant replays call it with a caller's own (possibly wrong)
    sizing, as a replayed CUDA graph would.  ``seq_lens_list`` / ``prefix`` (P[0..bs]) may be
    passed when the caller already has them; ``require_proved``: see ``draft_decode_kv_indices``."""
    lens = seq_lens.tolist() if seq_lens_list is None else seq_lens_list
    num_seqs = len(lens)
    if num_seqs == 0:
        # No branch: only entry 0 of each row exists (spec.kv_indptr_entry(0, 0, iters)).
        kv_indptr[:, 0] = 0
        return
    prefix = spec.prefix_sums(lens) if prefix is None else prefix
    p = torch.tensor(prefix[:-1], dtype=torch.int64, device=seq_lens.device)
    block_b, pairs, steps, block_c = kv_blocks(num_seqs, topk, num_steps, tile_budget)
    if require_proved:
        launch_plans.require_proved(
            [("draft_kv_kernel", {"BLOCK_B": block_b, "PAIRS": pairs, "STEPS": steps, "BLOCK_C": block_c,
                                  "INDICES": validation.dtype_name(kv_indices.dtype),
                                  "INDPTR": validation.dtype_name(kv_indptr.dtype)})],
            f"num_seqs={num_seqs}, topk={topk}, num_steps={num_steps}, max_seq_len={max(lens)}, "
            f"{'compiled' if COMPILED else 'interpreted'}, tile_budget={tile_budget}")
    tensors = {"req_pool_indices_ptr": req_pool_indices, "req_to_token_ptr": req_to_token, "seq_lens_ptr": seq_lens,
               "prefix_ptr": p, "kv_indices_ptr": kv_indices, "kv_indptr_ptr": kv_indptr}
    stride0, stride1 = r2t_strides(req_to_token)
    launch_plans.kv_plan(tensors, num_seqs=num_seqs, topk=topk, num_steps=num_steps, page_size=page_size,
                         width=kv_indices.shape[1], indptr_stride=kv_indptr.shape[1], r2t_stride0=stride0,
                         r2t_stride1=stride1, block_b=block_b, pairs=pairs, steps=steps,
                         block_c=block_c).launch(draft_kv_kernel)
