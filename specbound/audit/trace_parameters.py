"""Parameters of the buffer tracer (a mixin of :class:`.trace.Tracer`): a parameter with no
binding is traced to the argument of every call site that may run its function (a method's
through the receiver's class, ``__init__``'s through the constructor calls and the
``super().__init__`` chain), each call site a choice pinned on the path.
"""

from __future__ import annotations

import ast

import z3

from .program import callee_name
from .trace_values import (
    MISSING, STARRED, Ended, EnumMember, Frame, Instance, Num, Opaque, Path, Truth, Unevaluated, argument_for,
    default_for, source_text,
)


class ParametersMixin:
    # --- parameters ---------------------------------------------------------------------------
    def _param(self, name, frame: Frame, path: Path, receiver: bool):
        if frame.args is not None:
            bound = frame.args.get(name)
            if bound is None:
                return [(Ended(f"parameter `{name}` of {frame.func.qual} not passed", frame.func.where), path)]
            expr, caller = bound
            return self.resolve(expr, caller, path, receiver)
        if name in self.bindings.parameters:
            term = self.bindings.quantity(self.bindings.parameters[name], self.role)
            if term is None:
                return [(Ended(f"`{name}` needs the calling graph runner", frame.func.where), path)]
            return [(Num(term), path)]
        if receiver:
            return [(Opaque(f"{name} (parameter of {frame.func.qual})"), path)]
        var = z3.Int(f"{name}@{frame.key}")
        if self._in_guard:
            return [(Unevaluated(var, f"{name} (parameter of {frame.func.qual})"), path)]
        out = []
        for v, p in self._from_callers(name, frame, path):
            as_int = self._as_int(v)
            out.append((v, p.cond(var == as_int) if as_int is not None else p))
        return out

    def _as_int(self, v):
        if isinstance(v, Num):
            return v.term
        if isinstance(v, Truth):
            return z3.If(v.term, 1, 0) if isinstance(v.term, z3.ExprRef) else int(v.term)
        if isinstance(v, EnumMember):
            modes = self._helper_enum()
            if modes is not None and v.enum == modes.__name__ and v.member in modes.__members__:
                return int(modes[v.member])
        return None

    def _callers(self, frame: Frame):
        """(call node, caller frame) for every call site that may run ``frame.func``."""
        key = ("callers", frame.key)
        if key not in self._locals:
            self._locals[key] = self._find_callers(frame)
        return self._locals[key]

    def _find_callers(self, frame: Frame):
        func = frame.func
        if func.name == "__init__" and func.cls is not None:
            return self._constructor_calls(frame)
        out = []
        for site in self.p.calls_to(func.name):
            call, caller = site.call, site.caller
            f = call.func
            if func.cls is not None:
                if not isinstance(f, ast.Attribute):
                    continue
                on_self = isinstance(f.value, ast.Name) and f.value.id == "self"
                on_super = isinstance(f.value, ast.Call) and callee_name(f.value.func) == "super"
                if on_self or on_super:
                    if not isinstance(frame.self_val, Instance) or caller.cls is None:
                        continue
                    if caller not in self.p.running_methods(frame.self_val.cls):
                        continue  # the instance never runs this definition of the caller
                    if on_self and self.p.lookup(frame.self_val.cls, func.name) != func:
                        continue
                    out.append((call, self.top_frame(caller, frame.self_val)))
                else:
                    for cls in (self.p.classes_running(caller) if caller.cls else [None]):
                        out.append((call, self.top_frame(caller, Instance(cls) if cls else None)))
            else:
                if isinstance(f, ast.Name) and self.p.function_for(f.id, caller.path) != func:
                    continue
                if isinstance(f, ast.Attribute) and not (isinstance(f.value, ast.Name) and
                                                         self.p.module_named(f.value.id, caller.path) == func.path):
                    continue  # `x.f(...)` calls our function only through its module
                if isinstance(f, ast.Subscript):
                    continue
                for cls in (self.p.classes_running(caller) if caller.cls else [None]):
                    out.append((call, self.top_frame(caller, Instance(cls) if cls else None)))
        return out

    def _constructor_calls(self, frame: Frame):
        """Callers of ``__init__``: ``Cls(...)`` for the instance's class, and the
        ``super().__init__(...)`` of the subclasses between it and the definition."""
        inst = frame.self_val.cls if isinstance(frame.self_val, Instance) else frame.func.cls
        out = []
        if inst is frame.func.cls or self.p.lookup(inst, "__init__") == frame.func:
            for site in self.p.calls_to(inst.name):
                if isinstance(site.call.func, ast.Name) and self.p.class_for(site.call.func.id, site.caller.path) is inst:
                    for cls in (self.p.classes_running(site.caller) if site.caller.cls else [None]):
                        out.append((site.call, self.top_frame(site.caller, Instance(cls) if cls else None)))
        for c in self.p.mro(inst):
            if c is frame.func.cls:
                break
            init = c.methods().get("__init__")
            if init is None:
                continue
            for node in ast.walk(init.node):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr == "__init__" and isinstance(node.func.value, ast.Call) and \
                        callee_name(node.func.value.func) == "super":
                    out.append((node, self.top_frame(init, frame.self_val)))
        return out

    def _from_callers(self, name, frame: Frame, path: Path):
        key = ("site", frame.key)
        callers = self._callers(frame)
        if not callers:
            return [(Ended(f"parameter `{name}` of {frame.func.qual}: no call site in the package "
                           "reaches it", frame.func.where, absent=True), path)]
        pinned = self._pinned(path, key)
        return self._each_caller(name, frame, path, callers, key, pinned)

    def _each_caller(self, name, frame, path, callers, key, pinned):
        out = []
        for i, (call, caller) in enumerate(callers):
            if pinned is not None and pinned != i:
                continue
            p = path if pinned is not None else path.with_pin(key, i)
            expr = argument_for(call, frame.func, name, method=frame.func.cls is not None)
            where = f"{caller.func.rel}:{call.lineno}"
            if expr is MISSING:
                out.append((Ended(f"the call at {where} passes no `{name}`", where), p))
                continue
            if expr is STARRED:
                out.append((Ended(f"the call at {where} passes *args/**kwargs", where, machinery=True), p))
                continue
            if expr is None:  # the default
                default = default_for(frame.func, name)
                vals = self.resolve(default, frame, p) if default is not None else \
                    [(Ended(f"`{name}` has no default", frame.func.where), p)]
                out += [(v, q.step(f"{where} (default of `{name}`)")) for v, q in vals]
                continue
            out += self.resolve(expr, caller, p.step(f"{where} {source_text(call)[:90]}"))
        return out
