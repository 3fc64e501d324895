"""Consumer rows ``consumer.sparse_page_table[<class>.<table>@<allocation>]``: the token-granular
CUDA-graph page tables of the sparse-attention backends (DSA / NSA), filled from
``req_to_token`` and read with ``cache_seqlens = seq_len + num_draft_tokens`` in target verify
and draft extend (:func:`specbound.spec.sparse_page_table_columns_read`).

* A *sparse fill* is a call that passes ``req_to_token=``, ``page_table_1=`` and the column
  bound ``max_seqlen_k=`` (or ``max_len=``) by keyword: sglang's fused DSA metadata fills
  (``kernels/ops/attention/dsa/metadata.py``), whose kernels store only ``offs_n < max_seqlen_k``
  and are handed the table's own width as that bound (``_graph_page_table_width``), so the fill
  stays in the table; the question is whether the table holds what the kernel reads.
* Per class that runs a sparse fill, every 2-D allocation in its ``init_cuda_graph_state``
  assigned to a name or dict key holding ``page_table`` (the compact ``real_page_table`` aside:
  sglang allocates it only when not speculating) is a row; its last dimension is traced, with
  ``<x>.req_to_token.shape[1]`` read as the least ``req_to_token`` row width
  (:func:`specbound.spec.req_to_token_row_width`, ``C + 4 + n``), and judged like the verify
  page tables (:func:`.consumers.judge_page_table`, delta ``n``): ``matched``, ``holds only if``
  or ``overread``, with the stand-in read at the counterexample.
"""

from __future__ import annotations

import ast
import time

import z3

from specbound import spec
from specbound.proofs.model import C, n

from specbound.audit import judge
from specbound.audit.program import Program
from specbound.audit.report import ERROR, HOLDS_ONLY_IF, OVERREAD, UNKNOWN, AuditReport, Row
from specbound.audit.trace import Tracer
from specbound.audit.trace_values import Num, Path
from . import bindings
from .consumers import PAGE_TABLE_REPORTED, REFUTED_STATUS, SEQ, VERDICT, judge_page_table
from .consumers import replay_read
from .site_trace import attention_nodes, resolve, selves

FILL_KEYWORDS = ("req_to_token", "page_table_1")
BOUND_KEYWORDS = ("max_seqlen_k", "max_len")
TABLE = "page_table"
COMPACT = "real_"
ALLOCATORS = ("zeros", "empty", "full")
REPORTED = tuple((k, v) for k, v in PAGE_TABLE_REPORTED if k != "page_size")


def sparse_page_table_columns_read(seq_len, delta, page_size):
    """:func:`specbound.spec.sparse_page_table_columns_read` in the page-table judge's signature
    (the table is token-granular: the page size plays no part)."""
    return spec.sparse_page_table_columns_read(seq_len, delta)


def _is_row_width(e) -> bool:
    return (isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "shape"
            and isinstance(e.value.value, ast.Attribute) and e.value.value.attr == "req_to_token"
            and isinstance(e.slice, ast.Constant) and e.slice.value == 1)


class _RowWidthTracer(Tracer):
    """``<x>.req_to_token.shape[1]`` is the least ``req_to_token`` row width, ``C + 4 + n``."""

    def _resolve(self, e, frame, path, receiver):
        if not receiver and _is_row_width(e):
            return [(Num(spec.req_to_token_row_width(C, n)), path)]
        return super()._resolve(e, frame, path, receiver)


def _is_sparse_fill(node) -> bool:
    names = {k.arg for k in getattr(node, "keywords", ())}
    return isinstance(node, ast.Call) and all(k in names for k in FILL_KEYWORDS) and any(k in names for k in BOUND_KEYWORDS)


def _fills_by_class(program: Program) -> dict:
    """class name -> (class, sorted fill-call locations) for every class that runs a sparse fill."""
    out = {}
    for fn, node in attention_nodes(program, "page_table_1", folder="/srt/"):
        if not _is_sparse_fill(node):
            continue
        for self_val in selves(program, fn):
            if self_val is None:
                continue
            cls, lines = out.setdefault(self_val.cls.name, (self_val.cls, set()))
            lines.add(f"{fn.rel}:{node.lineno}")
    return out


