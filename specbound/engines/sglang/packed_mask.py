"""Consumer rows ``consumer.packed_mask[<class>.<buffer>@<pack>]``: the verify mask a CUDA-graph
prefill wrapper's sync-free plan packs, eight cells a byte, into the wrapper's own
``custom_mask_buf`` (sglang's ``fast_prefill_plan`` calling ``pack_verify_mask_into``, installed by
``FlashInferAttnBackend`` for EAGLE target verify).

The contract (:func:`specbound.spec.packed_mask_request_bytes`): request ``b`` packs
``ceil(n*(seq_len[b] + n) / 8)`` bytes from ``packed_indptr[b]``; the Triton kernel's stores are
bounded by the request's length, never by the buffer.  A batch of ``bs`` requests packs at most
``bs`` times its longest request's bytes, and exactly that when every request is as long (the
theorem ``CT-PACKED-MASK-WRITE`` states the per-request form), so the core is asked about the
batch's longest request ``seq_len`` with ``0 <= seq_len <= C``.

* A *pack* is a call in a function of an attention backend (:func:`.site_trace.in_folder`) handing
  ``<x>._custom_mask_buf``
  as a positional argument; it is *guarded* when an ``assert <e> <= <x>._custom_mask_buf.numel()``
  runs before it on every path (sglang's host assert: past the buffer the server dies, a
  ``crash``; unguarded the kernel writes past it, an ``overrun``).
* The plan holding it is followed to its installs and the wrappers' ``custom_mask_buf=`` (a
  keyword, or a dict entry handed on as ``**extra``) exactly as the plan-copy stage follows
  ``paged_kv_indices_buf`` (:mod:`.plan_copy`).
* A finding is replayed by the package's own packer (host function and kernel) under the checked
  interpreter, with the host assert left out (it is what ``python -O`` runs), its out-of-bounds
  store quoted.
"""

from __future__ import annotations

import ast

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import C, bs, n

from specbound.audit import judge
from specbound.audit.kernels import launch_finding, record_replay
from specbound.audit.program import Program
from specbound.audit.report import CRASH, ERROR, HOLDS_ONLY_IF, MATCHED, OVERRUN, UNKNOWN, AuditReport, Row
from . import bindings
from .consumers import site_rows
from .direct_kv import _DirectTracer
from .fill_write import package_runner
from .page_table_build import _Build
from .plan_copy import grouped_installs, wrapper_buffers
from .site_trace import attention_nodes, dominating_statements, selves, traced_allocations

KIND = "packed_mask"
PACKED_BUFFER = "_custom_mask_buf"
WRAPPER_KEYWORD = "custom_mask_buf"
LONGEST = z3.Int("seq_len")   # the batch's longest request
REPORTED = (*judge.REPORTED, ("seq_len", LONGEST))
NAMES = ("bs", "max_bs", "num_draft_tokens", "max_context_len", "seq_len")
CHECK = ("the verify mask the plan packs (spec.packed_mask_request_bytes per request) fits the wrapper's "
         "custom_mask_buf")


def check_packed_masks(program: Program, report: AuditReport, replay: bool = True) -> None:
    """``replay``: run the package's packer at each finding's counterexample."""
    packs = _packs(program)
    for name, store, fn, installed in grouped_installs(program, packs):
        plan, call, guard = packs[name]
        where = f"{plan.rel}:{call.lineno}"
        packer = _packer(program, call) if replay else None
        for self_val in selves(program, fn):
            owner = self_val.cls.name if self_val is not None else fn.qual
            site_rows(report, KIND, owner, where, CHECK,
                      lambda: _rows(program, self_val, owner, where, installed, store, guard, packer))


def _packs(program: Program) -> dict:
    """Plan name -> (function, the pack call, the guarding assert's line or None)."""
    out = {}
    for fn, node in attention_nodes(program, PACKED_BUFFER):
        if not (isinstance(node, ast.Call) and any(isinstance(a, ast.Attribute) and a.attr == PACKED_BUFFER
                                                    for a in node.args)):
            continue
        guard = next((s.lineno for s in dominating_statements(fn.node, node.lineno) if _guards(s)), None)
        out.setdefault(fn.name, (fn, node, guard))
    return out


def _guards(stmt) -> bool:
    t = stmt.test if isinstance(stmt, ast.Assert) else None
    return isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.LtE) \
        and ast.unparse(t.comparators[0]).endswith(f"{PACKED_BUFFER}.numel()")


def _rows(program, self_val, owner, where, installed, store, guard, packer) -> list[Row]:
    subject = f"{owner} (installed at {installed} on self.{store}) -> pack at {where}"
    if self_val is None:
        return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, CHECK, "ast", UNKNOWN, "the install is not a method")]
    found = {}
    for builder, expr in wrapper_buffers(program, self_val.cls, store, WRAPPER_KEYWORD):
        for a, p in traced_allocations(program, builder, self_val, expr, where, _DirectTracer).values():
            found.setdefault((a.site, a.view), (a, p))
    if not found:
        return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, CHECK, "ast", UNKNOWN,
                    f"no {WRAPPER_KEYWORD} of the wrappers in self.{store} was traced to an allocation")]
    guarded = f"{where.rsplit(':', 1)[0]}:{guard}" if guard is not None else None
    return [_row(owner, where, subject, a, p, guarded, packer) for a, p in found.values()]


