"""Find an engine's functions by name with ``ast`` and execute only them.

Nothing here imports the engine.  A function is looked up first in the file where the
audited release keeps it, then (if it moved) in every ``.py`` file of the package;
a file is parsed only when its text contains ``def <name>``.  Line numbers are never
used to find anything: they come from the parse, for the report.

* :meth:`SourceIndex.load_helper` compiles one function's definition alone (optionally
  rewritten by :mod:`.symexec` so it can run on Z3 terms) into a fresh namespace that
  holds only the stand-ins the caller passes.
* :meth:`SourceIndex.load_kernel` compiles one ``@triton.jit`` function, and the jit
  helpers of the same file it calls, into a namespace holding only ``triton`` and
  ``tl`` (:func:`specbound.kernels.source.load_jit_functions`, so Triton can read the
  source back).
"""

from __future__ import annotations

import __future__
import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Found:
    name: str                 # "tree_mask_numel" or "VerifyMask.fits"
    path: Path                # absolute file
    rel: str                  # path inside the package, for the report
    node: ast.AST             # FunctionDef / ClassDef
    text: str                 # the file's text
    moved: bool               # not in the expected file

    @property
    def where(self) -> str:
        return f"{self.rel}:{self.node.lineno}" + (" (moved)" if self.moved else "")

    def source(self) -> str:
        return textwrap.dedent(ast.get_source_segment(self.text, self.node, padded=True) or "")

    def params(self) -> list[str]:
        a = self.node.args
        return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]

    def required_params(self) -> list[str]:
        a = self.node.args
        positional = [*a.posonlyargs, *a.args]
        n_default = len(a.defaults)
        req = [p.arg for p in positional[: len(positional) - n_default]]
        req += [p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
        return req


def _decorator_names(node) -> list[str]:
    out = []
    for d in getattr(node, "decorator_list", []):
        target = d.func if isinstance(d, ast.Call) else d
        out.append(ast.unparse(target))
    return out


def is_triton_jit(node) -> bool:
    return any(n.endswith("jit") for n in _decorator_names(node))


class SourceIndex:
    """The ``.py`` files of one engine's package folder, parsed on demand."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._text: dict[Path, str] = {}
        self._tree: dict[Path, ast.Module] = {}
        self._files: list[Path] | None = None

    # --- files -----------------------------------------------------------------------
    def text(self, path: Path) -> str:
        if path not in self._text:
            self._text[path] = path.read_text(encoding="utf-8", errors="replace")
        return self._text[path]

    def tree(self, path: Path) -> ast.Module | None:
        if path not in self._tree:
            try:
                self._tree[path] = ast.parse(self.text(path), filename=str(path))
            except (SyntaxError, ValueError):
                self._tree[path] = None
        return self._tree[path]

    def files(self) -> list[Path]:
        if self._files is None:
            self._files = sorted(p for p in self.root.rglob("*.py") if p.is_file())
        return self._files

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    # --- lookup -----------------------------------------------------------------------
    def _find_in(self, path: Path, name: str):
        """Top-level ``def name``, or ``Class.method`` for a dotted name."""
        if not path.is_file():
            return None
        head = name.split(".")[-1]
        if f"def {head}" not in self.text(path) and f"class {head}" not in self.text(path):
            return None
        tree = self.tree(path)
        if tree is None:
            return None
        parts = name.split(".")
        scope: list[ast.stmt] = tree.body
        node = None
        for i, part in enumerate(parts):
            node = next((s for s in scope if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                            ast.ClassDef)) and s.name == part), None)
            if node is None:
                return None
            scope = getattr(node, "body", [])
        return node

    def find(self, name: str, expected: tuple[str, ...] = ()) -> Found | None:
        """``name`` in one of the ``expected`` files, else anywhere in the package."""
        tried = set()
        for rel in expected:
            path = self.root / rel
            tried.add(path)
            node = self._find_in(path, name)
            if node is not None:
                return Found(name, path, self.rel(path), node, self.text(path), False)
        for path in self.files():
            if path in tried:
                continue
            node = self._find_in(path, name)
            if node is not None:
                return Found(name, path, self.rel(path), node, self.text(path), bool(expected))
        return None

    def find_all_classes(self, name: str) -> list[Found]:
        out = []
        for path in self.files():
            if f"class {name}" not in self.text(path):
                continue
            node = self._find_in(path, name)
            if isinstance(node, ast.ClassDef):
                out.append(Found(name, path, self.rel(path), node, self.text(path), False))
        return out

    # --- execution ----------------------------------------------------------------------
    def load_helper(self, found: Found, namespace: dict[str, Any],
                    transform: Callable[[ast.AST], ast.AST] | None = None) -> Callable:
        """Compile the definition of ``found`` alone into ``namespace`` and return it.

        Annotations are not evaluated (``from __future__ import annotations``), so the
        signature's types need no stand-ins."""
        src = found.source()
        tree = ast.parse(src)
        if transform is not None:
            tree = transform(tree)
            ast.fix_missing_locations(tree)
        ast.increment_lineno(tree, found.node.lineno - 1)
        code = compile(tree, str(found.path), "exec", dont_inherit=True,
                       flags=__future__.annotations.compiler_flag)
        ns = dict(namespace)
        ns.setdefault("__name__", f"specbound_audit.{found.name}")
        exec(code, ns)  # noqa: S102 - the point of the audit: run the engine's own helper
        return ns[found.node.name]

    def load_kernel(self, found: Found, triton_mod, tl_mod) -> Callable:
        """Compile a ``@triton.jit`` function and the jit helpers of its file that it calls."""
        from specbound.kernels import source  # here: the index itself needs neither torch nor triton

        ns: dict[str, Any] = {"triton": triton_mod, "tl": tl_mod,
                              "__name__": f"specbound_audit_kernels.{found.node.name}"}
        return source.load_jit_functions(found.text, str(found.path), ns, roots=[found.node.name],
                                         jit=is_triton_jit)[found.node.name]
