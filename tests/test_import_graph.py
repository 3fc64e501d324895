"""The import graph the README documents, checked on the source: every ``specbound`` import
(top level or inside a function, absolute or relative) goes to the same layer or one below,
the graph of our own modules has no circle, and an import of our own modules inside a
function is one of the few listed in :data:`DEFERRED` (a heavy optional dependency kept off
the paths that do not need it), never a way around a circle.

Layers, bottom up: ``spec``; the proof core and spec theorems (``proofs/`` outside
``symexec/``: they import ``spec`` only); ``reference``; ``kernels``; ``replay``; the kernel
verifier ``proofs/symexec/``; ``fuzz``; the audit (``audit/`` but its command);
the CUDA audit ``audit/cuda/``; then the CLI (``cli``, the command modules, manifest, docs,
reports) and every test.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
# repository folder -> the package it installs as (pyproject's package-dir)
FOLDERS = {"spec": "specbound.spec", "proofs": "specbound.proofs", "reference": "specbound.reference",
           "kernels": "specbound.kernels", "replay": "specbound.replay", "specbound": "specbound"}
LAYERS = (  # (module prefix, layer), most specific first
    ("specbound.spec", 0),
    ("specbound.proofs.symexec", 5),
    ("specbound.proofs.test_", 9),
    ("specbound.proofs._checks", 9),   # the proof tests' shared assertions
    ("specbound.proofs.conftest", 9),  # the proof tests' shared fixtures
    ("specbound.proofs", 1),
    ("specbound.reference", 2),
    ("specbound.kernels", 3),
    ("specbound.replay", 4),
    ("specbound.fuzz.command", 9),     # `specbound fuzz`
    ("specbound.fuzz", 6),
    ("specbound.audit.command", 9),    # `specbound audit`
    ("specbound.audit.run", 9),        # one audit run: every check, the CUDA one included
    ("specbound.audit.cuda", 8),
    ("specbound.audit", 7),
)
TOP = 9


def layer(module: str) -> int:
    for prefix, level in LAYERS:
        if module == prefix or module.startswith(prefix + ".") or (prefix.endswith("_") and module.startswith(prefix)):
            return level
    return TOP


def modules(root: pathlib.Path):
    for folder, package in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            yield path, ".".join([package, *parts]), is_package


def _own_imports(path: pathlib.Path, module: str, is_package: bool):
    """``(imported name, line, inside a function)`` for every import of a ``specbound`` name."""
    package = module if is_package else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    deferred = {id(sub) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                for sub in ast.walk(node) if isinstance(sub, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno, id(node) in deferred) for a in node.names
                        if a.name.split(".")[0] == "specbound")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "specbound":
                continue
            # `from specbound import kernels` names a module, `from .x import f` a name in .x: the
            # name is yielded (its layer is its module's; graph() finds the module)
            yield from ((f"{target}.{a.name}", node.lineno, id(node) in deferred) for a in node.names)


def imported(path: pathlib.Path, module: str, is_package: bool):
    """``(imported module, line)`` for every import of a ``specbound`` module in the file."""
    for target, line, _deferred in _own_imports(path, module, is_package):
        yield target, line


def violations(root: pathlib.Path) -> list[str]:
    out = []
    for path, module, is_package in modules(root):
        for target, line in imported(path, module, is_package):
            if layer(target) > layer(module):
                out.append(f"{path.relative_to(root)}:{line}: {module} (layer {layer(module)}) imports "
                           f"{target} (layer {layer(target)})")
    return out


def test_every_import_goes_down_the_documented_layers():
    found = list(modules(ROOT))
    assert len(found) > 100 and {layer(m) for _, m, _ in found} == set(range(TOP + 1)), "layout not found"
    assert violations(ROOT) == []


def test_an_upward_import_is_reported(tmp_path):
    """The check is not vacuous: a copy with one upward import, at top level or inside a
    function, absolute or relative, is named."""
    for folder in FOLDERS:
        (tmp_path / folder).mkdir()
    (tmp_path / "spec" / "sizes.py").write_text("def f():\n    from specbound.kernels import plan\n")
    (tmp_path / "proofs" / "core.py").write_text("from specbound import reference\n")
    (tmp_path / "replay" / "checked.py").write_text("from ..proofs.symexec import theorems\n")
    (tmp_path / "kernels" / "plan.py").write_text("from specbound.spec import cdiv\nfrom . import source\n")
    (tmp_path / "specbound" / "cli.py").write_text("from specbound.proofs.symexec import theorems\n")
    got = violations(tmp_path)
    assert [v.split(":")[0] for v in got] == ["spec/sizes.py", "proofs/core.py", "replay/checked.py"], got


# --- circles -------------------------------------------------------------------------------------

def _module_of(name: str, known) -> str | None:
    """The module an imported name lives in (``specbound.fuzz.calls.seed_of`` -> ``...calls``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def graph(root: pathlib.Path) -> dict[str, dict[str, tuple]]:
    """module -> {imported module: (line, inside a function)} over our own modules; an import
    inside a function is an edge too (it runs, just later)."""
    found = list(modules(root))
    known = {module for _, module, _ in found}
    out: dict[str, dict[str, tuple]] = {module: {} for module in known}
    for path, module, is_package in found:
        for name, line, deferred in _own_imports(path, module, is_package):
            target = _module_of(name, known)
            if target is not None and target != module and target not in out[module]:
                out[module][target] = (line, deferred)
    return out


def circles(edges: dict) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each as
    a closed path through its modules, so the message names the circle to break."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(_path_through(sorted(component), edges))
    return found


def _path_through(component: list[str], edges: dict) -> list[str]:
    """A shortest circle from the component's first module back to itself."""
    members, first = set(component), component[0]
    came_from, todo = {first: None}, [first]
    while todo:
        node = todo.pop(0)
        for child in sorted(edges[node]):
            if child == first:
                path = [node]
                while came_from[path[-1]] is not None:
                    path.append(came_from[path[-1]])
                return [*reversed(path), first]
            if child in members and child not in came_from:
                came_from[child] = node
                todo.append(child)
    return component


def test_no_import_circle():
    edges = graph(ROOT)
    assert len(edges) > 100, "layout not found"
    found = circles(edges)
    assert not found, "import circles (break each by moving the shared part down, not by deferring an import):\n" + \
        "\n".join(" -> ".join(c) for c in found)


def test_a_circle_is_named_even_through_a_function_level_import(tmp_path):
    """Not vacuous: a two-module circle closed inside a function, and a three-module one at
    top level, are each named as a path."""
    for folder in FOLDERS:
        (tmp_path / folder).mkdir()
    fuzz = tmp_path / "specbound" / "fuzz"
    fuzz.mkdir()
    (fuzz / "__init__.py").write_text("")
    (fuzz / "calls.py").write_text("from .strategies import TreeCase\n")
    (fuzz / "strategies.py").write_text("def case_from_json(t):\n    from .calls import call_from_json\n")
    (fuzz / "a.py").write_text("from . import b\n")
    (fuzz / "b.py").write_text("from specbound.fuzz import c\n")
    (fuzz / "c.py").write_text("import specbound.fuzz.a\n")
    (fuzz / "d.py").write_text("from . import a, calls\n")  # leads into both circles, is in neither
    got = circles(graph(tmp_path))
    assert got == [["specbound.fuzz.a", "specbound.fuzz.b", "specbound.fuzz.c", "specbound.fuzz.a"],
                   ["specbound.fuzz.calls", "specbound.fuzz.strategies", "specbound.fuzz.calls"]], got
