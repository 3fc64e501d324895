"""Consumer contracts: what an attention kernel that cannot run here reads, for the metadata
it is handed, in target verify and draft extend.

Each function states the extent one reader touches, on ints and Z3 terms alike; the audit
compares it with the buffer sglang allocated, the theorems prove the spec's own sizes cover
it.  ``seq_len`` excludes the draft tokens (the package convention); the kernel is told
``seq_len + delta`` where ``delta`` is ``num_draft_tokens`` in target verify.
"""

from __future__ import annotations

from .symbolic import cdiv, check_int, floordiv, smax, smin
from .verify_mask import TreeMaskMode, mask_batch_numel, mask_request_base, mask_request_numel, mask_tree_cell


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


def custom_mask_read_start(num_draft_tokens, b, prefix_b):
    """``mask_indptr[b]``: where the attention kernel starts reading request ``b``'s verify
    mask in a FULL_MASK ``custom_mask`` (``n*P[b] + b*n*n``).

    Read from sglang 0.5.23: ``FlashInferAttnBackend`` / ``TritonAttnBackend`` target-verify
    metadata (``srt/layers/attention/flashinfer_backend.py``,
    ``srt/layers/attention/triton_backend.py``) set ``mask_indptr[1:] =
    cumsum(seq_mask_len)`` with ``seq_mask_len = n * (seq_lens + n)``; the kernel
    (FlashInfer's ``BatchPrefillWithPagedKVCache`` with a custom mask, sglang's
    ``extend_attention_fwd``) reads ``custom_mask[mask_indptr[b] : mask_indptr[b] +
    n * (seq_len[b] + n)]``.
    """
    return mask_request_base(TreeMaskMode.FULL_MASK, b, num_draft_tokens, prefix_b)


def custom_mask_read_len(num_draft_tokens, seq_len):
    """Cells request ``b`` spans from ``mask_indptr[b]``: ``n * (seq_len[b] + n)``."""
    return mask_request_numel(TreeMaskMode.FULL_MASK, num_draft_tokens, seq_len)


def custom_mask_batch_read(bs, num_draft_tokens, seq_lens_sum):
    """Cells a batch's custom-mask reads (and the copy into the graph buffer) span:
    ``mask_indptr[bs] = S*n + bs*n*n``."""
    return mask_batch_numel(TreeMaskMode.FULL_MASK, bs, num_draft_tokens, seq_lens_sum)


def verify_kv_indices_start(num_draft_tokens, b, prefix_b):
    """``kv_indptr[b]`` of a target-verify kv-index stream: request ``b``'s first entry,
    ``P[b] + b*n`` (every earlier request wrote its ``seq_len + n`` entries).

    Read from sglang 0.5.23: the verify inputs' ``generate_attn_arg_prefill``
    (``srt/speculative/eagle_info.py``, ``srt/speculative/dflash_info.py``) widen
    ``paged_kernel_lens = paged_kernel_lens + draft_token_num`` and set ``kv_indptr[1:] =
    cumsum(paged_kernel_lens)``; ``KVIndexTranslator.pack_read_stream``
    (``srt/mem_cache/kv_index_translator.py``) launches ``create_flashinfer_kv_indices_triton``
    (``kernels/ops/attention/kv_indices.py``), whose program ``b`` stores
    ``kv_indices[kv_indptr[b] + i]`` for every ``i < paged_kernel_lens[b]``, bounded by the
    request's length and never by the buffer it writes.  The DFlash verify input writes
    into a buffer the caller hands it (``kv_indices_buf``: FlashInfer MLA's CUDA-graph
    ``cuda_graph_kv_indices``) instead of allocating ``S + bs*n`` entries.
    """
    n = check_int("num_draft_tokens", num_draft_tokens, minimum=1)
    return direct_kv_indices_written(b, n, prefix_b)


def verify_kv_indices_written(bs, num_draft_tokens, seq_lens_sum):
    """Entries a batch's target-verify kv-index stream spans: ``kv_indptr[bs] = S + bs*n``
    (:func:`verify_kv_indices_start` at ``b = bs``)."""
    total = check_int("seq_lens_sum", seq_lens_sum, minimum=0)
    return verify_kv_indices_start(num_draft_tokens, check_int("bs", bs, minimum=0), total)


