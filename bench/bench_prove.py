"""Wall time of the whole `specbound prove` (all theorems, witnesses, cores, mutants).

Runs the command as a fresh process several times (start-up included, as a user sees it)
and reports the median and spread, plus the in-process solver figures of the last run.
Also checks that proving imports neither torch nor triton (start-up budget).  With
``--stages`` it also splits one in-process run's CPU time by what the solver was asked
(proofs, witness and counterexample searches, shrink asks, closure checks), which is
where a change to the model searches shows.

    python bench/bench_prove.py [--runs 5] [--jobs N] [--json PATH] [--stages]

The CPU seconds of a run include prove's worker processes (adopted as a subreaper and waited
for); ``--stages`` also gives the two-worker makespan of that run's per-theorem CPU, the
in-process part of ``prove``'s wall time on 2 idle cores.

Measured on the 2-core machine shared with other jobs (CPU seconds, so compare within one
sitting).  Before: ``--stages`` 493 queries, 8.7 s in-process CPU, of which shrink rounds 5.1 s
(201 fresh-context queries, each asking for a strictly smaller total), first searches 1.6 s
(71), closure checks 0.5 s (176), proofs 0.5 s (45), the rest 0.9 s; 7.6-7.8 s wall on an
idle machine.  After shrinking on the solver that found the model (a binary search to a
Pareto-minimal one, ``proofs/theorem.py:_Shrink``), in-process CPU beside the old code, run for
run, at load 13-14 on 2 cores: old 14.0, 13.6, 14.6 s, new 7.5, 7.3, 7.9 s (0.54x; the whole
command 8.4-10.7 s against 13.7-16.6 s user CPU at load ~10); ``--stages`` at load 14: 641
queries, 8.2 s, of which searches with their 326 shrink asks 4.6 s, closure checks 0.9 s
(190), proofs 0.8 s (48), the rest 1.8 s.  Scaled from the idle 7.6-7.8 s, about 4.2 s wall
idle (not measured idle: no idle 2-core machine was at hand).

Then (``prove --jobs``, one theorem a task on forked workers; one closure query for all of a
model's closed formulas, asked one by one only when one may fail; the applications in a term
walked once per term), beside the old code in one sitting at load 8.7-10 on 2 cores, the whole
command's CPU including the workers, run for run: old 7.22, 7.57, 7.14 s; new with one job
6.91, 6.87, 6.76 s; new with the default two jobs 7.60, 6.25, 7.23 s (wall at that load says
nothing: 11.5-15.3 s for all three).  ``--stages`` beside each other: old 674 queries, 5.8 and
7.4 s (closure checks 194, 0.6-0.7 s); new 570 queries, 6.0 and 7.3 s (closure checks 90,
0.4-0.5 s): the serial work is within the noise of the old, the 104 closure queries saved are
about 0.2 s.  The two-worker makespan of the new per-theorem CPU: 2.8, 3.0 and 3.7 s (of 5.6,
6.0 and 7.3 s); start-up (interpreter, z3 and our imports) is 0.25 s CPU.  So on 2 idle cores
prove's wall is about 0.3 s + a makespan under 3.7 s, under the 5 s goal (an estimate: no idle
2-core machine was at hand this time either).  The reports of old and new, one job and two,
are identical (timings aside).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict


def _adopt_orphans() -> None:
    """Become the subreaper of the commands run (Linux): prove's worker processes are children
    of multiprocessing's fork server, which outlives the command; adopted and waited for
    (:func:`_reap`), their CPU time counts in ``RUSAGE_CHILDREN`` like the command's own."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _reap() -> None:
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _children_cpu() -> float:
    _reap()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def stages() -> dict:
    """CPU seconds and query counts of one in-process run, by kind of solver question."""
    from specbound.proofs import core, registry

    spent = defaultdict(lambda: [0, 0.0])
    satisfy, check = core.satisfy, core.check

    def timed(kind, fn, *args, **kwargs):
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[kind][0] += 1
            spent[kind][1] += time.process_time() - start

    def traced_satisfy(name, *args, **kwargs):
        if name.endswith("/close"):
            return timed("closure check", satisfy, name, *args, **kwargs)
        narrow = kwargs.get("narrow")
        if narrow is None:
            return timed("other model search", satisfy, name, *args, **kwargs)

        def counted(last):
            more = narrow(last)
            spent["shrink ask (counted; its time is in its search's)"][0] += more is not None
            return more

        kwargs["narrow"] = counted
        return timed("witness/counterexample search and its shrink asks", satisfy, name, *args, **kwargs)

    per_theorem = []
    run = registry.run

    def timed_run(theorem):
        start = time.process_time()
        try:
            return run(theorem)
        finally:
            per_theorem.append(time.process_time() - start)

    core.satisfy = traced_satisfy
    core.check = lambda *args, **kwargs: timed("proof (core.check)", check, *args, **kwargs)
    registry.run = timed_run
    try:
        start = time.process_time()
        registry.run_all()
        total = time.process_time() - start
    finally:
        core.satisfy, core.check, registry.run = satisfy, check, run
    out = {kind: {"queries": n, "cpu_seconds": round(sec, 3)} for kind, (n, sec) in sorted(spent.items())}
    out["everything else"] = {"queries": 0, "cpu_seconds": round(total - sum(sec for _, sec in spent.values()), 3)}
    out["total"] = {"queries": sum(n for n, _ in spent.values()), "cpu_seconds": round(total, 3)}
    out["two workers (estimate)"] = {"queries": 0, "cpu_seconds": round(makespan(per_theorem, 2), 3)}
    return out


def makespan(costs: list, workers: int) -> float:
    """When the last of ``workers`` processes finishes, each taking the next task in order as it
    becomes free (how prove's pool hands out theorems), the tasks costing ``costs`` seconds:
    the in-process part of prove's wall time on that many idle cores, from one process's
    per-theorem CPU (start-up and each worker's imports not included)."""
    free = [0.0] * workers
    for cost in costs:
        free[free.index(min(free))] += cost
    return max(free)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=None,
                        help="prove's --jobs (default: prove's own default, the usable cores)")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--stages", action="store_true", help="also split one in-process run by solver question")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")

    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be >= 1")
    _adopt_orphans()
    jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
    walls, cpus = [], []
    report = None
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "prove.json")
        for _ in range(args.runs):
            start, used = time.perf_counter(), _children_cpu()
            proc = subprocess.run([sys.executable, "-m", "specbound.cli", "prove", *jobs, "--json", out],
                                  capture_output=True, text=True)
            walls.append(time.perf_counter() - start)
            cpus.append(_children_cpu() - used)  # the wall time on a shared machine includes waiting
            # (the worker processes' too: adopted and reaped by _children_cpu)
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
        "jobs": args.jobs or "default",
        "load_average": os.getloadavg()[0],
    }
    if args.stages:
        result["stages"] = stages()
    for key, value in result.items():
        print(f"{key:22s} {value}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
