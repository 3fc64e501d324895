"""VerifyMask: allocation, reuse vs fallback (seed 000), trivial verify, construction contract (seed 001)."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from specbound import spec
from specbound.reference import VerifyMask, build_tree, maybe_create_verify_mask
from specbound.reference.samples import random_tree_batch
from specbound.spec import SpecArgumentError, SpecTypeError, TreeMaskMode

FULL, QLEN, BITS = TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY, TreeMaskMode.QLEN_ONLY_BITPACKING


def _create(**kw):
    args = {"is_draft_runner": False, "skip_prefill": False, "max_bs": 8, "num_draft_tokens": 8,
            "max_context_len": 64}
    args.update(kw)
    return maybe_create_verify_mask(**args)


@pytest.mark.parametrize("kw", [{"is_draft_runner": True}, {"skip_prefill": True}, {"num_draft_tokens": None},
                                {"num_draft_tokens": 0}])
def test_none_where_sglang_has_no_mask(kw):
    assert _create(**kw) is None


def test_sizes_and_layouts():
    full = _create()
    assert full.mode is FULL and full.buffer.dtype == torch.bool
    assert full.buffer.numel() == 8 * 8 * (64 + 8)           # per request the worst case n*(C+n)
    compact = _create(is_read=False)
    assert compact.mode is QLEN and compact.buffer.numel() == 8 * 8 * 8 and not compact.is_read
    bits = _create(read_mode=BITS)
    assert bits.buffer.dtype == torch.uint8 and bits.buffer.numel() == 8 * 8
    assert _create(read_mode="QLEN_ONLY").mode is QLEN
    with pytest.raises(SpecArgumentError) as e:
        _create(read_mode=BITS, num_draft_tokens=33, max_bs=1)
    assert e.value.argument == "num_draft_tokens"
    assert (full.max_bs, full.num_draft_tokens, full.max_context_len) == (8, 8, 64)


def test_record_is_frozen():
    vm = _create()
    with pytest.raises(dataclasses.FrozenInstanceError):
        vm.max_bs = 48
    bigger = dataclasses.replace(vm, max_bs=4)    # resizing means a new record
    assert bigger.fits(4) and not bigger.fits(5) and vm.fits(8)


def test_seed_000_batch_of_48_falls_back():
    # Captured at max_bs 8 (--cuda-graph-max-bs-decode 8); an eager batch of 48 arrives.
    vm = _create()
    assert vm.fits(8) and not vm.fits(9) and not vm.fits(48)
    rng = np.random.default_rng(0)
    pl, sel, sl = random_tree_batch(rng, 48, 4, 4, 8, max_seq_len=60)
    buf = vm.buffer_for_batch(48, int(sl.sum()))
    assert buf.untyped_storage().data_ptr() != vm.buffer.untyped_storage().data_ptr()
    assert buf.numel() == int(sl.sum()) * 8 + 48 * 64      # exactly the batch's extent
    build_tree(pl, sel, sl, topk=4, depth=4, num_draft_tokens=8, mode=vm.mode, tree_mask=buf)
    # The bug itself: reusing the captured buffer is refused on the host, nothing written.
    snapshot = vm.buffer.clone()
    with pytest.raises(SpecArgumentError, match="tree_mask: too small"):
        build_tree(pl, sel, sl, topk=4, depth=4, num_draft_tokens=8, mode=vm.mode, tree_mask=vm.buffer)
    assert torch.equal(vm.buffer, snapshot)


@pytest.mark.parametrize("mode", [FULL, QLEN, BITS])
def test_reuse_when_fits_writes_only_the_batch_extent(mode):
    vm = _create(read_mode=mode)
    rng = np.random.default_rng(1)
    pl, sel, sl = random_tree_batch(rng, 5, 4, 4, 8, max_seq_len=64)
    buf = vm.buffer_for_batch(5, int(sl.sum()))
    assert buf is vm.buffer
    sentinel = 0x77 if mode is BITS else True
    buf.fill_(sentinel)
    build_tree(pl, sel, sl, topk=4, depth=4, num_draft_tokens=8, mode=mode, tree_mask=buf)
    extent = spec.mask_batch_numel(mode, 5, 8, int(sl.sum()))
    assert buf[extent:].eq(sentinel).all()
    fresh = build_tree(pl, sel, sl, topk=4, depth=4, num_draft_tokens=8, mode=mode).tree_mask
    assert torch.equal(buf[:extent], fresh)


def test_fits_rejects_bad_sizes_and_context_overrun():
    vm = _create(max_bs=2)
    with pytest.raises(SpecArgumentError) as e:
        vm.buffer_for_batch(-1, 0)
    assert e.value.argument == "bs"
    with pytest.raises(SpecTypeError):
        vm.fits(True)
    # A batch whose seq_lens exceed max_context_len cannot use the buffer even when bs fits.
    with pytest.raises(SpecArgumentError) as e:
        vm.buffer_for_batch(2, 2 * 64 + 1)
    assert e.value.argument == "seq_lens_sum"


def test_trivial_verify_reuse_and_fallback():
    vm = _create(max_bs=4)
    reused = vm.trivial_verify_mask(3, 50)
    assert reused.numel() == 53 and reused.all()
    assert reused.untyped_storage().data_ptr() == vm.buffer.untyped_storage().data_ptr()
    fresh = vm.trivial_verify_mask(48, 1000)
    assert fresh.numel() == 1048 and fresh.all() and fresh.dtype == torch.bool
    assert fresh.untyped_storage().data_ptr() != vm.buffer.untyped_storage().data_ptr()
    # A compact buffer too small for S + bs is never overrun: a fresh allocation instead.
    compact = _create(is_read=False, max_bs=4)
    out = compact.trivial_verify_mask(4, 500)
    assert out.numel() == 504 and out.all() and compact.buffer.numel() == 4 * 64


# --- construction contract (seed 001) ------------------------------------------------

def test_context_from_model_config():
    vm = _create(max_context_len=None, model_config=SimpleNamespace(context_len=32))
    assert vm.max_context_len == 32 and vm.buffer.numel() == 8 * 8 * 40
    assert _create(max_context_len=32, model_config=SimpleNamespace(context_len=32)).max_context_len == 32
    # An explicit length covers a config that lacks one.
    assert _create(max_context_len=16, model_config=SimpleNamespace()).max_context_len == 16


@pytest.mark.parametrize("kw, cls, argument", [
    ({"max_context_len": None, "model_config": SimpleNamespace()}, SpecArgumentError, "model_config.context_len"),
    ({"max_context_len": None, "model_config": SimpleNamespace(context_len=None)}, SpecArgumentError,
     "model_config.context_len"),
    ({"max_context_len": None, "model_config": SimpleNamespace(context_len=0)}, SpecArgumentError,
     "model_config.context_len"),
    ({"max_context_len": None, "model_config": SimpleNamespace(context_len=2.5)}, SpecTypeError,
     "model_config.context_len"),
    ({"max_context_len": None, "model_config": SimpleNamespace(context_len=True)}, SpecTypeError,
     "model_config.context_len"),
    ({"max_context_len": None}, SpecArgumentError, "max_context_len"),
    ({"max_context_len": 0}, SpecArgumentError, "max_context_len"),
    ({"max_context_len": -5}, SpecArgumentError, "max_context_len"),
    ({"max_context_len": "4096"}, SpecTypeError, "max_context_len"),
    ({"max_context_len": 64, "model_config": SimpleNamespace(context_len=32)}, SpecArgumentError,
     "max_context_len"),
    ({"max_bs": -1}, SpecArgumentError, "max_bs"),
    ({"num_draft_tokens": -1}, SpecArgumentError, "num_draft_tokens"),
    ({"is_read": 1}, SpecTypeError, "is_read"),
    ({"is_draft_runner": None}, SpecTypeError, "is_draft_runner"),
    ({"read_mode": 9}, SpecArgumentError, "read_mode"),
    ({"read_mode": 1.5}, SpecTypeError, "read_mode"),
])
def test_construction_contract_errors(kw, cls, argument):
    with pytest.raises(cls) as e:
        _create(**kw)
    assert not isinstance(e.value, AttributeError)
    assert e.value.argument == argument and str(e.value).startswith(argument)


def test_verify_mask_is_a_plain_record():
    vm = VerifyMask(buffer=torch.zeros(4, dtype=torch.bool), mode=QLEN, max_bs=1, num_draft_tokens=2,
                    max_context_len=8)
    assert vm.is_read and vm.fits(1) and not vm.fits(2)
