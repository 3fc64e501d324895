"""Theorems about what the attention kernels read in target verify (CT-*): the spec's sizes
cover the extents of the consumer contracts (``spec/consumers.py``).

Each theorem reads its formulas through ``d`` (the spec, or a mutant's view of it).
"""

from __future__ import annotations

import z3

from specbound import spec
from specbound.spec import TreeMaskMode

from . import core, lemmas
from .model import C, D, K, P, b, bs, fill, j, t, in_batch, labelled, max_bs, n, page, per_request, prefix_at, seq_len, seq_len_conds
from .model import tree_params
from .theorem import Mutant, Theorem

FAMILY = "consumers"
FULL = TreeMaskMode.FULL_MASK


def _request() -> dict:
    hyps = {**tree_params(), "request_in_batch[b]": in_batch(b), "page_size_positive": page >= 1}
    hyps.update(per_request(seq_len_conds))
    return hyps


def _page_table_report() -> dict:
    """What a page-table theorem's witness and counterexamples show (one request's row)."""
    return {"bs": bs, "n": n, "C": C, "page_size": page, "b": b, "seq_len[b]": seq_len(b)}


def ct_page_table_read() -> Theorem:
    def claim(d):
        return d.page_table_columns_read(seq_len(b), n, page) <= d.verify_page_table_width(C, n, page)
    return Theorem(
        id="CT-PAGE-TABLE-VERIFY-READ", family=FAMILY,
        statement=("every seq_len[b] <= C => the page-table columns a target-verify attention reads "
                   "(cache_seqlens = seq_len[b] + n) fit a row of verify_page_table_width(C, n, page_size)"),
        hyps=lambda d: _request(), claim=claim, at=(b,),
        report=_page_table_report,
        mutants=(
            Mutant("MUT-PAGE-TABLE-CONTEXT-ONLY",
                   "row of ceil(C / page_size) pages, without the draft tokens (sglang 0.5.23's "
                   "FlashAttention graph page table)",
                   overrides={"verify_page_table_width": lambda c, nn, p: spec.cdiv(c, p)}),
            Mutant("MUT-PAGE-TABLE-FLOOR", "row of (C + n) // page_size pages (rounded down)",
                   overrides={"verify_page_table_width": lambda c, nn, p: spec.floordiv(c + nn, p)}),
        ),
    )


def ct_page_table_offset_verify_read() -> Theorem:
    def claim(d):
        return d.offset_page_table_columns_read(seq_len(b), n, page) <= d.verify_page_table_width(C, n, page)
    return Theorem(
        id="CT-PAGE-TABLE-OFFSET-VERIFY-READ", family=FAMILY,
        statement=("every seq_len[b] <= C => the page-table columns a TRT-LLM target-verify attention reads "
                   "(graph metadata built with seqlen_offset = n: cache_seqlens = seq_len[b] + n) fit a row of "
                   "verify_page_table_width(C, n, page_size)"),
        hyps=lambda d: _request(), claim=claim, at=(b,),
        report=_page_table_report,
        mutants=(
            Mutant("MUT-OFFSET-PAGE-TABLE-CONTEXT-ONLY",
                   "row of ceil(C / page_size) pages, without the draft tokens (sglang 0.5.23's TRT-LLM MHA "
                   "target_verify_metadata['page_table'], max_num_pages wide)",
                   overrides={"verify_page_table_width": lambda c, nn, p: spec.cdiv(c, p)}),
        ),
    )


def ct_page_table_draft_extend_read() -> Theorem:
    def claim(d):
        return d.draft_extend_columns_read(seq_len(b), n, page) <= d.verify_page_table_width(C, n, page)
    return Theorem(
        id="CT-PAGE-TABLE-DRAFT-EXTEND-READ", family=FAMILY,
        statement=("every seq_len[b] <= C => the page-table columns the draft-extend attention reads (the worker "
                   "widens the lengths to seq_len[b] + n) fit a row of verify_page_table_width(C, n, page_size)"),
        hyps=lambda d: _request(), claim=claim, at=(b,),
        report=_page_table_report,
        mutants=(
            Mutant("MUT-DRAFT-EXTEND-PAGE-TABLE-CONTEXT-ONLY",
                   "row of ceil(C / page_size) pages, without the draft tokens (sglang 0.5.23's FlashAttention "
                   "draft_extend_metadata['page_table'])",
                   overrides={"verify_page_table_width": lambda c, nn, p: spec.cdiv(c, p)}),
        ),
    )


