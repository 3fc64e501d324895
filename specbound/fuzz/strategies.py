"""Hypothesis strategies for EAGLE draft trees, tree-build batches and draft kv batches.

Reusable in any test suite::

    from hypothesis import given
    from specbound.fuzz import strategies as sst

    @given(sst.tree_cases())
    def test_mine(case):
        pl, sel, seq = case.tensors()
        ...

Trees are grown **the way EAGLE grows them** (:func:`eagle_tree`): random scores,
top-K per step, ``parent_list`` records the expanded candidates, ``selected_index``
is the sorted top ``n - 1`` of the whole score list.  Scores are cumulative costs
(sums of positive integer increments), so a child always costs more than its parent
and the selection is ancestor-closed; small increment ranges make ties frequent, so
tie-breaking is exercised too.

Shapes (:func:`tree_shapes`): ``(topk K, depth D, num_draft_tokens n)`` with
``n - 1 <= K + (D-1)K^2``; the serving defaults (steps, topk, n) = (5, 4, 8) and
friends are drawn often, K = 1 chains, D = 1 (empty ``parent_list``) and full trees
(``n - 1 = K + (D-1)K^2``) are explicit branches.

Malformed trees (:func:`malformed_tree`): a valid tree with one or more planted
defects: missing parents, cycles (including self-loops), out-of-range and negative
entries, unsorted rows, or fully arbitrary rows.

Batches: :func:`tree_cases` and :func:`kv_cases` return :class:`TreeCase` /
:class:`KvCase`, plain JSON-able records (``to_json`` / ``from_json``) so a failing
case can be printed and replayed.  Batch sizes start at 0; ``seq_lens`` run from 0 to
the context length ``C`` and, with ``targeting=True``, ``hypothesis.target`` pushes the
batch toward the capacity boundary (every request at ``C``, or at ``C - num_steps``
for the draft kv batches, which need room for their draft tokens).
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context, target

from specbound import spec
from specbound.spec import TreeMaskMode

__all__ = [
    "SERVING_SHAPES", "TreeCase", "KvCase", "tree_shapes", "eagle_tree", "malformed_tree", "draft_trees",
    "seq_lens", "tree_cases", "kv_cases", "case_from_json",
]

# (topk, depth, num_draft_tokens) of common serving configurations; (steps, topk, n) =
# (5, 4, 8) is sglang's EAGLE default for Llama.
SERVING_SHAPES = ((4, 5, 8), (1, 3, 4), (1, 5, 6), (8, 5, 16), (4, 3, 8), (2, 4, 6), (1, 1, 2))

DEFECTS = ("missing_parent", "cycle", "self_loop", "out_of_range", "negative", "unsorted", "arbitrary",
           "huge")


# --- records ------------------------------------------------------------------------------

@dataclass
class TreeCase:
    """One tree-build launch: the batch, its shape and how the caller runs it."""

    topk: int
    depth: int
    num_draft_tokens: int
    mode: int                       # spec.TreeMaskMode value
    max_context_len: int
    seq_lens: list[int]
    selected_index: list[list[int]]
    parent_list: list[list[int]]
    fill_prefix_mask: bool = True
    defects: list[str] = field(default_factory=list)   # planted defects ([] = a valid EAGLE tree)
    kind: str = "tree"

    @property
    def bs(self) -> int:
        return len(self.seq_lens)

    @property
    def tree_mode(self) -> TreeMaskMode:
        return TreeMaskMode(self.mode)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(parent_list, selected_index, seq_lens)`` int64 tensors."""
        bs, n = self.bs, self.num_draft_tokens
        pl = torch.tensor(self.parent_list, dtype=torch.int64).reshape(
            bs, spec.parent_list_width(self.topk, self.depth))
        sel = torch.tensor(self.selected_index, dtype=torch.int64).reshape(bs, spec.selected_index_width(n))
        return pl, sel, torch.tensor(self.seq_lens, dtype=torch.int64)

    def kwargs(self) -> dict:
        return dict(topk=self.topk, depth=self.depth, num_draft_tokens=self.num_draft_tokens,
                    mode=self.tree_mode, fill_prefix_mask=self.fill_prefix_mask)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))


