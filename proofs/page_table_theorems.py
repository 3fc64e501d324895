"""Theorems about page tables as attention reads them and sglang's fills, builds and scatters
write them (CT-*): the spec's row widths cover the extents of the consumer contracts of
``spec/page_table_consumers.py``, in target verify, draft decode and draft extend.

Each theorem reads its formulas through ``d`` (the spec, or a mutant's view of it).
"""

from __future__ import annotations

import z3

from specbound import spec

from .consumer_theorems import FAMILY
from .model import C, D, K, b, bs, in_batch, j, labelled, n, one_request, page, seq_len, tree_params
from .theorem import Mutant, Theorem


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
        hyps=lambda d: one_request(), claim=claim, at=(b,),
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
        hyps=lambda d: one_request(), claim=claim, at=(b,),
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
        hyps=lambda d: one_request(), claim=claim, at=(b,),
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
        return {**one_request(), "step_in_decode_steps": z3.And(0 <= STEP, STEP <= D - 2)}
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
        hyps=lambda d: {**one_request(), "block_positive": BLOCK >= 1}, claim=claim, at=(b,),
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
        return {**one_request(), "longest_covers_request": LONGEST >= seq_len(b) + n, "longest_in_context": LONGEST <= C + n}
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
        hyps=lambda d: one_request(), claim=claim, at=(b,),
        report=_page_table_report,
        mutants=(
            Mutant("MUT-SPARSE-PAGE-TABLE-CONTEXT-ONLY",
                   "a table C columns wide (model_config.context_len instead of req_to_token.shape[1], "
                   "without get_req_to_token_extra_context_len's headroom)",
                   overrides={"req_to_token_row_width": lambda c, nn: c}),
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


LENGTH = z3.Int("length")


def ct_strided_gather_read() -> Theorem:
    def claim(d):
        col = d.strided_gather_column(j, page)
        return z3.Implies(j < d.strided_gather_pages(LENGTH, page, WIDTH), z3.And(0 <= col, col < WIDTH))
    return Theorem(
        id="CT-STRIDED-GATHER-READ", family=FAMILY,
        statement=("a strided block-table gather req_to_token[rows, 0:length:page_size] from a row of width W reads, "
                   "for every page j it returns (strided_gather_pages: torch clips the slice to the row), a column "
                   "in [0, W)"),
        hyps=lambda d: {"page_nonneg": j >= 0, "page_size_positive": page >= 1, "row_width_nonneg": WIDTH >= 0,
                        "length_nonneg": LENGTH >= 0},
        claim=claim, report=lambda: {"j": j, "page_size": page, "W": WIDTH, "length": LENGTH},
        mutants=(
            Mutant("MUT-STRIDED-GATHER-UNCLIPPED", "cdiv(length, page_size) pages: the slice read as if never clipped "
                   "(an index tensor arange(0, length, page_size) instead of a slice)",
                   overrides={"strided_gather_pages": lambda length, p, w: (length + p - 1) / p}),
        ),
    )


LONGEST_LENGTH = z3.Int("max(seq_lens)")


def ct_block_table_copy() -> Theorem:
    def claim(d):
        length = LONGEST_LENGTH + n
        return d.block_table_copy_fits(d.cdiv(length, page), length, page, d.verify_page_table_width(C, n, page),
                                       d.req_to_token_row_width(C, n))
    return Theorem(
        id="CT-BLOCK-TABLE-COPY", family=FAMILY,
        statement=("the target-verify block-table copy table[:bs, :cdiv(L, P)].copy_(req_to_token[rows, 0:L:P] // P), "
                   "L = max(seq_lens) + n for a batch admitted below the context, runs (source and destination "
                   "columns equal) in a table verify_page_table_width(C, n, P) wide, from rows "
                   "req_to_token_row_width(C, n) wide"),
        hyps=lambda d: {**labelled(spec.context_ok(C)), **labelled(spec.tree_shape_ok(K, D, n)),
                        "page_size_positive": page >= 1, "longest_length_nonneg": LONGEST_LENGTH >= 0,
                        "longest_length_admitted": LONGEST_LENGTH <= C - 1},
        claim=claim, report=lambda: {"max(seq_lens)": LONGEST_LENGTH, "n": n, "C": C, "page_size": page},
        mutants=(
            Mutant("MUT-BLOCK-TABLE-CONTEXT-ONLY", "a table ceil(C / P) wide (Ascend 0.5.4.post2 to 0.5.10.post1): the draft tokens' "
                   "pages make the copy's source wider than its destination",
                   overrides={"verify_page_table_width": lambda c, nn, p: spec.cdiv(c, p)}),
        ),
    )


THEOREMS = (ct_page_table_read, ct_page_table_offset_verify_read, ct_page_table_draft_extend_read, ct_expand_scatter_write, ct_page_table_draft_decode_offset_read, ct_page_table_build_write, ct_page_table_fill_write, ct_sparse_page_table_read, ct_compressed_page_table_read, ct_clamped_gather_read,
            ct_strided_gather_read, ct_block_table_copy)
