"""bench/gpu_check.py's timed launches, run here on the CPU under the checked interpreter: the
launches alone (through the same launch plans as the wrappers) must write exactly what the
wrappers return, into buffers poisoned first, so the GPU timing measures the launches a caller
gets and not a hand-written variant of them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from specbound import kernels  # noqa: F401  - before triton: it may set TRITON_INTERPRET
from specbound import spec


def _load(path: Path):
    loader = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


GPU_CHECK = _load(Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py")


def _written(record, outputs) -> list:
    """Per output, the flat cells the launch writes: all of them for the tree build (every cell
    of its outputs), the spec's footprint for the draft kv_indices / kv_indptr."""
    if record["op"] == "build_tree":
        return [None] * len(outputs)
    kv, indptr = outputs
    seq = record["seq_lens"]
    return [spec.kv_indices_cells(seq, record["K"], record["num_steps"], kv.shape[1]),
            spec.kv_indptr_cells(len(seq), record["K"], record["num_steps"], indptr.shape[1])]


@pytest.mark.parametrize("bool_poison", [True, False])
def test_the_timed_launches_write_what_the_wrappers_return(bool_poison):
    # both poisons of the mask: a skipped cell shows whichever value it should have held
    cases = list(GPU_CHECK.timing_cases(torch.device("cpu"), sizes=(1, 3), bool_poison=bool_poison))
    assert {c[0]["op"] for c in cases} == {"build_tree", "draft_kv"} and len(cases) == 2 * 3 + 2 * 2
    for record, wrapper, raw in cases:
        want, got = wrapper(), raw()
        assert len(want) == len(got), record
        for w, g, cells in zip(want, got, _written(record, got)):
            if cells is None:
                assert torch.equal(w, g), record
                continue
            flat_w, flat_g = w.reshape(-1), g.reshape(-1)
            inside = torch.zeros(flat_g.numel(), dtype=torch.bool)
            inside[sorted(cells)] = True
            assert torch.equal(flat_w[inside], flat_g[inside]), record      # the footprint, as the wrapper
            assert bool((flat_g[~inside] == GPU_CHECK.POISON).all()), record  # and nothing else
