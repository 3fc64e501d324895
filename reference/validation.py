"""Argument validation shared by the reference and the Triton kernel wrappers.

Both implementations call the same two entry points, so a bad argument raises the
same error (same class, same ``argument``, same message) whichever one the caller
picked.  Everything here runs before the first write: on error, no caller buffer
has been touched.

Errors are :class:`specbound.spec.SpecArgumentError` (bad value, shape, size) or
:class:`specbound.spec.SpecTypeError` (bad type, dtype); both carry ``.argument``
and ``.condition`` and their message starts with the argument name.

Every size, and every condition a call must meet, comes from :mod:`specbound.spec`
(``spec.output_holds_ok``, ``spec.req_to_token_row_ok``, ...): this module evaluates
those conditions and words the error; the fuzz evaluates the same conditions on its
own boundary cases to decide whether a call must be accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch

from specbound import spec
from specbound.spec import SpecArgumentError, SpecTypeError, TreeMaskMode

# Element types: the spec names them (spec.INDEX_DTYPES, spec.TOKEN_DTYPE, spec.KV_DTYPES,
# spec.mask_dtype_name); torch spells them torch.<name>.
_TOKEN_DTYPE = getattr(torch, spec.TOKEN_DTYPE)


class TreeBuild(NamedTuple):
    """What a tree build returns (the reference's and the kernels' alike)."""

    tree_mask: torch.Tensor            # flat: bool cells, or uint8/16/32 items (BITPACKING)
    positions: torch.Tensor            # (bs*n,) int64
    retrive_index: torch.Tensor        # (bs, n) int64
    retrive_next_token: torch.Tensor   # (bs, n) int64
    retrive_next_sibling: torch.Tensor  # (bs, n) int64


class MalformedTreeError(SpecArgumentError):
    """``strict=True`` found a draft tree the kernel would handle only by the guarded
    semantics.  ``request``, ``node`` and ``defect`` say where and what."""

    def __init__(self, argument: str, request: int, node: int, defect: str, detail: str):
        self.request = request
        self.node = node
        self.defect = defect
        super().__init__(argument, f"request {request}, node {node}: {defect} ({detail})")


# --- scalars --------------------------------------------------------------------------

def check_flag(name: str, value: Any) -> bool:
    """A boolean switch; 0/1 or None would hide a caller bug, so only bool passes."""
    if not isinstance(value, (bool, np.bool_)):
        raise SpecTypeError(name, f"must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def mask_dtype(mode: TreeMaskMode, num_draft_tokens: int) -> torch.dtype:
    """dtype of the tree mask (spec.mask_dtype_name): bool cells, or uint8/16/32 items for BITPACKING."""
    return getattr(torch, spec.mask_dtype_name(mode, num_draft_tokens))


def dtype_name(dtype: torch.dtype) -> str:
    """The spec's name of a torch dtype (``torch.int64`` -> ``"int64"``)."""
    return str(dtype).removeprefix("torch.")


def _refuse_unless(conditions: Sequence[spec.Condition], message: Callable[[], str],
                   error: type[SpecArgumentError] = SpecArgumentError) -> None:
    """Raise ``error`` naming the argument of the first spec condition that fails (the
    condition itself rides along as ``spec_condition``, for callers that name it)."""
    for cond in conditions:
        if not cond.holds:
            err = error(cond.argument, message())
            err.spec_condition = cond
            raise err


# --- tensors --------------------------------------------------------------------------

