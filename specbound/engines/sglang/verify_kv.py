"""Consumer rows ``consumer.verify_kv_indices[...]``: a backend's own buffer handed to a
target-verify kv-index writer.

A *writer* is a function taking ``kv_indices_buf`` and ``paged_kernel_lens`` that widens the
lengths (``paged_kernel_lens + <draft tokens>``): sglang's verify inputs'
``generate_attn_arg_prefill``, which writes ``seq_len + n`` entries per request through
``create_flashinfer_kv_indices_triton`` (``spec.verify_kv_indices_written``; that kernel's
stores are bounded by each request's length, not by the buffer).  A *site* is a call of a
writer with ``kv_indices_buf=<buffer>``, or a dict entry ``"kv_indices_buf": <buffer>`` in
an attention backend (the plan arguments sglang hands to the writer that way), whose buffer
the tracer follows to its allocation.  Each allocation is judged through
:func:`specbound.audit.judge.judge` against ``kv_indptr[bs] = S + bs*n``: ``matched``, ``holds only if
seq_len[b] + n <= C`` or ``overrun``; a finding is replayed by sglang's own kernel under
the checked interpreter at the counterexample.
"""

from __future__ import annotations

import ast
import time

from specbound.audit import judge
from specbound.audit.extract import SourceIndex
from specbound.audit.kernels import Aliases, Unavailable, bind, launch_finding, record_replay, triton_env
from specbound.audit.program import Program
from specbound.audit.trace import Tracer
from specbound.audit.trace_values import Ended
from specbound.audit.report import ERROR, HOLDS_ONLY_IF, MATCHED, OVERRUN, UNKNOWN, AuditReport, Row
from .bindings import BINDINGS
from .launch import KV_ALIASES
from .site_trace import attention_nodes, functions_mentioning, selves, traced_allocations

WRITER_PARAMS = ("kv_indices_buf", "paged_kernel_lens")
KERNEL = "create_flashinfer_kv_indices_triton"
KERNEL_FILES = ("kernels/ops/attention/kv_indices.py", "srt/layers/attention/utils.py")
# The kernel's parameters, normalised (kernels.value_key), that name one of the values fed.
ALIASES = Aliases({**KV_ALIASES, "page_kernel_lens": "paged_kernel_lens", "req_to_token_ptr_stride": "row_stride",
                   "req_to_token_stride": "row_stride"}, KV_ALIASES.respell)
VERDICT = {judge.MATCHED: MATCHED, judge.OVERRUN: OVERRUN, judge.HOLDS_ONLY_IF: HOLDS_ONLY_IF}


def check_verify_kv(program: Program, report: AuditReport, replay: bool = True) -> None:
    """``replay``: run sglang's kernel at each finding's counterexample (the audit's
    ``--no-kernels`` leaves it out)."""
    writers = _writers(program)
    if not writers:
        return
    kernel = _Kernel(program.index) if replay else None
    for fn, node, buf in _sites(program, writers):
        where = f"{fn.rel}:{node.lineno}"
        for self_val in selves(program, fn):
            if self_val is not None and not _runs_in_verify(program, fn, self_val.cls):
                continue
            t0 = time.perf_counter()
            owner = self_val.cls.name if self_val is not None else fn.qual
            try:
                found = traced_allocations(program, fn, self_val, buf, where, _VerifyTracer)
                if not found:
                    report.add(Row(f"consumer.verify_kv_indices[{owner}@{where}]", f"{owner} ({where})",
                                   "trace the kv_indices buffer handed to the verify writer to its allocation",
                                   "ast", UNKNOWN, f"`{ast.unparse(buf)}` was not traced to an allocation",
                                   seconds=time.perf_counter() - t0))
                    continue
                for a, path in found.values():
                    row = _row(owner, where, writers, a, path, kernel)
                    row.seconds = time.perf_counter() - t0
                    report.add(row)
            except Exception as e:  # noqa: BLE001 - the audit's own failure is an error row
                report.add(Row(f"consumer.verify_kv_indices[{owner}@{where}]", f"{owner} ({where})",
                               "the verify kv-index stream fits the buffer", "z3", ERROR,
                               f"the consumer check failed: {type(e).__name__}: {e}"))


