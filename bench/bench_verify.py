"""Wall and CPU time of the whole `specbound verify`, run as a user runs it (a fresh process).

    python bench/bench_verify.py [--jobs N] [--json PATH]

Prints the wall seconds, the CPU seconds of the command and every process under it (user +
system; polled from /proc, since the pool's workers are children of its fork server and never
reach this process's RUSAGE_CHILDREN), the load average before and after (this machine is
shared: compare CPU figures, and wall only at a low load), and the verdict line.  ``--jobs 1``
is the one-process run.

Figures, ``--jobs 2`` on the project's 2-core machine shared with other jobs:

* earlier (RUSAGE_CHILDREN, so the fork server's workers may be missing): one process 237.8 s
  CPU at load ~10; ``--jobs 2`` 220.6-241.2 s; 139 s wall on 2 idle cores from a fresh clone.
* before / after the speed-ups below, the two run side by side, CPU of every process: at load
  2.5-6.5, 149.5 s / 135.6 s (-9%; workers 74.0 + 72.9 s / 62.2 + 61.2 s, the parent 2.5 s /
  9.3 s: it now proves the spec theorems, the fork server 2.8 s: the imports it hands on); at
  load 6-9, 165.3 s / 143.7 s (-13%).  Wall at those loads (385 s / 368 s) says nothing; on 2
  idle cores not measured since.  Same output: every theorem's verdict, mutants, unsat core,
  witness and counterexample (``rlimit`` of two kv theorems differs from run to run before and
  after alike), the 15 fuzz checks' examples and ``cases`` digests, except that
  tree.footprint.reference and tree.semantics.reference check other cases on some runs of the
  unchanged code too (3 runs before: two digests each).
* where it went (cProfile, one check at a time, before): the Triton interpreter re-patched
  ``triton.language`` (``inspect.getmembers``) on every launch and jit-helper call
  (``kernels._compat`` lists the builtins once: the state machine alone 29.2 -> 26.5 s, two
  kernel properties at 1x 2.9 -> 2.5 s); the mutant replays proved every spec theorem again, ~80% of their time (now handed
  the proofs' counterexamples); each worker imported torch/Triton/Z3/Hypothesis (now the fork
  server, once); the kernel obligations walked the run's hypotheses again for every obligation
  (listed once per term: ~5% of the kernel theorems).  What remains is Z3 (the kernel theorems
  take most of one worker), the interpreter's per-op semantics, and Hypothesis' own generation
  (about half of a cheap check, its ``target`` optimiser included).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time


def _stat(pid: int) -> tuple[int, float]:
    """(parent pid, CPU seconds so far: user + system) of a live process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree_cpu(root: int, done: threading.Event, seen: dict) -> None:
    """The CPU seconds of ``root`` and every descendant, each as last seen, until ``done``.
    Polled, because the pool's workers are children of its fork server, which nobody waits
    for: their time never reaches this process's RUSAGE_CHILDREN (a process that lives less
    than a poll is missed; verify's live for the whole run)."""
    tree = {root}
    while not done.is_set():
        procs = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    procs[int(name)] = _stat(int(name))
                except (OSError, ValueError, IndexError):   # it exited meanwhile
                    pass
        grown = True
        while grown:
            new = {pid for pid, (ppid, _) in procs.items() if ppid in tree and pid not in tree}
            tree |= new
            grown = bool(new)
        seen.update({pid: procs[pid][1] for pid in tree if pid in procs})
        done.wait(0.2)


def run(jobs: int | None) -> dict:
    cmd = [sys.executable, "-m", "specbound.cli", "verify", *(["--jobs", str(jobs)] if jobs else [])]
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict = {}
    done = threading.Event()
    poller = threading.Thread(target=_tree_cpu, args=(proc.pid, done, seen), daemon=True)
    poller.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    done.set()
    poller.join()
    lines = out.strip().splitlines()
    return {"command": " ".join(cmd[1:]), "exit": proc.returncode, "wall_s": round(wall, 1),
            "cpu_s": round(sum(seen.values()), 1), "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()], "cores": len(os.sched_getaffinity(0)),
            "verdict": lines[-1] if lines else err[-500:]}


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
