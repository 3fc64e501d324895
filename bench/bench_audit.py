"""The audit of one sglang release, timed: ``specbound audit sglang`` in one process
(``--jobs 1``) and on two workers (``--jobs 2``), each in a fresh process, with the wall
seconds and the CPU seconds (user + system) of the audit and of every process it starts (the
fork server's workers and the sanitizer runs included: this script adopts orphans, Linux
``PR_SET_CHILD_SUBREAPER``, and reaps them all); then the two JSON reports compared, timings
aside (``seconds`` fields and the ``12.3 s`` / ``212 ms`` inside texts): they must be equal.

    python bench/bench_audit.py [--no-kernels] [--sglang-path DIR] [--jobs 1 2] [--keep DIR] [--against JSON]

``--against``: also compare each report with a saved one (an earlier version's ``--json``).
Exits 1 when two reports differ.

Measured on sglang 0.5.23 (the installed one), default mode, in one sitting on the project's
2-core machine shared with other jobs (load average 6-11: the wall seconds say little, CPU is
the figure), every report identical to the one saved before the change, timings aside:

* before (one process, stage after stage; the code before ``--jobs``): 75.1 s CPU (66.3 user +
  8.8 sys), 154 s wall.  On 2 idle cores that is about 75 s wall: one process, one core.
* after, ``--jobs 1``: 69.7 s CPU (65.3 user + 4.3 sys), 160 s wall.  ``Program.walk`` cut the
  tracer's ``ast.walk`` steps from 2.4M to 1.4M, but its saving is within this machine's noise
  (``--no-kernels``, the stages it touches: 18.5 s CPU before, 18.4-19.2 s after).
* after, ``--jobs 2`` (the default on 2 cores): 78.7 s CPU (73.8 user + 4.9 sys: two workers
  import z3, torch and Triton each), 135 s wall.  Each group alone in a fresh process (imports
  included): symbolic proofs 34.3 s CPU, package stages 22.8, CUDA rows 13.1, Triton tree 9.6,
  Triton kv 8.6; handed out in ``GROUPS`` order the two workers get 43.9 and 44.5 s, so on 2
  idle cores the audit takes about 45 s wall (under the 60 s asked).  A second ``--jobs 2`` run
  at the end of the sitting: 66.8 s CPU, 123 s wall at load 10 (the spread of the CPU figures).
* ``--no-kernels`` (one group of stages: stays in one process whatever ``--jobs``): 18.5 s CPU
  before, 18.4-19.2 s after, 37-39 s wall at load 9 either way; about 20 s wall on 2 idle cores.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PR_SET_CHILD_SUBREAPER = 36
# a duration inside a row's text ("13.5 s", "212 ms per batch"): timing, not a result
_DURATION = re.compile(r"\d+(?:\.\d+)? m?s\b")


def timed(cmd: list[str]) -> dict:
    """Run ``cmd``; its wall seconds and the CPU seconds of it and all its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL).returncode
    while True:   # the orphans this process adopted (a fork server outliving the audit)
        try:
            os.wait()
        except ChildProcessError:
            break
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {"exit": rc, "wall": wall, "user": user, "sys": system, "cpu": user + system}


def without_timings(value):
    """The report with its timings taken out: what two runs of one audit must agree on."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    if isinstance(value, str):
        return _DURATION.sub("<time>", value)
    return value


def differences(a: dict, b: dict) -> list[str]:
    """Row ids (and header keys) where two reports differ, timings aside."""
    a, b = without_timings(a), without_timings(b)
    out = [k for k in sorted(set(a) | set(b)) if k != "rows" and a.get(k) != b.get(k)]
    rows_a, rows_b = a.get("rows", []), b.get("rows", [])
    if [r["id"] for r in rows_a] != [r["id"] for r in rows_b]:
        out.append("row ids or their order")
    out += [ra["id"] for ra, rb in zip(rows_a, rows_b) if ra != rb]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-kernels", action="store_true", help="the helper, buffer and consumer stages only")
    ap.add_argument("--sglang-path", metavar="DIR", help="the sglang to audit (default: the installed one)")
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2], metavar="N", help="the --jobs to time")
    ap.add_argument("--keep", metavar="DIR", help="keep the JSON reports here")
    ap.add_argument("--against", metavar="JSON", help="a saved report each run's must equal, timings aside")
    args = ap.parse_args(argv)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("cannot adopt orphans here (PR_SET_CHILD_SUBREAPER): the workers' CPU would go uncounted",
              file=sys.stderr)
        return 2
    out = Path(args.keep or tempfile.mkdtemp(prefix="bench-audit-"))
    out.mkdir(parents=True, exist_ok=True)
    reports = {}
    for jobs in args.jobs:
        path = out / f"audit-jobs{jobs}.json"
        cmd = [sys.executable, "-m", "specbound.cli", "audit", "sglang", "--json", str(path), "--jobs", str(jobs)]
        cmd += ["--no-kernels"] if args.no_kernels else []
        cmd += ["--sglang-path", args.sglang_path] if args.sglang_path else []
        t = timed(cmd)
        print(f"--jobs {jobs}: exit {t['exit']}, {t['wall']:.1f} s wall, {t['cpu']:.1f} s CPU "
              f"({t['user']:.1f} user + {t['sys']:.1f} sys); load average {os.getloadavg()[0]:.1f}", flush=True)
        reports[jobs] = json.loads(path.read_text())
    first, *rest = args.jobs
    pairs = [(f"--jobs {first}", reports[first], f"--jobs {jobs}", reports[jobs]) for jobs in rest]
    if args.against:
        saved = json.loads(Path(args.against).read_text())
        pairs += [(args.against, saved, f"--jobs {jobs}", reports[jobs]) for jobs in args.jobs]
    bad = False
    for name_a, a, name_b, b in pairs:
        diff = differences(a, b)
        print(f"report {name_a} vs {name_b}: " + ("identical, timings aside" if not diff else
                                                  "DIFFERENT: " + ", ".join(diff[:10])))
        bad = bad or bool(diff)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
