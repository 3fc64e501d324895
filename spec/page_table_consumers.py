"""Consumer contracts of page tables: the columns an attention kernel that cannot run here reads
of a request's row, and the columns a fill, build or scatter stores there, for the metadata it
is handed in target verify, draft decode and draft extend; with the row widths the spec gives
each table.

Each function states one extent, on ints and Z3 terms alike; the audit compares it with the
table sglang allocated, the theorems prove the spec's own widths cover it.  ``seq_len``
excludes the draft tokens (the package convention); the kernel is told ``seq_len + delta``
where ``delta`` is ``num_draft_tokens`` in target verify.
"""

from __future__ import annotations

from .symbolic import cdiv, check_int, floordiv, smin


def page_table_columns_read(seq_len, delta, page_size):
    """Columns of its page-table row a paged attention kernel reads for one request:
    ``ceil((seq_len + delta) / page_size)``.

    Read from sglang 0.5.23: ``FlashAttentionBackend._set_decode_page_metadata``
    (``srt/layers/attention/flashattention_backend.py``) calls
    ``normal_decode_set_metadata`` (``kernels/ops/attention/metadata.py``), whose kernel
    ``_fused_decode_metadata_kernel`` writes ``cache_seqlens = seq_len + SEQ_LEN_DELTA``
    (``delta = speculative_num_draft_tokens`` in target verify) and fills only
    ``min(cdiv(seq_len + delta, page_size), max_seq_pages)`` columns ("consumers must bound
    reads by cache_seqlens"); ``flash_attn_with_kvcache(page_table=..., cache_seqlens=...)``
    then reads ``page_table[b, j]`` for every page ``j`` holding one of the
    ``cache_seqlens[b]`` keys.  A column at or past the row's width is the next row (or past
    the buffer for the last one); a column past the fill's clamp is a stale page id.
    """
    s = check_int("seq_len", seq_len, minimum=0)
    d = check_int("delta", delta, minimum=0)
    p = check_int("page_size", page_size, minimum=1)
    return cdiv(s + d, p)


def offset_page_table_columns_read(seq_len, seqlen_offset, page_size):
    """Columns of its page-table row a TRT-LLM paged attention kernel reads for one request
    when its graph metadata is built with a ``seqlen_offset``:
    ``page_table_columns_read(seq_len, seqlen_offset, page_size)``.

    Read from sglang 0.5.23: ``TRTLLMHAAttnBackend._apply_cuda_graph_metadata``
    (``srt/layers/attention/trtllm_mha_backend.py:993``) sets ``seqlen_offset =
    metadata.max_seq_len_q`` in target verify (``num_tokens // bs`` at capture, line 883: the
    target-verify runner's ``num_draft_tokens`` per request; ``speculative_step_id + 1`` in
    draft decode, line 979) and passes ``max_seq_pages = self.max_num_pages`` (line 1013,
    ``ceil(C / page_size)``, line 351) to ``update_trtllm_mha_graph_metadata``
    (``kernels/ops/attention/trtllm_mha_graph_metadata.py``), whose kernel stores
    ``cache_seqlens = seq_len + seqlen_offset`` (line 73) and fills only
    ``min(cdiv(cache_seqlen, page_size), max_seq_pages)`` columns (line 86; "consumers must
    bound reads by cache_seqlens").  ``forward_extend`` then hands ``block_tables =
    page_table`` and ``seq_lens = cache_seqlens`` to FlashInfer's TRT-LLM kernels, which
    read one column per page of those keys: past the clamp a stale page id, past the row
    the next request's row (or past the ``max_bs x ceil(C / page_size)`` table).
    """
    return page_table_columns_read(seq_len, check_int("seqlen_offset", seqlen_offset, minimum=0), page_size)


