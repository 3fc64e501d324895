"""Interpreted throughput of the Triton kernels on CPU, beside the plain reference.

    python bench/bench_kernels.py [--quick]

Prints requests/minute (and ms per launch) for the tree build at (K, D, n) = (4, 5, 8)
in every mask layout and for the draft kv_indices at K = 4, 5 steps, page sizes 1 and
16.  Each figure is the median of a few timed launches after one warm-up launch (the
first launch of a kernel pays the interpreter's source rewrite).  The kernels run
plain (unchecked); ``--checked`` times them under the bounds-checked interpreter.

``--overhead`` measures what the bounds-checked interpreter costs instead, on the
launches of the differential fuzz (the ``tree_cases`` / ``kv_cases`` strategies, drawn
deterministically, ``--cases`` of each) and on the serving shape at bs 64: each group is
timed plain, checked, and checked with footprint recording including reading every
launch's footprint as sets (``session.written()``, as the fuzz does), best of
``--repeat`` alternating rounds.  It prints checked / plain per group (target: under
1.5x on the fuzz's launches) and how many lanes were checked without pointer provenance.
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
    ap.add_argument("--overhead", action="store_true", help="checked / plain time on the fuzz's launches")
    ap.add_argument("--cases", type=int, default=40, help="fuzz cases per op for --overhead")
    ap.add_argument("--repeat", type=int, default=3, help="rounds for --overhead (best is kept)")
    args = ap.parse_args(argv)
    if args.overhead:
        return overhead(args.cases, args.repeat)
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


def fuzz_launches(n: int) -> dict[str, list]:
    """``n`` tree and ``n`` kv launches of the fuzz's strategies, as zero-argument callables
    (inputs built once; outputs allocated per call, as the fuzz does)."""
    from hypothesis import HealthCheck, given, settings

    from specbound.fuzz import strategies as sst

    cases: dict[str, list] = {"tree": [], "kv": []}
    quiet = settings(max_examples=n, derandomize=True, database=None, deadline=None,
                     suppress_health_check=list(HealthCheck))

    @quiet
    @given(sst.tree_cases())
    def tree(case):
        if len(cases["tree"]) < n:
            cases["tree"].append(case)

    @quiet
    @given(sst.kv_cases())
    def kv(case):
        if len(cases["kv"]) < n:
            cases["kv"].append(case)

    tree()
    kv()
    out: dict[str, list] = {"tree": [], "kv": []}
    for c in cases["tree"]:
        t, kw = c.tensors(), c.kwargs()
        out["tree"].append(lambda t=t, kw=kw: kernels.build_tree(*t, **kw))
    for c in cases["kv"]:
        t, kw = c.tensors(), c.kwargs()
        out["kv"].append(lambda c=c, t=t, kw=kw: kernels.draft_decode_kv_indices(
            *t, **kw, **dict(zip(("kv_indices", "kv_indptr"), c.buffers()))))
    return out


def overhead(num_cases: int, repeat: int) -> None:
    """Checked / plain time of the fuzz's launches and of the serving shape."""
    import triton

    rng = random.Random(0)
    groups = fuzz_launches(num_cases)
    tree = random_tree_batch(rng, 64, 4, 5, 8, max_seq_len=256)
    kvb = random_kv_batch(rng, 64, 4, 5, 1, max_seq_len=256)
    groups["tree serving bs64 (all modes)"] = [
        (lambda m=m: kernels.build_tree(*tree, topk=4, depth=5, num_draft_tokens=8, mode=m)) for m in TreeMaskMode]
    groups["kv serving bs64"] = [lambda: kernels.draft_decode_kv_indices(*kvb, topk=4, num_steps=5)]

    def run_all(fns, session=None):
        t0 = time.perf_counter()
        for fn in fns:
            fn()
            if session is not None:   # the fuzz reads every launch's footprint as sets
                session.written()
                session.launches.clear()
        return time.perf_counter() - t0

    print(f"checked-interpreter overhead, {num_cases} fuzz cases per op, best of {repeat}; "
          f"triton {triton.__version__}")
    print(f"{'launches':<32}{'n':>4}{'plain s':>9}{'checked':>9}{'ratio':>7}{'+footprint':>11}{'ratio':>7}"
          f"{'lost lanes':>11}")
    worst = {}
    for name, fns in groups.items():
        run_all(fns)   # warm-up: the interpreter parses each kernel once
        plain = chk = fp = float("inf")
        for _ in range(repeat):
            plain = min(plain, run_all(fns))
            with kernels.checked_interpreter() as session:
                chk = min(chk, run_all(fns))
            with kernels.checked_interpreter(record_footprint=True) as session:
                fp = min(fp, run_all(fns, session))
        lost = session.accesses_without_provenance
        worst[name] = max(chk, fp) / plain
        print(f"{name:<32}{len(fns):>4}{plain:>9.3f}{chk:>9.3f}{chk / plain:>6.2f}x{fp:>11.3f}{fp / plain:>6.2f}x"
              f"{lost:>11}")
    fuzz = max(worst["tree"], worst["kv"])
    print(f"worst ratio on the fuzz's launches {fuzz:.2f}x (target < 1.5x): {'met' if fuzz < 1.5 else 'MISSED'}; "
          f"at the serving shape {max(worst.values()):.2f}x")


if __name__ == "__main__":
    main()
