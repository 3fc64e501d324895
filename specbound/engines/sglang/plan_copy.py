"""Consumer rows ``consumer.plan_copy[<class>.<buffer>@<copy>]``: the verify kv-index stream a
CUDA-graph prefill wrapper's sync-free plan copies into the wrapper's own ``paged_kv_indices_buf``
(sglang's ``fast_prefill_plan``, installed by ``FlashInferAttnBackend`` for target verify).

The contract (:func:`specbound.spec.plan_copy_kv_indices_len`): the plan runs
``self._paged_kv_indices_buf[: len(s)].copy_(s)`` with ``s`` the verify stream, ``S + bs*n``
entries; a stream longer than the buffer makes ``copy_`` raise (the slice is clipped to the
buffer): a crash, never a silent write.

* A *plan* is a function of an attention backend (:func:`.site_trace.in_folder`) running that
  slice copy of one of its
  parameters into ``<x>._paged_kv_indices_buf``.
* An *install* is ``<w>.begin_forward = partial(<plan>, <w>)`` in a loop ``for <w> in
  self.<d>[...]``, under an ``if`` that runs only in target verify (``<x>.is_target_verify()``
  the test or one of its ``and`` terms).
* The wrappers of ``self.<d>`` are followed one hop within the class: ``self.<d>[k] = v`` with
  ``v = self.<m>(...)``; every wrapper built in ``<m>`` with ``paged_kv_indices_buf=<e>`` gives
  ``<e>``, traced to its allocation by the direct-launch stage's bounded tracer.
* Judged through :func:`specbound.audit.judge.judge` against the verify stream under the spec's
  preconditions (the tree shape admits a one-token tree, ``n = 1``): ``matched``, ``holds only if
  seq_len[b] + n <= max_context_len`` or ``crash``; the detail adds the core's verdict for trees
  of two or more tokens.  A finding is replayed with torch on the CPU: the slice copy at the
  counterexample, its RuntimeError quoted.
"""

from __future__ import annotations

import ast

import z3

from specbound import spec
from specbound.proofs.model import C, n

from specbound.audit import judge
from specbound.audit.program import Program
from specbound.audit.report import CRASH, ERROR, HOLDS_ONLY_IF, MATCHED, UNKNOWN, AuditReport, Row
from . import bindings
from .consumers import replay_slice_copy, site_rows
from .direct_kv import _DirectTracer, enclosing, verify_test
from .site_trace import attention_nodes, selves, traced_allocations

KIND = "plan_copy"
PLAN_BUFFER = "_paged_kv_indices_buf"
WRAPPER_KEYWORD = "paged_kv_indices_buf"
VERDICT = {judge.MATCHED: MATCHED, judge.OVERRUN: CRASH, judge.HOLDS_ONLY_IF: HOLDS_ONLY_IF}
CHECK = "the verify kv-index stream the plan copies (spec.plan_copy_kv_indices_len) fits the wrapper's buffer"


def check_plan_copies(program: Program, report: AuditReport, replay: bool = True) -> None:
    """``replay``: run the copy with torch at each finding's counterexample."""
    plans = _plans(program)
    for name, store, fn, installed in grouped_installs(program, plans):
        plan, copy = plans[name]
        where = f"{plan.rel}:{copy.lineno}"
        for self_val in selves(program, fn):
            owner = self_val.cls.name if self_val is not None else fn.qual
            site_rows(report, KIND, owner, where, CHECK,
                      lambda: _rows(program, self_val, owner, where, installed, store, replay))


def grouped_installs(program: Program, plans: dict) -> list:
    """(plan name, wrapper store, installing method, ``file:lines`` of its installs): one per
    (plan, installing method, wrapper store), naming every install."""
    grouped: dict = {}
    for fn, install, store in installs(program, plans) if plans else ():
        grouped.setdefault((install.value.args[0].id, fn.key, store), (fn, []))[1].append(install.lineno)
    return [(name, store, fn, f"{fn.rel}:{', '.join(map(str, lines))}")
            for (name, _, store), (fn, lines) in grouped.items()]


def _plans(program: Program) -> dict:
    """Plan name -> (function, the copy call)."""
    out = {}
    for fn, node in attention_nodes(program, PLAN_BUFFER):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copy_"
                and len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id in fn.params()):
            continue
        dest = node.func.value
        if isinstance(dest, ast.Subscript) and isinstance(dest.slice, ast.Slice) and dest.slice.lower is None \
                and isinstance(dest.value, ast.Attribute) and dest.value.attr == PLAN_BUFFER \
                and ast.unparse(dest.slice.upper) == f"len({node.args[0].id})":
            out.setdefault(fn.name, (fn, node))
    return out


def installs(program: Program, plans: dict) -> list:
    """(method, the install assignment, ``<d>`` of the loop ``for <w> in self.<d>[...]``)."""
    out = []
    for fn, node in attention_nodes(program, "begin_forward"):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Attribute) and node.targets[0].attr == "begin_forward"
                and isinstance(node.value, ast.Call) and ast.unparse(node.value.func).split(".")[-1] == "partial"
                and node.value.args and isinstance(node.value.args[0], ast.Name) and node.value.args[0].id in plans):
            continue
        chain = enclosing(fn.node, node.lineno)
        loops = [s for s, _ in chain if isinstance(s, ast.For) and isinstance(s.iter, ast.Subscript)
                 and isinstance(s.iter.value, ast.Attribute) and ast.unparse(s.iter.value.value) == "self"]
        if loops and any(isinstance(s, ast.If) and verify_test(s.test, field != "body") for s, field in chain):
            out.append((fn, node, loops[-1].iter.value.attr))
    return out