@dataclass
class KvCase:
    """One draft-decode kv_indices launch.

    ``req_to_token`` is derived, not stored: ``pool_rows`` rows of ``r2t_width`` distinct
    slot numbers (``1000 + row * r2t_width + column``), so any misplaced copy shows.
    ``width_kind``: ``"exact"`` (the minimal row that passes the capacity check) or
    ``"graph"`` (a CUDA-graph row, ``spec.draft_kv_indices_buffer_width(num_seqs, K, C)``).
    """

    topk: int
    num_steps: int
    page_size: int
    max_context_len: int
    seq_lens: list[int]
    req_pool_indices: list[int]
    pool_rows: int
    r2t_width: int
    r2t_dtype: str = "int64"        # "int32" | "int64"
    kv_dtype: str = "int64"
    width_kind: str = "exact"
    kind: str = "kv"

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(req_pool_indices, req_to_token, seq_lens)``."""
        dtype = getattr(torch, self.r2t_dtype)
        r2t = (torch.arange(self.pool_rows * self.r2t_width, dtype=torch.int64) + 1000).to(dtype)
        return (torch.tensor(self.req_pool_indices, dtype=torch.int64),
                r2t.reshape(self.pool_rows, self.r2t_width),
                torch.tensor(self.seq_lens, dtype=torch.int64))

    def used_len(self) -> int:
        return spec.draft_kv_indices_used_len(sum(self.seq_lens), self.topk,
                                              spec.draft_branches(self.num_seqs, self.topk), self.num_steps)

    def width(self) -> int:
        if self.width_kind == "graph":
            return spec.draft_kv_indices_buffer_width(self.num_seqs, self.topk, self.max_context_len)
        return self.used_len()

    def buffers(self, fill: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh ``(kv_indices, kv_indptr)`` of this case's width and dtype, filled ``fill``."""
        dtype = getattr(torch, self.kv_dtype)
        return (torch.full((self.num_steps, self.width()), fill, dtype=dtype),
                torch.full((self.num_steps, spec.kv_indptr_row_len(self.num_seqs, self.topk)), fill, dtype=dtype))

    def kwargs(self) -> dict:
        return dict(topk=self.topk, num_steps=self.num_steps, page_size=self.page_size)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))


def case_from_json(text: str):
    """Inverse of ``to_json`` for every record (the ``kind`` field tells which): the
    batches here and the validation calls of :mod:`.calls`."""
    data = json.loads(text)
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "tree":
        return TreeCase(**data)
    if kind == "kv":
        return KvCase(**data)
    from .calls import call_from_json
    call = call_from_json(data) if kind else None
    if call is not None:
        return call
    from specbound.spec import SpecArgumentError
    raise SpecArgumentError("--replay", f"not a fuzz case: kind must be 'tree', 'kv', 'tree_call', 'kv_call' "
                                        f"or 'verify_mask', got {kind!r}")


def _target(value: float, label: str, enabled: bool) -> None:
    if enabled and currently_in_test_context():
        target(float(value), label=label)


# --- shapes and trees ------------------------------------------------------------------------

@st.composite
def tree_shapes(draw, max_topk: int = 8, max_depth: int = 8, max_tokens: int = 32):
    """``(topk, depth, num_draft_tokens)`` with ``n - 1 <= K + (D-1)K^2`` and ``n <= max_tokens``."""
    branch = draw(st.sampled_from(("serving", "general", "chain", "flat", "full")))
    if branch == "serving":
        shapes = [s for s in SERVING_SHAPES if s[0] <= max_topk and s[1] <= max_depth and s[2] <= max_tokens]
        if shapes:
            return draw(st.sampled_from(shapes))
    if branch == "chain":           # K = 1: sglang forces n = D + 1
        d = draw(st.integers(1, min(max_depth, max_tokens - 1)))
        return 1, d, d + 1
    k = draw(st.integers(1, max_topk))
    d = 1 if branch == "flat" else draw(st.integers(1, max_depth))
    most = spec.score_list_len(k, d) + 1
    if branch == "full" and most <= max_tokens:
        return k, d, most
    n = draw(st.integers(1, min(most, max_tokens)))
    return k, d, n


def _grow(rng: random.Random, topk: int, depth: int, num_draft_tokens: int, spread: int):
    """EAGLE's tree growth on integer costs: returns (selected_index row, parent_list row)."""
    k, d = topk, depth
    cost = [rng.randint(1, spread) for _ in range(k)]           # block 0: the root's K children
    block = list(range(k))
    parent_row = [-1]
    for _ in range(1, d):
        expanded = sorted(block, key=lambda i: (cost[i], i))[:k]   # top-K of the previous block
        parent_row.extend(expanded)
        block = []
        for parent in expanded:
            for _ in range(k):
                block.append(len(cost))
                cost.append(cost[parent] + rng.randint(1, spread))
    assert len(cost) == spec.score_list_len(k, d)
    best = sorted(range(len(cost)), key=lambda i: (cost[i], i))[: spec.selected_index_width(num_draft_tokens)]
    return sorted(best), (parent_row if d > 1 else [])


