"""The validation properties: accept exactly what the spec accepts, refuse the rest alike.

For a call around a validation boundary (:mod:`.calls`), the spec's verdict is the list
of conditions it violates (:func:`.calls.tree_violations`, :func:`.calls.kv_violations`).
Then, for the reference and for the Triton kernels (checked interpreter):

* **the spec accepts** (nothing violated): both run clean and agree bit for bit, and
  every output holds the spec's values on the spec's footprint and its old (junk)
  content everywhere else;
* **the spec refuses**: both raise the same ``SpecArgumentError`` (same class, same
  message) naming the argument of a violated condition, every caller tensor is
  unchanged, and no kernel was launched.

A raw ``IndexError``, an out-of-bounds access, any other exception, or an acceptance
the spec refuses is a failure naming the violated condition.

:func:`check_verify_mask_call` is the same idea for the preallocated ``VerifyMask``:
the buffer is reused exactly when the spec's sizes allow it, and what it hands out
has exactly the spec's number of cells.
"""

from __future__ import annotations

import torch

from specbound import kernels, spec
from specbound import reference as ref
from specbound.kernels import checked_interpreter
from specbound.spec import SpecArgumentError

from . import expected
from .calls import (
    KV_INPUTS, TREE_INPUTS, KvCall, TreeCall, VerifyMaskCall, _name, _signed, junk_like, kv_call_tensors,
    kv_violations, seed_of, tree_call_tensors, tree_violations,
)


def _device(target: str) -> str:
    """Where a target's tensors live: compiled kernels need CUDA tensors."""
    return "cuda" if target == "triton" and not kernels.INTERPRETED else "cpu"


def _fail(text: str) -> None:
    raise expected.PropertyFailure(text)


def _conds_text(conds) -> str:
    return "; ".join(f"{c.name} ({c.text})" for c in conds)


def _run(target: str, fn, *args, **kwargs):
    """``(outcome, value, launches)``: outcome "ok" / "refused" (SpecArgumentError) /
    "crashed" (anything else); launches: kernel launches seen (None: not observable)."""
    session = None
    try:
        if target == "triton" and kernels.INTERPRETED:
            with checked_interpreter() as session:
                value = fn(*args, **kwargs)
        else:
            value = fn(*args, **kwargs)
        outcome = "ok"
    except SpecArgumentError as exc:
        outcome, value = "refused", exc
    except Exception as exc:   # a raw IndexError, an out-of-bounds access, ...: reported, never raised
        outcome, value = "crashed", exc
    return outcome, value, (len(session.launches) if session is not None else None)


def _snapshot(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: _signed(t).clone() for name, t in tensors.items()}


def _changed(tensors, snapshot) -> list[str]:
    return [name for name, t in tensors.items() if not torch.equal(_signed(t), snapshot[name])]


def _run_both(realize, builds, inputs: tuple[str, ...], kw: dict):
    """Run the call with the reference, then the kernels, each on a fresh, identical
    realization (``realize(device) -> (inputs, outputs)``); returns the verdicts
    ``{target: (outcome, value, launches, tensors changed by a failed call)}``, the outputs
    of each target, and the outputs' content before the call."""
    runs, results, before = {}, {}, None
    for target, build in zip(("reference", "triton"), builds):
        ins, outs = realize(_device(target))
        tensors = {**ins, **outs}
        snap = _snapshot(tensors)
        before = before or {name: snap[name] for name in outs}
        outcome, value, launches = _run(target, build, *(ins[name] for name in inputs), **kw, **outs)
        runs[target] = (outcome, value, launches, _changed(tensors, snap) if outcome != "ok" else [])
        results[target] = outs
    return runs, results, before


