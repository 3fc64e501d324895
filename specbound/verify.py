"""``specbound verify``'s phases, and running them on several cores: the proofs and every fuzz
check as separate tasks of one process pool, their output printed in the order a one-core
run prints it.

The tasks are the calls the one-core run makes (the proofs step of ``cli``; one fuzz check
at the verify budget, ``fuzz.command.verify_check``), so both check the same things: the
fuzz checks are derandomized by the ``ci`` profile, and the table's ``cases`` digests agree
between the two (``tests/test_verify_parallel.py``).  What differs: each phase's line is
printed before its output, not as it starts (the phases run together), and a worker that
dies is a failed task, never a hang.

The longest tasks are handed out first (the proofs, then the state machine and the mutant
replays, then the kernel properties, then the cheap ones), so the last to finish is a short
one.  Workers start from a fork server where the platform has one, else are spawned: never
forked from this process, whose other threads (torch's, a test runner's) may hold a lock at
the fork and leave the child waiting on it for ever.
"""

from __future__ import annotations

import concurrent.futures
import io
import multiprocessing
import os
import sys
from contextlib import redirect_stderr, redirect_stdout

from specbound.cli_common import verdict

PROOFS = "== verify 1/2: proofs (the spec theorems{kernels}) =="
FUZZ = "== verify 2/2: fuzz (the ci profile at its verify budget) =="
# the order fuzz checks are handed out in (longest first), by name or cost class
_ORDER = {"stateful.cuda_graph": 0, "replay.mutants": 1, "kernel": 2, "cheap": 3}


def proofs_line(no_kernels: bool) -> str:
    return PROOFS.format(kernels="" if no_kernels else ", then the kernel theorems")


def finish(rc_prove: int, rc_fuzz: int) -> int:
    """The verdict line of both phases; the exit status."""
    rc = max(rc_prove, rc_fuzz)
    print()
    word = {0: "OK"}
    verdict("verify", rc == 0, f"proofs {word.get(rc_prove, 'FAILED')}, fuzz {word.get(rc_fuzz, 'FAILED')}")
    return rc


def usable_cores() -> int:
    """The cores this process may run on (a container's limit, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        return os.cpu_count() or 1


class _Tee(io.TextIOBase):
    """One stream of a captured task: each write is kept with the stream it went to, in order,
    so that the parent prints stdout and stderr interleaved as they were written."""

    def __init__(self, chunks: list, stream: str):
        self.chunks, self.stream = chunks, stream

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.chunks.append((self.stream, text))
        return len(text)


def _captured(task) -> tuple[int, list]:
    chunks: list = []
    with redirect_stdout(_Tee(chunks, "out")), redirect_stderr(_Tee(chunks, "err")):
        rc = task()
    return rc, chunks


def _replay(chunks) -> None:
    for stream, text in chunks:
        (sys.stdout if stream == "out" else sys.stderr).write(text)
    sys.stdout.flush()
    sys.stderr.flush()


def worker_pool(jobs: int, start_method: str | None = None) -> concurrent.futures.ProcessPoolExecutor:
    """``jobs`` worker processes started from a fork server where the platform has one, else
    spawned (``start_method`` chooses); also the parallel ``specbound audit sglang``'s."""
    if start_method is None:
        start_method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(start_method)
    return concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context)


def run_parallel(*, jobs: int, no_kernels: bool, prove, fuzz, scale: float, start_method: str | None = None) -> int:
    """Both phases on ``jobs`` worker processes.  ``prove``: a picklable callable that runs the
    proofs and returns their exit status (a crash inside is its own failure); ``fuzz``: the
    fuzz command module (its checks, their report).  ``start_method``: how workers start
    (default: a fork server, else spawn); the tests fork, from a single-threaded process, so
    that their plants reach the workers."""
    profile, checks, cost = fuzz.verify_plan()
    print(proofs_line(no_kernels), flush=True)
    with worker_pool(jobs, start_method) as pool:
        proofs = pool.submit(_captured, prove)
        futures = {name: pool.submit(fuzz.verify_check, name, scale)
                   for name in sorted(checks, key=lambda n: _ORDER.get(n, _ORDER.get(cost.get(n), 9)))}
        try:
            rc_prove, chunks = proofs.result()
            _replay(chunks)
        except Exception as exc:   # the worker died (killed, out of memory): the proofs did not finish
            print(f"FAILED prove: {type(exc).__name__}: {exc}", file=sys.stderr)
            rc_prove = 1
        print("\n" + FUZZ, flush=True)
        print(fuzz.header(profile, "all"), flush=True)
        results = []
        for i, name in enumerate(checks):
            try:
                r = futures[name].result()
            except Exception as exc:   # its worker died
                r = fuzz.crashed(name, exc)
            results.append(r)
            print(fuzz.progress(i + 1, len(checks), 0, r), flush=True)
    rc_fuzz = fuzz.finish(results, profile=profile, target="all", seed=None, scale=scale, rounds=1)
    return finish(rc_prove, rc_fuzz)
