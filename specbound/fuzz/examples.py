"""Explicit boundary examples: every property tries these first, before any drawn case.

A drawn case reaches a boundary only by chance (a parent search that would run one
entry past ``n - 1`` needs a missing parent whose token happens to sit right after the
row); these cases sit exactly on one, so ``specbound verify`` finds a bug there in its
first examples.  Each tree case names its boundary in ``defects`` (valid ones have none):

* ``slot_at_row_end``: an entry whose parent slot is the last one of ``parent_list``
  (valid), and one whose slot is one past it (``out_of_range``), with the next row's
  slot 0 holding a token of this row, so reading one slot too far finds a parent;
* ``search_past_row``: a missing parent whose token is the next row's first entry
  (one past this row), or ``-1`` (what a masked-off load returns);
* ``depth_D``: nodes at depth exactly ``D`` (a ``K = 1`` chain, a full tree), and a
  chain one level deeper than ``D`` (``too_deep``), and a self-loop.

The calls (:mod:`.calls`) get the boundaries of the validation the same way.
"""

from __future__ import annotations

import random

from specbound import spec
from specbound.reference.samples import random_draft_tree
from specbound.spec import TreeMaskMode

from .calls import BITPACK, KvCall, TreeCall, VerifyMaskCall
from .strategies import KvCase, TreeCase

FULL, QLEN = TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY


def _case(k, d, n, mode, rows, defects=(), seq_lens=None) -> TreeCase:
    seq = seq_lens if seq_lens is not None else [3 + 2 * b for b in range(len(rows))]
    return TreeCase(topk=k, depth=d, num_draft_tokens=n, mode=int(mode), max_context_len=max(seq + [1]),
                    seq_lens=seq, selected_index=[list(r[0]) for r in rows], parent_list=[list(r[1]) for r in rows],
                    defects=sorted(defects))


def _grown_with_last_slot(k, d, n):
    """A grown tree with an entry whose parent slot is the last of parent_list."""
    last = spec.parent_list_width(k, d) - 1
    for seed in range(10_000):
        sel, pl = random_draft_tree(random.Random(seed), k, d, n)
        if any(spec.parent_slot(v, k) == last for v in sel):
            return sel, pl
    raise AssertionError(f"no grown tree of shape {(k, d, n)} uses parent slot {last}")


def _lookup_entry(sel, k, d) -> int:
    return next(j for j, v in enumerate(sel) if spec.parent_slot_kind(v, k, d) == spec.SLOT_LOOKUP)


def tree_boundary_cases() -> list[TreeCase]:
    out = []
    k, d, n = 2, 3, 6
    width = spec.parent_list_width(k, d)
    sel, pl = _grown_with_last_slot(k, d, n)
    out.append(_case(k, d, n, QLEN, [(sel, pl)]))                       # slot = width - 1: valid
    j = max(i for i, v in enumerate(sel) if spec.parent_slot(v, k) == width - 1)
    bad = list(sel)
    bad[j] = k * width                                                  # slot = width: one past
    nxt = list(pl)
    nxt[0] = sel[0]                             # slot 0 of the next row: a token of this row
    for mode in (QLEN, FULL):
        out.append(_case(k, d, n, mode, [(bad, pl), (sel, nxt)], ["out_of_range", "slot_at_row_end"]))

    # search_past_row: row 0 misses a parent whose token is row 1's first entry / is -1
    k, d, n = 2, 3, 5
    sel, pl = random_draft_tree(random.Random(1), k, d, n)
    j = _lookup_entry(sel, k, d)
    slot = spec.parent_slot(sel[j], k)
    outside = [spec.score_list_len(k, d) + 1 + i for i in range(n - 1)]    # slots past parent_list
    row0 = list(pl)
    row0[slot] = outside[0]
    for mode in (QLEN, FULL, BITPACK):
        out.append(_case(k, d, n, mode, [(sel, row0), (outside, pl)],
                         ["missing_parent", "out_of_range", "search_past_row"]))
    minus = list(pl)
    minus[slot] = -1
    out.append(_case(k, d, n, QLEN, [(sel, minus)], ["missing_parent", "search_past_row"]))
    out.append(_case(k, d, n, BITPACK, [(sel, pl), (sel, minus)], ["missing_parent", "search_past_row"]))

    # depth exactly D: a K = 1 chain and a full tree; one level deeper than D; a self-loop
    for k, d, mode in ((1, 4, FULL), (2, 3, BITPACK)):
        n = spec.score_list_len(k, d) + 1
        out.append(_case(k, d, n, mode, [random_draft_tree(random.Random(2), k, d, n)]))
    chain = ([0, 2, 4, 6], [-1, 0, 2, 4, -1])                           # K = 2, D = 3: node 4 at depth 4
    out.append(_case(2, 3, 5, QLEN, [chain], ["depth_D", "too_deep"]))
    out.append(_case(2, 3, 5, FULL, [chain, chain], ["depth_D", "too_deep"], seq_lens=[0, 4]))
    out.append(_case(2, 2, 3, QLEN, [([0, 2], [-1, 2, -1])], ["depth_D", "self_loop"]))
    return out


