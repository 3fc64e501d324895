"""The validation is differential too: at every boundary it enforces, the reference and the
kernels accept exactly when the spec's conditions hold, refuse alike otherwise, and write
nothing on refusal (specbound.fuzz.calls / refusals).  Every planted validation bug below
turns a property red within its explicit examples, naming the broken spec condition."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings

from specbound import kernels, spec
from specbound.fuzz import calls, examples, properties, refusals
from specbound.proofs.symexec import mutants as kernel_mutants
from specbound.fuzz.runner import run_property
from specbound.fuzz.strategies import KvCase
from specbound.pytest_plugin import fuzz_budget
from specbound.reference import validation, verify_mask

needs_interpreter = pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels compiled: no checked interpreter")


class _SpecWith:
    """The spec as ``reference.validation`` sees it, with some functions swapped (a planted bug)."""

    def __init__(self, **overrides):
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(spec, name)


def _first_failure(name: str, max_examples: int = 1):
    """Run property ``name`` on its explicit examples (and ``max_examples`` drawn cases)."""
    p = properties.property_named(name)
    res = run_property(name, p.check, p.strategy(), max_examples=max_examples, derandomize=True,
                       examples=p.examples())
    return res


# --- the properties hold on the product ---------------------------------------------------------------

@settings(max_examples=fuzz_budget("cheap"))
@given(calls.verify_mask_calls())
def test_verify_mask_hands_out_exactly_the_spec_cells(call):
    refusals.check_verify_mask_call(call)


@needs_interpreter
@settings(max_examples=fuzz_budget("kernel"))
@given(calls.tree_calls())
def test_tree_validation_accepts_exactly_what_the_spec_accepts(call):
    refusals.check_tree_call(call)


@needs_interpreter
@settings(max_examples=fuzz_budget("kernel"))
@given(calls.kv_calls())
def test_kv_validation_accepts_exactly_what_the_spec_accepts(call):
    refusals.check_kv_call(call)


@pytest.mark.parametrize("name", ["tree.validation", "kv.validation", "verify_mask.reuse"])
def test_explicit_examples_pass(name):
    if name != "verify_mask.reuse" and not kernels.INTERPRETED:
        pytest.skip("kernels compiled: no checked interpreter")
    for case in properties.property_named(name).examples():
        properties.property_named(name).check(case)


# --- the oracle reads the spec, not the validation --------------------------------------------------------

def test_oracle_verdicts_at_the_req_to_token_boundary_for_every_page_size():
    for page in (1, 2, 3, 4, 16, 64):
        span = spec.kv_req_to_token_span(5, 2, 3, page)
        for width, refused in ((span, False), (span - 1, True)):
            case = KvCase(topk=2, num_steps=3, page_size=page, max_context_len=16, seq_lens=[5], req_pool_indices=[0],
                          pool_rows=1, r2t_width=width)
            call = calls.KvCall(dataclasses.asdict(case), "exact")
            violated = calls.kv_violations(call, *calls.kv_call_tensors(call))
            assert [c.name for c in violated] == (["req_to_token_covers_reads"] if refused else []), (page, width)
    # at page 4 the paged layout reads further than the contiguous one: the page-1 span would pass it
    assert spec.kv_req_to_token_span(5, 2, 3, 4) - 1 >= spec.kv_req_to_token_span(5, 2, 3, 1)


def test_oracle_names_one_condition_per_change():
    expect = {"short:tree_mask": "output_holds_batch", "short:retrive_index": "output_holds_batch",
              "dtype:tree_mask:uint16": "dtype", "noncontig:tree_mask": "output_contiguous",
              "alias:retrive_next_token:retrive_next_sibling": "outputs_distinct", "exact": None,
              "alias_in:seq_lens:positions": "output_not_input",
              "dtype:tree_mask:uint8": None}
    for call in examples.tree_call_examples():
        if call.change in expect:
            names = {c.name for c in calls.tree_violations(call, *calls.tree_call_tensors(call))}
            assert names == ({expect[call.change]} if expect[call.change] else set()), call.change
    shape = next(c for c in examples.tree_call_examples() if c.change == "shape")
    assert [c.name for c in calls.tree_violations(shape, *calls.tree_call_tensors(shape))] == ["draft_tokens_fit_scores"]


def test_oracle_names_a_float_seq_lens_as_a_dtype_violation():
    """Found by the shrinking strategies: the oracle itself crashed on float ``seq_lens``
    (it handed the spec a float sum) instead of naming the dtype."""
    case = {"topk": 1, "depth": 1, "num_draft_tokens": 1, "mode": 0, "max_context_len": 1, "seq_lens": [0],
            "selected_index": [[]], "parent_list": [[]], "fill_prefix_mask": False, "defects": [], "kind": "tree"}
    call = calls.TreeCall(case, "input_dtype:seq_lens:float32")
    assert [c.name for c in calls.tree_violations(call, *calls.tree_call_tensors(call))] == ["dtype"]


def test_calls_round_trip_through_json():
    from specbound.fuzz.records import case_from_json
    for call in [*examples.tree_call_examples(), *examples.kv_call_examples(), *examples.verify_mask_examples()]:
        assert case_from_json(call.to_json()) == call


# --- planted validation bugs: each turns its property red in the first examples --------------------------

@needs_interpreter
def test_req_to_token_width_checked_as_if_page_size_were_one(monkeypatch):
    """The bug the old suite missed entirely: a paged batch with a too-narrow row was accepted."""
    monkeypatch.setattr(validation, "spec", _SpecWith(
        req_to_token_row_ok=lambda w, s, k, steps, page, b: spec.req_to_token_row_ok(w, s, k, steps, 1, b)))
    res = _first_failure("kv.validation")
    assert res.failures and res.examples <= len(examples.kv_call_examples())
    assert "req_to_token_covers_reads" in res.message and res.case.change == "r2t:-1"


@needs_interpreter
def test_output_size_check_dropped(monkeypatch):
    monkeypatch.setattr(validation, "spec", _SpecWith(output_holds_ok=lambda numel, needed, name: ()))
    res = _first_failure("tree.validation")
    assert res.failures and "output_holds_batch" in res.message and res.case.change.startswith("short:")


@needs_interpreter
def test_sixteen_bit_bitpacking_items_for_small_trees(monkeypatch):
    """The dtype all implementations share: a validation that wants uint16 items for n <= 8
    refuses the spec's uint8 buffer."""
    real = validation.mask_dtype
    monkeypatch.setattr(validation, "mask_dtype", lambda mode, n: torch.uint16 if n <= 8 and mode == 2 else real(mode, n))
    res = _first_failure("tree.validation")
    assert res.failures and res.case.change in ("dtype:tree_mask:uint8", "dtype:tree_mask:uint16")
    assert ("refused a tree build the spec accepts" in res.message
            or "accepted a tree build the spec refuses: dtype (tree_mask dtype is uint8)" in res.message)


