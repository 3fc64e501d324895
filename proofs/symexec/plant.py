"""The planted change of a kernel mutant (an AST rewrite of one function of a kernel's
source, line numbers kept) and the mutant record itself; the mutants are declared in the
kernel modules (:mod:`.verifiers`) and collected in :mod:`.mutants`."""

from __future__ import annotations

import __future__
import ast
import hashlib
from dataclasses import dataclass, field
from typing import Callable

from . import kernel_files


class PlantFailed(RuntimeError):
    """A planted change matched nothing in the kernel's source (the kernel changed): the
    mutant checks nothing, which must never read as a pass."""


# --- the planted change ------------------------------------------------------------------------------

def _src(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:
        return ""


class _Rewrite(ast.NodeTransformer):
    """Apply ``fn`` to every node of function ``func`` (children first); ``fn`` returns a
    replacement or None."""

    def __init__(self, func, fn):
        self.func, self.fn, self.hits, self.inside = func, fn, 0, False

    def visit_FunctionDef(self, node):
        if node.name != self.func:
            return node
        self.inside = True
        self.generic_visit(node)
        self.inside = False
        return node

    def generic_visit(self, node):
        node = super().generic_visit(node)
        if self.inside:
            rep = self.fn(node)
            if rep is not None:
                self.hits += 1
                return rep
        return node


def _replace_expr(old: str, new: str):
    def fn(node):
        if isinstance(node, ast.expr) and _src(node) == old:
            new_node = ast.parse(new, mode="eval").body
            for part in ast.walk(new_node):  # obligations name the mutated line, not line 1
                ast.copy_location(part, node)
            return new_node
        return None
    return fn


def _drop_stmt(needle: str):
    def fn(node):
        if isinstance(node, ast.FunctionDef):
            body = [s for s in node.body if needle not in _src(s)]
            if len(body) != len(node.body):
                node.body = body
                return node
        return None
    return fn


_KERNELS: dict = {}  # Plant -> the compiled kernel (a planted kernel is built once per process)


@dataclass(frozen=True)
class Plant:
    """One change to the source of ``func`` in ``specbound.kernels.<module>``: every
    expression whose text is ``old`` becomes ``new`` (each pair must match), and every
    top-level statement containing ``drop`` goes.  Line numbers are kept, so obligations and
    replays name the kernel's own lines."""
    module: str
    func: str
    replace: tuple = ()             # ((old expression text, new expression text), ...)
    drop: str = ""

    def transform(self, tree: ast.Module) -> ast.Module:
        edits = [(f"{old!r} -> {new!r}", _replace_expr(old, new)) for old, new in self.replace]
        if self.drop:
            edits.append((f"drop {self.drop!r}", _drop_stmt(self.drop)))
        for what, fn in edits:
            r = _Rewrite(self.func, fn)
            tree = r.visit(tree)
            if r.hits == 0:
                raise PlantFailed(f"{self.module}.{self.func}: {what} matched nothing: the kernel changed")
        ast.fix_missing_locations(tree)
        return tree

    def describe(self) -> str:
        parts = [f"{old} -> {new}" for old, new in self.replace] + ([f"drop `{self.drop}`"] if self.drop else [])
        return f"{self.func}: " + "; ".join(parts)

    def function_source(self, planted: bool = True) -> str:
        """The text of ``func`` (undecorated), with the change planted or as shipped."""
        return function_source(self.module, self.func, self.transform if planted else None)

    def kernel(self):
        """The planted kernel (built once per process)."""
        if self not in _KERNELS:
            _KERNELS[self] = build_kernel(self.module, self.func, self.transform)
        return _KERNELS[self]


def function_source(module: str, func: str, transform: Callable | None = None) -> str:
    """The text of ``func`` of ``specbound.kernels.<module>`` (undecorated), rewritten by ``transform``."""
    tree = ast.parse(open(kernel_files.kernel_path(module), encoding="utf-8").read())
    if transform is not None:
        tree = transform(tree)
        ast.fix_missing_locations(tree)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func)
    fn.decorator_list = []
    return ast.unparse(fn) + "\n"


def build_kernel(module: str, func: str, transform: Callable | None = None):
    """``func`` of ``specbound.kernels.<module>``, the shipped kernel when ``transform`` is None,
    else its source rewritten by ``transform`` as a ``triton.jit`` function over a copy of the
    module's globals (the shipped kernel is untouched; the name is kept, since the checked
    interpreter records writes by kernel name)."""
    import importlib

    from specbound.kernels import source  # first: sets TRITON_INTERPRET before any @triton.jit

    mod = importlib.import_module(f"specbound.kernels.{module}")
    if transform is None:
        return getattr(mod, func)
    import triton

    text = function_source(module, func, transform)
    # a digest of the text, not hash(): str hashes are salted per process, and the name shows
    # in replay reports that two runs with the same --seed must print alike
    filename = f"<specbound planted {func}: {hashlib.sha256(text.encode()).hexdigest()[:16]}>"
    ns = source.load(text, filename, dict(vars(mod)), flags=__future__.annotations.compiler_flag)
    return triton.jit(ns[func])


def kernel_of(module: str, func: str, plant: Plant | None = None):
    """The shipped kernel ``func`` of ``specbound.kernels.<module>``, or ``plant``'s version of it."""
    if plant is None:
        return build_kernel(module, func)
    if (plant.module, plant.func) != (module, func):
        raise ValueError(f"a plant in {plant.module}.{plant.func} cannot stand for {module}.{func}")
    return plant.kernel()


NO_SPEC_MODEL = ("no spec theorem has a mutant of this id (the fault lives in the kernel's code, not in a "
                 "size formula), so the fuzz has no counterexample to launch it on; its concrete replay is "
                 "the refutation's own")


@dataclass(frozen=True)
class KernelMutant:
    id: str
    description: str
    kind: str                       # the kernel module's ``VERIFIER.kind`` ("kv", "tree", "fill")
    prop: str                       # the property whose obligations refute it
    plant: Plant | None = None      # None: the kernel is untouched and ``host`` carries the bug
    host: dict = field(default_factory=dict, hash=False)
    expect: tuple = ("oob",)        # replay verdicts that reproduce the fault
    spec_override: Callable | None = None  # sp -> sp (e.g. a smaller lane bound)
    limits: dict = field(default_factory=dict, hash=False)
    content_box: dict = field(default_factory=dict, hash=False)  # tensor-content function -> (lo, hi)
    fuzz_theorem: str = ""          # the spec theorem whose counterexample the fuzz replays on the plant
    fuzz_skip: str = NO_SPEC_MODEL  # why the fuzz does not replay it (when fuzz_theorem is empty)
    # the kernel names (``sp.name``: a layout of the tree build) whose first specialization
    # carries it; empty: the kernel's first specialization's
    layouts: tuple = ()

    @property
    def transform(self):
        return self.plant.transform if self.plant else None


def swap(kernel: tuple, mid: str, description: str, kind: str, prop: str, old: str, new: str,
         expect=("output",), **kw) -> KernelMutant:
    """A mutant that replaces one expression (``old`` -> ``new``) of ``kernel`` = (module, function)."""
    return KernelMutant(mid, description, kind, prop, Plant(*kernel, ((old, new),)), expect=expect, **kw)