@st.composite
def eagle_tree(draw, topk: int, depth: int, num_draft_tokens: int):
    """One valid draft tree ``(selected_index row, parent_list row)`` grown the EAGLE way
    from drawn scores (a seed and an increment spread; spread 1-3 makes many ties)."""
    seed = draw(st.integers(0, 2**32 - 1))
    spread = draw(st.sampled_from((1000, 3, 1)))
    return _grow(random.Random(seed), topk, depth, num_draft_tokens, spread)


def _plant(rng: random.Random, defect: str, sel: list[int], pl: list[int], topk: int, depth: int):
    """Plant one defect in place; returns False when the shape has no room for it."""
    width = len(pl)
    score_len = spec.score_list_len(topk, depth)
    lookups = [j for j, x in enumerate(sel) if spec.parent_slot_kind(x, topk, depth) == spec.SLOT_LOOKUP]
    if defect == "missing_parent":
        if not lookups:
            return False
        slot = spec.parent_slot(sel[rng.choice(lookups)], topk)
        absent = [v for v in range(-1, score_len + 2) if v not in sel]
        pl[slot] = rng.choice(absent)
    elif defect in ("cycle", "self_loop"):
        if not lookups:
            return False
        j = rng.choice(lookups)
        slot = spec.parent_slot(sel[j], topk)
        # self-loop: the node is its own parent; cycle: its parent is a node at or below it
        pl[slot] = sel[j] if defect == "self_loop" else sel[rng.randint(j, len(sel) - 1)]
    elif defect == "out_of_range":
        if not sel:
            return False
        j = rng.randrange(len(sel))
        sel[j] = topk * max(width, 1) + rng.randint(0, 3 * topk)   # parent slot past parent_list
    elif defect == "negative":
        if sel and (not pl or rng.random() < 0.5):
            sel[rng.randrange(len(sel))] = -rng.randint(1, 3)
        elif pl:
            pl[rng.randrange(len(pl))] = -rng.randint(1, 3)
        else:
            return False
    elif defect == "huge":
        if not sel:
            return False
        sel[rng.randrange(len(sel))] = rng.choice((2**31 - 1, 2**31, 2**40, -(2**40)))
    elif defect == "unsorted":
        if len(sel) < 2:
            return False
        i, j = rng.sample(range(len(sel)), 2)
        sel[i], sel[j] = sel[j], sel[i]
        if sel == sorted(sel):
            sel.reverse()
    elif defect == "arbitrary":
        hi = score_len + 2 * topk
        sel[:] = [rng.randint(-3, hi) for _ in sel]
        pl[:] = [rng.choice([rng.randint(-3, hi), *(sel or [0])]) for _ in pl]
    return True


@st.composite
def malformed_tree(draw, topk: int, depth: int, num_draft_tokens: int):
    """A tree with planted defects: ``(selected_index row, parent_list row, defects)``.

    Starts from :func:`eagle_tree` and plants 1-3 of :data:`DEFECTS`; defects the shape
    has no room for (e.g. a cycle when D = 1) are skipped, so the list may be empty for
    tiny shapes.  Such trees need not violate ``check_tree_well_formed`` (an unsorted row
    can still be a tree); they are inputs on which reference and kernel must agree."""
    sel, pl = draw(eagle_tree(topk, depth, num_draft_tokens))
    wanted = draw(st.lists(st.sampled_from(DEFECTS), min_size=1, max_size=3))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    planted = [d for d in wanted if _plant(rng, d, sel, pl, topk, depth)]
    return sel, pl, planted


@st.composite
def draft_trees(draw, topk: int, depth: int, num_draft_tokens: int, malformed: float | bool = 0.0):
    """A valid tree, or (with probability ``malformed``, or always for True) a malformed
    one: ``(selected_index row, parent_list row, defects)``."""
    if malformed is True or (malformed and draw(st.floats(0, 1)) < malformed):
        return draw(malformed_tree(topk, depth, num_draft_tokens))
    sel, pl = draw(eagle_tree(topk, depth, num_draft_tokens))
    return sel, pl, []


# --- batches -----------------------------------------------------------------------------------

