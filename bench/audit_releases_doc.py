"""docs/audit-releases.md, rendered from the release reports ``bench/audit_releases.py`` saves
(``DATA/<version>.json``) and from nothing else.

A bug class is a family of buffer or consumer rows (``buffer.<kernel>[...]``,
``consumer.<buffer>[...]``: one buffer judged against one kind of writer or reader); one
table per family that has a finding in some release, one line per buffer and site, with the
first and last audited release carrying it.  Families are read from the row ids, so rows of a
new kind appear without a change here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

JUDGED = ("buffer.", "consumer.")       # the row families the bug classes are made of
FINDING, PASS = "finding", "pass"        # row kinds, as the audit's JSON spells them
# What a finding does when sglang runs into it, per status.
EFFECT = {"overrun": "silent corruption: a kernel writes past the buffer",
          "overread": "wrong read: a kernel (attention, or the draft kv build) reads past its row or the buffer (wrong results, "
                      "or an illegal address)",
          "crash": "crash: a torch copy or gather, or a host assert, raises; the server dies",
          "oob": "silent corruption or a fault: a kernel accesses memory outside its tensors",
          "diverged": "wrong values: sglang disagrees with the spec",
          "refuted": "a property of the kernel is false on an input of its contract",
          "hang": "a kernel launch does not finish"}
# What a family's buffer does past a condition it "holds only if": the effect of the family's
# refuted rows in the saved reports; when no audited release has one, the status the audit gives
# a refuted row of the family (buffer rows: a kernel's writes, specbound/audit/buffers.py;
# consumers.py: page tables are read, custom masks copied; verify_kv.py: kv indices written;
# page_table_build.py: page tables written; padded_verify.py: the mask gathered; direct_kv.py: kv
# indices written by a backend's own launch; plan_copy.py: the kv-index stream copied;
# fill_write.py: a page table written by a fill clamped to the batch, not the width; packed_mask.py:
# the host assert before the packer raises; compressed_page_table.py: a page table read;
# clamped_gather.py: a torch gather that raises; block_table_copy.py: a torch copy that raises;
# req_to_token_row.py: the draft kv build reads past the row; req_to_token_reservation.py: the
# decode reservation writes past it).
REFUTED_BY_PREFIX = {"buffer.": "overrun", "consumer.page_table[": "overread", "consumer.custom_mask[": "crash",
                     "consumer.verify_kv_indices[": "overrun", "consumer.page_table_draft_decode[": "overread",
                     "consumer.sparse_page_table[": "overread", "consumer.page_table_write[": "overrun",
                     "consumer.padded_verify_mask[": "crash", "consumer.direct_kv_indices[": "overrun",
                     "consumer.plan_copy[": "crash", "consumer.page_table_fill_write[": "overrun",
                     "consumer.packed_mask[": "crash", "consumer.compressed_page_table[": "overread",
                     "consumer.clamped_gather[": "crash", "consumer.block_table_copy[": "crash",
                     "consumer.req_to_token_row[": "overread", "consumer.req_to_token_row_paged[": "overread",
                     "consumer.req_to_token_reservation[": "overrun",
                     "consumer.req_to_token_reservation_paged[": "overrun"}
SITE = re.compile(r"@([\w./-]+\.py):(\d+)\]$")
# A location inside a row's subject: " (file:line)", " (file:line (moved))", " at file:line".
_AT_LINE = re.compile(r" \([\w./-]+\.(?:py|cuh):\d+(?: \(moved\))?\)| at [\w./-]+\.(?:py|cuh):\d+")


# --- saved reports ---------------------------------------------------------------------------

def version_key(v: str):
    nums = re.findall(r"\d+", v)
    return tuple(int(x) for x in nums) + ((0,) if "post" not in v else ())


def load(data: Path) -> list[dict]:
    """Every saved release record, oldest first."""
    records = [json.loads(p.read_text()) for p in data.glob("*.json")]
    return sorted(records, key=lambda r: version_key(r["version"]))


# --- bug classes -----------------------------------------------------------------------------

def judged_rows(record: dict) -> list[dict]:
    return [r for r in (record.get("report") or {}).get("rows", []) if r["id"].startswith(JUDGED) and "[" in r["id"]]


def family(row_id: str) -> str:
    return row_id.split("[", 1)[0]


def buffer_key(row: dict) -> str:
    """The row id without its call site (``@file:line``): one buffer of one family, whose sites
    move between functions and lines from release to release."""
    return re.sub(r"@[^\]]*\]$", "]", row["id"])


def sites(record: dict, rows: list[dict]) -> list[str]:
    """The functions holding the rows' call sites (``@file:line``), as the record names them."""
    found = []
    for row in rows:
        m = SITE.search(row["id"])
        if m:
            found.append((record.get("sites") or {}).get(row["id"]) or m.group(1))
    return sorted(set(found))


