"""Element types every implementation shares, as torch dtype names (``spec`` imports no torch).

The mask's element type depends on the layout: :func:`specbound.spec.mask_dtype_name`.
"""

from __future__ import annotations

from .errors import SpecArgumentError
from .symbolic import ite

# Integer inputs (selected_index, parent_list, seq_lens, req_pool_indices, req_to_token):
# sglang passes int64; int32 is accepted too, since the values are only read.
INDEX_DTYPES = ("int64", "int32")
# positions and the retrive_* outputs: sglang allocates torch.long.
TOKEN_DTYPE = "int64"
# kv_indices / kv_indptr: either width, subject to spec.kv_copy_lossless and (kv_indptr)
# spec.int32_alloc_ok.
KV_DTYPES = ("int64", "int32")

# Widths of the integer dtypes.
INT_WIDTHS = (8, 16, 32, 64)

_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32,
             "uint64": 64}


def int_bits(dtype_name: str) -> int:
    """Width in bits of an integer dtype name (``"int32"`` -> 32)."""
    try:
        return _INT_BITS[dtype_name]
    except KeyError:
        raise SpecArgumentError("dtype", f"not an integer dtype: {dtype_name!r}") from None


def signed_bound(bits):
    """``2^(bits - 1)``: a signed integer of ``bits`` bits (one of :data:`INT_WIDTHS`) holds
    exactly the values ``v`` with ``-bound <= v < bound``."""
    return ite(bits == 64, 2**63, ite(bits == 32, 2**31, ite(bits == 16, 2**15, 2**7)))
