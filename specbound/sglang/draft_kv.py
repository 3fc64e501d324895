"""``generate_draft_decode_kv_indices``: sglang's draft-decode Triton kernel, launched as sglang
launches it (``generate_draft_decode_kv_indices[grid](...)``), checked.

The grid and the arguments are sglang 0.5.23's (``sglang/kernels/ops/speculative/cache_locs.py``):
grid ``(num_steps, num_seqs, topk)``, or ``(NUM_STEPS * blocks, num_seqs, topk)`` with the
token-block specialization ``NUM_STEPS > 0``; ``num_seqs`` and ``topk`` are read from the
grid, as the kernel reads them.  What the spec models is the pristine read plan: no sliding
window (``window_size = 0``; ``sink_size`` is then unused, as in the kernel), a token-granular
table (``ENTRY_PAGE_SIZE = 1``) and no page translation (``v2p = None``, ``TRANSLATE = False``);
any other value is refused by name.

Before writing, every condition of the kernel's host contract is checked on the buffers
(the spec's conditions: the kv_indices row holds ``used_len``, every ``kv_indptr`` entry,
every ``req_to_token`` read, the lane bounds ``bs_upper`` / ``iter_upper`` /
``num_tokens_upper``, int32 row offsets, ``positions`` the branches' ``seq_len``), then
exactly the cells sglang's kernel writes are written: every segment of every row of
``kv_indices`` and entries ``1 .. num_seqs*topk`` of every ``kv_indptr`` row (entry 0 is
never written; it must already hold 0, as sglang's zero-filled buffer does).
"""

from __future__ import annotations

from specbound import reference, spec
from specbound.reference import validation
from specbound.spec import SpecArgumentError

from ._checks import conditions_named, first_other, refuse, tensor_of

_INDEX = ("int64", "int32")
# The read-plan arguments the spec has no model of: name -> the one value it models.
_MODELLED = {"window_size": 0, "ENTRY_PAGE_SIZE": 1, "v2p": None, "TRANSLATE": False}
# Launch options Triton takes beside the kernel's own arguments (they change no result).
_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas")


def _grid(grid, meta: dict) -> tuple[int, int, int]:
    if callable(grid):
        grid = grid(meta)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
        raise SpecArgumentError("grid", f"must be a tuple of 1 to 3 ints (or a function of the arguments "
                                        f"returning one), got {grid!r}")
    dims = [spec.check_int(f"grid[{i}]", g, minimum=0) for i, g in enumerate(grid)]
    return tuple(dims + [1] * (3 - len(dims)))


def _steps(g0: int, NUM_STEPS) -> int:
    """The step count the kernel derives from the grid (``tl.num_programs(0)``, or NUM_STEPS)."""
    steps = spec.check_int("NUM_STEPS", NUM_STEPS, minimum=0)
    if steps == 0:
        return g0
    if g0 < steps or g0 % steps:
        raise SpecArgumentError("grid", f"grid[0] = {g0} must be NUM_STEPS * blocks with blocks >= 1 "
                                        f"(NUM_STEPS = {steps}): the kernel splits axis 0 into steps and token blocks")
    return steps


