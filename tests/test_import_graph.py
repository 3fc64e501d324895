"""The import graph the README documents, checked on the source: every ``specbound`` import
(top level or inside a function, absolute or relative) goes to the same layer or one below.

Layers, bottom up: ``spec``; the proof core and spec theorems (``proofs/`` outside
``symexec/``: they import ``spec`` only); ``reference``; ``kernels``; ``replay``; the kernel
verifier ``proofs/symexec/``; then the CLI, fuzz, audit, the engines (specbound.engines.*), the
sglang drop-ins, manifest, docs and every test.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# repository folder -> the package it installs as (pyproject's package-dir)
FOLDERS = {"spec": "specbound.spec", "proofs": "specbound.proofs", "reference": "specbound.reference",
           "kernels": "specbound.kernels", "replay": "specbound.replay", "specbound": "specbound"}
LAYERS = (  # (module prefix, layer), most specific first
    ("specbound.spec", 0),
    ("specbound.proofs.symexec", 5),
    ("specbound.proofs.test_", 6),
    ("specbound.proofs._checks", 6),   # the proof tests' shared assertions
    ("specbound.proofs.conftest", 6),  # the proof tests' shared fixtures
    ("specbound.proofs", 1),
    ("specbound.reference", 2),
    ("specbound.kernels", 3),
    ("specbound.replay", 4),
    ("specbound.engines", 6),   # a second engine's adapter (vLLM): beside the audit
    ("specbound.sglang", 6),   # the sglang drop-ins: the top layer, with the CLI and the audit
)
TOP = 6


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


def imported(path: pathlib.Path, module: str, is_package: bool):
    """``(imported module, line)`` for every import of a ``specbound`` module in the file."""
    package = module if is_package else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "specbound")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "specbound":
                continue
            # `from specbound import kernels` names a module; `from .x import f` a name in .x
            if layer(target) == TOP or node.module is None:
                yield from ((f"{target}.{a.name}", node.lineno) for a in node.names)
            else:
                yield target, node.lineno


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
