"""``specbound verify``'s phases, and running them on several cores: the kernel theorems and every
fuzz check as separate tasks of one process pool, the spec theorems in this process meanwhile,
their output printed in the order a one-core run prints it.

The tasks are the calls the one-core run makes (the kernel theorems' steps,
``theorems.proved_steps``; one fuzz check at the verify budget, ``fuzz.command.verify_check``),
so both check the same things: the fuzz checks are derandomized by the ``ci`` profile, and the
table's ``cases`` digests agree between the two (``tests/test_verify_parallel.py``).  What
differs: each fuzz line is printed when its check has finished, and a worker that dies is a
failed task, never a hang.

The longest tasks are handed out first (the kernel theorems, then the state machine, then
the kernel properties, then the cheap ones), so the last to finish is a short one; the mutant
replays are handed out when the spec theorems they replay are proved here (not proved again
in a worker).  Workers start from a fork server where the platform has one (which imports the
modules every task needs once, before it forks them), else are spawned: never forked from this
process, whose other threads (torch's, a test runner's) may hold a lock at the fork and leave
the child waiting on it for ever.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os

from specbound.cli_common import verdict

PROOFS = "== verify 1/2: proofs (the spec theorems{kernels}) =="
FUZZ = "== verify 2/2: fuzz (the ci profile at its verify budget) =="
# the order fuzz checks are handed out in (longest first), by name or cost class
# (the mutant replays wait for the spec theorems' counterexamples: handed out once proved)
_ORDER = {"stateful.cuda_graph": 0, "kernel": 2, "cheap": 3}


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


# what every task imports (torch, Triton, Z3, Hypothesis): the fork server imports it once and
# its workers inherit it, instead of each worker importing it again
_PRELOAD = ["specbound.fuzz.properties", "specbound.fuzz.stateful", "specbound.fuzz.replay",
            "specbound.proofs.symexec.theorems"]


def worker_pool(jobs: int, start_method: str | None = None) -> concurrent.futures.ProcessPoolExecutor:
    """``jobs`` worker processes started from a fork server where the platform has one, else
    spawned (``start_method`` chooses); also the parallel ``specbound audit sglang``'s."""
    if start_method is None:
        start_method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        context.set_forkserver_preload(_PRELOAD)
    return concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context)


def run_parallel(*, jobs: int, no_kernels: bool, prove, fuzz, scale: float, kernel_steps=None,
                 start_method: str | None = None) -> int:
    """Both phases on ``jobs`` worker processes.  ``prove(kernels_proved=..., spec_results_to=...)``:
    runs the proofs here and returns their exit status (a crash inside is its own failure),
    given the kernel theorems' results once a worker has proved them (``theorems.run_all``'s
    ``proved``; None with ``no_kernels``), and giving the spec theorems' results to
    ``spec_results_to`` (the mutant replays' counterexamples, proved once); ``fuzz``: the fuzz
    command module (its checks, their report); ``kernel_steps``: a picklable callable, the
    kernel theorems' task (``theorems.proved_steps``; unused with ``no_kernels``).
    ``start_method``: how workers start (default: a fork server, else spawn); the tests fork,
    from a single-threaded process, so that their plants reach the workers."""
    profile, checks, cost = fuzz.verify_plan()
    print(proofs_line(no_kernels), flush=True)
    with worker_pool(jobs, start_method) as pool:
        # handed out first, so a fresh worker proves them: Z3's search depends on the terms a
        # process made before, so the unsat cores, witnesses and counterexamples are then the
        # same on every run (spread over the workers they were not)
        kernels = None if no_kernels else pool.submit(kernel_steps)
        futures = {name: pool.submit(fuzz.verify_check, name, scale)
                   for name in sorted(checks, key=lambda n: _ORDER.get(n, _ORDER.get(cost.get(n), 9)))
                   if name != fuzz.REPLAYS}

        def replays(results):   # the spec theorems are proved: their counterexamples, replayed
            futures[fuzz.REPLAYS] = pool.submit(fuzz.verify_check, fuzz.REPLAYS, scale,
                                                fuzz.spec_counterexamples(results))
        rc_prove = prove(kernels_proved=None if no_kernels else (step for step in kernels.result()),
                         spec_results_to=replays if fuzz.REPLAYS in checks else None)
        if fuzz.REPLAYS in checks and fuzz.REPLAYS not in futures:   # the proofs stopped first
            futures[fuzz.REPLAYS] = pool.submit(fuzz.verify_check, fuzz.REPLAYS, scale)
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
