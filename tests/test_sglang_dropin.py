"""specbound.sglang's drop-ins against sglang's own kernels, launched the same way.

* the draft kv kernel: sglang's Triton ``generate_draft_decode_kv_indices`` read from the
  installed release by path and run under the checked interpreter, paged and unpaged, with
  both grid specializations (``NUM_STEPS = 0`` and token blocks);
* the tree build: sglang's Triton port (``spec_tree.py``, FULL_MASK and QLEN_ONLY) under the
  checked interpreter, and sglang's CUDA kernels compiled for the CPU under ASan/UBSan
  (``specbound.audit.cuda``, all three layouts), each with the retrive outputs as three views
  of one ``(3, bs, n)`` buffer, as sglang allocates them.

Every buffer is pre-filled with junk where sglang's caller leaves it uninitialised, so a cell
written by one side and not the other shows.  Every refusal has a test, and the planted-bug
tests show the checks are what makes the refusals (and the equality) hold.  Tests that need
sglang skip without it (``pip install --no-deps sglang==0.5.23``); the CUDA comparison skips
without g++ and the sanitizer runtimes.
"""

from __future__ import annotations

import ast
import inspect
import random
import types
from pathlib import Path

import pytest
import torch

import specbound.sglang
from specbound import spec
from specbound.reference import samples
from specbound.replay import sglang as sglang_replay
from specbound.replay.checked import checked_launch
from specbound.spec import TreeMaskMode
from specbound.sglang import build_tree_kernel_efficient, generate_draft_decode_kv_indices

FULL, QLEN, BITPACK = TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY, TreeMaskMode.QLEN_ONLY_BITPACKING
KV_SOURCE = "kernels/ops/speculative/cache_locs.py"
TREE_TRITON_SOURCE = "kernels/ops/speculative/spec_tree.py"
TREE_OP_SOURCE = "kernels/ops/speculative/tree.py"
JUNK = -7


@pytest.fixture(scope="module")
def sglang_root() -> Path:
    from specbound.audit.locate import NotInstalled, locate
    try:
        return locate().root
    except NotInstalled:
        pytest.skip("sglang is not installed (pip install --no-deps sglang==0.5.23)")


@pytest.fixture(scope="module")
def sglang_kv(sglang_root):
    return sglang_replay.load_kernel(str(sglang_root / KV_SOURCE), sglang_replay.KV_KERNEL)


@pytest.fixture(scope="module")
def sglang_tree_triton(sglang_root):
    return sglang_replay.load_kernel(str(sglang_root / TREE_TRITON_SOURCE), sglang_replay.TREE_KERNEL)


def refused(call, argument: str, *fragments: str):
    """``call()`` raises a ValueError naming ``argument`` whose message holds every fragment."""
    with pytest.raises(ValueError) as err:
        call()
    assert err.value.argument == argument, str(err.value)
    for fragment in fragments:
        assert fragment in str(err.value), str(err.value)
    return err.value


