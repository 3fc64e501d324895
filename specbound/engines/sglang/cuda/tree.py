"""sglang's CUDA tree build (``build_tree_efficient``, ``build_tree_efficient_partial_packed``)
run on the CPU against the spec.

A case is a :class:`~specbound.fuzz.strategies.TreeCase`.  Every buffer is allocated at
exactly the extent the spec gives (``spec.parent_list_width``, ``selected_index_width``,
``mask_batch_numel``, ``token_cell``), and launched as sglang's host wrapper launches it
(grid ``bs`` blocks of ``n`` threads, nothing for ``bs = 0``, BITPACKING to the packed
kernel with ``bitpack_item_bits / 8`` bytes per item).

:func:`run_case` makes four launches of a valid case:

1. sglang's pre-fills (mask True, or zero for BITPACKING, or left as it was when FULL_MASK
   skips the fill; ``retrive_*`` -1; ``positions`` uninitialised, here a fixed junk
   pattern), threads in ascending order: every output buffer, untouched cells included,
   must equal ``specbound.reference.build_tree`` on the same pre-filled buffers, bit for
   bit, and the inputs must be unchanged;
2. the same, threads and blocks in descending order: the outputs must not depend on
   the order (on the GPU the threads run concurrently);
3. and 4. every output pre-filled with a poison (two complementary ones): the cells that
   changed must be exactly the spec's footprint (``spec.mask_kernel_cells``, items for
   BITPACKING; ``spec.token_cells``, of which the ``retrive_next_*`` links may leave some).

Any sanitizer report, guard-band write or spent step budget ends the case with that
finding.  A malformed case (``malformed=True``) stops after launch 1.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specbound import spec
from specbound.spec import TreeMaskMode

from .harness import Buf, Launch, Outcome, Session

FULL, QLEN, BITPACK = TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY, TreeMaskMode.QLEN_ONLY_BITPACKING

# Which kernel builds which layout (the host wrapper's dispatch).
KERNEL_MODES = {"build_tree_efficient": (FULL, QLEN), "build_tree_efficient_partial_packed": (BITPACK,)}
INPUTS = ("parent_list", "selected_index", "seq_lens")
OUTPUTS = ("tree_mask", "positions", "retrive_index", "retrive_next_token", "retrive_next_sibling")
# Parameter names of the kernels (as sglang spells them, and close variants) -> role.
ROLE_OF = {
    "parent_list": "parent_list", "selected_index": "selected_index", "verified_seq_len": "seq_lens",
    "seq_lens": "seq_lens", "tree_mask": "tree_mask", "positions": "positions",
    "retrive_index": "retrive_index", "retrieve_index": "retrive_index",
    "retrive_next_token": "retrive_next_token", "retrieve_next_token": "retrive_next_token",
    "retrive_next_sibling": "retrive_next_sibling", "retrieve_next_sibling": "retrive_next_sibling",
    "topk": "topk", "depth": "depth", "draft_token_num": "n", "num_draft_tokens": "n",
    "tree_mask_mode": "mode", "num_bytes_per_item": "item_bytes",
}
JUNK = 0x3C          # positions are torch.empty in sglang: any bytes; this pattern here
POISONS = (0x5A, 0xA5)   # complementary byte poisons; neither is a bool's 0 or 1


def roles(params) -> tuple[dict[str, str], list[str]]:
    """Role of every kernel parameter, and the parameters no role is known for."""
    out, unknown = {}, []
    for p in params:
        role = ROLE_OF.get(p.name.lower().removesuffix("_ptr"))
        if role is None:
            unknown.append(p.decl)
        out[p.name] = role
    return out, unknown


def cell_bytes(mode: TreeMaskMode, n: int) -> int:
    """Bytes of one mask cell: a bool, or one BITPACKING item."""
    return spec.bitpack_item_bits(n) // 8 if mode is BITPACK else 1


def step_budget(bs: int, n: int) -> int:
    """Loop-condition evaluations one thread may spend.  A thread of these kernels sums
    ``bid < bs`` prefix lengths, clears ``n - 1`` cells, then either links ``n - 1`` nodes
    by searching ``<= n + 1`` entries each, or walks: every walk step moves to a position in
    ``[0, n]`` that depends only on the current one, so a walk that ends takes ``<= n + 1``
    steps of ``<= n + 2`` evaluations.  Four times that bound leaves room; a thread over
    it is in a cycle."""
    return 4 * (bs + (n + 2) ** 2)


def _seed(case) -> int:
    return int.from_bytes(hashlib.sha256(case.to_json().encode()).digest()[:4], "little")


def _i64(values) -> bytes:
    return np.asarray(values, dtype=np.int64).reshape(-1).tobytes()


@dataclass
class Buffers:
    """Byte images of one launch's buffers, by role, at their exact extents."""

    data: dict[str, bytes]
    elem: dict[str, int]

    def copy(self) -> "Buffers":
        return Buffers(dict(self.data), dict(self.elem))


