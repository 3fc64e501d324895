"""Concrete replays of counterexamples on sglang's own kernels (issue 15): the batch a model
describes, launched on the kernel source by path under the checked interpreter, as sglang's
launch sites launch it.  torch and triton are imported here only, at replay time.

Verdicts as in :mod:`.replay` (``oob``, ``race``, ``assert``, ``output``, ``none``), plus
``wrap`` (Triton's int32 overflow check, on in the checked interpreter) and
``unavailable`` (the replay buffers cannot be allocated here).
"""

from __future__ import annotations

from specbound import spec

from .sglang_draft_kv import BIG_BUFFER, KERNEL as KV_KERNEL

def expected_outputs(seq, rows, r2t, k, d, page, width, stride):
    """kv_indices / kv_indptr as the spec defines them (zero where nothing is written), or
    None when a spec cell lies outside the buffers (the batch breaks the contract)."""
    import torch

    out_i = torch.zeros(d * width, dtype=torch.int64)
    out_p = torch.zeros(d * stride, dtype=torch.int64)
    prefix = spec.prefix_sums(seq)
    flat = r2t.reshape(-1)
    row_w = r2t.shape[1]
    for it in range(1, d + 1):
        for b, s in enumerate(seq):
            for t in range(k):
                start = spec.kv_segment_start(prefix[b], b, t, k, it, s)
                for col in range(spec.kv_segment_len(s, it)):
                    cell = spec.kv_indices_cell(width, it, start + col)
                    pos = col if col < s else spec.kv_extension_read(s, t, col - s, k, d, page)
                    if not (0 <= cell < d * width and 0 <= pos < row_w):
                        return None
                    out_i[cell] = flat[rows[b] * row_w + pos]
        for z in range(1, spec.draft_branches(len(seq), k) + 1):
            zb, zt = divmod(z, k)
            s_zb = seq[zb] if zb < len(seq) else 0
            cell = spec.kv_indices_cell(stride, it, z)
            if cell >= d * stride:
                return None
            out_p[cell] = spec.kv_indptr_entry(spec.kv_positions_prefix(prefix[zb], zt, k, s_zb), z, it)
    return out_i, out_p


def replay_kv(sp, conc: dict, path: str):
    """Launch sglang's kernel (source at ``path``) on the concrete batch, as the launch sites
    do, under the checked interpreter: ``oob`` / ``assert`` / ``race``, else ``output`` when
    the buffers differ from the spec's, else ``none``."""
    import torch

    from .replay import Replay, checked_fault
    from .sglang_common import load_jit

    ns_, k, d = conc["num_seqs"], conc["topk"], conc["num_steps"]
    page = conc["page_size"] if sp.paged else 1
    contents = conc["_contents"]
    seq = [max(0, contents["seq_len"](i)) for i in range(ns_)]
    row_stride, pool = max(conc["row_stride"], 1), max(conc["pool_rows"], 1)
    rows = [min(max(contents["pool_row"](i), 0), pool - 1) for i in range(ns_)]
    width, stride = conc["width"], conc["indptr_stride"]
    grid = (conc["grid0"], ns_, k)
    inputs = {"num_seqs": ns_, "topk": k, "num_steps": d, "page_size": page, "seq_lens": seq,
              "req_pool_indices": rows, "row_stride": row_stride, "kv_indices": [d, width],
              "kv_indptr": [d, stride], "grid": list(grid), "spec": sp.label}
    kernel = load_jit(path, KV_KERNEL)
    r2t = torch.arange(pool * row_stride, dtype=torch.int32).reshape(pool, row_stride) + 1000
    big = d * max(width, stride) > BIG_BUFFER
    try:   # a big buffer is allocated untouched: only the cells the kernel writes get pages
        kv_indices = (torch.empty if big else torch.zeros)((d, width), dtype=torch.int32)
        kv_indptr = (torch.empty if big else torch.zeros)((d, stride), dtype=torch.int32)
    except (RuntimeError, MemoryError) as exc:
        return Replay("unavailable", f"cannot allocate the replay buffers ({d} x {max(width, stride)} cells): {exc}",
                      inputs)
    seq_t = torch.tensor(seq, dtype=getattr(torch, sp.seq_lens_dtype))
    positions = torch.tensor(seq, dtype=torch.int64).repeat_interleave(k)
    rows_t = torch.tensor(rows, dtype=torch.int64)

    def launch():
        kernel[grid](rows_t, r2t, seq_t, kv_indices, kv_indptr, positions, row_stride, width, stride,
                     sp.bs_upper, sp.iter_upper, sp.num_tokens_upper, page, NUM_STEPS=sp.NUM_STEPS)
    fault = checked_fault(launch, inputs)
    if fault is not None and fault.verdict == "assert" and "overflow" in fault.detail:
        return Replay("wrap", f"Triton's int32 overflow check: {fault.detail}", inputs)
    if fault is not None:
        return fault
    if big:
        return Replay("none", "the launch ran without a fault (buffers too big to compare)", inputs)
    want = expected_outputs(seq, rows, r2t, k, d, page, width, stride)
    if want is None:
        return Replay("none", "the batch breaks the contract (a spec cell lies outside the buffers) and the "
                      "launch stayed in bounds", inputs)
    if not (torch.equal(kv_indices.reshape(-1).to(torch.int64), want[0])
            and torch.equal(kv_indptr.reshape(-1).to(torch.int64), want[1])):
        return Replay("output", "kv_indices / kv_indptr differ from the spec's", inputs)
    return Replay("none", "the launch matched the spec", inputs)


