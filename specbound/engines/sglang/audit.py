"""One audit run: locate sglang, run every check, collect the rows."""

from __future__ import annotations

import os
import time
from typing import Callable

from specbound.audit import DEFAULT_EXAMPLES, DEFAULT_SEED
from specbound.audit.report import ERROR, NOT_PRESENT, AuditReport, Row, plural
from specbound.audit.program import Program
from specbound.audit.extract import SourceIndex
from .bindings import BINDINGS
from .locate import ENV_VAR, PACKAGE, NotInstalled, locate
from . import helpers, kernel_proofs, kv_kernel, sites, tree_kernel
from .buffers import check_buffers
from .consumers import check_consumers
from .draft_extend import check_draft_extend
from .expand_scatter import check_expand_scatter
from .offset_page_table import check_offset_page_tables
from .draft_decode_offset import check_draft_decode_offsets
from .sparse_page_table import check_sparse_page_tables
from .padded_rows import check_padded_rows
from .padded_verify import check_padded_verify
from .verify_kv import check_verify_kv
from .helpers import SPEC_UTILS_FILE



def run_audit(sglang_path: str | None = None, examples: int = DEFAULT_EXAMPLES, seed: int = DEFAULT_SEED,
              kernels: bool = True, symbolic_all: bool = False,
              progress: Callable[[str], None] | None = None) -> AuditReport:
    """The full audit; never raises for a missing or unexpected sglang (those are rows).
    ``symbolic_all``: the symbolic proof rows prove every listed specialization (minutes).
    ``progress``: called with one line as each group of checks starts and ends."""
    if symbolic_all and not kernels:
        raise ValueError("symbolic_all=True needs kernels=True (the symbolic proofs are kernel checks)")
    say = progress or (lambda line: None)
    t0 = time.perf_counter()
    try:
        inst = locate(sglang_path)
    except NotInstalled as e:
        rep = AuditReport(None, None, None, examples=examples, seed=seed, engine=BINDINGS.engine)
        # Nothing to audit: a folder that holds no sglang (a typo in a CI job) is an error row, no
        # sglang anywhere a `not present` one; either way nothing was checked (exit 3, not 0).
        rep.fatal = str(e)
        status = ERROR if sglang_path or os.environ.get(ENV_VAR) else NOT_PRESENT
        rep.add(Row("sglang.installed", "sglang", "an sglang package to audit", "-", status, str(e)))
        rep.seconds = time.perf_counter() - t0
        return rep
    rep = AuditReport(str(inst.root), inst.version, inst.located_by, examples=examples, seed=seed,
                      engine=BINDINGS.engine)
    say(f"sglang {inst.version} at {inst.root}")

    index = SourceIndex(inst.root)
    program = Program(index, PACKAGE)   # one parse of the package for the buffer and consumer stages
    stages = [("helpers", "sglang's sizing helpers, symbolically (Z3)", lambda: _helpers(index, rep)),
              ("buffers", "buffers traced from every kernel call to their allocation (Z3"
               + (", replays)" if kernels else ")"), lambda: _buffers(index, rep, kernels, program)),
              ("consumers", "buffers against what attention reads and torch copies (consumer contracts, Z3)",
               lambda: _consumers(index, rep, program, kernels))]
    if kernels:
        stages += [
            ("kernels.tree", f"Triton tree build, checked interpreter ({examples} batches + malformed)",
             lambda: _tree(index, rep, examples, seed)),
            ("kernels.kv", f"Triton draft kv kernel, checked interpreter ({examples} batches + probes)",
             lambda: _kv(index, rep, examples, seed)),
            ("kernels.sites", "the draft kv kernel's launch sites (ast)", lambda: _sites(index, rep)),
            ("kernels.cuda", f"CUDA tree kernels on the CPU under ASan/UBSan ({examples} batches + probes)",
             lambda: _cuda(index, rep, examples, seed)),
            ("kernels.symbolic", "sglang's Triton kernels proved by symbolic execution"
             + (" (every specialization)" if symbolic_all else ""), lambda: _symbolic(rep, symbolic_all)),
        ]
    for i, (name, what, stage) in enumerate(stages, 1):
        before, t1 = len(rep.rows), time.perf_counter()
        say(f"[{i}/{len(stages)}] {name}: {what} ...")
        try:
            stage()
        except Exception as e:  # noqa: BLE001 - a broken stage is a row, never a traceback
            rep.add(Row(f"{name}.stage", name, f"the {name} checks", "-", ERROR, f"{type(e).__name__}: {e}"))
        added = rep.rows[before:]
        tally = ", ".join(f"{sum(r.status == s for r in added)} {s}" for s in dict.fromkeys(r.status for r in added))
        say(f"[{i}/{len(stages)}] {name}: {time.perf_counter() - t1:.1f} s, {plural(len(added), 'row')}"
            + (f" ({tally})" if tally else ""))
    rep.seconds = time.perf_counter() - t0
    return rep


def _helpers(index, rep):
    helpers.run_all(index, rep)


def _buffers(index, rep, replay, program):
    check_buffers(index, rep, replay=replay, program=program)


def _consumers(index, rep, program, replay):
    check_consumers(index, rep, program)
    check_offset_page_tables(program, rep)
    check_draft_decode_offsets(program, rep)
    check_sparse_page_tables(program, rep)
    check_draft_extend(program, rep)
    check_expand_scatter(program, rep, replay=replay)
    check_padded_rows(program, rep)
    check_padded_verify(program, rep)
    check_verify_kv(program, rep, replay=replay)


def _tree(index, rep, examples, seed):
    tree_kernel.check_tree_kernel(index, rep, examples, seed)


def _kv(index, rep, examples, seed):
    width_fn, width_source = None, ""
    found = index.find("draft_kv_indices_buffer_width", (SPEC_UTILS_FILE,))
    if found is not None and len(found.params()) == 3:
        try:
            width_fn, width_source = index.load_helper(found, {}), found.where
        except Exception:  # noqa: BLE001 - the helper row already reports it
            width_fn = None
    kv_kernel.check_kv_kernel(index, rep, examples, seed, width_fn, width_source)


def _sites(index, rep):
    sites.check_launch_sites(index, rep)


def _cuda(index, rep, examples, seed):
    from .cuda.check import check_cuda_tree   # loads torch: not on every command's start-up

    check_cuda_tree(index, rep, examples, seed)


def _symbolic(rep, symbolic_all):
    kernel_proofs.check(rep, full=symbolic_all)