def _judge(what: str, violated, runs: dict) -> bool:
    """Check the verdicts of both targets against the spec's; True when both accepted."""
    for target, (outcome, value, launches, changed) in runs.items():
        if outcome == "crashed":
            _fail(f"{target} raised {type(value).__name__}: {value} -- the spec "
                  + (f"refuses this {what}: {_conds_text(violated)}" if violated else f"accepts this {what}"))
        if violated and outcome == "ok":
            _fail(f"{target} accepted a {what} the spec refuses: {_conds_text(violated)}")
        if not violated and outcome == "refused":
            _fail(f"{target} refused a {what} the spec accepts: {type(value).__name__}: {value}")
        if outcome == "refused":
            named = {c.argument for c in violated}
            if value.argument not in named:
                _fail(f"{target} refused naming {value.argument!r} ({value}), but the spec's violated "
                      f"conditions name {sorted(named)}: {_conds_text(violated)}")
            if changed:
                _fail(f"{target} refused ({value}) after writing to {changed}")
            if launches:
                _fail(f"{target} refused ({value}) after {launches} kernel launch(es)")
    (o1, v1, *_), (o2, v2, *_) = runs.values()
    if o1 == o2 == "refused" and (type(v1) is not type(v2) or str(v1) != str(v2)):
        _fail(f"reference and triton refuse differently: {type(v1).__name__}: {v1} / {type(v2).__name__}: {v2}")
    return o1 == o2 == "ok"


# --- tree builds -------------------------------------------------------------------------------

