"""Shared fixtures for the proof tests: every theorem is run once per session; the installed
sglang's root for the tests of its kernels."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def proof_results():
    from specbound.proofs import registry

    results, _seconds = registry.run_all()
    return {r.id: r for r in results}


@pytest.fixture(scope="module")
def sglang_root():
    """The installed sglang's package folder (read as source text, never imported); the test
    skips without one."""
    from specbound.engines.sglang.locate import NotInstalled, locate
    try:
        return locate().root
    except NotInstalled:
        pytest.skip("sglang is not installed (pip install --no-deps sglang==0.5.23)")
