"""The theorems of vLLM's kernels: IN-BOUNDS, NO-WRAP, (NO-TRUNCATION), RACE-FREE and, where
the contract fixes the written cells, FOOTPRINT; one run per specialization, every obligation
through the trusted core (:func:`specbound.proofs.symexec.engine_theorems.check_all`).

Regions (what RACE-FREE means per kernel):

* the rejection samplers write only row ``req_idx`` of ``output_token_ids``
  (``[req_idx*(max_spec_len+1), (req_idx+1)*(max_spec_len+1))``) and rows are disjoint;
* ``expand_kernel`` writes only its request's segment ``[cu[r-1], cu[r])`` of ``output``,
  segments of different requests are disjoint (``cu`` is a cumsum of non-negative counts);
* ``sample_recovered_tokens_kernel`` program ``(r, pos)`` writes only cell ``cu[r-1] + pos``
  with ``pos < cu[r] - cu[r-1]``: distinct programs, distinct cells.
"""

from __future__ import annotations

import z3

from specbound.proofs.symexec.obligations import Obligation
from specbound.proofs.symexec.values import LANES

from . import contract, models
from specbound.proofs.symexec.theorems import obligations as generic
from specbound.proofs.symexec.engine_theorems import prove


def _cu(run):
    decl = run.tensors[next(a for a in ("cu_num_draft_tokens_ptr", "cu_num_tokens_ptr") if a in run.tensors)].content
    prev = lambda r: z3.If(r == 0, z3.IntVal(0), decl(r - 1))
    return decl, prev


def _min(a, b):
    return z3.If(a <= b, a, b)


def _max(a, b):
    return z3.If(a >= b, a, b)


def _expand_region(run, tensor, r, b):
    """copy_and_expand_eagle_inputs: program (r, b) handles positions j in [b*BLOCK, (b+1)*BLOCK)
    of request r's output segment [qsl[r] + r*net, qsl[r+1] + (r+1)*net) (net = P - shift),
    of its new-token slots [r*P, (r+1)*P) (j - num_valid), and of its input tokens for the
    hidden-state map [qsl[r], qsl[r+1])."""
    sp = dict(run.spec[1])
    blk, shift = sp["BLOCK_SIZE_TOKENS"], 1 if sp["shift_input_ids"] else 0
    qs, qe, P = run.tensors["query_start_loc_ptr"].content, run.tensors["query_end_loc_ptr"].content, run.q["P"]
    net = P - shift
    j0, j1 = b * blk, (b + 1) * blk
    if tensor == "out_new_token_indices":
        nv = qe(r) - qs(r) + (1 - shift)
        return r * P + _max(j0 - nv, 0), r * P + _min(j1 - nv, P)
    if tensor == "out_hidden_state_mapping":
        return qs(r) + j0, _min(qs(r) + j1, qs(r + 1))
    start = qs(r) + r * net
    return start + j0, _min(start + j1, qs(r + 1) + (r + 1) * net)


def _region(run, r, p1, tensor=None):
    """[lo, hi) of the cells program (r, p1) may store (the table's ``region``)."""
    kind = run.kernel.region
    if kind == "eagle_expand":
        return _expand_region(run, tensor, r, p1)
    if kind == "row":
        w = run.q["max_spec_len"] + 1
        return r * w, (r + 1) * w
    if kind == "cell":
        return r, r + 1
    cu, prev = _cu(run)
    if kind == "segment":
        return prev(r), cu(r)
    return prev(r) + p1, prev(r) + p1 + 1


def _pids(run):
    pid = run.result.pid
    return pid[0], (pid[1] if len(pid) > 1 else z3.IntVal(0))


def race_obligations(run) -> list:
    out = []
    r, p1 = _pids(run)
    for i, a in enumerate(run.result.accesses):
        if not (a.kind == "store" or (a.kind == "load" and a.tensor.written)):
            continue
        lo, hi = _region(run, r, p1, a.tensor.name)
        off = a.off.e
        what = "stores" if a.kind == "store" else "reads (a tensor programs write)"
        out.append(Obligation(f"own-region-{a.tensor.name}@{a.line}#{i}", "region", a.line,
                              f"every active lane {what} inside its own program's region of {a.tensor.name}",
                              run.base_hyps(a.path, a.shape, a.mask), z3.And(lo <= off, off < hi), list(run.lemmas)))
    if run.kernel.region == "eagle_expand":
        out += _disjoint_expand(run)
    else:
        out += _disjoint(run)
    return out