def direct_kv_indices_written(bs, delta, seq_lens_sum):
    """Entries a backend's own launch of the kv-index kernel writes for a target-verify batch
    whose lengths it widens by ``delta`` (``n``; 0 where it passes the committed lengths as they
    are): ``kv_indptr[bs] = S + bs*delta`` (the kernel is launched with ``kv_indptr`` the prefix
    sums of those lengths).

    Read from sglang 0.5.23: ``AiterAttnBackend`` (``srt/layers/attention/aiter_backend.py``)
    launches ``create_flashinfer_kv_indices_triton[(bs, num_token_blocks)]`` itself.  Graph
    replay (``_apply_cuda_graph_metadata``, :3165): ``kv_lens = seq_lens +
    self.num_draft_tokens`` for MLA (:3142-3147; ``seq_lens`` as they are under DCP without the
    asm verify kernel, and without MLA, :3148), ``kv_indptr[1:bs+1] = cumsum(kv_lens)`` (:3150),
    into ``self.cuda_graph_kv_indices`` (:3151, allocated at :2827).  Eager
    (``init_forward_metadata``, :2325): ``kv_lens = seq_lens + draft_num`` and ``kv_lens_sum =
    seq_lens_sum + draft_num * bs`` in one branch, both unwidened in the other (:2303-2308), into
    ``self._get_kv_indices_scratch(kv_lens_sum)`` (:2320, a grow-only scratch returning exactly
    ``required_tokens`` entries, :1296-1307).  Aiter's non-MLA eager verify (:2490) and
    ``WaveAttnBackend`` (``wave_backend.py:274, 461``) pass ``seq_lens`` (``delta = 0``).  The
    kernel's program ``b`` stores ``kv_indices[kv_indptr[b] + i]`` for every ``i < lens[b]``
    (``kernels/ops/attention/kv_indices.py``): bounded by the lengths, never by the buffer.
    """
    d = check_int("delta", delta, minimum=0)
    i = check_int("bs", bs, minimum=0)
    s = check_int("seq_lens_sum", seq_lens_sum, minimum=0)
    return s + i * d


def plan_copy_kv_indices_len(bs, num_draft_tokens, seq_lens_sum):
    """Entries a CUDA-graph prefill wrapper's sync-free plan copies into its
    ``paged_kv_indices_buf`` in target verify: the verify kv-index stream,
    ``verify_kv_indices_written(bs, n, S) = S + bs*n``.

    Read from sglang 0.5.23: ``fast_prefill_plan`` (``srt/layers/attention/flashinfer_backend.py:180``)
    runs ``self._paged_kv_indices_buf[: len(paged_kv_indices)].copy_(paged_kv_indices)``
    (:258); ``FlashInferAttnBackend`` installs it as the target-verify graph wrappers'
    ``begin_forward`` (DFlash verify, :886; EAGLE verify with topk = 1 under
    ``SGLANG_OPT_FLASHINFER_VERIFY_HOST_PLAN``, :902), whose ``paged_kv_indices_buf`` is
    ``self.cuda_graph_kv_indices[i]`` (:1198), ``max_num_tokens * max_context_len`` entries
    (:1107; target verify: ``max_num_tokens = max_bs * n``).  The stream handed to the plan is the
    verify input's (``generate_attn_arg_prefill``: ``seq_len + n`` entries per request).  A
    stream longer than the buffer is no silent write: the slice ``[:k]`` is clipped to the
    buffer and ``copy_`` refuses the size mismatch (a RuntimeError; the scheduler dies).
    """
    return verify_kv_indices_written(bs, num_draft_tokens, seq_lens_sum)


def packed_mask_request_bytes(num_draft_tokens, seq_len):
    """Bytes one request's verify mask takes packed eight cells a byte, as FlashInfer's graph
    prefill wrapper reads it through ``mask_indptr``: ``ceil(custom_mask_read_len(n, seq_len) /
    8) = ceil(n*(seq_len + n) / 8)``.

    Read from sglang 0.5.23: ``fast_prefill_plan`` (``srt/layers/attention/flashinfer_backend.py``,
    EAGLE verify with topk = 1 under ``SGLANG_OPT_FLASHINFER_VERIFY_HOST_PLAN``) sets
    ``packed_lengths = (kv_lens_host * uniform_verify_width + 7) // 8`` (:272) with ``kv_lens_host
    = seq_lens + n`` (:2371, :2384) and ``uniform_verify_width = n`` (:2389), their prefix sums the packed
    ``mask_indptr`` (:273-274), checks ``packed_indptr[-1] <= self._custom_mask_buf.numel()``
    with a host ``assert`` (:275), then ``pack_verify_mask_into`` (:277;
    ``kernels/ops/speculative/pack_verify_mask.py``) launches ``_pack_verify_mask_kernel``,
    whose program ``b`` stores ``output[packed_indptr[b] + byte]`` for every ``byte <
    cdiv((kv_indptr[b+1] - kv_indptr[b]) * n, 8)``: bounded by the request's length, never by
    the buffer (only the assert stands between a long batch and a silent overrun; ``python -O``
    drops it).
    """
    return cdiv(custom_mask_read_len(num_draft_tokens, seq_len), 8)


def packed_mask_numel(max_bs, max_context_len, num_draft_tokens):
    """The spec's size of a graph wrapper's packed custom-mask buffer: ``max_bs`` requests at
    the context, ``max_bs * packed_mask_request_bytes(n, C)`` bytes (a request's packed bytes
    grow with its length)."""
    mb = check_int("max_bs", max_bs, minimum=1)
    c = check_int("max_context_len", max_context_len, minimum=1)
    return mb * packed_mask_request_bytes(num_draft_tokens, c)


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


