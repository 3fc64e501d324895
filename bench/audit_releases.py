"""The release matrix: audit every sglang 0.5.x release and write docs/audit-releases.md.

    python bench/audit_releases.py [--versions 0.5.3 0.5.9 ...] [--missing] [--kernels] [--examples N]
                                   [--cache DIR] [--data DIR] [--out docs/audit-releases.md]
    python bench/audit_releases.py --render     # the document from the saved reports, no audit
    python bench/audit_releases.py --check      # exit 1 when the document disagrees with them

For each version: ``pip download --no-deps sglang==X`` into the wheel cache (skipped when
the wheel is already there), the wheel's ``sglang/`` sources unpacked next to it (once, by
an atomic rename), then ``specbound audit sglang --sglang-path ... --json ...`` in a fresh
process, timed.  The versions default to every 0.5.x (post releases included) that ``pip index
versions sglang`` lists, or, offline, that the cache holds.  ``--missing`` audits only those without a
saved report (a run cut short resumes there).

Each release's report is saved as ``DATA/<version>.json`` (the audit's own ``--json``
report, unchanged, under ``"report"``, with the run's time, exit status and mode) as soon as
its audit ends; the document is rendered from every saved report and from nothing else, so
``--check`` (and tests/test_audit_releases_doc.py) can tell when the two disagree.

By default the audit runs with ``--no-kernels``: the helper, buffer and consumer checks,
whose rows the bug-class tables are made of, without the per-kernel checks (fuzz, sanitizer,
symbolic proofs, replays), which do not depend on the buffers and cost about 150 s more per
release on 2 cores.  ``--kernels`` runs the whole audit.

A bug class is a family of buffer or consumer rows (``buffer.<kernel>[...]``,
``consumer.<buffer>[...]``: one buffer judged against one kind of writer or reader); one
table per family that has a finding in some release, one line per buffer and site, with the
first and last audited release carrying it.  Families are read from the row ids, so rows of a
new kind appear without a change here.

Exits 1 when the audit of some release did not run to the end (no report, or exit 3: a check
that could not run): findings (exit 1) are what old releases are expected to have, and the
tables show them; an audit that checked nothing must not pass as one of its rows.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = Path(os.environ.get("SPECBOUND_SGLANG_CACHE", Path.home() / ".cache" / "specbound-sglang"))
DEFAULT_DATA = ROOT / "docs" / "audit-releases"
DEFAULT_OUT = ROOT / "docs" / "audit-releases.md"
JUDGED = ("buffer.", "consumer.")       # the row families the bug classes are made of
FINDING, PASS = "finding", "pass"        # row kinds, as the audit's JSON spells them
# What a finding does when sglang runs into it, per status.
EFFECT = {"overrun": "silent corruption: a kernel writes past the buffer",
          "overread": "wrong read: the attention kernel reads past its row or the buffer (wrong results, "
                      "or an illegal address)",
          "crash": "crash: the torch copy raises, the server dies",
          "oob": "silent corruption or a fault: a kernel accesses memory outside its tensors",
          "diverged": "wrong values: sglang disagrees with the spec",
          "refuted": "a property of the kernel is false on an input of its contract",
          "hang": "a kernel launch does not finish"}
# What a family's buffer does past a condition it "holds only if": the effect of the family's
# refuted rows in the saved reports; when no audited release has one, the status the audit gives
# a refuted row of the family (buffer rows: a kernel's writes, specbound/audit/buffers.py;
# consumers.py: page tables are read, custom masks copied; verify_kv.py: kv indices written).
REFUTED_BY_PREFIX = {"buffer.": "overrun", "consumer.page_table[": "overread", "consumer.custom_mask[": "crash",
                     "consumer.verify_kv_indices[": "overrun"}
_SITE = re.compile(r"@([\w./-]+\.py):(\d+)\]$")
# A location inside a row's subject: " (file:line)", " (file:line (moved))", " at file:line".
_AT_LINE = re.compile(r" \([\w./-]+\.(?:py|cuh):\d+(?: \(moved\))?\)| at [\w./-]+\.(?:py|cuh):\d+")


# --- releases ----------------------------------------------------------------------------------

def version_key(v: str):
    nums = re.findall(r"\d+", v)
    return tuple(int(x) for x in nums) + ((0,) if "post" not in v else ())


def wanted(v: str) -> bool:
    return re.fullmatch(r"0\.5\.\d+(\.post\d+)?", v) is not None


def list_versions(wheels: Path) -> list[str]:
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True,
                             text=True, timeout=120).stdout
        line = next((ln for ln in out.splitlines() if ln.startswith("Available versions:")), "")
        found = [v.strip() for v in line.split(":", 1)[1].split(",")] if line else []
    except (subprocess.SubprocessError, OSError):
        found = []
    if not found:  # offline: what the cache holds
        found = [p.name.split("-")[1] for p in wheels.glob("sglang-*.whl")]
    return sorted({v for v in found if wanted(v)}, key=version_key)


def wheel_for(version: str, wheels: Path) -> Path:
    def existing():
        return sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if not existing():
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"sglang=={version}",
                        "-d", str(wheels)], check=True, timeout=900)
    found = existing()
    if not found:
        raise FileNotFoundError(f"pip download left no wheel for sglang {version} in {wheels}")
    return found[0]


def sources_for(version: str, wheel: Path, unpacked: Path) -> Path:
    """The unpacked ``sglang/`` package of a wheel (sources only), made once."""
    dest = unpacked / version
    if not (dest / "sglang").is_dir():
        unpacked.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=unpacked, prefix=f".{version}."))
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp, [n for n in zf.namelist() if n.startswith("sglang/") and n.endswith((".py", ".cuh"))])
        try:
            tmp.rename(dest)
        except OSError:  # another process unpacked it first
            shutil.rmtree(tmp, ignore_errors=True)
    return dest / "sglang"


def enclosing(package: Path, rel: str, line: int) -> str | None:
    """``Class.method`` (or ``function``) whose body holds ``rel:line`` in the package."""
    try:
        tree = ast.parse((package / rel).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError):
        return None
    best = None

    def walk(node, prefix):
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if child.lineno <= line <= (child.end_lineno or child.lineno) and not isinstance(child, ast.ClassDef):
                    best = name
                walk(child, name + ".")
    walk(tree, "")
    return best


def sources_digest(package: Path) -> str:
    """sha256 over the unpacked package's files (path and bytes), ``version.py`` left out: the
    audit reads any file of the package (it looks functions up everywhere), so only releases
    equal in all of them would audit alike."""
    h = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.is_file() and p.relative_to(package).as_posix() != "version.py"):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def audit(version: str, package: Path, examples: int, kernels: bool, workdir: Path) -> dict:
    """One release's record: the audit's JSON report, its time and exit, and for every row whose id
    ends in a call site (``@file:line``) the function holding that site (a stable name across
    releases, where the line is not)."""
    out = workdir / f"{version}.json"
    cmd = [sys.executable, "-m", "specbound.cli", "audit", "sglang", "--sglang-path", str(package), "--json", str(out)]
    # --jobs 1: os.times() below counts the audit's children, never the fork server's workers (their
    # CPU would go missing from the table); --no-kernels runs in one process anyway
    cmd += ["--examples", str(examples), "--jobs", "1"] if kernels else ["--no-kernels"]
    t0, c0 = time.perf_counter(), os.times()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    c1 = os.times()
    record = {"version": version, "mode": "full" if kernels else "no-kernels",
              "examples": examples if kernels else None, "seconds": round(time.perf_counter() - t0, 1),
              "cpu_seconds": round(c1.children_user - c0.children_user + c1.children_system - c0.children_system, 1),
              "exit": proc.returncode, "sources_sha256": sources_digest(package)}
    if not out.is_file():
        return {**record, "report": None, "error": (proc.stderr or proc.stdout)[-2000:]}
    report = json.loads(out.read_text())
    sites = {}
    for row in report["rows"]:
        m = _SITE.search(row["id"])
        if m:
            sites[row["id"]] = enclosing(package, m.group(1), int(m.group(2)))
    return {**record, "report": report, "sites": sites}


def save(record: dict, data: Path) -> None:
    data.mkdir(parents=True, exist_ok=True)
    (data / f"{record['version']}.json").write_text(json.dumps(record, indent=1, default=str) + "\n")


def load(data: Path) -> list[dict]:
    """Every saved release record, oldest first."""
    records = [json.loads(p.read_text()) for p in data.glob("*.json")]
    return sorted(records, key=lambda r: version_key(r["version"]))


# --- bug classes -------------------------------------------------------------------------------

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
        m = _SITE.search(row["id"])
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


# --- the document ------------------------------------------------------------------------------

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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--versions", nargs="*", help="versions to audit (default: every 0.5.x)")
    p.add_argument("--missing", action="store_true", help="audit only the versions without a saved report")
    p.add_argument("--kernels", action="store_true", help="run the whole audit, kernel checks included")
    p.add_argument("--examples", type=int, default=10, help="random batches per kernel check, with --kernels")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="wheel cache (default %(default)s)")
    p.add_argument("--unpacked", type=Path, help="where sources are unpacked (default: CACHE-src)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="saved reports (default %(default)s)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--json", type=Path, help="also write every saved release's rows here, as before the reports "
                   "were saved: a list of {version, seconds, exit, rows}")
    p.add_argument("--render", action="store_true", help="no audit: write the document from the saved reports")
    p.add_argument("--check", action="store_true", help="no audit: exit 1 when the document disagrees with them")
    args = p.parse_args(argv)
    if args.examples < 1:
        p.error(f"--examples must be at least 1 (got {args.examples})")
    lf = args.data / "listed.txt"   # the releases the index offered at the last audit run
    if args.render or args.check:
        records = load(args.data)
        if not records:
            print(f"no saved report in {args.data}", file=sys.stderr)
            return 2
        text = render(records, lf.read_text().split() if lf.is_file() else None)
        if args.check:
            if not args.out.is_file() or args.out.read_text() != text:
                print(f"{args.out} disagrees with the reports in {args.data}: run python bench/audit_releases.py "
                      "--render", file=sys.stderr)
                return 1
            print(f"{args.out} agrees with {len(records)} saved reports")
            return 0
        args.out.write_text(text)
        print(f"wrote {args.out}")
        return write_rows(args.json, records)
    unpacked = args.unpacked or args.cache.parent / (args.cache.name + "-src")
    listed = list_versions(args.cache)
    versions = args.versions or listed
    if args.missing:
        versions = [v for v in versions if not (args.data / f"{v}.json").is_file()]
    if not versions and not args.missing:
        print("no sglang 0.5.x release found (pip index versions sglang gave none, and the cache is empty)",
              file=sys.stderr)
        return 2
    args.data.mkdir(parents=True, exist_ok=True)
    lf.write_text("\n".join(listed) + "\n")
    broken = []
    with tempfile.TemporaryDirectory() as work:
        for v in versions:
            rec = audit(v, sources_for(v, wheel_for(v, args.cache), unpacked), args.examples, args.kernels, Path(work))
            save(rec, args.data)
            bad = [r["id"] for r in judged_rows(rec) if r["kind"] == FINDING]
            print(f"{v}: {rec['seconds']:.1f} s wall, {rec['cpu_seconds']:.1f} s CPU, exit {rec['exit']}, "
                  f"{len(judged_rows(rec))} judged rows, {len(bad)} findings", flush=True)
            # Findings (exit 1) are what old releases are expected to have; an audit that could not
            # run (no report, or any other exit) checked nothing, and must not pass as a row.
            if rec.get("error") or rec["exit"] not in (0, 1):
                broken.append(v)
    records = load(args.data)
    args.out.write_text(render(records, listed))
    print(f"wrote {args.out}")
    write_rows(args.json, records)
    if broken:
        print(f"the audit did not run on: {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