def _disjoint_expand(run) -> list:
    """Programs (rA, bA) < (rB, bB) in grid order: A's region of each output ends before B's."""
    ra, rb, ba, bb = z3.Ints("rA rB bA bB")
    qs = run.tensors["query_start_loc_ptr"].content
    hyps = dict(run.hyps)
    hyps["programs_ordered"] = z3.And(0 <= ra, ra <= rb, rb < run.result.grid[0], 0 <= ba, 0 <= bb,
                                      z3.Or(ra < rb, ba < bb))
    # query_start_loc is a cumsum of positive lengths: non-decreasing (what the per-cell facts give by induction)
    hyps["query_start_nondecreasing"] = z3.Implies(ra < rb, qs(ra + 1) <= qs(rb))
    out = []
    for name in sorted({a.tensor.name for a in run.result.accesses if a.kind == "store"}):
        _lo, hi_a = _expand_region(run, name, ra, ba)
        lo_b, _hi = _expand_region(run, name, rb, bb)
        out.append(Obligation(f"regions-disjoint-{name}", "race", 0, f"the region of {name} of a program ends "
                              "before a later program's begins", hyps, hi_a <= lo_b, list(run.lemmas)))
    return out


def _disjoint(run) -> list:
    """Regions of two programs A < B (in grid order) never overlap (A's ends before B's)."""
    if not any(a.kind == "store" for a in run.result.accesses):
        return []
    ra, rb, pa, pb = z3.Ints("rA rB pA pB")
    B = run.result.grid[0]
    hyps = dict(run.hyps)
    kind = run.kernel.region
    if kind == "token":
        cu, prev = _cu(run)
        hyps["programs_ordered"] = z3.And(0 <= ra, ra <= rb, rb < B, z3.Or(ra < rb, pa < pb), 0 <= pa, 0 <= pb)
        hyps["programs_active"] = z3.And(pa < cu(ra) - prev(ra), pb < cu(rb) - prev(rb))
    else:
        hyps["programs_ordered"] = z3.And(0 <= ra, ra < rb, rb < B)
    if kind in ("segment", "token"):
        cu, _prev = _cu(run)
        # cu is a cumsum of non-negative counts: non-decreasing (what the per-cell facts give by induction)
        hyps["cu_nondecreasing"] = z3.Implies(ra < rb, cu(ra) <= cu(rb - 1))
    _lo_a, hi_a = _region(run, ra, pa)
    lo_b, _hi_b = _region(run, rb, pb)
    return [Obligation("regions-disjoint", "race", 0, "the region of a program ends before a later program's begins",
                       hyps, hi_a <= lo_b, list(run.lemmas))]


def footprint_obligations(run) -> list:
    """``expand_kernel``: every cell of the request's segment is stored by an active lane
    (the lane ``j`` of the block, ``j < MAX_NUM_TOKENS``), with the request's value."""
    out = []
    r, _p1 = _pids(run)
    cu, prev = _cu(run)
    j = z3.Int("segment_cell")
    for i, a in enumerate(run.result.accesses):
        if a.kind != "store" or a.shape != (128,):
            continue
        hyps = {**run.base_hyps(a.path, (), None), "segment_cell": z3.And(0 <= j, j < cu(r) - prev(r))}
        at = lambda e: z3.substitute(e, (LANES[0], j))
        goal = z3.And(j < a.shape[0], at(a.mask), at(a.off.e) == prev(r) + j)
        out.append(Obligation(f"coverage-{a.tensor.name}@{a.line}#{i}", "coverage", a.line,
                              "every cell of the request's segment is stored by an active lane", hyps, goal,
                              list(run.lemmas)))
    return out


def value_obligations(run) -> list:
    """INDEX-IN-RANGE: every active lane's stored value in a tensor of the table's
    ``stored_ranges`` lies in ``[lo, hi)``, the rows its consumer indexes with it."""
    out = []
    ranges = {arg.removesuffix("_ptr"): (lo, hi, who) for arg, lo, hi, who in run.kernel.stored_ranges}
    for i, a in enumerate(run.result.accesses):
        if a.kind != "store" or a.tensor.name not in ranges:
            continue
        lo, hi, who = ranges[a.tensor.name]
        v = a.value.e
        goal = z3.And(contract.term(lo, run.q, **run.cx) <= v, v < contract.term(hi, run.q, **run.cx))
        out.append(Obligation(f"index-in-range-{a.tensor.name}@{a.line}#{i}", "value", a.line,
                              f"every stored {a.tensor.name} lies in [{lo}, {hi}) ({who})",
                              run.base_hyps(a.path, a.shape, a.mask), goal, list(run.lemmas)))
    return out


def obligations(run, prop: str) -> list:
    return generic(run, prop, races=race_obligations, values=value_obligations, footprints=footprint_obligations)


def prove_kernel(root, kernel: contract.Kernel, path: str | None = None, progress=None) -> list:
    """Every property theorem of every specialization of ``kernel``."""
    out = []
    for sp in kernel.specializations:
        out.extend(prove(models.run_kernel(root, kernel, sp, path), obligations, kernel.properties, progress))
    return out
