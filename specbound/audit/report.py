"""Rows of an audit report, and the text / Markdown / JSON renderings.

Statuses (what a row may say):

* ``matched``: the check ran and sglang agrees with the spec.
* ``diverged``: sglang disagrees with the spec; ``counterexample`` holds the smallest
  input found (and ``replay`` the full case for a kernel run).
* ``oob``: sglang's Triton kernel accessed memory outside its tensors on an input
  inside the spec's preconditions; ``replay`` reproduces it.
* ``unchecked``: sglang relies on a precondition it does not check (or does not guard
  against malformed input); the row says what happens when it is broken.
* ``not present``: this sglang has no such function (moved away, renamed, removed).
* ``unknown signature``: the function exists but its parameters are not ones the audit knows.
* ``unavailable``: the check cannot run here (no executor, CUDA-only code, no Triton).
* ``error``: the check itself failed to run (the detail says why).
* ``proved``: a symbolic proof of the sglang code for every input of its contract (the
  detail names the contract, the specializations and the preconditions sglang leaves
  unchecked, with their counterexamples).
* ``refuted``: a property of the sglang code is false on an input of its own contract;
  the counterexample is replayed on sglang's code.

Only ``diverged``, ``oob`` and ``refuted`` make ``specbound audit sglang`` exit non-zero;
every other status but ``matched`` and ``proved`` is a warning.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

MATCHED = "matched"
DIVERGED = "diverged"
OOB = "oob"
UNCHECKED = "unchecked"
NOT_PRESENT = "not present"
UNKNOWN_SIGNATURE = "unknown signature"
UNAVAILABLE = "unavailable"
ERROR = "error"
PROVED = "proved"
REFUTED = "refuted"

FAILING = (DIVERGED, OOB, REFUTED)
STATUSES = (MATCHED, DIVERGED, OOB, UNCHECKED, NOT_PRESENT, UNKNOWN_SIGNATURE, UNAVAILABLE, ERROR, PROVED, REFUTED)


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

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    @property
    def failed(self) -> bool:
        return any(r.status in FAILING for r in self.rows)

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for r in self.rows:
            out[r.status] += 1
        return {k: v for k, v in out.items() if v}

    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "sglang": {"path": self.sglang_path, "version": self.sglang_version, "located_by": self.located_by},
            "examples": self.examples,
            "seed": self.seed,
            "seconds": round(self.seconds, 2),
            "summary": {"failed": self.failed, "counts": self.counts()},
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
    verdict = "FAILED (divergence or out-of-bounds access)" if report.failed else "OK (no divergence, no OOB)"
    return f"{len(report.rows)} rows: {counts}; {report.seconds:.1f} s; {verdict}"


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
    lines += ["", _summary(report)]
    return "\n".join(lines)