def _shape_text(shape: Sequence[Any]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


def as_index_tensor(name: str, value: Any, *, rank: int, device: torch.device | None = None,
                    copy_ok: bool = True) -> torch.Tensor:
    """An integer input as a contiguous int64 tensor (numpy arrays are converted).

    ``device``: the device every tensor of the call must share (None: take this one's).
    ``copy_ok=False`` keeps the caller's tensor (no widening, no copy) for large
    read-only inputs such as ``req_to_token``.
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "i":
            raise SpecTypeError(name, f"must hold signed integers (int64 or int32), got numpy {value.dtype}")
        value = torch.from_numpy(np.ascontiguousarray(value))
    elif not isinstance(value, torch.Tensor):
        raise SpecTypeError(name, f"must be a torch.Tensor or numpy array, got {type(value).__name__}")
    _refuse_unless(spec.dtype_ok(dtype_name(value.dtype), spec.INDEX_DTYPES, name),
                   lambda: f"must have dtype torch.int64 (or torch.int32), got {value.dtype}", SpecTypeError)
    _refuse_unless(spec.rank_ok(value.dim(), rank, name),
                   lambda: f"must be {rank}-D, got shape {_shape_text(value.shape)}")
    if device is not None and value.device != device:
        raise SpecArgumentError(name, f"must be on device {device} like the other inputs, got {value.device}")
    if not copy_ok:
        return value
    return value.to(torch.int64).contiguous()


def check_output(name: str, value: Any, *, dtype: torch.dtype | Sequence[torch.dtype], device: torch.device,
                 rank: int, min_numel: int, row_width: int | None = None) -> torch.Tensor:
    """A caller-provided output buffer: exact dtype, same device, contiguous (the
    flat cell indices of the spec assume row-major storage), rank, and large enough
    for every cell the batch writes.  A larger buffer is fine: only the batch's
    extent is written."""
    if not isinstance(value, torch.Tensor):
        raise SpecTypeError(name, f"must be a torch.Tensor, got {type(value).__name__}")
    dtypes = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
    _refuse_unless(spec.dtype_ok(dtype_name(value.dtype), [dtype_name(d) for d in dtypes], name),
                   lambda: f"must have dtype {' or '.join(str(d) for d in dtypes)}, got {value.dtype}",
                   SpecTypeError)
    if value.device != device:
        raise SpecArgumentError(name, f"must be on device {device} like the inputs, got {value.device}")
    _refuse_unless(spec.rank_ok(value.dim(), rank, name),
                   lambda: f"must be {rank}-D, got shape {_shape_text(value.shape)}")
    _refuse_unless(spec.flat_layout_ok(value.is_contiguous(), name),
                   lambda: "must be contiguous (cells are addressed as flat row-major offsets)")
    if row_width is not None:
        _refuse_unless(spec.output_rows_ok(value.shape[-1], row_width, name),
                       lambda: f"rows must have {row_width} entries, got shape {_shape_text(value.shape)}")
    _refuse_unless(spec.output_holds_ok(value.numel(), min_numel, name),
                   lambda: f"too small for the batch: needs {min_numel} elements, got {value.numel()} "
                           f"(shape {_shape_text(value.shape)})")
    return value


def _byte_span(t: torch.Tensor) -> tuple[int, int, int]:
    """(storage, first byte, one past the last byte) of the memory a tensor's elements occupy."""
    start = t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.untyped_storage().data_ptr(), start, start + (last + 1) * t.element_size()


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    (sa, a0, a1), (sb, b0, b1) = _byte_span(a), _byte_span(b)
    return sa == sb and a0 < b1 and b0 < a1


def check_no_alias(named: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor] | None = None, *,
                   disjoint_views: bool = False) -> None:
    """Output buffers must not share storage with each other (one write would clobber
    another) nor with ``inputs``, the tensors the build reads as validated (a write would
    change what another program reads).  ``disjoint_views``: outputs may be views of one
    allocation whose memory ranges do not intersect (``spec.outputs_disjoint_ok``, sglang's
    one retrive buffer passed as three views); an actual overlap is still refused."""
    seen: dict[int, str] = {}
    placed: dict[str, torch.Tensor] = {}
    for name, t in named.items():
        if t.numel() == 0:
            continue
        ptr = t.untyped_storage().data_ptr()
        if disjoint_views:
            other = next((o for o, u in placed.items() if _overlaps(t, u)), None)
            _refuse_unless(spec.outputs_disjoint_ok(other, name),
                           lambda: f"overlaps {other} in memory; outputs may be views of one buffer only "
                                   f"where they do not intersect")
        else:
            _refuse_unless(spec.distinct_outputs_ok(seen.get(ptr), name),
                           lambda: f"shares storage with {seen[ptr]}; outputs must be distinct buffers")
        seen[ptr] = name
        placed[name] = t
    read = {t.untyped_storage().data_ptr(): i for i, t in (inputs or {}).items() if t.numel()}
    for ptr, name in seen.items():
        _refuse_unless(spec.output_not_input_ok(read.get(ptr), name),
                       lambda: f"shares storage with the input {read[ptr]}; an output must not overlap "
                               f"what the build reads")