def _tree_want(call: TreeCall, before: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The outputs after a build the spec accepts: its values on its footprint, the old
    content elsewhere."""
    case = call.tree
    values = expected.expected_tree(case)
    footprint = expected.spec_tree_footprint(case)
    cells = {"tree_mask": footprint["tree_mask.kernel"] | footprint["tree_mask.fill"],
             **{name: footprint[name] for name in expected.TOKEN_OUTPUTS}}
    want = {}
    for name, old in before.items():
        flat = old.reshape(-1).clone()
        idx = torch.tensor(sorted(cells[name]), dtype=torch.int64)
        flat[idx] = _signed(values[name]).reshape(-1)[idx]
        want[name] = flat
    return want


def check_tree_call(call: TreeCall) -> None:
    ins, outs = tree_call_tensors(call)
    violated = tree_violations(call, ins, outs)
    case = call.tree
    kw = dict(topk=case.topk, depth=case.depth, num_draft_tokens=case.num_draft_tokens, mode=case.tree_mode,
              fill_prefix_mask=case.fill_prefix_mask)
    runs, results, before = _run_both(lambda device: tree_call_tensors(call, device),
                                      (ref.build_tree, kernels.build_tree), TREE_INPUTS, kw)
    if not _judge("tree build", violated, runs):
        return
    want = _tree_want(call, before)
    for name in want:
        got_ref = _signed(results["reference"][name]).reshape(-1)
        expected.same(f"{name} (triton vs reference)", _signed(results["triton"][name].cpu()).reshape(-1), got_ref)
        expected.same(f"{name} (reference vs spec, old content outside the footprint)", got_ref, want[name])


# --- draft kv builds ------------------------------------------------------------------------------

def check_kv_call(call: KvCall) -> None:
    ins, outs = kv_call_tensors(call)
    violated = kv_violations(call, ins, outs)
    kw = call.kwargs()
    runs, results, before = _run_both(lambda device: kv_call_tensors(call, device),
                                      (ref.draft_decode_kv_indices, kernels.draft_decode_kv_indices), KV_INPUTS, kw)
    if not _judge("draft kv build", violated, runs):
        return
    want_ind, want_ptr = expected.expected_kv(call.kv, buffers=(before["kv_indices"], before["kv_indptr"]))
    for name, want in (("kv_indices", want_ind), ("kv_indptr", want_ptr)):
        expected.same(f"{name} (triton vs reference)", results["triton"][name].cpu(), results["reference"][name])
        expected.same(f"{name} (reference vs spec, old content outside the footprint)", results["reference"][name], want)


# --- the preallocated verify mask ---------------------------------------------------------------------

def check_verify_mask_call(call: VerifyMaskCall) -> None:
    """``buffer_for_batch`` reuses the buffer exactly when ``spec.fits`` holds and the
    batch's cells (``spec.mask_batch_numel``) fit in it, refuses a batch that fits by
    count but not by cells, and otherwise hands out exactly ``spec.fallback_numel``
    fresh cells; ``trivial_verify_mask`` hands out exactly ``spec.trivial_verify_numel``
    True cells, reusing the buffer's front only when the batch fits and the bool buffer
    holds them; nothing outside what is handed out is written."""
    layout, n, bs, total = call.layout, call.num_draft_tokens, call.bs, call.seq_lens_sum
    vm = ref.maybe_create_verify_mask(is_draft_runner=False, skip_prefill=False, max_bs=call.max_bs,
                                      num_draft_tokens=n, max_context_len=call.max_context_len,
                                      is_read=call.is_read, read_mode=call.mode)
    size = spec.tree_mask_numel(layout, call.max_bs, n, call.max_context_len)
    if vm.mode is not layout or vm.buffer.numel() != size or _name(vm.buffer.dtype) != spec.mask_dtype_name(layout, n):
        _fail(f"VerifyMask: {vm.mode.name} buffer of {vm.buffer.numel()} {vm.buffer.dtype}, the spec says "
              f"{layout.name}, spec.tree_mask_numel = {size} {spec.mask_dtype_name(layout, n)}")
    junk_like(vm.buffer, torch.Generator().manual_seed(seed_of(call)))
    before = _signed(vm.buffer).clone()
    ptr = vm.buffer.untyped_storage().data_ptr()
    fits = spec.fits(bs, call.max_bs)
    need = spec.mask_batch_numel(layout, bs, n, total)

    try:
        got = vm.buffer_for_batch(bs, total)
    except SpecArgumentError as exc:
        if not fits or need <= size:
            _fail(f"buffer_for_batch({bs}, {total}) refused ({exc}); fits = {fits}, the batch needs {need} "
                  f"of {size} cells")
        got = None
    else:
        reused = got.numel() > 0 and got.untyped_storage().data_ptr() == ptr
        if fits and need > size:
            _fail(f"buffer_for_batch({bs}, {total}) handed out a buffer although the batch needs {need} cells "
                  f"and the captured one holds {size} (a seq_len past max_context_len)")
        if fits and not (got is vm.buffer):
            _fail(f"buffer_for_batch({bs}, {total}): spec.fits({bs}, {call.max_bs}) holds but the captured "
                  f"buffer was not reused")
        fresh = spec.fallback_numel(layout, bs, n, total)
        if not fits and (reused or got.numel() != fresh or bool(_signed(got).any())):
            _fail(f"buffer_for_batch({bs}, {total}): spec.fits is False, so a fresh zero buffer of "
                  f"spec.fallback_numel = {fresh} cells is due; got "
                  f"{got.numel()} cells{' of the captured buffer' if reused else ''}")
    if not torch.equal(_signed(vm.buffer), before):
        _fail(f"buffer_for_batch({bs}, {total}) wrote to the captured buffer")

    cells = spec.trivial_verify_numel(bs, total)
    out = vm.trivial_verify_mask(bs, total)
    if out.numel() != cells or out.dtype != torch.bool or not bool(out.all()):
        _fail(f"trivial_verify_mask({bs}, {total}): {out.numel()} {out.dtype} cells "
              f"({'all' if bool(out.all()) else 'not all'} True); spec.trivial_verify_numel = {cells}, all True")
    may_reuse = fits and spec.mask_dtype_name(layout, n) == "bool" and cells <= size
    reused = cells > 0 and out.untyped_storage().data_ptr() == ptr
    if cells and reused != may_reuse:
        _fail(f"trivial_verify_mask({bs}, {total}): {'reused' if reused else 'did not reuse'} the captured "
              f"buffer; the spec allows reuse exactly when fits ({fits}), the buffer is bool and "
              f"{cells} <= {size} cells")
    keep = cells if reused else 0
    if not torch.equal(_signed(vm.buffer)[keep:], before[keep:]):
        _fail(f"trivial_verify_mask({bs}, {total}) wrote past the {keep} cell(s) it handed out")
