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


# --- the tree build --------------------------------------------------------------------------------

def tree_launch(seed: int, mode: TreeMaskMode, *, bs=3, topk=3, depth=3, n=8, shared=True, slack=4,
                junk_mask=False) -> list:
    """The twelve arguments of one ``build_tree_kernel_efficient`` call, pre-filled as sglang's
    caller does (mask True / zero for BITPACKING, retrive_* -1, positions junk), the three
    retrive outputs views of one ``(3, bs, n)`` buffer when ``shared``; the mask has
    ``slack`` cells past the batch (a CUDA-graph buffer is larger than one batch).
    ``junk_mask``: random cells instead (FULL_MASK when sglang skips the fill: torch.empty)."""
    rng = random.Random(seed)
    pl, sel, seq = samples.random_tree_batch(rng, bs, topk, depth, n, max_seq_len=20)
    numel = spec.mask_batch_numel(mode, bs, n, int(seq.sum())) + slack
    dtype = getattr(torch, spec.mask_dtype_name(mode, n))
    mask = torch.zeros(numel, dtype=dtype) if mode is BITPACK else torch.ones(numel, dtype=dtype)
    if junk_mask:
        mask = torch.randint(0, 2, (numel,), generator=torch.Generator().manual_seed(seed)).to(dtype)
    retrive = torch.full((3, bs, n), -1, dtype=torch.int64)
    views = list(retrive) if shared else [retrive[i].clone() for i in range(3)]
    positions = torch.full((bs * n,), JUNK, dtype=torch.int64)
    return [pl, sel, seq, mask, positions, *views, topk, depth, n, int(mode)]


def _outputs(args) -> list[torch.Tensor]:
    return [args[i] for i in range(3, 8)]


def _tree_clone(args) -> list:
    """A copy with the retrive views kept views of one copied buffer when they were."""
    out = _clone(args)
    if args[5]._base is not None and args[5]._base is args[6]._base is args[7]._base:
        base = args[5]._base.clone()
        out[5:8] = list(base)
    return out


def tree_difference(theirs_args, ours_args) -> str | None:
    names = ("tree_mask", "positions", "retrive_index", "retrive_next_token", "retrive_next_sibling")
    for name, a, b in zip(names, _outputs(theirs_args), _outputs(ours_args)):
        if not torch.equal(a, b):
            cell = int(torch.nonzero(a.reshape(-1) != b.reshape(-1))[0, 0])
            return f"{name} cell {cell}: sglang {a.reshape(-1)[cell].item()}, drop-in {b.reshape(-1)[cell].item()}"
    return None


def run_triton_port(kernel, args) -> None:
    """sglang's Triton tree build as its wrapper ``sgl_build_tree_kernel_triton`` launches it."""
    pl, sel, seq, mask, positions, ri, rnt, rns, topk, depth, n, mode = args
    bs = seq.shape[0]
    prefix = torch.cumsum(seq, 0) - seq
    fault = checked_launch(lambda: kernel[(bs,)](
        pl, sel, seq, prefix, mask, positions, ri, rnt, rns, topk=topk, depth=depth, draft_token_num=n,
        tree_mask_mode=mode, batch_size=bs, parent_list_stride=pl.stride(0) if pl.dim() > 1 else pl.shape[0],
        selected_index_stride=sel.stride(0)), kernel="sglang")
    assert fault is None, fault


@pytest.mark.parametrize("mode", [FULL, QLEN])
@pytest.mark.parametrize("seed, shape", [(0, (3, 3, 8)), (1, (2, 4, 10)), (2, (2, 1, 3)), (3, (1, 3, 4))])
def test_tree_equals_sglangs_triton_port(sglang_tree_triton, mode, seed, shape):
    topk, depth, n = shape   # topk = 1: a chain of depth + 1 nodes, as sglang forces
    args = tree_launch(seed, mode, topk=topk, depth=depth, n=n)
    theirs, ours = _tree_clone(args), _tree_clone(args)
    run_triton_port(sglang_tree_triton, theirs)
    build_tree_kernel_efficient(*ours)
    assert ours[5]._base is ours[6]._base is ours[7]._base is not None   # written through the views
    assert tree_difference(theirs, ours) is None


@pytest.fixture(scope="module")
def cuda_session(sglang_root):
    from specbound.audit.cuda import build, check
    from specbound.audit.cuda.harness import Session
    try:
        toolchain = build.probe_toolchain()
    except build.Unavailable as exc:
        pytest.skip(f"the CUDA-on-CPU harness cannot run here: {exc}")
    prep = check.prepare(sglang_root, toolchain)
    if set(prep.kernels) != {"build_tree_efficient", "build_tree_efficient_partial_packed"}:
        pytest.skip(f"this sglang's CUDA tree kernels did not compile: {prep.problems}")
    with Session(prep.library) as session:
        yield prep, session


