"""Hypothesis profiles and the example database of specbound's fuzzers.

Profiles (register with :func:`register_profiles`, pick with :func:`load_profile`):

* ``ci``: bounded and deterministic (``derandomize=True``: the same examples on every
  run of the same code, no database, since Hypothesis ties derandomize to
  ``database=None``), no deadline (interpreted kernels are slow and their first launch
  compiles nothing but still parses the kernel), ``too_slow`` health check off.  The
  default whenever the ``CI`` environment variable is set.
* ``dev``: the local default; the same budget as ``ci`` but random, with the example
  database switched on, so a failure found once is replayed first on the next run.
* ``deep``: long runs (``specbound fuzz --profile deep`` or
  ``pytest --hypothesis-profile=deep``): many examples, database on.

Example database: ``<repo>/.hypothesis/examples`` (the ``.hypothesis/`` folder of the
checkout, already ignored by git), or the folder passed to :func:`load_profile`
(``specbound fuzz --database DIR``, ``pytest --specbound-db DIR``).  When specbound is
not run from a checkout, ``./.hypothesis/examples`` of the current folder.

Budgets: every property costs differently (the reference runs in about a millisecond
per request, the interpreted kernels in tens of milliseconds per launch), so tests ask
:func:`budget` for their example count by cost class instead of hard-coding one
(through ``specbound.pytest_plugin.fuzz_budget``, which applies
``--specbound-fuzz-scale``).
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from specbound.spec import SpecArgumentError

PROFILES = ("ci", "dev", "deep")

# Examples per property by cost class ("cheap": spec + reference only; "kernel": one or
# two interpreted launches per example; "stateful": one state-machine run of several
# launches per example).
_BUDGETS = {
    "ci": {"cheap": 120, "kernel": 30, "stateful": 40},
    "dev": {"cheap": 120, "kernel": 30, "stateful": 40},
    "deep": {"cheap": 20_000, "kernel": 2_000, "stateful": 300},
}

def database_path() -> Path:
    """Default folder of the example database (see the module docstring)."""
    here = Path(__file__).resolve()
    root = here.parents[2]
    if (root / "pyproject.toml").exists() and (root / "specbound").is_dir():
        return root / ".hypothesis" / "examples"
    return Path.cwd() / ".hypothesis" / "examples"


def register_profiles(database: str | Path | None = None) -> None:
    """Register ``ci``, ``dev`` and ``deep``; ``dev`` and ``deep`` keep their examples in
    ``database`` (default :func:`database_path`)."""
    db = DirectoryBasedExampleDatabase(str(database or database_path()))
    common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                        HealthCheck.filter_too_much],
                  stateful_step_count=8)
    settings.register_profile("ci", derandomize=True, database=None, print_blob=True,
                              max_examples=_BUDGETS["ci"]["kernel"], **common)
    settings.register_profile("dev", database=db, max_examples=_BUDGETS["dev"]["kernel"], **common)
    settings.register_profile("deep", database=db, max_examples=_BUDGETS["deep"]["kernel"],
                              **{**common, "stateful_step_count": 20})


def default_profile() -> str:
    """``ci`` when the CI variable is set, else ``dev`` (``HYPOTHESIS_PROFILE`` wins)."""
    chosen = os.environ.get("HYPOTHESIS_PROFILE")
    if chosen:
        return chosen
    return "ci" if os.environ.get("CI") else "dev"


def load_profile(name: str | None = None, *, database: str | Path | None = None) -> str:
    """Register the profiles (example database in ``database``) and load ``name``
    (default: :func:`default_profile`)."""
    register_profiles(database)
    name = name or default_profile()
    if name not in PROFILES:
        raise SpecArgumentError("--profile", f"unknown Hypothesis profile {name!r}; known: {', '.join(PROFILES)}")
    settings.load_profile(name)
    return name


def active_profile() -> str:
    """Name of the loaded profile (``dev`` if none of ours is loaded)."""
    current = settings.get_current_profile_name()
    return current if current in PROFILES else "dev"


def budget(cost: str, profile: str | None = None, *, scale: float = 1.0) -> int:
    """Examples per property of cost class ``cost`` under ``profile`` (default: active),
    times ``scale`` (e.g. 0.2 for a smoke run; ``specbound verify`` runs 5x)."""
    return max(1, int(_BUDGETS[profile or active_profile()][cost] * scale))