def _seq_lens_list(seq_lens: torch.Tensor) -> list[int]:
    values = seq_lens.tolist()
    for b, s in enumerate(values):
        _refuse_unless(spec.seq_len_nonneg_ok(s, f"seq_lens[{b}]", "seq_lens"),
                       lambda: f"must be >= 0, got seq_lens[{b}] = {s}")
    return values


# --- tree build -----------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class BuildTreeArgs:
    """Normalized arguments of one tree build (see :func:`validate_build_tree_args`)."""

    parent_list: torch.Tensor      # (bs, parent_list_width) int64
    selected_index: torch.Tensor   # (bs, n - 1) int64
    seq_lens: torch.Tensor         # (bs,) int64
    seq_lens_list: list[int]
    prefix: list[int]              # spec.prefix_sums(seq_lens): P[b], total at [bs]
    topk: int
    depth: int
    num_draft_tokens: int
    mode: TreeMaskMode
    bs: int
    mask_numel: int                # spec.mask_batch_numel: cells (items) the batch owns
    token_numel: int               # positions / retrive_* cells the batch owns
    tree_mask: torch.Tensor
    positions: torch.Tensor
    retrive_index: torch.Tensor
    retrive_next_token: torch.Tensor
    retrive_next_sibling: torch.Tensor
    fill_prefix_mask: bool
    strict: bool
    device: torch.device

    @property
    def seq_lens_sum(self) -> int:
        return self.prefix[-1]


def validate_build_tree_args(parent_list, selected_index, seq_lens, *, topk, depth, num_draft_tokens,
                             mode, tree_mask=None, positions=None, retrive_index=None,
                             retrive_next_token=None, retrive_next_sibling=None,
                             fill_prefix_mask=True, strict=False, disjoint_views=False) -> BuildTreeArgs:
    """Check every argument of a tree build and allocate the outputs left as None.

    Raises SpecArgumentError / SpecTypeError naming the argument; writes nothing.
    Allocated outputs are exactly the batch's size (from the spec); the mask is
    zero-filled (False / 0) and retrive_* rows are -1 until the build writes them.
    ``disjoint_views``: see :func:`check_no_alias` (the sglang drop-in passes True).
    """
    k = spec.check_int("topk", topk, minimum=1)
    d = spec.check_int("depth", depth, minimum=1)
    n = spec.check_int("num_draft_tokens", num_draft_tokens, minimum=1)
    spec.require(spec.tree_shape_ok(k, d, n))
    mode = spec.as_mode(mode)
    if mode is TreeMaskMode.QLEN_ONLY_BITPACKING:
        spec.require(spec.bitpack_ok(n))
    fill_prefix_mask = check_flag("fill_prefix_mask", fill_prefix_mask)
    strict = check_flag("strict", strict)

    seq_lens = as_index_tensor("seq_lens", seq_lens, rank=1)
    device = seq_lens.device
    selected_index = as_index_tensor("selected_index", selected_index, rank=2, device=device)
    parent_list = as_index_tensor("parent_list", parent_list, rank=2, device=device)
    bs = seq_lens.shape[0]
    sel_shape = (bs, spec.selected_index_width(n))
    _refuse_unless(spec.table_shape_ok(selected_index.shape, sel_shape, "selected_index"),
                   lambda: f"must have shape (bs, num_draft_tokens - 1) = {_shape_text(sel_shape)}, "
                           f"got {_shape_text(selected_index.shape)}")
    pl_shape = (bs, spec.parent_list_width(k, d))
    _refuse_unless(spec.table_shape_ok(parent_list.shape, pl_shape, "parent_list"),
                   lambda: f"must have shape (bs, topk*(depth-1)+1), or (bs, 0) when depth = 1, = "
                           f"{_shape_text(pl_shape)}, got {_shape_text(parent_list.shape)}")
    seq_list = _seq_lens_list(seq_lens)
    prefix = spec.prefix_sums(seq_list)
    mask_numel = spec.mask_batch_numel(mode, bs, n, prefix[-1])
    token_numel = spec.token_numel(bs, n)

    outs = {}
    m_dtype = mask_dtype(mode, n)
    if tree_mask is None:
        tree_mask = torch.zeros(mask_numel, dtype=m_dtype, device=device)
    outs["tree_mask"] = check_output("tree_mask", tree_mask, dtype=m_dtype, device=device, rank=1,
                                     min_numel=mask_numel)
    if positions is None:
        positions = torch.zeros(token_numel, dtype=_TOKEN_DTYPE, device=device)
    outs["positions"] = check_output("positions", positions, dtype=_TOKEN_DTYPE, device=device, rank=1,
                                     min_numel=token_numel)
    for name, buf in (("retrive_index", retrive_index), ("retrive_next_token", retrive_next_token),
                      ("retrive_next_sibling", retrive_next_sibling)):
        if buf is None:
            buf = torch.full((bs, n), -1, dtype=_TOKEN_DTYPE, device=device)
        outs[name] = check_output(name, buf, dtype=_TOKEN_DTYPE, device=device, rank=2,
                                  min_numel=token_numel, row_width=n)
    check_no_alias(outs, {"parent_list": parent_list, "selected_index": selected_index, "seq_lens": seq_lens},
                   disjoint_views=check_flag("disjoint_views", disjoint_views))
    return BuildTreeArgs(
        parent_list=parent_list, selected_index=selected_index, seq_lens=seq_lens.to(torch.int64),
        seq_lens_list=seq_list, prefix=prefix, topk=k, depth=d, num_draft_tokens=n, mode=mode, bs=bs,
        mask_numel=mask_numel, token_numel=token_numel, fill_prefix_mask=fill_prefix_mask, strict=strict,
        device=device, **outs)


