"""Consumer rows ``consumer.direct_kv_indices[<class>.<buffer>@<launch>]``: a backend's own launch
of the kv-index kernel in target verify (sglang's aiter and wave backends call
``create_flashinfer_kv_indices_triton[grid](...)`` themselves instead of handing a buffer to the
verify input's writer, :mod:`.verify_kv`).

The contract (:func:`specbound.spec.direct_kv_indices_written`): the kernel's stores are bounded
by each request's length only, so the launch writes ``kv_indptr[bs] = S + bs*delta`` entries,
``delta`` the draft tokens the backend adds to the committed lengths (``n``, or 0 where it passes
``seq_lens`` as they are).

* A *launch* is a subscripted call of the kernel in a function of an attention backend
  (:func:`.site_trace.in_folder`) that runs only in target verify (inside ``if
  <x>.is_target_verify():``, or the ``else`` of its negation), whose ``kv_indptr`` is set from
  ``torch.cumsum`` of the lengths it passes.
* Everything is read within the launch's own function (and, for a scratch, its own class's
  file): the lengths, the buffer and its size are taken along each path of the ``if``
  statements that assign them (:func:`_envs`), so a branch that widens the lengths is paired
  with the size the same branch computes; the tracer evaluates the numbers, its parameters
  never followed to their callers (reading the whole package would double the audit's time).
* The buffer: a *grow-only scratch* (``self.<m>(k)``, a method of the same file returning
  ``self.<a>[:k]`` and reallocating ``self.<a>`` with ``k`` entries: exactly ``k``), an
  allocation sized ``kv_indptr[-1]`` (the stream itself), or an attribute traced to its
  allocation by the tracer.  Judged through :func:`specbound.audit.judge.judge`: ``matched``,
  ``holds only if seq_len[b] + n <= max_context_len`` or ``overrun``, replayed on the package's
  kernel under the checked interpreter.
"""

from __future__ import annotations

import ast
import copy

import z3

from specbound import spec
from specbound.proofs.model import bs, n

from specbound.audit import judge
from specbound.audit.program import Program
from specbound.audit.report import ERROR, HOLDS_ONLY_IF, MATCHED, OVERRUN, UNKNOWN, AuditReport, Row
from specbound.audit.trace_values import Alloc, Ended, Items, Num, Path, term_ids
from . import bindings
from .consumers import site_rows
from .page_table_build import _bare_seq_lens
from .verify_kv import KERNEL, KERNEL_FILES, WRITER_PARAMS, _Kernel, _VerifyTracer
from .site_trace import attention_nodes, call_argument, selves, traced_allocations

KIND = "direct_kv_indices"
MAX_ENVS = 16        # paths through the ifs that assign the launch's lengths and buffer
MAX_INLINE = 12      # nesting of locals substituted into one expression
# sglang's kernel parameters (lengths, indptr, buffer) when the package does not define it.
DEFAULT_POSITIONS = (2, 3, 5)
VERDICT = {judge.MATCHED: MATCHED, judge.OVERRUN: OVERRUN, judge.HOLDS_ONLY_IF: HOLDS_ONLY_IF}
ORDER = (OVERRUN, ERROR, HOLDS_ONLY_IF, UNKNOWN, MATCHED)


def check_direct_kv(program: Program, report: AuditReport, replay: bool = True) -> None:
    """``replay``: run the package's kernel at each finding's counterexample."""
    launches = _launches(program)
    if not launches:
        return
    positions = _positions(program)
    kernel = _Kernel(program.index) if replay else None
    for fn, call in launches:
        where = f"{fn.rel}:{call.lineno}"
        for self_val in selves(program, fn):
            owner = self_val.cls.name if self_val is not None else fn.qual
            site_rows(report, KIND, owner, where, "the target-verify kv-index stream fits the buffer",
                      lambda: _rows(program, fn, self_val, owner, where, call, positions, kernel))


# --- where the launches are ------------------------------------------------------------------

def _is_kernel(e) -> bool:
    return (isinstance(e, ast.Name) and e.id == KERNEL) or (isinstance(e, ast.Attribute) and e.attr == KERNEL)


def _launches(program: Program) -> list:
    out = []
    for fn, node in attention_nodes(program, KERNEL):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and _is_kernel(node.func.value) \
                and _only_in_verify(fn.node, node.lineno):
            out.append((fn, node))
    return out