def req_to_token_last_column(row_width):
    """The spec's clamp for a gather from a ``req_to_token`` row: its last column, ``W - 1``."""
    return check_int("row_width", row_width, minimum=1) - 1


def verify_kv_indices_numel(max_bs, max_context_len, num_draft_tokens):
    """The spec's size of a graph buffer that receives a target-verify kv-index stream:
    ``max_bs * (C + n)`` (every request at the context plus its draft tokens)."""
    mb = check_int("max_bs", max_bs, minimum=1)
    c = check_int("max_context_len", max_context_len, minimum=1)
    n = check_int("num_draft_tokens", num_draft_tokens, minimum=1)
    return mb * (c + n)


def padded_draft_extend_prefix_len(seq_len_fill, extend_width):
    """The KV-prefix length a draft-extend attention backend may hand its kernel for a padded
    CUDA-graph row: ``max(seq_len_fill - extend_width, 0)``, at most ``seq_len_fill`` keys of
    ``req_to_token`` row 0.

    Read from sglang 0.5.23: when a draft-extend graph captured at ``bs`` replays ``raw_bs <
    bs`` requests, ``EAGLEDraftExtendCudaGraphRunner`` (``srt/speculative/
    eagle_draft_extend_cuda_graph_runner.py``, the ``bs * self.captured_req_width !=
    num_tokens`` branch of the replay's buffer fill) sets the padded rows' ``seq_lens`` to the
    backend's ``get_cuda_graph_seq_len_fill_value()`` (1 in every 0.5.23 backend but aiter's,
    ``num_draft_tokens``), their ``req_pool_indices``, ``positions`` and ``out_cache_loc`` to 0
    ("padded rows must point at reserved req_pool slot 0") and their ``extend_seq_lens`` to
    ``captured_req_width`` (``num_draft_tokens``).  A backend that takes the prefix as
    ``seq_lens - extend_seq_lens`` (``TritonAttnBackend._update_draft_extend_buffers``,
    ``srt/layers/attention/triton_backend.py``) gets ``1 - n`` for such a row: a negative
    length makes the next ``kv_indptr`` entry run backwards, so the row spans are no longer
    a partition of ``kv_indices``.  0.5.23's Triton backend clamps at 0 ("so padded rows ...
    don't go negative"); FlashMLA and TRT-LLM MLA add the q width back
    (``seq_lens - extend_seq_lens + num_draft_tokens`` / ``+ max_seq_len_q``).
    """
    f = check_int("seq_len_fill", seq_len_fill, minimum=1)
    w = check_int("extend_width", extend_width, minimum=1)
    return smax(f - w, 0)


def verify_mask_extraction_index(num_draft_tokens, b, t, j, seq_len_b, prefix_b):
    """The cell of a batch's FULL_MASK verify mask a topk > 1 target-verify backend gathers for
    request ``b``, tree row ``t``, tree column ``j``: ``mask_tree_cell(FULL_MASK, ...)``,
    ``n*P[b] + b*n*n + (seq_len[b] + n)*t + seq_len[b] + j``.

    Read from sglang 0.5.23: ``FlashAttentionBackend._apply_cuda_graph_metadata``
    (``srt/layers/attention/flashattention_backend.py:3225-3246``, target verify, topk > 1)
    builds ``cols = arange(n) + seq_lens[:, None]`` and ``cum_len`` (the exclusive prefix sum
    of ``seq_lens + n`` repeated ``n`` times) from the graph's *padded* ``seq_lens``, then
    gathers ``spec_info.custom_mask[cols.repeat_interleave(n, 0) + cum_len[:, None]]``: flat
    entry ``(b*n + t)*n + j`` is this cell.  ``spec_info.custom_mask`` is the tree build's mask
    of the real batch only (``mask_batch_numel(FULL_MASK, raw_bs, n, S)`` cells), so a padded
    row's cell (``b >= raw_bs``, ``seq_len = fill``) is at or past its end: an index past the
    tensor (a device-side assert on the GPU, ``IndexError`` on the CPU).
    """
    return mask_tree_cell(TreeMaskMode.FULL_MASK, b, t, j, num_draft_tokens, seq_len_b, prefix_b)


def verify_mask_extraction_live(raw_bs, num_draft_tokens):
    """Flat gather entries of the real requests, ``raw_bs * n * n``: a padded target-verify
    graph must zero the gather's indices from here on (and only from here: an entry before it
    is a real request's mask cell).

    Read from sglang 0.5.23: ``mask_extraction_indices[:, spec_info.positions.numel() *
    self.speculative_num_draft_tokens:].fill_(0)`` ("avoid extracting padded seq indices which
    will be out of boundary", ``flashattention_backend.py:3239-3243``); ``spec_info.positions``
    is the tree build's ``positions``, ``raw_bs * n`` entries.  Padded rows then gather cell 0.
    """
    r = check_int("raw_bs", raw_bs, minimum=0)
    nn = check_int("num_draft_tokens", num_draft_tokens, minimum=1)
    return r * nn * nn
