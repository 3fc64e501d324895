"""Where a call site's arguments come from, for the consumer stages: the instances a method runs
on, the expression passed for a parameter, the statements that run before a line, the
allocations an expression or a record's field traces to (through a metadata record and a
CUDA-graph dict), and the attention-backend nodes that mention a name.

``<x>.max_seq_len_k`` is read by :class:`LongestTracer` as the batch's longest KV length this
pass (``LONGEST``): sglang's XPU backend sets it to ``max(seq_lens) + kv_len_offset``
(``xpu_backend.py``), the offset it hands its page-table fill as the delta, so a stage that
meets it states ``seq_len + delta <= LONGEST <= C - 1 + delta`` (:func:`longest_bounds`).
"""

from __future__ import annotations

import ast

import z3

from specbound.proofs.model import C, n

from specbound.audit.program import Program
from specbound.audit.trace import Tracer
from specbound.audit.trace_values import Alloc, Instance, Num, Path, term_ids
from . import bindings

MAX_HOPS = 8


def selves(program: Program, func):
    return [Instance(c) for c in program.classes_running(func)] if func.cls else [None]


def call_argument(call: ast.Call, params: list[str], name: str):
    """The expression ``call`` passes for parameter ``name`` of a function with ``params``; None
    when it is not passed, or hidden behind a ``*args``."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if name in params:
        i = params.index(name)
        if i < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: i + 1]):
            return call.args[i]
    return None


def dominating_statements(func_node, lineno: int) -> list:
    """Statements that run before line ``lineno`` on every path: those in the statement lists
    enclosing it, before the statement that holds it."""
    out = []

    def visit(body):
        for stmt in body:
            if stmt.lineno <= lineno <= stmt.end_lineno:
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(stmt, field, None)
                    if isinstance(inner, list) and inner and inner[0].lineno <= lineno <= inner[-1].end_lineno:
                        visit(inner)
                return
            out.append(stmt)
    visit(func_node.body)
    return out


def resolve(tracer: Tracer, expr, frame, path: Path) -> list:
    tracer.steps = 0
    return tracer.resolve(expr, frame, path)


def traced_allocations(program: Program, fn, self_val, expr, where: str, tracer_cls=Tracer) -> dict:
    """The allocations ``expr`` (in ``fn``, run by ``self_val``) traces to, each once with
    the path it was found under, for a buffer of the target-verify pass."""
    tracer = tracer_cls(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    frame = tracer.top_frame(fn, self_val)
    found = {}
    for v, p in resolve(tracer, expr, frame, Path(trail=(where,))):
        if isinstance(v, Alloc):
            found.setdefault((v.site, v.view, term_ids(list(v.dims))), (v, p))
    return found


def attention_nodes(program: Program, text: str, whole_words: bool = True, folder: str = "/layers/attention/"):
    """(function, AST node) of every node in a function of a file under ``folder`` (the
    attention backends, ``srt/layers/attention/``, by default) that mentions ``text``."""
    for p in program.files_mentioning(text, whole_words=whole_words):
        if folder not in str(p).replace("\\", "/"):
            continue
        tree = program.index.tree(p)
        if tree is None:
            continue
        for fn in program._functions_in(p, tree):
            for node in program.walk(fn.node):
                yield fn, node


def is_self_attr(e) -> bool:
    return isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self"


def field_values(program: Program, fn, self_val, obj, field, line: int, hops: int = 0) -> list:
    """(expression, function) of what ``<obj>.<field>`` holds at line ``line`` of ``fn``: the
    last assignment of it that runs before (in the enclosing statement lists); through
    ``obj = <y>`` before, a parameter's arguments, and a record stored as ``self.<d>[<k>] =
    <x>`` and read back as ``self.<d>[<key>]``.  Empty where the trail ends."""
    if field is None:
        return [(obj, fn)]
    if hops > MAX_HOPS:
        return []
    text = ast.unparse(obj)
    for stmt in reversed(dominating_statements(fn.node, line)):
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            continue
        target = stmt.targets[0]
        if isinstance(target, ast.Attribute) and target.attr == field and ast.unparse(target.value) == text:
            return [(stmt.value, fn)]
        if ast.unparse(target) == text:
            return field_values(program, fn, self_val, stmt.value, field, stmt.lineno, hops + 1)
    if isinstance(obj, ast.Name) and obj.id in fn.params():
        params, out = [a for a in fn.params() if a != "self"], []
        for site in program.calls_to(fn.name):
            if self_val is not None and self_val.cls not in program.classes_running(site.caller):
                continue
            arg = call_argument(site.call, params, obj.id)
            if arg is not None:
                out += field_values(program, site.caller, self_val, arg, field, site.call.lineno, hops + 1)
        return out
    if isinstance(obj, ast.Subscript) and is_self_attr(obj.value) and not isinstance(obj.slice, ast.Constant) \
            and self_val is not None:
        out = []
        for method in program.visible_methods(self_val.cls).values():
            for node in program.walk(method.node):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript) \
                        and ast.unparse(node.targets[0].value) == ast.unparse(obj.value) \
                        and not isinstance(node.targets[0].slice, ast.Constant):
                    out += field_values(program, method, self_val, node.value, field, node.lineno, hops + 1)
        return out
    return []


def dict_entry(program: Program, self_val, expr, fn):
    """``self.<d>["key"]`` (sliced or not) as the entry of the dict literal assigned to
    ``self.<d>`` (the backends' CUDA-graph metadata dicts), with the method that assigns it;
    anything else unchanged; and the table's name for the row (``<d>[key]``, or None)."""
    base = expr
    while isinstance(base, ast.Subscript) and (isinstance(base.slice, ast.Slice) or isinstance(base.slice, ast.Tuple)
                                               and all(isinstance(x, ast.Slice) for x in base.slice.elts)):
        base = base.value
    if self_val is None or not (isinstance(base, ast.Subscript) and is_self_attr(base.value)
                                and isinstance(base.slice, ast.Constant)):
        return expr, fn, None
    for method in program.visible_methods(self_val.cls).values():
        for node in program.walk(method.node):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Dict) \
                    and ast.unparse(node.targets[0]) == ast.unparse(base.value):
                for k, v in zip(node.value.keys, node.value.values):
                    if isinstance(k, ast.Constant) and k.value == base.slice.value:
                        return v, method, f"{base.value.attr}[{k.value}]"
    return expr, fn, None


