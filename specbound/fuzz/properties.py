"""Differential properties: spec vs reference vs Triton kernels, on one case at a time.

Each ``check_*`` function takes a :class:`~specbound.fuzz.strategies.TreeCase` or
:class:`~specbound.fuzz.strategies.KvCase` and raises :class:`PropertyFailure` (an
``AssertionError``) with a precise message when the property does not hold.  The pytest
tests (``tests/test_fuzz_*.py``) and ``specbound fuzz`` both run them; :data:`PROPERTIES`
lists them with their strategy and cost class.

* **footprint**: the cells an implementation writes equal the spec's footprint exactly
  (``spec.mask_kernel_cells | spec.mask_fill_cells``, ``spec.token_cells``,
  ``spec.kv_indices_cells``, ``spec.kv_indptr_cells``).  Reference: sentinel diff on
  padded buffers, run twice with complementary sentinels so a write of the sentinel
  value is still seen.  Triton: the checked interpreter's recorded footprint on
  exact-size buffers (which also makes any out-of-bounds access a failure).
* **semantics**: every output equals what the spec says it is, computed here straight
  from the spec functions (mask row = ``{0} | spec.bounded_walk``, positions =
  ``seq_len + len(walk)``, links = ``spec.links(spec.parents(...))``, kv segments from
  ``spec.kv_segment_start`` / ``kv_extension_read``, ``kv_indptr`` from
  ``spec.kv_indptr_entry``).  For defect-free trees the walk is also checked against
  the ancestor relation computed independently from the parent function.
* **differential**: reference and kernel outputs are identical bit for bit (dtype,
  shape, every cell, untouched cells of pre-filled caller buffers included), on valid
  and malformed trees, and ``strict=True`` raises the same error in both.
* **validation** (:mod:`.refusals`, registered here): at every boundary the validation
  enforces, the reference and the kernels accept exactly when the spec's conditions hold
  and otherwise refuse alike, writing nothing (``tree.validation``, ``kv.validation``,
  ``verify_mask.reuse``).

Every property first tries explicit boundary cases (:mod:`.examples`).

Every Triton launch here runs inside ``checked_interpreter``: an out-of-bounds access
raises and fails the property.  When the kernels are compiled (CUDA), the Triton
properties use the guard-band footprint instead (sentinel diff around the buffers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from specbound import kernels, spec
from specbound import reference as ref
from specbound.kernels import OutOfBoundsAccess, checked_interpreter
from specbound.spec import SpecArgumentError

from . import calls, examples, refusals
from .calls import _signed, seed_of as _seed
from .expected import PropertyFailure  # noqa: F401  (the failure every check raises)
from .expected import TOKEN_OUTPUTS, expected_kv, expected_tree, spec_mask_dtype, spec_tree_footprint
from .expected import fail as _fail
from .expected import same as _same
from .strategies import KvCase, TreeCase, kv_cases, tree_cases

PAD = 16                     # padding cells/rows around reference outputs (sentinel diff)
_KERNEL_ARG = {"positions": "positions_ptr", "retrive_index": "retrive_index_ptr",
               "retrive_next_token": "next_token_ptr", "retrive_next_sibling": "next_sibling_ptr"}


def _same_set(name: str, got: set[int], want: set[int]) -> None:
    if got != want:
        extra, missing = sorted(got - want), sorted(want - got)
        _fail(f"{name}: footprint differs from the spec: {len(extra)} extra cell(s) {extra[:8]}, "
              f"{len(missing)} missing cell(s) {missing[:8]}")


def _checked_run(fn, *args, **kwargs):
    """Run an interpreted launch under the checked interpreter; returns (result, session)."""
    if not kernels.INTERPRETED:
        return fn(*args, **kwargs), None
    with checked_interpreter(record_footprint=True) as session:
        try:
            out = fn(*args, **kwargs)
        except OutOfBoundsAccess as exc:
            _fail(f"out-of-bounds access: {exc}")
    return out, session


# --- tree: running the implementations ----------------------------------------------------------

def _impl(target: str):
    if target == "reference":
        return ref.build_tree, ref.draft_decode_kv_indices
    if target == "triton":
        return kernels.build_tree, kernels.draft_decode_kv_indices
    raise ValueError(f"target must be 'reference' or 'triton', got {target!r}")


def run_tree(case: TreeCase, target: str, **buffers):
    """Build ``case`` with ``target``; Triton launches run checked.  Returns (outputs dict, session)."""
    build = _impl(target)[0]
    pl, sel, seq = case.tensors()
    if target == "triton":
        out, session = _checked_run(build, pl, sel, seq, **case.kwargs(), **buffers)
    else:
        out, session = build(pl, sel, seq, **case.kwargs(), **buffers), None
    return out._asdict(), session


def _tree_buffers(case: TreeCase, sentinel: str, pad: int = PAD) -> dict[str, torch.Tensor]:
    """Caller buffers with ``pad`` extra cells (rows) filled with a sentinel ("lo" / "hi")."""
    n = case.num_draft_tokens
    mode = case.tree_mode
    dtype = spec_mask_dtype(mode, n)
    numel = spec.mask_batch_numel(mode, case.bs, n, sum(case.seq_lens)) + pad
    mask = torch.zeros(numel, dtype=dtype)
    if sentinel == "hi":
        _signed(mask).fill_(True if dtype == torch.bool else -1)
    value = -7777 if sentinel == "lo" else -8888
    rows = case.bs + max(1, pad // max(n, 1))
    return {"tree_mask": mask, "positions": torch.full((rows * n,), value, dtype=torch.int64),
            **{name: torch.full((rows, n), value, dtype=torch.int64) for name in TOKEN_OUTPUTS[1:]}}


def _changed(before: torch.Tensor, after: torch.Tensor) -> set[int]:
    return set((_signed(before).reshape(-1) != _signed(after).reshape(-1)).nonzero().reshape(-1).tolist())


def reference_tree_footprint(case: TreeCase) -> dict[str, set[int]]:
    """Cells the reference writes, by sentinel diff (two runs, complementary sentinels)."""
    written: dict[str, set[int]] = {}
    for sentinel in ("lo", "hi"):
        bufs = _tree_buffers(case, sentinel)
        before = {name: t.clone() for name, t in bufs.items()}
        run_tree(case, "reference", **bufs)
        for name, t in bufs.items():
            written.setdefault(name, set()).update(_changed(before[name], t))
    return written


def check_tree_footprint(case: TreeCase, target: str) -> None:
    want = spec_tree_footprint(case)
    if target == "reference":
        got = reference_tree_footprint(case)
        _same_set("tree_mask (reference)", got["tree_mask"], want["tree_mask.kernel"] | want["tree_mask.fill"])
        for name in TOKEN_OUTPUTS:
            _same_set(f"{name} (reference)", got[name], want[name])
        return
    _, session = run_tree(case, "triton")
    if session is None:
        return check_tree_footprint_guarded(case)
    kern = session.written("build_tree_kernel")
    fill = session.written("fill_prefix_kernel")
    outputs = {"tree_mask_ptr", *_KERNEL_ARG.values()}
    if set(kern) - outputs or set(fill) - {"tree_mask_ptr"}:
        _fail(f"kernel wrote to an input: {sorted(set(kern) - outputs)} {sorted(set(fill) - {'tree_mask_ptr'})}")
    _same_set("tree_mask (build_tree_kernel)", kern.get("tree_mask_ptr", set()), want["tree_mask.kernel"])
    _same_set("tree_mask (fill_prefix_kernel)", fill.get("tree_mask_ptr", set()), want["tree_mask.fill"])
    for name, arg in _KERNEL_ARG.items():
        _same_set(f"{name} (build_tree_kernel)", kern.get(arg, set()), want[name])


def check_tree_footprint_guarded(case: TreeCase) -> None:
    """Compiled kernels: sentinel diff on padded buffers, as for the reference."""
    want = spec_tree_footprint(case)
    written: dict[str, set[int]] = {}
    for sentinel in ("lo", "hi"):
        bufs = {k: v.cuda() for k, v in _tree_buffers(case, sentinel).items()}
        before = {name: t.clone() for name, t in bufs.items()}
        pl, sel, seq = (x.cuda() for x in case.tensors())
        kernels.build_tree(pl, sel, seq, **case.kwargs(), **bufs)
        for name, t in bufs.items():
            written.setdefault(name, set()).update(_changed(before[name].cpu(), t.cpu()))
    _same_set("tree_mask (compiled)", written["tree_mask"], want["tree_mask.kernel"] | want["tree_mask.fill"])
    for name in TOKEN_OUTPUTS:
        _same_set(f"{name} (compiled)", written[name], want[name])


def check_tree_semantics(case: TreeCase, target: str) -> None:
    want = expected_tree(case)
    got, _ = run_tree(case, target)
    for name, value in want.items():
        _same(f"{name} ({target} vs spec)", got[name].cpu(), value)


def _junk_tree_buffers(case: TreeCase) -> dict[str, torch.Tensor]:
    """Caller buffers pre-filled with the same pseudo-random junk for both implementations."""
    g = torch.Generator().manual_seed(_seed(case))
    bufs = _tree_buffers(case, "lo", pad=3)
    for name, t in bufs.items():
        view = _signed(t)
        if view.dtype == torch.bool:
            view.copy_(torch.randint(0, 2, view.shape, generator=g).bool())
        else:
            view.copy_(torch.randint(-100, 100, view.shape, generator=g).to(view.dtype))
    return bufs


def check_tree_differential(case: TreeCase) -> None:
    for junk in (False, True):
        outs = {}
        for target in ("reference", "triton"):
            bufs = _junk_tree_buffers(case) if junk else {}
            outs[target], _ = run_tree(case, target, **bufs)
        for name in outs["reference"]:
            _same(f"{name} (triton vs reference{', junk-filled buffers' if junk else ''})",
                  outs["triton"][name].cpu(), outs["reference"][name])
    # strict mode: the same verdict, the same error
    verdicts = []
    for target in ("reference", "triton"):
        pl, sel, seq = case.tensors()
        try:
            _impl(target)[0](pl, sel, seq, **case.kwargs(), strict=True)
            verdicts.append("ok")
        except ref.MalformedTreeError as exc:
            verdicts.append(f"{type(exc).__name__}: {exc}")
    if verdicts[0] != verdicts[1]:
        _fail(f"strict=True verdicts differ: reference {verdicts[0]!r}, triton {verdicts[1]!r}")
    if not case.defects and verdicts[0] != "ok":
        _fail(f"a valid EAGLE tree was rejected by strict=True: {verdicts[0]}")


def run_kv(case: KvCase, target: str, kv_indices=None, kv_indptr=None):
    """Build ``case`` into the given buffers (default: ``case.buffers()``); returns
    ((kv_indices, kv_indptr), session)."""
    if kv_indices is None:
        kv_indices, kv_indptr = case.buffers()
    build = _impl(target)[1]
    pool, r2t, seq = case.tensors()
    kw = dict(**case.kwargs(), kv_indices=kv_indices, kv_indptr=kv_indptr)
    if target == "triton":
        return _checked_run(build, pool, r2t, seq, **kw)
    return build(pool, r2t, seq, **kw), None


def check_kv_footprint(case: KvCase, target: str) -> None:
    k, steps = case.topk, case.num_steps
    if target == "reference":
        written = {"kv_indices": set(), "kv_indptr": set()}
        for sentinel in (-7777, -8888):
            ind, ptr = case.buffers(sentinel)
            ind = torch.cat([ind, torch.full((steps, PAD), sentinel, dtype=ind.dtype)], dim=1)
            ptr = torch.cat([ptr, torch.full((steps, PAD), sentinel, dtype=ptr.dtype)], dim=1)
            b_ind, b_ptr = ind.clone(), ptr.clone()
            run_kv(case, "reference", ind, ptr)
            written["kv_indices"] |= _changed(b_ind, ind)
            written["kv_indptr"] |= _changed(b_ptr, ptr)
        _same_set("kv_indices (reference)", written["kv_indices"],
                  spec.kv_indices_cells(case.seq_lens, k, steps, ind.shape[1]))
        _same_set("kv_indptr (reference)", written["kv_indptr"],
                  spec.kv_indptr_cells(case.num_seqs, k, steps, ptr.shape[1]))
        return
    (ind, ptr), session = run_kv(case, "triton")
    if session is None:
        return
    got = session.written("draft_kv_kernel")
    if set(got) - {"kv_indices_ptr", "kv_indptr_ptr"}:
        _fail(f"draft_kv_kernel wrote to an input: {sorted(set(got) - {'kv_indices_ptr', 'kv_indptr_ptr'})}")
    _same_set("kv_indices (draft_kv_kernel)", got.get("kv_indices_ptr", set()),
              spec.kv_indices_cells(case.seq_lens, k, steps, ind.shape[1]))
    if case.num_seqs:   # with no request the wrapper writes the zero entries on the host: no launch
        _same_set("kv_indptr (draft_kv_kernel)", got.get("kv_indptr_ptr", set()),
                  spec.kv_indptr_cells(case.num_seqs, k, steps, ptr.shape[1]))


def check_kv_semantics(case: KvCase, target: str) -> None:
    want_ind, want_ptr = expected_kv(case)
    (ind, ptr), _ = run_kv(case, target)
    _same(f"kv_indices ({target} vs spec)", ind.cpu(), want_ind)
    _same(f"kv_indptr ({target} vs spec)", ptr.cpu(), want_ptr)


def check_kv_differential(case: KvCase) -> None:
    g = torch.Generator().manual_seed(_seed(case))
    outs = []
    junk = [torch.randint(-100, 100, t.shape, generator=g).to(t.dtype) for t in case.buffers()]
    for target in ("reference", "triton"):
        (ind, ptr), _ = run_kv(case, target, junk[0].clone(), junk[1].clone())
        outs.append((ind.cpu(), ptr.cpu()))
    _same("kv_indices (triton vs reference, junk-filled buffers)", outs[1][0], outs[0][0])
    _same("kv_indptr (triton vs reference, junk-filled buffers)", outs[1][1], outs[0][1])


# --- the registry ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Property:
    """A named property: ``check(case)`` over cases drawn from ``strategy()``.

    ``target``: which implementation it exercises ("reference", "triton", or "all" for the
    differential ones that need both); ``cost``: the budget class (see profiles.budget);
    ``examples()``: explicit cases tried before any drawn one (:mod:`.examples`)."""

    name: str
    target: str
    cost: str
    strategy: Callable
    check: Callable
    doc: str
    examples: Callable = field(default=lambda: [], compare=False)


def _p(name, target, cost, strategy, check, doc, examples=None):
    return Property(name, target, cost, strategy, check, doc, examples or (lambda: []))


def _call_examples(name):
    return lambda: getattr(examples, name)()


PROPERTIES: tuple[Property, ...] = (
    _p("tree.footprint.reference", "reference", "cheap", tree_cases,
       lambda c: check_tree_footprint(c, "reference"), "reference writes exactly the spec's cells",
       examples.tree_boundary_cases),
    _p("tree.semantics.reference", "reference", "cheap", tree_cases,
       lambda c: check_tree_semantics(c, "reference"), "reference outputs equal the spec's semantics",
       examples.tree_boundary_cases),
    _p("kv.footprint.reference", "reference", "cheap", kv_cases,
       lambda c: check_kv_footprint(c, "reference"), "reference writes exactly the spec's kv cells",
       examples.kv_boundary_cases),
    _p("kv.semantics.reference", "reference", "cheap", kv_cases,
       lambda c: check_kv_semantics(c, "reference"), "reference kv outputs equal the spec's",
       examples.kv_boundary_cases),
    _p("verify_mask.reuse", "reference", "cheap", calls.verify_mask_calls,
       lambda c: refusals.check_verify_mask_call(c),
       "VerifyMask reuses its buffer exactly when the spec's sizes allow; hands out exactly the spec's cells",
       _call_examples("verify_mask_examples")),
    _p("tree.footprint.triton", "triton", "kernel", tree_cases,
       lambda c: check_tree_footprint(c, "triton"), "kernel writes exactly the spec's cells, never OOB",
       examples.tree_boundary_cases),
    _p("tree.semantics.triton", "triton", "kernel", tree_cases,
       lambda c: check_tree_semantics(c, "triton"), "kernel outputs equal the spec's semantics",
       examples.tree_boundary_cases),
    _p("tree.differential", "all", "kernel", tree_cases, check_tree_differential,
       "kernel == reference bit for bit (valid and malformed trees, strict verdicts)", examples.tree_boundary_cases),
    _p("tree.validation", "all", "kernel", calls.tree_calls, lambda c: refusals.check_tree_call(c),
       "at each validation boundary: accepted exactly when the spec's conditions hold, else the same "
       "named refusal, nothing written", _call_examples("tree_call_examples")),
    _p("kv.footprint.triton", "triton", "kernel", kv_cases,
       lambda c: check_kv_footprint(c, "triton"), "kernel writes exactly the spec's kv cells, never OOB",
       examples.kv_boundary_cases),
    _p("kv.semantics.triton", "triton", "kernel", kv_cases,
       lambda c: check_kv_semantics(c, "triton"), "kernel kv outputs equal the spec's", examples.kv_boundary_cases),
    _p("kv.differential", "all", "kernel", kv_cases, check_kv_differential,
       "kernel == reference bit for bit on kv batches", examples.kv_boundary_cases),
    _p("kv.validation", "all", "kernel", calls.kv_calls, lambda c: refusals.check_kv_call(c),
       "at each validation boundary (req_to_token rows at every page size, pool indices, widths, dtypes, "
       "layouts): accepted exactly when the spec's conditions hold", _call_examples("kv_call_examples")),
)


def property_named(name: str) -> Property:
    for p in PROPERTIES:
        if p.name == name:
            return p
    raise SpecArgumentError("--property", f"unknown property {name!r}; known: "
                            f"{', '.join(p.name for p in PROPERTIES)}")


def select(target: str) -> list[Property]:
    """Properties for ``--target``: reference, triton (kernel and differential ones) or all."""
    if target == "all":
        return list(PROPERTIES)
    if target == "reference":
        return [p for p in PROPERTIES if p.target == "reference"]
    if target == "triton":
        return [p for p in PROPERTIES if p.target in ("triton", "all")]
    raise SpecArgumentError("--target", f"must be reference, triton or all, got {target!r}")