def kv_boundary_cases() -> list[KvCase]:
    """Prefix ends at, just before and just after page boundaries, rows exactly as wide as the
    widest read, the serving default (K 4, 5 steps) and the CUDA-graph row width."""
    out = []
    for k, steps, page, lens, width_kind in ((2, 3, 4, [0, 3, 4, 5, 8], "exact"), (4, 5, 1, [7, 0, 12], "graph"),
                                             (3, 2, 16, [15, 16, 17], "exact"), (1, 4, 4, [4, 6], "exact")):
        span = max(spec.kv_req_to_token_span(s, k, steps, page) for s in lens)
        out.append(KvCase(topk=k, num_steps=steps, page_size=page, max_context_len=max(lens) + steps,
                          seq_lens=lens, req_pool_indices=list(range(len(lens)))[::-1], pool_rows=len(lens),
                          r2t_width=span, width_kind=width_kind))
    return out


def tree_call_examples() -> list[TreeCall]:
    import dataclasses
    base = {mode: dataclasses.asdict(_case(2, 3, 5, mode, [random_draft_tree(random.Random(3), 2, 3, 5)] * 2))
            for mode in TreeMaskMode}
    out = [TreeCall(base[mode], "exact") for mode in TreeMaskMode]
    out += [TreeCall(base[FULL], f"short:{name}") for name in ("tree_mask", "positions", "retrive_index")]
    out += [TreeCall(base[BITPACK], f"dtype:tree_mask:{name}") for name in ("uint8", "uint16")]
    out += [TreeCall(base[QLEN], "alias:retrive_next_token:retrive_next_sibling"),
            TreeCall(base[QLEN], "noncontig:tree_mask"), TreeCall(base[FULL], "alias_in:seq_lens:positions"),
            TreeCall(base[FULL], "input_dtype:seq_lens:float32")]   # the oracle sizes from float lengths too
    over = dataclasses.asdict(_case(1, 2, 4, QLEN, [([0, 1, 2], [-1, 0])]))   # n - 1 = 3 > K + (D-1)K^2 = 2
    out.append(TreeCall({**over, "defects": ["arbitrary"]}, "shape"))
    return out


def kv_call_examples() -> list[KvCall]:
    import dataclasses
    out = []
    for page in (1, 4):
        lens = [5, 2]
        case = KvCase(topk=2, num_steps=3, page_size=page, max_context_len=16, seq_lens=lens, req_pool_indices=[1, 0],
                      pool_rows=2, r2t_width=max(spec.kv_req_to_token_span(s, 2, 3, page) for s in lens))
        out.append(KvCall(dataclasses.asdict(case), "exact"))
        narrow = dataclasses.replace(case, r2t_width=case.r2t_width - 1)
        out.append(KvCall(dataclasses.asdict(narrow), "r2t:-1"))
    paged = out[-2].case
    out += [KvCall(paged, change) for change in ("kv_width:-1", "indptr_width:-1", "pool:0:2",
                                                  "alias:kv_indices:kv_indptr", "r2t_view",
                                                  "alias_in:req_to_token:kv_indices")]
    # a one-row pool: its column slice is contiguous to torch (accepted) but keeps the wider row stride
    one = KvCase(topk=2, num_steps=3, page_size=1, max_context_len=16, seq_lens=[5], req_pool_indices=[0],
                 pool_rows=1, r2t_width=spec.kv_req_to_token_span(5, 2, 3, 1))
    out.append(KvCall(dataclasses.asdict(one), "r2t_view"))
    return out


def verify_mask_examples() -> list[VerifyMaskCall]:
    """The trivial verify (``S + bs`` cells) against a compact buffer of ``max_bs * n^2`` cells,
    one cell short and exact; a batch one past ``max_bs``; one whose cells overflow the buffer."""
    return [VerifyMaskCall(1, 1, 4, int(QLEN), False, 1, 1), VerifyMaskCall(1, 1, 4, int(QLEN), False, 1, 0),
            VerifyMaskCall(2, 2, 8, int(FULL), True, 3, 5), VerifyMaskCall(2, 2, 3, int(FULL), True, 2, 7)]