def run_cuda(cuda_session, args) -> list:
    """sglang's CUDA kernel (the one its host wrapper dispatches ``mode`` to) on the bytes of
    ``args``' pre-filled buffers; returns a copy of ``args`` holding what it wrote."""
    from specbound.audit.cuda.tree import Buffers, make_launch
    from specbound.fuzz.strategies import TreeCase

    prep, session = cuda_session
    pl, sel, seq, mask, positions, ri, rnt, rns, topk, depth, n, mode = args
    case = TreeCase(topk=topk, depth=depth, num_draft_tokens=n, mode=mode, max_context_len=int(seq.max()) + n,
                    seq_lens=seq.tolist(), selected_index=sel.tolist(), parent_list=pl.tolist())
    name = "build_tree_efficient_partial_packed" if mode == int(BITPACK) else "build_tree_efficient"
    tensors = {"parent_list": pl, "selected_index": sel, "seq_lens": seq, "tree_mask": mask, "positions": positions,
               "retrive_index": ri, "retrive_next_token": rnt, "retrive_next_sibling": rns}
    bufs = Buffers({k: t.contiguous().view(torch.uint8).numpy().tobytes() for k, t in tensors.items()},
                   {k: t.element_size() for k, t in tensors.items()})
    out = session.run(make_launch(prep.kernels[name], case, bufs))
    assert out.ok, out.message
    result = _tree_clone(args)
    for i, key in zip(range(3, 8), ("tree_mask", "positions", "retrive_index", "retrive_next_token",
                                    "retrive_next_sibling")):
        got = torch.frombuffer(bytearray(out.buffers[key]), dtype=torch.uint8).view(result[i].dtype)
        result[i].reshape(-1).copy_(got)
    return result


@pytest.mark.parametrize("mode", [FULL, QLEN, BITPACK])
@pytest.mark.parametrize("seed, shape", [(0, (3, 3, 8)), (1, (2, 4, 10)), (4, (4, 3, 20)), (3, (1, 3, 4))])
def test_tree_equals_sglangs_cuda_kernel(cuda_session, mode, seed, shape):
    topk, depth, n = shape
    args = tree_launch(seed, mode, topk=topk, depth=depth, n=n)
    theirs = run_cuda(cuda_session, args)
    ours = _tree_clone(args)
    build_tree_kernel_efficient(*ours)
    assert tree_difference(theirs, ours) is None


