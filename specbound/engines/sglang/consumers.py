"""Consumer rows: buffers judged against what reads them or is copied into them in target
verify, per the spec's consumer contracts (:mod:`specbound.spec.consumers`).

* ``consumer.page_table[...]``: every call of a page-table fill that takes ``page_table``,
  ``max_seq_pages`` and ``seq_len_delta`` (sglang's ``normal_decode_set_metadata``).  The
  fill tells the attention kernel ``cache_seqlens = seq_len + delta`` and fills at most
  ``max_seq_pages`` columns, so the kernel reads ``spec.page_table_columns_read(seq_len,
  delta, page_size)`` columns of a row of at most ``max_seq_pages`` valid ones (and of the
  traced allocation's width, when the table is traced through its record field or graph dict).
  A request is admitted with ``seq_len <= C - 1`` (sglang's ``max_req_len = min(context_len -
  1, ...)``, ``managers/tp_worker.py``).  A clamp of the batch's longest request
  (``<x>.max_seq_len_k`` or ``seq_lens.max().item()``: XPU, FlashAttention before 0.5.15;
  :class:`.site_trace.MetadataTracer`) bounds the request, not the row: it is judged only
  against a traced table's width, ``unknown`` without one.  A delta of the draft step
  (``speculative_step_id + 1``) is :mod:`.draft_decode_offset`'s row, not judged here.
  ``matched``; ``holds only if seq_len[b] + delta <= C`` (a condition sglang does not check);
  ``overread`` otherwise.
* ``consumer.custom_mask[...]``: every slice copy ``buf[:k] = <x>.custom_mask`` (or
  ``buf[:k].copy_(<x>.custom_mask)``): the verify mask copied into a backend's buffer,
  which the attention kernel then reads through ``mask_indptr`` (``n * (seq_len + n)``
  cells per request, ``mask_indptr[bs]`` in all: the same extent as the copy).  The buffer
  is traced to its allocation and judged through :func:`specbound.audit.judge.judge`; ``crash`` (torch
  raises on a slice shorter than the source), ``holds only if``, ``matched``.
"""

from __future__ import annotations

import ast
import functools
import time

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import C, D, K, labelled, n, page

from specbound.audit import judge
from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.audit.report import CRASH, ERROR, HOLDS_ONLY_IF, MATCHED, OVERREAD, UNKNOWN, AuditReport, Row
from specbound.audit.trace_values import Alloc, EnumMember, Num, Path, term_ids
from . import bindings
from .locate import PACKAGE
from .site_trace import STEP, MetadataTracer, attention_nodes, batch_bounded, call_argument, functions_mentioning, \
    longest_readings, longest_settings, mentions, reported_with, resolve, selves, traced_allocations, traced_tables

FILL_PARAMS = ("page_table", "max_seq_pages", "seq_len_delta")
SEQ = z3.Int("seq_len[b]")
PAGE_TABLE_REPORTED = (("seq_len", SEQ), ("num_draft_tokens", n), ("page_size", page), ("max_context_len", C))
LONGEST_UNTRACED = ("the fill is clamped by the batch's longest request (max_seq_len_k or max(seq_lens)), which "
                    "bounds the request, not the row, and the page_table argument was not traced to its allocation")
LONGEST_UNSET = ("the fill is clamped by max_seq_len_k, which no method of the class sets to a value the audit "
                 "reads")
# Per consumer kind: the row status of a refuted buffer (a reader overreads, a copy raises).
REFUTED_STATUS = {"page_table": OVERREAD, "custom_mask_copy": CRASH}
VERDICT = {judge.MATCHED: MATCHED, judge.HOLDS_ONLY_IF: HOLDS_ONLY_IF, judge.ERROR: ERROR}


def check_consumers(index: SourceIndex, report: AuditReport, program: Program | None = None) -> None:
    """``program``: the buffer stage's, so the package is read and parsed once."""
    program = program or Program(index, PACKAGE)
    for rows in (_page_table_rows(program), _custom_mask_rows(program)):
        for row in rows:
            report.add(row)


# --- shared ------------------------------------------------------------------------------------

def site_rows(report: AuditReport, kind: str, owner: str, where: str, check: str, make) -> None:
    """The rows ``make()`` gives for one site, timed together; the audit's own failure there is
    an error row (``consumer.<kind>[<owner>@<where>]``), never a traceback."""
    t0 = time.perf_counter()
    try:
        rows = make()
    except Exception as e:  # noqa: BLE001 - the audit's own failure is an error row
        rows = [Row(f"consumer.{kind}[{owner}@{where}]", f"{owner} ({where})", check, "z3", ERROR,
                    f"the consumer check failed: {type(e).__name__}: {e}")]
    for row in rows:
        row.seconds = time.perf_counter() - t0
        report.add(row)


