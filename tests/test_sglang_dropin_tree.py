"""specbound.sglang's tree drop-in against sglang's own tree builds on the same launches: its
Triton port (``spec_tree.py``, FULL_MASK and QLEN_ONLY) under the checked interpreter, and its
CUDA kernels compiled for the CPU under ASan/UBSan (``specbound.engines.sglang.cuda``; all three
layouts), the retrive outputs three views of one ``(3, bs, n)`` buffer as sglang allocates
them; every cell compared, untouched ones included (``specbound.sglang.testing`` pre-fills as
sglang's caller does, junk where it leaves memory uninitialised).  Every refusal has a test;
the planted-bug tests show each check is what makes its refusal (or the equality) hold; the
README's swap runs on sglang's own caller compiled from the installed source.  Tests that need
sglang skip without it; the CUDA comparison skips without g++ and the sanitizer runtimes.
"""

from __future__ import annotations

import ast
import types

import pytest
import torch

import specbound.sglang
from specbound import spec
from specbound.engines.sglang import launch as sglang_replay
from specbound.replay import load_kernel
from specbound.replay.checked import checked_launch
from specbound.sglang import build_tree_kernel_efficient
from specbound.sglang.testing import clone_args, refused, tree_launch
from specbound.spec import TreeMaskMode

FULL, QLEN, BITPACK = TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY, TreeMaskMode.QLEN_ONLY_BITPACKING
TREE_TRITON_SOURCE = "kernels/ops/speculative/spec_tree.py"


@pytest.fixture(scope="module")
def sglang_tree_triton(installed_sglang_root):
    return load_kernel(str(installed_sglang_root / TREE_TRITON_SOURCE), sglang_replay.TREE_KERNEL)


def _outputs(args) -> list[torch.Tensor]:
    return [args[i] for i in range(3, 8)]


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
    theirs, ours = clone_args(args), clone_args(args)
    run_triton_port(sglang_tree_triton, theirs)
    build_tree_kernel_efficient(*ours)
    assert ours[5]._base is ours[6]._base is ours[7]._base is not None   # written through the views
    assert tree_difference(theirs, ours) is None


@pytest.fixture(scope="module")
def cuda_session(installed_sglang_root):
    from specbound.engines.sglang.cuda import build, check
    from specbound.engines.sglang.cuda.harness import Session
    try:
        toolchain = build.probe_toolchain()
    except build.Unavailable as exc:
        pytest.skip(f"the CUDA-on-CPU harness cannot run here: {exc}")
    prep = check.prepare(installed_sglang_root, toolchain)
    if set(prep.kernels) != {"build_tree_efficient", "build_tree_efficient_partial_packed"}:
        pytest.skip(f"this sglang's CUDA tree kernels did not compile: {prep.problems}")
    with Session(prep.library) as session:
        yield prep, session


def run_cuda(cuda_session, args) -> list:
    """sglang's CUDA kernel (the one its host wrapper dispatches ``mode`` to) on the bytes of
    ``args``' pre-filled buffers; returns a copy of ``args`` holding what it wrote."""
    from specbound.engines.sglang.cuda.tree import Buffers, make_launch
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
    result = clone_args(args)
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
    ours = clone_args(args)
    build_tree_kernel_efficient(*ours)
    assert tree_difference(theirs, ours) is None


def test_tree_full_mask_prefix_left_as_it_was(cuda_session):
    """FULL_MASK without sglang's fill (torch.empty): the prefix columns keep whatever they hold."""
    args = tree_launch(7, FULL, junk_mask=True)
    theirs = run_cuda(cuda_session, args)
    ours = clone_args(args)
    build_tree_kernel_efficient(*ours)
    assert tree_difference(theirs, ours) is None and not torch.equal(ours[3], torch.ones_like(ours[3]))


def test_tree_uint8_mask_of_the_triton_backend_equals_sglang(cuda_session):
    """sglang's op constrains the mask's bytes, not its type: the Triton backend passes uint8."""
    args = tree_launch(6, QLEN)
    args[3] = args[3].to(torch.uint8)
    theirs = run_cuda(cuda_session, args)
    ours = clone_args(args)
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
    args = tree_launch(0, BITPACK, n=12)       # uint16 items
    args[3].view(torch.uint8)[2 * 3 + 1] = 8   # the upper byte of item 3
    refused(lambda: build_tree_kernel_efficient(*args), "tree_mask", "item 3 has byte 1 = 8, not 0", "prefilled")


def test_tree_bitpacking_byte_zero_is_overwritten_as_sglang_does(cuda_session):
    """sglang's kernel stores byte 0 of each item before ORing into it: junk there is fine."""
    args = tree_launch(8, BITPACK, n=12)
    args[3].view(torch.uint8)[0::2] = 0x5A
    theirs = run_cuda(cuda_session, args)
    ours = clone_args(args)
    build_tree_kernel_efficient(*ours)
    assert tree_difference(theirs, ours) is None


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

def _sglang_caller_module(installed_sglang_root, silent_op) -> types.ModuleType:
    """A stand-in for ``sglang.kernels.ops.speculative.spec_tree`` (sglang needs CUDA to
    import): sglang's own ``build_tree_kernel_efficient_func``, compiled from the installed
    source text, as it runs on a CUDA machine; the op it calls is ``silent_op``."""
    path = installed_sglang_root / TREE_TRITON_SOURCE
    tree = ast.parse(path.read_text(encoding="utf-8"))
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_tree_kernel_efficient_func")
    module = types.ModuleType("spec_tree_stand_in")
    module.__dict__.update(torch=torch, TreeMaskMode=TreeMaskMode, _is_npu=False, _is_xpu=False, _is_cpu=False,
                           _is_cuda=True, _is_hip=False, _is_musa=False, sgl_build_tree_kernel_efficient=silent_op)
    exec(compile(ast.Module(body=[func], type_ignores=[]), str(path), "exec"), module.__dict__)  # noqa: S102
    return module


def test_readme_swap_turns_a_silent_overrun_into_an_error(installed_sglang_root, monkeypatch):
    calls = []
    spec_tree = _sglang_caller_module(installed_sglang_root, lambda *args: calls.append(args))  # the CUDA op: no word
    args = tree_launch(0, FULL, slack=0)
    args[3] = args[3][:-8].clone()           # a tree mask 8 cells short
    spec_tree.build_tree_kernel_efficient_func(*args)
    assert len(calls) == 1                   # sglang's path: nothing said

    monkeypatch.setattr(spec_tree, "sgl_build_tree_kernel_efficient", specbound.sglang.build_tree_kernel_efficient)
    with pytest.raises(ValueError, match=r"tree_mask: has .* this launch writes up to .*output_holds_batch"):
        spec_tree.build_tree_kernel_efficient_func(*args)
