"""CT-*: the spec's sizes cover what target-verify attention reads; each historical sizing is
refuted by a counterexample that really reads past it."""

from __future__ import annotations

from functools import cache

from specbound import spec
from specbound.proofs import registry

# Each theorem's verdict and the mutants it must refute are in proofs/manifest.json
# (proofs/test_manifest.py::test_spec_theorem_as_the_manifest_expects).


@cache
def results():
    got, _ = registry.run_all(["CT-PAGE-TABLE-VERIFY-READ", "CT-PAGE-TABLE-OFFSET-VERIFY-READ", "CT-PAGE-TABLE-DRAFT-EXTEND-READ",
                               "CT-EXPAND-SCATTER-WRITE", "CT-CUSTOM-MASK-READ", "CT-VERIFY-KV-INDICES-WRITE",
                               "CT-DIRECT-KV-INDICES-WRITE", "CT-PLAN-COPY-KV-INDICES", "CT-PACKED-MASK-WRITE",
                               "CT-COMPRESSED-PAGE-TABLE-READ", "CT-CLAMPED-GATHER-READ",
                               "CT-PAGE-TABLE-FILL-WRITE",
                               "CT-PADDED-DRAFT-EXTEND-PREFIX", "CT-PADDED-VERIFY-MASK-EXTRACT",
                               "CT-PAGE-TABLE-DRAFT-DECODE-OFFSET-READ", "CT-SPARSE-PAGE-TABLE-READ",
                               "CT-PAGE-TABLE-BUILD-WRITE"])
    return {r.id: r for r in got}


def _mutant(theorem, mutant):
    r = results()[theorem]
    assert r.ok, r.detail
    return next(m for m in r.mutants if m.id == mutant).counterexample


def test_context_only_page_table_is_read_past():
    x = _mutant("CT-PAGE-TABLE-VERIFY-READ", "MUT-PAGE-TABLE-CONTEXT-ONLY")
    assert 0 <= x["seq_len[b]"] <= x["C"]
    read = spec.page_table_columns_read(x["seq_len[b]"], x["n"], x["page_size"])
    assert read > spec.cdiv(x["C"], x["page_size"])
    assert read <= spec.verify_page_table_width(x["C"], x["n"], x["page_size"])


def test_context_only_offset_table_is_read_past():
    x = _mutant("CT-PAGE-TABLE-OFFSET-VERIFY-READ", "MUT-OFFSET-PAGE-TABLE-CONTEXT-ONLY")
    assert 0 <= x["seq_len[b]"] <= x["C"]
    read = spec.offset_page_table_columns_read(x["seq_len[b]"], x["n"], x["page_size"])
    assert read > spec.cdiv(x["C"], x["page_size"])
    assert read <= spec.verify_page_table_width(x["C"], x["n"], x["page_size"])


def test_context_only_draft_extend_table_is_read_past():
    x = _mutant("CT-PAGE-TABLE-DRAFT-EXTEND-READ", "MUT-DRAFT-EXTEND-PAGE-TABLE-CONTEXT-ONLY")
    assert 0 <= x["seq_len[b]"] <= x["C"]
    read = spec.draft_extend_columns_read(x["seq_len[b]"], x["n"], x["page_size"])
    assert read > spec.cdiv(x["C"], x["page_size"])
    assert read <= spec.verify_page_table_width(x["C"], x["n"], x["page_size"])


def test_context_only_draft_decode_table_is_read_past():
    x = _mutant("CT-PAGE-TABLE-DRAFT-DECODE-OFFSET-READ", "MUT-DRAFT-DECODE-PAGE-TABLE-CONTEXT-ONLY")
    assert 0 <= x["seq_len[b]"] <= x["C"] and 0 <= x["step"] <= x["num_steps"] - 2
    read = spec.draft_decode_offset_columns_read(x["seq_len[b]"], x["step"], x["page_size"])
    assert read > spec.cdiv(x["C"], x["page_size"])
    assert read <= spec.draft_decode_page_table_width(x["C"], x["num_steps"], x["page_size"])