def draft_decode_offset_columns_read(seq_len, step_id, page_size):
    """Columns of its page-table row a TRT-LLM paged attention kernel reads for one request at
    draft-decode step ``step_id`` (``0 <= step_id <= num_steps - 2``): the metadata is built with
    ``seqlen_offset = step_id + 1``, so ``page_table_columns_read(seq_len, step_id + 1, P)``.

    Read from sglang 0.5.23: ``TRTLLMHAAttnMultiStepDraftBackend.__init__``
    (``srt/layers/attention/trtllm_mha_backend.py:2054-2055``) builds one backend per step
    ``i in range(speculative_num_steps - 1)`` with ``speculative_step_id=i``;
    ``_apply_cuda_graph_metadata`` (line 979) passes ``seqlen_offset = speculative_step_id + 1``
    in draft decode with ``max_seq_pages = self.max_num_pages`` (line 1013, ``ceil(C / P)``,
    line 351) for the table ``decode_cuda_graph_metadata["page_table_draft_decode"]`` (line 743,
    ``max_bs x max_num_pages``; bound at line 835); ``update_trtllm_mha_graph_metadata``
    (``kernels/ops/attention/trtllm_mha_graph_metadata.py:73``) stores ``cache_seqlens =
    seq_len + seqlen_offset`` and fills ``min(cdiv(cache_seqlen, P), max_seq_pages)`` columns
    (line 86).  The eager path says the same (``init_forward_metadata``, line 1251:
    ``cache_seqlens = seq_lens + (speculative_step_id + 1)``).
    """
    step = check_int("step_id", step_id, minimum=0)
    return page_table_columns_read(seq_len, step + 1, page_size)


def draft_decode_page_table_width(max_context_len, num_steps, page_size):
    """The spec's draft-decode page-table row width: a request at the context plus the
    ``num_steps - 1`` draft tokens the last decode step attends to,
    ``ceil((C + num_steps - 1) / page_size)`` pages."""
    c = check_int("max_context_len", max_context_len, minimum=1)
    d = check_int("num_steps", num_steps, minimum=1)
    return page_table_columns_read(c, d - 1, page_size)


def page_table_build_columns_stored(seq_len, delta, page_size, width, pages_per_block):
    """Columns of its row a length-bounded page-table build stores for one request told
    ``cache_seqlens = seq_len + delta``, into a table ``width`` columns wide whose launch
    grid covers the row in blocks of ``pages_per_block`` pages:
    ``min(page_table_columns_read(seq_len, delta, P), cdiv(width, pages_per_block) *
    pages_per_block)``.  The stores stay in the row exactly when ``cdiv(seq_len + delta,
    P) <= width`` or ``width`` is a multiple of ``pages_per_block`` (the grid then stops
    them at the width, and the reader is left with unfilled columns instead).

    Read from sglang 0.5.23: ``build_trtllm_mha_page_table``
    (``kernels/ops/attention/trtllm_mha_page_table.py:98``) takes ``bs, num_pages =
    page_table.shape`` and launches ``create_trtllm_mha_kv_indices_triton`` on ``(bs,
    get_num_mha_kv_index_blocks(num_pages, page_size))`` (lines 122-125), that is
    ``cdiv(num_pages, 4096 // page_size)`` blocks of ``4096 // page_size`` pages (lines
    28-36, 65); program ``(b, blk)`` stores page ``j`` at ``b * page_table_stride + j`` for
    every ``j`` of its block below ``cdiv(cache_seqlens[b], page_size)`` (lines 69-87): the
    width sizes the grid only.  ``TRTLLMHAAttnBackend`` calls it through
    ``_fill_page_table_device`` (``srt/layers/attention/trtllm_mha_backend.py:593``) with
    ``cache_seqlens = seq_len + n`` in target verify (line 1292; ragged verify: at most
    ``n`` per request).  A column at or past ``width`` is the next request's row, or past
    the table for the last one.
    """
    w = check_int("width", width, minimum=0)
    b = check_int("pages_per_block", pages_per_block, minimum=1)
    return smin(page_table_columns_read(seq_len, delta, page_size), cdiv(w, b) * b)


def fill_columns_stored(seq_len, delta, page_size, max_seq_pages):
    """Columns of its row a fused page-table fill stores for one request told ``cache_seqlens =
    seq_len + delta``: ``min(page_table_columns_read(seq_len, delta, P), max_seq_pages)``.  The
    clamp is the only bound: the stores stay in a row ``w`` wide exactly when ``max_seq_pages <=
    w`` or the request's pages do.

    Read from sglang 0.5.23: ``_fused_decode_metadata_kernel``
    (``kernels/ops/attention/metadata.py:195``, launched by ``normal_decode_set_metadata``, :505)
    stores page ``j`` at ``page_table + b * stride_0 + j * stride_1`` for every ``j <
    min(cdiv(seq_len + SEQ_LEN_DELTA, PAGE_SIZE), max_seq_pages)`` (the store mask, lines
    244-272), never comparing ``j`` with the row's width.  FlashAttention passes the table's own
    width as the clamp; ``XPUAttentionBackend._set_decode_page_metadata``
    (``srt/layers/attention/xpu_backend.py:1867``) passes ``ceil(metadata.max_seq_len_k / P)``
    with ``max_seq_len_k = max(seq_lens) + kv_len_offset`` (:1770; ``kv_len_offset`` the same
    ``delta``, ``num_tokens_per_req`` in target verify and ``speculative_step_id + 1`` in draft
    decode, :1681-1692): the batch's longest request, at least this one's pages, into its graph
    table ``max_bs x ceil(C / P)`` (:1633-1644).
    """
    c = check_int("max_seq_pages", max_seq_pages, minimum=0)
    return smin(page_table_columns_read(seq_len, delta, page_size), c)


