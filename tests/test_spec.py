"""The spec on plain ints: dual evaluation agrees with Z3, bad input is named, golden vector."""

from __future__ import annotations

import pytest
import z3
from hypothesis import given, settings, strategies as st

from specbound import spec
from specbound.spec import SpecArgumentError, SpecTypeError, TreeMaskMode

small = st.integers(min_value=0, max_value=300)
positive = st.integers(min_value=1, max_value=40)


def _symbolic_equals_concrete(fn, *values):
    """fn on ints == fn on Z3 constants, then evaluated at the same ints."""
    names = [z3.Int(f"a{i}") for i in range(len(values))]
    symbolic = fn(*names)
    concrete = fn(*values)
    subst = [(x, z3.IntVal(v)) for x, v in zip(names, values)]
    value = z3.simplify(z3.substitute(symbolic, *subst))
    if z3.is_bool(value):
        return z3.is_true(value) == bool(concrete)
    return value.as_long() == concrete


@settings(max_examples=150, deadline=None)
@given(mode=st.sampled_from(list(TreeMaskMode)), bs=small, n=st.integers(1, 32), c=positive,
       b=small, t=small, j=small, s=small, p=small)
def test_mask_formulas_agree_on_ints_and_z3(mode, bs, n, c, b, t, j, s, p):
    assert _symbolic_equals_concrete(lambda *a: spec.tree_mask_numel(mode, *a), bs, n, c)
    assert _symbolic_equals_concrete(lambda *a: spec.mask_batch_numel(mode, *a), bs, n, s)
    assert _symbolic_equals_concrete(lambda *a: spec.mask_tree_cell(mode, *a), b, t, j, n, s, p)
    assert _symbolic_equals_concrete(spec.bitpack_item_bits, n)
    assert _symbolic_equals_concrete(spec.fits, bs, b)


@settings(max_examples=150, deadline=None)
@given(s=small, t=st.integers(0, 8), e=st.integers(0, 8), k=st.integers(1, 8), steps=st.integers(1, 8),
       page=st.integers(1, 64), p=small, b=small, it=st.integers(1, 8))
def test_kv_formulas_agree_on_ints_and_z3(s, t, e, k, steps, page, p, b, it):
    assert _symbolic_equals_concrete(spec.kv_extension_read, s, t, e, k, steps, page)
    assert _symbolic_equals_concrete(spec.kv_req_to_token_span, s, k, steps, page)
    assert _symbolic_equals_concrete(spec.kv_segment_start, p, b, t, k, it, s)
    assert _symbolic_equals_concrete(spec.draft_kv_capacity_ok, p, k, b, steps, s)
    assert _symbolic_equals_concrete(spec.parent_list_width, k, steps)


def test_paged_extension_matches_hand_computation():
    # seq_len 10, page 4: last page holds 2, npp = ceil((2 + 3)/4) = 2, prefix_base 8.
    assert spec.kv_extension_start(10, 0, 2, 3, 4) == 8 + 0 + 2
    assert spec.kv_extension_start(10, 1, 2, 3, 4) == 8 + 1 * 2 * 4 + 2
    assert spec.kv_req_to_token_span(10, 2, 3, 4) == 8 + 2 * 2 * 4
    # page_size 1: branches follow each other after the prefix
    assert spec.kv_extension_start(10, 1, 2, 3, 1) == 13


@pytest.mark.parametrize("call, argument", [
    (lambda: spec.tree_mask_numel(TreeMaskMode.QLEN_ONLY, -1, 8, 100), "max_bs"),
    (lambda: spec.tree_mask_numel(TreeMaskMode.FULL_MASK, 4, 0, 100), "num_draft_tokens"),
    (lambda: spec.tree_mask_numel(TreeMaskMode.FULL_MASK, 4, 8, 0), "max_context_len"),
    (lambda: spec.mask_batch_numel(TreeMaskMode.QLEN_ONLY_BITPACKING, 2, 33, 0), "num_draft_tokens"),
    (lambda: spec.draft_kv_indices_buffer_width(2, 0, 100), "topk"),
    (lambda: spec.draft_kv_indices_used_len(-5, 2, 8, 3), "seq_lens_sum"),
    (lambda: spec.fits(-1, 8), "bs"),
    (lambda: spec.kv_extension_start(5, 0, 2, 3, 0), "page_size"),
])
def test_bad_sizes_name_the_argument(call, argument):
    with pytest.raises(SpecArgumentError) as info:
        call()
    assert info.value.argument == argument
    assert str(info.value).startswith(argument)


