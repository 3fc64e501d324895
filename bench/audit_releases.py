"""The release matrix: audit every sglang 0.5.x release (0.5.3 on) and write docs/audit-releases.md.

    python bench/audit_releases.py [--versions 0.5.3 0.5.9 ...] [--cache DIR] [--examples N]
                                   [--out docs/audit-releases.md] [--json PATH]

For each version: ``pip download --no-deps sglang==X`` into the wheel cache (skipped when
the wheel is already there), the wheel's ``sglang/`` sources unpacked next to it (once, by
an atomic rename), then ``specbound audit sglang --sglang-path ... --json ...`` in a fresh
process, timed.  The versions default to every 0.5.x from 0.5.3 that ``pip index versions
sglang`` lists, or, offline, that the cache holds.

Exits 1 when the audit of some release did not run to the end (no report, or exit 3: a check
that could not run): findings (exit 1) are what old releases are expected to have, and the
table shows them; an audit that checked nothing must not pass as one of its rows.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = Path(os.environ.get("SPECBOUND_SGLANG_CACHE", Path.home() / ".cache" / "specbound-sglang"))
KERNEL_NAMES = {"draft_kv_indices": "draft kv_indices (CUDA graph and eager)", "tree_mask": "tree mask"}


def version_key(v: str):
    nums = re.findall(r"\d+", v)
    return tuple(int(x) for x in nums) + ((0,) if "post" not in v else ())


def wanted(v: str) -> bool:
    m = re.fullmatch(r"0\.5\.(\d+)(\.post\d+)?", v)
    return bool(m) and int(m.group(1)) >= 3


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
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    return dest / "sglang"


def audit(version: str, package: Path, examples: int, workdir: Path) -> dict:
    out = workdir / f"{version}.json"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "specbound.cli", "audit", "sglang", "--sglang-path", str(package),
                           "--examples", str(examples), "--json", str(out)], capture_output=True, text=True,
                          cwd=ROOT, timeout=1800)
    seconds = time.perf_counter() - t0
    if not out.is_file():
        return {"version": version, "seconds": seconds, "exit": proc.returncode, "rows": [],
                "error": (proc.stderr or proc.stdout)[-2000:]}
    data = json.loads(out.read_text())
    return {"version": version, "seconds": seconds, "exit": proc.returncode, "rows": data["rows"],
            "audit_seconds": data["seconds"]}


# --- the document ---------------------------------------------------------------------------

def _buffer_rows(result):
    return [r for r in result["rows"] if r.get("allocation")]


def _label(row) -> tuple[str, str]:
    """(kernel, class.buffer) of a buffer row id ``buffer.<kernel>[<class>.<holder>...]``."""
    m = re.fullmatch(r"buffer\.([a-z_]+)\[(.*)\]", row["id"])
    return (m.group(1), m.group(2)) if m else ("?", row["id"])


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


def render(results: list[dict], examples: int) -> str:
    versions = [r["version"] for r in results]
    lines = ["# sglang releases audited", "",
             "Generated by `python bench/audit_releases.py` (wheels from `pip download --no-deps`, each audited by "
             f"`specbound audit sglang --sglang-path ... --examples {examples}` in a fresh process on this 2-core "
             "machine).  A buffer row judges one allocation that reaches a kernel, per backend class "
             "(docs/audit-sglang.md says how).  The exit column is the audit's: 1 a finding (an overrun, a "
             "buffer that holds only if a condition sglang does not check, ...), 3 a check that did not run, "
             "0 every check ran and found nothing.", ""]
    carriers = {}
    for r in results:
        for row in _buffer_rows(r):
            if row["status"] in ("overrun", "holds only if"):
                carriers.setdefault((_label(row)[0], row["status"]), {}).setdefault(r["version"], []).append(row)
    lines += ["## Per bug class", ""]
    kv = carriers.get(("draft_kv_indices", "overrun"), {})
    mask = carriers.get(("tree_mask", "holds only if"), {})
    mask_over = carriers.get(("tree_mask", "overrun"), {})
    last = versions[-1] if versions else "?"

    def listing(d):
        return ", ".join(d) if d else "none"
    lines += [f"* **kv_indices row without the topk factor** (sglang #27338/#27460), `overrun`: {listing(kv)}.",
              f"* **FULL_MASK custom mask without the draft-token term** (sglang #29450, replaced by VerifyMask in "
              f"#32920), `holds only if seq_len[b] + num_draft_tokens <= max_context_len`: {listing(mask)}"
              + (f"; `overrun`: {listing(mask_over)}" if mask_over else "") + ".",
              f"* **{last}** (the newest audited): " + (
                  "no undersized buffer (every traced allocation is `matched`)." if not any(
                      row["status"] in ("overrun", "holds only if") for row in _buffer_rows(results[-1]))
                  else "still carries: " + ", ".join(
                      f"`{row['id']}` ({row['status']})" for row in _buffer_rows(results[-1])
                      if row["status"] in ("overrun", "holds only if"))) if results else "", ""]
    lines += ["## Per release", "", "| version | time (s) | exit | buffers matched | overrun | holds only if "
              "| unknown | undersized buffers |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        rows = _buffer_rows(r)
        count = {s: sum(1 for x in rows if x["status"] == s) for s in ("matched", "overrun", "holds only if")}
        unknown = sum(1 for x in r["rows"] if x["id"].startswith("buffer.") and x["status"] == "unknown")
        bad = ", ".join(f"`{_label(x)[1]}`" for x in rows if x["status"] in ("overrun", "holds only if"))
        err = f" (error: {r['error'][:80]})" if r.get("error") else ""
        lines.append(f"| {r['version']} | {r['seconds']:.0f} | {r['exit']}{err} | {count['matched']} | "
                     f"{count['overrun']} | {count['holds only if']} | {unknown} | {bad} |")
    lines += ["", "## Version × (kernel, backend, buffer)", "",
              "Consecutive releases with the same verdict are merged; a buffer absent from a release has no entry.",
              "", "| kernel | backend.buffer | verdicts |", "|---|---|---|"]
    matrix: dict[tuple, dict] = {}
    for r in results:
        for row in _buffer_rows(r):
            matrix.setdefault(_label(row), {})[r["version"]] = row["status"]
    for (kernel, name), by_version in sorted(matrix.items()):
        lines.append(f"| {KERNEL_NAMES.get(kernel, kernel)} | `{name}` | {_ranges(versions, by_version)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--versions", nargs="*", help="versions to audit (default: every 0.5.x from 0.5.3)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="wheel cache (default %(default)s)")
    p.add_argument("--unpacked", type=Path, help="where sources are unpacked (default: CACHE-src)")
    p.add_argument("--examples", type=int, default=10, help="random batches per kernel fuzz row (default 10)")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "audit-releases.md")
    p.add_argument("--json", type=Path, help="also write every release's rows here")
    args = p.parse_args(argv)
    unpacked = args.unpacked or args.cache.parent / (args.cache.name + "-src")
    versions = args.versions or list_versions(args.cache)
    if not versions:
        print("no sglang 0.5.x release found (pip index versions sglang gave none, and the cache is empty)",
              file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory() as work:
        for v in versions:
            package = sources_for(v, wheel_for(v, args.cache), unpacked)
            res = audit(v, package, args.examples, Path(work))
            bad = [x["id"] for x in _buffer_rows(res) if x["status"] in ("overrun", "holds only if")]
            print(f"{v}: {res['seconds']:.1f} s, exit {res['exit']}, {len(_buffer_rows(res))} buffer rows, "
                  f"undersized: {bad or 'none'}", flush=True)
            results.append(res)
    args.out.write_text(render(results, args.examples))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {args.out}")
    # Findings (exit 1) are what old releases are expected to have; an audit that could not run
    # (no report, or any other exit) checked nothing, and must not pass as a row of the table.
    broken = [r["version"] for r in results if r.get("error") or r["exit"] not in (0, 1)]
    if broken:
        print(f"the audit did not run on: {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
