"""Calls, allocations, subscripts and arithmetic of the buffer tracer (a mixin of
:class:`.trace.Tracer`): methods and functions are read through their returns (or, for a
pure sglang helper, executed symbolically with :mod:`.helper_paths`); ``torch.zeros/empty/full``
are allocations whose shape is evaluated to Z3 terms.
"""

from __future__ import annotations

import ast
import enum
import math
from dataclasses import replace

import z3

from . import bindings
from . import helper_paths
from .program import FUNC_TYPES, ClassInfo, FuncInfo, callee_name
from .trace_values import (
    MAX_ALTERNATIVES, MAX_DEPTH, Alloc, ClassRef, Ended, EnumMember, Frame, FuncRef, Instance, Items, NoneValue,
    Num, Opaque, Path, Record, ShapeOf, Truth, bind_call, const_index, describe, flattened, floordiv, is_flatten,
    is_pure, power, record_fields, row_of, shape_call, source_text, symbolic,
)


class CallsMixin:
    # --- calls --------------------------------------------------------------------------------
    def _call(self, e: ast.Call, frame: Frame, path: Path):
        f = e.func
        name = callee_name(f)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch":
            if name in bindings.ALLOCATORS:
                return self._alloc(e, frame, path, shape_args=True)
            if name in bindings.LIKE_ALLOCATORS:
                return [(replace(v, site=f"{frame.func.rel}:{e.lineno}", text=source_text(e)[:160],
                                 owner=frame.owner, func=frame.func.qual), p) if isinstance(v, Alloc) else (v, p)
                        for v, p in self.resolve(e.args[0], frame, path)] if e.args else []
        if isinstance(f, ast.Attribute):
            if name in bindings.SAME_BUFFER:
                return self.resolve(f.value, frame, path)
            if name in ("view", "reshape", "flatten") and is_flatten(e):
                return [(flattened(v), p) if isinstance(v, Alloc) else (v, p) for v, p in self.resolve(f.value, frame, path)]
            if name == "size" or name == "numel":
                return [(shape_call(v, name, e), p) if isinstance(v, Alloc) else (Opaque(source_text(e)), p)
                        for v, p in self.resolve(f.value, frame, path)]
            if isinstance(f.value, ast.Call) and callee_name(f.value.func) == "super":
                return self._super_call(e, frame, path)
            out = []
            for recv, p in self.resolve(f.value, frame, path, receiver=True):
                out += self._method_call(recv, name, e, frame, p)
            return out
        if isinstance(f, ast.Name):
            if name in ("int", "abs") and e.args:
                return self.resolve(e.args[0], frame, path)
            if name in ("max", "min") and len(e.args) == 2:
                return self._minmax(name, e, frame, path)
            if name == "len" and e.args:
                return [(Num(v.dims[0]), p) if isinstance(v, Alloc) and v.dims else
                        (Num(len(v.items)), p) if isinstance(v, Items) else (Opaque(source_text(e)), p)
                        for v, p in self.resolve(e.args[0], frame, path)]
            out = []
            for target, p in self.resolve(f, frame, path, receiver=True):
                out += self._call_value(target, e, frame, p)
            return out
        return [(Opaque(source_text(e)[:80]), path)]

    def _call_value(self, target, e, frame, path):
        if isinstance(target, FuncRef):
            return self._invoke(target.func, None, e, frame, path)
        if isinstance(target, ClassRef):
            return self._construct(target.cls, e, frame, path)
        if isinstance(target, Ended):
            return [(target, path)]
        return [(Opaque(f"{source_text(e.func)}(...)"), path)]

    def _method_call(self, recv, name, e, frame, path):
        if isinstance(recv, Instance):
            m = self.p.lookup(recv.cls, name)
            if m is not None:
                return self._invoke(m, recv, e, frame, path)
            return self._duck_call(name, e, frame, path)
        if isinstance(recv, Record):
            m = self.p.lookup(recv.cls, name)
            if m is not None:
                return self._invoke(m, recv, e, frame, path)
            got = recv.field_of(name)
            return [(Opaque(f"{recv.cls.name}.{name}(...)"), path)] if got is None else []
        if isinstance(recv, ClassRef):
            m = self.p.lookup(recv.cls, name)
            return self._invoke(m, None, e, frame, path) if m is not None else [(Opaque(source_text(e)[:80]), path)]
        if isinstance(recv, Alloc):
            return [(Opaque(f"tensor.{name}(...)"), path)]
        if isinstance(recv, NoneValue):
            return []
        if isinstance(recv, Ended):
            return [(recv, path)]
        return self._duck_call(name, e, frame, path)

    def _duck_call(self, name, e, frame, path):
        """A method called on an object the tracer cannot see (see ``Tracer._duck``)."""
        return self._duck(name, self.p.methods_named(name), e, frame, path, f"<object>.{name}(...)",
                          lambda m, cls, p: self._invoke(m, Instance(cls), e, frame,
                                                         p.step(f"{frame.func.rel}:{e.lineno} {cls.name}.{name}()")))

    def _instance_classes(self, m: FuncInfo) -> list:
        """The classes to trace a method in: every class that runs it, or only its own class
        when its body never reads ``self`` (then every instance gives the same values)."""
        if not any(isinstance(n, ast.Name) and n.id == "self" for n in ast.walk(m.node)):
            return [m.cls]
        return self.p.classes_running(m)

    def _super_call(self, e, frame, path):
        cls = frame.func.cls
        if cls is None or not isinstance(frame.self_val, (Instance, Record)):
            return [(Opaque(source_text(e)[:80]), path)]
        mro = self.p.mro(frame.self_val.cls)
        name = e.func.attr
        after = mro[mro.index(cls) + 1:] if cls in mro else []
        for c in after:
            m = c.methods().get(name)
            if m is not None:
                return self._invoke(m, frame.self_val, e, frame, path)
        return [(Opaque(source_text(e)[:80]), path)]

    def _invoke(self, func: FuncInfo, self_val, call: ast.Call, frame: Frame, path: Path):
        """The values ``func`` returns when called at ``call`` (in ``frame``)."""
        if frame.depth >= MAX_DEPTH:
            return [(Ended("trail too deep (call nesting)", self._at(frame, call), machinery=True), path)]
        if func.cls is not None and self_val is None and not func.is_static():
            return [(Opaque(f"unbound method {func.qual}"), path)]
        args = bind_call(func, call, frame, method=func.cls is not None and not func.is_static())
        if isinstance(args, str):
            return [(Ended(args, self._at(frame, call), machinery="*args" in args), path)]
        if self_val is None and is_pure(func):
            executed = self._execute(func, args, frame, path, call)
            if executed is not None:
                return executed
        return self._returns(func, self_val, args, frame, path.step(f"{frame.func.rel}:{call.lineno} "
                                                                     f"{source_text(call)[:90]}"), call)

    def _returns(self, func: FuncInfo, self_val, args, frame, path, node):
        if args:
            key = f"{frame.key}>{func.rel}:{func.node.lineno}@{getattr(node, 'lineno', 0)}"
        else:  # no arguments: the frame is the same wherever it is called from
            owner = self_val.cls.name if isinstance(self_val, Instance) else id(self_val)
            key = f"{func.rel}:{func.node.lineno}:{func.qual}|{owner}"
        callee = Frame(func, self_val, args, key, frame.depth + 1)
        if self_val is None and frame.func.name != "<module>":
            callee.inherited_owner = frame.owner
            callee.via = frame.via or f"{frame.func.rel}:{getattr(node, 'lineno', 0)}"

        returns = self._returns_of(func)
        if not returns:
            return [(NoneValue(), path)]
        out = []
        for r in returns:
            for p in self._guarded(callee, r, path):
                p = p.step(f"{func.rel}:{r.lineno} {source_text(r)[:90]}")
                out += self.resolve(r.value, callee, p) if r.value is not None else [(NoneValue(), p)]
        return out

    def _returns_of(self, func: FuncInfo) -> list:
        key = ("returns", func.key)
        if key not in self._locals:
            nested = [d for d in ast.walk(func.node) if isinstance(d, FUNC_TYPES + (ast.Lambda,))
                      and d is not func.node]
            inner = {id(n) for d in nested for n in ast.walk(d)}
            self._locals[key] = [s for s in ast.walk(func.node) if isinstance(s, ast.Return) and id(s) not in inner]
        return self._locals[key]

    def _construct(self, cls: ClassInfo, e: ast.Call, frame: Frame, path: Path):
        init = self.p.lookup(cls, "__init__")
        fields = []
        names = record_fields(self.p, cls)
        for i, a in enumerate(e.args):
            if isinstance(a, ast.Starred) or i >= len(names):
                break
            fields.append((names[i], a, frame))
        for kw in e.keywords:
            if kw.arg is not None:
                fields.append((kw.arg, kw.value, frame))
        if init is not None and not record_fields(self.p, cls):
            # A class with its own __init__: trace it as an instance of the class.
            return [(Instance(cls), path)]
        return [(Record(cls, tuple(fields), f"{frame.func.rel}:{e.lineno}"), path)]

    # --- helpers executed symbolically ---------------------------------------------------------
    def _execute(self, func: FuncInfo, args, frame, path, call):
        """Run a pure sglang helper (arithmetic, if/assert, no tensors) on the arguments'
        Z3 terms, path by path (``helper_paths.explore``).  None when an argument is not a
        number or the helper cannot run symbolically (the caller then reads its returns)."""
        combos = [([], path)]
        for name in func.params():
            expr, f = args.get(name, (None, None))
            if expr is None:
                return None
            nxt = []
            for values, p in combos:
                for v, q in self.resolve(expr, f, p):
                    if not isinstance(v, (Num, Truth, EnumMember, NoneValue)):
                        return None
                    nxt.append((values + [self._concrete(v)], q))
            combos = nxt[:MAX_ALTERNATIVES]
        hook = helper_paths.make_bool_hook()
        ns = {"__sb_bool__": hook, "math": math}
        modes = self._sglang_modes()
        if modes is not None:
            ns[modes.__name__] = modes
        try:
            fn = self.p.index.load_helper(func.as_found(self.p.index), ns, transform=helper_paths.instrument)
        except Exception:  # noqa: BLE001 - not executable alone: read its returns instead
            return None
        out = []
        where = f"{frame.func.rel}:{call.lineno}"
        for values, path in combos:
            conds = [c for c in path.conds if isinstance(c, z3.BoolRef)]
            expl = helper_paths.explore(hook, lambda: fn(*values), conds)
            if expl.unsupported or expl.truncated:
                return None
            for run in expl.paths:
                if not run.returned and isinstance(run.error, (NameError, AttributeError, ImportError)):
                    return None  # a global this stand-in namespace lacks: read the returns instead
                if not run.returned:
                    continue  # the helper raises there: no buffer on that path
                p = path.step(f"{where} {source_text(call)[:80]} (executed symbolically: {func.where})")
                for c in run.condition:
                    p = p.cond(c)
                out.append((self._from_python(run.value), p))
        return out

    def _sglang_modes(self):
        if self._modes is None:
            self._modes = False
            for cls in self.p.classes_named("TreeMaskMode"):
                try:
                    self._modes = self.p.index.load_helper(
                        FuncInfo(cls.node, cls.path, cls.rel).as_found(self.p.index),
                        {"IntEnum": enum.IntEnum, "Enum": enum.Enum, "enum": enum})
                    break
                except Exception:  # noqa: BLE001
                    continue
        return self._modes or None

    def _concrete(self, v):
        if isinstance(v, NoneValue):
            return None
        if isinstance(v, EnumMember):
            modes = self._sglang_modes()
            if modes is not None and v.enum == modes.__name__ and v.member in modes.__members__:
                return modes[v.member]
            return v
        return v.term

    def _from_python(self, x):
        if isinstance(x, enum.Enum):
            return EnumMember(type(x).__name__, x.name)
        if isinstance(x, bool) or isinstance(x, z3.BoolRef):
            return Truth(x)
        if isinstance(x, int) or isinstance(x, z3.ArithRef):
            return Num(x)
        if x is None:
            return NoneValue()
        return Opaque(repr(x)[:60])

    # --- allocations, subscripts, arithmetic -------------------------------------------------
    def _alloc(self, e: ast.Call, frame: Frame, path: Path, shape_args: bool):
        op = source_text(e.func)
        positional = [a for a in e.args]
        kw = {k.arg: k.value for k in e.keywords if k.arg}
        if op.endswith(".full") or op.endswith(".empty_strided"):
            shape_exprs = positional[:1] or [kw.get("size")]
        elif len(positional) == 1:
            shape_exprs = positional
        elif positional:
            shape_exprs = [ast.Tuple(elts=positional, ctx=ast.Load())]
        else:
            shape_exprs = [kw.get("size")]
        if shape_exprs[0] is None:
            return [(Ended(f"`{source_text(e)[:60]}`: no shape argument", self._at(frame, e)), path)]
        out = []
        site = f"{frame.func.rel}:{e.lineno}"
        holder = path.holder   # before the shape's own names are traced
        for shape, p in self.resolve(shape_exprs[0], frame, path):
            if isinstance(shape, Num):
                dim_lists = [([shape.term], p)]
            elif isinstance(shape, Items):
                dim_lists = self._dims(list(shape.items), p)
            elif isinstance(shape, ShapeOf):
                dim_lists = [(list(shape.alloc.dims), p)]
            elif isinstance(shape, Ended):
                out.append((shape, p))
                continue
            else:
                out.append((Ended(f"shape `{source_text(shape_exprs[0])[:60]}` is not a number "
                                  f"({describe(shape)})", site), p))
                continue
            for dims, q in dim_lists:
                bad = next((d for d in dims if isinstance(d, (Ended, Opaque))), None)
                if bad is not None:
                    # The buffer exists, its size is what is unknown (never "absent").
                    why = bad.reason if isinstance(bad, Ended) else f"`{bad.text}` is neither traced nor bound"
                    out.append((Ended(f"size of `{source_text(e)[:80]}` unknown: {why}", site,
                                      machinery=isinstance(bad, Ended) and bad.machinery), q))
                    continue
                out.append((Alloc(op, tuple(dims), site, source_text(e)[:160], frame.owner, frame.func.qual, via=frame.via,
                                  holder=holder),
                            q.step(f"{site} {source_text(e)[:90]}")))
        return out

    def _dims(self, items, path):
        """Every combination of the dimensions' values: [(terms, path)]."""
        combos = [([], path)]
        for expr, f in items:
            nxt = []
            for dims, p in combos:
                vals = self.resolve(expr, f, p)
                for v, q in vals:
                    if isinstance(v, Num):
                        nxt.append((dims + [v.term], q))
                    elif isinstance(v, (Ended, Opaque)):
                        nxt.append((dims + [v], q))
                    else:
                        nxt.append((dims + [Ended(f"dimension `{source_text(expr)[:60]}` is {describe(v)}",
                                                  f"{f.func.rel}:{getattr(expr, 'lineno', 0)}")], q))
            combos = nxt[:MAX_ALTERNATIVES]
        return combos

    def _subscript(self, e: ast.Subscript, frame: Frame, path: Path):
        out = []
        for v, p in self.resolve(e.value, frame, path):
            if isinstance(v, Items):
                idx = const_index(e.slice)
                chosen = [v.items[idx]] if idx is not None and -len(v.items) <= idx < len(v.items) else list(v.items)
                for expr, f in chosen:
                    out += self.resolve(expr, f, p)
            elif isinstance(v, ShapeOf):
                idx = const_index(e.slice)
                if idx is None or not -len(v.alloc.dims) <= idx < len(v.alloc.dims):
                    out.append((Ended(f"`{source_text(e)}`: dimension index not a constant in range", self._at(frame, e)), p))
                else:
                    out.append((Num(v.alloc.dims[idx]), p))
            elif isinstance(v, Alloc):
                out += self._view(v, e.slice, frame, p)
            elif isinstance(v, (Ended, Opaque)):
                out.append((v, p))
            elif isinstance(v, NoneValue):
                continue
            else:
                out.append((Opaque(source_text(e)[:60]), p))
        return out

    def _view(self, alloc: Alloc, sl, frame, path):
        if isinstance(sl, ast.Tuple):
            return [(Ended(f"multi-dimensional index `{source_text(sl)}` of a buffer", self._at(frame, sl), machinery=True), path)]
        if not isinstance(sl, ast.Slice):
            return [(row_of(alloc, f"[{source_text(sl)}]"), path)]
        if sl.step is not None or not alloc.dims:
            return [(Ended(f"strided slice `{source_text(sl)}`", self._at(frame, sl), machinery=True), path)]
        out = []
        lows = self.resolve(sl.lower, frame, path) if sl.lower is not None else [(Num(0), path)]
        for lo, p in lows:
            highs = self.resolve(sl.upper, frame, p) if sl.upper is not None else [(Num(alloc.dims[0]), p)]
            for hi, q in highs:
                if not (isinstance(lo, Num) and isinstance(hi, Num)):
                    out.append((Ended(f"slice bound of `[{source_text(sl)}]` is not a number", self._at(frame, sl)), q))
                    continue
                d0 = alloc.dims[0]
                top = z3.If(hi.term < d0, hi.term, d0) if symbolic(hi.term, d0) else min(hi.term, d0)
                out.append((replace(alloc, dims=(top - lo.term, *alloc.dims[1:]),
                                    view=alloc.view + f"[{source_text(sl)}]"), q))
        return out

    def _binop(self, e: ast.BinOp, frame, path):
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: floordiv, ast.Mod: lambda a, b: a % b, ast.Pow: power}
        fn = ops.get(type(e.op))
        if fn is None:
            return [(Ended(f"unsupported operator in `{source_text(e)[:60]}`", self._at(frame, e), machinery=True), path)]
        out = []
        for a, p in self.resolve(e.left, frame, path):
            for b, q in self.resolve(e.right, frame, p):
                if isinstance(a, Num) and isinstance(b, Num):
                    try:
                        out.append((Num(fn(a.term, b.term)), q))
                    except (TypeError, ZeroDivisionError, z3.Z3Exception) as err:
                        out.append((Ended(f"`{source_text(e)[:60]}`: {err}", self._at(frame, e)), q))
                elif isinstance(a, Items) and isinstance(b, Items) and isinstance(e.op, ast.Add):
                    out.append((Items(a.items + b.items), q))
                else:
                    bad = a if not isinstance(a, Num) else b
                    out.append((bad if isinstance(bad, Ended) else
                                Ended(f"`{source_text(e)[:60]}`: operand is {describe(bad)}", self._at(frame, e)), q))
        return out

    def _minmax(self, name, e, frame, path):
        out = []
        for a, p in self.resolve(e.args[0], frame, path):
            for b, q in self.resolve(e.args[1], frame, p):
                if isinstance(a, Num) and isinstance(b, Num):
                    x, y = a.term, b.term
                    if symbolic(x, y):
                        out.append((Num(z3.If(x >= y, x, y) if name == "max" else z3.If(x <= y, x, y)), q))
                    else:
                        out.append((Num(max(x, y) if name == "max" else min(x, y)), q))
                else:
                    out.append((Opaque(source_text(e)[:60]), q))
        return out

