"""``build_tree_kernel_efficient``: sglang's tree-build op, with its exact signature, checked.

sglang 0.5.23's op (``sglang/kernels/ops/speculative/tree.py``, a JIT-compiled CUDA kernel)
takes twelve positional arguments and writes five buffers in place; this function takes the
same arguments in the same order, checks every precondition of the spec (and the host checks
of sglang's own wrapper) on the buffers it is handed, and only then writes exactly the cells
sglang's kernel writes:

* ``tree_mask``: the tree columns of every row (FULL_MASK: ``[seq_len, seq_len + n)`` of the
  row, the prefix columns stay as the caller filled them; QLEN_ONLY: the whole row;
  QLEN_ONLY_BITPACKING: the row's item).  sglang constrains the mask's *bytes*, not its
  element type (bool, or uint8 from the Triton backend), so the buffer is read through a view
  of the spec's element type.
* ``positions``, ``retrive_index``: every cell of the batch.
* ``retrive_next_token`` / ``retrive_next_sibling``: the links only; the other cells keep the
  caller's -1.

Preconditions sglang's kernel relies on without checking them are refused too, before any
write: a malformed tree (its walk has no bound: a missing parent writes outside the row, a
cycle never ends), ``retrive_next_*`` not pre-filled with -1 and the upper bytes of a 16- or
32-bit BITPACKING item not zero (it reads them), mask offsets past int32 (its offsets are
``int``).  The three
``retrive_*`` outputs may be views of one ``(3, bs, n)`` buffer, as sglang allocates them;
views that overlap are refused.
"""

from __future__ import annotations

import torch

from specbound import reference, spec
from specbound.reference import validation
from specbound.spec import SpecTypeError

from ._checks import conditions_named, first_other, refuse, tensor_of

# sglang's host wrapper: one CUDA block of draft_token_num threads (CHECK_HOST(draft_token_num <= 1024)).
MAX_DRAFT_TOKENS = 1024
_INT64 = ("int64",)
_LINKS = ("retrive_next_token", "retrive_next_sibling")
# What each layout's batch extent counts (the number itself is spec.mask_batch_numel's).
_EXTENT_TEXT = {spec.TreeMaskMode.FULL_MASK: "seq_lens_sum*n + bs*n*n cells",
                spec.TreeMaskMode.QLEN_ONLY: "bs*n*n cells",
                spec.TreeMaskMode.QLEN_ONLY_BITPACKING: "bs*n items"}


def _mask_view(tree_mask, mode: spec.TreeMaskMode, n: int) -> torch.Tensor:
    """The caller's mask as the spec's element type, over the same bytes (sglang's op checks
    only bytes: bool or uint8 cells, uint8/16/32 BITPACKING items)."""
    if not isinstance(tree_mask, torch.Tensor):
        raise SpecTypeError("tree_mask", f"must be a torch.Tensor, got {type(tree_mask).__name__}")
    want = validation.mask_dtype(mode, n)
    if tree_mask.dtype == want:
        return tree_mask
    if tree_mask.dtype.is_floating_point or tree_mask.dtype.is_complex:
        raise SpecTypeError("tree_mask", f"must hold bytes (bool or an integer type), got {tree_mask.dtype}")
    try:
        return tree_mask.view(want)
    except RuntimeError as exc:
        raise SpecTypeError("tree_mask", f"{tree_mask.dtype} of shape {tuple(tree_mask.shape)} cannot be read as the "
                                         f"{want} items {mode.name} needs for {n} draft tokens ({exc})") from None


