"""Calls around the validation boundaries, and the spec's verdict on each.

A *call* is a batch the other properties would build (a :class:`TreeCase` or
:class:`KvCase`, valid inputs) plus **one change** that puts one argument exactly at,
or one step past, a boundary the validation enforces: an output one cell short or
exact, a ``req_to_token`` row one entry narrow or exact (at page sizes 1 to 64), a
wrong element type or BITPACKING item width, a ``kv_indptr`` row without room for
entry 0, ``n - 1`` one past ``K + (D-1)K^2``, a non-contiguous or aliasing output, an
output sharing an input's storage, a ``req_to_token`` column slice, a pool index one past
the pool, a negative ``seq_len``, a table one column off, a zero
``topk``/``num_steps``/``page_size``.

:func:`tree_violations` and :func:`kv_violations` are the oracle: the spec conditions (``spec.tree_shape_ok``,
``spec.output_holds_ok``, ``spec.req_to_token_row_ok``, ...) a call violates,
evaluated on the tensors themselves with the spec's sizes, never by asking
``reference.validation``.  Empty means the call must be accepted.

Records are JSON-able like the other cases (``kind`` ``tree_call``, ``kv_call``,
``verify_mask``), so a failure prints a replayable case.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from specbound import spec
from specbound.reference import samples
from specbound.spec import SpecArgumentError, TreeMaskMode

from .strategies import KvCase, TreeCase, drawn_pick, kv_cases, tree_cases

TREE_INPUTS = ("parent_list", "selected_index", "seq_lens")
TREE_OUTPUTS = ("tree_mask", "positions", "retrive_index", "retrive_next_token", "retrive_next_sibling")
KV_INPUTS = ("req_pool_indices", "req_to_token", "seq_lens")
KV_OUTPUTS = ("kv_indices", "kv_indptr")
BITPACK = TreeMaskMode.QLEN_ONLY_BITPACKING
_SIGNED = {torch.uint8: torch.int8, torch.uint16: torch.int16, torch.uint32: torch.int32}


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _signed(t: torch.Tensor) -> torch.Tensor:
    """A view torch can compare and fill (its uint16/uint32 support is partial)."""
    return t.view(_SIGNED[t.dtype]) if t.dtype in _SIGNED else t


def seed_of(case) -> int:
    """A seed derived from a case's JSON (stable across processes, unlike ``hash``)."""
    return int.from_bytes(hashlib.sha256(case.to_json().encode()).digest()[:4], "little")


def junk_like(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Fill ``t`` in place with seeded junk (so any write shows); returns it.  The junk is
    drawn on the CPU (``g`` is a CPU generator) and copied to ``t``'s device."""
    view = _signed(t)
    if view.dtype == torch.bool:
        junk = torch.randint(0, 2, view.shape, generator=g).bool()
    elif view.dtype.is_floating_point:
        junk = torch.randn(view.shape, generator=g)
    else:
        junk = torch.randint(-100, 100, view.shape, generator=g)
    view.copy_(junk.to(view.dtype))
    return t


def _alloc(shape, dtype: torch.dtype, device, *, strided: bool = False) -> torch.Tensor:
    """A tensor of ``shape``; ``strided``: a view every other element of a larger one, so
    it is not contiguous (unless it has at most one element per dimension that matters)."""
    if not strided:
        return torch.zeros(shape, dtype=dtype, device=device)
    shape = tuple(shape)
    wide = torch.zeros(shape[:-1] + (2 * shape[-1],), dtype=dtype, device=device)
    return wide[..., ::2]


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _distinct(outputs: dict[str, torch.Tensor]) -> list:
    """``spec.distinct_outputs_ok`` for every output that holds cells."""
    conds = []
    for name, t in outputs.items():
        other = next((o for o, u in outputs.items() if o != name and t.numel() and u.numel()
                      and _storage(t) == _storage(u)), None)
        conds += spec.distinct_outputs_ok(other, name)
    return conds


def _apart_from_inputs(outputs: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor]) -> list:
    """``spec.output_not_input_ok`` for every output that holds cells (the calls' inputs are
    passed as validation keeps them: int64 and contiguous, or ``req_to_token``)."""
    conds = []
    for name, t in outputs.items():
        other = next((i for i, u in inputs.items() if t.numel() and u.numel() and _storage(t) == _storage(u)), None)
        conds += spec.output_not_input_ok(other, name)
    return conds