def traced_tables(program, fn, self_val, obj, field, line: int, where: str, tracer_cls=Tracer) -> dict:
    """What ``<obj>.<field>`` (or ``obj`` itself when ``field`` is None) at line ``line`` of ``fn``
    holds, followed through the record field (:func:`field_values`) and a graph dict's entry, then
    by the tracer: a key per value -> (value, path, the table's name for a row or None)."""
    tracer = tracer_cls(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    found = {}
    values = field_values(program, fn, self_val, obj, field, line)
    if not values and field is not None:   # no assignment of the field: the tracer's own reading
        values = [(ast.Attribute(value=obj, attr=field, ctx=ast.Load(), lineno=line, col_offset=0), fn)]
    named = f"{ast.unparse(obj)}.{field}" if field else None
    for expr, holder_fn in values:
        expr, holder_fn, label = dict_entry(program, self_val, expr, holder_fn)
        tracer.steps = 0
        for v, p in tracer.resolve(expr, tracer.top_frame(holder_fn, self_val), Path(trail=(where,))):
            key = (v.site, v.view, term_ids(list(v.dims))) if isinstance(v, Alloc) else repr(v)
            found.setdefault(key, (v, p, label or named))
    return found


LONGEST = z3.Int("max_seq_len_k")


class LongestTracer(Tracer):
    """``<x>.max_seq_len_k``: the batch's longest KV length; ``<x>.num_tokens_per_req``: ``n``."""

    def _resolve(self, e, frame, path, receiver):
        if isinstance(e, ast.Attribute) and not receiver and e.attr in ("max_seq_len_k", "num_tokens_per_req"):
            return [(Num(LONGEST if e.attr == "max_seq_len_k" else n), path)]
        return super()._resolve(e, frame, path, receiver)


def mentions(term, var) -> bool:
    if not z3.is_expr(term):
        return False
    todo = [term]
    while todo:
        t = todo.pop()
        if t.eq(var):
            return True
        todo += t.children()
    return False


def longest_bounds(seq, delta) -> dict:
    """What sglang's ``max_seq_len_k = max(seq_lens) + kv_len_offset`` gives a request of
    ``seq`` tokens when the fill's delta is that offset, under its own names."""
    return {"longest_covers_request": LONGEST >= seq + delta, "longest_admitted": LONGEST <= C - 1 + delta}
