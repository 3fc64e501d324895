"""Where a call site's arguments come from, for the consumer stages: the instances a method runs
on, the expression passed for a parameter, the statements that run before a line, the
allocations an expression or a record's field traces to (through a metadata record and a
CUDA-graph dict), and the attention-backend nodes that mention a name.

:class:`MetadataTracer` reads what the plain tracer cannot follow as the spec's quantities:
the batch's longest request (``<x>.max_seq_len_k``, ``seq_lens.max().item()``), the draft
step, the verify rows per request.  A stage that meets the longest request states what the
class sets it to, read from its own assignments, under named hypotheses
(:func:`longest_readings`), and judges it against a traced width only: it bounds the
request, not the row.
"""

from __future__ import annotations

import ast

import z3

from specbound.proofs.model import C, D, n

from specbound.audit.program import Program
from specbound.audit.trace import Tracer
from specbound.audit.trace_values import Alloc, Instance, Num, Path, Truth, term_ids
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


ATTENTION = "attention backends"


def in_folder(path, folder: str) -> bool:
    """Whether ``path`` lies under ``folder``; ``ATTENTION`` names the attention backends:
    ``srt/layers/attention/`` and a hardware backend's ``srt/hardware_backend/<hw>/attention/``
    (Ascend's since 0.5.7, MUSA's), so a backend that moves there stays audited."""
    text = str(path).replace("\\", "/")
    if folder == ATTENTION:
        return "/layers/attention/" in text or ("/hardware_backend/" in text and "/attention/" in text)
    return folder in text


def functions_mentioning(program: Program, text: str, whole_words: bool = True, folder: str = ""):
    """Every function of a file under ``folder`` (anywhere by default; ``ATTENTION``: the
    attention backends, :func:`in_folder`) that mentions ``text``."""
    for p in program.files_mentioning(text, whole_words=whole_words):
        if not in_folder(p, folder):
            continue
        tree = program.index.tree(p)
        if tree is None:
            continue
        yield from program._functions_in(p, tree)


def attention_nodes(program: Program, text: str, whole_words: bool = True, folder: str = ATTENTION):
    """(function, AST node) of every node in a function of a file under ``folder`` (the
    attention backends by default) that mentions ``text``."""
    for fn in functions_mentioning(program, text, whole_words, folder):
        for node in program.walk(fn.node):
            yield fn, node


def is_self_attr(e) -> bool:
    return isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self"


def field_values(program: Program, fn, self_val, obj, field, line: int, hops: int = 0) -> list:
    """(expression, function) of what ``<obj>.<field>`` holds at line ``line`` of ``fn``: the
    last assignment of it that runs before (in the enclosing statement lists); through
    ``obj = <y>`` before (``obj = None`` before: each ``obj = <y>`` in the branches between), plus
    each ``<obj>.<field> = ...`` in a branch after it; through a parameter's arguments, and a
    record stored as ``self.<d>[<k>] = <x>`` and read back as ``self.<d>[<key>]``.  Empty where
    the trail ends."""
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
            # `x = ...`, then `x.<field> = ...` in a branch before the use (`if swa: ...`): that, or
            # (the branch not taken) what `x` held
            nested = [(a.value, fn) for a in _assigned_after(fn.node, f"{text}.{field}", stmt, line)]
            if isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
                # `x = None`, then `x = ...` in branches before the use: what those assign
                return nested + [v for a in _assigned_after(fn.node, text, stmt, line)
                                 for v in field_values(program, fn, self_val, a.value, field, a.lineno, hops + 1)]
            return nested + field_values(program, fn, self_val, stmt.value, field, stmt.lineno, hops + 1)
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


def _assigned_after(func_node, text: str, stmt, line: int) -> list:
    """The assignments ``<text> = ...`` after ``stmt`` and before line ``line`` (in the branches
    between them)."""
    return [node for node in ast.walk(func_node) if isinstance(node, ast.Assign) and len(node.targets) == 1
            and ast.unparse(node.targets[0]) == text and stmt.end_lineno < node.lineno < line]