def _sharing(inp: torch.Tensor, shape, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input, output)``: a copy of ``inp`` and a fresh output of ``shape`` and ``dtype``, one
    after the other in one storage."""
    head = inp.numel() * inp.element_size()
    start = head + (-head % 8)   # the output starts aligned for any element type
    size = torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size()
    raw = torch.zeros(start + size, dtype=torch.uint8, device=inp.device)
    copy = raw[:head].view(inp.dtype).view(inp.shape).copy_(inp)
    return copy, raw[start:].view(dtype).view(shape)


def _out_conditions(name, t: torch.Tensor, dtype, rank: int, needed: int | None, row_width=None,
                    row_count=None) -> list:
    conds = [*spec.dtype_ok(_name(t.dtype), dtype, name), *spec.rank_ok(t.dim(), rank, name),
             *spec.flat_layout_ok(t.is_contiguous(), name)]
    if row_width is not None and t.dim() == rank:
        conds += spec.output_rows_ok(t.shape[-1], row_width, name)
    if row_count is not None and t.dim() == rank:
        conds += spec.output_row_count_ok(t.shape[0], row_count, name)
    if needed is not None:
        conds += spec.output_holds_ok(t.numel(), needed, name)
    return conds


def _inputs_conditions(tensors: dict[str, torch.Tensor], ranks: dict[str, int]) -> list:
    conds = []
    for name, rank in ranks.items():
        t = tensors[name]
        conds += [*spec.dtype_ok(_name(t.dtype), spec.INDEX_DTYPES, name), *spec.rank_ok(t.dim(), rank, name)]
    return conds


def _seq_conditions(seq: torch.Tensor) -> list:
    return [c for b, s in enumerate(seq.tolist()) for c in spec.seq_len_nonneg_ok(s, f"seq_lens[{b}]", "seq_lens")]


def failing(conds) -> list:
    return [c for c in conds if not c.holds]


# --- tree builds ----------------------------------------------------------------------------

@dataclass
class TreeCall:
    """A tree build: ``case`` (a :class:`TreeCase` as a dict) with one ``change``.

    ``change``: ``exact``; ``short:OUT`` / ``wide:OUT`` (one cell, or one row of a
    ``retrive_*`` output, less / more than the batch needs); ``dtype:OUT:DTYPE``;
    ``noncontig:OUT``; ``alias:A:B`` (B shares A's storage); ``alias_in:IN:OUT`` (OUT
    shares the storage of input IN); ``input_dtype:IN:DTYPE``;
    ``columns:IN:DELTA``; ``seq_len:B:-1``; ``shape`` (the case's own ``n`` or mode sits
    at a shape boundary: ``n - 1`` vs ``K + (D-1)K^2``, BITPACKING ``n`` 32 vs 33).
    """

    case: dict
    change: str
    kind: str = "tree_call"

    @property
    def tree(self) -> TreeCase:
        return TreeCase(**self.case)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))


def _tree_sizes(c: TreeCase) -> tuple[int, int, str]:
    """(mask cells, token cells, mask dtype name) from the spec; a shape the spec refuses
    gets a placeholder (the call must be refused before any output is looked at)."""
    n, mode = c.num_draft_tokens, c.tree_mode
    total = sum(max(s, 0) for s in c.seq_lens)
    try:
        return spec.mask_batch_numel(mode, c.bs, n, total), spec.token_numel(c.bs, n), spec.mask_dtype_name(mode, n)
    except SpecArgumentError:
        return c.bs * n, spec.token_numel(c.bs, n), "uint32" if mode is BITPACK else "bool"


def tree_call_tensors(call: TreeCall, device="cpu") -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(inputs, outputs)`` of the call on ``device``, every output junk-filled (seeded by the call)."""
    c = call.tree
    pl, sel, seq = (x.to(device) for x in c.tensors())
    op, *arg = call.change.split(":")
    ins = {"parent_list": pl, "selected_index": sel, "seq_lens": seq}
    if op == "input_dtype":
        ins[arg[0]] = ins[arg[0]].to(getattr(torch, arg[1]))
    elif op == "columns":
        t, delta = ins[arg[0]], int(arg[1])
        ins[arg[0]] = torch.cat([t, t[:, :1] if t.shape[1] else torch.zeros(t.shape[0], 1, dtype=t.dtype,
                                                                             device=device)], 1) \
            if delta > 0 else t[:, :-1]
    elif op == "seq_len":
        seq[int(arg[0])] = -1
    mask_numel, tok_numel, mask_dtype = _tree_sizes(c)
    bs, n = c.bs, c.num_draft_tokens
    numel = {"tree_mask": mask_numel, "positions": tok_numel}
    rows = {name: bs for name in TREE_OUTPUTS[2:]}
    dtypes = {"tree_mask": getattr(torch, mask_dtype), **{name: getattr(torch, spec.TOKEN_DTYPE)
                                                          for name in TREE_OUTPUTS[1:]}}
    strided = set()
    if op in ("short", "wide"):
        delta = -1 if op == "short" else 1
        if arg[0] in numel:
            numel[arg[0]] += delta
        else:
            rows[arg[0]] += delta
    elif op == "dtype":
        dtypes[arg[0]] = getattr(torch, arg[1])
    elif op == "noncontig":
        strided.add(arg[0])
    outs = {}
    for name in TREE_OUTPUTS:
        shape = (numel[name],) if name in numel else (rows[name], n)
        outs[name] = _alloc(shape, dtypes[name], device, strided=name in strided)
    if op == "alias":
        a, b = arg
        outs[b] = outs[a].view(outs[b].shape) if outs[a].is_contiguous() else outs[a]
    elif op == "alias_in":
        ins[arg[0]], outs[arg[1]] = _sharing(ins[arg[0]], outs[arg[1]].shape, outs[arg[1]].dtype)
    g = torch.Generator().manual_seed(seed_of(call))
    for name, t in outs.items():
        if not (op == "alias" and name == arg[1]):
            junk_like(t, g)
    return ins, outs


