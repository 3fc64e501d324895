"""The bounds-checked interpreter: broken launches are reported, never executed.

The raw kernels are launched here with deliberately wrong host sizing (an output one
row too small, a kv row width without the topk factor, a prefix sum far past the
buffer); the checked interpreter must raise OutOfBoundsAccess naming the kernel,
program, lane and tensor, before the access happens (the memory around the view is
unchanged and the process does not crash).
"""

from __future__ import annotations

import random

import pytest
import torch

from specbound import kernels, spec  # before triton: it may set TRITON_INTERPRET

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from specbound.kernels import OutOfBoundsAccess, checked_interpreter
from specbound.kernels.draft_kv import draft_kv_kernel, kv_blocks
from specbound.kernels.tree_build import build_tree_kernel, tree_blocks
from specbound.reference.samples import random_kv_batch, random_tree_batch
from specbound.spec import TreeMaskMode

pytestmark = pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels are compiled: no interpreter")


@triton.jit
def _poke(x_ptr, off, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + off + i, i, mask=i < n)


@triton.jit
def _peek(x_ptr, y_ptr, off, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + off + i))


@triton.jit
def _assert_small(x_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.device_assert(tl.load(x_ptr + i) < 3, "value too large")


@triton.jit
def _atomic(x_ptr, off, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.atomic_add(x_ptr + off + i, i)


def _tree_launch(batch, *, topk, depth, n, mode, positions=None, prefix=None, tree_mask=None):
    """Launch build_tree_kernel directly, as the wrapper would, with overridable buffers."""
    pl, sel, seq = batch
    bs = seq.shape[0]
    prefix = prefix if prefix is not None else torch.tensor(spec.prefix_sums(seq.tolist())[:-1])
    if tree_mask is None:
        numel = spec.mask_batch_numel(mode, bs, n, int(seq.sum()))
        tree_mask = torch.zeros(numel, dtype=kernels.tree_build.validation.mask_dtype(mode, n))
    positions = positions if positions is not None else torch.zeros(bs * n, dtype=torch.int64)
    outs = [torch.zeros(bs, n, dtype=torch.int64) for _ in range(3)]
    block_b, nodes = tree_blocks(bs, n)
    build_tree_kernel[(triton.cdiv(bs, block_b),)](
        pl, sel, seq, prefix, tree_mask, positions, *outs,
        bs, topk, spec.parent_list_width(topk, depth), spec.selected_index_width(n), n,
        MODE=int(mode), DEPTH=depth, BLOCK_B=block_b, NODES=nodes)
    return tree_mask, positions, outs


def test_output_one_row_too_small_is_reported_before_the_write(checked):
    rng = random.Random(1)
    bs, k, d, n = 5, 4, 5, 8
    batch = random_tree_batch(rng, bs, k, d, n)
    backing = torch.full((bs * n + 64,), -9, dtype=torch.int64)
    short = backing[: (bs - 1) * n]              # one request's row too small
    with pytest.raises(OutOfBoundsAccess) as info:
        _tree_launch(batch, topk=k, depth=d, n=n, mode=TreeMaskMode.QLEN_ONLY, positions=short)
    err = info.value
    assert err.kernel == "build_tree_kernel" and err.nearest == "positions_ptr"
    assert err.past_end == 0 and err.program_id[0] == 0
    assert err.num_bad_lanes == n and isinstance(err, IndexError)
    assert "positions_ptr" in str(err) and "build_tree_kernel" in str(err)
    # checked before the access: the memory just past the view is untouched
    assert (backing[(bs - 1) * n:] == -9).all()


def test_load_past_an_input_is_reported(checked):
    x = torch.arange(8, dtype=torch.int32)
    y = torch.zeros(8, dtype=torch.int32)
    with pytest.raises(OutOfBoundsAccess) as info:
        _peek[(1,)](x[:6], y, 0, BLOCK=8)
    assert info.value.op.startswith("load") and info.value.lane == (6,)
    assert info.value.nearest == "x_ptr" and info.value.past_end == 0
    with pytest.raises(OutOfBoundsAccess) as info:
        _peek[(1,)](x, y, -3, BLOCK=8)
    assert info.value.before_start == 3 and info.value.lane == (0,)
    assert (y == 0).all()


def test_kv_width_without_topk_factor_is_reported(checked):
    """sglang #27338: the CUDA-graph row sized num_seqs*C instead of num_seqs*K*C."""
    k, steps, c = 4, 3, 16
    rng = random.Random(2)
    batch = random_kv_batch(rng, 2, k, steps, 1, seq_lens=[12, 13])
    seq = batch.seq_lens.tolist()
    bad_width = 2 * c                                       # the factor K dropped
    good_width = spec.draft_kv_indices_buffer_width(2, k, c)
    assert spec.draft_kv_indices_used_len(sum(seq), k, 2 * k, steps) > bad_width
    assert spec.draft_kv_indices_used_len(sum(seq), k, 2 * k, steps) <= good_width
    # The wrapper refuses the buffer before launching ...
    with pytest.raises(spec.SpecArgumentError):
        kernels.draft_decode_kv_indices(*batch, topk=k, num_steps=steps,
                                        kv_indices=torch.zeros(steps, bad_width, dtype=torch.int32))
    assert not checked.launches
    # ... and a raw launch with that host sizing is caught by the checked interpreter.
    backing = torch.full((steps * bad_width + 4096,), -1, dtype=torch.int32)
    kv = backing[: steps * bad_width].view(steps, bad_width)
    indptr = torch.zeros(steps, 2 * k + 1, dtype=torch.int32)
    prefix = torch.tensor(spec.prefix_sums(seq)[:-1])
    block_b, pairs, st, block_c = kv_blocks(2, k, steps)
    with pytest.raises(OutOfBoundsAccess) as info:
        draft_kv_kernel[(triton.cdiv(2, block_b),)](
            batch.req_pool_indices, batch.req_to_token, batch.seq_lens, prefix, kv, indptr,
            2, k, steps, 1, bad_width, indptr.shape[1], batch.req_to_token.stride(0), 1,
            BLOCK_B=block_b, PAIRS=pairs, STEPS=st, BLOCK_C=block_c)
    assert info.value.kernel == "draft_kv_kernel" and info.value.nearest == "kv_indices_ptr"
    assert (backing[steps * bad_width:] == -1).all()


@pytest.mark.parametrize("prefix_value", [2**31, 2**40])
def test_far_out_of_range_store_is_reported_with_its_64bit_offset(checked, prefix_value):
    """A FULL_MASK prefix sum far past the buffer: n*P[b] is 2^34 or 2^43 cells away.
    The report (not a segfault) gives the exact 64-bit address, so no offset wrapped to 32
    bits (with 2^31, an int32 product n*P would wrap to 0 and land *inside* the buffer),
    and names the argument the pointer came from however far away the address lies."""
    n, k, d = 8, 4, 5
    batch = random_tree_batch(random.Random(4), 1, k, d, n, max_seq_len=10)
    s = int(batch.seq_lens[0])
    mask = torch.zeros(spec.mask_batch_numel(TreeMaskMode.FULL_MASK, 1, n, s), dtype=torch.bool)
    with pytest.raises(OutOfBoundsAccess) as info:
        _tree_launch(batch, topk=k, depth=d, n=n, mode=TreeMaskMode.FULL_MASK, tree_mask=mask,
                     prefix=torch.tensor([prefix_value]))
    err = info.value
    first_cell = spec.mask_tree_cell(TreeMaskMode.FULL_MASK, 0, 0, 0, n, s, prefix_value)
    assert err.kernel == "build_tree_kernel" and err.op.startswith("store")
    assert err.address == mask.data_ptr() + first_cell   # bool cells are one byte
    assert err.lane == (0, 0, 0)
    assert (err.argument, err.past_end) == ("tree_mask_ptr", first_cell - mask.numel())
    assert err.source_text == "tl.store(tree_mask_ptr + cell, marks, mask=ok3)"
    assert not mask.any()


def test_far_store_of_a_plain_kernel(checked):
    x = torch.zeros(8, dtype=torch.int32)
    with pytest.raises(OutOfBoundsAccess) as info:
        _poke[(3,)](x, 2**40, 8, BLOCK=8)
    assert info.value.past_end == 2**40 - 8 and info.value.num_bad_lanes == 8
    with pytest.raises(OutOfBoundsAccess):
        _poke[(1,)](x, -2**40, 8, BLOCK=8)
    assert (x == 0).all()


def test_atomics_are_checked_and_recorded(checked):
    x = torch.zeros(8, dtype=torch.int32)
    _atomic[(1,)](x, 0, BLOCK=8)
    assert x.tolist() == list(range(8))
    assert checked.written("_atomic") == {"x_ptr": set(range(8))}
    with pytest.raises(OutOfBoundsAccess):
        _atomic[(1,)](x, 4, BLOCK=8)
    assert x.tolist() == list(range(8))


def test_masked_lanes_are_not_checked(checked):
    x = torch.zeros(4, dtype=torch.int32)
    _poke[(1,)](x, 0, 4, BLOCK=8)        # lanes 4..7 are masked off
    assert checked.written("_poke") == {"x_ptr": {0, 1, 2, 3}}


def test_device_assert_fires_only_while_checked():
    data = torch.arange(8, dtype=torch.int32)
    with checked_interpreter():
        with pytest.raises(AssertionError, match="value too large"):
            _assert_small[(1,)](data, BLOCK=8)
    _assert_small[(1,)](data, BLOCK=8)   # off again: Triton's default


def test_hooks_are_removed_and_nesting_works():
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder if hasattr(interpreter, "interpreter_builder") else None
    x = torch.zeros(4, dtype=torch.int32)
    with checked_interpreter(record_footprint=True) as outer:
        with checked_interpreter() as inner:
            _poke[(1,)](x, 0, 4, BLOCK=4)
        assert inner.launches and outer.launches
        with pytest.raises(OutOfBoundsAccess):  # still checked after the inner block ended
            _poke[(1,)](x, 1, 4, BLOCK=4)
    assert outer.written() == {"x_ptr": {0, 1, 2, 3}}
    if builder is not None:
        assert "create_masked_store" not in vars(builder) and "create_addptr" not in vars(builder)
        assert not builder.options.debug
    assert not hasattr(interpreter._implicit_cvt, "__wrapped__")


def test_lane_bound_smaller_than_the_tree_trips_the_host_contract_assert(checked):
    """NODES < n would silently drop rows; checked, the kernel's device_assert fires."""
    batch = random_tree_batch(random.Random(6), 2, 4, 5, 8)
    out = [torch.zeros(2, 8, dtype=torch.int64) for _ in range(3)]
    with pytest.raises(AssertionError, match="NODES < num_draft_tokens"):
        build_tree_kernel[(1,)](
            *batch, torch.zeros(2, dtype=torch.int64), torch.zeros(128, dtype=torch.bool),
            torch.zeros(16, dtype=torch.int64), *out, 2, 4, spec.parent_list_width(4, 5),
            spec.selected_index_width(8), 8, MODE=1, DEPTH=5, BLOCK_B=2, NODES=4)


def test_conflicting_writes_are_per_launch_and_per_program():
    """Two programs of one launch storing one cell is a race on a GPU; the same cell stored
    by two launches (ordered on a stream) is not."""
    x = torch.zeros(8, dtype=torch.int32)
    with checked_interpreter(record_footprint=True) as session:
        _poke[(2,)](x, 0, 4, BLOCK=4)  # both programs store cells 0..3
    assert session.conflicting_writes() == "_poke: x_ptr[0] stored by programs (0, 0, 0) and (1, 0, 0)"
    with checked_interpreter(record_footprint=True) as session:
        _poke[(1,)](x, 0, 4, BLOCK=4)
        _poke[(1,)](x, 2, 4, BLOCK=4)  # overlaps the first launch at cells 2, 3
    assert session.conflicting_writes() is None
    assert session.written("_poke")["x_ptr"] == set(range(6))


def _patched_names(patch_builtin, pkg) -> list:
    from triton.runtime import interpreter as mod
    scope = mod._LangPatchScope()
    patch_builtin(pkg, mod.interpreter_builder, scope)
    names = [name for _, name, _ in scope._changes]
    scope.restore()
    return names


def test_the_listed_builtin_patch_patches_what_tritons_search_finds():
    """kernels._compat lists each package's builtins once; it must patch exactly the
    attributes Triton's own search patches, outside a launch and inside one (where the
    launch has patched them already, so neither patches them again)."""
    from triton.runtime import interpreter as mod
    listed = mod._patch_builtin
    if getattr(listed, "__wrapped__", None) is None:
        pytest.skip("this Triton release's builtin patch is not listed (kernels._compat)")
    packages = (tl, tl.tensor, tl.math, tl.core, tl.core.tensor_descriptor_base)
    # (tl.core may be patched already: Triton's helper calls leave their patches in place)
    assert _patched_names(listed, tl), "no builtin of triton.language found"
    for pkg in packages:
        assert _patched_names(listed, pkg) == _patched_names(listed.__wrapped__, pkg), pkg
    outer = mod._patch_lang(_poke.fn)   # as a launch leaves them while its kernel runs
    try:
        for pkg in packages:
            assert _patched_names(listed, pkg) == _patched_names(listed.__wrapped__, pkg), pkg
    finally:
        outer.restore()
