"""sglang's draft-decode ``kv_indices`` kernel (``generate_draft_decode_kv_indices``) under the
checked interpreter: seeded random batches with room for their draft tokens, fed the way
sglang's host code feeds them (``kv_indptr`` zero-initialised, ``positions`` = ``seq_lens``
repeated ``topk`` times, lane bounds = next powers of two), rows as wide as sglang's own
``draft_kv_indices_buffer_width`` says; the token-block launch on long prefixes; and a
probe of a request without draft room.  Outputs are compared with
:func:`specbound.reference.draft_decode_kv_indices`, footprints with the spec's.
"""

from __future__ import annotations

import random
import time
from typing import Callable

from specbound import spec

from specbound.audit.report import DIVERGED, ERROR, MATCHED, NOT_PRESENT, OOB, UNGUARDED, AuditReport, Row
from specbound.audit.extract import Found, SourceIndex
from specbound.audit.kernels import (
    Finding, Unavailable, bind, define_kernel, first_diff, fuzz_row, launch_finding,
    value_key,
)

from .bindings import BINDINGS
from .launch import KV_ALIASES, KV_FILES, KV_KERNEL, kv_values

# The kernel parameters (normalised names) the audit knows how to feed.
KV_FED = {"req_pool_indices", "req_to_token", "paged_kernel_lens", "kv_indices", "kv_indptr", "positions",
          "row_stride", "kv_indices_stride", "kv_indptr_stride", "bs_upper", "iter_upper", "num_tokens_upper",
          "page_size"}


def run_kv(kernel, found: Found, case, width_fn=None) -> Finding | None:
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
    blocks = case.get("blocks", 0)
    values = _values(batch, kv_indices, kv_indptr, k, steps, page, width, steps if blocks else None)
    kwargs, missing = bind(found, values, KV_ALIASES)
    if missing:
        raise Unavailable(f"unknown signature: no value for {missing}")
    grid = (steps * (blocks or 1), num_seqs, k)
    sessions: list = []
    fault = launch_finding(lambda: kernel[grid](**kwargs), sessions)
    if fault is not None:
        return fault
    session = sessions[0]
    want_idx = torch.full((steps, width), -1, dtype=torch.int64)
    want_ptr = torch.zeros((steps, bs_d + 1), dtype=torch.int32)
    reference.draft_decode_kv_indices(batch.req_pool_indices, batch.req_to_token, batch.seq_lens, topk=k,
                                      num_steps=steps, page_size=page, kv_indices=want_idx, kv_indptr=want_ptr)
    for name, got, exp in (("kv_indices", kv_indices, want_idx), ("kv_indptr", kv_indptr, want_ptr)):
        diff = first_diff(name, got, exp, engine=BINDINGS.engine)
        if diff:
            return Finding(DIVERGED, diff)
    written = session.written()
    names = {value_key(p, KV_ALIASES): p for p in kwargs}
    want_cells = spec.kv_indices_cells(seq, k, steps, width)
    got_cells = written.get(names["kv_indices"], set())
    if got_cells != want_cells:
        return Finding(DIVERGED, f"kv_indices footprint: outside the spec {sorted(got_cells - want_cells)[:5]}, "
                       f"spec cells not written {sorted(want_cells - got_cells)[:5]}")
    ptr_spec = spec.kv_indptr_cells(num_seqs, k, steps, bs_d + 1)
    ptr_got = written.get(names["kv_indptr"], set())
    entry0 = {spec.kv_indices_cell(bs_d + 1, it, 0) for it in range(1, steps + 1)}
    if not (ptr_got <= ptr_spec and ptr_spec - ptr_got <= entry0):
        return Finding(DIVERGED, f"kv_indptr footprint: outside the spec {sorted(ptr_got - ptr_spec)[:5]}, "
                       f"not written {sorted(ptr_spec - ptr_got - entry0)[:5]}")
    for key in ("req_pool_indices", "req_to_token", "paged_kernel_lens", "positions"):
        if written.get(names.get(key, key)):
            return Finding(DIVERGED, f"writes to its input {key}")
    return None


def _values(batch, kv_indices, kv_indptr, k: int, steps: int, page: int, width: int, num_steps=None) -> dict:
    """The launch's arguments for a sample batch (:func:`specbound.reference.samples.random_kv_batch`),
    as sglang's host code feeds them: ``kv_indptr`` rows of ``num_seqs * k + 1``, ``positions`` =
    ``seq_lens`` repeated ``k`` times, the lane bounds the next powers of two."""
    from specbound.kernels.plan import pow2  # loads torch: deferred, as the package's other launches

    num_seqs = batch.seq_lens.numel()
    return kv_values(batch.req_pool_indices, batch.req_to_token, batch.seq_lens, kv_indices, kv_indptr,
                     batch.seq_lens.repeat_interleave(k), row_stride=batch.req_to_token.shape[1], width=width,
                     indptr_stride=num_seqs * k + 1, page_size=page, num_steps=num_steps,
                     lane_bounds=(pow2(num_seqs), pow2(steps), pow2(num_seqs * k)))


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


