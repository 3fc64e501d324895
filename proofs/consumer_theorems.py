"""Theorems about the verify mask and the KV-index buffers as attention reads them and sglang's
copies and kernels write them (CT-*): the spec's sizes cover the extents of the consumer
contracts of ``spec/consumers.py`` (page tables: :mod:`.page_table_theorems`).

Each theorem reads its formulas through ``d`` (the spec, or a mutant's view of it).
"""

from __future__ import annotations

import z3

from specbound import spec
from specbound.spec import TreeMaskMode

from . import core, lemmas
from .model import C, P, b, bs, fill, j, t, in_batch, labelled, max_bs, n, one_request, page, per_request, prefix_at, seq_len
from .model import seq_len_conds, tree_params
from .theorem import Mutant, Theorem

FAMILY = "consumers"
FULL = TreeMaskMode.FULL_MASK


def ct_custom_mask_read() -> Theorem:
    def claim(d):
        start = d.custom_mask_read_start(n, b, P(b))
        end = start + d.custom_mask_read_len(n, seq_len(b))
        return z3.And(0 <= start, end <= d.tree_mask_numel(FULL, max_bs, n, C))

    def hyps(d):
        h = {**one_request(), **labelled(spec.max_bs_ok(max_bs)), "captured_batch_fits": bs <= max_bs}
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
        return {**one_request(), "real_rows_in_batch": z3.And(0 <= RAW_BS, RAW_BS <= bs),
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


THEOREMS = (ct_custom_mask_read, ct_verify_kv_indices_write, ct_direct_kv_indices_write, ct_plan_copy_kv_indices, ct_packed_mask_write, ct_padded_draft_extend_prefix, ct_padded_verify_mask_extract)