def extents(case) -> dict[str, int]:
    """Elements of every buffer, from the spec."""
    n, bs = case.num_draft_tokens, case.bs
    tokens = spec.token_cell(bs, 0, n)      # the batch's token rows end where request bs would begin
    return {"parent_list": bs * spec.parent_list_width(case.topk, case.depth),
            "selected_index": bs * spec.selected_index_width(n), "seq_lens": bs,
            "tree_mask": spec.mask_batch_numel(case.tree_mode, bs, n, sum(case.seq_lens)),
            "positions": tokens, "retrive_index": tokens, "retrive_next_token": tokens,
            "retrive_next_sibling": tokens}


def prefilled(case, how: str, mask: bool = True) -> Buffers:
    """Inputs plus outputs pre-filled ``how``: "sglang" (as sglang's caller does) or
    "poison0"/"poison1".  ``mask=False`` leaves the mask's bytes out (a lazy mapping of
    zeros stands for it, see :func:`make_launch`)."""
    ext = extents(case)
    mode, n = case.tree_mode, case.num_draft_tokens
    elem = {name: 8 for name in ext}
    elem["tree_mask"] = cell_bytes(mode, n)
    data = {"parent_list": _i64(case.parent_list), "selected_index": _i64(case.selected_index),
            "seq_lens": _i64(case.seq_lens)}
    mask_nbytes = ext["tree_mask"] * elem["tree_mask"]
    if how == "sglang":
        if not mask:
            pass
        elif mode is BITPACK:
            data["tree_mask"] = bytes(mask_nbytes)
        elif mode is QLEN or case.fill_prefix_mask:
            data["tree_mask"] = b"\x01" * mask_nbytes
        else:                                      # FULL_MASK, fill skipped: torch.empty
            rng = np.random.default_rng(_seed(case))
            data["tree_mask"] = rng.integers(0, 2, mask_nbytes, dtype=np.uint8).tobytes()
        data["positions"] = bytes([JUNK]) * (8 * ext["positions"])
        for name in OUTPUTS[2:]:
            data[name] = _i64([-1] * ext[name])
    else:
        byte = POISONS[int(how[-1])]
        for name in OUTPUTS[0 if mask else 1:]:
            data[name] = bytes([byte]) * (ext[name] * elem[name])
    return Buffers(data, elem)


def make_launch(kernel, case, bufs: Buffers, *, descending=False, short: dict[str, int] | None = None) -> Launch:
    """The launch of ``kernel`` (a :class:`~.source.Kernel`) on ``bufs``; a buffer without
    bytes in ``bufs`` is passed as a lazy zero mapping of its extent and not read back.
    ``short`` makes named buffers that many elements smaller (only to show that the
    harness catches it)."""
    role, unknown = roles(kernel.params)
    if unknown:
        raise ValueError(f"{kernel.name}: no value known for {unknown}")
    scalars = {"topk": case.topk, "depth": case.depth, "n": case.num_draft_tokens, "mode": int(case.tree_mode),
               "item_bytes": cell_bytes(case.tree_mode, case.num_draft_tokens)}
    short = short or {}
    args: list[Any] = []
    for p in kernel.params:
        r = role[p.name]
        if r in bufs.data:
            raw = bufs.data[r]
            cut = short.get(r, 0) * bufs.elem[r]
            args.append(Buf(r, len(raw) - cut, raw[:len(raw) - cut], bufs.elem[r]))
        elif r in bufs.elem:
            args.append(Buf(r, extents(case)[r] * bufs.elem[r], None, bufs.elem[r], lazy=True))
        else:
            args.append(scalars[r])
    n = case.num_draft_tokens
    return Launch(kernel.name, (case.bs, 1, 1), (n, 1, 1), tuple(args), step_budget(case.bs, n),
                  read=tuple(bufs.data), descending=descending)