# --- page tables -------------------------------------------------------------------------------

def fill_sites(program: Program, fill_params=FILL_PARAMS):
    """(fill, its parameters, call site) of every call of a fill from a function that is not a
    fill itself: a fill launching its own kernel with its parameters passes them through, and
    its callers' rows judge them with the table they choose."""
    fills = _fill_functions(program, fill_params)
    keys = {fill.key for fill, _ in fills}
    for fill, params in fills:
        for site in program.calls_to(fill.name):
            if site.caller.key not in keys:
                yield fill, params, site


def _fill_functions(program: Program, fill_params=FILL_PARAMS):
    out = []
    for fn in functions_mentioning(program, fill_params[2]):
        params = [a for a in fn.params() if a != "self"]
        if all(x in params for x in fill_params):
            out.append((fn, params))
    return out


def not_step(value) -> bool:
    """A delta that is not the draft step's (those are :mod:`.draft_decode_offset`'s rows)."""
    return not (isinstance(value, Num) and mentions(value.term, STEP))


def _page_table_rows(program: Program, fill_params=FILL_PARAMS, tracer_cls=MetadataTracer,
                     columns=spec.page_table_columns_read, kind="page_table", keep=not_step,
                     reported=PAGE_TABLE_REPORTED) -> list[Row]:
    """``fill_params``: the fill's (table, clamp, delta) parameter names; ``columns``: the
    consumer contract giving the columns read (the delta is its second argument); ``kind``: the
    row id's prefix; ``keep``: which traced delta values the rows judge (all but the draft
    step's by default; a call none of whose deltas is kept gives no row); ``reported``: the
    counterexample's quantities."""
    rows = []
    for fill, params, site in fill_sites(program, fill_params):
        for self_val in selves(program, site.caller):
            t0 = time.perf_counter()
            try:
                row = _page_table_row(program, fill, params, site, self_val, fill_params, tracer_cls, columns,
                                      kind, keep, reported)
            except Exception as e:  # noqa: BLE001 - the audit's own failure is an error row
                row = Row(f"consumer.{kind}[{site.caller.qual}]", site.caller.where,
                          "page-table columns read fit the row", "z3", ERROR,
                          f"the consumer check failed: {type(e).__name__}: {e}")
            if row is None:
                continue
            row.seconds = time.perf_counter() - t0
            rows.append(row)
    return rows


