"""Consumer contracts: what an attention kernel that cannot run here reads, for the metadata
it is handed, in target verify and draft extend.

Each function states the extent one reader touches, on ints and Z3 terms alike; the audit
compares it with the buffer sglang allocated, the theorems prove the spec's own sizes cover
it.  ``seq_len`` excludes the draft tokens (the package convention); the kernel is told
``seq_len + delta`` where ``delta`` is ``num_draft_tokens`` in target verify.
"""

from __future__ import annotations

from .symbolic import cdiv, check_int
from .verify_mask import TreeMaskMode, mask_batch_numel, mask_request_base, mask_request_numel


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


def verify_page_table_width(max_context_len, num_draft_tokens, page_size):
    """The spec's page-table row width for target verify: a request at the context
    (``seq_len = C``) plus its ``n`` draft tokens, ``ceil((C + n) / page_size)`` pages."""
    c = check_int("max_context_len", max_context_len, minimum=1)
    n = check_int("num_draft_tokens", num_draft_tokens, minimum=1)
    return page_table_columns_read(c, n, page_size)


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