def wrapper_buffers(program: Program, cls, store: str, keyword: str = WRAPPER_KEYWORD) -> list:
    """(method, expression) of each ``<keyword>=`` (or dict entry ``"<keyword>": e``, handed on as
    ``**extra``) of the wrappers stored in ``self.<store>``: ``self.<store>[k] = v``, ``v =
    self.<m>(...)`` (or the call itself)."""
    out, seen = [], set()
    for method in program.visible_methods(cls).values():
        for node in program.walk(method.node):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Subscript)
                    and ast.unparse(node.targets[0].value) == f"self.{store}"):
                continue
            values = [node.value] if isinstance(node.value, ast.Call) else [
                a.value for a in program.walk(method.node) if isinstance(a, ast.Assign) and isinstance(node.value, ast.Name)
                and any(ast.unparse(t) == node.value.id for t in a.targets)]
            for v in values:
                f = v.func if isinstance(v, ast.Call) else None
                if not (isinstance(f, ast.Attribute) and ast.unparse(f.value) == "self"):
                    continue
                builder = program.lookup(cls, f.attr)
                if builder is None or builder.key in seen:
                    continue
                seen.add(builder.key)
                for x in program.walk(builder.node):
                    if isinstance(x, ast.Call):
                        out += [(builder, k.value) for k in x.keywords if k.arg == keyword]
                    elif isinstance(x, ast.Dict):
                        out += [(builder, v) for k, v in zip(x.keys, x.values)
                                if isinstance(k, ast.Constant) and k.value == keyword]
    return out


def _rows(program, self_val, owner, where, installed, store, replay) -> list[Row]:
    subject = f"{owner} (installed at {installed} on self.{store}) -> plan copy at {where}"
    if self_val is None:
        return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, CHECK, "ast", UNKNOWN, "the install is not a method")]
    found = {}
    for builder, expr in wrapper_buffers(program, self_val.cls, store):
        for a, p in traced_allocations(program, builder, self_val, expr, where, _DirectTracer).values():
            found.setdefault((a.site, a.view), (a, p))
    if not found:
        return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, CHECK, "ast", UNKNOWN,
                    f"no {WRAPPER_KEYWORD} of the wrappers in self.{store} was traced to an allocation")]
    return [_row(owner, where, subject, a, p, replay) for a, p in found.values()]


def _row(owner, where, subject, a, path, replay) -> Row:
    holder = (a.holder or a.func.split(".")[-1]).removeprefix("self.")
    row_id = f"consumer.{KIND}[{owner}.{holder}{a.view}@{where}]"
    bad = next((d for d in a.dims if not isinstance(d, (int, z3.ArithRef))), None)
    if bad is not None:
        return Row(row_id, subject, CHECK, "ast", UNKNOWN, f"a dimension is {bad}", allocation=f"{a.site} {a.text}")
    conds = list(path.conds)
    j = judge.judge("verify_kv_indices", a.dims, conds, bindings=bindings.BINDINGS, name=row_id)
    status = MATCHED if j.verdict == judge.INFEASIBLE else VERDICT.get(j.verdict, ERROR)
    detail = (f"holds only if {j.condition}: " if j.condition else "") + j.detail
    if status != MATCHED:
        # what the spec's tree shape admits and sglang's topk = 1 chains (n = steps + 1 >= 2) do not
        two = judge.judge("verify_kv_indices", a.dims, conds + [n >= 2, C >= 2], bindings=bindings.BINDINGS,
                          name=f"{row_id}/two_tokens")
        detail += f" | with num_draft_tokens >= 2 and max_context_len >= 2: {VERDICT.get(two.verdict, two.verdict)}"
    row = Row(row_id, subject, CHECK, "z3", status, detail, j.counterexample, allocation=f"{a.site} {a.text}",
              size=j.size, required=j.required)
    if status in (CRASH, HOLDS_ONLY_IF) and j.counterexample and replay:
        _replay(row, a, j.counterexample)
    return row


def _replay(row: Row, a, values: dict) -> None:
    """The plan's copy at the counterexample, with torch on the CPU: a buffer of the allocation's
    size, the verify stream of the batch's size, ``buf[: len(s)].copy_(s)``."""
    import torch

    numel = judge.evaluate(a.numel(), values)
    if numel is None:
        row.detail += "; no replay: the allocation's size is not concrete at the counterexample"
        return
    k = spec.plan_copy_kv_indices_len(values["bs"], values["num_draft_tokens"], values["seq_lens_sum"])
    row.replay = {**values, "buffer_numel": numel, "entries_copied": k}
    replay_slice_copy(row, numel, k, torch.int32, lambda buf, s: buf[: len(s)].copy_(s),
                      f"buf[:{k}].copy_(stream) into {numel} entries", f"buffer {numel} >= stream {k} entries")