def tree_violations(call: TreeCall, ins, outs) -> list:
    """The spec conditions this call violates (empty: it must be accepted)."""
    c = call.tree
    k, d, n, mode = c.topk, c.depth, c.num_draft_tokens, c.tree_mode
    conds = [*spec.tree_shape_ok(k, d, n), *(spec.bitpack_ok(n) if mode is BITPACK else ())]
    if failing(conds):
        return failing(conds)
    conds += _inputs_conditions(ins, {"seq_lens": 1, "selected_index": 2, "parent_list": 2})
    bs = ins["seq_lens"].shape[0]
    conds += spec.table_shape_ok(ins["selected_index"].shape, (bs, spec.selected_index_width(n)), "selected_index")
    conds += spec.table_shape_ok(ins["parent_list"].shape, (bs, spec.parent_list_width(k, d)), "parent_list")
    conds += _seq_conditions(ins["seq_lens"])
    # int(): a float seq_lens is already a dtype violation; the size it implies is still counted
    total = sum(max(int(s), 0) for s in ins["seq_lens"].tolist())
    conds += _out_conditions("tree_mask", outs["tree_mask"], spec.mask_dtype_name(mode, n), 1,
                             spec.mask_batch_numel(mode, bs, n, total))
    tokens = spec.token_numel(bs, n)
    conds += _out_conditions("positions", outs["positions"], spec.TOKEN_DTYPE, 1, tokens)
    for name in TREE_OUTPUTS[2:]:
        conds += _out_conditions(name, outs[name], spec.TOKEN_DTYPE, 2, tokens, row_width=n)
    conds += _distinct(outs) + _apart_from_inputs(outs, ins)
    return failing(conds)


@st.composite
def _shape_boundary_case(draw) -> TreeCase:
    """A case whose own shape sits at a boundary: ``n - 1`` equal to / one past the score
    list, or BITPACKING with n = 32 / 33."""
    if draw(st.booleans()):
        k, d = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        n = spec.score_list_len(k, d) + 1 + draw(st.integers(0, 1))
        mode = draw(st.sampled_from(tuple(TreeMaskMode)))
    else:
        k, d, n, mode = 4, 3, 32 + draw(st.integers(0, 1)), BITPACK
    seq = draw(st.lists(st.integers(0, 6), max_size=3))
    pick = drawn_pick(draw)
    fits = n - 1 <= spec.score_list_len(k, d)
    rows = []
    for _ in seq:
        if fits:
            rows.append(samples.draft_tree(k, d, n, pick))
        else:   # no tree has this shape: arbitrary rows of its widths
            sel, pl = [0] * (n - 1), [0] * spec.parent_list_width(k, d)
            samples.scramble(sel, pl, k, d, pick)
            rows.append((sel, pl))
    return TreeCase(topk=k, depth=d, num_draft_tokens=n, mode=int(mode), max_context_len=6, seq_lens=seq,
                    selected_index=[r[0] for r in rows], parent_list=[r[1] for r in rows],
                    defects=[] if fits else ["arbitrary"])