def check_kv_kernel(index: SourceIndex, report: AuditReport, examples: int, seed: int,
                    width_fn: Callable | None, width_source: str = "") -> None:
    """``width_fn``: sglang's row-width helper (``width_source`` says where it is), or None
    when this sglang has none; the rows then use the spec's width and the row says so."""
    what = ("batches with room for the draft tokens: kv_indices/kv_indptr == reference, footprints == spec "
            "(kv_indptr entry 0 may rely on the zero-initialised buffer), in bounds")
    found = index.find(KV_KERNEL, KV_FILES)
    if found is None:
        report.add(Row("kernel.draft_kv_indices", KV_KERNEL, what, "-", NOT_PRESENT,
                       f"no `{KV_KERNEL}` in this sglang"))
        return
    subject = f"{KV_KERNEL} ({found.where})"
    t0 = time.perf_counter()
    loaded = define_kernel(index, report, found, KV_ALIASES, KV_FED, ("kernel.draft_kv_indices", subject, what))
    if loaded is None:
        return
    kernel, _ = loaded

    def width(num_seqs, k, c):
        return width_fn(num_seqs, k, c) if width_fn is not None else spec.draft_kv_indices_buffer_width(num_seqs, k, c)

    run = lambda c: run_kv(kernel, found, c, width)  # noqa: E731
    # The hand case of the background: width(4, 3, 256) rows; a small paged K>1 case.
    report.add(fuzz_row("kernel.draft_kv_indices", subject, what, examples, random_kv_case, run,
                        _kv_smaller, seed + 2, t0, note=_width_note(width_fn, width_source)))
    has_blocks = any(value_key(p, KV_ALIASES) == "num_steps" for p in found.params())
    if has_blocks:
        t1 = time.perf_counter()
        n = max(1, examples // 8)
        report.add(fuzz_row("kernel.draft_kv_indices[token_blocks]", subject,
                            "long prefixes (up to 1100 slots) with the token-block launch (NUM_STEPS, grid "
                            "num_steps*blocks): same comparisons", n, lambda r: random_kv_case(r, long=True), run,
                            _kv_smaller, seed + 3, t1))
    # Precondition probe: a request with no room for its draft tokens (seq_len = C).
    t2 = time.perf_counter()
    probe = {"topk": 2, "num_steps": 3, "page_size": 1, "seq_lens": [8, 8], "max_context_len": 8, "slot_seed": 7}
    f = run_kv_no_room(kernel, found, probe, width)
    used = spec.draft_kv_indices_used_len(16, 2, 4, 3)
    w = width(2, 2, 8)
    if f is not None and f.kind == OOB:
        status, detail = UNGUARDED, (f"seq_len = C (no room): used_len {used} > row width {w}; the kernel "
                                     f"writes past its row (into the next step's row, past the buffer on the "
                                     f"last): {f.message}")
    elif f is not None:
        status, detail = ERROR, f.message
    else:
        status, detail = MATCHED, f"no write past the buffer even without room (width {w}, used_len {used})"
    report.add(Row("kernel.draft_kv_indices[no_draft_room]", subject,
                   "a request with seq_len = C (violates draft room): what the kernel does", "probe", status,
                   detail, replay=probe, seconds=time.perf_counter() - t2,
                   evidence=f.message if status == UNGUARDED else ""))


def _width_note(width_fn, width_source: str) -> str:
    if width_fn is not None:
        return f"; row widths from sglang's draft_kv_indices_buffer_width ({width_source})"
    return ("; row widths from the spec's draft_kv_indices_buffer_width (num_seqs*K*C): this sglang has no such "
            "helper (the widths its backends allocate are judged in the buffer.draft_kv_indices rows)")


def run_kv_no_room(kernel, found, case, width, rows: int | None = None) -> Finding | None:
    """Run without the reference (which refuses the batch): only bounds matter here.
    ``rows`` (default ``num_steps``) and ``width`` give the kv_indices buffer's shape."""
    from specbound.reference.samples import random_kv_batch

    k, steps, page, seq = case["topk"], case["num_steps"], case["page_size"], case["seq_lens"]
    batch = random_kv_batch(random.Random(case["slot_seed"]), len(seq), k, steps, page, seq_lens=seq)
    return _launch_bounds_only(kernel, found, batch, k, steps, page, width(len(seq), k, case["max_context_len"]), rows)


def _launch_bounds_only(kernel, found, batch, k: int, steps: int, page: int, width: int,
                        rows: int | None = None) -> Finding | None:
    """``batch`` launched into a ``(rows or steps, width)`` kv_indices: the checked interpreter's
    fault, if any (the outputs are not compared)."""
    import torch

    num_seqs = batch.seq_lens.numel()
    kv_indices = torch.full((steps if rows is None else rows, width), -1, dtype=torch.int64)
    kv_indptr = torch.zeros((steps, num_seqs * k + 1), dtype=torch.int32)
    kwargs, _ = bind(found, _values(batch, kv_indices, kv_indptr, k, steps, page, width), KV_ALIASES)
    return launch_finding(lambda: kernel[(steps, num_seqs, k)](**kwargs))


def run_kv_in_row(kernel, found, case, row_width: int) -> Finding | None:
    """One request's draft kv build with its ``req_to_token`` row the last (only) row of a pool
    ``row_width`` wide, as sglang allocates it: a read past the row is past the tensor, which the
    checked interpreter reports.  The kv_indices buffer is the spec's, so only the row can fault."""
    import torch
    from specbound.reference.samples import KvBatch, req_to_token

    k, steps, page, seq = case["topk"], case["num_steps"], case["page_size"], case["seq_lens"]
    batch = KvBatch(torch.tensor([0], dtype=torch.int64), req_to_token(1, row_width, torch.int32),
                    torch.tensor(seq, dtype=torch.int64))
    return _launch_bounds_only(kernel, found, batch, k, steps, page,
                               spec.draft_kv_indices_buffer_width(1, k, case["max_context_len"]))