def test_context_wide_sparse_table_is_read_past():
    x = _mutant("CT-SPARSE-PAGE-TABLE-READ", "MUT-SPARSE-PAGE-TABLE-CONTEXT-ONLY")
    assert 0 <= x["seq_len[b]"] <= x["C"]
    read = spec.sparse_page_table_columns_read(x["seq_len[b]"], x["n"])
    assert x["C"] < read <= spec.req_to_token_row_width(x["C"], x["n"])


def test_context_only_table_is_written_past_by_the_length_bounded_build():
    x = _mutant("CT-PAGE-TABLE-BUILD-WRITE", "MUT-PAGE-TABLE-BUILD-CONTEXT-ONLY")
    assert 0 <= x["seq_len[b]"] <= x["C"] and x["pages_per_block"] >= 1
    narrow = spec.cdiv(x["C"], x["page_size"])
    assert spec.page_table_build_columns_stored(x["seq_len[b]"], x["n"], x["page_size"], narrow,
                                                x["pages_per_block"]) > narrow
    wide = spec.verify_page_table_width(x["C"], x["n"], x["page_size"])
    assert spec.page_table_build_columns_stored(x["seq_len[b]"], x["n"], x["page_size"], wide,
                                                x["pages_per_block"]) <= wide


def test_build_stays_in_its_row_exactly_when_the_length_fits_or_the_grid_stops_it():
    """The condition the docstring states, on every small case: in the row iff the request's
    pages fit or the width is whole blocks."""
    for length in range(0, 40):
        for page in (1, 2, 4):
            for width in range(0, 12):
                for block in (1, 2, 3, 8):
                    stored = spec.page_table_build_columns_stored(length, 0, page, width, block)
                    fits = spec.cdiv(length, page) <= width or width % block == 0
                    assert (stored <= width) == fits, (length, page, width, block, stored)


def test_every_step_slot_scattered_overflows_the_expand_row():
    x = _mutant("CT-EXPAND-SCATTER-WRITE", "MUT-EXPAND-SCATTER-ALL-STEPS")
    assert x["page_size"] >= 2 and 0 <= x["last_page_len"] < x["page_size"] and 0 <= x["step"] < x["num_steps"]
    width = spec.expand_page_table_width(x["step"] + 1)
    assert spec.expand_scatter_columns(x["last_page_len"], x["num_steps"], x["page_size"]) > width
    assert spec.expand_scatter_columns(
        x["last_page_len"], spec.expand_scatter_source_columns(x["step"] + 1, x["num_steps"]), x["page_size"]) <= width


def test_custom_mask_without_draft_columns_is_read_past():
    for mutant, size in (("MUT-CUSTOM-MASK-TOKENS-TIMES-CONTEXT", lambda x: x["max_bs"] * x["n"] * x["C"]),
                         ("MUT-CUSTOM-MASK-BS-TIMES-CONTEXT", lambda x: x["max_bs"] * x["C"])):
        x = _mutant("CT-CUSTOM-MASK-READ", mutant)
        assert x["b"] < x["bs"] <= x["max_bs"] and x["seq_len[b]"] <= x["C"]
        start = spec.custom_mask_read_start(x["n"], x["b"], x["P[b]"])
        end = start + spec.custom_mask_read_len(x["n"], x["seq_len[b]"])
        assert end > size(x), (mutant, x)
        assert end <= spec.tree_mask_numel(spec.TreeMaskMode.FULL_MASK, x["max_bs"], x["n"], x["C"])


