"""sglang's CUDA tree kernels on the CPU under ASan/UBSan (specbound.engines.sglang.cuda).

The real kernels come from the installed sglang (read by path, never imported).  Every
harness path is shown to fail on a planted bug: a copy of sglang's kernel file with one
edit, written to a temporary package (never into the repository), or the harness itself
handed a buffer one element short.  Tests that compile skip with the reason when this
machine has no g++ or no sanitizer runtime; the library is cached, so a session compiles
each variant once.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from specbound.audit.report import ERROR, MATCHED, NOT_PRESENT, UNAVAILABLE, UNGUARDED, AuditReport
from specbound.engines.sglang.cuda import build, check, offsets, source
from specbound.engines.sglang.cuda.harness import Buf, Launch, Session
from specbound.engines.sglang.cuda.probes import PROBES
from specbound.engines.sglang.cuda.tree import run_case
from specbound.audit.extract import SourceIndex
from specbound.engines.sglang.locate import NotInstalled, locate
from specbound.fuzz.strategies import TreeCase
from specbound.spec import TreeMaskMode

EAGLE = "kernels/jit/include/sgl_kernel/speculative/eagle.cuh"
TREE = "build_tree_efficient"
PACKED = "build_tree_efficient_partial_packed"


@pytest.fixture(scope="session")
def toolchain():
    try:
        return build.probe_toolchain()
    except build.Unavailable as e:
        pytest.skip(f"the CUDA-on-CPU harness cannot run here: {e}")


@pytest.fixture(scope="session")
def sglang_root() -> Path:
    try:
        root = locate().root
    except NotInstalled:
        pytest.skip("sglang is not installed (pip install --no-deps sglang==0.5.23)")
    if not (root / EAGLE).is_file():
        pytest.skip(f"this sglang has no {EAGLE}")
    return root


@pytest.fixture(scope="session")
def real(sglang_root, toolchain):
    prep = check.prepare(sglang_root, toolchain)
    assert set(prep.kernels) == {TREE, PACKED}, prep.problems
    with Session(prep.library) as session:
        yield prep, session


@pytest.fixture(scope="session")
def real_rows(sglang_root, toolchain):
    rep = AuditReport(str(sglang_root), "test", "test", engine="sglang")
    check.check_cuda_tree(SourceIndex(sglang_root), rep, examples=6, seed=3)
    return {r.id: r for r in rep.rows}


def _variant(tmp_path: Path, root: Path, old: str, new: str, count: int = 1) -> Path:
    """A package holding only sglang's kernel file with ``old`` replaced by ``new``."""
    text = (root / EAGLE).read_text()
    assert text.count(old) >= count, f"the kernel no longer contains {old!r}"
    dest = tmp_path / "pkg" / EAGLE
    dest.parent.mkdir(parents=True)
    dest.write_text(text.replace(old, new, count))
    return tmp_path / "pkg"


def _case(mode=TreeMaskMode.QLEN_ONLY, seq_lens=(5, 3)) -> TreeCase:
    """Two requests of the K=2, D=2, n=4 hand tree (background section 5)."""
    return TreeCase(topk=2, depth=2, num_draft_tokens=4, mode=int(mode), max_context_len=8, seq_lens=list(seq_lens),
                    selected_index=[[0, 1, 2]] * len(seq_lens), parent_list=[[-1, 0, 1]] * len(seq_lens))


def _run_variant(tmp_path, root, toolchain, old, new, case=None, kernel=TREE, count=1):
    prep = check.prepare(_variant(tmp_path, root, old, new, count), toolchain)
    assert kernel in prep.kernels, prep.problems
    with Session(prep.library) as session:
        return run_case(session, prep.kernels[kernel], case or _case())


# --- no compiler needed -------------------------------------------------------------------------

