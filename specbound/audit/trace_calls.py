"""Calls of the buffer tracer (a mixin of :class:`.trace.Tracer`): functions and methods are
read through their returns (a method called on an object the tracer cannot see through every
class that defines it; ``super()`` calls through the next class), an engine's pure helper is
executed instead (:mod:`.trace_helpers`), ``torch`` allocations go to :mod:`.trace_buffers`,
a record constructor's call keeps its fields; which calls allocate is the engine's
bindings' (``allocators``, ``like_allocators``, ``same_buffer``)."""

from __future__ import annotations

import ast
from dataclasses import replace

from .program import FUNC_TYPES, ClassInfo, FuncInfo, callee_name
from .trace_values import (
    MAX_DEPTH, Alloc, ClassRef, Ended, Frame, FuncRef, Instance, Items, NoneValue, Num, Opaque, Path, Record,
    bind_call, flattened, is_flatten, is_pure, record_fields, shape_call, source_text,
)


class CallsMixin:
    # --- calls --------------------------------------------------------------------------------
    def _call(self, e: ast.Call, frame: Frame, path: Path):
        f = e.func
        name = callee_name(f)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch":
            if name in self.bindings.allocators:
                return self._alloc(e, frame, path, shape_args=True)
            if name in self.bindings.like_allocators:
                return [(replace(v, site=f"{frame.func.rel}:{e.lineno}", text=source_text(e)[:160],
                                 owner=frame.owner, func=frame.func.qual), p) if isinstance(v, Alloc) else (v, p)
                        for v, p in self.resolve(e.args[0], frame, path)] if e.args else []
        if isinstance(f, ast.Attribute):
            if name in self.bindings.same_buffer:
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