@st.composite
def tree_calls(draw) -> TreeCall:
    """A :class:`TreeCall`: a small batch (valid or malformed trees) and one change."""
    if draw(st.integers(0, 9)) == 0:
        return TreeCall(dataclasses.asdict(draw(_shape_boundary_case())), "shape")
    c = draw(tree_cases(max_bs=4, max_context=24, max_topk=4, max_depth=4, max_tokens=12, malformed=0.2,
                        targeting=False))
    outs = list(TREE_OUTPUTS)
    changes = ["exact", f"wide:{draw(st.sampled_from(outs))}", f"noncontig:{draw(st.sampled_from(outs))}",
               f"input_dtype:{draw(st.sampled_from(TREE_INPUTS))}:"
               f"{draw(st.sampled_from(('int32', 'int16', 'float32')))}",
               f"columns:{draw(st.sampled_from(TREE_INPUTS[:2]))}:{draw(st.sampled_from((-1, 1)))}"]
    changes.append(f"dtype:tree_mask:{draw(st.sampled_from(('bool', 'uint8', 'uint16', 'uint32', 'int8')))}")
    changes.append(f"dtype:{draw(st.sampled_from(outs[1:]))}:{draw(st.sampled_from(('int32', 'int64')))}")
    if c.bs:
        changes += [f"short:{draw(st.sampled_from(outs))}"] * 3
        changes.append(f"seq_len:{draw(st.integers(0, c.bs - 1))}:-1")
        a, b = draw(st.sampled_from((("retrive_next_token", "retrive_next_sibling"),
                                     ("retrive_index", "retrive_next_token"), ("retrive_index", "positions"))))
        changes.append(f"alias:{a}:{b}")
        changes.append(f"alias_in:{draw(st.sampled_from(TREE_INPUTS))}:{draw(st.sampled_from(outs[1:]))}")
    return TreeCall(dataclasses.asdict(c), draw(st.sampled_from(changes)))


# --- draft kv builds -----------------------------------------------------------------------------

@dataclass
class KvCall:
    """A draft kv build: ``case`` (a :class:`KvCase` as a dict; its ``req_to_token`` rows are
    exactly as wide as the widest read) with one ``change``.

    ``change``: ``exact``; ``r2t:-1`` (rows one entry narrow); ``pool:B:VALUE``;
    ``kv_width:DELTA`` (from the used length); ``kv_rows:DELTA``; ``indptr_width:DELTA``
    (from ``spec.kv_indptr_row_len``); ``indptr_rows:DELTA``; ``dtype:OUT:DTYPE``;
    ``input_dtype:IN:DTYPE``; ``noncontig:OUT``; ``alias:kv_indices:kv_indptr``;
    ``alias_in:IN:OUT``; ``r2t_view`` (``req_to_token`` the first columns of a wider table:
    strided, unless the pool has one row); ``seq_len:B:-1``; ``scalar:NAME:0``.
    """

    case: dict
    change: str
    kind: str = "kv_call"

    @property
    def kv(self) -> KvCase:
        return KvCase(**self.case)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    def kwargs(self) -> dict:
        kw = self.kv.kwargs()
        op, *arg = self.change.split(":")
        if op == "scalar":
            kw[arg[0]] = int(arg[1])
        return kw


