"""The replay layer (specbound.replay): one result type and one classification of what a
launch did, which the kernel proofs, the fuzz and the audit all read.  Each verdict is
produced here by a tiny kernel that does exactly that fault."""

from __future__ import annotations

import pytest
import torch

from specbound import kernels  # before triton: it may set TRITON_INTERPRET

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from specbound.replay import FAULTS, VERDICTS, Replay, checked_launch, run  # noqa: E402

pytestmark = pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels are compiled: no interpreter")


@triton.jit
def _store(x_ptr, off, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + off + i, i, mask=i < n)


@triton.jit
def _all_store_cell_zero(x_ptr):
    tl.store(x_ptr, tl.program_id(0))


@triton.jit
def _assert_small(x_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.device_assert(tl.load(x_ptr + i) < 3, "value too large")


@triton.jit
def _add_int32(x_ptr, y_ptr, out_ptr):
    tl.store(out_ptr, tl.load(x_ptr) + tl.load(y_ptr))


def test_each_fault_gets_its_verdict():
    x = torch.zeros(8, dtype=torch.int64)
    assert checked_launch(lambda: _store[(1,)](x, 0, 8, BLOCK=8)) is None
    oob = checked_launch(lambda: _store[(1,)](x, 4, 8, BLOCK=8), {"off": 4}, kernel="_store")
    assert (oob.verdict, oob.inputs, oob.kernel) == ("oob", {"off": 4}, "_store") and oob.fault
    assert " at address 0x" not in oob.detail        # the host address changes every run
    assert checked_launch(lambda: _all_store_cell_zero[(2,)](x)).verdict == "race"
    big = torch.tensor([1, 2, 5, 0], dtype=torch.int64)
    assert checked_launch(lambda: _assert_small[(1,)](big, BLOCK=4)).verdict == "assert"
    a, b = torch.tensor([2**31 - 1], dtype=torch.int32), torch.tensor([1], dtype=torch.int32)
    wrap = checked_launch(lambda: _add_int32[(1,)](a, b, torch.zeros(1, dtype=torch.int32)))
    assert wrap.verdict == "wrap" and "overflow" in wrap.detail


def test_a_crash_is_raised_unless_asked_for():
    """A replay whose machinery crashes must not read as a verdict about the kernel."""
    def crash():
        raise KeyError("no such tensor")
    with pytest.raises(KeyError):
        checked_launch(crash)
    got = checked_launch(crash, catch_errors=True)
    assert got.verdict == "error" and "KeyError" in got.detail and got.fault


def test_run_compares_only_a_clean_launch():
    x = torch.zeros(8, dtype=torch.int64)
    seen = []

    def compare():
        seen.append(x.clone())
        return None if x[3] == 3 else "cell 3 differs"
    assert run(lambda: _store[(1,)](x, 0, 8, BLOCK=8), {}, kernel="k", compare=compare).verdict == "none"
    x.zero_()
    assert run(lambda: _store[(1,)](x, 0, 3, BLOCK=8), {}, kernel="k", compare=compare).verdict == "output"
    assert len(seen) == 2
    assert run(lambda: _store[(1,)](x, 4, 8, BLOCK=8), {}, kernel="k", compare=compare).verdict == "oob"
    assert len(seen) == 2, "an out-of-bounds launch's outputs are not compared"


def test_verdicts_are_closed():
    assert set(FAULTS) < set(VERDICTS) and {"output", "none"} <= set(VERDICTS) - set(FAULTS)
    with pytest.raises(ValueError, match="verdict must be one of"):
        Replay("overflow", "not a verdict")
