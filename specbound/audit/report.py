"""Rows of an audit report, and the text / Markdown / JSON renderings (SARIF: :mod:`.sarif`).

The statuses a row may carry, their kinds (finding, unguarded condition, warning, not checked,
pass) and their words are one table, :mod:`specbound.audit.statuses`; the exit code, the
summary, the sections of the text and ``--strict`` are read from it.

Symbolic proof rows (``kernel.symbolic_proof[...]``) are ``proved`` (the detail names the host
contract, the specializations and the preconditions the engine leaves unchecked, with their
counterexamples) or ``refuted``.  Buffer rows (``buffer.*``: an allocation that reaches a
kernel) are ``matched``, ``overrun``, ``holds only if`` or ``unknown``.

Consumer rows (``consumer.*``: a buffer judged against what a reader or a torch copy touches,
per the spec's consumer contracts, ``spec/consumers.py`` and ``spec/page_table_consumers.py``)
are ``matched``, ``holds only if``, ``overread`` (an attention kernel reads past its row or the
buffer) or ``crash`` (a torch copy
into a too-short slice raises).

Exit status of ``specbound audit <engine>``: 1 when a row is a finding (or, with ``--strict``, an
unguarded condition); 3 when there is none but a check did not run (a ``not checked`` row, or an
explicit path that holds no such engine: nothing audited); 0 otherwise.

Nothing here names an engine: the adapter that runs the audit gives its name (``engine``), which
keys the report's JSON block about the audited package and speaks in the verdicts.  A check that did
not run never reads as a pass, and 3 is not argparse's 2 (a bad command line).
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import asdict, dataclass, field
from typing import Any

from . import statuses as st

MATCHED = "matched"
DIVERGED = "diverged"
OOB = "oob"
HANG = "hang"
UNGUARDED = "unguarded"
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
OVERREAD = "overread"    # a kernel reads past its row or the buffer: wrong results or a fault
CRASH = "crash"          # a torch copy raises at this size: the server dies instead of corrupting
CONSUMER_FINDINGS = (OVERREAD, CRASH)

# The statuses' kinds decide the verdict (statuses.py); these tuples are read from that table.
FAILING = st.names(st.FINDING)            # exit 1
INCOMPLETE = st.names(st.NOT_CHECKED)     # exit 3 when there is no finding
EXIT_FINDING, EXIT_INCOMPLETE = 1, 3
WIDTH = 100   # the terminal rendering's widest line (a file:line: line may be longer only by its path)


@dataclass
class Row:
    id: str                 # stable identifier, e.g. "helper.tree_mask_numel[FULL_MASK]"
    subject: str            # the engine's symbol and where it was found
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
    # The report that shows what happens (a sanitizer's or the checked interpreter's message),
    # when the row has one; shown under the row's file:line in the terminal.
    evidence: str = ""

    def __post_init__(self):
        st.status(self.status)   # raises naming an unknown status

    @property
    def kind(self) -> str:
        return st.status(self.status).kind


_PATH = r"[\w./-]+\.(?:py|cuh|cu|hpp|h|inc)"
_LOCATION = re.compile(rf"({_PATH}):(\d+)")
_AT = re.compile(rf"\bat ({_PATH}):(\d+)")


def location(row: Row) -> tuple[str, int] | None:
    """The file (relative to the engine's package) and line a row points at: the line its evidence
    names ("at FILE:LINE", a sanitizer's or the interpreter's report) in a file of its subject,
    else the first location of its subject, else the first one its detail names."""
    own = _LOCATION.findall(row.subject)
    for path, line in _AT.findall(f"{row.evidence} {row.detail}"):
        for mine, _ in own:
            if mine == path or mine.endswith("/" + path):
                return mine, int(line)
    found = own or _LOCATION.findall(row.detail)
    return (found[0][0], int(found[0][1])) if found else None


@dataclass
class AuditReport:
    path: str | None              # the audited package folder
    version: str | None
    located_by: str | None
    rows: list[Row] = field(default_factory=list)
    seconds: float = 0.0
    examples: int = 0
    seed: int = 0
    fatal: str | None = None      # the audit could not run at all (an explicit path without the engine)
    engine: str = field(kw_only=True)  # the engine audited, as its adapter names it (the JSON key)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def of_kind(self, kind: str) -> list[Row]:
        return [r for r in self.rows if r.kind == kind]

    @property
    def failed(self) -> bool:
        return bool(self.of_kind(st.FINDING))

    @property
    def incomplete(self) -> list[Row]:
        """The rows whose check did not run (or whose buffer was not judged)."""
        return self.of_kind(st.NOT_CHECKED)

    def counts(self) -> dict[str, int]:
        out = {s.name: 0 for s in st.TABLE}
        for r in self.rows:
            out[r.status] += 1
        return {k: v for k, v in out.items() if v}

    def kind_counts(self) -> dict[str, int]:
        return {kind: len(self.of_kind(kind)) for kind in st.KINDS}

    def exit_code(self, strict: bool = False) -> int:
        """1 a finding (``strict``: or an unguarded condition), 3 nothing found but not
        everything checked, 0 otherwise."""
        if self.failed or (strict and self.of_kind(st.UNGUARDED_KIND)):
            return EXIT_FINDING
        if self.fatal or self.incomplete:
            return EXIT_INCOMPLETE
        return 0

    def verdict(self, strict: bool = False) -> tuple[str, str]:
        """The verdict word (OK, FAILED, INCOMPLETE) and its reason, for the last line."""
        n = self.kind_counts()
        unguarded = plural(n[st.UNGUARDED_KIND], "unguarded condition") + " with evidence"
        rc = self.exit_code(strict)
        if self.failed:
            return "FAILED", f"{plural(n[st.FINDING], 'finding')} within {self.engine}'s contract; {unguarded}"
        if rc == EXIT_FINDING:
            return "FAILED", f"--strict: {unguarded}; no finding within {self.engine}'s contract"
        if self.fatal:
            return "INCOMPLETE", f"nothing audited: {self.fatal}"
        if rc == EXIT_INCOMPLETE:
            return "INCOMPLETE", f"no finding, but {plural(n[st.NOT_CHECKED], 'check')} did not run; {unguarded}"
        if n[st.UNGUARDED_KIND]:
            return "OK", f"no finding within {self.engine}'s contract; {unguarded}"
        return "OK", "no finding; every check ran"

    def to_json(self) -> dict[str, Any]:
        rows = []
        for r in self.rows:
            where = location(r)
            rows.append({**asdict(r), "kind": r.kind,
                         "location": {"file": where[0], "line": where[1]} if where else None})
        return {
            self.engine: {"path": self.path, "version": self.version, "located_by": self.located_by},
            "examples": self.examples,
            "seed": self.seed,
            "seconds": round(self.seconds, 2),
            "summary": {"failed": self.failed, "incomplete": [r.id for r in self.incomplete],
                        "counts": self.counts(), "kinds": self.kind_counts(), "fatal": self.fatal,
                        "exit": self.exit_code(), "exit_strict": self.exit_code(strict=True)},
            "rows": rows,
        }

    def write_json(self, path: str) -> None:
        from pathlib import Path

        Path(path).write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def cex_text(row: Row) -> str:
    parts = []
    if row.counterexample:
        parts.append("counterexample: " + ", ".join(f"{k}={v}" for k, v in row.counterexample.items()))
    if row.replay:
        parts.append("replay: " + json.dumps(row.replay, default=str, separators=(",", ":")))
    return "; ".join(parts)


def _header(report: AuditReport) -> str:
    if report.path is None:
        return f"{report.engine}: not found"
    return f"{report.engine} {report.version} at {report.path} (located by {report.located_by})"


def summary_line(report: AuditReport) -> str:
    """The first line: a count per kind (findings, unguarded conditions, warnings, not checked,
    passed), read from the status table."""
    n = report.kind_counts()
    return "summary: " + ", ".join(f"{st.KIND_LABEL[k]}: {n[k]}" for k in st.KINDS)


def _wrap(text: str, indent: str, first: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent + first, subsequent_indent=indent + " " * len(first),
                         break_on_hyphens=False) or [indent + first.rstrip()]


def _trim(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def finding_line(row: Row) -> str:
    """``file:line: status: row id`` (file relative to the engine's package; ``(no file)`` for a row
    that names none)."""
    where = location(row)
    return f"{where[0]}:{where[1]}: {row.status}: {row.id}" if where else f"(no file): {row.status}: {row.id}"


def _evidence(row: Row) -> str:
    text = row.evidence or "; ".join(p for p in (row.detail, cex_text(row)) if p)
    return _trim(" ".join(text.split()), 4 * (WIDTH - 16))


def _section(rows: list[Row], title: str, show_evidence: bool) -> list[str]:
    if not rows:
        return []
    lines = [""] + _wrap(title, "")
    for r in rows:
        lines.append(finding_line(r))
        lines += _wrap(r.check, "    ", "check:    ")
        if show_evidence:
            lines += _wrap(_evidence(r), "    ", "evidence: ")
        elif r.detail:
            lines += _wrap(r.detail, "    ", "detail:   ")
    return lines


SECTIONS = (  # kind, title ({engine}: the report's), evidence shown
    (st.FINDING, "Findings ({n}): {engine} is wrong on an input inside its contract", True),
    (st.UNGUARDED_KIND, "Unguarded conditions ({n}): {engine} relies on a condition it never checks; the "
     "evidence shows what breaking it does (no finding: outside {engine}'s contract)", True),
    (st.NOT_CHECKED, "Not checked ({n}): the check did not run", False),
    (st.WARNING, "Warnings ({n}): nothing to check in this release", False),
)


def buffer_rows(report: AuditReport) -> list[Row]:
    return [r for r in report.rows if r.allocation]


def _buffer_lines(r: Row) -> list[str]:
    lines = [f"{r.id}: {r.status}"]
    for label, value in (("allocated", r.allocation), ("size", r.size), ("required", r.required),
                         ("counterexample", ", ".join(f"{k}={v}" for k, v in (r.counterexample or {}).items())),
                         ("replay", r.replay_command)):
        if value:
            lines += _wrap(value, "  ", f"{label:<10} ")
    return lines


def _table(report: AuditReport) -> list[str]:
    lines = ["", "All checks:"]
    for r in report.rows:
        head = f"{r.id}  {r.status}  [{r.method}]"
        lines += _wrap(head, "") if len(head) > WIDTH else [head]
        for label, text in ((report.engine, r.subject), ("checks", r.check),
                            ("result", "; ".join(p for p in (r.detail, cex_text(r)) if p))):
            if text:
                lines += _wrap(text, "    ", f"{label}: ")
    return lines


def render_text(report: AuditReport) -> str:
    """Summary, then one ``file:line: status: ...`` line per finding, unguarded condition, check
    that did not run and warning (with its evidence), then every row and the buffers, all wrapped
    to :data:`WIDTH` columns.  The verdict line is the command's (:meth:`AuditReport.verdict`)."""
    lines = [summary_line(report)]
    lines += _wrap(f"{plural(len(report.rows), 'row')} in {report.seconds:.1f} s; {_header(report)}; --examples "
                   f"{report.examples}, --seed {report.seed}", "")
    for kind, title, show in SECTIONS:
        rows = report.of_kind(kind)
        lines += _section(rows, title.format(n=len(rows), engine=report.engine) + ":", show)
    lines += _table(report)
    buffers = buffer_rows(report)
    if buffers:
        lines += ["", "Buffers (allocation -> kernel):"]
        for r in buffers:
            lines += _buffer_lines(r)
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: AuditReport) -> str:
    lines = [f"Audited: {_header(report)}; --examples {report.examples}, --seed {report.seed}.", "",
             summary_line(report) + ".", "",
             f"| check | {report.engine} symbol | result | method | detail |", "|---|---|---|---|---|"]
    for r in report.rows:
        detail = r.detail
        extra = cex_text(r)
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
    word, reason = report.verdict()
    lines += ["", f"{word}: {reason}."]
    return "\n".join(lines)