def test_context_only_verify_kv_indices_is_written_past():
    x = _mutant("CT-VERIFY-KV-INDICES-WRITE", "MUT-VERIFY-KV-INDICES-CONTEXT-ONLY")
    assert 0 <= x["S"] <= x["bs"] * x["C"] and x["bs"] <= x["max_bs"]
    end = spec.verify_kv_indices_written(x["bs"], x["n"], x["S"])
    assert end > x["max_bs"] * x["C"]
    assert end <= spec.verify_kv_indices_numel(x["max_bs"], x["C"], x["n"])


def test_direct_kv_indices_without_draft_slack_or_per_page_is_written_past():
    for mutant, size in (("MUT-DIRECT-KV-INDICES-NO-DRAFT-SLACK", lambda x: x["max_bs"] * x["C"]),
                         ("MUT-DIRECT-KV-INDICES-PER-PAGE",
                          lambda x: x["max_bs"] * spec.cdiv(x["C"] + x["n"], x["page_size"]))):
        x = _mutant("CT-DIRECT-KV-INDICES-WRITE", mutant)
        assert 0 <= x["S"] <= x["bs"] * x["C"] and x["bs"] <= x["max_bs"] and 0 <= x["delta"] <= x["n"]
        end = spec.direct_kv_indices_written(x["bs"], x["delta"], x["S"])
        assert end > size(x), (mutant, x)
        assert end <= spec.verify_kv_indices_numel(x["max_bs"], x["C"], x["n"])


def test_plan_copy_into_tokens_times_context_overflows_only_without_two_tokens_of_context_and_tree():
    x = _mutant("CT-PLAN-COPY-KV-INDICES", "MUT-PLAN-COPY-TOKENS-TIMES-CONTEXT")
    assert 0 <= x["S"] <= x["bs"] * x["C"] and x["bs"] <= x["max_bs"]
    copied = spec.plan_copy_kv_indices_len(x["bs"], x["n"], x["S"])
    assert copied > x["max_bs"] * x["n"] * x["C"]
    # S + bs*n <= bs*(C + n) <= max_bs*n*C once (n - 1)(C - 1) >= 1: a one-token tree or a one-token context
    assert x["n"] == 1 or x["C"] == 1
    assert copied <= spec.verify_kv_indices_numel(x["max_bs"], x["C"], x["n"])


def test_packed_mask_into_tokens_times_context_overflows_only_when_the_tree_outgrows_seven_contexts():
    x = _mutant("CT-PACKED-MASK-WRITE", "MUT-PACKED-MASK-TOKENS-TIMES-CONTEXT")
    assert 0 <= x["seq_len[b]"] <= x["C"] and x["bs"] <= x["max_bs"]
    packed = x["bs"] * spec.packed_mask_request_bytes(x["n"], x["seq_len[b]"])
    assert packed > x["max_bs"] * x["n"] * x["C"]
    # ceil(n*(C + n) / 8) <= n*C exactly when n <= 7*C: only a tree far longer than the context
    assert x["n"] > 7 * x["C"]
    assert packed <= spec.packed_mask_numel(x["max_bs"], x["C"], x["n"])


def test_packed_mask_without_draft_columns_overflows():
    x = _mutant("CT-PACKED-MASK-WRITE", "MUT-PACKED-MASK-CONTEXT-COLUMNS")
    assert spec.packed_mask_request_bytes(x["n"], x["seq_len[b]"]) > spec.cdiv(x["n"] * x["C"], 8)


def test_compressed_table_rests_on_sglang_refusing_more_draft_tokens_than_the_ratio():
    r = results()["CT-COMPRESSED-PAGE-TABLE-READ"]
    assert r.ok and {"draft_within_ratio", "admitted_below_context"} <= set(r.hypotheses_used), r.hypotheses_used


