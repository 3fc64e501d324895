"""``kernel.symbolic_proof[...]`` rows: sglang's own Triton kernels proved or refuted by
specbound's symbolic executor, one row per kernel.

The kernel is read from the audited sglang's source by path (never imported).  The kv
buffer width is what sglang's own sizing helper computes, run on Z3 terms; the host
contract and the specializations are those of sglang's launch sites
(:mod:`specbound.engines.sglang.draft_kv_model`, :mod:`specbound.engines.sglang.tree_model`).
A row is ``proved`` when every property theorem of every specialization in the subset is
proved, and then names the preconditions sglang does not check, each with the
counterexample that breaks the kernel without it (replayed on sglang's kernel under the
checked interpreter where a replay fits in this machine); ``refuted`` when a property
fails under sglang's own contract (with the replay); ``error`` when the executor meets a
construct it does not model (the row names it) or the solver gives no verdict.

The default subset (one specialization per kernel) keeps the audit around a minute;
``specbound audit sglang --symbolic-all`` proves every specialization of the two lists below.
"""

from __future__ import annotations

import time
from pathlib import Path

from specbound.audit.report import ERROR, NOT_PRESENT, PROVED, REFUTED, AuditReport, Row
from specbound.audit.extract import SourceIndex
from specbound.audit import helper_paths
from specbound.engines.sglang import draft_kv_model as sglang_draft_kv
from specbound.engines.sglang import tree_model as sglang_tree
from specbound.engines.sglang import tree_symbolic
from specbound.engines.sglang.draft_kv_model import KvSpec
from specbound.engines.sglang.launch import KV_FILES, TREE_FILES
from specbound.engines.sglang.tree_model import TreeSpec
from specbound.proofs.symexec.engine_theorems import Refutation
from specbound.proofs.symexec.values import Unsupported

KV_ROW, TREE_ROW = "kernel.symbolic_proof[draft_kv]", "kernel.symbolic_proof[tree]"
SPEC_UTILS_FILE = "srt/speculative/spec_utils.py"


def kv_specs(full: bool):
    """The specializations sglang launches (``common_template`` of the multi-step draft
    backends): ``NUM_STEPS`` 0 (one program per step; the Triton backend, flashinfer with one
    token block) and ``= speculative_num_steps`` (flashinfer's token blocks) for every step
    count of the serving envelope; ``page_size`` 1 or any larger page (symbolic); the lane
    bounds ``bs_upper``, ``iter_upper`` and ``num_tokens_upper`` (the next powers of two of
    ``num_seqs``, ``num_steps`` and ``num_seqs*topk``) symbolic: one proof covers every power
    of two up to the envelope's largest (``sglang_draft_kv.LANE_BOUND_MAX``)."""

    if not full:
        return [KvSpec(0, False)]
    steps = (0,) + tuple(range(1, sglang_draft_kv.ENVELOPE_MAX_STEPS + 1))
    # seq_lens are int64 in every sglang batch (schedule_batch), so no int32 variant
    return [KvSpec(n, paged) for n in steps for paged in (False, True)]


def tree_specs(full: bool):
    """Per (K, D, n, mode), every batch size at once: ``batch_size`` is a constexpr of this
    kernel (one compiled kernel per batch size), proved symbolically over the envelope's batch
    sizes (``sglang_tree.BATCH_MAX``); the stated (K, D, n) are the ones below."""

    if not full:
        return [TreeSpec(2, 2, 4, 1)]
    return [TreeSpec(k, d, n, mode) for (k, d, n) in TREE_CONFIGS for mode in (0, 1)]


# (K, D, n) of the tree proofs: the smallest branching tree, the K = 1 chain and (4, 3, 16)
# (typical configurations: plan.TYPICAL_CONFIGS), the golden vector.  The third typical one,
# (8, 5, 32), is not here: the unrolled n = 32 kernel is too slow to prove (docs/kernel-proofs.md).
TREE_CONFIGS = ((2, 2, 4), (1, 3, 4), (4, 4, 8), (4, 3, 16))


