"""The audit as SARIF 2.1.0 (``specbound audit sglang|vllm --sarif PATH``), for GitHub code scanning.

One result per row whose status kind has a SARIF level in :mod:`.statuses` (findings ``error``,
unguarded conditions ``warning``); its rule is the status, its location the row's file and line
(:func:`.report.location`), relative to the audited engine's package (``uriBaseId``
``<ENGINE>_ROOT``, e.g. ``SGLANG_ROOT``, which ``originalUriBaseIds`` maps to the package folder).
A repository that holds the engine's source elsewhere (``python/sglang/`` in sglang's own) maps
that base id, or rewrites the prefix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import statuses as st
from .report import AuditReport, Row, cex_text, location

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def rule_id(status: str) -> str:
    return "specbound/" + status.replace(" ", "-")


def _level(row: Row) -> str | None:
    return st.SARIF_LEVEL[row.kind]


def _result(row: Row, rule_index: int, where_of, base: str) -> dict[str, Any]:
    text = f"{row.id}: {row.check}. {row.detail}".strip()
    evidence = row.evidence or cex_text(row)
    if evidence and evidence not in text:
        text += f" Evidence: {evidence}"
    result: dict[str, Any] = {
        "ruleId": rule_id(row.status), "ruleIndex": rule_index, "level": _level(row),
        "message": {"text": text},
        "partialFingerprints": {"specboundRow/v1": row.id},
        "properties": {"row": row.id, "subject": row.subject, "method": row.method, "kind": row.kind},
    }
    # Code scanning shows a result on a file and line; a row that names none is put on the
    # package's __init__.py, line 1 (the package as a whole).
    where = where_of(row) or ("__init__.py", 1)
    result["locations"] = [{"physicalLocation": {
        "artifactLocation": {"uri": where[0], "uriBaseId": base},
        "region": {"startLine": max(where[1], 1)}}}]
    if row.replay_command:
        result["properties"]["replay"] = row.replay_command
    return result


def sarif_log(rows: list, version: str, *, base: str, root: str | None, exit_code: int, successful: bool,
              properties: dict, where_of=location) -> dict[str, Any]:
    """A SARIF log of audit ``rows`` (any engine's): one result per row whose status kind has a
    level, located by ``where_of(row)`` (file relative to ``root``, line) under the base id
    ``base``; ``version`` is specbound's."""
    rows = [r for r in rows if _level(r) is not None]
    used = list(dict.fromkeys(r.status for r in rows))
    rules = [{"id": rule_id(name), "name": name.title().replace(" ", ""),
              "shortDescription": {"text": f"{name}: {st.status(name).words}"},
              "defaultConfiguration": {"level": st.SARIF_LEVEL[st.status(name).kind]},
              "properties": {"kind": st.status(name).kind}} for name in used]
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "specbound", "version": version, "rules": rules}},
        "results": [_result(r, used.index(r.status), where_of, base) for r in rows],
        "invocations": [{"executionSuccessful": successful, "exitCode": exit_code}],
        "properties": properties,
    }
    if root:
        run["originalUriBaseIds"] = {base: {"uri": Path(root).resolve().as_uri() + "/"}}
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}


def to_sarif(report: AuditReport, version: str) -> dict[str, Any]:
    """The SARIF log of an audit ``report``; ``version`` is specbound's."""
    return sarif_log(report.rows, version, base=f"{report.engine.upper()}_ROOT", root=report.path,
                     exit_code=report.exit_code(), successful=not report.fatal,
                     properties={report.engine: report.version, "summary": report.kind_counts()})


def write_sarif(report: AuditReport, path: str, version: str) -> None:
    write_log(to_sarif(report, version), path)


def write_log(log: dict, path: str) -> None:
    Path(path).write_text(json.dumps(log, indent=2) + "\n")
