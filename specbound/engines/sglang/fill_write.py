"""Consumer rows ``consumer.page_table_fill_write[<class>.<table>@<call>]``: a fused page-table fill
whose clamp is the batch's longest KV length, not the table's width (sglang's
``XPUAttentionBackend``: ``max_seq_pages = ceil(metadata.max_seq_len_k / page_size)``), so its
stores are bounded by the request's pages alone.

The contract (:func:`specbound.spec.fill_columns_stored`): the fill stores ``min(ceil((seq_len +
delta) / P), max_seq_pages)`` columns of a row, never comparing them with the row's width.  The
reader rows of the same call (:mod:`.consumers`, ``consumer.page_table``) judge what attention
reads; these judge what the fill writes.

* A call of a fill (:func:`.consumers.fill_sites`: ``page_table``, ``max_seq_pages`` and
  ``seq_len_delta`` or ``seqlen_offset``) is a site when its clamp is traced to the batch's
  longest request (:class:`.site_trace.MetadataTracer`): ``<x>.max_seq_len_k``, at least the
  request's ``seq_len + delta`` and at most ``C - 1 + delta`` when the class sets it to
  ``max(seq_lens) + delta`` (XPU: ``max(seq_lens) + kv_len_offset``, the offset the fill is
  given, ``xpu_backend.py:1770``), else each value it sets (:func:`.site_trace.longest_readings`),
  or ``seq_lens.max().item()`` (FlashAttention before 0.5.15).  A
  clamp traced to anything else (the table's width) is the reader rows' business: no row here.
* ``<x>.num_tokens_per_req`` is read as ``n`` and ``<x>.speculative_step_id`` as the draft
  step; a delta not traced is named in the detail and keeps the row from ``matched``.
* The table is followed through the metadata record and graph dict
  (:func:`.site_trace.traced_tables`); judged like the page-table build
  (:func:`.consumers.judge_page_table`, a write past the row): ``matched``, ``holds only if
  seq_len[b] + delta <= max_context_len`` or ``overrun``, replayed by the package's own fill under
  the checked interpreter.
"""

from __future__ import annotations

import ast
import functools

import z3

from specbound import spec


from specbound.audit import judge
from specbound.audit.extract import Found, is_triton_jit
from specbound.audit.kernels import launch_finding, record_replay
from specbound.audit.program import Program
from specbound.audit.report import ERROR, HOLDS_ONLY_IF, MATCHED, OVERREAD, OVERRUN, UNKNOWN, AuditReport, Row
from specbound.audit.trace_values import Alloc, Num, Path
from . import bindings
from .consumers import FILL_PARAMS, LONGEST_UNSET, PAGE_TABLE_REPORTED, SEQ, fill_sites, judge_page_table, site_rows
from .offset_page_table import OFFSET_FILL_PARAMS
from .page_table_build import _Build
from .site_trace import MetadataTracer, batch_bounded, call_argument, longest_readings, longest_settings, reported_with, \
    resolve, selves, traced_tables

KIND = "page_table_fill_write"
VERDICT = {judge.MATCHED: MATCHED, judge.HOLDS_ONLY_IF: HOLDS_ONLY_IF, OVERREAD: OVERRUN}
ORDER = (OVERRUN, ERROR, HOLDS_ONLY_IF, UNKNOWN, MATCHED)
FILL_PAST = ("the fill stores past the row", "makes the fill store past its row")
CHECK = "the pages the fill stores per row (spec.fill_columns_stored, clamped by the batch's longest request) " \
        "stay in the table's row"


def check_fill_writes(program: Program, report: AuditReport, replay: bool = True) -> None:
    """``replay``: run the package's fill at each finding's counterexample."""
    for params_of in (FILL_PARAMS, OFFSET_FILL_PARAMS):
        for fill, params, site in fill_sites(program, params_of):
            for self_val in selves(program, site.caller):
                owner = self_val.cls.name if self_val is not None else site.caller.qual
                where = f"{site.caller.rel}:{site.call.lineno}"
                site_rows(report, KIND, owner, where, CHECK,
                          lambda: _rows(program, fill, params, params_of, site, self_val, owner, where, replay))


def _rows(program, fill, params, params_of, site, self_val, owner, where, replay) -> list[Row]:
    table_param, clamp_param, delta_param = params_of
    tracer = MetadataTracer(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    frame = tracer.top_frame(site.caller, self_val)
    exprs = {name: call_argument(site.call, params, name) for name in params_of}
    if exprs[clamp_param] is None or exprs[delta_param] is None:
        return []
    clamps = [(v.term, p) for v, p in resolve(tracer, exprs[clamp_param], frame, Path())
              if isinstance(v, Num) and batch_bounded(v.term)]
    if not clamps:
        return []   # a clamp of its own width: the reader rows judge the call
    subject = f"{owner} ({where}) -> {fill.name} (stores min(cdiv(seq_len + delta, P), max_seq_pages) pages)"
    table = exprs[table_param]
    if not isinstance(table, ast.Attribute):
        return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, CHECK, "ast", UNKNOWN,
                    f"the page_table argument `{ast.unparse(table)}` is not a record's field")]
    found = traced_tables(program, site.caller, self_val, table.value, table.attr, site.call.lineno, where)
    allocs = [(v, p, label) for v, p, label in found.values() if isinstance(v, Alloc) and len(v.dims) == 2
              and isinstance(v.dims[-1], (int, z3.ArithRef))]
    if not allocs:
        return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, CHECK, "ast", UNKNOWN,
                    f"`{ast.unparse(table)}` was not traced to a 2-D allocation")]
    deltas = resolve(tracer, exprs[delta_param], frame, Path())
    runner = package_runner(program, fill) if replay else None
    settings = functools.cache(lambda: longest_settings(program, self_val))
    return [_row(owner, where, subject, a, p, label, clamps, deltas, runner, settings) for a, p, label in allocs]


