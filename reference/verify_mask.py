"""The preallocated target-verify mask (sglang ``VerifyMask``, PRs #33127 and #33087).

A :class:`VerifyMask` is frozen: its capacity (``max_bs`` and the per-request worst
case from ``num_draft_tokens`` and ``max_context_len``) is fixed when the buffer is
allocated, and resizing means building a new record.  ``fits(bs)`` is the spec's
``bs <= max_bs`` for every layout (the FULL_MASK bypass of sglang #33119 is what
let a batch of 48 overrun a buffer captured at max_bs 8).

Construction contract (seed 001): the context length is taken explicitly or from
``model_config.context_len``; a missing, non-integer or non-positive one is a
:class:`SpecArgumentError` naming where it came from, never an AttributeError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from specbound import spec
from specbound.spec import SpecArgumentError, TreeMaskMode

from .validation import check_flag, mask_dtype

@dataclass(frozen=True, eq=False)
class VerifyMask:
    buffer: torch.Tensor          # flat, spec.tree_mask_numel(mode, max_bs, n, C) cells / items
    mode: TreeMaskMode
    max_bs: int
    num_draft_tokens: int
    max_context_len: int
    is_read: bool = True

    def fits(self, bs: int) -> bool:
        """Whether a batch of ``bs`` requests may use :attr:`buffer` (spec: ``bs <= max_bs``)."""
        return spec.fits(bs, self.max_bs)

    def buffer_for_batch(self, bs: int, seq_lens_sum: int) -> torch.Tensor:
        """The mask buffer a batch builds its tree into.

        When the batch fits, the preallocated buffer itself (the build writes only
        the batch's extent).  Otherwise a fresh zero-filled allocation of exactly
        ``spec.fallback_numel`` cells: never a reused buffer that is too small.
        """
        bs = spec.check_int("bs", bs, minimum=0)
        total = spec.check_int("seq_lens_sum", seq_lens_sum, minimum=0)
        if self.fits(bs):
            need = spec.mask_batch_numel(self.mode, bs, self.num_draft_tokens, total)
            if need > self.buffer.numel():
                # Only possible when some seq_len exceeds max_context_len: a broken contract.
                raise SpecArgumentError(
                    "seq_lens_sum", f"batch needs {need} mask cells but the buffer captured for "
                    f"max_context_len={self.max_context_len} holds {self.buffer.numel()}; "
                    f"some seq_len exceeds max_context_len")
            return self.buffer
        numel = spec.fallback_numel(self.mode, bs, self.num_draft_tokens, total)
        return torch.zeros(numel, dtype=self.buffer.dtype, device=self.buffer.device)

    def trivial_verify_mask(self, bs: int, seq_lens_sum: int) -> torch.Tensor:
        """Mask of the trivial verify (no draft steps, one token per request): exactly
        ``spec.trivial_verify_numel`` cells, all True.

        Taken from the front of the preallocated buffer when the batch fits and the
        buffer is a bool buffer large enough; otherwise freshly allocated.
        """
        bs = spec.check_int("bs", bs, minimum=0)
        total = spec.check_int("seq_lens_sum", seq_lens_sum, minimum=0)
        numel = spec.trivial_verify_numel(bs, total)
        if self.fits(bs) and self.buffer.dtype == torch.bool and numel <= self.buffer.numel():
            view = self.buffer[:numel]
            view.fill_(True)
            return view
        return torch.ones(numel, dtype=torch.bool, device=self.buffer.device)


def _context_len(max_context_len: Any, model_config: Any) -> int:
    """The context length, explicit or from ``model_config.context_len``, checked.

    Both given: they must agree (two sources that disagree are a caller bug)."""
    explicit = None
    if max_context_len is not None:
        explicit = spec.check_int("max_context_len", max_context_len, minimum=1)
    if model_config is not None:
        raw = getattr(model_config, "context_len", None)
        if raw is not None:
            from_config = spec.check_int("model_config.context_len", raw, minimum=1)
            if explicit is not None and explicit != from_config:
                raise SpecArgumentError("max_context_len", f"= {explicit} disagrees with "
                                        f"model_config.context_len = {from_config}")
            return from_config
        if explicit is None:
            raise SpecArgumentError("model_config.context_len", "missing (or None): the model config "
                                    "must carry a positive int context_len, or pass max_context_len")
    if explicit is None:
        raise SpecArgumentError("max_context_len", "required: pass max_context_len or a model_config "
                                "with a context_len attribute")
    return explicit


def maybe_create_verify_mask(*, is_draft_runner: bool, skip_prefill: bool, max_bs: int,
                             num_draft_tokens: int | None, max_context_len: int | None = None,
                             model_config: Any = None, device: str | torch.device = "cpu",
                             is_read: bool = True,
                             read_mode: TreeMaskMode | int | str = TreeMaskMode.FULL_MASK) -> VerifyMask | None:
    """Allocate the verify mask for CUDA-graph capture at ``max_bs``, or return None.

    None where sglang has no mask to preallocate: the draft runner, a skipped
    prefill, or no draft tokens (``num_draft_tokens`` None or 0).  When nothing
    reads the mask (``is_read=False``) the compact QLEN_ONLY layout is used,
    otherwise ``read_mode``.  The buffer is zero-filled, ``spec.tree_mask_numel``
    cells.  Unlike sglang, QLEN_ONLY_BITPACKING is accepted as ``read_mode``: the
    spec sizes it as ``max_bs * n`` items of ``spec.bitpack_item_bits(n)`` bits.
    """
    is_draft_runner = check_flag("is_draft_runner", is_draft_runner)
    skip_prefill = check_flag("skip_prefill", skip_prefill)
    is_read = check_flag("is_read", is_read)
    try:
        read_mode = spec.as_mode(read_mode)
    except SpecArgumentError as err:   # name this function's parameter, not the spec's
        raise type(err)("read_mode", err.condition) from None
    max_bs = spec.check_int("max_bs", max_bs, minimum=0)
    if num_draft_tokens is not None:
        num_draft_tokens = spec.check_int("num_draft_tokens", num_draft_tokens, minimum=0)
    if is_draft_runner or skip_prefill or not num_draft_tokens:
        return None
    # Checked even though it is unused by QLEN_ONLY: the record carries it for every layout.
    context = _context_len(max_context_len, model_config)
    mode = read_mode if is_read else TreeMaskMode.QLEN_ONLY
    if mode is TreeMaskMode.QLEN_ONLY_BITPACKING:
        spec.require(spec.bitpack_ok(num_draft_tokens))
    numel = spec.tree_mask_numel(mode, max_bs, num_draft_tokens, context)
    buffer = torch.zeros(numel, dtype=mask_dtype(mode, num_draft_tokens), device=device)
    return VerifyMask(buffer=buffer, mode=mode, max_bs=max_bs, num_draft_tokens=num_draft_tokens,
                      max_context_len=context, is_read=is_read)