def replay_tree(sp, conc: dict, path: str):
    """Launch sglang's tree kernel (source at ``path``) on the concrete batch as
    ``sgl_build_tree_kernel_triton`` does, under the checked interpreter: ``oob`` /
    ``race`` / ``assert``, else ``output`` when it differs from ``specbound.reference`` (for
    a well-formed tree), else ``none``."""
    import torch

    from .replay import Replay, checked_fault
    from .sglang_common import load_jit

    c = conc["_contents"]
    bs_, n, k, d = sp.bs, sp.n, sp.topk, sp.depth
    seq = [max(0, c["seq_len"](i)) for i in range(bs_)]
    sel = [c["selected_index"](i) for i in range(bs_ * sp.sel_width)]
    pl = [c["parent_list"](i) for i in range(bs_ * sp.pl_width)]
    mode = spec.TreeMaskMode(sp.mode)
    inputs = {"seq_lens": seq, "selected_index": sel, "parent_list": pl, "spec": sp.label}
    from .sglang_tree import KERNEL as TREE_KERNEL, well_formed

    kernel = load_jit(path, TREE_KERNEL)
    seq_t = torch.tensor(seq, dtype=torch.int64)
    sel_t = torch.tensor(sel, dtype=torch.int64).reshape(bs_, sp.sel_width)
    pl_t = torch.tensor(pl, dtype=torch.int64).reshape(bs_, sp.pl_width)
    prefix = torch.cumsum(seq_t, 0) - seq_t
    numel = spec.mask_batch_numel(mode, bs_, n, sum(seq))
    outs = {"tree_mask": torch.ones(numel, dtype=torch.bool), "positions": torch.zeros(bs_ * n, dtype=torch.int64),
            "retrive_index": torch.full((bs_, n), -1, dtype=torch.int64),
            "retrive_next_token": torch.full((bs_, n), -1, dtype=torch.int64),
            "retrive_next_sibling": torch.full((bs_, n), -1, dtype=torch.int64)}

    def launch():
        kernel[(bs_,)](pl_t, sel_t, seq_t, prefix, outs["tree_mask"], outs["positions"], outs["retrive_index"],
                       outs["retrive_next_token"], outs["retrive_next_sibling"], topk=k, depth=d,
                       draft_token_num=n, tree_mask_mode=sp.mode, batch_size=bs_,
                       parent_list_stride=sp.pl_width if sp.pl_width else 1,
                       selected_index_stride=sp.sel_width if sp.sel_width else 1)
    fault = checked_fault(launch, inputs)
    if fault is not None:
        return fault
    if not all(bool(well_formed(v, sp)) for v in sel):
        return Replay("none", "malformed tree, the launch stayed in bounds", inputs)
    from specbound import reference
    want = reference.build_tree(pl_t, sel_t, seq_t, topk=k, depth=d, num_draft_tokens=n, mode=mode,
                                tree_mask=torch.ones(numel, dtype=torch.bool),
                                positions=torch.zeros(bs_ * n, dtype=torch.int64),
                                retrive_index=torch.full((bs_, n), -1, dtype=torch.int64),
                                retrive_next_token=torch.full((bs_, n), -1, dtype=torch.int64),
                                retrive_next_sibling=torch.full((bs_, n), -1, dtype=torch.int64))
    for name, theirs in zip(("tree_mask", "positions", "retrive_index", "retrive_next_token", "retrive_next_sibling"),
                            want):
        if not torch.equal(outs[name].reshape(-1), theirs.reshape(-1)):
            return Replay("output", f"{name} differs from specbound.reference", inputs)
    return Replay("none", "the launch matched specbound.reference", inputs)
