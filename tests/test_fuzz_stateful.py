"""The CUDA-graph scenario: capture at 8, up to 48 running (specbound.fuzz.stateful)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from specbound import kernels
from specbound.fuzz import stateful
from specbound.fuzz.runner import NO_SHRINK
from specbound.kernels import OutOfBoundsAccess
from specbound.pytest_plugin import fuzz_budget

pytestmark = pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels compiled: no checked interpreter")


def test_spec_sizing_survives_growing_and_shrinking_batches():
    run_state_machine_as_test(stateful.CudaGraphMachine, settings=settings(
        max_examples=fuzz_budget("stateful"), stateful_step_count=8))


def test_pre_33127_fits_is_found_and_shrunk_to_a_small_case(monkeypatch):
    # Bound the shrinking by a count, not by seconds: each attempt launches interpreted kernels
    # (shrinking to the end takes ~300 CPU s), and a time bound made the case found depend on
    # the machine's speed.  Five successful shrinks, the same case on every machine.
    import hypothesis.internal.conjecture.engine as engine
    monkeypatch.setattr(engine, "MAX_SHRINKS", 5, raising=True)
    fits = stateful.pre_33127_fits(stateful.mutant_override("VM-FULL-IN-BOUNDS", "MUT-33127-FULL-ALWAYS-FITS", "fits"))
    machine = stateful.machine_with(fits=fits, light=True, name="Pre33127Machine")
    with pytest.raises(OutOfBoundsAccess) as info:
        run_state_machine_as_test(machine, settings=settings(
            max_examples=300, stateful_step_count=8, derandomize=True, database=None,
            suppress_health_check=list(HealthCheck)))
    assert "tree_mask_ptr" in str(info.value)
    trace = machine.last_trace
    capture = trace[0][1]
    assert capture["mode"] == "FULL_MASK" and capture["is_read"] is True or \
        any(step[0] == "switch_is_read" for step in trace)
    running = sum(step[1] for step in trace if step[0] == "admit") - sum(
        step[1] for step in trace if step[0] == "retire")
    assert running > stateful.CAPTURE_BS          # past the capture size ...
    assert len(trace) <= 4                         # ... in a handful of steps


def test_missing_topk_kv_row_is_found():
    """sglang #27338 in the same scenario: the captured kv row sized max_bs*C.  Only finding it
    is asked, so the first failing run is the answer (no shrinking, which replays kernels)."""
    width = stateful.mutant_override("KV-CUDA-GRAPH-COVERS", "MUT-27338-MISSING-TOPK", "draft_kv_indices_buffer_width")
    machine = stateful.machine_with(kv_width=width, name="Missing27338Machine")
    with pytest.raises(OutOfBoundsAccess) as info:
        run_state_machine_as_test(machine, settings=settings(
            max_examples=200, stateful_step_count=6, derandomize=True, database=None,
            suppress_health_check=list(HealthCheck), phases=NO_SHRINK))
    assert "kv_indices_ptr" in str(info.value)