def check_tree_well_formed(b: int, sel_row: Sequence[int], pl_row: Sequence[int], topk: int, depth: int,
                           num_draft_tokens: int) -> None:
    """``strict=True``: raise :class:`MalformedTreeError` for the first defect of request ``b``.

    Defects, checked in this order so each one is reported by its own name:
    parent slot out of range (or a negative entry), missing parent, cycle, node ids
    not increasing (a parent id >= its child's), depth above ``depth``.
    """
    n = num_draft_tokens
    for t in range(1, n):
        j = t - 1
        sel_value = int(sel_row[j])
        kind = spec.parent_slot_kind(sel_value, topk, depth)
        if kind == spec.SLOT_INVALID:
            width = spec.parent_list_width(topk, depth)
            what = ("negative selected_index entry" if sel_value < 0 else
                    f"slot {spec.parent_slot(sel_value, topk)} outside parent_list row of width {width}")
            raise MalformedTreeError("selected_index", b, t, "parent index out of range",
                                     f"selected_index[{b}, {j}] = {sel_value}: {what}")
        if kind == spec.SLOT_LOOKUP:
            _, found, _ = spec.lookup(sel_row, pl_row, j, topk, depth, n)
            if not found:
                slot = spec.parent_slot(sel_value, topk)
                raise MalformedTreeError(
                    "parent_list", b, t, "missing parent",
                    f"parent_list[{b}, {slot}] = {int(pl_row[slot])} is not among the "
                    f"{spec.selected_index_width(n)} selected_index entries of the row")
    parent_of = spec.parents(sel_row, pl_row, topk, depth, n)
    for t in range(1, n):
        seen, cur = {t}, parent_of[t]
        while cur is not None and cur != 0:
            if cur in seen:
                raise MalformedTreeError("parent_list", b, t, "cycle",
                                         f"walking up from node {t} reaches node {cur} again")
            seen.add(cur)
            cur = parent_of[cur]
    for t in range(1, n):
        p = parent_of[t]
        if p is not None and p >= t:
            raise MalformedTreeError("parent_list", b, t, "node ids not increasing",
                                     f"parent id {p} >= child id {t}")
    limit = spec.walk_max_steps(depth)
    for t in range(1, n):
        hops, cur = 0, t
        while cur is not None and cur != 0:
            hops, cur = hops + 1, parent_of[cur]
        if hops > limit:
            raise MalformedTreeError("parent_list", b, t, "too deep",
                                     f"node {t} is {hops} levels below the root, depth is {depth}")


