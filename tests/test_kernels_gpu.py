"""Compiled kernels on CUDA with guard bands (skipped without CUDA).

Each output lives in the middle of a larger sentinel-filled buffer; after the compiled
launch the sentinel regions must be unchanged, the outputs must equal the reference
(run on CPU copies), and the written footprint, read back by diffing against a second
sentinel, must equal the spec's.
"""

from __future__ import annotations

import random

import pytest
import torch

from specbound import kernels, spec
from specbound import reference as ref
from specbound.kernels.testing import all_equal_to, changed_cells, guarded, signed_view
from specbound.reference.samples import random_kv_batch, random_tree_batch
from specbound.spec import TreeMaskMode

PAD = 4096
SHAPES = [(1, 4, 5), (2, 2, 4), (4, 5, 8), (3, 3, 12), (4, 4, 20), (8, 3, 32)]


def _sentinels(dtype):
    if dtype == torch.bool:
        return (True, False)
    if dtype in (torch.uint8, torch.uint16, torch.uint32):
        return (0xA5, 0x5A)
    return (-7777, -8888)


def _tree_outputs(mode, bs, n, total, device, sentinel_index):
    dtype = ref.mask_dtype(mode, n)
    numel = {"tree_mask": spec.mask_batch_numel(mode, bs, n, total), "positions": bs * n,
             "retrive_index": bs * n, "retrive_next_token": bs * n, "retrive_next_sibling": bs * n}
    out = {}
    for name, count in numel.items():
        dt = dtype if name == "tree_mask" else torch.int64
        whole, inner = guarded(count, dt, device=device, pad=PAD, sentinel=_sentinels(dt)[sentinel_index])
        out[name] = (whole, inner if name in ("tree_mask", "positions") else inner.view(bs, n))
    return out


def _check_bands(whole, sentinel, name):
    assert all_equal_to(whole[:PAD], sentinel), f"{name}: guard band before the buffer changed"
    assert all_equal_to(whole[-PAD:], sentinel), f"{name}: guard band after the buffer changed"


@pytest.mark.parametrize("mode", list(TreeMaskMode))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "K%d-D%d-n%d" % s)
def test_tree_guard_bands(cuda_device, mode, shape):
    k, d, n = shape
    rng = random.Random(hash(shape) & 0xFFFF)
    for bs, malformed in ((1, 0.0), (33, 0.0), (300, 0.0), (17, 0.3)):
        batch = random_tree_batch(rng, bs, k, d, n, max_seq_len=600, malformed=malformed)
        total = int(batch.seq_lens.sum())
        want = ref.build_tree(*batch, topk=k, depth=d, num_draft_tokens=n, mode=mode)
        footprints = []
        for which in (0, 1):   # two sentinels: a cell is written iff it differs from both
            bufs = _tree_outputs(mode, bs, n, total, cuda_device, which)
            got = kernels.build_tree(*(x.to(cuda_device) for x in batch), topk=k, depth=d,
                                     num_draft_tokens=n, mode=mode,
                                     **{name: inner for name, (_, inner) in bufs.items()})
            torch.cuda.synchronize()
            for name, (whole, _) in bufs.items():
                _check_bands(whole, _sentinels(whole.dtype)[which], name)
            for g, w in zip(got, want):
                assert torch.equal(signed_view(g.cpu()), signed_view(w))
            inner = bufs["tree_mask"][1]
            fresh, _ = guarded(inner.numel(), inner.dtype, device=cuda_device, pad=0,
                               sentinel=_sentinels(inner.dtype)[which])
            footprints.append(changed_cells(fresh, inner))
        written = footprints[0] | footprints[1]
        seq = batch.seq_lens.tolist()
        assert written == spec.mask_kernel_cells(mode, n, seq) | spec.mask_fill_cells(mode, n, seq)


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("topk", [1, 4])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_kv_guard_bands(cuda_device, page_size, topk, dtype):
    steps = 5
    rng = random.Random(page_size * 10 + topk)
    for num_seqs in (1, 7, 64):
        batch = random_kv_batch(rng, num_seqs, topk, steps, page_size, max_seq_len=3000, dtype=dtype)
        seq = batch.seq_lens.tolist()
        width = spec.draft_kv_indices_used_len(sum(seq), topk, num_seqs * topk, steps) + 5
        stride = num_seqs * topk + 3
        want = ref.draft_decode_kv_indices(*batch, topk=topk, num_steps=steps, page_size=page_size,
                                           kv_indices=torch.full((steps, width), -3, dtype=dtype),
                                           kv_indptr=torch.full((steps, stride), -3, dtype=dtype))
        footprints = ([], [])
        for which in (0, 1):
            s_val = _sentinels(dtype)[which]
            kv_whole, kv_inner = guarded(steps * width, dtype, device=cuda_device, pad=PAD, sentinel=s_val)
            ip_whole, ip_inner = guarded(steps * stride, dtype, device=cuda_device, pad=PAD, sentinel=s_val)
            kernels.draft_decode_kv_indices(*(x.to(cuda_device) for x in batch), topk=topk, num_steps=steps,
                                            page_size=page_size, kv_indices=kv_inner.view(steps, width),
                                            kv_indptr=ip_inner.view(steps, stride))
            torch.cuda.synchronize()
            _check_bands(kv_whole, s_val, "kv_indices")
            _check_bands(ip_whole, s_val, "kv_indptr")
            footprints[0].append(changed_cells(torch.full_like(kv_inner, s_val), kv_inner))
            footprints[1].append(changed_cells(torch.full_like(ip_inner, s_val), ip_inner))
            kv_cells = spec.kv_indices_cells(seq, topk, steps, width)
            got_kv = kv_inner.view(steps, width).cpu().view(-1)
            for cell in list(kv_cells)[:: max(1, len(kv_cells) // 5000)]:
                assert got_kv[cell] == want[0].view(-1)[cell]
            ip_cells = spec.kv_indptr_cells(num_seqs, topk, steps, stride)
            got_ip = ip_inner.cpu()
            for cell in ip_cells:
                assert got_ip[cell] == want[1].view(-1)[cell]
        assert footprints[0][0] | footprints[0][1] == spec.kv_indices_cells(seq, topk, steps, width)
        assert footprints[1][0] | footprints[1][1] == spec.kv_indptr_cells(num_seqs, topk, steps, stride)
