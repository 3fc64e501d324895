"""Names of the buffer tracer (a mixin of :class:`.trace.Tracer`): a local is traced to the
assignments that reach its use (under the ``if`` tests that guard them; tuple unpacking), a
module-level name to its assignment or import in the module (or the file it is imported from).
"""

from __future__ import annotations

import ast
from dataclasses import replace

from .program import FUNC_TYPES, FuncInfo, guards
from .trace_values import (
    MAX_ALTERNATIVES, Alloc, ClassRef, Ended, Frame, FuncRef, Items, Opaque, Path, assume, combine, name_targets, negate,
    no_args, row_of, source_text,
)


class NamesMixin:
    def _function_locals(self, func: FuncInfo):
        """name -> [(statement, target index path, value expr)] for every assignment in ``func``."""
        if func.key not in self._locals:
            out: dict[str, list] = {}
            for node in ast.walk(func.node):
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        for name, idx in name_targets(t):
                            out.setdefault(name, []).append((node, idx, node.value))
                elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
                    out.setdefault(node.target.id, []).append((node, (), node.value))
                elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                    out.setdefault(node.target.id, []).append((node, (), node))
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    for name, _ in name_targets(node.target):
                        out.setdefault(name, []).append((node, None, None))
                elif isinstance(node, (ast.With, ast.AsyncWith)):
                    for item in node.items:
                        if item.optional_vars is not None:
                            for name, _ in name_targets(item.optional_vars):
                                out.setdefault(name, []).append((node, None, None))
                elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
                    out.setdefault(node.target.id, []).append((node, (), node.value))
                elif isinstance(node, FUNC_TYPES) and node is not func.node:
                    out.setdefault(node.name, []).append((node, None, None))
                elif isinstance(node, ast.ExceptHandler) and node.name:
                    out.setdefault(node.name, []).append((node, None, None))
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    for alias in node.names:
                        out.setdefault((alias.asname or alias.name).split(".")[0], []).append((node, None, None))
            self._locals[func.key] = out
            self._guards[func.key] = guards(func.node)
        return self._locals[func.key]

    def _guarded(self, frame: Frame, stmt, path: Path) -> list:
        """``path`` extended by the ``if`` tests around ``stmt`` (paths where a test is
        known false are dropped)."""
        self._function_locals(frame.func)
        return self._assuming(frame, self._guards[frame.func.key].get(id(stmt), ()), [path], note=True)

    def reaching(self, frame: Frame, node, path: Path) -> list:
        """``path`` extended by the ``if`` tests around the statement holding ``node`` (a
        consumer's own guards, whose pins the values it reads must then agree with)."""
        stmt = self.p.blocks(frame.func.node).stmt_of.get(id(node))
        return [path] if stmt is None else self._guarded(frame, stmt, path)

    def _assuming(self, frame: Frame, tests, paths: list, note: bool = False) -> list:
        """``paths`` extended by each ``(test, polarity)`` of ``tests``, paths where a test is
        known to have the other value dropped (``note``: say where one was not evaluated)."""
        for test, polarity in tests:
            nxt = []
            for p in paths:
                for t, q in self.test(test, frame, p):
                    r = assume(q, t, polarity)
                    if r is not None:
                        if t is None and note:
                            r = r.note(f"{frame.func.rel}:{test.lineno} `if {source_text(test)[:50]}` not evaluated")
                        nxt.append(r)
            paths = nxt
        return paths

    def _name(self, e: ast.Name, frame: Frame, path: Path, receiver: bool):
        name = e.id
        if name == "self" and frame.self_val is not None:
            return [(frame.self_val, path)]
        assigned = self._function_locals(frame.func).get(name, [])
        params = frame.func.params()
        if not assigned and name not in params:
            return self._global(name, frame, path, e)
        assigned, param_reaches = self._reaching(frame.func, e, assigned)
        # One value per (name, the definitions that reach this use) on a path.
        key = ("local", frame.key, name, tuple(id(a[0]) for a in assigned), param_reaches)
        pinned = self._pinned(path, key)
        if pinned is not None:
            return [(pinned, path)]
        out = []
        if name in params and param_reaches:
            for v, p in self._param(name, frame, path, receiver):
                out.append((v, self._pin(p, key, v)))
        for stmt, idx, value in assigned:
            where = f"{frame.func.rel}:{_line(stmt)}"
            if value is None:
                out.append((Opaque(f"{name} ({type(stmt).__name__.lower()} target at {where})"), path))
                continue
            for p in self._not_overwritten(frame, (stmt, idx, value), assigned, e, self._guarded(frame, stmt, path)):
                p = replace(p.step(f"{where} {source_text(stmt)[:90]}"), holder=name)
                if isinstance(value, ast.AugAssign):
                    vals = self._binop(ast.BinOp(value.target, value.op, value.value), frame, p)
                else:
                    vals = self.resolve(value, frame, p)
                for v, q in vals:
                    for w, r in self._unpack(v, idx, frame, q, value):
                        out.append((w, self._pin(r, key, w)))
        return out

    def _not_overwritten(self, frame: Frame, a, assigned: list, use: ast.Name, paths: list) -> list:
        """``paths`` extended by what must hold for assignment ``a`` to be the value ``use``
        reads: a later reaching assignment inside ``if`` branches nested below ``a``'s block,
        outside any loop and not around ``use`` (``x = ...; if t: x += ...``, or ``if t1: if t2:
        x = ...``), was skipped, so its branch's test was false, or one of the nested tests was
        (paths where they are known to hold are dropped)."""
        stmt_of, blocks = self._statements(frame.func)
        ba = blocks.get(id(a[0]))
        bu = blocks.get(id(stmt_of.get(id(use))), ())
        if ba is None:
            return paths
        ifs, loops = self._branch_nodes(frame.func)
        tests, nested = [], []
        for c in assigned:
            bc = blocks.get(id(c[0]))
            if c[0] is a[0] or bc is None or (c[0].lineno, c[0].col_offset) <= (a[0].lineno, a[0].col_offset):
                continue
            deeper = bc[len(ba):]
            if len(bc) <= len(ba) or bc[:len(ba)] != ba or bu[:len(ba) + 1] == bc[:len(ba) + 1] \
                    or any(i in loops for i, _ in bc):
                continue
            if not all(node_id in ifs and field in ("body", "orelse") for node_id, field in deeper):
                continue
            branch = [(ifs[node_id].test, field == "body") for node_id, field in deeper]
            if len(branch) == 1:
                tests.append((branch[0][0], not branch[0][1]))
            else:
                nested.append(branch)
        paths = self._assuming(frame, tests, paths)
        for branch in nested:   # x = ...; if t1: if t2: x = ...: skipped means not (t1 and t2)
            paths = self._not_all(frame, branch, paths)
        return paths

    def _not_all(self, frame: Frame, branch: list, paths: list) -> list:
        """``paths`` under "not every ``(test, taken)`` of ``branch`` holds" (the branch chain to a
        skipped assignment); where a test is not evaluated and none is known false, unchanged."""
        out = []
        for p in paths:
            combos = [([], p)]
            for test, taken in branch:
                combos = [(acc + [t if t is None or taken else negate(t)], q)
                          for acc, r in combos for t, q in self.test(test, frame, r)][:MAX_ALTERNATIVES]
            for terms, q in combos:
                if any(t is False or t is None for t in terms):   # not all hold, or not known: nothing to add
                    out.append(q)
                else:
                    r = assume(q, negate(combine(terms, True)), True)
                    if r is not None:
                        out.append(r)
        return out

    def _branch_nodes(self, func: FuncInfo):
        """id -> ``if`` statement, and the ids of the loops, of ``func``."""
        blocks = self.p.blocks(func.node)
        return blocks.ifs, blocks.loops

    def _reaching(self, func: FuncInfo, use: ast.Name, assigned: list):
        """The assignments of a local that may reach ``use``, and whether the parameter's own
        value may: those before it (by line) and not in another branch of an ``if`` around it,
        minus any an assignment in a block that encloses the use overwrites on the way.  A use
        before every assignment (a loop carrying a value around) keeps them all."""
        stmt_of, blocks = self._statements(func)
        at = stmt_of.get(id(use))
        if at is None:
            return assigned, True
        # A comprehension has no line of its own: its target's stands for it.
        before = [a for a in assigned if a[0] is not at and _line(a[0]) <= use.lineno
                  and not any(n is use for n in ast.walk(a[0]))]
        if not before:
            return assigned, True
        use_blocks = blocks.get(id(at), ())
        structure = self.p.blocks(func.node)   # an assignment in another branch of an if never reaches the use
        before = [a for a in before if id(a[0]) not in blocks
                  or not structure.in_other_branches(blocks[id(a[0])], use_blocks)]
        killers = [a for a in before if blocks.get(id(a[0]), ()) == use_blocks[:len(blocks.get(id(a[0]), ()))]
                   and not isinstance(a[0], (ast.For, ast.AsyncFor, ast.comprehension))]
        if not killers:
            return before, True
        last = max(killers, key=lambda a: (a[0].lineno, a[0].col_offset))  # comprehensions never kill
        return [a for a in before if (a[0].lineno, a[0].col_offset) >= (last[0].lineno, last[0].col_offset)], False

    def _statements(self, func: FuncInfo):
        """node id -> its innermost statement, and statement id -> its enclosing blocks."""
        blocks = self.p.blocks(func.node)
        return blocks.stmt_of, blocks.chains

    def _unpack(self, v, idx, frame, path, node):
        if not idx:
            return [(v, path)]
        i, rest = idx[0], idx[1:]
        if isinstance(v, Items):
            if i >= len(v.items):
                return [(Ended(f"unpacking element {i} of {len(v.items)}", self._at(frame, node)), path)]
            expr, f = v.items[i]
            return [w for x, p in self.resolve(expr, f, path) for w in self._unpack(x, rest, f, p, node)]
        if isinstance(v, Alloc):
            return self._unpack(row_of(v, f"[{i}]"), rest, frame, path, node)
        if isinstance(v, (Ended, Opaque)):
            return [(v, path)]
        return [(Ended(f"unpacking a {type(v).__name__}", self._at(frame, node)), path)]

    def _global(self, name, frame, path, node):
        cls = self.p.class_for(name, frame.func.path)
        if cls is not None:
            return [(ClassRef(cls), path)]
        fn = self.p.function_for(name, frame.func.path)
        if fn is not None:
            return [(FuncRef(fn), path)]
        assigns = self.p.module_assignments(frame.func.path).get(name)
        if assigns:
            return [x for value in assigns for x in self.resolve(value, self._module_frame(frame), path)]
        return [(Opaque(name), path)]

    def _module_frame(self, frame: Frame) -> Frame:
        return self._file_frame(frame.func.path, frame.func.rel, frame.depth)

    def _file_frame(self, path, rel, depth=0) -> Frame:
        """A frame for module-level (or class-body) code of a file: no parameters, no self."""
        node = ast.FunctionDef(name="<module>", args=no_args(), body=[], decorator_list=[], lineno=1,
                               col_offset=0)
        return Frame(FuncInfo(node, path, rel), None, {}, f"{rel}:<module>", depth)


def _line(node) -> int:
    return node.target.lineno if isinstance(node, ast.comprehension) else node.lineno
