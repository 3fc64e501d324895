"""Consumer rows ``consumer.expand_page_table[<class>@<call>]``: the draft-decode "expand"
page tables of topk > 1 under page_size > 1, written with ``scatter_``.

The contract (:func:`specbound.spec.expand_scatter_columns`): a *scatter fill* is a function
taking ``page_table``, ``cache_loc``, ``decode_length`` and ``page_size`` that calls
``scatter_`` (sglang's ``draft_decode_set_expand_metadata``); it writes, per branch, one
column per distinct page of the ``cache_loc`` columns it is handed, so the largest column
is ``ceil((last_page_len + cols) / page_size) - 1``.  At each call:

* ``cols``: the ``cache_loc`` argument's width, from the assignments to it that run before
  the call on every path (``x.view(-1, k)`` sets it to ``k``; ``cache_loc[:, :e]`` clamps it
  to ``e``);
* the width: the ``page_table`` argument traced to its allocation (a local tensor, or the
  ``"page_table"`` entry of the graph dict ``self.<attr>`` that ``metadata = self.<attr>[bs]``
  reads);
* ``self.speculative_step_id`` is the draft step, any of ``0 .. num_steps - 1``.

Judged through the core: ``matched``, or ``crash`` (an index past the row: torch's scatter
raises on the CPU and its CUDA kernel trips a device-side assert, so the server dies; nothing
is corrupted), replayed by running sglang's own fill, read from its source, on the CPU at the
counterexample.
"""

from __future__ import annotations

import ast
import copy
import time

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import D, K, labelled, n, page

from specbound.audit import judge
from specbound.audit.program import Program
from specbound.audit.report import CRASH, ERROR, MATCHED, UNKNOWN, AuditReport, Row
from specbound.audit.trace import Tracer
from specbound.audit.trace_values import Alloc, Num, Path, source_text
from .draft_extend import graph_dict_entries
from . import bindings
from .site_trace import ATTENTION, call_argument, dominating_statements, functions_mentioning, selves

FILL_PARAMS = ("page_table", "cache_loc", "decode_length", "page_size")
STEP, LAST_PAGE_LEN = z3.Ints("step last_page_len")
REPORTED = (("num_steps", D), ("page_size", page), ("step", STEP), ("last_page_len", LAST_PAGE_LEN))


def check_expand_scatter(program: Program, report: AuditReport, replay: bool = True) -> None:
    for fill in _fills(program):
        for site in program.calls_to(fill.name):
            if site.caller.key == fill.key or not site.caller.rel.startswith("srt/"):
                continue   # the fill itself, or sglang's own tests shipped in the wheel
            for self_val in selves(program, site.caller):
                t0 = time.perf_counter()
                owner = self_val.cls.name if self_val is not None else site.caller.qual
                where = f"{site.caller.rel}:{site.call.lineno}"
                try:
                    row = _row(program, fill, site, self_val, owner, where, replay)
                except Exception as e:  # noqa: BLE001 - the audit's own failure is an error row
                    row = Row(f"consumer.expand_page_table[{owner}@{where}]", f"{owner} ({where})",
                              "the expand scatter's columns fit the row", "z3", ERROR,
                              f"the consumer check failed: {type(e).__name__}: {e}")
                row.seconds = time.perf_counter() - t0
                report.add(row)


def _fills(program: Program):
    out = []
    for fn in functions_mentioning(program, "scatter_", whole_words=False, folder=ATTENTION):
        if all(x in fn.params() for x in FILL_PARAMS) and any(
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "scatter_"
                for c in ast.walk(fn.node)):
            out.append(fn)
    return out


class _StepTracer(Tracer):
    """The draft step is any of the steps: ``self.speculative_step_id`` is the variable ``step``."""

    def _resolve(self, e, frame, path, receiver):
        if source_text(e) == "self.speculative_step_id":
            return [(Num(STEP), path)]
        return super()._resolve(e, frame, path, receiver)


def _dominating(func_node, call: ast.Call, name: str) -> list:
    """Assignments ``name = ...`` that run before ``call`` on every path."""
    return [stmt.value for stmt in dominating_statements(func_node, call.lineno)
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == name]


def _source_columns(site, params) -> list:
    """The expressions whose minimum is the ``cache_loc`` argument's width, or [] if unknown."""
    arg = call_argument(site.call, params, "cache_loc")
    if not isinstance(arg, ast.Name):
        return []
    cols = []
    for value in _dominating(site.caller.node, site.call, arg.id):
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "view" \
                and len(value.args) == 2:
            cols = [value.args[1]]
        elif isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Tuple) and len(value.slice.elts) == 2 \
                and isinstance(value.slice.elts[1], ast.Slice) and value.slice.elts[1].upper is not None \
                and value.slice.elts[1].lower is None and cols:
            cols = [*cols, value.slice.elts[1].upper]
        else:
            cols = []
    return cols


def _table(program, site, params, self_val):
    """(allocation, path) of the ``page_table`` argument: a local tensor, or a graph dict's entry."""
    arg = call_argument(site.call, params, "page_table")
    tracer = _StepTracer(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name):
        source = (_dominating(site.caller.node, site.call, arg.value.id) or [None])[-1]
        if isinstance(source, ast.Subscript) and isinstance(source.value, ast.Attribute):
            attr = source.value.attr
            for fn, node, value in graph_dict_entries(program, attr, arg.attr):
                if node.targets[0].attr == attr and (self_val is None or fn.cls is not None):
                    tracer.steps = 0
                    return tracer.resolve(value, tracer.top_frame(fn, self_val), Path())
        return []
    if arg is None:
        return []
    tracer.steps = 0
    return tracer.resolve(arg, tracer.top_frame(site.caller, self_val), Path())


