"""The audit rows of sglang's CUDA tree build, run on the CPU under ASan and UBSan.

* ``kernel.build_tree[cuda]`` / ``kernel.build_tree[cuda, BITPACKING]``: valid EAGLE trees
  (the Hypothesis strategies of ``specbound fuzz``), :func:`.tree.run_case` on each;
  ``matched``, or the first failure (``oob``, ``hang``, ``diverged``) after Hypothesis
  shrank it, with its replay.
* ``...[.., malformed.<probe>]``: each probe of :mod:`.probes`, launched once; ``unguarded``
  with what happened (the finding is in ``counterexample``), or ``matched`` if the kernel
  follows the guarded semantics.  ``...[.., malformed.random]`` counts the outcomes on
  random malformed batches.
* ``kernel.build_tree[cuda, int32]``: the smallest cases at which the kernels' int offsets
  wrap (:mod:`.offsets`), the host wrapper's checks next to them, and the smallest
  FULL_MASK case run for real on a lazily mapped mask.

Rows are ``not present`` when the release ships no CUDA source of the tree build,
``unavailable`` when there is no compiler or sanitizer runtime (the detail names it),
``error`` when a kernel uses a construct the harness cannot run (named) or does not compile.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from specbound.audit.report import (
    DIVERGED, ERROR, HANG, MATCHED, NOT_PRESENT, OOB, UNAVAILABLE, UNGUARDED, UNKNOWN_SIGNATURE, AuditReport, Row,
)
from . import offsets, source
from .build import BuildError, Library, Unavailable, build, probe_toolchain
from .harness import Session
from .probes import PROBES
from .tree import FULL, KERNEL_MODES, make_launch, prefilled, roles, run_case
from specbound.fuzz import strategies as sst
from specbound.fuzz.runner import run_property
from specbound.fuzz.strategies import TreeCase
from specbound.reference.samples import random_draft_tree

HOST_WRAPPER = "build_tree_kernel_efficient"
ROW = {"build_tree_efficient": "kernel.build_tree[cuda]",
       "build_tree_efficient_partial_packed": "kernel.build_tree[cuda, BITPACKING]"}
# Finding -> row status on a valid tree.  "ub" and the comparison findings are divergences
# (the kernel's result is wrong or undefined); "crash" (no sanitizer report) and "error"
# mean the check itself did not complete.
STATUS = {"oob": OOB, "hang": HANG, "crash": ERROR, "error": ERROR}


@dataclass
class Prepared:
    """The kernels of one sglang, compiled (or the reason why not, per kernel)."""

    root: Path
    libraries: dict = field(default_factory=dict)      # name -> Library (one per kernel file)
    kernels: dict = field(default_factory=dict)        # name -> source.Kernel (runnable)
    where: dict = field(default_factory=dict)          # name -> "rel:line"
    problems: dict = field(default_factory=dict)       # name -> (status, detail)

    @property
    def library(self) -> Library | None:
        """The one library holding every runnable kernel (sglang keeps both in one file)."""
        libs = {id(lib): lib for lib in self.libraries.values()}
        if len(libs) > 1:
            raise ValueError("the kernels were compiled from several files; use .libraries")
        return next(iter(libs.values()), None)


def prepare(root: Path, toolchain=None) -> Prepared:
    """Find, vet and compile the tree kernels of the sglang package at ``root``."""
    out = Prepared(Path(root))
    files = source.find_kernel_files(out.root, tuple(KERNEL_MODES))
    missing = [name for name in KERNEL_MODES if name not in files]
    if missing:
        caller = _compiled_caller(out.root)
        why = (f"; {caller} takes {HOST_WRAPPER} from the separate, compiled sgl_kernel package (its wheels hold "
               "binaries, not CUDA source), so there is nothing to run here" if caller else "")
        for name in missing:
            out.problems[name] = (NOT_PRESENT, f"no CUDA source in this sglang defines {name}{why}")
    by_file: dict[Path, list] = {}
    for name, path in files.items():
        text = path.read_text(encoding="utf-8", errors="replace")
        kernel = source.find_kernels(text)[name]
        rel = path.relative_to(out.root).as_posix()
        out.where[name] = f"{rel}:{kernel.line}"
        bad = source.unsupported_constructs(kernel)
        _, unknown = roles(kernel.params)
        if bad:
            out.problems[name] = (ERROR, "refused: the harness runs threads one after another, and this kernel "
                                  "uses " + "; ".join(f"{what} (line {line})" for what, line in bad))
        elif kernel.template:
            out.problems[name] = (UNKNOWN_SIGNATURE, "a template kernel: no instantiation to launch")
        elif unknown:
            out.problems[name] = (UNKNOWN_SIGNATURE, f"parameters {[p.decl for p in kernel.params]}; no value "
                                  f"known for {unknown}")
        else:
            by_file.setdefault(path, []).append(kernel)
    if not by_file:
        return out
    try:
        toolchain = toolchain or probe_toolchain()
    except Unavailable as e:
        for kernels in by_file.values():
            for k in kernels:
                out.problems[k.name] = (UNAVAILABLE, str(e))
        return out
    for path, kernels in by_file.items():      # the two kernels share one file in every release that has them
        try:
            lib = build(path.read_text(encoding="utf-8", errors="replace"), path.relative_to(out.root).as_posix(),
                        tuple(kernels), toolchain)
        except BuildError as e:
            for k in kernels:
                out.problems[k.name] = (ERROR, str(e))
            continue
        out.libraries.update({k.name: lib for k in kernels})
        out.kernels.update({k.name: k for k in kernels})
    return out


def _compiled_caller(root: Path) -> str | None:
    """The first .py file that imports the tree build from ``sgl_kernel``, if any."""
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "sgl_kernel" in text and HOST_WRAPPER in text:
            return path.relative_to(root).as_posix()
    return None


def replay_command(root: Path, kernel: str, case) -> str:
    return (f"python -m specbound.engines.sglang.cuda.replay --sglang-path {shlex.quote(str(root))} --kernel {kernel} "
            f"{shlex.quote(case.to_json())}")


def _subject(prep: Prepared, name: str) -> str:
    return f"{name} ({prep.where[name]})" if name in prep.where else f"{name} (CUDA)"


# --- valid trees --------------------------------------------------------------------------------

def _valid_row(prep: Prepared, session: Session, name: str, examples: int, seed: int) -> Row:
    kernel = prep.kernels[name]
    modes = KERNEL_MODES[name]
    what = (f"valid EAGLE trees ({', '.join(m.name for m in modes)}), pre-filled as sglang does: outputs == "
            "specbound.reference bit for bit, footprints == spec (poisoned pre-fills), order-independent, "
            "no sanitizer report, guards intact")
    findings = {}

    def check(case):
        f = run_case(session, kernel, case)
        if f is not None:
            findings[case.to_json()] = f
            raise AssertionError(f"{f.kind}: {f.message}")

    t0 = time.perf_counter()
    launches = session.launches
    res = run_property(f"audit.cuda.{name}", check, sst.tree_cases(malformed=0.0, modes=modes),
                       max_examples=examples, seed=seed, use_database=False)
    seconds = time.perf_counter() - t0
    per_case = 1000 * seconds / max(res.examples, 1)
    method = f"CPU+ASan/UBSan, Hypothesis ({res.examples} batches, seed {seed})"
    if res.failures:
        f = findings.get(res.case.to_json()) if res.case is not None else None
        if f is None:                 # an exception of the check itself, not a finding on the kernel
            return Row(ROW[name], _subject(prep, name), what, method, ERROR,
                       f"the check could not run: {res.message}", seconds=seconds)
        return Row(ROW[name], _subject(prep, name), what, method, STATUS.get(f.kind, DIVERGED),
                   f"{f.kind}: {f.message}; replay: {replay_command(prep.root, name, res.case)}",
                   replay=json.loads(res.case.to_json()), seconds=seconds)
    lib = prep.libraries[name]
    built = "cached library" if lib.cached else f"compiled in {lib.seconds:.1f} s"
    return Row(ROW[name], _subject(prep, name), what, method, MATCHED,
               f"{res.examples} batches, {session.launches - launches} launches (sglang's pre-fills in both "
               f"thread orders, two poisoned pre-fills; none for bs = 0), {per_case:.0f} ms per batch: every "
               f"output equal to specbound.reference, every footprint equal to the spec, no sanitizer report "
               f"({built}, {lib.toolchain.version}, {lib.loops_bounded} loops step-bounded)", seconds=seconds)


# --- malformed trees ---------------------------------------------------------------------------

def _probe_rows(prep: Prepared, session: Session, name: str) -> list[Row]:
    kernel = prep.kernels[name]
    mode = KERNEL_MODES[name][-1]            # QLEN_ONLY (the smallest mask), BITPACKING
    rows = []
    for probe in PROBES:
        case = probe.case(mode)
        t0 = time.perf_counter()
        f = run_case(session, kernel, case, malformed=True)
        seconds = time.perf_counter() - t0
        row_id = f"{ROW[name][:-1]}, malformed.{probe.name}]"
        what = f"{probe.text}: what the kernel does"
        if f is None:
            rows.append(Row(row_id, _subject(prep, name), what, "probe", MATCHED,
                            "in bounds, terminates, and equal to the guarded semantics",
                            replay=json.loads(case.to_json()), seconds=seconds))
            continue
        cex = {"finding": f.kind, **{k: f.where[k] for k in ("access", "line", "block", "thread") if k in f.where}}
        printed = f"; the kernel printed {f.printed[0]!r}" if f.printed else ""
        rows.append(Row(row_id, _subject(prep, name), what, "probe", UNGUARDED,
                        f"{f.kind}: {f.message}{printed} ({seconds * 1000:.0f} ms); replay: "
                        f"{replay_command(prep.root, name, case)}",
                        counterexample=cex, replay=json.loads(case.to_json()), seconds=seconds,
                        evidence=f"{f.kind}: {f.message}{printed}"))
    return rows


def _random_malformed_row(prep: Prepared, session: Session, name: str, examples: int, seed: int) -> Row:
    kernel = prep.kernels[name]
    counts: dict[str, int] = {}
    first: dict[str, object] = {}

    def check(case):
        f = run_case(session, kernel, case, malformed=True)
        kind = f.kind if f else "same as guarded"
        counts[kind] = counts.get(kind, 0) + 1
        if f is not None and case.bs:
            first.setdefault(kind, (case, f))

    t0 = time.perf_counter()
    res = run_property(f"audit.cuda.{name}.malformed", check,
                       sst.tree_cases(malformed=True, modes=KERNEL_MODES[name], max_bs=4), max_examples=examples,
                       seed=seed, use_database=False)
    seconds = time.perf_counter() - t0
    row_id = f"{ROW[name][:-1]}, malformed.random]"
    what = "random malformed batches (Hypothesis malformed_tree: missing parents, cycles, bad slots, ...)"
    tally = ", ".join(f"{v} {k}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    method = f"Hypothesis ({res.examples} batches, seed {seed})"
    pick = next((first[k] for k in ("hang", "oob", "ub", "crash", "diverged") if k in first), None)
    if pick is None:
        return Row(row_id, _subject(prep, name), what, method, MATCHED if res.examples else ERROR,
                   f"{tally}; {1000 * seconds / max(res.examples, 1):.0f} ms per batch", seconds=seconds)
    case, f = pick
    return Row(row_id, _subject(prep, name), what, method, UNGUARDED,
               f"{tally}; {1000 * seconds / max(res.examples, 1):.0f} ms per batch; first {f.kind} (not shrunk: "
               f"the probes above are the minimal trees): {f.message}; replay: "
               f"{replay_command(prep.root, name, case)}",
               counterexample={"finding": f.kind}, replay=json.loads(case.to_json()), seconds=seconds,
               evidence=f"{tally}; first {f.kind}: {f.message}")


# --- 32-bit offsets -------------------------------------------------------------------------------

def wrap_case(n: int, seq_len: int):
    """One request at the smallest wrapping seq_len, a serving-shaped tree (K=4, D=5), and
    no prefix fill (sglang's ``fill_prefix_mask=False``: the kernel alone touches the mask)."""
    import numpy as np

    sel, pl = random_draft_tree(np.random.default_rng(0), 4, 5, n)
    return TreeCase(topk=4, depth=5, num_draft_tokens=n, mode=int(FULL), max_context_len=seq_len,
                    seq_lens=[seq_len], selected_index=[sel], parent_list=[pl], fill_prefix_mask=False)


def _wrap_row(prep: Prepared, session: Session | None) -> Row:
    t0 = time.perf_counter()
    name = "build_tree_efficient"
    what = ("the smallest bs, n, seq_len at which the kernels' int offsets wrap (from the spec's cells, proved "
            "with the trusted core), next to the host wrapper's checks; the smallest FULL_MASK case run")
    bounds = offsets.bounds()
    host = source.find_host_wrapper(prep.root, HOST_WRAPPER)
    if host is None:
        checks = f"no host wrapper `{HOST_WRAPPER}` found"
    else:
        listed = "; ".join(host[1]) or "none"
        checks = (f"host wrapper {host[0].relative_to(prep.root).as_posix()} checks: {listed} (the mask bound is a "
                  f"lower bound for QLEN_ONLY/BITPACKING only; nothing bounds FULL_MASK or 2^31)")
    parts = [offsets.describe(w) + ("" if w.proved else " [computed]") for w in bounds]
    full = bounds[0]
    run = "not run (no runnable build_tree_efficient)"
    status, cex, replay, evidence = UNGUARDED, None, None, ""
    if session is not None and name in prep.kernels:
        case = wrap_case(full.n, full.seq_len)
        out = session.run(make_launch(prep.kernels[name], case, prefilled(case, "sglang", mask=False)))
        replay = json.loads(case.to_json())
        if out.ok:
            status = MATCHED
            run = (f"run at bs = 1, n = {full.n}, seq_len = {full.seq_len:,} (mask lazily mapped at its exact "
                   f"{full.mask_bytes:,} bytes): no wrap, no sanitizer report: the offsets are wider than int")
        else:
            cex = {"finding": out.kind, **{k: out.where[k] for k in ("line", "access") if k in out.where}}
            evidence = f"{out.kind} at seq_len = {full.seq_len:,}, n = {full.n}: {out.message}"
            run = (f"run at bs = 1, n = {full.n}, seq_len = {full.seq_len:,} (mask lazily mapped at its exact "
                   f"{full.mask_bytes:,} bytes, {out.seconds:.1f} s): {out.kind}: {out.message} (replay: "
                   f"{replay_command(prep.root, name, case)})")
    not_run = "; ".join(parts[1:])
    return Row("kernel.build_tree[cuda, int32]", _subject(prep, name), what, "z3 (core.check) + probe", status,
               f"sglang relies on mask offsets < 2^31 (spec VM-INT32-SAFE) without a host check. Smallest "
               f"wrap: {parts[0]}; {run}. Not run (computed bounds): {not_run}. {checks}",
               counterexample=cex, replay=replay, seconds=time.perf_counter() - t0, evidence=evidence)


# --- the entry point --------------------------------------------------------------------------------

def check_cuda_tree(index, report: AuditReport, examples: int, seed: int) -> None:
    """Add the CUDA tree-build rows for the sglang at ``index.root``; never raises (a
    failure of the harness itself is an ``error`` row)."""
    try:
        _check(index, report, examples, seed)
    except Exception as e:  # noqa: BLE001 - the remaining audit checks must still run
        report.add(Row("kernel.build_tree[cuda].harness", "build_tree_efficient (CUDA)", "the CUDA-on-CPU "
                       "harness", "-", ERROR, f"{type(e).__name__}: {e}"))


def _check(index, report: AuditReport, examples: int, seed: int) -> None:
    t0 = time.perf_counter()
    prep = prepare(index.root)
    for name in KERNEL_MODES:
        if name in prep.problems:
            status, detail = prep.problems[name]
            report.add(Row(ROW[name], _subject(prep, name), "the CUDA tree build, on the CPU under ASan/UBSan",
                           "-", status, detail, seconds=time.perf_counter() - t0))
    if not prep.libraries:
        return
    sessions = {id(lib): Session(lib) for lib in prep.libraries.values()}
    try:
        for name in KERNEL_MODES:
            if name in prep.kernels:
                session = sessions[id(prep.libraries[name])]
                report.add(_valid_row(prep, session, name, examples, seed))
                for row in _probe_rows(prep, session, name):
                    report.add(row)
                report.add(_random_malformed_row(prep, session, name, max(1, examples // 2), seed + 1))
        wrap_lib = prep.libraries.get("build_tree_efficient")
        report.add(_wrap_row(prep, sessions[id(wrap_lib)] if wrap_lib else None))
    finally:
        for session in sessions.values():
            session.close()