def dict_entry(program: Program, self_val, expr, fn):
    """``self.<d>["key"]`` (sliced or not) as the entry of the dict literal assigned to
    ``self.<d>``, or the value assigned to ``self.<d>["key"]`` (the backends' CUDA-graph metadata
    dicts), with the method that assigns it;
    anything else unchanged; and the table's name for the row (``<d>[key]``, or None)."""
    base = expr
    while isinstance(base, ast.Subscript) and (isinstance(base.slice, ast.Slice) or isinstance(base.slice, ast.Tuple)
                                               and all(isinstance(x, ast.Slice) for x in base.slice.elts)):
        base = base.value
    if self_val is None or not (isinstance(base, ast.Subscript) and is_self_attr(base.value)
                                and isinstance(base.slice, ast.Constant)):
        return expr, fn, None
    label = f"{base.value.attr}[{base.slice.value}]"
    for method in program.visible_methods(self_val.cls).values():
        for node in program.walk(method.node):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target = node.targets[0]
            if isinstance(node.value, ast.Dict) and ast.unparse(target) == ast.unparse(base.value):
                for k, v in zip(node.value.keys, node.value.values):
                    if isinstance(k, ast.Constant) and k.value == base.slice.value:
                        return v, method, label
            elif isinstance(target, ast.Subscript) and ast.unparse(target) == ast.unparse(base):
                return node.value, method, label      # self.<d>["key"] = <value>, after the literal
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
LONGEST_COMMITTED = z3.Int("max(seq_lens)")
STEP = z3.Int("step")
STEP_RANGE = z3.And(0 <= STEP, STEP <= D - 2)   # draft step backend i of range(num_steps - 1)
LENGTHS = ("seq_lens", "seq_lens_cpu")
CASTS = ("int", "long", "to", "clone", "contiguous")


class MetadataTracer(Tracer):
    """Reads of a pass's metadata the plain tracer cannot follow, as the spec's quantities:
    ``<x>.max_seq_len_k`` is ``LONGEST``, the batch's longest KV length this pass (XPU,
    FlashAttention before 0.5.15); ``X.max().item()`` is ``LONGEST_COMMITTED`` plus what ``X``
    adds to the lengths the pass is given (``seq_lens[:bs].int() + n``, through locals: Ascend);
    ``<x>.num_tokens_per_req`` is ``n`` (the target-verify rows per request; DSpark's draft
    block packs fewer);
    ``<x>.speculative_step_id`` is the draft step ``STEP``, ``0 <= step <= num_steps - 2`` (one
    backend per step, built in a loop the tracer does not unroll); ``forward_mode.is_<mode>()``
    reads the same at every test of one call (:func:`mode_test`)."""

    def _resolve(self, e, frame, path, receiver):
        mode = None if receiver else mode_test(e, frame)
        if mode is not None:
            return self.chosen(path, mode)
        if isinstance(e, ast.Attribute) and not receiver:
            if e.attr == "max_seq_len_k":
                return [(Num(LONGEST), path)]
            if e.attr == "num_tokens_per_req":
                return [(Num(n), path)]
            if e.attr == "speculative_step_id":
                return [(Num(STEP), path.cond(STEP_RANGE))]
        maxed = _max_item(e)
        if maxed is not None and not receiver:
            # Inside X.max().item(), a tensor of the lengths given (through slices, casts and
            # locals) stands for its largest entry, and X's arithmetic follows it.
            self._in_max = getattr(self, "_in_max", 0) + 1
            try:
                return self.resolve(maxed, frame, path)
            finally:
                self._in_max -= 1
        if getattr(self, "_in_max", 0) and _lengths(e):
            return [(Num(LONGEST_COMMITTED), path)]
        return super()._resolve(e, frame, path, receiver)

    def chosen(self, path, key) -> list:
        """A test that reads the same on every use along one path: its pinned value, else each
        of true and false, pinned."""
        pinned = self._pinned(path, key)
        if pinned is not None:
            return [(pinned, path)]
        return [(v, self._pin(path, key, v)) for v in (Truth(True), Truth(False))]


def mode_test(e, frame):
    """The pin key of ``forward_mode.is_<mode>()`` where ``forward_mode`` is a parameter the
    function never reassigns (an enum: every test of it in one call agrees, so a backend's two
    ``if forward_mode.is_target_verify()`` blocks take the same branch), else None."""
    if not (isinstance(e, ast.Call) and not e.args and not e.keywords and isinstance(e.func, ast.Attribute)
            and e.func.attr.startswith("is_") and isinstance(e.func.value, ast.Name)
            and e.func.value.id == "forward_mode" and "forward_mode" in frame.func.params()):
        return None
    if any(isinstance(t, ast.Name) and t.id == "forward_mode" for a in ast.walk(frame.func.node)
           if isinstance(a, (ast.Assign, ast.AugAssign, ast.AnnAssign))
           for t in (a.targets if isinstance(a, ast.Assign) else [a.target])):
        return None
    return ("forward_mode", frame.key, e.func.attr)


