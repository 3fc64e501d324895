"""specbound's pytest plugin: its command-line options and its fixtures.

Loaded by ``-p specbound.pytest_plugin`` in pyproject's pytest ``addopts`` (so only in
this project's runs, never in another project that has specbound installed).

Options:

* ``--specbound-all``: the kernel theorems over every covered specialization
  (``proofs/test_symexec.py``; ``specbound prove --kernels --all`` on the command line),
  not only the default subset;
* ``--specbound-fuzz-scale X``: multiply every fuzz budget (:func:`fuzz_budget`), e.g.
  0.2 for a smoke run, 10 for a long one;
* ``--specbound-db DIR``: the Hypothesis example database of the ``dev``/``deep``
  profiles (default: ``.hypothesis/examples`` of the checkout).

The Hypothesis profile is ``ci`` when ``CI`` is set, else ``dev``; pytest's own
``--hypothesis-profile`` and ``--hypothesis-seed`` still apply (Hypothesis' plugin reads
them after this one has registered the profiles).

Marker ``fresh_process``: a test that forks (and plants monkeypatches its forked children
must see) runs in a process with no other thread.  Run inside one with other threads (a
pytest-xdist worker's), it is run again, alone, in a fresh ``pytest -n 0`` and passes or
fails with that run: a fork taken while another thread holds a lock can leave the child
waiting on it for ever.

Fixtures: ``checked`` (a footprint-recording checked-interpreter session; skips when the
kernels are compiled), ``cuda_device`` (skips without CUDA and compiled kernels) and
``installed_sglang_root`` (the installed sglang's package folder, read as source text and
never imported; skips without one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from specbound.fuzz.command import positive_float
from specbound.engines.sglang.locate import NotInstalled, locate

_session = {"scale": 1.0}


def pytest_addoption(parser) -> None:
    group = parser.getgroup("specbound")
    group.addoption("--specbound-all", action="store_true", default=False,
                    help="prove the kernel theorems for every covered specialization (minutes), not the default "
                         "subset")
    group.addoption("--specbound-fuzz-scale", type=positive_float("--specbound-fuzz-scale", "a number"), default=1.0, metavar="X",
                    help="multiply every fuzz budget by X (default 1; e.g. 0.2 for a smoke run)")
    group.addoption("--specbound-db", default=None, metavar="DIR",
                    help="Hypothesis example database of the dev/deep profiles (default: .hypothesis/examples "
                         "of the checkout)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    # first: Hypothesis' plugin loads --hypothesis-profile, which must be registered by then
    from specbound.fuzz import profiles
    config.addinivalue_line("markers", "fresh_process: run alone in a process without other threads "
                            "(it forks); see specbound.pytest_plugin")
    _session["scale"] = config.getoption("specbound_fuzz_scale")
    profiles.load_profile(database=config.getoption("specbound_db"))


_FRESH = "SPECBOUND_FRESH_PROCESS"   # set in the fresh run: it runs the test itself, whatever its threads


def _other_threads() -> bool:
    """Whether this process may have a thread besides the caller's.  An xdist worker always has
    (execnet starts its threads below the ``threading`` module, so ``threading.active_count()``
    does not see them); elsewhere the kernel's count of this process's threads says."""
    if os.environ.get(_FRESH):
        return False
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return True
    try:
        return len(os.listdir("/proc/self/task")) > 1
    except OSError:
        return threading.active_count() > 1


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("fresh_process") is None or not _other_threads():
        return None
    node = f"{pyfuncitem.path}::{pyfuncitem.name}"
    run = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-q", "--no-header", node],
                         cwd=pyfuncitem.config.rootpath, capture_output=True, text=True, timeout=900,
                         env={**os.environ, _FRESH: "1"})
    if run.returncode != 0 or " passed" not in run.stdout:
        pytest.fail(f"in a fresh process (exit {run.returncode}):\n{run.stdout[-4000:]}{run.stderr[-2000:]}",
                    pytrace=False)
    return True


def fuzz_budget(cost: str) -> int:
    """Examples for a property of cost class ``cost`` (``profiles.budget``) under the
    loaded profile and ``--specbound-fuzz-scale``."""
    from specbound.fuzz import profiles
    return profiles.budget(cost, scale=_session["scale"])


@pytest.fixture
def checked():
    """A footprint-recording checked-interpreter session; skips when the kernels are compiled."""
    from specbound.kernels import INTERPRETED, checked_interpreter
    if not INTERPRETED:
        pytest.skip("kernels are compiled (CUDA): the checked interpreter does not apply")
    with checked_interpreter(record_footprint=True) as session:
        yield session


@pytest.fixture
def cuda_device():
    """torch.device('cuda') with compiled kernels; skips otherwise."""
    import torch

    from specbound.kernels import INTERPRETED
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    if INTERPRETED:
        pytest.skip("kernels were defined interpreted (TRITON_INTERPRET=1)")
    return torch.device("cuda")


@pytest.fixture(scope="session")
def installed_sglang_root():
    """The installed sglang's package folder (read as source text, never imported); skips
    without one."""
    try:
        return locate().root
    except NotInstalled:
        pytest.skip("sglang is not installed (pip install --no-deps sglang==0.5.23)")