def sglang_width(index: SourceIndex):
    """sglang's ``draft_kv_indices_buffer_width`` as a ``Host.width_fn`` (every return path
    explored on Z3 terms; its asserts become the width's conditions), and where it was found;
    ``(None, why)`` when it cannot be used."""
    import z3

    found = index.find("draft_kv_indices_buffer_width", (SPEC_UTILS_FILE,))
    if found is None or len(found.params()) != 3:
        return None, "no draft_kv_indices_buffer_width(num_seqs, topk, max_context_len) in this sglang"
    hook = helper_paths.make_bool_hook()
    fn = index.load_helper(found, {"__sb_bool__": hook}, transform=helper_paths.instrument)

    def width_fn(alloc, k, c):
        expl = helper_paths.explore(hook, lambda: fn(alloc, k, c), [alloc >= 0, k >= 1, c >= 1])
        if expl.unsupported or expl.truncated:
            raise ValueError(f"sglang's width helper does not run on Z3 terms: {expl.unsupported or 'too many paths'}")
        done = [p for p in expl.paths if p.returned]
        if not done:
            raise ValueError("sglang's width helper never returns")
        term = done[-1].value
        for p in reversed(done[:-1]):
            term = z3.If(z3.And(*p.condition), p.value, term)
        accepts = z3.Or(*[z3.And(*p.condition) if p.condition else z3.BoolVal(True) for p in done])
        return term, {"sglang_width_helper_accepts": accepts}
    return width_fn, f"{found.name} ({found.where})"


def _names_unsupported(exc) -> str:
    return f"the executor does not model {exc.construct}" + (f" (kernel line {exc.line})" if exc.line else "")


def _assumed(results) -> tuple[list, list, list]:
    """What the proofs rest on, read from them: the declared preconditions they used, the
    axioms (launch contracts, definitions) they used, and the tensor contents the launch
    model fixes (``model: ...``)."""
    used, axioms, models = set(), set(), set()
    for r in results:
        declared = set(r.preconditions)
        used |= {h for h in r.hypotheses_used if h in declared}
        axioms |= set(r.axioms_used)
        models |= {p for p in r.preconditions if p.startswith("model: ")}
    return sorted(used), sorted(axioms), sorted(models)


def _cex_fields(ref) -> tuple[dict, dict]:
    cex = {k: v for k, v in ref.counterexample.items() if not k.startswith("replay.")}
    replay = {k[len("replay."):]: v for k, v in ref.counterexample.items() if k.startswith("replay.")}
    return cex, replay


def _prove_row(report, row_id, subject, what, specs, prove, refute, unchecked) -> None:
    """Prove every specialization (``prove(sp)``); then refute each unchecked precondition
    (``unchecked``: name -> (text, thunk)) by a replay.  One row: ``proved`` with the
    specializations, their times, the contract and the refutations; ``refuted``/``error``
    for the first specialization that does not prove; ``error`` naming an unsupported
    construct."""

    t0 = time.perf_counter()
    done, times = [], []
    try:
        for sp in specs:
            start = time.perf_counter()
            results = prove(sp)
            bad = [r for r in results if not r.ok]
            if bad:
                report.add(_failed_row(row_id, subject, what, bad, lambda: refute(sp), t0, sp))
                return
            done.append(results)
            times.append(f"{sp.label}: {time.perf_counter() - start:.1f} s")
        refutations = {name: (text, thunk()) for name, (text, thunk) in unchecked.items()}
    except Unsupported as e:
        report.add(Row(row_id, subject, what, "symbolic execution", ERROR, _names_unsupported(e),
                       seconds=time.perf_counter() - t0))
        return
    except Exception as e:  # noqa: BLE001 - never a traceback
        report.add(Row(row_id, subject, what, "symbolic execution", ERROR, f"{type(e).__name__}: {e}",
                       seconds=time.perf_counter() - t0))
        return
    props = [r.id.split("[")[0] for r in done[0]]
    used, axioms, models = _assumed([r for rs in done for r in rs])
    parts = [f"{len(props)} properties ({', '.join(props)}) proved for {len(done)} specialization(s): "
             + "; ".join(times), "preconditions used: " + (", ".join(used) or "none"),
             "axioms used (launch contracts, definitions): " + (", ".join(axioms) or "none")] + models
    cex = replay = None
    for name, (text, ref) in refutations.items():
        if ref.status == "refuted":
            parts.append(f"NOT CHECKED BY SGLANG: {text}; without it: refuted ({ref.obligation}), replayed on "
                         f"sglang's kernel as {ref.verdict}: {ref.detail[:220]}")
            if cex is None:
                cex, replay = _cex_fields(ref)
        else:
            parts.append(f"NOT CHECKED BY SGLANG: {text}; without it: {ref.detail[:220]}")
    report.add(Row(row_id, subject, what, "symbolic execution (z3)", PROVED, "; ".join(parts), cex, replay,
                   seconds=time.perf_counter() - t0))


def _find(index, report, row_id, kernel, files, what):
    """The kernel's definition, or None after a ``not present`` row."""
    found = index.find(kernel, files)
    if found is None:
        report.add(Row(row_id, kernel, what, "-", NOT_PRESENT, f"no `{kernel}` in this sglang"))
    return found


