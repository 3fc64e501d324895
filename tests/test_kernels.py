"""Triton kernels vs the reference, under the bounds-checked interpreter (CPU).

Every launch in these tests runs inside ``checked_interpreter`` (the ``checked``
fixture), so any out-of-bounds load/store fails the test instead of corrupting memory,
and the recorded write footprint is compared with the spec's.  When the kernels are
compiled (CUDA machine) these tests skip; tests/test_kernels_gpu.py covers that case.
"""

from __future__ import annotations

import random

import pytest
import torch

from specbound import kernels, spec
from specbound import reference as ref
from specbound.kernels import tree_build
from specbound.reference.samples import random_kv_batch, random_tree_batch
from specbound.spec import TreeMaskMode

MODES = list(TreeMaskMode)
GOLDEN = dict(
    topk=4, depth=4, n=8, seq_lens=[5, 10],
    selected_index=[[0, 1, 4, 8, 20, 24, 36], [0, 4, 5, 6, 7, 24, 36]],
    parent_list=[[-1, 0, 1, 2, 3, 4, 8, 9, 10, 20, 24, 21, 28],
                 [-1, 0, 1, 2, 3, 4, 5, 6, 7, 24, 28, 20, 21]],
    positions=[5, 6, 6, 7, 7, 8, 8, 9, 10, 11, 12, 12, 12, 12, 13, 14],
    next_token=[[1, 3, 4, 5, 6, 7, -1, -1], [1, 2, -1, 6, -1, -1, 7, -1]],
    next_sibling=[[-1, 2, -1, -1, -1, -1, -1, -1], [-1, -1, 3, 4, 5, -1, -1, -1]],
)


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert torch.equal(x, y), (x, y)


def _build_both(pl, sel, seq, **kw):
    out = kernels.build_tree(pl, sel, seq, **kw)
    want = ref.build_tree(pl, sel, seq, **kw)
    _same(out, want)
    return out


def _kernel_writes(session, kernel_name):
    return session.written(kernel_name)


# --- constants mirrored by the kernels ---------------------------------------------------

def test_kernel_constants_mirror_spec():
    assert (tree_build.SLOT_ROOT.value, tree_build.SLOT_LOOKUP.value, tree_build.SLOT_INVALID.value) == (
        spec.SLOT_ROOT, spec.SLOT_LOOKUP, spec.SLOT_INVALID)
    assert (tree_build.FULL_MASK.value, tree_build.QLEN_ONLY.value, tree_build.BITPACKING.value) == (
        TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY, TreeMaskMode.QLEN_ONLY_BITPACKING)


# --- tree build ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_golden_vector(checked, mode):
    g = GOLDEN
    out = _build_both(torch.tensor(g["parent_list"]), torch.tensor(g["selected_index"]),
                      torch.tensor(g["seq_lens"]), topk=g["topk"], depth=g["depth"],
                      num_draft_tokens=g["n"], mode=mode)
    assert out.positions.tolist() == g["positions"]
    assert out.retrive_index.tolist() == [list(range(8)), list(range(8, 16))]
    assert out.retrive_next_token.tolist() == g["next_token"]
    assert out.retrive_next_sibling.tolist() == g["next_sibling"]
    w = checked.written("build_tree_kernel")
    assert w["tree_mask_ptr"] == spec.mask_kernel_cells(mode, g["n"], g["seq_lens"])
    for name in ("positions_ptr", "retrive_index_ptr", "next_token_ptr", "next_sibling_ptr"):
        assert w[name] == spec.token_cells(2, g["n"]), name
    if mode is TreeMaskMode.FULL_MASK:
        assert checked.written("fill_prefix_kernel")["tree_mask_ptr"] == \
            spec.mask_fill_cells(mode, g["n"], g["seq_lens"])


def test_hand_case(checked):
    pl, sel, seq = torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]), torch.tensor([5])
    kw = dict(topk=2, depth=2, num_draft_tokens=4)
    out = _build_both(pl, sel, seq, mode=TreeMaskMode.QLEN_ONLY, **kw)
    assert out.retrive_next_token.tolist() == [[1, 3, -1, -1]]
    assert out.retrive_next_sibling.tolist() == [[-1, 2, -1, -1]]
    assert out.positions.tolist() == [5, 6, 6, 7]
    rows = ["".join("1" if v else "0" for v in out.tree_mask[4 * t:4 * t + 4].tolist()) for t in range(4)]
    assert rows == ["1000", "1100", "1010", "1101"]
    packed = _build_both(pl, sel, seq, mode=TreeMaskMode.QLEN_ONLY_BITPACKING, **kw)
    assert packed.tree_mask.tolist() == [0b0001, 0b0011, 0b0101, 0b1011]
    full = _build_both(pl, sel, seq, mode=TreeMaskMode.FULL_MASK, **kw)
    assert full.tree_mask.numel() == spec.mask_batch_numel(TreeMaskMode.FULL_MASK, 1, 4, 5)