def _max_item(e):
    """``X`` of ``X.max().item()``, else None."""
    if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "item" and not e.args):
        return None
    inner = e.func.value
    if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "max" \
            and not inner.args and not inner.keywords:
        return inner.func.value
    return None


def _lengths(e) -> bool:
    """``seq_lens`` / ``seq_lens_cpu`` (or ``<x>.seq_lens...``), through slices and casts."""
    while True:
        if isinstance(e, ast.Subscript):
            e = e.value
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in CASTS:
            e = e.func.value
        else:
            break
    return (isinstance(e, ast.Name) and e.id in LENGTHS) or (isinstance(e, ast.Attribute) and e.attr in LENGTHS)


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


def batch_bounded(term) -> bool:
    """Whether ``term`` is bounded by the batch's longest request rather than by a width."""
    return mentions(term, LONGEST) or mentions(term, LONGEST_COMMITTED)


def batch_bounds(seq, delta, terms) -> dict:
    """What the batch's longest request is for a request of ``seq`` tokens, under their own
    names, for the quantities ``terms`` mention: sglang sets ``max_seq_len_k = max(seq_lens) +
    kv_len_offset``, the offset it hands the fill as ``delta`` (``xpu_backend.py``), and every
    length it is given is admitted below the context."""
    out = {}
    if any(mentions(t, LONGEST) for t in terms):
        out.update(longest_covers_request=LONGEST >= seq + delta, longest_admitted=LONGEST <= C - 1 + delta)
    if any(mentions(t, LONGEST_COMMITTED) for t in terms):
        out.update(longest_length_covers_request=LONGEST_COMMITTED >= seq,
                   longest_length_admitted=LONGEST_COMMITTED <= C - 1)
    return out


def longest_settings(program: Program, self_val) -> tuple[list, bool]:
    """The values ``<x>.max_seq_len_k = <e>`` gives in the methods of ``self_val``'s class, each
    read by :class:`MetadataTracer` in its method (``max(seq_lens) + kv_len_offset`` reads as
    ``LONGEST_COMMITTED`` plus each offset the tracer finds), and whether every one was read."""
    if self_val is None:
        return [], False
    out, complete = [], True
    for method in program.visible_methods(self_val.cls).values():
        for node in program.walk(method.node):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Attribute) and node.targets[0].attr == "max_seq_len_k":
                tracer = MetadataTracer(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
                for v, _ in resolve(tracer, node.value, tracer.top_frame(method, self_val), Path()):
                    if not isinstance(v, Num):
                        complete = False
                        continue
                    term = v.term if z3.is_expr(v.term) else z3.IntVal(v.term)
                    if not any(z3.eq(term, w) for w in out):
                        out.append(term)
    return out, complete


def _same(a, b) -> bool:
    return z3.is_true(z3.simplify(a == b))


def longest_readings(settings, seq, delta, terms) -> list[dict]:
    """The hypotheses under which a judgement reads the batch's longest request, one dict per
    reading, judged each: ``[batch_bounds(...)]`` when ``terms`` do not mention
    ``max_seq_len_k`` or when the class sets it to ``max(seq_lens) + delta`` (the delta the
    fill is given: XPU's ``kv_len_offset``); otherwise one reading per value the class sets it
    to (``LONGEST == value``: a clamp the delta does not reach shows as a read past the filled
    prefix); none (an empty list) when the class never sets it or sets it to a value not read.
    The pairing is by value, not by path: the class's assignment of ``max(seq_lens) + delta``
    is taken to be the one the fill's path runs.  ``settings()``: :func:`longest_settings`,
    asked for only when needed."""
    bounds = batch_bounds(seq, delta, terms)
    if not any(mentions(t, LONGEST) for t in terms):
        return [bounds]
    values, complete = settings()
    if any(_same(v, LONGEST_COMMITTED + delta) for v in values):
        return [bounds]
    if not complete:
        return []
    committed = batch_bounds(seq, delta, [LONGEST_COMMITTED])
    return [{**committed, "longest_set_to": LONGEST == v} for v in values]


def reported_with(reported: tuple, terms) -> tuple:
    """``reported`` (a counterexample's (name, term) pairs) with the batch and step quantities
    ``terms`` mention."""
    have = {str(t) for _, t in reported}
    extra = (("max_seq_len_k", LONGEST), ("max(seq_lens)", LONGEST_COMMITTED), ("step", STEP), ("num_steps", D))
    need = [(name, v) for name, v in extra if str(v) not in have and any(mentions(t, v) for t in terms)]
    if any(v is STEP for _, v in need) and "num_steps" not in {nm for nm, _ in need} and str(D) not in have:
        need.append(("num_steps", D))
    return (*reported, *need)
