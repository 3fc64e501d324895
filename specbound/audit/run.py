"""One audit run: locate sglang, run every check, collect the rows."""

from __future__ import annotations

import os
import time

from .report import ERROR, NOT_PRESENT, AuditReport, Row
from .locate import ENV_VAR, NotInstalled, locate
from . import helpers
from . import kernels, kv_kernel, tree_kernel
from .buffers import check_buffers
from .extract import SourceIndex
from .helpers import SPEC_UTILS_FILE

DEFAULT_EXAMPLES = 40
DEFAULT_SEED = 20240607


def run_audit(sglang_path: str | None = None, examples: int = DEFAULT_EXAMPLES, seed: int = DEFAULT_SEED,
              kernels: bool = True, symbolic_all: bool = False) -> AuditReport:
    """The full audit; never raises for a missing or unexpected sglang (those are rows).
    ``symbolic_all``: the symbolic proof rows prove every listed specialization (minutes)."""
    if symbolic_all and not kernels:
        raise ValueError("symbolic_all=True needs kernels=True (the symbolic proofs are kernel checks)")
    t0 = time.perf_counter()
    try:
        inst = locate(sglang_path)
    except NotInstalled as e:
        rep = AuditReport(None, None, None, examples=examples, seed=seed)
        # Nothing to audit: a folder that holds no sglang (a typo in a CI job) is an error row, no
        # sglang anywhere a `not present` one; either way nothing was checked (exit 3, not 0).
        rep.fatal = str(e)
        status = ERROR if sglang_path or os.environ.get(ENV_VAR) else NOT_PRESENT
        rep.add(Row("sglang.installed", "sglang", "an sglang package to audit", "-", status, str(e)))
        rep.seconds = time.perf_counter() - t0
        return rep
    rep = AuditReport(str(inst.root), inst.version, inst.located_by, examples=examples, seed=seed)

    index = SourceIndex(inst.root)
    stages = [("helpers", lambda: _helpers(index, rep)), ("buffers", lambda: _buffers(index, rep, kernels))]
    if kernels:
        stages.append(("kernels", lambda: _kernels(index, rep, examples, seed, symbolic_all)))
    for name, stage in stages:
        try:
            stage()
        except Exception as e:  # noqa: BLE001 - a broken stage is a row, never a traceback
            rep.add(Row(f"{name}.stage", name, f"the {name} checks", "-", ERROR, f"{type(e).__name__}: {e}"))
    rep.seconds = time.perf_counter() - t0
    return rep


def _helpers(index, rep):
    helpers.run_all(index, rep)


def _buffers(index, rep, replay):
    check_buffers(index, rep, replay=replay)


def _kernels(index, rep, examples, seed, symbolic_all):
    from .cuda.check import check_cuda_tree

    width_fn, width_source = None, ""
    found = index.find("draft_kv_indices_buffer_width", (SPEC_UTILS_FILE,))
    if found is not None and len(found.params()) == 3:
        try:
            width_fn, width_source = index.load_helper(found, {}), found.where
        except Exception:  # noqa: BLE001 - the helper row already reports it
            width_fn = None
    tree_kernel.check_tree_kernel(index, rep, examples, seed)
    kv_kernel.check_kv_kernel(index, rep, examples, seed, width_fn, width_source)
    kernels.check_launch_sites(index, rep)
    check_cuda_tree(index, rep, examples, seed)
    kernels.check_symbolic(rep, full=symbolic_all)