def sparse_page_table_columns_read(seq_len, num_draft_tokens):
    """Columns of its token-granular (``page_size = 1``) page-table row a sparse (DSA) attention
    or indexer reads for one request in target verify or draft extend: ``seq_len + n``.

    Read from sglang 0.5.23: ``DeepseekSparseAttnBackend`` (``srt/layers/attention/dsa_backend.py``)
    sets ``cache_seqlens = seq_lens + speculative_num_draft_tokens`` for target verify (lines
    1684, 1930; eager 1105) and fills the table through ``fused_dsa_target_verify_metadata`` /
    ``fused_dsa_draft_extend_metadata`` (``kernels/ops/attention/dsa/metadata.py:344, 617``), whose
    kernel loads ``req_to_token[row, offs_n]`` and stores ``page_table_1[out_row, offs_n]`` for
    ``offs_n < max_seqlen_k`` (lines 294, 316-330) and only for column blocks below
    ``kv_len = seq_len + next_n`` (lines 302-315: "no consumer reads there (attention and the
    indexer stay within cache_seqlens)").
    The indexer's top-k and the sparse attention index the row below ``cache_seqlens``.  In
    draft extend ``seq_lens`` already counts the draft tokens (the comment at line 1968), so the
    read is again at most ``seq_len + n`` of the committed length.
    """
    s = check_int("seq_len", seq_len, minimum=0)
    n = check_int("num_draft_tokens", num_draft_tokens, minimum=1)
    return s + n


def req_to_token_row_width(max_context_len, num_draft_tokens):
    """The least width sglang gives a ``req_to_token`` row: the model context plus its
    speculative headroom, ``C + 4 + n``.

    Read from sglang 0.5.23: ``get_req_to_token_extra_context_len``
    (``srt/mem_cache/allocation_sizing.py:96``) returns ``extra = 4 +
    max_speculative_num_draft_tokens()`` (line 105), only ever raised by the ``max`` at line
    115; ``kv_cache_configurator.py:1572`` widens the pool's rows by it.  The DSA graph tables
    are allocated ``req_to_token.shape[1]`` wide (``dsa_backend.py:1540, 1546``; line 1574: "Match
    req_to_token's width exactly") and filled with that width as the kernel's bound
    (``_graph_page_table_width``, line 1058).
    """
    c = check_int("max_context_len", max_context_len, minimum=1)
    n = check_int("num_draft_tokens", num_draft_tokens, minimum=1)
    return c + 4 + n


def verify_page_table_width(max_context_len, num_draft_tokens, page_size):
    """The spec's page-table row width for target verify: a request at the context
    (``seq_len = C``) plus its ``n`` draft tokens, ``ceil((C + n) / page_size)`` pages."""
    c = check_int("max_context_len", max_context_len, minimum=1)
    n = check_int("num_draft_tokens", num_draft_tokens, minimum=1)
    return page_table_columns_read(c, n, page_size)


