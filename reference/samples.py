"""Random but well-formed inputs, shaped like the ones sglang's EAGLE draft produces.

Used by the tests, the benchmarks and the differential checks against the kernels.

The draft tree is grown the way EAGLE does it: the root's ``K`` children form the
first block of the score list; each later step expands the ``K`` best candidates
of the previous block into ``K`` children each (``K^2`` candidates), and records
the expanded candidates in ``parent_list``.  The ``n - 1`` best candidates overall
(scores are cumulative log-probabilities, so a child always scores below its
parent and a selected child's parent is selected too) become ``selected_index``,
sorted ascending.
"""

from __future__ import annotations

import numpy as np
import torch

from specbound import spec


def random_draft_tree(rng: np.random.Generator, topk: int, depth: int, num_draft_tokens: int
                      ) -> tuple[list[int], list[int]]:
    """One request's ``(selected_index row, parent_list row)``."""
    k, d, n = topk, depth, num_draft_tokens
    spec.require(spec.tree_shape_ok(k, d, n))
    # Block 0: the root's children.
    scores = list(np.log(rng.uniform(0.05, 1.0, size=k)))
    block = list(range(k))
    parent_row = [-1]
    for _ in range(1, d):
        expanded = sorted(block, key=lambda i: -scores[i])[:k]
        parent_row.extend(expanded)
        block = []
        for parent in expanded:
            for _ in range(k):
                block.append(len(scores))
                scores.append(scores[parent] + float(np.log(rng.uniform(0.05, 1.0))))
    assert len(scores) == spec.score_list_len(k, d)
    assert len(parent_row) == spec.parent_list_width(k, d) or d == 1
    best = sorted(range(len(scores)), key=lambda i: -scores[i])[: spec.selected_index_width(n)]
    return sorted(best), (parent_row if d > 1 else [])


def random_draft_batch(rng: np.random.Generator, bs: int, topk: int, depth: int, num_draft_tokens: int,
                       max_seq_len: int = 64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(parent_list, selected_index, seq_lens)`` int64 tensors of a random batch."""
    sel_rows, pl_rows = [], []
    for _ in range(bs):
        sel, pl = random_draft_tree(rng, topk, depth, num_draft_tokens)
        sel_rows.append(sel)
        pl_rows.append(pl)
    parent_list = torch.tensor(pl_rows, dtype=torch.int64).reshape(bs, spec.parent_list_width(topk, depth))
    selected_index = torch.tensor(sel_rows, dtype=torch.int64).reshape(
        bs, spec.selected_index_width(num_draft_tokens))
    seq_lens = torch.from_numpy(rng.integers(0, max_seq_len + 1, size=bs)).to(torch.int64)
    return parent_list, selected_index, seq_lens