# --- draft-decode kv_indices ----------------------------------------------------------

@dataclass(frozen=True, eq=False)
class DraftKvArgs:
    """Normalized arguments of one draft kv_indices build (see :func:`validate_draft_kv_args`)."""

    req_pool_indices: torch.Tensor  # (num_seqs,) int64
    req_to_token: torch.Tensor      # (pool rows, row width), the caller's tensor, never copied
    seq_lens: torch.Tensor          # (num_seqs,) int64
    seq_lens_list: list[int]
    pool_rows: list[int]            # req_pool_indices as a list
    prefix: list[int]               # spec.prefix_sums(seq_lens)
    num_seqs: int
    topk: int
    num_steps: int
    page_size: int
    num_branches: int               # spec.draft_branches: num_seqs * topk
    used_len: int                   # spec.draft_kv_indices_used_len at num_steps
    kv_indices: torch.Tensor        # (num_steps, width)
    kv_indptr: torch.Tensor         # (num_steps, >= num_branches + 1)
    device: torch.device

    @property
    def seq_lens_sum(self) -> int:
        return self.prefix[-1]

    @property
    def width(self) -> int:
        return self.kv_indices.shape[1]


_KV_DTYPES = tuple(getattr(torch, name) for name in spec.KV_DTYPES)


def capacity_message(need: int, width: int, *, topk: int, num_seqs: int, seq_lens_sum: int,
                     num_steps: int) -> str:
    return (f"draft kv_indices row too small: need {need} slots but row width is {width} "
            f"(topk={topk}, num_seqs={num_seqs}, seq_lens_sum={seq_lens_sum}, num_steps={num_steps}); "
            f"size the buffer with spec.draft_kv_indices_buffer_width(num_seqs, topk, max_context_len)")