LAST_PAGE_LEN, STEP = z3.Ints("last_page_len step")


def ct_expand_scatter_write() -> Theorem:
    def claim(d):
        dl = STEP + 1
        cols = d.expand_scatter_source_columns(dl, D)
        return d.expand_scatter_columns(LAST_PAGE_LEN, cols, page) <= d.expand_page_table_width(dl)

    def hyps(d):
        # sglang scatters only under page_size > 1 (page_size 1 copies the slots as they are).
        return {**labelled(spec.tree_shape_ok(K, D, n)), "scatter_only_when_paged": page >= 2,
                "last_page_len_in_page": z3.And(0 <= LAST_PAGE_LEN, LAST_PAGE_LEN <= page - 1),
                "step_in_steps": z3.And(0 <= STEP, STEP <= D - 1)}
    return Theorem(
        id="CT-EXPAND-SCATTER-WRITE", family=FAMILY,
        statement=("page_size >= 2, 0 <= last_page_len < page_size and 0 <= step < num_steps => the columns the draft-decode "
                   "scatter_ writes into an expand page-table row (the pages of the step + 1 draft slots so far) "
                   "fit expand_page_table_width(step + 1)"),
        hyps=hyps, claim=claim,
        report=lambda: {"num_steps": D, "page_size": page, "step": STEP, "last_page_len": LAST_PAGE_LEN},
        mutants=(
            Mutant("MUT-EXPAND-SCATTER-ALL-STEPS",
                   "scatter all num_steps draft slots into the (step + 1) + 1-wide row (sglang 0.5.7 to "
                   "0.5.12.post1's FlashAttention draft-decode graph replay)",
                   overrides={"expand_scatter_source_columns": lambda dl, steps: steps}),
        ),
    )


def ct_page_table_draft_decode_offset_read() -> Theorem:
    def claim(d):
        return d.draft_decode_offset_columns_read(seq_len(b), STEP, page) <= d.draft_decode_page_table_width(C, D, page)

    def hyps(d):
        # sglang builds a step backend for step_id in range(num_steps - 1): none when num_steps = 1.
        return {**_request(), "step_in_decode_steps": z3.And(0 <= STEP, STEP <= D - 2)}
    return Theorem(
        id="CT-PAGE-TABLE-DRAFT-DECODE-OFFSET-READ", family=FAMILY,
        statement=("every seq_len[b] <= C, 0 <= step <= num_steps - 2 => the page-table columns a TRT-LLM "
                   "draft-decode attention reads at step `step` (graph metadata built with seqlen_offset = "
                   "step + 1) fit a row of draft_decode_page_table_width(C, num_steps, page_size)"),
        hyps=hyps, claim=claim, at=(b,),
        report=lambda: {**_page_table_report(), "num_steps": D, "step": STEP},
        mutants=(
            Mutant("MUT-DRAFT-DECODE-PAGE-TABLE-CONTEXT-ONLY",
                   "row of ceil(C / page_size) pages, without the draft tokens (sglang 0.5.23's TRT-LLM MHA "
                   "decode_cuda_graph_metadata['page_table_draft_decode'], max_num_pages wide)",
                   overrides={"draft_decode_page_table_width": lambda c, steps, p: spec.cdiv(c, p)}),
        ),
    )


BLOCK = z3.Int("pages_per_block")


