"""The tensor arguments of a Triton launch (their address spans) and where a lane's address
lands among them: inside the argument its pointer came from, past its end or before its
start, inside another argument.  Pure functions of addresses, for :mod:`.checked`.
"""

from __future__ import annotations

import inspect

import numpy as np

from . import _provenance as provenance
from ._records import TensorArg


def tensor_span(t) -> tuple[int, int, int]:
    """(base address, bytes spanned, itemsize) of a torch tensor view."""
    itemsize = t.element_size()
    if t.numel() == 0:
        return t.data_ptr(), 0, itemsize
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    lo = sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st < 0)  # negative strides
    return t.data_ptr() + lo * itemsize, (last - lo + 1) * itemsize, itemsize


def collect_tensors(fn, args, kwargs) -> tuple[dict[str, TensorArg], dict[int, TensorArg]]:
    """The tensor arguments by name, and by ``id`` of the objects the interpreter will
    turn into pointers (a TensorWrapper and its base both map to the argument)."""
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    out: dict[str, TensorArg] = {}
    by_id: dict[int, TensorArg] = {}

    def add(name, value):
        base_t = getattr(value, "base", None) if type(value).__name__ == "TensorWrapper" else None
        t = base_t if base_t is not None else value
        if hasattr(t, "data_ptr") and hasattr(t, "element_size"):
            base, nbytes, itemsize = tensor_span(t)
            arg = TensorArg(name, base, nbytes, itemsize, index=len(out))
            out[name] = arg
            by_id[id(value)] = by_id[id(t)] = arg
        elif isinstance(value, tuple):
            for i, v in enumerate(value):
                add(f"{name}[{i}]", v)
        elif hasattr(value, "base") and hasattr(value, "block_shape"):  # TensorDescriptor
            add(f"{name}.base", value.base)

    for i, a in enumerate(args):
        add(names[i] if i < len(names) else f"arg{i}", a)
    for k, v in kwargs.items():
        add(k, v)
    return out, by_id


def is_pointer_handle(h) -> bool:
    import triton.language as tl
    return hasattr(h, "data") and isinstance(getattr(h, "dtype", None), tl.pointer_type)


def elem_bytes(ptr_handle) -> int:
    ty = ptr_handle.dtype
    while hasattr(ty, "element_ty"):
        ty = ty.element_ty
    bits = getattr(ty, "primitive_bitwidth", 8)
    return max(1, bits // 8)


def inside(flat_addr: np.ndarray, t: TensorArg, nb: int) -> np.ndarray:
    if t.nbytes < nb:
        return np.zeros(flat_addr.shape, dtype=bool)
    return (flat_addr >= np.uint64(t.base)) & (flat_addr <= np.uint64(t.end - nb))


def inside_any(flat_addr: np.ndarray, tensors, nb: int) -> np.ndarray:
    ok = np.zeros(flat_addr.shape, dtype=bool)
    for t in tensors:
        ok |= inside(flat_addr, t, nb)
    return ok


def relative(addr: int, t: TensorArg) -> tuple[int | None, int | None]:
    """(past_end, before_start) of an access relative to ``t``."""
    if addr >= t.base:
        return ((addr - t.end) // t.itemsize if addr >= t.end else 0), None
    return None, -((addr - t.base) // t.itemsize)


def nearest(addr: int, nb: int, tensors) -> TensorArg | None:
    best = None
    for t in tensors:
        if addr < t.base:
            dist = t.base - addr
        elif addr + nb > t.end:
            dist = addr + nb - t.end
        else:
            dist = 0
        if best is None or dist < best[0]:
            best = (dist, t)
    return None if best is None else best[1]


def owners(prov, shape) -> tuple[TensorArg | None, np.ndarray | None]:
    """(the one owner of every lane, None) or (None, per-lane argument indices, -1 = lost)."""
    if isinstance(prov, TensorArg):
        return prov, None
    if isinstance(prov, provenance.Lanes):
        return None, np.broadcast_to(prov.owners, shape).reshape(-1)
    return None, np.full(int(np.prod(shape, dtype=np.int64)), -1, dtype=np.int16)


def lost_reason(ptr, prov) -> str:
    if not is_pointer_handle(ptr):
        # Triton's interpreter reads a pointer stored in memory back as a plain integer.
        return f"address held as {getattr(ptr, 'dtype', '?')}, not a pointer (e.g. read from memory)"
    return provenance.reason_of(prov)