@pytest.mark.parametrize("value", [True, 2.0, "3", None])
def test_non_integers_are_type_errors(value):
    with pytest.raises(SpecTypeError) as info:
        spec.tree_mask_numel(TreeMaskMode.QLEN_ONLY, value, 8, 100)
    assert info.value.argument == "max_bs"
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("mode", [3, -1, "FULL", 1.0, None, True])
def test_unknown_mode(mode):
    with pytest.raises(SpecArgumentError) as info:
        spec.as_mode(mode)
    assert info.value.argument == "mode"


def test_modes_by_name_and_value():
    assert spec.as_mode("qlen_only") is TreeMaskMode.QLEN_ONLY
    assert spec.as_mode(0) is TreeMaskMode.FULL_MASK


def test_require_names_the_violated_condition():
    with pytest.raises(SpecArgumentError, match="num_draft_tokens - 1 <= topk"):
        spec.require(spec.tree_shape_ok(2, 2, 8))  # 7 > 2 + 4
    spec.require(spec.tree_shape_ok(2, 2, 7))


# Golden vector of background §5 (expected values written out from sglang's unit test).
GOLDEN_SEL = [[0, 1, 4, 8, 20, 24, 36], [0, 4, 5, 6, 7, 24, 36]]
GOLDEN_PL = [[-1, 0, 1, 2, 3, 4, 8, 9, 10, 20, 24, 21, 28], [-1, 0, 1, 2, 3, 4, 5, 6, 7, 24, 28, 20, 21]]
GOLDEN_SEQ = [5, 10]
GOLDEN_POSITIONS = [5, 6, 6, 7, 7, 8, 8, 9, 10, 11, 12, 12, 12, 12, 13, 14]
GOLDEN_NEXT_TOKEN = [[1, 3, 4, 5, 6, 7, -1, -1], [1, 2, -1, 6, -1, -1, 7, -1]]
GOLDEN_NEXT_SIBLING = [[-1, 2, -1, -1, -1, -1, -1, -1], [-1, -1, 3, 4, 5, -1, -1, -1]]


@pytest.mark.parametrize("b", [0, 1])
def test_golden_vector_through_the_spec_walk(b):
    sel, pl = GOLDEN_SEL[b], GOLDEN_PL[b]
    parent_of = spec.parents(sel, pl, 4, 4, 8)
    next_token, next_sibling = spec.links(parent_of)
    assert next_token == GOLDEN_NEXT_TOKEN[b]
    assert next_sibling == GOLDEN_NEXT_SIBLING[b]
    depths = [len(spec.bounded_walk(t, sel, pl, 4, 4, 8)) for t in range(8)]
    assert [GOLDEN_SEQ[b] + d for d in depths] == GOLDEN_POSITIONS[8 * b:8 * b + 8]


def test_hand_case_mask_rows():
    rows = []
    for t in range(4):
        marked = {0, *spec.bounded_walk(t, [0, 1, 2], [-1, 0, 1], 2, 2, 4)}
        rows.append("".join("1" if c in marked else "0" for c in range(4)))
    assert rows == ["1000", "1100", "1010", "1101"]


def test_walk_is_bounded_on_a_cycle():
    # node 1's entry 4 names slot 2 whose token 4 is node 1 itself: a self-loop
    assert spec.bounded_walk(1, [4], [0, 0, 4], 2, 3, 2) == [1, 1, 1]


