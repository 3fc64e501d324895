"""Test support shared by the kernel tests and the benches (the draft trees and kv
batches they launch on come from ``specbound.reference.samples``; the pytest fixtures
``checked`` and ``cuda_device`` from ``specbound.pytest_plugin``):

* guard-band buffers for compiled launches (sentinel regions before and after);
* :func:`adjacent_views`: tensors laid back to back in one allocation, so that an
  overrun of one provably lands in the next (what the checked interpreter must catch).
"""

from __future__ import annotations

import torch


# --- guard bands --------------------------------------------------------------------------

# torch implements few ops for uint16/uint32 (none on CUDA for some): fill and compare
# such buffers through a signed view of the same width.
_SIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32}


def signed_view(t: torch.Tensor) -> torch.Tensor:
    return t.view(_SIGNED[t.dtype]) if t.dtype in _SIGNED else t


def guarded(numel: int, dtype: torch.dtype, *, device, pad: int = 4096, sentinel=None):
    """``(whole, inner)``: a 1-D buffer of ``pad`` sentinel cells, ``numel`` inner cells,
    ``pad`` sentinel cells; ``inner`` is the middle view (contiguous, the caller's output).
    Sentinels of uint16/uint32 buffers must fit the signed type of the same width."""
    if sentinel is None:
        sentinel = {torch.bool: True, torch.uint8: 0xA5, torch.uint16: 0x25A5,
                    torch.uint32: 0x25A5A5A5}.get(dtype, -7777)
    whole = torch.full((numel + 2 * pad,), sentinel, dtype=_SIGNED.get(dtype, dtype), device=device)
    whole = whole.view(dtype)
    return whole, whole[pad:pad + numel]


def adjacent_views(*parts: tuple[tuple[int, ...], torch.dtype, object], slack: int = 64) -> list[torch.Tensor]:
    """Contiguous tensors, one per ``(shape, dtype, fill)``, that are views of one byte
    buffer, each starting exactly where the previous one ends (checked: a layout that
    would need padding for alignment is refused), followed by ``slack`` zero bytes."""
    sizes = [torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size() for shape, dtype, _ in parts]
    raw = torch.zeros(sum(sizes) + slack + 16, dtype=torch.uint8)
    start = (-raw.data_ptr()) % 16          # aligned for every dtype
    views = []
    for (shape, dtype, fill), size in zip(parts, sizes):
        itemsize = torch.empty(0, dtype=dtype).element_size()
        if (raw.data_ptr() + start) % itemsize:
            raise ValueError(f"adjacent_views: part {len(views)} ({dtype}) would start unaligned; "
                             "reorder the parts (widest items first)")
        view = raw[start:start + size].view(dtype).view(shape)
        view.fill_(fill)
        views.append(view)
        start += size
    return views


def changed_cells(before: torch.Tensor, after: torch.Tensor) -> set[int]:
    """Indices where two same-shaped buffers differ (footprint by diffing)."""
    diff = (signed_view(before).reshape(-1) != signed_view(after).reshape(-1)).nonzero().reshape(-1)
    return set(diff.cpu().tolist())


def all_equal_to(t: torch.Tensor, value) -> bool:
    """Every cell of ``t`` equals ``value`` (uint16/uint32 compared through a signed view)."""
    return bool((signed_view(t) == value).all())
