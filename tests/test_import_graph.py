"""The import graph the README documents, checked on the source: every ``specbound`` import
(top level or inside a function, absolute or relative) goes to the same layer or one below,
the graph of our own modules has no circle, and an import of our own modules inside a
function is one of the few listed in :data:`DEFERRED` (a heavy optional dependency kept off
the paths that do not need it), never a way around a circle.

The layers, bottom up, and what each owns: :mod:`specbound.layers` (``spec`` < proof core <
``reference`` < ``kernels`` < ``replay`` < kernel verifier < ``fuzz`` < audit core < engine
adapters < CLI and tests), the one table this test checks and ``specbound docs`` writes into
``docs/architecture.md``.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from specbound import layers, manifest_docs
from specbound.layers import TOP, layer

ROOT = pathlib.Path(__file__).resolve().parent.parent
# repository folder -> the package it installs as (pyproject's package-dir)
FOLDERS = {"spec": "specbound.spec", "proofs": "specbound.proofs", "reference": "specbound.reference",
           "kernels": "specbound.kernels", "replay": "specbound.replay", "specbound": "specbound"}


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


def test_the_architecture_doc_shows_this_layer_table(tmp_path, monkeypatch):
    """``docs/architecture.md`` and the README show :func:`specbound.layers.table`, checked by
    ``specbound docs --check``: an edited copy of the doc is stale, and so is the doc when the
    table changes (a module moved to another layer)."""
    files = manifest_docs.FILES
    assert "docs/architecture.md" in files and "layers" in manifest_docs.blocks(manifest_docs.load_manifest(), None)
    assert manifest_docs.stale(files=files) == []
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text())
    doc = tmp_path / "docs" / "architecture.md"
    doc.write_text(doc.read_text().replace("| 7 | audit core |", "| 7 | audit |"))
    assert [p.split(" (")[0] for p in manifest_docs.stale(root=tmp_path, files=files)] == [
        "docs/architecture.md: block layers is stale"]
    monkeypatch.setattr(layers, "LAYERS", tuple((p, 7 if p == "specbound.sglang" else lv)
                                                for p, lv in layers.LAYERS))
    assert [p.split(" (")[0] for p in manifest_docs.stale(files=files)] == [
        "README.md: block layers is stale", "docs/architecture.md: block layers is stale"]


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


def missing_packages(root: pathlib.Path, listed) -> set[str]:
    """Package folders (an ``__init__.py``) that pyproject's explicit ``packages`` list omits:
    a normal (non-editable) install would leave them out."""
    return {module for _, module, is_package in modules(root) if is_package} - set(listed)


def test_every_package_folder_is_installed():
    tomllib = pytest.importorskip("tomllib")
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    assert missing_packages(ROOT, listed) == set()
    # not vacuous: the list without one package names it
    assert missing_packages(ROOT, [p for p in listed if p != "specbound.sglang"]) == {"specbound.sglang"}


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


# --- imports inside functions ----------------------------------------------------------------------

HEAVY = ("torch", "triton", "hypothesis")  # optional, slow to load: `specbound prove`, docs, manifest never need them


def _heavy_at_top(path: pathlib.Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:  # module level only (a guarded `try: import torch` counts too)
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                break
            names = ([a.name for a in sub.names] if isinstance(sub, ast.Import)
                     else [sub.module or ""] if isinstance(sub, ast.ImportFrom) and not sub.level else [])
            if any(name.split(".")[0] in HEAVY for name in names):
                return True
    return False


def function_level(root: pathlib.Path) -> dict[tuple[str, str], int]:
    """``(module, imported module) -> line`` of every import of our own modules inside a function."""
    found = list(modules(root))
    known = {module for _, module, _ in found}
    out = {}
    for path, module, is_package in found:
        for name, line, deferred in _own_imports(path, module, is_package):
            target = _module_of(name, known)
            if deferred and target is not None and target != module:
                out.setdefault((module, target), line)
    return out


def loads_heavy(root: pathlib.Path) -> dict[str, bool]:
    """module -> whether importing it loads torch or triton (through its module-level imports)."""
    found = list(modules(root))
    direct = {module: _heavy_at_top(path) for path, module, _ in found}
    edges = graph(root)
    out = {}
    for start in edges:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo += [t for t, (_line, deferred) in edges[node].items() if not deferred]
                # importing a.b.c runs a/__init__ and a/b/__init__ first
                todo += [p for p in (node.rsplit(".", k)[0] for k in range(1, node.count(".") + 1)) if p in edges]
        out[start] = any(direct[m] for m in seen)
    return out


def unlisted_deferrals(root: pathlib.Path, heavy: dict, pending: dict) -> list[str]:
    """Function-level imports of our own modules not listed, listed ones that no longer exist,
    and ones listed as heavy whose target loads no torch/triton/hypothesis the importer does not."""
    found, loads = function_level(root), loads_heavy(root)
    out = [f"{module} imports {target} inside a function (line {line}): move it to the top, or list it "
           f"in DEFERRED_HEAVY if it keeps torch/triton/hypothesis off a path"
           for (module, target), line in sorted(found.items())
           if target not in heavy.get(module, ()) and target not in pending.get(module, ())]
    out += [f"{module} -> {target} is listed but no longer imported inside a function: drop it from the list"
            for listing in (heavy, pending) for module, targets in listing.items() for target in targets
            if (module, target) not in found]
    out += [f"{module} -> {target} is listed as heavy, but {target} loads no torch/triton/hypothesis "
            f"that {module} does not"
            for module, targets in heavy.items() for target in targets
            if (module, target) in found and (not loads.get(target) or loads.get(module))]
    return out


def test_imports_inside_functions_are_listed():
    assert unlisted_deferrals(ROOT, DEFERRED_HEAVY, PENDING) == []


def test_an_unlisted_or_stale_deferral_is_reported(tmp_path):
    """Not vacuous: an unlisted import inside a function, a stale entry, and a light module
    listed as heavy are each named."""
    for folder in FOLDERS:
        (tmp_path / folder).mkdir()
    (tmp_path / "kernels" / "__init__.py").write_text("import torch\n")
    (tmp_path / "spec" / "__init__.py").write_text("")
    (tmp_path / "specbound" / "cli.py").write_text(
        "def prove():\n    from specbound import spec\n\ndef fuzz():\n    from specbound import kernels\n")
    heavy = {"specbound.cli": ("specbound.kernels",)}
    assert unlisted_deferrals(tmp_path, heavy, {}) == [
        "specbound.cli imports specbound.spec inside a function (line 2): move it to the top, or list it "
        "in DEFERRED_HEAVY if it keeps torch/triton/hypothesis off a path"]
    listed = {"specbound.cli": ("specbound.spec", "specbound.kernels", "specbound.replay")}
    got = unlisted_deferrals(tmp_path, listed, {})
    assert got == ["specbound.cli -> specbound.replay is listed but no longer imported inside a function: drop it "
                   "from the list",
                   "specbound.cli -> specbound.spec is listed as heavy, but specbound.spec loads no "
                   "torch/triton/hypothesis that specbound.cli does not"], got


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


# Imports of our own modules deliberately inside a function: the target loads torch, triton or
# hypothesis and the importer does not (both checked), so the paths that never need them (spec
# theorems, docs, manifest, the CLI's start-up, the symbolic executor that reads kernels as source)
# stay free of them.
DEFERRED_HEAVY: dict[str, tuple[str, ...]] = {
    "specbound.engines.sglang.cuda.replay": ("specbound.engines.sglang.cuda.check", "specbound.fuzz.records"),
    "specbound.engines.sglang.cuda.tree": ("specbound.reference",),
    "specbound.audit.extract": ("specbound.kernels.source",),
    "specbound.audit.kernels": ("specbound.kernels",),
    "specbound.engines.sglang.kv_kernel": ("specbound.kernels.plan", "specbound.reference", "specbound.reference.samples"),
    "specbound.engines.sglang.audit": ("specbound.engines.sglang.cuda.check",),
    "specbound.engines.sglang.buffer_replay": ("specbound.kernels.tree_build", "specbound.reference.samples"),
    "specbound.engines.sglang.page_table_build": ("specbound.kernels.source",),
    "specbound.engines.sglang.tree_kernel": ("specbound.reference", "specbound.reference.samples"),
    "specbound.cli": ("specbound.fuzz.replay",),
    "specbound.fuzz.command": (
        "specbound.fuzz.profiles", "specbound.fuzz.properties", "specbound.fuzz.records", "specbound.fuzz.replay",
        "specbound.fuzz.runner", "specbound.fuzz.stateful",
    ),
    "specbound.manifest": ("specbound.fuzz.replay",),
    "specbound.proofs.symexec.plant": ("specbound.kernels.source",),
    "specbound.proofs.symexec.verifiers.draft_kv": (
        "specbound.kernels.plan", "specbound.reference", "specbound.reference.samples",
    ),
    "specbound.proofs.symexec.verifiers.fill_prefix": ("specbound.kernels.plan",),
    "specbound.proofs.symexec.verifiers.tree_build": (
        "specbound.kernels.plan", "specbound.kernels.testing", "specbound.reference",
        "specbound.reference.validation",
    ),
    "specbound.proofs.test_symexec_constructs": ("specbound.kernels",),
    "specbound.proofs.test_symexec_selfcheck": (
        "specbound.kernels", "specbound.kernels.draft_kv", "specbound.kernels.plan", "specbound.kernels.tree_build",
        "specbound.reference.samples", "specbound.reference.validation",
    ),
    "specbound.proofs.test_symexec_sglang": ("specbound.kernels", "specbound.reference.samples"),
    "specbound.pytest_plugin": ("specbound.fuzz.profiles", "specbound.kernels"),
    "specbound.replay.checked": ("specbound.kernels.checked",),
    "specbound.engines.sglang.launch": ("specbound.reference", "specbound.reference.samples"),
    "specbound.replay.kernel_source": ("specbound.kernels.source",),
}

# Imports inside functions not yet moved to the top (no optional dependency behind them): listed so
# the test fails on any new one, and an entry is dropped as its import moves up.  Most keep a CLI
# command's modules (the theorem registry, the kernel proofs, the audit run) out of the other
# commands' start-up.
PENDING: dict[str, tuple[str, ...]] = {
    "specbound.audit.command": ("specbound.audit.report", "specbound.engines.sglang.audit"),
    "specbound.engines.vllm.audit": (
        "specbound.engines.vllm.prove", "specbound.engines.vllm.refute", "specbound.engines.vllm.replay",
    ),
    "specbound.cli": (
        "specbound.docs", "specbound.explain", "specbound.manifest", "specbound.manifest_docs",
        "specbound.proofs.registry", "specbound.proofs.symexec.theorems", "specbound.report",
    ),
    "specbound.docs": ("specbound.proofs.registry",),
    "specbound.explain": ("specbound.manifest", "specbound.proofs.registry", "specbound.proofs.symexec.theorems"),
    "specbound.manifest": (
        "specbound.engines.sglang.kernel_proofs", "specbound.proofs.registry", "specbound.proofs.symexec.mutants",
        "specbound.engines.sglang.draft_kv_model", "specbound.engines.sglang.tree_model",
        "specbound.engines.sglang.tree_symbolic",
        "specbound.proofs.symexec.theorems", "specbound.proofs.symexec.verifiers",
    ),
    "specbound.manifest_docs": (
        "specbound.engines.sglang.envelope", "specbound.proofs.symexec.kernel_files", "specbound.proofs.symexec.mutants",
    ),
    "specbound.proofs.conftest": ("specbound.engines.sglang.locate", "specbound.proofs.registry"),
    "specbound.proofs.test_launch_plans": ("specbound.kernels.draft_kv", "specbound.kernels.tree_build"),
    "specbound.report": ("specbound.proofs.symexec.theorems",),
}


def test_specbound_prove_loads_no_torch_or_triton():
    """The README's promise: `specbound prove` (the command line, whose parser registers every
    command, the audits' included) never imports torch or triton."""
    import subprocess
    import sys

    code = ("import sys\nfrom specbound.cli import main\n"
            "assert main(['prove', '--only', 'VM-EXACT-EXTENT']) == 0\n"
            "heavy = sorted(m for m in ('torch', 'triton') if m in sys.modules)\n"
            "assert not heavy, f'specbound prove imported {heavy}'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
