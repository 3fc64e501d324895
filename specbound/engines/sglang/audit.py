"""One audit run: locate sglang, run every check, collect the rows.

The stages are independent: each reads the package's source and adds its own rows, none
reads another's.  With ``jobs`` > 1 the groups of :data:`GROUPS` run in that many worker
processes (the package parse shared by the stages of one group), and their rows are put
together in the one-job order, so the report is the same either way; the progress lines come
in that order too, each stage's pair as its group hands it back.  A run of one group
(``--no-kernels``) stays in this process.  Workers start from a fork server where the platform
has one (:func:`specbound.verify.worker_pool`), never forked from this process.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

from specbound.audit import DEFAULT_EXAMPLES, DEFAULT_SEED
from specbound.audit.report import ERROR, NOT_PRESENT, AuditReport, Row, plural
from specbound.audit.program import Program
from specbound.audit.extract import SourceIndex
from specbound.verify import worker_pool
from .bindings import BINDINGS
from .locate import ENV_VAR, PACKAGE, NotInstalled, locate
from . import helpers, kernel_proofs, kv_kernel, sites, tree_kernel
from .buffers import check_buffers
from .consumers import check_consumers
from .draft_extend import check_draft_extend
from .expand_scatter import check_expand_scatter
from .offset_page_table import check_offset_page_tables
from .page_table_build import check_page_table_builds
from .draft_decode_offset import check_draft_decode_offsets
from .sparse_page_table import check_sparse_page_tables
from .padded_rows import check_padded_rows
from .padded_verify import check_padded_verify
from .verify_kv import check_verify_kv
from .direct_kv import check_direct_kv
from .plan_copy import check_plan_copies
from .packed_mask import check_packed_masks
from .compressed_page_table import check_compressed_page_tables
from .clamped_gather import check_clamped_gathers
from .block_table_copy import check_block_table_copies
from .fill_write import check_fill_writes
from .req_to_token_row import check_req_to_token_rows
from .helpers import SPEC_UTILS_FILE

# The stages of a parallel run, grouped by process: the helper, buffer and consumer stages
# share one parse of the package; each kernel stage is its own.  Handed out longest first (CPU
# seconds of each on sglang 0.5.23, one process: symbolic proofs 30, package stages 21, CUDA rows
# 12 with their sanitized runs, the two Triton fuzzers 6 each), so the last to finish is a
# short one and two workers end within a few seconds of each other.
GROUPS = (("kernels.symbolic",), ("helpers", "buffers", "consumers", "kernels.sites"), ("kernels.cuda",),
          ("kernels.tree",), ("kernels.kv",))


@dataclass(frozen=True)
class _Setup:
    """What every stage is given: picklable, so a worker process can rebuild the rest."""
    header: tuple          # the AuditReport's path (the package folder), version, located_by
    examples: int
    seed: int
    kernels: bool
    symbolic_all: bool

    @property
    def root(self) -> str:
        return self.header[0]

    def report(self) -> AuditReport:
        return AuditReport(*self.header, examples=self.examples, seed=self.seed, engine=BINDINGS.engine)


def run_audit(sglang_path: str | None = None, examples: int = DEFAULT_EXAMPLES, seed: int = DEFAULT_SEED,
              kernels: bool = True, symbolic_all: bool = False,
              progress: Callable[[str], None] | None = None, jobs: int = 1) -> AuditReport:
    """The full audit; never raises for a missing or unexpected sglang (those are rows).
    ``symbolic_all``: the symbolic proof rows prove every listed specialization (minutes).
    ``progress``: called with one line as each group of checks starts and ends.
    ``jobs``: worker processes (1: every stage in this process, in order)."""
    if symbolic_all and not kernels:
        raise ValueError("symbolic_all=True needs kernels=True (the symbolic proofs are kernel checks)")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
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
    setup = _Setup((str(inst.root), inst.version, inst.located_by), examples, seed, kernels, symbolic_all)
    rep = setup.report()
    say(f"sglang {inst.version} at {inst.root}")
    names = [name for name, _ in _described(setup)]
    groups = [g for g in ([n for n in group if n in names] for group in GROUPS) if g]
    assert sorted(n for g in groups for n in g) == sorted(names), "every stage in exactly one group"
    if jobs == 1 or len(groups) == 1:   # one group (--no-kernels): no worker to start, the CPU stays ours
        results = _in_order(setup, names, say)
    else:
        results = _in_parallel(setup, names, groups, jobs, say)
    for name in names:
        rep.rows += results[name][0]
    rep.seconds = time.perf_counter() - t0
    return rep


def _described(setup: _Setup) -> list[tuple[str, str]]:
    """Every stage of this run, in report order, with what its progress line says it does."""
    n = setup.examples
    out = [("helpers", "sglang's sizing helpers, symbolically (Z3)"),
           ("buffers", "buffers traced from every kernel call to their allocation (Z3"
            + (", replays)" if setup.kernels else ")")),
           ("consumers", "buffers against what attention reads and torch copies (consumer contracts, Z3)")]
    if setup.kernels:
        out += [("kernels.tree", f"Triton tree build, checked interpreter ({n} batches + malformed)"),
                ("kernels.kv", f"Triton draft kv kernel, checked interpreter ({n} batches + probes)"),
                ("kernels.sites", "the draft kv kernel's launch sites (ast)"),
                ("kernels.cuda", f"CUDA tree kernels on the CPU under ASan/UBSan ({n} batches + probes)"),
                ("kernels.symbolic", "sglang's Triton kernels proved by symbolic execution"
                 + (" (every specialization)" if setup.symbolic_all else ""))]
    return out


def _in_order(setup: _Setup, names: list[str], say) -> dict:
    """Every stage in this process, one after the other, each line as it starts and ends."""
    what = dict(_described(setup))
    index, program = _parsed(setup)
    results = {}
    for i, name in enumerate(names, 1):
        say(_started(i, len(names), name, what[name]))
        results[name] = _stage(setup, name, index, program)
        say(_ended(i, len(names), name, *results[name]))
    return results


def _in_parallel(setup: _Setup, names: list[str], groups: list[list[str]], jobs: int, say) -> dict:
    """The ``groups`` (of :data:`GROUPS`) on ``jobs`` workers; the lines in report order."""
    what = dict(_described(setup))
    results = {}
    with worker_pool(min(jobs, len(groups))) as pool:
        futures = {tuple(g): pool.submit(_group, setup, g) for g in groups}
        for i, name in enumerate(names, 1):
            say(_started(i, len(names), name, what[name]))
            if name not in results:
                group = next(g for g in futures if name in g)
                try:
                    results.update(futures[group].result())
                except Exception as e:  # noqa: BLE001 - the worker died (killed, out of memory): rows, not a traceback
                    results.update({n: ([_broken(n, e)], 0.0) for n in group})
            say(_ended(i, len(names), name, *results[name]))
    return results


def _group(setup: _Setup, names) -> dict:
    """One worker's stages, sharing one parse of the package."""
    index, program = _parsed(setup)
    return {name: _stage(setup, name, index, program) for name in names}