@st.composite
def seq_lens(draw, bs: int, max_len: int, *, targeting: bool = True, label: str = "seq_lens"):
    """``bs`` lengths in ``[0, max_len]``; often all equal to ``max_len`` (the capacity
    boundary); ``target`` rewards batches close to ``bs * max_len``."""
    style = draw(st.sampled_from(("random", "at_limit", "uniform", "mixed")))
    if style == "at_limit":
        out = [max_len] * bs
    elif style == "uniform":
        out = [draw(st.integers(0, max_len))] * bs
    elif style == "mixed":
        edges = sorted({0, min(1, max_len), max(max_len - 1, 0), max_len})
        out = [draw(st.sampled_from(edges)) for _ in range(bs)]
    else:
        out = draw(st.lists(st.integers(0, max_len), min_size=bs, max_size=bs))
    if bs and max_len:
        _target(sum(out) / (bs * max_len), f"{label}: fill of the context", targeting)
    return out


@st.composite
def tree_cases(draw, *, max_bs: int = 12, max_context: int = 96, max_topk: int = 8, max_depth: int = 8,
               max_tokens: int = 32, modes=tuple(TreeMaskMode), malformed: float | bool = 0.25,
               targeting: bool = True):
    """A :class:`TreeCase`: shape, mask layout (BITPACKING only when n <= 32), context
    ``C``, ``bs`` in ``[0, max_bs]``, ``seq_lens`` in ``[0, C]``, one tree per request
    (malformed with probability ``malformed``), and ``fill_prefix_mask``."""
    k, d, n = draw(tree_shapes(max_topk, max_depth, max_tokens))
    usable = [m for m in modes if TreeMaskMode(m) is not TreeMaskMode.QLEN_ONLY_BITPACKING
              or n <= spec.BITPACK_MAX_DRAFT_TOKENS]
    mode = TreeMaskMode(draw(st.sampled_from(usable)))
    c = draw(st.integers(1, max_context))
    bs = draw(st.integers(0, max_bs))
    lens = draw(seq_lens(bs, c, targeting=targeting))
    sels, pls, defects = [], [], []
    for _ in range(bs):
        sel, pl, planted = draw(draft_trees(k, d, n, malformed))
        sels.append(sel)
        pls.append(pl)
        defects.extend(planted)
    fill = draw(st.booleans()) if mode is TreeMaskMode.FULL_MASK else True
    return TreeCase(topk=k, depth=d, num_draft_tokens=n, mode=int(mode), max_context_len=c, seq_lens=lens,
                    selected_index=sels, parent_list=pls, fill_prefix_mask=fill, defects=sorted(set(defects)))


@st.composite
def kv_cases(draw, *, max_bs: int = 12, max_context: int = 96, max_topk: int = 8, max_steps: int = 8,
             page_sizes=(1, 1, 2, 4, 16, 64), targeting: bool = True):
    """A :class:`KvCase`: topk in ``[1, max_topk]``, num_steps in ``[1, max_steps]`` (the
    serving default (steps, topk) = (5, 4) often), page size 1 or > 1, context ``C``,
    ``num_seqs`` in ``[0, max_bs]``, ``seq_lens`` in ``[0, C - num_steps]`` (every request
    has room for its draft tokens), a req_to_token pool at least as wide as every read
    (sometimes wider), int32/int64 tensors, an exact or CUDA-graph row width."""
    if draw(st.booleans()):
        k, steps = 4, 5
        k, steps = min(k, max_topk), min(steps, max_steps)
    else:
        k = draw(st.integers(1, max_topk))
        steps = draw(st.integers(1, max_steps))
    page = draw(st.sampled_from(page_sizes))
    c = draw(st.integers(steps, max(steps, max_context)))
    bs = draw(st.integers(0, max_bs))
    lens = draw(seq_lens(bs, c - steps, targeting=targeting, label="kv seq_lens"))
    span = max([spec.kv_req_to_token_span(s, k, steps, page) for s in lens] or [1])
    r2t_width = span + draw(st.sampled_from((0, 0, 1, 7)))
    pool_rows = bs + draw(st.integers(0, 3))
    rows = draw(st.permutations(range(pool_rows)))[:bs] if pool_rows else []
    r2t_dtype = draw(st.sampled_from(("int64", "int32")))
    kv_dtype = "int64" if r2t_dtype == "int64" else draw(st.sampled_from(("int64", "int32")))
    width_kind = draw(st.sampled_from(("exact", "graph")))
    return KvCase(topk=k, num_steps=steps, page_size=page, max_context_len=c, seq_lens=lens,
                  req_pool_indices=list(rows), pool_rows=pool_rows, r2t_width=r2t_width,
                  r2t_dtype=r2t_dtype, kv_dtype=kv_dtype, width_kind=width_kind)