@needs_interpreter
def test_kv_indptr_width_check_dropped(monkeypatch):
    monkeypatch.setattr(validation, "spec", _SpecWith(kv_indptr_row_ok=lambda width, num_seqs, k: ()))
    res = _first_failure("kv.validation")
    assert res.failures and "kv_indptr_covers_branches" in res.message


@needs_interpreter
def test_pool_index_check_dropped(monkeypatch):
    monkeypatch.setattr(validation, "spec", _SpecWith(pool_index_ok=lambda row, rows, b: ()))
    res = _first_failure("kv.validation")
    assert res.failures and "pool_index_in_range" in res.message


@needs_interpreter
def test_alias_and_contiguity_checks_dropped(monkeypatch):
    for override, condition in (({"distinct_outputs_ok": lambda other, name: ()}, "outputs_distinct"),
                                ({"flat_layout_ok": lambda contiguous, name: ()}, "output_contiguous")):
        monkeypatch.setattr(validation, "spec", _SpecWith(**override))
        res = _first_failure("tree.validation")
        assert res.failures and condition in res.message, (condition, res.message)


@needs_interpreter
def test_req_to_token_layout_check_dropped(monkeypatch):
    """A column slice of a wider pool table accepted (and launched with its own row stride,
    which the kernel proofs assume away)."""
    monkeypatch.setattr(validation, "spec", _SpecWith(input_layout_ok=lambda contiguous, name: ()))
    res = _first_failure("kv.validation")
    assert res.failures and "input_contiguous" in res.message and res.case.change == "r2t_view"


@needs_interpreter
@pytest.mark.parametrize("name", ["tree.validation", "kv.validation"])
def test_output_input_overlap_check_dropped(monkeypatch, name):
    monkeypatch.setattr(validation, "spec", _SpecWith(output_not_input_ok=lambda other, output: ()))
    res = _first_failure(name)
    assert res.failures and "output_not_input" in res.message and res.case.change.startswith("alias_in:")


def test_oracle_sees_a_strided_req_to_token_only_when_it_is_strided():
    for call in examples.kv_call_examples():
        if call.change == "r2t_view":
            names = [c.name for c in calls.kv_violations(call, *calls.kv_call_tensors(call))]
            assert names == ([] if call.kv.pool_rows == 1 else ["input_contiguous"]), call.kv.pool_rows


@needs_interpreter
def test_score_list_check_dropped(monkeypatch):
    monkeypatch.setattr(validation, "spec", _SpecWith(tree_shape_ok=lambda k, d, n: spec.tree_shape_ok(k, d, n)[:3]))
    res = _first_failure("tree.validation")
    assert res.failures and "draft_tokens_fit_scores" in res.message