def _table_name(target) -> str | None:
    text = target.value if isinstance(target, ast.Constant) and isinstance(target.value, str) else \
        ast.unparse(target) if isinstance(target, (ast.Name, ast.Attribute, ast.Subscript)) else None
    if text is None or TABLE not in text or COMPACT + TABLE in text:
        return None
    return text


def _table_allocations(fn):
    """(table name, allocation call) of every 2-D allocation assigned to a page-table name or key."""
    for node in ast.walk(fn.node):
        pairs = []
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            pairs = [(node.targets[0], node.value)]
        elif isinstance(node, ast.Dict):
            pairs = [(k, v) for k, v in zip(node.keys, node.values) if k is not None]
        for target, value in pairs:
            name = _table_name(target)
            if name is None:
                continue
            for call in ast.walk(value):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in ALLOCATORS:
                    dims = call.args[0].elts if len(call.args) == 1 and isinstance(call.args[0], (ast.Tuple, ast.List)) \
                        else call.args
                    if len(dims) == 2:
                        yield name, call, dims[-1]


def check_sparse_page_tables(program: Program, report: AuditReport) -> None:
    for cls, lines in _fills_by_class(program).values():
        init = program.lookup(cls, "init_cuda_graph_state")
        if init is None:
            continue
        for name, call, width_expr in _table_allocations(init):
            t0 = time.perf_counter()
            row = _row(program, cls, init, name, call, width_expr, sorted(lines))
            row.seconds = time.perf_counter() - t0
            report.add(row)


def _row(program, cls, init, name, call, width_expr, fills) -> Row:
    where = f"{init.rel}:{call.lineno}"
    row_id = f"consumer.sparse_page_table[{cls.name}.{name}@{where}]"
    subject = (f"{cls.name} ({where}) -> sparse fill ({', '.join(fills)}, bounded by the table's width) -> "
               f"sparse attention / indexer (cache_seqlens = seq_len + n)")
    check = ("the token columns a sparse attention reads in target verify / draft extend "
             "(spec.sparse_page_table_columns_read) fit the graph table's row")
    tracer = _RowWidthTracer(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    # the allocating method run by this class (a base's init_cuda_graph_state reads the subclass's attributes)
    frame = tracer.top_frame(init, next((s for s in selves(program, init) if s and s.cls.name == cls.name), None))
    judged = []
    for wv, wp in resolve(tracer, width_expr, frame, Path(trail=(where,))):
        if not isinstance(wv, Num):
            judged.append((None, f"the width `{ast.unparse(width_expr)}` was not traced to a number: {wv}"))
            continue
        j = judge_page_table(n, wv.term, list(wp.conds), row_id, sparse_page_table_columns_read, REPORTED)
        if j.verdict != judge.INFEASIBLE:
            judged.append((j, wv.term))
    untraced = [d for j, d in judged if j is None]
    if untraced:
        return Row(row_id, subject, check, "ast", UNKNOWN, untraced[0], allocation=f"{where} {ast.unparse(call)}")
    if not judged:
        return Row(row_id, subject, check, "ast", UNKNOWN, "no path to the allocation is consistent with the preconditions")
    order = [OVERREAD, judge.ERROR, judge.HOLDS_ONLY_IF, judge.MATCHED]
    judged.sort(key=lambda e: order.index(e[0].verdict) if e[0].verdict in order else 1)
    j, width = judged[0]
    status = REFUTED_STATUS["page_table"] if j.verdict == OVERREAD else VERDICT.get(j.verdict, ERROR)
    detail = (f"holds only if {j.condition}: " if j.condition else "") + j.detail
    detail += f" [width = {z3.simplify(width)}, read seq_len + n = {z3.simplify(SEQ + n)}]"
    row = Row(row_id, subject, check, "z3", status, detail, j.counterexample, size=j.size, required=j.required,
              allocation=f"{where} {ast.unparse(call)}")
    if status in (OVERREAD, HOLDS_ONLY_IF) and j.counterexample:
        replay_read(row, n, width, {**j.counterexample, "page_size": 1}, REPORTED)
    return row
