"""specbound.sglang's draft kv drop-in against sglang's own Triton kernel
``generate_draft_decode_kv_indices``, read from the installed release by path and run under
the checked interpreter on the same launches: paged and unpaged, both grid specializations
(``NUM_STEPS = 0`` and token blocks), every cell compared, untouched cells included (the
buffers are pre-filled with junk, ``specbound.sglang.testing``).  Also: the drop-ins'
signatures and sglang's tree mask mode values, read from sglang's source.  Every refusal has
a test, and the planted-bug tests show each check is what makes its refusal (or the
equality) hold.  Tests that need sglang skip without it (``pip install --no-deps sglang==0.5.23``).
"""

from __future__ import annotations

import ast
import inspect
import types
from pathlib import Path

import pytest
import torch

import specbound.sglang
from specbound import spec
from specbound.reference import samples
from specbound.engines.sglang import launch as sglang_replay
from specbound.replay import load_kernel
from specbound.replay.checked import checked_launch
from specbound.sglang import build_tree_kernel_efficient, generate_draft_decode_kv_indices
from specbound.sglang.testing import JUNK, clone_args, kv_launch, refused, tree_launch
from specbound.spec import TreeMaskMode

FULL, QLEN, BITPACK = TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY, TreeMaskMode.QLEN_ONLY_BITPACKING
KV_SOURCE = "kernels/ops/speculative/cache_locs.py"
TREE_TRITON_SOURCE = "kernels/ops/speculative/spec_tree.py"
TREE_OP_SOURCE = "kernels/ops/speculative/tree.py"


@pytest.fixture(scope="module")
def sglang_kv(installed_sglang_root):
    return load_kernel(str(installed_sglang_root / KV_SOURCE), sglang_replay.KV_KERNEL)


def _function_params(path: Path, name: str) -> list[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return [a.arg for a in node.args.args]
    raise LookupError(f"no {name} in {path}")


# --- signatures and mode values, read from sglang's source ------------------------------------

def test_signatures_are_sglangs(installed_sglang_root):
    ours = list(inspect.signature(build_tree_kernel_efficient).parameters)
    assert ours == _function_params(installed_sglang_root / TREE_OP_SOURCE, "build_tree_kernel_efficient")
    theirs = _function_params(installed_sglang_root / KV_SOURCE, sglang_replay.KV_KERNEL)
    launch = list(inspect.signature(specbound.sglang.draft_kv._launch).parameters)
    assert launch[0] == "grid" and launch[1:len(theirs) + 1] == theirs


def test_tree_mask_modes_are_sglangs_integers(installed_sglang_root):
    tree = ast.parse((installed_sglang_root / TREE_TRITON_SOURCE).read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TreeMaskMode")
    values = {s.targets[0].id: ast.literal_eval(s.value) for s in cls.body if isinstance(s, ast.Assign)}
    assert values == {m.name: int(m) for m in TreeMaskMode}
    assert values == {"FULL_MASK": 0, "QLEN_ONLY": 1, "QLEN_ONLY_BITPACKING": 2}


# --- the draft kv kernel -------------------------------------------------------------------------

def kv_difference(sglang_kernel, grid, args, kwargs) -> str | None:
    """Both kernels on copies of the same buffers: None when every cell of kv_indices and
    kv_indptr is equal, else where they differ."""
    theirs, ours = clone_args(args), clone_args(args)
    fault = checked_launch(lambda: sglang_kernel[grid](*theirs, **kwargs), kernel="sglang")
    assert fault is None, fault
    generate_draft_decode_kv_indices[grid](*ours, **kwargs)
    for i, name in ((3, "kv_indices"), (4, "kv_indptr")):
        if not torch.equal(theirs[i], ours[i]):
            cell = int(torch.nonzero(theirs[i].reshape(-1) != ours[i].reshape(-1))[0, 0])
            got, want = int(ours[i].reshape(-1)[cell]), int(theirs[i].reshape(-1)[cell])
            return f"{name} cell {cell}: sglang {want}, drop-in {got}"
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
    used = spec.draft_kv_indices_used_len(spec.prefix_sums(args[2].tolist())[-1], 3, 9, 4)
    refused(lambda: generate_draft_decode_kv_indices[grid](*args, **kwargs), "kv_indices",
            f"kv_indices row has 10 entries, this launch writes up to {used} ",
            "(seq_lens_sum*topk + num_seqs*topk*num_steps", "kv_capacity")
    assert not short.any() and torch.equal(args[4], indptr)   # nothing written
    fault = checked_launch(lambda: sglang_kv[grid](*clone_args(args), **kwargs), kernel="sglang")
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


def test_kv_pool_and_table_violations_name_their_spec_condition():
    grid, args, kwargs = kv_launch(0)
    args[0] = args[0].clone()
    args[0][1] = args[1].shape[0]
    refused(lambda: generate_draft_decode_kv_indices[grid](*args, **kwargs), "req_pool_indices",
            f"entry 1 = {args[1].shape[0]} is outside req_to_token's", "[pool_index_in_range:")
    grid, args, kwargs = kv_launch(0)
    args[1] = args[1][:, :-1].contiguous()
    args[6] = args[1].shape[1]
    refused(lambda: generate_draft_decode_kv_indices[grid](*args, **kwargs), "req_to_token",
            "rows too narrow", "[req_to_token_covers_reads:")


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


def test_empty_batches_write_nothing():
    args = tree_launch(0, QLEN, bs=0, slack=2)
    build_tree_kernel_efficient(*args)
    assert args[3].all()
    grid, args, kwargs = kv_launch(0)
    before = args[3].clone()
    generate_draft_decode_kv_indices[(grid[0], 0, grid[2])](*args, **kwargs)
    assert torch.equal(args[3], before)


def test_int32_offset_checks_are_wired(monkeypatch):
    """The int32 conditions cannot be met by a buffer this machine allocates; with the limit
    lowered (spec's INT32_LIMIT) an ordinary launch shows that both drop-ins check them."""
    from specbound.spec import conditions
    monkeypatch.setattr(conditions, "INT32_LIMIT", 64)
    refused(lambda: build_tree_kernel_efficient(*tree_launch(0, QLEN)), "tree_mask",
            "sglang's kernel forms every mask offset in a 32-bit int")
    grid, args, kwargs = kv_launch(0, num_seqs=1, topk=1, num_steps=3)   # every argument below 64
    args[2].fill_(30)
    args[5].fill_(30)
    args[1] = samples.req_to_token(args[1].shape[0], 60, torch.int32)
    args[6] = 60
    args[3] = torch.full((3, 40), JUNK, dtype=torch.int32)
    args[7] = 40
    refused(lambda: generate_draft_decode_kv_indices[grid](*args, **kwargs), "kv_indices_stride",
            "row 2 starts at 80", "row_offsets_int32_kv_indices_stride")


def test_readme_kv_swap_on_a_backend_module(sglang_kv, monkeypatch):
    triton_backend = types.ModuleType("triton_backend_stand_in")
    triton_backend.generate_draft_decode_kv_indices = sglang_kv
    monkeypatch.setattr(triton_backend, "generate_draft_decode_kv_indices",
                        specbound.sglang.generate_draft_decode_kv_indices)
    grid, args, kwargs = kv_launch(0)
    args[3], args[7] = torch.zeros((4, 10), dtype=torch.int32), 10
    refused(lambda: triton_backend.generate_draft_decode_kv_indices[grid](*args, **kwargs), "kv_indices",
            "kv_indices row has 10 entries")
