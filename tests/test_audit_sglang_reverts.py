"""sglang keeps its own registry of buffer fixes it can revert for regression tests
(``srt/debug_utils/pr_fix_toggle.py``: each PR number with the edits that undo it).  Each fix in this
audit's domain, undone in a copy of the installed sglang, must turn its row red; the unpatched
release stays green there.  A fix registered later, or one removed, fails the registry test until
it is classified below (the audit does not silently fall behind sglang's own list)."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.audit.report import MATCHED, AuditReport
from specbound.engines.sglang.bindings import BINDINGS
from specbound.engines.sglang.buffers import check_buffers
from specbound.engines.sglang.expand_scatter import check_expand_scatter
from specbound.engines.sglang.locate import PACKAGE, NotInstalled, locate
from specbound.engines.sglang.req_to_token_row import check_req_to_token_rows

REGISTRY = "srt/debug_utils/pr_fix_toggle.py"
# PR -> (the check that judges it, the row-id prefixes that must turn red when it is undone)
JUDGED = {
    27360: ("expand", ("consumer.expand_page_table[FlashAttentionBackend@srt/layers/attention/flashattention_backend.py:",)),
    # the req_to_token row's page > 1 headroom, in every pool builder that calls sglang's sizing helper
    26972: ("r2t", ("consumer.req_to_token_row_paged[ReqToTokenPool@srt/mem_cache/kv_cache_configurator.py:",
                    "consumer.req_to_token_row_paged[DecodeReqToTokenPool@srt/mem_cache/kv_cache_configurator.py:")),
}
# Registered, but the edits no longer match sglang's source: the sizing they undo moved into
# draft_kv_indices_buffer_width (helper.draft_kv_indices_buffer_width, buffer.draft_kv_indices rows;
# MUT-27338-MISSING-TOPK; the 0.5.12.post1 release test shows the bug itself).  When sglang refreshes
# them, test_stale_reverts_still_do_not_apply fails: move them to JUDGED.
STALE = {27338: "FlashInfer's draft kv_indices graph row without the topk factor",
         27460: "FlashInfer MLA's draft kv_indices graph row without the topk factor"}
NOT_BUFFER_SIZES = {25015: "draft positions advanced in the wrong place (values, not a size)",
                    26329: "the prefill's tail tokens (values, not a size)"}
NOT_JUDGED: dict = {}
CHECKS = {"buffers": lambda index, program, rep: check_buffers(index, rep, replay=False, program=program),
          "expand": lambda index, program, rep: check_expand_scatter(program, rep, replay=False),
          "r2t": lambda index, program, rep: check_req_to_token_rows(program, rep, replay=False)}


def parse_reverts(source: str) -> dict[int, list[dict]]:
    """PR -> its patches ``{"target", "edits": [{"match", "replacement" | "append" | "prepend"}]}``,
    read from the registry module's YAML strings (the small subset it uses: block scalars, ``""``)."""
    ns: dict = {}
    body = source.split("\ndef ", 1)[0]
    exec(compile("\n".join(l for l in body.splitlines() if not l.startswith(("from ", "import "))), REGISTRY, "exec"), ns)
    return {pr: _patches(text) for pr, text in ns["_PR_FIX_REVERT_YAML"].items()}


def _patches(text: str) -> list[dict]:
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("- target:"):
            out.append({"target": stripped.split(":", 1)[1].strip(), "edits": []})
        elif stripped.lstrip("- ").split(":")[0] in ("match", "replacement", "append", "prepend"):
            key, value = stripped.lstrip("- ").split(":", 1)
            column = len(lines[i]) - len(lines[i].lstrip()) + (2 if stripped.startswith("- ") else 0)
            block = []
            if value.strip() == "|":
                while i + 1 < len(lines) and (not lines[i + 1].strip()
                                              or len(lines[i + 1]) - len(lines[i + 1].lstrip()) > column):
                    i += 1
                    block.append(lines[i])
                value = textwrap.dedent("\n".join(block)).strip("\n")
            else:
                value = value.strip().strip('"')
            if key == "match":
                out[-1]["edits"].append({"match": value})
            else:
                out[-1]["edits"][-1][key] = value
        i += 1
    return out