def condition(row: dict) -> str:
    m = re.match(r"holds only if (.+?):", row.get("detail", ""))
    return m.group(1) if m else "a condition sglang does not check"


def refuted_effect(fam: str, records: list[dict]) -> str:
    """What a family's buffer does past its condition: the effect of the refuted rows the family
    has in some release, else of the status REFUTED_BY_PREFIX names for it."""
    seen = sorted({r["status"] for rec in records for r in judged_rows(rec)
                   if family(r["id"]) == fam and r["status"] in EFFECT})
    if not seen:
        seen = [s for p, s in REFUTED_BY_PREFIX.items() if (fam + "[").startswith(p)]
    return " / ".join(EFFECT[s] for s in seen) if seen else \
        "the consumer goes past the buffer (no audited release refutes this family to say how)"


def effect(row: dict, fam_effect: str) -> str:
    if row["status"] == "holds only if":
        return f"when {condition(row)} fails, {fam_effect}"
    return EFFECT.get(row["status"], row["status"])


def per_buffer(record: dict) -> dict[str, list[dict]]:
    """A release's judged rows by buffer (several sites of one buffer are one entry)."""
    out: dict[str, list[dict]] = {}
    for row in judged_rows(record):
        out.setdefault(buffer_key(row), []).append(row)
    return out


def verdict(rows: list[dict]) -> tuple[str, str]:
    """(statuses joined, kind) of one buffer's rows in one release: a finding if one site is."""
    kinds = {r["kind"] for r in rows}
    kind = FINDING if FINDING in kinds else PASS if kinds == {PASS} else "other"
    return " + ".join(sorted({r["status"] for r in rows})), kind


def classes(records: list[dict]) -> dict[str, dict[str, dict]]:
    """family -> buffer -> {"by_version": {version: statuses}, "kinds": {version: kind}, "rows":
    the newest release's rows of it that are findings, "record": that release} for every buffer
    that is a finding in some release."""
    table: dict[str, dict[str, dict]] = {}
    for rec in records:
        for key, rows in per_buffer(rec).items():
            entry = table.setdefault(family(key), {}).setdefault(key, {"by_version": {}, "kinds": {}})
            entry["by_version"][rec["version"]], entry["kinds"][rec["version"]] = verdict(rows)
            if entry["kinds"][rec["version"]] == FINDING:
                entry["rows"], entry["record"] = [r for r in rows if r["kind"] == FINDING], rec
    return {fam: {k: e for k, e in keys.items() if "rows" in e} for fam, keys in table.items()
            if any("rows" in e for e in keys.values())}


def carried(entry: dict, versions: list[str]) -> tuple[str, str, str]:
    """(first, last, fixed) over the audited versions; *first* says when the releases before it
    did not judge the buffer (a trail the audit could not follow there)."""
    carrying = [v for v in versions if entry["kinds"].get(v) == FINDING]
    first, last = carrying[0], carrying[-1]
    unjudged = []   # the audited releases just before the first finding where the buffer was not judged
    for v in reversed(versions[:versions.index(first)]):
        if entry["kinds"].get(v) != "other":
            break
        unjudged.insert(0, v)
    if unjudged:
        first += f" (not judged in {unjudged[0]}" + (f"–{unjudged[-1]}" if len(unjudged) > 1 else "") + ")"
    later = versions[versions.index(last) + 1:]
    if not later:
        return first, last, "no: the newest audited release carries it"
    nxt = later[0]
    kind = entry["kinds"].get(nxt)
    if kind is None:
        fixed = f"gone in {nxt} (no such buffer)"
    elif kind == PASS:
        fixed = f"yes, {nxt} (`{entry['by_version'][nxt]}`)"
    else:
        fixed = f"{nxt}: `{entry['by_version'][nxt]}` (not judged)"
    return first, last, fixed


