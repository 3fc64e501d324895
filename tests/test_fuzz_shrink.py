"""A failing case shrinks to a minimal one: the strategies are composed from Hypothesis draws
(requests as lists, trees as choices, lengths drawn directly), so Hypothesis can delete
requests, shorten sequences and simplify trees.

Each test plants an off-by-one in a variant of the reference that only some batches show,
lets ``falsify`` find and shrink a case, and compares the case with the smallest one the
planted bug needs, worked out from the bug (never from the strategies or the reference).
"""

from __future__ import annotations

import importlib

import pytest

from specbound import spec
from specbound.fuzz import properties
from specbound.fuzz import strategies as sst
from specbound.fuzz.runner import falsify
from specbound.proofs.theorem import Defs


def _plant_reference(monkeypatch, module: str, **overrides) -> None:
    """The reference module ``module`` sees the spec with ``overrides`` (its planted bug)."""
    monkeypatch.setattr(importlib.import_module(f"specbound.reference.{module}"), "spec", Defs(**overrides))


def test_a_depth_two_bug_shrinks_to_one_request_and_a_three_node_chain(monkeypatch):
    """Positions one too high for nodes at depth >= 2 (their walk gains a step)."""
    def walk(t, *args):
        steps = spec.bounded_walk(t, *args)
        return steps + steps[-1:] if len(steps) >= 2 else steps
    _plant_reference(monkeypatch, "tree", bounded_walk=walk)
    case = falsify(lambda c: properties.check_tree_semantics(c, "reference"), sst.tree_cases(), 300)
    assert case is not None
    # What the bug needs: one request holding one node at depth 2, i.e. a tree of three
    # nodes (root, its child, a grandchild) grown over D = 2 steps with K = 1 candidate
    # each, valid (no defect is needed), on an empty prefix.
    assert case.bs == 1 and case.seq_lens == [0], case.to_json()
    assert (case.topk, case.depth, case.num_draft_tokens) == (1, 2, 3), case.to_json()
    assert case.selected_index == [[0, 1]] and case.parent_list == [[-1, 0]] and not case.defects, case.to_json()


def test_a_second_branch_bug_of_paged_reads_shrinks_to_the_smallest_paged_batch(monkeypatch):
    """The extension slots read as if page_size were 1 (contiguous branches) while the
    page-aligned layout applies: only branch t >= 1 of a paged batch reads elsewhere."""
    def contiguous(seq_len, t, e, topk, num_steps, page_size):
        return spec.kv_extension_read(seq_len, t, e, topk, num_steps, 1)
    _plant_reference(monkeypatch, "draft_kv", kv_extension_read=contiguous)
    case = falsify(lambda c: properties.check_kv_semantics(c, "reference"), sst.kv_cases(), 300)
    assert case is not None
    # What the bug needs: a second branch (K = 2) of one request, a page of more than one
    # slot (2, the smallest drawn), one draft step, and nothing else: with seq_len = 0 the
    # page-aligned branch 1 starts at slot 2, the contiguous one at slot 1.
    assert case.num_seqs == 1 and case.seq_lens == [0], case.to_json()
    assert (case.topk, case.num_steps, case.page_size) == (2, 1, 2), case.to_json()


@pytest.mark.parametrize("defect", ["self_loop", "out_of_range"])
def test_a_bug_on_one_defect_shrinks_to_one_request_carrying_just_that_defect(monkeypatch, defect):
    """A check that fails on any batch carrying ``defect``: the case keeps one request, its
    shortest sequence and the one defect, the smallest shape with room for it."""
    def fails_on_defect(case):
        if defect in case.defects:
            raise properties.PropertyFailure(f"planted: {defect}")
    case = falsify(fails_on_defect, sst.tree_cases(malformed=0.5), 300)
    assert case is not None
    assert case.bs == 1 and case.seq_lens == [0] and case.defects == [defect], case.to_json()
    # a self-loop needs an entry that looks its parent up (D = 2, n = 3: K = 1 has its
    # depth-2 node at slot 1); a slot past parent_list needs only one entry (n = 2, D = 1)
    want = {"self_loop": (1, 2, 3), "out_of_range": (1, 1, 2)}[defect]
    assert (case.topk, case.depth, case.num_draft_tokens) == want, case.to_json()


def test_without_shrinking_the_first_failing_case_is_the_answer():
    """``shrink=False`` (the planted-bug tests, which ask only whether a property catches a
    bug): the search stops at the first failing case instead of replaying smaller ones."""
    def run(shrink):
        seen = []

        def fails_on_a_batch(case):
            seen.append(case)
            if case.bs >= 2:
                raise properties.PropertyFailure("planted: bs >= 2")
        return falsify(fails_on_a_batch, sst.tree_cases(), 300, shrink=shrink), seen
    first, seen = run(False)
    failing = [c for c in seen if c.bs >= 2]
    assert first is not None and first.to_json() == failing[0].to_json()
    # nothing after the first failure but Hypothesis' replay of it
    assert all(c.to_json() == first.to_json() for c in failing), [c.to_json() for c in failing]
    shrunk, seen_shrinking = run(True)
    assert shrunk.bs == 2 and len(seen_shrinking) > len(seen)
