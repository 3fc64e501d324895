"""Compile Triton source text held in memory (a mutant of our kernel, sglang's kernels read
by path) so that Triton can read it back.

``triton.jit`` reads a function's source with :mod:`inspect`, which goes through
:mod:`linecache`; code compiled from a string has no file to read, so the text is entered
in ``linecache`` under the file name it is compiled with.  Entries carry no mtime, so
``linecache.checkcache`` keeps them.  A syntax error names that file name.

This module imports neither torch nor triton: the caller passes the namespace
(``triton``, ``tl``, or a copy of a kernel module's globals).
"""

from __future__ import annotations

import __future__
import ast
import linecache
from typing import Callable


def register(filename: str, text: str) -> None:
    """Make ``text`` the lines of ``filename`` for :mod:`linecache` (and so :mod:`inspect`)."""
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)


def load(text: str, filename: str, namespace: dict, *, code: ast.Module | None = None, flags: int = 0) -> dict:
    """Register ``text`` under ``filename`` and exec ``code`` (default: all of ``text``) into
    ``namespace``, compiled under ``filename`` with ``flags`` only (not this module's
    ``__future__`` imports).  Returns ``namespace``."""
    register(filename, text)
    compiled = compile(text if code is None else code, filename, "exec", dont_inherit=True, flags=flags)
    exec(compiled, namespace)  # noqa: S102 - the point: run kernel source text we were given
    return namespace


def future_flags(tree: ast.Module) -> int:
    """The compiler flags of the ``from __future__ import ...`` lines of ``tree`` (Triton reads
    constexpr annotations, so a file's ``annotations`` flag must carry over)."""
    flags = 0
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            for alias in stmt.names:
                feature = getattr(__future__, alias.name, None)
                if feature is not None:
                    flags |= feature.compiler_flag
    return flags


def is_jit(node: ast.AST) -> bool:
    """A function decorated ``@triton.jit`` / ``@jit`` (with or without arguments)."""
    for d in getattr(node, "decorator_list", []):
        target = d.func if isinstance(d, ast.Call) else d
        if (isinstance(target, ast.Attribute) and target.attr == "jit") or (
                isinstance(target, ast.Name) and target.id == "jit"):
            return True
    return False


def load_jit_functions(text: str, filename: str, namespace: dict, roots: list[str] | None = None,
                       jit: Callable[[ast.AST], bool] = is_jit) -> dict:
    """Exec the ``@triton.jit`` functions of a file's ``text`` into ``namespace``: those named
    in ``roots`` and the jit helpers of the same file they call (all of them when ``roots`` is
    None), in file order, at their own line numbers.  Nothing else of the file runs."""
    tree = ast.parse(text, filename=filename)
    jit_defs = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef) and jit(s)}
    if roots is None:
        wanted = list(jit_defs.values())
    else:
        missing = [r for r in roots if r not in jit_defs]
        if missing:
            raise LookupError(f"no @triton.jit function {', '.join(map(repr, missing))} in {filename}")
        wanted, todo = [], [jit_defs[r] for r in roots]
        while todo:
            node = todo.pop()
            if node in wanted:
                continue
            wanted.append(node)
            todo += [jit_defs[n.id] for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in jit_defs]
        wanted.sort(key=lambda n: n.lineno)  # callees before callers, as in the file
    module = ast.Module(body=wanted, type_ignores=[])
    return load(text, filename, namespace, code=module, flags=future_flags(tree))