def verify_test(test, in_else: bool) -> bool:
    """The branch runs only in target verify: the body of ``if <x>.is_target_verify()`` (or of an
    ``and`` one of whose terms it is), the ``else`` of ``if not <x>.is_target_verify()``."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    if not negated and not in_else and isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(verify_test(v, False) for v in test.values)
    call = test.operand if negated else test
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
        and call.func.attr == "is_target_verify" and negated == in_else


def enclosing(func_node, line: int) -> list:
    """(statement, the field of its block holding line ``line``) of every compound statement
    around that line, outermost first."""
    out, body = [], func_node.body
    while body:
        stmt = next((s for s in body if s.lineno <= line <= s.end_lineno), None)
        if stmt is None:
            break
        body, field = _block_holding(stmt, line)
        if body is not None:
            out.append((stmt, field))
    return out


def _only_in_verify(func_node, line: int) -> bool:
    return any(isinstance(s, ast.If) and verify_test(s.test, field != "body") for s, field in enclosing(func_node, line))


def _block_holding(stmt, line: int):
    for field in ("body", "orelse", "finalbody"):
        inner = getattr(stmt, field, None)
        if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt) \
                and inner[0].lineno <= line <= inner[-1].end_lineno:
            return inner, field
    for h in getattr(stmt, "handlers", []):
        if h.body and h.body[0].lineno <= line <= h.body[-1].end_lineno:
            return h.body, "handler"
    return None, None


def _positions(program: Program) -> tuple:
    """The (lengths, indptr, buffer) parameter positions of the package's kernel."""
    found = program.index.find(KERNEL, KERNEL_FILES)
    if found is None:
        return DEFAULT_POSITIONS
    params = found.params()
    lens = next((i for i, p in enumerate(params) if "lens" in p), None)
    indptr = next((i for i, p in enumerate(params) if "indptr" in p), None)
    buf = next((i for i, p in enumerate(params) if "kv_indices" in p and "indptr" not in p), None)
    return (lens, indptr, buf) if None not in (lens, indptr, buf) else DEFAULT_POSITIONS


def _arg(call: ast.Call, i: int):
    return call.args[i] if i < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: i + 1]) \
        else None


# --- the values along each path to the launch --------------------------------------------------

def _tracked(func_node, names: set) -> set:
    """``names`` and every local their assignments in the function read, transitively."""
    assigns: dict[str, list] = {}
    for node in ast.walk(func_node):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigns.setdefault(node.targets[0].id, []).append(node.value)
    out, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.add(name)
        for value in assigns.get(name, []):
            todo += [x.id for x in ast.walk(value) if isinstance(x, ast.Name)]
    return out


class TooManyPaths(Exception):
    pass


def _assigns(stmt, tracked: set) -> bool:
    return any(isinstance(x, ast.Assign) and any(isinstance(t, ast.Name) and t.id in tracked for t in x.targets)
               for x in ast.walk(stmt))


def _run(body, tracked: set, envs: list) -> list:
    for stmt in body:
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id in tracked:
                envs = [{**e, stmt.targets[0].id: (stmt.value, e)} for e in envs]
            elif _assigns(stmt, tracked):   # a tuple target: the value is not read here
                envs = [{**e, **{t.id: (None, e) for t in ast.walk(stmt.targets[0]) if isinstance(t, ast.Name)}}
                        for e in envs]
        elif not _assigns(stmt, tracked):
            continue
        elif isinstance(stmt, ast.If):
            envs = _run(stmt.body, tracked, envs) + _run(stmt.orelse, tracked, envs)
        elif isinstance(stmt, (ast.For, ast.While)):
            envs = envs + _run(stmt.body, tracked, envs)   # zero or more iterations: one is enough here
        else:
            envs = _run(getattr(stmt, "body", []), tracked, envs)
        if len(envs) > MAX_ENVS:
            raise TooManyPaths(f"more than {MAX_ENVS} paths through the assignments of {sorted(tracked)[:6]}")
    return envs


def _envs(func_node, line: int, tracked: set) -> list:
    """One environment (name -> (value expression, the environment it was assigned in)) per path
    of the ``if`` statements that assign a tracked local before line ``line``."""
    envs, body = [{}], func_node.body
    while body:
        before = [s for s in body if s.end_lineno < line]
        envs = _run(before, tracked, envs)
        holding = next((s for s in body if s.lineno <= line <= s.end_lineno), None)
        body = _block_holding(holding, line)[0] if holding is not None else None
    return envs