def _row(program, fill, site, self_val, owner, where, replay) -> Row:
    params = [a for a in fill.params() if a != "self"]
    row_id = f"consumer.expand_page_table[{owner}@{where}]"
    subject = f"{owner} ({where}) -> {fill.name} ({fill.where}) -> page_table.scatter_(1, positions, cache_loc)"
    check = "the columns the expand scatter writes (spec.expand_scatter_columns) fit the page-table row"
    col_exprs = _source_columns(site, params)
    tables = [(v, p) for v, p in _table(program, site, params, self_val)]
    if not col_exprs or not tables:
        what = "cache_loc's width" if not col_exprs else "the page table"
        return Row(row_id, subject, check, "ast", UNKNOWN, f"{what} was not traced at the call")
    tracer = _StepTracer(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    frame = tracer.top_frame(site.caller, self_val)
    cols = None
    for e in col_exprs:
        tracer.steps = 0
        vals = [v for v, _ in tracer.resolve(e, frame, Path())]
        if len(vals) != 1 or not isinstance(vals[0], Num):
            return Row(row_id, subject, check, "ast", UNKNOWN, f"`{source_text(e)}` was not traced to one number: {vals}")
        cols = vals[0].term if cols is None else spec.smin(cols, vals[0].term)
    a, path = tables[0]
    if len(tables) != 1 or not isinstance(a, Alloc) or not a.dims or not isinstance(a.dims[-1], (int, z3.ArithRef)):
        return Row(row_id, subject, check, "ast", UNKNOWN, f"the page table was not traced to one allocation: {tables}")
    width = a.dims[-1]
    goal = spec.expand_scatter_columns(LAST_PAGE_LEN, cols, page) <= width
    hyps = {**labelled(spec.tree_shape_ok(K, D, n)), "scatter_only_when_paged": page >= 2,
            "last_page_len_in_page": z3.And(0 <= LAST_PAGE_LEN, LAST_PAGE_LEN <= page - 1),
            "step_in_steps": z3.And(0 <= STEP, STEP <= D - 1),
            **{f"path_{i}": c for i, c in enumerate(path.conds)}}
    required = f"{z3.simplify(z3.IntVal(0) + spec.expand_scatter_columns(LAST_PAGE_LEN, cols, page))} columns"
    size = str(z3.simplify(z3.IntVal(0) + width))
    detail_tail = f" [cache_loc columns = {z3.simplify(z3.IntVal(0) + cols)}, the table allocated at {a.site}]"
    try:
        proof = core.check(f"{row_id}/fits", goal, hyps=hyps)
        return Row(row_id, subject, check, "z3", MATCHED, f"proved for all inputs under "
                   f"{', '.join(sorted(proof.assumptions))}" + detail_tail, allocation=f"{a.site} {a.text}",
                   size=size, required=required)
    except core.Refuted:
        pass
    except core.Unknown as e:
        return Row(row_id, subject, check, "z3", ERROR, f"the solver gave no verdict: {e}")
    cex = judge.counterexample(hyps, [], goal, [name for name, _ in REPORTED], reported=REPORTED, prefs=[])
    row = Row(row_id, subject, check, "z3", CRASH, "refuted: a branch's draft slots span more pages than the row "
              "has columns, so scatter_ gets an index past the row (the server dies on the error)" + detail_tail,
              cex, allocation=f"{a.site} {a.text}", size=size, required=required)
    if cex and replay:
        replay_scatter(row, program, fill, cols, width, cex)
    return row


def replay_scatter(row: Row, program: Program, fill, cols, width, values: dict) -> None:
    """sglang's own fill, compiled from its source with torch alone, run on the CPU: one
    branch whose ``cols`` draft slots start ``last_page_len`` slots into a page, into a table
    of ``width`` columns."""
    import torch

    c, w = judge.evaluate(cols, values, REPORTED), judge.evaluate(width, values, REPORTED)
    if c is None or w is None:
        row.detail += "; no replay: the widths are not concrete at the counterexample"
        return
    scope = {"torch": torch}
    func = copy.deepcopy(fill.node)
    func.decorator_list = []   # e.g. @torch.compile(backend=get_compiler_backend()): sglang's, not run here
    node = ast.fix_missing_locations(ast.Module(body=[func], type_ignores=[]))
    exec(compile(node, fill.where, "exec"), scope)  # noqa: S102 - sglang's function, torch only
    p, lpl = values["page_size"], values["last_page_len"]
    slots = torch.arange(4 * p + lpl, 4 * p + lpl + c, dtype=torch.int64).reshape(1, c)
    args = {"cache_seqlens_int32": torch.zeros(1, dtype=torch.int32),
            "page_table": torch.zeros(1, w, dtype=torch.int32),
            "last_page_lens": torch.tensor([lpl], dtype=torch.int32), "decode_length": values["step"] + 1,
            "cache_loc": slots, "topk": 1, "page_size": p}
    missing = [a for a in fill.params() if a not in args]
    row.replay = {**values, "cache_loc_columns": c, "width": w}
    row.method = "z3 + sglang's fill on torch (CPU)"
    if missing:
        row.detail += f"; no replay: {fill.name} takes {missing}"
        return
    try:
        scope[fill.name](**{a: args[a] for a in fill.params()})
    except RuntimeError as e:
        row.detail += (f"; replayed: sglang's {fill.name} ({fill.where}) scattering {c} slot(s) from page offset {lpl} "
                       f"into a 1 x {w} table raises RuntimeError: {str(e).splitlines()[0]}")
        row.evidence = str(e).splitlines()[0]
        return
    row.detail += "; the replay of sglang's fill did not raise"
    row.status = ERROR   # the model says it raises, torch does not: the audit's model is off
