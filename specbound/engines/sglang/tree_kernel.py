"""sglang's Triton tree build (``sgl_build_tree_kernel_efficient_triton``) under the checked
interpreter: the golden vector, seeded random valid trees fed the way sglang's host code
feeds them (outputs pre-filled: -1 for ``retrive_*``, True for the mask, the exclusive
prefix sum of ``seq_lens`` as a separate input), each tensor at exactly its in-contract
extent.  Outputs are compared with :func:`specbound.reference.build_tree` and write
footprints with :mod:`specbound.spec.footprint`; malformed trees are probed separately.
"""

from __future__ import annotations

import ast
import random
import time

from specbound import spec
from specbound.spec import TreeMaskMode

from specbound.audit.report import DIVERGED, ERROR, MATCHED, NOT_PRESENT, OOB, UNAVAILABLE, UNGUARDED, AuditReport, Row
from specbound.audit.extract import Found, SourceIndex
from specbound.audit.kernels import (
    Finding, Unavailable, bind, define_kernel, first_diff,
    fuzz_row, launch_finding, value_key,
)

from .bindings import BINDINGS
from .launch import TREE_ALIASES, TREE_FILES, TREE_KERNEL, tree_values

TREE_WRAPPER = "sgl_build_tree_kernel_triton"   # the host wrapper that launches it

# The kernel parameters (normalised names) the audit knows how to feed.
TREE_FED = {"parent_list", "selected_index", "verified_seq_len", "seq_len_prefix_sum", "tree_mask", "positions",
            "retrieve_index", "retrieve_next_token", "retrieve_next_sibling", "topk", "depth", "draft_token_num",
            "tree_mask_mode", "batch_size", "parent_list_stride", "selected_index_stride"}


def tree_case_tensors(case):
    import torch

    bs, n = len(case["seq_lens"]), case["n"]
    width = spec.parent_list_width(case["topk"], case["depth"])
    pl = torch.tensor(case["parent_list"], dtype=torch.int64).reshape(bs, width)
    sel = torch.tensor(case["selected_index"], dtype=torch.int64).reshape(bs, n - 1)
    seq = torch.tensor(case["seq_lens"], dtype=torch.int64)
    return pl, sel, seq


def run_tree(kernel, found: Found, case, mask_numel: int | None = None) -> Finding | None:
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
    values = tree_values(pl, sel, seq, {"tree_mask": mask, "positions": positions, "retrive_index": outs[0],
                                        "retrive_next_token": outs[1], "retrive_next_sibling": outs[2]},
                         topk=k, depth=d, n=n, mode=mode,
                         parent_list_stride=pl.stride(0) if pl.dim() > 1 else pl.shape[0],
                         selected_index_stride=sel.stride(0))
    kwargs, missing = bind(found, values, TREE_ALIASES)
    if missing:
        raise Unavailable(f"unknown signature: no value for {missing}")
    sessions: list = []
    fault = launch_finding(lambda: kernel[(bs,)](**kwargs), sessions)
    if fault is not None:
        return fault
    session = sessions[0]
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
        diff = first_diff(name, got, exp, None if name == "tree_mask" else n, engine=BINDINGS.engine)
        if diff:
            return Finding(DIVERGED, diff)
    written = session.written()
    names = {value_key(p, TREE_ALIASES): p for p in kwargs}
    tokens = spec.token_cells(bs, n)
    checks = [("tree_mask", spec.mask_kernel_cells(mode, n, seq.tolist()), "=="),
              ("positions", tokens, "=="), ("retrieve_index", tokens, "=="),
              ("retrieve_next_token", tokens, "<="), ("retrieve_next_sibling", tokens, "<=")]
    for key, cells, rel in checks:
        got = written.get(names.get(key, key), set())
        ok = got == cells if rel == "==" else got <= cells
        if not ok:
            extra, lacking = sorted(got - cells)[:5], sorted(cells - got)[:5] if rel == "==" else []
            return Finding(DIVERGED, f"footprint of {key}: writes outside the spec's {sorted(extra)}"
                           + (f", spec cells not written {lacking}" if lacking else ""))
    for key in ("parent_list", "selected_index", "verified_seq_len", "seq_len_prefix_sum"):
        if written.get(names.get(key, key)):
            return Finding(DIVERGED, f"writes to its input {key}")
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