def draft_extend_columns_read(seq_len, num_draft_tokens, page_size):
    """Columns of its page-table row a paged attention kernel reads for one request in the
    draft-extend pass after verify: the worker widens the lengths to ``seq_len + n`` before
    the backend sees them, so the kernel reads ``page_table_columns_read(seq_len, n, P)``.

    Read from sglang 0.5.23: ``prepare_for_draft_extend``
    (``srt/speculative/eagle_worker_common.py``, the assignment ``forward_batch.seq_lens =
    ... forward_batch.seq_lens + num_draft_tokens`` before ``ForwardMode.DRAFT_EXTEND_V2``
    runs; "Forward sees post-write length"); ``FlashAttentionBackend`` then sets
    ``cache_seqlens = seq_lens`` from those widened lengths, in graph through
    ``draft_extend_set_metadata`` (``kernels/ops/attention/metadata.py``, fill clamped to
    ``page_table.shape[1]``) and at replay through ``page_table[:, :max_seq_pages].copy_``
    (``srt/layers/attention/flashattention_backend.py``, the ``is_draft_extend_v2`` branch
    of ``_apply_cuda_graph_metadata``), into the graph table
    ``draft_extend_metadata["page_table"]`` of ``ceil(C / P)`` columns.  ``seq_len`` is the
    committed length (at most ``C - 1`` for an admitted request).
    """
    n = check_int("num_draft_tokens", num_draft_tokens, minimum=1)
    return page_table_columns_read(seq_len, n, page_size)


def expand_scatter_source_columns(decode_length, num_steps):
    """Columns of ``cache_loc`` (each branch's draft slots) scattered into the expand page
    table at a draft-decode step: the ``decode_length = step + 1`` slots written so far.

    Read from sglang 0.5.23: ``FlashAttentionBackend``'s draft-decode graph replay
    (``srt/layers/attention/flashattention_backend.py``, topk > 1 and page_size > 1) views
    ``out_cache_loc`` as ``[bs * topk, num_steps]`` and slices it to ``cache_loc[:,
    :decode_length]`` ("without this the extra distinct pages overflow the row") before
    ``draft_decode_set_expand_metadata``; releases 0.5.7 to 0.5.12.post1 scattered all
    ``num_steps`` columns.
    """
    dl = check_int("decode_length", decode_length, minimum=1)
    check_int("num_steps", num_steps, minimum=1)
    return dl


def expand_scatter_columns(last_page_len, cols, page_size):
    """Columns of its expand page-table row the draft-decode ``scatter_`` writes for one
    branch: ``ceil((last_page_len + cols) / page_size)``, the pages ``cols`` consecutive
    draft slots span when they start ``last_page_len`` slots into a page.

    Read from sglang 0.5.23: ``draft_decode_set_expand_metadata``
    (``srt/layers/attention/flashattention_backend.py``) turns ``cache_loc // page_size``
    into ``positions = (value changes).cumsum(1) - 1`` and runs ``page_table[:num_seqs,
    :].scatter_(1, positions, cache_loc)``: the largest position is the number of distinct
    pages minus one.  Each branch's draft slots follow a copy of the prefix's last partial
    page (``last_page_len = seq_len % page_size`` slots; ``duplicate_prefix_tail_to_draft_branches``,
    ``srt/speculative/eagle_worker_common.py``), so they are consecutive from that offset.  A
    position at or past the row's width is an out-of-range index: torch raises on the CPU
    and its CUDA scatter kernel trips a device-side assert.
    """
    p = check_int("page_size", page_size, minimum=1)
    lpl = check_int("last_page_len", last_page_len, minimum=0)
    return page_table_columns_read(lpl, check_int("cols", cols, minimum=1), p)


def expand_page_table_width(decode_length):
    """The spec's width of a draft-decode expand page-table row: ``decode_length + 1`` (the
    draft slots' pages plus the last partial page they may start in)."""
    return check_int("decode_length", decode_length, minimum=1) + 1


def compressed_pages_read(seq_len, num_draft_tokens, compress_ratio, compressed_page_size):
    """Pages of its compressed page-table row Qwen QSA's sparse indexer reads for a target-verify
    token of a request of ``seq_len`` committed tokens: its length is at most ``seq_len + n``, of
    which ``floor(length / ratio)`` compressed blocks are complete, ``compressed_page_size`` blocks
    a page: ``ceil(floor((seq_len + n) / ratio) / compressed_page_size)``.

    Read from sglang 0.5.23: ``QwenSparseAttnBackend`` (``srt/layers/attention/qwen_sparse_attn_backend.py``)
    sets ``compressed_lengths = floor(lengths / ratio)`` per token (:1159) and the indexer reads
    that many compressed blocks through ``graph_compressed_page_table`` (:977), whose page ``j``
    is ``req_to_token[idx, j * full_page] // full_page`` with ``full_page =
    qsa_compressed_page_size * ratio`` (:1157, :1196-1203); a token's length is at most the
    request's ``seq_len + n`` in target verify.  sglang refuses ``n > ratio`` (:292-299).
    """
    s = check_int("seq_len", seq_len, minimum=0)
    d = check_int("num_draft_tokens", num_draft_tokens, minimum=0)
    r = check_int("compress_ratio", compress_ratio, minimum=1)
    g = check_int("compressed_page_size", compressed_page_size, minimum=1)
    return cdiv(floordiv(s + d, r), g)


