"""Everything the verifier knows about ``build_tree_kernel`` (``kernels/tree_build.py``): its
specializations (one theorem kernel per mask layout), host contract and tensor models (the
launch plan ``tree_plan`` on Z3 terms), its store regions and lemmas, the walk bound, its
footprint maps, its mutants, and its concrete replay launch.  The tree tensors, regions and
contracts are shared with the prefix fill (:mod:`.fill_prefix`), which runs on the same
batch.  Registered in :mod:`specbound.proofs.symexec.verifiers`.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from specbound import spec
from specbound.proofs import core as proof_core
from specbound.proofs import lemmas as spec_lemmas
from specbound.proofs import model
from specbound.proofs.model import C, D, K, P, bs, labelled, n, seq_len

from ..footprint import cover, lane_term, request_lane, sound, stores_of
from ..interp import Executor
from ..kernel_files import kernel_path
from ..models import (KernelVerifier, Region, Run, content_preconditions, launch_contracts, check_plan, int32_args, mul_mono,
                      prefix_schema, register_function, int32_scalar, seq_len_schema, launch_plans, make_oracle)
from ..models import block_b, block_b_inputs, block_b_label, block_b_report, concrete_block_b, covers, state_block_b
from ..obligations import Obligation
from ..plant import KernelMutant, Plant, kernel_of, swap
from specbound.replay import Replay
from specbound import replay as replays
from ..values import DTYPES, INT64, LANES, TensorModel

KERNEL = ("tree_build", "build_tree_kernel")   # specbound.kernels.<module>, the @triton.jit function


# --- specializations --------------------------------------------------------------------------

MODE_NAMES = launch_plans().TREE_MODE_NAMES


@dataclass(frozen=True)
class TreeSpec:
    """One specialization, or (``BLOCK_B`` None) every BLOCK_B of
    ``plan.symbolic_block_b_values`` at once (``models.state_block_b``)."""

    MODE: int
    DEPTH: int
    BLOCK_B: int | None
    NODES: int

    @property
    def constexprs(self) -> dict:
        return {"MODE": self.MODE, "DEPTH": self.DEPTH, "BLOCK_B": self.BLOCK_B, "NODES": self.NODES}

    @property
    def name(self):
        return launch_plans().specialization(KERNEL[1], self.constexprs)[0]

    @property
    def mask_dtype(self):
        if self.MODE != 2:
            return "int1"
        return {8: "uint8", 16: "uint16", 32: "uint32"}[max(8, self.NODES)]

    @property
    def label(self):
        return launch_plans().specialization(KERNEL[1], {**self.constexprs, "BLOCK_B": block_b_label(self)})[1]

    covers = covers


def all_specs() -> list:
    """Every power-of-two node lane bound up to 1024 in both unpacked layouts, every
    BITPACKING item width, DEPTH 1..8, 16 and 32; then the serving envelope's launches the
    proofs cover, with BLOCK_B symbolic (``plan.proof_selection``)."""
    out = []
    for nodes in (1 << i for i in range(11)):
        for mode in (0, 1):
            out.append(TreeSpec(mode, 3, max(1, 2048 // (nodes * nodes)), nodes))
    for nodes in (8, 16, 32):
        out.append(TreeSpec(2, 4, 2, nodes))
    # DEPTH is D itself (no power of two): 1..8 covers EAGLE's usual step counts, 16 and 32
    # show the walk's cost stays flat (one defined selection per step)
    for depth in (*range(1, 9), 16, 32):
        out.append(TreeSpec(1, depth, 2, 8))
    out += [TreeSpec(0, 8, 2, 8), TreeSpec(2, 8, 2, 32)]
    chosen = [TreeSpec(**e["constexprs"]) for e in launch_plans().proof_selection(KERNEL[1]).values()]
    return out + [sp for sp in chosen if sp not in out]


# the box a counterexample is replayed in (the prefix fill's too)
LIMITS = {"bs": (1, 3), "topk": (1, 4), "depth": (1, 4), "n": (1, 8), "C": (1, 24), "grid": (1, 3)}


# --- host contract and tensor models (shared with the prefix fill) -------------------------------

def tree_common(hyps, G, plan, block, scalars, **contracts) -> list:
    """Preconditions shared by the tree kernels (into ``hyps``); returns the launch contracts."""
    hyps.update(labelled(spec.tree_shape_ok(K, D, n)))
    hyps.update(labelled(spec.context_ok(C)))
    hyps.update(labelled(spec.int32_arg_ok(C, "max_context_len")))
    hyps.update(int32_args(scalars))
    # no int32 grid contract: the kernels widen the program id (pid.to(tl.int64) * BLOCK)
    return launch_contracts(batch_nonempty=(bs >= 1, "the launch wrapper returns before launching an empty batch"),
                      grid_is_cdiv=(G == plan.grid[0], f"the wrapper launches cdiv(bs, {block}) programs"),
                      **contracts)


def tree_tensors(functions, hyps, mode, mask_dtype):
    sel = z3.Function("selected_index", z3.IntSort(), z3.IntSort())
    pl = z3.Function("parent_list", z3.IntSort(), z3.IntSort())
    for f in (sel, pl):
        hyps.update(content_preconditions(functions, f, f"{f.name()}_int64", lambda i, v: z3.And(v >= INT64.lo(), v < INT64.hi())))
    requests = model.per_request(model.seq_len_conds, size=bs)
    hyps.update(requests)
    register_function(functions, seq_len, seq_len_schema(requests))
    register_function(functions, P, prefix_schema(bs))
    pl_width, sel_width = z3.Ints("pl_width sel_width")
    return {
        "parent_list_ptr": TensorModel("parent_list", bs * pl_width, INT64, pl),
        "selected_index_ptr": TensorModel("selected_index", bs * sel_width, INT64, sel),
        "seq_lens_ptr": TensorModel("seq_lens", bs, INT64, seq_len),
        "prefix_ptr": TensorModel("prefix", bs, INT64, P),
        "tree_mask_ptr": TensorModel("tree_mask", spec.mask_batch_numel(mode, bs, n, P(bs)), DTYPES[mask_dtype],
                                     written=True),
        "positions_ptr": TensorModel("positions", bs * n, INT64, written=True),
        "retrive_index_ptr": TensorModel("retrive_index", bs * n, INT64, written=True),
        "next_token_ptr": TensorModel("retrive_next_token", bs * n, INT64, written=True),
        "next_sibling_ptr": TensorModel("retrive_next_sibling", bs * n, INT64, written=True),
    }, pl_width, sel_width


def mask_region(mode):
    base = lambda r: spec.mask_request_base(mode, r, n, P(r))

    def ordering(ra, rb, k):
        return [proof_core.instantiate(spec_lemmas.prefix_monotone(), rb, ra + 1), mul_mono(P(ra + 1), P(rb), n),
                mul_mono(ra + 1, rb, n * n), mul_mono(ra + 1, rb, n)]
    return Region(lambda a: a.env["b"].e, lambda a: z3.IntVal(0), lambda r, k: base(r), lambda r, k: base(r + 1),
                  lambda k: z3.IntVal(0), lambda k: spec.mask_batch_numel(mode, bs, n, P(bs)), ordering,
                  lambda ka, kb: [])


def _token_region():
    return Region(lambda a: a.env["b"].e, lambda a: z3.IntVal(0),
                  lambda r, k: spec.token_cell(r, 0, n), lambda r, k: spec.token_cell(r + 1, 0, n),
                  lambda k: z3.IntVal(0), lambda k: bs * n, lambda ra, rb, k: [mul_mono(ra + 1, rb, n)],
                  lambda ka, kb: [])


def tree_lemmas(b, pl_width, sel_width):
    s = seq_len(b)
    return [proof_core.instantiate(spec_lemmas.prefix_monotone(), bs, b + 1), proof_core.instantiate(spec_lemmas.prefix_monotone(), bs, b),
            mul_mono(P(b + 1), P(bs), n), mul_mono(b + 1, bs, n * n), mul_mono(b + 1, bs, n),
            mul_mono(LANES[1], n - 1, s + n), mul_mono(b + 1, bs, pl_width), mul_mono(b + 1, bs, sel_width)]


def symbolic_run(sp: TreeSpec, *, transform=None, host: dict | None = None) -> Run:
    host = host or {}
    mode = spec.TreeMaskMode(sp.MODE)
    functions: dict = {}
    hyps: dict = {}
    tensors, pl_width, sel_width = tree_tensors(functions, hyps, mode, sp.mask_dtype)
    G = z3.Int("grid")
    scalars = {"bs": int32_scalar("bs", bs), "topk": int32_scalar("topk", K), "pl_width": int32_scalar("pl_width", pl_width),
               "sel_width": int32_scalar("sel_width", sel_width), "n": int32_scalar("n", n)}
    # the wrapper's own launch plan, on Z3 terms: its grid, widths and walk bound are the contracts
    block = block_b(sp)
    plan = launch_plans().tree_plan(tensors, bs=bs, topk=K, depth=D, n=n, mode=mode, block_b=block,
                                    nodes=sp.NODES)
    check_plan(KERNEL[1], plan, scalars, tensors)
    contracts = {
        "DEPTH_is_walk_max_steps": (host["depth_hyp"](D) if "depth_hyp" in host else plan.constexprs["DEPTH"] == sp.DEPTH,
                                    f"the wrapper specializes DEPTH = spec.walk_max_steps(D) (here {sp.DEPTH})"),
        "pl_width_is_spec": (pl_width == plan.args["pl_width"],
                             "the wrapper passes pl_width = spec.parent_list_width(K, D)"),
        "sel_width_is_spec": (sel_width == plan.args["sel_width"],
                              "the wrapper passes sel_width = spec.selected_index_width(n)")}
    if mode is spec.TreeMaskMode.QLEN_ONLY_BITPACKING:
        hyps.update(labelled(spec.bitpack_ok(n)))
        contracts["mask_item_bits"] = (spec.bitpack_item_bits(n) == DTYPES[sp.mask_dtype].bits,
                                       f"the wrapper allocates {sp.mask_dtype} mask items for n <= {sp.NODES}")
    axioms = tree_common(hyps, G, plan, block, scalars, **contracts)
    hyps.update(labelled(spec.lane_bound_ok(n, sp.NODES, "NODES")))
    if "nodes_lanes" in host:  # a mutant's host with fewer node lanes than nodes
        hyps["lane_bound_NODES"] = host["nodes_lanes"](n, sp.NODES)
    ex = Executor(kernel_path(KERNEL[0]), KERNEL[1], constexprs=state_block_b(sp, hyps, dict(plan.constexprs, DEPTH=sp.DEPTH)),
                  scalars=scalars, tensors=tensors, grid=[G], transform=transform,
                  oracle=make_oracle(hyps, functions, axioms))
    res = ex.run()
    res.block, res.extra_owner, res.batch = block, False, bs
    functions.update(res.functions)
    regions = {"tree_mask": mask_region(mode)}
    for name in ("positions", "retrive_index", "retrive_next_token", "retrive_next_sibling"):
        regions[name] = _token_region()
    run_lemmas = list(res.side_proofs)
    for e in {a.env["b"].e.get_id(): a.env["b"].e for a in res.accesses if "b" in a.env}.values():
        run_lemmas += tree_lemmas(e, pl_width, sel_width)
    pid = res.pid[0]
    report = {"bs": bs, "topk": K, "depth": D, "n": n, "C": C, "grid": G, "pid": pid, **block_b_report(sp)}
    run = Run(sp.name, sp.label, res, hyps, functions, tensors, regions,
              pid * block, pid * block + block, report, run_lemmas + axioms, axioms)
    run.spec = sp
    return run


# --- the walk bound (WALK-BOUNDED) ---------------------------------------------------------

def walk_obligations(run: Run) -> list:
    """The walk is bounded: every stored position is seq_len[b] + depth with
    0 <= depth <= spec.walk_max_steps(D) (a cycle in a malformed tree cannot push it further)."""
    out = []
    for i, a in enumerate(run.result.accesses):
        if a.kind != "store" or a.tensor.name != "positions":
            continue
        b = a.env["b"].e
        v = a.value.e
        goal = z3.And(seq_len(b) <= v, v <= seq_len(b) + spec.walk_max_steps(D))
        out.append(Obligation(f"walk-bounded-positions@{a.line}#{i}", "value", a.line,
                              "stored position = seq_len + depth with depth <= walk_max_steps(D)",
                              run.base_hyps(a.path, a.shape, a.mask), goal, list(run.lemmas),
                              replay=("output", "positions")))
    return out


# --- footprint maps -----------------------------------------------------------------------------

def footprint_obligations(run) -> list:
    mode = spec.TreeMaskMode(run.spec.MODE)
    block = block_b(run.spec)
    out = []
    fb, ft, fj = z3.Ints("cell_b cell_t cell_j")
    for i, a in stores_of(run):
        b = lane_term(a, "b", 0)
        name = a.tensor.name
        if name == "tree_mask":
            if mode is spec.TreeMaskMode.QLEN_ONLY_BITPACKING:
                t, j = lane_term(a, "node2", 1), z3.IntVal(0)
                cols = spec.mask_tree_columns(mode, n)
            else:
                t, j = lane_term(a, "t3", 2), lane_term(a, "c3", 2)
                cols = spec.mask_tree_columns(mode, n)
            dom = lambda b_, t_, j_: z3.And(0 <= b_, b_ < bs, 0 <= t_, t_ < n, 0 <= j_, j_ < cols)
            cell = lambda b_, t_, j_: spec.mask_tree_cell(mode, b_, t_, j_, n, seq_len(b_), P(b_))
            out.append(sound(run, a, i, f"spec.mask_tree_cell({mode.name}, b, t, j, ...) of its (b, t, j)",
                             dom(b, t, j), cell(b, t, j)))
            bind = request_lane(run, fb, block) + [(LANES[1], ft)]
            if mode is not spec.TreeMaskMode.QLEN_ONLY_BITPACKING:
                bind.append((LANES[2], fj))
            out.append(cover(run, a, i, "spec.mask_tree_cell(b < bs, t < n, j < mask_tree_columns)",
                             (fb, ft, fj), dom(fb, ft, fj), bind, [(b, fb), (t, ft), (j, fj)]))
        else:
            t = lane_term(a, "node2", 1)
            dom = lambda b_, t_: z3.And(0 <= b_, b_ < bs, 0 <= t_, t_ < n)
            value = spec.token_cell(b, t, n) if name == "retrive_index" else None
            out.append(sound(run, a, i, "spec.token_cell(b, t, n) of its (b, t)"
                             + (" with that value" if value is not None else ""),
                             dom(b, t), spec.token_cell(b, t, n), value))
            out.append(cover(run, a, i, "spec.token_cell(b < bs, t < n)", (fb, ft), dom(fb, ft),
                             request_lane(run, fb, block) + [(LANES[1], ft)], [(b, fb), (t, ft)]))
    return out


# --- concrete replay: the counterexample launched through tree_plan ----------------------------

def _tree_inputs(conc):
    import torch

    bs_, k, d, n_ = conc["bs"], conc["topk"], conc["depth"], conc["n"]
    c = conc["_contents"]
    seq = [max(0, c["seq_len"](i)) for i in range(bs_)]
    sel_w, pl_w = spec.selected_index_width(n_), spec.parent_list_width(k, d)
    sel = torch.tensor([c["selected_index"](i) for i in range(bs_ * sel_w)], dtype=torch.int64).reshape(bs_, sel_w)
    pl = torch.tensor([c["parent_list"](i) for i in range(bs_ * pl_w)], dtype=torch.int64).reshape(bs_, pl_w)
    return bs_, k, d, n_, seq, sel, pl


def replay(sp, conc: dict, plant=None, host=None) -> Replay:
    """The counterexample's trees (validated as the wrapper validates them), launched on the
    kernel (or ``plant``'s version of it) through ``tree_plan`` into the buffers the wrapper
    allocates, without the prefix fill; compared with the reference's five outputs."""
    import torch

    from specbound import reference
    from specbound.kernels import plan as concrete_plans
    from specbound.kernels.testing import signed_view
    from specbound.reference import validation

    bs_, k, d, n_, seq, sel, pl = _tree_inputs(conc)
    mode = spec.TreeMaskMode(sp.MODE)
    inputs = {"bs": bs_, "topk": k, "depth": d, "n": n_, "seq_lens": seq, "selected_index": sel.tolist(),
              "parent_list": pl.tolist(), "mode": mode.name, "spec": sp.label,
              **block_b_inputs(sp, conc)}
    seq_t = torch.tensor(seq, dtype=torch.int64)
    args = validation.validate_build_tree_args(pl, sel, seq_t, topk=k, depth=d, num_draft_tokens=n_, mode=mode,
                                               fill_prefix_mask=False)
    outs = (args.tree_mask, args.positions, args.retrive_index, args.retrive_next_token, args.retrive_next_sibling)
    plan = concrete_plans.tree_plan(
        {"parent_list_ptr": args.parent_list, "selected_index_ptr": args.selected_index,
         "seq_lens_ptr": args.seq_lens, "prefix_ptr": torch.tensor(args.prefix[:-1], dtype=torch.int64),
         "tree_mask_ptr": args.tree_mask, "positions_ptr": args.positions, "retrive_index_ptr": args.retrive_index,
         "next_token_ptr": args.retrive_next_token, "next_sibling_ptr": args.retrive_next_sibling},
        bs=bs_, topk=k, depth=d, n=n_, mode=sp.MODE, block_b=concrete_block_b(sp, conc), nodes=sp.NODES)
    fn = kernel_of(*KERNEL, plant)

    def compare():
        want = reference.build_tree(pl, sel, seq_t, topk=k, depth=d, num_draft_tokens=n_, mode=mode,
                                    fill_prefix_mask=False)
        names = ("tree_mask", "positions", "retrive_index", "retrive_next_token", "retrive_next_sibling")
        for name, ours, theirs in zip(names, outs, want):
            if not torch.equal(signed_view(ours), signed_view(theirs)):
                return f"{name} differs from the reference"
        return None
    return replays.run(lambda: plan.launch(fn), inputs, kernel=f"{KERNEL[1]}{' (planted)' if plant else ''}",
                       compare=compare)


# --- mutants -------------------------------------------------------------------------------------

MUTANTS = (
    KernelMutant("MUT-POSITIONS-INT32",
                 "positions computed in int32 (seq_len + depth): a request with seq_len + depth >= 2^31 gets a "
                 "negative position, while every offset stays int64 and in bounds (an int32 wrap); replayed "
                 "in the QLEN_ONLY layout, whose mask does not grow with seq_len, where the interpreter's "
                 "int32 overflow check fires (compiled, the position would silently wrap)", "tree", "NO-WRAP",
                 Plant(*KERNEL, (("s2 + depth", "s2.to(tl.int32) + depth.to(tl.int32)"),)),
                 expect=("wrap", "output"),
                 spec_override=lambda sp: TreeSpec(1, sp.DEPTH, sp.BLOCK_B, sp.NODES),
                 limits={"C": (1, 2**31 - 1)}, content_box={"seq_len": (0, 2**31 - 1), "P": (0, 2**33)}),
    KernelMutant("MUT-NODES-LANES-BELOW-N",
                 "NODES lane bound smaller than num_draft_tokens, its device_assert removed: nodes past NODES "
                 "get no mask row, position or links (a truncated tree; every access in bounds)", "tree",
                 "NO-TRUNCATION", Plant(*KERNEL, drop="device_assert(n <= NODES"),
                 host={"nodes_lanes": lambda n, lanes: z3.And(lanes < n, n <= 2 * lanes)},
                 expect=("output",), limits={"n": (1, 16)}),
    swap(KERNEL, "MUT-TREE-PROGRAM-STRIDE",
         "program p starts at request p*(BLOCK_B - 1): neighbouring programs both build the request between "
         "them (a race) and the last request may be left out", "tree", "RACE-FREE",
         "pid.to(tl.int64) * BLOCK_B", "pid.to(tl.int64) * (BLOCK_B - 1)", expect=("race", "output")),
    swap(KERNEL, "MUT-UNBOUNDED-WALK",
         "the root-ward walk runs DEPTH + 1 steps (bound larger than D): a cycle pushes depth past D", "tree", "WALK-BOUNDED",
         "tl.static_range(DEPTH)", "tl.static_range(DEPTH + 1)", fuzz_theorem="VM-WALK-BOUNDED", fuzz_skip=""),
    swap(KERNEL, "MUT-SEARCH-PAST-ROW",
         "parent search scans n entries of the (n-1)-entry selected_index row (sglang's CUDA kernel)",
         "tree", "IN-BOUNDS", "node2 < sel_width", "node2 < n", expect=("oob",), fuzz_theorem="VM-WALK-CONFINED",
         fuzz_skip=""),
    swap(KERNEL, "MUT-MASK-ROW-STRIDE",
         "FULL_MASK tree columns stored with row stride seq_len + n - 1 instead of spec.mask_row_width "
         "(seq_len + n): every cell stays inside its request's region (so in bounds and race free), but "
         "rows overlap and the last cells are never written; only the footprint obligation sees it",
         "tree", "FOOTPRINT", "(s3 + n) * t3", "(s3 + n - 1) * t3"),
)

# The QLEN_ONLY and BITPACKING layouts store their mask with code of their own: each property
# of each layout refutes a fault of its own, on the first specialization of that layout.
QLEN, BITPACK = TreeSpec(1, 1, 1, 1).name, TreeSpec(2, 1, 1, 8).name
QLEN_CELL, BITPACK_CELL = "b3 * n * n + n * t3 + c3", "b2 * n + 1 * node2 + 0"
BITPACK_STORE = "tl.store(tree_mask_ptr + cell, item.to(tree_mask_ptr.dtype.element_ty), mask=node_ok2)"
ASSERT_NODES = "device_assert(n <= NODES"
# the launch rounds NODES down to a power of two (the largest <= n, not the smallest >= n)
ROUNDED_DOWN = {"nodes_lanes": lambda n, lanes: z3.And(lanes < n, n < 2 * lanes)}
BIG_SEQ_LEN = {"limits": {"C": (1, 2**31 - 1)}, "content_box": {"seq_len": (0, 2**31 - 1), "P": (0, 2**33)}}

LAYOUT_MUTANTS = (
    swap(KERNEL, "MUT-QLEN-ROW-STRIDE-NODES",
         "QLEN_ONLY rows stored with stride NODES (the padded lane count) instead of n: for n < NODES the "
         "last request's rows run past the mask", "tree", "IN-BOUNDS", QLEN_CELL, "b3 * n * n + NODES * t3 + c3",
         expect=("oob",), layouts=(QLEN,)),
    swap(KERNEL, "MUT-QLEN-POSITIONS-STORED-INT32",
         "positions narrowed to int32 on the store ((seq_len + depth).to(tl.int32), a kernel written for an "
         "int32 positions buffer): seq_len + depth >= 2^31 is stored negative, the QLEN_ONLY mask untouched",
         "tree", "NO-WRAP", "s2 + depth", "(s2 + depth).to(tl.int32)", expect=("wrap", "output"),
         layouts=(QLEN,), **BIG_SEQ_LEN),
    KernelMutant("MUT-QLEN-NODES-ROUNDED-DOWN",
                 "QLEN_ONLY launched with NODES rounded down to a power of two (8 lanes for n = 9..15), its "
                 "device_assert removed: nodes past NODES get no mask row, position or links", "tree",
                 "NO-TRUNCATION", Plant(*KERNEL, drop=ASSERT_NODES), host=ROUNDED_DOWN, expect=("output",),
                 limits={"n": (1, 16)}, layouts=(QLEN,)),
    swap(KERNEL, "MUT-QLEN-REQUEST-BASE-ROW",
         "QLEN_ONLY request base b*n (one row's width) instead of b*n*n: requests overlap, and two programs "
         "store one cell", "tree", "RACE-FREE", QLEN_CELL, "b3 * n + n * t3 + c3", expect=("race", "output"),
         layouts=(QLEN,)),
    swap(KERNEL, "MUT-QLEN-MASK-TRANSPOSED",
         "QLEN_ONLY mask stored transposed (cell b*n*n + n*j + t for row t, column j): the same cells, in "
         "bounds and race free, but each row holds a column; only the footprint obligation sees it",
         "tree", "FOOTPRINT", QLEN_CELL, "b3 * n * n + n * c3 + t3", layouts=(QLEN,)),
    swap(KERNEL, "MUT-QLEN-POSITIONS-PAST-DEPTH",
         "positions one past (seq_len + depth + 1, the verified token counted twice): a node at depth D is "
         "placed past seq_len + walk_max_steps(D)", "tree", "WALK-BOUNDED", "s2 + depth", "s2 + depth + 1",
         layouts=(QLEN,)),
    swap(KERNEL, "MUT-BITPACK-ITEM-PAST-ROW",
         "BITPACKING item index off by one (b*n + t + 1): the last request's last row writes one item past the "
         "mask", "tree", "IN-BOUNDS", BITPACK_CELL, "b2 * n + 1 * node2 + 1", expect=("oob",), layouts=(BITPACK,)),
    swap(KERNEL, "MUT-BITPACK-ITEM-UINT8",
         "BITPACKING items narrowed to uint8 whatever the item width (a kernel written for n <= 8): with "
         "uint16 items (n = 9..16) the bits of nodes 8.. are dropped (a cast that wraps); run at NODES=16",
         "tree", "NO-WRAP", "item.to(tree_mask_ptr.dtype.element_ty)", "item.to(tl.uint8)",
         spec_override=lambda sp: TreeSpec(2, sp.DEPTH, sp.BLOCK_B, 16), limits={"n": (1, 16)},
         layouts=(BITPACK,)),
    KernelMutant("MUT-BITPACK-NODES-ROUNDED-DOWN",
                 "BITPACKING launched with NODES rounded down to a power of two (4 lanes for n = 5..7, uint8 "
                 "items), its device_assert removed: nodes past NODES get no item, position or links; run "
                 "at NODES=4", "tree", "NO-TRUNCATION", Plant(*KERNEL, drop=ASSERT_NODES), host=ROUNDED_DOWN,
                 expect=("output",), spec_override=lambda sp: TreeSpec(2, sp.DEPTH, sp.BLOCK_B, 4),
                 layouts=(BITPACK,)),
    swap(KERNEL, "MUT-BITPACK-REQUEST-BASE-SHORT",
         "BITPACKING request base b*(n - 1) (selected_index's row width for the mask's): a request's last "
         "item is the next request's first, and two programs store it", "tree", "RACE-FREE", BITPACK_CELL,
         "b2 * sel_width + 1 * node2 + 0", expect=("race", "output"), layouts=(BITPACK,)),
    swap(KERNEL, "MUT-BITPACK-ROOT-ITEM-SKIPPED",
         "BITPACKING skips the root row's item (always bit 0, assumed preset): every store is in bounds and "
         "its own, but item (b, 0) is never written; only the coverage obligation sees it", "tree",
         "FOOTPRINT", BITPACK_STORE, BITPACK_STORE.replace("mask=node_ok2", "mask=node_ok2 & (node2 >= 1)"),
         layouts=(BITPACK,)),
    swap(KERNEL, "MUT-BITPACK-WALK-NODES-STEPS",
         "the walk runs NODES steps (one per bit of the item) instead of D: a cycle pushes depth past D",
         "tree", "WALK-BOUNDED", "tl.static_range(DEPTH)", "tl.static_range(NODES)", layouts=(BITPACK,)),
)

VERIFIER = KernelVerifier(
    "tree", *KERNEL, symbolic_run,
    ("IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE", "FOOTPRINT", "WALK-BOUNDED"),
    # DEPTH = 8: the walk unrolls eight one-hot steps (kept cheap by Executor.define)
    default_specs=(TreeSpec(0, 3, 2, 8), TreeSpec(1, 3, 2, 8), TreeSpec(2, 3, 2, 8), TreeSpec(1, 8, 2, 8)),
    all_specs=all_specs, limits=LIMITS, replay=replay, footprint=footprint_obligations,
    mutants=MUTANTS + LAYOUT_MUTANTS,
    values=walk_obligations)
