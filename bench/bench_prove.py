"""Wall time of the whole `specbound prove` (all theorems, witnesses, cores, mutants).

Runs the command as a fresh process several times (start-up included, as a user sees it)
and reports the median and spread, plus the in-process solver figures of the last run.
Also checks that proving imports neither torch nor triton (start-up budget).

    python bench/bench_prove.py [--runs 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")

    walls, cpus = [], []
    report = None
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "prove.json")
        for _ in range(args.runs):
            start, used = time.perf_counter(), _children_cpu()
            proc = subprocess.run([sys.executable, "-m", "specbound.cli", "prove", "--json", out],
                                  capture_output=True, text=True)
            walls.append(time.perf_counter() - start)
            cpus.append(_children_cpu() - used)  # the wall time on a shared machine includes waiting
            if proc.returncode != 0:
                print(proc.stdout, proc.stderr, file=sys.stderr)
                return 1
        with open(out) as fh:
            report = json.load(fh)

    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys, specbound.proofs.registry as r; r.run_all(['VM-QLEN-IN-BOUNDS']); "
         "print(int('torch' in sys.modules), int('triton' in sys.modules))"],
        capture_output=True, text=True, check=True)
    torch_loaded, triton_loaded = (int(x) for x in probe.stdout.split())

    total_rlimit = sum(t["rlimit"] for t in report["theorems"])
    result = {
        "runs": args.runs,
        "wall_seconds_median": round(statistics.median(walls), 3),
        "wall_seconds_min": round(min(walls), 3),
        "wall_seconds_max": round(max(walls), 3),
        "cpu_seconds_median": round(statistics.median(cpus), 3),
        "in_process_seconds": report["summary"]["seconds"],
        "theorems": len(report["theorems"]),
        "mutants": sum(len(t["mutants"]) for t in report["theorems"]),
        "rlimit_total": total_rlimit,
        "z3_version": report["z3_version"],
        "imports_torch": bool(torch_loaded),
        "imports_triton": bool(triton_loaded),
        "cpus": os.cpu_count(),
    }
    for key, value in result.items():
        print(f"{key:22s} {value}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
