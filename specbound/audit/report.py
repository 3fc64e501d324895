"""Rows of an audit report, and the text / Markdown / JSON renderings.

Statuses (what a row may say):

* ``matched``: the check ran and sglang agrees with the spec.
* ``diverged``: sglang disagrees with the spec; ``counterexample`` holds the smallest
  input found (and ``replay`` the full case for a kernel run).
* ``oob``: sglang's Triton kernel accessed memory outside its tensors on an input
  inside the spec's preconditions; ``replay`` reproduces it.
* ``hang``: a kernel launch did not finish within its step budget on an input inside
  the spec's preconditions (a loop that never ends); ``replay`` reproduces it.
* ``unchecked``: sglang relies on a precondition it does not check (or does not guard
  against malformed input); the row says what happens when it is broken.
* ``not present``: this sglang has no such function (moved away, renamed, removed).
* ``unknown signature``: the function exists but its parameters are not ones the audit knows.
* ``unavailable``: the check cannot run here (no executor, CUDA-only code, no Triton).
* ``error``: the check itself failed to run, or the audit's own machinery (a stand-in, an
  unsupported construct) failed; never blamed on sglang (the detail says why).

Symbolic proof rows (``kernel.symbolic_proof[...]``: sglang's own Triton kernel proved by the
symbolic executor):

* ``proved``: proved for every input of its host contract (the detail names the contract,
  the specializations and the preconditions sglang leaves unchecked, with their
  counterexamples).
* ``refuted``: a property of the sglang code is false on an input of its own contract;
  the counterexample is replayed on sglang's code.

Buffer rows (``buffer.*``: an allocation that reaches a kernel, judged against the spec):

* ``overrun``: Z3 refuted the allocation under the spec's stated preconditions; the
  counterexample was replayed on sglang's kernel into a buffer of that size.
* ``holds only if``: refuted, but proved under one extra condition sglang does not check
  (the detail names it); the counterexample is the one without it.
* ``unknown``: the size (or the buffer's origin) could not be traced: the detail says
  which name is unbound or where the trail ended.

Consumer rows (``consumer.*``: a buffer judged against what a reader or a torch copy touches,
per the spec's consumer contracts, ``spec/consumers.py``): ``matched``, ``holds only if``,
``overread`` (an attention kernel reads past its row or the buffer) and ``crash`` (a torch
copy into a too-short slice raises).

Exit status of ``specbound audit sglang``:

* 1, a finding: a row is ``diverged``, ``oob``, ``hang``, ``overrun``, ``overread``, ``crash``,
  ``refuted`` or ``holds only if`` (a buffer refuted under the spec's contract, safe only under a condition sglang
  does not check: sglang #29450's FULL_MASK custom mask, shipped in 0.5.3.post2 to 0.5.16);
* 3, incomplete: no finding, but the audit did not check everything it should: an explicit
  ``--sglang-path`` that holds no sglang (nothing audited), or a row ``error`` (a check
  failed to run), ``unknown`` (a buffer not traced to a size), ``unknown signature`` or
  ``unavailable`` (a check that cannot run here).  A check that did not run never reads as
  a pass, and 3 is not argparse's 2 (a bad command line);
* 0 otherwise: ``matched``, ``proved``, ``not present`` (the release has no such code) and
  ``unchecked`` (a precondition sglang leaves to its caller, with what breaking it does) only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

MATCHED = "matched"
DIVERGED = "diverged"
OOB = "oob"
HANG = "hang"
UNCHECKED = "unchecked"
NOT_PRESENT = "not present"
UNKNOWN_SIGNATURE = "unknown signature"
UNAVAILABLE = "unavailable"
ERROR = "error"
OVERRUN = "overrun"
HOLDS_ONLY_IF = "holds only if"
UNKNOWN = "unknown"
PROVED = "proved"
REFUTED = "refuted"
# Consumer rows (`consumer.*`): what a reader or a torch copy of a buffer does past its end.
OVERREAD = "overread"    # an attention kernel reads past its row or the buffer: wrong results or a fault
CRASH = "crash"          # a torch copy raises at this size: the server dies instead of corrupting
CONSUMER_FINDINGS = (OVERREAD, CRASH)

FAILING = (DIVERGED, OOB, HANG, OVERRUN, REFUTED, HOLDS_ONLY_IF, *CONSUMER_FINDINGS)
INCOMPLETE = (ERROR, UNKNOWN, UNKNOWN_SIGNATURE, UNAVAILABLE)   # a check that did not run, or a buffer not judged
EXIT_FINDING, EXIT_INCOMPLETE = 1, 3
STATUSES = (MATCHED, PROVED, DIVERGED, OOB, HANG, OVERRUN, *CONSUMER_FINDINGS, REFUTED, HOLDS_ONLY_IF, UNCHECKED, NOT_PRESENT,
            UNKNOWN_SIGNATURE, UNAVAILABLE, UNKNOWN, ERROR)


@dataclass
class Row:
    id: str                 # stable identifier, e.g. "helper.tree_mask_numel[FULL_MASK]"
    subject: str            # the sglang symbol and where it was found
    check: str              # what was compared with what
    method: str             # "z3", "grid (N points)", "fuzz (N batches)", "probe", "ast", "-"
    status: str
    detail: str = ""
    counterexample: dict[str, Any] | None = None
    replay: dict[str, Any] | None = None
    seconds: float = 0.0
    # Buffer rows only: the allocation as written, its size, the spec's required extent,
    # and the one-line command that replays the counterexample.
    allocation: str = ""
    size: str = ""
    required: str = ""
    replay_command: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")


@dataclass
class AuditReport:
    sglang_path: str | None
    sglang_version: str | None
    located_by: str | None
    rows: list[Row] = field(default_factory=list)
    seconds: float = 0.0
    examples: int = 0
    seed: int = 0
    fatal: str | None = None      # the audit could not run at all (an explicit path without sglang)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    @property
    def failed(self) -> bool:
        return any(r.status in FAILING for r in self.rows)

    @property
    def incomplete(self) -> list[Row]:
        """The rows whose check did not run (or whose buffer was not judged)."""
        return [r for r in self.rows if r.status in INCOMPLETE]

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for r in self.rows:
            out[r.status] += 1
        return {k: v for k, v in out.items() if v}

    def exit_code(self) -> int:
        if self.failed:
            return EXIT_FINDING
        if self.fatal or self.incomplete:
            return EXIT_INCOMPLETE
        return 0

    def to_json(self) -> dict[str, Any]:
        return {
            "sglang": {"path": self.sglang_path, "version": self.sglang_version, "located_by": self.located_by},
            "examples": self.examples,
            "seed": self.seed,
            "seconds": round(self.seconds, 2),
            "summary": {"failed": self.failed, "incomplete": [r.id for r in self.incomplete],
                        "counts": self.counts(), "fatal": self.fatal, "exit": self.exit_code()},
            "rows": [asdict(r) for r in self.rows],
        }

    def write_json(self, path: str) -> None:
        from pathlib import Path

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")


def _cex_text(row: Row) -> str:
    parts = []
    if row.counterexample:
        parts.append("counterexample: " + ", ".join(f"{k}={v}" for k, v in row.counterexample.items()))
    if row.replay:
        parts.append("replay: " + json.dumps(row.replay, default=str, separators=(",", ":")))
    return "; ".join(parts)


def _header(report: AuditReport) -> str:
    if report.sglang_path is None:
        return "sglang: not found"
    return f"sglang {report.sglang_version} at {report.sglang_path} (located by {report.located_by})"


def _summary(report: AuditReport) -> str:
    counts = ", ".join(f"{v} {k}" for k, v in report.counts().items())
    if report.failed:
        verdict = ("FAILED (divergence, out-of-bounds access, hang, buffer overrun or one safe only under an "
                   "unchecked condition, or refuted proof)")
    elif report.fatal:
        verdict = f"INCOMPLETE: nothing audited: {report.fatal}"
    elif report.incomplete:
        verdict = ("INCOMPLETE: no finding, but these checks did not run (or their buffer was not judged): "
                   + ", ".join(r.id for r in report.incomplete))
    else:
        verdict = "OK (no divergence, no OOB, no hang, no overrun, no refuted proof; every check ran)"
    return f"{len(report.rows)} rows: {counts}; {report.seconds:.1f} s; {verdict}"


def buffer_rows(report: AuditReport) -> list[Row]:
    return [r for r in report.rows if r.allocation]


def _buffer_lines(r: Row) -> list[str]:
    lines = [f"{r.id}: {r.status}", f"  allocated  {r.allocation}", f"  size       {r.size}",
             f"  required   {r.required}"]
    if r.counterexample:
        lines.append("  counterexample " + ", ".join(f"{k}={v}" for k, v in r.counterexample.items()))
    if r.replay_command:
        lines.append(f"  replay     {r.replay_command}")
    return lines


def render_text(report: AuditReport) -> str:
    lines = [_header(report), ""]
    w_id = max([len(r.id) for r in report.rows] + [5])
    w_st = max([len(r.status) for r in report.rows] + [6])
    w_me = max([len(r.method) for r in report.rows] + [6])
    lines.append(f"{'check'.ljust(w_id)}  {'result'.ljust(w_st)}  {'method'.ljust(w_me)}  detail")
    lines.append(f"{'-' * w_id}  {'-' * w_st}  {'-' * w_me}  ------")
    for r in report.rows:
        detail = r.detail
        extra = _cex_text(r)
        if extra:
            detail = f"{detail} [{extra}]" if detail else extra
        lines.append(f"{r.id.ljust(w_id)}  {r.status.ljust(w_st)}  {r.method.ljust(w_me)}  {detail}")
    buffers = buffer_rows(report)
    if buffers:
        lines += ["", "Buffers (allocation -> kernel):"]
        for r in buffers:
            lines += _buffer_lines(r)
    lines += ["", _summary(report)]
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: AuditReport) -> str:
    lines = [f"Audited: {_header(report)}; --examples {report.examples}, --seed {report.seed}.", "",
             "| check | sglang symbol | result | method | detail |", "|---|---|---|---|---|"]
    for r in report.rows:
        detail = r.detail
        extra = _cex_text(r)
        if extra:
            detail = f"{detail} <br>{extra}" if detail else extra
        lines.append(f"| `{r.id}` | {_md(r.subject)} | **{r.status}** | {_md(r.method)} | {_md(detail)} |")
    buffers = buffer_rows(report)
    if buffers:
        lines += ["", "| buffer | allocated | size | spec requires | result | counterexample | replay |",
                  "|---|---|---|---|---|---|---|"]
        for r in buffers:
            cex = ", ".join(f"{k}={v}" for k, v in (r.counterexample or {}).items())
            replay = f"`{_md(r.replay_command)}`" if r.replay_command else ""
            lines.append(f"| `{r.id}` | {_md(r.allocation)} | `{_md(r.size)}` | {_md(r.required)} | **{r.status}** "
                         f"| {_md(cex)} | {replay} |")
    lines += ["", _summary(report)]
    return "\n".join(lines)
