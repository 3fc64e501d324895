"""Our kernel sources and their torch-free helper modules, found without importing
:mod:`specbound.kernels` (its ``__init__`` imports torch and triton, which symbolic runs
never need)."""

from __future__ import annotations

import importlib.util
import os
import sys


def kernels_dir() -> str:
    """Directory of specbound.kernels."""
    found = importlib.util.find_spec("specbound.kernels")
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError("specbound.kernels is not installed")
    return list(found.submodule_search_locations)[0]


def kernel_path(module: str) -> str:
    return os.path.join(kernels_dir(), f"{module}.py")


def torch_free_module(stem: str):
    """``specbound.kernels.<stem>`` (a module that imports only ``spec`` and the standard
    library, e.g. ``plan`` or ``source``) imported by path.  Registered under its own name,
    so the kernels that import it later share this module (one copy, whoever reads it)."""
    name = f"specbound.kernels.{stem}"
    if name not in sys.modules:
        found = importlib.util.spec_from_file_location(name, kernel_path(stem))
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        try:
            found.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]