def reference_outputs(case, bufs: Buffers) -> dict[str, bytes]:
    """``specbound.reference.build_tree`` on the same pre-filled buffers, as bytes."""
    import torch

    from specbound import reference as ref

    n = case.num_draft_tokens
    mdtype = ref.mask_dtype(case.tree_mode, n)
    mask = torch.frombuffer(bytearray(bufs.data["tree_mask"]), dtype=torch.uint8).view(mdtype).clone()
    outs = {name: torch.frombuffer(bytearray(bufs.data[name]), dtype=torch.int64).clone() for name in OUTPUTS[1:]}
    shape = (case.bs, n)
    pl, sel, seq = case.tensors()
    ref.build_tree(pl, sel, seq, **case.kwargs(), tree_mask=mask, positions=outs["positions"],
                   retrive_index=outs["retrive_index"].reshape(shape),
                   retrive_next_token=outs["retrive_next_token"].reshape(shape),
                   retrive_next_sibling=outs["retrive_next_sibling"].reshape(shape))
    result = {"tree_mask": mask.view(torch.uint8).numpy().tobytes()}
    result.update({name: t.numpy().tobytes() for name, t in outs.items()})
    return result


@dataclass
class Finding:
    kind: str                  # "oob", "ub", "hang", "crash", "diverged", "order", "footprint", "error"
    message: str
    where: dict[str, Any] = field(default_factory=dict)
    printed: list[str] = field(default_factory=list)


def _first_difference(name: str, got: bytes, want: bytes, elem: int) -> str | None:
    if got == want:
        return None
    if len(got) != len(want):
        return f"{name}: {len(got)} bytes, expected {len(want)}"
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.int64}[elem]
    g, w = np.frombuffer(got, dtype=dtype), np.frombuffer(want, dtype=dtype)
    bad = np.nonzero(g != w)[0]
    i = int(bad[0])
    return f"{name} cell {i}: kernel {int(g[i])}, reference {int(w[i])} ({len(bad)} cell(s) differ)"


def _changed(before: bytes, after: bytes, elem: int) -> set[int]:
    a = np.frombuffer(before, dtype=np.uint8).reshape(-1, elem)
    b = np.frombuffer(after, dtype=np.uint8).reshape(-1, elem)
    return set(np.nonzero((a != b).any(axis=1))[0].tolist())


def _sanitizer(out: Outcome) -> Finding | None:
    if out.ok:
        return None
    return Finding(out.kind, out.message, out.where, out.printed)


def run_case(session: Session, kernel, case, *, malformed: bool = False,
             short: dict[str, int] | None = None) -> Finding | None:
    """The first finding on ``case``, or None when every check passes."""
    if case.bs == 0:
        return None                                # the host wrapper returns before launching
    base = prefilled(case, "sglang")
    first = session.run(make_launch(kernel, case, base, short=short))
    found = _sanitizer(first)
    if found:
        return found
    want = reference_outputs(case, base)
    for name in INPUTS:
        if first.buffers[name] != base.data[name]:
            return Finding("diverged", f"the kernel wrote to its input {name}", printed=first.printed)
    for name in OUTPUTS:
        diff = _first_difference(name, first.buffers[name], want[name], base.elem[name])
        if diff:
            what = "the guarded semantics" if malformed else "specbound.reference"
            return Finding("diverged", f"differs from {what}: {diff}", printed=first.printed)
    if malformed:
        return None
    second = session.run(make_launch(kernel, case, base, descending=True, short=short))
    found = _sanitizer(second)
    if found:
        return found
    for name in OUTPUTS:
        diff = _first_difference(name, second.buffers[name], first.buffers[name], base.elem[name])
        if diff:
            return Finding("order", f"threads in descending order give another result: {diff}")
    written: dict[str, set[int]] = {name: set() for name in OUTPUTS}
    for how in ("poison0", "poison1"):
        bufs = prefilled(case, how)
        out = session.run(make_launch(kernel, case, bufs, short=short))
        found = _sanitizer(out)
        if found:
            return found
        for name in OUTPUTS:
            written[name] |= _changed(bufs.data[name], out.buffers[name], bufs.elem[name])
    n = case.num_draft_tokens
    tokens = spec.token_cells(case.bs, n)
    expect = {"tree_mask": (spec.mask_kernel_cells(case.tree_mode, n, case.seq_lens), True),
              "positions": (tokens, True), "retrive_index": (tokens, True),
              "retrive_next_token": (tokens, False), "retrive_next_sibling": (tokens, False)}
    for name, (cells, exact) in expect.items():
        got = written[name]
        if (got != cells) if exact else not (got <= cells):
            extra, missing = sorted(got - cells)[:5], (sorted(cells - got)[:5] if exact else [])
            return Finding("footprint", f"{name}: writes outside the spec's footprint {extra}"
                           + (f", spec cells not written {missing}" if missing else ""))
    return None
