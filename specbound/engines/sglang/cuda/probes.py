"""The malformed-tree probes: the smallest tree with each defect the Triton audit probes.

Each is one request, so a read past a row is also a read past its buffer (the sanitizer
sees it; in a larger batch the same read lands silently in the next request's row).

* ``missing_parent``: node 2's parent token is in no entry of the row (K=1, D=2, n=3);
* ``cycle``: node 2 is its own parent (the smallest cycle, K=1, D=2, n=3);
* ``slot_at_row_end``: node 2's parent slot equals ``parent_list``'s width (K=1, D=2, n=3);
* ``deeper_than_depth``: a chain of three nodes below the root with D = 2 (K=2, n=4):
  every lookup succeeds, but the tree is deeper than the draft could make it.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbound import spec
from specbound.fuzz.strategies import TreeCase
from specbound.spec import TreeMaskMode


@dataclass(frozen=True)
class Probe:
    name: str
    text: str
    topk: int
    depth: int
    n: int
    selected_index: tuple[int, ...]
    parent_list: tuple[int, ...]

    def case(self, mode: TreeMaskMode, seq_len: int = 3) -> TreeCase:
        assert len(self.selected_index) == spec.selected_index_width(self.n)
        assert len(self.parent_list) == spec.parent_list_width(self.topk, self.depth)
        return TreeCase(topk=self.topk, depth=self.depth, num_draft_tokens=self.n, mode=int(mode),
                        max_context_len=seq_len, seq_lens=[seq_len], selected_index=[list(self.selected_index)],
                        parent_list=[list(self.parent_list)], defects=[self.name])


PROBES = (
    # node 1 = entry 0 (slot 0: the root); node 2 = entry 1, slot 1 -> parent_list[1] = 7, in no entry
    Probe("missing_parent", "missing parent (node 2's parent token is in no entry of the row)",
          1, 2, 3, (0, 1), (-1, 7)),
    # parent_list[1] = 1 is node 2's own entry
    Probe("cycle", "cycle (node 2 is its own parent)", 1, 2, 3, (0, 1), (-1, 1)),
    # entry 2 // K = slot 2 = parent_list's width
    Probe("slot_at_row_end", "parent slot at the row's end (node 2's slot = parent_list width)",
          1, 2, 3, (0, 2), (-1, 0)),
    # node 1 <- root, node 2 (slot 1 -> token 0 = node 1), node 3 (slot 2 -> token 2 = node 2): depth 3 > D = 2
    Probe("deeper_than_depth", "deeper than D (a chain of 3 nodes below the root, D = 2)",
          2, 2, 4, (0, 2, 4), (-1, 0, 2)),
)
