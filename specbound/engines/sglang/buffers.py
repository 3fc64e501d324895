"""The buffer audit: every allocation that reaches the draft kv kernel or the tree build,
judged against the spec (:mod:`specbound.audit.judge`), the counterexamples replayed on sglang's kernel
(:mod:`.buffer_replay`); one row per (kernel, backend class, allocation, mask layout).

Rows: ``buffer.<kernel>[<class>.<holder>]`` (``matched`` / ``overrun`` / ``holds only if`` /
``error``), ``buffer.<kernel>[<class>]`` for a trail that ended before an allocation
(``unknown``), ``buffer.<kernel>.not_reached`` for classes whose inherited launch nothing
calls (``not present``), and ``buffer.sites`` (what was found).
"""

from __future__ import annotations

import time
from collections import OrderedDict

import z3

from specbound import spec

from specbound.audit import judge
from . import buffer_replay as sglang_replay
from specbound.audit.report import ERROR, HOLDS_ONLY_IF, MATCHED, NOT_PRESENT, OVERRUN, UNKNOWN, AuditReport, Row
from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from .bindings import BINDINGS
from .locate import PACKAGE
from .sinks import TracedBuffer, find_sites, trace_site
from specbound.audit.trace import Tracer
from specbound.audit.trace_values import Alloc, Ended, EnumMember, Num, Opaque, term_ids

VERDICT_STATUS = {judge.MATCHED: MATCHED, judge.OVERRUN: OVERRUN, judge.HOLDS_ONLY_IF: HOLDS_ONLY_IF,
                  judge.ERROR: ERROR}
SEVERITY = [judge.OVERRUN, judge.ERROR, judge.HOLDS_ONLY_IF, judge.MATCHED]
KERNEL_TEXT = {"draft_kv_indices": "the draft kv kernel's kv_indices", "tree_mask": "the tree build's mask"}


def check_buffers(index: SourceIndex, report: AuditReport, replay: bool = True,
                  program: Program | None = None) -> None:
    t0 = time.perf_counter()
    program = program or Program(index, PACKAGE)
    sites = find_sites(program)
    traced: list[TracedBuffer] = []
    for site in sites:
        try:
            traced += trace_site(Tracer(program, BINDINGS, site.sink.role), site)
        except Exception as e:  # noqa: BLE001 - the tracer's own failure is an error row, never sglang's
            report.add(Row(f"buffer.{site.sink.kind}.trace", f"{site.kernel} ({site.where})",
                           "trace the buffer argument to its allocation", "ast", ERROR,
                           f"the tracer failed: {type(e).__name__}: {e}"))
    counts = {k: sum(1 for s in sites if s.sink.kind == k) for k in KERNEL_TEXT}
    allocs = _group(traced)
    report.add(Row("buffer.sites", ", ".join(f"{n} call site(s) of {KERNEL_TEXT[k]}" for k, n in counts.items()),
                   "find every kernel call site and trace its buffer argument", "ast",
                   MATCHED if sites else NOT_PRESENT,
                   f"{len(allocs['alloc'])} allocation(s) per backend class, {len(allocs['untraced'])} trail(s) "
                   f"ended early; {time.perf_counter() - t0:.1f} s" if sites else
                   "no launch of generate_draft_decode_kv_indices and no tree-build call in this sglang",
                   seconds=time.perf_counter() - t0))
    for key, group in allocs["alloc"].items():
        t1 = time.perf_counter()
        try:
            row = _alloc_row(index, key, group, replay)
        except Exception as e:  # noqa: BLE001
            a = group[0].alloc
            row = Row(_row_id(group[0], None), f"{a.owner} ({a.site})", "the kernel's writes fit the allocation",
                      "z3", ERROR, f"the judge failed: {type(e).__name__}: {e}", allocation=f"{a.site} {a.text}")
        if row is not None:
            row.seconds = time.perf_counter() - t1
            report.add(row)
    for (kind, owner, text, machinery), group in allocs["untraced"].items():
        # The audit's own limit is an error; a name sglang leaves unbound is unknown.
        tb = group[0]
        report.add(Row(f"buffer.{kind}[{owner}]", f"{owner} -> {tb.site.kernel} ({tb.site.where})",
                       "trace the buffer argument to its allocation", "ast", ERROR if machinery else UNKNOWN,
                       f"{text} (trail: {' <- '.join(tb.path.trail[:6])})"))
    for kind, entries in allocs["absent"].items():
        listing = "; ".join(f"{owner}: {reason}" for owner, reason in entries.items())
        report.add(Row(f"buffer.{kind}.not_reached", f"{len(entries)} class(es)",
                       "classes that inherit a kernel call but never reach it", "ast", NOT_PRESENT,
                       f"no buffer on these paths (the value does not exist there): {listing}"))


