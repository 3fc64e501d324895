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


# --- any grid, symbolic loops, program-written memory ---------------------------------

def _table_body(values, default=0):
    x = z3.Var(0, z3.IntSort())
    body = z3.IntVal(default)
    for i in range(len(values) - 1, -1, -1):
        body = z3.If(x == i, z3.IntVal(int(values[i])), body)
    return body


def _concrete(e):
    v = z3.simplify(e)
    if z3.is_true(v) or z3.is_false(v):
        return z3.is_true(v)
    if z3.is_int_value(v):
        return v.as_long()
    raise AssertionError(f"not concrete after substitution: {v}")


def _iterations(run, a):
    """The symbolic-loop iteration constants an access runs under, with their loop conditions."""
    out = []
    for label, cond in a.path:
        if label.startswith("loop_iter@"):
            ks = [c for c in run.result.local_consts if str(c).startswith("iter@") and _consts(cond).get(str(c)) is not None]
            out += [(k, cond) for k in ks]
    return out


def concrete_writes(run, scalars: dict, tables: dict, grid: tuple, max_trips: int = 10_000) -> list:
    """Every store the symbolic run makes on one concrete launch, in the interpreter's program
    order (axis 0 outermost): ``[(tensor name, cell, value)]``.  ``scalars``: model constant
    name -> int; ``tables``: function name -> list of values (tensor contents, prefix sums, a
    written tensor's initial contents ``<name>_initial``)."""
    funcs = [(run.functions[name][0], _table_body(vals)) for name, vals in tables.items() if name in run.functions]
    funcs += [(f, _table_body(tables[f.name()])) for f in _initial_functions(run) if f.name() in tables]
    prepared = []
    for a in run.result.accesses:
        if a.kind != "store":
            continue
        parts = [z3.And(*[c for _l, c in a.path]) if a.path else z3.BoolVal(True), a.mask, a.off.e, a.value.e]
        if funcs:
            parts = [z3.substitute_funs(p, *funcs) for p in parts]
        loops = _iterations(run, a)
        conds = [z3.substitute_funs(c, *funcs) if funcs else c for _k, c in loops]
        names = {}
        for p in parts + conds:
            names.update(_consts(p))
        subs = [(c, z3.IntVal(scalars[n])) for n, c in names.items() if n in scalars]
        parts = [z3.substitute(p, *subs) if subs else p for p in parts]
        conds = [z3.substitute(c, *subs) if subs else c for c in conds]
        prepared.append((a, parts, [(k, c) for (k, _c), c in zip(loops, conds)]))
    pids = run.result.pid
    out = []
    for x in range(grid[0]):
        for y in range(grid[1] if len(grid) > 1 else 1):
            for z in range(grid[2] if len(grid) > 2 else 1):
                at = [(p, z3.IntVal(v)) for p, v in zip(pids, (x, y, z))]
                for a, parts, loops in prepared:
                    ps = [z3.substitute(p, *at) for p in parts]
                    for ks in _loop_values(loops, at, max_trips):
                        qs = [z3.simplify(z3.substitute(p, *ks)) for p in ps] if ks else [z3.simplify(p) for p in ps]
                        if not _lanes_in(qs[0]) and not _concrete(qs[0]):
                            continue   # the store's path is not taken by this program
                        for lanes in itertools.product(*[range(s) for s in a.shape]):
                            ls = [(LANES[i], z3.IntVal(v)) for i, v in enumerate(lanes)]
                            if not _concrete(z3.substitute(z3.And(qs[0], qs[1]), *ls)):
                                continue
                            cell = _concrete(z3.substitute(qs[2], *ls))
                            value = _concrete(z3.substitute(qs[3], *ls))
                            out.append((a.tensor.name, cell, int(value)))
    return out


def _lanes_in(e):
    return any(str(c) in {str(lane) for lane in LANES} for c in _consts(e).values())


def _initial_functions(run):
    return [decl for name, (decl, _s) in run.functions.items() if name.endswith("_initial")]


def _loop_values(loops, at, max_trips):
    """Every assignment of the loop iteration constants for which the loop conditions hold."""
    if not loops:
        yield []
        return
    (k, cond), rest = loops[0], loops[1:]
    cond = z3.substitute(cond, *at)
    for v in range(max_trips):
        c = _concrete(z3.substitute(cond, (k, z3.IntVal(v))))
        if not c:
            break
        for more in _loop_values(rest, at, max_trips):
            yield [(k, z3.IntVal(v))] + more
    else:
        raise AssertionError(f"loop at {k} runs more than {max_trips} trips")


def final_memory(writes, initial: dict) -> dict:
    """Tensor name -> list of values after applying ``writes`` in order to ``initial``."""
    mem = {name: list(vals) for name, vals in initial.items()}
    for name, cell, value in writes:
        mem[name][cell] = value
    return mem