def test_bound_loops_counts_every_loop_and_keeps_lines():
    text = ("int f(int n) {\n  int s = 0;\n  for (int i = 0; i < n; i++) s += i;\n  while (s > 3) { s--; }\n"
            "  do { s++; } while (s < 2);\n  for (;;) { break; }\n  // while (comment) is not code\n"
            "  for (auto x : v) s += x;\n  return s;\n}\n")
    out, count, skipped = source.bound_loops(text)
    assert count == 4 and skipped == [8]
    assert out.count("\n") == text.count("\n")
    assert out.count(source.STEP) == 4 and "for (; SPECBOUND_STEP();)" in out
    assert "SPECBOUND_STEP() && (i < n)" in out and "while (comment)" in out


def test_kernel_using_shared_memory_or_atomics_is_refused(sglang_root, tmp_path):
    text = (sglang_root / EAGLE).read_text()
    text = text.replace("int bid = blockIdx.x;", "__shared__ int scratch[4];\n  int bid = blockIdx.x;", 1)
    text = text.replace("tree_mask[token_tree_idx] = 1;", "atomicAdd((int*)positions, 1);", 1)
    dest = tmp_path / "pkg" / EAGLE
    dest.parent.mkdir(parents=True)
    dest.write_text(text)
    prep = check.prepare(tmp_path / "pkg")
    assert prep.problems[TREE][0] == ERROR and "shared memory (__shared__)" in prep.problems[TREE][1]
    assert prep.problems[PACKED][0] == ERROR and "an atomic operation" in prep.problems[PACKED][1]
    assert prep.library is None


def test_release_without_cuda_source_is_not_present(tmp_path):
    (tmp_path / "pkg" / "srt" / "speculative").mkdir(parents=True)
    prep = check.prepare(tmp_path / "pkg")
    assert {s for s, _ in prep.problems.values()} == {NOT_PRESENT}
    assert not any("sgl_kernel" in d for _, d in prep.problems.values())
    # a release that takes the build from the compiled sgl_kernel package (before 0.5.21) says so
    (tmp_path / "pkg" / "srt" / "speculative" / "eagle_utils.py").write_text(
        "from sgl_kernel import build_tree_kernel_efficient\n")
    prep = check.prepare(tmp_path / "pkg")
    assert all(s == NOT_PRESENT and "srt/speculative/eagle_utils.py takes build_tree_kernel_efficient from the "
               "separate, compiled sgl_kernel package" in d for s, d in prep.problems.values())


def test_no_compiler_is_unavailable(sglang_root, monkeypatch):
    monkeypatch.setenv("SPECBOUND_CXX", "/nonexistent/g++")
    rep = AuditReport(str(sglang_root), "test", "test", engine="sglang")
    check.check_cuda_tree(SourceIndex(sglang_root), rep, examples=1, seed=0)
    assert [r.status for r in rep.rows] == [UNAVAILABLE, UNAVAILABLE]
    assert all("no C++ compiler" in r.detail and "/nonexistent/g++" in r.detail for r in rep.rows)


