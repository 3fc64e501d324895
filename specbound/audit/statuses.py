"""The audit's status vocabulary, in one table: every status a row may carry, the kind it belongs
to, and what it means in words.  The exit code, the summary, the terminal sections, the SARIF
levels and ``--strict`` are all read from the kinds, so a new status is one line here.

Kinds (what a status does to the verdict):

* ``pass``: the check ran and the engine agrees with the spec.
* ``finding``: the engine is wrong on an input inside the spec's (and its own) contract: exit 1.
* ``unguarded``: the engine relies on a condition it never checks; the row carries the evidence of
  what breaking it does (a sanitizer or checked-interpreter report, a counterexample).  No
  finding within the engine's contract, so exit 0, unless ``--strict`` (exit 1).
* ``warning``: nothing to check in this release (the code is not there); exit 0.
* ``not checked``: the check did not run, or its buffer was not judged: exit 3 (no finding, but
  an incomplete audit never reads as a pass).
"""

from __future__ import annotations

from dataclasses import dataclass

PASS, FINDING, UNGUARDED_KIND, WARNING, NOT_CHECKED = "pass", "finding", "unguarded", "warning", "not checked"
KINDS = (FINDING, UNGUARDED_KIND, NOT_CHECKED, WARNING, PASS)   # the summary's and the sections' order
# How each kind reads in the summary, and its SARIF level (None: not a SARIF result).
KIND_LABEL = {FINDING: "findings", UNGUARDED_KIND: "unguarded conditions", WARNING: "warnings",
              NOT_CHECKED: "not checked", PASS: "passed"}
SARIF_LEVEL = {FINDING: "error", UNGUARDED_KIND: "warning", WARNING: None, NOT_CHECKED: None, PASS: None}


@dataclass(frozen=True)
class Status:
    name: str     # as the rows, the JSON and the SARIF rule ids spell it
    kind: str     # one of KINDS
    words: str    # what a row with this status says, for the docs and the SARIF rule

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"status {self.name!r}: kind {self.kind!r} is not one of {KINDS}")


TABLE = (
    Status("matched", PASS, "the check ran and the engine agrees with the spec"),
    Status("proved", PASS, "the engine's kernel proved for every input of its host contract (symbolic execution)"),
    Status("diverged", FINDING, "the engine disagrees with the spec; the smallest counterexample found is attached"),
    Status("oob", FINDING, "the engine's kernel accessed memory outside its tensors on an input inside the spec's "
           "preconditions; the replay case reproduces it"),
    Status("hang", FINDING, "a kernel launch did not finish within its step budget on an input inside the spec's "
           "preconditions; the replay case reproduces it"),
    Status("overrun", FINDING, "a buffer too small under the spec's stated preconditions (Z3 counterexample, "
           "replayed as an out-of-bounds store on the engine's kernel)"),
    Status("holds only if", FINDING, "a buffer too small for the spec's contract, large enough only under one "
           "extra condition the engine does not check (named in the row)"),
    Status("overread", FINDING, "an attention kernel (or the draft decode's kv build) reads past its row or the "
           "buffer for the metadata it is given (a consumer contract, spec/consumers.py, "
           "spec/page_table_consumers.py or spec.kv_req_to_token_read_end): wrong results or an illegal address"),
    Status("crash", FINDING, "a torch copy into the buffer raises at this size: the server dies instead of "
           "corrupting memory"),
    Status("refuted", FINDING, "a property of the engine's kernel is false on an input of its own contract "
           "(symbolic counterexample, replayed on the kernel)"),
    Status("unguarded", UNGUARDED_KIND, "the engine relies on a condition it never checks (outside its contract); "
           "the evidence shows what breaking it does"),
    Status("not present", WARNING, "this release of the engine has no such code (moved away, renamed, removed)"),
    Status("unknown signature", NOT_CHECKED, "the function exists but its parameters are not ones the audit knows"),
    Status("unavailable", NOT_CHECKED, "the check cannot run here (no executor, no compiler, no Triton)"),
    Status("unknown", NOT_CHECKED, "a buffer whose size or origin could not be traced (the row names where the "
           "trail ended)"),
    Status("error", NOT_CHECKED, "the check itself failed to run, or the audit's own machinery failed; never "
           "blamed on the engine"),
)
BY_NAME = {s.name: s for s in TABLE}


def status(name: str) -> Status:
    """The status called ``name``; a ValueError names an unknown one."""
    found = BY_NAME.get(name)
    if found is None:
        raise ValueError(f"unknown status {name!r}; the statuses are {', '.join(BY_NAME)}")
    return found


def names(kind: str) -> tuple[str, ...]:
    """The statuses of one kind, in table order."""
    return tuple(s.name for s in TABLE if s.kind == kind)


def markdown() -> str:
    """The table as Markdown (docs/audit-sglang.md keeps a copy, checked by a test)."""
    lines = ["| status | kind | exit | means |", "|---|---|---|---|"]
    exits = {PASS: "0", FINDING: "1", UNGUARDED_KIND: "0 (1 with `--strict`)", WARNING: "0", NOT_CHECKED: "3"}
    lines += [f"| `{s.name}` | {s.kind} | {exits[s.kind]} | {s.words} |" for s in TABLE]
    return "\n".join(lines)