def _page_table_row(program, fill, params, site, self_val, fill_params=FILL_PARAMS, tracer_cls=MetadataTracer,
                    columns=spec.page_table_columns_read, kind="page_table", keep=not_step,
                    reported=PAGE_TABLE_REPORTED) -> Row | None:
    owner = self_val.cls.name if self_val is not None else site.caller.qual
    where = f"{site.caller.rel}:{site.call.lineno}"
    row_id = f"consumer.{kind}[{owner}@{where}]"
    subject = f"{owner} ({where}) -> {fill.name} -> attention(page_table, cache_seqlens = seq_len + delta)"
    check = f"the page-table columns the attention kernel reads (spec.{columns.__name__}) fit the filled row"
    tracer = tracer_cls(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    frame = tracer.top_frame(site.caller, self_val)
    table_param, clamp_param, delta_param = fill_params
    exprs = {name: call_argument(site.call, params, name) for name in fill_params}
    if exprs[delta_param] is None or exprs[clamp_param] is None:
        return Row(row_id, subject, check, "ast", UNKNOWN, f"the call passes no {delta_param} / {clamp_param} "
                                                           f"(parameters {params})")
    tables = _table_widths(program, site, self_val, exprs[table_param], where, tracer_cls)
    judged, seen = [], set()
    settings = functools.cache(lambda: longest_settings(program, self_val))
    traced_deltas = resolve(tracer, exprs[delta_param], frame, Path())
    for dv, dp in traced_deltas:
        if not keep(dv):
            continue
        for wv, wp in resolve(tracer, exprs[clamp_param], frame, dp):
            if not isinstance(dv, Num) or not isinstance(wv, Num):
                bad = dv if not isinstance(dv, Num) else wv
                judged.append((judge.Judgement("unknown", detail=f"not traced to a number: {bad}"), None))
                continue
            # A clamp of the batch's longest KV length: what sglang sets it to, under its own names;
            # it bounds the request, not the row, so only a traced table's width can judge it.
            if (batch_bounded(dv.term) or batch_bounded(wv.term)) and not tables:
                judged.append((judge.Judgement("unknown", detail=LONGEST_UNTRACED), None))
                continue
            for width, note in tables or [(None, "")]:
                limit = wv.term if width is None else spec.smin(wv.term, width)
                ident = (term_ids([dv.term, limit]), term_ids(list(wp.conds)))
                if ident in seen:
                    continue
                seen.add(ident)
                readings = longest_readings(settings, SEQ, dv.term, (dv.term, wv.term))
                if not readings:
                    judged.append((judge.Judgement("unknown", detail=LONGEST_UNSET), None))
                for given in readings:
                    j = judge_page_table(dv.term, limit, list(wp.conds), row_id, columns,
                                         reported_with(reported, (dv.term, wv.term, *given.values())), given=given)
                    if j.verdict != judge.INFEASIBLE:
                        judged.append((j, (dv.term, wv.term, note, limit)))
    if not judged and traced_deltas and all(not keep(v) for v, _ in traced_deltas):
        return None   # every delta is another kind's
    if not judged:
        return Row(row_id, subject, check, "ast", UNKNOWN, "no path to the call is consistent with the preconditions")
    # A path not traced outranks a proof on the others: the row is then not `matched`.
    order = [OVERREAD, judge.ERROR, judge.HOLDS_ONLY_IF, "unknown", judge.MATCHED]
    judged.sort(key=lambda e: order.index(e[0].verdict) if e[0].verdict in order else 1)
    j, info = judged[0]
    if j.verdict == "unknown":
        return Row(row_id, subject, check, "ast", UNKNOWN, j.detail)
    status = REFUTED_STATUS["page_table"] if j.verdict == OVERREAD else VERDICT.get(j.verdict, ERROR)
    delta, clamp, note, limit = info
    detail = j.detail
    if j.condition:
        detail = f"holds only if {j.condition}: {detail}"
    detail += (f" [delta = {z3.simplify(delta) if z3.is_expr(delta) else delta}, fill clamped to max_seq_pages = "
               f"{z3.simplify(clamp) if z3.is_expr(clamp) else clamp}{note}]")
    others = sorted({f"delta {e[1][0]}: {e[0].verdict}" if e[1] is not None else f"untraced: {e[0].detail[:160]}"
                     for e in judged[1:]})
    if others:
        detail += " | other paths: " + "; ".join(others)
    row = Row(row_id, subject, check, "z3", status, detail, j.counterexample, size=j.size, required=j.required)
    if status in (OVERREAD, HOLDS_ONLY_IF) and j.counterexample:
        replay_read(row, delta, limit, j.counterexample, reported_with(reported, (delta, clamp)))
    return row


def replay_read(row: Row, delta, width, values: dict, reported=PAGE_TABLE_REPORTED,
                columns=spec.page_table_columns_read) -> None:
    """A stand-in for the attention kernel (FlashAttention cannot run here): a table of the
    counterexample's ``bs`` rows of ``width`` columns, read the way the kernel is told to,
    ``page_table[b, 0:ceil((seq_len + delta) / page_size)]`` as flat offsets; the last row's
    read past its end is past the table, and torch's indexing says so."""
    import torch

    d, w = judge.evaluate(delta, values, reported), judge.evaluate(width, values, reported)
    if d is None or w is None:
        row.detail += "; no replay: the width or delta is not concrete at the counterexample"
        return
    cols = columns(values["seq_len"], d, values["page_size"])
    table = torch.zeros(values["bs"], w, dtype=torch.int32)
    last = values["bs"] - 1
    row.replay = {**values, "delta": d, "width": w, "columns_read": cols}
    row.method = "z3 + stand-in read"
    try:
        table.view(-1)[last * w + torch.arange(cols)]
    except IndexError as e:
        row.detail += (f"; stand-in read of {cols} column(s) of row {last} in a {values['bs']} x {w} table: "
                       f"IndexError: {e}")
        return
    row.detail += f"; the stand-in read of {cols} column(s) stayed in a {values['bs']} x {w} table"
    row.status = ERROR   # the model says it reads past the row, the stand-in does not: the audit's model is off


def _table_widths(program, site, self_val, expr, where, tracer_cls) -> list:
    """Widths of the 2-D page-table allocations the ``page_table`` argument traces to, through a
    metadata record's field and a graph dict's entry (:func:`.site_trace.traced_tables`); empty
    when the trail ends (the fill's clamp is then the width judged)."""
    if expr is None:
        return []
    obj, field = (expr.value, expr.attr) if isinstance(expr, ast.Attribute) else (expr, None)
    out = []
    for v, _, _ in traced_tables(program, site.caller, self_val, obj, field, site.call.lineno, where,
                                 tracer_cls).values():
        if isinstance(v, Alloc) and v.dims and isinstance(v.dims[-1], (int, z3.ArithRef)) and not v.view:
            out.append((v.dims[-1], f"; the table allocated at {v.site} ({v.text})"))
    return out


def page_table_contract(delta, width, conds, given: dict | None = None) -> dict:
    """The judgement's hypotheses: the contract, the traced path's conditions (``conds``,
    ``path_<i>``) and facts a stage read from sglang (``given``, under their own names)."""
    hyps = {**labelled(spec.context_ok(C)), **labelled(spec.tree_shape_ok(K, D, n)),
            "page_size_positive": page >= 1, "seq_len_nonneg": SEQ >= 0,
            # sglang admits a request up to max_req_len = min(context_len - 1, ...) tokens.
            "admitted_below_context": SEQ <= C - 1, "delta_nonneg": delta >= 0}
    for i, c in enumerate(conds):
        hyps[f"path_{i}"] = c
    hyps.update(given or {})
    return hyps


# What a refuted page-table judgement means: (a sentence, the verb phrase after "a request ...").
READ_PAST = ("the kernel reads past the filled row", "makes the kernel read past the filled row")


def judge_page_table(delta, width, conds, name="page_table", columns=spec.page_table_columns_read,
                     reported=PAGE_TABLE_REPORTED, past=READ_PAST, given: dict | None = None) -> judge.Judgement:
    """The columns read for one request (``columns(seq_len, delta, page_size)``, by default
    ``cache_seqlens = seq_len + delta``) against ``width`` filled columns, through the core
    (``past``: what a refutation means, said two ways; a writer judged the same way has its own)."""
    goal = columns(SEQ, delta, page) <= width
    required = f"{z3.simplify(columns(SEQ, delta, page))} columns"
    size = str(z3.simplify(width)) if z3.is_expr(width) else str(width)
    hyps = page_table_contract(delta, width, conds, given)
    try:
        done = judge.settled(name, goal, hyps, required, size, "proved for all inputs under")
        if done is not None:
            return done
        cex = judge.counterexample(hyps, [], goal, tuple(name for name, _ in reported), reported=reported,
                                   prefs=[n >= 2])
        if cex is not None:
            cex = {"bs": 1, **cex}
        room = {"request_room": SEQ + delta <= C}
        try:
            core.check(f"{name}/fits_with_room", goal, hyps={**hyps, **room})
        except core.Refuted:
            return judge.Judgement(OVERREAD, required, size, counterexample=cex,
                                   detail="refuted for a request admitted with seq_len <= C - 1, even with "
                                          f"seq_len + delta <= C: {past[0]}")
        return judge.Judgement(judge.HOLDS_ONLY_IF, required, size, condition="seq_len[b] + delta <= max_context_len",
                               counterexample=cex,
                               detail=f"a request admitted with seq_len <= C - 1 {past[1]} (the next request's row, or "
                                      f"past the table); e.g. {cex}")
    except core.Unknown as e:
        return judge.Judgement(judge.ERROR, required, size, detail=f"the solver gave no verdict: {e}")


# --- the verify mask copied into a backend's custom-mask buffer ----------------------------------


def _mask_copies(program: Program):
    """(function, statement, destination expression) of every slice copy of a ``custom_mask``."""
    out = []
    for fn, node in attention_nodes(program, "custom_mask", whole_words=False):
        dest = _copy_destination(node)
        if dest is not None:
            out.append((fn, node, dest))
    return out


def _is_mask(expr) -> bool:
    return (isinstance(expr, ast.Attribute) and expr.attr == "custom_mask") or \
        (isinstance(expr, ast.Name) and expr.id == "custom_mask")


def _sliced(target):
    if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Slice) and target.slice.lower is None \
            and target.slice.step is None and target.slice.upper is not None:
        return target.value
    return None


