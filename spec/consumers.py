"""Consumer contracts of the verify mask and the KV-index buffers: what an attention kernel that
cannot run here reads, and what a copy or kernel of sglang's stores, for the metadata it is
handed in target verify and draft extend (page tables: :mod:`.page_table_consumers`).

Each function states the extent one reader touches, on ints and Z3 terms alike; the audit
compares it with the buffer sglang allocated, the theorems prove the spec's own sizes cover
it.  ``seq_len`` excludes the draft tokens (the package convention); the kernel is told
``seq_len + delta`` where ``delta`` is ``num_draft_tokens`` in target verify.
"""

from __future__ import annotations

from .symbolic import cdiv, check_int, smax
from .verify_mask import TreeMaskMode, mask_batch_numel, mask_request_base, mask_request_numel, mask_tree_cell


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
