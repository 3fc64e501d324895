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
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # loaded by path (runpy, importlib: the tests), not run as a script
    sys.path.insert(0, HERE)

from audit_releases_doc import FINDING, SITE, judged_rows, load, render, version_key, write_rows  # noqa: E402


# --- releases ----------------------------------------------------------------------------------

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
        m = SITE.search(row["id"])
        if m:
            sites[row["id"]] = enclosing(package, m.group(1), int(m.group(2)))
    return {**record, "report": report, "sites": sites}


def save(record: dict, data: Path) -> None:
    data.mkdir(parents=True, exist_ok=True)
    (data / f"{record['version']}.json").write_text(json.dumps(record, indent=1, default=str) + "\n")


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
