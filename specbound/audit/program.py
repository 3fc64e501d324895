"""The classes, functions, imports and call sites of an engine's package (its top-level
name given by the engine's adapter), found with ``ast``.

The buffer tracer (:mod:`.trace`) asks structural questions: which class is this name
(through the file's imports), what are its bases and subclasses, which method does a
class see under a name (the most derived definition), who calls this function.  Files
are parsed only when their text mentions the name asked about, so a question about one
class reads the package's text once and parses a handful of files.  Nothing is imported.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from .extract import Found, SourceIndex

FUNC_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
# A class header and its bases, for finding subclasses without parsing every file.
CLASS_HEADER = re.compile(r"^[ \t]*class\s+\w+\s*\(([^)]*)\)", re.M)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(eq=False)
class ClassInfo:
    name: str
    node: ast.ClassDef
    path: Path
    rel: str

    @property
    def where(self) -> str:
        return f"{self.rel}:{self.node.lineno}"

    def methods(self) -> dict[str, "FuncInfo"]:
        if "_methods" not in self.__dict__:
            self.__dict__["_methods"] = {s.name: FuncInfo(s, self.path, self.rel, self) for s in self.node.body
                                         if isinstance(s, FUNC_TYPES)}
        return self.__dict__["_methods"]

    def __repr__(self):
        return f"ClassInfo({self.name} @ {self.where})"


@dataclass(eq=False)
class FuncInfo:
    node: ast.FunctionDef
    path: Path
    rel: str
    cls: ClassInfo | None = None   # the class whose body defines it (None: module level)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def qual(self) -> str:
        return f"{self.cls.name}.{self.name}" if self.cls else self.name

    @property
    def where(self) -> str:
        return f"{self.rel}:{self.node.lineno}"

    @property
    def key(self) -> tuple:
        return (str(self.path), self.node.lineno, self.node.col_offset)

    def params(self) -> list[str]:
        a = self.node.args
        return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]

    def is_property(self) -> bool:
        return any(isinstance(d, ast.Name) and d.id in ("property", "cached_property")
                   or isinstance(d, ast.Attribute) and d.attr in ("cached_property", "getter")
                   for d in self.node.decorator_list)

    def is_static(self) -> bool:
        return any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
                   for d in self.node.decorator_list)

    def as_found(self, index: SourceIndex) -> Found:
        return Found(self.qual, self.path, self.rel, self.node, index.text(self.path), False)

    def __eq__(self, other):
        return isinstance(other, FuncInfo) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return f"FuncInfo({self.qual} @ {self.where})"


@dataclass
class CallSite:
    caller: FuncInfo
    call: ast.Call


@dataclass
class Program:
    index: SourceIndex
    package: str      # the top-level name the package's own imports use (``sglang``)
    _classes: dict[str, list[ClassInfo]] = field(default_factory=dict)
    _funcs: dict[str, list[FuncInfo]] = field(default_factory=dict)
    _imports: dict[Path, dict[str, tuple[str, str]]] = field(default_factory=dict)
    _module_assigns: dict[Path, dict[str, list[ast.expr]]] = field(default_factory=dict)
    _subclasses: dict[int, list[ClassInfo]] = field(default_factory=dict)
    _calls: dict[str, list[CallSite]] = field(default_factory=dict)
    _class_of_node: dict[int, ClassInfo] = field(default_factory=dict)
    _memo: dict = field(default_factory=dict)
    _mentions: dict = field(default_factory=dict)

    def _cached(self, key, compute):
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @property
    def root(self) -> Path:
        return self.index.root

    def files_mentioning(self, text: str, whole_words: bool = True) -> list[Path]:
        """Files whose text contains ``text``.  With ``whole_words`` (names: ``def f``,
        ``class C``) a file must also hold each identifier of ``text`` as a whole word, which
        a per-file set of identifiers answers (one pass over the package instead of one
        per question)."""
        if not whole_words:
            return [p for p in self.index.files() if text in self.index.text(p)]
        if text not in self._mentions:
            words = IDENTIFIER.findall(text)
            if "_words" not in self._memo:
                self._memo["_words"] = [(p, set(IDENTIFIER.findall(self.index.text(p)))) for p in self.index.files()]
            self._mentions[text] = [p for p, ws in self._memo["_words"] if all(w in ws for w in words)
                                    and text in self.index.text(p)]
        return self._mentions[text]

    # --- definitions ---------------------------------------------------------------------
    def _classes_in(self, path: Path) -> list[ClassInfo]:
        return self._cached(("classes_in", path), lambda: self._find_classes(path))

    def _find_classes(self, path: Path) -> list[ClassInfo]:
        """Classes at module level, nested in classes, or under module-level if/try."""
        tree = self.index.tree(path)
        out: list[ClassInfo] = []

        def visit(body):
            for node in body:
                if isinstance(node, ast.ClassDef):
                    info = self._class_of_node.get(id(node))
                    if info is None:
                        info = ClassInfo(node.name, node, path, self.index.rel(path))
                        self._class_of_node[id(node)] = info
                    out.append(info)
                    visit(node.body)
                elif isinstance(node, (ast.If, ast.Try)):
                    visit(node.body)
                    visit(node.orelse)
                    for h in getattr(node, "handlers", []):
                        visit(h.body)
        visit(tree.body if tree else [])
        return out

    def classes_named(self, name: str) -> list[ClassInfo]:
        if name not in self._classes:
            self._classes[name] = [c for p in self.files_mentioning(f"class {name}") for c in self._classes_in(p)
                                   if c.name == name]
        return self._classes[name]

    def functions_named(self, name: str) -> list[FuncInfo]:
        """Module-level ``def name`` anywhere in the package."""
        if name not in self._funcs:
            out = []
            for p in self.files_mentioning(f"def {name}"):
                tree = self.index.tree(p)
                for s in tree.body if tree else []:
                    if isinstance(s, FUNC_TYPES) and s.name == name:
                        out.append(FuncInfo(s, p, self.index.rel(p)))
            self._funcs[name] = out
        return self._funcs[name]

    def methods_named(self, name: str) -> list[FuncInfo]:
        """``def name`` in any class body of the package."""
        out = []
        for p in self.files_mentioning(f"def {name}"):
            for c in self._classes_in(p):
                m = c.methods().get(name)
                if m is not None:
                    out.append(m)
        return out

    # --- imports and module names --------------------------------------------------------
    def module_file(self, dotted: str) -> Path | None:
        parts = dotted.split(".")
        if not parts or parts[0] != self.package:
            return None
        base = self.root.joinpath(*parts[1:])
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.is_file():
                return cand
        return None

    def _module_name(self, path: Path) -> str:
        rel = path.relative_to(self.root).with_suffix("")
        parts = [self.package, *rel.parts]
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def imports(self, path: Path) -> dict[str, tuple[str, str]]:
        """Local name -> (module, attribute) for every ``from X import a as b`` in the file
        (anywhere in it: the package's imports inside functions too)."""
        if path not in self._imports:
            out: dict[str, tuple[str, str]] = {}
            tree = self.index.tree(path)
            for node in ast.walk(tree) if tree else []:
                if isinstance(node, ast.ImportFrom):
                    mod = node.module or ""
                    if node.level:
                        base = self._module_name(path).split(".")
                        if path.name != "__init__.py":
                            base = base[:-1]
                        base = base[: len(base) - (node.level - 1)]
                        mod = ".".join([*base, *([mod] if mod else [])])
                    for alias in node.names:
                        out[alias.asname or alias.name] = (mod, alias.name)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname:
                            out[alias.asname] = (alias.name, "")
            self._imports[path] = out
        return self._imports[path]

    def module_assignments(self, path: Path) -> dict[str, list[ast.expr]]:
        """Module-level ``name = value`` of a file (aliases such as ``f = g if c else h``)."""
        if path not in self._module_assigns:
            out: dict[str, list[ast.expr]] = {}
            tree = self.index.tree(path)

            def visit(body):
                for s in body:
                    if isinstance(s, ast.Assign):
                        for t in s.targets:
                            if isinstance(t, ast.Name):
                                out.setdefault(t.id, []).append(s.value)
                    elif isinstance(s, (ast.If, ast.Try)):
                        visit(s.body)
                        visit(s.orelse)
                        for h in getattr(s, "handlers", []):
                            visit(h.body)
            visit(tree.body if tree else [])
            self._module_assigns[path] = out
        return self._module_assigns[path]

    def module_named(self, name: str, from_path: Path) -> Path | None:
        """The file of the module a local name refers to (``from x import mod``, ``import a.b as mod``)."""
        imp = self.imports(from_path).get(name)
        if imp is None:
            return None
        return self.module_file(f"{imp[0]}.{imp[1]}" if imp[1] else imp[0])

    def _resolve_import(self, name: str, path: Path, kind: str):
        seen = set()
        while (path, name) not in seen:
            seen.add((path, name))
            imp = self.imports(path).get(name)
            if imp is None:
                return None
            target = self.module_file(imp[0]) if imp[1] else None
            if target is None:
                return None
            found = self._defined_in(imp[1], target, kind)
            if found is not None:
                return found
            path, name = target, imp[1]   # re-exported: follow the next import
        return None

    def _defined_in(self, name: str, path: Path, kind: str):
        tree = self.index.tree(path)
        for s in tree.body if tree else []:
            if kind == "class" and isinstance(s, ast.ClassDef) and s.name == name:
                return next(c for c in self._classes_in(path) if c.node is s)
            if kind == "func" and isinstance(s, FUNC_TYPES) and s.name == name:
                return FuncInfo(s, path, self.index.rel(path))
        return None

    def class_for(self, name: str, from_path: Path) -> ClassInfo | None:
        """The class ``name`` means in ``from_path``: defined there, imported, or else the only
        class of that name in the package."""
        return self._cached(("class_for", name, from_path), lambda: self._class_for(name, from_path))

    def _class_for(self, name: str, from_path: Path) -> ClassInfo | None:
        local = self._defined_in(name, from_path, "class")
        if local is not None:
            return local
        imported = self._resolve_import(name, from_path, "class")
        if imported is not None:
            return imported
        named = self.classes_named(name)
        return named[0] if len(named) == 1 else None

    def function_for(self, name: str, from_path: Path) -> FuncInfo | None:
        return self._cached(("function_for", name, from_path), lambda: self._function_for(name, from_path))

    def _function_for(self, name: str, from_path: Path) -> FuncInfo | None:
        local = self._defined_in(name, from_path, "func")
        if local is not None:
            return local
        imported = self._resolve_import(name, from_path, "func")
        if imported is not None:
            return imported
        named = self.functions_named(name)
        return named[0] if len(named) == 1 else None

    # --- inheritance -----------------------------------------------------------------------
    def bases(self, cls: ClassInfo) -> list[ClassInfo]:
        return self._cached(("bases", id(cls.node)), lambda: self._bases(cls))

    def _bases(self, cls: ClassInfo) -> list[ClassInfo]:
        out = []
        for b in cls.node.bases:
            name = b.attr if isinstance(b, ast.Attribute) else b.id if isinstance(b, ast.Name) else None
            if name is None:
                continue
            base = self.class_for(name, cls.path)
            if base is not None and base is not cls:
                out.append(base)
        return out

    def mro(self, cls: ClassInfo) -> list[ClassInfo]:
        """Depth-first, left to right, each class once (sglang's backends use single
        inheritance plus mixins, where this equals Python's C3 order)."""
        return self._cached(("mro", id(cls.node)), lambda: self._mro(cls))

    def _mro(self, cls: ClassInfo) -> list[ClassInfo]:
        out: list[ClassInfo] = []

        def visit(c):
            if c in out:
                return
            out.append(c)
            for b in self.bases(c):
                visit(b)
        visit(cls)
        return out

    def subclasses(self, cls: ClassInfo) -> list[ClassInfo]:
        """Every class of the package that has ``cls`` among its bases, transitively."""
        key = id(cls.node)
        if key not in self._subclasses:
            direct = []
            word = re.compile(rf"\b{re.escape(cls.name)}\b")
            for p in self.files_mentioning(cls.name):
                if not any(word.search(m.group(1)) for m in CLASS_HEADER.finditer(self.index.text(p))):
                    continue
                for c in self._classes_in(p):
                    if c is not cls and cls in self.bases(c):
                        direct.append(c)
            self._subclasses[key] = direct
        out: list[ClassInfo] = []
        todo = list(self._subclasses[key])
        while todo:
            c = todo.pop(0)
            if c in out:
                continue
            out.append(c)
            todo.extend(self.subclasses(c))
        return out

    def visible_methods(self, cls: ClassInfo) -> dict[str, FuncInfo]:
        """Method name -> the definition an instance of ``cls`` runs."""
        return self._cached(("visible", id(cls.node)), lambda: self._visible(cls))

    def _visible(self, cls: ClassInfo) -> dict[str, FuncInfo]:
        out: dict[str, FuncInfo] = {}
        for c in self.mro(cls):
            for name, m in c.methods().items():
                out.setdefault(name, m)
        return out

    def running_methods(self, cls: ClassInfo) -> list[FuncInfo]:
        """Every method body an instance of ``cls`` may run: the visible definition of each
        name and, while a definition calls ``super().name(...)``, the next one up."""
        return self._cached(("running_methods", id(cls.node)), lambda: self._running_methods(cls))

    def _running_methods(self, cls: ClassInfo) -> list[FuncInfo]:
        out: list[FuncInfo] = []
        mro = self.mro(cls)
        for name in self.visible_methods(cls):
            for c in mro:
                m = c.methods().get(name)
                if m is None:
                    continue
                out.append(m)
                if not _calls_super(self.walk(m.node), name):
                    break
        return out

    def lookup(self, cls: ClassInfo, name: str) -> FuncInfo | None:
        return self.visible_methods(cls).get(name)

    def classes_running(self, method: FuncInfo) -> list[ClassInfo]:
        """The classes whose instances run ``method``: its class and every subclass that does
        not override it (or whose override reaches it through ``super()``)."""
        if method.cls is None:
            return []
        return self._cached(("running", method.key), lambda: [
            c for c in [method.cls, *self.subclasses(method.cls)] if method in self.running_methods(c)])

    def blocks(self, func_node: ast.AST) -> "FunctionBlocks":
        """:func:`function_blocks` of a function, once."""
        return self._cached(("blocks", id(func_node)), lambda: function_blocks(func_node))

    def walk(self, node: ast.AST) -> list[ast.AST]:
        """``ast.walk(node)``, in its order, listed once per node: the tracers ask the same
        functions about their calls, assignments and ``super()`` calls many times over."""
        return self._cached(("walk", id(node)), lambda: list(ast.walk(node)))

    # --- call sites --------------------------------------------------------------------------
    def calls_to(self, name: str) -> list[CallSite]:
        """Every call whose callee is spelled ``name`` or ``<anything>.name``, with the
        top-level function or method it sits in (a call in a nested ``def`` counts for the
        enclosing one)."""
        if name not in self._calls:
            out = []
            for p in self.files_mentioning(name):
                tree = self.index.tree(p)
                if tree is None:
                    continue
                for fn in self._functions_in(p, tree):
                    for node in self.walk(fn.node):
                        if isinstance(node, ast.Call) and callee_name(node.func) == name:
                            out.append(CallSite(fn, node))
            self._calls[name] = out
        return self._calls[name]

    def _functions_in(self, path: Path, tree: ast.Module) -> list[FuncInfo]:
        out = []
        for s in tree.body:
            if isinstance(s, FUNC_TYPES):
                out.append(FuncInfo(s, path, self.index.rel(path)))
        for c in self._classes_in(path):
            out.extend(c.methods().values())
        return out


def _calls_super(nodes: list[ast.AST], name: str) -> bool:
    """Whether a function (``nodes``: its walk) calls ``super().name(...)``."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name
               and isinstance(n.func.value, ast.Call) and callee_name(n.func.value.func) == "super"
               for n in nodes)


def callee_name(func: ast.expr) -> str | None:
    """``f`` for ``f(...)``, ``m`` for ``x.y.m(...)``, the kernel for ``k[grid](...)``."""
    if isinstance(func, ast.Subscript):
        func = func.value
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def guards(fn: ast.AST) -> dict[int, tuple[tuple[ast.expr, bool], ...]]:
    """For every statement of a function: the ``if`` tests that enclose it, each with the
    branch taken (True: the body, False: the ``else``)."""
    out: dict[int, tuple] = {}

    def visit(body, conds):
        for s in body:
            out[id(s)] = conds
            if isinstance(s, ast.If):
                visit(s.body, conds + ((s.test, True),))
                visit(s.orelse, conds + ((s.test, False),))
            elif isinstance(s, (ast.For, ast.AsyncFor, ast.While)):
                visit(s.body, conds)
                visit(s.orelse, conds)
            elif isinstance(s, (ast.With, ast.AsyncWith)):
                visit(s.body, conds)
            elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
                visit(s.body, conds)
                for h in s.handlers:
                    visit(h.body, conds)
                visit(s.orelse, conds)
                visit(s.finalbody, conds)
            elif isinstance(s, ast.Match if hasattr(ast, "Match") else ()):
                for case in s.cases:
                    visit(case.body, conds)
            elif isinstance(s, FUNC_TYPES):
                visit(s.body, conds)
    visit(getattr(fn, "body", []), ())
    return out


LOOPS = (ast.For, ast.AsyncFor, ast.While)


@dataclass(frozen=True)
class FunctionBlocks:
    """Where each node of one function runs: ``stmt_of`` maps a node's id to its innermost
    statement, ``chains`` a statement's id to the blocks around it, outermost first (``(id(compound
    statement), field)``: ``body``, ``orelse``, ``finalbody``, ``handler``); ``ifs`` the ``if``
    statements by id, ``loops`` the loops' ids."""
    stmt_of: dict
    chains: dict
    ifs: dict
    loops: frozenset

    def chain(self, node) -> tuple | None:
        """The blocks around ``node`` (any node of the function), None for a node not in it."""
        stmt = self.stmt_of.get(id(node))
        return None if stmt is None else self.chains.get(id(stmt))

    def in_other_branches(self, chain_a, chain_b) -> bool:
        """Whether two places, given by their chains, sit in different branches of one ``if``
        that no loop encloses: one pass through the function never runs both (a loop could run
        one branch, then the other)."""
        for (na, fa), (nb, fb) in zip(chain_a, chain_b):
            if na != nb:
                return False
            if fa != fb:
                return na in self.ifs
            if na in self.loops:
                return False
        return False

    def apart(self, a, b) -> bool:
        """:meth:`in_other_branches` for two nodes of the function."""
        ca, cb = self.chain(a), self.chain(b)
        return ca is not None and cb is not None and self.in_other_branches(ca, cb)


def function_blocks(func_node) -> FunctionBlocks:
    """The :class:`FunctionBlocks` of ``func_node`` (:meth:`Program.blocks` keeps one per function)."""
    stmt_of: dict[int, ast.stmt] = {}
    chains: dict[int, tuple] = {}

    def visit(body, chain):
        for s in body:
            chains[id(s)] = chain
            for node in ast.walk(s):
                stmt_of[id(node)] = s      # inner statements overwrite below
            for part in ("body", "orelse", "finalbody"):
                inner = getattr(s, part, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    visit(inner, chain + ((id(s), part),))
            for h in getattr(s, "handlers", []):
                visit(h.body, chain + ((id(h), "handler"),))
    visit(func_node.body, ())
    nodes = list(ast.walk(func_node))
    return FunctionBlocks(stmt_of, chains, {id(n): n for n in nodes if isinstance(n, ast.If)},
                          frozenset(id(n) for n in nodes if isinstance(n, LOOPS)))
