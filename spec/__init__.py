"""specbound.spec: the single source of truth for every size, offset and write footprint.

Every function here evaluates on plain Python ints (returning ints/bools) and on Z3
integer terms (returning Z3 expressions), so the proofs, the reference, the kernels,
the tests and the docs all use one formula.  This package imports nothing else of
specbound.

Convention: ``seq_len[b]`` is the verified (committed) prefix length of request
``b`` and **excludes** the draft tokens (the kernel's ``verified_seq_len``).
"""

from .conditions import (
    BITPACK_MAX_DRAFT_TOKENS, INT32_LIMIT, Condition, batch_size_ok, bitpack_ok, conjunction,
    context_ok, distinct_outputs_ok, draft_room_ok, dtype_ok, flat_layout_ok, grid_lanes_int32_ok,
    input_holds_ok, input_layout_ok, int32_alloc_ok, int32_arg_ok, int32_row_offsets_ok,
    kv_capacity_holds, kv_copy_lossless_ok, kv_indptr_row_ok, kv_positions_ok, kv_shape_ok,
    lane_bound_ok, max_bs_ok, output_holds_ok, output_not_input_ok, output_row_count_ok,
    outputs_disjoint_ok, prefilled_ok, output_rows_ok, pool_index_ok, rank_ok, req_to_token_row_ok,
    require, seq_len_nonneg_ok, seq_len_ok, table_shape_ok, tree_shape_ok,
)
from .consumers import (
    custom_mask_batch_read, custom_mask_read_len, custom_mask_read_start, direct_kv_indices_written,
    packed_mask_numel, packed_mask_request_bytes, padded_draft_extend_prefix_len,
    plan_copy_kv_indices_len, verify_kv_indices_numel, verify_kv_indices_start,
    verify_kv_indices_written, verify_mask_extraction_index, verify_mask_extraction_live,
)
from .page_table_consumers import (
    block_table_copy_fits,
    compressed_page_table_width, compressed_pages_read, draft_decode_offset_columns_read,
    draft_decode_page_table_width, draft_extend_columns_read, expand_page_table_width,
    expand_scatter_columns, expand_scatter_source_columns, fill_columns_stored, gather_column,
    offset_page_table_columns_read, page_table_build_columns_stored, page_table_columns_read,
    req_to_token_last_column, req_to_token_row_width, sparse_page_table_columns_read, strided_gather_column,
    strided_gather_pages,
    verify_page_table_width,
)
from .draft_kv import (
    decode_reservation_end, draft_branches, draft_kv_capacity_ok, draft_kv_capacity_steps, draft_kv_indices_buffer_width,
    draft_kv_indices_used_len, kv_copy_lossless, kv_extension_read, kv_extension_start, kv_indices_cell,
    kv_indptr_entry, kv_indptr_row_len, kv_last_page_len, kv_pages_per_branch, kv_positions_prefix,
    kv_prefix_base, kv_req_to_token_read_end, kv_req_to_token_span, req_to_token_draft_row_width, kv_segment_len,
    kv_segment_start, req_to_token_reservation_row_width,
)
from .dtypes import INDEX_DTYPES, INT_WIDTHS, KV_DTYPES, TOKEN_DTYPE, int_bits, signed_bound
from .errors import SpecArgumentError, SpecTypeError
from .footprint import (
    kv_indices_cells, kv_indptr_cells, mask_fill_cells, mask_kernel_cells, prefix_sums,
    token_cells,
)
from .symbolic import all_of, any_of, cdiv, check_int, floordiv, implies, is_symbolic, ite, mod, smax, smin
from .tree import (
    SLOT_INVALID, SLOT_LOOKUP, SLOT_ROOT, bounded_walk, find_parent_entry, links, lookup,
    parent_list_cell, parent_list_width, parent_node, parent_search_range, parent_slot,
    parent_slot_kind, parents, score_list_len, selected_index_cell, selected_index_width,
    token_cell, token_numel, walk_max_steps, walk_step,
)
from .verify_mask import (
    ALL_MODES, TreeMaskMode, as_mode, bitpack_item_bits, fallback_numel, fits, mask_dtype_name,
    mask_batch_numel, mask_bit, mask_prefix_cell, mask_prefix_columns, mask_request_base,
    mask_request_numel, mask_request_numel_worst, mask_row_start, mask_row_width,
    mask_tree_cell, mask_tree_column, mask_tree_columns, tree_mask_numel, trivial_verify_numel,
)