# --- the document ----------------------------------------------------------------------------

def _ranges(versions: list[str], present: dict[str, str]) -> str:
    """``0.5.3–0.5.12: overrun; 0.5.13–0.5.23: matched`` over consecutive versions."""
    parts, start, prev, cur = [], None, None, None
    for v in versions + [None]:
        val = present.get(v) if v is not None else object()
        if val != cur:
            if start is not None and cur is not None:
                parts.append(f"{start}" + (f"–{prev}" if prev != start else "") + f": **{cur}**")
            start, cur = v, val
        prev = v
    return "; ".join(parts)


def _consumer(entry: dict) -> str:
    """The newest finding's sites (functions holding them) and its subject without line numbers."""
    row = entry["rows"][0]
    where = ", ".join(f"`{f}`" for f in sites(entry["record"], entry["rows"]))
    return (f"{where}: " if where else "") + _AT_LINE.sub("", row["subject"]).replace("|", "\\|")


def _file(row: dict) -> str:
    loc = row.get("location") or {}
    return f"`{loc['file']}`" if loc.get("file") else "-"


def _effects(entry: dict, fam_effect: str) -> str:
    seen: dict[str, str] = {}
    for row in entry["rows"]:
        seen.setdefault(row["status"], effect(row, fam_effect))
    return "; ".join(seen.values())


def _class_tables(records: list[dict], versions: list[str], found: dict) -> list[str]:
    lines = []
    for fam in sorted(found):
        entries = found[fam]
        statuses = sorted({r["status"] for e in entries.values() for r in e["rows"]})
        fam_effect = refuted_effect(fam, records)
        lines += [f"### `{fam}`: {next(iter(entries.values()))['rows'][0]['check']}", "",
                  f"Finding statuses: {', '.join(f'`{s}`' for s in statuses)}.", "",
                  "| buffer | backend file | consumer (sites in the last release carrying it) | verdicts | first | last "
                  "| fixed | effect |", "|---|---|---|---|---|---|---|---|"]
        for key in sorted(entries):
            e = entries[key]
            first, last, fixed = carried(e, versions)
            lines.append(f"| `{key}` | {_file(e['rows'][0])} | {_consumer(e)} | "
                         f"{_ranges(versions, e['by_version'])} | {first} | {last} | {fixed} | "
                         f"{_effects(e, fam_effect)} |")
        lines.append("")
    return lines


def _release_table(records: list[dict]) -> list[str]:
    statuses = sorted({r["status"] for rec in records for r in judged_rows(rec)})
    lines = ["| version | mode | time (s) | CPU (s) | exit | " + " | ".join(statuses) + " |",
             "|---|---|---|---|---|" + "---|" * len(statuses)]
    for rec in records:
        rows = judged_rows(rec)
        counts = [str(sum(1 for r in rows if r["status"] == s)) for s in statuses]
        err = f" (error: {rec['error'][:80]})" if rec.get("error") else ""
        lines.append(f"| {rec['version']} | {rec.get('mode', 'full')} | {rec['seconds']:.0f} | "
                     f"{rec.get('cpu_seconds', '-')} | {rec['exit']}{err} | " + " | ".join(counts) + " |")
    return lines