def _row(owner, where, subject, a, path, guarded, packer) -> Row:
    holder = (a.holder or a.func.split(".")[-1]).removeprefix("self.")
    row_id = f"consumer.{KIND}[{owner}.{holder}{a.view}@{where}]"
    bad = next((d for d in a.dims if not isinstance(d, (int, z3.ArithRef))), None)
    if bad is not None:
        return Row(row_id, subject, CHECK, "ast", UNKNOWN, f"a dimension is {bad}", allocation=f"{a.site} {a.text}")
    numel = a.numel()
    verdict, cex, detail = judge_packed(numel, list(path.conds), row_id)
    past = CRASH if guarded else OVERRUN
    status = {judge.MATCHED: MATCHED, judge.HOLDS_ONLY_IF: HOLDS_ONLY_IF, judge.OVERRUN: past}.get(verdict, ERROR)
    if status != MATCHED:
        detail += (f"; past the buffer the host assert at {guarded} raises (the server dies)" if guarded
                   else "; no host check: the kernel stores past the buffer")
    row = Row(row_id, subject, CHECK, "z3", status, detail, cex, allocation=f"{a.site} {a.text}",
              size=str(z3.simplify(numel)) if z3.is_expr(numel) else str(numel),
              required="bs * ceil(n*(seq_len + n) / 8) (spec.packed_mask_request_bytes, the longest request)")
    if status in (CRASH, OVERRUN, HOLDS_ONLY_IF) and cex and packer is not None:
        packer.replay(row, numel, cex)
    return row


def judge_packed(numel, conds, name) -> tuple[str, dict | None, str]:
    """(verdict, counterexample, detail) of a buffer of ``numel`` bytes through the core."""
    goal = bs * spec.packed_mask_request_bytes(n, LONGEST) <= numel
    hyps, lemmas = judge.contract("verify_kv_indices")
    hyps["longest_request_in_context"] = z3.And(0 <= LONGEST, LONGEST <= C)
    hyps.update({f"path_{i}": c for i, c in enumerate(conds)})
    try:
        if core.satisfy(f"{name}/feasible", hyps, by=lemmas) is None:
            return judge.MATCHED, None, "no path to the buffer is consistent with the preconditions"
        if _proved(f"{name}/fits", goal, hyps, lemmas):
            return judge.MATCHED, None, "proved for every batch within the stated preconditions"
        cex = judge.counterexample(hyps, lemmas, goal, NAMES, reported=REPORTED)
        extra = bindings.BINDINGS.extra_conditions["custom_mask_copy"][0]
        room = {f"{extra.name}_longest": LONGEST + extra.headroom <= C}
        also = "; ".join(f"with {text}: {'matched' if _proved(f'{name}/{tag}', goal, {**hyps, tag: h}, lemmas) else 'refuted'}"
                         for tag, text, h in (("two_tokens", "num_draft_tokens >= 2", n >= 2),
                                              ("context_holds_tree", "max_context_len >= num_draft_tokens", C >= n)))
        if _proved(f"{name}/fits_if_{extra.name}", goal, {**hyps, **room}, lemmas):
            return judge.HOLDS_ONLY_IF, cex, (f"holds only if {extra.text}: proved given it for every request; "
                                              f"sglang does not check it | {also}")
        return judge.OVERRUN, cex, f"refuted under the stated preconditions | {also}"
    except core.Unknown as e:
        return judge.ERROR, None, f"the solver gave no verdict: {e}"


def _proved(name, goal, hyps, lemmas) -> bool:
    try:
        core.check(name, goal, hyps=hyps, by=lemmas)
        return True
    except core.Refuted:
        return False


def _packer(program: Program, call: ast.Call):
    """The package's packer (the function the pack calls) and the kernel it launches, defined under
    the checked interpreter on first use; None when it is not found or launches no kernel."""
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
    return next((r for r in (package_runner(program, fn, _Packer) for fn in program.functions_named(name)) if r),
                None)


class _Packer(_Build):
    def replay(self, row: Row, numel, values: dict) -> None:
        """``bs`` requests of the counterexample's ``seq_len`` packed by the package's own function
        into a buffer of the allocation's size (the host assert left out)."""
        import torch

        pack = self._load()
        size = judge.evaluate(numel, values, REPORTED)
        if pack is None or size is None:
            row.detail += f"; no replay: {self.why or 'the size is not concrete at the counterexample'}"
            return
        count, q, s = values["bs"], values["num_draft_tokens"], values["seq_len"]
        kv = torch.arange(count + 1, dtype=torch.int32) * (s + q)
        packed = torch.arange(count + 1, dtype=torch.int32) * spec.packed_mask_request_bytes(q, s)
        feed = {"mask": torch.ones(spec.custom_mask_batch_read(count, q, count * s), dtype=torch.bool),
                "kv_indptr": kv, "packed_indptr": packed, "output": torch.zeros(size, dtype=torch.uint8),
                "batch_size": count, "query_width": q, "max_kv_len": s + q}
        kwargs = self.bind(feed, row)
        if kwargs is None:
            return
        f = launch_finding(lambda: pack(**kwargs))
        row.replay = {**values, "buffer_numel": size, "bytes_packed": int(packed[-1])}
        record_replay(row, f, f"sglang's {self.build.name}", self.build.where,
                      f"packing {count} request(s) of {s} + {q} keys x {q} queries ({int(packed[-1])} bytes) "
                      f"into {size} bytes")
