"""Everything the verifier knows about ``fill_prefix_kernel`` (``kernels/tree_build.py``, the
FULL_MASK prefix columns): its specializations, host contract and tensor models (the launch
plan ``fill_plan`` on Z3 terms; the tensors, regions and contracts are the tree build's),
its footprint maps, its mutants, and its concrete replay launch.  Registered in
:mod:`specbound.proofs.symexec.verifiers`.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from specbound import spec
from specbound.proofs.model import C, P, bs, labelled, n, seq_len

from ..footprint import cover, lane_term, loop_var, request_lane, sound, stores_of
from ..interp import Executor
from ..kernel_files import kernel_path
from ..models import (
    KernelVerifier, Run, block_b, block_b_inputs, block_b_label, block_b_report, check_plan, concrete_block_b, covers, int32_scalar,
    launch_plans, make_oracle, state_block_b,
)
from ..plant import kernel_of, swap
from specbound.replay import Replay
from specbound import replay as replays
from ..values import LANES, Unsupported
from .tree_build import LIMITS, mask_region, tree_common, tree_lemmas, tree_tensors

KERNEL = ("tree_build", "fill_prefix_kernel")   # specbound.kernels.<module>, the @triton.jit function


# --- specializations --------------------------------------------------------------------------

@dataclass(frozen=True)
class FillSpec:
    """One specialization, or (``BLOCK_B`` None) every power of two of
    ``plan.symbolic_block_b_values`` as BLOCK_B at once: ``tl.arange(0, BLOCK_B)`` is then a
    lane ``0 <= lane < BLOCK_B``."""

    BLOCK_B: int | None
    NODES: int
    BLOCK_C: int
    name = "FILL-PREFIX"

    @property
    def label(self):
        return launch_plans().specialization(KERNEL[1], {"BLOCK_B": block_b_label(self), "NODES": self.NODES,
                                                         "BLOCK_C": self.BLOCK_C})[1]

    covers = covers


def all_specs() -> list:
    """Several tile sizes, up to 1024 node lanes and 1024 columns; then the serving envelope's
    launches with BLOCK_B symbolic (``plan.proof_selection``: each covers its GPU launch and
    every interpreted one)."""
    out = [FillSpec(bb, nodes, bc) for bb, nodes, bc in
           ((1, 1, 16), (2, 8, 16), (4, 16, 256), (1, 1024, 1024), (8, 64, 128))]
    chosen = [FillSpec(**e["constexprs"]) for e in launch_plans().proof_selection(KERNEL[1]).values()]
    return out + [sp for sp in chosen if sp not in out]


# --- host contract and tensor models (the tree build's) --------------------------------------------

def symbolic_run(sp: FillSpec, *, transform=None, host: dict | None = None) -> Run:
    mode = spec.TreeMaskMode.FULL_MASK
    functions: dict = {}
    hyps: dict = {}
    tensors, _plw, _selw = tree_tensors(functions, hyps, mode, "int1")
    tensors = {k: tensors[k] for k in ("tree_mask_ptr", "seq_lens_ptr", "prefix_ptr")}
    for unread in ("selected_index_int64", "parent_list_int64"):
        del hyps[unread]
    G = z3.Int("grid")
    scalars = {"bs": int32_scalar("bs", bs), "n": int32_scalar("n", n)}
    block = block_b(sp)
    plan = launch_plans().fill_plan(tensors, bs=bs, n=n, block_b=block, nodes=sp.NODES, block_c=sp.BLOCK_C)
    check_plan(KERNEL[1], plan, scalars, tensors)
    axioms = tree_common(hyps, G, plan, block, scalars)
    hyps.update(labelled(spec.lane_bound_ok(n, sp.NODES, "NODES")))
    ex = Executor(kernel_path(KERNEL[0]), KERNEL[1], constexprs=state_block_b(sp, hyps, plan.constexprs),
                  scalars=scalars, tensors=tensors, grid=[G], transform=transform,
                  oracle=make_oracle(hyps, functions, axioms))
    res = ex.run()
    res.block, res.extra_owner, res.batch = block, False, bs
    functions.update(res.functions)
    run_lemmas = list(res.side_proofs)
    for e in {a.env["b"].e.get_id(): a.env["b"].e for a in res.accesses if "b" in a.env}.values():
        run_lemmas += tree_lemmas(e, z3.IntVal(0), z3.IntVal(0))
    pid = res.pid[0]
    report = {"bs": bs, "n": n, "C": C, "grid": G, "pid": pid, **block_b_report(sp)}
    run = Run(sp.name, sp.label, res, hyps, functions, tensors, {"tree_mask": mask_region(mode)},
              pid * block, pid * block + block, report, run_lemmas + axioms, axioms)
    run.spec = sp
    return run


# --- footprint maps -----------------------------------------------------------------------------

def footprint_obligations(run) -> list:
    mode = spec.TreeMaskMode.FULL_MASK
    block, block_c = block_b(run.spec), run.spec.BLOCK_C
    out = []
    fb, ft, fc = z3.Ints("cell_b cell_t cell_c")
    for i, a in stores_of(run):
        b, t, c = lane_term(a, "b", 0), lane_term(a, "t3", 2), lane_term(a, "c", 2)
        dom = lambda b_, t_, c_: z3.And(0 <= b_, b_ < bs, 0 <= t_, t_ < n,
                                        0 <= c_, c_ < spec.mask_prefix_columns(mode, seq_len(b_)))
        cell = lambda b_, t_, c_: spec.mask_prefix_cell(mode, b_, t_, c_, n, seq_len(b_), P(b_))
        # the prefix columns are visible to every draft token: the fill stores True
        out.append(sound(run, a, i, "spec.mask_prefix_cell(FULL, b, t, c, ...) of its (b, t, c), with value True",
                         dom(b, t, c), cell(b, t, c), z3.BoolVal(True)))
        c0 = loop_var(run, a)
        bind = request_lane(run, fb, block) + [(LANES[1], ft), (LANES[2], fc % block_c)]
        if c0 is None:
            raise Unsupported("fill_prefix_kernel: the prefix store is expected inside the column loop", a.line)
        bind.append((c0, (fc / block_c) * block_c))
        out.append(cover(run, a, i, "spec.mask_prefix_cell(b < bs, t < n, c < seq_len[b])", (fb, ft, fc),
                         dom(fb, ft, fc), bind, [(b, fb), (t, ft), (c, fc)]))
    return out


# --- concrete replay: the counterexample launched through fill_plan ----------------------------

def replay(sp, conc: dict, plant=None, host=None) -> Replay:
    """The counterexample's lengths, launched on the kernel (or ``plant``'s version of it)
    through ``fill_plan`` into a FULL_MASK mask of the batch's exact extent, all False;
    compared with ``spec.mask_fill_cells`` (exactly those cells True).  A symbolic BLOCK_B is
    launched at the counterexample's value."""
    import torch

    from specbound.kernels import plan as concrete_plans

    bs_, n_ = conc["bs"], conc["n"]
    seq = [max(0, conc["_contents"]["seq_len"](i)) for i in range(bs_)]
    block = concrete_block_b(sp, conc)
    inputs = {"bs": bs_, "n": n_, "seq_lens": seq, "spec": sp.label, **block_b_inputs(sp, conc)}
    full = spec.TreeMaskMode.FULL_MASK
    numel = spec.mask_batch_numel(full, bs_, n_, sum(seq))
    mask = torch.zeros(numel, dtype=torch.bool)
    plan = concrete_plans.fill_plan(
        {"tree_mask_ptr": mask, "seq_lens_ptr": torch.tensor(seq, dtype=torch.int64),
         "prefix_ptr": torch.tensor(spec.prefix_sums(seq)[:-1], dtype=torch.int64)},
        bs=bs_, n=n_, block_b=block, nodes=sp.NODES, block_c=sp.BLOCK_C)
    fn = kernel_of(*KERNEL, plant)

    def compare():
        want = torch.zeros(numel, dtype=torch.bool)
        for cell in spec.mask_fill_cells(full, n_, seq):
            want[cell] = True
        return None if torch.equal(mask, want) else "prefix fill differs from spec.mask_fill_cells"
    return replays.run(lambda: plan.launch(fn), inputs, kernel=f"{KERNEL[1]}{' (planted)' if plant else ''}",
                       compare=compare)


