"""Everything the verifier knows about ``draft_kv_kernel`` (``kernels/draft_kv.py``): its
specializations, host contract and tensor models (the launch plan ``kv_plan`` on Z3 terms),
its store regions and lemmas, its footprint maps, its mutants, and its concrete replay
launch.  Registered in :mod:`specbound.proofs.symexec.verifiers`.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from specbound import spec
from specbound.proofs import core as proof_core
from specbound.proofs import lemmas as spec_lemmas
from specbound.proofs import model
from specbound.proofs.model import C, D, K, P, labelled, num_seqs, page, seq_len, width

from .. import lemmas as symexec_lemmas
from ..footprint import cover, lane_term, loop_var, request_lane, sound, stores_of
from ..interp import Executor
from ..kernel_files import kernel_path
from ..models import (KernelVerifier, Region, Run, check_plan, content_preconditions, launch_contracts, int32_args, mul_mono,
                      prefix_schema, register_function, int32_scalar, seq_len_schema, launch_plans, make_oracle)
from ..models import block_b, block_b_inputs, block_b_label, block_b_report, concrete_block_b, covers, state_block_b
from ..plant import KernelMutant, Plant, kernel_of, swap
from specbound.replay import Replay
from specbound import replay as replays
from ..values import DTYPES, INT64, LANES, TensorModel

KERNEL = ("draft_kv", "draft_kv_kernel")   # specbound.kernels.<module>, the @triton.jit function


# --- specializations --------------------------------------------------------------------------

@dataclass(frozen=True)
class KvSpec:
    """One specialization, or (``BLOCK_B`` None) every BLOCK_B of
    ``plan.symbolic_block_b_values`` at once (``models.state_block_b``)."""

    BLOCK_B: int | None
    PAIRS: int
    STEPS: int
    BLOCK_C: int
    indices_dtype: str = "int64"
    indptr_dtype: str = "int64"
    name = "KV"   # the kernel part of its theorem ids (KERNEL-<name>-<PROPERTY>[<label>])

    @property
    def constexprs(self) -> dict:
        return {"BLOCK_B": self.BLOCK_B, "PAIRS": self.PAIRS, "STEPS": self.STEPS, "BLOCK_C": self.BLOCK_C,
                "INDICES": self.indices_dtype, "INDPTR": self.indptr_dtype}

    @property
    def label(self):
        return launch_plans().specialization(KERNEL[1], {**self.constexprs, "BLOCK_B": block_b_label(self)})[1]

    covers = covers


def all_specs() -> list:
    """Each power-of-two lane bound up to 1024, both dtypes of the outputs, several tile sizes;
    then the serving envelope's launches with BLOCK_B symbolic (``plan.proof_selection``)."""
    out = []
    for pairs in (1 << i for i in range(11)):
        steps = min(pairs, 8)
        out.append(KvSpec(max(1, 4096 // (pairs * 128)) if pairs < 32 else 1, pairs, steps, 128))
    for steps in (1, 2, 4, 8, 16):
        out.append(KvSpec(2, max(steps, 16), steps, 16, "int32", "int32"))
    for block_c in (16, 256, 1024):
        out.append(KvSpec(4, 8, 4, block_c, "int64", "int32"))
    chosen = [from_constexprs(e["constexprs"]) for e in launch_plans().proof_selection(KERNEL[1]).values()]
    return out + [sp for sp in chosen if sp not in out]


def from_constexprs(c: dict) -> KvSpec:
    """The specialization of a launch's constexprs (``plan.specialization``'s keys)."""
    return KvSpec(c["BLOCK_B"], c["PAIRS"], c["STEPS"], c["BLOCK_C"], c["INDICES"], c["INDPTR"])


# the box a counterexample is replayed in
LIMITS = {"num_seqs": (1, 4), "topk": (1, 4), "num_steps": (1, 4), "page_size": (1, 4), "C": (1, 24),
          "width": (0, 400), "indptr_stride": (1, 40), "r2t_width": (1, 200), "pool_rows": (1, 6), "grid": (1, 4)}


# --- host contract and tensor models ------------------------------------------------------------

def symbolic_run(sp: KvSpec, *, transform=None, host: dict | None = None) -> Run:
    """Symbolic run of ``draft_kv_kernel``.  ``host`` overrides parts of the launch model
    (a mutant's host): ``width_hyp`` (replaces the capacity check), ``steps_lanes``,
    ``room`` (every request also has room for its draft tokens)."""
    host = host or {}
    indptr_stride, r2t_width, pool_rows, G = z3.Ints("indptr_stride r2t_width pool_rows grid")
    r2t_s0, r2t_s1 = z3.Ints("r2t_stride0 r2t_stride1")
    scalars = {"num_seqs": int32_scalar("num_seqs", num_seqs), "topk": int32_scalar("topk", K),
               "num_steps": int32_scalar("num_steps", D), "page_size": int32_scalar("page_size", page),
               "width": int32_scalar("width", width), "indptr_stride": int32_scalar("indptr_stride", indptr_stride),
               "r2t_stride0": int32_scalar("r2t_stride0", r2t_s0), "r2t_stride1": int32_scalar("r2t_stride1", r2t_s1)}
    functions: dict = {}
    pool_row = z3.Function("pool_row", z3.IntSort(), z3.IntSort())
    r2t = z3.Function("req_to_token", z3.IntSort(), z3.IntSort())
    r2t_dt = DTYPES["int32"] if sp.indices_dtype == "int32" else DTYPES[host.get("r2t_dtype", "int64")]
    per_request = [lambda i: {"req_to_token_row_covers_reads": spec.kv_req_to_token_span(seq_len(i), K, D, page)
                              <= r2t_width}]
    if host.get("room"):  # a mutant's host that also assumes room for the draft tokens
        per_request.append(lambda i: {"draft_room": seq_len(i) + D <= C})
    requests = model.per_request(model.seq_len_conds, *per_request, size=num_seqs)
    hyps = labelled(spec.kv_shape_ok(K, D, page))
    hyps.update(labelled(spec.context_ok(C)))
    hyps.update(requests)
    hyps.update(content_preconditions(functions, pool_row, "pool_row_in_req_to_token",
                                      lambda i, v: z3.And(0 <= v, v < pool_rows), requests=num_seqs))
    hyps.update(content_preconditions(functions, r2t, "req_to_token_value", lambda i, v: z3.And(v >= r2t_dt.lo(), v < r2t_dt.hi())))
    register_function(functions, seq_len, seq_len_schema(requests))
    register_function(functions, P, prefix_schema(num_seqs))
    tensors = {
        "req_pool_indices_ptr": TensorModel("req_pool_indices", num_seqs, INT64, pool_row),
        "req_to_token_ptr": TensorModel("req_to_token", pool_rows * r2t_width, r2t_dt, r2t),
        "seq_lens_ptr": TensorModel("seq_lens", num_seqs, INT64, seq_len),
        "prefix_ptr": TensorModel("prefix", num_seqs, INT64, P),
        "kv_indices_ptr": TensorModel("kv_indices", D * width, DTYPES[sp.indices_dtype], written=True),
        "kv_indptr_ptr": TensorModel("kv_indptr", D * indptr_stride, DTYPES[sp.indptr_dtype], written=True),
    }
    plan = launch_plans().kv_plan(tensors, num_seqs=num_seqs, topk=K, num_steps=D, page_size=page, width=width,
                                  indptr_stride=indptr_stride, r2t_stride0=r2t_s0, r2t_stride1=r2t_s1,
                                  block_b=block_b(sp), pairs=sp.PAIRS, steps=sp.STEPS, block_c=sp.BLOCK_C)
    check_plan(KERNEL[1], plan, scalars, tensors)
    # no int32 grid contract: the kernels widen the program id (pid.to(tl.int64) * BLOCK)
    axioms = launch_contracts(
        batch_nonempty=(num_seqs >= 1, "the launch wrapper returns before launching an empty batch"),
        grid_is_cdiv=(G == plan.grid[0], f"the wrapper launches cdiv(num_seqs, {block_b_label(sp)}) programs"),
        indptr_row_width=(indptr_stride >= spec.draft_branches(num_seqs, K) + 1,
                          "the wrapper allocates kv_indptr rows of num_seqs*K + 1 entries"),
        req_to_token_contiguous=(z3.And(r2t_s0 == r2t_width, r2t_s1 == 1, pool_rows >= 1),
                                 "the wrapper passes req_to_token's strides (a contiguous, non-empty 2-D tensor)"))
    if "width_hyp" in host:
        hyps["host_width"] = host["width_hyp"](num_seqs, K, C, D, width)
    else:
        hyps["draft_kv_capacity_ok"] = spec.draft_kv_capacity_ok(P(num_seqs), K, num_seqs, D, width)
    hyps.update(labelled(spec.lane_bound_ok(D * K, sp.PAIRS, "PAIRS")))
    steps_lanes = host.get("steps_lanes", lambda d, lanes: d <= lanes)
    hyps["lane_bound_STEPS"] = steps_lanes(D, sp.STEPS)
    if sp.indptr_dtype == "int32":
        hyps.update(labelled(spec.int32_alloc_ok(
            spec.draft_kv_indices_used_len(P(num_seqs), K, spec.draft_branches(num_seqs, K), D), "used_len")))
    hyps.update(int32_args(scalars))
    hyps.update(labelled(spec.int32_arg_ok(C, "max_context_len")))
    ex = Executor(kernel_path(KERNEL[0]), KERNEL[1], constexprs=state_block_b(sp, hyps, plan.constexprs),
                  scalars=scalars, tensors=tensors, grid=[G], transform=transform,
                  oracle=make_oracle(hyps, functions, axioms))
    res = ex.run()
    block = block_b(sp)
    res.block, res.extra_owner, res.batch = block, True, num_seqs
    functions.update(res.functions)

    def seg(r, k):  # spec.kv_segment_start of branch (r, 0) in row k - 1
        return (k - 1) * width + spec.kv_segment_start(P(r), r, 0, K, k, 0)

    def owner_b(a):
        return a.env["b"].e

    def key_it(a):
        return a.env["it2"].e

    def indptr_owner(a):
        return z3.IntVal(-1) if "z1" not in a.env else a.env["b"].e

    def indptr_key(a):
        return a.env["it2"].e if "z1" in a.env else LANES[0] + 1  # entry 0 of row i: key i + 1
    stores = [a for a in res.accesses if a.kind == "store" and a.tensor.name == "kv_indptr"]
    # The first kv_indptr store (entries z + 1) runs where z1 is bound; the entry-0 store too,
    # so tell them apart by their place in the source.
    entry0_line = max(a.line for a in stores) if stores else -1

    def indptr_owner2(a):
        return z3.IntVal(-1) if a.line == entry0_line else a.env["b"].e

    def indptr_key2(a):
        # entry 0 of row i: key i + 1 (i = arange(0, STEPS); a constant 0 when STEPS = 1)
        return a.env["i"].e + 1 if a.line == entry0_line else a.env["it2"].e

    regions = {
        "kv_indices": Region(
            owner_b, key_it, lambda r, k: seg(r, k), lambda r, k: seg(r + 1, k),
            lambda k: (k - 1) * width, lambda k: k * width,
            lambda ra, rb, k: [proof_core.instantiate(spec_lemmas.prefix_monotone(num_seqs), rb, ra + 1),
                               mul_mono(P(ra + 1), P(rb), K), mul_mono(ra + 1, rb, k * K)],
            lambda ka, kb: [mul_mono(ka, kb - 1, width)], 0, lambda k: z3.And(1 <= k, k <= D)),
        "kv_indptr": Region(
            indptr_owner2, indptr_key2,
            lambda r, k: (k - 1) * indptr_stride + r * K + 1, lambda r, k: (k - 1) * indptr_stride + (r + 1) * K + 1,
            lambda k: (k - 1) * indptr_stride, lambda k: k * indptr_stride,
            lambda ra, rb, k: [mul_mono(ra + 1, rb, K)],
            lambda ka, kb: [mul_mono(ka, kb - 1, indptr_stride)], -1, lambda k: z3.And(1 <= k, k <= D)),
    }
    pid = res.pid[0]
    run_lemmas = list(res.side_proofs)
    b_terms = {a.env["b"].e.get_id(): a.env["b"].e for a in res.accesses if "b" in a.env and a.kind == "store"}
    for b in b_terms.values():
        # the request's req_to_token row ends inside the pool: (row + 1)*width <= rows*width
        run_lemmas += kv_lemmas(b, LANES[1]) + [mul_mono(pool_row(b) + 1, pool_rows, r2t_width)]
    report = {"num_seqs": num_seqs, "topk": K, "num_steps": D, "page_size": page, "C": C, "width": width,
              "indptr_stride": indptr_stride, "r2t_width": r2t_width, "pool_rows": pool_rows, "grid": G,
              "pid": pid, **block_b_report(sp)}
    run = Run(sp.name, sp.label, res, hyps, functions, tensors, regions,
              z3.If(pid == 0, z3.IntVal(-1), pid * block), pid * block + block, report,
              run_lemmas + axioms, axioms)
    run.spec = sp
    return run


def kv_lemmas(b, q):
    """Instances for branch (b, t = q mod K) in row iters = q div K + 1: the segment ends
    within used_len(iters) <= used_len(num_steps) <= width."""
    it, t, s = q / K + 1, q % K, seq_len(b)
    return [symexec_lemmas.at(symexec_lemmas.div_lt, q, K, D), symexec_lemmas.at(symexec_lemmas.div_mod_range, q, K),
            mul_mono(t, K - 1, s + it), proof_core.instantiate(spec_lemmas.prefix_monotone(num_seqs), num_seqs, b + 1),
            mul_mono(P(b + 1), P(num_seqs), K), mul_mono(b + 1, num_seqs, it * K),
            mul_mono(it, D, num_seqs * K), mul_mono(it, D, width),
            symexec_lemmas.at(symexec_lemmas.kv_segment_in_row, P(b), P(num_seqs), b, num_seqs, t, it, s, K, D, width),
            symexec_lemmas.at(symexec_lemmas.kv_extension_read_in_row, s, t, LANES[2], K, D, page)]


# --- footprint maps -----------------------------------------------------------------------------

def footprint_obligations(run) -> list:
    block, block_c = block_b(run.spec), run.spec.BLOCK_C
    width, stride = run.report["width"], run.report["indptr_stride"]
    out = []
    fi, fb, ft, fc, fz = z3.Ints("cell_iters cell_b cell_t cell_c cell_z")
    pair = K * (fi - 1) + ft        # the pair lane of (iters, t): q = (iters - 1)*K + t
    pair_lemmas = [symexec_lemmas.at(symexec_lemmas.div_unique, fi - 1, ft, K), symexec_lemmas.at(symexec_lemmas.div_unique, fi - 1, ft, K),
                   mul_mono(fi, D, K)]
    branch = lambda it_, b_, t_: z3.And(1 <= it_, it_ <= D, 0 <= b_, b_ < num_seqs, 0 <= t_, t_ < K)
    seg = lambda it_, b_, t_: spec.kv_segment_start(P(b_), b_, t_, K, it_, seq_len(b_))
    # req_to_token[row, pos], row-major with the model's strides (width, 1)
    r2t, pool_row, r2t_width = run.functions["req_to_token"][0], run.functions["pool_row"][0], run.report["r2t_width"]
    token = lambda b_, pos: r2t(pool_row(b_) * r2t_width + pos)
    indptr = [(i, a) for i, a in stores_of(run) if a.tensor.name == "kv_indptr"]
    entry0_line = max(a.line for _i, a in indptr) if indptr else -1
    for i, a in stores_of(run):
        if a.tensor.name == "kv_indices":
            b, it, t = lane_term(a, "b", 0), lane_term(a, "iters", 1), lane_term(a, "t", 1)
            c0 = loop_var(run, a)
            if c0 is not None:   # prefix slots: column c < seq_len of the segment
                c = lane_term(a, "c", 2)
                dom = lambda it_, b_, t_, c_: z3.And(branch(it_, b_, t_), 0 <= c_, c_ < seq_len(b_))
                cell = lambda it_, b_, t_, c_: spec.kv_indices_cell(width, it_, seg(it_, b_, t_) + c_)
                what = "spec.kv_indices_cell(width, iters, kv_segment_start(...) + c), c < seq_len[b]"
                source = "req_to_token[row, c]"
                value = token(b, c)
                bind = [(c0, (fc / block_c) * block_c), (LANES[2], fc % block_c)]
            else:                # extension slots: e < iters after the prefix
                c = lane_term(a, "e", 2)
                dom = lambda it_, b_, t_, c_: z3.And(branch(it_, b_, t_), 0 <= c_, c_ < it_)
                cell = lambda it_, b_, t_, c_: spec.kv_indices_cell(width, it_, seg(it_, b_, t_) + seq_len(b_) + c_)
                what = "spec.kv_indices_cell(width, iters, kv_segment_start(...) + seq_len[b] + e), e < iters"
                source = "req_to_token[row, spec.kv_extension_read(seq_len[b], t, e, K, D, page_size)]"
                value = token(b, spec.kv_extension_read(seq_len(b), t, c, K, D, page))
                bind = [(LANES[2], fc)]
            out.append(sound(run, a, i, what + f" of its (iters, b, t, c), with value {source}",
                             dom(it, b, t, c), cell(it, b, t, c), value))
            bind = request_lane(run, fb, block) + [(LANES[1], pair)] + bind
            out.append(cover(run, a, i, what, (fi, fb, ft, fc), dom(fi, fb, ft, fc), bind,
                             [(b, fb), (it, fi), (t, ft), (c, fc)], pair_lemmas))
        elif a.line != entry0_line:   # entry z = b*K + t + 1 of row iters - 1
            b, it, t = lane_term(a, "b", 0), lane_term(a, "iters", 1), lane_term(a, "t", 1)
            z = b * K + t + 1
            value = spec.kv_indptr_entry(spec.kv_positions_prefix(P(b), t + 1, K, seq_len(b)), z, it)
            out.append(sound(run, a, i, "spec.kv_indices_cell(indptr_stride, iters, z) for z = b*K + t + 1 with "
                             "value spec.kv_indptr_entry(kv_positions_prefix(P[b], t + 1, K, seq_len[b]), z, iters)",
                             branch(it, b, t), spec.kv_indices_cell(stride, it, z), value))
            # every entry 1 <= z <= bs_d: the branch before it is (b, t) = ((z-1) div K, (z-1) mod K)
            dom = z3.And(1 <= fi, fi <= D, 1 <= fz, fz <= spec.draft_branches(num_seqs, K))
            defs = [("cell_b_of_z", fb == (fz - 1) / K), ("cell_t_of_z", ft == (fz - 1) % K)]
            lem = pair_lemmas + [symexec_lemmas.at(symexec_lemmas.div_mod_range, fz - 1, K), symexec_lemmas.at(symexec_lemmas.div_lt, fz - 1, K, num_seqs)]
            out.append(cover(run, a, i, "spec.kv_indices_cell(indptr_stride, iters, z), 1 <= z <= bs_d",
                             (fi, fz), dom, request_lane(run, fb, block) + [(LANES[1], pair)],
                             [(b, fb), (it, fi), (t, ft), (z, fz)], lem, defs))
        else:                          # entry 0 of every row, by program 0
            it = lane_term(a, "i", 0) + 1
            out.append(sound(run, a, i, "spec.kv_indices_cell(indptr_stride, iters, 0) with value "
                             "spec.kv_indptr_entry(0, 0, iters)", z3.And(1 <= it, it <= D),
                             spec.kv_indices_cell(stride, it, 0), spec.kv_indptr_entry(0, 0, it)))
            out.append(cover(run, a, i, "spec.kv_indices_cell(indptr_stride, iters, 0)", (fi,),
                             z3.And(1 <= fi, fi <= D), [(run.result.pid[0], z3.IntVal(0)), (LANES[0], fi - 1)],
                             [(it, fi)]))
    return out


# --- concrete replay: the counterexample launched through kv_plan ------------------------------

def replay(sp, conc: dict, plant=None, host: dict | None = None) -> Replay:
    """The counterexample as a batch (distinct req_to_token entries, so a copy from the
    wrong slot shows; or, for a value wrap, the counterexample's own entries), launched on
    the kernel (or ``plant``'s version of it) through ``kv_plan`` and compared with the
    reference (a row narrower than the reference's used length is an ``output`` difference)."""
    import torch

    from specbound.kernels import plan as concrete_plans
    from specbound.reference import draft_decode_kv_indices, samples

    host = host or {}
    ns_, k, d, page = conc["num_seqs"], conc["topk"], conc["num_steps"], conc["page_size"]
    contents = conc["_contents"]
    seq = [max(0, contents["seq_len"](i)) for i in range(ns_)]
    rows = [contents["pool_row"](i) for i in range(ns_)]
    r2t_w = max([spec.kv_req_to_token_span(s, k, d, page) for s in seq] + [conc["r2t_width"], 1])
    pool = max(rows + [conc["pool_rows"] - 1, 0]) + 1
    r2t_dtype = torch.int32 if sp.indices_dtype == "int32" else torch.int64
    if host.get("r2t_from_counterexample"):  # the entries themselves are the fault (a value wrap)
        r2t = torch.tensor([contents["req_to_token"](i) for i in range(pool * r2t_w)], dtype=r2t_dtype)
        r2t = r2t.reshape(pool, r2t_w)
    else:
        r2t = samples.req_to_token(pool, r2t_w, r2t_dtype)
    width = conc["width"]
    stride = max(conc["indptr_stride"], ns_ * k + 1)
    inputs = {"num_seqs": ns_, "topk": k, "num_steps": d, "page_size": page, "seq_lens": seq,
              "req_pool_indices": rows, "width": width, "indptr_stride": stride, "spec": sp.label,
              **block_b_inputs(sp, conc)}
    kv_indices = torch.full((d, width), -1, dtype=getattr(torch, sp.indices_dtype))
    kv_indptr = torch.full((d, stride), -1, dtype=getattr(torch, sp.indptr_dtype))
    seq_t = torch.tensor(seq, dtype=torch.int64)
    rows_t = torch.tensor(rows, dtype=torch.int64)
    plan = concrete_plans.kv_plan(
        {"req_pool_indices_ptr": rows_t, "req_to_token_ptr": r2t, "seq_lens_ptr": seq_t,
         "prefix_ptr": torch.tensor(spec.prefix_sums(seq)[:-1], dtype=torch.int64), "kv_indices_ptr": kv_indices,
         "kv_indptr_ptr": kv_indptr},
        num_seqs=ns_, topk=k, num_steps=d, page_size=page, width=width, indptr_stride=stride,
        r2t_stride0=r2t.stride(0), r2t_stride1=r2t.stride(1), block_b=concrete_block_b(sp, conc), pairs=sp.PAIRS, steps=sp.STEPS,
        block_c=sp.BLOCK_C)
    fn = kernel_of(*KERNEL, plant)

    def compare():
        want_i, want_p = draft_decode_kv_indices(rows_t, r2t, seq_t, topk=k, num_steps=d, page_size=page)
        used = want_i.shape[1]
        if width < used or not torch.equal(kv_indices[:, :used].to(torch.int64), want_i.to(torch.int64)) \
                or not torch.equal(kv_indptr[:, :ns_ * k + 1].to(torch.int64), want_p.to(torch.int64)):
            return "kv_indices / kv_indptr differ from the reference"
        return None
    return replays.run(lambda: plan.launch(fn), inputs, kernel=f"{KERNEL[1]}{' (planted)' if plant else ''}",
                       compare=compare)


# --- mutants -------------------------------------------------------------------------------------

MUTANTS = (
    swap(KERNEL, "MUT-KV-COPY-STOPS-EARLY",
         "the prefix copy loop stops one column block early (range(0, s_max - BLOCK_C, BLOCK_C)): the last "
         "block of every prefix is never copied, while every access stays in bounds (a truncated copy)",
         "kv", "NO-TRUNCATION", "range(0, s_max, BLOCK_C)", "range(0, s_max - BLOCK_C, BLOCK_C)"),
    KernelMutant("MUT-KV-TOKENS-INT32",
                 "req_to_token entries pass through int32 before the kv_indices store: a token slot >= 2^31 "
                 "wraps (an int32 wrap in a stored value; every offset stays in bounds)", "kv", "NO-WRAP",
                 Plant(*KERNEL, (("vals[:, None, :]", "vals.to(tl.int32)[:, None, :]"),)),
                 host={"r2t_from_counterexample": True}, expect=("wrap", "output"),
                 content_box={"req_to_token": (-2**40, 2**40)}),
    KernelMutant("MUT-27338-HOST-WIDTH-NO-TOPK",
                 "host sizes the kv_indices row num_seqs*C (topk factor dropped, sglang #27338) and skips the "
                 "capacity check", "kv", "IN-BOUNDS",
                 host={"width_hyp": lambda ns, k, c, d, w: w == ns * c, "room": True}, expect=("oob",)),
    swap(KERNEL, "MUT-KV-TAIL-NO-MASK",
         "prefix copy without the tail mask c < seq_len (the last column block copies past the prefix)",
         "kv", "IN-BOUNDS", "req_ok[:, None] & (c[None, :] < s2)", "req_ok[:, None]", expect=("oob", "output")),
    KernelMutant("MUT-KV-STEPS-LANES-BELOW-BATCH",
                 "STEPS lane bound smaller than num_steps, its device_assert removed: program 1 also writes "
                 "kv_indptr entry 0 (a race, not an out-of-bounds access)", "kv", "RACE-FREE",
                 Plant(*KERNEL, drop="device_assert(num_steps <= STEPS"),
                 host={"steps_lanes": lambda d, lanes: z3.And(lanes < d, d <= 2 * lanes)},
                 expect=("race",), limits={"num_steps": (1, 8), "num_seqs": (1, 4)}),
    swap(KERNEL, "MUT-KV-INDPTR-ENTRY-VALUE",
         "kv_indptr entry z = b*K + t + 1 stores P[b]*K + t*seq_len + z*iters (the branch's own prefix "
         "left out): every store stays in bounds, in its region and race free; only the footprint "
         "value (spec.kv_indptr_entry of spec.kv_positions_prefix) sees it", "kv", "FOOTPRINT",
         "(t2 + 1) * s2", "t2 * s2"),
    swap(KERNEL, "MUT-KV-EXTENSION-READ-STRIDE",
         "contiguous branches read their extension at seq_len + t*(num_steps - 1) + e: every read and "
         "store stays in bounds and every cell is the spec's, but branches share tokens; only the "
         "stored value (spec.kv_extension_read) sees it", "kv", "FOOTPRINT",
         "s2 + t2 * num_steps", "s2 + t2 * (num_steps - 1)"),
)

VERIFIER = KernelVerifier(
    "kv", *KERNEL, symbolic_run, ("IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE", "FOOTPRINT"),
    default_specs=(KvSpec(2, 8, 4, 16), KvSpec(1, 16, 8, 128, "int32", "int32")), all_specs=all_specs,
    limits=LIMITS, replay=replay, footprint=footprint_obligations, mutants=MUTANTS)
