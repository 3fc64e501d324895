"""sglang's draft-decode kernel: its launch layout and the symbols of its host contract.

Shared by the kernel's launch model (:mod:`.sglang_draft_kv`) and its obligations
(:mod:`.sglang_draft_kv_obligations`), which both read stores through this layout.
"""

from __future__ import annotations

import z3

SCOPED = "!scoped"   # a precondition given only to the no-wrap queries that mention its symbols

alloc_bs = z3.Int("alloc_bs")            # requests the kv_indices row was sized for
indptr_stride = z3.Int("indptr_stride")
r2t_width, pool_rows = z3.Ints("row_stride pool_rows")
blocks = z3.Int("token_blocks")
G0 = z3.Int("grid0")
width = z3.Int("width")
# the lane bounds (tl.arange lengths) when a proof covers all their values at once
LANE_BOUNDS = ("bs_upper", "iter_upper", "num_tokens_upper")


def lane_bound_term(name: str):
    """A symbolic lane bound's Z3 constant, made on first use: a constant made at import
    would shift the ids of every term built after it, and with them Z3's choices (which
    premises an unsat core names) in unrelated proofs."""
    return z3.Int(name)

# The host's shape, sizing and per-request conditions: what the capacity (and the spec's cell
# map, which races are proved through) rests on; none of the kernel's launch facts (lane
# bounds, int32 arguments), so facts proved from them hold for every launch.
SPEC_TERMS = ("topk_positive", "num_steps_positive", "page_size_positive", "context_positive", "sized_for_the_batch")


def spec_hyps(run) -> dict:
    return {label: cond for label, cond in run.hyps.items()
            if label in SPEC_TERMS or label in run.host_width_hyps or z3.is_quantifier(cond)}


# Every store is read through the launch layout, never through kernel variable names: program
# (pid0, pid1, pid2) works on step ``iters`` (from pid0), request pid1 and branch pid2, and a
# store's column is its address minus the start of that branch's segment.  So a release that
# renames the kernel's variables is still proved, and one that changes the layout fails.


def iters_of(sp, pid0):
    """The step (1-based) program ``pid0`` works on: the launch layout of the grid's axis 0."""
    return pid0 + 1 if sp.NUM_STEPS == 0 else pid0 % sp.NUM_STEPS + 1


def block_of(sp, pid0):
    """The token block of program ``pid0`` (0 without token blocks)."""
    return z3.IntVal(0) if sp.NUM_STEPS == 0 else pid0 / sp.NUM_STEPS
