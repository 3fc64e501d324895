"""Test support: write a small sglang-shaped package (the audit reads it like a release)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.audit.report import AuditReport

from .bindings import BINDINGS


def write_sglang_package(root: Path, files: dict[str, str], version: str = "0.0.0+fake") -> Path:
    """``root/sglang`` with ``__init__.py``, a ``_version.py`` and ``files`` (path inside the
    package -> source, dedented); returns the package folder."""
    pkg = Path(root) / "sglang"
    (pkg / "srt").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_version.py").write_text(f"__version__ = version = {version!r}\n")
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return pkg


def planted_copy(path, old: str, new: str, dest: Path) -> str:
    """``dest``: the kernel file at ``path`` with ``old`` (which must occur exactly once: a
    planted bug that matches nothing checks nothing) replaced by ``new``; its path."""
    text = open(path).read()
    assert text.count(old) == 1, f"the planted change no longer matches the source: {old!r}"
    Path(dest).write_text(text.replace(old, new))
    return str(dest)


def audit_rows(root: Path, check, package: str) -> list:
    """The rows ``check(program, report)`` adds for the package at ``root`` (imported as ``package``)."""
    rep = AuditReport(str(root), "toy", "test", engine=BINDINGS.engine)
    check(Program(SourceIndex(root), package), rep)
    return rep.rows
