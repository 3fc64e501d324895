"""sglang's Triton kernels, extracted by name and run under specbound's checked interpreter.

Inputs are seeded random batches inside the spec's preconditions, fed the way sglang's
host code feeds them (outputs pre-filled: -1 for ``retrive_*``, True for the mask, the
exclusive prefix sum of ``seq_lens`` as a separate input; ``kv_indptr`` zero-initialised,
``positions`` = ``seq_lens`` repeated ``topk`` times, lane bounds = next powers of two).
Every tensor is allocated at exactly its in-contract extent, so a stray access is an
:class:`~specbound.kernels.OutOfBoundsAccess`.  Outputs are compared with
:mod:`specbound.reference` and write footprints with :mod:`specbound.spec.footprint`.
A failing case is shrunk (requests dropped, ``seq_len`` lowered) before it is reported.
"""

from __future__ import annotations

import ast
import os
import random
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

from specbound import spec
from specbound.spec import TreeMaskMode

from . import report as R
from .extract import Found, SourceIndex

TREE_KERNEL = "sgl_build_tree_kernel_efficient_triton"
TREE_FILES = ("kernels/ops/speculative/spec_tree.py",)
TREE_WRAPPER = "sgl_build_tree_kernel_triton"
KV_KERNEL = "generate_draft_decode_kv_indices"
KV_FILES = ("kernels/ops/speculative/cache_locs.py",)
SYMBOLIC_EXECUTORS = ("specbound.proofs.symexec",)


class Unavailable(Exception):
    pass


def _oob_text(e) -> str:
    """The checked interpreter's message without the host address (it changes every run)."""
    return re.sub(r" at address 0x[0-9a-fA-F]+", "", str(e))


def _norm(name: str, aliases: dict[str, str]) -> str:
    n = name.lower()
    if n.endswith("_ptr"):
        n = n[:-4]
    n = n.replace("retrive", "retrieve")
    return aliases.get(n, n)


TREE_ALIASES = {"seq_lens": "verified_seq_len", "num_draft_tokens": "draft_token_num",
                "num_verify_tokens": "draft_token_num", "bs": "batch_size"}
KV_ALIASES = {"pool_len": "row_stride", "seq_lens": "paged_kernel_lens"}


