"""GPU check: the kernel tests compiled on CUDA, then a short timing at serving shapes.

    python bench/gpu_check.py [--out results.json] [--skip-tests]

1. runs ``pytest tests/test_kernels*.py`` in a subprocess with ``TRITON_INTERPRET``
   removed from its environment, so the kernels compile (the guard-band tests of
   tests/test_kernels_gpu.py run; the interpreter-only tests skip);
2. times the compiled launch wrappers (validation included, as a caller sees them) and
   the raw kernel launches (CUDA events) for the tree build at (K, D, n) = (4, 5, 8) in
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


def run_timing(deadline: float) -> list[dict]:
    import torch

    from specbound import kernels, spec  # before triton: it picks interpreted or compiled
    import triton
    from specbound.kernels import draft_kv as kvmod
    from specbound.kernels import tree_build as tbmod
    from specbound.reference.samples import random_kv_batch, random_tree_batch
    from specbound.spec import TreeMaskMode

    dev = torch.device("cuda")
    rng = random.Random(0)
    results = []
    k, d, n = 4, 5, 8
    for bs in (1, 8, 32, 64, 128, 256):
        if time.time() > deadline:
            break
        batch = [x.to(dev) for x in random_tree_batch(rng, bs, k, d, n, max_seq_len=4096)]
        seq = batch[2].tolist()
        prefix = torch.tensor(spec.prefix_sums(seq)[:-1], device=dev)
        for mode in TreeMaskMode:
            kw = dict(topk=k, depth=d, num_draft_tokens=n, mode=mode)
            out = kernels.build_tree(*batch, **kw)
            block_b, nodes = tbmod.tree_blocks(bs, n)

            def raw():
                tbmod.build_tree_kernel[(triton.cdiv(bs, block_b),)](
                    batch[0], batch[1], batch[2], prefix, *out, bs, k, spec.parent_list_width(k, d),
                    spec.selected_index_width(n), n, MODE=int(mode), DEPTH=d, BLOCK_B=block_b, NODES=nodes)

            results.append({"op": "build_tree", "mode": mode.name, "bs": bs, "K": k, "D": d, "n": n,
                            "max_seq_len": max(seq), "kernel_ms": round(_cuda_ms(raw), 4),
                            "wrapper_ms": round(_wall_ms(lambda: kernels.build_tree(*batch, **kw)), 4)})
    for page in (1, 16):
        for bs in (1, 8, 32, 64, 128, 256):
            if time.time() > deadline:
                break
            kb = random_kv_batch(rng, bs, 4, 5, page, max_seq_len=4096)
            kb = [x.to(dev) for x in kb]
            seq = kb[2].tolist()
            kw = dict(topk=4, num_steps=5, page_size=page)
            kv, indptr = kernels.draft_decode_kv_indices(*kb, **kw)
            prefix = torch.tensor(spec.prefix_sums(seq)[:-1], device=dev)
            blocks = kvmod.kv_blocks(bs, 4, 5)

            def raw():
                kvmod.draft_kv_kernel[(triton.cdiv(bs, blocks[0]),)](
                    kb[0], kb[1], kb[2], prefix, kv, indptr, bs, 4, 5, page, kv.shape[1], indptr.shape[1],
                    kb[1].stride(0), kb[1].stride(1),
                    BLOCK_B=blocks[0], PAIRS=blocks[1], STEPS=blocks[2], BLOCK_C=blocks[3])

            results.append({"op": "draft_kv", "page_size": page, "bs": bs, "K": 4, "num_steps": 5,
                            "max_seq_len": max(seq), "cells": len(spec.kv_indices_cells(seq, 4, 5, kv.shape[1]))
                            if bs <= 8 else None,
                            "kernel_ms": round(_cuda_ms(raw), 4),
                            "wrapper_ms": round(_wall_ms(lambda: kernels.draft_decode_kv_indices(*kb, **kw)), 4)})
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