def _function_params(path: Path, name: str) -> list[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return [a.arg for a in node.args.args]
    raise LookupError(f"no {name} in {path}")


# --- signatures and mode values, read from sglang's source ------------------------------------

def test_signatures_are_sglangs(sglang_root):
    ours = list(inspect.signature(build_tree_kernel_efficient).parameters)
    assert ours == _function_params(sglang_root / TREE_OP_SOURCE, "build_tree_kernel_efficient")
    theirs = _function_params(sglang_root / KV_SOURCE, sglang_replay.KV_KERNEL)
    launch = list(inspect.signature(specbound.sglang.draft_kv._launch).parameters)
    assert launch[0] == "grid" and launch[1:len(theirs) + 1] == theirs


def test_tree_mask_modes_are_sglangs_integers(sglang_root):
    tree = ast.parse((sglang_root / TREE_TRITON_SOURCE).read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TreeMaskMode")
    values = {s.targets[0].id: ast.literal_eval(s.value) for s in cls.body if isinstance(s, ast.Assign)}
    assert values == {m.name: int(m) for m in TreeMaskMode}
    assert values == {"FULL_MASK": 0, "QLEN_ONLY": 1, "QLEN_ONLY_BITPACKING": 2}


# --- the draft kv kernel -------------------------------------------------------------------------

def kv_launch(seed: int, *, num_seqs=3, topk=3, num_steps=4, page=1, blocks=0, dtype=torch.int32, slack=5):
    """``(grid, args, kwargs)`` of one launch as sglang's backends make it, on junk-filled
    buffers (kv_indptr's entry 0 zero, as sglang's torch.zeros buffer)."""
    rng = random.Random(seed)
    rows, r2t, seq = samples.random_kv_batch(rng, num_seqs, topk, num_steps, page, dtype=dtype)
    used = spec.draft_kv_indices_used_len(int(seq.sum()), topk, spec.draft_branches(num_seqs, topk), num_steps)
    kv_indices = torch.full((num_steps, used + slack), JUNK, dtype=dtype)
    kv_indptr = torch.full((num_steps, spec.kv_indptr_row_len(num_seqs, topk) + 2), JUNK, dtype=dtype)
    kv_indptr[:, 0] = 0
    positions = seq.repeat_interleave(topk)
    pow2 = lambda x: 1 << max(x - 1, 0).bit_length()  # noqa: E731 - sglang's next_power_of_2
    args = [rows, r2t, seq, kv_indices, kv_indptr, positions, r2t.shape[1], kv_indices.shape[1], kv_indptr.shape[1],
            pow2(num_seqs), pow2(num_steps), pow2(num_seqs * topk), page, 0, 0]
    grid = (num_steps * (blocks or 1), num_seqs, topk)
    return grid, args, {"NUM_STEPS": num_steps if blocks else 0}


def _clone(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def kv_difference(sglang_kernel, grid, args, kwargs) -> str | None:
    """Both kernels on copies of the same buffers: None when every cell of kv_indices and
    kv_indptr is equal, else where they differ."""
    theirs, ours = _clone(args), _clone(args)
    fault = checked_launch(lambda: sglang_kernel[grid](*theirs, **kwargs), kernel="sglang")
    assert fault is None, fault
    generate_draft_decode_kv_indices[grid](*ours, **kwargs)
    for i, name in ((3, "kv_indices"), (4, "kv_indptr")):
        if not torch.equal(theirs[i], ours[i]):
            cell = int(torch.nonzero(theirs[i].reshape(-1) != ours[i].reshape(-1))[0, 0])
            return f"{name} cell {cell}: sglang {int(theirs[i].reshape(-1)[cell])}, drop-in {int(ours[i].reshape(-1)[cell])}"
    return None


@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("blocks", [0, 2])
@pytest.mark.parametrize("seed", [0, 1])
def test_kv_equals_sglangs_kernel(sglang_kv, page, blocks, seed):
    grid, args, kwargs = kv_launch(seed, page=page, blocks=blocks, topk=1 + seed * 2, num_seqs=2 + seed)
    assert kv_difference(sglang_kv, grid, args, kwargs) is None


def test_kv_equals_sglangs_kernel_int64_and_one_step(sglang_kv):
    grid, args, kwargs = kv_launch(5, num_seqs=4, topk=2, num_steps=1, page=2, dtype=torch.int64, slack=0)
    assert kv_difference(sglang_kv, grid, args, kwargs) is None


def test_kv_undersized_row_is_refused_where_sglang_overruns(sglang_kv):
    grid, args, kwargs = kv_launch(0)
    short = torch.zeros((4, 10), dtype=torch.int32)
    args[3], args[7] = short, 10
    indptr = args[4].clone()
    used = spec.draft_kv_indices_used_len(int(args[2].sum()), 3, 9, 4)
    refused(lambda: generate_draft_decode_kv_indices[grid](*args, **kwargs), "kv_indices",
            f"kv_indices row has 10 entries, this launch writes up to {used} ",
            "(seq_lens_sum*topk + num_seqs*topk*num_steps", "kv_capacity")
    assert not short.any() and torch.equal(args[4], indptr)   # nothing written
    fault = checked_launch(lambda: sglang_kv[grid](*_clone(args), **kwargs), kernel="sglang")
    assert fault is not None and fault.verdict == "oob" and "kv_indices" in fault.detail, fault


@pytest.mark.parametrize("name, value", [("window_size", 8), ("ENTRY_PAGE_SIZE", 4), ("TRANSLATE", True),
                                         ("v2p", torch.zeros(4, dtype=torch.int64))])
def test_kv_unmodelled_read_plans_are_refused_by_name(name, value):
    grid, args, kwargs = kv_launch(0)
    args = args[:13]
    kwargs[name] = value
    before = args[3].clone()
    refused(lambda: generate_draft_decode_kv_indices[grid](*args, **kwargs), name, "not modelled by the spec")
    assert torch.equal(args[3], before)


def test_kv_sink_without_window_is_the_identity(sglang_kv):
    grid, args, kwargs = kv_launch(2)
    args[14] = 3   # sink_size: read only when window_size > 0
    assert kv_difference(sglang_kv, grid, args, kwargs) is None


@pytest.mark.parametrize("index, value, argument, fragment", [
    (9, 2, "bs_upper", "bs_upper = 2 lanes, the launch needs 3"),
    (10, 2, "iter_upper", "iter_upper = 2 lanes, the launch needs 4"),
    (11, 4, "num_tokens_upper", "num_tokens_upper = 4 lanes, the launch needs 9"),
    (6, 7, "req_to_token", "row_stride"),
    (8, 5, "kv_indptr", "kv_indptr_stride"),
])
def test_kv_launch_contract_violations_are_refused(index, value, argument, fragment):
    grid, args, kwargs = kv_launch(0)
    args[index] = value
    refused(lambda: generate_draft_decode_kv_indices[grid](*args, **kwargs), argument, fragment)


def test_kv_wrong_positions_and_dirty_indptr_are_refused():
    grid, args, kwargs = kv_launch(0)
    args[5] = args[5] + 1
    refused(lambda: generate_draft_decode_kv_indices[grid](*args, **kwargs), "positions",
            "positions_are_branch_seq_lens", "seq_len repeated topk times")
    grid, args, kwargs = kv_launch(0)
    args[4][2, 0] = 5
    refused(lambda: generate_draft_decode_kv_indices[grid](*args, **kwargs), "kv_indptr",
            "kv_indptr[2, 0] = 5", "prefilled")


def test_kv_grid_must_split_into_steps_and_blocks():
    grid, args, kwargs = kv_launch(0, blocks=2)
    refused(lambda: generate_draft_decode_kv_indices[(grid[0] + 1, *grid[1:])](*args, **kwargs), "grid",
            "NUM_STEPS * blocks")
    with pytest.raises(TypeError, match=r"generate_draft_decode_kv_indices\[grid\]"):
        generate_draft_decode_kv_indices(*args)


# planted bugs: a drop-in without one of its checks is no longer sglang's kernel, or no longer refuses

def test_planted_positions_check_removed_diverges_from_sglang(sglang_kv, monkeypatch):
    grid, args, kwargs = kv_launch(0)
    args[5] = args[5] + 1
    monkeypatch.setattr(spec, "kv_positions_ok", lambda *a: ())
    diff = kv_difference(sglang_kv, grid, args, kwargs)
    assert diff is not None and diff.startswith("kv_indptr")


def test_planted_capacity_check_removed_goes_red(monkeypatch):
    grid, args, kwargs = kv_launch(0)
    args[3], args[7] = torch.zeros((4, 10), dtype=torch.int32), 10
    monkeypatch.setattr(spec, "kv_capacity_holds", lambda *a: ())
    with pytest.raises((pytest.fail.Exception, AssertionError, IndexError, RuntimeError)):
        refused(lambda: generate_draft_decode_kv_indices[grid](*args, **kwargs), "kv_indices", "kv_indices row")


def test_planted_extension_slot_off_by_one_diverges(sglang_kv, monkeypatch):
    real = spec.kv_extension_read
    monkeypatch.setattr(spec, "kv_extension_read", lambda *a: real(*a) + 1)
    grid, args, kwargs = kv_launch(1, page=4, slack=0)
    args[1] = torch.nn.functional.pad(args[1], (0, 1))   # room for the shifted read
    args[6] = args[1].shape[1]
    assert kv_difference(sglang_kv, grid, args, kwargs) is not None