def _group(traced: list[TracedBuffer]) -> dict:
    out = {"alloc": OrderedDict(), "untraced": OrderedDict(), "absent": {}}
    for tb in traced:
        v = tb.value
        if isinstance(v, Alloc):
            out["alloc"].setdefault((tb.kind, v.owner, v.site, v.view), []).append(tb)
        elif isinstance(v, Ended) and v.absent:
            out["absent"].setdefault(tb.kind, {}).setdefault(tb.owner, f"{v.reason} ({v.where})")
        elif isinstance(v, Ended) and v.machinery:
            out["untraced"].setdefault((tb.kind, tb.owner, f"the tracer stopped at {v.where}: {v.reason}", True), [])\
                .append(tb)
        else:
            text = (f"trail ended at {v.where}: {v.reason}" if isinstance(v, Ended) else
                    f"trail ended at `{v.text}`, an object the tracer cannot see into" if isinstance(v, Opaque) else
                    f"trail ended at a {type(v).__name__} value where a tensor was expected")
            out["untraced"].setdefault((tb.kind, tb.owner, text, False), []).append(tb)
    return out


def _row_id(tb: TracedBuffer, mode) -> str:
    a = tb.alloc
    holder = (a.holder or a.func.split(".")[-1]).removeprefix("self.")
    suffix = f"/{mode.name}" if mode is not None else ""
    return f"buffer.{tb.kind}[{a.owner}.{holder}{a.view}{suffix}]"


def _modes(tb: TracedBuffer):
    """(spec mode, extra path conditions) pairs the mask must be judged in."""
    m = tb.companions.get("tree_mask_mode")
    if isinstance(m, EnumMember) and m.member in spec.TreeMaskMode.__members__:
        return [(spec.TreeMaskMode[m.member], [])]
    var = tb.variables.get("tree_mask_mode")
    # Not resolved: every layout, each tied to the `if` tests on the mode (when there were some).
    return [(mode, [var == int(mode)] if var is not None else []) for mode in spec.TreeMaskMode]


def _stride(tb: TracedBuffer):
    s = tb.companions.get("kv_indices_stride")
    return s.term if isinstance(s, Num) else None


def _alloc_row(index: SourceIndex, key, group: list[TracedBuffer], replay: bool):
    kind = key[0]
    judged = []   # (judgement, traced buffer, mode)
    seen = set()
    for tb in group:
        a = tb.alloc
        bad = next((d for d in a.dims if not isinstance(d, (int, z3.ArithRef))), None)
        if bad is not None:
            judged.append((judge.Judgement("unknown", detail=f"a dimension is {bad}"), tb, None))
            continue
        modes = _modes(tb) if kind == "tree_mask" else [(None, [])]
        for mode, extra in modes:
            ident = (term_ids(a.dims), term_ids([_stride(tb)]), getattr(mode, "name", ""),
                     term_ids([*tb.path.conds, *extra]))
            if ident in seen:
                continue
            seen.add(ident)
            j = judge.judge(kind, a.dims, [*tb.path.conds, *extra], bindings=BINDINGS, stride=_stride(tb), mode=mode,
                            name=_row_id(tb, mode))
            if j.verdict != judge.INFEASIBLE:
                judged.append((j, tb, mode))
    if not judged:
        return None  # every path to it contradicts the preconditions (a branch for another layout)
    by_mode: dict = {}
    for j, tb, mode in judged:
        by_mode.setdefault(getattr(mode, "name", None), []).append((j, tb, mode))
    rows = [_row_for(index, kind, entries, replay) for entries in by_mode.values()]
    if len(rows) == 1:
        return rows[0]
    # Several layouts reach one allocation: one row, the worst verdict first.
    rows.sort(key=lambda r: ([OVERRUN, ERROR, UNKNOWN, HOLDS_ONLY_IF, MATCHED].index(r.status),
                             not r.id.endswith("/FULL_MASK]")))
    first = rows[0]
    first.detail += " | other layouts: " + "; ".join(f"{r.id.rsplit('/', 1)[-1].rstrip(']')}: {r.status}"
                                                      for r in rows[1:])
    return first