def ct_page_table_build_write() -> Theorem:
    def claim(d):
        width = d.verify_page_table_width(C, n, page)
        return d.page_table_build_columns_stored(seq_len(b), n, page, width, BLOCK) <= width
    return Theorem(
        id="CT-PAGE-TABLE-BUILD-WRITE", family=FAMILY,
        statement=("every seq_len[b] <= C, any launch block of pages_per_block >= 1 pages => the columns a "
                   "length-bounded page-table build stores for a target-verify request (cache_seqlens = "
                   "seq_len[b] + n, the grid covering the width in whole blocks) stay in a row of "
                   "verify_page_table_width(C, n, page_size)"),
        hyps=lambda d: {**_request(), "block_positive": BLOCK >= 1}, claim=claim, at=(b,),
        report=lambda: {**_page_table_report(), "pages_per_block": BLOCK},
        mutants=(
            Mutant("MUT-PAGE-TABLE-BUILD-CONTEXT-ONLY",
                   "row of ceil(C / page_size) pages, without the draft tokens (sglang 0.5.23's TRT-LLM MHA "
                   "eager metadata.page_table and target_verify_metadata['page_table'], max_num_pages wide, "
                   "filled by build_trtllm_mha_page_table)",
                   overrides={"verify_page_table_width": lambda c, nn, p: spec.cdiv(c, p)}),
        ),
    )


LONGEST = z3.Int("max_seq_len_k")


def ct_page_table_fill_write() -> Theorem:
    def claim(d):
        clamp = d.page_table_columns_read(LONGEST, 0, page)
        return d.fill_columns_stored(seq_len(b), n, page, clamp) <= d.verify_page_table_width(C, n, page)

    def hyps(d):
        # the clamp is the batch's longest KV length this pass: at least this request's, at most a
        # request at the context with its draft tokens
        return {**_request(), "longest_covers_request": LONGEST >= seq_len(b) + n, "longest_in_context": LONGEST <= C + n}
    return Theorem(
        id="CT-PAGE-TABLE-FILL-WRITE", family=FAMILY,
        statement=("every seq_len[b] <= C => a fused page-table fill clamped by the batch's longest KV length "
                   "(max_seq_pages = ceil(max_seq_len_k / page_size), max_seq_len_k <= C + n) stores a target-verify "
                   "request's pages (cache_seqlens = seq_len[b] + n) within a row of "
                   "verify_page_table_width(C, n, page_size)"),
        hyps=hyps, claim=claim, at=(b,),
        report=lambda: {**_page_table_report(), "max_seq_len_k": LONGEST},
        mutants=(
            Mutant("MUT-PAGE-TABLE-FILL-CONTEXT-ONLY",
                   "row of ceil(C / page_size) pages, without the draft tokens (sglang 0.5.23's XPU graph "
                   "decode_cuda_graph_metadata['page_table'], filled with the runtime clamp: the fill writes past it)",
                   overrides={"verify_page_table_width": lambda c, nn, p: spec.cdiv(c, p)}),
        ),
    )


def ct_sparse_page_table_read() -> Theorem:
    def claim(d):
        return d.sparse_page_table_columns_read(seq_len(b), n) <= d.req_to_token_row_width(C, n)
    return Theorem(
        id="CT-SPARSE-PAGE-TABLE-READ", family=FAMILY,
        statement=("every seq_len[b] <= C => the token columns a sparse (DSA) target-verify or draft-extend "
                   "attention reads (cache_seqlens = seq_len[b] + n) fit a graph table as wide as a "
                   "req_to_token row, req_to_token_row_width(C, n)"),
        hyps=lambda d: _request(), claim=claim, at=(b,),
        report=_page_table_report,
        mutants=(
            Mutant("MUT-SPARSE-PAGE-TABLE-CONTEXT-ONLY",
                   "a table C columns wide (model_config.context_len instead of req_to_token.shape[1], "
                   "without get_req_to_token_extra_context_len's headroom)",
                   overrides={"req_to_token_row_width": lambda c, nn: c}),
        ),
    )


