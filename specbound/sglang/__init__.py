"""specbound.sglang: checked drop-ins with sglang's own call syntax (placeholder docstring)."""

from .draft_kv import generate_draft_decode_kv_indices
from .tree import build_tree_kernel_efficient

__all__ = ["build_tree_kernel_efficient", "generate_draft_decode_kv_indices"]
