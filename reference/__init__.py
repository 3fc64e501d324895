"""specbound.reference: the plain, validated implementation the kernels are checked against.

Every size, offset and cell index comes from :mod:`specbound.spec`.
"""

from .draft_kv import draft_decode_kv_indices, write_draft_kv
from .tree import TreeBuild, build_tree, write_tree
from .validation import (
    BuildTreeArgs, DraftKvArgs, MalformedTreeError, check_tree_well_formed, mask_dtype,
    validate_build_tree_args, validate_draft_kv_args,
)
from .verify_mask import VerifyMask, maybe_create_verify_mask

__all__ = [
    "BuildTreeArgs", "DraftKvArgs", "MalformedTreeError", "TreeBuild", "VerifyMask", "build_tree",
    "check_tree_well_formed", "draft_decode_kv_indices", "mask_dtype", "maybe_create_verify_mask",
    "validate_build_tree_args", "validate_draft_kv_args", "write_draft_kv", "write_tree",
]
