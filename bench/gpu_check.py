"""GPU check: the kernel tests compiled on CUDA, then a short timing at serving shapes.

    python bench/gpu_check.py [--out results.json] [--skip-tests]

1. runs ``pytest tests/test_kernels*.py`` in a subprocess with ``TRITON_INTERPRET``
   removed from its environment, so the kernels compile (the guard-band tests of
   tests/test_kernels_gpu.py run; the interpreter-only tests skip);
2. times the compiled launch wrappers (validation included, as a caller sees them) and
   the launches alone through the same launch plans (CUDA events) for the tree build at (K, D, n) = (4, 5, 8) in
   every layout and the draft kv_indices at K = 4, 5 steps, page 1 and 16, for bs 1..256
   and seq lens up to 4096;
3. writes everything to a JSON file (default: $OUT/gpu_check.json if $OUT is set, else
   bench/gpu_check.json) and prints it.  The whole run stays under 5 minutes.

Without CUDA it writes ``{"cuda": false, ...}`` and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST_TIMEOUT_S = 200
POISON = -7   # what the timed launches' buffers hold before they run


def run_tests() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "--no-header", "-p", "no:cacheprovider",
           *sorted(str(p) for p in (ROOT / "tests").glob("test_kernels*.py"))]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=PYTEST_TIMEOUT_S)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout", (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else str(e.stdout)
    summary = [line for line in out.splitlines() if " passed" in line or " failed" in line or "error" in line]
    return {"returncode": rc, "seconds": round(time.time() - t0, 1),
            "summary": summary[-1] if summary else "", "tail": out[-4000:]}


def _cuda_ms(fn, repeats: int = 20) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def _wall_ms(fn, repeats: int = 20) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def _poisoned(t, bool_poison: bool):
    """A buffer like ``t``, every cell ``POISON`` (``bool_poison`` for a mask of bools)."""
    import torch

    return torch.full_like(t, bool_poison if t.dtype == torch.bool else POISON)


def timing_cases(device, sizes=(1, 8, 32, 64, 128, 256), seed: int = 0, bool_poison: bool = True):
    """(record, wrapper, raw) per timed shape: ``wrapper`` is the launch wrapper as a caller
    sees it (validation included), ``raw`` the launches alone (``launch_tree`` / ``launch_kv``:
    the same launch plans as the wrapper, no validation; host-computed prefix sums passed in),
    writing into buffers of their own, poisoned first (``POISON``; ``bool_poison`` in a mask
    of bools), so a cell the launch skips shows.  Both return their outputs, so a test can run them on the CPU under the
    interpreter and compare (tests/test_gpu_check.py)."""
    from specbound import kernels, spec  # before triton: it picks interpreted or compiled
    from specbound.kernels import draft_kv as kvmod
    from specbound.kernels import tree_build as tbmod
    from specbound.reference.samples import random_kv_batch, random_tree_batch
    from specbound.spec import TreeMaskMode

    rng = random.Random(seed)
    k, d, n = 4, 5, 8
    for bs in sizes:
        batch = [x.to(device) for x in random_tree_batch(rng, bs, k, d, n, max_seq_len=4096)]
        seq = batch[2].tolist()
        prefix = spec.prefix_sums(seq)
        for mode in TreeMaskMode:
            kw = dict(topk=k, depth=d, num_draft_tokens=n, mode=mode)
            outs = [_poisoned(o, bool_poison) for o in kernels.build_tree(*batch, **kw)]

            def raw(outs=outs, batch=batch, seq=seq, prefix=prefix, mode=mode):
                tbmod.launch_tree(*batch, *outs, topk=k, depth=d, num_draft_tokens=n, mode=mode,
                                  seq_lens_list=seq, prefix=prefix)
                return outs

            yield ({"op": "build_tree", "mode": mode.name, "bs": bs, "K": k, "D": d, "n": n, "max_seq_len": max(seq)},
                   lambda batch=batch, kw=kw: list(kernels.build_tree(*batch, **kw)), raw)
    for page in (1, 16):
        for bs in sizes:
            kb = [x.to(device) for x in random_kv_batch(rng, bs, 4, 5, page, max_seq_len=4096)]
            seq = kb[2].tolist()
            kw = dict(topk=4, num_steps=5, page_size=page)
            kv, indptr = (_poisoned(t, bool_poison) for t in kernels.draft_decode_kv_indices(*kb, **kw))
            prefix = spec.prefix_sums(seq)

            def raw(kb=kb, kv=kv, indptr=indptr, seq=seq, prefix=prefix, kw=kw):
                kvmod.launch_kv(*kb, kv, indptr, **kw, seq_lens_list=seq, prefix=prefix)
                return [kv, indptr]

            yield ({"op": "draft_kv", "page_size": page, "bs": bs, "K": 4, "num_steps": 5, "max_seq_len": max(seq),
                    "cells": len(spec.kv_indices_cells(seq, 4, 5, kv.shape[1])) if bs <= 8 else None,
                    "seq_lens": seq},
                   lambda kb=kb, kw=kw: list(kernels.draft_decode_kv_indices(*kb, **kw)), raw)


def run_timing(deadline: float) -> list[dict]:
    import torch

    results = []
    for record, wrapper, raw in timing_cases(torch.device("cuda")):
        if time.time() > deadline:
            break
        record.pop("seq_lens", None)
        results.append({**record, "kernel_ms": round(_cuda_ms(raw), 4), "wrapper_ms": round(_wall_ms(wrapper), 4)})
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else ROOT / "bench" / "gpu_check.json"
    ap.add_argument("--out", type=Path, default=default_out)
    ap.add_argument("--skip-tests", action="store_true")
    args = ap.parse_args(argv)
    t_start = time.time()

    import torch

    report: dict = {"cuda": torch.cuda.is_available(), "python": platform.python_version(),
                    "torch": torch.__version__}
    try:
        import triton
        report["triton"] = triton.__version__
    except ImportError:
        report["triton"] = None
    if report["cuda"]:
        report["device"] = torch.cuda.get_device_name(0)
        os.environ.pop("TRITON_INTERPRET", None)
        if not args.skip_tests:
            report["tests"] = run_tests()
        from specbound import kernels
        report["kernels_interpreted"] = kernels.INTERPRETED
        if not kernels.INTERPRETED:
            report["timing"] = run_timing(deadline=t_start + 270)
    else:
        report["note"] = "no CUDA device: nothing compiled; run the CPU tests (checked interpreter) instead"
    report["seconds"] = round(time.time() - t_start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    print(f"written to {args.out}")
    tests = report.get("tests")
    return 0 if not tests or tests["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
