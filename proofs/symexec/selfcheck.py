"""Check the executor against the real kernels: its symbolic store addresses, evaluated at
concrete points (concrete scalars, contents, program ids, lanes and loop indices), must give
exactly the cells the checked interpreter records on a real launch."""

from __future__ import annotations

import itertools

import z3

from .values import LANES


def _content_body(values):
    x = z3.Var(0, z3.IntSort())
    body = z3.IntVal(0)
    for i in range(len(values) - 1, -1, -1):
        body = z3.If(x == i, z3.IntVal(int(values[i])), body)
    return body


def _consts(e):
    out, todo, seen = {}, [e], set()
    while todo:
        x = todo.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            out[str(x)] = x
        elif z3.is_app(x):
            todo.extend(x.children())
    return out


def symbolic_cells(run, scalars: dict, contents: dict, grid: int, loop_values) -> dict:
    """tensor name -> set of cells the symbolic stores cover at this concrete launch.
    ``loop_values(pid)`` gives the concrete indices of the symbolic loop of program pid."""
    funcs = [(run.functions[name][0], _content_body(vals)) for name, vals in contents.items()]
    out: dict = {}
    for a in run.result.accesses:
        if a.kind != "store":
            continue
        mask, off = a.mask, a.off.e
        if funcs:
            mask = z3.substitute_funs(mask, *funcs)
            off = z3.substitute_funs(off, *funcs)
        names = {**_consts(mask), **_consts(off)}
        loop_consts = [c for n, c in names.items() if "@" in n and n.split("@")[0] in ("c0",)]
        subs = [(c, z3.IntVal(scalars[n])) for n, c in names.items() if n in scalars]
        mask, off = z3.substitute(mask, *subs), z3.substitute(off, *subs)
        ranges = [range(s) if s > 1 else range(1) for s in a.shape]
        for pid in range(grid):
            m1 = z3.substitute(mask, (run.result.pid[0], z3.IntVal(pid)))
            o1 = z3.substitute(off, (run.result.pid[0], z3.IntVal(pid)))
            loops = [None] if not loop_consts else list(loop_values(pid))
            for lv in loops:
                m2, o2 = (m1, o1) if lv is None else (z3.substitute(m1, (loop_consts[0], z3.IntVal(lv))),
                                                      z3.substitute(o1, (loop_consts[0], z3.IntVal(lv))))
                for lanes in itertools.product(*ranges):
                    ls = [(LANES[i], z3.IntVal(v)) for i, v in enumerate(lanes)]
                    mv = z3.simplify(z3.substitute(m2, *ls))
                    if z3.is_false(mv):
                        continue
                    if not z3.is_true(mv):
                        raise AssertionError(f"store at line {a.line}: mask not concrete: {mv}")
                    ov = z3.simplify(z3.substitute(o2, *ls))
                    if not z3.is_int_value(ov):
                        raise AssertionError(f"store at line {a.line}: offset not concrete: {ov}")
                    out.setdefault(a.tensor.name, set()).add(ov.as_long())
    return out