def test_compressed_table_of_whole_blocks_or_whole_pages_is_read_past():
    for mutant, width in (("MUT-COMPRESSED-PAGE-TABLE-FLOOR-BLOCKS", lambda c, r, g: spec.cdiv(c // r, g)),
                          ("MUT-COMPRESSED-PAGE-TABLE-FLOOR-PAGES", lambda c, r, g: spec.cdiv(c, r) // g)):
        x = _mutant("CT-COMPRESSED-PAGE-TABLE-READ", mutant)
        assert 0 <= x["seq_len[b]"] <= x["C"] - 1 and x["n"] <= x["ratio"]
        read = spec.compressed_pages_read(x["seq_len[b]"], x["n"], x["ratio"], x["compressed_page_size"])
        assert read > width(x["C"], x["ratio"], x["compressed_page_size"])
        assert read <= spec.compressed_page_table_width(x["C"], x["ratio"], x["compressed_page_size"])


def test_gather_clamped_at_the_width_or_unclamped_reads_past_the_row():
    for mutant in ("MUT-CLAMPED-GATHER-AT-WIDTH", "MUT-CLAMPED-GATHER-UNCLAMPED"):
        x = _mutant("CT-CLAMPED-GATHER-READ", mutant)
        assert x["j"] * x["page_size"] >= x["W"]   # the page starts past the row
        assert spec.gather_column(x["j"], x["page_size"], spec.req_to_token_last_column(x["W"])) == x["W"] - 1


def test_fill_clamped_by_the_batch_maximum_writes_past_a_context_only_row():
    x = _mutant("CT-PAGE-TABLE-FILL-WRITE", "MUT-PAGE-TABLE-FILL-CONTEXT-ONLY")
    assert 0 <= x["seq_len[b]"] <= x["C"] and x["seq_len[b]"] + x["n"] <= x["max_seq_len_k"] <= x["C"] + x["n"]
    clamp = spec.cdiv(x["max_seq_len_k"], x["page_size"])
    stored = spec.fill_columns_stored(x["seq_len[b]"], x["n"], x["page_size"], clamp)
    assert stored > spec.cdiv(x["C"], x["page_size"])
    assert stored <= spec.verify_page_table_width(x["C"], x["n"], x["page_size"])


def test_unclamped_padded_prefix_is_negative():
    x = _mutant("CT-PADDED-DRAFT-EXTEND-PREFIX", "MUT-PADDED-PREFIX-UNCLAMPED")
    assert x["seq_len_fill"] >= 1 and x["n"] >= 1
    assert x["seq_len_fill"] - x["n"] < 0
    assert 0 <= spec.padded_draft_extend_prefix_len(x["seq_len_fill"], x["n"]) <= x["seq_len_fill"]


def _gathered(x, live):
    """Is the counterexample's entry kept by a guard zeroing from ``live``, and its cell."""
    flat = (x["b"] * x["n"] + x["t"]) * x["n"] + x["j"]
    cell = spec.verify_mask_extraction_index(x["n"], x["b"], x["t"], x["j"], x["seq_len[b]"], x["P[b]"])
    return flat < live, cell


def test_unguarded_padded_gather_reads_past_the_mask():
    x = _mutant("CT-PADDED-VERIFY-MASK-EXTRACT", "MUT-PADDED-MASK-NO-GUARD")
    assert x["raw_bs"] <= x["b"] < x["bs"]                      # a padded row
    kept, cell = _gathered(x, x["bs"] * x["n"] ** 2)
    numel = spec.mask_batch_numel(spec.TreeMaskMode.FULL_MASK, x["raw_bs"], x["n"], x["P[raw_bs]"])
    assert kept and cell >= numel
    assert not _gathered(x, spec.verify_mask_extraction_live(x["raw_bs"], x["n"]))[0]


def test_per_token_guard_drops_a_real_request():
    x = _mutant("CT-PADDED-VERIFY-MASK-EXTRACT", "MUT-PADDED-MASK-GUARD-PER-TOKEN")
    assert x["b"] < x["raw_bs"]                                  # a real row
    assert not _gathered(x, x["raw_bs"] * x["n"])[0]
    assert _gathered(x, spec.verify_mask_extraction_live(x["raw_bs"], x["n"]))[0]