class _Inline(ast.NodeTransformer):
    def __init__(self, env: dict, depth: int):
        self.env, self.depth = env, depth

    def visit_Name(self, node):
        got = self.env.get(node.id)
        if got is None or got[0] is None or not isinstance(node.ctx, ast.Load):
            return node
        return inline(got[0], got[1], self.depth + 1)


def inline(expr, env: dict, depth: int = 0):
    """``expr`` with every local the environment knows replaced by its value, as assigned."""
    if depth > MAX_INLINE:
        return expr
    return _Inline(env, depth).visit(copy.deepcopy(expr))


# --- the tracer: numbers and the buffer, within the backend ---------------------------------------

class _DirectTracer(_VerifyTracer):
    """Reads ``<x>.draft_token_num`` (the verify input's draft tokens) as ``n``, ``a or b`` on
    numbers as its value, ``[x.clone() for _ in ...]`` as copies of ``x``, and never follows a parameter to its callers: what the launch needs is
    in its backend, and a walk of the whole package's call sites costs more than the audit."""

    def _resolve(self, e, frame, path, receiver):
        if isinstance(e, ast.Attribute) and e.attr == "draft_token_num" and not receiver:
            return [(Num(n), path)]
        if isinstance(e, ast.ListComp) and not _uses_targets(e):
            return [(Items(((e.elt, frame),)), path)]   # every element the same value (a copy of one buffer)
        if isinstance(e, ast.BoolOp) and isinstance(e.op, ast.Or) and len(e.values) == 2:
            out = []
            for a, p in self.resolve(e.values[0], frame, path):
                for b, q in self.resolve(e.values[1], frame, p):
                    if not (isinstance(a, Num) and isinstance(b, Num)):
                        return super()._resolve(e, frame, path, receiver)
                    out.append((Num(z3.If(a.term != 0, a.term, b.term) if z3.is_expr(a.term) else a.term or b.term), q))
            return out
        return super()._resolve(e, frame, path, receiver)

    def _param(self, name, frame, path, receiver):
        if frame.args is None and name not in self.bindings.parameters and name != WRITER_PARAMS[0]:
            return [(Ended(f"`{name}` of {frame.func.qual}: its callers are not followed", frame.func.where), path)]
        return super()._param(name, frame, path, receiver)


def _uses_targets(comp: ast.ListComp) -> bool:
    targets = {x.id for g in comp.generators for x in ast.walk(g.target) if isinstance(x, ast.Name)}
    return any(isinstance(x, ast.Name) and x.id in targets for x in ast.walk(comp.elt))


def _numbers(tracer, expr, frame) -> list:
    # the tracer memoises by node identity: an inlined copy must outlive it, or a later copy
    # given the same id would be read as this one
    tracer.keep = [*getattr(tracer, "keep", []), expr]
    tracer.steps = 0
    return tracer.resolve(expr, frame, Path())


def _deltas(lengths) -> list | None:
    """The expressions added to the committed lengths (0 for none); None: not read."""
    if isinstance(lengths, ast.IfExp):
        a, b = _deltas(lengths.body), _deltas(lengths.orelse)
        return None if a is None or b is None else a + b
    if _bare_seq_lens(lengths):
        return [ast.Constant(0)]
    if isinstance(lengths, ast.BinOp) and isinstance(lengths.op, ast.Add):
        if _bare_seq_lens(lengths.left):
            return [lengths.right]
        if _bare_seq_lens(lengths.right):
            return [lengths.left]
    return None


