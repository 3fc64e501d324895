"""sglang's CUDA tree kernels on a GPU under compute-sanitizer, next to the CPU harness.

    python bench/cuda_tree_gpu.py [--sglang-path DIR] [--examples N] [--timeout S] [--out FILE]

Status: written for a GPU machine and NOT RUN yet (no GPU was lent to this work); the
docs say so next to the CPU results.

1. Reads the kernel file from the installed sglang by path (``specbound.engines.sglang.cuda.source``,
   as the audit does) and compiles it with ``nvcc -lineinfo`` into a shared library with a
   host launcher per kernel: ``cudaMalloc`` of exactly each buffer's extent (so memcheck
   knows every boundary), copy in, launch ``<<<bs, n>>>``, synchronize, copy out.
2. Runs each group of cases in a worker process (``--worker GROUP``) under
   ``compute-sanitizer --tool memcheck``, with a timeout: a memcheck error poisons a CUDA
   context and a cyclic tree never ends on a GPU (there is no step budget there), so every
   malformed probe gets its own worker.  Groups: ``valid:<kernel>`` (the audit's Hypothesis
   cases and seed: outputs vs ``specbound.reference``, poisoned footprints),
   ``probe:<kernel>:<probe>`` (the four malformed probes) and ``int32`` (the smallest
   wrapping FULL_MASK case, a 2 GiB mask).
3. Runs the same cases through the CPU harness, prints both side by side and writes JSON
   (default ``$OUT/cuda_tree_gpu.json``, else ``bench/cuda_tree_gpu.json``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def launcher_source(kernel_file: Path, kernels) -> str:
    """CUDA host launchers: pointer parameters become (host pointer, exact byte count) pairs."""
    out = [f'#include "{kernel_file}"', "#include <cuda_runtime.h>", ""]
    for k in kernels:
        ptrs = [p for p in k.params if p.is_pointer]
        scalars = [p for p in k.params if not p.is_pointer]
        call, i = [], 0
        for p in k.params:
            if p.is_pointer:
                call.append(f"({p.ctype})dev[{i}]")
                i += 1
            else:
                call.append(p.name)
        sig = ", ".join(["const unsigned* grid", "const unsigned* block", "void** host", "const size_t* nbytes"]
                        + [p.decl for p in scalars])
        out.append(f"""extern "C" int run_{k.name}({sig}) {{
  void* dev[{len(ptrs)}] = {{0}};
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < {len(ptrs)} && err == cudaSuccess; ++i) {{
    err = cudaMalloc(&dev[i], nbytes[i] ? nbytes[i] : 1);
    if (err == cudaSuccess) err = host[i] ? cudaMemcpy(dev[i], host[i], nbytes[i], cudaMemcpyHostToDevice)
                                          : cudaMemset(dev[i], 0, nbytes[i]);
  }}
  if (err == cudaSuccess) {{
    {k.qualified}<<<dim3(grid[0], grid[1], grid[2]), dim3(block[0], block[1], block[2])>>>({", ".join(call)});
    err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
  }}
  for (int i = 0; i < {len(ptrs)} && err == cudaSuccess; ++i)
    if (host[i]) err = cudaMemcpy(host[i], dev[i], nbytes[i], cudaMemcpyDeviceToHost);
  for (int i = 0; i < {len(ptrs)}; ++i) cudaFree(dev[i]);
  return (int)err;
}}
""")
    return "\n".join(out)


def compile_gpu(prep, workdir: Path, nvcc: str) -> Path:
    kernels = tuple(prep.kernels.values())
    kernel_file = prep.root / prep.where[kernels[0].name].rsplit(":", 1)[0]
    (workdir / "launch.cu").write_text(launcher_source(kernel_file, kernels))
    lib = workdir / "libtree_gpu.so"
    subprocess.run([nvcc, "-O3", "-lineinfo", "-arch=native", "-Xcompiler", "-fPIC", "-shared", "-o", str(lib),
                    str(workdir / "launch.cu")], check=True)
    return lib


class GpuSession:
    """The CPU harness's ``Session.run`` contract, on the GPU (no thread order, no step budget)."""

    def __init__(self, lib_path: Path, kernels):
        self.lib = ctypes.CDLL(str(lib_path))
        self.kernels = {k.name: k for k in kernels}
        self.launches = 0

    def run(self, launch):
        from specbound.engines.sglang.cuda.child import SCALAR_CTYPES
        from specbound.engines.sglang.cuda.harness import Buf, Outcome

        kernel = self.kernels[launch.kernel]
        host, sizes, scalars, keep = [], [], [], {}
        for p, a in zip(kernel.params, launch.args):
            if isinstance(a, Buf):
                buf = None if a.lazy else ctypes.create_string_buffer(a.data or bytes(a.nbytes), a.nbytes)
                keep[a.name] = buf
                host.append(ctypes.cast(buf, ctypes.c_void_p) if buf is not None else None)
                sizes.append(a.nbytes)
            else:
                scalars.append(getattr(ctypes, SCALAR_CTYPES[p.ctype])(a))
        t0 = time.perf_counter()
        rc = getattr(self.lib, f"run_{launch.kernel}")(
            (ctypes.c_uint * 3)(*launch.grid), (ctypes.c_uint * 3)(*launch.block),
            (ctypes.c_void_p * len(host))(*host), (ctypes.c_size_t * len(sizes))(*sizes), *scalars)
        self.launches += 1
        if rc != 0:
            return Outcome("oob" if rc in (700, 701, 716, 719) else "error",
                           f"CUDA error {rc} (compute-sanitizer's report is in the worker output)",
                           seconds=time.perf_counter() - t0)
        return Outcome("ok", buffers={n: b.raw for n, b in keep.items() if b is not None},
                       seconds=time.perf_counter() - t0)