def build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
                                retrive_next_token, retrive_next_sibling, topk, depth, draft_token_num,
                                tree_mask_mode) -> None:
    """sglang's ``build_tree_kernel_efficient`` (0.5.23; same positional order since 0.5.3,
    see :mod:`specbound.sglang`), checked.  Raises ``ValueError``
    (:class:`~specbound.spec.SpecArgumentError`, a ``TypeError`` too for a wrong type)
    naming the buffer and the violated condition, with nothing written."""
    k = spec.check_int("topk", topk, minimum=1)
    d = spec.check_int("depth", depth, minimum=1)
    n = spec.check_int("draft_token_num", draft_token_num, minimum=1)
    mode = spec.as_mode(tree_mask_mode)
    refuse(spec.lane_bound_ok(n, MAX_DRAFT_TOKENS, "draft_token_num"),
           lambda: f"draft_token_num = {n}: sglang launches one CUDA block of draft_token_num threads "
                   f"(at most {MAX_DRAFT_TOKENS})")
    for name, value in (("topk", k), ("depth", d)):
        refuse(spec.int32_arg_ok(value, name), lambda: f"{name} = {value} is passed to the kernel as an int")
    inputs = {"parent_list": parent_list, "selected_index": selected_index, "verified_seq_len": verified_seq_len}
    for name, value in inputs.items():
        tensor_of(name, value, _INT64)
        refuse(spec.input_layout_ok(value.is_contiguous(), name),
               lambda: f"is read at row * row width: a strided view (strides {tuple(value.stride())}) is refused")
    outs = {"positions": positions, "retrive_index": retrive_index, "retrive_next_token": retrive_next_token,
            "retrive_next_sibling": retrive_next_sibling}
    for name, value in outs.items():
        tensor_of(name, value, _INT64)
    mask = _mask_view(tree_mask, mode, n)
    if verified_seq_len.dim() == 1 and mask.dim() == 1:
        # The size check first, in sglang's terms (validation checks it again, and everything else).
        lens = verified_seq_len.tolist()
        for b, s in enumerate(lens):
            refuse(spec.seq_len_nonneg_ok(s, f"verified_seq_len[{b}]", "verified_seq_len"), lambda: f"is {s}")
        bs, total = len(lens), spec.prefix_sums(lens)[-1]
        need = spec.mask_batch_numel(mode, bs, n, total)
        refuse(spec.output_holds_ok(mask.numel(), need, "tree_mask"),
               lambda: f"has {mask.numel()} {mode.name} {mask.dtype} entries, this launch writes up to "
                       f"{need} ({_EXTENT_TEXT[mode]}, bs={bs}, n={n}, seq_lens_sum={total})")
    with conditions_named():
        args = validation.validate_build_tree_args(
            parent_list, selected_index, verified_seq_len, topk=k, depth=d, num_draft_tokens=n, mode=mode,
            tree_mask=mask, positions=positions, retrive_index=retrive_index, retrive_next_token=retrive_next_token,
            retrive_next_sibling=retrive_next_sibling, fill_prefix_mask=False, strict=True, disjoint_views=True)
    bs = args.bs
    # sglang's op matches these shapes exactly (a larger buffer is refused there too).
    for name, shape in (("positions", (spec.token_numel(bs, n),)), ("retrive_index", (bs, n)),
                        ("retrive_next_token", (bs, n)), ("retrive_next_sibling", (bs, n))):
        refuse(spec.table_shape_ok(outs[name].shape, shape, name),
               lambda: f"has shape {tuple(outs[name].shape)}; sglang's op needs exactly {shape}")
    mask_bytes = args.mask_numel * mask.element_size()
    refuse(spec.int32_alloc_ok(mask_bytes, "tree_mask"),
           lambda: f"the batch's {mode.name} mask spans {mask_bytes} bytes; sglang's kernel forms "
                   f"every mask offset in a 32-bit int")
    tokens = args.token_numel
    for name in _LINKS:
        bad = first_other(outs[name], -1, tokens)
        refuse(spec.prefilled_ok(bad, -1, name),
               lambda: f"{name} cell {bad} holds {int(outs[name].reshape(-1)[bad])}, not -1: sglang's kernel reads "
                       f"the -1 pre-fill to link siblings (fill it with -1, as sglang's caller does)")
    if mode is spec.TreeMaskMode.QLEN_ONLY_BITPACKING and mask.element_size() > 1:
        # sglang's kernel stores byte 0 of an item (= 1), then ORs the ancestor bits into every
        # byte: bytes 1.. of a wider item must already be zero.
        upper = mask.view(torch.uint8)[:mask_bytes].reshape(args.mask_numel, mask.element_size())[:, 1:]
        bad = first_other(upper, 0, upper.numel())
        item, byte = divmod(bad, upper.shape[1]) if bad is not None else (0, 0)
        refuse(spec.prefilled_ok(bad, 0, "tree_mask"),
               lambda: f"item {item} has byte {byte + 1} = {int(upper[item, byte])}, not 0: sglang's BITPACKING "
                       f"kernel ORs the ancestor bits into it (zero-fill the mask, as sglang's caller does)")
    # write_tree runs the strict well-formedness check (MalformedTreeError) before any write.
    reference.write_tree(args)
