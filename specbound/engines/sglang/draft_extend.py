"""Consumer rows ``consumer.page_table[<Backend>.<attr>[page_table]/draft_extend@...]``: the
CUDA-graph page table of the draft-extend pass, read by attention with the worker's widened
lengths.

The contract (:func:`specbound.spec.draft_extend_columns_read`): before the draft-extend pass
runs, sglang's worker widens the lengths the backend sees (``forward_batch.seq_lens =
forward_batch.seq_lens + num_draft_tokens``), and the backend tells the attention kernel
``cache_seqlens = seq_lens``; every fill of the table (the in-graph metadata kernel, the
replay's slice copy) is clamped to the table's width, so the kernel reads
``ceil((seq_len + n) / P)`` columns of a row of that width.

* A *widening* is an assignment ``<x>.seq_lens = ... + <draft-token count>`` in a function of
  ``srt/speculative/`` that names a ``DRAFT_EXTEND`` forward mode.  Without one the release's
  draft extend is not the one this contract describes, and no row is made.
* A *table* is the ``"page_table"`` entry of a dict assigned to ``self.<attr>`` with
  ``draft_extend`` in ``<attr>``, in an attention backend; it is traced to its allocation for
  every class that runs the allocating method, and its last dimension is the width judged
  (through :func:`.consumers.judge_page_table`, ``delta = n``).  ``matched``; ``holds only if
  seq_len[b] + n <= C``; ``overread``; a finding is replayed by the stand-in read.
"""

from __future__ import annotations

import ast
import time

import z3

from specbound.proofs.model import n

from specbound.audit import judge
from specbound.audit.program import Program
from specbound.audit.report import ERROR, HOLDS_ONLY_IF, OVERREAD, UNKNOWN, AuditReport, Row
from specbound.audit.trace import Tracer
from specbound.audit.trace_values import Alloc, Path
from .consumers import REFUTED_STATUS, VERDICT, judge_page_table, replay_read
from . import bindings
from .site_trace import attention_nodes, selves

DRAFT_COUNTS = ("num_draft_tokens", "speculative_num_draft_tokens", "draft_token_num")
TABLE_KEY = "page_table"


def check_draft_extend(program: Program, report: AuditReport) -> None:
    widening = widening_site(program)
    if widening is None:
        return
    for fn, node, value in graph_dict_entries(program, "draft_extend"):
        for self_val in selves(program, fn):
            t0 = time.perf_counter()
            owner = self_val.cls.name if self_val is not None else fn.qual
            where = f"{fn.rel}:{node.lineno}"
            attr = node.targets[0].attr
            try:
                rows = _rows(program, fn, self_val, owner, attr, where, value, widening)
            except Exception as e:  # noqa: BLE001 - the audit's own failure is an error row
                rows = [Row(f"consumer.page_table[{owner}.{attr}[{TABLE_KEY}]/draft_extend@{where}]",
                            f"{owner} ({where})", "the draft-extend page-table columns read fit the row", "z3",
                            ERROR, f"the consumer check failed: {type(e).__name__}: {e}")]
            for row in rows:
                row.seconds = time.perf_counter() - t0
                report.add(row)


def _names_draft_count(expr) -> bool:
    def named(x):
        return (isinstance(x, ast.Name) and x.id in DRAFT_COUNTS) or \
            (isinstance(x, ast.Attribute) and x.attr in DRAFT_COUNTS)
    return any(isinstance(x, ast.BinOp) and isinstance(x.op, ast.Add) and (named(x.left) or named(x.right))
               for x in ast.walk(expr))


def widening_site(program: Program) -> str | None:
    """``file:line`` of the worker's widening of the draft-extend lengths, or None."""
    for fn, node in attention_nodes(program, "DRAFT_EXTEND", whole_words=False, folder="/speculative/"):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) \
                and node.targets[0].attr == "seq_lens" and _names_draft_count(node.value) \
                and "DRAFT_EXTEND" in ast.unparse(fn.node):
            return f"{fn.rel}:{node.lineno}"
    return None


def graph_dict_entries(program: Program, attr_part: str, key: str = TABLE_KEY):
    """(function, assignment, entry expression) of every ``self.<attr> = {..., key: <x>, ...}`` in an
    attention backend whose ``<attr>`` contains ``attr_part`` (the backends' CUDA-graph metadata dicts)."""
    return [(fn, node, v) for fn, node in attention_nodes(program, attr_part, whole_words=False)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Dict)
            and isinstance(node.targets[0], ast.Attribute) and attr_part in node.targets[0].attr
            for k, v in zip(node.value.keys, node.value.values)
            if isinstance(k, ast.Constant) and k.value == key]


def _rows(program, fn, self_val, owner, attr, where, value, widening) -> list[Row]:
    row_id = f"consumer.page_table[{owner}.{attr}[{TABLE_KEY}]/draft_extend@{where}]"
    subject = (f"{owner} ({where}) -> draft extend (lengths widened by n at {widening}) -> "
               f"attention(page_table, cache_seqlens = seq_len + n)")
    check = "the page-table columns the draft-extend attention reads (spec.draft_extend_columns_read) fit the row"
    tracer = Tracer(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    tracer.steps = 0
    found = {}
    for v, p in tracer.resolve(value, tracer.top_frame(fn, self_val), Path(trail=(where,))):
        found.setdefault(str(v.dims[-1]) if isinstance(v, Alloc) and v.dims else repr(v), (v, p))
    rows = []
    for v, p in found.values():
        if not isinstance(v, Alloc) or len(v.dims) < 2 or not isinstance(v.dims[-1], (int, z3.ArithRef)):
            rows.append(Row(row_id, subject, check, "ast", UNKNOWN, f"the table was not traced to a 2-D allocation: {v}"))
            continue
        rows.append(_judged(row_id, subject, check, v, p))
    return rows


def _judged(row_id, subject, check, a: Alloc, path: Path) -> Row:
    width = a.dims[-1]
    j = judge_page_table(n, width, list(path.conds), row_id)
    if j.verdict == judge.INFEASIBLE:
        return Row(row_id, subject, check, "z3", UNKNOWN, "no path to the allocation is consistent with the "
                   "preconditions", allocation=f"{a.site} {a.text}")
    status = REFUTED_STATUS["page_table"] if j.verdict == OVERREAD else VERDICT.get(j.verdict, ERROR)
    detail = (f"holds only if {j.condition}: " if j.condition else "") + j.detail
    detail += f" [width = {z3.simplify(width) if z3.is_expr(width) else width}, the table allocated at {a.site}]"
    row = Row(row_id, subject, check, "z3", status, detail, j.counterexample, allocation=f"{a.site} {a.text}",
              size=j.size, required=j.required)
    if status in (OVERREAD, HOLDS_ONLY_IF) and j.counterexample:
        replay_read(row, n, width, j.counterexample)
    return row