def _copy_destination(node):
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and _is_mask(node.value):
        return _sliced(node.targets[0])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copy_" \
            and node.args and _is_mask(node.args[0]):
        return _sliced(node.func.value)
    return None


def _custom_mask_rows(program: Program) -> list[Row]:
    rows = []
    for fn, node, dest in _mask_copies(program):
        where = f"{fn.rel}:{node.lineno}"
        for self_val in selves(program, fn):
            t0 = time.perf_counter()
            owner = self_val.cls.name if self_val is not None else fn.qual
            found = traced_allocations(program, fn, self_val, dest, where)
            if not found:
                rows.append(Row(f"consumer.custom_mask[{owner}@{where}]", f"{owner} ({where})",
                                "trace the custom-mask copy's destination to its allocation", "ast", UNKNOWN,
                                f"`{ast.unparse(dest)}` was not traced to an allocation"))
                continue
            for a, p in found.values():
                rows.append(_custom_mask_row(owner, where, a, p, _pinned_mode(p), time.perf_counter() - t0))
    return rows


def _pinned_mode(path: Path):
    """The mask layout the allocation was made for, when the path fixed it (a VerifyMask's
    ``mode``): the mask copied in is then in that layout.  FULL_MASK otherwise."""
    for key, value in path.pins:
        if isinstance(key, tuple) and len(key) > 2 and key[2] == "mode" and isinstance(value, EnumMember) \
                and value.member in spec.TreeMaskMode.__members__:
            return spec.TreeMaskMode[value.member]
    return spec.TreeMaskMode.FULL_MASK


