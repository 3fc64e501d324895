"""Wall and CPU time of the whole `specbound verify`, run as a user runs it (a fresh process).

    python bench/bench_verify.py [--jobs N] [--json PATH]

Prints the wall seconds, the CPU seconds of the command and its workers (user + system), the
load average before and after (this machine is shared: compare CPU figures, and wall only
at a low load), and the verdict line.  ``--jobs 1`` is the one-process run.

Measured on the 2-core machine shared with ~6 other jobs (load 5-11), so the CPU figures are
the comparable ones; wall at that load is 3-5x what an idle machine gives:

* before (one process, sequential phases): 237.8 s CPU (236.4 user + 1.4 sys), 14:28 wall at
  load ~10; the proofs ~25% of the CPU, the fuzz ~60%, its state machine alone ~20%.
* after, ``--jobs 2`` (the default there): 220.6 s CPU, workers included, 21:52 wall at load
  8-15 (the other jobs had most of both cores); again at load 2.6-5.2: 241.2 s CPU, 5:39 wall
  (0.7 of a core on average).  On 2 idle cores the wall is the busier
  worker's CPU: the proofs task alone is ~85 s (spec theorems ~14, kernel theorems ~72), the
  fuzz checks ~135 s, so about 110-120 s here; the largest single fuzz task is the state
  machine (~45 s), so the pool can balance to about half the total.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(jobs: int | None) -> dict:
    cmd = [sys.executable, "-m", "specbound.cli", "verify", *(["--jobs", str(jobs)] if jobs else [])]
    load_before = os.getloadavg()
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    lines = proc.stdout.strip().splitlines()
    return {"command": " ".join(cmd[1:]), "exit": proc.returncode, "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()], "cores": len(os.sched_getaffinity(0)),
            "verdict": lines[-1] if lines else proc.stderr[-500:]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=None, help="passed to verify (default: verify's own)")
    p.add_argument("--json", default=None, help="write the figures here")
    args = p.parse_args()
    figures = run(args.jobs)
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0 if figures["exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