def compressed_page_table_width(max_context_len, compress_ratio, compressed_page_size):
    """The spec's width of QSA's compressed graph page table (sglang's, ``:850-854``):
    ``ceil(ceil(C / ratio) / compressed_page_size)`` pages, enough for every page
    :func:`compressed_pages_read` reads when ``n <= ratio`` (which sglang enforces) and the request
    was admitted with ``seq_len <= C - 1``."""
    c = check_int("max_context_len", max_context_len, minimum=1)
    r = check_int("compress_ratio", compress_ratio, minimum=1)
    return cdiv(cdiv(c, r), check_int("compressed_page_size", compressed_page_size, minimum=1))


def gather_column(page, page_size, bound):
    """The ``req_to_token`` column a clamped block-table gather reads for page ``j``:
    ``min(j * page_size, bound)``.

    Read from sglang 0.5.23: ``MiniMaxSparseAttnBackend`` (``srt/layers/attention/minimax_sparse_backend.py``)
    builds its block tables per batch as ``req_to_token[rows][:, cols]`` with ``cols =
    (arange(m) * page_size).clamp(max=req_to_token.shape[1] - 1)`` (:500-508, :594-600, :763-766,
    :847-850, :998-1002): whatever ``m`` is (``req_to_token.shape[1] // page_size`` or the batch's
    ``max_blocks``), no column passes ``bound``.
    """
    j = check_int("page", page, minimum=0)
    return smin(j * check_int("page_size", page_size, minimum=1), bound)


def strided_gather_pages(length, page_size, row_width):
    """Pages a strided block-table gather returns per row, ``req_to_token[rows, 0:length:page_size]``
    (or ``req_to_token[rows, :length][:, ::page_size]``): torch clips the slice to the row, so
    ``cdiv(min(length, W), page_size)``, page ``j`` read at column ``j * page_size``
    (:func:`strided_gather_column`).  Fewer pages than ``cdiv(length, page_size)`` when the
    length passes the row: never a read past it.

    Read from sglang's Ascend backend: 0.5.6 ``srt/layers/attention/ascend_backend.py`` (:257-260
    eager, :350-352 graph replay, ``max_len = max(seq_lens) + n`` in target verify); 0.5.23
    ``srt/hardware_backend/npu/attention/ascend_backend.py`` (:569-571, :998-1000, :1017-1019); its
    decode-context-parallel tables gather with ``page_size * attn_dcp_size`` as the step (:489-493).
    """
    width = check_int("row_width", row_width, minimum=0)
    return cdiv(smin(check_int("length", length, minimum=0), width), check_int("page_size", page_size, minimum=1))


def strided_gather_column(page, page_size):
    """The ``req_to_token`` column a strided gather reads for page ``j``: ``j * page_size``."""
    return check_int("page", page, minimum=0) * check_int("page_size", page_size, minimum=1)


def block_table_copy_fits(columns, length, page_size, table_width, row_width):
    """Whether ``table[:bs, :columns].copy_(req_to_token[rows, 0:length:page_size] // page_size)``
    runs: torch clips the destination to the table, ``min(columns, table_width)`` columns, and
    the source to the row, :func:`strided_gather_pages`; ``copy_`` needs the two equal (else it
    raises: the server dies; a one-column source would broadcast instead).

    Read from sglang's Ascend graph replay: 0.5.6 ``srt/layers/attention/ascend_backend.py``
    :344-351 (``max_len = max(seq_lens) (+ n in target verify)``, ``columns = cdiv(max_len,
    P)``, a table ``ceil(C / P)`` wide, :284-288); 0.5.23
    ``srt/hardware_backend/npu/attention/ascend_backend.py`` :951-1000 (the table
    ``(C + P - 1 + n) // P`` wide, :741-748).
    """
    cols = check_int("columns", columns, minimum=0)
    return smin(cols, check_int("table_width", table_width, minimum=0)) == \
        strided_gather_pages(length, page_size, row_width)


def req_to_token_last_column(row_width):
    """The spec's clamp for a gather from a ``req_to_token`` row: its last column, ``W - 1``."""
    return check_int("row_width", row_width, minimum=1) - 1