def ct_custom_mask_read() -> Theorem:
    def claim(d):
        start = d.custom_mask_read_start(n, b, P(b))
        end = start + d.custom_mask_read_len(n, seq_len(b))
        return z3.And(0 <= start, end <= d.tree_mask_numel(FULL, max_bs, n, C))

    def hyps(d):
        h = {**_request(), **labelled(spec.max_bs_ok(max_bs)), "captured_batch_fits": bs <= max_bs}
        h.pop("page_size_positive")
        return h
    return Theorem(
        id="CT-CUSTOM-MASK-READ", family=FAMILY,
        statement=("bs <= max_bs and every seq_len[b] <= C => the cells an attention kernel reads through "
                   "mask_indptr for request b, n*(seq_len[b] + n) from mask_indptr[b], lie in "
                   "tree_mask_numel(FULL_MASK, max_bs)"),
        hyps=hyps, claim=claim, at=(b,),
        report=lambda: {"bs": bs, "max_bs": max_bs, "n": n, "C": C, "b": b, "seq_len[b]": seq_len(b),
                        "P[b]": P(b)},
        lemmas=lambda: [prefix_at(b), core.instantiate(lemmas.prefix_bound(), b),
                        core.instantiate(lemmas.mul_le_mono(), P(b), b * C, n),
                        core.instantiate(lemmas.mul_le_mono(), b + 1, max_bs, n * (C + n)),
                        core.instantiate(lemmas.mul_le_mono(), seq_len(b) + n, C + n, n)],
        mutants=(
            Mutant("MUT-CUSTOM-MASK-TOKENS-TIMES-CONTEXT",
                   "custom mask of max_num_tokens * C = max_bs*n*C cells, without the draft columns "
                   "(sglang 0.5.23's aiter graph buffer, #29450's shape)",
                   overrides={"tree_mask_numel": lambda mode, mb, nn, cc: mb * nn * cc}),
            Mutant("MUT-CUSTOM-MASK-BS-TIMES-CONTEXT",
                   "custom mask of max_bs * C cells (sglang 0.5.23's wave graph buffer)",
                   overrides={"tree_mask_numel": lambda mode, mb, nn, cc: mb * cc}),
        ),
    )


def _verify_stream() -> dict:
    """A target-verify batch replayed in a graph captured at ``max_bs``: the hypotheses of every
    theorem about a kv-index stream written or copied into a graph buffer."""
    h = {**tree_params(), **labelled(spec.max_bs_ok(max_bs)), **labelled(spec.batch_size_ok(bs)),
         "captured_batch_fits": bs <= max_bs}
    h.update(per_request(seq_len_conds))
    return h


def _verify_stream_lemmas() -> list:
    return [core.instantiate(lemmas.prefix_bound(), bs), core.instantiate(lemmas.mul_le_mono(), bs, max_bs, C + n)]


def ct_verify_kv_indices_write() -> Theorem:
    def claim(d):
        end = d.verify_kv_indices_written(bs, n, P(bs))
        return end <= d.verify_kv_indices_numel(max_bs, C, n)

    return Theorem(
        id="CT-VERIFY-KV-INDICES-WRITE", family=FAMILY,
        statement=("bs <= max_bs and every seq_len[b] <= C => the target-verify kv-index stream (seq_len[b] + n "
                   "entries per request, kv_indptr[bs] = S + bs*n) fits verify_kv_indices_numel(max_bs, C, n)"),
        hyps=lambda d: _verify_stream(), claim=claim,
        report=lambda: {"bs": bs, "max_bs": max_bs, "n": n, "C": C, "S": P(bs)}, lemmas=_verify_stream_lemmas,
        mutants=(
            Mutant("MUT-VERIFY-KV-INDICES-CONTEXT-ONLY",
                   "graph kv_indices of max_bs * C entries, without the draft tokens (sglang 0.5.23's FlashInfer "
                   "MLA cuda_graph_kv_indices, handed to the DFlash verify input as kv_indices_buf)",
                   overrides={"verify_kv_indices_numel": lambda mb, c, nn: mb * c}),
        ),
    )


DELTA = z3.Int("delta")


