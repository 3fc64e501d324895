"""What the checked sglang drop-ins cost per launch, beside sglang's own kernels run interpreted.

    python bench/bench_sglang_dropin.py [--repeat N]

For a test that swaps them in (``specbound.sglang``): milliseconds per launch of
``build_tree_kernel_efficient`` (every layout) and ``generate_draft_decode_kv_indices``
(page sizes 1 and 16, both grid specializations) at a few batch sizes, and of sglang's
Triton kernels on the same launches under Triton's interpreter (plain, not bounds checked;
the tree's BITPACKING has no Triton port).  Median of ``--repeat`` launches after one
warm-up.  Needs sglang installed (``pip install --no-deps sglang==0.5.23``); its kernels are
read from source by path, never imported.
"""

from __future__ import annotations

import argparse
import statistics
import time

from specbound import kernels  # noqa: F401 - first: it selects the interpreter before triton loads
from specbound.engines.sglang.locate import locate
from specbound.engines.sglang import launch as sglang_replay
from specbound.replay import load_kernel
from specbound.sglang import build_tree_kernel_efficient, generate_draft_decode_kv_indices
from specbound.sglang.testing import clone_args, kv_launch, tree_launch
from specbound.spec import TreeMaskMode

import torch


def _ms(run, args_of, repeat: int) -> float:
    run(args_of())
    times = []
    for _ in range(repeat):
        args = args_of()
        start = time.perf_counter()
        run(args)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _tree_port(kernel):
    def run(args):
        pl, sel, seq, mask, pos, ri, rnt, rns, topk, depth, n, mode = args
        prefix = torch.cumsum(seq, 0) - seq
        kernel[(seq.shape[0],)](pl, sel, seq, prefix, mask, pos, ri, rnt, rns, topk=topk, depth=depth,
                                draft_token_num=n, tree_mask_mode=mode, batch_size=seq.shape[0],
                                parent_list_stride=pl.stride(0), selected_index_stride=sel.stride(0))
    return run


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args(argv)
    root = locate().root
    kv_kernel = load_kernel(str(root / "kernels/ops/speculative/cache_locs.py"), sglang_replay.KV_KERNEL)
    tree_kernel = load_kernel(str(root / "kernels/ops/speculative/spec_tree.py"),
                                            sglang_replay.TREE_KERNEL)
    print(f"{'launch':<52} {'drop-in ms':>11} {'sglang ms':>10}")
    for bs in (4, 32):
        for mode in TreeMaskMode:
            base = tree_launch(0, mode, bs=bs, topk=4, depth=5, n=8)
            ours = _ms(lambda args: build_tree_kernel_efficient(*args), lambda: clone_args(base), a.repeat)
            theirs = ("-" if mode is TreeMaskMode.QLEN_ONLY_BITPACKING else
                      f"{_ms(_tree_port(tree_kernel), lambda: clone_args(base), a.repeat):.1f}")
            print(f"{f'tree K=4 D=5 n=8 bs={bs} {mode.name}':<52} {ours:>11.1f} {theirs:>10}")
        for page in (1, 16):
            for blocks in (0, 2):
                grid, base, kw = kv_launch(0, num_seqs=bs, topk=4, num_steps=5, page=page, blocks=blocks)
                ours = _ms(lambda args: generate_draft_decode_kv_indices[grid](*args, **kw), lambda: clone_args(base),
                           a.repeat)
                theirs = _ms(lambda args: kv_kernel[grid](*args, **kw), lambda: clone_args(base), a.repeat)
                label = f"kv K=4 steps=5 bs={bs} page={page} NUM_STEPS={kw['NUM_STEPS']}"
                print(f"{label:<52} {ours:>11.1f} {theirs:>10.1f}")


if __name__ == "__main__":
    main()
