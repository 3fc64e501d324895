"""Consumer rows ``consumer.clamped_gather[<class>@<gather>]``: a block table gathered per batch from
``req_to_token`` rows, ``<x>.req_to_token[<rows>][:, <cols>]`` in a function of an attention
backend (:func:`.site_trace.in_folder`; sglang's MiniMax sparse backend), with ``<cols>`` a local
assigned ``(<pages>).clamp(max=<bound>)``.  And ``consumer.strided_gather[<class>@<gather>]``: a
strided slice of the rows instead (``[<rows>, 0:<L>:<P>]``, ``[<rows>, :<L>][:, ::<P>]``,
``[<rows>][:, ::<P>]``: sglang's Ascend backend), in the row by construction
(:func:`specbound.spec.strided_gather_pages`, theorem ``CT-STRIDED-GATHER-READ``): ``matched``.

The contract (:func:`specbound.spec.gather_column`): page ``j`` reads column ``min(j * P, bound)``,
in the row for every ``j`` exactly when ``bound <= W - 1`` (theorem ``CT-CLAMPED-GATHER-READ``).
``<bound>`` is read as a term of the row's width ``W`` (``<x>.req_to_token.shape[1]``, directly or
through a local assigned it once) plus constants; anything else is ``unknown``, and so are columns
that are not a clamp.  Judged through the core: ``matched``, or ``crash`` (torch's gather raises on
the CPU and trips a device-side assert on the GPU), replayed with torch at the counterexample.
"""

from __future__ import annotations

import ast

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import j, page

from specbound.audit import judge
from specbound.audit.program import Program
from specbound.audit.report import CRASH, ERROR, MATCHED, UNKNOWN, AuditReport, Row
from .consumers import site_rows
from .site_trace import attention_nodes, selves

KIND = "clamped_gather"
STRIDED = "strided_gather"
STRIDED_CHECK = "every column the strided gather reads (spec.strided_gather_column, of spec.strided_gather_pages) lies " \
                "in the req_to_token row"
LENGTH = z3.Int("length")
WIDTH = z3.Int("row_width")
REPORTED = (("page", j), ("page_size", page), ("row_width", WIDTH))
CHECK = "every column the clamped gather reads (spec.gather_column) lies in the req_to_token row"


def check_clamped_gathers(program: Program, report: AuditReport, replay: bool = True) -> None:
    """``replay``: run the gather with torch at each finding's counterexample."""
    for fn, node in attention_nodes(program, "req_to_token"):
        strided = strided_gather(node)
        cols = None if strided is not None else _gather_columns(node)
        if cols is None and strided is None:
            continue
        where = f"{fn.rel}:{node.lineno}"
        for self_val in selves(program, fn):
            owner = self_val.cls.name if self_val is not None else fn.qual
            if strided is not None:
                site_rows(report, STRIDED, owner, where, STRIDED_CHECK,
                          lambda: [_strided_row(node, strided, owner, where)])
            else:
                site_rows(report, KIND, owner, where, CHECK, lambda: [_row(fn, node, cols, owner, where, replay)])


def _is_table(e) -> bool:
    return isinstance(e, ast.Attribute) and e.attr == "req_to_token"


def _step_slice(sl) -> bool:
    """``[lo]:[hi]:step`` with ``lo`` absent or 0 and a step."""
    return isinstance(sl, ast.Slice) and sl.step is not None and (
        sl.lower is None or (isinstance(sl.lower, ast.Constant) and sl.lower.value == 0))


def strided_gather(node):
    """The strided gather's (length expression, or None for the whole row; step expression) of
    ``<x>.req_to_token[<rows>, 0:<L>:<P>]``, ``<x>.req_to_token[<rows>, :<L>][:, ::<P>]`` or
    ``<x>.req_to_token[<rows>][:, ::<P>]``, else None."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2):
        return None
    first, cols = node.slice.elts
    if not _step_slice(cols):
        return None
    if _is_table(node.value):
        return cols.upper, cols.step
    inner = node.value
    whole = isinstance(first, ast.Slice) and first.lower is first.upper is first.step is None
    if not (whole and cols.upper is None and isinstance(inner, ast.Subscript) and _is_table(inner.value)):
        return None
    if isinstance(inner.slice, ast.Tuple) and len(inner.slice.elts) == 2:
        length = inner.slice.elts[1]
        if isinstance(length, ast.Slice) and length.lower is None and length.step is None:
            return length.upper, cols.step
        return None
    return None, cols.step


def _gather_columns(node):
    """``<cols>`` of ``<x>.req_to_token[<rows>][:, <cols>]``, else None."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2):
        return None
    first, cols = node.slice.elts
    inner = node.value
    if isinstance(first, ast.Slice) and first.lower is first.upper is first.step is None \
            and isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Attribute) \
            and inner.value.attr == "req_to_token":
        return cols
    return None


def last_assigned(fn_node, name: str, line: int):
    """The last value assigned to the local ``name`` before ``line``."""
    found = last_assignment(fn_node, name, line)
    return found.value if found is not None else None


def last_assignment(fn_node, name: str, line: int, unpacked: bool = False):
    """The last statement ``name = ...`` of ``fn_node`` before ``line`` (``unpacked``: or
    ``(..., name, ...) = ...``), or None."""
    found = None
    for a in ast.walk(fn_node):
        if isinstance(a, ast.Assign) and a.lineno < line and (
                any(isinstance(t, ast.Name) and t.id == name for t in a.targets)
                or (unpacked and len(a.targets) == 1 and isinstance(a.targets[0], ast.Tuple)
                    and any(isinstance(t, ast.Name) and t.id == name for t in a.targets[0].elts))):
            if found is None or a.lineno > found.lineno:
                found = a
    return found