def kv_call_tensors(call: KvCall, device="cpu") -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    c = call.kv
    op, *arg = call.change.split(":")
    pool, r2t, seq = (x.to(device) for x in c.tensors())
    ins = {"req_pool_indices": pool, "req_to_token": r2t, "seq_lens": seq}
    if op == "pool":
        pool[int(arg[0])] = int(arg[1])
    elif op == "seq_len":
        seq[int(arg[0])] = -1
    elif op == "input_dtype":
        ins[arg[0]] = ins[arg[0]].to(getattr(torch, arg[1]))
    elif op == "r2t_view":
        wide = torch.zeros(r2t.shape[0], r2t.shape[1] + 3, dtype=r2t.dtype, device=device)
        wide[:, :r2t.shape[1]] = r2t
        ins["req_to_token"] = wide[:, :r2t.shape[1]]
    width, rows = c.used_len(), c.num_steps
    ptr_width, ptr_rows = spec.kv_indptr_row_len(c.num_seqs, c.topk), c.num_steps
    dtypes = {name: getattr(torch, c.kv_dtype) for name in KV_OUTPUTS}
    if op == "kv_width":
        width += int(arg[0])
    elif op == "kv_rows":
        rows += int(arg[0])
    elif op == "indptr_width":
        ptr_width += int(arg[0])
    elif op == "indptr_rows":
        ptr_rows += int(arg[0])
    elif op == "dtype":
        dtypes[arg[0]] = getattr(torch, arg[1])
    strided = {arg[0]} if op == "noncontig" else set()
    shapes = {"kv_indices": (rows, width), "kv_indptr": (ptr_rows, ptr_width)}
    if op == "alias":
        # kv_indptr is the tail of kv_indices' storage
        base = torch.zeros(rows * width + ptr_rows * ptr_width, dtype=dtypes["kv_indices"], device=device)
        outs = {"kv_indices": base[:rows * width].view(rows, width),
                "kv_indptr": base[rows * width:].view(ptr_rows, ptr_width)}
    else:
        outs = {name: _alloc(shapes[name], dtypes[name], device, strided=name in strided) for name in KV_OUTPUTS}
    if op == "alias_in":
        ins[arg[0]], outs[arg[1]] = _sharing(ins[arg[0]], shapes[arg[1]], dtypes[arg[1]])
    g = torch.Generator().manual_seed(seed_of(call))
    for t in outs.values():
        junk_like(t, g)
    return ins, outs


def kv_violations(call: KvCall, ins, outs) -> list:
    kw = call.kwargs()
    k, steps, page = kw["topk"], kw["num_steps"], kw["page_size"]
    conds = list(spec.kv_shape_ok(k, steps, page))
    if failing(conds):
        return failing(conds)
    conds += _inputs_conditions(ins, {"seq_lens": 1, "req_pool_indices": 1, "req_to_token": 2})
    pool, r2t, seq = ins["req_pool_indices"], ins["req_to_token"], ins["seq_lens"]
    conds += spec.input_layout_ok(r2t.is_contiguous(), "req_to_token")
    num_seqs = seq.shape[0]
    conds += spec.table_shape_ok(pool.shape, (num_seqs,), "req_pool_indices")
    conds += _seq_conditions(seq)
    for b, (row, s) in enumerate(zip(pool.tolist(), seq.tolist())):
        conds += spec.pool_index_ok(row, r2t.shape[0], b)
        if s >= 0:
            conds += spec.req_to_token_row_ok(r2t.shape[1], s, k, steps, page, b)
    total = sum(max(s, 0) for s in seq.tolist())
    ind, ptr = outs["kv_indices"], outs["kv_indptr"]
    conds += _out_conditions("kv_indices", ind, spec.KV_DTYPES, 2, None, row_count=steps)
    if ind.dim() == 2:
        conds += spec.kv_capacity_holds(total, k, num_seqs, steps, ind.shape[1])
    if _name(ind.dtype) in spec.KV_DTYPES and _name(r2t.dtype) in spec.INDEX_DTYPES:
        conds += spec.kv_copy_lossless_ok(spec.int_bits(_name(ind.dtype)), spec.int_bits(_name(r2t.dtype)))
    conds += _out_conditions("kv_indptr", ptr, spec.KV_DTYPES, 2, None, row_count=steps)
    if ptr.dim() == 2:
        conds += spec.kv_indptr_row_ok(ptr.shape[1], num_seqs, k)
    if ptr.dtype == torch.int32:
        conds += spec.int32_alloc_ok(spec.draft_kv_indices_used_len(total, k, spec.draft_branches(num_seqs, k), steps),
                                     "kv_indptr")
    conds += _distinct(outs) + _apart_from_inputs(outs, ins)
    return failing(conds)