def test_tree_full_mask_prefix_left_as_it_was(cuda_session):
    """FULL_MASK without sglang's fill (torch.empty): the prefix columns keep whatever they hold."""
    args = tree_launch(7, FULL, junk_mask=True)
    theirs = run_cuda(cuda_session, args)
    ours = _tree_clone(args)
    build_tree_kernel_efficient(*ours)
    assert tree_difference(theirs, ours) is None and not torch.equal(ours[3], torch.ones_like(ours[3]))


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
    refused(lambda: build_tree_kernel_efficient(*tree_launch(0, QLEN)), "tree_mask bytes of the batch",
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


def test_tree_uint8_mask_of_the_triton_backend_equals_sglang(cuda_session):
    """sglang's op constrains the mask's bytes, not its type: the Triton backend passes uint8."""
    args = tree_launch(6, QLEN)
    args[3] = args[3].to(torch.uint8)
    theirs = run_cuda(cuda_session, args)
    ours = _tree_clone(args)
    build_tree_kernel_efficient(*ours)
    assert ours[3].dtype == torch.uint8 and tree_difference(theirs, ours) is None


@pytest.mark.parametrize("mode, formula", [(FULL, "seq_lens_sum*n + bs*n*n cells"), (QLEN, "bs*n*n cells"),
                                           (BITPACK, "bs*n items")])
def test_tree_undersized_mask_is_refused(mode, formula):
    args = tree_launch(0, mode, slack=0)
    need = args[3].numel()
    args[3] = args[3][:need - 1].clone()
    before = [t.clone() for t in _outputs(args)]
    refused(lambda: build_tree_kernel_efficient(*args), "tree_mask",
            f"has {need - 1} {mode.name}", f"this launch writes up to {need} ({formula}", "output_holds_batch")
    assert all(torch.equal(a, b) for a, b in zip(before, _outputs(args)))


def test_tree_overlapping_retrive_views_are_refused_disjoint_ones_accepted():
    args = tree_launch(0, QLEN)
    bs, n = args[5].shape
    flat = torch.full((3 * bs * n,), -1, dtype=torch.int64)
    # one cell of overlap: retrive_next_token starts on retrive_index's last cell
    args[5:8] = [flat[:bs * n].view(bs, n), flat[bs * n - 1:2 * bs * n - 1].view(bs, n),
                 flat[2 * bs * n:].view(bs, n)]
    refused(lambda: build_tree_kernel_efficient(*args), "retrive_next_token", "overlaps retrive_index in memory",
            "[outputs_disjoint: retrive_next_token overlaps no other output]")
    args[6] = flat[bs * n:2 * bs * n].view(bs, n)
    build_tree_kernel_efficient(*args)   # the same allocation, disjoint views: as sglang passes them


def test_tree_sglang_prefill_contracts_are_refused():
    args = tree_launch(0, QLEN)
    args[6][1, 4] = 0
    refused(lambda: build_tree_kernel_efficient(*args), "retrive_next_token", "cell 12 holds 0, not -1", "prefilled")
    args = tree_launch(0, BITPACK)
    args[3][3] = 8
    refused(lambda: build_tree_kernel_efficient(*args), "tree_mask", "byte 3 is not zero", "prefilled")


def test_tree_malformed_trees_and_bad_arguments_are_refused():
    args = tree_launch(0, FULL)
    args[1][0, 2] = 10_000
    refused(lambda: build_tree_kernel_efficient(*args), "selected_index", "parent index out of range")
    args = tree_launch(0, FULL)
    refused(lambda: build_tree_kernel_efficient(*args[:10], 1025, args[11]), "draft_token_num",
            "at most 1024", "lane_bound_draft_token_num")
    args[1] = args[1].to(torch.int32)
    with pytest.raises(TypeError, match="selected_index: has dtype torch.int32; sglang.s kernel takes int64"):
        build_tree_kernel_efficient(*args)
    args = tree_launch(0, FULL)
    refused(lambda: build_tree_kernel_efficient(*args[:11], 3), "mode", "unknown tree mask mode 3")


# planted bugs: without its check the drop-in is no longer sglang's kernel, or no longer refuses

def test_planted_prefill_check_removed_diverges_from_cuda(cuda_session, monkeypatch):
    args = tree_launch(0, QLEN)
    args[6].fill_(0)    # retrive_next_token not pre-filled: sglang's CUDA kernel reads it
    monkeypatch.setattr(spec, "prefilled_ok", lambda *a: ())
    theirs = run_cuda(cuda_session, args)
    build_tree_kernel_efficient(*args)
    diff = tree_difference(theirs, args)
    assert diff is not None and "retrive_next" in diff, diff


def test_planted_mask_size_check_removed_goes_red(monkeypatch):
    monkeypatch.setattr(spec, "output_holds_ok", lambda *a: ())
    with pytest.raises((pytest.fail.Exception, AssertionError, IndexError, RuntimeError)):
        test_tree_undersized_mask_is_refused(QLEN, "bs*n*n cells")


def test_planted_overlap_check_removed_goes_red(monkeypatch):
    monkeypatch.setattr(spec, "outputs_disjoint_ok", lambda *a: ())
    with pytest.raises((pytest.fail.Exception, AssertionError)):
        test_tree_overlapping_retrive_views_are_refused_disjoint_ones_accepted()


# --- the README's swap ---------------------------------------------------------------------------

def _sglang_caller_module(sglang_root, silent_op) -> types.ModuleType:
    """A stand-in for ``sglang.kernels.ops.speculative.spec_tree`` (sglang needs CUDA to
    import): sglang's own ``build_tree_kernel_efficient_func``, compiled from the installed
    source text, as it runs on a CUDA machine; the op it calls is ``silent_op``."""
    path = sglang_root / TREE_TRITON_SOURCE
    tree = ast.parse(path.read_text(encoding="utf-8"))
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_tree_kernel_efficient_func")
    module = types.ModuleType("spec_tree_stand_in")
    module.__dict__.update(torch=torch, TreeMaskMode=TreeMaskMode, _is_npu=False, _is_xpu=False, _is_cpu=False,
                           _is_cuda=True, _is_hip=False, _is_musa=False, sgl_build_tree_kernel_efficient=silent_op)
    exec(compile(ast.Module(body=[func], type_ignores=[]), str(path), "exec"), module.__dict__)  # noqa: S102
    return module


def test_readme_swap_turns_a_silent_overrun_into_an_error(sglang_root, monkeypatch):
    calls = []
    spec_tree = _sglang_caller_module(sglang_root, lambda *args: calls.append(args))  # the CUDA op: no word
    args = tree_launch(0, FULL, slack=0)
    args[3] = args[3][:-8].clone()           # a tree mask 8 cells short
    spec_tree.build_tree_kernel_efficient_func(*args)
    assert len(calls) == 1                   # sglang's path: nothing said

    monkeypatch.setattr(spec_tree, "sgl_build_tree_kernel_efficient", specbound.sglang.build_tree_kernel_efficient)
    with pytest.raises(ValueError, match=r"tree_mask: has .* this launch writes up to .*output_holds_batch"):
        spec_tree.build_tree_kernel_efficient_func(*args)


def test_readme_kv_swap_on_a_backend_module(sglang_kv, monkeypatch):
    triton_backend = types.ModuleType("triton_backend_stand_in")
    triton_backend.generate_draft_decode_kv_indices = sglang_kv
    monkeypatch.setattr(triton_backend, "generate_draft_decode_kv_indices",
                        specbound.sglang.generate_draft_decode_kv_indices)
    grid, args, kwargs = kv_launch(0)
    args[3], args[7] = torch.zeros((4, 10), dtype=torch.int32), 10
    refused(lambda: triton_backend.generate_draft_decode_kv_indices[grid](*args, **kwargs), "kv_indices",
            "kv_indices row has 10 entries")