def _row_for(index, kind, entries, replay: bool) -> Row:
    entries.sort(key=lambda e: SEVERITY.index(e[0].verdict) if e[0].verdict in SEVERITY else 1)
    j, tb, mode = entries[0]
    a = tb.alloc
    row_id = _row_id(tb, mode)
    where = a.site + (f" via {a.via}" if a.via else "")
    subject = f"{a.owner} ({where}) -> {tb.site.kernel} ({tb.site.where})"
    check = f"{KERNEL_TEXT[kind]}: the kernel's writes (spec) fit the allocation"
    if j.verdict == "unknown":
        return Row(row_id, subject, check, "ast", UNKNOWN, j.detail, allocation=f"{a.site} {a.text}")
    status = VERDICT_STATUS.get(j.verdict, ERROR)
    detail = j.detail
    if j.condition:
        detail = f"holds only if {j.condition}: {detail}"
    notes = [n for n in tb.path.notes][:3]
    if notes:
        detail += " [path: " + "; ".join(notes) + "]"
    if kind == "draft_kv_indices" and _stride(tb) is None:
        detail += " [the launch's row stride was not traced: judged with the buffer's last dimension]"
    row = Row(row_id, subject, check, "z3", status, detail, j.counterexample, allocation=f"{where} {a.text}",
              size=j.size, required=j.required)
    if status in (OVERRUN, HOLDS_ONLY_IF) and j.counterexample:
        if replay:
            _replay_into(index, row, kind, tb, mode, j)
        else:
            row.detail += "; not replayed (--no-kernels)"
    return row


def _replay_into(index, row: Row, kind, tb: TracedBuffer, mode, j: judge.Judgement) -> None:
    values = j.counterexample
    a = tb.alloc
    dims = [judge.evaluate(d, values) for d in a.dims]
    if any(d is None for d in dims):
        row.detail += "; no replay: the allocation's size is not concrete at the counterexample"
        row.status = ERROR
        return
    if kind == "draft_kv_indices":
        stride = judge.evaluate(_stride(tb), values) if _stride(tb) is not None else dims[-1]
        case = sglang_replay.kv_case(values, dims[0] if len(dims) > 1 else 1, stride)
    else:
        numel = 1
        for d in dims:
            numel *= d
        case = sglang_replay.tree_case(values, mode, numel, values["max_context_len"])
    if case is None or case.get("seq_lens") is None:
        row.detail += "; no replay: no batch matches the counterexample"
        row.status = ERROR
        return
    result = sglang_replay.run(index, kind, case)
    row.replay = case
    row.replay_command = sglang_replay.command(index.root, kind, case)
    row.method = "z3 + replay"
    if result.verdict == "oob":
        row.detail += f"; replayed on {result.kernel}: {result.detail}"
        if result.stand_in:
            row.detail += f" ({result.stand_in})"
    else:
        # The model says it overruns, the kernel does not: the audit's own model is off.
        row.detail += f"; the replay on {result.kernel} did not go out of bounds ({result.detail})"
        row.status = ERROR