def test_no_sanitizer_runtime_is_unavailable(tmp_path):
    fake = tmp_path / "g++"
    # answers like a g++ without libasan: -print-file-name echoes the bare name back
    fake.write_text("#!/bin/sh\ncase \"$1\" in --version) echo 'g++ (fake) 12';; "
                    "-print-file-name=*) echo \"${1#-print-file-name=}\";; esac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(build.Unavailable, match=r"no AddressSanitizer \(libasan\) runtime"):
        build.probe_toolchain(str(fake))


def test_wrap_bounds_are_proved_and_a_wrong_bound_is_not():
    full8 = offsets.smallest_seq_len(8)
    assert full8.proved and full8.offset >= offsets.LIMIT and full8.seq_len == 268_435_449
    # one below the smallest: no wrapping offset exists there (satisfy says so)
    assert offsets._prove("low", offsets.FULL, 8, "seq_len", full8.seq_len - 1, 0)[0] is False
    # one above: check refutes "no offset wraps below it" (the smallest one does)
    assert offsets._prove("high", offsets.FULL, 8, "seq_len", full8.seq_len + 1, 0)[0] is False
    qlen = offsets.smallest_bs(offsets.QLEN, 1024)
    assert qlen.proved and qlen.bs == 2049


# --- the real kernels ------------------------------------------------------------------------------

def test_real_kernels_match_on_valid_trees(real_rows):
    for row_id in ("kernel.build_tree[cuda]", "kernel.build_tree[cuda, BITPACKING]"):
        row = real_rows[row_id]
        assert row.status == MATCHED, (row_id, row.detail, row.replay)
        assert "Hypothesis (6 batches" in row.method


def test_real_kernels_on_malformed_trees(real_rows):
    for prefix, kernel in (("kernel.build_tree[cuda", TREE), ("kernel.build_tree[cuda, BITPACKING", PACKED)):
        rows = {p.name: real_rows[f"{prefix}, malformed.{p.name}]"] for p in PROBES}
        assert all(r.status == UNGUARDED and r.replay for r in rows.values())
        miss = rows["missing_parent"]
        assert miss.counterexample["finding"] == "oob" and miss.counterexample["access"] == "READ"
        assert "past the end of 'selected_index'" in miss.detail and f"in sglang::speculative::{kernel} " in miss.detail
        assert rows["cycle"].counterexample["finding"] == "hang" and "step budget" in rows["cycle"].detail
        assert "past the end of 'parent_list'" in rows["slot_at_row_end"].detail
        assert rows["deeper_than_depth"].counterexample == {"finding": "diverged"}
        assert "python -m specbound.engines.sglang.cuda.replay" in rows["cycle"].detail


def test_real_kernel_int32_offsets_wrap(real_rows):
    row = real_rows["kernel.build_tree[cuda, int32]"]
    assert row.status == UNGUARDED
    assert row.counterexample["finding"] == "ub" and row.counterexample["line"] == 61, row.detail
    assert "signed integer overflow" in row.detail and "draft_token_num <= 1024" in row.detail
    assert row.replay["seq_lens"] == [268_435_449]


def test_real_hand_case_outputs(real):
    prep, session = real
    for mode in (TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY):
        assert run_case(session, prep.kernels[TREE], _case(mode)) is None
    assert run_case(session, prep.kernels[PACKED], _case(TreeMaskMode.QLEN_ONLY_BITPACKING)) is None


# --- planted bugs: each harness path turns red ---------------------------------------------------

def test_undersized_buffer_is_an_oob_write(real):
    prep, session = real
    f = run_case(session, prep.kernels[TREE], _case(), short={"positions": 1})
    assert f is not None and f.kind == "oob" and f.where["access"] == "WRITE"
    assert "past the end of 'positions'" in f.message


def test_mask_clear_past_the_row_is_an_oob_write(sglang_root, toolchain, tmp_path):
    f = _run_variant(tmp_path, sglang_root, toolchain, "for (int i = 0; i < draft_token_num - 1; i++) {",
                     "for (int i = 0; i < draft_token_num; i++) {")
    assert f is not None and f.kind == "oob" and f.where["access"] == "WRITE", f
    assert "past the end of 'tree_mask'" in f.message and f.where["line"] == 67


def test_uninstrumented_stray_write_hits_the_guard_band(sglang_root, toolchain, tmp_path):
    root = _variant(tmp_path, sglang_root, "for (int i = 0; i < draft_token_num - 1; i++) {",
                    "for (int i = 0; i < draft_token_num; i++) {")
    path = root / EAGLE
    path.write_text(path.read_text().replace("__global__ void build_tree_efficient(",
                                             "__attribute__((no_sanitize_address)) __global__ void "
                                             "build_tree_efficient(", 1))
    prep = check.prepare(root, toolchain)
    with Session(prep.library) as session:
        f = run_case(session, prep.kernels[TREE], _case())
    assert f is not None and f.kind == "oob" and "guard band of 'tree_mask' written" in f.message, f


def test_wrong_position_diverges(sglang_root, toolchain, tmp_path):
    f = _run_variant(tmp_path, sglang_root, toolchain, "positions[bid * draft_token_num + tid] = position + seq_len;",
                     "positions[bid * draft_token_num + tid] = position + seq_len + 1;")
    assert f is not None and f.kind == "diverged" and "positions" in f.message, f


def test_write_outside_the_footprint_is_seen_through_the_poison(sglang_root, toolchain, tmp_path):
    # FULL_MASK: the root column written one cell early, into the prefix. The caller's True
    # fill hides it from the reference comparison; only the poisoned pre-fill shows it.
    f = _run_variant(tmp_path, sglang_root, toolchain, "tree_mask[token_tree_idx - 1] = true;",
                     "tree_mask[token_tree_idx - 2] = true;", _case(TreeMaskMode.FULL_MASK))
    assert f is not None and f.kind == "footprint" and "tree_mask" in f.message, f


def test_order_dependent_write_is_seen(sglang_root, toolchain, tmp_path):
    # thread 0 also writes the last node's position; ascending, thread n-1 overwrites it later
    f = _run_variant(tmp_path, sglang_root, toolchain, "positions[bid * draft_token_num] = seq_len;",
                     "positions[bid * draft_token_num] = seq_len; "
                     "positions[bid * draft_token_num + draft_token_num - 1] = seq_len;")
    assert f is not None and f.kind == "order", f


def test_endless_walk_on_a_valid_tree_is_a_hang(sglang_root, toolchain, tmp_path):
    f = _run_variant(tmp_path, sglang_root, toolchain, "if (parent_tb_idx == 0) {\n        break;",
                     "if (parent_tb_idx == 0) {\n        continue;")
    assert f is not None and f.kind == "hang" and f.where["thread"] >= 1, f


def test_signed_overflow_is_reported_by_ubsan(sglang_root, toolchain, tmp_path):
    f = _run_variant(tmp_path, sglang_root, toolchain, "int position = 0;", "int position = 2147483647;")
    assert f is not None and f.kind == "ub" and "signed integer overflow" in f.message, f


def test_wide_offsets_do_not_wrap(sglang_root, toolchain, tmp_path):
    """The int32 probe on a variant whose mask offsets are 64-bit: the same smallest case runs clean."""
    root = _variant(tmp_path, sglang_root, "int seq_tree_idx", "int64_t seq_tree_idx")
    path = root / EAGLE
    text = path.read_text().replace("int token_tree_idx;", "int64_t token_tree_idx;", 1)
    path.write_text(text.replace("int seq_len = verified_seq_len[bid];", "int64_t seq_len = verified_seq_len[bid];", 1))
    prep = check.prepare(root, toolchain)
    with Session(prep.library) as session:
        row = check._wrap_row(prep, session)
    assert row.status == MATCHED and "no wrap" in row.detail, row.detail


def test_watchdog_ends_a_loop_the_budget_does_not_cover(toolchain):
    text = "__global__ void spin(unsigned* x) {\nagain:\n  x[0]++;\n  goto again;\n}\n"
    kernel = source.find_kernels(text)["spin"]
    lib = build.build(text, "spin.cu", (kernel,), toolchain)
    with Session(lib, timeout=3) as session:
        out = session.run(Launch("spin", (1, 1, 1), (1, 1, 1), (Buf("x", 4, bytes(4), 4),), budget=10))
    assert out.kind == "hang" and "watchdog" in out.message


def test_cache_reuses_the_library(sglang_root, toolchain, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBOUND_CACHE_DIR", str(tmp_path / "cache"))
    first = check.prepare(sglang_root, toolchain).library
    second = check.prepare(sglang_root, toolchain).library
    assert not first.cached and second.cached and first.path == second.path
    assert os.listdir(tmp_path / "cache" / "cuda-cpu") == [first.key]


def test_gpu_script_builds_launchers_and_runs_its_cases_on_the_cpu(real, tmp_path):
    """bench/cuda_tree_gpu.py has not run on a GPU yet; its CUDA launchers and its case groups
    are checked here (the groups through the CPU harness, as the script does for its side-by-side)."""
    import importlib.util

    spec_ = importlib.util.spec_from_file_location("cuda_tree_gpu", Path(__file__).parent.parent / "bench/cuda_tree_gpu.py")
    gpu = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(gpu)
    prep, session = real
    cu = gpu.launcher_source(prep.root / EAGLE, tuple(prep.kernels.values()))
    assert 'extern "C" int run_build_tree_efficient(' in cu and "(int64_t*)dev[0]" in cu
    assert "::sglang::speculative::build_tree_efficient<<<" in cu and "size_t num_bytes_per_item" in cu
    results = tmp_path / "r.jsonl"
    adapter = gpu.CpuAdapter(session, prep)
    for group in ("probe:build_tree_efficient:cycle", "valid:build_tree_efficient_partial_packed"):
        gpu.run_group(group, adapter, 3, 1, results)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert rows[0]["kind"] == "hang" and len(rows) == 4 and all(r["kind"] == "ok" for r in rows[1:])


def test_a_child_that_cannot_start_is_an_error_not_a_finding(real):
    import dataclasses

    prep, _ = real
    broken = dataclasses.replace(prep.library, path=Path("/nonexistent/libkernels.so"))
    with Session(broken) as session:
        f = run_case(session, prep.kernels[TREE], _case())
    assert f is not None and f.kind == "error" and "before launching" in f.message, f
    assert check.STATUS[f.kind] == ERROR


def _coordinates(toolchain, shim=None):
    """What every thread of a 3-D launch sees, in both orders: one row per (block, thread)."""
    import numpy as np

    text = ("__global__ void coords(long long* out) {\n"
            "  unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);\n"
            "  unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n"
            "  long long* o = out + 10 * (b * blockDim.x * blockDim.y * blockDim.z + t);\n"
            "  o[0] = blockIdx.x; o[1] = blockIdx.y; o[2] = blockIdx.z; o[3] = threadIdx.x; o[4] = threadIdx.y;\n"
            "  o[5] = threadIdx.z; o[6] = sizeof(int); o[7] = sizeof(long); o[8] = sizeof(size_t);\n"
            "  o[9] = (long long)(blockIdx.x - 1u);\n}\n")
    kernel = source.find_kernels(text)["coords"]
    lib = build.build(text, "coords.cu", (kernel,), toolchain, shim=shim)
    grid, block = (2, 3, 2), (2, 2, 3)
    cells = 12 * 12 * 10
    seen = []
    with Session(lib) as session:
        for descending in (False, True):
            out = session.run(Launch("coords", grid, block, (Buf("out", cells * 8, bytes(cells * 8), 8),), budget=10,
                                     read=("out",), descending=descending))
            assert out.ok, out.message
            seen.append(np.frombuffer(out.buffers["out"], dtype=np.int64).reshape(-1, 10))
    return seen


def test_shim_maps_launch_coordinates_and_types_as_cuda(toolchain):
    """Every (block, thread) of a 3-D launch runs once and sees CUDA's coordinates, x fastest;
    int/long/size_t/blockIdx have CUDA's widths (4, 8, 8, unsigned 4)."""
    seen = _coordinates(toolchain)
    assert (seen[0] == seen[1]).all()
    rows = {tuple(r[:6]) for r in seen[0]}
    assert rows == {(bx, by, bz, tx, ty, tz) for bx in range(2) for by in range(3) for bz in range(2)
                    for tx in range(2) for ty in range(2) for tz in range(3)}
    assert {tuple(r[6:9]) for r in seen[0]} == {(4, 8, 8)}
    assert set(seen[0][:, 9]) == {0, 2**32 - 1}      # blockIdx.x is unsigned: 0 - 1u wraps to 2^32 - 1


def test_shim_with_a_wrong_linearisation_is_caught(toolchain):
    """The same check on a shim that never sets threadIdx.z: threads run with the wrong coordinates."""
    planted = build.SHIM.read_text().replace("unsigned(t / block[0] / block[1])}", "0u}")
    assert planted != build.SHIM.read_text()
    seen = _coordinates(toolchain, shim=planted)
    assert len({tuple(r[:6]) for r in seen[0]}) < 144
