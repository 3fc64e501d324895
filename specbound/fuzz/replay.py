"""Mutant counterexamples of ``specbound prove``, replayed as concrete kernel launches.

For every refuted mutant that models a **sizing bug**, the counterexample's values
(``bs``, ``max_bs``, ``n``, ``C``, ``seq_len[b]``, ``P[b]``, ``num_seqs``, ``K``, ``D``,
``width`` ...) become a concrete batch, and:

* under the **mutant's sizing** (the allocation computed with the mutant's own formulas:
  ``Defs(**mutant.overrides)`` of the theorem, never a hand copy), the raw Triton kernel
  launched under the checked interpreter must raise ``OutOfBoundsAccess``;
* under the **spec's sizing** (``maybe_create_verify_mask`` + ``VerifyMask.buffer_for_batch``,
  which falls back to a per-batch allocation when ``fits`` is False; or
  ``spec.draft_kv_indices_buffer_width`` / the host capacity check for kv_indices), the
  same batch runs clean and its outputs equal the reference's.

Realizing a counterexample: the prover reports one request ``b`` (``seq_len[b]``,
``P[b]``); the ``b`` requests before it get ``P[b]`` spread as evenly as possible (each
at most ``C``), the requests after it repeat ``seq_len[b]``; the tree shape is the
smallest one holding ``n`` nodes (a ``K = 1`` chain of depth ``n - 1``).  Where the values
are not directly realizable (a request past ``C``, an ``n`` too large to allocate) the
replay says so in ``note`` and uses the smallest realizable batch, or is reported as
``infeasible`` with the reason.

Kernel-behaviour mutants (``MUT-SEARCH-PAST-ROW``, ``MUT-UNBOUNDED-WALK``) are replayed
on our own kernel with the change the kernel proofs refute planted in it (the one
registry, :mod:`specbound.proofs.symexec.mutants`, ``fuzz_theorem``); the first must read
out of bounds, the second (which cannot hang under the interpreter) must diverge from the
spec.  A plant that cannot be built (the kernel's text moved), a replay that raises, a
mutant launch that faults in any way other than an out-of-bounds access, or a listed
mutant without a replay is ``FAILED``, never passed.  The launches are run and their
faults classified by :mod:`specbound.replay` (``checked_launch``); each check's record is a
:class:`MutantCheck`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from specbound import kernels, spec  # first: sets TRITON_INTERPRET  # noqa: I001

import torch  # noqa: E402

from specbound import reference as ref  # noqa: E402
from specbound.proofs import registry  # noqa: E402
from specbound.proofs.symexec import mutants as kernel_mutants  # noqa: E402
from specbound.proofs.theorem import Defs  # noqa: E402
from specbound.replay import checked_launch  # noqa: E402
from specbound.spec import TreeMaskMode  # noqa: E402

from specbound.reference import samples  # noqa: E402

from . import launch  # noqa: E402
from .runner import describe

FULL, QLEN = TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY

# Mutants that model a sizing bug (or a precondition a sizing relies on), by theorem.
SIZING_MUTANTS = {
    ("VM-QLEN-IN-BOUNDS", "MUT-FITS-OFF-BY-ONE"),
    ("VM-FULL-IN-BOUNDS", "MUT-33127-FULL-ALWAYS-FITS"),
    ("VM-FULL-IN-BOUNDS", "MUT-29450-MISSING-DRAFT-TERM"),
    ("VM-FULL-IN-BOUNDS", "MUT-FITS-OFF-BY-ONE"),
    ("VM-FITS-TIGHT", "MUT-33127-FULL-ALWAYS-FITS"),
    ("VM-EXACT-EXTENT", "MUT-29450-MISSING-DRAFT-TERM"),
    ("VM-FALLBACK-COVERS", "MUT-FALLBACK-COMPACT-SIZE"),
    ("VM-INT32-SAFE", "MUT-INT32-OVERFLOW"),
    ("KV-CAPACITY", "MUT-27338-MISSING-TOPK"),
    ("KV-CAPACITY", "MUT-NO-DRAFT-ROOM"),
    ("KV-CUDA-GRAPH-COVERS", "MUT-27338-MISSING-TOPK"),
    ("KV-STEPS-MONOTONE", "MUT-CHECK-STEPS-MINUS-ONE"),
    ("KV-INT32-SAFE", "MUT-INT32-OVERFLOW"),
    # and the kernel mutants of the registry that model a spec mutant of the same id
    *((theorem, m.id) for theorem, ms in kernel_mutants.fuzzed().items() for m in ms),
}


@dataclass
class MutantCheck:
    """One refuted spec mutant checked by two replays of its counterexample: the launch into
    the mutant's sizing must overrun (``mutant_*``), the launch into the spec's must run
    clean and match the reference, or be refused by the host check (``spec_*``)."""

    theorem: str
    mutant: str
    counterexample: dict
    status: str = "pending"         # "reproduced" | "diverged" | "FAILED" | "infeasible": only the int32
                                    # mutants (>= 2^31 cells) and, on a GPU, every replay (no checked interpreter)
    batch: dict = field(default_factory=dict)   # the concrete launch
    mutant_sizing: str = ""         # what the mutant allocated / the kernel variant
    mutant_outcome: str = ""        # the OutOfBoundsAccess (or divergence) seen
    spec_sizing: str = ""
    spec_outcome: str = ""
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("reproduced", "diverged", "infeasible")

    def line(self) -> str:
        return (f"{self.theorem:22s} {self.mutant:30s} {self.status:11s} {self.batch} | mutant: "
                f"{self.mutant_sizing} -> {self.mutant_outcome} | spec: {self.spec_sizing} -> "
                f"{self.spec_outcome}{' | ' + self.note if self.note else ''}")


# --- counterexamples ------------------------------------------------------------------------

_CACHE: dict = {}


def counterexamples(given=None) -> list[tuple[str, object, dict]]:
    """``(theorem id, Mutant, counterexample)`` for every refuted sizing mutant of
    ``registry.run_all()`` (computed once per process), or of ``given``: the
    :func:`sizing_counterexamples` of a run that proved every spec theorem already (``specbound
    verify``'s proofs), so that they are not proved again."""
    if given is None:
        if "all" not in _CACHE:
            _CACHE["all"] = counterexamples(sizing_counterexamples(registry.run_all()[0]))
        return _CACHE["all"]
    mutants = {(th.id, m.id): m for th in registry.theorems() for m in th.mutants}
    return [(tid, mutants[(tid, mid)], cx) for tid, mid, cx in given]


def sizing_counterexamples(results) -> list[tuple[str, str, dict]]:
    """``(theorem id, mutant id, counterexample)`` of every refuted sizing mutant among the
    spec theorems' ``results`` (plain values: they cross to a worker process)."""
    return [(r.id, m.id, dict(m.counterexample)) for r in results for m in r.mutants
            if (r.id, m.id) in SIZING_MUTANTS and m.status == "refuted"]


def realize_seq_lens(bs: int, b: int, seq_len_b: int, prefix_b: int, max_len: int) -> tuple[list[int], str]:
    """A batch of ``bs`` lengths in ``[0, max_len]`` with ``seq_len[b]`` and ``P[b]`` as
    given: ``P[b]`` spread evenly over the first ``b`` requests, ``seq_len[b]`` repeated
    after ``b``.  Values that cannot be realized are clamped, and the note says so."""
    note = []
    s_b = min(max(seq_len_b, 0), max_len)
    if s_b != seq_len_b:
        note.append(f"seq_len[b]={seq_len_b} clamped to {s_b}")
    if b <= 0:
        if prefix_b:
            note.append(f"P[0]={prefix_b} must be 0")
        head = []
    else:
        p = min(max(prefix_b, 0), b * max_len)
        if p != prefix_b:
            note.append(f"P[b]={prefix_b} clamped to {p} (each request <= C)")
        q, r = divmod(p, b)
        head = [q + 1] * r + [q] * (b - r)
    lens = (head + [s_b] * max(bs - len(head), 0))[:bs]
    return lens, "; ".join(note)


def _tree(n: int, bs: int):
    """Smallest shape holding n nodes (a K = 1 chain) and bs copies of its valid tree."""
    k, d = 1, max(1, n - 1)
    sel, pl = samples.canonical_tree(k, d, n)
    return k, d, torch.tensor([pl] * bs, dtype=torch.int64).reshape(bs, spec.parent_list_width(k, d)), \
        torch.tensor([sel] * bs, dtype=torch.int64).reshape(bs, n - 1)


def _fault(fn) -> str:
    """Run ``fn`` (a raw launch) under the checked interpreter: '' when it ran clean, else
    the fault as ``"<verdict>: <detail>"`` (:mod:`specbound.replay`'s verdicts)."""
    fault = checked_launch(fn)
    return "" if fault is None else f"{fault.verdict}: {fault.detail}"


# --- verify mask replays -------------------------------------------------------------------------

def _mask_replay(rp: MutantCheck, mutant, mode: TreeMaskMode, sizing: str) -> None:
    cx = rp.counterexample
    n, bs = cx["n"], cx["bs"]
    # VM-EXACT-EXTENT has no context length: any C holding the reported request will do
    c = cx.get("C") or max(cx.get("seq_len[bs-1]", 0), cx.get("P[bs-1]", 0), 1)
    max_bs = cx.get("max_bs", 0)
    if "seq_len[b]" in cx:
        lens, note = realize_seq_lens(bs, cx["b"], cx["seq_len[b]"], cx["P[b]"], c)
    elif "seq_len[bs-1]" in cx:
        lens, note = realize_seq_lens(bs, bs - 1, cx["seq_len[bs-1]"], cx["P[bs-1]"], c)
    else:   # VM-FITS-TIGHT: a worst-case batch, every request at the context length
        lens, note = [c] * bs, ""
    rp.note = note
    k, d, pl, sel = _tree(n, bs)
    seq = torch.tensor(lens, dtype=torch.int64)
    total = sum(lens)
    rp.batch = {"mode": mode.name, "bs": bs, "max_bs": max_bs, "n": n, "topk": k, "depth": d, "C": c,
                "seq_lens": lens}
    dtype = ref.mask_dtype(mode, n)
    defs = Defs(**mutant.overrides)
    if sizing == "capture":
        if defs.fits(bs, max_bs):
            numel = defs.tree_mask_numel(mode, max_bs, n, c)
            rp.mutant_sizing = f"fits({bs},{max_bs}) -> reuse tree_mask_numel = {numel}"
        else:
            numel = defs.fallback_numel(mode, bs, n, total)
            rp.mutant_sizing = f"fits({bs},{max_bs}) False -> fallback_numel = {numel}"
    elif sizing == "batch":
        numel = defs.mask_batch_numel(mode, bs, n, total)
        rp.mutant_sizing = f"mask_batch_numel = {numel}"
    else:
        numel = defs.fallback_numel(mode, bs, n, total)
        rp.mutant_sizing = f"fallback_numel = {numel}"
    kw = dict(topk=k, depth=d, num_draft_tokens=n, mode=mode)
    rp.mutant_outcome = _fault(lambda: launch.launch_tree_raw(pl, sel, seq, torch.zeros(numel, dtype=dtype), **kw))

    # the spec's sizing: capture at max_bs, reuse when fits, else the per-batch fallback
    if sizing == "capture":
        vm = ref.maybe_create_verify_mask(is_draft_runner=False, skip_prefill=False, max_bs=max_bs,
                                          num_draft_tokens=n, max_context_len=c, read_mode=mode)
        buf = vm.buffer_for_batch(bs, total)
        rp.spec_sizing = (f"VerifyMask(max_bs={max_bs}, {vm.buffer.numel()} cells): "
                          + ("reuse" if vm.fits(bs) else f"fallback {buf.numel()}"))
    elif sizing == "batch":
        buf = torch.zeros(spec.mask_batch_numel(mode, bs, n, total), dtype=dtype)
        rp.spec_sizing = f"mask_batch_numel = {buf.numel()}"
    else:
        buf = torch.zeros(spec.fallback_numel(mode, bs, n, total), dtype=dtype)
        rp.spec_sizing = f"fallback_numel = {buf.numel()}"
    box = {}
    err = _fault(lambda: box.setdefault("out", launch.launch_tree_raw(pl, sel, seq, buf, **kw)))
    if err:
        rp.spec_outcome = err
        return
    want = ref.build_tree(pl, sel, seq, **kw)
    extent = spec.mask_batch_numel(mode, bs, n, total)
    same = torch.equal(buf[:extent], want.tree_mask) and torch.equal(box["out"]["positions"], want.positions)
    rp.spec_outcome = "clean, outputs == reference" if same else "clean but outputs differ from the reference"


# --- kv replays --------------------------------------------------------------------------------------

def _kv_batch(num_seqs: int, k: int, steps: int, lens: list[int]):
    span = max([spec.kv_req_to_token_span(s, k, steps, 1) for s in lens] or [1])
    return (torch.arange(num_seqs, dtype=torch.int64), samples.req_to_token(num_seqs, span),
            torch.tensor(lens, dtype=torch.int64))


def _kv_replay(rp: MutantCheck, mutant, sizing: str) -> None:
    cx = rp.counterexample
    ns, k, steps = cx["num_seqs"], cx["K"], cx["D"]
    c = cx.get("C", 0)
    total = cx.get("S", 0)
    first = cx.get("seq_len[0]")
    if first is not None and ns:
        # request 0 as reported, the rest of S spread over the others
        rest, note = realize_seq_lens(ns - 1, ns - 1, 0, total - first, max(c - steps, first, 1))
        lens = [first] + rest
    else:
        q, r = divmod(total, ns) if ns else (0, 0)
        lens, note = [q + 1] * r + [q] * (ns - r), ""
    rp.note = note
    pool, r2t, seq = _kv_batch(ns, k, steps, lens)
    s = sum(lens)
    used = spec.draft_kv_indices_used_len(s, k, spec.draft_branches(ns, k), steps)
    rp.batch = {"num_seqs": ns, "topk": k, "num_steps": steps, "C": c, "seq_lens": lens, "used_len": used}
    defs = Defs(**mutant.overrides)
    if sizing == "width":
        width = defs.draft_kv_indices_buffer_width(ns, k, c)
        rp.mutant_sizing = f"draft_kv_indices_buffer_width({ns},{k},{c}) = {width}"
        spec_width = spec.draft_kv_indices_buffer_width(ns, k, c)
    elif sizing == "graph":
        mb = cx["max_bs"]
        width = defs.draft_kv_indices_buffer_width(mb, k, c)
        rp.mutant_sizing = f"CUDA-graph row draft_kv_indices_buffer_width(max_bs={mb},{k},{c}) = {width}"
        spec_width = spec.draft_kv_indices_buffer_width(mb, k, c)
    elif sizing == "check":
        # the smallest row the mutant's host check accepts (the spec's check must refuse it)
        width = next(w for w in range(used + 1) if defs.draft_kv_capacity_ok(s, k, ns, steps, w))
        if spec.draft_kv_capacity_ok(s, k, ns, steps, width):
            rp.note += " the spec's check accepts this width too"
        rp.mutant_sizing = f"smallest width its capacity check accepts = {width}"
        spec_width = next(w for w in range(used + 1) if spec.draft_kv_capacity_ok(s, k, ns, steps, w))
    else:   # "room": no host check at all; the row sized for C
        width = spec.draft_kv_indices_buffer_width(ns, k, c)
        rp.mutant_sizing = f"width({ns},{k},{c}) = {width}, launched without the capacity check"
        spec_width = width
    ind = torch.full((steps, width), -1, dtype=torch.int64)
    ptr = torch.full((steps, spec.kv_indptr_row_len(ns, k)), -1, dtype=torch.int64)
    rp.mutant_outcome = _fault(lambda: launch.launch_kv_raw(pool, r2t, seq, ind, ptr, topk=k, num_steps=steps))

    rp.spec_sizing = f"width = {spec_width}"
    if not spec.draft_kv_capacity_ok(s, k, ns, steps, spec_width):
        try:
            ref.draft_decode_kv_indices(pool, r2t, seq, topk=k, num_steps=steps,
                                        kv_indices=torch.full((steps, spec_width), -1, dtype=torch.int64))
            rp.spec_outcome = "host check passed a batch that does not fit"
        except spec.SpecArgumentError as exc:
            rp.spec_outcome = f"refused before launch (host capacity check): {exc}"[:160]
        return
    ind = torch.full((steps, spec_width), -1, dtype=torch.int64)
    ptr = torch.full((steps, spec.kv_indptr_row_len(ns, k)), -1, dtype=torch.int64)
    err = _fault(lambda: launch.launch_kv_raw(pool, r2t, seq, ind, ptr, topk=k, num_steps=steps))
    if err:
        rp.spec_outcome = err
        return
    want = ref.draft_decode_kv_indices(pool, r2t, seq, topk=k, num_steps=steps,
                                       kv_indices=torch.full((steps, spec_width), -1, dtype=torch.int64))
    same = torch.equal(ind, want[0]) and torch.equal(ptr, want[1])
    rp.spec_outcome = "clean, outputs == reference" if same else "clean but outputs differ from the reference"


# --- kernel-variant replays ---------------------------------------------------------------------------

def _search_replay(rp: MutantCheck, mutant) -> None:
    cx = rp.counterexample
    n, k, d = cx["n"], cx["K"], cx["D"]
    sel_row, pl_row = samples.canonical_tree(k, d, n)
    bs = 2       # the last request's row ends the tensor: one entry past it is outside selected_index
    pl = torch.tensor([pl_row] * bs, dtype=torch.int64).reshape(bs, spec.parent_list_width(k, d))
    sel = torch.tensor([sel_row] * bs, dtype=torch.int64).reshape(bs, n - 1)
    seq = torch.tensor([3, 4], dtype=torch.int64)
    kw = dict(topk=k, depth=d, num_draft_tokens=n, mode=QLEN)
    rp.batch = {"bs": bs, "n": n, "topk": k, "depth": d, "seq_lens": seq.tolist(), "selected_index": sel.tolist()}
    rp.note = "bs = 2 (the counterexample's single row, twice): the last row's scan reads past the tensor"
    planted = kernel_mutants.get(mutant.id).plant
    variant = planted.kernel()
    rp.mutant_sizing = f"planted {planted.describe()}"
    mask = torch.zeros(spec.mask_batch_numel(QLEN, bs, n, 7), dtype=torch.bool)
    rp.mutant_outcome = _fault(lambda: launch.launch_tree_raw(pl, sel, seq, mask, kernel=variant, **kw))
    rp.spec_sizing = "build_tree_kernel (scans spec.parent_search_range = n - 1 entries)"
    mask2 = torch.zeros_like(mask)
    box = {}
    err = _fault(lambda: box.setdefault("o", launch.launch_tree_raw(pl, sel, seq, mask2, **kw)))
    want = ref.build_tree(pl, sel, seq, **kw)
    rp.spec_outcome = err if err else (
        "clean, outputs == reference" if torch.equal(mask2, want.tree_mask) else "clean, outputs differ")


def _walk_replay(rp: MutantCheck, mutant) -> None:
    cx = rp.counterexample
    n, k, d = cx["n"], cx["K"], cx["D"]
    # the counterexample's self-loop: node 1's entry names a parent_list slot holding its own entry
    sel_value = cx["sel[k]"]
    slot = spec.parent_slot(sel_value, k)
    sel_row = [sel_value] + list(range(sel_value + 1, sel_value + n - 1))
    pl_row = [-1] * spec.parent_list_width(k, d)
    if not 0 < slot < len(pl_row):
        rp.status, rp.note = "FAILED", f"slot {slot} of sel {sel_value} is not a parent_list lookup: nothing replayed"
        return
    pl_row[slot] = sel_value
    pl = torch.tensor([pl_row], dtype=torch.int64)
    sel = torch.tensor([sel_row], dtype=torch.int64)
    seq = torch.tensor([5], dtype=torch.int64)
    kw = dict(topk=k, depth=d, num_draft_tokens=n, mode=QLEN)
    rp.batch = {"bs": 1, "n": n, "topk": k, "depth": d, "selected_index": sel_row, "parent_list": pl_row}
    want = ref.build_tree(pl, sel, seq, **kw)
    planted = kernel_mutants.get(mutant.id).plant
    variant = planted.kernel()
    rp.mutant_sizing = f"planted {planted.describe()} (walk not stopped after D steps)"
    box = {}
    err = _fault(lambda: box.setdefault("o", launch.launch_tree_raw(
        pl, sel, seq, torch.zeros_like(want.tree_mask), kernel=variant, **kw)))
    got = box.get("o", {}).get("positions")
    rp.mutant_outcome = (err or f"positions {got.tolist()} vs spec {want.positions.tolist()}")
    rp.note = ("a while(true) walk hangs on this self-loop on a GPU; the interpreter runs a finite "
               "variant, so the replay shows the divergence (depth past D) instead of an overrun")
    box2 = {}
    err2 = _fault(lambda: box2.setdefault("o", launch.launch_tree_raw(
        pl, sel, seq, torch.zeros_like(want.tree_mask), **kw)))
    rp.spec_sizing = "build_tree_kernel (walk bounded by spec.walk_max_steps = D)"
    rp.spec_outcome = err2 or (
        "clean, outputs == reference" if torch.equal(box2["o"]["positions"], want.positions) else "differs")
    rp._diverged = (got is not None and not torch.equal(got, want.positions))  # type: ignore[attr-defined]


_INT32_REASON = ("needs an allocation of >= 2^31 cells (the counterexample has {what}); and every offset in "
                 "specbound.kernels is int64 (the kernels' own tests check a 2^31/2^40 prefix sum), so no "
                 "kernel here computes the int32 offsets the mutant models")


def replay_one(theorem_id: str, mutant, cx: dict) -> MutantCheck:
    rp = MutantCheck(theorem_id, mutant.id, cx)
    try:
        if mutant.id == "MUT-INT32-OVERFLOW":
            what = f"n = {cx.get('n')}" if theorem_id.startswith("VM") else f"width = {cx.get('width')}"
            rp.status, rp.note = "infeasible", _INT32_REASON.format(what=what)
            return rp
        if not kernels.INTERPRETED:
            rp.status, rp.note = "infeasible", "kernels are compiled: no checked interpreter on this machine"
            return rp
        if theorem_id == "VM-QLEN-IN-BOUNDS":
            _mask_replay(rp, mutant, QLEN, "capture")
        elif theorem_id in ("VM-FULL-IN-BOUNDS", "VM-FITS-TIGHT"):
            _mask_replay(rp, mutant, FULL, "capture")
        elif theorem_id == "VM-EXACT-EXTENT":
            _mask_replay(rp, mutant, FULL, "batch")
        elif theorem_id == "VM-FALLBACK-COVERS":
            _mask_replay(rp, mutant, FULL, "fallback")
        elif theorem_id == "KV-CAPACITY":
            _kv_replay(rp, mutant, "room" if mutant.id == "MUT-NO-DRAFT-ROOM" else "width")
        elif theorem_id == "KV-CUDA-GRAPH-COVERS":
            _kv_replay(rp, mutant, "graph")
        elif theorem_id == "KV-STEPS-MONOTONE":
            _kv_replay(rp, mutant, "check")
        elif theorem_id == "VM-WALK-CONFINED":
            _search_replay(rp, mutant)
        elif theorem_id == "VM-WALK-BOUNDED":
            _walk_replay(rp, mutant)
            if rp.status == "pending":
                ok_spec = rp.spec_outcome.startswith("clean, outputs == reference")
                rp.status = "diverged" if getattr(rp, "_diverged", False) and ok_spec else "FAILED"
            return rp
        else:
            # a listed sizing mutant nobody replays would pass silently: a failure
            rp.status, rp.note = "FAILED", "no replay for this theorem"
            return rp
    except kernel_mutants.PlantFailed as exc:
        # the kernel changed so the historical bug can no longer be planted: the replay
        # checks nothing, which must not read as a pass
        rp.status, rp.note = "FAILED", f"kernel variant cannot be built: {exc}"
        return rp
    except Exception as exc:
        rp.status, rp.note = "FAILED", f"the replay raised {describe(exc)}"
        return rp
    reproduced = rp.mutant_outcome.startswith("oob: ")   # an overrun, not any other fault
    clean = rp.spec_outcome.startswith("clean, outputs == reference") or rp.spec_outcome.startswith("refused")
    rp.status = "reproduced" if reproduced and clean else "FAILED"
    if not reproduced:
        rp.mutant_outcome = rp.mutant_outcome or "ran clean: no overrun"
    return rp


def replay_all(select: Callable[[str, str], bool] | None = None, given=None) -> list[MutantCheck]:
    """Replay every sizing-mutant counterexample (optionally filtered by (theorem, mutant));
    ``given``: as :func:`counterexamples` takes it."""
    out = []
    for theorem_id, mutant, cx in counterexamples(given):
        if select is None or select(theorem_id, mutant.id):
            out.append(replay_one(theorem_id, mutant, cx))
    return out
