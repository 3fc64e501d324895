"""Shared fixtures for the proof tests: every theorem is run once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def proof_results():
    from specbound.proofs import registry

    results, _seconds = registry.run_all()
    return {r.id: r for r in results}