def cases(group: str, examples: int, seed: int):
    """(label, kernel, case, malformed) of one group, the same cases the audit runs."""
    from hypothesis import given, seed as hseed, settings

    from specbound.engines.sglang.cuda.check import wrap_case
    from specbound.engines.sglang.cuda.offsets import smallest_seq_len
    from specbound.engines.sglang.cuda.probes import PROBES
    from specbound.engines.sglang.cuda.tree import KERNEL_MODES
    from specbound.fuzz import strategies as sst

    kind, _, rest = group.partition(":")
    if kind == "int32":
        bound = smallest_seq_len(8)
        return [("int32", "build_tree_efficient", wrap_case(bound.n, bound.seq_len), True)]
    if kind == "probe":
        kernel, name = rest.split(":")
        probe = next(p for p in PROBES if p.name == name)
        return [(f"probe {name}", kernel, probe.case(KERNEL_MODES[kernel][-1]), True)]
    drawn = []

    @hseed(seed)
    @settings(max_examples=examples, database=None, deadline=None)
    @given(sst.tree_cases(malformed=0.0, modes=KERNEL_MODES[rest]))
    def collect(case):
        drawn.append(case)

    collect()
    return [(f"valid #{i}", rest, c, False) for i, c in enumerate(drawn)]


def run_group(group: str, session, examples: int, seed: int, results: Path) -> None:
    from specbound.engines.sglang.cuda.tree import make_launch, prefilled, run_case

    with results.open("a") as out:
        for label, kname, case, malformed in cases(group, examples, seed):
            kernel = session.kernels[kname]
            t0 = time.perf_counter()
            if group == "int32":
                o = session.run(make_launch(kernel, case, prefilled(case, "sglang", mask=False)))
                f = None if o.ok else o
            else:
                f = run_case(session, kernel, case, malformed=malformed)
            out.write(json.dumps({"group": group, "case": label, "kernel": kname, "replay": json.loads(case.to_json()),
                                  "kind": f.kind if f else "ok", "message": f.message if f else "",
                                  "seconds": round(time.perf_counter() - t0, 3)}) + "\n")
            out.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sglang-path")
    ap.add_argument("--examples", type=int, default=40)
    ap.add_argument("--seed", type=int, default=20240607)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per worker (a cyclic tree never ends)")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    ap.add_argument("--out")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--lib", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from specbound.engines.sglang.cuda.check import prepare
    from specbound.engines.sglang.cuda.harness import Session
    from specbound.engines.sglang.cuda.probes import PROBES
    from specbound.engines.sglang.locate import locate

    prep = prepare(locate(args.sglang_path).root)
    if args.worker:
        run_group(args.worker, GpuSession(Path(args.lib), tuple(prep.kernels.values())), args.examples, args.seed,
                  Path(args.results))
        return 0
    for tool in (args.nvcc, "compute-sanitizer"):
        if shutil.which(tool) is None:
            print(f"{tool} not found: this script needs the CUDA toolkit and a GPU", file=sys.stderr)
            return 2
    if len(prep.kernels) < 2:
        print(f"kernels not runnable: {prep.problems}", file=sys.stderr)
        return 2
    groups = ([f"valid:{k}" for k in prep.kernels] + [f"probe:{k}:{p.name}" for k in prep.kernels for p in PROBES]
              + ["int32"])
    report = {"sglang": str(prep.root), "groups": {}}
    with tempfile.TemporaryDirectory() as tmp:
        lib = compile_gpu(prep, Path(tmp), args.nvcc)
        for group in groups:
            results = Path(tmp) / "results.jsonl"
            results.write_text("")
            cmd = ["compute-sanitizer", "--tool", "memcheck", "--print-limit", "5", sys.executable, __file__,
                   "--worker", group, "--lib", str(lib), "--results", str(results), "--examples", str(args.examples),
                   "--seed", str(args.seed)] + (["--sglang-path", args.sglang_path] if args.sglang_path else [])
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                tail, rc = proc.stdout + proc.stderr, proc.returncode
            except subprocess.TimeoutExpired as e:
                tail, rc = f"timeout after {args.timeout:g} s (a GPU thread that never ends)", "timeout"
                tail += str(e.stdout or "")[-2000:]
            gpu = [json.loads(ln) for ln in results.read_text().splitlines() if ln.strip()]
            memcheck = [ln for ln in tail.splitlines() if ln.startswith("=========")][:12]
            report["groups"][group] = {"rc": rc, "seconds": round(time.perf_counter() - t0, 1), "gpu": gpu,
                                       "compute_sanitizer": memcheck}
    with Session(prep.library) as cpu, tempfile.TemporaryDirectory() as tmp:   # the same cases on the CPU
        for group, entry in report["groups"].items():
            cpu_out = Path(tmp) / f"{len(entry)}-{abs(hash(group))}.jsonl"
            run_group(group, CpuAdapter(cpu, prep), args.examples, args.seed, cpu_out)
            entry["cpu"] = [json.loads(ln) for ln in cpu_out.read_text().splitlines() if ln.strip()]
    for group, entry in report["groups"].items():
        def summary(rows):
            kinds = {}
            for r in rows:
                kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
            return ", ".join(f"{v} {k}" for k, v in kinds.items()) or "nothing ran"
        print(f"{group:48s} CPU: {summary(entry['cpu']):28s} GPU: {summary(entry['gpu'])} (rc {entry['rc']})")
        for line in entry["compute_sanitizer"][:3]:
            print(f"    {line}")
    if args.out:
        out = Path(args.out)
    else:
        out = (Path(os.environ["OUT"]) if "OUT" in os.environ else ROOT / "bench") / "cuda_tree_gpu.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"written to {out}")
    return 0


class CpuAdapter:
    """The CPU harness's Session with the kernels by name, as run_group expects."""

    def __init__(self, session, prep):
        self._session, self.kernels = session, prep.kernels

    def run(self, launch):
        return self._session.run(launch)


if __name__ == "__main__":
    sys.exit(main())
