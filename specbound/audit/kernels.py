"""An engine's Triton kernels, extracted from its source by name and run under specbound's
checked interpreter: what the engine adapters' kernel audits and replays share (sglang's:
:mod:`specbound.engines.sglang.tree_kernel`, ``.kv_kernel``, ``.buffer_replay``).

Parameters are matched to the audit's values by normalised name (:func:`bind`); a
launch's outcome is a :class:`Finding`; a failing random case is shrunk (requests
dropped, ``seq_len`` lowered) before it is reported (:func:`fuzz_row`).
"""

from __future__ import annotations

import inspect
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from .report import (
    DIVERGED, ERROR, MATCHED, OOB, UNAVAILABLE, UNKNOWN_SIGNATURE, AuditReport, Row,
)
from .extract import Found, SourceIndex

from specbound.proofs import minimise
from specbound.replay import checked_launch

class Unavailable(Exception):
    pass


class Aliases(dict):
    """An engine's other names for the audit's values: whole parameter names (the mapping, after
    normalising) and misspellings fixed inside any name (``respell``: ``(as spelled, meant)``
    pairs), both given by the engine's adapter."""

    def __init__(self, names=(), respell=()):
        super().__init__(names)
        self.respell = tuple(respell)


def value_key(name: str, aliases: dict[str, str]) -> str:
    """The key of the audit's value for a kernel parameter: lower case, no ``_ptr``, the
    engine's misspellings fixed (:attr:`Aliases.respell`), then its other names for it
    (``aliases``)."""
    n = name.lower()
    if n.endswith("_ptr"):
        n = n[:-4]
    for spelled, meant in getattr(aliases, "respell", ()):
        n = n.replace(spelled, meant)
    return aliases.get(n, n)