def ct_direct_kv_indices_write() -> Theorem:
    def claim(d):
        return d.direct_kv_indices_written(bs, DELTA, P(bs)) <= d.verify_kv_indices_numel(max_bs, C, n)

    def hyps(d):
        # a backend passes the committed lengths, or widens them by the draft tokens
        return {**_verify_stream(), "page_size_positive": page >= 1,
                "delta_at_most_draft": z3.And(0 <= DELTA, DELTA <= n)}
    return Theorem(
        id="CT-DIRECT-KV-INDICES-WRITE", family=FAMILY,
        statement=("bs <= max_bs, every seq_len[b] <= C and 0 <= delta <= n => the kv-index stream a backend's own "
                   "target-verify launch writes (lengths seq_len[b] + delta, kv_indptr[bs] = S + bs*delta) fits "
                   "verify_kv_indices_numel(max_bs, C, n)"),
        hyps=hyps, claim=claim,
        report=lambda: {"bs": bs, "max_bs": max_bs, "n": n, "C": C, "page_size": page, "delta": DELTA, "S": P(bs)},
        lemmas=lambda: [*_verify_stream_lemmas(), core.instantiate(lemmas.mul_le_mono(), DELTA, n, bs)],
        mutants=(
            Mutant("MUT-DIRECT-KV-INDICES-NO-DRAFT-SLACK",
                   "graph kv_indices of max_bs * C entries, without the draft slack (sglang's aiter buffer before "
                   "'Reserve draft slack: MLA target_verify writes seq_len + num_draft_tokens per row')",
                   overrides={"verify_kv_indices_numel": lambda mb, c, nn: mb * c}),
            Mutant("MUT-DIRECT-KV-INDICES-PER-PAGE",
                   "graph kv_indices of max_bs * ceil((C + n) / page_size) entries, one per page while the kernel "
                   "writes one per token (the per-page allocation aiter's comment says under-allocates)",
                   overrides={"verify_kv_indices_numel": lambda mb, c, nn: mb * spec.cdiv(c + nn, page)}),
        ),
    )


def ct_plan_copy_kv_indices() -> Theorem:
    def claim(d):
        return d.plan_copy_kv_indices_len(bs, n, P(bs)) <= d.verify_kv_indices_numel(max_bs, C, n)

    return Theorem(
        id="CT-PLAN-COPY-KV-INDICES", family=FAMILY,
        statement=("bs <= max_bs and every seq_len[b] <= C => the verify kv-index stream a CUDA-graph prefill "
                   "wrapper's plan copies into its paged_kv_indices_buf (S + bs*n entries) fits "
                   "verify_kv_indices_numel(max_bs, C, n)"),
        hyps=lambda d: _verify_stream(), claim=claim,
        report=lambda: {"bs": bs, "max_bs": max_bs, "n": n, "C": C, "S": P(bs)}, lemmas=_verify_stream_lemmas,
        mutants=(
            Mutant("MUT-PLAN-COPY-TOKENS-TIMES-CONTEXT",
                   "paged_kv_indices_buf of max_num_tokens * C = max_bs*n*C entries (sglang 0.5.23's FlashInfer "
                   "cuda_graph_kv_indices): short by bs entries for a one-token tree (n = 1) at the context",
                   overrides={"verify_kv_indices_numel": lambda mb, c, nn: mb * nn * c}),
            Mutant("MUT-PLAN-COPY-BS-TIMES-CONTEXT",
                   "paged_kv_indices_buf of max_bs * C entries (the decode graph's size, no draft tokens)",
                   overrides={"verify_kv_indices_numel": lambda mb, c, nn: mb * c}),
        ),
    )


def ct_packed_mask_write() -> Theorem:
    def claim(d):
        # request b stands for the batch's longest: every request packs at most its bytes
        return bs * d.packed_mask_request_bytes(n, seq_len(b)) <= d.packed_mask_numel(max_bs, C, n)

    def hyps(d):
        return {**_verify_stream(), "request_in_batch[b]": in_batch(b)}

    return Theorem(
        id="CT-PACKED-MASK-WRITE", family=FAMILY,
        statement=("bs <= max_bs and every seq_len[b] <= C => the bytes FlashInfer's sync-free plan packs the verify "
                   "mask into (ceil(n*(seq_len[b] + n) / 8) per request, at most bs times the longest request's) "
                   "fit packed_mask_numel(max_bs, C, n)"),
        hyps=hyps, claim=claim, at=(b,),
        report=lambda: {"bs": bs, "max_bs": max_bs, "n": n, "C": C, "b": b, "seq_len[b]": seq_len(b)},
        mutants=(
            Mutant("MUT-PACKED-MASK-TOKENS-TIMES-CONTEXT",
                   "custom_mask_buf of max_num_tokens * C = max_bs*n*C bytes (sglang 0.5.23's FlashInfer "
                   "cuda_graph_custom_mask): short once n > 7*C",
                   overrides={"packed_mask_numel": lambda mb, c, nn: mb * nn * c}),
            Mutant("MUT-PACKED-MASK-CONTEXT-COLUMNS",
                   "max_bs * ceil(n*C / 8) bytes: the packed mask of C columns, without the draft tokens' columns",
                   overrides={"packed_mask_numel": lambda mb, c, nn: mb * spec.cdiv(nn * c, 8)}),
        ),
    )


