"""``sites.draft_kv_capacity_check``: every launch of sglang's draft kv kernel in the source
tree, and whether a host capacity check (``assert_buffer_fits`` or an assert on ``used_len``)
precedes it in the launching function; read with ast, nothing runs."""

from __future__ import annotations

import ast
import time

from specbound.audit.extract import SourceIndex
from specbound.audit.report import MATCHED, NOT_PRESENT, UNGUARDED, AuditReport, Row

from .launch import KV_KERNEL


def check_launch_sites(index: SourceIndex, report: AuditReport) -> None:
    """Every launch of the draft kv kernel should follow a host capacity check (spec.draft_kv_capacity_ok)."""
    t0 = time.perf_counter()
    what = "every launch of generate_draft_decode_kv_indices is preceded by a host capacity check"
    sites = []
    for path in index.files():
        text = index.text(path)
        if f"{KV_KERNEL}[" not in text and "generate_draft_decode_kv_indices\n" not in text:
            continue
        tree = index.tree(path)
        if tree is None:
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            launches = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
                        and KV_KERNEL in ast.unparse(n.func.value)]
            if not launches:
                continue
            calls = {ast.unparse(n.func).split(".")[-1] for n in ast.walk(fn) if isinstance(n, ast.Call)}
            guarded = "assert_buffer_fits" in calls or any(
                isinstance(n, ast.Assert) and "used_len" in ast.unparse(n) for n in ast.walk(fn))
            sites.append((f"{index.rel(path)}:{fn.lineno} {fn.name}", guarded))
    if not sites:
        report.add(Row("sites.draft_kv_capacity_check", KV_KERNEL, what, "ast", NOT_PRESENT,
                       "no launch site found", seconds=time.perf_counter() - t0))
        return
    bare = [s for s, g in sites if not g]
    report.add(Row("sites.draft_kv_capacity_check", f"{len(sites)} launch site(s)", what, "ast",
                   UNGUARDED if bare else MATCHED,
                   (f"{len(sites) - len(bare)} checked; without a check (they rely on draft room): "
                    + "; ".join(bare)) if bare else "; ".join(s for s, _ in sites),
                   seconds=time.perf_counter() - t0))