def _scratch(program: Program, fn, self_val, call):
    """(method, allocation, size argument) when ``call`` is ``self.<m>(...)`` of a grow-only
    scratch defined in the launch's own file: ``m`` returns ``self.<a>[:k]`` and reallocates
    ``self.<a>`` with ``k`` entries."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and self_val is not None
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "self"):
        return None
    m = program.lookup(self_val.cls, call.func.attr)
    if m is None or m.path != fn.path:
        return None
    params = [a for a in m.params() if a != "self"]
    for ret in (x for x in ast.walk(m.node) if isinstance(x, ast.Return)):
        v = ret.value
        if not (isinstance(v, ast.Subscript) and isinstance(v.slice, ast.Slice) and v.slice.lower is None
                and isinstance(v.slice.upper, ast.Name) and v.slice.upper.id in params
                and isinstance(v.value, ast.Attribute) and isinstance(v.value.value, ast.Name)
                and v.value.value.id == "self"):
            continue
        k = v.slice.upper.id
        for node in ast.walk(m.node):
            if isinstance(node, ast.Assign) and any(ast.unparse(t) == ast.unparse(v.value) for t in node.targets) \
                    and isinstance(node.value, ast.Call) and node.value.args \
                    and ast.unparse(node.value.args[0]) == k and _allocator(node.value):
                arg = call_argument(call, params, k)
                return (m, node, arg) if arg is not None else None
    return None


def _allocator(call: ast.Call) -> bool:
    f = call.func
    return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch" \
        and f.attr in bindings.BINDINGS.allocators


def _stream_sized(buf, indptr) -> bool:
    """``torch.empty(<indptr>[-1], ...)``: a buffer exactly as long as the stream."""
    return isinstance(buf, ast.Call) and _allocator(buf) and bool(buf.args) and isinstance(buf.args[0], ast.Subscript) \
        and ast.unparse(buf.args[0].slice) == "-1" and ast.unparse(buf.args[0].value) == ast.unparse(indptr)


def _prefix_sum_of(func_node, env, lengths_text: str) -> bool:
    """Some ``<x>[...] = torch.cumsum(<lengths>, ...)`` in the function: ``kv_indptr`` is the
    prefix sum of the lengths the kernel is given."""
    for node in ast.walk(func_node):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value.args \
                and ast.unparse(node.value.func) == "torch.cumsum" \
                and ast.unparse(inline(node.value.args[0], env)) == lengths_text:
            return True
    return False


# --- rows ----------------------------------------------------------------------------------------

def _rows(program, fn, self_val, owner, where, call, positions, kernel) -> list[Row]:
    subject = f"{owner} ({where}) -> {KERNEL}[...] (a backend's own target-verify launch)"
    check = "the kv-index stream of the launch (spec.direct_kv_indices_written, S + bs*delta) fits the buffer"
    exprs = [_arg(call, i) for i in positions]
    if None in exprs or not all(isinstance(e, (ast.Name, ast.Attribute, ast.Subscript)) for e in exprs):
        return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, check, "ast", UNKNOWN,
                    "the launch's lengths, kv_indptr or buffer is not a plain argument")]
    lengths, indptr, buf = exprs
    names = {x.id for e in exprs for x in ast.walk(e) if isinstance(x, ast.Name)}
    tracer = _DirectTracer(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    frame = tracer.top_frame(fn, self_val)
    judged: dict = {}   # row id -> [(Judgement, what was judged, alloc, delta)]
    try:
        envs = _envs(fn.node, call.lineno, _tracked(fn.node, names))
    except TooManyPaths as e:
        return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, check, "ast", UNKNOWN, str(e))]
    for env in envs:
        lens = inline(lengths, env)
        if not _prefix_sum_of(fn.node, env, ast.unparse(lens)):
            return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, check, "ast", UNKNOWN,
                        f"kv_indptr is not seen set to the prefix sums of the lengths `{ast.unparse(lens)[:80]}`")]
        deltas = _deltas(lens)
        if deltas is None:
            return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, check, "ast", UNKNOWN,
                        f"the lengths `{ast.unparse(lens)[:80]}` are not the committed seq_lens, widened or not")]
        for d_expr in deltas:
            for dv, _ in _numbers(tracer, d_expr, frame):
                for a, p, label in _buffers(program, fn, self_val, owner, where, tracer, frame, inline(buf, env),
                                            inline(indptr, env), dv):
                    _judge_into(judged, owner, where, a, p, label, dv)
    if not judged:
        return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, check, "ast", UNKNOWN,
                    f"`{ast.unparse(buf)}` was not traced to an allocation")]
    return [_row(row_id, subject, check, entries, kernel) for row_id, entries in judged.items()]


def _buffers(program, fn, self_val, owner, where, tracer, frame, buf, indptr, dv) -> list:
    """(allocation, path, what it is) of the buffer; an allocation whose size did not come out a
    number is an ``Ended``."""
    if not isinstance(dv, Num):
        return [(dv, Path(), "the draft tokens added to the lengths")]
    got = _scratch(program, fn, self_val, buf)
    if got is not None:
        m, stmt, size = got
        out = []
        for v, p in _numbers(tracer, size, frame):
            a = Alloc(ast.unparse(stmt.value.func), (v.term,), f"{m.rel}:{stmt.lineno}", ast.unparse(stmt.value),
                      owner, m.qual, holder=ast.unparse(stmt.targets[0])) if isinstance(v, Num) else v
            out.append((a, p, f"the grow-only scratch {m.name}({ast.unparse(size)[:60]})"))
        return out
    if _stream_sized(buf, indptr):
        written = spec.direct_kv_indices_written(bs, dv.term, judge.S)
        return [(Alloc(ast.unparse(buf.func), (written,), f"{fn.rel}:{buf.lineno}", ast.unparse(buf), owner, fn.qual,
                       holder="kv_indices"), Path(), "a buffer of kv_indptr[-1] entries")]
    found = traced_allocations(program, fn, self_val, buf, where, _DirectTracer)
    if found:
        return [(a, p, f"`{ast.unparse(buf)[:60]}`") for a, p in found.values()]
    # nothing allocated: say where the trail ended
    ends = {getattr(v, "reason", type(v).__name__) for v, _ in _numbers(tracer, buf, frame)}
    return [(Ended("; ".join(sorted(ends))[:300] or "no value", where), Path(), f"`{ast.unparse(buf)[:60]}`")]


def _judge_into(judged: dict, owner, where, a, path, label, dv) -> None:
    if not isinstance(a, Alloc):
        judged.setdefault(f"consumer.{KIND}[{owner}@{where}]", []).append(
            (judge.Judgement("unknown", detail=f"{label}: {getattr(a, 'reason', a)}"), label, None, None))
        return
    holder = (a.holder or a.func.split(".")[-1]).removeprefix("self.")
    row_id = f"consumer.{KIND}[{owner}.{holder}{a.view}@{where}]"
    bad = next((d for d in a.dims if not isinstance(d, (int, z3.ArithRef))), None)
    if bad is not None:
        j = judge.Judgement("unknown", detail=f"a dimension of {a.text} is {bad}")
    else:
        j = judge.judge(KIND, a.dims, list(path.conds), bindings=bindings.BINDINGS, delta=dv.term, name=row_id)
    entries = judged.setdefault(row_id, [])
    if not any(term_ids([e[3]]) == term_ids([dv.term]) and e[2] is not None and e[2].site == a.site
               and e[0].verdict == j.verdict for e in entries):
        entries.append((j, label, a, dv.term))


def _status(j) -> str:
    if j.verdict == judge.INFEASIBLE:
        return MATCHED
    return UNKNOWN if j.verdict == "unknown" else VERDICT.get(j.verdict, ERROR)


def _row(row_id, subject, check, entries, kernel) -> Row:
    # the worst path first; among equals, one that widens the lengths
    entries = sorted(entries, key=lambda e: (ORDER.index(_status(e[0])), not z3.is_expr(e[3])))
    j, label, a, delta = entries[0]
    status = _status(j)
    shown = "n" if z3.is_expr(delta) else delta
    detail = (f"holds only if {j.condition}: " if j.condition else "") + (
        "no path to the launch is consistent with the preconditions" if j.verdict == judge.INFEASIBLE else j.detail)
    if a is not None:
        detail += f" [lengths seq_len + {shown}; the buffer: {label}, allocated at {a.site}]"
    others = sorted({f"lengths seq_len + {'n' if z3.is_expr(e[3]) else e[3]}: {_status(e[0])}"
                     for e in entries[1:] if e[2] is not None})
    if others:
        detail += " | other paths: " + "; ".join(others)
    if a is None or status == UNKNOWN:
        return Row(row_id, subject, check, "ast", UNKNOWN, detail)
    row = Row(row_id, subject, check, "z3", status, detail, j.counterexample, allocation=f"{a.site} {a.text}",
              size=j.size, required=j.required)
    if status in (OVERRUN, HOLDS_ONLY_IF) and j.counterexample and kernel is not None:
        kernel.replay(row, a, j.counterexample, delta=judge.evaluate(delta, j.counterexample))
    return row