def bind(found: Found, values: dict[str, Any], aliases: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """:func:`bind_params` on the parameters of the kernel's ``def`` in the source."""
    a = found.node.args
    positional = [*a.posonlyargs, *a.args]
    defaults = {p.arg for p in positional[len(positional) - len(a.defaults):]}
    defaults |= {p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None}
    return bind_params([(p.arg, p.arg in defaults) for p in [*positional, *a.kwonlyargs]], values, aliases)


def jit_params(kernel) -> list[tuple[str, bool]]:
    """``(name, has a default)`` of a ``triton.jit`` function's parameters (compiled or
    interpreted: both keep the Python function as ``fn``)."""
    return [(p.name, p.default is not inspect.Parameter.empty) for p in inspect.signature(kernel.fn).parameters.values()]


def bind_params(params: list[tuple[str, bool]], values: dict[str, Any],
                aliases: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Keyword arguments for the parameters ``(name, has a default)`` by (normalised) name, and
    the parameters without a default that ``values`` has no value for."""
    kwargs, missing = {}, []
    for name, has_default in params:
        key = value_key(name, aliases)
        if key in values:
            kwargs[name] = values[key]
        elif not has_default:
            missing.append(name)
    return kwargs, missing


def triton_env():
    """(triton, tl, specbound.kernels) with the interpreter on, or Unavailable."""
    if "TRITON_INTERPRET" not in os.environ:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        from specbound import kernels as our_kernels
    except ImportError as e:
        raise Unavailable(f"cannot load the checked interpreter: {e}") from None
    if not our_kernels.INTERPRETED:
        raise Unavailable("TRITON_INTERPRET is off in this process: the engine's kernels would be compiled, "
                          "and the checked interpreter applies only to interpreted launches")
    import triton
    import triton.language as tl
    return triton, tl, our_kernels


# --- outcomes -------------------------------------------------------------------------------

@dataclass
class Finding:
    kind: str          # OOB, DIVERGED, ERROR
    message: str


RACE_PREFIX = "two programs of one launch stored one cell"


def record_replay(row: Row, finding: Finding | None, kernel: str, where: str, what: str) -> None:
    """The replay of a row's counterexample on the engine's own ``kernel`` (e.g. "sglang's
    X", defined at ``where``): an out-of-bounds access confirms the row (its message is the
    evidence); anything else means the model and the kernel disagree, and the row is an error."""
    row.method = "z3 + checked interpreter"
    if finding is not None and finding.kind == OOB:
        row.detail += f"; replayed: {kernel} ({where}) {what}: {finding.message}"
        row.evidence = finding.message
        return
    row.detail += f"; the replay on {kernel} did not go out of bounds ({finding.message if finding else 'clean'})"
    row.status = ERROR   # the model says it goes past the buffer, the kernel does not: the model is off


def launch_finding(launch: Callable[[], object], session_out: list | None = None) -> Finding | None:
    """One launch of an engine's kernel, run and its faults classified by
    :func:`specbound.replay.checked_launch` (a crash is caught: it is a finding, not a
    traceback): an out-of-bounds access is ``OOB``, two programs storing one cell
    ``DIVERGED``, a failed assert, Triton's int32 overflow check or a crash ``ERROR``; None
    when it ran clean.  ``session_out`` receives the session (its footprint)."""
    fault = checked_launch(launch, catch_errors=True, session_out=session_out)
    if fault is None:
        return None
    if fault.verdict == "oob":
        return Finding(OOB, fault.detail)
    if fault.verdict == "race":
        return Finding(DIVERGED, f"{RACE_PREFIX}: {fault.detail}")
    return Finding(ERROR, fault.detail)


def first_diff(name, got, want, n=None, *, engine: str):
    """The first cell where the engine's output ``got`` differs from the spec's ``want``, as a
    detail naming both (``engine``: the engine's name), or None when they agree."""
    g, w = got.reshape(-1), want.reshape(-1)
    bad = (g != w).nonzero().reshape(-1)
    if bad.numel() == 0:
        return None
    i = int(bad[0])
    where = f"cell {i}" + (f" (request {i // n}, node {i % n})" if n else "")
    return f"{name} {where}: {engine} {g[i].item()}, spec {w[i].item()} ({bad.numel()} cell(s) differ)"


# --- the fuzz loop, defining a kernel ----------------------------------------------------

def _same_kind(finding: Finding | None, kind: str) -> Finding | None:
    return finding if finding is not None and finding.kind == kind else None


def fuzz_row(row_id, subject, what, n_examples, gen, run, smaller, rng_seed, t0, note=""):
    rng = random.Random(rng_seed)
    for i in range(n_examples):
        case = gen(rng)
        f = run(case)
        if f is not None:
            # the failing batch made smaller while it fails the same way (same finding kind)
            kind = f.kind
            case, smaller_f = minimise.greedy(case, smaller, lambda c: _same_kind(run(c), kind))
            f = smaller_f or f
            status = f.kind if f.kind in (OOB, DIVERGED) else ERROR
            return Row(row_id, subject, what, f"fuzz ({i + 1} of {n_examples} batches)", status,
                       f"{f.message}", replay=case, seconds=time.perf_counter() - t0)
    return Row(row_id, subject, what, f"fuzz ({n_examples} batches)", MATCHED,
               f"outputs equal specbound.reference, footprints equal the spec, no OOB{note}",
               seconds=time.perf_counter() - t0)


def define_kernel(index: SourceIndex, report: AuditReport, found: Found, aliases: dict[str, str],
                  known: set[str], row: tuple[str, str, str]):
    """Check that every kernel parameter is one we know how to feed, then define the kernel
    under the interpreter.  Returns ``(kernel, triton.language)`` or adds a row saying why
    not (unknown signature, no triton, kernel that does not define) and returns None."""
    row_id, subject, what = row
    _, missing = bind(found, {}, aliases)
    unknown = [p for p in missing if value_key(p, aliases) not in known]
    if unknown:
        report.add(Row(row_id, subject, what, "-", UNKNOWN_SIGNATURE,
                       f"parameters {found.params()}; no value known for {unknown}"))
        return None
    try:
        triton, tl, our_kernels = triton_env()
        return index.load_kernel(found, triton, tl), our_kernels
    except Unavailable as e:
        report.add(Row(row_id, subject, what, "-", UNAVAILABLE, str(e)))
    except Exception as e:  # noqa: BLE001
        report.add(Row(row_id, subject, what, "-", ERROR, f"cannot define the kernel: {type(e).__name__}: {e}"))
    return None
