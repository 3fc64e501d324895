"""Interpreted throughput of the Triton kernels on CPU, beside the plain reference.

    python bench/bench_kernels.py [--quick]

Prints requests/minute (and ms per launch) for the tree build at (K, D, n) = (4, 5, 8)
in every mask layout and for the draft kv_indices at K = 4, 5 steps, page sizes 1 and
16.  Each figure is the median of a few timed launches after one warm-up launch (the
first launch of a kernel pays the interpreter's source rewrite).  The kernels run
plain (unchecked); ``--checked`` times them under the bounds-checked interpreter.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time

from specbound import kernels  # first: it selects the interpreter before triton loads
from specbound import reference as ref
from specbound.kernels.testing import random_kv_batch, random_tree_batch
from specbound.spec import TreeMaskMode


def _time(fn, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes and repeats")
    ap.add_argument("--checked", action="store_true", help="time under checked_interpreter")
    ap.add_argument("--max-seq-len", type=int, default=1024)
    args = ap.parse_args(argv)
    repeats = 2 if args.quick else 5
    rng = random.Random(0)
    ctx = kernels.checked_interpreter() if args.checked else contextlib.nullcontext()
    print(f"interpreted: {kernels.INTERPRETED}  checked: {args.checked}  seq lens <= {args.max_seq_len}")
    print(f"{'op':<42}{'bs':>5}{'kernel ms':>12}{'kernel req/min':>16}{'ref ms':>10}{'ref req/min':>14}")
    rows = []
    with ctx:
        k, d, n = 4, 5, 8
        for bs in ((64,) if args.quick else (1, 16, 64, 256)):
            batch = random_tree_batch(rng, bs, k, d, n, max_seq_len=args.max_seq_len)
            for mode in TreeMaskMode:
                kw = dict(topk=k, depth=d, num_draft_tokens=n, mode=mode)
                tk = _time(lambda: kernels.build_tree(*batch, **kw), repeats)
                tr = _time(lambda: ref.build_tree(*batch, **kw), repeats)
                rows.append((f"build_tree K4 D5 n8 {mode.name}", bs, tk, tr))
        for page in (1, 16):
            for bs in ((64,) if args.quick else (1, 16, 64)):
                batch = random_kv_batch(rng, bs, 4, 5, page, max_seq_len=args.max_seq_len)
                kw = dict(topk=4, num_steps=5, page_size=page)
                tk = _time(lambda: kernels.draft_decode_kv_indices(*batch, **kw), repeats)
                tr = _time(lambda: ref.draft_decode_kv_indices(*batch, **kw), repeats)
                rows.append((f"draft_kv K4 steps5 page{page}", bs, tk, tr))
    for name, bs, tk, tr in rows:
        print(f"{name:<42}{bs:>5}{tk * 1e3:>12.2f}{bs * 60 / tk:>16,.0f}{tr * 1e3:>10.2f}{bs * 60 / tr:>14,.0f}")


if __name__ == "__main__":
    main()