def _source_file(root: Path, target: str) -> Path:
    parts = target.split(".")[1:]   # drop the package name
    for k in range(len(parts), 0, -1):
        path = root.joinpath(*parts[:k]).with_suffix(".py")
        if path.is_file():
            return path
    raise AssertionError(f"no source file for {target}")


def _hits(lines: list[str], want: list[str]) -> list[tuple[int, str]]:
    """(line, indentation) of every place ``want`` (dedented lines) occurs in ``lines``."""
    hits = []
    for i in range(len(lines) - len(want) + 1):
        indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
        if all((lines[i + j] == indent + w) if w else not lines[i + j].strip() for j, w in enumerate(want)):
            hits.append((i, indent))
    return hits


def undo(root: Path, patches: list[dict]) -> None:
    """Apply the registry's edits to the sources under ``root``: each match must occur exactly once
    (at any indentation); a planted change that matches nothing checks nothing."""
    for patch in patches:
        path = _source_file(root, patch["target"])
        lines = path.read_text().splitlines()
        for edit in patch["edits"]:
            want = edit["match"].splitlines()
            hits = _hits(lines, want)
            assert len(hits) == 1, f"{patch['target']}: the edit matches {len(hits)} times: {edit['match']!r}"
            i, indent = hits[0]
            moved = lambda text: [indent + t if t else t for t in text.splitlines()]  # noqa: E731
            if "replacement" in edit:
                lines[i:i + len(want)] = moved(edit["replacement"])
            elif "append" in edit:
                lines[i + len(want):i + len(want)] = moved(edit["append"])
            else:
                lines[i:i] = moved(edit["prepend"])
        path.unlink()   # a hard link of the installed file: write a new one
        path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def installed() -> Path:
    try:
        root = locate().root
    except NotInstalled:
        pytest.skip("sglang is not installed")
    if not (root / REGISTRY).is_file():
        pytest.skip("this sglang has no fix registry")
    return root


def _copy(root: Path, dest: Path) -> Path:
    """The package's .py files, hard-linked (the patched file is replaced, never written through)."""
    shutil.copytree(root, dest / PACKAGE, copy_function=os.link,
                    ignore=lambda d, names: [n for n in names if not n.endswith(".py") and not (Path(d) / n).is_dir()])
    return dest / PACKAGE


def _rows(pkg: Path, check: str) -> dict:
    index = SourceIndex(pkg)
    rep = AuditReport(str(pkg), "revert", "test", engine=BINDINGS.engine)
    CHECKS[check](index, Program(index, PACKAGE), rep)
    return {r.id: r for r in rep.rows}


def test_every_registered_fix_is_classified(installed):
    registered = set(parse_reverts((installed / REGISTRY).read_text()))
    assert registered == set(JUDGED) | set(STALE) | set(NOT_BUFFER_SIZES) | set(NOT_JUDGED), registered


@pytest.mark.parametrize("pr", sorted(JUDGED))
def test_undoing_a_registered_fix_turns_its_row_red(installed, tmp_path, pr):
    check, prefixes = JUDGED[pr]
    before = _rows(installed, check)
    pkg = _copy(installed, tmp_path)
    undo(pkg, parse_reverts((installed / REGISTRY).read_text())[pr])
    after = _rows(pkg, check)
    for prefix in prefixes:
        old = [r for i, r in before.items() if i.startswith(prefix)]
        new = [r for i, r in after.items() if i.startswith(prefix)]
        assert old and all(r.status == MATCHED for r in old), [(r.id, r.status) for r in old]
        assert new and any(r.status != MATCHED and r.kind == "finding" for r in new), \
            [(r.id, r.status, r.detail[:200]) for r in new]


@pytest.mark.parametrize("pr", sorted(STALE))
def test_stale_reverts_still_do_not_apply(installed, pr):
    patches = parse_reverts((installed / REGISTRY).read_text())[pr]
    lines = {str(p): _source_file(installed, p["target"]).read_text().splitlines() for p in patches}
    assert not all(_hits(lines[str(p)], e["match"].splitlines()) for p in patches for e in p["edits"]), STALE[pr]