def _writers(program: Program) -> dict[str, str]:
    """Writer name -> where it is defined."""
    out = {}
    for fn in functions_mentioning(program, "kv_indices_buf"):
        if all(x in fn.params() for x in WRITER_PARAMS) and any(
                isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.left, ast.Name)
                and node.left.id == "paged_kernel_lens" for node in ast.walk(fn.node)):
            out.setdefault(fn.name, fn.where)
    return out


def _chain(fn) -> set[str]:
    """Methods of ``fn``'s class that reach ``fn`` through ``self.<method>(...)`` calls."""
    methods, names, grew = fn.cls.methods(), {fn.name}, True
    while grew:
        grew = False
        for m in methods.values():
            if m.name not in names and any(
                    isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in names
                    and isinstance(c.func.value, ast.Name) and c.func.value.id == "self" for c in ast.walk(m.node)):
                names.add(m.name)
                grew = True
    return names


def _not_in_verify(test: ast.expr, in_else: bool) -> bool:
    """The branch runs only outside target verify: the body of ``if not ...is_target_verify()``
    (negated anywhere in the test) or the ``else`` of ``if ... is_target_verify() ...``."""
    text = ast.unparse(test)
    if "is_target_verify()" not in text:
        return False
    negated = any(isinstance(x, ast.UnaryOp) and isinstance(x.op, ast.Not) and "is_target_verify()" in ast.unparse(x)
                  for x in ast.walk(test))
    return negated != in_else


def _super_reaches_in_verify(override, name: str) -> bool:
    def visit(nodes, excluded):
        for node in nodes:
            if isinstance(node, ast.If):
                if visit(node.body, excluded or _not_in_verify(node.test, False)) or \
                        visit(node.orelse, excluded or _not_in_verify(node.test, True)):
                    return True
                continue
            for sub in ast.walk(node):
                if not excluded and isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                        and sub.func.attr == name and isinstance(sub.func.value, ast.Call) \
                        and ast.unparse(sub.func.value).startswith("super("):
                    return True
            if isinstance(node, (ast.For, ast.While, ast.With, ast.Try)) and visit(
                    [n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)], excluded):
                return True
        return False
    return visit(override.node.body, False)


def _runs_in_verify(program: Program, fn, cls) -> bool:
    """A subclass runs ``fn`` in target verify unless it overrides a method of the chain that
    reaches it and its override calls ``super()`` only outside target verify (sglang's
    FlashMLA and TRT-LLM MLA backends route verify to their own metadata)."""
    if fn.cls is None or cls.name == fn.cls.name:
        return True
    for name in _chain(fn):
        own = program.lookup(cls, name)
        if own is not None and own.cls is not None and own.cls.name != fn.cls.name \
                and not _super_reaches_in_verify(own, name):
            return False
    return True


class _VerifyTracer(Tracer):
    """Stops at ``init_cuda_graph_state(..., kv_indices_buf=...)``: a multi-step draft backend
    handing one of its rows to a draft step's backend.  The target-verify graph runner calls
    ``init_cuda_graph_state(max_bs, max_num_tokens)``, so such a row never receives a verify
    stream (the buffer rows judge it for the draft kernel); not following it also keeps the
    stage cheap."""

    def _param(self, name, frame, path, receiver):
        if name == WRITER_PARAMS[0] and frame.func.name == "init_cuda_graph_state":
            return [(Ended(f"`{name}` of {frame.func.qual}: a draft step's row", frame.func.where), path)]
        return super()._param(name, frame, path, receiver)


def _handed_on(expr) -> bool:
    """``x["kv_indices_buf"]``: the buffer of a dict entry, judged at the entry."""
    return isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) \
        and expr.slice.value == WRITER_PARAMS[0]