def _parsed(setup: _Setup) -> tuple[SourceIndex, Program]:
    """The package's index and program, parsed on demand: one for the stages that share a process."""
    index = SourceIndex(setup.root)
    return index, Program(index, PACKAGE)


def _stage(setup: _Setup, name: str, index, program) -> tuple[list[Row], float]:
    """One stage's rows (a broken stage is an error row, never a traceback) and its seconds."""
    rep, t1 = setup.report(), time.perf_counter()
    try:
        _RUN[name](setup, index, program, rep)
    except Exception as e:  # noqa: BLE001 - a broken stage is a row, never a traceback
        rep.add(_broken(name, e))
    return rep.rows, time.perf_counter() - t1


def _broken(name: str, e: Exception) -> Row:
    return Row(f"{name}.stage", name, f"the {name} checks", "-", ERROR, f"{type(e).__name__}: {e}")


def _started(i: int, n: int, name: str, what: str) -> str:
    return f"[{i}/{n}] {name}: {what} ..."


def _ended(i: int, n: int, name: str, added: list[Row], seconds: float) -> str:
    tally = ", ".join(f"{sum(r.status == s for r in added)} {s}" for s in dict.fromkeys(r.status for r in added))
    return (f"[{i}/{n}] {name}: {seconds:.1f} s, {plural(len(added), 'row')}"
            + (f" ({tally})" if tally else ""))


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
    check_direct_kv(program, rep, replay=replay)
    check_plan_copies(program, rep, replay=replay)
    check_packed_masks(program, rep, replay=replay)
    check_compressed_page_tables(program, rep, replay=replay)
    check_clamped_gathers(program, rep, replay=replay)
    check_block_table_copies(program, rep, replay=replay)
    check_fill_writes(program, rep, replay=replay)
    check_page_table_builds(program, rep, replay=replay)
    check_req_to_token_rows(program, rep, index=index, replay=replay)


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


# stage name -> its call (looked up at run time, so a test's stand-in for a stage is the one run)
_RUN = {
    "helpers": lambda s, index, program, rep: _helpers(index, rep),
    "buffers": lambda s, index, program, rep: _buffers(index, rep, s.kernels, program),
    "consumers": lambda s, index, program, rep: _consumers(index, rep, program, s.kernels),
    "kernels.tree": lambda s, index, program, rep: _tree(index, rep, s.examples, s.seed),
    "kernels.kv": lambda s, index, program, rep: _kv(index, rep, s.examples, s.seed),
    "kernels.sites": lambda s, index, program, rep: _sites(index, rep),
    "kernels.cuda": lambda s, index, program, rep: _cuda(index, rep, s.examples, s.seed),
    "kernels.symbolic": lambda s, index, program, rep: _symbolic(rep, s.symbolic_all),
}