RATIO, GROUP = z3.Int("compress_ratio"), z3.Int("compressed_page_size")


def ct_compressed_page_table_read() -> Theorem:
    def claim(d):
        return d.compressed_pages_read(seq_len(b), n, RATIO, GROUP) <= d.compressed_page_table_width(C, RATIO, GROUP)

    def hyps(d):
        return {**tree_params(), "request_in_batch[b]": in_batch(b), "seq_len_nonneg": seq_len(b) >= 0,
                # sglang admits up to max_req_len = min(context_len - 1, ...) and refuses n > ratio
                "admitted_below_context": seq_len(b) <= C - 1, "draft_within_ratio": n <= RATIO,
                "ratio_positive": RATIO >= 1, "compressed_page_size_positive": GROUP >= 1}
    return Theorem(
        id="CT-COMPRESSED-PAGE-TABLE-READ", family=FAMILY,
        statement=("seq_len[b] <= C - 1 and n <= ratio => the compressed pages Qwen QSA's indexer reads for a "
                   "target-verify token (floor((seq_len[b] + n) / ratio) blocks, compressed_page_size a page) fit "
                   "a row of compressed_page_table_width(C, ratio, compressed_page_size)"),
        hyps=hyps, claim=claim, at=(b,),
        report=lambda: {"n": n, "C": C, "ratio": RATIO, "compressed_page_size": GROUP, "b": b,
                        "seq_len[b]": seq_len(b)},
        mutants=(
            Mutant("MUT-COMPRESSED-PAGE-TABLE-FLOOR-BLOCKS",
                   "floor(C / ratio) blocks: the last partial block's page, reached by the draft tokens, left out",
                   overrides={"compressed_page_table_width": lambda c, r, g: spec.cdiv(spec.floordiv(c, r), g)}),
            Mutant("MUT-COMPRESSED-PAGE-TABLE-FLOOR-PAGES",
                   "floor(ceil(C / ratio) / compressed_page_size) pages: a partial last page left out",
                   overrides={"compressed_page_table_width": lambda c, r, g: spec.floordiv(spec.cdiv(c, r), g)}),
        ),
    )


WIDTH = z3.Int("row_width")


def ct_clamped_gather_read() -> Theorem:
    def claim(d):
        col = d.gather_column(j, page, d.req_to_token_last_column(WIDTH))
        return z3.And(0 <= col, col < WIDTH)
    return Theorem(
        id="CT-CLAMPED-GATHER-READ", family=FAMILY,
        statement=("a block-table gather from a req_to_token row of width W >= 1, clamped to "
                   "req_to_token_last_column(W), reads a column in [0, W) for every page j >= 0"),
        hyps=lambda d: {"page_nonneg": j >= 0, "page_size_positive": page >= 1, "row_width_positive": WIDTH >= 1},
        claim=claim, report=lambda: {"j": j, "page_size": page, "W": WIDTH},
        mutants=(
            Mutant("MUT-CLAMPED-GATHER-AT-WIDTH", "clamp(max=req_to_token.shape[1]): the row's width, one past it",
                   overrides={"req_to_token_last_column": lambda w: w}),
            Mutant("MUT-CLAMPED-GATHER-UNCLAMPED", "arange(m) * page_size unclamped: every page past the row",
                   overrides={"gather_column": lambda jj, p, bound: jj * p}),
        ),
    )