def _sites(program: Program, writers: dict):
    out = []
    for fn, node in attention_nodes(program, "kv_indices_buf"):
        if isinstance(node, ast.Dict):
            out += [(fn, node, v) for k, v in zip(node.keys, node.values)
                    if isinstance(k, ast.Constant) and k.value == WRITER_PARAMS[0]]
        elif isinstance(node, ast.Call) and _callee(node) in writers:
            out += [(fn, node, kw.value) for kw in node.keywords
                    if kw.arg == WRITER_PARAMS[0] and not _handed_on(kw.value)]
    return out


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _row(owner, where, writers, a, path, kernel) -> Row:
    holder = (a.holder or a.func.split(".")[-1]).removeprefix("self.")
    row_id = f"consumer.verify_kv_indices[{owner}.{holder}{a.view}@{where}]"
    names = ", ".join(f"{k} ({v})" for k, v in sorted(writers.items()))
    subject = f"{owner} ({a.site}) -> kv_indices_buf at {where} -> {names} -> {KERNEL}"
    check = "the target-verify kv-index stream (seq_len + n entries per request, spec.verify_kv_indices_written) " \
            "fits the buffer"
    j = judge.judge("verify_kv_indices", a.dims, list(path.conds), bindings=BINDINGS, name=row_id)
    if j.verdict == judge.INFEASIBLE:
        status, detail = MATCHED, "no path to the site is consistent with the preconditions"
    else:
        status = VERDICT.get(j.verdict, ERROR)
        detail = (f"holds only if {j.condition}: " if j.condition else "") + j.detail
    row = Row(row_id, subject, check, "z3", status, detail, j.counterexample, allocation=f"{a.site} {a.text}",
              size=j.size, required=j.required)
    if status in (OVERRUN, HOLDS_ONLY_IF) and j.counterexample and kernel is not None:
        kernel.replay(row, a, j.counterexample)
    return row


class _Kernel:
    """sglang's kv-index kernel, defined once under the checked interpreter when a row needs it."""

    def __init__(self, index: SourceIndex):
        self.index, self.loaded, self.why = index, None, ""

    def _load(self):
        if self.loaded is None and not self.why:
            found = self.index.find(KERNEL, KERNEL_FILES)
            if found is None:
                self.why = f"no `{KERNEL}` in this sglang"
                return None
            _, missing = bind(found, dict.fromkeys(_FED), ALIASES)
            if missing:
                self.why = f"{KERNEL} ({found.where}) takes {missing}, which the replay does not feed"
                return None
            try:
                triton, tl, _ = triton_env()
                self.loaded = (found, self.index.load_kernel(found, triton, tl))
            except Unavailable as e:
                self.why = str(e)
            except Exception as e:  # noqa: BLE001
                self.why = f"cannot define {KERNEL}: {type(e).__name__}: {e}"
        return self.loaded

    def replay(self, row: Row, a, values: dict, delta=None) -> None:
        """The counterexample's batch (each ``seq_len <= C``, summing to ``S``) written the way
        the verify writer does: lengths ``seq_len + n`` (``+ delta`` when given: a backend's own
        launch), ``kv_indptr`` their prefix sums, into a buffer of the allocation's size."""
        import torch

        loaded = self._load()
        numel = judge.evaluate(_product(a.dims), values)
        seq = judge.seq_lens_for(values, values.get("max_context_len", 0))
        if loaded is None or numel is None or seq is None:
            row.detail += f"; no replay: {self.why or 'the counterexample is not concrete'}"
            return
        found, kernel = loaded
        n, bs = values["num_draft_tokens"] if delta is None else delta, len(seq)
        lens = torch.tensor([s + n for s in seq], dtype=torch.int32)
        indptr = torch.zeros(bs + 1, dtype=torch.int32)
        indptr[1:] = torch.cumsum(lens, 0)
        width = int(lens.max()) if bs else 1
        table = torch.arange(bs * width, dtype=torch.int32).reshape(bs, width)
        out = torch.full((numel,), -1, dtype=torch.int32)
        feed = {"req_to_token": table, "req_pool_indices": torch.arange(bs, dtype=torch.int64),
                "paged_kernel_lens": lens, "kv_indptr": indptr, "kv_start_idx": None, "kv_indices": out,
                "row_stride": width}
        kwargs, _ = bind(found, feed, ALIASES)
        f = launch_finding(lambda: kernel[(bs,)](**kwargs))
        row.replay = {**values, "seq_lens": seq, "buffer_numel": numel, "entries_written": int(indptr[-1])}
        record_replay(row, f, f"sglang's {KERNEL}", found.where, f"writing {int(indptr[-1])} entries into {numel}")


_FED = ("req_to_token", "req_pool_indices", "paged_kernel_lens", "kv_indptr", "kv_start_idx", "kv_indices",
        "row_stride")


def _product(dims):
    out = 1
    for d in dims:
        out = out * d
    return out