def test_walk_stops_at_missing_parent_and_out_of_range_slot():
    assert spec.bounded_walk(1, [4], [0, 0, 99], 2, 3, 2) == [1]       # token 99 not in the row
    assert spec.bounded_walk(1, [40], [0, 0, 0], 2, 3, 2) == [1]       # slot 20 >= width 5
    assert spec.bounded_walk(1, [-3], [0, 0, 0], 2, 3, 2) == [1]       # negative entry
    assert spec.parents([-3], [0, 0, 0], 2, 3, 2) == [None, None]


def test_consumer_contracts_on_ints():
    """What target-verify attention reads: page-table columns for seq_len + n keys, and the
    verify mask's cells from mask_indptr[b] (spec/consumers.py)."""
    assert spec.page_table_columns_read(4093, 4, 1) == 4097     # past a ceil(C / P) = 4096-wide row
    assert spec.page_table_columns_read(5, 3, 4) == 2
    assert spec.verify_page_table_width(4096, 4, 16) == 257
    assert spec.custom_mask_read_start(4, 1, 10) == 4 * 10 + 16
    assert spec.custom_mask_read_len(4, 10) == 4 * (10 + 4)
    assert spec.custom_mask_batch_read(2, 4, 30) == spec.custom_mask_read_start(4, 2, 30)
    with pytest.raises(spec.SpecArgumentError, match="page_size"):
        spec.page_table_columns_read(1, 1, 0)
    with pytest.raises(spec.SpecArgumentError, match="num_draft_tokens"):
        spec.verify_page_table_width(16, 0, 1)


def test_verify_kv_indices_contract_on_ints():
    """A target-verify kv-index stream: seq_len + n entries per request from P[b] + b*n."""
    assert spec.verify_kv_indices_start(4, 1, 10) == 14
    assert spec.verify_kv_indices_written(2, 4, 30) == spec.verify_kv_indices_start(4, 2, 30) == 38
    assert spec.verify_kv_indices_numel(2, 16, 4) == 40
    assert spec.verify_kv_indices_written(2, 4, 2 * 15) > 2 * 16    # past a context-only max_bs * C buffer
    with pytest.raises(spec.SpecArgumentError, match="num_draft_tokens"):
        spec.verify_kv_indices_start(0, 1, 1)
    with pytest.raises(spec.SpecArgumentError, match="max_bs"):
        spec.verify_kv_indices_numel(0, 16, 4)


def test_direct_kv_indices_contract_on_ints():
    """A backend's own verify launch: seq_len + delta entries per request (delta = n or 0)."""
    assert spec.direct_kv_indices_written(2, 4, 30) == spec.verify_kv_indices_written(2, 4, 30) == 38
    assert spec.direct_kv_indices_written(2, 0, 30) == 30      # the committed lengths as they are
    with pytest.raises(spec.SpecArgumentError, match="delta"):
        spec.direct_kv_indices_written(2, -1, 30)


def test_plan_copy_contract_on_ints():
    """The plan copies the verify stream: S + bs*n entries, into max_num_tokens*C = max_bs*n*C."""
    assert spec.plan_copy_kv_indices_len(2, 4, 30) == 38
    assert spec.plan_copy_kv_indices_len(2, 1, 2 * 8) > 2 * 1 * 8    # a one-token tree at the context
    with pytest.raises(spec.SpecArgumentError, match="num_draft_tokens"):
        spec.plan_copy_kv_indices_len(2, 0, 30)


def test_fill_columns_stored_contract_on_ints():
    """A fused fill stores the request's pages up to its clamp, whatever the row's width."""
    assert spec.fill_columns_stored(4093, 4, 1, 4097) == 4097        # XPU: the batch's longest request
    assert spec.fill_columns_stored(4093, 4, 1, 4096) == 4096        # FlashAttention: the table's width
    assert spec.fill_columns_stored(30, 2, 16, 8) == 2
    with pytest.raises(spec.SpecArgumentError, match="max_seq_pages"):
        spec.fill_columns_stored(1, 1, 1, -1)
