"""Pointer provenance in the checked interpreter: an access that leaves the tensor its
pointer came from is an overrun, also when it lands inside another argument.

Every planted case lays its arguments out as views of one buffer (``adjacent_views``),
so the overrun provably lands in the neighbouring argument; before provenance the
checker accepted such an access because the address lay inside *some* argument.  The
cases cover loads, stores and atomics on both of our kernels and on sglang's own
``generate_draft_decode_kv_indices`` (read from the installed release, never imported).
The same layouts with correct sizes must run clean.
"""

from __future__ import annotations

import ast
import random
import shutil

import pytest
import torch

from specbound import kernels, reference, spec  # before triton: it may set TRITON_INTERPRET

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from specbound.kernels import OutOfBoundsAccess, checked_interpreter  # noqa: E402
from specbound.kernels import draft_kv, tree_build  # noqa: E402
from specbound.kernels.testing import adjacent_views  # noqa: E402
from specbound.reference.samples import random_kv_batch, random_tree_batch  # noqa: E402
from specbound.spec import TreeMaskMode  # noqa: E402

pytestmark = pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels are compiled: no interpreter")

I64 = torch.int64


def _adjacent(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() + a.numel() * a.element_size() == b.data_ptr()


# --- small kernels: how provenance moves ------------------------------------------------------

@triton.jit
def _store_at(x_ptr, y_ptr, off, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + off + i, i)


@triton.jit
def _store_where(x_ptr, y_ptr, off, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    p = tl.where(i < BLOCK // 2, x_ptr + i, y_ptr + off + i)   # lanes of two arguments
    tl.store(p, i)


@triton.jit
def _store_joined(x_ptr, y_ptr, off, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    p = tl.join(x_ptr + i, y_ptr + off + i)                    # (BLOCK, 2): x lanes, y lanes
    tl.store(tl.reshape(p, [2 * BLOCK]), tl.reshape(tl.join(i, i), [2 * BLOCK]))


@triton.jit
def _store_through_int(x_ptr, y_ptr, off, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    addr = x_ptr.to(tl.int64) + 8 * (off + i)                  # provenance cannot follow integers
    tl.store(addr.to(tl.pointer_type(tl.int64)), i.to(tl.int64))


@triton.jit
def _load_stored_pointer(x_ptr, scratch_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    pp = scratch_ptr.to(tl.pointer_type(x_ptr.dtype), bitcast=True)
    tl.store(pp + i, x_ptr + i)
    q = tl.load(pp + i)           # the interpreter reads the pointer back as a plain integer
    tl.store(out_ptr + i, tl.load(q))


@triton.jit
def _block_pointer_copy(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    src = tl.make_block_ptr(x_ptr, shape=(n,), strides=(1,), offsets=(0,), block_shape=(BLOCK,), order=(0,))
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.load(src))


def test_store_past_one_argument_into_the_next_is_reported(checked):
    x, y = adjacent_views(((8,), I64, 0), ((8,), I64, -5))
    assert _adjacent(x, y)
    with pytest.raises(OutOfBoundsAccess) as info:
        _store_at[(1,)](x, y, 4, BLOCK=8)
    err = info.value
    assert (err.argument, err.nearest, err.past_end, err.landed_in, err.landed_element) == \
        ("x_ptr", "x_ptr", 0, "y_ptr", 0)
    assert err.lane == (4,) and err.num_bad_lanes == 4 and err.provenance_lost is None
    assert err.source_file == __file__ and err.source_text == "tl.store(x_ptr + off + i, i)"
    assert f"test_kernels_provenance.py:{err.source_line}: tl.store(x_ptr + off + i, i)" in str(err)
    assert "inside argument 'y_ptr' (element 0)" in str(err)
    assert (x == 0).all() and (y == -5).all()          # reported before the store
    # ... and in the other direction: one element before y's start is x's last element.
    with pytest.raises(OutOfBoundsAccess) as info:
        _store_at[(1,)](y, x, -1, BLOCK=8)
    assert (info.value.argument, info.value.before_start, info.value.landed_in) == ("x_ptr", 1, "y_ptr")


def test_adjacent_arguments_used_in_bounds_are_clean(checked):
    x, y = adjacent_views(((8,), I64, 0), ((8,), I64, 0))
    _store_at[(1,)](x, y, 0, BLOCK=8)
    _store_where[(1,)](x, y, 0, BLOCK=8)
    _store_joined[(1,)](x, y, 0, BLOCK=8)
    assert checked.accesses_without_provenance == 0
    assert checked.written("_store_at") == {"x_ptr": set(range(8))}
    # tl.where / tl.join: every lane is attributed to the argument it came from
    assert checked.written("_store_where") == {"x_ptr": {0, 1, 2, 3}, "y_ptr": {4, 5, 6, 7}}
    assert checked.written("_store_joined") == {"x_ptr": set(range(8)), "y_ptr": set(range(8))}


@pytest.mark.parametrize("kernel", [_store_where, _store_joined])
def test_per_lane_provenance_through_where_and_join(checked, kernel):
    y, x = adjacent_views(((8,), I64, 0), ((8,), I64, 0))     # y lies just before x
    with pytest.raises(OutOfBoundsAccess) as info:
        kernel[(1,)](x, y, 4, BLOCK=8)   # y's lanes run past its end, into x
    err = info.value
    assert (err.argument, err.landed_in, err.past_end) == ("y_ptr", "x_ptr", 0)
    assert (x == 0).all() and (y == 0).all()


def test_footprint_and_races_follow_provenance_through_aliases():
    """Two arguments that overlap (y is x shifted by 4): a store through x is x's alone,
    and two programs storing one cell through the two names still race."""
    buf = torch.zeros(12, dtype=I64)
    x, y = buf[:8], buf[4:]
    with checked_interpreter(record_footprint=True) as session:
        _store_at[(1,)](x, y, 0, BLOCK=8)
    assert session.written() == {"x_ptr": set(range(8))}     # not y_ptr {0..3} too
    assert session.conflicting_writes() is None

    @triton.jit
    def both(x_ptr, y_ptr):
        i = tl.arange(0, 4)
        if tl.program_id(0) == 0:
            tl.store(x_ptr + 4 + i, i)
        else:
            tl.store(y_ptr + i, i)

    with checked_interpreter(record_footprint=True) as session:
        both[(2,)](x, y)
    assert session.written() == {"x_ptr": {4, 5, 6, 7}, "y_ptr": {0, 1, 2, 3}}
    assert session.conflicting_writes() == \
        "both: x_ptr[4] stored by programs (0, 0, 0) and (1, 0, 0) (as y_ptr[0])"


def test_lost_provenance_is_counted_and_falls_back_to_every_argument(checked):
    x, y = adjacent_views(((8,), I64, 0), ((8,), I64, 0))
    _store_through_int[(1,)](x, y, 4, BLOCK=8)     # lands in y: accepted, but never silently
    assert checked.accesses_without_provenance == 8
    (key, lanes), = checked.launches[-1].provenance_lost.items()
    assert lanes == 8 and key.startswith("integer cast to a pointer") and key.endswith(
        f"{__file__}:{_store_through_int.fn.__code__.co_firstlineno + 4}")
    assert checked.written("_store_through_int") == {"x_ptr": {4, 5, 6, 7}, "y_ptr": {0, 1, 2, 3}}
    with pytest.raises(OutOfBoundsAccess) as info:
        _store_through_int[(1,)](x, y, 1 << 20, BLOCK=8)
    assert info.value.provenance_lost.startswith("integer cast to a pointer")
    assert info.value.argument is None and "pointer provenance lost" in str(info.value)


def test_a_pointer_read_back_from_memory_is_checked_against_every_argument(checked):
    """Triton's interpreter reads a stored pointer back as a plain integer of the pointee's
    type: for an int64 pointee the address survives (checked against every argument, and
    counted; triton 3.9 then refuses the load itself), for an int32 pointee it is
    truncated, and unchecked the next load would dereference garbage and kill the
    process (triton 3.6/3.7)."""
    from triton.runtime.errors import InterpreterError

    x, scratch, out = torch.arange(4, dtype=I64), torch.zeros(4, dtype=I64), torch.zeros(4, dtype=I64)
    try:
        _load_stored_pointer[(1,)](x, scratch, out, BLOCK=4)
        assert out.tolist() == [0, 1, 2, 3]
    except InterpreterError as e:   # triton >= 3.9 refuses the load itself, after our check
        assert "unsupported dtype" in str(e)
    assert checked.accesses_without_provenance == 4
    (key, lanes), = checked.launches[-1].provenance_lost.items()
    assert lanes == 4 and key.startswith("address held as int64, not a pointer")
    x32 = torch.arange(4, dtype=torch.int32)
    with pytest.raises(OutOfBoundsAccess) as info:
        _load_stored_pointer[(1,)](x32, scratch, torch.zeros(4, dtype=torch.int32), BLOCK=4)
    assert info.value.op.startswith("load") and "not a pointer" in info.value.provenance_lost


@pytest.mark.filterwarnings("ignore:tl.make_block_ptr is deprecated")
def test_block_pointer_keeps_its_base_argument(checked):
    from triton.runtime import interpreter

    if not hasattr(interpreter.interpreter_builder, "create_make_block_ptr"):
        pytest.skip(f"triton {triton.__version__}'s interpreter has no block pointers")
    x, y = adjacent_views(((4,), I64, 1), ((4,), I64, 2))
    out = torch.zeros(8, dtype=I64)
    with pytest.raises(OutOfBoundsAccess) as info:
        _block_pointer_copy[(1,)](x, y, out, 8, BLOCK=8)   # block of 8 over a 4-element x
    assert (info.value.argument, info.value.landed_in) == ("x_ptr", "y_ptr")
    _block_pointer_copy[(1,)](x, y, out, 4, BLOCK=4)
    assert out[:4].tolist() == [1, 1, 1, 1]


# --- our tree build ----------------------------------------------------------------------------

K, D, N = 4, 5, 8


def _atomic_variant(module: str, kernel: str, first_arg: str):
    """Our kernel with every ``tl.store`` whose pointer starts with ``first_arg`` turned
    into ``tl.atomic_xchg`` (same effect), built by the kernel proofs' mutant mechanism."""
    from specbound.proofs.symexec.mutants import build_kernel

    changed = []

    class ToAtomic(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if ast.unparse(node.func) == "tl.store" and ast.unparse(node.args[0]).startswith(first_arg):
                node.func = ast.parse("tl.atomic_xchg", mode="eval").body
                changed.append(node.lineno)
            return node

    variant = build_kernel(module, kernel, lambda tree: ToAtomic().visit(tree))
    assert changed, f"no tl.store through {first_arg} in {kernel}"
    return variant


def _tree_buffers(bs: int, mode: TreeMaskMode, seq_total: int, *, rows_short: int = 0):
    """Every tree-build buffer as adjacent views: positions (``rows_short`` rows too
    small), retrive_index, next_token, next_sibling, then the mask."""
    numel = spec.mask_batch_numel(mode, bs, N, seq_total)
    mask_dtype = tree_build.validation.mask_dtype(mode, N)
    positions, ri, nt, ns, mask = adjacent_views(
        (((bs - rows_short) * N,), I64, 0), ((bs, N), I64, -1), ((bs, N), I64, -1), ((bs, N), I64, -1),
        ((numel,), mask_dtype, 0))
    return {"positions": positions, "retrive_index": ri, "retrive_next_token": nt, "retrive_next_sibling": ns,
            "tree_mask": mask}


def _launch_tree(batch, bufs, mode, kernel=None):
    tree_build.launch_tree(*batch, bufs["tree_mask"], bufs["positions"], bufs["retrive_index"],
                           bufs["retrive_next_token"], bufs["retrive_next_sibling"], topk=K, depth=D,
                           num_draft_tokens=N, mode=mode, kernel=kernel)


@pytest.mark.parametrize("atomic", [False, True], ids=["store", "atomic"])
def test_tree_positions_one_row_short_overruns_into_retrive_index(checked, atomic):
    batch = random_tree_batch(random.Random(1), 5, K, D, N)
    bufs = _tree_buffers(5, TreeMaskMode.QLEN_ONLY, int(batch.seq_lens.sum()), rows_short=1)
    assert _adjacent(bufs["positions"], bufs["retrive_index"])
    kernel = _atomic_variant("tree_build", "build_tree_kernel", "positions_ptr") if atomic else None
    with pytest.raises(OutOfBoundsAccess) as info:
        _launch_tree(batch, bufs, TreeMaskMode.QLEN_ONLY, kernel)
    err = info.value
    assert err.op.startswith("store (create_atomic_rmw)" if atomic else "store (create_masked_store)")
    assert (err.argument, err.past_end, err.landed_in, err.landed_element) == \
        ("positions_ptr", 0, "retrive_index_ptr", 0)
    assert err.num_bad_lanes == N and err.source_text.startswith(
        ("tl.atomic_xchg" if atomic else "tl.store") + "(positions_ptr + tok")
    assert (bufs["retrive_index"] == -1).all()         # the neighbour is untouched


def test_tree_parent_search_past_its_row_reads_the_next_argument(checked):
    """The search-past-row mutant (sglang's CUDA kernel scans n entries of an (n-1)-entry
    row) reads one entry past ``selected_index``; laid out before ``seq_lens``, that read
    lands inside ``seq_lens``."""
    from specbound.proofs.symexec.mutants import get

    pl, sel, seq = random_tree_batch(random.Random(2), 3, K, D, N)
    sel_v, seq_v = adjacent_views((tuple(sel.shape), I64, 0), (tuple(seq.shape), I64, 0))
    sel_v.copy_(sel)
    seq_v.copy_(seq)
    bufs = _tree_buffers(3, TreeMaskMode.QLEN_ONLY, int(seq.sum()))
    with pytest.raises(OutOfBoundsAccess) as info:
        _launch_tree((pl, sel_v, seq_v), bufs, TreeMaskMode.QLEN_ONLY, get("MUT-SEARCH-PAST-ROW").plant.kernel())
    err = info.value
    assert err.op.startswith("load") and (err.argument, err.past_end, err.landed_in) == \
        ("selected_index_ptr", 0, "seq_lens_ptr")
    assert "tl.load(selected_index_ptr" in err.source_text


@pytest.mark.parametrize("mode", list(TreeMaskMode))
@pytest.mark.parametrize("atomic", [False, True], ids=["store", "atomic"])
def test_tree_with_every_buffer_adjacent_runs_clean(checked, mode, atomic):
    pl, sel, seq = random_tree_batch(random.Random(3), 6, K, D, N)
    inputs = adjacent_views((tuple(pl.shape), I64, 0), (tuple(sel.shape), I64, 0), (tuple(seq.shape), I64, 0))
    for view, src in zip(inputs, (pl, sel, seq)):
        view.copy_(src)
    bufs = _tree_buffers(6, mode, int(seq.sum()))
    if mode is TreeMaskMode.FULL_MASK:
        bufs["tree_mask"].fill_(True)
    kernel = _atomic_variant("tree_build", "build_tree_kernel", "positions_ptr") if atomic else None
    _launch_tree(inputs, bufs, mode, kernel)
    want = reference.build_tree(pl, sel, seq, topk=K, depth=D, num_draft_tokens=N, mode=mode)
    for name, got in bufs.items():
        assert torch.equal(got, getattr(want, name)), name
    assert checked.accesses_without_provenance == 0
    kernel_name = checked.launches[-1].kernel
    assert checked.written(kernel_name)["positions_ptr"] == spec.token_cells(6, N)


# --- our draft kv_indices ----------------------------------------------------------------------

STEPS = 3


def _kv_buffers(num_seqs, width):
    """kv_indices (STEPS x width) then kv_indptr, adjacent (int64)."""
    return adjacent_views(((STEPS, width), I64, -1), ((STEPS, num_seqs * K + 1), I64, 0))


def _launch_kv_raw(kernel, batch, kv, indptr):
    pool, r2t, seq = batch
    lens = seq.tolist()
    prefix = torch.tensor(spec.prefix_sums(lens)[:-1])
    block_b, pairs, st, block_c = draft_kv.kv_blocks(len(lens), K, STEPS)
    kernel[(triton.cdiv(len(lens), block_b),)](
        pool, r2t, seq, prefix, kv, indptr, len(lens), K, STEPS, 1, kv.shape[1], indptr.shape[1],
        r2t.stride(0), r2t.stride(1), BLOCK_B=block_b, PAIRS=pairs, STEPS=st, BLOCK_C=block_c)


@pytest.mark.parametrize("atomic", [False, True], ids=["store", "atomic"])
def test_kv_row_without_topk_overruns_into_kv_indptr(checked, atomic):
    """sglang #27338 (the CUDA-graph row sized num_seqs*C, no factor K), with kv_indptr
    allocated right after kv_indices."""
    c = 16
    batch = random_kv_batch(random.Random(4), 2, K, STEPS, 1, seq_lens=[12, 13], dtype=I64)
    kv, indptr = _kv_buffers(2, 2 * c)
    assert _adjacent(kv, indptr)
    kernel = _atomic_variant("draft_kv", "draft_kv_kernel", "kv_indices_ptr") if atomic else draft_kv.draft_kv_kernel
    with pytest.raises(OutOfBoundsAccess) as info:
        _launch_kv_raw(kernel, batch, kv, indptr)
    err = info.value
    assert err.op.startswith("store (create_atomic_rmw)" if atomic else "store (create_masked_store)")
    assert (err.argument, err.landed_in) == ("kv_indices_ptr", "kv_indptr_ptr")
    assert err.source_text.startswith(("tl.atomic_xchg" if atomic else "tl.store") + "(kv_indices_ptr")
    assert (indptr == 0).all()


def _narrow_pool_launch(seed: int):
    """One request (seq_len 9) whose req_to_token pool (a single row) is one column
    narrower than the widest read, with seq_lens laid out right after the pool; returns
    ((req_pool_indices, req_to_token, seq_lens), kv_indices, kv_indptr)."""
    pool, r2t, seq = random_kv_batch(random.Random(seed), 1, K, STEPS, 1, seq_lens=[9], dtype=I64)
    narrow = r2t.shape[1] - 1
    r2t_v, seq_v, pool_v = adjacent_views(((1, narrow), I64, 0), ((1,), I64, 9), ((1,), I64, 0))
    r2t_v.copy_(r2t[:1, :narrow])
    return (pool_v, r2t_v, seq_v), *_kv_buffers(1, spec.draft_kv_indices_used_len(9, K, K, STEPS))


def test_kv_req_to_token_row_too_narrow_reads_the_next_argument(checked):
    """The last row's read runs past the pool into seq_lens."""
    batch, kv, indptr = _narrow_pool_launch(5)
    with pytest.raises(OutOfBoundsAccess) as info:
        _launch_kv_raw(draft_kv.draft_kv_kernel, batch, kv, indptr)
    err = info.value
    assert err.op.startswith("load") and (err.argument, err.past_end, err.landed_in) == \
        ("req_to_token_ptr", 0, "seq_lens_ptr")


@pytest.mark.parametrize("atomic", [False, True], ids=["store", "atomic"])
def test_kv_with_adjacent_buffers_runs_clean(checked, atomic):
    batch = random_kv_batch(random.Random(6), 3, K, STEPS, 1, dtype=I64)
    width = spec.draft_kv_indices_used_len(int(batch.seq_lens.sum()), K, 3 * K, STEPS)
    kv, indptr = _kv_buffers(3, width)
    kernel = _atomic_variant("draft_kv", "draft_kv_kernel", "kv_indices_ptr") if atomic else draft_kv.draft_kv_kernel
    _launch_kv_raw(kernel, batch, kv, indptr)
    want_kv, want_ptr = reference.draft_decode_kv_indices(*batch, topk=K, num_steps=STEPS,
                                                           kv_indices=torch.full((STEPS, width), -1, dtype=I64),
                                                           kv_indptr=torch.zeros(STEPS, 3 * K + 1, dtype=I64))
    assert torch.equal(kv, want_kv) and torch.equal(indptr, want_ptr)
    assert checked.accesses_without_provenance == 0
    assert checked.written()["kv_indices_ptr"] == spec.kv_indices_cells(batch.seq_lens.tolist(), K, STEPS, width)


# --- sglang's generate_draft_decode_kv_indices ---------------------------------------------------

@pytest.fixture(scope="module")
def sglang_kv(tmp_path_factory):
    """sglang's kernel as released, and a planted copy whose kv_indices stores are
    atomic exchanges; both compiled from source (sglang is never imported)."""
    from specbound.audit.extract import SourceIndex
    from specbound.engines.sglang.launch import KV_FILES, KV_KERNEL
    from specbound.engines.sglang.locate import NotInstalled, locate

    try:
        root = locate().root
    except NotInstalled as e:
        pytest.skip(str(e))
    found = SourceIndex(root).find(KV_KERNEL, KV_FILES)
    assert found is not None, f"{KV_KERNEL} not found in {root}"
    real = SourceIndex(root).load_kernel(found, triton, tl)
    planted_root = tmp_path_factory.mktemp("sglang_atomic") / "sglang"
    planted_file = planted_root / found.rel
    planted_file.parent.mkdir(parents=True)
    text = found.text.replace("tl.store(kv_ptr", "tl.atomic_xchg(kv_ptr")
    text = text.replace("tl.store(\n            kv_ptr", "tl.atomic_xchg(\n            kv_ptr")
    assert text.count("tl.atomic_xchg(") >= 3, "sglang's kv_indices stores moved: update the planted copy"
    planted_file.write_text(text)
    shutil.copy(root / "__init__.py", planted_root / "__init__.py")
    index = SourceIndex(planted_root)
    planted = index.load_kernel(index.find(KV_KERNEL, KV_FILES), triton, tl)
    return found, real, planted


def _launch_sglang_kv(found, kernel, batch, kv, indptr):
    from specbound.audit.kernels import bind
    from specbound.engines.sglang.launch import KV_ALIASES
    from specbound.kernels.plan import pow2

    pool, r2t, seq = batch
    num_seqs = seq.numel()
    values = {"req_pool_indices": pool, "req_to_token": r2t, "paged_kernel_lens": seq, "kv_indices": kv,
              "kv_indptr": indptr, "positions": seq.repeat_interleave(K), "row_stride": r2t.stride(0),
              "kv_indices_stride": kv.shape[1], "kv_indptr_stride": indptr.shape[1],
              "bs_upper": pow2(num_seqs), "iter_upper": pow2(STEPS),
              "num_tokens_upper": pow2(num_seqs * K), "page_size": 1, "window_size": 0, "sink_size": 0,
              "entry_page_size": 1, "v2p": None, "translate": False}
    kwargs, missing = bind(found, values, KV_ALIASES)
    assert not missing, missing
    kernel[(STEPS, num_seqs, K)](**kwargs)


@pytest.mark.parametrize("atomic", [False, True], ids=["store", "atomic"])
def test_sglang_kv_row_without_topk_overruns_into_kv_indptr(checked, sglang_kv, atomic):
    found, real, planted = sglang_kv
    c = 16
    batch = random_kv_batch(random.Random(7), 2, K, STEPS, 1, seq_lens=[12, 13], dtype=I64)
    kv, indptr = _kv_buffers(2, 2 * c)                 # num_seqs * C: the factor K is missing
    with pytest.raises(OutOfBoundsAccess) as info:
        _launch_sglang_kv(found, planted if atomic else real, batch, kv, indptr)
    err = info.value
    assert err.kernel == "generate_draft_decode_kv_indices"
    assert err.op.startswith("store (create_atomic_rmw)" if atomic else "store (create_masked_store)")
    assert (err.argument, err.landed_in) == ("kv_indices", "kv_indptr")
    assert err.source_file.endswith("cache_locs.py") and "kv_ptr" in err.source_text


def test_sglang_kv_req_to_token_too_narrow_reads_the_next_argument(checked, sglang_kv):
    found, real, _ = sglang_kv
    batch, kv, indptr = _narrow_pool_launch(8)
    with pytest.raises(OutOfBoundsAccess) as info:
        _launch_sglang_kv(found, real, batch, kv, indptr)
    err = info.value
    assert err.op.startswith("load") and (err.argument, err.past_end, err.landed_in) == \
        ("req_to_token", 0, "paged_kernel_lens")


@pytest.mark.parametrize("atomic", [False, True], ids=["store", "atomic"])
def test_sglang_kv_with_adjacent_buffers_runs_clean(checked, sglang_kv, atomic):
    found, real, planted = sglang_kv
    batch = random_kv_batch(random.Random(9), 3, K, STEPS, 1, dtype=I64)
    width = spec.draft_kv_indices_buffer_width(3, K, int(batch.seq_lens.max()) + STEPS)
    kv, indptr = _kv_buffers(3, width)
    _launch_sglang_kv(found, planted if atomic else real, batch, kv, indptr)
    want_kv, want_ptr = reference.draft_decode_kv_indices(*batch, topk=K, num_steps=STEPS,
                                                           kv_indices=torch.full((STEPS, width), -1, dtype=I64),
                                                           kv_indptr=torch.zeros(STEPS, 3 * K + 1, dtype=I64))
    assert torch.equal(kv, want_kv) and torch.equal(indptr, want_ptr)
    assert checked.accesses_without_provenance == 0
