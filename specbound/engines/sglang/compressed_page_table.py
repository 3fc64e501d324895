"""Consumer rows ``consumer.compressed_page_table[<class>.<table>@<allocation>]``: the CUDA-graph
page table of a compressed sparse attention (sglang's Qwen QSA), one page per
``compressed_page_size`` compressed blocks of ``compress_ratio`` tokens, read in target verify for
``floor((seq_len + n) / ratio)`` blocks (:func:`specbound.spec.compressed_pages_read`).

* A table is a 2-D allocation in a class's ``init_cuda_graph_state`` assigned to a name holding
  ``compressed_page_table``.  Its width is traced with ``<x>.compress_ratio`` read as the ratio,
  ``<x>.<...>compressed_page_size`` as the blocks a page and ``math.ceil(a / b)`` as ``ceil``.
* sglang refuses ``n > ratio`` (a ``raise`` under ``if <draft tokens> > self.compress_ratio`` in
  the class); found, ``n <= ratio`` is a precondition, otherwise not.
* Judged like the other page tables (:func:`.consumers.judge_page_table`, a request admitted
  with ``seq_len <= C - 1``): ``matched``, ``holds only if`` or ``overread``; a finding is shown by
  the stand-in read at the counterexample (the indexer cannot run here).
"""

from __future__ import annotations

import ast

import z3

from specbound import spec
from specbound.proofs.model import n

from specbound.audit import judge
from specbound.audit.program import Program
from specbound.audit.report import ERROR, HOLDS_ONLY_IF, MATCHED, OVERREAD, UNKNOWN, AuditReport, Row
from specbound.audit.trace import Tracer
from specbound.audit.trace_values import Num, Path
from . import bindings
from .consumers import PAGE_TABLE_REPORTED, judge_page_table, replay_read, site_rows
from .sparse_page_table import _table_allocations
from .site_trace import attention_nodes, resolve, selves

KIND = "compressed_page_table"
RATIO, GROUP = z3.Int("compress_ratio"), z3.Int("compressed_page_size")
REPORTED = (*PAGE_TABLE_REPORTED, ("compress_ratio", RATIO), ("compressed_page_size", GROUP))
VERDICT = {judge.MATCHED: MATCHED, judge.HOLDS_ONLY_IF: HOLDS_ONLY_IF, OVERREAD: OVERREAD}
CHECK = ("the compressed pages a target-verify token reads (spec.compressed_pages_read) fit the graph table's row")


class _CompressedTracer(Tracer):
    def _resolve(self, e, frame, path, receiver):
        if isinstance(e, ast.Attribute) and not receiver:
            if e.attr == "compress_ratio":
                return [(Num(RATIO), path)]
            if e.attr.endswith("compressed_page_size"):
                return [(Num(GROUP), path)]
        if isinstance(e, ast.Call) and not receiver and len(e.args) == 1 and not e.keywords \
                and ast.unparse(e.func) == "math.ceil" and isinstance(e.args[0], ast.BinOp) \
                and isinstance(e.args[0].op, ast.Div):
            return self._combine(e.args[0].left, e.args[0].right, spec.cdiv, frame, path)
        return super()._resolve(e, frame, path, receiver)

    def _combine(self, left, right, op, frame, path):
        out = []
        for a, pa in self._resolve(left, frame, path, False):
            for b, pb in self._resolve(right, frame, pa, False):
                if isinstance(a, Num) and isinstance(b, Num):
                    out.append((Num(op(a.term, b.term)), pb))
        return out


def _refuses_wide_trees(program: Program, cls) -> str | None:
    """``file:line`` of a ``raise`` under ``if <draft tokens> > self.compress_ratio`` in the class."""
    for method in program.visible_methods(cls).values():
        for node in program.walk(method.node):
            t = node.test if isinstance(node, ast.If) else None
            if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Gt) \
                    and ast.unparse(t.comparators[0]) == "self.compress_ratio" and "draft" in ast.unparse(t.left) \
                    and any(isinstance(s, ast.Raise) for s in node.body):
                return f"{method.rel}:{node.lineno}"
    return None


def check_compressed_page_tables(program: Program, report: AuditReport, replay: bool = True) -> None:
    """``replay``: the stand-in read at each finding's counterexample."""
    inits = {fn.key: fn for fn, _ in attention_nodes(program, KIND, whole_words=False)
             if fn.name == "init_cuda_graph_state"}
    for init in inits.values():
        tables = [t for t in _table_allocations(init) if KIND in t[0]]
        for self_val in selves(program, init) if tables else ():
            if self_val is None:
                continue
            owner = self_val.cls.name
            for name, call, width_expr in tables:
                where = f"{init.rel}:{call.lineno}"
                site_rows(report, KIND, owner, where, CHECK,
                          lambda: [_row(program, self_val, init, name, call, width_expr, where, replay)])


def _row(program, self_val, init, name, call, width_expr, where, replay) -> Row:
    owner = self_val.cls.name
    row_id = f"consumer.{KIND}[{owner}.{name.removeprefix('self.')}@{where}]"
    guard = _refuses_wide_trees(program, self_val.cls)
    subject = (f"{owner} ({where}) -> compressed sparse indexer (floor((seq_len + n) / ratio) blocks"
               f"{'; n > ratio refused at ' + guard if guard else ''})")
    allocation = f"{where} {ast.unparse(call)}"
    tracer = _CompressedTracer(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    frame = tracer.top_frame(init, self_val)
    given = {"ratio_positive": RATIO >= 1, "page_group_positive": GROUP >= 1,
             **({"sglang_refuses_n_above_ratio": n <= RATIO} if guard else {})}
    judged = []
    for wv, wp in resolve(tracer, width_expr, frame, Path(trail=(where,))):
        if not isinstance(wv, Num):
            return Row(row_id, subject, CHECK, "ast", UNKNOWN,
                       f"the width `{ast.unparse(width_expr)}` was not traced to a number: {wv}", allocation=allocation)
        j = judge_page_table(n, wv.term, list(wp.conds), row_id,
                             lambda s, d, p: spec.compressed_pages_read(s, d, RATIO, GROUP), REPORTED, given=given)
        if j.verdict != judge.INFEASIBLE:
            judged.append((j, wv.term))
    if not judged:
        return Row(row_id, subject, CHECK, "ast", UNKNOWN, "no path to the allocation is consistent with the "
                   "preconditions", allocation=allocation)
    order = [OVERREAD, judge.ERROR, judge.HOLDS_ONLY_IF, judge.MATCHED]
    j, width = min(judged, key=lambda e: order.index(e[0].verdict) if e[0].verdict in order else 1)
    status = VERDICT.get(j.verdict, ERROR)
    detail = (f"holds only if {j.condition}: " if j.condition else "") + j.detail
    detail += f" [width = {' '.join(str(z3.simplify(width)).split())}; n <= ratio {'a precondition (sglang refuses more)' if guard else 'not checked'}]"
    row = Row(row_id, subject, CHECK, "z3", status, detail, j.counterexample, size=j.size, required=j.required,
              allocation=allocation)
    if status in (OVERREAD, HOLDS_ONLY_IF) and j.counterexample and replay:
        x = j.counterexample
        replay_read(row, n, width, {**x, "page_size": 1}, REPORTED,
                    columns=lambda s, d, p: spec.compressed_pages_read(s, d, x["compress_ratio"],
                                                                       x["compressed_page_size"]))
    return row