SHAPES = [  # (topk, depth, n): chains, D = 1, wide, and 16/32-bit BITPACKING items
    (1, 1, 1), (2, 3, 1), (1, 1, 2), (1, 4, 5), (2, 1, 3), (2, 2, 4), (4, 5, 8), (3, 3, 12), (4, 4, 20), (8, 3, 32),
    (2, 6, 9),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "K%d-D%d-n%d" % s)
def test_random_batches(checked, mode, shape):
    k, d, n = shape
    rng = random.Random(hash((k, d, n, int(mode))) & 0xFFFF)
    for bs, malformed in ((1, 0.0), (5, 0.0), (37, 0.0), (9, 0.3)):
        batch = random_tree_batch(rng, bs, k, d, n, max_seq_len=40, malformed=malformed)
        checked.clear()
        _build_both(*batch, topk=k, depth=d, num_draft_tokens=n, mode=mode)
        seq = batch.seq_lens.tolist()
        w = checked.written("build_tree_kernel")
        assert w["tree_mask_ptr"] == spec.mask_kernel_cells(mode, n, seq)
        assert w["positions_ptr"] == spec.token_cells(bs, n)
        fill = checked.written("fill_prefix_kernel").get("tree_mask_ptr", set())
        assert fill == spec.mask_fill_cells(mode, n, seq)


@pytest.mark.parametrize("mode", MODES)
def test_caller_buffers_written_only_inside_footprint(checked, mode):
    rng = random.Random(7)
    k, d, n = 4, 5, 8
    batch = random_tree_batch(rng, 6, k, d, n, max_seq_len=30)
    seq = batch.seq_lens.tolist()
    numel = spec.mask_batch_numel(mode, 6, n, sum(seq)) + 50
    dtype = ref.mask_dtype(mode, n)
    sentinel = 0x5A if dtype != torch.bool else False
    bufs = dict(tree_mask=torch.full((numel,), sentinel, dtype=dtype),
                positions=torch.full((6 * n + 9,), -5, dtype=torch.int64),
                retrive_index=torch.full((7, n), -5, dtype=torch.int64),
                retrive_next_token=torch.full((7, n), -5, dtype=torch.int64),
                retrive_next_sibling=torch.full((7, n), -5, dtype=torch.int64))
    mine = {k_: v.clone() for k_, v in bufs.items()}
    theirs = {k_: v.clone() for k_, v in bufs.items()}
    for fill in (True, False):
        kernels.build_tree(*batch, topk=k, depth=d, num_draft_tokens=n, mode=mode, fill_prefix_mask=fill, **mine)
        ref.build_tree(*batch, topk=k, depth=d, num_draft_tokens=n, mode=mode, fill_prefix_mask=fill, **theirs)
        for name in bufs:
            assert torch.equal(mine[name], theirs[name]), name
    # Nothing of the rows after the batch changed.
    assert (mine["retrive_next_token"][6] == -5).all()
    assert (mine["positions"][6 * n:] == -5).all()


def test_fill_prefix_false_leaves_prefix_alone(checked):
    rng = random.Random(3)
    batch = random_tree_batch(rng, 4, 2, 3, 5, max_seq_len=12)
    seq = batch.seq_lens.tolist()
    numel = spec.mask_batch_numel(TreeMaskMode.FULL_MASK, 4, 5, sum(seq))
    mask = torch.zeros(numel, dtype=torch.bool)
    kernels.build_tree(*batch, topk=2, depth=3, num_draft_tokens=5, mode=0, tree_mask=mask,
                       fill_prefix_mask=False)
    assert "fill_prefix_kernel" not in {r.kernel for r in checked.launches}
    for cell in spec.mask_fill_cells(TreeMaskMode.FULL_MASK, 5, seq):
        assert not mask[cell]


def test_empty_batch(checked):
    out = _build_both(torch.zeros(0, 13, dtype=torch.int64), torch.zeros(0, 7, dtype=torch.int64),
                      torch.zeros(0, dtype=torch.int64), topk=4, depth=4, num_draft_tokens=8, mode=0)
    assert out.tree_mask.numel() == 0
    assert not checked.launches


@pytest.mark.parametrize("bad", [
    dict(topk=0), dict(mode=7), dict(num_draft_tokens=100), dict(fill_prefix_mask=1),
    dict(seq_lens=torch.tensor([5, -1])), dict(selected_index=torch.zeros(2, 6, dtype=torch.int64)),
    dict(tree_mask=torch.zeros(3, dtype=torch.bool)), dict(positions=torch.zeros(16, dtype=torch.int32)),
])
def test_errors_identical_to_reference(bad):
    g = GOLDEN
    kw = dict(topk=g["topk"], depth=g["depth"], num_draft_tokens=g["n"], mode=0)
    args = dict(parent_list=torch.tensor(g["parent_list"]), selected_index=torch.tensor(g["selected_index"]),
                seq_lens=torch.tensor(g["seq_lens"]))
    for key, value in bad.items():
        (args if key in args else kw)[key] = value
    pos = (args["parent_list"], args["selected_index"], args["seq_lens"])
    with pytest.raises(Exception) as mine:
        kernels.build_tree(*pos, **kw)
    with pytest.raises(Exception) as theirs:
        ref.build_tree(*pos, **kw)
    assert type(mine.value) is type(theirs.value)
    assert str(mine.value) == str(theirs.value)