def check_tree_kernel(index: SourceIndex, report: AuditReport, examples: int, seed: int) -> None:
    what = ("valid draft trees (FULL_MASK, QLEN_ONLY): outputs == reference.build_tree, mask/positions/"
            "retrive_* footprints == spec, in bounds")
    row_id = "kernel.build_tree[valid]"
    found = index.find(TREE_KERNEL, TREE_FILES)
    if found is None:
        report.add(Row(row_id, TREE_KERNEL, what, "-", NOT_PRESENT,
                       f"no `{TREE_KERNEL}` in this sglang (no Triton port of the tree build)"))
        return
    subject = f"{TREE_KERNEL} ({found.where})"
    probe = {"topk": 2, "depth": 2, "n": 4, "mode": 1, "seq_lens": [5], "selected_index": [0, 1, 2],
             "parent_list": [-1, 0, 1]}
    t0 = time.perf_counter()
    loaded = define_kernel(index, report, found, TREE_ALIASES, TREE_FED, (row_id, subject, what))
    if loaded is None:
        return
    kernel, _ = loaded
    run = lambda c: run_tree(kernel, found, c)  # noqa: E731
    # Golden vector of the background (sglang's own unit test values) first, then random batches.
    golden = {"topk": 4, "depth": 4, "n": 8, "mode": 0, "seq_lens": [5, 10],
              "selected_index": [0, 1, 4, 8, 20, 24, 36, 0, 4, 5, 6, 7, 24, 36],
              "parent_list": [-1, 0, 1, 2, 3, 4, 8, 9, 10, 20, 24, 21, 28, -1, 0, 1, 2, 3, 4, 5, 6, 7, 24, 28, 20, 21]}
    for fixed in (golden, probe):
        f = run(fixed)
        if f is not None:
            report.add(Row(row_id, subject, what, "fixed case", f.kind if f.kind != ERROR else ERROR,
                           f.message, replay=fixed, seconds=time.perf_counter() - t0))
            return
    report.add(fuzz_row(row_id, subject, what, examples, random_tree_case, run, _tree_smaller, seed, t0,
                        note=" (plus the golden vector and the K=2 hand case)"))
    _tree_bitpacking_row(index, report)
    _tree_malformed(report, subject, run, examples, seed)


def _tree_bitpacking_row(index: SourceIndex, report: AuditReport) -> None:
    wrapper = index.find(TREE_WRAPPER, TREE_FILES)
    what = "QLEN_ONLY_BITPACKING layout of the Triton tree build"
    if wrapper is None:
        report.add(Row("kernel.build_tree[BITPACKING]", TREE_WRAPPER, what, "-", NOT_PRESENT,
                       f"no host wrapper `{TREE_WRAPPER}` found; BITPACKING not audited"))
        return
    refuses = any(isinstance(n, ast.Raise) for n in ast.walk(wrapper.node)) and \
        "QLEN_ONLY_BITPACKING" in wrapper.source()
    report.add(Row("kernel.build_tree[BITPACKING]", f"{TREE_WRAPPER} ({wrapper.where})", what, "ast",
                   NOT_PRESENT if refuses else UNAVAILABLE,
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
    first_divergence = None
    n = max(1, examples // 2)
    for _ in range(n):
        case = random_tree_case(rng, malformed=0.3)
        f = run(case)
        if f is None:
            continue
        if f.kind == OOB:
            n_oob += 1
        elif f.kind == DIVERGED:
            n_diff += 1
            first_divergence = first_divergence or (f, case)
        else:
            n_err += 1
        if len(findings) < 2 and f.kind != DIVERGED:
            findings.append((f, case))
    if not findings and first_divergence is None:
        report.add(Row("kernel.build_tree[malformed]", subject, what, f"probe + fuzz ({n} batches)", MATCHED,
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
    if first_divergence is not None:
        parts.append(f"first difference: {first_divergence[0].message}")
        replay = replay or first_divergence[1]
    report.add(Row("kernel.build_tree[malformed]", subject, what, f"probe + fuzz ({n} batches)", UNGUARDED,
                   "sglang relies on well-formed trees from its own draft step (the parent_list read is "
                   "unguarded). " + "; ".join(parts), replay=replay, seconds=time.perf_counter() - t0,
                   evidence="; ".join(parts)))