def ct_padded_draft_extend_prefix() -> Theorem:
    def claim(d):
        got = d.padded_draft_extend_prefix_len(fill, n)
        return z3.And(got >= 0, got <= fill)
    return Theorem(
        id="CT-PADDED-DRAFT-EXTEND-PREFIX", family=FAMILY,
        statement=("seq_len_fill >= 1 => the KV prefix a draft-extend backend derives for a padded graph row "
                   "(seq_lens = seq_len_fill, extend_seq_lens = n, req_pool_indices = 0) is a length: "
                   "0 <= len <= seq_len_fill, so kv_indptr stays monotone and the row reads only "
                   "req_to_token[0, 0:seq_len_fill]"),
        hyps=lambda d: {**tree_params(), "fill_positive": fill >= 1},
        claim=claim,
        report=lambda: {"n": n, "seq_len_fill": fill},
        mutants=(
            Mutant("MUT-PADDED-PREFIX-UNCLAMPED",
                   "prefix = seq_lens - extend_seq_lens without the clamp (the form FlashMLA/TRT-LLM MLA repair by "
                   "adding the q width back and Triton clamps; sglang's fill is 1): negative for n >= 2",
                   overrides={"padded_draft_extend_prefix_len": lambda f, w: f - w}),
        ),
    )


RAW_BS = z3.Int("raw_bs")


def ct_padded_verify_mask_extract() -> Theorem:
    def claim(d):
        flat = (b * n + t) * n + j
        kept = flat < d.verify_mask_extraction_live(RAW_BS, n)
        cell = d.verify_mask_extraction_index(n, b, t, j, seq_len(b), P(b))
        past = cell >= d.mask_batch_numel(FULL, RAW_BS, n, P(RAW_BS))
        return z3.And(kept == (b < RAW_BS), z3.Implies(b >= RAW_BS, past))

    def hyps(d):
        # rows past raw_bs are the padded ones (seq_len = the runner's fill, within [0, C])
        return {**_request(), "real_rows_in_batch": z3.And(0 <= RAW_BS, RAW_BS <= bs),
                "tree_row": z3.And(0 <= t, t < n), "tree_column": z3.And(0 <= j, j < n)}
    return Theorem(
        id="CT-PADDED-VERIFY-MASK-EXTRACT", family=FAMILY,
        statement=("raw_bs <= bs, every seq_len[b] <= C (padded rows: the fill) => a topk > 1 target-verify "
                   "graph's mask gather, zeroed from verify_mask_extraction_live(raw_bs, n) on, keeps exactly "
                   "the real requests' entries, and every padded row's cell lies past the real batch's mask "
                   "(mask_batch_numel(FULL_MASK, raw_bs, n, P[raw_bs]))"),
        hyps=hyps, claim=claim, at=(b,),
        report=lambda: {"bs": bs, "raw_bs": RAW_BS, "n": n, "b": b, "t": t, "j": j, "seq_len[b]": seq_len(b),
                        "P[b]": P(b), "P[raw_bs]": P(RAW_BS)},
        lemmas=lambda: [prefix_at(b), core.instantiate(lemmas.prefix_monotone(), b, RAW_BS),
                        core.instantiate(lemmas.mul_le_mono(), P(RAW_BS), P(b), n),
                        core.instantiate(lemmas.mul_le_mono(), RAW_BS, b, n * n),
                        core.instantiate(lemmas.mul_le_mono(), b + 1, RAW_BS, n * n),
                        core.instantiate(lemmas.mul_le_mono(), 0, seq_len(b) + n, t)],
        mutants=(
            Mutant("MUT-PADDED-MASK-NO-GUARD",
                   "no zeroing of the padded rows' gather indices (every bs*n*n entry kept): a padded row gathers "
                   "past the real batch's mask",
                   overrides={"verify_mask_extraction_live": lambda r, nn: bs * nn * nn}),
            Mutant("MUT-PADDED-MASK-GUARD-PER-TOKEN",
                   "zeroing from positions.numel() = raw_bs*n, without the factor n: real requests' entries "
                   "zeroed (their draft tokens attend by cell 0's mask)",
                   overrides={"verify_mask_extraction_live": lambda r, nn: r * nn}),
        ),
    )


THEOREMS = (ct_page_table_read, ct_page_table_offset_verify_read, ct_page_table_draft_extend_read, ct_expand_scatter_write, ct_custom_mask_read,
            ct_verify_kv_indices_write, ct_direct_kv_indices_write, ct_plan_copy_kv_indices, ct_packed_mask_write, ct_compressed_page_table_read, ct_clamped_gather_read, ct_padded_draft_extend_prefix, ct_padded_verify_mask_extract,
            ct_page_table_draft_decode_offset_read, ct_page_table_fill_write, ct_sparse_page_table_read, ct_page_table_build_write)