def _row(owner, where, subject, a, path, label, clamps, deltas, runner, settings) -> Row:
    holder = (a.holder or label or a.func.split(".")[-1]).removeprefix("self.")
    row_id = f"consumer.{KIND}[{owner}.{holder}{a.view}@{where}]"
    width = a.dims[-1]
    judged, untraced = [], set()
    for dv, dp in deltas:
        if not isinstance(dv, Num):
            untraced.add(getattr(dv, "reason", str(dv))[:120])
            continue
        for clamp, cp in clamps:
            terms = (dv.term, clamp)
            readings = longest_readings(settings, SEQ, dv.term, terms)
            if not readings:
                untraced.add(LONGEST_UNSET)
            for given in readings:
                reported = reported_with(PAGE_TABLE_REPORTED, (*terms, *given.values()))
                j = judge_page_table(dv.term, width, [*path.conds, *dp.conds, *cp.conds], row_id,
                                     lambda s, d, p, clamp=clamp: spec.fill_columns_stored(s, d, p, clamp),
                                     reported, past=FILL_PAST, given=given)
                if j.verdict != judge.INFEASIBLE:
                    judged.append((j, dv.term, reported))
    if not judged:
        return Row(row_id, subject, CHECK, "ast", UNKNOWN, "no traced delta is consistent with the preconditions"
                   + (f" (untraced: {'; '.join(sorted(untraced))})" if untraced else ""))
    judged.sort(key=lambda e: ORDER.index(VERDICT.get(e[0].verdict, ERROR)))
    j, delta, reported = judged[0]
    status = VERDICT.get(j.verdict, ERROR)
    detail = (f"holds only if {j.condition}: " if j.condition else "") + j.detail
    if status == MATCHED and untraced:   # a delta not traced outranks a proof on the others
        status, detail = UNKNOWN, f"a delta was not traced; the traced ones: {detail}"
    detail += f" [delta = {z3.simplify(delta) if z3.is_expr(delta) else delta}; the table allocated at {a.site}]"
    others = sorted({f"delta {z3.simplify(d) if z3.is_expr(d) else d}: {VERDICT.get(x.verdict, x.verdict)}"
                     for x, d, _ in judged[1:]})
    if others:
        detail += " | other deltas: " + "; ".join(others)
    if untraced:
        detail += " | not traced: " + "; ".join(sorted(untraced))
    row = Row(row_id, subject, CHECK, "z3", status, detail, j.counterexample, allocation=f"{a.site} {a.text}",
              size=j.size, required=j.required)
    if status in (OVERRUN, HOLDS_ONLY_IF) and j.counterexample and runner is not None:
        runner.replay(row, width, {**j.counterexample, "delta": judge.evaluate(delta, j.counterexample, reported)})
    return row


def package_runner(program: Program, fill, runner=None):
    """The package's function ``fill`` and the kernel of its file it launches, defined under the
    checked interpreter on first use by ``runner`` (a :class:`_Build`; the fill's by default); None
    when it launches no kernel of its file."""
    tree = program.index.tree(fill.path)
    jits = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef) and is_triton_jit(s)} if tree else {}
    launched = [c.func.value.id for c in ast.walk(fill.node) if isinstance(c, ast.Call)
                and isinstance(c.func, ast.Subscript) and isinstance(c.func.value, ast.Name) and c.func.value.id in jits]
    if not launched:
        return None
    found = Found(fill.name, fill.path, fill.rel, fill.node, program.index.text(fill.path), False)
    return (runner or _Fill)(program, found, jits[launched[0]])


class _Fill(_Build):
    def replay(self, row: Row, width, values: dict) -> None:
        """The counterexample's request filled by the package's own function into a table of the
        allocation's width, clamped by its own pages (it is the batch's longest)."""
        import torch

        fill = self._load()
        w = judge.evaluate(width, values, PAGE_TABLE_REPORTED)
        if fill is None or w is None:
            row.detail += f"; no replay: {self.why or 'the width is not concrete at the counterexample'}"
            return
        bs, seq, d, p = values.get("bs", 1), values["seq_len"], values["delta"], values["page_size"]
        pages = spec.page_table_columns_read(seq, d, p)
        feed = {"cache_seqlens_int32": torch.zeros(bs, dtype=torch.int32),
                "cu_seqlens_k": torch.zeros(bs + 1, dtype=torch.int32),
                "page_table": torch.zeros((bs, w), dtype=torch.int32),
                "req_to_token": torch.arange(bs * max(pages * p, 1), dtype=torch.int32).reshape(bs, -1),
                "req_pool_indices": torch.arange(bs, dtype=torch.int64), "max_seq_pages": pages,
                "seq_lens": torch.full((bs,), seq, dtype=torch.int32), "seq_len_delta": d, "seqlen_offset": d,
                "page_size": p}
        kwargs = self.bind(feed, row)
        if kwargs is None:
            return
        f = launch_finding(lambda: fill(**kwargs))
        row.replay = {**values, "width": w, "pages": pages}
        record_replay(row, f, f"sglang's {self.build.name}", self.build.where,
                      f"storing {pages} page(s) of a {seq + d}-token request into a {bs} x {w} table")
