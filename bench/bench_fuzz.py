"""Requests/minute of the tree build and the draft kv_indices build, CPU, side by side:
specbound's reference, specbound's interpreted Triton kernels and (when an sglang source
tree is found) sglang's own Triton kernels interpreted on the same inputs.

    python bench/bench_fuzz.py [--bs 64] [--repeat 3] [--sglang PATH]

sglang is looked up at ``--sglang``, ``/tmp/sgl/x/sglang``, or an installed ``sglang``
package.  Its ``@triton.jit`` functions are picked out of the source files with ``ast``
and exec'd here (by :mod:`specbound.kernels.source`, so Triton can read them); nothing of
sglang is copied into this repository and its package is never imported.

Targets: our interpreted kernels >= 3x sglang's rate on each op; the
reference >= 100,000 requests/min.  The script prints the measured rates and whether
each target is met; it does not fail on a miss.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

from specbound import kernels, spec  # first: sets TRITON_INTERPRET=1 on a CPU machine

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from specbound import reference as ref  # noqa: E402
from specbound.kernels import plan, source  # noqa: E402
from specbound.reference.samples import random_kv_batch, random_tree_batch  # noqa: E402

K, STEPS, N = 4, 5, 8          # serving default (steps, topk, n) = (5, 4, 8)


def find_sglang(explicit: str | None) -> Path | None:
    for cand in ([explicit] if explicit else []) + ["/tmp/sgl/x/sglang"]:
        if cand and (Path(cand) / "kernels/ops/speculative/spec_tree.py").exists():
            return Path(cand)
    try:
        import importlib.util
        specobj = importlib.util.find_spec("sglang")
        if specobj and specobj.submodule_search_locations:
            root = Path(list(specobj.submodule_search_locations)[0])
            if (root / "kernels/ops/speculative/spec_tree.py").exists():
                return root
    except (ImportError, ValueError):
        pass
    return None


def load_jit_functions(path: Path) -> dict:
    """Exec only the @triton.jit functions of a source file; returns them by name."""
    namespace = {"triton": triton, "tl": tl, "torch": torch}
    return source.load_jit_functions(path.read_text(), f"<sglang {path.name}>", namespace)


def rate(fn, requests: int, repeat: int) -> float:
    fn()  # warm-up (first interpretation parses the kernel)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return 60.0 * requests / best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bs", type=int, default=64, help="requests per launch (default 64)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sglang", default=None, help="path of an sglang source tree (the package folder)")
    args = ap.parse_args(argv)
    if args.bs < 1:
        ap.error("--bs must be >= 1")
    if not kernels.INTERPRETED:
        print("kernels are compiled (CUDA): this benchmark measures the interpreter; set TRITON_INTERPRET=1")
    rng = random.Random(0)
    bs = args.bs
    tree = random_tree_batch(rng, bs, K, STEPS, N, max_seq_len=256)
    kvb = random_kv_batch(rng, bs, K, STEPS, 1, max_seq_len=256, dtype=torch.int64)
    tkw = dict(topk=K, depth=STEPS, num_draft_tokens=N, mode=spec.TreeMaskMode.QLEN_ONLY)
    kkw = dict(topk=K, num_steps=STEPS)
    rows = {}
    rows[("tree", "reference")] = rate(lambda: ref.build_tree(*tree, **tkw), bs, args.repeat)
    rows[("tree", "specbound triton")] = rate(lambda: kernels.build_tree(*tree, **tkw), bs, args.repeat)
    rows[("kv", "reference")] = rate(lambda: ref.draft_decode_kv_indices(*kvb, **kkw), bs, args.repeat)
    rows[("kv", "specbound triton")] = rate(lambda: kernels.draft_decode_kv_indices(*kvb, **kkw), bs, args.repeat)

    root = find_sglang(args.sglang)
    if root is None:
        print("sglang not found (--sglang PATH, /tmp/sgl/x/sglang or an installed sglang): skipping its kernels")
    else:
        ns_tree = load_jit_functions(root / "kernels/ops/speculative/spec_tree.py")
        ns_kv = load_jit_functions(root / "kernels/ops/speculative/cache_locs.py")
        pl, sel, seq = tree
        want = ref.build_tree(*tree, **tkw)

        def sgl_tree():
            out = dict(mask=torch.zeros(bs * N * N, dtype=torch.bool), pos=torch.zeros(bs * N, dtype=torch.int64),
                       ri=torch.full((bs, N), -1, dtype=torch.int64), nt=torch.full((bs, N), -1, dtype=torch.int64),
                       ns=torch.full((bs, N), -1, dtype=torch.int64))
            prefix = torch.cumsum(seq, 0) - seq
            ns_tree["sgl_build_tree_kernel_efficient_triton"][(bs,)](
                pl, sel, seq, prefix, out["mask"], out["pos"], out["ri"], out["nt"], out["ns"],
                topk=K, depth=STEPS, draft_token_num=N, tree_mask_mode=int(spec.TreeMaskMode.QLEN_ONLY),
                batch_size=bs, parent_list_stride=pl.stride(0), selected_index_stride=sel.stride(0))
            return out
        got = sgl_tree()
        same = torch.equal(got["mask"], want.tree_mask) and torch.equal(got["pos"], want.positions)
        print(f"sglang tree build agrees with specbound's reference on this batch: {same}")
        rows[("tree", "sglang triton")] = rate(sgl_tree, bs, args.repeat)

        pool, r2t, seqk = kvb
        used = spec.draft_kv_indices_used_len(int(seqk.sum()), K, bs * K, STEPS)
        positions = seqk.repeat_interleave(K)

        def sgl_kv():
            ind = torch.full((STEPS, used), -1, dtype=torch.int64)
            ptr = torch.zeros((STEPS, bs * K + 1), dtype=torch.int64)
            ns_kv["generate_draft_decode_kv_indices"][(STEPS, bs, K)](
                pool, r2t, seqk, ind, ptr, positions, r2t.stride(0), ind.shape[1], ptr.shape[1],
                plan.pow2(bs), plan.pow2(STEPS), plan.pow2(bs * K),
                1, 0, 0, NUM_STEPS=0, ENTRY_PAGE_SIZE=1, v2p=None, TRANSLATE=False)
            return ind, ptr
        ind, ptr = sgl_kv()
        w_ind, w_ptr = ref.draft_decode_kv_indices(*kvb, **kkw)
        print(f"sglang kv_indices agree with specbound's reference on this batch: "
              f"{torch.equal(ind, w_ind) and torch.equal(ptr, w_ptr)}")
        rows[("kv", "sglang triton")] = rate(sgl_kv, bs, args.repeat)

    print(f"\nrequests/minute, bs={bs}, (steps, topk, n) = ({STEPS}, {K}, {N}), {os.cpu_count()} CPUs, "
          f"triton {triton.__version__}, torch {torch.__version__}")
    print(f"{'op':6s} {'implementation':18s} {'req/min':>12s}")
    for (op, impl), r in rows.items():
        print(f"{op:6s} {impl:18s} {r:12,.0f}")
    print()
    for op in ("tree", "kv"):
        ours, theirs = rows[(op, "specbound triton")], rows.get((op, "sglang triton"))
        if theirs:
            print(f"{op}: ours / sglang = {ours / theirs:.1f}x (target >= 3x): {'met' if ours >= 3 * theirs else 'MISSED'}")
        r = rows[(op, "reference")]
        print(f"{op}: reference {r:,.0f} req/min (target >= 100,000): {'met' if r >= 100_000 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
