"""Find an installed sglang on disk without importing it.

Order: an explicit directory (``--sglang-path`` or ``$SPECBOUND_SGLANG_PATH``), then the
installed distribution's metadata (``importlib.metadata``, which reads ``*.dist-info``
and never runs the package), then a scan of ``sys.path`` for an ``sglang/`` folder.
The explicit directory may be the package folder itself (it holds ``srt/`` or
``kernels/``) or a folder that contains ``sglang/`` (a site-packages, an unpacked wheel).
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "SPECBOUND_SGLANG_PATH"
PACKAGE = "sglang"


@dataclass(frozen=True)
class SglangInstall:
    root: Path          # the package folder (holds srt/, kernels/, ...)
    version: str        # from the dist-info metadata or sglang/_version.py; "unknown" if neither
    located_by: str     # "--sglang-path", "$SPECBOUND_SGLANG_PATH", "importlib.metadata", "sys.path"


class NotInstalled(LookupError):
    """No sglang package folder was found; the message says where the audit looked."""


def _looks_like_package(d: Path) -> bool:
    return d.is_dir() and (d / "__init__.py").is_file() and any(
        (d / sub).is_dir() for sub in ("srt", "kernels"))


def _package_in(d: Path) -> Path | None:
    if _looks_like_package(d) and d.name == PACKAGE:
        return d
    if _looks_like_package(d / PACKAGE):
        return d / PACKAGE
    if _looks_like_package(d):  # a package folder under another name (a copy for tests)
        return d
    return None


def _version_from_source(root: Path) -> str | None:
    """``__version__ = '...'`` from ``_version.py`` or ``version.py``, read with ast."""
    for name in ("_version.py", "version.py"):
        path = root / name
        if not path.is_file():
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if "__version__" in names or "version" in names:
                    return node.value.value
    return None


def _from_metadata() -> SglangInstall | None:
    from importlib import metadata

    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        return None
    root = Path(str(dist.locate_file(PACKAGE)))
    if not _looks_like_package(root):
        return None
    return SglangInstall(root.resolve(), dist.version or _version_from_source(root) or "unknown",
                         "importlib.metadata")


def _from_sys_path() -> SglangInstall | None:
    for entry in sys.path:
        if not entry:
            continue
        d = Path(entry) / PACKAGE
        if _looks_like_package(d):
            return SglangInstall(d.resolve(), _version_from_source(d) or "unknown", "sys.path")
    return None


def locate(explicit: str | os.PathLike | None = None) -> SglangInstall:
    """The sglang to audit.  An explicit path that holds no sglang is an error (it is
    never silently replaced by another installation)."""
    for value, how in ((explicit, "--sglang-path"), (os.environ.get(ENV_VAR), f"${ENV_VAR}")):
        if value:
            d = Path(value).expanduser()
            root = _package_in(d)
            if root is None:
                raise NotInstalled(f"{how} {d}: no sglang package folder there "
                                   "(expected sglang/__init__.py with srt/ or kernels/)")
            return SglangInstall(root.resolve(), _version_from_source(root) or "unknown", how)
    found = _from_metadata() or _from_sys_path()
    if found is None:
        raise NotInstalled("sglang is not installed in this environment (no sglang distribution in "
                           "importlib.metadata, no sglang/ folder on sys.path); install it with "
                           "`pip install --no-deps sglang` or pass --sglang-path DIR")
    return found
