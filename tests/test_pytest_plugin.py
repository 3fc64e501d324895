"""The plugin's options refuse bad values by name (a typo must not silently run a zero budget)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("value, complaint", [("-1", "must be > 0, got -1.0"), ("lots", "must be a number, got 'lots'")])
def test_a_bad_fuzz_scale_is_refused_naming_the_option(value, complaint):
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", f"--specbound-fuzz-scale={value}",
                          "tests/test_reference_samples.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 4, run.stdout + run.stderr   # pytest's usage error
    assert f"--specbound-fuzz-scale {complaint}" in run.stderr



def test_a_forking_test_leaves_an_xdist_worker_for_a_fresh_process(monkeypatch):
    """execnet's threads are invisible to ``threading``: an xdist worker must count as threaded
    (a fork there hung the suite), the fresh run it starts must not (it would start another)."""
    from specbound import pytest_plugin

    monkeypatch.delenv("SPECBOUND_FRESH_PROCESS", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert pytest_plugin._other_threads()
    monkeypatch.setenv("SPECBOUND_FRESH_PROCESS", "1")
    assert not pytest_plugin._other_threads()
