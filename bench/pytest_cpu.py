"""A pytest plugin that records the CPU seconds of every test file, the only fair measure of
the suite's cost on a shared machine (wall seconds follow the load).

    PYTHONPATH=bench python -m pytest -p pytest_cpu --cpu-report /tmp/cpu.json

Each process (an xdist worker or the single one) adds its files' CPU (its own plus the
processes its tests started and waited for) to a JSON file per process next to the report
path; ``python bench/pytest_cpu.py /tmp/cpu.json`` merges them and prints the files, most
expensive first, with the total and the ideal two-worker makespan (the total split evenly).
A process a test does not wait for itself (a fork server's workers: ``verify --jobs``,
``fresh_process`` tests) is not counted, so those files read low.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections import defaultdict

import pytest


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def pytest_addoption(parser):
    parser.addoption("--cpu-report", default=None, help="write per-file CPU seconds next to this path")


_per_file: dict[str, float] = defaultdict(float)


@pytest.hookimpl(tryfirst=True)   # before the fixtures it sets up
def pytest_runtest_setup(item):
    item._cpu_start = _cpu()


def pytest_runtest_makereport(item, call):
    if call.when == "teardown" and hasattr(item, "_cpu_start"):
        _per_file[item.nodeid.split("::")[0]] += _cpu() - item._cpu_start


def pytest_sessionfinish(session):
    path = session.config.getoption("--cpu-report")
    if not path:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"{path}.{worker}", "w") as f:
        json.dump(dict(_per_file), f)


def main(path: str) -> None:
    folder, base = os.path.split(os.path.abspath(path))
    total: dict[str, float] = defaultdict(float)
    for name in os.listdir(folder):
        if name.startswith(base + "."):
            for k, v in json.load(open(os.path.join(folder, name))).items():
                total[k] += v
    rows = sorted(total.items(), key=lambda kv: -kv[1])
    for k, v in rows:
        print(f"{v:8.1f}  {k}")
    s = sum(total.values())
    print(f"{s:8.1f}  total CPU s; ideal 2-worker makespan {s / 2:.0f} s; largest file {rows[0][1]:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1])