def bind(found: Found, values: dict[str, Any], aliases: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Keyword arguments for the kernel's parameters by (normalised) name, and the
    parameters without a default the audit has no value for."""
    a = found.node.args
    positional = [*a.posonlyargs, *a.args]
    defaults = {p.arg for p in positional[len(positional) - len(a.defaults):]}
    defaults |= {p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None}
    kwargs, missing = {}, []
    for p in [*positional, *a.kwonlyargs]:
        key = _norm(p.arg, aliases)
        if key in values:
            kwargs[p.arg] = values[key]
        elif p.arg not in defaults:
            missing.append(p.arg)
    return kwargs, missing


def _next_pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def triton_env():
    """(triton, tl, specbound.kernels) with the interpreter on, or Unavailable."""
    if "TRITON_INTERPRET" not in os.environ:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import specbound.kernels as K
    except ImportError as e:
        raise Unavailable(f"cannot load the checked interpreter: {e}") from None
    if not K.INTERPRETED:
        raise Unavailable("TRITON_INTERPRET is off in this process: sglang's kernels would be compiled, "
                          "and the checked interpreter applies only to interpreted launches")
    import triton
    import triton.language as tl
    return triton, tl, K


# --- outcomes -------------------------------------------------------------------------------

@dataclass
class Finding:
    kind: str          # R.OOB, R.DIVERGED, R.ERROR
    message: str


def _first_diff(name, got, want, n=None):
    g, w = got.reshape(-1), want.reshape(-1)
    bad = (g != w).nonzero().reshape(-1)
    if bad.numel() == 0:
        return None
    i = int(bad[0])
    where = f"cell {i}" + (f" (request {i // n}, node {i % n})" if n else "")
    return f"{name} {where}: sglang {g[i].item()}, spec {w[i].item()} ({bad.numel()} cell(s) differ)"


# --- the tree build -----------------------------------------------------------------------------

def tree_case_tensors(case):
    import torch

    bs, n = len(case["seq_lens"]), case["n"]
    width = spec.parent_list_width(case["topk"], case["depth"])
    pl = torch.tensor(case["parent_list"], dtype=torch.int64).reshape(bs, width)
    sel = torch.tensor(case["selected_index"], dtype=torch.int64).reshape(bs, n - 1)
    seq = torch.tensor(case["seq_lens"], dtype=torch.int64)
    return pl, sel, seq


def run_tree(kernel, found: Found, K, case, mask_numel: int | None = None) -> Finding | None:
    """One launch; the mask is the batch's exact extent, or ``mask_numel`` cells (a replay
    into a buffer of sglang's size)."""
    import torch
    from specbound import reference

    mode = TreeMaskMode(case["mode"])
    k, d, n = case["topk"], case["depth"], case["n"]
    pl, sel, seq = tree_case_tensors(case)
    bs = seq.numel()
    total = int(seq.sum())
    numel = spec.mask_batch_numel(mode, bs, n, total)
    mask = torch.ones(numel if mask_numel is None else mask_numel, dtype=torch.bool)
    positions = torch.full((bs * n,), -7, dtype=torch.int64)
    outs = [torch.full((bs, n), -1, dtype=torch.int64) for _ in range(3)]
    prefix = torch.cumsum(seq, 0) - seq
    values = {"parent_list": pl, "selected_index": sel, "verified_seq_len": seq, "seq_len_prefix_sum": prefix,
              "tree_mask": mask, "positions": positions, "retrieve_index": outs[0],
              "retrieve_next_token": outs[1], "retrieve_next_sibling": outs[2], "topk": k, "depth": d,
              "draft_token_num": n, "tree_mask_mode": int(mode), "batch_size": bs,
              "parent_list_stride": pl.stride(0) if pl.dim() > 1 else pl.shape[0],
              "selected_index_stride": sel.stride(0)}
    kwargs, missing = bind(found, values, TREE_ALIASES)
    if missing:
        raise Unavailable(f"unknown signature: no value for {missing}")
    try:
        with K.checked_interpreter(record_footprint=True) as session:
            kernel[(bs,)](**kwargs)
    except K.OutOfBoundsAccess as e:
        return Finding(R.OOB, _oob_text(e))
    except Exception as e:  # noqa: BLE001 - a crash of the kernel is a finding, not a traceback
        return Finding(R.ERROR, f"{type(e).__name__}: {e}")
    want = reference.build_tree(pl, sel, seq, topk=k, depth=d, num_draft_tokens=n, mode=mode,
                                tree_mask=torch.ones(numel, dtype=torch.bool),
                                positions=torch.full((bs * n,), -7, dtype=torch.int64),
                                retrive_index=torch.full((bs, n), -1, dtype=torch.int64),
                                retrive_next_token=torch.full((bs, n), -1, dtype=torch.int64),
                                retrive_next_sibling=torch.full((bs, n), -1, dtype=torch.int64))
    for name, got, exp in (("tree_mask", mask, want.tree_mask), ("positions", positions, want.positions),
                           ("retrive_index", outs[0], want.retrive_index),
                           ("retrive_next_token", outs[1], want.retrive_next_token),
                           ("retrive_next_sibling", outs[2], want.retrive_next_sibling)):
        diff = _first_diff(name, got, exp, None if name == "tree_mask" else n)
        if diff:
            return Finding(R.DIVERGED, diff)
    written = session.written()
    names = {_norm(p, TREE_ALIASES): p for p in kwargs}
    tokens = spec.token_cells(bs, n)
    checks = [("tree_mask", spec.mask_kernel_cells(mode, n, seq.tolist()), "=="),
              ("positions", tokens, "=="), ("retrieve_index", tokens, "=="),
              ("retrieve_next_token", tokens, "<="), ("retrieve_next_sibling", tokens, "<=")]
    for key, cells, rel in checks:
        got = written.get(names.get(key, key), set())
        ok = got == cells if rel == "==" else got <= cells
        if not ok:
            extra, lacking = sorted(got - cells)[:5], sorted(cells - got)[:5] if rel == "==" else []
            return Finding(R.DIVERGED, f"footprint of {key}: writes outside the spec's {sorted(extra)}"
                           + (f", spec cells not written {lacking}" if lacking else ""))
    for key in ("parent_list", "selected_index", "verified_seq_len", "seq_len_prefix_sum"):
        if written.get(names.get(key, key)):
            return Finding(R.DIVERGED, f"writes to its input {key}")
    return None


def random_tree_case(rng: random.Random, malformed: float = 0.0) -> dict:
    from specbound.reference.samples import random_tree_batch

    k = rng.randint(1, 4)
    d = rng.randint(1, 5)
    if k == 1:
        n = d + 1  # sglang forces a chain when topk == 1
    else:
        n = rng.randint(2, min(spec.score_list_len(k, d) + 1, 16))
    bs = rng.randint(1, 4)
    batch = random_tree_batch(rng, bs, k, d, n, max_seq_len=48, malformed=malformed)
    mode = rng.choice([TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY])
    return {"topk": k, "depth": d, "n": n, "mode": int(mode), "seq_lens": batch.seq_lens.tolist(),
            "selected_index": batch.selected_index.reshape(-1).tolist(),
            "parent_list": batch.parent_list.reshape(-1).tolist()}


def _tree_smaller(case):
    """Candidate cases one step smaller than ``case``."""
    bs, n = len(case["seq_lens"]), case["n"]
    w = spec.parent_list_width(case["topk"], case["depth"])
    for b in range(bs):
        if bs > 1:
            c = dict(case)
            c["seq_lens"] = case["seq_lens"][:b] + case["seq_lens"][b + 1:]
            c["selected_index"] = case["selected_index"][:b * (n - 1)] + case["selected_index"][(b + 1) * (n - 1):]
            c["parent_list"] = case["parent_list"][:b * w] + case["parent_list"][(b + 1) * w:]
            yield c
    for b, s in enumerate(case["seq_lens"]):
        for smaller in ({0, s // 2} - {s}):
            c = dict(case)
            c["seq_lens"] = case["seq_lens"][:b] + [smaller] + case["seq_lens"][b + 1:]
            yield c


def shrink(case, fails: Callable[[dict], Finding | None], smaller, first: Finding, budget: int = 40):
    finding = first
    progress = True
    while progress and budget > 0:
        progress = False
        for cand in smaller(case):
            budget -= 1
            f = fails(cand)
            if f is not None and f.kind == finding.kind:
                case, finding, progress = cand, f, True
                break
            if budget <= 0:
                break
    return case, finding


def _fuzz(ctx_rows, row_id, subject, what, n_examples, gen, run, smaller, rng_seed, t0, note=""):
    rng = random.Random(rng_seed)
    for i in range(n_examples):
        case = gen(rng)
        f = run(case)
        if f is not None:
            case, f = shrink(case, run, smaller, f)
            status = f.kind if f.kind in (R.OOB, R.DIVERGED) else R.ERROR
            return R.Row(row_id, subject, what, f"fuzz ({i + 1} of {n_examples} batches)", status,
                         f"{f.message}", replay=case, seconds=time.perf_counter() - t0)
    return R.Row(row_id, subject, what, f"fuzz ({n_examples} batches)", R.MATCHED,
                 f"outputs equal specbound.reference, footprints equal the spec, no OOB{note}",
                 seconds=time.perf_counter() - t0)


def _define_kernel(index: SourceIndex, report: R.AuditReport, found: Found, aliases: dict[str, str],
                   known: set[str], row: tuple[str, str, str]):
    """Check that every kernel parameter is one we know how to feed, then define the kernel
    under the interpreter.  Returns ``(kernel, triton.language)`` or adds a row saying why
    not (unknown signature, no triton, kernel that does not define) and returns None."""
    row_id, subject, what = row
    _, missing = bind(found, {}, aliases)
    unknown = [p for p in missing if _norm(p, aliases) not in known]
    if unknown:
        report.add(R.Row(row_id, subject, what, "-", R.UNKNOWN_SIGNATURE,
                         f"parameters {found.params()}; no value known for {unknown}"))
        return None
    try:
        triton, tl, K = triton_env()
        return index.load_kernel(found, triton, tl), K
    except Unavailable as e:
        report.add(R.Row(row_id, subject, what, "-", R.UNAVAILABLE, str(e)))
    except Exception as e:  # noqa: BLE001
        report.add(R.Row(row_id, subject, what, "-", R.ERROR, f"cannot define the kernel: {type(e).__name__}: {e}"))
    return None


def check_tree_kernel(index: SourceIndex, report: R.AuditReport, examples: int, seed: int) -> None:
    what = ("valid draft trees (FULL_MASK, QLEN_ONLY): outputs == reference.build_tree, mask/positions/"
            "retrive_* footprints == spec, in bounds")
    row_id = "kernel.build_tree[valid]"
    found = index.find(TREE_KERNEL, TREE_FILES)
    if found is None:
        report.add(R.Row(row_id, TREE_KERNEL, what, "-", R.NOT_PRESENT,
                         f"no `{TREE_KERNEL}` in this sglang (no Triton port of the tree build)"))
        return
    subject = f"{TREE_KERNEL} ({found.where})"
    probe = {"topk": 2, "depth": 2, "n": 4, "mode": 1, "seq_lens": [5], "selected_index": [0, 1, 2],
             "parent_list": [-1, 0, 1]}
    known = {"parent_list", "selected_index", "verified_seq_len", "seq_len_prefix_sum", "tree_mask", "positions",
             "retrieve_index", "retrieve_next_token", "retrieve_next_sibling", "topk", "depth", "draft_token_num",
             "tree_mask_mode", "batch_size", "parent_list_stride", "selected_index_stride"}
    t0 = time.perf_counter()
    loaded = _define_kernel(index, report, found, TREE_ALIASES, known, (row_id, subject, what))
    if loaded is None:
        return
    kernel, K = loaded
    run = lambda c: run_tree(kernel, found, K, c)  # noqa: E731
    # Golden vector of the background (sglang's own unit test values) first, then random batches.
    golden = {"topk": 4, "depth": 4, "n": 8, "mode": 0, "seq_lens": [5, 10],
              "selected_index": [0, 1, 4, 8, 20, 24, 36, 0, 4, 5, 6, 7, 24, 36],
              "parent_list": [-1, 0, 1, 2, 3, 4, 8, 9, 10, 20, 24, 21, 28, -1, 0, 1, 2, 3, 4, 5, 6, 7, 24, 28, 20, 21]}
    for fixed in (golden, probe):
        f = run(fixed)
        if f is not None:
            report.add(R.Row(row_id, subject, what, "fixed case", f.kind if f.kind != R.ERROR else R.ERROR,
                             f.message, replay=fixed, seconds=time.perf_counter() - t0))
            return
    report.add(_fuzz(report.rows, row_id, subject, what, examples, random_tree_case, run, _tree_smaller, seed, t0,
                     note=" (plus the golden vector and the K=2 hand case)"))
    _tree_bitpacking_row(index, report)
    _tree_malformed(report, subject, run, examples, seed)


def _tree_bitpacking_row(index: SourceIndex, report: R.AuditReport) -> None:
    wrapper = index.find(TREE_WRAPPER, TREE_FILES)
    what = "QLEN_ONLY_BITPACKING layout of the Triton tree build"
    if wrapper is None:
        report.add(R.Row("kernel.build_tree[BITPACKING]", TREE_WRAPPER, what, "-", R.NOT_PRESENT,
                         f"no host wrapper `{TREE_WRAPPER}` found; BITPACKING not audited"))
        return
    refuses = any(isinstance(n, ast.Raise) for n in ast.walk(wrapper.node)) and \
        "QLEN_ONLY_BITPACKING" in wrapper.source()
    report.add(R.Row("kernel.build_tree[BITPACKING]", f"{TREE_WRAPPER} ({wrapper.where})", what, "ast",
                     R.NOT_PRESENT if refuses else R.UNAVAILABLE,
                     "the Triton port refuses BITPACKING in its host wrapper (only the CUDA kernel packs bits)"
                     if refuses else "the wrapper does not refuse BITPACKING; the audit does not run that layout"))


def _tree_malformed(report, subject, run, examples, seed) -> None:
    t0 = time.perf_counter()
    what = ("malformed trees (parent slot past parent_list's row, negative or out-of-range selected_index): "
            "does the kernel stay in bounds and apply the guarded semantics?")
    # Deterministic probe: node 2's entry 6 names parent slot 6 // 2 = 3 in a row of width 3.
    probe = {"topk": 2, "depth": 2, "n": 3, "mode": 1, "seq_lens": [4], "selected_index": [0, 6],
             "parent_list": [-1, 0, 1]}
    findings = []
    f = run(probe)
    if f is not None:
        findings.append((f, probe))
    rng = random.Random(seed + 1)
    n_oob = n_diff = n_err = 0
    first_diff = None
    n = max(1, examples // 2)
    for _ in range(n):
        case = random_tree_case(rng, malformed=0.3)
        f = run(case)
        if f is None:
            continue
        if f.kind == R.OOB:
            n_oob += 1
        elif f.kind == R.DIVERGED:
            n_diff += 1
            first_diff = first_diff or (f, case)
        else:
            n_err += 1
        if len(findings) < 2 and f.kind != R.DIVERGED:
            findings.append((f, case))
    if not findings and first_diff is None:
        report.add(R.Row("kernel.build_tree[malformed]", subject, what, f"probe + fuzz ({n} batches)", R.MATCHED,
                         "in bounds and equal to the guarded reference on every malformed batch",
                         seconds=time.perf_counter() - t0))
        return
    parts = []
    replay = None
    if findings:
        f0, replay = findings[0]
        parts.append(f"probe ({'parent slot == row width' if replay is probe else 'random'}): {f0.message}")
    parts.append(f"random malformed batches: {n_oob} OOB, {n_diff} differ from the guarded semantics, "
                 f"{n_err} other errors of {n}")
    if first_diff is not None:
        parts.append(f"first difference: {first_diff[0].message}")
        replay = replay or first_diff[1]
    report.add(R.Row("kernel.build_tree[malformed]", subject, what, f"probe + fuzz ({n} batches)", R.UNCHECKED,
                     "sglang relies on well-formed trees from its own draft step (the parent_list read is "
                     "unguarded). " + "; ".join(parts), replay=replay, seconds=time.perf_counter() - t0))


# --- the draft-decode kv_indices ----------------------------------------------------------

def run_kv(kernel, found: Found, K, case, width_fn=None) -> Finding | None:
    import torch
    from specbound import reference
    from specbound.reference.samples import random_kv_batch

    k, steps, page = case["topk"], case["num_steps"], case["page_size"]
    seq = case["seq_lens"]
    num_seqs = len(seq)
    bs_d = num_seqs * k
    batch = random_kv_batch(random.Random(case["slot_seed"]), num_seqs, k, steps, page, seq_lens=seq,
                            dtype=torch.int32)
    c = case["max_context_len"]
    width = (width_fn or spec.draft_kv_indices_buffer_width)(num_seqs, k, c)
    kv_indices = torch.full((steps, width), -1, dtype=torch.int64)
    kv_indptr = torch.zeros((steps, bs_d + 1), dtype=torch.int32)
    positions = batch.seq_lens.repeat_interleave(k)
    blocks = case.get("blocks", 0)
    values = {"req_pool_indices": batch.req_pool_indices, "req_to_token": batch.req_to_token,
              "paged_kernel_lens": batch.seq_lens, "kv_indices": kv_indices, "kv_indptr": kv_indptr,
              "positions": positions, "row_stride": batch.req_to_token.shape[1], "kv_indices_stride": width,
              "kv_indptr_stride": bs_d + 1, "bs_upper": _next_pow2(num_seqs), "iter_upper": _next_pow2(steps),
              "num_tokens_upper": _next_pow2(bs_d), "page_size": page, "window_size": 0, "sink_size": 0,
              "entry_page_size": 1, "v2p": None, "translate": False}
    if blocks:
        values["num_steps"] = steps
    kwargs, missing = bind(found, values, KV_ALIASES)
    if missing:
        raise Unavailable(f"unknown signature: no value for {missing}")
    grid = (steps * (blocks or 1), num_seqs, k)
    try:
        with K.checked_interpreter(record_footprint=True) as session:
            kernel[grid](**kwargs)
    except K.OutOfBoundsAccess as e:
        return Finding(R.OOB, _oob_text(e))
    except Exception as e:  # noqa: BLE001
        return Finding(R.ERROR, f"{type(e).__name__}: {e}")
    want_idx = torch.full((steps, width), -1, dtype=torch.int64)
    want_ptr = torch.zeros((steps, bs_d + 1), dtype=torch.int32)
    reference.draft_decode_kv_indices(batch.req_pool_indices, batch.req_to_token, batch.seq_lens, topk=k,
                                      num_steps=steps, page_size=page, kv_indices=want_idx, kv_indptr=want_ptr)
    for name, got, exp in (("kv_indices", kv_indices, want_idx), ("kv_indptr", kv_indptr, want_ptr)):
        diff = _first_diff(name, got, exp)
        if diff:
            return Finding(R.DIVERGED, diff)
    written = session.written()
    names = {_norm(p, KV_ALIASES): p for p in kwargs}
    want_cells = spec.kv_indices_cells(seq, k, steps, width)
    got_cells = written.get(names["kv_indices"], set())
    if got_cells != want_cells:
        return Finding(R.DIVERGED, f"kv_indices footprint: outside the spec {sorted(got_cells - want_cells)[:5]}, "
                       f"spec cells not written {sorted(want_cells - got_cells)[:5]}")
    ptr_spec = spec.kv_indptr_cells(num_seqs, k, steps, bs_d + 1)
    ptr_got = written.get(names["kv_indptr"], set())
    entry0 = {spec.kv_indices_cell(bs_d + 1, it, 0) for it in range(1, steps + 1)}
    if not (ptr_got <= ptr_spec and ptr_spec - ptr_got <= entry0):
        return Finding(R.DIVERGED, f"kv_indptr footprint: outside the spec {sorted(ptr_got - ptr_spec)[:5]}, "
                       f"not written {sorted(ptr_spec - ptr_got - entry0)[:5]}")
    for key in ("req_pool_indices", "req_to_token", "paged_kernel_lens", "positions"):
        if written.get(names.get(key, key)):
            return Finding(R.DIVERGED, f"writes to its input {key}")
    return None


def random_kv_case(rng: random.Random, long: bool = False) -> dict:
    k = rng.randint(1, 4)
    steps = rng.randint(1, 5)
    page = rng.choice([1, 1, 2, 4, 16])
    num_seqs = rng.randint(1, 3)
    hi = 1100 if long else 40
    seq = [rng.randint(0, hi) for _ in range(num_seqs)]
    c = max(seq) + steps + rng.randint(0, 3)  # every request has room for its draft tokens
    case = {"topk": k, "num_steps": steps, "page_size": page, "seq_lens": seq, "max_context_len": c,
            "slot_seed": rng.randint(0, 2**31)}
    if long:
        case["blocks"] = min(32, max(1, (max(seq) + 511) // 512))
    return case


def _kv_smaller(case):
    seq = case["seq_lens"]
    for b in range(len(seq)):
        if len(seq) > 1:
            c = dict(case)
            c["seq_lens"] = seq[:b] + seq[b + 1:]
            yield c
    for b, s in enumerate(seq):
        for smaller in ({0, s // 2} - {s}):
            c = dict(case)
            c["seq_lens"] = seq[:b] + [smaller] + seq[b + 1:]
            yield c


def check_kv_kernel(index: SourceIndex, report: R.AuditReport, examples: int, seed: int,
                    width_fn: Callable | None, width_source: str = "") -> None:
    """``width_fn``: sglang's row-width helper (``width_source`` says where it is), or None
    when this sglang has none; the rows then use the spec's width and the row says so."""
    what = ("batches with room for the draft tokens: kv_indices/kv_indptr == reference, footprints == spec "
            "(kv_indptr entry 0 may rely on the zero-initialised buffer), in bounds")
    found = index.find(KV_KERNEL, KV_FILES)
    if found is None:
        report.add(R.Row("kernel.draft_kv_indices", KV_KERNEL, what, "-", R.NOT_PRESENT,
                         f"no `{KV_KERNEL}` in this sglang"))
        return
    subject = f"{KV_KERNEL} ({found.where})"
    known = {"req_pool_indices", "req_to_token", "paged_kernel_lens", "kv_indices", "kv_indptr", "positions",
             "row_stride", "kv_indices_stride", "kv_indptr_stride", "bs_upper", "iter_upper", "num_tokens_upper",
             "page_size"}
    t0 = time.perf_counter()
    loaded = _define_kernel(index, report, found, KV_ALIASES, known, ("kernel.draft_kv_indices", subject, what))
    if loaded is None:
        return
    kernel, K = loaded

    def width(num_seqs, k, c):
        return width_fn(num_seqs, k, c) if width_fn is not None else spec.draft_kv_indices_buffer_width(num_seqs, k, c)

    run = lambda c: run_kv(kernel, found, K, c, width)  # noqa: E731
    # The hand case of the background: width(4, 3, 256) rows; a small paged K>1 case.
    report.add(_fuzz(report.rows, "kernel.draft_kv_indices", subject, what, examples, random_kv_case, run,
                     _kv_smaller, seed + 2, t0, note=_width_note(width_fn, width_source)))
    has_blocks = any(_norm(p, KV_ALIASES) == "num_steps" for p in found.params())
    if has_blocks:
        t1 = time.perf_counter()
        n = max(1, examples // 8)
        report.add(_fuzz(report.rows, "kernel.draft_kv_indices[token_blocks]", subject,
                         "long prefixes (up to 1100 slots) with the token-block launch (NUM_STEPS, grid "
                         "num_steps*blocks): same comparisons", n, lambda r: random_kv_case(r, long=True), run,
                         _kv_smaller, seed + 3, t1))
    # Precondition probe: a request with no room for its draft tokens (seq_len = C).
    t2 = time.perf_counter()
    probe = {"topk": 2, "num_steps": 3, "page_size": 1, "seq_lens": [8, 8], "max_context_len": 8, "slot_seed": 7}
    f = run_kv_no_room(kernel, found, K, probe, width)
    used = spec.draft_kv_indices_used_len(16, 2, 4, 3)
    w = width(2, 2, 8)
    if f is not None and f.kind == R.OOB:
        status, detail = R.UNCHECKED, (f"seq_len = C (no room): used_len {used} > row width {w}; the kernel "
                                       f"writes past its row (into the next step's row, past the buffer on the "
                                       f"last): {f.message}")
    elif f is not None:
        status, detail = R.ERROR, f.message
    else:
        status, detail = R.MATCHED, f"no write past the buffer even without room (width {w}, used_len {used})"
    report.add(R.Row("kernel.draft_kv_indices[no_draft_room]", subject,
                     "a request with seq_len = C (violates draft room): what the kernel does", "probe", status,
                     detail, replay=probe, seconds=time.perf_counter() - t2))


def _width_note(width_fn, width_source: str) -> str:
    if width_fn is not None:
        return f"; row widths from sglang's draft_kv_indices_buffer_width ({width_source})"
    return ("; row widths from the spec's draft_kv_indices_buffer_width (num_seqs*K*C): this sglang has no such "
            "helper (the widths its backends allocate are judged in the buffer.draft_kv_indices rows)")


def run_kv_no_room(kernel, found, K, case, width, rows: int | None = None) -> Finding | None:
    """Run without the reference (which refuses the batch): only bounds matter here.
    ``rows`` (default ``num_steps``) and ``width`` give the kv_indices buffer's shape."""
    import torch
    from specbound.reference.samples import random_kv_batch

    k, steps, page, seq = case["topk"], case["num_steps"], case["page_size"], case["seq_lens"]
    num_seqs, bs_d = len(seq), len(seq) * case["topk"]
    batch = random_kv_batch(random.Random(case["slot_seed"]), num_seqs, k, steps, page, seq_lens=seq)
    w = width(num_seqs, k, case["max_context_len"])
    kv_indices = torch.full((steps if rows is None else rows, w), -1, dtype=torch.int64)
    kv_indptr = torch.zeros((steps, bs_d + 1), dtype=torch.int32)
    values = {"req_pool_indices": batch.req_pool_indices, "req_to_token": batch.req_to_token,
              "paged_kernel_lens": batch.seq_lens, "kv_indices": kv_indices, "kv_indptr": kv_indptr,
              "positions": batch.seq_lens.repeat_interleave(k), "row_stride": batch.req_to_token.shape[1],
              "kv_indices_stride": w, "kv_indptr_stride": bs_d + 1, "bs_upper": _next_pow2(num_seqs),
              "iter_upper": _next_pow2(steps), "num_tokens_upper": _next_pow2(bs_d), "page_size": page,
              "window_size": 0, "sink_size": 0, "entry_page_size": 1, "v2p": None, "translate": False}
    kwargs, _ = bind(found, values, KV_ALIASES)
    try:
        with K.checked_interpreter():
            kernel[(steps, num_seqs, k)](**kwargs)
    except K.OutOfBoundsAccess as e:
        return Finding(R.OOB, _oob_text(e))
    except Exception as e:  # noqa: BLE001
        return Finding(R.ERROR, f"{type(e).__name__}: {e}")
    return None


# --- sites, the symbolic executor ----------------------------------------------------------

def check_launch_sites(index: SourceIndex, report: R.AuditReport) -> None:
    """Every launch of the draft kv kernel should follow a host capacity check (spec.draft_kv_capacity_ok)."""
    t0 = time.perf_counter()
    what = "every launch of generate_draft_decode_kv_indices is preceded by a host capacity check"
    sites = []
    for path in index.files():
        text = index.text(path)
        if f"{KV_KERNEL}[" not in text and "generate_draft_decode_kv_indices\n" not in text:
            continue
        tree = index.tree(path)
        if tree is None:
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            launches = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
                        and KV_KERNEL in ast.unparse(n.func.value)]
            if not launches:
                continue
            calls = {ast.unparse(n.func).split(".")[-1] for n in ast.walk(fn) if isinstance(n, ast.Call)}
            guarded = "assert_buffer_fits" in calls or any(
                isinstance(n, ast.Assert) and "used_len" in ast.unparse(n) for n in ast.walk(fn))
            sites.append((f"{index.rel(path)}:{fn.lineno} {fn.name}", guarded))
    if not sites:
        report.add(R.Row("sites.draft_kv_capacity_check", KV_KERNEL, what, "ast", R.NOT_PRESENT,
                         "no launch site found", seconds=time.perf_counter() - t0))
        return
    bare = [s for s, g in sites if not g]
    report.add(R.Row("sites.draft_kv_capacity_check", f"{len(sites)} launch site(s)", what, "ast",
                     R.UNCHECKED if bare else R.MATCHED,
                     (f"{len(sites) - len(bare)} checked; without a check (they rely on draft room): "
                      + "; ".join(bare)) if bare else "; ".join(s for s, _ in sites),
                     seconds=time.perf_counter() - t0))


def check_symbolic(report: R.AuditReport, full: bool = False) -> None:
    """``kernel.symbolic_proof[draft_kv]`` and ``[tree]``: sglang's own kernels proved or
    refuted by specbound's symbolic executor (:mod:`.symbolic`); ``full``: every listed
    specialization."""
    import importlib.util

    if not any(importlib.util.find_spec(name) for name in SYMBOLIC_EXECUTORS):
        report.add(R.Row("kernel.symbolic_proof", "sgl_build_tree_kernel_efficient_triton, "
                         "generate_draft_decode_kv_indices", "the kernels proved or refuted for all inputs", "-",
                         R.UNAVAILABLE, "symbolic kernel proof: executor not available in this specbound; the "
                         "kernels are only fuzzed"))
        return
    from . import symbolic

    symbolic.check(report, full)