def validate_draft_kv_args(req_pool_indices, req_to_token, seq_lens, *, topk, num_steps, page_size=1,
                           kv_indices=None, kv_indptr=None) -> DraftKvArgs:
    """Check every argument of the draft-decode kv_indices build; allocate missing outputs.

    When ``kv_indices`` is None it is allocated with the minimal row width that
    passes the capacity check, ``spec.draft_kv_indices_used_len(S, K, num_seqs*K,
    num_steps)``, int64, filled -1 (cells outside the footprint stay -1).
    ``kv_indptr`` is allocated (num_steps, num_seqs*K + 1) int64, filled -1: the
    build writes every used entry, entry 0 included.
    """
    k = spec.check_int("topk", topk, minimum=1)
    steps = spec.check_int("num_steps", num_steps, minimum=1)
    page = spec.check_int("page_size", page_size, minimum=1)
    spec.require(spec.kv_shape_ok(k, steps, page))

    seq_lens = as_index_tensor("seq_lens", seq_lens, rank=1)
    device = seq_lens.device
    req_pool_indices = as_index_tensor("req_pool_indices", req_pool_indices, rank=1, device=device)
    req_to_token = as_index_tensor("req_to_token", req_to_token, rank=2, device=device, copy_ok=False)
    # The kernel reads row r at r * row width (the proofs' req_to_token_contiguous).  A strided
    # view is refused, not copied: the table is the whole request pool, so a copy would be a
    # hidden cost of pool size on every launch (and every CUDA-graph replay).
    _refuse_unless(spec.input_layout_ok(req_to_token.is_contiguous(), "req_to_token"),
                   lambda: f"must be contiguous (row r is read at r * row width), got shape "
                           f"{_shape_text(req_to_token.shape)} with strides {_shape_text(req_to_token.stride())}: "
                           f"a column slice or strided view of a wider table; pass the whole table")
    num_seqs = seq_lens.shape[0]
    _refuse_unless(spec.table_shape_ok(req_pool_indices.shape, (num_seqs,), "req_pool_indices"),
                   lambda: f"must have one entry per request ({num_seqs}), "
                           f"got shape {_shape_text(req_pool_indices.shape)}")
    seq_list = _seq_lens_list(seq_lens)
    rows = req_pool_indices.tolist()
    pool_rows, r2t_width = req_to_token.shape
    for b, (row, s) in enumerate(zip(rows, seq_list)):
        _refuse_unless(spec.pool_index_ok(row, pool_rows, b),
                       lambda: f"entry {b} = {row} is outside req_to_token's {pool_rows} rows")
        _refuse_unless(spec.req_to_token_row_ok(r2t_width, s, k, steps, page, b),
                       lambda: f"rows too narrow: request {b} (seq_len {s}) reads up to slot "
                               f"{spec.kv_req_to_token_span(s, k, steps, page) - 1}, row width is {r2t_width}")
    prefix = spec.prefix_sums(seq_list)
    bs_d = spec.draft_branches(num_seqs, k)
    # The grid writes every row, so the check counts every step (spec.draft_kv_capacity_steps).
    used = spec.draft_kv_indices_used_len(prefix[-1], k, bs_d, spec.draft_kv_capacity_steps(steps))

    if kv_indices is None:
        kv_indices = torch.full((steps, used), -1, dtype=torch.int64, device=device)
    check_output("kv_indices", kv_indices, dtype=_KV_DTYPES, device=device, rank=2, min_numel=0)
    _refuse_unless(spec.output_row_count_ok(kv_indices.shape[0], steps, "kv_indices"),
                   lambda: f"must have num_steps = {steps} rows, got shape {_shape_text(kv_indices.shape)}")
    _refuse_unless(spec.kv_capacity_holds(prefix[-1], k, num_seqs, steps, kv_indices.shape[1]),
                   lambda: capacity_message(used, kv_indices.shape[1], topk=k, num_seqs=num_seqs,
                                            seq_lens_sum=prefix[-1], num_steps=steps))
    _refuse_unless(spec.kv_copy_lossless_ok(spec.int_bits(dtype_name(kv_indices.dtype)),
                                            spec.int_bits(dtype_name(req_to_token.dtype))),
                   lambda: f"is {dtype_name(kv_indices.dtype)} but req_to_token is "
                           f"{dtype_name(req_to_token.dtype)}: slots could be truncated; use an int64 kv_indices",
                   SpecTypeError)

    indptr_len = spec.kv_indptr_row_len(num_seqs, k)
    if kv_indptr is None:
        kv_indptr = torch.full((steps, indptr_len), -1, dtype=torch.int64, device=device)
    check_output("kv_indptr", kv_indptr, dtype=_KV_DTYPES, device=device, rank=2, min_numel=0)
    _refuse_unless(spec.output_row_count_ok(kv_indptr.shape[0], steps, "kv_indptr"),
                   lambda: f"must have num_steps = {steps} rows, got shape {_shape_text(kv_indptr.shape)}")
    _refuse_unless(spec.kv_indptr_row_ok(kv_indptr.shape[1], num_seqs, k),
                   lambda: f"rows need num_seqs*topk + 1 = {indptr_len} entries, got shape "
                           f"{_shape_text(kv_indptr.shape)}")
    if kv_indptr.dtype == torch.int32:
        spec.require(spec.int32_alloc_ok(used, "kv_indptr"))
    check_no_alias({"kv_indices": kv_indices, "kv_indptr": kv_indptr},
                   {"req_pool_indices": req_pool_indices, "req_to_token": req_to_token, "seq_lens": seq_lens})
    return DraftKvArgs(
        req_pool_indices=req_pool_indices, req_to_token=req_to_token, seq_lens=seq_lens,
        seq_lens_list=seq_list, pool_rows=rows, prefix=prefix, num_seqs=num_seqs, topk=k,
        num_steps=steps, page_size=page, num_branches=bs_d, used_len=used, kv_indices=kv_indices,
        kv_indptr=kv_indptr, device=device)
