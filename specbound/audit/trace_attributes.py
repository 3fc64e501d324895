"""Attributes of the buffer tracer (a mixin of :class:`.trace.Tracer`): ``self.attr`` read
from every assignment in the methods the instance runs (and class-level defaults),
properties, record fields, ``tensor.shape``, and a member read on an object the tracer
cannot see, found by name in every class that defines it.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from .program import FuncInfo
from .trace_values import (
    Alloc, ClassRef, Ended, EnumMember, Frame, FuncRef, Instance, NoneValue, Num, Opaque, Path, Record, ShapeOf,
    is_enum, self_targets, source_text,
)


class AttributesMixin:
    # --- attributes ---------------------------------------------------------------------------
    def _attribute(self, e: ast.Attribute, frame: Frame, path: Path, receiver: bool = False):
        attr = e.attr
        base_is_local = isinstance(e.value, ast.Name) and e.value.id != "self" and \
            e.value.id in self._function_locals(frame.func)
        if attr in self.bindings.attributes and not base_is_local:
            return [(Num(self.bindings.quantity(self.bindings.attributes[attr], self.role)), path)]
        out = []
        for recv, p in self.resolve(e.value, frame, path, receiver=True):
            out += self._member(recv, attr, frame, p, e, receiver)
        return out

    def _member(self, recv, attr, frame, path, node, receiver=False):
        if isinstance(recv, Instance):
            return self._instance_attr(recv, attr, path, node, frame, receiver=receiver)
        if isinstance(recv, Record):
            got = recv.field_of(attr)
            if got is not None:
                return self.resolve(got[0], got[1], path.step(f"{recv.site} field `{attr}` of {recv.cls.name}"))
            return self._instance_attr(Instance(recv.cls), attr, path, node, frame, self_val=recv, receiver=receiver)
        if isinstance(recv, ClassRef):
            if is_enum(self.p, recv.cls):
                return [(EnumMember(recv.cls.name, attr), path)]
            return [(Opaque(f"{recv.cls.name}.{attr}"), path)]
        if isinstance(recv, Alloc):
            if attr == "shape":
                return [(ShapeOf(recv), path)]
            return [(Opaque(f"tensor.{attr}"), path)]
        if isinstance(recv, NoneValue):
            return []  # attribute of None: not a live path
        if isinstance(recv, Ended):
            return [(recv, path)]
        found = self._duck_property(attr, path, node, frame)
        if receiver:
            # An object reached by duck typing is only a receiver here: what matters is a
            # record or buffer; further members of an object are looked up by name anyway.
            found = [(Opaque(f"<object>.{attr}"), p) if isinstance(v, (Instance, ClassRef, FuncRef)) else (v, p)
                     for v, p in found]
        return found

    def _instance_attr(self, inst: Instance, attr, path, node, frame, self_val=None, receiver=False):
        cls = inst.cls
        self_val = self_val or inst
        method = self.p.lookup(cls, attr)
        if method is not None and method.is_property():
            return self._returns(method, self_val, {}, frame, path, node)
        if method is not None:
            return [(FuncRef(method), path)]
        out = []
        for m in self.p.running_methods(cls):
            for stmt, idx, value in self._assignments_to_self(m).get(attr, []):
                mframe = self.top_frame(m, self_val)
                where = f"{m.rel}:{stmt.lineno}"
                for p in self._guarded(mframe, stmt, path):
                    p = replace(p.step(f"{where} {source_text(stmt)[:90]}"), holder=f"self.{attr}")
                    for v, q in self.resolve(value, mframe, p, receiver):
                        out += self._unpack(v, idx, mframe, q, value)
        for c in self.p.mro(cls):  # class-level defaults
            for s in c.node.body:
                if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in s.targets):
                    out += self.resolve(s.value, self._file_frame(c.path, c.rel, frame.depth), path)
        if not out:
            return [(Ended(f"`self.{attr}`: no assignment in {cls.name} or its bases (and no binding)", cls.where,
                           absent=True), path)]
        return out

    def _assignments_to_self(self, m: FuncInfo):
        if m.key not in self._self_assigns:
            out: dict[str, list] = {}
            for node in ast.walk(m.node):
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if node.value is None:
                        continue
                    for t in targets:
                        for target, idx in self_targets(t):
                            out.setdefault(target, []).append((node, idx, node.value))
            self._self_assigns[m.key] = out
        return self._self_assigns[m.key]

    def _duck_property(self, attr, path, node, frame):
        props = [m for m in self.p.methods_named(attr) if m.is_property()]
        return self._duck(attr, props, node, frame, path, f"<object>.{attr}", lambda m, cls, p: self._returns(
            m, Instance(cls), {}, frame, p.step(f"{m.where} {cls.name}.{attr} (property)"), node))

    def _duck(self, name, members, node, frame, path, opaque, run):
        """A member read on an object the tracer cannot see: every class that runs a definition
        of that name (its own or inherited), each a choice pinned on the path; ``run(m, cls,
        path)`` reads one.  Inside the enumeration of the same name (a delegating
        ``self.inner.verify_mask``) nothing new is found: its values are among the outer ones."""
        if not members or self._in_guard:
            return [(Opaque(opaque), path)]
        tag = ("duck", name, members[0].is_property())
        if tag in self._active:
            self._cycles += 1
            return []
        self._active.add(tag)
        try:
            key = ("duck", frame.key, id(node))
            pinned = self._pinned(path, key)
            out = []
            for m in members:
                for cls in self._instance_classes(m):
                    ident = (m.key, cls.name)
                    if pinned is not None and pinned != ident:
                        continue
                    out += run(m, cls, path if pinned is not None else path.with_pin(key, ident))
            return out
        finally:
            self._active.discard(tag)
