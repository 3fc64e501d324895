"""The symbolic launch of one vLLM kernel specialization, built from the contract table
(:mod:`.contract`): tensors sized by the launch sites' shapes, contents bound by the table's
per-cell conditions (quantified hypotheses, instantiated at each read), runtime scalars as
symbolic int32 values, constexprs as vLLM's dispatchers pick them."""

from __future__ import annotations

import pathlib

import z3

from specbound.proofs.symexec.interp import Executor
from specbound.proofs.symexec.models import Run, content_preconditions, make_oracle
from specbound.proofs.symexec.values import DTYPES, FLOATS, INT32, TensorModel, V

from . import contract


def dtype(name: str):
    return DTYPES.get(name) or FLOATS[name]


def _fmt(text: str, constexprs: dict) -> str:
    return text.format(**constexprs) if "{" in text else text


def run_kernel(root, kernel: contract.Kernel, spec: tuple, path: str | None = None, drop=()) -> Run:
    """The kernel ``kernel`` under specialization ``spec`` (a row of its ``specializations``),
    read from the vLLM tree at ``root`` (or the file ``path``: a planted copy); ``drop``
    names facts left out (to refute what they guard)."""
    label, constexprs, none_args = spec
    path = path or str(pathlib.Path(root) / kernel.file)
    q = contract.quantities(kernel.quantities)
    functions: dict = {}
    cx = {k: v for k, v in constexprs.items() if k[:1].isalpha() and isinstance(v, int)}
    # the read-only integer tensors' contents, by name: a table formula may name another tensor's
    decls = {b.arg.removesuffix("_ptr"): z3.Function(b.arg.removesuffix("_ptr"), z3.IntSort(), z3.IntSort())
             for b in kernel.buffers if b.arg not in none_args and not b.written
             and not (dt := dtype(_fmt(b.dtype, constexprs))).is_float and not dt.is_bool}
    cx.update(decls)
    hyps = {f.name: contract.term(f.formula, q, **cx) for f in kernel.facts if f.name not in drop}
    tensors = {}
    for b in kernel.buffers:
        if b.arg in none_args:
            continue
        dt = dtype(_fmt(b.dtype, constexprs))
        numel = contract.term(b.numel, q, **cx)
        content = decls.get(b.arg.removesuffix("_ptr"))
        if content is not None:
            more = {}
            if b.content and f"content:{b.content}" not in drop:
                formula = contract.CONTENTS[b.content][0]
                more[f"content:{b.content}[{content.name()}]"] = (
                    lambda i, v, f=content, n=numel, formula=formula:
                    z3.Implies(z3.And(0 <= i, i < n), contract.term(formula, q, v=v, i=i, f=f, **cx)))
            # the caller's cells are values of the tensor's dtype
            hyps.update(content_preconditions(functions, content, f"{content.name()}_in_{dt}",
                                              lambda i, v, dt=dt: z3.And(v >= dt.lo(), v < dt.hi()), **more))
        tensors[b.arg] = TensorModel(b.arg.removesuffix("_ptr"), numel, dt, content, written=b.written)
    scalars = {a: None for a in none_args}
    for arg, name in kernel.scalars:   # Triton passes a Python int that fits int32 as int32
        v = q[name] if name else z3.Int(arg)
        scalars[arg] = V(v, (), INT32)
        hyps[f"{arg}_int32"] = z3.And(-2 ** 31 <= v, v < 2 ** 31)
    grid = [contract.term(g, q) for g in kernel.grid]
    params = {a.arg for a in kernel_params(path, kernel.name)}
    ex = Executor(path, kernel.name, constexprs={k: v for k, v in constexprs.items() if k in params}, scalars=scalars, tensors=tensors, grid=grid,
                  oracle=make_oracle(hyps, functions, []), abstract_carried=kernel.abstract)
    res = ex.run()
    functions.update(res.functions)
    for b in kernel.buffers:   # a tensor the kernel reads back: the caller's contents obey the table too
        init = ex.initial_contents.get(b.arg.removesuffix("_ptr"))
        if b.written and b.content and init is not None and f"content:{b.content}" not in drop:
            dt, formula, numel = tensors[b.arg].dtype, contract.CONTENTS[b.content][0], tensors[b.arg].numel
            hyps.update(content_preconditions(
                functions, init, f"{init.name()}_in_dtype", lambda i, v, dt=dt: z3.And(v >= dt.lo(), v < dt.hi()),
                **{f"content:{b.content}[{init.name()}]": lambda i, v, f=init, n=numel, formula=formula: z3.Implies(
                    z3.And(0 <= i, i < n), contract.term(formula, q, v=v, i=i, f=f, **cx))}))
    report = {**q, **{f"pid{i}": p for i, p in enumerate(res.pid)}}
    run = Run(f"VLLM-{kernel.name}", label, res, hyps, functions, tensors, {}, None, None, report,
              list(res.side_proofs))
    run.spec, run.kernel, run.q, run.cx = spec, kernel, q, cx
    run.contract = tuple(f"{f.kind}: {f.name}: {f.cite}" for f in contract.facts(kernel))
    return run


def kernel_params(path: str, name: str) -> list:
    fn = contract.kernel_def(name, pathlib.Path(path).read_text())
    if fn is None:
        raise ValueError(f"{path}: no kernel {name}")
    return fn.args.args