def check_kv(index: SourceIndex, report: AuditReport, full: bool) -> None:
    what = ("in bounds, race free, exact spec footprint (values included), no int32 wrap, no truncated copy, for "
            "every input sglang's host contract allows, per launched specialization")
    found = _find(index, report, KV_ROW, sglang_draft_kv.KERNEL, KV_FILES, what)
    if found is None:
        return
    path = str(found.path)
    try:
        width_fn, width_src = sglang_width(index)
    except Exception as e:  # noqa: BLE001 - the helper rows report the helper itself
        width_fn, width_src = None, f"sglang's width helper failed: {type(e).__name__}: {e}"
    host = sglang_draft_kv.Host(width_fn=width_fn) if width_fn is not None else sglang_draft_kv.Host()
    sizing = (f"row width: sglang's {width_src} on Z3 terms" if width_fn is not None else
              f"row width: spec.draft_kv_indices_buffer_width ({width_src})")
    params = sglang_draft_kv.kernel_params(path)
    specs = [sp for sp in kv_specs(full) if not sp.NUM_STEPS or "NUM_STEPS" in params]
    unchecked = {name: (text, lambda name=name: sglang_draft_kv.refute_without(specs[0], path, name, host))
                 for name, text in sglang_draft_kv.UNCHECKED.items()}
    _prove_row(report, KV_ROW, f"{sglang_draft_kv.KERNEL} ({found.where}); {sizing}", what, specs,
               lambda sp: sglang_draft_kv.prove(sp, path, host),
               lambda sp: sglang_draft_kv.refute_without(sp, path, host=host), unchecked)


def check_tree(index: SourceIndex, report: AuditReport, full: bool) -> None:
    what = ("well-formed trees: in bounds, race free, exact footprint of tree_mask/positions/retrive_index "
            "(links inside their rows), no int32 wrap, walk bounded; every batch size 1..256 in one proof; "
            + ("every (K, D, n) of the serving envelope in one proof per mask mode (loops summarised by "
               "invariants the core proves inductive), then each listed (K, D, n) unrolled" if full else
               "the default (K, D, n); --symbolic-all: the whole envelope"))
    found = _find(index, report, TREE_ROW, sglang_tree.KERNEL, TREE_FILES, what)
    if found is None:
        return
    path = str(found.path)
    specs = ([tree_symbolic.EnvelopeSpec(mode) for mode in (0, 1)] if full else []) + tree_specs(full)
    default = tree_specs(False)[0]
    unchecked = {"well_formed_tree": ("well-formed trees (every selected_index entry names the root or a "
                                      "parent_list slot)", lambda: sglang_tree.refute_malformed(default, path))}
    _prove_row(report, TREE_ROW, f"{sglang_tree.KERNEL} ({found.where})", what, specs,
               lambda sp: _tree_module(sp).prove(sp, path), lambda sp: _refute_tree(sp, path), unchecked)


def _tree_module(sp):
    return tree_symbolic if isinstance(sp, tree_symbolic.EnvelopeSpec) else sglang_tree


def _refute_tree(sp, path):
    """A replayed refutation of a failed tree proof: an envelope proof's counterexample shape
    is refuted as a concrete specialization (:func:`tree_symbolic.refute`)."""
    if not isinstance(sp, tree_symbolic.EnvelopeSpec):
        return sglang_tree.refute_run(sp, path)
    found = tree_symbolic.refute(sp, path)
    if found is None or found[2] is None:
        return Refutation("survived", detail="no counterexample inside the replay box")
    return found[2]


def _failed_row(row_id, subject, what, bad, refute, t0, sp) -> Row:
    """A theorem failed under sglang's own contract: ``refuted`` with a replayed
    counterexample, else ``error`` (an unknown verdict or a counterexample the replay did
    not reproduce is no refutation)."""
    detail = "; ".join(f"{r.id}: {r.status} ({r.detail[:200]})" for r in bad[:3])
    if refute is not None and any(r.status == "failed" for r in bad):
        ref = refute()
        if ref.status == "refuted":
            cex, replay = _cex_fields(ref)
            return Row(row_id, subject, what, "symbolic execution (z3) + replay", REFUTED,
                       f"{sp.label}: {ref.obligation} refuted, replayed as {ref.verdict}: {ref.detail[:300]}",
                       cex, replay, seconds=time.perf_counter() - t0)
        detail += f"; replay: {ref.detail[:200]}"
    return Row(row_id, subject, what, "symbolic execution (z3)", ERROR, f"{sp.label}: {detail}",
               seconds=time.perf_counter() - t0)


def check(report: AuditReport, full: bool = False) -> None:
    """Both rows, for the sglang the report is about; ``full``: every listed specialization
    (``--symbolic-all``), else the default one per kernel."""
    if report.path is None:
        return
    index = SourceIndex(Path(report.path))
    check_kv(index, report, full)
    check_tree(index, report, full)