@st.composite
def kv_calls(draw) -> KvCall:
    """A :class:`KvCall`: a small batch at page sizes 1 to 64 (often K > 1, where the
    page-aligned layout differs from the contiguous one) and one change."""
    c = draw(kv_cases(max_bs=4, max_context=40, max_topk=4, max_steps=5, page_sizes=(1, 2, 3, 4, 16, 64),
                      targeting=False))
    spans = [spec.kv_req_to_token_span(s, c.topk, c.num_steps, c.page_size) for s in c.seq_lens]
    c = dataclasses.replace(c, r2t_width=max(spans or [1]), width_kind="exact")
    changes = ["exact", f"kv_width:{draw(st.sampled_from((-1, 1) if c.used_len() else (1,)))}",
               f"kv_rows:{draw(st.sampled_from((-1, 1)))}",
               f"indptr_width:{draw(st.sampled_from((-1, 1)))}", f"indptr_rows:{draw(st.sampled_from((-1, 1)))}",
               f"dtype:kv_indices:{draw(st.sampled_from(('int32', 'int64', 'int16', 'float32')))}",
               f"dtype:kv_indptr:{draw(st.sampled_from(('int32', 'int16')))}",
               f"input_dtype:{draw(st.sampled_from(KV_INPUTS))}:{draw(st.sampled_from(('int32', 'int16')))}",
               f"noncontig:{draw(st.sampled_from(KV_OUTPUTS))}", "alias:kv_indices:kv_indptr", "r2t_view",
               f"alias_in:{draw(st.sampled_from(KV_INPUTS))}:{draw(st.sampled_from(KV_OUTPUTS))}",
               f"scalar:{draw(st.sampled_from(('topk', 'num_steps', 'page_size')))}:0"]
    if c.num_seqs:
        changes += ["r2t:-1"] * 4
        b = draw(st.integers(0, c.num_seqs - 1))
        changes += [f"pool:{b}:{draw(st.sampled_from((-1, c.pool_rows)))}", f"seq_len:{b}:-1"]
    change = draw(st.sampled_from(changes))
    if change == "r2t:-1":
        c = dataclasses.replace(c, r2t_width=c.r2t_width - 1)
    return KvCall(dataclasses.asdict(c), change)


# --- the preallocated verify mask --------------------------------------------------------------

@dataclass
class VerifyMaskCall:
    """A ``VerifyMask`` captured at ``max_bs`` and one batch (``bs`` requests, ``seq_lens_sum``
    prefix tokens) asking for its mask buffer and its trivial-verify mask."""

    max_bs: int
    num_draft_tokens: int
    max_context_len: int
    mode: int
    is_read: bool
    bs: int
    seq_lens_sum: int
    kind: str = "verify_mask"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @property
    def layout(self) -> TreeMaskMode:
        """The record's layout: the read mode, or the compact QLEN_ONLY when nothing reads it."""
        return TreeMaskMode(self.mode) if self.is_read else TreeMaskMode.QLEN_ONLY


@st.composite
def verify_mask_calls(draw) -> VerifyMaskCall:
    """Capture parameters and a batch drawn at the boundaries: ``bs`` around ``max_bs``,
    ``S`` at ``bs*C`` (+1), and ``S + bs`` (the trivial-verify size) at the buffer size (+1)."""
    mode = TreeMaskMode(draw(st.sampled_from(tuple(TreeMaskMode))))
    n = draw(st.integers(1, 32 if mode is BITPACK and draw(st.booleans()) else 9))
    max_bs, c, is_read = draw(st.integers(0, 6)), draw(st.integers(1, 40)), draw(st.booleans())
    bs = max(0, max_bs + draw(st.sampled_from((-1, 0, 0, 1, 2))))
    layout = mode if is_read else TreeMaskMode.QLEN_ONLY
    buffer = spec.tree_mask_numel(layout, max_bs, n, c)
    s = draw(st.sampled_from((0, 1, bs * c, bs * c + 1, buffer - bs, buffer - bs + 1, buffer)))
    s = max(0, s + draw(st.sampled_from((0, 0, 0, -1))))
    return VerifyMaskCall(max_bs, n, c, int(mode), is_read, bs, s)


def call_from_json(data: dict):
    kind = data.get("kind")
    if kind == "tree_call":
        return TreeCall(**data)
    if kind == "kv_call":
        return KvCall(**data)
    if kind == "verify_mask":
        return VerifyMaskCall(**data)
    return None