# --- mutants -------------------------------------------------------------------------------------

MUTANTS = (
    swap(KERNEL, "MUT-FILL-STOPS-EARLY",
         "the fill loop stops one column block early (range(0, s_max - BLOCK_C, BLOCK_C)): the last block of "
         "every prefix row stays unfilled, every store in bounds (a truncated fill)", "fill", "NO-TRUNCATION",
         "range(0, s_max, BLOCK_C)", "range(0, s_max - BLOCK_C, BLOCK_C)"),
    swap(KERNEL, "MUT-FILL-PROGRAM-STRIDE",
         "program p starts at request p*(BLOCK_B - 1): neighbouring programs both fill the request between "
         "them (a race)", "fill", "RACE-FREE",
         "pid.to(tl.int64) * BLOCK_B", "pid.to(tl.int64) * (BLOCK_B - 1)", expect=("race", "output")),
    swap(KERNEL, "MUT-FILL-TAIL-NO-MASK",
         "prefix fill without the tail mask c < seq_len (the last column block writes past the row)",
         "fill", "IN-BOUNDS", "row_ok & (c < s3)", "row_ok", expect=("oob",)),
    swap(KERNEL, "MUT-FILL-TAIL-SHORT",
         "prefix fill masked c < seq_len - 1 (the last prefix column of every row is never filled): every "
         "store is in bounds, in its region and its own cell, so only the completeness (coverage) "
         "obligation sees it", "fill", "FOOTPRINT", "row_ok & (c < s3)", "row_ok & (c < s3 - 1)"),
    swap(KERNEL, "MUT-FILL-STORES-FALSE",
         "prefix fill stores False: exactly the spec's cells, in bounds and race free, but every draft "
         "token would be masked from its own prefix; only the stored value sees it", "fill", "FOOTPRINT",
         "tl.full([BLOCK_B, NODES, BLOCK_C], 1, tl.int1)", "tl.full([BLOCK_B, NODES, BLOCK_C], 0, tl.int1)"),
)

VERIFIER = KernelVerifier(
    "fill", *KERNEL, symbolic_run, ("IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE", "FOOTPRINT"),
    default_specs=(FillSpec(2, 8, 16),), all_specs=all_specs, limits=LIMITS, replay=replay,
    footprint=footprint_obligations, mutants=MUTANTS,
    without_mutant={"NO-WRAP": "every value the prefix fill computes is an offset into a mask of S*n + bs*n^2 "
                               "cells or a column below seq_len, so an int32 wrap there needs a replay of 2^31 "
                               "mask cells"})