def test_strict_reports_like_reference(checked):
    rng = random.Random(11)
    batch = random_tree_batch(rng, 8, 4, 5, 8, malformed=0.4)
    kw = dict(topk=4, depth=5, num_draft_tokens=8, mode=1, strict=True)
    with pytest.raises(ref.MalformedTreeError) as theirs:
        ref.build_tree(*batch, **kw)
    mask = torch.zeros(8 * 64, dtype=torch.bool)
    with pytest.raises(ref.MalformedTreeError) as mine:
        kernels.build_tree(*batch, tree_mask=mask, **kw)
    assert str(mine.value) == str(theirs.value)
    assert not mask.any() and not checked.launches  # nothing launched, nothing written


# --- draft kv ------------------------------------------------------------------------------

def _kv_both(batch, **kw):
    bufs = {k: kw.pop(k) for k in ("kv_indices", "kv_indptr") if k in kw}
    mine = kernels.draft_decode_kv_indices(*batch, **kw, **{k: v.clone() for k, v in bufs.items()})
    theirs = ref.draft_decode_kv_indices(*batch, **kw, **{k: v.clone() for k, v in bufs.items()})
    _same(mine, theirs)
    return mine


@pytest.mark.parametrize("page_size", [1, 4, 16])
@pytest.mark.parametrize("topk", [1, 2, 4])
@pytest.mark.parametrize("num_steps", [1, 3, 5])
def test_kv_random(checked, page_size, topk, num_steps):
    rng = random.Random(page_size * 100 + topk * 10 + num_steps)
    for num_seqs, max_len in ((1, 5), (6, 40), (13, 70)):
        batch = random_kv_batch(rng, num_seqs, topk, num_steps, page_size, max_seq_len=max_len)
        checked.clear()
        kv, indptr = _kv_both(batch, topk=topk, num_steps=num_steps, page_size=page_size)
        seq = batch.seq_lens.tolist()
        w = checked.written("draft_kv_kernel")
        assert w.get("kv_indices_ptr", set()) == spec.kv_indices_cells(seq, topk, num_steps, kv.shape[1])
        assert w["kv_indptr_ptr"] == spec.kv_indptr_cells(num_seqs, topk, num_steps, indptr.shape[1])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_kv_caller_buffers_cuda_graph_width(checked, dtype):
    """A CUDA-graph sized row (spec.draft_kv_indices_buffer_width) and a wide kv_indptr:
    only the footprint changes, bit for bit like the reference."""
    rng = random.Random(5)
    k, steps, c = 4, 5, 64
    batch = random_kv_batch(rng, 5, k, steps, 1, max_seq_len=c - steps, dtype=dtype)
    width = spec.draft_kv_indices_buffer_width(8, k, c)
    kv = torch.full((steps, width), -3, dtype=dtype)
    indptr = torch.full((steps, 8 * k + 1), -3, dtype=dtype)
    _kv_both(batch, topk=k, num_steps=steps, kv_indices=kv, kv_indptr=indptr)


def test_kv_noncontiguous_req_to_token_is_refused(checked):
    """The kernel proofs assume row stride = row width and column stride 1
    (req_to_token_contiguous); a strided view is refused alike, never copied (the pool table)."""
    rng = random.Random(8)
    batch = random_kv_batch(rng, 4, 2, 3, 4, max_seq_len=30, dtype=torch.int64)
    r2t = batch.req_to_token
    wide = torch.zeros(r2t.shape[0], r2t.shape[1] * 2, dtype=r2t.dtype)
    wide[:, ::2] = r2t
    view = wide[:, ::2]
    assert not view.is_contiguous()
    args = (batch.req_pool_indices, view, batch.seq_lens)
    errors = []
    for build in (kernels.draft_decode_kv_indices, ref.draft_decode_kv_indices):
        with pytest.raises(spec.SpecArgumentError, match="req_to_token: must be contiguous") as err:
            build(*args, topk=2, num_steps=3, page_size=4)
        errors.append(str(err.value))
    assert errors[0] == errors[1]
    assert checked.launches == []


def test_kv_empty_and_errors(checked):
    r2t = torch.zeros(2, 10, dtype=torch.int32)
    _kv_both((torch.zeros(0, dtype=torch.int64), r2t, torch.zeros(0, dtype=torch.int64)), topk=2, num_steps=3)
    bad = (torch.tensor([0]), r2t, torch.tensor([9]))  # row too narrow for the extension
    with pytest.raises(spec.SpecArgumentError) as mine:
        kernels.draft_decode_kv_indices(*bad, topk=2, num_steps=3)
    with pytest.raises(spec.SpecArgumentError) as theirs:
        ref.draft_decode_kv_indices(*bad, topk=2, num_steps=3)
    assert str(mine.value) == str(theirs.value)
