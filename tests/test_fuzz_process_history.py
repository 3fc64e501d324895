"""A seeded or derandomized run checks the same cases whatever the process did before.

Hypothesis draws, now and then, a constant found in the source of the "local" modules
imported so far; a worker of ``specbound verify`` that ran another check first (and so
imported more of specbound) drew other cases for the same check.  Here a module with a
constant inside the drawn range is imported between two runs of the same seed.  (The
same-seed tests of test_fuzz_seed.py could not see it: their two runs follow the same
imports, and draw two or three cases a property, rarely one of the pool's.)"""

from __future__ import annotations

import importlib
import json
import sys

import pytest
from hypothesis import strategies as st

from specbound.fuzz.runner import run_property

LOW = 7_340_000                    # a range no specbound constant falls in


class _Case(list):
    def to_json(self) -> str:
        return json.dumps(self)


CASES = st.lists(st.integers(LOW, LOW + 999), min_size=5, max_size=5).map(_Case)


def _digest(**seeding) -> str:
    res = run_property("history", lambda case: None, CASES, max_examples=60, use_database=False, **seeding)
    assert res.examples == 60 and not res.failures
    return res.cases_digest


def _import_local_module(tmp_path, name: str, value: int) -> None:
    """Import a module from outside site-packages (local, to Hypothesis) holding ``value``;
    it stays in ``sys.modules``: Hypothesis looks for new modules only when their count grew."""
    (tmp_path / f"{name}.py").write_text(f"EDGE = {value}\n")
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


# a new module and constant per case: Hypothesis reads each module once, keeps each constant
@pytest.mark.parametrize("seeding, edge", [(dict(seed=7), LOW + 500), (dict(derandomize=True), LOW + 501)],
                         ids=["seed", "derandomize"])
def test_cases_do_not_depend_on_modules_imported_before(tmp_path, seeding, edge):
    before = _digest(**seeding)
    _import_local_module(tmp_path, f"sb_history_{edge}", edge)
    assert _digest(**seeding) == before