def _custom_mask_row(owner, where, a: Alloc, path: Path, mode, seconds) -> Row:
    holder = (a.holder or a.func.split(".")[-1]).removeprefix("self.")
    row_id = f"consumer.custom_mask[{owner}.{holder}{a.view}/{mode.name}@{where}]"
    subject = f"{owner} ({a.site}) -> copy at {where} -> attention(custom_mask, mask_indptr)"
    check = "the verify mask copied in and read through mask_indptr (spec.custom_mask_batch_read) fits the buffer"
    bad = next((d for d in a.dims if not isinstance(d, (int, z3.ArithRef))), None)
    if bad is not None:
        return Row(row_id, subject, check, "ast", UNKNOWN, f"a dimension is {bad}", allocation=f"{a.site} {a.text}")
    j = judge.judge("custom_mask_copy", a.dims, list(path.conds), bindings=bindings.BINDINGS, mode=mode,
                    name=row_id)
    if j.verdict == judge.INFEASIBLE:
        status, detail = MATCHED, "no path to the copy is consistent with the preconditions"
    else:
        status = REFUTED_STATUS["custom_mask_copy"] if j.verdict == judge.OVERRUN else VERDICT.get(j.verdict, ERROR)
        detail = (f"holds only if {j.condition}: " if j.condition else "") + j.detail
    row = Row(row_id, subject, check, "z3", status, detail, j.counterexample, seconds=seconds,
              allocation=f"{a.site} {a.text}", size=j.size, required=j.required)
    if status in (CRASH, HOLDS_ONLY_IF) and j.counterexample:
        _replay_copy(row, a, mode, j.counterexample)
    return row


def _replay_copy(row: Row, a: Alloc, mode, values: dict) -> None:
    """The copy at the counterexample, run with torch on the CPU: a buffer of the allocation's
    size, the tree build's mask of the batch's size (spec), sglang's slice assignment."""
    import torch

    dims = [judge.evaluate(d, values) for d in a.dims]
    if any(d is None for d in dims):
        row.detail += "; no replay: the allocation's size is not concrete at the counterexample"
        return
    numel = 1
    for d in dims:
        numel *= d
    cells = judge.evaluate(judge.custom_mask_need(mode), values)
    row.replay = {"buffer_numel": numel, "mask_numel": cells, **values}

    def assign(buf, src):
        buf[: src.shape[0]] = src
    replay_slice_copy(row, numel, cells, torch.uint8, assign, f"buf[:{cells}] = mask into {numel} cells",
                      f"buffer {numel} >= mask {cells} cells")


def replay_slice_copy(row: Row, numel: int, count: int, dtype, copy, done: str, quiet: str) -> None:
    """``copy(buf, src)`` with torch on the CPU, a buffer of ``numel`` entries and a source of
    ``count``: its RuntimeError is the evidence (``done`` says what ran); no error where the
    model says it raises is the audit's own error (``quiet`` says why it fit)."""
    import torch

    buf, src = torch.zeros(numel, dtype=dtype), torch.ones(count, dtype=dtype)
    row.method = "z3 + torch"
    try:
        copy(buf, src)
    except RuntimeError as e:
        row.detail += f"; replayed with torch: {done} raises RuntimeError: {str(e).splitlines()[0]}"
        return
    row.detail += f"; the torch replay did not raise ({quiet})"
    if row.status == CRASH:
        row.status = ERROR   # the model says it raises, torch does not: the audit's own model is off
