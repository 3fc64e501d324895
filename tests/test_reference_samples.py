"""The shared tree builder (specbound.reference.samples) builds exactly the trees EAGLE's
score-based growth can produce, checked exhaustively on small shapes against an
independent model of that growth (scores drawn from a grid, top-K per step, top n - 1
overall), and every pick sequence gives a tree the spec accepts."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch

from specbound import spec
from specbound.reference import check_tree_well_formed, samples


def _every_tree(build, k, d, n) -> set:
    """Every tree ``build(k, d, n, pick)`` makes: all pick sequences, as an odometer."""
    out, prefix = set(), []
    while True:
        trace = []

        def pick(m):
            v = prefix[len(trace)] if len(trace) < len(prefix) else 0
            trace.append((v, m))
            return v
        sel, pl = build(k, d, n, pick)
        out.add((tuple(sel), tuple(pl)))
        while trace and trace[-1][0] + 1 >= trace[-1][1]:
            trace.pop()
        if not trace:
            return out
        prefix = [v for v, _ in trace[:-1]] + [trace[-1][0] + 1]


def _eagle_by_scores(k, d, n, steps) -> set:
    """EAGLE's growth on cumulative costs: each candidate costs its parent's cost plus a
    step from ``steps``; every step expands the K cheapest of its block (ties: lower id),
    and the n - 1 cheapest candidates overall are selected."""
    out = set()
    for inc in itertools.product(steps, repeat=spec.score_list_len(k, d)):
        cost, block, parent_row, nxt = list(inc[:k]), list(range(k)), [-1], k
        for _ in range(1, d):
            expanded = sorted(block, key=lambda i: (cost[i], i))[:k]
            parent_row += expanded
            block = []
            for p in expanded:
                for _ in range(k):
                    block.append(len(cost))
                    cost.append(cost[p] + inc[nxt])
                    nxt += 1
        best = sorted(range(len(cost)), key=lambda i: (cost[i], i))[:n - 1]
        out.add((tuple(sorted(best)), tuple(parent_row if d > 1 else [])))
    return out


SMALL = [(2, 2, n) for n in range(1, 8)] + [(3, 1, 3), (3, 1, 4), (1, 4, 5), (1, 3, 2)]


@pytest.mark.parametrize("shape", SMALL, ids=lambda s: "K%d-D%d-n%d" % s)
def test_the_builder_makes_exactly_the_eagle_trees(shape):
    k, d, n = shape
    built = _every_tree(samples.draft_tree, k, d, n)
    assert built == _eagle_by_scores(k, d, n, range(1, 6))
    for sel, pl in built:
        check_tree_well_formed(0, list(sel), list(pl), k, d, n)


def test_a_builder_that_records_expansions_in_id_order_misses_eagle_trees():
    """The planted difference (what the removed kernels.testing generator did): parent_list
    holds the expanded candidates sorted by id, not in score order."""
    def sorted_expansions(k, d, n, pick):
        sel, pl = samples.draft_tree(k, d, n, pick)
        return sel, pl[:1] + [x for i in range(1, len(pl), k) for x in sorted(pl[i:i + k])]
    k, d, n = 2, 2, 3
    assert _every_tree(sorted_expansions, k, d, n) != _eagle_by_scores(k, d, n, range(1, 6))


def test_random_trees_and_batches_from_either_generator_are_valid():
    for rng in (random.Random(5), np.random.default_rng(5)):
        for k, d, n in ((4, 5, 8), (8, 3, 32), (1, 6, 7), (16, 3, 40)):
            sel, pl = samples.random_draft_tree(rng, k, d, n)
            check_tree_well_formed(0, sel, pl, k, d, n)
        batch = samples.random_tree_batch(rng, 5, 4, 5, 8, max_seq_len=9)
        assert batch.parent_list.shape == (5, 17) and batch.selected_index.shape == (5, 7)
        assert 0 <= int(batch.seq_lens.min()) and int(batch.seq_lens.max()) <= 9


def test_req_to_token_slots_are_distinct_and_rows_are_disjoint():
    r2t = samples.req_to_token(3, 5, torch.int32)
    assert r2t.dtype == torch.int32 and r2t.shape == (3, 5)
    assert len(set(r2t.reshape(-1).tolist())) == 15 and r2t[1, 0] == samples.SLOT_BASE + 5
    batch = samples.random_kv_batch(random.Random(2), 4, 2, 3, page_size=4, seq_lens=[0, 5, 9, 3])
    rows = batch.req_pool_indices.tolist()
    assert len(set(rows)) == 4 and max(rows) < batch.req_to_token.shape[0]
    assert batch.req_to_token.shape[1] == max(spec.kv_req_to_token_span(s, 2, 3, 4) for s in (0, 5, 9, 3))