def render(records: list[dict], listed: list[str] | None = None) -> str:
    """The document, from the saved release records alone (``listed``: the releases the index
    offers, to name those not audited)."""
    versions = [r["version"] for r in records]
    newest = versions[-1] if versions else None
    found = classes(records)
    modes = sorted({r.get("mode", "full") for r in records})
    lines = ["# sglang releases audited", "",
             "Generated by `python bench/audit_releases.py` from the reports saved in `docs/audit-releases/` "
             "(one per release: `specbound audit sglang --sglang-path ... --json` on the release's wheel, "
             "from `pip download --no-deps`); `python bench/audit_releases.py --check` fails when this page "
             "disagrees with them.  Mode: " + ", ".join(f"`{m}`" for m in modes) + " (`no-kernels`: the helper, "
             "buffer and consumer checks, no per-kernel fuzz, sanitizer or symbolic checks and no replays; the "
             "verdicts are Z3's either way).", ""]
    digests = {}
    for r in records:
        if r.get("sources_sha256"):
            digests.setdefault(r["sources_sha256"], []).append(r["version"])
    shared = [vs for vs in digests.values() if len(vs) > 1]
    if digests:
        lines += [f"Sources: {len(digests)} distinct packages among the {sum(map(len, digests.values()))} "
                  "releases with a digest (sha256 of the unpacked `.py`/`.cuh` files but `version.py`; the audit "
                  "reads any of them): " + (f"equal sources, audited alike: {'; '.join(', '.join(v) for v in shared)}."
                                            if shared else "no release could be skipped as a copy of another."), ""]
    missing = [v for v in (listed or []) if v not in versions]
    lines += [f"Audited: {len(versions)} releases, {versions[0]} to {newest}." if versions else "Audited: none.",
              "Listed on the index but not audited (a class's first or last release is bounded by the audited "
              "ones around these): " + (", ".join(missing) if missing else "none") + ".", ""]
    lines += ["## Bug classes", "",
              "One table per family of buffer or consumer rows (one buffer judged against one kind of writer or "
              "reader) that has a finding in some audited release; one line per buffer (its sites, which move "
              "between functions and lines from release to release, are one line; a release where one site is a "
              "finding carries it).  *first* and *last*: the first and last audited release where it is a "
              "finding; *fixed*: what the next audited release says of it.", ""]
    lines += _class_tables(records, versions, found) if found else ["No finding in any audited release.", ""]
    lines += [f"## What {newest}, the newest audited release, still carries" if newest else "## Newest release", ""]
    still = [(fam, key, e) for fam, keys in sorted(found.items()) for key, e in sorted(keys.items())
             if newest and e["kinds"].get(newest) == FINDING]
    if not still:
        lines += ["No buffer or consumer finding."]
    for fam, key, e in still:
        first, _, _ = carried(e, versions)
        lines.append(f"* `{key}` ({_file(e['rows'][0])}): `{e['by_version'][newest]}`, a finding since {first}: "
                     f"{_effects(e, refuted_effect(fam, records))}.")
    lines += ["", "## Per release", "", "Counts of buffer and consumer rows by status; *time*: wall seconds of the "
              "audit, *CPU*: its user + system seconds (the matrix runs niced on a shared machine, so wall time "
              "says little); *exit*: the audit's, in its mode.", ""]
    lines += _release_table(records)
    lines += ["", "## Every judged buffer, release by release", "",
              "Consecutive releases with the same verdicts (of all its sites) are merged; a buffer absent from a "
              "release has no entry.",
              "", "| row | verdicts |", "|---|---|"]
    matrix: dict[str, dict] = {}
    for rec in records:
        for key, rows in per_buffer(rec).items():
            matrix.setdefault(key, {})[rec["version"]] = verdict(rows)[0]
    for key, by_version in sorted(matrix.items()):
        lines.append(f"| `{key}` | {_ranges(versions, by_version)} |")
    return "\n".join(lines) + "\n"


def write_rows(path: Path | None, records: list[dict]) -> int:
    if path:
        path.write_text(json.dumps([{"version": r["version"], "seconds": r["seconds"], "exit": r["exit"],
                                     "rows": (r.get("report") or {}).get("rows", []),
                                     **({"error": r["error"]} if r.get("error") else {})} for r in records],
                                   indent=1, default=str))
    return 0