def _launch(grid, req_pool_indices, req_to_token, paged_kernel_lens, kv_indices, kv_indptr, positions, row_stride,
            kv_indices_stride, kv_indptr_stride, bs_upper, iter_upper, num_tokens_upper, page_size, window_size=0,
            sink_size=0, NUM_STEPS=0, ENTRY_PAGE_SIZE=1, v2p=None, TRANSLATE=False, **options) -> None:
    unknown = sorted(set(options) - set(_LAUNCH_OPTIONS))
    if unknown:
        raise TypeError(f"generate_draft_decode_kv_indices: unexpected argument(s) {', '.join(unknown)}")
    given = {"window_size": window_size, "ENTRY_PAGE_SIZE": ENTRY_PAGE_SIZE, "v2p": v2p, "TRANSLATE": TRANSLATE}
    for name, value in given.items():
        if not (value is None if _MODELLED[name] is None else value == _MODELLED[name]):
            shown = "a tensor" if name == "v2p" else repr(value)
            raise SpecArgumentError(name, f"{shown} is not modelled by the spec (it covers {name} = "
                                          f"{_MODELLED[name]!r}: no sliding window, a token-granular table, no "
                                          f"page translation); use sglang's own kernel for this launch")
    g0, num_seqs, topk = _grid(grid, {"NUM_STEPS": NUM_STEPS, "page_size": page_size})
    num_steps = _steps(g0, NUM_STEPS)
    spec.require(spec.kv_shape_ok(topk, num_steps, page_size))
    if num_seqs == 0:
        return   # no program runs
    scalars = {"grid[0]": g0, "num_seqs": num_seqs, "topk": topk, "row_stride": row_stride, "page_size": page_size,
               "kv_indices_stride": kv_indices_stride, "kv_indptr_stride": kv_indptr_stride}
    for name, value in scalars.items():
        refuse(spec.int32_arg_ok(spec.check_int(name, value), name), lambda: f"{name} = {value} does not fit an int32")
    branches = spec.draft_branches(num_seqs, topk)
    for name, needed, lanes in (("bs_upper", num_seqs, bs_upper), ("iter_upper", num_steps, iter_upper),
                                ("num_tokens_upper", branches, num_tokens_upper)):
        refuse(spec.lane_bound_ok(needed, spec.check_int(name, lanes), name),
               lambda: f"{name} = {lanes} lanes, the launch needs {needed} (sglang passes next_power_of_2)")

    inputs = {"req_pool_indices": (req_pool_indices, num_seqs), "paged_kernel_lens": (paged_kernel_lens, num_seqs),
              "positions": (positions, branches)}
    for name, (value, needed) in inputs.items():
        tensor_of(name, value, _INDEX)
        refuse(spec.input_holds_ok(value.numel(), needed, name),
               lambda: f"has {value.numel()} entries, the launch reads {needed}")
    seq_lens = paged_kernel_lens.reshape(-1)[:num_seqs]
    lens = seq_lens.tolist()
    for b, s in enumerate(lens):
        refuse(spec.seq_len_nonneg_ok(s, f"paged_kernel_lens[{b}]", "paged_kernel_lens"), lambda: f"is {s}")
    prefix = spec.prefix_sums(lens)
    total = prefix[-1]

    tensor_of("kv_indices", kv_indices, _INDEX)
    width = kv_indices.shape[-1] if kv_indices.dim() else 0
    refuse(spec.table_shape_ok(kv_indices.shape, (num_steps, kv_indices_stride), "kv_indices"),
           lambda: f"has shape {tuple(kv_indices.shape)}; the launch addresses it as {num_steps} rows "
                   f"(num_steps) of kv_indices_stride = {kv_indices_stride} entries")
    used = spec.draft_kv_indices_used_len(total, topk, branches, spec.draft_kv_capacity_steps(num_steps))
    refuse(spec.kv_capacity_holds(total, topk, num_seqs, num_steps, width),
           lambda: f"kv_indices row has {width} entries, this launch writes up to {used} "
                   f"(seq_lens_sum*topk + num_seqs*topk*num_steps = {total}*{topk} + {num_seqs}*{topk}*{num_steps})")
    tensor_of("kv_indptr", kv_indptr, _INDEX)
    refuse(spec.table_shape_ok(kv_indptr.shape, (num_steps, kv_indptr_stride), "kv_indptr"),
           lambda: f"has shape {tuple(kv_indptr.shape)}; the launch addresses it as {num_steps} rows "
                   f"(num_steps) of kv_indptr_stride = {kv_indptr_stride} entries")
    for name, stride in (("kv_indices_stride", kv_indices_stride), ("kv_indptr_stride", kv_indptr_stride)):
        refuse(spec.int32_row_offsets_ok(num_steps, stride, name),
               lambda: f"row {num_steps - 1} starts at {(num_steps - 1) * stride}: sglang's kernel forms the row "
                       f"offset {name} * step in int32")
    tensor_of("req_to_token", req_to_token, _INDEX)
    refuse(spec.table_shape_ok(req_to_token.shape, (req_to_token.shape[0], row_stride), "req_to_token"),
           lambda: f"has shape {tuple(req_to_token.shape)}; the launch reads row r at r * row_stride = "
                   f"r * {row_stride}: pass the table whose rows are row_stride wide")

    pos = positions.reshape(-1)[:branches].tolist()
    pos_prefix = spec.prefix_sums(pos)
    for z in range(1, branches + 1):
        b, t = divmod(z, topk)
        s_b = lens[b] if b < num_seqs else 0
        refuse(spec.kv_positions_ok(pos_prefix[z], prefix[b], t, topk, s_b, z),
               lambda: f"sum(positions[:{z}]) = {pos_prefix[z]} but the launch's kv_indptr needs "
                       f"{spec.kv_positions_prefix(prefix[b], t, topk, s_b)}: positions must be each request's "
                       f"seq_len repeated topk times (positions[:16] = {pos[:16]})")

    # Everything else (pool rows, req_to_token reads, kv_indptr width, dtypes, layouts, aliasing).
    with conditions_named():
        args = validation.validate_draft_kv_args(
            req_pool_indices.reshape(-1)[:num_seqs], req_to_token, seq_lens, topk=topk, num_steps=num_steps,
            page_size=page_size, kv_indices=kv_indices, kv_indptr=kv_indptr)
    column0 = args.kv_indptr[:, 0]   # validated: num_steps rows of >= num_seqs*topk + 1 entries
    bad = first_other(column0, 0, num_steps)
    refuse(spec.prefilled_ok(bad, 0, "kv_indptr"),
           lambda: f"kv_indptr[{bad}, 0] = {int(column0[bad])}: sglang's kernel never writes entry 0 of a row, "
                   f"it must hold 0 (sglang allocates kv_indptr with torch.zeros)")
    reference.write_draft_kv(args, indptr_entry_zero=False)


class _Kernel:
    """Subscript with a grid, then call with the kernel's arguments, as a Triton kernel."""

    __name__ = "generate_draft_decode_kv_indices"

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            return _launch(grid, *args, **kwargs)
        return launch

    def __call__(self, *args, **kwargs):
        raise TypeError("generate_draft_decode_kv_indices is launched with a grid: "
                        "generate_draft_decode_kv_indices[grid](...)")

    def __repr__(self) -> str:
        return "<specbound.sglang.generate_draft_decode_kv_indices (checked drop-in)>"


generate_draft_decode_kv_indices = _Kernel()
