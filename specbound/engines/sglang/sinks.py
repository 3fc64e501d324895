"""The kernel call sites the buffer audit starts from, and the traced buffers behind them.

* Draft kv kernel: every launch ``<...>generate_draft_decode_kv_indices[grid](...)``; the
  arguments are matched to the parameters of the Triton kernel this sglang defines.
* Tree build: every call of a tree-build op (a callee whose name contains ``build_tree``
  and that takes a ``tree_mask``): sglang's own definition when it has one (the Triton
  wrapper, ``build_tree_kernel_efficient_func``), else the op's documented positional
  parameters (:data:`.bindings.TREE_OP_PARAMS`; sgl-kernel's CUDA op, the NPU op).  A call
  inside another tree-build op is that op's implementation, not a separate entry.

:func:`traced_buffers` is the API other code uses (the kernel proofs size sglang's buffers
with it): every buffer that reaches a kernel, per class whose instances make the call,
with its allocation, its shape as Z3 terms and the path conditions it was found under.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

import z3

from specbound.audit.extract import SourceIndex
from specbound.audit.kernels import value_key
from specbound.audit.program import FuncInfo, Program, callee_name
from specbound.audit.trace import Tracer
from specbound.audit.trace_values import Alloc, Ended, Instance, NoneValue, Opaque, Path
from . import bindings
from .launch import KV_ALIASES, KV_FILES, TREE_ALIASES
from .locate import PACKAGE


@dataclass
class SinkSite:
    sink: bindings.Sink
    func: FuncInfo           # the function that makes the call
    call: ast.Call
    params: list[str]        # the kernel's parameters, normalised, in positional order
    kernel: str              # the callee as written
    kernel_where: str        # where its definition is ("" when sglang does not define it)

    @property
    def where(self) -> str:
        return f"{self.func.rel}:{self.call.lineno}"

    def argument(self, param: str) -> ast.expr | None:
        for kw in self.call.keywords:
            if kw.arg is not None and self._norm(kw.arg) == param:
                return kw.value
        if param in self.params:
            i = self.params.index(param)
            if i < len(self.call.args) and not any(isinstance(a, ast.Starred) for a in self.call.args[: i + 1]):
                return self.call.args[i]
        return None

    def _norm(self, name: str) -> str:
        return value_key(name, KV_ALIASES if self.sink is bindings.KV_SINK else TREE_ALIASES)


@dataclass
class TracedBuffer:
    """One way a buffer reaches a kernel call: the allocation (or where the trail ended)."""
    site: SinkSite
    owner: str                           # the class whose instance makes the call (or the function)
    value: Any                           # trace.Alloc, or trace.Ended / trace.Opaque (untraced)
    path: Path
    companions: dict[str, Any] = field(default_factory=dict)   # "kv_indices_stride" / "tree_mask_mode"
    variables: dict[str, Any] = field(default_factory=dict)    # companion -> its Z3 variable in path conditions

    @property
    def alloc(self) -> Alloc | None:
        return self.value if isinstance(self.value, Alloc) else None

    @property
    def kind(self) -> str:
        return self.site.sink.kind


def _kernel_params(index: SourceIndex, name: str, files, aliases) -> tuple[list[str], str] | None:
    found = index.find(name, files)
    if found is None:
        return None
    return [value_key(p, aliases) for p in found.params()], found.where


def find_sites(program: Program) -> list[SinkSite]:
    index = program.index
    out: list[SinkSite] = []
    kv = _kernel_params(index, bindings.KV_SINK.kernel, KV_FILES, KV_ALIASES)
    for site in program.calls_to(bindings.KV_SINK.kernel):
        if isinstance(site.call.func, ast.Subscript):
            params, where = kv if kv else ([], "")
            out.append(SinkSite(bindings.KV_SINK, site.caller, site.call, params, ast.unparse(site.call.func.value),
                                where))
    seen = set()
    for path in program.files_mentioning(bindings.TREE_SINK.kernel, whole_words=False):
        tree = index.tree(path)
        if tree is None:
            continue
        for fn in program._functions_in(path, tree):
            if _takes_tree_mask(fn.node):
                continue  # an op's own implementation
            for node in program.walk(fn.node):
                if not isinstance(node, ast.Call):
                    continue
                name = callee_name(node.func)
                if not name or bindings.TREE_SINK.kernel not in name or id(node) in seen:
                    continue
                params = _tree_op_params(program, name, fn)
                if params is None:
                    continue
                seen.add(id(node))
                out.append(SinkSite(bindings.TREE_SINK, fn, node, params[0], ast.unparse(node.func), params[1]))
    return out


def _takes_tree_mask(node) -> bool:
    return any(value_key(a.arg, TREE_ALIASES) == "tree_mask" for a in (*node.args.posonlyargs, *node.args.args,
                                                                       *node.args.kwonlyargs))


def _tree_op_params(program: Program, name: str, caller: FuncInfo):
    """The op's parameters (normalised) and where it is defined; None when the callee is a
    function of the package that is not an op (the Python wrapper that allocates)."""
    defs = [f for f in [program.function_for(name, caller.path)] if f is not None] or program.functions_named(name)
    defs = defs or [m for m in program.methods_named(name)]
    if not defs:
        return [value_key(p, TREE_ALIASES) for p in bindings.TREE_OP_PARAMS], ""
    for d in defs:
        if _takes_tree_mask(d.node):
            params = [value_key(p, TREE_ALIASES) for p in d.params()]
            if d.cls is not None and params and params[0] == "self":
                params = params[1:]
            return params, d.where
    return None


def trace_site(tracer: Tracer, site: SinkSite) -> list[TracedBuffer]:
    """Every buffer that reaches ``site``, per class whose instances make the call."""
    selves: list[Any] = [Instance(c) for c in tracer.p.classes_running(site.func)] if site.func.cls else [None]
    expr = site.argument(site.sink.buffer)
    out: list[TracedBuffer] = []
    for self_val in selves:
        owner = self_val.cls.name if self_val is not None else site.func.qual
        if expr is None:
            out.append(TracedBuffer(site, owner, Ended(f"the call passes no `{site.sink.buffer}` argument "
                                                       f"(kernel parameters {site.params})", site.where), Path()))
            continue
        tracer.steps = 0
        frame = tracer.top_frame(site.func, self_val)
        for value, path in tracer.resolve(expr, frame, Path(trail=(f"{site.where} {site.kernel}(...{ast.unparse(expr)}...)",))):
            if isinstance(value, NoneValue):
                continue  # a None buffer never reaches the kernel (the path raises before)
            companions: list[tuple[dict, Path]] = [({}, path)]
            for name in site.sink.companions:
                cexpr = site.argument(name)
                nxt = []
                for comp, p in companions:
                    if cexpr is None:
                        nxt.append(({**comp, name: None}, p))
                        continue
                    for v, q in tracer.resolve(cexpr, frame, p):
                        nxt.append(({**comp, name: v}, q))
                companions = nxt
            # A companion that is a parameter of the calling function has a Z3 variable in the
            # path conditions (`if` tests on it); the judge ties an unresolved one to each layout.
            variables = {name: z3.Int(f"{site.argument(name).id}@{frame.key}") for name in site.sink.companions
                         if isinstance(site.argument(name), ast.Name) and site.argument(name).id in site.func.params()}
            for comp, p in companions:
                owner_here = value.owner if isinstance(value, Alloc) else owner
                out.append(TracedBuffer(site, owner_here if owner_here else owner, value, p, comp, variables))
    return out


def traced_buffers(root, kinds: tuple[str, ...] = ("draft_kv_indices", "tree_mask")) -> list[TracedBuffer]:
    """All traced buffers of the sglang package at ``root`` (a folder or a SourceIndex)
    reaching the given kernels, with their shapes as Z3 terms over
    :data:`specbound.audit.engine_bindings.QUANTITIES`."""
    index = root if isinstance(root, SourceIndex) else SourceIndex(root)
    program = Program(index, PACKAGE)
    out: list[TracedBuffer] = []
    for site in find_sites(program):
        if site.sink.kind not in kinds:
            continue
        out += trace_site(Tracer(program, bindings.BINDINGS, site.sink.role), site)
    return out


def describe(value) -> str:
    if isinstance(value, Ended):
        return f"trail ended at {value.where}: {value.reason}"
    if isinstance(value, Opaque):
        return f"trail ended at `{value.text}` (an object the tracer cannot see into)"
    return type(value).__name__
