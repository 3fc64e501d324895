"""Hypothesis strategies for EAGLE draft trees, tree-build batches and draft kv batches.

Reusable in any test suite::

    from hypothesis import given
    from specbound.fuzz import strategies as sst

    @given(sst.tree_cases())
    def test_mine(case):
        pl, sel, seq = case.tensors()
        ...

Every case is composed from Hypothesis draws, never from a drawn seed, so a failing
case shrinks to a small one: fewer requests, shorter sequences, smaller trees.

Trees (:func:`eagle_tree`) come from ``specbound.reference.samples.draft_tree``, the
builder every test shares, with each of its choices (which ``K`` candidates a step
expands, in which order; which frontier node is selected next) one draw: every EAGLE
tree of the shape can be drawn, and all-zero draws are the simplest tree.

Shapes (:func:`tree_shapes`): ``(topk K, depth D, num_draft_tokens n)`` with
``n - 1 <= K + (D-1)K^2``; the serving defaults (steps, topk, n) = (5, 4, 8) and
friends are drawn often, K = 1 chains, D = 1 (empty ``parent_list``) and full trees
(``n - 1 = K + (D-1)K^2``) are explicit branches; shapes shrink toward K = D = n = 1.

Malformed trees (:func:`malformed_tree`): a valid tree with one or more planted
defects (``samples.DEFECTS``): missing parents, cycles (including self-loops),
out-of-range, negative and huge entries, unsorted rows, or fully arbitrary rows.

Batches: :func:`tree_cases` and :func:`kv_cases` return :class:`TreeCase` /
:class:`KvCase`, plain JSON-able records (``to_json``, read back by :func:`.records.case_from_json`) so a failing
case can be printed and replayed.  A batch is a list of requests (``st.lists``: from
0 requests up), each with its own ``seq_len`` in ``[0, C]`` and, for a tree build, its
own tree; with ``targeting=True``, ``hypothesis.target`` pushes the batch toward the
capacity boundary (every request at ``C``, or at ``C - num_steps`` for the draft kv
batches, which need room for their draft tokens).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context, target

from specbound import spec
from specbound.reference import samples
from specbound.reference.samples import DEFECTS
from specbound.spec import TreeMaskMode

__all__ = [
    "SERVING_SHAPES", "TreeCase", "KvCase", "tree_shapes", "eagle_tree", "malformed_tree", "draft_trees",
    "seq_lens", "tree_cases", "kv_cases", "DEFECTS",
]

# (topk, depth, num_draft_tokens) of common serving configurations, smallest first (a shrink
# goes down the list); (steps, topk, n) = (5, 4, 8) is sglang's EAGLE default for Llama.
SERVING_SHAPES = ((1, 1, 2), (1, 3, 4), (1, 5, 6), (2, 4, 6), (4, 3, 8), (4, 5, 8), (8, 5, 16))
SERVING_DEFAULT = (4, 5, 8)
SERVING_KV = SERVING_DEFAULT[:2]     # its (topk, num_steps)

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

    ``req_to_token`` is derived, not stored: ``samples.req_to_token(pool_rows, r2t_width)``,
    distinct slot numbers, so any misplaced copy shows.
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
        return (torch.tensor(self.req_pool_indices, dtype=torch.int64),
                samples.req_to_token(self.pool_rows, self.r2t_width, getattr(torch, self.r2t_dtype)),
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


# --- shapes and trees ------------------------------------------------------------------------

def drawn_pick(draw) -> samples.Pick:
    """A ``samples.Pick`` whose every choice is a Hypothesis draw (0 is the simplest)."""
    def pick(m: int) -> int:
        return 0 if m == 1 else draw(st.integers(0, m - 1))
    return pick


def _smallest(values, holds):
    return next(v for v in values if holds(v))


@st.composite
def tree_shapes(draw, max_topk: int = 8, max_depth: int = 8, max_tokens: int = 32):
    """``(topk, depth, num_draft_tokens)`` with ``n - 1 <= K + (D-1)K^2`` and ``n <= max_tokens``.

    Every branch makes the same draws (branch, ``n``, then ``K`` and ``D`` from the values
    that can hold ``n`` nodes, then a serving shape), so a failing case can switch to the
    ``general`` branch, and shrink ``n``, then ``K`` and ``D`` with it, toward 1."""
    # serving listed twice: the shapes that run in production get a third of the draws
    branch = draw(st.sampled_from(("general", "chain", "flat", "full", "serving", "serving")))
    n = draw(st.integers(1, min(max_tokens, spec.score_list_len(max_topk, max_depth) + 1)))
    k = draw(st.integers(_smallest(range(1, max_topk + 1), lambda k: spec.score_list_len(k, max_depth) >= n - 1),
                         max_topk))
    d = draw(st.integers(_smallest(range(1, max_depth + 1), lambda d: spec.score_list_len(k, d) >= n - 1),
                         max_depth))
    fitting = [s for s in SERVING_SHAPES if s[0] <= max_topk and s[1] <= max_depth and s[2] <= max_tokens]
    # sglang's default half of the time (it is listed once per other shape)
    fitting += [SERVING_DEFAULT] * len(fitting) if SERVING_DEFAULT in fitting else []
    serving = draw(st.sampled_from(fitting)) if fitting else (k, d, n)
    if branch == "chain":           # K = 1: sglang forces n = D + 1 (the same shape as general's for n <= D + 1)
        longest = max(1, min(max_depth, max_tokens - 1))
        depth = 1 + (max(n, 2) - 2) % longest
        return 1, depth, depth + 1
    if branch == "flat":            # D = 1 (empty parent_list)
        return k, 1, 1 + (n - 1) % (k + 1)
    if branch == "full" and spec.score_list_len(k, d) + 1 <= max_tokens:
        return k, d, spec.score_list_len(k, d) + 1
    if branch == "serving":
        return serving
    return k, d, n


@st.composite
def eagle_tree(draw, topk: int, depth: int, num_draft_tokens: int):
    """One valid draft tree ``(selected_index row, parent_list row)``: ``samples.draft_tree``
    with every choice drawn."""
    return samples.draft_tree(topk, depth, num_draft_tokens, drawn_pick(draw))


@st.composite
def malformed_tree(draw, topk: int, depth: int, num_draft_tokens: int):
    """A tree with planted defects: ``(selected_index row, parent_list row, defects)``.

    Starts from :func:`eagle_tree` and plants 1-3 of :data:`DEFECTS`; defects the shape
    has no room for (e.g. a cycle when D = 1) are skipped, so the list may be empty for
    tiny shapes.  Such trees need not violate ``check_tree_well_formed`` (an unsorted row
    can still be a tree); they are inputs on which reference and kernel must agree."""
    # the defects first: a shrink that changes the tree's choices keeps them
    wanted = draw(st.lists(st.sampled_from(DEFECTS), min_size=1, max_size=3))
    sel, pl = draw(eagle_tree(topk, depth, num_draft_tokens))
    pick = drawn_pick(draw)
    planted = [d for d in wanted if samples.plant_defect(d, sel, pl, topk, depth, pick)]
    return sel, pl, planted


@st.composite
def draft_trees(draw, topk: int, depth: int, num_draft_tokens: int, malformed: float | bool = 0.0):
    """A valid tree, or (with probability ``malformed``, or always for True) a malformed
    one: ``(selected_index row, parent_list row, defects)``.  Shrinks toward valid."""
    if malformed is True or (malformed and draw(st.integers(0, 99)) >= 100 - round(100 * malformed)):
        return draw(malformed_tree(topk, depth, num_draft_tokens))
    sel, pl = draw(eagle_tree(topk, depth, num_draft_tokens))
    return sel, pl, []


# --- batches -----------------------------------------------------------------------------------

@st.composite
def seq_len_style(draw, max_len: int):
    """The strategy of one batch's lengths in ``[0, max_len]``: independent ("random",
    the shrink target: each toward 0), all at ``max_len`` (the capacity boundary), all
    one drawn value, or each at an edge (0, 1, ``max_len - 1``, ``max_len``).  Every
    style draws one integer per request, so a shrink can switch style and keep them."""
    style = draw(st.sampled_from(("random", "at_limit", "uniform", "mixed")))
    shared = draw(st.integers(0, max_len))
    edges = sorted({0, min(1, max_len), max(max_len - 1, 0), max_len})
    each = st.integers(0, max_len)
    if style == "at_limit":
        return each.map(lambda _: max_len)
    if style == "uniform":
        return each.map(lambda _: shared)
    if style == "mixed":
        return each.map(lambda v: edges[v % len(edges)])
    return each


def _target_fill(lens: list[int], max_len: int, label: str, enabled: bool) -> None:
    """Reward batches close to ``bs * max_len`` (every request at the limit)."""
    if enabled and lens and max_len and currently_in_test_context():
        target(sum(lens) / (len(lens) * max_len), label=f"{label}: fill of the context")


@st.composite
def seq_lens(draw, max_len: int, *, max_size: int = 12, targeting: bool = True, label: str = "seq_lens"):
    """A batch's lengths: up to ``max_size`` requests, each in ``[0, max_len]``
    (:func:`seq_len_style`); ``target`` rewards batches close to ``bs * max_len``."""
    out = draw(st.lists(draw(seq_len_style(max_len)), max_size=max_size))
    _target_fill(out, max_len, label, targeting)
    return out


@st.composite
def _tree_request(draw, lengths, topk: int, depth: int, num_draft_tokens: int, malformed):
    """One request of a tree build: ``(seq_len, selected_index row, parent_list row, defects)``."""
    return (draw(lengths), *draw(draft_trees(topk, depth, num_draft_tokens, malformed)))


@st.composite
def tree_cases(draw, *, max_bs: int = 12, max_context: int = 96, max_topk: int = 8, max_depth: int = 8,
               max_tokens: int = 32, modes=tuple(TreeMaskMode), malformed: float | bool = 0.25,
               targeting: bool = True):
    """A :class:`TreeCase`: shape, mask layout (BITPACKING only when n <= 32), context
    ``C``, up to ``max_bs`` requests, each with a ``seq_len`` in ``[0, C]`` and its own
    tree (malformed with probability ``malformed``), and ``fill_prefix_mask``."""
    k, d, n = draw(tree_shapes(max_topk, max_depth, max_tokens))
    usable = [m for m in modes if TreeMaskMode(m) is not TreeMaskMode.QLEN_ONLY_BITPACKING
              or n <= spec.BITPACK_MAX_DRAFT_TOKENS]
    mode = TreeMaskMode(draw(st.sampled_from(usable)))
    c = draw(st.integers(1, max_context))
    lengths = draw(seq_len_style(c))
    requests = draw(st.lists(_tree_request(lengths, k, d, n, malformed), max_size=max_bs))
    lens = [r[0] for r in requests]
    _target_fill(lens, c, "seq_lens", targeting)
    fill = draw(st.booleans()) or mode is not TreeMaskMode.FULL_MASK    # only FULL_MASK may skip the fill
    return TreeCase(topk=k, depth=d, num_draft_tokens=n, mode=int(mode), max_context_len=c, seq_lens=lens,
                    selected_index=[r[1] for r in requests], parent_list=[r[2] for r in requests],
                    fill_prefix_mask=fill, defects=sorted({x for r in requests for x in r[3]}))


@st.composite
def kv_cases(draw, *, max_bs: int = 12, max_context: int = 96, max_topk: int = 8, max_steps: int = 8,
             page_sizes=(1, 1, 2, 4, 16, 64), targeting: bool = True):
    """A :class:`KvCase`: topk in ``[1, max_topk]``, num_steps in ``[1, max_steps]`` (the
    serving default (steps, topk) = (5, 4) often), page size 1 or > 1, context ``C``, up
    to ``max_bs`` requests with ``seq_lens`` in ``[0, C - num_steps]`` (every request has
    room for its draft tokens), each on its own row of a req_to_token pool at least as
    wide as every read (sometimes wider), int32/int64 tensors, an exact or CUDA-graph row
    width."""
    # one draw for (topk, num_steps): the first max_topk * max_steps values run through every
    # pair (a shrink lowers topk first, then num_steps), the upper half is the serving default
    pairs = max_topk * max_steps
    v = draw(st.integers(0, 2 * pairs - 1))
    k, steps = divmod(v, max_steps) if v < pairs else (SERVING_KV[0] - 1, SERVING_KV[1] - 1)
    k, steps = min(k + 1, max_topk), min(steps + 1, max_steps)
    page = draw(st.sampled_from(page_sizes))
    c = draw(st.integers(steps, max(steps, max_context)))
    lens = draw(seq_lens(c - steps, max_size=max_bs, targeting=targeting, label="kv seq_lens"))
    bs = len(lens)
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