@needs_interpreter
def test_a_write_before_the_refusal_is_caught(monkeypatch):
    """Validation that writes before it refuses (here: zeroes the mask first)."""
    real = validation.check_output

    def eager(name, value, **kw):
        if name == "tree_mask" and isinstance(value, torch.Tensor) and value.numel():
            value.view(-1)[0] = value.view(-1)[0].logical_not() if value.dtype == torch.bool else 7
        return real(name, value, **kw)
    monkeypatch.setattr(validation, "check_output", eager)
    res = _first_failure("tree.validation")
    assert res.failures and "after writing to ['tree_mask']" in res.message


def test_trivial_verify_buffer_reused_without_its_size_guard(monkeypatch):
    def unguarded(self, bs, total):
        numel = spec.trivial_verify_numel(bs, total)
        if self.fits(bs) and self.buffer.dtype == torch.bool:       # the numel <= buffer guard dropped
            view = self.buffer[:numel]
            view.fill_(True)
            return view
        return torch.ones(numel, dtype=torch.bool)
    monkeypatch.setattr(verify_mask.VerifyMask, "trivial_verify_mask", unguarded)
    res = _first_failure("verify_mask.reuse")
    assert res.failures and "spec.trivial_verify_numel = 2" in res.message and res.case == examples.verify_mask_examples()[0]


def test_buffer_reuse_without_fits(monkeypatch):
    monkeypatch.setattr(verify_mask.VerifyMask, "fits", lambda self, bs: True)    # sglang #33119: FULL_MASK always fits
    res = _first_failure("verify_mask.reuse")
    assert res.failures and "fallback" in res.message


# --- explicit boundary examples of the kernel properties ---------------------------------------------------

def _depths(case, b):
    parent_of = spec.parents(case.selected_index[b], case.parent_list[b], case.topk, case.depth,
                             case.num_draft_tokens)
    out = []
    for t in range(case.num_draft_tokens):
        hops, cur, seen = 0, t, set()
        while cur not in (None, 0) and cur not in seen:
            seen.add(cur)
            hops, cur = hops + 1, parent_of[cur]
        out.append(hops)
    return out


def test_tree_examples_sit_on_the_boundaries_they_name():
    cases = examples.tree_boundary_cases()
    seen = set()
    for case in cases:
        k, d = case.topk, case.depth
        width = spec.parent_list_width(k, d)
        slots = [spec.parent_slot(v, k) for row in case.selected_index for v in row if v >= 0]
        if "slot_at_row_end" in case.defects:
            assert width in slots and case.bs >= 2
            assert case.parent_list[1][0] in case.selected_index[0]   # one slot too far finds a parent
            seen.add("slot_at_row_end")
        elif not case.defects and width - 1 in slots:
            seen.add("last_slot")
        if "search_past_row" in case.defects:
            # some row misses a parent whose token is what one entry past the row holds
            # (the next row's first entry), or -1 (what a masked-off load returns)
            def misses(b):
                sel, pl = case.selected_index[b], case.parent_list[b]
                tokens = [pl[spec.parent_slot(v, k)] for v in sel
                          if spec.parent_slot_kind(v, k, d) == spec.SLOT_LOOKUP]
                beyond = case.selected_index[b + 1][0] if b + 1 < case.bs else None
                missing = [x for x in tokens if x not in sel]
                return missing and all(x in (-1, beyond) for x in missing)
            assert any(misses(b) for b in range(case.bs))
            seen.add("search_past_row")
        if not case.defects and max(_depths(case, 0)) == d:
            seen.add("depth_D")
        if "too_deep" in case.defects:
            assert max(_depths(case, 0)) == d + 1
            seen.add("depth_past_D")
    assert seen == {"slot_at_row_end", "last_slot", "search_past_row", "depth_D", "depth_past_D"}


@needs_interpreter
@pytest.mark.parametrize("plant", [
    kernel_mutants.get("MUT-SEARCH-PAST-ROW").plant,                     # sglang's CUDA scan of n entries
    kernel_mutants.Plant("tree_build", "build_tree_kernel", (("j3 < sel_width", "j3 < n"),)),  # only the compare
], ids=["search-past-row", "search-match-only"])
def test_a_parent_search_past_n_minus_1_fails_in_the_first_examples(monkeypatch, plant):
    monkeypatch.setattr(kernels.tree_build, "build_tree_kernel", plant.kernel())
    for name in ("tree.semantics.triton", "tree.differential"):
        res = _first_failure(name, max_examples=1)
        assert res.failures and res.examples <= len(examples.tree_boundary_cases()), (name, res.message)


@needs_interpreter
def test_a_walk_one_step_past_depth_fails_in_the_first_examples(monkeypatch):
    monkeypatch.setattr(kernels.tree_build, "build_tree_kernel", kernel_mutants.get("MUT-UNBOUNDED-WALK").plant.kernel())
    res = _first_failure("tree.semantics.triton", max_examples=1)
    assert res.failures and res.examples <= len(examples.tree_boundary_cases())
    assert {"too_deep", "self_loop"} & set(res.case.defects)