def _term(e, fn_node, line: int, depth: int = 0):
    """``e`` as a term of the row width ``W``, or None."""
    if isinstance(e, ast.Name) and depth < 4:
        v = last_assigned(fn_node, e.id, line)
        return _term(v, fn_node, line, depth + 1) if v is not None else None
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return z3.IntVal(e.value)
    if isinstance(e, ast.Subscript) and ast.unparse(e).endswith("req_to_token.shape[1]"):
        return WIDTH
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)):
        a, b = _term(e.left, fn_node, line, depth), _term(e.right, fn_node, line, depth)
        if a is not None and b is not None:
            return a + b if isinstance(e.op, ast.Add) else a - b
    return None


def _bound(fn_node, cols, line: int):
    """The clamp's ``max=`` expression of the gather's columns, or None."""
    value = last_assigned(fn_node, cols.id, line) if isinstance(cols, ast.Name) else cols
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "clamp":
        return next((k.value for k in value.keywords if k.arg == "max"), None)
    return None


def _row(fn, node, cols, owner, where, replay) -> Row:
    row_id = f"consumer.{KIND}[{owner}@{where}]"
    subject = f"{owner} ({where}) -> {ast.unparse(node)}"
    bound_expr = _bound(fn.node, cols, node.lineno)
    if bound_expr is None:
        return Row(row_id, subject, CHECK, "ast", UNKNOWN, f"the columns `{ast.unparse(cols)}` are not a clamp(max=...)")
    bound = _term(bound_expr, fn.node, node.lineno)
    if bound is None:
        return Row(row_id, subject, CHECK, "ast", UNKNOWN,
                   f"the clamp `{ast.unparse(bound_expr)}` is not a term of req_to_token.shape[1]")
    col = spec.gather_column(j, page, bound)
    goal = z3.And(0 <= col, col < WIDTH)
    hyps = {"page_nonneg": j >= 0, "page_size_positive": page >= 1, "row_width_positive": WIDTH >= 1}
    required, size = "0 <= min(j * page_size, bound) < W", f"clamp(max={z3.simplify(bound)})"
    try:
        core.check(f"{row_id}/in_row", goal, hyps=hyps)
        return Row(row_id, subject, CHECK, "z3", MATCHED, f"proved for every page j >= 0 under {', '.join(hyps)}",
                   size=size, required=required)
    except core.Refuted:
        pass
    except core.Unknown as e:
        return Row(row_id, subject, CHECK, "z3", ERROR, f"the solver gave no verdict: {e}")
    cex = judge.counterexample(hyps, [], goal, tuple(k for k, _ in REPORTED), reported=REPORTED, prefs=[])
    row = Row(row_id, subject, CHECK, "z3", CRASH, f"refuted: a page's column is past the row (clamp "
              f"`{ast.unparse(bound_expr)}`)", cex, size=size, required=required)
    if cex and replay:
        _replay(row, bound, cex)
    return row


def _replay(row: Row, bound, x: dict) -> None:
    """The gather with torch on the CPU: one ``req_to_token`` row of the counterexample's width,
    columns ``(arange(j + 1) * P).clamp(max=bound)``."""
    import torch

    b = judge.evaluate(bound, x, REPORTED)
    table = torch.zeros(1, x["row_width"], dtype=torch.int32)
    cols = (torch.arange(x["page"] + 1) * x["page_size"]).clamp(max=b)
    row.method, row.replay = "z3 + torch", {**x, "bound": b}
    try:
        table[torch.zeros(1, dtype=torch.long)][:, cols]
    except IndexError as e:
        row.detail += f"; replayed with torch: req_to_token[rows][:, cols] raises IndexError: {e}"
        return
    row.detail += "; the torch replay did not raise"
    row.status = ERROR   # the model says it reads past the row, torch does not


def _strided_row(node, strided, owner, where) -> Row:
    """A slice of the row: torch clips it, so the gather reads ``spec.strided_gather_pages(L, P, W)``
    pages at ``spec.strided_gather_column(j, P)``, in the row for every length, step and width
    (the core is asked at the site, the claim of ``CT-STRIDED-GATHER-READ``)."""
    length, step = strided
    row_id = f"consumer.{STRIDED}[{owner}@{where}]"
    subject = f"{owner} ({where}) -> {ast.unparse(node)}"
    col = spec.strided_gather_column(j, page)
    goal = z3.Implies(j < spec.strided_gather_pages(LENGTH, page, WIDTH), z3.And(0 <= col, col < WIDTH))
    hyps = {"page_nonneg": j >= 0, "page_size_positive": page >= 1, "row_width_nonneg": WIDTH >= 0,
            "length_nonneg": LENGTH >= 0}
    reads = f"`{ast.unparse(length)}`" if length is not None else "the whole row"
    try:
        proof = core.check(f"{row_id}/in_row", goal, hyps=hyps)
    except core.Refuted:
        return Row(row_id, subject, STRIDED_CHECK, "z3", ERROR, "the core refuted a slice of the row: the spec's "
                   "strided gather contract is off")
    except core.Unknown as e:
        return Row(row_id, subject, STRIDED_CHECK, "z3", ERROR, f"the solver gave no verdict: {e}")
    return Row(row_id, subject, STRIDED_CHECK, "z3", MATCHED,
               f"proved for every length, step `{ast.unparse(step)}` >= 1 and row width under "
               f"{', '.join(sorted(proof.assumptions))}: a slice of {reads}, clipped by torch to the row; it returns "
               f"cdiv(min(L, W), P) pages, fewer than cdiv(L, P) when L passes the row (what a reader of those pages "
               f"then misses is not judged here)", size="cdiv(min(L, W), P) pages",
               required="0 <= j * page_size < W")
